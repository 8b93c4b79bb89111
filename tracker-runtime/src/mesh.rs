//! Routing by info-hash between workers. Each worker owns one shard of the
//! torrents; a request for another shard goes to its owner over a glommio
//! channel mesh and the answer comes back over a second mesh.
//!
//! Two meshes, not one, so that answers never queue behind requests: an owner
//! that waits to send an answer waits only on the answer channel, whose receiver
//! never waits on anything, so no cycle of full channels can form. Every worker
//! joins them in the same order (requests, then answers), as glommio requires.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Mutex, MutexGuard};
use std::task::{Context, Poll};

use crate::metrics::Sample;
use glommio::channels::channel_mesh::{Full, MeshBuilder, Receivers, Senders};
use tracker_private::{PeerSnapshot, PrivateAnnounce, Refusal, TorrentId, UserId};
use tracker_proto::ws::OfferId;
use tracker_proto::{Announce, AnnounceAnswer, AnswerPeers, InfoHash, PeerId, ScrapeStats};
use tracker_swarm::{AnnounceRefused, SwarmCounts};
use tracker_swarm::{ConnectionRef, RtcAnnounce};

/// What an owner is asked to do.
#[derive(Debug)]
pub enum ShardRequest {
    Announce(Announce),
    /// Announces that one worker received together (a UDP receive batch),
    /// served together: one message each way, and their torrents prefetched
    /// as the owner's own batches are.
    Announces(Vec<Announce>),
    /// Counts of these torrents' swarms of one kind, in the hashes' order.
    Scrape(Swarms, Vec<InfoHash>),
    /// Counts of up to this many of the owner's torrents (a full scrape).
    ScrapeSome(Swarms, usize),
    /// A snapshot of the owner's metrics.
    Metrics,
    /// A WebSocket announce, whose offers the owner hands to peers it draws.
    RtcAnnounce(Box<RtcAnnounceRequest>),
    /// One way, never answered: offers and answers for WebSocket
    /// connections of the receiving worker.
    Relays(Vec<Relay>),
    /// One way, never answered: WebRTC peers of the receiving owner whose
    /// connection closed (each leaves its torrent as if it had stopped).
    RtcGone(Vec<(InfoHash, PeerId, ConnectionRef)>),
    /// An announce to a private tracker, checked and accounted by the owner.
    PrivateAnnounce(Box<PrivateRequest>),
    /// What a worker's private ledger knows of a user or a torrent (the
    /// site API's reads).
    PrivateQuery(PrivateQuery),
}

/// Why a private announce got no peers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PrivateRefused {
    /// The site's rules (UNIT3D-Announce's words).
    Site(Refusal),
    /// The swarm store's limits.
    Store(AnnounceRefused),
}

/// What a private announce's answer tells of its torrent.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct PrivateCounts {
    /// The peers the user may be told of (0 for a kind of list it may
    /// not receive, both 0 for an announce held back).
    pub swarm: SwarmCounts,
    /// Snatches (`downloaded`): the site's `times_completed` when read,
    /// and those the owner counted since.
    pub times_completed: u32,
    /// A warning the answer carries (UNIT3D-Announce's download-slot
    /// warning), with no peers.
    pub warning: Option<Refusal>,
}

/// A question to a worker's ledger, for the site API's reads.
#[derive(Clone, Copy, Debug)]
pub enum PrivateQuery {
    /// The user's peers on the worker's torrents.
    User(UserId),
    /// The torrent's peers and snatches (asked of its owner).
    Torrent(TorrentId),
}

#[derive(Debug)]
pub enum PrivateAnswer {
    User {
        seeding: u32,
        leeching: u32,
    },
    Torrent {
        seeders: u32,
        leechers: u32,
        /// Counted here since start.
        snatches: u32,
        peers: Vec<PeerSnapshot>,
    },
}

/// A private announce on its way to the owner: the swarm's part, and the
/// ledger's.
#[derive(Debug)]
pub struct PrivateRequest {
    pub announce: Announce,
    pub account: PrivateAnnounce,
}

/// Which swarms a scrape reads: each protocol counts its own kind of peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Swarms {
    BitTorrent,
    WebRtc,
}

/// A WebSocket announce sent to the owner of its torrent.
#[derive(Debug)]
pub struct RtcAnnounceRequest {
    pub announce: RtcAnnounce,
    pub offers: Vec<OfferToRelay>,
}

/// An offer as its sender made it: the SDP as the raw JSON it came in.
#[derive(Debug)]
pub struct OfferToRelay {
    pub offer_id: OfferId,
    pub sdp: Box<str>,
}

/// An offer or answer on its way to the WebSocket connection `to`.
#[derive(Debug)]
pub struct Relay {
    pub to: ConnectionRef,
    pub kind: RelayKind,
    pub info_hash: InfoHash,
    /// The peer that made it, and its connection: where an answer to an
    /// offer goes.
    pub from_peer: PeerId,
    pub from: ConnectionRef,
    pub offer_id: OfferId,
    pub sdp: Box<str>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RelayKind {
    Offer,
    Answer,
}

/// What an owner answers.
#[derive(Debug)]
pub enum ShardReply {
    Announce(Result<AnnounceAnswer, AnnounceRefused>),
    Announces(AnnounceAnswers),
    /// In the order of the request's hashes.
    Scrape(Vec<ScrapeStats>),
    ScrapeSome(Vec<(InfoHash, ScrapeStats)>),
    Metrics(Vec<Sample>),
    RtcAnnounce(Result<SwarmCounts, AnnounceRefused>),
    PrivateAnnounce(Result<(PrivateCounts, AnswerPeers), PrivateRefused>),
    PrivateQuery(PrivateAnswer),
    /// Serving the request panicked (the panic was contained and counted).
    Failed,
}

/// The answers to `ShardRequest::Announces`, in its order: each one's
/// counts (or why it was refused) and its peers, the compact entries of all
/// of them in one buffer, so that a batch's answers cost two allocations
/// rather than one each. Compact only: no peer ids.
#[derive(Debug, Default)]
pub struct AnnounceAnswers {
    /// Each answer's outcome and where its peers end in `compact`.
    pub(crate) answers: Vec<(Result<SwarmCounts, AnnounceRefused>, usize)>,
    pub(crate) compact: Vec<u8>,
}

impl AnnounceAnswers {
    pub(crate) fn push(
        &mut self,
        outcome: Result<SwarmCounts, AnnounceRefused>,
        peers: &AnswerPeers,
    ) {
        self.compact.extend_from_slice(peers.compact());
        self.answers.push((outcome, self.compact.len()));
    }

    pub fn len(&self) -> usize {
        self.answers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.answers.is_empty()
    }

    /// Each answer's outcome and compact peers, in the order asked.
    pub fn iter(&self) -> impl Iterator<Item = (Result<SwarmCounts, AnnounceRefused>, &[u8])> {
        let mut start = 0;
        self.answers.iter().map(move |&(outcome, end)| {
            let peers = self.compact.get(start..end).unwrap_or_default();
            start = end;
            (outcome, peers)
        })
    }
}

/// A message on a mesh: `token` names the waiting request on the worker that
/// asked.
#[derive(Debug)]
pub struct Envelope<T> {
    pub(crate) token: u32,
    pub(crate) body: T,
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

/// One worker's handle on the two meshes: `Meshes::for_workers` makes one
/// for each worker, and each worker joins its own (`join`).
///
/// glommio's `MeshBuilder` counts its clones with an `Rc`, which is not
/// atomic, though the builder is sent to other threads: clones made or
/// dropped on two threads at once can lose a count, and then free the
/// builder while a worker still uses it (seen as heap corruption at the
/// stop, once in about ten runs of `tests/hostile.rs`). So every clone is
/// made on one thread before any worker starts, and every later change to
/// the count, a join (which drops its builder) or a drop, holds
/// `BUILDER_COUNTS`.
pub struct Meshes {
    pub(crate) workers: usize,
    builders: Option<Builders>,
}

type Builders = (
    MeshBuilder<Envelope<ShardRequest>, Full>,
    MeshBuilder<Envelope<ShardReply>, Full>,
);

/// The connected ends of both meshes: requests, then answers.
pub(crate) type Joined = (
    (
        Senders<Envelope<ShardRequest>>,
        Receivers<Envelope<ShardRequest>>,
    ),
    (
        Senders<Envelope<ShardReply>>,
        Receivers<Envelope<ShardReply>>,
    ),
);

/// Held by whatever changes the count of a mesh builder's clones after the
/// workers have started (see `Meshes`).
static BUILDER_COUNTS: Mutex<()> = Mutex::new(());

fn builder_counts() -> MutexGuard<'static, ()> {
    BUILDER_COUNTS.lock().unwrap_or_else(|e| e.into_inner())
}

impl Meshes {
    /// A handle for each of `workers` workers on the same two meshes, each
    /// channel `channel_capacity` messages deep. Call it on one thread
    /// before any worker starts, and move each handle to its worker.
    pub fn for_workers(workers: usize, channel_capacity: usize) -> Vec<Meshes> {
        let requests = MeshBuilder::full(workers, channel_capacity);
        let replies = MeshBuilder::full(workers, channel_capacity);
        (0..workers)
            .map(|_| Meshes {
                workers,
                builders: Some((requests.clone(), replies.clone())),
            })
            .collect()
    }

    /// Joins both meshes, in the order every worker joins them (requests,
    /// then answers): done once the other workers have joined too.
    pub(crate) async fn join(mut self) -> Result<Joined, &'static str> {
        let (requests, replies) = self
            .builders
            .take()
            .ok_or("the meshes were joined before")?;
        // One future holds both builders, so that each is polled, and
        // dropped (a failed join leaves the other), under the lock.
        Serialized(Some(Box::pin(async move {
            let requests = requests
                .join()
                .await
                .map_err(|_| "cannot join the request mesh")?;
            let replies = replies
                .join()
                .await
                .map_err(|_| "cannot join the answer mesh")?;
            Ok((requests, replies))
        })))
        .await
    }
}

impl Drop for Meshes {
    fn drop(&mut self) {
        let _counts = builder_counts();
        self.builders.take();
    }
}

/// A future (mesh joins, which clone and drop their builders as they go)
/// polled, and dropped, while holding `BUILDER_COUNTS`. A poll never waits
/// on another thread, so holding the lock for one cannot deadlock.
struct Serialized<F: Future>(Option<Pin<Box<F>>>);

impl<F: Future> Future for Serialized<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let _counts = builder_counts();
        let Some(inner) = self.0.as_mut() else {
            return Poll::Pending;
        };
        let ready = inner.as_mut().poll(cx);
        if ready.is_ready() {
            self.0 = None;
        }
        ready
    }
}

impl<F: Future> Drop for Serialized<F> {
    fn drop(&mut self) {
        let _counts = builder_counts();
        self.0.take();
    }
}

impl ShardRequest {
    /// Requests for torrents it carries, as `runtime.max_forwarded` and the
    /// forwarded and served counts count them.
    pub(crate) fn requests(&self) -> usize {
        match self {
            ShardRequest::Announces(batch) => batch.len(),
            ShardRequest::Relays(relays) => relays.len(),
            ShardRequest::RtcGone(gone) => gone.len(),
            ShardRequest::Metrics => 0,
            _ => 1,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::net::{Ipv4Addr, SocketAddr};
    use tracker_proto::IpFamily;

    #[test]
    fn a_batch_of_answers_gives_back_each_answers_own_peers_in_order() {
        let mut peers = AnswerPeers::default();
        let mut answers = AnnounceAnswers::default();
        let counts = |n| {
            Ok(SwarmCounts {
                seeders: n,
                leechers: 0,
            })
        };
        for n in 0..3u16 {
            peers.reset(IpFamily::V4);
            for port in 0..n {
                let addr = SocketAddr::new(Ipv4Addr::new(10, 0, 0, n as u8).into(), port + 1);
                assert!(peers.push_addr(addr, None));
            }
            answers.push(counts(n.into()), &peers);
        }
        peers.reset(IpFamily::V4);
        answers.push(Err(AnnounceRefused::NotAllowed), &peers);
        let got: Vec<_> = answers.iter().map(|(o, p)| (o, p.to_vec())).collect();
        assert_eq!(answers.len(), 4);
        assert_eq!(
            got,
            vec![
                (counts(0), vec![]),
                (counts(1), vec![10, 0, 0, 1, 0, 1]),
                (counts(2), vec![10, 0, 0, 2, 0, 1, 10, 0, 0, 2, 0, 2]),
                (Err(AnnounceRefused::NotAllowed), vec![]),
            ]
        );
    }
}
