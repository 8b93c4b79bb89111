//! What a flush credits: each peer's claim measured from what the database
//! last recorded of that peer, inside the flush's transaction (the rows
//! locked), so that trackers sharing one database credit each byte once.
//!
//! A peer's row in `peers` is the point up to which it has been credited:
//! its totals and the second of the announce that reported them. A claim
//! is credited from the later of that row and the tracker's own base:
//! - the row is the base (the common case: this tracker wrote it): the
//!   claim's steps are credited as the ledger saw them;
//! - the row is newer than the base (another tracker saw the peer since):
//!   the first step is credited from the row, not from the stale base;
//! - the row is newer than the claim's steps too (the other tracker saw the
//!   peer later, and flushed first): the steps it covers credit nothing,
//!   and the row is not written back over;
//! - the peer was new to the tracker (it expired, the tracker restarted or
//!   was down past the active TTL, or another tracker served it): its
//!   first step is credited from the row, unless it starts a session
//!   (`started`) or the row is older than the inactive TTL.
//!
//! With totals that only grow, every byte between two announces of a peer
//! is credited once, whichever trackers saw them and in whichever order
//! their flushes land, but one case: a peer new to every tracker that
//! announces to two of them within one flush interval, the second's flush
//! landing first, is credited from the second's first announce (its bytes
//! before that are never credited twice, but not at all).
//!
//! Torrent counts move with the rows a flush actually changes: a peer
//! counts in its torrent's seeders or leechers while its row is active and
//! visible, so the counts stay equal to those rows whatever the
//! interleaving. A user's first completion on a torrent (its history has
//! none) counts once in `times_completed`, however often its peers flip
//! between leeching and seeding.

use crate::batch::{
    step_credit, within_upload_bound, Batch, Credit, CreditRules, HistoryRow, PeerEntry, PeerKey,
    PeerRow, Point, Rows, StepKind, TorrentRow, UserRow, MICROS,
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
            active: self.active,
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

/// Where a claim's crediting starts.
enum Origin {
    /// Nothing: its first step credits nothing.
    Nothing,
    /// The tracker's own base.
    Base(Point),
    /// The peer's row in the database, newer than any base.
    Row(Point),
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
/// it now, `history` each (user, torrent) pair's row.
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
    // Each pair's credit, and whether any of its peers was more than a stop
    // of a peer nobody recorded.
    let mut pair_credit: AHashMap<(UserId, TorrentId), (Credit, bool)> = AHashMap::new();
    let mut windows: AHashMap<(UserId, TorrentId), PairWindow> = AHashMap::new();
    for key in keys {
        let Some(entry) = batch.peers.get(key) else {
            continue;
        };
        let pair = (key.user_id, key.torrent_id);
        let row = stored(key);
        let window = windows.entry(pair).or_insert_with(|| PairWindow {
            until_us: history(pair.0, pair.1).map_or(0, |h| end_of_second(h.updated_at)),
            used: false,
        });
        let (credit, write) = settle_peer(row.as_ref(), entry, rules, window);
        if !write {
            out.superseded += 1;
        }
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
        // A stop of a peer nobody recorded (the ledger admits it so that a
        // peer known only to the database is credited): nothing to write.
        let unknown_stop =
            row.is_none() && entry.claim.opens_with_unknown_stop() && entry.claim.stops_only;
        if write && !unknown_stop {
            out.rows.peers.insert(*key, entry.row);
        }
        let (sum, real) = pair_credit.entry(pair).or_default();
        sum.add(&credit);
        *real |= !unknown_stop;
    }

    let mut pairs: Vec<_> = pair_credit.into_iter().collect();
    pairs.sort_unstable_by_key(|(pair, _)| *pair);
    for ((user_id, torrent_id), (credit, real)) in pairs {
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
        // unique here).
        if credit.completed && !stored_history.is_some_and(|h| h.completed) {
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
        if !real && stored_history.is_none() {
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
/// announce bounds it), or where one only stopped unknown (no history row
/// is made for a pair that has none). A flush reads only these: the
/// history of every other pair is never looked at.
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
        let (credit, _) = settle_peer(row.as_ref(), entry, rules, &mut window);
        let unknown_stop =
            row.is_none() && entry.claim.opens_with_unknown_stop() && entry.claim.stops_only;
        if credit.completed || window.used || unknown_stop {
            pairs.push((key.user_id, key.torrent_id));
        }
    }
    pairs.sort_unstable();
    pairs.dedup();
    pairs
}

/// What one peer's claim credits against its `row`, and whether its row
/// is written (false: a newer one is stored).
fn settle_peer(
    row: Option<&StoredPeer>,
    entry: &PeerEntry,
    rules: &CreditRules,
    window: &mut PairWindow,
) -> (Credit, bool) {
    let claim = &entry.claim;
    // A row past the inactive TTL is not credited from: the peer counts as
    // new, as UNIT3D-Announce forgets it then.
    let recent = row.map(StoredPeer::point).filter(|r| {
        r.at_secs().saturating_add(rules.inactive_peer_ttl) >= claim.first.point.at_secs()
    });
    // Within a second, a row with higher totals than a `started` is from
    // before that new session, not after it.
    let past_first = |r: &Point| {
        if claim.first.kind == StepKind::Started {
            r.at_secs() > claim.first.point.at_secs()
        } else {
            beyond(r, &claim.first.point)
        }
    };
    if let Some(r) = recent.filter(past_first) {
        // Another tracker recorded the peer after this claim's first step
        // (announces here and there interleaved, its flush first).
        if beyond(&r, &claim.last.point) {
            return (Credit::default(), false);
        }
        // From the row to the last step, at its factors.
        return (from_row(&r, &claim.last, rules, window), true);
    }
    let from = match (claim.base, recent) {
        _ if claim.first.kind == StepKind::Started => Origin::Nothing,
        (Some(base), Some(r)) if beyond(&r, &base) => Origin::Row(r),
        (Some(base), _) => Origin::Base(base),
        (None, Some(r)) => Origin::Row(r),
        (None, None) => Origin::Nothing,
    };
    let mut credit = match from {
        // An opening stop nobody recorded measured nothing: what followed
        // it was a new peer's.
        Origin::Nothing if claim.opens_with_unknown_stop() => return (claim.rest, true),
        Origin::Nothing => Credit::default(),
        Origin::Base(base) => step_credit(&base, &claim.first, rules),
        Origin::Row(r) => from_row(&r, &claim.first, rules, window),
    };
    credit.add(&claim.lead);
    credit.add(&claim.rest);
    (credit, true)
}

/// The last microsecond of second `secs`: a time the database keeps in
/// whole seconds, taken at its latest.
fn end_of_second(secs: u64) -> u64 {
    secs.saturating_mul(MICROS).saturating_add(MICROS - 1)
}

/// `step` credited from a stored row: under the upload-rate bound over the
/// time since the later of the row and the pair's window, counted from the
/// end of their second (the database keeps whole seconds), so that no
/// return of a peer gains a second's slack.
fn from_row(
    row: &Point,
    step: &crate::batch::Step,
    rules: &CreditRules,
    window: &mut PairWindow,
) -> Credit {
    let mut credit = step_credit(row, step, rules);
    let rate = rules.max_upload_rate;
    if rate == 0 || credit.actual_uploaded == 0 || step.flagged {
        return credit;
    }
    window.used = true;
    let start = end_of_second(row.at_secs()).max(window.until_us);
    match within_upload_bound(start, credit.actual_uploaded, rate, step.point.at_us) {
        Some(until) => window.until_us = until,
        None => credit.uploaded = 0,
    }
    credit
}

#[cfg(test)]
#[path = "settle_tests.rs"]
mod tests;
