//! Each user's leeching peers across every worker's ledger, for the
//! groups' download slots: atomic counters shared by the workers (a
//! [`UserTable`]), so a lookup takes no lock and a count moves only when a
//! peer starts or stops leeching, never on every announce. A slot is taken
//! with one compare-and-swap, so no number of workers admitting one user's
//! leechers at the same instant passes the limit.

use crate::site::UserId;
use crate::user_table::UserTable;
use std::sync::atomic::{AtomicU32, Ordering};

#[derive(Default)]
pub struct LeechingCounts {
    counts: UserTable<AtomicU32>,
}

impl std::fmt::Debug for LeechingCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "LeechingCounts({} chunks)", self.counts.chunks_used())
    }
}

impl LeechingCounts {
    /// The user's leeching peers now (a read allocates no chunk).
    pub fn get(&self, user: UserId) -> u32 {
        self.counts
            .peek(user)
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// One more leeching peer (`up`), or one fewer.
    pub fn change(&self, user: UserId, up: bool) {
        if let Some(counter) = self.counts.slot(user) {
            if up {
                counter.fetch_add(1, Ordering::Relaxed);
            } else {
                // Never below zero, whatever the order of the workers.
                let _ = counter
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
        }
    }

    /// One more leeching peer if the user has fewer than `limit`: whether
    /// it was taken.
    pub fn try_take(&self, user: UserId, limit: u32) -> bool {
        self.counts.slot(user).is_some_and(|counter| {
            counter
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| {
                    (n < limit).then_some(n + 1)
                })
                .is_ok()
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[test]
    fn counts_per_user_never_below_zero() {
        let counts = LeechingCounts::default();
        counts.change(7, true);
        counts.change(7, true);
        counts.change(u32::MAX, true);
        assert_eq!(
            (counts.get(7), counts.get(8), counts.get(u32::MAX)),
            (2, 0, 1)
        );
        counts.change(7, false);
        counts.change(7, false);
        counts.change(7, false);
        assert_eq!(counts.get(7), 0);
    }

    /// Eight threads racing for three slots, many times over: exactly three
    /// are taken each round (a check then a take let one per thread pass).
    #[test]
    fn slots_taken_at_once_never_pass_the_limit() {
        for round in 0..200u32 {
            let counts = Arc::new(LeechingCounts::default());
            let barrier = Arc::new(std::sync::Barrier::new(8));
            let taken: u32 = (0..8)
                .map(|_| {
                    let (counts, barrier) = (counts.clone(), barrier.clone());
                    std::thread::spawn(move || {
                        barrier.wait();
                        u32::from(counts.try_take(round, 3))
                    })
                })
                .collect::<Vec<_>>()
                .into_iter()
                .map(|t| t.join().unwrap())
                .sum();
            assert_eq!((taken, counts.get(round)), (3, 3));
        }
    }
}
