//! AF_XDP end to end (issue 36): the real binary in one network namespace
//! with `[udp.xdp]` on the server's end of a veth pair (native XDP, copy
//! mode), clients in another namespace at the other end
//! (tests/support/netns.rs).
//!
//! Needs root (namespaces, veth, XDP, AF_PACKET and raw ICMP sockets) and
//! `ip` (iproute2); the libtorrent test also needs Debian's
//! python3-libtorrent (tests/e2e_libtorrent.rs), and the private mode test
//! the MariaDB server of tests/mariadb.sh (`TRACKER_TEST_MYSQL_URL`, and
//! `TRACKER_TEST_MARIADB_SOCKET`: the tracker in the server's namespace
//! reaches it over its unix socket). A machine without them fails these
//! tests: none is skipped.

mod support;

use std::collections::BTreeSet;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::Path;
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};
use support::netns::{frame, ping, Capture, Captured, RawLink, Side, TwoHosts, SRV_DEV};
use support::site_db::SiteDb;
use support::tempfile_path::TempPath;
use support::udp_client::Client;
use support::wire::{hash_owned_by, http_announce_target, http_get, udp_announce_wanting};
use support::{require_libtorrent, PYTHON};
use support::{Tracker, TrackerBuilder};
use tracker_proto::udp::{write_scrape_request, ConnectionId, IpFamily, Response, TransactionId};
use tracker_proto::{AnnounceEvent, InfoHash, ScrapeStats};

/// Both trackers of a test key their connection ids alike, so that the
/// same client gets the same id from either.
const SECRET: &str = "00112233445566778899aabbccddeeff";
/// The UDP port of the tracker with AF_XDP on (both families).
const XDP_PORT: u16 = 6969;
/// The UDP port of the tracker with it off, for comparison.
const SOCKET_PORT: u16 = 6970;
const HTTP_PORT: u16 = 8080;
/// A plain UDP socket's port on the server, beside the tracker's.
const ECHO_PORT: u16 = 7777;

/// The tracker's config: `[udp.xdp]` on the server's veth end, or the same
/// section with no interface (AF_XDP off).
fn config(xdp: bool) -> String {
    let interfaces = if xdp {
        format!("[\"{SRV_DEV}\"]")
    } else {
        "[]".to_string()
    };
    format!(
        "[udp]\nconnection_secret = \"{SECRET}\"\n\n\
         [udp.xdp]\ninterfaces = {interfaces}\nqueues = []\nzero_copy = false\n\
         generic = false\nframes = 4096\nframe_size = 2048\n"
    )
}

/// Starts the tracker in the server's namespace, serving UDP on `port` of
/// both of the server's addresses (and HTTP with `http`), with metrics,
/// and waits until it answers.
fn start(hosts: &TwoHosts, port: u16, xdp: bool, http: bool) -> Tracker {
    let mut builder = Tracker::builder()
        .udp(Some(SocketAddr::new(hosts.srv_v4.into(), port)))
        .udp(Some(SocketAddr::new(hosts.srv_v6.into(), port)))
        .metrics()
        .config(&config(xdp));
    if http {
        builder = builder.http(Some(SocketAddr::new(hosts.srv_v4.into(), HTTP_PORT)));
    }
    start_built(hosts, builder)
}

/// Starts the tracker `builder` describes in the server's namespace, and
/// waits until it answers.
fn start_built(hosts: &TwoHosts, builder: TrackerBuilder) -> Tracker {
    // Started from a thread in the server's namespace, the process runs
    // there; its listeners are probed from there too (over loopback, which
    // has no XDP program: the socket path).
    hosts.srv(move || {
        let mut tracker = builder.spawn();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !ready(&tracker) {
            if !tracker.is_running() {
                let (code, stderr) = tracker.wait_exit(Duration::from_secs(5));
                panic!("the tracker exited during start-up ({code:?}); its stderr:\n{stderr}");
            }
            assert!(Instant::now() < deadline, "the tracker did not start");
            std::thread::sleep(Duration::from_millis(50));
        }
        tracker
    })
}

/// Whether each of the tracker's UDP listeners answers a connect (from
/// loopback), its HTTP listeners take a connection, and its metrics answer.
fn ready(tracker: &Tracker) -> bool {
    let udp = tracker.udp.iter().all(|addr| {
        let from: SocketAddr = if addr.is_ipv4() {
            "127.0.0.1:0".parse().unwrap()
        } else {
            "[::1]:0".parse().unwrap()
        };
        let sock = UdpSocket::bind(from).unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(100)))
            .unwrap();
        sock.send_to(&connect_packet(7), addr).unwrap();
        let mut buf = [0u8; 64];
        matches!(sock.recv_from(&mut buf), Ok((16, _)))
    });
    let http = tracker
        .http
        .iter()
        .all(|addr| std::net::TcpStream::connect_timeout(addr, Duration::from_millis(200)).is_ok());
    let metrics = tracker.metrics.is_some_and(|addr| {
        matches!(
            http_get(addr, "/metrics", Duration::from_secs(1)),
            Some((200, _))
        )
    });
    udp && http && metrics
}

/// Starts the tracker with AF_XDP and checks that the program is attached
/// in native mode.
fn start_xdp(hosts: &TwoHosts, http: bool) -> Tracker {
    let tracker = start(hosts, XDP_PORT, true, http);
    assert_attached_natively(hosts);
    tracker
}

/// Checks that an XDP program is attached to the server's veth end, in
/// native mode.
fn assert_attached_natively(hosts: &TwoHosts) {
    let attached = hosts.xdp_attached(Side::Srv).unwrap_or_else(|| {
        panic!("the tracker started with AF_XDP on but no XDP program is attached to {SRV_DEV}")
    });
    assert!(
        !attached.contains("xdpgeneric"),
        "udp.xdp.generic = false, yet the program is in generic mode:\n{attached}"
    );
}

/// A UDP socket for a client, made in the client's namespace on its address
/// of `to`'s family.
fn client_socket(hosts: &TwoHosts, to: SocketAddr) -> UdpSocket {
    let bind = SocketAddr::new(hosts.addr(Side::Cli, to.is_ipv6()), 0);
    let sock = hosts
        .cli(|| UdpSocket::bind(bind))
        .expect("bind a client socket");
    sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    sock
}

/// Sends `packet` to `to` and returns the answer.
fn ask(sock: &UdpSocket, to: SocketAddr, packet: &[u8]) -> Vec<u8> {
    sock.send_to(packet, to).unwrap();
    let mut buf = [0u8; 2048];
    let (n, from) = sock
        .recv_from(&mut buf)
        .unwrap_or_else(|e| panic!("no answer from {to}: {e}"));
    assert_eq!(from, to, "an answer from another address");
    buf[..n].to_vec()
}

fn connect_packet(txid: i32) -> Vec<u8> {
    support::wire::udp_connect_packet(TransactionId(txid))
}

/// Connects `sock` to the tracker at `to`: the connection id.
fn connect(sock: &UdpSocket, to: SocketAddr) -> ConnectionId {
    let answer = ask(sock, to, &connect_packet(0x0c0c));
    match Response::parse(&answer, IpFamily::of(to.ip())) {
        Ok(Response::Connect {
            transaction_id: TransactionId(0x0c0c),
            connection_id,
        }) => connection_id,
        other => panic!("not a connect answer from {to}: {other:?} ({answer:02x?})"),
    }
}

/// The tracker's count of `metric` (requests or responses) for UDP over
/// `path`, of `action` (and of `family`, "ipv4" or "ipv6", if given).
fn udp_count(
    hosts: &TwoHosts,
    tracker: &Tracker,
    metric: &str,
    path: &str,
    action: &str,
    family: Option<&str>,
) -> u64 {
    let mut labels = vec![("protocol", "udp"), ("path", path), ("action", action)];
    if let Some(family) = family {
        labels.push(("family", family));
    }
    hosts.metric(tracker, metric, &labels)
}

fn requests(hosts: &TwoHosts, tracker: &Tracker, path: &str, action: &str) -> u64 {
    udp_count(hosts, tracker, "tracker_requests_total", path, action, None)
}

/// Frames the XDP program took that the tracker dropped as malformed.
fn bad_frames(hosts: &TwoHosts, tracker: &Tracker) -> u64 {
    let labels = [("protocol", "udp"), ("path", "xdp"), ("kind", "bad_frame")];
    hosts.metric(tracker, "tracker_udp_errors_total", &labels)
}

/// Waits until `read` gives `expected`, then checks that it stays there a
/// moment (nothing more was counted late); panics with `what` otherwise.
fn settles_at(expected: u64, what: &str, read: impl Fn() -> u64) {
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut got = read();
    while got < expected && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
        got = read();
    }
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(read(), expected, "{what}");
}

/// A torrent that worker `owner` of two owns, one per `seed`.
fn hash(seed: u32, owner: usize) -> InfoHash {
    hash_owned_by(owner, 2, seed)
}

/// What one client pair asks a tracker, and the raw answers: a connect,
/// two announces for a torrent worker 0 owns (which, with one queue on the
/// veth, is the worker that reads the AF_XDP socket) and two for one that
/// worker 1 owns (forwarded over the mesh), a scrape of both and of one
/// nobody announced, and an announce with port 0 (an error answer).
fn probes(
    first: &UdpSocket,
    second: &UdpSocket,
    to: SocketAddr,
    seed: u32,
) -> Vec<(&'static str, Vec<u8>)> {
    let mut answers = vec![("connect", ask(first, to, &connect_packet(0x0101)))];
    let id = match Response::parse(&answers[0].1, IpFamily::of(to.ip())) {
        Ok(Response::Connect { connection_id, .. }) => connection_id,
        other => panic!("not a connect answer from {to}: {other:?}"),
    };
    // Both clients are at one address: one id serves both.
    let (local, remote) = (hash(seed, 0), hash(seed + 1, 1));
    let announce = |sock: &UdpSocket, txid, hash, port, left| {
        let packet = udp_announce_wanting(id, txid, hash, port, AnnounceEvent::Started, left, -1);
        ask(sock, to, &packet)
    };
    answers.push((
        "seeder's announce (worker 0)",
        announce(first, 0x0201, local, 6881, 0),
    ));
    answers.push((
        "leecher's announce (worker 0)",
        announce(second, 0x0202, local, 6882, 1000),
    ));
    answers.push((
        "seeder's announce (worker 1)",
        announce(first, 0x0203, remote, 6881, 0),
    ));
    answers.push((
        "leecher's announce (worker 1)",
        announce(second, 0x0204, remote, 6882, 1000),
    ));
    let mut scrape = Vec::new();
    let nobody = InfoHash([0xee; 20]);
    write_scrape_request(
        &mut scrape,
        id,
        TransactionId(0x0301),
        &[local, remote, nobody],
    );
    answers.push(("scrape", ask(first, to, &scrape)));
    answers.push((
        "announce with port 0",
        announce(first, 0x0401, local, 0, 1000),
    ));
    answers
}

/// Checks what `probes` got: the second client is told of the first, the
/// scrape counts both, the port-0 announce is an "invalid port" error.
fn check_probe_answers(answers: &[(&str, Vec<u8>)], first: SocketAddr, family: IpFamily) {
    let parse = |i: usize| {
        Response::parse(&answers[i].1, family)
            .unwrap_or_else(|e| panic!("{}: unparsable answer {e:?}", answers[i].0))
    };
    let seeder = SocketAddr::new(first.ip(), 6881);
    for (i, txid) in [(2, 0x0202), (4, 0x0204)] {
        match parse(i) {
            Response::Announce {
                transaction_id,
                interval,
                leechers,
                seeders,
                peers,
            } => {
                assert_eq!(transaction_id, TransactionId(txid));
                assert_eq!(interval, 1800);
                assert_eq!((seeders, leechers), (1, 1), "{}", answers[i].0);
                assert_eq!(
                    peers.iter().collect::<Vec<_>>(),
                    vec![seeder],
                    "{}",
                    answers[i].0
                );
            }
            other => panic!("{}: {other:?}", answers[i].0),
        }
    }
    match parse(5) {
        Response::Scrape {
            transaction_id,
            stats,
        } => {
            assert_eq!(transaction_id, TransactionId(0x0301));
            let one_each = ScrapeStats {
                seeders: 1,
                completed: 0,
                leechers: 1,
            };
            let none = ScrapeStats {
                seeders: 0,
                completed: 0,
                leechers: 0,
            };
            assert_eq!(
                stats.iter().collect::<Vec<_>>(),
                vec![one_each, one_each, none]
            );
        }
        other => panic!("scrape: {other:?}"),
    }
    assert_eq!(
        &answers[6].1[..4],
        &3i32.to_be_bytes(),
        "not an error answer (action 3)"
    );
    match parse(6) {
        Response::Error {
            transaction_id,
            message,
        } => {
            assert_eq!(transaction_id, TransactionId(0x0401));
            assert_eq!(message, b"invalid port");
        }
        other => panic!("port 0: {other:?}"),
    }
}

/// The connection id's time window (tracker-udp's cookie.rs: 120 s).
fn id_window() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        / 120
}

#[test]
fn probes_get_the_same_answers_as_over_sockets() {
    let hosts = TwoHosts::new();
    let xdp = start_xdp(&hosts, false);
    // The same binary and config with AF_XDP off, beside it on another
    // port (the XDP program takes the first one's port only).
    let sockets = start(&hosts, SOCKET_PORT, false, false);

    for (v6, seed) in [(false, 100), (true, 200)] {
        let family = if v6 { "IPv6" } else { "IPv4" };
        let srv = hosts.addr(Side::Srv, v6);
        let (over_xdp, over_sockets) = (
            SocketAddr::new(srv, XDP_PORT),
            SocketAddr::new(srv, SOCKET_PORT),
        );
        let first = client_socket(&hosts, over_xdp);
        let second = client_socket(&hosts, over_xdp);
        let window = id_window();
        let from_xdp = probes(&first, &second, over_xdp, seed);
        let from_sockets = probes(&first, &second, over_sockets, seed);
        let same_window = id_window() == window;
        check_probe_answers(&from_xdp, first.local_addr().unwrap(), IpFamily::of(srv));
        check_probe_answers(
            &from_sockets,
            first.local_addr().unwrap(),
            IpFamily::of(srv),
        );
        for ((what, a), (_, b)) in from_xdp.iter().zip(&from_sockets) {
            if *what == "connect" && !same_window {
                // The ids' window turned between the two: only the id
                // (bytes 8 to 16) may differ.
                assert_eq!(a[..8], b[..8], "{family} {what}");
                continue;
            }
            assert_eq!(
                a, b,
                "{family} {what}: the answer over AF_XDP (left) differs from the answer over \
                 sockets (right)"
            );
        }
    }

    // Every request to the XDP tracker's port came over AF_XDP; the other
    // tracker counts them over its sockets.
    for family in ["ipv4", "ipv6"] {
        let count = |tracker, metric, path, action| {
            udp_count(&hosts, tracker, metric, path, action, Some(family))
        };
        for metric in ["tracker_requests_total", "tracker_responses_total"] {
            for (action, n) in [("connect", 1), ("announce", 5), ("scrape", 1)] {
                let what = format!("{metric}{{path=xdp,action={action},family={family}}}");
                assert_eq!(count(&xdp, metric, "xdp", action), n, "{what}");
                // The other tracker's connects include its start's probes.
                let over_sockets = count(&sockets, metric, "socket", action);
                if action == "connect" {
                    assert!(over_sockets >= n, "{what} on the socket tracker");
                } else {
                    assert_eq!(over_sockets, n, "{what} on the socket tracker");
                }
            }
            for action in ["announce", "scrape"] {
                assert_eq!(
                    count(&xdp, metric, "socket", action),
                    0,
                    "{metric}{{path=socket,action={action},family={family}}}: the XDP \
                     tracker answered a request over its sockets"
                );
                assert_eq!(count(&sockets, metric, "xdp", action), 0);
            }
        }
    }
    assert_eq!(bad_frames(&hosts, &xdp), 0);
    assert_eq!(
        hosts.metric(&xdp, "tracker_udp_errors_total", &[("kind", "malformed")]),
        2,
        "the two port-0 announces"
    );
}

#[test]
fn other_traffic_still_reaches_the_kernel() {
    let hosts = TwoHosts::new();
    let tracker = start_xdp(&hosts, true);
    // ARP and neighbour discovery from scratch.
    hosts.flush_neighbours(Side::Srv);
    hosts.flush_neighbours(Side::Cli);

    for v6 in [false, true] {
        let srv = hosts.addr(Side::Srv, v6);
        assert!(
            hosts.cli(|| ping(srv, Duration::from_secs(3))),
            "no echo reply from {srv} with XDP on {SRV_DEV}"
        );
    }
    // Both sides learnt each other's link address (ARP, ND).
    let srv_mac = mac_text(hosts.mac(Side::Srv));
    let cli_mac = mac_text(hosts.mac(Side::Cli));
    let cli_table = hosts.neighbours(Side::Cli);
    let srv_table = hosts.neighbours(Side::Srv);
    for (table, ip, mac) in [
        (&cli_table, hosts.srv_v4.to_string(), &srv_mac),
        (&cli_table, hosts.srv_v6.to_string(), &srv_mac),
        (&srv_table, hosts.cli_v4.to_string(), &cli_mac),
        (&srv_table, hosts.cli_v6.to_string(), &cli_mac),
    ] {
        assert!(
            table
                .lines()
                .any(|l| l.starts_with(&format!("{ip} ")) && l.contains(mac.as_str())),
            "no neighbour entry for {ip} at {mac}:\n{table}"
        );
    }

    // A plain UDP socket on another port of the same addresses.
    for v6 in [false, true] {
        let srv = SocketAddr::new(hosts.addr(Side::Srv, v6), ECHO_PORT);
        let echo = hosts
            .srv(|| UdpSocket::bind(srv))
            .expect("bind the echo socket");
        echo.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let server = std::thread::spawn(move || {
            let mut buf = [0u8; 512];
            let (n, from) = echo
                .recv_from(&mut buf)
                .expect("nothing reached the echo socket");
            echo.send_to(&buf[..n], from).unwrap();
            from
        });
        let client = client_socket(&hosts, srv);
        let answer = ask(&client, srv, b"not for the tracker");
        assert_eq!(answer, b"not for the tracker");
        assert_eq!(server.join().unwrap(), client.local_addr().unwrap());
    }

    // TCP: an HTTP announce on the tracker's own address.
    let http = SocketAddr::new(hosts.srv_v4.into(), HTTP_PORT);
    let target = http_announce_target(InfoHash([0x42; 20]), 7001);
    let answer = hosts.cli(|| http_get(http, &target, Duration::from_secs(5)));
    match answer {
        Some((200, body)) => assert!(
            body.windows(10).any(|w| w == b"8:interval"),
            "not an announce answer: {}",
            String::from_utf8_lossy(&body)
        ),
        other => panic!("HTTP announce at {http}: {other:?}"),
    }

    // And the tracker's UDP went over AF_XDP all along.
    for v6 in [false, true] {
        let to = SocketAddr::new(hosts.addr(Side::Srv, v6), XDP_PORT);
        connect(&client_socket(&hosts, to), to);
    }
    assert_eq!(requests(&hosts, &tracker, "xdp", "connect"), 2);
    assert_eq!(bad_frames(&hosts, &tracker), 0);
}

fn mac_text(mac: [u8; 6]) -> String {
    mac.iter()
        .map(|b| format!("{b:02x}"))
        .collect::<Vec<_>>()
        .join(":")
}

/// The client's port that every hand-made frame comes from.
const RAW_PORT: u16 = 40404;

/// An edit that spoils an IP packet.
type Spoil = fn(&mut Vec<u8>);

#[test]
fn malformed_frames_never_crash_or_answer_wrongly() {
    use frame::{
        ethernet, fix_ipv4_checksum, ipv4, ipv6, pseudo_v4, pseudo_v6, udp, udp_v4, udp_v6,
        ETHERTYPE_IPV4, ETHERTYPE_IPV6, IPPROTO_UDP, IPV6_HOP_BY_HOP,
    };
    let hosts = TwoHosts::new();
    let mut tracker = start_xdp(&hosts, false);
    let (srv_mac, cli_mac) = (hosts.mac(Side::Srv), hosts.mac(Side::Cli));
    let (src4, dst4, src6, dst6) = (hosts.cli_v4, hosts.srv_v4, hosts.cli_v6, hosts.srv_v6);
    let cli_ifindex = hosts.ifindex(Side::Cli);
    let (link, capture) = hosts.cli(|| (RawLink::new(cli_ifindex), Capture::new(cli_ifindex)));
    // Where answers to the hand-made frames would arrive: a client's
    // sockets, and the link itself (an answer the client's stack would
    // drop, with a bad checksum say, is still a wrong answer).
    let listeners: Vec<UdpSocket> = [IpAddr::from(src4), IpAddr::from(src6)]
        .into_iter()
        .map(|ip| {
            hosts
                .cli(|| UdpSocket::bind(SocketAddr::new(ip, RAW_PORT)))
                .expect("bind the listener")
        })
        .collect();
    let eth4 = |ip: &[u8]| ethernet(srv_mac, cli_mac, ETHERTYPE_IPV4, ip);
    let eth6 = |ip: &[u8]| ethernet(srv_mac, cli_mac, ETHERTYPE_IPV6, ip);
    let good4 = |txid| udp_v4(src4, dst4, RAW_PORT, XDP_PORT, &connect_packet(txid));
    let good6 = |txid| udp_v6(src6, dst6, RAW_PORT, XDP_PORT, &connect_packet(txid));

    let connects = |tracker: &Tracker, path, family| {
        udp_count(
            &hosts,
            tracker,
            "tracker_requests_total",
            path,
            "connect",
            Some(family),
        )
    };
    let before = [
        connects(&tracker, "socket", "ipv4"),
        connects(&tracker, "socket", "ipv6"),
        connects(&tracker, "xdp", "ipv4"),
        connects(&tracker, "xdp", "ipv6"),
    ];
    assert_eq!(before[2..], [0, 0]);
    assert_eq!(bad_frames(&hosts, &tracker), 0);

    // (transaction id, frame) of each frame sent; the ids of those that
    // must be answered, and the count of those the XDP program takes and
    // the tracker must drop as bad frames.
    let mut frames: Vec<(i32, Vec<u8>)> = Vec::new();
    let mut answered: BTreeSet<i32> = BTreeSet::new();
    let mut bad = 0u64;

    // A connect cut short at every length up to a minimal Ethernet frame's
    // 60 bytes. The whole frame is 58 bytes (14 + 20 + 8 + 16); 59 and 60
    // carry Ethernet padding past the IP packet, and are answered. The
    // program takes frames that hold the IPv4 and UDP headers (42 bytes);
    // from there to 57 the IP packet is cut, so the tracker drops them.
    for len in 0..=60usize {
        let txid = 1000 + len as i32;
        let mut cut = eth4(&good4(txid));
        assert_eq!(cut.len(), 58);
        cut.resize(len, 0);
        frames.push((txid, cut));
        match len {
            58.. => {
                answered.insert(txid);
            }
            42.. => bad += 1,
            _ => {}
        }
    }
    // The same with IPv6: 78 bytes whole; the program takes 62 and more.
    for len in 54..=80usize {
        let txid = 5000 + len as i32;
        let mut cut = eth6(&good6(txid));
        assert_eq!(cut.len(), 78);
        cut.resize(len, 0);
        frames.push((txid, cut));
        match len {
            78.. => {
                answered.insert(txid);
            }
            62.. => bad += 1,
            _ => {}
        }
    }

    // Taken by the program (IPv4 without options, not a fragment, to the
    // tracker's address and port) but not a datagram the tracker answers.
    let v4_bad: [(i32, Spoil); 5] = [
        // The UDP length past the IP payload.
        (2001, |ip| ip[24..26].copy_from_slice(&34u16.to_be_bytes())),
        // The UDP length short of the IP payload.
        (2002, |ip| ip[24..26].copy_from_slice(&20u16.to_be_bytes())),
        // The IP total length past the frame.
        (2003, |ip| {
            ip[2..4].copy_from_slice(&64u16.to_be_bytes());
            fix_ipv4_checksum(ip);
        }),
        // A bad IPv4 header checksum.
        (2004, |ip| ip[10] ^= 0x5a),
        // Source port 0.
        (2005, |ip| ip[20..22].copy_from_slice(&[0, 0])),
    ];
    for (txid, spoil) in v4_bad {
        let mut ip = good4(txid);
        spoil(&mut ip);
        frames.push((txid, eth4(&ip)));
        bad += 1;
    }
    let v6_bad: [(i32, Spoil); 2] = [
        // The payload length past the frame.
        (4002, |ip| ip[4..6].copy_from_slice(&44u16.to_be_bytes())),
        // The UDP length past the IP payload.
        (4003, |ip| ip[44..46].copy_from_slice(&28u16.to_be_bytes())),
    ];
    for (txid, spoil) in v6_bad {
        let mut ip = good6(txid);
        spoil(&mut ip);
        frames.push((txid, eth6(&ip)));
        bad += 1;
    }

    // Passed to the kernel, which hands them to the tracker's UDP socket:
    // answered over the socket path, never counted as bad frames.
    // IPv4 with options (IHL 6: three no-ops and an end of list).
    let segment = |txid| {
        let payload = connect_packet(txid);
        udp(
            &pseudo_v4(src4, dst4, 8 + payload.len()),
            RAW_PORT,
            XDP_PORT,
            &payload,
        )
    };
    frames.push((
        3001,
        eth4(&ipv4(
            src4,
            dst4,
            IPPROTO_UDP,
            7,
            0,
            &[1, 1, 1, 0],
            &segment(3001),
        )),
    ));
    answered.insert(3001);
    // A datagram in two fragments: MF on the first, an offset on the second.
    let whole = segment(3002);
    assert_eq!(whole.len(), 24);
    frames.push((
        3002,
        eth4(&ipv4(
            src4,
            dst4,
            IPPROTO_UDP,
            0x4242,
            0x2000,
            &[],
            &whole[..16],
        )),
    ));
    frames.push((
        3002,
        eth4(&ipv4(src4, dst4, IPPROTO_UDP, 0x4242, 2, &[], &whole[16..])),
    ));
    answered.insert(3002);
    // A first fragment whose rest never comes: the kernel keeps it, then
    // drops it.
    let lone = segment(3003);
    frames.push((
        3003,
        eth4(&ipv4(
            src4,
            dst4,
            IPPROTO_UDP,
            0x4343,
            0x2000,
            &[],
            &lone[..16],
        )),
    ));
    // IPv6 with a hop-by-hop options header (a PadN option) before UDP.
    let payload = connect_packet(4001);
    let mut hop_by_hop = vec![IPPROTO_UDP, 0, 1, 4, 0, 0, 0, 0];
    hop_by_hop.extend(udp(
        &pseudo_v6(src6, dst6, 8 + payload.len()),
        RAW_PORT,
        XDP_PORT,
        &payload,
    ));
    frames.push((4001, eth6(&ipv6(src6, dst6, IPV6_HOP_BY_HOP, &hop_by_hop))));
    answered.insert(4001);

    for (txid, frame) in &frames {
        match link.send(frame) {
            Ok(()) => {}
            // Shorter than an Ethernet header: the kernel refuses it.
            Err(e) if frame.len() < 14 && e.raw_os_error() == Some(libc::EINVAL) => {}
            Err(e) => panic!("sending frame {txid} ({} bytes): {e}", frame.len()),
        }
    }

    // Every answer on the link, until a while after the last expected one
    // (late answers to frames that should get none would come then).
    let mut on_link: Vec<(i32, SocketAddr, Vec<u8>)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut quiet_until: Option<Instant> = None;
    loop {
        let until = quiet_until.unwrap_or(deadline).min(deadline);
        let left = until.saturating_duration_since(Instant::now());
        let to_us = |c: &Captured| udp_in_frame(c).is_some_and(|d| d.dst.port() == RAW_PORT);
        let Some(captured) = capture.next(left, to_us) else {
            break;
        };
        // udp_in_frame checks the answer's checksums and lengths.
        let datagram = udp_in_frame(&captured).unwrap();
        let txid = match datagram.payload.get(4..8) {
            Some(txid) => i32::from_be_bytes(txid.try_into().unwrap()),
            None => -1,
        };
        assert_eq!(
            captured.vlan, None,
            "{txid}: a tag on an answer to an untagged frame"
        );
        // The answers over AF_XDP (to the whole frames of the cut-short
        // runs) leave with their UDP checksum whole, and it was checked.
        if (1000..1100).contains(&txid) || (5000..5100).contains(&txid) {
            assert!(
                !captured.checksum_partial,
                "{txid}: an AF_XDP answer with a partial checksum"
            );
        }
        on_link.push((txid, datagram.src, datagram.payload.to_vec()));
        let all_in = answered
            .iter()
            .all(|t| on_link.iter().any(|(txid, _, _)| txid == t));
        if all_in && quiet_until.is_none() {
            quiet_until = Some(Instant::now() + Duration::from_millis(700));
        }
    }
    // And what reached the client's sockets.
    let mut in_sockets: Vec<(i32, SocketAddr, Vec<u8>)> = Vec::new();
    for sock in &listeners {
        sock.set_nonblocking(true).unwrap();
        let mut buf = [0u8; 2048];
        while let Ok((n, from)) = sock.recv_from(&mut buf) {
            let txid = match buf[..n].get(4..8) {
                Some(txid) => i32::from_be_bytes(txid.try_into().unwrap()),
                None => -1,
            };
            in_sockets.push((txid, from, buf[..n].to_vec()));
        }
    }
    let expected: Vec<i32> = answered.iter().copied().collect();
    for (place, got) in [
        ("on the link", &on_link),
        ("in the client's sockets", &in_sockets),
    ] {
        let mut ids: Vec<i32> = got.iter().map(|(txid, _, _)| *txid).collect();
        ids.sort();
        assert_eq!(
            ids, expected,
            "answers {place} (by transaction id) against those expected; every answer: {got:02x?}"
        );
        for (txid, from, answer) in got {
            let v6 = *txid >= 4000;
            assert_eq!(*from, SocketAddr::new(hosts.addr(Side::Srv, v6), XDP_PORT));
            assert_eq!(answer.len(), 16, "{txid}: {answer:02x?}");
            assert_eq!(answer[..4], [0; 4], "{txid}: not a connect answer");
        }
    }

    assert!(tracker.is_running(), "the tracker died on the frames");
    settles_at(bad, "tracker_udp_errors_total{kind=\"bad_frame\"}", || {
        bad_frames(&hosts, &tracker)
    });
    // The whole frames (three of each family, two of them padded) went
    // over AF_XDP; options, fragments and the hop-by-hop header over the
    // sockets.
    assert_eq!(connects(&tracker, "xdp", "ipv4"), before[2] + 3);
    assert_eq!(connects(&tracker, "xdp", "ipv6"), before[3] + 3);
    assert_eq!(
        connects(&tracker, "socket", "ipv4"),
        before[0] + 2,
        "IPv4 options and fragments, through the kernel"
    );
    assert_eq!(
        connects(&tracker, "socket", "ipv6"),
        before[1] + 1,
        "the hop-by-hop header, through the kernel"
    );

    // Still serving over AF_XDP.
    for v6 in [false, true] {
        let to = SocketAddr::new(hosts.addr(Side::Srv, v6), XDP_PORT);
        connect(&client_socket(&hosts, to), to);
    }
    assert_eq!(connects(&tracker, "xdp", "ipv4"), before[2] + 4);
    assert_eq!(connects(&tracker, "xdp", "ipv6"), before[3] + 4);
    assert!(tracker.is_running());
}

/// One hand-made request of `what_the_kernel_drops_is_dropped_over_xdp_too`,
/// sent to each tracker of the pair: what it is, and whether the socket
/// path answers it.
struct Case {
    what: String,
    answered: bool,
    /// The frame for the tracker on `port`, carrying transaction `txid`.
    frame: Box<dyn Fn(u16, i32) -> Vec<u8>>,
}

/// The audit of issue 42: raw frames that the kernel's stack drops, or
/// cannot answer, each sent to the tracker with AF_XDP and to the one
/// without; both must answer the same frames (and only the ordinary ones),
/// and AF_XDP must still serve.
#[test]
fn what_the_kernel_drops_is_dropped_over_xdp_too() {
    use frame::{ethernet, ethernet_tagged, udp_v4, udp_v6, ETHERTYPE_IPV4, ETHERTYPE_IPV6};
    use std::net::{Ipv4Addr, Ipv6Addr};
    let hosts = TwoHosts::new();
    let (mut xdp, mut sockets) = start_pair(&hosts, |_| String::new());
    let (srv_mac, cli_mac) = (hosts.mac(Side::Srv), hosts.mac(Side::Cli));
    let (cli4, srv4, cli6, srv6) = (hosts.cli_v4, hosts.srv_v4, hosts.cli_v6, hosts.srv_v6);

    // Routes the server's kernel cannot answer by: a blackhole, and a
    // route out of another interface (a second veth pair), set after the
    // start, so that the trackers must follow the change.
    for args in [
        &[
            "link", "add", "name", "veth-t1", "type", "veth", "peer", "name", "veth-t2",
        ][..],
        &["link", "set", "veth-t1", "up"],
        &["link", "set", "veth-t2", "up"],
        &["route", "add", "blackhole", "198.51.100.0/24"],
        &["-6", "route", "add", "blackhole", "2001:db8:b1ac::/48"],
        &["route", "add", "203.0.113.0/24", "dev", "veth-t1"],
        &["-6", "route", "add", "2001:db8:d0::/48", "dev", "veth-t1"],
    ] {
        hosts.ip(Side::Srv, args);
    }
    // The trackers read the table again a few milliseconds after a change.
    std::thread::sleep(Duration::from_millis(500));

    let cli_ifindex = hosts.ifindex(Side::Cli);
    let (link, capture) = hosts.cli(|| (RawLink::new(cli_ifindex), Capture::new(cli_ifindex)));

    // A connect from `src`, port RAW_PORT (or the tracker's own port, with
    // `own_port`), in an untagged frame to `macs.0` from `macs.1`, its IPv4
    // or IPv6 packet edited by `edit`.
    fn connect4(
        macs: ([u8; 6], [u8; 6]),
        src: Ipv4Addr,
        dst: Ipv4Addr,
        own_port: bool,
        edit: fn(&mut Vec<u8>),
    ) -> impl Fn(u16, i32) -> Vec<u8> {
        move |port, txid| {
            let sport = if own_port { port } else { RAW_PORT };
            let mut ip = udp_v4(src, dst, sport, port, &connect_packet(txid));
            edit(&mut ip);
            ethernet(macs.0, macs.1, ETHERTYPE_IPV4, &ip)
        }
    }
    fn connect6(
        macs: ([u8; 6], [u8; 6]),
        src: Ipv6Addr,
        dst: Ipv6Addr,
        own_port: bool,
        edit: fn(&mut Vec<u8>),
    ) -> impl Fn(u16, i32) -> Vec<u8> {
        move |port, txid| {
            let sport = if own_port { port } else { RAW_PORT };
            let mut ip = udp_v6(src, dst, sport, port, &connect_packet(txid));
            edit(&mut ip);
            ethernet(macs.0, macs.1, ETHERTYPE_IPV6, &ip)
        }
    }
    let macs = (srv_mac, cli_mac);
    let same: fn(&mut Vec<u8>) = |_| {};
    let mut cases: Vec<Case> = Vec::new();
    let mut case = |what: &str, answered: bool, frame: Box<dyn Fn(u16, i32) -> Vec<u8>>| {
        cases.push(Case {
            what: what.to_string(),
            answered,
            frame,
        })
    };

    // Ordinary requests, answered by both.
    case(
        "IPv4",
        true,
        Box::new(connect4(macs, cli4, srv4, false, same)),
    );
    case(
        "IPv6",
        true,
        Box::new(connect6(macs, cli6, srv6, false, same)),
    );
    // No UDP checksum, which IPv4 allows.
    let no_checksum: fn(&mut Vec<u8>) = |ip| ip[26..28].copy_from_slice(&[0, 0]);
    case(
        "IPv4 without a UDP checksum",
        true,
        Box::new(connect4(macs, cli4, srv4, false, no_checksum)),
    );
    // The broadcast MAC address: the kernel takes it (the program passes
    // it, and the tracker's sockets answer).
    for v6 in [false, true] {
        let what = format!("{} to the broadcast MAC", if v6 { "IPv6" } else { "IPv4" });
        let frame: Box<dyn Fn(u16, i32) -> Vec<u8>> = if v6 {
            Box::new(connect6(([0xff; 6], cli_mac), cli6, srv6, false, same))
        } else {
            Box::new(connect4(([0xff; 6], cli_mac), cli4, srv4, false, same))
        };
        case(&what, true, frame);
    }

    // Spoofed and martian sources.
    let subnet_broadcast = Ipv4Addr::from(u32::from(srv4) | 0xff);
    for src in [
        "127.0.0.1",
        "0.0.0.0",
        "255.255.255.255",
        "224.0.0.1",
        "192.0.2.1",    // no route
        "198.51.100.7", // a blackhole
        "203.0.113.7",  // a route out of another interface
    ] {
        let ip: Ipv4Addr = src.parse().unwrap();
        let what = format!("from {src}");
        case(
            &what,
            false,
            Box::new(connect4(macs, ip, srv4, false, same)),
        );
    }
    case(
        "from the subnet's broadcast address",
        false,
        Box::new(connect4(macs, subnet_broadcast, srv4, false, same)),
    );
    case(
        "from the server's own IPv4 address and port",
        false,
        Box::new(connect4(macs, srv4, srv4, true, same)),
    );
    for src in [
        "::1",
        "ff02::1",
        "::",
        "2001:db8:ffff::1", // no route
        "2001:db8:b1ac::7", // a blackhole
        "2001:db8:d0::7",   // a route out of another interface
    ] {
        let ip: Ipv6Addr = src.parse().unwrap();
        let what = format!("from {src}");
        case(
            &what,
            false,
            Box::new(connect6(macs, ip, srv6, false, same)),
        );
    }
    let mapped = cli4.to_ipv6_mapped();
    case(
        "from the client's IPv4-mapped address",
        false,
        Box::new(connect6(macs, mapped, srv6, false, same)),
    );
    case(
        "from the server's own IPv6 address and port",
        false,
        Box::new(connect6(macs, srv6, srv6, true, same)),
    );

    // Frames for another host's MAC address.
    let other_mac = [0x02, 0x42, 0, 0, 0, 0x99];
    case(
        "IPv4 to another MAC",
        false,
        Box::new(connect4((other_mac, cli_mac), cli4, srv4, false, same)),
    );
    case(
        "IPv6 to another MAC",
        false,
        Box::new(connect6((other_mac, cli_mac), cli6, srv6, false, same)),
    );

    // Wrong or missing UDP checksums.
    let wrong4: fn(&mut Vec<u8>) = |ip| ip[26] ^= 0x5a;
    let wrong6: fn(&mut Vec<u8>) = |ip| ip[46] ^= 0x5a;
    let none6: fn(&mut Vec<u8>) = |ip| ip[46..48].copy_from_slice(&[0, 0]);
    case(
        "IPv4 with a wrong UDP checksum",
        false,
        Box::new(connect4(macs, cli4, srv4, false, wrong4)),
    );
    case(
        "IPv6 with a wrong UDP checksum",
        false,
        Box::new(connect6(macs, cli6, srv6, false, wrong6)),
    );
    case(
        "IPv6 without a UDP checksum",
        false,
        Box::new(connect6(macs, cli6, srv6, false, none6)),
    );

    // 802.1Q tags of a VLAN the server has no interface for (one tag, and
    // two).
    for (tags, name) in [(&[7u16][..], "VLAN 7"), (&[7, 8], "VLANs 7 and 8")] {
        let tags = tags.to_vec();
        let tags6 = tags.clone();
        case(
            &format!("IPv4 tagged for {name}"),
            false,
            Box::new(move |port, txid| {
                let ip = udp_v4(cli4, srv4, RAW_PORT, port, &connect_packet(txid));
                ethernet_tagged(srv_mac, cli_mac, &tags, ETHERTYPE_IPV4, &ip)
            }),
        );
        case(
            &format!("IPv6 tagged for {name}"),
            false,
            Box::new(move |port, txid| {
                let ip = udp_v6(cli6, srv6, RAW_PORT, port, &connect_packet(txid));
                ethernet_tagged(srv_mac, cli_mac, &tags6, ETHERTYPE_IPV6, &ip)
            }),
        );
    }

    // Each case to each tracker: transaction id 10000 + 100 * case, + 1
    // for the tracker without AF_XDP.
    let txid = |case: usize, port: u16| 10_000 + 100 * case as i32 + i32::from(port == SOCKET_PORT);
    for (i, case) in cases.iter().enumerate() {
        for port in [XDP_PORT, SOCKET_PORT] {
            link.send(&(case.frame)(port, txid(i, port)))
                .unwrap_or_else(|e| panic!("sending {}: {e}", case.what));
        }
    }

    // Every answer from either tracker on the link, until a while after
    // the last one expected.
    let expected: usize = 2 * cases.iter().filter(|c| c.answered).count();
    let mut answers: Vec<(u16, i32, SocketAddr)> = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut quiet_until: Option<Instant> = None;
    loop {
        let until = quiet_until.unwrap_or(deadline).min(deadline);
        let from_a_tracker = |c: &Captured| {
            udp_in_frame(c).is_some_and(|d| {
                [XDP_PORT, SOCKET_PORT].contains(&d.src.port())
                    && [IpAddr::from(srv4), IpAddr::from(srv6)].contains(&d.src.ip())
            })
        };
        let Some(captured) = capture.next(
            until.saturating_duration_since(Instant::now()),
            from_a_tracker,
        ) else {
            break;
        };
        let datagram = udp_in_frame(&captured).unwrap();
        let txid = match datagram.payload.get(4..8) {
            Some(txid) => i32::from_be_bytes(txid.try_into().unwrap()),
            None => -1,
        };
        answers.push((datagram.src.port(), txid, datagram.dst));
        if answers.len() >= expected && quiet_until.is_none() {
            quiet_until = Some(Instant::now() + Duration::from_millis(1000));
        }
    }

    let mut wrong = Vec::new();
    for (i, case) in cases.iter().enumerate() {
        for port in [XDP_PORT, SOCKET_PORT] {
            let got = answers
                .iter()
                .filter(|(from, id, _)| *from == port && *id == txid(i, port))
                .count();
            let tracker = if port == XDP_PORT {
                "with AF_XDP"
            } else {
                "without"
            };
            if got != usize::from(case.answered) {
                wrong.push(format!(
                    "{}: {got} answers from the tracker {tracker}, {} expected",
                    case.what,
                    usize::from(case.answered)
                ));
            }
        }
    }
    assert!(
        wrong.is_empty(),
        "{}\nevery answer (port, transaction, to): {answers:?}",
        wrong.join("\n")
    );

    // The ordinary ones over AF_XDP, the broadcast MAC ones over its
    // sockets, the rest dropped, each counted by its kind.
    let errors = |kind| udp_errors(&hosts, &xdp, "xdp", kind);
    settles_at(
        9,
        "tracker_udp_errors_total{path=\"xdp\",kind=\"no_route\"}",
        || errors("no_route"),
    );
    assert_eq!(errors("bad_udp_checksum"), 3);
    assert_eq!(errors("bad_frame"), 0);
    assert_eq!(requests(&hosts, &xdp, "xdp", "connect"), 3);
    let before = requests(&hosts, &sockets, "socket", "connect");
    assert!(
        requests(&hosts, &xdp, "socket", "connect") >= 2,
        "the broadcast MAC's requests, over the sockets"
    );

    // And AF_XDP still serves clients.
    for v6 in [false, true] {
        let to = SocketAddr::new(hosts.addr(Side::Srv, v6), XDP_PORT);
        connect(&client_socket(&hosts, to), to);
        let to = SocketAddr::new(hosts.addr(Side::Srv, v6), SOCKET_PORT);
        connect(&client_socket(&hosts, to), to);
    }
    assert_eq!(requests(&hosts, &xdp, "xdp", "connect"), 5);
    assert_eq!(requests(&hosts, &sockets, "socket", "connect"), before + 2);
    assert!(xdp.is_running() && sockets.is_running());
}

/// A UDP datagram read from a frame, its checksums verified.
struct InFrame<'a> {
    src: SocketAddr,
    dst: SocketAddr,
    payload: &'a [u8],
}

/// The UDP datagram in a captured frame (IPv4 without options, or IPv6
/// with UDP next), if it is one; panics when its IPv4 header checksum or
/// its UDP checksum is wrong, or its lengths disagree. The UDP checksum of
/// a frame whose sender left it to the hardware (a host's stack over a
/// veth: the kernel's answers) holds a partial sum, and is not checked.
fn udp_in_frame(captured: &Captured) -> Option<InFrame<'_>> {
    let frame = &captured.frame;
    let ethertype = u16::from_be_bytes(frame.get(12..14)?.try_into().unwrap());
    let ip = &frame[14..];
    let (src, dst, udp, pseudo) = match ethertype {
        frame::ETHERTYPE_IPV4 if ip.first() == Some(&0x45) && ip.get(9) == Some(&17) => {
            assert_eq!(frame::checksum(&[&ip[..20]]), 0, "IPv4 header checksum");
            let total = usize::from(u16::from_be_bytes([ip[2], ip[3]]));
            let src = std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&ip[12..16]).unwrap());
            let dst = std::net::Ipv4Addr::from(<[u8; 4]>::try_from(&ip[16..20]).unwrap());
            let udp = &ip[20..total];
            (
                src.into(),
                dst.into(),
                udp,
                frame::pseudo_v4(src, dst, udp.len()),
            )
        }
        frame::ETHERTYPE_IPV6
            if ip.first().is_some_and(|b| b >> 4 == 6) && ip.get(6) == Some(&17) =>
        {
            let len = usize::from(u16::from_be_bytes([ip[4], ip[5]]));
            let src = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&ip[8..24]).unwrap());
            let dst = std::net::Ipv6Addr::from(<[u8; 16]>::try_from(&ip[24..40]).unwrap());
            let udp = &ip[40..40 + len];
            assert_ne!(udp[6..8], [0, 0], "IPv6 requires a UDP checksum");
            (
                src.into(),
                dst.into(),
                udp,
                frame::pseudo_v6(src, dst, udp.len()),
            )
        }
        _ => return None,
    };
    let (src, dst): (IpAddr, IpAddr) = (src, dst);
    assert_eq!(
        usize::from(u16::from_be_bytes([udp[4], udp[5]])),
        udp.len(),
        "UDP length"
    );
    if udp[6..8] != [0, 0] && !captured.checksum_partial {
        assert_eq!(frame::checksum(&[&pseudo, udp]), 0, "UDP checksum");
    }
    let port = |at: usize| u16::from_be_bytes([udp[at], udp[at + 1]]);
    Some(InFrame {
        src: SocketAddr::new(src, port(0)),
        dst: SocketAddr::new(dst, port(2)),
        payload: &udp[8..],
    })
}

#[test]
fn a_stop_and_a_kill_leave_no_program_attached() {
    let hosts = TwoHosts::new();
    assert_eq!(hosts.xdp_attached(Side::Srv), None);

    let tracker = start_xdp(&hosts, false);
    tracker.signal(libc::SIGTERM);
    let (code, stderr) = tracker.wait_exit(Duration::from_secs(15));
    assert_eq!(code, Some(0), "the stop's exit status; stderr:\n{stderr}");
    hosts.wait_no_xdp(Side::Srv, Duration::from_secs(2), "after a stop (SIGTERM)");

    let tracker = start_xdp(&hosts, false);
    tracker.signal(libc::SIGKILL);
    let (code, _) = tracker.wait_exit(Duration::from_secs(15));
    assert_eq!(code, None, "killed by SIGKILL");
    // The BPF link dies with the last descriptor to it: the process's.
    hosts.wait_no_xdp(Side::Srv, Duration::from_secs(5), "after SIGKILL");

    // Nothing left in the way of the next start, which serves over AF_XDP.
    let tracker = start_xdp(&hosts, false);
    let to = SocketAddr::new(hosts.srv_v4.into(), XDP_PORT);
    connect(&client_socket(&hosts, to), to);
    assert_eq!(requests(&hosts, &tracker, "xdp", "connect"), 1);
    assert_eq!(hosts.xdp_attached(Side::Cli), None);
}

/// The config of a tracker with AF_XDP that hands over, or takes over,
/// through the control socket at `control`.
fn handover_config(control: &Path) -> String {
    format!(
        "{}\n[runtime]\ncontrol_socket = \"{}\"\n",
        config(true),
        control.display()
    )
}

/// A tracker serving UDP on `XDP_PORT` of both of the server's addresses,
/// with metrics, and `config`.
fn xdp_builder(hosts: &TwoHosts, config: &str) -> TrackerBuilder {
    Tracker::builder()
        .udp(Some(SocketAddr::new(hosts.srv_v4.into(), XDP_PORT)))
        .udp(Some(SocketAddr::new(hosts.srv_v6.into(), XDP_PORT)))
        .metrics()
        .config(config)
}

/// A tracker serving what `old` serves (its UDP addresses and its metrics
/// listener, which it takes over) with `config`; the caller adds
/// `--take-over`.
fn successor(old: &Tracker, config: &str) -> TrackerBuilder {
    let mut builder = Tracker::builder();
    for &addr in &old.udp {
        builder = builder.udp(Some(addr));
    }
    builder
        .metrics_on(old.metrics.expect("a tracker started with metrics"))
        .config(config)
}

/// What a tracker that serves as root keeps: CAP_CHOWN, CAP_DAC_OVERRIDE,
/// CAP_DAC_READ_SEARCH, CAP_FOWNER.
const ROOT_FILES: u64 = 0xf;

/// A process's capability sets (CapEff, CapPrm, CapInh, CapAmb), as
/// /proc/PID/status has them.
fn capability_sets(pid: u32) -> [u64; 4] {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    ["CapEff:", "CapPrm:", "CapInh:", "CapAmb:"].map(|name| {
        let hex = status
            .lines()
            .find_map(|l| l.strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name} line in:\n{status}"));
        u64::from_str_radix(hex.trim(), 16).unwrap()
    })
}

/// Run in the child before the tracker's exec: gives up every capability,
/// the bounding set's too, so that root's exec grants none.
fn without_capabilities() -> std::io::Result<()> {
    for cap in 0..64 {
        // SAFETY: prctl with plain integers (async-signal-safe).
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap, 0, 0, 0) } != 0 {
            break;
        }
    }
    #[repr(C)]
    struct Header {
        version: u32,
        pid: libc::c_int,
    }
    let mut header = Header {
        version: 0x2008_0522,
        pid: 0,
    };
    let data = [0u32; 6];
    // SAFETY: a version-3 header and its two (zeroed) data words; then a
    // prctl with plain integers.
    unsafe {
        if libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) != 0
            || libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// The seeders' port, in the swarms made before a hand-over.
const SEEDER_PORT: u16 = 6881;
/// The port the paced client announces as a leecher.
const PACED_PORT: u16 = 7100;
/// The most requests the paced client sends, whatever happens.
const PACED_MAX: usize = 20_000;

/// What a client that sent requests at a steady pace saw.
struct Paced {
    /// When each request went; its index is its transaction id.
    sent: Vec<Instant>,
    /// Whether each was answered.
    answered: Vec<bool>,
    /// Answers that were not what any request of ours asks for (or came
    /// twice).
    wrong: Vec<String>,
}

/// Request `i` of the paced client: a connect when `i` is even, an
/// announce with `id` (as the leecher at `PACED_PORT` of one of `hashes`,
/// in turn) when it is odd; `i` is its transaction id.
fn paced_request(i: usize, id: ConnectionId, hashes: &[InfoHash]) -> Vec<u8> {
    let txid = i as i32;
    if i.is_multiple_of(2) {
        connect_packet(txid)
    } else {
        let hash = hashes[(i / 2) % hashes.len()];
        udp_announce_wanting(id, txid, hash, PACED_PORT, AnnounceEvent::None, 1000, 10)
    }
}

/// Sends `paced_request`s from `sock` to `to`, each at least `every` after
/// the one before (one that is late is not made up for by a burst), until
/// `stop` is set; and gathers the answers, until every request has one or
/// `linger` after the last was sent.
fn send_paced(
    sock: UdpSocket,
    to: SocketAddr,
    id: ConnectionId,
    hashes: &[InfoHash],
    every: Duration,
    stop: &AtomicBool,
    linger: Duration,
) -> Paced {
    let reader = sock.try_clone().expect("clone the paced client's socket");
    reader
        .set_read_timeout(Some(Duration::from_millis(20)))
        .unwrap();
    // When the last request went, and how many went.
    let done: Mutex<Option<(Instant, usize)>> = Mutex::new(None);
    std::thread::scope(|scope| {
        let receiver = scope.spawn(|| {
            let mut answered = vec![false; PACED_MAX];
            let mut count = 0;
            let mut wrong = Vec::new();
            let mut buf = [0u8; 2048];
            loop {
                match reader.recv_from(&mut buf) {
                    Ok((n, from)) => {
                        let txid = match Response::parse(&buf[..n], IpFamily::of(to.ip())) {
                            Ok(Response::Connect {
                                transaction_id: TransactionId(txid),
                                ..
                            }) if txid % 2 == 0 => Some(txid),
                            Ok(Response::Announce {
                                transaction_id: TransactionId(txid),
                                ..
                            }) if txid % 2 == 1 => Some(txid),
                            other => {
                                wrong.push(format!("{other:?}"));
                                None
                            }
                        };
                        match txid.and_then(|t| usize::try_from(t).ok()) {
                            _ if from != to => wrong.push(format!("an answer from {from}")),
                            Some(i) if i < PACED_MAX && !answered[i] => {
                                answered[i] = true;
                                count += 1;
                            }
                            Some(i) => wrong.push(format!("transaction {i} answered again")),
                            None => {}
                        }
                    }
                    Err(e)
                        if matches!(
                            e.kind(),
                            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                        ) => {}
                    Err(e) => panic!("the paced client's receive: {e}"),
                }
                if let Some((last, total)) = *done.lock().unwrap() {
                    if count >= total || last.elapsed() >= linger {
                        answered.truncate(total);
                        break (answered, wrong);
                    }
                }
            }
        });
        let mut sent: Vec<Instant> = Vec::new();
        while !stop.load(Ordering::Relaxed) && sent.len() < PACED_MAX {
            if let Some(&last) = sent.last() {
                let wait = (last + every).saturating_duration_since(Instant::now());
                if !wait.is_zero() {
                    std::thread::sleep(wait);
                }
            }
            sock.send_to(&paced_request(sent.len(), id, hashes), to)
                .expect("the paced client's send");
            sent.push(Instant::now());
        }
        *done.lock().unwrap() = Some((Instant::now(), sent.len()));
        let (answered, wrong) = receiver.join().expect("the paced client's receiver");
        Paced {
            sent,
            answered,
            wrong,
        }
    })
}

/// Sets its flag when dropped: a paced client stops even when the test
/// panics.
struct SetOnDrop<'a>(&'a AtomicBool);

impl Drop for SetOnDrop<'_> {
    fn drop(&mut self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// Gives `sock` a receive buffer that holds a burst of answers (the
/// requests the sockets kept during a hand-over, answered at once), past
/// `net.core.rmem_max` (as root).
fn large_receive_buffer(sock: &UdpSocket) {
    use std::os::fd::AsRawFd;
    let bytes: libc::c_int = 8 << 20;
    // SAFETY: an int option of the size given, on a socket we own.
    let rc = unsafe {
        libc::setsockopt(
            sock.as_raw_fd(),
            libc::SOL_SOCKET,
            libc::SO_RCVBUFFORCE,
            &bytes as *const libc::c_int as *const libc::c_void,
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    assert_eq!(rc, 0, "SO_RCVBUFFORCE: {}", std::io::Error::last_os_error());
}

/// The kernel's UDP counter `name` (`RcvbufErrors`, `InErrors`...) in
/// `side`'s namespace, from /proc/net/snmp.
fn kernel_udp_counter(hosts: &TwoHosts, side: Side, name: &str) -> u64 {
    let out = hosts.exec(side, "cat", &["/proc/net/snmp"]);
    let text = String::from_utf8_lossy(&out.stdout);
    let mut udp = text.lines().filter(|l| l.starts_with("Udp:"));
    let (names, values) = (udp.next().unwrap_or(""), udp.next().unwrap_or(""));
    names
        .split_whitespace()
        .zip(values.split_whitespace())
        .find(|(n, _)| *n == name)
        .and_then(|(_, v)| v.parse().ok())
        .unwrap_or_else(|| panic!("no Udp {name} in /proc/net/snmp of {side:?}:\n{text}"))
}

/// The answers from `from` that a capture on the client's link sees until
/// `stop` is set (and it has been quiet for a moment): their transaction
/// ids in the order they came, each with whether it came over AF_XDP, whose
/// answers leave with their UDP checksum whole, or from the kernel's
/// sockets, which leave it to the veth's (absent) hardware.
fn answer_paths(capture: &Capture, from: SocketAddr, stop: &AtomicBool) -> Vec<(i32, bool)> {
    let mut seen = Vec::new();
    loop {
        let stopping = stop.load(Ordering::Relaxed);
        let wait = Duration::from_millis(if stopping { 200 } else { 50 });
        let answer = |c: &Captured| udp_in_frame(c).is_some_and(|d| d.src == from);
        match capture.next(wait, answer) {
            Some(captured) => {
                let datagram = udp_in_frame(&captured).unwrap();
                if let Some(txid) = datagram.payload.get(4..8) {
                    let txid = i32::from_be_bytes(txid.try_into().unwrap());
                    seen.push((txid, !captured.checksum_partial));
                }
            }
            None if stopping => return seen,
            None => {}
        }
    }
}

#[test]
fn a_hand_over_keeps_serving_over_xdp() {
    let hosts = TwoHosts::new();
    let control = TempPath::new("tracker-test-xdp-control", "sock");
    let state = TempPath::new("tracker-test-xdp-handover", "state");
    let config = handover_config(&control.0);
    let mut old = start_built(&hosts, xdp_builder(&hosts, &config).state_file(&state.0));
    let old_prog = hosts
        .xdp_prog_id(Side::Srv)
        .expect("the old tracker's XDP program is attached");
    // Attached, it holds no capability but root's access to files, as it
    // serves as root (started with all).
    assert_eq!(
        capability_sets(old.pid()),
        [ROOT_FILES; 4],
        "the old tracker's"
    );
    let to = SocketAddr::new(hosts.srv_v4.into(), XDP_PORT);
    let bind = format!("{}:0", hosts.cli_v4);

    // A seeder on four torrents, two of each worker, over AF_XDP.
    let hashes: Vec<InfoHash> = (0..4u32).map(|k| hash(300 + k, k as usize % 2)).collect();
    let mut seeder = hosts.cli(|| Client::new(&bind, to));
    let seeder_addr = SocketAddr::new(hosts.cli_v4.into(), SEEDER_PORT);
    for &h in &hashes {
        let announced = seeder.announce(h, SEEDER_PORT, AnnounceEvent::Started, 0, -1);
        assert_eq!((announced.seeders, announced.leechers), (1, 0));
    }
    assert_eq!(requests(&hosts, &old, "xdp", "announce"), 4);
    assert_eq!(requests(&hosts, &old, "socket", "announce"), 0);

    // A client that sends a request every millisecond across the
    // hand-over: connects, and announces (as a leecher of the first two
    // torrents) with an id that both trackers take, as they share the key.
    // And a capture of its answers on the link, which tells the paths.
    let paced = client_socket(&hosts, to);
    large_receive_buffer(&paced);
    let id = connect(&paced, to);
    let cli_ifindex = hosts.ifindex(Side::Cli);
    let capture = hosts.cli(|| Capture::new(cli_ifindex));
    let dropped_before = [
        kernel_udp_counter(&hosts, Side::Cli, "RcvbufErrors"),
        kernel_udp_counter(&hosts, Side::Srv, "RcvbufErrors"),
    ];
    let (stop, captured) = (AtomicBool::new(false), AtomicBool::new(false));
    let (paced, paths, new, old_log, spawned, exited) = std::thread::scope(|scope| {
        let _stop = (SetOnDrop(&stop), SetOnDrop(&captured));
        let paths = scope.spawn(|| answer_paths(&capture, to, &captured));
        let client = scope.spawn(|| {
            send_paced(
                paced,
                to,
                id,
                &hashes[..2],
                Duration::from_millis(1),
                &stop,
                Duration::from_secs(2),
            )
        });
        std::thread::sleep(Duration::from_millis(1000));
        let spawned = Instant::now();
        // Without any capability, as a tracker that holds none starts it
        // on SIGUSR2: it takes the AF_XDP sockets over, attaching nothing.
        let mut new = hosts.srv(|| {
            successor(&old, &config)
                .state_file(&state.0)
                .pre_exec(without_capabilities)
                .arg("--take-over")
                .spawn()
        });
        let deadline = spawned + Duration::from_secs(20);
        while old.is_running() {
            if !new.is_running() {
                let (code, log) = new.wait_exit(Duration::from_secs(1));
                panic!("the new tracker exited ({code:?}) before the old one:\n{log}");
            }
            assert!(
                Instant::now() < deadline,
                "the old tracker did not exit within 20 s of the new one's start"
            );
            std::thread::sleep(Duration::from_millis(5));
        }
        let exited = Instant::now();
        let (code, old_log) = old.wait_exit(Duration::from_secs(1));
        assert_eq!(code, Some(0), "the old tracker's exit; its log:\n{old_log}");
        // A second of requests to the new tracker alone.
        std::thread::sleep(Duration::from_millis(1000));
        stop.store(true, Ordering::Relaxed);
        let paced = client.join().expect("the paced client");
        captured.store(true, Ordering::Relaxed);
        let paths = paths.join().expect("the capture");
        (paced, paths, new, old_log, spawned, exited)
    });
    let dropped = [
        kernel_udp_counter(&hosts, Side::Cli, "RcvbufErrors") - dropped_before[0],
        kernel_udp_counter(&hosts, Side::Srv, "RcvbufErrors") - dropped_before[1],
    ];
    assert!(old_log.contains("handed over"), "{old_log}");
    assert!(
        old_log.contains("AF_XDP stays attached to") && !old_log.contains("detached"),
        "{old_log}"
    );

    // What the paced client saw, and the link.
    let sent = paced.sent.len();
    let lost: Vec<usize> = (0..sent).filter(|&i| !paced.answered[i]).collect();
    let ms = |at: Instant| {
        if at >= spawned {
            format!("+{}", at.duration_since(spawned).as_millis())
        } else {
            format!("-{}", spawned.duration_since(at).as_millis())
        }
    };
    let sent_after_exit = paced.sent.iter().filter(|&&at| at > exited).count();
    // The runs of answers by path, in the order of their requests: over
    // the old tracker's AF_XDP, then its sockets (which the new tracker
    // took), then over the new tracker's AF_XDP.
    let mut by_txid: Vec<Option<bool>> = vec![None; sent];
    let mut twice = Vec::new();
    for &(txid, over_xdp) in &paths {
        match usize::try_from(txid).ok().and_then(|i| by_txid.get_mut(i)) {
            Some(slot @ None) => *slot = Some(over_xdp),
            Some(Some(_)) => twice.push(txid),
            None => {}
        }
    }
    let mut runs: Vec<(bool, usize, usize)> = Vec::new();
    for (i, path) in by_txid.iter().enumerate() {
        let Some(over_xdp) = *path else { continue };
        match runs.last_mut() {
            Some((xdp, _, last)) if *xdp == over_xdp => *last = i,
            _ => runs.push((over_xdp, i, i)),
        }
    }
    let new_counts = |path| {
        (
            requests(&hosts, &new, path, "connect"),
            requests(&hosts, &new, path, "announce"),
        )
    };
    let (over_xdp, over_sockets) = (new_counts("xdp"), new_counts("socket"));
    let report = format!(
        "{sent} requests sent, 1 ms apart, from {} ms to {} ms after the new tracker's start; \
         the old one exited at {} ms; {} lost (transaction ids, each with when it was sent, in \
         ms from the new tracker's start: {:?}); the answers on the link, by path and runs of \
         transaction ids: {}; the new tracker counts {} connects and {} announces over \
         AF_XDP, {} and {} over its sockets; {} requests were sent after the old one's exit; \
         the kernel's UDP receive buffer drops: {} in the client's namespace, {} in the \
         server's",
        ms(paced.sent[0]),
        ms(*paced.sent.last().unwrap()),
        ms(exited),
        lost.len(),
        lost.iter()
            .map(|&i| (i, ms(paced.sent[i])))
            .collect::<Vec<_>>(),
        runs.iter()
            .map(|&(xdp, first, last)| format!(
                "{} {first} to {last}",
                if xdp { "AF_XDP" } else { "sockets" }
            ))
            .collect::<Vec<_>>()
            .join(", "),
        over_xdp.0,
        over_xdp.1,
        over_sockets.0,
        over_sockets.1,
        sent_after_exit,
        dropped[0],
        dropped[1],
    );
    println!("hand-over over AF_XDP: {report}");
    assert!(paced.wrong.is_empty(), "{:?}; {report}", paced.wrong);
    assert!(twice.is_empty(), "answered twice: {twice:?}; {report}");
    assert!(
        sent_after_exit >= 500,
        "the paced client fell behind: {report}"
    );
    let paths_in_order: Vec<bool> = runs.iter().map(|&(xdp, _, _)| xdp).collect();
    // The program stays attached throughout: what comes while neither
    // tracker reads waits on the sockets' RX rings, and every answer goes
    // out over AF_XDP, none lost.
    assert!(lost.is_empty(), "requests lost in the hand-over: {report}");
    assert_eq!(
        paths_in_order,
        [true],
        "the answers' paths are not AF_XDP throughout: {report}"
    );
    // Each request the new tracker counts is one of the paced client's,
    // over AF_XDP, those sent after the old tracker's exit included.
    let new_total = (over_xdp.0 + over_xdp.1) as usize;
    assert!(new_total <= sent, "{report}");
    assert!(new_total >= sent_after_exit, "{report}");
    assert_eq!(over_sockets, (0, 0), "{report}");

    // The same program, attached throughout; the new tracker holds no
    // capability either.
    assert_eq!(
        hosts.xdp_prog_id(Side::Srv),
        Some(old_prog),
        "the program the old tracker attached: {report}"
    );
    assert_eq!(capability_sets(new.pid()), [0; 4], "the new tracker's");

    // The swarms came along, and are served over AF_XDP: a new leecher of
    // the third torrent is given the seeder, and a scrape counts the
    // seeder everywhere and the paced client where it announced.
    let mut verifier = hosts.cli(|| Client::new(&bind, to));
    let announced = verifier.announce(hashes[2], 7200, AnnounceEvent::Started, 1000, -1);
    assert_eq!(announced.seeders, 1, "{announced:?}");
    assert_eq!(announced.peers, vec![seeder_addr], "{announced:?}");
    let stats: Vec<(u32, u32)> = verifier
        .scrape(&hashes)
        .iter()
        .map(|s| (s.seeders, s.leechers))
        .collect();
    assert_eq!(stats, [(1, 1), (1, 1), (1, 1), (1, 0)]);
    assert_eq!(
        new_counts("xdp"),
        (over_xdp.0 + 1, over_xdp.1 + 1),
        "the verifier's connect and announce, over AF_XDP"
    );
    assert_eq!(requests(&hosts, &new, "xdp", "scrape"), 1);
    assert_eq!(new_counts("socket"), over_sockets);

    let log = new.stop();
    assert!(log.contains("took over"), "{log}");
    assert!(
        log.contains(&format!("AF_XDP on {SRV_DEV} queues [0] taken over")),
        "{log}"
    );
    hosts.wait_no_xdp(
        Side::Srv,
        Duration::from_secs(2),
        "after the new tracker's stop",
    );
}

#[test]
fn a_take_over_that_asks_for_other_queues_refuses_before_the_stop() {
    let hosts = TwoHosts::new();
    let control = TempPath::new("tracker-test-xdp-control", "sock");
    let config = handover_config(&control.0);
    let mut old = start_built(&hosts, xdp_builder(&hosts, &config));
    let prog = hosts
        .xdp_prog_id(Side::Srv)
        .expect("the tracker's XDP program is attached");
    let to = SocketAddr::new(hosts.srv_v4.into(), XDP_PORT);
    let bind = format!("{}:0", hosts.cli_v4);
    let mut client = hosts.cli(|| Client::new(&bind, to));
    let torrent = hash(400, 1);
    client.announce(torrent, SEEDER_PORT, AnnounceEvent::Started, 0, -1);

    // Successors whose config asks for AF_XDP otherwise than the running
    // tracker attached it (which they could not attach, holding no
    // capability): each refused before the running tracker stops, naming
    // what differs.
    for (change, named) in [
        (("frames = 4096", "frames = 8192"), "8192"),
        (("queues = []", "queues = [1]"), "queues [1]"),
        (
            (&*format!("interfaces = [\"{SRV_DEV}\"]"), "interfaces = []"),
            "udp.xdp.interfaces empty",
        ),
    ] {
        let other = config.replace(change.0, change.1);
        assert_ne!(other, config);
        let (code, err) = hosts
            .srv(|| {
                successor(&old, &other)
                    .pre_exec(without_capabilities)
                    .arg("--take-over")
                    .spawn()
            })
            .wait_exit(Duration::from_secs(20));
        assert_eq!(code, Some(1), "{err}");
        assert!(
            err.contains(named),
            "{change:?}: the refusal does not say {named:?}:\n{err}"
        );
    }

    // The running tracker serves on over AF_XDP, its program attached.
    assert!(old.is_running(), "the running tracker exited");
    assert_eq!(hosts.xdp_prog_id(Side::Srv), Some(prog));
    assert!(std::fs::symlink_metadata(&control.0).is_ok());
    let connects = requests(&hosts, &old, "xdp", "connect");
    client.connect();
    assert_eq!(requests(&hosts, &old, "xdp", "connect"), connects + 1);
    let stats = client.scrape(&[torrent]);
    assert_eq!((stats[0].seeders, stats[0].leechers), (1, 0));
    assert_eq!(requests(&hosts, &old, "socket", "announce"), 0);
    let log = old.stop();
    assert!(!log.contains("handing over"), "{log}");
}

/// A start without the capabilities AF_XDP needs is refused, naming each
/// one missing, before anything is attached.
#[test]
fn a_start_without_the_capabilities_names_them() {
    let hosts = TwoHosts::new();
    let (code, err) = hosts
        .srv(|| {
            xdp_builder(&hosts, &config(true))
                .pre_exec(without_capabilities)
                .spawn()
        })
        .wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("lacks CAP_NET_ADMIN, CAP_NET_RAW, CAP_BPF"),
        "the refusal does not name what is missing:\n{err}"
    );
    assert_eq!(hosts.xdp_attached(Side::Srv), None);
}

#[test]
fn libtorrent_downloads_through_xdp() {
    libtorrent_swarm_through_xdp(false);
}

#[test]
fn libtorrent_downloads_through_xdp_over_ipv6() {
    libtorrent_swarm_through_xdp(true);
}

/// A libtorrent seeder and leecher that find each other through the
/// tracker over AF_XDP, on the veth's IPv4 or IPv6 addresses.
fn libtorrent_swarm_through_xdp(ipv6: bool) {
    require_libtorrent();
    let hosts = TwoHosts::new();
    let mut tracker = start_xdp(&hosts, false);
    // Seeder and leecher both in the client's namespace, on its veth
    // address: the tracker sees them there and hands each the other's.
    let (tracker_ip, client_ip): (IpAddr, IpAddr) = if ipv6 {
        (hosts.srv_v6.into(), hosts.cli_v6.into())
    } else {
        (hosts.srv_v4.into(), hosts.cli_v4.into())
    };
    let url = format!("udp://{}/announce", SocketAddr::new(tracker_ip, XDP_PORT));
    let mut cmd = Command::new("ip");
    cmd.args(["netns", "exec", &hosts.cli_ns, PYTHON])
        .arg(support::repo_root().join("tests/e2e/swarm.py"))
        .args(["--tracker", &url, "--listen-ip", &client_ip.to_string()])
        // The leecher must get its peer from the tracker's answers to its
        // own announces.
        .args([
            "--reannounce-after",
            "0",
            "--size",
            "1048576",
            "--timeout",
            "40",
        ])
        .current_dir(support::repo_root());
    let run = support::run_script(cmd, Duration::from_secs(50));
    let still_running = tracker.is_running();
    assert!(
        run.succeeded(),
        "the libtorrent swarm did not complete through {url} over AF_XDP (tracker {}):\n{}",
        if still_running {
            "still running"
        } else {
            "EXITED"
        },
        run.report("swarm.py")
    );
    assert!(still_running, "the tracker exited during the swarm");
    let announces = requests(&hosts, &tracker, "xdp", "announce");
    assert!(
        announces >= 2,
        "{announces} announces over AF_XDP, fewer than the seeder's and the leecher's:\n{}",
        hosts.metrics_text(&tracker)
    );
    assert_eq!(
        requests(&hosts, &tracker, "socket", "announce"),
        0,
        "announces over the sockets:\n{}",
        hosts.metrics_text(&tracker)
    );
    // libtorrent keeps connection ids per tracker address for the process,
    // so its two sessions may connect once between them.
    let connects = requests(&hosts, &tracker, "xdp", "connect");
    assert!(
        connects >= 1,
        "{connects} connects over AF_XDP:\n{}",
        hosts.metrics_text(&tracker)
    );
    println!("{}", run.report("swarm.py"));
}

/// Starts the two trackers of a comparison, each with `extra(xdp)` added
/// to its config: the one with AF_XDP on `XDP_PORT` (its program checked
/// attached in native mode), and the same with AF_XDP off on `SOCKET_PORT`.
fn start_pair(hosts: &TwoHosts, extra: impl Fn(bool) -> String) -> (Tracker, Tracker) {
    let builder = |port, xdp| {
        Tracker::builder()
            .udp(Some(SocketAddr::new(hosts.srv_v4.into(), port)))
            .udp(Some(SocketAddr::new(hosts.srv_v6.into(), port)))
            .metrics()
            .config(&format!("{}\n{}", config(xdp), extra(xdp)))
    };
    let over_xdp = start_built(hosts, builder(XDP_PORT, true));
    assert_attached_natively(hosts);
    let over_sockets = start_built(hosts, builder(SOCKET_PORT, false));
    (over_xdp, over_sockets)
}

/// A request of a comparison: what it is, and the request made with a
/// connection id and a transaction id.
type Ask<'a> = (&'static str, &'a dyn Fn(ConnectionId, i32) -> Vec<u8>);

/// Connects `sock` to the server's tracker with AF_XDP and to the one
/// without (on the server's address of `v6`'s family), then sends each of
/// `asks` to the first and then to the second (each with its own
/// connection id): the answers, each with what it answers (the one over
/// AF_XDP: they are the same). Panics where the two differ, byte for byte.
fn ask_both(
    hosts: &TwoHosts,
    sock: &UdpSocket,
    v6: bool,
    asks: &[Ask<'_>],
) -> Vec<(&'static str, Vec<u8>)> {
    let srv = hosts.addr(Side::Srv, v6);
    let family = if v6 { "IPv6" } else { "IPv4" };
    let (over_xdp, over_sockets) = (
        SocketAddr::new(srv, XDP_PORT),
        SocketAddr::new(srv, SOCKET_PORT),
    );
    let window = id_window();
    let ids = (connect(sock, over_xdp), connect(sock, over_sockets));
    if id_window() == window {
        // One secret, one client address, one window: one id.
        assert_eq!(ids.0, ids.1, "{family}: the connection ids differ");
    }
    let mut answers = Vec::new();
    for (i, (what, request)) in asks.iter().enumerate() {
        let txid = 0x0a00 + i as i32;
        let from_xdp = ask(sock, over_xdp, &request(ids.0, txid));
        let from_sockets = ask(sock, over_sockets, &request(ids.1, txid));
        assert_eq!(
            from_xdp, from_sockets,
            "{family} {what}: the answer over AF_XDP (left) differs from the answer over \
             sockets (right)"
        );
        answers.push((*what, from_xdp));
    }
    answers
}

/// The announce answer `answer` (to transaction `txid`): its (seeders,
/// leechers) and peers; panics with `what` when it is anything else.
fn announce_answer(
    answer: &[u8],
    family: IpFamily,
    txid: i32,
    what: &str,
) -> ((u32, u32), Vec<SocketAddr>) {
    match Response::parse(answer, family) {
        Ok(Response::Announce {
            transaction_id,
            interval: _,
            leechers,
            seeders,
            peers,
        }) => {
            assert_eq!(transaction_id, TransactionId(txid), "{what}");
            ((seeders, leechers), peers.iter().collect())
        }
        other => panic!("{what}: not an announce answer: {other:?} ({answer:02x?})"),
    }
}

/// The message of the error answer `answer` (to transaction `txid`);
/// panics with `what` when it is anything else.
fn error_answer(answer: &[u8], family: IpFamily, txid: i32, what: &str) -> String {
    assert_eq!(
        answer.get(..4),
        Some(&3i32.to_be_bytes()[..]),
        "{what}: not an error answer (action 3)"
    );
    match Response::parse(answer, family) {
        Ok(Response::Error {
            transaction_id,
            message,
        }) => {
            assert_eq!(transaction_id, TransactionId(txid), "{what}");
            String::from_utf8_lossy(message).into_owned()
        }
        other => panic!("{what}: not an error answer: {other:?} ({answer:02x?})"),
    }
}

/// The sum of `tracker_udp_errors_total` of `kind` over `path`.
fn udp_errors(hosts: &TwoHosts, tracker: &Tracker, path: &str, kind: &str) -> u64 {
    let labels = [("protocol", "udp"), ("path", path), ("kind", kind)];
    hosts.metric(tracker, "tracker_udp_errors_total", &labels)
}

#[test]
fn an_access_list_refuses_the_same_over_xdp() {
    let hosts = TwoHosts::new();
    // Per family, a listed torrent and an unlisted one on each worker: those
    // of worker 1 cross the mesh, where the owner decides.
    let torrents = |seed: u32| {
        [
            ("listed torrent (worker 0)", hash(seed, 0), true),
            ("listed torrent (worker 1)", hash(seed + 1, 1), true),
            ("unlisted torrent (worker 0)", hash(seed + 2, 0), false),
            ("unlisted torrent (worker 1)", hash(seed + 3, 1), false),
        ]
    };
    let (v4, v6) = (torrents(500), torrents(600));
    let list = TempPath::new("tracker-test-xdp-access", "list");
    let listed: String = v4
        .iter()
        .chain(&v6)
        .filter(|(_, _, listed)| *listed)
        .map(|(_, h, _)| format!("{}\n", support::wire::hex(h)))
        .collect();
    std::fs::write(&list.0, listed).unwrap();
    let access = format!(
        "[access]\nmode = \"allow\"\nfile = \"{}\"\n",
        list.0.display()
    );
    let (xdp, sockets) = start_pair(&hosts, |_| access.clone());

    for (v6, torrents) in [(false, &v4), (true, &v6)] {
        let family = IpFamily::of(hosts.addr(Side::Srv, v6));
        let sock = client_socket(&hosts, SocketAddr::new(hosts.addr(Side::Srv, v6), XDP_PORT));
        let announces: Vec<_> = torrents
            .iter()
            .map(|&(_, hash, _)| {
                move |id, txid| {
                    udp_announce_wanting(id, txid, hash, 6881, AnnounceEvent::Started, 1000, -1)
                }
            })
            .collect();
        let hashes: Vec<InfoHash> = torrents.iter().map(|&(_, h, _)| h).collect();
        let scrape = |id, txid| {
            let mut out = Vec::new();
            write_scrape_request(&mut out, id, TransactionId(txid), &hashes);
            out
        };
        let mut asks: Vec<Ask<'_>> = torrents
            .iter()
            .zip(&announces)
            .map(|(&(what, _, _), announce)| (what, announce as &dyn Fn(_, _) -> _))
            .collect();
        asks.push(("scrape of all four", &scrape));
        let answers = ask_both(&hosts, &sock, v6, &asks);

        for (i, &(what, _, listed)) in torrents.iter().enumerate() {
            let (answer, txid) = (&answers[i].1, 0x0a00 + i as i32);
            if listed {
                let (counts, peers) = announce_answer(answer, family, txid, what);
                assert_eq!(counts, (0, 1), "{family:?} {what}: (seeders, leechers)");
                assert_eq!(peers, [], "{family:?} {what}");
            } else {
                let message = error_answer(answer, family, txid, what);
                assert_eq!(message, "torrent not allowed", "{family:?} {what}");
            }
        }
        match Response::parse(&answers[4].1, family) {
            Ok(Response::Scrape {
                transaction_id,
                stats,
            }) => {
                assert_eq!(transaction_id, TransactionId(0x0a04));
                let leechers: Vec<_> = stats.iter().map(|s| s.leechers).collect();
                assert_eq!(leechers, [1, 1, 0, 0], "{family:?}: the scrape");
            }
            other => panic!("{family:?} scrape: {other:?}"),
        }
    }

    // The four refusals of each tracker, counted on its own path only.
    let refusals = |tracker, path| udp_errors(&hosts, tracker, path, "not_allowed");
    assert_eq!(refusals(&xdp, "xdp"), 4, "kind=not_allowed,path=xdp");
    assert_eq!(refusals(&xdp, "socket"), 0, "the XDP tracker's sockets");
    assert_eq!(refusals(&sockets, "socket"), 4, "the socket tracker's");
    assert_eq!(refusals(&sockets, "xdp"), 0);
    for family in ["ipv4", "ipv6"] {
        for metric in ["tracker_requests_total", "tracker_responses_total"] {
            let count =
                |tracker, path| udp_count(&hosts, tracker, metric, path, "announce", Some(family));
            assert_eq!(count(&xdp, "xdp"), 4, "{metric} {family} over AF_XDP");
            assert_eq!(count(&xdp, "socket"), 0, "{metric} {family}");
            assert_eq!(count(&sockets, "socket"), 4, "{metric} {family}");
        }
    }
    assert_eq!(bad_frames(&hosts, &xdp), 0);
}

/// A login to `db` for a tracker in the server's namespace, which cannot
/// reach the test server's loopback TCP port: over the server's unix
/// socket (`TRACKER_TEST_MARIADB_SOCKET`, from tests/mariadb.sh), as a user
/// of its own with every right on `db`. Its account and its URL.
fn socket_login(db: &SiteDb) -> (String, String) {
    let socket = std::env::var("TRACKER_TEST_MARIADB_SOCKET").unwrap_or_else(|_| {
        panic!(
            "TRACKER_TEST_MARIADB_SOCKET is not set: the private mode tests over AF_XDP reach \
             the MariaDB server of tests/mariadb.sh through its unix socket (run tests/run.sh, \
             or eval tests/mariadb.sh's setup in the shell that runs cargo test)"
        )
    });
    assert!(
        Path::new(&socket).exists(),
        "TRACKER_TEST_MARIADB_SOCKET={socket}: no such socket"
    );
    let name = format!("xdp{}", std::process::id());
    let account = format!("'{name}'@'localhost'");
    db.exec(&format!("DROP USER IF EXISTS {account}"));
    db.exec(&format!("CREATE USER {account} IDENTIFIED BY 'pw'"));
    db.exec(&format!("GRANT ALL ON `{}`.* TO {account}", db.name));
    let url = format!("mysql://{name}:pw@localhost/{}?socket={socket}", db.name);
    (account, url)
}

/// A BEP 15 announce of the peer at `port` with these totals, and `url` as
/// its URLData (BEP 41), if any.
fn announce_with_url(
    (id, txid): (ConnectionId, i32),
    info_hash: InfoHash,
    port: u16,
    totals: (u64, u64, u64),
    event: AnnounceEvent,
    url: Option<&str>,
) -> Vec<u8> {
    support::udp_client::announce_packet(
        (id, TransactionId(txid)),
        info_hash,
        port,
        totals,
        event,
        url,
    )
}

#[test]
fn private_passkeys_over_udp_are_the_same_over_xdp() {
    use support::site_db::{info_hash, passkey};
    let hosts = TwoHosts::new();
    let db = SiteDb::new();
    // Users 1 and 4 of group user, 2 of vip; torrents 1 and 2.
    for (user, group) in [(1, 1), (2, 2), (4, 1)] {
        db.user(user, group);
    }
    db.torrent(1, 0, 1);
    db.torrent(2, 0, 1);
    let (account, url) = socket_login(&db);
    // Two trackers on the site's database, each flushing its own.
    let api_ports = (support::free_port(), support::free_port());
    let (xdp, sockets) = start_pair(&hosts, |xdp| {
        let (port, id) = if xdp {
            (api_ports.0, "xdp")
        } else {
            (api_ports.1, "socket")
        };
        support::private::config_with(&url, port, id, 200, "")
    });

    let (key2, key1) = (passkey(2), passkey(1));
    let valid = format!("/announce/{key2}");
    // The other form of the path.
    let other_form = format!("/{key1}/announce");
    let unknown = format!("/announce/{}", "e".repeat(32));
    let bare = "/announce".to_string();
    const STARTED: AnnounceEvent = AnnounceEvent::Started;
    for (v6, torrent) in [(false, 1), (true, 2)] {
        let family = IpFamily::of(hosts.addr(Side::Srv, v6));
        let sock = client_socket(&hosts, SocketAddr::new(hosts.addr(Side::Srv, v6), XDP_PORT));
        let hash = info_hash(torrent);
        let started = |port, url: Option<&String>| {
            let url = url.cloned();
            move |id, txid| {
                let totals = (0, 0, 1000);
                announce_with_url((id, txid), hash, port, totals, STARTED, url.as_deref())
            }
        };
        let (first, unknown, without, none, second) = (
            started(7101, Some(&valid)),
            started(7102, Some(&unknown)),
            started(7102, Some(&bare)),
            started(7102, None),
            started(7103, Some(&other_form)),
        );
        let answers = ask_both(
            &hosts,
            &sock,
            v6,
            &[
                ("a valid passkey", &first),
                ("an unknown passkey", &unknown),
                ("URLData without a passkey", &without),
                ("no URLData", &none),
                ("another user's valid passkey", &second),
            ],
        );
        let what = |i: usize| format!("{family:?} {}", answers[i].0);
        let (counts, peers) = announce_answer(&answers[0].1, family, 0x0a00, &what(0));
        assert_eq!((counts, peers), ((0, 1), vec![]), "{}", what(0));
        assert_eq!(
            error_answer(&answers[1].1, family, 0x0a01, &what(1)),
            "Passkey does not exist. Please re-download the .torrent file.",
            "{}",
            what(1)
        );
        for i in [2, 3] {
            let message = error_answer(&answers[i].1, family, 0x0a00 + i as i32, &what(i));
            assert_eq!(message, "Invalid passkey.", "{}", what(i));
        }
        let (counts, peers) = announce_answer(&answers[4].1, family, 0x0a04, &what(4));
        let first_peer = SocketAddr::new(hosts.addr(Side::Cli, v6), 7101);
        assert_eq!((counts, peers), ((0, 2), vec![first_peer]), "{}", what(4));
    }

    // Counted on each tracker's own path, alike.
    for family in ["ipv4", "ipv6"] {
        for metric in ["tracker_requests_total", "tracker_responses_total"] {
            let count =
                |tracker, path| udp_count(&hosts, tracker, metric, path, "announce", Some(family));
            assert_eq!(count(&xdp, "xdp"), 5, "{metric} {family} over AF_XDP");
            assert_eq!(count(&xdp, "socket"), 0, "{metric} {family}");
            assert_eq!(count(&sockets, "socket"), 5, "{metric} {family}");
        }
    }
    // The unknown passkeys are refused by the site's rules; the three
    // refusals of each family are error answers.
    assert_eq!(udp_errors(&hosts, &xdp, "xdp", "refused"), 2);
    assert_eq!(udp_errors(&hosts, &sockets, "socket", "refused"), 2);
    for (tracker, path) in [(&xdp, "xdp"), (&sockets, "socket")] {
        let labels = [("protocol", "udp"), ("path", path)];
        let errors = hosts.metric(tracker, "tracker_udp_error_responses_total", &labels);
        assert_eq!(
            errors, 6,
            "tracker_udp_error_responses_total{{path={path}}}"
        );
        for (outcome, n) in [("admitted", 4), ("unknown_user", 2)] {
            let labels = [("outcome", outcome)];
            let count = hosts.metric(tracker, "tracker_private_announces_total", &labels);
            assert_eq!(
                count, n,
                "tracker_private_announces_total{{outcome={outcome}}}"
            );
        }
    }
    assert_eq!(udp_errors(&hosts, &xdp, "socket", "refused"), 0);

    // One peer's bytes over AF_XDP only: credited once, by that tracker.
    let to = SocketAddr::new(hosts.srv_v4.into(), XDP_PORT);
    let sock = client_socket(&hosts, to);
    let id = connect(&sock, to);
    let url = format!("/announce/{}", passkey(4));
    for (txid, totals, event) in [
        (0x0b01, (0, 0, 1000), STARTED),
        (0x0b02, (300, 200, 800), AnnounceEvent::None),
    ] {
        let packet = announce_with_url((id, txid), info_hash(1), 7201, totals, event, Some(&url));
        announce_answer(&ask(&sock, to, &packet), IpFamily::V4, txid, "user 4");
    }
    let credited = "SELECT uploaded, downloaded FROM users WHERE id = 4";
    db.wait_for(credited, (300u64, 200u64));
    let history = "SELECT actual_uploaded, actual_downloaded FROM history WHERE user_id = 4";
    db.wait_for(history, (300u64, 200u64));
    // A few flushes later, still once.
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(db.one::<(u64, u64)>(credited), (300, 200), "credited again");
    assert_eq!(db.one::<(u64, u64)>(history), (300, 200), "credited again");
    let bytes = |tracker, direction| {
        let labels = [("direction", direction)];
        hosts.metric(tracker, "tracker_private_bytes_total", &labels)
    };
    // Counted once the flush is applied, which may come just after the
    // rows are seen.
    settles_at(
        300,
        "tracker_private_bytes_total{direction=actual_uploaded}",
        || bytes(&xdp, "actual_uploaded"),
    );
    settles_at(
        200,
        "tracker_private_bytes_total{direction=actual_downloaded}",
        || bytes(&xdp, "actual_downloaded"),
    );
    assert_eq!(bytes(&sockets, "actual_uploaded"), 0);
    // Nobody else was credited anything.
    let others: Vec<(u32, u64, u64)> =
        db.rows("SELECT id, uploaded, downloaded FROM users WHERE id <> 4 ORDER BY id");
    assert_eq!(others, [(1, 0, 0), (2, 0, 0)]);

    xdp.stop();
    sockets.stop();
    db.exec(&format!("DROP USER {account}"));
}

/// The checks of `ip -d link show` output that the tests above rely on.
#[test]
fn xdp_is_found_in_link_show_output() {
    use support::netns::{xdp_in_link_show, xdp_prog_id_in_link_show};
    let none = "3: veth-t0@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue \
                state UP mode DEFAULT group default qlen 1000\n    link/ether \
                52:30:23:c3:74:da brd ff:ff:ff:ff:ff:ff link-netns cli promiscuity 0";
    assert_eq!(xdp_in_link_show(none), None);
    let native = "3: veth-t0@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 xdp qdisc \
                  noqueue state UP\n    link/ether 52:30:23:c3:74:da brd ff:ff:ff:ff:ff:ff\n    \
                  prog/xdp id 42 name tracker tag 0123456789abcdef jited";
    assert!(xdp_in_link_show(native).unwrap().contains("prog/xdp id 42"));
    assert_eq!(xdp_prog_id_in_link_show(native), Some(42));
    assert_eq!(xdp_prog_id_in_link_show(none), None);
    let generic = "3: eth0: <UP> mtu 1500 xdpgeneric qdisc noqueue state UP";
    assert!(xdp_in_link_show(generic).is_some());
}
