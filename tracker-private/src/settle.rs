//! What a flush credits: each peer's claim measured from what the database
//! last recorded of that peer, inside the flush's transaction (the rows
//! locked), so that trackers sharing one database credit each byte once.
//!
//! A peer's row in `peers` is the point up to which it has been credited:
//! its totals, the second of the announce that reported them, and whether
//! the peer stayed (`active`), went silent (inactive but `visible`: the
//! tracker's expiry, or the site's own clean-up) or stopped (neither). A
//! claim is credited from the later of that row and the tracker's own base:
//! - the row is the base (the common case: this tracker wrote it): the
//!   claim's steps are credited as the ledger saw them;
//! - the row is newer than the base (another tracker saw the peer since):
//!   the first step is credited from the row, not from the stale base;
//! - the row is newer than the claim's steps too (the other tracker saw the
//!   peer later, and flushed first): the steps it covers credit nothing,
//!   and the row is not written back over;
//! - the peer was new to the tracker (it expired, the tracker restarted or
//!   was down past the active TTL, or another tracker served it): its
//!   first step is credited from the row, unless the row is older than the
//!   inactive TTL;
//! - nobody recorded the peer: its first step is a session's first
//!   announce, which credits no upload and is charged the download it
//!   reports past the user's last report on the torrent before it (this
//!   tracker's unwritten batches, else `history.client_downloaded`; see
//!   [`first_credit`]).
//!
//! Every byte between two announces of a peer is credited once, whichever
//! trackers saw them and in whichever order their flushes land. The
//! database keeps whole seconds: within one second, two trackers'
//! announces of one peer are ordered by their totals, and a row read for
//! the upload-rate bound is taken at the start of its second (a step 1.2 s
//! after a row is bounded over 1.2 s at least; a client gains at most one
//! second's worth of the bound per return to a tracker that did not see it
//! last).
//!
//! Torrent counts move with the rows a flush actually changes: a peer
//! counts in its torrent's seeders or leechers while its row is active and
//! visible, so the counts stay equal to those rows whatever the
//! interleaving. A user's first completion on a torrent (its history has
//! none) counts once in `times_completed`, however often its peers flip
//! between leeching and seeding.

use crate::batch::{
    first_credit, step_credit, within_upload_bound, Batch, Claim, Credit, CreditRules, HistoryRow,
    PeerKey, PeerRow, Point, PointState, Rows, Step, TorrentRow, UserRow, MICROS,
};
use crate::site::{TorrentId, UserId};
use ahash::AHashMap;

/// What the database holds of a peer when a flush reads its row.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredPeer {
    pub uploaded: u64,
    pub downloaded: u64,
    /// Unix seconds.
    pub updated_at: u64,
    pub active: bool,
    pub seeder: bool,
    pub visible: bool,
}

impl StoredPeer {
    fn point(&self) -> Point {
        Point {
            uploaded: self.uploaded,
            downloaded: self.downloaded,
            at_us: self.updated_at.saturating_mul(MICROS),
            seeder: self.seeder,
            state: self.state(),
        }
    }

    /// A stop is written inactive and not visible (as UNIT3D-Announce
    /// writes it); an expiry inactive but as visible as it was (as the
    /// site's own clean-up of silent peers leaves it). A leecher held back
    /// by its download slots that expired reads as stopped: its upload
    /// across the silence is not credited.
    fn state(&self) -> PointState {
        match (self.active, self.visible) {
            (true, _) => PointState::Active,
            (false, true) => PointState::Expired,
            (false, false) => PointState::Stopped,
        }
    }

    fn counted_as_seeder(&self) -> Option<bool> {
        (self.active && self.visible).then_some(self.seeder)
    }

    /// The row as it is, for the counts of a torrent when nothing is
    /// written.
    pub fn of_row(row: &PeerRow) -> StoredPeer {
        StoredPeer {
            uploaded: row.uploaded,
            downloaded: row.downloaded,
            updated_at: row.updated_at,
            active: row.active,
            seeder: row.seeder,
            visible: row.visible,
        }
    }
}

/// What the database holds of a user's history on a torrent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoredHistory {
    /// `completed_at` is set: the user completed the torrent before.
    pub completed: bool,
    /// Unix seconds of the pair's last announce, by any of its peers.
    pub updated_at: u64,
    /// The download total the user's client last reported on the torrent
    /// (`client_downloaded`).
    pub client_downloaded: u64,
}

/// What a flush writes once settled.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settled {
    pub rows: Rows,
    /// Everything credited, for the metrics.
    pub credited: Credit,
    /// Peers whose every announce here another tracker had recorded later:
    /// nothing credited, their rows not written back.
    pub superseded: usize,
}

/// `stored` is past `point`: a later second, or the same second with
/// totals beyond it (the database keeps whole seconds).
fn beyond(stored: &Point, point: &Point) -> bool {
    let (s, p) = (stored.at_secs(), point.at_secs());
    s > p
        || (s == p
            && stored.uploaded >= point.uploaded
            && stored.downloaded >= point.downloaded
            && (stored.uploaded, stored.downloaded) != (point.uploaded, point.downloaded))
}

/// `row` records `base` itself: this tracker wrote it (or read it at its
/// start), and no one recorded the peer since.
fn same(row: &Point, base: &Point) -> bool {
    row.at_secs() == base.at_secs()
        && (row.uploaded, row.downloaded, row.seeder)
            == (base.uploaded, base.downloaded, base.seeder)
}

/// What settling a claim against the peer's row comes to.
#[derive(Clone, Copy)]
enum Settlement {
    /// Credited; the row written.
    Credited(Credit),
    /// The row is past every step of the claim (another tracker recorded
    /// the peer later, and flushed first): nothing credited, the row not
    /// written back.
    Superseded,
    /// The row is later than every step but below their totals: the peer
    /// restarted after them on another tracker. Their download is charged
    /// (nothing else did), their upload not (which session it belongs to
    /// is unknown); the newer row stays.
    Uncovered(Credit),
}

/// The row's totals are at least the step's: it accounts for what the
/// step reported.
fn covers(row: &Point, step: &Step) -> bool {
    row.uploaded >= step.point.uploaded && row.downloaded >= step.point.downloaded
}

/// What `claim` credits against the peer's `row`; `last_reported` is the
/// pair's last reported download total, for a session nobody recorded.
fn settle_claim(
    row: Option<&StoredPeer>,
    claim: &Claim,
    last_reported: u64,
    rules: &CreditRules,
    window: &mut PairWindow,
) -> Settlement {
    // A row past the inactive TTL is not credited from: the peer counts as
    // new, as UNIT3D-Announce forgets it then.
    let recent = row.map(StoredPeer::point).filter(|r| {
        r.at_secs().saturating_add(rules.inactive_peer_ttl) >= claim.first.point.at_secs()
    });
    let is_base = |r: &Point| claim.base.is_some_and(|base| same(r, &base));
    match (recent, &claim.resumed) {
        // Another tracker recorded the peer after the claim's latest run
        // began (or, in one run, after its first step).
        (Some(r), run)
            if !is_base(&r) && beyond(&r, &run.map_or(claim.first, |run| run.first).point) =>
        {
            if !beyond(&r, &claim.last.point) {
                // Between that step and the last: from it to the last.
                return Settlement::Credited(from_row(&r, &claim.last, rules, window));
            }
            if covers(&r, &claim.last) {
                return Settlement::Superseded;
            }
            let mut credit = opening(None, claim, last_reported, rules, window);
            credit.add(&claim.after_first());
            Settlement::Uncovered(Credit {
                uploaded: 0,
                actual_uploaded: 0,
                seedtime: 0,
                ..credit
            })
        }
        // Recorded after the claim's first run began, before its latest:
        // the first run from the row (to its end, unless the row is past
        // it), the latest from the row where the row is past the first.
        (Some(r), Some(run)) if !is_base(&r) && beyond(&r, &claim.first.point) => {
            let mut credit = Credit::default();
            if beyond(&r, &run.after.point) {
                credit.add(&from_row(&r, &run.first, rules, window));
            } else {
                credit.add(&from_row(&r, &run.after, rules, window));
                credit.add(&run.joined);
            }
            credit.add(&run.rest);
            Settlement::Credited(credit)
        }
        _ => {
            let mut credit = opening(recent, claim, last_reported, rules, window);
            credit.add(&claim.after_first());
            Settlement::Credited(credit)
        }
    }
}

/// What the claim's first step credits: from the later of the tracker's
/// base and the row (neither past it), or as a session's first announce
/// where neither is there.
fn opening(
    recent: Option<Point>,
    claim: &Claim,
    last_reported: u64,
    rules: &CreditRules,
    window: &mut PairWindow,
) -> Credit {
    match (claim.base, recent) {
        (Some(base), Some(r)) if !same(&r, &base) && beyond(&r, &base) => {
            from_row(&r, &claim.first, rules, window)
        }
        (Some(base), _) => step_credit(&base, &claim.first, rules),
        (None, Some(r)) => from_row(&r, &claim.first, rules, window),
        (None, None) => first_credit(&claim.first, last_reported),
    }
}

/// The claim opens as a session nobody recorded (see [`first_credit`]).
fn unrecorded(row: Option<&StoredPeer>, claim: &Claim, rules: &CreditRules) -> bool {
    let recent = row.filter(|r| {
        r.updated_at.saturating_add(rules.inactive_peer_ttl) >= claim.first.point.at_secs()
    });
    claim.base.is_none() && recent.is_none()
}

/// The running upload-rate window of one (user, torrent) in this flush,
/// for steps measured from a row: they are the ones the ledger could not
/// bound (see [`crate::ledger`]).
struct PairWindow {
    /// Unix microseconds until which the pair's bound is spent.
    until_us: u64,
    /// A step was bounded by it (so the pair's history row was needed).
    used: bool,
}

/// Settles `batch`: `stored` gives each peer's row as the database holds
/// it now, `history` each (user, torrent) pair's row (read for the pairs
/// [`pairs_needing_history`] names).
pub fn settle(
    batch: &Batch,
    stored: impl Fn(&PeerKey) -> Option<StoredPeer>,
    history: impl Fn(UserId, TorrentId) -> Option<StoredHistory>,
    rules: &CreditRules,
) -> Settled {
    let mut out = Settled {
        rows: batch.settled.clone(),
        ..Settled::default()
    };
    let mut keys: Vec<&PeerKey> = batch.peers.keys().collect();
    // Key order: the pair windows are spent in a fixed order.
    keys.sort_unstable();
    // Each pair's credit, and whether any of its peers wrote a row.
    let mut pair_credit: AHashMap<(UserId, TorrentId), (Credit, bool)> = AHashMap::new();
    let mut windows: AHashMap<(UserId, TorrentId), PairWindow> = AHashMap::new();
    for key in keys {
        let Some(entry) = batch.peers.get(key) else {
            continue;
        };
        let pair = (key.user_id, key.torrent_id);
        let row = stored(key);
        let stored_history = history(pair.0, pair.1);
        let window = windows.entry(pair).or_insert_with(|| PairWindow {
            until_us: stored_history.map_or(0, |h| h.updated_at.saturating_mul(MICROS)),
            used: false,
        });
        let last_reported = (entry.claim.prior)
            .or(stored_history.map(|h| h.client_downloaded))
            .unwrap_or(0);
        let (credit, newer_row) =
            match settle_claim(row.as_ref(), &entry.claim, last_reported, rules, window) {
                Settlement::Credited(credit) => (credit, false),
                Settlement::Superseded => (Credit::default(), true),
                Settlement::Uncovered(credit) => (credit, true),
            };
        if newer_row {
            out.superseded += 1;
        }
        // Stops of a peer nobody recorded that report nothing to charge
        // (the ledger admits them so that a peer known only to the
        // database is credited): nothing to write.
        let idle_stop = row.is_none() && entry.claim.is_unknown_stop() && credit.is_zero();
        let write = !newer_row && !idle_stop;
        let before = row.and_then(|r| r.counted_as_seeder());
        let after = if write {
            entry.row.counted_as_seeder()
        } else {
            before
        };
        let torrent = TorrentRow {
            seeders: i64::from(after == Some(true)) - i64::from(before == Some(true)),
            leechers: i64::from(after == Some(false)) - i64::from(before == Some(false)),
            times_completed: 0,
            balance: crate::account::balance(credit.actual_uploaded, credit.actual_downloaded),
            updated_at: entry.row.updated_at,
        };
        if torrent.seeders != 0 || torrent.leechers != 0 || torrent.balance != 0 {
            out.rows.add_torrent(key.torrent_id, torrent);
        }
        if write {
            out.rows.peers.insert(*key, entry.row);
        }
        let (sum, wrote) = pair_credit.entry(pair).or_default();
        sum.add(&credit);
        *wrote |= !idle_stop;
    }

    let mut pairs: Vec<_> = pair_credit.into_iter().collect();
    pairs.sort_unstable_by_key(|(pair, _)| *pair);
    for ((user_id, torrent_id), (credit, wrote)) in pairs {
        let user_row = UserRow {
            uploaded: credit.uploaded,
            downloaded: credit.downloaded,
        };
        let Some(mark) = batch.history.get(&(user_id, torrent_id)) else {
            // No announce of the pair, only expiries (which credit
            // nothing); or a mark dropped by a bounded merge, which keeps
            // no creditable peer without it. The user is credited all the
            // same: bytes in a peer's row are never credited again.
            if credit.uploaded != 0 || credit.downloaded != 0 {
                out.credited.add(&credit);
                out.rows.add_user(user_id, user_row);
            }
            continue;
        };
        let stored_history = history(user_id, torrent_id);
        let mut row = HistoryRow::of(mark, &credit);
        // The user's first completion of the torrent (the pairs are
        // unique here): a leecher of one session announcing as a seeder,
        // or a `completed` event, whichever came first (the event alone
        // sets `completed_at`, as UNIT3D-Announce sets it, which marks the
        // completion counted).
        if (credit.completed || mark.completed_at.is_some())
            && !stored_history.is_some_and(|h| h.completed)
        {
            out.rows.add_torrent(
                torrent_id,
                TorrentRow {
                    times_completed: 1,
                    updated_at: mark.updated_at,
                    ..TorrentRow::default()
                },
            );
            row.completed_at = row.completed_at.or(Some(mark.updated_at));
        }
        // Idle stops alone write no history: what they report is nobody's
        // session.
        if !wrote {
            continue;
        }
        out.credited.add(&credit);
        if credit.uploaded != 0 || credit.downloaded != 0 {
            out.rows.add_user(user_id, user_row);
        }
        out.rows.add_history((user_id, torrent_id), row);
    }
    out
}

/// The (user, torrent) pairs whose history rows settling `batch` consults:
/// those where a peer completes (counted once a pair), where one is
/// measured from its row under the upload bound (the pair's latest
/// announce bounds it), where a session nobody recorded reports a download
/// (charged past the pair's last reported total), or where one only
/// stopped unknown (no history row is made for a pair that has none). A
/// flush reads only these: the history of every other pair is never
/// looked at.
pub fn pairs_needing_history(
    batch: &Batch,
    stored: impl Fn(&PeerKey) -> Option<StoredPeer>,
    rules: &CreditRules,
) -> Vec<(UserId, TorrentId)> {
    let mut pairs: Vec<(UserId, TorrentId)> = Vec::new();
    for (key, entry) in &batch.peers {
        let row = stored(key);
        let mut window = PairWindow {
            until_us: 0,
            used: false,
        };
        let credit = match settle_claim(row.as_ref(), &entry.claim, 0, rules, &mut window) {
            Settlement::Credited(credit) | Settlement::Uncovered(credit) => credit,
            Settlement::Superseded => Credit::default(),
        };
        let unreported = unrecorded(row.as_ref(), &entry.claim, rules)
            && entry.claim.prior.is_none()
            && entry.claim.first.point.downloaded > 0;
        let unknown_stop = row.is_none() && entry.claim.is_unknown_stop();
        let completes = credit.completed
            || (batch.history.get(&(key.user_id, key.torrent_id)))
                .is_some_and(|mark| mark.completed_at.is_some());
        if completes || window.used || unreported || unknown_stop {
            pairs.push((key.user_id, key.torrent_id));
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

/// `step` credited from a stored row: under the upload-rate bound over the
/// time since the later of the row and the pair's window. The database
/// keeps whole seconds: a row is taken at the start of its second, so
/// that an honest transfer just after it is never flagged (the bound is
/// then generous by less than a second).
fn from_row(row: &Point, step: &Step, rules: &CreditRules, window: &mut PairWindow) -> Credit {
    let mut credit = step_credit(row, step, rules);
    let rate = rules.max_upload_rate;
    if rate == 0 || credit.actual_uploaded == 0 || step.flagged {
        return credit;
    }
    window.used = true;
    let start = row.at_us.max(window.until_us);
    match within_upload_bound(start, credit.actual_uploaded, rate, step.point.at_us) {
        Some(until) => window.until_us = until,
        None => credit.uploaded = 0,
    }
    credit
}

#[cfg(test)]
#[path = "settle_tests.rs"]
mod tests;
