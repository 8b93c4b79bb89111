//! End to end with a real BitTorrent client: a libtorrent seeder and leecher
//! (tests/e2e/swarm.py) that find each other only through the real tracker
//! binary complete a download; in private mode, with passkeys over HTTPS and
//! over UDP (BEP 41), and the bytes, seedtime and snatch credited in a UNIT3D
//! site's tables.
//!
//! Needs Debian's python3-libtorrent for /usr/bin/python3:
//! `apt-get install python3-libtorrent`. Without it this test fails (it never
//! passes silently). The private-mode tests also need the MariaDB server of
//! tests/mariadb.sh (TRACKER_TEST_MYSQL_URL; tests/run.sh starts it).

mod support;

use std::process::Command;
use std::time::Duration;
use support::site_db::{passkey, SiteDb};
use support::{free_port, require_libtorrent, ScriptRun, Tracker, PYTHON};

/// The script's own limit; the process is killed a while after that.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(90);
const KILL_AFTER: Duration = Duration::from_secs(120);

/// Runs tests/e2e/swarm.py with these arguments; returns (success, output).
fn run_swarm(args: &[String]) -> (bool, String) {
    let run = run_swarm_script(args);
    (run.succeeded(), run.report("swarm.py"))
}

/// Runs tests/e2e/swarm.py with these arguments.
fn run_swarm_script(args: &[String]) -> ScriptRun {
    let mut cmd = Command::new(PYTHON);
    cmd.arg(support::repo_root().join("tests/e2e/swarm.py"))
        .args(args)
        .arg("--timeout")
        .arg(SCRIPT_TIMEOUT.as_secs().to_string())
        .current_dir(support::repo_root());
    support::run_script(cmd, KILL_AFTER)
}

/// Starts a tracker on one UDP port and runs swarm.py through it with `extra`
/// arguments. The script's forced re-announce is off: the leecher must be
/// given its peer by the tracker's answers to the client's own announces.
fn swarm_through_udp_tracker(extra: &[&str]) {
    require_libtorrent();
    let mut tracker = Tracker::builder().udp(None).start();
    let url = format!("udp://{}/announce", tracker.udp[0]);
    let mut args = vec![
        "--tracker".to_string(),
        url,
        "--reannounce-after".into(),
        "0".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let (ok, output) = run_swarm(&args);
    let still_running = tracker.is_running();
    assert!(
        ok,
        "the libtorrent swarm did not complete through {} \
         (tracker {}; set TRACKER_TEST_LOG=1 for its log):\n{output}",
        tracker.udp[0],
        if still_running {
            "still running"
        } else {
            "EXITED"
        },
    );
    assert!(
        still_running,
        "the tracker exited during the swarm:\n{output}"
    );
    println!("{output}");
}

/// The seeder announces first; the leecher's first announce returns it.
#[test]
fn udp_tracker_swarm_completes_a_download() {
    swarm_through_udp_tracker(&[]);
}

/// The leecher announces first and hears of nobody; the seeder's announce must
/// return the leecher, and the seeder connects to it. A hybrid v1+v2 torrent,
/// so the client announces both the v1 and the truncated v2 info-hash.
#[test]
fn udp_tracker_tells_a_late_seeder_about_the_leecher() {
    swarm_through_udp_tracker(&["--leecher-first", "--torrent-version", "hybrid"]);
}

/// Starts a tracker serving UDP and HTTPS (on a test certificate the client is
/// told to accept) and runs swarm.py with the seeder announcing to `seeder`'s
/// URL and the leecher to `leecher`'s: both must land in one swarm.
fn swarm_through_https_tracker(seeder: &str, leecher: &str, extra: &[&str]) {
    require_libtorrent();
    let mut tracker = Tracker::builder().udp(None).https(None).start();
    let url = |scheme: &str| match scheme {
        "udp" => format!("udp://{}/announce", tracker.udp[0]),
        "https" => format!("https://{}/announce", tracker.https[0]),
        other => panic!("no {other} listener"),
    };
    let mut args = vec![
        "--tracker".to_string(),
        url(seeder),
        "--tracker".into(),
        url(leecher),
        "--insecure".into(),
        "--reannounce-after".into(),
        "0".into(),
    ];
    args.extend(extra.iter().map(|s| s.to_string()));
    let (ok, output) = run_swarm(&args);
    let still_running = tracker.is_running();
    assert!(
        ok,
        "the libtorrent swarm did not complete (seeder on {seeder}, leecher on {leecher}; \
         tracker {}; set TRACKER_TEST_LOG=1 for its log):\n{output}",
        if still_running {
            "still running"
        } else {
            "EXITED"
        },
    );
    assert!(
        still_running,
        "the tracker exited during the swarm:\n{output}"
    );
    println!("{output}");
}

/// A seeder on udp:// and a leecher on https:// of the same tracker find each
/// other: one swarm behind both protocols.
#[test]
fn https_leecher_finds_a_udp_seeder() {
    swarm_through_https_tracker("udp", "https", &[]);
}

/// Both on https://, the leecher first: the seeder's HTTPS announce must
/// return the leecher.
#[test]
fn https_tracker_tells_a_late_seeder_about_the_leecher() {
    swarm_through_https_tracker("https", "https", &["--leecher-first"]);
}

// Private mode (UNIT3D): the site's database on the server of
// tests/mariadb.sh, users 1 (the seeder) and 2 (the leecher), and the
// torrent registered through the site API by swarm.py.

const API_KEY: &str = "e2e-site-api-key-0123456789abcdef0123";
/// The generated file: 64 pieces of 16 KiB.
const SIZE: u64 = 1 << 20;
/// Seconds both clients seed after the download, before their stop.
const SEED_FOR: u64 = 2;

fn private_config(db: &SiteDb, api_port: u16) -> String {
    format!(
        "[private]\nenabled = true\ndatabase_url = \"{}\"\ntracker_id = \"e2e\"\n\
         flush_interval_ms = 200\nflush_retry_min_ms = 100\nflush_retry_max_ms = 500\n\
         api_listen = \"127.0.0.1:{api_port}\"\napi_key = \"{API_KEY}\"\n\
         [runtime]\nexempt_networks = [\"127.0.0.0/8\"]\n",
        db.url
    )
}

/// What a client's stopped announce reports, from swarm.py's `TOTALS` line.
#[derive(Debug, Clone, Copy)]
struct Totals {
    uploaded: u64,
    downloaded: u64,
}

fn totals(run: &ScriptRun, label: &str) -> Totals {
    let prefix = format!("TOTALS {label} ");
    let line = run
        .stdout
        .lines()
        .find_map(|l| l.strip_prefix(&prefix))
        .unwrap_or_else(|| panic!("no {prefix:?} line:\n{}", run.report("swarm.py")));
    let field = |name: &str| -> u64 {
        line.split(' ')
            .find_map(|kv| kv.strip_prefix(name)?.strip_prefix('='))
            .and_then(|v| v.parse().ok())
            .unwrap_or_else(|| panic!("no {name} in {line:?}"))
    };
    Totals {
        uploaded: field("uploaded"),
        downloaded: field("downloaded"),
    }
}

/// A private tracker serving `scheme` ("https" or "udp") and the site's
/// database; swarm.py registers a private torrent as torrent 1 through the
/// site API, the seeder announces with user 1's passkey (in group
/// `seeder_group`: 1 user, 2 vip with double upload) and the leecher with
/// user 2's (group user); then the tables must hold exactly what UNIT3D's
/// rules make of the clients' announces.
fn private_swarm(scheme: &str, seeder_group: i32) {
    require_libtorrent();
    let db = SiteDb::new();
    db.user(1, seeder_group);
    db.user(2, 1);
    // A placeholder row for torrent 1 (history and peers refer to it), with
    // an info-hash that is not the swarm's: the tracker learns the real one
    // from the site API, as when UNIT3D approves an upload.
    db.torrent(1, 0, 1);
    let api_port = free_port();
    let builder = Tracker::builder().config(&private_config(&db, api_port));
    let mut tracker = match scheme {
        "https" => builder.https(None),
        "udp" => builder.udp(None),
        other => panic!("no {other} listener"),
    }
    .start();
    let addr = match scheme {
        "https" => tracker.https[0],
        _ => tracker.udp[0],
    };
    // Over UDP libtorrent sends the URL's path ("/announce/PASSKEY") as
    // BEP 41 URLData (udp_tracker_connection.cpp, option type 2).
    let url = |user: u32| format!("{scheme}://{addr}/announce/{}", passkey(user));
    let mut args = vec![
        "--tracker".to_string(),
        url(1),
        "--tracker".into(),
        url(2),
        "--private".into(),
        "--register".into(),
        format!("http://127.0.0.1:{api_port}/announce/{API_KEY}/torrents"),
        "--torrent-id".into(),
        "1".into(),
        "--size".into(),
        SIZE.to_string(),
        "--seed-for".into(),
        SEED_FOR.to_string(),
        // The leecher must get the seeder from its own first announce.
        "--reannounce-after".into(),
        "0".into(),
    ];
    if scheme == "https" {
        args.push("--insecure".into());
    }
    let run = run_swarm_script(&args);
    let output = run.report("swarm.py");
    let still_running = tracker.is_running();
    assert!(
        run.succeeded(),
        "the private libtorrent swarm did not complete over {scheme} (tracker {}; set \
         TRACKER_TEST_LOG=1 for its log):\n{output}",
        if still_running {
            "still running"
        } else {
            "EXITED"
        },
    );
    assert!(
        still_running,
        "the tracker exited during the swarm:\n{output}"
    );
    println!("{output}");
    let seeder = totals(&run, "seeder");
    let leecher = totals(&run, "leecher");
    // libtorrent's count of the download: the payload less redundant and
    // failed bytes, which is the file once it is complete.
    assert_eq!(leecher.downloaded, SIZE, "{output}");
    // The leecher got the file from the seeder alone (no DHT, PEX, LSD, and
    // both are seeds from then on), which sent at least each block once.
    assert!(seeder.uploaded >= SIZE, "{seeder:?}\n{output}");
    assert_eq!(seeder.downloaded, 0, "{output}");

    // Both stopped announces arrived: libtorrent sends event=stopped when
    // the script removes the torrents (torrent::abort -> stop_announcing)
    // and the script keeps the sessions up for 2 s after; the stop writes
    // the peer's row inactive. Waiting for both rows to turn inactive waits
    // for every flush of this swarm (one worker owns the torrent and writes
    // its rows in order).
    db.wait_for(
        "SELECT COUNT(*), CAST(SUM(active) AS UNSIGNED), CAST(SUM(seeder) AS UNSIGNED), \
         CAST(SUM(`left`) AS UNSIGNED) FROM peers WHERE torrent_id = 1",
        (2u64, 0u64, 2u64, 0u64),
    );
    // The peer rows carry each client's last reported totals.
    let peers: Vec<(u32, u64, u64)> = db.rows(
        "SELECT user_id, uploaded, downloaded FROM peers WHERE torrent_id = 1 ORDER BY user_id",
    );
    assert_eq!(
        peers,
        [
            (1, seeder.uploaded, seeder.downloaded),
            (2, leecher.uploaded, leecher.downloaded)
        ]
    );

    // The credits are exact: a first announce credits nothing, and each
    // later one the growth of the client's totals, so a peer is credited
    // its last totals (those of its stopped announce, printed by swarm.py)
    // less those of its first announce, which are 0: a fresh libtorrent
    // torrent announces (event=started) as it starts, before it knows of
    // any peer, and peers come only from the answers.
    //
    // The leecher: the whole file downloaded, at download factor 100
    // (torrent and group). It uploaded nothing (its only peer is a seed);
    // its event=completed announce sets completed_at; its seedtime is the
    // time from that announce to its stop (whole seconds, at least
    // SEED_FOR, at most the script's run).
    db.wait_for(
        "SELECT uploaded, actual_uploaded, downloaded, actual_downloaded, \
         completed_at IS NOT NULL, active, immune FROM history \
         WHERE user_id = 2 AND torrent_id = 1",
        (
            leecher.uploaded,
            leecher.uploaded,
            SIZE,
            SIZE,
            true,
            false,
            false,
        ),
    );
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 2",
        (leecher.uploaded, SIZE),
    );
    // The seeder: what it uploaded, doubled for the vip group; it was a
    // seed from its first announce, so libtorrent never sends it
    // event=completed (files_checked marks it as sent) and completed_at
    // stays NULL.
    let factor = if seeder_group == 2 { 2 } else { 1 };
    db.wait_for(
        "SELECT uploaded, actual_uploaded, downloaded, actual_downloaded, \
         completed_at IS NULL, active, immune FROM history \
         WHERE user_id = 1 AND torrent_id = 1",
        (
            factor * seeder.uploaded,
            seeder.uploaded,
            0u64,
            0u64,
            true,
            false,
            seeder_group == 2,
        ),
    );
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (factor * seeder.uploaded, 0u64),
    );
    // One snatch: the leecher turned seeder on an announce that was not a
    // stop. Both stopped: no seeders, no leechers left.
    db.wait_for(
        "SELECT times_completed, seeders, leechers FROM torrents WHERE id = 1",
        (1u32, 0i32, 0i32),
    );
    // Seedtime: whole seconds between announces as a seed. The seeder's
    // runs from its first announce to its stop, the leecher's from its
    // event=completed announce to its stop: both at least SEED_FOR (the
    // script waits that long after the completed announce was answered),
    // and less than the script's run plus the second the whole-second clock
    // may add.
    let seedtime: Vec<(u32, u64)> =
        db.rows("SELECT user_id, seedtime FROM history WHERE torrent_id = 1 ORDER BY user_id");
    assert_eq!(seedtime.len(), 2, "{seedtime:?}");
    for (user, secs) in &seedtime {
        assert!(
            *secs >= SEED_FOR && (*secs as f64) < run.elapsed.as_secs_f64() + 1.0,
            "user {user}'s seedtime {secs} s (seeded {SEED_FOR} s after the download, in a \
             {:.1} s run)",
            run.elapsed.as_secs_f64()
        );
    }
    let history: Vec<(u32, u64, u64, u64, u64, u64, bool)> = db.rows(
        "SELECT user_id, uploaded, actual_uploaded, downloaded, actual_downloaded, seedtime, \
         completed_at IS NOT NULL FROM history WHERE torrent_id = 1 ORDER BY user_id",
    );
    let users: Vec<(u32, u64, u64)> =
        db.rows("SELECT id, uploaded, downloaded FROM users ORDER BY id");
    eprintln!(
        "{scheme}: client totals: seeder {seeder:?}, leecher {leecher:?}; history (user, \
         uploaded, actual_uploaded, downloaded, actual_downloaded, seedtime, completed): \
         {history:?}; users (id, uploaded, downloaded): {users:?}; run {:.1} s",
        run.elapsed.as_secs_f64()
    );

    // The passkeys never reach the tracker's log.
    let log = tracker.stop();
    assert!(
        !log.contains(&passkey(1)) && !log.contains(&passkey(2)),
        "{log}"
    );
}

/// Over HTTPS: passkeys in the announce URLs' paths, both users in group
/// user (factors 100).
#[test]
fn private_https_swarm_is_credited_in_the_site_tables() {
    private_swarm("https", 1);
}

/// Over UDP: libtorrent sends each passkey in BEP 41 URLData; the seeder is
/// vip (double upload, immune).
#[test]
fn private_udp_swarm_with_bep41_passkeys_is_credited_in_the_site_tables() {
    private_swarm("udp", 2);
}
