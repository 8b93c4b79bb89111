//! One WebSocket (WebTorrent) connection's messages, without the connection:
//! the target URL, announces with WebRTC offers and scrapes written with
//! `tracker_proto::ws`, and every message from the tracker read with
//! `tracker_proto::ws::parse_server_message` and checked. Pure, so it is
//! tested without a network.
//!
//! A connection is a source of the traffic model and carries its peers; each
//! torrent is announced on it by one peer id only
//! ([`TrafficModel::peer_for_torrent`]). One announce or scrape is in flight
//! at a time; offers relayed to the connection arrive in between, and a
//! share of them is answered at once with an announce that carries the
//! answer.
//!
//! Offer ids say who made an offer: the connection, the send time, the
//! torrent and a tag. So a relayed offer is checked (its info-hash and
//! sender are those of the offer the load made) and timed (from the
//! announce that carried it to its arrival), and so is a relayed answer
//! (from the offer to the answer: the offer's relay, the answer's making and
//! its relay back).
//!
//! Trackers differ in one thing: aquatic_ws answers an announce that carries
//! an answer, webtorrent's `bittorrent-tracker` and ours do not (when it
//! carries nothing else, as WebTorrent sends it). The session learns
//! which from the first answer-announce (answered, or not within the
//! time-out), and never has an announce and an answer-announce for the same
//! torrent in flight together, so that an announce answer, which names only
//! the torrent, always belongs to one of them.

use std::net::SocketAddr;

use tracker_proto::ws::{
    parse_server_message, write_announce_request, write_scrape_request, Action, AnnounceMessage,
    Answer, Offer, OfferId, ServerMessage,
};
use tracker_proto::{AnnounceEvent, InfoHash, PeerId};

use crate::http_session::LoopbackUrl;
use crate::model::{Kind, Rng, TrafficModel, Weighted, MAX_SCRAPE};
use crate::stats::{Invalid, Stats};

/// Where the connections go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WsTarget {
    pub tls: bool,
    pub addr: SocketAddr,
    /// The URL as given, for the WebSocket handshake (its host and path).
    pub url: String,
}

impl WsTarget {
    /// `ws://127.0.0.1:8080/announce` or `wss://[::1]:8443`; the host must be
    /// a loopback address. The path goes into the handshake as it is
    /// (`/` when there is none): our tracker serves `/announce` and `/`,
    /// aquatic_ws any path.
    pub fn parse(url: &str) -> Result<WsTarget, String> {
        let LoopbackUrl {
            tls, addr, path, ..
        } = LoopbackUrl::parse(url, "ws", "wss")?;
        if path.contains(['?', '#', ' ']) {
            return Err(format!("--target `{url}`: no query or fragment, please"));
        }
        let url = if path.is_empty() {
            format!("{url}/")
        } else {
            url.to_string()
        };
        Ok(WsTarget { tls, addr, url })
    }
}

/// A WebRTC offer as a browser makes it for a data channel (WebTorrent
/// opens no media): one host and one server-reflexive candidate, about
/// 700 bytes, the size a tracker relays. Nothing reads it but the tracker's
/// size check; the load checks that it comes back unchanged.
pub const OFFER_SDP: &str = "v=0\r\n\
o=- 5436229718233618941 2 IN IP4 127.0.0.1\r\n\
s=-\r\n\
t=0 0\r\n\
a=group:BUNDLE 0\r\n\
a=extmap-allow-mixed\r\n\
a=msid-semantic: WMS\r\n\
m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n\
c=IN IP4 0.0.0.0\r\n\
a=candidate:2999745851 1 udp 2122260223 192.168.1.23 54321 typ host generation 0 network-id 1 network-cost 10\r\n\
a=candidate:1637612474 1 udp 1686052607 203.0.113.7 54321 typ srflx raddr 192.168.1.23 rport 54321 generation 0 network-id 1 network-cost 10\r\n\
a=ice-ufrag:Xq3b\r\n\
a=ice-pwd:7Pz1kYwq9cLr2mNf5sVt8hJd\r\n\
a=ice-options:trickle\r\n\
a=fingerprint:sha-256 3A:9C:51:E2:07:B4:6D:F8:12:AE:C3:95:4B:60:D7:1F:88:2E:CA:39:74:05:BB:E1:6F:D2:93:48:0C:A7:5E:21\r\n\
a=setup:actpass\r\n\
a=mid:0\r\n\
a=sctp-port:5000\r\n\
a=max-message-size:262144\r\n";

/// The answer to an offer, as the browser that received it makes it.
pub const ANSWER_SDP: &str = "v=0\r\n\
o=- 8127730455981163012 2 IN IP4 127.0.0.1\r\n\
s=-\r\n\
t=0 0\r\n\
a=group:BUNDLE 0\r\n\
a=extmap-allow-mixed\r\n\
a=msid-semantic: WMS\r\n\
m=application 9 UDP/DTLS/SCTP webrtc-datachannel\r\n\
c=IN IP4 0.0.0.0\r\n\
a=candidate:3314624862 1 udp 2122260223 10.0.0.8 61234 typ host generation 0 network-id 1 network-cost 10\r\n\
a=candidate:1201553076 1 udp 1686052607 198.51.100.20 61234 typ srflx raddr 10.0.0.8 rport 61234 generation 0 network-id 1 network-cost 10\r\n\
a=ice-ufrag:Jr8c\r\n\
a=ice-pwd:Ua4w0oKx3sZ6qLbe9TnY1vGc\r\n\
a=ice-options:trickle\r\n\
a=fingerprint:sha-256 C1:07:5B:E9:34:8A:F2:6D:90:1C:A5:47:E8:3B:D6:72:0F:9E:61:B8:2A:CD:54:F3:17:8E:A9:03:6B:D2:45:9C\r\n\
a=setup:active\r\n\
a=mid:0\r\n\
a=sctp-port:5000\r\n\
a=max-message-size:262144\r\n";

/// The offer and answer objects as JSON, made once: `{"type":"offer","sdp":...}`.
#[derive(Clone, Debug)]
pub struct Sdp {
    pub offer: String,
    pub answer: String,
}

impl Default for Sdp {
    fn default() -> Self {
        let object = |kind: &str, sdp: &str| {
            let mut out = format!("{{\"type\":\"{kind}\",\"sdp\":");
            out += &serde_json::Value::from(sdp).to_string();
            out.push('}');
            out
        };
        Sdp {
            offer: object("offer", OFFER_SDP),
            answer: object("answer", ANSWER_SDP),
        }
    }
}

/// What every connection's session reads: the traffic model and the SDP.
#[derive(Clone, Debug)]
pub struct WsTraffic {
    pub model: TrafficModel,
    pub sdp: Sdp,
}

/// Whether a relayed offer or answer is the one the load sent: the same
/// bytes, or (re-encoded by the tracker, as aquatic_ws does) the same type
/// and SDP.
fn same_sdp(raw: &str, sent: &str, kind: &str, sdp: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Object<'a> {
        #[serde(rename = "type")]
        kind: std::borrow::Cow<'a, str>,
        sdp: std::borrow::Cow<'a, str>,
    }
    raw == sent
        || serde_json::from_str::<Object<'_>>(raw).is_ok_and(|o| o.kind == kind && o.sdp == sdp)
}

/// Marks an offer id as one of the load's.
const OFFER_TAG: [u8; 2] = *b"lt";

/// What an offer id made by [`offer_id`] says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OfferOrigin {
    /// The connection that made the offer.
    pub conn: u32,
    /// When its announce went, in ns from the start of the run.
    pub sent_ns: u64,
    /// The torrent it is for.
    pub torrent: u32,
}

/// An offer id that names its origin: connection, send time and torrent,
/// a tag, and a sequence number that keeps the offers of one announce apart.
pub fn offer_id(origin: OfferOrigin, seq: u16) -> OfferId {
    let mut id = [0u8; 20];
    id[0..4].copy_from_slice(&origin.conn.to_le_bytes());
    id[4..12].copy_from_slice(&origin.sent_ns.to_le_bytes());
    id[12..16].copy_from_slice(&origin.torrent.to_le_bytes());
    id[16..18].copy_from_slice(&OFFER_TAG);
    id[18..20].copy_from_slice(&seq.to_le_bytes());
    OfferId(id)
}

/// The origin of an offer id made by [`offer_id`]; `None` for another's.
pub fn offer_origin(id: &OfferId) -> Option<OfferOrigin> {
    let id = &id.0;
    if id[16..18] != OFFER_TAG {
        return None;
    }
    let u32_at = |i: usize| u32::from_le_bytes([id[i], id[i + 1], id[i + 2], id[i + 3]]);
    let mut ns = [0u8; 8];
    ns.copy_from_slice(&id[4..12]);
    Some(OfferOrigin {
        conn: u32_at(0),
        sent_ns: u64::from_le_bytes(ns),
        torrent: u32_at(12),
    })
}

/// Whether the tracker answers an announce that carries an answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AnswerAcks {
    /// Not seen yet.
    Unknown,
    /// It does (aquatic_ws).
    Yes,
    /// It does not (webtorrent's tracker).
    No,
}

/// The announce or scrape awaiting its answer.
#[derive(Clone, Copy, Debug)]
struct Pending {
    kind: Kind,
    sent_ns: u64,
    /// The announce's torrent.
    info_hash: InfoHash,
    /// A `stopped` announce: the swarm may be empty after it.
    stopped: bool,
    scrape_hashes: usize,
}

/// An announce that carried an answer, which the tracker may answer.
#[derive(Clone, Copy, Debug)]
struct AnswerSent {
    info_hash: InfoHash,
    sent_ns: u64,
}

/// What a message from the tracker did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Outcome {
    /// The request in flight is answered (or failed): the next may go.
    pub answered: bool,
    /// An announce carrying an answer to a relayed offer was written, to be
    /// sent now.
    pub answer: bool,
}

/// One connection's protocol state.
pub struct WsSession {
    /// This connection's index: its source in the traffic model.
    conn: u32,
    mix: Weighted<2>,
    offers: usize,
    answer_share: f64,
    pending: Option<Pending>,
    /// The last request that timed out, so that its late answer is counted
    /// as late rather than as unasked for.
    timed_out: Option<Pending>,
    answers_sent: Vec<AnswerSent>,
    acks: AnswerAcks,
    scrape: [InfoHash; MAX_SCRAPE],
    seq: u16,
}

/// Draws of a torrent before an announce gives way to a scrape because every
/// torrent drawn has an answer-announce in flight on the connection.
const DRAWS: usize = 4;

impl WsSession {
    pub fn new(conn: u32, mix: Weighted<2>, offers: usize, answer_share: f64) -> Self {
        WsSession {
            conn,
            mix,
            offers,
            answer_share,
            pending: None,
            timed_out: None,
            answers_sent: Vec::new(),
            acks: AnswerAcks::Unknown,
            scrape: [InfoHash::default(); MAX_SCRAPE],
            seq: 0,
        }
    }

    /// The kind of the request awaiting its answer.
    pub fn pending(&self) -> Option<Kind> {
        self.pending.map(|p| p.kind)
    }

    /// What the session has learnt of the tracker's answer-announces.
    pub fn answer_acks(&self) -> AnswerAcks {
        self.acks
    }

    /// Appends the next request, an announce or a scrape by the mix, to
    /// `out` (a text message); `first`: a `started` announce, which the
    /// connection's opening sends. Returns its kind.
    pub fn write_request(
        &mut self,
        traffic: &WsTraffic,
        rng: &mut Rng,
        first: bool,
        now_ns: u64,
        out: &mut Vec<u8>,
        stats: &mut Stats,
    ) -> Kind {
        let (model, sdp) = (&traffic.model, &traffic.sdp);
        if first || self.mix.sample(rng) == 0 {
            // An announce answer names only the torrent: never two kinds of
            // announce in flight for one.
            for _ in 0..DRAWS {
                let mut plan = model.announce_per_torrent(rng, self.conn);
                if self
                    .answers_sent
                    .iter()
                    .any(|a| a.info_hash == plan.info_hash)
                {
                    continue;
                }
                if first {
                    plan.event = AnnounceEvent::Started;
                    plan.left = if plan.peer.seeder { 0 } else { plan.peer.left };
                }
                self.write_announce(sdp, &plan, now_ns, out, stats);
                return Kind::Announce;
            }
        }
        // A browser scrapes its own torrents, each once: the draws by
        // popularity repeat hot ones, which go once.
        let drawn = model.scrape(rng, &mut self.scrape);
        let mut n = 0;
        for i in 0..drawn {
            let hash = self.scrape[i];
            if !self.scrape[..n].contains(&hash) {
                self.scrape[n] = hash;
                n += 1;
            }
        }
        write_scrape_request(out, &self.scrape[..n]);
        self.pending = Some(Pending {
            kind: Kind::Scrape,
            sent_ns: now_ns,
            info_hash: InfoHash::default(),
            stopped: false,
            scrape_hashes: n,
        });
        stats.sent(Kind::Scrape);
        Kind::Scrape
    }

    fn write_announce(
        &mut self,
        sdp: &Sdp,
        plan: &crate::model::AnnouncePlan,
        now_ns: u64,
        out: &mut Vec<u8>,
        stats: &mut Stats,
    ) {
        // WebTorrent makes no offers when it stops or completes.
        let offering = !matches!(
            plan.event,
            AnnounceEvent::Stopped | AnnounceEvent::Completed
        );
        let n = if offering { self.offers } else { 0 };
        let origin = OfferOrigin {
            conn: self.conn,
            sent_ns: now_ns,
            torrent: plan.torrent as u32,
        };
        let offers = (0..n)
            .map(|_| {
                self.seq = self.seq.wrapping_add(1);
                Offer {
                    offer_id: offer_id(origin, self.seq),
                    offer: &sdp.offer,
                }
            })
            .collect();
        write_announce_request(
            out,
            &AnnounceMessage {
                info_hash: plan.info_hash,
                peer_id: plan.peer.peer_id,
                event: plan.event,
                left: Some(plan.left),
                numwant: offering.then_some(n as u32),
                offers,
                answer: None,
            },
        );
        self.pending = Some(Pending {
            kind: Kind::Announce,
            sent_ns: now_ns,
            info_hash: plan.info_hash,
            stopped: plan.event == AnnounceEvent::Stopped,
            scrape_hashes: 0,
        });
        stats.sent(Kind::Announce);
        stats.counters.sent[Kind::Offer as usize] += n as u64;
    }

    /// Checks one text message from the tracker, received at `now_ns`, and
    /// counts it; an answer to a relayed offer, when one is to be sent, is
    /// appended to `answer_out`.
    pub fn on_message(
        &mut self,
        text: &[u8],
        traffic: &WsTraffic,
        rng: &mut Rng,
        now_ns: u64,
        answer_out: &mut Vec<u8>,
        stats: &mut Stats,
    ) -> Outcome {
        let (model, sdp) = (&traffic.model, &traffic.sdp);
        let mut outcome = Outcome::default();
        let message = match parse_server_message(text) {
            Ok(message) => message,
            Err(_) => {
                stats.invalid(Invalid::Malformed);
                return outcome;
            }
        };
        match message {
            ServerMessage::AnnounceResponse {
                info_hash,
                complete,
                incomplete,
                interval,
            } => {
                let sane = |stopped: bool| {
                    // After any announce but a `stopped` one the swarm holds
                    // at least the announcing peer.
                    interval > 0 && (stopped || u64::from(complete) + u64::from(incomplete) >= 1)
                };
                match self.pending {
                    Some(p) if p.kind == Kind::Announce && p.info_hash == info_hash => {
                        self.pending = None;
                        outcome.answered = true;
                        if sane(p.stopped) {
                            stats.ok(Kind::Announce, now_ns.saturating_sub(p.sent_ns));
                        } else {
                            stats.invalid(Invalid::ImplausibleCounts);
                        }
                    }
                    _ => {
                        if let Some(i) = self
                            .answers_sent
                            .iter()
                            .position(|a| a.info_hash == info_hash)
                        {
                            self.answers_sent.swap_remove(i);
                            self.acks = AnswerAcks::Yes;
                            if sane(false) {
                                stats.answer_acks += 1;
                            } else {
                                stats.invalid(Invalid::ImplausibleCounts);
                            }
                        } else {
                            self.unasked(Kind::Announce, Some(info_hash), stats);
                        }
                    }
                }
            }
            ServerMessage::Scrape { files } => match self.pending {
                Some(p) if p.kind == Kind::Scrape => {
                    self.pending = None;
                    outcome.answered = true;
                    if self.scrape_matches(&files, p.scrape_hashes) {
                        stats.ok(Kind::Scrape, now_ns.saturating_sub(p.sent_ns));
                    } else {
                        stats.invalid(Invalid::ScrapeMismatch);
                    }
                }
                _ => self.unasked(Kind::Scrape, None, stats),
            },
            ServerMessage::Offer {
                info_hash,
                peer_id,
                offer_id,
                offer,
            } => match self.check_relayed(model, &offer_id, &info_hash, &peer_id, false) {
                Err(why) => stats.invalid(why),
                Ok(_) if !same_sdp(offer, &sdp.offer, "offer", OFFER_SDP) => {
                    stats.invalid(Invalid::Malformed)
                }
                Ok(origin) => {
                    stats.ok(Kind::Offer, now_ns.saturating_sub(origin.sent_ns));
                    outcome.answer = self.answer(
                        model,
                        sdp,
                        rng,
                        origin,
                        (info_hash, peer_id, offer_id),
                        now_ns,
                        answer_out,
                        stats,
                    );
                }
            },
            ServerMessage::Answer {
                info_hash,
                peer_id,
                offer_id,
                answer,
            } => match self.check_relayed(model, &offer_id, &info_hash, &peer_id, true) {
                Err(why) => stats.invalid(why),
                Ok(_) if !same_sdp(answer, &sdp.answer, "answer", ANSWER_SDP) => {
                    stats.invalid(Invalid::Malformed)
                }
                Ok(origin) => stats.ok(Kind::Answer, now_ns.saturating_sub(origin.sent_ns)),
            },
            ServerMessage::Error {
                reason,
                action,
                info_hash,
            } => {
                outcome.answered =
                    self.on_error(reason.as_bytes(), action, info_hash, now_ns, stats)
            }
        }
        outcome
    }

    /// Checks a relayed offer (`answer` false) or answer against the origin
    /// its offer id names.
    fn check_relayed(
        &self,
        model: &TrafficModel,
        offer_id: &OfferId,
        info_hash: &InfoHash,
        peer_id: &PeerId,
        answer: bool,
    ) -> Result<OfferOrigin, Invalid> {
        let origin = offer_origin(offer_id).ok_or(Invalid::UnknownOffer)?;
        let torrent = u64::from(origin.torrent);
        if torrent >= model.torrents() || origin.conn >= model.sources() {
            return Err(Invalid::UnknownOffer);
        }
        if model.info_hash(torrent) != *info_hash {
            return Err(Invalid::WrongInfoHash);
        }
        // The peer the message comes from: who made the offer, or who
        // answered it (a peer of another connection, speaking for the torrent).
        let from = if answer {
            if origin.conn != self.conn {
                return Err(Invalid::UnknownOffer);
            }
            let p = model.peer_index(peer_id).ok_or(Invalid::WrongPeer)?;
            p % model.sources()
        } else {
            origin.conn
        };
        if from == self.conn {
            return Err(Invalid::SelfInPeers);
        }
        if model.peer_for_torrent(from, torrent).peer_id != *peer_id {
            return Err(Invalid::WrongPeer);
        }
        Ok(origin)
    }

    /// Answers a share of the offers: the peer of this connection that
    /// speaks for the torrent announces with its answer. Not while an
    /// announce of the same torrent is in flight (its answer would not be
    /// told from this one's).
    #[allow(clippy::too_many_arguments)]
    fn answer(
        &mut self,
        model: &TrafficModel,
        sdp: &Sdp,
        rng: &mut Rng,
        origin: OfferOrigin,
        (info_hash, to_peer_id, offer_id): (InfoHash, PeerId, OfferId),
        now_ns: u64,
        out: &mut Vec<u8>,
        stats: &mut Stats,
    ) -> bool {
        if rng.f64() >= self.answer_share
            || self
                .pending
                .is_some_and(|p| p.kind == Kind::Announce && p.info_hash == info_hash)
        {
            return false;
        }
        let peer = model.peer_for_torrent(self.conn, u64::from(origin.torrent));
        // As WebTorrent sends it: the answer alone, no `left` nor event.
        write_announce_request(
            out,
            &AnnounceMessage {
                info_hash,
                peer_id: peer.peer_id,
                event: AnnounceEvent::None,
                left: None,
                numwant: None,
                offers: Vec::new(),
                answer: Some(Answer {
                    to_peer_id,
                    offer_id,
                    answer: &sdp.answer,
                }),
            },
        );
        self.answers_sent.push(AnswerSent {
            info_hash,
            sent_ns: now_ns,
        });
        stats.sent(Kind::Answer);
        true
    }

    /// An error answer: to the request in flight when it names it (or
    /// names nothing), else about an answer-announce of the torrent it
    /// names. `true` when it answers the request in flight.
    fn on_error(
        &mut self,
        reason: &[u8],
        action: Option<Action>,
        info_hash: Option<InfoHash>,
        now_ns: u64,
        stats: &mut Stats,
    ) -> bool {
        if let Some(p) = self.pending {
            let fits = match p.kind {
                Kind::Announce => {
                    action != Some(Action::Scrape) && info_hash.is_none_or(|h| h == p.info_hash)
                }
                _ => action != Some(Action::Announce) && info_hash.is_none(),
            };
            if fits {
                self.pending = None;
                stats.error(p.kind, reason, now_ns.saturating_sub(p.sent_ns));
                return true;
            }
        }
        if let Some(a) = info_hash.and_then(|h| self.answers_sent.iter().find(|a| a.info_hash == h))
        {
            // The answer-announce may still get its announce answer (aquatic
            // sends both): it stays.
            stats.error(Kind::Answer, reason, now_ns.saturating_sub(a.sent_ns));
            return false;
        }
        let kind = match action {
            Some(Action::Scrape) => Kind::Scrape,
            _ => Kind::Announce,
        };
        self.unasked(kind, info_hash, stats);
        false
    }

    /// An answer to no request in flight: late (its request timed out), of
    /// the other kind than the one in flight, or unasked for.
    fn unasked(&mut self, kind: Kind, info_hash: Option<InfoHash>, stats: &mut Stats) {
        if let Some(t) = self.timed_out {
            if t.kind == kind && (kind != Kind::Announce || info_hash == Some(t.info_hash)) {
                self.timed_out = None;
                stats.late += 1;
                return;
            }
        }
        match self.pending {
            Some(p) if p.kind != kind => stats.invalid(Invalid::WrongAction),
            Some(_) => stats.invalid(Invalid::WrongInfoHash),
            None => stats.invalid(Invalid::UnknownTransaction),
        }
    }

    /// A scrape answer holds only info-hashes asked for, each once (a
    /// tracker may leave out torrents it does not know, as aquatic_ws does).
    fn scrape_matches(&self, files: &[(InfoHash, tracker_proto::ScrapeStats)], n: usize) -> bool {
        let asked = &self.scrape[..n];
        files.iter().enumerate().all(|(i, (hash, _))| {
            asked.contains(hash) && !files[..i].iter().any(|(h, _)| h == hash)
        })
    }

    /// At `now_ns`: counts the request in flight as timed out after
    /// `timeout_ns` (`true` then), and forgets answer-announces as old. The
    /// first answer-announce left unanswered says the tracker does not
    /// answer them; after one has been answered, one left so is a time-out.
    pub fn expire(&mut self, now_ns: u64, timeout_ns: u64, stats: &mut Stats) -> bool {
        let old = |sent_ns: u64| sent_ns.saturating_add(timeout_ns) <= now_ns;
        let before = self.answers_sent.len();
        self.answers_sent.retain(|a| !old(a.sent_ns));
        let expired = (before - self.answers_sent.len()) as u64;
        if expired > 0 {
            match self.acks {
                AnswerAcks::Unknown => self.acks = AnswerAcks::No,
                AnswerAcks::Yes => stats.counters.timeouts[Kind::Answer as usize] += expired,
                AnswerAcks::No => {}
            }
        }
        match self.pending {
            Some(p) if old(p.sent_ns) => {
                self.pending = None;
                self.timed_out = Some(p);
                stats.timeout(p.kind);
                true
            }
            _ => false,
        }
    }

    /// When the request in flight times out, if there is one.
    pub fn deadline_ns(&self, timeout_ns: u64) -> Option<u64> {
        self.pending.map(|p| p.sent_ns.saturating_add(timeout_ns))
    }

    /// The connection closed: the request in flight is lost with it, and
    /// its answer-announces will not be answered.
    pub fn lost(&mut self, stats: &mut Stats) {
        if self.pending.take().is_some() {
            stats.invalid(Invalid::ConnectionLost);
        }
        self.answers_sent.clear();
        self.timed_out = None;
    }
}

#[cfg(test)]
mod tests;
