//! AF_XDP at start (`[udp.xdp]`): for each interface, its XDP program and
//! the map of its AF_XDP sockets, a socket per queue (each handed to a
//! worker), and the BPF link that attaches the program. The link is held
//! until the workers stop; closing it, or the process ending however it
//! ends, detaches the program, and the kernel's sockets take the traffic.
//! First of all, the routing table is read and followed (`route`): the
//! workers answer only clients it sends back out of their interface.

use std::net::{IpAddr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd, OwnedFd};
use std::time::{Duration, Instant};

use tracing::{info, warn};
use tracker_net::xdp::bpf::{self, AttachMode};
use tracker_net::xdp::ebpf::{steering_program, Fallback, Steering, Target};
use tracker_net::xdp::xsk::{Xsk, XskConfig, XDP_PACKET_HEADROOM};
use tracker_net::xdp::{link, route};
use tracker_udp::config::XdpConfig;

use crate::start::bind::WorkerSockets;

/// Ethernet header and one VLAN tag: what a frame holds beyond the MTU.
const LINK_HEADER: u32 = 18;
/// How long a start waits for a queue that a process which just ended
/// still holds: the kernel releases an AF_XDP socket's queue in deferred
/// work after its close (milliseconds), so a restart right after a crash
/// can find it busy.
pub const RELEASE_WAIT: Duration = Duration::from_secs(1);
/// How often a queue or an interface still held by a predecessor is tried
/// again.
const RETRY: Duration = Duration::from_millis(20);

/// What keeps the programs attached: dropping it detaches them.
pub struct Attached {
    /// One per interface, with its name.
    links: Vec<(String, OwnedFd)>,
    /// The programs and maps the links and sockets use; the kernel holds
    /// them while the links do, kept here for their ids in the log.
    _programs: Vec<OwnedFd>,
    _maps: Vec<OwnedFd>,
}

impl Attached {
    /// Detaches every program: the kernel's sockets take the traffic.
    pub fn detach(self) {
        let names: Vec<String> = self.links.iter().map(|(name, _)| name.clone()).collect();
        drop(self);
        info!("AF_XDP detached from {}", names.join(", "));
    }
}

/// Attaches AF_XDP to each of `config`'s interfaces for the UDP addresses
/// `listen` (bound, ports known), and gives each worker its queues'
/// sockets. None when AF_XDP is off. `patience`: how long a queue or an
/// interface that another process holds is waited for (a predecessor
/// letting go in a hand-over, or the kernel releasing a crashed one's).
pub fn attach(
    config: &XdpConfig,
    listen: &[SocketAddr],
    per_worker: &mut [WorkerSockets],
    patience: Duration,
) -> Result<Option<Attached>, String> {
    if !config.enabled() {
        return Ok(None);
    }
    check_capabilities()?;
    route::shared(route_read_failed).map_err(|e| {
        format!("udp.xdp: cannot read the routing table (netlink, RTM_GETROUTE): {e}")
    })?;
    let mut attached = Attached {
        links: Vec::new(),
        _programs: Vec::new(),
        _maps: Vec::new(),
    };
    let deadline = Instant::now() + patience;
    for name in &config.interfaces {
        let plan = Interface::plan(name, config, listen)?;
        let map = bpf::create_xsk_map(plan.queue_count)
            .map_err(|e| format!("udp.xdp: cannot create the socket map for {name}: {e}"))?;
        let program = steering_program(&Steering {
            targets: &plan.targets,
            mac: plan.mac,
            loopback_is_martian: !plan.route_localnet,
            xsk_map_fd: map.as_raw_fd(),
            fallback: Fallback::Pass,
        })
        .map_err(|e| format!("udp.xdp: {name}: {e}"))?;
        let program = bpf::load_xdp(&program, "tracker_udp")
            .map_err(|e| format!("udp.xdp: the kernel refused the XDP program for {name}: {e}"))?;
        for (n, &queue) in plan.queues.iter().enumerate() {
            let socket = XskConfig {
                ifindex: plan.ifindex,
                queue,
                frames: config.frames,
                frame_size: config.frame_size,
                zero_copy: config.zero_copy,
            };
            let xsk = retry_while_busy(deadline, || Xsk::open(&socket)).map_err(|e| {
                format!("udp.xdp: cannot open an AF_XDP socket on queue {queue} of {name}: {e}")
            })?;
            bpf::map_set(map.as_fd(), queue, xsk.fd().as_raw_fd()).map_err(|e| {
                format!("udp.xdp: cannot put queue {queue}'s socket in {name}'s map: {e}")
            })?;
            if let Some(worker) = per_worker.get_mut(n % per_worker.len().max(1)) {
                worker.xdp.push(xsk);
            }
        }
        let mode = if config.generic {
            AttachMode::Generic
        } else {
            AttachMode::Native
        };
        // Last, once every queue's socket is in the map.
        let link = retry_while_busy(deadline, || {
            bpf::attach_xdp(program.as_fd(), plan.ifindex, mode)
        })
        .map_err(|e| {
            let hint = if config.generic {
                ""
            } else {
                " (a driver without native XDP needs udp.xdp.generic = true)"
            };
            format!("udp.xdp: cannot attach the XDP program to {name}: {e}{hint}")
        })?;
        info!(
            "AF_XDP on {name} ({} mode, {}): queues {:?} taken for {}",
            if config.generic { "generic" } else { "native" },
            if config.zero_copy {
                "zero-copy"
            } else {
                "copy"
            },
            plan.queues,
            plan.targets
                .iter()
                .map(|t| SocketAddr::new(t.ip, t.port).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        attached.links.push((name.clone(), link));
        attached._programs.push(program);
        attached._maps.push(map);
    }
    Ok(Some(attached))
}

/// The follower of the routing table could not read it again.
fn route_read_failed(e: &std::io::Error) {
    warn!(
        "udp.xdp: reading the routing table again failed ({e}); AF_XDP answers by the last \
         one read, and tries again in a second"
    );
}

/// What one interface is given.
struct Interface {
    ifindex: u32,
    /// How many queues the interface has: the map's size.
    queue_count: u32,
    /// The queues taken, in the order workers are given them.
    queues: Vec<u32>,
    targets: Vec<Target>,
    /// Its Ethernet address: the program takes frames sent to it only.
    mac: [u8; 6],
    /// Whether it takes sources in 127.0.0.0/8 (`route_localnet`).
    route_localnet: bool,
}

impl Interface {
    fn plan(name: &str, config: &XdpConfig, listen: &[SocketAddr]) -> Result<Interface, String> {
        let ifindex = link::index_of(name).map_err(|e| format!("udp.xdp.interfaces: {e}"))?;
        let queue_count = link::queue_count(name)
            .map_err(|e| format!("udp.xdp.interfaces: cannot count {name}'s queues: {e}"))?;
        let queues: Vec<u32> = if config.queues.is_empty() {
            (0..queue_count).collect()
        } else {
            config.queues.clone()
        };
        if let Some(q) = queues.iter().find(|&&q| q >= queue_count) {
            return Err(format!(
                "udp.xdp.queues: {name} has {queue_count} queues (0 to {}); there is no queue {q}",
                queue_count.saturating_sub(1)
            ));
        }
        let mtu = link::mtu(name).map_err(|e| format!("udp.xdp.interfaces: {name}: {e}"))?;
        if mtu + LINK_HEADER + XDP_PACKET_HEADROOM > config.frame_size {
            return Err(format!(
                "udp.xdp.frame_size: {} bytes cannot hold a frame of {name}'s MTU {mtu} plus \
                 {LINK_HEADER} bytes of header after the kernel's {XDP_PACKET_HEADROOM} bytes of \
                 headroom; use 4096, or lower the MTU",
                config.frame_size
            ));
        }
        let mac = link::mac(name).map_err(|e| format!("udp.xdp.interfaces: {e}"))?;
        let route_localnet =
            link::route_localnet(name).map_err(|e| format!("udp.xdp.interfaces: {e}"))?;
        let addresses = link::addresses(name)
            .map_err(|e| format!("udp.xdp.interfaces: cannot read {name}'s addresses: {e}"))?;
        let targets = targets(listen, &addresses);
        if targets.is_empty() {
            return Err(format!(
                "udp.xdp.interfaces: {name} has no address that udp.listen serves (it has {:?})",
                addresses
            ));
        }
        Ok(Interface {
            ifindex,
            queue_count,
            queues,
            targets,
            mac,
            route_localnet,
        })
    }
}

/// The addresses the program takes: each listener on one of the
/// interface's addresses, and for a listener on the unspecified address,
/// every address of its family that the interface has now (one added
/// later is served by the UDP sockets).
fn targets(listen: &[SocketAddr], interface: &[IpAddr]) -> Vec<Target> {
    let mut targets = Vec::new();
    for addr in listen {
        for &ip in interface {
            let taken = if addr.ip().is_unspecified() {
                addr.is_ipv4() == ip.is_ipv4()
            } else {
                addr.ip() == ip
            };
            let target = Target {
                ip,
                port: addr.port(),
            };
            if taken && !targets.contains(&target) {
                targets.push(target);
            }
        }
    }
    targets
}

/// `open`, tried again while it fails with EBUSY (a predecessor still
/// holds the queue or the interface) until `deadline`.
fn retry_while_busy<T>(
    deadline: Instant,
    mut open: impl FnMut() -> std::io::Result<T>,
) -> std::io::Result<T> {
    loop {
        match open() {
            Err(e) if e.kind() == std::io::ErrorKind::ResourceBusy && Instant::now() < deadline => {
                std::thread::sleep(RETRY)
            }
            result => return result,
        }
    }
}

/// Capabilities by their bit in `CapEff` (linux/capability.h).
const CAPABILITIES: [(&str, u32); 3] =
    [("CAP_NET_ADMIN", 12), ("CAP_NET_RAW", 13), ("CAP_BPF", 39)];
const CAP_SYS_ADMIN: u32 = 21;

/// Refuses a start without what AF_XDP needs, naming what is missing,
/// rather than failing at the first of several steps.
fn check_capabilities() -> Result<(), String> {
    let status = std::fs::read_to_string("/proc/self/status")
        .map_err(|e| format!("udp.xdp: cannot read /proc/self/status: {e}"))?;
    let effective = status
        .lines()
        .find_map(|l| l.strip_prefix("CapEff:"))
        .and_then(|hex| u64::from_str_radix(hex.trim(), 16).ok())
        .ok_or("udp.xdp: /proc/self/status has no CapEff line")?;
    let has = |bit: u32| effective & (1u64 << bit) != 0;
    // CAP_SYS_ADMIN stands in for CAP_BPF, as the kernel lets it.
    let held = |name: &str, bit: u32| has(bit) || (name == "CAP_BPF" && has(CAP_SYS_ADMIN));
    let missing: Vec<&str> = CAPABILITIES
        .iter()
        .filter(|&&(name, bit)| !held(name, bit))
        .map(|&(name, _)| name)
        .collect();
    if missing.is_empty() {
        return Ok(());
    }
    Err(format!(
        "udp.xdp.interfaces: AF_XDP needs root, or CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and \
         CAP_IPC_LOCK (or a locked-memory limit that holds every queue's frames); this process \
         lacks {} (see docs/OPERATIONS.md, \"AF_XDP\")",
        missing.join(", ")
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unspecified_listeners_take_the_interfaces_addresses_of_their_family() {
        let v4: IpAddr = "10.0.0.1".parse().unwrap();
        let v6: IpAddr = "fd00::1".parse().unwrap();
        let other: IpAddr = "10.0.0.2".parse().unwrap();
        let listen: Vec<SocketAddr> = vec![
            "0.0.0.0:6969".parse().unwrap(),
            "[::]:6969".parse().unwrap(),
            "10.0.0.2:7000".parse().unwrap(),
        ];
        let taken = targets(&listen, &[v4, v6]);
        assert_eq!(
            taken,
            vec![Target { ip: v4, port: 6969 }, Target { ip: v6, port: 6969 }]
        );
        // A specific address is taken only where the interface has it.
        let taken = targets(&listen, &[v4, other]);
        assert!(taken.contains(&Target {
            ip: other,
            port: 7000
        }));
        assert!(!taken.contains(&Target { ip: v4, port: 7000 }));
    }
}
