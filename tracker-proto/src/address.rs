//! Addresses as the tracker judges them: one canonical form for an IPv4
//! client whichever socket it came through, the block of addresses one client
//! is taken to control, what a peer's address must be, and networks of trusted
//! proxies.

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

/// How wide a block of addresses a limit counts by. Every limit per client
/// counts at each level, so that an attacker who controls many addresses
/// of one network (a /48 holds 65,536 /64s) is bounded by the network's
/// budget, not by a budget per /64 times the /64s it holds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum BlockLevel {
    /// One client: an IPv4 address alone, an IPv6 address by its /64, since a
    /// single host is usually given a whole /64 and can choose any address in
    /// it.
    Address,
    /// A site: an IPv4 /24, an IPv6 /56 (what a home or a small office is
    /// usually given).
    Subnet,
    /// A network: an IPv4 /16, an IPv6 /48 (what an organisation or a
    /// hosting customer is usually given).
    Network,
}

impl BlockLevel {
    /// Narrowest first.
    pub const ALL: [BlockLevel; 3] = [BlockLevel::Address, BlockLevel::Subnet, BlockLevel::Network];

    /// The prefix length of this level's block for an address of each family.
    pub fn prefix(self, ipv4: bool) -> u8 {
        match (self, ipv4) {
            (BlockLevel::Address, true) => 32,
            (BlockLevel::Subnet, true) => 24,
            (BlockLevel::Network, true) => 16,
            (BlockLevel::Address, false) => 64,
            (BlockLevel::Subnet, false) => 56,
            (BlockLevel::Network, false) => 48,
        }
    }

    /// What the level is called in config keys and metric labels.
    pub fn as_str(self) -> &'static str {
        match self {
            BlockLevel::Address => "address",
            BlockLevel::Subnet => "subnet",
            BlockLevel::Network => "network",
        }
    }
}

/// The block of `level` that `ip` (taken in its canonical form) falls in, as
/// a key for counting: its family and its address with the bits past the
/// prefix cleared. The families never share a key.
pub fn block_key(ip: IpAddr, level: BlockLevel) -> u128 {
    match canonical_ip(ip) {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4) & (u32::MAX << (32 - u32::from(level.prefix(true))));
            // Every IPv6 key's low 64 bits are zero (no level is narrower
            // than a /64); bit 32 set keeps an IPv4 key's low bits nonzero,
            // even for 0.0.0.0.
            (1u128 << 32) | u128::from(bits)
        }
        IpAddr::V6(v6) => {
            let prefix = u32::from(level.prefix(false));
            u128::from(v6) & (u128::MAX << (128 - prefix))
        }
    }
}

/// The blocks of every level that `ip` falls in, narrowest first (see
/// [`block_key`]).
pub fn block_keys(ip: IpAddr) -> [(BlockLevel, u128); 3] {
    BlockLevel::ALL.map(|level| (level, block_key(ip, level)))
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
    fn blocks_nest_by_level_and_never_mix_families() {
        let ip = |s: &str| s.parse::<IpAddr>().unwrap();
        let key = |s: &str, level| block_key(ip(s), level);
        use BlockLevel::*;
        // One /64: one key at every level.
        assert_eq!(
            key("2001:db8:1:2::1", Address),
            key("2001:db8:1:2:ffff::9", Address)
        );
        // Another /64 of the same /56: apart at the narrowest level only.
        assert_ne!(
            key("2001:db8:1:2::1", Address),
            key("2001:db8:1:3::1", Address)
        );
        assert_eq!(
            key("2001:db8:1:2::1", Subnet),
            key("2001:db8:1:3::1", Subnet)
        );
        // Another /56 of the same /48.
        assert_ne!(
            key("2001:db8:1:200::1", Subnet),
            key("2001:db8:1:100::1", Subnet)
        );
        assert_eq!(
            key("2001:db8:1:200::1", Network),
            key("2001:db8:1:100::1", Network)
        );
        assert_ne!(key("2001:db8:1::1", Network), key("2001:db8:2::1", Network));
        // IPv4: the address, its /24, its /16; mapped or not.
        assert_ne!(key("192.0.2.1", Address), key("192.0.2.2", Address));
        assert_eq!(key("192.0.2.1", Address), key("::ffff:192.0.2.1", Address));
        assert_eq!(key("192.0.2.1", Subnet), key("192.0.2.200", Subnet));
        assert_ne!(key("192.0.2.1", Subnet), key("192.0.3.1", Subnet));
        assert_eq!(key("192.0.2.1", Network), key("192.0.3.1", Network));
        assert_ne!(key("192.0.2.1", Network), key("192.1.2.1", Network));
        // No IPv4 block has an IPv6 block's key, even ::/0-like ones.
        for level in BlockLevel::ALL {
            assert_ne!(key("0.0.0.0", level), key("::", level));
            assert_ne!(key("0.0.0.0", level), key("::1:0:0", level));
            assert_ne!(key("255.255.255.255", level), key("ffff:ffff::", level));
        }
        assert_eq!(
            block_keys(ip("10.1.2.3"))[1],
            (Subnet, key("10.1.2.0", Subnet))
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
