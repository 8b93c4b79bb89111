//! The per-worker HTTP and HTTPS loops: accept on this worker's listeners, one
//! task per connection, requests parsed with the pure codec from a bounded
//! buffer and answered from this worker's shard or its owner's.
//!
//! A connection reads into one buffer and writes from another, both its own and
//! reused for every request it carries, so a keep-alive connection answers
//! without allocating once they have grown (forwarded announces and scrapes
//! allocate on the mesh, as for UDP). Pipelined requests are answered in order,
//! their answers written together once the buffer holds no further complete
//! request.
//!
//! Slow or silent clients cannot hold a worker: each connection is its own
//! task; it may wait for a request only so long (the idle timeout), a request
//! head must arrive whole within the request timeout of its first byte and an
//! answer be taken whole within the write timeout, however the bytes trickle
//! (the deadlines hold for whole heads and answers, over TLS too, see
//! `deadline`); a TLS handshake has its own timeout; and each worker serves a
//! bounded number of connections, a bounded number from each address, and
//! closes its longest-idle connection to make room for a new one (see
//! `crate::connections`). A connection cut for any of these is reset, so that
//! the kernel does not go on holding its answers (see `crate::linger`).

use std::cell::{Cell, RefCell};
use std::io;
use std::net::{IpAddr, SocketAddr};
use std::rc::{Rc, Weak};
use std::time::{Duration, Instant};

use crate::accept::{accept, accept_failed};
use crate::config::HttpConfig;
use crate::connections::{AdmissionCounters, ConnectionTable, Slot};
use futures_lite::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use futures_rustls::server::TlsStream;
use futures_rustls::TlsAcceptor;
use glommio::net::TcpStream;
use rustls::ServerConfig;
use tracing::debug;
use tracker_proto::{canonical_ip, Announce, AnswerPeers, InfoHash, IpNetwork, ScrapeStats};
use tracker_runtime::config::{ExemptNetworks, SwarmConfig};
use tracker_runtime::contain::Contained;
use tracker_runtime::counters;
use tracker_runtime::counters::ByFamily;
use tracker_runtime::mesh::RouteError;
use tracker_runtime::metrics::{
    Label, MetricSource, Sample, ANNOUNCES_ROUTED, CONNECTIONS_ACCEPTED, HTTP_ERRORS,
    HTTP_FAILURE_RESPONSES, HTTP_FULL_SCRAPES, OPEN_CONNECTIONS, PANICS, RECEIVED_BYTES, REQUESTS,
    RESPONSES, SENT_BYTES, TLS_HANDSHAKES, TLS_HANDSHAKE_FAILURES,
};
use tracker_runtime::quantum::{waited, Quantum};
use tracker_runtime::reloadable::LocalCopy;
use tracker_runtime::shard::Shard;
use tracker_runtime::shutdown::StopEvent;
use tracker_swarm::{AnnounceRefused, SwarmCounts};

use crate::deadline::DeadlineStream;
use crate::tls::SharedTlsConfig;
use tracker_proto::http::{
    parse_announce, parse_head, parse_scrape, AnnounceRequest, Connection, Endpoint, Parsed,
    RealIp, Request, RequestError,
};
use tracker_proto::http::{
    write_announce, write_failure, write_response, write_scrape, AnnounceResponse,
};

mod answer;
mod connection;
mod private;

/// The failure reason of a request whose handling failed (a contained panic).
const INTERNAL_ERROR: &str = "internal error";

counters! {
    /// Per-worker counters of HTTP and HTTPS together.
    pub struct HttpStats {
        /// Connections closed at once because the worker serves its maximum
        /// and none of them is idle.
        pub rejected: Counter => HTTP_ERRORS { kind = "connection_limit" },
        /// Connections reset at once because their address holds its
        /// maximum (`http.max_connections_per_address`) ...
        pub address_limit: Counter => HTTP_ERRORS { kind = "address_limit", level = "address" },
        /// ... or their subnet (`http.max_connections_per_subnet`) ...
        pub subnet_limit: Counter => HTTP_ERRORS { kind = "address_limit", level = "subnet" },
        /// ... or their network (`http.max_connections_per_network`).
        pub network_limit: Counter => HTTP_ERRORS { kind = "address_limit", level = "network" },
        /// Idle connections closed to make room for a new one.
        pub evicted: Counter => HTTP_ERRORS { kind = "evicted_idle" },
        pub accept_errors: Counter => HTTP_ERRORS { kind = "accept_failed" },
        /// Connections closed because no request began within the idle
        /// timeout.
        pub idle_timeouts: Counter => HTTP_ERRORS { kind = "idle_timeout" },
        /// Connections closed because a request head did not arrive whole
        /// within the request timeout.
        pub request_timeouts: Counter => HTTP_ERRORS { kind = "request_timeout" },
        /// Connections closed because the client did not take an answer whole
        /// within the write timeout.
        pub write_timeouts: Counter => HTTP_ERRORS { kind = "write_timeout" },
        pub not_found: Counter => HTTP_ERRORS { kind = "not_found" },
        /// Request heads larger than `http.max_request_head_bytes`.
        pub head_too_large: Counter => HTTP_ERRORS { kind = "head_too_large" },
        /// Other request heads that could not be served (malformed, a body,
        /// a method other than GET, a missing real-IP header).
        pub bad_request: Counter => HTTP_ERRORS { kind = "bad_request" },
        /// Requests carrying the real-IP header from a client that is not a
        /// trusted proxy: the header was ignored.
        pub untrusted_real_ip: Counter => HTTP_ERRORS { kind = "untrusted_real_ip" },
        /// Announces refused by a limit of the owner's store: it holds its
        /// maximum of torrents, or the address has created its budget of
        /// new torrents this minute.
        pub refused: Counter => HTTP_ERRORS { kind = "refused" },
        /// Announces refused by the access list ("torrent not allowed").
        pub not_allowed: Counter => HTTP_ERRORS { kind = "not_allowed" },
        /// Requests for other shards refused because too many await answers.
        pub overloaded: Counter => HTTP_ERRORS { kind = "overloaded" },
        /// Answers carrying a bencoded failure reason (any status).
        pub failures: Counter => HTTP_FAILURE_RESPONSES {},
        pub full_scrapes: Counter => HTTP_FULL_SCRAPES {},
        pub tls_handshakes: Counter => TLS_HANDSHAKES {},
        pub tls_handshake_failures: Counter => TLS_HANDSHAKE_FAILURES { kind = "error" },
        pub tls_handshake_timeouts: Counter => TLS_HANDSHAKE_FAILURES { kind = "timeout" },
        /// Requests that got a 500 because the owner of their torrent failed
        /// to serve them (it counted the panic).
        pub failed_at_owner: Counter => HTTP_ERRORS { kind = "failed_at_owner" },
        /// Requests (or connections) whose handling panicked: contained, the
        /// request answered with a 500 and the connection closed (or, for a
        /// panic outside a request's answer, the connection dropped).
        pub panics: Counter => PANICS { component = "http" },
    }
}

counters! {
    /// Per-worker counters of one protocol, HTTP or HTTPS.
    pub struct HttpTraffic {
        /// Connections accepted and served.
        pub accepted: Counter => CONNECTIONS_ACCEPTED {},
        /// Announces and scrapes (complete heads for those paths, whether
        /// their parameters were good or not), by the client's address.
        pub announces: ByFamily => REQUESTS { action = "announce" },
        pub scrapes: ByFamily => REQUESTS { action = "scrape" },
        /// Announces answered by this worker, which owns their torrent.
        pub announces_local: Counter => ANNOUNCES_ROUTED { route = "local" },
        /// Announces sent to the worker that owns their torrent.
        pub announces_forwarded: Counter => ANNOUNCES_ROUTED { route = "forwarded" },
        pub announce_responses: ByFamily => RESPONSES { action = "announce" },
        pub scrape_responses: ByFamily => RESPONSES { action = "scrape" },
        pub bytes_in: Counter => RECEIVED_BYTES {},
        pub bytes_out: Counter => SENT_BYTES {},
    }
}

impl HttpTraffic {
    /// Requests and answers of `endpoint`.
    fn of(&self, endpoint: Endpoint) -> (&ByFamily, &ByFamily) {
        match endpoint {
            Endpoint::Announce | Endpoint::WebSocket => (&self.announces, &self.announce_responses),
            Endpoint::Scrape => (&self.scrapes, &self.scrape_responses),
        }
    }
}

/// The `protocol` label of each entry of `HttpService::traffic`.
const PROTOCOLS: [&[Label]; 2] = [&[("protocol", "http")], &[("protocol", "https")]];

impl HttpService {
    /// The counters of HTTPS (`tls`) or plain HTTP.
    fn traffic_of(&self, tls: bool) -> &HttpTraffic {
        let [http, https] = &self.traffic;
        if tls {
            https
        } else {
            http
        }
    }
}

impl MetricSource for HttpService {
    fn samples(&self, out: &mut Vec<Sample>) {
        self.stats.samples(&[], out);
        for (traffic, scope) in self.traffic.iter().zip(PROTOCOLS) {
            traffic.samples(scope, out);
        }
        let tls = self.open_tls.get();
        let open = [self.open.get() - tls, tls];
        for (open, scope) in open.into_iter().zip(PROTOCOLS) {
            out.push(Sample::new(&OPEN_CONNECTIONS, scope, open as u64));
        }
    }
}

/// A worker's HTTP service: shared by its HTTP and HTTPS listeners and by
/// their connection tasks.
pub struct HttpService {
    shard: Rc<Shard>,
    swarm: SwarmConfig,
    config: HttpConfig,
    idle_timeout: Duration,
    request_timeout: Duration,
    write_timeout: Duration,
    handshake_timeout: Duration,
    /// Admission: the caps on connections, per worker and per address,
    /// subnet and network.
    connections: Rc<ConnectionTable>,
    /// Whose real-IP header is believed (empty without one).
    trusted_proxies: Vec<IpNetwork>,
    /// Clients no cap per address, subnet or network counts
    /// (`runtime.exempt_networks`).
    exempt: ExemptNetworks,
    /// WebTorrent's WebSocket service, which upgraded connections are
    /// handed to; None when WebSocket is not served (`websocket.enabled`
    /// off, or a private tracker): upgrades get 404.
    ws: Option<Rc<tracker_ws::WsService>>,
    /// This worker's view of the TLS configuration (None without HTTPS).
    tls: Option<RefCell<LocalCopy<ServerConfig>>>,
    /// Connections open, HTTP and HTTPS together, and HTTPS alone.
    open: Cell<usize>,
    open_tls: Cell<usize>,
    /// Fired when the tracker stops: no more connections are accepted, and
    /// open ones close once they have answered what they received.
    stop: StopEvent,
    pub stats: HttpStats,
    /// HTTP, then HTTPS.
    pub traffic: [HttpTraffic; 2],
}

/// Counts a connection as open, and holds its slot, for as long as its task
/// holds this; true for HTTPS.
struct OpenConnection {
    service: Rc<HttpService>,
    tls: bool,
    slot: Slot,
}

impl OpenConnection {
    fn new(service: Rc<HttpService>, tls: bool, slot: Slot) -> Self {
        service.open.set(service.open.get() + 1);
        if tls {
            service.open_tls.set(service.open_tls.get() + 1);
        }
        OpenConnection { service, tls, slot }
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        let service = &self.service;
        service.open.set(service.open.get() - 1);
        if self.tls {
            service.open_tls.set(service.open_tls.get() - 1);
        }
    }
}

impl HttpService {
    /// `tls` is needed when any listener serves HTTPS; `exempt` clients are
    /// not capped per address, subnet or network; `ws` takes the WebSocket
    /// upgrades.
    pub fn new(
        shard: Rc<Shard>,
        swarm: SwarmConfig,
        config: &HttpConfig,
        tls: Option<SharedTlsConfig>,
        exempt: ExemptNetworks,
        ws: Option<Rc<tracker_ws::WsService>>,
    ) -> Rc<Self> {
        let service = Rc::new(HttpService {
            ws,
            shard,
            swarm,
            idle_timeout: Duration::from_secs(config.idle_timeout_secs.into()),
            request_timeout: Duration::from_secs(config.request_timeout_secs.into()),
            write_timeout: Duration::from_secs(config.write_timeout_secs.into()),
            handshake_timeout: Duration::from_secs(config.tls_handshake_timeout_secs.into()),
            connections: ConnectionTable::new(
                config.max_connections_per_worker,
                config.max_connections_per_block(),
            ),
            trusted_proxies: config.trusted_proxies(),
            exempt,
            config: config.clone(),
            tls: tls.map(|shared| RefCell::new(LocalCopy::new(shared))),
            open: Cell::new(0),
            open_tls: Cell::new(0),
            stop: StopEvent::default(),
            stats: HttpStats::default(),
            traffic: Default::default(),
        });
        let source: Weak<dyn MetricSource> = Rc::downgrade(&service) as _;
        service.shard.add_metric_source(source);
        service
    }

    /// Stops accepting: every `serve` returns and closes its listener; each
    /// connection answers the requests it has received (the last answer says
    /// `Connection: close`) and closes, and idle ones close at once. One that
    /// has not had its first request yet (its TLS handshake included) waits
    /// a moment for it, and answers it. See
    /// [`open_connections`](Self::open_connections).
    pub fn stop(&self) {
        self.stop.fire();
    }

    /// Connections open now.
    pub fn open_connections(&self) -> usize {
        self.open.get()
    }

    /// Serves one listener until it fails for good (Err) or
    /// [`stop`](Self::stop) is called (Ok); `tls` makes it HTTPS. The
    /// listener comes from `tracker_net::tcp::bind_reuseport`, so that a
    /// connection dropped without [`end_gracefully`](crate::linger::end_gracefully)
    /// is reset.
    pub async fn serve(
        self: Rc<Self>,
        listener: std::net::TcpListener,
        tls: bool,
    ) -> Result<(), String> {
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        if tls && self.tls.is_none() {
            return Err(format!("https {local}: no TLS configuration"));
        }
        let mut quantum = Quantum::default();
        loop {
            let accepted =
                futures_lite::future::or(async { Some(accept(&listener).await) }, async {
                    self.stop.wait().await;
                    None
                });
            let stream = match quantum.wait(accepted).await {
                None => return Ok(()),
                Some(Ok(stream)) => stream,
                Some(Err(e)) => {
                    self.stats.accept_errors.inc();
                    accept_failed("http", local, e).await?;
                    continue;
                }
            };
            let Ok(peer) = stream.peer_addr() else {
                continue;
            };
            let peer_ip = canonical_ip(peer.ip());
            // A proxy speaks for many clients, and an exempt network for a
            // load test: neither is capped per address, subnet or network.
            let exempt = self.is_trusted_proxy(peer_ip) || self.exempt.contains(peer_ip);
            let admission = self.connections.admit(peer_ip, exempt);
            let stats = &self.stats;
            let Some(slot) = admission.counted(AdmissionCounters {
                evicted: &stats.evicted,
                block_limit: [
                    &stats.address_limit,
                    &stats.subnet_limit,
                    &stats.network_limit,
                ],
                full: &stats.rejected,
            }) else {
                // Dropped: reset, as the listener set it to.
                continue;
            };
            self.traffic_of(tls).accepted.inc();
            // The newest certificate, for new connections only; one relaxed
            // load when nothing changed.
            let acceptor = match (&self.tls, tls) {
                (Some(config), true) => Some(TlsAcceptor::from(config.borrow_mut().get().clone())),
                _ => None,
            };
            let open = OpenConnection::new(self.clone(), tls, slot);
            glommio::spawn_local(async move {
                // A panic anywhere in the connection drops just it.
                let connection = open
                    .service
                    .connection(stream, peer_ip, acceptor, &open.slot);
                Contained::new(&open.service.stats.panics, connection).await;
                drop(open);
            })
            .detach();
            // An accept that finds a connection waiting returns at once: let
            // the connections (and everything else) run between accepts.
            quantum.yield_now().await;
        }
    }

    fn is_trusted_proxy(&self, ip: IpAddr) -> bool {
        self.trusted_proxies.iter().any(|net| net.contains(ip))
    }
}
