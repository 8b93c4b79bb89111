//! Positions found by hash: an open-addressed, power-of-two array of 6-byte
//! slots, each a key's position (24 bits) in a `Vec` its owner keeps (the
//! torrents of a segment, the peers of a swarm half) and 24 bits of the key's
//! hash: the low 16 (its tag), which pick the home slot and tell most other
//! keys apart without reading them (one in 65,536 is compared in vain), and
//! the top 8, which the address index splits its sub-tables by. 8-byte slots,
//! with all 32 bits, made the large swarms' indexes a third of the store at
//! the standard load.
//!
//! Lookups probe linearly from the slot the hash's low bits pick (its home),
//! so the first slot a lookup reads is known from the hash alone and can be
//! prefetched, and the position from that slot (see `SwarmStore::prefetch`);
//! a general map hides both addresses. Keys are compared by the owner, through
//! a closure given the position. Removal shifts later slots back (no
//! tombstones), so the array never needs cleaning.

/// Bits of a position.
const POS_BITS: u32 = 24;
const POS_MASK: u32 = (1 << POS_BITS) - 1;
/// No key.
const EMPTY: u32 = POS_MASK;
/// Positions are below this; it is kept for the address index's peer on the
/// move (see `index::MOVING`). The store's limits keep below it: a swarm half
/// holds at most `MAX_PEERS_PER_TORRENT` peers, and a segment takes no more.
pub(super) const POSITIONS: usize = EMPTY as usize - 1;
/// Top bits of the hash a slot keeps, beside its tag.
pub(super) const TOP_BITS: u32 = u32::BITS - POS_BITS;
/// The fewest slots of an array that holds anything.
const MIN_SLOTS: usize = 8;
/// Bits of a tag.
const TAG_BITS: u32 = u16::BITS;

/// Packed to 6 bytes: its fields are copied out, never borrowed.
#[derive(Clone, Copy)]
#[repr(C, packed(2))]
struct Slot {
    tag: u16,
    /// The position in the low `POS_BITS`, the hash's top bits above.
    word: u32,
}

const EMPTY_SLOT: Slot = Slot {
    tag: 0,
    word: EMPTY,
};

impl Slot {
    fn new(hash: u32, pos: usize) -> Slot {
        Slot {
            tag: tag(hash),
            word: (hash & !POS_MASK) | pos as u32,
        }
    }

    fn pos(self) -> u32 {
        self.word & POS_MASK
    }

    fn set_pos(&mut self, pos: usize) {
        self.word = (self.word & !POS_MASK) | pos as u32;
    }

    fn is_empty(self) -> bool {
        self.pos() == EMPTY
    }

    /// The bits of the hash it keeps (the top `TOP_BITS` and the tag's), the
    /// others 0.
    fn hash_bits(self) -> u32 {
        (self.word & !POS_MASK) | u32::from(self.tag)
    }
}

/// The 16 bits of `hash` that pick a home and tell keys apart: its low bits,
/// as the address index picks its sub-tables by the top ones.
fn tag(hash: u32) -> u16 {
    hash as u16
}

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

    /// Where a lookup of a key with tag `tag` starts. Past 2^16 slots (a
    /// segment of 50,000 torrents) the homes are spread over the whole array.
    fn home(&self, tag: u16) -> usize {
        let bits = self.slots.len().trailing_zeros();
        match bits.checked_sub(TAG_BITS) {
            Some(spread) if spread > 0 => usize::from(tag) << spread,
            _ => usize::from(tag) & self.mask(),
        }
    }

    /// The index of the first slot for which `hit` holds, looking from
    /// `hash`'s home up to the first empty slot (where a lookup of `hash`
    /// ends).
    fn probe(&self, hash: u32, mut hit: impl FnMut(Slot) -> bool) -> Option<usize> {
        if self.slots.is_empty() {
            return None;
        }
        let mut i = self.home(tag(hash));
        loop {
            let slot = *self.slots.get(i)?;
            if slot.is_empty() {
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
        let tag = tag(hash);
        let i = self.probe(hash, |s| s.tag == tag && is_key(s.pos() as usize))?;
        Some(self.slots[i].pos() as usize)
    }

    /// The first position with hash `hash`'s tag: most likely the key's, for
    /// a prefetch to start loading.
    pub fn likely(&self, hash: u32) -> Option<usize> {
        let tag = tag(hash);
        let i = self.probe(hash, |s| s.tag == tag)?;
        Some(self.slots[i].pos() as usize)
    }

    /// Starts loading the first slot a lookup of `hash` reads.
    pub fn prefetch(&self, hash: u32) {
        if let Some(slot) = self.slots.get(self.home(tag(hash))) {
            crate::prefetch::prefetch_all(slot, 1);
        }
    }

    /// Records position `pos` (not recorded yet) with hash `hash`, growing
    /// first if it would be more than 3/4 full.
    pub fn insert(&mut self, hash: u32, pos: usize) {
        assert!(pos < POSITIONS, "position {pos} past the slots' reach");
        if (self.len() + 1) * 4 > self.slots.len() * 3 {
            self.resize((self.slots.len() * 2).max(MIN_SLOTS));
        }
        self.put(Slot::new(hash, pos));
        self.len += 1;
    }

    fn put(&mut self, slot: Slot) {
        let mut i = self.home(slot.tag);
        while !self.slots[i].is_empty() {
            i = (i + 1) & self.mask();
        }
        self.slots[i] = slot;
    }

    /// Forgets position `pos`, whose hash is `hash`; returns whether it was
    /// recorded.
    pub fn remove(&mut self, hash: u32, pos: usize) -> bool {
        let Some(i) = self.probe(hash, |s| s.pos() as usize == pos) else {
            return false;
        };
        self.clear(i);
        self.len -= 1;
        true
    }

    /// Records that the key at `from`, whose hash is `hash`, is now at `to`.
    pub fn relocate(&mut self, hash: u32, from: usize, to: usize) {
        if let Some(i) = self.probe(hash, |s| s.pos() as usize == from) {
            self.slots[i].set_pos(to);
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
            if slot.is_empty() {
                break;
            }
            // The slot may fill the hole unless its home lies after the hole,
            // up to where it sits (cyclically).
            let from_home = i.wrapping_sub(self.home(slot.tag)) & mask;
            let from_hole = i.wrapping_sub(hole) & mask;
            if from_home >= from_hole {
                self.slots[hole] = slot;
                hole = i;
            }
        }
        self.slots[hole] = EMPTY_SLOT;
    }

    /// Moves the positions that `take` picks, given the bits of their hash
    /// kept (see `Slot::hash_bits`) and the position, into a new array of as
    /// many slots (so that neither grows soon after).
    pub fn split_off(&mut self, mut take: impl FnMut(u32, usize) -> bool) -> Slots {
        let size = self.slots.len();
        let old = std::mem::replace(&mut self.slots, vec![EMPTY_SLOT; size].into_boxed_slice());
        let mut taken = Slots {
            slots: vec![EMPTY_SLOT; size].into_boxed_slice(),
            len: 0,
        };
        self.len = 0;
        for &slot in old.iter().filter(|s| !s.is_empty()) {
            let to = if take(slot.hash_bits(), slot.pos() as usize) {
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
        for &slot in old.iter().filter(|s| !s.is_empty()) {
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
                        let pick = |k: u8| { let h = hash(k); h & mask & 1 != 0 || h & mask & 2 != 0 };
                        let taken = slots.split_off(|_, p| pick(model[&p]));
                        let (go, stay): (HashMap<_, _>, HashMap<_, _>) =
                            model.drain().partition(|&(_, k)| pick(k));
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

    /// Past 2^16 slots the tags' homes are spread over the array: every
    /// position is still found, and removals keep the rest found.
    #[test]
    fn an_array_larger_than_the_tags_reach_finds_every_position() {
        let hash = |pos: usize| (pos as u32).wrapping_mul(0x9e37_79b9);
        let mut slots = Slots::default();
        let count = 100_000;
        for pos in 0..count {
            slots.insert(hash(pos), pos);
        }
        assert!(slots.capacity() > 1 << TAG_BITS);
        for pos in (0..count).step_by(3) {
            assert!(slots.remove(hash(pos), pos));
        }
        for pos in 0..count {
            let want = (pos % 3 != 0).then_some(pos);
            assert_eq!(slots.find(hash(pos), |p| p == pos), want, "{pos}");
        }
    }

    #[test]
    fn a_slot_is_six_bytes() {
        assert_eq!(std::mem::size_of::<Slot>(), 6);
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
