//! A worker's shard: its swarm store, and the routing of every request to
//! the worker that owns its torrent, over the meshes (see `mesh`). Requests
//! for this shard are answered here at once; others are sent to their owner
//! and their answers awaited, within the bound `runtime.max_forwarded` sets.

use crate::access::AccessList;
use crate::clock;
use crate::config::ExemptNetworks;
use crate::contain::contain;
use crate::counters::MeshStats;
use crate::mesh::{AnnounceAnswers, Envelope, Meshes, RouteError, ShardReply, ShardRequest};
use crate::metrics::{MetricSource, Sample, PEERS, STORE_FULL, TORRENTS};
use crate::owner::Owners;
use crate::quantum::waited;
use crate::quantum::Quantum;
use crate::reloadable::{LocalCopy, Reloadable};
use crate::throttle::LogThrottle;
use glommio::channels::channel_mesh::Senders;
use glommio::{GlommioError, ResourceType};
use slab::Slab;
use std::cell::{Cell, RefCell};
use std::future::Future;
use std::net::{IpAddr, SocketAddr};
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::sync::Arc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tracker_proto::{
    Announce, AnnounceAnswer, AnswerPeers, BlockLevel, InfoHash, IpFamily, ScrapeStats,
};
use tracker_swarm::{AnnounceRefused, HandOut, SwarmCounts, SwarmStore};

mod exchange;
mod private;
mod rtc;

use crate::mesh::Swarms;
pub use crate::mesh::{PrivateAnswer, PrivateCounts, PrivateQuery, PrivateRefused, PrivateRequest};
use exchange::{PendingReply, Waiting};
pub use private::{BatchSink, PrivateShard, PrivateStats};
use rtc::ONE_WAY;
pub use rtc::{RelaySink, RelayStats};

/// One worker's shard: its swarm store, and its links to the owners of every
/// other shard. Used only on its own executor (it is `!Send`).
pub struct Shard {
    index: usize,
    workers: usize,
    owners: Owners,
    store: RefCell<SwarmStore>,
    to_owners: Option<Senders<Envelope<ShardRequest>>>,
    waiting: RefCell<Slab<Waiting>>,
    /// The sum of `Waiting::requests`, held under `max_waiting`.
    waiting_requests: Cell<usize>,
    max_waiting: usize,
    peers_scratch: RefCell<AnswerPeers>,
    /// What `prefetch` hands the store, kept to spare an allocation a batch.
    ahead_scratch: RefCell<Vec<(InfoHash, SocketAddr)>>,
    /// This worker's view of the access list; None when lists are off, so
    /// that then no announce pays for a look.
    access: Option<RefCell<LocalCopy<AccessList>>>,
    /// Clients that no limit per client counts (`runtime.exempt_networks`):
    /// the store's are decided here, announce by announce.
    exempt: ExemptNetworks,
    pub stats: MeshStats,
    pub relay_stats: RelayStats,
    /// Where relays for this worker's WebSocket connections go. Weak: the
    /// service holds the shard.
    relay_sink: RefCell<Option<Weak<dyn RelaySink>>>,
    /// Relays gathered for each other worker, sent by `flush_relays`.
    relays_out: RefCell<Vec<Vec<crate::mesh::Relay>>>,
    /// The peers a WebSocket announce's offers go to, kept to spare an
    /// allocation an announce.
    receivers_scratch: RefCell<Vec<(tracker_proto::PeerId, tracker_swarm::ConnectionRef)>>,
    /// The worker's services, whose counters every scrape includes. Weak:
    /// they hold the shard.
    metric_sources: RefCell<Vec<Weak<dyn MetricSource>>>,
    /// Private mode, when on (set once, before serving).
    private: private::PrivateCell,
}

/// Says, once a minute at most (the first at once), that a budget of new
/// torrents refused a client: a load test from one machine trips it and
/// looks like a broken tracker, so the line says which limit it was and how
/// to exempt such a load.
fn budget_spent(ip: IpAddr, level: BlockLevel, budget: Option<u32>) {
    static THROTTLE: LogThrottle = LogThrottle::new();
    if let Some(left_out) = THROTTLE.allow() {
        let width = level.as_str();
        tracing::warn!(
            "new torrents refused: the {width} of {ip} (/{prefix}) created its budget of \
             swarm.new_torrents_per_{width}_per_minute = {budget} this minute on a worker \
             ({left_out} more refusals, of any client, since the last such line); \
             clients retry later. For a load test from this host, exempt it: \
             runtime.exempt_networks = [\"127.0.0.0/8\", \"::1\"]",
            prefix = level.prefix(ip.is_ipv4()),
            budget = budget.unwrap_or_default(),
        );
    }
}

/// The counts of one torrent's swarm of the kind a protocol counts.
fn scrape_in(store: &SwarmStore, swarms: Swarms, info_hash: &InfoHash) -> ScrapeStats {
    match swarms {
        Swarms::BitTorrent => store.scrape(info_hash),
        Swarms::WebRtc => store.rtc_scrape(info_hash),
    }
}

/// How often a worker looks whether a new access list was published, to drop
/// the torrents it refuses. Announces see a new list at once (they look at its
/// generation every time); this only bounds how long refused torrents linger
/// in the store and in scrapes.
const ACCESS_POLL: Duration = Duration::from_millis(100);

impl Shard {
    /// Joins the meshes (every worker must call this, or the others wait
    /// forever) and starts the tasks that serve other workers' requests and
    /// deliver their answers to ours. `access` is the shared access list, None
    /// when access lists are off. `owners` must be the same on every worker.
    /// `exempt`: the clients whose announces count against no limit per
    /// client of the store.
    pub async fn join(
        index: usize,
        meshes: Meshes,
        owners: Owners,
        store: SwarmStore,
        max_waiting: usize,
        access: Option<Arc<Reloadable<AccessList>>>,
        exempt: ExemptNetworks,
    ) -> Result<Rc<Shard>, String> {
        let workers = meshes.workers;
        if owners.workers() != workers {
            return Err(format!(
                "torrents shared among {} workers, but {workers} in the mesh",
                owners.workers()
            ));
        }
        let (to_owners, reply_senders, request_streams, reply_streams) = if workers > 1 {
            let ((req_tx, mut req_rx), (rep_tx, mut rep_rx)) = meshes.join().await?;
            debug_assert_eq!(req_tx.peer_id(), index);
            (
                Some(req_tx),
                Some(rep_tx),
                req_rx.streams(),
                rep_rx.streams(),
            )
        } else {
            (None, None, Vec::new(), Vec::new())
        };
        let shard = Rc::new(Shard {
            index,
            workers,
            owners,
            store: RefCell::new(store),
            to_owners,
            waiting: RefCell::new(Slab::new()),
            waiting_requests: Cell::new(0),
            max_waiting,
            peers_scratch: RefCell::new(AnswerPeers::default()),
            ahead_scratch: RefCell::new(Vec::new()),
            access: access.map(|shared| RefCell::new(LocalCopy::new(shared))),
            exempt,
            stats: MeshStats::default(),
            relay_stats: RelayStats::default(),
            relay_sink: RefCell::new(None),
            relays_out: RefCell::new(Vec::new()),
            receivers_scratch: RefCell::new(Vec::new()),
            metric_sources: RefCell::new(Vec::new()),
            private: private::PrivateCell::new(),
        });
        let reply_senders = reply_senders.map(Rc::new);
        for (from, stream) in request_streams {
            let shard = shard.clone();
            let Some(reply_senders) = reply_senders.clone() else {
                return Err("request streams without answer senders".into());
            };
            glommio::spawn_local(async move {
                // Counted as the worker's other work: a busy UDP loop takes
                // turns of the reactor more often while there is some.
                while let (Some(Envelope { token, body }), _) = waited(stream.recv()).await {
                    let one_way = token == ONE_WAY;
                    if !one_way {
                        shard.stats.served_for_others.add(body.requests() as u64);
                    }
                    // A panic while serving still answers, so that the asker
                    // never waits for an answer that cannot come.
                    let body = match contain(&shard.stats.panics, || shard.serve(body)) {
                        _ if one_way => continue,
                        Some(Some(body)) => body,
                        Some(None) | None => ShardReply::Failed,
                    };
                    if reply_senders
                        .send_to(from, Envelope { token, body })
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            })
            .detach();
        }
        for (_, stream) in reply_streams {
            let shard = shard.clone();
            glommio::spawn_local(async move {
                while let (Some(Envelope { token, body }), _) = waited(stream.recv()).await {
                    shard.deliver(token, body);
                }
            })
            .detach();
        }
        Ok(shard)
    }

    pub fn index(&self) -> usize {
        self.index
    }

    pub fn workers(&self) -> usize {
        self.workers
    }

    /// The worker that owns `info_hash`.
    pub fn owner(&self, info_hash: &InfoHash) -> usize {
        self.owners.of(info_hash)
    }

    pub fn is_local(&self, info_hash: &InfoHash) -> bool {
        self.owner(info_hash) == self.index
    }

    /// Whether the access list (if any) lets announces for `info_hash` in:
    /// one relaxed atomic load and one set lookup, nothing when lists are off.
    #[inline]
    pub fn allows(&self, info_hash: &InfoHash) -> bool {
        match &self.access {
            None => true,
            Some(access) => access.borrow_mut().get().allows(info_hash),
        }
    }

    /// Announces to a torrent of this shard, writing peers into `peers`; no
    /// allocation once `peers` has grown.
    ///
    /// The access list is checked here, at the owner, and only here: so every
    /// announce pays for one lookup, and no torrent a list refuses is ever
    /// stored, whichever worker received the announce and whatever list that
    /// worker has seen so far. A refused announce from another worker costs
    /// that worker a mesh round trip, which is the rare case.
    pub fn announce_local(
        &self,
        req: &Announce,
        peers: &mut AnswerPeers,
    ) -> Result<SwarmCounts, AnnounceRefused> {
        debug_assert!(self.is_local(&req.info_hash));
        if !self.allows(&req.info_hash) {
            peers.reset(IpFamily::of(req.peer_addr.ip()));
            return Err(AnnounceRefused::NotAllowed);
        }
        self.announce_unchecked(req, HandOut::ALL, peers)
    }

    /// An announce to a torrent of this shard that the access list (or, in
    /// private mode, the site) allowed.
    fn announce_unchecked(
        &self,
        req: &Announce,
        hand_out: HandOut,
        peers: &mut AnswerPeers,
    ) -> Result<SwarmCounts, AnnounceRefused> {
        let ip = req.peer_addr.ip();
        let quota = self.exempt.quota(ip);
        let mut store = self.store.borrow_mut();
        // Debug builds only: lets tests make a request panic here, with the
        // store borrowed, to prove that the panic is contained and the borrow
        // released.
        crate::contain::test_panic_hook(&req.info_hash);
        let answer = store.announce_as(req, clock::now_secs(), quota, hand_out, peers);
        if let Err(AnnounceRefused::AddressBudget(level)) = answer {
            let budgets = store.limits().new_torrents_per_minute;
            budget_spent(ip, level, budgets.get(level as usize).copied());
        }
        answer
    }

    /// Starts loading what a batch of announces to come will read, each its
    /// torrent, of this shard, and the peer's address (see
    /// `SwarmStore::prefetch`).
    pub fn prefetch(&self, announces: impl IntoIterator<Item = (InfoHash, SocketAddr)>) {
        let mut ahead = self.ahead_scratch.borrow_mut();
        ahead.clear();
        ahead.extend(announces);
        debug_assert!(ahead.iter().all(|(h, _)| self.is_local(h)));
        self.store.borrow().prefetch(&ahead);
    }

    /// Scrape counts of a torrent of this shard.
    pub fn scrape_local(&self, info_hash: &InfoHash) -> ScrapeStats {
        debug_assert!(self.is_local(info_hash));
        self.store.borrow().scrape(info_hash)
    }

    /// Runs `f` on this worker's store (for clean-up and statistics).
    pub fn with_store<R>(&self, f: impl FnOnce(&mut SwarmStore) -> R) -> R {
        f(&mut self.store.borrow_mut())
    }

    /// Announces to a torrent of this shard and hands the counts and peers to
    /// `answer` (which writes the reply); `None` when another worker owns the
    /// torrent. The peers live in a buffer that every local announce reuses,
    /// so the common path does not allocate.
    pub fn announce_here<R>(
        &self,
        req: &Announce,
        answer: impl FnOnce(Result<SwarmCounts, AnnounceRefused>, &AnswerPeers) -> R,
    ) -> Option<R> {
        if !self.is_local(&req.info_hash) {
            return None;
        }
        let mut peers = self.peers_scratch.borrow_mut();
        let counts = self.announce_local(req, &mut peers);
        Some(answer(counts, &peers))
    }

    /// Announces to any torrent, here or at its owner, and hands the counts
    /// and peers to `answer`.
    pub async fn announce<R>(
        &self,
        req: Announce,
        answer: impl FnOnce(Result<SwarmCounts, AnnounceRefused>, &AnswerPeers) -> R,
    ) -> Result<R, RouteError> {
        let owner = self.owner(&req.info_hash);
        if owner == self.index {
            let mut peers = self.peers_scratch.borrow_mut();
            let counts = self.announce_local(&req, &mut peers);
            return Ok(answer(counts, &peers));
        }
        match self.ask(owner, ShardRequest::Announce(req)).await?.await? {
            ShardReply::Announce(Ok(a)) => {
                let counts = SwarmCounts {
                    seeders: a.seeders,
                    leechers: a.leechers,
                };
                Ok(answer(Ok(counts), &a.peers))
            }
            ShardReply::Announce(Err(refused)) => Ok(answer(Err(refused), &AnswerPeers::default())),
            _ => Err(RouteError::Failed),
        }
    }

    /// Announces to torrents that `owner`, another worker, owns, all in one
    /// request (see `ShardRequest::Announces`); the answers come in the
    /// order of `batch`. A batch that would take the requests waiting past
    /// `runtime.max_forwarded` is refused whole (one alone goes, whatever
    /// its size).
    pub async fn announce_at(
        &self,
        owner: usize,
        batch: Vec<Announce>,
    ) -> Result<AnnounceAnswers, RouteError> {
        debug_assert!(owner != self.index);
        debug_assert!(batch.iter().all(|a| self.owner(&a.info_hash) == owner));
        let asked = batch.len();
        match self
            .ask(owner, ShardRequest::Announces(batch))
            .await?
            .await?
        {
            ShardReply::Announces(answers) if answers.len() == asked => Ok(answers),
            _ => Err(RouteError::Failed),
        }
    }

    /// Scrapes any torrents; `out` receives their counts in the order of
    /// `hashes`. Hashes of other shards go to their owners, all at once.
    pub async fn scrape(
        &self,
        hashes: &[InfoHash],
        out: &mut Vec<ScrapeStats>,
    ) -> Result<(), RouteError> {
        self.scrape_of(Swarms::BitTorrent, hashes, out).await
    }

    /// Counts of `swarms` of torrents of this shard, in the order of `hashes`.
    fn scrape_here(&self, swarms: Swarms, hashes: &[InfoHash]) -> Vec<ScrapeStats> {
        let store = self.store.borrow();
        hashes
            .iter()
            .map(|h| scrape_in(&store, swarms, h))
            .collect()
    }

    /// Counts of `swarms` of up to `max` torrents of this shard.
    fn scrape_some_here(&self, swarms: Swarms, max: usize, out: &mut Vec<(InfoHash, ScrapeStats)>) {
        let store = self.store.borrow();
        match swarms {
            Swarms::BitTorrent => store.scrape_some(max, out),
            Swarms::WebRtc => store.rtc_scrape_some(max, out),
        }
    }

    async fn scrape_of(
        &self,
        swarms: Swarms,
        hashes: &[InfoHash],
        out: &mut Vec<ScrapeStats>,
    ) -> Result<(), RouteError> {
        out.clear();
        out.resize(hashes.len(), ScrapeStats::default());
        let mut asked: Vec<(Vec<usize>, PendingReply<'_>)> = Vec::new();
        let mut by_owner: Vec<(Vec<usize>, Vec<InfoHash>)> = Vec::new();
        for (i, hash) in hashes.iter().enumerate() {
            let owner = self.owner(hash);
            if owner == self.index {
                if let Some(slot) = out.get_mut(i) {
                    debug_assert!(self.is_local(hash));
                    *slot = scrape_in(&self.store.borrow(), swarms, hash);
                }
            } else {
                if by_owner.is_empty() {
                    by_owner.resize_with(self.workers, Default::default);
                }
                if let Some((positions, owner_hashes)) = by_owner.get_mut(owner) {
                    positions.push(i);
                    owner_hashes.push(*hash);
                }
            }
        }
        for (owner, (positions, owner_hashes)) in by_owner.into_iter().enumerate() {
            if !positions.is_empty() {
                let request = ShardRequest::Scrape(swarms, owner_hashes);
                asked.push((positions, self.ask(owner, request).await?));
            }
        }
        for (positions, reply) in asked {
            match reply.await? {
                ShardReply::Scrape(stats) => {
                    for (pos, stat) in positions.into_iter().zip(stats) {
                        if let Some(slot) = out.get_mut(pos) {
                            *slot = stat;
                        }
                    }
                }
                _ => return Err(RouteError::Failed),
            }
        }
        Ok(())
    }

    /// Appends the counts of up to `max` torrents of all shards to `out` (a
    /// bounded full scrape): each owner is asked for up to `max` of its own,
    /// all at once, and the whole is cut to `max`.
    pub async fn scrape_some(
        &self,
        max: usize,
        out: &mut Vec<(InfoHash, ScrapeStats)>,
    ) -> Result<(), RouteError> {
        self.scrape_some_of(Swarms::BitTorrent, max, out).await
    }

    async fn scrape_some_of(
        &self,
        swarms: Swarms,
        max: usize,
        out: &mut Vec<(InfoHash, ScrapeStats)>,
    ) -> Result<(), RouteError> {
        let start = out.len();
        self.scrape_some_here(swarms, max, out);
        let mut asked = Vec::new();
        for owner in (0..self.workers).filter(|&owner| owner != self.index) {
            asked.push(
                self.ask(owner, ShardRequest::ScrapeSome(swarms, max))
                    .await?,
            );
        }
        for reply in asked {
            match reply.await? {
                ShardReply::ScrapeSome(counts) => out.extend(counts),
                _ => return Err(RouteError::Failed),
            }
        }
        out.truncate(start + max);
        Ok(())
    }

    /// Includes `source`'s counters in every scrape of this worker.
    pub fn add_metric_source(&self, source: Weak<dyn MetricSource>) {
        self.metric_sources.borrow_mut().push(source);
    }

    /// Appends this worker's metrics: those of every registered service,
    /// the mesh's counters and the store's gauges.
    pub fn samples(&self, out: &mut Vec<Sample>) {
        for source in self.metric_sources.borrow().iter() {
            if let Some(source) = source.upgrade() {
                source.samples(out);
            }
        }
        self.stats.samples(&[], out);
        let store = self.store.borrow();
        let full = &store.stats;
        for (labels, count) in [
            (&[("kind", "torrent_refused")], full.refused_torrents),
            (&[("kind", "peer_not_stored")], full.unstored_peers),
            (&[("kind", "peers_per_address")], full.address_peers),
            (&[("kind", "peers_per_network")], full.network_peers),
            (&[("kind", "torrent_budget")], full.torrent_budget),
            (&[("kind", "torrent_evicted")], full.evicted_torrents),
        ] {
            out.push(Sample::new(&STORE_FULL, labels, count));
        }
        // A private tracker's swarms are its ledger's (the store holds
        // none of them).
        let (torrents, seeders, leechers) = match self.private_swarms() {
            Some(swarms) => swarms,
            None => {
                let peers = store.peer_count();
                (
                    store.torrent_count() as u64,
                    peers.seeders as u64,
                    peers.leechers as u64,
                )
            }
        };
        out.push(Sample::new(&TORRENTS, &[], torrents));
        out.push(Sample::new(&PEERS, &[("role", "seeder")], seeders));
        out.push(Sample::new(&PEERS, &[("role", "leecher")], leechers));
        self.rtc_samples(&store, out);
        self.private_samples(out);
    }

    /// The metrics of every worker, by worker index, asked of all at once.
    pub async fn metrics(&self) -> Result<Vec<(usize, Vec<Sample>)>, RouteError> {
        let mut asked = Vec::new();
        for owner in (0..self.workers).filter(|&owner| owner != self.index) {
            asked.push((owner, self.ask(owner, ShardRequest::Metrics).await?));
        }
        let mut own = Vec::new();
        self.samples(&mut own);
        let mut all = vec![(self.index, own)];
        for (owner, reply) in asked {
            match reply.await? {
                ShardReply::Metrics(samples) => all.push((owner, samples)),
                _ => return Err(RouteError::Failed),
            }
        }
        all.sort_by_key(|(worker, _)| *worker);
        Ok(all)
    }

    /// Drops expired peers and empty torrents, one segment of the store at a
    /// time, so that a pass over the whole shard takes `period` and no request
    /// ever waits behind more than one segment's small torrents or one window
    /// of a large one.
    pub async fn clean_forever(self: Rc<Self>, period: Duration) {
        let pause = period / SwarmStore::SEGMENTS as u32;
        loop {
            for segment in 0..SwarmStore::SEGMENTS {
                glommio::timer::sleep(pause).await;
                let now = clock::now_secs();
                self.store.borrow_mut().clean_segment(segment, now);
                while self.store.borrow().cleaning() {
                    futures_lite::future::yield_now().await;
                    self.store.borrow_mut().clean_more(now);
                }
            }
        }
    }

    /// Applies each newly published access list to this shard's store:
    /// removes the torrents it refuses, one segment at a time with a yield
    /// between segments, so no request waits behind more than one segment.
    /// Announces already obey the new list meanwhile, so nothing refused is
    /// added while the walk goes on. Returns at once when lists are off.
    pub async fn enforce_access_forever(self: Rc<Self>) {
        let Some(access) = &self.access else {
            return;
        };
        let mut applied = access.borrow_mut().get().clone();
        loop {
            glommio::timer::sleep(ACCESS_POLL).await;
            let current = access.borrow_mut().get().clone();
            if Arc::ptr_eq(&current, &applied) {
                continue;
            }
            let mut removed = 0;
            // A plain yield would run the segments back to back, the reactor
            // held off until glommio's 100 ms preemption: the quantum goes
            // round it every 500 µs.
            let mut quantum = Quantum::default();
            for segment in 0..SwarmStore::SEGMENTS {
                removed += self
                    .store
                    .borrow_mut()
                    .retain_torrents(segment, |h| current.allows(h))
                    .torrents;
                quantum.yield_now().await;
            }
            if removed > 0 {
                tracing::info!(
                    "worker {}: removed {removed} torrents the new access list refuses",
                    self.index
                );
            }
            applied = current;
        }
    }
}
