//! Protocol-neutral requests and answers: what the UDP and HTTP front ends turn
//! their wire formats into, what crosses the mesh, and what the swarm store speaks.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

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

/// Bytes shown as lower-case hex, two digits a byte: what `decode_hex`
/// reads back.
pub struct Hex<'a>(pub &'a [u8]);

impl fmt::Display for Hex<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write_hex(f, self.0)
    }
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
    /// Whether the answer keeps the peer ids of its peers (HTTP's non-compact
    /// answer); every other answer sends addresses only.
    pub peer_ids: bool,
}

/// The address family of a peer, and so of its swarm half and of the peers
/// it is answered with.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum IpFamily {
    #[default]
    V4,
    V6,
}

impl IpFamily {
    /// The family of `ip`; an IPv4-mapped IPv6 address (a v4 client on a
    /// dual-stack socket) counts as IPv4.
    pub fn of(ip: IpAddr) -> Self {
        match ip.to_canonical() {
            IpAddr::V4(_) => Self::V4,
            IpAddr::V6(_) => Self::V6,
        }
    }

    /// Bytes of one compact peer (address and port).
    pub const fn peer_len(self) -> usize {
        match self {
            Self::V4 => 6,
            Self::V6 => 18,
        }
    }

    /// The addresses of compact entries of this family (`peer_len` bytes
    /// each: the address, then the port big-endian); a partial entry at the
    /// end is left out.
    pub fn compact_addrs(self, bytes: &[u8]) -> impl Iterator<Item = SocketAddr> + '_ {
        bytes.chunks_exact(self.peer_len()).map(move |entry| {
            let (ip, port) = entry.split_at(entry.len() - 2);
            let ip = match self {
                IpFamily::V4 => IpAddr::from(<[u8; 4]>::try_from(ip).unwrap_or_default()),
                IpFamily::V6 => IpAddr::from(<[u8; 16]>::try_from(ip).unwrap_or_default()),
            };
            SocketAddr::new(ip, u16::from_be_bytes(port.try_into().unwrap_or_default()))
        })
    }
}

/// An address of one family, as a compact peer entry carries it: the
/// address, then the port big-endian (BEP 15, BEP 23, BEP 7).
pub trait CompactIp: Copy {
    const FAMILY: IpFamily;
    /// Bytes of a compact entry.
    const COMPACT_LEN: usize = Self::FAMILY.peer_len();
    /// Writes the compact entry of this address and `port` to `entry`, which
    /// is `COMPACT_LEN` bytes.
    fn write_compact(self, port: u16, entry: &mut [u8]);
}

impl CompactIp for Ipv4Addr {
    const FAMILY: IpFamily = IpFamily::V4;
    fn write_compact(self, port: u16, entry: &mut [u8]) {
        if let Some((ip, rest)) = entry.split_first_chunk_mut() {
            *ip = self.octets();
            if let Some(port_bytes) = rest.first_chunk_mut() {
                *port_bytes = port.to_be_bytes();
            }
        }
    }
}

impl CompactIp for Ipv6Addr {
    const FAMILY: IpFamily = IpFamily::V6;
    fn write_compact(self, port: u16, entry: &mut [u8]) {
        if let Some((ip, rest)) = entry.split_first_chunk_mut() {
            *ip = self.octets();
            if let Some(port_bytes) = rest.first_chunk_mut() {
                *port_bytes = port.to_be_bytes();
            }
        }
    }
}

/// The peers an announce is answered with, all of the requester's family,
/// packed as every compact format sends them (BEP 15, BEP 23, BEP 7): the
/// address then the port, in network order. The store writes them so and an
/// answer copies them whole; their peer ids are kept, beside them, only when
/// the announce asks for them (`Announce::peer_ids`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct AnswerPeers {
    family: IpFamily,
    compact: Vec<u8>,
    peer_ids: Vec<PeerId>,
}

impl AnswerPeers {
    /// Empties it for an answer of `family`'s peers, keeping its memory.
    pub fn reset(&mut self, family: IpFamily) {
        self.family = family;
        self.compact.clear();
        self.peer_ids.clear();
    }

    pub fn family(&self) -> IpFamily {
        self.family
    }

    pub fn len(&self) -> usize {
        self.compact.len() / self.family.peer_len()
    }

    pub fn is_empty(&self) -> bool {
        self.compact.is_empty()
    }

    /// The peers in their compact form, `family().peer_len()` bytes each.
    pub fn compact(&self) -> &[u8] {
        &self.compact
    }

    /// One peer id per peer, in order, when the announce asked for them;
    /// otherwise none.
    pub fn peer_ids(&self) -> &[PeerId] {
        &self.peer_ids
    }

    /// The peers' addresses, in order.
    pub fn addrs(&self) -> impl Iterator<Item = SocketAddr> + '_ {
        self.family.compact_addrs(&self.compact)
    }

    /// Appends up to `max` peers in one step: `fill` writes whole entries
    /// from the start of the room it is handed (`max` entries of
    /// `family().peer_len()` bytes), pushes their ids if it keeps them, and
    /// returns how many it wrote. One bounds check for the run rather than
    /// one a peer: this is the inner loop of every answer.
    pub fn append_with(
        &mut self,
        max: usize,
        fill: impl FnOnce(&mut [u8], &mut Vec<PeerId>) -> usize,
    ) {
        let len = self.family.peer_len();
        let start = self.compact.len();
        self.compact.resize(start + max * len, 0);
        // In bounds: the resize above made the room.
        let room = self.compact.get_mut(start..).unwrap_or_default();
        let written = fill(room, &mut self.peer_ids).min(max);
        self.compact.truncate(start + written * len);
    }

    /// Adds the peer at `addr` if it is of this answer's family (an
    /// IPv4-mapped address counts as IPv4), with `peer_id` if the answer
    /// keeps them; returns whether it did.
    pub fn push_addr(&mut self, addr: SocketAddr, peer_id: Option<&PeerId>) -> bool {
        match (self.family, addr.ip().to_canonical()) {
            (IpFamily::V4, IpAddr::V4(ip)) => self.push_compact(ip, addr.port()),
            (IpFamily::V6, IpAddr::V6(ip)) => self.push_compact(ip, addr.port()),
            _ => return false,
        }
        self.peer_ids.extend(peer_id);
        true
    }

    fn push_compact<I: CompactIp>(&mut self, ip: I, port: u16) {
        let start = self.compact.len();
        self.compact.resize(start + I::COMPACT_LEN, 0);
        ip.write_compact(port, self.compact.get_mut(start..).unwrap_or_default());
    }
}

/// A peer of an announce answer, as a client decodes it.
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
    pub peers: AnswerPeers,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn answer_peers_take_only_their_family() {
        let v4: SocketAddr = "192.0.2.1:1000".parse().unwrap();
        let mapped: SocketAddr = "[::ffff:192.0.2.2]:1001".parse().unwrap();
        let v6: SocketAddr = "[2001:db8::1]:1002".parse().unwrap();
        let id = PeerId([7; 20]);
        let mut peers = AnswerPeers::default();
        peers.reset(IpFamily::V4);
        let taken = [v4, mapped, v6].map(|addr| peers.push_addr(addr, Some(&id)));
        assert_eq!(taken, [true, true, false]);
        assert_eq!(
            peers.addrs().collect::<Vec<_>>(),
            [
                "192.0.2.1:1000".parse::<SocketAddr>().unwrap(),
                "192.0.2.2:1001".parse().unwrap()
            ]
        );
        assert_eq!(
            peers.compact(),
            [192, 0, 2, 1, 3, 232, 192, 0, 2, 2, 3, 233]
        );
        assert_eq!(peers.peer_ids(), [id, id]);
        assert_eq!(peers.len(), 2);

        peers.reset(IpFamily::V6);
        assert!(peers.is_empty() && peers.peer_ids().is_empty());
        let taken = [v4, mapped, v6].map(|addr| peers.push_addr(addr, None));
        assert_eq!(taken, [false, false, true]);
        assert_eq!(peers.addrs().collect::<Vec<_>>(), [v6]);
        assert_eq!(peers.compact().len(), 18);
        assert!(peers.peer_ids().is_empty());
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
