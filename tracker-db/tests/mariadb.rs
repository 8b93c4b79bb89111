//! tracker-db against a real MariaDB server (tests/mariadb.sh runs one;
//! TRACKER_TEST_MYSQL_URL names it). Each test has a database of its own.

// clippy.toml lets #[test] functions unwrap and panic; the fixtures in
// support/ are plain functions of this test crate, and may as well.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::net::IpAddr;
use std::time::{Duration, Instant};
use support::*;
use tracker_db::{
    check_privileges, flush, last_sequence, load_with_report, DbConfig, DbErrorKind, FlushOutcome,
    Flusher, FlusherConfig, FlusherHandle, UnregisteredTable,
};
use tracker_private::{
    Batch, Credit, CreditRules, Group, HistoryRow, PeerKey, Torrent, TorrentRow, TorrentStatus,
    UnregisteredRow, User, UserRow,
};
use tracker_proto::InfoHash;

const MAX_ROWS: usize = 1000;
const RULES: CreditRules = CreditRules {
    max_seedtime_step: 7200,
    inactive_peer_ttl: 1_814_400,
    max_upload_rate: 0,
};

#[test]
fn load_reads_the_site_as_unit3d_announce_does() {
    let db = TestDb::new();
    db.exec(
        "INSERT INTO `groups` (id, name, slug, position, download_slots, color, icon, \
           is_immune, is_freeleech, is_double_upload, can_chat, can_comment, can_invite, \
           can_request) VALUES \
         (1, 'User', 'user', 1, NULL, '#fff', 'i', 0, 0, 0, 1, 1, 1, 1), \
         (2, 'VIP', 'vip', 2, 5, '#fff', 'i', 1, 1, 1, 1, 1, 1, 1), \
         (3, 'Odd', 'odd', 3, -2, '#fff', 'i', 0, 0, 0, 1, 1, 1, 1)",
    );
    db.seed(1, 0);
    db.exec("UPDATE users SET group_id = 2, is_donor = 1, can_download = 0 WHERE id = 1");
    db.user(2);
    db.exec("UPDATE users SET deleted_at = NOW() WHERE id = 2");
    // Passkeys no announce can name: 31 characters, and a '-'.
    db.user(3);
    db.exec("UPDATE users SET passkey = REPEAT('a', 31) WHERE id = 3");
    db.user(4);
    db.exec(
        "UPDATE users SET passkey = CONCAT(REPEAT('a', 31), '-'), is_lifetime = 1 WHERE id = 4",
    );
    db.user(5);
    db.exec("UPDATE users SET is_lifetime = 1 WHERE id = 5");

    // Info-hash A: a deleted approved one, a pending one, an approved one
    // (12 wins); B: two deleted ones (20 wins); C: pending and rejected
    // (30, the lowest not deleted, wins).
    let hash = |c: u8| format!("{:02x}", c).repeat(20);
    db.exec(&format!(
        "INSERT INTO torrents (id, name, description, file_name, num_file, size, user_id, \
           status, free, doubleup, deleted_at, info_hash) VALUES \
         (10, 'a', '', 'f', 1, 1, 1, 1, 0, 0, NOW(), UNHEX('{a}')), \
         (11, 'a', '', 'f', 1, 1, 1, 0, 0, 0, NULL, UNHEX('{a}')), \
         (12, 'a', '', 'f', 1, 1, 1, 1, 25, 1, NULL, UNHEX('{a}')), \
         (13, 'a', '', 'f', 1, 1, 1, 1, 0, 0, NULL, UNHEX('{a}')), \
         (21, 'b', '', 'f', 1, 1, 1, 1, 0, 0, NOW(), UNHEX('{b}')), \
         (20, 'b', '', 'f', 1, 1, 1, 2, -5, 0, NOW(), UNHEX('{b}')), \
         (31, 'c', '', 'f', 1, 1, 1, 2, 0, 0, NULL, UNHEX('{c}')), \
         (30, 'c', '', 'f', 1, 1, 1, 0, 150, 0, NULL, UNHEX('{c}'))",
        a = hash(0xaa),
        b = hash(0xbb),
        c = hash(0xcc),
    ));
    db.exec(
        "INSERT INTO featured_torrents (user_id, torrent_id) VALUES (1, 12), (1, 12); \
         INSERT INTO freeleech_tokens (user_id, torrent_id) VALUES (1, 30), (5, 12), (1, 30); \
         INSERT INTO personal_freeleeches (user_id) VALUES (5); \
         INSERT INTO blacklist_clients (name, peer_id_prefix) VALUES ('Bad', '-BD'), ('Worse', '-WR')",
    );

    let (mut site, report) = load_with_report(&mut db.conn()).unwrap();
    assert_eq!(report.bad_passkeys, 2);
    site.users.sort_by_key(|u| u.id);
    let key = |id| tracker_private::Passkey::parse(passkey(id).as_bytes()).unwrap();
    assert_eq!(
        site.users,
        vec![
            User {
                id: 1,
                group_id: 2,
                passkey: key(1),
                can_download: false,
                is_donor: true,
                is_lifetime: false
            },
            User {
                id: 5,
                group_id: 1,
                passkey: key(5),
                can_download: true,
                is_donor: false,
                is_lifetime: true
            },
        ]
    );
    site.groups.sort_by_key(|g| g.id);
    assert_eq!(
        site.groups,
        vec![
            Group {
                id: 1,
                slug: "user".into(),
                download_slots: None,
                is_immune: false,
                is_freeleech: false,
                is_double_upload: false
            },
            Group {
                id: 2,
                slug: "vip".into(),
                download_slots: Some(5),
                is_immune: true,
                is_freeleech: true,
                is_double_upload: true
            },
            Group {
                id: 3,
                slug: "odd".into(),
                download_slots: Some(0),
                is_immune: false,
                is_freeleech: false,
                is_double_upload: false
            },
        ]
    );
    site.torrents.sort_by_key(|t| t.id);
    let torrent = |id, c: u8, status, is_deleted, download_factor, upload_factor| Torrent {
        id,
        info_hash: InfoHash([c; 20]),
        status,
        is_deleted,
        download_factor,
        upload_factor,
        // The seeded rows leave times_completed at its default.
        times_completed: 0,
    };
    assert_eq!(
        site.torrents,
        vec![
            torrent(12, 0xaa, TorrentStatus::Approved, false, 75, 200),
            torrent(20, 0xbb, TorrentStatus::Rejected, true, 100, 100),
            torrent(30, 0xcc, TorrentStatus::Pending, false, 0, 100),
        ]
    );
    assert_eq!(site.featured, vec![12]);
    assert_eq!(site.tokens, vec![(1, 30), (5, 12)]);
    assert_eq!(site.personal_freeleech, vec![5]);
    assert_eq!(site.blacklist, vec![b"-BD".to_vec(), b"-WR".to_vec()]);
}

#[test]
fn a_flush_applies_once_per_sequence_number() {
    let db = TestDb::new();
    db.seed(2, 2);
    let mut conn = db.conn();
    assert_eq!(last_sequence(&mut conn, "t1").unwrap(), 0);

    let mut batch = credit(&[1, 2], &[1, 2], 1000, T0);
    let v6: IpAddr = "2001:db8::7".parse().unwrap();
    batch.settled.peers.insert(
        PeerKey {
            user_id: 2,
            torrent_id: 1,
            peer_id: peer_id(6),
        },
        peer(v6, 5, T0),
    );
    // Rows of a user that does not exist (deleted on the site) are left out.
    batch.settled.users.insert(
        99,
        UserRow {
            uploaded: 7,
            downloaded: 7,
        },
    );
    batch.settled.history.insert((99, 1), history(7, 0, T0));
    let rows = batch.rows();

    let outcome = flush(&mut conn, "t1", 1, &batch, &RULES, MAX_ROWS).unwrap();
    assert_eq!(
        outcome,
        FlushOutcome::Applied {
            rows: rows - 2,
            skipped: 2,
            superseded: 0,
            credited: Credit::default(),
        }
    );
    // The same number again, as after a lost acknowledgement: nothing.
    assert_eq!(
        flush(&mut conn, "t1", 1, &batch, &RULES, MAX_ROWS).unwrap(),
        FlushOutcome::AlreadyApplied
    );
    assert_eq!(last_sequence(&mut conn, "t1").unwrap(), 1);

    let totals = || -> Vec<(u32, u64, u64)> {
        db.rows("SELECT id, uploaded, downloaded FROM users ORDER BY id")
    };
    assert_eq!(totals(), vec![(1, 1000, 500), (2, 1000, 500)]);
    let torrents: Vec<(u32, i64, i64, i64, i64, u64)> = db.rows(
        "SELECT id, seeders, leechers, times_completed, balance, UNIX_TIMESTAMP(updated_at) \
         FROM torrents ORDER BY id",
    );
    assert_eq!(
        torrents,
        vec![(1, 1, 0, 1, 1000, T0), (2, 1, 0, 1, 1000, T0)]
    );
    let ips: Vec<(u32, u32, Vec<u8>, Vec<u8>)> =
        db.rows("SELECT user_id, torrent_id, peer_id, ip FROM peers ORDER BY 1, 2, 3");
    assert_eq!(ips.len(), 5);
    assert_eq!(ips[0].3, vec![192, 0, 2, 1]);
    let v6_row = ips.iter().find(|r| r.2 == peer_id(6).0.to_vec()).unwrap();
    assert_eq!(
        v6_row.3,
        "2001:db8::7"
            .parse::<std::net::Ipv6Addr>()
            .unwrap()
            .octets()
    );

    // The next number applies, adding to the totals; created_at stays.
    let later = credit(&[1], &[1], 10, T0 + 60);
    assert!(matches!(
        flush(&mut conn, "t1", 2, &later, &RULES, MAX_ROWS).unwrap(),
        FlushOutcome::Applied { .. }
    ));
    assert_eq!(totals(), vec![(1, 1010, 505), (2, 1000, 500)]);
    let peer_times: (u64, u64, u64) = db.one(
        "SELECT UNIX_TIMESTAMP(created_at), UNIX_TIMESTAMP(updated_at), uploaded FROM peers \
         WHERE user_id = 1 AND torrent_id = 1",
    );
    assert_eq!(peer_times, (T0, T0 + 60, 10));
    let history: (u64, u64, u64) = db.one(
        "SELECT uploaded, actual_uploaded, client_uploaded FROM history \
         WHERE user_id = 1 AND torrent_id = 1",
    );
    assert_eq!(history, (1010, 1010, 10));
    // An older number is refused as applied.
    assert_eq!(
        flush(&mut conn, "t1", 1, &later, &RULES, MAX_ROWS).unwrap(),
        FlushOutcome::AlreadyApplied
    );
    assert_eq!(totals(), vec![(1, 1010, 505), (2, 1000, 500)]);
}

#[test]
fn history_keeps_seedtime_completion_and_immunity_as_unit3d_does() {
    let db = TestDb::new();
    db.seed(1, 2);
    let mut conn = db.conn();
    let at = |seq: u64, row: HistoryRow, torrent: u32| {
        let mut batch = Batch::default();
        batch.settled.history.insert((1, torrent), row);
        let outcome = flush(&mut db.conn(), "h", seq, &batch, &RULES, MAX_ROWS).unwrap();
        assert!(matches!(outcome, FlushOutcome::Applied { rows: 1, .. }));
    };
    let row = |seedtime, immune, completed_at| HistoryRow {
        immune,
        completed_at,
        ..history(0, seedtime, T0)
    };
    at(1, row(100, true, None), 1);
    at(2, row(50, false, Some(T0)), 1);
    at(3, row(25, true, Some(T0 + 3600)), 1);
    at(4, row(0, true, None), 1);
    let (seedtime, immune, completed): (u64, u8, String) = db.one(
        "SELECT seedtime, immune, CAST(completed_at AS CHAR) FROM history WHERE torrent_id = 1",
    );
    assert_eq!(seedtime, 175);
    // Immunity lost stays lost; the first completion stays, in UTC.
    assert_eq!(immune, 0);
    assert_eq!(completed, "2023-11-14 22:13:20");
    // A row first written without immunity never gains it.
    at(5, row(0, false, None), 2);
    at(6, row(0, true, None), 2);
    let immune: u8 = db.one("SELECT immune FROM history WHERE torrent_id = 2");
    assert_eq!(immune, 0);
    assert_eq!(last_sequence(&mut conn, "h").unwrap(), 6);
}

#[test]
fn statements_split_under_the_row_limit() {
    let db = TestDb::new();
    db.seed(1, 30);
    let torrents: Vec<u32> = (1..=30).collect();
    let batch = credit(&[1], &torrents, 3, T0);
    let outcome = flush(&mut db.conn(), "s", 1, &batch, &RULES, 7).unwrap();
    assert_eq!(
        outcome,
        FlushOutcome::Applied {
            rows: batch.rows(),
            skipped: 0,
            superseded: 0,
            credited: Credit::default(),
        }
    );
    let (history, balance): (u64, i64) =
        db.one("SELECT (SELECT COUNT(*) FROM history), (SELECT SUM(balance) FROM torrents)");
    assert_eq!((history, balance), (30, 90));
}

#[test]
fn two_trackers_flushing_the_same_rows_at_once_count_every_delta_once() {
    let db = TestDb::new();
    let users: Vec<u32> = (1..=40).collect();
    let torrents: Vec<u32> = (1..=10).collect();
    db.seed(40, 10);
    const FLUSHES: u64 = 15;
    let run = |tracker: &'static str| {
        let (users, torrents, db) = (&users, &torrents, &db);
        move || {
            let mut conn = db.conn();
            for seq in 1..=FLUSHES {
                let batch = credit(users, torrents, 1, T0 + seq);
                // Each number twice: the second must be a no-op.
                for _ in 0..2 {
                    loop {
                        match flush(&mut conn, tracker, seq, &batch, &RULES, 50) {
                            Ok(_) => break,
                            Err(e) if e.is_retryable() => conn = db.conn(),
                            Err(e) => panic!("{e}"),
                        }
                    }
                }
            }
        }
    };
    std::thread::scope(|s| {
        s.spawn(run("a"));
        s.spawn(run("b"));
    });
    let (up, min_up, history_up, balance): (u64, u64, u64, i64) = db.one(
        "SELECT (SELECT SUM(uploaded) FROM users), (SELECT MIN(uploaded) FROM users), \
           (SELECT SUM(uploaded) FROM history), (SELECT SUM(balance) FROM torrents)",
    );
    assert_eq!(up, 2 * FLUSHES * 40);
    assert_eq!(min_up, 2 * FLUSHES);
    assert_eq!(history_up, 2 * FLUSHES * 400);
    assert_eq!(balance, 2 * FLUSHES as i64 * 10);
    let sequences: Vec<(String, u64)> =
        db.rows("SELECT tracker_id, sequence FROM tracker_flushes ORDER BY 1");
    assert_eq!(
        sequences,
        vec![("a".into(), FLUSHES), ("b".into(), FLUSHES)]
    );
}

#[test]
fn a_missing_table_is_named_and_not_retryable() {
    let db = TestDb::new();
    db.seed(1, 1);
    db.exec("DROP TABLE history");
    let error = flush(
        &mut db.conn(),
        "x",
        1,
        &credit(&[1], &[1], 1, T0),
        &RULES,
        MAX_ROWS,
    )
    .unwrap_err();
    assert_eq!(error.kind(), DbErrorKind::Schema, "{error}");
    assert!(!error.is_retryable());
    assert!(error.to_string().contains("history"), "{error}");
    // Nothing of the failed flush stayed.
    let up: u64 = db.one("SELECT uploaded FROM users WHERE id = 1");
    assert_eq!(up, 0);
}

fn fast(url: String, tracker_id: &str) -> FlusherConfig {
    let mut config = FlusherConfig::new(url, tracker_id);
    config.interval = Duration::from_millis(50);
    config.backoff_min = Duration::from_millis(20);
    config.backoff_max = Duration::from_millis(100);
    config.db.connect_timeout = Duration::from_secs(2);
    config.db.io_timeout = Duration::from_secs(5);
    config
}

fn wait_flushed(handle: &FlusherHandle) {
    wait_until(Duration::from_secs(10), "everything is flushed", || {
        handle.stats().pending_rows == 0
    });
}

fn user_totals(db: &TestDb) -> Vec<(u32, u64)> {
    db.rows("SELECT id, uploaded FROM users ORDER BY id")
}

#[test]
fn the_flusher_thread_writes_what_it_is_given() {
    let db = TestDb::new();
    db.seed(3, 2);
    let handle = Flusher::spawn(fast(db.url.clone(), "e2e"), Vec::new()).unwrap();
    for i in 0..20 {
        handle.submit(credit(&[1, 2, 3], &[1, 2], 5, T0 + i));
    }
    wait_flushed(&handle);
    assert_eq!(user_totals(&db), vec![(1, 100), (2, 100), (3, 100)]);
    let stats = handle.stats();
    assert!(stats.flushes_applied >= 1, "{stats:?}");
    assert_eq!(stats.failures, 0);
    assert!(stats.reachable);
    assert!(stats.last_success_unix > 0);
    let peer_up: u64 = db.one("SELECT MAX(uploaded) FROM peers");
    assert_eq!(peer_up, 5);
    let leftover = handle.stop(Instant::now() + Duration::from_secs(5));
    assert!(leftover.is_empty());
}

#[test]
fn a_bad_url_fails_the_start_without_showing_the_password() {
    let db = TestDb::new();
    let url = db.url.replacen("tracker_test:", "tracker_test:x", 1);
    let password = url
        .trim_start_matches("mysql://tracker_test:")
        .split('@')
        .next()
        .unwrap()
        .to_owned();
    let error = Flusher::spawn(fast(url, "bad"), Vec::new()).err().unwrap();
    assert_eq!(error.kind(), DbErrorKind::AccessDenied, "{error}");
    assert!(!error.to_string().contains(&password), "{error}");
    assert!(error.to_string().contains("tracker_test:***@"), "{error}");
}

#[test]
fn an_outage_holds_the_deltas_and_they_land_once_it_ends() {
    let db = TestDb::new();
    db.seed(2, 1);
    let proxy = Proxy::start();
    let handle = Flusher::spawn(fast(proxy.url(&db.url), "outage"), Vec::new()).unwrap();
    handle.submit(credit(&[1], &[1], 10, T0));
    wait_flushed(&handle);

    proxy.cut();
    for i in 0..10 {
        handle.submit(credit(&[1, 2], &[1], 1, T0 + i));
        std::thread::sleep(Duration::from_millis(20));
    }
    wait_until(
        Duration::from_secs(10),
        "the flusher sees the outage",
        || {
            let stats = handle.stats();
            stats.consecutive_failures >= 3 && !stats.reachable
        },
    );
    // Merged per key while it waits: 2 users, 1 torrent, 2 history rows
    // and 2 peers in the batch in flight (numbered at the first failed
    // try), the same 7 keys in the one that gathers the rest.
    let pending = handle.stats().pending_rows;
    assert!(pending == 7 || pending == 14, "{pending}");
    assert_eq!(user_totals(&db), vec![(1, 10), (2, 0)]);

    proxy.restore();
    wait_flushed(&handle);
    assert_eq!(user_totals(&db), vec![(1, 20), (2, 10)]);
    let stats = handle.stats();
    assert!(
        stats.reachable && stats.consecutive_failures == 0,
        "{stats:?}"
    );
    let balance: i64 = db.one("SELECT balance FROM torrents WHERE id = 1");
    assert_eq!(balance, 10 + 10);
    assert!(handle
        .stop(Instant::now() + Duration::from_secs(5))
        .is_empty());
}

/// The database thread held up (here: connecting to a server that never
/// answers, for its timeouts) takes no batch meanwhile; what the workers
/// submit waits in the channel only up to `max_pending_entries`, past
/// which it is dropped and counted, so memory stays bounded however long
/// the thread is held.
#[test]
fn batches_submitted_while_the_thread_is_held_up_are_bounded() {
    let db = TestDb::new();
    db.seed(1, 1);
    let proxy = Proxy::start();
    let mut config = fast(proxy.url(&db.url), "held");
    config.db.connect_timeout = Duration::from_secs(5);
    config.db.io_timeout = Duration::from_secs(5);
    config.max_pending_entries = 50;
    config.max_pending_entries_per_user = 50;
    let handle = Flusher::spawn(config, Vec::new()).unwrap();
    proxy.hang();
    // One batch to start a flush that will hang on its connection.
    handle.submit(credit(&[1], &[1], 1, T0));
    std::thread::sleep(Duration::from_millis(300));
    for i in 0..200u32 {
        let mut batch = Batch::default();
        batch.unregistered.insert(
            (1, InfoHash([i as u8; 20])),
            UnregisteredRow {
                created_at: T0,
                updated_at: T0,
            },
        );
        handle.submit(batch);
    }
    let stats = handle.stats();
    assert!(stats.pending_rows <= 3 * 50, "{stats:?}");
    assert!(stats.entries_dropped >= 200 - 2 * 50, "{stats:?}");
    proxy.restore();
    drop(handle);
}

#[test]
fn a_lost_commit_acknowledgement_is_not_applied_twice() {
    let db = TestDb::new();
    db.seed(1, 1);
    let proxy = Proxy::start();
    let handle = Flusher::spawn(fast(proxy.url(&db.url), "lost-ack"), Vec::new()).unwrap();
    proxy.swallow_next_commit_ack();
    handle.submit(credit(&[1], &[1], 100, T0));
    wait_flushed(&handle);
    assert_eq!(proxy.swallowed(), 1);
    let stats = handle.stats();
    assert_eq!(stats.flushes_already_applied, 1, "{stats:?}");
    assert_eq!(stats.flushes_applied, 0, "{stats:?}");
    assert!(stats.failures >= 1, "{stats:?}");
    assert_eq!(user_totals(&db), vec![(1, 100)]);
    let (history, balance): (u64, i64) = db
        .one("SELECT (SELECT uploaded FROM history), (SELECT balance FROM torrents WHERE id = 1)");
    assert_eq!((history, balance), (100, 100));

    // And the flushes after it go on normally.
    handle.submit(credit(&[1], &[1], 1, T0 + 1));
    wait_flushed(&handle);
    assert_eq!(user_totals(&db), vec![(1, 101)]);
    assert!(handle
        .stop(Instant::now() + Duration::from_secs(5))
        .is_empty());
}

#[test]
fn what_a_stop_leaves_lands_once_after_a_restart() {
    let db = TestDb::new();
    db.seed(2, 1);
    let proxy = Proxy::start();
    let handle = Flusher::spawn(fast(proxy.url(&db.url), "restart"), Vec::new()).unwrap();
    proxy.cut();
    handle.submit(credit(&[1], &[1], 7, T0));
    wait_until(Duration::from_secs(10), "a flush fails", || {
        handle.stats().failures >= 1
    });
    handle.submit(credit(&[2], &[1], 3, T0 + 1));
    let leftover = handle.stop(Instant::now() + Duration::from_millis(200));
    // The batch that was tried keeps its number; the later one gets the
    // next.
    assert_eq!(leftover.len(), 2, "{leftover:?}");
    assert_eq!(leftover[0].0, Some(1));
    assert_eq!(leftover[1].0, Some(2));
    assert_eq!(user_totals(&db), vec![(1, 0), (2, 0)]);

    let handle = Flusher::spawn(fast(db.url.clone(), "restart"), leftover).unwrap();
    wait_flushed(&handle);
    assert_eq!(user_totals(&db), vec![(1, 7), (2, 3)]);
    assert_eq!(handle.stats().last_sequence, 2);
    assert!(handle
        .stop(Instant::now() + Duration::from_secs(5))
        .is_empty());
}

#[test]
fn leftover_batches_the_database_already_has_are_dropped() {
    let db = TestDb::new();
    db.seed(2, 1);
    // Flush 5 committed, but the tracker stopped before hearing so.
    let applied = credit(&[1], &[1], 50, T0);
    flush(&mut db.conn(), "again", 5, &applied, &RULES, MAX_ROWS).unwrap();
    let newer = credit(&[2], &[1], 4, T0 + 1);
    let leftover = vec![(Some(5), applied), (None, newer)];
    let handle = Flusher::spawn(fast(db.url.clone(), "again"), leftover).unwrap();
    wait_flushed(&handle);
    let stats = handle.stats();
    assert_eq!(stats.leftover_dropped, 1, "{stats:?}");
    assert_eq!(stats.last_sequence, 6, "{stats:?}");
    assert_eq!(user_totals(&db), vec![(1, 50), (2, 4)]);
    assert!(handle
        .stop(Instant::now() + Duration::from_secs(5))
        .is_empty());
}

#[test]
fn torrent_rows_alone_change_counts_only() {
    let db = TestDb::new();
    db.seed(1, 1);
    let mut batch = Batch::default();
    batch.settled.torrents.insert(
        1,
        TorrentRow {
            seeders: 2,
            leechers: 3,
            times_completed: 1,
            balance: -5,
            updated_at: T0,
        },
    );
    flush(&mut db.conn(), "c", 1, &batch, &RULES, MAX_ROWS).unwrap();
    batch.settled.torrents.get_mut(&1).unwrap().seeders = -1;
    flush(&mut db.conn(), "c", 2, &batch, &RULES, MAX_ROWS).unwrap();
    let counts: (i64, i64, i64, i64) =
        db.one("SELECT seeders, leechers, times_completed, balance FROM torrents WHERE id = 1");
    assert_eq!(counts, (1, 6, 2, -10));
}

/// A user's client announcing torrents the site does not serve: one row
/// per (info-hash, user), the first sighting kept and the last assigned;
/// rows of a user deleted meanwhile are left out.
#[test]
fn unregistered_info_hashes_are_written_as_unit3d_announce_writes_them() {
    let db = TestDb::new();
    db.seed(2, 1);
    let mut conn = db.conn();
    assert!(tracker_db::has_table(&mut conn, "unregistered_info_hashes").unwrap());
    assert!(!tracker_db::has_table(&mut conn, "no_such_table").unwrap());
    let row = |created_at, updated_at| UnregisteredRow {
        created_at,
        updated_at,
    };
    let mut batch = Batch::default();
    batch
        .unregistered
        .insert((1, InfoHash([0xee; 20])), row(T0, T0 + 5));
    batch
        .unregistered
        .insert((2, InfoHash([0xee; 20])), row(T0 + 1, T0 + 1));
    batch
        .unregistered
        .insert((99, InfoHash([0xee; 20])), row(T0, T0));
    assert_eq!(
        flush(&mut conn, "t1", 1, &batch, &RULES, MAX_ROWS).unwrap(),
        FlushOutcome::Applied {
            rows: 2,
            skipped: 1,
            superseded: 0,
            credited: Credit::default(),
        }
    );
    let mut later = Batch::default();
    later
        .unregistered
        .insert((1, InfoHash([0xee; 20])), row(T0 + 60, T0 + 60));
    flush(&mut conn, "t1", 2, &later, &RULES, MAX_ROWS).unwrap();
    let rows: Vec<(u32, Vec<u8>, u64, u64)> = db.rows(
        "SELECT user_id, info_hash, UNIX_TIMESTAMP(created_at), UNIX_TIMESTAMP(updated_at) \
         FROM unregistered_info_hashes ORDER BY user_id",
    );
    assert_eq!(
        rows,
        vec![
            (1, vec![0xee; 20], T0, T0 + 60),
            (2, vec![0xee; 20], T0 + 1, T0 + 1)
        ]
    );
}

/// Sums past a column's range saturate: one client's absurd totals must not
/// fail the flush (and every flush behind it, for good).
#[test]
fn sums_past_a_columns_range_saturate_instead_of_failing_the_flush() {
    let db = TestDb::new();
    db.seed(1, 1);
    let mut conn = db.conn();
    let huge = u64::MAX - 10;
    let mut batch = credit(&[1], &[1], huge, T0);
    batch.settled.torrents.get_mut(&1).unwrap().balance = i64::MAX - 5;
    flush(&mut conn, "t1", 1, &batch, &RULES, MAX_ROWS).unwrap();
    let mut again = credit(&[1], &[1], huge, T0 + 1);
    again.settled.torrents.get_mut(&1).unwrap().balance = i64::MAX - 5;
    assert!(matches!(
        flush(&mut conn, "t1", 2, &again, &RULES, MAX_ROWS).unwrap(),
        FlushOutcome::Applied { .. }
    ));
    let user: (u64, u64) = db.one("SELECT uploaded, downloaded FROM users WHERE id = 1");
    assert_eq!(user, (u64::MAX, huge / 2 * 2));
    let history: (u64, u64) =
        db.one("SELECT uploaded, actual_uploaded FROM history WHERE user_id = 1");
    assert_eq!(history, (u64::MAX, u64::MAX));
    let balance: i64 = db.one("SELECT balance FROM torrents WHERE id = 1");
    assert_eq!(balance, i64::MAX);
    // And down: a negative balance saturates at the bottom.
    let mut down = Batch::default();
    down.settled.torrents.insert(
        1,
        TorrentRow {
            balance: i64::MIN,
            updated_at: T0 + 2,
            ..TorrentRow::default()
        },
    );
    flush(&mut conn, "t1", 3, &down, &RULES, MAX_ROWS).unwrap();
    flush(&mut conn, "t1", 4, &down, &RULES, MAX_ROWS).unwrap();
    let balance: i64 = db.one("SELECT balance FROM torrents WHERE id = 1");
    assert_eq!(balance, i64::MIN);
}

/// The grants deploy/unit3d/grants.sql lists are exactly enough: the
/// start's check passes and every kind of row is written; one missing is
/// named by the check, where the flush would fail later on every try. The
/// schema's `apikeys` and `files` reference users and torrents as 88 and
/// 17 of a site's tables do, with no grant on them: a statement form that
/// needed one fails here.
#[test]
fn the_documented_grants_allow_every_flush_and_a_missing_one_is_named() {
    let db = TestDb::new();
    db.seed(1, 1);
    let user = GrantedUser::new(&db);
    let mut conn = DbConfig::new(&user.url).connect().unwrap();
    assert_eq!(
        check_privileges(&mut conn, true).unwrap(),
        Some(UnregisteredTable::Writable)
    );
    let batch = every_kind_of_row(&db);
    let outcome = flush(&mut conn, "granted", 1, &batch, &RULES, MAX_ROWS).unwrap();
    assert!(
        matches!(outcome, FlushOutcome::Applied { skipped: 0, .. }),
        "{outcome:?}"
    );
    let written: (u64, u64, u32, u64, u64) = db.one(
        "SELECT (SELECT uploaded FROM users WHERE id = 1), \
           (SELECT actual_uploaded FROM history WHERE user_id = 1), \
           (SELECT times_completed FROM torrents WHERE id = 1), \
           (SELECT COUNT(*) FROM peers WHERE NOT active), \
           (SELECT COUNT(*) FROM unregistered_info_hashes)",
    );
    assert_eq!(written, (700, 700, 1, 1, 1));

    // The grants as docs/OPERATIONS.md listed them before: history
    // writable but not readable. The check names the column, as the
    // flushes' every failure did.
    db.exec(&format!(
        "REVOKE SELECT ON `{}`.`history` FROM {}",
        db.name, user.name
    ));
    let mut conn = DbConfig::new(&user.url).connect().unwrap();
    let error = check_privileges(&mut conn, true).unwrap_err();
    assert_eq!(error.kind(), DbErrorKind::AccessDenied, "{error}");
    assert!(!error.is_retryable());
    let text = error.to_string();
    assert!(
        text.contains("SELECT command denied") && text.contains("history"),
        "{text}"
    );
    db.exec(&format!(
        "GRANT SELECT ON `{}`.`history` TO {}",
        db.name, user.name
    ));

    // A table this user may not see is a missing grant, not a missing
    // table; one that is not there is told apart.
    db.exec(&format!(
        "REVOKE SELECT, INSERT, UPDATE ON `{}`.`unregistered_info_hashes` FROM {}",
        db.name, user.name
    ));
    let mut conn = DbConfig::new(&user.url).connect().unwrap();
    let error = check_privileges(&mut conn, true).unwrap_err();
    assert_eq!(error.kind(), DbErrorKind::AccessDenied, "{error}");
    assert!(
        error.to_string().contains("unregistered_info_hashes"),
        "{error}"
    );
    // Not writing it, the tracker needs nothing on it, though its foreign
    // key references users: as with apikeys and files, the statements
    // that change users rows ask nothing of the tables referencing them.
    assert_eq!(check_privileges(&mut conn, false).unwrap(), None);
    let outcome = flush(
        &mut conn,
        "granted",
        2,
        &credit(&[1], &[1], 10, T0 + 300),
        &RULES,
        MAX_ROWS,
    )
    .unwrap();
    assert!(
        matches!(outcome, FlushOutcome::Applied { skipped: 0, .. }),
        "{outcome:?}"
    );
    db.exec("DROP TABLE unregistered_info_hashes");
    assert_eq!(
        check_privileges(&mut db.conn(), true).unwrap(),
        Some(UnregisteredTable::Missing)
    );
    // Nothing was written or left locked by the checks.
    assert_eq!(last_sequence(&mut db.conn(), "granted").unwrap(), 2);
}

/// deploy/unit3d/recount.sql, run once at a switch from UNIT3D-Announce
/// (which leaves the rows of peers it forgot active, their counts already
/// taken off): the stale rows made inactive, and every torrent's counts
/// those of its active visible rows.
#[test]
fn the_switchover_recount_makes_the_counts_those_of_the_rows() {
    let db = TestDb::new();
    db.seed(3, 2);
    db.exec(
        "INSERT INTO `groups` (id, name, slug, position, color, icon, can_chat, \
             can_comment, can_invite, can_request) VALUES (1, 'user', 'user', 1, '#fff', 'i', \
             1, 1, 1, 1)",
    );
    let peer = |user: u32, torrent: u32, seeder: u8, visible: u8, age: u32| {
        db.exec(&format!(
            "INSERT INTO peers (peer_id, ip, port, agent, uploaded, downloaded, `left`, seeder, \
             created_at, updated_at, torrent_id, user_id, active, visible) VALUES \
             (UNHEX('{}'), 0x7f000001, 1, 'a', 0, 0, 0, {seeder}, NOW(), \
             NOW() - INTERVAL {age} SECOND, {torrent}, {user}, 1, {visible})",
            hex(&peer_id(user as u8).0)
        ))
    };
    peer(1, 1, 1, 1, 10);
    peer(2, 1, 0, 1, 10);
    peer(3, 1, 0, 0, 10); // a leecher past its download slots
    peer(1, 2, 1, 1, 9000); // forgotten by UNIT3D-Announce, still active
    db.exec("UPDATE torrents SET seeders = 7, leechers = -1");
    let sql = std::fs::read_to_string(concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../deploy/unit3d/recount.sql"
    ))
    .unwrap();
    db.exec(&sql);
    let counts: Vec<(u32, i32, i32)> =
        db.rows("SELECT id, seeders, leechers FROM torrents ORDER BY id");
    assert_eq!(counts, vec![(1, 1, 1), (2, 0, 0)]);
    let stale: u8 = db.one("SELECT active FROM peers WHERE torrent_id = 2");
    assert_eq!(stale, 0);
}
