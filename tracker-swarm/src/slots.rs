//! Positions found by hash: an open-addressed, power-of-two array of 8-byte
//! slots, each 32 bits of a key's hash and the key's position in a `Vec` its
//! owner keeps (the torrents of a segment, the peers of a swarm half).
//!
//! Lookups probe linearly from the slot the hash's low bits pick (its home),
//! so the first slot a lookup reads is known from the hash alone and can be
//! prefetched, and the position from that slot (see `SwarmStore::prefetch`);
//! a general map hides both addresses. Keys are compared by the owner, through
//! a closure given the position. Removal shifts later slots back (no
//! tombstones), so the array never needs cleaning.

/// No key: positions are below `u32::MAX`.
const EMPTY: u32 = u32::MAX;
/// The fewest slots of an array that holds anything.
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

#[derive(Default)]
pub(super) struct Slots {
    /// Empty or a power of two long, at most 3/4 used.
    slots: Box<[Slot]>,
    len: u32,
}

impl Slots {
    pub fn len(&self) -> usize {
        self.len as usize
    }

    /// Bytes of slots held, used or not.
    pub fn bytes(&self) -> usize {
        std::mem::size_of_val(&*self.slots)
    }

    /// How many slots it has, used or not.
    #[cfg(test)]
    pub fn capacity(&self) -> usize {
        self.slots.len()
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
            let slot = *self.slots.get(i)?;
            if slot.pos == EMPTY {
                return None;
            }
            if hit(slot) {
                return Some(i);
            }
            i = (i + 1) & self.mask();
        }
    }

    /// The position with hash `hash` for which `is_key` holds.
    pub fn find(&self, hash: u32, mut is_key: impl FnMut(usize) -> bool) -> Option<usize> {
        let i = self.probe(hash, |s| s.hash == hash && is_key(s.pos as usize))?;
        Some(self.slots[i].pos as usize)
    }

    /// The position (or, for a table that keeps a value per hash, the value)
    /// of the first slot with hash `hash`, to change in place.
    pub fn first_mut(&mut self, hash: u32) -> Option<&mut u32> {
        let i = self.probe(hash, |s| s.hash == hash)?;
        Some(&mut self.slots[i].pos)
    }

    /// Empties the first slot with hash `hash`; returns whether there was one.
    pub fn remove_first(&mut self, hash: u32) -> bool {
        let Some(i) = self.probe(hash, |s| s.hash == hash) else {
            return false;
        };
        self.clear(i);
        self.len -= 1;
        true
    }

    /// The first position with hash `hash`: most likely the key's, for a
    /// prefetch to start loading.
    pub fn likely(&self, hash: u32) -> Option<usize> {
        let i = self.probe(hash, |s| s.hash == hash)?;
        Some(self.slots[i].pos as usize)
    }

    /// Starts loading the first slot a lookup of `hash` reads.
    pub fn prefetch(&self, hash: u32) {
        if let Some(slot) = self.slots.get(self.home(hash)) {
            crate::prefetch::prefetch(slot);
        }
    }

    /// Records position `pos` (not recorded yet) with hash `hash`, growing
    /// first if it would be more than 3/4 full.
    pub fn insert(&mut self, hash: u32, pos: usize) {
        // u32::MAX marks an empty slot, and the address index moves peers
        // through u32::MAX - 1.
        debug_assert!(pos < EMPTY as usize - 1);
        if (self.len() + 1) * 4 > self.slots.len() * 3 {
            self.resize((self.slots.len() * 2).max(MIN_SLOTS));
        }
        self.put(Slot {
            hash,
            pos: pos as u32,
        });
        self.len += 1;
    }

    fn put(&mut self, slot: Slot) {
        let mut i = self.home(slot.hash);
        while self.slots[i].pos != EMPTY {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = slot;
    }

    /// Forgets position `pos`, whose hash is `hash`; returns whether it was
    /// recorded.
    pub fn remove(&mut self, hash: u32, pos: usize) -> bool {
        let Some(i) = self.probe(hash, |s| s.pos as usize == pos) else {
            return false;
        };
        self.clear(i);
        self.len -= 1;
        true
    }

    /// Records that the key at `from`, whose hash is `hash`, is now at `to`.
    pub fn relocate(&mut self, hash: u32, from: usize, to: usize) {
        if let Some(i) = self.probe(hash, |s| s.pos as usize == from) {
            self.slots[i].pos = to as u32;
        }
    }

    /// Empties slot `hole`, moving back the slots after it that probed past
    /// it, so that every lookup still stops at the first empty slot.
    fn clear(&mut self, mut hole: usize) {
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

    /// Moves the positions whose hash `take` picks into a new array of as many
    /// slots (so that neither grows soon after).
    pub fn split_off(&mut self, mut take: impl FnMut(u32) -> bool) -> Slots {
        let size = self.slots.len();
        let old = std::mem::replace(&mut self.slots, vec![EMPTY_SLOT; size].into_boxed_slice());
        let mut taken = Slots {
            slots: vec![EMPTY_SLOT; size].into_boxed_slice(),
            len: 0,
        };
        self.len = 0;
        for &slot in old.iter().filter(|s| s.pos != EMPTY) {
            let to = if take(slot.hash) {
                &mut taken
            } else {
                &mut *self
            };
            to.put(slot);
            to.len += 1;
        }
        taken
    }

    /// Gives memory back once at most a sixth of the most the slots may hold
    /// is used, leaving them half that full, so that the next few inserts do
    /// not grow them again; returns whether it did.
    pub fn shrink(&mut self) -> bool {
        if self.len() > self.slots.len() / 8 {
            return false;
        }
        let mut slots = if self.len == 0 { 0 } else { MIN_SLOTS };
        while self.len() * 8 > slots * 3 {
            slots *= 2;
        }
        // A small array may already be as small as it gets.
        if slots >= self.slots.len() {
            return false;
        }
        self.resize(slots);
        true
    }

    /// Moves the recorded positions into `slots` new slots.
    fn resize(&mut self, slots: usize) {
        let old = std::mem::replace(&mut self.slots, vec![EMPTY_SLOT; slots].into_boxed_slice());
        for &slot in old.iter().filter(|s| s.pos != EMPTY) {
            self.put(slot);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;
    use std::collections::HashMap;

    #[derive(Clone, Debug)]
    enum Op {
        Insert(u8),
        Remove(u8),
        Relocate(u8),
        Split(u32),
        Shrink,
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            5 => any::<u8>().prop_map(|n| Op::Insert(n % 64)),
            3 => any::<u8>().prop_map(|n| Op::Remove(n % 64)),
            2 => any::<u8>().prop_map(|n| Op::Relocate(n % 64)),
            1 => any::<u32>().prop_map(Op::Split),
            1 => Just(Op::Shrink),
        ]
    }

    proptest! {
        /// Keys 0..64 at positions in a model map, with a few bits of hash
        /// each (`bits`), so that keys share homes and runs wrap around: any
        /// sequence of changes leaves every key found at its position, and
        /// no other.
        #[test]
        fn behaves_as_a_map(ops in proptest::collection::vec(op(), 1..300), bits in 1u32..8) {
            let hash = |key: u8| u32::from(key).wrapping_mul(0x9e37_79b9) >> (32 - bits);
            let mut slots = Slots::default();
            let mut split_off = Slots::default();
            // Position to key, and the keys whose slots went to `split_off`.
            let mut model: HashMap<usize, u8> = HashMap::new();
            let mut moved: HashMap<usize, u8> = HashMap::new();
            let mut next_pos = 0;
            for op in ops {
                match op {
                    Op::Insert(key) if !model.values().any(|&k| k == key) => {
                        slots.insert(hash(key), next_pos);
                        model.insert(next_pos, key);
                        next_pos += 1;
                    }
                    Op::Insert(_) => {}
                    Op::Remove(key) => {
                        let pos = model.iter().find(|(_, &k)| k == key).map(|(&p, _)| p);
                        let removed = pos.map(|p| slots.remove(hash(key), p));
                        prop_assert!(removed.unwrap_or(true));
                        if let Some(p) = pos {
                            model.remove(&p);
                        }
                        prop_assert!(!slots.remove(hash(key), usize::MAX - 1));
                    }
                    Op::Relocate(key) => {
                        if let Some((&p, _)) = model.iter().find(|(_, &k)| k == key) {
                            slots.relocate(hash(key), p, next_pos);
                            model.remove(&p);
                            model.insert(next_pos, key);
                            next_pos += 1;
                        }
                    }
                    Op::Split(mask) => {
                        let taken = slots.split_off(|h| h & mask & 1 != 0 || h & mask & 2 != 0);
                        let (go, stay): (HashMap<_, _>, HashMap<_, _>) = model
                            .drain()
                            .partition(|&(_, k)| { let h = hash(k); h & mask & 1 != 0 || h & mask & 2 != 0 });
                        model = stay;
                        moved = go;
                        split_off = taken;
                    }
                    Op::Shrink => {
                        slots.shrink();
                    }
                }
                prop_assert_eq!(slots.len(), model.len());
                prop_assert!(slots.capacity() == 0 || slots.len() * 4 <= slots.capacity() * 3);
                for key in 0..64u8 {
                    let want = model.iter().find(|(_, &k)| k == key).map(|(&p, _)| p);
                    prop_assert_eq!(slots.find(hash(key), |p| model.get(&p) == Some(&key)), want);
                }
                for (&p, &key) in &moved {
                    prop_assert_eq!(split_off.find(hash(key), |q| q == p), Some(p));
                }
                prop_assert_eq!(split_off.len(), moved.len());
            }
        }
    }

    #[test]
    fn grows_and_shrinks_back() {
        let mut slots = Slots::default();
        for pos in 0..64 {
            slots.insert((pos as u32).wrapping_mul(0x9e37_79b9), pos);
        }
        assert_eq!(slots.capacity(), 128);
        for pos in 4..64 {
            assert!(slots.remove((pos as u32).wrapping_mul(0x9e37_79b9), pos));
        }
        assert!(slots.shrink());
        assert_eq!((slots.len(), slots.capacity()), (4, 16));
        // An array as small as it gets is left as it is.
        for pos in 1..4 {
            slots.remove((pos as u32).wrapping_mul(0x9e37_79b9), pos);
        }
        assert!(slots.shrink());
        assert_eq!(slots.capacity(), 8);
        assert!(!slots.shrink());
        slots.remove(0, 0);
        assert!(slots.shrink());
        assert_eq!(slots.capacity(), 0);
        assert_eq!(slots.find(1, |_| true), None);
        assert_eq!(slots.likely(1), None);
        slots.prefetch(1);
    }
}
