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

/// The value of one hex digit, either case.
pub fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// Exactly `N` bytes from exactly `2 * N` hex digits, either case; nothing
/// else (no sign, no spaces) is accepted.
pub fn decode_hex<const N: usize>(text: &[u8]) -> Option<[u8; N]> {
    if text.len() != 2 * N {
        return None;
    }
    let mut out = [0u8; N];
    for (byte, pair) in out.iter_mut().zip(text.chunks_exact(2)) {
        let (high, low) = (*pair.first()?, *pair.get(1)?);
        *byte = (hex_digit(high)? << 4) | hex_digit(low)?;
    }
    Some(out)
}

/// A torrent's 20-byte SHA-1 info-hash.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct InfoHash(pub [u8; 20]);

impl InfoHash {
    /// An info-hash written as 40 hex digits.
    pub fn from_hex(text: &[u8]) -> Option<InfoHash> {
        decode_hex(text).map(InfoHash)
    }
}

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

    #[test]
    fn hex_decodes_exactly_and_strictly() {
        assert_eq!(decode_hex::<2>(b"0aFf"), Some([0x0a, 0xff]));
        assert_eq!(decode_hex::<2>(b"0aF"), None);
        assert_eq!(decode_hex::<2>(b"0aFf0"), None);
        // What `u8::from_str_radix` would let through.
        assert_eq!(decode_hex::<2>(b"+a0f"), None);
        assert_eq!(decode_hex::<1>(b" f"), None);
        let hash = InfoHash::from_hex(b"0123456789abcdefABCDEF0123456789abcdef01").unwrap();
        assert_eq!(hash.0[..3], [0x01, 0x23, 0x45]);
        assert_eq!(
            format!("{hash:?}"),
            "0123456789abcdefabcdef0123456789abcdef01"
        );
    }
}
