//! The database thread: takes the workers' batches without ever blocking
//! them, merges them, and flushes them every interval, exactly once.
//!
//! # Exactly once
//!
//! The thread holds `pending`, batches that each have a fixed sequence
//! number (in increasing order; the front one is in flight), and `next`,
//! everything submitted since, merged per key and not yet numbered. A
//! flush of number `n` is one transaction that stores `n` in the tracker's
//! row of `tracker_flushes` and writes nothing if the row already holds `n`
//! or more (see [`mod@crate::flush`]). So:
//!
//! - A batch is retried with the same number until a flush of it returns
//!   `Applied` or `AlreadyApplied`. If a COMMIT went through but its
//!   acknowledgement was lost, the retry finds `n` stored and writes
//!   nothing: the rows count once. If the COMMIT did not go through, the
//!   retry writes them: they count once.
//! - `next` is numbered (`n + 1`) only once the batch before it is done, so
//!   numbers are committed in order and "stored >= n" can only mean "this
//!   batch was applied", never "a later batch was".
//! - Nothing is ever merged into a numbered batch: deltas that arrive while
//!   it is retried go to `next`, or a retry that found the batch applied
//!   would drop them.
//!
//! Across a restart, [`FlusherHandle::stop`] returns what is unwritten,
//! every batch numbered: those already numbered with their numbers (each
//! may in fact have been committed, its acknowledgement lost), and `next`
//! with the next number, past every one this run gave; the caller
//! keeps them (the state file) and hands them to the next
//! [`Flusher::spawn`], which drops the numbered ones the database already
//! holds, queues the others with their own numbers (so the in-transaction
//! check still decides, even for a commit still under way when the
//! previous run gave up), and merges the unnumbered ones into `next`.
//! New numbers start past both the database's last number and the largest
//! kept one.
//!
//! Each tracker process needs its own `tracker_id`: two processes with
//! the same id would take each other's flushes for their own and drop
//! them.
//!
//! # Memory while the database is down
//!
//! `next` grows with the distinct keys submitted (a peer, a user's history
//! on a torrent, an unregistered info-hash), never with the announces; and
//! it holds at most `max_pending_entries` keys, at most
//! `max_pending_entries_per_user` of them one user's. A key past either is
//! dropped and counted: the user's over its own bound first, so that one
//! passkey churning peer ids cannot crowd out everyone's accounting. What a
//! dropped key costs is small: a peer's claim is credited at its next
//! announce, from its row (the database still holds the point it was last
//! credited from); only a peer that never announces again loses its last
//! interval; a dropped stop or expiry leaves the peer's row active, and
//! counted in its torrent, until the peer announces again or a start expires
//! it; a history row's or unregistered row's latest times wait for the next
//! announce. A peer whose history mark is dropped is dropped with it (see
//! `Batch::merge_bounded`). The batch in flight is bounded the same way when
//! it was `next`, and the batches submitted but not yet taken (the thread
//! held up in a statement, or a log write) the same again: the tracker holds
//! at most three times the bound.
//!
//! # Failures retrying cannot fix
//!
//! A flush refused for a privilege (the database user lacks a grant) or the
//! schema (a missing table or column) is logged at error level at once and
//! counted apart (`refused`), so that it alerts within a minute instead of
//! looking like an outage. It is still retried with backoff, so that fixing
//! the grant resumes the flushes without a restart.

use crate::config::DbConfig;
use crate::error::{DbError, DbErrorKind};
use crate::flush::{
    check_tracker_id, create_tracker_table, flush, last_sequence, FlushOutcome,
    DEFAULT_MAX_ROWS_PER_STATEMENT,
};
use mysql::Conn;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{
    AtomicBool, AtomicU64,
    Ordering::{Relaxed, SeqCst},
};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use tracker_private::{Batch, Credit, CreditRules, UserId};

/// Batches not yet written, oldest first: `Some(n)` for one that was
/// given sequence number `n` (it may have been committed, unless it is the
/// last), `None` for one never numbered (which only an older version's
/// pending file holds). What [`FlusherHandle::stop`] returns and
/// [`Flusher::spawn`] takes back.
pub type Leftover = Vec<(Option<u64>, Batch)>;

/// The database thread's settings.
#[derive(Clone, Debug)]
pub struct FlusherConfig {
    pub db: DbConfig,
    /// This tracker's row in `tracker_flushes`: unique among the trackers
    /// writing to the database, and the same across restarts. 1 to 64
    /// characters.
    pub tracker_id: String,
    /// Time between flushes (UNIT3D-Announce's `FLUSH_INTERVAL_MILLISECONDS`).
    pub interval: Duration,
    /// Wait after a first failure; it doubles with each further one...
    pub backoff_min: Duration,
    /// ...up to this.
    pub backoff_max: Duration,
    /// Rows per statement at most (UNIT3D-Announce's
    /// `MAX_RECORDS_PER_BATCH`); the 65,535 placeholders of a statement
    /// cap it too.
    pub max_rows_per_statement: usize,
    /// How announces are credited (the ledgers' limits).
    pub rules: CreditRules,
    /// Keys held for the next flush at most (see the module's
    /// documentation); 0: no bound.
    pub max_pending_entries: usize,
    /// Keys of one user held at most; 0: no bound.
    pub max_pending_entries_per_user: usize,
}

impl FlusherConfig {
    pub const DEFAULT_INTERVAL: Duration = Duration::from_secs(3);
    pub const DEFAULT_BACKOFF_MIN: Duration = Duration::from_secs(1);
    pub const DEFAULT_BACKOFF_MAX: Duration = Duration::from_secs(60);
    pub const DEFAULT_MAX_PENDING_ENTRIES: usize = 1_000_000;
    pub const DEFAULT_MAX_PENDING_ENTRIES_PER_USER: usize = 20_000;

    /// `url` and `tracker_id` with the defaults: every 3 s, retries after
    /// 1 s doubling up to 60 s, 1000 rows a statement, a million keys held,
    /// 20,000 of one user.
    pub fn new(url: impl Into<String>, tracker_id: impl Into<String>) -> FlusherConfig {
        FlusherConfig {
            db: DbConfig::new(url),
            tracker_id: tracker_id.into(),
            interval: FlusherConfig::DEFAULT_INTERVAL,
            backoff_min: FlusherConfig::DEFAULT_BACKOFF_MIN,
            backoff_max: FlusherConfig::DEFAULT_BACKOFF_MAX,
            max_rows_per_statement: DEFAULT_MAX_ROWS_PER_STATEMENT,
            rules: CreditRules::default(),
            max_pending_entries: FlusherConfig::DEFAULT_MAX_PENDING_ENTRIES,
            max_pending_entries_per_user: FlusherConfig::DEFAULT_MAX_PENDING_ENTRIES_PER_USER,
        }
    }
}

/// The flusher's counters, read at any time without blocking it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FlusherStats {
    /// Flushes committed.
    pub flushes_applied: u64,
    /// Flushes found committed already (a lost acknowledgement, or a
    /// leftover batch that had landed).
    pub flushes_already_applied: u64,
    /// Leftover batches dropped at spawn as already in the database.
    pub leftover_dropped: u64,
    /// Failed attempts (connecting or flushing).
    pub failures: u64,
    /// Of those, refused for a privilege or the schema: retrying alone
    /// cannot fix them.
    pub refused: u64,
    /// Failed attempts since the last success.
    pub consecutive_failures: u64,
    /// Rows written by the applied flushes.
    pub rows_written: u64,
    /// Rows left out because their user or torrent was deleted.
    pub rows_skipped: u64,
    /// Peers whose announces another tracker had recorded later: nothing
    /// credited, their rows left as they were.
    pub peers_superseded: u64,
    /// Keys dropped past `max_pending_entries` or its per-user bound.
    pub entries_dropped: u64,
    /// What the applied flushes credited.
    pub credited: Credit,
    /// Rows waiting to be written: those the thread holds, merged per key,
    /// and those submitted that it has yet to merge. Zero once everything
    /// submitted before the call is in the database.
    pub pending_rows: u64,
    /// Unix seconds of the last flush that succeeded (applied or already
    /// applied); 0 before the first.
    pub last_success_unix: u64,
    /// The last sequence number known to be in the database.
    pub last_sequence: u64,
    /// False while the last attempt could not reach the server.
    pub reachable: bool,
}

#[derive(Default)]
struct Shared {
    flushes_applied: AtomicU64,
    flushes_already_applied: AtomicU64,
    leftover_dropped: AtomicU64,
    failures: AtomicU64,
    refused: AtomicU64,
    consecutive_failures: AtomicU64,
    rows_written: AtomicU64,
    rows_skipped: AtomicU64,
    peers_superseded: AtomicU64,
    entries_dropped: AtomicU64,
    /// Credited up, down; reported up, down; seedtime.
    credited: [AtomicU64; 5],
    /// Rows the thread holds, merged.
    held_rows: AtomicU64,
    /// Rows submitted and still in the channel. Added before the send,
    /// taken off after the merge has been counted in `held_rows`; read
    /// before `held_rows`, so the sum never misses a submitted row.
    queued_rows: AtomicU64,
    last_success_unix: AtomicU64,
    last_sequence: AtomicU64,
    reachable: AtomicBool,
    /// `max_pending_entries`, for the workers' side: what the channel may
    /// hold too (0: no bound).
    max_queued: u64,
}

enum Message {
    /// Boxed: a batch is hundreds of bytes, a stop sixteen.
    Batch(Box<Batch>),
    Stop(Instant),
}

/// A batch with its sequence number.
struct Numbered {
    sequence: u64,
    batch: Batch,
    /// A flush of it was tried (or it came back from a previous run): it
    /// may have been committed.
    tried: bool,
}

/// The database thread's state; [`Flusher::spawn`] starts it.
pub struct Flusher {
    config: FlusherConfig,
    conn: Option<Conn>,
    receiver: Receiver<Message>,
    shared: Arc<Shared>,
    /// Numbered batches, in increasing order; the front one is in flight.
    pending: VecDeque<Numbered>,
    /// Everything submitted since, merged.
    next: Batch,
    /// Keys of `next` per user, for its bound.
    next_per_user: HashMap<UserId, usize>,
    /// The number `next` gets when it goes in flight.
    next_sequence: u64,
    /// The wait after the last failure.
    backoff: Duration,
}

/// The workers' side of the database thread.
pub struct FlusherHandle {
    sender: Sender<Message>,
    shared: Arc<Shared>,
    thread: Option<JoinHandle<Leftover>>,
}

impl Flusher {
    /// Connects (so that a wrong URL, password or schema fails the start,
    /// the error naming the URL without its password), creates
    /// `tracker_flushes` if missing, reads this tracker's last sequence
    /// number, sorts `leftover` (see the module's documentation) and starts
    /// the thread.
    pub fn spawn(config: FlusherConfig, leftover: Leftover) -> Result<FlusherHandle, DbError> {
        check_tracker_id(&config.tracker_id)?;
        let mut conn = config.db.connect()?;
        create_tracker_table(&mut conn)?;
        let last = last_sequence(&mut conn, &config.tracker_id)?;
        let shared = Arc::new(Shared {
            max_queued: config.max_pending_entries as u64,
            ..Shared::default()
        });
        shared.last_sequence.store(last, Relaxed);
        shared.reachable.store(true, Relaxed);

        let mut pending: Vec<Numbered> = Vec::new();
        let mut next = Batch::default();
        let mut dropped = 0;
        for (sequence, batch) in leftover {
            match sequence {
                Some(sequence) if sequence <= last => dropped += 1,
                Some(sequence) => pending.push(Numbered {
                    sequence,
                    batch,
                    tried: true,
                }),
                None => next.merge(batch, &config.rules),
            }
        }
        // Stable: two batches with one number (which stop never returns)
        // are merged in the order given.
        pending.sort_by_key(|n| n.sequence);
        let mut queue: VecDeque<Numbered> = VecDeque::new();
        for item in pending {
            match queue.back_mut() {
                Some(back) if back.sequence == item.sequence => {
                    back.batch.merge(item.batch, &config.rules)
                }
                _ => queue.push_back(item),
            }
        }
        let next_sequence = queue
            .back()
            .map_or(last, |n| n.sequence.max(last))
            .saturating_add(1);
        shared.leftover_dropped.store(dropped, Relaxed);
        if dropped > 0 {
            tracing::info!(
                batches = dropped,
                "leftover batches were already in the database: dropped"
            );
        }

        let (sender, receiver) = mpsc::channel();
        let flusher = Flusher {
            backoff: config.backoff_min,
            config,
            conn: Some(conn),
            receiver,
            shared: Arc::clone(&shared),
            pending: queue,
            next,
            next_per_user: HashMap::new(),
            next_sequence,
        };
        flusher.count_pending();
        let thread = std::thread::Builder::new()
            .name("tracker-db".into())
            .spawn(move || flusher.run())
            .map_err(|e| {
                DbError::new(
                    DbErrorKind::Other,
                    "starting the database thread",
                    e.to_string(),
                )
            })?;
        Ok(FlusherHandle {
            sender,
            shared,
            thread: Some(thread),
        })
    }

    fn run(mut self) -> Leftover {
        let mut wake = Instant::now() + self.config.interval;
        loop {
            if let Some(deadline) = self.receive_until(wake) {
                return self.finish(deadline);
            }
            let delay = match self.flush_pending(None) {
                Ok(()) => self.config.interval,
                Err(()) => self.backoff,
            };
            wake = Instant::now() + delay;
        }
    }

    /// Merges what arrives until `wake`; a stop's deadline if one came.
    fn receive_until(&mut self, wake: Instant) -> Option<Instant> {
        loop {
            let now = Instant::now();
            if now >= wake {
                return None;
            }
            match self.receiver.recv_timeout(wake - now) {
                Ok(Message::Batch(batch)) => self.take(*batch),
                Ok(Message::Stop(deadline)) => return Some(deadline),
                Err(RecvTimeoutError::Timeout) => return None,
                // The handle was dropped without a stop: one last try.
                Err(RecvTimeoutError::Disconnected) => {
                    return Some(Instant::now() + self.config.interval)
                }
            }
        }
    }

    /// Flushes the numbered batches, then `next`, until all are written,
    /// one attempt fails, or `deadline` passes.
    fn flush_pending(&mut self, deadline: Option<Instant>) -> Result<(), ()> {
        loop {
            if deadline.is_some_and(|d| Instant::now() >= d) {
                return Ok(());
            }
            if self.pending.is_empty() {
                if self.next.is_empty() {
                    return Ok(());
                }
                self.pending.push_back(Numbered {
                    sequence: self.next_sequence,
                    batch: std::mem::take(&mut self.next),
                    tried: false,
                });
                self.next_per_user.clear();
                self.next_sequence = self.next_sequence.saturating_add(1);
            }
            let Some(mut item) = self.pending.pop_front() else {
                return Ok(());
            };
            let result = self.attempt(&item);
            item.tried = true;
            match result {
                Ok(outcome) => self.succeeded(&item, outcome),
                Err(error) => {
                    self.pending.push_front(item);
                    self.failed(&error);
                    return Err(());
                }
            }
        }
    }

    fn attempt(&mut self, item: &Numbered) -> Result<FlushOutcome, DbError> {
        let conn = match self.conn.as_mut() {
            Some(conn) => conn,
            None => {
                let mut conn = self.config.db.connect()?;
                create_tracker_table(&mut conn)?;
                self.conn.insert(conn)
            }
        };
        flush(
            conn,
            &self.config.tracker_id,
            item.sequence,
            &item.batch,
            &self.config.rules,
            self.config.max_rows_per_statement,
        )
    }

    fn succeeded(&mut self, item: &Numbered, outcome: FlushOutcome) {
        let s = &self.shared;
        match outcome {
            FlushOutcome::Applied {
                rows,
                skipped,
                superseded,
                credited,
            } => {
                s.flushes_applied.fetch_add(1, Relaxed);
                s.rows_written.fetch_add(rows as u64, Relaxed);
                s.rows_skipped.fetch_add(skipped as u64, Relaxed);
                s.peers_superseded.fetch_add(superseded as u64, Relaxed);
                for (sum, n) in s.credited.iter().zip([
                    credited.uploaded,
                    credited.downloaded,
                    credited.actual_uploaded,
                    credited.actual_downloaded,
                    credited.seedtime,
                ]) {
                    sum.fetch_add(n, Relaxed);
                }
            }
            FlushOutcome::AlreadyApplied => {
                s.flushes_already_applied.fetch_add(1, Relaxed);
                if !item.tried {
                    tracing::error!(
                        sequence = item.sequence,
                        tracker_id = %self.config.tracker_id,
                        "a flush was found applied before it was ever tried: another \
                         tracker writes with this tracker id, and its rows are lost"
                    );
                }
            }
        }
        s.last_sequence.fetch_max(item.sequence, Relaxed);
        s.last_success_unix.store(unix_now(), Relaxed);
        s.reachable.store(true, Relaxed);
        let failures = s.consecutive_failures.swap(0, Relaxed);
        if failures > 0 {
            tracing::info!(failures, "flushing into the database again");
        }
        self.backoff = self.config.backoff_min;
        self.count_pending();
    }

    fn failed(&mut self, error: &DbError) {
        // Whatever broke, start again on a new connection.
        self.conn = None;
        let s = &self.shared;
        s.failures.fetch_add(1, Relaxed);
        let previous = s.consecutive_failures.fetch_add(1, Relaxed);
        s.reachable.store(!error.kind().is_unreachable(), Relaxed);
        self.backoff = if previous == 0 {
            self.config.backoff_min
        } else {
            (self.backoff * 2).min(self.config.backoff_max)
        };
        // One line per failure: one per backoff step.
        if error.is_retryable() {
            tracing::warn!(
                retry_in = ?self.backoff,
                pending_rows = s.held_rows.load(Relaxed),
                "flush failed: {error}"
            );
        } else {
            s.refused.fetch_add(1, Relaxed);
            tracing::error!(
                retry_in = ?self.backoff,
                pending_rows = s.held_rows.load(Relaxed),
                "flush refused, and retrying cannot fix it: {error}; nothing is credited \
                 until it is fixed (grants: docs/OPERATIONS.md, deploy/unit3d/grants.sql)"
            );
        }
    }

    /// On a stop: takes what is still queued, flushes until done or
    /// `deadline`, and returns what is left.
    fn finish(mut self, deadline: Instant) -> Leftover {
        while let Ok(message) = self.receiver.try_recv() {
            if let Message::Batch(batch) = message {
                self.take(*batch);
            }
        }
        self.count_pending();
        while !(self.pending.is_empty() && self.next.is_empty()) {
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            if self.flush_pending(Some(deadline)).is_err() {
                std::thread::sleep(self.backoff.min(deadline.saturating_duration_since(now)));
            }
        }
        let mut left: Leftover = (self.pending.drain(..))
            .map(|n| (Some(n.sequence), n.batch))
            .collect();
        // Numbered here, past every number this thread gave (committed or
        // not), so that the next start can never take it for a batch it
        // already has: a number read from outside before the stop would be
        // stale if a retried batch committed during the stop.
        if !self.next.is_empty() {
            left.push((Some(self.next_sequence), std::mem::take(&mut self.next)));
        }
        let rows: usize = left.iter().map(|(_, b)| b.rows()).sum();
        if rows > 0 {
            tracing::warn!(rows, "stopping with rows not flushed");
        }
        left
    }

    /// Merges a submitted batch into `next`, within its bounds.
    fn take(&mut self, batch: Batch) {
        let rows = batch.rows() as u64;
        let (total, per_user) = (
            self.config.max_pending_entries,
            self.config.max_pending_entries_per_user,
        );
        let mut held =
            self.next.peers.len() + self.next.history.len() + self.next.unregistered.len();
        let counts = &mut self.next_per_user;
        let dropped = self.next.merge_bounded(batch, &self.config.rules, |user| {
            let mine = counts.entry(user).or_insert(0);
            let fits = (total == 0 || held < total) && (per_user == 0 || *mine < per_user);
            if fits {
                *mine += 1;
                held += 1;
            }
            fits
        });
        if dropped > 0 {
            self.shared
                .entries_dropped
                .fetch_add(dropped as u64, Relaxed);
        }
        self.count_pending();
        self.shared.queued_rows.fetch_sub(rows, SeqCst);
    }

    fn count_pending(&self) {
        let rows = self.pending.iter().map(|n| n.batch.rows()).sum::<usize>() + self.next.rows();
        self.shared.held_rows.store(rows as u64, SeqCst);
    }
}

impl FlusherHandle {
    /// Hands a batch to the database thread. Never blocks: the thread
    /// merges it into the next flush, so memory grows with the distinct
    /// keys, not with the submissions. While the thread is held up (a
    /// statement waiting out its timeout, a log it cannot write) batches
    /// wait in the channel: past `max_pending_entries` of them, a batch is
    /// dropped and counted, as the thread drops keys past its bound.
    pub fn submit(&self, batch: Batch) {
        if batch.is_empty() {
            return;
        }
        let rows = batch.rows() as u64;
        let max = self.shared.max_queued;
        if max != 0 && self.shared.queued_rows.load(SeqCst) + rows > max {
            self.shared.entries_dropped.fetch_add(rows, Relaxed);
            return;
        }
        self.shared.queued_rows.fetch_add(rows, SeqCst);
        // Fails only once the thread has ended, which only stop (taking
        // the handle) makes happen.
        if self.sender.send(Message::Batch(Box::new(batch))).is_err() {
            self.shared.queued_rows.fetch_sub(rows, SeqCst);
        }
    }

    pub fn stats(&self) -> FlusherStats {
        let s = &self.shared;
        FlusherStats {
            flushes_applied: s.flushes_applied.load(Relaxed),
            flushes_already_applied: s.flushes_already_applied.load(Relaxed),
            leftover_dropped: s.leftover_dropped.load(Relaxed),
            failures: s.failures.load(Relaxed),
            refused: s.refused.load(Relaxed),
            consecutive_failures: s.consecutive_failures.load(Relaxed),
            rows_written: s.rows_written.load(Relaxed),
            rows_skipped: s.rows_skipped.load(Relaxed),
            peers_superseded: s.peers_superseded.load(Relaxed),
            entries_dropped: s.entries_dropped.load(Relaxed),
            credited: {
                let [up, down, actual_up, actual_down, seedtime] =
                    s.credited.each_ref().map(|n| n.load(Relaxed));
                Credit {
                    uploaded: up,
                    downloaded: down,
                    actual_uploaded: actual_up,
                    actual_downloaded: actual_down,
                    seedtime,
                    completed: false,
                }
            },
            pending_rows: s.queued_rows.load(SeqCst) + s.held_rows.load(SeqCst),
            last_success_unix: s.last_success_unix.load(Relaxed),
            last_sequence: s.last_sequence.load(Relaxed),
            reachable: s.reachable.load(Relaxed),
        }
    }

    /// Flushes what the thread holds (the numbered batches, then the rest)
    /// until all is written or `deadline` passes, ends the thread and
    /// returns what is left unwritten, for the state file and the next
    /// [`Flusher::spawn`]. Blocks: call it off the executors. A statement
    /// under way at the deadline may hold it up to the connection's I/O
    /// timeout longer.
    pub fn stop(mut self, deadline: Instant) -> Leftover {
        let _ = self.sender.send(Message::Stop(deadline));
        match self.thread.take().map(JoinHandle::join) {
            Some(Ok(left)) => left,
            Some(Err(_)) | None => {
                tracing::error!("the database thread died: its unflushed rows are lost");
                Vec::new()
            }
        }
    }
}

fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_handle_can_be_shared_by_the_executors() {
        fn shared<T: Send + Sync>() {}
        shared::<FlusherHandle>();
        shared::<FlusherStats>();
    }
}
