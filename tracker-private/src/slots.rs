//! Each user's leeching peers across every worker's ledger, for the
//! groups' download slots: a table of atomic counters shared by the
//! workers, indexed by user id in chunks allocated on first use, so a
//! lookup takes no lock and a count moves only when a peer starts or stops
//! leeching, never on every announce.

use crate::site::UserId;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::OnceLock;

/// Users per chunk.
const CHUNK: usize = 1 << 16;
/// Chunks: enough for every u32 user id.
const CHUNKS: usize = (u32::MAX as usize >> 16) + 1;

pub struct LeechingCounts {
    chunks: Box<[OnceLock<Box<[AtomicU32]>>]>,
}

impl Default for LeechingCounts {
    fn default() -> LeechingCounts {
        LeechingCounts {
            chunks: (0..CHUNKS).map(|_| OnceLock::new()).collect(),
        }
    }
}

impl std::fmt::Debug for LeechingCounts {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let used = self.chunks.iter().filter(|c| c.get().is_some()).count();
        write!(f, "LeechingCounts({used} chunks)")
    }
}

impl LeechingCounts {
    fn counter(&self, user: UserId) -> Option<&AtomicU32> {
        let user = user as usize;
        let chunk = self.chunks.get(user / CHUNK)?;
        let chunk = chunk.get_or_init(|| (0..CHUNK).map(|_| AtomicU32::new(0)).collect());
        chunk.get(user % CHUNK)
    }

    /// The user's leeching peers now (a read allocates no chunk).
    pub fn get(&self, user: UserId) -> u32 {
        let user = user as usize;
        let counter = self.chunks.get(user / CHUNK).and_then(OnceLock::get);
        counter
            .and_then(|chunk| chunk.get(user % CHUNK))
            .map_or(0, |c| c.load(Ordering::Relaxed))
    }

    /// One more leeching peer (`up`), or one fewer.
    pub fn change(&self, user: UserId, up: bool) {
        if let Some(counter) = self.counter(user) {
            if up {
                counter.fetch_add(1, Ordering::Relaxed);
            } else {
                // Never below zero, whatever the order of the workers.
                let _ = counter
                    .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |n| n.checked_sub(1));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
}
