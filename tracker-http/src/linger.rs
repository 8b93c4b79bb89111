//! How connections end: one the tracker cuts (a deadline passed, a limit
//! refused it, it was evicted to make room, it failed) is reset; one it
//! closes after a last answer, or whose client closed first, is closed
//! gracefully.
//!
//! A graceful close leaves the kernel to deliver whatever the socket still
//! queues after the tracker has let go (FIN_WAIT1): a client cut for reading
//! too slowly would go on being fed for as long as it reads a trickle, from
//! kernel memory that no limit of the tracker counts. A reset (SO_LINGER on
//! with a zero timeout, then close) frees it at once.
//!
//! Accepted sockets inherit SO_LINGER from their listener, and every
//! listener is bound to reset (`tracker_net::tcp`, before `listen`, so that
//! not even a connection accepted before serving began escapes it): a
//! connection dropped on any path, refused at admission included, is reset
//! at no cost per connection, and only [`end_gracefully`] turns it off.

use std::io;
use std::os::fd::AsRawFd;

/// Makes a close of `socket` end the connection gracefully (a FIN after
/// what is queued) instead of resetting it.
pub fn end_gracefully(socket: &impl AsRawFd) -> io::Result<()> {
    let linger = libc::linger {
        l_onoff: 0,
        l_linger: 0,
    };
    set_socket_option(socket, libc::SO_LINGER, &linger)
}

/// Sets the `SOL_SOCKET` option `name` of `socket` to `value`, the one
/// setsockopt call of this crate's socket options.
pub(crate) fn set_socket_option<T: Copy>(
    socket: &impl AsRawFd,
    name: libc::c_int,
    value: &T,
) -> io::Result<()> {
    // SAFETY: setsockopt reads one `T` of the size given, on a descriptor
    // that `socket`, borrowed for the call, keeps open.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            name,
            (value as *const T).cast(),
            std::mem::size_of::<T>() as libc::socklen_t,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::io::{ErrorKind, Read, Write};
    use std::net::TcpStream;

    /// Accepted sockets take the listener's setting: a drop resets; turned
    /// off, the drop closes gracefully and the client reads to its end.
    #[test]
    fn accepted_sockets_reset_unless_turned_off() {
        let listener = tracker_net::tcp::bind_exclusive("127.0.0.1:0".parse().unwrap()).unwrap();
        listener.set_nonblocking(false).unwrap();
        let addr = listener.local_addr().unwrap();
        for graceful in [false, true] {
            let mut client = TcpStream::connect(addr).unwrap();
            let (mut accepted, _) = listener.accept().unwrap();
            accepted.write_all(b"last answer").unwrap();
            if graceful {
                end_gracefully(&accepted).unwrap();
            }
            drop(accepted);
            let mut got = Vec::new();
            let end = client.read_to_end(&mut got);
            match graceful {
                true => assert_eq!((end.unwrap(), &got[..]), (11, &b"last answer"[..])),
                false => assert_eq!(end.unwrap_err().kind(), ErrorKind::ConnectionReset),
            }
        }
    }
}
