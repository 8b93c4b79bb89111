//! Private mode against the real binary and a real MariaDB (started by
//! tests/run.sh through tests/mariadb.sh): passkey announces over HTTP and
//! UDP (BEP 41), the credits in UNIT3D's tables, every refusal, the site
//! API, a database outage, stops, kill -9, hand-overs, and two trackers on
//! one database.

mod support;

use std::net::SocketAddr;
use std::sync::{RwLock, RwLockReadGuard};
use std::time::Duration;

use support::private::{announce_as, failure, failure_of, site_api};
use support::site_db::{info_hash, passkey, server_start, server_stop, SiteDb};
use support::tempfile_path::TempPath;
use support::wire::{announce_request, http_get, target};
use support::{free_port, Tracker};
use tracker_proto::http::bencode;
use tracker_proto::AnnounceEvent;

/// Tests that stop the shared database server take it whole; the others
/// share it.
static SERVER: RwLock<()> = RwLock::new(());

fn config(db: &SiteDb, api_port: u16, tracker_id: &str) -> String {
    support::private::config(db, api_port, tracker_id, "")
}

fn start(db: &SiteDb, state: &std::path::Path) -> (Tracker, u16) {
    let api_port = free_port();
    let tracker = Tracker::builder()
        .http(None)
        .udp(None)
        .runtime_args(&["--workers", "2", "--no-pin"])
        .config(&config(db, api_port, "t1"))
        .state_file(state)
        .metrics()
        .start();
    (tracker, api_port)
}

/// The start of most tests here: the shared database server held (see
/// [`SERVER`]) for as long as the guard lives, a database seeded with
/// [`seed`] and then `prepare`, and a private tracker of two workers on it
/// with a state file of its own (`name`); also the site API's port.
fn seeded(
    name: &str,
    prepare: impl FnOnce(&SiteDb),
) -> (RwLockReadGuard<'static, ()>, SiteDb, TempPath, Tracker, u16) {
    let shared = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let db = SiteDb::new();
    seed(&db);
    prepare(&db);
    let state = TempPath::new(name, "state");
    let (tracker, api_port) = start(&db, &state.0);
    (shared, db, state, tracker, api_port)
}

/// One announce of user `user` (peer `port`) with these totals; the
/// bencoded answer's `failure reason` (or `warning: ` and its warning), or None.
fn announce(
    tracker: SocketAddr,
    user: u32,
    torrent: u32,
    port: u16,
    totals: (u64, u64, u64),
    event: AnnounceEvent,
) -> Option<String> {
    announce_as(tracker, &passkey(user), torrent, port, totals, event)
}

/// As [`failure`], with these header lines in place of the usual ones.
fn failure_with(tracker: SocketAddr, path: &str, headers: &[&str]) -> Option<String> {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(tracker).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let headers: String = headers.iter().map(|h| format!("{h}\r\n")).collect();
    let request = format!("GET {path} HTTP/1.1\r\nHost: t\r\n{headers}Connection: close\r\n\r\n");
    tcp.write_all(request.as_bytes()).unwrap();
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).unwrap();
    let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n").unwrap() + 4;
    let status = std::str::from_utf8(&answer[9..12])
        .unwrap()
        .parse()
        .unwrap();
    failure_of(path, status, &answer[head_end..])
}

/// One announce of user `user` that must succeed without a warning: the
/// answer's `complete`, `incomplete` and the IPv4 peers it carries.
fn counts_of(
    tracker: SocketAddr,
    user: u32,
    torrent: u32,
    port: u16,
    (uploaded, left): (u64, u64),
    event: AnnounceEvent,
) -> (i64, i64, usize) {
    let mut req = announce_request(info_hash(torrent), port, left, event);
    req.uploaded = uploaded;
    let path = target(&req).replacen("/announce?", &format!("/announce/{}?", passkey(user)), 1);
    let (status, body) = http_get(tracker, &path, Duration::from_secs(5)).expect("an answer");
    assert_eq!(status, 200);
    let value = bencode::decode(&body).expect("bencoded");
    assert!(value.get(b"failure reason").is_none(), "{value:?}");
    assert!(value.get(b"warning message").is_none(), "{value:?}");
    let int = |key: &[u8]| value.get(key).and_then(|v| v.as_int()).unwrap();
    let peers = value
        .get(b"peers")
        .and_then(|v| v.as_bytes())
        .unwrap()
        .len()
        / 6;
    (int(b"complete"), int(b"incomplete"), peers)
}

fn api(port: u16, method: &str, path: &str, body: &str) -> u16 {
    site_api(port, method, path, body).0
}

/// Users 1 (group user), 2 (vip: double upload, immune) and 3 (banned);
/// torrents 1 (approved), 2 (100% free), 3 (pending).
fn seed(db: &SiteDb) {
    db.user(1, 1);
    db.user(2, 2);
    db.user(3, 3);
    db.torrent(1, 0, 1);
    db.torrent(2, 100, 1);
    db.torrent(3, 0, 0);
    db.exec("INSERT INTO blacklist_clients (name, peer_id_prefix) VALUES ('bad', '-BAD')");
}

const STARTED: AnnounceEvent = AnnounceEvent::Started;
const NONE: AnnounceEvent = AnnounceEvent::None;

#[test]
fn announces_are_credited_by_unit3ds_rules_and_refused_in_its_words() {
    let (_shared, db, _state, tracker, _) = seeded("tracker-test-private", |_| {});
    let http = tracker.http[0];

    // A first announce credits nothing; the next its deltas.
    assert_eq!(announce(http, 1, 1, 7001, (0, 0, 1000), STARTED), None);
    assert_eq!(announce(http, 1, 1, 7001, (300, 600, 400), NONE), None);
    // Double upload for the vip group.
    assert_eq!(announce(http, 2, 1, 7002, (100, 0, 0), STARTED), None);
    assert_eq!(announce(http, 2, 1, 7002, (1100, 0, 0), NONE), None);
    // A free torrent counts no download, but records it.
    assert_eq!(announce(http, 1, 2, 7003, (0, 0, 500), STARTED), None);
    assert_eq!(
        announce(http, 1, 2, 7003, (0, 500, 0), AnnounceEvent::Completed),
        None
    );
    // Leecher to seeder: one snatch.
    assert_eq!(
        announce(http, 1, 1, 7001, (300, 1000, 0), AnnounceEvent::Completed),
        None
    );

    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (300u64, 1000u64),
    );
    db.wait_for("SELECT uploaded FROM users WHERE id = 2", 2000u64);
    db.wait_for(
        "SELECT uploaded, actual_uploaded, downloaded, actual_downloaded, immune FROM history \
         WHERE user_id = 2 AND torrent_id = 1",
        (2000u64, 1000u64, 0u64, 0u64, true),
    );
    db.wait_for(
        "SELECT downloaded, actual_downloaded, completed_at IS NOT NULL FROM history \
         WHERE user_id = 1 AND torrent_id = 2",
        (0u64, 500u64, true),
    );
    // User 2 joined as a seeder: only user 1's completion is a snatch.
    db.wait_for("SELECT times_completed FROM torrents WHERE id = 1", 1u32);
    db.wait_for(
        "SELECT COUNT(*), SUM(seeder) FROM peers WHERE torrent_id = 1 AND active",
        (2u64, 2u64),
    );
    // The announce answer lists the other peer.
    let (_, body) = http_get(
        http,
        &target(&announce_request(info_hash(1), 7009, 5, STARTED)).replacen(
            "/announce?",
            &format!("/announce/{}?", passkey(2)),
            1,
        ),
        Duration::from_secs(5),
    )
    .unwrap();
    let answer = bencode::decode(&body).unwrap();
    assert!(answer.get(b"peers").unwrap().as_bytes().unwrap().len() >= 6);

    // Refusals, in UNIT3D-Announce's words.
    let unknown = "ffffffffffffffffffffffffffffffff";
    let path = target(&announce_request(info_hash(1), 7010, 5, STARTED));
    let with = |key: &str| path.replacen("/announce?", &format!("/announce/{key}?"), 1);
    assert_eq!(
        failure(http, &with(unknown)).as_deref(),
        Some("Passkey does not exist. Please re-download the .torrent file.")
    );
    assert_eq!(
        failure(http, &with("short")).as_deref(),
        Some("Invalid passkey.")
    );
    assert_eq!(
        announce(http, 1, 99, 7011, (0, 0, 5), STARTED).as_deref(),
        Some("InfoHash not found.")
    );
    assert_eq!(
        announce(http, 1, 3, 7012, (0, 0, 5), STARTED).as_deref(),
        Some("warning: Torrent is pending moderation.")
    );
    assert_eq!(
        announce(http, 3, 1, 7013, (0, 0, 5), STARTED).as_deref(),
        Some("Your account is not enabled. (Current: banned).")
    );
    let mut bad = announce_request(info_hash(1), 7014, 5, STARTED);
    bad.peer_id.0[..4].copy_from_slice(b"-BAD");
    assert_eq!(
        failure(
            http,
            &target(&bad).replacen("/announce?", &format!("/announce/{}?", passkey(1)), 1)
        )
        .as_deref(),
        Some("Client is not acceptable. Please check our blacklist.")
    );
    // The client's own checks: its port, its headers and its user agent.
    assert_eq!(
        announce(http, 1, 1, 8080, (0, 0, 5), STARTED).as_deref(),
        Some("Illegal port: 8080. Port should be between 6881-64999.")
    );
    let keyed = path.replacen("/announce?", &format!("/announce/{}?", passkey(2)), 1);
    let long_agent = format!("User-Agent: {}", "a".repeat(65));
    for (headers, reason) in [
        (&[][..], Some("Invalid user agent.")),
        (
            &["User-Agent: Mozilla/5.0 (X11; Linux x86_64)"],
            Some("Browser, crawler or cheater is not allowed."),
        ),
        (
            &[&*long_agent],
            Some("The user agent of this client is too long."),
        ),
        (
            &[
                "User-Agent: qBittorrent/5.0.1",
                "Referer: http://example.org/",
            ],
            Some("Abnormal access blocked."),
        ),
        (
            &["Accept-Language: en", "User-Agent: qBittorrent/5.0.1"],
            Some("Abnormal access blocked."),
        ),
        (&["User-Agent: qBittorrent/5.0.1", "Accept: */*"], None),
    ] {
        assert_eq!(
            failure_with(http, &keyed, headers).as_deref(),
            reason,
            "{headers:?}"
        );
    }
    // Gazelle's form of the path works too; a path without a passkey and a
    // scrape do not.
    let gazelle = path.replacen("/announce?", &format!("/{}/announce?", passkey(2)), 1);
    assert_eq!(failure(http, &gazelle), None);
    assert_eq!(
        http_get(http, &path, Duration::from_secs(5)).unwrap().0,
        404
    );
    assert!(
        tracker.metric(
            "tracker_private_announces_total",
            &[("outcome", "admitted")]
        ) >= 9
    );

    // The passkeys never reach the log.
    let log = tracker.stop();
    assert!(
        !log.contains(&passkey(1)) && !log.contains(&passkey(2)),
        "{log}"
    );
    assert!(!log.contains(unknown), "{log}");
}

#[test]
fn the_site_api_changes_what_is_served() {
    let _shared = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let db = SiteDb::new();
    seed(&db);
    db.user(4, 1);
    db.exec(&format!(
        "UPDATE users SET passkey = '{}' WHERE id = 4",
        "0".repeat(32)
    ));
    db.torrent(4, 0, 0);
    let state = TempPath::new("tracker-test-private-api", "state");
    let (tracker, api_port) = start(&db, &state.0);
    let http = tracker.http[0];

    // Torrent 4 is pending until the site approves it.
    assert_eq!(
        announce(http, 1, 4, 7001, (0, 0, 5), STARTED).as_deref(),
        Some("warning: Torrent is pending moderation.")
    );
    let torrent = |status: u8, download: u8| {
        format!(
            r#"{{"id":4,"status":{status},"info_hash":"{}","is_deleted":false,"seeders":0,"leechers":0,"times_completed":0,"download_factor":{download},"upload_factor":100}}"#,
            support::wire::hex(&info_hash(4))
        )
    };
    assert_eq!(api(api_port, "PUT", "/torrents", &torrent(1, 100)), 200);
    assert_eq!(announce(http, 1, 4, 7001, (0, 0, 1000), STARTED), None);

    // A user with a new passkey (the site's passkey reset).
    let user = |key: &str, new_key: &str| {
        format!(
            r#"{{"id":4,"group_id":1,"passkey":"{key}","new_passkey":{new_key},"can_download":true,"num_seeding":0,"num_leeching":0,"is_donor":false,"is_lifetime":false}}"#
        )
    };
    let old_key = "0".repeat(32);
    assert_eq!(
        announce_as(http, &old_key, 4, 7002, (0, 0, 5), STARTED),
        None,
        "user 4's passkey from the database"
    );
    let new_key = format!("\"{}\"", passkey(4));
    assert_eq!(
        api(api_port, "PUT", "/users", &user(&"0".repeat(32), &new_key)),
        200
    );
    assert_eq!(announce(http, 4, 4, 7003, (0, 0, 5), STARTED), None);
    assert_eq!(
        announce_as(http, &old_key, 4, 7006, (0, 0, 5), STARTED).as_deref(),
        Some("Passkey does not exist. Please re-download the .torrent file.")
    );
    // A freeleech token: the download is not counted.
    assert_eq!(
        api(
            api_port,
            "PUT",
            "/freeleech-tokens",
            r#"{"user_id":1,"torrent_id":1}"#
        ),
        200
    );
    assert_eq!(announce(http, 1, 1, 7004, (0, 0, 1000), STARTED), None);
    assert_eq!(announce(http, 1, 1, 7004, (0, 700, 300), NONE), None);
    db.wait_for(
        "SELECT downloaded, actual_downloaded FROM history WHERE user_id = 1 AND torrent_id = 1",
        (0u64, 700u64),
    );
    // The user is removed: refused.
    assert_eq!(
        api(
            api_port,
            "DELETE",
            "/users",
            &format!(r#"{{"id":4,"passkey":"{}"}}"#, passkey(4))
        ),
        200
    );
    assert_eq!(
        announce(http, 4, 4, 7005, (0, 0, 5), STARTED).as_deref(),
        Some("Passkey does not exist. Please re-download the .torrent file.")
    );
    // A group turns double upload on.
    assert_eq!(
        api(
            api_port,
            "PUT",
            "/groups",
            r#"{"id":1,"slug":"user","download_slots":null,"is_immune":false,"is_freeleech":false,"is_double_upload":true}"#
        ),
        200
    );
    assert_eq!(announce(http, 1, 1, 7004, (50, 700, 300), NONE), None);
    db.wait_for(
        "SELECT uploaded FROM history WHERE user_id = 1 AND torrent_id = 1",
        100u64,
    );
    // Bad input, a wrong key and unknown routes.
    assert_eq!(api(api_port, "PUT", "/users", "{not json"), 400);
    assert_eq!(api(api_port, "PUT", "/nothing", "{}"), 404);
    let wrong = std::net::TcpStream::connect(("127.0.0.1", api_port)).map(|mut tcp| {
        use std::io::{Read, Write};
        tcp.write_all(b"GET /announce/wrong-key/stats HTTP/1.1\r\n\r\n")
            .unwrap();
        let mut answer = String::new();
        tcp.read_to_string(&mut answer).unwrap();
        answer
    });
    assert!(wrong.unwrap().starts_with("HTTP/1.1 404"));
    assert!(
        tracker.metric(
            "tracker_site_api_requests_total",
            &[("outcome", "wrong_key")]
        ) >= 1
    );
    tracker.stop();
}

#[test]
fn udp_announces_carry_the_passkey_in_url_data() {
    let (_shared, db, _state, tracker, _) = seeded("tracker-test-private-udp", |_| {});
    let mut client = support::udp_client::Client::new("127.0.0.1:0", tracker.udp[0]);
    let url = format!("/announce/{}", passkey(2));
    let answer = client.announce_with_url(info_hash(1), 7101, (0, 0, 10), STARTED, &url);
    assert_eq!(answer, Ok(()), "the first announce");
    let answer = client.announce_with_url(info_hash(1), 7101, (500, 0, 0), NONE, &url);
    assert_eq!(answer, Ok(()));
    db.wait_for("SELECT uploaded FROM users WHERE id = 2", 1000u64);
    // Without a passkey, or with an unknown one: errors.
    let answer = client.announce_with_url(info_hash(1), 7102, (0, 0, 10), STARTED, "/announce");
    assert_eq!(answer, Err("Invalid passkey.".to_string()));
    let answer = client.announce_with_url(info_hash(1), 80, (0, 0, 10), STARTED, &url);
    assert_eq!(
        answer,
        Err("Illegal port: 80. Port should be between 6881-64999.".to_string())
    );
    let unknown = format!("/{}/announce", "e".repeat(32));
    let answer = client.announce_with_url(info_hash(1), 7102, (0, 0, 10), STARTED, &unknown);
    assert_eq!(
        answer,
        Err("Passkey does not exist. Please re-download the .torrent file.".to_string())
    );
    tracker.stop();
}

/// BEP 41: an option of a type the tracker does not know is skipped by its
/// length, so the passkey in URLData after it is still read.
#[test]
fn udp_passkeys_after_an_unknown_option_are_read() {
    use tracker_proto::udp::{AnnounceOptions, IpFamily, Response};
    let (_shared, db, _state, tracker, _) = seeded("tracker-test-private-udp-option", |_| {});
    let mut client = support::udp_client::Client::new("127.0.0.1:0", tracker.udp[0]);
    let (txid, mut packet) = client.announce_packet(info_hash(1), 7103, STARTED, 10, -1);
    // Type 9, three bytes of data, then the URL.
    packet.extend_from_slice(&[9, 3, 1, 2, 3]);
    let url = format!("/announce/{}", passkey(2));
    AnnounceOptions::write_url_data(&mut packet, url.as_bytes());
    let answer = client.exchange(&packet);
    match Response::parse(&answer, IpFamily::V4).unwrap() {
        Response::Announce { transaction_id, .. } => assert_eq!(transaction_id, txid),
        other => panic!("not an announce answer: {other:?}"),
    }
    db.wait_for(
        "SELECT COUNT(*) FROM peers WHERE user_id = 2 AND port = 7103",
        1u64,
    );
    tracker.stop();
}

#[test]
fn accounting_outlives_a_database_outage_a_stop_and_a_kill() {
    let _whole = SERVER.write().unwrap_or_else(|e| e.into_inner());
    let db = SiteDb::new();
    seed(&db);
    let state = TempPath::new("tracker-test-private-outage", "state");
    let (tracker, _) = start(&db, &state.0);
    let http = tracker.http[0];
    assert_eq!(announce(http, 1, 1, 7001, (0, 0, 10_000), STARTED), None);
    assert_eq!(announce(http, 1, 1, 7001, (100, 1000, 9000), NONE), None);
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (100u64, 1000u64),
    );

    // The database goes away: announces are still answered, and merged.
    server_stop();
    for i in 1..=5u64 {
        assert_eq!(
            announce(
                http,
                1,
                1,
                7001,
                (100 + i * 10, 1000 + i * 100, 9000 - i * 100),
                NONE
            ),
            None
        );
    }
    std::thread::sleep(Duration::from_millis(800));
    assert_eq!(tracker.metric("tracker_private_database_up", &[]), 0);
    assert!(tracker.metric("tracker_private_pending_rows", &[]) > 0);
    server_start();
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (150u64, 1500u64),
    );

    // Down again at a stop: the rows wait in the pending file...
    server_stop();
    assert_eq!(announce(http, 1, 1, 7001, (200, 2000, 8000), NONE), None);
    std::thread::sleep(Duration::from_millis(400));
    let log = tracker.stop();
    assert!(log.contains("kept in"), "{log}");
    server_start();
    // ... and are written by the next start, once.
    let (tracker, _) = start(&db, &state.0);
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (200u64, 2000u64),
    );
    // The peer's account came back too (from the pending file's row, newer
    // than the database's): its next announce is credited from there.
    assert_eq!(
        announce(http_of(&tracker), 1, 1, 7001, (250, 2500, 7500), NONE),
        None
    );
    assert_eq!(
        announce(http_of(&tracker), 1, 1, 7001, (300, 3000, 7000), NONE),
        None
    );
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (300u64, 3000u64),
    );
    // kill -9 after a flush loses nothing flushed, counts nothing twice, and
    // the next announce is credited from the peer's row in the database.
    let pid = tracker.pid();
    unsafe { libc::kill(pid as i32, libc::SIGKILL) };
    let _ = tracker.wait_exit(Duration::from_secs(10));
    let (tracker, _) = start(&db, &state.0);
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(
        db.one::<(u64, u64)>("SELECT uploaded, downloaded FROM users WHERE id = 1"),
        (300, 3000)
    );
    assert_eq!(
        announce(http_of(&tracker), 1, 1, 7001, (350, 3500, 6500), NONE),
        None
    );
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (350u64, 3500u64),
    );
    tracker.stop();
}

#[test]
fn a_hand_over_passes_the_accounting_to_the_successor() {
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root (a successor started by hand must be root)");
        return;
    }
    let _shared = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let db = SiteDb::new();
    seed(&db);
    let state = TempPath::new("tracker-test-private-handover", "state");
    let control = TempPath::new("tracker-test-private-control", "sock");
    let api_port = free_port();
    let config =
        config(&db, api_port, "t1") + &format!("control_socket = \"{}\"\n", control.0.display());
    let old = Tracker::builder()
        .http(None)
        .runtime_args(&["--workers", "2", "--no-pin"])
        .config(&config)
        .state_file(&state.0)
        .start();
    let http = old.http[0];
    assert_eq!(announce(http, 1, 1, 7001, (0, 0, 1000), STARTED), None);
    assert_eq!(announce(http, 1, 1, 7001, (10, 100, 900), NONE), None);
    let new = Tracker::builder()
        .http(Some(http))
        .runtime_args(&["--workers", "2", "--no-pin"])
        .config(&config)
        .state_file(&state.0)
        .arg("--take-over")
        .spawn();
    let (code, log) = old.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{log}");
    // The successor credits the peer from its last totals, and everything
    // is counted once.
    assert_eq!(announce(http, 1, 1, 7001, (30, 300, 700), NONE), None);
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (30u64, 300u64),
    );
    db.wait_for(
        "SELECT actual_uploaded, actual_downloaded FROM history WHERE user_id = 1",
        (30u64, 300u64),
    );
    // The site API moved along with the rest.
    assert_eq!(
        api(api_port, "PUT", "/personal-freeleech", r#"{"user_id":1}"#),
        200
    );
    assert_eq!(announce(http, 1, 1, 7001, (30, 400, 600), NONE), None);
    db.wait_for(
        "SELECT actual_downloaded, downloaded FROM history WHERE user_id = 1",
        (400u64, 300u64),
    );
    let log = new.stop();
    assert!(log.contains("took over"), "{log}");
}

fn http_of(tracker: &Tracker) -> SocketAddr {
    tracker.http[0]
}

#[test]
fn two_trackers_on_one_database_count_exactly() {
    let _shared = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let db = SiteDb::new();
    seed(&db);
    let (state_a, state_b) = (
        TempPath::new("tracker-test-private-a", "state"),
        TempPath::new("tracker-test-private-b", "state"),
    );
    let start_as = |id: &str, state: &std::path::Path| {
        Tracker::builder()
            .http(None)
            .runtime_args(&["--workers", "1", "--no-pin"])
            .config(&config(&db, free_port(), id))
            .state_file(state)
            .start()
    };
    let a = start_as("host-a", &state_a.0);
    let b = start_as("host-b", &state_b.0);
    // The same user on both (two clients), and both on torrent 1.
    for (tracker, port) in [(&a, 7001), (&b, 7002)] {
        let http = tracker.http[0];
        assert_eq!(announce(http, 1, 1, port, (0, 0, 1000), STARTED), None);
        for step in 1..=10u64 {
            let totals = (step * 10, step * 100, 1000 - step * 100);
            assert_eq!(announce(http, 1, 1, port, totals, NONE), None);
        }
    }
    db.wait_for(
        "SELECT uploaded, downloaded FROM users WHERE id = 1",
        (200u64, 2000u64),
    );
    db.wait_for(
        "SELECT actual_uploaded, actual_downloaded FROM history WHERE user_id = 1",
        (200u64, 2000u64),
    );
    // One user completing one torrent is one snatch, however many of its
    // clients (or flips of one client) complete it.
    db.wait_for("SELECT times_completed FROM torrents WHERE id = 1", 1u32);
    let flushed: Vec<String> = db.rows("SELECT tracker_id FROM tracker_flushes ORDER BY 1");
    assert_eq!(flushed, ["host-a", "host-b"]);
    a.stop();
    b.stop();
}

#[test]
fn every_site_api_change_is_served_at_once() {
    let (_shared, db, _state, tracker, api_port) = seeded("tracker-test-private-api-all", |_| {});
    let http = tracker.http[0];
    let history = "SELECT uploaded, actual_uploaded, downloaded, actual_downloaded FROM history \
                   WHERE user_id = 1 AND torrent_id = 1";
    assert_eq!(announce(http, 1, 1, 7001, (0, 0, 1000), STARTED), None);

    // A featured torrent: free download, double upload.
    assert_eq!(
        api(api_port, "PUT", "/featured-torrents", r#"{"torrent_id":1}"#),
        200
    );
    assert_eq!(announce(http, 1, 1, 7001, (10, 100, 900), NONE), None);
    db.wait_for(history, (20u64, 10u64, 0u64, 100u64));
    assert_eq!(
        api(
            api_port,
            "DELETE",
            "/featured-torrents",
            r#"{"torrent_id":1}"#
        ),
        200
    );
    assert_eq!(announce(http, 1, 1, 7001, (20, 200, 800), NONE), None);
    db.wait_for(history, (30u64, 20u64, 100u64, 200u64));

    // Personal freeleech, on and off.
    assert_eq!(
        api(api_port, "PUT", "/personal-freeleech", r#"{"user_id":1}"#),
        200
    );
    assert_eq!(announce(http, 1, 1, 7001, (20, 300, 700), NONE), None);
    db.wait_for(history, (30u64, 20u64, 100u64, 300u64));
    assert_eq!(
        api(
            api_port,
            "DELETE",
            "/personal-freeleech",
            r#"{"user_id":1}"#
        ),
        200
    );
    assert_eq!(announce(http, 1, 1, 7001, (20, 400, 600), NONE), None);
    db.wait_for(history, (30u64, 20u64, 200u64, 400u64));

    // A blacklisted client prefix, then lifted.
    let agents = r#"{"peer_id_prefix":"-QQ"}"#;
    assert_eq!(api(api_port, "PUT", "/blacklisted-agents", agents), 200);
    let mut client = announce_request(info_hash(1), 7002, 5, STARTED);
    client.peer_id.0[..3].copy_from_slice(b"-QQ");
    let path = target(&client).replacen("/announce?", &format!("/announce/{}?", passkey(2)), 1);
    assert_eq!(
        failure(http, &path).as_deref(),
        Some("Client is not acceptable. Please check our blacklist.")
    );
    assert_eq!(api(api_port, "DELETE", "/blacklisted-agents", agents), 200);
    assert_eq!(failure(http, &path), None);

    // Reads: a user's peers on every worker, a torrent's at its owner.
    let (status, user) = site_api(api_port, "GET", "/users/1", "");
    assert_eq!(status, 200, "{user}");
    let user: serde_json::Value = serde_json::from_str(&user).unwrap();
    assert_eq!(
        (user["id"].as_u64(), user["group_id"].as_i64()),
        (Some(1), Some(1))
    );
    assert_eq!(
        (user["num_seeding"].as_u64(), user["num_leeching"].as_u64()),
        (Some(0), Some(1))
    );
    let (status, torrent) = site_api(api_port, "GET", "/torrents/1", "");
    assert_eq!(status, 200, "{torrent}");
    let torrent: serde_json::Value = serde_json::from_str(&torrent).unwrap();
    assert_eq!(
        (torrent["seeders"].as_u64(), torrent["leechers"].as_u64()),
        (Some(0), Some(2))
    );
    assert_eq!(
        torrent["peers"].as_object().map(|p| p.len()),
        Some(2),
        "{torrent}"
    );
    assert_eq!(api(api_port, "GET", "/users/99", ""), 404);
    assert_eq!(api(api_port, "GET", "/torrents/99", ""), 404);

    // A group removed: its users are refused.
    assert_eq!(api(api_port, "DELETE", "/groups", r#"{"id":2}"#), 200);
    assert_eq!(
        announce(http, 2, 1, 7003, (0, 0, 5), STARTED).as_deref(),
        Some("Group not found.")
    );
    // A torrent removed: refused.
    let removed = format!(
        r#"{{"id":1,"info_hash":"{}"}}"#,
        support::wire::hex(&info_hash(1))
    );
    assert_eq!(api(api_port, "DELETE", "/torrents", &removed), 200);
    assert_eq!(
        announce(http, 1, 1, 7001, (20, 500, 500), NONE).as_deref(),
        Some("Torrent has been deleted.")
    );
    // The request rates, in UNIT3D-Announce's shape (gathered each second).
    std::thread::sleep(Duration::from_millis(2100));
    let (status, stats) = site_api(api_port, "GET", "/stats", "");
    assert_eq!(status, 200);
    for key in [
        "created_at",
        "requests_per_60s",
        "announce_responses_per_7200s",
    ] {
        assert!(stats.contains(&format!("\"{key}\":")), "{stats}");
    }
    assert!(!stats.contains("\"last_request_at\":0"), "{stats}");
    tracker.stop();
}

#[test]
fn a_leecher_past_its_groups_download_slots_is_told_and_kept_out() {
    let (_shared, db, _state, tracker, _) = seeded("tracker-test-private-slots", |db| {
        db.exec("UPDATE `groups` SET download_slots = 1 WHERE id = 1");
        db.torrent(4, 0, 1);
    });
    let http2 = tracker.http[0];
    // Two workers: the torrents may have different owners, the count is
    // the user's on all of them.
    assert_eq!(announce(http2, 1, 1, 7001, (0, 0, 1000), STARTED), None);
    assert_eq!(
        announce(http2, 1, 4, 7002, (0, 0, 1000), STARTED).as_deref(),
        Some("warning: Download slot limit reached.")
    );
    // Seeders need no slot; and once the first leecher is done, the slot
    // is free.
    assert_eq!(
        announce(http2, 1, 1, 7001, (0, 1000, 0), AnnounceEvent::Completed),
        None
    );
    assert_eq!(announce(http2, 1, 4, 7002, (0, 10, 990), NONE), None);
    db.wait_for(
        "SELECT visible FROM peers WHERE user_id = 1 AND torrent_id = 4",
        true,
    );
    tracker.stop();
}

/// A peer announcing again before `private.min_announce_interval_percent` of
/// the announce interval is
/// accounted, but answered no peers and zero counts, without a word
/// (UNIT3D-Announce's silent rate limit); its first completed is not held
/// back.
#[test]
fn an_announce_too_soon_is_credited_but_gets_no_peers() {
    let (_shared, db, _state, tracker, _) = seeded("tracker-test-private-too-soon", |_| {});
    let http = tracker.http[0];
    let answer = |user: u32, port: u16, totals: (u64, u64), event| {
        counts_of(http, user, 1, port, totals, event)
    };
    assert_eq!(answer(2, 7002, (0, 0), STARTED), (1, 0, 0));
    assert_eq!(answer(1, 7001, (0, 1000), STARTED), (1, 1, 1));
    // Again at once: nothing to harvest, but the bytes count.
    assert_eq!(answer(1, 7001, (2000, 1000), NONE), (0, 0, 0));
    assert_eq!(
        tracker.metric(
            "tracker_private_announces_total",
            &[("outcome", "too_soon")]
        ),
        1
    );
    db.wait_for("SELECT uploaded FROM users WHERE id = 1", 2000u64);
    // A first completed is answered at once (a seeder is handed no
    // seeders, so its counts show it).
    assert_eq!(
        answer(1, 7001, (2000, 0), AnnounceEvent::Completed),
        (2, 0, 0)
    );
    tracker.stop();
}

/// A known user's client announcing a torrent the site does not serve gets
/// UNIT3D-Announce's refusal, and the site learns of it in
/// `unregistered_info_hashes`; an unknown passkey's does not reach it (and
/// is refused for its passkey: it learns nothing of the torrent).
#[test]
fn unregistered_info_hashes_reach_the_site() {
    let (_shared, db, _state, tracker, _) = seeded("tracker-test-private-unregistered", |_| {});
    let http = tracker.http[0];
    assert_eq!(
        announce(http, 2, 77, 7001, (0, 0, 1000), STARTED).as_deref(),
        Some("InfoHash not found.")
    );
    assert_eq!(
        announce_as(http, &passkey(42), 78, 7002, (0, 0, 1000), STARTED).as_deref(),
        Some("Passkey does not exist. Please re-download the .torrent file.")
    );
    db.wait_for(
        "SELECT COUNT(*) FROM unregistered_info_hashes WHERE user_id = 2",
        1u64,
    );
    let hash: Vec<u8> = db.one("SELECT info_hash FROM unregistered_info_hashes");
    assert_eq!(hash, info_hash(77).0.to_vec());
    tracker.stop();

    // Without the table the tracker warns and records none (rows for it
    // would fail every flush), and accounts as before.
    db.exec("DROP TABLE unregistered_info_hashes");
    let state = TempPath::new("tracker-test-private-unregistered-2", "state");
    let (tracker, _) = start(&db, &state.0);
    let http = tracker.http[0];
    assert_eq!(
        announce(http, 2, 77, 7001, (0, 0, 1000), STARTED).as_deref(),
        Some("InfoHash not found.")
    );
    assert_eq!(announce(http, 1, 1, 7003, (0, 0, 1000), STARTED), None);
    assert_eq!(announce(http, 1, 1, 7003, (700, 0, 1000), NONE), None);
    db.wait_for("SELECT uploaded FROM users WHERE id = 1", 700u64);
    let log = tracker.stop();
    assert!(
        log.contains("no table unregistered_info_hashes")
            && log.contains("private.max_unregistered_per_flush"),
        "{log}"
    );
}

/// A user past its seed-list limit gets answers without seeders and with
/// `complete` 0, wherever the torrent lives (the counts are shared by the
/// workers); its bytes are credited all the same.
#[test]
fn seed_lists_past_a_users_limit_are_left_out() {
    let _shared = SERVER.read().unwrap_or_else(|e| e.into_inner());
    let db = SiteDb::new();
    seed(&db);
    let api_port = free_port();
    let limited = config(&db, api_port, "t1").replacen(
        "[runtime]",
        "seed_list_limits = \"3600=1\"\n[runtime]",
        1,
    );
    let tracker = Tracker::builder()
        .http(None)
        .udp(None)
        .runtime_args(&["--workers", "2", "--no-pin"])
        .config(&limited)
        .metrics()
        .start();
    let http = tracker.http[0];
    let answer = |user: u32, torrent: u32, port: u16, left: u64| {
        counts_of(http, user, torrent, port, (0, left), STARTED)
    };
    // User 2 seeds torrents 1 and 2 (on either worker).
    assert_eq!(answer(2, 1, 7001, 0), (1, 0, 0));
    assert_eq!(answer(2, 2, 7002, 0), (1, 0, 0));
    // User 1's first seed list, then none for an hour.
    assert_eq!(answer(1, 1, 7003, 1000), (1, 1, 1));
    assert_eq!(answer(1, 2, 7004, 1000), (0, 1, 0));
    assert_eq!(
        tracker.metric(
            "tracker_private_announces_total",
            &[("outcome", "seed_list_limited")]
        ),
        1
    );
    tracker.stop();
}
