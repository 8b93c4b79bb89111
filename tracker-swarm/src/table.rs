//! The torrents of one segment: a hash table whose memory a batch of requests
//! can start loading before it is read.
//!
//! Entries (info-hash, hash, value) are kept dense in `Blocks` and found through
//! `Slots` by their hash, so both the slot a lookup reads first and the entry
//! can be prefetched a step ahead of their use (see `SwarmStore::prefetch`).
//! Removal moves the last entry into the hole.

use crate::blocks::Blocks;
use crate::slots::Slots;
use tracker_proto::InfoHash;

/// Aligned to a cache line: with a 40-byte `Torrent` an entry is one line
/// (a 72-byte one spanned two, so each lookup missed twice).
#[repr(align(64))]
struct Entry<V> {
    key: InfoHash,
    /// The slot's hash, for finding the slot when the entry moves or goes.
    hash: u32,
    value: V,
}

pub(super) struct Table<V> {
    slots: Slots,
    entries: Blocks<Entry<V>>,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table {
            slots: Slots::default(),
            entries: Blocks::default(),
        }
    }
}

impl<V> Table<V> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// The value of the entry at `pos` (0..`len`), in no set order: for a
    /// draw at random.
    pub fn value_at(&self, pos: usize) -> Option<&V> {
        self.entries.get(pos).map(|e| &e.value)
    }

    /// Whether it holds as many entries as its slots can name.
    pub fn is_full(&self) -> bool {
        self.entries.len() >= crate::slots::POSITIONS
    }

    /// The position of the entry for `key`, whose hash is `hash`.
    pub fn find(&self, hash: u32, key: &InfoHash) -> Option<usize> {
        let entries = &self.entries;
        self.slots
            .find(hash, |pos| entries.get(pos).is_some_and(|e| e.key == *key))
    }

    pub fn get(&self, hash: u32, key: &InfoHash) -> Option<&V> {
        let pos = self.find(hash, key)?;
        self.entries.get(pos).map(|e| &e.value)
    }

    /// The value of the entry at `pos`, a position `find` gave.
    pub fn value_mut(&mut self, pos: usize) -> &mut V {
        &mut self.entry_mut(pos).value
    }

    fn entry_mut(&mut self, pos: usize) -> &mut Entry<V> {
        let len = self.entries.len();
        let entry = self.entries.get_mut(pos);
        entry.unwrap_or_else(|| panic!("entry {pos} of {len}"))
    }

    /// Stores `value` for `key`, which the table does not hold.
    pub fn insert(&mut self, hash: u32, key: InfoHash, value: V) -> &mut V {
        debug_assert!(self.find(hash, &key).is_none());
        let pos = self.entries.len();
        self.slots.insert(hash, pos);
        self.entries.push(Entry { key, hash, value });
        self.value_mut(pos)
    }

    /// Removes the entry at `pos`, moving the last entry into its place.
    pub fn remove_at(&mut self, pos: usize) -> V {
        let hash = self.entry_mut(pos).hash;
        self.slots.remove(hash, pos);
        let last = self.entries.len() - 1;
        if pos != last {
            let moved = self.entry_mut(last).hash;
            self.slots.relocate(moved, last, pos);
        }
        self.entries.swap_remove(pos).value
    }

    /// Keeps the entries for which `keep` is true.
    pub fn retain(&mut self, mut keep: impl FnMut(&InfoHash, &mut V) -> bool) {
        let mut pos = 0;
        while let Some(entry) = self.entries.get_mut(pos) {
            if keep(&entry.key, &mut entry.value) {
                pos += 1;
            } else {
                // The last entry comes here: look at it next.
                self.remove_at(pos);
            }
        }
    }

    pub fn iter(&self) -> impl Iterator<Item = (&InfoHash, &V)> {
        self.entries.iter().map(|e| (&e.key, &e.value))
    }

    /// Bytes of entries and slots held, used or not (not the values' own
    /// allocations).
    pub fn bytes(&self) -> usize {
        self.entries.bytes() + self.slots.bytes()
    }

    /// Gives memory back once few of the slots or entries are used (see
    /// `Slots::shrink` and `Blocks::shrink`).
    pub fn shrink(&mut self) {
        self.slots.shrink();
        self.entries.shrink();
    }

    /// Starts loading the first slot a lookup of `hash` reads.
    pub fn prefetch_slot(&self, hash: u32) {
        self.slots.prefetch(hash);
    }

    /// Starts loading the entry of the first slot with hash `hash` (most
    /// likely its key's), reading the slots, which `prefetch_slot` should
    /// have brought in by now.
    pub fn prefetch_entry(&self, hash: u32) {
        if let Some(pos) = self.slots.likely(hash) {
            if let Some(entry) = self.entries.address(pos) {
                crate::prefetch::prefetch_all(entry, 1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    fn key(n: u8) -> InfoHash {
        InfoHash([n; 20])
    }

    /// Few hash values, so that keys share slots and runs wrap around.
    fn hash_of(k: &InfoHash, bits: u32) -> u32 {
        u32::from(k.0[0]).wrapping_mul(0x9e37_79b9) >> (32 - bits)
    }

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8),
        Remove(u8),
        Retain(u8),
        Shrink,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            4 => any::<u8>().prop_map(|n| Op::Insert(n % 64)),
            3 => any::<u8>().prop_map(|n| Op::Remove(n % 64)),
            1 => any::<u8>().prop_map(|n| Op::Retain(n % 8 + 1)),
            1 => Just(Op::Shrink),
        ]
    }

    fn assert_same(table: &Table<u32>, model: &HashMap<u8, u32>, bits: u32) {
        assert_eq!(table.len(), model.len());
        assert_eq!(table.slots.len(), table.len());
        for n in 0..64u8 {
            let k = key(n);
            assert_eq!(table.get(hash_of(&k, bits), &k), model.get(&n), "key {n}");
        }
        let mut seen: Vec<u8> = table.iter().map(|(k, _)| k.0[0]).collect();
        seen.sort_unstable();
        let mut want: Vec<u8> = model.keys().copied().collect();
        want.sort_unstable();
        assert_eq!(seen, want);
    }

    proptest! {
        /// Any sequence of changes leaves the table holding what a map would,
        /// whatever the hashes share.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec(op(), 1..300), bits in 1u32..8) {
            let mut table = Table::default();
            let mut model = HashMap::new();
            for (i, op) in ops.into_iter().enumerate() {
                match op {
                    Op::Insert(n) => {
                        let k = key(n);
                        let h = hash_of(&k, bits);
                        match table.find(h, &k) {
                            Some(pos) => *table.value_mut(pos) = i as u32,
                            None => *table.insert(h, k, 0) = i as u32,
                        }
                        model.insert(n, i as u32);
                    }
                    Op::Remove(n) => {
                        let k = key(n);
                        let removed = table.find(hash_of(&k, bits), &k).map(|pos| table.remove_at(pos));
                        prop_assert_eq!(removed, model.remove(&n));
                    }
                    Op::Retain(m) => {
                        table.retain(|k, _| k.0[0] % m != 0);
                        model.retain(|n, _| n % m != 0);
                    }
                    Op::Shrink => table.shrink(),
                }
                assert_same(&table, &model, bits);
            }
        }
    }

    #[test]
    fn a_torrent_entry_is_one_cache_line() {
        assert_eq!(
            std::mem::size_of::<Entry<super::super::torrent::Torrent>>(),
            64
        );
    }

    #[test]
    fn grows_and_shrinks_back() {
        let mut table = Table::default();
        for n in 0..64 {
            let k = key(n);
            table.insert(hash_of(&k, 32), k, u32::from(n));
        }
        assert_eq!(table.slots.capacity(), 128);
        table.retain(|k, _| k.0[0] < 4);
        table.shrink();
        assert_eq!((table.len(), table.slots.capacity()), (4, 16));
        table.retain(|k, _| k.0[0] < 1);
        table.shrink();
        assert_eq!((table.len(), table.slots.capacity()), (1, 8));
        // A table as small as it gets is left as it is.
        let slots = table.entries.address(0);
        table.shrink();
        assert_eq!(table.entries.address(0), slots);
        table.retain(|_, _| false);
        table.shrink();
        assert_eq!(table.slots.capacity(), 0);
        assert_eq!(table.get(1, &key(1)), None);
        table.prefetch_slot(1);
        table.prefetch_entry(1);
    }
}
