//! File descriptors passed to another process over a Unix stream socket
//! (`SCM_RIGHTS`): the receiver gets its own descriptors of the same open
//! sockets, so a socket's queue (datagrams, pending connections) survives
//! the sender closing its own.

use std::io;
use std::mem;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::net::UnixStream;

/// The most descriptors one message carries (the kernel's `SCM_MAX_FD` is
/// 253).
pub const MAX_FDS: usize = 250;

/// Bytes of control-message buffer for `n` descriptors.
fn space(n: usize) -> usize {
    // SAFETY: CMSG_SPACE is pure arithmetic.
    unsafe { libc::CMSG_SPACE((n * mem::size_of::<RawFd>()) as u32) as usize }
}

/// Sends `bytes` (at least one) with `fds` attached to their first byte.
/// The bytes may go out in more than one write; the descriptors go with the
/// first.
pub fn send_with_fds(socket: &UnixStream, bytes: &[u8], fds: &[RawFd]) -> io::Result<()> {
    if fds.len() > MAX_FDS || bytes.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{} descriptors, {} bytes", fds.len(), bytes.len()),
        ));
    }
    // u64 words keep the buffer aligned for cmsghdr.
    let mut control = vec![0u64; space(fds.len()).div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: bytes.as_ptr() as *mut libc::c_void,
        iov_len: bytes.len(),
    };
    // SAFETY: zeroed msghdr is valid; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    if !fds.is_empty() {
        msg.msg_control = control.as_mut_ptr().cast();
        msg.msg_controllen = space(fds.len()) as _;
        // SAFETY: the buffer holds one header and `fds.len()` descriptors
        // (CMSG_SPACE), so the first header and its data are in bounds.
        unsafe {
            let header = libc::CMSG_FIRSTHDR(&msg);
            (*header).cmsg_level = libc::SOL_SOCKET;
            (*header).cmsg_type = libc::SCM_RIGHTS;
            (*header).cmsg_len = libc::CMSG_LEN(mem::size_of_val(fds) as u32) as _;
            std::ptr::copy_nonoverlapping(
                fds.as_ptr().cast::<u8>(),
                libc::CMSG_DATA(header),
                mem::size_of_val(fds),
            );
        }
    }
    let sent = retry_interrupted(|| {
        // SAFETY: msg points at live buffers of the lengths it states.
        unsafe { libc::sendmsg(socket.as_raw_fd(), &msg, libc::MSG_NOSIGNAL) }
    })?;
    let rest = bytes.get(sent..).unwrap_or_default();
    io::Write::write_all(&mut &*socket, rest)
}

/// Receives into `buf`, and the descriptors that came with those bytes
/// into `fds` (close-on-exec); the bytes received, 0 at the end of the
/// stream. A message with more than [`MAX_FDS`] descriptors is an error
/// (the kernel closes those it cannot hand over).
pub fn recv_with_fds(
    socket: &UnixStream,
    buf: &mut [u8],
    fds: &mut Vec<OwnedFd>,
) -> io::Result<usize> {
    let mut control = vec![0u64; space(MAX_FDS).div_ceil(8)];
    let mut iov = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: zeroed msghdr is valid; every pointer set below outlives the call.
    let mut msg: libc::msghdr = unsafe { mem::zeroed() };
    msg.msg_iov = &mut iov;
    msg.msg_iovlen = 1;
    msg.msg_control = control.as_mut_ptr().cast();
    msg.msg_controllen = space(MAX_FDS) as _;
    let received = retry_interrupted(|| {
        // SAFETY: msg points at live buffers of the lengths it states.
        unsafe { libc::recvmsg(socket.as_raw_fd(), &mut msg, libc::MSG_CMSG_CLOEXEC) }
    })?;
    // SAFETY: the kernel filled the control buffer; the CMSG macros walk it
    // within msg_controllen, and each SCM_RIGHTS payload is whole descriptors
    // that are now ours.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&msg);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET && (*header).cmsg_type == libc::SCM_RIGHTS {
                let data_len = (*header).cmsg_len as usize - libc::CMSG_LEN(0) as usize;
                let data = libc::CMSG_DATA(header);
                for i in 0..data_len / mem::size_of::<RawFd>() {
                    let fd = std::ptr::read_unaligned(data.cast::<RawFd>().add(i));
                    fds.push(OwnedFd::from_raw_fd(fd));
                }
            }
            header = libc::CMSG_NXTHDR(&msg, header);
        }
    }
    if msg.msg_flags & libc::MSG_CTRUNC != 0 {
        return Err(io::Error::other(
            "more descriptors than one message may carry",
        ));
    }
    Ok(received)
}

/// Runs `call` (a system call's -1 or count) again while a signal
/// interrupts it: a socket with a timeout (`SO_RCVTIMEO`, `SO_SNDTIMEO`) is
/// never restarted by the kernel after a signal, not even after a stop and a
/// continue with no handler at all (signal(7)). Nothing is lost: an
/// interrupted call has moved no bytes and no descriptors.
fn retry_interrupted(mut call: impl FnMut() -> isize) -> io::Result<usize> {
    loop {
        let n = call();
        if n >= 0 {
            return Ok(n as usize);
        }
        let e = io::Error::last_os_error();
        if e.kind() != io::ErrorKind::Interrupted {
            return Err(e);
        }
    }
}

/// The credentials of the peer of a connected Unix socket (`SO_PEERCRED`):
/// the process that connected, or for a client, the one that listened.
pub fn peer_credentials(socket: &impl AsRawFd) -> io::Result<libc::ucred> {
    let mut cred = libc::ucred {
        pid: 0,
        uid: 0,
        gid: 0,
    };
    let mut len = mem::size_of::<libc::ucred>() as libc::socklen_t;
    // SAFETY: getsockopt writes at most `len` bytes to `cred`.
    let rc = unsafe {
        libc::getsockopt(
            socket.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_PEERCRED,
            (&mut cred as *mut libc::ucred).cast(),
            &mut len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(cred)
}

/// `SO_PEERPIDFD` (Linux 6.5), in asm-generic's numbering (x86-64, arm64),
/// which the libc crate does not have yet.
#[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
const SO_PEERPIDFD: libc::c_int = 77;

/// A pidfd of the peer of a connected Unix socket: of the very process that
/// connected (`SO_PEERPIDFD`, Linux 6.5), which a signal through it reaches
/// or, once it has exited, no process at all. Before 6.5 (or on other
/// architectures), of the process that has its pid now (`pidfd_open`),
/// which is the one that connected unless it exited and its pid was reused.
pub fn peer_pidfd(socket: &impl AsRawFd) -> io::Result<OwnedFd> {
    #[cfg(any(target_arch = "x86_64", target_arch = "aarch64"))]
    {
        let mut fd: libc::c_int = -1;
        let mut len = mem::size_of::<libc::c_int>() as libc::socklen_t;
        // SAFETY: getsockopt writes at most `len` bytes to `fd`.
        let rc = unsafe {
            libc::getsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                SO_PEERPIDFD,
                (&mut fd as *mut libc::c_int).cast(),
                &mut len,
            )
        };
        if rc == 0 && fd >= 0 {
            // SAFETY: a new descriptor that the kernel made for us.
            return Ok(unsafe { OwnedFd::from_raw_fd(fd) });
        }
    }
    let pid = peer_credentials(socket)?.pid;
    // SAFETY: pidfd_open takes a pid and flags; the fd returned is ours.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// Sends `signal` to the process of `pidfd` (0: none, to see whether it is
/// still there): Err(ESRCH) once it has exited.
pub fn pidfd_signal(pidfd: &OwnedFd, signal: libc::c_int) -> io::Result<()> {
    // SAFETY: a valid pidfd, a signal number, no siginfo, no flags.
    let rc = unsafe {
        libc::syscall(
            libc::SYS_pidfd_send_signal,
            pidfd.as_raw_fd(),
            signal,
            std::ptr::null::<libc::siginfo_t>(),
            0,
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
    use std::net::UdpSocket;

    #[test]
    fn a_passed_socket_is_the_same_socket() {
        let (a, b) = UnixStream::pair().unwrap();
        let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
        let addr = udp.local_addr().unwrap();
        let other = UdpSocket::bind("127.0.0.1:0").unwrap();
        send_with_fds(&a, b"udp", &[udp.as_raw_fd(), other.as_raw_fd()]).unwrap();
        // A datagram queued before the sender lets go of its socket...
        let client = UdpSocket::bind("127.0.0.1:0").unwrap();
        client.send_to(b"queued", addr).unwrap();
        drop(udp);
        let mut buf = [0u8; 16];
        let mut fds = Vec::new();
        assert_eq!(recv_with_fds(&b, &mut buf, &mut fds).unwrap(), 3);
        assert_eq!(&buf[..3], b"udp");
        assert_eq!(fds.len(), 2);
        // ...is read through the receiver's descriptor.
        let taken = UdpSocket::from(fds.remove(0));
        assert_eq!(taken.local_addr().unwrap(), addr);
        let (n, from) = taken.recv_from(&mut buf).unwrap();
        assert_eq!(
            (&buf[..n], from),
            (&b"queued"[..], client.local_addr().unwrap())
        );
    }

    #[test]
    fn bytes_alone_and_too_many_descriptors() {
        let (a, b) = UnixStream::pair().unwrap();
        send_with_fds(&a, b"plain", &[]).unwrap();
        let mut buf = [0u8; 16];
        let mut fds = Vec::new();
        assert_eq!(recv_with_fds(&b, &mut buf, &mut fds).unwrap(), 5);
        assert!(fds.is_empty());
        let many = vec![a.as_raw_fd(); MAX_FDS + 1];
        assert!(send_with_fds(&a, b"x", &many).is_err());
        assert!(send_with_fds(&a, b"", &[]).is_err());
    }

    #[test]
    fn the_pidfd_of_a_peer_is_of_the_process_that_connected() {
        let (a, _b) = UnixStream::pair().unwrap();
        let pidfd = peer_pidfd(&a).unwrap();
        pidfd_signal(&pidfd, 0).unwrap();
        let fdinfo =
            std::fs::read_to_string(format!("/proc/self/fdinfo/{}", pidfd.as_raw_fd())).unwrap();
        let me = format!("Pid:\t{}", std::process::id());
        assert!(fdinfo.lines().any(|l| l == me), "{fdinfo}");
    }

    extern "C" fn ignore(_: libc::c_int) {}

    #[test]
    fn a_signal_does_not_end_a_wait_for_descriptors() {
        // A socket with a receive timeout: the kernel never restarts its
        // recvmsg after a signal handler ran (signal(7)), whatever SA_RESTART
        // says. SIGURG is used by nothing else in these tests.
        // SAFETY: a handler that does nothing, for one signal.
        unsafe {
            let mut action: libc::sigaction = mem::zeroed();
            action.sa_sigaction = ignore as *const () as usize;
            libc::sigaction(libc::SIGURG, &action, std::ptr::null_mut());
        }
        let (a, b) = UnixStream::pair().unwrap();
        b.set_read_timeout(Some(std::time::Duration::from_secs(20)))
            .unwrap();
        let waiting = std::thread::spawn(move || {
            let mut buf = [0u8; 16];
            let mut fds = Vec::new();
            recv_with_fds(&b, &mut buf, &mut fds).map(|n| buf[..n].to_vec())
        });
        use std::os::unix::thread::JoinHandleExt;
        for _ in 0..3 {
            std::thread::sleep(std::time::Duration::from_millis(100));
            // SAFETY: the thread is alive: it waits until `a` sends.
            unsafe { libc::pthread_kill(waiting.as_pthread_t(), libc::SIGURG) };
        }
        std::thread::sleep(std::time::Duration::from_millis(100));
        assert!(
            !waiting.is_finished(),
            "the wait ended early: {:?}",
            waiting.join().unwrap()
        );
        send_with_fds(&a, b"late", &[]).unwrap();
        assert_eq!(waiting.join().unwrap().unwrap(), b"late");
    }
}
