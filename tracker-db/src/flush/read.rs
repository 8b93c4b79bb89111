//! What a flush reads, locked, before it settles: the parent rows its
//! batch names, then the rows its batch claims (its peers' rows and the
//! history rows settling needs).

use super::statements;
use crate::error::DbError;
use crate::load::{column, flag};
use mysql::prelude::Queryable;
use mysql::Transaction;
use std::collections::{BTreeSet, HashMap};
use tracker_private::{
    pairs_needing_history, Batch, CreditRules, PeerKey, StoredHistory, StoredPeer,
};
use tracker_proto::PeerId;

/// Ids per `SELECT ... WHERE id IN (...)`.
const IDS_PER_LOCK_QUERY: usize = 5_000;

/// Keys per `SELECT ... WHERE (key) IN (...)` of peers or history.
const KEYS_PER_READ: usize = 2_000;

/// The batch's users and torrents that still exist, their rows locked.
pub(super) struct Parents {
    pub users: BTreeSet<u32>,
    pub torrents: BTreeSet<u32>,
}

impl Parents {
    /// Whether rows of this pair may be written: both parents exist.
    pub fn present(&self, user: u32, torrent: u32) -> bool {
        self.users.contains(&user) && self.torrents.contains(&torrent)
    }
}

/// Locks the users and then the torrents the batch names, each in
/// ascending id order: one global order, so that two trackers flushing
/// into the same tables never deadlock (the foreign key checks of `peers`
/// and `history` then ask only for locks this transaction holds).
pub(super) fn lock_parents(tx: &mut Transaction<'_>, batch: &Batch) -> Result<Parents, DbError> {
    Ok(Parents {
        users: lock_ids(tx, "users", user_ids(batch))?,
        torrents: lock_ids(tx, "torrents", torrent_ids(batch))?,
    })
}

/// The rows the batch claims, as the database holds them now, locked.
pub(super) struct Stored {
    pub peers: HashMap<PeerKey, StoredPeer>,
    pub history: HashMap<(u32, u32), StoredHistory>,
}

impl Stored {
    pub fn peer(&self, key: &PeerKey) -> Option<StoredPeer> {
        self.peers.get(key).copied()
    }

    pub fn history(&self, user: u32, torrent: u32) -> Option<StoredHistory> {
        self.history.get(&(user, torrent)).copied()
    }
}

/// Reads the batch's peers' rows, then only the history rows settling
/// consults (a completion, a return under the upload bound, a stop of a
/// peer nobody recorded): most flushes read none. Rows of parents gone
/// are not read.
pub(super) fn claimed_rows(
    tx: &mut Transaction<'_>,
    batch: &Batch,
    parents: &Parents,
    rules: &CreditRules,
) -> Result<Stored, DbError> {
    let mut keys: Vec<PeerKey> = (batch.peers.keys())
        .filter(|k| parents.present(k.user_id, k.torrent_id))
        .copied()
        .collect();
    keys.sort_unstable();
    let peers = read_peers(tx, &keys)?;
    let mut pairs: Vec<(u32, u32)> =
        pairs_needing_history(batch, |key| peers.get(key).copied(), rules)
            .into_iter()
            .filter(|&(u, t)| parents.present(u, t))
            .collect();
    // Locked in key order, whatever order settling gives.
    pairs.sort_unstable();
    let history = read_history(tx, &pairs)?;
    Ok(Stored { peers, history })
}

/// Locks the rows of `table` with these ids, in ascending order, and
/// returns the ids that exist: rows of users or torrents deleted since
/// the tracker loaded them are then left out rather than failing the
/// whole flush on a foreign key forever.
fn lock_ids(
    tx: &mut Transaction<'_>,
    table: &'static str,
    ids: BTreeSet<u32>,
) -> Result<BTreeSet<u32>, DbError> {
    let ids: Vec<u32> = ids.into_iter().collect();
    let mut present = BTreeSet::new();
    for chunk in ids.chunks(IDS_PER_LOCK_QUERY) {
        let found: Vec<u32> = tx.query(statements::lock_ids(table, chunk)).map_err(|e| {
            DbError::from_mysql(format!("locking the {table} rows a flush changes"), e)
        })?;
        present.extend(found);
    }
    Ok(present)
}

fn read_peers(
    tx: &mut Transaction<'_>,
    keys: &[PeerKey],
) -> Result<HashMap<PeerKey, StoredPeer>, DbError> {
    let doing = "reading the peers a flush credits";
    let mut stored = HashMap::with_capacity(keys.len());
    for chunk in keys.chunks(KEYS_PER_READ) {
        let rows: Vec<mysql::Row> = tx
            .query(statements::read_peers(chunk))
            .map_err(|e| DbError::from_mysql(doing, e))?;
        for mut row in rows {
            let r = &mut row;
            let user_id: u32 = column(r, 0, "peers.user_id")?;
            let torrent_id: u32 = column(r, 1, "peers.torrent_id")?;
            let peer_id: Vec<u8> = column(r, 2, "peers.peer_id")?;
            let Ok(peer_id) = <[u8; 20]>::try_from(peer_id.as_slice()) else {
                continue;
            };
            let key = PeerKey {
                user_id,
                torrent_id,
                peer_id: PeerId(peer_id),
            };
            let updated_at: Option<u64> = column(r, 5, "peers.updated_at")?;
            stored.insert(
                key,
                StoredPeer {
                    uploaded: column(r, 3, "peers.uploaded")?,
                    downloaded: column(r, 4, "peers.downloaded")?,
                    updated_at: updated_at.unwrap_or(0),
                    active: flag(r, 6, "peers.active")?,
                    seeder: flag(r, 7, "peers.seeder")?,
                    visible: flag(r, 8, "peers.visible")?,
                },
            );
        }
    }
    Ok(stored)
}

fn read_history(
    tx: &mut Transaction<'_>,
    pairs: &[(u32, u32)],
) -> Result<HashMap<(u32, u32), StoredHistory>, DbError> {
    let doing = "reading the history rows a flush credits";
    let mut stored = HashMap::with_capacity(pairs.len());
    for chunk in pairs.chunks(KEYS_PER_READ) {
        let rows: Vec<mysql::Row> = tx
            .query(statements::read_history(chunk))
            .map_err(|e| DbError::from_mysql(doing, e))?;
        for mut row in rows {
            let r = &mut row;
            let user: u32 = column(r, 0, "history.user_id")?;
            let torrent: u32 = column(r, 1, "history.torrent_id")?;
            let updated_at: Option<u64> = column(r, 3, "history.updated_at")?;
            stored.insert(
                (user, torrent),
                StoredHistory {
                    completed: flag(r, 2, "history.completed_at")?,
                    updated_at: updated_at.unwrap_or(0),
                    client_downloaded: column(r, 4, "history.client_downloaded")?,
                },
            );
        }
    }
    Ok(stored)
}

/// Every user the batch names, settled or not.
fn user_ids(batch: &Batch) -> BTreeSet<u32> {
    let s = &batch.settled;
    (batch.peers.keys().map(|k| k.user_id))
        .chain(batch.history.keys().map(|(u, _)| *u))
        .chain(batch.unregistered.keys().map(|(u, _)| *u))
        .chain(s.peers.keys().map(|k| k.user_id))
        .chain(s.history.keys().map(|(u, _)| *u))
        .chain(s.users.keys().copied())
        .collect()
}

/// Every torrent the batch names, settled or not.
fn torrent_ids(batch: &Batch) -> BTreeSet<u32> {
    let s = &batch.settled;
    (batch.peers.keys().map(|k| k.torrent_id))
        .chain(batch.history.keys().map(|(_, t)| *t))
        .chain(s.peers.keys().map(|k| k.torrent_id))
        .chain(s.history.keys().map(|(_, t)| *t))
        .chain(s.torrents.keys().copied())
        .collect()
}
