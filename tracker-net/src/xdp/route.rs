//! Which clients an answer over AF_XDP may go to: those the kernel would
//! send an answer to out of the interface their request came in by. An
//! answer written into a frame leaves by that interface, to the MAC address
//! the request came from, whatever the routing table says; the kernel's
//! sockets answer only where a route leads, and not at all where none
//! does, where it ends in a blackhole, an unreachable or prohibit route, or
//! where the address is the host's own or a broadcast address. The worker
//! drops a datagram whose client the table does not send out of the
//! socket's interface.
//!
//! The table is the kernel's, read over netlink (an `RTM_GETROUTE` dump of
//! each family) and read again whenever it changes (the route multicast
//! groups), by a thread that needs no privilege (started once the process
//! has given its privileges up); workers see the latest
//! through a [`RouteView`]. It is looked up as the default policy rules
//! order the tables (local, then main, then default); other rules, and
//! routes that match on a source address or a TOS, are not followed.
//!
//! (The XDP helper `bpf_fib_lookup` would ask the kernel per packet, but it
//! is for GPL programs only, and it answers "forwarding disabled" on an
//! interface that does not forward, which is what a tracker's host is.)

use std::ffi::c_void;
use std::io;
use std::net::IpAddr;
use std::os::fd::{AsRawFd, OwnedFd};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError, Weak};
use std::time::Duration;

use super::bpf::{align4, attributes_of, netlink_socket};

// include/uapi/linux/rtnetlink.h.
const RTM_NEWROUTE: u16 = 24;
const RTM_GETROUTE: u16 = 26;
/// `struct rtmsg`: family, dst_len, src_len, tos, table, protocol, scope,
/// type, then 32 bits of flags.
const RTMSG_LEN: usize = 12;
const RTA_DST: u16 = 1;
const RTA_OIF: u16 = 4;
const RTA_PRIORITY: u16 = 6;
const RTA_MULTIPATH: u16 = 9;
const RTA_TABLE: u16 = 15;
/// `struct rtnexthop`: len (16 bits), flags, hops, ifindex (32 bits).
const RTNEXTHOP_LEN: usize = 8;
const RTN_UNICAST: u8 = 1;
const RT_TABLE_DEFAULT: u32 = 253;
const RT_TABLE_MAIN: u32 = 254;
const RT_TABLE_LOCAL: u32 = 255;
/// `rtm_flags`: a cached clone, not a route of a table.
const RTM_F_CLONED: u32 = 0x200;
const NLMSG_HDRLEN: usize = 16;
/// `nlmsg_flags` of a dump's message: the dump was interrupted by a
/// change, and must be made again.
const NLM_F_DUMP_INTR: u16 = 0x10;
/// Big enough for any one message of a route dump (the kernel fills up to
/// 32 KiB at a time).
const BUFFER: usize = 64 << 10;
/// Changes come in bursts (an address brings several routes): after the
/// first, the follower waits this long for the rest before reading.
const SETTLE: Duration = Duration::from_millis(20);
/// How often the follower looks whether anyone still reads its table, and
/// how long it waits before trying again after a failed read.
const TICK: Duration = Duration::from_secs(1);

/// One route of a dump, as far as the lookup needs it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Route {
    /// `RT_TABLE_*`: local, main or default (others are not followed).
    pub table: u32,
    /// The destination prefix (its bits past `len` zero).
    pub dst: IpAddr,
    pub len: u8,
    /// Lower wins among routes to the same prefix in one table.
    pub metric: u32,
    /// The interface a packet to the prefix leaves by: a unicast route
    /// whose next hops all leave by one interface. None for any other
    /// (local, broadcast, blackhole, unreachable, prohibit, a route with
    /// next hops on several interfaces or none named).
    pub out: Option<u32>,
}

/// An address type as prefixes of it are looked up.
trait Bits: Copy + Ord {
    const BITS: u8;
    /// The first `len` bits, the rest zero.
    fn prefix(self, len: u8) -> Self;
}

impl Bits for u32 {
    const BITS: u8 = 32;
    fn prefix(self, len: u8) -> u32 {
        match u32::MAX.checked_shl(u32::from(32u8.saturating_sub(len))) {
            Some(mask) => self & mask,
            None => 0,
        }
    }
}

impl Bits for u128 {
    const BITS: u8 = 128;
    fn prefix(self, len: u8) -> u128 {
        match u128::MAX.checked_shl(u32::from(128u8.saturating_sub(len))) {
            Some(mask) => self & mask,
            None => 0,
        }
    }
}

/// Prefixes of one length, sorted, each with the interface a packet to it
/// leaves by.
type OfLength<A> = Vec<(A, Option<u32>)>;

/// One table's routes: by (length, prefix), the lowest metric and where
/// it leads.
type Table<A> = std::collections::BTreeMap<(u8, A), (u32, Option<u32>)>;

/// One family's prefixes: by length, longest first.
#[derive(Debug, Default)]
struct Prefixes<A> {
    by_len: Vec<(u8, OfLength<A>)>,
}

impl<A: Bits> Prefixes<A> {
    /// Builds the lookup from `(table, prefix, len, metric, out)` routes:
    /// a packet's route is the longest prefix of the first table (local,
    /// then main, then default) that has one, as the kernel's default
    /// rules look it up.
    fn build(routes: impl IntoIterator<Item = (u32, A, u8, u32, Option<u32>)>) -> Prefixes<A> {
        use std::collections::BTreeMap;
        let rank = |table| match table {
            RT_TABLE_LOCAL => Some(0),
            RT_TABLE_MAIN => Some(1),
            RT_TABLE_DEFAULT => Some(2),
            _ => None,
        };
        // Per table, per prefix: the lowest metric's route; routes of one
        // metric by different interfaces (IPv6 makes them one multipath
        // route) lead by none in particular.
        let mut tables: [Table<A>; 3] = Default::default();
        for (table, addr, len, metric, out) in routes {
            let Some(table) = rank(table).and_then(|rank| tables.get_mut(rank)) else {
                continue;
            };
            if len > A::BITS {
                continue;
            }
            let entry = table
                .entry((len, addr.prefix(len)))
                .or_insert((metric, out));
            if metric < entry.0 {
                *entry = (metric, out);
            } else if metric == entry.0 && out != entry.1 {
                entry.1 = None;
            }
        }
        // A table's prefix that one of an earlier table covers is looked up
        // in that table: it stands for the earlier table's answer there.
        let mut merged: BTreeMap<(u8, A), Option<u32>> = BTreeMap::new();
        for table in tables {
            let mut added = Vec::new();
            for ((len, addr), (_, out)) in table {
                let covering = (0..=len)
                    .rev()
                    .find_map(|shorter| merged.get(&(shorter, addr.prefix(shorter))));
                match covering {
                    Some(_) if merged.contains_key(&(len, addr)) => {}
                    Some(&earlier) => added.push(((len, addr), earlier)),
                    None => added.push(((len, addr), out)),
                }
            }
            merged.extend(added);
        }
        let mut by_len: Vec<(u8, OfLength<A>)> = Vec::new();
        // Ascending by (len, addr): each length's run is sorted by address.
        for ((len, addr), out) in merged {
            match by_len.last_mut() {
                Some((last, entries)) if *last == len => entries.push((addr, out)),
                _ => by_len.push((len, vec![(addr, out)])),
            }
        }
        by_len.reverse();
        Prefixes { by_len }
    }

    /// The longest prefix holding `addr`: Some(the interface it leaves by,
    /// if one), None when no route covers it.
    fn lookup(&self, addr: A) -> Option<Option<u32>> {
        self.by_len.iter().find_map(|(len, entries)| {
            let key = addr.prefix(*len);
            entries
                .binary_search_by(|(entry, _)| entry.cmp(&key))
                .ok()
                .and_then(|at| entries.get(at))
                .map(|&(_, out)| out)
        })
    }

    fn len(&self) -> usize {
        self.by_len.iter().map(|(_, entries)| entries.len()).sum()
    }
}

/// The routing table, for lookups of where an answer would go.
#[derive(Debug, Default)]
pub struct RoutingTable {
    v4: Prefixes<u32>,
    v6: Prefixes<u128>,
}

impl RoutingTable {
    /// The lookup for `routes` (a dump's, in any order).
    pub fn new(routes: &[Route]) -> RoutingTable {
        let v4 = routes.iter().filter_map(|r| match r.dst {
            IpAddr::V4(ip) => Some((r.table, u32::from(ip), r.len, r.metric, r.out)),
            IpAddr::V6(_) => None,
        });
        let v6 = routes.iter().filter_map(|r| match r.dst {
            IpAddr::V6(ip) => Some((r.table, u128::from(ip), r.len, r.metric, r.out)),
            IpAddr::V4(_) => None,
        });
        RoutingTable {
            v4: Prefixes::build(v4),
            v6: Prefixes::build(v6),
        }
    }

    /// Reads the kernel's table (of the calling thread's network
    /// namespace).
    pub fn read() -> io::Result<RoutingTable> {
        let mut routes = dump_routes(libc::AF_INET as u8)?;
        routes.extend(dump_routes(libc::AF_INET6 as u8)?);
        Ok(RoutingTable::new(&routes))
    }

    /// The interface the kernel would send a packet to `to` out of: Some
    /// where a unicast route leaves by one interface; None where no route
    /// leads, or one leads nowhere (blackhole, unreachable, prohibit), to
    /// the host itself (a local address) or to a broadcast, or by several
    /// interfaces.
    pub fn out_interface(&self, to: IpAddr) -> Option<u32> {
        match to {
            IpAddr::V4(ip) => self.v4.lookup(u32::from(ip)).flatten(),
            IpAddr::V6(ip) => self.v6.lookup(u128::from(ip)).flatten(),
        }
    }

    /// Whether the kernel would send an answer to `to` out of interface
    /// `ifindex`, where its request came in: a route leads there, or `to`
    /// is an IPv6 link-local address (fe80::/10), which names no route but
    /// the interface it was received on.
    pub fn leads_out_of(&self, to: IpAddr, ifindex: u32) -> bool {
        match to {
            IpAddr::V6(ip) if ip.segments()[0] & 0xffc0 == 0xfe80 => true,
            _ => self.out_interface(to) == Some(ifindex),
        }
    }

    /// How many prefixes it holds, both families.
    pub fn len(&self) -> usize {
        self.v4.len() + self.v6.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The routes of one family, from an `RTM_GETROUTE` dump on a fresh
/// `NETLINK_ROUTE` socket. A dump a change interrupted is made again.
fn dump_routes(family: u8) -> io::Result<Vec<Route>> {
    loop {
        let socket = netlink_socket(0)?;
        let mut request = Vec::with_capacity(NLMSG_HDRLEN + RTMSG_LEN);
        let len = (NLMSG_HDRLEN + RTMSG_LEN) as u32;
        request.extend_from_slice(&len.to_ne_bytes());
        request.extend_from_slice(&RTM_GETROUTE.to_ne_bytes());
        let flags = (libc::NLM_F_REQUEST | libc::NLM_F_DUMP) as u16;
        request.extend_from_slice(&flags.to_ne_bytes());
        request.extend_from_slice(&1u32.to_ne_bytes()); // sequence
        request.extend_from_slice(&0u32.to_ne_bytes()); // port: the kernel
        request.push(family);
        request.extend_from_slice(&[0; RTMSG_LEN - 1]);
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
        let mut routes = Vec::new();
        let mut buffer = vec![0u8; BUFFER];
        let mut interrupted = false;
        'dump: loop {
            let received = receive(&socket, &mut buffer, 0)?;
            let mut messages = buffer.get(..received).unwrap_or_default();
            while let Some(header) = messages.first_chunk::<NLMSG_HDRLEN>() {
                let len = u32::from_ne_bytes([header[0], header[1], header[2], header[3]]) as usize;
                let kind = u16::from_ne_bytes([header[4], header[5]]);
                let flags = u16::from_ne_bytes([header[6], header[7]]);
                let Some(payload) = messages.get(NLMSG_HDRLEN..len) else {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        "route dump: a netlink message cut short",
                    ));
                };
                messages = messages.get(align4(len)..).unwrap_or_default();
                interrupted |= flags & NLM_F_DUMP_INTR != 0;
                match kind {
                    k if k == libc::NLMSG_DONE as u16 => break 'dump,
                    k if k == libc::NLMSG_ERROR as u16 => {
                        let errno = payload
                            .first_chunk::<4>()
                            .map(|b| i32::from_ne_bytes(*b))
                            .unwrap_or(-libc::EPROTO);
                        return Err(io::Error::from_raw_os_error(-errno));
                    }
                    RTM_NEWROUTE => routes.extend(parse_route(payload)),
                    _ => {}
                }
            }
        }
        if !interrupted {
            return Ok(routes);
        }
    }
}

/// The route an `RTM_NEWROUTE` message describes (after its netlink
/// header), if the lookup follows it: not a cached clone, not one with a
/// TOS (answers have none), in the local, main or default table. A route
/// that matches on a source prefix counts as leading nowhere here.
fn parse_route(message: &[u8]) -> Option<Route> {
    let header = message.first_chunk::<RTMSG_LEN>()?;
    let [family, dst_len, src_len, tos, table, _protocol, _scope, kind, ..] = *header;
    let flags = u32::from_ne_bytes([header[8], header[9], header[10], header[11]]);
    if tos != 0 || flags & RTM_F_CLONED != 0 {
        return None;
    }
    let mut table = u32::from(table);
    let mut dst = None;
    let mut metric = 0;
    let mut oif = None;
    let mut hops: Option<Vec<u32>> = None;
    for (attribute, value) in attributes_of(message.get(RTMSG_LEN..).unwrap_or_default()) {
        match attribute {
            RTA_DST => dst = Some(value),
            RTA_TABLE => table = u32::from_ne_bytes(*value.first_chunk::<4>()?),
            RTA_PRIORITY => metric = u32::from_ne_bytes(*value.first_chunk::<4>()?),
            RTA_OIF => oif = Some(u32::from_ne_bytes(*value.first_chunk::<4>()?)),
            RTA_MULTIPATH => hops = Some(next_hop_interfaces(value)),
            _ => {}
        }
    }
    if !matches!(table, RT_TABLE_LOCAL | RT_TABLE_MAIN | RT_TABLE_DEFAULT) {
        return None;
    }
    let dst = match (i32::from(family), dst) {
        (libc::AF_INET, None) => IpAddr::from([0u8; 4]),
        (libc::AF_INET6, None) => IpAddr::from([0u8; 16]),
        (libc::AF_INET, Some(bytes)) => IpAddr::from(*bytes.first_chunk::<4>()?),
        (libc::AF_INET6, Some(bytes)) => IpAddr::from(*bytes.first_chunk::<16>()?),
        _ => return None,
    };
    let interfaces = hops.unwrap_or_else(|| oif.into_iter().collect());
    let out = match interfaces.split_first() {
        Some((&first, rest))
            if kind == RTN_UNICAST && src_len == 0 && rest.iter().all(|&i| i == first) =>
        {
            Some(first)
        }
        _ => None,
    };
    Some(Route {
        table,
        dst,
        len: dst_len,
        metric,
        out,
    })
}

/// The interfaces of an `RTA_MULTIPATH` attribute's next hops.
fn next_hop_interfaces(mut value: &[u8]) -> Vec<u32> {
    let mut interfaces = Vec::new();
    while let Some(hop) = value.first_chunk::<RTNEXTHOP_LEN>() {
        let len = usize::from(u16::from_ne_bytes([hop[0], hop[1]]));
        if len < RTNEXTHOP_LEN {
            break;
        }
        interfaces.push(u32::from_ne_bytes([hop[4], hop[5], hop[6], hop[7]]));
        value = value.get(align4(len)..).unwrap_or_default();
    }
    interfaces
}

/// One datagram from a netlink socket into `buffer`: its length. EINTR is
/// retried; a datagram longer than the buffer is an error.
fn receive(socket: &OwnedFd, buffer: &mut [u8], flags: libc::c_int) -> io::Result<usize> {
    loop {
        // SAFETY: `buffer` is valid for writes of its length during the
        // call; MSG_TRUNC only makes the result the datagram's full size.
        let received = unsafe {
            libc::recv(
                socket.as_raw_fd(),
                buffer.as_mut_ptr() as *mut c_void,
                buffer.len(),
                flags | libc::MSG_TRUNC,
            )
        };
        match usize::try_from(received) {
            Ok(n) if n > buffer.len() => {
                return Err(io::Error::new(
                    io::ErrorKind::InvalidData,
                    "netlink message larger than its buffer",
                ))
            }
            Ok(n) => return Ok(n),
            Err(_) => {
                let err = io::Error::last_os_error();
                if err.kind() != io::ErrorKind::Interrupted {
                    return Err(err);
                }
            }
        }
    }
}

struct Shared {
    /// Bumped at each new table.
    generation: AtomicU64,
    table: Mutex<Arc<RoutingTable>>,
}

/// The routing table as read last, shared by the follower thread that
/// keeps it current and the workers' views.
#[derive(Clone)]
pub struct Routes {
    shared: Arc<Shared>,
}

impl Routes {
    /// Reads the table now (of the calling thread's network namespace).
    pub fn read() -> io::Result<Routes> {
        let table = RoutingTable::read()?;
        Ok(Routes {
            shared: Arc::new(Shared {
                generation: AtomicU64::new(0),
                table: Mutex::new(Arc::new(table)),
            }),
        })
    }

    /// Keeps the table current: joins the route multicast groups (on the
    /// calling thread's network namespace) and starts a thread that reads
    /// the table again after each burst of changes, until every `Routes`
    /// and view of it is dropped. A failed read is passed to `failed` and
    /// tried again a second later, the last table kept meanwhile.
    pub fn follow(&self, failed: fn(&io::Error)) -> io::Result<()> {
        let groups = (libc::RTMGRP_IPV4_ROUTE | libc::RTMGRP_IPV6_ROUTE) as u32;
        let socket = netlink_socket(groups)?;
        let tick = libc::timeval {
            tv_sec: TICK.as_secs() as libc::time_t,
            tv_usec: 0,
        };
        // SAFETY: a timeval of the size given, alive for the call.
        let rc = unsafe {
            libc::setsockopt(
                socket.as_raw_fd(),
                libc::SOL_SOCKET,
                libc::SO_RCVTIMEO,
                &tick as *const libc::timeval as *const c_void,
                std::mem::size_of::<libc::timeval>() as libc::socklen_t,
            )
        };
        if rc != 0 {
            return Err(io::Error::last_os_error());
        }
        // Changes since `read` and before the groups were joined.
        self.publish(RoutingTable::read()?);
        let shared = Arc::downgrade(&self.shared);
        std::thread::Builder::new()
            .name("xdp-routes".to_string())
            .spawn(move || follow(&socket, &shared, failed))?;
        Ok(())
    }

    /// A view of the table for one reader.
    pub fn view(&self) -> RouteView {
        let table = Arc::clone(
            &self
                .shared
                .table
                .lock()
                .unwrap_or_else(PoisonError::into_inner),
        );
        RouteView {
            generation: self.shared.generation.load(Ordering::Acquire),
            shared: Arc::clone(&self.shared),
            table,
        }
    }

    fn publish(&self, table: RoutingTable) {
        publish(&self.shared, table);
    }
}

fn publish(shared: &Shared, table: RoutingTable) {
    *shared.table.lock().unwrap_or_else(PoisonError::into_inner) = Arc::new(table);
    shared.generation.fetch_add(1, Ordering::Release);
}

/// The follower's loop: a message from the groups (or their overflow,
/// ENOBUFS) means a change; after the burst settles, the table is read
/// again.
fn follow(socket: &OwnedFd, shared: &Weak<Shared>, failed: fn(&io::Error)) {
    let mut buffer = vec![0u8; BUFFER];
    let mut stale = false;
    loop {
        if shared.strong_count() == 0 {
            return;
        }
        if !stale {
            match receive(socket, &mut buffer, 0) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::ENOBUFS) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => {
                    failed(&e);
                    std::thread::sleep(TICK);
                    continue;
                }
            }
            std::thread::sleep(SETTLE);
            while receive(socket, &mut buffer, libc::MSG_DONTWAIT).is_ok() {}
        }
        let Some(shared) = shared.upgrade() else {
            return;
        };
        match RoutingTable::read() {
            Ok(table) => {
                publish(&shared, table);
                stale = false;
            }
            Err(e) => {
                failed(&e);
                stale = true;
                drop(shared);
                std::thread::sleep(TICK);
            }
        }
    }
}

/// One reader's copy of the table: [`RouteView::refresh`] takes the latest
/// when there is a newer one (an atomic load when there is not).
pub struct RouteView {
    shared: Arc<Shared>,
    generation: u64,
    table: Arc<RoutingTable>,
}

impl RouteView {
    /// Takes the latest table, if it changed.
    pub fn refresh(&mut self) {
        let generation = self.shared.generation.load(Ordering::Acquire);
        if generation != self.generation {
            self.table = Arc::clone(
                &self
                    .shared
                    .table
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner),
            );
            self.generation = generation;
        }
    }

    /// The table as of the last refresh.
    pub fn table(&self) -> &RoutingTable {
        &self.table
    }
}

/// The process's routes: one table, one follower, for every interface
/// and worker (the process lives in one network namespace); the function
/// the follower reports a failed read to; whether it follows yet.
static SHARED: Mutex<Option<Installed>> = Mutex::new(None);
type Installed = (Routes, fn(&io::Error), bool);

/// The process's routes, read at the first call (see [`Routes::follow`]
/// for `failed`). Followed once [`follow_shared`] is called: the follower
/// is a thread, which a process that will give up privileges starts after
/// it has (a thread keeps the credentials it started with).
pub fn shared(failed: fn(&io::Error)) -> io::Result<Routes> {
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some((routes, _, _)) = slot.as_ref() {
        return Ok(routes.clone());
    }
    let routes = Routes::read()?;
    *slot = Some((routes.clone(), failed, false));
    Ok(routes)
}

/// Starts following the process's routes ([`shared`]), once; Ok(false)
/// when there are none.
pub fn follow_shared() -> io::Result<bool> {
    let mut slot = SHARED.lock().unwrap_or_else(PoisonError::into_inner);
    let Some((routes, failed, following)) = slot.as_mut() else {
        return Ok(false);
    };
    if !*following {
        routes.follow(*failed)?;
        *following = true;
    }
    Ok(true)
}

/// The process's routes if [`shared`] made them.
pub fn installed() -> Option<Routes> {
    SHARED
        .lock()
        .unwrap_or_else(PoisonError::into_inner)
        .as_ref()
        .map(|(routes, _, _)| routes.clone())
}

#[cfg(test)]
mod tests {
    use super::super::link::testnet::{ip, Netns};
    use super::*;
    use std::time::Instant;

    fn route(table: u32, prefix: &str, metric: u32, out: Option<u32>) -> Route {
        let (dst, len) = prefix.split_once('/').unwrap();
        Route {
            table,
            dst: dst.parse().unwrap(),
            len: len.parse().unwrap(),
            metric,
            out,
        }
    }

    fn out(table: &RoutingTable, to: &str) -> Option<u32> {
        table.out_interface(to.parse().unwrap())
    }

    #[test]
    fn the_longest_prefix_wins_and_the_lowest_metric_among_equals() {
        let table = RoutingTable::new(&[
            route(RT_TABLE_MAIN, "0.0.0.0/0", 100, Some(2)),
            route(RT_TABLE_MAIN, "0.0.0.0/0", 50, Some(3)),
            route(RT_TABLE_MAIN, "10.1.0.0/16", 0, Some(4)),
            route(RT_TABLE_MAIN, "10.1.2.0/24", 0, None),
            route(RT_TABLE_MAIN, "10.1.2.128/25", 0, Some(5)),
            route(RT_TABLE_MAIN, "::/0", 1024, Some(2)),
            route(RT_TABLE_MAIN, "2001:db8::/32", 0, None),
            route(RT_TABLE_MAIN, "2001:db8:1::/48", 0, Some(6)),
        ]);
        assert_eq!(out(&table, "192.0.2.1"), Some(3));
        assert_eq!(out(&table, "10.1.0.9"), Some(4));
        assert_eq!(out(&table, "10.1.2.127"), None);
        assert_eq!(out(&table, "10.1.2.128"), Some(5));
        assert_eq!(out(&table, "10.1.255.255"), Some(4));
        assert_eq!(out(&table, "2001:db9::1"), Some(2));
        assert_eq!(out(&table, "2001:db8:2::1"), None);
        assert_eq!(out(&table, "2001:db8:1:ffff::1"), Some(6));
        assert_eq!(table.len(), 7);
        // Two routes of one metric by two interfaces: by neither.
        let table = RoutingTable::new(&[
            route(RT_TABLE_MAIN, "::/0", 1024, Some(2)),
            route(RT_TABLE_MAIN, "::/0", 1024, Some(3)),
            route(RT_TABLE_MAIN, "fd00::/8", 1024, Some(3)),
            route(RT_TABLE_MAIN, "fd00::/8", 1024, Some(3)),
        ]);
        assert_eq!(out(&table, "2001:db8::1"), None);
        assert_eq!(out(&table, "fd00::1"), Some(3));
        // No route at all.
        let empty = RoutingTable::new(&[route(RT_TABLE_MAIN, "10.0.0.0/8", 0, Some(2))]);
        assert_eq!(out(&empty, "11.0.0.1"), None);
        assert_eq!(out(&empty, "::1"), None);
        assert_eq!(out(&empty, "10.255.0.1"), Some(2));
    }

    #[test]
    fn tables_are_looked_up_local_then_main_then_default() {
        let table = RoutingTable::new(&[
            // The host's own address and its subnet's broadcast address.
            route(RT_TABLE_LOCAL, "10.0.0.1/32", 0, None),
            route(RT_TABLE_LOCAL, "10.0.0.255/32", 0, None),
            // All of 10.8.0.0/16 is the host's (the AnyIP idiom): a longer
            // prefix of the main table inside it does not count.
            route(RT_TABLE_LOCAL, "10.8.0.0/16", 0, None),
            route(RT_TABLE_MAIN, "10.8.1.0/24", 0, Some(2)),
            route(RT_TABLE_MAIN, "10.0.0.0/24", 0, Some(2)),
            // The default table only where main has nothing.
            route(RT_TABLE_DEFAULT, "0.0.0.0/0", 0, Some(7)),
            route(RT_TABLE_DEFAULT, "10.0.0.128/25", 0, Some(7)),
            // Another table, as a policy rule would use it: not followed.
            route(100, "192.0.2.0/24", 0, Some(9)),
        ]);
        assert_eq!(out(&table, "10.0.0.1"), None);
        assert_eq!(out(&table, "10.0.0.255"), None);
        assert_eq!(out(&table, "10.0.0.2"), Some(2));
        assert_eq!(out(&table, "10.8.1.1"), None);
        assert_eq!(out(&table, "10.0.0.200"), Some(2));
        assert_eq!(out(&table, "192.0.2.1"), Some(7));
    }

    /// An `RTM_NEWROUTE` payload: rtmsg then attributes.
    fn message(header: [u8; 8], flags: u32, attributes: &[(u16, Vec<u8>)]) -> Vec<u8> {
        let mut m = header.to_vec();
        m.extend_from_slice(&flags.to_ne_bytes());
        for (kind, value) in attributes {
            m.extend_from_slice(&((4 + value.len()) as u16).to_ne_bytes());
            m.extend_from_slice(&kind.to_ne_bytes());
            m.extend_from_slice(value);
            m.resize(align4(m.len()), 0);
        }
        m
    }

    const V4: u8 = libc::AF_INET as u8;
    const V6: u8 = libc::AF_INET6 as u8;

    #[test]
    fn route_messages_are_parsed() {
        let oif = |i: u32| (RTA_OIF, i.to_ne_bytes().to_vec());
        // 10.1.0.0/16 via interface 3, metric 20, main table.
        let m = message(
            [V4, 16, 0, 0, 254, 3, 0, RTN_UNICAST],
            0,
            &[
                (RTA_DST, vec![10, 1, 0, 0]),
                (RTA_PRIORITY, 20u32.to_ne_bytes().to_vec()),
                oif(3),
            ],
        );
        assert_eq!(
            parse_route(&m),
            Some(route(RT_TABLE_MAIN, "10.1.0.0/16", 20, Some(3)))
        );
        // A default route (no RTA_DST) of IPv6 in a table named by
        // RTA_TABLE past 255.
        let m = message(
            [V6, 0, 0, 0, 252, 3, 0, RTN_UNICAST],
            0,
            &[(RTA_TABLE, 254u32.to_ne_bytes().to_vec()), oif(2)],
        );
        assert_eq!(
            parse_route(&m),
            Some(route(RT_TABLE_MAIN, "::/0", 0, Some(2)))
        );
        // Blackhole (6), local (2): no interface.
        for kind in [2, 6, 7, 8] {
            let m = message(
                [V4, 24, 0, 0, 254, 3, 0, kind],
                0,
                &[(RTA_DST, vec![192, 0, 2, 0]), oif(1)],
            );
            assert_eq!(parse_route(&m).unwrap().out, None, "type {kind}");
        }
        // Next hops on one interface, then on two.
        let hops = |interfaces: &[u32]| {
            let mut value = Vec::new();
            for &i in interfaces {
                value.extend_from_slice(&8u16.to_ne_bytes());
                value.extend_from_slice(&[0, 0]);
                value.extend_from_slice(&i.to_ne_bytes());
            }
            (RTA_MULTIPATH, value)
        };
        let multipath = |interfaces: &[u32]| {
            message(
                [V4, 0, 0, 0, 254, 3, 0, RTN_UNICAST],
                0,
                &[hops(interfaces)],
            )
        };
        assert_eq!(parse_route(&multipath(&[4, 4])).unwrap().out, Some(4));
        assert_eq!(parse_route(&multipath(&[4, 5])).unwrap().out, None);
        // A source-specific route leads nowhere here; one with a TOS, a
        // clone and one of another table are left out.
        let m = message([V6, 0, 48, 0, 254, 3, 0, RTN_UNICAST], 0, &[oif(2)]);
        assert_eq!(parse_route(&m).unwrap().out, None);
        let m = message([V4, 0, 0, 0x10, 254, 3, 0, RTN_UNICAST], 0, &[oif(2)]);
        assert_eq!(parse_route(&m), None);
        let m = message(
            [V4, 0, 0, 0, 254, 3, 0, RTN_UNICAST],
            RTM_F_CLONED,
            &[oif(2)],
        );
        assert_eq!(parse_route(&m), None);
        let m = message([V4, 0, 0, 0, 100, 3, 0, RTN_UNICAST], 0, &[oif(2)]);
        assert_eq!(parse_route(&m), None);
        assert_eq!(parse_route(&[V4, 0, 0]), None);
    }

    fn ifindex(ns: &Netns, dev: &str) -> u32 {
        let listed = ip(&["-n", &ns.name, "-o", "link", "show", "dev", dev]);
        listed.split(':').next().unwrap().trim().parse().unwrap()
    }

    #[test]
    fn the_kernels_table_is_read_and_followed() {
        let ns = Netns::new("route");
        let n = ns.name.as_str();
        for (dev, peer) in [("ra", "rb"), ("sa", "sb")] {
            ip(&[
                "-n", n, "link", "add", "name", dev, "type", "veth", "peer", "name", peer,
            ]);
            ip(&["-n", n, "link", "set", dev, "up"]);
            ip(&["-n", n, "link", "set", peer, "up"]);
        }
        ip(&["-n", n, "link", "set", "lo", "up"]);
        ip(&["-n", n, "addr", "add", "10.7.0.1/24", "dev", "ra"]);
        ip(&["-n", n, "addr", "add", "10.8.0.1/24", "dev", "sa"]);
        ip(&["-n", n, "addr", "add", "fd07::1/64", "dev", "ra", "nodad"]);
        ip(&[
            "-n",
            n,
            "route",
            "add",
            "198.51.100.0/24",
            "via",
            "10.7.0.2",
        ]);
        ip(&["-n", n, "route", "add", "203.0.113.0/24", "via", "10.8.0.2"]);
        ip(&["-n", n, "route", "add", "blackhole", "198.51.100.128/25"]);
        ip(&["-n", n, "route", "add", "2001:db8::/32", "via", "fd07::2"]);
        ip(&["-n", n, "route", "add", "unreachable", "2001:db8:dead::/48"]);
        let (ra, sa) = (ifindex(&ns, "ra"), ifindex(&ns, "sa"));

        let (routes, mut view) = ns.run(|| {
            let routes = Routes::read().unwrap();
            routes
                .follow(|e| panic!("following the routes: {e}"))
                .unwrap();
            let view = routes.view();
            (routes, view)
        });
        let table = view.table();
        assert_eq!(out(table, "10.7.0.2"), Some(ra));
        assert_eq!(out(table, "198.51.100.7"), Some(ra));
        assert_eq!(out(table, "198.51.100.200"), None, "blackhole");
        assert_eq!(out(table, "203.0.113.9"), Some(sa));
        assert_eq!(out(table, "192.0.2.1"), None, "no route");
        assert_eq!(out(table, "10.7.0.1"), None, "the host's own");
        assert_eq!(out(table, "10.7.0.255"), None, "broadcast");
        assert_eq!(out(table, "127.0.0.1"), None, "loopback");
        assert_eq!(out(table, "fd07::2"), Some(ra));
        assert_eq!(out(table, "fd07::1"), None, "the host's own");
        assert_eq!(out(table, "2001:db8:1::1"), Some(ra));
        assert_eq!(out(table, "2001:db8:dead::1"), None, "unreachable");
        assert_eq!(out(table, "ff02::1"), None, "multicast");
        // Link-local: every interface has fe80::/64; the answer goes out
        // of the one the request came in by.
        assert_eq!(out(table, "fe80::1"), None);
        assert!(table.leads_out_of("fe80::1".parse().unwrap(), ra));
        assert!(table.leads_out_of("fe80::1".parse().unwrap(), sa));
        assert!(table.leads_out_of("10.7.0.2".parse().unwrap(), ra));
        assert!(!table.leads_out_of("10.7.0.2".parse().unwrap(), sa));
        assert!(!table.leads_out_of("fec0::1".parse().unwrap(), ra));

        // A change reaches the view.
        ip(&["-n", n, "route", "add", "blackhole", "10.7.0.128/25"]);
        ip(&["-n", n, "route", "add", "192.0.2.0/24", "dev", "ra"]);
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            view.refresh();
            let table = view.table();
            if out(table, "10.7.0.200").is_none() && out(table, "192.0.2.1") == Some(ra) {
                break;
            }
            assert!(Instant::now() < deadline, "the change was not followed");
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(out(view.table(), "10.7.0.2"), Some(ra));
        drop(routes);
    }
}
