use std::collections::{BTreeMap, BTreeSet};
use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::*;
use crate::counts::{CleanReport, PeerTotals};
use crate::torrent::CLEAN_WINDOW;
use tracker_proto::{Announce, AnnounceEvent, InfoHash, ScrapeStats};
use tracker_proto::{AnswerPeers, BlockLevel, PeerId};

const TIMEOUT: u32 = 100;

/// The worker that owns `h` among `workers`, for the tests of restoring a
/// file into several stores (the runtime's own function is of no matter
/// here: any partition of the torrents will do).
fn owner_of(h: &InfoHash, workers: usize) -> usize {
    usize::from(h.0[0]) % workers
}

fn limits(max_torrents: usize, max_peers_per_torrent: usize) -> StoreLimits {
    StoreLimits {
        peer_timeout_secs: TIMEOUT,
        max_torrents,
        max_peers_per_torrent,
        max_peers: usize::MAX,
        max_peers_per_address: None,
        max_peers_per_network: None,
        new_torrents_per_minute: [0; 3],
        peer_ids: true,
    }
}

fn store() -> SwarmStore {
    SwarmStore::new(limits(1000, 1000), 42)
}

fn hash(n: u8) -> InfoHash {
    InfoHash([n; 20])
}

fn v4(n: u8) -> SocketAddr {
    (Ipv4Addr::new(10, 0, 0, n), 6881).into()
}

fn v6(n: u8) -> SocketAddr {
    (Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, n.into()), 6881).into()
}

/// A leecher's `started` on torrent 1 asking for plenty of peers.
fn ann(peer_addr: SocketAddr) -> Announce {
    Announce {
        info_hash: hash(1),
        peer_id: PeerId([peer_addr.ip().is_ipv6() as u8; 20]),
        peer_addr,
        event: AnnounceEvent::Started,
        left: 1,
        numwant: 1000,
        peer_ids: true,
    }
}

fn seeder(peer_addr: SocketAddr) -> Announce {
    Announce {
        left: 0,
        ..ann(peer_addr)
    }
}

fn with_event(event: AnnounceEvent, req: Announce) -> Announce {
    Announce { event, ..req }
}

fn on_torrent(info_hash: InfoHash, req: Announce) -> Announce {
    Announce { info_hash, ..req }
}

/// Announces at `now`; returns the counts and the addresses handed out.
fn go(store: &mut SwarmStore, req: Announce, now: u32) -> (SwarmCounts, Vec<SocketAddr>) {
    let mut peers = AnswerPeers::default();
    let counts = store.announce(&req, now, &mut peers).expect("not refused");
    (counts, peers.addrs().collect())
}

fn counts(seeders: u32, leechers: u32) -> SwarmCounts {
    SwarmCounts { seeders, leechers }
}

fn totals(seeders: usize, leechers: usize) -> PeerTotals {
    PeerTotals { seeders, leechers }
}

/// A segment's clean step and the steps for its large torrents, as the
/// cleaner runs them.
fn clean_segment_fully(store: &mut SwarmStore, segment: usize, now: u32) -> CleanReport {
    let mut total = store.clean_segment(segment, now);
    while store.cleaning() {
        total.add(store.clean_more(now));
    }
    total
}

fn clean_all(store: &mut SwarmStore, now: u32) -> CleanReport {
    let mut total = CleanReport::default();
    for segment in 0..SwarmStore::SEGMENTS {
        total.add(clean_segment_fully(store, segment, now));
    }
    total
}

#[test]
fn counts_follow_joins_upgrades_reannounces_and_leaves() {
    let mut s = store();
    assert_eq!(go(&mut s, ann(v4(1)), 0).0, counts(0, 1));
    assert_eq!(go(&mut s, ann(v4(2)), 0).0, counts(0, 2));
    assert_eq!(go(&mut s, seeder(v4(3)), 0).0, counts(1, 2));
    // Re-announcing changes nothing; becoming a seeder and back moves one count.
    assert_eq!(
        go(&mut s, with_event(AnnounceEvent::None, ann(v4(1))), 1).0,
        counts(1, 2)
    );
    assert_eq!(go(&mut s, seeder(v4(1)), 2).0, counts(2, 1));
    assert_eq!(go(&mut s, seeder(v4(1)), 3).0, counts(2, 1));
    assert_eq!(go(&mut s, ann(v4(3)), 3).0, counts(1, 2));
    // Leaving, as seeder and as leecher.
    assert_eq!(
        go(&mut s, with_event(AnnounceEvent::Stopped, seeder(v4(1))), 4).0,
        counts(0, 2)
    );
    assert_eq!(
        go(&mut s, with_event(AnnounceEvent::Stopped, ann(v4(2))), 4).0,
        counts(0, 1)
    );

    let stats = s.scrape(&hash(1));
    assert_eq!((stats.seeders, stats.leechers), (0, 1));
    assert_eq!(s.peer_count(), totals(0, 1));
    assert_eq!(s.torrent_count(), 1);
    assert_eq!(s.scrape(&hash(9)), ScrapeStats::default());
}

#[test]
fn peers_are_keyed_by_address_not_peer_id() {
    let mut s = store();
    go(&mut s, ann(v4(1)), 0);
    // Another address with the same peer id is another peer...
    assert_eq!(go(&mut s, ann(v4(2)), 0).0, counts(0, 2));
    // ...and the same address with a new peer id replaces the old entry.
    let renamed = Announce {
        peer_id: PeerId([7; 20]),
        ..ann(v4(1))
    };
    assert_eq!(go(&mut s, renamed, 0).0, counts(0, 2));
    let mut peers = AnswerPeers::default();
    s.announce(&ann(v4(2)), 0, &mut peers).unwrap();
    assert_eq!(peers.peer_ids(), [PeerId([7; 20])]);
}

#[test]
fn completed_counts_once_per_peer_becoming_a_seeder() {
    let mut s = store();
    let completed = |r: Announce| with_event(AnnounceEvent::Completed, r);
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, completed(seeder(v4(1))), 0);
    go(&mut s, completed(seeder(v4(1))), 0);
    assert_eq!(s.scrape(&hash(1)).completed, 1);
    // A peer first seen with `completed` counts; one still leeching does too.
    go(&mut s, completed(seeder(v4(2))), 0);
    go(&mut s, completed(ann(v4(3))), 0);
    assert_eq!(s.scrape(&hash(1)).completed, 3);
    // Stopping does not undo it.
    go(&mut s, with_event(AnnounceEvent::Stopped, seeder(v4(1))), 0);
    assert_eq!(
        s.scrape(&hash(1)),
        ScrapeStats {
            seeders: 1,
            completed: 3,
            leechers: 1
        }
    );
}

#[test]
fn stopped_removes_without_answering_or_creating() {
    let mut s = store();
    let stop = |r: Announce| with_event(AnnounceEvent::Stopped, r);
    assert_eq!(go(&mut s, stop(ann(v4(1))), 0), (counts(0, 0), vec![]));
    assert_eq!(s.torrent_count(), 0);

    go(&mut s, ann(v4(1)), 0);
    go(&mut s, ann(v4(2)), 0);
    // An unknown peer stopping changes nothing and gets no peers.
    assert_eq!(go(&mut s, stop(ann(v4(3))), 0), (counts(0, 2), vec![]));
    assert_eq!(go(&mut s, stop(ann(v6(3))), 0), (counts(0, 2), vec![]));
    assert_eq!(go(&mut s, stop(ann(v4(2))), 0), (counts(0, 1), vec![]));
    assert_eq!(s.peer_count(), totals(0, 1));
}

#[test]
fn numwant_is_honoured_and_the_requester_left_out() {
    let mut s = store();
    for n in 1..=10 {
        go(&mut s, ann(v4(n)), 0);
    }
    for numwant in [0, 1, 3, 9, 10, 1000] {
        let req = Announce {
            numwant,
            ..ann(v4(1))
        };
        let (_, peers) = go(&mut s, req, 0);
        assert_eq!(peers.len(), (numwant as usize).min(9));
        assert!(!peers.contains(&v4(1)));
        assert_eq!(peers.iter().collect::<BTreeSet<_>>().len(), peers.len());
    }
    // A peer that is not stored (here: a new one) gets all ten.
    let mut s = SwarmStore::new(limits(10, 10), 1);
    for n in 1..=11 {
        go(&mut s, ann(v4(n)), 0);
    }
    assert_eq!(go(&mut s, ann(v4(11)), 0).1.len(), 10);
}

#[test]
fn selection_varies_between_announces() {
    let mut s = store();
    for n in 1..=50 {
        go(&mut s, ann(v4(n)), 0);
    }
    let req = Announce {
        numwant: 5,
        ..ann(v4(1))
    };
    let answers: BTreeSet<Vec<SocketAddr>> = (0..20).map(|_| go(&mut s, req, 0).1).collect();
    assert!(answers.len() > 10, "{answers:?}");
}

#[test]
fn families_are_kept_apart_but_counted_together() {
    let mut s = store();
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, seeder(v4(2)), 0);
    go(&mut s, ann(v6(1)), 0);
    let (c, peers) = go(&mut s, ann(v6(2)), 0);
    assert_eq!(c, counts(1, 3));
    assert_eq!(peers, vec![v6(1)]);
    let (_, mut peers) = go(&mut s, ann(v4(3)), 0);
    peers.sort();
    assert_eq!(peers, vec![v4(1), v4(2)]);
    assert_eq!(s.peer_count(), totals(1, 4));
}

#[test]
fn seeders_are_given_only_leechers() {
    let mut s = store();
    for n in 1..=5 {
        go(&mut s, seeder(v4(n)), 0);
    }
    go(&mut s, ann(v4(6)), 0);
    go(&mut s, ann(v4(7)), 0);
    let (_, mut peers) = go(&mut s, seeder(v4(1)), 0);
    peers.sort();
    assert_eq!(peers, vec![v4(6), v4(7)]);
    // A leecher gets both kinds.
    assert_eq!(go(&mut s, ann(v4(6)), 0).1.len(), 6);
}

#[test]
fn expired_peers_are_not_handed_out_and_cleaning_drops_them() {
    let mut s = store();
    go(&mut s, seeder(v4(1)), 0);
    go(&mut s, ann(v4(2)), 50);
    go(&mut s, ann(v6(1)), 0);
    assert_eq!(go(&mut s, ann(v4(3)), TIMEOUT - 1).1.len(), 2);
    // v4(1) expires at TIMEOUT; it still counts until cleaned.
    let (c, peers) = go(&mut s, ann(v4(3)), TIMEOUT);
    assert_eq!((c, peers), (counts(1, 3), vec![v4(2)]));

    let report = clean_all(&mut s, TIMEOUT);
    assert_eq!(report.torrents, 0);
    assert_eq!(report.peers, totals(1, 1));
    assert_eq!(s.scrape(&hash(1)).leechers, 2);
    assert_eq!(s.peer_count(), totals(0, 2));

    // A re-announce keeps a peer alive; an empty torrent goes.
    go(&mut s, ann(v4(2)), 140);
    assert_eq!(clean_all(&mut s, 200).peers.leechers, 1);
    let report = clean_all(&mut s, 240);
    assert_eq!(report.torrents, 1);
    assert_eq!(
        (s.torrent_count(), s.peer_count()),
        (0, PeerTotals::default())
    );
    assert_eq!(s.scrape(&hash(1)), ScrapeStats::default());
}

#[test]
fn an_expired_peer_announcing_again_is_refreshed_in_place() {
    let mut s = store();
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, ann(v4(2)), 0);
    assert_eq!(go(&mut s, ann(v4(1)), TIMEOUT + 5), (counts(0, 2), vec![]));
    assert_eq!(clean_all(&mut s, TIMEOUT + 5).peers.leechers, 1);
    assert_eq!(s.scrape(&hash(1)).leechers, 1);
}

/// Peer `n` of a large swarm: its own address and port, either family.
fn many(n: u32, ipv6: bool) -> SocketAddr {
    let port = 1 + (n % 60_000) as u16;
    if ipv6 {
        (
            Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, (n / 60_000) as u16),
            port,
        )
            .into()
    } else {
        (Ipv4Addr::from(0x0a00_0000 + n / 60_000), port).into()
    }
}

#[test]
fn a_large_swarm_is_cleaned_a_window_at_a_time_while_it_is_announced_to() {
    let mut s = SwarmStore::new(limits(10, usize::MAX), 7);
    // 5,000 IPv4 and 2,000 IPv6 peers, seeders and leechers; the odd ones
    // announced late and outlive the clean below.
    let peers: Vec<(SocketAddr, bool)> = (0..5_000)
        .map(|n| (many(n, false), n % 3 == 0))
        .chain((0..2_000).map(|n| (many(n, true), n % 3 == 0)))
        .collect();
    for (n, &(addr, seeds)) in peers.iter().enumerate() {
        let req = if seeds { seeder(addr) } else { ann(addr) };
        go(&mut s, req, if n % 2 == 1 { 50 } else { 0 });
    }
    let live = |seeds: bool| {
        let odd = peers.iter().enumerate().filter(|(n, _)| n % 2 == 1);
        odd.filter(|(_, &(_, s))| s == seeds).count() as u32
    };
    let (seeders, leechers) = (live(true), live(false));

    let now = TIMEOUT + 10;
    assert_eq!(
        s.clean_segment(s.segment_of(&hash(1)), now),
        CleanReport::default()
    );
    assert!(s.cleaning(), "the large torrent is left to clean_more");
    let mut steps = 0;
    let mut removed = CleanReport::default();
    while s.cleaning() {
        removed.add(s.clean_more(now));
        steps += 1;
        // Announces between steps move peers about: the last IPv4 peer is
        // swapped into the place of a stopped one, a leecher becomes a seeder.
        go(
            &mut s,
            with_event(AnnounceEvent::Stopped, ann(many(4_001, false))),
            now,
        );
        go(&mut s, seeder(many(4_003, false)), now);
        go(
            &mut s,
            with_event(AnnounceEvent::Stopped, ann(many(4_001, false))),
            now,
        );
        go(&mut s, ann(many(4_001, false)), now);
    }
    assert!(steps >= 7_000 / CLEAN_WINDOW, "{steps} steps");
    // Whatever the announces moved behind the pass, a second pass takes.
    removed.add(clean_all(&mut s, now));
    assert_eq!(removed.peers.seeders + removed.peers.leechers, 3_500);
    // Peer 4,003 turned seeder; both it and 4,001 were announced at `now`.
    let expected = SwarmCounts {
        seeders: seeders + u32::from(4_003 % 3 != 0),
        leechers: leechers - u32::from(4_003 % 3 != 0),
    };
    assert_eq!(s.scrape(&hash(1)).seeders, expected.seeders);
    assert_eq!(s.scrape(&hash(1)).leechers, expected.leechers);
    assert_eq!(
        s.peer_count(),
        totals(expected.seeders as usize, expected.leechers as usize)
    );

    // Everyone expires: the torrent goes with its last window.
    let gone = clean_all(&mut s, now + TIMEOUT);
    assert_eq!(gone.torrents, 1);
    assert_eq!(s.torrent_count(), 0);
    assert_eq!(s.peer_count(), totals(0, 0));
}

/// An access list may remove a large torrent while its clean is under way.
#[test]
fn a_large_torrent_removed_between_clean_steps_is_let_go() {
    let mut s = SwarmStore::new(limits(10, usize::MAX), 7);
    for n in 0..(CLEAN_WINDOW as u32 + 1) {
        go(&mut s, ann(many(n, false)), 0);
    }
    let segment = s.segment_of(&hash(1));
    assert_eq!(
        s.clean_segment(segment, TIMEOUT + 1),
        CleanReport::default()
    );
    assert!(s.cleaning());
    assert_eq!(s.retain_torrents(segment, |_| false).torrents, 1);
    assert_eq!(s.clean_more(TIMEOUT + 1), CleanReport::default());
    assert!(!s.cleaning());
    assert_eq!((s.torrent_count(), s.peer_count()), (0, totals(0, 0)));
}

#[test]
fn cleaning_touches_only_its_segment() {
    let mut s = store();
    let a = hash(0);
    let b = (1..=255)
        .map(hash)
        .find(|b| s.segment_of(b) != s.segment_of(&a))
        .expect("two segments");
    go(&mut s, on_torrent(a, ann(v4(1))), 0);
    go(&mut s, on_torrent(b, ann(v4(1))), 0);
    let report = s.clean_segment(s.segment_of(&a), TIMEOUT);
    assert_eq!(report.torrents, 1);
    assert_eq!(s.scrape(&a), ScrapeStats::default());
    assert_eq!(s.scrape(&b).leechers, 1);
}

#[test]
fn segments_spread_hashes_differing_in_any_two_bytes() {
    // The segment keys are random, and about one key in 150 crowds some
    // segment with such structured hashes: what must hold is that crowding
    // is rare, so ten stores are tried and at most two may crowd (a chance
    // of about 1 in 25,000 with keys that good, and certain failure for a
    // hash that ignores bytes or keys).
    let crowded = (0..10)
        .filter(|_| {
            let s = store();
            [(0, 1), (7, 8), (18, 19)].iter().any(|&(x, y)| {
                let mut used = vec![0usize; SwarmStore::SEGMENTS];
                for i in 0..=255u8 {
                    for j in 0..64u8 {
                        let mut h = [0; 20];
                        (h[x], h[y]) = (i, j);
                        used[s.segment_of(&InfoHash(h))] += 1;
                    }
                }
                // 16 hashes per segment on average: none may be crowded.
                used.iter().any(|&n| n >= 64)
            })
        })
        .count();
    assert!(crowded <= 2, "{crowded} of 10 stores crowded a segment");
}

#[test]
fn scrape_some_lists_at_most_max_torrents_with_their_counts() {
    let mut store = store();
    for n in 1..=10 {
        go(&mut store, on_torrent(hash(n), seeder(v4(n))), 0);
    }
    let mut out = vec![(hash(99), ScrapeStats::default())];
    store.scrape_some(4, &mut out);
    assert_eq!(out.len(), 5, "appends, up to max");
    for (info_hash, stats) in &out[1..] {
        assert!((1..=10).contains(&info_hash.0[0]));
        assert_eq!(*stats, store.scrape(info_hash));
    }
    out.clear();
    store.scrape_some(100, &mut out);
    let listed: BTreeSet<InfoHash> = out.iter().map(|(h, _)| *h).collect();
    assert_eq!(listed, (1..=10).map(hash).collect());
}

/// An address of another network than `v4`'s (10.0.0.0/16).
fn elsewhere(n: u8) -> SocketAddr {
    (Ipv4Addr::new(10, 1, 0, n), 6881).into()
}

#[test]
fn torrent_limit_refuses_new_torrents_only() {
    // Torrents that two networks share, which no new torrent displaces.
    let mut s = SwarmStore::new(limits(2, 10), 1);
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, ann(elsewhere(1)), 0);
    go(&mut s, on_torrent(hash(2), ann(v4(1))), 0);
    go(&mut s, on_torrent(hash(2), ann(elsewhere(1))), 0);
    let third = on_torrent(hash(3), ann(v4(1)));
    let mut peers = AnswerPeers::default();
    peers.push_addr(v4(9), None);
    assert_eq!(
        s.announce(&third, 0, &mut peers),
        Err(AnnounceRefused::TorrentLimit)
    );
    assert!(peers.is_empty());
    assert_eq!(go(&mut s, ann(v4(2)), 0).0, counts(0, 3));
    assert_eq!(s.torrent_count(), 2);
    assert_eq!(s.stats.evicted_torrents, 0);
    // Room again once a torrent is cleaned away.
    clean_all(&mut s, TIMEOUT);
    assert_eq!(go(&mut s, third, TIMEOUT).0, counts(0, 1));
}

/// Issue 28, item 3: a store full of one network's torrents refused every
/// new torrent. A new torrent now takes the place of one held by a single
/// network, never of one that two networks share.
#[test]
fn a_full_store_takes_a_new_torrent_in_place_of_one_of_a_single_network() {
    let mut s = SwarmStore::new(limits(4, 10), 1);
    let other = |a: u8, b: u8| SocketAddr::from(([a, b, 0, 1], 6881));
    for h in [1, 2] {
        go(&mut s, on_torrent(hash(h), ann(v4(1))), 0);
        go(&mut s, on_torrent(hash(h), ann(elsewhere(1))), 0);
    }
    go(&mut s, on_torrent(hash(3), ann(v4(2))), 0);
    // Four peers of one network: one client, as far as the tracker can tell.
    for n in 1..=4 {
        go(&mut s, on_torrent(hash(4), ann(other(192, n))), 0);
    }
    // The creator's own network goes first.
    let creator = SocketAddr::new([10, 0, 9, 9].into(), 6881);
    assert_eq!(
        go(&mut s, on_torrent(hash(5), ann(creator)), 1).0,
        counts(0, 1)
    );
    assert!(!s.holds(&hash(3)));
    assert_eq!(s.stats.evicted_torrents, 1);
    // Another network's: the lone creator's just now, or the four peers of
    // 192.0.0.0/16.
    go(&mut s, on_torrent(hash(6), ann(other(198, 51))), 1);
    assert!(s.holds(&hash(1)) && s.holds(&hash(2)) && s.holds(&hash(6)));
    assert_eq!(s.torrent_count(), 4);
    assert_eq!(s.stats.evicted_torrents, 2);
    let held: usize = [1, 2, 4, 5, 6]
        .into_iter()
        .map(|h| (s.scrape(&hash(h)).leechers) as usize)
        .sum();
    assert_eq!(s.peer_count(), totals(0, held));
    // Once only shared torrents are left, a new one is refused.
    let mut s = SwarmStore::new(limits(2, 10), 1);
    for h in [1, 2] {
        go(&mut s, on_torrent(hash(h), ann(v4(1))), 0);
        go(&mut s, on_torrent(hash(h), ann(elsewhere(1))), 0);
    }
    let mut peers = AnswerPeers::default();
    let refused = s.announce(&on_torrent(hash(3), ann(v4(2))), 0, &mut peers);
    assert_eq!(refused, Err(AnnounceRefused::TorrentLimit));
    assert_eq!((s.stats.refused_torrents, s.stats.evicted_torrents), (1, 0));
}

#[test]
fn a_torrent_no_live_peer_holds_goes_before_any_other() {
    let mut s = SwarmStore::new(limits(3, 10), 1);
    go(&mut s, on_torrent(hash(1), ann(elsewhere(1))), 0);
    go(&mut s, on_torrent(hash(2), ann(v4(2))), 50);
    // Its peer stopped: left empty for the cleaner.
    go(&mut s, on_torrent(hash(3), ann(v4(3))), 50);
    go(
        &mut s,
        with_event(AnnounceEvent::Stopped, on_torrent(hash(3), ann(v4(3)))),
        50,
    );
    // From the network of torrents 2 and 3: its own would go first, but for
    // the empty one.
    go(&mut s, on_torrent(hash(4), ann(v4(9))), 50);
    assert!(!s.holds(&hash(3)));
    // Torrent 1's peer has expired (announced at 0): it goes before the live
    // torrents of the creator's own network.
    go(&mut s, on_torrent(hash(5), ann(v4(8))), TIMEOUT + 1);
    assert!(!s.holds(&hash(1)));
    assert!(s.holds(&hash(2)) && s.holds(&hash(4)) && s.holds(&hash(5)));
    assert_eq!(s.peer_count(), totals(0, 3));
}

/// A store large enough to draw a segment at random: new torrents from many
/// networks take the places of one network's, and the torrents shared by
/// two networks all stay.
#[test]
fn a_large_full_store_draws_torrents_at_random_and_keeps_shared_ones() {
    const CAP: usize = SwarmStore::SEGMENTS * 10;
    let mut s = SwarmStore::new(limits(CAP, 10), 1);
    // Info-hashes as random as SHA-1's (splitmix64 of the number): ones that
    // differ in a few bits only may share few segments under some keys.
    let numbered = |n: u32| {
        let mut h = [0; 20];
        for (i, chunk) in h.chunks_mut(8).enumerate() {
            let mut x = (u64::from(n) << 2 | i as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
            x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
            x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
            chunk.copy_from_slice(&(x ^ (x >> 31)).to_le_bytes()[..chunk.len()]);
        }
        InfoHash(h)
    };
    let mut peers = AnswerPeers::default();
    let shared = CAP as u32 / 10;
    for n in 0..CAP as u32 {
        let req = on_torrent(numbered(n), ann(v4(1)));
        s.announce(&req, 0, &mut peers).unwrap();
        if n < shared {
            let req = on_torrent(numbered(n), ann(elsewhere(1)));
            s.announce(&req, 0, &mut peers).unwrap();
        }
    }
    for n in 0..1000u32 {
        let from = SocketAddr::from(([100, (n % 200) as u8, 0, 1], 6881));
        let req = on_torrent(numbered(CAP as u32 + n), ann(from));
        assert!(s.announce(&req, 1, &mut peers).is_ok());
    }
    assert_eq!(s.torrent_count(), CAP);
    assert_eq!(s.stats.evicted_torrents, 1000);
    assert!((0..shared).all(|n| s.holds(&numbered(n))));
    assert_eq!(s.peer_count(), totals(0, CAP + shared as usize));
}

#[test]
fn peer_limit_answers_new_peers_without_storing_them() {
    let mut s = SwarmStore::new(limits(10, 2), 1);
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, ann(v4(2)), 0);
    let (c, mut peers) = go(&mut s, ann(v4(3)), 0);
    peers.sort();
    assert_eq!((c, peers), (counts(0, 2), vec![v4(1), v4(2)]));
    assert_eq!(go(&mut s, ann(v6(1)), 0), (counts(0, 2), vec![]));
    // Stored peers still update.
    assert_eq!(go(&mut s, seeder(v4(1)), 0).0, counts(1, 1));
    assert_eq!(s.peer_count(), totals(1, 1));
}

#[test]
fn worker_peer_limit_answers_new_peers_without_storing_them_or_their_torrents() {
    let mut s = SwarmStore::new(
        StoreLimits {
            max_peers: 3,
            ..limits(10, 10)
        },
        1,
    );
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, ann(v4(2)), 0);
    go(&mut s, on_torrent(hash(2), ann(v4(1))), 0);
    assert_eq!(s.peer_count(), totals(0, 3));
    assert_eq!(s.stats.unstored_peers, 0);
    // Full: a new peer of a stored torrent is answered with the others, not
    // stored; in both families.
    let (c, mut peers) = go(&mut s, ann(v4(3)), 0);
    peers.sort();
    assert_eq!((c, peers), (counts(0, 2), vec![v4(1), v4(2)]));
    assert_eq!(go(&mut s, ann(v6(1)), 0), (counts(0, 2), vec![]));
    // A new torrent is not created for a peer that cannot be stored.
    assert_eq!(
        go(&mut s, on_torrent(hash(3), ann(v4(1))), 0),
        (counts(0, 0), vec![])
    );
    assert_eq!(s.torrent_count(), 2);
    assert_eq!(s.stats.unstored_peers, 3);
    assert_eq!(s.stats.refused_torrents, 0);
    // Stored peers still update, and a stop makes room for one more.
    assert_eq!(go(&mut s, seeder(v4(1)), 0).0, counts(1, 1));
    go(&mut s, with_event(AnnounceEvent::Stopped, ann(v4(2))), 0);
    assert_eq!(go(&mut s, ann(v6(1)), 0).0, counts(1, 1));
    assert_eq!(s.peer_count(), totals(1, 2));
    // Expired peers hold their place until cleaned.
    assert_eq!(
        go(&mut s, on_torrent(hash(3), ann(v4(1))), TIMEOUT).0,
        counts(0, 0)
    );
    clean_all(&mut s, TIMEOUT);
    assert_eq!(
        go(&mut s, on_torrent(hash(3), ann(v4(1))), TIMEOUT).0,
        counts(0, 1)
    );
    assert_eq!(s.stats.unstored_peers, 4);
}

#[test]
fn limits_are_counted() {
    let mut s = SwarmStore::new(limits(1, 2), 1);
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, ann(elsewhere(1)), 0);
    go(&mut s, ann(v4(2)), 0);
    go(&mut s, ann(v4(1)), 0);
    let mut peers = AnswerPeers::default();
    assert!(s
        .announce(&on_torrent(hash(2), ann(v4(1))), 0, &mut peers)
        .is_err());
    // A stop for a torrent not stored is neither.
    go(
        &mut s,
        with_event(AnnounceEvent::Stopped, on_torrent(hash(3), ann(v4(1)))),
        0,
    );
    assert_eq!((s.stats.refused_torrents, s.stats.unstored_peers), (1, 1));
}

/// The address index keeps positions in 24 bits: a larger limit is lowered
/// to what it can name.
#[test]
fn peers_per_torrent_are_capped_at_what_the_index_can_name() {
    let store = SwarmStore::new(limits(usize::MAX, usize::MAX), 1);
    assert_eq!(store.limits.max_peers_per_torrent, MAX_PEERS_PER_TORRENT);
}

#[test]
fn memory_use_counts_each_structure_where_it_is() {
    let mut store = SwarmStore::new(
        StoreLimits {
            peer_ids: false,
            ..limits(1000, 1000)
        },
        42,
    );
    assert_eq!(store.memory_use(), MemoryUse::default());

    go(&mut store, ann(v4(1)), 1);
    let one = store.memory_use();
    assert_eq!(one.peers, 0, "one IPv4 peer, held in the torrent's entry");
    assert_eq!(one.indexes, 0, "a small swarm has no index");
    assert!(one.torrents >= 64, "a torrent's entry is a cache line");

    // An IPv6 peer brings the torrent's box.
    go(&mut store, ann(v6(1)), 1);
    assert!(store.memory_use().peers >= 20 + 32);

    // Past 32 IPv4 peers the swarm is indexed; torrents hold still.
    for n in 0..40 {
        go(&mut store, ann(many(n, false)), 1);
    }
    let large = store.memory_use();
    assert!(large.peers >= 41 * 8);
    assert!(large.indexes >= 41 * 8, "a slot per peer at least");
    assert_eq!(large.torrents, one.torrents);

    // Back under the threshold the index goes.
    for n in 0..40 {
        go(
            &mut store,
            with_event(AnnounceEvent::Stopped, ann(many(n, false))),
            1,
        );
    }
    assert_eq!(store.memory_use().indexes, 0);

    // A store that keeps peer ids: 20 bytes more a peer, in the box.
    let mut with_ids = store_with_ids();
    go(&mut with_ids, ann(v4(1)), 1);
    let kept = with_ids.memory_use();
    assert!(kept.peers >= 8 + 20, "{kept:?}");
    assert_eq!(kept.torrents, one.torrents, "the entry is the same");
}

fn store_with_ids() -> SwarmStore {
    SwarmStore::new(limits(1000, 1000), 42)
}

#[test]
fn without_peer_ids_answers_have_none_and_all_else_is_the_same() {
    let mut without = SwarmStore::new(
        StoreLimits {
            peer_ids: false,
            ..limits(1000, 1000)
        },
        42,
    );
    let mut with = store_with_ids();
    for s in [&mut without, &mut with] {
        go(s, seeder(v4(1)), 0);
        go(s, ann(v4(2)), 0);
        go(s, seeder(v6(3)), 0);
    }
    // `ann` asks for peer ids (a non-compact HTTP answer would).
    let answer = |s: &mut SwarmStore, req: Announce| {
        let mut peers = AnswerPeers::default();
        let counts = s.announce(&req, 1, &mut peers).unwrap();
        (counts, peers)
    };
    let (counts, peers) = answer(&mut without, ann(v4(4)));
    let (counts_kept, peers_kept) = answer(&mut with, ann(v4(4)));
    assert_eq!(counts, counts_kept);
    assert_eq!(peers.len(), 2);
    assert!(peers.peer_ids().is_empty());
    assert_eq!(peers_kept.peer_ids().len(), 2);
    assert_eq!(without.scrape(&hash(1)), with.scrape(&hash(1)));
    // Saved without ids, their bytes are zero; restored, the same swarm.
    let saved = saved(&without, 1, UNIX);
    assert!(saved[&hash(1)]
        .v4
        .seeders
        .iter()
        .chain(&saved[&hash(1)].v4.leechers)
        .all(|p| p.peer_id == PeerId::default()));
}

#[test]
fn growing_past_the_index_threshold_and_back_keeps_every_peer_and_count() {
    let mut s = store();
    let addr = |n: u8| if n % 2 == 1 { v6(n) } else { v4(n) };
    let check = |s: &mut SwarmStore, alive: &BTreeSet<u8>| {
        let seeders = alive.iter().filter(|&&n| n % 3 == 0).count() as u32;
        let all: BTreeSet<SocketAddr> = alive.iter().map(|&n| addr(n)).collect();
        // Ask as a leecher of each family, which is counted too, then leave.
        let (c, v4s) = go(s, ann(v4(255)), 0);
        let (_, v6s) = go(s, ann(v6(255)), 0);
        go(s, with_event(AnnounceEvent::Stopped, ann(v4(255))), 0);
        go(s, with_event(AnnounceEvent::Stopped, ann(v6(255))), 0);
        assert_eq!(c, counts(seeders, alive.len() as u32 - seeders + 1));
        assert_eq!(
            v4s.iter().chain(&v6s).copied().collect::<BTreeSet<_>>(),
            all
        );
    };
    let mut alive = BTreeSet::new();
    for n in 0..200 {
        let req = if n % 3 == 0 {
            seeder(addr(n))
        } else {
            ann(addr(n))
        };
        go(&mut s, req, 0);
        alive.insert(n);
        check(&mut s, &alive);
    }
    // Leave in an order that mixes seeders and leechers and both families.
    for n in (0..200)
        .rev()
        .step_by(7)
        .chain((0..200).step_by(2))
        .chain(0..200)
    {
        if alive.remove(&n) {
            let req = if n % 3 == 0 {
                seeder(addr(n))
            } else {
                ann(addr(n))
            };
            go(&mut s, with_event(AnnounceEvent::Stopped, req), 0);
            check(&mut s, &alive);
        }
    }
    assert!(alive.is_empty());
}

/// The reference model: the rules written as plainly as possible.
mod model {
    use super::*;

    #[derive(Clone, Copy, Debug)]
    pub struct Peer {
        pub peer_id: PeerId,
        pub seeder: bool,
        pub expiry: u32,
        /// It had a download counted.
        pub completed: bool,
    }

    #[derive(Default)]
    pub struct Torrent {
        pub peers: BTreeMap<SocketAddr, Peer>,
        pub completed: u32,
    }

    impl Torrent {
        pub fn counts(&self) -> SwarmCounts {
            let seeders = self.peers.values().filter(|p| p.seeder).count() as u32;
            counts(seeders, self.peers.len() as u32 - seeders)
        }
    }

    pub struct Model {
        pub limits: StoreLimits,
        pub torrents: BTreeMap<InfoHash, Torrent>,
        /// New peers answered but not stored.
        pub unstored: u64,
        /// ... because their address held its maximum in the torrent.
        pub address_limited: u64,
        /// ... because their network held its maximum in the store.
        pub network_limited: u64,
        pub refused: u64,
        /// The store's slot counting the network of each address in use
        /// (networks that share a slot share a cap: see `network_peers`).
        pub slots: BTreeMap<std::net::IpAddr, Option<usize>>,
    }

    impl Model {
        pub fn announce(
            &mut self,
            req: &Announce,
            now: u32,
        ) -> Result<SwarmCounts, AnnounceRefused> {
            let stopped = req.event == AnnounceEvent::Stopped;
            if !self.torrents.contains_key(&req.info_hash) {
                if stopped {
                    return Ok(SwarmCounts::default());
                }
                if self.peers() >= self.limits.max_peers {
                    self.unstored += 1;
                    return Ok(SwarmCounts::default());
                }
                if self.network_full(req.peer_addr.ip()) {
                    self.network_limited += 1;
                    return Ok(SwarmCounts::default());
                }
                // A torrent to drop for it has gone already (see `evict`).
                if self.torrents.len() >= self.limits.max_torrents {
                    self.refused += 1;
                    return Err(AnnounceRefused::TorrentLimit);
                }
            }
            let total = self.peers();
            let network_full = self.network_full(req.peer_addr.ip());
            let t = self.torrents.entry(req.info_hash).or_default();
            let old = t.peers.get(&req.peer_addr).copied();
            if stopped {
                t.peers.remove(&req.peer_addr);
            } else {
                let room = t.peers.len() < self.limits.max_peers_per_torrent
                    && total < self.limits.max_peers;
                // One client: an IPv4 address, an IPv6 /64.
                let client = |ip| tracker_proto::block_key(ip, BlockLevel::Address);
                let requester = client(req.peer_addr.ip());
                let from_ip = t
                    .peers
                    .keys()
                    .filter(|a| client(a.ip()) == requester)
                    .count();
                if old.is_none()
                    && room
                    && self
                        .limits
                        .max_peers_per_address
                        .is_some_and(|max| from_ip >= max)
                {
                    self.address_limited += 1;
                } else if old.is_none() && room && network_full {
                    self.network_limited += 1;
                } else if old.is_some() || room {
                    // Only a peer stored completes, a seeder never again, and
                    // a peer once at most.
                    let completes = req.event == AnnounceEvent::Completed
                        && !old.is_some_and(|p| p.seeder || p.completed);
                    let peer = Peer {
                        peer_id: req.peer_id,
                        seeder: req.left == 0,
                        expiry: now + self.limits.peer_timeout_secs,
                        completed: completes || old.is_some_and(|p| p.completed),
                    };
                    t.peers.insert(req.peer_addr, peer);
                    t.completed += u32::from(completes);
                } else {
                    self.unstored += 1;
                }
            }
            Ok(t.counts())
        }

        /// Whether the announce would create a torrent in a store full of
        /// torrents, with room for its peer: when the store drops one.
        pub fn is_full_for(&self, req: &Announce) -> bool {
            req.event != AnnounceEvent::Stopped
                && !self.torrents.contains_key(&req.info_hash)
                && self.peers() < self.limits.max_peers
                && !self.network_full(req.peer_addr.ip())
                && self.torrents.len() >= self.limits.max_torrents
        }

        /// The torrents a new one may take the place of, as eviction
        /// weighs them (the rules again: at most `evict::MAX_PEERS` peers,
        /// all of one network).
        pub fn candidates(&self, now: u32) -> Vec<(InfoHash, crate::evict::Candidate)> {
            let network = |a: &SocketAddr| tracker_proto::block_key(a.ip(), BlockLevel::Network);
            let mut all = Vec::new();
            for (h, t) in &self.torrents {
                let networks: BTreeSet<u128> = t.peers.keys().map(network).collect();
                if t.peers.len() > crate::evict::MAX_PEERS || networks.len() > 1 {
                    continue;
                }
                let candidate = crate::evict::Candidate {
                    live: t.peers.values().any(|p| p.expiry > now),
                    network: networks.first().copied(),
                    peers: t.peers.len(),
                    completed: t.completed,
                    spent: 0,
                };
                all.push((*h, candidate));
            }
            all
        }

        /// Drops `gone`, which the store dropped for a new torrent from
        /// `creator`: it must have been one of those worth least.
        pub fn evicted(&mut self, gone: &InfoHash, creator: SocketAddr, now: u32) -> bool {
            let all = self.candidates(now);
            let ranked: Vec<crate::evict::Candidate> = all.iter().map(|(_, c)| *c).collect();
            let network = tracker_proto::block_key(creator.ip(), BlockLevel::Network);
            let rank = |c| crate::evict::rank(c, &ranked, network);
            let best = ranked.iter().map(rank).max();
            let ok = all.iter().any(|(h, c)| h == gone && Some(rank(c)) == best);
            self.torrents.remove(gone);
            ok
        }

        /// Whether the network of `ip` (with those sharing its slot) holds
        /// `max_peers_per_network`.
        pub fn network_full(&self, ip: std::net::IpAddr) -> bool {
            let Some(max) = self.limits.max_peers_per_network else {
                return false;
            };
            let slot = self.slots[&ip];
            let held = self.torrents.values().flat_map(|t| t.peers.keys());
            held.filter(|a| self.slots[&a.ip()] == slot).count() >= max
        }

        /// Stored peers, expired ones included.
        pub fn peers(&self) -> usize {
            self.torrents.values().map(|t| t.peers.len()).sum()
        }

        pub fn clean(&mut self, now: u32, mut in_segment: impl FnMut(&InfoHash) -> bool) {
            self.torrents.retain(|h, t| {
                if in_segment(h) {
                    t.peers.retain(|_, p| p.expiry > now);
                    !t.peers.is_empty()
                } else {
                    true
                }
            });
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Announce(Announce),
    Wait(u32),
    /// Clean the segment holding this torrent.
    Clean(InfoHash),
}

/// Address `i`: odd ones IPv6; fours share an IP with different ports; the
/// first four IPv6 IPs pair up in two /64s (one client each), the others
/// have a /64 of their own.
fn address(i: u8) -> SocketAddr {
    let (ip, port) = (i / 8, 6881 + u16::from(i / 2 % 4));
    if i % 2 == 1 {
        let net = if ip < 4 { ip / 2 } else { ip };
        let v6 = Ipv6Addr::new(0x2001, 0xdb8, 0, net.into(), 0, 0, 0, ip.into());
        (v6, port).into()
    } else {
        (Ipv4Addr::new(10, 0, 0, ip), port).into()
    }
}

fn ops(hashes: u8, addresses: u8, stop_weight: u32) -> impl Strategy<Value = Vec<Op>> {
    let event = prop_oneof![
        4 => Just(AnnounceEvent::None),
        2 => Just(AnnounceEvent::Started),
        2 => Just(AnnounceEvent::Completed),
        stop_weight => Just(AnnounceEvent::Stopped),
    ];
    let announce = (
        (0..hashes, 0..addresses, event),
        (0..3u64, 0..12u32, 0..3u8, any::<bool>()),
    )
        .prop_map(|((h, a, event), (left, numwant, id, peer_ids))| {
            Op::Announce(Announce {
                info_hash: hash(h),
                peer_id: PeerId([id; 20]),
                peer_addr: address(a),
                event,
                left,
                numwant,
                peer_ids,
            })
        });
    let op = prop_oneof![
        100 => announce,
        10 => (0..40u32).prop_map(Op::Wait),
        // Long enough, now and then, for a whole swarm to expire.
        1 => (0..1000u32).prop_map(Op::Wait),
        5 => (0..hashes).prop_map(|h| Op::Clean(hash(h))),
    ];
    proptest::collection::vec(op, 1..600)
}

/// Whether the store's counts per network are those of the peers it holds.
fn network_counts_agree(s: &SwarmStore) -> bool {
    let mut want = vec![0u32; s.networks.counts().len()];
    for segment in s.segments.iter() {
        for (_, torrent) in segment.iter() {
            torrent.for_each_ip(|ip| {
                if let Some(slot) = s.networks.slot_of(ip) {
                    want[slot] += 1;
                }
            });
        }
    }
    want == s.networks.counts()
}

/// Runs `ops` on a store and on the model, checking each answer and, after each
/// step, every count.
fn check_against_model(limits: StoreLimits, hashes: u8, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut store = SwarmStore::new(limits, 3);
    let mut model = model::Model {
        limits,
        torrents: BTreeMap::new(),
        unstored: 0,
        address_limited: 0,
        network_limited: 0,
        refused: 0,
        slots: (0..=u8::MAX)
            .map(|i| address(i).ip())
            .map(|ip| (ip, store.networks.slot_of(ip)))
            .collect(),
    };
    let mut now = 0;
    let mut peers = AnswerPeers::default();
    for op in ops {
        match op {
            Op::Announce(req) => {
                // A prefetch, of this announce and of one that will not come,
                // changes nothing that the checks below would see.
                let other = SocketAddr::new(req.peer_addr.ip(), req.peer_addr.port() ^ 1);
                store.prefetch(&[(req.info_hash, req.peer_addr), (hash(hashes), other)]);
                let evicted = store.stats.evicted_torrents;
                let full = model.is_full_for(&req);
                let got = store.announce(&req, now, &mut peers);
                if store.stats.evicted_torrents > evicted {
                    let gone: Vec<InfoHash> = model
                        .torrents
                        .keys()
                        .filter(|h| !store.holds(h))
                        .copied()
                        .collect();
                    prop_assert!(full && gone.len() == 1, "{:?}", gone);
                    prop_assert!(
                        model.evicted(&gone[0], req.peer_addr, now),
                        "{:?} was not worth least",
                        gone[0]
                    );
                } else if full && model.torrents.len() <= crate::evict::SAMPLES {
                    // A store this small looks at every torrent.
                    prop_assert!(model.candidates(now).is_empty(), "none dropped");
                }
                prop_assert_eq!(got, model.announce(&req, now));
                let addrs: BTreeSet<SocketAddr> = peers.addrs().collect();
                prop_assert_eq!(addrs.len(), peers.len(), "duplicates");
                let ids = peers.peer_ids();
                let kept = req.peer_ids && model.limits.peer_ids;
                prop_assert_eq!(ids.len(), if kept { peers.len() } else { 0 });
                let Some(t) = model.torrents.get(&req.info_hash) else {
                    prop_assert!(peers.is_empty());
                    continue;
                };
                let seeder = req.left == 0;
                let eligible = t
                    .peers
                    .iter()
                    .filter(|(a, p)| {
                        a.is_ipv4() == req.peer_addr.is_ipv4()
                            && **a != req.peer_addr
                            && p.expiry > now
                            && !(seeder && p.seeder)
                    })
                    .count();
                let expected = if req.event == AnnounceEvent::Stopped {
                    0
                } else {
                    eligible
                };
                prop_assert_eq!(peers.len(), expected.min(req.numwant as usize));
                for (i, addr) in peers.addrs().enumerate() {
                    prop_assert_eq!(addr.is_ipv4(), req.peer_addr.is_ipv4());
                    prop_assert_ne!(addr, req.peer_addr);
                    let stored = t.peers.get(&addr);
                    prop_assert!(
                        stored.is_some_and(|s| ids.get(i).is_none_or(|id| s.peer_id == *id)
                            && s.expiry > now
                            && !(seeder && s.seeder)),
                        "{} is no live peer to hand out: {:?}",
                        addr,
                        stored
                    );
                }
            }
            Op::Wait(secs) => now += secs,
            Op::Clean(h) => {
                let segment = store.segment_of(&h);
                clean_segment_fully(&mut store, segment, now);
                model.clean(now, |o| store.segment_of(o) == segment);
            }
        }
        prop_assert_eq!(store.torrent_count(), model.torrents.len());
        let mut totals = PeerTotals::default();
        for h in (0..hashes).map(hash) {
            let expected = model
                .torrents
                .get(&h)
                .map_or_else(ScrapeStats::default, |t| {
                    let c = t.counts();
                    ScrapeStats {
                        seeders: c.seeders,
                        completed: t.completed,
                        leechers: c.leechers,
                    }
                });
            prop_assert_eq!(store.scrape(&h), expected);
            totals.seeders += expected.seeders as usize;
            totals.leechers += expected.leechers as usize;
        }
        prop_assert_eq!(store.peer_count(), totals);
        prop_assert_eq!(store.stats.unstored_peers, model.unstored);
        prop_assert_eq!(store.stats.address_peers, model.address_limited);
        prop_assert_eq!(store.stats.network_peers, model.network_limited);
        prop_assert!(network_counts_agree(&store));
        prop_assert_eq!(store.stats.refused_torrents, model.refused);
    }
    Ok(())
}

proptest! {
    /// Small swarms, a few torrents, every limit reached.
    #[test]
    fn small_swarms_match_the_model(
        ops in ops(3, 8, 2),
        max_peers in 3..12usize,
        per_network in prop_oneof![Just(None), (1..8usize).prop_map(Some)],
        peer_ids in any::<bool>(),
    ) {
        let limits = StoreLimits {
            peer_timeout_secs: 60,
            max_torrents: 2,
            max_peers_per_torrent: 5,
            max_peers,
            max_peers_per_address: Some(3),
            max_peers_per_network: per_network,
            new_torrents_per_minute: [0; 3],
            peer_ids,
        };
        check_against_model(limits, 3, ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Swarms that grow past the index threshold in both families and shrink back.
    #[test]
    fn large_swarms_match_the_model(ops in ops(1, 160, 1)) {
        let limits = StoreLimits {
            peer_timeout_secs: 300,
            max_torrents: 10,
            max_peers_per_torrent: 1000,
            max_peers: usize::MAX,
            max_peers_per_address: None,
            max_peers_per_network: None,
            new_torrents_per_minute: [0; 3],
            peer_ids: true,
        };
        check_against_model(limits, 1, ops)?;
    }

    /// The same with three peers at most from one address and 40 from one
    /// network (each family's peers are of one): still past the index
    /// threshold (20 addresses a family), so large halves count them.
    #[test]
    fn large_swarms_with_an_address_cap_match_the_model(ops in ops(1, 160, 1)) {
        let limits = StoreLimits {
            peer_timeout_secs: 300,
            max_torrents: 10,
            max_peers_per_torrent: 1000,
            max_peers: usize::MAX,
            max_peers_per_address: Some(3),
            max_peers_per_network: Some(40),
            new_torrents_per_minute: [0; 3],
            // Without ids here: the other large test keeps them.
            peer_ids: false,
        };
        check_against_model(limits, 1, ops)?;
    }
}

#[test]
fn retain_torrents_removes_refused_torrents_with_their_peers_and_frees_room() {
    let mut s = SwarmStore::new(limits(3, 10), 1);
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, seeder(v4(2)), 0);
    go(&mut s, on_torrent(hash(2), ann(v4(1))), 0);
    go(&mut s, on_torrent(hash(3), seeder(v6(1))), 0);
    assert_eq!(s.peer_count(), totals(2, 2));
    // Torrent 1 goes: two peers with it; the rest stay as they were.
    let mut total = CleanReport::default();
    for segment in 0..SwarmStore::SEGMENTS {
        total.add(s.retain_torrents(segment, |h| *h != hash(1)));
    }
    assert_eq!(
        total,
        CleanReport {
            torrents: 1,
            peers: totals(1, 1)
        }
    );
    assert_eq!(s.torrent_count(), 2);
    assert_eq!(s.peer_count(), totals(1, 1));
    assert_eq!(s.scrape(&hash(1)), ScrapeStats::default());
    assert_eq!(s.scrape(&hash(2)).leechers, 1);
    assert_eq!(s.scrape(&hash(3)).seeders, 1);
    // The torrent limit counts what is left: a new torrent fits again.
    assert_eq!(
        go(&mut s, on_torrent(hash(4), ann(v4(1))), 0).0,
        counts(0, 1)
    );
    // Keeping everything removes nothing.
    let kept: usize = (0..SwarmStore::SEGMENTS)
        .map(|segment| s.retain_torrents(segment, |_| true).torrents)
        .sum();
    assert_eq!(kept, 0);
    assert_eq!(s.torrent_count(), 3);
}

// --- Saving to and restoring from the state file ----------------------------

/// The store's torrents as a state file would hold them, by info-hash.
fn saved(
    store: &SwarmStore,
    now: u32,
    now_unix: u64,
) -> BTreeMap<InfoHash, crate::state::SavedTorrent> {
    let mut section = crate::state::Section::default();
    store.save(now, now_unix, &mut section);
    let bytes = crate::state::encode(&[section], now_unix);
    let file = crate::state::StateFile::parse(&bytes).unwrap();
    file.records()
        .map(|r| {
            let t = r.unwrap().to_saved();
            (t.info_hash, t)
        })
        .collect()
}

/// Restores the file `store` would save into a new store with `limits`, at
/// `now` on its own clock and `now_unix` on the wall clock; only torrents
/// that `keep` accepts (a worker keeps the ones it owns).
fn restored(
    store: &SwarmStore,
    saved_at: (u32, u64),
    limits: StoreLimits,
    now: (u32, u64),
    keep: impl Fn(&InfoHash) -> bool,
) -> (SwarmStore, Restored) {
    let mut section = crate::state::Section::default();
    store.save(saved_at.0, saved_at.1, &mut section);
    let bytes = crate::state::encode(&[section], saved_at.1);
    let file = crate::state::StateFile::parse(&bytes).unwrap();
    let mut new = SwarmStore::new(limits, 99);
    let done = new
        .restore_file(&file, now.0, now.1, keep)
        .map_err(|(e, _)| e)
        .unwrap();
    (new, done)
}

const UNIX: u64 = 1_700_000_000;

#[test]
fn a_restored_store_scrapes_and_answers_as_before() {
    let mut s = store();
    go(&mut s, seeder(v4(1)), 0);
    go(
        &mut s,
        with_event(AnnounceEvent::Completed, seeder(v4(2))),
        5,
    );
    go(&mut s, ann(v4(3)), 10);
    go(&mut s, ann(v6(4)), 10);
    go(
        &mut s,
        with_event(AnnounceEvent::Completed, seeder(v6(5))),
        10,
    );
    go(&mut s, on_torrent(hash(2), ann(v4(9))), 10);
    let before = [s.scrape(&hash(1)), s.scrape(&hash(2))];
    assert_eq!(before[0].completed, 2);

    // Saved at 20 on this process's clock, restored by a process whose clock
    // just started, at the same wall-clock time.
    let (mut r, done) = restored(&s, (20, UNIX), limits(1000, 1000), (0, UNIX), |_| true);
    assert_eq!(
        done,
        Restored {
            torrents: 2,
            peers: 6,
            expired: 0,
            refused: 0,
            invalid: 0,
            rtc_torrents: 0,
        }
    );
    assert_eq!([r.scrape(&hash(1)), r.scrape(&hash(2))], before);
    assert_eq!(r.peer_count(), s.peer_count());
    assert_eq!(r.torrent_count(), 2);
    // The same peers, seeders still seeders, saved again as they were.
    assert_eq!(saved(&r, 0, UNIX), saved(&s, 20, UNIX));
    let (_, addrs) = go(&mut r, ann(v4(7)), 1);
    assert_eq!(
        addrs.into_iter().collect::<BTreeSet<_>>(),
        [v4(1), v4(2), v4(3)].into_iter().collect()
    );
    // A seeder is given leechers only.
    let (_, addrs) = go(&mut r, seeder(v4(8)), 1);
    assert_eq!(
        addrs.into_iter().collect::<BTreeSet<_>>(),
        [v4(3), v4(7)].into_iter().collect()
    );
}

#[test]
fn peers_keep_their_age_across_restarts_and_expire_on_time() {
    let mut s = store();
    go(&mut s, ann(v4(1)), 0); // last seen at 0
    go(&mut s, ann(v4(2)), 60); // last seen at 60
                                // Saved at 70 (UNIX), restored 20 s later on the wall clock: peer 1 is
                                // 90 s old (10 s left of TIMEOUT = 100), peer 2 is 30 s old.
    let (r, done) = restored(&s, (70, UNIX), limits(1000, 1000), (0, UNIX + 20), |_| true);
    assert_eq!((done.peers, done.expired), (2, 0));
    let ages: Vec<u64> = saved(&r, 0, UNIX + 20)[&hash(1)]
        .v4
        .leechers
        .iter()
        .map(|p| UNIX + 20 - p.last_seen)
        .collect();
    assert_eq!(ages.into_iter().collect::<BTreeSet<_>>(), [30, 90].into());
    // A second restart 15 s later: peer 1 has expired (105 s), peer 2 not.
    let (r2, done) = restored(
        &r,
        (15, UNIX + 35),
        limits(1000, 1000),
        (0, UNIX + 35),
        |_| true,
    );
    assert_eq!(
        (done.peers, done.expired),
        (1, 0),
        "expired peers are not saved"
    );
    assert_eq!(r2.scrape(&hash(1)).leechers, 1);
    // Restored after the whole time-out: nothing is left, not even the torrent.
    let (r3, done) = restored(&s, (70, UNIX), limits(1000, 1000), (0, UNIX + 1000), |_| {
        true
    });
    assert_eq!((done.torrents, done.peers, done.expired), (0, 0, 2));
    assert_eq!(r3.torrent_count(), 0);
    // A wall clock set back counts as no time passed.
    let (_, done) = restored(&s, (70, UNIX), limits(1000, 1000), (0, UNIX - 500), |_| {
        true
    });
    assert_eq!(done.peers, 2);
}

#[test]
fn restoring_keeps_the_limits() {
    let mut s = store();
    for n in 1..=3 {
        go(&mut s, on_torrent(hash(n), ann(v4(1))), 0);
        go(&mut s, on_torrent(hash(n), ann(v6(2))), 0);
    }
    let (r, done) = restored(&s, (0, UNIX), limits(2, 1), (0, UNIX), |_| true);
    assert_eq!(r.torrent_count(), 2);
    assert_eq!(
        done,
        Restored {
            torrents: 2,
            peers: 2,
            expired: 0,
            refused: 4,
            invalid: 0,
            rtc_torrents: 0,
        }
    );
    assert_eq!(r.peer_count(), totals(0, 2));
}

#[test]
fn restoring_twice_adds_no_peer_and_no_completed_count() {
    let mut s = store();
    go(
        &mut s,
        with_event(AnnounceEvent::Completed, seeder(v4(1))),
        0,
    );
    let mut section = crate::state::Section::default();
    s.save(0, UNIX, &mut section);
    let bytes = crate::state::encode(&[section], UNIX);
    let file = crate::state::StateFile::parse(&bytes).unwrap();
    let record = file.records().next().unwrap().unwrap();
    let mut r = store();
    r.restore(&record, 0, UNIX);
    let again = r.restore(&record, 0, UNIX);
    assert_eq!((again.torrents, again.peers), (0, 0));
    assert_eq!(r.scrape(&hash(1)), s.scrape(&hash(1)));
    assert_eq!(r.peer_count(), totals(1, 0));
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(64))]
    /// Whatever the store went through, saving it and restoring the file,
    /// split between any number of workers by owner, gives back every live
    /// swarm: the same counts, completed counts and peers.
    #[test]
    fn any_store_survives_a_restart_on_any_worker_count(
        ops in ops(6, 12, 2),
        workers in 1usize..4,
        wall_clock_gap in 0u64..30,
    ) {
        let limits = StoreLimits {
            peer_timeout_secs: 100,
            max_torrents: 1000,
            max_peers_per_torrent: 1000,
            max_peers: 1_000_000,
            max_peers_per_address: Some(40),
            max_peers_per_network: None,
            new_torrents_per_minute: [0; 3],
            peer_ids: true,
        };
        let mut s = SwarmStore::new(limits, 5);
        let mut now = 0;
        let mut peers = AnswerPeers::default();
        for op in ops {
            match op {
                Op::Announce(req) => { let _ = s.announce(&req, now, &mut peers); }
                Op::Wait(secs) => now += secs,
                Op::Clean(h) => { let segment = s.segment_of(&h); clean_segment_fully(&mut s, segment, now); }
            }
        }
        // What a scrape would show once the cleaner has caught up, as it would
        // by the time the wall clock moved on.
        let later = now + wall_clock_gap as u32;
        clean_all(&mut s, later);
        let shards: Vec<SwarmStore> = (0..workers)
            .map(|w| {
                restored(&s, (now, UNIX), limits, (7, UNIX + wall_clock_gap), |h| {
                    owner_of(h, workers) == w
                })
                .0
            })
            .collect();
        let mut totals = PeerTotals::default();
        for h in (0..6).map(hash) {
            let owner = &shards[owner_of(&h, workers)];
            prop_assert_eq!(owner.scrape(&h), s.scrape(&h));
            for (w, other) in shards.iter().enumerate() {
                if w != owner_of(&h, workers) {
                    prop_assert_eq!(other.scrape(&h), ScrapeStats::default());
                }
            }
        }
        for shard in &shards {
            totals.seeders += shard.peer_count().seeders;
            totals.leechers += shard.peer_count().leechers;
        }
        prop_assert_eq!(totals, s.peer_count());
        let torrents: usize = shards.iter().map(SwarmStore::torrent_count).sum();
        prop_assert_eq!(torrents, s.torrent_count());
        // Peers, their ids and their ages, as the next save would write them.
        let mut again = BTreeMap::new();
        for shard in &shards {
            again.extend(saved(shard, 7, UNIX + wall_clock_gap));
        }
        prop_assert_eq!(again, saved(&s, later, UNIX + wall_clock_gap));
    }
}

#[test]
fn one_address_creates_torrents_within_its_budget_and_others_are_unaffected() {
    let mut s = SwarmStore::new(
        StoreLimits {
            new_torrents_per_minute: [5, 0, 0],
            ..limits(1000, 1000)
        },
        1,
    );
    let mut peers = AnswerPeers::default();
    let mut created = |s: &mut SwarmStore, n: u8, from: SocketAddr, now| {
        s.announce(&on_torrent(hash(n), ann(from)), now, &mut peers)
    };
    for n in 0..5 {
        assert!(created(&mut s, n, v4(1), 60).is_ok());
    }
    assert_eq!(
        created(&mut s, 5, v4(1), 119),
        Err(AnnounceRefused::AddressBudget(BlockLevel::Address))
    );
    assert_eq!(s.stats.torrent_budget, 1);
    // Torrents that exist cost nothing, from another port of the address too.
    let other_port = SocketAddr::new(v4(1).ip(), 7000);
    assert_eq!(created(&mut s, 0, other_port, 119), Ok(counts(0, 2)));
    // The next minute brings a new budget.
    assert!(created(&mut s, 5, v4(1), 120).is_ok());
    assert_eq!(s.torrent_count(), 6);
    // Off at 0.
    let mut unlimited = store();
    for n in 0..50 {
        assert!(created(&mut unlimited, n, v4(1), 0).is_ok());
    }
}

/// Issue 28, item 3: a budget per address alone let each /64 of a network
/// create its own budget's worth, so eight /64s of one /56 filled a store.
#[test]
fn a_network_creates_no_more_than_its_budgets_over_however_many_addresses() {
    let mut s = SwarmStore::new(
        StoreLimits {
            new_torrents_per_minute: [3, 5, 8],
            ..limits(1000, 1000)
        },
        1,
    );
    let mut peers = AnswerPeers::default();
    let mut n = 0u32;
    let mut create = |s: &mut SwarmStore, from: Ipv6Addr| {
        n += 1;
        let mut new = [0; 20];
        new[..4].copy_from_slice(&n.to_le_bytes());
        let req = on_torrent(InfoHash(new), ann((from, 6881).into()));
        s.announce(&req, 0, &mut peers)
    };
    // The /64s of one /56, then the /56s of its /48, as fast as they can.
    let mut refused = BTreeMap::new();
    for net in 0..4u16 {
        for host in 0..256u16 {
            let from = Ipv6Addr::new(0x2001, 0xdb8, 7, net << 8 | host, 0, 0, 0, 1);
            if let Err(why) = create(&mut s, from) {
                *refused.entry(why.reason()).or_insert(0) += 1;
            }
        }
    }
    assert_eq!(s.torrent_count(), 8);
    let said = |level| AnnounceRefused::AddressBudget(level).reason();
    assert_eq!(refused.len(), 2, "{refused:?}");
    assert!(refused.contains_key(said(BlockLevel::Subnet)));
    assert!(refused.contains_key(said(BlockLevel::Network)));
    assert_eq!(s.stats.torrent_budget, 4 * 256 - 8);
    // Another network is unaffected.
    assert!(create(&mut s, Ipv6Addr::new(0x2001, 0xdb8, 8, 0, 0, 0, 0, 1)).is_ok());
    assert_eq!(
        said(BlockLevel::Network),
        "too many new torrents from this network: try again later"
    );
}

#[test]
fn one_address_stores_at_most_its_share_of_a_swarm_small_or_large() {
    let mut s = SwarmStore::new(
        StoreLimits {
            max_peers_per_address: Some(4),
            ..limits(1000, 1000)
        },
        1,
    );
    // A large swarm of other addresses, then one address on many ports.
    for n in 1..=40 {
        go(&mut s, ann(v4(n)), 0);
    }
    let attacker = |port: u16| SocketAddr::new(v4(200).ip(), port);
    for port in 1..=100 {
        go(&mut s, ann(attacker(port)), 0);
    }
    assert_eq!(s.scrape(&hash(1)).leechers, 44);
    assert_eq!(s.stats.address_peers, 96);
    // Its stored peers still re-announce; a stopped one makes room.
    assert_eq!(go(&mut s, seeder(attacker(2)), 1).0, counts(1, 43));
    go(
        &mut s,
        with_event(AnnounceEvent::Stopped, ann(attacker(1))),
        1,
    );
    go(&mut s, ann(attacker(50)), 1);
    assert_eq!(
        s.scrape(&hash(1)),
        ScrapeStats {
            seeders: 1,
            completed: 0,
            leechers: 43
        }
    );
    // In a small swarm of another torrent too.
    for port in 1..=10 {
        go(&mut s, on_torrent(hash(2), ann(attacker(port))), 0);
    }
    assert_eq!(s.scrape(&hash(2)).leechers, 4);
}

/// Issue 28, item 9: 500 `completed` announces from one address counted 500
/// downloads with 32 of its peers stored.
#[test]
fn a_completion_counts_only_from_a_peer_the_swarm_holds() {
    let completed = |s: &SwarmStore| s.scrape(&hash(1)).completed;
    let done = |addr| with_event(AnnounceEvent::Completed, seeder(addr));
    let mut s = SwarmStore::new(
        StoreLimits {
            max_peers_per_address: Some(32),
            ..limits(10, 1000)
        },
        1,
    );
    for port in 1..=500 {
        go(&mut s, done(SocketAddr::new(v4(1).ip(), port)), 0);
    }
    assert_eq!(completed(&s), 32);
    assert_eq!(s.scrape(&hash(1)).seeders, 32);

    // A full swarm: a new peer is answered, not stored, and its completion
    // not counted, in either family (an IPv6 one would need a box first).
    let mut s = SwarmStore::new(limits(10, 2), 1);
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, ann(v4(2)), 0);
    go(&mut s, done(v4(3)), 0);
    go(&mut s, done(v6(3)), 0);
    assert_eq!(completed(&s), 0);
    // A leecher it holds completes once; a seeder it holds does not again.
    go(&mut s, done(v4(1)), 0);
    go(&mut s, done(v4(1)), 0);
    assert_eq!(completed(&s), 1);
    // Nor is a completion counted past the store's own cap on peers.
    let mut s = SwarmStore::new(
        StoreLimits {
            max_peers: 1,
            ..limits(10, 10)
        },
        1,
    );
    go(&mut s, ann(v4(1)), 0);
    go(&mut s, done(v4(2)), 0);
    go(&mut s, done(v6(2)), 0);
    assert_eq!(completed(&s), 0);
    // The leecher it holds completes.
    go(&mut s, done(v4(1)), 0);
    assert_eq!(completed(&s), 1);
}

/// Issue 28, item 15: a load test from one machine is one client to the
/// limits per client; the runtime exempts the networks it is told to.
#[test]
fn an_exempt_client_counts_against_no_limit_per_client_and_others_still_do() {
    let capped = StoreLimits {
        max_peers_per_address: Some(2),
        new_torrents_per_minute: [3, 3, 3],
        ..limits(1000, 1000)
    };
    let mut s = SwarmStore::new(capped, 1);
    let mut peers = AnswerPeers::default();
    let exempt = |port| SocketAddr::new([127, 0, 0, 1].into(), port);
    let mut as_exempt = |s: &mut SwarmStore, req: Announce| {
        s.announce_as(&req, 0, Quota::Exempt, HandOut::ALL, &mut peers)
            .unwrap()
    };
    for n in 1..=50 {
        as_exempt(&mut s, on_torrent(hash(n), ann(exempt(6881))));
    }
    // Past 32 peers: a large half, which counts every client all the same.
    for port in 1..=40 {
        as_exempt(&mut s, ann(exempt(port)));
    }
    assert_eq!(s.torrent_count(), 50);
    assert_eq!(s.scrape(&hash(1)).leechers, 41);
    assert_eq!((s.stats.torrent_budget, s.stats.address_peers), (0, 0));
    // Everyone else is held to them.
    let mut peers = AnswerPeers::default();
    let created = (100..110)
        .filter(|&n| {
            let req = on_torrent(hash(n), ann(v4(1)));
            s.announce(&req, 0, &mut peers).is_ok()
        })
        .count();
    assert_eq!(created, 3);
    for port in 1..=10 {
        go(&mut s, ann(SocketAddr::new(v4(1).ip(), port)), 0);
    }
    assert_eq!(s.scrape(&hash(1)).leechers, 43);
    assert_eq!(s.stats.address_peers, 8);
    // A restore keeps what the announces could store, given the same word.
    let mut section = crate::state::Section::default();
    s.save(0, UNIX, &mut section);
    let bytes = crate::state::encode(&[section], UNIX);
    let file = crate::state::StateFile::parse(&bytes).unwrap();
    let mut r = SwarmStore::new(capped, 2);
    let loopback = |ip: std::net::IpAddr| {
        if ip.is_loopback() {
            Quota::Exempt
        } else {
            Quota::Counted
        }
    };
    r.restore_file_as(&file, 0, UNIX, |_| true, loopback)
        .unwrap();
    assert_eq!(r.scrape(&hash(1)).leechers, 43);
    let mut r = SwarmStore::new(capped, 2);
    r.restore_file(&file, 0, UNIX, |_| true).unwrap();
    assert_eq!(r.scrape(&hash(1)).leechers, 4);
}

/// Address `n` of the /64 2001:db8:1:2::/64 (one host can use any of them).
fn in_one_64(n: u16) -> SocketAddr {
    (Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, n), 6881).into()
}

/// Issue 28, item 2: the cap counted the exact IPv6 address, so 200
/// addresses of one /64 were all stored in one torrent.
#[test]
fn the_share_of_a_swarm_counts_an_ipv6_client_by_its_64_small_or_large() {
    let capped = || {
        SwarmStore::new(
            StoreLimits {
                max_peers_per_address: Some(4),
                ..limits(1000, 1000)
            },
            1,
        )
    };
    // A small swarm: its peers are scanned.
    let mut s = capped();
    for n in 1..=200 {
        go(&mut s, ann(in_one_64(n)), 0);
    }
    assert_eq!(s.scrape(&hash(1)).leechers, 4);
    assert_eq!(s.stats.address_peers, 196);
    // A large swarm: 40 clients of their own /64 each, so that the half is
    // indexed and counts its clients, then the one /64 again.
    let mut s = capped();
    for n in 1..=40 {
        let other_64 = Ipv6Addr::new(0x2001, 0xdb8, 2, n, 0, 0, 0, 1);
        go(&mut s, ann((other_64, 6881).into()), 0);
    }
    for n in 1..=200 {
        go(&mut s, ann(in_one_64(n)), 0);
    }
    assert_eq!(s.scrape(&hash(1)).leechers, 44);
    // One of them leaves: room for one more of its /64, on any address.
    go(
        &mut s,
        with_event(AnnounceEvent::Stopped, ann(in_one_64(1))),
        0,
    );
    go(&mut s, ann(in_one_64(1000)), 0);
    go(&mut s, ann(in_one_64(1001)), 0);
    assert_eq!(s.scrape(&hash(1)).leechers, 44);
    // A restore counts the same way.
    let (r, done) = restored(
        &s,
        (0, UNIX),
        StoreLimits {
            max_peers_per_address: Some(2),
            ..limits(1000, 1000)
        },
        (0, UNIX),
        |_| true,
    );
    assert_eq!((done.peers, done.refused), (42, 2));
    assert_eq!(r.scrape(&hash(1)).leechers, 42);
}

#[test]
fn a_restore_drops_peers_no_announce_could_store_and_keeps_the_address_cap() {
    use crate::state::{SavedPeer, SavedTorrent, Section, StateFile};
    let peer = |ip: [u8; 4], port| SavedPeer {
        ip: Ipv4Addr::from(ip),
        port,
        peer_id: PeerId([1; 20]),
        last_seen: UNIX - 10,
        completed: false,
    };
    let mut t = SavedTorrent {
        info_hash: hash(1),
        completed: 3,
        ..SavedTorrent::default()
    };
    t.v4.leechers = vec![
        peer([10, 0, 0, 1], 0),
        peer([0, 0, 0, 0], 6881),
        peer([255, 255, 255, 255], 6881),
        peer([224, 0, 0, 1], 6881),
        peer([10, 0, 0, 2], 6881),
    ];
    t.v4.seeders = (1..=6).map(|port| peer([10, 0, 0, 3], port)).collect();
    t.v6.seeders = vec![SavedPeer {
        ip: Ipv6Addr::new(0xff02, 0, 0, 0, 0, 0, 0, 1),
        port: 6881,
        peer_id: PeerId([2; 20]),
        last_seen: UNIX - 10,
        completed: false,
    }];
    let mut section = Section::default();
    section.push(&t);
    let bytes = crate::state::encode(&[section], UNIX);
    let file = StateFile::parse(&bytes).unwrap();
    let mut s = SwarmStore::new(
        StoreLimits {
            max_peers_per_address: Some(2),
            ..limits(1000, 1000)
        },
        1,
    );
    let done = s.restore_file(&file, 0, UNIX, |_| true).unwrap();
    assert_eq!(
        done,
        Restored {
            torrents: 1,
            peers: 3,
            expired: 0,
            refused: 4,
            invalid: 5,
            rtc_torrents: 0,
        }
    );
    assert_eq!(
        s.scrape(&hash(1)),
        ScrapeStats {
            seeders: 2,
            completed: 3,
            leechers: 1
        }
    );
}

/// Issue 28, item 10: an IPv4-mapped address in a file's IPv6 half was
/// stored there, where no announce can put one (an IPv4 client is stored as
/// IPv4 whichever socket it came through), so its peer would be an IPv4
/// host handed out as IPv6, and the same host could be stored twice.
#[test]
fn a_restore_keeps_no_ipv4_mapped_address_in_the_ipv6_half() {
    use crate::state::{SavedPeer, SavedTorrent, Section, StateFile};
    let peer = |ip: &str, port| SavedPeer {
        ip: ip.parse::<Ipv6Addr>().unwrap(),
        port,
        peer_id: PeerId([1; 20]),
        last_seen: UNIX - 10,
        completed: false,
    };
    let mut t = SavedTorrent {
        info_hash: hash(1),
        ..SavedTorrent::default()
    };
    t.v4.seeders = vec![SavedPeer {
        ip: Ipv4Addr::new(10, 0, 0, 9),
        port: 6881,
        peer_id: PeerId([1; 20]),
        last_seen: UNIX - 10,
        completed: false,
    }];
    t.v6.seeders = vec![
        peer("::ffff:10.0.0.9", 6881),
        peer("::ffff:10.0.0.10", 6881),
        peer("2001:db8::1", 6881),
    ];
    t.v6.leechers = vec![peer("::ffff:10.0.0.11", 7000)];
    let mut section = Section::default();
    section.push(&t);
    let bytes = crate::state::encode(&[section], UNIX);
    let file = StateFile::parse(&bytes).unwrap();
    let mut s = store();
    let done = s.restore_file(&file, 0, UNIX, |_| true).unwrap();
    assert_eq!((done.peers, done.invalid), (2, 3));
    assert_eq!(s.scrape(&hash(1)).seeders, 2);
    // An IPv6 client is handed only the IPv6 peer.
    let (_, seen) = go(&mut s, ann(v6(7)), 1);
    assert_eq!(
        seen,
        vec![SocketAddr::from((
            "2001:db8::1".parse::<Ipv6Addr>().unwrap(),
            6881
        ))]
    );
}

#[test]
fn a_snapshot_taken_a_segment_at_a_time_while_serving_holds_each_torrent_once() {
    let mut s = store();
    for n in 0..200u8 {
        go(&mut s, on_torrent(hash(n), ann(v4(1))), 0);
    }
    let mut section = crate::state::Section::default();
    for segment in 0..SwarmStore::SEGMENTS {
        s.save_segment(segment, 1, UNIX, &mut section);
        // Between steps requests go on: a second peer on every torrent, and
        // torrents that are new.
        if segment % 100 == 0 {
            let n = (segment / 100) as u8;
            go(&mut s, on_torrent(hash(n), ann(v4(2))), 1);
            go(&mut s, on_torrent(hash(200 + n), ann(v4(1))), 1);
        }
    }
    let bytes = crate::state::encode(&[section], UNIX);
    let file = crate::state::StateFile::parse(&bytes).unwrap();
    let mut seen = BTreeMap::new();
    for record in file.records() {
        let t = record.unwrap().to_saved();
        assert!(
            seen.insert(t.info_hash, t.v4.len()).is_none(),
            "saved twice"
        );
    }
    // Every torrent there when the snapshot began is in it, with the peers
    // it had when its segment was saved.
    for n in 0..200u8 {
        assert!((1..=2).contains(&seen[&hash(n)]));
    }
    // Nothing outside the store is.
    assert!(seen
        .keys()
        .all(|h| s.scrape(h).seeders + s.scrape(h).leechers > 0));
    // Taken whole between two requests, the snapshot is the stop's save.
    let mut whole = crate::state::Section::default();
    s.save(1, UNIX, &mut whole);
    let mut stepped = crate::state::Section::default();
    for segment in 0..SwarmStore::SEGMENTS {
        s.save_segment(segment, 1, UNIX, &mut stepped);
    }
    assert_eq!(whole.as_bytes(), stepped.as_bytes());
}

/// A private tracker's peer-list limits: an answer may leave out seeders,
/// leechers or both, and the ids handed out stay with their addresses.
#[test]
fn an_answer_carries_only_the_kinds_of_peer_handed_out() {
    let mut s = store();
    let id = |n: u8| PeerId([n; 20]);
    let join = |s: &mut SwarmStore, n: u8, left: u64| {
        let req = Announce {
            peer_id: id(n),
            left,
            ..ann(v4(n))
        };
        go(s, req, 0);
    };
    join(&mut s, 1, 5);
    join(&mut s, 2, 5);
    join(&mut s, 3, 0);
    join(&mut s, 4, 0);
    let asking = Announce {
        peer_id: id(9),
        ..ann(v4(9))
    };
    let answer = |s: &mut SwarmStore, seeders, leechers| {
        let mut peers = AnswerPeers::default();
        let hand_out = HandOut { seeders, leechers };
        s.announce_as(&asking, 0, Quota::Counted, hand_out, &mut peers)
            .unwrap();
        let mut got: Vec<(SocketAddr, PeerId)> = peers
            .addrs()
            .zip(peers.peer_ids().iter().copied())
            .collect();
        got.sort();
        got
    };
    let pair = |n: u8| (v4(n), id(n));
    assert_eq!(
        answer(&mut s, true, true),
        vec![pair(1), pair(2), pair(3), pair(4)]
    );
    assert_eq!(answer(&mut s, false, true), vec![pair(1), pair(2)]);
    assert_eq!(answer(&mut s, true, false), vec![pair(3), pair(4)]);
    assert_eq!(answer(&mut s, false, false), vec![]);
    // A seeder is handed leechers only, whatever is allowed.
    let seeding = Announce {
        peer_id: id(3),
        ..seeder(v4(3))
    };
    let mut peers = AnswerPeers::default();
    s.announce_as(&seeding, 0, Quota::Counted, HandOut::ALL, &mut peers)
        .unwrap();
    let mut got: Vec<SocketAddr> = peers.addrs().collect();
    got.sort();
    assert_eq!(got, vec![v4(1), v4(2), v4(9)]);
}

// --- Issue 37 ----------------------------------------------------------------

/// Issue 37, item 8: one peer flipping between leecher and completed
/// (`completed`, then `left` > 0, then `completed` again ...) counted a
/// download per flip (50 flips, 50), in either family. A peer counts one
/// at most while the swarm holds it, and a restart in the middle of a flip
/// forgets nothing of it.
#[test]
fn a_peer_flipping_between_leecher_and_completed_counts_one_download() {
    for addr in [v4(1), v6(1)] {
        let done = with_event(AnnounceEvent::Completed, seeder(addr));
        let back = with_event(AnnounceEvent::None, ann(addr));
        let mut s = store();
        go(&mut s, ann(addr), 0);
        for _ in 0..50 {
            go(&mut s, done, 0);
            go(&mut s, back, 0);
        }
        assert_eq!(s.scrape(&hash(1)).completed, 1, "{addr}");
        // A leecher again, and the store restarts: it still has completed.
        let (mut r, _) = restored(&s, (0, UNIX), limits(1000, 1000), (0, UNIX), |_| true);
        assert_eq!(r.scrape(&hash(1)).leechers, 1);
        go(&mut r, done, 1);
        go(&mut r, back, 1);
        go(&mut r, done, 1);
        assert_eq!(r.scrape(&hash(1)).completed, 1, "{addr}");
        // Its other ports are other peers, each with a completion of its own.
        let other = SocketAddr::new(addr.ip(), 7000);
        let other_done = with_event(AnnounceEvent::Completed, seeder(other));
        go(&mut r, ann(other), 1);
        go(&mut r, other_done, 1);
        assert_eq!(r.scrape(&hash(1)).completed, 2, "{addr}");
    }
}

/// A state file of version 1, written before the marks: its seeders come
/// back as having completed (a flip of theirs counts nothing), its leechers
/// as not (their first completion counts).
#[test]
fn a_version_1_state_file_restores_its_seeders_as_completed() {
    let mut s = store();
    go(&mut s, seeder(v4(1)), 0);
    go(&mut s, ann(v4(2)), 0);
    let torrents: Vec<_> = saved(&s, 0, UNIX).into_values().collect();
    let bytes = crate::state::tests::encode_version_1(&torrents, UNIX);
    let file = crate::state::StateFile::parse(&bytes).unwrap();
    let mut r = store();
    let done = r.restore_file(&file, 0, UNIX, |_| true).unwrap();
    assert_eq!(done.peers, 2);
    for addr in [v4(1), v4(2)] {
        let done = with_event(AnnounceEvent::Completed, seeder(addr));
        go(&mut r, ann(addr), 1);
        go(&mut r, done, 1);
    }
    assert_eq!(r.scrape(&hash(1)).completed, 1);
}

/// Host `n` of the IPv4 network (a /16) 10.`net`.0.0/16.
fn in_network(net: u8, n: u16) -> SocketAddr {
    let [hi, lo] = n.to_be_bytes();
    (Ipv4Addr::new(10, net, hi, lo), 6881).into()
}

/// Torrent `n` of a kind of torrent, `tag`.
fn torrent(tag: u8, n: u16) -> InfoHash {
    let mut hash = [tag; 20];
    hash[..2].copy_from_slice(&n.to_be_bytes());
    InfoHash(hash)
}

/// An announce at time 0 from host `host` of network `net` to torrent `n`
/// of `tag`: the swarm's counts after it.
fn join(s: &mut SwarmStore, (tag, n): (u8, u16), (net, host): (u8, u16)) -> SwarmCounts {
    go(
        s,
        on_torrent(torrent(tag, n), ann(in_network(net, host))),
        0,
    )
    .0
}

/// Issue 37, item 9: eviction spares the torrents that two networks share,
/// so two networks that announced every torrent they created from both held
/// every torrent for good; and one network, announcing from as many
/// addresses as it took, held every peer of the store. Each network now
/// holds its cap of peers at most, and a third one gets in.
#[test]
fn two_networks_cannot_hold_every_torrent_nor_one_every_peer() {
    let capped = StoreLimits {
        max_peers: 100,
        max_peers_per_network: Some(10),
        ..limits(40, 1000)
    };
    let mut s = SwarmStore::new(capped, 1);
    let mut peers = AnswerPeers::default();
    // Networks 1 and 2 create torrents and join each other's, far past the
    // store's 40, each announce from an address of its own.
    for n in 0..100 {
        for net in [1, 2] {
            let req = on_torrent(torrent(0xa1, n), ann(in_network(net, n)));
            s.announce(&req, 0, &mut peers).unwrap();
        }
    }
    assert_eq!(s.torrent_count(), 10);
    assert_eq!(s.peer_count(), totals(0, 20));
    assert_eq!(s.stats.network_peers, 180);
    // Network 4 announces to five torrents from a thousand addresses.
    for n in 0..1000 {
        let req = on_torrent(torrent(0xa4, n % 5), ann(in_network(4, n)));
        s.announce(&req, 0, &mut peers).unwrap();
    }
    assert_eq!(s.peer_count(), totals(0, 30));
    assert_eq!(s.networks.held(in_network(4, 0).ip()), 10);
    // A third network creates torrents, and joins those of the others.
    for n in 0..10 {
        assert_eq!(join(&mut s, (0xa3, n), (3, n)), counts(0, 1));
    }
    assert_eq!(join(&mut s, (0xa1, 0), (5, 0)), counts(0, 3));
    assert_eq!(join(&mut s, (0xa4, 0), (5, 1)), counts(0, 3));
    assert_eq!(s.torrent_count(), 25);
    assert!(network_counts_agree(&s));
    // Peers held announce as ever; one of a full network that leaves makes
    // room for another of it.
    assert_eq!(join(&mut s, (0xa1, 0), (1, 0)), counts(0, 3));
    let stopped = with_event(AnnounceEvent::Stopped, ann(in_network(1, 0)));
    go(&mut s, on_torrent(torrent(0xa1, 0), stopped), 0);
    assert_eq!(join(&mut s, (0xa1, 50), (1, 50)), counts(0, 1));
    assert_eq!(s.networks.held(in_network(1, 0).ip()), 10);
}

/// Issue 37, item 9: what bounds one network does not reach an honest large
/// swarm: 120,000 peers of one torrent from 60,000 networks, with 1,000 at
/// most from each.
#[test]
fn a_large_swarm_of_many_networks_is_not_held_back() {
    let capped = StoreLimits {
        max_peers_per_network: Some(1000),
        ..limits(10, 200_000)
    };
    let mut s = SwarmStore::new(capped, 1);
    let mut peers = AnswerPeers::default();
    for n in 0..120_000u32 {
        let network = n % 60_000 + 256;
        let ip = Ipv4Addr::from(network << 16 | (n / 60_000 + 1));
        let req = Announce {
            numwant: 0,
            ..ann(SocketAddr::from((ip, 6881)))
        };
        s.announce(&req, 0, &mut peers).unwrap();
    }
    assert_eq!(s.peer_count(), totals(0, 120_000));
    assert_eq!(s.stats.network_peers, 0);
    assert!(network_counts_agree(&s));
}

/// Issue 37, item 9: an exempt client (a load test) is held to no cap per
/// network, but counted all the same; the others of its network are held to
/// it.
#[test]
fn an_exempt_client_is_not_held_to_the_cap_per_network_but_counts() {
    let capped = StoreLimits {
        max_peers_per_network: Some(5),
        ..limits(1000, 1000)
    };
    let mut s = SwarmStore::new(capped, 1);
    let mut peers = AnswerPeers::default();
    for n in 0..50 {
        let req = on_torrent(torrent(0xe1, n), ann(in_network(9, 1)));
        s.announce_as(&req, 0, Quota::Exempt, HandOut::ALL, &mut peers)
            .unwrap();
    }
    assert_eq!(s.torrent_count(), 50);
    assert_eq!(s.networks.held(in_network(9, 2).ip()), 50);
    assert_eq!(join(&mut s, (0xe1, 0), (9, 2)), counts(0, 1));
    assert_eq!(s.stats.network_peers, 1);
}

/// The counts per network follow every way a peer goes: expiry, eviction,
/// an access list's refusal; and a restore counts and caps as announces do.
#[test]
fn the_counts_per_network_follow_every_peer_in_and_out() {
    let capped = StoreLimits {
        max_peers_per_network: Some(3),
        ..limits(4, 1000)
    };
    let mut s = SwarmStore::new(capped, 1);
    let held = |s: &SwarmStore, net| s.networks.held(in_network(net, 0).ip());
    for n in 0..3 {
        join(&mut s, (0xc1, n), (1, n));
    }
    join(&mut s, (0xc2, 0), (2, 0));
    assert_eq!((held(&s, 1), s.torrent_count()), (3, 4));
    // Network 1 is at its cap: no new torrent of its own.
    assert_eq!(join(&mut s, (0xc1, 9), (1, 9)), counts(0, 0));
    assert_eq!(s.stats.network_peers, 1);
    // A full store drops one of network 1's lone torrents (the network seen
    // most) for network 2's next one.
    join(&mut s, (0xc2, 1), (2, 1));
    assert_eq!(s.stats.evicted_torrents, 1);
    assert_eq!((held(&s, 1), held(&s, 2)), (2, 2));
    assert!(network_counts_agree(&s));
    // Restored into a store that takes 1 per network: the rest are refused.
    let tighter = StoreLimits {
        max_peers_per_network: Some(1),
        ..capped
    };
    let (r, done) = restored(&s, (0, UNIX), tighter, (0, UNIX), |_| true);
    assert_eq!((done.peers, done.refused), (2, 2));
    assert_eq!((held(&r, 1), held(&r, 2)), (1, 1));
    assert!(network_counts_agree(&r));
    // An access list refuses network 2's torrents.
    for segment in 0..SwarmStore::SEGMENTS {
        s.retain_torrents(segment, |h| h.0[2] != 0xc2);
    }
    assert_eq!((held(&s, 1), held(&s, 2)), (2, 0));
    // Network 1's peers expire.
    clean_all(&mut s, TIMEOUT + 1);
    assert_eq!((held(&s, 1), s.torrent_count()), (0, 0));
    assert!(network_counts_agree(&s));
}
