//! WebRTC peers (WebTorrent over WebSocket) in the shard: announces routed to
//! their torrent's owner as for the other protocols, and the offers and
//! answers they carry relayed to the worker that holds the WebSocket
//! connection of the peer they are for. Relays travel one way, in a batch per
//! worker, and never wait: an owner serving requests must not wait on a
//! channel whose receiver may be waiting on it, so a relay that finds the
//! channel full is dropped and counted (WebTorrent announces again and makes
//! new offers).

use super::*;
use crate::counters;
use crate::mesh::{OfferToRelay, Relay, RelayKind, RtcAnnounceRequest, Swarms};
use crate::metrics::{WEBRTC_PEERS, WEBRTC_TORRENTS, WS_RELAYS_DROPPED};
use tracker_proto::PeerId;
use tracker_swarm::{ConnectionRef, Quota};

/// What takes the relays for this worker's WebSocket connections: the
/// WebSocket service, which knows them.
pub trait RelaySink {
    /// Hands `relay` to its connection, or drops it (counting why).
    fn relay(&self, relay: Relay);
}

counters! {
    /// Relays the shard could not send.
    pub struct RelayStats {
        /// The channel to the connection's worker was full.
        pub mesh_full: Counter => WS_RELAYS_DROPPED { reason = "mesh_full" },
        /// No WebSocket service took it (websocket.enabled is off there).
        pub no_sink: Counter => WS_RELAYS_DROPPED { reason = "no_service" },
    }
}

impl Shard {
    /// Registers the service that delivers relays to this worker's
    /// WebSocket connections.
    pub fn set_relay_sink(&self, sink: Weak<dyn RelaySink>) {
        *self.relay_sink.borrow_mut() = Some(sink);
    }

    /// Whether the limits per client count the client at `ip`
    /// (`runtime.exempt_networks`), for the WebSocket service's own.
    pub fn quota(&self, ip: IpAddr) -> Quota {
        self.exempt.quota(ip)
    }

    /// A WebSocket announce, at its torrent's owner (here or over the
    /// mesh); its offers go to the peers the owner draws.
    pub async fn rtc_announce(
        &self,
        request: RtcAnnounceRequest,
    ) -> Result<Result<SwarmCounts, AnnounceRefused>, RouteError> {
        let owner = self.owner(&request.announce.info_hash);
        if owner == self.index {
            return Ok(self.rtc_announce_local(request));
        }
        match self
            .ask(owner, ShardRequest::RtcAnnounce(Box::new(request)))
            .await?
            .await?
        {
            ShardReply::RtcAnnounce(answer) => Ok(answer),
            _ => Err(RouteError::Failed),
        }
    }

    pub(super) fn rtc_announce_local(
        &self,
        request: RtcAnnounceRequest,
    ) -> Result<SwarmCounts, AnnounceRefused> {
        let RtcAnnounceRequest { announce, offers } = request;
        debug_assert!(self.is_local(&announce.info_hash));
        if !self.allows(&announce.info_hash) {
            return Err(AnnounceRefused::NotAllowed);
        }
        let quota = self.exempt.quota(announce.ip);
        let mut receivers = self.receivers_scratch.borrow_mut();
        receivers.clear();
        let answer = {
            let mut store = self.store.borrow_mut();
            let answer = store.rtc_announce(&announce, clock::now_secs(), quota, &mut receivers);
            if let Err(AnnounceRefused::AddressBudget(level)) = answer {
                let budgets = store.limits().new_torrents_per_minute;
                budget_spent(announce.ip, level, budgets.get(level as usize).copied());
            }
            answer
        };
        if answer.is_ok() {
            for (OfferToRelay { offer_id, sdp }, (_, to)) in
                offers.into_iter().zip(receivers.drain(..))
            {
                self.relay(Relay {
                    to,
                    kind: RelayKind::Offer,
                    info_hash: announce.info_hash,
                    from_peer: announce.peer_id,
                    from: announce.connection,
                    offer_id,
                    sdp,
                });
            }
            self.flush_relays();
        }
        answer
    }

    /// Sends `relay` towards its connection: at once to this worker's own
    /// connections, into the batch for its worker otherwise (sent by
    /// `flush_relays`).
    pub fn relay(&self, relay: Relay) {
        let worker = usize::from(relay.to.worker);
        if worker == self.index {
            self.deliver_relay(relay);
            return;
        }
        let mut outgoing = self.relays_out.borrow_mut();
        if outgoing.is_empty() {
            outgoing.resize_with(self.workers, Vec::new);
        }
        match outgoing.get_mut(worker) {
            Some(batch) => batch.push(relay),
            // A connection on no worker of ours: it cannot be.
            None => self.relay_stats.no_sink.inc(),
        }
    }

    /// Sends the relays gathered for other workers, a message each, without
    /// waiting: a full channel drops its batch (counted).
    pub fn flush_relays(&self) {
        let mut outgoing = self.relays_out.borrow_mut();
        for (worker, batch) in outgoing.iter_mut().enumerate() {
            if batch.is_empty() {
                continue;
            }
            let relays = std::mem::take(batch);
            let count = relays.len() as u64;
            let Some(senders) = &self.to_owners else {
                self.relay_stats.no_sink.add(count);
                continue;
            };
            let envelope = Envelope {
                token: ONE_WAY,
                body: ShardRequest::Relays(relays),
            };
            if senders.try_send_to(worker, envelope).is_err() {
                self.relay_stats.mesh_full.add(count);
            }
        }
    }

    fn deliver_relay(&self, relay: Relay) {
        let sink = self.relay_sink.borrow().as_ref().and_then(Weak::upgrade);
        match sink {
            Some(sink) => sink.relay(relay),
            None => self.relay_stats.no_sink.inc(),
        }
    }

    /// Takes relays that another worker sent for this worker's connections.
    pub(super) fn take_relays(&self, relays: Vec<Relay>) {
        for relay in relays {
            self.deliver_relay(relay);
        }
    }

    /// The connection of these WebRTC peers closed: each leaves its torrent,
    /// at its owner. Waits for room in the channels (this is no owner's
    /// serving path), so that no peer outlives its connection but by expiry.
    pub async fn rtc_gone(&self, gone: Vec<(InfoHash, PeerId, ConnectionRef)>) {
        let mut by_owner: Vec<Vec<(InfoHash, PeerId, ConnectionRef)>> = Vec::new();
        by_owner.resize_with(self.workers, Vec::new);
        for peer in gone {
            if let Some(list) = by_owner.get_mut(self.owner(&peer.0)) {
                list.push(peer);
            }
        }
        for (owner, peers) in by_owner.into_iter().enumerate() {
            if peers.is_empty() {
                continue;
            }
            if owner == self.index {
                self.rtc_disconnected(peers);
                continue;
            }
            let Some(senders) = &self.to_owners else {
                continue;
            };
            let envelope = Envelope {
                token: ONE_WAY,
                body: ShardRequest::RtcGone(peers),
            };
            // Err only when the owner is gone, as at the end.
            let _ = senders.send_to(owner, envelope).await;
        }
    }

    pub(super) fn rtc_disconnected(&self, peers: Vec<(InfoHash, PeerId, ConnectionRef)>) {
        let mut store = self.store.borrow_mut();
        for (info_hash, peer_id, connection) in peers {
            store.rtc_disconnected(&info_hash, &peer_id, connection);
        }
    }

    /// WebRTC counts of any torrents, in the order of `hashes`.
    pub async fn rtc_scrape(
        &self,
        hashes: &[InfoHash],
        out: &mut Vec<ScrapeStats>,
    ) -> Result<(), RouteError> {
        self.scrape_of(Swarms::WebRtc, hashes, out).await
    }

    /// WebRTC counts of up to `max` torrents of all shards.
    pub async fn rtc_scrape_some(
        &self,
        max: usize,
        out: &mut Vec<(InfoHash, ScrapeStats)>,
    ) -> Result<(), RouteError> {
        self.scrape_some_of(Swarms::WebRtc, max, out).await
    }

    pub(super) fn rtc_samples(&self, store: &SwarmStore, out: &mut Vec<Sample>) {
        self.relay_stats.samples(&[], out);
        let peers = store.rtc_peer_count();
        out.push(Sample::new(
            &WEBRTC_TORRENTS,
            &[],
            store.rtc_torrent_count() as u64,
        ));
        out.push(Sample::new(
            &WEBRTC_PEERS,
            &[("role", "seeder")],
            peers.seeders as u64,
        ));
        out.push(Sample::new(
            &WEBRTC_PEERS,
            &[("role", "leecher")],
            peers.leechers as u64,
        ));
    }
}

/// The token of a message that gets no answer.
pub(super) const ONE_WAY: u32 = u32::MAX;
