//! Log lines that clients can cause, written at most once a minute each.
//!
//! A failure that a client can provoke (accepts failing while connections
//! flood in, a receive error per bad datagram) must not let it write the
//! log at line rate. Each such place keeps a [`LogThrottle`] of its own, in a
//! static shared by every worker: the first occurrence is logged at once,
//! later ones at most once a minute, each line saying how many were left
//! out since the last.

use std::sync::atomic::{AtomicU64, Ordering};

use crate::clock;

/// Seconds between two lines of one throttle.
const INTERVAL_SECS: u64 = 60;

pub struct LogThrottle {
    /// 1 + the second (on `clock::now_secs`) of the last line; 0: none yet.
    last: AtomicU64,
    /// Occurrences left out since the last line.
    left_out: AtomicU64,
}

impl LogThrottle {
    pub const fn new() -> Self {
        LogThrottle {
            last: AtomicU64::new(0),
            left_out: AtomicU64::new(0),
        }
    }

    /// Counts an occurrence: `Some(n)` when it is to be logged, `n` being
    /// the occurrences left out since the last line; `None` when not.
    pub fn allow(&self) -> Option<u64> {
        self.allow_at(u64::from(clock::now_secs()))
    }

    fn allow_at(&self, now: u64) -> Option<u64> {
        let last = self.last.load(Ordering::Relaxed);
        let due = last == 0 || now + 1 >= last + INTERVAL_SECS;
        // One thread wins the minute; the others count as left out.
        if due
            && self
                .last
                .compare_exchange(last, now + 1, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.left_out.swap(0, Ordering::Relaxed));
        }
        self.left_out.fetch_add(1, Ordering::Relaxed);
        None
    }
}

impl Default for LogThrottle {
    fn default() -> Self {
        Self::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_logged_then_one_a_minute_with_the_count_left_out() {
        let t = LogThrottle::new();
        assert_eq!(t.allow_at(100), Some(0));
        for now in 100..159 {
            assert_eq!(t.allow_at(now), None, "{now}");
        }
        assert_eq!(t.allow_at(160), Some(59));
        assert_eq!(t.allow_at(161), None);
        assert_eq!(t.allow_at(1000), Some(1));
        // From the clock's first second on.
        assert_eq!(LogThrottle::new().allow_at(0), Some(0));
    }
}
