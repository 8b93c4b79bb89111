//! The address index of a large swarm half: the position of each peer in its
//! `Vec`, found by the peer's address.
//!
//! One hash map doubles all at once, and while it moves every entry the worker
//! answers nothing: 0.35 to 1.5 ms for a swarm of 14k to 57k peers, tens of ms
//! for a million. Here the index is split into sub-tables by the top bits of
//! the hash (extendible hashing): a full sub-table splits in two rather than
//! doubling, so no step moves more than `SPLIT_AT` entries whatever the
//! swarm's size. A slot is 8 bytes, the position and 32 bits of the address's
//! hash, so neither a split nor a rehash reads the peers themselves.

use std::hash::Hash;

use ahash::RandomState;
use hashbrown::HashTable;

/// A sub-table holding this many splits before it takes another: hashbrown's
/// capacity at 4,096 buckets, 36 KB, moved in some tens of µs. (A sub-table
/// with many removed slots may still double once below this, as hashbrown
/// sees fit: a move of fewer entries.)
#[cfg(not(test))]
const SPLIT_AT: usize = 3584;
/// Tests split at 64 buckets, so that a few thousand operations go through
/// many splits.
#[cfg(test)]
const SPLIT_AT: usize = 56;
/// Past this depth a sub-table grows instead (only a flood of hashes sharing
/// their top bits gets here): it bounds the directory at 2^16 entries.
const MAX_DEPTH: u32 = 16;
/// Stands in for a position while two peers swap places (no peer has it:
/// positions are below `u32::MAX`).
const MOVING: u32 = u32::MAX;

#[derive(Clone, Copy)]
struct Slot {
    /// The top 32 bits of the address's 64-bit hash.
    hash: u32,
    pos: u32,
}

struct SubTable {
    /// How many top bits of the hash its slots share.
    depth: u32,
    slots: HashTable<Slot>,
}

/// Positions by address hash. The caller owns the peers: lookups by address
/// take a closure that compares the peer at a position, and updates name the
/// slot by position, which is unique.
pub(super) struct AddressIndex {
    hasher: RandomState,
    /// 2^`depth` entries: entry `i` is the sub-table of the hashes whose top
    /// `depth` bits are `i`. Several entries share a sub-table of less depth.
    directory: Vec<u32>,
    depth: u32,
    tables: Vec<SubTable>,
}

/// hashbrown picks a bucket with the low bits of a 64-bit hash and tags it with
/// the top 7: spread the stored 32 bits over both (an odd multiplier is a
/// bijection, so no two stored hashes collide that did not already).
fn spread(hash: u32) -> u64 {
    u64::from(hash).wrapping_mul(0x9e37_79b9_7f4a_7c15)
}

fn rehash(slot: &Slot) -> u64 {
    spread(slot.hash)
}

impl AddressIndex {
    pub fn new() -> Self {
        AddressIndex {
            hasher: RandomState::new(),
            directory: vec![0],
            depth: 0,
            tables: vec![SubTable {
                depth: 0,
                slots: HashTable::new(),
            }],
        }
    }

    /// The hash that every other method takes for `key`.
    pub fn hash<K: Hash>(&self, key: &K) -> u32 {
        (self.hasher.hash_one(key) >> 32) as u32
    }

    #[cfg(test)]
    pub fn len(&self) -> usize {
        self.tables.iter().map(|t| t.slots.len()).sum()
    }

    fn table_of(&self, hash: u32) -> usize {
        // The top `depth` bits; shifting a u64 keeps depth 0 and 32 defined.
        let entry = (u64::from(hash) << self.depth) >> 32;
        self.directory
            .get(entry as usize)
            .map_or(0, |&t| t as usize)
    }

    /// The position among those with this hash for which `is_key` holds.
    pub fn find(&self, hash: u32, mut is_key: impl FnMut(usize) -> bool) -> Option<usize> {
        let table = self.tables.get(self.table_of(hash))?;
        let slot = table
            .slots
            .find(spread(hash), |s| s.hash == hash && is_key(s.pos as usize))?;
        Some(slot.pos as usize)
    }

    /// Indexes a new peer at `pos` (no peer with its address is indexed).
    pub fn insert(&mut self, hash: u32, pos: usize) {
        let mut t = self.table_of(hash);
        if self
            .tables
            .get(t)
            .is_some_and(|table| table.depth < MAX_DEPTH && table.slots.len() >= SPLIT_AT)
        {
            self.split(t);
            t = self.table_of(hash);
        }
        if let Some(table) = self.tables.get_mut(t) {
            let slot = Slot {
                hash,
                pos: pos as u32,
            };
            table.slots.insert_unique(spread(hash), slot, rehash);
        }
    }

    /// Forgets the peer at `pos`, whose address has `hash`.
    pub fn remove(&mut self, hash: u32, pos: usize) {
        let t = self.table_of(hash);
        if let Some(table) = self.tables.get_mut(t) {
            let pos = pos as u32;
            if let Ok(slot) = table.slots.find_entry(spread(hash), |s| s.pos == pos) {
                slot.remove();
            }
        }
    }

    /// Records that the peer at `from`, whose address has `hash`, is now at `to`.
    pub fn relocate(&mut self, hash: u32, from: usize, to: usize) {
        self.set_pos(hash, from as u32, to as u32);
    }

    /// Records that the peers at `a` (hash `hash_a`) and `b` (hash `hash_b`)
    /// traded places.
    pub fn swap(&mut self, hash_a: u32, a: usize, hash_b: u32, b: usize) {
        let (a, b) = (a as u32, b as u32);
        // Through a placeholder: for a moment two slots would hold one position,
        // and an update by position could then pick the wrong one.
        self.set_pos(hash_a, a, MOVING);
        self.set_pos(hash_b, b, a);
        self.set_pos(hash_a, MOVING, b);
    }

    fn set_pos(&mut self, hash: u32, from: u32, to: u32) {
        let t = self.table_of(hash);
        if let Some(table) = self.tables.get_mut(t) {
            if let Some(slot) = table.slots.find_mut(spread(hash), |s| s.pos == from) {
                slot.pos = to;
            }
        }
    }

    /// Moves the slots of sub-table `t` whose next hash bit is set into a new
    /// sub-table, doubling the directory first if `t` already uses all its bits.
    fn split(&mut self, t: usize) {
        let Some(depth) = self.tables.get(t).map(|table| table.depth + 1) else {
            return;
        };
        if depth > self.depth {
            self.directory = self.directory.iter().flat_map(|&e| [e, e]).collect();
            self.depth += 1;
        }
        let bit = 1u32 << (32 - depth);
        let new = self.tables.len() as u32;
        let mut moved = HashTable::with_capacity(SPLIT_AT);
        if let Some(table) = self.tables.get_mut(t) {
            table.depth = depth;
            for slot in table.slots.extract_if(|s| s.hash & bit != 0) {
                moved.insert_unique(spread(slot.hash), slot, rehash);
            }
        }
        self.tables.push(SubTable {
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
        self.tables.len()
    }

    #[cfg(test)]
    fn largest_sub_table(&self) -> usize {
        self.tables.iter().map(|t| t.slots.len()).max().unwrap_or(0)
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
            let hash = self.index.hash(&key);
            self.index
                .find(hash, |pos| self.keys.get(pos) == Some(&key))
        }

        fn push(&mut self, key: u64) {
            let hash = self.index.hash(&key);
            self.index.insert(hash, self.keys.len());
            self.keys.push(key);
        }

        fn swap_remove(&mut self, pos: usize) {
            let gone = self.keys.swap_remove(pos);
            self.index.remove(self.index.hash(&gone), pos);
            if let Some(&moved) = self.keys.get(pos) {
                let hash = self.index.hash(&moved);
                self.index.relocate(hash, self.keys.len(), pos);
            }
        }

        fn swap(&mut self, a: usize, b: usize) {
            if a == b {
                return;
            }
            let (hash_a, hash_b) = (
                self.index.hash(&self.keys[a]),
                self.index.hash(&self.keys[b]),
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
    fn splits_keep_every_sub_table_bounded() {
        let mut model = Model::new();
        for key in 0..20_000 {
            model.push(key);
        }
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
            index.insert(7, pos);
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
