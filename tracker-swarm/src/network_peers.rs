//! How many peers each network (an IPv4 /16, an IPv6 /48:
//! `tracker_proto::BlockLevel::Network`) holds in the whole store: what the
//! cap on one network's peers (`StoreLimits::max_peers_per_network`) reads.
//!
//! The caps per client and per torrent left a network free to hold as much
//! of the store as it liked (issue 37): a /48, or a thousand IPv4 addresses
//! of one /16, filled a worker's `max_peers` through a few hundred torrents,
//! and two networks that announced every torrent they created from both
//! held `max_torrents` for good, since eviction spares a torrent that two
//! networks share. With each network's peers capped, `m` networks hold at
//! most `m` caps of peers, and at most `m / 2` caps of torrents that
//! eviction spares (each holds a peer of two networks, or more than
//! `evict::MAX_PEERS` of one).
//!
//! Memory is fixed: a table of `SLOTS` 32-bit counts, 256 KiB, that networks
//! hash into with a key drawn at random at start, so that no client can aim
//! at another's slot. Networks that share a slot share a cap, which errs
//! towards not storing a peer; an attacker's network at its cap shuts out
//! the networks in its slot, one in 65,536 of the others. The counts are
//! exact otherwise: every peer stored adds one to its network's slot, and
//! every peer dropped (stopped, expired, its torrent evicted or refused by
//! an access list) takes one off.

use std::net::IpAddr;

use ahash::RandomState;
use tracker_proto::{block_key, BlockLevel};

/// Slots of the table: far more than the networks that hold many peers, so
/// that few share a cap.
const SLOTS: usize = 1 << 16;

pub(crate) struct NetworkPeers {
    /// Peers per slot; empty when the store keeps no counts (no cap).
    slots: Box<[u32]>,
    keys: RandomState,
}

impl NetworkPeers {
    /// Counts kept (`on`) or not, when no cap reads them.
    pub fn new(on: bool) -> Self {
        NetworkPeers {
            slots: vec![0; if on { SLOTS } else { 0 }].into_boxed_slice(),
            keys: RandomState::new(),
        }
    }

    /// The slot that counts the network of `ip`; None when no counts are
    /// kept.
    pub fn slot_of(&self, ip: IpAddr) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let hash = self.keys.hash_one(block_key(ip, BlockLevel::Network));
        Some((hash >> (64 - SLOTS.trailing_zeros())) as usize)
    }

    /// The peers the network of `ip` holds (with those of any network that
    /// shares its slot); 0 when no counts are kept.
    pub fn held(&self, ip: IpAddr) -> usize {
        self.slot_of(ip)
            .and_then(|slot| self.slots.get(slot))
            .map_or(0, |&count| count as usize)
    }

    /// Whether the network of `ip` holds `max` peers or more (`None`: no cap
    /// for this peer).
    pub fn is_full(&self, ip: IpAddr, max: Option<usize>) -> bool {
        max.is_some_and(|max| self.held(ip) >= max)
    }

    /// Counts a peer stored from `ip`. A count saturates at `u32::MAX`, and
    /// is then no longer exact: only a worker that holds four billion peers
    /// of one network (exempt ones, past the cap) could get there, with 32
    /// GB of them.
    pub fn add(&mut self, ip: IpAddr) {
        if let Some(slot) = self.slot_of(ip) {
            self.slots[slot] = self.slots[slot].saturating_add(1);
        }
    }

    /// Counts a peer from `ip` dropped.
    pub fn sub(&mut self, ip: IpAddr) {
        if let Some(slot) = self.slot_of(ip) {
            self.slots[slot] = self.slots[slot].saturating_sub(1);
        }
    }

    /// Every slot's count, for tests that check them against the peers.
    #[cfg(test)]
    pub fn counts(&self) -> &[u32] {
        &self.slots
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_network_is_an_ipv4_16_or_an_ipv6_48() {
        let mut n = NetworkPeers::new(true);
        for a in ["10.1.0.1", "10.1.255.7", "::ffff:10.1.3.3"] {
            n.add(ip(a));
        }
        for a in ["2001:db8:1::1", "2001:db8:1:ffff::9"] {
            n.add(ip(a));
        }
        assert_eq!(n.held(ip("10.1.9.9")), 3);
        assert_eq!(n.held(ip("2001:db8:1:2::")), 2);
        // Other networks hold none (unless their slot is shared, which
        // the random keys make rare: these are checked to differ).
        for other in ["10.2.0.1", "2001:db8:2::1"] {
            if n.slot_of(ip(other)) != n.slot_of(ip("10.1.0.1"))
                && n.slot_of(ip(other)) != n.slot_of(ip("2001:db8:1::1"))
            {
                assert_eq!(n.held(ip(other)), 0, "{other}");
            }
        }
        assert!(n.is_full(ip("10.1.0.1"), Some(3)));
        assert!(!n.is_full(ip("10.1.0.1"), Some(4)));
        assert!(!n.is_full(ip("10.1.0.1"), None));
        n.sub(ip("10.1.0.1"));
        assert_eq!(n.held(ip("10.1.0.1")), 2);
        for _ in 0..5 {
            n.sub(ip("2001:db8:1::1"));
        }
        assert_eq!(n.held(ip("2001:db8:1::1")), 0, "never below zero");
    }

    #[test]
    fn off_it_keeps_nothing_and_caps_nothing() {
        let mut n = NetworkPeers::new(false);
        n.add(ip("10.0.0.1"));
        assert_eq!(n.held(ip("10.0.0.1")), 0);
        assert_eq!(n.slot_of(ip("10.0.0.1")), None);
        assert!(n.counts().is_empty());
    }
}
