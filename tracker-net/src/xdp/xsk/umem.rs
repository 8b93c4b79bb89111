//! The UMEM: the memory packets are received into and sent from, cut into
//! frames of `frame_size` bytes, and the table that says where each frame
//! is (with the kernel, with the caller, or on the free list kept for
//! answers).

use std::io;

use super::mmap::Mmap;

/// Where a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Owner {
    /// On the fill, RX, TX or completion ring.
    Kernel,
    /// Received or taken, not yet recycled or sent.
    Caller,
    /// On the free list.
    Free,
}

/// The frames, their owners, and the free list.
pub(super) struct Umem {
    map: Mmap,
    frames: u32,
    frame_size: u32,
    owners: Vec<Owner>,
    /// Frames held for answers, up to `reserve`.
    free: Vec<u64>,
    reserve: usize,
}

impl Umem {
    /// `frames` frames of `frame_size` bytes (a power of two) in anonymous
    /// memory of `len` bytes (their product, checked by the caller), all
    /// owned by no one yet; the free list keeps up to `reserve` of them.
    pub(super) fn new(
        frames: u32,
        frame_size: u32,
        len: usize,
        reserve: usize,
    ) -> io::Result<Umem> {
        let map = Mmap::anonymous(len)?;
        Ok(Umem {
            map,
            frames,
            frame_size,
            owners: vec![Owner::Free; usize::try_from(frames).unwrap_or(0)],
            free: Vec::with_capacity(reserve),
            reserve,
        })
    }

    /// The memory's address and length, to register with the socket.
    pub(super) fn region(&self) -> (u64, u64) {
        (self.map.ptr.as_ptr() as u64, self.map.len as u64)
    }

    pub(super) fn frames(&self) -> u32 {
        self.frames
    }

    pub(super) fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// The start of the frame that holds `addr`.
    pub(super) fn base(&self, addr: u64) -> u64 {
        addr & !(u64::from(self.frame_size) - 1)
    }

    /// `addr..addr + len` as (offset, length) in the memory, if it lies
    /// within one frame.
    pub(super) fn span(&self, addr: u64, len: u32) -> Option<(usize, usize)> {
        let base = self.base(addr);
        let end_in_frame = (addr - base).checked_add(u64::from(len))?;
        if end_in_frame > u64::from(self.frame_size)
            || base / u64::from(self.frame_size) >= u64::from(self.frames)
        {
            return None;
        }
        // Within frames * frame_size, which is the mapping's length.
        Some((usize::try_from(addr).ok()?, usize::try_from(len).ok()?))
    }

    /// The bytes `addr..addr + len` (empty unless within one frame).
    pub(super) fn bytes(&self, addr: u64, len: u32) -> &[u8] {
        match self.span(addr, len) {
            // SAFETY: span() checked that the range lies within one frame
            // of the mapping, alive as long as self. The frame is the
            // caller's (the kernel does not write it meanwhile).
            Some((start, len)) => unsafe {
                std::slice::from_raw_parts(self.map.ptr.as_ptr().add(start), len)
            },
            None => &[],
        }
    }

    /// The whole frame that holds `addr` (empty if outside the memory).
    pub(super) fn frame_mut(&mut self, addr: u64) -> &mut [u8] {
        let base = self.base(addr);
        match self.span(base, self.frame_size) {
            // SAFETY: span() checked that the range is one frame of the
            // mapping, alive as long as self; &mut self keeps other slices
            // of it from living meanwhile.
            Some((start, len)) => unsafe {
                std::slice::from_raw_parts_mut(self.map.ptr.as_ptr().add(start), len)
            },
            None => &mut [],
        }
    }

    /// Who holds the frame at `base` (None: no such frame).
    pub(super) fn owner(&self, base: u64) -> Option<Owner> {
        let index = usize::try_from(base / u64::from(self.frame_size)).ok()?;
        self.owners.get(index).copied()
    }

    pub(super) fn set_owner(&mut self, base: u64, owner: Owner) {
        let index = usize::try_from(base / u64::from(self.frame_size)).unwrap_or(usize::MAX);
        if let Some(slot) = self.owners.get_mut(index) {
            *slot = owner;
        }
    }

    /// Puts the frame at `base` on the free list.
    pub(super) fn push_free(&mut self, base: u64) {
        self.set_owner(base, Owner::Free);
        self.free.push(base);
    }

    /// Takes the frame last put on the free list, for the caller.
    pub(super) fn pop_free(&mut self) -> Option<u64> {
        let base = self.free.pop()?;
        debug_assert_eq!(self.owner(base), Some(Owner::Free));
        self.set_owner(base, Owner::Caller);
        Some(base)
    }

    /// Frames on the free list.
    pub(super) fn free_len(&self) -> usize {
        self.free.len()
    }

    /// Whether the free list holds fewer than it keeps for answers.
    pub(super) fn wants_free(&self) -> bool {
        self.free.len() < self.reserve
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_are_found_by_any_address_within_them() {
        let mut umem = Umem::new(4, 2048, 4 * 2048, 2).unwrap();
        assert_eq!(umem.region().1, 4 * 2048);
        assert_eq!(umem.base(2048 + 300), 2048);
        assert_eq!(umem.span(2048 + 300, 100), Some((2348, 100)));
        // Across a frame's end, or past the last frame: nothing.
        assert_eq!(umem.span(2000, 100), None);
        assert_eq!(umem.span(4 * 2048, 1), None);
        assert!(umem.bytes(2000, 100).is_empty());
        assert!(umem.frame_mut(4 * 2048).is_empty());
        umem.frame_mut(3 * 2048 + 5)[7] = 9;
        assert_eq!(umem.bytes(3 * 2048 + 7, 1), &[9]);
        assert_eq!(umem.owner(3 * 2048), Some(Owner::Free));
        assert_eq!(umem.owner(4 * 2048), None);
    }

    #[test]
    fn the_free_list_hands_out_the_last_frame_put_on_it() {
        let mut umem = Umem::new(4, 2048, 4 * 2048, 2).unwrap();
        assert!(umem.wants_free());
        umem.push_free(2048);
        umem.push_free(0);
        assert!(!umem.wants_free());
        assert_eq!(umem.pop_free(), Some(0));
        assert_eq!(umem.owner(0), Some(Owner::Caller));
        assert_eq!((umem.free_len(), umem.owner(2048)), (1, Some(Owner::Free)));
        assert_eq!(umem.pop_free(), Some(2048));
        assert_eq!(umem.pop_free(), None);
    }
}
