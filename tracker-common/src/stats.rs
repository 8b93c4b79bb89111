//! Per-worker counters: plain cells owned by one executor, never shared, so
//! counting costs an add and nothing else.

use std::cell::Cell;

/// A counter that only its own worker writes.
#[derive(Default, Debug)]
pub struct Counter(Cell<u64>);

impl Counter {
    #[inline]
    pub fn inc(&self) {
        self.add(1);
    }

    #[inline]
    pub fn add(&self, n: u64) {
        self.0.set(self.0.get().wrapping_add(n));
    }

    pub fn get(&self) -> u64 {
        self.0.get()
    }
}

/// What crosses between workers.
#[derive(Default, Debug)]
pub struct MeshStats {
    /// Requests this worker sent to the owner of their torrent.
    pub forwarded: Counter,
    /// Requests from other workers that this worker answered as owner.
    pub served_for_others: Counter,
    /// Sends that found the channel full and had to wait.
    pub backpressure_waits: Counter,
    /// Requests dropped because too many were already awaiting answers.
    pub overloaded: Counter,
}
