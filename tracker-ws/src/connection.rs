//! One WebSocket connection: its messages read within the idle timeout and
//! answered in order, what it is sent written by a writer of its own from a
//! bounded queue, and at its end its peers taken out of their torrents.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::{poll_fn, Future};
use std::net::IpAddr;
use std::pin::Pin;
use std::rc::Rc;
use std::task::Poll;
use std::time::{Duration, Instant};

use async_tungstenite::tungstenite::error::{CapacityError, Error as WsError};
use async_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use async_tungstenite::tungstenite::protocol::{CloseFrame, Role};
use async_tungstenite::tungstenite::Message;
use async_tungstenite::WebSocketStream;
use futures_lite::{AsyncRead, AsyncWrite, StreamExt};
use futures_util::SinkExt;
use glommio::timer::Timer;
use tracker_proto::ws::{
    parse_client_message, write_announce_response, write_answer, write_error, write_offer,
    write_scrape_response, Action, AnnounceMessage, ClientMessage, MessageError, OfferId,
};
use tracker_proto::{canonical_ip, AnnounceEvent, BlockLevel, InfoHash, PeerId, ScrapeStats};
use tracker_runtime::clock;
use tracker_runtime::mesh::{OfferToRelay, Relay, RelayKind, RouteError, RtcAnnounceRequest};
use tracker_swarm::AnnounceRefused;
use tracker_swarm::{ConnectionRef, RtcAnnounce};

use crate::blocks::Held;
use crate::incoming::{Incoming, Watched};
use crate::queue::{Outgoing, Queue};
use crate::{Closing, ConnectionSlot, WsService};

/// The most queued messages one write takes: bounds the time one busy
/// connection holds the executor, with the frame layer's write buffer
/// (`lib.rs`) bounding the bytes.
const MESSAGES_PER_WRITE: usize = 16;

/// A queued text as a frame's message.
fn text_message(text: Vec<u8>) -> Message {
    debug_assert!(std::str::from_utf8(&text).is_ok());
    // SAFETY: everything queued is written by tracker_proto::ws's writers,
    // which write only UTF-8 (ASCII, ids as the UTF-8 of U+0000..U+00FF,
    // strings by serde_json, raw offers and answers taken from text frames
    // already checked). Checking it again cost a few percent of the CPU per
    // relayed offer.
    let text = unsafe { String::from_utf8_unchecked(text) };
    Message::text(text)
}

/// An offer handed to this connection's peer: its answer may go back to
/// `from` until `expires`.
struct PendingOffer {
    info_hash: InfoHash,
    from_peer: PeerId,
    offer_id: OfferId,
    from: ConnectionRef,
    expires: u32,
}

/// What the service keeps of an open connection, for relays to find it.
pub(crate) struct Connection {
    queue: Queue,
    pending: RefCell<VecDeque<PendingOffer>>,
}

impl Connection {
    /// Queues an offer or answer relayed to this connection.
    pub(crate) fn relayed(&self, service: &WsService, relay: Relay) {
        // What the message will take: its SDP and at most 160 bytes around.
        let len = relay.sdp.len() + 160;
        // A full lane drops it before any work is spent on it: a client far
        // behind would otherwise cost as much as one that reads.
        if !self.queue.relay_has_room(len) {
            service.stats.relay_queue_full.inc();
            return;
        }
        let mut text = Vec::with_capacity(len);
        let (write, relayed): (fn(&mut Vec<u8>, &_, &_, &_, &str), _) = match relay.kind {
            RelayKind::Offer => (write_offer, &service.stats.offers_relayed),
            RelayKind::Answer => (write_answer, &service.stats.answers_relayed),
        };
        write(
            &mut text,
            &relay.info_hash,
            &relay.from_peer,
            &relay.offer_id,
            &relay.sdp,
        );
        if !self.queue.push_relay(text) {
            service.stats.relay_queue_full.inc();
            return;
        }
        relayed.inc();
        if relay.kind == RelayKind::Offer {
            let mut pending = self.pending.borrow_mut();
            if pending.len() >= service.config.max_pending_offers_per_connection {
                pending.pop_front();
            }
            pending.push_back(PendingOffer {
                info_hash: relay.info_hash,
                from_peer: relay.from_peer,
                offer_id: relay.offer_id,
                from: relay.from,
                expires: clock::now_secs().saturating_add(service.config.offer_timeout_secs),
            });
        }
    }

    /// Takes the offer an answer is for, if it was made to this connection
    /// and has not expired.
    fn take_offer(
        &self,
        info_hash: &InfoHash,
        to: &PeerId,
        offer_id: &OfferId,
    ) -> Option<ConnectionRef> {
        let now = clock::now_secs();
        let mut pending = self.pending.borrow_mut();
        pending.retain(|offer| offer.expires > now);
        let at = pending.iter().position(|offer| {
            offer.info_hash == *info_hash && offer.from_peer == *to && offer.offer_id == *offer_id
        })?;
        pending.remove(at).map(|offer| offer.from)
    }
}

/// A connection listed for relays to find, and counted open, for as long as
/// this lives: dropped on every path out of `serve`, a contained panic
/// included (whose peers then leave their torrents by expiry).
struct Registered<'a> {
    service: &'a WsService,
    connection: Rc<Connection>,
    id: u64,
    /// ws (0) or wss (1).
    which: usize,
}

impl<'a> Registered<'a> {
    fn new(service: &'a WsService, connection: Rc<Connection>, which: usize) -> Self {
        let id = service.allocate_id();
        service
            .connections
            .borrow_mut()
            .insert(id, connection.clone());
        if let Some(open) = service.open.get(which) {
            open.set(open.get() + 1);
        }
        Registered {
            service,
            connection,
            id,
            which,
        }
    }
}

impl Drop for Registered<'_> {
    fn drop(&mut self) {
        self.connection.queue.shut();
        self.service.connections.borrow_mut().remove(&self.id);
        if let Some(open) = self.service.open.get(self.which) {
            open.set(open.get() - 1);
        }
    }
}

/// What the reader saw that ends the connection.
enum End {
    /// The client closed, or broke the protocol: nothing more to send.
    Gone,
    /// The tracker closes it with this close frame, after what is queued.
    Close(u16, &'static str),
}

/// Per connection state the reader alone uses.
struct Session<'a> {
    me: ConnectionRef,
    ip: IpAddr,
    /// The torrents it announced in, with its peer id in each: a WebRTC
    /// peer each, which `peers` counts for its address.
    torrents: ahash::HashMap<InfoHash, PeerId>,
    peers: Held<'a>,
    /// The bytes of its message under way, counted for its address.
    unfinished: Held<'a>,
    out: Vec<u8>,
    hashes_out: Vec<ScrapeStats>,
    files: Vec<(InfoHash, ScrapeStats)>,
}

/// What woke the reader while it waited for a frame.
enum Woke {
    Frame(Option<Result<Message, WsError>>),
    /// The tracker stops, or the connection is to make room.
    Closing,
    Idle,
    /// The message under way did not come whole in time.
    MessageTimeout,
    /// The message under way took a block of addresses past its budget of
    /// unfinished bytes.
    Unfinished(BlockLevel),
}

/// One timer, set to whichever deadline is nearest now.
struct Alarm {
    timer: Timer,
    at: Instant,
}

impl Alarm {
    fn new(after: Duration) -> Self {
        Alarm {
            timer: Timer::new(after),
            at: Instant::now() + after,
        }
    }

    /// Ready once `at` has passed; `at` may move between polls.
    fn poll_at(&mut self, at: Instant, cx: &mut std::task::Context<'_>) -> Poll<()> {
        if at != self.at {
            self.timer
                .reset(at.saturating_duration_since(Instant::now()));
            self.at = at;
        }
        Pin::new(&mut self.timer).poll(cx).map(drop)
    }
}

/// The bytes of the pong to a ping of `payload` bytes, as the frame layer
/// writes it (a server's frames are not masked).
fn pong_bytes(payload: usize) -> usize {
    2 + payload
}

impl WsService {
    /// Serves a connection upgraded by tracker-http (its 101 answer sent):
    /// `read_ahead` is what the client sent after the upgrade's head;
    /// `graceful_close` makes the socket's close graceful, called before a
    /// close frame is sent (any other end resets it).
    pub async fn serve<S, L>(
        &self,
        stream: S,
        read_ahead: Vec<u8>,
        peer_ip: IpAddr,
        tls: bool,
        slot: &L,
        graceful_close: impl FnOnce(),
    ) where
        S: AsyncRead + AsyncWrite + Unpin,
        L: ConnectionSlot,
    {
        let mut graceful_close = Some(graceful_close);
        let which = usize::from(tls);
        if let Some(traffic) = self.traffic.get(which) {
            traffic.upgrades.inc();
        }
        let incoming = Rc::new(RefCell::new(Incoming::default()));
        incoming.borrow_mut().observe(&read_ahead, Instant::now());
        let ws = WebSocketStream::from_partially_read(
            Watched::new(stream, incoming.clone()),
            read_ahead,
            Role::Server,
            Some(self.frames),
        )
        .await;
        let (mut sender, mut receiver) = ws.split();
        let connection = Rc::new(Connection {
            queue: Queue::new(
                self.config.max_queued_messages,
                self.config.max_queued_bytes,
            ),
            pending: RefCell::new(VecDeque::new()),
        });
        let registered = Registered::new(self, connection.clone(), which);
        let id = registered.id;
        let ip = canonical_ip(peer_ip);
        let quota = self.shard.quota(ip);
        let mut session = Session {
            me: ConnectionRef {
                worker: self.shard.index() as u16,
                id,
            },
            ip,
            torrents: ahash::HashMap::default(),
            peers: Held::new(&self.peers, ip, quota),
            unfinished: Held::new(&self.unfinished, ip, quota),
            out: Vec::new(),
            hashes_out: Vec::new(),
            files: Vec::new(),
        };
        let writer = async {
            while let Some(first) = connection.queue.next().await {
                let mut last = false;
                // What is queued now goes out in one write (up to
                // MESSAGES_PER_WRITE and the frame layer's write buffer):
                // one syscall, one segment and one wake-up of the client for
                // a burst of relays, not one each.
                let batch = async {
                    let mut item = Some(first);
                    let mut fed = 0;
                    while let Some(next) = item.take() {
                        match next {
                            Outgoing::Text(text) => sender.feed(text_message(text)).await?,
                            // In the frame layer's write buffer (or about to
                            // be): the flush below sends it, under the same
                            // deadline as any message.
                            Outgoing::Pong(_) => {}
                            Outgoing::Close(code, reason) => {
                                if let Some(graceful_close) = graceful_close.take() {
                                    graceful_close();
                                }
                                last = true;
                                let close = Message::Close(Some(CloseFrame {
                                    code: CloseCode::from(code),
                                    reason: reason.into(),
                                }));
                                sender.feed(close).await?;
                            }
                        }
                        fed += 1;
                        if !last && fed < MESSAGES_PER_WRITE {
                            item = connection.queue.try_next();
                        }
                    }
                    sender.flush().await
                };
                let sent = futures_lite::future::or(async { Some(batch.await) }, async {
                    glommio::timer::sleep(self.write_timeout).await;
                    None
                })
                .await;
                match sent {
                    Some(Ok(())) if !last => {}
                    Some(Ok(())) => break,
                    Some(Err(_)) => break,
                    None => {
                        self.stats.write_timeouts.inc();
                        break;
                    }
                }
            }
        };
        let reader = async {
            let end = self
                .read(&mut receiver, &connection, &mut session, &incoming, slot)
                .await;
            match end {
                End::Gone => connection.queue.shut(),
                End::Close(code, reason) => connection.queue.close(code, reason),
            }
            // The writer ends the connection once it has sent the close.
            std::future::pending::<()>().await
        };
        futures_lite::future::or(writer, reader).await;
        drop(registered);
        let gone: Vec<_> = session
            .torrents
            .drain()
            .map(|(info_hash, peer_id)| (info_hash, peer_id, session.me))
            .collect();
        // At a stop the peers stay until the swarms are saved, so that the
        // completed counts of their torrents are saved with them.
        if !gone.is_empty() && !self.stop.is_fired() {
            self.shard.rtc_gone(gone).await;
        }
    }

    async fn read<R, L>(
        &self,
        receiver: &mut R,
        connection: &Connection,
        session: &mut Session<'_>,
        incoming: &RefCell<Incoming>,
        slot: &L,
    ) -> End
    where
        R: futures_lite::Stream<Item = Result<Message, WsError>> + Unpin,
        L: ConnectionSlot,
    {
        let mut alarm = Alarm::new(self.idle_timeout);
        // Only a whole message counts as the client's: pings, and fragments
        // of a message never finished, would otherwise keep a connection
        // for ever.
        let mut last_message = Instant::now();
        loop {
            // Read no more than its answers (and pongs) can be queued for.
            connection.queue.room().await;
            if connection.queue.is_shut() {
                self.stats.queue_full.inc();
                return End::Gone;
            }
            slot.set_idle(true);
            // The deadlines before the frame as well as after it: `or` polls
            // in order, and the frame's read may take the bytes a deadline
            // must see, but a client that keeps a frame always ready (a
            // fragment, a ping, a fragment...) would otherwise never have
            // them checked.
            let woke = match self.overdue(incoming, &session.unfinished, last_message) {
                Some(overdue) => overdue,
                None => {
                    let frame = async { Woke::Frame(receiver.next().await) };
                    let closing = async {
                        futures_lite::future::or(self.stop.wait(), slot.evicted()).await;
                        Woke::Closing
                    };
                    let deadlines =
                        self.deadlines(incoming, &session.unfinished, last_message, &mut alarm);
                    futures_lite::future::or(frame, futures_lite::future::or(closing, deadlines))
                        .await
                }
            };
            let message = match woke {
                Woke::Idle => {
                    self.stats.idle_timeouts.inc();
                    return End::Close(1000, "idle");
                }
                Woke::MessageTimeout => {
                    self.stats.message_timeouts.inc();
                    return End::Close(1008, "message not whole in time");
                }
                Woke::Unfinished(level) => {
                    self.stats.unfinished_limit(level).inc();
                    return End::Close(1013, "too many unfinished messages from this address");
                }
                Woke::Closing if self.stop.is_fired() => {
                    return match self.closing.get() {
                        Closing::Stop => End::Close(1001, "tracker stopping"),
                        Closing::HandOver => End::Close(1012, "tracker restarting"),
                    }
                }
                Woke::Closing => {
                    self.stats.evicted.inc();
                    return End::Close(1013, "tracker full");
                }
                Woke::Frame(None) => return End::Gone,
                Woke::Frame(Some(Err(e))) => {
                    match e {
                        WsError::Capacity(CapacityError::MessageTooLong { .. }) => {
                            self.stats.too_large.inc();
                            return End::Close(1009, "message too large");
                        }
                        WsError::Protocol(_) | WsError::Utf8(_) => self.stats.protocol_errors.inc(),
                        _ => {}
                    }
                    return End::Gone;
                }
                Woke::Frame(Some(Ok(message))) => message,
            };
            slot.set_idle(false);
            match message {
                Message::Text(text) => {
                    last_message = Instant::now();
                    self.message(text.as_bytes(), connection, session).await;
                }
                Message::Binary(_) => {
                    self.stats.binary.inc();
                    return End::Close(1003, "text messages only");
                }
                Message::Close(_) => return End::Gone,
                // The frame layer queued its pong: it counts in the queue
                // until the writer has flushed it out.
                Message::Ping(payload) => {
                    connection.queue.push_pong(pong_bytes(payload.len()));
                }
                _ => {}
            }
        }
    }

    /// Resolves at the nearest of the connection's deadlines: idle since
    /// `last_message`, or its message under way not whole in time; or
    /// once that message's bytes take its address past a budget. Polled
    /// after every read, so each new byte is counted at once.
    fn deadlines<'b>(
        &'b self,
        incoming: &'b RefCell<Incoming>,
        unfinished: &'b Held<'_>,
        last_message: Instant,
        alarm: &'b mut Alarm,
    ) -> impl Future<Output = Woke> + 'b {
        poll_fn(move |cx| {
            let (at, why) = match self.next_deadline(incoming, unfinished, last_message) {
                Ok(next) => next,
                Err(over) => return Poll::Ready(over),
            };
            alarm.poll_at(at, cx).map(|()| why)
        })
    }

    /// What ends the connection now, if anything: its unfinished bytes past
    /// a budget, or a deadline passed.
    fn overdue(
        &self,
        incoming: &RefCell<Incoming>,
        unfinished: &Held<'_>,
        last_message: Instant,
    ) -> Option<Woke> {
        match self.next_deadline(incoming, unfinished, last_message) {
            Err(over) => Some(over),
            Ok((at, why)) => (at <= Instant::now()).then_some(why),
        }
    }

    /// The unfinished bytes counted; the next deadline and what it ends
    /// the connection for, or what ends it now (a budget passed).
    fn next_deadline(
        &self,
        incoming: &RefCell<Incoming>,
        unfinished: &Held<'_>,
        last_message: Instant,
    ) -> Result<(Instant, Woke), Woke> {
        let (started, bytes) = {
            let incoming = incoming.borrow();
            (incoming.started(), incoming.unfinished())
        };
        unfinished.set(bytes).map_err(Woke::Unfinished)?;
        let idle = last_message + self.idle_timeout;
        Ok(match started.map(|at| at + self.message_timeout) {
            Some(whole_by) if whole_by < idle => (whole_by, Woke::MessageTimeout),
            _ => (idle, Woke::Idle),
        })
    }

    /// Answers one text message.
    async fn message(&self, text: &[u8], connection: &Connection, s: &mut Session<'_>) {
        s.out.clear();
        match parse_client_message(text, &self.limits) {
            Err(error) => {
                self.stats.invalid.inc();
                refuse(&mut s.out, error);
            }
            Ok(ClientMessage::Announce(announce)) => {
                if announce.answer.is_some() {
                    self.stats.answers.inc();
                } else {
                    self.stats.announces.inc();
                }
                self.announce(&announce, connection, s).await;
            }
            Ok(ClientMessage::Scrape(scrape)) => {
                self.stats.scrapes.inc();
                self.scrape(&scrape.info_hashes, s).await;
            }
        }
        if !s.out.is_empty() {
            // Full: counted and cut at the top of the reader's loop.
            connection.queue.push(std::mem::take(&mut s.out));
        }
    }

    async fn announce(
        &self,
        m: &AnnounceMessage<'_>,
        connection: &Connection,
        s: &mut Session<'_>,
    ) {
        let error = |out: &mut Vec<u8>, reason: &str| {
            write_error(out, Some(Action::Announce), Some(&m.info_hash), reason)
        };
        let held = s.torrents.get(&m.info_hash).copied();
        match held {
            Some(peer_id) if peer_id != m.peer_id => {
                self.stats.peer_id_conflict.inc();
                return error(&mut s.out, "one peer id per torrent per connection");
            }
            None if s.torrents.len() >= self.config.max_torrents_per_connection => {
                self.stats.torrent_limit.inc();
                return error(&mut s.out, "too many torrents on this connection");
            }
            _ => {}
        }
        if let Some(answer) = &m.answer {
            match connection.take_offer(&m.info_hash, &answer.to_peer_id, &answer.offer_id) {
                Some(to) => {
                    self.shard.relay(Relay {
                        to,
                        kind: RelayKind::Answer,
                        info_hash: m.info_hash,
                        from_peer: m.peer_id,
                        from: s.me,
                        offer_id: answer.offer_id,
                        sdp: answer.answer.into(),
                    });
                    self.shard.flush_relays();
                }
                None => {
                    self.stats.relay_unknown_offer.inc();
                    return error(&mut s.out, "no such offer to answer: it may have expired");
                }
            }
            // An answer alone (WebTorrent's) says nothing of the peer's
            // state: announcing it would make a seeder a leecher.
            if m.left.is_none() && m.event == AnnounceEvent::None && m.offers.is_empty() {
                return;
            }
        }
        let new_peer = held.is_none() && m.event != AnnounceEvent::Stopped;
        // Held for the address before the announce goes out, so that its
        // other connections, announcing meanwhile, see it.
        if new_peer {
            if let Err(level) = s.peers.set(s.torrents.len() + 1) {
                self.stats.peer_limit(level).inc();
                return error(&mut s.out, "too many WebRTC peers from this address");
            }
        }
        let wanted = m
            .numwant
            .map_or(m.offers.len(), |n| m.offers.len().min(n as usize));
        let request = RtcAnnounceRequest {
            announce: RtcAnnounce {
                info_hash: m.info_hash,
                peer_id: m.peer_id,
                connection: s.me,
                ip: s.ip,
                event: m.event,
                seeder: m.is_seeder(),
                offers: wanted,
            },
            offers: m
                .offers
                .iter()
                .take(wanted)
                .map(|offer| OfferToRelay {
                    offer_id: offer.offer_id,
                    sdp: offer.offer.into(),
                })
                .collect(),
        };
        let answer = self.shard.rtc_announce(request).await;
        match (&answer, m.event) {
            (Ok(Ok(_)), AnnounceEvent::Stopped) => {
                s.torrents.remove(&m.info_hash);
            }
            (Ok(Ok(_)), _) if new_peer => {
                s.torrents.insert(m.info_hash, m.peer_id);
            }
            _ => {}
        }
        // What it holds now; never more than was held for it above.
        let _ = s.peers.set(s.torrents.len());
        match answer {
            Ok(Ok(counts)) => {
                write_announce_response(
                    &mut s.out,
                    &m.info_hash,
                    counts.seeders,
                    counts.leechers,
                    self.config.announce_interval_secs,
                );
            }
            Ok(Err(refused)) => {
                match refused {
                    AnnounceRefused::NotAllowed => self.stats.not_allowed.inc(),
                    _ => self.stats.refused.inc(),
                }
                error(&mut s.out, refused.reason());
            }
            Err(RouteError::Overloaded) => {
                self.stats.overloaded.inc();
                error(&mut s.out, "tracker overloaded: try again later");
            }
            Err(_) => error(&mut s.out, "internal error"),
        }
    }

    async fn scrape(&self, hashes: &[InfoHash], s: &mut Session<'_>) {
        let error =
            |out: &mut Vec<u8>, reason: &str| write_error(out, Some(Action::Scrape), None, reason);
        s.files.clear();
        let routed = if hashes.is_empty() {
            if !self.full_scrape.enabled {
                self.stats.full_scrape_refused.inc();
                return error(&mut s.out, "full scrape is not served: name the info_hash");
            }
            self.shard
                .rtc_scrape_some(self.full_scrape.max_torrents, &mut s.files)
                .await
        } else {
            let routed = self.shard.rtc_scrape(hashes, &mut s.hashes_out).await;
            s.files
                .extend(hashes.iter().copied().zip(s.hashes_out.iter().copied()));
            routed
        };
        match routed {
            Ok(()) => write_scrape_response(&mut s.out, &s.files),
            Err(RouteError::Overloaded) => {
                self.stats.overloaded.inc();
                error(&mut s.out, "tracker overloaded: try again later")
            }
            Err(_) => error(&mut s.out, "internal error"),
        }
    }
}

/// The error answer to a refused message.
fn refuse(out: &mut Vec<u8>, error: MessageError) {
    write_error(
        out,
        error.action,
        error.info_hash.as_ref(),
        error.kind.reason(),
    );
}

/// The `101 Switching Protocols` answer to an upgrade whose
/// `Sec-WebSocket-Key` is `key`.
pub fn write_upgrade_response(out: &mut Vec<u8>, key: &[u8]) {
    let accept = tungstenite::handshake::derive_accept_key(key);
    out.extend_from_slice(
        b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: ",
    );
    out.extend_from_slice(accept.as_bytes());
    out.extend_from_slice(b"\r\n\r\n");
}
