//! The four rings an AF_XDP socket shares with the kernel: single-producer,
//! single-consumer queues of UMEM addresses (fill, completion) or
//! descriptors (RX, TX) in memory mapped from the socket.

use std::io;
use std::mem::{align_of, size_of};
use std::os::fd::BorrowedFd;
use std::ptr::NonNull;
use std::sync::atomic::{AtomicU32, Ordering};

use super::mmap::{annotate, Mmap};

/// A ring's shared indices and entries: `size` entries (a power of two)
/// addressed by free-running u32 indices masked with `size - 1`. The
/// producer and consumer indices are read with Acquire (the other side's)
/// and written with Release (ours), matching the kernel's
/// smp_load_acquire/smp_store_release; `cached_*` are this side's copies.
struct RingCore<T> {
    producer: NonNull<AtomicU32>,
    consumer: NonNull<AtomicU32>,
    flags: NonNull<AtomicU32>,
    descs: NonNull<T>,
    size: u32,
    mask: u32,
    cached_prod: u32,
    cached_cons: u32,
    /// The mapping the pointers point into (None in tests on plain memory).
    _map: Option<Mmap>,
}

impl<T: Copy> RingCore<T> {
    /// # Safety
    /// The index pointers must be valid, aligned AtomicU32s and `descs`
    /// valid for `size` entries, all for as long as the ring lives (`map`,
    /// when given, owns them); `size` must be a power of two.
    unsafe fn new(
        producer: NonNull<AtomicU32>,
        consumer: NonNull<AtomicU32>,
        flags: NonNull<AtomicU32>,
        descs: NonNull<T>,
        size: u32,
        map: Option<Mmap>,
    ) -> Self {
        debug_assert!(size.is_power_of_two());
        // SAFETY: valid per this function's contract.
        let (cached_prod, cached_cons) = unsafe {
            (
                producer.as_ref().load(Ordering::Acquire),
                consumer.as_ref().load(Ordering::Acquire),
            )
        };
        RingCore {
            producer,
            consumer,
            flags,
            descs,
            size,
            mask: size.wrapping_sub(1),
            cached_prod,
            cached_cons,
            _map: map,
        }
    }

    /// Maps one of the socket's rings of `size` entries at `pgoff` and
    /// checks the kernel's offsets against the mapping.
    fn map(
        fd: BorrowedFd<'_>,
        offsets: &libc::xdp_ring_offset,
        size: u32,
        pgoff: u64,
        name: &str,
    ) -> io::Result<Self> {
        let bad = || {
            io::Error::new(
                io::ErrorKind::InvalidData,
                format!("the {name} ring's offsets from the kernel do not fit its mapping"),
            )
        };
        let descs_len = usize::try_from(size)
            .ok()
            .and_then(|size| size.checked_mul(size_of::<T>()))
            .ok_or_else(bad)?;
        let len = usize::try_from(offsets.desc)
            .ok()
            .and_then(|desc| desc.checked_add(descs_len))
            .ok_or_else(bad)?;
        let map = Mmap::ring(fd, len, pgoff)
            .map_err(|err| annotate(err, &format!("map the {name} ring")))?;
        let at = |offset: u64, width: usize, align: usize| -> Option<NonNull<u8>> {
            let offset = usize::try_from(offset).ok()?;
            if offset % align != 0 || offset.checked_add(width)? > len {
                return None;
            }
            // In bounds (checked), so no wrapping actually happens.
            NonNull::new(map.ptr.as_ptr().wrapping_add(offset))
        };
        let index = |offset| at(offset, 4, align_of::<AtomicU32>()).map(NonNull::cast);
        let producer = index(offsets.producer).ok_or_else(bad)?;
        let consumer = index(offsets.consumer).ok_or_else(bad)?;
        let flags = index(offsets.flags).ok_or_else(bad)?;
        let descs = at(offsets.desc, descs_len, align_of::<T>())
            .ok_or_else(bad)?
            .cast::<T>();
        // SAFETY: the pointers were checked to lie, aligned, within the
        // mapping, which has room for `size` entries from `descs` and which
        // the ring owns; `size` is a power of two (validated).
        Ok(unsafe { RingCore::new(producer, consumer, flags, descs, size, Some(map)) })
    }

    fn producer(&self) -> &AtomicU32 {
        // SAFETY: valid for the ring's life (see `new`).
        unsafe { self.producer.as_ref() }
    }

    fn consumer(&self) -> &AtomicU32 {
        // SAFETY: valid for the ring's life (see `new`).
        unsafe { self.consumer.as_ref() }
    }

    fn needs_wakeup(&self) -> bool {
        // SAFETY: valid for the ring's life (see `new`).
        let flags = unsafe { self.flags.as_ref() };
        flags.load(Ordering::Relaxed) & libc::XDP_RING_NEED_WAKEUP != 0
    }

    fn slot(&self, index: u32) -> *mut T {
        // SAFETY: the masked index is below `size`, and `descs` is valid
        // for `size` entries.
        unsafe { self.descs.as_ptr().add((index & self.mask) as usize) }
    }

    /// The entries from index `from` up to `to` (at most `size` of them),
    /// read without taking them.
    fn entries(&self, from: u32, to: u32) -> Vec<T> {
        let count = to.wrapping_sub(from).min(self.size);
        (0..count)
            // SAFETY: a slot of the ring (see `slot`); an entry between
            // the indices is written and not yet reused, and a stale one
            // is still a plain T.
            .map(|i| unsafe { self.slot(from.wrapping_add(i)).read() })
            .collect()
    }
}

/// The side of a ring this process produces into (fill, TX).
pub(super) struct ProdRing<T>(RingCore<T>);

impl<T: Copy> ProdRing<T> {
    /// Maps the ring (see [`RingCore::map`]).
    pub(super) fn map(
        fd: BorrowedFd<'_>,
        offsets: &libc::xdp_ring_offset,
        size: u32,
        pgoff: u64,
        name: &str,
    ) -> io::Result<Self> {
        RingCore::map(fd, offsets, size, pgoff, name).map(ProdRing)
    }

    /// Free slots, at least `want` if there are (the consumer index is
    /// reloaded only when the cached one says fewer).
    fn free(&mut self, want: u32) -> u32 {
        let ring = &mut self.0;
        let free = ring
            .size
            .saturating_sub(ring.cached_prod.wrapping_sub(ring.cached_cons));
        if free >= want {
            return free;
        }
        ring.cached_cons = ring.consumer().load(Ordering::Acquire);
        ring.size
            .saturating_sub(ring.cached_prod.wrapping_sub(ring.cached_cons))
    }

    /// Writes one entry (not yet visible to the consumer: see `submit`);
    /// false if the ring is full.
    pub(super) fn push(&mut self, entry: T) -> bool {
        if self.free(1) == 0 {
            return false;
        }
        let ring = &mut self.0;
        // SAFETY: a slot between the consumer's index and ours + size: the
        // consumer has released it (Acquire load in `free`) and will not
        // read it before our Release store in `submit`.
        unsafe { ring.slot(ring.cached_prod).write(entry) };
        ring.cached_prod = ring.cached_prod.wrapping_add(1);
        true
    }

    /// Makes the entries pushed so far visible to the consumer.
    pub(super) fn submit(&mut self) {
        self.0
            .producer()
            .store(self.0.cached_prod, Ordering::Release);
    }

    /// Entries pushed (submitted or not) that the consumer has not taken.
    pub(super) fn unconsumed(&mut self) -> u32 {
        let ring = &mut self.0;
        ring.cached_cons = ring.consumer().load(Ordering::Acquire);
        ring.cached_prod
            .wrapping_sub(ring.cached_cons)
            .min(ring.size)
    }

    pub(super) fn needs_wakeup(&self) -> bool {
        self.0.needs_wakeup()
    }

    /// The entries submitted that the consumer has not taken yet.
    pub(super) fn pending(&mut self) -> Vec<T> {
        let ring = &mut self.0;
        ring.cached_cons = ring.consumer().load(Ordering::Acquire);
        ring.entries(ring.cached_cons, ring.cached_prod)
    }
}

/// The side of a ring this process consumes from (RX, completion).
pub(super) struct ConsRing<T>(RingCore<T>);

impl<T: Copy> ConsRing<T> {
    /// Maps the ring (see [`RingCore::map`]).
    pub(super) fn map(
        fd: BorrowedFd<'_>,
        offsets: &libc::xdp_ring_offset,
        size: u32,
        pgoff: u64,
        name: &str,
    ) -> io::Result<Self> {
        RingCore::map(fd, offsets, size, pgoff, name).map(ConsRing)
    }

    /// Entries ready, up to `max` (the producer index is reloaded only when
    /// the cached one says fewer than `max`).
    pub(super) fn available(&mut self, max: u32) -> u32 {
        let ring = &mut self.0;
        let mut ready = ring.cached_prod.wrapping_sub(ring.cached_cons);
        if ready < max {
            ring.cached_prod = ring.producer().load(Ordering::Acquire);
            ready = ring.cached_prod.wrapping_sub(ring.cached_cons);
        }
        ready.min(ring.size).min(max)
    }

    /// Reads the next entry (its slot returns to the producer at `release`).
    pub(super) fn pop(&mut self) -> Option<T> {
        if self.available(1) == 0 {
            return None;
        }
        let ring = &mut self.0;
        // SAFETY: a slot the producer published (Acquire load in
        // `available`) and will not rewrite before our Release in `release`.
        let entry = unsafe { ring.slot(ring.cached_cons).read() };
        ring.cached_cons = ring.cached_cons.wrapping_add(1);
        Some(entry)
    }

    /// Gives the slots of the entries popped so far back to the producer.
    pub(super) fn release(&mut self) {
        self.0
            .consumer()
            .store(self.0.cached_cons, Ordering::Release);
    }

    /// The entries ready, read without taking them.
    pub(super) fn peek_all(&mut self) -> Vec<T> {
        let ring = &mut self.0;
        ring.cached_prod = ring.producer().load(Ordering::Acquire);
        ring.entries(ring.cached_cons, ring.cached_prod)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A producer and a consumer over the same plain memory, as this
    /// process and the kernel share a ring.
    struct PlainRing {
        prod: ProdRing<u64>,
        cons: ConsRing<u64>,
        indices: Box<[AtomicU32; 3]>,
        _entries: Vec<u64>,
    }

    fn plain_ring(size: u32, start: u32) -> PlainRing {
        let indices = Box::new([
            AtomicU32::new(start),
            AtomicU32::new(start),
            AtomicU32::new(0),
        ]);
        let mut entries = vec![0u64; size as usize];
        let [p, c, f] = [0, 1, 2].map(|i| NonNull::from(&indices[i]));
        let descs = NonNull::new(entries.as_mut_ptr()).unwrap();
        // SAFETY: the Box and the Vec outlive the rings (same struct, heap
        // memory that does not move).
        let (prod, cons) = unsafe {
            (
                ProdRing(RingCore::new(p, c, f, descs, size, None)),
                ConsRing(RingCore::new(p, c, f, descs, size, None)),
            )
        };
        PlainRing {
            prod,
            cons,
            indices,
            _entries: entries,
        }
    }

    #[test]
    fn ring_indices_wrap_around() {
        let mut ring = plain_ring(8, u32::MAX - 5);
        // Full at 8; nothing visible before submit.
        for v in 0..8 {
            assert!(ring.prod.push(v));
        }
        assert!(!ring.prod.push(99));
        assert_eq!(ring.cons.available(16), 0);
        assert_eq!(ring.prod.unconsumed(), 8);
        ring.prod.submit();
        assert_eq!(ring.indices[0].load(Ordering::Relaxed), 2); // wrapped
        assert_eq!(ring.cons.available(16), 8);
        assert_eq!(ring.cons.available(3), 3);
        for v in 0..3 {
            assert_eq!(ring.cons.pop(), Some(v));
        }
        // Popped but not released: the producer still sees a full ring.
        assert_eq!(ring.prod.free(1), 0);
        ring.cons.release();
        assert_eq!(ring.prod.free(1), 3);
        assert_eq!(ring.prod.unconsumed(), 5);
        for v in 8..11 {
            assert!(ring.prod.push(v));
        }
        assert!(!ring.prod.push(99));
        ring.prod.submit();
        for v in 3..11 {
            assert_eq!(ring.cons.pop(), Some(v));
        }
        assert_eq!(ring.cons.pop(), None);
        ring.cons.release();
        assert_eq!(ring.prod.free(8), 8);
        assert_eq!(ring.prod.unconsumed(), 0);

        // Many rounds of uneven batches, crossing the wrap again and again.
        let mut ring = plain_ring(8, u32::MAX - 100);
        let (mut next_in, mut next_out) = (0u64, 0u64);
        for round in 0..500u64 {
            let pushes = round % 7 + 1;
            for _ in 0..pushes {
                if ring.prod.push(next_in) {
                    next_in += 1;
                }
            }
            ring.prod.submit();
            let pops = (round * 5) % 9;
            let ready = ring.cons.available(pops as u32);
            assert!(u64::from(ready) <= pops);
            for _ in 0..ready {
                assert_eq!(ring.cons.pop(), Some(next_out));
                next_out += 1;
            }
            ring.cons.release();
            assert!(next_in - next_out <= 8);
            assert_eq!(u64::from(ring.prod.unconsumed()), next_in - next_out);
        }
        assert!(next_out > 1000);

        // What each side sees outstanding, without taking it.
        let mut ring = plain_ring(4, u32::MAX - 1);
        for v in [5, 6, 7] {
            assert!(ring.prod.push(v));
        }
        ring.prod.submit();
        assert_eq!(ring.cons.pop(), Some(5));
        assert_eq!(ring.prod.pending(), [5, 6, 7]);
        ring.cons.release();
        assert_eq!(ring.prod.pending(), [6, 7]);
        assert_eq!(ring.cons.peek_all(), [6, 7]);
        assert_eq!(ring.cons.pop(), Some(6));

        assert!(!ring.prod.needs_wakeup());
        ring.indices[2].store(libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        assert!(ring.prod.needs_wakeup());
    }
}
