//! UDP steering end to end: with two workers, the kernel hands each announce
//! to the socket of the worker that owns its torrent (the program of
//! `tracker_udp::steering` on each address's SO_REUSEPORT group), over IPv4
//! and IPv6 alike; without steering the answers are the same, reached over
//! the mesh; a scrape over two owners is still answered in order; HTTP
//! announces are counted as answered where they landed or forwarded.

mod support;

use std::collections::HashMap;
use std::net::SocketAddr;

use support::udp_client::Client;
use support::wire::hash_owned_by;
use support::{owner_of, Tracker};
use tracker_proto::{AnnounceEvent, InfoHash, ScrapeStats};

const WORKERS: usize = 2;
/// Client sockets per address: each has a port of its own, so the kernel's
/// hash, where it decides, spreads them over both workers.
const CLIENTS: usize = 12;

fn tracker(steering: bool) -> Tracker {
    let port = support::free_port();
    Tracker::builder()
        .config(&format!("[udp]\nsteering = {steering}\n"))
        .udp(Some(SocketAddr::from(([127, 0, 0, 1], port))))
        .udp(Some(SocketAddr::from((
            std::net::Ipv6Addr::LOCALHOST,
            port,
        ))))
        .metrics()
        .start()
}

/// One announce of the script: which client, which torrent, seeder or not.
struct Step {
    client: usize,
    hash: InfoHash,
    left: u64,
}

/// Announces that reach both workers' torrents from every client: client
/// `c` announces to three torrents, owned by worker `c % 2`, `(c + 1) % 2`
/// and `c % 2` again, as a seeder when `c % 3 == 0`.
fn script() -> Vec<Step> {
    (0..CLIENTS)
        .flat_map(|client| {
            let left = u64::from(client % 3 != 0);
            [client % 2, (client + 1) % 2, client % 2]
                .into_iter()
                .enumerate()
                .map(move |(i, owner)| Step {
                    client,
                    hash: hash_owned_by(owner, WORKERS, i as u32),
                    left,
                })
        })
        .collect()
}

/// What an answer says, comparable between trackers: the counts and the
/// peers, sorted (their order is random). A peer is its client's address
/// and announced port, the same in every run.
type Answer = (u32, u32, u32, Vec<SocketAddr>);

/// Runs the script against `target` from fresh clients; the answers in order.
fn run_script(target: SocketAddr) -> Vec<Answer> {
    let bind = if target.is_ipv4() {
        "127.0.0.1:0"
    } else {
        "[::1]:0"
    };
    let mut clients: Vec<Client> = (0..CLIENTS).map(|_| Client::new(bind, target)).collect();
    script()
        .into_iter()
        .map(|step| {
            let client = &mut clients[step.client];
            let port = 6000 + step.client as u16;
            let a = client.announce(step.hash, port, AnnounceEvent::Started, step.left, -1);
            let mut peers = a.peers;
            peers.sort();
            (a.interval, a.seeders, a.leechers, peers)
        })
        .collect()
}

/// The announces of the script for torrents of `worker`, per address.
fn owned_by(worker: usize) -> u64 {
    script()
        .iter()
        .filter(|s| owner_of(&s.hash, WORKERS) == worker)
        .count() as u64
}

fn routed(tracker: &Tracker, route: &str, worker: Option<usize>) -> u64 {
    let worker = worker.map(|w| w.to_string());
    let mut labels = vec![("protocol", "udp"), ("route", route)];
    if let Some(w) = &worker {
        labels.push(("worker", w.as_str()));
    }
    tracker.metric("tracker_announces_routed_total", &labels)
}

#[test]
fn announces_arrive_at_their_owner_over_ipv4_and_ipv6() {
    let tracker = tracker(true);
    for &target in &tracker.udp {
        run_script(target);
    }
    let families = tracker.udp.len() as u64;
    assert_eq!(families, 2);
    assert_eq!(
        routed(&tracker, "forwarded", None),
        0,
        "no announce crossed to its owner"
    );
    for worker in 0..WORKERS {
        assert_eq!(
            routed(&tracker, "local", Some(worker)),
            families * owned_by(worker),
            "worker {worker} answered the announces for its torrents, and only those"
        );
    }
    assert_eq!(tracker.metric("tracker_mesh_forwarded_total", &[]), 0);
}

#[test]
fn without_steering_the_answers_are_the_same() {
    let steered = tracker(true);
    let unsteered = tracker(false);
    for (a, b) in steered.udp.iter().zip(&unsteered.udp) {
        assert_eq!(run_script(*a), run_script(*b), "answers over {a} and {b}");
    }
    // The comparison took the mesh: the kernel's hash sent some announces to
    // the worker that does not own their torrent.
    assert!(routed(&unsteered, "forwarded", None) > 0);
    assert_eq!(routed(&steered, "forwarded", None), 0);
}

#[test]
fn a_scrape_over_two_owners_is_answered_in_order() {
    let tracker = tracker(true);
    let target = tracker.udp[0];
    let h0 = hash_owned_by(0, WORKERS, 100);
    let h1 = hash_owned_by(1, WORKERS, 100);
    let h1b = hash_owned_by(1, WORKERS, 200);
    // Distinct counts per torrent: h0 one seeder, h1 two leechers, h1b a
    // seeder and a leecher.
    let mut clients: Vec<Client> = (0..4).map(|_| Client::new("127.0.0.1:0", target)).collect();
    clients[0].announce(h0, 7000, AnnounceEvent::Started, 0, -1);
    clients[1].announce(h1, 7001, AnnounceEvent::Started, 1, -1);
    clients[2].announce(h1, 7002, AnnounceEvent::Started, 1, -1);
    clients[3].announce(h1b, 7003, AnnounceEvent::Started, 0, -1);
    clients[1].announce(h1b, 7001, AnnounceEvent::Started, 1, -1);
    let stats = |seeders, leechers| ScrapeStats {
        seeders,
        completed: 0,
        leechers,
    };
    let expected: HashMap<InfoHash, ScrapeStats> =
        [(h0, stats(1, 0)), (h1, stats(0, 2)), (h1b, stats(1, 1))].into();
    let forwarded_before = tracker.metric("tracker_mesh_forwarded_total", &[]);
    for order in [
        vec![h1, h0, h1b, h0],
        vec![h0, h1, h1b],
        vec![h1b, h1, h0, h1, h0],
    ] {
        for client in &mut clients {
            let want: Vec<ScrapeStats> = order.iter().map(|h| expected[h]).collect();
            assert_eq!(client.scrape(&order), want, "scrape of {order:?}");
        }
    }
    // Each scrape landed on the owner of its first torrent, which asked the
    // other worker for the rest.
    let forwarded = tracker.metric("tracker_mesh_forwarded_total", &[]) - forwarded_before;
    assert_eq!(forwarded, 3 * clients.len() as u64);
}

#[test]
fn http_announces_are_counted_as_answered_here_or_forwarded() {
    let tracker = Tracker::builder().http(None).metrics().start();
    let http = tracker.http[0];
    // Torrents of worker 0 only, each announce on a connection of its own,
    // which the kernel gives to either worker.
    let announces = 20u64;
    for n in 0..announces as u16 {
        let hash = hash_owned_by(0, WORKERS, u32::from(n));
        support::wire::http_get_ok(http, &support::wire::http_announce_target(hash, 7000 + n));
    }
    let count = |route, worker: &str| {
        tracker.metric(
            "tracker_announces_routed_total",
            &[("protocol", "http"), ("route", route), ("worker", worker)],
        )
    };
    assert_eq!(count("local", "1"), 0, "worker 1 owns none of them");
    assert_eq!(count("forwarded", "0"), 0, "worker 0 owns all of them");
    assert_eq!(count("local", "0") + count("forwarded", "1"), announces);
}
