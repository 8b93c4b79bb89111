//! The `[websocket]` section of the config: WebTorrent over WebSocket, on
//! the HTTP and HTTPS listeners.

use documented::{Documented, DocumentedFields};
use serde::{Deserialize, Serialize};
use tracker_proto::ws::MessageLimits;
use tracker_runtime::config::{within, ConfigError};

/// WebTorrent: browsers announce over a WebSocket (ws:// on the HTTP
/// listeners, wss:// on the HTTPS ones, path / or /announce), and the
/// tracker relays WebRTC offers and answers between them. Connections count
/// against the HTTP connection caps (per worker, address, subnet, network).
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct WebSocketConfig {
    /// Serve WebSocket upgrades; false answers them 404. Unset: on, but
    /// for a private tracker ([private] enabled), which serves no
    /// WebTorrent and refuses to start with this set to true: UNIT3D's
    /// rules refuse browsers, and the site can account no WebRTC peer
    /// rightly (no port, no totals at a tab's close; see
    /// docs/OPERATIONS.md).
    pub enabled: Option<bool>,
    /// Seconds WebTorrent clients are told to wait between announces.
    pub announce_interval_secs: u32,
    /// Bytes of one message at most (aquatic_ws: 64 KiB); a larger one
    /// closes the connection. Bounds what a connection makes the tracker
    /// buffer while it reads.
    pub max_message_bytes: usize,
    /// Bytes of one frame at most (aquatic_ws: 16 KiB).
    pub max_frame_bytes: usize,
    /// Offers in one announce (WebTorrent sends up to 10); more are refused.
    pub max_offers: usize,
    /// Bytes of one offer's or answer's SDP (its raw JSON), relayed without
    /// being parsed; larger ones are refused.
    pub max_sdp_bytes: usize,
    /// Info-hashes in one scrape.
    pub max_scrape_hashes: usize,
    /// Torrents one connection may announce in, one WebRTC peer each;
    /// past it, announces for new torrents are refused. WebTorrent uses one
    /// connection per tracker for all its torrents, so this is what the
    /// largest seeder needs (WebTorrent Desktop or webtorrent-hybrid
    /// seeding a library, a PeerTube-like server), not a bound on memory:
    /// what the connections of one client hold together is bounded by
    /// max_peers_per_address and its subnet and network kin.
    pub max_torrents_per_connection: usize,
    /// WebRTC peers the connections of one client address (an IPv6 /64)
    /// hold on a worker at most, in all torrents together; an announce for
    /// a new torrent past it is refused. Each costs up to about 200 bytes
    /// (its entries in the connection and in its torrent's swarm, and a
    /// torrent's when it is the first), so an address holds at most about
    /// 4 MB a worker however many connections it opens: room for two of the
    /// largest seeders, or a NAT of hundreds of browsers.
    pub max_peers_per_address: usize,
    /// WebRTC peers the connections of one subnet (an IPv4 /24, an IPv6
    /// /56) hold on a worker at most, however many of its addresses they
    /// come from.
    pub max_peers_per_subnet: usize,
    /// WebRTC peers the connections of one network (an IPv4 /16, an IPv6
    /// /48) hold on a worker at most (about 16 MB). Counted where the
    /// connections are, not at the torrents' owners: one network can put
    /// workers times this many on one owner's store, so keep it well under
    /// swarm.max_peers_per_worker divided by the workers (the default,
    /// 80,000, is for up to 250 workers at the default cap).
    pub max_peers_per_network: usize,
    /// Seconds an offer handed to a peer may be answered (aquatic_ws: 120);
    /// an answer after that, or to an offer never made to the answerer, is
    /// dropped.
    pub offer_timeout_secs: u32,
    /// Offers a connection may hold unanswered; the oldest is forgotten for
    /// a new one. Bounds the memory a peer that never answers costs.
    pub max_pending_offers_per_connection: usize,
    /// Messages queued for one connection at most, and their bytes, so
    /// that no connection grows the tracker's memory: half for the answers
    /// to its own messages (sent first), half for the offers and answers
    /// other peers relay to it. A relay past its half is dropped (WebTorrent
    /// makes new offers; so no one can have a browser cut by flooding it
    /// with offers); a client's next message is read only once its answers
    /// have room, so one that sends faster than it reads is held back by
    /// TCP, and one that takes no message within write_timeout_secs is cut.
    pub max_queued_messages: usize,
    /// Bytes queued for one connection at most (see max_queued_messages).
    pub max_queued_bytes: usize,
    /// Seconds a connection may stay without sending a message (pings,
    /// and the fragments of a message not yet whole, do not count); it
    /// must be longer than announce_interval_secs, as WebTorrent sends
    /// nothing between announces.
    pub idle_timeout_secs: u32,
    /// Seconds a client may take to take what it is sent: each write of
    /// queued messages, and each pong to its pings, must be taken whole
    /// within it, or the connection is cut.
    pub write_timeout_secs: u32,
    /// Seconds a message may take to come whole, from the first byte of
    /// its first frame to the last of its last, however the client keeps
    /// the connection busy meanwhile (pings between fragments); then the
    /// connection is closed. Browsers send a message at once: this is ample
    /// for the largest (max_message_bytes) over a slow link.
    pub message_timeout_secs: u32,
    /// Bytes of unfinished messages (those whose last fragment has not
    /// come) the connections of one client address (an IPv6 /64) hold on a
    /// worker at most; the connection that would pass it is closed (1013).
    /// Per connection, max_message_bytes bounds them. Honest clients send
    /// a message at once, so they hold almost none.
    pub max_unfinished_bytes_per_address: usize,
    /// The same for a subnet (an IPv4 /24, an IPv6 /56).
    pub max_unfinished_bytes_per_subnet: usize,
    /// The same for a network (an IPv4 /16, an IPv6 /48).
    pub max_unfinished_bytes_per_network: usize,
    /// Bytes of each connection's socket send buffer (the kernel doubles
    /// it); 0 leaves it to the kernel, which grows it up to
    /// net.ipv4.tcp_wmem's maximum (4 MiB by default) for a client that
    /// reads slowly: kernel memory no other limit counts, held for as long
    /// as the connection lives. Messages are small; 64 KiB holds hundreds.
    pub send_buffer_bytes: usize,
}

impl Default for WebSocketConfig {
    fn default() -> Self {
        WebSocketConfig {
            enabled: None,
            announce_interval_secs: 120,
            max_message_bytes: 64 << 10,
            max_frame_bytes: 16 << 10,
            max_offers: 10,
            max_sdp_bytes: 8 << 10,
            max_scrape_hashes: 64,
            max_torrents_per_connection: 10_000,
            max_peers_per_address: 20_000,
            max_peers_per_subnet: 40_000,
            max_peers_per_network: 80_000,
            offer_timeout_secs: 120,
            max_pending_offers_per_connection: 64,
            max_queued_messages: 256,
            max_queued_bytes: 1 << 20,
            idle_timeout_secs: 300,
            write_timeout_secs: 10,
            message_timeout_secs: 10,
            max_unfinished_bytes_per_address: 256 << 10,
            max_unfinished_bytes_per_subnet: 1 << 20,
            max_unfinished_bytes_per_network: 2 << 20,
            send_buffer_bytes: 64 << 10,
        }
    }
}

impl WebSocketConfig {
    /// Whether WebSocket upgrades are served, for a private tracker or not.
    pub fn serves(&self, private: bool) -> bool {
        self.enabled.unwrap_or(!private)
    }

    /// `private`: the tracker is private ([private] enabled).
    pub fn validate(&self, private: bool) -> Result<(), ConfigError> {
        if private && self.enabled == Some(true) {
            return Err(ConfigError::key(
                "websocket.enabled",
                "a private tracker serves no WebTorrent: UNIT3D's rules refuse browsers, and \
                 a WebRTC peer cannot be accounted rightly (see docs/OPERATIONS.md); leave it \
                 unset",
            ));
        }
        within(
            "websocket.announce_interval_secs",
            self.announce_interval_secs as usize,
            1,
            86_400,
        )?;
        within(
            "websocket.max_message_bytes",
            self.max_message_bytes,
            1024,
            16 << 20,
        )?;
        within(
            "websocket.max_frame_bytes",
            self.max_frame_bytes,
            1024,
            self.max_message_bytes,
        )?;
        within("websocket.max_offers", self.max_offers, 0, 100)?;
        within(
            "websocket.max_sdp_bytes",
            self.max_sdp_bytes,
            64,
            self.max_message_bytes,
        )?;
        within(
            "websocket.max_scrape_hashes",
            self.max_scrape_hashes,
            1,
            1000,
        )?;
        within(
            "websocket.max_torrents_per_connection",
            self.max_torrents_per_connection,
            1,
            1_000_000,
        )?;
        within(
            "websocket.max_peers_per_address",
            self.max_peers_per_address,
            1,
            100_000_000,
        )?;
        within(
            "websocket.max_peers_per_subnet",
            self.max_peers_per_subnet,
            self.max_peers_per_address,
            100_000_000,
        )?;
        within(
            "websocket.max_peers_per_network",
            self.max_peers_per_network,
            self.max_peers_per_subnet,
            100_000_000,
        )?;
        within(
            "websocket.offer_timeout_secs",
            self.offer_timeout_secs as usize,
            1,
            3600,
        )?;
        within(
            "websocket.max_pending_offers_per_connection",
            self.max_pending_offers_per_connection,
            1,
            100_000,
        )?;
        within(
            "websocket.max_queued_messages",
            self.max_queued_messages,
            1,
            1_000_000,
        )?;
        within(
            "websocket.max_queued_bytes",
            self.max_queued_bytes,
            self.max_message_bytes,
            1 << 30,
        )?;
        within(
            "websocket.write_timeout_secs",
            self.write_timeout_secs as usize,
            1,
            3600,
        )?;
        within(
            "websocket.message_timeout_secs",
            self.message_timeout_secs as usize,
            1,
            3600,
        )?;
        // A client's one message of the largest size must fit.
        within(
            "websocket.max_unfinished_bytes_per_address",
            self.max_unfinished_bytes_per_address,
            self.max_message_bytes,
            1 << 30,
        )?;
        within(
            "websocket.max_unfinished_bytes_per_subnet",
            self.max_unfinished_bytes_per_subnet,
            self.max_unfinished_bytes_per_address,
            1 << 30,
        )?;
        within(
            "websocket.max_unfinished_bytes_per_network",
            self.max_unfinished_bytes_per_network,
            self.max_unfinished_bytes_per_subnet,
            1 << 30,
        )?;
        if self.idle_timeout_secs <= self.announce_interval_secs {
            return Err(ConfigError::key(
                "websocket.idle_timeout_secs",
                "must be longer than websocket.announce_interval_secs (WebTorrent sends \
                 nothing between announces)",
            ));
        }
        Ok(())
    }

    /// The caps of unfinished messages' bytes per address, subnet and
    /// network (`BlockLevel::ALL`'s order).
    pub fn max_unfinished_bytes_per_block(&self) -> [usize; 3] {
        [
            self.max_unfinished_bytes_per_address,
            self.max_unfinished_bytes_per_subnet,
            self.max_unfinished_bytes_per_network,
        ]
    }

    /// The caps of WebRTC peers per address, subnet and network.
    pub fn max_peers_per_block(&self) -> [usize; 3] {
        [
            self.max_peers_per_address,
            self.max_peers_per_subnet,
            self.max_peers_per_network,
        ]
    }

    pub fn message_limits(&self) -> MessageLimits {
        MessageLimits {
            max_offers: self.max_offers,
            max_sdp_bytes: self.max_sdp_bytes,
            max_scrape_hashes: self.max_scrape_hashes,
        }
    }
}
