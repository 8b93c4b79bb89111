//! Which worker owns a torrent: a keyed, well-mixed function of the
//! info-hash, the same on every worker of a process. HTTP requests, the mesh,
//! the state file's restore and the tests all ask [`Owners::of`].
//!
//! The kernel asks it too: the UDP sockets' steering program
//! (`tracker_udp::steering`) computes the same function in classic BPF
//! ([`Owners::bpf_owner_of_hash_at`]), so that a datagram lands on its
//! owner's socket. Classic BPF has 32-bit loads (big-endian) and 32-bit
//! arithmetic only, so the function is built of those: five rounds of xor,
//! multiply and xor-shift over the hash's big-endian words, a finaliser,
//! and a remainder. The two versions are kept equal by a test that runs the
//! program.
//!
//! The key is secret (random at every start unless `runtime.owner_key` is
//! set): clients choose info-hashes, and one who knew the function could
//! choose a flood of them that one worker owns, to load one core with a
//! fraction of the traffic it would take to load them all.

use tracker_net::cbpf::{
    stmt, Instruction, ABS, ALU, IMM, K, LD, MISC, MOD, MUL, RSH, TAX, W, X, XOR,
};
use tracker_proto::InfoHash;

/// Bytes of a key: a word to start from and one for each of the hash's five
/// words.
pub const KEY_BYTES: usize = 24;

/// The multiplier of each round: odd, with its bits spread (the golden
/// ratio's), so that a multiply carries every bit of a word upward.
const ROUND_MULTIPLIER: u32 = 0x9e37_79b1;
/// murmur3's finaliser's multipliers.
const FINISH_MULTIPLIERS: [u32; 2] = [0x85eb_ca6b, 0xc2b2_ae35];

/// The function from info-hash to worker, for a number of workers and a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owners {
    workers: u32,
    /// The word to start from, and one for each word of the hash.
    key: (u32, [u32; 5]),
}

impl Owners {
    /// The owners among `workers` (1 or more) under `key`.
    pub fn new(workers: usize, key: [u8; KEY_BYTES]) -> Owners {
        let mut words = [0u32; 6];
        for (word, bytes) in words.iter_mut().zip(key.chunks_exact(4)) {
            *word = be_word(bytes);
        }
        let [start, rounds @ ..] = words;
        Owners {
            workers: u32::try_from(workers.max(1)).unwrap_or(u32::MAX),
            key: (start, rounds),
        }
    }

    pub fn workers(&self) -> usize {
        self.workers as usize
    }

    /// The index of the worker (0..workers) that owns `info_hash`.
    pub fn of(&self, info_hash: &InfoHash) -> usize {
        let (mut h, round_keys) = self.key;
        for (bytes, key) in info_hash.0.chunks_exact(4).zip(round_keys) {
            h = round(h ^ be_word(bytes) ^ key);
        }
        (finish(h) % self.workers) as usize
    }

    /// Appends the instructions that leave in A the owner of the info-hash
    /// at `offset` in the packet: [`of`](Self::of) in classic BPF. The
    /// caller must have checked that the packet holds `offset + 20` bytes (a
    /// load past its end would end the program with 0). X is overwritten.
    pub fn bpf_owner_of_hash_at(&self, offset: u32, out: &mut Vec<Instruction>) {
        // A xor-shift of A by `bits`, through X.
        let xor_shift = |bits: u32| {
            [
                stmt(MISC | TAX, 0),
                stmt(ALU | RSH | K, bits),
                stmt(ALU | XOR | X, 0),
            ]
        };
        let (start, round_keys) = self.key;
        out.push(stmt(LD | IMM, start));
        for (word, key) in (0..5u32).zip(round_keys) {
            out.extend([
                stmt(MISC | TAX, 0),
                stmt(LD | W | ABS, offset + 4 * word),
                stmt(ALU | XOR | X, 0),
                stmt(ALU | XOR | K, key),
                stmt(ALU | MUL | K, ROUND_MULTIPLIER),
            ]);
            out.extend(xor_shift(16));
        }
        out.push(stmt(ALU | MUL | K, FINISH_MULTIPLIERS[0]));
        out.extend(xor_shift(13));
        out.push(stmt(ALU | MUL | K, FINISH_MULTIPLIERS[1]));
        out.extend(xor_shift(16));
        out.push(stmt(ALU | MOD | K, self.workers));
    }
}

/// Four bytes as a big-endian word, as classic BPF loads them.
fn be_word(bytes: &[u8]) -> u32 {
    bytes
        .iter()
        .take(4)
        .fold(0, |w, &b| (w << 8) | u32::from(b))
}

/// One round: a multiply that carries each bit upward, then a shift that
/// brings the high bits back down.
fn round(h: u32) -> u32 {
    let h = h.wrapping_mul(ROUND_MULTIPLIER);
    h ^ (h >> 16)
}

/// murmur3's 32-bit finaliser (whose first xor-shift the last round made):
/// every input bit reaches every output bit.
fn finish(mut h: u32) -> u32 {
    h = h.wrapping_mul(FINISH_MULTIPLIERS[0]);
    h ^= h >> 13;
    h = h.wrapping_mul(FINISH_MULTIPLIERS[1]);
    h ^ (h >> 16)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use tracker_net::cbpf::{self, RET, RET_A};

    const KEY: [u8; KEY_BYTES] = *b"a key of twenty-four byt";

    #[test]
    fn one_worker_owns_everything() {
        let owners = Owners::new(1, KEY);
        assert_eq!(owners.of(&InfoHash([0xab; 20])), 0);
        assert_eq!(owners.of(&InfoHash([0; 20])), 0);
    }

    #[test]
    fn spreads_evenly_even_for_hashes_that_differ_in_one_byte() {
        for key in [KEY, [0; KEY_BYTES]] {
            let owners = Owners::new(8, key);
            let mut counts = [0usize; 8];
            for i in 0..80_000u32 {
                let mut h = [0u8; 20];
                h[16..20].copy_from_slice(&i.to_be_bytes());
                counts[owners.of(&InfoHash(h))] += 1;
            }
            for c in counts {
                assert!((9_000..11_000).contains(&c), "uneven: {counts:?}");
            }
        }
    }

    #[test]
    fn another_key_gives_other_owners() {
        let (a, b) = (Owners::new(8, KEY), Owners::new(8, [7; KEY_BYTES]));
        let differ = (0..1000u32)
            .filter(|i| {
                let mut h = [0u8; 20];
                h[..4].copy_from_slice(&i.to_be_bytes());
                a.of(&InfoHash(h)) != b.of(&InfoHash(h))
            })
            .count();
        // 7 in 8 would differ by chance; far fewer would mean the key
        // hardly mattered.
        assert!(differ > 800, "{differ} of 1000 owners changed");
    }

    /// The program of [`Owners::bpf_owner_of_hash_at`], returning A.
    fn program(owners: &Owners, offset: u32) -> Vec<Instruction> {
        let mut program = Vec::new();
        owners.bpf_owner_of_hash_at(offset, &mut program);
        program.push(stmt(RET | RET_A, 0));
        program
    }

    proptest! {
        #[test]
        fn the_bpf_program_computes_the_same_owner(
            key in any::<[u8; KEY_BYTES]>(),
            hash in any::<[u8; 20]>(),
            workers in 1usize..=64,
            offset in 0u32..40,
        ) {
            let owners = Owners::new(workers, key);
            let mut packet = vec![0xee; offset as usize];
            packet.extend_from_slice(&hash);
            let by_bpf = cbpf::run(&program(&owners, offset), &packet);
            prop_assert_eq!(by_bpf as usize, owners.of(&InfoHash(hash)));
        }
    }
}
