//! Writing one [`Batch`] into UNIT3D's tables, exactly once.
//!
//! A flush is one transaction, in stages:
//! 1. The sequence number (`sequence.rs`): this tracker's row of
//!    `tracker_flushes` is locked (inserted, at 0, if missing). A stored
//!    sequence at or past the flush's own means this very flush was
//!    committed before and its acknowledgement was lost: roll back,
//!    [`FlushOutcome::AlreadyApplied`].
//! 2. The parent rows (`read.rs`): the users and torrents the batch names,
//!    locked in ascending id order. That also tells which still exist:
//!    rows of users or torrents deleted since the tracker loaded them are
//!    left out (counted as skipped). Locking every parent row first, in
//!    one global order, is what keeps two trackers flushing into the same
//!    tables from deadlocking.
//! 3. The claimed rows (`read.rs`): the batch's peers' rows, locked in key
//!    order, then the history rows of the (user, torrent) pairs settling
//!    needs (a completion, a return under the upload bound, a stop of a
//!    peer nobody recorded).
//! 4. Settling ([`tracker_private::settle()`]): each peer credited from the
//!    point its row records, whichever tracker wrote it, its row written
//!    only if it is newer, and the torrents' counts moved by the rows that
//!    change. So trackers sharing the database credit each byte once.
//! 5. The rows (`write.rs`), each table's sorted by primary key, at most
//!    `max_rows` a statement: `users` and `torrents` as UPDATEs joined to
//!    their values, `peers`, `history` and then `unregistered_info_hashes`
//!    as multi-row `INSERT ... ON DUPLICATE KEY UPDATE` (the statements'
//!    text, and why each is sent as it is, are in `statements.rs`). Column
//!    semantics are UNIT3D-Announce's (the fact sheet's 3.3 to 3.6),
//!    except `history.seedtime`, which the tracker computes itself: it is
//!    added.
//! 6. The sequence number stored, then `COMMIT`.
//!
//! [`check_privileges`] (`privileges.rs`) runs every kind of statement a
//! flush makes, on no rows, in a transaction rolled back: at start, so
//! that a grant missing stops the start naming it instead of failing every
//! flush.
//!
//! Times: the rows carry unix seconds, written as `FROM_UNIXTIME(...)` in a
//! session whose time zone is UTC (set at connect by
//! [`crate::DbConfig::connect`]).

mod privileges;
mod read;
mod sequence;
mod statements;
mod write;

pub use privileges::{check_privileges, UnregisteredTable};
pub use sequence::{check_tracker_id, create_tracker_table, last_sequence};

use crate::error::DbError;
use mysql::{Conn, IsolationLevel, TxOpts};
use tracker_private::{settle, Batch, Credit, CreditRules};

/// The rows per statement when nothing else is configured (what
/// UNIT3D-Announce's example `MAX_RECORDS_PER_BATCH` is).
pub const DEFAULT_MAX_ROWS_PER_STATEMENT: usize = 1000;

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

    if !sequence::claim(&mut tx, tracker_id, sequence)? {
        tx.rollback()
            .map_err(err("ending a flush already applied"))?;
        return Ok(FlushOutcome::AlreadyApplied);
    }
    let parents = read::lock_parents(&mut tx, batch)?;
    let stored = read::claimed_rows(&mut tx, batch, &parents, rules)?;
    let settled = settle(
        batch,
        |key| stored.peer(key),
        |user, torrent| stored.history(user, torrent),
        rules,
    );
    let written = write::write_rows(&mut tx, &settled.rows, batch, &parents, max_rows)?;
    sequence::store(&mut tx, tracker_id, sequence)?;
    tx.commit().map_err(err("committing a flush"))?;

    Ok(FlushOutcome::Applied {
        rows: written.rows,
        skipped: written.skipped,
        superseded: settled.superseded,
        credited: settled.credited,
    })
}
