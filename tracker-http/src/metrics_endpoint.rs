//! The Prometheus endpoint that worker 0 runs for `GET /metrics`: a small
//! HTTP server of its own (one request per connection), which gathers every
//! worker's samples over the mesh and renders them.

use std::rc::{Rc, Weak};
use std::time::Duration;

use futures_lite::AsyncWriteExt;
use glommio::net::TcpStream;
use glommio::GlommioError;
use tracker_runtime::metrics::{render, MetricSource, Sample, METRICS_ENDPOINT_ERRORS};
use tracker_runtime::shard::Shard;

use crate::config::MetricsConfig;
use crate::connections::{AdmissionCounters, ConnectionTable, Slot};
use crate::endpoint::{read_head, request_line, Head, SmallEndpoint};

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
    let Some((method, path)) = request_line(head) else {
        return Route::BadRequest;
    };
    if path != b"/metrics" {
        return Route::NotFound;
    }
    match method {
        b"GET" => Route::Metrics { head_only: false },
        b"HEAD" => Route::Metrics { head_only: true },
        _ => Route::MethodNotAllowed,
    }
}

tracker_runtime::counters! {
    /// The endpoint's own counters.
    pub struct EndpointStats {
        /// Connections closed at once: every slot holds a scrape under way.
        pub rejected: Counter => METRICS_ENDPOINT_ERRORS { kind = "connection_limit" },
        /// Connections reset at once: their address holds its maximum.
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
            // Capped per address alone: scrapers are a few known hosts
            // (keep the endpoint off public networks), not a crowd that
            // wider blocks would need to share out.
            connections: ConnectionTable::new(
                config.max_connections,
                [config.max_connections_per_address, usize::MAX, usize::MAX],
            ),
            stats: EndpointStats::default(),
        });
        let source: Weak<dyn MetricSource> = Rc::downgrade(&endpoint) as _;
        endpoint.shard.add_metric_source(source);
        endpoint
    }

    /// Serves one listener until it fails for good.
    pub async fn serve(self: Rc<Self>, listener: std::net::TcpListener) -> Result<(), String> {
        crate::endpoint::serve(self, listener).await
    }

    /// Serves one scrape connection; it may be evicted until its request
    /// head is complete.
    async fn scrape(&self, mut stream: TcpStream, slot: &Slot) -> Result<(), GlommioError<()>> {
        let mut buf = vec![0u8; self.max_head];
        let head = match read_head(&mut stream, &mut buf, slot).await? {
            Head::Complete { head, .. } => buf.get(..head).unwrap_or_default(),
            Head::TooLarge => {
                // A limit reached: answered, then reset (no graceful close).
                let status = "431 Request Header Fields Too Large";
                return write_answer(&mut stream, status, "", false).await;
            }
            Head::Gone => return Ok(()),
        };
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

impl SmallEndpoint for Endpoint {
    const NAME: &'static str = "metrics";

    fn connections(&self) -> &Rc<ConnectionTable> {
        &self.connections
    }

    fn admission_counters(&self) -> AdmissionCounters<'_> {
        // Scrapes are rare; more at once than the caps is a misconfigured
        // or hostile client, and gathering costs every worker some work.
        AdmissionCounters {
            evicted: &self.stats.evicted,
            block_limit: [&self.stats.address_limit; 3],
            full: &self.stats.rejected,
        }
    }

    fn timeout(&self) -> Duration {
        self.timeout
    }

    fn count_timeout(&self) {
        self.stats.timeouts.inc();
    }

    fn connection<'a>(
        &'a self,
        stream: TcpStream,
        slot: &'a Slot,
    ) -> impl std::future::Future<Output = Result<(), GlommioError<()>>> + 'a {
        self.scrape(stream, slot)
    }
}

/// Writes a whole answer and closes the connection gracefully, so that the
/// answer reaches a scraper that reads it late.
async fn respond(
    stream: &mut TcpStream,
    status: &str,
    body: &str,
    head_only: bool,
) -> Result<(), GlommioError<()>> {
    write_answer(stream, status, body, head_only).await?;
    crate::linger::end_gracefully(stream)?;
    stream.close().await?;
    Ok(())
}

/// Writes a whole answer (it says `Connection: close`); a connection dropped
/// after it is reset (see `crate::linger`).
async fn write_answer(
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
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::endpoint::head_end;

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
