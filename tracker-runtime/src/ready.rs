//! Waiting until a descriptor that glommio did not make is readable,
//! without reading from it: a wait dropped half-way (at a stop) takes
//! nothing with it, where a cancelled io_uring accept or receive may
//! already have taken a connection or a datagram that no one then serves.

use std::io;
use std::os::fd::{BorrowedFd, FromRawFd, IntoRawFd};

/// Returns once `fd` is readable (an io_uring poll): Ok, or the error of
/// the one non-blocking read that follows the poll, which is the socket's
/// to explain. An AF_XDP socket reads 0 bytes at once; a listening TCP
/// socket fails the read with ENOTCONN, which here means a connection
/// waits (see [`listener_readable`]).
///
/// glommio offers no wait for readiness on a descriptor it did not make;
/// a stream made over a duplicate of it arms exactly that wait as it is
/// made, and its first read returns once the poll does. The duplicate
/// closes when the stream drops. One dup and one close a wait, only when
/// idle.
pub async fn readable(fd: BorrowedFd<'_>) -> io::Result<()> {
    let duplicate = fd.try_clone_to_owned()?;
    // SAFETY: `duplicate` is a new descriptor, handed over whole.
    let mut stream = unsafe { glommio::net::UnixStream::from_raw_fd(duplicate.into_raw_fd()) };
    let mut byte = [0u8; 1];
    futures_lite::AsyncReadExt::read(&mut stream, &mut byte)
        .await
        .map(drop)
}

/// [`readable`] for a listening socket: Ok once a connection waits.
pub async fn listener_readable(fd: BorrowedFd<'_>) -> io::Result<()> {
    match readable(fd).await {
        Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => Ok(()),
        other => other,
    }
}
