//! The per-worker UDP loop: receive a batch, answer what this shard owns at
//! once, hand the rest to their owners, send the batch.

use crate::coalesce::Coalesce;
use crate::config::UdpConfig;
use crate::cookie::ConnectionCookies;
use std::cell::{Cell, RefCell};
use std::io;
use std::mem;
use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
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
        self.stats
            .samples(&[("protocol", "udp"), ("path", "socket")], out);
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
    pub(crate) coalesce: Duration,
    /// Fired when the tracker stops: the sockets take no more datagrams.
    pub(crate) stop: StopEvent,
    /// Tasks waiting on another worker's answer (see `InFlight`).
    in_flight: Cell<usize>,
    connect_limit: Option<RefCell<RateLimit>>,
    /// Clients the connect limit does not count (`runtime.exempt_networks`).
    exempt: ExemptNetworks,
    /// What came and went through the kernel's sockets (AF_XDP's are
    /// `crate::xdp`'s).
    pub stats: UdpStats,
}

/// Where the answer to a forwarded announce goes.
pub(crate) struct ReplyTo<R> {
    reply: R,
    txid: TransactionId,
}

/// The announces of one receive batch that other workers own, by owner: each
/// owner's go to it in one request (see `Shard::announce_at`).
pub(crate) struct Forwards<R>(Vec<(Vec<Announce>, Vec<ReplyTo<R>>)>);

impl<R> Forwards<R> {
    pub(crate) fn new(workers: usize) -> Self {
        Forwards((0..workers).map(|_| (Vec::new(), Vec::new())).collect())
    }

    fn push(&mut self, owner: usize, announce: Announce, reply_to: ReplyTo<R>) {
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

/// Which way datagrams reach a worker and its answers leave: a kernel socket
/// ([`SocketPath`]) or an AF_XDP socket (`crate::xdp`). The request handling
/// is the same code for both, made once for each (no dynamic dispatch on the
/// hot path).
pub(crate) trait Path: 'static {
    /// What an answer needs to reach its client.
    type Reply: Copy + 'static;
    /// Answers gathered to leave together.
    type Batch: Answers<Self::Reply>;
    /// The counters of this path (the `path` label).
    fn stats<'a>(&'a self, service: &'a UdpService) -> &'a UdpStats;
    /// The client's address and port.
    fn client(reply: &Self::Reply) -> SocketAddr;
    /// Sends what `batch` holds, and empties it.
    fn flush(&self, batch: &mut Self::Batch, stats: &UdpStats);
    /// Sends one answer at once (a scrape or an announce another worker
    /// answered, outside any batch).
    fn send_now(&self, data: &[u8], reply: Self::Reply, stats: &UdpStats);
    /// Where the answers other workers gave are gathered to be sent.
    fn forwarded(&self) -> &RefCell<Self::Batch>;
}

/// A batch of answers, each a datagram's payload and where it goes.
pub(crate) trait Answers<R> {
    /// Room for one more answer to `reply`: the caller writes its payload.
    /// Only when not [`is_full`](Self::is_full).
    fn push(&mut self, reply: R) -> &mut Vec<u8>;
    fn is_full(&self) -> bool;
    fn len(&self) -> usize;
    /// Takes back every answer after the first `len`.
    fn truncate(&mut self, len: usize);
}

impl Answers<(SocketAddr, Option<LocalAddr>)> for SendBatch {
    fn push(&mut self, (to, from): (SocketAddr, Option<LocalAddr>)) -> &mut Vec<u8> {
        SendBatch::push(self, to, from)
    }
    fn is_full(&self) -> bool {
        SendBatch::is_full(self)
    }
    fn len(&self) -> usize {
        SendBatch::len(self)
    }
    fn truncate(&mut self, len: usize) {
        SendBatch::truncate(self, len)
    }
}

/// A kernel UDP socket, shared by its receive loop and the tasks that answer
/// forwarded requests, so that it stays open until the last answer is sent
/// even after the loop has stopped.
pub(crate) struct SocketPath {
    socket: glommio::net::UdpSocket,
    forwarded: RefCell<SendBatch>,
}

impl Path for SocketPath {
    /// The client, and the address it asked (answers leave from it).
    type Reply = (SocketAddr, Option<LocalAddr>);
    type Batch = SendBatch;

    fn stats<'a>(&'a self, service: &'a UdpService) -> &'a UdpStats {
        &service.stats
    }

    fn client(reply: &Self::Reply) -> SocketAddr {
        reply.0
    }

    fn flush(&self, batch: &mut SendBatch, stats: &UdpStats) {
        if batch.is_empty() {
            return;
        }
        let (_sent, bytes, failed) = batch.flush(self.socket.as_raw_fd());
        stats.bytes_out.add(bytes as u64);
        stats.send_errors.add(failed as u64);
    }

    fn send_now(&self, data: &[u8], (to, from): Self::Reply, stats: &UdpStats) {
        match send_one(self.socket.as_raw_fd(), data, to, from) {
            Ok(n) => stats.bytes_out.add(n as u64),
            Err(_) => stats.send_errors.inc(),
        }
    }

    fn forwarded(&self) -> &RefCell<SendBatch> {
        &self.forwarded
    }
}

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
        let socket = unsafe { glommio::net::UdpSocket::from_raw_fd(socket.into_raw_fd()) };
        let path = Rc::new(SocketPath {
            socket,
            forwarded: RefCell::new(SendBatch::default()),
        });
        let fd = path.socket.as_raw_fd();
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
                    self.prefetch((0..n).filter_map(|i| Some((rx.data(i)?, rx.from(i)?))));
                    for i in 0..n {
                        if let Some(packet) = rx.get(i) {
                            self.stats.bytes_in.add(packet.data.len() as u64);
                            if !packet.truncated {
                                self.handle_contained(
                                    packet.data,
                                    (packet.from, packet.to),
                                    &path,
                                    &mut tx,
                                    &mut forwards,
                                );
                            } else {
                                self.stats.malformed.inc();
                            }
                        }
                    }
                    path.flush(&mut tx, &self.stats);
                    self.forward(&mut forwards, &path);
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
                        async { Some(path.socket.peek_from(&mut peek).await) },
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

    /// Starts loading the torrents and peers of the announces among
    /// `datagrams` (payload, sender) that this worker owns, so that their
    /// cache misses overlap rather than stall one announce each.
    pub(crate) fn prefetch<'d>(&self, datagrams: impl Iterator<Item = (&'d [u8], SocketAddr)>) {
        self.shard.prefetch(datagrams.filter_map(|(data, from)| {
            let peek = Request::peek_announce(data)?;
            let peer = SocketAddr::new(canonical_ip(from.ip()), peek.port);
            self.shard
                .is_local(&peek.info_hash)
                .then_some((peek.info_hash, peer))
        }));
    }

    /// Hands each owner the announces of the batch it owns, all at once, and
    /// sends their answers when they come.
    pub(crate) fn forward<P: Path>(
        self: &Rc<Self>,
        forwards: &mut Forwards<P::Reply>,
        path: &Rc<P>,
    ) {
        for (owner, (batch, replies)) in forwards.0.iter_mut().enumerate() {
            if batch.is_empty() {
                continue;
            }
            let (batch, replies) = (mem::take(batch), mem::take(replies));
            let this = self.clone();
            let (path, in_flight) = (path.clone(), InFlight::new(self));
            glommio::spawn_local(async move {
                let _in_flight = in_flight;
                let stats = path.stats(&this);
                let task = async {
                    match this.shard.announce_at(owner, batch).await {
                        Ok(answers) => this.send_forwarded(&*path, &replies, answers),
                        Err(e) => replies.iter().for_each(|_| this.route_failed(e, stats)),
                    }
                };
                Contained::new(&stats.panics, task).await;
            })
            .detach();
        }
    }

    /// Sends the answers of announces another worker owns, batched.
    fn send_forwarded<P: Path>(
        &self,
        path: &P,
        replies: &[ReplyTo<P::Reply>],
        answers: AnnounceAnswers,
    ) {
        let stats = path.stats(self);
        let mut tx = path.forwarded().borrow_mut();
        for (reply, (counts, peers)) in replies.iter().zip(answers.iter()) {
            if tx.is_full() {
                path.flush(&mut tx, stats);
            }
            // The peers' family is the sender's, as at the owner.
            let family = IpFamily::of(canonical_ip(P::client(&reply.reply).ip()));
            let out = tx.push(reply.reply);
            self.write_announce(stats, out, reply.txid, family, counts, peers);
        }
        path.flush(&mut tx, stats);
    }

    /// `handle`, with a panic contained: the datagram goes unanswered (whatever
    /// it had queued is taken back) and the panic is counted.
    pub(crate) fn handle_contained<P: Path>(
        self: &Rc<Self>,
        data: &[u8],
        reply: P::Reply,
        path: &Rc<P>,
        tx: &mut P::Batch,
        forwards: &mut Forwards<P::Reply>,
    ) {
        let stats = path.stats(self);
        if tx.is_full() {
            path.flush(tx, stats);
        }
        let queued = tx.len();
        if contain(&stats.panics, || {
            self.handle(data, reply, path, tx, forwards)
        })
        .is_none()
        {
            tx.truncate(queued);
        }
    }

    /// Answers one datagram: into `tx` when this worker can answer now, or
    /// (an announce) through `forwards` once the owning worker has answered.
    /// `tx` has room for one.
    fn handle<P: Path>(
        self: &Rc<Self>,
        data: &[u8],
        reply: P::Reply,
        path: &Rc<P>,
        tx: &mut P::Batch,
        forwards: &mut Forwards<P::Reply>,
    ) {
        let stats = path.stats(self);
        let ip = canonical_ip(P::client(&reply).ip());
        let now = clock::unix_secs();
        match Request::parse(data) {
            Ok(Request::Connect(req)) => {
                stats.connects.inc(ip);
                if let Some(limit) = &self.connect_limit {
                    // An empty list (the default) costs a length check.
                    if !self.exempt.contains(ip) && !limit.borrow_mut().allow(ip, now as u32) {
                        stats.connects_limited.inc();
                        return;
                    }
                }
                stats.connect_responses.inc(ip);
                let id = self.cookies.issue(ip, now);
                write_connect_response(tx.push(reply), req.transaction_id, id);
            }
            Ok(Request::Announce(req)) => {
                if !self.proves_address(stats, req.connection_id, ip, now) {
                    return;
                }
                stats.announces.inc(ip);
                let txid = req.transaction_id;
                if req.port == 0 {
                    stats.malformed.inc();
                    stats.errors_sent.inc();
                    stats.announce_responses.inc(ip);
                    write_error_response(tx.push(reply), txid, b"invalid port");
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
                    return self.private_announce(&req, announce, path, tx, reply);
                }
                let written = self.shard.announce_here(&announce, |counts, peers| {
                    let out = tx.push(reply);
                    self.write_announce(stats, out, txid, family, counts, peers.compact())
                });
                if written.is_some() {
                    stats.announces_local.inc();
                } else {
                    stats.announces_forwarded.inc();
                    let reply_to = ReplyTo { reply, txid };
                    forwards.push(self.shard.owner(&announce.info_hash), announce, reply_to);
                }
            }
            Ok(Request::Scrape(req)) => {
                if !self.proves_address(stats, req.connection_id, ip, now) {
                    return;
                }
                stats.scrapes.inc(ip);
                let txid = req.transaction_id;
                if self.shard.private().is_some() {
                    // As over HTTP: BEP 15 scrapes carry no passkey (BEP 41
                    // options come with announces only), and a private
                    // tracker tells no one its swarms' sizes.
                    stats.scrape_responses.inc(ip);
                    stats.refused.inc();
                    stats.errors_sent.inc();
                    let message = tracker_private::client::SCRAPES_NOT_SERVED;
                    write_error_response(tx.push(reply), txid, message.as_bytes());
                    return;
                }
                if req.info_hashes.len() > self.max_scrape_hashes {
                    stats.scrape_responses.inc(ip);
                    stats.malformed.inc();
                    stats.errors_sent.inc();
                    write_error_response(tx.push(reply), txid, b"too many info-hashes");
                    return;
                }
                if req.info_hashes.iter().all(|h| self.shard.is_local(&h)) {
                    let scraped = req.info_hashes.iter().map(|h| self.shard.scrape_local(&h));
                    stats.scrape_responses.inc(ip);
                    write_scrape_response(tx.push(reply), txid, scraped);
                } else {
                    let hashes: Vec<InfoHash> = req.info_hashes.iter().collect();
                    let this = self.clone();
                    let (path, in_flight) = (path.clone(), InFlight::new(self));
                    glommio::spawn_local(async move {
                        let _in_flight = in_flight;
                        let stats = path.stats(&this);
                        let task = async {
                            let mut scraped: Vec<ScrapeStats> = Vec::new();
                            if let Err(e) = this.shard.scrape(&hashes, &mut scraped).await {
                                return this.route_failed(e, stats);
                            }
                            let mut out = Vec::new();
                            stats.scrape_responses.inc(ip);
                            write_scrape_response(&mut out, txid, scraped.iter().copied());
                            path.send_now(&out, reply, stats);
                        };
                        Contained::new(&stats.panics, task).await;
                    })
                    .detach();
                }
            }
            Err(err) => {
                stats.malformed.inc();
                // Only a client that proved its address (a valid connection id)
                // gets an answer, so forged sources cannot aim us at anyone.
                let (Some(id), Some(txid)) = (err.connection_id, err.transaction_id) else {
                    return;
                };
                if self.cookies.is_valid(id, ip, now) {
                    stats.errors_sent.inc();
                    // Never answer with more than was asked: a short packet
                    // gets a shortened message.
                    let message = err.message().as_bytes();
                    let room = data.len().saturating_sub(ERROR_HEADER_BYTES);
                    let message = message.get(..room).unwrap_or(message);
                    write_error_response(tx.push(reply), txid, message);
                }
            }
        }
    }

    /// Whether `id` is a connection id we issued to `ip` (and still honour);
    /// a request without one is dropped unanswered, and counted.
    fn proves_address(&self, stats: &UdpStats, id: ConnectionId, ip: IpAddr, now: u64) -> bool {
        let valid = self.cookies.is_valid(id, ip, now);
        if !valid {
            stats.bad_connection_id.inc();
        }
        valid
    }

    /// One more answer to an announce, of `family`, whatever it says.
    pub(crate) fn count_announce_response(stats: &UdpStats, family: IpFamily) {
        match family {
            IpFamily::V4 => stats.announce_responses.ipv4.inc(),
            IpFamily::V6 => stats.announce_responses.ipv6.inc(),
        }
    }

    pub(crate) fn write_announce(
        &self,
        stats: &UdpStats,
        out: &mut Vec<u8>,
        txid: TransactionId,
        family: IpFamily,
        counts: Result<SwarmCounts, AnnounceRefused>,
        peers: &[u8],
    ) {
        Self::count_announce_response(stats, family);
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
                    AnnounceRefused::NotAllowed => stats.not_allowed.inc(),
                    AnnounceRefused::TorrentLimit | AnnounceRefused::AddressBudget(_) => {
                        stats.refused.inc()
                    }
                }
                stats.errors_sent.inc();
                write_error_response(out, txid, refused.reason().as_bytes());
            }
        }
    }

    pub(crate) fn route_failed(&self, e: RouteError, stats: &UdpStats) {
        match e {
            RouteError::Overloaded | RouteError::OwnerGone => stats.dropped_overloaded.inc(),
            RouteError::Failed => stats.failed_at_owner.inc(),
        }
    }
}
