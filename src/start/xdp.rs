//! AF_XDP at start (`[udp.xdp]`): for each interface, its XDP program and
//! the map of its AF_XDP sockets, a socket per queue (each handed to a
//! worker), and the BPF link that attaches the program. The link is held
//! until the workers stop; closing it, or the process ending however it
//! ends, detaches the program, and the kernel's sockets take the traffic.
//! First of all, the routing table is read (`route`; followed once the
//! capabilities are given up): the workers answer only clients it sends
//! back out of their interface.
//!
//! Or taken over (`adopt`): the running tracker hands its successor the
//! sockets, their UMEMs' memfds, the maps, the programs and their links
//! (`Taken`), which stay attached throughout; the successor maps the
//! sockets' rings and frames again and needs no capability, as no bpf(2)
//! or socket(AF_XDP) call of its own is made. The kernel allows that since
//! Linux 6.4 (`Attached::handable`); before, the running tracker detaches
//! at the hand-over and its successor attaches again, which needs the
//! capabilities.

use std::io;
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
use crate::start::capabilities;

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

/// What keeps the programs attached: dropping it detaches them, unless a
/// successor holds their links too.
pub struct Attached {
    /// One per interface.
    programs: Vec<Program>,
    /// Whether a successor can take the sockets over (`Xsk::check_remap`:
    /// Linux 6.4+): then a hand-over passes them with the programs, which
    /// stay attached, and no capability is kept for the successor.
    handable: bool,
}

/// One interface's program, attached.
struct Program {
    name: String,
    ifindex: u32,
    generic: bool,
    link: OwnedFd,
    /// The program and its map of sockets, which the kernel holds while
    /// the link does: kept to hand over.
    program: OwnedFd,
    map: OwnedFd,
}

impl Attached {
    /// Detaches every program: the kernel's sockets take the traffic
    /// (unless a successor holds the links too).
    pub fn detach(self) {
        let names: Vec<String> = self.programs.iter().map(|p| p.name.clone()).collect();
        drop(self);
        info!("AF_XDP detached from {}", names.join(", "));
    }

    /// At a hand-over's stop, where the successor holds the links too:
    /// the programs stay attached, and what arrives waits on the sockets'
    /// RX rings for the successor (a ring's worth, `udp.xdp.frames` / 2
    /// per queue; the kernel counts what it drops past that).
    pub fn leave_to_successor(self) {
        let names: Vec<String> = self.programs.iter().map(|p| p.name.clone()).collect();
        drop(self);
        info!(
            "AF_XDP stays attached to {} for the successor",
            names.join(", ")
        );
    }

    /// Whether its sockets can be handed over (see `handable`).
    pub fn handable(&self) -> bool {
        self.handable
    }

    /// The name of the attached interface of index `ifindex`.
    pub fn interface_name(&self, ifindex: u32) -> Option<&str> {
        self.programs
            .iter()
            .find(|p| p.ifindex == ifindex)
            .map(|p| p.name.as_str())
    }

    /// Copies of each interface's link, program and map, to hand over.
    pub fn copies(&self) -> io::Result<Vec<TakenProgram>> {
        self.programs
            .iter()
            .map(|p| {
                Ok(TakenProgram {
                    name: p.name.clone(),
                    ifindex: p.ifindex,
                    generic: p.generic,
                    link: p.link.try_clone()?,
                    program: p.program.try_clone()?,
                    map: p.map.try_clone()?,
                })
            })
            .collect()
    }
}

/// One interface's program as a hand-over passes it.
pub struct TakenProgram {
    pub name: String,
    pub ifindex: u32,
    pub generic: bool,
    pub link: OwnedFd,
    pub program: OwnedFd,
    pub map: OwnedFd,
}

/// One queue's socket as a hand-over passes it: which worker serves it,
/// its interface's name, what it was opened with, and its UMEM's memfd.
pub struct TakenQueue {
    pub worker: usize,
    pub name: String,
    pub config: XskConfig,
    pub socket: OwnedFd,
    pub umem: OwnedFd,
}

/// AF_XDP as a hand-over passes it: empty when the running tracker serves
/// none, or cannot hand its sockets over.
#[derive(Default)]
pub struct Taken {
    pub programs: Vec<TakenProgram>,
    pub queues: Vec<TakenQueue>,
}

impl Taken {
    pub fn is_empty(&self) -> bool {
        self.programs.is_empty() && self.queues.is_empty()
    }

    /// What it serves, for a message: each interface and its queues.
    fn describe(&self) -> String {
        self.served().join(", ")
    }

    /// Each interface with its queues, both sorted: what a config's
    /// `interfaces` and `queues` are compared with.
    fn served(&self) -> Vec<String> {
        let mut served: Vec<String> = self
            .programs
            .iter()
            .map(|p| {
                let mut queues: Vec<u32> = self
                    .queues
                    .iter()
                    .filter(|q| q.name == p.name)
                    .map(|q| q.config.queue)
                    .collect();
                queues.sort_unstable();
                format!("{} queues {queues:?}", p.name)
            })
            .collect();
        served.sort();
        served
    }

    /// Refuses, before the running tracker stops, AF_XDP handed over that
    /// `config` does not ask for: other interfaces or queues, other frames,
    /// another mode; or AF_XDP turned off. A successor keeps what it is
    /// handed (it cannot attach anything of its own without the
    /// capabilities), so a change waits for a restart. Then tries each
    /// socket (`Xsk::probe`: its rings and frames mapped, and unmapped,
    /// nothing written): a kernel or a descriptor that refuses it refuses
    /// the hand-over while the running tracker still serves.
    pub fn check(&self, config: &XdpConfig) -> Result<(), String> {
        if self.is_empty() {
            return Ok(());
        }
        let restart = "a hand-over keeps AF_XDP's interfaces, queues, frames and modes as the \
         running tracker attached them; restart the tracker to change them (it \
         keeps serving)";
        if !config.enabled() {
            return Err(format!(
                "cannot take over: the running tracker serves UDP over AF_XDP on {}, and this \
                 config has udp.xdp.interfaces empty; {restart}",
                self.describe()
            ));
        }
        let mut asked = Vec::new();
        for name in &config.interfaces {
            let queues: Vec<u32> = if config.queues.is_empty() {
                let count = link::queue_count(name).map_err(|e| {
                    format!("udp.xdp.interfaces: cannot count {name}'s queues: {e}")
                })?;
                (0..count).collect()
            } else {
                config.queues.clone()
            };
            let mut sorted = queues;
            sorted.sort_unstable();
            asked.push(format!("{name} queues {sorted:?}"));
        }
        asked.sort();
        if self.served() != asked {
            return Err(format!(
                "cannot take over: the running tracker serves AF_XDP on {}, this config asks for \
                 {}; {restart}",
                self.describe(),
                asked.join(", ")
            ));
        }
        for p in &self.programs {
            let ifindex =
                link::index_of(&p.name).map_err(|e| format!("udp.xdp.interfaces: {e}"))?;
            if ifindex != p.ifindex {
                return Err(format!(
                    "cannot take over: {} has index {ifindex}, not the {} the running tracker \
                     attached to (it was made again since); restart the tracker (it keeps \
                     serving)",
                    p.name, p.ifindex
                ));
            }
            if p.generic != config.generic {
                return Err(format!(
                    "cannot take over: the running tracker attached AF_XDP to {} in {} mode, \
                     this config asks for udp.xdp.generic = {}; {restart}",
                    p.name,
                    mode_name(p.generic),
                    config.generic
                ));
            }
        }
        for q in &self.queues {
            let c = &q.config;
            if (c.frames, c.frame_size) != (config.frames, config.frame_size)
                || c.zero_copy != config.zero_copy
            {
                return Err(format!(
                    "cannot take over: the running tracker's AF_XDP sockets have {} frames of \
                     {} bytes ({}), this config asks for {} of {} ({}); {restart}",
                    c.frames,
                    c.frame_size,
                    copy_name(c.zero_copy),
                    config.frames,
                    config.frame_size,
                    copy_name(config.zero_copy)
                ));
            }
        }
        for q in &self.queues {
            Xsk::probe(q.socket.as_fd(), q.umem.as_fd(), &q.config).map_err(|e| {
                format!(
                    "cannot take over the AF_XDP socket of queue {} of {}: {e} (the running \
                     tracker keeps serving)",
                    q.config.queue, q.name
                )
            })?;
        }
        Ok(())
    }
}

/// Takes over AF_XDP as a hand-over passed it (`taken`, checked): gives
/// each worker its queues' sockets, the programs staying attached. None
/// when nothing was passed. Run once the tracker that passed it has
/// stopped: the frames are then where its table says.
pub fn adopt(taken: Taken, per_worker: &mut [WorkerSockets]) -> Result<Option<Attached>, String> {
    if taken.is_empty() {
        return Ok(None);
    }
    route::shared(route_read_failed).map_err(|e| {
        format!("udp.xdp: cannot read the routing table (netlink, RTM_GETROUTE): {e}")
    })?;
    let described = taken.describe();
    let Taken { programs, queues } = taken;
    let mut zero_copy = false;
    for q in queues {
        let (name, queue) = (q.name, q.config.queue);
        let xsk = Xsk::adopt(q.socket, q.umem, &q.config).map_err(|e| {
            format!("udp.xdp: cannot take over the AF_XDP socket of queue {queue} of {name}: {e}")
        })?;
        let repairs = xsk.counters().table_repairs;
        if repairs > 0 {
            warn!(
                "AF_XDP: queue {queue} of {name}: {repairs} frames the table called free were \
                 on a ring, left with the kernel"
            );
        }
        zero_copy |= xsk.is_zero_copy();
        let workers = per_worker.len().max(1);
        if let Some(worker) = per_worker.get_mut(q.worker % workers) {
            worker.xdp.push(xsk);
        }
    }
    let generic = programs.iter().any(|p| p.generic);
    info!(
        "AF_XDP on {described} taken over ({} mode, {}), attached throughout",
        mode_name(generic),
        copy_name(zero_copy)
    );
    Ok(Some(Attached {
        programs: programs
            .into_iter()
            .map(|p| Program {
                name: p.name,
                ifindex: p.ifindex,
                generic: p.generic,
                link: p.link,
                program: p.program,
                map: p.map,
            })
            .collect(),
        handable: true,
    }))
}

fn mode_name(generic: bool) -> &'static str {
    if generic {
        "generic"
    } else {
        "native"
    }
}

fn copy_name(zero_copy: bool) -> &'static str {
    if zero_copy {
        "zero-copy"
    } else {
        "copy"
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
        programs: Vec::new(),
        handable: true,
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
        let program = bpf::load_xdp(&program, "tracker_udp").map_err(|e| {
            // Linux 5.10's verifier takes packet-bounds comparisons only
            // from a process with CAP_PERFMON (or CAP_SYS_ADMIN).
            let hint = if e.to_string().contains("pointer comparison prohibited") {
                " (this kernel's verifier needs CAP_PERFMON too, which \
                 deploy/tracker.service.d/xdp.conf.example grants)"
            } else {
                ""
            };
            format!("udp.xdp: the kernel refused the XDP program for {name}: {e}{hint}")
        })?;
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
            if attached.handable {
                if let Err(e) = xsk.check_remap() {
                    info!(
                        "AF_XDP: a successor cannot take this kernel's AF_XDP sockets over \
                         ({e}): a hand-over attaches again, and the tracker keeps {} (those it \
                         holds) for it",
                        capabilities::names(capabilities::AF_XDP_AGAIN)
                    );
                    attached.handable = false;
                }
            }
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
            mode_name(config.generic),
            copy_name(config.zero_copy),
            plan.queues,
            plan.targets
                .iter()
                .map(|t| SocketAddr::new(t.ip, t.port).to_string())
                .collect::<Vec<_>>()
                .join(", ")
        );
        attached.programs.push(Program {
            name: name.clone(),
            ifindex: plan.ifindex,
            generic: config.generic,
            link,
            program,
            map,
        });
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

/// Refuses a start without what AF_XDP needs, naming what is missing,
/// rather than failing at the first of several steps.
fn check_capabilities() -> Result<(), String> {
    use capabilities::{CAP_BPF, CAP_NET_ADMIN, CAP_NET_RAW, CAP_SYS_ADMIN};
    let effective = capabilities::Sets::of_this_process()
        .map_err(|e| format!("udp.xdp: cannot read this process's capabilities: {e}"))?
        .effective;
    let mut needed: capabilities::Caps = 1 << CAP_NET_ADMIN | 1 << CAP_NET_RAW | 1 << CAP_BPF;
    // CAP_SYS_ADMIN stands in for CAP_BPF, as the kernel lets it.
    if effective & (1 << CAP_SYS_ADMIN) != 0 {
        needed &= !(1 << CAP_BPF);
    }
    let missing = needed & !effective;
    if missing == 0 {
        return Ok(());
    }
    Err(format!(
        "udp.xdp.interfaces: AF_XDP needs root, or CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF and \
         CAP_IPC_LOCK (or a locked-memory limit that holds every queue's frames); this process \
         lacks {} (see docs/OPERATIONS.md, \"AF_XDP\")",
        capabilities::names(missing)
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
