//! Hostile clients, on loopback: each test is an attack that held a resource
//! of the tracker (a connection slot, a swarm, a log line) before the limit
//! it checks was there. Limits are small and timeouts short in these configs,
//! so that every test ends in seconds.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream, UdpSocket};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::wire::{http_announce_target, http_get_ok, udp_announce, udp_connect};
use support::{closed, tcp_from, Tracker};
use tracker_proto::http::bencode::{decode, Value};
use tracker_proto::{AnnounceEvent, InfoHash};

fn ip(text: &str) -> IpAddr {
    text.parse().unwrap()
}

/// One announce over plain HTTP from `from`, on a new connection: its status.
fn announce_from(from: IpAddr, addr: SocketAddr, port: u16) -> Option<u16> {
    let mut tcp = tcp_from(from, addr);
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let target = http_announce_target(InfoHash([7; 20]), port);
    let request = format!("GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).ok()?;
    std::str::from_utf8(answer.get(9..12)?).ok()?.parse().ok()
}

/// Waits until the tracker counts `want` of a metric (counters settle a moment
/// after the event that a client sees).
fn wait_for_metric(tracker: &Tracker, name: &str, labels: &[(&str, &str)], want: u64) -> u64 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let got = tracker.metric(name, labels);
        if got >= want || Instant::now() > deadline {
            return got;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

// 1. Slow clients and connection slots.

/// A request head sent as one TLS record, the record dribbled a byte at a
/// time: no plaintext ever reaches the server until the record is whole, and
/// glommio's per-read timeout restarted on every byte.
#[test]
fn a_tls_record_dribbled_a_byte_at_a_time_is_cut_at_its_deadline() {
    let tracker = Tracker::builder()
        .config("[http]\nidle_timeout_secs = 2\n")
        .https(None)
        .metrics()
        .start();
    let addr = tracker.https[0];
    let config = tracker.tls.as_ref().unwrap().cert.client_config();
    let name = rustls::pki_types::ServerName::from(addr.ip());
    let mut conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    while conn.is_handshaking() {
        conn.complete_io(&mut tcp).unwrap();
    }
    let target = http_announce_target(InfoHash([3; 20]), 6881);
    write!(
        conn.writer(),
        "GET {target} HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        "a".repeat(200)
    )
    .unwrap();
    let mut record = Vec::new();
    while conn.wants_write() {
        conn.write_tls(&mut record).unwrap();
    }
    let start = Instant::now();
    let mut cut = None;
    // A byte every 250 ms: 15 s for the whole record, were it let.
    for byte in &record[..record.len() - 1] {
        if tcp.write_all(&[*byte]).is_err() || closed(&mut tcp, Duration::from_millis(250)) {
            cut = Some(start.elapsed());
            break;
        }
    }
    let cut = cut.unwrap_or_else(|| panic!("still open after {:?}", start.elapsed()));
    assert!(
        cut >= Duration::from_millis(1500) && cut < Duration::from_secs(5),
        "cut after {cut:?}"
    );
    let timeouts = wait_for_metric(
        &tracker,
        "tracker_http_errors_total",
        &[("kind", "idle_timeout")],
        1,
    );
    assert_eq!(timeouts, 1);
}

/// A request dribbled as plaintext over TLS, a byte per record: the head's
/// deadline counts from its first byte.
#[test]
fn a_head_dribbled_after_the_tls_handshake_is_cut_at_the_request_timeout() {
    let tracker = Tracker::builder()
        .config("[http]\nidle_timeout_secs = 30\nrequest_timeout_secs = 2\n")
        .https(None)
        .metrics()
        .start();
    let addr = tracker.https[0];
    let config = tracker.tls.as_ref().unwrap().cert.client_config();
    let name = rustls::pki_types::ServerName::from(addr.ip());
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).unwrap();
    }
    let request = format!(
        "GET {} HTTP/1.1\r\nX-Pad: {}\r\n\r\n",
        http_announce_target(InfoHash([3; 20]), 6881),
        "a".repeat(100)
    );
    let start = Instant::now();
    let mut cut = None;
    for byte in request.as_bytes() {
        if tls.write_all(&[*byte]).and_then(|()| tls.flush()).is_err() {
            cut = Some(start.elapsed());
            break;
        }
        let mut buf = [0u8; 256];
        match tls.read(&mut buf) {
            Ok(0) => {
                cut = Some(start.elapsed());
                break;
            }
            Err(e) if !matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {
                cut = Some(start.elapsed());
                break;
            }
            _ => {}
        }
    }
    let cut = cut.unwrap_or_else(|| panic!("still open after {:?}", start.elapsed()));
    assert!(
        cut >= Duration::from_millis(1500) && cut < Duration::from_secs(5),
        "cut after {cut:?}"
    );
    let timeouts = wait_for_metric(
        &tracker,
        "tracker_http_errors_total",
        &[("kind", "request_timeout")],
        1,
    );
    assert_eq!(timeouts, 1);
}

/// A scrape of 128 info-hashes, with `connection` as its Connection header.
fn big_scrape(connection: &str) -> String {
    let hashes: Vec<InfoHash> = (0..128u8).map(|i| InfoHash([i; 20])).collect();
    let mut target = Vec::new();
    tracker_proto::http::write_scrape_target(&mut target, &hashes);
    format!(
        "GET {} HTTP/1.1\r\nConnection: {connection}\r\n\r\n",
        String::from_utf8(target).unwrap()
    )
}

/// Pipelines scrapes until the tracker stops reading them: its answers fill
/// every buffer on the way back.
fn fill_the_pipeline(stream: &mut impl Write, tcp: &TcpStream) {
    let request = big_scrape("keep-alive");
    tcp.set_write_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    // Until a write waits half a second: the tracker no longer reads.
    let mut sent = 0;
    while sent < 2000 && stream.write_all(request.as_bytes()).is_ok() && stream.flush().is_ok() {
        sent += 1;
    }
    assert!(sent > 100, "only {sent} requests went out");
}

/// Pipelines scrapes until the tracker stops reading them (its answers fill
/// every buffer on the way back), then reads the answers at 16 KiB a second,
/// 4 KiB at a time: the tracker's writes go on making progress (which
/// restarted glommio's per-write timeout), but no batch of answers is taken
/// whole in time. Returns when the connection ends or after `seconds`.
fn read_slowly(mut stream: impl Read + Write, tcp: &TcpStream, seconds: u64) -> Duration {
    fill_the_pipeline(&mut stream, tcp);
    tcp.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let start = Instant::now();
    let mut buf = [0u8; 4096];
    while start.elapsed() < Duration::from_secs(seconds) {
        let mut got = 0;
        while got < buf.len() {
            match stream.read(&mut buf[got..]) {
                Ok(0) | Err(_) => return start.elapsed(),
                Ok(n) => got += n,
            }
        }
        std::thread::sleep(Duration::from_millis(250));
    }
    start.elapsed()
}

#[test]
fn a_client_that_takes_its_answers_slowly_is_cut_at_the_write_timeout() {
    let tracker = Tracker::builder()
        .config(
            "[http]\nwrite_timeout_secs = 2\nmax_requests_per_connection = 100000\n\
             idle_timeout_secs = 60\nrequest_timeout_secs = 60\n",
        )
        .http(None)
        .https(None)
        .metrics()
        .start();
    let open = |protocol| tracker.metric("tracker_open_connections", &[("protocol", protocol)]);
    // Plain HTTP.
    let tcp = TcpStream::connect(tracker.http[0]).unwrap();
    let plain = tcp.try_clone().unwrap();
    read_slowly(plain, &tcp, 12);
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_http_errors_total",
            &[("kind", "write_timeout")],
            1
        ),
        1
    );
    assert_eq!(open("http"), 0, "the slow reader still holds its slot");
    drop(tcp);

    // HTTPS.
    let addr = tracker.https[0];
    let config = tracker.tls.as_ref().unwrap().cert.client_config();
    let name = rustls::pki_types::ServerName::from(addr.ip());
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp.try_clone().unwrap());
    while tls.conn.is_handshaking() {
        tls.conn.complete_io(&mut tls.sock).unwrap();
    }
    read_slowly(tls, &tcp, 12);
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_http_errors_total",
            &[("kind", "write_timeout")],
            2
        ),
        2
    );
    assert_eq!(open("https"), 0, "the slow reader still holds its slot");
}

/// The state (as /proc/net/tcp numbers them: 1 established, 4 FIN_WAIT1,
/// ...) and the bytes in the send queue of the kernel's IPv4 TCP socket from
/// `local` to `remote`; None when the kernel holds none.
fn kernel_socket(local: SocketAddr, remote: SocketAddr) -> Option<(u8, u64)> {
    // "0100007F:1A0B": the address as the kernel's u32 in hex (so its bytes
    // in memory order), the port in hex.
    let addr = |text: &str| {
        let (ip, port) = text.split_once(':')?;
        let ip = u32::from_str_radix(ip, 16).ok()?.to_le_bytes();
        Some(SocketAddr::from((ip, u16::from_str_radix(port, 16).ok()?)))
    };
    let table = std::fs::read_to_string("/proc/net/tcp").unwrap();
    table.lines().skip(1).find_map(|line| {
        let fields: Vec<&str> = line.split_whitespace().collect();
        if addr(fields[1]) != Some(local) || addr(fields[2]) != Some(remote) {
            return None;
        }
        let state = u8::from_str_radix(fields[3], 16).unwrap();
        let (queued, _) = fields[4].split_once(':').unwrap();
        Some((state, u64::from_str_radix(queued, 16).unwrap()))
    })
}

/// Reads what reached the client until the connection ends: Ok(the bytes)
/// for an orderly close (EOF), Err(how it ended) for a reset, or TimedOut
/// when it has not ended within `wait`.
fn read_to_the_end(tcp: &mut TcpStream, wait: Duration) -> Result<usize, ErrorKind> {
    let deadline = Instant::now() + wait;
    let mut buf = [0u8; 16 << 10];
    let mut total = 0;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        tcp.set_read_timeout(Some(left.max(Duration::from_millis(1))))
            .unwrap();
        match tcp.read(&mut buf) {
            Ok(0) => return Ok(total),
            Ok(n) => total += n,
            Err(e) if e.kind() == ErrorKind::WouldBlock => return Err(ErrorKind::TimedOut),
            Err(e) => return Err(e.kind()),
        }
    }
}

/// Creates `n` torrents through `addr`, over one plain HTTP connection.
fn create_torrents_over_http(addr: SocketAddr, n: u32) {
    let mut requests = String::new();
    for i in 0..n {
        let mut hash = [0x77; 20];
        hash[..4].copy_from_slice(&i.to_be_bytes());
        let connection = if i + 1 == n { "close" } else { "keep-alive" };
        let target = http_announce_target(InfoHash(hash), 6881);
        requests.push_str(&format!(
            "GET {target} HTTP/1.1\r\nConnection: {connection}\r\n\r\n"
        ));
    }
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    // The answers are small: they fit the buffers while the requests go out.
    tcp.write_all(requests.as_bytes()).unwrap();
    let mut answers = Vec::new();
    tcp.read_to_end(&mut answers).unwrap();
    let created = answers.windows(12).filter(|w| w == b"HTTP/1.1 200").count();
    assert_eq!(created, n as usize);
}

/// A TCP connection to `to` whose receive buffer is as small as the kernel
/// allows: what the tracker writes and it does not read stays on the
/// tracker's side.
fn tcp_small_window(to: SocketAddr) -> TcpStream {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(1).unwrap();
    socket.connect(&to.into()).unwrap();
    socket.into()
}

/// A slow reader cut at the write timeout is reset, not closed: a graceful
/// close would leave the kernel feeding it every answer still queued (in
/// FIN_WAIT1) for as long as it reads a trickle, long after the deadline, and
/// many such clients would hold the host's memory without bound. (Full
/// scrapes, so that a few bytes of requests, read whole by the tracker, ask
/// for megabytes: unread requests would make the kernel reset at any close.)
#[test]
fn a_slow_reader_cut_at_the_write_timeout_leaves_nothing_in_the_kernel() {
    let tracker = Tracker::builder()
        .config(
            "[http]\nwrite_timeout_secs = 2\nfull_scrape = true\n\
             [swarm]\nnew_torrents_per_address_per_minute = 0\n",
        )
        .http(None)
        .https(None)
        .metrics()
        .start();
    create_torrents_over_http(tracker.http[0], 1000);
    // 40 full scrapes of some 70 KB each: more than the buffers on the way.
    let requests = "GET /scrape HTTP/1.1\r\n\r\n".repeat(40);
    // Reads 1 KiB every 250 ms until the tracker counts its `n`th cut; true
    // when a read saw the reset meanwhile.
    let read_until_cut = |tcp: &mut TcpStream, n| {
        let deadline = Instant::now() + Duration::from_secs(10);
        let mut buf = [0u8; 1024];
        tcp.set_read_timeout(Some(Duration::from_millis(250)))
            .unwrap();
        let mut reset = false;
        while tracker.metric("tracker_http_errors_total", &[("kind", "write_timeout")]) < n {
            assert!(Instant::now() < deadline, "never cut");
            if let Err(e) = tcp.read(&mut buf) {
                reset |= e.kind() == ErrorKind::ConnectionReset;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        reset
    };
    let check = |mut tcp: TcpStream, server: SocketAddr, reset: bool| {
        let client = tcp.local_addr().unwrap();
        // Its kernel socket is gone (a reset frees it at once), not left
        // holding the answers.
        let deadline = Instant::now() + Duration::from_secs(2);
        let mut held = kernel_socket(server, client);
        while held.is_some() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            held = kernel_socket(server, client);
        }
        assert_eq!(held, None, "the kernel holds (state, bytes queued) for it");
        // The client reads what reached it, and learns of the reset.
        let end = read_to_the_end(&mut tcp, Duration::from_secs(5));
        assert!(reset || end == Err(ErrorKind::ConnectionReset), "{end:?}");
    };

    // Plain HTTP.
    let mut tcp = tcp_small_window(tracker.http[0]);
    tcp.write_all(requests.as_bytes()).unwrap();
    let reset = read_until_cut(&mut tcp, 1);
    check(tcp, tracker.http[0], reset);

    // HTTPS.
    let addr = tracker.https[0];
    let config = tracker.tls.as_ref().unwrap().cert.client_config();
    let name = rustls::pki_types::ServerName::from(addr.ip());
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut tcp = tcp_small_window(addr);
    let mut tls = rustls::StreamOwned::new(conn, tcp.try_clone().unwrap());
    tls.write_all(requests.as_bytes()).unwrap();
    tls.flush().unwrap();
    // The TLS stream's reads are the raw bytes from here on.
    let reset = read_until_cut(&mut tcp, 2);
    check(tcp, addr, reset);
}

/// A connection the tracker closes after a last answer (Connection: close)
/// is closed gracefully, over HTTP and HTTPS, and so is a scrape of the
/// metrics: a client that reads late gets every answer whole and an orderly
/// end, where a reset would drop what the kernel still held for it.
#[test]
fn a_normal_close_delivers_the_last_answers_to_a_late_reader() {
    let tracker = Tracker::builder().http(None).https(None).metrics().start();
    // Ten answers of some 10 KiB each, the last one closing, to a client
    // whose small window leaves most of them in the tracker's kernel: the
    // tracker writes them all and closes (lingers a second, then lets go)
    // before the client reads anything.
    let mut requests = big_scrape("keep-alive").repeat(9);
    requests.push_str(&big_scrape("close"));
    let wait = Duration::from_millis(1500);
    let answers = |text: &[u8]| text.windows(12).filter(|w| w == b"HTTP/1.1 200").count();

    let mut tcp = tcp_small_window(tracker.http[0]);
    tcp.write_all(requests.as_bytes()).unwrap();
    std::thread::sleep(wait);
    let mut got = Vec::new();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    tcp.read_to_end(&mut got).expect("an orderly end");
    assert_eq!(answers(&got), 10);

    let addr = tracker.https[0];
    let config = tracker.tls.as_ref().unwrap().cert.client_config();
    let name = rustls::pki_types::ServerName::from(addr.ip());
    let conn = rustls::ClientConnection::new(config, name).unwrap();
    let tcp = tcp_small_window(addr);
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, tcp);
    tls.write_all(requests.as_bytes()).unwrap();
    tls.flush().unwrap();
    std::thread::sleep(wait);
    let mut got = Vec::new();
    tls.read_to_end(&mut got).expect("an orderly end");
    assert_eq!(answers(&got), 10);

    let mut tcp = tcp_small_window(tracker.metrics.unwrap());
    tcp.write_all(b"GET /metrics HTTP/1.1\r\n\r\n").unwrap();
    std::thread::sleep(wait);
    let mut got = Vec::new();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    tcp.read_to_end(&mut got).expect("an orderly end");
    let text = String::from_utf8(got).unwrap();
    let (head, body) = text.split_once("\r\n\r\n").unwrap();
    let length = head
        .lines()
        .find_map(|l| l.strip_prefix("Content-Length: "))
        .unwrap();
    assert_eq!(body.len().to_string(), length);
}

/// Connections cut for a limit or a deadline are reset too: a scrape of the
/// metrics that never sends its request, at the endpoint's timeout.
#[test]
fn a_silent_metrics_scraper_is_reset_at_the_timeout() {
    let tracker = Tracker::builder()
        .config("[metrics]\ntimeout_secs = 1\n")
        .udp(None)
        .metrics()
        .start();
    let mut tcp = TcpStream::connect(tracker.metrics.unwrap()).unwrap();
    tcp.write_all(b"GET /metr").unwrap();
    assert_eq!(
        read_to_the_end(&mut tcp, Duration::from_secs(5)),
        Err(ErrorKind::ConnectionReset)
    );
}

#[test]
fn one_address_cannot_take_every_connection_slot() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config("[http]\nmax_connections_per_worker = 20\nmax_connections_per_address = 5\n")
        .http(None)
        .metrics()
        .start();
    let addr = tracker.http[0];
    let attacker = ip("127.0.0.2");
    let mut held: Vec<TcpStream> = (0..40).map(|_| tcp_from(attacker, addr)).collect();
    // Past its five, each is closed at once.
    let mut open = 0;
    for tcp in held.iter_mut() {
        open += usize::from(!closed(tcp, Duration::from_millis(300)));
    }
    assert_eq!(open, 5);
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_http_errors_total",
            &[("kind", "address_limit")],
            35
        ),
        35
    );
    // Everyone else is served meanwhile.
    for n in 0..5 {
        assert_eq!(announce_from(ip("127.0.0.3"), addr, 7000 + n), Some(200));
    }
}

/// Whether `tcp` was refused (reset at once, as every connection cut for a
/// limit is) rather than admitted (left open, waiting for a request).
fn refused(mut tcp: &TcpStream) -> bool {
    tcp.set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    match tcp.read(&mut [0u8; 64]) {
        Err(e) if e.kind() == ErrorKind::ConnectionReset => true,
        Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => false,
        other => panic!("neither open nor reset: {other:?}"),
    }
}

/// Addresses of one network share its budget of slots: a /24 (an IPv6 /56)
/// and a /16 (an IPv6 /48) hold at most their caps however many addresses
/// they use, so that an attacker with a /48 cannot take every slot with
/// half-sent heads, while clients of other networks are served.
#[test]
fn one_network_cannot_take_every_connection_slot_with_many_addresses() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config(
            "[http]\nmax_connections_per_worker = 100\nmax_connections_per_address = 4\n\
             max_connections_per_subnet = 8\nmax_connections_per_network = 12\n",
        )
        .http(None)
        .metrics()
        .start();
    let addr = tracker.http[0];
    let from = |ip: String| {
        let mut tcp = tcp_from(ip.parse().unwrap(), addr);
        // Busy: a head begun, so that none is idle to evict.
        tcp.write_all(b"GET /announce?info_hash=").unwrap();
        tcp
    };
    // Six addresses of 127.5.5.0/24, three connections each (under the cap
    // per address): the subnet holds its 8.
    let subnet: Vec<TcpStream> = (1..=6)
        .flat_map(|n| (0..3).map(move |_| format!("127.5.5.{n}")))
        .map(from)
        .collect();
    // Three addresses of another /24 of the same /16: the network's 12
    // leave it 4.
    let network: Vec<TcpStream> = (1..=3)
        .flat_map(|n| (0..3).map(move |_| format!("127.5.6.{n}")))
        .map(from)
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let open = |held: &[TcpStream]| held.iter().filter(|t| !refused(t)).count();
    assert_eq!(open(&subnet), 8);
    assert_eq!(open(&network), 4);
    let refusals = |level| {
        wait_for_metric(
            &tracker,
            "tracker_http_errors_total",
            &[("kind", "address_limit"), ("level", level)],
            1,
        )
    };
    assert_eq!(refusals("subnet"), 10);
    assert_eq!(refusals("network"), 5);
    // A client of another network is served; one of this network, from a
    // /24 of its own, is not, until the network's connections go.
    assert_eq!(announce_from(ip("127.6.0.1"), addr, 7200), Some(200));
    assert_eq!(announce_from(ip("127.5.9.1"), addr, 7201), None);
    drop(subnet);
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(announce_from(ip("127.5.9.1"), addr, 7202), Some(200));
}

/// `runtime.exempt_networks` (here `--exempt-network`) leaves a load test's
/// addresses out of the caps per address, subnet and network; the others
/// stay capped.
#[test]
fn exempt_networks_are_not_capped_per_address() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .arg("--exempt-network")
        .arg("127.5.0.0/16")
        .config("[http]\nmax_connections_per_address = 2\nmax_connections_per_network = 4\n")
        .http(None)
        .start();
    let addr = tracker.http[0];
    let exempt: Vec<TcpStream> = (0..10).map(|_| tcp_from(ip("127.5.5.1"), addr)).collect();
    let capped: Vec<TcpStream> = (0..10).map(|_| tcp_from(ip("127.6.6.1"), addr)).collect();
    std::thread::sleep(Duration::from_millis(300));
    let open = |held: &[TcpStream]| held.iter().filter(|t| !refused(t)).count();
    assert_eq!(open(&exempt), 10);
    assert_eq!(open(&capped), 2);
}

#[test]
fn a_full_worker_closes_its_longest_idle_connection_for_a_new_one() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config("[http]\nmax_connections_per_worker = 10\nmax_connections_per_address = 10\n")
        .http(None)
        .metrics()
        .start();
    let addr = tracker.http[0];
    let attacker = ip("127.0.0.2");
    let mut idle: Vec<TcpStream> = Vec::new();
    for _ in 0..10 {
        idle.push(tcp_from(attacker, addr));
        // In order: each is idle longer than the next.
        std::thread::sleep(Duration::from_millis(20));
    }
    // The worker is full of idle connections: a newcomer is served, and the
    // oldest idle connection makes room for it.
    assert_eq!(announce_from(ip("127.0.0.3"), addr, 7100), Some(200));
    assert!(
        closed(&mut idle[0], Duration::from_secs(2)),
        "the oldest stays"
    );
    assert!(
        idle[1..]
            .iter_mut()
            .all(|tcp| !closed(tcp, Duration::from_millis(10))),
        "a younger one was closed"
    );
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_http_errors_total",
            &[("kind", "evicted_idle")],
            1
        ),
        1
    );

    // Connections with a request under way are never evicted: with every
    // slot busy, a newcomer is refused.
    drop(idle);
    let mut busy: Vec<TcpStream> = (0..10)
        .map(|_| {
            let mut tcp = tcp_from(attacker, addr);
            tcp.write_all(b"GET /announce?info_hash=").unwrap();
            tcp
        })
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    let mut newcomer = tcp_from(ip("127.0.0.3"), addr);
    assert!(closed(&mut newcomer, Duration::from_secs(2)));
    assert!(busy
        .iter_mut()
        .all(|tcp| !closed(tcp, Duration::from_millis(10))));
    assert!(
        wait_for_metric(
            &tracker,
            "tracker_http_errors_total",
            &[("kind", "connection_limit")],
            1
        ) >= 1
    );
}

#[test]
fn idle_connections_cannot_deny_the_metrics_endpoint() {
    let tracker = Tracker::builder()
        .config(
            "[metrics]\nmax_connections = 4\nmax_connections_per_address = 2\ntimeout_secs = 30\n",
        )
        .udp(None)
        .metrics()
        .start();
    let metrics = tracker.metrics.unwrap();
    // Two addresses, two silent connections each: every slot.
    let mut silent: Vec<TcpStream> = ["127.0.0.2", "127.0.0.2", "127.0.0.3", "127.0.0.3"]
        .iter()
        .map(|from| tcp_from(ip(from), metrics))
        .collect();
    // A third from one of them is refused at once.
    let mut third = tcp_from(ip("127.0.0.2"), metrics);
    assert!(closed(&mut third, Duration::from_secs(2)));
    std::thread::sleep(Duration::from_millis(200));
    // A scrape is answered at once, not after the silent ones time out.
    let start = Instant::now();
    let evicted = tracker.metric(
        "tracker_metrics_endpoint_errors_total",
        &[("kind", "evicted_idle")],
    );
    assert!(
        start.elapsed() < Duration::from_secs(2),
        "{:?}",
        start.elapsed()
    );
    assert_eq!(evicted, 1);
    assert!(
        closed(&mut silent[0], Duration::from_secs(1)),
        "the oldest stays"
    );
    assert_eq!(
        tracker.metric(
            "tracker_metrics_endpoint_errors_total",
            &[("kind", "address_limit")]
        ),
        1
    );
}

// 3. The real-IP header is believed from trusted proxies only.

/// An announce over plain HTTP from `from` with `header`, on a new connection:
/// the compact peers of the answer.
fn announce_with_header(from: IpAddr, addr: SocketAddr, port: u16, header: &str) -> Vec<u8> {
    let mut tcp = tcp_from(from, addr);
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let target = http_announce_target(InfoHash([9; 20]), port);
    let request = format!("GET {target} HTTP/1.1\r\n{header}Connection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).unwrap();
    assert!(
        answer.starts_with(b"HTTP/1.1 200"),
        "{}",
        String::from_utf8_lossy(&answer)
    );
    let at = answer
        .windows(6)
        .position(|w| w == b"5:peer")
        .expect("peers");
    let body = &answer[at + 7..];
    let colon = body.iter().position(|&b| b == b':').unwrap();
    let len: usize = std::str::from_utf8(&body[..colon])
        .unwrap()
        .parse()
        .unwrap();
    body[colon + 1..colon + 1 + len].to_vec()
}

fn compact(addr: &str) -> Vec<u8> {
    let addr: std::net::SocketAddrV4 = addr.parse().unwrap();
    let mut out = addr.ip().octets().to_vec();
    out.extend_from_slice(&addr.port().to_be_bytes());
    out
}

#[test]
fn a_real_ip_header_from_anyone_but_a_trusted_proxy_is_ignored() {
    let tracker = Tracker::builder()
        .arg("--real-ip-header")
        .arg("X-Forwarded-For")
        .arg("--trusted-proxy")
        .arg("127.0.0.2/32")
        .http(None)
        .metrics()
        .start();
    let addr = tracker.http[0];
    // A client names a victim's address: it is stored at its own.
    let header = "X-Forwarded-For: 192.0.2.80\r\n";
    announce_with_header(ip("127.0.0.1"), addr, 443, header);
    // The proxy's word is taken.
    let proxied = "X-Forwarded-For: 198.51.100.7\r\n";
    let seen = announce_with_header(ip("127.0.0.2"), addr, 6881, proxied);
    assert_eq!(
        seen,
        compact("127.0.0.1:443"),
        "not the victim's 192.0.2.80:443"
    );
    let seen = announce_with_header(ip("127.0.0.3"), addr, 6882, "");
    let mut want = compact("127.0.0.1:443");
    want.extend(compact("198.51.100.7:6881"));
    let mut pairs: Vec<&[u8]> = seen.chunks(6).collect();
    pairs.sort();
    assert_eq!(pairs.concat(), want);
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_http_errors_total",
            &[("kind", "untrusted_real_ip")],
            1
        ),
        1
    );
}

#[test]
fn a_real_ip_header_without_trusted_proxies_is_refused_at_start() {
    let (code, err) = Tracker::builder()
        .arg("--real-ip-header")
        .arg("X-Forwarded-For")
        .http(None)
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("http.trusted_proxies"), "{err}");
    assert_eq!(err.lines().count(), 1, "{err}");
}

// 6. Quotas per source address.

/// Sends a UDP announce from `sock` and returns the answer: Ok((leechers,
/// seeders)) or Err(the error message).
fn udp_answer(sock: &UdpSocket, target: SocketAddr, packet: &[u8]) -> Result<(u32, u32), String> {
    sock.send_to(packet, target).unwrap();
    let mut buf = [0u8; 2048];
    let n = sock.recv(&mut buf).expect("an answer");
    let word = |at: usize| u32::from_be_bytes(buf[at..at + 4].try_into().unwrap());
    match word(0) {
        1 => Ok((word(12), word(16))),
        3 => Err(String::from_utf8_lossy(&buf[8..n]).into_owned()),
        other => panic!("action {other}"),
    }
}

fn udp_from(ip: &str) -> UdpSocket {
    let sock = UdpSocket::bind((ip, 0)).unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    sock
}

#[test]
fn one_address_cannot_fill_a_swarm_or_create_torrents_without_end() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config(
            "[swarm]\nmax_peers_per_address_per_torrent = 5\n\
             new_torrents_per_address_per_minute = 20\n",
        )
        .udp(None)
        .metrics()
        .start();
    let target = tracker.udp[0];
    let attacker = udp_from("127.0.0.2");
    let id = udp_connect(&attacker, target).expect("connect");
    let swarm = InfoHash([0x51; 20]);
    // A hundred ports in one torrent: five are stored.
    for port in 1..=100u16 {
        let packet = udp_announce(id, 1, swarm, port, AnnounceEvent::Started, 1);
        let (leechers, _) = udp_answer(&attacker, target, &packet).unwrap();
        assert_eq!(leechers, u32::from(port.min(5)));
    }
    // Others join as ever.
    let honest = udp_from("127.0.0.3");
    let honest_id = udp_connect(&honest, target).expect("connect");
    let packet = udp_announce(honest_id, 2, swarm, 6881, AnnounceEvent::Started, 1);
    assert_eq!(udp_answer(&honest, target, &packet), Ok((6, 0)));

    // A hundred new torrents in a burst: the budget of 20 a minute (one
    // spent on the swarm above) creates some, the rest are refused.
    let mut created = 0;
    // (The tracker's minutes count from its start: all of this is in its
    // first.)
    for n in 0..100u8 {
        let mut new = [0xa0; 20];
        new[0] = n;
        let packet = udp_announce(id, 3, InfoHash(new), 6881, AnnounceEvent::Started, 1);
        match udp_answer(&attacker, target, &packet) {
            Ok(_) => created += 1,
            Err(reason) => assert_eq!(
                reason,
                "too many new torrents from this address: try again later"
            ),
        }
    }
    assert_eq!(created, 19);
    // Another address creates torrents meanwhile.
    let packet = udp_announce(
        honest_id,
        4,
        InfoHash([0xee; 20]),
        6881,
        AnnounceEvent::Started,
        1,
    );
    assert_eq!(udp_answer(&honest, target, &packet), Ok((1, 0)));
    let store_full = |kind| tracker.metric("tracker_store_full_total", &[("kind", kind)]);
    assert_eq!(store_full("peers_per_address"), 95);
    assert_eq!(store_full("torrent_budget"), 81);
}

/// Announces `count` new torrents over UDP from `sock` (their info-hashes
/// start with `tag`), as fast as answers come: how many were created, and
/// the errors of the others.
fn create_torrents(
    sock: &UdpSocket,
    target: SocketAddr,
    tag: [u8; 2],
    count: u16,
) -> (usize, std::collections::BTreeMap<String, usize>) {
    let id = udp_connect(sock, target).expect("connect");
    let mut refused = std::collections::BTreeMap::new();
    let mut created = 0;
    for n in 0..count {
        let mut hash = [0x77; 20];
        hash[..2].copy_from_slice(&tag);
        hash[2..4].copy_from_slice(&n.to_be_bytes());
        let packet = udp_announce(id, 9, InfoHash(hash), 6881, AnnounceEvent::Started, 0);
        match udp_answer(sock, target, &packet) {
            Ok(_) => created += 1,
            Err(reason) => *refused.entry(reason).or_insert(0) += 1,
        }
    }
    (created, refused)
}

/// Issue 28, item 3: the budget of new torrents counted each address alone,
/// so a network created a budget's worth per address it held. Eight
/// addresses in as many /24s of 127.2.0.0/16 (one IPv4 network) create
/// torrents as fast as they can.
#[test]
fn a_network_creates_no_more_new_torrents_than_its_budget() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config("[swarm]\nnew_torrents_per_network_per_minute = 300\n")
        .udp(None)
        .metrics()
        .start();
    let target = tracker.udp[0];
    let mut created = 0;
    let mut refused = std::collections::BTreeMap::new();
    for subnet in 0..8u8 {
        let sock = udp_from(&format!("127.2.{subnet}.1"));
        let (made, why) = create_torrents(&sock, target, [0xa1, subnet], 100);
        created += made;
        for (reason, n) in why {
            *refused.entry(reason).or_insert(0) += n;
        }
    }
    assert_eq!(created, 300);
    let said = "too many new torrents from this network: try again later";
    assert_eq!(
        refused.into_iter().collect::<Vec<_>>(),
        [(said.to_string(), 500)]
    );
    // Another network creates its torrents meanwhile.
    let (made, _) = create_torrents(&udp_from("127.3.0.1"), target, [0xa2, 0], 10);
    assert_eq!(made, 10);
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_store_full_total",
            &[("kind", "torrent_budget")],
            500
        ),
        500
    );
}

/// Issue 28, item 15: a load test from one host trips the limits per client
/// and looks like a broken tracker. Its network can be exempted; everyone
/// else is still held to them, and the first refusal says how.
#[test]
fn an_exempt_network_counts_against_no_limit_per_client_while_others_do() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config(
            "[runtime]\nexempt_networks = [\"127.9.0.0/16\"]\n\
             [swarm]\nmax_peers_per_address_per_torrent = 5\n\
             new_torrents_per_address_per_minute = 20\n",
        )
        .udp(None)
        .start();
    let target = tracker.udp[0];
    let swarm = InfoHash([0xd2; 20]);
    let join = |sock: &UdpSocket, port: u16| {
        let id = udp_connect(sock, target).expect("connect");
        let packet = udp_announce(id, 1, swarm, port, AnnounceEvent::Started, 1);
        udp_answer(sock, target, &packet).unwrap().0
    };
    // The load: one address, 100 new torrents and 50 ports in one swarm.
    let load = udp_from("127.9.0.1");
    let (made, refused) = create_torrents(&load, target, [0xd1, 0], 100);
    assert_eq!((made, refused.len()), (100, 0), "{refused:?}");
    for port in 1..=50 {
        assert_eq!(join(&load, port), u32::from(port));
    }
    // Another address is held to its budget and its share of the swarm.
    let other = udp_from("127.8.0.1");
    let (made, refused) = create_torrents(&other, target, [0xd1, 1], 100);
    assert_eq!(made, 20);
    let said = "too many new torrents from this address: try again later";
    assert_eq!(
        refused.into_iter().collect::<Vec<_>>(),
        [(said.to_string(), 80)]
    );
    for port in 1..=10 {
        assert_eq!(join(&other, port), 50 + u32::from(port.min(5)));
    }
    // Refused 80 times, logged once, with the limit and the way out.
    let log = tracker.stop();
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("new torrents refused"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("swarm.new_torrents_per_address_per_minute = 20"),
        "{log}"
    );
    assert!(
        lines[0].contains(r#"runtime.exempt_networks = ["127.0.0.0/8", "::1"]"#),
        "{log}"
    );
}

/// How many of the torrents `create_torrents` made with `tag` are held now
/// (scraped with a peer).
fn held(sock: &UdpSocket, target: SocketAddr, tag: [u8; 2], count: u16) -> usize {
    use tracker_proto::udp::{write_scrape_request, TransactionId};
    let id = udp_connect(sock, target).expect("connect");
    let hashes: Vec<InfoHash> = (0..count)
        .map(|n| {
            let mut hash = [0x77; 20];
            hash[..2].copy_from_slice(&tag);
            hash[2..4].copy_from_slice(&n.to_be_bytes());
            InfoHash(hash)
        })
        .collect();
    let mut held = 0;
    let mut buf = [0u8; 1500];
    for chunk in hashes.chunks(70) {
        let mut packet = Vec::new();
        write_scrape_request(&mut packet, id, TransactionId(5), chunk);
        sock.send_to(&packet, target).unwrap();
        let n = sock.recv(&mut buf).expect("a scrape answer");
        assert_eq!(n, 8 + 12 * chunk.len());
        held += buf[8..n]
            .chunks(12)
            .filter(|stats| stats[..4] != [0; 4] || stats[8..] != [0; 4])
            .count();
    }
    held
}

/// Issue 28, item 3: a few networks filled a worker's torrents, and then
/// every honest new torrent was told "tracker is full". Eight addresses in
/// as many /24s of 127.4.0.0/16 create torrents as fast as they can, far
/// past the cap; then a client of another network creates some. (With no
/// cap per network, which would keep one network from filling the worker
/// at all: what eviction does once several have.)
#[test]
fn a_store_full_of_one_networks_torrents_still_takes_an_honest_new_one() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config("[swarm]\nmax_torrents_per_worker = 300\nmax_peers_per_network = 0\n")
        .udp(None)
        .metrics()
        .start();
    let target = tracker.udp[0];
    for subnet in 0..8u8 {
        let sock = udp_from(&format!("127.4.{subnet}.1"));
        let (made, refused) = create_torrents(&sock, target, [0xb1, subnet], 100);
        assert_eq!((made, refused.len()), (100, 0), "{refused:?}");
    }
    let honest = udp_from("127.5.0.1");
    let (made, refused) = create_torrents(&honest, target, [0xb2, 0], 20);
    assert_eq!((made, refused.len()), (20, 0), "{refused:?}");
    // Each took the place of one of the attackers' torrents, whose network
    // is the one seen most among those drawn: the honest client keeps its
    // own (it would displace one of them only were as many of its own
    // drawn as of the attackers').
    assert!(held(&honest, target, [0xb2, 0], 20) >= 19);
    assert_eq!(tracker.metric("tracker_torrents", &[]), 300);
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_store_full_total",
            &[("kind", "torrent_evicted")],
            520
        ),
        520
    );
}

/// An HTTP announce that the trusted proxy 127.0.0.2 passes on for
/// `client` (any address: how a test speaks for many IPv6 networks on
/// loopback), on a new connection: Ok((complete, incomplete)) or Err(the
/// failure reason).
fn proxied_announce(
    addr: SocketAddr,
    client: &str,
    hash: InfoHash,
    port: u16,
) -> Result<(i64, i64), String> {
    let mut tcp = tcp_from(ip("127.0.0.2"), addr);
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let target = http_announce_target(hash, port);
    let request =
        format!("GET {target} HTTP/1.1\r\nX-Forwarded-For: {client}\r\nConnection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).unwrap();
    let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap();
    let body = decode(&answer[head_end + 4..]).expect("a bencoded body");
    if let Some(reason) = body.get(b"failure reason") {
        return Err(String::from_utf8_lossy(reason.as_bytes().unwrap()).into_owned());
    }
    let n = |k: &[u8]| body.get(k).and_then(Value::as_int).unwrap();
    Ok((n(b"complete"), n(b"incomplete")))
}

/// A tracker behind the trusted proxy 127.0.0.2, over plain HTTP.
fn behind_a_proxy(config: &str) -> Tracker {
    Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .arg("--real-ip-header")
        .arg("X-Forwarded-For")
        .arg("--trusted-proxy")
        .arg("127.0.0.2/32")
        .config(config)
        .http(None)
        .metrics()
        .start()
}

/// Issue 28, item 2: the cap on one address's peers in a torrent counted
/// each IPv6 address, and a host can announce from any address of its /64.
#[test]
fn one_ipv6_host_cannot_fill_a_swarm_from_the_addresses_of_its_64() {
    let tracker = behind_a_proxy("[swarm]\nmax_peers_per_address_per_torrent = 5\n");
    let addr = tracker.http[0];
    let swarm = InfoHash([0x52; 20]);
    for n in 1..=100u16 {
        let client = format!("2001:db8:1:2::{n:x}");
        let (_, incomplete) = proxied_announce(addr, &client, swarm, 6881).unwrap();
        assert_eq!(incomplete, i64::from(n.min(5)), "{client}");
    }
    // Another /64 joins as ever.
    let other = proxied_announce(addr, "2001:db8:1:3::1", swarm, 6881);
    assert_eq!(other, Ok((0, 6)));
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_store_full_total",
            &[("kind", "peers_per_address")],
            95
        ),
        95
    );
}

/// The same from the /64s of one IPv6 /48, behind a trusted proxy (IPv6
/// loopback is one address).
#[test]
fn a_store_full_of_one_ipv6_networks_torrents_still_takes_an_honest_new_one() {
    let tracker =
        behind_a_proxy("[swarm]\nmax_torrents_per_worker = 100\nmax_peers_per_network = 0\n");
    let addr = tracker.http[0];
    let hash = |tag: u8, n: u16| {
        let mut hash = [tag; 20];
        hash[..2].copy_from_slice(&n.to_be_bytes());
        InfoHash(hash)
    };
    for n in 0..300u16 {
        let client = format!("2001:db8:7:{:x}::1", n % 4);
        let created = proxied_announce(addr, &client, hash(0xc1, n), 6881);
        assert_eq!(created, Ok((0, 1)), "{client}");
    }
    for n in 0..5 {
        let created = proxied_announce(addr, "2001:db8:8::1", hash(0xc2, n), 6881);
        assert_eq!(created, Ok((0, 1)));
    }
    assert_eq!(tracker.metric("tracker_torrents", &[]), 100);
}

/// Issue 37, item 9: a torrent that two networks share is never dropped for
/// a new one, so two /16s that announced every torrent they created from
/// both held every torrent of the worker for good, and honest new torrents
/// were told "tracker is full". A network now holds a share of the worker's
/// peers, within a quarter of its torrents (10 of 40 here), and so two
/// networks hold at most that many torrents that eviction spares.
#[test]
fn two_networks_cannot_hold_every_torrent_by_sharing_them() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config("[swarm]\nmax_torrents_per_worker = 40\n")
        .udp(None)
        .metrics()
        .start();
    let target = tracker.udp[0];
    let attackers = [udp_from("127.1.0.1"), udp_from("127.2.0.1")];
    let ids = attackers
        .each_ref()
        .map(|sock| udp_connect(sock, target).expect("connect"));
    for n in 0..100u16 {
        let mut hash = [0x91; 20];
        hash[..2].copy_from_slice(&n.to_be_bytes());
        for (sock, id) in attackers.iter().zip(ids) {
            let packet = udp_announce(id, 1, InfoHash(hash), 6881, AnnounceEvent::Started, 1);
            // Stored, answered as a swarm of none, or refused: all the same
            // to an attacker.
            let _ = udp_answer(sock, target, &packet);
        }
    }
    assert_eq!(tracker.metric("tracker_torrents", &[]), 10);
    // Two clients of other networks create their torrents (each network
    // holds 10 peers at most, theirs too).
    for net in [3, 4] {
        let honest = udp_from(&format!("127.{net}.0.1"));
        let (made, refused) = create_torrents(&honest, target, [0x92, net], 10);
        assert_eq!((made, refused.len()), (10, 0), "{refused:?}");
        assert_eq!(held(&honest, target, [0x92, net], 10), 10);
    }
    assert_eq!(tracker.metric("tracker_torrents", &[]), 30);
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_store_full_total",
            &[("kind", "peers_per_network")],
            180
        ),
        180
    );
}

/// Issue 37, item 9: one /48 announcing from a thousand of its /64s (behind
/// a trusted proxy: IPv6 loopback is one address) filled the worker's
/// peers, and past them an honest new peer was answered but not stored,
/// and a new torrent answered as a swarm of none. A network now holds an
/// eighth of the worker's peers at most (50 of 400 here).
#[test]
fn one_network_cannot_fill_the_peers_of_a_worker_from_many_addresses() {
    let tracker = behind_a_proxy("[swarm]\nmax_peers_per_worker = 400\n");
    let addr = tracker.http[0];
    let swarm = |n: u16| InfoHash([0x93 + n as u8; 20]);
    for n in 0..1000u16 {
        let client = format!("2001:db8:9:{n:x}::1");
        proxied_announce(addr, &client, swarm(n % 5), 6881).unwrap();
    }
    // A client of another network gets in: a torrent of its own, and one of
    // theirs (10 of the /48's 50 are there).
    let honest = "2001:db8:a::1";
    assert_eq!(proxied_announce(addr, honest, swarm(10), 6881), Ok((0, 1)));
    assert_eq!(proxied_announce(addr, honest, swarm(0), 6881), Ok((0, 11)));
    assert_eq!(
        wait_for_metric(
            &tracker,
            "tracker_store_full_total",
            &[("kind", "peers_per_network")],
            950
        ),
        950
    );
}

/// Issue 37, item 8: one peer flipping between leecher and completed
/// (`completed`, then `left` > 0, then `completed` again ...) raised the
/// torrent's `downloaded` by one per flip, over UDP and HTTP alike (50
/// flips, 50). A peer counts one download while the swarm holds it.
#[test]
fn a_peer_flipping_between_leecher_and_completed_is_one_download() {
    use support::wire::{announce_request, target};
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .udp(None)
        .http(None)
        .start();
    let (udp, http) = (tracker.udp[0], tracker.http[0]);
    let sock = udp_from("127.0.0.2");
    let id = udp_connect(&sock, udp).expect("connect");
    let (over_udp, over_http) = (InfoHash([0x81; 20]), InfoHash([0x82; 20]));
    let flip = |event: AnnounceEvent, left: u64| {
        let packet = udp_announce(id, 2, over_udp, 6881, event, left);
        udp_answer(&sock, udp, &packet).unwrap();
        let announce = announce_request(over_http, 6881, left, event);
        http_get_ok(http, &target(&announce));
    };
    flip(AnnounceEvent::Started, 1);
    for _ in 0..50 {
        flip(AnnounceEvent::Completed, 0);
        flip(AnnounceEvent::None, 1);
    }
    for hash in [over_udp, over_http] {
        // [complete, downloaded, incomplete]
        assert_eq!(scrape_counts(http, hash), [0, 1, 1]);
    }
}

// 2. The state file: nothing at its paths is trusted.

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A directory of its own in the temp dir, removed when dropped.
struct ScratchDir(PathBuf);

impl ScratchDir {
    fn new(name: &str) -> ScratchDir {
        let dir =
            std::env::temp_dir().join(format!("tracker-hostile-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        ScratchDir(dir)
    }
}

impl Drop for ScratchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `[complete, downloaded, incomplete]` of `hash` by an HTTP scrape.
fn scrape_counts(addr: SocketAddr, hash: InfoHash) -> [i64; 3] {
    let mut target = Vec::new();
    tracker_proto::http::write_scrape_target(&mut target, &[hash]);
    let body = http_get_ok(addr, std::str::from_utf8(&target).unwrap());
    let value = decode(&body).unwrap();
    let stats = value
        .get(b"files")
        .and_then(|f| f.get(&hash.0))
        .expect("scraped");
    let n = |k: &[u8]| stats.get(k).and_then(Value::as_int).unwrap();
    [n(b"complete"), n(b"downloaded"), n(b"incomplete")]
}

#[test]
fn a_link_planted_at_the_temporary_state_file_is_never_followed() {
    let dir = ScratchDir::new("planted");
    let state = dir.0.join("tracker.state");
    let victim = dir.0.join("victim");
    std::fs::write(&victim, b"precious").unwrap();
    std::os::unix::fs::symlink(&victim, dir.0.join("tracker.state.tmp")).unwrap();
    let tracker = Tracker::builder().state_file(&state).http(None).start();
    let addr = tracker.http[0];
    // The start-up check did not write through the link ...
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    http_get_ok(addr, &http_announce_target(InfoHash([4; 20]), 6881));
    // ... and neither did the save at the stop.
    std::os::unix::fs::symlink(&victim, dir.0.join("tracker.state.tmp")).unwrap_or(());
    let log = tracker.stop();
    assert!(log.contains("saved 1 torrents"), "{log}");
    assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
    let meta = std::fs::symlink_metadata(&state).unwrap();
    assert!(meta.is_file(), "the state file is a file of its own");
}

#[test]
fn the_state_file_is_checked_and_written_as_the_user_that_writes_it() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !is_root() {
        eprintln!("skipped: needs root (to drop to nobody, and to plant a file of nobody's)");
        return;
    }
    // A directory nobody cannot write: the dropped tracker could never save
    // there, and says so at start.
    let dir = ScratchDir::new("as-user");
    std::fs::set_permissions(&dir.0, std::fs::Permissions::from_mode(0o755)).unwrap();
    let state = dir.0.join("tracker.state");
    let tracker = Tracker::builder()
        .state_file(&state)
        .without_allow_root()
        .arg("--user")
        .arg("nobody")
        .udp(None)
        .start();
    let log = tracker.stop();
    assert!(log.contains("cannot write beside it"), "{log}");

    // A temporary file left there by another user (here nobody, mode 0666)
    // is replaced: the state file is root's own, 0600, not nobody's.
    let temp = dir.0.join("tracker.state.tmp");
    std::fs::write(&temp, b"left").unwrap();
    std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o666)).unwrap();
    // SAFETY: getpwnam returns a static record or null.
    let nobody = unsafe {
        libc::getpwnam(c"nobody".as_ptr())
            .as_ref()
            .expect("nobody")
            .pw_uid
    };
    std::os::unix::fs::chown(&temp, Some(nobody), None).unwrap();
    let tracker = Tracker::builder().state_file(&state).http(None).start();
    http_get_ok(
        tracker.http[0],
        &http_announce_target(InfoHash([4; 20]), 6881),
    );
    let log = tracker.stop();
    assert!(log.contains("saved 1 torrents"), "{log}");
    let meta = std::fs::metadata(&state).unwrap();
    assert_eq!((meta.uid(), meta.mode() & 0o777), (0, 0o600));
}

#[test]
fn a_restore_stores_only_what_an_announce_could_have_stored() {
    use std::net::{Ipv4Addr, Ipv6Addr};
    use tracker_proto::PeerId;
    use tracker_swarm::state::{encode, SavedPeer, SavedTorrent, Section};
    let dir = ScratchDir::new("restore");
    let state = dir.0.join("tracker.state");
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs();
    let v4 = |ip: [u8; 4], port| SavedPeer {
        ip: Ipv4Addr::from(ip),
        port,
        peer_id: PeerId([7; 20]),
        last_seen: now - 10,
        completed: false,
    };
    let hash = InfoHash([0x33; 20]);
    let mut torrent = SavedTorrent {
        info_hash: hash,
        completed: 9,
        ..SavedTorrent::default()
    };
    // Five no announce could store, one good seeder, and one address on
    // twenty ports (the config allows it three).
    torrent.v4.seeders = vec![
        v4([10, 0, 0, 1], 0),
        v4([0, 0, 0, 0], 6881),
        v4([255, 255, 255, 255], 6881),
        v4([239, 1, 2, 3], 6881),
        v4([10, 0, 0, 2], 6881),
    ];
    torrent.v4.leechers = (1..=20).map(|port| v4([10, 0, 0, 3], port)).collect();
    // A multicast address, and an IPv4 host as an IPv4-mapped address in
    // the IPv6 half (an announce stores it as IPv4).
    let v6 = |ip: &str| SavedPeer {
        ip: ip.parse::<Ipv6Addr>().unwrap(),
        port: 6881,
        peer_id: PeerId([8; 20]),
        last_seen: now - 10,
        completed: false,
    };
    torrent.v6.leechers = vec![v6("ff02::1"), v6("::ffff:10.0.0.2")];
    let mut section = Section::default();
    section.push(&torrent);
    std::fs::write(&state, encode(&[section], now)).unwrap();
    let tracker = Tracker::builder()
        .state_file(&state)
        .config("[swarm]\nmax_peers_per_address_per_torrent = 3\n")
        .http(None)
        .start();
    assert_eq!(scrape_counts(tracker.http[0], hash), [1, 9, 3]);
    let log = tracker.stop();
    assert!(
        log.contains("17 over swarm.max_torrents_per_worker"),
        "{log}"
    );
    assert!(log.contains("6 dropped as invalid"), "{log}");
}

// 5. One tracker per port.

#[test]
fn a_second_tracker_on_the_same_ports_refuses_to_start_naming_the_first() {
    let first = Tracker::builder().udp(None).http(None).start();
    let (udp, http) = (first.udp[0], first.http[0]);
    let named = format!("another tracker (pid {})", first.pid());
    for (flag, addr, protocol) in [
        ("--udp", udp, "UDP"),
        ("--http", http, "HTTP"),
        // A wildcard address overlaps the first's 127.0.0.1.
        (
            "--http",
            SocketAddr::from(([0, 0, 0, 0], http.port())),
            "HTTP",
        ),
    ] {
        let (code, err) = Tracker::builder()
            .arg(flag)
            .arg(&addr.to_string())
            .spawn()
            .wait_exit(Duration::from_secs(10));
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(&named) && err.contains(&format!("already serves {protocol} {addr}")),
            "{err}"
        );
    }
    // The first serves on, and a tracker on another port starts.
    assert_eq!(announce_from(ip("127.0.0.1"), http, 7300), Some(200));
    let _other = Tracker::builder().udp(None).start();
}

// 7. File descriptors.

/// The soft and hard "Max open files" of a process.
fn nofile_of(pid: u32) -> (String, String) {
    let limits = std::fs::read_to_string(format!("/proc/{pid}/limits")).unwrap();
    let line = limits
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .expect("Max open files");
    let mut fields = line["Max open files".len()..].split_whitespace();
    (fields.next().unwrap().into(), fields.next().unwrap().into())
}

fn set_nofile(soft: u64, hard: u64) -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    // SAFETY: setrlimit reads one rlimit struct (async-signal-safe).
    if unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn the_descriptor_limit_is_raised_to_the_hard_one() {
    let tracker = Tracker::builder()
        .pre_exec(|| set_nofile(256, 4096))
        .udp(None)
        .start();
    assert_eq!(nofile_of(tracker.pid()), ("4096".into(), "4096".into()));
}

#[test]
fn connections_that_do_not_fit_the_descriptor_limit_are_capped_not_left_to_fail() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .pre_exec(|| set_nofile(160, 160))
        .http(None)
        .spawn();
    let addr = tracker.http[0];
    // Started (the HTTP port answers) ...
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(addr).is_err() {
        assert!(Instant::now() < deadline, "never served");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(announce_from(ip("127.0.0.1"), addr, 7400), Some(200));
    // ... with room for 160 - 64 - 16 - 1 = 79 connections. Twice that many
    // idle ones: past the cap, the idlest makes room for each newcomer, and
    // a request is still served, where accepts would fail for want of
    // descriptors.
    let idle: Vec<TcpStream> = (0..158)
        .map(|n| tcp_from(ip(&format!("127.0.1.{}", n % 100 + 1)), addr))
        .collect();
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(announce_from(ip("127.0.0.3"), addr, 7401), Some(200));
    drop(idle);
    let log = tracker.stop();
    assert!(
        log.contains("RLIMIT_NOFILE) is 160") && log.contains("lowered to 79"),
        "{log}"
    );
}

// 8. Log lines that clients can write.

#[test]
fn clients_cannot_write_the_log() {
    let tracker = Tracker::builder().https(None).start();
    let addr = tracker.https[0];
    let config = tracker.tls.as_ref().unwrap().cert.client_config();
    // libtorrent names an IP address as SNI when the tracker URL has one: a
    // client hello for "localhost" with that name swapped for "127.0.0.1"
    // (as long) is one. The handshake fails afterwards (the transcripts
    // differ), which is logged at debug only.
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut conn = rustls::ClientConnection::new(config, name).unwrap();
    let mut hello = Vec::new();
    conn.write_tls(&mut hello).unwrap();
    let at = hello
        .windows(9)
        .position(|w| w == b"localhost")
        .expect("the SNI");
    hello[at..at + 9].copy_from_slice(b"127.0.0.1");
    for _ in 0..30 {
        let mut tcp = TcpStream::connect(addr).unwrap();
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        tcp.write_all(&hello).unwrap();
        // The server's hello (or an alert): the client hello was read.
        let mut answer = [0u8; 64];
        assert!(tcp.read(&mut answer).unwrap() > 0);
    }
    let log = tracker.stop();
    let client_lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("WARN") || l.contains("ERROR") || l.contains("rustls"))
        .filter(|l| !l.contains("serving as root"))
        .collect();
    assert!(client_lines.is_empty(), "{client_lines:#?}");
}

#[test]
fn a_start_up_error_is_printed_once() {
    let first = Tracker::builder().udp(None).start();
    let (code, err) = Tracker::builder()
        .arg("--udp")
        .arg(&first.udp[0].to_string())
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(1), "{err}");
    assert_eq!(err.matches("already serves UDP").count(), 1, "{err}");
}
