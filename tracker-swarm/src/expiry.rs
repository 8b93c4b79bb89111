//! A peer's expiry in 15 bits, where a full time would take 32: seconds on
//! the store's clock, modulo 2^15, compared with the clock by their wrapping
//! difference. That is right while the two are less than 2^14 s (4.5 h)
//! apart: a stored expiry is at most the peer time-out ahead of the clock
//! ([`MAX_PEER_TIMEOUT_SECS`]), and a peer past it is cleaned within two
//! clean-up intervals ([`MAX_CLEANUP_INTERVAL_SECS`]); both bounds are the
//! config's, and the store holds to the first itself.
//!
//! The 16th bit is the peer's mark of a download completed (see
//! `Expiry::completed`), which so costs a peer no byte: an IPv4 peer stays
//! 8 bytes with it.

/// The longest peer time-out a store keeps: 4 hours.
pub const MAX_PEER_TIMEOUT_SECS: u32 = 4 * 3600;
/// The longest clean-up interval: 1 hour.
pub const MAX_CLEANUP_INTERVAL_SECS: u32 = 3600;

const _: () = assert!(MAX_PEER_TIMEOUT_SECS < 1 << 14 && 2 * MAX_CLEANUP_INTERVAL_SECS < 1 << 14);

/// The bits of the time.
const TIME: u16 = (1 << 15) - 1;
/// The bit of the completion mark.
const COMPLETED: u16 = 1 << 15;

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expiry(u16);

impl Expiry {
    /// The expiry at `secs` on the store's clock, unmarked.
    pub fn at(secs: u32) -> Expiry {
        Expiry(secs as u16 & TIME)
    }

    /// Seconds from `now` until it; negative once it has passed.
    pub fn left(self, now: u32) -> i32 {
        // The 15-bit difference, its sign bit moved to the top to extend it.
        let difference = self.0.wrapping_sub(now as u16) << 1;
        i32::from(difference as i16 >> 1)
    }

    /// Whether a peer with it is live at `now`.
    pub fn is_live(self, now: u32) -> bool {
        self.left(now) > 0
    }

    /// Whether its peer has had a download counted (the torrent's
    /// `completed`): a peer counts one at most, however often it goes back
    /// to leeching and completes again.
    pub fn completed(self) -> bool {
        self.0 & COMPLETED != 0
    }

    /// The same time, marked as `completed` says.
    pub fn with_completed(self, completed: bool) -> Expiry {
        Expiry(self.0 & TIME | if completed { COMPLETED } else { 0 })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn live_until_the_second_it_expires() {
        let e = Expiry::at(1000);
        assert!(e.is_live(999));
        assert!(!e.is_live(1000));
        assert!(!e.is_live(1001));
        assert_eq!(e.left(400), 600);
    }

    #[test]
    fn the_clock_wrapping_past_15_or_16_bits_changes_nothing() {
        for now in [32_760, 65_530] {
            let e = Expiry::at(now + 100);
            assert!(e.is_live(now));
            assert!(e.is_live(now + 99));
            assert!(!e.is_live(now + 100));
            assert_eq!(e.left(now), 100);
        }
        // And the clock's own 32 bits wrapping.
        let e = Expiry::at(u32::MAX.wrapping_add(50));
        assert!(e.is_live(u32::MAX - 10));
        assert_eq!(e.left(u32::MAX - 10), 60);
    }

    #[test]
    fn the_completion_mark_changes_no_time() {
        let e = Expiry::at(40_000);
        assert!(!e.completed());
        let marked = e.with_completed(true);
        assert!(marked.completed());
        assert_eq!(marked.left(39_000), 1000);
        assert_eq!(marked.left(41_000), -1000);
        assert_eq!(marked.with_completed(false), e);
    }

    proptest! {
        /// Within the span the config allows, the 15 bits say what the full
        /// time says, on either side of the clock, marked or not.
        #[test]
        fn agrees_with_the_full_time(
            now in any::<u32>(),
            offset in -(2 * MAX_CLEANUP_INTERVAL_SECS as i32)..=MAX_PEER_TIMEOUT_SECS as i32,
        ) {
            let full = now.wrapping_add_signed(offset);
            for e in [Expiry::at(full), Expiry::at(full).with_completed(true)] {
                prop_assert_eq!(e.left(now), offset);
                prop_assert_eq!(e.is_live(now), offset > 0);
            }
        }
    }
}
