//! `load-test udp`: the socket loops. Each worker speaks for some of the
//! source addresses (127.1.0.1, 127.1.0.2, ...: the tracker's `SO_REUSEPORT`
//! hashing spreads them, and each carries its own set of peers and its own
//! connection id). Over IPv4 a worker sends for all of its sources from one
//! socket, choosing each datagram's source address (IP_PKTINFO) and telling
//! answers apart by the address they come back to, so that the load costs a
//! few syscalls per batch however many sources there are. IPv6 loopback has
//! one address, so there a source is a socket of its own. A task per socket
//! sends and receives in batches with recvmmsg/sendmmsg and parks on the
//! socket when there is nothing to do. All the protocol work is in
//! [`crate::udp_session`].

use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tracker_net::udp::{
    bind_reuseport, timestamp_arrivals, LocalAddr, RecvBatch, SendBatch, BATCH,
};

use crate::config::Config;
use crate::model::{min_sources, Kind, Rng, TrafficModel, Weighted, PORTS_PER_SOURCE};
use crate::runner::{self, WorkerEnv};
use crate::stats::{Invalid, RunInfo, Stats, Summary};
use crate::udp_session::Session;

/// Socket buffer size asked for (the kernel caps it at rmem_max).
const SOCKET_BUFFER: usize = 4 << 20;
/// The longest a socket task sleeps between looks at the clock.
const MAX_PARK: Duration = Duration::from_millis(10);
/// The shortest read time-out the closed loop parks with (zero would mean none).
const MIN_PARK: Duration = Duration::from_micros(50);
/// How late a glommio timer may wake here (an io_uring time-out, on a VM
/// that halts idle vCPUs: 70-100 µs seen). The open loop sleeps only until
/// this long before its next send and polls the rest of the way, so requests
/// leave on schedule one by one, not bunched at each wake-up: bunches of 20
/// every 200 µs at 100k req/s put 60-80 µs of the generator's making into
/// every median latency.
const TIMER_SLACK: Duration = Duration::from_micros(200);
/// The first source address, 127.1.0.1.
const FIRST_SOURCE_V4: u32 = 0x7f01_0001;

/// What every worker shares, read-only.
struct Plan {
    target: SocketAddr,
    model: TrafficModel,
    mix: Weighted<3>,
    workers: u32,
    sources: u32,
    in_flight: u32,
    /// Requests per second per source (open loop).
    rate_per_source: Option<f64>,
    duration_ns: u64,
    timeout_ns: u64,
    seed: u64,
}

/// The address of source `g`: 127.1.0.1, 127.1.0.2, ... for IPv4; IPv6
/// loopback has the one address.
pub fn source_ip(target: SocketAddr, g: u32) -> IpAddr {
    match target {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(FIRST_SOURCE_V4 + g)),
        SocketAddr::V6(_) => IpAddr::V6(Ipv6Addr::LOCALHOST),
    }
}

pub fn parse_target(text: &str) -> Result<SocketAddr, String> {
    let target: SocketAddr = text
        .parse()
        .map_err(|_| format!("--target `{text}` is not an address such as 127.0.0.1:6969"))?;
    if !target.ip().is_loopback() {
        return Err(format!(
            "--target {target}: only loopback addresses (127.0.0.0/8, ::1) are allowed"
        ));
    }
    Ok(target)
}

pub fn run(config: &Config) -> Result<Summary, String> {
    let target = parse_target(config.target.as_deref().ok_or("--target is required")?)?;
    let placements = runner::placements(config.workers, config.cpus.as_deref())?;
    let workers = placements.len() as u32;
    let mut traffic = config.traffic.clone();
    // IPv6 loopback is one address: the peers' ports alone tell them apart.
    if target.is_ipv6() && traffic.peers > PORTS_PER_SOURCE {
        eprintln!(
            "load-test: IPv6 loopback has one address; using {PORTS_PER_SOURCE} peers instead of {}",
            traffic.peers
        );
        traffic.peers = PORTS_PER_SOURCE;
    }
    let sources = (config.udp.sources_per_worker * workers)
        .max(min_sources(traffic.peers))
        .next_multiple_of(workers);
    let identities = if target.is_ipv6() { 1 } else { sources };
    let sockets = if target.is_ipv6() { sources } else { workers };
    let lists = crate::private::Lists::load(&traffic)?;
    let model = TrafficModel::with_lists(&traffic, identities, config.seed, lists)?;
    let mix = Weighted::new(config.udp.mix.as_array()).map_err(|e| format!("--mix: {e}"))?;
    let plan = Arc::new(Plan {
        target,
        model,
        mix,
        workers,
        sources,
        in_flight: config.udp_in_flight(),
        rate_per_source: config.rate.map(|r| r / f64::from(sources)),
        duration_ns: (config.duration_secs * 1e9) as u64,
        timeout_ns: config.timeout_ms * 1_000_000,
        seed: config.seed,
    });
    let mode = match config.rate {
        Some(rate) => format!("open loop, {rate} req/s"),
        None => format!("closed loop, {} in flight per source", plan.in_flight),
    };
    eprintln!(
        "load-test: udp {target}, {workers} worker(s) on {placements:?}, {sources} sources on {sockets} sockets, {mode}, {} s",
        config.duration_secs
    );
    let deadline =
        Duration::from_secs_f64(config.duration_secs + 2.0 * config.timeout_ms as f64 / 1e3 + 10.0);
    let stats = runner::run(placements, config.progress, deadline, &Kind::UDP, {
        let plan = plan.clone();
        move |env| worker(plan.clone(), env)
    })?;
    let info = RunInfo {
        protocol: "udp",
        target: &target.to_string(),
        mode,
        workers: workers as usize,
        sockets,
        sources,
        kinds: &Kind::UDP,
    };
    Ok(Summary::new(&stats, &info, config.duration_secs))
}

/// The sources one socket sends for, each with its conversation: source
/// `first + i * step` is `sessions[i]`.
struct Sources {
    sessions: Vec<Session>,
    first: u32,
    step: u32,
}

impl Sources {
    /// The session an answer that came to `to` belongs to: a socket with
    /// one source has no choice to make; otherwise the address tells.
    fn session_for(&mut self, to: Option<LocalAddr>) -> Option<&mut Session> {
        let i = match (self.sessions.len(), to) {
            (1, _) => 0,
            (_, Some(LocalAddr::V4(ip))) => {
                let offset = u32::from(ip).checked_sub(FIRST_SOURCE_V4 + self.first)?;
                if offset % self.step != 0 {
                    return None;
                }
                (offset / self.step) as usize
            }
            _ => return None,
        };
        self.sessions.get_mut(i)
    }
}

async fn worker(plan: Arc<Plan>, env: WorkerEnv) -> Result<Stats, String> {
    let stats = Rc::new(RefCell::new(Stats::default()));
    let env = Rc::new(env);
    let mine: Vec<u32> = (env.index as u32..plan.sources)
        .step_by(plan.workers as usize)
        .collect();
    // IPv4: one wildcard socket sends for every source (IP_PKTINFO picks each
    // datagram's source address). IPv6: a socket per source, on ::1.
    let groups: Vec<Vec<u32>> = match plan.target {
        SocketAddr::V4(_) => vec![mine],
        SocketAddr::V6(_) => mine.into_iter().map(|g| vec![g]).collect(),
    };
    let mut tasks = Vec::new();
    for group in groups {
        let local: SocketAddr = match plan.target {
            SocketAddr::V4(_) => (Ipv4Addr::UNSPECIFIED, 0).into(),
            SocketAddr::V6(_) => (Ipv6Addr::LOCALHOST, 0).into(),
        };
        let socket = bind_reuseport(local, SOCKET_BUFFER)
            .map_err(|e| format!("cannot bind a UDP socket on {local}: {e}"))?;
        timestamp_arrivals(&socket)
            .map_err(|e| format!("cannot ask for arrival times on {local}: {e}"))?;
        let first = group.first().copied().unwrap_or_default();
        let sources = Sources {
            sessions: group
                .iter()
                .map(|&g| {
                    Session::new(
                        plan.target,
                        source_ip(plan.target, g),
                        g % plan.model.sources(),
                        plan.mix.clone(),
                        plan.in_flight,
                        plan.timeout_ns,
                    )
                })
                .collect(),
            first,
            step: plan.workers,
        };
        let seed = plan.seed ^ (u64::from(first) << 32) ^ 0xa5a5;
        let (plan, env, stats) = (plan.clone(), env.clone(), stats.clone());
        tasks.push(glommio::spawn_local(socket_loop(
            plan, env, stats, sources, seed, socket,
        )));
    }
    let (results, stats) = runner::finish_worker(&env, &stats, tasks).await;
    results.into_iter().collect::<Result<(), String>>()?;
    Ok(stats)
}

/// One socket until the end of the run: send what the loop allows, receive
/// what has come, and sleep: the closed loop on the socket until answers
/// come, the open loop until its next tick.
async fn socket_loop(
    plan: Arc<Plan>,
    env: Rc<WorkerEnv>,
    stats: Rc<RefCell<Stats>>,
    mut sources: Sources,
    seed: u64,
    socket: std::net::UdpSocket,
) -> Result<(), String> {
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    // SAFETY: the fd comes from a socket we own and hand over whole.
    let parker = unsafe { glommio::net::UdpSocket::from_raw_fd(socket.into_raw_fd()) };
    let fd = parker.as_raw_fd();
    // A wildcard socket names each datagram's source; one on ::1 needs not.
    let pick_source = local.ip().is_unspecified();
    let mut rng = Rng::new(seed);
    let mut rx = RecvBatch::default();
    let mut tx = SendBatch::default();
    let mut scheduled = 0u64;
    let mut peek = [0u8; 1];
    let end_ns = plan.duration_ns;
    let drain_end_ns = end_ns + plan.timeout_ns;
    let count = sources.sessions.len();
    let rate = plan.rate_per_source.map(|r| r * count as f64);
    loop {
        let now = env.now_ns();
        let in_flight: usize = sources.sessions.iter().map(Session::in_flight).sum();
        if now >= end_ns && (in_flight == 0 || now >= drain_end_ns) {
            for session in &mut sources.sessions {
                session.expire_all(&mut stats.borrow_mut());
            }
            return Ok(());
        }
        for session in &mut sources.sessions {
            // At most every 10 ms; also while answers keep coming.
            session.expire(now, &mut stats.borrow_mut());
        }
        let mut wake_ns = now + MAX_PARK.as_nanos() as u64;
        if now < end_ns {
            let mut stats = stats.borrow_mut();
            let Sources {
                sessions,
                first,
                step,
            } = &mut sources;
            let (first, step) = (*first, *step);
            // Whether source `i` sent its next request; `late` counts one it
            // could not send as skipped, unless it still awaits its first
            // connection id (before which nothing is late).
            let mut send = |i: usize, late: bool, tx: &mut SendBatch, stats: &mut Stats| {
                let from =
                    pick_source.then(|| match source_ip(plan.target, first + i as u32 * step) {
                        IpAddr::V4(ip) => LocalAddr::V4(ip),
                        IpAddr::V6(ip) => LocalAddr::V6(ip, 0),
                    });
                let out = tx.push(plan.target, from);
                let session = &mut sessions[i];
                let sent = session.write_next(&plan.model, &mut rng, now, out, stats);
                if !sent {
                    tx.pop();
                    if late && session.connected() {
                        stats.skipped += 1;
                    }
                } else if tx.is_full() {
                    flush(fd, tx, stats);
                }
                sent
            };
            match rate {
                None => {
                    for i in 0..count {
                        while send(i, false, &mut tx, &mut stats) {}
                    }
                }
                Some(rate) => {
                    let per_ns = rate / 1e9;
                    let due = ((now as f64 * per_ns) as u64).min((end_ns as f64 * per_ns) as u64);
                    // Sending never waits for answers here, so a request's
                    // latency counts from when it leaves (a turn of this loop
                    // after its scheduled time), not from the schedule. The
                    // sources take turns.
                    while scheduled < due {
                        let i = (scheduled % count as u64) as usize;
                        scheduled += 1;
                        send(i, true, &mut tx, &mut stats);
                    }
                    let next = ((scheduled + 1) as f64 / per_ns) as u64;
                    wake_ns = wake_ns.min(next);
                }
            }
            flush(fd, &mut tx, &mut stats);
        }
        let received = receive_all(fd, &mut rx, &mut sources, &env, &mut stats.borrow_mut())
            .map_err(|e| format!("receive on {local}: {e}"))?;
        let now = env.now_ns();
        let end = if now < end_ns { end_ns } else { drain_end_ns };
        let wait = Duration::from_nanos(wake_ns.min(end).saturating_sub(now));
        if rate.is_some() {
            // The open loop runs by the clock alone: answers wait in the
            // socket until the loop comes round (their latency is taken from
            // the kernel's stamps). Polling costs the generator its CPU only
            // at rates where sends are under TIMER_SLACK apart.
            if wait > TIMER_SLACK {
                glommio::timer::sleep(wait - TIMER_SLACK).await;
            } else {
                futures_lite::future::yield_now().await;
            }
        } else if received > 0 {
            glommio::yield_if_needed().await;
        } else {
            let _ = parker.set_read_timeout(Some(wait.max(MIN_PARK)));
            // Returns when a datagram is queued, or with a time-out error.
            let _ = parker.peek_from(&mut peek).await;
        }
    }
}

/// Reads and checks every answer queued on `fd`; returns how many came.
fn receive_all(
    fd: i32,
    rx: &mut RecvBatch,
    sources: &mut Sources,
    env: &WorkerEnv,
    stats: &mut Stats,
) -> io::Result<usize> {
    let mut received = 0;
    loop {
        let n = match rx.recv(fd) {
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(received),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        };
        received += n;
        let now = env.now_ns();
        let now_unix = unix_ns();
        for i in 0..n {
            let Some(packet) = rx.get(i) else { continue };
            let Some(session) = sources.session_for(packet.to) else {
                stats.invalid(Invalid::WrongSource);
                continue;
            };
            // Timed from the kernel's arrival stamp: how long this loop took
            // to come round is ours, not the tracker's.
            let waited = packet
                .arrived_unix_ns
                .map_or(0, |at| now_unix.saturating_sub(at));
            let arrived = now.saturating_sub(waited);
            session.on_datagram(packet.data, packet.from, arrived, stats);
        }
        // A short batch emptied the queue: spare the syscall that would say so.
        if n < BATCH {
            return Ok(received);
        }
    }
}

/// Real time, in nanoseconds since the Unix epoch: the clock of the kernel's
/// arrival stamps.
fn unix_ns() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64)
}

fn flush(fd: i32, tx: &mut SendBatch, stats: &mut Stats) {
    if !tx.is_empty() {
        let (_, _, failed) = tx.flush(fd);
        stats.send_failed += failed as u64;
    }
}
