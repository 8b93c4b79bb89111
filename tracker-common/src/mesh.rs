//! Routing by info-hash between workers. Each worker owns one shard of the
//! torrents; a request for another shard goes to its owner over a glommio
//! channel mesh and the answer comes back over a second mesh.
//!
//! Two meshes, not one, so that answers never queue behind requests: an owner
//! that waits to send an answer waits only on the answer channel, whose receiver
//! never waits on anything, so no cycle of full channels can form. Every worker
//! joins them in the same order (requests, then answers), as glommio requires.

use crate::clock;
use crate::contain::contain;
use crate::shard::owner_of;
use crate::stats::MeshStats;
use crate::swarm::{AnnounceRefused, SwarmCounts, SwarmStore};
use crate::types::{Announce, AnnounceAnswer, InfoHash, PeerEntry, ScrapeStats};
use glommio::channels::channel_mesh::{Full, MeshBuilder, Senders};
use glommio::{GlommioError, ResourceType};
use slab::Slab;
use std::cell::RefCell;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::Duration;

/// What an owner is asked to do.
#[derive(Debug)]
pub enum ShardRequest {
    Announce(Announce),
    Scrape(Vec<InfoHash>),
    /// Counts of up to this many of the owner's torrents (a full scrape).
    ScrapeSome(usize),
}

/// What an owner answers.
#[derive(Debug)]
pub enum ShardReply {
    Announce(Result<AnnounceAnswer, AnnounceRefused>),
    /// In the order of the request's hashes.
    Scrape(Vec<ScrapeStats>),
    ScrapeSome(Vec<(InfoHash, ScrapeStats)>),
    /// Serving the request panicked (the panic was contained and counted).
    Failed,
}

/// A message on a mesh: `token` names the waiting request on the worker that
/// asked.
#[derive(Debug)]
pub struct Envelope<T> {
    token: u32,
    body: T,
}

/// Why a request for another shard got no answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RouteError {
    /// Too many requests already await answers from other workers.
    Overloaded,
    /// The owner is gone (the process is stopping).
    OwnerGone,
    /// The owner failed to serve it (a contained panic), or answered in a
    /// kind that does not fit the request.
    Failed,
}

/// The two meshes, built once and cloned into every worker before it starts.
#[derive(Clone)]
pub struct Meshes {
    workers: usize,
    requests: MeshBuilder<Envelope<ShardRequest>, Full>,
    replies: MeshBuilder<Envelope<ShardReply>, Full>,
}

impl Meshes {
    pub fn new(workers: usize, channel_capacity: usize) -> Self {
        Meshes {
            workers,
            requests: MeshBuilder::full(workers, channel_capacity),
            replies: MeshBuilder::full(workers, channel_capacity),
        }
    }
}

/// A request sent to another worker, waiting for its answer.
struct Waiting {
    reply: Option<ShardReply>,
    waker: Option<Waker>,
    /// The asker stopped waiting (its connection went away): drop the answer.
    abandoned: bool,
}

/// One worker's shard: its swarm store, and its links to the owners of every
/// other shard. Used only on its own executor (it is `!Send`).
pub struct Shard {
    index: usize,
    workers: usize,
    store: RefCell<SwarmStore>,
    to_owners: Option<Senders<Envelope<ShardRequest>>>,
    waiting: RefCell<Slab<Waiting>>,
    max_waiting: usize,
    peers_scratch: RefCell<Vec<PeerEntry>>,
    pub stats: MeshStats,
}

impl Shard {
    /// Joins the meshes (every worker must call this, or the others wait
    /// forever) and starts the tasks that serve other workers' requests and
    /// deliver their answers to ours.
    pub async fn join(
        index: usize,
        meshes: Meshes,
        store: SwarmStore,
        max_waiting: usize,
    ) -> Result<Rc<Shard>, String> {
        let workers = meshes.workers;
        let (to_owners, reply_senders, request_streams, reply_streams) = if workers > 1 {
            let (req_tx, mut req_rx) = meshes
                .requests
                .join()
                .await
                .map_err(|_| "cannot join the request mesh")?;
            let (rep_tx, mut rep_rx) = meshes
                .replies
                .join()
                .await
                .map_err(|_| "cannot join the answer mesh")?;
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
            store: RefCell::new(store),
            to_owners,
            waiting: RefCell::new(Slab::new()),
            max_waiting,
            peers_scratch: RefCell::new(Vec::new()),
            stats: MeshStats::default(),
        });
        let reply_senders = reply_senders.map(Rc::new);
        for (from, stream) in request_streams {
            let shard = shard.clone();
            let Some(reply_senders) = reply_senders.clone() else {
                return Err("request streams without answer senders".into());
            };
            glommio::spawn_local(async move {
                while let Some(Envelope { token, body }) = stream.recv().await {
                    shard.stats.served_for_others.inc();
                    // A panic while serving still answers, so that the asker
                    // never waits for an answer that cannot come.
                    let body = contain(&shard.stats.panics, || shard.serve(body))
                        .unwrap_or(ShardReply::Failed);
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
                while let Some(Envelope { token, body }) = stream.recv().await {
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
        owner_of(info_hash, self.workers)
    }

    pub fn is_local(&self, info_hash: &InfoHash) -> bool {
        self.owner(info_hash) == self.index
    }

    /// Announces to a torrent of this shard, writing peers into `peers`; no
    /// allocation once `peers` has grown.
    pub fn announce_local(
        &self,
        req: &Announce,
        peers: &mut Vec<PeerEntry>,
    ) -> Result<SwarmCounts, AnnounceRefused> {
        debug_assert!(self.is_local(&req.info_hash));
        let mut store = self.store.borrow_mut();
        // Debug builds only: lets tests make a request panic here, with the
        // store borrowed, to prove that the panic is contained and the borrow
        // released.
        crate::contain::test_panic_hook(&req.info_hash);
        store.announce(req, clock::now_secs(), peers)
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
        answer: impl FnOnce(Result<SwarmCounts, AnnounceRefused>, &[PeerEntry]) -> R,
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
        answer: impl FnOnce(Result<SwarmCounts, AnnounceRefused>, &[PeerEntry]) -> R,
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
            ShardReply::Announce(Err(refused)) => Ok(answer(Err(refused), &[])),
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
        out.clear();
        out.resize(hashes.len(), ScrapeStats::default());
        let mut asked: Vec<(Vec<usize>, PendingReply<'_>)> = Vec::new();
        let mut by_owner: Vec<(Vec<usize>, Vec<InfoHash>)> = Vec::new();
        for (i, hash) in hashes.iter().enumerate() {
            let owner = self.owner(hash);
            if owner == self.index {
                if let Some(slot) = out.get_mut(i) {
                    *slot = self.scrape_local(hash);
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
                asked.push((
                    positions,
                    self.ask(owner, ShardRequest::Scrape(owner_hashes)).await?,
                ));
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
        let start = out.len();
        self.store.borrow().scrape_some(max, out);
        let mut asked = Vec::new();
        for owner in (0..self.workers).filter(|&owner| owner != self.index) {
            asked.push(self.ask(owner, ShardRequest::ScrapeSome(max)).await?);
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

    /// Drops expired peers and empty torrents, one segment of the store at a
    /// time, so that a pass over the whole shard takes `period` and no request
    /// ever waits behind more than one segment's work.
    pub async fn clean_forever(self: Rc<Self>, period: Duration) {
        let pause = period / SwarmStore::SEGMENTS as u32;
        loop {
            for segment in 0..SwarmStore::SEGMENTS {
                glommio::timer::sleep(pause).await;
                self.store
                    .borrow_mut()
                    .clean_segment(segment, clock::now_secs());
            }
        }
    }

    /// Sends `request` to `owner` (waiting for room in the channel if it is
    /// full: that wait is the back-pressure) and returns its pending answer.
    async fn ask(
        &self,
        owner: usize,
        request: ShardRequest,
    ) -> Result<PendingReply<'_>, RouteError> {
        let senders = self.to_owners.as_ref().ok_or(RouteError::OwnerGone)?;
        let token = {
            let mut waiting = self.waiting.borrow_mut();
            if waiting.len() >= self.max_waiting {
                self.stats.overloaded.inc();
                return Err(RouteError::Overloaded);
            }
            waiting.insert(Waiting {
                reply: None,
                waker: None,
                abandoned: false,
            })
        };
        // From here the guard frees the slot whatever happens.
        let mut pending = PendingReply {
            shard: self,
            token,
            sent: false,
        };
        self.stats.forwarded.inc();
        let envelope = Envelope {
            token: token as u32,
            body: request,
        };
        match senders.try_send_to(owner, envelope) {
            Ok(()) => {}
            Err(GlommioError::WouldBlock(ResourceType::Channel(envelope))) => {
                self.stats.backpressure_waits.inc();
                senders
                    .send_to(owner, envelope)
                    .await
                    .map_err(|_| RouteError::OwnerGone)?;
            }
            Err(_) => return Err(RouteError::OwnerGone),
        }
        pending.sent = true;
        Ok(pending)
    }

    /// Answers a request from another worker.
    fn serve(&self, request: ShardRequest) -> ShardReply {
        match request {
            ShardRequest::Announce(req) => {
                let mut peers = Vec::new();
                let answer = self
                    .announce_local(&req, &mut peers)
                    .map(|c| AnnounceAnswer {
                        seeders: c.seeders,
                        leechers: c.leechers,
                        peers,
                    });
                ShardReply::Announce(answer)
            }
            ShardRequest::Scrape(hashes) => {
                let store = self.store.borrow();
                ShardReply::Scrape(hashes.iter().map(|h| store.scrape(h)).collect())
            }
            ShardRequest::ScrapeSome(max) => {
                let mut counts = Vec::new();
                self.store.borrow().scrape_some(max, &mut counts);
                ShardReply::ScrapeSome(counts)
            }
        }
    }

    /// Hands an answer from an owner to the request waiting for it.
    fn deliver(&self, token: u32, reply: ShardReply) {
        let mut waiting = self.waiting.borrow_mut();
        let Some(slot) = waiting.get_mut(token as usize) else {
            return;
        };
        if slot.abandoned {
            waiting.remove(token as usize);
            return;
        }
        slot.reply = Some(reply);
        if let Some(waker) = slot.waker.take() {
            waker.wake();
        }
    }
}

/// The answer to a request sent to another worker. Dropping it before the
/// answer came marks the slot abandoned, so the late answer is thrown away.
struct PendingReply<'a> {
    shard: &'a Shard,
    token: usize,
    sent: bool,
}

impl Future for PendingReply<'_> {
    type Output = Result<ShardReply, RouteError>;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let token = self.token;
        let mut waiting = self.shard.waiting.borrow_mut();
        let Some(slot) = waiting.get_mut(token) else {
            return Poll::Ready(Err(RouteError::OwnerGone));
        };
        match slot.reply.take() {
            Some(reply) => {
                waiting.remove(token);
                drop(waiting);
                self.token = usize::MAX;
                Poll::Ready(Ok(reply))
            }
            None => {
                slot.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    }
}

impl Drop for PendingReply<'_> {
    fn drop(&mut self) {
        if self.token == usize::MAX {
            return;
        }
        let mut waiting = self.shard.waiting.borrow_mut();
        let answered = waiting
            .get(self.token)
            .is_some_and(|slot| slot.reply.is_some());
        if !self.sent || answered {
            waiting.try_remove(self.token);
        } else if let Some(slot) = waiting.get_mut(self.token) {
            slot.abandoned = true;
        }
    }
}
