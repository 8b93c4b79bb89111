//! One torrent's WebRTC peers: keyed by peer id (a browser has no address
//! another could reach it at; it is reached through its connection), leechers
//! before seeders as in a BitTorrent swarm half, searched linearly while few
//! and through an index of their ids once many.

use std::net::IpAddr;

use tracker_proto::{block_key, AnnounceEvent, BlockLevel, PeerId, ScrapeStats};

use super::{ConnectionRef, RtcAnnounce};
use crate::counts::{MemoryUse, SwarmCounts};
use crate::expiry::Expiry;
use crate::index::AddressIndex;
use crate::ip_counts::IpCounts;
use crate::refusal::AnnounceRefused;
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

fn id_hash(peer_id: &PeerId) -> u32 {
    AddressIndex::hash(peer_id)
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
        let hash_at = |i: usize| peers.get(i).map_or(0, |p| id_hash(&p.peer_id));
        self.ids.insert(id_hash(&peer.peer_id), pos, hash_at);
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

    /// The position of the peer `peer_id`.
    fn find(&self, peer_id: &PeerId) -> Option<usize> {
        let peers = &self.peers;
        match self.index() {
            Some(index) => index.ids.find(id_hash(peer_id), |pos| {
                peers.get(pos).is_some_and(|p| p.peer_id == *peer_id)
            }),
            None => peers.iter().position(|p| p.peer_id == *peer_id),
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
            index
                .ids
                .swap(id_hash(&at_b.peer_id), a, id_hash(&at_a.peer_id), b);
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
            index.ids.remove(id_hash(&gone.peer_id), i);
            if let Some(moved) = moved {
                index
                    .ids
                    .relocate(id_hash(&moved.peer_id), self.peers.len(), i);
            }
            if let Some(clients) = &mut index.clients {
                clients.sub(gone.client);
            }
        }
    }

    /// Applies an announce, and unless it stopped appends to `receivers` up
    /// to `req.offers` live peers other than the announcer's connection (a
    /// seeder's from the leechers only), none twice. Returns why the
    /// announcing peer, a new one, was not stored, if it was not; refuses a
    /// peer id that a live peer of another connection holds, changing
    /// nothing.
    pub fn announce(
        &mut self,
        visit: &Visit,
        rng: &mut WyRand,
        receivers: &mut Vec<(PeerId, ConnectionRef)>,
    ) -> Result<Option<Unstored>, AnnounceRefused> {
        let req = visit.req;
        let mut store_room = visit.store_room;
        let mut found = self.find(&req.peer_id);
        if let Some((i, held)) = found.and_then(|i| Some((i, *self.peers.get(i)?))) {
            if held.connection() != req.connection {
                // Otherwise anyone who learnt a peer id (offers carry them)
                // could take another browser's place and receive its offers.
                if held.expiry.is_live(visit.now) {
                    return Err(AnnounceRefused::PeerIdInUse);
                }
                // Its connection has not announced for a whole time-out:
                // the entry is as good as gone, and its id free.
                self.remove(i);
                store_room += 1;
                found = None;
            }
        }
        if req.event == AnnounceEvent::Stopped {
            if let Some(i) = found {
                self.remove(i);
            }
            return Ok(None);
        }
        let completed = req.event == AnnounceEvent::Completed;
        let room = self.peers.len() < visit.per_torrent && store_room > 0;
        let mut unstored = None;
        let (stored, was_seeder) = match found {
            Some(i) => {
                let was_seeder = self.is_seeder(i);
                let i = self.set_seeder(i, req.seeder);
                if let Some(peer) = self.peers.get_mut(i) {
                    peer.expiry = visit.expiry;
                }
                (true, was_seeder)
            }
            None if room
                && visit
                    .per_address
                    .max
                    .is_some_and(|max| self.count_client(client_hash(req.ip)) >= max) =>
            {
                unstored = Some(Unstored::AddressLimit);
                (false, false)
            }
            None if room => {
                let peer = Peer {
                    peer_id: req.peer_id,
                    client: client_hash(req.ip),
                    expiry: visit.expiry,
                    worker: req.connection.worker,
                    connection: req.connection.id,
                };
                self.insert(peer, req.seeder, visit.per_address.counted);
                if let Some(more) = &mut self.more {
                    more.held_until = None;
                }
                (true, false)
            }
            None => {
                unstored = Some(Unstored::NoRoom);
                (false, false)
            }
        };
        // As in a BitTorrent swarm: only a peer stored completes (or anyone
        // could count downloads from connections the limits turn away), and
        // a seeder never again.
        if completed && stored && !was_seeder {
            self.downloaded = self.downloaded.saturating_add(1);
        }
        self.draw(req, visit.now, rng, receivers);
        Ok(unstored)
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
                && !taken.iter().any(|(id, _)| *id == peer.peer_id)
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

    /// Removes the peer `peer_id` if `connection` holds it; whether it did.
    pub fn disconnect(&mut self, peer_id: &PeerId, connection: ConnectionRef) -> bool {
        let Some(i) = self.find(peer_id) else {
            return false;
        };
        if self
            .peers
            .get(i)
            .is_none_or(|p| p.connection() != connection)
        {
            return false;
        }
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
            assert_eq!(self.find(&peer.peer_id), Some(i), "peer {i} where it is");
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
