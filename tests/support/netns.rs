//! Two hosts on one machine: two network namespaces joined by a veth pair,
//! for tests that need a real link between the tracker and its clients
//! (AF_XDP takes frames from an interface; loopback has none). Root only.
//!
//! A thread moved into a namespace (`setns`) creates sockets there, and
//! they stay there wherever they are used afterwards; a process started
//! from such a thread starts in that namespace. So the tracker is started
//! from a thread in the server's namespace ([`TwoHosts::srv`]), clients
//! make their sockets in the client's ([`TwoHosts::cli`]), and both are then
//! used from the test's own thread.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::process::{Command, Output, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::Tracker;

/// The server's end of the veth pair, in the server's namespace.
pub const SRV_DEV: &str = "veth-t0";
/// The client's end, in the client's namespace.
pub const CLI_DEV: &str = "veth-c0";

static NEXT: AtomicU32 = AtomicU32::new(0);

/// Which of the two namespaces.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Side {
    Srv,
    Cli,
}

/// Two network namespaces, "srv" and "cli", joined by a veth pair
/// ([`SRV_DEV`] in srv, [`CLI_DEV`] in cli), each end up with an IPv4 /24
/// and an IPv6 /64 (no duplicate address detection), loopback up in both.
/// Both namespaces, and the veth pair with them, are deleted when it is
/// dropped.
pub struct TwoHosts {
    /// The namespaces' names (under /run/netns).
    pub srv_ns: String,
    pub cli_ns: String,
    /// The server's addresses on [`SRV_DEV`] (x.x.x.1, xx::1).
    pub srv_v4: Ipv4Addr,
    pub srv_v6: Ipv6Addr,
    /// The client's addresses on [`CLI_DEV`] (x.x.x.2, xx::2).
    pub cli_v4: Ipv4Addr,
    pub cli_v6: Ipv6Addr,
}

impl TwoHosts {
    /// Creates both namespaces and the link between them; panics with what
    /// `ip` said when any step fails (not root, no `ip`, no veth).
    pub fn new() -> TwoHosts {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let pid = std::process::id();
        // A subnet per guard, so that captures and logs tell them apart.
        let third = (n % 250) as u8;
        let hosts = TwoHosts {
            srv_ns: format!("trk-{pid}-{n}-srv"),
            cli_ns: format!("trk-{pid}-{n}-cli"),
            srv_v4: Ipv4Addr::new(10, 201, third, 1),
            cli_v4: Ipv4Addr::new(10, 201, third, 2),
            srv_v6: Ipv6Addr::new(0xfd00, 0x201, third.into(), 0, 0, 0, 0, 1),
            cli_v6: Ipv6Addr::new(0xfd00, 0x201, third.into(), 0, 0, 0, 0, 2),
        };
        // Names left by a test process that died with the same pid.
        let _ = quiet_ip(&["netns", "del", &hosts.srv_ns]);
        let _ = quiet_ip(&["netns", "del", &hosts.cli_ns]);
        // From here on, a panic drops `hosts`, which removes what was made.
        ip(&["netns", "add", &hosts.srv_ns]);
        ip(&["netns", "add", &hosts.cli_ns]);
        let (srv, cli) = (hosts.srv_ns.as_str(), hosts.cli_ns.as_str());
        ip(&[
            "-n", srv, "link", "add", "name", SRV_DEV, "type", "veth", "peer", "name", CLI_DEV,
            "netns", cli,
        ]);
        for (ns, dev, v4, v6) in [
            (srv, SRV_DEV, hosts.srv_v4, hosts.srv_v6),
            (cli, CLI_DEV, hosts.cli_v4, hosts.cli_v6),
        ] {
            ip(&["-n", ns, "link", "set", "dev", "lo", "up"]);
            ip(&["-n", ns, "addr", "add", &format!("{v4}/24"), "dev", dev]);
            ip(&[
                "-n",
                ns,
                "-6",
                "addr",
                "add",
                &format!("{v6}/64"),
                "dev",
                dev,
                "nodad",
            ]);
            ip(&["-n", ns, "link", "set", "dev", dev, "up"]);
        }
        for (ns, dev) in [(srv, SRV_DEV), (cli, CLI_DEV)] {
            wait_for(Duration::from_secs(5), &format!("{dev} up in {ns}"), || {
                ip(&["-n", ns, "-br", "link", "show", "dev", dev]).contains("LOWER_UP")
            });
        }
        hosts
    }

    pub fn ns(&self, side: Side) -> &str {
        match side {
            Side::Srv => &self.srv_ns,
            Side::Cli => &self.cli_ns,
        }
    }

    /// The veth end in `side`'s namespace.
    pub fn dev(side: Side) -> &'static str {
        match side {
            Side::Srv => SRV_DEV,
            Side::Cli => CLI_DEV,
        }
    }

    /// `side`'s address of `ip`'s family on the link.
    pub fn addr(&self, side: Side, v6: bool) -> IpAddr {
        match (side, v6) {
            (Side::Srv, false) => self.srv_v4.into(),
            (Side::Srv, true) => self.srv_v6.into(),
            (Side::Cli, false) => self.cli_v4.into(),
            (Side::Cli, true) => self.cli_v6.into(),
        }
    }

    /// Runs `f` on a new thread moved into `side`'s namespace, and returns
    /// what it returns (a panic in `f` is this call's panic). Sockets made
    /// there, and processes started there, belong to that namespace.
    pub fn run_in<T: Send>(&self, side: Side, f: impl FnOnce() -> T + Send) -> T {
        run_in_netns(self.ns(side), f)
    }

    /// [`run_in`](Self::run_in) the server's namespace.
    pub fn srv<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.run_in(Side::Srv, f)
    }

    /// [`run_in`](Self::run_in) the client's namespace.
    pub fn cli<T: Send>(&self, f: impl FnOnce() -> T + Send) -> T {
        self.run_in(Side::Cli, f)
    }

    /// `ip netns exec NS program args...`, its output collected.
    pub fn exec(&self, side: Side, program: &str, args: &[&str]) -> Output {
        Command::new("ip")
            .args(["netns", "exec", self.ns(side), program])
            .args(args)
            .stdin(Stdio::null())
            .output()
            .unwrap_or_else(|e| panic!("run ip netns exec … {program}: {e}"))
    }

    /// `ip -n NS args...`; panics with its stderr when it fails.
    pub fn ip(&self, side: Side, args: &[&str]) -> String {
        let mut all = vec!["-n", self.ns(side)];
        all.extend_from_slice(args);
        ip(&all)
    }

    /// The MAC address of `side`'s veth end.
    pub fn mac(&self, side: Side) -> [u8; 6] {
        let out = self.ip(side, &["-br", "link", "show", "dev", Self::dev(side)]);
        let text = out
            .split_whitespace()
            .nth(2)
            .unwrap_or_else(|| panic!("no MAC address in {out:?}"));
        parse_mac(text).unwrap_or_else(|| panic!("not a MAC address: {text:?} in {out:?}"))
    }

    /// The interface index of `side`'s veth end, in its namespace.
    pub fn ifindex(&self, side: Side) -> u32 {
        let out = self.ip(side, &["-o", "link", "show", "dev", Self::dev(side)]);
        out.split(':')
            .next()
            .and_then(|n| n.trim().parse().ok())
            .unwrap_or_else(|| panic!("no interface index in {out:?}"))
    }

    /// What `ip -d link show` says of an XDP program on `side`'s veth end:
    /// the lines that name one, or None when none is attached.
    pub fn xdp_attached(&self, side: Side) -> Option<String> {
        let out = self.ip(side, &["-d", "link", "show", "dev", Self::dev(side)]);
        xdp_in_link_show(&out)
    }

    /// The id of the XDP program attached to `side`'s veth end (`prog/xdp
    /// id N` in `ip -d link show`), or None when none is attached.
    pub fn xdp_prog_id(&self, side: Side) -> Option<u32> {
        let out = self.ip(side, &["-d", "link", "show", "dev", Self::dev(side)]);
        xdp_prog_id_in_link_show(&out)
    }

    /// Waits up to `wait` for `side`'s veth end to have no XDP program (a
    /// BPF link goes when the last descriptor to it closes, which follows
    /// the process's exit closely but not at once); panics with what `ip`
    /// shows when one stays.
    pub fn wait_no_xdp(&self, side: Side, wait: Duration, context: &str) {
        let deadline = Instant::now() + wait;
        loop {
            match self.xdp_attached(side) {
                None => return,
                Some(lines) if Instant::now() >= deadline => panic!(
                    "{context}: an XDP program is still attached to {} after {wait:?}:\n{lines}",
                    Self::dev(side)
                ),
                Some(_) => std::thread::sleep(Duration::from_millis(50)),
            }
        }
    }

    /// Forgets every neighbour (ARP and ND) entry in `side`'s namespace.
    pub fn flush_neighbours(&self, side: Side) {
        self.ip(side, &["neigh", "flush", "dev", Self::dev(side)]);
        self.ip(side, &["-6", "neigh", "flush", "dev", Self::dev(side)]);
    }

    /// `side`'s neighbour table, as `ip neigh show` prints it.
    pub fn neighbours(&self, side: Side) -> String {
        let mut text = self.ip(side, &["neigh", "show", "dev", Self::dev(side)]);
        text.push_str(&self.ip(side, &["-6", "neigh", "show", "dev", Self::dev(side)]));
        text
    }

    /// The sum of a metric's samples, read from inside the server's
    /// namespace (where the tracker's metrics listener is).
    pub fn metric(&self, tracker: &Tracker, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.srv(|| tracker.metric(name, labels))
    }

    /// The whole Prometheus text of a tracker in the server's namespace.
    pub fn metrics_text(&self, tracker: &Tracker) -> String {
        let addr = tracker.metrics.expect("a tracker started with .metrics()");
        self.srv(
            || match super::wire::http_get(addr, "/metrics", Duration::from_secs(5)) {
                Some((200, body)) => String::from_utf8(body).expect("UTF-8 metrics"),
                other => panic!("GET /metrics from {addr}: {other:?}"),
            },
        )
    }
}

impl Drop for TwoHosts {
    fn drop(&mut self) {
        // Deleting a namespace deletes its interfaces, and a veth's peer
        // with it.
        let _ = quiet_ip(&["netns", "del", &self.srv_ns]);
        let _ = quiet_ip(&["netns", "del", &self.cli_ns]);
    }
}

/// Runs `f` on a new thread moved into the named namespace, and returns
/// what it returns (a panic in `f` is this call's panic).
pub fn run_in_netns<T: Send>(ns: &str, f: impl FnOnce() -> T + Send) -> T {
    let path = format!("/run/netns/{ns}");
    std::thread::scope(|scope| {
        let thread = scope.spawn(|| {
            let ns = std::fs::File::open(&path).unwrap_or_else(|e| panic!("open {path}: {e}"));
            // SAFETY: a namespace file descriptor; setns moves this thread
            // alone, which ends with the scope.
            let rc = unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) };
            assert_eq!(rc, 0, "setns {path}: {}", std::io::Error::last_os_error());
            f()
        });
        match thread.join() {
            Ok(value) => value,
            Err(panic) => std::panic::resume_unwind(panic),
        }
    })
}

/// Runs `ip` with these arguments; panics with its stderr when it fails.
pub fn ip(args: &[&str]) -> String {
    let out = quiet_ip(args).unwrap_or_else(|e| panic!("cannot run `ip` (iproute2): {e}"));
    assert!(
        out.status.success(),
        "ip {} failed ({}): {}",
        args.join(" "),
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

fn quiet_ip(args: &[&str]) -> std::io::Result<Output> {
    Command::new("ip").args(args).stdin(Stdio::null()).output()
}

/// The lines of `ip -d link show` output that say an XDP program is
/// attached (`xdp`, `xdpgeneric`, `xdpdrv`, `xdpoffload` or `xdpmulti`
/// after the MTU; `prog/xdp id N` below), or None.
pub fn xdp_in_link_show(out: &str) -> Option<String> {
    let lines: Vec<&str> = out
        .lines()
        .filter(|line| {
            line.split_whitespace().any(|word| {
                matches!(
                    word,
                    "xdp" | "xdpgeneric" | "xdpdrv" | "xdpoffload" | "xdpmulti"
                ) || word.starts_with("prog/xdp")
            })
        })
        .collect();
    (!lines.is_empty()).then(|| lines.join("\n"))
}

/// The N of `prog/xdp id N` in `ip -d link show` output, or None.
pub fn xdp_prog_id_in_link_show(out: &str) -> Option<u32> {
    let words: Vec<&str> = out.split_whitespace().collect();
    words.windows(3).find_map(|w| {
        if w[0].starts_with("prog/xdp") && w[1] == "id" {
            w[2].parse().ok()
        } else {
            None
        }
    })
}

fn parse_mac(text: &str) -> Option<[u8; 6]> {
    let mut mac = [0u8; 6];
    let mut parts = text.split(':');
    for byte in mac.iter_mut() {
        *byte = u8::from_str_radix(parts.next()?, 16).ok()?;
    }
    parts.next().is_none().then_some(mac)
}

/// Polls `done` every 20 ms until it holds; panics naming `what` after `wait`.
pub fn wait_for(wait: Duration, what: &str, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + wait;
    while !done() {
        assert!(Instant::now() < deadline, "{what}: not within {wait:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// An AF_PACKET socket that sends whole Ethernet frames, as written, out of
/// one interface. Made in a namespace ([`TwoHosts::run_in`]), with that
/// namespace's interface index. It receives nothing.
pub struct RawLink {
    fd: OwnedFd,
    ifindex: u32,
}

impl RawLink {
    pub fn new(ifindex: u32) -> RawLink {
        // Protocol 0: a socket that sends only (none of the link's frames
        // are queued to it).
        // SAFETY: plain socket(2).
        let fd = unsafe { libc::socket(libc::AF_PACKET, libc::SOCK_RAW | libc::SOCK_CLOEXEC, 0) };
        assert!(
            fd >= 0,
            "socket(AF_PACKET, SOCK_RAW): {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a descriptor we own from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        let link = RawLink { fd, ifindex };
        let addr = link.address();
        // SAFETY: a sockaddr_ll of the size given.
        let rc = unsafe {
            libc::bind(
                link.fd.as_raw_fd(),
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        assert_eq!(
            rc,
            0,
            "bind AF_PACKET to interface {ifindex}: {}",
            std::io::Error::last_os_error()
        );
        link
    }

    fn address(&self) -> libc::sockaddr_ll {
        // SAFETY: sockaddr_ll is plain data; all zeros is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_ifindex = self.ifindex as i32;
        addr
    }

    /// Sends `frame` (Ethernet header included) as it is.
    pub fn send(&self, frame: &[u8]) -> std::io::Result<()> {
        let addr = self.address();
        // SAFETY: `frame` is valid for its length; the address is a
        // sockaddr_ll of the size given.
        let n = unsafe {
            libc::sendto(
                self.fd.as_raw_fd(),
                frame.as_ptr() as *const libc::c_void,
                frame.len(),
                0,
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        if n < 0 {
            return Err(std::io::Error::last_os_error());
        }
        assert_eq!(n as usize, frame.len(), "a frame sent in part");
        Ok(())
    }
}

/// An AF_PACKET socket that receives every frame arriving on one
/// interface, with the 802.1Q tag the kernel took off it (kept in the
/// packet's metadata and given back as `PACKET_AUXDATA`). Made in a
/// namespace ([`TwoHosts::run_in`]). Frames the host sends are left out.
pub struct Capture {
    fd: OwnedFd,
}

/// `struct tpacket_auxdata` (linux/if_packet.h).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct AuxData {
    status: u32,
    len: u32,
    snaplen: u32,
    mac: u16,
    net: u16,
    vlan_tci: u16,
    vlan_tpid: u16,
}

/// linux/if_packet.h: the socket option, and the status bit that says
/// `vlan_tci` holds a tag.
const PACKET_AUXDATA: libc::c_int = 8;
const TP_STATUS_VLAN_VALID: u32 = 1 << 4;
/// The frame's transport checksum is left to the hardware (the sender's
/// stack handed it over as CHECKSUM_PARTIAL, as a veth does): its field
/// holds the pseudo-header's sum only.
const TP_STATUS_CSUMNOTREADY: u32 = 1 << 3;
const ETH_P_ALL: u16 = 0x0003;

/// A frame a [`Capture`] received.
#[derive(Debug)]
pub struct Captured {
    /// The frame as the stack has it: without the VLAN tag, if it had one.
    pub frame: Vec<u8>,
    /// The tag's TCI (priority, DEI, VLAN id), if the frame came with one.
    pub vlan: Option<u16>,
    /// Whether the sender left the transport checksum unfinished for the
    /// hardware (a host's own stack over a veth does; AF_XDP's copy mode
    /// sends the frame as written).
    pub checksum_partial: bool,
}

impl Capture {
    pub fn new(ifindex: u32) -> Capture {
        // SAFETY: plain socket(2).
        let fd = unsafe {
            libc::socket(
                libc::AF_PACKET,
                libc::SOCK_RAW | libc::SOCK_CLOEXEC,
                i32::from(ETH_P_ALL.to_be()),
            )
        };
        assert!(
            fd >= 0,
            "socket(AF_PACKET, SOCK_RAW, ETH_P_ALL): {}",
            std::io::Error::last_os_error()
        );
        // SAFETY: a descriptor we own from here on.
        let fd = unsafe { OwnedFd::from_raw_fd(fd) };
        // SAFETY: sockaddr_ll is plain data; all zeros is a valid value.
        let mut addr: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
        addr.sll_family = libc::AF_PACKET as u16;
        addr.sll_protocol = ETH_P_ALL.to_be();
        addr.sll_ifindex = ifindex as i32;
        // SAFETY: a sockaddr_ll of the size given.
        let rc = unsafe {
            libc::bind(
                fd.as_raw_fd(),
                &addr as *const libc::sockaddr_ll as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "bind AF_PACKET: {}", std::io::Error::last_os_error());
        let on: libc::c_int = 1;
        // SAFETY: an int option of the size given.
        let rc = unsafe {
            libc::setsockopt(
                fd.as_raw_fd(),
                libc::SOL_PACKET,
                PACKET_AUXDATA,
                &on as *const libc::c_int as *const libc::c_void,
                std::mem::size_of::<libc::c_int>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "PACKET_AUXDATA: {}", std::io::Error::last_os_error());
        Capture { fd }
    }

    /// The next frame that arrives within `wait` and that `wanted` accepts.
    pub fn next(&self, wait: Duration, wanted: impl Fn(&Captured) -> bool) -> Option<Captured> {
        let deadline = Instant::now() + wait;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            let captured = self.receive(left)?;
            if wanted(&captured) {
                return Some(captured);
            }
        }
    }

    /// One frame from another host, within `wait`.
    fn receive(&self, wait: Duration) -> Option<Captured> {
        let timeout = libc::timeval {
            tv_sec: wait.as_secs() as libc::time_t,
            tv_usec: wait.subsec_micros().max(1) as libc::suseconds_t,
        };
        // SAFETY: a timeval option of the size given.
        let rc = unsafe {
            libc::setsockopt(
                self.fd.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &timeout as *const libc::timeval as *const libc::c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        assert_eq!(rc, 0, "SO_RCVTIMEO: {}", std::io::Error::last_os_error());
        loop {
            let mut buf = vec![0u8; 65536];
            // Room for one cmsg of AuxData, 8-byte aligned.
            let mut control = [0u64; 16];
            // SAFETY: all zeros is a valid sockaddr_ll and msghdr.
            let mut from: libc::sockaddr_ll = unsafe { std::mem::zeroed() };
            let mut iov = libc::iovec {
                iov_base: buf.as_mut_ptr() as *mut libc::c_void,
                iov_len: buf.len(),
            };
            let mut msg: libc::msghdr = unsafe { std::mem::zeroed() };
            msg.msg_name = &mut from as *mut libc::sockaddr_ll as *mut libc::c_void;
            msg.msg_namelen = std::mem::size_of::<libc::sockaddr_ll>() as libc::socklen_t;
            msg.msg_iov = &mut iov;
            msg.msg_iovlen = 1;
            msg.msg_control = control.as_mut_ptr() as *mut libc::c_void;
            msg.msg_controllen = std::mem::size_of_val(&control) as _;
            // SAFETY: every pointer in `msg` is valid for its length.
            let n = unsafe { libc::recvmsg(self.fd.as_raw_fd(), &mut msg, 0) };
            if n < 0 {
                return None;
            }
            if from.sll_pkttype == libc::PACKET_OUTGOING {
                continue;
            }
            buf.truncate(n as usize);
            let mut vlan = None;
            let mut checksum_partial = false;
            // SAFETY: the cmsg macros walk the control buffer recvmsg
            // filled, within msg_controllen.
            unsafe {
                let mut cmsg = libc::CMSG_FIRSTHDR(&msg);
                while !cmsg.is_null() {
                    if (*cmsg).cmsg_level == libc::SOL_PACKET && (*cmsg).cmsg_type == PACKET_AUXDATA
                    {
                        let aux: AuxData =
                            std::ptr::read_unaligned(libc::CMSG_DATA(cmsg) as *const AuxData);
                        if aux.status & TP_STATUS_VLAN_VALID != 0 {
                            vlan = Some(aux.vlan_tci);
                        }
                        checksum_partial = aux.status & TP_STATUS_CSUMNOTREADY != 0;
                    }
                    cmsg = libc::CMSG_NXTHDR(&msg, cmsg);
                }
            }
            return Some(Captured {
                frame: buf,
                vlan,
                checksum_partial,
            });
        }
    }
}

/// Frames built by hand, for [`RawLink`].
pub mod frame {
    use std::net::{Ipv4Addr, Ipv6Addr};

    pub const ETHERTYPE_IPV4: u16 = 0x0800;
    pub const ETHERTYPE_IPV6: u16 = 0x86dd;
    pub const ETHERTYPE_VLAN: u16 = 0x8100;
    pub const IPPROTO_UDP: u8 = 17;
    /// IPv6's hop-by-hop options header, as a next header.
    pub const IPV6_HOP_BY_HOP: u8 = 0;

    /// The Internet checksum (RFC 1071) of `chunks` taken as one run of bytes
    /// (each chunk but the last of even length).
    pub fn checksum(chunks: &[&[u8]]) -> u16 {
        let mut sum: u32 = 0;
        for chunk in chunks {
            let mut pairs = chunk.chunks_exact(2);
            for pair in &mut pairs {
                sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
            }
            if let [last] = pairs.remainder() {
                sum += u32::from(*last) << 8;
            }
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        !(sum as u16)
    }

    /// An Ethernet II frame.
    pub fn ethernet(dst: [u8; 6], src: [u8; 6], ethertype: u16, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(14 + payload.len());
        out.extend_from_slice(&dst);
        out.extend_from_slice(&src);
        out.extend_from_slice(&ethertype.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// An Ethernet II frame with one 802.1Q tag per entry of `tags` (the
    /// outer first), each a TCI (priority, DEI, VLAN id).
    pub fn ethernet_tagged(
        dst: [u8; 6],
        src: [u8; 6],
        tags: &[u16],
        ethertype: u16,
        payload: &[u8],
    ) -> Vec<u8> {
        let mut out = Vec::with_capacity(14 + 4 * tags.len() + payload.len());
        out.extend_from_slice(&dst);
        out.extend_from_slice(&src);
        for tci in tags {
            out.extend_from_slice(&ETHERTYPE_VLAN.to_be_bytes());
            out.extend_from_slice(&tci.to_be_bytes());
        }
        out.extend_from_slice(&ethertype.to_be_bytes());
        out.extend_from_slice(payload);
        out
    }

    /// A UDP header and payload, its length field the segment's and its
    /// checksum over `pseudo` (the IP pseudo-header) and the segment.
    pub fn udp(pseudo: &[u8], sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let len = (8 + payload.len()) as u16;
        let mut out = Vec::with_capacity(len as usize);
        out.extend_from_slice(&sport.to_be_bytes());
        out.extend_from_slice(&dport.to_be_bytes());
        out.extend_from_slice(&len.to_be_bytes());
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(payload);
        let mut sum = checksum(&[pseudo, &out]);
        if sum == 0 {
            sum = 0xffff;
        }
        out[6..8].copy_from_slice(&sum.to_be_bytes());
        out
    }

    /// The IPv4 pseudo-header of a UDP segment of `len` bytes.
    pub fn pseudo_v4(src: Ipv4Addr, dst: Ipv4Addr, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(12);
        out.extend_from_slice(&src.octets());
        out.extend_from_slice(&dst.octets());
        out.extend_from_slice(&[0, IPPROTO_UDP]);
        out.extend_from_slice(&(len as u16).to_be_bytes());
        out
    }

    /// The IPv6 pseudo-header of a UDP segment of `len` bytes.
    pub fn pseudo_v6(src: Ipv6Addr, dst: Ipv6Addr, len: usize) -> Vec<u8> {
        let mut out = Vec::with_capacity(40);
        out.extend_from_slice(&src.octets());
        out.extend_from_slice(&dst.octets());
        out.extend_from_slice(&(len as u32).to_be_bytes());
        out.extend_from_slice(&[0, 0, 0, IPPROTO_UDP]);
        out
    }

    /// A UDP datagram over IPv4 (header, checksummed).
    pub fn udp_v4(src: Ipv4Addr, dst: Ipv4Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let segment = udp(
            &pseudo_v4(src, dst, 8 + payload.len()),
            sport,
            dport,
            payload,
        );
        ipv4(src, dst, IPPROTO_UDP, 1, 0, &[], &segment)
    }

    /// An IPv4 packet: `id`, `flags_offset` (the flags and fragment offset
    /// field), `options` (a multiple of 4 bytes), and a correct total length
    /// and header checksum. DF is not set unless `flags_offset` sets it.
    pub fn ipv4(
        src: Ipv4Addr,
        dst: Ipv4Addr,
        protocol: u8,
        id: u16,
        flags_offset: u16,
        options: &[u8],
        payload: &[u8],
    ) -> Vec<u8> {
        assert_eq!(options.len() % 4, 0, "IPv4 options in 32-bit words");
        let header_len = 20 + options.len();
        let total = (header_len + payload.len()) as u16;
        let mut out = Vec::with_capacity(total as usize);
        out.push(0x40 | (header_len / 4) as u8);
        out.push(0);
        out.extend_from_slice(&total.to_be_bytes());
        out.extend_from_slice(&id.to_be_bytes());
        out.extend_from_slice(&flags_offset.to_be_bytes());
        out.push(64);
        out.push(protocol);
        out.extend_from_slice(&[0, 0]);
        out.extend_from_slice(&src.octets());
        out.extend_from_slice(&dst.octets());
        out.extend_from_slice(options);
        fix_ipv4_checksum(&mut out);
        out.extend_from_slice(payload);
        out
    }

    /// Sets the header checksum of the IPv4 packet at the start of `packet`.
    pub fn fix_ipv4_checksum(packet: &mut [u8]) {
        let header_len = usize::from(packet[0] & 0x0f) * 4;
        packet[10..12].copy_from_slice(&[0, 0]);
        let sum = checksum(&[&packet[..header_len]]);
        packet[10..12].copy_from_slice(&sum.to_be_bytes());
    }

    /// An IPv6 packet with `next_header` and `payload` (its extension
    /// headers included).
    pub fn ipv6(src: Ipv6Addr, dst: Ipv6Addr, next_header: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(40 + payload.len());
        out.extend_from_slice(&[0x60, 0, 0, 0]);
        out.extend_from_slice(&(payload.len() as u16).to_be_bytes());
        out.push(next_header);
        out.push(64);
        out.extend_from_slice(&src.octets());
        out.extend_from_slice(&dst.octets());
        out.extend_from_slice(payload);
        out
    }

    /// A UDP datagram over IPv6 (UDP checksum set: IPv6 requires one).
    pub fn udp_v6(src: Ipv6Addr, dst: Ipv6Addr, sport: u16, dport: u16, payload: &[u8]) -> Vec<u8> {
        let segment = udp(
            &pseudo_v6(src, dst, 8 + payload.len()),
            sport,
            dport,
            payload,
        );
        ipv6(src, dst, IPPROTO_UDP, &segment)
    }
}

/// An ICMP echo ("ping") from the calling thread's namespace to `to`:
/// true when the matching echo reply comes within `wait`. Raw sockets, so
/// that no `ping` binary is needed.
pub fn ping(to: IpAddr, wait: Duration) -> bool {
    use socket2::{Domain, Protocol, Socket, Type};
    use std::io::Read;
    let (domain, protocol, request_type, reply_type) = match to {
        IpAddr::V4(_) => (Domain::IPV4, Protocol::ICMPV4, 8u8, 0u8),
        IpAddr::V6(_) => (Domain::IPV6, Protocol::ICMPV6, 128u8, 129u8),
    };
    let socket = Socket::new(domain, Type::RAW, Some(protocol))
        .unwrap_or_else(|e| panic!("raw ICMP socket: {e}"));
    // Only what `to` sends.
    socket
        .connect(&SocketAddr::new(to, 0).into())
        .unwrap_or_else(|e| panic!("connect a raw ICMP socket to {to}: {e}"));
    let id = (std::process::id() as u16) ^ 0x5a5a;
    let seq: u16 = 1;
    let mut echo = vec![request_type, 0, 0, 0];
    echo.extend_from_slice(&id.to_be_bytes());
    echo.extend_from_slice(&seq.to_be_bytes());
    echo.extend_from_slice(b"tracker xdp test ping");
    if to.is_ipv4() {
        // The kernel fills in ICMPv6's checksum itself, not ICMP's.
        let sum = frame::checksum(&[&echo]);
        echo[2..4].copy_from_slice(&sum.to_be_bytes());
    }
    socket
        .send(&echo)
        .unwrap_or_else(|e| panic!("send an ICMP echo to {to}: {e}"));
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 1500];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return false;
        }
        socket.set_read_timeout(Some(left)).unwrap();
        let n = match (&socket).read(&mut buf) {
            Ok(n) => n,
            Err(_) => return false,
        };
        // An IPv4 raw socket reads the IP header too; IPv6's does not.
        let icmp = if to.is_ipv4() {
            let header_len = usize::from(buf[0] & 0x0f) * 4;
            &buf[header_len.min(n)..n]
        } else {
            &buf[..n]
        };
        if icmp.len() >= 8
            && icmp[0] == reply_type
            && icmp[4..6] == id.to_be_bytes()
            && icmp[6..8] == seq.to_be_bytes()
        {
            return true;
        }
    }
}
