//! Our ledger, settle and flush side by side with the model of
//! UNIT3D-Announce ([`crate::unit3d_model`]), fed the same announces in
//! order, over random sequences on a small site: what we charge is never
//! less than UNIT3D-Announce charges, what we credit never more, and no
//! answer hands a user its own peers. Where our tracker differs on purpose
//! (docs/OPERATIONS.md, "Private tracker"), the assertion names the rule.
//!
//! The site: user 1 in a plain group, with a freeleech token on torrent 2;
//! user 2 in a group with one download slot and double upload; user 3 with
//! personal freeleech. Torrent 1 plain, torrent 2 double upload and 50%
//! freeleech; either may be featured. Each user has two peer ids per
//! torrent, each announcing from three addresses (two ports, two IPs).
//! IPv4 only: our answers carry the announcer's family alone, where
//! UNIT3D-Announce's carry both (`peers` and `peers6`).

use crate::batch::Batch;
use crate::ledger::{Admitted, Ledger, LedgerConfig, PrivateAnnounce};
use crate::refusal::Refusal;
use crate::rules::GlobalFactors;
use crate::site::{Site, SiteRecords, Torrent, TorrentId, UserId};
use crate::slots::LeechingCounts;
use crate::testing::{self, group, user, MemoryDb};
use crate::unit3d_model::{
    Listed, ModelAnnounce, ModelAnswer, ModelConfig, ModelPeer, ModelRefusal, Unit3dModel,
};
use proptest::prelude::*;
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::sync::Arc;
use tracker_proto::{AnnounceEvent, AnswerPeers};

const USERS: [UserId; 3] = [1, 2, 3];
const TORRENTS: [TorrentId; 2] = [1, 2];
const MICROS: u64 = 1_000_000;

fn records(featured: Option<TorrentId>) -> SiteRecords {
    let mut limited = group(11, "leech-limited");
    limited.download_slots = Some(1);
    limited.is_double_upload = true;
    SiteRecords {
        users: vec![user(1, 10), user(2, 11), user(3, 10)],
        groups: vec![group(10, "user"), limited],
        torrents: vec![
            testing::torrent(1),
            Torrent {
                upload_factor: 200,
                download_factor: 50,
                ..testing::torrent(2)
            },
        ],
        featured: featured.into_iter().collect(),
        tokens: vec![(1, 2)],
        personal_freeleech: vec![3],
        ..SiteRecords::default()
    }
}

/// UNIT3D-Announce set as our ledger: no rate-limit warning (our
/// `min_announce_interval` is off by default), numwant above any swarm
/// here, so that both hand out every peer they may.
fn model_config(ours: &LedgerConfig) -> ModelConfig {
    ModelConfig {
        max_peers_per_torrent_per_user: ours.max_peers_per_torrent_per_user,
        active_peer_ttl: ours.active_peer_ttl,
        inactive_peer_ttl: ours.inactive_peer_ttl,
        announce_min: 0,
        ..ModelConfig::default()
    }
}

/// How a client's counter moves at an announce.
#[derive(Clone, Copy)]
enum Counter {
    Grow(u16),
    Stay,
    /// Back by one more than this (saturating at 0).
    Back(u16),
    Reset,
    /// Up by a gigabyte and more.
    Jump(u16),
}

impl Counter {
    fn apply(self, total: u64) -> u64 {
        match self {
            Counter::Grow(n) => total + u64::from(n),
            Counter::Stay => total,
            Counter::Back(n) => total.saturating_sub(u64::from(n) + 1),
            Counter::Reset => 0,
            Counter::Jump(n) => total + (1 << 30) + u64::from(n),
        }
    }
}

#[derive(Clone, Copy, Debug)]
enum Left {
    Keep,
    Seed,
    Leech,
}

#[derive(Clone, Copy)]
struct Step {
    user: UserId,
    torrent: TorrentId,
    /// Which of the user's two peer ids.
    slot: u8,
    /// 0: its first address; 1: another port; 2: another IP.
    addr: u8,
    event: AnnounceEvent,
    up: Counter,
    down: Counter,
    left: Left,
    secs: u16,
    ms: u16,
    tracker: usize,
}

#[derive(Clone, Copy)]
enum Event {
    Announce(Step),
    /// The workers hand their batch to the database thread.
    Take(usize),
    Flush(usize),
    /// Our tracker forgets, UNIT3D-Announce's reaper marks inactive, the
    /// peers silent past the active TTL.
    Expire(usize),
    /// Everything flushed, then a new process.
    Restart(usize),
    /// Killed: what it held unflushed is lost.
    Crash(usize),
    /// The clock moves past the active TTL, and this much more.
    Gap(u16),
}

/// One tracker, or two sharing one database.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Mode {
    One,
    /// Two; a peer moves to the other once the one it leaves has flushed,
    /// a second at least later (keepalived's failover off a live tracker).
    Failover,
    /// Two, any interleaving, crashes too.
    Any,
}

impl std::fmt::Debug for Counter {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Counter::Grow(n) => write!(f, "+{n}"),
            Counter::Stay => write!(f, "="),
            Counter::Back(n) => write!(f, "-{}", u32::from(*n) + 1),
            Counter::Reset => write!(f, "=0"),
            Counter::Jump(n) => write!(f, "+1G{n}"),
        }
    }
}

/// One line per step, so that a shrunk sequence reads as a story:
/// `u1 t2 p0@1 stopped up+5 down-3 seed +12.000s T0`.
impl std::fmt::Debug for Step {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let event = match self.event {
            AnnounceEvent::None => "none",
            AnnounceEvent::Started => "started",
            AnnounceEvent::Completed => "completed",
            AnnounceEvent::Stopped => "stopped",
        };
        let left = match self.left {
            Left::Keep => "keep",
            Left::Seed => "seed",
            Left::Leech => "leech",
        };
        write!(
            f,
            "u{} t{} p{}@{} {} up{:?} down{:?} {} +{}.{:03}s T{}",
            self.user,
            self.torrent,
            self.slot,
            self.addr,
            event,
            self.up,
            self.down,
            left,
            self.secs,
            self.ms,
            self.tracker
        )
    }
}

impl std::fmt::Debug for Event {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Event::Announce(step) => write!(f, "{step:?}"),
            Event::Take(t) => write!(f, "take T{t}"),
            Event::Flush(t) => write!(f, "flush T{t}"),
            Event::Expire(t) => write!(f, "expire T{t}"),
            Event::Restart(t) => write!(f, "restart T{t}"),
            Event::Crash(t) => write!(f, "crash T{t}"),
            Event::Gap(secs) => write!(f, "gap TTL+{secs}s"),
        }
    }
}

fn arb_counter() -> impl Strategy<Value = Counter> {
    prop_oneof![
        6 => (0u16..2000).prop_map(Counter::Grow),
        2 => Just(Counter::Stay),
        1 => (0u16..500).prop_map(Counter::Back),
        1 => Just(Counter::Reset),
        1 => any::<u16>().prop_map(Counter::Jump),
    ]
}

fn arb_step() -> impl Strategy<Value = Step> {
    let event = prop_oneof![
        5 => Just(AnnounceEvent::None),
        2 => Just(AnnounceEvent::Started),
        2 => Just(AnnounceEvent::Completed),
        2 => Just(AnnounceEvent::Stopped),
    ];
    let left = prop_oneof![5 => Just(Left::Keep), 2 => Just(Left::Seed), 1 => Just(Left::Leech)];
    let addr = prop_oneof![4 => Just(0u8), 1 => Just(1u8), 1 => Just(2u8)];
    (
        (1u32..=3, 1u32..=2, 0u8..2, addr),
        (event, arb_counter(), arb_counter(), left),
        (0u16..4000, 0u16..1000, 0usize..2),
    )
        .prop_map(
            |((user, torrent, slot, addr), (event, up, down, left), (secs, ms, tracker))| Step {
                user,
                torrent,
                slot,
                addr,
                event,
                up,
                down,
                left,
                secs,
                ms,
                tracker,
            },
        )
}

fn arb_event(mode: Mode) -> BoxedStrategy<Event> {
    let trackers = if mode == Mode::One { 0..1 } else { 0usize..2 };
    let crash_weight = if mode == Mode::Any { 1 } else { 0 };
    prop_oneof![
        12 => arb_step().prop_map(Event::Announce),
        1 => trackers.clone().prop_map(Event::Take),
        2 => trackers.clone().prop_map(Event::Flush),
        1 => trackers.clone().prop_map(Event::Expire),
        1 => trackers.clone().prop_map(Event::Restart),
        crash_weight => trackers.prop_map(Event::Crash),
        1 => any::<u16>().prop_map(Event::Gap),
    ]
    .boxed()
}

fn arb_featured() -> impl Strategy<Value = Option<TorrentId>> {
    prop_oneof![Just(None), Just(Some(1)), Just(Some(2))]
}

/// One of our trackers: its ledger (download slots enforced, counted per
/// process), and what its database thread took but has not flushed.
struct Ours {
    ledger: Ledger,
    held: Batch,
    /// Peers announced here since the last flush, and those of them that
    /// stopped or restarted (a total back).
    unflushed: BTreeSet<PeerOf>,
    unflushed_stops: BTreeSet<PeerOf>,
}

impl Ours {
    fn new(config: LedgerConfig) -> Ours {
        Ours {
            ledger: Ledger::new(config).with_slots(Arc::new(LeechingCounts::default())),
            held: Batch::default(),
            unflushed: BTreeSet::new(),
            unflushed_stops: BTreeSet::new(),
        }
    }

    fn take(&mut self) {
        let rules = self.ledger.config().credit_rules();
        let batch = self.ledger.take_batch();
        self.held.merge(batch, &rules);
    }

    fn flush(&mut self, db: &mut MemoryDb) {
        self.take();
        let rules = self.ledger.config().credit_rules();
        db.flush(&std::mem::take(&mut self.held), &rules);
        self.unflushed.clear();
        self.unflushed_stops.clear();
    }

    /// A new process: the rows active within the TTL restored (the
    /// binary's first flush expires the older ones).
    fn start(config: LedgerConfig, db: &MemoryDb, now_secs: u64) -> Ours {
        let mut ours = Ours::new(config);
        let since = now_secs.saturating_sub(config.active_peer_ttl);
        for (key, row) in &db.peers {
            if row.active && row.updated_at >= since {
                ours.ledger.restore(*key, row);
            }
        }
        ours
    }
}

#[derive(Clone, Copy, Debug, Default)]
struct Client {
    uploaded: u64,
    downloaded: u64,
    left: u64,
}

type PeerOf = (UserId, TorrentId, u8);

struct Run {
    mode: Mode,
    site: Site,
    config: LedgerConfig,
    db: MemoryDb,
    ours: Vec<Ours>,
    model: Unit3dModel,
    clients: BTreeMap<PeerOf, Client>,
    last_tracker: BTreeMap<PeerOf, usize>,
    /// Per torrent, the peer that announced from each address last.
    addresses: BTreeMap<(TorrentId, SocketAddr), (UserId, u8)>,
    now_us: u64,
    /// Set once the two trackers' swarms differ by a named rule: lists and
    /// counts are no longer compared, the bytes still are.
    swarms_differ_by: Option<&'static str>,
    /// Pairs with a peer new to both trackers that announced to both
    /// within one flush interval.
    /// Pairs where a stop and an announce of the same peer reached
    /// different trackers within one flush interval.
    stop_across_trackers: BTreeSet<(UserId, TorrentId)>,
    /// Pairs where a client still leeching sent `completed`.
    leeching_completed: BTreeSet<(UserId, TorrentId)>,
    /// Pairs where one peer announced to both trackers within one flush
    /// interval.
    interleaved: BTreeSet<(UserId, TorrentId)>,
    /// Announces ours admitted, per (user, torrent).
    announces: BTreeMap<(UserId, TorrentId), u64>,
    /// Pairs with announces lost in a crash.
    lost_in_crash: BTreeSet<(UserId, TorrentId)>,
}

fn address(user: UserId, slot: u8, variant: u8) -> SocketAddr {
    let ip = Ipv4Addr::new(10, user as u8, slot, 1 + u8::from(variant == 2));
    SocketAddr::new(IpAddr::V4(ip), 6881 + u16::from(variant == 1))
}

fn model_announce(a: &PrivateAnnounce) -> ModelAnnounce {
    ModelAnnounce {
        passkey: a.passkey,
        info_hash: a.info_hash,
        peer_id: a.peer_id,
        ip: a.ip,
        port: a.port,
        event: a.event,
        uploaded: a.uploaded,
        downloaded: a.downloaded,
        left: a.left,
        numwant: Some(a.numwant as usize),
    }
}

/// Ours takes a download slot for a visible seeder that announces as a
/// leecher, and hides it past its user's slots; UNIT3D-Announce keeps it
/// visible (it reads the peer's old visibility with its new seeding flag),
/// so its user leeches past the slots. From there the two swarms' counts
/// and lists differ (the model counts one more leecher for the user, and
/// hides others ours lets in). Not in docs/OPERATIONS.md's table yet.
fn seeder_turning_leecher_takes_a_slot(
    previous: Option<&ModelPeer>,
    a: &PrivateAnnounce,
    ours: &Admitted,
    model: &ModelAnswer,
) -> bool {
    previous.is_some_and(|old| old.is_active && old.is_visible && old.is_seeder)
        && a.left > 0
        && ours.hidden
        && model.visible
}

/// docs/OPERATIONS.md: a stop of a peer the tracker does not know is
/// credited from its row, if there is one (UNIT3D-Announce refuses it:
/// "Stopped peer doesn't exist.").
fn stop_of_an_unknown_peer_is_admitted(
    ours: &Result<Admitted, Refusal>,
    model: &Result<ModelAnswer, ModelRefusal>,
) -> bool {
    ours.is_ok() && matches!(model, Err(ModelRefusal::StoppedPeerDoesntExist))
}

/// docs/OPERATIONS.md, "How an announce is credited": a `completed` from
/// a client still leeching completed nothing, and sets no `completed_at`
/// (UNIT3D-Announce sets it for any `completed`).
fn a_completed_from_a_leecher_completes_nothing(run: &Run, pair: (UserId, TorrentId)) -> bool {
    run.leeching_completed.contains(&pair)
}

/// The factors' integer math truncates each step's credit, as
/// UNIT3D-Announce's does each announce's: where two trackers measure one
/// of its deltas in two steps (one from the other's row), a byte may go to
/// each truncation. The bytes as reported (`actual_downloaded`) are held
/// exactly; the credited ones within a byte per announce of the pair.
fn each_step_truncates_its_credit(run: &Run, pair: (UserId, TorrentId)) -> u64 {
    run.announces.get(&pair).copied().unwrap_or(0)
}

/// docs/OPERATIONS.md, "Two trackers on one database": where a peer
/// announces to both trackers within one flush interval (anycast flapping
/// under it; keepalived's failover flushes the old tracker first), each
/// credits its steps from the row the other left, as it finds it at its
/// flush. A stop or a restart the other did not see may be credited as
/// the session going on (its upload, each byte once but more than
/// UNIT3D-Announce, one process, credits across a stop or a restart), and
/// a download reported before a restart, or before the first flush of a
/// session new to both, may go uncharged or be charged by both.
fn a_peer_on_both_trackers_within_one_flush_interval(run: &Run, pair: (UserId, TorrentId)) -> bool {
    run.stop_across_trackers.contains(&pair) || run.interleaved.contains(&pair)
}

/// docs/OPERATIONS.md: kill -9 loses the claims merged since the last
/// flush; each peer's row still records where it was last credited. A
/// peer that never announces again is not charged its last interval, and
/// one whose stop or counter reset was lost is credited from the row as
/// if its session had gone on (as a client that sends no stop is).
fn a_crash_loses_the_claims_since_the_last_flush(run: &Run, pair: (UserId, TorrentId)) -> bool {
    run.lost_in_crash.contains(&pair)
}

impl Run {
    fn new(mode: Mode, featured: Option<TorrentId>) -> Run {
        let config = LedgerConfig::default();
        let records = records(featured);
        let trackers = if mode == Mode::One { 1 } else { 2 };
        Run {
            mode,
            site: Site::from_records(records.clone(), GlobalFactors::default()),
            config,
            db: MemoryDb::default(),
            ours: (0..trackers).map(|_| Ours::new(config)).collect(),
            model: Unit3dModel::new(&records, model_config(&config)),
            clients: BTreeMap::new(),
            last_tracker: BTreeMap::new(),
            addresses: BTreeMap::new(),
            now_us: 1_000_000 * MICROS,
            swarms_differ_by: None,
            stop_across_trackers: BTreeSet::new(),
            leeching_completed: BTreeSet::new(),
            lost_in_crash: BTreeSet::new(),
            announces: BTreeMap::new(),
            interleaved: BTreeSet::new(),
        }
    }

    fn now_secs(&self) -> u64 {
        self.now_us / MICROS
    }

    fn tracker(&self, t: usize) -> usize {
        t.min(self.ours.len() - 1)
    }

    fn apply(&mut self, event: Event) -> Result<(), TestCaseError> {
        match event {
            Event::Announce(step) => return self.announce(step),
            Event::Take(t) => {
                let t = self.tracker(t);
                self.ours[t].take();
            }
            Event::Flush(t) => {
                let t = self.tracker(t);
                self.ours[t].flush(&mut self.db);
                self.model.flush();
            }
            Event::Expire(t) => {
                let (t, now) = (self.tracker(t), self.now_secs());
                self.ours[t].ledger.expire(now);
                self.model.reap(self.now_us);
            }
            Event::Restart(t) => {
                let t = self.tracker(t);
                self.ours[t].flush(&mut self.db);
                self.ours[t] = Ours::start(self.config, &self.db, self.now_secs());
                // UNIT3D-Announce runs on; its reaper leaves out what ours
                // did not restore.
                self.model.flush();
                self.model.reap(self.now_us);
            }
            Event::Crash(t) => {
                let t = self.tracker(t);
                for &(user, torrent, _) in &self.ours[t].unflushed {
                    self.lost_in_crash.insert((user, torrent));
                }
                self.ours[t] = Ours::start(self.config, &self.db, self.now_secs());
                self.model.reap(self.now_us);
            }
            Event::Gap(secs) => {
                self.now_us += (self.config.active_peer_ttl + u64::from(secs)) * MICROS;
            }
        }
        Ok(())
    }

    fn announce(&mut self, s: Step) -> Result<(), TestCaseError> {
        let t = self.tracker(s.tracker);
        let peer_of = (s.user, s.torrent, s.slot);
        if self.mode == Mode::Failover {
            if let Some(&last) = self.last_tracker.get(&peer_of).filter(|&&last| last != t) {
                self.ours[last].flush(&mut self.db);
                self.model.flush();
                self.now_us += MICROS;
            }
        }
        self.last_tracker.insert(peer_of, t);
        let elsewhere = |set: fn(&Ours) -> &BTreeSet<PeerOf>| {
            (self.ours.iter().enumerate())
                .any(|(other, ours)| other != t && set(ours).contains(&peer_of))
        };
        let held_elsewhere = elsewhere(|o| &o.unflushed);
        let stopped_elsewhere = elsewhere(|o| &o.unflushed_stops);
        if held_elsewhere {
            self.interleaved.insert((s.user, s.torrent));
        }
        let previous_totals = self
            .clients
            .get(&peer_of)
            .map(|c| (c.uploaded, c.downloaded));
        let stop = s.event == AnnounceEvent::Stopped;
        let restart = previous_totals
            .is_some_and(|(up, down)| s.up.apply(up) < up || s.down.apply(down) < down);
        if stopped_elsewhere || ((stop || restart) && held_elsewhere) {
            self.stop_across_trackers.insert((s.user, s.torrent));
        }
        // One tracker: whole seconds, so that its expiry and the model's
        // reaper draw the same line.
        let ms = if self.mode == Mode::One { 0 } else { s.ms };
        self.now_us += u64::from(s.secs) * MICROS + u64::from(ms) * 1000;
        let client = self.clients.entry(peer_of).or_insert(Client {
            left: 100,
            ..Client::default()
        });
        client.uploaded = s.up.apply(client.uploaded);
        client.downloaded = s.down.apply(client.downloaded);
        client.left = match s.left {
            Left::Keep => client.left,
            Left::Seed => 0,
            Left::Leech => 100,
        };
        let mut a = testing::announce(s.user, s.torrent, s.slot);
        let addr = address(s.user, s.slot, s.addr);
        (a.ip, a.port) = (addr.ip(), addr.port());
        a.event = s.event;
        a.uploaded = client.uploaded;
        a.downloaded = client.downloaded;
        a.left = client.left;
        if a.event == AnnounceEvent::Completed && a.left > 0 {
            self.leeching_completed.insert((s.user, s.torrent));
        }
        a.numwant = 50;

        let previous = self.model.peer(s.torrent, s.user, &a.peer_id).copied();
        let mut peers = AnswerPeers::default();
        let ours = self.ours[t]
            .ledger
            .announce(&self.site, &a, self.now_us, &mut peers);
        let model = self.model.announce(&model_announce(&a), self.now_us);
        if ours.is_ok() {
            *self.announces.entry((s.user, s.torrent)).or_default() += 1;
            self.ours[t].unflushed.insert(peer_of);
            if stop || restart {
                self.ours[t].unflushed_stops.insert(peer_of);
            }
        }

        // Own peers are never listed: each address mapped back to the peer
        // that announced from it last.
        let mut listed = BTreeSet::new();
        for addr in peers.addrs() {
            let owner = self.addresses.get(&(s.torrent, addr)).copied();
            prop_assert!(
                owner.is_some(),
                "{addr} listed: no peer of torrent {} announced from it",
                s.torrent
            );
            let (user, slot) = owner.unwrap_or_default();
            prop_assert_ne!(user, s.user, "user {} handed its own peer {}", s.user, addr);
            listed.insert(Listed {
                user_id: user,
                peer_id: testing::peer(slot),
                addr,
            });
        }
        self.addresses.insert((s.torrent, addr), (s.user, s.slot));
        if self.mode == Mode::One {
            self.compare_answers(&a, previous.as_ref(), &ours, &model, &listed)?;
        }
        Ok(())
    }

    /// One tracker against UNIT3D-Announce, answer by answer: the same
    /// announces admitted, the same counts, the same peers listed (at
    /// their latest addresses), unless a named rule sets them apart.
    fn compare_answers(
        &mut self,
        a: &PrivateAnnounce,
        previous: Option<&ModelPeer>,
        ours: &Result<Admitted, Refusal>,
        model: &Result<ModelAnswer, ModelRefusal>,
        listed: &BTreeSet<Listed>,
    ) -> Result<(), TestCaseError> {
        let (ours_ok, model_ok) = match (ours, model) {
            (Ok(o), Ok(m)) => (o, m),
            (Err(_), Err(_)) => return Ok(()),
            _ if stop_of_an_unknown_peer_is_admitted(ours, model) => return Ok(()),
            _ => {
                return Err(TestCaseError::fail(format!(
                    "admitted by one only: ours {ours:?}, UNIT3D-Announce {model:?}"
                )))
            }
        };
        if self.swarms_differ_by.is_some() {
            return Ok(());
        }
        if a.event != AnnounceEvent::Stopped && ours_ok.hidden == model_ok.visible {
            if seeder_turning_leecher_takes_a_slot(previous, a, ours_ok, model_ok) {
                self.swarms_differ_by
                    .get_or_insert("a seeder turning leecher takes a slot");
                return Ok(());
            } else {
                return Err(TestCaseError::fail(format!(
                    "hidden: ours {}, UNIT3D-Announce {} (previous {previous:?})",
                    ours_ok.hidden, !model_ok.visible
                )));
            }
        }
        prop_assert_eq!(
            (ours_ok.seeders, ours_ok.leechers),
            (model_ok.seeders, model_ok.leechers),
            "counts"
        );
        let expected: BTreeSet<Listed> = model_ok.candidates().copied().collect();
        prop_assert_eq!(listed, &expected, "peers listed");
        Ok(())
    }

    fn finish(&mut self) {
        for ours in &mut self.ours {
            ours.flush(&mut self.db);
        }
        self.model.flush();
    }

    /// After the final flushes: per (user, torrent) and per user, download
    /// charged never less than UNIT3D-Announce's, upload credited never
    /// more (but by the rules named).
    fn check_bytes(&self) -> Result<(), TestCaseError> {
        for user in USERS {
            let (mut model_up, mut model_down, mut user_truncated) = (0, 0, 0);
            let (mut user_download_owed, mut user_upload_bounded) = (true, true);
            for torrent in TORRENTS {
                let pair = (user, torrent);
                let lost = a_crash_loses_the_claims_since_the_last_flush(self, pair);
                let both = a_peer_on_both_trackers_within_one_flush_interval(self, pair);
                let download_owed = !lost && !both;
                let upload_bounded = !lost && !both;
                user_download_owed &= download_owed;
                user_upload_bounded &= upload_bounded;
                let model = self.model.db.history.get(&pair).copied();
                let model = model.unwrap_or_default();
                let ours = self.db.history.get(&pair);
                let (up, actual_up, down, actual_down) = ours.map_or((0, 0, 0, 0), |h| {
                    (
                        h.uploaded,
                        h.actual_uploaded,
                        h.downloaded,
                        h.actual_downloaded,
                    )
                });
                let name = format!("user {user} torrent {torrent}{}", self.notes(pair));
                let truncated = each_step_truncates_its_credit(self, pair);
                user_truncated += truncated;
                if download_owed {
                    prop_assert!(
                        down + truncated >= model.downloaded
                            && actual_down >= model.actual_downloaded,
                        "{}: downloaded {} (actual {}) < UNIT3D-Announce's {} ({})",
                        name,
                        down,
                        actual_down,
                        model.downloaded,
                        model.actual_downloaded
                    );
                }
                if upload_bounded {
                    prop_assert!(
                        up <= model.uploaded && actual_up <= model.actual_uploaded,
                        "{}: uploaded {} (actual {}) > UNIT3D-Announce's {} ({})",
                        name,
                        up,
                        actual_up,
                        model.uploaded,
                        model.actual_uploaded
                    );
                }
                // Ours keeps every completion UNIT3D-Announce keeps.
                if model.completed_at.is_some()
                    && !lost
                    && !a_completed_from_a_leecher_completes_nothing(self, pair)
                {
                    prop_assert!(
                        ours.is_some_and(|h| h.completed_at.is_some()),
                        "{}: completed_at lost",
                        name
                    );
                }
                model_up += model.uploaded;
                model_down += model.downloaded;
            }
            // UNIT3D-Announce's own `users` row keeps only the last credit
            // of each flush (see the model): ours is held to the sum of its
            // history rows instead.
            let (up, down) = self
                .db
                .users
                .get(&user)
                .map_or((0, 0), |u| (u.uploaded, u.downloaded));
            prop_assert!(
                !user_download_owed || down + user_truncated >= model_down,
                "user {}: downloaded {} < UNIT3D-Announce's {}",
                user,
                down,
                model_down
            );
            prop_assert!(
                !user_upload_bounded || up <= model_up,
                "user {}: uploaded {} > UNIT3D-Announce's {}",
                user,
                up,
                model_up
            );
        }
        Ok(())
    }

    /// What happened to a pair that a failure may be about.
    fn notes(&self, pair: (UserId, TorrentId)) -> String {
        let mut notes = String::new();
        if self.interleaved.contains(&pair) {
            notes.push_str(" (a peer announced to both trackers within one flush interval)");
        }
        notes
    }
}

fn run(mode: Mode, featured: Option<TorrentId>, events: &[Event]) -> Result<(), TestCaseError> {
    let mut run = Run::new(mode, featured);
    for event in events {
        run.apply(*event)?;
    }
    run.finish();
    run.check_bytes()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 512, ..ProptestConfig::default() })]

    /// One tracker, restarts and expiry included: each answer admits,
    /// counts and lists as UNIT3D-Announce's; the bytes as above.
    #[test]
    fn one_tracker_against_unit3d_announce(
        featured in arb_featured(),
        events in proptest::collection::vec(arb_event(Mode::One), 1..60),
    ) {
        run(Mode::One, featured, &events)?;
    }

    /// Two trackers on one database, peers moving between them as
    /// keepalived moves the address: the bytes against one UNIT3D-Announce
    /// that saw every announce in order.
    #[test]
    fn two_trackers_failing_over_against_unit3d_announce(
        featured in arb_featured(),
        events in proptest::collection::vec(arb_event(Mode::Failover), 1..60),
    ) {
        run(Mode::Failover, featured, &events)?;
    }

    /// Two trackers, any interleaving of announces and flushes, crashes
    /// too: never more upload, and (without a crash) never less download.
    #[test]
    fn two_trackers_in_any_order_against_unit3d_announce(
        featured in arb_featured(),
        events in proptest::collection::vec(arb_event(Mode::Any), 1..60),
    ) {
        run(Mode::Any, featured, &events)?;
    }
}

/// The events of a sequence as their `Debug` writes them, one a line:
/// what proptest prints of a shrunk case, read back for a plain test.
fn parse(sequence: &str) -> Vec<Event> {
    sequence
        .lines()
        .map(str::trim)
        .filter(|line| !line.is_empty())
        .map(|line| parse_event(line.trim_end_matches(',')))
        .collect()
}

fn parse_event(line: &str) -> Event {
    let words: Vec<&str> = line.split_whitespace().collect();
    let tracker = |word: &str| word.trim_start_matches('T').parse::<usize>().unwrap();
    match words[0] {
        "take" => return Event::Take(tracker(words[1])),
        "flush" => return Event::Flush(tracker(words[1])),
        "expire" => return Event::Expire(tracker(words[1])),
        "restart" => return Event::Restart(tracker(words[1])),
        "crash" => return Event::Crash(tracker(words[1])),
        "gap" => {
            let secs = words[1].trim_start_matches("TTL+").trim_end_matches('s');
            return Event::Gap(secs.parse().unwrap());
        }
        _ => {}
    }
    let number = |word: &str, prefix: char| word.trim_start_matches(prefix).parse().unwrap();
    let (slot, addr) = words[2].trim_start_matches('p').split_once('@').unwrap();
    let event = match words[3] {
        "none" => AnnounceEvent::None,
        "started" => AnnounceEvent::Started,
        "completed" => AnnounceEvent::Completed,
        "stopped" => AnnounceEvent::Stopped,
        other => panic!("event {other}"),
    };
    let counter = |word: &str| match word {
        "=" => Counter::Stay,
        "=0" => Counter::Reset,
        jump if jump.starts_with("+1G") => Counter::Jump(jump[3..].parse().unwrap()),
        grow if grow.starts_with('+') => Counter::Grow(grow[1..].parse().unwrap()),
        back => Counter::Back(back[1..].parse::<u16>().unwrap() - 1),
    };
    let left = match words[6] {
        "keep" => Left::Keep,
        "seed" => Left::Seed,
        "leech" => Left::Leech,
        other => panic!("left {other}"),
    };
    let (secs, ms) = words[7]
        .trim_start_matches('+')
        .trim_end_matches('s')
        .split_once('.')
        .unwrap();
    Event::Announce(Step {
        user: number(words[0], 'u'),
        torrent: number(words[1], 't'),
        slot: slot.parse().unwrap(),
        addr: addr.parse().unwrap(),
        event,
        up: counter(words[4].trim_start_matches("up")),
        down: counter(words[5].trim_start_matches("down")),
        left,
        secs: secs.parse().unwrap(),
        ms: ms.parse().unwrap(),
        tracker: tracker(words[8]),
    })
}

#[test]
fn sequences_read_back_as_written() {
    let written = "u1 t2 p1@2 completed up+1G7 down-3 seed +12.034s T1\n\
                   u3 t1 p0@0 stopped up=0 down= leech +0.000s T0\n\
                   take T1\nflush T0\nexpire T1\nrestart T0\ncrash T1\ngap TTL+9s";
    let read: Vec<String> = parse(written).iter().map(|e| format!("{e:?}")).collect();
    let lines: Vec<&str> = written.lines().map(str::trim).collect();
    assert_eq!(read, lines);
}

/// The shrunk failures of the properties above, one test each, named for
/// what they showed. Each holds the property for its sequence; each failed
/// before claims kept their latest run apart (a newer row covering the
/// first run credits the latest from itself) and a newer row below a
/// claim's totals stopped superseding it.
mod shrunk {
    use super::*;

    fn holds(mode: Mode, sequence: &str) {
        if let Err(failure) = run(mode, None, &parse(sequence)) {
            panic!("{mode:?}: {failure}");
        }
    }

    /// Tracker 1 still holds a stale account of a peer that moved to
    /// tracker 0; it expires it, then the peer stops and starts a new
    /// session there, all in one batch. Settled from tracker 0's newer row
    /// (`Origin::Covered`), the claim is measured from that row to its last
    /// step, over the stop: the new session's upload is credited as if
    /// the session went on (UNIT3D-Announce, and our own rule, credit
    /// nothing of it).
    #[test]
    fn a_stop_within_a_claim_covered_by_a_newer_row_is_skipped() {
        holds(
            Mode::Failover,
            "u1 t1 p1@0 none up+0 down+0 keep +0.000s T1
             u1 t1 p1@0 none up+0 down+0 keep +3500.000s T0
             gap TTL+0s
             expire T1
             u1 t1 p1@0 stopped up+0 down+0 keep +0.000s T1
             u1 t1 p1@0 none up+1 down+0 keep +0.000s T1",
        );
        // The same in any order: tracker 0's claim begins before tracker
        // 1's row (the peer was new to both, tracker 1 flushed at its
        // restart); the stop and the new session reach tracker 0.
        holds(
            Mode::Any,
            "u2 t1 p0@0 none up+0 down+0 keep +0.000s T0
             u2 t1 p0@0 none up+0 down+0 keep +1.000s T1
             restart T1
             u2 t1 p0@0 stopped up+0 down+0 keep +0.000s T0
             u2 t1 p0@0 none up+1 down+0 keep +0.000s T0",
        );
    }

    /// The same claim whose last step is an expiry (a batch held past the
    /// active TTL: a database outage): measured from the newer row to the
    /// expiry, which credits nothing, it loses the download reported in
    /// between.
    #[test]
    fn an_expiry_ending_a_claim_covered_by_a_newer_row_loses_its_download() {
        holds(
            Mode::Failover,
            "u3 t1 p0@0 none up+0 down+0 keep +0.000s T1
             gap TTL+0s
             u3 t1 p0@0 none up+0 down+0 keep +0.000s T0
             expire T1
             u3 t1 p0@0 none up+0 down+1 keep +0.000s T1
             gap TTL+1s
             expire T1",
        );
    }

    /// The same claim where the download rises and then goes back (a
    /// client restarted within the batch): measured from the newer row to
    /// the last step, the download reported before the reset is never
    /// charged.
    #[test]
    fn a_download_reset_within_a_claim_covered_by_a_newer_row_is_never_charged() {
        holds(
            Mode::Failover,
            "u3 t2 p0@0 none up+0 down+0 keep +0.000s T1
             gap TTL+0s
             u3 t2 p0@0 none up+0 down+0 keep +0.000s T0
             expire T1
             u3 t2 p0@0 none up+0 down+1 keep +0.000s T1
             u3 t2 p0@0 none up+0 down-1 keep +0.000s T1",
        );
    }

    /// A peer reports a download to tracker 1, then a reset total to
    /// tracker 0 within one flush interval. Tracker 0's row is later, so
    /// tracker 1's claim is superseded; tracker 0 never saw the download,
    /// so nobody charges it: a client that alternates trackers and
    /// restarts downloads that much free.
    #[test]
    fn a_download_superseded_by_the_other_trackers_reset_is_never_charged() {
        holds(
            Mode::Any,
            "u1 t2 p0@0 none up+0 down+0 keep +0.000s T0
             flush T0
             u1 t2 p0@0 none up+0 down+1 keep +0.000s T1
             u1 t2 p0@0 none up+0 down-1 keep +0.000s T0
             u1 t2 p0@0 none up+0 down+0 keep +1.000s T0",
        );
    }
}

/// Sequences where ours credits more upload than UNIT3D-Announce by a
/// documented rule: the properties pass them by the rule's name, and
/// these show that they do and that the rule is what they need.
mod documented {
    use super::*;

    /// Runs `sequence` to its end: the property's verdict, and (ours,
    /// UNIT3D-Announce's) upload credited to `user` on `torrent`.
    fn uploads(mode: Mode, sequence: &str, pair: (UserId, TorrentId)) -> (bool, u64, u64) {
        let mut run = Run::new(mode, None);
        for event in parse(sequence) {
            run.apply(event).unwrap();
        }
        run.finish();
        let ours = run.db.history.get(&pair).map_or(0, |h| h.uploaded);
        let model = run.model.db.history.get(&pair).map_or(0, |h| h.uploaded);
        (run.check_bytes().is_ok(), ours, model)
    }

    /// A peer new to both trackers stops at the one that did not see its
    /// start, which finds no row and writes nothing; or stops and starts
    /// again at one while the other, flushing first, credits the new
    /// session from the row before the stop. Either way the stop is not
    /// known where the session's next announce is credited: the upload is
    /// credited as the session going on (UNIT3D-Announce, one process,
    /// credits a new session's first announce nothing).
    #[test]
    fn a_stop_or_restart_one_tracker_saw_is_unknown_to_the_other() {
        let no_row = "u2 t2 p1@0 none up+0 down+0 keep +0.000s T0
                      u2 t2 p1@0 stopped up+0 down+0 keep +0.000s T1
                      u2 t2 p1@0 none up+1 down+0 keep +0.000s T0";
        assert_eq!(uploads(Mode::Any, no_row, (2, 2)), (true, 2, 0));
        let flushed_first = "u3 t1 p1@0 none up+0 down+0 keep +0.000s T1
                             flush T1
                             u3 t1 p1@0 stopped up+0 down+0 keep +0.000s T1
                             u3 t1 p1@0 none up+1 down+0 keep +0.000s T1
                             u3 t1 p1@0 none up+0 down+0 keep +0.000s T0";
        assert_eq!(uploads(Mode::Any, flushed_first, (3, 1)), (true, 1, 0));
    }

    /// Tracker 0 sees a peer's download go back (a restart: no upload
    /// credited); tracker 1, within the same flush interval, measures the
    /// peer's next announce from the row before the restart, where both
    /// counters grew: the upload is credited as the session going on
    /// (UNIT3D-Announce, one process, credits none across the restart).
    /// The same with the restart on the tracker that did not see the
    /// peer's start.
    #[test]
    fn a_restart_one_tracker_saw_is_unknown_to_the_other() {
        let flushed = "u1 t1 p0@0 none up+0 down+1 keep +0.000s T0
                       flush T0
                       u1 t1 p0@0 none up+1 down-1 keep +0.000s T0
                       u1 t1 p0@0 none up+0 down+1 keep +0.000s T1
                       flush T1";
        let (holds, ours, model) = uploads(Mode::Any, flushed, (1, 1));
        assert!(holds && ours > model, "{ours} against {model}");
        let unflushed = "u2 t2 p0@0 none up+0 down+1 keep +0.000s T0
                         u2 t2 p0@0 none up+1 down-1 keep +0.000s T1
                         u2 t2 p0@0 none up+0 down+1 keep +0.000s T0";
        let (holds, ours, model) = uploads(Mode::Any, unflushed, (2, 2));
        assert!(holds && ours >= model, "{ours} against {model}");
    }

    /// kill -9 after a stop: the row still says the peer is active, and
    /// the next session goes on from it.
    #[test]
    fn a_crash_may_lose_a_stop() {
        let crash = "u1 t1 p0@0 none up+0 down+0 keep +0.000s T0
                     flush T0
                     u1 t1 p0@0 stopped up+0 down+0 keep +0.000s T0
                     crash T0
                     u1 t1 p0@0 none up+1G0 down+0 keep +0.000s T0";
        assert_eq!(uploads(Mode::Any, crash, (1, 1)), (true, 1 << 30, 0));
    }
}

/// Where ours and UNIT3D-Announce admit or hide peers differently, on
/// purpose or by UNIT3D-Announce's slips: kept out of the random
/// sequences (two peer ids per user and torrent never reach the limits),
/// shown here.
mod admission {
    use super::*;

    struct Both {
        site: Site,
        ours: Ours,
        model: Unit3dModel,
    }

    impl Both {
        fn new(records: SiteRecords) -> Both {
            let config = LedgerConfig::default();
            Both {
                site: Site::from_records(records.clone(), GlobalFactors::default()),
                ours: Ours::new(config),
                model: Unit3dModel::new(&records, model_config(&config)),
            }
        }

        /// (ours admitted and hidden, UNIT3D-Announce admitted and hidden).
        fn announce(&mut self, a: &PrivateAnnounce) -> (Option<bool>, Option<bool>) {
            let now = 2_000 * MICROS;
            let ours = self
                .ours
                .ledger
                .announce(&self.site, a, now, &mut AnswerPeers::default());
            let model = self.model.announce(&model_announce(a), now);
            (ours.ok().map(|o| o.hidden), model.ok().map(|m| !m.visible))
        }
    }

    fn leecher(user: UserId, torrent: TorrentId, n: u8) -> PrivateAnnounce {
        testing::announce(user, torrent, n)
    }

    /// UNIT3D-Announce counts a new visible peer among the user's peers
    /// before it checks `MAX_PEERS_PER_TORRENT_PER_USER`: with 3 it admits
    /// 2 visible peers. Ours admits 3.
    #[test]
    fn unit3d_announce_admits_one_visible_peer_fewer_than_its_limit() {
        let mut both = Both::new(records(None));
        assert_eq!(both.announce(&leecher(1, 1, 0)), (Some(false), Some(false)));
        assert_eq!(both.announce(&leecher(1, 1, 1)), (Some(false), Some(false)));
        assert_eq!(both.announce(&leecher(1, 1, 2)), (Some(false), None));
        assert_eq!(both.announce(&leecher(1, 1, 3)), (None, None));
    }

    /// Past its download slots, a user's new leechers are hidden by both;
    /// UNIT3D-Announce counts hidden peers toward no limit and admits any
    /// number of them, ours bounds them by the same limit apart.
    #[test]
    fn hidden_peers_are_bounded_by_ours_alone() {
        let mut both = Both::new(records(None));
        // User 2 has one slot: torrent 1's leecher takes it.
        assert_eq!(both.announce(&leecher(2, 1, 0)), (Some(false), Some(false)));
        for n in 0..3 {
            assert_eq!(both.announce(&leecher(2, 2, n)), (Some(true), Some(true)));
        }
        assert_eq!(both.announce(&leecher(2, 2, 3)), (None, Some(true)));
    }

    /// A visible seeder announcing as a leecher: UNIT3D-Announce keeps it
    /// visible whatever the user's slots (it reads the peer's old
    /// visibility with its new seeding flag), ours takes a slot for it and
    /// hides it past them, so that seeding first does not pass the slots.
    #[test]
    fn a_seeder_turning_leecher_passes_the_slots_of_unit3d_announce_only() {
        let mut both = Both::new(records(None));
        assert_eq!(both.announce(&leecher(2, 1, 0)), (Some(false), Some(false)));
        let mut seeder = leecher(2, 2, 0);
        seeder.left = 0;
        assert_eq!(both.announce(&seeder), (Some(false), Some(false)));
        seeder.left = 100;
        seeder.event = AnnounceEvent::None;
        assert_eq!(both.announce(&seeder), (Some(true), Some(false)));
        assert_eq!(both.model.user_counts(2), (0, 2));
    }
}
