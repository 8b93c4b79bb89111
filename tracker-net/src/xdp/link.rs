//! What the host says of a network interface: its index, how many queues
//! XDP may see on it, its addresses, its MTU, its Ethernet address and
//! whether it takes loopback sources. Plain syscalls (ioctl on a throwaway
//! datagram socket, getifaddrs, /proc/sys), no netlink.

use std::ffi::CString;
use std::io;
use std::mem::{size_of, zeroed};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// `ETHTOOL_GCHANNELS` from include/uapi/linux/ethtool.h (not in libc).
const ETHTOOL_GCHANNELS: u32 = 0x0000_003c;

/// `struct ethtool_channels` from include/uapi/linux/ethtool.h: nine `__u32`.
#[repr(C)]
#[derive(Default)]
struct EthtoolChannels {
    cmd: u32,
    max_rx: u32,
    max_tx: u32,
    max_other: u32,
    max_combined: u32,
    rx_count: u32,
    tx_count: u32,
    other_count: u32,
    combined_count: u32,
}

const _: () = assert!(size_of::<EthtoolChannels>() == 36);

/// The interface's index (`if_nametoindex`).
pub fn index_of(name: &str) -> io::Result<u32> {
    let c_name = c_name(name)?;
    // SAFETY: a NUL-terminated string that lives across the call.
    let index = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
    if index == 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("interface {name}: no index: {err}"),
        ));
    }
    Ok(index)
}

/// How many queues XDP may see on the interface: ETHTOOL_GCHANNELS (the
/// larger of its combined and rx counts), else the count of
/// `/sys/class/net/<name>/queues/rx-*` entries, else 1.
///
/// The sysfs fallback describes the network namespace that mounted `/sys`,
/// which may not be the calling thread's; it also counts allocated queues,
/// which can exceed the ones in use (a veth allocates one per CPU and uses
/// one unless told otherwise). ETHTOOL_GCHANNELS has neither problem, and
/// most drivers that do XDP answer it (veth since 5.9).
pub fn queue_count(name: &str) -> io::Result<u32> {
    let mut channels = EthtoolChannels {
        cmd: ETHTOOL_GCHANNELS,
        ..EthtoolChannels::default()
    };
    let ifreq_data = &mut channels as *mut EthtoolChannels as *mut libc::c_char;
    let socket = control_socket()?;
    let mut ifreq = ifreq_for(name)?;
    ifreq.ifr_ifru.ifru_data = ifreq_data;
    // SAFETY: SIOCETHTOOL with a valid ifreq whose ifru_data points at an
    // ethtool_channels that outlives the call; the kernel writes at most
    // size_of::<ethtool_channels>() bytes there.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCETHTOOL as _, &mut ifreq) };
    if rc == 0 {
        let count = channels.combined_count.max(channels.rx_count);
        if count > 0 {
            return Ok(count);
        }
    } else {
        let err = io::Error::last_os_error();
        if err.raw_os_error() == Some(libc::ENODEV) {
            return Err(io::Error::new(
                err.kind(),
                format!("interface {name}: queue count: {err}"),
            ));
        }
        // EOPNOTSUPP and the like: the driver has no get_channels.
    }
    Ok(sysfs_rx_queues(name).unwrap_or(1).max(1))
}

fn sysfs_rx_queues(name: &str) -> Option<u32> {
    let dir = std::fs::read_dir(format!("/sys/class/net/{name}/queues")).ok()?;
    let count = dir
        .filter_map(Result::ok)
        .filter(|entry| entry.file_name().to_string_lossy().starts_with("rx-"))
        .count();
    u32::try_from(count).ok().filter(|&n| n > 0)
}

/// The interface's addresses (getifaddrs), IPv4 and IPv6, in the order the
/// kernel lists them.
pub fn addresses(name: &str) -> io::Result<Vec<IpAddr>> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head that we free below.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("interface {name}: getifaddrs: {err}"),
        ));
    }
    struct Freed(*mut libc::ifaddrs);
    impl Drop for Freed {
        fn drop(&mut self) {
            // SAFETY: the list getifaddrs returned, freed once.
            unsafe { libc::freeifaddrs(self.0) }
        }
    }
    let list = Freed(head);
    let mut found = Vec::new();
    let mut cursor = list.0;
    while !cursor.is_null() {
        // SAFETY: a node of the list getifaddrs returned, alive until
        // freeifaddrs; its name is a NUL-terminated string and its address,
        // when not null, a sockaddr of the family it names.
        unsafe {
            let entry = &*cursor;
            cursor = entry.ifa_next;
            if entry.ifa_name.is_null() || entry.ifa_addr.is_null() {
                continue;
            }
            if std::ffi::CStr::from_ptr(entry.ifa_name).to_bytes() != name.as_bytes() {
                continue;
            }
            match i32::from((*entry.ifa_addr).sa_family) {
                libc::AF_INET => {
                    let sin = &*(entry.ifa_addr as *const libc::sockaddr_in);
                    found.push(IpAddr::V4(Ipv4Addr::from(u32::from_be(
                        sin.sin_addr.s_addr,
                    ))));
                }
                libc::AF_INET6 => {
                    let sin6 = &*(entry.ifa_addr as *const libc::sockaddr_in6);
                    found.push(IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr)));
                }
                _ => {}
            }
        }
    }
    Ok(found)
}

/// The interface's MTU (SIOCGIFMTU): the largest IP packet, so a frame is
/// up to MTU + 14 (Ethernet) + 4 (one VLAN tag) bytes.
pub fn mtu(name: &str) -> io::Result<u32> {
    let socket = control_socket()?;
    let mut ifreq = ifreq_for(name)?;
    // SAFETY: SIOCGIFMTU with a valid ifreq; the kernel writes ifru_mtu.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFMTU as _, &mut ifreq) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("interface {name}: MTU: {err}"),
        ));
    }
    // SAFETY: SIOCGIFMTU answered through ifru_mtu.
    let mtu = unsafe { ifreq.ifr_ifru.ifru_mtu };
    u32::try_from(mtu).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("interface {name}: MTU {mtu}"),
        )
    })
}

/// The interface's Ethernet address (SIOCGIFHWADDR). An interface of
/// another link type (a tunnel, say) is an error: the XDP program reads
/// Ethernet headers.
pub fn mac(name: &str) -> io::Result<[u8; 6]> {
    let socket = control_socket()?;
    let mut ifreq = ifreq_for(name)?;
    // SAFETY: SIOCGIFHWADDR with a valid ifreq; the kernel writes
    // ifru_hwaddr.
    let rc = unsafe { libc::ioctl(socket.as_raw_fd(), libc::SIOCGIFHWADDR as _, &mut ifreq) };
    if rc != 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("interface {name}: link address: {err}"),
        ));
    }
    // SAFETY: SIOCGIFHWADDR answered through ifru_hwaddr.
    let address = unsafe { ifreq.ifr_ifru.ifru_hwaddr };
    if address.sa_family != libc::ARPHRD_ETHER {
        return Err(io::Error::new(
            io::ErrorKind::Unsupported,
            format!(
                "interface {name} is not Ethernet (link type {})",
                address.sa_family
            ),
        ));
    }
    let mut mac = [0u8; 6];
    for (to, from) in mac.iter_mut().zip(address.sa_data) {
        *to = from as u8;
    }
    Ok(mac)
}

/// Whether the kernel takes IPv4 packets from 127.0.0.0/8 that arrive on
/// the interface (`route_localnet`, in `net.ipv4.conf.all` or the
/// interface's own: either one set); by default it drops them as martians.
/// Read from /proc/sys, which shows the reading thread's network namespace.
pub fn route_localnet(name: &str) -> io::Result<bool> {
    c_name(name)?;
    let mut set = false;
    for scope in ["all", name] {
        let path = format!("/proc/sys/net/ipv4/conf/{scope}/route_localnet");
        let text = std::fs::read_to_string(&path).map_err(|err| {
            io::Error::new(err.kind(), format!("interface {name}: {path}: {err}"))
        })?;
        set |= text.trim() != "0";
    }
    Ok(set)
}

fn c_name(name: &str) -> io::Result<CString> {
    if name.is_empty() || name.len() >= libc::IFNAMSIZ {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!(
                "interface name {name:?}: must be 1 to {} bytes",
                libc::IFNAMSIZ - 1
            ),
        ));
    }
    CString::new(name).map_err(|_| {
        io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("interface name {name:?} holds a NUL byte"),
        )
    })
}

fn ifreq_for(name: &str) -> io::Result<libc::ifreq> {
    let c_name = c_name(name)?;
    // SAFETY: ifreq is plain data (a name and a union of plain data and a
    // pointer) for which all-zero is valid.
    let mut ifreq: libc::ifreq = unsafe { zeroed() };
    // c_name is shorter than IFNAMSIZ (checked), so the name stays
    // NUL-terminated in the zeroed array.
    for (slot, &byte) in ifreq.ifr_name.iter_mut().zip(c_name.as_bytes()) {
        *slot = byte as libc::c_char;
    }
    Ok(ifreq)
}

/// A datagram socket to hang interface ioctls on.
fn control_socket() -> io::Result<OwnedFd> {
    // SAFETY: plain socket(2).
    let fd = unsafe { libc::socket(libc::AF_INET, libc::SOCK_DGRAM | libc::SOCK_CLOEXEC, 0) };
    if fd < 0 {
        let err = io::Error::last_os_error();
        return Err(io::Error::new(
            err.kind(),
            format!("socket for interface ioctls: {err}"),
        ));
    }
    // SAFETY: a fresh fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Network namespaces and veth pairs for tests (root only), removed when
/// dropped. Shared with `xsk`'s tests.
#[cfg(test)]
pub(crate) mod testnet {
    use std::os::fd::AsRawFd;
    use std::process::Command;
    use std::sync::atomic::{AtomicU32, Ordering};

    static NEXT: AtomicU32 = AtomicU32::new(0);

    /// Runs `ip` with these arguments; panics with its stderr on failure.
    pub fn ip(args: &[&str]) -> String {
        let out = Command::new("ip").args(args).output().unwrap();
        assert!(
            out.status.success(),
            "ip {}: {}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// A network namespace named after the process and a counter, deleted
    /// (with the interfaces in it) when dropped.
    pub struct Netns {
        pub name: String,
    }

    impl Netns {
        pub fn new(tag: &str) -> Netns {
            let name = format!(
                "trk-{tag}-{}-{}",
                std::process::id(),
                NEXT.fetch_add(1, Ordering::Relaxed)
            );
            ip(&["netns", "add", &name]);
            Netns { name }
        }

        /// Runs `f` on a fresh thread moved into this namespace (setns
        /// moves the calling thread only). Sockets made there stay in the
        /// namespace wherever they are used afterwards.
        pub fn run<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
            let path = format!("/var/run/netns/{}", self.name);
            std::thread::scope(|scope| {
                scope
                    .spawn(|| {
                        let ns = std::fs::File::open(&path).unwrap();
                        // SAFETY: a namespace fd; changes this thread only.
                        let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
                        assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
                        f()
                    })
                    .join()
                    .unwrap_or_else(|panic| std::panic::resume_unwind(panic))
            })
        }
    }

    impl Drop for Netns {
        fn drop(&mut self) {
            let _ = Command::new("ip")
                .args(["netns", "del", &self.name])
                .status();
        }
    }

    /// The MAC address of `dev` in `ns`.
    pub fn mac_of(ns: &Netns, dev: &str) -> [u8; 6] {
        let out = ip(&["-n", &ns.name, "-br", "link", "show", "dev", dev]);
        let text = out.split_whitespace().nth(2).unwrap();
        let mut mac = [0u8; 6];
        for (byte, part) in mac.iter_mut().zip(text.split(':')) {
            *byte = u8::from_str_radix(part, 16).unwrap();
        }
        mac
    }
}

#[cfg(test)]
mod tests {
    use super::testnet::{ip, mac_of, Netns};
    use super::*;

    #[test]
    fn rejects_bad_names() {
        assert_eq!(
            index_of("").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            index_of("a-name-far-too-long").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        assert_eq!(
            index_of("a\0b").unwrap_err().kind(),
            io::ErrorKind::InvalidInput
        );
        let err = index_of("trk-no-such0").unwrap_err();
        assert!(err.to_string().contains("trk-no-such0"), "{err}");
    }

    #[test]
    fn veth_in_a_namespace() {
        let ns = Netns::new("link");
        let n = ns.name.as_str();
        ip(&[
            "-n",
            n,
            "link",
            "add",
            "name",
            "qa",
            "numtxqueues",
            "4",
            "numrxqueues",
            "4",
            "type",
            "veth",
            "peer",
            "name",
            "qb",
            "numtxqueues",
            "4",
            "numrxqueues",
            "4",
        ]);
        ip(&[
            "-n", n, "link", "add", "name", "sa", "type", "veth", "peer", "name", "sb",
        ]);
        ip(&["-n", n, "link", "set", "qa", "mtu", "1400"]);
        ip(&["-n", n, "addr", "add", "192.0.2.7/24", "dev", "qa"]);
        ip(&[
            "-n",
            n,
            "addr",
            "add",
            "2001:db8::7/64",
            "dev",
            "qa",
            "nodad",
        ]);
        ip(&["-n", n, "link", "set", "qa", "up"]);
        ip(&["-n", n, "link", "set", "qb", "up"]);

        let listed = ip(&["-n", n, "-o", "link", "show", "dev", "qa"]);
        let expected_index: u32 = listed.split(':').next().unwrap().trim().parse().unwrap();

        ns.run(|| {
            assert_eq!(index_of("qa").unwrap(), expected_index);
            assert_eq!(queue_count("qa").unwrap(), 4);
            // A veth made without queue counts uses one (it allocates one
            // per CPU: the ethtool answer, not sysfs, must win).
            assert_eq!(queue_count("sa").unwrap(), 1);
            assert_eq!(mtu("qa").unwrap(), 1400);
            assert_eq!(mtu("sa").unwrap(), 1500);
            let addrs = addresses("qa").unwrap();
            assert!(addrs.contains(&"192.0.2.7".parse().unwrap()), "{addrs:?}");
            assert!(addrs.contains(&"2001:db8::7".parse().unwrap()), "{addrs:?}");
            assert!(!addrs.contains(&"127.0.0.1".parse().unwrap()));
            assert!(addresses("sb").unwrap().is_empty());
            assert!(addresses("trk-no-such0").unwrap().is_empty());

            assert_eq!(mac("qa").unwrap(), mac_of(&ns, "qa"));
            assert!(!route_localnet("qa").unwrap());
            std::fs::write("/proc/sys/net/ipv4/conf/qa/route_localnet", "1").unwrap();
            assert!(route_localnet("qa").unwrap());
            assert!(!route_localnet("qb").unwrap());
            std::fs::write("/proc/sys/net/ipv4/conf/all/route_localnet", "1").unwrap();
            assert!(route_localnet("qb").unwrap());
            assert!(mac("lo").unwrap_err().to_string().contains("not Ethernet"));

            let err = mtu("trk-no-such0").unwrap_err();
            assert!(err.to_string().contains("trk-no-such0"), "{err}");
            let err = queue_count("trk-no-such0").unwrap_err();
            assert!(err.to_string().contains("trk-no-such0"), "{err}");
        });
    }
}
