//! Protocol-neutral requests and answers: what the UDP and HTTP front ends turn
//! their wire formats into, what crosses the mesh, and what the swarm store speaks.

use std::fmt;
use std::net::{IpAddr, SocketAddr};

/// The IP a peer is known by: IPv4-mapped IPv6 addresses (what a dual-stack
/// socket reports for an IPv4 client) become plain IPv4, so that a peer is the
/// same peer whichever socket it came through.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// A torrent's 20-byte SHA-1 info-hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct InfoHash(pub [u8; 20]);

/// A client's self-chosen 20-byte peer id.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct PeerId(pub [u8; 20]);

fn write_hex(f: &mut fmt::Formatter<'_>, bytes: &[u8]) -> fmt::Result {
    bytes.iter().try_for_each(|b| write!(f, "{b:02x}"))
}

impl fmt::Debug for InfoHash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

impl fmt::Debug for PeerId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, &self.0)
    }
}

/// The `event` of an announce. The numeric values are BEP 15's.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum AnnounceEvent {
    #[default]
    None = 0,
    Completed = 1,
    Started = 2,
    Stopped = 3,
}

/// One announce, after the front end has decided the peer's address (the packet's
/// source IP, or a trusted proxy header, with the announced port).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Announce {
    pub info_hash: InfoHash,
    pub peer_id: PeerId,
    /// Where other peers reach this one. Its family picks the swarm half.
    pub peer_addr: SocketAddr,
    pub event: AnnounceEvent,
    /// Bytes left to download: 0 makes the peer a seeder.
    pub left: u64,
    /// Peers wanted, already clamped by the front end to the configured maximum.
    pub numwant: u32,
}

/// A peer handed back in an announce answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerEntry {
    pub ip: IpAddr,
    pub port: u16,
    pub peer_id: PeerId,
}

/// The counts of a swarm, of both families together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ScrapeStats {
    pub seeders: u32,
    /// Number of `completed` events seen (BEP 48 `downloaded`).
    pub completed: u32,
    pub leechers: u32,
}

/// The answer to an announce: counts of the whole swarm and peers of the
/// requester's address family, never the requester itself.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnnounceAnswer {
    pub seeders: u32,
    pub leechers: u32,
    pub peers: Vec<PeerEntry>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mapped_addresses_are_canonical() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(canonical_ip(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical_ip(ip("1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical_ip(ip("::1")), ip("::1"));
        assert_eq!(canonical_ip(ip("2001:db8::1")), ip("2001:db8::1"));
    }
}
