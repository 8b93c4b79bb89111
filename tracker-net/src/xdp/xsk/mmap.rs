//! Memory mappings: the UMEM (a memfd, which another process can map too)
//! and the socket's rings (mapped from its descriptor), each unmapped when
//! dropped.

use std::io;
use std::os::fd::{AsRawFd, BorrowedFd};
use std::ptr::NonNull;

/// A memory mapping, unmapped when dropped.
pub(super) struct Mmap {
    pub(super) ptr: NonNull<u8>,
    pub(super) len: usize,
}

impl Mmap {
    /// `len` bytes of a file (a memfd) from its start, shared with every
    /// other mapping of it, populated (the kernel pins the UMEM anyway).
    pub(super) fn shared(fd: BorrowedFd<'_>, len: usize) -> io::Result<Mmap> {
        Self::map(
            len,
            libc::MAP_SHARED | libc::MAP_POPULATE,
            fd.as_raw_fd(),
            0,
        )
    }

    /// One of the socket's rings, at its page offset.
    pub(super) fn ring(fd: BorrowedFd<'_>, len: usize, pgoff: u64) -> io::Result<Mmap> {
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

/// `err` with what was being done when it came.
pub(super) fn annotate(err: io::Error, what: &str) -> io::Error {
    io::Error::new(err.kind(), format!("{what}: {err}"))
}
