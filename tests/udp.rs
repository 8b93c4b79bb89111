//! The UDP tracker end to end: the real binary, two or more workers, real
//! sockets on loopback, spoken to with our own codec.

mod support;

use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::time::{Duration, Instant};
use support::udp_client::Client;
use support::wire::hash_owned_by;
use support::Tracker;
use tracker_proto::udp::{write_scrape_request, ConnectionId, IpFamily, Response, TransactionId};
use tracker_proto::{AnnounceEvent, InfoHash, ScrapeStats};

fn v4(ip: &str, port: u16) -> SocketAddr {
    SocketAddr::new(ip.parse::<IpAddr>().unwrap(), port)
}

#[test]
fn announces_on_every_shard_return_the_other_peers_and_exact_counts() {
    let tracker = Tracker::builder().udp(None).start();
    let target = tracker.udp[0];
    for owner in 0..2 {
        let hash = hash_owned_by(owner, 2, 1);
        let mut seeder = Client::new("127.0.0.2:0", target);
        let mut leecher = Client::new("127.0.0.3:0", target);
        let first = seeder.announce(hash, 5001, AnnounceEvent::Started, 0, -1);
        assert_eq!((first.seeders, first.leechers), (1, 0));
        assert!(
            first.peers.is_empty(),
            "the requester is never in its own list"
        );
        assert_eq!(first.interval, 1800);
        let second = leecher.announce(hash, 5002, AnnounceEvent::Started, 1000, -1);
        assert_eq!((second.seeders, second.leechers), (1, 1));
        assert_eq!(second.peers, vec![v4("127.0.0.2", 5001)]);
        let again = seeder.announce(hash, 5001, AnnounceEvent::None, 0, -1);
        assert_eq!(again.peers, vec![v4("127.0.0.3", 5002)]);
        assert_eq!(
            (again.seeders, again.leechers),
            (1, 1),
            "a re-announce is not a new peer"
        );
    }
}

#[test]
fn numwant_is_honoured() {
    let tracker = Tracker::builder().udp(None).start();
    let hash = InfoHash([9; 20]);
    let mut client = Client::new("127.0.0.1:0", tracker.udp[0]);
    for port in 6000..6010 {
        client.announce(hash, port, AnnounceEvent::Started, 1, 0);
    }
    let asked3 = client.announce(hash, 7000, AnnounceEvent::Started, 1, 3);
    assert_eq!(asked3.peers.len(), 3);
    assert!(!asked3.peers.contains(&v4("127.0.0.1", 7000)));
    let asked0 = client.announce(hash, 7000, AnnounceEvent::None, 1, 0);
    assert!(asked0.peers.is_empty());
    let default = client.announce(hash, 7000, AnnounceEvent::None, 1, -1);
    assert_eq!(
        default.peers.len(),
        10,
        "every other peer, never the requester"
    );
    let mut unique = default.peers.clone();
    unique.sort();
    unique.dedup();
    assert_eq!(unique.len(), 10);
    assert_eq!((default.seeders, default.leechers), (0, 11));
}

#[test]
fn ipv6_peers_are_served_over_ipv6_and_kept_apart_from_ipv4() {
    let port = support::free_port();
    let tracker = Tracker::builder()
        .udp(Some(v4("127.0.0.1", port)))
        .udp(Some(SocketAddr::new("::1".parse().unwrap(), port)))
        .start();
    let hash = InfoHash([6; 20]);
    let mut a4 = Client::new("127.0.0.1:0", tracker.udp[0]);
    let mut a6 = Client::new("[::1]:0", tracker.udp[1]);
    let mut b6 = Client::new("[::1]:0", tracker.udp[1]);
    a4.announce(hash, 4004, AnnounceEvent::Started, 1, -1);
    a6.announce(hash, 6006, AnnounceEvent::Started, 1, -1);
    let seen = b6.announce(hash, 6007, AnnounceEvent::Started, 0, -1);
    assert_eq!(
        seen.peers,
        vec!["[::1]:6006".parse::<SocketAddr>().unwrap()]
    );
    assert_eq!(
        (seen.seeders, seen.leechers),
        (1, 2),
        "counts cover both families"
    );
    let seen4 = a4.announce(hash, 4004, AnnounceEvent::None, 1, -1);
    assert!(seen4.peers.is_empty(), "no IPv6 peer in an IPv4 answer");
}

#[test]
fn a_burst_of_announces_across_shards_gets_each_its_own_swarm() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "3", "--no-pin"])
        .udp(None)
        .start();
    let target = tracker.udp[0];
    // Torrent k, its owner going round the three workers, holds k seeders.
    let hashes: Vec<InfoHash> = (0..24u32)
        .map(|k| hash_owned_by(k as usize % 3, 3, 200 + k))
        .collect();
    let mut seeders = Client::new("127.0.0.2:0", target);
    for (k, hash) in hashes.iter().enumerate() {
        for n in 0..k as u16 {
            seeders.announce(*hash, 7000 + n, AnnounceEvent::Started, 0, -1);
        }
    }
    // Every request is on the wire before the first answer is read, so the
    // worker that takes them receives several at once, and hands those of
    // each other shard over together: each answer must still be its own.
    let mut burst = Client::new("127.0.0.3:0", target);
    let mut asked = std::collections::HashMap::new();
    for (k, hash) in hashes.iter().enumerate() {
        let (txid, packet) = burst.announce_packet(*hash, 8000, AnnounceEvent::Started, 1, -1);
        burst.sock.send_to(&packet, target).unwrap();
        asked.insert(txid.0, k);
    }
    let mut buf = vec![0u8; 4096];
    for _ in 0..hashes.len() {
        let (n, _) = burst.sock.recv_from(&mut buf).expect("an answer");
        let Ok(Response::Announce {
            transaction_id,
            seeders,
            leechers,
            peers,
            ..
        }) = Response::parse(&buf[..n], IpFamily::V4)
        else {
            panic!("expected an announce answer");
        };
        let k = asked
            .remove(&transaction_id.0)
            .expect("one answer to each request");
        assert_eq!((seeders, leechers), (k as u32, 1), "torrent {k}");
        let mut ports: Vec<u16> = peers.iter().map(|p| p.port()).collect();
        ports.sort_unstable();
        assert_eq!(ports, (7000..7000 + k as u16).collect::<Vec<_>>());
        assert!(peers.iter().all(|p| p.ip() == v4("127.0.0.2", 0).ip()));
    }
}

#[test]
fn scrape_keeps_request_order_across_shards() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "3", "--no-pin"])
        .udp(None)
        .start();
    let mut client = Client::new("127.0.0.1:0", tracker.udp[0]);
    // Hashes alternating between the three owners, each with i seeders.
    let hashes: Vec<InfoHash> = (0..30u32)
        .map(|i| hash_owned_by(i as usize % 3, 3, 100 + i))
        .collect();
    for (i, hash) in hashes.iter().enumerate() {
        for p in 0..(i % 4) as u16 {
            client.announce(*hash, 8000 + p, AnnounceEvent::Started, 0, 0);
        }
        client.announce(*hash, 9000, AnnounceEvent::Started, 5, 0);
    }
    let unknown = InfoHash([0xee; 20]);
    let mut asked = hashes.clone();
    asked.insert(7, unknown);
    let stats = client.scrape(&asked);
    assert_eq!(stats.len(), asked.len());
    for (hash, stat) in asked.iter().zip(&stats) {
        match hashes.iter().position(|h| h == hash) {
            Some(i) => assert_eq!(
                (stat.seeders, stat.leechers),
                ((i % 4) as u32, 1),
                "hash {i}"
            ),
            None => assert_eq!(*stat, ScrapeStats::default()),
        }
    }
}

#[test]
fn stopped_removes_the_peer_and_completed_is_counted_once() {
    let tracker = Tracker::builder().udp(None).start();
    let mut client = Client::new("127.0.0.1:0", tracker.udp[0]);
    for owner in 0..2 {
        let hash = hash_owned_by(owner, 2, 7);
        client.announce(hash, 1111, AnnounceEvent::Started, 100, 0);
        client.announce(hash, 2222, AnnounceEvent::Started, 100, 0);
        let done = client.announce(hash, 1111, AnnounceEvent::Completed, 0, 0);
        assert_eq!((done.seeders, done.leechers), (1, 1));
        client.announce(hash, 1111, AnnounceEvent::Completed, 0, 0);
        assert_eq!(
            client.scrape(&[hash])[0],
            ScrapeStats {
                seeders: 1,
                completed: 1,
                leechers: 1
            }
        );
        let gone = client.announce(hash, 2222, AnnounceEvent::Stopped, 100, -1);
        assert_eq!((gone.seeders, gone.leechers), (1, 0));
        assert_eq!(
            client.scrape(&[hash])[0],
            ScrapeStats {
                seeders: 1,
                completed: 1,
                leechers: 0
            }
        );
        let left = client.announce(hash, 3333, AnnounceEvent::Started, 100, -1);
        assert_eq!(left.peers, vec![v4("127.0.0.1", 1111)]);
    }
}

#[test]
fn peers_expire() {
    let tracker = Tracker::builder()
        .config("[swarm]\npeer_timeout_secs = 2\ncleanup_interval_secs = 1\n")
        .udp(None)
        .start();
    let mut client = Client::new("127.0.0.1:0", tracker.udp[0]);
    let hash = InfoHash([3; 20]);
    client.announce(hash, 1234, AnnounceEvent::Started, 0, 0);
    assert_eq!(client.scrape(&[hash])[0].seeders, 1);
    let deadline = Instant::now() + Duration::from_secs(10);
    while client.scrape(&[hash])[0].seeders != 0 {
        assert!(Instant::now() < deadline, "peer never expired");
        std::thread::sleep(Duration::from_millis(200));
    }
    let fresh = client.announce(hash, 999, AnnounceEvent::Started, 1, -1);
    assert!(fresh.peers.is_empty(), "an expired peer is not handed out");
}

#[test]
fn bad_connection_ids_get_no_answer() {
    let tracker = Tracker::builder().udp(None).start();
    let mut client = Client::new("127.0.0.1:0", tracker.udp[0]);
    client.connection_id = ConnectionId(0x1234_5678);
    let (_, packet) =
        client.announce_packet(InfoHash([1; 20]), 1000, AnnounceEvent::Started, 0, -1);
    assert_eq!(
        client.try_exchange(&packet, Duration::from_millis(500)),
        None
    );
    let mut scrape = Vec::new();
    write_scrape_request(
        &mut scrape,
        client.connection_id,
        TransactionId(5),
        &[InfoHash([1; 20])],
    );
    assert_eq!(
        client.try_exchange(&scrape, Duration::from_millis(300)),
        None
    );
    // Malformed with a bad id: no answer either.
    assert_eq!(
        client.try_exchange(&packet[..50], Duration::from_millis(300)),
        None
    );
    // Nothing was stored.
    client.connect();
    assert_eq!(
        client.scrape(&[InfoHash([1; 20])])[0],
        ScrapeStats::default()
    );
}

#[test]
fn garbage_gets_errors_only_with_a_valid_id_and_the_tracker_keeps_answering() {
    let tracker = Tracker::builder().udp(None).start();
    let mut client = Client::new("127.0.0.1:0", tracker.udp[0]);
    // Random junk of every length, from the client's own socket.
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for len in 0..1500usize {
        let junk: Vec<u8> = (0..len)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        client.sock.send_to(&junk, client.target).unwrap();
    }
    std::thread::sleep(Duration::from_millis(200));
    // Drain whatever came back: only well-formed error or connect answers.
    client
        .sock
        .set_read_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let mut buf = [0u8; 4096];
    while let Ok((n, _)) = client.sock.recv_from(&mut buf) {
        let action = i32::from_be_bytes(buf[..4].try_into().unwrap());
        assert!(
            action == 3 || action == 0,
            "unexpected action {action} in {n} bytes"
        );
    }
    // A malformed announce with a valid connection id gets an error (action 3).
    client
        .sock
        .set_read_timeout(Some(Duration::from_secs(3)))
        .unwrap();
    let (txid, packet) =
        client.announce_packet(InfoHash([2; 20]), 1000, AnnounceEvent::Started, 0, -1);
    let answer = client.exchange(&packet[..60]);
    match Response::parse(&answer, IpFamily::V4).unwrap() {
        Response::Error {
            transaction_id,
            message,
        } => {
            assert_eq!(transaction_id, txid);
            assert!(!message.is_empty());
        }
        other => panic!("expected an error, got {other:?}"),
    }
    // A bad event value, with a valid id, also.
    let (_, mut bad_event) =
        client.announce_packet(InfoHash([2; 20]), 1000, AnnounceEvent::Started, 0, -1);
    bad_event[80..84].copy_from_slice(&9i32.to_be_bytes());
    assert_eq!(&client.exchange(&bad_event)[..4], &3i32.to_be_bytes());
    // And the tracker still works, on every shard.
    for owner in 0..2 {
        let hash = hash_owned_by(owner, 2, 55);
        assert_eq!(
            client
                .announce(hash, 4242, AnnounceEvent::Started, 0, -1)
                .seeders,
            1
        );
    }
}

#[test]
fn announces_with_bep41_options_are_accepted() {
    let tracker = Tracker::builder().udp(None).start();
    let mut client = Client::new("127.0.0.1:0", tracker.udp[0]);
    let (txid, mut packet) =
        client.announce_packet(InfoHash([4; 20]), 1000, AnnounceEvent::Started, 0, -1);
    packet.extend_from_slice(&[0x2, 9]);
    packet.extend_from_slice(b"/announce");
    packet.extend_from_slice(&[0x1, 0x2, 4]);
    packet.extend_from_slice(b"?a=b");
    packet.push(0x0);
    let answer = client.exchange(&packet);
    assert!(matches!(
        Response::parse(&answer, IpFamily::V4).unwrap(),
        Response::Announce { transaction_id, seeders: 1, .. } if transaction_id == txid
    ));
}

#[test]
fn pinned_and_unpinned_both_serve() {
    let cpus = support::online_cpus();
    let workers = cpus.min(2).to_string();
    for pin in ["--pin", "--no-pin"] {
        let tracker = Tracker::builder()
            .runtime_args(&["--workers", &workers, pin])
            .udp(None)
            .start();
        let mut client = Client::new("127.0.0.1:0", tracker.udp[0]);
        assert_eq!(
            client
                .announce(InfoHash([8; 20]), 80, AnnounceEvent::Started, 0, -1)
                .seeders,
            1
        );
    }
}

#[test]
fn pinning_that_cannot_be_honoured_is_a_start_up_error() {
    let too_many = (support::online_cpus() + 1).to_string();
    let (code, err) = Tracker::builder()
        .runtime_args(&["--workers", &too_many, "--pin"])
        .udp(None)
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_ne!(code, Some(0));
    assert!(err.contains("pinned workers need"), "{err}");
    let (code, err) = Tracker::builder()
        .runtime_args(&["--cpus", "4000", "--pin"])
        .udp(None)
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_ne!(code, Some(0));
    assert!(err.contains("CPU 4000"), "{err}");
}

#[test]
fn bad_config_is_a_clear_error_naming_the_key() {
    let (code, err) = Tracker::builder()
        .config("[udp]\nlisten_on = []\n")
        .udp(None)
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(2));
    assert!(err.contains("listen_on") && err.contains(".toml"), "{err}");
    let (code, err) = Tracker::builder()
        .config("[swarm]\npeer_timeout_secs = -5\n")
        .udp(None)
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(2));
    assert!(err.contains("peer_timeout_secs"), "{err}");
}

#[test]
fn a_port_in_use_is_a_clear_error() {
    let holder = UdpSocket::bind("127.0.0.1:0").unwrap();
    let addr = holder.local_addr().unwrap();
    let (code, err) = Tracker::builder()
        .udp(Some(addr))
        .spawn()
        .wait_exit(Duration::from_secs(10));
    assert_ne!(code, Some(0));
    assert!(err.contains("in use"), "{err}");
}

#[test]
fn print_config_is_the_commented_default() {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_tracker"))
        .arg("--print-config")
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    assert!(text.contains("[udp]") && text.contains("# "));
    let parsed: tracker::config::Config = toml::from_str(&text).unwrap();
    assert_eq!(parsed, tracker::config::Config::default());
}

/// The terminal a tracker started by `log_on_a_terminal` writes its log to
/// (read by `pre_exec`, which may not capture).
static PTY_SLAVE: std::sync::atomic::AtomicI32 = std::sync::atomic::AtomicI32::new(-1);

/// Everything a tracker logs at start and stop with a terminal for stderr,
/// and NO_COLOR set to `no_color`.
fn log_on_a_terminal(no_color: &str) -> String {
    use std::io::Read;
    use std::os::fd::FromRawFd;
    use std::sync::atomic::Ordering;
    let (mut master, mut slave) = (-1, -1);
    // SAFETY: openpty writes two descriptors; no name, settings or size.
    let rc = unsafe {
        libc::openpty(
            &mut master,
            &mut slave,
            std::ptr::null_mut(),
            std::ptr::null(),
            std::ptr::null(),
        )
    };
    assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
    // SAFETY: openpty just gave us both; each is owned once.
    let (master, slave) = unsafe {
        (
            std::fs::File::from_raw_fd(master),
            std::os::fd::OwnedFd::from_raw_fd(slave),
        )
    };
    // Drained meanwhile, so that a full terminal never holds the tracker up.
    let reader = std::thread::spawn(move || {
        let mut log = Vec::new();
        // Read until the last writer is gone (EIO).
        let _ = (&master).read_to_end(&mut log);
        String::from_utf8_lossy(&log).into_owned()
    });
    use std::os::fd::AsRawFd;
    PTY_SLAVE.store(slave.as_raw_fd(), Ordering::SeqCst);
    let tracker = Tracker::builder()
        .env("NO_COLOR", no_color)
        .pre_exec(|| {
            // SAFETY: dup2 is async-signal-safe; the descriptor is open.
            match unsafe { libc::dup2(PTY_SLAVE.load(Ordering::SeqCst), 2) } {
                -1 => Err(std::io::Error::last_os_error()),
                _ => Ok(()),
            }
        })
        .udp(None)
        .start();
    drop(slave);
    tracker.stop();
    reader.join().unwrap()
}

/// Colour codes are for a person at a terminal: the log is plain text in a
/// pipe (the journal, a file), and NO_COLOR turns colour off on a terminal.
#[test]
fn the_log_is_coloured_only_on_a_terminal() {
    // A pipe; an empty NO_COLOR counts as unset (no-color.org).
    let tracker = Tracker::builder().env("NO_COLOR", "").udp(None).start();
    let log = tracker.stop();
    assert!(log.contains("INFO"), "{log}");
    assert!(!log.contains('\x1b'), "colour codes in a pipe: {log:?}");
    let log = log_on_a_terminal("");
    assert!(log.contains("INFO") && log.contains('\x1b'), "{log:?}");
    let log = log_on_a_terminal("1");
    assert!(log.contains("INFO") && !log.contains('\x1b'), "{log:?}");
}

/// With coalescing at its longest, datagrams that come in bursts wait for
/// the window and are all answered; the tracker still stops at once.
#[test]
fn datagrams_gathered_by_coalescing_are_all_answered() {
    let tracker = Tracker::builder()
        .udp(None)
        .config("[udp]\ncoalesce_us = 1000\n")
        .start();
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
    const SENT: i32 = 3000;
    let receiver = {
        let sock = sock.try_clone().unwrap();
        std::thread::spawn(move || {
            let mut seen = vec![false; SENT as usize];
            let mut buf = [0u8; 64];
            while let Ok(n) = sock.recv(&mut buf) {
                if let Ok(Response::Connect { transaction_id, .. }) =
                    Response::parse(&buf[..n], IpFamily::V4)
                {
                    seen[transaction_id.0 as usize] = true;
                }
            }
            seen.iter().filter(|answered| !**answered).count()
        })
    };
    // Bursts of 10 a little apart: fast enough that each batch is worth
    // waiting for, and few enough that no batch fills.
    for txid in 0..SENT {
        sock.send_to(
            &support::wire::udp_connect_packet(TransactionId(txid)),
            tracker.udp[0],
        )
        .unwrap();
        if txid % 10 == 9 {
            std::thread::sleep(Duration::from_micros(200));
        }
    }
    assert_eq!(receiver.join().unwrap(), 0, "connects left unanswered");
    let started = Instant::now();
    tracker.stop();
    assert!(started.elapsed() < Duration::from_secs(5));
}
