//! The start's check of the grants: every statement a flush makes, in the
//! form and over the protocol it is sent, tried on no rows.

use super::statements::{
    self, ADD_TRACKER_PROBE, HISTORY, LOCK_SEQUENCE_PROBE, PEERS, STORE_SEQUENCE_PROBE, TORRENTS,
    UNREGISTERED, USERS,
};
use crate::error::DbError;
use mysql::prelude::Queryable;
use mysql::{Conn, Transaction, TxOpts, Value};

/// What [`check_privileges`] found of the optional table.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum UnregisteredTable {
    /// There, and every statement on it allowed.
    Writable,
    /// The database has no such table (as far as the server says: not
    /// merely hidden from this user, which is refused as a missing grant).
    Missing,
}

/// How a statement goes to the server. The protocol matters: MariaDB asks
/// a prepared multi-table UPDATE for more privileges than the same text.
enum Sent {
    Text,
    /// Prepared, with this many parameters (all NULL in the probe).
    Prepared(usize),
}

struct Probe {
    doing: String,
    sql: String,
    sent: Sent,
}

impl Probe {
    fn text(doing: impl Into<String>, sql: String) -> Probe {
        Probe {
            doing: doing.into(),
            sql,
            sent: Sent::Text,
        }
    }

    fn prepared(doing: impl Into<String>, sql: impl Into<String>, params: usize) -> Probe {
        Probe {
            doing: doing.into(),
            sql: sql.into(),
            sent: Sent::Prepared(params),
        }
    }

    fn run(&self, tx: &mut Transaction<'_>) -> Result<(), DbError> {
        match self.sent {
            Sent::Text => tx.query_drop(&self.sql),
            Sent::Prepared(params) => tx.exec_drop(&self.sql, vec![Value::NULL; params]),
        }
        .map_err(|e| DbError::from_mysql(format!("checking that this user may {}", self.doing), e))
    }
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
    let probes = [
        Probe::prepared(
            "lock this tracker's row of tracker_flushes",
            LOCK_SEQUENCE_PROBE,
            1,
        ),
        Probe::prepared(
            "add this tracker's row to tracker_flushes",
            ADD_TRACKER_PROBE,
            1,
        ),
        Probe::prepared("store the flush's sequence number", STORE_SEQUENCE_PROBE, 2),
        Probe::text(
            "lock the users rows a flush changes",
            statements::lock_ids("users", &[]),
        ),
        Probe::text(
            "lock the torrents rows a flush changes",
            statements::lock_ids("torrents", &[]),
        ),
        Probe::text(
            "read the peers a flush credits",
            statements::read_peers(&[]),
        ),
        Probe::text(
            "read the history rows a flush credits",
            statements::read_history(&[]),
        ),
        Probe::prepared(
            "read the active peers at start",
            format!("{} AND FALSE", crate::peers::ACTIVE_PEERS),
            0,
        ),
        Probe::text(USERS.doing(), USERS.probe()),
        Probe::text(TORRENTS.doing(), TORRENTS.probe()),
        Probe::prepared(PEERS.doing(), PEERS.probe, PEERS.placeholders),
        Probe::prepared(HISTORY.doing(), HISTORY.probe, HISTORY.placeholders),
    ];
    for probe in &probes {
        probe.run(&mut tx)?;
    }
    let table = if unregistered {
        let probe = Probe::prepared(
            UNREGISTERED.doing(),
            UNREGISTERED.probe,
            UNREGISTERED.placeholders,
        );
        match probe.run(&mut tx) {
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
