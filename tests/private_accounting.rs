//! Private mode's accounting with two real trackers on one real MariaDB
//! (tests/mariadb.sh), as an operator's failover runs it: each byte
//! credited once whichever tracker flushes first, torrents' counts those
//! of the peers' rows whatever either tracker expires, a peer back after
//! the tracker was down past the active TTL credited every byte, a loop of
//! announces gaining nothing over the upload bound, and the grants: one
//! missing stops the start naming it, one revoked while serving is an
//! error counted apart.

mod support;

use std::time::{Duration, Instant};

use support::private::{announce_as, config, config_with};
use support::site_db::{passkey, server_url, SiteDb};
use support::tempfile_path::TempPath;
use support::{free_port, Tracker};
use tracker_proto::AnnounceEvent;

const STARTED: AnnounceEvent = AnnounceEvent::Started;
const NONE: AnnounceEvent = AnnounceEvent::None;
const STOPPED: AnnounceEvent = AnnounceEvent::Stopped;

/// A private tracker of one worker on `db` as `id`, flushing every
/// `flush_ms`, with `extra` keys in `[private]`.
fn start(db: &SiteDb, state: &TempPath, id: &str, flush_ms: u32, extra: &str) -> Tracker {
    Tracker::builder()
        .http(None)
        .udp(None)
        .runtime_args(&["--workers", "1", "--no-pin"])
        .config(&config_with(&db.url, free_port(), id, flush_ms, extra))
        .state_file(&state.0)
        .metrics()
        .start()
}

/// User 1 (group user) and torrent 1.
fn site() -> SiteDb {
    let db = SiteDb::new();
    db.user(1, 1);
    db.user(2, 1);
    db.torrent(1, 0, 1);
    db
}

fn announce(
    tracker: &Tracker,
    user: u32,
    port: u16,
    totals: (u64, u64, u64),
    event: AnnounceEvent,
) {
    let http = tracker.http[0];
    assert_eq!(
        announce_as(http, &passkey(user), 1, port, totals, event),
        None
    );
}

/// The audit's failover: a client announces to A; B starts and reads the
/// peers; the client reports 5000 to A; the address moves; it reports 6000
/// to B. 6000 is credited, whichever tracker's flush lands first.
#[test]
fn a_failover_credits_each_byte_once_whichever_tracker_flushes_first() {
    for b_first in [false, true] {
        let db = site();
        let (state_a, state_b) = (
            TempPath::new("tracker-test-failover-a", "state"),
            TempPath::new("tracker-test-failover-b", "state"),
        );
        let a = start(&db, &state_a, "host-a", 200, "");
        announce(&a, 1, 7001, (0, 0, 1000), STARTED);
        db.wait_for("SELECT COUNT(*) FROM peers WHERE active", 1u32);
        // For B's flush to land first, A flushes only when it stops (and it
        // restarts so, knowing the peer from its row).
        let a = if b_first {
            a.stop();
            start(&db, &state_a, "host-a", 600_000, "")
        } else {
            a
        };
        let b = start(&db, &state_b, "host-b", 200, "");
        announce(&a, 1, 7001, (5000, 0, 1000), NONE);
        if !b_first {
            db.wait_for("SELECT uploaded FROM users WHERE id = 1", 5000u64);
        }
        // The address moves: keepalived's adverts are a second apart (and
        // the database's times are whole seconds).
        std::thread::sleep(Duration::from_millis(1100));
        announce(&b, 1, 7001, (6000, 0, 1000), NONE);
        db.wait_for("SELECT uploaded FROM users WHERE id = 1", 6000u64);
        a.stop();
        b.stop();
        let totals: (u64, u64, u64, u64) = db.one(
            "SELECT (SELECT uploaded FROM users WHERE id = 1), \
               (SELECT actual_uploaded FROM history WHERE user_id = 1), \
               (SELECT uploaded FROM peers WHERE user_id = 1), \
               (SELECT client_uploaded FROM history WHERE user_id = 1)",
        );
        assert_eq!(
            totals,
            (6000, 6000, 6000, 6000),
            "B's flush first: {b_first}"
        );
    }
}

/// B expires the peers it read from A at its start while A still serves
/// them: the torrent's counts stay those of its active visible rows, and
/// never go below zero once every peer stops.
#[test]
fn counts_stay_those_of_the_rows_while_the_other_tracker_expires_its_view() {
    let db = site();
    let (state_a, state_b) = (
        TempPath::new("tracker-test-counts-a", "state"),
        TempPath::new("tracker-test-counts-b", "state"),
    );
    let a = start(&db, &state_a, "host-a", 200, "");
    announce(&a, 1, 7001, (0, 0, 0), STARTED);
    announce(&a, 2, 7002, (0, 0, 1000), STARTED);
    db.wait_for(
        "SELECT seeders, leechers FROM torrents WHERE id = 1",
        (1i32, 1i32),
    );
    let b = start(&db, &state_b, "host-b", 200, "active_peer_ttl_secs = 2");
    let counts = "SELECT seeders, leechers, \
        (SELECT COUNT(*) FROM peers WHERE active AND visible AND seeder), \
        (SELECT COUNT(*) FROM peers WHERE active AND visible AND NOT seeder) \
        FROM torrents WHERE id = 1";
    for second in 1..=5u64 {
        std::thread::sleep(Duration::from_secs(1));
        announce(&a, 1, 7001, (second, 0, 0), NONE);
        announce(&a, 2, 7002, (0, second, 1000), NONE);
    }
    // B has expired its view of both long since.
    std::thread::sleep(Duration::from_millis(600));
    let held: (i32, i32, i64, i64) = db.one(counts);
    assert_eq!(held, (1, 1, 1, 1));
    announce(&a, 1, 7001, (9, 0, 0), STOPPED);
    announce(&a, 2, 7002, (0, 9, 1000), STOPPED);
    db.wait_for(counts, (0i32, 0i32, 0i64, 0i64));
    std::thread::sleep(Duration::from_millis(600));
    let held: (i32, i32, i64, i64) = db.one(counts);
    assert_eq!(held, (0, 0, 0, 0));
    a.stop();
    b.stop();
}

/// A tracker down longer than the active TTL: the peer that comes back is
/// credited every byte since its row, with nothing of it kept in memory.
#[test]
fn a_peer_back_after_the_tracker_was_down_past_the_ttl_is_credited() {
    let db = site();
    let state = TempPath::new("tracker-test-down-ttl", "state");
    let extra = "active_peer_ttl_secs = 2";
    let tracker = start(&db, &state, "t1", 200, extra);
    announce(&tracker, 1, 7001, (0, 0, 1000), STARTED);
    announce(&tracker, 1, 7001, (100, 10, 1000), NONE);
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (100u64, 10u64),
    );
    tracker.stop();
    std::thread::sleep(Duration::from_secs(3));
    let tracker = start(&db, &state, "t1", 200, extra);
    // Its row, active but silent past the TTL, is expired at start: made
    // inactive and taken off the counts, not left counted for ever.
    db.wait_for(
        "SELECT leechers, (SELECT COUNT(*) FROM peers WHERE active) FROM torrents WHERE id = 1",
        (0i32, 0i64),
    );
    announce(&tracker, 1, 7001, (700, 70, 1000), NONE);
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (700u64, 70u64),
    );
    let seedtime: u64 = db.one("SELECT seedtime FROM history WHERE user_id = 1");
    assert_eq!(seedtime, 0);
    tracker.stop();
}

/// Announces as fast as the client can send them, each claiming a second's
/// worth at the bound: no more than the bound over the real time is
/// credited (the audit's 500 MB in 1.05 s at a 10 MB/s bound).
#[test]
fn announcing_in_a_tight_loop_credits_no_more_than_the_upload_bound() {
    let db = site();
    let state = TempPath::new("tracker-test-tight-loop", "state");
    let rate = 10_000_000u64;
    let extra = format!("max_upload_rate = {rate}\nmin_announce_interval_percent = 0");
    let tracker = start(&db, &state, "t1", 200, &extra);
    announce(&tracker, 1, 7001, (0, 0, 1000), STARTED);
    let started = Instant::now();
    let mut uploaded = 0;
    while started.elapsed() < Duration::from_millis(1050) {
        uploaded += rate;
        announce(&tracker, 1, 7001, (uploaded, 0, 1000), NONE);
    }
    let elapsed = started.elapsed();
    db.wait_for(
        "SELECT actual_uploaded FROM history WHERE user_id = 1",
        uploaded,
    );
    let credited: u64 = db.one("SELECT uploaded FROM users WHERE id = 1");
    let bound = (rate as f64 * elapsed.as_secs_f64()) as u64;
    assert!(
        credited <= bound,
        "{credited} credited in {elapsed:?} at {rate} B/s ({} announces)",
        uploaded / rate
    );
    assert!(tracker.metric("tracker_private_announces_total", &[("outcome", "flagged")]) > 0);
    tracker.stop();
}

/// A login to `db` with exactly the grants of deploy/unit3d/grants.sql.
fn granted_login(db: &SiteDb, name: &str) -> (String, String) {
    let opts = mysql::Opts::from_url(&server_url()).unwrap();
    let host = opts.get_ip_or_hostname().to_string();
    let account = format!("'{name}'@'{host}'");
    db.exec(&format!("DROP USER IF EXISTS {account}"));
    db.exec(&format!("CREATE USER {account} IDENTIFIED BY 'pw'"));
    let grants = std::fs::read_to_string(support::repo_root().join("deploy/unit3d/grants.sql"))
        .unwrap()
        .replace("`unit3d`", &format!("`{}`", db.name))
        .replace("'tracker'@'localhost'", &account);
    db.exec(&grants);
    let url = format!(
        "mysql://{name}:pw@{host}:{}/{}",
        opts.get_tcp_port(),
        db.name
    );
    (account, url)
}

/// The documented grants serve; one missing stops the start, naming it; one
/// revoked while serving fails every flush as refused (an error, counted
/// apart from an outage), and granting it again resumes the accounting.
#[test]
fn a_missing_grant_stops_the_start_and_a_revoked_one_is_refused_and_counted() {
    let db = site();
    db.exec(
        "CREATE TABLE IF NOT EXISTS tracker_flushes (tracker_id VARCHAR(64) NOT NULL, \
             sequence BIGINT UNSIGNED NOT NULL, flushed_at TIMESTAMP NOT NULL DEFAULT \
             CURRENT_TIMESTAMP ON UPDATE CURRENT_TIMESTAMP, PRIMARY KEY (tracker_id))",
    );
    let login = format!("grants{}", std::process::id());
    let (account, url) = granted_login(&db, &login);
    let state = TempPath::new("tracker-test-grants", "state");
    let start_as = |extra: &str| {
        Tracker::builder()
            .http(None)
            .udp(None)
            .runtime_args(&["--workers", "1", "--no-pin"])
            .config(&config_with(&url, free_port(), "t1", 200, extra))
            .state_file(&state.0)
            .metrics()
    };
    // The grants as docs/OPERATIONS.md listed them before: history written
    // but not read. The start stops and says which.
    db.exec(&format!(
        "REVOKE SELECT ON `{}`.`history` FROM {account}",
        db.name
    ));
    let (code, stderr) = start_as("").spawn().wait_exit(Duration::from_secs(20));
    assert_ne!(code, Some(0));
    assert!(
        stderr.contains("SELECT command denied") && stderr.contains("`history`"),
        "{stderr}"
    );
    assert!(stderr.contains("deploy/unit3d/grants.sql"), "{stderr}");

    db.exec(&format!(
        "GRANT SELECT ON `{}`.`history` TO {account}",
        db.name
    ));
    let tracker = start_as("").start();
    announce(&tracker, 1, 7001, (0, 0, 1000), STARTED);
    announce(&tracker, 1, 7001, (300, 0, 1000), NONE);
    db.wait_for("SELECT uploaded FROM users WHERE id = 1", 300u64);
    db.exec(&format!(
        "REVOKE UPDATE (uploaded, downloaded) ON `{}`.`users` FROM {account}",
        db.name
    ));
    announce(&tracker, 1, 7001, (500, 0, 1000), NONE);
    let refused = || tracker.metric("tracker_private_flushes_total", &[("outcome", "refused")]);
    let deadline = Instant::now() + Duration::from_secs(10);
    while refused() == 0 {
        assert!(Instant::now() < deadline, "no flush counted as refused");
        std::thread::sleep(Duration::from_millis(100));
    }
    let uploaded: u64 = db.one("SELECT uploaded FROM users WHERE id = 1");
    assert_eq!(uploaded, 300, "nothing credited while refused");
    db.exec(&format!(
        "GRANT UPDATE (uploaded, downloaded) ON `{}`.`users` TO {account}",
        db.name
    ));
    db.wait_for("SELECT uploaded FROM users WHERE id = 1", 500u64);
    let log = tracker.stop();
    assert!(
        log.contains("retrying cannot fix it") && log.contains("ERROR"),
        "{log}"
    );
    db.exec(&format!("DROP USER {account}"));
}

#[test]
fn the_config_refuses_an_inactive_ttl_below_the_active_one() {
    let db = site();
    let config = config(
        &db,
        free_port(),
        "t1",
        "active_peer_ttl_secs = 100\ninactive_peer_ttl_secs = 50",
    );
    let (code, stderr) = Tracker::builder()
        .config(&config)
        .spawn()
        .wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("private.inactive_peer_ttl_secs"),
        "{stderr}"
    );
}
