//! A panic in a request's handling is contained: the request is dropped (UDP)
//! or answered with a 500 (HTTP), the panic is counted and logged sparingly,
//! and the worker goes on serving, its swarm store usable (the borrow held
//! when the panic struck is released). The panic comes from the debug-build
//! test hook named by TRACKER_TEST_PANIC_INFO_HASH, which panics inside the
//! owner's announce with the store borrowed; integration tests run the debug
//! binary.

mod support;

use std::net::UdpSocket;
use std::time::Duration;

use support::owner_of;
use support::wire::{hex, http_announce_target, http_get, udp_announce, udp_connect};
use support::Tracker;
use tracker_proto::http::bencode::{decode, Value};
use tracker_proto::{AnnounceEvent, InfoHash};
use tracker_runtime::contain::TEST_PANIC_ENV;

fn hash_owned_by(owner: usize, seed: u8) -> InfoHash {
    (0u8..=255)
        .map(|i| {
            InfoHash([
                seed, i, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7, 7,
            ])
        })
        .find(|h| owner_of(h, 2) == owner)
        .unwrap()
}

#[test]
fn panics_are_contained_counted_and_the_workers_go_on() {
    let poison = InfoHash([0xee; 20]);
    let tracker = Tracker::builder()
        .env(TEST_PANIC_ENV, &hex(&poison))
        // Steering would hand every announce to its owner: off, so that the
        // kernel's hash sends some to the other worker, which forwards them.
        .config("[udp]\nsteering = false\n")
        .udp(None)
        .http(None)
        .start();
    let target = tracker.udp[0];
    let wait = Duration::from_millis(400);
    let mut panics = 0;
    // Several sockets, so that (SO_REUSEPORT spreads them) both the owner's
    // own path and the forwarded path are taken.
    for n in 0..8u16 {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(wait)).unwrap();
        let id = udp_connect(&sock, target).expect("connect");
        let packet = udp_announce(id, 1, poison, 1000 + n, AnnounceEvent::Started, 1);
        sock.send_to(&packet, target).unwrap();
        panics += 1;
        let mut buf = [0u8; 1500];
        assert!(
            sock.recv_from(&mut buf).is_err(),
            "a panicking request is dropped"
        );
        // The same socket is served at once, on both shards: its worker lives
        // and each store can be borrowed again.
        for (owner, txid) in [(0, 2), (1, 3)] {
            let hash = hash_owned_by(owner, n as u8);
            let packet = udp_announce(id, txid, hash, 1000 + n, AnnounceEvent::Started, 0);
            sock.send_to(&packet, target).unwrap();
            let (len, _) = sock.recv_from(&mut buf).expect("served after the panic");
            assert_eq!(buf[..4], 1i32.to_be_bytes(), "an announce answer");
            assert_eq!(buf[4..8], txid.to_be_bytes());
            assert_eq!(len, 20, "alone in its swarm");
        }
    }
    // HTTP: a 500 with a failure reason, then normal service on both shards.
    let http = tracker.http[0];
    for n in 0..8u16 {
        let (status, body) =
            http_get(http, &http_announce_target(poison, 2000 + n), wait * 5).expect("answer");
        panics += 1;
        assert_eq!(status, 500);
        let failure = decode(&body)
            .unwrap()
            .get(b"failure reason")
            .and_then(Value::as_bytes)
            .map(<[u8]>::to_vec);
        assert_eq!(failure.as_deref(), Some(&b"internal error"[..]));
        for owner in 0..2 {
            let hash = hash_owned_by(owner, 100 + n as u8);
            let (status, body) =
                http_get(http, &http_announce_target(hash, 2000 + n), wait * 5).expect("answer");
            assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
            assert!(decode(&body).unwrap().get(b"interval").is_some());
        }
    }
    let log = tracker.stop();
    // Counted once each, logged at the 1st, 2nd, 4th, ... only, never by the
    // default hook.
    let logged: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("contained panic number"))
        .collect();
    let numbers: Vec<u32> = logged
        .iter()
        .map(|l| {
            let rest = &l[l.find("contained panic number ").unwrap() + 23..];
            rest.split(' ').next().unwrap().parse().unwrap()
        })
        .collect();
    assert_eq!(panics, 16);
    assert_eq!(numbers, vec![1, 2, 4, 8, 16], "{log}");
    assert!(
        logged
            .iter()
            .all(|l| l.contains("ERROR") && l.contains(TEST_PANIC_ENV)),
        "{log}"
    );
    // The default hook's line ("thread '…' panicked at") never appears.
    assert!(!log.contains("thread '"), "an uncontained panic: {log}");
}
