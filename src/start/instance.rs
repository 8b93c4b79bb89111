//! One tracker per port. Every worker binds its sockets with `SO_REUSEPORT`,
//! so a second tracker started on the same ports (by the same user) would be
//! let into the same groups, and the kernel would split the clients, and so
//! the swarms, between the two without a word.
//!
//! The kernel lets only sockets of one user share a port this way (a socket
//! of another user there makes the bind fail: the port is in use), so that
//! is what is looked for: once an address is bound for every worker, a
//! socket of this user on the same port and family, on the same address or
//! a wildcard on either side, that is not one of ours, shares the port, and
//! the start is refused. The kernel's own tables say so
//! (`/proc/net/{udp,tcp}{,6}`: each socket's address, port, user and inode),
//! so there is nothing another user could hold to stop a start, as the
//! abstract socket names of earlier versions could be. Binding first and
//! looking after means that of two trackers started at once, at least one
//! sees the other. The holder is named by its pid where this process may
//! look into it (`/proc/PID/fd`: root may), else by its user and inode.
//!
//! A socket that no process holds is one on its way out: the kernel tears
//! down a killed process's io_uring (and the sockets its requests still
//! name) after the process is gone, in a worker of its own. Until then it
//! is still in the port's group and takes its share of the datagrams, so
//! the start waits for it, at most `ORPHAN_WAIT`, rather than refusing a
//! restart just after a `kill -9`.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsFd, AsRawFd};
use std::time::{Duration, Instant};

/// How long a socket that no process holds may take to go away (see the
/// module's comment); seen to take well under a second.
const ORPHAN_WAIT: Duration = Duration::from_secs(10);

/// The sockets of a kernel table, as `/proc/net/udp` and its kin list them.
#[derive(Debug, PartialEq, Eq)]
struct Listed {
    local: SocketAddr,
    /// Connected to a remote address: not one that receives for a port.
    connected: bool,
    /// TCP's state (`0A` listening, `07` bound only); UDP's says nothing.
    state: u8,
    uid: libc::uid_t,
    inode: u64,
}

/// TCP states of a socket bound to a port for anyone: listening, or bound
/// and about to listen.
const TCP_LISTEN: u8 = 0x0a;
const TCP_CLOSE: u8 = 0x07;

/// Refuses to share `addr` (`transport` "udp" or "tcp", served as `served`,
/// such as "HTTPS"), just bound for every worker by `ours`, with a socket of
/// this user that is not one of them.
pub fn alone<S: AsFd>(
    transport: &str,
    served: &str,
    addr: SocketAddr,
    ours: &[S],
) -> Result<(), String> {
    let ours: Vec<u64> = ours
        .iter()
        .filter_map(|s| fstat_inode(s.as_fd().as_raw_fd()))
        .collect();
    let euid = crate::start::privileges::euid();
    let deadline = Instant::now() + ORPHAN_WAIT;
    loop {
        let Some(other) = other_socket(transport, served, addr, &ours, euid)? else {
            return Ok(());
        };
        let holder = match holder_pid(other.inode) {
            Some((pid, name)) if name == "tracker" => format!("another tracker (pid {pid})"),
            Some((pid, name)) => format!("another program ({name}, pid {pid})"),
            None if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(50));
                continue;
            }
            None => format!(
                "another program of uid {euid} (socket inode {}, which `ss -ap` names; no \
                 process this one may look into holds it, and it stayed {}s)",
                other.inode,
                ORPHAN_WAIT.as_secs()
            ),
        };
        return Err(format!(
            "{holder} already serves {served} {addr}: two trackers on one port would split its \
             clients, and so its swarms, between them (SO_REUSEPORT); stop it, or choose \
             another port"
        ));
    }
}

/// A socket of user `euid` in the kernel's table that shares `addr`'s port
/// and is not one of `ours`.
fn other_socket(
    transport: &str,
    served: &str,
    addr: SocketAddr,
    ours: &[u64],
    euid: libc::uid_t,
) -> Result<Option<Listed>, String> {
    let table = format!(
        "/proc/net/{transport}{}",
        if addr.is_ipv6() { "6" } else { "" }
    );
    let text = std::fs::read_to_string(&table).map_err(|e| {
        format!("cannot read {table}, to see whether another tracker serves {served} {addr}: {e}")
    })?;
    Ok(text.lines().skip(1).filter_map(parse_line).find(|s| {
        s.uid == euid
            && !s.connected
            && (transport != "tcp" || s.state == TCP_LISTEN || s.state == TCP_CLOSE)
            && s.local.port() == addr.port()
            && overlaps(s.local.ip(), addr.ip())
            && !ours.contains(&s.inode)
    }))
}

/// Whether two addresses of a family cover a common one: the same, or a
/// wildcard on either side.
fn overlaps(a: IpAddr, b: IpAddr) -> bool {
    a == b || a.is_unspecified() || b.is_unspecified()
}

/// One line of `/proc/net/{udp,tcp}{,6}`: `sl local remote st tx:rx tr:when
/// retrnsmt uid timeout inode ...`, addresses in hex as the kernel holds
/// them (32-bit words in this machine's byte order) and ports in hex.
fn parse_line(line: &str) -> Option<Listed> {
    let fields: Vec<&str> = line.split_whitespace().collect();
    let (local, remote) = (parse_addr(fields.get(1)?)?, parse_addr(fields.get(2)?)?);
    Some(Listed {
        local,
        connected: remote.port() != 0 || !remote.ip().is_unspecified(),
        state: u8::from_str_radix(fields.get(3)?, 16).ok()?,
        uid: fields.get(7)?.parse().ok()?,
        inode: fields.get(9)?.parse().ok()?,
    })
}

fn parse_addr(text: &str) -> Option<SocketAddr> {
    let (ip, port) = text.split_once(':')?;
    let port = u16::from_str_radix(port, 16).ok()?;
    let word = |i: usize| -> Option<[u8; 4]> {
        let hex = ip.get(i * 8..i * 8 + 8)?;
        Some(u32::from_str_radix(hex, 16).ok()?.to_ne_bytes())
    };
    let ip = match ip.len() {
        8 => IpAddr::V4(Ipv4Addr::from(word(0)?)),
        32 => {
            let mut bytes = [0u8; 16];
            for (i, chunk) in bytes.chunks_exact_mut(4).enumerate() {
                chunk.copy_from_slice(&word(i)?);
            }
            IpAddr::V6(Ipv6Addr::from(bytes))
        }
        _ => return None,
    };
    Some(SocketAddr::new(ip, port))
}

fn fstat_inode(fd: libc::c_int) -> Option<u64> {
    // SAFETY: stat is plain data that fstat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a stat to fill.
    (unsafe { libc::fstat(fd, &mut st) } == 0).then_some(st.st_ino)
}

/// The process (pid, name) holding the socket `inode`, among those this
/// one may look into.
fn holder_pid(inode: u64) -> Option<(u32, String)> {
    let wanted = format!("socket:[{inode}]");
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: u32 = entry.file_name().to_str()?.parse().ok()?;
            let holds = std::fs::read_dir(entry.path().join("fd"))
                .ok()?
                .flatten()
                .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|link| link == *wanted));
            let name = std::fs::read_to_string(entry.path().join("comm")).ok()?;
            holds.then(|| (pid, name.trim_end().to_string()))
        })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::UdpSocket;

    #[test]
    fn the_kernels_tables_are_read_as_it_writes_them() {
        let udp = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid  timeout inode ref pointer drops\n\
                   \x20 1: 0100007F:1B39 00000000:0000 07 00000000:00000000 00:00000000 00000000     0        0 4242 2 0000000000000000 0\n";
        let listed = parse_line(udp.lines().nth(1).unwrap()).unwrap();
        assert_eq!(
            listed,
            Listed {
                local: "127.0.0.1:6969".parse().unwrap(),
                connected: false,
                state: 7,
                uid: 0,
                inode: 4242,
            }
        );
        let tcp6 = "   0: 00000000000000000000000001000000:1B3A 00000000000000000000000000000000:0000 0A 00000000:00000000 00:00000000 00000000  1000        0 77 1 0000000000000000 100 0 0 10 0";
        let listed = parse_line(tcp6).unwrap();
        assert_eq!(listed.local, "[::1]:6970".parse().unwrap());
        assert_eq!(
            (listed.state, listed.uid, listed.inode),
            (TCP_LISTEN, 1000, 77)
        );
        let connected = "   1: 0100007F:1B39 0200007F:D431 01 00000000:00000000 00:00000000 00000000     0        0 5 1";
        assert!(parse_line(connected).unwrap().connected);
        assert_eq!(parse_line("garbage"), None);
    }

    #[test]
    fn a_socket_of_this_user_on_the_port_is_refused_naming_its_process() {
        let first =
            tracker_net::udp::bind_reuseport("127.0.0.9:0".parse().unwrap(), 1 << 16).unwrap();
        let addr = first.local_addr().unwrap();
        let second = tracker_net::udp::bind_reuseport(addr, 1 << 16).unwrap();
        // Both ours: alone.
        alone("udp", "UDP", addr, &[&first, &second]).unwrap();
        // The first another's: refused, named.
        let err = alone("udp", "UDP", addr, &[&second]).unwrap_err();
        let me = std::process::id();
        assert!(
            err.contains(&format!("pid {me})")) && err.contains("already serves UDP"),
            "{err}"
        );
        // A wildcard address overlaps it.
        let any = SocketAddr::from(([0, 0, 0, 0], addr.port()));
        let wildcard = tracker_net::udp::bind_reuseport(any, 1 << 16).unwrap();
        assert!(alone("udp", "UDP", any, &[&wildcard]).is_err());
        // Another address, or another protocol on the port: alone.
        let other = UdpSocket::bind("127.0.0.10:0").unwrap();
        alone("udp", "UDP", other.local_addr().unwrap(), &[&other]).unwrap();
        drop(wildcard);
        let tcp = tracker_net::tcp::bind_reuseport("127.0.0.9:0".parse().unwrap()).unwrap();
        let addr = tcp.local_addr().unwrap();
        alone("tcp", "HTTP", addr, &[&tcp]).unwrap();
        // A TCP listener of this user on the port, not ours: refused.
        let tcp2 = tracker_net::tcp::bind_reuseport(addr).unwrap();
        assert!(alone("tcp", "HTTP", addr, &[&tcp2]).is_err());
        alone("tcp", "HTTP", addr, &[&tcp, &tcp2]).unwrap();
    }
}
