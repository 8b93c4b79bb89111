//! A vector kept in blocks of `BLOCK` items, for the torrents of a segment.
//!
//! A `Vec` doubles: the segments of a store fill evenly, so they all double
//! at about the same count and hold a third of their capacity unused on
//! average (38 of 64 bytes per torrent at the load generator's standard load).
//! Growing a `Vec` by less, tried, copied a segment on every step and left
//! the old copies as holes in malloc's heap: resident size went up, not down.
//! Here only the first block grows by doubling; a larger vector takes whole
//! blocks, which are never moved, so at most one block is partly used.

/// Items per block. With 64-byte items, 4 KB, a page: little to copy while
/// the first block grows, and a partly used block is at most 4 KB per segment.
const BLOCK: usize = 64;
/// The first block's first capacity.
const FIRST: usize = 4;

pub(super) struct Blocks<T> {
    /// Block `i` holds items `i * BLOCK ..`; every block but the last used one
    /// is full. One empty block may follow, kept so that a segment hovering
    /// around a block's boundary does not free and allocate it over and over.
    blocks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Blocks<T> {
    fn default() -> Self {
        Blocks {
            blocks: Vec::new(),
            len: 0,
        }
    }
}

impl<T> Blocks<T> {
    pub fn len(&self) -> usize {
        self.len
    }

    pub fn get(&self, pos: usize) -> Option<&T> {
        self.blocks.get(pos / BLOCK)?.get(pos % BLOCK)
    }

    pub fn get_mut(&mut self, pos: usize) -> Option<&mut T> {
        self.blocks.get_mut(pos / BLOCK)?.get_mut(pos % BLOCK)
    }

    /// The address of item `pos`, for a prefetch; None past the end.
    pub fn address(&self, pos: usize) -> Option<*const T> {
        self.get(pos).map(|item| item as *const T)
    }

    pub fn push(&mut self, item: T) {
        let b = self.len / BLOCK;
        if b == self.blocks.len() {
            let capacity = if b == 0 { FIRST } else { BLOCK };
            self.blocks.push(Vec::with_capacity(capacity));
        }
        let block = &mut self.blocks[b];
        if block.len() == block.capacity() {
            block.reserve_exact(block.len().min(BLOCK - block.len()));
        }
        block.push(item);
        self.len += 1;
    }

    /// Removes the item at `pos`, moving the last one into its place.
    pub fn swap_remove(&mut self, pos: usize) -> T {
        assert!(pos < self.len, "position {pos} of {}", self.len);
        let last = self.len - 1;
        let last_block = &mut self.blocks[last / BLOCK];
        let mut item = last_block.pop().expect("the last item's block holds it");
        self.len = last;
        if pos != last {
            std::mem::swap(&mut self.blocks[pos / BLOCK][pos % BLOCK], &mut item);
        }
        // Past one spare, an emptied block goes.
        if self.blocks.len() > self.len.div_ceil(BLOCK) + 1 {
            self.blocks.pop();
        }
        item
    }

    pub fn iter(&self) -> impl Iterator<Item = &T> {
        self.blocks.iter().flatten()
    }

    /// Bytes of items held, used or not.
    pub fn bytes(&self) -> usize {
        let items: usize = self.blocks.iter().map(Vec::capacity).sum();
        items * std::mem::size_of::<T>() + self.blocks.capacity() * std::mem::size_of::<Vec<T>>()
    }

    /// Frees the spare block, and the unused part of a lone first block once
    /// at most a quarter of it is used (so that a few inserts do not grow it
    /// straight back).
    pub fn shrink(&mut self) {
        self.blocks.truncate(self.len.div_ceil(BLOCK));
        if let [first] = &mut self.blocks[..] {
            if first.len() <= first.capacity() / 4 {
                first.shrink_to_fit();
            }
        }
        self.blocks.shrink_to_fit();
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn items(blocks: &Blocks<u32>) -> Vec<u32> {
        blocks.iter().copied().collect()
    }

    proptest! {
        /// Pushes, removals and shrinks leave it as a `Vec` given the same.
        #[test]
        fn behaves_as_a_vec(ops in prop::collection::vec((0u8..4, any::<usize>()), 0..2_000)) {
            let mut blocks = Blocks::default();
            let mut model = Vec::new();
            for (i, (op, n)) in ops.into_iter().enumerate() {
                match op {
                    // Pushes twice as often as removals, so blocks fill.
                    0 | 1 => {
                        blocks.push(i as u32);
                        model.push(i as u32);
                    }
                    2 if !model.is_empty() => {
                        let pos = n % model.len();
                        prop_assert_eq!(blocks.swap_remove(pos), model.swap_remove(pos));
                    }
                    _ => blocks.shrink(),
                }
                prop_assert_eq!(blocks.len(), model.len());
                prop_assert!(blocks.blocks.len() <= model.len().div_ceil(BLOCK) + 1);
            }
            prop_assert_eq!(items(&blocks), model.clone());
            for (pos, item) in model.iter().enumerate() {
                prop_assert_eq!(blocks.get(pos), Some(item));
            }
            prop_assert_eq!(blocks.get(model.len()), None);
        }
    }

    #[test]
    fn only_the_first_block_grows_and_blocks_never_move() {
        let mut blocks = Blocks::default();
        for n in 0..BLOCK as u32 {
            blocks.push(n);
        }
        let capacities: Vec<usize> = blocks.blocks.iter().map(Vec::capacity).collect();
        assert_eq!(capacities, [BLOCK]);
        let first = blocks.address(0).unwrap();
        blocks.push(BLOCK as u32);
        assert_eq!(blocks.blocks[1].capacity(), BLOCK);
        for n in 0..3 * BLOCK as u32 {
            blocks.push(n);
        }
        assert_eq!(blocks.address(0), Some(first));
        assert_eq!(blocks.address(4 * BLOCK + 1), None);
    }

    #[test]
    fn one_spare_block_is_kept_until_shrunk() {
        let mut blocks = Blocks::default();
        for n in 0..3 * BLOCK as u32 {
            blocks.push(n);
        }
        while blocks.len() > BLOCK {
            blocks.swap_remove(0);
        }
        assert_eq!(blocks.blocks.len(), 2, "a full block and the spare");
        blocks.swap_remove(0);
        blocks.shrink();
        assert_eq!(blocks.blocks.len(), 1);
        assert_eq!(blocks.blocks[0].capacity(), BLOCK, "used past a quarter");
        while blocks.len() > BLOCK / 4 {
            blocks.swap_remove(0);
        }
        blocks.shrink();
        assert_eq!(blocks.blocks[0].capacity(), BLOCK / 4);
        while blocks.len() > 0 {
            blocks.swap_remove(0);
        }
        blocks.shrink();
        assert_eq!(blocks.bytes(), 0);
    }
}
