//! The private site API (UNIT3D-Announce's routes under
//! `/announce/{api_key}/`), which worker 0 serves on `private.api_listen`:
//! a small HTTP server of its own, one request with a JSON body per
//! connection. It checks the key (in constant time) and frames the
//! request; what a request means is the [`SiteApi`] handler's.

use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;
use tracker_runtime::metrics::{MetricSource, Sample, SITE_API_REQUESTS};

use crate::connections::{AdmissionCounters, ConnectionTable, Slot};
use crate::endpoint::{read_head, request_line, Head as HeadRead, SmallEndpoint};

/// Bytes of a request head at most.
const MAX_HEAD: usize = 8 << 10;
/// Bytes of a request body at most: the site's bodies are a few hundred
/// bytes (one user, one torrent).
const MAX_BODY: usize = 64 << 10;
/// Seconds a connection may take for its request and its answer.
const TIMEOUT: Duration = Duration::from_secs(10);
/// Connections at once, and from one address: the site is one or a few
/// hosts, which send a request at a time.
const MAX_CONNECTIONS: usize = 64;
const MAX_CONNECTIONS_PER_ADDRESS: usize = 16;

/// An answer to one API request.
pub struct ApiAnswer {
    pub status: u16,
    /// JSON, or empty.
    pub body: String,
}

/// What the API does: `method` and the path after `/announce/{api_key}`
/// (it starts with `/`), with the request's body.
pub trait SiteApi {
    fn handle<'a>(
        &'a self,
        method: &'a [u8],
        path: &'a [u8],
        body: &'a [u8],
    ) -> Pin<Box<dyn Future<Output = ApiAnswer> + 'a>>;
}

tracker_runtime::counters! {
    /// The API's counters.
    pub struct SiteApiStats {
        pub ok: Counter => SITE_API_REQUESTS { outcome = "ok" },
        pub bad_request: Counter => SITE_API_REQUESTS { outcome = "bad_request" },
        pub not_found: Counter => SITE_API_REQUESTS { outcome = "not_found" },
        pub wrong_key: Counter => SITE_API_REQUESTS { outcome = "wrong_key" },
        pub too_large: Counter => SITE_API_REQUESTS { outcome = "too_large" },
        pub timeout: Counter => SITE_API_REQUESTS { outcome = "timeout" },
        pub connection_limit: Counter => SITE_API_REQUESTS { outcome = "connection_limit" },
    }
}

/// Whether `given` is `key`, in time that does not depend on where they
/// differ (a key guessed byte by byte from the timing of 404s is the attack).
pub fn key_matches(given: &[u8], key: &[u8]) -> bool {
    let mut diff = u8::from(given.len() != key.len());
    for (i, k) in key.iter().enumerate() {
        diff |= k ^ given.get(i).copied().unwrap_or(0);
    }
    std::hint::black_box(diff) == 0
}

/// A request head's parts the API reads.
#[derive(Debug, PartialEq, Eq)]
struct Head<'a> {
    method: &'a [u8],
    /// The path (no query).
    path: &'a [u8],
    content_length: usize,
}

/// Parses a complete head (pure). `None`: not HTTP/1.x, or a bad or
/// missing length where a body is sent.
fn parse_head(head: &[u8]) -> Option<Head<'_>> {
    let (method, path) = request_line(head)?;
    let mut content_length = 0;
    for line in head
        .split(|&b| b == b'\n')
        .skip(1)
        .map(|l| l.trim_ascii_end())
    {
        let Some(colon) = line.iter().position(|&b| b == b':') else {
            continue;
        };
        let (name, value) = line.split_at(colon);
        let value = value.get(1..).unwrap_or_default().trim_ascii();
        if name.eq_ignore_ascii_case(b"content-length") {
            content_length = std::str::from_utf8(value).ok()?.parse().ok()?;
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            // The site's client sends a length; chunked bodies are refused.
            return None;
        }
    }
    Some(Head {
        method,
        path,
        content_length,
    })
}

/// The path after `/announce/{key}`, when its key is `key`; `Err(true)`:
/// an `/announce/...` path with another key, `Err(false)`: another path.
fn after_key<'a>(path: &'a [u8], key: &[u8]) -> Result<&'a [u8], bool> {
    let rest = path.strip_prefix(b"/announce/").ok_or(false)?;
    let end = rest.iter().position(|&b| b == b'/').unwrap_or(rest.len());
    let (given, after) = rest.split_at(end);
    if !key_matches(given, key) {
        return Err(true);
    }
    Ok(if after.is_empty() { b"/" } else { after })
}

/// The API of worker 0.
pub struct SiteApiServer {
    key: Box<[u8]>,
    api: Rc<dyn SiteApi>,
    connections: Rc<ConnectionTable>,
    stats: SiteApiStats,
}

impl MetricSource for SiteApiServer {
    fn samples(&self, out: &mut Vec<Sample>) {
        self.stats.samples(&[], out);
    }
}

impl SiteApiServer {
    pub fn new(shard: &tracker_runtime::shard::Shard, key: &str, api: Rc<dyn SiteApi>) -> Rc<Self> {
        let server = Rc::new(SiteApiServer {
            key: key.as_bytes().into(),
            api,
            connections: ConnectionTable::new(
                MAX_CONNECTIONS,
                [MAX_CONNECTIONS_PER_ADDRESS, usize::MAX, usize::MAX],
            ),
            stats: SiteApiStats::default(),
        });
        let source: Weak<dyn MetricSource> = Rc::downgrade(&server) as _;
        shard.add_metric_source(source);
        server
    }

    /// Serves one listener until it fails for good.
    pub async fn serve(self: Rc<Self>, listener: std::net::TcpListener) -> Result<(), String> {
        crate::endpoint::serve(self, listener).await
    }

    async fn request(
        &self,
        mut stream: TcpStream,
        slot: &Slot,
    ) -> Result<(), glommio::GlommioError<()>> {
        let mut buf = vec![0u8; MAX_HEAD];
        let (head_len, len) = match read_head(&mut stream, &mut buf, slot).await? {
            HeadRead::Complete { head, received } => (head, received),
            HeadRead::TooLarge => {
                self.stats.too_large.inc();
                return respond(&mut stream, 431, "").await;
            }
            HeadRead::Gone => return Ok(()),
        };
        let Some(head) = buf.get(..head_len).and_then(parse_head) else {
            self.stats.bad_request.inc();
            return respond(&mut stream, 400, "").await;
        };
        let (method, content_length) = (head.method, head.content_length);
        let path = match after_key(head.path, &self.key) {
            Ok(path) => path,
            Err(wrong_key) => {
                if wrong_key {
                    self.stats.wrong_key.inc();
                } else {
                    self.stats.not_found.inc();
                }
                return respond(&mut stream, 404, "").await;
            }
        };
        if content_length > MAX_BODY {
            self.stats.too_large.inc();
            return respond(&mut stream, 413, "").await;
        }
        let mut body = buf.get(head_len..len).unwrap_or_default().to_vec();
        body.truncate(content_length);
        let have = body.len();
        body.resize(content_length, 0);
        if let Some(rest) = body.get_mut(have..) {
            stream.read_exact(rest).await?;
        }
        let answer = self.api.handle(method, path, &body).await;
        match answer.status {
            200 => self.stats.ok.inc(),
            404 => self.stats.not_found.inc(),
            _ => self.stats.bad_request.inc(),
        }
        respond(&mut stream, answer.status, &answer.body).await
    }
}

impl SmallEndpoint for SiteApiServer {
    const NAME: &'static str = "site API";

    fn connections(&self) -> &Rc<ConnectionTable> {
        &self.connections
    }

    fn admission_counters(&self) -> AdmissionCounters<'_> {
        AdmissionCounters {
            evicted: &self.stats.connection_limit,
            block_limit: [&self.stats.connection_limit; 3],
            full: &self.stats.connection_limit,
        }
    }

    fn timeout(&self) -> Duration {
        TIMEOUT
    }

    fn count_timeout(&self) {
        self.stats.timeout.inc();
    }

    fn connection<'a>(
        &'a self,
        stream: TcpStream,
        slot: &'a Slot,
    ) -> impl Future<Output = Result<(), glommio::GlommioError<()>>> + 'a {
        self.request(stream, slot)
    }
}

/// Writes a whole answer, then closes gracefully so that it arrives.
async fn respond(
    stream: &mut TcpStream,
    status: u16,
    body: &str,
) -> Result<(), glommio::GlommioError<()>> {
    let reason = match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        413 => "Content Too Large",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        _ => "Error",
    };
    let content_type = if body.is_empty() {
        "text/plain"
    } else {
        "application/json"
    };
    let head = format!(
        "HTTP/1.1 {status} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n",
        body.len()
    );
    stream.write_all(head.as_bytes()).await?;
    stream.write_all(body.as_bytes()).await?;
    stream.flush().await?;
    crate::linger::end_gracefully(stream)?;
    stream.close().await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_match_only_whole() {
        let key = b"0123456789abcdef0123456789abcdef";
        assert!(key_matches(key, key));
        assert!(!key_matches(b"0123456789abcdef0123456789abcdeF", key));
        assert!(!key_matches(b"0123456789abcdef0123456789abcde", key));
        assert!(!key_matches(b"0123456789abcdef0123456789abcdef0", key));
        assert!(!key_matches(b"", key));
    }

    #[test]
    fn the_path_after_the_key() {
        let key = b"k0123456789abcdef0123456789abcde";
        let path = |p: &'static str| after_key(p.as_bytes(), key);
        assert_eq!(
            path("/announce/k0123456789abcdef0123456789abcde/users"),
            Ok(&b"/users"[..])
        );
        assert_eq!(
            path("/announce/k0123456789abcdef0123456789abcde/users/7"),
            Ok(&b"/users/7"[..])
        );
        assert_eq!(
            path("/announce/k0123456789abcdef0123456789abcde"),
            Ok(&b"/"[..])
        );
        assert_eq!(path("/announce/wrong/users"), Err(true));
        assert_eq!(path("/metrics"), Err(false));
    }

    #[test]
    fn heads_with_and_without_bodies() {
        let head = b"PUT /announce/k/users HTTP/1.1\r\nHost: x\r\ncontent-length: 42\r\n\r\n";
        assert_eq!(
            parse_head(head),
            Some(Head {
                method: b"PUT",
                path: b"/announce/k/users",
                content_length: 42
            })
        );
        let get = parse_head(b"GET /announce/k/stats?x=1 HTTP/1.1\r\n\r\n").unwrap();
        assert_eq!(
            (get.path, get.content_length),
            (&b"/announce/k/stats"[..], 0)
        );
        for bad in [
            &b"PUT /x HTTP/1.1\r\nContent-Length: -1\r\n\r\n"[..],
            b"PUT /x HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n",
            b"PUT x HTTP/1.1\r\n\r\n",
            b"PUT /x SPDY\r\n\r\n",
            b"\r\n\r\n",
        ] {
            assert_eq!(parse_head(bad), None, "{}", String::from_utf8_lossy(bad));
        }
    }
}
