//! What one flush writes, merged per key: a worker merges each announce into
//! its batch, the database thread merges the workers' batches into the next
//! flush, so memory grows with the active peers and (user, torrent) pairs,
//! never with the announces.
//!
//! A batch does not hold credits. It holds, per peer, a [`Claim`]: where
//! the tracker's account of the peer started and the announces since. The
//! flush reads each peer's row from the database and credits from the point
//! that row records ([`crate::settle`]), so that any number of trackers
//! sharing one database credit each byte once: whichever wrote the peer
//! last, and however stale a tracker's own view of it is.

use crate::rules::Factors;
use crate::site::{TorrentId, UserId};
use ahash::AHashMap;
use std::net::IpAddr;
use tracker_proto::{InfoHash, PeerId};

/// A client's `User-Agent`, as `peers.agent` and `history.agent` keep it
/// (`varchar(64)`): at most 64 bytes, cut there.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Agent {
    len: u8,
    bytes: [u8; Agent::MAX],
}

impl Agent {
    pub const MAX: usize = 64;

    /// `agent` cut to 64 bytes.
    pub fn new(agent: &[u8]) -> Agent {
        let mut bytes = [0; Agent::MAX];
        let mut len = 0;
        for (to, from) in bytes.iter_mut().zip(agent) {
            *to = *from;
            len += 1;
        }
        Agent { len, bytes }
    }

    pub fn as_bytes(&self) -> &[u8] {
        self.bytes.get(..usize::from(self.len)).unwrap_or_default()
    }
}

impl Default for Agent {
    fn default() -> Agent {
        Agent::new(b"")
    }
}

impl std::fmt::Debug for Agent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Agent({:?})", String::from_utf8_lossy(self.as_bytes()))
    }
}

/// `peers`' primary key.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct PeerKey {
    pub user_id: UserId,
    pub torrent_id: TorrentId,
    pub peer_id: PeerId,
}

/// A `peers` row: all assigned (the latest announce's), but `created_at`,
/// which the database keeps from the first insert.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerRow {
    pub ip: IpAddr,
    pub port: u16,
    pub agent: Agent,
    /// The client's totals, as it reported them.
    pub uploaded: u64,
    pub downloaded: u64,
    pub left: u64,
    /// False once the peer stopped (or expired).
    pub active: bool,
    pub seeder: bool,
    /// False when the peer is not handed out (a download slot limit).
    pub visible: bool,
    pub connectable: bool,
    /// Unix seconds.
    pub created_at: u64,
    pub updated_at: u64,
}

impl PeerRow {
    /// Counted in its torrent's seeders (`Some(true)`) or leechers
    /// (`Some(false)`): active and visible, as UNIT3D-Announce counts.
    pub fn counted_as_seeder(&self) -> Option<bool> {
        (self.active && self.visible).then_some(self.seeder)
    }
}

/// Where a peer's totals stood at one announce: what the next announce is
/// credited from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Point {
    pub uploaded: u64,
    pub downloaded: u64,
    /// Unix microseconds (a row read from the database: its second's
    /// start).
    pub at_us: u64,
    pub seeder: bool,
    pub state: PointState,
}

/// Whether the peer was still there after a point.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PointState {
    /// It announced and stays.
    Active,
    /// It went silent past the active TTL: forgotten in memory, its row
    /// inactive. Its session may go on (UNIT3D-Announce keeps such a peer,
    /// inactive, and continues it): its next announce is credited from
    /// here, but no seedtime runs across the silence.
    Expired,
    /// It sent `stopped`: its session ended. An announce after it is a new
    /// session's (UNIT3D-Announce forgets a stopped peer): its upload is
    /// not credited from here.
    Stopped,
}

impl Point {
    pub fn at_secs(&self) -> u64 {
        self.at_us / MICROS
    }

    pub fn is_active(&self) -> bool {
        self.state == PointState::Active
    }
}

/// What an announce was, for crediting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StepKind {
    /// An announce without `stopped`: none, `started`, `completed` or
    /// `paused`. No event but `stopped` changes what is credited
    /// (UNIT3D-Announce's rule): a `started` that is not a new session's
    /// first announce reports bytes like any other.
    Announce,
    /// `stopped`: the peer leaves.
    Stopped,
    /// Not an announce: the tracker forgot a peer silent for the active
    /// TTL. Credits nothing; makes the row inactive unless a newer one is
    /// stored.
    Expired,
}

/// One announce, as the flush credits it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Step {
    pub point: Point,
    pub kind: StepKind,
    pub factors: Factors,
    /// Its upload broke the upload-rate bound: recorded, not credited.
    pub flagged: bool,
    /// Unix microseconds until which the user's other peers on the torrent
    /// were counted as seeding already: this step's seedtime counts from
    /// then, when that is after its previous point, so that a user seeding
    /// from several peers at once earns the time once (0: none).
    pub seeded_until_us: u64,
}

/// What announces credit: added up.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Credit {
    /// Bytes credited to the user (factors applied).
    pub uploaded: u64,
    pub downloaded: u64,
    /// Bytes as reported.
    pub actual_uploaded: u64,
    pub actual_downloaded: u64,
    /// Seconds seeded.
    pub seedtime: u64,
    /// The peer went from leecher to seeder.
    pub completed: bool,
}

impl Credit {
    pub fn add(&mut self, other: &Credit) {
        self.uploaded = self.uploaded.saturating_add(other.uploaded);
        self.downloaded = self.downloaded.saturating_add(other.downloaded);
        self.actual_uploaded = self.actual_uploaded.saturating_add(other.actual_uploaded);
        self.actual_downloaded = self
            .actual_downloaded
            .saturating_add(other.actual_downloaded);
        self.seedtime = self.seedtime.saturating_add(other.seedtime);
        self.completed |= other.completed;
    }

    pub fn is_zero(&self) -> bool {
        *self == Credit::default()
    }
}

/// What crediting needs beyond the steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CreditRules {
    /// The most seconds one interval between two announces adds to
    /// seedtime (the active peer TTL).
    pub max_seedtime_step: u64,
    /// A peer's row older than this many seconds is not credited from: its
    /// peer counts as new (UNIT3D-Announce's `INACTIVE_PEER_TTL`).
    pub inactive_peer_ttl: u64,
    /// Bytes per second an upload may imply; 0: no bound.
    pub max_upload_rate: u64,
}

impl Default for CreditRules {
    fn default() -> CreditRules {
        CreditRules {
            max_seedtime_step: 7200,
            inactive_peer_ttl: 1_814_400,
            max_upload_rate: 0,
        }
    }
}

/// What `step` credits after `prev`, in the site's favour where a client's
/// totals disagree (see [`reported`]);
/// seedtime between two seeding announces of an active peer, at most
/// `max_seedtime_step` (whole seconds, as the database counts them); a
/// completion when a leecher of the same session announces as a seeder.
pub fn step_credit(prev: &Point, step: &Step, rules: &CreditRules) -> Credit {
    if step.kind == StepKind::Expired {
        return Credit::default();
    }
    let p = &step.point;
    let (up, down) = reported(prev, p);
    let seedtime = if prev.is_active() && prev.seeder && p.seeder {
        let from = prev.at_us.max(step.seeded_until_us) / MICROS;
        p.at_secs()
            .saturating_sub(from)
            .min(rules.max_seedtime_step)
    } else {
        0
    };
    Credit {
        uploaded: if step.flagged {
            0
        } else {
            crate::rules::credit(up, step.factors.upload)
        },
        downloaded: crate::rules::credit(down, u16::from(step.factors.download)),
        actual_uploaded: up,
        actual_downloaded: down,
        seedtime,
        completed: step.kind != StepKind::Stopped
            && prev.state != PointState::Stopped
            && p.seeder
            && !prev.seeder,
    }
}

/// The bytes a peer reports moving between `prev` and `point`, in the
/// site's favour where its totals disagree: a total that went back (either
/// one) is a restarted session's, so the download is charged all of its
/// new total if it went back (or its growth if not), and no upload is
/// credited (what a restarted client uploaded is unproven, and
/// UNIT3D-Announce credits none either); nor is any upload reported after
/// a stop (a new session, as UNIT3D-Announce forgets a stopped peer). One
/// counter going back never hides the other's download.
pub fn reported(prev: &Point, point: &Point) -> (u64, u64) {
    let restarted = point.uploaded < prev.uploaded || point.downloaded < prev.downloaded;
    let up = if restarted || prev.state == PointState::Stopped {
        0
    } else {
        point.uploaded - prev.uploaded
    };
    let down = match point.downloaded.checked_sub(prev.downloaded) {
        Some(grown) => grown,
        None => point.downloaded,
    };
    (up, down)
}

/// What the first announce of a session nobody recorded credits: no upload
/// (UNIT3D-Announce credits a new peer nothing), and the download it
/// reports past `last_reported`, the user's client's last reported
/// download total on the torrent (`history.client_downloaded`), so that no
/// new peer id, port or address, nor a `stopped` or `started`, lets a
/// client report a download and not be charged it: every total a client
/// reports is at most what its user was charged on the torrent.
pub fn first_credit(step: &Step, last_reported: u64) -> Credit {
    if step.kind == StepKind::Expired {
        return Credit::default();
    }
    let down = step.point.downloaded.saturating_sub(last_reported);
    Credit {
        downloaded: crate::rules::credit(down, u16::from(step.factors.download)),
        actual_downloaded: down,
        ..Credit::default()
    }
}

/// One tracker's account of one peer over one batch: its steps in one or
/// two runs. A run ends where the ledger forgot the peer (it stopped, or
/// went silent past the active TTL) and a later one begins where it
/// announced again: another tracker may have recorded the peer between
/// them, and the flush then credits the later run from that row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Claim {
    /// Where the tracker's account stood before `first`: the peer's
    /// previous announce to it, or its row read at start. None: the peer
    /// was new to it (then the flush credits `first` from the peer's row,
    /// if the database has one, or as a session's first announce).
    pub base: Option<Point>,
    pub first: Step,
    /// What the steps of the first run after `first` credit, each from the
    /// one before.
    pub rest: Credit,
    /// The latest run, when the ledger forgot the peer and saw it again
    /// within the claim (runs between the first and the latest are folded
    /// into the first's `rest`).
    pub resumed: Option<Resumed>,
    /// The latest step (`first` itself when there is one).
    pub last: Step,
    /// Every step is a stop.
    pub stops_only: bool,
    /// For a claim with no base, whose first step may be a session's first
    /// announce: the download its user's client last reported on the
    /// torrent before it, in this tracker's batches not yet written (None:
    /// the database's `history.client_downloaded` tells).
    pub prior: Option<u64>,
}

/// A claim's latest run: the steps after the ledger forgot the peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Resumed {
    /// The step the run before ended with: a stop or an expiry.
    pub after: Step,
    pub first: Step,
    /// What `first` credits from `after` (where no other tracker recorded
    /// the peer between them).
    pub joined: Credit,
    /// What the run's steps after `first` credit, each from the one before.
    pub rest: Credit,
}

impl Claim {
    /// The claim of one announce.
    pub fn of(base: Option<Point>, step: Step) -> Claim {
        Claim {
            base,
            first: step,
            rest: Credit::default(),
            resumed: None,
            last: step,
            stops_only: step.kind == StepKind::Stopped,
            prior: None,
        }
    }

    /// Stops only, of a peer the ledger did not know: if the database has
    /// no row of it and they report nothing to charge, nothing is written.
    pub fn is_unknown_stop(&self) -> bool {
        self.base.is_none() && self.stops_only
    }

    /// What the steps after `first` credit when nothing else recorded the
    /// peer meanwhile.
    pub fn after_first(&self) -> Credit {
        let mut credit = self.rest;
        if let Some(run) = &self.resumed {
            credit.add(&run.joined);
            credit.add(&run.rest);
        }
        credit
    }

    /// The latest run into the first: the claim keeps two runs at most.
    fn fold(&mut self) {
        if let Some(run) = self.resumed.take() {
            self.rest.add(&run.joined);
            self.rest.add(&run.rest);
        }
    }

    /// Appends the later claim of the same peer, from the same tracker.
    fn merge(&mut self, later: &Claim, rules: &CreditRules) {
        // Its first step follows this claim's last, whatever base its
        // ledger gave it (none, after a stop or an expiry).
        let mut joined = step_credit(&self.last.point, &later.first, rules);
        // A step from a peer the ledger knew, it bounded itself.
        if later.base.is_none() {
            joined = bounded(&self.last.point, &later.first, joined, rules);
        }
        let forgotten = later.base.is_none() && !self.last.point.is_active();
        let latest = if forgotten {
            self.fold();
            Resumed {
                after: self.last,
                first: later.first,
                joined,
                rest: later.rest,
            }
        } else {
            let latest = match &mut self.resumed {
                Some(run) => &mut run.rest,
                None => &mut self.rest,
            };
            latest.add(&joined);
            latest.add(&later.rest);
            match self.resumed {
                Some(run) => run,
                None => {
                    // One run still: the later claim's second, if any, is
                    // the latest.
                    self.resumed = later.resumed;
                    self.last = later.last;
                    self.stops_only &= later.stops_only;
                    return;
                }
            }
        };
        self.resumed = Some(latest);
        if let Some(run) = later.resumed {
            // Three runs or more: all but the latest in the first.
            self.fold();
            self.resumed = Some(run);
        }
        self.last = later.last;
        self.stops_only &= later.stops_only;
    }
}

/// Microseconds in a second.
pub const MICROS: u64 = 1_000_000;

/// The microseconds `bytes` of upload take at `rate` bytes per second,
/// rounded up: what the upload-rate bound charges for them, so that no
/// number of announces gains a rounding's worth each.
pub fn upload_time_us(bytes: u64, rate: u64) -> u64 {
    let rate = u128::from(rate.max(1));
    let us = (u128::from(bytes) * u128::from(MICROS)).div_ceil(rate);
    u64::try_from(us).unwrap_or(u64::MAX)
}

/// The upload-rate bound: `bytes` uploaded from `start_us` at `rate` bytes
/// a second, charged their time rounded up: until when they spend the
/// bound, if that is by `at_us`; None if they break it.
pub fn within_upload_bound(start_us: u64, bytes: u64, rate: u64, at_us: u64) -> Option<u64> {
    let until = start_us.saturating_add(upload_time_us(bytes, rate));
    (until <= at_us).then_some(until)
}

/// `credit` of `step` after `prev` with the upload-rate bound applied over
/// the time between them: for a step the ledger could not bound itself
/// (its peer was new to it).
pub fn bounded(prev: &Point, step: &Step, mut credit: Credit, rules: &CreditRules) -> Credit {
    let rate = rules.max_upload_rate;
    if rate != 0
        && within_upload_bound(prev.at_us, credit.actual_uploaded, rate, step.point.at_us).is_none()
    {
        credit.uploaded = 0;
    }
    credit
}

/// A peer in a batch: its row as the latest announce left it, and the
/// tracker's claim.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PeerEntry {
    pub row: PeerRow,
    pub claim: Claim,
}

impl PeerEntry {
    fn merge(&mut self, later: &PeerEntry, rules: &CreditRules) {
        let created_at = self.row.created_at.min(later.row.created_at);
        self.row = later.row;
        self.row.created_at = created_at;
        self.claim.merge(&later.claim, rules);
    }
}

/// What the latest announce of a user on a torrent assigns to its
/// `history` row; the bytes and seedtime are the flush's.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryMark {
    pub agent: Agent,
    /// The client's last reported totals.
    pub client_uploaded: u64,
    pub client_downloaded: u64,
    pub seeder: bool,
    pub active: bool,
    /// Immunity can be lost, never gained, once the row exists.
    pub immune: bool,
    /// Unix seconds of the first `completed` event: kept.
    pub completed_at: Option<u64>,
    pub created_at: u64,
    pub updated_at: u64,
    /// Only stops of peers the ledger did not know made it: what they
    /// report may be nobody's session, so any other announce's mark
    /// replaces theirs, and a flush that finds none of their peers
    /// recorded writes no history for them.
    pub weak: bool,
}

impl HistoryMark {
    fn merge(&mut self, later: &HistoryMark) {
        match (self.weak, later.weak) {
            (false, true) => {
                self.created_at = self.created_at.min(later.created_at);
                return;
            }
            (true, false) => {
                let created_at = self.created_at.min(later.created_at);
                *self = *later;
                self.created_at = created_at;
                return;
            }
            _ => {}
        }
        self.agent = later.agent;
        self.client_uploaded = later.client_uploaded;
        self.client_downloaded = later.client_downloaded;
        self.seeder = later.seeder;
        self.active = later.active;
        self.immune = self.immune && later.immune;
        // The first completion stays (UNIT3D-Announce keeps the latest
        // value, which a later announce in the same flush turns back to
        // NULL, losing the completion).
        self.completed_at = self.completed_at.or(later.completed_at);
        self.created_at = self.created_at.min(later.created_at);
        self.updated_at = self.updated_at.max(later.updated_at);
    }
}

/// A `history` row's change as a flush writes it: one user on one torrent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HistoryRow {
    pub agent: Agent,
    /// Credited bytes (factors applied): added.
    pub uploaded: u64,
    pub downloaded: u64,
    /// Bytes as reported (no factor): added.
    pub actual_uploaded: u64,
    pub actual_downloaded: u64,
    /// The client's last reported totals: assigned.
    pub client_uploaded: u64,
    pub client_downloaded: u64,
    /// Seconds seeded: added.
    pub seedtime: u64,
    pub seeder: bool,
    pub active: bool,
    /// Immunity can be lost, never gained, once the row exists.
    pub immune: bool,
    /// Unix seconds: the first completion is kept.
    pub completed_at: Option<u64>,
    pub created_at: u64,
    pub updated_at: u64,
}

impl HistoryRow {
    /// The row of `mark` with `credit`'s bytes and seedtime.
    pub fn of(mark: &HistoryMark, credit: &Credit) -> HistoryRow {
        HistoryRow {
            agent: mark.agent,
            uploaded: credit.uploaded,
            downloaded: credit.downloaded,
            actual_uploaded: credit.actual_uploaded,
            actual_downloaded: credit.actual_downloaded,
            client_uploaded: mark.client_uploaded,
            client_downloaded: mark.client_downloaded,
            seedtime: credit.seedtime,
            seeder: mark.seeder,
            active: mark.active,
            immune: mark.immune,
            completed_at: mark.completed_at,
            created_at: mark.created_at,
            updated_at: mark.updated_at,
        }
    }

    pub(crate) fn merge(&mut self, later: &HistoryRow) {
        self.agent = later.agent;
        self.uploaded = self.uploaded.saturating_add(later.uploaded);
        self.downloaded = self.downloaded.saturating_add(later.downloaded);
        self.actual_uploaded = self.actual_uploaded.saturating_add(later.actual_uploaded);
        self.actual_downloaded = self
            .actual_downloaded
            .saturating_add(later.actual_downloaded);
        self.client_uploaded = later.client_uploaded;
        self.client_downloaded = later.client_downloaded;
        self.seedtime = self.seedtime.saturating_add(later.seedtime);
        self.seeder = later.seeder;
        self.active = later.active;
        self.immune = self.immune && later.immune;
        self.completed_at = self.completed_at.or(later.completed_at);
        self.created_at = self.created_at.min(later.created_at);
        self.updated_at = self.updated_at.max(later.updated_at);
    }
}

/// A user's credited bytes: added to `users.uploaded` and `downloaded`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct UserRow {
    pub uploaded: u64,
    pub downloaded: u64,
}

impl UserRow {
    fn merge(&mut self, later: &UserRow) {
        self.uploaded = self.uploaded.saturating_add(later.uploaded);
        self.downloaded = self.downloaded.saturating_add(later.downloaded);
    }
}

/// A torrent's changes: added to `torrents.seeders`, `leechers`,
/// `times_completed` and `balance`; `updated_at` assigned.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TorrentRow {
    pub seeders: i64,
    pub leechers: i64,
    pub times_completed: u64,
    /// Uploaded minus downloaded, as reported.
    pub balance: i64,
    pub updated_at: u64,
}

impl TorrentRow {
    fn merge(&mut self, later: &TorrentRow) {
        self.seeders = self.seeders.saturating_add(later.seeders);
        self.leechers = self.leechers.saturating_add(later.leechers);
        self.times_completed = self.times_completed.saturating_add(later.times_completed);
        self.balance = self.balance.saturating_add(later.balance);
        self.updated_at = self.updated_at.max(later.updated_at);
    }
}

/// An `unregistered_info_hashes` row: a user's client announced an
/// info-hash the site does not serve (unknown, or deleted), so the site can
/// tell the user which torrents to remove. Unix seconds; the first
/// `created_at` is kept, `updated_at` is the latest.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UnregisteredRow {
    pub created_at: u64,
    pub updated_at: u64,
}

impl UnregisteredRow {
    fn merge(&mut self, later: &UnregisteredRow) {
        self.created_at = self.created_at.min(later.created_at);
        self.updated_at = self.updated_at.max(later.updated_at);
    }
}

/// Rows ready to write as they are: what a flush settled, or what a version
/// before claims left in its pending file (written as that version would).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Rows {
    pub peers: AHashMap<PeerKey, PeerRow>,
    pub history: AHashMap<(UserId, TorrentId), HistoryRow>,
    pub users: AHashMap<UserId, UserRow>,
    pub torrents: AHashMap<TorrentId, TorrentRow>,
}

impl Rows {
    pub fn merge(&mut self, later: Rows) {
        for (key, row) in later.peers {
            merge_into(&mut self.peers, key, row, |a, b| {
                let created_at = a.created_at.min(b.created_at);
                *a = *b;
                a.created_at = created_at;
            });
        }
        for (key, row) in later.history {
            merge_into(&mut self.history, key, row, HistoryRow::merge);
        }
        for (key, row) in later.users {
            self.add_user(key, row);
        }
        for (key, row) in later.torrents {
            self.add_torrent(key, row);
        }
    }

    pub fn add_user(&mut self, user: UserId, row: UserRow) {
        merge_into(&mut self.users, user, row, UserRow::merge);
    }

    pub fn add_torrent(&mut self, torrent: TorrentId, row: TorrentRow) {
        merge_into(&mut self.torrents, torrent, row, TorrentRow::merge);
    }

    pub fn add_history(&mut self, key: (UserId, TorrentId), row: HistoryRow) {
        merge_into(&mut self.history, key, row, HistoryRow::merge);
    }

    pub fn rows(&self) -> usize {
        self.peers.len() + self.history.len() + self.users.len() + self.torrents.len()
    }
}

fn merge_into<K: std::hash::Hash + Eq, V>(
    map: &mut AHashMap<K, V>,
    key: K,
    value: V,
    merge: impl FnOnce(&mut V, &V),
) {
    match map.entry(key) {
        std::collections::hash_map::Entry::Occupied(mut e) => merge(e.get_mut(), &value),
        std::collections::hash_map::Entry::Vacant(e) => {
            e.insert(value);
        }
    }
}

/// Everything one flush writes.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Batch {
    pub peers: AHashMap<PeerKey, PeerEntry>,
    pub history: AHashMap<(UserId, TorrentId), HistoryMark>,
    pub unregistered: AHashMap<(UserId, InfoHash), UnregisteredRow>,
    /// Rows written as they are (an older version's pending file).
    pub settled: Rows,
}

impl Batch {
    /// Merges `later` (what came after this batch, from the same tracker)
    /// into it.
    pub fn merge(&mut self, mut later: Batch, rules: &CreditRules) {
        self.stamp_priors(&mut later);
        for (key, entry) in later.peers {
            self.merge_peer(key, entry, rules);
        }
        for (key, mark) in later.history {
            self.merge_history(key, mark);
        }
        for (key, row) in later.unregistered {
            self.merge_unregistered(key, row);
        }
        self.settled.merge(later.settled);
    }

    /// Merges `later` as [`Batch::merge`] does, but a key this batch does
    /// not hold yet is added only if `admit` says so for its user (it may
    /// count it); returns how many were left out. A new peer whose (user,
    /// torrent) pair's history mark was left out goes with it: its credit
    /// goes into that pair's row, so a peer kept without it would have its
    /// bytes written into its row and credited to no one.
    /// Rows already settled (an older version's) are always taken.
    pub fn merge_bounded(
        &mut self,
        later: Batch,
        rules: &CreditRules,
        mut admit: impl FnMut(UserId) -> bool,
    ) -> usize {
        let mut later = later;
        self.stamp_priors(&mut later);
        let mut dropped = 0;
        let mut unmarked = ahash::AHashSet::new();
        for (key, mark) in later.history {
            if self.history.contains_key(&key) || admit(key.0) {
                self.merge_history(key, mark);
            } else {
                unmarked.insert(key);
                dropped += 1;
            }
        }
        for (key, entry) in later.peers {
            let marked = !unmarked.contains(&(key.user_id, key.torrent_id));
            if self.peers.contains_key(&key) || (marked && admit(key.user_id)) {
                self.merge_peer(key, entry, rules);
            } else {
                dropped += 1;
            }
        }
        for (key, row) in later.unregistered {
            if self.unregistered.contains_key(&key) || admit(key.0) {
                self.merge_unregistered(key, row);
            } else {
                dropped += 1;
            }
        }
        self.settled.merge(later.settled);
        dropped
    }

    /// Gives each claim of `later` that this batch does not hold, and that
    /// may open a session nobody recorded, the download its user's client
    /// last reported on the torrent in this batch: reported before it, and
    /// not yet in the database's history.
    fn stamp_priors(&self, later: &mut Batch) {
        if self.history.is_empty() {
            return;
        }
        for (key, entry) in &mut later.peers {
            let claim = &mut entry.claim;
            if claim.base.is_none() && claim.prior.is_none() && !self.peers.contains_key(key) {
                claim.prior = (self.history.get(&(key.user_id, key.torrent_id)))
                    .filter(|mark| !mark.weak)
                    .map(|mark| mark.client_downloaded);
            }
        }
    }

    /// A stop's mark from a peer the ledger did not know: kept only where
    /// the pair has none.
    pub fn merge_history_weak(&mut self, key: (UserId, TorrentId), mark: HistoryMark) {
        self.merge_history(key, HistoryMark { weak: true, ..mark });
    }

    // One row at a time, as an announce makes them: no batch of its own to
    // allocate.
    pub fn merge_peer(&mut self, key: PeerKey, entry: PeerEntry, rules: &CreditRules) {
        merge_into(&mut self.peers, key, entry, |a, b| a.merge(b, rules));
    }

    pub fn merge_history(&mut self, key: (UserId, TorrentId), mark: HistoryMark) {
        merge_into(&mut self.history, key, mark, HistoryMark::merge);
    }

    pub fn merge_unregistered(&mut self, key: (UserId, InfoHash), row: UnregisteredRow) {
        merge_into(&mut self.unregistered, key, row, UnregisteredRow::merge);
    }

    pub fn is_empty(&self) -> bool {
        self.rows() == 0
    }

    /// Entries it holds, all kinds together (each writes a row or more).
    pub fn rows(&self) -> usize {
        self.peers.len() + self.history.len() + self.unregistered.len() + self.settled.rows()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::arb_batch;
    use proptest::prelude::*;

    fn merged(batches: &[Batch]) -> Batch {
        let mut all = Batch::default();
        for batch in batches {
            all.merge(batch.clone(), &CreditRules::default());
        }
        all
    }

    proptest! {
        /// Merging one by one equals merging any grouping of the same
        /// sequence: a worker's batches may reach the database thread
        /// merged or not, and a failed flush merges back in front.
        #[test]
        fn merge_is_associative(
            batches in proptest::collection::vec(arb_batch(), 0..6),
            split in any::<prop::sample::Index>(),
            split2 in any::<prop::sample::Index>(),
        ) {
            let rules = CreditRules::default();
            let one_by_one = merged(&batches);
            let at = split.index(batches.len() + 1);
            let (front, back) = batches.split_at(at);
            let mut grouped = merged(front);
            grouped.merge(merged(back), &rules);
            prop_assert_eq!(&grouped, &one_by_one);

            let at2 = split2.index(back.len() + 1);
            let (middle, last) = back.split_at(at2);
            let mut three = merged(front);
            let mut rest = merged(middle);
            rest.merge(merged(last), &rules);
            three.merge(rest, &rules);
            prop_assert_eq!(&three, &one_by_one);
        }
    }

    proptest! {
        /// Admitting every key is a plain merge; admitting none keeps
        /// only what was held (merged with what came for it).
        #[test]
        fn a_bounded_merge_adds_only_what_it_admits(a in arb_batch(), b in arb_batch()) {
            let rules = CreditRules::default();
            let mut all = a.clone();
            all.merge(b.clone(), &rules);
            let mut bounded = a.clone();
            prop_assert_eq!(bounded.merge_bounded(b.clone(), &rules, |_| true), 0);
            prop_assert_eq!(&bounded, &all);
            let mut none = a.clone();
            let dropped = none.merge_bounded(b.clone(), &rules, |_| false);
            prop_assert_eq!(none.peers.len(), a.peers.len());
            prop_assert_eq!(none.history.len(), a.history.len());
            prop_assert_eq!(none.unregistered.len(), a.unregistered.len());
            let new = b.peers.keys().filter(|k| !a.peers.contains_key(k)).count()
                + b.history.keys().filter(|k| !a.history.contains_key(k)).count()
                + b.unregistered.keys().filter(|k| !a.unregistered.contains_key(k)).count();
            prop_assert_eq!(dropped, new);
        }
    }

    /// At the bound, a peer that may carry credit is never kept without
    /// its pair's history mark: its bytes would go into its row and be
    /// credited to no one. Dropped together, its next announce credits
    /// them from its row.
    #[test]
    fn a_bounded_merge_keeps_no_creditable_peer_without_its_mark() {
        let rules = CreditRules::default();
        let key = PeerKey {
            user_id: 1,
            torrent_id: 1,
            peer_id: tracker_proto::PeerId([7; 20]),
        };
        let mut later = Batch::default();
        let p = point(100, 0, 10, false);
        later.merge_peer(
            key,
            PeerEntry {
                row: crate::testing::any_peer_row(),
                claim: Claim::of(Some(point(0, 0, 5, false)), step(StepKind::Announce, p)),
            },
            &rules,
        );
        later.merge_history(
            (1, 1),
            HistoryMark {
                agent: Agent::default(),
                client_uploaded: 100,
                client_downloaded: 0,
                seeder: false,
                active: true,
                immune: false,
                completed_at: None,
                created_at: 10,
                updated_at: 10,
                weak: false,
            },
        );
        // Room for one key: the mark takes it, the peer goes too.
        let mut room = 1;
        let mut held = Batch::default();
        let dropped = held.merge_bounded(later.clone(), &rules, |_| {
            let fits = room > 0;
            room -= usize::from(fits);
            fits
        });
        assert_eq!(dropped, 1);
        assert!(held.peers.is_empty() && held.history.len() == 1);
        // Room for both: both kept.
        let mut held = Batch::default();
        assert_eq!(held.merge_bounded(later, &rules, |_| true), 0);
        assert_eq!((held.peers.len(), held.history.len()), (1, 1));
    }

    #[test]
    fn an_empty_batch_changes_nothing() {
        let mut batch = Batch::default();
        batch.settled.users.insert(
            1,
            UserRow {
                uploaded: 1,
                downloaded: 2,
            },
        );
        let before = batch.clone();
        batch.merge(Batch::default(), &CreditRules::default());
        assert_eq!(batch, before);
        assert_eq!(batch.rows(), 1);
        assert!(!batch.is_empty());
    }

    fn point(uploaded: u64, downloaded: u64, secs: u64, seeder: bool) -> Point {
        Point {
            uploaded,
            downloaded,
            at_us: secs * MICROS,
            seeder,
            state: PointState::Active,
        }
    }

    fn step(kind: StepKind, p: Point) -> Step {
        let state = match kind {
            StepKind::Announce => PointState::Active,
            StepKind::Stopped => PointState::Stopped,
            StepKind::Expired => PointState::Expired,
        };
        Step {
            point: Point { state, ..p },
            kind,
            factors: Factors {
                upload: 100,
                download: 100,
            },
            flagged: false,
            seeded_until_us: 0,
        }
    }

    #[test]
    fn each_counter_is_judged_on_its_own_in_the_sites_favour() {
        let rules = CreditRules::default();
        let prev = point(100, 50, 10, false);
        let c = step_credit(
            &prev,
            &step(StepKind::Announce, point(150, 70, 20, false)),
            &rules,
        );
        assert_eq!((c.actual_uploaded, c.actual_downloaded), (50, 20));
        // The download back: a restart, its new total charged, and no
        // upload credited (what a restarted client uploaded is unproven).
        let c = step_credit(
            &prev,
            &step(StepKind::Announce, point(200, 10, 20, false)),
            &rules,
        );
        assert_eq!((c.actual_uploaded, c.actual_downloaded), (0, 10));
        // The upload back: nothing credited of it, the download charged.
        let c = step_credit(
            &prev,
            &step(StepKind::Announce, point(99, 900, 20, false)),
            &rules,
        );
        assert_eq!((c.actual_uploaded, c.actual_downloaded), (0, 850));
        // A stop alike.
        let c = step_credit(
            &prev,
            &step(StepKind::Stopped, point(200, 10, 20, false)),
            &rules,
        );
        assert_eq!((c.actual_uploaded, c.actual_downloaded), (0, 10));
    }

    #[test]
    fn after_a_stop_only_the_download_goes_on() {
        let rules = CreditRules::default();
        let stopped = step(StepKind::Stopped, point(100, 50, 10, false)).point;
        let c = step_credit(
            &stopped,
            &step(StepKind::Announce, point(300, 80, 20, false)),
            &rules,
        );
        assert_eq!((c.actual_uploaded, c.actual_downloaded), (0, 30));
        // A second stop likewise.
        let c = step_credit(
            &stopped,
            &step(StepKind::Stopped, point(300, 80, 20, false)),
            &rules,
        );
        assert_eq!((c.actual_uploaded, c.actual_downloaded), (0, 30));
        // After an expiry the session goes on: both counters.
        let expired = step(StepKind::Expired, point(100, 50, 10, false)).point;
        let c = step_credit(
            &expired,
            &step(StepKind::Announce, point(300, 80, 20, false)),
            &rules,
        );
        assert_eq!((c.actual_uploaded, c.actual_downloaded), (200, 30));
    }

    #[test]
    fn completions_and_seedtime() {
        let rules = CreditRules::default();
        let prev = point(100, 50, 10, false);
        // A leecher announcing as a seeder completed; seedtime runs only
        // between two seeding points of an active peer, capped.
        let c = step_credit(
            &prev,
            &step(StepKind::Announce, point(100, 50, 20, true)),
            &rules,
        );
        assert!(c.completed && c.seedtime == 0);
        let seeding = point(100, 50, 10, true);
        let later = step(StepKind::Announce, point(100, 50, 10 + 9000, true));
        assert_eq!(step_credit(&seeding, &later, &rules).seedtime, 7200);
        for state in [PointState::Stopped, PointState::Expired] {
            let gone = Point { state, ..seeding };
            assert_eq!(step_credit(&gone, &later, &rules).seedtime, 0);
        }
        // A leecher that stopped and comes back seeding is a new session's
        // seeder, not a completion.
        let stopped = step(StepKind::Stopped, prev).point;
        assert!(!step_credit(&stopped, &later, &rules).completed);
        assert!(step_credit(
            &prev,
            &step(StepKind::Expired, point(999, 999, 99, true)),
            &rules
        )
        .is_zero());
    }

    #[test]
    fn a_sessions_first_announce_is_charged_past_the_last_report() {
        let first = step(StepKind::Announce, point(500, 900, 10, false));
        let c = first_credit(&first, 0);
        assert_eq!((c.actual_uploaded, c.actual_downloaded), (0, 900));
        assert_eq!(first_credit(&first, 300).actual_downloaded, 600);
        assert!(first_credit(&first, 1000).is_zero());
        let free = Step {
            factors: Factors {
                upload: 200,
                download: 0,
            },
            ..first
        };
        let c = first_credit(&free, 0);
        assert_eq!((c.downloaded, c.actual_downloaded), (0, 900));
    }

    #[test]
    fn a_claim_merged_after_a_stop_goes_on_with_the_download_alone() {
        let rules = CreditRules::default();
        let stop = step(StepKind::Stopped, point(10, 5, 5, false));
        let mut claim = Claim::of(Some(point(0, 0, 0, false)), stop);
        // Back as a peer new to the ledger: a new session for the upload,
        // the download charged from the stop, in a run of its own.
        claim.merge(
            &Claim::of(None, step(StepKind::Announce, point(25, 9, 9, false))),
            &rules,
        );
        let run = claim.resumed.unwrap();
        assert_eq!((run.after, run.first.point.uploaded), (stop, 25));
        assert_eq!(
            (run.joined.actual_uploaded, run.joined.actual_downloaded),
            (0, 4)
        );
        claim.merge(
            &Claim::of(None, step(StepKind::Announce, point(40, 12, 12, false))),
            &rules,
        );
        let after = claim.after_first();
        assert_eq!((after.actual_uploaded, after.actual_downloaded), (15, 7));
        assert_eq!(claim.last.point.uploaded, 40);
        assert!(!claim.stops_only);
    }

    /// A claim keeps its first and latest runs: one run more folds the
    /// one before into the first, crediting the same.
    #[test]
    fn a_claim_keeps_two_runs() {
        let rules = CreditRules::default();
        let mut claim = Claim::of(None, step(StepKind::Announce, point(0, 0, 0, false)));
        for (kind, n) in [
            (StepKind::Stopped, 10),
            (StepKind::Announce, 20),
            // An expiry is at the peer's last point.
            (StepKind::Expired, 20),
            (StepKind::Announce, 50),
        ] {
            claim.merge(&Claim::of(None, step(kind, point(n, n, n, false))), &rules);
        }
        let run = claim.resumed.unwrap();
        assert_eq!(
            (run.after.kind, run.first.point.uploaded),
            (StepKind::Expired, 50)
        );
        // 0 -> 10 (the stop) -> 20 (no upload after the stop) -> 20 (the
        // expiry) -> 50 (a session going on after the expiry).
        let all = claim.after_first();
        assert_eq!((all.actual_uploaded, all.actual_downloaded), (10 + 30, 50));
    }
}
