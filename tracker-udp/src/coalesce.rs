//! Coalescing at half load: letting datagrams gather before the worker
//! reads them again, as a NIC coalesces interrupts.
//!
//! Each time a worker runs out of datagrams it parks its executor, and each
//! datagram that wakes it pays for the park and the wake: a few syscalls on
//! glommio's rings, a memory barrier, the batch's own recvmmsg and sendmmsg.
//! Under a flood the batches are full and that cost is shared by 64
//! datagrams; at half load they hold one or two, and the worker spent more
//! CPU per answer than at full load. Waiting a short while after a batch,
//! when datagrams come fast enough to gather, makes the batches larger for
//! that much latency; when they come slower, nothing is waited for.

use std::time::{Duration, Instant};

/// After each batch that emptied the socket's queue: whether to wait
/// `window` before reading again rather than wait for the next datagram.
#[derive(Debug)]
pub struct Coalesce {
    window: Duration,
    /// When the previous such batch was taken.
    last: Option<Instant>,
}

impl Coalesce {
    /// `window` zero never waits.
    pub fn new(window: Duration) -> Coalesce {
        Coalesce { window, last: None }
    }

    pub fn window(&self) -> Duration {
        self.window
    }

    /// Whether datagrams come fast enough that a wait of the window gathers
    /// at least two, judged by the last batch: `n` datagrams, taken at `now`,
    /// since the batch before it.
    pub fn worth_waiting(&mut self, n: usize, now: Instant) -> bool {
        let Some(last) = self.last.replace(now) else {
            return false;
        };
        let gap = now.saturating_duration_since(last);
        !self.window.is_zero() && n as u128 * self.window.as_nanos() >= 2 * gap.as_nanos()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const WINDOW: Duration = Duration::from_micros(100);

    /// Batches of `n` every `gap` µs: whether each after the first waits.
    fn decisions(window: Duration, batches: &[(usize, u64)]) -> Vec<bool> {
        let start = Instant::now();
        let mut coalesce = Coalesce::new(window);
        let mut at = 0;
        batches
            .iter()
            .map(|&(n, gap)| {
                at += gap;
                coalesce.worth_waiting(n, start + Duration::from_micros(at))
            })
            .skip(1)
            .collect()
    }

    #[test]
    fn fast_datagrams_are_gathered() {
        // 100k/s: one every 10 µs, then ten to a batch once gathered.
        assert_eq!(
            decisions(WINDOW, &[(1, 0), (1, 10), (10, 110), (11, 115)]),
            [true, true, true]
        );
    }

    #[test]
    fn slow_datagrams_are_read_as_they_come() {
        // 5k/s: one every 200 µs; a window would gather half of one.
        assert_eq!(
            decisions(WINDOW, &[(1, 0), (1, 200), (1, 200), (1, 5000)]),
            [false, false, false]
        );
    }

    #[test]
    fn the_first_batch_and_a_zero_window_never_wait() {
        let mut coalesce = Coalesce::new(WINDOW);
        assert!(!coalesce.worth_waiting(64, Instant::now()));
        assert_eq!(
            decisions(Duration::ZERO, &[(1, 0), (10, 1), (10, 1)]),
            [false, false]
        );
    }

    #[test]
    fn a_rate_that_falls_stops_the_waiting() {
        assert_eq!(
            decisions(WINDOW, &[(1, 0), (5, 20), (3, 110), (1, 110), (1, 300)]),
            [true, true, false, false]
        );
    }
}
