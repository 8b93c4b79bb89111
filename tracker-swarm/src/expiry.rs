//! A peer's expiry in 16 bits, where a full time would take 32: seconds on
//! the store's clock, modulo 2^16, compared with the clock by their wrapping
//! difference. That is right while the two are less than 2^15 s (9 h) apart:
//! a stored expiry is at most the peer time-out ahead of the clock
//! ([`MAX_PEER_TIMEOUT_SECS`]), and a peer past it is cleaned within the
//! clean-up interval ([`MAX_CLEANUP_INTERVAL_SECS`]); both bounds are the
//! config's, and the store holds to the first itself.

/// The longest peer time-out a store keeps: 4 hours.
pub const MAX_PEER_TIMEOUT_SECS: u32 = 4 * 3600;
/// The longest clean-up interval: 1 hour. With the time-out, under 2^15 s.
pub const MAX_CLEANUP_INTERVAL_SECS: u32 = 3600;

const _: () = assert!(MAX_PEER_TIMEOUT_SECS + 2 * MAX_CLEANUP_INTERVAL_SECS < 1 << 15);

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Expiry(u16);

impl Expiry {
    /// The expiry at `secs` on the store's clock.
    pub fn at(secs: u32) -> Expiry {
        Expiry(secs as u16)
    }

    /// Seconds from `now` until it; negative once it has passed.
    pub fn left(self, now: u32) -> i32 {
        i32::from(self.0.wrapping_sub(now as u16) as i16)
    }

    /// Whether a peer with it is live at `now`.
    pub fn is_live(self, now: u32) -> bool {
        self.left(now) > 0
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
    fn the_clock_wrapping_past_16_bits_changes_nothing() {
        let now = 65_530;
        let e = Expiry::at(now + 100);
        assert!(e.is_live(now));
        assert!(e.is_live(now + 99));
        assert!(!e.is_live(now + 100));
        assert_eq!(e.left(now), 100);
        // And the clock's own 32 bits wrapping.
        let e = Expiry::at(u32::MAX.wrapping_add(50));
        assert!(e.is_live(u32::MAX - 10));
        assert_eq!(e.left(u32::MAX - 10), 60);
    }

    proptest! {
        /// Within the span the config allows, the 16 bits say what the full
        /// time says, on either side of the clock.
        #[test]
        fn agrees_with_the_full_time(
            now in any::<u32>(),
            offset in -(2 * MAX_CLEANUP_INTERVAL_SECS as i32)..=MAX_PEER_TIMEOUT_SECS as i32,
        ) {
            let full = now.wrapping_add_signed(offset);
            let e = Expiry::at(full);
            prop_assert_eq!(e.left(now), offset);
            prop_assert_eq!(e.is_live(now), offset > 0);
        }
    }
}
