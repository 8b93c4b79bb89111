//! One AF_XDP socket bound to one queue of one interface, with its own UMEM
//! (the frames packets are received into and sent from) and its four rings:
//! fill (frames given to the kernel to receive into), RX (frames received),
//! TX (frames to send) and completion (frames sent, given back).
//!
//! Synchronous: plain non-blocking syscalls. The owner waits for POLLIN on
//! [`Xsk::fd`] and then calls [`Xsk::receive`]; answers go out with
//! [`Xsk::send`] and [`Xsk::flush`].
//!
//! Every frame is in exactly one place at a time: with the kernel (on the
//! fill, RX, TX or completion ring), with the caller (received, or taken
//! with [`Xsk::take_free`]), or on the free list. A table of one byte per
//! frame keeps track: debug builds assert each move, and in release a move
//! of a frame the caller does not hold is refused and counted
//! ([`XskCounters::refused`]) rather than handing the kernel one frame twice.
//!
//! The UMEM and that table live in a memfd, and the rings are mapped from
//! the socket, so that another process handed the socket and the memfd
//! (a successor in a hand-over) takes the socket over where this one left
//! it: [`Xsk::adopt`], on Linux 6.4+ ([`Xsk::check_remap`]).
//!
//! Layouts and constants are those of include/uapi/linux/if_xdp.h, as the
//! libc crate defines them; the asserts in `socket` pin the sizes.
//!
//! By concern: `socket` opens, binds, takes over and reads the socket's
//! options;
//! `umem` holds the frames and the table of their owners; `ring` the four
//! rings; `mmap` the mappings they live in. This file is what the owner
//! calls: receive, send, recycle.

mod mmap;
mod ring;
mod socket;
#[cfg(test)]
mod tests;
mod umem;

use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, OwnedFd};
use std::sync::atomic::{fence, Ordering};

use mmap::annotate;
use ring::{ConsRing, ProdRing};
use umem::{Owner, Umem};

/// Bytes the kernel leaves free at the start of each frame before a
/// received packet (XDP_PACKET_HEADROOM, include/uapi/linux/bpf.h): in
/// aligned mode a received descriptor's address is the frame's start + 256
/// (+ the UMEM headroom, 0 here), so a frame receives at most
/// `frame_size - 256` bytes; longer packets are dropped
/// ([`XdpStatistics::rx_dropped`]). Frames sent may use the whole frame.
pub const XDP_PACKET_HEADROOM: u32 = 256;

/// Where and how to open the socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct XskConfig {
    pub ifindex: u32,
    pub queue: u32,
    /// Frames in the UMEM: a power of two, 64 to 2^24. The fill and
    /// completion rings hold this many, the RX and TX rings half.
    pub frames: u32,
    /// 2048 or 4096 bytes.
    pub frame_size: u32,
    /// XDP_ZEROCOPY (the driver must support it) instead of XDP_COPY.
    pub zero_copy: bool,
}

/// A received frame: its address in the UMEM (the packet's first byte) and
/// its length.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Descriptor {
    pub addr: u64,
    pub len: u32,
}

/// The kernel's counters for the socket (XDP_STATISTICS). The last three
/// came with Linux 5.9; they are `None` where the kernel answered with the
/// older, shorter struct.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XdpStatistics {
    /// Dropped for other reasons: no frame on the fill ring in copy mode,
    /// packet longer than a frame can receive.
    pub rx_dropped: u64,
    pub rx_invalid_descs: u64,
    pub tx_invalid_descs: u64,
    /// Dropped because the RX ring was full.
    pub rx_ring_full: Option<u64>,
    /// Times the kernel found the fill ring empty.
    pub rx_fill_ring_empty_descs: Option<u64>,
    /// Times the kernel found the TX ring empty when woken.
    pub tx_ring_empty_descs: Option<u64>,
}

/// This side's counters.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct XskCounters {
    /// sendto() calls that woke the kernel to transmit.
    pub tx_wakeups: u64,
    /// sendto() answered EAGAIN, EBUSY, ENOBUFS or EINTR: the kernel sent
    /// part of the TX ring, or none; [`Xsk::flush`] again later.
    pub tx_wakeup_retries: u64,
    /// recvfrom() calls that woke the kernel to receive.
    pub rx_wakeups: u64,
    /// recvfrom() failed (EAGAIN and the like, or the interface is down).
    pub rx_wakeup_failures: u64,
    /// Descriptors from the RX or completion ring naming no frame of the
    /// UMEM: skipped (never seen; the kernel validates them).
    pub bad_descs: u64,
    /// [`Xsk::recycle`] or [`Xsk::send`] of a frame the caller did not hold
    /// (a bug of the caller): refused. Debug builds assert instead.
    pub refused: u64,
    /// Frames of a socket taken over ([`Xsk::adopt`]) that its UMEM's
    /// table called free but a ring showed with the kernel: left with the
    /// kernel (the process before stopped between the two; never seen
    /// after a stop that ended its loops).
    pub table_repairs: u64,
}

/// One AF_XDP socket with its UMEM and rings. See the module's comment.
pub struct Xsk {
    // Fields drop in order: the rings are unmapped, then the socket is
    // closed (the kernel unpins the UMEM), then the UMEM is unmapped.
    fill: ProdRing<u64>,
    completion: ConsRing<u64>,
    rx: ConsRing<libc::xdp_desc>,
    tx: ProdRing<libc::xdp_desc>,
    fd: OwnedFd,
    umem: Umem,
    /// The interface and the queue it is bound to.
    ifindex: u32,
    queue: u32,
    /// `send` wrote TX descriptors that `flush` has not published.
    tx_unpublished: bool,
    zero_copy: bool,
    counters: XskCounters,
}

// SAFETY: the raw pointers point into mappings that the Xsk owns and that
// no other thread touches; nothing is tied to the thread that opened it.
unsafe impl Send for Xsk {}

impl Drop for Xsk {
    /// Publishes what [`Xsk::send`] queued and no flush published: a
    /// process the socket was handed to sends it, where it would be lost.
    fn drop(&mut self) {
        if self.tx_unpublished {
            self.tx.submit();
        }
    }
}

impl Xsk {
    /// The socket, to wait on: POLLIN when the RX ring has frames (polling
    /// also drives transmission in copy mode).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// The index of the interface the socket is bound to.
    pub fn ifindex(&self) -> u32 {
        self.ifindex
    }

    /// What it was opened with (zero-copy: as bound), as another process
    /// takes it over with [`Xsk::adopt`].
    pub fn config(&self) -> XskConfig {
        XskConfig {
            ifindex: self.ifindex,
            queue: self.queue,
            frames: self.umem.frames(),
            frame_size: self.umem.frame_size(),
            zero_copy: self.zero_copy,
        }
    }

    /// The memfd of its UMEM (the frames and the table of where each is),
    /// to hand over with the socket.
    pub fn umem_fd(&self) -> BorrowedFd<'_> {
        self.umem.memfd()
    }

    /// Whether the socket was bound in zero-copy mode.
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> u32 {
        self.umem.frame_size()
    }

    /// Frames in the UMEM.
    pub fn frames(&self) -> u32 {
        self.umem.frames()
    }

    /// Frames on the free list now.
    pub fn free_frames(&self) -> usize {
        self.umem.free_len()
    }

    /// This side's counters.
    pub fn counters(&self) -> XskCounters {
        self.counters
    }

    /// Takes up to `max` received frames from the RX ring, appending them
    /// to `out`; returns how many. The frames are the caller's until given
    /// back with [`Xsk::recycle`] or sent with [`Xsk::send`].
    pub fn receive(&mut self, out: &mut Vec<Descriptor>, max: usize) -> usize {
        let want = u32::try_from(max).unwrap_or(u32::MAX);
        let ready = self.rx.available(want);
        let mut taken = 0;
        for _ in 0..ready {
            let Some(desc) = self.rx.pop() else { break };
            if self.umem.span(desc.addr, desc.len).is_none() {
                self.counters.bad_descs += 1;
                continue;
            }
            let base = self.umem.base(desc.addr);
            debug_assert_eq!(
                self.umem.owner(base),
                Some(Owner::Kernel),
                "received frame {base:#x} was not the kernel's"
            );
            self.umem.set_owner(base, Owner::Caller);
            out.push(Descriptor {
                addr: desc.addr,
                len: desc.len,
            });
            taken += 1;
        }
        if ready > 0 {
            self.rx.release();
        }
        taken
    }

    /// The received bytes of `d` (empty if `d` lies outside the UMEM or
    /// across a frame's end).
    pub fn frame(&self, d: Descriptor) -> &[u8] {
        self.umem.bytes(d.addr, d.len)
    }

    /// The whole frame that holds `addr`: `frame_size` bytes from its start
    /// (`addr` rounded down to a frame), to write an answer into (empty if
    /// `addr` lies outside the UMEM). Received packets start
    /// [`XDP_PACKET_HEADROOM`] bytes in; an answer may start at 0.
    pub fn frame_mut(&mut self, addr: u64) -> &mut [u8] {
        self.umem.frame_mut(addr)
    }

    /// Gives back a frame the caller is done with: onto the fill ring, or
    /// the free list if the fill ring is full.
    pub fn recycle(&mut self, addr: u64) {
        let base = self.umem.base(addr);
        if !self.caller_holds(base) {
            return;
        }
        if self.fill.push(base) {
            // The kernel's in the table before it can take it: a process
            // that stops in between leaves a frame lost to a successor,
            // never one it could hand out again.
            self.umem.set_owner(base, Owner::Kernel);
            self.fill.submit();
        } else {
            self.umem.push_free(base);
        }
    }

    /// A free frame to write an answer into, when the answer is not written
    /// over its request; reaps the completion ring first if none is free.
    /// Returns the frame's start address.
    pub fn take_free(&mut self) -> Option<u64> {
        if self.umem.free_len() == 0 {
            self.reap_completions();
        }
        self.umem.pop_free()
    }

    /// Queues `len` bytes at `addr` (anywhere in a frame the caller holds,
    /// not crossing its end) on the TX ring; [`Xsk::flush`] publishes them.
    /// Returns false, the frame staying the caller's, when the TX ring is
    /// full, or when `len` is 0 or the bytes do not fit in the frame.
    pub fn send(&mut self, addr: u64, len: u32) -> bool {
        if len == 0 || self.umem.span(addr, len).is_none() {
            return false;
        }
        let base = self.umem.base(addr);
        if !self.caller_holds(base) {
            return false;
        }
        let desc = libc::xdp_desc {
            addr,
            len,
            options: 0,
        };
        if !self.tx.push(desc) {
            return false;
        }
        self.umem.set_owner(base, Owner::Kernel);
        self.tx_unpublished = true;
        true
    }

    /// Publishes what [`Xsk::send`] queued and, when the TX ring asks for
    /// it (always in copy mode), wakes the kernel to transmit: sendto(fd,
    /// NULL, 0, MSG_DONTWAIT). EAGAIN, EBUSY, ENOBUFS and EINTR are not
    /// errors: the kernel sent part of the ring or none (copy mode sends at
    /// most 32 frames per wakeup), and a later `flush` goes on
    /// ([`XskCounters::tx_wakeup_retries`], [`Xsk::tx_pending`]). Then
    /// reaps the completion ring: sent frames refill the free list up to
    /// half the frames, the rest go to the fill ring.
    pub fn flush(&mut self) -> io::Result<()> {
        if self.tx_unpublished {
            self.tx.submit();
            self.tx_unpublished = false;
            // The producer store must be visible before the kernel's flag is
            // read, or a kernel that just set it and saw the old producer
            // would sleep on frames it was never told of.
            fence(Ordering::SeqCst);
        }
        let mut result = Ok(());
        if self.tx.needs_wakeup() && self.tx.unconsumed() > 0 {
            // SAFETY: sendto with no data and no address on our socket.
            let rc = unsafe {
                libc::sendto(
                    self.fd.as_raw_fd(),
                    std::ptr::null(),
                    0,
                    libc::MSG_DONTWAIT,
                    std::ptr::null(),
                    0,
                )
            };
            if rc >= 0 {
                self.counters.tx_wakeups += 1;
            } else {
                let err = io::Error::last_os_error();
                match err.raw_os_error() {
                    Some(libc::EAGAIN | libc::EBUSY | libc::ENOBUFS | libc::EINTR) => {
                        self.counters.tx_wakeup_retries += 1;
                    }
                    _ => result = Err(annotate(err, "wake the kernel to transmit (sendto)")),
                }
            }
        }
        self.reap_completions();
        result
    }

    /// TX descriptors queued by [`Xsk::send`] that the kernel has not taken
    /// yet (published or not): while this is above 0 after a `flush`,
    /// `flush` again soon.
    pub fn tx_pending(&mut self) -> u32 {
        self.tx.unconsumed()
    }

    /// Whether the fill ring asks for a wakeup (need_wakeup): the driver
    /// ran out of frames to receive into and sleeps until [`Xsk::wake_rx`]
    /// or a poll of the fd.
    pub fn rx_needs_wakeup(&self) -> bool {
        self.fill.needs_wakeup()
    }

    /// Wakes the kernel to receive: recvfrom(fd, NULL, 0, MSG_DONTWAIT).
    /// Meant for when [`Xsk::rx_needs_wakeup`]; failures are counted
    /// ([`XskCounters::rx_wakeup_failures`]), not returned.
    pub fn wake_rx(&mut self) {
        // SAFETY: recvfrom with no buffer and no address on our socket.
        let rc = unsafe {
            libc::recvfrom(
                self.fd.as_raw_fd(),
                std::ptr::null_mut(),
                0,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
                std::ptr::null_mut(),
            )
        };
        if rc >= 0 {
            self.counters.rx_wakeups += 1;
        } else {
            self.counters.rx_wakeup_failures += 1;
        }
    }

    /// Frames sent come back: to the free list while it holds fewer than
    /// half the frames, else to the fill ring.
    fn reap_completions(&mut self) {
        let ready = self.completion.available(self.umem.frames());
        let mut filled = false;
        for _ in 0..ready {
            let Some(addr) = self.completion.pop() else {
                break;
            };
            let base = self.umem.base(addr);
            if self.umem.owner(base).is_none() {
                self.counters.bad_descs += 1;
                continue;
            }
            debug_assert_eq!(
                self.umem.owner(base),
                Some(Owner::Kernel),
                "completed frame {base:#x} was not the kernel's"
            );
            if self.umem.wants_free() || !self.fill.push(base) {
                self.umem.push_free(base);
            } else {
                filled = true;
            }
        }
        if ready > 0 {
            self.completion.release();
        }
        if filled {
            self.fill.submit();
        }
    }

    /// Whether the caller holds the frame at `base`; if not, a bug of the
    /// caller: asserted in debug builds, counted in release.
    fn caller_holds(&mut self, base: u64) -> bool {
        let owner = self.umem.owner(base);
        debug_assert_eq!(
            owner,
            Some(Owner::Caller),
            "frame {base:#x} given back or sent by a caller that does not hold it"
        );
        if owner == Some(Owner::Caller) {
            true
        } else {
            self.counters.refused += 1;
            false
        }
    }
}
