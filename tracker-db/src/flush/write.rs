//! Writing a settled flush's rows: each table's sorted by its primary key,
//! rows of users or torrents gone left out, as few statements as the
//! limits allow.

use super::read::Parents;
use super::statements::{JoinedUpdate, Statement, HISTORY, PEERS, TORRENTS, UNREGISTERED, USERS};
use crate::error::DbError;
use mysql::prelude::Queryable;
use mysql::{Transaction, Value};
use std::net::IpAddr;
use tracker_private::{
    Agent, Batch, HistoryRow, PeerKey, PeerRow, Rows, TorrentRow, UnregisteredRow, UserRow,
};
use tracker_proto::InfoHash;

/// A prepared statement's limit on placeholders.
const MAX_PLACEHOLDERS: usize = 65_535;

/// Rows written and rows left out because their user or torrent is gone.
pub(super) struct Written {
    pub rows: usize,
    pub skipped: usize,
}

/// Writes the settled `rows` and the batch's `unregistered_info_hashes`
/// rows, in the order that locks parents before children: users,
/// torrents, peers, history, then the unregistered info-hashes (of users
/// still present). `max_rows` caps the rows of one statement.
pub(super) fn write_rows(
    tx: &mut Transaction<'_>,
    rows: &Rows,
    batch: &Batch,
    parents: &Parents,
    max_rows: usize,
) -> Result<Written, DbError> {
    let rows = SortedRows::of(rows, batch);
    let mut written = Written {
        rows: 0,
        skipped: 0,
    };
    let mut keep = |present: bool| {
        if present {
            written.rows += 1;
        } else {
            written.skipped += 1;
        }
        present
    };
    let users: Vec<_> = (rows.users.iter())
        .filter(|(id, _)| keep(parents.users.contains(id)))
        .collect();
    let torrents: Vec<_> = (rows.torrents.iter())
        .filter(|(id, _)| keep(parents.torrents.contains(id)))
        .collect();
    let peers: Vec<_> = (rows.peers.iter())
        .filter(|(k, _)| keep(parents.present(k.user_id, k.torrent_id)))
        .collect();
    let history: Vec<_> = (rows.history.iter())
        .filter(|((u, t), _)| keep(parents.present(*u, *t)))
        .collect();
    let unregistered: Vec<_> = (rows.unregistered.iter())
        .filter(|((_, u), _)| keep(parents.users.contains(u)))
        .collect();

    write_joined(tx, &USERS, &users, max_rows, |(id, row)| {
        user_values(*id, row)
    })?;
    write_joined(tx, &TORRENTS, &torrents, max_rows, |(id, row)| {
        torrent_values(*id, row)
    })?;
    write_bound(tx, &PEERS, &peers, max_rows, |(key, row), out| {
        peer_values(key, row, out)
    })?;
    write_bound(tx, &HISTORY, &history, max_rows, |(key, row), out| {
        history_values(*key, row, out)
    })?;
    write_bound(
        tx,
        &UNREGISTERED,
        &unregistered,
        max_rows,
        |(key, row), out| unregistered_values(*key, row, out),
    )?;
    Ok(written)
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
    fn of(rows: &'a Rows, batch: &'a Batch) -> Self {
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

/// Writes `rows` with a prepared `statement`, as few statements as the
/// limits allow.
fn write_bound<R>(
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
    fn values_match_the_placeholders() {
        let mut out = Vec::new();
        let key = PeerKey {
            user_id: 1,
            torrent_id: 2,
            peer_id: tracker_proto::PeerId([0; 20]),
        };
        let row = PeerRow {
            ip: IpAddr::from([192, 0, 2, 1]),
            port: 1,
            agent: Agent::new(b"a"),
            uploaded: 0,
            downloaded: 0,
            left: 0,
            active: true,
            seeder: true,
            visible: true,
            connectable: false,
            created_at: 0,
            updated_at: 0,
        };
        peer_values(&key, &row, &mut out);
        assert_eq!(out.len(), PEERS.placeholders);
        out.clear();
        let row = UnregisteredRow {
            created_at: 0,
            updated_at: 0,
        };
        unregistered_values((InfoHash([0; 20]), 1), &row, &mut out);
        assert_eq!(out.len(), UNREGISTERED.placeholders);
    }
}
