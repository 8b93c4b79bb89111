//! `load-test udp`: the socket loops. Each worker owns some of the sockets,
//! each bound to its own loopback address (so the tracker's `SO_REUSEPORT`
//! hashing spreads them, and each carries its own set of peers); a task per
//! socket sends and receives in batches with recvmmsg/sendmmsg and parks on
//! the socket when there is nothing to do. All the protocol work is in
//! [`crate::udp_session`].

use std::cell::RefCell;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd};
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use tracker_udp::socket::{bind_reuseport, RecvBatch, SendBatch};

use crate::config::Config;
use crate::model::{min_sources, Kind, Rng, TrafficModel, Weighted, PORTS_PER_SOURCE};
use crate::runner::{self, WorkerEnv};
use crate::stats::{RunInfo, Stats, Summary};
use crate::udp_session::Session;

/// Socket buffer size asked for (the kernel caps it at rmem_max).
const SOCKET_BUFFER: usize = 4 << 20;
/// The longest a socket task sleeps between looks at the clock.
const MAX_PARK: Duration = Duration::from_millis(10);
/// The shortest open-loop sleep: sends are grouped into ticks of this length.
const OPEN_LOOP_TICK: Duration = Duration::from_millis(1);

/// What every worker shares, read-only.
struct Plan {
    target: SocketAddr,
    model: TrafficModel,
    mix: Weighted<3>,
    workers: u32,
    sockets: u32,
    in_flight: u32,
    /// Requests per second per socket (open loop).
    rate_per_socket: Option<f64>,
    duration_ns: u64,
    timeout_ns: u64,
    seed: u64,
}

/// The address socket `g` binds: 127.1.0.1, 127.1.0.2, ... for IPv4; IPv6
/// loopback has the one address.
pub fn source_ip(target: SocketAddr, g: u32) -> IpAddr {
    match target {
        SocketAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(0x7f01_0001 + g)),
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
    let sockets = (config.udp.sockets_per_worker * workers)
        .max(min_sources(traffic.peers))
        .next_multiple_of(workers);
    let identities = if target.is_ipv6() { 1 } else { sockets };
    let model = TrafficModel::new(&traffic, identities, config.seed)?;
    let mix = Weighted::new(config.udp.mix.as_array()).map_err(|e| format!("--mix: {e}"))?;
    let plan = Arc::new(Plan {
        target,
        model,
        mix,
        workers,
        sockets,
        in_flight: config.udp_in_flight(),
        rate_per_socket: config.rate.map(|r| r / f64::from(sockets)),
        duration_ns: (config.duration_secs * 1e9) as u64,
        timeout_ns: config.timeout_ms * 1_000_000,
        seed: config.seed,
    });
    let mode = match config.rate {
        Some(rate) => format!("open loop, {rate} req/s"),
        None => format!("closed loop, {} in flight per socket", plan.in_flight),
    };
    eprintln!(
        "load-test: udp {target}, {workers} worker(s) on {placements:?}, {sockets} sockets, {mode}, {} s",
        config.duration_secs
    );
    let deadline =
        Duration::from_secs_f64(config.duration_secs + 2.0 * config.timeout_ms as f64 / 1e3 + 10.0);
    let stats = runner::run(placements, config.progress, deadline, &Kind::ALL, {
        let plan = plan.clone();
        move |env| worker(plan.clone(), env)
    })?;
    let info = RunInfo {
        protocol: "udp",
        target: &target.to_string(),
        mode,
        workers: workers as usize,
        sockets,
        kinds: &Kind::ALL,
    };
    Ok(Summary::new(&stats, &info, config.duration_secs))
}

async fn worker(plan: Arc<Plan>, env: WorkerEnv) -> Result<Stats, String> {
    let stats = Rc::new(RefCell::new(Stats::default()));
    let env = Rc::new(env);
    let mut tasks = Vec::new();
    for g in (env.index as u32..plan.sockets).step_by(plan.workers as usize) {
        let local = SocketAddr::new(source_ip(plan.target, g), 0);
        let socket = bind_reuseport(local, SOCKET_BUFFER)
            .map_err(|e| format!("cannot bind a UDP socket on {local}: {e}"))?;
        let (plan, env, stats) = (plan.clone(), env.clone(), stats.clone());
        tasks.push(glommio::spawn_local(socket_loop(
            plan, env, stats, g, socket,
        )));
    }
    let (results, stats) = runner::finish_worker(&env, &stats, tasks).await;
    results.into_iter().collect::<Result<(), String>>()?;
    Ok(stats)
}

/// One socket until the end of the run: send what the loop allows, receive
/// what has come, and sleep on the socket when neither has anything to do.
async fn socket_loop(
    plan: Arc<Plan>,
    env: Rc<WorkerEnv>,
    stats: Rc<RefCell<Stats>>,
    g: u32,
    socket: std::net::UdpSocket,
) -> Result<(), String> {
    let local = socket.local_addr().map_err(|e| e.to_string())?;
    // SAFETY: the fd comes from a socket we own and hand over whole.
    let parker = unsafe { glommio::net::UdpSocket::from_raw_fd(socket.into_raw_fd()) };
    let fd = parker.as_raw_fd();
    let source = g % plan.model.sources();
    let mut session = Session::new(
        plan.target,
        local.ip(),
        source,
        plan.mix.clone(),
        plan.in_flight,
        plan.timeout_ns,
    );
    let mut rng = Rng::new(plan.seed ^ (u64::from(g) << 32) ^ 0xa5a5);
    let mut rx = RecvBatch::default();
    let mut tx = SendBatch::default();
    let mut scheduled = 0u64;
    let mut peek = [0u8; 1];
    let end_ns = plan.duration_ns;
    let drain_end_ns = end_ns + plan.timeout_ns;
    loop {
        let now = env.now_ns();
        if now >= end_ns && (session.in_flight() == 0 || now >= drain_end_ns) {
            session.expire_all(&mut stats.borrow_mut());
            return Ok(());
        }
        // At most every 10 ms; also while answers keep coming.
        session.expire(now, &mut stats.borrow_mut());
        let mut wake_ns = now + MAX_PARK.as_nanos() as u64;
        if now < end_ns {
            let mut stats = stats.borrow_mut();
            match plan.rate_per_socket {
                None => {
                    while session.has_room() {
                        let out = tx.push(plan.target, None);
                        if !session.write_next(&plan.model, &mut rng, now, out, &mut stats) {
                            tx.pop();
                            break;
                        }
                        if tx.is_full() {
                            flush(fd, &mut tx, &mut stats);
                        }
                    }
                }
                Some(rate) => {
                    let per_ns = rate / 1e9;
                    let due = ((now as f64 * per_ns) as u64).min((end_ns as f64 * per_ns) as u64);
                    // Sending never waits for answers here, so a request's
                    // latency counts from when it leaves (at most a tick after
                    // its scheduled time), not from the schedule.
                    while scheduled < due {
                        scheduled += 1;
                        let out = tx.push(plan.target, None);
                        if !session.write_next(&plan.model, &mut rng, now, out, &mut stats) {
                            tx.pop();
                            // Before the first connection id nothing is late yet.
                            if session.connected() {
                                stats.skipped += 1;
                            }
                        }
                        if tx.is_full() {
                            flush(fd, &mut tx, &mut stats);
                        }
                    }
                    let next = ((scheduled + 1) as f64 / per_ns) as u64;
                    wake_ns = next.clamp(now + OPEN_LOOP_TICK.as_nanos() as u64, wake_ns);
                }
            }
            flush(fd, &mut tx, &mut stats);
        }
        match rx.recv(fd) {
            Ok(n) => {
                let now = env.now_ns();
                {
                    let mut stats = stats.borrow_mut();
                    for i in 0..n {
                        if let Some(packet) = rx.get(i) {
                            session.on_datagram(packet.data, packet.from, now, &mut stats);
                        }
                    }
                }
                glommio::yield_if_needed().await;
                continue;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(format!("receive on {local}: {e}")),
        }
        let now = env.now_ns();
        let end = if now < end_ns { end_ns } else { drain_end_ns };
        let sleep_ns = wake_ns.min(end).saturating_sub(now).max(50_000);
        let _ = parker.set_read_timeout(Some(Duration::from_nanos(sleep_ns)));
        // Returns when a datagram is queued, or with a time-out error.
        let _ = parker.peek_from(&mut peek).await;
    }
}

fn flush(fd: i32, tx: &mut SendBatch, stats: &mut Stats) {
    if !tx.is_empty() {
        let (_, _, failed) = tx.flush(fd);
        stats.send_failed += failed as u64;
    }
}
