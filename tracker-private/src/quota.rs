//! Each user's `unregistered_info_hashes` rows noted per hour across every
//! worker: with the database up, a passkey announcing made-up info-hashes
//! would otherwise add rows to the site's table without end (the per-flush
//! bound only caps a flush). One atomic word per user (the hour and its
//! count), in a [`UserTable`].

use crate::site::UserId;
use crate::user_table::UserTable;
use std::sync::atomic::{AtomicU64, Ordering};

pub struct UnregisteredQuota {
    per_hour: u32,
    /// Per user: the hour (Unix seconds / 3600) in the high half, the rows
    /// noted in it in the low half.
    counts: UserTable<AtomicU64>,
}

impl std::fmt::Debug for UnregisteredQuota {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "UnregisteredQuota({} an hour, {} chunks)",
            self.per_hour,
            self.counts.chunks_used()
        )
    }
}

impl UnregisteredQuota {
    /// At most `per_hour` rows per user and hour; 0: no limit.
    pub fn new(per_hour: u32) -> UnregisteredQuota {
        UnregisteredQuota {
            per_hour,
            counts: UserTable::default(),
        }
    }

    /// Whether `user` may have one more row noted at `now` (Unix seconds);
    /// if so, it counts.
    pub fn take(&self, user: UserId, now: u64) -> bool {
        if self.per_hour == 0 {
            return true;
        }
        let hour = (now / 3600) & u64::from(u32::MAX);
        let Some(word) = self.counts.slot(user) else {
            return false;
        };
        word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |w| {
            let count = if w >> 32 == hour { w & 0xffff_ffff } else { 0 };
            (count < u64::from(self.per_hour)).then_some(hour << 32 | (count + 1))
        })
        .is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_user_gets_its_rows_an_hour() {
        let quota = UnregisteredQuota::new(2);
        assert!(quota.take(1, 7200) && quota.take(1, 7201));
        assert!(!quota.take(1, 7202));
        assert!(quota.take(2, 7202), "another user has its own");
        assert!(quota.take(1, 10_800), "a new hour");
        let unlimited = UnregisteredQuota::new(0);
        assert!((0..1000).all(|_| unlimited.take(1, 5)));
    }
}
