//! Accepting, for every TCP listener of the tracker: the accept itself,
//! and what a failed one means.

use std::io;
use std::net::TcpListener;
use std::os::fd::{AsFd, AsRawFd, FromRawFd};

use glommio::net::TcpStream;
use tracker_runtime::ready::listener_readable;
use tracker_runtime::throttle::LogThrottle;

/// The next connection on `listener` (non-blocking, as `tracker_net::tcp`
/// binds every listener). It waits with a poll, never with a pending
/// io_uring accept: the listener is shared with a successor in a
/// hand-over, and an accept cancelled as this tracker stops may already
/// have taken a connection that no one would serve (reset when this
/// process exits). Dropped at any point, this takes no connection.
/// Accepted close-on-exec: a successor started on SIGUSR2 must not hold
/// this tracker's connections open.
pub async fn accept(listener: &TcpListener) -> io::Result<TcpStream> {
    loop {
        // SAFETY: accept4 on a listening socket we hold, with no address
        // asked for.
        let fd = unsafe {
            libc::accept4(
                listener.as_raw_fd(),
                std::ptr::null_mut(),
                std::ptr::null_mut(),
                libc::SOCK_CLOEXEC,
            )
        };
        if fd >= 0 {
            // SAFETY: a new descriptor, handed over whole.
            return Ok(unsafe { TcpStream::from_raw_fd(fd) });
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::WouldBlock {
            return Err(e);
        }
        listener_readable(listener.as_fd()).await?;
    }
}

/// Decides what a failed accept on a `protocol` listener at `local` means:
/// most failures concern one connection or are passing shortages (out of file
/// descriptors), after which the loop pauses briefly rather than spin (Ok); a
/// listener that is no longer a listener ends the worker (Err).
pub async fn accept_failed(
    protocol: &str,
    local: std::net::SocketAddr,
    e: io::Error,
) -> Result<(), String> {
    match e.raw_os_error() {
        Some(libc::EBADF | libc::EINVAL | libc::ENOTSOCK | libc::EOPNOTSUPP) => {
            Err(format!("{protocol} {local}: accept failed: {e}"))
        }
        Some(libc::ECONNABORTED | libc::EINTR | libc::EAGAIN) => Ok(()),
        _ => {
            // Clients can cause these (out of descriptors while connections
            // flood in): logged once a minute at most.
            static THROTTLE: LogThrottle = LogThrottle::new();
            if let Some(left_out) = THROTTLE.allow() {
                tracing::warn!(
                    "{protocol} {local}: accept failed: {e}; pausing accepts for 100 ms \
                     ({left_out} more failures since the last such line)"
                );
            }
            glommio::timer::sleep(std::time::Duration::from_millis(100)).await;
            Ok(())
        }
    }
}
