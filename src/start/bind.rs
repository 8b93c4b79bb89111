//! Binding every address once per worker, each address locked first.

use std::net::{SocketAddr, TcpListener, UdpSocket};

use tracing::{info, warn};
use tracker_runtime::owner::Owners;
use tracker_udp::steering;

use crate::config::Config;
use crate::start::instance;

/// What one worker serves: its own socket for every address.
#[derive(Default)]
pub struct WorkerSockets {
    pub udp: Vec<UdpSocket>,
    /// Its AF_XDP sockets, a queue each (`udp.xdp`): handed over apart
    /// from the others (`handover::xdp_copies`).
    pub xdp: Vec<tracker_net::xdp::xsk::Xsk>,
    pub http: Vec<TcpListener>,
    pub https: Vec<TcpListener>,
    /// The metrics endpoint's listeners: worker 0's alone.
    pub metrics: Vec<TcpListener>,
    /// The private site API's listener: worker 0's alone.
    pub site_api: Vec<TcpListener>,
}

/// Binds every address once per worker, before any worker starts, so that a
/// port in use is a clear start-up error. An address with port 0 gets its port
/// from the first bind, so that all workers share it. Once bound, each address
/// must be this tracker's alone (`instance::alone`): a second tracker must not
/// join the first's `SO_REUSEPORT` groups. Each address is bound for worker 0,
/// 1, 2, ... in turn, so that worker `i`'s socket is index `i` of the
/// address's group, as UDP steering needs (see `tracker_udp::steering`).
pub fn bind_all(config: &Config, workers: usize) -> Result<Vec<WorkerSockets>, String> {
    let mut per_worker: Vec<WorkerSockets> =
        (0..workers).map(|_| WorkerSockets::default()).collect();
    let recv_buffer = config.udp.recv_buffer_bytes;
    bind_each(
        &config.udp.listen,
        ("udp", "UDP", "--udp"),
        &mut per_worker,
        |addr| tracker_net::udp::bind_reuseport(addr, recv_buffer),
        |s| &mut s.udp,
    )?;
    bind_each(
        &config.http.listen,
        ("tcp", "HTTP", "--http"),
        &mut per_worker,
        tracker_net::tcp::bind_reuseport,
        |s| &mut s.http,
    )?;
    bind_each(
        &config.http.https_listen,
        ("tcp", "HTTPS", "--https"),
        &mut per_worker,
        tracker_net::tcp::bind_reuseport,
        |s| &mut s.https,
    )?;
    // Once, for worker 0: the endpoint gathers every worker's counters itself.
    bind_each(
        &config.metrics.listen,
        ("tcp", "metrics", "--metrics"),
        &mut per_worker[..1],
        tracker_net::tcp::bind_exclusive,
        |s| &mut s.metrics,
    )?;
    bind_each(
        &config.site_api_listen(),
        ("tcp", "site API", "private.api_listen"),
        &mut per_worker[..1],
        tracker_net::tcp::bind_exclusive,
        |s| &mut s.site_api,
    )?;
    Ok(per_worker)
}

/// Binds each of `addrs` once for every worker with `bind`, into the list
/// `slot` picks, and checks that no other tracker shares it. `names`: the
/// transport ("udp" or "tcp"), the protocol as messages name it, and its
/// flag.
fn bind_each<S: LocalAddr + std::os::fd::AsFd>(
    addrs: &[SocketAddr],
    (transport, protocol, flag): (&str, &str, &str),
    per_worker: &mut [WorkerSockets],
    bind: impl Fn(SocketAddr) -> std::io::Result<S>,
    slot: impl Fn(&mut WorkerSockets) -> &mut Vec<S>,
) -> Result<(), String> {
    for &addr in addrs {
        let mut addr = addr;
        let mut bound = Vec::with_capacity(per_worker.len());
        for _ in 0..per_worker.len() {
            let socket = bind(addr).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    format!("cannot bind {protocol} {addr}: the port is in use by another program; stop it or choose another address with {flag}")
                } else {
                    format!("cannot bind {protocol} {addr}: {e}")
                }
            })?;
            addr = socket.local_addr().map_err(|e| e.to_string())?;
            bound.push(socket);
        }
        instance::alone(transport, protocol, addr, &bound)
            .map_err(|e| format!("{e} with {flag}"))?;
        for (sockets, socket) in per_worker.iter_mut().zip(bound) {
            slot(sockets).push(socket);
        }
    }
    Ok(())
}

/// The UDP addresses served, with the ports the first bind gave.
pub fn udp_addresses(per_worker: &[WorkerSockets]) -> Vec<SocketAddr> {
    per_worker
        .first()
        .map(|first| {
            first
                .udp
                .iter()
                .filter_map(|s| s.local_addr().ok())
                .collect()
        })
        .unwrap_or_default()
}

/// A bound socket's address.
trait LocalAddr {
    fn local_addr(&self) -> std::io::Result<SocketAddr>;
}

impl LocalAddr for UdpSocket {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        UdpSocket::local_addr(self)
    }
}

impl LocalAddr for TcpListener {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
}

/// Attaches the UDP steering program to each UDP address's group (when
/// `udp.steering` is on and there is more than one worker), and says once
/// whether steering is on. A group whose program cannot be attached is left
/// to the kernel's hash: its workers forward what they do not own.
pub fn steer_udp(config: &Config, per_worker: &[WorkerSockets], owners: &Owners) {
    let Some(first) = per_worker.first().filter(|s| !s.udp.is_empty()) else {
        return;
    };
    if owners.workers() == 1 {
        return;
    }
    if !config.udp.steering {
        info!(
            "UDP steering off (udp.steering = false): the kernel spreads datagrams over the \
             workers, which forward each announce to the worker that owns its torrent"
        );
        return;
    }
    let mut steered = Vec::new();
    for socket in &first.udp {
        let addr = socket
            .local_addr()
            .map_or_else(|_| "?".to_string(), |a| a.to_string());
        match steering::attach(socket, owners) {
            Ok(()) => steered.push(addr),
            Err(e) => warn!(
                "UDP steering off for {addr}: cannot attach its program ({e}); its workers \
                 forward each announce to the worker that owns its torrent"
            ),
        }
    }
    if !steered.is_empty() {
        info!(
            "UDP steering on for {}: each announce and scrape goes to the socket of the worker \
             that owns its torrent",
            steered.join(", ")
        );
    }
}
