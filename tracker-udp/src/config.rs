//! The `[udp]` section of the config.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use documented::{Documented, DocumentedFields};
use serde::{Deserialize, Serialize};
use tracker_runtime::config::{at_most, hex_secret, within, ConfigError};

/// A millisecond: past it, coalescing adds latency a client could notice
/// and saves little more.
const MAX_COALESCE_US: u32 = 1000;

/// 128 MiB of connect-limit table per worker at most.
const MAX_CONNECT_LIMIT_SLOTS: usize = 1 << 24;

/// The UDP tracker (BEP 15).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct UdpConfig {
    /// Addresses to serve the UDP tracker (BEP 15) on; every worker binds each
    /// of them with SO_REUSEPORT. An empty list turns UDP off.
    pub listen: Vec<SocketAddr>,
    /// 32 hex digits keying the connection ids; empty means random at every
    /// start. Instances that share it accept each other's connection ids.
    pub connection_secret: String,
    /// The most info-hashes in one scrape (at most 74 fit one answer
    /// datagram).
    pub max_scrape_hashes: usize,
    /// Receive buffer asked for on each socket, in bytes; the kernel caps it
    /// at net.core.rmem_max (see deploy/sysctl.conf).
    pub recv_buffer_bytes: usize,
    /// Connect requests answered per second from one IP address (an IPv6
    /// client by its /64), by each worker; more are dropped without an answer.
    /// 0 turns the limit off. SO_REUSEPORT may spread one address's sockets
    /// over several workers, each with its own budget. runtime.exempt_networks
    /// are not limited.
    pub max_connects_per_ip_per_sec: u32,
    /// Slots of each worker's connect-limit table (1 to 16777216); addresses
    /// hash into it and colliding ones share a budget. 8 bytes a slot, only
    /// when the limit is on.
    pub connect_limit_slots: usize,
    /// Steer each announce, and each scrape, to the socket of the worker that
    /// owns its torrent (a classic BPF program on each address's SO_REUSEPORT
    /// group), so that it is answered where it lands rather than forwarded
    /// to its owner. false leaves datagrams to the kernel's hash, and the
    /// workers forward what they do not own; so do they where the program
    /// cannot be attached (logged at start).
    pub steering: bool,
    /// Microseconds a worker lets datagrams gather before it reads its
    /// socket again, once they come fast enough that at least two would
    /// (0 to 1000; 0 reads each as soon as it comes). Every wake of a worker
    /// costs about as much as the few datagrams it then reads: at half load,
    /// gathering them halves the CPU spent per answer, for up to this much
    /// latency (plus the timer's lateness); slower traffic, and a flood,
    /// which fills every batch, wait for nothing (docs/PERFORMANCE.md).
    pub coalesce_us: u32,
    /// AF_XDP ([udp.xdp] below).
    pub xdp: XdpConfig,
}

/// The most UMEM frames per AF_XDP socket: 65536 frames of 4096 bytes is
/// 256 MiB of locked memory per queue.
const MAX_XDP_FRAMES: u32 = 1 << 16;
/// The most interfaces and queues: each queue is a socket, a UMEM and four
/// rings, all set up at start.
const MAX_XDP_INTERFACES: usize = 16;
const MAX_XDP_QUEUES: usize = 1024;

/// AF_XDP: UDP tracker traffic taken from the NIC's queues before the
/// kernel's network stack (Linux 5.10+; root, or CAP_NET_ADMIN, CAP_NET_RAW,
/// CAP_BPF and CAP_IPC_LOCK). An XDP program on each interface hands the
/// datagrams addressed to udp.listen's addresses and ports to the workers'
/// AF_XDP sockets; everything else (other traffic, IP options, fragments)
/// passes to the kernel, and the UDP sockets keep serving what reaches
/// them. The host's firewall, conntrack and `ss` no longer see this
/// traffic (docs/OPERATIONS.md, "AF_XDP").
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct XdpConfig {
    /// Network interfaces to take UDP tracker traffic from; empty (the
    /// default) leaves AF_XDP off. A start that cannot attach to one (the
    /// kernel, the driver, or missing capabilities) fails and says why.
    pub interfaces: Vec<String>,
    /// The queues of each interface to serve; empty serves all of them (the
    /// interface's combined or RX channels). The n-th queue listed is
    /// served by worker n mod runtime.workers: one worker per queue, as the
    /// NIC's hash spreads clients over queues. A queue left out is not
    /// taken: its datagrams reach the UDP sockets.
    pub queues: Vec<u32>,
    /// Zero-copy (XDP_ZEROCOPY): the NIC writes frames straight into the
    /// tracker's memory. Needs a driver that has it (veth and generic mode
    /// do not); false copies each frame once, which works everywhere.
    pub zero_copy: bool,
    /// Attach the program in generic (SKB) mode, for drivers without native
    /// XDP: it works on any interface but saves far less, as the kernel has
    /// built its packet before XDP sees it.
    pub generic: bool,
    /// UMEM frames per queue (a power of two, 64 to 65536): half wait for
    /// arriving frames, half carry answers. frames * frame_size bytes of
    /// locked memory per queue.
    pub frames: u32,
    /// Bytes per UMEM frame, 2048 or 4096: a frame must hold the kernel's
    /// 256 bytes of headroom, then the interface's MTU plus 18 bytes of
    /// Ethernet and VLAN header (2048 holds an MTU of 1774, 4096 one of
    /// 3822).
    pub frame_size: u32,
}

impl Default for XdpConfig {
    fn default() -> Self {
        XdpConfig {
            interfaces: Vec::new(),
            queues: Vec::new(),
            zero_copy: false,
            generic: false,
            frames: 4096,
            frame_size: 2048,
        }
    }
}

impl XdpConfig {
    pub fn enabled(&self) -> bool {
        !self.interfaces.is_empty()
    }

    fn validate(&self, listen: &[SocketAddr]) -> Result<(), ConfigError> {
        if !self.enabled() {
            return Ok(());
        }
        if listen.is_empty() {
            return Err(ConfigError::key(
                "udp.xdp.interfaces",
                "AF_XDP serves udp.listen's addresses, and udp.listen is empty",
            ));
        }
        at_most(
            "udp.xdp.interfaces",
            self.interfaces.len(),
            MAX_XDP_INTERFACES,
        )?;
        at_most("udp.xdp.queues", self.queues.len(), MAX_XDP_QUEUES)?;
        for (i, name) in self.interfaces.iter().enumerate() {
            // IFNAMSIZ is 16 with the NUL.
            if name.is_empty() || name.len() > 15 || name.contains(['/', '\0', ' ']) {
                return Err(ConfigError::key(
                    "udp.xdp.interfaces",
                    format!("{name:?} is not an interface name (1 to 15 bytes, no '/' or space)"),
                ));
            }
            if self.interfaces.iter().take(i).any(|n| n == name) {
                return Err(ConfigError::key(
                    "udp.xdp.interfaces",
                    format!("{name} is listed twice"),
                ));
            }
        }
        for (i, queue) in self.queues.iter().enumerate() {
            if self.queues.iter().take(i).any(|q| q == queue) {
                return Err(ConfigError::key(
                    "udp.xdp.queues",
                    format!("queue {queue} is listed twice"),
                ));
            }
        }
        if !self.frames.is_power_of_two() || !(64..=MAX_XDP_FRAMES).contains(&self.frames) {
            return Err(ConfigError::key(
                "udp.xdp.frames",
                format!("must be a power of two from 64 to {MAX_XDP_FRAMES}"),
            ));
        }
        if self.frame_size != 2048 && self.frame_size != 4096 {
            return Err(ConfigError::key(
                "udp.xdp.frame_size",
                "must be 2048 or 4096",
            ));
        }
        if self.zero_copy && self.generic {
            return Err(ConfigError::key(
                "udp.xdp.zero_copy",
                "generic mode (udp.xdp.generic) has no zero-copy",
            ));
        }
        Ok(())
    }
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            listen: vec![
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, 6969)),
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, 6969)),
            ],
            connection_secret: String::new(),
            max_scrape_hashes: 74,
            recv_buffer_bytes: 4 << 20,
            max_connects_per_ip_per_sec: 0,
            connect_limit_slots: 1 << 16,
            steering: true,
            coalesce_us: 200,
            xdp: XdpConfig::default(),
        }
    }
}

impl UdpConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.secret_checked()?;
        if !(1..=74).contains(&self.max_scrape_hashes) {
            return Err(ConfigError::key(
                "udp.max_scrape_hashes",
                "must be 1 to 74 (what fits one datagram)",
            ));
        }
        within(
            "udp.connect_limit_slots",
            self.connect_limit_slots,
            1,
            MAX_CONNECT_LIMIT_SLOTS,
        )?;
        at_most(
            "udp.coalesce_us",
            self.coalesce_us as usize,
            MAX_COALESCE_US as usize,
        )?;
        self.xdp.validate(&self.listen)
    }

    /// The connection secret, if one is set (validated already).
    pub fn secret(&self) -> Option<[u8; 16]> {
        self.secret_checked().ok().flatten()
    }

    fn secret_checked(&self) -> Result<Option<[u8; 16]>, ConfigError> {
        hex_secret("udp.connection_secret", &self.connection_secret)
    }
}
