//! The UDP socket below the protocol: `SO_REUSEPORT` binding, and batched
//! receive and send (recvmmsg/sendmmsg) that keep each request's destination
//! address (IP_PKTINFO) so that on a host with several addresses the answer
//! leaves from the address the request came to.
//!
//! glommio's own `recv_from`/`send_to` cost a syscall per packet; here one
//! syscall moves up to `BATCH` packets, and the executor parks on the socket
//! only when its queue is empty.

use std::io;
use std::mem::{size_of, zeroed};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr, SocketAddrV4, SocketAddrV6};
use std::os::fd::RawFd;

/// Packets moved by one syscall.
pub const BATCH: usize = 64;
/// Bytes kept of each datagram; longer ones are flagged as truncated. A BEP 15
/// request with a generous BEP 41 URL fits well inside.
pub const MAX_DATAGRAM: usize = 2048;
/// Room for an IP_PKTINFO or IPV6_PKTINFO control message and an
/// SCM_TIMESTAMPNS one.
const CMSG_BUF: usize = 128;

/// Binds a UDP socket that other workers can bind too (`SO_REUSEPORT`, the
/// kernel spreading clients among them). IPv6 sockets are IPv6-only, so `[::]`
/// and `0.0.0.0` can be served side by side. A wildcard address also asks for
/// each packet's destination address.
pub fn bind_reuseport(
    addr: SocketAddr,
    recv_buffer_bytes: usize,
) -> io::Result<std::net::UdpSocket> {
    use socket2::{Domain, Protocol, Socket, Type};
    let domain = if addr.is_ipv4() {
        Domain::IPV4
    } else {
        Domain::IPV6
    };
    let socket = Socket::new(domain, Type::DGRAM, Some(Protocol::UDP))?;
    socket.set_reuse_port(true)?;
    if addr.is_ipv6() {
        socket.set_only_v6(true)?;
    }
    socket.set_nonblocking(true)?;
    // The kernel caps this at net.core.rmem_max; a smaller buffer still works.
    let _ = socket.set_recv_buffer_size(recv_buffer_bytes);
    if addr.ip().is_unspecified() {
        let (level, name) = match addr {
            SocketAddr::V4(_) => (libc::IPPROTO_IP, libc::IP_PKTINFO),
            SocketAddr::V6(_) => (libc::IPPROTO_IPV6, libc::IPV6_RECVPKTINFO),
        };
        setsockopt_on(&socket, level, name)?;
    }
    socket.bind(&addr.into())?;
    Ok(socket.into())
}

/// Asks the kernel to stamp each datagram `socket` receives with the time it
/// arrived (SO_TIMESTAMPNS, see [`Received::arrived_unix_ns`]): a load
/// generator then times an answer from its arrival, not from when its own
/// loop got round to reading it.
pub fn timestamp_arrivals(socket: &std::net::UdpSocket) -> io::Result<()> {
    setsockopt_on(
        &socket2::SockRef::from(socket),
        libc::SOL_SOCKET,
        libc::SO_TIMESTAMPNS,
    )
}

fn setsockopt_on(socket: &socket2::Socket, level: i32, name: i32) -> io::Result<()> {
    use std::os::fd::AsRawFd;
    let one: libc::c_int = 1;
    // SAFETY: a valid fd and a c_int option value of the right size.
    let rc = unsafe {
        libc::setsockopt(
            socket.as_raw_fd(),
            level,
            name,
            &one as *const _ as *const libc::c_void,
            size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if rc == 0 {
        Ok(())
    } else {
        Err(io::Error::last_os_error())
    }
}

/// The address a packet was sent to, to answer from (wildcard sockets only).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LocalAddr {
    V4(Ipv4Addr),
    /// With the interface index, which a link-local address needs.
    V6(Ipv6Addr, u32),
}

/// One received datagram.
pub struct Received<'a> {
    pub data: &'a [u8],
    pub from: SocketAddr,
    pub to: Option<LocalAddr>,
    /// Longer than `MAX_DATAGRAM`: what is in `data` is only its start.
    pub truncated: bool,
    /// When the kernel took it in, in nanoseconds since the Unix epoch (real
    /// time); only on a socket set up by [`timestamp_arrivals`].
    pub arrived_unix_ns: Option<u64>,
}

#[repr(C, align(8))]
#[derive(Clone, Copy)]
struct CmsgBuf([u8; CMSG_BUF]);

/// Buffers for receiving up to `BATCH` datagrams with one recvmmsg.
pub struct RecvBatch {
    bufs: Box<[[u8; MAX_DATAGRAM]; BATCH]>,
    names: Box<[libc::sockaddr_storage; BATCH]>,
    cmsgs: Box<[CmsgBuf; BATCH]>,
    iovs: Box<[libc::iovec; BATCH]>,
    hdrs: Box<[libc::mmsghdr; BATCH]>,
    len: usize,
}

impl Default for RecvBatch {
    fn default() -> Self {
        // SAFETY: these libc structs are plain data for which all-zero is valid.
        unsafe {
            RecvBatch {
                bufs: Box::new([[0; MAX_DATAGRAM]; BATCH]),
                names: Box::new(zeroed()),
                cmsgs: Box::new([CmsgBuf([0; CMSG_BUF]); BATCH]),
                iovs: Box::new(zeroed()),
                hdrs: Box::new(zeroed()),
                len: 0,
            }
        }
    }
}

impl RecvBatch {
    /// Receives what is queued on `fd`, up to `BATCH` datagrams, without
    /// blocking: `WouldBlock` when nothing is queued.
    pub fn recv(&mut self, fd: RawFd) -> io::Result<usize> {
        for i in 0..BATCH {
            self.iovs[i] = libc::iovec {
                iov_base: self.bufs[i].as_mut_ptr().cast(),
                iov_len: MAX_DATAGRAM,
            };
            let hdr = &mut self.hdrs[i].msg_hdr;
            hdr.msg_name = (&mut self.names[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = size_of::<libc::sockaddr_storage>() as libc::socklen_t;
            hdr.msg_iov = &mut self.iovs[i];
            hdr.msg_iovlen = 1;
            hdr.msg_control = self.cmsgs[i].0.as_mut_ptr().cast();
            hdr.msg_controllen = CMSG_BUF as _;
            hdr.msg_flags = 0;
        }
        // SAFETY: every header points into buffers owned by self, sized as said.
        let n = unsafe {
            libc::recvmmsg(
                fd,
                self.hdrs.as_mut_ptr(),
                BATCH as u32,
                libc::MSG_DONTWAIT,
                std::ptr::null_mut(),
            )
        };
        if n < 0 {
            self.len = 0;
            return Err(io::Error::last_os_error());
        }
        self.len = n as usize;
        Ok(self.len)
    }

    /// The bytes of datagram `i` alone (as `get` gives them), without
    /// reading its addresses.
    pub fn data(&self, i: usize) -> Option<&[u8]> {
        if i >= self.len {
            return None;
        }
        let len = (self.hdrs[i].msg_len as usize).min(MAX_DATAGRAM);
        Some(&self.bufs[i][..len])
    }

    /// The sender of datagram `i` (as `get` gives it), if one we can answer.
    pub fn from(&self, i: usize) -> Option<SocketAddr> {
        if i >= self.len {
            return None;
        }
        sockaddr_to_std(&self.names[i])
    }

    /// The `i`th datagram of the last `recv`, if its sender's address is one we
    /// can answer.
    pub fn get(&self, i: usize) -> Option<Received<'_>> {
        let data = self.data(i)?;
        let hdr = &self.hdrs[i];
        let from = self.from(i)?;
        let control = read_control(&hdr.msg_hdr);
        Some(Received {
            data,
            from,
            to: control.to,
            truncated: hdr.msg_hdr.msg_flags & libc::MSG_TRUNC != 0,
            arrived_unix_ns: control.arrived_unix_ns,
        })
    }
}

/// Datagrams to send with one sendmmsg. Their buffers are kept between
/// batches, so queuing an answer does not allocate.
pub struct SendBatch {
    bufs: Vec<Vec<u8>>,
    dests: Vec<(SocketAddr, Option<LocalAddr>)>,
    len: usize,
    names: Box<[libc::sockaddr_storage; BATCH]>,
    cmsgs: Box<[CmsgBuf; BATCH]>,
    iovs: Box<[libc::iovec; BATCH]>,
    hdrs: Box<[libc::mmsghdr; BATCH]>,
}

impl Default for SendBatch {
    fn default() -> Self {
        // SAFETY: these libc structs are plain data for which all-zero is valid.
        unsafe {
            SendBatch {
                bufs: (0..BATCH)
                    .map(|_| Vec::with_capacity(MAX_DATAGRAM))
                    .collect(),
                dests: Vec::with_capacity(BATCH),
                len: 0,
                names: Box::new(zeroed()),
                cmsgs: Box::new([CmsgBuf([0; CMSG_BUF]); BATCH]),
                iovs: Box::new(zeroed()),
                hdrs: Box::new(zeroed()),
            }
        }
    }
}

impl SendBatch {
    pub fn is_full(&self) -> bool {
        self.len == BATCH
    }

    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// A cleared buffer for the next datagram, to `to` from `from`. The caller
    /// must `flush` before pushing more than `BATCH`.
    pub fn push(&mut self, to: SocketAddr, from: Option<LocalAddr>) -> &mut Vec<u8> {
        assert!(!self.is_full(), "flush before pushing more than BATCH");
        self.dests.push((to, from));
        let buf = &mut self.bufs[self.len];
        self.len += 1;
        buf.clear();
        buf
    }

    /// Datagrams queued.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Takes back every `push` after the first `len` (answers that will not be
    /// sent: their handling failed).
    pub fn truncate(&mut self, len: usize) {
        while self.len > len {
            self.pop();
        }
    }

    /// Takes back the last `push` (its answer turned out not to be sent).
    pub fn pop(&mut self) {
        if self.len > 0 {
            self.len -= 1;
            self.dests.pop();
        }
    }

    /// Sends every queued datagram. Returns (sent, bytes sent, failed): a
    /// datagram the kernel refuses (full buffer, unreachable) is dropped, as
    /// UDP may.
    pub fn flush(&mut self, fd: RawFd) -> (usize, usize, usize) {
        let n = self.len;
        let names = &mut *self.names;
        let cmsgs = &mut *self.cmsgs;
        let iovs = &mut *self.iovs;
        let hdrs = &mut *self.hdrs;
        for i in 0..n {
            let (to, from) = self.dests[i];
            let namelen = std_to_sockaddr(to, &mut names[i]);
            iovs[i] = libc::iovec {
                iov_base: self.bufs[i].as_mut_ptr().cast(),
                iov_len: self.bufs[i].len(),
            };
            let hdr = &mut hdrs[i].msg_hdr;
            hdr.msg_name = (&mut names[i] as *mut libc::sockaddr_storage).cast();
            hdr.msg_namelen = namelen;
            hdr.msg_iov = &mut iovs[i];
            hdr.msg_iovlen = 1;
            hdr.msg_control = std::ptr::null_mut();
            hdr.msg_controllen = 0;
            if let Some(from) = from {
                hdr.msg_control = cmsgs[i].0.as_mut_ptr().cast();
                hdr.msg_controllen = write_pktinfo(hdr, from) as _;
            }
        }
        let (mut sent, mut bytes, mut failed) = (0, 0, 0);
        while sent + failed < n {
            let start = sent + failed;
            // SAFETY: headers point at buffers alive for this call.
            let k =
                unsafe { libc::sendmmsg(fd, hdrs[start..n].as_mut_ptr(), (n - start) as u32, 0) };
            if k > 0 {
                for hdr in &hdrs[start..start + k as usize] {
                    bytes += hdr.msg_len as usize;
                }
                sent += k as usize;
            } else {
                // The first datagram of the rest failed: skip it, keep the others.
                failed += 1;
            }
        }
        self.len = 0;
        self.dests.clear();
        (sent, bytes, failed)
    }
}

/// Sends one datagram at once (answers that arrive from other workers one by
/// one).
pub fn send_one(
    fd: RawFd,
    data: &[u8],
    to: SocketAddr,
    from: Option<LocalAddr>,
) -> io::Result<usize> {
    let mut name: libc::sockaddr_storage = unsafe { zeroed() };
    let mut cmsg = CmsgBuf([0; CMSG_BUF]);
    let mut iov = libc::iovec {
        iov_base: data.as_ptr() as *mut libc::c_void,
        iov_len: data.len(),
    };
    let mut hdr: libc::msghdr = unsafe { zeroed() };
    hdr.msg_namelen = std_to_sockaddr(to, &mut name);
    hdr.msg_name = (&mut name as *mut libc::sockaddr_storage).cast();
    hdr.msg_iov = &mut iov;
    hdr.msg_iovlen = 1;
    if let Some(from) = from {
        hdr.msg_control = cmsg.0.as_mut_ptr().cast();
        hdr.msg_controllen = write_pktinfo(&mut hdr, from) as _;
    }
    // SAFETY: the header points at locals alive for this call.
    let n = unsafe { libc::sendmsg(fd, &hdr, libc::MSG_DONTWAIT) };
    if n < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(n as usize)
    }
}

/// What a received header's control messages say.
#[derive(Default)]
struct Control {
    to: Option<LocalAddr>,
    arrived_unix_ns: Option<u64>,
}

fn read_control(hdr: &libc::msghdr) -> Control {
    let mut control = Control::default();
    // SAFETY: the kernel filled msg_control/msg_controllen; the CMSG macros
    // walk inside them, and each payload is read as the type its level and
    // type name.
    unsafe {
        let mut cmsg = libc::CMSG_FIRSTHDR(hdr);
        while !cmsg.is_null() {
            let c = &*cmsg;
            let data = libc::CMSG_DATA(cmsg);
            match (c.cmsg_level, c.cmsg_type) {
                (libc::IPPROTO_IP, libc::IP_PKTINFO) => {
                    let info = std::ptr::read_unaligned(data as *const libc::in_pktinfo);
                    let ip = Ipv4Addr::from(u32::from_be(info.ipi_addr.s_addr));
                    control.to = Some(LocalAddr::V4(ip));
                }
                (libc::IPPROTO_IPV6, libc::IPV6_PKTINFO) => {
                    let info = std::ptr::read_unaligned(data as *const libc::in6_pktinfo);
                    let ip = Ipv6Addr::from(info.ipi6_addr.s6_addr);
                    control.to = Some(LocalAddr::V6(ip, info.ipi6_ifindex));
                }
                (libc::SOL_SOCKET, libc::SCM_TIMESTAMPNS) => {
                    let ts = std::ptr::read_unaligned(data as *const libc::timespec);
                    control.arrived_unix_ns = u64::try_from(ts.tv_sec)
                        .ok()
                        .and_then(|s| s.checked_mul(1_000_000_000))
                        .and_then(|ns| ns.checked_add(u64::try_from(ts.tv_nsec).ok()?));
                }
                _ => {}
            }
            cmsg = libc::CMSG_NXTHDR(hdr, cmsg);
        }
    }
    control
}

/// Writes the source-address control message into `hdr.msg_control` (which
/// must point at a `CmsgBuf`) and returns its length.
fn write_pktinfo(hdr: &mut libc::msghdr, from: LocalAddr) -> usize {
    // SAFETY: msg_control points at CMSG_BUF aligned bytes, more than
    // CMSG_SPACE of either pktinfo struct.
    unsafe {
        match from {
            LocalAddr::V4(ip) => {
                let space = libc::CMSG_SPACE(size_of::<libc::in_pktinfo>() as u32) as usize;
                hdr.msg_controllen = space as _;
                let cmsg = libc::CMSG_FIRSTHDR(hdr);
                (*cmsg).cmsg_level = libc::IPPROTO_IP;
                (*cmsg).cmsg_type = libc::IP_PKTINFO;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in_pktinfo>() as u32) as _;
                let info = libc::in_pktinfo {
                    ipi_ifindex: 0,
                    ipi_spec_dst: libc::in_addr {
                        s_addr: u32::from(ip).to_be(),
                    },
                    ipi_addr: libc::in_addr { s_addr: 0 },
                };
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut libc::in_pktinfo, info);
                space
            }
            LocalAddr::V6(ip, ifindex) => {
                let space = libc::CMSG_SPACE(size_of::<libc::in6_pktinfo>() as u32) as usize;
                hdr.msg_controllen = space as _;
                let cmsg = libc::CMSG_FIRSTHDR(hdr);
                (*cmsg).cmsg_level = libc::IPPROTO_IPV6;
                (*cmsg).cmsg_type = libc::IPV6_PKTINFO;
                (*cmsg).cmsg_len = libc::CMSG_LEN(size_of::<libc::in6_pktinfo>() as u32) as _;
                let info = libc::in6_pktinfo {
                    ipi6_addr: libc::in6_addr {
                        s6_addr: ip.octets(),
                    },
                    ipi6_ifindex: ifindex,
                };
                std::ptr::write_unaligned(libc::CMSG_DATA(cmsg) as *mut libc::in6_pktinfo, info);
                space
            }
        }
    }
}

fn sockaddr_to_std(storage: &libc::sockaddr_storage) -> Option<SocketAddr> {
    match storage.ss_family as i32 {
        libc::AF_INET => {
            // SAFETY: the family says this storage holds a sockaddr_in.
            let sin = unsafe { &*(storage as *const _ as *const libc::sockaddr_in) };
            Some(SocketAddr::V4(SocketAddrV4::new(
                Ipv4Addr::from(u32::from_be(sin.sin_addr.s_addr)),
                u16::from_be(sin.sin_port),
            )))
        }
        libc::AF_INET6 => {
            // SAFETY: the family says this storage holds a sockaddr_in6.
            let sin6 = unsafe { &*(storage as *const _ as *const libc::sockaddr_in6) };
            Some(SocketAddr::V6(SocketAddrV6::new(
                Ipv6Addr::from(sin6.sin6_addr.s6_addr),
                u16::from_be(sin6.sin6_port),
                sin6.sin6_flowinfo,
                sin6.sin6_scope_id,
            )))
        }
        _ => None,
    }
}

fn std_to_sockaddr(addr: SocketAddr, storage: &mut libc::sockaddr_storage) -> libc::socklen_t {
    match addr {
        SocketAddr::V4(a) => {
            // SAFETY: sockaddr_storage is large and aligned enough for any sockaddr.
            let sin = unsafe { &mut *(storage as *mut _ as *mut libc::sockaddr_in) };
            sin.sin_family = libc::AF_INET as libc::sa_family_t;
            sin.sin_port = a.port().to_be();
            sin.sin_addr = libc::in_addr {
                s_addr: u32::from(*a.ip()).to_be(),
            };
            size_of::<libc::sockaddr_in>() as libc::socklen_t
        }
        SocketAddr::V6(a) => {
            // SAFETY: as above.
            let sin6 = unsafe { &mut *(storage as *mut _ as *mut libc::sockaddr_in6) };
            sin6.sin6_family = libc::AF_INET6 as libc::sa_family_t;
            sin6.sin6_port = a.port().to_be();
            sin6.sin6_flowinfo = a.flowinfo();
            sin6.sin6_addr = libc::in6_addr {
                s6_addr: a.ip().octets(),
            };
            sin6.sin6_scope_id = a.scope_id();
            size_of::<libc::sockaddr_in6>() as libc::socklen_t
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;

    fn roundtrip(server_addr: &str, client_addr: &str) {
        let server = bind_reuseport(server_addr.parse().unwrap(), 1 << 20).unwrap();
        let port = server.local_addr().unwrap().port();
        let client = std::net::UdpSocket::bind(client_addr).unwrap();
        let target = SocketAddr::new(client.local_addr().unwrap().ip(), port);
        for i in 0..3u8 {
            client.send_to(&[i; 10], target).unwrap();
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut rx = RecvBatch::default();
        assert_eq!(rx.recv(server.as_raw_fd()).unwrap(), 3);
        let mut tx = SendBatch::default();
        for i in 0..3 {
            let pkt = rx.get(i).unwrap();
            assert_eq!(pkt.data, &[i as u8; 10]);
            assert_eq!(pkt.from, client.local_addr().unwrap());
            let wildcard = server.local_addr().unwrap().ip().is_unspecified();
            assert_eq!(pkt.to.is_some(), wildcard);
            let (from, to) = (pkt.from, pkt.to);
            tx.push(from, to).extend_from_slice(&[i as u8 + 100; 5]);
        }
        assert_eq!(tx.flush(server.as_raw_fd()), (3, 15, 0));
        client
            .set_read_timeout(Some(std::time::Duration::from_secs(2)))
            .unwrap();
        for i in 0..3u8 {
            let mut buf = [0u8; 64];
            let (n, from) = client.recv_from(&mut buf).unwrap();
            assert_eq!(&buf[..n], &[i + 100; 5]);
            assert_eq!(from, target, "answer must come from the address asked");
        }
        assert!(
            matches!(rx.recv(server.as_raw_fd()), Err(e) if e.kind() == io::ErrorKind::WouldBlock)
        );
    }

    #[test]
    fn batches_roundtrip_on_a_specific_address() {
        roundtrip("127.0.0.1:0", "127.0.0.1:0");
    }

    #[test]
    fn batches_roundtrip_on_a_wildcard_address_with_pktinfo() {
        roundtrip("0.0.0.0:0", "127.0.0.1:0");
        roundtrip("[::]:0", "[::1]:0");
    }

    #[test]
    fn arrivals_are_stamped_when_asked() {
        let plain = bind_reuseport("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
        let stamped = bind_reuseport("0.0.0.0:0".parse().unwrap(), 1 << 20).unwrap();
        timestamp_arrivals(&stamped).unwrap();
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        let before = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos() as u64;
        client.send_to(b"x", plain.local_addr().unwrap()).unwrap();
        let port = stamped.local_addr().unwrap().port();
        client.send_to(b"y", ("127.0.0.1", port)).unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut rx = RecvBatch::default();
        assert_eq!(rx.recv(plain.as_raw_fd()).unwrap(), 1);
        assert_eq!(rx.get(0).unwrap().arrived_unix_ns, None);
        assert_eq!(rx.recv(stamped.as_raw_fd()).unwrap(), 1);
        // Both control messages are read, whichever comes first.
        let pkt = rx.get(0).unwrap();
        assert!(pkt.to.is_some());
        let arrived = pkt.arrived_unix_ns.expect("a kernel timestamp");
        assert!(arrived >= before - 1_000_000, "{arrived} vs {before}");
        assert!(arrived < before + 10_000_000_000, "{arrived} vs {before}");
    }

    #[test]
    fn truncation_is_flagged() {
        let server = bind_reuseport("127.0.0.1:0".parse().unwrap(), 1 << 20).unwrap();
        let client = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        client
            .send_to(&[7; MAX_DATAGRAM + 10], server.local_addr().unwrap())
            .unwrap();
        std::thread::sleep(std::time::Duration::from_millis(50));
        let mut rx = RecvBatch::default();
        assert_eq!(rx.recv(server.as_raw_fd()).unwrap(), 1);
        let pkt = rx.get(0).unwrap();
        assert!(pkt.truncated);
        assert_eq!(pkt.data.len(), MAX_DATAGRAM);
    }
}
