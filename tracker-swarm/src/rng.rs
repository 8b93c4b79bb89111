//! A tiny PRNG for peer selection: wyrand. Not cryptographic; it only has to make
//! the peers in an answer vary, fast.

pub(super) struct WyRand(u64);

impl WyRand {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0xa076_1d64_78bd_642f);
        let t = u128::from(self.0) * u128::from(self.0 ^ 0xe703_7ed1_a0b4_28db);
        (t >> 64) as u64 ^ t as u64
    }

    /// A number in `0..n` (`n > 0`), by multiply-shift rather than modulo: no
    /// division, and a bias far below anything observable for swarm sizes.
    pub fn below(&mut self, n: usize) -> usize {
        ((u128::from(self.next_u64()) * n as u128) >> 64) as usize
    }

    /// A fraction of any range, drawn now and scaled to one later (see
    /// `scale`).
    pub fn fraction(&mut self) -> u32 {
        (self.next_u64() >> 32) as u32
    }
}

/// The number in `0..n` (`n > 0`) that `fraction` stands for, by
/// multiply-shift as in `WyRand::below`.
pub(super) fn scale(fraction: u32, n: usize) -> usize {
    ((u64::from(fraction) * n as u64) >> 32) as usize
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn below_stays_in_range_and_covers_it() {
        let mut rng = WyRand::new(7);
        let mut seen = [false; 10];
        for _ in 0..1000 {
            seen[rng.below(10)] = true;
        }
        assert!(seen.iter().all(|&s| s));
        assert_eq!(rng.below(1), 0);
        for n in [1, 2, 7, 1_000_000] {
            for fraction in [0, 1, u32::MAX / 2, u32::MAX] {
                assert!(scale(fraction, n) < n);
            }
        }
        assert_eq!(scale(u32::MAX / 2, 10), 4);
    }

    #[test]
    fn seeds_give_different_streams() {
        let (mut a, mut b) = (WyRand::new(1), WyRand::new(2));
        assert_ne!(a.next_u64(), b.next_u64());
    }
}
