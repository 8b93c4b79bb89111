//! The traffic model: which torrents, which peers, which requests. Pure and
//! deterministic for a seed, with no I/O and no allocation per request: every
//! sample is O(1) (Zipf by rejection-inversion, weights by a short scan).
//!
//! - Torrents `0..torrents` have a Zipf popularity: torrent `k - 1` is asked for
//!   with a probability proportional to `1 / k^s` (`s` = `zipf_exponent`; 0 is
//!   uniform, about 1 is what public trackers see: a few hot torrents, a long tail).
//!   A torrent's info-hash is a hash of its index, so hot torrents land on
//!   different shards of a tracker.
//! - Peers `0..peers` are fixed identities: peer `p` sends from source address
//!   `p % sources` (one socket or connection bound to a loopback address each)
//!   and announces port `PORT_BASE + p / sources`, so (source IP, port) is unique
//!   per peer, as a tracker keys them. Whether a peer seeds, its peer id, key and
//!   counters come from a hash of `p`.
//! - Each request is a connect, an announce or a scrape by weight; an announce
//!   carries an event by weight (none, started, completed, stopped).

use tracker_proto::{AnnounceEvent, InfoHash, PeerId};

use crate::config::{EventWeights, TrafficConfig};
use crate::private::{Lists, Passkey};

/// The lowest port a simulated peer announces.
pub const PORT_BASE: u32 = 1024;
/// Ports per source address, and so the most peers one source can carry.
pub const PORTS_PER_SOURCE: u32 = 65536 - PORT_BASE;
/// Most info-hashes one scrape asks for (what fits a BEP 15 datagram).
pub const MAX_SCRAPE: usize = tracker_proto::udp::MAX_SCRAPE_INFO_HASHES;

/// Source addresses needed so that `peers` peers each get their own
/// (address, port).
pub fn min_sources(peers: u32) -> u32 {
    peers.div_ceil(PORTS_PER_SOURCE).max(1)
}

/// splitmix64's finaliser: a good 64-bit mix, used both as hash and generator.
pub const fn mix64(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// A small fast generator (splitmix64). Not for cryptography.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(mix64(seed ^ 0x5851_f42d_4c95_7f2d))
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        mix64(self.0)
    }

    /// Uniform in `[0, 1)`.
    pub fn f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 * (1.0 / (1u64 << 53) as f64)
    }

    /// Uniform in `0..n` (`n > 0`), by multiply-shift (bias below 2^-32 for
    /// the ranges used here).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n)) >> 64) as u64
    }
}

/// Zipf over ranks `1..=n` with exponent `s >= 0`, sampled in O(1) expected time
/// and no table, by rejection-inversion (Hörmann and Derflinger, 1996).
#[derive(Clone, Debug)]
pub struct Zipf {
    n: f64,
    s: f64,
    h_integral_x1: f64,
    h_integral_n: f64,
    squeeze: f64,
}

impl Zipf {
    pub fn new(n: u64, s: f64) -> Result<Self, String> {
        if n == 0 {
            return Err("Zipf needs at least one rank".into());
        }
        if !(s.is_finite() && s >= 0.0) {
            return Err(format!("Zipf exponent {s} must be a number >= 0"));
        }
        let mut zipf = Zipf {
            n: n as f64,
            s,
            h_integral_x1: 0.0,
            h_integral_n: 0.0,
            squeeze: 0.0,
        };
        zipf.h_integral_x1 = zipf.h_integral(1.5) - 1.0;
        zipf.h_integral_n = zipf.h_integral(n as f64 + 0.5);
        zipf.squeeze = 2.0 - zipf.h_integral_inverse(zipf.h_integral(2.5) - zipf.h(2.0));
        Ok(zipf)
    }

    /// A rank in `1..=n`; rank 1 is the most popular.
    pub fn sample(&self, rng: &mut Rng) -> u64 {
        loop {
            let u = self.h_integral_n + rng.f64() * (self.h_integral_x1 - self.h_integral_n);
            let x = self.h_integral_inverse(u);
            let k = (x + 0.5).floor().clamp(1.0, self.n);
            if k - x <= self.squeeze || u >= self.h_integral(k + 0.5) - self.h(k) {
                return k as u64;
            }
        }
    }

    /// The probability of rank `k`, by summing (for tests and reports; O(n)).
    pub fn probability(&self, k: u64) -> f64 {
        let norm: f64 = (1..=self.n as u64).map(|i| self.h(i as f64)).sum();
        self.h(k as f64) / norm
    }

    /// x^-s
    fn h(&self, x: f64) -> f64 {
        (-self.s * x.ln()).exp()
    }

    /// The integral of `h`, up to a constant: (x^(1-s) - 1) / (1 - s), or ln x.
    fn h_integral(&self, x: f64) -> f64 {
        let log_x = x.ln();
        helper2((1.0 - self.s) * log_x) * log_x
    }

    fn h_integral_inverse(&self, x: f64) -> f64 {
        let t = (x * (1.0 - self.s)).max(-1.0);
        (helper1(t) * x).exp()
    }
}

/// ln(1 + x) / x, accurate near 0.
fn helper1(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.ln_1p() / x
    } else {
        1.0 - x * (0.5 - x * (1.0 / 3.0 - 0.25 * x))
    }
}

/// (e^x - 1) / x, accurate near 0.
fn helper2(x: f64) -> f64 {
    if x.abs() > 1e-8 {
        x.exp_m1() / x
    } else {
        1.0 + x * 0.5 * (1.0 + x / 3.0 * (1.0 + 0.25 * x))
    }
}

/// A choice among `N` outcomes by integer weights.
#[derive(Clone, Debug)]
pub struct Weighted<const N: usize> {
    /// Running sums of the weights.
    cumulative: [u64; N],
}

impl<const N: usize> Weighted<N> {
    pub fn new(weights: [u32; N]) -> Result<Self, String> {
        let mut cumulative = [0u64; N];
        let mut sum = 0u64;
        for (slot, w) in cumulative.iter_mut().zip(weights) {
            sum += u64::from(w);
            *slot = sum;
        }
        if sum == 0 {
            return Err("at least one weight must be above 0".into());
        }
        Ok(Weighted { cumulative })
    }

    /// An index in `0..N`, each with probability weight / total.
    pub fn sample(&self, rng: &mut Rng) -> usize {
        let total = self.cumulative[N - 1];
        let x = rng.below(total);
        self.cumulative.iter().position(|&c| x < c).unwrap_or(N - 1)
    }

    /// The share of outcome `i`.
    pub fn share(&self, i: usize) -> f64 {
        let below = if i == 0 { 0 } else { self.cumulative[i - 1] };
        (self.cumulative[i] - below) as f64 / self.cumulative[N - 1] as f64
    }
}

/// What a request asks for, or (WebSocket) what a relayed message is; also
/// the index of per-kind counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    Connect = 0,
    Announce = 1,
    Scrape = 2,
    /// WebSocket: WebRTC offers, sent inside announces and received relayed.
    Offer = 3,
    /// WebSocket: answers to offers, sent as announces and received relayed.
    Answer = 4,
}

impl Kind {
    /// Every kind: the size of the per-kind counters.
    pub const COUNT: usize = 5;
    pub const ALL: [Kind; Kind::COUNT] = [
        Kind::Connect,
        Kind::Announce,
        Kind::Scrape,
        Kind::Offer,
        Kind::Answer,
    ];
    /// What a UDP load sends.
    pub const UDP: [Kind; 3] = [Kind::Connect, Kind::Announce, Kind::Scrape];
    /// What a WebSocket load counts.
    pub const WS: [Kind; 4] = [Kind::Announce, Kind::Offer, Kind::Answer, Kind::Scrape];

    pub fn name(self) -> &'static str {
        match self {
            Kind::Connect => "connect",
            Kind::Announce => "announce",
            Kind::Scrape => "scrape",
            Kind::Offer => "offer",
            Kind::Answer => "answer",
        }
    }
}

/// One simulated peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Peer {
    pub index: u32,
    /// The source address (socket or connection) it sends from.
    pub source: u32,
    pub port: u16,
    pub peer_id: PeerId,
    pub seeder: bool,
    pub key: u32,
    /// What a leecher still has to download.
    pub left: u64,
}

/// One announce to send.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnouncePlan {
    pub torrent: u64,
    pub info_hash: InfoHash,
    pub peer: Peer,
    pub event: AnnounceEvent,
    /// 0 for a seeder and for a `completed` event.
    pub left: u64,
    /// Peers asked for; -1 asks for the tracker's default.
    pub numwant: i32,
}

/// The whole model, shared read-only by every worker.
#[derive(Clone, Debug)]
pub struct TrafficModel {
    torrents: u64,
    peers: u32,
    sources: u32,
    seed: u64,
    zipf: Zipf,
    /// Seeders are peers whose hash falls below this.
    seeder_threshold: u64,
    events: Weighted<4>,
    numwant: i32,
    scrape_max: usize,
    /// A private tracker's passkeys and registered info-hashes, if given.
    lists: Lists,
}

const EVENTS: [AnnounceEvent; 4] = [
    AnnounceEvent::None,
    AnnounceEvent::Started,
    AnnounceEvent::Completed,
    AnnounceEvent::Stopped,
];

impl EventWeights {
    pub fn as_array(&self) -> [u32; 4] {
        [self.none, self.started, self.completed, self.stopped]
    }
}

/// The info-hash of torrent `t` of the model seeded with `seed`: what the
/// load announces, and what `load-test info-hashes` lists.
pub fn info_hash_of(seed: u64, t: u64) -> InfoHash {
    let mut out = [0u8; 20];
    let base = mix64(seed ^ t.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    for (i, chunk) in out.chunks_mut(8).enumerate() {
        let word = mix64(base.wrapping_add(i as u64)).to_le_bytes();
        chunk.copy_from_slice(&word[..chunk.len()]);
    }
    InfoHash(out)
}

impl TrafficModel {
    /// The model for `config`, with peers spread over `sources` source
    /// addresses (at least [`min_sources`] of the peers).
    pub fn new(config: &TrafficConfig, sources: u32, seed: u64) -> Result<Self, String> {
        Self::with_lists(config, sources, seed, Lists::default())
    }

    /// As [`Self::new`], for a private tracker: each peer announces with
    /// one of `lists.passkeys`, and the torrents are `lists.info_hashes`
    /// (their number replaces `traffic.torrents`), the first the most
    /// popular.
    pub fn with_lists(
        config: &TrafficConfig,
        sources: u32,
        seed: u64,
        lists: Lists,
    ) -> Result<Self, String> {
        let mut config = config.clone();
        if let Some(hashes) = &lists.info_hashes {
            config.torrents = hashes.len() as u64;
        }
        let config = &config;
        if config.torrents == 0 {
            return Err("`traffic.torrents` must be at least 1".into());
        }
        if config.peers == 0 {
            return Err("`traffic.peers` must be at least 1".into());
        }
        if sources < min_sources(config.peers) {
            return Err(format!(
                "{} peers need at least {} source addresses, got {sources}",
                config.peers,
                min_sources(config.peers)
            ));
        }
        if !(0.0..=1.0).contains(&config.seeder_probability) {
            return Err("`traffic.seeder_probability` must be within 0..=1".into());
        }
        if !(1..=MAX_SCRAPE).contains(&config.scrape_hashes) {
            return Err(format!(
                "`traffic.scrape_hashes` must be within 1..={MAX_SCRAPE}"
            ));
        }
        if config.numwant < -1 {
            return Err("`traffic.numwant` must be -1 (tracker default) or more".into());
        }
        let zipf = Zipf::new(config.torrents, config.zipf_exponent)
            .map_err(|e| format!("`traffic.zipf_exponent`: {e}"))?;
        let events = Weighted::new(config.events.as_array())
            .map_err(|e| format!("`traffic.events`: {e}"))?;
        Ok(TrafficModel {
            torrents: config.torrents,
            peers: config.peers,
            sources,
            seed,
            zipf,
            seeder_threshold: (config.seeder_probability * u64::MAX as f64) as u64,
            events,
            numwant: config.numwant,
            scrape_max: config.scrape_hashes,
            lists,
        })
    }

    pub fn torrents(&self) -> u64 {
        self.torrents
    }

    pub fn peers(&self) -> u32 {
        self.peers
    }

    pub fn sources(&self) -> u32 {
        self.sources
    }

    pub fn numwant(&self) -> i32 {
        self.numwant
    }

    /// A torrent index by popularity.
    pub fn torrent(&self, rng: &mut Rng) -> u64 {
        self.zipf.sample(rng) - 1
    }

    /// The info-hash of torrent `t`: 20 bytes of a keyed hash of `t`.
    pub fn info_hash(&self, t: u64) -> InfoHash {
        match &self.lists.info_hashes {
            Some(hashes) => hashes[t as usize],
            None => info_hash_of(self.seed, t),
        }
    }

    /// Whether the load is a private tracker's (its peers have passkeys).
    pub fn has_passkeys(&self) -> bool {
        self.lists.passkeys.is_some()
    }

    /// The passkey peer `peer` announces with, always the same one (a
    /// user's client; a user has many): `None` for a public tracker.
    pub fn passkey(&self, peer: &Peer) -> Option<&Passkey> {
        let keys = self.lists.passkeys.as_deref()?;
        let h = mix64(self.seed.rotate_left(41) ^ u64::from(peer.index) ^ 0x7061_7373);
        Some(&keys[(h % keys.len() as u64) as usize])
    }

    /// How many peers send from `source`.
    pub fn peers_on_source(&self, source: u32) -> u32 {
        if source >= self.sources.min(self.peers) {
            0
        } else {
            (self.peers - source).div_ceil(self.sources)
        }
    }

    /// Peer `p`, which must be below `peers`.
    pub fn peer(&self, p: u32) -> Peer {
        let h = mix64(self.seed.rotate_left(17) ^ u64::from(p));
        let h2 = mix64(h);
        let mut peer_id = *b"-LT2000-000000000000";
        // The index in hex makes the id unique; the tail varies like a client's.
        let hex = b"0123456789abcdef";
        for i in 0..8 {
            peer_id[8 + i] = hex[((p >> (28 - 4 * i)) & 15) as usize];
        }
        for i in 0..4 {
            peer_id[16 + i] = hex[((h >> (4 * i)) & 15) as usize];
        }
        Peer {
            index: p,
            source: p % self.sources,
            port: (PORT_BASE + p / self.sources) as u16,
            peer_id: PeerId(peer_id),
            seeder: h < self.seeder_threshold || self.seeder_threshold == u64::MAX,
            key: h2 as u32,
            left: 1 + (h2 >> 32) % (4 << 30),
        }
    }

    /// The index of the model's peer whose peer id this is (its hex digits),
    /// if it is one of the model's.
    pub fn peer_index(&self, id: &PeerId) -> Option<u32> {
        if !id.0.starts_with(b"-LT2000-") {
            return None;
        }
        let mut p = 0u32;
        for &c in &id.0[8..16] {
            p = p << 4 | char::from(c).to_digit(16)?;
        }
        (p < self.peers && self.peer(p).peer_id == *id).then_some(p)
    }

    /// A random peer among those of `source`, which must have some.
    pub fn peer_on_source(&self, rng: &mut Rng, source: u32) -> Peer {
        let k = rng.below(u64::from(self.peers_on_source(source).max(1))) as u32;
        self.peer(source + k * self.sources)
    }

    /// An announce from a random peer of `source`.
    pub fn announce(&self, rng: &mut Rng, source: u32) -> AnnouncePlan {
        let torrent = self.torrent(rng);
        let peer = self.peer_on_source(rng, source);
        self.announce_by(rng, torrent, peer)
    }

    /// The peer of `source` that speaks for torrent `t`. A WebSocket
    /// connection (a source) carries many peers, but each torrent is
    /// announced on it with one peer id only, as a browser does and as
    /// aquatic_ws requires (a second peer id for a torrent closes the
    /// connection).
    pub fn peer_for_torrent(&self, source: u32, t: u64) -> Peer {
        let n = u64::from(self.peers_on_source(source).max(1));
        let k = (mix64(self.seed ^ t.rotate_left(24) ^ u64::from(source)) % n) as u32;
        self.peer(source + k * self.sources)
    }

    /// An announce of a torrent by popularity from the peer of `source`
    /// that speaks for it ([`Self::peer_for_torrent`]).
    pub fn announce_per_torrent(&self, rng: &mut Rng, source: u32) -> AnnouncePlan {
        let torrent = self.torrent(rng);
        let peer = self.peer_for_torrent(source, torrent);
        self.announce_by(rng, torrent, peer)
    }

    /// An announce of `torrent` by `peer`, with an event by weight.
    fn announce_by(&self, rng: &mut Rng, torrent: u64, peer: Peer) -> AnnouncePlan {
        let event = EVENTS[self.events.sample(rng)];
        let left = if peer.seeder || event == AnnounceEvent::Completed {
            0
        } else {
            peer.left
        };
        AnnouncePlan {
            torrent,
            info_hash: self.info_hash(torrent),
            peer,
            event,
            left,
            numwant: self.numwant,
        }
    }

    /// Fills the start of `out` with the info-hashes of a scrape (1 to
    /// `scrape_hashes` torrents by popularity) and returns how many.
    pub fn scrape(&self, rng: &mut Rng, out: &mut [InfoHash; MAX_SCRAPE]) -> usize {
        let n = 1 + rng.below(self.scrape_max as u64) as usize;
        for slot in &mut out[..n] {
            *slot = self.info_hash(self.torrent(rng));
        }
        n
    }
}

#[cfg(test)]
mod tests;
