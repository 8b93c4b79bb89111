//! What a store counts: a swarm's seeders and leechers, a store's totals,
//! what a clean step removed, and the bytes its structures hold. Below the
//! store, the torrents and the peers alike, so each adds its own part.

/// The counts of one swarm, of both families together.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct SwarmCounts {
    pub seeders: u32,
    pub leechers: u32,
}

/// Peer counts of a whole store, or of what one clean step removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PeerTotals {
    pub seeders: usize,
    pub leechers: usize,
}

impl PeerTotals {
    /// Replaces one swarm's `before` counts with its `after` counts.
    pub(crate) fn replace(&mut self, before: SwarmCounts, after: SwarmCounts) {
        self.seeders = self.seeders - before.seeders as usize + after.seeders as usize;
        self.leechers = self.leechers - before.leechers as usize + after.leechers as usize;
    }
}

/// Bytes a store's structures hold, used or not: capacity, without malloc's
/// own overhead, and counted whether or not the kernel has backed the pages
/// yet (compare the process's resident size).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MemoryUse {
    /// Torrent entries (one cache line each) and the slots that find them.
    pub torrents: usize,
    /// The swarms' peer vectors (and boxed IPv6 halves).
    pub peers: usize,
    /// Large swarms' address indexes, with their boxed headers.
    pub indexes: usize,
    /// The WebRTC side, all of it: its torrents' entries and slots, their
    /// peers and the indexes of large swarms.
    pub rtc: usize,
}

/// What `SwarmStore::clean_segment` or `clean_more` removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CleanReport {
    pub torrents: usize,
    pub peers: PeerTotals,
}

impl CleanReport {
    pub fn add(&mut self, other: CleanReport) {
        self.torrents += other.torrents;
        self.peers.seeders += other.peers.seeders;
        self.peers.leechers += other.peers.leechers;
    }

    /// Adds what a torrent lost between `before` and `after`.
    pub(crate) fn count(&mut self, before: SwarmCounts, after: SwarmCounts) {
        self.peers.seeders += (before.seeders - after.seeders) as usize;
        self.peers.leechers += (before.leechers - after.leechers) as usize;
    }
}
