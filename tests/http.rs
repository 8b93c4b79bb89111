//! The HTTP and HTTPS tracker end to end: the real binary, two or more
//! workers, real connections on loopback, spoken to with a small blocking
//! HTTP/1.1 client (over rustls for HTTPS) and checked with our own bencode
//! decoder.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use support::owner_of;
use support::wire::{announce_request, target};
use support::{TestCert, Tracker};
use tracker_proto::http::bencode::{decode, Value};
use tracker_proto::http::write_scrape_target;
use tracker_proto::{AnnounceEvent, InfoHash};

/// Plain TCP or TLS: both are read and written alike.
trait Stream: Read + Write {}
impl<T: Read + Write> Stream for T {}

#[derive(Clone, Copy, Debug, PartialEq)]
enum Proto {
    Http,
    Https,
}

const BOTH: [Proto; 2] = [Proto::Http, Proto::Https];

/// A blocking HTTP/1.1 client on one connection.
struct Client {
    stream: Box<dyn Stream>,
    tcp: TcpStream,
    /// Bytes received and not yet consumed as part of a response.
    pending: Vec<u8>,
}

#[derive(Debug)]
struct Response {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
}

impl Response {
    fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }

    fn bencode(&self) -> Value<'_> {
        decode(&self.body)
            .unwrap_or_else(|e| panic!("{e} in {:?}", String::from_utf8_lossy(&self.body)))
    }

    fn failure(&self) -> Option<String> {
        self.bencode()
            .get(b"failure reason")
            .and_then(Value::as_bytes)
            .map(|r| String::from_utf8_lossy(r).into_owned())
    }

    fn int(&self, key: &[u8]) -> i64 {
        self.bencode()
            .get(key)
            .and_then(Value::as_int)
            .unwrap_or_else(|| panic!("no {} in {:?}", String::from_utf8_lossy(key), self))
    }

    /// The peers of an announce answer, compact or not, IPv4 then IPv6.
    fn peers(&self) -> Vec<SocketAddr> {
        let body = self.bencode();
        assert!(self.failure().is_none(), "failure: {:?}", self.failure());
        let mut out = Vec::new();
        match body.get(b"peers") {
            Some(Value::Bytes(compact)) => {
                assert_eq!(compact.len() % 6, 0);
                for c in compact.chunks(6) {
                    let ip: [u8; 4] = c[..4].try_into().unwrap();
                    out.push(SocketAddr::new(ip.into(), u16::from_be_bytes([c[4], c[5]])));
                }
            }
            Some(Value::List(list)) => {
                for peer in list {
                    let ip = peer.get(b"ip").and_then(Value::as_bytes).unwrap();
                    let ip: IpAddr = std::str::from_utf8(ip).unwrap().parse().unwrap();
                    let port = peer.get(b"port").and_then(Value::as_int).unwrap();
                    out.push(SocketAddr::new(ip, port as u16));
                }
            }
            other => panic!("peers is {other:?}"),
        }
        if let Some(v6) = body.get(b"peers6").and_then(Value::as_bytes) {
            assert_eq!(v6.len() % 18, 0);
            for c in v6.chunks(18) {
                let ip: [u8; 16] = c[..16].try_into().unwrap();
                out.push(SocketAddr::new(
                    ip.into(),
                    u16::from_be_bytes([c[16], c[17]]),
                ));
            }
        }
        out
    }

    /// `(complete, downloaded, incomplete)` of each file of a scrape answer.
    fn files(&self) -> Vec<(InfoHash, [i64; 3])> {
        let body = self.bencode();
        let Some(Value::Dict(files)) = body.get(b"files") else {
            panic!("no files in {self:?}");
        };
        files
            .iter()
            .map(|(hash, stats)| {
                let n = |k: &[u8]| stats.get(k).and_then(Value::as_int).unwrap();
                (
                    InfoHash((*hash).try_into().unwrap()),
                    [n(b"complete"), n(b"downloaded"), n(b"incomplete")],
                )
            })
            .collect()
    }

    fn counts_of(&self, hash: &InfoHash) -> Option<[i64; 3]> {
        self.files()
            .into_iter()
            .find(|(h, _)| h == hash)
            .map(|(_, c)| c)
    }
}

impl Client {
    fn connect(tracker: &Tracker, proto: Proto, index: usize) -> Client {
        match proto {
            Proto::Http => Client::plain(tracker.http[index]),
            Proto::Https => {
                let cert = &tracker.tls.as_ref().expect("https").cert;
                Client::tls(tracker.https[index], cert).expect("TLS handshake")
            }
        }
    }

    fn plain(addr: SocketAddr) -> Client {
        let tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        Client {
            stream: Box::new(tcp.try_clone().unwrap()),
            tcp,
            pending: Vec::new(),
        }
    }

    /// A TLS connection trusting `cert` only; Err when the handshake fails.
    fn tls(addr: SocketAddr, cert: &TestCert) -> std::io::Result<Client> {
        let name = rustls::pki_types::ServerName::from(addr.ip());
        let conn = rustls::ClientConnection::new(cert.client_config(), name).unwrap();
        let tcp = TcpStream::connect(addr)?;
        tcp.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut stream = rustls::StreamOwned::new(conn, tcp.try_clone()?);
        while stream.conn.is_handshaking() {
            stream.conn.complete_io(&mut stream.sock)?;
        }
        Ok(Client {
            stream: Box::new(stream),
            tcp,
            pending: Vec::new(),
        })
    }

    fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).unwrap();
        self.stream.flush().unwrap();
    }

    fn get(&mut self, target: &str) -> Response {
        self.send(format!("GET {target} HTTP/1.1\r\nHost: tracker\r\n\r\n").as_bytes());
        self.response()
    }

    fn response(&mut self) -> Response {
        self.try_response().expect("an answer")
    }

    /// The next response, or None if the connection closes first.
    fn try_response(&mut self) -> Option<Response> {
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 16];
            let mut parsed = httparse::Response::new(&mut headers);
            if let httparse::Status::Complete(head) = parsed.parse(&self.pending).unwrap() {
                let headers: Vec<(String, String)> = parsed
                    .headers
                    .iter()
                    .map(|h| {
                        (
                            h.name.to_string(),
                            String::from_utf8(h.value.to_vec()).unwrap(),
                        )
                    })
                    .collect();
                let status = parsed.code.unwrap();
                let length: usize = headers
                    .iter()
                    .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                    .expect("Content-Length")
                    .1
                    .parse()
                    .unwrap();
                while self.pending.len() < head + length {
                    if !self.read_more() {
                        panic!("connection closed inside a body");
                    }
                }
                let body = self.pending[head..head + length].to_vec();
                self.pending.drain(..head + length);
                return Some(Response {
                    status,
                    headers,
                    body,
                });
            }
            if !self.read_more() {
                return None;
            }
        }
    }

    fn read_more(&mut self) -> bool {
        let mut buf = [0u8; 16 << 10];
        match self.stream.read(&mut buf) {
            Ok(0) => false,
            Ok(n) => {
                self.pending.extend_from_slice(&buf[..n]);
                true
            }
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                panic!("no answer within the read timeout")
            }
            // A reset, or TLS ending without close_notify: closed all the same.
            Err(_) => false,
        }
    }

    /// How long until the server closes the connection (None: still open
    /// after `limit`).
    fn closed_within(&mut self, limit: Duration) -> Option<Duration> {
        let start = Instant::now();
        self.tcp.set_read_timeout(Some(limit)).unwrap();
        let mut buf = [0u8; 1024];
        loop {
            match self.stream.read(&mut buf) {
                Ok(0) => return Some(start.elapsed()),
                Ok(_) => continue,
                Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                    return None
                }
                Err(_) => return Some(start.elapsed()),
            }
        }
    }
}

fn announce(hash: InfoHash, port: u16, left: u64) -> String {
    target(&announce_request(hash, port, left, AnnounceEvent::Started))
}

fn scrape(hashes: &[InfoHash]) -> String {
    let mut out = Vec::new();
    write_scrape_target(&mut out, hashes);
    String::from_utf8(out).unwrap()
}

/// An info-hash owned by worker `owner` of `workers`, distinct per `seed`.
fn hash_owned_by(owner: usize, workers: usize, seed: u32) -> InfoHash {
    (0u32..)
        .map(|i| {
            let mut h = [0u8; 20];
            h[..4].copy_from_slice(&seed.to_be_bytes());
            h[4..8].copy_from_slice(&i.to_be_bytes());
            // Bytes that need percent-encoding, and some that do not.
            h[8..12].copy_from_slice(b"%& +");
            InfoHash(h)
        })
        .find(|h| owner_of(h, workers) == owner)
        .unwrap()
}

fn addr(text: &str) -> SocketAddr {
    text.parse().unwrap()
}

#[test]
fn announces_compact_and_not_over_http_and_https_on_every_shard() {
    // By default no peer ids are kept, and non-compact answers go without
    // them; `swarm.store_peer_ids` keeps them for answers that ask.
    for ids_kept in [false, true] {
        let config = format!("[swarm]\nstore_peer_ids = {ids_kept}\n");
        let tracker = Tracker::builder()
            .http(None)
            .https(None)
            .config(&config)
            .start();
        announces_on_every_shard(&tracker, ids_kept);
    }
}

fn announces_on_every_shard(tracker: &Tracker, ids_kept: bool) {
    for (p, proto) in BOTH.into_iter().enumerate() {
        for owner in 0..2 {
            let hash = hash_owned_by(owner, 2, 1 + p as u32);
            let mut seeder = Client::connect(tracker, proto, 0);
            let mut leecher = Client::connect(tracker, proto, 0);
            let first = seeder.get(&announce(hash, 5001, 0));
            assert_eq!(first.status, 200, "{proto:?}");
            assert_eq!(first.header("content-type"), Some("text/plain"));
            assert_eq!((first.int(b"complete"), first.int(b"incomplete")), (1, 0));
            assert_eq!(first.int(b"interval"), 1800);
            assert!(first.peers().is_empty(), "never the requester itself");

            let second = leecher.get(&announce(hash, 5002, 100));
            assert_eq!((second.int(b"complete"), second.int(b"incomplete")), (1, 1));
            assert_eq!(second.peers(), [addr("127.0.0.1:5001")]);
            assert!(
                matches!(second.bencode().get(b"peers"), Some(Value::Bytes(_))),
                "compact by default"
            );

            // Non-compact, with and without peer ids.
            let mut req = announce_request(hash, 5001, 0, AnnounceEvent::Started);
            req.compact = false;
            req.event = AnnounceEvent::None;
            let dicts = seeder.get(&target(&req));
            assert_eq!(dicts.peers(), [addr("127.0.0.1:5002")]);
            let body = dicts.bencode();
            let list = body.get(b"peers").and_then(Value::as_list).unwrap();
            let mut id = [b'-'; 20];
            id[..2].copy_from_slice(&5002u16.to_be_bytes());
            assert_eq!(
                list[0].get(b"peer id").and_then(Value::as_bytes),
                ids_kept.then_some(&id[..])
            );
            req.no_peer_id = true;
            let no_ids = seeder.get(&target(&req));
            let body = no_ids.bencode();
            let list = body.get(b"peers").and_then(Value::as_list).unwrap();
            assert_eq!(list[0].get(b"peer id"), None);
            assert_eq!((no_ids.int(b"complete"), no_ids.int(b"incomplete")), (1, 1));
        }
    }
}

#[test]
fn numwant_events_and_completed_counts() {
    let tracker = Tracker::builder().http(None).start();
    let mut client = Client::connect(&tracker, Proto::Http, 0);
    for owner in 0..2 {
        let hash = hash_owned_by(owner, 2, 10);
        for port in 6000..6010 {
            client.get(&announce(hash, port, 1));
        }
        let mut req = announce_request(hash, 7000, 1, AnnounceEvent::Started);
        req.numwant = Some(3);
        let three = client.get(&target(&req));
        assert_eq!(three.peers().len(), 3);
        req.numwant = None;
        req.event = AnnounceEvent::None;
        let all = client.get(&target(&req));
        let mut peers = all.peers();
        peers.sort();
        peers.dedup();
        assert_eq!(peers.len(), 10, "every other peer, never the requester");
        req.event = AnnounceEvent::Completed;
        req.left = 0;
        client.get(&target(&req));
        let counts = client.get(&scrape(&[hash])).counts_of(&hash);
        assert_eq!(counts, Some([1, 1, 10]), "complete, downloaded, incomplete");
        let mut stop = announce_request(hash, 6000, 1, AnnounceEvent::Started);
        stop.event = AnnounceEvent::Stopped;
        client.get(&target(&stop));
        let counts = client.get(&scrape(&[hash])).counts_of(&hash);
        assert_eq!(counts, Some([1, 1, 9]));
    }
}

#[test]
fn ipv6_peers_come_in_peers6_and_stay_apart_from_ipv4() {
    let port = support::free_port();
    let tracker = Tracker::builder()
        .http(Some(addr(&format!("127.0.0.1:{port}"))))
        .http(Some(addr(&format!("[::1]:{port}"))))
        .https(Some(addr(&format!("[::1]:{}", support::free_port()))))
        .start();
    let hash = InfoHash([6; 20]);
    let mut a4 = Client::connect(&tracker, Proto::Http, 0);
    let mut a6 = Client::connect(&tracker, Proto::Http, 1);
    let mut b6 = Client::connect(&tracker, Proto::Https, 0);
    a4.get(&announce(hash, 4004, 1));
    a6.get(&announce(hash, 6006, 1));
    let seen = b6.get(&announce(hash, 6007, 0));
    assert_eq!(seen.peers(), [addr("[::1]:6006")]);
    let body = seen.bencode();
    assert_eq!(body.get(b"peers").and_then(Value::as_bytes), Some(&b""[..]));
    assert_eq!(
        body.get(b"peers6")
            .and_then(Value::as_bytes)
            .map(<[u8]>::len),
        Some(18)
    );
    assert_eq!((seen.int(b"complete"), seen.int(b"incomplete")), (1, 2));
    let seen4 = a4.get(&announce(hash, 4004, 1));
    assert!(seen4.peers().is_empty(), "no IPv6 peer in an IPv4 answer");
    // Non-compact IPv6 peers carry their address as text.
    let mut req = announce_request(hash, 6008, 1, AnnounceEvent::Started);
    req.compact = false;
    assert_eq!(
        b6.get(&target(&req)).peers().len(),
        2,
        "[::1]:6006 and [::1]:6007"
    );
}

#[test]
fn scrape_of_a_hundred_hashes_across_shards() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "3", "--no-pin"])
        .http(None)
        .https(None)
        .start();
    let hashes: Vec<InfoHash> = (0..100u32)
        .map(|i| hash_owned_by(i as usize % 3, 3, 100 + i))
        .collect();
    let mut client = Client::connect(&tracker, Proto::Http, 0);
    for (i, hash) in hashes.iter().enumerate() {
        for p in 0..(i % 3) as u16 {
            client.get(&announce(*hash, 8000 + p, 0));
        }
        client.get(&announce(*hash, 9000, 5));
    }
    let unknown = InfoHash([0xee; 20]);
    let mut asked = hashes.clone();
    asked.insert(7, unknown);
    for proto in BOTH {
        let mut client = Client::connect(&tracker, proto, 0);
        let answer = client.get(&scrape(&asked));
        assert_eq!(answer.status, 200);
        let files = answer.files();
        assert_eq!(files.len(), 101, "{proto:?}");
        for (i, hash) in hashes.iter().enumerate() {
            assert_eq!(
                answer.counts_of(hash),
                Some([(i % 3) as i64, 0, 1]),
                "hash {i} over {proto:?}"
            );
        }
        assert_eq!(answer.counts_of(&unknown), Some([0, 0, 0]));
    }
    // More than http.max_scrape_hashes (128) get a failure reason.
    let too_many: Vec<InfoHash> = (0..129u8).map(|i| InfoHash([i; 20])).collect();
    let answer = client.get(&scrape(&too_many));
    assert_eq!(answer.status, 200);
    assert_eq!(
        answer.failure().as_deref(),
        Some("too many info_hash values")
    );
}

#[test]
fn keep_alive_serves_many_requests_then_closes_at_the_cap() {
    let tracker = Tracker::builder()
        .config("[http]\nmax_requests_per_connection = 20\n")
        .http(None)
        .https(None)
        .start();
    for proto in BOTH {
        let mut client = Client::connect(&tracker, proto, 0);
        for i in 0..19u16 {
            let answer = client.get(&announce(InfoHash([7; 20]), 1000 + i, 1));
            assert_eq!(answer.status, 200);
            assert_eq!(answer.header("connection"), None, "kept alive");
        }
        let last = client.get(&scrape(&[InfoHash([7; 20])]));
        assert_eq!(last.header("connection"), Some("close"));
        assert!(client.closed_within(Duration::from_secs(3)).is_some());
        // HTTP/1.0 closes unless asked to keep alive.
        let mut client = Client::connect(&tracker, proto, 0);
        client.send(b"GET /scrape HTTP/1.0\r\nConnection: keep-alive\r\n\r\n");
        assert_eq!(client.response().header("connection"), Some("keep-alive"));
        client.send(b"GET /scrape HTTP/1.0\r\n\r\n");
        assert_eq!(client.response().header("connection"), Some("close"));
        assert!(client.closed_within(Duration::from_secs(3)).is_some());
    }
}

#[test]
fn pipelined_requests_are_answered_in_order() {
    let tracker = Tracker::builder().http(None).https(None).start();
    for (p, proto) in BOTH.into_iter().enumerate() {
        let mut client = Client::connect(&tracker, proto, 0);
        let hashes: Vec<InfoHash> = (0..12u32)
            .map(|i| hash_owned_by(i as usize % 2, 2, 500 + i + 100 * p as u32))
            .collect();
        let mut batch = Vec::new();
        for (i, hash) in hashes.iter().enumerate() {
            for port in 0..=(i % 3) as u16 {
                batch.extend_from_slice(
                    format!("GET {} HTTP/1.1\r\n\r\n", announce(*hash, 2000 + port, 0)).as_bytes(),
                );
            }
            batch
                .extend_from_slice(format!("GET {} HTTP/1.1\r\n\r\n", scrape(&[*hash])).as_bytes());
        }
        client.send(&batch);
        for (i, hash) in hashes.iter().enumerate() {
            for port in 0..=(i % 3) as i64 {
                let answer = client.response();
                assert_eq!(
                    answer.int(b"complete"),
                    port + 1,
                    "announce {port} of hash {i}"
                );
            }
            let answer = client.response();
            assert_eq!(
                answer.counts_of(hash),
                Some([(i % 3) as i64 + 1, 0, 0]),
                "scrape of hash {i} over {proto:?}"
            );
        }
    }
}

#[test]
fn bad_requests_get_reasons_and_statuses_and_the_tracker_goes_on() {
    let tracker = Tracker::builder()
        .config("[http]\nmax_request_head_bytes = 1024\n")
        .http(None)
        .https(None)
        .start();
    for proto in BOTH {
        // Tracker failures: 200 with a reason, and the connection goes on.
        let mut client = Client::connect(&tracker, proto, 0);
        for (target, reason) in [
            ("/announce?info_hash=short&peer_id=aaaaaaaaaaaaaaaaaaaa&port=1", "info_hash is not 20 bytes"),
            ("/announce?info_hash=aaaaaaaaaaaaaaaaaaaa&peer_id=aaaaaaaaaaaaaaaaaaaa", "missing port"),
            ("/announce?info_hash=aaaaaaaaaaaaaaaaaaaa&peer_id=aaaaaaaaaaaaaaaaaaaa&port=1&event=x", "invalid event"),
            ("/announce?info_hash=%zz", "invalid percent-encoding"),
            ("/scrape", "full scrape is disabled: give info_hash"),
        ] {
            let answer = client.get(target);
            assert_eq!(answer.status, 200, "{target}");
            assert_eq!(answer.failure().as_deref(), Some(reason), "{target}");
            assert_eq!(answer.header("connection"), None, "{target}");
        }
        let fine = client.get(&announce(InfoHash([1; 20]), 1, 0));
        assert_eq!(fine.int(b"complete"), 1);

        // HTTP errors: a status, a reason, and the connection closed.
        let long_target = format!("/announce?x={}", "a".repeat(2000));
        let many_headers = format!("GET /scrape HTTP/1.1\r\n{}\r\n", "X-A: b\r\n".repeat(40));
        for (request, status) in [
            ("GET /nope HTTP/1.1\r\n\r\n".to_string(), 404),
            ("GET /announce.php HTTP/1.1\r\n\r\n".to_string(), 404),
            (
                "POST /announce HTTP/1.1\r\nContent-Length: 0\r\n\r\n".to_string(),
                405,
            ),
            (
                "GET /scrape HTTP/1.1\r\nContent-Length: 5\r\n\r\nhello".to_string(),
                400,
            ),
            (
                "GET /scrape HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_string(),
                400,
            ),
            ("\x16\x03\x01junk\r\n\r\n".to_string(), 400),
            ("GET /scrape HTTP/2.0\r\n\r\n".to_string(), 400),
            (format!("GET {long_target} HTTP/1.1\r\n\r\n"), 431),
            (many_headers, 431),
        ] {
            let mut client = Client::connect(&tracker, proto, 0);
            client.send(request.as_bytes());
            let answer = client.response();
            let shown = &request[..request.len().min(40)];
            assert_eq!(answer.status, status, "{shown:?} over {proto:?}");
            assert!(answer.failure().is_some(), "{shown:?}");
            assert_eq!(answer.header("connection"), Some("close"), "{shown:?}");
            assert!(
                client.closed_within(Duration::from_secs(3)).is_some(),
                "{shown:?} left the connection open"
            );
        }
    }
    // Still serving, on every shard.
    let mut client = Client::connect(&tracker, Proto::Http, 0);
    for owner in 0..2 {
        let hash = hash_owned_by(owner, 2, 77);
        assert_eq!(client.get(&announce(hash, 1, 0)).int(b"complete"), 1);
    }
}

#[test]
fn idle_slow_and_silent_clients_are_closed() {
    let tracker = Tracker::builder()
        .config(
            "[http]\nidle_timeout_secs = 1\nrequest_timeout_secs = 1\n\
             tls_handshake_timeout_secs = 1\n",
        )
        .http(None)
        .https(None)
        .start();
    let limit = Duration::from_secs(5);
    // Silent from the start.
    let mut silent = Client::plain(tracker.http[0]);
    let took = silent.closed_within(limit).expect("closed");
    assert!(took >= Duration::from_millis(800), "closed after {took:?}");
    // Idle after an answer, over both protocols.
    for proto in BOTH {
        let mut idle = Client::connect(&tracker, proto, 0);
        idle.get(&scrape(&[InfoHash([2; 20])]));
        let took = idle.closed_within(limit).expect("closed");
        assert!(took >= Duration::from_millis(800), "closed after {took:?}");
    }
    // Slow: a byte at a time never completes a head in time.
    let mut slow = Client::plain(tracker.http[0]);
    let start = Instant::now();
    let mut closed = false;
    for byte in b"GET /scrape?info_hash=aaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nX: y\r\n" {
        if slow.tcp.write_all(&[*byte]).is_err() {
            closed = true;
            break;
        }
        std::thread::sleep(Duration::from_millis(150));
        if start.elapsed() > limit {
            break;
        }
    }
    assert!(
        closed || slow.closed_within(Duration::from_millis(100)).is_some(),
        "a slow head held the connection for {:?}",
        start.elapsed()
    );
    assert!(start.elapsed() < Duration::from_secs(4));
    // A TLS handshake that never starts.
    let mut mute = Client::plain(tracker.https[0]);
    let took = mute.closed_within(limit).expect("closed");
    assert!(took >= Duration::from_millis(800), "closed after {took:?}");
}

#[test]
fn connections_past_the_worker_limit_are_closed_at_once_when_none_is_idle() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config("[http]\nmax_connections_per_worker = 2\n")
        .http(None)
        .start();
    let request = format!("GET {} HTTP/1.1\r\n\r\n", scrape(&[InfoHash([1; 20])]));
    let (head, rest) = request.split_at(10);
    // Retried: the start-up probe's connection may still hold a place for a
    // moment. Each holds its place with half a request: busy, so never
    // closed to make room.
    let busy = || {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut client = Client::plain(tracker.http[0]);
            client.stream.write_all(head.as_bytes()).unwrap();
            if client.closed_within(Duration::from_millis(300)).is_none() {
                return client;
            }
            assert!(Instant::now() < deadline, "no place for a connection");
        }
    };
    let mut first = busy();
    let mut second = busy();
    let mut third = Client::plain(tracker.http[0]);
    assert!(third.closed_within(Duration::from_secs(3)).is_some());
    // Both busy ones are served in full.
    for client in [&mut first, &mut second] {
        client.stream.write_all(rest.as_bytes()).unwrap();
        assert_eq!(client.response().status, 200);
    }
    drop(first);
    // The freed place is taken by the next connection.
    let mut next = Client::plain(tracker.http[0]);
    assert_eq!(next.get(&scrape(&[InfoHash([1; 20])])).status, 200);
}

#[test]
fn real_ip_header_names_the_peer_and_its_absence_is_a_failure() {
    let tracker = Tracker::builder()
        .arg("--real-ip-header")
        .arg("X-Real-IP")
        .arg("--trusted-proxy")
        .arg("127.0.0.1")
        .http(None)
        .start();
    let hash = InfoHash([5; 20]);
    let mut client = Client::connect(&tracker, Proto::Http, 0);
    let req = |ip: &str, port| {
        format!(
            "GET {} HTTP/1.1\r\nX-Real-IP: {ip}\r\n\r\n",
            announce(hash, port, 1)
        )
    };
    client.send(req("10.1.2.3", 1111).as_bytes());
    assert_eq!(client.response().int(b"incomplete"), 1);
    client.send(req("10.1.2.4", 2222).as_bytes());
    assert_eq!(client.response().peers(), [addr("10.1.2.3:1111")]);
    client.send(req("::ffff:10.1.2.5", 3333).as_bytes());
    let mut seen = client.response().peers();
    seen.sort();
    assert_eq!(seen, [addr("10.1.2.3:1111"), addr("10.1.2.4:2222")]);
    for (request, reason) in [
        (
            format!("GET {} HTTP/1.1\r\n\r\n", announce(hash, 1, 0)),
            "missing real IP header",
        ),
        (
            format!(
                "GET {} HTTP/1.1\r\nX-Real-IP: nonsense\r\n\r\n",
                announce(hash, 1, 0)
            ),
            "invalid real IP header",
        ),
    ] {
        let mut client = Client::connect(&tracker, Proto::Http, 0);
        client.send(request.as_bytes());
        let answer = client.response();
        assert_eq!(answer.status, 200);
        assert_eq!(answer.failure().as_deref(), Some(reason));
    }
    let mut client = Client::connect(&tracker, Proto::Http, 0);
    client.send(req("10.1.2.6", 4444).as_bytes());
    assert_eq!(client.response().peers().len(), 3, "still serving");
}

#[test]
fn full_scrape_is_off_by_default_and_bounded_when_on() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "3", "--no-pin"])
        .config("[http]\nfull_scrape = true\nfull_scrape_max_torrents = 5\n")
        .http(None)
        .start();
    let mut client = Client::connect(&tracker, Proto::Http, 0);
    let hashes: Vec<InfoHash> = (0..9u32)
        .map(|i| hash_owned_by(i as usize % 3, 3, 900 + i))
        .collect();
    for hash in &hashes {
        client.get(&announce(*hash, 1, 0));
    }
    let answer = client.get("/scrape");
    let files = answer.files();
    assert_eq!(files.len(), 5);
    for (hash, counts) in files {
        assert!(hashes.contains(&hash));
        assert_eq!(counts, [1, 0, 0]);
    }
}

#[test]
fn sighup_reloads_the_certificate_for_new_connections() {
    let tracker = Tracker::builder().https(None).start();
    let files = tracker.tls.as_ref().unwrap();
    let old = files.cert.clone();
    let addr = tracker.https[0];
    let mut before = Client::tls(addr, &old).unwrap();
    assert_eq!(before.get(&scrape(&[InfoHash([1; 20])])).status, 200);

    let new = TestCert::new();
    files.replace(&new.cert_pem, &new.key_pem);
    sighup(&tracker);
    let deadline = Instant::now() + Duration::from_secs(10);
    while Client::tls(addr, &new).is_err() {
        assert!(
            Instant::now() < deadline,
            "the new certificate was never served"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        Client::tls(addr, &old).is_err(),
        "the old certificate is gone"
    );
    // The connection made before is untouched.
    assert_eq!(before.get(&scrape(&[InfoHash([1; 20])])).status, 200);

    // A bad pair is refused and the last good one kept.
    files.replace(&new.cert_pem, "not a key");
    sighup(&tracker);
    std::thread::sleep(Duration::from_millis(500));
    let mut after = Client::tls(addr, &new).expect("the last good certificate");
    assert_eq!(after.get(&scrape(&[InfoHash([1; 20])])).status, 200);
}

fn sighup(tracker: &Tracker) {
    // SAFETY: a signal to our own child process.
    let rc = unsafe { libc::kill(tracker.pid() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0);
}

/// A peer announcing over UDP and one announcing over HTTPS see each other:
/// one store behind every protocol.
#[test]
fn udp_and_https_peers_share_one_swarm() {
    use support::wire::{udp_announce, udp_connect_packet};
    use tracker_proto::udp::{ConnectionId, IpFamily, Response as UdpResponse, TransactionId};
    let tracker = Tracker::builder().udp(None).https(None).start();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    let exchange = |packet: &[u8]| {
        sock.send_to(packet, tracker.udp[0]).unwrap();
        let mut buf = vec![0u8; 2048];
        let n = sock.recv(&mut buf).unwrap();
        buf.truncate(n);
        buf
    };
    let connect = udp_connect_packet(TransactionId(1));
    let connection_id = match UdpResponse::parse(&exchange(&connect), IpFamily::V4).unwrap() {
        UdpResponse::Connect { connection_id, .. } => connection_id,
        other => panic!("{other:?}"),
    };
    let udp_announce = |connection_id: ConnectionId, hash: InfoHash| {
        let packet = udp_announce(connection_id, 2, hash, 1111, AnnounceEvent::Started, 0);
        match UdpResponse::parse(&exchange(&packet), IpFamily::V4).unwrap() {
            UdpResponse::Announce {
                seeders,
                leechers,
                peers,
                ..
            } => (seeders, leechers, peers.iter().collect::<Vec<SocketAddr>>()),
            other => panic!("{other:?}"),
        }
    };
    for owner in 0..2 {
        let hash = hash_owned_by(owner, 2, 3000);
        let (seeders, _, peers) = udp_announce(connection_id, hash);
        assert_eq!((seeders, peers.len()), (1, 0));
        let mut https = Client::connect(&tracker, Proto::Https, 0);
        let answer = https.get(&announce(hash, 2222, 10));
        assert_eq!(
            answer.peers(),
            [addr("127.0.0.1:1111")],
            "HTTPS sees the UDP peer"
        );
        assert_eq!((answer.int(b"complete"), answer.int(b"incomplete")), (1, 1));
        let (seeders, leechers, peers) = udp_announce(connection_id, hash);
        assert_eq!((seeders, leechers), (1, 1));
        assert_eq!(peers, [addr("127.0.0.1:2222")], "UDP sees the HTTPS peer");
    }
}

#[test]
fn start_up_errors_are_clear() {
    // An HTTPS port in use.
    let holder = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let (code, err) = Tracker::builder()
        .https(Some(holder.local_addr().unwrap()))
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(1));
    assert!(err.contains("HTTPS") && err.contains("in use"), "{err}");
    // Certificate files that cannot be read.
    let (code, err) = Tracker::builder()
        .http(None)
        .arg("--https")
        .arg("127.0.0.1:0")
        .arg("--tls-cert")
        .arg("/nonexistent/cert.pem")
        .arg("--tls-key")
        .arg("/nonexistent/key.pem")
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(1));
    assert!(err.contains("/nonexistent/cert.pem"), "{err}");
    // A key without a certificate is a usage error.
    let (code, err) = Tracker::builder()
        .http(None)
        .arg("--tls-key")
        .arg("/tmp/key.pem")
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(2));
    assert!(err.contains("--tls-cert"), "{err}");
}
