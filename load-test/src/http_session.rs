//! One HTTP connection's requests and answers, without the connection: the
//! target URL, building `GET /announce?...` and `/scrape?...` with the
//! project's writers, framing the answer (head and `Content-Length` body), and
//! checking the bencoded body with the project's decoder. Pure, so it is tested
//! without a network.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use tracker_proto::http::bencode::{self, Value};
use tracker_proto::http::{write_announce_target, write_scrape_target, AnnounceRequest};
use tracker_proto::InfoHash;

use crate::model::{Kind, Rng, TrafficModel, Weighted, MAX_SCRAPE};
use crate::stats::{Invalid, Stats};
use crate::{private, transfer};

/// Where the requests go.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HttpTarget {
    pub tls: bool,
    pub addr: SocketAddr,
    /// The `Host` header: the URL's authority.
    pub host: String,
    /// The path before `/announce` (usually empty).
    pub prefix: String,
}

impl HttpTarget {
    /// `http://127.0.0.1:8080` or `https://[::1]:8443/announce`; the host must
    /// be a loopback address. A path ending in `/announce` gives the prefix that
    /// `/scrape` shares (BEP 48's convention).
    pub fn parse(url: &str) -> Result<HttpTarget, String> {
        let LoopbackUrl {
            tls,
            addr,
            authority,
            path,
        } = LoopbackUrl::parse(url, "http", "https")?;
        let path = path.trim_end_matches('/');
        let prefix = path.strip_suffix("/announce").unwrap_or(path);
        if prefix.contains(['?', '#', ' ']) {
            return Err(format!("--target `{url}`: no query or fragment, please"));
        }
        Ok(HttpTarget {
            tls,
            addr,
            host: authority.to_string(),
            prefix: prefix.to_string(),
        })
    }
}

/// A target URL split, its host checked: the load goes to loopback only.
pub struct LoopbackUrl<'a> {
    /// The secure scheme (https, wss).
    pub tls: bool,
    pub addr: SocketAddr,
    /// As written in the URL (the `Host` header).
    pub authority: &'a str,
    /// What follows the authority, `/...` or empty.
    pub path: &'a str,
}

impl<'a> LoopbackUrl<'a> {
    /// `url` of scheme `plain` or `secure` (its default port 80 or 443 when
    /// none is given), whose host is a loopback IP address.
    pub fn parse(url: &'a str, plain: &str, secure: &str) -> Result<Self, String> {
        let scheme_rest = |scheme: &str| url.strip_prefix(scheme)?.strip_prefix("://");
        let (tls, rest) = match (scheme_rest(secure), scheme_rest(plain)) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) => (false, rest),
            (None, None) => {
                return Err(format!(
                    "--target `{url}` must start with {plain}:// or {secure}://"
                ))
            }
        };
        let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        let default_port = if tls { 443 } else { 80 };
        let addr: SocketAddr = authority
            .parse()
            .or_else(|_| {
                authority
                    .trim_start_matches('[')
                    .trim_end_matches(']')
                    .parse::<IpAddr>()
                    .map(|ip| SocketAddr::new(ip, default_port))
            })
            .map_err(|_| {
                format!("--target `{url}`: the host must be an IP address (loopback), with a port")
            })?;
        if !addr.ip().is_loopback() {
            return Err(format!(
                "--target `{url}`: only loopback addresses (127.0.0.0/8, ::1) are allowed"
            ));
        }
        Ok(LoopbackUrl {
            tls,
            addr,
            authority,
            path,
        })
    }
}

/// An answer's head, once all of it and its body have arrived.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Framed {
    pub status: u16,
    /// Where the body is in the buffer.
    pub body_start: usize,
    pub len: usize,
    /// The server will close the connection after this answer.
    pub close: bool,
}

/// Frames the answer at the start of `buf`: `Ok(None)` until all of it has
/// arrived. A body needs a `Content-Length` (trackers do not chunk).
pub fn frame(buf: &[u8]) -> Result<Option<Framed>, Invalid> {
    let mut headers = [httparse::EMPTY_HEADER; 32];
    let mut response = httparse::Response::new(&mut headers);
    let head_len = match response.parse(buf) {
        Ok(httparse::Status::Complete(n)) => n,
        Ok(httparse::Status::Partial) => return Ok(None),
        Err(_) => return Err(Invalid::Malformed),
    };
    let mut length = None;
    let mut close = response.version == Some(0);
    for header in response.headers.iter() {
        if header.name.eq_ignore_ascii_case("content-length") {
            let text = std::str::from_utf8(header.value).map_err(|_| Invalid::Malformed)?;
            length = Some(
                text.trim()
                    .parse::<usize>()
                    .map_err(|_| Invalid::Malformed)?,
            );
        } else if header.name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(Invalid::Malformed);
        } else if header.name.eq_ignore_ascii_case("connection") {
            let value = header.value.trim_ascii();
            if value.eq_ignore_ascii_case(b"close") {
                close = true;
            } else if value.eq_ignore_ascii_case(b"keep-alive") {
                close = false;
            }
        }
    }
    let length = length.ok_or(Invalid::Malformed)?;
    let len = head_len + length;
    if buf.len() < len {
        return Ok(None);
    }
    Ok(Some(Framed {
        status: response.code.ok_or(Invalid::Malformed)?,
        body_start: head_len,
        len,
        close,
    }))
}

/// The request awaiting its answer.
#[derive(Clone, Copy, Debug)]
struct Pending {
    kind: Kind,
    sent_ns: u64,
    max_peers: usize,
    port: u16,
    scrape_hashes: usize,
    attempt: Attempt,
}

/// Where a request stands with the connections it went out on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Attempt {
    /// Sent once.
    First,
    /// Its connection closed before any byte of the answer: to be sent again.
    Lost,
    /// Sent again on a new connection; a second loss counts.
    Retried,
}

pub struct HttpSession {
    target: HttpTarget,
    source: u32,
    local_ip: IpAddr,
    mix: Weighted<2>,
    pending: Option<Pending>,
    scrape: [InfoHash; MAX_SCRAPE],
    /// The passkey first in the path (Ocelot's form).
    passkey_first: bool,
}

/// Most compact IPv4 peers an HTTP answer may carry when the tracker's default
/// is asked for (no protocol cap; a generous bound).
const MAX_DEFAULT_PEERS: usize = 1000;

impl HttpSession {
    pub fn new(target: HttpTarget, source: u32, local_ip: IpAddr, mix: Weighted<2>) -> Self {
        HttpSession {
            target,
            source,
            local_ip,
            mix,
            pending: None,
            scrape: [InfoHash::default(); MAX_SCRAPE],
            passkey_first: false,
        }
    }

    /// Private requests with the passkey first, `/{passkey}/announce?...`
    /// (Ocelot's form), when `on`; else `/announce/{passkey}?...`.
    pub fn with_passkey_first(mut self, on: bool) -> Self {
        self.passkey_first = on;
        self
    }

    fn insert_passkey(&self, out: &mut Vec<u8>, start: usize, passkey: &private::Passkey) {
        if self.passkey_first {
            private::insert_passkey_first(out, start, passkey);
        } else {
            private::insert_passkey(out, start, passkey);
        }
    }

    /// The kind of the request awaiting an answer.
    pub fn pending(&self) -> Option<Kind> {
        self.pending.map(|p| p.kind)
    }

    /// Appends the next request (a whole HTTP/1.1 request) to `out`.
    pub fn write_request(
        &mut self,
        model: &TrafficModel,
        rng: &mut Rng,
        sent_ns: u64,
        out: &mut Vec<u8>,
        stats: &mut Stats,
    ) {
        let kind = [Kind::Announce, Kind::Scrape][self.mix.sample(rng)];
        out.extend_from_slice(b"GET ");
        out.extend_from_slice(self.target.prefix.as_bytes());
        let mut pending = Pending {
            kind,
            sent_ns,
            max_peers: 0,
            port: 0,
            scrape_hashes: 0,
            attempt: Attempt::First,
        };
        match kind {
            Kind::Announce => {
                let plan = model.announce(rng, self.source);
                let mut key = [0u8; 8];
                for (i, b) in key.iter_mut().enumerate() {
                    *b = b"0123456789ABCDEF"[((plan.peer.key >> (28 - 4 * i)) & 15) as usize];
                }
                let numwant = u32::try_from(plan.numwant).ok();
                pending.max_peers = numwant.map_or(MAX_DEFAULT_PEERS, |n| n as usize);
                pending.port = plan.peer.port;
                let totals = transfer::transfer(&plan, sent_ns);
                let start = out.len();
                write_announce_target(
                    out,
                    &AnnounceRequest {
                        uploaded: totals.uploaded,
                        downloaded: totals.downloaded,
                        left: totals.left,
                        event: plan.event,
                        no_peer_id: true,
                        numwant,
                        key: Some(&key),
                        ..AnnounceRequest::new(plan.info_hash, plan.peer.peer_id, plan.peer.port)
                    },
                );
                if let Some(passkey) = model.passkey(&plan.peer) {
                    self.insert_passkey(out, start, passkey);
                }
            }
            _ => {
                let n = model.scrape(rng, &mut self.scrape);
                pending.scrape_hashes = n;
                let start = out.len();
                write_scrape_target(out, &self.scrape[..n]);
                // A private tracker's scrape needs a passkey too (one of
                // this connection's peers'); a public one draws no peer.
                if model.has_passkeys() {
                    let peer = model.peer_on_source(rng, self.source);
                    if let Some(passkey) = model.passkey(&peer) {
                        self.insert_passkey(out, start, passkey);
                    }
                }
            }
        }
        out.extend_from_slice(b" HTTP/1.1\r\nHost: ");
        out.extend_from_slice(self.target.host.as_bytes());
        out.extend_from_slice(b"\r\nUser-Agent: load-test\r\n\r\n");
        self.pending = Some(pending);
        stats.sent(kind);
    }

    /// Checks the framed answer in `buf` (received at `now_ns`) and counts it.
    pub fn on_answer(&mut self, buf: &[u8], framed: Framed, now_ns: u64, stats: &mut Stats) {
        let Some(pending) = self.pending.take() else {
            stats.invalid(Invalid::UnknownTransaction);
            return;
        };
        let latency = now_ns.saturating_sub(pending.sent_ns);
        if framed.status != 200 {
            stats.invalid(Invalid::HttpStatus);
            return;
        }
        // aquatic_http ends its bodies with CRLF after the bencoded value;
        // clients ignore it, and so do we (an answer is a dictionary, which
        // never ends in whitespace).
        let body = buf[framed.body_start..framed.len].trim_ascii_end();
        let verdict = match bencode::decode(body) {
            Err(_) => Err(Invalid::BadBencode),
            Ok(value) => {
                if let Some(reason) = value.get(b"failure reason") {
                    match reason.as_bytes() {
                        Some(message) => {
                            stats.error(pending.kind, message, latency);
                            return;
                        }
                        None => Err(Invalid::BadBencode),
                    }
                } else if pending.kind == Kind::Announce {
                    // A valid answer may carry a warning (UNIT3D-Announce's
                    // refusals that keep the client announcing): counted.
                    if let Some(message) = value.get(b"warning message").and_then(Value::as_bytes) {
                        stats.warning(message);
                    }
                    self.check_announce(&value, &pending)
                        .map(|peers| stats.announce_peers(peers))
                } else {
                    self.check_scrape(&value, &pending)
                }
            }
        };
        match verdict {
            Ok(()) => stats.ok(pending.kind, latency),
            Err(why) => stats.invalid(why),
        }
    }

    /// Counts the request in flight as answered invalidly (`why`).
    pub fn fail(&mut self, why: Invalid, stats: &mut Stats) {
        self.pending = None;
        stats.invalid(why);
    }

    /// Counts the request in flight as timed out, or as lost with the connection.
    pub fn abandon(&mut self, timed_out: bool, stats: &mut Stats) {
        if let Some(pending) = self.pending.take() {
            if timed_out {
                stats.timeout(pending.kind);
            } else {
                stats.invalid(Invalid::ConnectionLost);
            }
        }
    }

    /// The connection ended (closed, reset, or a write failed) with the
    /// request in flight, `answer_started` if some of its answer had come.
    /// A server may close an idle keep-alive connection at any moment, so a
    /// request that crossed the close got no answer at all; RFC 9112 9.3.1
    /// lets a client send such an idempotent request (a GET) again on a new
    /// connection, once. `true`: it is kept for [`Self::resend`]; otherwise
    /// it counts as lost.
    pub fn lost(&mut self, answer_started: bool, stats: &mut Stats) -> bool {
        match &mut self.pending {
            None => false,
            Some(pending) if !answer_started && pending.attempt == Attempt::First => {
                pending.attempt = Attempt::Lost;
                true
            }
            Some(_) => {
                self.abandon(false, stats);
                false
            }
        }
    }

    /// On a new connection: whether the request lost with the previous one
    /// goes again first (the same bytes; it keeps its first send time, so the
    /// delay counts in its latency). Counted as retried.
    pub fn resend(&mut self, stats: &mut Stats) -> bool {
        match &mut self.pending {
            Some(pending) if pending.attempt == Attempt::Lost => {
                pending.attempt = Attempt::Retried;
                stats.retried += 1;
                true
            }
            _ => false,
        }
    }

    /// A request lost with its connection that has not gone again yet.
    pub fn resend_due(&self) -> bool {
        self.pending.is_some_and(|p| p.attempt == Attempt::Lost)
    }

    fn check_announce(&self, value: &Value<'_>, pending: &Pending) -> Result<usize, Invalid> {
        let int = |key: &[u8]| {
            value
                .get(key)
                .and_then(Value::as_int)
                .filter(|n| *n >= 0)
                .ok_or(Invalid::BadBencode)
        };
        let (interval, complete, incomplete) =
            (int(b"interval")?, int(b"complete")?, int(b"incomplete")?);
        let peers = value
            .get(b"peers")
            .and_then(Value::as_bytes)
            .ok_or(Invalid::BadBencode)?;
        if peers.len() % 6 != 0 {
            return Err(Invalid::BadBencode);
        }
        // A loopback IPv4 load has no IPv6 peers to hand out.
        if value
            .get(b"peers6")
            .and_then(Value::as_bytes)
            .is_some_and(|p| !p.is_empty())
        {
            return Err(Invalid::BadPeer);
        }
        let n = peers.len() / 6;
        if n > pending.max_peers {
            return Err(Invalid::TooManyPeers);
        }
        if interval == 0 || complete + incomplete < n as i64 {
            return Err(Invalid::ImplausibleCounts);
        }
        for entry in peers.chunks_exact(6) {
            let ip = Ipv4Addr::new(entry[0], entry[1], entry[2], entry[3]);
            let port = u16::from_be_bytes([entry[4], entry[5]]);
            if port == 0 || !ip.is_loopback() {
                return Err(Invalid::BadPeer);
            }
            if IpAddr::V4(ip) == self.local_ip && port == pending.port {
                return Err(Invalid::SelfInPeers);
            }
        }
        Ok(n)
    }

    fn check_scrape(&self, value: &Value<'_>, pending: &Pending) -> Result<(), Invalid> {
        let Some(Value::Dict(files)) = value.get(b"files") else {
            return Err(Invalid::BadBencode);
        };
        let asked = &self.scrape[..pending.scrape_hashes];
        // Repeated hashes are answered once.
        let distinct = asked
            .iter()
            .enumerate()
            .filter(|(i, h)| !asked[..*i].contains(h))
            .count();
        if files.len() != distinct {
            return Err(Invalid::ScrapeMismatch);
        }
        for (key, stats) in files {
            if !asked.iter().any(|h| h.0[..] == key[..]) {
                return Err(Invalid::ScrapeMismatch);
            }
            for field in [&b"complete"[..], b"downloaded", b"incomplete"] {
                if stats
                    .get(field)
                    .and_then(Value::as_int)
                    .is_none_or(|n| n < 0)
                {
                    return Err(Invalid::BadBencode);
                }
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests;
