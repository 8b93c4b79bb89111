use super::*;
use crate::batch::UnregisteredRow;
use crate::settle::Settled;
use crate::site::{Site, SiteRecords, Torrent, TorrentStatus};
use crate::testing::{self, announce, group, hash, peer, site, torrent, user, Admit, MemoryDb};
use crate::GlobalFactors;

fn key(user_id: u32, torrent_id: u32, p: u8) -> PeerKey {
    PeerKey {
        user_id,
        torrent_id,
        peer_id: peer(p),
    }
}

/// Unix microseconds of second `secs`.
fn at(secs: u64) -> u64 {
    secs * 1_000_000
}

/// Flushes what `ledger` merged into `db`.
fn flush(ledger: &mut Ledger, db: &mut MemoryDb) -> Settled {
    let batch = ledger.take_batch();
    db.flush(&batch, &ledger.config().credit_rules())
}

#[test]
fn a_sessions_first_announce_credits_no_upload_and_is_charged_its_download() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut a = announce(1, 1, 1);
    a.uploaded = 5000;
    a.downloaded = 7000;
    let admitted = ledger.admit(&site, &a, at(100)).unwrap();
    assert!(admitted.new_peer && !admitted.hidden && !admitted.seeder);
    assert_eq!((admitted.seeders, admitted.leechers), (0, 1));
    assert_eq!(ledger.accounts(), 1);
    assert_eq!(ledger.counts(1), (0, 1));
    // Nobody recorded its session: what it reports downloaded is charged
    // (the user's client reported nothing on the torrent before), no
    // upload is credited.
    let settled = flush(&mut ledger, &mut db);
    assert_eq!(
        (
            settled.credited.actual_uploaded,
            settled.credited.actual_downloaded
        ),
        (0, 7000)
    );
    let row = db.peers[&key(1, 1, 1)];
    assert!(row.active && !row.seeder && row.visible);
    assert_eq!((row.uploaded, row.downloaded, row.left), (5000, 7000, 1000));
    assert_eq!((row.created_at, row.updated_at), (100, 100));
    let history = db.history[&(1, 1)];
    assert_eq!((history.uploaded, history.actual_uploaded), (0, 0));
    assert_eq!(history.actual_downloaded, 7000);
    assert_eq!(
        (history.client_uploaded, history.client_downloaded),
        (5000, 7000)
    );
    assert!(history.active && history.completed_at.is_none());
    assert_eq!((db.users[&1].uploaded, db.users[&1].downloaded), (0, 7000));
    assert_eq!((db.torrents[&1].seeders, db.torrents[&1].leechers), (0, 1));
    assert!(ledger.take_batch().is_empty());
    // Another peer id of the same user (a rotated peer id, a second
    // client): charged only what it reports past the 7000 already
    // reported, so that rotating peer ids dodges nothing.
    let mut b = announce(1, 1, 2);
    b.event = AnnounceEvent::None;
    b.downloaded = 9000;
    ledger.admit(&site, &b, at(200)).unwrap();
    assert_eq!(flush(&mut ledger, &mut db).credited.actual_downloaded, 2000);
    // A `started` at 0 is charged nothing, as UNIT3D-Announce charges it.
    let mut c = announce(1, 1, 3);
    c.uploaded = 0;
    ledger.admit(&site, &c, at(300)).unwrap();
    assert!(flush(&mut ledger, &mut db).credited.is_zero());
}

#[test]
fn later_announces_credit_the_deltas() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut a = announce(1, 1, 1);
    ledger.admit(&site, &a, at(100)).unwrap();
    a.event = AnnounceEvent::None;
    a.uploaded = 300;
    a.downloaded = 500;
    let admitted = ledger.admit(&site, &a, at(200)).unwrap();
    assert!(!admitted.new_peer);
    flush(&mut ledger, &mut db);
    assert_eq!((db.users[&1].uploaded, db.users[&1].downloaded), (300, 500));
    assert_eq!(db.history[&(1, 1)].actual_downloaded, 500);
    assert_eq!(db.torrents[&1].balance, -200);
    assert_eq!(db.torrents[&1].leechers, 1, "joined once");
    assert_eq!(db.peers[&key(1, 1, 1)].created_at, 100);
    // Flushed apart, the same.
    a.uploaded = 400;
    ledger.admit(&site, &a, at(300)).unwrap();
    flush(&mut ledger, &mut db);
    assert_eq!(db.users[&1].uploaded, 400);
}

#[test]
fn a_user_completes_a_torrent_once_however_its_peers_flip() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut a = announce(1, 1, 1);
    ledger.admit(&site, &a, at(100)).unwrap();
    flush(&mut ledger, &mut db);
    a.event = AnnounceEvent::Completed;
    a.left = 0;
    a.downloaded = 1000;
    let admitted = ledger.admit(&site, &a, at(200)).unwrap();
    assert!(admitted.completed && admitted.seeder);
    flush(&mut ledger, &mut db);
    let row = db.torrents[&1];
    assert_eq!((row.times_completed, row.seeders, row.leechers), (1, 1, 0));
    assert_eq!(db.history[&(1, 1)].completed_at, Some(200));
    assert_eq!(ledger.counts(1), (1, 0));

    // Completed again; leeching and completing again, fifty times, in one
    // flush or in many; another peer of the same user: still once.
    let again = ledger.admit(&site, &a, at(300)).unwrap();
    assert!(!again.completed);
    for flip in 0..50 {
        a.event = AnnounceEvent::None;
        a.left = 10;
        ledger.admit(&site, &a, at(400 + 2 * flip)).unwrap();
        a.event = AnnounceEvent::Completed;
        a.left = 0;
        ledger.admit(&site, &a, at(401 + 2 * flip)).unwrap();
        if flip % 7 == 0 {
            flush(&mut ledger, &mut db);
        }
    }
    let mut other = announce(1, 1, 2);
    ledger.admit(&site, &other, at(600)).unwrap();
    other.left = 0;
    other.event = AnnounceEvent::Completed;
    ledger.admit(&site, &other, at(601)).unwrap();
    flush(&mut ledger, &mut db);
    assert_eq!(db.torrents[&1].times_completed, 1);
    assert_eq!(db.history[&(1, 1)].completed_at, Some(200));
    assert_eq!(ledger.snatches(1), 1, "the site API's count: once per user");
}

#[test]
fn a_new_seeder_completes_only_by_its_event() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    // A seeder from its first announce (a cross-seed, a client restarted)
    // completed nothing here.
    let mut seeding = announce(1, 1, 1);
    seeding.left = 0;
    let admitted = ledger.admit(&site, &seeding, at(100)).unwrap();
    assert!(!admitted.completed && admitted.seeder);
    flush(&mut ledger, &mut db);
    assert_eq!(db.torrents[&1].times_completed, 0);
    assert_eq!(db.torrents[&1].seeders, 1);
    // One that says it completed (the tracker missed it leeching) is the
    // user's first completion: counted once, `completed_at` set, as a
    // leecher turned seeder would be; a later real completion of another
    // of its peers adds nothing.
    let mut said = announce(2, 1, 2);
    said.left = 0;
    said.event = AnnounceEvent::Completed;
    ledger.admit(&site, &said, at(200)).unwrap();
    flush(&mut ledger, &mut db);
    assert_eq!(db.torrents[&1].times_completed, 1);
    assert_eq!(db.history[&(2, 1)].completed_at, Some(200));
    let mut other = announce(2, 1, 3);
    ledger.admit(&site, &other, at(300)).unwrap();
    other.event = AnnounceEvent::Completed;
    other.left = 0;
    ledger.admit(&site, &other, at(400)).unwrap();
    flush(&mut ledger, &mut db);
    assert_eq!(db.torrents[&1].times_completed, 1);
    assert_eq!(ledger.snatches(1), 1);
}

#[test]
fn each_counter_is_judged_on_its_own() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut a = announce(1, 1, 1);
    ledger.admit(&site, &a, at(100)).unwrap();
    a.event = AnnounceEvent::None;
    // The upload back, the download grown: the upload credits nothing, the
    // download is charged (a counter back hides nothing of the other).
    a.uploaded = 1000;
    ledger.admit(&site, &a, at(150)).unwrap();
    a.uploaded = 10;
    a.downloaded = 5000;
    ledger.admit(&site, &a, at(200)).unwrap();
    let settled = flush(&mut ledger, &mut db);
    assert_eq!(
        (
            settled.credited.actual_uploaded,
            settled.credited.actual_downloaded
        ),
        (1000, 5000)
    );
    // The download back: a restarted session, its new total charged and
    // no upload credited; the new totals are the base of the next delta.
    a.uploaded = 60;
    a.downloaded = 300;
    ledger.admit(&site, &a, at(300)).unwrap();
    let settled = flush(&mut ledger, &mut db);
    assert_eq!(
        (
            settled.credited.actual_uploaded,
            settled.credited.actual_downloaded
        ),
        (0, 300)
    );
    // `started` changes nothing: a repeated one reports bytes like any
    // other announce.
    a.event = AnnounceEvent::Started;
    a.uploaded = 70;
    a.downloaded = 900;
    ledger.admit(&site, &a, at(400)).unwrap();
    let settled = flush(&mut ledger, &mut db);
    assert_eq!(
        (
            settled.credited.actual_uploaded,
            settled.credited.actual_downloaded
        ),
        (10, 600)
    );
    assert_eq!(db.users[&1].downloaded, 5900);
}

#[test]
fn stopping_removes_the_account_and_credits_each_counter_on_its_own() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut a = announce(1, 1, 1);
    a.uploaded = 1000;
    a.downloaded = 1000;
    ledger.admit(&site, &a, at(100)).unwrap();
    flush(&mut ledger, &mut db);
    a.event = AnnounceEvent::Stopped;
    a.uploaded = 10;
    a.downloaded = 1500;
    let admitted = ledger.admit(&site, &a, at(200)).unwrap();
    assert_eq!((admitted.seeders, admitted.leechers), (0, 0));
    assert_eq!(ledger.accounts(), 0);
    assert_eq!(ledger.counts(1), (0, 0));
    let settled = flush(&mut ledger, &mut db);
    assert_eq!(
        (
            settled.credited.actual_uploaded,
            settled.credited.actual_downloaded
        ),
        (0, 500)
    );
    let row = db.peers[&key(1, 1, 1)];
    assert!(!row.active && !row.visible);
    assert!(!db.history[&(1, 1)].active);
    assert_eq!(db.torrents[&1].leechers, 0);
    // A stop of a peer the ledger no longer knows is admitted, and credited
    // from the row the database keeps (a stop sent twice, here).
    a.downloaded = 1600;
    let twice = ledger.admit(&site, &a, at(300)).unwrap();
    assert!(twice.new_peer);
    assert_eq!(flush(&mut ledger, &mut db).credited.actual_downloaded, 100);
    assert_eq!(db.torrents[&1].leechers, 0);
}

#[test]
fn a_stop_of_a_peer_nobody_recorded_writes_nothing() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut stop = announce(1, 1, 9);
    stop.event = AnnounceEvent::Stopped;
    stop.uploaded = 5000;
    assert!(ledger.admit(&site, &stop, at(100)).unwrap().new_peer);
    let settled = flush(&mut ledger, &mut db);
    assert!(settled.rows.peers.is_empty() && settled.rows.history.is_empty());
    assert!(db.peers.is_empty() && db.history.is_empty() && db.users.is_empty());
}

#[test]
fn history_stays_active_while_the_user_has_another_peer() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    ledger.admit(&site, &announce(1, 1, 1), at(100)).unwrap();
    ledger.admit(&site, &announce(1, 1, 2), at(100)).unwrap();
    let mut stop = announce(1, 1, 1);
    stop.event = AnnounceEvent::Stopped;
    ledger.admit(&site, &stop, at(200)).unwrap();
    assert!(ledger.take_batch().history[&(1, 1)].active);
    let mut stop = announce(1, 1, 2);
    stop.event = AnnounceEvent::Stopped;
    ledger.admit(&site, &stop, at(300)).unwrap();
    assert!(!ledger.take_batch().history[&(1, 1)].active);
}

#[test]
fn seedtime_counts_between_seeding_announces_capped_at_the_ttl() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut a = announce(1, 1, 1);
    ledger.admit(&site, &a, at(0)).unwrap();
    a.left = 0;
    a.event = AnnounceEvent::Completed;
    ledger.admit(&site, &a, at(50)).unwrap();
    assert_eq!(flush(&mut ledger, &mut db).credited.seedtime, 0);
    a.event = AnnounceEvent::None;
    ledger.admit(&site, &a, at(1850)).unwrap();
    assert_eq!(flush(&mut ledger, &mut db).credited.seedtime, 1800);
    ledger.admit(&site, &a, at(1850 + 7000)).unwrap();
    // Expiry would forget it after 7200 s; a later announce in the same
    // expiry pass still counts at most the TTL.
    ledger.admit(&site, &a, at(8850 + 7200)).unwrap();
    a.event = AnnounceEvent::Stopped;
    ledger.admit(&site, &a, at(16050 + 10)).unwrap();
    assert_eq!(
        flush(&mut ledger, &mut db).credited.seedtime,
        7000 + 7200 + 10
    );
    assert_eq!(db.history[&(1, 1)].seedtime, 1800 + 7000 + 7200 + 10);
}

/// A new peer id's first announce is charged past the user's last report
/// before it, even one not yet written: restarting one client and starting
/// another within one flush dodges nothing.
#[test]
fn a_first_announce_is_charged_past_the_report_before_it_unwritten_too() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut p = announce(1, 1, 1);
    ledger.admit(&site, &p, at(100)).unwrap();
    p.event = AnnounceEvent::None;
    p.downloaded = 500;
    ledger.admit(&site, &p, at(200)).unwrap();
    flush(&mut ledger, &mut db);
    assert_eq!(db.users[&1].downloaded, 500);
    // p restarts (its report back at 0); q starts reporting 200, then 300,
    // all before the next flush: the database still says 500.
    p.downloaded = 0;
    ledger.admit(&site, &p, at(300)).unwrap();
    let mut q = announce(1, 1, 2);
    q.event = AnnounceEvent::None;
    q.downloaded = 200;
    ledger.admit(&site, &q, at(301)).unwrap();
    // Handed to the database thread apart (the prior rides in the claim).
    let first = ledger.take_batch();
    q.downloaded = 300;
    ledger.admit(&site, &q, at(302)).unwrap();
    let mut held = first;
    held.merge(ledger.take_batch(), &ledger.config().credit_rules());
    db.flush(&held, &ledger.config().credit_rules());
    assert_eq!(db.users[&1].downloaded, 500 + 300);
}

/// A stop of a peer nobody recorded that reports nothing to charge writes
/// nothing: not the user's history either, whose last report it would
/// otherwise replace.
#[test]
fn a_stop_nobody_recorded_leaves_the_history_alone() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut p = announce(1, 1, 1);
    p.left = 0;
    ledger.admit(&site, &p, at(100)).unwrap();
    p.event = AnnounceEvent::Completed;
    p.downloaded = 900;
    ledger.admit(&site, &p, at(200)).unwrap();
    let mut stray = announce(1, 1, 9);
    stray.event = AnnounceEvent::Stopped;
    stray.uploaded = 55;
    stray.left = 10;
    ledger.admit(&site, &stray, at(300)).unwrap();
    flush(&mut ledger, &mut db);
    let history = db.history[&(1, 1)];
    assert_eq!((history.client_downloaded, history.seeder), (900, true));
    ledger.admit(&site, &stray, at(400)).unwrap();
    flush(&mut ledger, &mut db);
    assert_eq!(db.history[&(1, 1)], history);
    assert!(!db.peers.contains_key(&key(1, 1, 9)));
}

/// A user seeding from two clients at once seeds once: the time is not
/// counted twice (it would triple with the three peers a user may have).
#[test]
fn a_users_peers_seeding_at_once_count_the_time_once() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    let mut one = announce(1, 1, 1);
    let mut two = announce(1, 1, 2);
    one.left = 0;
    two.left = 0;
    ledger.admit(&site, &one, at(100)).unwrap();
    ledger.admit(&site, &two, at(110)).unwrap();
    one.event = AnnounceEvent::None;
    two.event = AnnounceEvent::None;
    for round in 1..=5 {
        ledger.admit(&site, &one, at(100 + 1000 * round)).unwrap();
        ledger.admit(&site, &two, at(110 + 1000 * round)).unwrap();
    }
    flush(&mut ledger, &mut db);
    // From the first seeding announce to the last: 5010 s, not 10000.
    assert_eq!(db.history[&(1, 1)].seedtime, 5010);
}

#[test]
fn expiry_makes_rows_inactive_and_a_peer_back_later_is_credited_from_its_row() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut db = MemoryDb::default();
    ledger.admit(&site, &announce(1, 1, 1), at(100)).unwrap();
    let mut seeder = announce(2, 1, 2);
    seeder.left = 0;
    ledger.admit(&site, &seeder, at(200)).unwrap();
    ledger.admit(&site, &announce(1, 2, 3), at(5000)).unwrap();
    flush(&mut ledger, &mut db);
    assert_eq!((db.torrents[&1].seeders, db.torrents[&1].leechers), (1, 1));

    assert_eq!(ledger.expire(100 + 7200), 0, "exactly the TTL: kept");
    assert_eq!(ledger.expire_some(200 + 7201, 1), 1);
    assert_eq!(ledger.accounts(), 2);
    assert_eq!(ledger.expire_some(200 + 7201, 10), 1);
    assert_eq!(ledger.accounts(), 1);
    assert_eq!(ledger.counts(1), (0, 0));
    let batch = ledger.take_batch();
    assert!(batch.history.is_empty());
    db.flush(&batch, &ledger.config().credit_rules());
    let row = db.peers[&key(1, 1, 1)];
    // Inactive, but as visible as it was: an expiry, not a stop.
    assert!(!row.active && row.visible);
    assert_eq!(row.updated_at, 100);
    assert!(!db.peers[&key(2, 1, 2)].active);
    assert_eq!((db.torrents[&1].seeders, db.torrents[&1].leechers), (0, 0));

    // A peer back after the TTL is new here, and credited from the row the
    // database kept (UNIT3D-Announce credits its inactive peers the same
    // way), with no seedtime for the silence.
    let mut back = announce(1, 1, 1);
    back.event = AnnounceEvent::None;
    back.uploaded = 999;
    assert!(ledger.admit(&site, &back, at(8000)).unwrap().new_peer);
    let settled = flush(&mut ledger, &mut db);
    assert_eq!(settled.credited.actual_uploaded, 999);
    assert_eq!(settled.credited.seedtime, 0);
    assert_eq!(db.torrents[&1].leechers, 1);
    // A `started` is no different: its totals are credited from the row.
    let mut started = announce(2, 1, 2);
    started.left = 0;
    started.uploaded = 5;
    ledger.admit(&site, &started, at(8000)).unwrap();
    assert_eq!(flush(&mut ledger, &mut db).credited.actual_uploaded, 5);
    // But nothing is credited from a row older than the inactive TTL: a
    // session nobody recorded, no upload credited.
    let mut old = announce(1, 2, 3);
    old.event = AnnounceEvent::None;
    old.uploaded = 70;
    ledger.expire(5000 + 7201);
    flush(&mut ledger, &mut db);
    ledger.admit(&site, &old, at(5000 + 1_814_400 + 1)).unwrap();
    assert!(flush(&mut ledger, &mut db).credited.is_zero());
}

#[test]
fn a_reannounce_postpones_expiry() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let a = announce(1, 1, 1);
    ledger.admit(&site, &a, at(100)).unwrap();
    ledger.admit(&site, &a, at(5000)).unwrap();
    assert_eq!(ledger.expire(7400), 0);
    assert_eq!(ledger.expire(12201), 1);
}

#[test]
fn a_user_may_have_three_peers_on_a_torrent() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    for p in 1..=3 {
        ledger.admit(&site, &announce(1, 1, p), at(100)).unwrap();
    }
    let refused = ledger
        .admit(&site, &announce(1, 1, 4), at(100))
        .unwrap_err();
    assert_eq!(refused, Refusal::TooManyPeers { max: 3 });
    assert_eq!(
        refused.reason(),
        "You already have 3 peers on this torrent. Ignoring."
    );
    assert_eq!(ledger.accounts(), 3);
    // Known peers still announce; other users and torrents are apart.
    ledger.admit(&site, &announce(1, 1, 3), at(200)).unwrap();
    ledger.admit(&site, &announce(2, 1, 4), at(200)).unwrap();
    ledger.admit(&site, &announce(1, 2, 4), at(200)).unwrap();
    let mut stop = announce(1, 1, 1);
    stop.event = AnnounceEvent::Stopped;
    ledger.admit(&site, &stop, at(300)).unwrap();
    ledger.admit(&site, &announce(1, 1, 4), at(300)).unwrap();
}

/// The peers an announce's answer carries.
fn answer_of(
    ledger: &mut Ledger,
    site: &Site,
    a: &PrivateAnnounce,
    now_us: u64,
) -> Vec<std::net::SocketAddr> {
    let mut peers = tracker_proto::AnswerPeers::default();
    ledger.announce(site, a, now_us, &mut peers).unwrap();
    peers.addrs().collect()
}

fn from(a: &mut PrivateAnnounce, ip: [u8; 4], port: u16) -> std::net::SocketAddr {
    a.ip = std::net::IpAddr::from(ip);
    a.port = port;
    std::net::SocketAddr::new(a.ip, port)
}

#[test]
fn peer_lists_leave_out_the_users_own_peers() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut own_seeder = announce(1, 1, 1);
    own_seeder.left = 0;
    from(&mut own_seeder, [10, 0, 0, 1], 7001);
    let mut other_seeder = announce(2, 1, 2);
    other_seeder.left = 0;
    let other = from(&mut other_seeder, [10, 0, 0, 2], 7002);
    let mut own_leecher = announce(1, 1, 3);
    let own = from(&mut own_leecher, [10, 0, 0, 3], 7003);
    ledger.admit(&site, &own_seeder, at(100)).unwrap();
    ledger.admit(&site, &other_seeder, at(100)).unwrap();
    // The user's leecher is handed the other user's seeder only, though
    // its own seeder is there and counted.
    let got = answer_of(&mut ledger, &site, &own_leecher, at(110));
    assert_eq!(got, [other]);
    let admitted = ledger.admit(&site, &own_leecher, at(120)).unwrap();
    assert_eq!((admitted.seeders, admitted.leechers), (2, 1));
    // The user's seeder gets no leecher of its own user; the other user's
    // seeder gets it.
    assert!(answer_of(&mut ledger, &site, &own_seeder, at(130)).is_empty());
    assert_eq!(answer_of(&mut ledger, &site, &other_seeder, at(130)), [own]);
}

#[test]
fn a_peer_id_is_one_peer_whatever_its_ports_and_addresses() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let mut seeder = announce(1, 1, 1);
    seeder.left = 0;
    let mut latest = from(&mut seeder, [10, 0, 0, 1], 7000);
    for port in 7000..7004 {
        latest = from(&mut seeder, [10, 0, 0, 1], port);
        let admitted = ledger
            .admit(&site, &seeder, at(100 + u64::from(port)))
            .unwrap();
        assert_eq!((admitted.seeders, admitted.leechers), (1, 0), "port {port}");
    }
    let mut leecher = announce(2, 1, 2);
    from(&mut leecher, [10, 0, 0, 9], 6881);
    assert_eq!(answer_of(&mut ledger, &site, &leecher, at(8000)), [latest]);
    // It stops from another address: gone from the counts and the lists.
    seeder.event = AnnounceEvent::Stopped;
    from(&mut seeder, [10, 0, 0, 2], 7777);
    ledger.admit(&site, &seeder, at(8100)).unwrap();
    assert!(answer_of(&mut ledger, &site, &leecher, at(8200)).is_empty());
    assert_eq!(ledger.counts(1), (0, 1));
}

#[test]
fn peer_lists_are_of_the_announcers_family_and_reach_every_peer() {
    let site = site();
    let config = LedgerConfig {
        max_peers_per_torrent_per_user: 100,
        ..LedgerConfig::default()
    };
    let mut ledger = Ledger::new(config).with_seed(7);
    let mut v4 = Vec::new();
    for n in 1..=20u8 {
        let mut seeder = announce(2, 1, n);
        seeder.left = 0;
        v4.push(from(&mut seeder, [10, 0, 1, n], 7000));
        ledger.admit(&site, &seeder, at(100)).unwrap();
    }
    let mut v6_seeder = announce(2, 1, 50);
    v6_seeder.left = 0;
    v6_seeder.ip = "2001:db8::1".parse().unwrap();
    ledger.admit(&site, &v6_seeder, at(100)).unwrap();
    let mut leecher = announce(1, 1, 99);
    leecher.numwant = 5;
    from(&mut leecher, [10, 0, 2, 1], 6881);
    let mut seen = std::collections::BTreeSet::new();
    for i in 0..40 {
        let got = answer_of(&mut ledger, &site, &leecher, at(200 + i));
        assert_eq!(got.len(), 5);
        assert!(got.iter().all(|a| a.is_ipv4()));
        seen.extend(got);
    }
    assert_eq!(seen.len(), v4.len(), "every seeder handed out at times");
    leecher.ip = "2001:db8::2".parse().unwrap();
    let got = answer_of(&mut ledger, &site, &leecher, at(300));
    assert_eq!(got, [std::net::SocketAddr::new(v6_seeder.ip, 6881)]);
}

/// The metrics' totals follow every announce, restore and expiry.
#[test]
fn the_listed_totals_are_the_torrents_counts() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig::default());
    let sum = |ledger: &Ledger| {
        let (s1, l1) = ledger.counts(1);
        let (s2, l2) = ledger.counts(2);
        (u64::from(s1 + s2), u64::from(l1 + l2))
    };
    let mut seeder = announce(1, 1, 1);
    seeder.left = 0;
    ledger.admit(&site, &seeder, at(100)).unwrap();
    ledger.admit(&site, &announce(2, 1, 2), at(100)).unwrap();
    ledger.admit(&site, &announce(2, 2, 3), at(5000)).unwrap();
    assert_eq!((ledger.listed(), ledger.torrents()), ((1, 2), 2));
    // A leecher turned seeder, a seeder that stops.
    let mut done = announce(2, 1, 2);
    done.left = 0;
    ledger.admit(&site, &done, at(200)).unwrap();
    assert_eq!(ledger.listed(), sum(&ledger));
    seeder.event = AnnounceEvent::Stopped;
    ledger.admit(&site, &seeder, at(300)).unwrap();
    assert_eq!(ledger.listed(), (1, 1));
    let row = PeerRow {
        seeder: true,
        ..testing::any_peer_row()
    };
    ledger.restore(key(1, 2, 9), &row);
    assert_eq!(ledger.listed(), (2, 1));
    ledger.expire(5000 + 7201);
    assert_eq!((ledger.listed(), ledger.torrents()), ((0, 0), 0));
}

#[test]
fn hidden_leechers_are_bounded_apart_from_the_visible() {
    let mut records = testing::records();
    records.groups[0].download_slots = Some(1);
    let site = Site::from_records(records, GlobalFactors::default());
    let counts = std::sync::Arc::new(crate::slots::LeechingCounts::default());
    let mut ledger = Ledger::default().with_slots(counts.clone());
    let mut first = announce(1, 1, 1);
    ledger.admit(&site, &first, at(100)).unwrap();
    // Hidden ones do not count toward the three visible peers a user may
    // have on a torrent (UNIT3D-Announce counts the visible only), but are
    // bounded by as many of their own.
    for p in 2..=4 {
        assert!(
            ledger
                .admit(&site, &announce(1, 2, p), at(100))
                .unwrap()
                .hidden
        );
    }
    assert_eq!(
        ledger
            .admit(&site, &announce(1, 2, 5), at(100))
            .unwrap_err(),
        Refusal::TooManyPeers { max: 3 }
    );
    assert_eq!(ledger.counts(2), (0, 0), "hidden: not counted");
    // A slot frees: a fourth peer id is admitted, visible.
    first.event = AnnounceEvent::Stopped;
    ledger.admit(&site, &first, at(200)).unwrap();
    assert!(
        !ledger
            .admit(&site, &announce(1, 2, 6), at(210))
            .unwrap()
            .hidden
    );
    assert_eq!(ledger.counts(2), (0, 1));
    assert_eq!(counts.get(1), 1);
}

#[test]
fn the_accounts_are_bounded_per_torrent_and_in_all() {
    let site = site();
    let config = LedgerConfig {
        max_peers_per_torrent: 2,
        max_peers: 3,
        ..LedgerConfig::default()
    };
    let mut ledger = Ledger::new(config);
    ledger.admit(&site, &announce(1, 1, 1), at(100)).unwrap();
    ledger.admit(&site, &announce(2, 1, 2), at(100)).unwrap();
    let full = ledger
        .admit(&site, &announce(1, 1, 3), at(100))
        .unwrap_err();
    assert_eq!(full, Refusal::TrackerFull);
    assert_eq!(full.kind(), crate::RefusalKind::Full);
    ledger.admit(&site, &announce(1, 2, 3), at(100)).unwrap();
    assert_eq!(
        ledger
            .admit(&site, &announce(2, 2, 4), at(100))
            .unwrap_err(),
        Refusal::TrackerFull
    );
    // Known peers go on announcing; a stop makes room.
    ledger.admit(&site, &announce(1, 1, 1), at(200)).unwrap();
    let mut stop = announce(2, 1, 2);
    stop.event = AnnounceEvent::Stopped;
    ledger.admit(&site, &stop, at(200)).unwrap();
    ledger.admit(&site, &announce(2, 2, 4), at(200)).unwrap();
    assert_eq!(ledger.accounts(), 3);
}

fn refusal_of(site: &Site, a: &PrivateAnnounce) -> Refusal {
    let mut ledger = Ledger::new(LedgerConfig::default());
    let refusal = ledger.admit(site, a, at(100)).unwrap_err();
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
    assert!(Ledger::default().admit(&site, &seeding, at(1)).is_ok());

    let cases = [
        (
            blacklisted,
            "Client is not acceptable. Please check our blacklist.",
        ),
        (announce(1, 50, 1), "InfoHash not found."),
        (
            announce(99, 50, 1),
            "Passkey does not exist. Please re-download the .torrent file.",
        ),
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
    let mut db = MemoryDb::default();
    let mut a = announce(user_id, torrent_id, 1);
    ledger.admit(site, &a, at(100)).unwrap();
    a.event = AnnounceEvent::None;
    a.uploaded = 1000;
    a.downloaded = 1000;
    ledger.admit(site, &a, at(200)).unwrap();
    flush(&mut ledger, &mut db);
    let history = db.history[&(user_id, torrent_id)];
    assert_eq!(
        (history.actual_uploaded, history.actual_downloaded),
        (1000, 1000)
    );
    assert_eq!(db.torrents[&torrent_id].balance, 0);
    (history.uploaded, history.downloaded)
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
    ledger.admit(&site, &announce(1, 1, 1), at(1)).unwrap();
    ledger.admit(&site, &announce(3, 1, 1), at(1)).unwrap();
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
    let mut db = MemoryDb::default();
    let mut a = announce(1, 1, 1);
    ledger.admit(&site, &a, at(100)).unwrap();
    a.event = AnnounceEvent::None;
    a.uploaded = 1000;
    a.downloaded = 10;
    assert!(!ledger.admit(&site, &a, at(110)).unwrap().flagged);
    a.uploaded = 3000;
    assert!(ledger.admit(&site, &a, at(119)).unwrap().flagged);
    assert_eq!(ledger.flagged(), 1);
    // No slack at all: the same microsecond allows nothing, a tenth of a
    // second a tenth of the rate.
    a.uploaded = 3001;
    assert!(ledger.admit(&site, &a, at(119)).unwrap().flagged);
    a.uploaded = 3011;
    assert!(!ledger.admit(&site, &a, at(119) + 100_000).unwrap().flagged);
    flush(&mut ledger, &mut db);
    assert_eq!(db.users[&1].uploaded, 1010);
    assert_eq!(db.history[&(1, 1)].actual_uploaded, 3011);
    assert_eq!(db.torrents[&1].balance, 3011 - 10);
}

/// Announcing in a tight loop credits no more than the bound over the real
/// time, however short the intervals, and the user's peers on a torrent
/// share one bound.
#[test]
fn announcing_in_a_tight_loop_gains_nothing_over_the_bound() {
    let site = site();
    let rate = 10_000_000;
    let mut ledger = Ledger::new(LedgerConfig {
        max_upload_rate: rate,
        ..LedgerConfig::default()
    });
    let mut db = MemoryDb::default();
    let mut peers: Vec<_> = (1..=3).map(|p| announce(1, 1, p)).collect();
    let start = at(1000);
    for a in &mut peers {
        ledger.admit(&site, a, start).unwrap();
        a.event = AnnounceEvent::None;
    }
    // 1.05 s of announces 1 ms apart: one peer claims a second's worth
    // each time (the audit's 500 MB in 1.05 s), the two others each a
    // millisecond's worth (three times the rate together).
    for ms in 1..=1050 {
        for (i, a) in peers.iter_mut().enumerate() {
            a.uploaded += if i == 0 { rate } else { rate / 1000 };
            ledger.admit(&site, a, start + ms * 1000).unwrap();
        }
    }
    flush(&mut ledger, &mut db);
    let credited = db.users.get(&1).map_or(0, |u| u.uploaded);
    assert!(
        credited <= rate * 1050 / 1000,
        "{credited} credited in 1.05 s at {rate} B/s"
    );
    assert!(credited >= rate, "the bound's own worth is credited");
    assert_eq!(
        db.history[&(1, 1)].actual_uploaded,
        1050 * rate + 2 * 1050 * (rate / 1000)
    );
    // Honest peers sharing the bound are all credited.
    let mut honest = Ledger::new(LedgerConfig {
        max_upload_rate: rate,
        ..LedgerConfig::default()
    });
    let mut db = MemoryDb::default();
    let mut peers: Vec<_> = (1..=3).map(|p| announce(2, 1, p)).collect();
    for a in &mut peers {
        honest.admit(&site, a, start).unwrap();
        a.event = AnnounceEvent::None;
        a.uploaded = rate * 600;
    }
    for a in &peers {
        assert!(!honest.admit(&site, a, start + at(1800)).unwrap().flagged);
    }
    flush(&mut honest, &mut db);
    assert_eq!(db.users[&2].uploaded, 3 * 600 * rate);
}

#[test]
fn an_announce_too_soon_is_accounted_but_marked() {
    let site = site();
    let mut ledger = Ledger::new(LedgerConfig {
        min_announce_interval: 1740,
        ..LedgerConfig::default()
    });
    let mut db = MemoryDb::default();
    let mut a = announce(1, 1, 1);
    assert!(
        !ledger.admit(&site, &a, at(100)).unwrap().too_soon,
        "a new peer"
    );
    a.event = AnnounceEvent::None;
    a.uploaded = 300;
    let soon = ledger.admit(&site, &a, at(1000)).unwrap();
    assert!(soon.too_soon && !soon.hidden);
    // The interval counts from the announce before, held back or not.
    assert!(ledger.admit(&site, &a, at(2739)).unwrap().too_soon);
    assert!(!ledger.admit(&site, &a, at(2739 + 1740)).unwrap().too_soon);
    // A first completed is never held back; a second one is.
    a.event = AnnounceEvent::Completed;
    a.left = 0;
    let done = ledger.admit(&site, &a, at(2739 + 1741)).unwrap();
    assert!(done.completed && !done.too_soon);
    assert!(ledger.admit(&site, &a, at(2739 + 1742)).unwrap().too_soon);
    // Off at 0.
    let mut off = Ledger::new(LedgerConfig::default());
    let b = announce(1, 1, 2);
    off.admit(&site, &b, at(100)).unwrap();
    assert!(!off.admit(&site, &b, at(100)).unwrap().too_soon);
    flush(&mut ledger, &mut db);
    assert_eq!(db.users[&1].uploaded, 300, "still credited");
}

#[test]
fn the_peers_of_a_torrent_are_listed_for_the_api() {
    let site = site();
    let mut ledger = Ledger::default();
    let mut a = announce(1, 1, 1);
    a.event = AnnounceEvent::Completed;
    ledger.admit(&site, &a, at(100)).unwrap();
    ledger.admit(&site, &announce(2, 1, 2), at(150)).unwrap();
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
    let mut db = MemoryDb::default();
    let mut a = announce(1, 1, 1);
    a.uploaded = 100;
    first.admit(&site, &a, at(100)).unwrap();
    flush(&mut first, &mut db);

    // A new process: the peer's row comes back from the database.
    let mut ledger = Ledger::new(LedgerConfig::default());
    for (key, row) in &db.peers {
        ledger.restore(*key, row);
    }
    assert_eq!((ledger.accounts(), ledger.counts(1)), (1, (0, 1)));
    assert!(ledger.take_batch().is_empty(), "a restore writes nothing");
    a.event = AnnounceEvent::None;
    a.uploaded = 400;
    assert!(!ledger.admit(&site, &a, at(200)).unwrap().new_peer);
    assert_eq!(flush(&mut ledger, &mut db).credited.uploaded, 300);
    assert_eq!(db.torrents[&1].leechers, 1, "counted already");

    // An inactive row, or a newer one, replaces what was restored.
    let mut row = db.peers[&key(1, 1, 1)];
    row.uploaded = 1000;
    ledger.restore(key(1, 1, 1), &row);
    assert_eq!(ledger.accounts(), 1);
    row.active = false;
    ledger.restore(key(1, 1, 1), &row);
    assert_eq!((ledger.accounts(), ledger.counts(1)), (0, (0, 0)));
}

#[test]
fn snatches_and_a_users_peers_for_the_site_api() {
    let site = site();
    let mut ledger = Ledger::default();
    let mut a = announce(1, 1, 1);
    ledger.admit(&site, &a, at(100)).unwrap();
    let seeder = announce(1, 1, 2);
    let mut seeder = PrivateAnnounce { left: 0, ..seeder };
    seeder.event = AnnounceEvent::Started;
    ledger.admit(&site, &seeder, at(100)).unwrap();
    assert_eq!(ledger.user_counts(1), (1, 1));
    assert_eq!(ledger.user_counts(2), (0, 0));
    assert_eq!(ledger.snatches(1), 0);
    a.event = AnnounceEvent::Completed;
    a.left = 0;
    ledger.admit(&site, &a, at(200)).unwrap();
    assert_eq!((ledger.snatches(1), ledger.user_counts(1)), (1, (2, 0)));
}

#[test]
fn a_leecher_past_its_download_slots_is_accounted_but_kept_out() {
    let mut records = testing::records();
    records.groups[0].download_slots = Some(1);
    let site = Site::from_records(records, GlobalFactors::default());
    let counts = std::sync::Arc::new(crate::slots::LeechingCounts::default());
    let mut db = MemoryDb::default();
    // Two workers' ledgers share the counts.
    let mut one = Ledger::default().with_slots(counts.clone());
    let mut two = Ledger::default().with_slots(counts.clone());
    let first = one.admit(&site, &announce(1, 1, 1), at(100)).unwrap();
    assert!(!first.hidden);
    assert_eq!(counts.get(1), 1);
    let mut second = announce(1, 2, 2);
    let over = two.admit(&site, &second, at(100)).unwrap();
    assert!(over.hidden, "past the one slot");
    flush(&mut one, &mut db);
    flush(&mut two, &mut db);
    assert!(!db.peers[&key(1, 2, 2)].visible);
    // Not counted in its torrent's leechers, as UNIT3D-Announce counts.
    assert_eq!(db.torrents.get(&2).map_or(0, |t| t.leechers), 0);
    // Still accounted: its deltas are credited.
    second.event = AnnounceEvent::None;
    second.downloaded = 100;
    two.admit(&site, &second, at(110)).unwrap();
    assert_eq!(flush(&mut two, &mut db).credited.downloaded, 100);
    // The first completes: the slot is free, and the second takes it.
    let mut done = announce(1, 1, 1);
    done.event = AnnounceEvent::Completed;
    done.left = 0;
    one.admit(&site, &done, at(120)).unwrap();
    assert_eq!(counts.get(1), 0);
    let now_in = two.admit(&site, &second, at(130)).unwrap();
    assert!(!now_in.hidden);
    assert_eq!(counts.get(1), 1);
    flush(&mut two, &mut db);
    assert_eq!(db.torrents[&2].leechers, 1);
    // A stop gives it back; so would an expiry.
    second.event = AnnounceEvent::Stopped;
    two.admit(&site, &second, at(140)).unwrap();
    assert_eq!(counts.get(1), 0);
    // Another user's group has no limit.
    assert!(
        !one.admit(&site, &announce(2, 2, 3), at(150))
            .unwrap()
            .hidden
    );
}

/// Workers admitting one user's new leechers at the same instant cannot
/// pass its slots: each slot is taken in one atomic step.
#[test]
fn simultaneous_leechers_on_many_workers_never_pass_the_slots() {
    let mut records = testing::records();
    records.groups[0].download_slots = Some(2);
    for id in 2..=9 {
        records.torrents.push(torrent(id));
    }
    let site = std::sync::Arc::new(Site::from_records(records, GlobalFactors::default()));
    for _ in 0..50 {
        let counts = std::sync::Arc::new(crate::slots::LeechingCounts::default());
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(8));
        let visible: usize = (0..8u32)
            .map(|worker| {
                let (site, counts, barrier) = (site.clone(), counts.clone(), barrier.clone());
                std::thread::spawn(move || {
                    let mut ledger = Ledger::default().with_slots(counts);
                    barrier.wait();
                    let a = announce(1, worker + 2, 1);
                    usize::from(!ledger.admit(&site, &a, at(100)).unwrap().hidden)
                })
            })
            .collect::<Vec<_>>()
            .into_iter()
            .map(|t| t.join().unwrap())
            .sum();
        assert_eq!(visible, 2);
    }
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
        ledger.admit(&site, a, at(now)).unwrap_err().reason()
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
    // Across batches and workers, one user's rows an hour are bounded: a
    // passkey making up info-hashes adds at most that many to the table.
    let quota = Arc::new(crate::quota::UnregisteredQuota::new(3));
    let config = LedgerConfig {
        max_unregistered_per_batch: 100,
        ..LedgerConfig::default()
    };
    let mut one = Ledger::new(config).with_quota(quota.clone());
    let mut two = Ledger::new(config).with_quota(quota);
    for n in 0..10 {
        refused(&mut one, &announce(1, 100 + n, 1), 3600);
        refused(&mut two, &announce(1, 200 + n, 1), 3601);
    }
    refused(&mut two, &announce(2, 300, 1), 3602);
    let noted = one.take_batch().unregistered.len() + two.take_batch().unregistered.len();
    assert_eq!(noted, 3 + 1);
    assert_eq!(one.unregistered_dropped() + two.unregistered_dropped(), 17);
    refused(&mut one, &announce(1, 400, 1), 7200);
    assert_eq!(one.take_batch().unregistered.len(), 1, "a new hour");
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
    let alone = ledger.admit(&site, &seeding, at(100)).unwrap();
    assert!(
        !alone.seed_list_refused && !alone.leech_list_refused,
        "no leechers: no lists"
    );
    // User 1 leeches torrent 1: a seed list (its one a minute); no other
    // leecher, no leech list.
    let first = ledger.admit(&site, &announce(1, 1, 1), at(100)).unwrap();
    assert!(!first.seed_list_refused && !first.leech_list_refused);
    let mut seeding2 = announce(2, 2, 1);
    seeding2.left = 0;
    other.admit(&site, &seeding2, at(100)).unwrap();
    let second = other.admit(&site, &announce(1, 2, 1), at(101)).unwrap();
    assert!(
        second.seed_list_refused,
        "the minute's one seed list is spent"
    );
    assert!(!second.leech_list_refused);
    // Leech lists: user 1's second peer on torrent 1 sees a leecher.
    let third = ledger.admit(&site, &announce(1, 1, 2), at(102)).unwrap();
    assert!(third.seed_list_refused && !third.leech_list_refused);
    // The seeder now sees leechers: its leech lists count for user 2.
    seeding.event = AnnounceEvent::None;
    let seeder_again = ledger.admit(&site, &seeding, at(2000)).unwrap();
    assert!(!seeder_again.seed_list_refused && !seeder_again.leech_list_refused);
    // Nothing is counted without limits.
    let mut free = Ledger::new(LedgerConfig::default());
    for peer in 1..=3 {
        let a = free.admit(&site, &announce(1, 1, peer), at(100)).unwrap();
        assert!(!a.seed_list_refused && !a.leech_list_refused);
    }
}
