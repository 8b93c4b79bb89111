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
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            return Err(format!(
                "--target `{url}` must start with http:// or https://"
            ));
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
}

pub struct HttpSession {
    target: HttpTarget,
    source: u32,
    local_ip: IpAddr,
    mix: Weighted<2>,
    pending: Option<Pending>,
    scrape: [InfoHash; MAX_SCRAPE],
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
                write_announce_target(
                    out,
                    &AnnounceRequest {
                        uploaded: plan.peer.uploaded,
                        downloaded: plan.peer.downloaded,
                        left: plan.left,
                        event: plan.event,
                        no_peer_id: true,
                        numwant,
                        key: Some(&key),
                        ..AnnounceRequest::new(plan.info_hash, plan.peer.peer_id, plan.peer.port)
                    },
                );
            }
            _ => {
                let n = model.scrape(rng, &mut self.scrape);
                pending.scrape_hashes = n;
                write_scrape_target(out, &self.scrape[..n]);
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
mod tests {
    use super::*;
    use crate::config::TrafficConfig;
    use crate::model::min_sources;
    use tracker_proto::http::{parse_announce, parse_head, parse_scrape, Endpoint, Parsed, RealIp};
    use tracker_proto::http::{
        write_announce, write_failure, write_response, write_scrape, AnnounceResponse,
    };
    use tracker_proto::{AnswerPeers, IpFamily, ScrapeStats};

    const LOCAL: &str = "127.1.0.1";

    fn session(mix: [u32; 2]) -> (HttpSession, TrafficModel, Rng, Stats) {
        let traffic = TrafficConfig {
            peers: 1000,
            torrents: 50,
            ..TrafficConfig::default()
        };
        let model = TrafficModel::new(&traffic, min_sources(traffic.peers), 5).unwrap();
        let target = HttpTarget::parse("https://127.0.0.1:8443/announce").unwrap();
        let session = HttpSession::new(
            target,
            0,
            LOCAL.parse().unwrap(),
            Weighted::new(mix).unwrap(),
        );
        (session, model, Rng::new(3), Stats::default())
    }

    fn respond(status: u16, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
        let mut out = Vec::new();
        write_response(
            &mut out,
            status,
            tracker_proto::http::Connection::KeepAlive,
            body,
        );
        out
    }

    fn peer(addr: &str) -> SocketAddr {
        addr.parse().unwrap()
    }

    #[test]
    fn targets_parse() {
        let t = HttpTarget::parse("http://127.0.0.1:8080").unwrap();
        assert_eq!(
            t,
            HttpTarget {
                tls: false,
                addr: "127.0.0.1:8080".parse().unwrap(),
                host: "127.0.0.1:8080".into(),
                prefix: String::new()
            }
        );
        let t = HttpTarget::parse("https://[::1]:8443/announce").unwrap();
        assert!(t.tls);
        assert_eq!(t.prefix, "");
        assert_eq!(t.addr, "[::1]:8443".parse().unwrap());
        let t = HttpTarget::parse("https://127.0.0.2/pass/announce").unwrap();
        assert_eq!(t.addr.port(), 443);
        assert_eq!(t.prefix, "/pass");
        assert!(HttpTarget::parse("http://10.0.0.1:80").is_err());
        assert!(HttpTarget::parse("http://example.com/").is_err());
        assert!(HttpTarget::parse("ftp://127.0.0.1:1").is_err());
    }

    #[test]
    fn requests_parse_with_the_trackers_parser() {
        let (mut s, model, mut rng, mut stats) = session([1, 1]);
        let mut kinds = [0; 3];
        for _ in 0..200 {
            let mut out = Vec::new();
            s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
            let Ok(Parsed::Complete { request, consumed }) = parse_head(&out, RealIp::Off) else {
                panic!("{}", String::from_utf8_lossy(&out));
            };
            assert_eq!(consumed, out.len());
            assert!(out.starts_with(b"GET /"));
            match request.endpoint {
                Endpoint::Announce => {
                    let a = parse_announce(request.query).unwrap();
                    assert_eq!(a.numwant, Some(50));
                    assert!(a.compact);
                    assert_eq!(s.pending(), Some(Kind::Announce));
                    kinds[1] += 1;
                }
                Endpoint::Scrape => {
                    let mut hashes = Vec::new();
                    parse_scrape(request.query, 74, &mut hashes).unwrap();
                    assert!(!hashes.is_empty());
                    kinds[2] += 1;
                }
            }
        }
        assert!(kinds[1] > 50 && kinds[2] > 50, "{kinds:?}");
        assert_eq!(stats.counters.sent[1] + stats.counters.sent[2], 200);
    }

    /// The session's answer to one announce, with `peers` (all of one family).
    fn announce_once(
        peers: &[SocketAddr],
        complete: u32,
        tweak: impl FnOnce(&mut Vec<u8>),
    ) -> Stats {
        let mut answer_peers = AnswerPeers::default();
        answer_peers.reset(peers.first().map_or(IpFamily::V4, |a| IpFamily::of(a.ip())));
        for &addr in peers {
            assert!(answer_peers.push_addr(addr, None));
        }
        let peers = &answer_peers;
        let (mut s, model, mut rng, mut stats) = session([1, 0]);
        let mut out = Vec::new();
        s.write_request(&model, &mut rng, 1_000, &mut out, &mut stats);
        let answer = respond(200, |body| {
            write_announce(
                body,
                &AnnounceResponse {
                    interval: 1800,
                    min_interval: None,
                    complete,
                    incomplete: 0,
                    peers,
                    compact: true,
                    no_peer_id: false,
                },
            );
            tweak(body);
        });
        match frame(&answer) {
            Ok(Some(framed)) => s.on_answer(&answer, framed, 5_000, &mut stats),
            Ok(None) => panic!("incomplete"),
            Err(why) => stats.invalid(why),
        }
        stats
    }

    #[test]
    fn a_prefix_goes_before_the_endpoint() {
        let (_, model, mut rng, mut stats) = session([1, 1]);
        let target = HttpTarget::parse("http://127.0.0.1:80/key/announce").unwrap();
        let mut s = HttpSession::new(
            target,
            0,
            LOCAL.parse().unwrap(),
            Weighted::new([1, 1]).unwrap(),
        );
        for _ in 0..20 {
            let mut out = Vec::new();
            s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
            assert!(
                out.starts_with(b"GET /key/announce?") || out.starts_with(b"GET /key/scrape?"),
                "{}",
                String::from_utf8_lossy(&out)
            );
        }
    }

    #[test]
    fn good_announces_are_ok() {
        let stats = announce_once(&[peer("127.1.0.9:2000")], 5, |_| {});
        assert_eq!(stats.counters.ok[Kind::Announce as usize], 1);
        assert_eq!(stats.counters.invalid, 0);
        assert_eq!(stats.peers_returned, 1);
        assert_eq!(stats.latency[Kind::Announce as usize].max(), 4_000);
    }

    #[test]
    fn a_crlf_after_the_body_is_tolerated_and_garbage_is_not() {
        let stats = announce_once(&[peer("127.1.0.9:2000")], 5, |b| {
            b.extend_from_slice(b"\r\n")
        });
        assert_eq!(stats.counters.ok[Kind::Announce as usize], 1);
        let stats = announce_once(&[peer("127.1.0.9:2000")], 5, |b| b.extend_from_slice(b"x"));
        assert_eq!(stats.counters.ok[Kind::Announce as usize], 0);
    }

    #[test]
    fn bad_announces_are_invalid() {
        let cases: [(Vec<SocketAddr>, u32, Invalid); 4] = [
            (vec![peer("10.1.0.9:2000")], 5, Invalid::BadPeer),
            (
                vec![peer("127.1.0.9:2000"); 2],
                1,
                Invalid::ImplausibleCounts,
            ),
            (vec![peer("127.1.0.9:2000"); 51], 100, Invalid::TooManyPeers),
            (vec![peer("[::1]:2000")], 5, Invalid::BadPeer),
        ];
        for (peers, complete, why) in cases {
            let stats = announce_once(&peers, complete, |_| {});
            assert_eq!(stats.invalid[why as usize], 1, "{why:?}");
        }
        let stats = announce_once(&[], 1, |body| body.push(b'x'));
        assert_eq!(stats.invalid[Invalid::BadBencode as usize], 1);
    }

    #[test]
    fn failures_count_as_errors() {
        let (mut s, model, mut rng, mut stats) = session([1, 0]);
        let mut out = Vec::new();
        s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
        let answer = respond(200, |b| write_failure(b, b"unregistered torrent"));
        let framed = frame(&answer).unwrap().unwrap();
        s.on_answer(&answer, framed, 10, &mut stats);
        assert_eq!(stats.counters.errors[Kind::Announce as usize], 1);
        assert_eq!(stats.error_messages.by_message[0].0, "unregistered torrent");
        // Not 200: invalid.
        s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
        let answer = respond(404, |b| write_failure(b, b"not found"));
        let framed = frame(&answer).unwrap().unwrap();
        s.on_answer(&answer, framed, 10, &mut stats);
        assert_eq!(stats.invalid[Invalid::HttpStatus as usize], 1);
    }

    #[test]
    fn scrapes_must_answer_the_hashes_asked() {
        for (drop_one, ok) in [(false, true), (true, false)] {
            let (mut s, model, mut rng, mut stats) = session([0, 1]);
            let mut out = Vec::new();
            // Ask until a scrape of at least two distinct hashes comes up.
            let hashes = loop {
                out.clear();
                s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
                let Ok(Parsed::Complete { request, .. }) = parse_head(&out, RealIp::Off) else {
                    panic!()
                };
                let mut hashes = Vec::new();
                parse_scrape(request.query, 74, &mut hashes).unwrap();
                hashes.sort();
                hashes.dedup();
                if hashes.len() >= 2 {
                    break hashes;
                }
            };
            let mut files: Vec<_> = hashes
                .iter()
                .map(|h| (*h, ScrapeStats::default()))
                .collect();
            if drop_one {
                files.pop();
            }
            let answer = respond(200, |b| write_scrape(b, &mut files));
            let framed = frame(&answer).unwrap().unwrap();
            s.on_answer(&answer, framed, 10, &mut stats);
            assert_eq!(stats.counters.ok[Kind::Scrape as usize], u64::from(ok));
            assert_eq!(
                stats.invalid[Invalid::ScrapeMismatch as usize],
                u64::from(!ok)
            );
        }
    }

    #[test]
    fn framing_waits_for_the_whole_body() {
        let answer = respond(200, |b| b.extend_from_slice(b"d8:intervali1ee"));
        for cut in 0..answer.len() {
            assert_eq!(frame(&answer[..cut]), Ok(None), "cut at {cut}");
        }
        let framed = frame(&answer).unwrap().unwrap();
        assert_eq!(framed.len, answer.len());
        assert!(!framed.close);
        let close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
        assert!(frame(close).unwrap().unwrap().close);
        let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
        assert_eq!(frame(chunked), Err(Invalid::Malformed));
        let no_length = b"HTTP/1.1 200 OK\r\n\r\n";
        assert_eq!(frame(no_length), Err(Invalid::Malformed));
        assert_eq!(frame(b"SSH-2.0\r\n\r\n"), Err(Invalid::Malformed));
    }

    #[test]
    fn abandoned_requests_are_counted() {
        let (mut s, model, mut rng, mut stats) = session([1, 0]);
        let mut out = Vec::new();
        s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
        s.abandon(true, &mut stats);
        s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
        s.abandon(false, &mut stats);
        s.abandon(false, &mut stats);
        assert_eq!(stats.counters.timeouts[Kind::Announce as usize], 1);
        assert_eq!(stats.invalid[Invalid::ConnectionLost as usize], 1);
    }
}
