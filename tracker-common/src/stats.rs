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
    /// Requests from other workers whose serving panicked (contained: the
    /// asker got a failure answer).
    pub panics: Counter,
}

/// What the swarm store of one worker turned away because it was full.
#[derive(Default, Debug)]
pub struct StoreStats {
    /// Announces refused because they would create a torrent past
    /// `swarm.max_torrents_per_worker`.
    pub refused_torrents: Counter,
    /// New peers answered but not stored: their torrent held
    /// `swarm.max_peers_per_torrent`, or the worker `swarm.max_peers_per_worker`.
    pub unstored_peers: Counter,
}
