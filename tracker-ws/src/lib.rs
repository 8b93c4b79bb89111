//! WebTorrent over WebSocket, on the same executors, listeners and
//! certificate as HTTP and HTTPS: tracker-http hands each upgraded
//! connection to this worker's [`WsService`], which answers its messages
//! from the shard (announces and scrapes at their torrent's owner, as for
//! the other protocols) and relays the WebRTC offers and answers they carry
//! to the connections of the peers they are for, on whichever worker holds
//! them (see `tracker_runtime::shard`'s relays).
//!
//! Every resource a connection holds is bounded: message and frame size,
//! the time a message may take to come whole, offers per announce and
//! their size, torrents per connection (one peer id each), offers awaiting
//! an answer (which expire), and the queue of what it is sent, pongs
//! included (a client that does not take it is cut). What the connections
//! of one client hold together is bounded too (`blocks`): the bytes of
//! their unfinished messages, and their WebRTC peers. Its slot among the
//! HTTP connections is held while it lives, so the HTTP caps count it, and
//! it may be closed to make room while it waits for a message, as an idle
//! HTTP connection may.

mod blocks;
pub mod config;
mod connection;
pub use connection::write_upgrade_response;
mod incoming;
mod queue;

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::rc::{Rc, Weak};
use std::time::Duration;

use async_tungstenite::tungstenite::protocol::WebSocketConfig as FrameConfig;
use blocks::BlockCounts;
use tracker_proto::ws::MessageLimits;
use tracker_proto::BlockLevel;
use tracker_runtime::counters;
use tracker_runtime::mesh::Relay;
use tracker_runtime::metrics::{
    Label, MetricSource, Sample, WS_ERRORS, WS_MESSAGES, WS_OPEN, WS_RELAYED, WS_RELAYS_DROPPED,
    WS_UPGRADES,
};
use tracker_runtime::shard::{RelaySink, Shard};
use tracker_runtime::shutdown::StopEvent;

/// Bytes of frames a connection gathers before writing them (about four
/// relayed offers of a usual size): a burst costs a write per 4 KiB, not
/// one per message, while the buffer, whose capacity stays with the
/// connection, stays small.
const WRITE_BUFFER_BYTES: usize = 4096;

pub use config::WebSocketConfig;
use connection::Connection;

counters! {
    /// Per-worker counters of WebSocket connections and messages.
    pub struct WsStats {
        pub announces: Counter => WS_MESSAGES { action = "announce" },
        pub answers: Counter => WS_MESSAGES { action = "answer" },
        pub scrapes: Counter => WS_MESSAGES { action = "scrape" },
        /// Messages refused: malformed, or past a limit of the message.
        pub invalid: Counter => WS_MESSAGES { action = "invalid" },
        pub offers_relayed: Counter => WS_RELAYED { kind = "offer" },
        pub answers_relayed: Counter => WS_RELAYED { kind = "answer" },
        /// Relays for a connection that had closed.
        pub relay_connection_gone: Counter => WS_RELAYS_DROPPED { reason = "connection_gone" },
        /// Relays that found their connection's queue full (dropped; the
        /// connection stays).
        pub relay_queue_full: Counter => WS_RELAYS_DROPPED { reason = "queue_full" },
        /// Answers to no offer made to their sender, or to an expired one.
        pub relay_unknown_offer: Counter => WS_RELAYS_DROPPED { reason = "unknown_offer" },
        /// Binary messages (the protocol is text).
        pub binary: Counter => WS_ERRORS { kind = "binary_message" },
        /// Messages or frames past websocket.max_message_bytes or
        /// max_frame_bytes; the connection is closed.
        pub too_large: Counter => WS_ERRORS { kind = "message_too_large" },
        /// Broken framing; the connection is closed.
        pub protocol_errors: Counter => WS_ERRORS { kind = "protocol_error" },
        pub idle_timeouts: Counter => WS_ERRORS { kind = "idle_timeout" },
        pub write_timeouts: Counter => WS_ERRORS { kind = "write_timeout" },
        /// Messages not whole within websocket.message_timeout_secs; the
        /// connection is closed.
        pub message_timeouts: Counter => WS_ERRORS { kind = "message_timeout" },
        /// Connections closed because their unfinished message took their
        /// address, subnet or network past its budget
        /// (websocket.max_unfinished_bytes_per_*).
        pub unfinished_address: Counter => WS_ERRORS { kind = "unfinished_bytes", level = "address" },
        pub unfinished_subnet: Counter => WS_ERRORS { kind = "unfinished_bytes", level = "subnet" },
        pub unfinished_network: Counter => WS_ERRORS { kind = "unfinished_bytes", level = "network" },
        /// Announces for a new torrent refused because the connections of
        /// their address, subnet or network hold websocket.max_peers_per_*.
        pub peers_address: Counter => WS_ERRORS { kind = "peers_per_address", level = "address" },
        pub peers_subnet: Counter => WS_ERRORS { kind = "peers_per_address", level = "subnet" },
        pub peers_network: Counter => WS_ERRORS { kind = "peers_per_address", level = "network" },
        /// Connections cut because answers to their own messages found
        /// their half of the queue full (a safety net: the next message is
        /// read only once there is room).
        pub queue_full: Counter => WS_ERRORS { kind = "queue_full" },
        /// Connections closed to make room for another (HTTP's caps).
        pub evicted: Counter => WS_ERRORS { kind = "evicted_idle" },
        /// Announces refused by the store's limits or the access list.
        pub refused: Counter => WS_ERRORS { kind = "refused" },
        pub not_allowed: Counter => WS_ERRORS { kind = "not_allowed" },
        /// A second peer id in a torrent on one connection.
        pub peer_id_conflict: Counter => WS_ERRORS { kind = "peer_id_conflict" },
        /// Announces for a new torrent past
        /// websocket.max_torrents_per_connection.
        pub torrent_limit: Counter => WS_ERRORS { kind = "torrents_per_connection" },
        /// Announces and scrapes for other workers refused because too many
        /// await answers.
        pub overloaded: Counter => WS_ERRORS { kind = "overloaded" },
        pub full_scrape_refused: Counter => WS_ERRORS { kind = "full_scrape_off" },
    }
}

impl WsStats {
    fn unfinished_limit(&self, level: BlockLevel) -> &tracker_runtime::counters::Counter {
        match level {
            BlockLevel::Address => &self.unfinished_address,
            BlockLevel::Subnet => &self.unfinished_subnet,
            BlockLevel::Network => &self.unfinished_network,
        }
    }

    fn peer_limit(&self, level: BlockLevel) -> &tracker_runtime::counters::Counter {
        match level {
            BlockLevel::Address => &self.peers_address,
            BlockLevel::Subnet => &self.peers_subnet,
            BlockLevel::Network => &self.peers_network,
        }
    }
}

counters! {
    /// Per-worker counters of ws:// or wss://.
    pub struct WsTraffic {
        pub upgrades: Counter => WS_UPGRADES {},
    }
}

/// The `protocol` label of each entry of `WsService::traffic`.
const PROTOCOLS: [&[Label]; 2] = [&[("protocol", "ws")], &[("protocol", "wss")]];

/// A connection's slot among the HTTP connections (tracker-http's), which
/// its caps count and which may be asked to make room.
pub trait ConnectionSlot {
    type Evicted<'a>: Future<Output = ()>
    where
        Self: 'a;
    /// Waiting for a message (it may be closed to make room) or not.
    fn set_idle(&self, idle: bool);
    /// Resolves once the connection is asked to close to make room.
    fn evicted(&self) -> Self::Evicted<'_>;
}

/// Full scrapes: whether served, and up to how many torrents (HTTP's
/// settings, `http.full_scrape`).
#[derive(Clone, Copy, Debug)]
pub struct FullScrape {
    pub enabled: bool,
    pub max_torrents: usize,
}

/// Why the WebSocket connections are closed, and so their close code.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Closing {
    /// The tracker stops (1001, going away).
    Stop,
    /// Another process takes over (1012, service restart): reconnect.
    HandOver,
}

/// One worker's WebSocket service.
pub struct WsService {
    shard: Rc<Shard>,
    config: WebSocketConfig,
    limits: MessageLimits,
    frames: FrameConfig,
    full_scrape: FullScrape,
    idle_timeout: Duration,
    write_timeout: Duration,
    message_timeout: Duration,
    /// The bytes of unfinished messages per client block.
    unfinished: BlockCounts,
    /// The WebRTC peers connections hold, per client block.
    peers: BlockCounts,
    /// This worker's open connections by id (ids are never reused).
    /// Keyed by ahash: every relay looks its connection up here.
    connections: RefCell<ahash::HashMap<u64, Rc<Connection>>>,
    next_id: Cell<u64>,
    /// Open now, ws and wss.
    open: [Cell<usize>; 2],
    stop: StopEvent,
    closing: Cell<Closing>,
    pub stats: WsStats,
    /// ws, then wss.
    pub traffic: [WsTraffic; 2],
}

impl WsService {
    pub fn new(shard: Rc<Shard>, config: &WebSocketConfig, full_scrape: FullScrape) -> Rc<Self> {
        let frames = FrameConfig::default()
            // Read into a small buffer that grows only for large messages:
            // the default (128 KiB) would cost that much per connection.
            .read_buffer_size(4096)
            // Frames gather up to this before they are written, so that a
            // batch (see `connection.rs`) goes out in one write; the
            // buffer's capacity stays with the connection, so it is small.
            .write_buffer_size(WRITE_BUFFER_BYTES)
            // Never reached: a write that finds it past WRITE_BUFFER_BYTES
            // waits for the socket, and a pong is queued only with room
            // (see `queue.rs`), so it holds one write and the pongs the
            // queue counts; the queue's bounds keep it from failing a
            // message it let through.
            .max_write_buffer_size(
                config
                    .max_queued_bytes
                    .saturating_add(config.max_message_bytes),
            )
            .max_message_size(Some(config.max_message_bytes))
            .max_frame_size(Some(config.max_frame_bytes));
        let service = Rc::new(WsService {
            limits: config.message_limits(),
            frames,
            full_scrape,
            idle_timeout: Duration::from_secs(config.idle_timeout_secs.into()),
            write_timeout: Duration::from_secs(config.write_timeout_secs.into()),
            message_timeout: Duration::from_secs(config.message_timeout_secs.into()),
            unfinished: BlockCounts::new(config.max_unfinished_bytes_per_block()),
            peers: BlockCounts::new(config.max_peers_per_block()),
            config: config.clone(),
            connections: RefCell::new(ahash::HashMap::default()),
            next_id: Cell::new(0),
            open: Default::default(),
            stop: StopEvent::default(),
            closing: Cell::new(Closing::Stop),
            stats: WsStats::default(),
            traffic: Default::default(),
            shard,
        });
        let source: Weak<dyn MetricSource> = Rc::downgrade(&service) as _;
        service.shard.add_metric_source(source);
        let sink: Weak<dyn RelaySink> = Rc::downgrade(&service) as _;
        service.shard.set_relay_sink(sink);
        service
    }

    /// Closes every connection with a close frame that tells browsers why
    /// (and that they should reconnect); their peers leave their torrents.
    pub fn stop(&self, why: Closing) {
        self.closing.set(why);
        self.stop.fire();
    }

    /// The send buffer to fix on each connection's socket (0: the
    /// kernel's).
    pub fn send_buffer_bytes(&self) -> usize {
        self.config.send_buffer_bytes
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.iter().map(Cell::get).sum()
    }

    fn allocate_id(&self) -> u64 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        id
    }
}

impl RelaySink for WsService {
    fn relay(&self, relay: Relay) {
        let connection = self.connections.borrow().get(&relay.to.id).cloned();
        match connection {
            Some(connection) => connection.relayed(self, relay),
            None => self.stats.relay_connection_gone.inc(),
        }
    }
}

impl MetricSource for WsService {
    fn samples(&self, out: &mut Vec<Sample>) {
        self.stats.samples(&[], out);
        for ((traffic, scope), open) in self.traffic.iter().zip(PROTOCOLS).zip(&self.open) {
            traffic.samples(scope, out);
            out.push(Sample::new(&WS_OPEN, scope, open.get() as u64));
        }
    }
}
