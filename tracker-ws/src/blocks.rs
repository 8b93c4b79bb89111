//! What the connections of one client address, subnet and network hold on
//! this worker, each under a cap: the bytes of their unfinished messages,
//! the WebRTC peers they hold in torrents. A limit per connection alone
//! would let one client multiply it by its connections (the HTTP caps let
//! an address hold 128 of them, a network 1024).

use std::cell::{Cell, RefCell};
use std::net::IpAddr;

use tracker_proto::{block_keys, BlockLevel};
use tracker_swarm::Quota;

/// Counts per block at each level (`BlockLevel::ALL`'s order), each under
/// its level's cap. Blocks that hold nothing have no entry.
pub(crate) struct BlockCounts {
    caps: [usize; 3],
    counts: RefCell<[ahash::HashMap<u128, usize>; 3]>,
}

impl BlockCounts {
    pub(crate) fn new(caps: [usize; 3]) -> Self {
        BlockCounts {
            caps,
            counts: RefCell::default(),
        }
    }

    /// Adds `n` to every block of `ip`, unless that would take one past its
    /// cap: then adds nothing, and says the narrowest such level.
    fn try_add(&self, ip: IpAddr, n: usize) -> Result<(), BlockLevel> {
        let keys = block_keys(ip);
        let mut counts = self.counts.borrow_mut();
        for ((level, key), (counts, cap)) in keys.iter().zip(counts.iter().zip(self.caps)) {
            let held = counts.get(key).copied().unwrap_or(0);
            if held.saturating_add(n) > cap {
                return Err(*level);
            }
        }
        for ((_, key), counts) in keys.iter().zip(counts.iter_mut()) {
            let held = counts.entry(*key).or_insert(0);
            *held = held.saturating_add(n);
        }
        Ok(())
    }

    fn sub(&self, ip: IpAddr, n: usize) {
        let mut counts = self.counts.borrow_mut();
        for ((_, key), counts) in block_keys(ip).iter().zip(counts.iter_mut()) {
            if let Some(held) = counts.get_mut(key) {
                *held = held.saturating_sub(n);
                if *held == 0 {
                    counts.remove(key);
                }
            }
        }
    }

    /// Blocks counted at all levels together (for tests).
    #[cfg(test)]
    fn entries(&self) -> usize {
        self.counts.borrow().iter().map(|counts| counts.len()).sum()
    }
}

/// What one connection holds of a `BlockCounts`, given back when dropped.
pub(crate) struct Held<'a> {
    counts: &'a BlockCounts,
    ip: IpAddr,
    /// False for an exempt client (`runtime.exempt_networks`), which no
    /// limit per client counts.
    counted: bool,
    held: Cell<usize>,
}

impl<'a> Held<'a> {
    pub(crate) fn new(counts: &'a BlockCounts, ip: IpAddr, quota: Quota) -> Self {
        Held {
            counts,
            ip,
            counted: quota == Quota::Counted,
            held: Cell::new(0),
        }
    }

    /// Makes what the connection holds `n`; when that would take a block
    /// past its cap, it holds what it held, and the level is returned.
    pub(crate) fn set(&self, n: usize) -> Result<(), BlockLevel> {
        let held = self.held.get();
        if !self.counted || n == held {
            return Ok(());
        }
        if n > held {
            self.counts.try_add(self.ip, n - held)?;
        } else {
            self.counts.sub(self.ip, held - n);
        }
        self.held.set(n);
        Ok(())
    }
}

impl Drop for Held<'_> {
    fn drop(&mut self) {
        if self.counted {
            self.counts.sub(self.ip, self.held.get());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn each_level_is_capped_and_given_back() {
        let counts = BlockCounts::new([10, 15, 20]);
        let a = Held::new(&counts, ip("10.0.0.1"), Quota::Counted);
        let b = Held::new(&counts, ip("10.0.0.2"), Quota::Counted);
        let c = Held::new(&counts, ip("10.0.1.1"), Quota::Counted);
        assert_eq!(a.set(10), Ok(()));
        assert_eq!(a.set(11), Err(BlockLevel::Address));
        assert_eq!(b.set(6), Err(BlockLevel::Subnet), "10 + 6 in the /24");
        assert_eq!(b.set(5), Ok(()));
        assert_eq!(c.set(6), Err(BlockLevel::Network), "15 + 6 in the /16");
        assert_eq!(c.set(5), Ok(()));
        assert_eq!(a.set(4), Ok(()), "given back");
        assert_eq!(c.set(10), Ok(()));
        drop((a, b));
        let d = Held::new(&counts, ip("10.0.2.1"), Quota::Counted);
        assert_eq!(d.set(10), Ok(()), "the network's 20, with c's 10");
        drop((c, d));
        assert_eq!(counts.entries(), 0, "nothing left behind");
    }

    #[test]
    fn an_ipv6_client_counts_by_its_64_and_exempt_ones_not_at_all() {
        let counts = BlockCounts::new([10, 100, 100]);
        let a = Held::new(&counts, ip("2001:db8::1"), Quota::Counted);
        let b = Held::new(&counts, ip("2001:db8::ffff:2"), Quota::Counted);
        assert_eq!(a.set(8), Ok(()));
        assert_eq!(b.set(3), Err(BlockLevel::Address));
        let exempt = Held::new(&counts, ip("2001:db8::3"), Quota::Exempt);
        assert_eq!(exempt.set(1000), Ok(()));
        drop(exempt);
        assert_eq!(b.set(2), Ok(()));
    }
}
