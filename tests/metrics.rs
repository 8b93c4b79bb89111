//! The Prometheus endpoint end to end: the real binary with two workers,
//! scraped before and after traffic on UDP, HTTP and HTTPS; the text must be
//! well-formed and the counters and gauges must move by exactly what was sent.

mod support;

use std::collections::{HashMap, HashSet};
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::{Duration, Instant};

use support::owner_of;
use support::wire::{announce_request, target, udp_announce, udp_connect_packet};
use support::{free_port, Tracker};
use tracker_proto::http::write_scrape_target;
use tracker_proto::udp::{ConnectionId, IpFamily, Response, TransactionId};
use tracker_proto::{AnnounceEvent, InfoHash};

/// One sample: its family, its labels other than `worker`, its worker.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
struct Series {
    name: String,
    labels: Vec<(String, String)>,
    worker: usize,
}

/// A scrape, checked for format on parsing.
struct Scrape(HashMap<Series, u64>);

impl Scrape {
    /// Parses the text format 0.0.4 as the tracker writes it, and checks that
    /// every family has one HELP and one TYPE before its samples, that its
    /// samples are together, and that no series repeats.
    fn parse(text: &str) -> Scrape {
        let mut samples = HashMap::new();
        let mut seen_families: HashSet<String> = HashSet::new();
        let mut current: Option<String> = None;
        let mut typed = false;
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let (name, help) = rest.split_once(' ').expect("HELP name text");
                assert!(!help.is_empty(), "{line}");
                assert!(seen_families.insert(name.into()), "second HELP: {line}");
                current = Some(name.into());
                typed = false;
                continue;
            }
            if let Some(rest) = line.strip_prefix("# TYPE ") {
                let (name, kind) = rest.split_once(' ').expect("TYPE name kind");
                assert_eq!(Some(name), current.as_deref(), "TYPE after its HELP");
                assert!(!typed, "second TYPE: {line}");
                assert!(kind == "counter" || kind == "gauge", "{line}");
                assert_eq!(name.ends_with("_total"), kind == "counter", "{line}");
                typed = true;
                continue;
            }
            assert!(!line.starts_with('#'), "unknown comment: {line}");
            let (series, value) = line.rsplit_once(' ').expect("name{labels} value");
            let value: u64 = value.parse().unwrap_or_else(|_| panic!("value: {line}"));
            let (name, labels) = series.split_once('{').expect("labels");
            let labels = labels.strip_suffix('}').expect("closing brace");
            assert!(
                name.starts_with("tracker_")
                    && name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{line}"
            );
            assert_eq!(Some(name), current.as_deref(), "sample outside its family");
            assert!(typed, "sample before TYPE: {line}");
            let mut labels: Vec<(String, String)> = labels
                .split(',')
                .map(|pair| {
                    let (k, v) = pair.split_once('=').expect("label=value");
                    let v = v.strip_prefix('"').and_then(|v| v.strip_suffix('"'));
                    (k.to_string(), v.expect("quoted value").to_string())
                })
                .collect();
            let (key, worker) = labels.remove(0);
            assert_eq!(key, "worker", "worker is the first label: {line}");
            let series = Series {
                name: name.into(),
                labels,
                worker: worker.parse().expect("worker index"),
            };
            assert!(samples.insert(series, value).is_none(), "repeated: {line}");
        }
        Scrape(samples)
    }

    /// The sum over workers of the samples of `name` that carry `labels`.
    fn sum(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels).map(|(_, v)| v).sum()
    }

    /// The value of worker `worker`'s samples of `name` with `labels`.
    fn of(&self, worker: usize, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(name, labels)
            .filter(|(s, _)| s.worker == worker)
            .map(|(_, v)| v)
            .sum()
    }

    fn matching<'a>(
        &'a self,
        name: &'a str,
        labels: &'a [(&str, &str)],
    ) -> impl Iterator<Item = (&'a Series, u64)> + 'a {
        self.0
            .iter()
            .filter(move |(s, _)| {
                s.name == name
                    && labels
                        .iter()
                        .all(|(k, v)| s.labels.iter().any(|(sk, sv)| sk == k && sv == v))
            })
            .map(|(s, v)| (s, *v))
    }

    fn workers(&self) -> HashSet<usize> {
        self.0.keys().map(|s| s.worker).collect()
    }
}

/// One request on a new connection: status and the whole answer.
fn http_once(addr: SocketAddr, request: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    stream.read_to_string(&mut answer).unwrap();
    let status = answer
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| panic!("no status in {answer:?}"));
    (status, answer)
}

/// Scrapes until `ready` holds for a well-formed scrape (gauges settle a
/// moment after the client's side of a connection closes).
fn scrape_when(addr: SocketAddr, ready: impl Fn(&Scrape) -> bool) -> Scrape {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        let (status, answer) = http_once(addr, "GET /metrics HTTP/1.1\r\nHost: m\r\n\r\n");
        assert_eq!(status, 200, "{answer}");
        let (head, body) = answer.split_once("\r\n\r\n").unwrap();
        assert!(
            head.contains("Content-Type: text/plain; version=0.0.4"),
            "{head}"
        );
        let scrape = Scrape::parse(body);
        if ready(&scrape) {
            return scrape;
        }
        assert!(Instant::now() < deadline, "metrics never got ready");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A blocking keep-alive HTTP/1.1 exchange on `stream`: the answer's body.
fn exchange(stream: &mut impl ReadWrite, target: &[u8]) -> Vec<u8> {
    let mut request = b"GET ".to_vec();
    request.extend_from_slice(target);
    request.extend_from_slice(b" HTTP/1.1\r\nHost: t\r\n\r\n");
    stream.write_all(&request).unwrap();
    stream.flush().unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let n = stream.read(&mut buf).unwrap();
        assert!(n > 0, "closed before the answer");
        got.extend_from_slice(&buf[..n]);
        let mut headers = [httparse::EMPTY_HEADER; 16];
        let mut parsed = httparse::Response::new(&mut headers);
        if let httparse::Status::Complete(head) = parsed.parse(&got).unwrap() {
            assert_eq!(parsed.code, Some(200));
            let length: usize = parsed
                .headers
                .iter()
                .find(|h| h.name.eq_ignore_ascii_case("content-length"))
                .map(|h| std::str::from_utf8(h.value).unwrap().parse().unwrap())
                .expect("Content-Length");
            if got.len() >= head + length {
                return got[head..head + length].to_vec();
            }
        }
    }
}

trait ReadWrite: Read + Write {}
impl<T: Read + Write> ReadWrite for T {}

fn udp_exchange(sock: &UdpSocket, to: SocketAddr, packet: &[u8]) -> Vec<u8> {
    sock.send_to(packet, to).unwrap();
    let mut buf = [0u8; 2048];
    let (n, _) = sock.recv_from(&mut buf).expect("a UDP answer");
    buf[..n].to_vec()
}

#[test]
fn metrics_endpoint_content_and_counters_moving() {
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let tracker = Tracker::builder()
        .udp(None)
        .http(None)
        .https(None)
        .arg("--metrics")
        .arg(&metrics.to_string())
        .start();

    // Start-up probes may still hold connections for a moment.
    let before = scrape_when(metrics, |s| s.sum("tracker_open_connections", &[]) == 0);
    assert_eq!(before.workers(), HashSet::from([0, 1]));
    assert_eq!(before.sum("tracker_torrents", &[]), 0);

    let hash = InfoHash([7; 20]);
    let owner = owner_of(&hash, 2);

    // UDP: a connect, an announce as a seeder (no peers yet: a 20-byte
    // answer), and an announce with a connection id never issued.
    let udp = UdpSocket::bind("127.0.0.1:0").unwrap();
    udp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let packet = udp_connect_packet(TransactionId(1));
    assert_eq!(packet.len(), 16);
    let answer = udp_exchange(&udp, tracker.udp[0], &packet);
    let Ok(Response::Connect { connection_id, .. }) = Response::parse(&answer, IpFamily::V4) else {
        panic!("no connect answer: {answer:?}");
    };
    let announce =
        |connection_id| udp_announce(connection_id, 2, hash, 6881, AnnounceEvent::Started, 0);
    let packet = announce(connection_id);
    assert_eq!(packet.len(), 98);
    let answer = udp_exchange(&udp, tracker.udp[0], &packet);
    assert_eq!(answer.len(), 20, "an announce answer without peers");
    // Same source, so the same worker's socket: the connect answered after it
    // shows the bad announce was handled.
    udp.send_to(&announce(ConnectionId(12345)), tracker.udp[0])
        .unwrap();
    udp_exchange(&udp, tracker.udp[0], &udp_connect_packet(TransactionId(3)));

    // HTTP: an announce as a leecher, on a connection kept open.
    let target = target(&announce_request(hash, 6882, 100, AnnounceEvent::Started));
    let mut http = TcpStream::connect(tracker.http[0]).unwrap();
    http.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let body = exchange(&mut http, target.as_bytes());
    assert!(body.windows(5).any(|w| w == b"peers"), "{body:?}");

    // HTTPS: a scrape, on a connection kept open.
    let cert = &tracker.tls.as_ref().unwrap().cert;
    let name = rustls::pki_types::ServerName::from(tracker.https[0].ip());
    let conn = rustls::ClientConnection::new(cert.client_config(), name).unwrap();
    let tcp = TcpStream::connect(tracker.https[0]).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut https = rustls::StreamOwned::new(conn, tcp);
    let mut target = Vec::new();
    write_scrape_target(&mut target, &[hash]);
    let body = exchange(&mut https, &target);
    assert!(body.starts_with(b"d5:filesd20:"), "{body:?}");

    let after = scrape_when(metrics, |s| s.sum("tracker_open_connections", &[]) == 2);
    let moved = |name: &str, labels: &[(&str, &str)]| {
        let (a, b) = (after.sum(name, labels), before.sum(name, labels));
        assert!(a >= b, "{name} {labels:?} went down");
        a - b
    };
    let v4 = ("family", "ipv4");
    let (udp_l, http_l, https_l) = (
        ("protocol", "udp"),
        ("protocol", "http"),
        ("protocol", "https"),
    );
    for (protocol, action, n) in [
        (udp_l, "connect", 2),
        (udp_l, "announce", 1),
        (udp_l, "scrape", 0),
        (http_l, "announce", 1),
        (http_l, "scrape", 0),
        (https_l, "announce", 0),
        (https_l, "scrape", 1),
    ] {
        let labels = [protocol, ("action", action), v4];
        assert_eq!(moved("tracker_requests_total", &labels), n, "{labels:?}");
        assert_eq!(moved("tracker_responses_total", &labels), n, "{labels:?}");
    }
    assert_eq!(
        after.sum("tracker_requests_total", &[("family", "ipv6")]),
        0,
        "all traffic was IPv4"
    );
    // Payloads: 16 + 98 + 98 + 16 in, 16 + 20 + 16 out.
    assert_eq!(moved("tracker_received_bytes_total", &[udp_l]), 228);
    assert_eq!(moved("tracker_sent_bytes_total", &[udp_l]), 52);
    for protocol in [http_l, https_l] {
        assert!(moved("tracker_received_bytes_total", &[protocol]) > 0);
        assert!(moved("tracker_sent_bytes_total", &[protocol]) > 0);
        assert_eq!(moved("tracker_connections_accepted_total", &[protocol]), 1);
        assert_eq!(after.sum("tracker_open_connections", &[protocol]), 1);
    }
    assert_eq!(
        moved("tracker_udp_errors_total", &[("kind", "bad_connection_id")]),
        1
    );
    assert_eq!(moved("tracker_udp_errors_total", &[]), 1);
    assert_eq!(moved("tracker_http_errors_total", &[]), 0);
    assert_eq!(moved("tracker_tls_handshakes_total", &[]), 1);
    assert_eq!(moved("tracker_tls_handshake_failures_total", &[]), 0);

    // The swarm lives on its owner only: one seeder (UDP), one leecher (HTTP).
    for worker in [0, 1] {
        let mine = u64::from(worker == owner);
        assert_eq!(after.of(worker, "tracker_torrents", &[]), mine);
        let seeders = after.of(worker, "tracker_peers", &[("role", "seeder")]);
        let leechers = after.of(worker, "tracker_peers", &[("role", "leecher")]);
        assert_eq!((seeders, leechers), (mine, mine), "worker {worker}");
    }
    // Every request sent to an owner was served by it; scrapes of the
    // metrics themselves are not counted as forwarded.
    assert_eq!(
        after.sum("tracker_mesh_forwarded_total", &[]),
        after.sum("tracker_mesh_served_total", &[])
    );
    assert_eq!(after.sum("tracker_mesh_overloaded_total", &[]), 0);

    // Other paths and methods.
    let (status, _) = http_once(metrics, "GET /other HTTP/1.1\r\n\r\n");
    assert_eq!(status, 404);
    let (status, answer) = http_once(metrics, "POST /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, 405, "{answer}");
    let (status, answer) = http_once(metrics, "HEAD /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(status, 200);
    assert!(answer.ends_with("\r\n\r\n"), "HEAD has no body: {answer}");
    drop((http, https));
}

#[test]
fn announces_for_other_workers_past_max_forwarded_are_dropped_and_counted() {
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    // One request may wait on another worker: while a batch waits, the next
    // one for that worker is refused. Without steering, so that announces
    // land on either worker and half of them are forwarded.
    let tracker = Tracker::builder()
        .config("[runtime]\nmax_forwarded = 1\n[udp]\nsteering = false\n")
        .udp(None)
        .arg("--metrics")
        .arg(&metrics.to_string())
        .start();
    let mut load = support::small_load(tracker.udp[0].to_string());
    load.udp.sources_per_worker = 8;
    load.udp.in_flight = Some(16);
    let summary = load_test::udp::run(&load).expect("load-test udp");
    let text = summary.to_text();
    assert_eq!(summary.invalid, 0, "{text}");

    let after = scrape_when(metrics, |_| true);
    let dropped = after.sum("tracker_udp_errors_total", &[("kind", "overloaded")]);
    assert!(dropped > 0, "no batch was refused: {text}");
    assert_eq!(after.sum("tracker_mesh_overloaded_total", &[]), dropped);
    assert_eq!(summary.timeouts, dropped, "{text}");
    assert_eq!(
        after.sum("tracker_mesh_forwarded_total", &[]),
        after.sum("tracker_mesh_served_total", &[])
    );
    assert_eq!(after.sum("tracker_panics_total", &[]), 0);
}

#[test]
fn a_metrics_port_in_use_is_a_clear_error() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let (code, err) = Tracker::builder()
        .udp(None)
        .arg("--metrics")
        .arg(&addr.to_string())
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot bind metrics {addr}")) && err.contains("--metrics"),
        "{err}"
    );
}

#[test]
fn silent_scrapers_make_room_and_are_timed_out() {
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()));
    let _tracker = Tracker::builder()
        .udp(None)
        .config("[metrics]\nmax_connections = 1\ntimeout_secs = 1\n")
        .arg("--metrics")
        .arg(&metrics.to_string())
        .start();
    scrape_when(metrics, |_| true);
    let started = Instant::now();
    let mut silent = TcpStream::connect(metrics).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let mut rest = Vec::new();
    // Cut, it is reset, not closed gracefully (tracker-http/src/linger.rs).
    let reset = |silent: &mut TcpStream, rest: &mut Vec<u8>| {
        let end = silent.read_to_end(rest).map_err(|e| e.kind());
        assert_eq!(end, Err(std::io::ErrorKind::ConnectionReset));
    };
    // Alone, it is cut after timeout_secs.
    reset(&mut silent, &mut rest);
    let waited = started.elapsed();
    assert!(
        waited >= Duration::from_millis(900) && waited < Duration::from_secs(4),
        "{waited:?}"
    );
    // With the only slot taken by a silent one, a scrape is served at once
    // and the silent one closed to make room.
    let mut silent = TcpStream::connect(metrics).unwrap();
    silent
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    // Let worker 0 accept it before the next one arrives.
    std::thread::sleep(Duration::from_millis(200));
    let started = Instant::now();
    scrape_when(metrics, |_| true);
    assert!(started.elapsed() < Duration::from_millis(900));
    reset(&mut silent, &mut rest);
    assert!(started.elapsed() < Duration::from_millis(900));
}
