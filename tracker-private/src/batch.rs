//! The rows one flush writes, merged per key: a worker merges each announce
//! into its batch, the database thread merges the workers' batches into the
//! next flush, so memory grows with the active (user, torrent) pairs and
//! peers, never with the announces. Additive fields (deltas) add up;
//! assigned fields (a client's totals, flags, times) take the later value.

use crate::site::{TorrentId, UserId};
use ahash::AHashMap;
use std::net::IpAddr;
use tracker_proto::{InfoHash, PeerId};

/// A client's `User-Agent`, as `peers.agent` and `history.agent` keep it
/// (`varchar(64)`): at most 64 bytes, cut there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Agent {
    len: u8,
    bytes: [u8; Agent::MAX],
}

impl Agent {
    pub const MAX: usize = 64;

    /// `agent` cut to 64 bytes (UDP clients send none: empty).
    pub fn new(agent: &[u8]) -> Agent {
        let mut bytes = [0; Agent::MAX];
        let mut len = 0;
        for (to, from) in bytes.iter_mut().zip(agent) {
            *to = *from;
            len += 1;
        }
        Agent { len, bytes }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }
}

impl Default for Agent {
    fn default() -> Agent {
        Agent::new(b"")
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Agent({:?})", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// `peers`' primary key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerKey {
    pub user_id: UserId,
    pub torrent_id: TorrentId,
    pub peer_id: PeerId,
}

/// A `peers` row: all assigned (the latest announce's), but `created_at`,
/// which the database keeps from the first insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerRow {
    pub ip: IpAddr,
    pub port: u16,
    pub agent: Agent,
    /// The client's totals, as it reported them.
    pub uploaded: u64,
    pub downloaded: u64,
    pub left: u64,
    /// False once the peer stopped (or expired).
    pub active: bool,
    pub seeder: bool,
    /// False when the peer is not handed out (a download slot limit).
    pub visible: bool,
    pub connectable: bool,
    /// Unix seconds.
    pub created_at: u64,
    pub updated_at: u64,
}

/// A `history` row's change: one user on one torrent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRow {
    pub agent: Agent,
    /// Credited bytes (factors applied): added.
    pub uploaded: u64,
    pub downloaded: u64,
    /// Bytes as reported (no factor): added.
    pub actual_uploaded: u64,
    pub actual_downloaded: u64,
    /// The client's last reported totals: assigned.
    pub client_uploaded: u64,
    pub client_downloaded: u64,
    /// Seconds seeded: added.
    pub seedtime: u64,
    pub seeder: bool,
    pub active: bool,
    /// Immunity can be lost, never gained, once the row exists.
    pub immune: bool,
    /// Unix seconds: the first completion is kept.
    pub completed_at: Option<u64>,
    pub created_at: u64,
    pub updated_at: u64,
}

/// A user's credited bytes: added to `users.uploaded` and `downloaded`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRow {
    pub uploaded: u64,
    pub downloaded: u64,
}

/// A torrent's changes: added to `torrents.seeders`, `leechers`,
/// `times_completed` and `balance`; `updated_at` assigned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TorrentRow {
    pub seeders: i64,
    pub leechers: i64,
    pub times_completed: u64,
    /// Uploaded minus downloaded, as reported.
    pub balance: i64,
    pub updated_at: u64,
}

/// An `unregistered_info_hashes` row: a user's client announced an
/// info-hash the site does not serve (unknown, or deleted), so the site can
/// tell the user which torrents to remove. Unix seconds; the first
/// `created_at` is kept, `updated_at` is the latest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnregisteredRow {
    pub created_at: u64,
    pub updated_at: u64,
}

/// Everything one flush writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub peers: AHashMap<PeerKey, PeerRow>,
    pub history: AHashMap<(UserId, TorrentId), HistoryRow>,
    pub users: AHashMap<UserId, UserRow>,
    pub torrents: AHashMap<TorrentId, TorrentRow>,
    pub unregistered: AHashMap<(UserId, InfoHash), UnregisteredRow>,
}

impl PeerRow {
    fn merge(&mut self, later: &PeerRow) {
        let created_at = self.created_at.min(later.created_at);
        *self = *later;
        self.created_at = created_at;
    }
}

impl HistoryRow {
    fn merge(&mut self, later: &HistoryRow) {
        self.agent = later.agent;
        self.uploaded = self.uploaded.saturating_add(later.uploaded);
        self.downloaded = self.downloaded.saturating_add(later.downloaded);
        self.actual_uploaded = self.actual_uploaded.saturating_add(later.actual_uploaded);
        self.actual_downloaded = self
            .actual_downloaded
            .saturating_add(later.actual_downloaded);
        self.client_uploaded = later.client_uploaded;
        self.client_downloaded = later.client_downloaded;
        self.seedtime = self.seedtime.saturating_add(later.seedtime);
        self.seeder = later.seeder;
        self.active = later.active;
        self.immune = self.immune && later.immune;
        // The first completion stays (UNIT3D-Announce keeps the latest
        // value, which a later announce in the same flush turns back to
        // NULL, losing the completion).
        self.completed_at = self.completed_at.or(later.completed_at);
        self.created_at = self.created_at.min(later.created_at);
        self.updated_at = self.updated_at.max(later.updated_at);
    }
}

impl UserRow {
    fn merge(&mut self, later: &UserRow) {
        self.uploaded = self.uploaded.saturating_add(later.uploaded);
        self.downloaded = self.downloaded.saturating_add(later.downloaded);
    }
}

impl TorrentRow {
    fn merge(&mut self, later: &TorrentRow) {
        self.seeders = self.seeders.saturating_add(later.seeders);
        self.leechers = self.leechers.saturating_add(later.leechers);
        self.times_completed = self.times_completed.saturating_add(later.times_completed);
        self.balance = self.balance.saturating_add(later.balance);
        self.updated_at = self.updated_at.max(later.updated_at);
    }
}

impl UnregisteredRow {
    fn merge(&mut self, later: &UnregisteredRow) {
        self.created_at = self.created_at.min(later.created_at);
        self.updated_at = self.updated_at.max(later.updated_at);
    }
}

impl Batch {
    /// Merges `later` (what came after this batch) into it.
    pub fn merge(&mut self, later: Batch) {
        for (key, row) in later.peers {
            self.merge_peer(key, row);
        }
        for (key, row) in later.history {
            self.merge_history(key, row);
        }
        for (key, row) in later.users {
            self.merge_user(key, row);
        }
        for (key, row) in later.torrents {
            self.merge_torrent(key, row);
        }
        for (key, row) in later.unregistered {
            self.merge_unregistered(key, row);
        }
    }

    // One row at a time, as an announce makes them: no batch of its own to
    // allocate.
    pub fn merge_peer(&mut self, key: PeerKey, row: PeerRow) {
        self.peers
            .entry(key)
            .and_modify(|r| r.merge(&row))
            .or_insert(row);
    }

    pub fn merge_history(&mut self, key: (UserId, TorrentId), row: HistoryRow) {
        self.history
            .entry(key)
            .and_modify(|r| r.merge(&row))
            .or_insert(row);
    }

    pub fn merge_user(&mut self, key: UserId, row: UserRow) {
        self.users
            .entry(key)
            .and_modify(|r| r.merge(&row))
            .or_insert(row);
    }

    pub fn merge_torrent(&mut self, key: TorrentId, row: TorrentRow) {
        self.torrents
            .entry(key)
            .and_modify(|r| r.merge(&row))
            .or_insert(row);
    }

    pub fn merge_unregistered(&mut self, key: (UserId, InfoHash), row: UnregisteredRow) {
        self.unregistered
            .entry(key)
            .and_modify(|r| r.merge(&row))
            .or_insert(row);
    }

    pub fn is_empty(&self) -> bool {
        self.rows() == 0
    }

    /// Rows it writes, all tables together.
    pub fn rows(&self) -> usize {
        self.peers.len()
            + self.history.len()
            + self.users.len()
            + self.torrents.len()
            + self.unregistered.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::arb_batch;
    use proptest::prelude::*;

    fn merged(batches: &[Batch]) -> Batch {
        let mut all = Batch::default();
        for batch in batches {
            all.merge(batch.clone());
        }
        all
    }

    proptest! {
        /// Merging one by one equals merging any grouping of the same
        /// sequence: a worker's batches may reach the database thread
        /// merged or not, and a failed flush merges back in front.
        #[test]
        fn merge_is_associative(
            batches in proptest::collection::vec(arb_batch(), 0..6),
            split in any::<prop::sample::Index>(),
            split2 in any::<prop::sample::Index>(),
        ) {
            let one_by_one = merged(&batches);
            let at = split.index(batches.len() + 1);
            let (front, back) = batches.split_at(at);
            let mut grouped = merged(front);
            grouped.merge(merged(back));
            prop_assert_eq!(&grouped, &one_by_one);

            let at2 = split2.index(back.len() + 1);
            let (middle, last) = back.split_at(at2);
            let mut three = merged(front);
            let mut rest = merged(middle);
            rest.merge(merged(last));
            three.merge(rest);
            prop_assert_eq!(&three, &one_by_one);
        }
    }

    #[test]
    fn an_empty_batch_changes_nothing() {
        let mut batch = Batch::default();
        batch.users.insert(
            1,
            UserRow {
                uploaded: 1,
                downloaded: 2,
            },
        );
        let before = batch.clone();
        batch.merge(Batch::default());
        assert_eq!(batch, before);
        assert_eq!(batch.rows(), 1);
        assert!(!batch.is_empty());
    }
}
