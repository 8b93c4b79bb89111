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
//! Layouts and constants are those of include/uapi/linux/if_xdp.h, as the
//! libc crate defines them; the asserts below pin the sizes.

use std::io;
use std::mem::{align_of, size_of, zeroed};
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};
use std::ptr::NonNull;
use std::sync::atomic::{fence, AtomicU32, Ordering};

/// Bytes the kernel leaves free at the start of each frame before a
/// received packet (XDP_PACKET_HEADROOM, include/uapi/linux/bpf.h): in
/// aligned mode a received descriptor's address is the frame's start + 256
/// (+ the UMEM headroom, 0 here), so a frame receives at most
/// `frame_size - 256` bytes; longer packets are dropped
/// ([`XdpStatistics::rx_dropped`]). Frames sent may use the whole frame.
pub const XDP_PACKET_HEADROOM: u32 = 256;

const _: () = assert!(size_of::<libc::sockaddr_xdp>() == 16);
const _: () = assert!(size_of::<libc::xdp_desc>() == 16);
const _: () = assert!(size_of::<libc::xdp_ring_offset>() == 32);
const _: () = assert!(size_of::<libc::xdp_mmap_offsets>() == 128);
// addr, len, chunk_size, headroom, flags and (since 6.8, in what was tail
// padding) tx_metadata_len, left 0.
const _: () = assert!(size_of::<libc::xdp_umem_reg>() == 32);
const _: () = assert!(size_of::<libc::xdp_statistics>() == 48);
const _: () = assert!(size_of::<libc::xdp_statistics_v1>() == 24);

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
}

/// Where a frame is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Owner {
    /// On the fill, RX, TX or completion ring.
    Kernel,
    /// Received or taken, not yet recycled or sent.
    Caller,
    /// On the free list.
    Free,
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
    umem: Mmap,
    frames: u32,
    frame_size: u32,
    /// Frames held for answers, up to `reserve`.
    free: Vec<u64>,
    reserve: usize,
    owners: Vec<Owner>,
    /// `send` wrote TX descriptors that `flush` has not published.
    tx_unpublished: bool,
    zero_copy: bool,
    counters: XskCounters,
}

// SAFETY: the raw pointers point into mappings that the Xsk owns and that
// no other thread touches; nothing is tied to the thread that opened it.
unsafe impl Send for Xsk {}

impl Xsk {
    /// Opens an AF_XDP socket on `config.queue` of `config.ifindex`:
    /// socket(AF_XDP), UMEM (anonymous mmap, populated) registered with
    /// XDP_UMEM_REG (headroom 0, aligned frames), fill and completion rings
    /// of `frames` entries, RX and TX rings of `frames / 2`, all mapped,
    /// then bound with XDP_USE_NEED_WAKEUP and XDP_COPY or XDP_ZEROCOPY.
    /// Half the frames go on the fill ring at once; the other half are the
    /// free list, for answers ([`Xsk::take_free`]).
    ///
    /// Each error names the step that failed. Receiving needs an XDP
    /// program on the interface that redirects to this socket through an
    /// XSKMAP; sending does not.
    pub fn open(config: &XskConfig) -> io::Result<Xsk> {
        let umem_len = validate(config)?;
        let frames = config.frames;
        let half = frames / 2;

        // SAFETY: plain socket(2).
        let raw = unsafe {
            libc::socket(
                libc::AF_XDP,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK,
                0,
            )
        };
        if raw < 0 {
            return Err(os_error("socket(AF_XDP)"));
        }
        // SAFETY: a fresh fd that nothing else owns.
        let fd = unsafe { OwnedFd::from_raw_fd(raw) };

        let umem = Mmap::anonymous(umem_len).map_err(|err| {
            annotate(
                err,
                &format!(
                    "UMEM of {frames} frames of {} bytes: mmap",
                    config.frame_size
                ),
            )
        })?;

        // SAFETY: all-zero is a valid xdp_umem_reg (flags 0, no metadata).
        let mut reg: libc::xdp_umem_reg = unsafe { zeroed() };
        reg.addr = umem.ptr.as_ptr() as u64;
        reg.len = umem_len as u64;
        reg.chunk_size = config.frame_size;
        reg.headroom = 0;
        setsockopt(fd.as_fd(), libc::XDP_UMEM_REG, &reg).map_err(|err| {
            let hint = if err.raw_os_error() == Some(libc::ENOBUFS) {
                " (over RLIMIT_MEMLOCK without CAP_IPC_LOCK?)"
            } else {
                ""
            };
            annotate(err, &format!("register the UMEM (XDP_UMEM_REG){hint}"))
        })?;

        for (option, entries, name) in [
            (libc::XDP_UMEM_FILL_RING, frames, "fill"),
            (libc::XDP_UMEM_COMPLETION_RING, frames, "completion"),
            (libc::XDP_RX_RING, half, "RX"),
            (libc::XDP_TX_RING, half, "TX"),
        ] {
            let entries = libc::c_int::try_from(entries).unwrap_or(libc::c_int::MAX);
            setsockopt(fd.as_fd(), option, &entries)
                .map_err(|err| annotate(err, &format!("size the {name} ring ({entries})")))?;
        }

        let offsets = mmap_offsets(fd.as_fd())?;
        let fill = ProdRing(RingCore::map(
            fd.as_fd(),
            &offsets.fr,
            frames,
            libc::XDP_UMEM_PGOFF_FILL_RING,
            "fill",
        )?);
        let completion = ConsRing(RingCore::map(
            fd.as_fd(),
            &offsets.cr,
            frames,
            libc::XDP_UMEM_PGOFF_COMPLETION_RING,
            "completion",
        )?);
        let rx = ConsRing(RingCore::map(
            fd.as_fd(),
            &offsets.rx,
            half,
            libc::XDP_PGOFF_RX_RING as u64,
            "RX",
        )?);
        let tx = ProdRing(RingCore::map(
            fd.as_fd(),
            &offsets.tx,
            half,
            libc::XDP_PGOFF_TX_RING as u64,
            "TX",
        )?);

        let reserve = usize::try_from(half).unwrap_or(usize::MAX);
        let mut xsk = Xsk {
            fill,
            completion,
            rx,
            tx,
            fd,
            umem,
            frames,
            frame_size: config.frame_size,
            free: Vec::with_capacity(reserve),
            reserve,
            owners: vec![Owner::Free; usize::try_from(frames).unwrap_or(0)],
            tx_unpublished: false,
            zero_copy: config.zero_copy,
            counters: XskCounters::default(),
        };
        // The first half on the fill ring (before bind, so that a
        // zero-copy driver finds frames when it sets the queue up), the
        // second half free.
        for index in 0..frames {
            let addr = u64::from(index) * u64::from(config.frame_size);
            if index < half && xsk.fill.push(addr) {
                xsk.set_owner(addr, Owner::Kernel);
            } else {
                xsk.set_owner(addr, Owner::Free);
                xsk.free.push(addr);
            }
        }
        xsk.free.reverse(); // take_free hands out the lowest first
        xsk.fill.submit();

        xsk.bind(config)?;
        xsk.zero_copy = xsk.options_zero_copy().unwrap_or(config.zero_copy);
        Ok(xsk)
    }

    fn bind(&self, config: &XskConfig) -> io::Result<()> {
        // SAFETY: all-zero is a valid sockaddr_xdp.
        let mut sxdp: libc::sockaddr_xdp = unsafe { zeroed() };
        sxdp.sxdp_family = libc::AF_XDP as u16;
        sxdp.sxdp_flags = libc::XDP_USE_NEED_WAKEUP
            | if config.zero_copy {
                libc::XDP_ZEROCOPY
            } else {
                libc::XDP_COPY
            };
        sxdp.sxdp_ifindex = config.ifindex;
        sxdp.sxdp_queue_id = config.queue;
        // SAFETY: a sockaddr_xdp of the size given, alive for the call.
        let rc = unsafe {
            libc::bind(
                self.fd.as_raw_fd(),
                &sxdp as *const libc::sockaddr_xdp as *const libc::sockaddr,
                size_of::<libc::sockaddr_xdp>() as libc::socklen_t,
            )
        };
        if rc == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        let (queue, ifindex) = (config.queue, config.ifindex);
        let mode = if config.zero_copy {
            "zero-copy"
        } else {
            "copy mode"
        };
        let hint = match err.raw_os_error() {
            Some(libc::ENODEV) => format!(": no interface has index {ifindex}"),
            Some(libc::EOPNOTSUPP) if config.zero_copy => {
                ": the driver has no zero-copy mode for AF_XDP; open in copy mode".to_string()
            }
            Some(libc::EINVAL) if config.zero_copy => format!(
                ": no queue {queue} on the interface, or the driver refused zero-copy \
                 mode (it may have none; copy mode works everywhere)"
            ),
            Some(libc::EINVAL) => format!(": no queue {queue} on the interface?"),
            Some(libc::EBUSY) => format!(": another AF_XDP socket holds queue {queue}"),
            _ => String::new(),
        };
        Err(io::Error::new(
            err.kind(),
            format!("bind to queue {queue} of ifindex {ifindex} ({mode}): {err}{hint}"),
        ))
    }

    /// XDP_OPTIONS (Linux 5.3+): whether the kernel bound in zero-copy mode.
    fn options_zero_copy(&self) -> Option<bool> {
        // SAFETY: all-zero is a valid xdp_options.
        let mut options: libc::xdp_options = unsafe { zeroed() };
        let len = getsockopt(self.fd.as_fd(), libc::XDP_OPTIONS, &mut options).ok()?;
        (len >= size_of::<libc::xdp_options>())
            .then_some(options.flags & libc::XDP_OPTIONS_ZEROCOPY != 0)
    }

    /// The socket, to wait on: POLLIN when the RX ring has frames (polling
    /// also drives transmission in copy mode).
    pub fn fd(&self) -> BorrowedFd<'_> {
        self.fd.as_fd()
    }

    /// Whether the socket was bound in zero-copy mode.
    pub fn is_zero_copy(&self) -> bool {
        self.zero_copy
    }

    /// Bytes per frame.
    pub fn frame_size(&self) -> u32 {
        self.frame_size
    }

    /// Frames in the UMEM.
    pub fn frames(&self) -> u32 {
        self.frames
    }

    /// Frames on the free list now.
    pub fn free_frames(&self) -> usize {
        self.free.len()
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
            if self.span(desc.addr, desc.len).is_none() {
                self.counters.bad_descs += 1;
                continue;
            }
            let base = self.frame_base(desc.addr);
            debug_assert_eq!(
                self.owner(base),
                Some(Owner::Kernel),
                "received frame {base:#x} was not the kernel's"
            );
            self.set_owner(base, Owner::Caller);
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
        match self.span(d.addr, d.len) {
            // SAFETY: span() checked that the range lies within one frame
            // of the UMEM mapping, alive as long as self. The frame is the
            // caller's (the kernel does not write it meanwhile).
            Some((start, len)) => unsafe {
                std::slice::from_raw_parts(self.umem.ptr.as_ptr().add(start), len)
            },
            None => &[],
        }
    }

    /// The whole frame that holds `addr`: `frame_size` bytes from its start
    /// (`addr` rounded down to a frame), to write an answer into (empty if
    /// `addr` lies outside the UMEM). Received packets start
    /// [`XDP_PACKET_HEADROOM`] bytes in; an answer may start at 0.
    pub fn frame_mut(&mut self, addr: u64) -> &mut [u8] {
        let base = self.frame_base(addr);
        match self.span(base, self.frame_size) {
            // SAFETY: span() checked that the range is one frame of the
            // UMEM mapping, alive as long as self; &mut self keeps other
            // slices of it from living meanwhile.
            Some((start, len)) => unsafe {
                std::slice::from_raw_parts_mut(self.umem.ptr.as_ptr().add(start), len)
            },
            None => &mut [],
        }
    }

    /// Gives back a frame the caller is done with: onto the fill ring, or
    /// the free list if the fill ring is full.
    pub fn recycle(&mut self, addr: u64) {
        let base = self.frame_base(addr);
        if !self.caller_holds(base) {
            return;
        }
        if self.fill.push(base) {
            self.fill.submit();
            self.set_owner(base, Owner::Kernel);
        } else {
            self.set_owner(base, Owner::Free);
            self.free.push(base);
        }
    }

    /// A free frame to write an answer into, when the answer is not written
    /// over its request; reaps the completion ring first if none is free.
    /// Returns the frame's start address.
    pub fn take_free(&mut self) -> Option<u64> {
        if self.free.is_empty() {
            self.reap_completions();
        }
        let addr = self.free.pop()?;
        debug_assert_eq!(self.owner(addr), Some(Owner::Free));
        self.set_owner(addr, Owner::Caller);
        Some(addr)
    }

    /// Queues `len` bytes at `addr` (anywhere in a frame the caller holds,
    /// not crossing its end) on the TX ring; [`Xsk::flush`] publishes them.
    /// Returns false, the frame staying the caller's, when the TX ring is
    /// full, or when `len` is 0 or the bytes do not fit in the frame.
    pub fn send(&mut self, addr: u64, len: u32) -> bool {
        if len == 0 || self.span(addr, len).is_none() {
            return false;
        }
        let base = self.frame_base(addr);
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
        self.set_owner(base, Owner::Kernel);
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

    /// The kernel's counters for the socket (XDP_STATISTICS).
    pub fn statistics(&self) -> io::Result<XdpStatistics> {
        // SAFETY: all-zero is a valid xdp_statistics.
        let mut stats: libc::xdp_statistics = unsafe { zeroed() };
        let len = getsockopt(self.fd.as_fd(), libc::XDP_STATISTICS, &mut stats)
            .map_err(|err| annotate(err, "XDP_STATISTICS"))?;
        let extra = len >= size_of::<libc::xdp_statistics>();
        Ok(XdpStatistics {
            rx_dropped: stats.rx_dropped,
            rx_invalid_descs: stats.rx_invalid_descs,
            tx_invalid_descs: stats.tx_invalid_descs,
            rx_ring_full: extra.then_some(stats.rx_ring_full),
            rx_fill_ring_empty_descs: extra.then_some(stats.rx_fill_ring_empty_descs),
            tx_ring_empty_descs: extra.then_some(stats.tx_ring_empty_descs),
        })
    }

    /// Frames sent come back: to the free list while it holds fewer than
    /// half the frames, else to the fill ring.
    fn reap_completions(&mut self) {
        let ready = self.completion.available(self.frames);
        let mut filled = false;
        for _ in 0..ready {
            let Some(addr) = self.completion.pop() else {
                break;
            };
            let base = self.frame_base(addr);
            if self.owner(base).is_none() {
                self.counters.bad_descs += 1;
                continue;
            }
            debug_assert_eq!(
                self.owner(base),
                Some(Owner::Kernel),
                "completed frame {base:#x} was not the kernel's"
            );
            if self.free.len() < self.reserve || !self.fill.push(base) {
                self.set_owner(base, Owner::Free);
                self.free.push(base);
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

    fn frame_base(&self, addr: u64) -> u64 {
        addr & !(u64::from(self.frame_size) - 1)
    }

    /// `addr..addr + len` as (offset, length) in the UMEM, if it lies
    /// within one frame.
    fn span(&self, addr: u64, len: u32) -> Option<(usize, usize)> {
        let base = self.frame_base(addr);
        let end_in_frame = (addr - base).checked_add(u64::from(len))?;
        if end_in_frame > u64::from(self.frame_size)
            || base / u64::from(self.frame_size) >= u64::from(self.frames)
        {
            return None;
        }
        // Within frames * frame_size, which is the UMEM mapping's length.
        Some((usize::try_from(addr).ok()?, usize::try_from(len).ok()?))
    }

    fn owner(&self, base: u64) -> Option<Owner> {
        let index = usize::try_from(base / u64::from(self.frame_size)).ok()?;
        self.owners.get(index).copied()
    }

    fn set_owner(&mut self, base: u64, owner: Owner) {
        let index = usize::try_from(base / u64::from(self.frame_size)).unwrap_or(usize::MAX);
        if let Some(slot) = self.owners.get_mut(index) {
            *slot = owner;
        }
    }

    /// Whether the caller holds the frame at `base`; if not, a bug of the
    /// caller: asserted in debug builds, counted in release.
    fn caller_holds(&mut self, base: u64) -> bool {
        let owner = self.owner(base);
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

/// Checks the configuration; returns the UMEM's length.
fn validate(config: &XskConfig) -> io::Result<usize> {
    let invalid = |what: String| io::Error::new(io::ErrorKind::InvalidInput, what);
    if !config.frames.is_power_of_two() || !(64..=1 << 24).contains(&config.frames) {
        return Err(invalid(format!(
            "AF_XDP frames: {} is not a power of two from 64 to 2^24",
            config.frames
        )));
    }
    if config.frame_size != 2048 && config.frame_size != 4096 {
        return Err(invalid(format!(
            "AF_XDP frame size: {} is neither 2048 nor 4096",
            config.frame_size
        )));
    }
    usize::try_from(u64::from(config.frames) * u64::from(config.frame_size))
        .map_err(|_| invalid("AF_XDP UMEM larger than the address space".to_string()))
}

fn os_error(what: &str) -> io::Error {
    annotate(io::Error::last_os_error(), what)
}

fn annotate(err: io::Error, what: &str) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}

fn setsockopt<T>(fd: BorrowedFd<'_>, option: libc::c_int, value: &T) -> io::Result<()> {
    // SAFETY: `value` is a T of the size given, alive for the call; every
    // T used here is the plain struct or int the option takes.
    let rc = unsafe {
        libc::setsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            option,
            value as *const T as *const libc::c_void,
            size_of::<T>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// getsockopt into `value`; returns the length the kernel wrote.
fn getsockopt<T>(fd: BorrowedFd<'_>, option: libc::c_int, value: &mut T) -> io::Result<usize> {
    let mut len = size_of::<T>() as libc::socklen_t;
    // SAFETY: `value` is a writable T of the size given, alive for the
    // call; the kernel writes at most `len` bytes.
    let rc = unsafe {
        libc::getsockopt(
            fd.as_raw_fd(),
            libc::SOL_XDP,
            option,
            value as *mut T as *mut libc::c_void,
            &mut len,
        )
    };
    if rc == 0 {
        Ok(len as usize)
    } else {
        Err(io::Error::last_os_error())
    }
}

/// XDP_MMAP_OFFSETS, with the flags field (Linux 5.4+, as need_wakeup).
fn mmap_offsets(fd: BorrowedFd<'_>) -> io::Result<libc::xdp_mmap_offsets> {
    // SAFETY: all-zero is a valid xdp_mmap_offsets.
    let mut offsets: libc::xdp_mmap_offsets = unsafe { zeroed() };
    let len = getsockopt(fd, libc::XDP_MMAP_OFFSETS, &mut offsets)
        .map_err(|err| annotate(err, "ring offsets (XDP_MMAP_OFFSETS)"))?;
    if len < size_of::<libc::xdp_mmap_offsets>() {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            "ring offsets (XDP_MMAP_OFFSETS): no flags field; need_wakeup needs Linux 5.4+",
        ));
    }
    Ok(offsets)
}

/// A memory mapping, unmapped when dropped.
struct Mmap {
    ptr: NonNull<u8>,
    len: usize,
}

impl Mmap {
    /// Private anonymous memory, populated (the kernel pins it anyway).
    fn anonymous(len: usize) -> io::Result<Mmap> {
        Self::map(
            len,
            libc::MAP_PRIVATE | libc::MAP_ANONYMOUS | libc::MAP_POPULATE,
            -1,
            0,
        )
    }

    /// One of the socket's rings, at its page offset.
    fn ring(fd: BorrowedFd<'_>, len: usize, pgoff: u64) -> io::Result<Mmap> {
        let offset = libc::off_t::try_from(pgoff)
            .map_err(|_| io::Error::new(io::ErrorKind::Unsupported, "ring offset beyond off_t"))?;
        Self::map(
            len,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            offset,
        )
    }

    fn map(
        len: usize,
        flags: libc::c_int,
        fd: libc::c_int,
        offset: libc::off_t,
    ) -> io::Result<Mmap> {
        // SAFETY: a fresh mapping chosen by the kernel; nothing aliases it.
        let ptr = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                len,
                libc::PROT_READ | libc::PROT_WRITE,
                flags,
                fd,
                offset,
            )
        };
        if ptr == libc::MAP_FAILED {
            return Err(io::Error::last_os_error());
        }
        NonNull::new(ptr.cast::<u8>())
            .map(|ptr| Mmap { ptr, len })
            .ok_or_else(|| io::Error::other("mmap returned a null mapping"))
    }
}

impl Drop for Mmap {
    fn drop(&mut self) {
        // SAFETY: a mapping this Mmap made and owns; nothing borrows it once
        // its owner is dropped.
        unsafe { libc::munmap(self.ptr.as_ptr().cast(), self.len) };
    }
}

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
}

/// The side of a ring this process produces into (fill, TX).
struct ProdRing<T>(RingCore<T>);

impl<T: Copy> ProdRing<T> {
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
    fn push(&mut self, entry: T) -> bool {
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
    fn submit(&mut self) {
        self.0
            .producer()
            .store(self.0.cached_prod, Ordering::Release);
    }

    /// Entries pushed (submitted or not) that the consumer has not taken.
    fn unconsumed(&mut self) -> u32 {
        let ring = &mut self.0;
        ring.cached_cons = ring.consumer().load(Ordering::Acquire);
        ring.cached_prod
            .wrapping_sub(ring.cached_cons)
            .min(ring.size)
    }

    fn needs_wakeup(&self) -> bool {
        self.0.needs_wakeup()
    }
}

/// The side of a ring this process consumes from (RX, completion).
struct ConsRing<T>(RingCore<T>);

impl<T: Copy> ConsRing<T> {
    /// Entries ready, up to `max` (the producer index is reloaded only when
    /// the cached one says fewer than `max`).
    fn available(&mut self, max: u32) -> u32 {
        let ring = &mut self.0;
        let mut ready = ring.cached_prod.wrapping_sub(ring.cached_cons);
        if ready < max {
            ring.cached_prod = ring.producer().load(Ordering::Acquire);
            ready = ring.cached_prod.wrapping_sub(ring.cached_cons);
        }
        ready.min(ring.size).min(max)
    }

    /// Reads the next entry (its slot returns to the producer at `release`).
    fn pop(&mut self) -> Option<T> {
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
    fn release(&mut self) {
        self.0
            .consumer()
            .store(self.0.cached_cons, Ordering::Release);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::xdp::link::index_of;
    use crate::xdp::link::testnet::{ip, mac_of, Netns};
    use std::collections::HashSet;
    use std::net::{Ipv4Addr, SocketAddr, UdpSocket};
    use std::time::{Duration, Instant};

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

        assert!(!ring.prod.needs_wakeup());
        ring.indices[2].store(libc::XDP_RING_NEED_WAKEUP, Ordering::Relaxed);
        assert!(ring.prod.needs_wakeup());
    }

    #[test]
    fn config_is_checked() {
        let good = XskConfig {
            ifindex: 1,
            queue: 0,
            frames: 64,
            frame_size: 2048,
            zero_copy: false,
        };
        assert_eq!(validate(&good).unwrap(), 64 * 2048);
        for bad in [
            XskConfig { frames: 32, ..good },
            XskConfig {
                frames: 100,
                ..good
            },
            XskConfig { frames: 0, ..good },
            XskConfig {
                frame_size: 1024,
                ..good
            },
            XskConfig {
                frame_size: 3000,
                ..good
            },
        ] {
            let err = validate(&bad).unwrap_err();
            assert_eq!(err.kind(), io::ErrorKind::InvalidInput, "{bad:?}");
            assert!(matches!(Xsk::open(&bad), Err(e) if e.kind() == io::ErrorKind::InvalidInput));
        }
    }

    /// Two namespaces joined by a veth pair: va (10.199.0.1) in `a`, vb
    /// (10.199.0.2) in `b`.
    struct Pair {
        a: Netns,
        b: Netns,
    }

    fn veth_pair() -> Pair {
        let a = Netns::new("xa");
        let b = Netns::new("xb");
        ip(&[
            "-n", &a.name, "link", "add", "name", "va", "type", "veth", "peer", "name", "vb",
            "netns", &b.name,
        ]);
        ip(&["-n", &a.name, "addr", "add", "10.199.0.1/24", "dev", "va"]);
        ip(&["-n", &b.name, "addr", "add", "10.199.0.2/24", "dev", "vb"]);
        ip(&["-n", &a.name, "link", "set", "va", "up"]);
        ip(&["-n", &b.name, "link", "set", "vb", "up"]);
        Pair { a, b }
    }

    fn config(ifindex: u32) -> XskConfig {
        XskConfig {
            ifindex,
            queue: 0,
            frames: 64,
            frame_size: 2048,
            zero_copy: false,
        }
    }

    fn open_err(config: &XskConfig) -> io::Error {
        match Xsk::open(config) {
            Ok(_) => panic!("{config:?} opened"),
            Err(err) => err,
        }
    }

    /// The Internet checksum of `data`, starting from `sum`.
    fn checksum(data: &[u8], mut sum: u32) -> u16 {
        for pair in data.chunks(2) {
            let word = u16::from_be_bytes([pair[0], *pair.get(1).unwrap_or(&0)]);
            sum += u32::from(word);
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// Ethernet + IPv4 + UDP, checksums filled in.
    fn udp_frame(
        macs: ([u8; 6], [u8; 6]),
        from: (Ipv4Addr, u16),
        to: (Ipv4Addr, u16),
        payload: &[u8],
    ) -> Vec<u8> {
        let udp_len = 8 + payload.len();
        let ip_len = 20 + udp_len;
        let mut f = Vec::with_capacity(14 + ip_len);
        f.extend_from_slice(&macs.1); // destination
        f.extend_from_slice(&macs.0);
        f.extend_from_slice(&0x0800u16.to_be_bytes());
        let ip_start = f.len();
        f.extend_from_slice(&[0x45, 0]);
        f.extend_from_slice(&(ip_len as u16).to_be_bytes());
        f.extend_from_slice(&[0x12, 0x34, 0x40, 0]); // id, DF
        f.extend_from_slice(&[64, 17, 0, 0]); // TTL, UDP, checksum
        f.extend_from_slice(&from.0.octets());
        f.extend_from_slice(&to.0.octets());
        let sum = checksum(&f[ip_start..ip_start + 20], 0);
        f[ip_start + 10..ip_start + 12].copy_from_slice(&sum.to_be_bytes());
        let udp_start = f.len();
        f.extend_from_slice(&from.1.to_be_bytes());
        f.extend_from_slice(&to.1.to_be_bytes());
        f.extend_from_slice(&(udp_len as u16).to_be_bytes());
        f.extend_from_slice(&[0, 0]);
        f.extend_from_slice(payload);
        let mut pseudo = Vec::new();
        pseudo.extend_from_slice(&from.0.octets());
        pseudo.extend_from_slice(&to.0.octets());
        pseudo.extend_from_slice(&[0, 17]);
        pseudo.extend_from_slice(&(udp_len as u16).to_be_bytes());
        let pseudo_sum = u32::from(!checksum(&pseudo, 0));
        let mut sum = checksum(&f[udp_start..], pseudo_sum);
        if sum == 0 {
            sum = 0xffff;
        }
        f[udp_start + 6..udp_start + 8].copy_from_slice(&sum.to_be_bytes());
        f
    }

    #[test]
    fn checksums_match_known_values() {
        // RFC 1071's example bytes.
        assert_eq!(
            checksum(&[0x00, 0x01, 0xf2, 0x03, 0xf4, 0xf5, 0xf6, 0xf7], 0),
            !0xddf2
        );
        let f = udp_frame(
            ([2; 6], [4; 6]),
            ("10.0.0.1".parse().unwrap(), 1),
            ("10.0.0.2".parse().unwrap(), 2),
            b"abc",
        );
        // Summing a header or segment with its checksum in gives 0.
        assert_eq!(checksum(&f[14..34], 0), 0);
        let mut pseudo = vec![10, 0, 0, 1, 10, 0, 0, 2, 0, 17, 0, 11];
        pseudo.extend_from_slice(&f[34..]);
        assert_eq!(checksum(&pseudo, 0), 0);
    }

    #[test]
    fn transmits_udp_on_veth_in_copy_mode() {
        let pair = veth_pair();
        let macs = (mac_of(&pair.a, "va"), mac_of(&pair.b, "vb"));
        let listener = pair.b.run(|| {
            let socket = UdpSocket::bind("10.199.0.2:4242").unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            socket
        });
        let from = ("10.199.0.1".parse().unwrap(), 5353);
        let to = ("10.199.0.2".parse().unwrap(), 4242);

        let (counters, stats) = pair.a.run(|| {
            let mut xsk = Xsk::open(&config(index_of("va").unwrap())).unwrap();
            assert!(!xsk.is_zero_copy());
            assert_eq!((xsk.frames(), xsk.frame_size()), (64, 2048));
            assert_eq!(xsk.free_frames(), 32);

            // Bounds, on a frame taken and given back.
            let addr = xsk.take_free().unwrap();
            assert_eq!(addr % 2048, 0);
            assert_eq!(xsk.free_frames(), 31);
            let start = xsk.frame_mut(addr).as_ptr();
            assert_eq!(xsk.frame_mut(addr + 300).as_ptr(), start);
            assert_eq!(xsk.frame_mut(addr + 2047).len(), 2048);
            assert!(xsk.frame_mut(64 * 2048).is_empty());
            assert!(!xsk.send(addr, 0));
            assert!(!xsk.send(addr, 2049));
            assert!(!xsk.send(addr + 2000, 100));
            assert!(!xsk.send(64 * 2048, 60));
            let d = Descriptor {
                addr: addr + 10,
                len: 20,
            };
            xsk.frame_mut(addr)[10..30].fill(7);
            assert_eq!(xsk.frame(d), &[7; 20]);
            assert!(xsk
                .frame(Descriptor {
                    addr: addr + 2040,
                    len: 20
                })
                .is_empty());
            xsk.recycle(addr); // onto the fill ring
            assert_eq!(xsk.free_frames(), 31);

            // More datagrams than the free list holds and than copy mode
            // sends per wakeup (32): later ones reuse completed frames.
            let deadline = Instant::now() + Duration::from_secs(5);
            let mut sent = 0;
            while sent < 80 {
                if let Some(addr) = xsk.take_free() {
                    let payload = format!("datagram {sent}");
                    let frame = udp_frame(macs, from, to, payload.as_bytes());
                    xsk.frame_mut(addr)[..frame.len()].copy_from_slice(&frame);
                    assert!(xsk.send(addr, frame.len() as u32));
                    sent += 1;
                    if sent % 50 != 0 {
                        continue; // a batch of sends, then one flush
                    }
                }
                xsk.flush().unwrap();
                assert!(Instant::now() < deadline, "stuck after {sent} sent");
            }
            while xsk.tx_pending() > 0 || xsk.free_frames() < 31 {
                xsk.flush().unwrap();
                assert!(Instant::now() < deadline, "frames not completed");
                std::thread::sleep(Duration::from_millis(1));
            }
            (xsk.counters(), xsk.statistics().unwrap())
        });

        let mut got = HashSet::new();
        let mut buf = [0u8; 2048];
        for _ in 0..80 {
            let (n, sender) = listener.recv_from(&mut buf).unwrap();
            assert_eq!(sender, SocketAddr::from(from));
            got.insert(String::from_utf8(buf[..n].to_vec()).unwrap());
        }
        assert_eq!(got.len(), 80);
        assert!(got.contains("datagram 0") && got.contains("datagram 79"));

        assert!(counters.tx_wakeups > 0, "{counters:?}");
        assert_eq!((counters.bad_descs, counters.refused), (0, 0));
        assert_eq!(stats.tx_invalid_descs, 0, "{stats:?}");
        assert!(stats.tx_ring_empty_descs.is_some(), "{stats:?}");
    }

    #[test]
    fn open_errors_say_what_failed() {
        let pair = veth_pair();
        pair.a.run(|| {
            let ifindex = index_of("va").unwrap();
            let base = config(ifindex);

            let err = open_err(&XskConfig {
                zero_copy: true,
                ..base
            });
            let text = err.to_string();
            assert!(text.contains("zero-copy"), "{text}");
            assert!(
                text.contains(&format!("queue 0 of ifindex {ifindex}")),
                "{text}"
            );

            let err = open_err(&XskConfig { queue: 5, ..base });
            assert!(err.to_string().contains("queue 5"), "{err}");

            let err = open_err(&XskConfig {
                ifindex: 999_999,
                ..base
            });
            assert!(err.to_string().contains("ifindex 999999"), "{err}");

            // One socket per queue; the queue is free again once dropped.
            let first = Xsk::open(&base).unwrap();
            let err = open_err(&base);
            assert!(err.to_string().contains("queue 0"), "{err}");
            drop(first);
            // The kernel frees the queue from a work item after close:
            // binding it again may see EBUSY for a moment.
            let deadline = Instant::now() + Duration::from_secs(5);
            let again = loop {
                match Xsk::open(&base) {
                    Ok(xsk) => break xsk,
                    Err(err) if err.kind() == io::ErrorKind::ResourceBusy => {
                        assert!(Instant::now() < deadline, "{err}");
                        std::thread::sleep(Duration::from_millis(5));
                    }
                    Err(err) => panic!("{err}"),
                }
            };
            assert_eq!(again.statistics().unwrap(), {
                XdpStatistics {
                    rx_ring_full: Some(0),
                    rx_fill_ring_empty_descs: Some(0),
                    tx_ring_empty_descs: Some(0),
                    ..XdpStatistics::default()
                }
            });
        });
    }

    /// Waits up to `timeout` for POLLIN on the socket.
    fn wait_readable(xsk: &Xsk, timeout: Duration) -> bool {
        let mut pfd = libc::pollfd {
            fd: xsk.fd().as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        // SAFETY: one pollfd, alive for the call.
        let n = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
        n == 1 && pfd.revents & libc::POLLIN != 0
    }

    /// RX with the steering program of `ebpf`, loaded and attached with
    /// `bpf`, in native (veth's driver) and generic mode: datagrams sent
    /// from the peer's stack arrive on the RX ring, 256 bytes into their
    /// frame, and an answer written over a request goes back out.
    #[test]
    fn receives_and_answers_on_veth_with_the_steering_program() {
        use super::super::bpf::{attach_xdp, create_xsk_map, load_xdp, map_set, AttachMode};
        use super::super::ebpf::{steering_program, Fallback, Target};

        let pair = veth_pair();
        let macs = (mac_of(&pair.a, "va"), mac_of(&pair.b, "vb"));
        let mac_text = |mac: [u8; 6]| {
            mac.iter()
                .map(|b| format!("{b:02x}"))
                .collect::<Vec<_>>()
                .join(":")
        };
        // Static neighbours: no ARP needed either way.
        ip(&[
            "-n",
            &pair.b.name,
            "neigh",
            "add",
            "10.199.0.1",
            "lladdr",
            &mac_text(macs.0),
            "dev",
            "vb",
        ]);
        let client = pair.b.run(|| {
            let socket = UdpSocket::bind("10.199.0.2:7000").unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            socket
        });
        let tracker = ("10.199.0.1".parse::<Ipv4Addr>().unwrap(), 6969);

        // One socket for both modes (the kernel frees a queue a moment
        // after its socket closes).
        let ifindex = pair.a.run(|| index_of("va").unwrap());
        let mut xsk = pair.a.run(|| Xsk::open(&config(ifindex)).unwrap());
        for mode in [AttachMode::Native, AttachMode::Generic] {
            pair.a.run(|| {
                let xsk = &mut xsk;
                let map = create_xsk_map(1).unwrap();
                map_set(map.as_fd(), 0, xsk.fd().as_raw_fd()).unwrap();
                let target = Target {
                    ip: tracker.0.into(),
                    port: tracker.1,
                };
                let program = steering_program(&[target], map.as_raw_fd(), Fallback::Pass).unwrap();
                let program = load_xdp(&program, "xsk_test").unwrap();
                let _link = attach_xdp(program.as_fd(), ifindex, mode)
                    .unwrap_or_else(|e| panic!("{mode:?}: {e}"));

                for round in 0..3u32 {
                    let request = format!("request {round} {mode:?}");
                    client.send_to(request.as_bytes(), tracker).unwrap();
                    assert!(
                        wait_readable(xsk, Duration::from_secs(5)),
                        "{mode:?}: no POLLIN; {:?}",
                        xsk.statistics()
                    );
                    let mut got = Vec::new();
                    assert_eq!(xsk.receive(&mut got, 16), 1, "{mode:?}");
                    let d = got[0];
                    assert_eq!(d.addr % 2048, u64::from(XDP_PACKET_HEADROOM), "{mode:?}");
                    let bytes = xsk.frame(d);
                    assert_eq!(bytes.len(), 14 + 20 + 8 + request.len());
                    assert_eq!(&bytes[0..6], &macs.0);
                    assert_eq!(&bytes[6..12], &macs.1);
                    assert_eq!(&bytes[42..], request.as_bytes());

                    // The answer over its request, from the frame's start.
                    let answer = format!("answer {round}");
                    let frame = udp_frame(
                        macs,
                        tracker,
                        ("10.199.0.2".parse().unwrap(), 7000),
                        answer.as_bytes(),
                    );
                    xsk.frame_mut(d.addr)[..frame.len()].copy_from_slice(&frame);
                    assert!(xsk.send(d.addr - u64::from(XDP_PACKET_HEADROOM), frame.len() as u32));
                    xsk.flush().unwrap();
                    let mut buf = [0u8; 256];
                    let (n, from) = client.recv_from(&mut buf).unwrap();
                    assert_eq!(&buf[..n], answer.as_bytes(), "{mode:?}");
                    assert_eq!(from, SocketAddr::from(tracker));
                }
                // A datagram to another port passes to the stack.
                client
                    .send_to(b"elsewhere", (tracker.0, tracker.1 + 1))
                    .unwrap();
                assert!(!wait_readable(xsk, Duration::from_millis(50)));
                let stats = xsk.statistics().unwrap();
                assert_eq!(
                    (stats.rx_dropped, stats.rx_invalid_descs),
                    (0, 0),
                    "{stats:?}"
                );
            });
        }
    }

    #[cfg(debug_assertions)]
    #[test]
    #[should_panic(expected = "does not hold it")]
    fn debug_builds_catch_a_frame_given_back_twice() {
        let pair = veth_pair();
        pair.a.run(|| {
            let mut xsk = Xsk::open(&config(index_of("va").unwrap())).unwrap();
            let addr = xsk.take_free().unwrap();
            xsk.recycle(addr);
            xsk.recycle(addr);
        });
    }
}
