//! One swarm: its IPv4 and IPv6 halves, each partitioned into leechers and seeders,
//! and its completed count.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use crate::counts::{MemoryUse, SwarmCounts};
use crate::evict::{self, Candidate};
use crate::expiry::Expiry;
use crate::network_peers::NetworkPeers;
use crate::peers::{Peer, PeerIp, Peers};
use crate::rng::{scale, WyRand};
use crate::state::{SavedHalf, SavedPeer, SavedTorrent};
use tracker_proto::{
    block_key, Announce, AnnounceEvent, AnswerPeers, BlockLevel, IpFamily, PeerId, ScrapeStats,
};

/// The clocks of a save or a restore: the store's monotonic seconds and the
/// wall clock's Unix seconds at the same moment, and the peer time-out that
/// turns a stored expiry into the time of the last announce and back.
#[derive(Clone, Copy, Debug)]
pub(super) struct Clocks {
    pub now: u32,
    pub now_unix: u64,
    pub timeout: u32,
}

impl Clocks {
    /// The Unix time of the last announce of a live peer that expires at
    /// `expiry`. Counted back from the time it has left, not forward from a
    /// monotonic time of its announce: a peer restored at a process's start
    /// was last seen before that clock began.
    fn last_seen(&self, expiry: Expiry) -> u64 {
        let left = expiry.left(self.now).max(0) as u32;
        let age = self.timeout.saturating_sub(left);
        self.now_unix.saturating_sub(age.into())
    }

    /// The expiry of a peer last seen at Unix time `last_seen`, or None if it
    /// has expired. A time in the future (the clock went back) counts as now.
    pub fn expiry(&self, last_seen: u64) -> Option<Expiry> {
        let age = self.now_unix.saturating_sub(last_seen);
        let left = u64::from(self.timeout)
            .checked_sub(age)
            .filter(|&l| l > 0)?;
        Some(Expiry::at(self.now.wrapping_add(left as u32)))
    }
}

/// One announce as a swarm half sees it.
pub(super) struct Visit<'a> {
    pub req: &'a Announce,
    pub now: u32,
    /// The expiry to store for the announcing peer.
    pub expiry: Expiry,
    /// Whether the store keeps peer ids (`StoreLimits::peer_ids`).
    pub keep_ids: bool,
    /// Whether the swarm may take a peer it does not hold yet.
    pub room: bool,
    /// The cap on the peers of this peer's client.
    pub per_address: AddressCap,
    /// The cap on the peers of this peer's network in the store.
    pub per_network: NetworkRoom<'a>,
    /// Which peers the answer may carry.
    pub hand_out: HandOut,
}

/// Which peers an answer may carry: both kinds, unless a private tracker's
/// peer-list limits refuse one (a seeder is never handed seeders anyway).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HandOut {
    pub seeders: bool,
    pub leechers: bool,
}

impl HandOut {
    pub const ALL: HandOut = HandOut {
        seeders: true,
        leechers: true,
    };
}

/// The cap on one client's peers in a swarm, as it applies to one peer.
#[derive(Clone, Copy, Debug)]
pub(super) struct AddressCap {
    /// The most peers the swarm holds from the peer's client (its IP address
    /// on as many ports, an IPv6 /64); `None`: no limit for this peer (none
    /// is set, or its client is exempt).
    pub max: Option<usize>,
    /// Whether large halves count their peers per client: whenever the cap
    /// is set, whoever this peer is, so that an exempt client's peer never
    /// leaves a half without the counts that the others' need.
    pub counted: bool,
}

/// The cap on the peers of one network in the whole store, as it applies to
/// one peer: read only for a peer not stored yet, so that the announces of
/// peers held (most of them) never touch the counts.
#[derive(Clone, Copy)]
pub(super) struct NetworkRoom<'a> {
    /// What each network holds.
    pub held: &'a NetworkPeers,
    /// The most peers the peer's network may hold; `None`: no limit for
    /// this peer (none is set, or its client is exempt).
    pub max: Option<usize>,
}

impl NetworkRoom<'_> {
    /// Whether the network of `ip` holds its maximum.
    fn is_full(&self, ip: IpAddr) -> bool {
        self.held.is_full(ip, self.max)
    }
}

/// Why a new peer was answered but not stored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Unstored {
    /// The swarm or the store holds its maximum of peers.
    NoRoom,
    /// The swarm holds its maximum of peers from this peer's address.
    AddressLimit,
    /// The store holds its maximum of peers from this peer's network.
    NetworkLimit,
}

/// What one announce did to a swarm half.
#[derive(Default)]
struct Outcome {
    /// It completes a download: event `completed` from a peer that the half
    /// stores (held already, or new and given room), not already as a
    /// seeder, nor one that had a completion counted (`Expiry::completed`):
    /// a peer counts one while it is held. A peer answered without being
    /// stored counts nothing, or anyone could count downloads at will from
    /// ports and addresses that the limits turn away.
    completes: bool,
    /// A new peer answered but not stored, and why.
    unstored: Option<Unstored>,
}

/// What became of a peer of a state file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum Restore {
    Stored,
    /// A peer at its address is here already.
    Present,
    /// The swarm holds its maximum of peers from its IP address.
    AddressLimit,
}

/// The most peer positions one clean step looks at in one swarm half: a larger
/// half is cleaned over several steps, from where the last one stopped. Each
/// removal moves peers and updates the index; in a swarm of a million, 1,024
/// of them took up to 0.9 ms, 256 up to 0.2 ms.
pub(super) const CLEAN_WINDOW: usize = 256;

/// The peers of one address family. Leechers are kept before seeders, so the
/// leecher count is also the boundary, and a seeder's answer is a run of
/// leechers. New peers are appended, where the seeders are: most peers seed,
/// and a new seeder is then stored without moving another peer.
///
/// Its peers' ids, when the store keeps them, are not here but in the
/// torrent's box (`More`), position for position with the peers, and handed
/// to each method that moves peers: a field here would make the torrent's
/// entry two cache lines.
struct Half<I> {
    peers: Peers<I>,
    leechers: u32,
    /// `completed` events counted in this half (see `Torrent::completed`).
    completed: u32,
}

impl<I> Default for Half<I> {
    fn default() -> Self {
        Half {
            peers: Peers::default(),
            leechers: 0,
            completed: 0,
        }
    }
}

impl<I: PeerIp> Half<I> {
    fn counts(&self) -> SwarmCounts {
        SwarmCounts {
            seeders: self.peers.len() as u32 - self.leechers,
            leechers: self.leechers,
        }
    }

    fn is_empty(&self) -> bool {
        self.peers.as_slice().is_empty()
    }

    fn is_seeder(&self, i: usize) -> bool {
        i >= self.leechers as usize
    }

    /// Stores a new peer; returns its position. `count_ips`: the peers are
    /// counted per client once the half is large (see `Peers::count_client`).
    fn insert(
        &mut self,
        ids: &mut Ids,
        peer: Peer<I>,
        id: Option<PeerId>,
        seeder: bool,
        count_ips: bool,
    ) -> usize {
        let at = if seeder {
            self.peers.len()
        } else {
            // The first seeder, if any, makes room at the boundary.
            self.leechers as usize
        };
        if id.is_some() || ids.is_some() {
            let id = id.unwrap_or_default();
            // As the peers below: the one at `at` moves to the end.
            let len = self.peers.len();
            let ids = ids.get_or_insert_with(|| vec![PeerId::default(); len]);
            match ids.get(at).copied() {
                Some(moved) => {
                    ids[at] = id;
                    ids.push(moved);
                }
                None => ids.push(id),
            }
        }
        if seeder {
            self.peers.push(peer, count_ips);
        } else {
            self.peers.push_at(at, peer, count_ips);
            self.leechers += 1;
        }
        at
    }

    fn remove(&mut self, ids: &mut Ids, mut i: usize) {
        if !self.is_seeder(i) {
            // Move it to the end of the leechers, where it becomes the first seeder.
            i = self.set_seeder(ids, i, true);
        }
        self.peers.swap_remove(i);
        if let Some(ids) = ids {
            ids.swap_remove(i);
        }
    }

    /// Swaps the peers at `a` and `b`, and their ids.
    fn swap(&mut self, ids: &mut Ids, a: usize, b: usize) {
        self.peers.swap(a, b);
        if let Some(ids) = ids {
            ids.swap(a, b);
        }
    }

    /// Moves the peer at `i` across the seeder/leecher boundary if `seeder` says it
    /// is on the wrong side; returns its position.
    fn set_seeder(&mut self, ids: &mut Ids, i: usize, seeder: bool) -> usize {
        let boundary = self.leechers as usize;
        match (self.is_seeder(i), seeder) {
            (true, false) => {
                self.swap(ids, i, boundary);
                self.leechers += 1;
                boundary
            }
            (false, true) => {
                self.leechers -= 1;
                self.swap(ids, i, boundary - 1);
                boundary - 1
            }
            _ => i,
        }
    }

    /// Applies `visit.req` from the peer at `ip` and the request's port, and unless it
    /// stopped, writes the answer's peers to `out`.
    fn announce(
        &mut self,
        ids: &mut Ids,
        ip: I,
        visit: &Visit,
        rng: &mut WyRand,
        out: &mut AnswerPeers,
    ) -> Outcome {
        let req = visit.req;
        let found = self.peers.find(ip, req.peer_addr.port());
        if req.event == AnnounceEvent::Stopped {
            if let Some(i) = found {
                self.remove(ids, i);
            }
            return Outcome::default();
        }
        let completed = req.event == AnnounceEvent::Completed;
        let seeder = req.left == 0;
        let mut unstored = None;
        let mut completes = false;
        let requester = match found {
            Some(i) => {
                // Before `set_seeder` moves it: a seeder completes nothing
                // again, and a peer that went back to leeching after a
                // completion counted (a flip) counts none again.
                let marked = self.peers.as_slice()[i].expiry.completed();
                completes = completed && !self.is_seeder(i) && !marked;
                let i = self.set_seeder(ids, i, seeder);
                let expiry = visit.expiry.with_completed(marked || completes);
                self.peers.refresh(i, expiry);
                if let Some(id) = ids.as_mut().and_then(|ids| ids.get_mut(i)) {
                    *id = req.peer_id;
                }
                Some(i)
            }
            // Counted only for a new peer: a scan of at most 32 peers, or of
            // this address's run in the index.
            None if visit.room
                && visit
                    .per_address
                    .max
                    .is_some_and(|max| self.peers.count_client(ip) >= max) =>
            {
                unstored = Some(Unstored::AddressLimit);
                None
            }
            None if visit.room && visit.per_network.is_full(req.peer_addr.ip()) => {
                unstored = Some(Unstored::NetworkLimit);
                None
            }
            None if visit.room => {
                completes = completed;
                let peer = Peer {
                    ip,
                    port: req.peer_addr.port(),
                    expiry: visit.expiry.with_completed(completes),
                };
                let id = visit.keep_ids.then_some(req.peer_id);
                Some(self.insert(ids, peer, id, seeder, visit.per_address.counted))
            }
            None => {
                unstored = Some(Unstored::NoRoom);
                None
            }
        };
        self.select(ids.as_deref(), requester, seeder, visit, rng, out);
        self.peers.draw_next_start(rng);
        Outcome {
            completes,
            unstored,
        }
    }

    /// Writes up to `numwant` live peers other than the one at `requester` to `out`:
    /// a run through the peers from a random start, wrapping around, which reads
    /// memory in order. A seeder gets only leechers; it has no use for seeders.
    /// Leechers come before seeders in the peers, so each kind is a range.
    fn select(
        &self,
        kept: Option<&[PeerId]>,
        requester: Option<usize>,
        for_seeder: bool,
        visit: &Visit,
        rng: &mut WyRand,
        out: &mut AnswerPeers,
    ) {
        debug_assert_eq!(out.family(), I::FAMILY);
        let peers = self.peers.as_slice();
        let leechers = self.leechers as usize;
        let seeders_wanted = visit.hand_out.seeders && !for_seeder;
        let first = if visit.hand_out.leechers { 0 } else { leechers };
        let end = if seeders_wanted {
            peers.len()
        } else {
            leechers
        };
        let pool = peers.get(first..end).unwrap_or_default();
        if pool.is_empty() {
            return;
        }
        let start = match self.peers.next_start() {
            Some(fraction) => scale(fraction, pool.len()),
            None => rng.below(pool.len()),
        };
        // The requester's position (within `pool`, if there), or one no peer has.
        let skip = requester
            .and_then(|r| r.checked_sub(first))
            .unwrap_or(usize::MAX);
        let now = visit.now;
        // Ids go out only when asked for and kept; otherwise the answer's
        // dictionaries go without them (BEP 23's no_peer_id form).
        let ids_kept = kept.filter(|_| visit.req.peer_ids);
        let wanted = (visit.req.numwant as usize).min(pool.len());
        out.append_with(wanted, |room, ids| {
            let mut entries = room.chunks_exact_mut(I::COMPACT_LEN);
            // Plain loops over the two parts of the run, rather than an
            // iterator chain; the run ends when the room is full.
            for (offset, part) in [(start, &pool[start..]), (0, &pool[..start])] {
                for (i, peer) in part.iter().enumerate() {
                    if peer.expiry.is_live(now) && offset + i != skip {
                        let Some(entry) = entries.next() else {
                            return wanted;
                        };
                        peer.ip.write_compact(peer.port, entry);
                        if let Some(kept) = ids_kept {
                            ids.extend(kept.get(first + offset + i));
                        }
                    }
                }
            }
            wanted - entries.len()
        });
    }

    /// One step of a prefetch for an announce from the peer whose key has
    /// `key_hash` (see `Torrent::prefetch`).
    fn prefetch(&self, step: usize, key_hash: u32) {
        match step {
            0 => self.peers.prefetch(),
            1 => {
                let pools = [self.leechers as usize, self.peers.len()];
                self.peers.prefetch_index(key_hash, pools);
            }
            _ => self.peers.prefetch_peer(key_hash),
        }
    }

    /// Stores a peer from a state file unless one with its address is here
    /// already, or its client's share (`cap`).
    fn restore(
        &mut self,
        ids: &mut Ids,
        peer: Peer<I>,
        id: Option<PeerId>,
        seeder: bool,
        cap: AddressCap,
    ) -> Restore {
        if self.peers.find(peer.ip, peer.port).is_some() {
            return Restore::Present;
        }
        if cap
            .max
            .is_some_and(|max| self.peers.count_client(peer.ip) >= max)
        {
            return Restore::AddressLimit;
        }
        self.insert(ids, peer, id, seeder, cap.counted);
        Restore::Stored
    }

    /// Writes the live peers to `out` (cleared first), seeders apart.
    fn save(&self, ids: Option<&[PeerId]>, clocks: &Clocks, out: &mut SavedHalf<I>) {
        out.clear();
        for (i, peer) in self.peers.as_slice().iter().enumerate() {
            if !peer.expiry.is_live(clocks.now) {
                continue;
            }
            let saved = SavedPeer {
                ip: peer.ip,
                port: peer.port,
                peer_id: ids.and_then(|ids| ids.get(i).copied()).unwrap_or_default(),
                last_seen: clocks.last_seen(peer.expiry),
                completed: peer.expiry.completed(),
            };
            if self.is_seeder(i) {
                out.seeders.push(saved);
            } else {
                out.leechers.push(saved);
            }
        }
    }

    /// Drops the peers that expired by `now`, looking at up to `CLEAN_WINDOW`
    /// positions from where the pass under way stopped, and takes them off
    /// `networks`; returns whether the pass is done. Between steps, announces
    /// may move a peer not yet looked at behind the pass: the next pass
    /// takes it.
    fn drop_expired(&mut self, ids: &mut Ids, now: u32, networks: &mut NetworkPeers) -> bool {
        let mut i = (self.peers.clean_from() as usize).saturating_sub(1);
        let mut looked = 0;
        // `remove` fills position `i` from behind it, so `i` only advances past a
        // live peer and every peer is looked at once.
        while looked < CLEAN_WINDOW {
            let Some(peer) = self.peers.as_slice().get(i) else {
                break;
            };
            if !peer.expiry.is_live(now) {
                networks.sub(peer.ip.into());
                self.remove(ids, i);
            } else {
                i += 1;
            }
            looked += 1;
        }
        if i < self.peers.len() {
            self.peers.set_clean_from(i as u32 + 1);
            return false;
        }
        self.peers.set_clean_from(0);
        self.peers.compact();
        if let Some(ids) = ids {
            if ids.len() <= ids.capacity() / 4 {
                ids.shrink_to_fit();
            }
        }
        true
    }
}

/// A half's peer ids, position for position with its peers, when the store
/// keeps them (`StoreLimits::peer_ids`).
type Ids = Option<Vec<PeerId>>;

/// One torrent's state: 40 bytes, plus its peers on the heap (see `SwarmStore`).
/// Its `completed` count is kept in its halves, where it fills what would be
/// padding, and is their sum (see `completed`).
#[derive(Default)]
pub(super) struct Torrent {
    v4: Half<Ipv4Addr>,
    /// Made on the first IPv6 peer or kept peer id, and dropped when it
    /// holds neither: most swarms never have an IPv6 peer, and most stores
    /// keep no ids.
    more: Option<Box<More>>,
}

/// What a torrent boxes: its IPv6 half, and both halves' peer ids.
#[derive(Default)]
struct More {
    v6: Half<Ipv6Addr>,
    v4_ids: Ids,
    v6_ids: Ids,
}

impl Torrent {
    /// Prefetch steps for an announce, each reading only what the one before
    /// loaded (see `SwarmStore::prefetch`).
    pub const PREFETCH_STEPS: usize = 3;

    /// Starts loading, at `step` (0 to `PREFETCH_STEPS - 1`), what an announce
    /// from a peer of `family`, whose key has `key_hash` (see
    /// `peers::key_hash`), will read of the half of its family: its peers or
    /// index header, then its index slot and the answer's first peers, then
    /// its own entry. The IPv6 half, boxed, takes a step more to reach, so its
    /// last step is left out.
    pub fn prefetch(&self, step: usize, family: IpFamily, key_hash: u32) {
        match (family, &self.more) {
            (IpFamily::V4, _) => self.v4.prefetch(step, key_hash),
            (IpFamily::V6, Some(more)) if step == 0 => crate::prefetch::prefetch_all(&**more, 1),
            (IpFamily::V6, Some(more)) => more.v6.prefetch(step - 1, key_hash),
            (IpFamily::V6, None) => {}
        }
    }

    /// Adds the bytes its peers hold to `memory` (the box counts with its
    /// peers, and so do the ids).
    pub fn add_memory(&self, memory: &mut MemoryUse) {
        self.v4.peers.add_memory(memory);
        if let Some(more) = &self.more {
            memory.peers += std::mem::size_of_val(&**more);
            more.v6.peers.add_memory(memory);
            for ids in [&more.v4_ids, &more.v6_ids].into_iter().flatten() {
                memory.peers += ids.capacity() * std::mem::size_of::<PeerId>();
            }
        }
    }

    fn v6(&self) -> Option<&Half<Ipv6Addr>> {
        self.more.as_ref().map(|more| &more.v6)
    }

    /// The counts of both halves together.
    pub fn counts(&self) -> SwarmCounts {
        let v4 = self.v4.counts();
        let v6 = self.v6().map(|h| h.counts()).unwrap_or_default();
        SwarmCounts {
            seeders: v4.seeders + v6.seeders,
            leechers: v4.leechers + v6.leechers,
        }
    }

    /// The `completed` events counted: those of its IPv6 half, while it has
    /// one, and the rest in its IPv4 half, which takes the count of an IPv6
    /// half that empties.
    fn completed(&self) -> u32 {
        self.v4.completed.saturating_add(self.v6_completed())
    }

    fn v6_completed(&self) -> u32 {
        self.v6().map_or(0, |h| h.completed)
    }

    pub fn scrape(&self) -> ScrapeStats {
        let SwarmCounts { seeders, leechers } = self.counts();
        ScrapeStats {
            seeders,
            completed: self.completed(),
            leechers,
        }
    }

    pub fn is_empty(&self) -> bool {
        self.counts() == SwarmCounts::default()
    }

    /// Applies an announce to the half of the peer's family; the answer's peers go to
    /// `out`. Returns why the peer, a new one, was not stored, if it was not.
    pub fn announce(
        &mut self,
        visit: &Visit,
        rng: &mut WyRand,
        out: &mut AnswerPeers,
    ) -> Option<Unstored> {
        let mut no_ids = None;
        let outcome = match visit.req.peer_addr.ip() {
            IpAddr::V4(ip) => {
                let ids = match &mut self.more {
                    Some(more) => &mut more.v4_ids,
                    None if visit.keep_ids && visit.room => {
                        &mut self.more.insert(Box::default()).v4_ids
                    }
                    None => &mut no_ids,
                };
                self.v4.announce(ids, ip, visit, rng, out)
            }
            IpAddr::V6(ip) => match &mut self.more {
                Some(more) => {
                    let More { v6, v6_ids, .. } = &mut **more;
                    v6.announce(v6_ids, ip, visit, rng, out)
                }
                None if visit.room
                    && visit.req.event != AnnounceEvent::Stopped
                    && !visit.per_network.is_full(ip.into()) =>
                {
                    let More { v6, v6_ids, .. } = &mut **self.more.insert(Box::default());
                    v6.announce(v6_ids, ip, visit, rng, out)
                }
                // No IPv6 peer to update or hand out, and none to store
                // (nor a completion to count: see `Outcome::completes`): no
                // box made for nothing.
                None => Outcome {
                    completes: false,
                    unstored: (visit.req.event != AnnounceEvent::Stopped).then_some(
                        if visit.room {
                            Unstored::NetworkLimit
                        } else {
                            Unstored::NoRoom
                        },
                    ),
                },
            },
        };
        let half = match (visit.req.peer_addr, &mut self.more) {
            (SocketAddr::V6(_), Some(more)) => &mut more.v6.completed,
            _ => &mut self.v4.completed,
        };
        *half = half.saturating_add(u32::from(outcome.completes));
        outcome.unstored
    }

    /// Writes the torrent's completed count and live peers to `out` (all but
    /// the info-hash, which the store knows).
    pub fn save(&self, clocks: &Clocks, out: &mut SavedTorrent) {
        out.completed = self.completed();
        let v4_ids = self.more.as_ref().and_then(|m| m.v4_ids.as_deref());
        self.v4.save(v4_ids, clocks, &mut out.v4);
        match &self.more {
            Some(more) => more.v6.save(more.v6_ids.as_deref(), clocks, &mut out.v6),
            None => out.v6.clear(),
        }
    }

    /// Takes the larger completed count: a torrent is in one state file once,
    /// but should it come twice, neither count is inflated.
    pub fn restore_completed(&mut self, completed: u32) {
        self.v4.completed = self.completed().max(completed) - self.v6_completed();
    }

    /// Stores an IPv4 peer from a state file (see `Half::restore`), with its
    /// id when the store keeps them.
    pub fn restore_v4(
        &mut self,
        peer: Peer<Ipv4Addr>,
        id: Option<PeerId>,
        seeder: bool,
        cap: AddressCap,
    ) -> Restore {
        let mut no_ids = None;
        let ids = match (&mut self.more, id) {
            (Some(more), _) => &mut more.v4_ids,
            (None, Some(_)) => &mut self.more.insert(Box::default()).v4_ids,
            (None, None) => &mut no_ids,
        };
        self.v4.restore(ids, peer, id, seeder, cap)
    }

    /// Stores an IPv6 peer from a state file, making the box if needed.
    pub fn restore_v6(
        &mut self,
        peer: Peer<Ipv6Addr>,
        id: Option<PeerId>,
        seeder: bool,
        cap: AddressCap,
    ) -> Restore {
        let More { v6, v6_ids, .. } = &mut **self.more.get_or_insert_with(Box::default);
        v6.restore(v6_ids, peer, id, seeder, cap)
    }

    /// What eviction weighs of it, with the address of its first peer (for
    /// `Candidate::spent`, which the store fills in): None unless it may be
    /// dropped for a new torrent, holding at most `evict::MAX_PEERS` peers,
    /// all of one network (see `evict`). Reads its peers only then.
    pub fn candidate(&self, now: u32) -> Option<(Candidate, Option<IpAddr>)> {
        let v4 = self.v4.peers.as_slice();
        let v6 = self.v6().map_or(&[][..], |h| h.peers.as_slice());
        let peers = v4.len() + v6.len();
        if peers > evict::MAX_PEERS {
            return None;
        }
        let v4s = v4.iter().map(|p| (IpAddr::V4(p.ip), p.expiry));
        let v6s = v6.iter().map(|p| (IpAddr::V6(p.ip), p.expiry));
        let (mut network, mut first, mut live) = (None, None, false);
        for (ip, expiry) in v4s.chain(v6s) {
            let key = block_key(ip, BlockLevel::Network);
            if network.is_some_and(|n| n != key) {
                return None;
            }
            network = Some(key);
            first = first.or(Some(ip));
            live |= expiry.is_live(now);
        }
        let candidate = Candidate {
            live,
            network,
            peers,
            completed: self.completed(),
            spent: 0,
        };
        Some((candidate, first))
    }

    /// Calls `f` with the address of each peer it stores: what the counts
    /// per network take off when the torrent goes whole.
    pub fn for_each_ip(&self, mut f: impl FnMut(IpAddr)) {
        self.v4.peers.as_slice().iter().for_each(|p| f(p.ip.into()));
        if let Some(v6) = self.v6() {
            v6.peers.as_slice().iter().for_each(|p| f(p.ip.into()));
        }
    }

    /// Peers stored, of both families.
    pub fn len(&self) -> usize {
        self.v4.peers.len() + self.v6().map_or(0, |h| h.peers.len())
    }

    /// One step of a clean pass (see `Half::drop_expired`): drops expired
    /// peers, taking them off `networks`, and the box once it holds no peer
    /// and no id. Returns whether the pass is done; it always is for a
    /// torrent of up to `CLEAN_WINDOW` peers.
    pub fn drop_expired(&mut self, now: u32, networks: &mut NetworkPeers) -> bool {
        // The IPv4 half first, then the IPv6 one: once the IPv6 half is under
        // way, the IPv4 half waits for the next pass.
        let v6_under_way = self.v6().is_some_and(|h| h.peers.clean_from() != 0);
        if !v6_under_way {
            let mut no_ids = None;
            let ids = match &mut self.more {
                Some(more) => &mut more.v4_ids,
                None => &mut no_ids,
            };
            if !self.v4.drop_expired(ids, now, networks) {
                return false;
            }
        }
        let Some(more) = &mut self.more else {
            return true;
        };
        let More { v6, v6_ids, v4_ids } = &mut **more;
        let done = v6.drop_expired(v6_ids, now, networks);
        if v6.is_empty() {
            self.v4.completed = self.v4.completed.saturating_add(v6.completed);
            v6.completed = 0;
            if v4_ids.as_ref().is_none_or(Vec::is_empty) {
                self.more = None;
            }
        }
        done
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn torrent_entry_is_40_bytes() {
        assert_eq!(std::mem::size_of::<Torrent>(), 40);
    }
}
