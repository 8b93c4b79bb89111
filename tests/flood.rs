//! Bounded memory under a flood: announces for random info-hashes from many
//! source addresses (all of 127/8 is loopback) fill a worker to its torrent
//! cap, after which each new torrent takes the place of one held (of a single
//! peer: see tracker_swarm's `evict`); stored peers stop at the worker's peer
//! cap, after which new torrents are answered without being stored; and
//! resident memory levels off.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use support::wire::{udp_announce, udp_connect};
use support::Tracker;
use tracker_proto::udp::{write_scrape_request, ConnectionId, TransactionId};
use tracker_proto::{AnnounceEvent, InfoHash};

const WORKERS: usize = 2;
const MAX_TORRENTS: usize = 1000;
const MAX_PEERS: usize = 1500;
const SOURCES: u16 = 200;
const PER_SOURCE: u16 = 50;

struct Source {
    sock: UdpSocket,
    id: ConnectionId,
}

/// What a round of announces got back.
#[derive(Default, Debug)]
struct Round {
    stored: Vec<InfoHash>,
    refused: usize,
    unanswered: usize,
}

fn sources(target: SocketAddr) -> Vec<Source> {
    (0..SOURCES)
        .map(|n| {
            let ip = format!("127.1.{}.{}", n / 250, n % 250 + 1);
            let sock = UdpSocket::bind((ip.as_str(), 0)).unwrap();
            sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
            let id = udp_connect(&sock, target).expect("connect");
            Source { sock, id }
        })
        .collect()
}

/// xorshift64: random info-hashes, never repeated in practice.
fn random_hash(x: &mut u64) -> InfoHash {
    let mut h = [0u8; 20];
    for chunk in h.chunks_mut(8) {
        *x ^= *x << 13;
        *x ^= *x >> 7;
        *x ^= *x << 17;
        chunk.copy_from_slice(&x.to_le_bytes()[..chunk.len()]);
    }
    InfoHash(h)
}

/// Each source announces `PER_SOURCE` times on `hashes` (one fresh random
/// info-hash per announce when `None`), on its own port each time.
fn round(
    target: SocketAddr,
    sources: &[Source],
    seed: &mut u64,
    hashes: Option<&[InfoHash]>,
) -> Round {
    let mut r = Round::default();
    let mut buf = [0u8; 1500];
    for (s, source) in sources.iter().enumerate() {
        let mut sent = Vec::new();
        for k in 0..PER_SOURCE {
            let hash = match hashes {
                Some(hashes) => hashes[(s * PER_SOURCE as usize + k as usize) % hashes.len()],
                None => random_hash(seed),
            };
            let packet = udp_announce(
                source.id,
                k.into(),
                hash,
                10_000 + k,
                AnnounceEvent::Started,
                1,
            );
            source.sock.send_to(&packet, target).unwrap();
            sent.push(hash);
        }
        let mut answered = 0;
        while answered < sent.len() {
            let Ok((n, _)) = source.sock.recv_from(&mut buf) else {
                break;
            };
            answered += 1;
            let txid = i32::from_be_bytes(buf[4..8].try_into().unwrap()) as usize;
            match i32::from_be_bytes(buf[..4].try_into().unwrap()) {
                1 => r.stored.push(sent[txid]),
                3 => {
                    assert!(
                        std::str::from_utf8(&buf[8..n])
                            .unwrap()
                            .contains("tracker is full"),
                        "{:?}",
                        &buf[..n]
                    );
                    r.refused += 1;
                }
                action => panic!("unexpected action {action}"),
            }
        }
        r.unanswered += sent.len() - answered;
    }
    r
}

/// Peers stored over `hashes`, as scrapes count them.
fn peers_stored(target: SocketAddr, source: &Source, hashes: &[InfoHash]) -> u64 {
    held(target, source, hashes).iter().map(|(_, n)| n).sum()
}

/// Those of `hashes` held with peers, and their peers, as scrapes count them.
fn held(target: SocketAddr, source: &Source, hashes: &[InfoHash]) -> Vec<(InfoHash, u64)> {
    let mut held = Vec::new();
    let mut buf = [0u8; 1500];
    for (i, chunk) in hashes.chunks(74).enumerate() {
        let mut packet = Vec::new();
        write_scrape_request(&mut packet, source.id, TransactionId(i as i32), chunk);
        source.sock.send_to(&packet, target).unwrap();
        let (n, _) = source.sock.recv_from(&mut buf).expect("scrape answer");
        assert_eq!(n, 8 + 12 * chunk.len());
        for (hash, stats) in chunk.iter().zip(buf[8..n].chunks(12)) {
            let seeders = u32::from_be_bytes(stats[..4].try_into().unwrap());
            let leechers = u32::from_be_bytes(stats[8..12].try_into().unwrap());
            if seeders + leechers > 0 {
                held.push((*hash, u64::from(seeders + leechers)));
            }
        }
    }
    held
}

#[test]
fn a_flood_of_random_torrents_levels_off_at_the_caps() {
    // The flood comes from one /24 of loopback: its subnet's and network's
    // budgets of new torrents, and its network's share of the peers, would
    // turn most of it away.
    let tracker = Tracker::builder()
        .config(&format!(
            "[swarm]\nmax_torrents_per_worker = {MAX_TORRENTS}\nmax_peers_per_worker = {MAX_PEERS}\n\
             max_peers_per_torrent = 1000\npeer_timeout_secs = 3600\ncleanup_interval_secs = 3600\n\
             new_torrents_per_subnet_per_minute = 0\nnew_torrents_per_network_per_minute = 0\n\
             max_peers_per_network = 0\n"
        ))
        .udp(None)
        .metrics()
        .start();
    let target = tracker.udp[0];
    let sources = sources(target);
    let mut seed = 0x2545_f491_4f6c_dd1d;
    let cap = WORKERS * MAX_TORRENTS;
    let sent = SOURCES as usize * PER_SOURCE as usize;

    // Fill: 10,000 announces for new torrents, all answered; the workers
    // hold `cap` in all, each new one past it in the place of one of a peer.
    let first = round(target, &sources, &mut seed, None);
    assert_eq!(first.unanswered, 0, "{first:?}");
    assert_eq!((first.stored.len(), first.refused), (sent, 0));
    let stored: Vec<InfoHash> = held(target, &sources[0], &first.stored)
        .into_iter()
        .map(|(hash, _)| hash)
        .collect();
    assert_eq!(stored.len(), cap, "torrents held");
    let evicted = |tracker: &Tracker| {
        tracker.metric("tracker_store_full_total", &[("kind", "torrent_evicted")])
    };
    assert_eq!(evicted(&tracker), (sent - cap) as u64);

    // More floods of new torrents: each takes a place, memory stays flat.
    let flood = |n: usize, seed: &mut u64| {
        for _ in 0..n {
            let r = round(target, &sources, seed, None);
            assert_eq!((r.stored.len(), r.refused, r.unanswered), (sent, 0, 0));
        }
    };
    flood(2, &mut seed);
    let after_n = tracker.rss_kib();
    flood(2, &mut seed);
    let after_2n = tracker.rss_kib();
    // 20,000 torrents more would take several MiB (see SwarmStore); allow
    // 1 MiB for allocator noise.
    assert!(
        after_2n <= after_n + 1024,
        "resident memory grew from {after_n} KiB to {after_2n} KiB"
    );
    assert_eq!(tracker.metric("tracker_torrents", &[]), cap as u64);
    assert_eq!(evicted(&tracker), (5 * sent - cap) as u64);

    // New peers for the torrents held now: they are answered, but stored
    // only up to each worker's peer cap.
    let last = round(target, &sources, &mut seed, None);
    assert_eq!(last.refused, 0);
    let stored: Vec<InfoHash> = held(target, &sources[0], &last.stored)
        .into_iter()
        .map(|(hash, _)| hash)
        .collect();
    let more = round(target, &sources, &mut seed, Some(&stored));
    assert_eq!((more.stored.len(), more.refused), (sent, 0), "answered");
    let peers = |tracker: &Tracker| tracker.metric("tracker_peers", &[]);
    assert_eq!(
        peers(&tracker),
        (WORKERS * MAX_PEERS) as u64,
        "peers stored"
    );
    let in_stored = peers_stored(target, &sources[0], &stored);

    // From here on a new torrent has no room for its peer: it is answered
    // as a swarm of none, not stored, and takes no torrent's place.
    let before = evicted(&tracker);
    flood(2, &mut seed);
    assert_eq!(evicted(&tracker), before);
    assert_eq!(peers(&tracker), (WORKERS * MAX_PEERS) as u64);
    assert_eq!(peers_stored(target, &sources[0], &stored), in_stored);
    let after = tracker.rss_kib();
    assert!(
        after <= after_2n + 1024,
        "resident memory grew from {after_2n} KiB to {after} KiB"
    );
}
