use super::*;
use crate::batch::UnregisteredRow;
use crate::site::{SiteRecords, Torrent, TorrentStatus};
use crate::testing::{self, announce, group, hash, peer, site, torrent, user};
use crate::GlobalFactors;

fn key(user_id: u32, torrent_id: u32, p: u8) -> PeerKey {
    PeerKey {
        user_id,
        torrent_id,
        peer_id: peer(p),
    }
}

#[test]
fn a_first_announce_credits_nothing_and_joins_the_swarm() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut a = announce(1, 1, 1);
    a.uploaded = 5000;
    a.downloaded = 7000;
    let admitted = ledger.announce(&site, &a, 100).unwrap();
    assert!(admitted.new_peer && admitted.in_swarm && !admitted.seeder);
    assert_eq!((admitted.uploaded, admitted.downloaded), (0, 0));
    assert_eq!(ledger.accounts(), 1);
    assert_eq!(ledger.counts(1), (0, 1));
    let batch = ledger.take_batch();
    let row = batch.peers[&key(1, 1, 1)];
    assert!(row.active && !row.seeder && row.visible);
    assert_eq!((row.uploaded, row.downloaded, row.left), (5000, 7000, 1000));
    assert_eq!((row.created_at, row.updated_at), (100, 100));
    let history = batch.history[&(1, 1)];
    assert_eq!((history.uploaded, history.actual_uploaded), (0, 0));
    assert_eq!(
        (history.client_uploaded, history.client_downloaded),
        (5000, 7000)
    );
    assert!(history.active && history.completed_at.is_none());
    assert!(batch.users.is_empty());
    assert_eq!(batch.torrents[&1].leechers, 1);
    assert_eq!(batch.torrents[&1].seeders, 0);
    assert!(ledger.take_batch().is_empty());
}

#[test]
fn later_announces_credit_the_deltas() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut a = announce(1, 1, 1);
    ledger.announce(&site, &a, 100).unwrap();
    a.event = AnnounceEvent::None;
    a.uploaded = 300;
    a.downloaded = 500;
    let admitted = ledger.announce(&site, &a, 200).unwrap();
    assert!(!admitted.new_peer);
    assert_eq!(
        (admitted.credited_uploaded, admitted.credited_downloaded),
        (300, 500)
    );
    let batch = ledger.take_batch();
    assert_eq!(batch.users[&1].uploaded, 300);
    assert_eq!(batch.users[&1].downloaded, 500);
    assert_eq!(batch.history[&(1, 1)].actual_downloaded, 500);
    assert_eq!(batch.torrents[&1].balance, -200);
    assert_eq!(batch.torrents[&1].leechers, 1, "joined once");
    assert_eq!(batch.peers[&key(1, 1, 1)].created_at, 100);
}

#[test]
fn completing_counts_once() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut a = announce(1, 1, 1);
    ledger.announce(&site, &a, 100).unwrap();
    ledger.take_batch();
    a.event = AnnounceEvent::Completed;
    a.left = 0;
    a.downloaded = 1000;
    let admitted = ledger.announce(&site, &a, 200).unwrap();
    assert!(admitted.completed && admitted.seeder);
    let batch = ledger.take_batch();
    let row = batch.torrents[&1];
    assert_eq!((row.times_completed, row.seeders, row.leechers), (1, 1, -1));
    assert_eq!(batch.history[&(1, 1)].completed_at, Some(200));
    assert_eq!(ledger.counts(1), (1, 0));

    a.event = AnnounceEvent::Completed;
    let again = ledger.announce(&site, &a, 300).unwrap();
    assert!(!again.completed);
    assert!(!ledger.take_batch().torrents.contains_key(&1));
}

#[test]
fn a_new_seeder_does_not_count_as_completing() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut a = announce(1, 1, 1);
    a.left = 0;
    a.event = AnnounceEvent::Completed;
    let admitted = ledger.announce(&site, &a, 100).unwrap();
    assert!(!admitted.completed && admitted.seeder);
    assert_eq!(ledger.take_batch().torrents[&1].times_completed, 0);
}

#[test]
fn counters_going_backwards_credit_nothing() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut a = announce(1, 1, 1);
    a.uploaded = 1000;
    a.downloaded = 1000;
    ledger.announce(&site, &a, 100).unwrap();
    a.event = AnnounceEvent::None;
    a.uploaded = 10;
    a.downloaded = 5000;
    let admitted = ledger.announce(&site, &a, 200).unwrap();
    assert_eq!((admitted.uploaded, admitted.downloaded), (0, 0));
    let batch = ledger.take_batch();
    assert!(batch.users.is_empty());
    assert_eq!(batch.torrents[&1].balance, 0);
    // The new totals are the base of the next delta.
    a.uploaded = 60;
    let next = ledger.announce(&site, &a, 300).unwrap();
    assert_eq!(next.uploaded, 50);
}

#[test]
fn stopping_removes_the_account_and_credits_each_counter_on_its_own() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut a = announce(1, 1, 1);
    a.uploaded = 1000;
    a.downloaded = 1000;
    ledger.announce(&site, &a, 100).unwrap();
    ledger.take_batch();
    a.event = AnnounceEvent::Stopped;
    a.uploaded = 10;
    a.downloaded = 1500;
    let admitted = ledger.announce(&site, &a, 200).unwrap();
    assert!(!admitted.in_swarm);
    assert_eq!((admitted.uploaded, admitted.downloaded), (0, 500));
    assert_eq!(ledger.accounts(), 0);
    assert_eq!(ledger.counts(1), (0, 0));
    let batch = ledger.take_batch();
    let row = batch.peers[&key(1, 1, 1)];
    assert!(!row.active && !row.visible);
    assert!(!batch.history[&(1, 1)].active);
    assert_eq!(batch.torrents[&1].leechers, -1);
    assert_eq!(
        ledger.announce(&site, &a, 300),
        Err(Refusal::StoppedPeerMissing)
    );
}

#[test]
fn history_stays_active_while_the_user_has_another_peer() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    ledger.announce(&site, &announce(1, 1, 1), 100).unwrap();
    ledger.announce(&site, &announce(1, 1, 2), 100).unwrap();
    let mut stop = announce(1, 1, 1);
    stop.event = AnnounceEvent::Stopped;
    ledger.announce(&site, &stop, 200).unwrap();
    assert!(ledger.take_batch().history[&(1, 1)].active);
    let mut stop = announce(1, 1, 2);
    stop.event = AnnounceEvent::Stopped;
    ledger.announce(&site, &stop, 300).unwrap();
    assert!(!ledger.take_batch().history[&(1, 1)].active);
}

#[test]
fn seedtime_counts_between_seeding_announces_capped_at_the_ttl() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut a = announce(1, 1, 1);
    ledger.announce(&site, &a, 0).unwrap();
    a.left = 0;
    a.event = AnnounceEvent::Completed;
    assert_eq!(ledger.announce(&site, &a, 50).unwrap().seedtime, 0);
    a.event = AnnounceEvent::None;
    assert_eq!(ledger.announce(&site, &a, 1850).unwrap().seedtime, 1800);
    assert_eq!(
        ledger.announce(&site, &a, 1850 + 7000).unwrap().seedtime,
        7000
    );
    // Expiry would forget it after 7200 s; a later announce in the same
    // expiry pass still counts at most the TTL.
    assert_eq!(
        ledger.announce(&site, &a, 8850 + 7200).unwrap().seedtime,
        7200
    );
    a.event = AnnounceEvent::Stopped;
    assert_eq!(ledger.announce(&site, &a, 16050 + 10).unwrap().seedtime, 10);
    assert_eq!(
        ledger.take_batch().history[&(1, 1)].seedtime,
        1800 + 7000 + 7200 + 10
    );
}

#[test]
fn expiry_forgets_silent_peers_oldest_first_and_bounded() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    ledger.announce(&site, &announce(1, 1, 1), 100).unwrap();
    let mut seeder = announce(2, 1, 2);
    seeder.left = 0;
    ledger.announce(&site, &seeder, 200).unwrap();
    ledger.announce(&site, &announce(1, 2, 3), 5000).unwrap();
    ledger.take_batch();

    assert_eq!(ledger.expire(100 + 7200), 0, "exactly the TTL: kept");
    assert_eq!(ledger.expire_some(200 + 7201, 1), 1);
    assert_eq!(ledger.accounts(), 2);
    assert_eq!(ledger.expire_some(200 + 7201, 10), 1);
    assert_eq!(ledger.accounts(), 1);
    assert_eq!(ledger.counts(1), (0, 0));
    let batch = ledger.take_batch();
    let row = batch.peers[&key(1, 1, 1)];
    assert!(!row.active);
    assert_eq!(row.updated_at, 100);
    assert!(!batch.peers[&key(2, 1, 2)].active);
    assert_eq!(batch.torrents[&1].seeders, -1);
    assert_eq!(batch.torrents[&1].leechers, -1);
    assert!(batch.history.is_empty());

    // A peer that comes back is new: nothing credited.
    let mut back = announce(1, 1, 1);
    back.uploaded = 999;
    assert!(ledger.announce(&site, &back, 8000).unwrap().new_peer);
}

#[test]
fn a_reannounce_postpones_expiry() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let a = announce(1, 1, 1);
    ledger.announce(&site, &a, 100).unwrap();
    ledger.announce(&site, &a, 5000).unwrap();
    assert_eq!(ledger.expire(7400), 0);
    assert_eq!(ledger.expire(12201), 1);
}

#[test]
fn a_user_may_have_three_peers_on_a_torrent() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    for p in 1..=3 {
        ledger.announce(&site, &announce(1, 1, p), 100).unwrap();
    }
    let refused = ledger.announce(&site, &announce(1, 1, 4), 100).unwrap_err();
    assert_eq!(refused, Refusal::TooManyPeers { max: 3 });
    assert_eq!(
        refused.reason(),
        "You already have 3 peers on this torrent. Ignoring."
    );
    assert_eq!(ledger.accounts(), 3);
    // Known peers still announce; other users and torrents are apart.
    ledger.announce(&site, &announce(1, 1, 3), 200).unwrap();
    ledger.announce(&site, &announce(2, 1, 4), 200).unwrap();
    ledger.announce(&site, &announce(1, 2, 4), 200).unwrap();
    let mut stop = announce(1, 1, 1);
    stop.event = AnnounceEvent::Stopped;
    ledger.announce(&site, &stop, 300).unwrap();
    ledger.announce(&site, &announce(1, 1, 4), 300).unwrap();
}

fn refusal_of(site: &Site, a: &PrivateAnnounce) -> Refusal {
    let mut ledger = Ledger::new(LedgerConfig::default());
    let refusal = ledger.announce(site, a, 100).unwrap_err();
    assert_eq!(ledger.accounts(), 0);
    assert!(ledger.take_batch().is_empty());
    refusal
}

#[test]
fn every_refusal_has_unit3d_announces_words() {
    let mut records = testing::records();
    records.blacklist = vec![b"-BL".to_vec()];
    records.groups.extend([
        group(11, "banned"),
        group(12, "validating"),
        group(13, "disabled"),
    ]);
    let mut no_download = user(3, 10);
    no_download.can_download = false;
    records.users.extend([
        no_download,
        user(4, 99),
        user(5, 11),
        user(6, 12),
        user(7, 13),
    ]);
    let mut deleted = torrent(3);
    deleted.is_deleted = true;
    let statuses = [
        (4, TorrentStatus::Pending),
        (5, TorrentStatus::Rejected),
        (6, TorrentStatus::Postponed),
        (7, TorrentStatus::Other(9)),
    ];
    records.torrents.push(deleted);
    for (id, status) in statuses {
        records.torrents.push(Torrent {
            status,
            ..torrent(id)
        });
    }
    let mut site = Site::from_records(records, GlobalFactors::default());
    site.passkeys.insert(testing::passkey(8), 8);

    let mut blacklisted = announce(1, 1, 1);
    blacklisted.peer_id.0[..3].copy_from_slice(b"-BL");
    let mut seeding = announce(3, 1, 1);
    seeding.left = 0;
    assert!(Ledger::default().announce(&site, &seeding, 1).is_ok());

    let cases = [
        (
            blacklisted,
            "Client is not acceptable. Please check our blacklist.",
        ),
        (announce(1, 50, 1), "InfoHash not found."),
        (announce(99, 50, 1), "InfoHash not found."),
        (announce(1, 3, 1), "Torrent has been deleted."),
        (announce(1, 4, 1), "Torrent is pending moderation."),
        (announce(1, 5, 1), "Torrent has been rejected."),
        (announce(1, 6, 1), "Torrent has been postponed."),
        (announce(1, 7, 1), "Torrent not approved."),
        (
            announce(99, 1, 1),
            "Passkey does not exist. Please re-download the .torrent file.",
        ),
        (
            announce(8, 1, 1),
            "User does not exist. Please re-download the .torrent file.",
        ),
        (
            announce(3, 1, 1),
            "Your downloading privileges have been disabled.",
        ),
        (announce(4, 1, 1), "Group not found."),
        (
            announce(5, 1, 1),
            "Your account is not enabled. (Current: banned).",
        ),
        (
            announce(6, 1, 1),
            "Your account is not enabled. (Current: validating).",
        ),
        (
            announce(7, 1, 1),
            "Your account is not enabled. (Current: disabled).",
        ),
    ];
    for (a, reason) in cases {
        assert_eq!(refusal_of(&site, &a).reason(), reason);
    }
    let pending = refusal_of(&site, &announce(1, 4, 1));
    assert!(pending.is_critical_warning());
    assert_eq!(pending.interval_secs(), 30);
    let deleted = refusal_of(&site, &announce(1, 3, 1));
    assert!(!deleted.is_critical_warning());
    assert_eq!(deleted.interval_secs(), 5400);
}

#[test]
fn an_empty_blacklisted_prefix_refuses_every_client() {
    let records = SiteRecords {
        blacklist: vec![Vec::new()],
        ..testing::records()
    };
    let site = Site::from_records(records, GlobalFactors::default());
    assert_eq!(refusal_of(&site, &announce(1, 1, 1)), Refusal::Blacklisted);
}

fn credited(site: &Site, user_id: u32, torrent_id: u32) -> (u64, u64) {
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut a = announce(user_id, torrent_id, 1);
    ledger.announce(site, &a, 100).unwrap();
    a.uploaded = 1000;
    a.downloaded = 1000;
    let admitted = ledger.announce(site, &a, 200).unwrap();
    let batch = ledger.take_batch();
    let history = batch.history[&(user_id, torrent_id)];
    assert_eq!(
        (history.actual_uploaded, history.actual_downloaded),
        (1000, 1000)
    );
    assert_eq!(batch.torrents[&torrent_id].balance, 0);
    (admitted.credited_uploaded, admitted.credited_downloaded)
}

#[test]
fn the_factors_decide_the_credited_bytes() {
    let mut records = testing::records();
    records.tokens = vec![(1, 1)];
    records.featured = vec![2];
    records.torrents.push(Torrent {
        download_factor: 25,
        upload_factor: 200,
        times_completed: 0,
        ..torrent(3)
    });
    let site = Site::from_records(records, GlobalFactors::default());
    assert_eq!(credited(&site, 1, 1), (1000, 0), "token");
    assert_eq!(credited(&site, 2, 1), (1000, 1000), "no token");
    assert_eq!(credited(&site, 2, 2), (2000, 0), "featured");
    assert_eq!(credited(&site, 2, 3), (2000, 250), "torrent factors");
}

#[test]
fn immunity_comes_from_the_group_or_the_donor_override() {
    let mut records = testing::records();
    records.groups[0].is_immune = true;
    let mut donor = user(3, 10);
    donor.is_donor = true;
    records.users.push(donor);
    let mut factors = GlobalFactors::default();
    factors.donor.immune = Some(false);
    let site = Site::from_records(records, factors);
    let mut ledger = Ledger::default();
    ledger.announce(&site, &announce(1, 1, 1), 1).unwrap();
    ledger.announce(&site, &announce(3, 1, 1), 1).unwrap();
    let batch = ledger.take_batch();
    assert!(batch.history[&(1, 1)].immune);
    assert!(!batch.history[&(3, 1)].immune);
}

#[test]
fn an_upload_too_fast_is_flagged_not_credited() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig {
        max_upload_rate: 100,
        ..LedgerConfig::default()
    });
    let mut a = announce(1, 1, 1);
    ledger.announce(&site, &a, 100).unwrap();
    a.uploaded = 1000;
    a.downloaded = 10;
    let fine = ledger.announce(&site, &a, 110).unwrap();
    assert!(!fine.flagged);
    assert_eq!(fine.credited_uploaded, 1000);
    a.uploaded = 3000;
    let fast = ledger.announce(&site, &a, 119).unwrap();
    assert!(fast.flagged);
    assert_eq!((fast.uploaded, fast.credited_uploaded), (2000, 0));
    assert_eq!(ledger.flagged(), 1);
    let batch = ledger.take_batch();
    assert_eq!(batch.users[&1].uploaded, 1000);
    assert_eq!(batch.history[&(1, 1)].actual_uploaded, 3000);
    assert_eq!(batch.torrents[&1].balance, 3000 - 10);
    // Within the same second the bound is one second's worth (the clock
    // counts whole seconds).
    a.uploaded = 3100;
    assert!(!ledger.announce(&site, &a, 119).unwrap().flagged);
    a.uploaded = 3201;
    assert!(ledger.announce(&site, &a, 119).unwrap().flagged);
}

#[test]
fn an_announce_too_soon_is_accounted_but_marked() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig {
        min_announce_interval: 1740,
        ..LedgerConfig::default()
    });
    let mut a = announce(1, 1, 1);
    assert!(
        !ledger.announce(&site, &a, 100).unwrap().too_soon,
        "a new peer"
    );
    a.event = AnnounceEvent::None;
    a.uploaded = 300;
    let soon = ledger.announce(&site, &a, 1000).unwrap();
    assert!(soon.too_soon && soon.in_swarm);
    assert_eq!(soon.credited_uploaded, 300, "still credited");
    // The interval counts from the announce before, held back or not.
    assert!(ledger.announce(&site, &a, 2739).unwrap().too_soon);
    assert!(!ledger.announce(&site, &a, 2739 + 1740).unwrap().too_soon);
    // A first completed is never held back; a second one is.
    a.event = AnnounceEvent::Completed;
    a.left = 0;
    let done = ledger.announce(&site, &a, 2739 + 1741).unwrap();
    assert!(done.completed && !done.too_soon);
    assert!(ledger.announce(&site, &a, 2739 + 1742).unwrap().too_soon);
    // Off at 0.
    let mut off = Ledger::new(LedgerConfig::default());
    let a = announce(1, 1, 2);
    off.announce(&site, &a, 100).unwrap();
    assert!(!off.announce(&site, &a, 100).unwrap().too_soon);
    assert_eq!(ledger.take_batch().users[&1].uploaded, 300);
}

#[test]
fn the_peers_of_a_torrent_are_listed_for_the_api() {
    let site = site();
    let mut ledger = Ledger::default();
    let mut a = announce(1, 1, 1);
    a.event = AnnounceEvent::Completed;
    ledger.announce(&site, &a, 100).unwrap();
    ledger.announce(&site, &announce(2, 1, 2), 150).unwrap();
    let mut peers: Vec<_> = ledger.peers_of(1).collect();
    peers.sort_by_key(|p| p.key);
    assert_eq!(peers.len(), 2);
    assert_eq!(peers[0].key, key(1, 1, 1));
    assert!(peers[0].has_sent_completed && !peers[1].has_sent_completed);
    assert_eq!(peers[1].row.updated_at, 150);
    assert_eq!(ledger.peers_of(2).count(), 0);
    let _ = hash(1);
}

#[test]
fn a_restored_peer_is_credited_from_its_last_totals() {
    let site = site();
    let mut first = Ledger::new(LedgerConfig::default());
    let mut a = announce(1, 1, 1);
    a.uploaded = 100;
    first.announce(&site, &a, 100).unwrap();
    let rows = first.take_batch().peers;

    // A new process: the peer's row comes back from the database.
    let mut ledger = Ledger::new(LedgerConfig::default());
    for (key, row) in &rows {
        ledger.restore(*key, row);
    }
    assert_eq!((ledger.accounts(), ledger.counts(1)), (1, (0, 1)));
    assert!(ledger.take_batch().is_empty(), "a restore writes nothing");
    a.event = AnnounceEvent::None;
    a.uploaded = 400;
    let admitted = ledger.announce(&site, &a, 200).unwrap();
    assert!(!admitted.new_peer);
    assert_eq!(admitted.credited_uploaded, 300);
    let batch = ledger.take_batch();
    assert!(
        batch.torrents.get(&1).is_none_or(|t| t.leechers == 0),
        "counted already"
    );

    // An inactive row, or a newer one, replaces what was restored.
    let mut row = rows[&key(1, 1, 1)];
    row.uploaded = 1000;
    ledger.restore(key(1, 1, 1), &row);
    assert_eq!(ledger.accounts(), 1);
    a.uploaded = 1500;
    assert_eq!(
        ledger.announce(&site, &a, 300).unwrap().credited_uploaded,
        500
    );
    row.active = false;
    ledger.restore(key(1, 1, 1), &row);
    assert_eq!((ledger.accounts(), ledger.counts(1)), (0, (0, 0)));
}

#[test]
fn snatches_and_a_users_peers_for_the_site_api() {
    let site = site();
    let mut ledger = Ledger::default();
    let mut a = announce(1, 1, 1);
    ledger.announce(&site, &a, 100).unwrap();
    let seeder = announce(1, 1, 2);
    let mut seeder = PrivateAnnounce { left: 0, ..seeder };
    seeder.event = AnnounceEvent::Started;
    ledger.announce(&site, &seeder, 100).unwrap();
    assert_eq!(ledger.user_counts(1), (1, 1));
    assert_eq!(ledger.user_counts(2), (0, 0));
    assert_eq!(ledger.snatches(1), 0);
    a.event = AnnounceEvent::Completed;
    a.left = 0;
    ledger.announce(&site, &a, 200).unwrap();
    assert_eq!((ledger.snatches(1), ledger.user_counts(1)), (1, (2, 0)));
}

#[test]
fn a_leecher_past_its_download_slots_is_accounted_but_kept_out() {
    let mut records = testing::records();
    records.groups[0].download_slots = Some(1);
    let site = Site::from_records(records, GlobalFactors::default());
    let counts = std::sync::Arc::new(crate::slots::LeechingCounts::default());
    // Two workers' ledgers share the counts.
    let mut one = Ledger::default().with_slots(counts.clone());
    let mut two = Ledger::default().with_slots(counts.clone());
    let first = one.announce(&site, &announce(1, 1, 1), 100).unwrap();
    assert!(first.in_swarm && !first.hidden);
    assert_eq!(counts.get(1), 1);
    let mut second = announce(1, 2, 2);
    let over = two.announce(&site, &second, 100).unwrap();
    assert!(over.hidden && !over.in_swarm, "past the one slot");
    assert!(!two.take_batch().peers[&key(1, 2, 2)].visible);
    // Still accounted: its deltas are credited.
    second.event = AnnounceEvent::None;
    second.downloaded = 100;
    assert_eq!(
        two.announce(&site, &second, 110)
            .unwrap()
            .credited_downloaded,
        100
    );
    // The first completes: the slot is free, and the second takes it.
    let mut done = announce(1, 1, 1);
    done.event = AnnounceEvent::Completed;
    done.left = 0;
    one.announce(&site, &done, 120).unwrap();
    assert_eq!(counts.get(1), 0);
    let now_in = two.announce(&site, &second, 130).unwrap();
    assert!(now_in.in_swarm && !now_in.hidden);
    assert_eq!(counts.get(1), 1);
    // A stop gives it back; so would an expiry.
    second.event = AnnounceEvent::Stopped;
    two.announce(&site, &second, 140).unwrap();
    assert_eq!(counts.get(1), 0);
    // Another user's group has no limit.
    assert!(!one.announce(&site, &announce(2, 2, 3), 150).unwrap().hidden);
}

#[test]
fn a_known_users_announce_of_a_torrent_not_served_is_noted_within_a_bound() {
    let mut records = testing::records();
    let mut deleted = torrent(3);
    deleted.is_deleted = true;
    records.torrents.push(deleted);
    let site = Site::from_records(records, GlobalFactors::default());
    let mut ledger = Ledger::new(LedgerConfig {
        max_unregistered_per_batch: 2,
        ..LedgerConfig::default()
    });
    let refused = |ledger: &mut Ledger, a: &PrivateAnnounce, now| {
        ledger.announce(&site, a, now).unwrap_err().reason()
    };
    assert_eq!(
        refused(&mut ledger, &announce(1, 50, 1), 100),
        "InfoHash not found."
    );
    assert_eq!(
        refused(&mut ledger, &announce(1, 50, 2), 150),
        "InfoHash not found."
    );
    assert_eq!(
        refused(&mut ledger, &announce(2, 3, 1), 200),
        "Torrent has been deleted."
    );
    // An unknown passkey is no one's; past the bound a new pair is dropped,
    // a known one still updated.
    refused(&mut ledger, &announce(99, 51, 1), 250);
    refused(&mut ledger, &announce(1, 52, 1), 300);
    refused(&mut ledger, &announce(1, 50, 1), 350);
    assert_eq!(ledger.unregistered_dropped(), 1);
    let batch = ledger.take_batch();
    assert_eq!(batch.rows(), 2, "nothing else is written");
    let row = |user, torrent| batch.unregistered[&(user, hash(torrent))];
    assert_eq!(
        row(1, 50),
        UnregisteredRow {
            created_at: 100,
            updated_at: 350
        }
    );
    assert_eq!(row(2, 3).created_at, 200);
    // A new batch has room again; 0 records none and drops none.
    refused(&mut ledger, &announce(1, 52, 1), 400);
    assert_eq!(ledger.take_batch().unregistered.len(), 1);
    let mut off = Ledger::default();
    refused(&mut off, &announce(1, 50, 1), 100);
    assert!(off.take_batch().is_empty());
    assert_eq!(off.unregistered_dropped(), 0);
}

#[test]
fn peer_lists_past_a_users_limits_are_refused_by_kind() {
    use crate::lists::{ListLimits, ListRates};
    let site = site();
    let rates = Arc::new(ListRates::new(
        ListLimits::parse("60=1").unwrap(),
        ListLimits::parse("60=2").unwrap(),
    ));
    let mut ledger = Ledger::new(LedgerConfig::default()).with_lists(rates.clone());
    // Another worker's ledger counts into the same table.
    let mut other = Ledger::new(LedgerConfig::default()).with_lists(rates);
    let mut seeding = announce(2, 1, 1);
    seeding.left = 0;
    let alone = ledger.announce(&site, &seeding, 100).unwrap();
    assert!(
        !alone.seed_list_refused && !alone.leech_list_refused,
        "no leechers: no lists"
    );
    // User 1 leeches torrent 1: a seed list (its one a minute); no other
    // leecher, no leech list.
    let first = ledger.announce(&site, &announce(1, 1, 1), 100).unwrap();
    assert!(!first.seed_list_refused && !first.leech_list_refused);
    let mut seeding2 = announce(2, 2, 1);
    seeding2.left = 0;
    other.announce(&site, &seeding2, 100).unwrap();
    let second = other.announce(&site, &announce(1, 2, 1), 101).unwrap();
    assert!(
        second.seed_list_refused,
        "the minute's one seed list is spent"
    );
    assert!(!second.leech_list_refused);
    // Leech lists: user 1's second peer on torrent 1 sees a leecher.
    let third = ledger.announce(&site, &announce(1, 1, 2), 102).unwrap();
    assert!(third.seed_list_refused && !third.leech_list_refused);
    // The seeder now sees leechers: its leech lists count for user 2.
    seeding.event = AnnounceEvent::None;
    let seeder_again = ledger.announce(&site, &seeding, 2000).unwrap();
    assert!(!seeder_again.seed_list_refused && !seeder_again.leech_list_refused);
    // Nothing is counted without limits.
    let mut free = Ledger::new(LedgerConfig::default());
    for peer in 1..=3 {
        let a = free.announce(&site, &announce(1, 1, peer), 100).unwrap();
        assert!(!a.seed_list_refused && !a.leech_list_refused);
    }
}
