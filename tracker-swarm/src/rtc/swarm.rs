//! One torrent's WebRTC peers: keyed by peer id and connection (a browser
//! has no address another could reach it at; it is reached through its
//! connection), leechers before seeders as in a BitTorrent swarm half,
//! searched linearly while few and through an index of their ids once many.
//!
//! A peer id is no one's to own: offers carry peer ids, so anyone can learn
//! a browser's, and whichever connection claimed it first in a torrent
//! could keep that browser out of the torrent (announcing first in the
//! torrents it would join). Two connections announcing one id are two
//! peers; each gets the offers drawn for its own entry, and an answer goes
//! back only to the connection whose offer it answers (tracker-ws checks
//! it), so neither receives the other's.

use std::net::IpAddr;

use tracker_proto::{block_key, AnnounceEvent, BlockLevel, PeerId, ScrapeStats};

use super::{ConnectionRef, RtcAnnounce};
use crate::counts::{MemoryUse, SwarmCounts};
use crate::expiry::Expiry;
use crate::index::AddressIndex;
use crate::ip_counts::IpCounts;
use crate::rng::WyRand;
use crate::torrent::{AddressCap, Unstored, CLEAN_WINDOW};

/// A swarm is indexed once it grows past this many peers (a scan of 32
/// peers is a few cache lines)...
const LARGE: usize = 32;
/// ...and scanned again once a clean pass leaves it below this many, so that
/// a swarm hovering around `LARGE` does not build and drop its index over
/// and over.
const SMALL: usize = 16;

/// One stored peer: 40 bytes. Whether it seeds is its position.
#[derive(Clone, Copy, Debug)]
struct Peer {
    peer_id: PeerId,
    /// The hash of its client (an IPv4 address, an IPv6 /64) by which the cap
    /// on one client's peers counts it (see `IpCounts`).
    client: u32,
    expiry: Expiry,
    /// `ConnectionRef`, its fields apart so that the peer packs into 40 bytes.
    worker: u16,
    /// Its `completed` counted already: a peer completes once, however
    /// often it turns leecher again (or anyone could raise the count by
    /// one per two announces).
    completed: bool,
    connection: u64,
}

impl Peer {
    fn connection(&self) -> ConnectionRef {
        ConnectionRef {
            worker: self.worker,
            id: self.connection,
        }
    }
}

/// The hash a peer is indexed by: of its id and its connection, which
/// together are its key. Of the id alone, connections announcing one id
/// (anyone may) would pile into one run of slots, which every lookup near it
/// would then walk.
fn key_hash(peer_id: &PeerId, connection: ConnectionRef) -> u32 {
    AddressIndex::hash(&(peer_id, connection.worker, connection.id))
}

impl Peer {
    fn key_hash(&self) -> u32 {
        key_hash(&self.peer_id, self.connection())
    }
}

/// The hash by which the cap on one client's peers counts the client at
/// `ip` (see `Peer::client`).
fn client_hash(ip: IpAddr) -> u32 {
    AddressIndex::hash(&block_key(ip, BlockLevel::Address))
}

/// What a large swarm keeps beside its peers.
struct Index {
    /// Peer id to position.
    ids: AddressIndex,
    /// Peers per client, while the cap on them is on.
    clients: Option<IpCounts>,
    /// 1 + where the clean pass under way goes on; 0: none under way. Only a
    /// large swarm takes more than one clean step.
    clean_from: u32,
}

impl Index {
    fn new(peers: &[Peer], count_clients: bool) -> Self {
        let mut index = Index {
            ids: AddressIndex::new(),
            clients: count_clients.then(IpCounts::default),
            clean_from: 0,
        };
        for (pos, peer) in peers.iter().enumerate() {
            index.add(peers, pos, peer);
        }
        index
    }

    /// Indexes `peer`, stored at `pos` of `peers` already.
    fn add(&mut self, peers: &[Peer], pos: usize, peer: &Peer) {
        let hash_at = |i: usize| peers.get(i).map_or(0, Peer::key_hash);
        self.ids.insert(peer.key_hash(), pos, hash_at);
        if let Some(clients) = &mut self.clients {
            clients.add(peer.client);
        }
    }

    fn bytes(&self) -> usize {
        self.ids.heap_bytes() + self.clients.as_ref().map_or(0, IpCounts::bytes)
    }
}

/// What few swarms need, boxed so that a torrent's entry stays one cache
/// line (see `RtcTorrent`).
#[derive(Default)]
struct More {
    index: Option<Index>,
    /// A torrent restored from the state file holds no peers, only its
    /// downloaded count: kept until then for its browsers to announce again.
    /// None once a peer is stored, from which on it goes as any torrent
    /// does when its last peer does.
    held_until: Option<Expiry>,
}

/// One announce as a swarm sees it.
pub(crate) struct Visit<'a> {
    pub req: &'a RtcAnnounce,
    pub now: u32,
    /// The expiry to store for the announcing peer.
    pub expiry: Expiry,
    /// `max_peers_per_torrent`.
    pub per_torrent: usize,
    /// How many more peers the store may hold (`max_peers`, both kinds).
    pub store_room: usize,
    pub per_address: AddressCap,
}

/// One torrent's WebRTC swarm: 40 bytes, so that its entry in a segment's
/// table is one cache line as a BitTorrent torrent's is.
#[derive(Default)]
pub(crate) struct RtcTorrent {
    /// Leechers first, then seeders.
    peers: Vec<Peer>,
    leechers: u32,
    /// `completed` events counted (BEP 48 `downloaded`).
    downloaded: u32,
    more: Option<Box<More>>,
}

impl RtcTorrent {
    /// A torrent of the state file: no peers, `downloaded` held until
    /// `held_until` (see `More::held_until`).
    pub fn restored(downloaded: u32, held_until: Expiry) -> Self {
        RtcTorrent {
            downloaded,
            more: Some(Box::new(More {
                index: None,
                held_until: Some(held_until),
            })),
            ..RtcTorrent::default()
        }
    }

    /// The larger of the two downloaded counts (a torrent should be in a
    /// state file once; should it come twice, neither count is inflated),
    /// and one with no peers held until `held_until` at least.
    pub fn restore_again(&mut self, downloaded: u32, held_until: Expiry, now: u32) {
        self.downloaded = self.downloaded.max(downloaded);
        if self.peers.is_empty() {
            let more = self.more.get_or_insert_with(Box::default);
            let later = more
                .held_until
                .filter(|held| held.left(now) > held_until.left(now));
            more.held_until = Some(later.unwrap_or(held_until));
        }
    }

    pub fn counts(&self) -> SwarmCounts {
        SwarmCounts {
            seeders: self.peers.len() as u32 - self.leechers,
            leechers: self.leechers,
        }
    }

    pub fn scrape(&self) -> ScrapeStats {
        let SwarmCounts { seeders, leechers } = self.counts();
        ScrapeStats {
            seeders,
            completed: self.downloaded,
            leechers,
        }
    }

    pub fn len(&self) -> usize {
        self.peers.len()
    }

    fn index(&self) -> Option<&Index> {
        self.more.as_deref().and_then(|m| m.index.as_ref())
    }

    fn held_until(&self) -> Option<Expiry> {
        self.more.as_deref().and_then(|m| m.held_until)
    }

    /// Whether the cleaner may drop it: no peer, and no restored count
    /// waiting for its peers.
    pub fn is_done(&self, now: u32) -> bool {
        self.peers.is_empty() && !self.held_until().is_some_and(|h| h.is_live(now))
    }

    /// Its downloaded count, if a state file should keep it: one that counts
    /// something, of a swarm a live peer holds or restored and waiting for
    /// its peers (one the cleaner would keep).
    pub fn saved_count(&self, now: u32) -> Option<u32> {
        let live = self.held_until().is_some_and(|h| h.is_live(now))
            || self.peers.iter().any(|p| p.expiry.is_live(now));
        (live && self.downloaded > 0).then_some(self.downloaded)
    }

    fn is_seeder(&self, i: usize) -> bool {
        i >= self.leechers as usize
    }

    /// The position of the peer `peer_id` of `connection`.
    fn find(&self, peer_id: &PeerId, connection: ConnectionRef) -> Option<usize> {
        let peers = &self.peers;
        let is = |p: &Peer| p.peer_id == *peer_id && p.connection() == connection;
        match self.index() {
            Some(index) => index.ids.find(key_hash(peer_id, connection), |pos| {
                peers.get(pos).is_some_and(is)
            }),
            None => peers.iter().position(is),
        }
    }

    /// How many peers the client with hash `client` holds here.
    fn count_client(&self, client: u32) -> usize {
        match self.index().and_then(|index| index.clients.as_ref()) {
            Some(counts) => counts.get(client),
            None => self.peers.iter().filter(|p| p.client == client).count(),
        }
    }

    /// Swaps the peers at `a` and `b`, in the index too.
    fn swap(&mut self, a: usize, b: usize) {
        if a == b {
            return;
        }
        self.peers.swap(a, b);
        let index = self.more.as_deref_mut().and_then(|m| m.index.as_mut());
        if let (Some(index), Some(at_a), Some(at_b)) = (index, self.peers.get(a), self.peers.get(b))
        {
            // Each now holds what the other did.
            index.ids.swap(at_b.key_hash(), a, at_a.key_hash(), b);
        }
    }

    /// Moves the peer at `i` across the seeder/leecher boundary if `seeder`
    /// says it is on the wrong side; returns its position.
    fn set_seeder(&mut self, i: usize, seeder: bool) -> usize {
        let boundary = self.leechers as usize;
        match (self.is_seeder(i), seeder) {
            (true, false) => {
                self.swap(i, boundary);
                self.leechers += 1;
                boundary
            }
            (false, true) => {
                self.leechers -= 1;
                self.swap(i, boundary - 1);
                boundary - 1
            }
            _ => i,
        }
    }

    /// Stores a new peer; returns its position. `count_clients`: a large
    /// swarm counts its peers per client (the cap on them is on).
    fn insert(&mut self, peer: Peer, seeder: bool, count_clients: bool) -> usize {
        let end = self.peers.len();
        self.peers.push(peer);
        let peers = &self.peers;
        let more = self.more.as_deref_mut();
        match more.and_then(|m| m.index.as_mut()) {
            Some(index) => index.add(peers, end, &peer),
            None if peers.len() > LARGE => {
                let index = Index::new(peers, count_clients);
                self.more.get_or_insert_with(Box::default).index = Some(index);
            }
            None => {}
        }
        if seeder {
            return end;
        }
        // The first seeder, if any, goes to the end to make room.
        let at = self.leechers as usize;
        self.swap(at, end);
        self.leechers += 1;
        at
    }

    fn remove(&mut self, i: usize) {
        // A leecher moves to the end of the leechers first, where it becomes
        // the first seeder.
        let i = self.set_seeder(i, true);
        if i >= self.peers.len() {
            return;
        }
        let gone = self.peers.swap_remove(i);
        let moved = self.peers.get(i);
        if let Some(index) = self.more.as_deref_mut().and_then(|m| m.index.as_mut()) {
            index.ids.remove(gone.key_hash(), i);
            if let Some(moved) = moved {
                index.ids.relocate(moved.key_hash(), self.peers.len(), i);
            }
            if let Some(clients) = &mut index.clients {
                clients.sub(gone.client);
            }
        }
    }

    /// Applies an announce, and unless it stopped appends to `receivers` up
    /// to `req.offers` live peers other than the announcer's connection (a
    /// seeder's from the leechers only), none twice. Returns why the
    /// announcing peer, a new one, was not stored, if it was not.
    pub fn announce(
        &mut self,
        visit: &Visit,
        rng: &mut WyRand,
        receivers: &mut Vec<(PeerId, ConnectionRef)>,
    ) -> Option<Unstored> {
        let req = visit.req;
        let found = self.find(&req.peer_id, req.connection);
        if req.event == AnnounceEvent::Stopped {
            if let Some(i) = found {
                self.remove(i);
            }
            return None;
        }
        let room = self.peers.len() < visit.per_torrent && visit.store_room > 0;
        let mut unstored = None;
        // Where the announcing peer is stored, and whether it seeded.
        let stored = match found {
            Some(i) => {
                let was_seeder = self.is_seeder(i);
                let i = self.set_seeder(i, req.seeder);
                if let Some(peer) = self.peers.get_mut(i) {
                    peer.expiry = visit.expiry;
                }
                Some((i, was_seeder))
            }
            None if room
                && visit
                    .per_address
                    .max
                    .is_some_and(|max| self.count_client(client_hash(req.ip)) >= max) =>
            {
                unstored = Some(Unstored::AddressLimit);
                None
            }
            None if room => {
                let peer = Peer {
                    peer_id: req.peer_id,
                    client: client_hash(req.ip),
                    expiry: visit.expiry,
                    worker: req.connection.worker,
                    completed: false,
                    connection: req.connection.id,
                };
                let i = self.insert(peer, req.seeder, visit.per_address.counted);
                if let Some(more) = &mut self.more {
                    more.held_until = None;
                }
                Some((i, false))
            }
            None => {
                unstored = Some(Unstored::NoRoom);
                None
            }
        };
        // As in a BitTorrent swarm: only a peer stored completes (or anyone
        // could count downloads from connections the limits turn away), a
        // seeder never again, and a peer once.
        if let Some((i, false)) = stored.filter(|_| req.event == AnnounceEvent::Completed) {
            if let Some(peer) = self.peers.get_mut(i).filter(|p| !p.completed) {
                peer.completed = true;
                self.downloaded = self.downloaded.saturating_add(1);
            }
        }
        self.draw(req, visit.now, rng, receivers);
        unstored
    }

    /// Appends to `out` up to `req.offers` live peers, none twice and none of
    /// the announcer's connection (a seeder's from the leechers only): first
    /// picks at random while they would rarely collide, then a run from a
    /// random start, wrapping, for the rest. Reads at most every peer once
    /// and compares each one taken with the few taken before.
    fn draw(
        &self,
        req: &RtcAnnounce,
        now: u32,
        rng: &mut WyRand,
        out: &mut Vec<(PeerId, ConnectionRef)>,
    ) {
        let pool = if req.seeder {
            self.peers.get(..self.leechers as usize).unwrap_or_default()
        } else {
            &self.peers[..]
        };
        let wanted = req.offers.min(pool.len());
        if wanted == 0 {
            return;
        }
        let first = out.len();
        // Whether `peer` may go to `out`, and then pushes it; whether `out`
        // has all it wants.
        let offer = |out: &mut Vec<(PeerId, ConnectionRef)>, peer: &Peer| {
            let taken = out.get(first..).unwrap_or_default();
            if peer.expiry.is_live(now)
                && peer.connection() != req.connection
                && !taken
                    .iter()
                    .any(|&(id, at)| id == peer.peer_id && at == peer.connection())
            {
                out.push((peer.peer_id, peer.connection()));
            }
            out.len() - first >= wanted
        };
        if wanted * 2 <= pool.len() {
            for _ in 0..wanted * 2 {
                if pool
                    .get(rng.below(pool.len()))
                    .is_some_and(|p| offer(out, p))
                {
                    return;
                }
            }
        }
        let start = rng.below(pool.len());
        let (before, after) = pool.split_at(start);
        for peer in after.iter().chain(before) {
            if offer(out, peer) {
                return;
            }
        }
    }

    /// Removes the peer `peer_id` of `connection`; whether it did.
    pub fn disconnect(&mut self, peer_id: &PeerId, connection: ConnectionRef) -> bool {
        let Some(i) = self.find(peer_id, connection) else {
            return false;
        };
        self.remove(i);
        true
    }

    /// Drops the peers that expired by `now`, looking at up to `CLEAN_WINDOW`
    /// positions of a large swarm from where the pass under way stopped (a
    /// small one whole); returns whether the pass is done. Between steps,
    /// announces may move a peer not yet looked at behind the pass: the next
    /// pass takes it.
    pub fn drop_expired(&mut self, now: u32) -> bool {
        let windowed = self.index().is_some();
        let mut i = self.index().map_or(0, |index| index.clean_from as usize);
        i = i.saturating_sub(1);
        let mut looked = 0;
        // `remove` fills position `i` from behind it, so `i` only advances
        // past a live peer and every peer is looked at once.
        while !windowed || looked < CLEAN_WINDOW {
            let Some(peer) = self.peers.get(i) else {
                break;
            };
            if peer.expiry.is_live(now) {
                i += 1;
            } else {
                self.remove(i);
            }
            looked += 1;
        }
        let done = i >= self.peers.len();
        let peers = self.peers.len();
        if let Some(more) = &mut self.more {
            if let Some(index) = &mut more.index {
                index.clean_from = if done { 0 } else { i as u32 + 1 };
                if let Some(clients) = &mut index.clients {
                    clients.shrink();
                }
            }
            if done && peers < SMALL {
                more.index = None;
            }
            if more.index.is_none() && more.held_until.is_none_or(|h| !h.is_live(now)) {
                self.more = None;
            }
        }
        if done && self.peers.len() <= self.peers.capacity() / 4 {
            self.peers.shrink_to_fit();
        }
        done
    }

    /// Adds the bytes it holds outside its entry to `memory.rtc`.
    pub fn add_memory(&self, memory: &mut MemoryUse) {
        memory.rtc += self.peers.capacity() * std::mem::size_of::<Peer>();
        if let Some(more) = &self.more {
            memory.rtc += std::mem::size_of::<More>() + more.index.as_ref().map_or(0, Index::bytes);
        }
    }

    /// Asserts what the other methods rely on: every peer found where it
    /// is, a large swarm indexed, its clients counted right.
    #[cfg(test)]
    pub fn check_invariants(&self) {
        assert!(self.leechers as usize <= self.peers.len());
        let mut held = std::collections::HashMap::new();
        for (i, peer) in self.peers.iter().enumerate() {
            let found = self.find(&peer.peer_id, peer.connection());
            assert_eq!(found, Some(i), "peer {i} where it is");
            *held.entry(peer.client).or_insert(0) += 1;
        }
        if let Some(clients) = self.index().and_then(|index| index.clients.as_ref()) {
            for (&client, &count) in &held {
                assert_eq!(clients.get(client), count);
            }
            assert_eq!(clients.addresses(), held.len());
        }
        if self.peers.len() > LARGE {
            assert!(self.index().is_some(), "a large swarm is indexed");
        }
    }

    /// The peers, leechers first, each with its connection.
    #[cfg(test)]
    pub fn peer_list(&self) -> Vec<(PeerId, ConnectionRef, bool)> {
        let peers = self.peers.iter().enumerate();
        peers
            .map(|(i, p)| (p.peer_id, p.connection(), self.is_seeder(i)))
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_is_one_cache_line() {
        assert_eq!(std::mem::size_of::<RtcTorrent>(), 40);
        assert_eq!(std::mem::size_of::<Peer>(), 40);
    }
}
