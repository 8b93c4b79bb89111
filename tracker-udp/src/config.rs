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
        )
    }

    /// The connection secret, if one is set (validated already).
    pub fn secret(&self) -> Option<[u8; 16]> {
        self.secret_checked().ok().flatten()
    }

    fn secret_checked(&self) -> Result<Option<[u8; 16]>, ConfigError> {
        hex_secret("udp.connection_secret", &self.connection_secret)
    }
}
