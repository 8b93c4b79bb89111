//! The per-worker UDP loop: receive a batch, answer what this shard owns at
//! once, hand the rest to their owners, send the batch.

use crate::coalesce::Coalesce;
use crate::config::UdpConfig;
use crate::cookie::ConnectionCookies;
use std::cell::{Cell, RefCell};
use std::io;
use std::mem;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};
use tracing::{debug, warn};
use tracker_net::udp::{send_one, LocalAddr, RecvBatch, SendBatch, BATCH};
use tracker_proto::canonical_ip;
use tracker_proto::udp::{
    max_peers, write_announce_response, write_connect_response, write_error_response,
    write_scrape_response, ConnectionId, IpFamily, Request, TransactionId,
};
use tracker_proto::{Announce, InfoHash, ScrapeStats};
use tracker_runtime::clock;
use tracker_runtime::config::{ExemptNetworks, SwarmConfig};
use tracker_runtime::contain::{contain, Contained};
use tracker_runtime::counters;
use tracker_runtime::mesh::{AnnounceAnswers, RouteError};
use tracker_runtime::metrics::{
    MetricSource, Sample, ANNOUNCES_ROUTED, PANICS, RECEIVED_BYTES, REQUESTS, RESPONSES,
    SENT_BYTES, UDP_ERRORS, UDP_ERROR_RESPONSES,
};
use tracker_runtime::quantum::Quantum;
use tracker_runtime::shard::Shard;
use tracker_runtime::shutdown::StopEvent;
use tracker_runtime::throttle::LogThrottle;
use tracker_swarm::ratelimit::RateLimit;
use tracker_swarm::{AnnounceRefused, SwarmCounts};

counters! {
    /// Per-worker UDP counters, exported with `protocol="udp"`.
    pub struct UdpStats {
        pub connects: ByFamily => REQUESTS { action = "connect" },
        /// Announces with a valid connection id.
        pub announces: ByFamily => REQUESTS { action = "announce" },
        /// Scrapes with a valid connection id.
        pub scrapes: ByFamily => REQUESTS { action = "scrape" },
        /// Announces answered by this worker, which owns their torrent (with
        /// steering on, nearly all of them).
        pub announces_local: Counter => ANNOUNCES_ROUTED { route = "local" },
        /// Announces sent to the worker that owns their torrent.
        pub announces_forwarded: Counter => ANNOUNCES_ROUTED { route = "forwarded" },
        /// Answers made, error answers included; a failed send is counted in
        /// `send_errors` too.
        pub connect_responses: ByFamily => RESPONSES { action = "connect" },
        pub announce_responses: ByFamily => RESPONSES { action = "announce" },
        pub scrape_responses: ByFamily => RESPONSES { action = "scrape" },
        pub bytes_in: Counter => RECEIVED_BYTES {},
        pub bytes_out: Counter => SENT_BYTES {},
        pub errors_sent: Counter => UDP_ERROR_RESPONSES {},
        /// Announces and scrapes whose connection id was not one we issued (or
        /// has expired): dropped without an answer.
        pub bad_connection_id: Counter => UDP_ERRORS { kind = "bad_connection_id" },
        /// Packets that did not parse (answered with an error only when their
        /// connection id was valid).
        pub malformed: Counter => UDP_ERRORS { kind = "malformed" },
        /// Announces refused by a limit of the owner's store (it holds its
        /// maximum of torrents, or the address has created its budget of
        /// new torrents this minute), or in private mode by the site's
        /// rules; and in private mode every scrape.
        pub refused: Counter => UDP_ERRORS { kind = "refused" },
        /// Announces refused by the access list ("torrent not allowed").
        pub not_allowed: Counter => UDP_ERRORS { kind = "not_allowed" },
        /// Requests for other shards dropped because too many await answers.
        pub dropped_overloaded: Counter => UDP_ERRORS { kind = "overloaded" },
        pub send_errors: Counter => UDP_ERRORS { kind = "send_failed" },
        /// Connect requests dropped by `udp.max_connects_per_ip_per_sec`.
        pub connects_limited: Counter => UDP_ERRORS { kind = "connect_limited" },
        /// Requests dropped because the owner of their torrent failed to serve
        /// them (it counted the panic).
        pub failed_at_owner: Counter => UDP_ERRORS { kind = "failed_at_owner" },
        /// Requests whose handling panicked: contained, the datagram dropped
        /// unanswered, the worker unharmed.
        pub panics: Counter => PANICS { component = "udp" },
    }
}

/// An error answer's action and transaction id, before its message.
const ERROR_HEADER_BYTES: usize = 8;

impl MetricSource for UdpService {
    fn samples(&self, out: &mut Vec<Sample>) {
        self.stats.samples(&[("protocol", "udp")], out);
    }
}

/// A worker's UDP service: shared by its sockets and by the tasks that wait for
/// answers from other workers.
pub struct UdpService {
    pub(crate) shard: Rc<Shard>,
    cookies: ConnectionCookies,
    swarm: SwarmConfig,
    max_scrape_hashes: usize,
    /// How long datagrams may gather at half load (`udp.coalesce_us`).
    coalesce: Duration,
    /// Fired when the tracker stops: the sockets take no more datagrams.
    stop: StopEvent,
    /// Tasks waiting on another worker's answer (see `InFlight`).
    in_flight: Cell<usize>,
    connect_limit: Option<RefCell<RateLimit>>,
    /// Clients the connect limit does not count (`runtime.exempt_networks`).
    exempt: ExemptNetworks,
    /// Where the answers that other workers gave are batched to be sent.
    forwarded_tx: RefCell<SendBatch>,
    pub stats: UdpStats,
}

/// Where the answer to a forwarded announce goes.
struct ReplyTo {
    from: SocketAddr,
    to: Option<LocalAddr>,
    txid: TransactionId,
}

/// The announces of one receive batch that other workers own, by owner: each
/// owner's go to it in one request (see `Shard::announce_at`).
struct Forwards(Vec<(Vec<Announce>, Vec<ReplyTo>)>);

impl Forwards {
    fn new(workers: usize) -> Self {
        Forwards((0..workers).map(|_| Default::default()).collect())
    }

    fn push(&mut self, owner: usize, announce: Announce, reply_to: ReplyTo) {
        if let Some((batch, replies)) = self.0.get_mut(owner) {
            batch.push(announce);
            replies.push(reply_to);
        }
    }
}

/// Counts forwarded requests (a scrape, or a batch of announces for one
/// owner) as in flight for as long as their task holds them.
pub(crate) struct InFlight(Rc<UdpService>);

impl InFlight {
    pub(crate) fn new(service: &Rc<UdpService>) -> Self {
        service.in_flight.set(service.in_flight.get() + 1);
        InFlight(service.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.in_flight.set(self.0.in_flight.get() - 1);
    }
}

/// A socket shared by its receive loop and the tasks that answer forwarded
/// requests, so that it stays open until the last answer is sent even after
/// the loop has stopped.
pub(crate) type Socket = Rc<glommio::net::UdpSocket>;

impl UdpService {
    /// `exempt` clients are not held to `udp.max_connects_per_ip_per_sec`.
    pub fn new(
        shard: Rc<Shard>,
        cookies: ConnectionCookies,
        swarm: SwarmConfig,
        udp: &UdpConfig,
        exempt: ExemptNetworks,
    ) -> Rc<Self> {
        let service = Rc::new(UdpService {
            shard,
            cookies,
            swarm,
            max_scrape_hashes: udp.max_scrape_hashes,
            coalesce: Duration::from_micros(udp.coalesce_us.into()),
            stop: StopEvent::default(),
            in_flight: Cell::new(0),
            connect_limit: RateLimit::new(
                udp.max_connects_per_ip_per_sec,
                1,
                udp.connect_limit_slots,
            )
            .map(RefCell::new),
            exempt,
            forwarded_tx: RefCell::new(SendBatch::default()),
            stats: UdpStats::default(),
        });
        let source: Weak<dyn MetricSource> = Rc::downgrade(&service) as _;
        service.shard.add_metric_source(source);
        service
    }

    /// Stops taking datagrams: every `serve` returns, once it has answered
    /// its current batch. Forwarded requests are still answered; see
    /// [`in_flight`](Self::in_flight).
    pub fn stop(&self) {
        self.stop.fire();
    }

    /// Requests taken and not yet answered (they wait on another worker).
    pub fn in_flight(&self) -> usize {
        self.in_flight.get()
    }

    /// Serves one socket until it fails (Err) or [`stop`](Self::stop) is
    /// called (Ok). The socket must be non-blocking (see
    /// `socket::bind_reuseport`).
    pub async fn serve(self: Rc<Self>, socket: std::net::UdpSocket) -> Result<(), String> {
        let local = socket.local_addr().map_err(|e| e.to_string())?;
        // glommio parks the executor on the socket (an io_uring poll) when the
        // queue is empty; the batches themselves are plain recvmmsg/sendmmsg.
        // SAFETY: the fd comes from a socket we own and hand over whole.
        let parker: Socket =
            Rc::new(unsafe { glommio::net::UdpSocket::from_raw_fd(socket.into_raw_fd()) });
        let fd = parker.as_raw_fd();
        let mut rx = RecvBatch::default();
        let mut tx = SendBatch::default();
        let mut peek = [0u8; 1];
        let mut forwards = Forwards::new(self.shard.workers());
        let mut quantum = Quantum::default();
        // Whether the last batch emptied the queue (it was not full). Then
        // the next look at the queue is the wait's own first step (glommio
        // tries the peek without blocking before it parks), not a recvmmsg
        // that would find the queue empty.
        let mut drained = false;
        let mut coalesce = Coalesce::new(self.coalesce);
        loop {
            if self.stop.is_fired() {
                return Ok(());
            }
            let received = if drained {
                Err(io::ErrorKind::WouldBlock.into())
            } else {
                rx.recv(fd)
            };
            drained = false;
            match received {
                Ok(n) => {
                    drained = n < BATCH;
                    // Start loading the batch's torrents and peers first, so
                    // that their misses overlap rather than stall one announce
                    // each.
                    self.shard.prefetch((0..n).filter_map(|i| {
                        let peek = Request::peek_announce(rx.data(i)?)?;
                        let peer = SocketAddr::new(canonical_ip(rx.from(i)?.ip()), peek.port);
                        self.shard
                            .is_local(&peek.info_hash)
                            .then_some((peek.info_hash, peer))
                    }));
                    for i in 0..n {
                        if let Some(packet) = rx.get(i) {
                            self.stats.bytes_in.add(packet.data.len() as u64);
                            if !packet.truncated {
                                self.handle_contained(
                                    packet.data,
                                    packet.from,
                                    packet.to,
                                    &parker,
                                    &mut tx,
                                    &mut forwards,
                                );
                            } else {
                                self.stats.malformed.inc();
                            }
                        }
                    }
                    self.flush(fd, &mut tx);
                    self.forward(&mut forwards, &parker);
                    if drained && coalesce.worth_waiting(n, Instant::now()) {
                        // Let the next datagrams gather rather than wake for
                        // each (the worker's other tasks run meanwhile); a
                        // stop ends the wait at once.
                        let gathered = futures_lite::future::or(
                            glommio::timer::sleep(coalesce.window()),
                            self.stop.wait(),
                        );
                        quantum.wait(gathered).await;
                        drained = false;
                    } else {
                        // Under a flood this loop always has work: let the
                        // worker's other tasks (HTTP, other workers' requests
                        // and answers) have their turn.
                        quantum.yield_now().await;
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    let woken = futures_lite::future::or(
                        async { Some(parker.peek_from(&mut peek).await) },
                        async {
                            self.stop.wait().await;
                            None
                        },
                    );
                    if let Some(Err(e)) = quantum.wait(woken).await {
                        debug!("udp {local}: waiting for packets: {e}");
                    }
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    // ICMP errors surface here on some kernels; they concern one
                    // earlier send, not the socket, and clients can cause
                    // them: logged once a minute at most.
                    static THROTTLE: LogThrottle = LogThrottle::new();
                    if let Some(left_out) = THROTTLE.allow() {
                        warn!(
                            "udp {local}: receive failed: {e} ({left_out} more since the last \
                             such line)"
                        );
                    }
                    glommio::yield_if_needed().await;
                }
            }
        }
    }

    /// Hands each owner the announces of the batch it owns, all at once, and
    /// sends their answers when they come.
    fn forward(self: &Rc<Self>, forwards: &mut Forwards, socket: &Socket) {
        for (owner, (batch, replies)) in forwards.0.iter_mut().enumerate() {
            if batch.is_empty() {
                continue;
            }
            let (batch, replies) = (mem::take(batch), mem::take(replies));
            let this = self.clone();
            let (socket, in_flight) = (socket.clone(), InFlight::new(self));
            glommio::spawn_local(async move {
                let _in_flight = in_flight;
                let task = async {
                    match this.shard.announce_at(owner, batch).await {
                        Ok(answers) => this.send_forwarded(socket.as_raw_fd(), &replies, answers),
                        Err(e) => replies.iter().for_each(|_| this.route_failed(e)),
                    }
                };
                Contained::new(&this.stats.panics, task).await;
            })
            .detach();
        }
    }

    /// Sends the answers of announces another worker owns, batched.
    fn send_forwarded(&self, fd: RawFd, replies: &[ReplyTo], answers: AnnounceAnswers) {
        let mut tx = self.forwarded_tx.borrow_mut();
        for (reply, (counts, peers)) in replies.iter().zip(answers.iter()) {
            if tx.is_full() {
                self.flush(fd, &mut tx);
            }
            // The peers' family is the sender's, as at the owner.
            let family = IpFamily::of(canonical_ip(reply.from.ip()));
            let out = tx.push(reply.from, reply.to);
            self.write_announce(out, reply.txid, family, counts, peers);
        }
        self.flush(fd, &mut tx);
    }

    fn flush(&self, fd: RawFd, tx: &mut SendBatch) {
        if tx.is_empty() {
            return;
        }
        let (_sent, bytes, failed) = tx.flush(fd);
        self.stats.bytes_out.add(bytes as u64);
        self.stats.send_errors.add(failed as u64);
    }

    /// `handle`, with a panic contained: the datagram goes unanswered (whatever
    /// it had queued is taken back) and the panic is counted.
    fn handle_contained(
        self: &Rc<Self>,
        data: &[u8],
        from: SocketAddr,
        to: Option<LocalAddr>,
        socket: &Socket,
        tx: &mut SendBatch,
        forwards: &mut Forwards,
    ) {
        let fd = socket.as_raw_fd();
        if tx.is_full() {
            self.flush(fd, tx);
        }
        let queued = tx.len();
        if contain(&self.stats.panics, || {
            self.handle(data, from, to, socket, tx, forwards)
        })
        .is_none()
        {
            tx.truncate(queued);
        }
    }

    /// Answers one datagram: into `tx` when this worker can answer now, or
    /// (an announce) through `forwards` once the owning worker has answered.
    /// `tx` has room for one.
    fn handle(
        self: &Rc<Self>,
        data: &[u8],
        from: SocketAddr,
        to: Option<LocalAddr>,
        socket: &Socket,
        tx: &mut SendBatch,
        forwards: &mut Forwards,
    ) {
        let ip = canonical_ip(from.ip());
        let now = clock::unix_secs();
        match Request::parse(data) {
            Ok(Request::Connect(req)) => {
                self.stats.connects.inc(ip);
                if let Some(limit) = &self.connect_limit {
                    // An empty list (the default) costs a length check.
                    if !self.exempt.contains(ip) && !limit.borrow_mut().allow(ip, now as u32) {
                        self.stats.connects_limited.inc();
                        return;
                    }
                }
                self.stats.connect_responses.inc(ip);
                let id = self.cookies.issue(ip, now);
                write_connect_response(tx.push(from, to), req.transaction_id, id);
            }
            Ok(Request::Announce(req)) => {
                if !self.proves_address(req.connection_id, ip, now) {
                    return;
                }
                self.stats.announces.inc(ip);
                let txid = req.transaction_id;
                if req.port == 0 {
                    self.stats.malformed.inc();
                    self.stats.errors_sent.inc();
                    self.stats.announce_responses.inc(ip);
                    write_error_response(tx.push(from, to), txid, b"invalid port");
                    return;
                }
                let family = IpFamily::of(ip);
                // Negative asks for the default (BEP 15 says -1).
                let requested = u32::try_from(req.num_want).ok();
                let numwant = self.swarm.numwant(requested, max_peers(family) as u32);
                let announce = Announce {
                    info_hash: req.info_hash,
                    peer_id: req.peer_id,
                    peer_addr: SocketAddr::new(ip, req.port),
                    event: req.event,
                    left: req.left,
                    numwant,
                    peer_ids: false,
                };
                if self.shard.private().is_some() {
                    return self.private_announce(&req, announce, socket, tx, (from, to));
                }
                let written = self.shard.announce_here(&announce, |counts, peers| {
                    self.write_announce(tx.push(from, to), txid, family, counts, peers.compact())
                });
                if written.is_some() {
                    self.stats.announces_local.inc();
                } else {
                    self.stats.announces_forwarded.inc();
                    let reply_to = ReplyTo { from, to, txid };
                    forwards.push(self.shard.owner(&announce.info_hash), announce, reply_to);
                }
            }
            Ok(Request::Scrape(req)) => {
                if !self.proves_address(req.connection_id, ip, now) {
                    return;
                }
                self.stats.scrapes.inc(ip);
                let txid = req.transaction_id;
                if self.shard.private().is_some() {
                    // As over HTTP: BEP 15 scrapes carry no passkey (BEP 41
                    // options come with announces only), and a private
                    // tracker tells no one its swarms' sizes.
                    self.stats.scrape_responses.inc(ip);
                    self.stats.refused.inc();
                    self.stats.errors_sent.inc();
                    let message = tracker_private::client::SCRAPES_NOT_SERVED;
                    write_error_response(tx.push(from, to), txid, message.as_bytes());
                    return;
                }
                if req.info_hashes.len() > self.max_scrape_hashes {
                    self.stats.scrape_responses.inc(ip);
                    self.stats.malformed.inc();
                    self.stats.errors_sent.inc();
                    write_error_response(tx.push(from, to), txid, b"too many info-hashes");
                    return;
                }
                if req.info_hashes.iter().all(|h| self.shard.is_local(&h)) {
                    let stats = req.info_hashes.iter().map(|h| self.shard.scrape_local(&h));
                    self.stats.scrape_responses.inc(ip);
                    write_scrape_response(tx.push(from, to), txid, stats);
                } else {
                    let hashes: Vec<InfoHash> = req.info_hashes.iter().collect();
                    let this = self.clone();
                    let (socket, in_flight) = (socket.clone(), InFlight::new(self));
                    glommio::spawn_local(async move {
                        let _in_flight = in_flight;
                        let fd = socket.as_raw_fd();
                        let task = async {
                            let mut stats: Vec<ScrapeStats> = Vec::new();
                            if let Err(e) = this.shard.scrape(&hashes, &mut stats).await {
                                return this.route_failed(e);
                            }
                            let mut out = Vec::new();
                            this.stats.scrape_responses.inc(ip);
                            write_scrape_response(&mut out, txid, stats.iter().copied());
                            this.send_now(fd, &out, from, to);
                        };
                        Contained::new(&this.stats.panics, task).await;
                    })
                    .detach();
                }
            }
            Err(err) => {
                self.stats.malformed.inc();
                // Only a client that proved its address (a valid connection id)
                // gets an answer, so forged sources cannot aim us at anyone.
                let (Some(id), Some(txid)) = (err.connection_id, err.transaction_id) else {
                    return;
                };
                if self.cookies.is_valid(id, ip, now) {
                    self.stats.errors_sent.inc();
                    // Never answer with more than was asked: a short packet
                    // gets a shortened message.
                    let message = err.message().as_bytes();
                    let room = data.len().saturating_sub(ERROR_HEADER_BYTES);
                    let message = message.get(..room).unwrap_or(message);
                    write_error_response(tx.push(from, to), txid, message);
                }
            }
        }
    }

    /// Whether `id` is a connection id we issued to `ip` (and still honour);
    /// a request without one is dropped unanswered, and counted.
    fn proves_address(&self, id: ConnectionId, ip: IpAddr, now: u64) -> bool {
        let valid = self.cookies.is_valid(id, ip, now);
        if !valid {
            self.stats.bad_connection_id.inc();
        }
        valid
    }

    /// One more answer to an announce, of `family`, whatever it says.
    pub(crate) fn count_announce_response(&self, family: IpFamily) {
        match family {
            IpFamily::V4 => self.stats.announce_responses.ipv4.inc(),
            IpFamily::V6 => self.stats.announce_responses.ipv6.inc(),
        }
    }

    pub(crate) fn write_announce(
        &self,
        out: &mut Vec<u8>,
        txid: TransactionId,
        family: IpFamily,
        counts: Result<SwarmCounts, AnnounceRefused>,
        peers: &[u8],
    ) {
        self.count_announce_response(family);
        match counts {
            Ok(SwarmCounts { seeders, leechers }) => {
                write_announce_response(
                    out,
                    txid,
                    self.swarm.announce_interval_secs,
                    leechers,
                    seeders,
                    peers,
                );
            }
            Err(refused) => {
                match refused {
                    AnnounceRefused::NotAllowed => self.stats.not_allowed.inc(),
                    AnnounceRefused::TorrentLimit | AnnounceRefused::AddressBudget(_) => {
                        self.stats.refused.inc()
                    }
                }
                self.stats.errors_sent.inc();
                write_error_response(out, txid, refused.reason().as_bytes());
            }
        }
    }

    pub(crate) fn route_failed(&self, e: RouteError) {
        match e {
            RouteError::Overloaded | RouteError::OwnerGone => self.stats.dropped_overloaded.inc(),
            RouteError::Failed => self.stats.failed_at_owner.inc(),
        }
    }

    pub(crate) fn send_now(&self, fd: RawFd, data: &[u8], to: SocketAddr, from: Option<LocalAddr>) {
        match send_one(fd, data, to, from) {
            Ok(n) => self.stats.bytes_out.add(n as u64),
            Err(_) => self.stats.send_errors.inc(),
        }
    }
}
