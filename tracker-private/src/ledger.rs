//! One worker's accounting for the torrents it owns: each peer's last
//! announce, the checks and limits of the next one (UNIT3D-Announce's
//! rules), and the claims and history marks the next flush settles
//! against the database ([`crate::settle`]).
//!
//! Differences from UNIT3D-Announce, on purpose:
//! - What an announce credits is decided at the flush, from the peer's row
//!   as the database holds it, so that trackers sharing a database credit
//!   each byte once, and a peer back after a silence (or a tracker
//!   outage) longer than the active TTL is credited from its last row, for
//!   up to the inactive TTL, with no memory held here for it meanwhile.
//! - Seedtime is counted per announce, between two announces of a seeder,
//!   capped at the active peer TTL (a seeder silent for longer is not
//!   counted as having seeded all that time).
//! - A peer not seen for the active TTL is forgotten here and its row made
//!   inactive (unless a newer one is stored).
//! - A user's own peers are never in its peer lists, and one peer id is one
//!   peer whatever ports and addresses it announces from (its latest):
//!   the swarm is the ledger's accounts (see [`crate::account`]), as
//!   UNIT3D-Announce's is its peers by user and peer id.
//! - Download slots and peer-list limits count each user across every
//!   worker, in tables the ledgers share ([`crate::slots`],
//!   [`crate::lists`]); a slot is taken atomically, so no number of
//!   workers admitting one user's leechers at once passes it.
//! - An optional upload-rate bound flags announces whose upload implies
//!   more than `max_upload_rate` bytes per second over the time since the
//!   peer's previous announce (microseconds), after the uploads already
//!   credited to the user's other peers on the torrent (UNIT3D-Announce has
//!   no such setting).
//!
//! Memory: one account per admitted peer. The caller bounds how many peers
//! it admits (its swarm store's limits); an account is dropped on
//! `stopped` and by [`Ledger::expire_some`].

use crate::account::{Account, Pick, Swarm};
use crate::admission::{Admission, SiteRules};
pub use crate::announce::{LedgerConfig, PrivateAnnounce};
use crate::batch::{
    reported, within_upload_bound, Batch, Claim, HistoryMark, PeerEntry, PeerKey, PeerRow, Point,
    PointState, Step, StepKind, UnregisteredRow, MICROS,
};
use crate::lists::{ListKind, ListRates};
use crate::quota::UnregisteredQuota;
use crate::refusal::Refusal;
use crate::rules::Factors;
use crate::site::{TorrentId, UserId};
use crate::slots::LeechingCounts;
use ahash::AHashMap;
use std::collections::BTreeSet;
use std::sync::Arc;
use tracker_proto::{AnnounceEvent, AnswerPeers, IpFamily};

/// An admitted announce: what the caller needs to answer it and count it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admitted {
    pub user_id: UserId,
    pub torrent_id: TorrentId,
    /// The torrent's visible seeders and leechers after this announce,
    /// the user's own included (UNIT3D-Announce's `complete` and
    /// `incomplete`).
    pub seeders: u32,
    pub leechers: u32,
    /// A leecher past its user's download slots (its group's): accounted,
    /// not listed nor counted, handed no peers; the caller answers
    /// UNIT3D-Announce's warning.
    pub hidden: bool,
    /// What a hidden leecher is told (the site's words).
    pub slot_refusal: Refusal,
    /// The first announce of this peer here (its credit, if any, is
    /// measured at the flush from its row in the database).
    pub new_peer: bool,
    pub seeder: bool,
    /// The peer went from leecher to seeder here (the first time).
    pub completed: bool,
    /// The torrent's completions: the site's figure when it was read, and
    /// this ledger's snatches since (the answer's `downloaded`).
    pub times_completed: u32,
    /// The upload exceeded `max_upload_rate`: not credited.
    pub flagged: bool,
    /// It came sooner than `min_announce_interval` after the peer's
    /// previous one: accounted, but the caller answers no peers and zero
    /// counts (UNIT3D-Announce's silent "Rate limit exceeded").
    pub too_soon: bool,
    /// The user has received as many seed lists as its limits allow: the
    /// answer carries no seeders, and `complete` 0 (UNIT3D-Announce's
    /// peer-list limits, see [`crate::lists`]).
    pub seed_list_refused: bool,
    /// The same for leechers, and `incomplete`.
    pub leech_list_refused: bool,
}

/// A peer as the ledger knows it, for the site API's torrent answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerSnapshot {
    pub key: PeerKey,
    pub row: PeerRow,
    pub has_sent_completed: bool,
}

/// One worker's accounts and the claims they made since the last
/// [`Ledger::take_batch`].
#[derive(Debug, Default)]
pub struct Ledger {
    config: LedgerConfig,
    swarms: AHashMap<TorrentId, Swarm>,
    /// Accounts by last announce, oldest first, for expiry.
    by_time: BTreeSet<(u64, PeerKey)>,
    batch: Batch,
    accounts: usize,
    /// Visible seeders and leechers on every torrent here (the metrics').
    listed: (u64, u64),
    flagged: u64,
    /// Unregistered info-hash rows dropped past
    /// `max_unregistered_per_batch`, since start.
    unregistered_dropped: u64,
    /// Snatches counted here since start, by torrent (for the site API).
    snatches: AHashMap<TorrentId, u32>,
    /// Every user's leeching peers, shared by all the workers' ledgers;
    /// None: download slots are not enforced.
    slots: Option<Arc<LeechingCounts>>,
    /// Every user's peer lists received, shared likewise; None: no limit.
    lists: Option<Arc<ListRates>>,
    /// Every user's unregistered info-hashes noted this hour, shared
    /// likewise; None: no limit per user.
    quota: Option<Arc<UnregisteredQuota>>,
    /// Where peer lists are read from next (xorshift64*).
    rng: u64,
}

/// What an announce does to a user's leeching count.
#[derive(Clone, Copy)]
enum Slot {
    Keep,
    Take,
    Give,
}

impl Ledger {
    pub fn new(config: LedgerConfig) -> Ledger {
        Ledger {
            config,
            rng: 0x9e37_79b9_7f4a_7c15,
            ..Ledger::default()
        }
    }

    /// Seeds where peer lists are read from (any value; each worker its
    /// own, so that they do not hand out the same windows).
    pub fn with_seed(mut self, seed: u64) -> Ledger {
        self.rng = seed | 1;
        self
    }

    fn next_random(&mut self) -> u64 {
        let mut x = self.rng.max(1);
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    /// Enforces the groups' download slots, counting each user's leeching
    /// peers in `counts` (the same for every worker's ledger).
    pub fn with_slots(mut self, counts: Arc<LeechingCounts>) -> Ledger {
        self.slots = Some(counts);
        self
    }

    /// Limits the peer lists each user receives, counting them in `rates`
    /// (the same for every worker's ledger).
    pub fn with_lists(mut self, rates: Arc<ListRates>) -> Ledger {
        self.lists = Some(rates);
        self
    }

    /// Limits the unregistered info-hashes noted per user and hour,
    /// counting them in `quota` (the same for every worker's ledger).
    pub fn with_quota(mut self, quota: Arc<UnregisteredQuota>) -> Ledger {
        self.quota = Some(quota);
        self
    }

    pub fn config(&self) -> &LedgerConfig {
        &self.config
    }

    /// Checks and accounts one announce, at `now_us` (Unix microseconds),
    /// and writes the peers its answer carries to `peers` (of the
    /// announcer's address family, none of its user's own). A refused
    /// announce changes nothing, but that a known user's client announced a
    /// torrent the site does not serve (unknown or deleted) is noted for
    /// `unregistered_info_hashes`, as UNIT3D-Announce notes it.
    ///
    /// A stop of a peer this ledger does not know is admitted (the peer
    /// may be known to the database: another tracker's, or one silent past
    /// the active TTL), and credited at the flush from its row, if the
    /// database has one; it changes nothing here.
    pub fn announce(
        &mut self,
        site: &impl SiteRules,
        a: &PrivateAnnounce,
        now_us: u64,
        peers: &mut AnswerPeers,
    ) -> Result<Admitted, Refusal> {
        let family = IpFamily::of(a.ip);
        peers.reset(family);
        let now_secs = now_us / MICROS;
        let Admission {
            user: user_id,
            torrent: torrent_id,
            factors,
            immune,
            download_slots,
            slot_refusal,
            snatched,
        } = match site.admit(a) {
            Ok(admitted) => admitted,
            Err(refusal) => {
                if refusal.is_unregistered() {
                    self.note_unregistered(site, a, now_secs);
                }
                return Err(refusal);
            }
        };
        let key = PeerKey {
            user_id,
            torrent_id,
            peer_id: a.peer_id,
        };
        let stopped = a.event == AnnounceEvent::Stopped;
        let swarm = self.swarms.get(&torrent_id);
        let previous = swarm.and_then(|s| s.get(user_id, &a.peer_id)).copied();
        let listed_before = swarm.map_or((0, 0), |s| (s.seeders(), s.leechers()));
        let held = swarm.map(|s| s.user(user_id)).unwrap_or_default();
        let max = self.config.max_peers_per_torrent_per_user;
        if previous.is_none() && !stopped {
            // UNIT3D-Announce's limit counts the user's visible peers only.
            if held.visible >= max {
                return Err(Refusal::TooManyPeers { max });
            }
            if self.accounts >= self.config.max_peers
                || swarm.map_or(0, Swarm::len) >= self.config.max_peers_per_torrent
            {
                return Err(Refusal::TrackerFull);
            }
        }
        let seeder = a.left == 0;

        // Download slots: a new leecher past its user's slots is accounted
        // but hidden (UNIT3D-Announce stores it as not visible); one
        // already counted keeps its slot, a hidden one gets one once free.
        // Taken atomically: workers admitting one user's leechers at once
        // cannot pass the limit.
        let was_leeching = previous.is_some_and(|old| old.leeching());
        let wants_leeching = !stopped && !seeder;
        let slot = match (was_leeching, wants_leeching) {
            (false, true) => Slot::Take,
            (true, false) => Slot::Give,
            _ => Slot::Keep,
        };
        let mut hidden = false;
        if let (Some(counts), Slot::Take) = (&self.slots, slot) {
            if let Some(slots) = download_slots {
                hidden = !counts.try_take(user_id, slots);
            }
        }
        // Hidden leechers are bounded apart, by the same number: they hold
        // memory here as the visible ones do.
        let hidden_held =
            (held.hidden).saturating_sub(u16::from(previous.is_some_and(|old| old.hidden)));
        if hidden && hidden_held >= max {
            return Err(Refusal::TooManyPeers { max });
        }
        if let Some(counts) = &self.slots {
            match slot {
                // Taken above where the group has slots.
                Slot::Take if download_slots.is_none() => counts.change(user_id, true),
                Slot::Give => counts.change(user_id, false),
                _ => {}
            }
        }

        if let Some(old) = &previous {
            self.by_time.remove(&(old.last_seen(), key));
            self.accounts = self.accounts.saturating_sub(1);
        }
        let min_interval = self.config.min_announce_interval;
        let too_soon = previous.is_some_and(|old| {
            let first_completed = a.event == AnnounceEvent::Completed && !old.has_sent_completed;
            min_interval > 0
                && now_secs < old.last_seen().saturating_add(min_interval)
                && !first_completed
        });
        let created_at = previous.map_or(now_secs, |old| old.created_at);
        let has_sent_completed = previous.is_some_and(|old| old.has_sent_completed)
            || a.event == AnnounceEvent::Completed;
        // A leecher of this session announcing as a seeder (whatever its
        // event, as UNIT3D-Announce counts it).
        let completed =
            previous.is_some_and(|old| !stopped && seeder && !old.point.seeder && !old.completed);
        let already_completed = previous.is_some_and(|old| old.completed);
        let start = self.next_random();

        let point = Point {
            uploaded: a.uploaded,
            downloaded: a.downloaded,
            at_us: now_us,
            seeder,
            state: if stopped {
                PointState::Stopped
            } else {
                PointState::Active
            },
        };
        let kind = if stopped {
            StepKind::Stopped
        } else {
            StepKind::Announce
        };
        let swarm = self.swarms.entry(torrent_id).or_default();
        let mut flagged = false;
        let mut seeded_until_us = 0;
        let mut first_snatch = false;
        if let Some(old) = &previous {
            let on = swarm.users.entry(user_id).or_default();
            // The upload-rate bound, over the real time since the peer's
            // previous announce, after what the user's other peers on this
            // torrent were credited: announcing faster gains nothing.
            let uploaded = reported(&old.point, &point).0;
            let rate = self.config.max_upload_rate;
            if rate != 0 && uploaded != 0 {
                let start = on.upload_until_us.max(old.point.at_us);
                match within_upload_bound(start, uploaded, rate, now_us) {
                    Some(until) => on.upload_until_us = until,
                    None => flagged = true,
                }
            }
            // Seedtime once per user: a peer seeding beside another of its
            // user's counts from where that one's counting reached.
            if old.point.seeder && seeder {
                seeded_until_us = on.seeded_until_us;
                on.seeded_until_us = on.seeded_until_us.max(now_us);
            }
        }
        // A user's first completion here counts one snatch, however many of
        // its peers complete: a leecher turned seeder, or a seeder's
        // `completed` (as the flush counts `times_completed`).
        let completes = completed || (a.event == AnnounceEvent::Completed && seeder && !stopped);
        if completes {
            let on = swarm.users.entry(user_id).or_default();
            first_snatch = !std::mem::replace(&mut on.completed, true);
        }

        let account = Account {
            point,
            left: a.left,
            ip: a.ip,
            port: a.port,
            agent: a.agent,
            created_at,
            has_sent_completed,
            completed: completed || already_completed,
            hidden,
            slot: 0,
        };
        if stopped {
            if previous.is_some() {
                swarm.remove(user_id, &a.peer_id);
            }
            swarm.forget_user_if_gone(user_id);
        } else {
            swarm.put(user_id, a.peer_id, account, previous.is_some());
            self.by_time.insert((now_secs, key));
            self.accounts += 1;
        }
        let user_still_active = !stopped || swarm.user(user_id).peers() > 0;
        let (seeders, leechers) = (swarm.seeders(), swarm.leechers());
        self.listed = moved(self.listed, listed_before, (seeders, leechers));
        // Lists are counted as UNIT3D-Announce counts them: only for an
        // answer that carries peers at all (a peer staying, not held back,
        // on a torrent with leechers), a seed list for a leecher where
        // there are seeders, a leech list where there are other leechers.
        let answered = !stopped && !hidden && !too_soon && leechers > 0;
        let (mut seed_list_refused, mut leech_list_refused) = (false, false);
        if let Some(lists) = self.lists.as_deref().filter(|_| answered) {
            let others_leeching = leechers.saturating_sub(u32::from(!seeder));
            if !seeder && seeders > 0 {
                seed_list_refused = !lists.take(user_id, ListKind::Seeders, now_secs);
            }
            if others_leeching > 0 {
                leech_list_refused = !lists.take(user_id, ListKind::Leechers, now_secs);
            }
        }
        if answered {
            swarm.pick(
                Pick {
                    user: user_id,
                    family,
                    want: usize::try_from(a.numwant).unwrap_or(usize::MAX),
                    seeders: !seeder && !seed_list_refused,
                    leechers: !leech_list_refused,
                    start,
                },
                peers,
            );
        }
        if swarm.is_empty() {
            self.swarms.remove(&torrent_id);
        }

        if flagged {
            self.flagged += 1;
        }
        if first_snatch {
            *self.snatches.entry(torrent_id).or_insert(0) += 1;
        }
        let step = Step {
            point,
            kind,
            factors,
            flagged,
            seeded_until_us,
        };
        let rules = self.config.credit_rules();
        let state = point.state;
        let pair = (user_id, torrent_id);
        let mut claim = Claim::of(previous.map(|old| old.point), step);
        if previous.is_none() {
            // What the user's client reported on the torrent before, not
            // yet written: a session's first announce is charged past it.
            claim.prior = (self.batch.history.get(&pair))
                .filter(|mark| !mark.weak)
                .map(|mark| mark.client_downloaded);
        }
        self.batch.merge_peer(
            key,
            PeerEntry {
                row: account.row(state, now_secs),
                claim,
            },
            &rules,
        );
        // A stop of a peer this ledger does not know may be nobody's
        // session: its mark yields to any other.
        let merge_history = if previous.is_none() && stopped {
            Batch::merge_history_weak
        } else {
            Batch::merge_history
        };
        merge_history(
            &mut self.batch,
            pair,
            HistoryMark {
                agent: a.agent,
                client_uploaded: a.uploaded,
                client_downloaded: a.downloaded,
                seeder,
                active: user_still_active,
                immune,
                // A `completed` from a client still leeching completed
                // nothing (UNIT3D-Announce sets `completed_at` for it too).
                completed_at: (a.event == AnnounceEvent::Completed && seeder).then_some(now_secs),
                created_at: now_secs,
                updated_at: now_secs,
                weak: false,
            },
        );

        Ok(Admitted {
            user_id,
            torrent_id,
            seeders,
            leechers,
            hidden,
            slot_refusal,
            new_peer: previous.is_none(),
            seeder,
            completed,
            times_completed: snatched.saturating_add(self.snatches(torrent_id)),
            flagged,
            too_soon,
            seed_list_refused,
            leech_list_refused,
        })
    }

    /// Notes that the user of `a`'s passkey, if there is one, announced an
    /// info-hash the site does not serve, within the batch's bound.
    fn note_unregistered(&mut self, site: &impl SiteRules, a: &PrivateAnnounce, now_secs: u64) {
        let max = self.config.max_unregistered_per_batch;
        let Some(user_id) = site.user_of(&a.passkey).filter(|_| max > 0) else {
            return;
        };
        let key = (user_id, a.info_hash);
        let unregistered = &self.batch.unregistered;
        if !unregistered.contains_key(&key)
            && (unregistered.len() >= max
                || self
                    .quota
                    .as_deref()
                    .is_some_and(|q| !q.take(user_id, now_secs)))
        {
            self.unregistered_dropped += 1;
            return;
        }
        self.batch.merge_unregistered(
            key,
            UnregisteredRow {
                created_at: now_secs,
                updated_at: now_secs,
            },
        );
    }

    /// Takes back a peer that was active when the tracker last stopped (its
    /// row in `peers`, or in the pending file, which is newer), so that it
    /// counts for its user's peer limit and download slots, is held back if
    /// it announces too soon, and its next announce is a known peer's (the
    /// flush still measures it from whatever row the database holds then).
    /// UNIT3D-Announce loads its peers at start the same way. Nothing is
    /// written. A later row for a peer already restored replaces it.
    pub fn restore(&mut self, key: PeerKey, row: &PeerRow) {
        let swarm = self.swarms.entry(key.torrent_id).or_default();
        let before = (swarm.seeders(), swarm.leechers());
        if let Some(old) = swarm.remove(key.user_id, &key.peer_id) {
            if let (Some(counts), true) = (&self.slots, old.leeching()) {
                counts.change(key.user_id, false);
            }
            self.by_time.remove(&(old.last_seen(), key));
            self.accounts -= 1;
        }
        if !row.active {
            swarm.forget_user_if_gone(key.user_id);
            self.listed = moved(self.listed, before, (swarm.seeders(), swarm.leechers()));
            if swarm.is_empty() {
                self.swarms.remove(&key.torrent_id);
            }
            return;
        }
        let account = Account {
            point: Point {
                uploaded: row.uploaded,
                downloaded: row.downloaded,
                at_us: row.updated_at.saturating_mul(MICROS),
                seeder: row.seeder,
                state: PointState::Active,
            },
            left: row.left,
            ip: row.ip,
            port: row.port,
            agent: row.agent,
            created_at: row.created_at,
            has_sent_completed: false,
            completed: false,
            hidden: !row.visible,
            slot: 0,
        };
        if let (Some(counts), true) = (&self.slots, account.leeching()) {
            counts.change(key.user_id, true);
        }
        swarm.insert(key.user_id, key.peer_id, account);
        self.listed = moved(self.listed, before, (swarm.seeders(), swarm.leechers()));
        self.by_time.insert((row.updated_at, key));
        self.accounts += 1;
    }

    /// Forgets every account not seen for the active TTL; see
    /// [`Ledger::expire_some`].
    pub fn expire(&mut self, now_secs: u64) -> usize {
        self.expire_some(now_secs, usize::MAX)
    }

    /// Forgets at most `max` accounts not seen for the active TTL (last
    /// announce before `now - ttl`), oldest first, as UNIT3D-Announce's
    /// reaper: each is claimed expired, so the flush makes its row inactive
    /// and takes it off its torrent's seeders or leechers, unless the
    /// database holds a newer row (another tracker serves the peer).
    /// Bounded, so that a worker can spread the work over its ticks.
    /// Returns how many it forgot.
    pub fn expire_some(&mut self, now_secs: u64, max: usize) -> usize {
        let deadline = now_secs.saturating_sub(self.config.active_peer_ttl);
        let rules = self.config.credit_rules();
        let mut expired = 0;
        while expired < max {
            let Some(&(seen, key)) = self.by_time.first() else {
                break;
            };
            if seen >= deadline {
                break;
            }
            self.by_time.pop_first();
            expired += 1;
            let Some(swarm) = self.swarms.get_mut(&key.torrent_id) else {
                continue;
            };
            let before = (swarm.seeders(), swarm.leechers());
            let Some(account) = swarm.remove(key.user_id, &key.peer_id) else {
                continue;
            };
            self.listed = moved(self.listed, before, (swarm.seeders(), swarm.leechers()));
            swarm.forget_user_if_gone(key.user_id);
            if let (Some(counts), true) = (&self.slots, account.leeching()) {
                counts.change(key.user_id, false);
            }
            if swarm.is_empty() {
                self.swarms.remove(&key.torrent_id);
            }
            self.accounts = self.accounts.saturating_sub(1);
            let step = Step {
                point: Point {
                    state: PointState::Expired,
                    ..account.point
                },
                kind: StepKind::Expired,
                factors: Factors {
                    upload: 100,
                    download: 100,
                },
                flagged: false,
                seeded_until_us: 0,
            };
            self.batch.merge_peer(
                key,
                PeerEntry {
                    row: account.row(PointState::Expired, account.last_seen()),
                    claim: Claim::of(Some(account.point), step),
                },
                &rules,
            );
        }
        expired
    }

    /// The rows merged since the previous take.
    pub fn take_batch(&mut self) -> Batch {
        std::mem::take(&mut self.batch)
    }

    /// Peers accounted for.
    pub fn accounts(&self) -> usize {
        self.accounts
    }

    /// Torrents with an account here.
    pub fn torrents(&self) -> usize {
        self.swarms.len()
    }

    /// Visible seeders and leechers on every torrent here, as each
    /// torrent's counts count them.
    pub fn listed(&self) -> (u64, u64) {
        self.listed
    }

    /// Snatches of `torrent` counted by this ledger since it started.
    pub fn snatches(&self, torrent: TorrentId) -> u32 {
        self.snatches.get(&torrent).copied().unwrap_or(0)
    }

    /// The peers `user` has in this ledger's torrents: (seeding, leeching).
    /// A scan of every account: for the site API, not for announces.
    pub fn user_counts(&self, user: UserId) -> (u32, u32) {
        let mut counts = (0, 0);
        for swarm in self.swarms.values() {
            if swarm.user(user).peers() == 0 {
                continue;
            }
            for ((owner, _), account) in swarm.accounts() {
                if *owner == user {
                    if account.point.seeder {
                        counts.0 += 1;
                    } else {
                        counts.1 += 1;
                    }
                }
            }
        }
        counts
    }

    /// Unregistered info-hash rows dropped past the batch's bound, since
    /// start.
    pub fn unregistered_dropped(&self) -> u64 {
        self.unregistered_dropped
    }

    /// Announces flagged by the upload-rate bound since this ledger began.
    pub fn flagged(&self) -> u64 {
        self.flagged
    }

    /// A torrent's visible seeders and leechers.
    pub fn counts(&self, torrent: TorrentId) -> (u32, u32) {
        self.swarms
            .get(&torrent)
            .map_or((0, 0), |s| (s.seeders(), s.leechers()))
    }

    /// A torrent's peers, for the site API's torrent answer.
    pub fn peers_of(&self, torrent: TorrentId) -> impl Iterator<Item = PeerSnapshot> + '_ {
        self.swarms
            .get(&torrent)
            .into_iter()
            .flat_map(move |swarm| {
                swarm
                    .accounts()
                    .map(move |(&(user_id, peer_id), account)| PeerSnapshot {
                        key: PeerKey {
                            user_id,
                            torrent_id: torrent,
                            peer_id,
                        },
                        row: account.row(PointState::Active, account.last_seen()),
                        has_sent_completed: account.has_sent_completed,
                    })
            })
    }
}

/// `total` with one torrent's counts gone from `before` to `after`.
fn moved(total: (u64, u64), before: (u32, u32), after: (u32, u32)) -> (u64, u64) {
    let shift = |total: u64, before: u32, after: u32| {
        total
            .saturating_sub(u64::from(before))
            .saturating_add(u64::from(after))
    };
    (
        shift(total.0, before.0, after.0),
        shift(total.1, before.1, after.1),
    )
}

#[cfg(test)]
#[path = "ledger_tests.rs"]
mod tests;
