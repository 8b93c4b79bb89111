//! The `[udp]` section of the config.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use documented::{Documented, DocumentedFields};
use serde::{Deserialize, Serialize};
use tracker_proto::decode_hex;
use tracker_runtime::config::{within, ConfigError};

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
    /// over several workers, each with its own budget.
    pub max_connects_per_ip_per_sec: u32,
    /// Slots of each worker's connect-limit table (1 to 16777216); addresses
    /// hash into it and colliding ones share a budget. 8 bytes a slot, only
    /// when the limit is on.
    pub connect_limit_slots: usize,
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
        }
    }
}

impl UdpConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if !self.connection_secret.is_empty() {
            parse_secret(&self.connection_secret)
                .map_err(|e| ConfigError::key("udp.connection_secret", e))?;
        }
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
        )
    }

    /// The connection secret, if one is set (validated already).
    pub fn secret(&self) -> Option<[u8; 16]> {
        parse_secret(&self.connection_secret).ok()
    }
}

fn parse_secret(hex: &str) -> Result<[u8; 16], String> {
    let hex = hex.as_bytes();
    if hex.len() != 32 {
        return Err(format!("must be 32 hex digits, not {}", hex.len()));
    }
    decode_hex(hex).ok_or_else(|| "must be hex digits".to_string())
}
