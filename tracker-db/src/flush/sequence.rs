//! The tracker's own table, `tracker_flushes`: the last sequence number
//! each tracker committed, which makes a flush apply exactly once.

use super::statements::{
    ADD_TRACKER, CREATE_TRACKER_FLUSHES, LAST_SEQUENCE, LOCK_SEQUENCE, STORE_SEQUENCE,
};
use crate::error::{DbError, DbErrorKind};
use mysql::prelude::Queryable;
use mysql::{Conn, Transaction};

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
        .exec_first(LAST_SEQUENCE, (tracker_id,))
        .map_err(|e| DbError::from_mysql("reading the last flush's sequence number", e))?;
    Ok(sequence.unwrap_or(0))
}

/// Locks `tracker_id`'s row (adding it, at 0, if missing) and tells
/// whether flush `sequence` is new: false when the stored number is at or
/// past it, that is when this very flush was committed before and its
/// acknowledgement lost.
pub(super) fn claim(
    tx: &mut Transaction<'_>,
    tracker_id: &str,
    sequence: u64,
) -> Result<bool, DbError> {
    let stored: Option<u64> = tx
        .exec_first(LOCK_SEQUENCE, (tracker_id,))
        .map_err(|e| DbError::from_mysql("locking this tracker's row of tracker_flushes", e))?;
    match stored {
        Some(stored) => Ok(stored < sequence),
        None => {
            tx.exec_drop(ADD_TRACKER, (tracker_id,)).map_err(|e| {
                DbError::from_mysql("adding this tracker's row to tracker_flushes", e)
            })?;
            Ok(true)
        }
    }
}

/// Records flush `sequence` as `tracker_id`'s last, in the flush's
/// transaction.
pub(super) fn store(
    tx: &mut Transaction<'_>,
    tracker_id: &str,
    sequence: u64,
) -> Result<(), DbError> {
    tx.exec_drop(STORE_SEQUENCE, (sequence, tracker_id))
        .map_err(|e| DbError::from_mysql("storing the flush's sequence number", e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tracker_ids_are_bounded() {
        assert!(check_tracker_id("").is_err());
        assert!(check_tracker_id(&"x".repeat(65)).is_err());
        assert!(check_tracker_id(&"é".repeat(64)).is_ok());
    }
}
