//! How many peers each client has in a large swarm half (an IPv4 address, an
//! IPv6 /64: see `PeerIp::client`): what the cap on peers per address per
//! torrent reads, kept beside the address index (which finds a peer by
//! address and port, and so cannot count a client's ports and addresses).
//!
//! Keyed by 32 bits of the client's hash. Two clients whose 32-bit hashes
//! collide share a count (about one pair in a swarm of 100,000 clients; the
//! hash is keyed per process, so clients cannot aim at it), which errs
//! towards not storing a peer. Kept only while the cap is on, at about 13
//! bytes per client of a large half (the addresses of one /64 share one).

use std::collections::hash_map::{Entry, HashMap};

#[derive(Default)]
pub(super) struct IpCounts(HashMap<u32, u32, ahash::RandomState>);

impl IpCounts {
    pub fn get(&self, hash: u32) -> usize {
        self.0.get(&hash).map_or(0, |&count| count as usize)
    }

    pub fn add(&mut self, hash: u32) {
        *self.0.entry(hash).or_insert(0) += 1;
    }

    pub fn sub(&mut self, hash: u32) {
        if let Entry::Occupied(mut count) = self.0.entry(hash) {
            if *count.get() > 1 {
                *count.get_mut() -= 1;
            } else {
                count.remove();
            }
        }
    }

    /// Gives memory back once at most an eighth of it is used, so that a
    /// half that shrinks and regrows a little does not reallocate each time.
    pub fn shrink(&mut self) {
        if self.0.len() <= self.0.capacity() / 8 {
            self.0.shrink_to_fit();
        }
    }

    /// Bytes held: a key, a count and a control byte per bucket.
    pub fn bytes(&self) -> usize {
        self.0.capacity() * (std::mem::size_of::<(u32, u32)>() + 1)
    }

    #[cfg(test)]
    pub fn addresses(&self) -> usize {
        self.0.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_go_up_and_down_and_vanish_at_zero() {
        let mut counts = IpCounts::default();
        assert_eq!(counts.get(7), 0);
        for _ in 0..3 {
            counts.add(7);
        }
        counts.add(8);
        assert_eq!((counts.get(7), counts.get(8)), (3, 1));
        counts.sub(8);
        assert_eq!((counts.get(8), counts.addresses()), (0, 1));
        counts.sub(8);
        assert_eq!(counts.get(8), 0, "never below zero");
        for _ in 0..3 {
            counts.sub(7);
        }
        assert_eq!(counts.addresses(), 0);
    }

    #[test]
    fn many_addresses_sharing_homes_keep_their_own_counts() {
        let mut counts = IpCounts::default();
        // Hashes that share their low bits, so that they share home slots.
        let hash = |n: u32| n << 20;
        for n in 0..500 {
            for _ in 0..=(n % 5) {
                counts.add(hash(n));
            }
        }
        for n in (0..500).step_by(3) {
            counts.sub(hash(n));
        }
        for n in 0..500 {
            let want = (n % 5 + 1) as usize - usize::from(n % 3 == 0);
            assert_eq!(counts.get(hash(n)), want, "{n}");
        }
    }
}
