//! bpf(2) for the XDP path: the `XSKMAP` that holds each queue's AF_XDP
//! socket, loading the program, attaching it to an interface through a BPF
//! link, swapping it, test runs; and (netlink) which program an interface
//! runs.
//!
//! Each command's attributes are a `#[repr(C)]` struct laid out as the
//! first fields of the kernel's `union bpf_attr` for that command
//! (include/uapi/linux/bpf.h), zero-initialised and passed with its own
//! size: the kernel zero-fills the rest of its copy and rejects a longer
//! one whose bytes past its own fields are not zero. Every fd the kernel
//! returns for a map, a program or a link is close-on-exec.
//!
//! Needs CAP_SYS_ADMIN (or CAP_BPF and CAP_NET_ADMIN, Linux 5.8+); an
//! `XSKMAP` needs CAP_NET_ADMIN. Before Linux 5.11, maps and programs count
//! against RLIMIT_MEMLOCK.

use std::ffi::{c_long, c_uint, c_void};
use std::fmt;
use std::io;
use std::mem::size_of;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use super::ebpf::Instruction;

// Commands (enum bpf_cmd).
const BPF_MAP_CREATE: c_uint = 0;
const BPF_MAP_UPDATE_ELEM: c_uint = 2;
const BPF_MAP_DELETE_ELEM: c_uint = 3;
const BPF_PROG_LOAD: c_uint = 5;
const BPF_PROG_TEST_RUN: c_uint = 10;
const BPF_OBJ_GET_INFO_BY_FD: c_uint = 15;
const BPF_LINK_CREATE: c_uint = 28;
const BPF_LINK_UPDATE: c_uint = 29;

/// enum bpf_map_type.
const BPF_MAP_TYPE_XSKMAP: u32 = 17;
/// enum bpf_prog_type.
const BPF_PROG_TYPE_XDP: u32 = 6;
/// enum bpf_attach_type.
const BPF_XDP: u32 = 37;
/// The names of maps and programs: 15 bytes and a NUL.
const BPF_OBJ_NAME_LEN: usize = 16;
/// BPF_MAP_UPDATE_ELEM's flags: create or replace.
const BPF_ANY: u64 = 0;
// include/uapi/linux/if_link.h.
const XDP_FLAGS_SKB_MODE: u32 = 1 << 1;
const XDP_FLAGS_DRV_MODE: u32 = 1 << 2;
/// BPF_PROG_TEST_RUN on XDP takes at least an Ethernet header.
const ETH_HLEN: usize = 14;

/// The license the program declares: its helper, `bpf_redirect_map`, is
/// not GPL-only (`gpl_only = false` in net/core/filter.c), so the
/// workspace's own license will do.
const LICENSE: &[u8] = b"Apache-2.0\0";
/// The verifier's log when a load fails: enough for any program here.
const LOG_SIZE: usize = 1 << 20;
/// Lines of the verifier's log that a `LoadError` shows.
const LOG_TAIL_LINES: usize = 20;

/// BPF_MAP_CREATE's attributes, to `map_name` (Linux 4.15).
#[repr(C)]
#[derive(Default)]
struct MapCreateAttr {
    map_type: u32,
    key_size: u32,
    value_size: u32,
    max_entries: u32,
    map_flags: u32,
    inner_map_fd: u32,
    numa_node: u32,
    map_name: [u8; BPF_OBJ_NAME_LEN],
}

/// BPF_MAP_*_ELEM's attributes. The pad stands for `__aligned_u64 key`'s
/// alignment, so the layout is the same where u64 aligns to 4 (i686).
#[repr(C)]
#[derive(Default)]
struct MapElemAttr {
    map_fd: u32,
    _pad: u32,
    key: u64,
    value: u64,
    flags: u64,
}

/// BPF_PROG_LOAD's attributes, to `prog_name` (Linux 4.15).
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct ProgLoadAttr {
    prog_type: u32,
    insn_cnt: u32,
    insns: u64,
    license: u64,
    log_level: u32,
    log_size: u32,
    log_buf: u64,
    kern_version: u32,
    prog_flags: u32,
    prog_name: [u8; BPF_OBJ_NAME_LEN],
}

/// BPF_PROG_TEST_RUN's attributes, to `duration`.
#[repr(C)]
#[derive(Default)]
struct TestRunAttr {
    prog_fd: u32,
    retval: u32,
    data_size_in: u32,
    data_size_out: u32,
    data_in: u64,
    data_out: u64,
    repeat: u32,
    duration: u32,
}

/// BPF_OBJ_GET_INFO_BY_FD's attributes.
#[repr(C)]
#[derive(Default)]
struct InfoAttr {
    bpf_fd: u32,
    info_len: u32,
    info: u64,
}

/// The start of `struct bpf_prog_info`: the kernel fills as much of the
/// struct as the caller's `info_len` says.
#[repr(C)]
#[derive(Default)]
struct ProgInfo {
    prog_type: u32,
    id: u32,
}

/// BPF_LINK_CREATE's attributes, to `flags` (`target_ifindex` shares its
/// place with `target_fd`).
#[repr(C)]
#[derive(Default)]
struct LinkCreateAttr {
    prog_fd: u32,
    target_ifindex: u32,
    attach_type: u32,
    flags: u32,
}

/// BPF_LINK_UPDATE's attributes.
#[repr(C)]
#[derive(Default)]
struct LinkUpdateAttr {
    link_fd: u32,
    new_prog_fd: u32,
    flags: u32,
    old_prog_fd: u32,
}

// The offsets in `union bpf_attr` (and `struct bpf_prog_info`).
const _: () = {
    assert!(size_of::<MapCreateAttr>() == 44);
    assert!(size_of::<MapElemAttr>() == 32);
    assert!(size_of::<ProgLoadAttr>() == 64);
    assert!(size_of::<TestRunAttr>() == 40);
    assert!(size_of::<InfoAttr>() == 16);
    assert!(size_of::<ProgInfo>() == 8);
    assert!(size_of::<LinkCreateAttr>() == 16);
    assert!(size_of::<LinkUpdateAttr>() == 16);
};

/// bpf(cmd, attr, sizeof attr): its non-negative result, or errno.
fn bpf<T>(cmd: c_uint, attr: &mut T) -> io::Result<c_long> {
    let size = size_of::<T>() as c_uint;
    // SAFETY: `attr` is one of the `#[repr(C)]` structs above, laid out as
    // the start of `union bpf_attr` for `cmd` and borrowed for the call;
    // the kernel reads and writes at most `size` bytes of it. Every pointer
    // in it, if not null, points at memory of the size its field says,
    // which the caller keeps alive across the call.
    let rc = unsafe { libc::syscall(libc::SYS_bpf, cmd, attr as *mut T as *mut c_void, size) };
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// A command that returns a new fd.
fn bpf_fd<T>(cmd: c_uint, attr: &mut T) -> io::Result<OwnedFd> {
    let fd = RawFd::try_from(bpf(cmd, attr)?)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidData, "bpf(2) returned no fd"))?;
    // SAFETY: the commands given here return a new fd on success, which
    // nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn fd_u32(fd: RawFd) -> u32 {
    // Fds are non-negative; a negative one reaches the kernel as a huge
    // number, which it refuses (EBADF).
    fd as u32
}

fn ptr<T>(p: *const T) -> u64 {
    p as usize as u64
}

/// A map or program name as the kernel takes it: letters, digits, '_' and
/// '.' only (others become '_'), at most 15 of them, then NUL.
fn object_name(name: &str) -> [u8; BPF_OBJ_NAME_LEN] {
    let mut out = [0; BPF_OBJ_NAME_LEN];
    for (o, b) in out.iter_mut().take(BPF_OBJ_NAME_LEN - 1).zip(name.bytes()) {
        *o = if b.is_ascii_alphanumeric() || b == b'_' || b == b'.' {
            b
        } else {
            b'_'
        };
    }
    out
}

/// An error with `context` before the kernel's words, of the same kind.
fn with_context(error: io::Error, context: &str) -> io::Error {
    io::Error::new(error.kind(), format!("{context}: {error}"))
}

/// A map of `entries` AF_XDP sockets (`BPF_MAP_TYPE_XSKMAP`, u32 keys and
/// u32 values), one slot per queue: the program's `bpf_redirect_map` looks
/// up the queue a frame arrived on. Needs CAP_NET_ADMIN.
pub fn create_xsk_map(entries: u32) -> io::Result<OwnedFd> {
    let mut attr = MapCreateAttr {
        map_type: BPF_MAP_TYPE_XSKMAP,
        key_size: 4,
        value_size: 4,
        max_entries: entries,
        map_name: object_name("tracker_xsks"),
        ..Default::default()
    };
    bpf_fd(BPF_MAP_CREATE, &mut attr).map_err(|e| {
        if e.raw_os_error() == Some(libc::EPERM) {
            with_context(
                e,
                "creating the XSKMAP (needs CAP_NET_ADMIN and CAP_BPF or CAP_SYS_ADMIN; \
                 before Linux 5.11, RLIMIT_MEMLOCK room)",
            )
        } else {
            e
        }
    })
}

/// Puts the AF_XDP socket `value` in slot `key` of `map` (replacing any):
/// from then on the program redirects the frames of queue `key` to it. The
/// socket must be bound to that queue, with a fill ring and an RX ring
/// (else EOPNOTSUPP); the map holds its own reference to it.
pub fn map_set(map: BorrowedFd, key: u32, value: RawFd) -> io::Result<()> {
    let value = fd_u32(value);
    let mut attr = MapElemAttr {
        map_fd: fd_u32(map.as_raw_fd()),
        key: ptr(&key),
        value: ptr(&value),
        flags: BPF_ANY,
        ..Default::default()
    };
    bpf(BPF_MAP_UPDATE_ELEM, &mut attr).map(drop)
}

/// Empties slot `key` of `map`: frames of that queue get the program's
/// fallback. An empty slot stays empty (no error); a key past the map's
/// size is EINVAL.
pub fn map_clear(map: BorrowedFd, key: u32) -> io::Result<()> {
    let mut attr = MapElemAttr {
        map_fd: fd_u32(map.as_raw_fd()),
        key: ptr(&key),
        ..Default::default()
    };
    bpf(BPF_MAP_DELETE_ELEM, &mut attr).map(drop)
}

/// A program the kernel refused, with what its verifier said.
#[derive(Debug)]
pub struct LoadError {
    /// The first attempt's error (EACCES or EINVAL: the verifier refused).
    pub error: io::Error,
    /// The verifier's log (level 1) of a second attempt; empty if it gave
    /// none.
    pub verifier_log: String,
}

impl fmt::Display for LoadError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "loading the XDP program: {}", self.error)?;
        let lines: Vec<&str> = self
            .verifier_log
            .lines()
            .filter(|l| !l.trim().is_empty())
            .collect();
        if !lines.is_empty() {
            let tail = lines.get(lines.len().saturating_sub(LOG_TAIL_LINES)..);
            write!(f, "; the verifier's last words:")?;
            for line in tail.unwrap_or_default() {
                write!(f, "\n  {line}")?;
            }
        }
        Ok(())
    }
}

impl std::error::Error for LoadError {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        Some(&self.error)
    }
}

/// Loads `program` as an XDP program named `name` (letters, digits, '_'
/// and '.', cut to 15 bytes; shown by `bpftool prog`). The kernel's
/// verifier checks it first; when it refuses, the load is made again with
/// a log of the verifier's reasons, which the error carries. The program
/// holds its own references to the maps it names: their fds may be closed.
pub fn load_xdp(program: &[Instruction], name: &str) -> Result<OwnedFd, LoadError> {
    let insn_cnt = u32::try_from(program.len()).map_err(|_| LoadError {
        error: io::Error::new(io::ErrorKind::InvalidInput, "program too long"),
        verifier_log: String::new(),
    })?;
    let attr = ProgLoadAttr {
        prog_type: BPF_PROG_TYPE_XDP,
        insn_cnt,
        insns: ptr(program.as_ptr()),
        license: ptr(LICENSE.as_ptr()),
        prog_name: object_name(name),
        ..Default::default()
    };
    // Without a log: the verifier runs faster, and it is all a good program
    // needs.
    let error = match prog_load(attr) {
        Ok(fd) => return Ok(fd),
        Err(e) => e,
    };
    let mut log = vec![0u8; LOG_SIZE];
    let with_log = ProgLoadAttr {
        log_level: 1,
        log_size: LOG_SIZE as u32,
        log_buf: ptr(log.as_mut_ptr()),
        ..attr
    };
    // `log` outlives the call; the kernel writes at most LOG_SIZE bytes of
    // it, NUL-terminated.
    if let Ok(fd) = prog_load(with_log) {
        return Ok(fd);
    }
    let end = log.iter().position(|&b| b == 0).unwrap_or(log.len());
    let verifier_log = String::from_utf8_lossy(log.get(..end).unwrap_or_default()).into_owned();
    Err(LoadError {
        error,
        verifier_log,
    })
}

/// BPF_PROG_LOAD, again while the kernel answers EAGAIN (as libbpf does).
fn prog_load(mut attr: ProgLoadAttr) -> io::Result<OwnedFd> {
    let mut attempts = 5;
    loop {
        match bpf_fd(BPF_PROG_LOAD, &mut attr) {
            Err(e) if e.raw_os_error() == Some(libc::EAGAIN) && attempts > 1 => attempts -= 1,
            result => return result,
        }
    }
}

/// The id of a loaded program (as `bpftool prog` and [`attached_program`]
/// show it).
pub fn program_id(program: BorrowedFd) -> io::Result<u32> {
    let mut info = ProgInfo::default();
    let mut attr = InfoAttr {
        bpf_fd: fd_u32(program.as_raw_fd()),
        info_len: size_of::<ProgInfo>() as u32,
        info: ptr(&mut info as *mut ProgInfo),
    };
    bpf(BPF_OBJ_GET_INFO_BY_FD, &mut attr)?;
    Ok(info.id)
}

/// Where an XDP program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AttachMode {
    /// In the driver, before any socket buffer (XDP_FLAGS_DRV_MODE): the
    /// fast path, and the one AF_XDP's zero-copy needs. EOPNOTSUPP where
    /// the driver has no XDP.
    Native,
    /// In the stack, after the socket buffer is built (XDP_FLAGS_SKB_MODE):
    /// every interface has it; AF_XDP copies.
    Generic,
}

impl AttachMode {
    fn flags(self) -> u32 {
        match self {
            AttachMode::Native => XDP_FLAGS_DRV_MODE,
            AttachMode::Generic => XDP_FLAGS_SKB_MODE,
        }
    }
}

/// Attaches `program` to interface `ifindex` in `mode` through a BPF link
/// (Linux 5.9): the program stays attached while any fd of the link is
/// open, and leaves when the last one closes, by a crash as well. The link
/// may be passed to another process (a hand-over) and its program swapped
/// with [`update_link`].
///
/// Where an XDP program is already attached in that mode, by a link or by
/// netlink (`ip link set xdp`), the kernel says EBUSY; where one is in the
/// other mode, EEXIST: both come back with a message that says so, as do
/// EOPNOTSUPP in native mode and every other error (which interface). Such
/// an error keeps the errno's kind (`ResourceBusy` for EBUSY,
/// `AlreadyExists`, `Unsupported`) but not the errno itself: match on
/// `kind()`, as `raw_os_error()` is None.
pub fn attach_xdp(program: BorrowedFd, ifindex: u32, mode: AttachMode) -> io::Result<OwnedFd> {
    let mut attr = LinkCreateAttr {
        prog_fd: fd_u32(program.as_raw_fd()),
        target_ifindex: ifindex,
        attach_type: BPF_XDP,
        flags: mode.flags(),
    };
    bpf_fd(BPF_LINK_CREATE, &mut attr).map_err(|e| {
        let context = match (e.raw_os_error(), mode) {
            (Some(libc::EBUSY), _) => format!(
                "attaching XDP to interface {ifindex}: another XDP program is attached there \
                 (`ip link show` names it)"
            ),
            (Some(libc::EEXIST), _) => format!(
                "attaching XDP to interface {ifindex}: an XDP program is attached there in the \
                 other mode (native and generic cannot both be)"
            ),
            (Some(libc::EOPNOTSUPP), AttachMode::Native) => format!(
                "attaching XDP to interface {ifindex}: its driver has no native XDP \
                 (generic mode works on every interface)"
            ),
            _ => format!("attaching XDP to interface {ifindex}"),
        };
        with_context(e, &context)
    })
}

/// Swaps the program that `link` runs for `program`, atomically: each
/// frame meets one or the other.
pub fn update_link(link: BorrowedFd, program: BorrowedFd) -> io::Result<()> {
    let mut attr = LinkUpdateAttr {
        link_fd: fd_u32(link.as_raw_fd()),
        new_prog_fd: fd_u32(program.as_raw_fd()),
        ..Default::default()
    };
    bpf(BPF_LINK_UPDATE, &mut attr).map(drop)
}

/// Runs `program` once on `frame` (BPF_PROG_TEST_RUN, no device: the
/// frame's queue is 0 of the loopback's) and returns the XDP action it
/// returned. A redirect is not carried out: a program that redirects
/// returns XDP_REDIRECT and nothing more happens. The frame must hold an
/// Ethernet header (14 bytes; else InvalidInput) and fit a page.
pub fn test_run(program: BorrowedFd, frame: &[u8]) -> io::Result<u32> {
    if frame.len() < ETH_HLEN {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "an XDP test run needs at least an Ethernet header (14 bytes)",
        ));
    }
    let mut attr = TestRunAttr {
        prog_fd: fd_u32(program.as_raw_fd()),
        data_size_in: u32::try_from(frame.len())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "frame too long"))?,
        data_in: ptr(frame.as_ptr()),
        repeat: 1,
        ..Default::default()
    };
    bpf(BPF_PROG_TEST_RUN, &mut attr)?;
    Ok(attr.retval)
}

// Netlink: which XDP program an interface runs.

// include/uapi/linux/if_link.h: IFLA_XDP and its nested attributes.
const IFLA_XDP: u16 = 43;
const IFLA_XDP_PROG_ID: u16 = 4;
const IFLA_XDP_DRV_PROG_ID: u16 = 5;
const IFLA_XDP_SKB_PROG_ID: u16 = 6;
const IFLA_XDP_HW_PROG_ID: u16 = 7;
/// include/uapi/linux/rtnetlink.h.
const RTM_NEWLINK: u16 = 16;
/// `struct nlmsghdr`, `struct ifinfomsg` and `struct nlattr`.
const NLMSG_HDRLEN: usize = 16;
const IFINFOMSG_LEN: usize = 16;
const NLA_HDRLEN: usize = 4;
/// A reply larger than this is cut short (MSG_TRUNC); an interface's
/// RTM_NEWLINK is a few KiB.
const NETLINK_BUFFER: usize = 64 << 10;

/// The id of the XDP program attached to interface `ifindex`, if any, in
/// whichever mode, and however attached (a BPF link, or netlink as
/// `ip link set xdp` does): read from the kernel's description of the
/// interface (`RTM_GETLINK`, attribute `IFLA_XDP`, Linux 4.13), which is
/// what `ip link show` prints. Where programs are attached in two modes
/// (driver and hardware), the driver's. ENODEV where there is no such
/// interface.
pub fn attached_program(ifindex: u32) -> io::Result<Option<u32>> {
    let index = i32::try_from(ifindex)
        .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "interface index"))?;
    let mut request = Vec::with_capacity(NLMSG_HDRLEN + IFINFOMSG_LEN);
    netlink_header(
        &mut request,
        libc::RTM_GETLINK,
        libc::NLM_F_REQUEST as u16,
        NLMSG_HDRLEN + IFINFOMSG_LEN,
    );
    // struct ifinfomsg: family AF_UNSPEC, type, index, flags, change.
    request.extend_from_slice(&[0; 4]);
    request.extend_from_slice(&index.to_ne_bytes());
    request.extend_from_slice(&[0; 8]);
    let Some(reply) = netlink_request(&request)? else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            "RTM_GETLINK: no description of the interface",
        ));
    };
    if reply.kind != RTM_NEWLINK {
        return Err(io::Error::new(
            io::ErrorKind::InvalidData,
            format!("RTM_GETLINK answered with message type {}", reply.kind),
        ));
    }
    let attributes = reply.payload.get(IFINFOMSG_LEN..).unwrap_or_default();
    let Some(xdp) = attributes_of(attributes).find(|&(kind, _)| kind == IFLA_XDP) else {
        // A kernel without XDP says nothing of it.
        return Ok(None);
    };
    let id = |wanted: u16| {
        attributes_of(xdp.1)
            .find(|&(kind, _)| kind == wanted)
            .and_then(|(_, value)| value.first_chunk::<4>().copied())
            .map(u32::from_ne_bytes)
            .filter(|&id| id != 0)
    };
    // PROG_ID when one mode has a program; per mode when several do.
    Ok(id(IFLA_XDP_PROG_ID)
        .or_else(|| id(IFLA_XDP_DRV_PROG_ID))
        .or_else(|| id(IFLA_XDP_SKB_PROG_ID))
        .or_else(|| id(IFLA_XDP_HW_PROG_ID)))
}

/// Appends a `struct nlmsghdr` for a message of `len` bytes in all.
fn netlink_header(out: &mut Vec<u8>, kind: u16, flags: u16, len: usize) {
    out.extend_from_slice(&(len as u32).to_ne_bytes());
    out.extend_from_slice(&kind.to_ne_bytes());
    out.extend_from_slice(&flags.to_ne_bytes());
    out.extend_from_slice(&NETLINK_SEQ.to_ne_bytes());
    out.extend_from_slice(&0u32.to_ne_bytes());
}

/// The sequence number of every request: each goes on a socket of its own.
const NETLINK_SEQ: u32 = 1;

/// A netlink reply: its type and what follows its header.
struct NetlinkReply {
    kind: u16,
    payload: Vec<u8>,
}

/// A `NETLINK_ROUTE` socket, bound to the multicast `groups` (0: none).
pub(super) fn netlink_socket(groups: u32) -> io::Result<OwnedFd> {
    // SAFETY: socket(2) takes no pointers.
    let fd = unsafe {
        libc::socket(
            libc::AF_NETLINK,
            libc::SOCK_RAW | libc::SOCK_CLOEXEC,
            libc::NETLINK_ROUTE,
        )
    };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd that nothing else owns.
    let socket = unsafe { OwnedFd::from_raw_fd(fd) };
    if groups != 0 {
        // SAFETY: all-zero is a valid sockaddr_nl.
        let mut address: libc::sockaddr_nl = unsafe { std::mem::zeroed() };
        address.nl_family = libc::AF_NETLINK as libc::sa_family_t;
        address.nl_groups = groups;
        // SAFETY: a sockaddr_nl of the size given, alive for the call.
        let rc = unsafe {
            libc::bind(
                socket.as_raw_fd(),
                &address as *const libc::sockaddr_nl as *const libc::sockaddr,
                std::mem::size_of::<libc::sockaddr_nl>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(socket)
}

/// Sends one request (a whole message, header included) on a fresh
/// `NETLINK_ROUTE` socket and returns the first reply that is not an
/// acknowledgement; None if the kernel only acknowledged (the request asked
/// for NLM_F_ACK). An error reply becomes its errno.
fn netlink_request(request: &[u8]) -> io::Result<Option<NetlinkReply>> {
    let socket = netlink_socket(0)?;
    // To the kernel (the zeroed address: pid 0), which binds the socket to
    // a port of its choice.
    // SAFETY: `request` is valid for its length during the call.
    let sent = unsafe {
        libc::send(
            socket.as_raw_fd(),
            request.as_ptr() as *const c_void,
            request.len(),
            0,
        )
    };
    if sent < 0 {
        return Err(io::Error::last_os_error());
    }
    let mut buffer = vec![0u8; NETLINK_BUFFER];
    loop {
        // SAFETY: `buffer` is valid for writes of its length during the
        // call; MSG_TRUNC only makes the result the datagram's full size.
        let received = unsafe {
            libc::recv(
                socket.as_raw_fd(),
                buffer.as_mut_ptr() as *mut c_void,
                buffer.len(),
                libc::MSG_TRUNC,
            )
        };
        let received = match usize::try_from(received) {
            Ok(n) => n,
            Err(_) => {
                let e = io::Error::last_os_error();
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
        };
        if received > buffer.len() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "netlink reply larger than its buffer",
            ));
        }
        let mut messages = buffer.get(..received).unwrap_or_default();
        while let Some(header) = messages.first_chunk::<NLMSG_HDRLEN>() {
            let len = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]) as usize;
            let kind = u16::from_ne_bytes([header[4], header[5]]);
            let seq = u32::from_ne_bytes([header[8], header[9], header[10], header[11]]);
            let Some(message) = messages.get(NLMSG_HDRLEN..len) else {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "netlink message cut short",
                ));
            };
            messages = messages.get(align4(len)..).unwrap_or_default();
            if seq != NETLINK_SEQ {
                continue;
            }
            if kind == libc::NLMSG_ERROR as u16 {
                // struct nlmsgerr: a negative errno, or 0 for an ack.
                let errno = message
                    .first_chunk::<4>()
                    .map(|b| i32::from_ne_bytes(*b))
                    .unwrap_or(-libc::EPROTO);
                if errno == 0 {
                    return Ok(None);
                }
                return Err(io::Error::from_raw_os_error(-errno));
            }
            if kind == libc::NLMSG_DONE as u16 {
                return Ok(None);
            }
            return Ok(Some(NetlinkReply {
                kind,
                payload: message.to_vec(),
            }));
        }
    }
}

pub(super) fn align4(n: usize) -> usize {
    (n + 3) & !3
}

/// The attributes (`struct nlattr`: length, type, value, padded to 4
/// bytes) in `bytes`, each as its type (flags removed) and value; a
/// malformed one ends them.
pub(super) fn attributes_of(mut bytes: &[u8]) -> impl Iterator<Item = (u16, &[u8])> {
    std::iter::from_fn(move || {
        let header = bytes.first_chunk::<NLA_HDRLEN>()?;
        let len = usize::from(u16::from_ne_bytes([header[0], header[1]]));
        // NLA_TYPE_MASK: without NLA_F_NESTED and NLA_F_NET_BYTEORDER.
        let kind = u16::from_ne_bytes([header[2], header[3]]) & 0x3fff;
        let value = bytes.get(NLA_HDRLEN..len)?;
        bytes = bytes.get(align4(len)..).unwrap_or_default();
        Some((kind, value))
    })
}

#[cfg(test)]
mod tests {
    use super::super::ebpf::{
        self, exit, ld_map_fd, ldx, mov64_imm, Fallback, Reg, Size, Target, XDP_PASS,
    };
    use super::*;
    use std::ffi::CString;
    use std::os::fd::AsFd;

    fn pass_program() -> Vec<Instruction> {
        vec![mov64_imm(Reg::R0, XDP_PASS as i32), exit()]
    }

    #[test]
    fn object_names_are_cut_and_cleaned() {
        assert_eq!(&object_name("tracker")[..8], b"tracker\0");
        let long = object_name("a-very-long-program-name");
        assert_eq!(&long, b"a_very_long_pro\0");
    }

    #[test]
    fn a_program_loads_and_runs() {
        let program = load_xdp(&pass_program(), "pass").unwrap();
        assert_eq!(test_run(program.as_fd(), &[0; 14]).unwrap(), XDP_PASS);
        assert_eq!(test_run(program.as_fd(), &[0xff; 1500]).unwrap(), XDP_PASS);
        assert_ne!(program_id(program.as_fd()).unwrap(), 0);
        let e = test_run(program.as_fd(), &[0; 13]).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::InvalidInput);
    }

    #[test]
    fn a_refused_program_carries_the_verifiers_log() {
        // Reads the frame's first byte without comparing data_end.
        let unchecked = [
            ldx(Size::W, Reg::R2, Reg::R1, ebpf::XDP_MD_DATA),
            ldx(Size::B, Reg::R0, Reg::R2, 0),
            exit(),
        ];
        let e = load_xdp(&unchecked, "bad").unwrap_err();
        assert_eq!(e.error.raw_os_error(), Some(libc::EACCES), "{e}");
        assert!(
            e.verifier_log.contains("invalid access to packet"),
            "{}",
            e.verifier_log
        );
        let shown = e.to_string();
        assert!(shown.contains("invalid access to packet"), "{shown}");
        assert!(shown.lines().count() <= LOG_TAIL_LINES + 1, "{shown}");
        // A map fd that is no map.
        let mut bad_map = ld_map_fd(Reg::R1, 0).to_vec();
        bad_map.extend(pass_program());
        let e = load_xdp(&bad_map, "bad").unwrap_err();
        assert!(!e.verifier_log.is_empty(), "{e}");
    }

    #[test]
    fn xsk_map_slots_clear_and_refuse_what_is_not_an_xdp_socket() {
        let map = create_xsk_map(4).unwrap();
        map_clear(map.as_fd(), 0).unwrap();
        map_clear(map.as_fd(), 3).unwrap();
        assert!(map_clear(map.as_fd(), 4).is_err());
        let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
        assert!(map_set(map.as_fd(), 0, udp.as_raw_fd()).is_err());
        assert!(map_set(map.as_fd(), 0, -1).is_err());
    }

    // ---- attaching, on a veth pair of the test's own ----

    /// A veth pair made over netlink (no `ip` needed), deleted on drop.
    struct Veth {
        name: String,
        ifindex: u32,
    }

    /// A netlink message under construction.
    struct Message(Vec<u8>);

    impl Message {
        fn new(kind: u16, flags: i32) -> Message {
            let mut m = Vec::new();
            netlink_header(&mut m, kind, flags as u16, 0);
            Message(m)
        }
        fn ifinfomsg(&mut self, index: i32) {
            self.0.extend_from_slice(&[0; 4]);
            self.0.extend_from_slice(&index.to_ne_bytes());
            self.0.extend_from_slice(&[0; 8]);
        }
        fn attr(&mut self, kind: u16, value: &[u8]) {
            let start = self.begin(kind);
            self.0.extend_from_slice(value);
            self.end(start);
        }
        fn begin(&mut self, kind: u16) -> usize {
            let start = self.0.len();
            self.0.extend_from_slice(&[0, 0]);
            self.0.extend_from_slice(&kind.to_ne_bytes());
            start
        }
        fn end(&mut self, start: usize) {
            let len = (self.0.len() - start) as u16;
            self.0[start..start + 2].copy_from_slice(&len.to_ne_bytes());
            self.0.resize(align4(self.0.len()), 0);
        }
        fn send(mut self) -> io::Result<()> {
            let len = self.0.len() as u32;
            self.0[..4].copy_from_slice(&len.to_ne_bytes());
            netlink_request(&self.0).map(drop)
        }
    }

    impl Veth {
        fn new(tag: &str) -> Veth {
            const IFLA_IFNAME: u16 = 3;
            const IFLA_LINKINFO: u16 = 18;
            const IFLA_INFO_KIND: u16 = 1;
            const IFLA_INFO_DATA: u16 = 2;
            const VETH_INFO_PEER: u16 = 1;
            let name = format!("xdp{tag}{}", std::process::id() % 100_000);
            let peer = format!("{name}p");
            let mut m = Message::new(
                libc::RTM_NEWLINK,
                libc::NLM_F_REQUEST | libc::NLM_F_ACK | libc::NLM_F_CREATE | libc::NLM_F_EXCL,
            );
            m.ifinfomsg(0);
            m.attr(
                IFLA_IFNAME,
                CString::new(name.clone()).unwrap().as_bytes_with_nul(),
            );
            let info = m.begin(IFLA_LINKINFO);
            m.attr(IFLA_INFO_KIND, b"veth\0");
            let data = m.begin(IFLA_INFO_DATA);
            let peer_info = m.begin(VETH_INFO_PEER);
            m.ifinfomsg(0);
            m.attr(IFLA_IFNAME, CString::new(peer).unwrap().as_bytes_with_nul());
            m.end(peer_info);
            m.end(data);
            m.end(info);
            m.send().expect("creating a veth pair (root, veth module)");
            let c_name = CString::new(name.clone()).unwrap();
            // SAFETY: a NUL-terminated name.
            let ifindex = unsafe { libc::if_nametoindex(c_name.as_ptr()) };
            assert_ne!(ifindex, 0, "{name}");
            Veth { name, ifindex }
        }
    }

    impl Drop for Veth {
        fn drop(&mut self) {
            // Deleting one end deletes both.
            let mut m = Message::new(libc::RTM_DELLINK, libc::NLM_F_REQUEST | libc::NLM_F_ACK);
            m.ifinfomsg(self.ifindex as i32);
            if let Err(e) = m.send() {
                eprintln!("deleting {}: {e}", self.name);
            }
        }
    }

    fn steering(map: &OwnedFd) -> OwnedFd {
        let targets = [Target {
            ip: "0.0.0.0".parse().unwrap(),
            port: 6969,
        }];
        let program = ebpf::steering_program(&ebpf::Steering {
            targets: &targets,
            mac: [2, 0, 0, 0, 0, 1],
            loopback_is_martian: true,
            xsk_map_fd: map.as_raw_fd(),
            fallback: Fallback::Pass,
        })
        .unwrap();
        load_xdp(&program, "steering").unwrap()
    }

    #[test]
    fn a_link_attaches_swaps_and_detaches_when_closed() {
        let veth = Veth::new("a");
        assert_eq!(attached_program(veth.ifindex).unwrap(), None);

        let map = create_xsk_map(1).unwrap();
        let first = steering(&map);
        let second = load_xdp(&pass_program(), "second").unwrap();
        let (first_id, second_id) = (
            program_id(first.as_fd()).unwrap(),
            program_id(second.as_fd()).unwrap(),
        );

        let link = attach_xdp(first.as_fd(), veth.ifindex, AttachMode::Generic).unwrap();
        assert_eq!(attached_program(veth.ifindex).unwrap(), Some(first_id));
        // The link holds the program: its own fd may close.
        drop(first);
        assert_eq!(attached_program(veth.ifindex).unwrap(), Some(first_id));

        // A second attach in the same mode is refused, and says why.
        let e = attach_xdp(second.as_fd(), veth.ifindex, AttachMode::Generic).unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy, "{e}");
        assert!(e.to_string().contains("another XDP program"), "{e}");
        // Native mode too, while the generic one is there.
        let e = attach_xdp(second.as_fd(), veth.ifindex, AttachMode::Native).unwrap_err();
        assert!(e.to_string().contains("XDP program"), "{e}");

        update_link(link.as_fd(), second.as_fd()).unwrap();
        assert_eq!(attached_program(veth.ifindex).unwrap(), Some(second_id));

        // A duplicate of the link keeps it attached; closing the last fd
        // detaches.
        let duplicate = link.try_clone().unwrap();
        drop(link);
        assert_eq!(attached_program(veth.ifindex).unwrap(), Some(second_id));
        drop(duplicate);
        assert_eq!(attached_program(veth.ifindex).unwrap(), None);
    }

    #[test]
    fn native_mode_attaches_where_the_driver_has_xdp() {
        // veth has native XDP (Linux 4.19).
        let veth = Veth::new("n");
        let map = create_xsk_map(1).unwrap();
        let program = steering(&map);
        let id = program_id(program.as_fd()).unwrap();
        let link = attach_xdp(program.as_fd(), veth.ifindex, AttachMode::Native).unwrap();
        assert_eq!(attached_program(veth.ifindex).unwrap(), Some(id));
        drop(link);
        assert_eq!(attached_program(veth.ifindex).unwrap(), None);
    }

    #[test]
    fn unknown_interfaces_are_errors() {
        let e = attached_program(0x7fff_fff0).unwrap_err();
        assert_eq!(e.raw_os_error(), Some(libc::ENODEV), "{e}");
        let program = load_xdp(&pass_program(), "pass").unwrap();
        assert!(attach_xdp(program.as_fd(), 0x7fff_fff0, AttachMode::Generic).is_err());
    }
}
