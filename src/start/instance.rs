//! One tracker per port. Every worker binds its sockets with `SO_REUSEPORT`,
//! so a second tracker started on the same ports (by the same user) would be
//! let into the same groups, and the kernel would split the clients, and so
//! the swarms, between the two without a word. Before it binds, a tracker
//! takes a lock for each address it serves, and refuses to start when
//! another tracker holds a lock that overlaps it.
//!
//! A lock is an abstract Unix socket named after the protocol, family, port
//! and address: like ports, such names are per network namespace, and the
//! kernel releases them when the process ends, however it ends, so no stale
//! lock outlives a crash. A wildcard address overlaps every address of its
//! family on that port; the names in `/proc/net/unix` show which are held.
//! The holder is named by its process id (`SO_PEERCRED` on a connection to
//! its lock).

use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

use tracker_proto::canonical_ip;

/// The locks this process holds, released when it ends (or this is dropped).
#[derive(Default)]
pub struct InstanceLock {
    held: Vec<OwnedFd>,
}

impl InstanceLock {
    /// The locks held, for a hand-over to pass on.
    pub fn fds(&self) -> &[OwnedFd] {
        &self.held
    }

    /// Holds a lock a predecessor passed on (see `crate::handover`).
    pub fn adopt(&mut self, fd: OwnedFd) {
        self.held.push(fd);
    }

    /// Takes the lock of `addr` for `transport` ("udp" or "tcp"), or says
    /// which tracker holds an overlapping one, naming the address as
    /// `served` (such as "HTTPS"). An address with port 0 needs none (it is
    /// given a port no one holds).
    pub fn take(&mut self, transport: &str, served: &str, addr: SocketAddr) -> Result<(), String> {
        if addr.port() == 0 {
            return Ok(());
        }
        let name = lock_name(transport, addr);
        let overlapping = match held_names() {
            Ok(held) => held.into_iter().find(|other| overlaps(&name, other)),
            Err(_) => None,
        };
        let taken = match overlapping {
            Some(other) => Err(other),
            None => bind_listening(&name).map_err(|e| match e.raw_os_error() {
                Some(libc::EADDRINUSE) => name.clone(),
                _ => format!("{e}"),
            }),
        };
        match taken {
            Ok(fd) => {
                self.held.push(fd);
                Ok(())
            }
            Err(other) if other.starts_with(PREFIX) => {
                let holder = match holder_pid(&other) {
                    Some(pid) => format!("another tracker (pid {pid})"),
                    None => "another tracker".to_string(),
                };
                Err(format!(
                    "{holder} already serves {served} {addr}: two trackers on one port would \
                     split its clients, and so its swarms, between them (SO_REUSEPORT); stop \
                     it, or choose another port"
                ))
            }
            Err(e) => Err(format!(
                "cannot take the lock of {served} {addr} (an abstract Unix socket): {e}"
            )),
        }
    }
}

const PREFIX: &str = "tracker-lock/";

/// `tracker-lock/udp4/6969/127.0.0.1`, or `.../*` for a wildcard address.
fn lock_name(protocol: &str, addr: SocketAddr) -> String {
    let ip = canonical_ip(addr.ip());
    let family = if ip.is_ipv4() { 4 } else { 6 };
    let host = if ip.is_unspecified() {
        "*".to_string()
    } else {
        ip.to_string()
    };
    format!("{PREFIX}{protocol}{family}/{}/{host}", addr.port())
}

/// Whether two lock names cover a common address: the same protocol, family
/// and port, and the same address or a wildcard on either side.
fn overlaps(a: &str, b: &str) -> bool {
    let (Some((a_port, a_host)), Some((b_port, b_host))) = (a.rsplit_once('/'), b.rsplit_once('/'))
    else {
        return false;
    };
    // `a_port` is all before the address: protocol, family and port.
    a_port == b_port && (a_host == b_host || a_host == "*" || b_host == "*")
}

/// The tracker locks held in this network namespace, from `/proc/net/unix`
/// (where an abstract name is shown after an `@`).
fn held_names() -> io::Result<Vec<String>> {
    let table = std::fs::read_to_string("/proc/net/unix")?;
    Ok(table
        .lines()
        .filter_map(|line| line.split_whitespace().nth(7))
        .filter_map(|path| path.strip_prefix('@'))
        .filter(|name| name.starts_with(PREFIX))
        .map(str::to_string)
        .collect())
}

/// A `sockaddr_un` for the abstract name `name`, and its length.
fn abstract_address(name: &str) -> io::Result<(libc::sockaddr_un, libc::socklen_t)> {
    // SAFETY: sockaddr_un is plain data; all zeroes is a valid value.
    let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
    addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
    let bytes = name.as_bytes();
    // The first byte stays 0: that makes the name abstract.
    if bytes.len() + 1 > addr.sun_path.len() {
        return Err(io::Error::new(io::ErrorKind::InvalidInput, "name too long"));
    }
    for (to, from) in addr.sun_path[1..].iter_mut().zip(bytes) {
        *to = *from as libc::c_char;
    }
    let len = std::mem::size_of::<libc::sa_family_t>() + 1 + bytes.len();
    Ok((addr, len as libc::socklen_t))
}

fn unix_socket(flags: libc::c_int) -> io::Result<OwnedFd> {
    // SAFETY: socket() with constant arguments; the fd is ours.
    let fd = unsafe { libc::socket(libc::AF_UNIX, libc::SOCK_STREAM | flags, 0) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A socket bound to the abstract name and listening, so that another
/// process can connect to learn who holds it.
fn bind_listening(name: &str) -> io::Result<OwnedFd> {
    let (addr, len) = abstract_address(name)?;
    let fd = unix_socket(libc::SOCK_CLOEXEC)?;
    // SAFETY: a valid socket and address of `len` bytes.
    let rc = unsafe {
        libc::bind(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: as above. The backlog fills with the connections of trackers
    // that asked who holds it; once full, they can no longer be told.
    if unsafe { libc::listen(fd.as_raw_fd(), 64) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(fd)
}

/// The process id of whoever listens on the abstract name.
fn holder_pid(name: &str) -> Option<libc::pid_t> {
    let (addr, len) = abstract_address(name).ok()?;
    let fd = unix_socket(libc::SOCK_CLOEXEC | libc::SOCK_NONBLOCK).ok()?;
    // SAFETY: a valid socket and address of `len` bytes.
    let rc = unsafe {
        libc::connect(
            fd.as_raw_fd(),
            (&addr as *const libc::sockaddr_un).cast(),
            len,
        )
    };
    if rc != 0 {
        return None;
    }
    let cred = tracker_net::fd_pass::peer_credentials(&fd).ok()?;
    (cred.pid > 0).then_some(cred.pid)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_say_protocol_family_port_and_address() {
        let addr = |s: &str| s.parse::<SocketAddr>().unwrap();
        assert_eq!(
            lock_name("udp", addr("0.0.0.0:6969")),
            "tracker-lock/udp4/6969/*"
        );
        assert_eq!(
            lock_name("tcp", addr("[::]:6970")),
            "tracker-lock/tcp6/6970/*"
        );
        assert_eq!(
            lock_name("udp", addr("[::ffff:127.0.0.1]:1")),
            "tracker-lock/udp4/1/127.0.0.1"
        );
        assert_eq!(
            lock_name("tcp", addr("[::1]:80")),
            "tracker-lock/tcp6/80/::1"
        );
    }

    #[test]
    fn a_wildcard_overlaps_every_address_of_its_port_and_family() {
        let name = |s: &str| lock_name("udp", s.parse().unwrap());
        let any = name("0.0.0.0:7000");
        assert!(overlaps(&any, &name("127.0.0.1:7000")));
        assert!(overlaps(&name("127.0.0.1:7000"), &any));
        assert!(overlaps(&name("127.0.0.1:7000"), &name("127.0.0.1:7000")));
        assert!(!overlaps(&name("127.0.0.1:7000"), &name("127.0.0.2:7000")));
        assert!(!overlaps(&any, &name("0.0.0.0:7001")));
        assert!(!overlaps(&any, &name("[::]:7000")));
        assert!(!overlaps(
            &any,
            &lock_name("tcp", "0.0.0.0:7000".parse().unwrap())
        ));
    }

    #[test]
    fn a_second_lock_on_an_address_is_refused_naming_the_holder() {
        // A port no test tracker uses; the holder is this very process.
        let mut first = InstanceLock::default();
        first
            .take("udp", "UDP", "127.0.0.9:1".parse().unwrap())
            .unwrap();
        let mut second = InstanceLock::default();
        let err = second
            .take("udp", "UDP", "127.0.0.9:1".parse().unwrap())
            .unwrap_err();
        let me = std::process::id();
        assert!(err.contains(&format!("(pid {me})")), "{err}");
        let err = second
            .take("udp", "UDP", "0.0.0.0:1".parse().unwrap())
            .unwrap_err();
        assert!(err.contains("already serves UDP 0.0.0.0:1"), "{err}");
        second
            .take("udp", "UDP", "127.0.0.10:1".parse().unwrap())
            .unwrap();
        second
            .take("tcp", "HTTP", "127.0.0.9:1".parse().unwrap())
            .unwrap();
        drop(first);
        second
            .take("udp", "UDP", "127.0.0.9:1".parse().unwrap())
            .unwrap();
        // Port 0 takes nothing.
        let mut third = InstanceLock::default();
        third
            .take("udp", "UDP", "127.0.0.9:0".parse().unwrap())
            .unwrap();
        assert!(third.held.is_empty());
    }
}
