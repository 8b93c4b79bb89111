//! The UMEM: the memory packets are received into and sent from, cut into
//! frames of `frame_size` bytes, and the table that says where each frame
//! is (with the kernel, with the caller, or on the free list kept for
//! answers).
//!
//! Both live in one memfd, the frames first and the table after them, so
//! that a process the socket is handed to (a successor in a hand-over)
//! maps the same frames and finds where each one is: the kernel pins the
//! memfd's pages when the UMEM is registered, and keeps using them
//! whichever process maps them. Only the frames are registered; the table
//! is the processes' own. Its first bytes say what it describes, so that
//! a memfd of something else is refused.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsFd, AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

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

impl Owner {
    /// Its byte in the table.
    fn byte(self) -> u8 {
        match self {
            Owner::Kernel => 1,
            Owner::Caller => 2,
            Owner::Free => 3,
        }
    }

    /// A byte of the table; anything but a known value is taken for the
    /// kernel's: a frame that may be lost, never one handed out twice.
    fn of_byte(byte: u8) -> Owner {
        match byte {
            2 => Owner::Caller,
            3 => Owner::Free,
            _ => Owner::Kernel,
        }
    }
}

/// The table's first bytes: what it is, then the frames' count and size
/// (little-endian u32s).
const MAGIC: [u8; 8] = *b"trkumem1";
const HEADER: usize = 16;

/// The memfd's name, as /proc/PID/fd shows it.
const NAME: &CStr = c"tracker-xdp-umem";

/// The frames, their owners, and the free list.
pub(super) struct Umem {
    /// The frames (`len` bytes), then the table.
    map: Mmap,
    memfd: OwnedFd,
    frames: u32,
    frame_size: u32,
    /// The frames' bytes: what is registered with the socket.
    len: usize,
    /// Frames held for answers, up to `reserve`.
    free: Vec<u64>,
    reserve: usize,
}

impl Umem {
    /// `frames` frames of `frame_size` bytes (a power of two) in a new
    /// memfd of `len` bytes (their product, checked by the caller) and the
    /// table, all owned by no one yet; the free list keeps up to `reserve`
    /// of them.
    pub(super) fn new(
        frames: u32,
        frame_size: u32,
        len: usize,
        reserve: usize,
    ) -> io::Result<Umem> {
        // SAFETY: a NUL-terminated name and plain flags.
        let raw = unsafe { libc::memfd_create(NAME.as_ptr(), libc::MFD_CLOEXEC) };
        if raw < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a fresh fd that nothing else owns.
        let memfd = unsafe { OwnedFd::from_raw_fd(raw) };
        let total = checked_total(len, frames)?;
        let size = libc::off_t::try_from(total)
            .map_err(|_| io::Error::other("a UMEM larger than a file may be"))?;
        // SAFETY: ftruncate on our own memfd.
        if unsafe { libc::ftruncate(raw, size) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let map = Mmap::shared(memfd.as_fd(), total)?;
        let mut umem = Umem {
            map,
            memfd,
            frames,
            frame_size,
            len,
            free: Vec::with_capacity(reserve),
            reserve,
        };
        let header = umem.header();
        let (written, owners) = umem.table_mut().split_at_mut(HEADER);
        written.copy_from_slice(&header);
        owners.fill(Owner::Free.byte());
        Ok(umem)
    }

    /// Whether `memfd` holds a UMEM of `frames` frames of `frame_size`
    /// bytes (`len` in all) and its table, as [`Umem::adopt`] checks,
    /// without writing to it.
    pub(super) fn probe(
        memfd: BorrowedFd<'_>,
        frames: u32,
        frame_size: u32,
        len: usize,
    ) -> io::Result<()> {
        let total = checked_total(len, frames)?;
        check_size(memfd, total, frames, frame_size)?;
        let map = Mmap::shared(memfd, total)?;
        // SAFETY: the mapping holds `total` bytes, the table's header at
        // `len`; read only, while the mapping lives.
        let written = unsafe { std::slice::from_raw_parts(map.ptr.as_ptr().add(len), HEADER) };
        if written != header(frames, frame_size) {
            return Err(not_the_umem(frames, frame_size));
        }
        Ok(())
    }

    /// The UMEM of a socket handed over by another process: its memfd
    /// (`frames` frames of `frame_size` bytes, `len` in all), mapped
    /// again, with the frames' owners as its table says. Frames the table
    /// gives to no one in the kernel (free, or the caller's, which that
    /// process no longer is) make the free list; the caller then puts back
    /// with the kernel any that a ring shows the kernel has
    /// ([`Umem::with_kernel`]).
    pub(super) fn adopt(
        memfd: OwnedFd,
        frames: u32,
        frame_size: u32,
        len: usize,
        reserve: usize,
    ) -> io::Result<Umem> {
        let total = checked_total(len, frames)?;
        check_size(memfd.as_fd(), total, frames, frame_size)?;
        let map = Mmap::shared(memfd.as_fd(), total)?;
        let mut umem = Umem {
            map,
            memfd,
            frames,
            frame_size,
            len,
            free: Vec::with_capacity(reserve),
            reserve,
        };
        if umem.table().split_at(HEADER).0 != umem.header() {
            return Err(not_the_umem(frames, frame_size));
        }
        // Pushed from the top, so that the lowest is handed out first, as
        // at an open.
        for index in (0..frames).rev() {
            let base = u64::from(index) * u64::from(frame_size);
            match umem.owner(base) {
                Some(Owner::Free | Owner::Caller) => umem.push_free(base),
                // Kept as the kernel's (an unknown byte included).
                _ => umem.set_owner(base, Owner::Kernel),
            }
        }
        Ok(umem)
    }

    /// The table's header for these frames.
    fn header(&self) -> [u8; HEADER] {
        header(self.frames, self.frame_size)
    }

    /// The table: its header, then a byte per frame.
    fn table(&self) -> &[u8] {
        // SAFETY: the mapping holds `len` bytes of frames and then
        // `table_len(frames)` >= HEADER + frames bytes, alive as long as
        // self.
        unsafe {
            std::slice::from_raw_parts(
                self.map.ptr.as_ptr().add(self.len),
                HEADER + self.frames as usize,
            )
        }
    }

    fn table_mut(&mut self) -> &mut [u8] {
        // SAFETY: as in `table`; &mut self keeps other slices of it from
        // living meanwhile.
        unsafe {
            std::slice::from_raw_parts_mut(
                self.map.ptr.as_ptr().add(self.len),
                HEADER + self.frames as usize,
            )
        }
    }

    fn owners_mut(&mut self) -> &mut [u8] {
        self.table_mut().split_at_mut(HEADER).1
    }

    /// The memfd the frames and the table live in, to hand over.
    pub(super) fn memfd(&self) -> BorrowedFd<'_> {
        self.memfd.as_fd()
    }

    /// The frames' address and length, to register with the socket.
    pub(super) fn region(&self) -> (u64, u64) {
        (self.map.ptr.as_ptr() as u64, self.len as u64)
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
        // Within frames * frame_size, the frames' part of the mapping.
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
        self.table()
            .get(HEADER..)?
            .get(index)
            .copied()
            .map(Owner::of_byte)
    }

    pub(super) fn set_owner(&mut self, base: u64, owner: Owner) {
        let index = usize::try_from(base / u64::from(self.frame_size)).unwrap_or(usize::MAX);
        if let Some(slot) = self.owners_mut().get_mut(index) {
            *slot = owner.byte();
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

    /// Gives the frame at `base` to the kernel, which a ring shows has it,
    /// whatever the table said: true when the table said otherwise (and the
    /// frame was on the free list, it is taken off).
    pub(super) fn with_kernel(&mut self, base: u64) -> bool {
        match self.owner(base) {
            None | Some(Owner::Kernel) => false,
            Some(_) => {
                self.free.retain(|&f| f != base);
                self.set_owner(base, Owner::Kernel);
                true
            }
        }
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

/// The table's bytes for `frames` frames, in whole pages.
fn table_len(frames: u32) -> usize {
    // SAFETY: sysconf has no preconditions.
    let page = usize::try_from(unsafe { libc::sysconf(libc::_SC_PAGESIZE) })
        .ok()
        .filter(|&p| p > 0)
        .unwrap_or(4096);
    (HEADER + frames as usize).div_ceil(page) * page
}

/// The table's header for `frames` frames of `frame_size` bytes.
fn header(frames: u32, frame_size: u32) -> [u8; HEADER] {
    let mut header = [0u8; HEADER];
    header[..8].copy_from_slice(&MAGIC);
    header[8..12].copy_from_slice(&frames.to_le_bytes());
    header[12..16].copy_from_slice(&frame_size.to_le_bytes());
    header
}

/// The memfd's length: the frames' `len` bytes and the table.
fn checked_total(len: usize, frames: u32) -> io::Result<usize> {
    len.checked_add(table_len(frames))
        .ok_or_else(|| io::Error::other("a UMEM larger than the address space"))
}

/// Refuses a memfd handed over that is not `total` bytes long.
fn check_size(memfd: BorrowedFd<'_>, total: usize, frames: u32, frame_size: u32) -> io::Result<()> {
    // SAFETY: stat is plain data that fstat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a stat to fill.
    if unsafe { libc::fstat(memfd.as_raw_fd(), &mut st) } != 0 {
        return Err(io::Error::last_os_error());
    }
    if u64::try_from(st.st_size).ok() != u64::try_from(total).ok() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!(
                "the UMEM handed over holds {} bytes, not the {total} of {frames} frames of \
                 {frame_size} bytes and their table",
                st.st_size
            ),
        ));
    }
    Ok(())
}

fn not_the_umem(frames: u32, frame_size: u32) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!(
            "the memory handed over is not the UMEM of {frames} frames of {frame_size} bytes \
             that the socket was said to have"
        ),
    )
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

    /// Another mapping of the memfd (a successor's) sees the same frames
    /// and owners: the free and the caller's frames are free there, the
    /// kernel's stay the kernel's.
    #[test]
    fn a_umem_taken_over_has_the_same_frames_and_owners() {
        let mut umem = Umem::new(4, 2048, 4 * 2048, 4).unwrap();
        for base in [0, 2048, 4096, 6144] {
            umem.set_owner(base, Owner::Kernel);
        }
        umem.push_free(2048);
        umem.set_owner(4096, Owner::Caller);
        umem.frame_mut(6144)[100] = 42;
        let memfd = umem.memfd().try_clone_to_owned().unwrap();
        let mut taken = Umem::adopt(memfd, 4, 2048, 4 * 2048, 4).unwrap();
        assert_eq!(taken.bytes(6144 + 100, 1), &[42]);
        assert_eq!(
            [0, 2048, 4096, 6144].map(|b| taken.owner(b).unwrap()),
            [Owner::Kernel, Owner::Free, Owner::Free, Owner::Kernel]
        );
        // The lowest free frame first.
        assert_eq!(taken.free_len(), 2);
        assert!(taken.with_kernel(4096));
        assert!(!taken.with_kernel(0));
        assert_eq!(taken.pop_free(), Some(2048));
        assert_eq!(taken.pop_free(), None);
        // Writes go both ways.
        taken.frame_mut(0)[1] = 7;
        assert_eq!(umem.bytes(1, 1), &[7]);
        assert_eq!(umem.owner(2048), Some(Owner::Caller));

        // Another count or size than the table says, or another file.
        let memfd = || umem.memfd().try_clone_to_owned().unwrap();
        assert!(Umem::adopt(memfd(), 8, 2048, 8 * 2048, 4).is_err());
        assert!(Umem::adopt(memfd(), 2, 4096, 2 * 4096, 4).is_err());
        let other = Umem::new(4, 2048, 4 * 2048, 4).unwrap();
        let blank = other.memfd().try_clone_to_owned().unwrap();
        drop(other);
        assert!(Umem::adopt(blank.try_clone().unwrap(), 4, 2048, 4 * 2048, 4).is_ok());
        // SAFETY: a write to our own memfd, at the table's first byte.
        let rc = unsafe { libc::pwrite(blank.as_raw_fd(), b"x".as_ptr().cast(), 1, 4 * 2048) };
        assert_eq!(rc, 1);
        let err = Umem::adopt(blank, 4, 2048, 4 * 2048, 4).err().unwrap();
        assert_eq!(err.kind(), io::ErrorKind::InvalidData, "{err}");
    }
}
