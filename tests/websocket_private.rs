//! A private tracker serves no WebTorrent: it refuses to start with
//! `websocket.enabled = true`, and refuses every upgrade, with a passkey in
//! the path or not (it used to hand out a WebRTC swarm and relays for any
//! info-hash, unaccounted). The upgrade test needs MariaDB, as
//! tests/private.rs does (tests/mariadb.sh).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

use support::site_db::{passkey, SiteDb};
use support::Tracker;

fn private_config(database_url: &str) -> String {
    format!(
        "[private]\nenabled = true\ndatabase_url = \"{database_url}\"\ntracker_id = \"ws\"\n\
         api_listen = \"\"\n[runtime]\nexempt_networks = [\"127.0.0.0/8\"]\n"
    )
}

/// The status line's code of the answer to a WebSocket upgrade of `path`.
fn upgrade_status(addr: SocketAddr, path: &str) -> u16 {
    let mut tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let head = format!(
        "GET {path} HTTP/1.1\r\nHost: tracker\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    );
    tcp.write_all(head.as_bytes()).unwrap();
    let mut answer = [0u8; 12];
    tcp.read_exact(&mut answer).unwrap();
    let answer = String::from_utf8_lossy(&answer);
    answer
        .strip_prefix("HTTP/1.1 ")
        .and_then(|code| code.trim().parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP answer: {answer}"))
}

#[test]
fn a_private_tracker_refuses_to_start_with_websocket_on() {
    // Refused while the config is read, before any database is reached.
    let config = format!(
        "{}[websocket]\nenabled = true\n",
        private_config("mysql://tracker:secret@127.0.0.1:1/site")
    );
    let tracker = Tracker::builder().http(None).config(&config).spawn();
    let (code, stderr) = tracker.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("websocket.enabled"), "{stderr}");
    assert!(stderr.contains("private"), "{stderr}");
}

#[test]
fn a_private_tracker_answers_no_upgrade() {
    let db = SiteDb::new();
    db.user(1, 1);
    db.torrent(1, 0, 1);
    let tracker = Tracker::builder()
        .http(None)
        .config(&private_config(&db.url))
        .start();
    let addr = tracker.http[0];
    let key = passkey(1);
    for path in [
        "/".to_string(),
        "/announce".to_string(),
        format!("/announce/{key}"),
        format!("/{key}/announce"),
    ] {
        let status = upgrade_status(addr, &path);
        assert_ne!(status, 101, "{path} was upgraded");
        assert!(status >= 200, "{path}: {status}");
    }
}
