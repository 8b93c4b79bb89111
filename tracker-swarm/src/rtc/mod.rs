//! WebRTC peers (WebTorrent): browsers that announce over a WebSocket, and
//! that the tracker introduces to each other by relaying their WebRTC offers
//! and answers over their connections.
//!
//! They live in the same store as the BitTorrent peers (one memory budget,
//! one set of limits, one access list, one state file) but in tables of their
//! own, not in the torrent's 64-byte entry, which the UDP path reads on every
//! announce. The two kinds are never handed to each other (a browser cannot
//! reach a TCP or uTP peer, nor one of those a browser), and each kind's
//! counts count only its own peers. The tables are split by the store's
//! segments, so that each clean step, snapshot step and access-list step of
//! a segment covers the WebRTC torrents of that segment too.

pub(crate) mod swarm;
#[cfg(test)]
mod tests;

use std::net::IpAddr;

use tracker_proto::{AnnounceEvent, InfoHash, PeerId};

use crate::counts::{CleanReport, PeerTotals};
use crate::table::Table;
use swarm::RtcTorrent;

/// Where a WebRTC peer's connection is: the worker that holds it and the
/// connection's id there (never reused while the tracker runs).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnectionRef {
    pub worker: u16,
    pub id: u64,
}

/// One WebSocket announce, after the front end parsed it.
#[derive(Clone, Copy, Debug)]
pub struct RtcAnnounce {
    pub info_hash: InfoHash,
    pub peer_id: PeerId,
    pub connection: ConnectionRef,
    /// The client's address (already canonical): for the budgets of new
    /// torrents and the cap on one client's peers in a torrent.
    pub ip: IpAddr,
    pub event: AnnounceEvent,
    /// `left == 0` (or event completed): a seeder.
    pub seeder: bool,
    /// How many peers to draw to receive its offers (the front end has
    /// already taken min(offers, numwant, the configured max)).
    pub offers: usize,
}

/// The WebRTC side of a store: its torrents, split as the store's segments
/// are (a torrent is in the segment of the same number as a BitTorrent
/// torrent of its info-hash would be), and their totals.
pub(crate) struct RtcSwarms {
    pub(crate) segments: Box<[Table<RtcTorrent>]>,
    pub(crate) torrents: usize,
    pub(crate) peers: PeerTotals,
    /// Torrents of more than `CLEAN_WINDOW` peers left by a segment's clean
    /// step for `SwarmStore::clean_more`, each cleaned a window at a time.
    pub(crate) clean_pending: Vec<InfoHash>,
}

impl RtcSwarms {
    pub fn new(segments: usize) -> Self {
        RtcSwarms {
            segments: (0..segments).map(|_| Table::default()).collect(),
            torrents: 0,
            peers: PeerTotals::default(),
            clean_pending: Vec::new(),
        }
    }

    pub fn torrents(&self) -> usize {
        self.torrents
    }

    /// Stored peers of all its torrents, expired ones until cleaned.
    pub fn peers(&self) -> usize {
        self.peers.seeders + self.peers.leechers
    }

    /// Whether large torrents wait for `SwarmStore::clean_more`.
    pub fn cleaning(&self) -> bool {
        !self.clean_pending.is_empty()
    }

    /// Takes what a clean step removed off the totals.
    pub(crate) fn forget(&mut self, removed: CleanReport) {
        self.torrents -= removed.torrents;
        self.peers.seeders -= removed.peers.seeders;
        self.peers.leechers -= removed.peers.leechers;
    }
}
