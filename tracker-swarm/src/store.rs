//! The store itself: torrents in segments, announces, scrapes and the
//! clean-up, with the limits it keeps.

use std::net::{IpAddr, SocketAddr};

use ahash::RandomState;

use crate::counts::{CleanReport, MemoryUse, PeerTotals, SwarmCounts};
use crate::expiry::{Expiry, MAX_PEER_TIMEOUT_SECS};

/// The most peers a torrent may be allowed (`StoreLimits::max_peers_per_torrent`):
/// the address index keeps a peer's position in 24 bits.
pub const MAX_PEERS_PER_TORRENT: usize = crate::slots::POSITIONS;
use crate::budget::NewTorrentBudgets;
use crate::evict::{self, Candidate};
use crate::network_peers::NetworkPeers;
use crate::peers;
pub use crate::refusal::{AnnounceRefused, Quota};

/// Whether a new torrent may take the place of one worth less when the
/// store is full (see `admit_torrent`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Eviction {
    Allowed,
    Refused,
}
use crate::rng::WyRand;
use crate::rtc::RtcSwarms;
use crate::table::Table;
pub use crate::torrent::HandOut;
use crate::torrent::{AddressCap, NetworkRoom, Torrent, Unstored, Visit, CLEAN_WINDOW};

use tracker_proto::{
    block_key, Announce, AnnounceEvent, AnswerPeers, BlockLevel, InfoHash, IpFamily, ScrapeStats,
};

/// What the limits turned away, counted as they happen (the runtime exports
/// them as metrics).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreStats {
    /// Announces refused because they would create a torrent past
    /// `max_torrents`, and no torrent could be dropped for it (none is for a
    /// WebRTC torrent).
    pub refused_torrents: u64,
    /// New peers answered but not stored: their torrent held
    /// `max_peers_per_torrent`, or the store `max_peers`. BitTorrent and
    /// WebRTC peers alike, as for the other counts.
    pub unstored_peers: u64,
    /// New peers answered but not stored: their torrent held
    /// `max_peers_per_address` from their client (IP address, IPv6 /64).
    pub address_peers: u64,
    /// New peers answered but not stored (nor their torrent created): their
    /// network (an IPv4 /16, an IPv6 /48) held `max_peers_per_network` in
    /// the store.
    pub network_peers: u64,
    /// Torrents dropped to make room for a new one while the store held
    /// `max_torrents` (see `evict`).
    pub evicted_torrents: u64,
    /// Announces refused because a block of addresses they come from (the
    /// address, its subnet or its network) had created its budget of
    /// torrents this minute (`new_torrents_per_minute`).
    pub torrent_budget: u64,
}

/// What the store accepts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoreLimits {
    /// A peer expires this long after its last announce.
    pub peer_timeout_secs: u32,
    /// An announce that would create a torrent beyond this many drops one
    /// worth less to make room (see `evict`), or is refused when none of
    /// those drawn may go. BitTorrent and WebRTC torrents count together (a
    /// new WebRTC torrent is refused: see `rtc_announce`).
    pub max_torrents: usize,
    /// A new peer beyond this many in one torrent is answered but not stored.
    /// Counts are u32, so at most `u32::MAX` is used.
    pub max_peers_per_torrent: usize,
    /// A new peer beyond this many in the whole store is answered but not
    /// stored, and creates no torrent. Expired peers count until cleaned;
    /// BitTorrent and WebRTC peers count together.
    pub max_peers: usize,
    /// A new peer beyond this many from its client in one torrent (its IP
    /// address on other ports; an IPv6 client's whole /64) is answered but
    /// not stored. `None`: no limit, and large swarms keep no counts per
    /// client (see `ip_counts`).
    pub max_peers_per_address: Option<usize>,
    /// A new BitTorrent peer beyond this many from its network (an IPv4
    /// /16, an IPv6 /48) in the whole store is answered but not stored, and
    /// creates no torrent, so that a few networks cannot fill `max_peers`,
    /// nor `max_torrents` with torrents that eviction spares (see
    /// `network_peers`). `None`: no limit, and no counts kept.
    pub max_peers_per_network: Option<usize>,
    /// Torrents the clients of one block of addresses may create per minute,
    /// by `BlockLevel` (an address, an IPv6 client by its /64; a subnet; a
    /// network), each width counted apart; announces that would create more
    /// are refused. 0: no limit at that width.
    pub new_torrents_per_minute: [u32; 3],
    /// Keep each peer's id, for non-compact HTTP answers that ask for them
    /// (20 bytes a peer more); without, those answers leave `peer id` out.
    pub peer_ids: bool,
}

impl StoreLimits {
    /// The cap on one client's peers in a torrent, for a client of `quota`.
    pub(crate) fn address_cap(&self, quota: Quota) -> AddressCap {
        let max = self.max_peers_per_address;
        AddressCap {
            max: max.filter(|_| quota == Quota::Counted),
            counted: max.is_some(),
        }
    }

    /// The cap on the peers of one network in the store, for a client of
    /// `quota` (an exempt one's peers are counted all the same, so that
    /// the counts stay whole whoever comes and goes).
    pub(crate) fn network_cap(&self, quota: Quota) -> Option<usize> {
        self.max_peers_per_network
            .filter(|_| quota == Quota::Counted)
    }
}

type Segment = Table<Torrent>;

/// Torrents and their peers, split into `SEGMENTS` hash tables.
///
/// Segments bound the work of one step: the cleaner walks one segment at a time
/// and yields between them, and a table that grows rebuilds only its segment, so no
/// request waits behind a pass over the whole shard.
///
/// Memory, on 64-bit with glibc malloc:
/// - A torrent takes a 64-byte entry, one cache line (20-byte info-hash, 32
///   bits of its hash, 40-byte `Torrent`), in its segment's 4 KB blocks (at
///   most one of them partly used), and a 6-byte slot, the slots 3/8 to 3/4
///   full: 72 to 80 bytes per torrent once a segment holds some blocks.
/// - A lone IPv4 peer lives in the torrent's entry. More live in one `Vec`
///   per swarm and family, 8 bytes per IPv4 peer and 20 per IPv6 peer
///   (address, port, a 16-bit expiry), grown through odd counts (3, 5, 7, 11,
///   ...) that fill malloc's blocks: 2 or 3 IPv4 peers take 32 bytes. The
///   first IPv6 peer of a swarm adds the torrent's box, 96 bytes. A store
///   that keeps peer ids (`StoreLimits::peer_ids`) keeps them in that box
///   too, 20 bytes a peer in a `Vec` of their own, and every torrent with a
///   peer has the box.
/// - A swarm above 32 peers of a family also indexes them: 6 bytes per index
///   slot (position and 24 bits of hash), 3/8 to 3/4 of the slots used, and
///   a boxed header of 128 bytes.
/// - The budgets of new torrents: 512 KiB for each width of block that has
///   one (1.5 MiB with the default config), whatever the store holds.
/// - The peers of each network, for `max_peers_per_network`: 256 KiB,
///   whatever the store holds (see `network_peers`); nothing per peer.
///
/// Measured with `load-test/examples/store_announce.rs`: its default 4M
/// announces leave 491,177 torrents and 3,691,564 peers in 106 MB resident
/// (266 MB keeping peer ids).
pub struct SwarmStore {
    pub(crate) segments: Box<[Segment]>,
    /// Random odd multipliers choosing segments (see `segment_of`).
    pub(crate) segment_keys: [u64; 3],
    /// Keys the hash that places a torrent within its segment.
    pub(crate) hasher: RandomState,
    pub(crate) limits: StoreLimits,
    pub(crate) rng: WyRand,
    pub(crate) torrents: usize,
    pub(crate) peers: PeerTotals,
    /// Torrents of more than `CLEAN_WINDOW` peers left by `clean_segment` for
    /// `clean_more`, each cleaned a window at a time.
    pub(crate) clean_pending: Vec<InfoHash>,
    /// The budgets for new torrents, per block of addresses.
    pub(crate) new_torrents: NewTorrentBudgets,
    /// The BitTorrent peers each network holds, for `max_peers_per_network`.
    pub(crate) networks: NetworkPeers,
    /// The WebRTC torrents and their peers (see `rtc`).
    pub(crate) rtc: RtcSwarms,
    /// What the limits turned away.
    pub stats: StoreStats,
}

impl SwarmStore {
    /// At a million torrents per worker a segment holds about 1,000: a clean step
    /// took 0.1 ms (0.3 ms when all of them expired), and a segment's rehash moves
    /// under 150 KB.
    pub const SEGMENTS: usize = 1 << Self::SEGMENT_BITS;
    const SEGMENT_BITS: u32 = 10;

    /// `rng_seed` seeds peer selection. The hash keys come from ahash's runtime
    /// randomness, not from the seed, so they cannot be predicted from the config.
    pub fn new(mut limits: StoreLimits, rng_seed: u64) -> Self {
        limits.max_peers_per_torrent = limits.max_peers_per_torrent.min(MAX_PEERS_PER_TORRENT);
        // A peer's expiry is 15 bits (see `expiry`).
        limits.peer_timeout_secs = limits.peer_timeout_secs.min(MAX_PEER_TIMEOUT_SECS);
        let keys = RandomState::new();
        SwarmStore {
            segments: (0..Self::SEGMENTS).map(|_| Segment::default()).collect(),
            segment_keys: [0u8, 1, 2].map(|i| keys.hash_one(i) | 1),
            hasher: RandomState::new(),
            limits,
            rng: WyRand::new(rng_seed),
            torrents: 0,
            peers: PeerTotals::default(),
            clean_pending: Vec::new(),
            new_torrents: NewTorrentBudgets::new(limits.new_torrents_per_minute),
            networks: NetworkPeers::new(limits.max_peers_per_network.is_some()),
            rtc: RtcSwarms::new(Self::SEGMENTS),
            stats: StoreStats::default(),
        }
    }

    /// The segment of `info_hash`: the top bits of a sum of its three 64-bit words
    /// (the last zero-padded), each times a secret random odd key. This
    /// multiply-shift hash is universal: for any two hashes, the chance over the keys
    /// that they share a segment is at most about 2/`SEGMENTS`. Clients choose
    /// info-hashes, so raw bytes would let them pile torrents into one segment (by
    /// varying bytes the segment ignores, say); without the keys they cannot. It is
    /// unrelated to `shard::owner_of` (a fixed mix of all 20 bytes), so one worker's
    /// torrents spread over all its segments.
    pub(crate) fn segment_of(&self, info_hash: &InfoHash) -> usize {
        let mut bytes = [0; 24];
        bytes[..20].copy_from_slice(&info_hash.0);
        let sum = bytes
            .chunks_exact(8)
            .zip(self.segment_keys)
            .map(|(word, key)| {
                u64::from_le_bytes(word.try_into().expect("8 bytes")).wrapping_mul(key)
            })
            .fold(0, u64::wrapping_add);
        (sum >> (64 - Self::SEGMENT_BITS)) as usize
    }

    /// The segment of `info_hash` and its hash within the segment.
    pub(crate) fn locate(&self, info_hash: &InfoHash) -> (usize, u32) {
        let hash = (self.hasher.hash_one(info_hash) >> 32) as u32;
        (self.segment_of(info_hash), hash)
    }

    /// Records the announce: stores or refreshes the peer, or removes it on
    /// `stopped`. Unless it stopped, writes to `peers` (cleared first) up to
    /// `req.numwant` live peers of the requester's address family, never the
    /// requester; a seeder is given leechers only. Returns the swarm's counts after
    /// the update, of both families.
    ///
    /// When full: an announce that would create a torrent past
    /// `max_torrents` drops a torrent worth less (see `evict`), or is refused
    /// when none of those drawn may go; one past its address's budgets of new
    /// torrents is refused; a new peer past `max_peers_per_torrent` in its
    /// torrent, past `max_peers_per_address` from its client in its torrent,
    /// past `max_peers_per_network` from its network in the store, or past
    /// `max_peers` in the store, is answered but not stored (and creates no
    /// torrent). Each is counted in `stats`.
    pub fn announce(
        &mut self,
        req: &Announce,
        now: u32,
        peers: &mut AnswerPeers,
    ) -> Result<SwarmCounts, AnnounceRefused> {
        self.announce_as(req, now, Quota::Counted, HandOut::ALL, peers)
    }

    /// `announce` from a client whose announces count against the limits per
    /// client, or not (`quota`), whose answer may carry the peers `hand_out`
    /// allows.
    pub fn announce_as(
        &mut self,
        req: &Announce,
        now: u32,
        quota: Quota,
        hand_out: HandOut,
        peers: &mut AnswerPeers,
    ) -> Result<SwarmCounts, AnnounceRefused> {
        peers.reset(IpFamily::of(req.peer_addr.ip()));
        let (segment, hash) = self.locate(&req.info_hash);
        let pos = match self.segments[segment].find(hash, &req.info_hash) {
            Some(pos) => pos,
            None => match self.create(req, segment, hash, now, quota)? {
                Some(pos) => pos,
                None => return Ok(SwarmCounts::default()),
            },
        };
        let store_room = self.peers_held() < self.limits.max_peers;
        let torrent = self.segments[segment].value_mut(pos);
        let before = torrent.counts();
        let visit = Visit {
            req,
            now,
            expiry: Expiry::at(now.wrapping_add(self.limits.peer_timeout_secs)),
            keep_ids: self.limits.peer_ids,
            room: ((before.seeders + before.leechers) as usize) < self.limits.max_peers_per_torrent
                && store_room,
            per_address: self.limits.address_cap(quota),
            per_network: NetworkRoom {
                held: &self.networks,
                max: self.limits.network_cap(quota),
            },
            hand_out,
        };
        match torrent.announce(&visit, &mut self.rng, peers) {
            None => {}
            Some(Unstored::NoRoom) => self.stats.unstored_peers += 1,
            Some(Unstored::AddressLimit) => self.stats.address_peers += 1,
            Some(Unstored::NetworkLimit) => self.stats.network_peers += 1,
        }
        let after = torrent.counts();
        self.peers.replace(before, after);
        // An announce stores or drops one peer at most, its own.
        let held_before = before.seeders + before.leechers;
        let held_after = after.seeders + after.leechers;
        if held_after > held_before {
            self.networks.add(req.peer_addr.ip());
        } else if held_after < held_before {
            self.networks.sub(req.peer_addr.ip());
        }
        Ok(after)
    }

    /// Creates the torrent of `req`, which `segment` does not hold (its hash
    /// there is `hash`), within the limits; its position, or None when there
    /// is to be none (a stop, or no room for its peer). Kept out of
    /// `announce`, whose common case (a torrent held) it would crowd.
    #[inline(never)]
    fn create(
        &mut self,
        req: &Announce,
        segment: usize,
        hash: u32,
        now: u32,
        quota: Quota,
    ) -> Result<Option<usize>, AnnounceRefused> {
        let ip = req.peer_addr.ip();
        let full = self.segments[segment].is_full();
        if !self.admit_torrent(req.event, ip, full, now, quota, Eviction::Allowed)? {
            return Ok(None);
        }
        self.torrents += 1;
        let table = &mut self.segments[segment];
        let pos = table.len();
        table.insert(hash, req.info_hash, Torrent::default());
        Ok(Some(pos))
    }

    /// Whether a torrent may be created for an announce of `event` from
    /// `ip`, by the limits both kinds of torrent share: Ok(false) when there
    /// is to be none (a stop, or no room for its peer), an error when a
    /// limit refuses it; on Ok(true) the budget of new torrents is charged.
    /// `segment_full`: the segment it would go in is full to its slots'
    /// reach. `eviction` says whether a torrent may be dropped for it when
    /// the store holds `max_torrents`.
    pub(crate) fn admit_torrent(
        &mut self,
        event: AnnounceEvent,
        ip: IpAddr,
        segment_full: bool,
        now: u32,
        quota: Quota,
        eviction: Eviction,
    ) -> Result<bool, AnnounceRefused> {
        // Nothing to remove, and no torrent to create for it.
        if event == AnnounceEvent::Stopped {
            return Ok(false);
        }
        // An empty torrent would be memory for nothing: answer as a swarm of
        // none.
        if self.peers_held() >= self.limits.max_peers {
            self.stats.unstored_peers += 1;
            return Ok(false);
        }
        // Nor is there room for its peer when its network is at its cap
        // (before any budget is spent or torrent dropped for it).
        if self.networks.is_full(ip, self.limits.network_cap(quota)) {
            self.stats.network_peers += 1;
            return Ok(false);
        }
        // A segment full to its slots' reach (2^24 torrents) counts as the
        // limit too: the keyed hash spreads torrents so evenly that none gets
        // there before `max_torrents`, but nothing may rely on it.
        if segment_full {
            self.stats.refused_torrents += 1;
            return Err(AnnounceRefused::TorrentLimit);
        }
        let spend = match quota {
            Quota::Exempt => None,
            Quota::Counted => match self.new_torrents.check(ip, now) {
                Ok(spend) => Some(spend),
                Err(level) => {
                    self.stats.torrent_budget += 1;
                    return Err(AnnounceRefused::AddressBudget(level));
                }
            },
        };
        if self.torrents + self.rtc.torrents() >= self.limits.max_torrents
            && (eviction == Eviction::Refused || !self.evict_for(ip, now))
        {
            self.stats.refused_torrents += 1;
            return Err(AnnounceRefused::TorrentLimit);
        }
        if let Some(spend) = spend {
            self.new_torrents.spend(spend, now);
        }
        Ok(true)
    }

    /// Drops the torrent worth least of `evict::SAMPLES` drawn at random
    /// (see `evict`), to make room for a new torrent from `creator`; whether
    /// one could go. A few cache lines whatever the store holds (see
    /// `draw`).
    #[cold]
    fn evict_for(&mut self, creator: IpAddr, now: u32) -> bool {
        let (drawn, count) = self.draw();
        let mut at = [(0, 0); evict::SAMPLES];
        let mut candidates = [Candidate::default(); evict::SAMPLES];
        let mut found = 0;
        for &(segment, pos) in &drawn[..count] {
            let torrent = self.segments[segment].value_at(pos);
            let Some((mut candidate, first)) = torrent.and_then(|t| t.candidate(now)) else {
                continue;
            };
            candidate.spent = first.map_or(0, |ip| self.new_torrents.spent(ip, now));
            at[found] = (segment, pos);
            candidates[found] = candidate;
            found += 1;
        }
        let network = block_key(creator, BlockLevel::Network);
        let Some(chosen) = evict::least_worth(&candidates[..found], network) else {
            return false;
        };
        let (segment, pos) = at[chosen];
        let gone = self.segments[segment].remove_at(pos);
        gone.for_each_ip(|ip| self.networks.sub(ip));
        let mut removed = CleanReport {
            torrents: 1,
            ..CleanReport::default()
        };
        removed.count(gone.counts(), SwarmCounts::default());
        self.forget(removed);
        self.stats.evicted_torrents += 1;
        true
    }

    /// Starts loading what announces will read, without waiting for it:
    /// called for a batch of requests, each its torrent and the peer's
    /// address (canonical, as in `Announce`), before they are served, so that
    /// their cache misses overlap instead of coming one after another. Each
    /// step reads only what the step before started loading for all the
    /// batch: the first slots of the torrents, then the torrents, then their
    /// peers (see `Torrent::prefetch`). Changes nothing.
    pub fn prefetch(&self, announces: &[(InfoHash, SocketAddr)]) {
        const STEP: usize = 64;
        let mut located = [(0, 0); STEP];
        // The torrent of each announce, if stored, with its peer's family and
        // key hash, each hashed once for all the steps.
        let mut torrents: [Option<(&Torrent, IpFamily, u32)>; STEP] = [None; STEP];
        for batch in announces.chunks(STEP) {
            let located = &mut located[..batch.len()];
            let torrents = &mut torrents[..batch.len()];
            for (spot, (info_hash, _)) in located.iter_mut().zip(batch) {
                *spot = self.locate(info_hash);
                self.segments[spot.0].prefetch_slot(spot.1);
            }
            for &(segment, hash) in located.iter() {
                self.segments[segment].prefetch_entry(hash);
            }
            for ((torrent, &(segment, hash)), (info_hash, peer)) in
                torrents.iter_mut().zip(located.iter()).zip(batch)
            {
                *torrent = self.segments[segment]
                    .get(hash, info_hash)
                    .map(|t| (t, IpFamily::of(peer.ip()), peers::key_hash(*peer)));
            }
            for step in 0..Torrent::PREFETCH_STEPS {
                for &(torrent, family, key_hash) in torrents.iter().flatten() {
                    torrent.prefetch(step, family, key_hash);
                }
            }
        }
    }

    /// Up to `evict::SAMPLES` torrents, by segment and position, drawn at
    /// random and none twice; how many. A large store has torrents in every
    /// segment: a segment at random, and a torrent of it (the next segment
    /// that holds one, in the rare empty one). A store of fewer torrents
    /// than segments would draw the torrents after empty runs more often
    /// that way: it draws among all its torrents alike, in one pass over
    /// the segments' counts, and takes them all when they are no more than
    /// the draws.
    fn draw(&mut self) -> ([(usize, usize); evict::SAMPLES], usize) {
        let mut drawn = [(0, 0); evict::SAMPLES];
        let mut count = 0;
        let mut note = |at: (usize, usize)| {
            if !drawn[..count].contains(&at) {
                drawn[count] = at;
                count += 1;
            }
        };
        if self.torrents >= Self::SEGMENTS * 8 {
            for _ in 0..evict::SAMPLES {
                let start = self.rng.below(Self::SEGMENTS);
                let segment = (0..Self::SEGMENTS)
                    .map(|i| (start + i) % Self::SEGMENTS)
                    .find(|&s| self.segments[s].len() > 0);
                if let Some(segment) = segment {
                    note((segment, self.rng.below(self.segments[segment].len())));
                }
            }
            return (drawn, count);
        }
        // Ranks among all torrents, in segment order, smallest first.
        let mut ranks = [0; evict::SAMPLES];
        let n = self.torrents.min(evict::SAMPLES);
        for (i, rank) in ranks[..n].iter_mut().enumerate() {
            *rank = if self.torrents <= evict::SAMPLES {
                i
            } else {
                self.rng.below(self.torrents)
            };
        }
        ranks[..n].sort_unstable();
        let (mut next, mut before) = (0, 0);
        for (segment, table) in self.segments.iter().enumerate() {
            while next < n && ranks[next] < before + table.len() {
                note((segment, ranks[next] - before));
                next += 1;
            }
            before += table.len();
        }
        (drawn, count)
    }

    /// The counts of a torrent; zeros for one not stored.
    pub fn scrape(&self, info_hash: &InfoHash) -> ScrapeStats {
        let (segment, hash) = self.locate(info_hash);
        self.segments[segment]
            .get(hash, info_hash)
            .map(Torrent::scrape)
            .unwrap_or_default()
    }

    /// Appends the counts of up to `max` stored torrents, in no set order, to
    /// `out` (for a bounded "full scrape"): it stops after `max`, so the cost is
    /// bounded by `max` and the segment count, not by the torrents stored.
    pub fn scrape_some(&self, max: usize, out: &mut Vec<(InfoHash, ScrapeStats)>) {
        let torrents = self.segments.iter().flat_map(|segment| segment.iter());
        out.extend(
            torrents
                .take(max)
                .map(|(info_hash, torrent)| (*info_hash, torrent.scrape())),
        );
    }

    /// Drops the peers of segment `segment` (0..`SEGMENTS`) that expired by `now`,
    /// and its torrents left without peers, of both kinds (the report adds
    /// them up). Such a torrent's completed count is lost with it (the state
    /// file keeps the counts of live swarms only).
    ///
    /// A torrent of more than `CLEAN_WINDOW` peers is only noted: call
    /// [`clean_more`](Self::clean_more) while [`cleaning`](Self::cleaning)
    /// says so, yielding between calls, so that no step is longer than one
    /// window however large a swarm grows (a million peers, half of them
    /// expired, took 125 ms in one step).
    pub fn clean_segment(&mut self, segment: usize, now: u32) -> CleanReport {
        let mut removed = CleanReport::default();
        let pending = &mut self.clean_pending;
        let networks = &mut self.networks;
        let map = &mut self.segments[segment];
        map.retain(|info_hash, torrent| {
            if torrent.len() > CLEAN_WINDOW {
                pending.push(*info_hash);
                return true;
            }
            let before = torrent.counts();
            // Done in one step: it holds no more than a window.
            torrent.drop_expired(now, networks);
            removed.count(before, torrent.counts());
            let keep = !torrent.is_empty();
            removed.torrents += usize::from(!keep);
            keep
        });
        // The table never shrinks by itself; it gives memory back after a
        // large drop only, so a segment does not shrink and regrow on every pass.
        map.shrink();
        self.forget(removed);
        removed.add(self.rtc_clean_segment(segment, now));
        removed
    }

    /// Whether large torrents wait for [`clean_more`](Self::clean_more).
    pub fn cleaning(&self) -> bool {
        !self.clean_pending.is_empty() || self.rtc.cleaning()
    }

    /// Cleans one window of one large torrent that `clean_segment` left; `now`
    /// should be the time given to it.
    pub fn clean_more(&mut self, now: u32) -> CleanReport {
        let mut removed = CleanReport::default();
        let Some(&info_hash) = self.clean_pending.last() else {
            return self.rtc_clean_more(now);
        };
        let (segment, hash) = self.locate(&info_hash);
        let map = &mut self.segments[segment];
        // Gone already if an access list removed it in between.
        let Some(pos) = map.find(hash, &info_hash) else {
            self.clean_pending.pop();
            return removed;
        };
        let torrent = map.value_mut(pos);
        let before = torrent.counts();
        let done = torrent.drop_expired(now, &mut self.networks);
        removed.count(before, torrent.counts());
        if done {
            self.clean_pending.pop();
            if torrent.is_empty() {
                map.remove_at(pos);
                removed.torrents += 1;
            }
        }
        self.forget(removed);
        removed
    }

    /// Takes what a clean step removed off the store's totals.
    pub(crate) fn forget(&mut self, removed: CleanReport) {
        self.torrents -= removed.torrents;
        self.peers.seeders -= removed.peers.seeders;
        self.peers.leechers -= removed.peers.leechers;
    }

    /// Removes the torrents of segment `segment` (0..`SEGMENTS`) for which
    /// `keep` is false, with their peers, of both kinds: how a new access
    /// list takes effect, a segment at a time so that the caller can yield
    /// between segments.
    pub fn retain_torrents(
        &mut self,
        segment: usize,
        mut keep: impl FnMut(&InfoHash) -> bool,
    ) -> CleanReport {
        let mut removed = CleanReport::default();
        let networks = &mut self.networks;
        let map = &mut self.segments[segment];
        map.retain(|info_hash, torrent| {
            if keep(info_hash) {
                return true;
            }
            torrent.for_each_ip(|ip| networks.sub(ip));
            removed.torrents += 1;
            removed.count(torrent.counts(), SwarmCounts::default());
            false
        });
        map.shrink();
        self.forget(removed);
        removed.add(self.rtc_retain(segment, keep));
        removed
    }

    /// Whether it holds a torrent for `info_hash` (one without peers, left
    /// for the cleaner, included).
    #[cfg(test)]
    pub(crate) fn holds(&self, info_hash: &InfoHash) -> bool {
        let (segment, hash) = self.locate(info_hash);
        self.segments[segment].find(hash, info_hash).is_some()
    }

    /// What it accepts.
    pub fn limits(&self) -> &StoreLimits {
        &self.limits
    }

    /// BitTorrent torrents stored (`rtc_torrent_count` counts the WebRTC ones).
    pub fn torrent_count(&self) -> usize {
        self.torrents
    }

    /// Stored BitTorrent peers of all torrents, kept up to date on every
    /// change (expired peers count until their segment is cleaned;
    /// `rtc_peer_count` counts the WebRTC ones).
    pub fn peer_count(&self) -> PeerTotals {
        self.peers
    }

    /// Stored peers of both kinds, what `max_peers` bounds.
    pub(crate) fn peers_held(&self) -> usize {
        self.peers.seeders + self.peers.leechers + self.rtc.peers()
    }

    /// What the store's structures hold. Walks every torrent: for tools and
    /// tests, not for the request path.
    pub fn memory_use(&self) -> MemoryUse {
        let mut memory = MemoryUse::default();
        for segment in self.segments.iter() {
            memory.torrents += segment.bytes();
            for (_, torrent) in segment.iter() {
                torrent.add_memory(&mut memory);
            }
        }
        self.rtc_memory(&mut memory);
        memory
    }
}
