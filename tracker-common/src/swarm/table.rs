//! The torrents of one segment: a hash table whose memory a batch of requests
//! can start loading before it is read.
//!
//! Entries (info-hash, hash, value) are kept dense in a `Vec`, found through
//! a power-of-two array of 8-byte slots by linear probing. A slot holds 32 bits
//! of the key's hash and the entry's position, so the slot to look at first is
//! known from the hash alone, and the entry from that slot: each can be
//! prefetched a step ahead of its use (see `SwarmStore::prefetch`). A general
//! map hides both addresses, so each request would wait for them in turn.
//! Removal shifts later slots back (no tombstones) and moves the last entry into
//! the hole, so the table never needs cleaning.

use crate::types::InfoHash;

/// No entry: positions are below `u32::MAX`.
const EMPTY: u32 = u32::MAX;
/// The fewest slots a table that holds anything has.
const MIN_SLOTS: usize = 8;

#[derive(Clone, Copy)]
struct Slot {
    hash: u32,
    pos: u32,
}

const EMPTY_SLOT: Slot = Slot {
    hash: 0,
    pos: EMPTY,
};

struct Entry<V> {
    key: InfoHash,
    /// The slot's hash, for moving the slot when the entry moves, and for
    /// growing without hashing keys again.
    hash: u32,
    value: V,
}

pub(super) struct Table<V> {
    /// Empty or a power of two long, at most 3/4 used.
    slots: Box<[Slot]>,
    entries: Vec<Entry<V>>,
}

impl<V> Default for Table<V> {
    fn default() -> Self {
        Table {
            slots: Box::new([]),
            entries: Vec::new(),
        }
    }
}

impl<V> Table<V> {
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    fn mask(&self) -> usize {
        self.slots.len().wrapping_sub(1)
    }

    fn home(&self, hash: u32) -> usize {
        hash as usize & self.mask()
    }

    /// The index of the first slot for which `hit` holds, looking from
    /// `hash`'s home up to the first empty slot (where a lookup of `hash`
    /// ends).
    fn probe(&self, hash: u32, mut hit: impl FnMut(Slot) -> bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut i = self.home(hash);
        loop {
            let slot = self.slots[i];
            if slot.pos == EMPTY {
                return None;
            }
            if hit(slot) {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// The position of the entry for `key`, whose hash is `hash`.
    pub fn find(&self, hash: u32, key: &InfoHash) -> Option<usize> {
        let i = self.probe(hash, |s| {
            s.hash == hash && self.entries[s.pos as usize].key == *key
        })?;
        Some(self.slots[i].pos as usize)
    }

    /// The index of the slot that holds position `pos`, whose hash is `hash`.
    fn slot_of(&self, hash: u32, pos: usize) -> usize {
        self.probe(hash, |s| s.pos as usize == pos)
            .expect("every entry has a slot")
    }

    pub fn get(&self, hash: u32, key: &InfoHash) -> Option<&V> {
        self.find(hash, key).map(|pos| &self.entries[pos].value)
    }

    pub fn value_mut(&mut self, pos: usize) -> &mut V {
        &mut self.entries[pos].value
    }

    /// Stores `value` for `key`, which the table does not hold.
    pub fn insert(&mut self, hash: u32, key: InfoHash, value: V) -> &mut V {
        debug_assert!(self.find(hash, &key).is_none());
        if (self.len() + 1) * 4 > self.slots.len() * 3 {
            self.resize((self.slots.len() * 2).max(MIN_SLOTS));
        }
        let pos = self.entries.len();
        self.put_slot(Slot {
            hash,
            pos: pos as u32,
        });
        self.entries.push(Entry { key, hash, value });
        &mut self.entries[pos].value
    }

    fn put_slot(&mut self, slot: Slot) {
        let mut i = self.home(slot.hash);
        while self.slots[i].pos != EMPTY {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = slot;
    }

    /// Removes the entry at `pos`, moving the last entry into its place.
    pub fn remove_at(&mut self, pos: usize) -> V {
        let hash = self.entries[pos].hash;
        self.clear_slot(self.slot_of(hash, pos));
        let last = self.entries.len() - 1;
        if pos != last {
            let moved = self.entries[last].hash;
            let i = self.slot_of(moved, last);
            self.slots[i].pos = pos as u32;
        }
        self.entries.swap_remove(pos).value
    }

    /// Empties slot `hole`, moving back the slots after it that probed past
    /// it, so that every lookup still stops at the first empty slot.
    fn clear_slot(&mut self, mut hole: usize) {
        let mask = self.mask();
        let mut i = hole;
        loop {
            i = (i + 1) & mask;
            let slot = self.slots[i];
            if slot.pos == EMPTY {
                break;
            }
            // The slot may fill the hole unless its home lies after the hole,
            // up to where it sits (cyclically).
            let from_home = i.wrapping_sub(self.home(slot.hash)) & mask;
            let from_hole = i.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                self.slots[hole] = slot;
                hole = i;
            }
        }
        self.slots[hole] = EMPTY_SLOT;
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

    /// Gives memory back once at most a sixth of the most the slots may
    /// hold is used, leaving them half that full, so that the next few
    /// inserts do not grow them again.
    pub fn shrink(&mut self) {
        if self.len() > self.slots.len() / 8 {
            return;
        }
        let mut slots = if self.entries.is_empty() {
            0
        } else {
            MIN_SLOTS
        };
        while self.len() * 8 > slots * 3 {
            slots *= 2;
        }
        // A small table may already be as small as it gets.
        if slots < self.slots.len() {
            self.entries.shrink_to_fit();
            self.resize(slots);
        }
    }

    /// Rebuilds the slots, `slots` of them, from the entries' stored hashes.
    fn resize(&mut self, slots: usize) {
        self.slots = vec![EMPTY_SLOT; slots].into_boxed_slice();
        for pos in 0..self.entries.len() {
            let hash = self.entries[pos].hash;
            self.put_slot(Slot {
                hash,
                pos: pos as u32,
            });
        }
    }

    /// Starts loading the first slot a lookup of `hash` reads.
    pub fn prefetch_slot(&self, hash: u32) {
        if let Some(slot) = self.slots.get(self.home(hash)) {
            super::prefetch(slot);
        }
    }

    /// Starts loading the entry of the first slot with hash `hash` (most
    /// likely its key's), reading the slots, which `prefetch_slot` should
    /// have brought in by now.
    pub fn prefetch_entry(&self, hash: u32) {
        if let Some(i) = self.probe(hash, |s| s.hash == hash) {
            let entry = self
                .entries
                .as_ptr()
                .wrapping_add(self.slots[i].pos as usize);
            super::prefetch(entry);
            // An entry may straddle two cache lines.
            super::prefetch(entry.wrapping_add(1).cast::<u8>().wrapping_sub(1));
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
        for n in 0..64u8 {
            let k = key(n);
            assert_eq!(table.get(hash_of(&k, bits), &k), model.get(&n), "key {n}");
        }
        let mut seen: Vec<u8> = table.iter().map(|(k, _)| k.0[0]).collect();
        seen.sort_unstable();
        let mut want: Vec<u8> = model.keys().copied().collect();
        want.sort_unstable();
        assert_eq!(seen, want);
        assert!(table.slots.is_empty() || table.len() * 4 <= table.slots.len() * 3);
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
    fn grows_and_shrinks_back() {
        let mut table = Table::default();
        for n in 0..64 {
            let k = key(n);
            table.insert(hash_of(&k, 32), k, u32::from(n));
        }
        assert_eq!(table.slots.len(), 128);
        table.retain(|k, _| k.0[0] < 4);
        table.shrink();
        assert_eq!((table.len(), table.slots.len()), (4, 16));
        table.retain(|k, _| k.0[0] < 1);
        table.shrink();
        assert_eq!((table.len(), table.slots.len()), (1, 8));
        // A table as small as it gets is left as it is.
        let slots = table.slots.as_ptr();
        table.shrink();
        assert_eq!(table.slots.as_ptr(), slots);
        table.retain(|_, _| false);
        table.shrink();
        assert_eq!(table.slots.len(), 0);
        assert_eq!(table.get(1, &key(1)), None);
        table.prefetch_slot(1);
        table.prefetch_entry(1);
    }
}
