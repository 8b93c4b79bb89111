//! The kernel memory a connection's unsent answers may take. Left to
//! itself, Linux grows a TCP socket's send buffer up to net.ipv4.tcp_wmem's
//! maximum (4 MiB by default) for a client that reads slowly, memory no
//! limit of the tracker counts; a WebSocket connection, which the tracker
//! writes to for as long as it lives, gets a fixed one instead.

use std::io;
use std::os::fd::AsRawFd;

/// Fixes the send buffer of `socket` at `bytes` (the kernel doubles it for
/// its bookkeeping, and stops growing it).
pub fn limit_send_buffer(socket: &impl AsRawFd, bytes: usize) -> io::Result<()> {
    let size = libc::c_int::try_from(bytes).unwrap_or(libc::c_int::MAX);
    crate::linger::set_socket_option(socket, libc::SO_SNDBUF, &size)
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{TcpListener, TcpStream};

    #[test]
    fn the_send_buffer_is_fixed() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let stream = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        limit_send_buffer(&stream, 16 << 10).unwrap();
        let mut size: libc::c_int = 0;
        let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes into `size`.
        let rc = unsafe {
            libc::getsockopt(
                stream.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_SNDBUF,
                (&mut size as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        assert_eq!(rc, 0);
        assert_eq!(size, 32 << 10, "doubled by the kernel, and no more");
    }
}
