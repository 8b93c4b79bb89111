use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use proptest::prelude::*;

use super::{ConnectionRef, RtcAnnounce};
use crate::counts::{CleanReport, PeerTotals, SwarmCounts};
use crate::state::{Section, StateFile};
use crate::store::{AnnounceRefused, Quota, StoreLimits, SwarmStore};
use crate::Restored;
use tracker_proto::{block_key, Announce, AnnounceEvent, AnswerPeers, BlockLevel};
use tracker_proto::{InfoHash, PeerId, ScrapeStats};

const TIMEOUT: u32 = 100;
const UNIX: u64 = 1_700_000_000;

fn limits() -> StoreLimits {
    StoreLimits {
        peer_timeout_secs: TIMEOUT,
        max_torrents: 1000,
        max_peers_per_torrent: 1000,
        max_peers: usize::MAX,
        max_peers_per_address: None,
        max_peers_per_network: None,
        new_torrents_per_minute: [0; 3],
        peer_ids: false,
    }
}

fn store_with(limits: StoreLimits) -> SwarmStore {
    SwarmStore::new(limits, 7)
}

fn store() -> SwarmStore {
    store_with(limits())
}

fn hash(n: u8) -> InfoHash {
    InfoHash([n; 20])
}

fn id(n: u16) -> PeerId {
    let mut id = [b'-'; 20];
    id[..2].copy_from_slice(&n.to_be_bytes());
    PeerId(id)
}

fn conn(n: u64) -> ConnectionRef {
    ConnectionRef {
        worker: (n % 3) as u16,
        id: n,
    }
}

/// Browser `n`'s address: 10.0.(n / 250).(n % 250 + 1), its own client.
fn ip(n: u16) -> IpAddr {
    Ipv4Addr::new(10, 0, (n / 250) as u8, (n % 250 + 1) as u8).into()
}

/// Browser `n`: peer id `n` on connection `n` from its own address,
/// leeching torrent 1 with `started`, asking for 10 receivers.
fn browser(n: u16) -> RtcAnnounce {
    RtcAnnounce {
        info_hash: hash(1),
        peer_id: id(n),
        connection: conn(n.into()),
        ip: ip(n),
        event: AnnounceEvent::Started,
        seeder: false,
        offers: 10,
    }
}

fn seeding(req: RtcAnnounce) -> RtcAnnounce {
    RtcAnnounce {
        seeder: true,
        ..req
    }
}

fn with_event(event: AnnounceEvent, req: RtcAnnounce) -> RtcAnnounce {
    RtcAnnounce { event, ..req }
}

fn stopped(req: RtcAnnounce) -> RtcAnnounce {
    with_event(AnnounceEvent::Stopped, req)
}

fn completed(req: RtcAnnounce) -> RtcAnnounce {
    with_event(AnnounceEvent::Completed, seeding(req))
}

fn on(info_hash: InfoHash, req: RtcAnnounce) -> RtcAnnounce {
    RtcAnnounce { info_hash, ..req }
}

fn offers(offers: usize, req: RtcAnnounce) -> RtcAnnounce {
    RtcAnnounce { offers, ..req }
}

fn try_go(
    s: &mut SwarmStore,
    req: RtcAnnounce,
    now: u32,
    quota: Quota,
) -> Result<(SwarmCounts, Vec<(PeerId, ConnectionRef)>), AnnounceRefused> {
    let mut receivers = Vec::new();
    let counts = s.rtc_announce(&req, now, quota, &mut receivers)?;
    Ok((counts, receivers))
}

/// Announces at `now`, counted against the limits per client; the counts
/// and the receivers drawn.
fn go(
    s: &mut SwarmStore,
    req: RtcAnnounce,
    now: u32,
) -> (SwarmCounts, Vec<(PeerId, ConnectionRef)>) {
    let answer = try_go(s, req, now, Quota::Counted).expect("not refused");
    s.rtc_check_invariants();
    answer
}

fn counts(seeders: u32, leechers: u32) -> SwarmCounts {
    SwarmCounts { seeders, leechers }
}

fn totals(seeders: usize, leechers: usize) -> PeerTotals {
    PeerTotals { seeders, leechers }
}

fn scrape(seeders: u32, completed: u32, leechers: u32) -> ScrapeStats {
    ScrapeStats {
        seeders,
        completed,
        leechers,
    }
}

fn bt_peer(n: u8) -> SocketAddr {
    (Ipv4Addr::new(192, 168, 0, n), 6881).into()
}

/// A BitTorrent leecher's `started` on `info_hash`.
fn bt(info_hash: InfoHash, peer_addr: SocketAddr) -> Announce {
    Announce {
        info_hash,
        peer_id: PeerId([9; 20]),
        peer_addr,
        event: AnnounceEvent::Started,
        left: 1,
        numwant: 100,
        peer_ids: false,
    }
}

fn bt_go(
    s: &mut SwarmStore,
    req: Announce,
    now: u32,
) -> Result<(SwarmCounts, Vec<SocketAddr>), AnnounceRefused> {
    let mut peers = AnswerPeers::default();
    let counts = s.announce(&req, now, &mut peers)?;
    Ok((counts, peers.addrs().collect()))
}

fn clean_all(s: &mut SwarmStore, now: u32) -> CleanReport {
    let mut total = CleanReport::default();
    for segment in 0..SwarmStore::SEGMENTS {
        total.add(s.clean_segment(segment, now));
        while s.cleaning() {
            total.add(s.clean_more(now));
        }
    }
    total
}

/// The ids of `receivers`.
fn ids(receivers: &[(PeerId, ConnectionRef)]) -> BTreeSet<PeerId> {
    receivers.iter().map(|(id, _)| *id).collect()
}

#[test]
fn counts_follow_joins_updates_and_stops_and_only_webrtc_is_counted() {
    let mut s = store();
    assert_eq!(go(&mut s, browser(1), 0).0, counts(0, 1));
    assert_eq!(go(&mut s, browser(2), 0).0, counts(0, 2));
    assert_eq!(go(&mut s, seeding(browser(3)), 0).0, counts(1, 2));
    // Announcing again changes nothing; seeding and back moves one count.
    let again = with_event(AnnounceEvent::None, browser(1));
    assert_eq!(go(&mut s, again, 1).0, counts(1, 2));
    assert_eq!(go(&mut s, seeding(browser(1)), 2).0, counts(2, 1));
    assert_eq!(go(&mut s, seeding(browser(1)), 3).0, counts(2, 1));
    assert_eq!(go(&mut s, browser(3), 3).0, counts(1, 2));
    assert_eq!(go(&mut s, stopped(seeding(browser(1))), 4).0, counts(0, 2));
    assert_eq!(go(&mut s, stopped(browser(2)), 4).0, counts(0, 1));

    assert_eq!(s.rtc_scrape(&hash(1)), scrape(0, 0, 1));
    assert_eq!(s.rtc_scrape(&hash(9)), ScrapeStats::default());
    assert_eq!(
        (s.rtc_torrent_count(), s.rtc_peer_count()),
        (1, totals(0, 1))
    );
    // None of it is the BitTorrent side's.
    assert_eq!(s.scrape(&hash(1)), ScrapeStats::default());
    assert_eq!((s.torrent_count(), s.peer_count()), (0, totals(0, 0)));
}

#[test]
fn the_two_kinds_of_one_info_hash_are_never_handed_to_each_other() {
    let mut s = store();
    bt_go(&mut s, bt(hash(1), bt_peer(1)), 0).unwrap();
    go(&mut s, browser(1), 0);
    let (rtc_counts, receivers) = go(&mut s, browser(2), 0);
    assert_eq!(rtc_counts, counts(0, 2));
    assert_eq!(ids(&receivers), [id(1)].into());
    let (bt_counts, addrs) = bt_go(&mut s, bt(hash(1), bt_peer(2)), 0).unwrap();
    assert_eq!(bt_counts, counts(0, 2));
    assert_eq!(addrs, [bt_peer(1)]);
    go(&mut s, completed(browser(1)), 0);
    assert_eq!(s.rtc_scrape(&hash(1)), scrape(1, 1, 1));
    assert_eq!(s.scrape(&hash(1)), scrape(0, 0, 2));
}

#[test]
fn a_completion_counts_once_and_only_from_a_peer_the_swarm_stores() {
    let downloaded = |s: &SwarmStore| s.rtc_scrape(&hash(1)).completed;
    let mut s = store_with(StoreLimits {
        max_peers_per_torrent: 3,
        max_peers_per_address: Some(1),
        ..limits()
    });
    go(&mut s, browser(1), 0);
    go(&mut s, completed(browser(1)), 0);
    go(&mut s, completed(browser(1)), 1);
    assert_eq!(downloaded(&s), 1, "a seeder completes nothing again");
    // A peer first seen with `completed` is stored, and counts, as a
    // BitTorrent peer does; a seeder's `completed` does not.
    go(&mut s, completed(browser(2)), 1);
    assert_eq!(downloaded(&s), 2);
    go(&mut s, seeding(browser(3)), 1);
    go(&mut s, completed(browser(3)), 1);
    assert_eq!(downloaded(&s), 2);
    // A peer past a cap is answered, not stored, and counts nothing: here
    // the swarm's cap, and below its client's.
    go(&mut s, completed(browser(4)), 1);
    assert_eq!(downloaded(&s), 2);
    go(&mut s, stopped(browser(3)), 1);
    let same_client = RtcAnnounce {
        ip: ip(1),
        ..browser(5)
    };
    go(&mut s, completed(same_client), 1);
    assert_eq!((downloaded(&s), s.stats.address_peers), (2, 1));
    // Leaving undoes nothing.
    go(&mut s, stopped(browser(1)), 2);
    assert_eq!(s.rtc_scrape(&hash(1)), scrape(1, 2, 0));
    // A peer completes once, however often it turns leecher again.
    go(&mut s, stopped(browser(2)), 2);
    go(&mut s, browser(6), 2);
    for _ in 0..50 {
        go(&mut s, completed(browser(6)), 3);
        go(&mut s, browser(6), 3);
    }
    assert_eq!(downloaded(&s), 3);
}

#[test]
fn stopped_removes_the_peer_draws_nobody_and_creates_nothing() {
    let mut s = store();
    assert_eq!(go(&mut s, stopped(browser(1)), 0), (counts(0, 0), vec![]));
    assert_eq!(s.rtc_torrent_count(), 0);
    go(&mut s, browser(1), 0);
    go(&mut s, browser(2), 0);
    // An unknown peer stopping changes nothing and receives nobody.
    assert_eq!(go(&mut s, stopped(browser(3)), 0), (counts(0, 2), vec![]));
    assert_eq!(go(&mut s, stopped(browser(2)), 0), (counts(0, 1), vec![]));
    assert_eq!(s.rtc_peer_count(), totals(0, 1));
    // A torrent left empty waits for the cleaner.
    go(&mut s, stopped(browser(1)), 0);
    assert_eq!(
        (s.rtc_torrent_count(), s.rtc_peer_count()),
        (1, totals(0, 0))
    );
    assert_eq!(clean_all(&mut s, 1).torrents, 1);
    assert_eq!(s.rtc_torrent_count(), 0);
}

#[test]
fn receivers_are_distinct_live_at_most_offers_and_never_the_announcers_connection() {
    for swarm in [5u16, 30, 200] {
        let mut s = store();
        for n in 0..swarm {
            go(&mut s, browser(n), 0);
        }
        // A second peer id of browser 0's connection: neither is drawn for it.
        let twin = RtcAnnounce {
            peer_id: id(5000),
            ..browser(0)
        };
        go(&mut s, twin, 0);
        let mut received = BTreeSet::new();
        for round in 0..40u16 {
            let n = round % swarm;
            for wanted in [0, 1, 3, 10, 250] {
                let (_, receivers) = go(&mut s, offers(wanted, browser(n)), 1);
                let others = usize::from(swarm - 1) + usize::from(n != 0);
                assert_eq!(receivers.len(), wanted.min(others), "{swarm} {n} {wanted}");
                assert_eq!(ids(&receivers).len(), receivers.len(), "distinct");
                for (peer_id, connection) in &receivers {
                    assert_ne!(*connection, browser(n).connection);
                    // Each goes with its own connection.
                    let number = u16::from_be_bytes([peer_id.0[0], peer_id.0[1]]);
                    let owner = if number == 5000 { 0 } else { number };
                    assert_eq!(*connection, conn(owner.into()));
                    received.insert(*peer_id);
                }
            }
        }
        assert_eq!(received.len(), usize::from(swarm) + 1, "every peer drawn");
    }
}

#[test]
fn receivers_are_appended_after_what_the_caller_holds() {
    let mut s = store();
    go(&mut s, browser(1), 0);
    let mut receivers = vec![(id(1), conn(1))];
    s.rtc_announce(&browser(2), 0, Quota::Counted, &mut receivers)
        .unwrap();
    // Browser 1 is drawn although the caller's own entries name it already.
    assert_eq!(receivers, [(id(1), conn(1)), (id(1), conn(1))]);
}

#[test]
fn a_seeder_is_given_leechers_only_and_expired_peers_to_nobody() {
    let mut s = store();
    go(&mut s, seeding(browser(1)), 0);
    go(&mut s, browser(2), 0);
    go(&mut s, browser(3), 50);
    let (_, receivers) = go(&mut s, seeding(browser(4)), 60);
    assert_eq!(ids(&receivers), [id(2), id(3)].into());
    let (_, receivers) = go(&mut s, browser(5), 60);
    assert_eq!(ids(&receivers), [id(1), id(2), id(3), id(4)].into());
    // At 100 the peers of 0 have expired, not yet cleaned: counted still,
    // drawn no more.
    let (c, receivers) = go(&mut s, browser(6), 100);
    assert_eq!(c, counts(2, 4));
    assert_eq!(ids(&receivers), [id(3), id(4), id(5)].into());
    // An expired peer announcing again is live again.
    go(&mut s, browser(2), 101);
    let (_, receivers) = go(&mut s, seeding(browser(7)), 101);
    assert_eq!(ids(&receivers), [id(2), id(3), id(5), id(6)].into());
}

#[test]
fn a_peer_id_announced_from_another_connection_is_another_peer() {
    let mut s = store();
    go(&mut s, browser(1), 0);
    go(&mut s, browser(2), 0);
    // Whoever learnt browser 1's id (an offer carries it) and announces it
    // in a torrent first keeps no one out: browser 1's own announce there
    // is another peer, served as any.
    let thief = RtcAnnounce {
        connection: conn(99),
        ip: ip(99),
        ..browser(1)
    };
    go(&mut s, on(hash(2), thief), 0);
    let (c, _) = go(&mut s, on(hash(2), browser(1)), 0);
    assert_eq!(c, counts(0, 2));
    // Nor in a torrent where browser 1 was first.
    let (c, receivers) = go(&mut s, seeding(thief), 10);
    assert_eq!(c, counts(1, 2));
    assert!(
        receivers.contains(&(id(1), conn(1))),
        "offers to browser 1's own connection"
    );
    // Each entry stays its connection's: its stop, its close and its
    // completion are its own.
    go(&mut s, completed(browser(1)), 10);
    assert_eq!(s.rtc_scrape(&hash(1)), scrape(2, 1, 1));
    go(&mut s, stopped(thief), 10);
    s.rtc_disconnected(&hash(2), &id(1), conn(99));
    assert!(s.rtc_peers(&hash(1)).contains(&(id(1), conn(1), true)));
    assert_eq!(s.rtc_peers(&hash(2)), [(id(1), conn(1), false)]);
    // Offers drawn for one id go to each of its connections, each once.
    go(&mut s, thief, 20);
    let (_, receivers) = go(&mut s, browser(3), 20);
    let mut drawn = receivers.clone();
    drawn.sort_by_key(|(id, c)| (*id, c.id));
    assert_eq!(
        drawn,
        [(id(1), conn(1)), (id(1), conn(99)), (id(2), conn(2))]
    );
}

#[test]
fn a_closed_connection_takes_its_own_peer_only() {
    let mut s = store();
    go(&mut s, browser(1), 0);
    go(&mut s, seeding(browser(2)), 0);
    // Not browser 1's connection, another torrent, an unknown peer: nothing.
    s.rtc_disconnected(&hash(1), &id(1), conn(2));
    s.rtc_disconnected(&hash(2), &id(1), conn(1));
    s.rtc_disconnected(&hash(1), &id(3), conn(1));
    assert_eq!(s.rtc_peer_count(), totals(1, 1));
    s.rtc_disconnected(&hash(1), &id(1), conn(1));
    assert_eq!(s.rtc_scrape(&hash(1)), scrape(1, 0, 0));
    s.rtc_disconnected(&hash(1), &id(1), conn(1));
    s.rtc_disconnected(&hash(1), &id(2), conn(2));
    assert_eq!(s.rtc_peer_count(), totals(0, 0));
    s.rtc_check_invariants();
    // The empty torrent goes at the next clean.
    assert_eq!(clean_all(&mut s, 0).torrents, 1);
    // The same id of another connection is not taken by the first
    // connection's close.
    go(&mut s, browser(1), 0);
    let newcomer = RtcAnnounce {
        connection: conn(50),
        ..browser(1)
    };
    go(&mut s, newcomer, TIMEOUT);
    s.rtc_disconnected(&hash(1), &id(1), conn(1));
    assert_eq!(s.rtc_peers(&hash(1)), [(id(1), conn(50), false)]);
}

#[test]
fn max_torrents_counts_both_kinds_and_no_torrent_is_dropped_for_a_webrtc_one() {
    let mut s = store_with(StoreLimits {
        max_torrents: 2,
        ..limits()
    });
    bt_go(&mut s, bt(hash(1), bt_peer(1)), 0).unwrap();
    go(&mut s, on(hash(2), browser(1)), 0);
    // Full: a new WebRTC torrent is refused, though the BitTorrent torrent
    // is one a new torrent could take the place of (one peer).
    let refused = try_go(&mut s, on(hash(3), browser(1)), 0, Quota::Exempt);
    assert_eq!(refused, Err(AnnounceRefused::TorrentLimit));
    assert_eq!((s.stats.refused_torrents, s.stats.evicted_torrents), (1, 0));
    // The torrent held is served; the BitTorrent torrent of hash 1 is no
    // WebRTC torrent, and one of that hash would be new.
    go(&mut s, on(hash(2), browser(2)), 0);
    let refused = try_go(&mut s, browser(2), 0, Quota::Counted);
    assert_eq!(refused, Err(AnnounceRefused::TorrentLimit));
    assert_eq!(s.rtc_torrent_count(), 1);
    // A new BitTorrent torrent drops a BitTorrent torrent, never a WebRTC one.
    s = store_with(StoreLimits {
        max_torrents: 2,
        ..limits()
    });
    bt_go(&mut s, bt(hash(1), bt_peer(1)), 0).unwrap();
    go(&mut s, on(hash(2), browser(1)), 0);
    bt_go(&mut s, bt(hash(3), bt_peer(2)), 0).unwrap();
    assert_eq!(s.stats.evicted_torrents, 1);
    assert_eq!(s.scrape(&hash(1)), ScrapeStats::default());
    assert_eq!(s.rtc_scrape(&hash(2)), scrape(0, 0, 1));
    // With only WebRTC torrents, a new BitTorrent torrent is refused.
    s = store_with(StoreLimits {
        max_torrents: 2,
        ..limits()
    });
    go(&mut s, on(hash(1), browser(1)), 0);
    go(&mut s, on(hash(2), browser(1)), 0);
    let refused = bt_go(&mut s, bt(hash(3), bt_peer(1)), 0);
    assert_eq!(refused, Err(AnnounceRefused::TorrentLimit));
    assert_eq!(s.rtc_torrent_count(), 2);
    // Room again once one is cleaned away.
    clean_all(&mut s, TIMEOUT);
    assert!(bt_go(&mut s, bt(hash(3), bt_peer(1)), TIMEOUT).is_ok());
    assert!(try_go(&mut s, on(hash(4), browser(1)), TIMEOUT, Quota::Counted).is_ok());
}

#[test]
fn max_peers_counts_both_kinds_and_a_peer_past_it_is_answered_unstored() {
    let mut s = store_with(StoreLimits {
        max_peers: 3,
        ..limits()
    });
    bt_go(&mut s, bt(hash(1), bt_peer(1)), 0).unwrap();
    bt_go(&mut s, bt(hash(1), bt_peer(2)), 0).unwrap();
    go(&mut s, browser(1), 0);
    // Full: answered, with counts and receivers, but not stored.
    let (c, receivers) = go(&mut s, browser(2), 0);
    assert_eq!((c, ids(&receivers)), (counts(0, 1), [id(1)].into()));
    assert_eq!(s.stats.unstored_peers, 1);
    // Nor a new torrent made for it.
    assert_eq!(
        go(&mut s, on(hash(2), browser(2)), 0),
        (counts(0, 0), vec![])
    );
    assert_eq!((s.rtc_torrent_count(), s.stats.unstored_peers), (1, 2));
    // The BitTorrent side counts the WebRTC peer too.
    let (c, _) = bt_go(&mut s, bt(hash(1), bt_peer(3)), 0).unwrap();
    assert_eq!((c, s.stats.unstored_peers), (counts(0, 2), 3));
    // A peer stored is updated all the same.
    assert_eq!(go(&mut s, seeding(browser(1)), 1).0, counts(1, 0));
    // Exempt clients are held to the limits in total too.
    let exempt = try_go(&mut s, browser(3), 1, Quota::Exempt).unwrap();
    assert_eq!(exempt.0, counts(1, 0));
    assert_eq!(s.rtc_peer_count(), totals(1, 0));
}

#[test]
fn max_peers_per_torrent_caps_a_webrtc_swarm() {
    let mut s = store_with(StoreLimits {
        max_peers_per_torrent: 2,
        ..limits()
    });
    go(&mut s, browser(1), 0);
    go(&mut s, browser(2), 0);
    let (c, receivers) = go(&mut s, browser(3), 0);
    assert_eq!((c, ids(&receivers)), (counts(0, 2), [id(1), id(2)].into()));
    assert_eq!(s.stats.unstored_peers, 1);
    // Another torrent has its own room; one who leaves makes room.
    assert_eq!(go(&mut s, on(hash(2), browser(3)), 0).0, counts(0, 1));
    go(&mut s, stopped(browser(1)), 0);
    assert_eq!(go(&mut s, browser(3), 0).0, counts(0, 2));
}

#[test]
fn one_client_holds_at_most_its_share_of_a_swarm_small_or_large_unless_exempt() {
    let capped = StoreLimits {
        max_peers_per_address: Some(3),
        ..limits()
    };
    // Browser `n` of one IPv6 /64 (one host may use any of its addresses).
    let in_one_64 = |n: u16| RtcAnnounce {
        ip: Ipv6Addr::new(0x2001, 0xdb8, 1, 2, 0, 0, 0, n).into(),
        ..browser(n)
    };
    for others in [0u16, 60] {
        let mut s = store_with(capped);
        // Enough others, first, for the swarm to be indexed and count its
        // clients.
        for n in 1000..1000 + others {
            go(&mut s, browser(n), 0);
        }
        for n in 1..=10 {
            go(&mut s, in_one_64(n), 0);
        }
        let held = u32::from(others) + 3;
        assert_eq!(s.rtc_scrape(&hash(1)).leechers, held);
        assert_eq!(s.stats.address_peers, 7);
        // A peer of it that leaves makes room for another.
        go(&mut s, stopped(in_one_64(1)), 0);
        go(&mut s, in_one_64(11), 0);
        assert_eq!(s.rtc_scrape(&hash(1)).leechers, held);
        // Another /64 is another client.
        let next_64 = RtcAnnounce {
            ip: Ipv6Addr::new(0x2001, 0xdb8, 1, 3, 0, 0, 0, 1).into(),
            ..browser(20)
        };
        go(&mut s, next_64, 0);
        // An exempt client is not held to it.
        for n in 30..40 {
            try_go(&mut s, in_one_64(n), 0, Quota::Exempt).unwrap();
        }
        assert_eq!(s.rtc_scrape(&hash(1)).leechers, held + 11);
        s.rtc_check_invariants();
    }
}

#[test]
fn new_webrtc_torrents_spend_the_budgets_that_bittorrent_ones_do() {
    let mut s = store_with(StoreLimits {
        new_torrents_per_minute: [3, 0, 0],
        ..limits()
    });
    bt_go(&mut s, bt(hash(1), SocketAddr::new(ip(1), 6881)), 0).unwrap();
    go(&mut s, on(hash(2), browser(1)), 0);
    go(&mut s, on(hash(3), browser(1)), 0);
    let refused = try_go(&mut s, on(hash(4), browser(1)), 0, Quota::Counted);
    assert_eq!(
        refused,
        Err(AnnounceRefused::AddressBudget(BlockLevel::Address))
    );
    let refused = bt_go(&mut s, bt(hash(4), SocketAddr::new(ip(1), 6881)), 0);
    assert_eq!(
        refused,
        Err(AnnounceRefused::AddressBudget(BlockLevel::Address))
    );
    assert_eq!(s.stats.torrent_budget, 2);
    // Torrents held cost nothing; other clients and exempt ones go on.
    go(&mut s, on(hash(2), browser(5)), 0);
    go(&mut s, on(hash(4), browser(2)), 0);
    try_go(&mut s, on(hash(5), browser(1)), 0, Quota::Exempt).unwrap();
    // A minute later the budget is whole again.
    go(&mut s, on(hash(6), browser(1)), 60);
    assert_eq!(s.rtc_torrent_count(), 5);
}

#[test]
fn peers_expire_a_time_out_after_their_last_announce_and_cleaning_drops_them() {
    let mut s = store();
    go(&mut s, browser(1), 0);
    go(&mut s, seeding(browser(2)), 50);
    go(&mut s, on(hash(2), browser(3)), 0);
    // Nothing has expired at 99.
    assert_eq!(clean_all(&mut s, TIMEOUT - 1), CleanReport::default());
    let removed = clean_all(&mut s, TIMEOUT);
    assert_eq!(
        removed,
        CleanReport {
            torrents: 1,
            peers: totals(0, 2),
        }
    );
    assert_eq!(s.rtc_scrape(&hash(1)), scrape(1, 0, 0));
    assert_eq!(
        (s.rtc_torrent_count(), s.rtc_peer_count()),
        (1, totals(1, 0))
    );
    clean_all(&mut s, 150);
    assert_eq!(
        (s.rtc_torrent_count(), s.rtc_peer_count()),
        (0, totals(0, 0))
    );
}

#[test]
fn a_large_swarm_is_cleaned_a_window_at_a_time_while_it_is_announced_to() {
    let mut s = store();
    // 1,000 peers, a third of them seeders; the odd ones announced late
    // outlive the clean below.
    let req = |n: u16| {
        let req = browser(n);
        if n.is_multiple_of(3) {
            seeding(req)
        } else {
            req
        }
    };
    for n in 0..1000 {
        go(&mut s, req(n), if n % 2 == 1 { 50 } else { 0 });
    }
    let segment = s.segment_of(&hash(1));
    let mut removed = s.clean_segment(segment, TIMEOUT);
    assert_eq!(removed, CleanReport::default(), "left for clean_more");
    let mut steps = 0;
    while s.cleaning() {
        let step = s.clean_more(TIMEOUT);
        assert!(step.peers.seeders + step.peers.leechers <= crate::torrent::CLEAN_WINDOW);
        removed.add(step);
        steps += 1;
        // Announces between the steps move peers about: the last peer takes
        // the place of one that stops, a leecher becomes a seeder.
        go(&mut s, stopped(req(901)), TIMEOUT);
        go(&mut s, req(901), TIMEOUT);
        go(&mut s, seeding(browser(2 * steps + 1)), TIMEOUT);
    }
    assert!(
        usize::from(steps) >= 1000 / crate::torrent::CLEAN_WINDOW,
        "{steps} steps"
    );
    // Whatever the announces moved behind the pass, a second pass takes.
    removed.add(clean_all(&mut s, TIMEOUT));
    assert_eq!(removed.peers.seeders + removed.peers.leechers, 500);
    let c = s.rtc_scrape(&hash(1));
    assert_eq!(c.seeders + c.leechers, 500);
    let seeding_before = (0..1000).filter(|n| n % 2 == 1 && n % 3 == 0).count();
    let turned = (1..=steps).filter(|n| (2 * n + 1) % 3 != 0).count();
    assert_eq!(c.seeders as usize, seeding_before + turned);
    // All gone after the other half's time-out, torrent and all.
    assert_eq!(clean_all(&mut s, 150 + TIMEOUT).torrents, 1);
    assert_eq!(
        (s.rtc_torrent_count(), s.rtc_peer_count()),
        (0, totals(0, 0))
    );
}

#[test]
fn cleaning_touches_only_its_segment_for_both_kinds() {
    let mut s = store();
    let (a, b) = (0..=255).map(hash).map(|h| (h, s.segment_of(&h))).fold(
        (None, None),
        |(a, b), (h, seg)| match (a, b) {
            (None, _) => (Some((h, seg)), None),
            (Some((_, first)), None) if seg != first => (a, Some(h)),
            _ => (a, b),
        },
    );
    let ((a, segment), b) = (a.unwrap(), b.unwrap());
    go(&mut s, on(a, browser(1)), 0);
    go(&mut s, on(b, browser(1)), 0);
    bt_go(&mut s, bt(a, bt_peer(1)), 0).unwrap();
    let removed = s.clean_segment(segment, TIMEOUT);
    assert_eq!(removed.torrents, 2, "both kinds of {a:?}");
    assert_eq!((s.rtc_torrent_count(), s.torrent_count()), (1, 0));
    assert!(s.rtc_holds(&b));
}

#[test]
fn an_access_list_removes_webrtc_torrents_too() {
    let mut s = store_with(StoreLimits {
        max_torrents: 3,
        ..limits()
    });
    go(&mut s, browser(1), 0);
    go(&mut s, seeding(browser(2)), 0);
    go(&mut s, on(hash(2), browser(1)), 0);
    bt_go(&mut s, bt(hash(1), bt_peer(1)), 0).unwrap();
    let mut removed = CleanReport::default();
    for segment in 0..SwarmStore::SEGMENTS {
        removed.add(s.retain_torrents(segment, |h| *h != hash(1)));
    }
    assert_eq!(
        removed,
        CleanReport {
            torrents: 2,
            peers: totals(1, 2),
        }
    );
    assert_eq!(s.rtc_scrape(&hash(1)), ScrapeStats::default());
    assert_eq!(
        (s.rtc_torrent_count(), s.rtc_peer_count()),
        (1, totals(0, 1))
    );
    // The room they held is free again.
    go(&mut s, on(hash(3), browser(1)), 0);
    go(&mut s, on(hash(4), browser(1)), 0);
    assert_eq!(s.rtc_torrent_count(), 3);
}

#[test]
fn scrape_some_lists_at_most_max_webrtc_torrents_with_their_counts() {
    let mut s = store();
    for n in 1..=5 {
        go(&mut s, on(hash(n), browser(n.into())), 0);
    }
    bt_go(&mut s, bt(hash(9), bt_peer(1)), 0).unwrap();
    let mut out = Vec::new();
    s.rtc_scrape_some(3, &mut out);
    assert_eq!(out.len(), 3);
    out.clear();
    s.rtc_scrape_some(100, &mut out);
    let listed: BTreeSet<InfoHash> = out.iter().map(|(h, _)| *h).collect();
    assert_eq!(listed, (1..=5).map(hash).collect());
    assert!(out.iter().all(|(_, stats)| *stats == scrape(0, 0, 1)));
    // And the BitTorrent full scrape lists its own only.
    out.clear();
    s.scrape_some(100, &mut out);
    assert_eq!(out, [(hash(9), scrape(0, 0, 1))]);
}

#[test]
fn memory_use_counts_the_webrtc_side_apart() {
    let mut s = store();
    let empty = s.memory_use();
    assert_eq!(empty.rtc, 0);
    for n in 0..100 {
        go(&mut s, browser(n), 0);
    }
    let used = s.memory_use();
    // 100 peers of 40 bytes, an index, a torrent's entry.
    assert!(used.rtc > 100 * 40 + 64, "{used:?}");
    assert_eq!((used.torrents, used.peers, used.indexes), (0, 0, 0));
    clean_all(&mut s, TIMEOUT);
    assert_eq!(s.memory_use().rtc, 0);
}

// --- The state file ----------------------------------------------------------

/// The state file `s` writes at `now` (on its clock; the wall clock is
/// `UNIX + now`).
fn file_of(s: &SwarmStore, now: u32) -> Vec<u8> {
    let mut section = Section::default();
    s.save(now, UNIX + u64::from(now), &mut section);
    crate::state::encode(&[section], UNIX + u64::from(now))
}

/// A store with `limits` restoring `file` at `now` (on its own clock and,
/// plus `UNIX`, the wall clock).
fn restore(file: &[u8], limits: StoreLimits, now: u32) -> (SwarmStore, Restored) {
    let file = StateFile::parse(file).unwrap();
    let mut s = store_with(limits);
    let done = s
        .restore_file(&file, now, UNIX + u64::from(now), |_| true)
        .map_err(|(e, _)| e)
        .unwrap();
    s.rtc_check_invariants();
    (s, done)
}

#[test]
fn a_restart_keeps_the_downloaded_counts_and_no_webrtc_peer() {
    let mut s = store();
    go(&mut s, browser(1), 0);
    go(&mut s, completed(browser(1)), 0);
    go(&mut s, completed(browser(2)), 0);
    go(&mut s, browser(3), 0);
    // Counts nothing, so saves nothing.
    go(&mut s, on(hash(2), browser(1)), 0);
    // Counted, but no peer is live at the save.
    go(&mut s, completed(on(hash(3), browser(1))), 0);
    go(&mut s, completed(on(hash(3), browser(2))), 0);
    go(&mut s, on(hash(4), browser(1)), 20);
    go(&mut s, completed(on(hash(4), browser(2))), 20);
    go(&mut s, stopped(on(hash(4), browser(2))), 20);
    go(&mut s, on(hash(3), browser(3)), 0);
    go(&mut s, stopped(on(hash(3), browser(3))), 0);

    let file = file_of(&s, 10);
    let records = StateFile::parse(&file).unwrap().records().count();
    assert_eq!(records, 3, "torrents 1, 3 and 4");
    let file = file_of(&s, TIMEOUT);
    let records: Vec<_> = StateFile::parse(&file)
        .unwrap()
        .records()
        .map(|r| r.unwrap().to_saved())
        .collect();
    assert_eq!(records.len(), 1, "only torrent 4 has a live peer at 100");
    let record = &records[0];
    assert_eq!((record.info_hash, record.completed), (hash(4), 1));
    assert!(record.v4.is_empty() && record.v6.is_empty());

    let (r, done) = restore(&file_of(&s, 10), limits(), 1000);
    assert_eq!(
        done,
        Restored {
            rtc_torrents: 3,
            ..Restored::default()
        }
    );
    assert_eq!(r.rtc_scrape(&hash(1)), scrape(0, 2, 0));
    assert_eq!(r.rtc_scrape(&hash(3)), scrape(0, 2, 0));
    assert_eq!(r.rtc_scrape(&hash(4)), scrape(0, 1, 0));
    assert_eq!(r.rtc_scrape(&hash(2)), ScrapeStats::default());
    assert_eq!(
        (r.rtc_torrent_count(), r.rtc_peer_count()),
        (3, totals(0, 0))
    );
    assert_eq!((r.torrent_count(), r.peer_count()), (0, totals(0, 0)));
}

#[test]
fn a_restored_count_waits_a_time_out_for_its_peers_then_goes_as_any_empty_torrent() {
    let mut s = store();
    go(&mut s, completed(browser(1)), 0);
    go(&mut s, completed(on(hash(2), browser(1))), 0);
    go(&mut s, completed(on(hash(3), browser(1))), 0);
    let (mut r, _) = restore(&file_of(&s, 0), limits(), 1000);
    // Kept through cleaning until a time-out after the restore.
    clean_all(&mut r, 1000 + TIMEOUT - 1);
    assert_eq!(r.rtc_torrent_count(), 3);
    // Saved again meanwhile.
    let (again, _) = restore(&file_of(&r, 1050), limits(), 5000);
    assert_eq!(again.rtc_scrape(&hash(2)), scrape(0, 1, 0));
    // A browser comes back to torrent 1 and completes; one to torrent 2 and
    // leaves at once.
    go(&mut r, completed(browser(1)), 1010);
    go(&mut r, on(hash(2), browser(1)), 1010);
    go(&mut r, stopped(on(hash(2), browser(1))), 1010);
    assert_eq!(r.rtc_scrape(&hash(1)), scrape(1, 2, 0));
    // Torrent 2 goes with its last peer at the next clean, torrent 3 once
    // its time-out has passed.
    assert_eq!(clean_all(&mut r, 1020).torrents, 1);
    assert_eq!(r.rtc_scrape(&hash(2)), ScrapeStats::default());
    assert_eq!(clean_all(&mut r, 1000 + TIMEOUT).torrents, 1);
    assert_eq!(r.rtc_scrape(&hash(3)), ScrapeStats::default());
    assert_eq!(r.rtc_scrape(&hash(1)), scrape(1, 2, 0));
    // Torrent 1 is an ordinary swarm now: it goes when its peer expires.
    assert_eq!(clean_all(&mut r, 1010 + TIMEOUT).torrents, 1);
    assert_eq!(r.rtc_torrent_count(), 0);
}

#[test]
fn restored_counts_keep_the_torrent_limit_and_are_not_inflated_by_a_second_restore() {
    let mut s = store();
    bt_go(&mut s, bt(hash(1), bt_peer(1)), 0).unwrap();
    for n in 2..=4 {
        go(&mut s, completed(on(hash(n), browser(1))), 0);
    }
    let file = file_of(&s, 0);
    let (r, done) = restore(
        &file,
        StoreLimits {
            max_torrents: 3,
            ..limits()
        },
        0,
    );
    // The records come in the order of the saving store's segments, which
    // are keyed at random: which torrent is left out varies, not how many.
    assert_eq!(done.torrents + done.rtc_torrents, 3);
    let held = (r.torrent_count(), r.rtc_torrent_count());
    assert_eq!(held, (done.torrents, done.rtc_torrents));
    let file = StateFile::parse(&file).unwrap();
    let mut r = store();
    r.restore_file(&file, 0, UNIX, |_| true).unwrap();
    let again = r.restore_file(&file, 0, UNIX, |_| true).unwrap();
    assert_eq!((again.torrents, again.rtc_torrents), (0, 0));
    assert_eq!(r.rtc_scrape(&hash(2)), scrape(0, 1, 0));
}

#[test]
fn a_bittorrent_and_a_webrtc_torrent_of_one_info_hash_both_survive_a_restart() {
    let mut s = store();
    let completed_bt = |addr| Announce {
        event: AnnounceEvent::Completed,
        left: 0,
        ..bt(hash(1), addr)
    };
    bt_go(&mut s, completed_bt(bt_peer(1)), 0).unwrap();
    bt_go(&mut s, bt(hash(1), bt_peer(2)), 0).unwrap();
    go(&mut s, browser(1), 0);
    go(&mut s, completed(browser(1)), 0);
    go(&mut s, completed(browser(2)), 0);
    go(&mut s, completed(browser(3)), 0);
    let (r, done) = restore(&file_of(&s, 10), limits(), 0);
    assert_eq!(
        done,
        Restored {
            torrents: 1,
            peers: 2,
            rtc_torrents: 1,
            ..Restored::default()
        }
    );
    assert_eq!(r.scrape(&hash(1)), scrape(1, 1, 1));
    assert_eq!(r.rtc_scrape(&hash(1)), scrape(0, 3, 0));
}

#[test]
fn a_bittorrent_record_without_live_peers_restores_nothing_of_either_kind() {
    let mut s = store();
    let completed_bt = Announce {
        event: AnnounceEvent::Completed,
        left: 0,
        ..bt(hash(1), bt_peer(1))
    };
    bt_go(&mut s, completed_bt, 0).unwrap();
    // Saved with its peer, restored once the peer has expired: a record
    // with peers, none live, is what an older tracker skipped, and still is.
    let file = file_of(&s, 0);
    let (r, done) = restore(&file, limits(), 2 * TIMEOUT);
    assert_eq!(done.expired, 1);
    assert_eq!((done.torrents, done.rtc_torrents), (0, 0));
    assert_eq!((r.torrent_count(), r.rtc_torrent_count()), (0, 0));
    assert_eq!(r.scrape(&hash(1)), ScrapeStats::default());
    assert_eq!(r.rtc_scrape(&hash(1)), ScrapeStats::default());
    // And a record with no peers is never a BitTorrent torrent.
    go(&mut s, completed(on(hash(2), browser(1))), 0);
    let (r, _) = restore(&file_of(&s, 0), limits(), 0);
    assert_eq!(r.scrape(&hash(2)), ScrapeStats::default());
    assert_eq!(r.torrent_count(), 1);
}

// --- Against a model -------------------------------------------------------

/// The WebRTC side as the rules say it, kept plainly. The store's
/// BitTorrent torrents and peers, which the limits count too, are read from
/// the store itself (its own tests check them).
mod model {
    use super::*;

    #[derive(Clone, Copy, Debug)]
    pub struct Peer {
        pub connection: ConnectionRef,
        pub client: u128,
        pub seeder: bool,
        pub expiry: u32,
        /// Its completion counted.
        pub completed: bool,
    }

    /// A peer's key: its id and its connection.
    pub type Key = (PeerId, u16, u64);

    pub fn key(peer_id: &PeerId, connection: ConnectionRef) -> Key {
        (*peer_id, connection.worker, connection.id)
    }

    #[derive(Default)]
    pub struct Torrent {
        pub peers: BTreeMap<Key, Peer>,
        pub downloaded: u32,
        /// Restored and waiting for its peers until then.
        pub held_until: Option<u32>,
    }

    impl Torrent {
        pub fn counts(&self) -> SwarmCounts {
            let seeders = self.peers.values().filter(|p| p.seeder).count() as u32;
            counts(seeders, self.peers.len() as u32 - seeders)
        }

        pub fn scrape(&self) -> ScrapeStats {
            let c = self.counts();
            scrape(c.seeders, self.downloaded, c.leechers)
        }
    }

    pub struct Model {
        pub limits: StoreLimits,
        pub torrents: BTreeMap<InfoHash, Torrent>,
        pub unstored: u64,
        pub address_limited: u64,
        pub refused: u64,
    }

    impl Model {
        pub fn new(limits: StoreLimits) -> Self {
            Model {
                limits,
                torrents: BTreeMap::new(),
                unstored: 0,
                address_limited: 0,
                refused: 0,
            }
        }

        pub fn peers(&self) -> usize {
            self.torrents.values().map(|t| t.peers.len()).sum()
        }

        /// `bt`: the BitTorrent torrents and peers the store holds.
        pub fn announce(
            &mut self,
            req: &RtcAnnounce,
            now: u32,
            quota: Quota,
            bt: (usize, usize),
        ) -> Result<SwarmCounts, AnnounceRefused> {
            let limits = self.limits;
            let stopped = req.event == AnnounceEvent::Stopped;
            let held = bt.1 + self.peers();
            if !self.torrents.contains_key(&req.info_hash) {
                if stopped {
                    return Ok(SwarmCounts::default());
                }
                if held >= limits.max_peers {
                    self.unstored += 1;
                    return Ok(SwarmCounts::default());
                }
                if bt.0 + self.torrents.len() >= limits.max_torrents {
                    self.refused += 1;
                    return Err(AnnounceRefused::TorrentLimit);
                }
                self.torrents.insert(req.info_hash, Torrent::default());
            }
            let t = self.torrents.get_mut(&req.info_hash).unwrap();
            let key = key(&req.peer_id, req.connection);
            if stopped {
                t.peers.remove(&key);
                return Ok(t.counts());
            }
            let expiry = now + limits.peer_timeout_secs;
            let completes = match t.peers.get_mut(&key) {
                Some(p) => {
                    let was_seeder = p.seeder;
                    p.seeder = req.seeder;
                    p.expiry = expiry;
                    !was_seeder
                }
                None => {
                    let room =
                        t.peers.len() < limits.max_peers_per_torrent && held < limits.max_peers;
                    let client = block_key(req.ip, BlockLevel::Address);
                    let of_client = t.peers.values().filter(|p| p.client == client).count();
                    let cap = limits
                        .max_peers_per_address
                        .filter(|_| quota == Quota::Counted);
                    if room && cap.is_some_and(|max| of_client >= max) {
                        self.address_limited += 1;
                        false
                    } else if room {
                        let peer = Peer {
                            connection: req.connection,
                            client,
                            seeder: req.seeder,
                            expiry,
                            completed: false,
                        };
                        t.peers.insert(key, peer);
                        t.held_until = None;
                        true
                    } else {
                        self.unstored += 1;
                        false
                    }
                }
            };
            if completes && req.event == AnnounceEvent::Completed {
                let p = t.peers.get_mut(&key).unwrap();
                if !p.completed {
                    p.completed = true;
                    t.downloaded += 1;
                }
            }
            Ok(t.counts())
        }

        /// The peers `req` may be given after its announce.
        pub fn eligible(&self, req: &RtcAnnounce, now: u32) -> usize {
            let Some(t) = self.torrents.get(&req.info_hash) else {
                return 0;
            };
            let eligible = t.peers.values().filter(|p| {
                p.expiry > now && p.connection != req.connection && !(req.seeder && p.seeder)
            });
            eligible.count()
        }

        pub fn disconnect(&mut self, h: &InfoHash, peer_id: &PeerId, connection: ConnectionRef) {
            if let Some(t) = self.torrents.get_mut(h) {
                t.peers.remove(&key(peer_id, connection));
            }
        }

        pub fn clean(&mut self, now: u32, mut in_segment: impl FnMut(&InfoHash) -> bool) {
            self.torrents.retain(|h, t| {
                if !in_segment(h) {
                    return true;
                }
                t.peers.retain(|_, p| p.expiry > now);
                !t.peers.is_empty() || t.held_until.is_some_and(|until| until > now)
            });
        }

        /// What a save at `now` and a restore at the same time leave: the
        /// counts of live swarms that count any, and no peer.
        pub fn restart(&mut self, now: u32) {
            let timeout = self.limits.peer_timeout_secs;
            let torrents = std::mem::take(&mut self.torrents);
            for (h, t) in torrents {
                let live = t.peers.values().any(|p| p.expiry > now)
                    || t.held_until.is_some_and(|until| until > now);
                if live && t.downloaded > 0 {
                    let restored = Torrent {
                        peers: BTreeMap::new(),
                        downloaded: t.downloaded,
                        held_until: Some(now + timeout),
                    };
                    self.torrents.insert(h, restored);
                }
            }
            (self.unstored, self.address_limited, self.refused) = (0, 0, 0);
        }
    }
}

#[derive(Clone, Debug)]
enum Op {
    Announce(RtcAnnounce, Quota),
    Disconnect(InfoHash, PeerId, ConnectionRef),
    BitTorrent(Announce),
    Wait(u32),
    /// Clean the segment holding this torrent.
    Clean(InfoHash),
    /// An access list that refuses this torrent (applied to its segment).
    Refuse(InfoHash),
    /// Save the store and restore the file into a new one.
    Restart,
}

/// Connection `c`'s address: two connections to each, pairs of IPv4
/// addresses and of IPv6 addresses in one /64, so four connections to a
/// client.
fn address_of(c: u64) -> IpAddr {
    let pair = (c / 4) as u8;
    if pair.is_multiple_of(2) {
        Ipv4Addr::new(10, 1, pair, (c / 2 % 2) as u8 + 1).into()
    } else {
        let host = (c / 2 % 2) as u16 + 1;
        Ipv6Addr::new(0x2001, 0xdb8, 0, pair.into(), 0, 0, 0, host).into()
    }
}

/// Announces on `hashes` torrents from `connections` connections, most with
/// a peer id of their own, some with another's (or a second one).
fn ops(
    hashes: u8,
    connections: u64,
    stop_weight: u32,
    restart_weight: u32,
) -> impl Strategy<Value = Vec<Op>> {
    let event = prop_oneof![
        4 => Just(AnnounceEvent::None),
        2 => Just(AnnounceEvent::Started),
        2 => Just(AnnounceEvent::Completed),
        stop_weight => Just(AnnounceEvent::Stopped),
    ];
    let peer = (
        0..connections,
        prop_oneof![9 => Just(None), 1 => (0..connections).prop_map(Some)],
    )
        .prop_map(|(c, other)| (id(other.unwrap_or(c) as u16), conn(c)));
    let quota = prop_oneof![5 => Just(Quota::Counted), 1 => Just(Quota::Exempt)];
    let announce = (
        (0..hashes, peer.clone(), event),
        (any::<bool>(), 0..8usize, quota),
    )
        .prop_map(
            |((h, (peer_id, connection), event), (seeder, offers, quota))| {
                let req = RtcAnnounce {
                    info_hash: hash(h),
                    peer_id,
                    connection,
                    ip: address_of(connection.id),
                    event,
                    seeder,
                    offers,
                };
                Op::Announce(req, quota)
            },
        );
    let disconnect = (0..hashes, peer)
        .prop_map(|(h, (peer_id, connection))| Op::Disconnect(hash(h), peer_id, connection));
    let bt_event = prop_oneof![
        3 => Just(AnnounceEvent::Started),
        1 => Just(AnnounceEvent::Stopped),
    ];
    let bittorrent = (0..hashes, 1..6u8, bt_event).prop_map(|(h, n, event)| {
        Op::BitTorrent(Announce {
            event,
            ..bt(hash(h), bt_peer(n))
        })
    });
    let op = prop_oneof![
        100 => announce,
        10 => disconnect,
        10 => bittorrent,
        10 => (0..40u32).prop_map(Op::Wait),
        // Long enough, now and then, for a whole swarm to expire.
        1 => (0..1000u32).prop_map(Op::Wait),
        5 => (0..hashes).prop_map(|h| Op::Clean(hash(h))),
        1 => (0..hashes).prop_map(|h| Op::Refuse(hash(h))),
        restart_weight => Just(Op::Restart),
    ];
    proptest::collection::vec(op, 1..600)
}

/// Runs `ops` on a store and on the model, checking each answer and, after
/// each step, every count and peer.
fn check_against_model(limits: StoreLimits, hashes: u8, ops: Vec<Op>) -> Result<(), TestCaseError> {
    let mut store = store_with(limits);
    let mut model = model::Model::new(limits);
    let mut now = 0;
    let mut receivers = Vec::new();
    for op in ops {
        match op {
            Op::Announce(req, quota) => {
                let bt = (
                    store.torrent_count(),
                    store.peer_count().seeders + store.peer_count().leechers,
                );
                let stats = store.stats;
                receivers.clear();
                let got = store.rtc_announce(&req, now, quota, &mut receivers);
                prop_assert_eq!(got, model.announce(&req, now, quota, bt));
                prop_assert_eq!(
                    store.stats.unstored_peers - stats.unstored_peers,
                    model.unstored
                );
                prop_assert_eq!(
                    store.stats.address_peers - stats.address_peers,
                    model.address_limited
                );
                prop_assert_eq!(
                    store.stats.refused_torrents - stats.refused_torrents,
                    model.refused
                );
                (model.unstored, model.address_limited, model.refused) = (0, 0, 0);
                let expected = match got {
                    Ok(_) if req.event != AnnounceEvent::Stopped => model.eligible(&req, now),
                    _ => 0,
                };
                prop_assert_eq!(receivers.len(), expected.min(req.offers));
                let distinct: BTreeSet<_> =
                    receivers.iter().map(|(id, c)| model::key(id, *c)).collect();
                prop_assert_eq!(distinct.len(), receivers.len(), "distinct");
                for (peer_id, connection) in &receivers {
                    let t = &model.torrents[&req.info_hash];
                    let p = t.peers.get(&model::key(peer_id, *connection));
                    prop_assert!(
                        p.is_some_and(|p| p.connection == *connection
                            && p.connection != req.connection
                            && p.expiry > now
                            && !(req.seeder && p.seeder)),
                        "{:?} on {:?} is no peer to receive {:?}'s offers: {:?}",
                        peer_id,
                        connection,
                        req,
                        p
                    );
                }
            }
            Op::Disconnect(h, peer_id, connection) => {
                store.rtc_disconnected(&h, &peer_id, connection);
                model.disconnect(&h, &peer_id, connection);
            }
            Op::BitTorrent(req) => {
                let _ = bt_go(&mut store, req, now);
            }
            Op::Wait(secs) => now += secs,
            Op::Clean(h) => {
                let segment = store.segment_of(&h);
                store.clean_segment(segment, now);
                while store.cleaning() {
                    store.clean_more(now);
                }
                model.clean(now, |o| store.segment_of(o) == segment);
            }
            Op::Refuse(h) => {
                store.retain_torrents(store.segment_of(&h), |o| *o != h);
                model.torrents.remove(&h);
            }
            Op::Restart => {
                let (restored, done) = restore(&file_of(&store, now), limits, now);
                store = restored;
                model.restart(now);
                prop_assert_eq!(done.rtc_torrents, model.torrents.len());
            }
        }
        store.rtc_check_invariants();
        prop_assert_eq!(store.rtc_torrent_count(), model.torrents.len());
        let mut totals = PeerTotals::default();
        for h in (0..hashes).map(hash) {
            let expected = model.torrents.get(&h);
            prop_assert_eq!(
                store.rtc_scrape(&h),
                expected.map(model::Torrent::scrape).unwrap_or_default()
            );
            let peers = store.rtc_peers(&h);
            let peers: BTreeMap<_, _> = peers
                .into_iter()
                .map(|(id, c, s)| (model::key(&id, c), s))
                .collect();
            let want: BTreeMap<_, _> = expected
                .iter()
                .flat_map(|t| &t.peers)
                .map(|(key, p)| (*key, p.seeder))
                .collect();
            prop_assert_eq!(peers, want);
            let c = expected.map(model::Torrent::counts).unwrap_or_default();
            totals.seeders += c.seeders as usize;
            totals.leechers += c.leechers as usize;
        }
        prop_assert_eq!(store.rtc_peer_count(), totals);
        // The limits in total hold for both kinds together.
        prop_assert!(store.torrent_count() + store.rtc_torrent_count() <= limits.max_torrents);
        let bt = store.peer_count();
        prop_assert!(
            bt.seeders + bt.leechers + totals.seeders + totals.leechers <= limits.max_peers
        );
    }
    Ok(())
}

proptest! {
    /// Small swarms, a few torrents, every limit reached.
    #[test]
    fn small_swarms_match_the_model(ops in ops(3, 12, 2, 1), max_peers in 3..12usize) {
        let limits = StoreLimits {
            peer_timeout_secs: 60,
            max_torrents: 3,
            max_peers_per_torrent: 5,
            max_peers,
            max_peers_per_address: Some(2),
            max_peers_per_network: None,
            new_torrents_per_minute: [0; 3],
            peer_ids: false,
        };
        check_against_model(limits, 3, ops)?;
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(48))]
    /// Swarms that grow past the index threshold and shrink back.
    #[test]
    fn large_swarms_match_the_model(ops in ops(1, 160, 1, 0), cap in prop_oneof![Just(None), Just(Some(3))]) {
        let limits = StoreLimits {
            peer_timeout_secs: 300,
            max_torrents: 10,
            max_peers_per_torrent: 1000,
            max_peers: usize::MAX,
            max_peers_per_address: cap,
            max_peers_per_network: None,
            new_torrents_per_minute: [0; 3],
            peer_ids: false,
        };
        check_against_model(limits, 1, ops)?;
    }
}
