//! The per-worker HTTP and HTTPS loops: accept on this worker's listeners, one
//! task per connection, requests parsed with the pure codec from a bounded
//! buffer and answered from this worker's shard or its owner's.
//!
//! A connection reads into one buffer and writes from another, both its own and
//! reused for every request it carries, so a keep-alive connection answers
//! without allocating once they have grown (forwarded announces and scrapes
//! allocate on the mesh, as for UDP). Pipelined requests are answered in order,
//! their answers written together once the buffer holds no further complete
//! request.
//!
//! Slow or silent clients cannot hold a worker: each connection is its own
//! task; it may wait for a request only so long (the idle timeout), a request
//! head must arrive whole within the request timeout of its first byte and an
//! answer be taken whole within the write timeout, however the bytes trickle
//! (the deadlines hold for whole heads and answers, over TLS too, see
//! `deadline`); a TLS handshake has its own timeout; and each worker serves a
//! bounded number of connections, a bounded number from each address, and
//! closes its longest-idle connection to make room for a new one (see
//! `crate::connections`).

use std::cell::{Cell, RefCell};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use crate::config::HttpConfig;
use crate::connections::{AdmissionCounters, ConnectionTable, Slot};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_rustls::server::TlsStream;
use futures_rustls::TlsAcceptor;
use glommio::net::{TcpListener, TcpStream};
use rustls::ServerConfig;
use tracing::debug;
use tracker_proto::{canonical_ip, Announce, AnswerPeers, InfoHash, IpNetwork, ScrapeStats};
use tracker_runtime::config::SwarmConfig;
use tracker_runtime::contain::Contained;
use tracker_runtime::counters;
use tracker_runtime::counters::ByFamily;
use tracker_runtime::mesh::RouteError;
use tracker_runtime::metrics::{
    Label, MetricSource, Sample, CONNECTIONS_ACCEPTED, HTTP_ERRORS, HTTP_FAILURE_RESPONSES,
    HTTP_FULL_SCRAPES, OPEN_CONNECTIONS, PANICS, RECEIVED_BYTES, REQUESTS, RESPONSES, SENT_BYTES,
    TLS_HANDSHAKES, TLS_HANDSHAKE_FAILURES,
};
use tracker_runtime::quantum::{waited, Quantum};
use tracker_runtime::reloadable::LocalCopy;
use tracker_runtime::shard::Shard;
use tracker_runtime::shutdown::StopEvent;
use tracker_swarm::{AnnounceRefused, SwarmCounts};

use crate::deadline::DeadlineStream;
use crate::tls::SharedTlsConfig;
use tracker_proto::http::{
    parse_announce, parse_head, parse_scrape, AnnounceRequest, Connection, Endpoint, Parsed,
    RealIp, Request, RequestError,
};
use tracker_proto::http::{
    write_announce, write_failure, write_response, write_scrape, AnnounceResponse,
};

/// The first size of a connection's read buffer; it doubles up to
/// `http.max_request_head_bytes` for clients that send long heads.
const INITIAL_READ_BUFFER: usize = 2048;
/// Answers to pipelined requests are gathered up to this many bytes before
/// they are written.
const WRITE_BATCH: usize = 64 << 10;
/// How long a connection closed by the tracker keeps reading (and dropping)
/// what the client still sends, so that the kernel does not answer that data
/// with a reset that could destroy the last answer before the client read it.
const LINGER: Duration = Duration::from_secs(1);
/// Bytes read at most while lingering.
const LINGER_BYTES: usize = 64 << 10;
/// The failure reason of a request whose handling failed (a contained panic).
const INTERNAL_ERROR: &str = "internal error";

counters! {
    /// Per-worker counters of HTTP and HTTPS together.
    pub struct HttpStats {
        /// Connections closed at once because the worker serves its maximum
        /// and none of them is idle.
        pub rejected: Counter => HTTP_ERRORS { kind = "connection_limit" },
        /// Connections closed at once because their address holds its
        /// maximum (`http.max_connections_per_address`).
        pub address_limit: Counter => HTTP_ERRORS { kind = "address_limit" },
        /// Idle connections closed to make room for a new one.
        pub evicted: Counter => HTTP_ERRORS { kind = "evicted_idle" },
        pub accept_errors: Counter => HTTP_ERRORS { kind = "accept_failed" },
        /// Connections closed because no request began within the idle
        /// timeout.
        pub idle_timeouts: Counter => HTTP_ERRORS { kind = "idle_timeout" },
        /// Connections closed because a request head did not arrive whole
        /// within the request timeout.
        pub request_timeouts: Counter => HTTP_ERRORS { kind = "request_timeout" },
        /// Connections closed because the client did not take an answer whole
        /// within the write timeout.
        pub write_timeouts: Counter => HTTP_ERRORS { kind = "write_timeout" },
        pub not_found: Counter => HTTP_ERRORS { kind = "not_found" },
        /// Request heads larger than `http.max_request_head_bytes`.
        pub head_too_large: Counter => HTTP_ERRORS { kind = "head_too_large" },
        /// Other request heads that could not be served (malformed, a body,
        /// a method other than GET, a missing real-IP header).
        pub bad_request: Counter => HTTP_ERRORS { kind = "bad_request" },
        /// Requests carrying the real-IP header from a client that is not a
        /// trusted proxy: the header was ignored.
        pub untrusted_real_ip: Counter => HTTP_ERRORS { kind = "untrusted_real_ip" },
        /// Announces refused by a limit of the owner's store: it holds its
        /// maximum of torrents, or the address has created its budget of
        /// new torrents this minute.
        pub refused: Counter => HTTP_ERRORS { kind = "refused" },
        /// Announces refused by the access list ("torrent not allowed").
        pub not_allowed: Counter => HTTP_ERRORS { kind = "not_allowed" },
        /// Requests for other shards refused because too many await answers.
        pub overloaded: Counter => HTTP_ERRORS { kind = "overloaded" },
        /// Answers carrying a bencoded failure reason (any status).
        pub failures: Counter => HTTP_FAILURE_RESPONSES {},
        pub full_scrapes: Counter => HTTP_FULL_SCRAPES {},
        pub tls_handshakes: Counter => TLS_HANDSHAKES {},
        pub tls_handshake_failures: Counter => TLS_HANDSHAKE_FAILURES { kind = "error" },
        pub tls_handshake_timeouts: Counter => TLS_HANDSHAKE_FAILURES { kind = "timeout" },
        /// Requests that got a 500 because the owner of their torrent failed
        /// to serve them (it counted the panic).
        pub failed_at_owner: Counter => HTTP_ERRORS { kind = "failed_at_owner" },
        /// Requests (or connections) whose handling panicked: contained, the
        /// request answered with a 500 and the connection closed (or, for a
        /// panic outside a request's answer, the connection dropped).
        pub panics: Counter => PANICS { component = "http" },
    }
}

counters! {
    /// Per-worker counters of one protocol, HTTP or HTTPS.
    pub struct HttpTraffic {
        /// Connections accepted and served.
        pub accepted: Counter => CONNECTIONS_ACCEPTED {},
        /// Announces and scrapes (complete heads for those paths, whether
        /// their parameters were good or not), by the client's address.
        pub announces: ByFamily => REQUESTS { action = "announce" },
        pub scrapes: ByFamily => REQUESTS { action = "scrape" },
        pub announce_responses: ByFamily => RESPONSES { action = "announce" },
        pub scrape_responses: ByFamily => RESPONSES { action = "scrape" },
        pub bytes_in: Counter => RECEIVED_BYTES {},
        pub bytes_out: Counter => SENT_BYTES {},
    }
}

impl HttpTraffic {
    /// Requests and answers of `endpoint`.
    fn of(&self, endpoint: Endpoint) -> (&ByFamily, &ByFamily) {
        match endpoint {
            Endpoint::Announce => (&self.announces, &self.announce_responses),
            Endpoint::Scrape => (&self.scrapes, &self.scrape_responses),
        }
    }
}

/// The `protocol` label of each entry of `HttpService::traffic`.
const PROTOCOLS: [&[Label]; 2] = [&[("protocol", "http")], &[("protocol", "https")]];

impl HttpService {
    /// The counters of HTTPS (`tls`) or plain HTTP.
    fn traffic_of(&self, tls: bool) -> &HttpTraffic {
        let [http, https] = &self.traffic;
        if tls {
            https
        } else {
            http
        }
    }
}

impl MetricSource for HttpService {
    fn samples(&self, out: &mut Vec<Sample>) {
        self.stats.samples(&[], out);
        for (traffic, scope) in self.traffic.iter().zip(PROTOCOLS) {
            traffic.samples(scope, out);
        }
        let tls = self.open_tls.get();
        let open = [self.open.get() - tls, tls];
        for (open, scope) in open.into_iter().zip(PROTOCOLS) {
            out.push(Sample::new(&OPEN_CONNECTIONS, scope, open as u64));
        }
    }
}

/// A worker's HTTP service: shared by its HTTP and HTTPS listeners and by
/// their connection tasks.
pub struct HttpService {
    shard: Rc<Shard>,
    swarm: SwarmConfig,
    config: HttpConfig,
    idle_timeout: Duration,
    request_timeout: Duration,
    write_timeout: Duration,
    handshake_timeout: Duration,
    /// Admission: the caps on connections, per worker and per address.
    connections: Rc<ConnectionTable>,
    /// Whose real-IP header is believed (empty without one).
    trusted_proxies: Vec<IpNetwork>,
    /// This worker's view of the TLS configuration (None without HTTPS).
    tls: Option<RefCell<LocalCopy<ServerConfig>>>,
    /// Connections open, HTTP and HTTPS together, and HTTPS alone.
    open: Cell<usize>,
    open_tls: Cell<usize>,
    /// Fired when the tracker stops: no more connections are accepted, and
    /// open ones close once they have answered what they received.
    stop: StopEvent,
    pub stats: HttpStats,
    /// HTTP, then HTTPS.
    pub traffic: [HttpTraffic; 2],
}

/// A connection's buffers and scratch space, reused for each of its requests.
#[derive(Default)]
struct ConnectionState {
    /// Bytes received; `buf[start..end]` is not yet answered.
    buf: Vec<u8>,
    start: usize,
    end: usize,
    /// Answers not yet written.
    out: Vec<u8>,
    served: usize,
    hashes: Vec<InfoHash>,
    stats: Vec<ScrapeStats>,
    files: Vec<(InfoHash, ScrapeStats)>,
}

impl ConnectionState {
    /// Makes room after `end` in the read buffer: moves the unanswered part to
    /// the front, or grows the buffer up to `max` bytes. False when the buffer
    /// is one incomplete head of `max` bytes.
    fn make_room(&mut self, max: usize) -> bool {
        if self.start > 0 {
            self.buf.copy_within(self.start..self.end, 0);
            self.end -= self.start;
            self.start = 0;
            return true;
        }
        if self.buf.len() >= max {
            return false;
        }
        // Not `clamp`: the limit may be below the initial size.
        let len = (self.buf.len() * 2).max(INITIAL_READ_BUFFER).min(max);
        self.buf.resize(len, 0);
        true
    }
}

/// Why a connection ended, which decides whether to linger before closing.
enum End {
    /// The client closed, or the connection failed: nothing more to say.
    Gone,
    /// The tracker closed it after a last answer.
    Closed,
}

/// A stream the server speaks HTTP over: plain TCP or TLS on TCP. The TCP
/// stream underneath carries the deadlines.
trait Transport: AsyncRead + AsyncWrite + Unpin {
    /// HTTPS: which of `HttpService::traffic` counts it.
    const TLS: bool;
    fn tcp(&mut self) -> &mut DeadlineStream;
}

impl Transport for DeadlineStream {
    const TLS: bool = false;
    fn tcp(&mut self) -> &mut DeadlineStream {
        self
    }
}

impl Transport for TlsStream<DeadlineStream> {
    const TLS: bool = true;
    fn tcp(&mut self) -> &mut DeadlineStream {
        self.get_mut().0
    }
}

/// Counts a connection as open, and holds its slot, for as long as its task
/// holds this; true for HTTPS.
struct OpenConnection {
    service: Rc<HttpService>,
    tls: bool,
    slot: Slot,
}

impl OpenConnection {
    fn new(service: Rc<HttpService>, tls: bool, slot: Slot) -> Self {
        service.open.set(service.open.get() + 1);
        if tls {
            service.open_tls.set(service.open_tls.get() + 1);
        }
        OpenConnection { service, tls, slot }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let service = &self.service;
        service.open.set(service.open.get() - 1);
        if self.tls {
            service.open_tls.set(service.open_tls.get() - 1);
        }
    }
}

/// What a connection waits for when it reads, and so which deadline holds.
#[derive(Clone, Copy)]
enum Waiting {
    /// The first byte of a request, since this moment.
    Idle(Instant),
    /// The rest of a request head begun at this moment.
    Head(Instant),
}

impl HttpService {
    /// `tls` is needed when any listener serves HTTPS.
    pub fn new(
        shard: Rc<Shard>,
        swarm: SwarmConfig,
        config: &HttpConfig,
        tls: Option<SharedTlsConfig>,
    ) -> Rc<Self> {
        let service = Rc::new(HttpService {
            shard,
            swarm,
            idle_timeout: Duration::from_secs(config.idle_timeout_secs.into()),
            request_timeout: Duration::from_secs(config.request_timeout_secs.into()),
            write_timeout: Duration::from_secs(config.write_timeout_secs.into()),
            handshake_timeout: Duration::from_secs(config.tls_handshake_timeout_secs.into()),
            connections: ConnectionTable::new(
                config.max_connections_per_worker,
                config.max_connections_per_address,
            ),
            trusted_proxies: config.trusted_proxies(),
            config: config.clone(),
            tls: tls.map(|shared| RefCell::new(LocalCopy::new(shared))),
            open: Cell::new(0),
            open_tls: Cell::new(0),
            stop: StopEvent::default(),
            stats: HttpStats::default(),
            traffic: Default::default(),
        });
        let source: Weak<dyn MetricSource> = Rc::downgrade(&service) as _;
        service.shard.add_metric_source(source);
        service
    }

    /// Stops accepting: every `serve` returns and closes its listener; each
    /// connection answers the requests it has received (the last answer says
    /// `Connection: close`) and closes, and idle ones close at once. See
    /// [`open_connections`](Self::open_connections).
    pub fn stop(&self) {
        self.stop.fire();
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.get()
    }

    /// Serves one listener (bound by [`bind_reuseport`]) until it fails for
    /// good (Err) or [`stop`](Self::stop) is called (Ok); `tls` makes it
    /// HTTPS.
    pub async fn serve(
        self: Rc<Self>,
        listener: std::net::TcpListener,
        tls: bool,
    ) -> Result<(), String> {
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        if tls && self.tls.is_none() {
            return Err(format!("https {local}: no TLS configuration"));
        }
        // SAFETY: the fd comes from a listening socket we own and hand over whole.
        let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
        let mut quantum = Quantum::default();
        loop {
            let accepted =
                futures_lite::future::or(async { Some(listener.accept().await) }, async {
                    self.stop.wait().await;
                    None
                });
            let stream = match quantum.wait(accepted).await {
                None => return Ok(()),
                Some(Ok(stream)) => stream,
                Some(Err(e)) => {
                    self.stats.accept_errors.inc();
                    crate::accept::accept_failed("http", local, e).await?;
                    continue;
                }
            };
            let Ok(peer) = stream.peer_addr() else {
                continue;
            };
            let peer_ip = canonical_ip(peer.ip());
            // A proxy speaks for many clients: not capped per address.
            let admission = self
                .connections
                .admit(peer_ip, self.is_trusted_proxy(peer_ip));
            let Some(slot) = admission.counted(AdmissionCounters {
                evicted: &self.stats.evicted,
                address_limit: &self.stats.address_limit,
                full: &self.stats.rejected,
            }) else {
                continue;
            };
            self.traffic_of(tls).accepted.inc();
            // The newest certificate, for new connections only; one relaxed
            // load when nothing changed.
            let acceptor = match (&self.tls, tls) {
                (Some(config), true) => Some(TlsAcceptor::from(config.borrow_mut().get().clone())),
                _ => None,
            };
            let open = OpenConnection::new(self.clone(), tls, slot);
            glommio::spawn_local(async move {
                // A panic anywhere in the connection drops just it.
                let connection = open
                    .service
                    .connection(stream, peer_ip, acceptor, &open.slot);
                Contained::new(&open.service.stats.panics, connection).await;
                drop(open);
            })
            .detach();
            // An accept that finds a connection waiting returns at once: let
            // the connections (and everything else) run between accepts.
            quantum.yield_now().await;
        }
    }

    async fn connection(
        &self,
        stream: TcpStream,
        peer_ip: IpAddr,
        acceptor: Option<TlsAcceptor>,
        slot: &Slot,
    ) {
        // Each answer is written whole; do not let Nagle hold back its tail.
        let _ = stream.set_nodelay(true);
        let mut stream = DeadlineStream::new(stream);
        let Some(acceptor) = acceptor else {
            return self.serve_connection(stream, peer_ip, slot).await;
        };
        let deadline = Instant::now() + self.handshake_timeout;
        stream.set_read_deadline(Some(deadline));
        stream.set_write_deadline(Some(deadline));
        // A stop, or an eviction, drops a handshake: it has no request yet to
        // answer.
        let handshake =
            futures_lite::future::or(async { Some(acceptor.accept(stream).await) }, async {
                futures_lite::future::or(self.stop.wait(), slot.evicted()).await;
                None
            });
        let (Some(handshake), _) = waited(handshake).await else {
            return;
        };
        match handshake {
            Ok(stream) => {
                self.stats.tls_handshakes.inc();
                self.serve_connection(stream, peer_ip, slot).await;
            }
            Err(e) if e.kind() == io::ErrorKind::TimedOut => {
                self.stats.tls_handshake_timeouts.inc()
            }
            Err(e) => {
                self.stats.tls_handshake_failures.inc();
                debug!("https {peer_ip}: handshake failed: {e}");
            }
        }
    }

    async fn serve_connection<S: Transport>(&self, mut stream: S, peer_ip: IpAddr, slot: &Slot) {
        let mut state = ConnectionState::default();
        let end = self.requests(&mut stream, peer_ip, slot, &mut state).await;
        if let End::Closed = end {
            self.close(&mut stream, &mut state.buf).await;
        }
    }

    /// Answers the requests of one connection until it ends.
    async fn requests<S: Transport>(
        &self,
        stream: &mut S,
        peer_ip: IpAddr,
        slot: &Slot,
        c: &mut ConnectionState,
    ) -> End {
        let real_ip = match self.config.real_ip_header() {
            None => RealIp::Off,
            Some(name) if self.is_trusted_proxy(peer_ip) => RealIp::Required(name),
            Some(name) => RealIp::Ignored(name),
        };
        let mut waiting = Waiting::Idle(Instant::now());
        let mut quantum = Quantum::default();
        loop {
            // Answer every complete request already received, in order.
            loop {
                // start <= end <= buf.len() always; a broken invariant ends
                // the connection rather than the worker.
                let Some(unanswered) = c.buf.get(c.start..c.end) else {
                    return End::Gone;
                };
                match parse_head(unanswered, real_ip) {
                    Ok(Parsed::Partial) => break,
                    Ok(Parsed::Complete { request, consumed }) => {
                        if request.real_ip_ignored {
                            self.stats.untrusted_real_ip.inc();
                        }
                        let (requests, responses) = self.traffic_of(S::TLS).of(request.endpoint);
                        let client_ip = request.real_ip.map_or(peer_ip, canonical_ip);
                        requests.inc(client_ip);
                        c.served += 1;
                        let last = c.served >= self.config.max_requests_per_connection
                            || !request.connection.keep_alive();
                        let connection = if last {
                            Connection::Close
                        } else {
                            request.connection
                        };
                        let answered_from = c.out.len();
                        let scratch = Scratch {
                            out: &mut c.out,
                            hashes: &mut c.hashes,
                            stats: &mut c.stats,
                            files: &mut c.files,
                        };
                        let answer = self.answer(&request, connection, peer_ip, scratch);
                        if Contained::new(&self.stats.panics, answer).await.is_none() {
                            // Contained: the half-written answer is replaced
                            // by a 500, and the connection ends, as nothing
                            // it carries is to be trusted after this.
                            c.out.truncate(answered_from);
                            return self
                                .answer_and_close(stream, &mut c.out, 500, INTERNAL_ERROR)
                                .await;
                        }
                        responses.inc(client_ip);
                        c.start += consumed;
                        if last {
                            return match self.flush(stream, &mut c.out).await {
                                Ok(()) => End::Closed,
                                Err(()) => End::Gone,
                            };
                        }
                        if c.out.len() >= WRITE_BATCH
                            && self.flush(stream, &mut c.out).await.is_err()
                        {
                            return End::Gone;
                        }
                    }
                    Err(error) => {
                        // The position in the stream is lost: answer and close.
                        match error {
                            RequestError::NotFound => self.stats.not_found.inc(),
                            RequestError::HeadTooLarge => self.stats.head_too_large.inc(),
                            _ => self.stats.bad_request.inc(),
                        }
                        return self.fail_and_close(stream, &mut c.out, error).await;
                    }
                }
            }
            if !c.out.is_empty() {
                if self.flush(stream, &mut c.out).await.is_err() {
                    return End::Gone;
                }
                // The client has its answers: it waits for its next request,
                // or has sent part of it already (pipelining), whose head
                // then counts from now.
                let now = Instant::now();
                if c.start == c.end {
                    waiting = Waiting::Idle(now);
                    slot.set_idle(true);
                } else {
                    waiting = Waiting::Head(now);
                }
                // Reads and writes that find the socket ready return at once,
                // so a client that keeps the pipeline full would never let the
                // executor run anything else (other connections, other
                // workers' requests on the mesh).
                quantum.yield_now().await;
            }
            if c.start == c.end {
                (c.start, c.end) = (0, 0);
            }
            if c.end == c.buf.len() && !c.make_room(self.config.max_request_head_bytes) {
                self.stats.head_too_large.inc();
                return self
                    .fail_and_close(stream, &mut c.out, RequestError::HeadTooLarge)
                    .await;
            }
            let deadline = match waiting {
                Waiting::Idle(since) => since + self.idle_timeout,
                Waiting::Head(since) => since + self.request_timeout,
            };
            if Instant::now() >= deadline {
                self.count_read_timeout(waiting);
                return End::Gone;
            }
            if self.stop.is_fired() {
                // Every complete request received is answered (pipelined ones
                // too): close, lingering so that the answers get through.
                return End::Closed;
            }
            stream.tcp().set_read_deadline(Some(deadline));
            let Some(free) = c.buf.get_mut(c.end..) else {
                return End::Gone;
            };
            let read = futures_lite::future::or(async { Some(stream.read(free).await) }, async {
                futures_lite::future::or(self.stop.wait(), slot.evicted()).await;
                None
            });
            let Some(read) = quantum.wait(read).await else {
                // Evicted while idle (counted when the newcomer was admitted):
                // nothing to answer. A stop closes as above.
                if slot.is_evicted() {
                    return End::Gone;
                }
                return End::Closed;
            };
            match read {
                Ok(0) => return End::Gone,
                Ok(n) => {
                    self.traffic_of(S::TLS).bytes_in.add(n as u64);
                    c.end += n;
                    if let Waiting::Idle(_) = waiting {
                        waiting = Waiting::Head(Instant::now());
                        slot.set_idle(false);
                    }
                }
                Err(e) => {
                    if e.kind() == io::ErrorKind::TimedOut {
                        self.count_read_timeout(waiting);
                    }
                    return End::Gone;
                }
            }
        }
    }

    fn is_trusted_proxy(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(ip))
    }

    fn count_read_timeout(&self, waiting: Waiting) {
        match waiting {
            Waiting::Idle(_) => self.stats.idle_timeouts.inc(),
            Waiting::Head(_) => self.stats.request_timeouts.inc(),
        }
    }

    /// Answers an error that leaves the stream position unknown, then ends
    /// the connection.
    async fn fail_and_close<S: Transport>(
        &self,
        stream: &mut S,
        out: &mut Vec<u8>,
        error: RequestError,
    ) -> End {
        self.answer_and_close(stream, out, error.status(), error.reason())
            .await
    }

    /// Answers with a failure reason, then ends the connection.
    async fn answer_and_close<S: Transport>(
        &self,
        stream: &mut S,
        out: &mut Vec<u8>,
        status: u16,
        reason: &str,
    ) -> End {
        self.fail(out, status, Connection::Close, reason);
        match self.flush(stream, out).await {
            Ok(()) => End::Closed,
            Err(()) => End::Gone,
        }
    }

    /// Writes out all gathered answers; Err when the client is gone or does
    /// not take them whole within the write timeout.
    async fn flush<S: Transport>(&self, stream: &mut S, out: &mut Vec<u8>) -> Result<(), ()> {
        stream
            .tcp()
            .set_write_deadline(Some(Instant::now() + self.write_timeout));
        let written = async {
            stream.write_all(out).await?;
            // TLS holds records until flushed; plain TCP flushes at once.
            stream.flush().await
        }
        .await;
        match written {
            Ok(()) => {
                self.traffic_of(S::TLS).bytes_out.add(out.len() as u64);
                out.clear();
                Ok(())
            }
            Err(e) => {
                if e.kind() == io::ErrorKind::TimedOut {
                    self.stats.write_timeouts.inc();
                }
                Err(())
            }
        }
    }

    /// Ends a connection the tracker chose to close: says so (TLS close_notify
    /// and a TCP FIN), then reads and drops what the client still sends for a
    /// moment, so that unread data does not make the kernel reset the
    /// connection under the last answer.
    async fn close<S: Transport>(&self, stream: &mut S, buf: &mut Vec<u8>) {
        let deadline = Instant::now() + LINGER;
        stream.tcp().set_write_deadline(Some(deadline));
        stream.tcp().set_read_deadline(Some(deadline));
        if stream.close().await.is_err() {
            return;
        }
        if buf.is_empty() {
            buf.resize(INITIAL_READ_BUFFER, 0);
        }
        let mut drained = 0;
        while drained < LINGER_BYTES {
            match stream.read(buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => drained += n,
            }
        }
    }

    /// Appends the answer to one request.
    async fn answer(
        &self,
        request: &Request<'_>,
        connection: Connection,
        peer_ip: IpAddr,
        s: Scratch<'_>,
    ) {
        match request.endpoint {
            Endpoint::Announce => match parse_announce(request.query) {
                Ok(announce) => {
                    let ip = request.real_ip.map_or(peer_ip, canonical_ip);
                    self.announce(&announce, ip, connection, s.out).await;
                }
                Err(e) => self.fail(s.out, e.status(), connection, e.reason()),
            },
            Endpoint::Scrape => {
                match parse_scrape(request.query, self.config.max_scrape_hashes, s.hashes) {
                    Ok(()) => self.scrape(connection, s).await,
                    Err(e) => self.fail(s.out, e.status(), connection, e.reason()),
                }
            }
        }
    }

    async fn announce(
        &self,
        req: &AnnounceRequest<'_>,
        ip: IpAddr,
        connection: Connection,
        out: &mut Vec<u8>,
    ) {
        // HTTP has no datagram to fit: only swarm.max_numwant caps it.
        let numwant = self.swarm.numwant(req.numwant, u32::MAX);
        let announce = Announce {
            info_hash: req.info_hash,
            peer_id: req.peer_id,
            peer_addr: SocketAddr::new(ip, req.port),
            event: req.event,
            left: req.left,
            numwant,
            peer_ids: !req.compact && !req.no_peer_id,
        };
        let routed = self.shard.announce(announce, |counts, peers| {
            self.write_announce(out, connection, req, counts, peers)
        });
        if let Err(e) = routed.await {
            self.route_failed(out, connection, e);
        }
    }

    fn write_announce(
        &self,
        out: &mut Vec<u8>,
        connection: Connection,
        req: &AnnounceRequest<'_>,
        counts: Result<SwarmCounts, AnnounceRefused>,
        peers: &AnswerPeers,
    ) {
        match counts {
            Ok(SwarmCounts { seeders, leechers }) => {
                let answer = AnnounceResponse {
                    interval: self.swarm.announce_interval_secs,
                    min_interval: None,
                    complete: seeders,
                    incomplete: leechers,
                    peers,
                    compact: req.compact,
                    no_peer_id: req.no_peer_id,
                };
                write_response(out, 200, connection, |body| write_announce(body, &answer));
            }
            Err(refused) => {
                match refused {
                    AnnounceRefused::NotAllowed => self.stats.not_allowed.inc(),
                    AnnounceRefused::TorrentLimit | AnnounceRefused::AddressBudget => {
                        self.stats.refused.inc()
                    }
                }
                self.fail(out, 200, connection, refused.reason());
            }
        }
    }

    async fn scrape(&self, connection: Connection, s: Scratch<'_>) {
        if s.hashes.is_empty() {
            // A full scrape: the codec reads no info_hash as asking for one.
            return self.full_scrape(connection, s).await;
        }
        s.files.clear();
        if s.hashes.iter().all(|h| self.shard.is_local(h)) {
            s.files
                .extend(s.hashes.iter().map(|h| (*h, self.shard.scrape_local(h))));
        } else {
            if let Err(e) = self.shard.scrape(s.hashes, s.stats).await {
                return self.route_failed(s.out, connection, e);
            }
            s.files
                .extend(s.hashes.iter().copied().zip(s.stats.iter().copied()));
        }
        write_response(s.out, 200, connection, |body| write_scrape(body, s.files));
    }

    async fn full_scrape(&self, connection: Connection, s: Scratch<'_>) {
        if !self.config.full_scrape {
            return self.fail(
                s.out,
                200,
                connection,
                "full scrape is disabled: give info_hash",
            );
        }
        self.stats.full_scrapes.inc();
        s.files.clear();
        if let Err(e) = self
            .shard
            .scrape_some(self.config.full_scrape_max_torrents, s.files)
            .await
        {
            return self.route_failed(s.out, connection, e);
        }
        write_response(s.out, 200, connection, |body| write_scrape(body, s.files));
    }

    fn route_failed(&self, out: &mut Vec<u8>, connection: Connection, e: RouteError) {
        let (status, reason) = match e {
            RouteError::Overloaded => (503, "tracker overloaded: try again later"),
            RouteError::OwnerGone => (503, "tracker is stopping"),
            RouteError::Failed => {
                self.stats.failed_at_owner.inc();
                return self.fail(out, 500, connection, INTERNAL_ERROR);
            }
        };
        self.stats.overloaded.inc();
        self.fail(out, status, connection, reason);
    }

    fn fail(&self, out: &mut Vec<u8>, status: u16, connection: Connection, reason: &str) {
        self.stats.failures.inc();
        write_response(out, status, connection, |body| {
            write_failure(body, reason.as_bytes())
        });
    }
}

/// The parts of a connection's state that one request's answer works in (all
/// but the read buffer, which the request borrows).
struct Scratch<'a> {
    out: &'a mut Vec<u8>,
    hashes: &'a mut Vec<InfoHash>,
    stats: &'a mut Vec<ScrapeStats>,
    files: &'a mut Vec<(InfoHash, ScrapeStats)>,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(buf: &[u8], start: usize) -> ConnectionState {
        ConnectionState {
            buf: buf.to_vec(),
            start,
            end: buf.len(),
            ..ConnectionState::default()
        }
    }

    #[test]
    fn room_is_made_by_moving_then_by_growing_up_to_the_limit() {
        let mut c = state(b"answeredGET /a", 8);
        assert!(c.make_room(4096));
        assert_eq!((&c.buf[..c.end], c.start), (&b"GET /a"[..], 0));
        assert_eq!(c.buf.len(), 14, "moving does not grow");

        let mut c = state(b"", 0);
        assert!(c.make_room(4096));
        assert_eq!(c.buf.len(), INITIAL_READ_BUFFER);
        c.end = c.buf.len();
        assert!(c.make_room(4096));
        assert_eq!(c.buf.len(), 4096);
        c.end = c.buf.len();
        assert!(
            !c.make_room(4096),
            "a full buffer at the limit is a head too large"
        );
    }

    #[test]
    fn a_limit_below_the_initial_size_is_kept() {
        let mut c = state(b"", 0);
        assert!(c.make_room(512));
        assert_eq!(c.buf.len(), 512);
        c.end = 512;
        assert!(!c.make_room(512));
    }
}
