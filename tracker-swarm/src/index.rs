//! The address index of a large swarm half: the position of each peer in its
//! `Vec`, found by the peer's address.
//!
//! One hash table doubles all at once, and while it moves every entry the
//! worker answers nothing: 0.35 to 1.5 ms for a swarm of 14k to 57k peers,
//! tens of ms for a million. Here the index is split into sub-tables by the
//! top bits of the hash (extendible hashing): a full sub-table splits in two
//! rather than doubling, so no step moves more than `SPLIT_AT` entries
//! whatever the swarm's size. Each sub-table is `Slots`: 6 bytes per slot,
//! the position, the low 16 bits of the address's hash and its top 8, so
//! neither a growth nor a split to 256 sub-tables (some 400,000 peers) reads
//! the peers themselves; past that a split hashes their addresses again.
//!
//! The first sub-table is held inline and the directory is only read once
//! there are others, so that in a swarm of up to `SPLIT_AT` peers a lookup
//! reads the index's header, then its slot, and both can be prefetched.

use std::hash::Hash;
use std::sync::OnceLock;

use ahash::RandomState;

use crate::slots::Slots;

/// A sub-table holding this many splits before it takes another: 3/4 of 4,096
/// slots, 24 KB.
#[cfg(not(test))]
const SPLIT_AT: usize = 3072;
/// Tests split at 64 slots, so that a few thousand operations go through
/// many splits.
#[cfg(test)]
const SPLIT_AT: usize = 48;
/// Past this depth a sub-table grows instead (only a flood of hashes sharing
/// their top bits gets here): it bounds the directory at 2^16 entries.
const MAX_DEPTH: u32 = 16;
/// Stands in for a position while two peers swap places (no peer has it,
/// and `Slots` keeps it free for this).
const MOVING: usize = crate::slots::POSITIONS;

#[derive(Default)]
#[repr(C)]
struct SubTable {
    slots: Slots,
    /// How many top bits of the hash its slots share.
    depth: u32,
}

/// Positions by address hash. The caller owns the peers: lookups by address
/// take a closure that compares the peer at a position, and updates name the
/// slot by position, which is unique.
///
/// `repr(C)`: what a lookup reads (`depth`, then the first sub-table's
/// slots) comes first (see `Indexed`).
#[repr(C)]
pub(super) struct AddressIndex {
    depth: u32,
    /// Sub-table 0.
    first: SubTable,
    /// Empty while `depth` is 0, else 2^`depth` entries: entry `i` is the
    /// sub-table of the hashes whose top `depth` bits are `i`. Several
    /// entries share a sub-table of less depth.
    directory: Vec<u32>,
    /// Sub-tables 1 and on.
    rest: Vec<SubTable>,
}

impl AddressIndex {
    pub fn new() -> Self {
        AddressIndex {
            depth: 0,
            first: SubTable::default(),
            directory: Vec::new(),
            rest: Vec::new(),
        }
    }

    /// Bytes held outside the index itself (slots, directory, sub-tables).
    pub fn heap_bytes(&self) -> usize {
        self.first.slots.bytes()
            + self.directory.capacity() * std::mem::size_of::<u32>()
            + self.rest.capacity() * std::mem::size_of::<SubTable>()
            + self.rest.iter().map(|t| t.slots.bytes()).sum::<usize>()
    }

    /// The hash that every other method takes for `key`. Keyed once per
    /// process (the torrents' hash is keyed once per store): a key per index
    /// would take half a cache line of every large swarm's header, and guards
    /// no better while the key is secret.
    pub fn hash<K: Hash>(key: &K) -> u32 {
        static HASHER: OnceLock<RandomState> = OnceLock::new();
        (HASHER.get_or_init(RandomState::new).hash_one(key) >> 32) as u32
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.first.slots.len() + self.rest.iter().map(|t| t.slots.len()).sum::<usize>()
    }

    fn table_of(&self, hash: u32) -> usize {
        if self.depth == 0 {
            return 0;
        }
        // The top `depth` bits; shifting a u64 keeps depth 32 defined.
        let entry = (u64::from(hash) << self.depth) >> 32;
        self.directory
            .get(entry as usize)
            .map_or(0, |&t| t as usize)
    }

    fn slots(&self, hash: u32) -> Option<&Slots> {
        match self.table_of(hash) {
            0 => Some(&self.first.slots),
            t => self.rest.get(t - 1).map(|table| &table.slots),
        }
    }

    fn table_mut(&mut self, t: usize) -> Option<&mut SubTable> {
        match t {
            0 => Some(&mut self.first),
            t => self.rest.get_mut(t - 1),
        }
    }

    fn slots_mut(&mut self, hash: u32) -> Option<&mut Slots> {
        let t = self.table_of(hash);
        self.table_mut(t).map(|table| &mut table.slots)
    }

    /// The position among those with this hash for which `is_key` holds.
    pub fn find(&self, hash: u32, is_key: impl FnMut(usize) -> bool) -> Option<usize> {
        self.slots(hash)?.find(hash, is_key)
    }

    /// Starts loading the first slot a lookup of `hash` reads.
    pub fn prefetch(&self, hash: u32) {
        if let Some(slots) = self.slots(hash) {
            slots.prefetch(hash);
        }
    }

    /// The first position with this hash, most likely its key's (see
    /// `Slots::likely`).
    pub fn likely(&self, hash: u32) -> Option<usize> {
        self.slots(hash)?.likely(hash)
    }

    /// Indexes a new peer at `pos` (no peer with its address is indexed).
    /// `hash_at` gives the hash of the peer at a position, the new one
    /// included, for a split.
    pub fn insert(&mut self, hash: u32, pos: usize, hash_at: impl Fn(usize) -> u32) {
        let t = self.table_of(hash);
        if self
            .table_mut(t)
            .is_some_and(|table| table.depth < MAX_DEPTH && table.slots.len() >= SPLIT_AT)
        {
            self.split(t, hash_at);
        }
        if let Some(slots) = self.slots_mut(hash) {
            slots.insert(hash, pos);
        }
    }

    /// Forgets the peer at `pos`, whose address has `hash`.
    pub fn remove(&mut self, hash: u32, pos: usize) {
        if let Some(slots) = self.slots_mut(hash) {
            slots.remove(hash, pos);
        }
    }

    /// Records that the peer at `from`, whose address has `hash`, is now at `to`.
    pub fn relocate(&mut self, hash: u32, from: usize, to: usize) {
        if let Some(slots) = self.slots_mut(hash) {
            slots.relocate(hash, from, to);
        }
    }

    /// Records that the peers at `a` (hash `hash_a`) and `b` (hash `hash_b`)
    /// traded places.
    pub fn swap(&mut self, hash_a: u32, a: usize, hash_b: u32, b: usize) {
        // Through a placeholder: for a moment two slots would hold one position,
        // and an update by position could then pick the wrong one.
        self.relocate(hash_a, a, MOVING);
        self.relocate(hash_b, b, a);
        self.relocate(hash_a, MOVING, b);
    }

    /// Moves the slots of sub-table `t` whose next hash bit is set into a new
    /// sub-table, doubling the directory first if `t` already uses all its bits.
    fn split(&mut self, t: usize, hash_at: impl Fn(usize) -> u32) {
        let Some(table) = self.table_mut(t) else {
            return;
        };
        table.depth += 1;
        let depth = table.depth;
        let bit = 1u32 << (32 - depth);
        let moved = table.slots.split_off(|kept, pos| {
            let hash = if depth <= crate::slots::TOP_BITS {
                kept
            } else {
                hash_at(pos)
            };
            hash & bit != 0
        });
        if depth > self.depth {
            if self.directory.is_empty() {
                self.directory.push(0);
            }
            self.directory = self.directory.iter().flat_map(|&e| [e, e]).collect();
            self.depth += 1;
        }
        let new = self.rest.len() as u32 + 1;
        self.rest.push(SubTable {
            depth,
            slots: moved,
        });
        // The directory entries of `t` are a run of 2^(self.depth - depth + 1);
        // the half whose bit is set now points at the new sub-table.
        let shift = self.depth - depth;
        for (i, entry) in self.directory.iter_mut().enumerate() {
            if *entry as usize == t && (i >> shift) & 1 == 1 {
                *entry = new;
            }
        }
    }

    #[cfg(test)]
    fn sub_tables(&self) -> usize {
        1 + self.rest.len()
    }

    #[cfg(test)]
    fn largest_sub_table(&self) -> usize {
        std::iter::once(&self.first)
            .chain(&self.rest)
            .map(|t| t.slots.len())
            .max()
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// A swarm half in miniature: `keys[pos]` is the address of the peer at `pos`.
    struct Model {
        index: AddressIndex,
        keys: Vec<u64>,
    }

    impl Model {
        fn new() -> Self {
            Model {
                index: AddressIndex::new(),
                keys: Vec::new(),
            }
        }

        fn find(&self, key: u64) -> Option<usize> {
            let hash = AddressIndex::hash(&key);
            self.index
                .find(hash, |pos| self.keys.get(pos) == Some(&key))
        }

        fn push(&mut self, key: u64) {
            let hash = AddressIndex::hash(&key);
            self.keys.push(key);
            let keys = &self.keys;
            let hash_at = |pos: usize| AddressIndex::hash(&keys[pos]);
            self.index.insert(hash, keys.len() - 1, hash_at);
        }

        fn swap_remove(&mut self, pos: usize) {
            let gone = self.keys.swap_remove(pos);
            self.index.remove(AddressIndex::hash(&gone), pos);
            if let Some(&moved) = self.keys.get(pos) {
                let hash = AddressIndex::hash(&moved);
                self.index.relocate(hash, self.keys.len(), pos);
            }
        }

        fn swap(&mut self, a: usize, b: usize) {
            if a == b {
                return;
            }
            let (hash_a, hash_b) = (
                AddressIndex::hash(&self.keys[a]),
                AddressIndex::hash(&self.keys[b]),
            );
            self.keys.swap(a, b);
            self.index.swap(hash_a, a, hash_b, b);
        }

        fn assert_consistent(&self) {
            assert_eq!(self.index.len(), self.keys.len());
            for (pos, &key) in self.keys.iter().enumerate() {
                assert_eq!(self.find(key), Some(pos), "key {key}");
            }
        }
    }

    #[test]
    fn a_lookup_reads_only_the_first_32_bytes() {
        use std::mem::{offset_of, size_of};
        let first_slots = offset_of!(AddressIndex, first) + offset_of!(SubTable, slots);
        assert!(first_slots + size_of::<Slots>() <= 32);
        assert_eq!(offset_of!(AddressIndex, depth), 0);
    }

    /// Splits by the hash bits the slots keep, then past them by hashing the
    /// peers again: either way every peer is found.
    #[test]
    fn splits_keep_every_sub_table_bounded() {
        let mut model = Model::new();
        for key in 0..20_000 {
            model.push(key);
        }
        assert!(model.index.depth > crate::slots::TOP_BITS);
        model.assert_consistent();
        assert!(model.index.sub_tables() >= 20_000 / SPLIT_AT);
        assert!(model.index.largest_sub_table() <= SPLIT_AT);
        assert_eq!(model.find(20_000), None);
    }

    #[test]
    fn removals_and_swaps_across_splits() {
        let mut model = Model::new();
        for key in 0..20_000 {
            model.push(key);
        }
        for i in 0..5_000 {
            model.swap(i, 19_999 - i);
            model.swap_remove(i * 3 % model.keys.len());
        }
        model.assert_consistent();
        for key in 20_000..30_000 {
            model.push(key);
        }
        model.assert_consistent();
    }

    /// Every hash the same: positions are still told apart by their peers, and
    /// the depth cap stops the splitting.
    #[test]
    fn colliding_hashes_stay_correct() {
        let mut index = AddressIndex::new();
        for pos in 0..5_000 {
            index.insert(7, pos, |_| 7);
        }
        for pos in (0..5_000).step_by(2) {
            index.remove(7, pos);
        }
        index.swap(7, 1, 7, 3);
        assert_eq!(index.len(), 2_500);
        assert_eq!(index.find(7, |pos| pos == 4_999), Some(4_999));
        assert_eq!(index.find(7, |pos| pos == 3), Some(3));
        assert_eq!(index.find(7, |pos| pos == 2), None);
    }

    #[derive(Clone, Debug)]
    enum Op {
        Push(u16),
        Remove(usize),
        Swap(usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            3 => any::<u16>().prop_map(Op::Push),
            1 => any::<usize>().prop_map(Op::Remove),
            1 => (any::<usize>(), any::<usize>()).prop_map(|(a, b)| Op::Swap(a, b)),
        ]
    }

    proptest! {
        #[test]
        fn matches_a_vec_under_any_operations(ops in prop::collection::vec(op(), 0..3_000)) {
            let mut model = Model::new();
            for op in ops {
                match op {
                    Op::Push(key) if model.find(u64::from(key)).is_none() => model.push(u64::from(key)),
                    Op::Push(_) => {}
                    Op::Remove(i) if !model.keys.is_empty() => model.swap_remove(i % model.keys.len()),
                    Op::Swap(a, b) if !model.keys.is_empty() => {
                        let n = model.keys.len();
                        model.swap(a % n, b % n);
                    }
                    _ => {}
                }
            }
            model.assert_consistent();
        }
    }
}
