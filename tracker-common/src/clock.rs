//! Time as the tracker needs it: whole seconds, cheap to compare and small to
//! store.

use std::sync::OnceLock;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

static START: OnceLock<Instant> = OnceLock::new();

/// Seconds on a monotonic clock that starts near 0 when the process starts
/// (so it fits a u32 for 136 years). Peer expiry is measured on it.
pub fn now_secs() -> u32 {
    START.get_or_init(Instant::now).elapsed().as_secs() as u32
}

/// Seconds since the Unix epoch: connection-id windows use wall time so that
/// several instances sharing a secret agree on them.
pub fn unix_secs() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}
