//! Writing one [`Batch`] into UNIT3D's tables, exactly once.
//!
//! A flush is one transaction:
//! 1. `SELECT sequence FROM tracker_flushes WHERE tracker_id = ? FOR UPDATE`
//!    (the row is inserted, at 0, if missing). A stored sequence at or past
//!    the flush's own means this very flush was committed before and its
//!    acknowledgement was lost: roll back, [`FlushOutcome::AlreadyApplied`].
//! 2. The users and torrents the batch names are locked, in ascending id
//!    order (`SELECT id ... ORDER BY id FOR UPDATE`). That also tells which
//!    still exist: rows of users or torrents deleted since the tracker
//!    loaded them are left out (counted as skipped) rather than failing the
//!    whole flush on a foreign key forever. Locking every parent row first,
//!    in one global order, is what keeps two trackers flushing into the same
//!    tables from deadlocking: the foreign key checks of `peers` and
//!    `history` then only ever ask for locks this transaction already has.
//! 3. The batch's peers' rows are read and locked (`FOR UPDATE`, in key
//!    order), then the history rows of the (user, torrent) pairs settling
//!    needs (a completion, a return under the upload bound, a stop of a peer
//!    nobody recorded), and the batch is settled against them
//!    ([`tracker_private::settle`]): each peer credited from the point its
//!    row records, whichever tracker wrote it, its row written only if it is
//!    newer, and the torrents' counts moved by the rows that change. So trackers sharing the database credit each
//!    byte once.
//! 4. The rows, as multi-row `INSERT ... ON DUPLICATE KEY UPDATE`, each
//!    table's rows sorted by primary key, each statement under 65,535
//!    placeholders and at most `max_rows` rows. Column semantics are
//!    UNIT3D-Announce's (the fact sheet's 3.3 to 3.6), except
//!    `history.seedtime`, which the tracker computes itself: it is added.
//!    `unregistered_info_hashes` rows of users still present go last.
//! 5. `UPDATE tracker_flushes SET sequence = ?`, then `COMMIT`.
//!
//! [`check_privileges`] runs every kind of statement a flush makes, on no
//! rows, in a transaction rolled back: at start, so that a grant missing
//! stops the start naming it instead of failing every flush.
//!
//! Times: the rows carry unix seconds, written as `FROM_UNIXTIME(?)` in a
//! session whose time zone is UTC (set at connect by
//! [`crate::DbConfig::connect`]).

use crate::error::{DbError, DbErrorKind};
use crate::load::{column, flag as column_flag};
use mysql::prelude::Queryable;
use mysql::{Conn, IsolationLevel, Transaction, TxOpts, Value};
use std::collections::{BTreeSet, HashMap};
use std::fmt::Write as _;
use std::net::IpAddr;
use tracker_private::{
    pairs_needing_history, settle, Agent, Batch, Credit, CreditRules, HistoryRow, PeerKey, PeerRow,
    StoredHistory, StoredPeer, TorrentRow, UnregisteredRow, UserRow,
};
use tracker_proto::{InfoHash, PeerId};

/// The rows per statement when nothing else is configured (what
/// UNIT3D-Announce's example `MAX_RECORDS_PER_BATCH` is).
pub const DEFAULT_MAX_ROWS_PER_STATEMENT: usize = 1000;

/// A prepared statement's limit on placeholders.
const MAX_PLACEHOLDERS: usize = 65_535;

/// Ids per `SELECT ... WHERE id IN (...)`.
const IDS_PER_LOCK_QUERY: usize = 5_000;

/// Keys per `SELECT ... WHERE (key) IN (...)` of peers or history.
const KEYS_PER_READ: usize = 2_000;

/// What a flush did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FlushOutcome {
    /// Committed: `rows` written; `skipped` left out because their user or
    /// torrent no longer exists; `superseded` peers another tracker had
    /// recorded later (nothing credited, their rows left as they were);
    /// `credited` what it credited.
    Applied {
        rows: usize,
        skipped: usize,
        superseded: usize,
        credited: Credit,
    },
    /// This sequence number was committed before (its acknowledgement was
    /// lost): nothing written.
    AlreadyApplied,
}

const CREATE_TRACKER_FLUSHES: &str = "CREATE TABLE IF NOT EXISTS tracker_flushes ( \
       tracker_id VARCHAR(64) NOT NULL, \
       sequence BIGINT UNSIGNED NOT NULL, \
       flushed_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, \
       PRIMARY KEY (tracker_id) \
     ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci";

/// Creates `tracker_flushes` (deploy/unit3d/tracker.sql) unless it exists
/// already; a database user without the CREATE privilege is fine where the
/// table was made beforehand.
pub fn create_tracker_table(conn: &mut Conn) -> Result<(), DbError> {
    if !crate::load::has_table(conn, "tracker_flushes")? {
        conn.query_drop(CREATE_TRACKER_FLUSHES)
            .map_err(|e| DbError::from_mysql("creating the table tracker_flushes", e))?;
    }
    Ok(())
}

/// What [`check_privileges`] found of the optional table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnregisteredTable {
    /// There, and every statement on it allowed.
    Writable,
    /// The database has no such table (as far as the server says: not
    /// merely hidden from this user, which is refused as a missing grant).
    Missing,
}

/// Runs every kind of statement a flush makes, each on no rows, in one
/// transaction rolled back, so that a privilege or a column missing stops
/// the start with the server's words (which name the command, the table
/// and the column) instead of failing every flush later. Nothing is
/// written or locked. `unregistered`: whether the flushes will write
/// `unregistered_info_hashes`.
pub fn check_privileges(
    conn: &mut Conn,
    unregistered: bool,
) -> Result<Option<UnregisteredTable>, DbError> {
    let mut tx = conn
        .start_transaction(TxOpts::default())
        .map_err(|e| DbError::from_mysql("starting the check of the grants", e))?;
    // Each as the flushes send it: what goes as text (integers only) is
    // tried as text, what is prepared is tried prepared. The protocol
    // matters: MariaDB asks a prepared multi-table UPDATE for more
    // privileges than the same text.
    let prepared: [(&str, String, usize); 4] = [
        (
            "lock this tracker's row of tracker_flushes",
            "SELECT sequence FROM tracker_flushes WHERE tracker_id = ? AND FALSE FOR UPDATE".into(),
            1,
        ),
        (
            "add this tracker's row to tracker_flushes",
            "INSERT INTO tracker_flushes (tracker_id, sequence) SELECT ?, 0 FROM DUAL WHERE FALSE"
                .into(),
            1,
        ),
        (
            "store the flush's sequence number",
            "UPDATE tracker_flushes SET sequence = ? WHERE tracker_id = ? AND FALSE".into(),
            2,
        ),
        (
            "read the active peers at start",
            format!("{} AND FALSE", crate::peers::ACTIVE_PEERS),
            0,
        ),
    ];
    let text: [(String, String); 6] = [
        (
            "lock the users rows a flush changes".into(),
            "SELECT id FROM users WHERE FALSE ORDER BY id FOR UPDATE".into(),
        ),
        (
            "lock the torrents rows a flush changes".into(),
            "SELECT id FROM torrents WHERE FALSE ORDER BY id FOR UPDATE".into(),
        ),
        (
            "read the peers a flush credits".into(),
            "SELECT user_id, torrent_id, peer_id, uploaded, downloaded, \
             UNIX_TIMESTAMP(updated_at), active, seeder, visible FROM peers \
             WHERE FALSE ORDER BY user_id, torrent_id, peer_id FOR UPDATE"
                .into(),
        ),
        (
            "read the history rows a flush credits".into(),
            "SELECT user_id, torrent_id, completed_at IS NOT NULL, UNIX_TIMESTAMP(updated_at) \
             FROM history WHERE FALSE ORDER BY user_id, torrent_id FOR UPDATE"
                .into(),
        ),
        (USERS.doing(), USERS.probe()),
        (TORRENTS.doing(), TORRENTS.probe()),
    ];
    let run = |tx: &mut Transaction<'_>, doing: &str, sql: &str, params: usize| {
        tx.exec_drop(sql, vec![Value::NULL; params])
            .map_err(|e| DbError::from_mysql(format!("checking that this user may {doing}"), e))
    };
    for (doing, sql, params) in &prepared {
        run(&mut tx, doing, sql, *params)?;
    }
    for (doing, sql) in &text {
        tx.query_drop(sql)
            .map_err(|e| DbError::from_mysql(format!("checking that this user may {doing}"), e))?;
    }
    for statement in [&PEERS, &HISTORY] {
        run(
            &mut tx,
            &statement.doing(),
            statement.probe,
            statement.placeholders,
        )?;
    }
    let table = if unregistered {
        match run(
            &mut tx,
            &UNREGISTERED.doing(),
            UNREGISTERED.probe,
            UNREGISTERED.placeholders,
        ) {
            Ok(()) => Some(UnregisteredTable::Writable),
            // Missing for everyone: the server answers 1146 only when the
            // table is not there (a table this user may not see is 1142).
            Err(e) if e.server_code() == Some(1146) => Some(UnregisteredTable::Missing),
            Err(e) => return Err(e),
        }
    } else {
        None
    };
    tx.rollback()
        .map_err(|e| DbError::from_mysql("ending the check of the grants", e))?;
    Ok(table)
}

/// A tracker id fit for `tracker_flushes.tracker_id`.
pub fn check_tracker_id(tracker_id: &str) -> Result<(), DbError> {
    if tracker_id.is_empty() || tracker_id.chars().count() > 64 {
        return Err(DbError::new(
            DbErrorKind::Config,
            "the tracker id",
            "must be 1 to 64 characters",
        ));
    }
    Ok(())
}

/// The sequence number of the last flush `tracker_id` committed; 0 before
/// its first.
pub fn last_sequence(conn: &mut Conn, tracker_id: &str) -> Result<u64, DbError> {
    let sequence: Option<u64> = conn
        .exec_first(
            "SELECT sequence FROM tracker_flushes WHERE tracker_id = ?",
            (tracker_id,),
        )
        .map_err(|e| DbError::from_mysql("reading the last flush's sequence number", e))?;
    Ok(sequence.unwrap_or(0))
}

/// Writes `batch` as flush number `sequence` of `tracker_id`, in one
/// transaction (see the module's documentation); `max_rows` caps the rows
/// of one statement. On an error the transaction is rolled back (or never
/// committed): the same call may be made again, with the same number, on a
/// new connection.
pub fn flush(
    conn: &mut Conn,
    tracker_id: &str,
    sequence: u64,
    batch: &Batch,
    rules: &CreditRules,
    max_rows: usize,
) -> Result<FlushOutcome, DbError> {
    check_tracker_id(tracker_id)?;
    let err = |doing: &'static str| move |e| DbError::from_mysql(doing, e);
    let opts = TxOpts::default().set_isolation_level(Some(IsolationLevel::RepeatableRead));
    let mut tx = conn
        .start_transaction(opts)
        .map_err(err("starting a flush"))?;

    let stored: Option<u64> = tx
        .exec_first(
            "SELECT sequence FROM tracker_flushes WHERE tracker_id = ? FOR UPDATE",
            (tracker_id,),
        )
        .map_err(err("locking this tracker's row of tracker_flushes"))?;
    match stored {
        Some(stored) if stored >= sequence => {
            tx.rollback()
                .map_err(err("ending a flush already applied"))?;
            return Ok(FlushOutcome::AlreadyApplied);
        }
        Some(_) => {}
        None => tx
            .exec_drop(
                "INSERT INTO tracker_flushes (tracker_id, sequence) VALUES (?, 0)",
                (tracker_id,),
            )
            .map_err(err("adding this tracker's row to tracker_flushes"))?,
    }

    let users = lock_ids(&mut tx, "users", user_ids(batch))?;
    let torrents = lock_ids(&mut tx, "torrents", torrent_ids(batch))?;
    let present = |user: u32, torrent: u32| users.contains(&user) && torrents.contains(&torrent);
    let mut peer_keys: Vec<PeerKey> = (batch.peers.keys())
        .filter(|k| present(k.user_id, k.torrent_id))
        .copied()
        .collect();
    peer_keys.sort_unstable();
    let stored_peers = read_peers(&mut tx, &peer_keys)?;
    // Only the history rows settling consults (a completion, a return
    // under the upload bound, a stop of a peer nobody recorded): most
    // flushes read none.
    let pairs: Vec<(u32, u32)> =
        pairs_needing_history(batch, |key| stored_peers.get(key).copied(), rules)
            .into_iter()
            .filter(|&(u, t)| present(u, t))
            .collect();
    let stored_history = read_history(&mut tx, &pairs)?;
    let settled = settle(
        batch,
        |key| stored_peers.get(key).copied(),
        |user, torrent| stored_history.get(&(user, torrent)).copied(),
        rules,
    );

    let rows = SortedRows::of(&settled.rows, batch);
    let mut written = 0;
    let mut skipped = 0;
    let mut keep = |present: bool| {
        if present {
            written += 1;
        } else {
            skipped += 1;
        }
        present
    };
    let user_rows: Vec<_> = (rows.users.iter())
        .filter(|(id, _)| keep(users.contains(id)))
        .collect();
    let torrent_rows: Vec<_> = (rows.torrents.iter())
        .filter(|(id, _)| keep(torrents.contains(id)))
        .collect();
    let peer_rows: Vec<_> = (rows.peers.iter())
        .filter(|(k, _)| keep(present(k.user_id, k.torrent_id)))
        .collect();
    let history_rows: Vec<_> = (rows.history.iter())
        .filter(|((u, t), _)| keep(present(*u, *t)))
        .collect();
    let unregistered_rows: Vec<_> = (rows.unregistered.iter())
        .filter(|((_, u), _)| keep(users.contains(u)))
        .collect();

    write_joined(&mut tx, &USERS, &user_rows, max_rows, |(id, row)| {
        user_values(*id, row)
    })?;
    write_joined(&mut tx, &TORRENTS, &torrent_rows, max_rows, |(id, row)| {
        torrent_values(*id, row)
    })?;
    write(&mut tx, &PEERS, &peer_rows, max_rows, |(key, row), out| {
        peer_values(key, row, out)
    })?;
    write(
        &mut tx,
        &HISTORY,
        &history_rows,
        max_rows,
        |(key, row), out| history_values(*key, row, out),
    )?;
    write(
        &mut tx,
        &UNREGISTERED,
        &unregistered_rows,
        max_rows,
        |(key, row), out| unregistered_values(*key, row, out),
    )?;

    tx.exec_drop(
        "UPDATE tracker_flushes SET sequence = ? WHERE tracker_id = ?",
        (sequence, tracker_id),
    )
    .map_err(err("storing the flush's sequence number"))?;
    tx.commit().map_err(err("committing a flush"))?;
    Ok(FlushOutcome::Applied {
        rows: written,
        skipped,
        superseded: settled.superseded,
        credited: settled.credited,
    })
}

/// The peers' rows as the database holds them now, locked.
fn read_peers(
    tx: &mut Transaction<'_>,
    keys: &[PeerKey],
) -> Result<HashMap<PeerKey, StoredPeer>, DbError> {
    let doing = "reading the peers a flush credits";
    let mut stored = HashMap::with_capacity(keys.len());
    for chunk in keys.chunks(KEYS_PER_READ) {
        // The keys written into the statement, not bound: integers and the
        // peer id as a hex literal. Bound, the server could not use the
        // primary key for the list and scanned the index for every chunk
        // (140 µs a key where this takes 8).
        let mut sql = String::with_capacity(200 + chunk.len() * 64);
        sql.push_str(
            "SELECT user_id, torrent_id, peer_id, uploaded, downloaded, \
             UNIX_TIMESTAMP(updated_at), active, seeder, visible FROM peers \
             WHERE (user_id, torrent_id, peer_id) IN (",
        );
        for (i, key) in chunk.iter().enumerate() {
            let comma = if i == 0 { "" } else { ", " };
            let _ = write!(
                sql,
                "{comma}({}, {}, 0x{})",
                key.user_id,
                key.torrent_id,
                tracker_proto::Hex(&key.peer_id.0)
            );
        }
        sql.push_str(") ORDER BY user_id, torrent_id, peer_id FOR UPDATE");
        let rows: Vec<mysql::Row> = tx.query(sql).map_err(|e| DbError::from_mysql(doing, e))?;
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
                    active: column_flag(r, 6, "peers.active")?,
                    seeder: column_flag(r, 7, "peers.seeder")?,
                    visible: column_flag(r, 8, "peers.visible")?,
                },
            );
        }
    }
    Ok(stored)
}

/// The (user, torrent) pairs' history rows as the database holds them now,
/// locked.
fn read_history(
    tx: &mut Transaction<'_>,
    pairs: &[(u32, u32)],
) -> Result<HashMap<(u32, u32), StoredHistory>, DbError> {
    let doing = "reading the history rows a flush credits";
    let mut stored = HashMap::with_capacity(pairs.len());
    for chunk in pairs.chunks(KEYS_PER_READ) {
        let mut sql = String::from(
            "SELECT user_id, torrent_id, completed_at IS NOT NULL, UNIX_TIMESTAMP(updated_at) \
             FROM history WHERE (user_id, torrent_id) IN (",
        );
        for (i, (user, torrent)) in chunk.iter().enumerate() {
            // Integers: written into the statement, not bound.
            let comma = if i == 0 { "" } else { ", " };
            let _ = write!(sql, "{comma}({user}, {torrent})");
        }
        sql.push_str(") ORDER BY user_id, torrent_id FOR UPDATE");
        let rows: Vec<mysql::Row> = tx.query(sql).map_err(|e| DbError::from_mysql(doing, e))?;
        for mut row in rows {
            let r = &mut row;
            let user: u32 = column(r, 0, "history.user_id")?;
            let torrent: u32 = column(r, 1, "history.torrent_id")?;
            let updated_at: Option<u64> = column(r, 3, "history.updated_at")?;
            stored.insert(
                (user, torrent),
                StoredHistory {
                    completed: column_flag(r, 2, "history.completed_at")?,
                    updated_at: updated_at.unwrap_or(0),
                },
            );
        }
    }
    Ok(stored)
}

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

fn torrent_ids(batch: &Batch) -> BTreeSet<u32> {
    let s = &batch.settled;
    (batch.peers.keys().map(|k| k.torrent_id))
        .chain(batch.history.keys().map(|(_, t)| *t))
        .chain(s.peers.keys().map(|k| k.torrent_id))
        .chain(s.history.keys().map(|(_, t)| *t))
        .chain(s.torrents.keys().copied())
        .collect()
}

/// A flush's rows, each table's sorted by its primary key.
struct SortedRows<'a> {
    peers: Vec<(&'a PeerKey, &'a PeerRow)>,
    history: Vec<((u32, u32), &'a HistoryRow)>,
    users: Vec<(u32, &'a UserRow)>,
    torrents: Vec<(u32, &'a TorrentRow)>,
    /// Keyed (info-hash, user), the table's primary key order.
    unregistered: Vec<((InfoHash, u32), &'a UnregisteredRow)>,
}

impl<'a> SortedRows<'a> {
    fn of(rows: &'a tracker_private::Rows, batch: &'a Batch) -> Self {
        let mut peers: Vec<_> = rows.peers.iter().collect();
        peers.sort_unstable_by_key(|(key, _)| **key);
        let mut history: Vec<_> = rows.history.iter().map(|(k, r)| (*k, r)).collect();
        history.sort_unstable_by_key(|(key, _)| *key);
        let mut users: Vec<_> = rows.users.iter().map(|(k, r)| (*k, r)).collect();
        users.sort_unstable_by_key(|(key, _)| *key);
        let mut torrents: Vec<_> = rows.torrents.iter().map(|(k, r)| (*k, r)).collect();
        torrents.sort_unstable_by_key(|(key, _)| *key);
        let mut unregistered: Vec<_> = (batch.unregistered.iter())
            .map(|(&(user, hash), r)| ((hash, user), r))
            .collect();
        unregistered.sort_unstable_by_key(|((hash, user), _)| (hash.0, *user));
        SortedRows {
            peers,
            history,
            users,
            torrents,
            unregistered,
        }
    }
}

/// Locks the rows of `table` with these ids, in ascending order, and
/// returns the ids that exist. The ids are integers: written into the
/// statement, not bound.
fn lock_ids(
    tx: &mut Transaction<'_>,
    table: &'static str,
    ids: BTreeSet<u32>,
) -> Result<BTreeSet<u32>, DbError> {
    let ids: Vec<u32> = ids.into_iter().collect();
    let mut present = BTreeSet::new();
    for chunk in ids.chunks(IDS_PER_LOCK_QUERY) {
        let mut sql = format!("SELECT id FROM {table} WHERE id IN (");
        for (i, id) in chunk.iter().enumerate() {
            let comma = if i == 0 { "" } else { "," };
            let _ = write!(sql, "{comma}{id}");
        }
        sql.push_str(") ORDER BY id FOR UPDATE");
        let found: Vec<u32> = tx.query(sql).map_err(|e| {
            DbError::from_mysql(format!("locking the {table} rows a flush changes"), e)
        })?;
        present.extend(found);
    }
    Ok(present)
}

/// One table's statement around its rows' tuples: `head`, `first`, then
/// `next` for each further row, then `tail`.
struct Statement {
    table: &'static str,
    head: &'static str,
    first: &'static str,
    next: &'static str,
    /// `?` per row.
    placeholders: usize,
    tail: &'static str,
    /// The same statement on no rows, with `placeholders` parameters:
    /// what the start tries (see [`check_privileges`]).
    probe: &'static str,
}

impl Statement {
    fn doing(&self) -> String {
        format!("write {} rows", self.table)
    }
}

// Sums that saturate instead of failing the statement: a sum past the
// column's range is an error (1690), which would fail the flush, and every
// retry of it, and every flush queued behind it, for good, over one
// client's absurd totals. BIGINT UNSIGNED for bytes and seconds, BIGINT for
// the balance.
macro_rules! add_unsigned {
    ($col:literal) => {
        concat!(
            $col,
            " = ",
            $col,
            " + LEAST(VALUES(",
            $col,
            "), 18446744073709551615 - ",
            $col,
            ")"
        )
    };
}

/// An UPDATE of a site's table joined to a derived table of the rows'
/// values, all integers, written into the text and sent as text:
/// `head (SELECT 1 AS id, ... UNION ALL SELECT 2, ...) join set`. Not
/// prepared: a prepared multi-table UPDATE of `users` or `torrents` makes
/// MariaDB ask for SELECT on every table whose foreign key references
/// them, and on theirs in turn (UNIT3D has 88 to `users`, `apikeys`
/// first); the same statement as text asks for none of them.
struct JoinedUpdate<const N: usize> {
    table: &'static str,
    head: &'static str,
    /// The derived table's columns, named in its first row.
    columns: [&'static str; N],
    /// The join's condition, after the derived table.
    join: &'static str,
    set: &'static str,
}

impl<const N: usize> JoinedUpdate<N> {
    /// The statement for these rows (at least one).
    fn sql(&self, rows: impl ExactSizeIterator<Item = [i128; N]>) -> String {
        let mut sql = String::with_capacity(
            self.head.len() + self.join.len() + self.set.len() + rows.len() * (N * 12 + 20),
        );
        sql.push_str(self.head);
        for (i, row) in rows.enumerate() {
            if i == 0 {
                sql.push_str("SELECT ");
                for (j, (value, column)) in row.iter().zip(self.columns).enumerate() {
                    let comma = if j == 0 { "" } else { ", " };
                    let _ = write!(sql, "{comma}{value} AS {column}");
                }
            } else {
                sql.push_str(" UNION ALL SELECT ");
                for (j, value) in row.iter().enumerate() {
                    let comma = if j == 0 { "" } else { ", " };
                    let _ = write!(sql, "{comma}{value}");
                }
            }
        }
        sql.push_str(self.join);
        sql.push_str(self.set);
        sql
    }

    /// The same statement on one row of zeros that joins nothing: what
    /// the start tries (see [`check_privileges`]).
    fn probe(&self) -> String {
        let mut sql = self.sql(std::iter::once([0; N]));
        let set_at = sql.len() - self.set.len();
        sql.insert_str(set_at, " AND FALSE");
        sql
    }

    fn doing(&self) -> String {
        format!("write {} rows", self.table)
    }
}

/// `users`: credited bytes added, to rows that exist (locked above). An
/// UPDATE joined to the rows, not an upsert: the site's users are never
/// inserted, and the tracker's user needs no privilege on any other column
/// (an upsert needs INSERT and UPDATE on every column it names, passkey
/// and group included). Sums saturate, as in `history`.
const USERS: JoinedUpdate<3> = JoinedUpdate {
    table: "users",
    head: "UPDATE users u JOIN (",
    columns: ["id", "up", "down"],
    join: ") d ON u.id = d.id",
    set: " SET \
          u.uploaded = u.uploaded + LEAST(d.up, 18446744073709551615 - u.uploaded), \
          u.downloaded = u.downloaded + LEAST(d.down, 18446744073709551615 - u.downloaded)",
};

/// `torrents`: peer counts, completions and balance added; `updated_at`
/// assigned. The counts move with the peer rows a flush changes, so they
/// stay those of the active visible rows; never below zero, whatever a
/// site switched over from left in them (deploy/unit3d/recount.sql makes
/// them right once). The balance saturates within BIGINT; a NULL one (the
/// column's default in UNIT3D's dump) counts as 0, or every sum would stay
/// NULL.
const TORRENTS: JoinedUpdate<6> = JoinedUpdate {
    table: "torrents",
    head: "UPDATE torrents t JOIN (",
    columns: ["id", "seeders", "leechers", "completed", "balance", "at"],
    join: ") d ON t.id = d.id",
    set: " SET \
          t.seeders = GREATEST(0, t.seeders + d.seeders), \
          t.leechers = GREATEST(0, t.leechers + d.leechers), \
          t.times_completed = t.times_completed + d.completed, \
          t.balance = CASE \
            WHEN d.balance > 0 AND COALESCE(t.balance, 0) > 0 \
              THEN t.balance + LEAST(d.balance, 9223372036854775807 - t.balance) \
            WHEN d.balance < 0 AND COALESCE(t.balance, 0) < 0 \
              THEN t.balance + GREATEST(d.balance, -9223372036854775807 - 1 - t.balance) \
            ELSE COALESCE(t.balance, 0) + d.balance END, \
          t.updated_at = FROM_UNIXTIME(d.at)",
};

/// `peers`' upsert tail: everything assigned but `created_at`, kept from
/// the insert.
macro_rules! peers_tail {
    () => {
        " ON DUPLICATE KEY UPDATE \
         ip = VALUES(ip), port = VALUES(port), agent = VALUES(agent), \
         uploaded = VALUES(uploaded), downloaded = VALUES(downloaded), \
         `left` = VALUES(`left`), active = VALUES(active), seeder = VALUES(seeder), \
         visible = VALUES(visible), updated_at = VALUES(updated_at), \
         connectable = VALUES(connectable)"
    };
}

/// `peers`: only rows newer than the stored ones get here (the flush read
/// them).
const PEERS: Statement = Statement {
    table: "peers",
    head: "INSERT INTO peers \
           (peer_id, ip, port, agent, uploaded, downloaded, `left`, active, seeder, \
            visible, created_at, updated_at, torrent_id, user_id, connectable) \
           VALUES ",
    first: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, FROM_UNIXTIME(?), FROM_UNIXTIME(?), ?, ?, ?)",
    next: ",(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, FROM_UNIXTIME(?), FROM_UNIXTIME(?), ?, ?, ?)",
    placeholders: 15,
    tail: peers_tail!(),
    probe: concat!(
        "INSERT INTO peers \
         (peer_id, ip, port, agent, uploaded, downloaded, `left`, active, seeder, \
          visible, created_at, updated_at, torrent_id, user_id, connectable) \
         SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, FROM_UNIXTIME(?), FROM_UNIXTIME(?), ?, ?, ? \
         FROM DUAL WHERE FALSE",
        peers_tail!()
    ),
};

/// `history`: bytes and seedtime added; the client's totals, agent and
/// flags assigned from the latest announce (a tracker's older one, landing
/// after another tracker's newer, changes none of them); immunity only ever
/// lost, the first completion kept. (Assignments run left to right: the
/// newer-than test comes before `updated_at` is assigned.)
macro_rules! history_tail {
    () => {
        concat!(
            " ON DUPLICATE KEY UPDATE ",
            "agent = IF(VALUES(updated_at) >= updated_at, VALUES(agent), agent), ",
            "client_uploaded = IF(VALUES(updated_at) >= updated_at, \
               VALUES(client_uploaded), client_uploaded), ",
            "client_downloaded = IF(VALUES(updated_at) >= updated_at, \
               VALUES(client_downloaded), client_downloaded), ",
            "seeder = IF(VALUES(updated_at) >= updated_at, VALUES(seeder), seeder), ",
            "active = IF(VALUES(updated_at) >= updated_at, VALUES(active), active), ",
            add_unsigned!("uploaded"),
            ", ",
            add_unsigned!("actual_uploaded"),
            ", ",
            add_unsigned!("downloaded"),
            ", ",
            add_unsigned!("actual_downloaded"),
            ", ",
            add_unsigned!("seedtime"),
            ", immune = (immune AND VALUES(immune)), \
             completed_at = COALESCE(completed_at, VALUES(completed_at)), \
             updated_at = GREATEST(COALESCE(updated_at, VALUES(updated_at)), VALUES(updated_at))"
        )
    };
}

const HISTORY: Statement = Statement {
    table: "history",
    head: "INSERT INTO history \
           (user_id, torrent_id, agent, uploaded, actual_uploaded, client_uploaded, \
            downloaded, actual_downloaded, client_downloaded, seeder, active, seedtime, \
            immune, created_at, updated_at, completed_at) \
           VALUES ",
    first: "(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, \
            FROM_UNIXTIME(?), FROM_UNIXTIME(?), FROM_UNIXTIME(?))",
    next: ",(?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, \
            FROM_UNIXTIME(?), FROM_UNIXTIME(?), FROM_UNIXTIME(?))",
    placeholders: 16,
    tail: history_tail!(),
    probe: concat!(
        "INSERT INTO history \
         (user_id, torrent_id, agent, uploaded, actual_uploaded, client_uploaded, \
          downloaded, actual_downloaded, client_downloaded, seeder, active, seedtime, \
          immune, created_at, updated_at, completed_at) \
         SELECT ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, \
          FROM_UNIXTIME(?), FROM_UNIXTIME(?), FROM_UNIXTIME(?) FROM DUAL WHERE FALSE",
        history_tail!()
    ),
};

/// `unregistered_info_hashes`: the first sighting kept, the latest time
/// assigned (as UNIT3D-Announce writes it).
const UNREGISTERED: Statement = Statement {
    table: "unregistered_info_hashes",
    head: "INSERT INTO unregistered_info_hashes (user_id, info_hash, created_at, updated_at) \
           VALUES ",
    first: "(?, ?, FROM_UNIXTIME(?), FROM_UNIXTIME(?))",
    next: ",(?, ?, FROM_UNIXTIME(?), FROM_UNIXTIME(?))",
    placeholders: 4,
    tail: " ON DUPLICATE KEY UPDATE updated_at = VALUES(updated_at)",
    probe: "INSERT INTO unregistered_info_hashes (user_id, info_hash, created_at, updated_at) \
            SELECT ?, ?, FROM_UNIXTIME(?), FROM_UNIXTIME(?) FROM DUAL WHERE FALSE \
            ON DUPLICATE KEY UPDATE updated_at = VALUES(updated_at)",
};

/// Writes `rows` with a joined update sent as text, at most `max_rows` a
/// statement.
fn write_joined<R, const N: usize>(
    tx: &mut Transaction<'_>,
    statement: &JoinedUpdate<N>,
    rows: &[R],
    max_rows: usize,
    values: impl Fn(&R) -> [i128; N],
) -> Result<(), DbError> {
    for chunk in rows.chunks(max_rows.max(1)) {
        tx.query_drop(statement.sql(chunk.iter().map(&values)))
            .map_err(|e| DbError::from_mysql(format!("writing {} rows", statement.table), e))?;
    }
    Ok(())
}

/// Writes `rows` with `statement`, as few statements as the limits allow.
fn write<R>(
    tx: &mut Transaction<'_>,
    statement: &Statement,
    rows: &[R],
    max_rows: usize,
    values: impl Fn(&R, &mut Vec<Value>),
) -> Result<(), DbError> {
    let per_statement = (MAX_PLACEHOLDERS / statement.placeholders).min(max_rows.max(1));
    for chunk in rows.chunks(per_statement) {
        let mut sql = String::with_capacity(
            statement.head.len() + statement.tail.len() + chunk.len() * statement.next.len(),
        );
        sql.push_str(statement.head);
        let mut params = Vec::with_capacity(chunk.len() * statement.placeholders);
        for (i, row) in chunk.iter().enumerate() {
            sql.push_str(if i == 0 {
                statement.first
            } else {
                statement.next
            });
            values(row, &mut params);
        }
        sql.push_str(statement.tail);
        tx.exec_drop(sql, params)
            .map_err(|e| DbError::from_mysql(format!("writing {} rows", statement.table), e))?;
    }
    Ok(())
}

fn flag(b: bool) -> Value {
    Value::Int(i64::from(b))
}

fn time(unix: u64) -> Value {
    Value::UInt(unix)
}

/// An agent as the `varchar(64)` utf8mb4 columns take it: invalid UTF-8
/// (a client's bytes) replaced, or the server would refuse the statement.
fn agent(agent: &Agent) -> Value {
    Value::Bytes(
        String::from_utf8_lossy(agent.as_bytes())
            .into_owned()
            .into_bytes(),
    )
}

fn user_values(id: u32, row: &UserRow) -> [i128; 3] {
    [id.into(), row.uploaded.into(), row.downloaded.into()]
}

fn torrent_values(id: u32, row: &TorrentRow) -> [i128; 6] {
    [
        id.into(),
        row.seeders.into(),
        row.leechers.into(),
        row.times_completed.into(),
        row.balance.into(),
        row.updated_at.into(),
    ]
}

fn peer_values(key: &PeerKey, row: &PeerRow, out: &mut Vec<Value>) {
    let ip = match row.ip {
        IpAddr::V4(ip) => ip.octets().to_vec(),
        IpAddr::V6(ip) => ip.octets().to_vec(),
    };
    out.extend([
        Value::Bytes(key.peer_id.0.to_vec()),
        Value::Bytes(ip),
        Value::UInt(u64::from(row.port)),
        agent(&row.agent),
        Value::UInt(row.uploaded),
        Value::UInt(row.downloaded),
        Value::UInt(row.left),
        flag(row.active),
        flag(row.seeder),
        flag(row.visible),
        time(row.created_at),
        time(row.updated_at),
        Value::UInt(u64::from(key.torrent_id)),
        Value::UInt(u64::from(key.user_id)),
        flag(row.connectable),
    ]);
}

fn history_values((user, torrent): (u32, u32), row: &HistoryRow, out: &mut Vec<Value>) {
    out.extend([
        Value::UInt(u64::from(user)),
        Value::UInt(u64::from(torrent)),
        agent(&row.agent),
        Value::UInt(row.uploaded),
        Value::UInt(row.actual_uploaded),
        Value::UInt(row.client_uploaded),
        Value::UInt(row.downloaded),
        Value::UInt(row.actual_downloaded),
        Value::UInt(row.client_downloaded),
        flag(row.seeder),
        flag(row.active),
        Value::UInt(row.seedtime),
        flag(row.immune),
        time(row.created_at),
        time(row.updated_at),
        row.completed_at.map_or(Value::NULL, time),
    ]);
}

fn unregistered_values((hash, user): (InfoHash, u32), row: &UnregisteredRow, out: &mut Vec<Value>) {
    out.extend([
        Value::UInt(u64::from(user)),
        Value::Bytes(hash.0.to_vec()),
        time(row.created_at),
        time(row.updated_at),
    ]);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_match_the_tuples() {
        for statement in [&PEERS, &HISTORY, &UNREGISTERED] {
            for tuple in [statement.first, statement.next, statement.probe] {
                assert_eq!(
                    tuple.matches('?').count(),
                    statement.placeholders,
                    "{}",
                    statement.table
                );
            }
        }
    }

    #[test]
    fn joined_updates_name_the_columns_once_and_probe_on_no_rows() {
        let sql = USERS.sql([[1, 700, 100], [2, 0, u64::MAX.into()]].into_iter());
        assert!(
            sql.starts_with(
                "UPDATE users u JOIN (SELECT 1 AS id, 700 AS up, 100 AS down \
                 UNION ALL SELECT 2, 0, 18446744073709551615) d ON u.id = d.id SET "
            ),
            "{sql}"
        );
        let probe = USERS.probe();
        assert!(
            probe.contains("(SELECT 0 AS id, 0 AS up, 0 AS down) d ON u.id = d.id AND FALSE SET"),
            "{probe}"
        );
        assert!(TORRENTS
            .sql(std::iter::once([1, -1, 0, 0, i64::MIN.into(), 5]))
            .contains("-9223372036854775808 AS balance, 5 AS at)"));
    }

    #[test]
    fn tracker_ids_are_bounded() {
        assert!(check_tracker_id("").is_err());
        assert!(check_tracker_id(&"x".repeat(65)).is_err());
        assert!(check_tracker_id(&"é".repeat(64)).is_ok());
    }
}
