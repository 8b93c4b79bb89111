//! Abuse: no UDP answer larger than its request unless the sender proved its
//! address, the per-IP connect limit, and slow or idle HTTP(S) clients cut by
//! their timeouts while other clients are served promptly. (tests/http.rs
//! covers single silent, idle and slow connections; these add many at once
//! and the latency of everyone else meanwhile.)

mod support;

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::wire::{http_announce_target, http_get, udp_connect};
use support::{closed, Tracker};
use tracker_proto::udp::ConnectionId;
use tracker_proto::InfoHash;

/// xorshift64.
fn next(x: &mut u64) -> u64 {
    *x ^= *x << 13;
    *x ^= *x >> 7;
    *x ^= *x << 17;
    *x
}

/// Packets of every action and many lengths, each with its own transaction id
/// (its index), led by `id`.
fn odd_packets(id: ConnectionId, seed: u64) -> Vec<Vec<u8>> {
    let mut x = seed;
    let mut packets = Vec::new();
    for action in 0..6i32 {
        for len in (16usize..=120).chain([150, 300, 16 + 20 * 74, 16 + 20 * 75, 1400]) {
            let mut p: Vec<u8> = (0..len).map(|_| next(&mut x) as u8).collect();
            p[..8].copy_from_slice(&id.0.to_be_bytes());
            p[8..12].copy_from_slice(&action.to_be_bytes());
            p[12..16].copy_from_slice(&(packets.len() as i32).to_be_bytes());
            if action == 1 && len >= 98 {
                // Mostly-valid announces: a bad event, a zero port, or fine.
                p[80..84].copy_from_slice(&((len % 5) as i32).to_be_bytes());
                if len % 3 == 0 {
                    p[96..98].copy_from_slice(&0u16.to_be_bytes());
                }
            }
            packets.push(p);
        }
    }
    packets
}

fn send_all(sock: &UdpSocket, target: SocketAddr, packets: &[Vec<u8>]) -> Vec<Vec<u8>> {
    let mut answers = Vec::new();
    let mut buf = [0u8; 2048];
    for chunk in packets.chunks(32) {
        for p in chunk {
            sock.send_to(p, target).unwrap();
        }
        while let Ok((n, _)) = sock.recv_from(&mut buf) {
            answers.push(buf[..n].to_vec());
        }
    }
    // Stragglers.
    sock.set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    while let Ok((n, _)) = sock.recv_from(&mut buf) {
        answers.push(buf[..n].to_vec());
    }
    sock.set_read_timeout(Some(Duration::from_millis(60)))
        .unwrap();
    answers
}

#[test]
fn no_udp_answer_is_larger_than_its_request_and_bad_ids_get_none() {
    let tracker = Tracker::builder().udp(None).start();
    let target = tracker.udp[0];
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_millis(500)))
        .unwrap();
    let id = udp_connect(&sock, target).expect("connect");
    sock.set_read_timeout(Some(Duration::from_millis(60)))
        .unwrap();

    // A proven address: answers, each no larger than what it answers.
    let packets = odd_packets(id, 0x1234_5678_9abc_def1);
    let answers = send_all(&sock, target, &packets);
    assert!(
        answers.len() > packets.len() / 4,
        "{} answers",
        answers.len()
    );
    let mut kinds = HashMap::new();
    for a in &answers {
        assert!(a.len() >= 8, "{a:?}");
        let txid = i32::from_be_bytes(a[4..8].try_into().unwrap()) as usize;
        let action = i32::from_be_bytes(a[..4].try_into().unwrap());
        *kinds.entry(action).or_insert(0) += 1;
        let request = &packets[txid];
        assert!(
            a.len() <= request.len(),
            "a {}-byte answer (action {action}) to a {}-byte request",
            a.len(),
            request.len()
        );
    }
    // Errors (3) and real answers (1 announce, 2 scrape) were among them.
    for action in [1, 2, 3] {
        assert!(kinds.contains_key(&action), "{kinds:?}");
    }

    // Unproven (a connection id not issued to this address): nothing at all,
    // as a spoofed source must get nothing to aim at its victim.
    let spoofer = UdpSocket::bind("127.0.0.2:0").unwrap();
    spoofer
        .set_read_timeout(Some(Duration::from_millis(60)))
        .unwrap();
    let mut packets = odd_packets(id, 0x0fed_cba9_8765_4321);
    // Connects are answered whatever their source (16 bytes for 16): leave
    // them out here.
    packets.retain(|p| p[8..12] != 0i32.to_be_bytes());
    assert_eq!(send_all(&spoofer, target, &packets), Vec::<Vec<u8>>::new());
    let forged = odd_packets(ConnectionId(0x5eed), 7);
    assert_eq!(
        send_all(&sock, target, &forged[forged.len() / 6..]),
        Vec::<Vec<u8>>::new()
    );
}

#[test]
fn connects_per_ip_are_limited_and_other_addresses_unaffected() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config("[udp]\nmax_connects_per_ip_per_sec = 5\n")
        .udp(None)
        .start();
    let target = tracker.udp[0];
    let answered = |ip: &str| {
        let sock = UdpSocket::bind((ip, 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        (0..40)
            .filter(|_| udp_connect(&sock, target).is_some())
            .count()
    };
    // 40 connects within a few seconds (each unanswered one waits 100 ms):
    // at most 5 in each second of the clock that they touch.
    let start = Instant::now();
    let busy = answered("127.0.0.2");
    let seconds = start.elapsed().as_secs() + 2;
    assert!(
        (5..=5 * seconds as usize).contains(&busy),
        "{busy} answered in {seconds} s"
    );
    assert!(busy < 40);
    // Another address has its own budget.
    let sock = UdpSocket::bind("127.0.0.3:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    assert!(udp_connect(&sock, target).is_some());
}

/// `runtime.exempt_networks` lifts the connect limit for a load test's
/// addresses; the others stay limited.
#[test]
fn exempt_networks_are_not_limited_in_connects() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config(
            "[runtime]\nexempt_networks = [\"127.5.0.0/16\"]\n\
             [udp]\nmax_connects_per_ip_per_sec = 5\n",
        )
        .udp(None)
        .start();
    let target = tracker.udp[0];
    let answered = |ip: &str, n: usize| {
        let sock = UdpSocket::bind((ip, 0)).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(500)))
            .unwrap();
        (0..n)
            .filter(|_| udp_connect(&sock, target).is_some())
            .count()
    };
    // Well past 5 a second, all answered.
    assert_eq!(answered("127.5.0.1", 30), 30);
    // Elsewhere the limit holds.
    assert!(answered("127.0.0.2", 12) < 12);
}

/// Milliseconds for one announce over plain HTTP, on a new connection.
fn http_latency(addr: SocketAddr, n: u16) -> Duration {
    let start = Instant::now();
    let (status, _) = http_get(
        addr,
        &http_announce_target(InfoHash([9; 20]), 3000 + n),
        Duration::from_secs(5),
    )
    .expect("served");
    assert_eq!(status, 200);
    start.elapsed()
}

#[test]
fn slowloris_is_cut_by_the_request_timeout_while_others_are_served() {
    let tracker = Tracker::builder()
        .config("[http]\nrequest_timeout_secs = 2\n")
        .http(None)
        .start();
    let addr = tracker.http[0];
    let mut dribblers: Vec<TcpStream> =
        (0..50).map(|_| TcpStream::connect(addr).unwrap()).collect();
    let head = b"GET /announce?info_hash=aaaaaaaaaaaaaaaaaaaa HTTP/1.1\r\nX: y\r\n";
    let start = Instant::now();
    let mut worst = Duration::ZERO;
    let mut cut = vec![None; dribblers.len()];
    // One byte a second from each, while another client is served.
    for (second, byte) in head.iter().enumerate().take(6) {
        for (i, d) in dribblers.iter_mut().enumerate() {
            if cut[i].is_none()
                && (d.write_all(&[*byte]).is_err() || closed(d, Duration::from_millis(1)))
            {
                cut[i] = Some(start.elapsed());
            }
        }
        for n in 0..5 {
            worst = worst.max(http_latency(addr, second as u16 * 10 + n));
            std::thread::sleep(Duration::from_millis(150));
        }
    }
    for (i, at) in cut.iter().enumerate() {
        let at =
            at.unwrap_or_else(|| panic!("dribbler {i} still open after {:?}", start.elapsed()));
        assert!(
            at >= Duration::from_millis(1500) && at < Duration::from_secs(5),
            "dribbler {i} cut after {at:?}"
        );
    }
    assert!(
        worst < Duration::from_millis(500),
        "an announce took {worst:?}"
    );
}

/// Lets this process (and the tracker it starts) hold `n` descriptors.
fn raise_nofile(n: u64) {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit only read and write `limit`.
    unsafe {
        assert_eq!(libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit), 0);
        if limit.rlim_cur < n {
            limit.rlim_cur = limit.rlim_max.min(n);
            assert_eq!(libc::setrlimit(libc::RLIMIT_NOFILE, &limit), 0);
        }
    }
    assert!(limit.rlim_cur >= n, "RLIMIT_NOFILE is {}", limit.rlim_cur);
}

/// A completed TLS session on a new connection.
fn tls_session(
    addr: SocketAddr,
    config: &Arc<rustls::ClientConfig>,
) -> rustls::StreamOwned<rustls::ClientConnection, TcpStream> {
    let name = rustls::pki_types::ServerName::from(addr.ip());
    let conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut stream = rustls::StreamOwned::new(conn, tcp);
    while stream.conn.is_handshaking() {
        stream.conn.complete_io(&mut stream.sock).unwrap();
    }
    stream
}

/// One HTTPS announce on a new session: how long the request took once the
/// session was up.
fn https_latency(addr: SocketAddr, config: &Arc<rustls::ClientConfig>, n: u16) -> Duration {
    let mut s = tls_session(addr, config);
    let start = Instant::now();
    let target = http_announce_target(InfoHash([8; 20]), 4000 + n);
    write!(s, "GET {target} HTTP/1.1\r\nConnection: close\r\n\r\n").unwrap();
    s.flush().unwrap();
    let mut answer = Vec::new();
    // The tracker may end with a TCP FIN after close_notify; either is the end.
    let _ = s.read_to_end(&mut answer);
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{answer:?}");
    start.elapsed()
}

#[test]
fn a_thousand_idle_tls_sessions_are_cut_while_others_are_served() {
    const IDLE: usize = 1000;
    const TIMEOUT: Duration = Duration::from_secs(5);
    raise_nofile(2 * IDLE as u64 + 256);
    let tracker = Tracker::builder()
        .config(&format!(
            "[http]\nidle_timeout_secs = {}\nmax_connections_per_worker = {}\n\
             max_connections_per_address = {}\nmax_connections_per_subnet = {}\n\
             max_connections_per_network = {}\n",
            TIMEOUT.as_secs(),
            2 * IDLE,
            2 * IDLE,
            2 * IDLE,
            2 * IDLE
        ))
        .https(None)
        .start();
    let addr = tracker.https[0];
    let config = tracker.tls.as_ref().unwrap().cert.client_config();
    // Handshakes in a debug build take milliseconds each, so the first
    // sessions may reach their timeout before the last are open: each is
    // judged by its own age.
    let mut idle: Vec<_> = (0..IDLE)
        .map(|_| (tls_session(addr, &config), Instant::now()))
        .collect();
    // The youngest are held open (not cut early) ...
    for (s, _) in idle.iter_mut().rev().take(50) {
        assert!(!closed(&mut s.sock, Duration::from_millis(1)), "cut early");
    }
    // ... while another client is served promptly.
    let mut worst = Duration::ZERO;
    for n in 0..10 {
        worst = worst.max(https_latency(addr, &config, n));
    }
    assert!(
        worst < Duration::from_millis(500),
        "an announce took {worst:?}"
    );
    // And the idle timeout cuts every one of them.
    for (i, (s, opened)) in idle.iter_mut().enumerate() {
        let left =
            (*opened + TIMEOUT + Duration::from_secs(3)).saturating_duration_since(Instant::now());
        assert!(
            closed(&mut s.sock, left.max(Duration::from_millis(1))),
            "idle session {i} still open {:?} after it was opened",
            opened.elapsed()
        );
    }
    assert!(https_latency(addr, &config, 99) < Duration::from_millis(500));
}

#[test]
fn tls_handshakes_that_never_finish_are_cut() {
    let tracker = Tracker::builder()
        .config("[http]\ntls_handshake_timeout_secs = 1\nidle_timeout_secs = 30\n")
        .https(None)
        .start();
    let addr = tracker.https[0];
    let config = tracker.tls.as_ref().unwrap().cert.client_config();
    // The first part of a real ClientHello, then nothing.
    let mut hello = Vec::new();
    let name = rustls::pki_types::ServerName::from(addr.ip());
    let mut conn = rustls::ClientConnection::new(config.clone(), name).unwrap();
    conn.write_tls(&mut hello).unwrap();
    assert!(hello.len() > 100);
    let start = Instant::now();
    let mut stuck: Vec<TcpStream> = (0..200)
        .map(|_| {
            let mut tcp = TcpStream::connect(addr).unwrap();
            tcp.write_all(&hello[..hello.len() / 2]).unwrap();
            tcp
        })
        .collect();
    let worst = (0..5)
        .map(|n| https_latency(addr, &config, n))
        .max()
        .unwrap();
    assert!(
        worst < Duration::from_millis(500),
        "an announce took {worst:?}"
    );
    for (i, tcp) in stuck.iter_mut().enumerate() {
        let left = Duration::from_secs(4).saturating_sub(start.elapsed());
        assert!(
            closed(tcp, left.max(Duration::from_millis(1))),
            "handshake {i} still open after {:?}",
            start.elapsed()
        );
    }
    assert!(start.elapsed() >= Duration::from_millis(900));
}
