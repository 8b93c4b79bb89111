//! Protocol-neutral requests and answers: what the UDP and HTTP front ends turn
//! their wire formats into, what crosses the mesh, and what the swarm store speaks.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The IP a peer is known by: IPv4-mapped IPv6 addresses (what a dual-stack
/// socket reports for an IPv4 client) become plain IPv4, so that a peer is the
/// same peer whichever socket it came through.
pub fn canonical_ip(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(ip, IpAddr::V4),
        v4 => v4,
    }
}

/// The block of addresses one client is taken to control, for the limits
/// per client (connections, new torrents, UDP connects): an IPv4 address
/// alone, an IPv6 address by its /64, since a single host is usually given a
/// whole /64 and can choose any address in it.
pub fn address_block(ip: IpAddr) -> IpAddr {
    match canonical_ip(ip) {
        IpAddr::V6(v6) => {
            let prefix = u128::from(v6) & !((1u128 << 64) - 1);
            IpAddr::V6(Ipv6Addr::from(prefix))
        }
        v4 => v4,
    }
}

/// Whether a peer may be stored and handed to others at `addr`: a port, and
/// an address that names one host (not unspecified, broadcast or multicast).
/// What the wire path and the state file's restore both check.
pub fn is_peer_address(addr: SocketAddr) -> bool {
    addr.port() != 0 && is_host_address(addr.ip())
}

/// Whether `ip` names one host: not unspecified, broadcast or multicast.
pub fn is_host_address(ip: IpAddr) -> bool {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => !(v4.is_unspecified() || v4.is_broadcast() || v4.is_multicast()),
        IpAddr::V6(v6) => !(v6.is_unspecified() || v6.is_multicast()),
    }
}

/// A block of IP addresses such as `10.0.0.0/8` or `2001:db8::/32`; a bare
/// address is a block of one. An IPv4-mapped IPv6 address is matched as the
/// IPv4 address it maps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct IpNetwork {
    addr: IpAddr,
    prefix: u8,
}

impl IpNetwork {
    pub fn contains(&self, ip: IpAddr) -> bool {
        match (self.addr, canonical_ip(ip)) {
            (IpAddr::V4(net), IpAddr::V4(ip)) => {
                prefix_matches(u32::from(net).into(), u32::from(ip).into(), 32, self.prefix)
            }
            (IpAddr::V6(net), IpAddr::V6(ip)) => {
                prefix_matches(u128::from(net), u128::from(ip), 128, self.prefix)
            }
            _ => false,
        }
    }
}

/// Whether the top `prefix` of `bits` bits of `a` and `b` are equal.
fn prefix_matches(a: u128, b: u128, bits: u8, prefix: u8) -> bool {
    let shift = bits - prefix.min(bits);
    shift >= 128 || (a >> shift) == (b >> shift)
}

impl std::str::FromStr for IpNetwork {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (addr, prefix) = match text.split_once('/') {
            Some((addr, prefix)) => (addr, Some(prefix)),
            None => (text, None),
        };
        let addr: IpAddr = addr
            .parse()
            .map_err(|_| format!("`{text}` is not an address or a network (such as 10.0.0.0/8)"))?;
        let addr = canonical_ip(addr);
        let bits = if addr.is_ipv4() { 32 } else { 128 };
        let prefix = match prefix {
            None => bits,
            Some(p) => p
                .parse::<u8>()
                .ok()
                .filter(|&p| p <= bits)
                .ok_or_else(|| format!("`{text}`: the prefix length must be 0 to {bits}"))?,
        };
        Ok(IpNetwork { addr, prefix })
    }
}

impl fmt::Display for IpNetwork {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.addr, self.prefix)
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
        entry[..4].copy_from_slice(&self.octets());
        entry[4..].copy_from_slice(&port.to_be_bytes());
    }
}

impl CompactIp for Ipv6Addr {
    const FAMILY: IpFamily = IpFamily::V6;
    fn write_compact(self, port: u16, entry: &mut [u8]) {
        entry[..16].copy_from_slice(&self.octets());
        entry[16..].copy_from_slice(&port.to_be_bytes());
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
        let written = fill(&mut self.compact[start..], &mut self.peer_ids).min(max);
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
        ip.write_compact(port, &mut self.compact[start..]);
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
    fn mapped_addresses_are_canonical() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(canonical_ip(ip("::ffff:1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical_ip(ip("1.2.3.4")), ip("1.2.3.4"));
        assert_eq!(canonical_ip(ip("::1")), ip("::1"));
        assert_eq!(canonical_ip(ip("2001:db8::1")), ip("2001:db8::1"));
    }

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

    #[test]
    fn ipv6_clients_count_by_their_64_and_ipv4_alone() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert_eq!(address_block(ip("192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(address_block(ip("::ffff:192.0.2.7")), ip("192.0.2.7"));
        assert_eq!(
            address_block(ip("2001:db8:a:b:c:d:e:f")),
            ip("2001:db8:a:b::")
        );
    }

    #[test]
    fn peer_addresses_name_one_host_and_a_port() {
        let ok = |s: &str| is_peer_address(s.parse().unwrap());
        assert!(ok("192.0.2.1:6881") && ok("[2001:db8::1]:6881") && ok("127.0.0.1:1"));
        for bad in [
            "192.0.2.1:0",
            "0.0.0.0:6881",
            "255.255.255.255:6881",
            "224.0.0.1:6881",
            "[::]:6881",
            "[ff02::1]:6881",
            "[::ffff:224.0.0.1]:6881",
        ] {
            assert!(!ok(bad), "{bad}");
        }
    }

    #[test]
    fn networks_contain_their_addresses_and_no_others() {
        let net = |s: &str| s.parse::<IpNetwork>().unwrap();
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        assert!(net("10.0.0.0/8").contains(ip("10.255.0.1")));
        assert!(!net("10.0.0.0/8").contains(ip("11.0.0.1")));
        assert!(net("10.0.0.0/8").contains(ip("::ffff:10.1.2.3")));
        assert!(net("127.0.0.2").contains(ip("127.0.0.2")));
        assert!(!net("127.0.0.2").contains(ip("127.0.0.3")));
        assert!(net("0.0.0.0/0").contains(ip("192.0.2.1")));
        assert!(!net("0.0.0.0/0").contains(ip("2001:db8::1")));
        assert!(net("2001:db8::/32").contains(ip("2001:db8:ffff::1")));
        assert!(!net("2001:db8::/32").contains(ip("2001:db9::1")));
        assert!(net("::/0").contains(ip("::1")));
        assert!(net("::1").contains(ip("::1")));
        assert_eq!(net("::ffff:10.0.0.0/8").to_string(), "10.0.0.0/8");
        for bad in [
            "",
            "10.0.0.0/33",
            "::/129",
            "10.0.0/8",
            "x",
            "10.0.0.0/-1",
            "10.0.0.0/",
        ] {
            assert!(bad.parse::<IpNetwork>().is_err(), "{bad}");
        }
    }
}
