//! Private mode as a UNIT3D site and its members see it, against the real
//! binary and a real MariaDB (tests/mariadb.sh): the donors' overrides,
//! the site API's user answer, the HTTP answer's keys, what UDP clients are
//! known by, scrapes, and what a passkey that may not announce is told.

mod support;

use std::net::SocketAddr;
use std::time::Duration;

use support::private::{announce_path, site_api};
use support::site_db::{info_hash, passkey, SiteDb};
use support::tempfile_path::TempPath;
use support::wire::{announce_request, http_get, target};
use support::{free_port, Tracker};
use tracker_proto::http::bencode;
use tracker_proto::udp::{AnnounceOptions, AnnounceRequest, IpFamily, Request, Response};
use tracker_proto::{AnnounceEvent, PeerId};

const STARTED: AnnounceEvent = AnnounceEvent::Started;
const NONE: AnnounceEvent = AnnounceEvent::None;
const PASSKEY_UNKNOWN: &str = "Passkey does not exist. Please re-download the .torrent file.";

/// A private tracker of two workers on `db`, with `extra` keys in its
/// `[private]` section; also the site API's port. The upload-rate bound is
/// off: these tests announce again at once, and are not about it.
fn start(db: &SiteDb, state: &TempPath, extra: &str) -> (Tracker, u16) {
    let api_port = free_port();
    let extra = format!("max_upload_rate = 0\n{extra}");
    let tracker = Tracker::builder()
        .http(None)
        .udp(None)
        .runtime_args(&["--workers", "2", "--no-pin"])
        .config(&support::private::config(db, api_port, "t1", &extra))
        .state_file(&state.0)
        .start();
    (tracker, api_port)
}

/// Users 1 (group user), 2 (vip) and 3 (banned); torrents 1 (approved)
/// and 3 (pending).
fn seed(db: &SiteDb) {
    db.user(1, 1);
    db.user(2, 2);
    db.user(3, 3);
    db.torrent(1, 0, 1);
    db.torrent(3, 0, 0);
}

/// One HTTP announce (`started` while nothing has moved): its decoded
/// answer.
fn announce(http: SocketAddr, key: &str, torrent: u32, port: u16, totals: (u64, u64, u64)) -> Body {
    let event = if totals.0 == 0 && totals.1 == 0 {
        STARTED
    } else {
        NONE
    };
    let path = announce_path(key, torrent, port, totals, event);
    let (status, body) = http_get(http, &path, Duration::from_secs(5)).expect("an answer");
    assert_eq!(status, 200, "{}", String::from_utf8_lossy(&body));
    Body(body)
}

struct Body(Vec<u8>);

impl Body {
    fn value(&self) -> bencode::Value<'_> {
        bencode::decode(&self.0).expect("bencoded")
    }

    fn int(&self, key: &[u8]) -> Option<i64> {
        self.value().get(key).and_then(|v| v.as_int())
    }

    /// The failure reason, or `warning: ` and the warning.
    fn refusal(&self) -> Option<String> {
        let value = self.value();
        let text = |key: &[u8]| {
            value
                .get(key)
                .map(|v| String::from_utf8_lossy(v.as_bytes().unwrap()).into_owned())
        };
        text(b"failure reason")
            .or_else(|| text(b"warning message").map(|w| format!("warning: {w}")))
    }
}

/// A UDP announce of `peer_id` with `url` as its URLData: the answer.
fn udp_announce<'a>(
    client: &mut support::udp_client::Client,
    peer_id: PeerId,
    torrent: u32,
    (uploaded, left): (u64, u64),
    url: &str,
    answer: &'a mut Vec<u8>,
) -> Response<'a> {
    let mut packet = Vec::new();
    Request::Announce(AnnounceRequest {
        connection_id: client.connection_id,
        transaction_id: client.txid(),
        info_hash: info_hash(torrent),
        peer_id,
        downloaded: 0,
        left,
        uploaded,
        event: if uploaded == 0 { STARTED } else { NONE },
        ip_address: 0,
        key: 0,
        num_want: -1,
        port: 7200,
        options: AnnounceOptions::EMPTY,
    })
    .write(&mut packet);
    AnnounceOptions::write_url_data(&mut packet, url.as_bytes());
    *answer = client.exchange(&packet);
    Response::parse(answer, IpFamily::V4).unwrap()
}

/// Issue 34.5: UNIT3D-Announce's six donor settings, under their names,
/// credit donors and lifetime donors as UNIT3D-Announce does (the higher
/// upload, the lower download, the immunity replaced), with `is_donor` and
/// `is_lifetime` read from `users` at start and taken from the site's user
/// PUT.
#[test]
fn donors_are_credited_by_unit3d_announces_overrides() {
    let db = SiteDb::new();
    seed(&db);
    db.user(4, 1);
    db.user(5, 1);
    db.exec("UPDATE users SET is_donor = 1 WHERE id = 4");
    db.exec("UPDATE users SET is_donor = 1, is_lifetime = 1 WHERE id = 5");
    let state = TempPath::new("tracker-test-private-donors", "state");
    let overrides = "donor_upload_factor_override = 200\n\
                     donor_download_factor_override = 0\n\
                     donor_immunity_override = true\n\
                     lifetime_donor_upload_factor_override = 150\n\
                     lifetime_donor_download_factor_override = 50\n";
    let (tracker, api_port) = start(&db, &state, overrides);
    let http = tracker.http[0];
    for (user, port) in [(1, 7001), (4, 7004), (5, 7005)] {
        let key = passkey(user);
        assert_eq!(announce(http, &key, 1, port, (0, 0, 5000)).refusal(), None);
        let credited = announce(http, &key, 1, port, (1000, 1000, 4000));
        assert_eq!(credited.refusal(), None);
    }
    let history = |user| {
        format!(
            "SELECT uploaded, downloaded, immune FROM history WHERE user_id = {user} \
             AND torrent_id = 1"
        )
    };
    db.wait_for(&history(1), (1000u64, 1000u64, false));
    db.wait_for(&history(4), (2000u64, 0u64, true));
    // Lifetime over donor; its immunity is unset: the group's.
    db.wait_for(&history(5), (1500u64, 500u64, false));

    // The site makes user 1 a donor.
    let user = format!(
        r#"{{"id":1,"group_id":1,"passkey":"{}","new_passkey":null,"can_download":true,"is_donor":true,"is_lifetime":false,"num_seeding":0,"num_leeching":1}}"#,
        passkey(1)
    );
    assert_eq!(site_api(api_port, "PUT", "/users", &user).0, 200);
    let credited = announce(http, &passkey(1), 1, 7001, (2000, 2000, 3000));
    assert_eq!(credited.refusal(), None);
    // Immunity of a row already written only ever drops (UNIT3D-Announce's
    // `immune = immune AND VALUES(immune)`).
    db.wait_for(&history(1), (3000u64, 1000u64, false));
    tracker.stop();
}

/// Issue 34.6: `GET users/{id}` shows each window of the user's peer-list
/// limits as UNIT3D-Announce does (count, max_count, window, updated_at,
/// every one a float), so that UNIT3D's staff page shows them.
#[test]
fn the_users_answer_shows_its_peer_list_windows() {
    let db = SiteDb::new();
    seed(&db);
    let state = TempPath::new("tracker-test-private-rates", "state");
    let (tracker, api_port) = start(&db, &state, "");
    let http = tracker.http[0];
    // User 2 seeds; user 1 leeches and is handed one seed list.
    assert_eq!(
        announce(http, &passkey(2), 1, 7002, (0, 0, 0)).refusal(),
        None
    );
    let leecher = announce(http, &passkey(1), 1, 7001, (0, 0, 1000));
    assert_eq!(leecher.int(b"complete"), Some(1));
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs_f64();

    let (status, body) = site_api(api_port, "GET", "/users/1", "");
    assert_eq!(status, 200, "{body}");
    let user: serde_json::Value = serde_json::from_str(&body).unwrap();
    let rates = |kind: &str| user[kind]["rates"].as_array().cloned().unwrap_or_default();
    let seeds = rates("receive_seed_list_rates");
    let windows: Vec<_> = seeds.iter().map(|r| r["window"].as_f64()).collect();
    let maxima: Vec<_> = seeds.iter().map(|r| r["max_count"].as_f64()).collect();
    assert_eq!(
        windows,
        [60.0, 900.0, 7200.0, 86400.0, 604800.0].map(Some),
        "{body}"
    );
    assert_eq!(maxima, [10.0, 25.0, 125.0, 500.0, 2500.0].map(Some));
    for rate in &seeds {
        let count = rate["count"].as_f64().unwrap();
        assert!((0.99..=1.0).contains(&count), "one list: {body}");
        let at = rate["updated_at"].as_f64().unwrap();
        assert!((now - at).abs() < 10.0, "{body}");
    }
    let leeches = rates("receive_leech_list_rates");
    assert_eq!(leeches.len(), 5, "{body}");
    assert!(leeches.iter().all(|r| r["count"].as_f64() == Some(0.0)));
    // UNIT3D takes each as a float only when it has a point.
    assert!(body.contains(r#""max_count":10.0,"window":60.0"#), "{body}");
    tracker.stop();
}

/// Issue 34.7: an admitted HTTP announce's answer has UNIT3D-Announce's
/// `downloaded` (the torrent's snatches: the site's and the tracker's
/// since) and `min interval` (the shortest wait not held back), its keys
/// in bencode's order.
#[test]
fn http_answers_carry_downloaded_and_min_interval() {
    let db = SiteDb::new();
    seed(&db);
    db.exec("UPDATE torrents SET times_completed = 7 WHERE id = 1");
    let state = TempPath::new("tracker-test-private-answer", "state");
    let (tracker, _) = start(&db, &state, "");
    let http = tracker.http[0];
    let first = announce(http, &passkey(1), 1, 7001, (0, 0, 1000));
    assert_eq!(first.refusal(), None);
    assert_eq!(first.int(b"downloaded"), Some(7));
    // 96% of the 1800 s interval, private.min_announce_interval_percent.
    assert_eq!(first.int(b"min interval"), Some(1728));
    assert_eq!(first.int(b"interval"), Some(1800));
    assert!(first
        .0
        .starts_with(b"d8:completei0e10:downloadedi7e10:incompletei1e8:interval"));
    // User 1 completes: the next answer counts the snatch.
    let mut done = announce_request(info_hash(1), 7001, 0, AnnounceEvent::Completed);
    done.downloaded = 1000;
    let done = target(&done).replacen("/announce?", &format!("/announce/{}?", passkey(1)), 1);
    assert_eq!(
        http_get(http, &done, Duration::from_secs(5)).unwrap().0,
        200
    );
    let second = announce(http, &passkey(2), 1, 7002, (0, 0, 1000));
    assert_eq!(second.int(b"downloaded"), Some(8));
    tracker.stop();
}

/// Issue 34.8: a UDP client sends no user agent; its peer row and history
/// row are written with the name its peer id spells.
#[test]
fn udp_clients_are_known_by_their_peer_ids() {
    let db = SiteDb::new();
    seed(&db);
    let state = TempPath::new("tracker-test-private-udp-agent", "state");
    let (tracker, _) = start(&db, &state, "");
    let mut client = support::udp_client::Client::new("127.0.0.1:0", tracker.udp[0]);
    let url = format!("/announce/{}", passkey(2));
    let mut peer_id = PeerId(*b"-qB4500-abcdefghijkl");
    let mut answer = Vec::new();
    let response = udp_announce(&mut client, peer_id, 1, (0, 1000), &url, &mut answer);
    assert!(
        matches!(response, Response::Announce { .. }),
        "{response:?}"
    );
    db.wait_for(
        "SELECT agent FROM peers WHERE user_id = 2",
        "qBittorrent 4.5.0.0".to_string(),
    );
    db.wait_for(
        "SELECT agent FROM history WHERE user_id = 2",
        "qBittorrent 4.5.0.0".to_string(),
    );
    // A peer id of no known form: its first bytes, the rest as dots.
    peer_id.0[..8].copy_from_slice(b"\x01\x02zz\xfe\xff-x");
    let response = udp_announce(&mut client, peer_id, 1, (0, 1000), &url, &mut answer);
    assert!(
        matches!(response, Response::Announce { .. }),
        "{response:?}"
    );
    db.wait_for(
        "SELECT COUNT(*) FROM peers WHERE user_id = 2 AND agent = 'Unknown [..zz..-x]'",
        1u64,
    );
    tracker.stop();
}

/// Issue 37.5: a private tracker answers no scrape, over UDP as over HTTP,
/// in the same words (BEP 15 scrapes have no room for BEP 41's passkey; an
/// HTTP scrape with one is refused as well).
#[test]
fn scrapes_are_refused_over_udp_as_over_http() {
    let db = SiteDb::new();
    seed(&db);
    let state = TempPath::new("tracker-test-private-scrape", "state");
    let (tracker, _) = start(&db, &state, "");
    assert_eq!(
        announce(tracker.http[0], &passkey(2), 1, 7002, (0, 0, 0)).refusal(),
        None
    );
    let escaped: String = info_hash(1).0.iter().map(|b| format!("%{b:02X}")).collect();
    let scrape = format!("/scrape/{}?info_hash={escaped}", passkey(2));
    let (status, body) = http_get(tracker.http[0], &scrape, Duration::from_secs(5)).unwrap();
    assert_eq!(status, 200);
    assert_eq!(
        Body(body).refusal().as_deref(),
        Some("Scrapes are not served.")
    );

    let mut client = support::udp_client::Client::new("127.0.0.1:0", tracker.udp[0]);
    let txid = client.txid();
    let mut packet = Vec::new();
    let id = client.connection_id;
    tracker_proto::udp::write_scrape_request(&mut packet, id, txid, &[info_hash(1)]);
    let answer = client.exchange(&packet);
    match Response::parse(&answer, IpFamily::V4).unwrap() {
        Response::Error {
            transaction_id,
            message,
        } => {
            assert_eq!(transaction_id, txid);
            assert_eq!(message, b"Scrapes are not served.");
        }
        other => panic!("a scrape was answered: {other:?}"),
    }
    tracker.stop();
}

/// Issue 37.8: a passkey that may not announce (unknown, or its group
/// banned) is refused alike whatever the info-hash, so that no one without
/// an account learns what the site tracks or what awaits moderation; a
/// member is still told.
#[test]
fn a_passkey_that_may_not_announce_learns_nothing_of_the_torrents() {
    let db = SiteDb::new();
    seed(&db);
    let state = TempPath::new("tracker-test-private-oracle", "state");
    let (tracker, _) = start(&db, &state, "");
    let http = tracker.http[0];
    let stranger = "e".repeat(32);
    let banned = "Your account is not enabled. (Current: banned).";
    for (torrent, port) in [(1, 7001), (3, 7003), (99, 7099)] {
        let told = announce(http, &stranger, torrent, port, (0, 0, 5)).refusal();
        assert_eq!(told.as_deref(), Some(PASSKEY_UNKNOWN), "torrent {torrent}");
        let told = announce(http, &passkey(3), torrent, port, (0, 0, 5)).refusal();
        assert_eq!(told.as_deref(), Some(banned), "torrent {torrent}");
    }
    let mut client = support::udp_client::Client::new("127.0.0.1:0", tracker.udp[0]);
    let url = format!("/announce/{stranger}");
    for torrent in [1, 3, 99] {
        let told = client.announce_with_url(info_hash(torrent), 7100, (0, 0, 5), STARTED, &url);
        assert_eq!(told, Err(PASSKEY_UNKNOWN.to_string()), "torrent {torrent}");
    }
    // A member is told what the torrent is.
    let member = |torrent| announce(http, &passkey(1), torrent, 7011, (0, 0, 5)).refusal();
    assert_eq!(member(99).as_deref(), Some("InfoHash not found."));
    assert_eq!(
        member(3).as_deref(),
        Some("warning: Torrent is pending moderation.")
    );
    tracker.stop();
}
