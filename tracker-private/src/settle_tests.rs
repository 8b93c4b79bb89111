//! Two trackers sharing one database: the failover sequences of the
//! private-mode audit, and random interleavings of announces, flushes,
//! restarts, crashes and failovers checked against a model of one tracker
//! seeing every announce in order.

use super::*;
use crate::batch::CreditRules;
use crate::ledger::{Ledger, LedgerConfig, PrivateAnnounce};
use crate::rules::GlobalFactors;
use crate::site::{Site, Torrent};
use crate::testing::{self, announce, peer, torrent, Admit, MemoryDb};
use proptest::prelude::*;
use std::collections::BTreeMap;
use tracker_proto::AnnounceEvent;

/// One tracker of two: its ledger, and what it took from it but has not
/// flushed yet (the database thread's).
struct Tracker {
    ledger: Ledger,
    held: Batch,
}

impl Tracker {
    fn new(config: LedgerConfig) -> Tracker {
        Tracker {
            ledger: Ledger::new(config),
            held: Batch::default(),
        }
    }

    /// The workers hand their batch to the database thread.
    fn take(&mut self) {
        let rules = self.ledger.config().credit_rules();
        let batch = self.ledger.take_batch();
        self.held.merge(batch, &rules);
    }

    fn flush(&mut self, db: &mut MemoryDb) -> Settled {
        self.take();
        let rules = self.ledger.config().credit_rules();
        db.flush(&std::mem::take(&mut self.held), &rules)
    }

    /// A new process: the rows active within the TTL restored. (The binary
    /// restores every active row and its first flush expires those older:
    /// here they are left out, as if that flush had come.)
    fn start(config: LedgerConfig, db: &MemoryDb, now_secs: u64) -> Tracker {
        let mut tracker = Tracker::new(config);
        let since = now_secs.saturating_sub(config.active_peer_ttl);
        for (key, row) in &db.peers {
            if row.active && row.updated_at >= since {
                tracker.ledger.restore(*key, row);
            }
        }
        tracker
    }
}

fn at(secs: u64) -> u64 {
    secs * 1_000_000
}

fn site() -> Site {
    let mut records = testing::records();
    // Torrent 2 credits double upload and no download: the factors apply
    // per announce, where the model applies them.
    records.torrents.retain(|t| t.id != 2);
    records.torrents.push(Torrent {
        upload_factor: 200,
        download_factor: 0,
        ..torrent(2)
    });
    Site::from_records(records, GlobalFactors::default())
}

fn regular(a: &mut PrivateAnnounce, up: u64, down: u64) {
    a.event = AnnounceEvent::None;
    a.uploaded += up;
    a.downloaded += down;
}

/// The audit's failover: a client announces to A; B restarts and reads the
/// peers; the client reports 5000 to A; the address moves; it reports 6000
/// to B. 6000 credited, whichever tracker flushes first.
#[test]
fn a_failover_credits_each_byte_once_in_either_flush_order() {
    for b_flushes_first in [false, true] {
        let site = site();
        let config = LedgerConfig::default();
        let mut db = MemoryDb::default();
        let mut a = Tracker::new(config);
        let mut client = announce(1, 1, 1);
        a.ledger.admit(&site, &client, at(100)).unwrap();
        a.flush(&mut db);
        let mut b = Tracker::start(config, &db, 200);
        regular(&mut client, 5000, 0);
        a.ledger.admit(&site, &client, at(300)).unwrap();
        if !b_flushes_first {
            a.flush(&mut db);
        }
        regular(&mut client, 1000, 0);
        b.ledger.admit(&site, &client, at(400)).unwrap();
        b.flush(&mut db);
        a.flush(&mut db);
        assert_eq!(db.users[&1].uploaded, 6000, "b first: {b_flushes_first}");
        assert_eq!(db.history[&(1, 1)].actual_uploaded, 6000);
        let row = db.peers[&PeerKey {
            user_id: 1,
            torrent_id: 1,
            peer_id: peer(1),
        }];
        assert_eq!(
            (row.uploaded, row.updated_at),
            (6000, 400),
            "never rolled back"
        );
        assert_eq!((db.torrents[&1].seeders, db.torrents[&1].leechers), (0, 1));
    }
}

/// B expires the peers it read from A at its start while A still serves
/// them: the counts stay those of the visible rows, never below zero.
#[test]
fn stale_peers_expired_by_the_other_tracker_leave_the_counts_right() {
    let site = site();
    let config = LedgerConfig::default();
    let mut db = MemoryDb::default();
    let mut a = Tracker::new(config);
    let mut seeder = announce(1, 1, 1);
    seeder.left = 0;
    let mut leecher = announce(2, 1, 2);
    a.ledger.admit(&site, &seeder, at(100)).unwrap();
    a.ledger.admit(&site, &leecher, at(100)).unwrap();
    a.flush(&mut db);
    let mut b = Tracker::start(config, &db, 150);
    for hour in 1..=5 {
        let now = 100 + hour * 3600;
        regular(&mut seeder, 0, 0);
        regular(&mut leecher, 0, 10);
        a.ledger.admit(&site, &seeder, at(now)).unwrap();
        a.ledger.admit(&site, &leecher, at(now)).unwrap();
        a.flush(&mut db);
        b.ledger.expire(now + 1);
        b.flush(&mut db);
        assert_eq!((db.torrents[&1].seeders, db.torrents[&1].leechers), (1, 1));
        assert_eq!(db.visible(1), (1, 1));
    }
    // Both stop: nothing left, and nothing negative.
    seeder.event = AnnounceEvent::Stopped;
    leecher.event = AnnounceEvent::Stopped;
    a.ledger.admit(&site, &seeder, at(20_000)).unwrap();
    a.ledger.admit(&site, &leecher, at(20_000)).unwrap();
    a.flush(&mut db);
    b.ledger.expire(40_000);
    b.flush(&mut db);
    assert_eq!((db.torrents[&1].seeders, db.torrents[&1].leechers), (0, 0));
}

/// A tracker down longer than the active TTL: the peers that come back are
/// credited every byte of the gap from their rows.
#[test]
fn a_tracker_down_past_the_ttl_loses_no_bytes() {
    let site = site();
    let config = LedgerConfig::default();
    let mut db = MemoryDb::default();
    let mut tracker = Tracker::new(config);
    let mut client = announce(1, 1, 1);
    tracker.ledger.admit(&site, &client, at(100)).unwrap();
    regular(&mut client, 700, 300);
    tracker.ledger.admit(&site, &client, at(1900)).unwrap();
    tracker.flush(&mut db);
    // Down for three hours: the new process restores nothing.
    let mut tracker = Tracker::start(config, &db, 1900 + 3 * 3600);
    assert_eq!(tracker.ledger.accounts(), 0);
    regular(&mut client, 5000, 2000);
    let back = tracker
        .ledger
        .admit(&site, &client, at(1900 + 3 * 3600))
        .unwrap();
    assert!(back.new_peer);
    tracker.flush(&mut db);
    assert_eq!(
        (db.users[&1].uploaded, db.users[&1].downloaded),
        (5700, 2300)
    );
}

/// What a peer does in one step of a random run.
#[derive(Clone, Copy, Debug)]
enum Move {
    /// Totals grow; left stays.
    Announce,
    /// Totals grow, and it seeds from now on.
    Seed,
    /// Totals grow, and it leeches again (a client rechecking, or lying).
    Leech,
    Stop,
    /// A new client session: totals from zero.
    Start,
}

#[derive(Clone, Copy, Debug)]
enum Event {
    Announce {
        peer: u8,
        tracker: usize,
        up: u16,
        down: u16,
        secs: u16,
        ms: u16,
        what: Move,
    },
    /// The workers hand their batches to the database thread.
    Take(usize),
    Flush(usize),
    /// Stopped (everything flushed), started again.
    Restart(usize),
    /// Killed: what it held unflushed is lost.
    Crash(usize),
    Expire(usize),
}

fn arb_event(crashes: bool) -> impl Strategy<Value = Event> {
    let announce = (
        0u8..8,
        0usize..2,
        any::<u16>(),
        any::<u16>(),
        0u16..4000,
        0u16..1000,
        prop_oneof![
            6 => Just(Move::Announce),
            2 => Just(Move::Seed),
            1 => Just(Move::Leech),
            1 => Just(Move::Stop),
            1 => Just(Move::Start),
        ],
    )
        .prop_map(
            |(peer, tracker, up, down, secs, ms, what)| Event::Announce {
                peer,
                tracker,
                up,
                down,
                secs,
                ms,
                what,
            },
        );
    let tracker = 0usize..2;
    let other = if crashes {
        prop_oneof![
            tracker.clone().prop_map(Event::Take),
            tracker.clone().prop_map(Event::Flush),
            tracker.clone().prop_map(Event::Restart),
            tracker.clone().prop_map(Event::Crash),
            tracker.prop_map(Event::Expire),
        ]
        .boxed()
    } else {
        prop_oneof![
            tracker.clone().prop_map(Event::Take),
            tracker.clone().prop_map(Event::Flush),
            tracker.prop_map(Event::Restart),
        ]
        .boxed()
    };
    prop_oneof![4 => announce, 1 => other]
}

/// One peer as the model sees it: its announces in the order they
/// happened, whichever tracker took them.
#[derive(Clone, Copy, Default)]
struct ModelPeer {
    /// Its previous announce in this session: totals, seeding, active.
    last: Option<(u64, u64, bool, bool, u64)>,
}

/// What one tracker seeing every announce in order would credit, by this
/// tracker's rules per announce.
#[derive(Default)]
struct Model {
    peers: BTreeMap<u8, ModelPeer>,
    /// Per user: credited up, down; raw up, down; seedtime.
    users: BTreeMap<u32, [u64; 5]>,
    /// The same, but an upload after a stop continues the stopped session:
    /// what every byte reported comes to, counted once. Two trackers that
    /// both see a peer within one flush interval may not know of each
    /// other's stop (nor may a tracker that lost the stop in a crash).
    continued: BTreeMap<u32, [u64; 5]>,
    completed: std::collections::BTreeSet<(u32, u32)>,
}

struct Run {
    site: Site,
    config: LedgerConfig,
    db: MemoryDb,
    trackers: [Tracker; 2],
    clients: BTreeMap<u8, PrivateAnnounce>,
    /// The tracker each peer announced to last.
    last_tracker: BTreeMap<u8, usize>,
    /// Users with a peer that announced to a tracker that did not know it,
    /// where the database had no row of it yet while the other tracker had
    /// seen it: a session new to both within one flush interval, which
    /// each may charge as a session nobody recorded.
    new_to_both: std::collections::BTreeSet<u32>,
    /// The trackers each peer announced to.
    seen_by: BTreeMap<u8, std::collections::BTreeSet<usize>>,
    /// Users with a peer that restarted (its totals back) after announcing
    /// to both trackers: the other's view of it may be stale, and the
    /// download the restart reports charged by both.
    restart_across: std::collections::BTreeSet<u32>,
    now_us: u64,
    model: Model,
    /// A tracker's announces are flushed before its peers move to the
    /// other: the failover of keepalived, where the old tracker is alive.
    ordered: bool,
}

fn user_and_torrent(p: u8) -> (u32, u32) {
    (u32::from(p % 2) + 1, u32::from(p / 2 % 2) + 1)
}

impl Run {
    fn new(ordered: bool) -> Run {
        let config = LedgerConfig::default();
        Run {
            site: site(),
            config,
            db: MemoryDb::default(),
            trackers: [Tracker::new(config), Tracker::new(config)],
            clients: BTreeMap::new(),
            last_tracker: BTreeMap::new(),
            new_to_both: std::collections::BTreeSet::new(),
            seen_by: BTreeMap::new(),
            restart_across: std::collections::BTreeSet::new(),
            now_us: at(1_000_000),
            model: Model::default(),
            ordered,
        }
    }

    fn check_counts(&self) {
        for torrent in [1, 2] {
            let held = self.db.torrents.get(&torrent).copied().unwrap_or_default();
            let visible = self.db.visible(torrent);
            assert_eq!((held.seeders, held.leechers), visible, "torrent {torrent}");
        }
    }

    fn apply(&mut self, event: Event) {
        match event {
            Event::Announce {
                peer: p,
                tracker,
                up,
                down,
                secs,
                ms,
                what,
            } => self.announce(p, tracker, up, down, secs, ms, what),
            Event::Take(t) => self.trackers[t].take(),
            Event::Flush(t) => {
                self.trackers[t].flush(&mut self.db);
            }
            Event::Restart(t) => {
                self.trackers[t].flush(&mut self.db);
                self.trackers[t] = Tracker::start(self.config, &self.db, self.now_us / 1_000_000);
            }
            Event::Crash(t) => {
                self.trackers[t] = Tracker::start(self.config, &self.db, self.now_us / 1_000_000);
            }
            Event::Expire(t) => {
                self.trackers[t].ledger.expire(self.now_us / 1_000_000);
            }
        }
        self.check_counts();
    }

    #[allow(clippy::too_many_arguments)]
    fn announce(
        &mut self,
        p: u8,
        tracker: usize,
        up: u16,
        down: u16,
        secs: u16,
        ms: u16,
        what: Move,
    ) {
        if let Some(&last) = self.last_tracker.get(&p).filter(|&&last| last != tracker) {
            // The peer moves to the other tracker a second later at least:
            // within one second the database's times cannot order two
            // trackers' announces of a peer (docs' "Two trackers on one
            // database"). Keepalived's failover also flushes the old
            // tracker first (its adverts are a second apart).
            if self.ordered {
                self.trackers[last].flush(&mut self.db);
            }
            self.now_us += 1_000_000;
        }
        let (user, torrent) = user_and_torrent(p);
        let key = PeerKey {
            user_id: user,
            torrent_id: torrent,
            peer_id: peer(p),
        };
        if self
            .last_tracker
            .get(&p)
            .is_some_and(|&last| last != tracker)
            && !self.db.peers.contains_key(&key)
        {
            self.new_to_both.insert(user);
        }
        self.last_tracker.insert(p, tracker);
        let seen = self.seen_by.entry(p).or_default();
        seen.insert(tracker);
        if matches!(what, Move::Start) && seen.len() > 1 {
            self.restart_across.insert(user);
        }
        self.now_us += u64::from(secs) * 1_000_000 + u64::from(ms) * 1000 + 1;
        let (user, torrent) = user_and_torrent(p);
        let client = self.clients.entry(p).or_insert_with(|| {
            let mut a = announce(user, torrent, p);
            a.left = 100;
            a
        });
        let (up, down) = (u64::from(up), u64::from(down));
        // A peer's first announce starts its session at zero, as a client's
        // does (a session's first announce nobody recorded is charged past
        // the pair's last report, which depends on when the pair's other
        // peers were flushed: tested apart).
        let what = if self.model.peers.contains_key(&p) {
            what
        } else {
            Move::Start
        };
        match what {
            Move::Start => {
                // A new session's first announce: nothing moved yet.
                client.event = AnnounceEvent::Started;
                client.uploaded = 0;
                client.downloaded = 0;
            }
            Move::Stop => {
                client.event = AnnounceEvent::Stopped;
                client.uploaded += up;
                client.downloaded += down;
            }
            Move::Announce | Move::Seed | Move::Leech => {
                client.event = AnnounceEvent::None;
                client.uploaded += up;
                client.downloaded += down;
                client.left = match what {
                    Move::Seed => 0,
                    Move::Leech => 100,
                    _ => client.left,
                };
            }
        }
        let a = *client;
        self.trackers[tracker]
            .ledger
            .admit(&self.site, &a, self.now_us)
            .unwrap();
        self.model_announce(p, &a, what);
    }

    fn model_announce(&mut self, p: u8, a: &PrivateAnnounce, what: Move) {
        let (user, torrent) = user_and_torrent(p);
        let now = self.now_us / 1_000_000;
        let seeder = a.left == 0;
        let stop = matches!(what, Move::Stop);
        let peer = self.model.peers.entry(p).or_default();
        let previous = peer.last;
        peer.last = Some((a.uploaded, a.downloaded, seeder, !stop, now));

        // Every peer's first announce is a session's start at zero (see
        // `announce`): it credits nothing.
        let Some((up0, down0, was_seeder, was_active, then)) = previous else {
            return;
        };
        // After a stop, a new session for the upload; the download goes on.
        // A total back is a restart: the download charged its new total if
        // it went back, and no upload credited.
        // A total back is a restart: no upload.
        let restarted = a.uploaded < up0 || a.downloaded < down0;
        let continued = if restarted { 0 } else { a.uploaded - up0 };
        let up = if was_active { continued } else { 0 };
        let down = a.downloaded.checked_sub(down0).unwrap_or(a.downloaded);
        let (up_factor, down_factor) = if torrent == 2 { (200, 0) } else { (100, 100) };
        let totals = self.model.users.entry(user).or_default();
        totals[0] += up * up_factor / 100;
        totals[1] += down * down_factor / 100;
        totals[2] += up;
        totals[3] += down;
        if was_active && was_seeder && seeder {
            totals[4] += now.saturating_sub(then).min(self.config.active_peer_ttl);
        }
        let totals = self.model.continued.entry(user).or_default();
        totals[0] += continued * up_factor / 100;
        totals[1] += down * down_factor / 100;
        totals[2] += continued;
        totals[3] += down;
        if !stop && was_active && seeder && !was_seeder {
            self.model.completed.insert((user, torrent));
        }
    }

    fn finish(&mut self) {
        for t in 0..2 {
            self.trackers[t].flush(&mut self.db);
        }
        self.check_counts();
    }

    /// Per user: credited up, down; raw up, down; seedtime.
    fn credited(&self, user: u32) -> [u64; 5] {
        let (up, down) = self
            .db
            .users
            .get(&user)
            .map_or((0, 0), |u| (u.uploaded, u.downloaded));
        let mut out = [up, down, 0, 0, 0];
        for ((u, _), h) in &self.db.history {
            if *u == user {
                out[2] += h.actual_uploaded;
                out[3] += h.actual_downloaded;
                out[4] += h.seedtime;
            }
        }
        out
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    /// Failovers where the tracker a peer leaves has flushed (keepalived
    /// moving the address off a live tracker, a second at least), with
    /// restarts and flushes anywhere: every total exactly what one tracker
    /// seeing every announce in order credits, and the counts those of the
    /// rows.
    #[test]
    fn two_trackers_credit_exactly_what_one_would(
        events in proptest::collection::vec(arb_event(false), 1..80),
    ) {
        let mut run = Run::new(true);
        for event in events {
            run.apply(event);
        }
        run.finish();
        for user in [1, 2] {
            let expected = run.model.users.get(&user).copied().unwrap_or_default();
            let got = run.credited(user);
            prop_assert_eq!(&got[..4], &expected[..4], "user {}", user);
            // Seedtime: a user's peers seeding at once count once on each
            // tracker (a tracker's stale view of a peer the other stopped
            // may take the time from its peers beside it there): never more
            // than each peer's own.
            prop_assert!(
                got[4] <= expected[4],
                "user {}: seedtime {} > {}",
                user,
                got[4],
                expected[4]
            );
        }
        for torrent in [1u32, 2] {
            let completed = (1..=2u32).filter(|&u| run.model.completed.contains(&(u, torrent))).count();
            let held = run.db.torrents.get(&torrent).map_or(0, |t| t.times_completed);
            prop_assert_eq!(held, completed as u64, "torrent {}", torrent);
        }
    }

    /// Any interleaving at all (flushes landing out of order, crashes
    /// losing what was held, expiry of peers the other tracker serves):
    /// no byte credited twice (never more than every byte reported, counted
    /// once: an upload after a stop or a restart that the crediting tracker
    /// did not see may continue its session), and the counts always those
    /// of the rows, never below zero. Docs' "Two trackers on one
    /// database": a session new to both trackers within one flush interval,
    /// or a restart one tracker saw while the other's view was stale, may
    /// be charged its download by each (in the site's favour): such a
    /// user's download is not held to it. (Seedtime is left out: a tracker
    /// measuring from a row older than a stop the other has not flushed
    /// yet counts the seconds up to that flush as seeded.)
    #[test]
    fn two_trackers_never_credit_twice(
        events in proptest::collection::vec(arb_event(true), 1..80),
    ) {
        let mut run = Run::new(false);
        for event in events {
            run.apply(event);
        }
        run.finish();
        for user in [1, 2] {
            let expected = run.model.continued.get(&user).copied().unwrap_or_default();
            let got = run.credited(user);
            let charged_by_both =
                run.new_to_both.contains(&user) || run.restart_across.contains(&user);
            for (i, (got, expected)) in got.iter().zip(expected).enumerate().take(4) {
                if charged_by_both && (i == 1 || i == 3) {
                    continue;
                }
                prop_assert!(*got <= expected, "user {} field {}: {} > {}", user, i, got, expected);
            }
        }
        for torrent in [1u32, 2] {
            let held = run.db.torrents.get(&torrent).copied().unwrap_or_default();
            prop_assert!(held.seeders >= 0 && held.leechers >= 0);
            prop_assert!(held.times_completed <= 2);
        }
    }
}

#[test]
fn rules_default_to_unit3d_announces() {
    let rules = CreditRules::default();
    assert_eq!(
        (rules.max_seedtime_step, rules.inactive_peer_ttl),
        (7200, 1_814_400)
    );
}
