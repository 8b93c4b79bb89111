//! A per-address rate limit for one worker: at most so many events (UDP
//! connects, new torrents) per window of time from one client (an IPv6
//! client by its /64: `tracker_proto::BlockLevel::Address`).
//!
//! Memory is fixed: a table of `slots` counters, each 8 bytes, that addresses
//! hash into with a key chosen at random at start (so clients cannot aim at
//! one slot). Addresses that collide share a budget, which errs towards
//! refusing; with a table much larger than the addresses active in one
//! window that is rare. Each slot counts the events of the current window (a
//! fixed window: a burst across a window boundary may get up to twice the
//! rate).

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;

use tracker_proto::{block_key, BlockLevel};

#[derive(Clone, Copy, Default)]
struct Slot {
    window: u32,
    used: u32,
}

pub struct RateLimit {
    slots: Box<[Slot]>,
    per_window: u32,
    window_secs: u32,
    keys: RandomState,
}

impl RateLimit {
    /// At most `per_window` events per `window_secs` seconds from one
    /// address; `None` when `per_window` is 0 (no limit).
    pub fn new(per_window: u32, window_secs: u32, slots: usize) -> Option<RateLimit> {
        if per_window == 0 {
            return None;
        }
        Some(RateLimit {
            slots: vec![Slot::default(); slots.max(1)].into_boxed_slice(),
            per_window,
            window_secs: window_secs.max(1),
            keys: RandomState::new(),
        })
    }

    /// Counts an event from `ip` at second `now`; false when it is over the
    /// limit (and should be refused).
    pub fn allow(&mut self, ip: IpAddr, now: u32) -> bool {
        let slot = self.slot_of(ip);
        if !self.room_at(slot, now) {
            return false;
        }
        self.count_at(slot, now);
        true
    }

    fn slot_of(&self, ip: IpAddr) -> usize {
        self.slot_of_block(block_key(ip, BlockLevel::Address))
    }

    /// The slot that counts the block `key` (a `tracker_proto::block_key`),
    /// for the limits that count blocks of several widths, each in a table of
    /// its own: look first (`room_at`), count after (`count_at`), so that an
    /// event refused at one width costs nothing at the others.
    pub(crate) fn slot_of_block(&self, key: u128) -> usize {
        (self.keys.hash_one(key) % self.slots.len() as u64) as usize
    }

    /// Events counted at `slot` in the window of `now`.
    pub(crate) fn used_at(&self, slot: usize, now: u32) -> u32 {
        let window = now / self.window_secs;
        self.slots
            .get(slot)
            .filter(|s| s.window == window)
            .map_or(0, |s| s.used)
    }

    /// Whether `slot` may count another event in the window of `now`.
    pub(crate) fn room_at(&self, slot: usize, now: u32) -> bool {
        self.used_at(slot, now) < self.per_window
    }

    /// Events each slot may count per window.
    pub(crate) fn per_window(&self) -> u32 {
        self.per_window
    }

    /// Counts an event at `slot` (which `room_at` allowed).
    pub(crate) fn count_at(&mut self, slot: usize, now: u32) {
        let window = now / self.window_secs;
        if let Some(slot) = self.slots.get_mut(slot) {
            if slot.window != window {
                *slot = Slot { window, used: 0 };
            }
            slot.used = slot.used.saturating_add(1);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_at_zero() {
        assert!(RateLimit::new(0, 1, 16).is_none());
    }

    #[test]
    fn each_address_gets_its_budget_per_window() {
        let mut l = RateLimit::new(3, 1, 1 << 12).unwrap();
        let a: IpAddr = [10, 0, 0, 1].into();
        // An address in another slot (the keys are random).
        let b = (1..=u16::MAX)
            .map(|n| IpAddr::from([0x2001, 0xdb8, 0, n, 0, 0, 0, 1]))
            .find(|b| l.slot_of(*b) != l.slot_of(a))
            .unwrap();
        let allowed = |l: &mut RateLimit, ip, now| (0..10).filter(|_| l.allow(ip, now)).count();
        assert_eq!(allowed(&mut l, a, 5), 3);
        // Another address has its own budget.
        assert_eq!(allowed(&mut l, b, 5), 3);
        assert!(!l.allow(a, 5));
        // The next window starts afresh.
        assert_eq!(allowed(&mut l, a, 6), 3);
    }

    #[test]
    fn windows_span_their_seconds_and_an_ipv6_client_counts_by_its_64() {
        let mut l = RateLimit::new(2, 60, 1 << 12).unwrap();
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2::ffff".parse().unwrap();
        assert!(l.allow(a, 120));
        assert!(l.allow(same_64, 150));
        assert!(
            !l.allow(a, 179),
            "the window of seconds 120 to 179 is spent"
        );
        assert!(l.allow(same_64, 180));
    }

    #[test]
    fn one_slot_is_shared_by_everyone() {
        let mut l = RateLimit::new(2, 1, 1).unwrap();
        assert!(l.allow([10, 0, 0, 1].into(), 1));
        assert!(l.allow([10, 0, 0, 2].into(), 1));
        assert!(!l.allow([10, 0, 0, 3].into(), 1));
    }
}
