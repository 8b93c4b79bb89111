//! The SQL text of a flush and of the start's check, in one place: the
//! check builds its probes from the same text the flushes send.
//!
//! Two ways of sending:
//! - The statements on `users` and `torrents`, and the reads that lock,
//!   carry integers only: they are written into the text and sent over
//!   the text protocol. A *prepared* multi-table UPDATE of `users` or
//!   `torrents` makes MariaDB ask for SELECT on every table whose foreign
//!   key references them with ON UPDATE CASCADE, and on theirs in turn
//!   (UNIT3D has 88 to `users`, `apikeys` first); the same statement as
//!   text asks for none of them.
//! - The rows of `peers`, `history` and `unregistered_info_hashes` carry
//!   bytes (peer ids, agents, info-hashes): bound, as prepared statements.
//!   No table references those three, so the server asks for nothing
//!   beyond them.

use std::fmt::Write as _;
use tracker_private::PeerKey;

pub(super) const CREATE_TRACKER_FLUSHES: &str = "CREATE TABLE IF NOT EXISTS tracker_flushes ( \
       tracker_id VARCHAR(64) NOT NULL, \
       sequence BIGINT UNSIGNED NOT NULL, \
       flushed_at TIMESTAMP NOT NULL DEFAULT CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, \
       PRIMARY KEY (tracker_id) \
     ) ENGINE=InnoDB DEFAULT CHARSET=utf8mb4 COLLATE=utf8mb4_unicode_ci";

pub(super) const LAST_SEQUENCE: &str = "SELECT sequence FROM tracker_flushes WHERE tracker_id = ?";

/// A tracker's row of `tracker_flushes`, each as the flush sends it
/// (prepared) and as the start tries it, on no row.
pub(super) const LOCK_SEQUENCE: &str =
    "SELECT sequence FROM tracker_flushes WHERE tracker_id = ? FOR UPDATE";
pub(super) const LOCK_SEQUENCE_PROBE: &str =
    "SELECT sequence FROM tracker_flushes WHERE tracker_id = ? AND FALSE FOR UPDATE";
pub(super) const ADD_TRACKER: &str =
    "INSERT INTO tracker_flushes (tracker_id, sequence) VALUES (?, 0)";
pub(super) const ADD_TRACKER_PROBE: &str =
    "INSERT INTO tracker_flushes (tracker_id, sequence) SELECT ?, 0 FROM DUAL WHERE FALSE";
pub(super) const STORE_SEQUENCE: &str =
    "UPDATE tracker_flushes SET sequence = ? WHERE tracker_id = ?";
pub(super) const STORE_SEQUENCE_PROBE: &str =
    "UPDATE tracker_flushes SET sequence = ? WHERE tracker_id = ? AND FALSE";

/// `SELECT id FROM table WHERE id IN (ids) ORDER BY id FOR UPDATE`; on no
/// ids, the same on no rows (the start's probe).
pub(super) fn lock_ids(table: &str, ids: &[u32]) -> String {
    let mut sql = format!("SELECT id FROM {table} WHERE ");
    in_list(&mut sql, "id", ids, |sql, id| {
        let _ = write!(sql, "{id}");
    });
    sql.push_str(" ORDER BY id FOR UPDATE");
    sql
}

/// The peers' rows, locked in key order. The keys are written into the
/// text: integers and the peer id as a hex literal. Bound, the server
/// could not use the primary key for the list and scanned the index for
/// every chunk (140 µs a key where this takes 8).
pub(super) fn read_peers(keys: &[PeerKey]) -> String {
    let mut sql = String::with_capacity(200 + keys.len() * 64);
    sql.push_str(
        "SELECT user_id, torrent_id, peer_id, uploaded, downloaded, \
         UNIX_TIMESTAMP(updated_at), active, seeder, visible FROM peers WHERE ",
    );
    in_list(
        &mut sql,
        "(user_id, torrent_id, peer_id)",
        keys,
        |sql, key| {
            let _ = write!(
                sql,
                "({}, {}, 0x{})",
                key.user_id,
                key.torrent_id,
                tracker_proto::Hex(&key.peer_id.0)
            );
        },
    );
    sql.push_str(" ORDER BY user_id, torrent_id, peer_id FOR UPDATE");
    sql
}

/// The (user, torrent) pairs' history rows, locked in key order.
pub(super) fn read_history(pairs: &[(u32, u32)]) -> String {
    let mut sql = String::from(
        "SELECT user_id, torrent_id, completed_at IS NOT NULL, UNIX_TIMESTAMP(updated_at), \
         client_downloaded FROM history WHERE ",
    );
    in_list(
        &mut sql,
        "(user_id, torrent_id)",
        pairs,
        |sql, (user, torrent)| {
            let _ = write!(sql, "({user}, {torrent})");
        },
    );
    sql.push_str(" ORDER BY user_id, torrent_id FOR UPDATE");
    sql
}

/// `key IN (items)`, or `FALSE` on no items.
fn in_list<T>(sql: &mut String, key: &str, items: &[T], item: impl Fn(&mut String, &T)) {
    if items.is_empty() {
        sql.push_str("FALSE");
        return;
    }
    let _ = write!(sql, "{key} IN (");
    for (i, it) in items.iter().enumerate() {
        if i > 0 {
            sql.push_str(", ");
        }
        item(sql, it);
    }
    sql.push(')');
}

/// An UPDATE of a site's table joined to a derived table of the rows'
/// values, all integers, written into the text:
/// `head (SELECT 1 AS id, ... UNION ALL SELECT 2, ...) join set`.
pub(super) struct JoinedUpdate<const N: usize> {
    pub table: &'static str,
    head: &'static str,
    /// The derived table's columns, named in its first row.
    columns: [&'static str; N],
    /// The join's condition, after the derived table.
    join: &'static str,
    set: &'static str,
}

impl<const N: usize> JoinedUpdate<N> {
    /// The statement for these rows (at least one).
    pub fn sql(&self, rows: impl ExactSizeIterator<Item = [i128; N]>) -> String {
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
    /// the start tries.
    pub fn probe(&self) -> String {
        let mut sql = self.sql(std::iter::once([0; N]));
        let set_at = sql.len() - self.set.len();
        sql.insert_str(set_at, " AND FALSE");
        sql
    }

    pub fn doing(&self) -> String {
        format!("write {} rows", self.table)
    }
}

/// `users`: credited bytes added, to rows that exist (locked before). An
/// UPDATE joined to the rows, not an upsert: the site's users are never
/// inserted, and the tracker's user needs no privilege on any other column
/// (an upsert needs INSERT and UPDATE on every column it names, passkey
/// and group included). Sums saturate, as in `history`.
pub(super) const USERS: JoinedUpdate<3> = JoinedUpdate {
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
pub(super) const TORRENTS: JoinedUpdate<6> = JoinedUpdate {
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

/// One table's prepared statement around its rows' tuples: `head`,
/// `first`, then `next` for each further row, then `tail`.
pub(super) struct Statement {
    pub table: &'static str,
    pub head: &'static str,
    pub first: &'static str,
    pub next: &'static str,
    /// `?` per row.
    pub placeholders: usize,
    pub tail: &'static str,
    /// The same statement on no rows, with `placeholders` parameters:
    /// what the start tries.
    pub probe: &'static str,
}

impl Statement {
    pub fn doing(&self) -> String {
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
pub(super) const PEERS: Statement = Statement {
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

pub(super) const HISTORY: Statement = Statement {
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
pub(super) const UNREGISTERED: Statement = Statement {
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
    fn reads_on_no_keys_are_probes_on_no_rows() {
        assert_eq!(
            lock_ids("users", &[]),
            "SELECT id FROM users WHERE FALSE ORDER BY id FOR UPDATE"
        );
        assert_eq!(
            lock_ids("torrents", &[3, 4]),
            "SELECT id FROM torrents WHERE id IN (3, 4) ORDER BY id FOR UPDATE"
        );
        assert!(read_history(&[]).contains("FROM history WHERE FALSE ORDER BY"));
        assert!(read_history(&[(1, 2)]).contains("WHERE (user_id, torrent_id) IN ((1, 2))"));
        assert!(read_peers(&[]).contains("FROM peers WHERE FALSE ORDER BY"));
    }
}
