//! The Prometheus endpoint: every metric family, the text format (0.0.4), and
//! the small HTTP server that worker 0 runs for `GET /metrics`.
//!
//! Counters stay per worker and uncontended (see `stats`). A scrape asks every
//! worker for a snapshot over the mesh, as plain numbers tagged with static
//! descriptions, and renders them with a `worker` label; Prometheus sums
//! across workers (`sum without (worker) (...)`).

use std::fmt::Write as _;
use std::io;
use std::net::SocketAddr;
use std::os::fd::{FromRawFd, IntoRawFd};
use std::rc::{Rc, Weak};
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use glommio::GlommioError;
use tracing::debug;

use crate::config::MetricsConfig;
use crate::connections::{AdmissionCounters, ConnectionTable, Slot};
use crate::mesh::Shard;
use tracker_proto::canonical_ip;

/// Whether a family only grows or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One metric family: its name, help text and type, printed once per scrape.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

/// A label name and value.
pub type Label = (&'static str, &'static str);

/// One value of one worker, with what it is: plain data that crosses the mesh.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub family: &'static Family,
    /// Labels the owner of the counters adds (the protocol of a service).
    pub scope: &'static [Label],
    /// The value's own labels.
    pub labels: &'static [Label],
    pub value: u64,
}

impl Sample {
    pub fn new(family: &'static Family, labels: &'static [Label], value: u64) -> Self {
        Sample {
            family,
            scope: &[],
            labels,
            value,
        }
    }
}

/// What a worker registers with its shard to be included in every scrape.
pub trait MetricSource {
    fn samples(&self, out: &mut Vec<Sample>);
}

macro_rules! families {
    ($($(#[$meta:meta])* $id:ident = $name:literal, $kind:ident, $help:literal;)*) => {
        $(
            $(#[$meta])*
            pub static $id: Family = Family { name: $name, help: $help, kind: Kind::$kind };
        )*
        /// Every family, in the order of this list.
        pub static ALL: &[&Family] = &[$(&$id),*];
    };
}

families! {
    /// Labels: protocol (udp, http, https), action (connect, announce,
    /// scrape), family (ipv4, ipv6).
    REQUESTS = "tracker_requests_total", Counter,
        "Requests received, by protocol, action and client address family.";
    /// Labels as for REQUESTS.
    RESPONSES = "tracker_responses_total", Counter,
        "Answers made to requests (error answers included), by protocol, action and client address family.";
    RECEIVED_BYTES = "tracker_received_bytes_total", Counter,
        "Bytes received from clients (UDP payloads, HTTP(S) bytes read), by protocol.";
    SENT_BYTES = "tracker_sent_bytes_total", Counter,
        "Bytes sent to clients (UDP payloads, HTTP(S) bytes written), by protocol.";
    /// Label: kind.
    UDP_ERRORS = "tracker_udp_errors_total", Counter,
        "UDP requests not served normally and failed sends, by kind.";
    UDP_ERROR_RESPONSES = "tracker_udp_error_responses_total", Counter,
        "UDP error answers sent.";
    /// Label: kind. HTTP and HTTPS together.
    HTTP_ERRORS = "tracker_http_errors_total", Counter,
        "HTTP and HTTPS requests and connections not served normally, by kind.";
    HTTP_FAILURE_RESPONSES = "tracker_http_failure_responses_total", Counter,
        "HTTP and HTTPS answers carrying a failure reason.";
    HTTP_FULL_SCRAPES = "tracker_http_full_scrapes_total", Counter,
        "HTTP and HTTPS scrapes without info_hash (full scrapes) served.";
    /// Label: protocol (http, https).
    CONNECTIONS_ACCEPTED = "tracker_connections_accepted_total", Counter,
        "TCP connections accepted and served, by protocol.";
    /// Label: protocol (http, https).
    OPEN_CONNECTIONS = "tracker_open_connections", Gauge,
        "TCP connections open now, by protocol.";
    TLS_HANDSHAKES = "tracker_tls_handshakes_total", Counter,
        "TLS handshakes completed.";
    /// Label: kind (error, timeout).
    TLS_HANDSHAKE_FAILURES = "tracker_tls_handshake_failures_total", Counter,
        "TLS handshakes that failed or timed out, by kind.";
    MESH_FORWARDED = "tracker_mesh_forwarded_total", Counter,
        "Requests sent to the worker owning their torrent.";
    MESH_SERVED = "tracker_mesh_served_total", Counter,
        "Requests from other workers answered as the owner of their torrent.";
    MESH_BACKPRESSURE = "tracker_mesh_backpressure_waits_total", Counter,
        "Sends to another worker that found the channel full and waited.";
    MESH_OVERLOADED = "tracker_mesh_overloaded_total", Counter,
        "Requests for other workers refused because too many awaited answers.";
    /// Label: component (udp, http, mesh).
    PANICS = "tracker_panics_total", Counter,
        "Panics contained to one request (the request failed, the worker went on), by component.";
    /// Label: kind (connection_limit, address_limit, evicted_idle, timeout).
    METRICS_ENDPOINT_ERRORS = "tracker_metrics_endpoint_errors_total", Counter,
        "Connections to the metrics endpoint refused, closed to make room, or timed out, by kind.";
    /// Label: kind (torrent_refused, peer_not_stored, peers_per_address,
    /// torrent_budget).
    STORE_FULL = "tracker_store_full_total", Counter,
        "Announces the swarm store could not take in full because a limit was reached, by kind.";
    TORRENTS = "tracker_torrents", Gauge,
        "Torrents stored.";
    /// Label: role (seeder, leecher).
    PEERS = "tracker_peers", Gauge,
        "Peers stored, by role; expired peers count until the clean-up reaches them.";
}

/// Appends the scrape of all workers (each with its index) in the Prometheus
/// text format 0.0.4: every family once, with HELP and TYPE before its
/// samples, and all its samples together, worker by worker.
pub fn render(workers: &[(usize, Vec<Sample>)], out: &mut String) {
    // Families in the order they first appear, and each sample's place.
    let mut families: Vec<&'static Family> = Vec::new();
    let mut rows: Vec<(usize, usize, usize)> = Vec::new();
    for (w, (_, samples)) in workers.iter().enumerate() {
        for (i, sample) in samples.iter().enumerate() {
            let f = match families.iter().position(|f| f.name == sample.family.name) {
                Some(f) => f,
                None => {
                    families.push(sample.family);
                    families.len() - 1
                }
            };
            rows.push((f, w, i));
        }
    }
    rows.sort_unstable();
    let mut last = usize::MAX;
    for (f, w, i) in rows {
        let family = families[f];
        if f != last {
            last = f;
            out.push_str("# HELP ");
            out.push_str(family.name);
            out.push(' ');
            escape_help(family.help, out);
            out.push_str("\n# TYPE ");
            out.push_str(family.name);
            out.push_str(match family.kind {
                Kind::Counter => " counter\n",
                Kind::Gauge => " gauge\n",
            });
        }
        let (worker, samples) = &workers[w];
        let sample = &samples[i];
        let _ = write!(out, "{}{{worker=\"{worker}\"", family.name);
        for (name, value) in sample.scope.iter().chain(sample.labels) {
            out.push(',');
            out.push_str(name);
            out.push_str("=\"");
            escape_label_value(value, out);
            out.push('"');
        }
        let _ = writeln!(out, "}} {}", sample.value);
    }
}

/// HELP text escapes backslash and line feed.
fn escape_help(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Label values also escape the double quote.
fn escape_label_value(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

/// What a request to the endpoint asks for.
#[derive(Debug, PartialEq, Eq)]
enum Route {
    /// GET (or HEAD, without the body) of `/metrics`.
    Metrics {
        head_only: bool,
    },
    NotFound,
    MethodNotAllowed,
    BadRequest,
}

/// Reads the request line of a complete head (pure).
fn route(head: &[u8]) -> Route {
    let line = head
        .split(|&b| b == b'\r' || b == b'\n')
        .next()
        .unwrap_or(b"");
    let mut parts = line.split(|&b| b == b' ');
    let (Some(method), Some(target), Some(version), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Route::BadRequest;
    };
    if !version.starts_with(b"HTTP/1.") || !target.starts_with(b"/") {
        return Route::BadRequest;
    }
    let path = target.split(|&b| b == b'?').next().unwrap_or(b"");
    if path != b"/metrics" {
        return Route::NotFound;
    }
    match method {
        b"GET" => Route::Metrics { head_only: false },
        b"HEAD" => Route::Metrics { head_only: true },
        _ => Route::MethodNotAllowed,
    }
}

/// The end of a request head (after the blank line) in `buf`, if complete.
fn head_end(buf: &[u8]) -> Option<usize> {
    buf.windows(4).position(|w| w == b"\r\n\r\n").map(|i| i + 4)
}

crate::counters! {
    /// The endpoint's own counters.
    pub struct EndpointStats {
        /// Connections closed at once: every slot holds a scrape under way.
        pub rejected: Counter => METRICS_ENDPOINT_ERRORS { kind = "connection_limit" },
        /// Connections closed at once: their address holds its maximum.
        pub address_limit: Counter => METRICS_ENDPOINT_ERRORS { kind = "address_limit" },
        /// Connections that had sent no request, closed to make room.
        pub evicted: Counter => METRICS_ENDPOINT_ERRORS { kind = "evicted_idle" },
        /// Connections closed at `metrics.timeout_secs`.
        pub timeouts: Counter => METRICS_ENDPOINT_ERRORS { kind = "timeout" },
    }
}

/// The endpoint of one worker: its listeners share the limits.
pub struct Endpoint {
    shard: Rc<Shard>,
    timeout: Duration,
    max_head: usize,
    connections: Rc<ConnectionTable>,
    stats: EndpointStats,
}

impl MetricSource for Endpoint {
    fn samples(&self, out: &mut Vec<Sample>) {
        self.stats.samples(&[], out);
    }
}

impl Endpoint {
    pub fn new(shard: Rc<Shard>, config: &MetricsConfig) -> Rc<Self> {
        let endpoint = Rc::new(Endpoint {
            shard,
            timeout: Duration::from_secs(config.timeout_secs.into()),
            max_head: config.max_request_head_bytes,
            connections: ConnectionTable::new(
                config.max_connections,
                config.max_connections_per_address,
            ),
            stats: EndpointStats::default(),
        });
        let source: Weak<dyn MetricSource> = Rc::downgrade(&endpoint) as _;
        endpoint.shard.add_metric_source(source);
        endpoint
    }

    /// Serves one listener until it fails for good.
    pub async fn serve(self: Rc<Self>, listener: std::net::TcpListener) -> Result<(), String> {
        let local = listener.local_addr().map_err(|e| e.to_string())?;
        // SAFETY: the fd comes from a listening socket we own and hand over whole.
        let listener = unsafe { TcpListener::from_raw_fd(listener.into_raw_fd()) };
        loop {
            let stream = match listener.accept().await {
                Ok(stream) => stream,
                Err(e) => {
                    crate::runtime::accept_failed("metrics", local, e).await?;
                    continue;
                }
            };
            // Scrapes are rare; more at once than this is a misconfigured or
            // hostile client, and gathering costs every worker some work.
            let Ok(peer) = stream.peer_addr() else {
                continue;
            };
            let admission = self.connections.admit(canonical_ip(peer.ip()), false);
            let Some(slot) = admission.counted(AdmissionCounters {
                evicted: &self.stats.evicted,
                address_limit: &self.stats.address_limit,
                full: &self.stats.rejected,
            }) else {
                continue;
            };
            let endpoint = self.clone();
            glommio::spawn_local(async move {
                let answered =
                    glommio::timer::timeout(endpoint.timeout, endpoint.connection(stream, &slot))
                        .await;
                match answered {
                    Err(GlommioError::TimedOut(_)) => endpoint.stats.timeouts.inc(),
                    Err(e) => debug!("metrics {local}: {e}"),
                    Ok(()) => {}
                }
                drop(slot);
            })
            .detach();
        }
    }

    /// Serves one scrape connection; it may be evicted until its request
    /// head is complete.
    async fn connection(&self, mut stream: TcpStream, slot: &Slot) -> Result<(), GlommioError<()>> {
        let mut buf = vec![0u8; self.max_head];
        let mut len = 0;
        let head = loop {
            if let Some(end) = head_end(&buf[..len]) {
                break &buf[..end];
            }
            if len == buf.len() {
                return respond(
                    &mut stream,
                    "431 Request Header Fields Too Large",
                    "",
                    false,
                )
                .await;
            }
            let read = futures_lite::future::or(
                async { Some(stream.read(&mut buf[len..]).await) },
                async {
                    slot.evicted().await;
                    None
                },
            );
            match read.await {
                None | Some(Ok(0)) => return Ok(()),
                Some(Ok(n)) => len += n,
                Some(Err(e)) => return Err(e.into()),
            }
        };
        slot.set_idle(false);
        match route(head) {
            Route::Metrics { head_only } => match self.shard.metrics().await {
                Ok(workers) => {
                    let mut body = String::with_capacity(64 << 10);
                    render(&workers, &mut body);
                    respond(&mut stream, "200 OK", &body, head_only).await
                }
                Err(_) => {
                    let why = "a worker did not answer; try again\n";
                    respond(&mut stream, "503 Service Unavailable", why, head_only).await
                }
            },
            Route::NotFound => respond(&mut stream, "404 Not Found", "try /metrics\n", false).await,
            Route::MethodNotAllowed => {
                let why = "GET or HEAD only\n";
                respond(&mut stream, "405 Method Not Allowed", why, false).await
            }
            Route::BadRequest => respond(&mut stream, "400 Bad Request", "", false).await,
        }
    }
}

/// Writes a whole answer and closes the connection.
async fn respond(
    stream: &mut TcpStream,
    status: &str,
    body: &str,
    head_only: bool,
) -> Result<(), GlommioError<()>> {
    let content_type = if status.starts_with("200") {
        "text/plain; version=0.0.4; charset=utf-8"
    } else {
        "text/plain; charset=utf-8"
    };
    let mut head = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n",
        body.len()
    );
    if status.starts_with("405") {
        head.push_str("Allow: GET, HEAD\r\n");
    }
    head.push_str("\r\n");
    stream.write_all(head.as_bytes()).await?;
    if !head_only {
        stream.write_all(body.as_bytes()).await?;
    }
    stream.flush().await?;
    stream.close().await?;
    Ok(())
}

/// Binds the endpoint's listener: one socket, served by worker 0 alone, so
/// no `SO_REUSEPORT` (another process on the port is an error, not a silent
/// share of the scrapes).
pub fn bind(addr: SocketAddr) -> io::Result<std::net::TcpListener> {
    let listener = std::net::TcpListener::bind(addr)?;
    listener.set_nonblocking(true)?;
    Ok(listener)
}

#[cfg(test)]
mod tests {
    use super::*;

    static TEST: Family = Family {
        name: "tracker_test_total",
        help: "A \\ test\nwith two lines.",
        kind: Kind::Counter,
    };

    #[test]
    fn families_group_with_help_and_type_once_and_workers_in_order() {
        let worker = |udp: u64, torrents: u64| {
            vec![
                Sample {
                    family: &REQUESTS,
                    scope: &[("protocol", "udp")],
                    labels: &[("action", "connect"), ("family", "ipv4")],
                    value: udp,
                },
                Sample::new(&TORRENTS, &[], torrents),
                Sample {
                    family: &REQUESTS,
                    scope: &[("protocol", "http")],
                    labels: &[("action", "announce"), ("family", "ipv6")],
                    value: 7,
                },
            ]
        };
        let mut out = String::new();
        render(&[(0, worker(1, 10)), (1, worker(2, 20))], &mut out);
        let expected = "\
# HELP tracker_requests_total Requests received, by protocol, action and client address family.
# TYPE tracker_requests_total counter
tracker_requests_total{worker=\"0\",protocol=\"udp\",action=\"connect\",family=\"ipv4\"} 1
tracker_requests_total{worker=\"0\",protocol=\"http\",action=\"announce\",family=\"ipv6\"} 7
tracker_requests_total{worker=\"1\",protocol=\"udp\",action=\"connect\",family=\"ipv4\"} 2
tracker_requests_total{worker=\"1\",protocol=\"http\",action=\"announce\",family=\"ipv6\"} 7
# HELP tracker_torrents Torrents stored.
# TYPE tracker_torrents gauge
tracker_torrents{worker=\"0\"} 10
tracker_torrents{worker=\"1\"} 20
";
        assert_eq!(out, expected);
    }

    #[test]
    fn help_and_label_values_are_escaped() {
        let mut out = String::new();
        let sample = Sample::new(&TEST, &[("path", "C:\\x \"y\"\nz")], u64::MAX);
        render(&[(3, vec![sample])], &mut out);
        assert_eq!(
            out,
            "# HELP tracker_test_total A \\\\ test\\nwith two lines.\n\
             # TYPE tracker_test_total counter\n\
             tracker_test_total{worker=\"3\",path=\"C:\\\\x \\\"y\\\"\\nz\"} 18446744073709551615\n"
        );
    }

    #[test]
    fn nothing_renders_as_nothing() {
        let mut out = String::new();
        render(&[(0, Vec::new())], &mut out);
        assert_eq!(out, "");
    }

    #[test]
    fn family_names_are_prometheus_names_and_unique() {
        let mut names: Vec<&str> = ALL.iter().map(|f| f.name).collect();
        for family in ALL {
            let name = family.name;
            assert!(name.starts_with("tracker_"), "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
            assert_eq!(
                name.ends_with("_total"),
                family.kind == Kind::Counter,
                "counters and only counters end in _total: {name}"
            );
            assert!(family.help.ends_with('.'), "{name}");
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }

    #[test]
    fn requests_are_routed_by_method_and_path() {
        let r = |head: &str| route(head.as_bytes());
        assert_eq!(
            r("GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n"),
            Route::Metrics { head_only: false }
        );
        assert_eq!(
            r("HEAD /metrics?x=1 HTTP/1.0\r\n\r\n"),
            Route::Metrics { head_only: true }
        );
        assert_eq!(r("GET / HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(r("GET /metricsx HTTP/1.1\r\n\r\n"), Route::NotFound);
        assert_eq!(r("POST /metrics HTTP/1.1\r\n\r\n"), Route::MethodNotAllowed);
        assert_eq!(r("GET /metrics\r\n\r\n"), Route::BadRequest);
        assert_eq!(r("GET /metrics HTTP/2 x\r\n\r\n"), Route::BadRequest);
        assert_eq!(r("GET metrics HTTP/1.1\r\n\r\n"), Route::BadRequest);
        assert_eq!(r("\r\n\r\n"), Route::BadRequest);
    }

    #[test]
    fn a_head_ends_at_the_blank_line() {
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n\r\nrest"), Some(18));
        assert_eq!(head_end(b"GET / HTTP/1.1\r\n"), None);
        assert_eq!(head_end(b""), None);
    }
}
