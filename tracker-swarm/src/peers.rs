//! The peers of one address family of one swarm: a plain `Vec` searched linearly
//! while small, the same `Vec` plus an index from address to position once large.
//! Either way the peers stay contiguous, so an answer is copied from a run of memory.

use std::hash::Hash;
use std::mem;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::counts::MemoryUse;
use crate::expiry::Expiry;
use crate::index::AddressIndex;
use crate::ip_counts::IpCounts;
use crate::rng::{scale, WyRand};
use tracker_proto::CompactIp;

/// A swarm half is indexed once it grows past this many peers (a linear scan of 32
/// entries is a few cache lines and beats hashing)...
const LARGE: usize = 32;
/// ...and goes back to a plain `Vec` below this many, so a swarm hovering around
/// `LARGE` does not build and drop its index over and over.
const SMALL: usize = 16;
/// The capacities a small half's `Vec` grows through: with the 8 bytes of
/// glibc malloc's header, an odd count of IPv4 peers fills its block (blocks
/// are multiples of 16 bytes, the smallest 32), where doubling left a quarter
/// of each block unused on average. A lone peer is held in place (`Peers::One`).
const SMALL_CAPACITIES: [usize; 6] = [3, 5, 7, 11, 17, 25];
/// A shrunk swarm's index is rebuilt, to give memory back, only up to this many
/// peers (some 0.1 ms), so that a clean step stays short.
const REINDEX_MAX: usize = 4096;

/// The IP address type of one half.
pub(super) trait PeerIp: CompactIp + Eq + Hash + Into<IpAddr> {
    /// What identifies the client at this address for the cap on one
    /// client's peers in a swarm.
    type Client: Copy + Eq + Hash;

    /// The client at this address: an IPv4 address alone, an IPv6 address by
    /// its /64, since one host is usually given a whole /64 and can announce
    /// from any address in it (`tracker_proto::BlockLevel::Address`).
    fn client(&self) -> Self::Client;
}

impl PeerIp for Ipv4Addr {
    type Client = Ipv4Addr;

    fn client(&self) -> Ipv4Addr {
        *self
    }
}

impl PeerIp for Ipv6Addr {
    /// The top 64 bits.
    type Client = u64;

    fn client(&self) -> u64 {
        (u128::from(*self) >> 64) as u64
    }
}

/// A stored peer: 8 bytes with an IPv4 address, 20 with an IPv6 one. Whether
/// it seeds is not stored here but given by its position, and its peer id,
/// when the store keeps them, beside it (see `Half`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Peer<I> {
    pub ip: I,
    pub port: u16,
    /// When it expires (`now` of its last announce plus the peer time-out),
    /// and whether it had a download counted.
    pub expiry: Expiry,
}

impl<I: PeerIp> Peer<I> {
    /// Peers are keyed by the address they announced, not by peer id, so no client
    /// can replace another's entry.
    fn key(&self) -> (I, u16) {
        (self.ip, self.port)
    }

    /// The hash its client is counted by (see `IpCounts`).
    fn client_hash(&self) -> u32 {
        AddressIndex::hash(&self.ip.client())
    }
}

/// The index hash of the peer at position `i` of `peers`.
fn hash_at<I: PeerIp>(peers: &[Peer<I>], i: usize) -> Option<u32> {
    peers.get(i).map(|peer| AddressIndex::hash(&peer.key()))
}

/// The hash by which a large half indexes the peer at `addr` (a plain IPv4
/// address, not a mapped one, as the store keeps it).
pub(super) fn key_hash(addr: SocketAddr) -> u32 {
    match addr.ip() {
        IpAddr::V4(ip) => AddressIndex::hash(&(ip, addr.port())),
        IpAddr::V6(ip) => AddressIndex::hash(&(ip, addr.port())),
    }
}

/// 24 bytes inline with IPv4 peers (the lone peer and the `Box` fit beside
/// the `Vec`'s niche).
pub(super) enum Peers<I> {
    /// A swarm half of one peer, the most common: 6 in 10 torrents under the
    /// load generator's model. Held in place, it saves the 32-byte heap block
    /// that a `Vec` of one takes with malloc's overhead.
    One(Peer<I>),
    /// Empty, or two peers and more.
    Small(Vec<Peer<I>>),
    Large(Box<Indexed<I>>),
}

/// `repr(C)` and a cache line's alignment put all that a lookup and an
/// answer read of it (`peers`, `next_start`, the index's depth and first
/// sub-table) in its first line, which a prefetch loads alone.
#[repr(C, align(64))]
pub(super) struct Indexed<I> {
    peers: Vec<Peer<I>>,
    /// Where the next answer starts, as a fraction of the peers it is drawn
    /// from: drawn an answer ahead, so that a prefetch can load the peers
    /// there (see `Peers::prefetch_index`).
    next_start: u32,
    /// 1 + where the clean pass under way goes on; 0: none under way. Only
    /// a large half takes more than one clean step.
    clean_from: u32,
    /// Address to position in `peers`.
    index: AddressIndex,
    /// Peers per client (see `PeerIp::client`), kept while the cap on them
    /// is on.
    ip_counts: Option<Box<IpCounts>>,
}

impl<I: PeerIp> Indexed<I> {
    /// `count_ips`: keep `ip_counts`.
    fn new(peers: Vec<Peer<I>>, next_start: u32, count_ips: bool) -> Self {
        let ip_counts = count_ips.then(|| {
            let mut counts = IpCounts::default();
            peers.iter().for_each(|p| counts.add(p.client_hash()));
            Box::new(counts)
        });
        let mut indexed = Indexed {
            peers,
            index: AddressIndex::new(),
            next_start,
            clean_from: 0,
            ip_counts,
        };
        for i in 0..indexed.peers.len() {
            indexed.index_new(i);
        }
        indexed
    }

    /// Records a peer stored or gone in `ip_counts`.
    fn count(&mut self, peer: &Peer<I>, stored: bool) {
        if let Some(counts) = &mut self.ip_counts {
            if stored {
                counts.add(peer.client_hash());
            } else {
                counts.sub(peer.client_hash());
            }
        }
    }

    /// Indexes the peer at `pos`, stored there already (a split of the
    /// index hashes the peers it moves again, this one included).
    fn index_new(&mut self, pos: usize) {
        let peers = &self.peers;
        let hash_at = |i: usize| hash_at(peers, i).unwrap_or(0);
        self.index.insert(hash_at(pos), pos, hash_at);
    }

    fn hash_at(&self, i: usize) -> Option<u32> {
        hash_at(&self.peers, i)
    }
}

impl<I> Default for Peers<I> {
    fn default() -> Self {
        Peers::Small(Vec::new())
    }
}

impl<I: PeerIp> Peers<I> {
    pub fn as_slice(&self) -> &[Peer<I>] {
        match self {
            Peers::One(peer) => std::slice::from_ref(peer),
            Peers::Small(peers) => peers,
            Peers::Large(large) => &large.peers,
        }
    }

    pub fn len(&self) -> usize {
        self.as_slice().len()
    }

    /// Adds the bytes it holds to `memory`.
    pub fn add_memory(&self, memory: &mut MemoryUse) {
        let peers = match self {
            Peers::One(_) => return,
            Peers::Small(peers) => peers,
            Peers::Large(large) => {
                memory.indexes += mem::size_of::<Indexed<I>>() + large.index.heap_bytes();
                if let Some(counts) = &large.ip_counts {
                    memory.indexes += mem::size_of::<IpCounts>() + counts.bytes();
                }
                &large.peers
            }
        };
        memory.peers += peers.capacity() * mem::size_of::<Peer<I>>();
    }

    /// Where the next answer starts, as a fraction of the peers it is drawn
    /// from; None in a small half, where the caller draws it (its peers are
    /// prefetched whole).
    pub fn next_start(&self) -> Option<u32> {
        match self {
            Peers::One(_) | Peers::Small(_) => None,
            Peers::Large(large) => Some(large.next_start),
        }
    }

    /// 1 + where the clean pass under way goes on; 0: none under way.
    pub fn clean_from(&self) -> u32 {
        match self {
            Peers::One(_) | Peers::Small(_) => 0,
            Peers::Large(large) => large.clean_from,
        }
    }

    /// Records where the clean pass under way goes on (see `clean_from`). A
    /// small half is cleaned in one step, so it has none to record.
    pub fn set_clean_from(&mut self, clean_from: u32) {
        match self {
            Peers::One(_) | Peers::Small(_) => debug_assert_eq!(clean_from, 0),
            Peers::Large(large) => large.clean_from = clean_from,
        }
    }

    /// Draws where the next answer of a large half starts.
    pub fn draw_next_start(&mut self, rng: &mut WyRand) {
        if let Peers::Large(large) = self {
            large.next_start = rng.fraction();
        }
    }

    /// Prefetch, step 1 of 3 (see `SwarmStore::prefetch`): starts loading
    /// the peers of a small half, all that an answer from it reads, or the
    /// header of a large one (its peers and index are behind it). A lone
    /// peer is in the torrent's entry, loaded already.
    pub fn prefetch(&self) {
        match self {
            Peers::One(_) => {}
            Peers::Small(peers) => crate::prefetch::prefetch_all(peers.as_ptr(), peers.len()),
            Peers::Large(large) => crate::prefetch::prefetch(&**large),
        }
    }

    /// Step 2, in a large half: the index slot of the peer whose key has
    /// `key_hash` (see `key_hash`) and the first peers of the next answer,
    /// drawn from the first `pool` peers, for each of `pools` (a seeder's
    /// answer is drawn from the leechers only, and which this announce is the
    /// caller need not know).
    pub fn prefetch_index(&self, key_hash: u32, pools: [usize; 2]) {
        /// The peers loaded at the start; the CPU's prefetcher follows the
        /// run from there.
        const FIRST: usize = 4;
        if let Peers::Large(large) = self {
            large.index.prefetch(key_hash);
            for pool in pools.into_iter().filter(|&pool| pool > 0) {
                let start = scale(large.next_start, pool);
                crate::prefetch::prefetch_all(large.peers.as_ptr().wrapping_add(start), FIRST);
            }
        }
    }

    /// Step 3, in a large half: the peer its index slot names (most likely
    /// the one whose key has `key_hash`).
    pub fn prefetch_peer(&self, key_hash: u32) {
        if let Peers::Large(large) = self {
            if let Some(pos) = large.index.likely(key_hash) {
                crate::prefetch::prefetch_all(large.peers.as_ptr().wrapping_add(pos), 1);
            }
        }
    }

    /// The position of the peer at (`ip`, `port`).
    pub fn find(&self, ip: I, port: u16) -> Option<usize> {
        match self {
            Peers::One(_) | Peers::Small(_) => {
                self.as_slice().iter().position(|p| p.key() == (ip, port))
            }
            Peers::Large(large) => {
                let hash = AddressIndex::hash(&(ip, port));
                let peers = &large.peers;
                let is_key = |i: usize| peers.get(i).is_some_and(|p| p.key() == (ip, port));
                large.index.find(hash, is_key)
            }
        }
    }

    /// How many peers the client at `ip` holds (on different ports, and for
    /// IPv6 on any address of its /64; see `PeerIp::client`): a scan of a
    /// small half, a lookup in a large one that counts (see `Indexed::new`).
    pub fn count_client(&self, ip: I) -> usize {
        let client = ip.client();
        match self {
            Peers::Large(large) => match &large.ip_counts {
                Some(counts) => counts.get(AddressIndex::hash(&client)),
                None => large
                    .peers
                    .iter()
                    .filter(|p| p.ip.client() == client)
                    .count(),
            },
            Peers::One(_) | Peers::Small(_) => self
                .as_slice()
                .iter()
                .filter(|p| p.ip.client() == client)
                .count(),
        }
    }

    /// Records a re-announce of the peer at `i` (its address, the key,
    /// stays): its new expiry, with its mark (see `Expiry::completed`).
    pub fn refresh(&mut self, i: usize, expiry: Expiry) {
        let peer = match self {
            Peers::One(peer) => peer,
            Peers::Small(peers) => &mut peers[i],
            Peers::Large(large) => &mut large.peers[i],
        };
        peer.expiry = expiry;
    }

    pub fn swap(&mut self, a: usize, b: usize) {
        match self {
            // A lone peer has no other to swap with.
            _ if a == b => {}
            Peers::One(_) => {}
            Peers::Small(peers) => peers.swap(a, b),
            Peers::Large(large) => {
                let (Some(hash_a), Some(hash_b)) = (large.hash_at(a), large.hash_at(b)) else {
                    return;
                };
                large.peers.swap(a, b);
                large.index.swap(hash_a, a, hash_b, b);
            }
        }
    }

    /// Appends a peer not yet stored. `count_ips`: a half that grows large
    /// here counts its peers per client (see `count_client`).
    pub fn push(&mut self, peer: Peer<I>, count_ips: bool) {
        match self {
            Peers::Small(peers) if peers.is_empty() => *self = Peers::One(peer),
            Peers::One(first) => {
                let mut peers = Vec::with_capacity(SMALL_CAPACITIES[0]);
                peers.extend([*first, peer]);
                *self = Peers::Small(peers);
            }
            Peers::Small(peers) if peers.len() < LARGE => {
                if peers.len() == peers.capacity() {
                    let next = SMALL_CAPACITIES.iter().find(|&&c| c > peers.len());
                    let next = next.copied().unwrap_or(LARGE + 1);
                    peers.reserve_exact(next - peers.len());
                }
                peers.push(peer);
            }
            Peers::Small(peers) => {
                let mut peers = mem::take(peers);
                peers.push(peer);
                *self = Peers::Large(Box::new(Indexed::new(peers, 0, count_ips)));
            }
            Peers::Large(large) => {
                large.count(&peer, true);
                large.peers.push(peer);
                large.index_new(large.peers.len() - 1);
            }
        }
    }

    /// Stores a peer not yet stored at `at` (at most the length), moving the
    /// peer there to the end (`count_ips` as for `push`).
    pub fn push_at(&mut self, at: usize, peer: Peer<I>, count_ips: bool) {
        match self {
            Peers::Large(large) if at < large.peers.len() => {
                // Two index updates, where a push and a swap would take four.
                let moved = large.peers[at];
                let last = large.peers.len();
                large.count(&peer, true);
                large.peers[at] = peer;
                large.peers.push(moved);
                large
                    .index
                    .relocate(AddressIndex::hash(&moved.key()), at, last);
                large.index_new(at);
            }
            _ => {
                self.push(peer, count_ips);
                self.swap(at, self.len() - 1);
            }
        }
    }

    /// Removes the peer at `i`, moving the last one into its place.
    pub fn swap_remove(&mut self, i: usize) {
        match self {
            Peers::One(_) => {
                debug_assert_eq!(i, 0);
                *self = Peers::Small(Vec::new());
            }
            Peers::Small(peers) if peers.len() == 2 => {
                let kept = peers[1 - i];
                *self = Peers::One(kept);
            }
            Peers::Small(peers) => {
                peers.swap_remove(i);
            }
            Peers::Large(large) => {
                let last = large.peers.len() - 1;
                let gone = large.peers.swap_remove(i);
                large.index.remove(AddressIndex::hash(&gone.key()), i);
                large.count(&gone, false);
                if let Some(moved) = large.hash_at(i) {
                    large.index.relocate(moved, last, i);
                }
                if large.peers.len() < SMALL {
                    let mut peers = mem::take(&mut large.peers);
                    peers.shrink_to_fit();
                    *self = Peers::Small(peers);
                }
            }
        }
    }

    /// Gives back memory once at most a quarter of it is used. Called by the
    /// cleaner rather than on removal, so that a swarm shrinking and regrowing does
    /// not reallocate on every announce.
    pub fn compact(&mut self) {
        fn shrink<T>(v: &mut Vec<T>) -> bool {
            let shrink = v.len() <= v.capacity() / 4;
            if shrink {
                v.shrink_to_fit();
            }
            shrink
        }
        match self {
            Peers::One(_) => {}
            Peers::Small(peers) => {
                shrink(peers);
            }
            Peers::Large(large) => {
                // The index is rebuilt rather than shrunk in place, which also
                // merges the sub-tables that emptied; but only while that is
                // quick. Above, it keeps the sub-tables it had (its memory is
                // bounded by the swarm's peak) until the swarm shrinks to it.
                if shrink(&mut large.peers) && large.peers.len() <= REINDEX_MAX {
                    let count_ips = large.ip_counts.is_some();
                    **large =
                        Indexed::new(mem::take(&mut large.peers), large.next_start, count_ips);
                } else if let Some(counts) = &mut large.ip_counts {
                    counts.shrink();
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn peer(n: u16) -> Peer<Ipv4Addr> {
        Peer {
            ip: Ipv4Addr::new(10, 0, 0, 1),
            port: n,
            expiry: Expiry::at(u32::from(n)),
        }
    }

    /// Every stored peer is found at its position, whichever form the map has.
    fn assert_consistent(peers: &Peers<Ipv4Addr>) {
        for (i, p) in peers.as_slice().iter().enumerate() {
            assert_eq!(peers.find(p.ip, p.port), Some(i));
        }
        if let Peers::Large(large) = peers {
            assert_eq!(large.index.len(), large.peers.len());
        }
        assert_eq!(peers.find(Ipv4Addr::new(10, 0, 0, 2), 1), None);
    }

    #[test]
    fn key_hash_is_the_index_hash_of_a_peer_at_that_address() {
        let v4 = peer(7);
        let addr = SocketAddr::new(v4.ip.into(), v4.port);
        assert_eq!(key_hash(addr), AddressIndex::hash(&v4.key()));
        let v6 = Peer {
            ip: Ipv6Addr::LOCALHOST,
            port: 7,
            expiry: Expiry::at(0),
        };
        let addr = SocketAddr::new(v6.ip.into(), v6.port);
        assert_eq!(key_hash(addr), AddressIndex::hash(&v6.key()));
    }

    #[test]
    fn the_peers_of_one_address_are_counted_small_and_large() {
        for (len, count_ips) in [(8u16, true), (200, true), (200, false)] {
            let mut peers = Peers::default();
            for n in 0..len {
                let mut p = peer(n);
                // Every third on another address.
                if n % 3 == 0 {
                    p.ip = Ipv4Addr::new(10, 0, 0, 2);
                }
                if n % 2 == 0 {
                    peers.push(p, count_ips);
                } else {
                    peers.push_at(0, p, count_ips);
                }
            }
            let third = len.div_ceil(3) as usize;
            let count =
                |peers: &Peers<Ipv4Addr>, last| peers.count_client(Ipv4Addr::new(10, 0, 0, last));
            assert_eq!(count(&peers, 2), third);
            assert_eq!(count(&peers, 1), len as usize - third);
            assert_eq!(count(&peers, 3), 0);
            // Remove every peer of 10.0.0.2 but one, and compact.
            while count(&peers, 2) > 1 {
                let at = peers
                    .as_slice()
                    .iter()
                    .position(|p| p.ip.octets()[3] == 2)
                    .unwrap();
                peers.swap_remove(at);
            }
            assert_eq!(count(&peers, 2), 1);
            peers.compact();
            assert_eq!(count(&peers, 2), 1);
            assert_eq!(count(&peers, 1), len as usize - third);
            assert_consistent(&peers);
        }
    }

    #[test]
    fn a_client_is_the_address_block_limits_per_client_count_by() {
        use tracker_proto::{block_key, BlockLevel};
        let v6: Ipv6Addr = "2001:db8:1:2:3:4:5:6".parse().unwrap();
        let same_64: Ipv6Addr = "2001:db8:1:2::9".parse().unwrap();
        let other_64: Ipv6Addr = "2001:db8:1:3::6".parse().unwrap();
        assert_eq!(v6.client(), same_64.client());
        assert_ne!(v6.client(), other_64.client());
        let key = block_key(v6.into(), BlockLevel::Address);
        assert_eq!(u128::from(v6.client()) << 64, key);
        let v4 = Ipv4Addr::new(10, 0, 0, 1);
        assert_ne!(v4.client(), Ipv4Addr::new(10, 0, 0, 2).client());
    }

    #[test]
    fn sizes_stay_small() {
        assert_eq!(mem::size_of::<Peer<Ipv4Addr>>(), 8);
        assert_eq!(mem::size_of::<Peer<Ipv6Addr>>(), 20);
        assert_eq!(mem::size_of::<Peers<Ipv4Addr>>(), 24);
        assert_eq!(mem::size_of::<Indexed<Ipv4Addr>>(), 128);
        // The index's own first 32 bytes are what a lookup reads.
        assert_eq!(mem::offset_of!(Indexed<Ipv6Addr>, index), 32);
    }

    #[test]
    fn a_lone_peer_is_held_in_place_and_more_grow_through_the_small_capacities() {
        let mut peers = Peers::default();
        peers.push(peer(1), true);
        assert!(matches!(peers, Peers::One(_)));
        assert_consistent(&peers);
        let mut memory = MemoryUse::default();
        peers.add_memory(&mut memory);
        assert_eq!(memory, MemoryUse::default());
        let mut capacities = Vec::new();
        for n in 2..=LARGE as u16 {
            peers.push(peer(n), true);
            let Peers::Small(v) = &peers else { panic!() };
            capacities.push(v.capacity());
        }
        capacities.dedup();
        assert_eq!(capacities, [3, 5, 7, 11, 17, 25, LARGE + 1]);
        assert_consistent(&peers);
    }

    #[test]
    fn two_peers_less_one_is_a_lone_peer_and_one_less_is_empty() {
        for gone in [0, 1] {
            let mut peers = Peers::default();
            peers.push(peer(1), true);
            peers.push_at(0, peer(2), true);
            peers.swap_remove(gone);
            let Peers::One(kept) = &peers else { panic!() };
            assert_eq!(kept.port, [1, 2][gone]);
            assert_consistent(&peers);
            peers.refresh(0, Expiry::at(77));
            assert_eq!(peers.as_slice()[0].expiry, Expiry::at(77));
            peers.swap(0, 0);
            peers.compact();
            peers.swap_remove(0);
            assert!(peers.as_slice().is_empty());
            assert!(matches!(&peers, Peers::Small(v) if v.capacity() == 0));
        }
    }

    #[test]
    fn grows_into_index_and_back_with_hysteresis_keeping_every_peer() {
        let mut peers = Peers::default();
        let mut model: Vec<u16> = (0..=LARGE as u16).collect();
        for &n in &model[..LARGE] {
            peers.push(peer(n), true);
        }
        assert!(matches!(peers, Peers::Small(_)));
        peers.push(peer(LARGE as u16), true);
        assert!(matches!(peers, Peers::Large(_)));
        assert_consistent(&peers);

        // Remove from the front so that moved peers must be re-indexed.
        while model.len() >= SMALL {
            assert!(matches!(peers, Peers::Large(_)));
            peers.swap_remove(0);
            model.swap_remove(0);
            assert_consistent(&peers);
        }
        assert!(matches!(peers, Peers::Small(_)));
        let ports: Vec<u16> = peers.as_slice().iter().map(|p| p.port).collect();
        assert_eq!(ports, model);
    }

    #[test]
    fn swap_and_refresh_keep_the_index() {
        let mut peers = Peers::default();
        for n in 0..40 {
            peers.push(peer(n), true);
        }
        peers.swap(3, 30);
        peers.refresh(3, Expiry::at(99));
        assert_consistent(&peers);
        assert_eq!(peers.as_slice()[3].port, 30);
        assert_eq!(peers.as_slice()[3].expiry, Expiry::at(99));
        assert_eq!(peers.find(Ipv4Addr::new(10, 0, 0, 1), 40), None);
    }

    #[test]
    fn push_at_moves_the_peer_there_to_the_end() {
        for len in [3, LARGE + 8] {
            let mut peers = Peers::default();
            for n in 0..len as u16 {
                peers.push(peer(n), true);
            }
            peers.push_at(1, peer(1000), true);
            peers.push_at(peers.len(), peer(1001), true);
            assert_consistent(&peers);
            let ports: Vec<u16> = peers.as_slice().iter().map(|p| p.port).collect();
            let mut want: Vec<u16> = (0..len as u16).collect();
            want[1] = 1000;
            want.extend([1, 1001]);
            assert_eq!(ports, want);
        }
    }

    #[test]
    fn compact_gives_back_unused_capacity() {
        let mut peers = Peers::default();
        for n in 0..16 {
            peers.push(peer(n), true);
        }
        for _ in 0..12 {
            peers.swap_remove(0);
        }
        peers.compact();
        let Peers::Small(v) = &peers else { panic!() };
        assert_eq!(v.capacity(), 4);
    }
}
