//! Two trackers as two hosts behind DNS round robin, anycast or a moving
//! address: a UDP client that connected at one announces at the other. Two
//! real processes on loopback, each with its own store (docs/MULTIPLE-HOSTS.md).

mod support;

use std::net::SocketAddr;
use std::time::Duration;
use support::udp_client::Client;
use support::Tracker;
use tracker_proto::udp::{write_scrape_request, TransactionId};
use tracker_proto::{AnnounceEvent, InfoHash, ScrapeStats};

const SECRET: &str = "00112233445566778899aabbccddeeff";
const OTHER_SECRET: &str = "ffeeddccbbaa99887766554433221100";

/// A tracker serving UDP on loopback, with metrics, keyed by `secret`.
fn host(secret: &str) -> Tracker {
    Tracker::builder()
        .udp(None)
        .metrics()
        .config(&format!("[udp]\nconnection_secret = \"{secret}\"\n"))
        .start()
}

fn udp_errors(tracker: &Tracker, kind: &str) -> u64 {
    tracker.metric("tracker_udp_errors_total", &[("kind", kind)])
}

fn udp_requests(tracker: &Tracker, action: &str) -> u64 {
    tracker.metric(
        "tracker_requests_total",
        &[("protocol", "udp"), ("action", action)],
    )
}

#[test]
fn a_shared_secret_makes_ids_valid_on_both_hosts_but_swarms_stay_apart() {
    let a = host(SECRET);
    let b = host(SECRET);
    let hash = InfoHash([0x22; 20]);

    // A seeder that stays with A.
    let mut seeder = Client::new("127.0.0.1:0", a.udp[0]);
    let at_a = seeder.announce(hash, 6001, AnnounceEvent::Started, 0, -1);
    assert_eq!((at_a.seeders, at_a.leechers), (1, 0));

    // A leecher that connects at A, then is moved to B without reconnecting.
    let mut leecher = Client::new("127.0.0.1:0", a.udp[0]);
    leecher.target = b.udp[0];
    let at_b = leecher.announce(hash, 6002, AnnounceEvent::Started, 1, -1);
    assert_eq!(at_b.interval, 1800);
    // No shared store: B has never heard of A's seeder.
    assert_eq!((at_b.seeders, at_b.leechers), (0, 1));
    assert!(at_b.peers.is_empty(), "B returned a peer only A knows");
    assert_eq!(
        leecher.scrape(&[hash]),
        vec![ScrapeStats {
            seeders: 0,
            completed: 0,
            leechers: 1,
        }]
    );

    // Back at A with the same id: A's swarm, which the leecher joins only now.
    leecher.target = a.udp[0];
    let back_at_a = leecher.announce(hash, 6002, AnnounceEvent::None, 1, -1);
    assert_eq!((back_at_a.seeders, back_at_a.leechers), (1, 1));
    let seeder_addr: SocketAddr = "127.0.0.1:6001".parse().unwrap();
    assert_eq!(back_at_a.peers, vec![seeder_addr]);
    // Each host counts only the peers that announced to it.
    let again_at_a = seeder.announce(hash, 6001, AnnounceEvent::None, 0, -1);
    assert_eq!((again_at_a.seeders, again_at_a.leechers), (1, 1));

    assert_eq!(udp_errors(&a, "bad_connection_id"), 0);
    assert_eq!(udp_errors(&b, "bad_connection_id"), 0);
    assert_eq!(udp_requests(&b, "announce"), 1);
    assert_eq!(udp_requests(&b, "scrape"), 1);
}

#[test]
fn another_secret_drops_the_ids_until_the_client_connects_again() {
    let a = host(SECRET);
    // Another secret, and none (a random one at each start, the default).
    for secret in [OTHER_SECRET, ""] {
        let b = host(secret);
        let hash = InfoHash([0x33; 20]);

        let mut client = Client::new("127.0.0.1:0", a.udp[0]);
        client.target = b.udp[0];
        // Not even an error: an id B did not issue proves nothing about the
        // sender's address, so B stays silent (BEP 15 clients time out and
        // retry).
        let (_, announce) = client.announce_packet(hash, 6003, AnnounceEvent::Started, 1, -1);
        let wait = Duration::from_millis(500);
        assert_eq!(client.try_exchange(&announce, wait), None, "{secret:?}");
        let mut scrape = Vec::new();
        write_scrape_request(&mut scrape, client.connection_id, TransactionId(9), &[hash]);
        assert_eq!(client.try_exchange(&scrape, wait), None, "{secret:?}");
        assert_eq!(udp_errors(&b, "bad_connection_id"), 2);
        assert_eq!(udp_requests(&b, "announce"), 0);

        // What a client does next: connect at B, and announce there.
        client.connect();
        let at_b = client.announce(hash, 6003, AnnounceEvent::Started, 1, -1);
        assert_eq!((at_b.seeders, at_b.leechers), (0, 1));
        assert_eq!(udp_errors(&b, "bad_connection_id"), 2);
    }
}
