//! The connection slots of one worker's TCP listeners (HTTP and HTTPS
//! together, or the metrics endpoint): a cap on all connections, caps per
//! client address and per wider block of addresses (a subnet, a network: see
//! [`BlockLevel`]), and, when the worker is full, the connection idle the
//! longest closed to make room for a new one.
//!
//! Without the last two, a few hundred connections that do nothing (or an
//! address that opens many) lock every other client out until they time out.
//! With them, one address holds at most its share, and so does one network
//! however many addresses it uses (an IPv6 /48 holds 65,536 /64s, each of
//! which would otherwise get a cap of its own); a connection that is idle
//! (accepted, or kept alive after its answer, with no request under way)
//! yields its slot to a newcomer before anyone is refused; one in the middle
//! of a request is never evicted, but is bounded by the request and write
//! deadlines instead.
//!
//! Idle connections form a list in the order they became idle, so the one
//! idle longest is its head: admitting, marking and evicting are O(1), not a
//! scan of the table.

use std::cell::RefCell;
use std::collections::HashMap;
use std::future::Future;
use std::net::IpAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use ahash::RandomState;
use slab::Slab;

use tracker_proto::{block_key, block_keys, BlockLevel};
use tracker_runtime::counters::Counter;

/// No entry (the end of the idle list).
const NONE: usize = usize::MAX;

struct Entry {
    /// The address whose blocks it counts against; `None` for an exempt
    /// client (a trusted proxy, which speaks for many, or an exempt network).
    counted: Option<IpAddr>,
    /// In the idle list (`prev`, `next` are its neighbours there).
    idle: bool,
    prev: usize,
    next: usize,
    /// Asked to close to make room; it no longer counts as open.
    evicted: bool,
    waker: Option<Waker>,
}

#[derive(Default)]
struct Inner {
    entries: Slab<Entry>,
    /// Connections open from each block, a map per level (narrowest first),
    /// since the keys of two levels may be equal.
    per_block: [HashMap<u128, u32, RandomState>; 3],
    /// Oldest idle first.
    idle_head: usize,
    idle_tail: usize,
    /// Entries evicted whose task has not let go of them yet.
    evicting: usize,
}

impl Inner {
    fn unlink(&mut self, id: usize) {
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        if !entry.idle {
            return;
        }
        entry.idle = false;
        let (prev, next) = (entry.prev, entry.next);
        match self.entries.get_mut(prev) {
            Some(p) => p.next = next,
            None => self.idle_head = next,
        }
        match self.entries.get_mut(next) {
            Some(n) => n.prev = prev,
            None => self.idle_tail = prev,
        }
    }

    fn push_idle(&mut self, id: usize) {
        let tail = self.idle_tail;
        let Some(entry) = self.entries.get_mut(id) else {
            return;
        };
        if entry.idle || entry.evicted {
            return;
        }
        entry.idle = true;
        entry.prev = tail;
        entry.next = NONE;
        match self.entries.get_mut(tail) {
            Some(t) => t.next = id,
            None => self.idle_head = id,
        }
        self.idle_tail = id;
    }

    /// Asks the connection idle the longest to close; false when none is idle.
    fn evict_oldest_idle(&mut self) -> bool {
        let id = self.idle_head;
        self.unlink(id);
        let Some(entry) = self.entries.get_mut(id) else {
            return false;
        };
        entry.evicted = true;
        if let Some(waker) = entry.waker.take() {
            waker.wake();
        }
        self.evicting += 1;
        true
    }
}

/// What [`ConnectionTable::admit`] decided.
pub enum Admission {
    /// Served, holding `slot` for as long as it is open; `evicted` says that
    /// the idlest connection was asked to close to make room for it.
    Admitted { slot: Slot, evicted: bool },
    /// Its block of this level (its address, subnet or network) holds its
    /// maximum already.
    BlockFull(BlockLevel),
    /// Every slot is taken by a connection with a request under way.
    Full,
}

/// Where a listener counts what admission decided.
pub struct AdmissionCounters<'a> {
    /// Idle connections closed to make room.
    pub evicted: &'a Counter,
    /// Connections refused because their block of each level (narrowest
    /// first, as [`BlockLevel::ALL`]) holds its maximum.
    pub block_limit: [&'a Counter; 3],
    /// Connections refused: every slot holds a request under way.
    pub full: &'a Counter,
}

impl Admission {
    /// The slot of an admitted connection, counting the outcome either way;
    /// `None`: close the connection at once.
    pub fn counted(self, counters: AdmissionCounters<'_>) -> Option<Slot> {
        match self {
            Admission::Admitted { slot, evicted } => {
                if evicted {
                    counters.evicted.inc();
                }
                Some(slot)
            }
            Admission::BlockFull(level) => {
                let [address, subnet, network] = counters.block_limit;
                match level {
                    BlockLevel::Address => address.inc(),
                    BlockLevel::Subnet => subnet.inc(),
                    BlockLevel::Network => network.inc(),
                }
                None
            }
            Admission::Full => {
                counters.full.inc();
                None
            }
        }
    }
}

/// The slots of one worker's listeners (see the module's documentation).
pub struct ConnectionTable {
    max: usize,
    /// The most connections from one block of each level, narrowest first.
    max_per_block: [usize; 3],
    inner: RefCell<Inner>,
}

impl ConnectionTable {
    /// At most `max` connections open, and at most `max_per_block[level]` of
    /// them from one block of each level (its address, subnet and network,
    /// narrowest first as [`BlockLevel::ALL`]; an IPv6 address counts by its
    /// /64, see [`block_key`]).
    pub fn new(max: usize, max_per_block: [usize; 3]) -> Rc<Self> {
        Rc::new(ConnectionTable {
            max,
            max_per_block,
            inner: RefCell::new(Inner {
                idle_head: NONE,
                idle_tail: NONE,
                ..Inner::default()
            }),
        })
    }

    /// Admits a new connection from `ip`; `exempt` leaves it out of the caps
    /// per block. An admitted connection starts idle: mark it busy
    /// ([`Slot::set_idle`]) once its request begins.
    pub fn admit(self: &Rc<Self>, ip: IpAddr, exempt: bool) -> Admission {
        let mut inner = self.inner.borrow_mut();
        let counted = (!exempt).then_some(ip);
        let keys = block_keys(ip);
        if counted.is_some() {
            let caps = inner.per_block.iter().zip(self.max_per_block);
            for ((level, key), (blocks, max)) in keys.iter().zip(caps) {
                if blocks.get(key).map_or(0, |&n| n as usize) >= max {
                    return Admission::BlockFull(*level);
                }
            }
        }
        let mut evicted = false;
        if inner.entries.len() - inner.evicting >= self.max {
            if !inner.evict_oldest_idle() {
                return Admission::Full;
            }
            evicted = true;
        }
        if counted.is_some() {
            for ((_, key), blocks) in keys.iter().zip(&mut inner.per_block) {
                *blocks.entry(*key).or_insert(0) += 1;
            }
        }
        let id = inner.entries.insert(Entry {
            counted,
            idle: false,
            prev: NONE,
            next: NONE,
            evicted: false,
            waker: None,
        });
        inner.push_idle(id);
        drop(inner);
        let slot = Slot {
            table: self.clone(),
            id,
        };
        Admission::Admitted { slot, evicted }
    }

    /// Connections open now, not counting those asked to close.
    pub fn open(&self) -> usize {
        let inner = self.inner.borrow();
        inner.entries.len() - inner.evicting
    }

    /// Connections open now from the block of `level` that `ip` is in.
    pub fn open_from(&self, ip: IpAddr, level: BlockLevel) -> usize {
        let inner = self.inner.borrow();
        inner
            .per_block
            .get(level as usize)
            .and_then(|blocks| blocks.get(&block_key(ip, level)))
            .map_or(0, |&n| n as usize)
    }
}

/// One open connection's hold on its slot, released when dropped.
pub struct Slot {
    table: Rc<ConnectionTable>,
    id: usize,
}

impl Slot {
    /// Marks the connection idle (waiting for a request: it may be evicted,
    /// the longest idle first) or busy (a request under way: it is not).
    pub fn set_idle(&self, idle: bool) {
        let mut inner = self.table.inner.borrow_mut();
        if idle {
            inner.push_idle(self.id);
        } else {
            inner.unlink(self.id);
        }
    }

    /// Whether it was asked to close to make room for another.
    pub fn is_evicted(&self) -> bool {
        self.table
            .inner
            .borrow()
            .entries
            .get(self.id)
            .is_some_and(|e| e.evicted)
    }

    /// Resolves once the connection is asked to close (race it with the
    /// connection's reads).
    pub fn evicted(&self) -> Evicted<'_> {
        Evicted { slot: self }
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut inner = self.table.inner.borrow_mut();
        inner.unlink(self.id);
        let Some(entry) = inner.entries.try_remove(self.id) else {
            return;
        };
        if entry.evicted {
            inner.evicting -= 1;
        }
        if let Some(ip) = entry.counted {
            for ((_, key), blocks) in block_keys(ip).iter().zip(&mut inner.per_block) {
                if let Some(held) = blocks.get_mut(key) {
                    *held -= 1;
                    if *held == 0 {
                        blocks.remove(key);
                    }
                }
            }
        }
    }
}

/// The future of [`Slot::evicted`].
pub struct Evicted<'a> {
    slot: &'a Slot,
}

impl Future for Evicted<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.slot.table.inner.borrow_mut();
        let Some(entry) = inner.entries.get_mut(self.slot.id) else {
            return Poll::Ready(());
        };
        if entry.evicted {
            return Poll::Ready(());
        }
        match &entry.waker {
            Some(waker) if waker.will_wake(cx.waker()) => {}
            _ => entry.waker = Some(cx.waker().clone()),
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([10, 0, 0, last])
    }

    fn admitted(admission: Admission) -> (Slot, bool) {
        match admission {
            Admission::Admitted { slot, evicted } => (slot, evicted),
            Admission::BlockFull(level) => panic!("{level:?} full"),
            Admission::Full => panic!("full"),
        }
    }

    /// Caps per address alone (the wider levels out of the way).
    fn per_address(max: usize) -> [usize; 3] {
        [max, usize::MAX, usize::MAX]
    }

    fn full_at(admission: Admission) -> Option<BlockLevel> {
        match admission {
            Admission::BlockFull(level) => Some(level),
            _ => None,
        }
    }

    #[test]
    fn one_address_gets_its_share_and_others_theirs() {
        let table = ConnectionTable::new(10, per_address(2));
        let a1 = admitted(table.admit(ip(1), false)).0;
        let _a2 = admitted(table.admit(ip(1), false)).0;
        assert_eq!(
            full_at(table.admit(ip(1), false)),
            Some(BlockLevel::Address)
        );
        let _b = admitted(table.admit(ip(2), false)).0;
        // Exempt clients (trusted proxies) are not capped per address.
        let _p: Vec<_> = (0..3).map(|_| admitted(table.admit(ip(1), true))).collect();
        assert_eq!(table.open(), 6);
        assert_eq!(table.open_from(ip(1), BlockLevel::Address), 2);
        drop(a1);
        assert_eq!(table.open_from(ip(1), BlockLevel::Address), 1);
        let _a3 = admitted(table.admit(ip(1), false)).0;
    }

    #[test]
    fn an_ipv6_client_counts_by_its_64() {
        let table = ConnectionTable::new(10, per_address(1));
        let a: IpAddr = "2001:db8:1:2::1".parse().unwrap();
        let same_64: IpAddr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other_64: IpAddr = "2001:db8:1:3::1".parse().unwrap();
        let _a = admitted(table.admit(a, false)).0;
        assert_eq!(
            full_at(table.admit(same_64, false)),
            Some(BlockLevel::Address)
        );
        let _b = admitted(table.admit(other_64, false)).0;
    }

    /// Many addresses of one subnet or network share its cap; a refusal
    /// counts at no level, and a closed connection frees its place at each.
    #[test]
    fn a_subnet_and_a_network_are_capped_however_many_addresses_they_use() {
        for (a, b, c, elsewhere) in [
            // Two addresses of one /24, a third of another /24 of the /16.
            ("10.1.1.1", "10.1.1.2", "10.1.2.1", "10.2.0.1"),
            // Two /64s of one /56, a third of another /56 of the /48.
            (
                "2001:db8:1:100::1",
                "2001:db8:1:101::1",
                "2001:db8:1:200::1",
                "2001:db8:2::1",
            ),
        ] {
            let ip = |text: &str| text.parse::<IpAddr>().unwrap();
            let table = ConnectionTable::new(100, [2, 3, 4]);
            let mut held = Vec::new();
            held.push(admitted(table.admit(ip(a), false)).0);
            held.push(admitted(table.admit(ip(a), false)).0);
            held.push(admitted(table.admit(ip(b), false)).0);
            assert_eq!(full_at(table.admit(ip(b), false)), Some(BlockLevel::Subnet));
            held.push(admitted(table.admit(ip(c), false)).0);
            assert_eq!(
                full_at(table.admit(ip(c), false)),
                Some(BlockLevel::Network)
            );
            let _other = admitted(table.admit(ip(elsewhere), false)).0;
            assert_eq!(table.open_from(ip(a), BlockLevel::Network), 4);
            assert_eq!(table.open_from(ip(c), BlockLevel::Subnet), 1);
            // Exempt clients count nowhere.
            let _exempt = admitted(table.admit(ip(c), true)).0;
            assert_eq!(table.open_from(ip(c), BlockLevel::Network), 4);
            drop(held.remove(0));
            assert_eq!(table.open_from(ip(a), BlockLevel::Address), 1);
            held.push(admitted(table.admit(ip(c), false)).0);
            drop(held);
            for level in BlockLevel::ALL {
                assert_eq!(table.open_from(ip(a), level), 0, "{level:?}");
            }
        }
    }

    /// An IPv4 /32 and the /24 it begins have the same key: each level
    /// counts apart.
    #[test]
    fn levels_whose_keys_are_equal_count_apart() {
        let table = ConnectionTable::new(100, [1, 3, 3]);
        let base: IpAddr = "10.0.0.0".parse().unwrap();
        let _a = admitted(table.admit(base, false)).0;
        let _b = admitted(table.admit("10.0.0.7".parse().unwrap(), false)).0;
        assert_eq!(table.open_from(base, BlockLevel::Address), 1);
        assert_eq!(table.open_from(base, BlockLevel::Subnet), 2);
    }

    #[test]
    fn a_full_table_evicts_the_longest_idle_and_never_a_busy_one() {
        let table = ConnectionTable::new(3, per_address(10));
        let (s1, _) = admitted(table.admit(ip(1), false));
        let (s2, _) = admitted(table.admit(ip(2), false));
        let (s3, _) = admitted(table.admit(ip(3), false));
        // s1 gets busy, then idle again: now s2 has been idle longest.
        s1.set_idle(false);
        s1.set_idle(true);
        let (s4, evicted) = admitted(table.admit(ip(4), false));
        assert!(evicted);
        assert!(s2.is_evicted() && !s3.is_evicted() && !s1.is_evicted());
        assert_eq!(table.open(), 3, "the evicted one no longer counts");
        // Busy ones are safe; the idle s3 goes next.
        s1.set_idle(false);
        s4.set_idle(false);
        let (_s5, evicted) = admitted(table.admit(ip(5), false));
        assert!(evicted && s3.is_evicted());
        // Now every slot is busy (s5 starts idle: make it busy).
        _s5.set_idle(false);
        assert!(matches!(table.admit(ip(6), false), Admission::Full));
        drop(s2);
        drop(s3);
        assert!(matches!(table.admit(ip(6), false), Admission::Full));
        drop(s1);
        let _s6 = admitted(table.admit(ip(6), false)).0;
        assert_eq!(table.open(), 3);
    }

    #[test]
    fn an_evicted_slot_cannot_become_idle_again() {
        let table = ConnectionTable::new(1, per_address(10));
        let (s1, _) = admitted(table.admit(ip(1), false));
        let (s2, evicted) = admitted(table.admit(ip(2), false));
        assert!(evicted && s1.is_evicted());
        s1.set_idle(true);
        s2.set_idle(false);
        assert!(matches!(table.admit(ip(3), false), Admission::Full));
    }

    #[test]
    fn eviction_wakes_the_waiting_connection() {
        use std::sync::atomic::{AtomicBool, Ordering};
        use std::sync::Arc;
        use std::task::Wake;

        struct Flag(AtomicBool);
        impl Wake for Flag {
            fn wake(self: Arc<Self>) {
                self.0.store(true, Ordering::SeqCst);
            }
        }
        let flag = Arc::new(Flag(AtomicBool::new(false)));
        let waker = Waker::from(flag.clone());
        let mut cx = Context::from_waker(&waker);
        let table = ConnectionTable::new(1, per_address(10));
        let (s1, _) = admitted(table.admit(ip(1), false));
        let mut evicted = std::pin::pin!(s1.evicted());
        assert!(evicted.as_mut().poll(&mut cx).is_pending());
        let _s2 = admitted(table.admit(ip(2), false));
        assert!(flag.0.load(Ordering::SeqCst));
        assert!(evicted.as_mut().poll(&mut cx).is_ready());
    }
}
