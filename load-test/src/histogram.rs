//! A log-bucket latency histogram in the manner of HdrHistogram: values below
//! 2^SUB_BITS are exact; above, every power of two is split into
//! 2^(SUB_BITS-1) buckets, so a bucket is at most 1/64 of its value wide
//! (under 1.6% error). Fixed size, recording is a few instructions and never
//! allocates; histograms of several workers merge by adding buckets.

const SUB_BITS: u32 = 7;
const HALF: usize = 1 << (SUB_BITS - 1);
/// Buckets for every u64.
const BUCKETS: usize = (64 - SUB_BITS as usize + 1) * HALF + HALF;

#[derive(Clone)]
pub struct Histogram {
    counts: Box<[u64; BUCKETS]>,
    total: u64,
    sum: u128,
    min: u64,
    max: u64,
}

impl Default for Histogram {
    fn default() -> Self {
        Histogram {
            counts: Box::new([0; BUCKETS]),
            total: 0,
            sum: 0,
            min: u64::MAX,
            max: 0,
        }
    }
}

impl std::fmt::Debug for Histogram {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Histogram")
            .field("count", &self.total)
            .field("min", &self.min())
            .field("max", &self.max)
            .finish()
    }
}

fn index(value: u64) -> usize {
    if value < (1 << SUB_BITS) {
        return value as usize;
    }
    let msb = 63 - value.leading_zeros();
    let shift = msb - SUB_BITS + 1;
    let top = (value >> shift) as usize; // in HALF..2*HALF
    shift as usize * HALF + top
}

/// The highest value that lands in bucket `i`.
fn upper_bound(i: usize) -> u64 {
    if i < (1 << SUB_BITS) {
        return i as u64;
    }
    let shift = (i / HALF - 1) as u32;
    let top = (i % HALF + HALF) as u64;
    // The last bucket's bound would be 2^64: saturate.
    ((top + 1) << shift).wrapping_sub(1).max(top << shift)
}

impl Histogram {
    pub fn record(&mut self, value: u64) {
        self.counts[index(value)] += 1;
        self.total += 1;
        self.sum += u128::from(value);
        self.min = self.min.min(value);
        self.max = self.max.max(value);
    }

    pub fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(other.counts.iter()) {
            *a += b;
        }
        self.total += other.total;
        self.sum += other.sum;
        self.min = self.min.min(other.min);
        self.max = self.max.max(other.max);
    }

    pub fn count(&self) -> u64 {
        self.total
    }

    pub fn max(&self) -> u64 {
        self.max
    }

    pub fn min(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min
        }
    }

    pub fn mean(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum as f64 / self.total as f64
        }
    }

    /// The value at quantile `q` (0..=1): the highest value of the bucket that
    /// holds the `ceil(q * count)`th smallest sample, capped by the maximum seen.
    /// 0 when empty.
    pub fn quantile(&self, q: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let rank = ((q.clamp(0.0, 1.0) * self.total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        for (i, &c) in self.counts.iter().enumerate() {
            seen += c;
            if seen >= rank {
                return upper_bound(i).min(self.max).max(self.min);
            }
        }
        self.max
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_contiguous_and_tight() {
        let mut previous = 0;
        for value in (0..100_000u64).chain([u64::MAX / 3, u64::MAX - 1, u64::MAX]) {
            let i = index(value);
            assert!(i >= previous, "{value}");
            assert!(i < BUCKETS);
            assert!(upper_bound(i) >= value, "{value}");
            if value >= 128 {
                // At most 1/64 of the value wide.
                assert!(upper_bound(i) - value <= value / 64, "{value}");
            }
            previous = i;
        }
        // Every bucket's bound maps back into it.
        for i in 0..BUCKETS - 1 {
            assert_eq!(index(upper_bound(i)), i, "bucket {i}");
            assert_eq!(index(upper_bound(i) + 1), i + 1, "bucket {i}");
        }
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = Histogram::default();
        for v in 1..=100 {
            h.record(v);
        }
        assert_eq!(h.count(), 100);
        assert_eq!(h.quantile(0.5), 50);
        assert_eq!(h.quantile(0.9), 90);
        assert_eq!(h.quantile(0.99), 99);
        assert_eq!(h.quantile(1.0), 100);
        assert_eq!(h.min(), 1);
        assert_eq!(h.max(), 100);
        assert_eq!(h.mean(), 50.5);
    }

    #[test]
    fn quantiles_of_a_wide_range_are_within_the_error() {
        let mut h = Histogram::default();
        // 1 us .. 1 s in ns, uniform in steps.
        let values: Vec<u64> = (1..=100_000u64).map(|i| i * 10_000).collect();
        for &v in &values {
            h.record(v);
        }
        for q in [0.5, 0.9, 0.99, 0.999] {
            let exact = values[(q * values.len() as f64).ceil() as usize - 1];
            let got = h.quantile(q);
            assert!(got >= exact, "q={q}: {got} < {exact}");
            assert!(got - exact <= exact / 64, "q={q}: {got} vs {exact}");
        }
        assert_eq!(h.quantile(1.0), 1_000_000_000);
    }

    #[test]
    fn merging_equals_recording_together() {
        let (mut a, mut b, mut both) = (
            Histogram::default(),
            Histogram::default(),
            Histogram::default(),
        );
        for v in 0..1000u64 {
            let v = v * v * 37;
            if v % 3 == 0 {
                a.record(v);
            } else {
                b.record(v);
            }
            both.record(v);
        }
        a.merge(&b);
        assert_eq!(a.count(), both.count());
        for q in [0.0, 0.1, 0.5, 0.9, 0.999, 1.0] {
            assert_eq!(a.quantile(q), both.quantile(q));
        }
        assert_eq!(a.min(), both.min());
        assert_eq!(a.max(), both.max());
        assert_eq!(a.mean(), both.mean());
    }

    #[test]
    fn empty_is_zero() {
        let h = Histogram::default();
        assert_eq!(h.quantile(0.5), 0);
        assert_eq!(h.min(), 0);
        assert_eq!(h.mean(), 0.0);
    }
}
