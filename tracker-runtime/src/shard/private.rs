//! Private mode at the owner of a torrent: the site's view (shared by every
//! worker, replaced whole when the site API changes it), and this worker's
//! ledger, which checks, accounts and credits each announce before the swarm
//! store takes it. Its batches go to the database thread through a
//! [`BatchSink`], every flush interval.

use super::*;
use crate::metrics::{PRIVATE_ANNOUNCES, PRIVATE_LEDGER_PEERS, PRIVATE_UNREGISTERED_DROPPED};
use std::cell::OnceCell;
use tracker_private::lists::ListRates;
use tracker_private::quota::UnregisteredQuota;
use tracker_private::slots::LeechingCounts;
use tracker_private::{
    Batch, Ledger, LedgerConfig, PeerKey, PeerRow, RefusalKind, Site, TorrentId, UserId,
};
use tracker_proto::AnnounceEvent;

/// Where a worker's batches go: the database thread. `submit` must never
/// block (the caller is an executor).
pub trait BatchSink: Send + Sync {
    fn submit(&self, batch: Batch);
}

crate::counters! {
    /// What private mode did with announces, on this worker as owner.
    pub struct PrivateStats {
        pub admitted: Counter => PRIVATE_ANNOUNCES { outcome = "admitted" },
        pub flagged: Counter => PRIVATE_ANNOUNCES { outcome = "flagged" },
        pub too_soon: Counter => PRIVATE_ANNOUNCES { outcome = "too_soon" },
        pub seed_list_refused: Counter => PRIVATE_ANNOUNCES { outcome = "seed_list_limited" },
        pub leech_list_refused: Counter => PRIVATE_ANNOUNCES { outcome = "leech_list_limited" },
        pub blacklisted: Counter => PRIVATE_ANNOUNCES { outcome = "blacklisted" },
        pub unknown_torrent: Counter => PRIVATE_ANNOUNCES { outcome = "unknown_torrent" },
        pub torrent_state: Counter => PRIVATE_ANNOUNCES { outcome = "torrent_state" },
        pub unknown_user: Counter => PRIVATE_ANNOUNCES { outcome = "unknown_user" },
        pub user_state: Counter => PRIVATE_ANNOUNCES { outcome = "user_state" },
        /// A stop of a peer this worker did not know: admitted, and
        /// credited at the flush if the database has its row.
        pub stopped_unknown: Counter => PRIVATE_ANNOUNCES { outcome = "stopped_peer_missing" },
        pub too_many_peers: Counter => PRIVATE_ANNOUNCES { outcome = "too_many_peers" },
        /// Past the accounts a torrent or the worker may hold.
        pub tracker_full: Counter => PRIVATE_ANNOUNCES { outcome = "tracker_full" },
        /// Leechers past their download slots: accounted, handed no peers.
        pub slot_limited: Counter => PRIVATE_ANNOUNCES { outcome = "slot_limited" },
    }
}

impl PrivateStats {
    fn refused(&self, kind: RefusalKind) {
        match kind {
            RefusalKind::Blacklisted => self.blacklisted.inc(),
            RefusalKind::UnknownTorrent => self.unknown_torrent.inc(),
            RefusalKind::TorrentState => self.torrent_state.inc(),
            RefusalKind::UnknownUser => self.unknown_user.inc(),
            RefusalKind::UserState => self.user_state.inc(),
            RefusalKind::TooManyPeers => self.too_many_peers.inc(),
            RefusalKind::Full => self.tracker_full.inc(),
        }
    }
}

/// A worker's private mode.
pub struct PrivateShard {
    site: RefCell<LocalCopy<Site>>,
    ledger: RefCell<Ledger>,
    sink: Arc<dyn BatchSink>,
    /// The shortest wait between a peer's announces that is not held
    /// back (the ledger's), for the answers' `min interval`; 0: none.
    min_interval: u32,
    pub stats: PrivateStats,
}

impl Shard {
    /// Makes this worker's shard private: every worker must, before serving.
    pub fn set_private(
        &self,
        site: Arc<Reloadable<Site>>,
        config: LedgerConfig,
        slots: Arc<LeechingCounts>,
        lists: Arc<ListRates>,
        quota: Arc<UnregisteredQuota>,
        sink: Arc<dyn BatchSink>,
    ) {
        let min_interval = u32::try_from(config.min_announce_interval).unwrap_or(u32::MAX);
        let _ = self.private.set(PrivateShard {
            site: RefCell::new(LocalCopy::new(site)),
            ledger: RefCell::new(
                Ledger::new(config)
                    .with_seed(clock::unix_micros() ^ (self.index as u64).rotate_left(32))
                    .with_slots(slots)
                    .with_lists(lists)
                    .with_quota(quota),
            ),
            sink,
            min_interval,
            stats: PrivateStats::default(),
        });
    }

    /// Takes back the peers active at the last stop (see
    /// `Ledger::restore`), before serving.
    pub fn restore_private(&self, peers: impl IntoIterator<Item = (PeerKey, PeerRow)>) {
        if let Some(private) = self.private.get() {
            let mut ledger = private.ledger.borrow_mut();
            for (key, row) in peers {
                ledger.restore(key, &row);
            }
        }
    }

    pub fn private(&self) -> Option<&PrivateShard> {
        self.private.get()
    }

    /// A private announce to a torrent of this shard: its ledger checks and
    /// accounts it, and draws its peers. The swarm store is not used: a
    /// private torrent's swarm is its accounts, one per user and peer id.
    fn private_announce_local(
        &self,
        req: &PrivateRequest,
        peers: &mut AnswerPeers,
    ) -> Result<PrivateCounts, PrivateRefused> {
        let Some(private) = self.private.get() else {
            peers.reset(IpFamily::of(req.announce.peer_addr.ip()));
            return Err(PrivateRefused::Store(AnnounceRefused::NotAllowed));
        };
        // Borrowed, not cloned: a clone of the shared Arc per announce would
        // bounce its count's cache line between every worker's CPU.
        let mut site = private.site.borrow_mut();
        let admitted = private.ledger.borrow_mut().announce(
            site.get().as_ref(),
            &req.account,
            clock::unix_micros(),
            peers,
        );
        drop(site);
        let s = &private.stats;
        let admitted = match admitted {
            Ok(admitted) => admitted,
            Err(refusal) => {
                s.refused(refusal.kind());
                return Err(PrivateRefused::Site(refusal));
            }
        };
        s.admitted.inc();
        if admitted.flagged {
            s.flagged.inc();
        }
        if admitted.new_peer && req.account.event == AnnounceEvent::Stopped {
            s.stopped_unknown.inc();
        }
        let counts = SwarmCounts {
            seeders: admitted.seeders,
            leechers: admitted.leechers,
        };
        let answer = |swarm, warning| PrivateCounts {
            swarm,
            times_completed: admitted.times_completed,
            warning,
        };
        // A leecher past its download slots, accounted, gets no peers and
        // the site's words: UNIT3D-Announce's warning beside the counts, or
        // Ocelot's failure.
        if admitted.hidden {
            s.slot_limited.inc();
            let refusal = admitted.slot_refusal;
            if !refusal.answers_with_counts() {
                return Err(PrivateRefused::Site(refusal));
            }
            return Ok(answer(counts, Some(refusal)));
        }
        if admitted.too_soon {
            s.too_soon.inc();
            return Ok(answer(SwarmCounts::default(), None));
        }
        // A list refused is not hinted at by its count either, as
        // UNIT3D-Announce answers it.
        if admitted.seed_list_refused {
            s.seed_list_refused.inc();
        }
        if admitted.leech_list_refused {
            s.leech_list_refused.inc();
        }
        Ok(answer(
            SwarmCounts {
                seeders: if admitted.seed_list_refused {
                    0
                } else {
                    counts.seeders
                },
                leechers: if admitted.leech_list_refused {
                    0
                } else {
                    counts.leechers
                },
            },
            None,
        ))
    }

    /// A private announce to a torrent of this shard, answered at once
    /// through `answer` (the peers in the buffer every local announce
    /// reuses); `None` when another worker owns the torrent.
    pub fn private_announce_here<R>(
        &self,
        req: &PrivateRequest,
        answer: impl FnOnce(Result<PrivateCounts, PrivateRefused>, &AnswerPeers) -> R,
    ) -> Option<R> {
        if !self.is_local(&req.announce.info_hash) {
            return None;
        }
        let mut peers = self.peers_scratch.borrow_mut();
        let counts = self.private_announce_local(req, &mut peers);
        Some(answer(counts, &peers))
    }

    /// A private announce to any torrent, here or at its owner.
    pub async fn private_announce<R>(
        &self,
        req: PrivateRequest,
        answer: impl FnOnce(Result<PrivateCounts, PrivateRefused>, &AnswerPeers) -> R,
    ) -> Result<R, RouteError> {
        let owner = self.owner(&req.announce.info_hash);
        if owner == self.index {
            let mut peers = self.peers_scratch.borrow_mut();
            let counts = self.private_announce_local(&req, &mut peers);
            return Ok(answer(counts, &peers));
        }
        match self
            .ask(owner, ShardRequest::PrivateAnnounce(Box::new(req)))
            .await?
            .await?
        {
            ShardReply::PrivateAnnounce(Ok((counts, peers))) => Ok(answer(Ok(counts), &peers)),
            ShardReply::PrivateAnnounce(Err(refused)) => {
                Ok(answer(Err(refused), &AnswerPeers::default()))
            }
            _ => Err(RouteError::Failed),
        }
    }

    /// Answers a question about this worker's ledger.
    pub(super) fn private_query_here(&self, query: PrivateQuery) -> PrivateAnswer {
        let ledger = self.private.get().map(|p| p.ledger.borrow());
        match (query, ledger) {
            (PrivateQuery::User(user), Some(ledger)) => {
                let (seeding, leeching) = ledger.user_counts(user);
                PrivateAnswer::User { seeding, leeching }
            }
            (PrivateQuery::Torrent(torrent), Some(ledger)) => {
                let (seeders, leechers) = ledger.counts(torrent);
                PrivateAnswer::Torrent {
                    seeders,
                    leechers,
                    snatches: ledger.snatches(torrent),
                    peers: ledger.peers_of(torrent).collect(),
                }
            }
            (PrivateQuery::User(_), None) => PrivateAnswer::User {
                seeding: 0,
                leeching: 0,
            },
            (PrivateQuery::Torrent(_), None) => PrivateAnswer::Torrent {
                seeders: 0,
                leechers: 0,
                snatches: 0,
                peers: Vec::new(),
            },
        }
    }

    /// A user's seeding and leeching peers, on every worker.
    pub async fn private_user(&self, user: UserId) -> Result<(u32, u32), RouteError> {
        let mut asked = Vec::new();
        for owner in (0..self.workers).filter(|&owner| owner != self.index) {
            asked.push(
                self.ask(owner, ShardRequest::PrivateQuery(PrivateQuery::User(user)))
                    .await?,
            );
        }
        let mut answers = vec![self.private_query_here(PrivateQuery::User(user))];
        for reply in asked {
            match reply.await? {
                ShardReply::PrivateQuery(answer) => answers.push(answer),
                _ => return Err(RouteError::Failed),
            }
        }
        let mut total = (0, 0);
        for answer in answers {
            if let PrivateAnswer::User { seeding, leeching } = answer {
                total = (total.0 + seeding, total.1 + leeching);
            }
        }
        Ok(total)
    }

    /// A torrent's peers and snatches, from its owner.
    pub async fn private_torrent(
        &self,
        torrent: TorrentId,
        info_hash: &InfoHash,
    ) -> Result<PrivateAnswer, RouteError> {
        let owner = self.owner(info_hash);
        let query = PrivateQuery::Torrent(torrent);
        if owner == self.index {
            return Ok(self.private_query_here(query));
        }
        match self
            .ask(owner, ShardRequest::PrivateQuery(query))
            .await?
            .await?
        {
            ShardReply::PrivateQuery(answer) => Ok(answer),
            _ => Err(RouteError::Failed),
        }
    }

    /// The private swarms' torrents, seeders and leechers, when private
    /// mode is on.
    pub(super) fn private_swarms(&self) -> Option<(u64, u64, u64)> {
        let ledger = self.private.get()?.ledger.borrow();
        let (seeders, leechers) = ledger.listed();
        Some((ledger.torrents() as u64, seeders, leechers))
    }

    /// The private mode's samples, when on.
    pub(super) fn private_samples(&self, out: &mut Vec<Sample>) {
        if let Some(private) = self.private.get() {
            private.stats.samples(&[], out);
            let ledger = private.ledger.borrow();
            out.push(Sample::new(
                &PRIVATE_LEDGER_PEERS,
                &[],
                ledger.accounts() as u64,
            ));
            out.push(Sample::new(
                &PRIVATE_UNREGISTERED_DROPPED,
                &[],
                ledger.unregistered_dropped(),
            ));
        }
    }

    /// Serves another worker's private announce (see `exchange`).
    pub(super) fn serve_private(&self, req: &PrivateRequest) -> ShardReply {
        let mut peers = AnswerPeers::default();
        let answer = self
            .private_announce_local(req, &mut peers)
            .map(|counts| (counts, peers));
        ShardReply::PrivateAnnounce(answer)
    }

    /// Hands what the ledger merged since the last call to the database
    /// thread, and forgets peers silent for the active TTL (a bounded step).
    pub fn flush_private(&self) {
        let Some(private) = self.private.get() else {
            return;
        };
        let mut ledger = private.ledger.borrow_mut();
        ledger.expire_some(clock::unix_secs(), EXPIRE_STEP);
        let batch = ledger.take_batch();
        drop(ledger);
        if !batch.is_empty() {
            private.sink.submit(batch);
        }
    }

    /// Every `interval`, [`flush_private`](Self::flush_private), until the
    /// worker stops (the caller's last call takes the rest).
    pub async fn flush_private_forever(self: Rc<Self>, interval: Duration) {
        loop {
            glommio::timer::sleep(interval).await;
            self.flush_private();
        }
    }
}

impl PrivateShard {
    /// The `min interval` of private answers: announcing sooner gets no
    /// peers; None when nothing is held back.
    pub fn min_interval(&self) -> Option<u32> {
        (self.min_interval > 0).then_some(self.min_interval)
    }
}

/// Peers the ledger looks at for expiry per flush: a bounded step of work
/// on the executor (expired ones wait for the next step).
const EXPIRE_STEP: usize = 65_536;

/// Cells only set once, as above.
pub(super) type PrivateCell = OnceCell<PrivateShard>;
