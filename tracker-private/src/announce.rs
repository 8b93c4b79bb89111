//! What a ledger takes: an announce to a private tracker, and its limits.

use crate::batch::{Agent, CreditRules};
use crate::site::Passkey;
use std::net::IpAddr;
use tracker_proto::{AnnounceEvent, InfoHash, PeerId};

/// A ledger's limits.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LedgerConfig {
    /// Peers one user may have on one torrent (UNIT3D-Announce's
    /// `MAX_PEERS_PER_TORRENT_PER_USER`, default 3); a new peer beyond it
    /// is refused.
    pub max_peers_per_torrent_per_user: u16,
    /// Peers one torrent may have here (`swarm.max_peers_per_torrent`),
    /// and peers this ledger may hold in all (`swarm.max_peers_per_worker`):
    /// a new peer past either is refused, so that the memory the accounts
    /// take is bounded (the site's users and torrents bound it too, but
    /// only by their product).
    pub max_peers_per_torrent: usize,
    pub max_peers: usize,
    /// Seconds after which a silent peer is forgotten (`ACTIVE_PEER_TTL`,
    /// default 7200); also the most one announce interval adds to
    /// seedtime.
    pub active_peer_ttl: u64,
    /// Seconds after which a peer's row in the database is no longer
    /// credited from (`INACTIVE_PEER_TTL`, default 21 days): a peer back
    /// after longer counts as new.
    pub inactive_peer_ttl: u64,
    /// Bytes per second: an upload implying more, over the time since the
    /// peer's previous announce and after the uploads credited to the
    /// user's other peers on the torrent, is flagged and not credited (its
    /// raw bytes are still recorded). 0: off.
    pub max_upload_rate: u64,
    /// Seconds a peer must wait between two announces
    /// (`ANNOUNCE_MIN_ENFORCED`, default 1740): one sooner is accounted but
    /// answered with no peers and zero counts, so that announcing fast
    /// harvests nothing. Its first `completed` is never held back. 0: off.
    pub min_announce_interval: u64,
    /// Distinct (user, info-hash) rows of `unregistered_info_hashes` one
    /// batch takes at most; past it they are dropped and counted, so that a
    /// passkey announcing made-up info-hashes grows neither the batch nor
    /// the table without bound. 0: none are recorded.
    pub max_unregistered_per_batch: usize,
}

impl Default for LedgerConfig {
    fn default() -> LedgerConfig {
        LedgerConfig {
            max_peers_per_torrent_per_user: 3,
            max_peers_per_torrent: 100_000,
            max_peers: 20_000_000,
            active_peer_ttl: 7200,
            inactive_peer_ttl: 1_814_400,
            max_upload_rate: 0,
            min_announce_interval: 0,
            max_unregistered_per_batch: 0,
        }
    }
}

impl LedgerConfig {
    /// What the flush's crediting needs of these limits.
    pub fn credit_rules(&self) -> CreditRules {
        CreditRules {
            max_seedtime_step: self.active_peer_ttl,
            inactive_peer_ttl: self.inactive_peer_ttl,
            max_upload_rate: self.max_upload_rate,
        }
    }
}

/// An announce to a private tracker, parsed, with the peer's address
/// decided by the front end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PrivateAnnounce {
    pub info_hash: InfoHash,
    pub peer_id: PeerId,
    pub passkey: Passkey,
    pub ip: IpAddr,
    pub port: u16,
    pub event: AnnounceEvent,
    /// The client's totals since it started the torrent.
    pub uploaded: u64,
    pub downloaded: u64,
    pub left: u64,
    pub agent: Agent,
    /// Peers the answer may carry at most (the front end's `numwant`,
    /// capped by its limits).
    pub numwant: u32,
}
