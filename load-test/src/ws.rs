//! `load-test ws`: WebTorrent's tracker protocol over WebSocket connections
//! (`ws://`, or `wss://` with rustls and the ring provider), many per worker.
//! The protocol work is in [`crate::ws_session`]; this is the I/O.
//!
//! A run has two phases. First every connection opens (at most
//! [`OPENING`] at a time per worker, so that a tracker's accept queue is
//! not flooded) and announces once (`started`, with offers), and stays open;
//! when all have (or after the ramp's limit), a file may be written
//! (`ws.ready_file`) and the connections idle `ws.hold_secs`: the moment to
//! read a tracker's memory per connection. Then the measured load: one
//! announce or scrape in flight per connection (closed loop, or on a
//! schedule with `--rate`), offers relayed to a connection answered as they
//! come. Only the measured phase counts in the rates; what goes wrong in
//! the ramp is counted too.
//!
//! The WebSocket framing is async-tungstenite's (handshake, masking,
//! fragments, ping and pong, close): it runs over any futures-io stream, so
//! over glommio's `TcpStream` and futures-rustls' `TlsStream` as they are,
//! with no runtime of its own; aquatic_ws and its load tester use it the
//! same way, and so does our tracker's WebSocket side. Its read buffer is
//! cut from 128 KiB to 4 KiB a connection, or 50,000 connections would
//! hold 6 GiB here.
//!
//! Connections come from 127.0.0.2, 127.0.0.3, ..., [`PER_ADDRESS`] to an
//! address, each address's source ports picked at `connect`
//! (IP_BIND_ADDRESS_NO_PORT), so that 50,000 connections fit the ephemeral
//! ports.

use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use async_tungstenite::tungstenite::protocol::WebSocketConfig;
use async_tungstenite::tungstenite::Message;
use async_tungstenite::WebSocketStream;
use futures_lite::{AsyncRead, AsyncWrite, StreamExt};
use futures_rustls::TlsConnector;
use rustls::pki_types::ServerName;

use crate::config::Config;
use crate::http::Schedule;
use crate::model::{Kind, Rng, TrafficModel, Weighted, PORTS_PER_SOURCE};
use crate::runner::{self, WorkerEnv};
use crate::stats::{Invalid, Ramp, RunInfo, Stats, Summary};
use crate::ws_session::{Sdp, WsSession, WsTarget, WsTraffic};

/// Connections to one source address: well within the ephemeral ports
/// (32768-60999 by default) of an address.
pub const PER_ADDRESS: u32 = 10_000;
/// Connections a worker opens at once.
pub const OPENING: u64 = 64;
/// Pause after a failed connection attempt.
const RETRY_PAUSE: Duration = Duration::from_millis(100);
/// Not a moment yet.
const NOT_YET: u64 = u64::MAX;

struct Plan {
    target: WsTarget,
    tls: Option<TlsConnector>,
    traffic: WsTraffic,
    mix: Weighted<2>,
    offers: usize,
    answer_share: f64,
    workers: u32,
    connections: u32,
    addresses: u32,
    /// Open loop: requests per second over all connections.
    rate: Option<f64>,
    duration_ns: u64,
    timeout: Duration,
    seed: u64,
    phase: Phase,
    hold_ns: u64,
    /// The ramp ends by then, whether every connection is open or not.
    ramp_limit_ns: u64,
    ready_file: Option<PathBuf>,
}

/// Where the run stands, shared by the workers.
struct Phase {
    /// Connections open and answered once.
    ready: AtomicU32,
    /// When the ramp ended (ns from the start), or `NOT_YET`.
    ramp_end_ns: AtomicU64,
}

impl Phase {
    /// When the measured load begins, once the ramp has ended.
    fn go_ns(&self, hold_ns: u64) -> Option<u64> {
        match self.ramp_end_ns.load(Ordering::Acquire) {
            NOT_YET => None,
            end => Some(end + hold_ns),
        }
    }
}

impl Plan {
    /// One more connection is open and answered; the last one ends the ramp.
    fn ready(&self, now_ns: u64) {
        if self.phase.ready.fetch_add(1, Ordering::AcqRel) + 1 == self.connections {
            self.end_ramp(now_ns);
        }
    }

    /// Ends the ramp at `now_ns`, once: says so, and writes the ready file.
    fn end_ramp(&self, now_ns: u64) {
        let ended = self.phase.ramp_end_ns.compare_exchange(
            NOT_YET,
            now_ns,
            Ordering::AcqRel,
            Ordering::Acquire,
        );
        if ended.is_err() {
            return;
        }
        let ready = self.phase.ready.load(Ordering::Acquire);
        eprintln!(
            "load-test: {ready} of {} connections open and announced in {:.2} s",
            self.connections,
            now_ns as f64 / 1e9
        );
        if let Some(path) = &self.ready_file {
            let text = format!("{ready} {}\n", self.connections);
            if let Err(e) = std::fs::write(path, text) {
                eprintln!("load-test: cannot write {}: {e}", path.display());
            }
        }
    }

    /// When the measured load ends, once known.
    fn end_ns(&self) -> Option<u64> {
        self.phase
            .go_ns(self.hold_ns)
            .map(|go| go + self.duration_ns)
    }
}

/// The source address of connection `c`: 127.0.0.2 and up, a connection to
/// each in turn; `::1` against an IPv6 target (one address).
pub fn source_ip(target: SocketAddr, c: u32, addresses: u32) -> IpAddr {
    match target {
        SocketAddr::V4(_) => {
            let [_, _, a, b] = (2 + c % addresses).to_be_bytes();
            IpAddr::V4(Ipv4Addr::new(127, 0, a, b))
        }
        SocketAddr::V6(_) => IpAddr::V6(std::net::Ipv6Addr::LOCALHOST),
    }
}

/// Raises the soft limit of open files to what `needed` descriptors take,
/// up to the hard limit; an error when that is too low.
pub fn raise_file_limit(needed: u64) -> Result<(), String> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes the struct we own.
    if unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) } != 0 {
        return Err(format!(
            "cannot read RLIMIT_NOFILE: {}",
            io::Error::last_os_error()
        ));
    }
    if limit.rlim_cur >= needed {
        return Ok(());
    }
    if limit.rlim_max < needed {
        return Err(format!(
            "{needed} descriptors are needed, and the hard limit of open files \
             (RLIMIT_NOFILE) is {}: raise it (ulimit -Hn, as root) or use fewer connections",
            limit.rlim_max
        ));
    }
    limit.rlim_cur = needed;
    // SAFETY: setrlimit reads the struct we own.
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(format!(
            "cannot raise RLIMIT_NOFILE to {needed}: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

pub fn run(config: &Config) -> Result<Summary, String> {
    let url = config.target.as_deref().ok_or("--target is required")?;
    let target = WsTarget::parse(url)?;
    let placements = runner::placements(config.workers, config.cpus.as_deref())?;
    let workers = placements.len() as u32;
    let ws = &config.ws;
    let connections = ws.connections;
    let addresses = if target.addr.is_ipv4() {
        connections.div_ceil(PER_ADDRESS)
    } else {
        1
    };
    if addresses > 250 {
        return Err(format!(
            "{connections} connections need more than 250 source addresses (127.0.0.2 and up)"
        ));
    }
    // Every connection is a source of the model: at least a peer each, and
    // no more than their ports (the model keeps peers apart by port too).
    let mut traffic = config.traffic.clone();
    let most = u64::from(connections) * u64::from(PORTS_PER_SOURCE);
    if u64::from(traffic.peers) > most {
        traffic.peers = most as u32;
    }
    if traffic.peers < connections {
        eprintln!(
            "load-test: {} peers for {connections} connections: using {connections}, one each",
            traffic.peers
        );
        traffic.peers = connections;
    }
    if traffic.torrents > u64::from(u32::MAX) {
        return Err(format!(
            "the WebSocket load takes at most {} torrents (an offer id names its torrent in 32 bits)",
            u32::MAX
        ));
    }
    if traffic.passkeys.is_some() {
        return Err(
            "passkeys are for the udp and http loads (WebTorrent has no private mode here)".into(),
        );
    }
    let lists = crate::private::Lists::load(&traffic)?;
    let model = TrafficModel::with_lists(&traffic, connections, config.seed, lists)?;
    let mix = Weighted::new(ws.mix.as_array()).map_err(|e| format!("--mix: {e}"))?;
    let tls = if target.tls {
        let tls = crate::http::tls_config(ws.insecure, ws.ca.as_deref())?;
        Some(TlsConnector::from(Arc::new(tls)))
    } else {
        None
    };
    raise_file_limit(u64::from(connections) + 256)?;
    // Opening is bounded by the slowest handshakes: 30 s, and 2 ms more a
    // connection (TLS handshakes at a few thousand a second).
    let ramp_limit = Duration::from_secs(30) + Duration::from_millis(2) * connections;
    let plan = Arc::new(Plan {
        target: target.clone(),
        tls,
        traffic: WsTraffic {
            model,
            sdp: Sdp::default(),
        },
        mix,
        offers: ws.offers,
        answer_share: ws.answer_share,
        workers,
        connections,
        addresses,
        rate: config.rate,
        duration_ns: (config.duration_secs * 1e9) as u64,
        timeout: Duration::from_millis(config.timeout_ms),
        seed: config.seed,
        phase: Phase {
            ready: AtomicU32::new(0),
            ramp_end_ns: AtomicU64::new(NOT_YET),
        },
        hold_ns: (ws.hold_secs * 1e9) as u64,
        ramp_limit_ns: ramp_limit.as_nanos() as u64,
        ready_file: ws.ready_file.clone(),
    });
    let mode = match config.rate {
        Some(rate) => format!("open loop, {rate} req/s"),
        None => "closed loop, 1 in flight per connection".to_string(),
    };
    eprintln!(
        "load-test: {} {url}, {workers} worker(s) on {placements:?}, {connections} connections \
         from {addresses} address(es), {} offers an announce, {mode}, {} s",
        if target.tls { "wss" } else { "ws" },
        ws.offers,
        config.duration_secs
    );
    let deadline = ramp_limit
        + Duration::from_secs_f64(
            ws.hold_secs + config.duration_secs + 2.0 * config.timeout_ms as f64 / 1e3 + 10.0,
        );
    let stats = runner::run(placements, config.progress, deadline, &Kind::WS, {
        let plan = plan.clone();
        move |env| worker(plan.clone(), env)
    })?;
    let info = RunInfo {
        protocol: if target.tls { "wss" } else { "ws" },
        target: url,
        mode,
        workers: workers as usize,
        sockets: connections,
        sources: addresses,
        kinds: &Kind::WS,
    };
    let mut summary = Summary::new(&stats, &info, config.duration_secs);
    summary.ramp = Some(Ramp {
        connections: u64::from(plan.phase.ready.load(Ordering::Acquire)),
        asked: u64::from(connections),
        secs: match plan.phase.ramp_end_ns.load(Ordering::Acquire) {
            NOT_YET => 0.0,
            ns => ns as f64 / 1e9,
        },
        hold_secs: ws.hold_secs,
    });
    Ok(summary)
}

async fn worker(plan: Arc<Plan>, env: WorkerEnv) -> Result<Stats, String> {
    let stats = Rc::new(RefCell::new(Stats::default()));
    let ramp = Rc::new(RefCell::new(Stats::default()));
    let env = Rc::new(env);
    let opening = Rc::new(glommio::sync::Semaphore::new(OPENING));
    // Closed when the ramp ends: it wakes the connections that wait for it.
    let ramp_end = Rc::new(glommio::sync::Semaphore::new(0));
    let mut tasks: Vec<_> = (env.index as u32..plan.connections)
        .step_by(plan.workers as usize)
        .map(|c| {
            let conn = Conn {
                session: WsSession::new(c, plan.mix.clone(), plan.offers, plan.answer_share),
                rng: Rng::new(plan.seed ^ (u64::from(c) << 32) ^ 0x3c3c),
                out: Vec::with_capacity(16 << 10),
                answer: Vec::with_capacity(2 << 10),
                schedule: plan
                    .rate
                    .map(|rate| Schedule::new(rate, c, plan.connections)),
                scheduled: 0,
                ready: false,
                ramp_end: ramp_end.clone(),
                c,
                plan: plan.clone(),
                env: env.clone(),
                stats: stats.clone(),
                ramp: ramp.clone(),
            };
            glommio::spawn_local(connection_loop(conn, opening.clone()))
        })
        .collect();
    // The backstop of the ramp: it ends at its limit, open or not.
    tasks.push(glommio::spawn_local({
        let (plan, env) = (plan.clone(), env.clone());
        async move {
            while plan.phase.go_ns(0).is_none() {
                let now = env.now_ns();
                if now >= plan.ramp_limit_ns {
                    plan.end_ramp(now);
                }
                glommio::timer::sleep(Duration::from_millis(20)).await;
            }
            ramp_end.close();
        }
    }));
    let (_, mut stats) = runner::finish_worker(&env, &stats, tasks).await;
    stats.merge_problems(&ramp.borrow());
    Ok(stats)
}

/// One connection slot, across reconnections.
struct Conn {
    plan: Arc<Plan>,
    env: Rc<WorkerEnv>,
    /// The measured phase's counts, and the ramp's.
    stats: Rc<RefCell<Stats>>,
    ramp: Rc<RefCell<Stats>>,
    session: WsSession,
    rng: Rng,
    /// The request being written, and an answer to an offer.
    out: Vec<u8>,
    answer: Vec<u8>,
    /// Open loop: this connection's send times, and requests scheduled so far.
    schedule: Option<Schedule>,
    scheduled: u64,
    /// Opened and answered once.
    ready: bool,
    /// The worker's gate, closed when the ramp ends.
    ramp_end: Rc<glommio::sync::Semaphore>,
    c: u32,
}

/// How a connection's use ended.
enum Ended {
    /// The run is over.
    Done,
    /// Open a new connection and go on.
    Reconnect,
}

/// What a read brought.
enum Read {
    /// A message, handled; the request in flight is answered when `true`.
    Handled(bool),
    /// Nothing before the time given.
    Timeout,
    /// The connection closed, broke, or broke the protocol.
    Closed,
}

/// Opens connections until the run is over, and serves each.
async fn connection_loop(mut conn: Conn, opening: Rc<glommio::sync::Semaphore>) {
    let timeout_ns = conn.plan.timeout.as_nanos() as u64;
    loop {
        let now = conn.env.now_ns();
        if conn
            .plan
            .end_ns()
            .is_some_and(|end| now >= end + timeout_ns)
        {
            break;
        }
        // The first opening waits its turn; a reconnection does not.
        let permit = if conn.ready {
            None
        } else {
            opening.acquire_permit(1).await.ok()
        };
        let ended = match conn.open().await {
            Err(e) => {
                drop(permit);
                conn.stats().borrow_mut().failure(e.as_bytes());
                glommio::timer::sleep(RETRY_PAUSE).await;
                continue;
            }
            Ok(Stream::Plain(ws)) => conn.serve(*ws, permit).await,
            Ok(Stream::Tls(ws)) => conn.serve(*ws, permit).await,
        };
        if let Ended::Done = ended {
            break;
        }
    }
}

enum Stream {
    Plain(Box<WebSocketStream<glommio::net::TcpStream>>),
    Tls(Box<WebSocketStream<futures_rustls::client::TlsStream<glommio::net::TcpStream>>>),
}

impl Conn {
    /// The counts of the phase the run is in.
    fn stats(&self) -> Rc<RefCell<Stats>> {
        match self.plan.phase.go_ns(self.plan.hold_ns) {
            Some(go) if self.env.now_ns() >= go => self.stats.clone(),
            _ => self.ramp.clone(),
        }
    }

    /// A TCP connection, TLS on it for wss, and the WebSocket handshake.
    async fn open(&mut self) -> Result<Stream, String> {
        let plan = self.plan.clone();
        let local = source_ip(plan.target.addr, self.c, plan.addresses);
        let tcp = connect(local, plan.target.addr, plan.timeout)
            .await
            .map_err(|e| format!("connect: {e}"))?;
        self.stats().borrow_mut().connections += 1;
        // Frames are small; a connection need not hold 128 KiB to read them.
        let config = WebSocketConfig::default()
            .read_buffer_size(4096)
            .write_buffer_size(0);
        let url = plan.target.url.as_str();
        match &plan.tls {
            None => {
                let (ws, _) = async_tungstenite::client_async_with_config(url, tcp, Some(config))
                    .await
                    .map_err(|e| format!("WebSocket handshake: {e}"))?;
                Ok(Stream::Plain(Box::new(ws)))
            }
            Some(connector) => {
                let name = ServerName::IpAddress(plan.target.addr.ip().into());
                let tls = connector
                    .clone()
                    .connect(name, tcp)
                    .await
                    .map_err(|e| format!("TLS handshake: {e}"))?;
                let (ws, _) = async_tungstenite::client_async_with_config(url, tls, Some(config))
                    .await
                    .map_err(|e| format!("WebSocket handshake: {e}"))?;
                Ok(Stream::Tls(Box::new(ws)))
            }
        }
    }

    /// One open connection: its first announce (in the ramp), the wait for
    /// the measured load, then the load.
    async fn serve<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        mut ws: WebSocketStream<S>,
        permit: Option<glommio::sync::Permit<'_>>,
    ) -> Ended {
        let timeout_ns = self.plan.timeout.as_nanos() as u64;
        if !self.ready {
            if !self.request(&mut ws, true, self.env.now_ns()).await {
                return Ended::Reconnect;
            }
            // Answered, or timed out on an open connection: ready either way.
            loop {
                let deadline = self.session.deadline_ns(timeout_ns).unwrap_or(0);
                match self.read(&mut ws, deadline).await {
                    Read::Handled(true) => break,
                    Read::Handled(false) => {}
                    Read::Timeout => {
                        let stats = self.stats();
                        self.session
                            .expire(self.env.now_ns(), timeout_ns, &mut stats.borrow_mut());
                        if self.session.pending().is_none() {
                            break;
                        }
                    }
                    Read::Closed => return self.lost(),
                }
            }
            drop(permit);
            self.ready = true;
            self.plan.ready(self.env.now_ns());
        }
        // Until the measured load: offers to answer, perhaps. Before the
        // ramp has ended, its end is awaited on the worker's gate rather than
        // polled: 50,000 connections polling would be a load of their own.
        loop {
            let now = self.env.now_ns();
            let read = match self.plan.phase.go_ns(self.plan.hold_ns) {
                Some(go) if now >= go => break,
                Some(go) => self.read(&mut ws, go).await,
                None => {
                    let gate = self.ramp_end.clone();
                    let until = now + 3_600_000_000_000;
                    let ended = async {
                        let _ = gate.acquire(1).await;
                        Read::Timeout
                    };
                    futures_lite::future::or(self.read(&mut ws, until), ended).await
                }
            };
            if let Read::Closed = read {
                return self.lost();
            }
        }
        let Some(end) = self.plan.end_ns() else {
            return Ended::Done;
        };
        loop {
            // The request in flight, if any, awaits its answer or time-out.
            if let Some(deadline) = self.session.deadline_ns(timeout_ns) {
                match self.read(&mut ws, deadline).await {
                    Read::Handled(_) => {}
                    Read::Timeout => {
                        let stats = self.stats();
                        self.session
                            .expire(self.env.now_ns(), timeout_ns, &mut stats.borrow_mut());
                    }
                    Read::Closed => return self.lost(),
                }
                continue;
            }
            let Some(due) = self.next_due(end) else {
                return Ended::Done;
            };
            // Offers keep coming while the next request waits its turn.
            while self.env.now_ns() < due {
                if let Read::Closed = self.read(&mut ws, due).await {
                    return self.lost();
                }
            }
            let stats = self.stats();
            self.session
                .expire(self.env.now_ns(), timeout_ns, &mut stats.borrow_mut());
            if !self.request(&mut ws, false, due).await {
                return Ended::Reconnect;
            }
        }
    }

    /// When the next request goes (now in the closed loop, on schedule in
    /// the open loop), as the time it counts from; `None` when the run is
    /// over.
    fn next_due(&mut self, end: u64) -> Option<u64> {
        let now = self.env.now_ns();
        if now >= end {
            return None;
        }
        let Some(schedule) = self.schedule else {
            return Some(now);
        };
        let go = end - self.plan.duration_ns;
        let timeout_ns = self.plan.timeout.as_nanos() as u64;
        loop {
            let intended = go + schedule.due_ns(self.scheduled);
            self.scheduled += 1;
            if intended >= end {
                return None;
            }
            // Hopelessly behind: those requests are skipped, not sent late.
            if intended + timeout_ns < now {
                self.stats().borrow_mut().skipped += 1;
                continue;
            }
            return Some(intended);
        }
    }

    /// Writes and sends the next request, its latency counted from `at_ns`
    /// (its scheduled time in the open loop: no coordinated omission);
    /// `first`: the opening announce.
    async fn request<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        ws: &mut WebSocketStream<S>,
        first: bool,
        at_ns: u64,
    ) -> bool {
        self.out.clear();
        let stats = self.stats();
        self.session.write_request(
            &self.plan.traffic,
            &mut self.rng,
            first,
            at_ns,
            &mut self.out,
            &mut stats.borrow_mut(),
        );
        self.send(ws, false).await
    }

    /// Sends `self.out` (or `self.answer`) as a text message.
    async fn send<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        ws: &mut WebSocketStream<S>,
        answer: bool,
    ) -> bool {
        let buf = if answer { &self.answer } else { &self.out };
        // The codec writes JSON, which is UTF-8.
        let text = String::from_utf8_lossy(buf).into_owned();
        if let Err(e) = ws.send(Message::text(text)).await {
            self.stats()
                .borrow_mut()
                .failure(format!("send: {e}").as_bytes());
            let stats = self.stats();
            self.session.lost(&mut stats.borrow_mut());
            return false;
        }
        true
    }

    /// Reads and handles one message, or nothing until `until_ns`.
    async fn read<S: AsyncRead + AsyncWrite + Unpin>(
        &mut self,
        ws: &mut WebSocketStream<S>,
        until_ns: u64,
    ) -> Read {
        let wait = Duration::from_nanos(until_ns.saturating_sub(self.env.now_ns()));
        let next = futures_lite::future::or(async { Some(ws.next().await) }, async {
            glommio::timer::sleep(wait).await;
            None
        })
        .await;
        let message = match next {
            None => return Read::Timeout,
            Some(None) => return Read::Closed,
            Some(Some(Err(e))) => {
                self.stats()
                    .borrow_mut()
                    .failure(format!("read: {e}").as_bytes());
                return Read::Closed;
            }
            Some(Some(Ok(message))) => message,
        };
        let text = match &message {
            Message::Text(text) => text.as_bytes(),
            // Answered by tungstenite itself.
            Message::Ping(_) | Message::Pong(_) | Message::Frame(_) => return Read::Handled(false),
            Message::Close(_) => return Read::Closed,
            Message::Binary(_) => {
                self.stats().borrow_mut().invalid(Invalid::Malformed);
                return Read::Handled(false);
            }
        };
        self.answer.clear();
        let stats = self.stats();
        let outcome = self.session.on_message(
            text,
            &self.plan.traffic,
            &mut self.rng,
            self.env.now_ns(),
            &mut self.answer,
            &mut stats.borrow_mut(),
        );
        if outcome.answer && !self.send(ws, true).await {
            return Read::Closed;
        }
        Read::Handled(outcome.answered)
    }

    /// The connection closed under us: the request in flight is lost, and a
    /// new connection goes on.
    fn lost(&mut self) -> Ended {
        let stats = self.stats();
        self.session.lost(&mut stats.borrow_mut());
        Ended::Reconnect
    }
}

/// A TCP connection from `local_ip` to `target`, without blocking the
/// executor: a tracker whose accept queue is full drops the SYN, and a
/// blocking connect would stall every connection of the worker for the
/// retransmission (a second).
async fn connect(
    local_ip: IpAddr,
    target: SocketAddr,
    timeout: Duration,
) -> io::Result<glommio::net::TcpStream> {
    use socket2::{Domain, Protocol, Socket, Type};
    let socket = Socket::new(
        Domain::for_address(target),
        Type::STREAM,
        Some(Protocol::TCP),
    )?;
    if target.is_ipv4() {
        // The source port is chosen at connect, per destination, not at
        // bind for every destination: more connections from one address.
        let on: libc::c_int = 1;
        // SAFETY: a valid socket and an int option of the right size.
        unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::IPPROTO_IP,
                libc::IP_BIND_ADDRESS_NO_PORT,
                (&on as *const libc::c_int).cast(),
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            );
        }
    }
    socket.bind(&SocketAddr::new(local_ip, 0).into())?;
    socket.set_tcp_nodelay(true)?;
    socket.set_nonblocking(true)?;
    match socket.connect(&target.into()) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EINPROGRESS) => {}
        Err(e) => return Err(e),
    }
    let start = std::time::Instant::now();
    loop {
        if let Some(e) = socket.take_error()? {
            return Err(e);
        }
        if socket.peer_addr().is_ok() {
            break;
        }
        if start.elapsed() >= timeout {
            return Err(io::Error::new(io::ErrorKind::TimedOut, "timed out"));
        }
        glommio::timer::sleep(Duration::from_millis(1)).await;
    }
    // SAFETY: the fd comes from a socket we own and hand over whole.
    Ok(unsafe { glommio::net::TcpStream::from_raw_fd(socket.into_raw_fd()) })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_spread_over_addresses_from_127_0_0_2() {
        let target: SocketAddr = "127.0.0.1:3000".parse().unwrap();
        let ips: Vec<IpAddr> = (0..4).map(|c| source_ip(target, c, 3)).collect();
        assert_eq!(
            ips,
            ["127.0.0.2", "127.0.0.3", "127.0.0.4", "127.0.0.2"]
                .map(|ip| ip.parse::<IpAddr>().unwrap())
        );
        assert_eq!(
            source_ip(target, 299, 300),
            "127.0.1.45".parse::<IpAddr>().unwrap()
        );
        let v6: SocketAddr = "[::1]:3000".parse().unwrap();
        assert_eq!(source_ip(v6, 7, 1), "::1".parse::<IpAddr>().unwrap());
    }
}
