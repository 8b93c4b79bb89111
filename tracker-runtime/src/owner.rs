//! Which worker owns a torrent: a fixed, well-mixed function of the info-hash,
//! the same on every worker and in every process (so the load generator and tests
//! can predict it).

use tracker_proto::InfoHash;

/// The index of the worker (0..`workers`) that owns `info_hash`.
///
/// Info-hashes are SHA-1 output, but clients choose them, so the bytes are mixed
/// (all 20 of them) rather than trusted; the 64-bit result is mapped onto the
/// range with a multiply-shift, which has no modulo bias worth noting.
pub fn owner_of(info_hash: &InfoHash, workers: usize) -> usize {
    debug_assert!(workers > 0);
    let b = &info_hash.0;
    let a = u64::from_le_bytes([b[0], b[1], b[2], b[3], b[4], b[5], b[6], b[7]]);
    let c = u64::from_le_bytes([b[8], b[9], b[10], b[11], b[12], b[13], b[14], b[15]]);
    let d = u32::from_le_bytes([b[16], b[17], b[18], b[19]]) as u64;
    let h = mix64(a ^ mix64(c ^ mix64(d ^ 0x9e37_79b9_7f4a_7c15)));
    ((h as u128 * workers as u128) >> 64) as usize
}

/// The splitmix64 finaliser: every input bit affects every output bit.
fn mix64(mut x: u64) -> u64 {
    x ^= x >> 30;
    x = x.wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x ^= x >> 27;
    x = x.wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_worker_owns_everything() {
        assert_eq!(owner_of(&InfoHash([0xab; 20]), 1), 0);
    }

    #[test]
    fn spreads_evenly_even_for_hashes_that_differ_in_one_byte() {
        let workers = 8;
        let mut counts = [0usize; 8];
        for i in 0..80_000u32 {
            let mut h = [0u8; 20];
            h[16..20].copy_from_slice(&i.to_be_bytes());
            counts[owner_of(&InfoHash(h), workers)] += 1;
        }
        for c in counts {
            assert!((9_000..11_000).contains(&c), "uneven: {counts:?}");
        }
    }
}
