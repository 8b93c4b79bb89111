//! A per-IP limit on connect requests, for one worker.
//!
//! Memory is fixed: a table of `slots` counters, each 8 bytes, that addresses
//! hash into with a key chosen at random at start (so clients cannot aim at
//! one slot). Addresses that collide share a budget, which errs towards
//! dropping; with a table much larger than the addresses active in one second
//! that is rare. Each slot counts the connects of the current second (a fixed
//! window: a burst over a second boundary may get up to twice the rate).
//!
//! Forged sources are not what this stops (they cost an attacker nothing to
//! vary, and get only 16-byte answers to 16-byte requests); it stops one real
//! address from taking a worker's connect answers for itself.

use std::collections::hash_map::RandomState;
use std::hash::BuildHasher;
use std::net::IpAddr;

#[derive(Clone, Copy, Default)]
struct Slot {
    second: u32,
    used: u32,
}

pub struct ConnectLimiter {
    slots: Box<[Slot]>,
    per_second: u32,
    keys: RandomState,
}

impl ConnectLimiter {
    /// `None` when `per_second` is 0 (no limit).
    pub fn new(per_second: u32, slots: usize) -> Option<ConnectLimiter> {
        if per_second == 0 {
            return None;
        }
        Some(ConnectLimiter {
            slots: vec![Slot::default(); slots.max(1)].into_boxed_slice(),
            per_second,
            keys: RandomState::new(),
        })
    }

    /// Counts a connect from `ip` at second `now`; false when it is over the
    /// limit (and should be dropped).
    pub fn allow(&mut self, ip: IpAddr, now: u32) -> bool {
        let index = self.slot_of(ip);
        let Some(slot) = self.slots.get_mut(index) else {
            return true;
        };
        if slot.second != now {
            *slot = Slot {
                second: now,
                used: 0,
            };
        }
        if slot.used >= self.per_second {
            return false;
        }
        slot.used += 1;
        true
    }

    fn slot_of(&self, ip: IpAddr) -> usize {
        (self.keys.hash_one(ip) % self.slots.len() as u64) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn off_at_zero() {
        assert!(ConnectLimiter::new(0, 16).is_none());
    }

    #[test]
    fn each_address_gets_its_budget_per_second() {
        let mut l = ConnectLimiter::new(3, 1 << 12).unwrap();
        let a: IpAddr = [10, 0, 0, 1].into();
        // An address in another slot (the keys are random).
        let b = (1..=u16::MAX)
            .map(|n| IpAddr::from([0x2001, 0xdb8, 0, 0, 0, 0, 0, n]))
            .find(|b| l.slot_of(*b) != l.slot_of(a))
            .unwrap();
        let allowed =
            |l: &mut ConnectLimiter, ip, now| (0..10).filter(|_| l.allow(ip, now)).count();
        assert_eq!(allowed(&mut l, a, 5), 3);
        // Another address has its own budget.
        assert_eq!(allowed(&mut l, b, 5), 3);
        assert!(!l.allow(a, 5));
        // The next second starts afresh.
        assert_eq!(allowed(&mut l, a, 6), 3);
    }

    #[test]
    fn one_slot_is_shared_by_everyone() {
        let mut l = ConnectLimiter::new(2, 1).unwrap();
        assert!(l.allow([10, 0, 0, 1].into(), 1));
        assert!(l.allow([10, 0, 0, 2].into(), 1));
        assert!(!l.allow([10, 0, 0, 3].into(), 1));
    }
}
