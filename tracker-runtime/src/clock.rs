//! Time as the tracker needs it: whole seconds, cheap to compare and small to
//! store.
//!
//! Read from the kernel's coarse clocks: whole seconds need no better than
//! their tick (1-4 ms), and they cost a load from the vDSO page where the
//! precise ones also read the TSC. Every request reads the clock.

use std::sync::OnceLock;

static START: OnceLock<i64> = OnceLock::new();

/// `clock` now.
fn read(clock: libc::clockid_t) -> libc::timespec {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec to write. The coarse clocks exist on
    // every Linux since 2.6.32, so this cannot fail; were it to, `now` stays 0.
    unsafe { libc::clock_gettime(clock, &mut now) };
    now
}

/// Whole seconds of `clock`.
fn seconds(clock: libc::clockid_t) -> i64 {
    read(clock).tv_sec
}

/// Seconds on a monotonic clock that starts near 0 when the process starts
/// (so it fits a u32 for 136 years). Peer expiry is measured on it.
pub fn now_secs() -> u32 {
    let now = seconds(libc::CLOCK_MONOTONIC_COARSE);
    now.saturating_sub(*START.get_or_init(|| now)) as u32
}

/// Seconds since the Unix epoch: connection-id windows use wall time so that
/// several instances sharing a secret agree on them.
pub fn unix_secs() -> u64 {
    seconds(libc::CLOCK_REALTIME_COARSE).max(0) as u64
}

/// Microseconds since the Unix epoch, from the precise clock (a coarse
/// tick is 1-4 ms, in which two announces would read as one instant):
/// private mode bounds the upload a peer reports over the time since its
/// previous announce, and whole seconds, or ticks, would give every
/// announce their slack. Wall time, as the database's rows keep it: a
/// clock stepped back holds every upload flagged for the length of the
/// step (keep the host's clock slewed, as NTP does, not stepped).
pub fn unix_micros() -> u64 {
    let now = read(libc::CLOCK_REALTIME);
    let secs = u64::try_from(now.tv_sec).unwrap_or(0);
    let micros = u64::try_from(now.tv_nsec).unwrap_or(0) / 1000;
    secs.saturating_mul(1_000_000).saturating_add(micros)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{SystemTime, UNIX_EPOCH};

    #[test]
    fn coarse_clocks_agree_with_the_precise_ones() {
        let precise = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map(|d| d.as_secs())
            .unwrap();
        assert!(unix_secs().abs_diff(precise) <= 1);
        assert!((unix_micros() / 1_000_000).abs_diff(precise) <= 1);
        let start = now_secs();
        assert!(start <= 1);
        assert!(now_secs() >= start);
    }
}
