//! What the private-mode tests share: a private tracker's config on a
//! site's database, and passkey announces over HTTP read back as their
//! failure reason or warning.

use super::site_db::{info_hash, SiteDb};
use super::wire::{announce_request, http_get, target};
use std::net::SocketAddr;
use std::time::Duration;
use tracker_proto::http::bencode;
use tracker_proto::AnnounceEvent;

/// The site API's key in every test.
pub const API_KEY: &str = "test-api-key-0123456789abcdef0123";

/// A private tracker's config on `db` (at `url`: the site's, or another
/// login to it): flushes every `flush_ms`, the site API on `api_port`,
/// `extra` keys added to `[private]`, loopback exempt from the limits per
/// client.
pub fn config_with(
    url: &str,
    api_port: u16,
    tracker_id: &str,
    flush_ms: u32,
    extra: &str,
) -> String {
    format!(
        "[private]\nenabled = true\ndatabase_url = \"{url}\"\ntracker_id = \"{tracker_id}\"\n\
         flush_interval_ms = {flush_ms}\nflush_retry_min_ms = 100\nflush_retry_max_ms = 500\n\
         api_listen = \"127.0.0.1:{api_port}\"\napi_key = \"{API_KEY}\"\n{extra}\n\
         [runtime]\nexempt_networks = [\"127.0.0.0/8\"]\n"
    )
}

/// [`config_with`] the site's own login, flushing every 200 ms.
pub fn config(db: &SiteDb, api_port: u16, tracker_id: &str, extra: &str) -> String {
    config_with(&db.url, api_port, tracker_id, 200, extra)
}

/// The path of a passkey announce, UNIT3D's form.
pub fn announce_path(
    key: &str,
    torrent: u32,
    port: u16,
    (uploaded, downloaded, left): (u64, u64, u64),
    event: AnnounceEvent,
) -> String {
    let mut req = announce_request(info_hash(torrent), port, left, event);
    req.uploaded = uploaded;
    req.downloaded = downloaded;
    target(&req).replacen("/announce?", &format!("/announce/{key}?"), 1)
}

/// One announce with this passkey: the bencoded answer's `failure reason`
/// (or `warning: ` and its warning), or None.
pub fn announce_as(
    tracker: SocketAddr,
    key: &str,
    torrent: u32,
    port: u16,
    totals: (u64, u64, u64),
    event: AnnounceEvent,
) -> Option<String> {
    failure(tracker, &announce_path(key, torrent, port, totals, event))
}

/// The failure reason (or warning) of the answer to GET `path`.
pub fn failure(tracker: SocketAddr, path: &str) -> Option<String> {
    let (status, body) = http_get(tracker, path, Duration::from_secs(5)).expect("an answer");
    failure_of(path, status, &body)
}

/// A request to the site API on `port`, with its key: the status and the
/// body.
pub fn site_api(port: u16, method: &str, path: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = format!(
        "{method} /announce/{API_KEY}{path} HTTP/1.1\r\nHost: t\r\nContent-Type: \
         application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    let body = answer.split_once("\r\n\r\n").map_or("", |(_, b)| b);
    (answer[9..12].parse().unwrap(), body.to_string())
}

/// An answer's failure reason, or its warning as `warning: ...`, or None.
pub fn failure_of(path: &str, status: u16, body: &[u8]) -> Option<String> {
    assert_eq!(status, 200, "{path}: {}", String::from_utf8_lossy(body));
    let value = bencode::decode(body).expect("bencoded");
    let text = |key: &[u8]| {
        value
            .get(key)
            .map(|r| String::from_utf8_lossy(r.as_bytes().unwrap()).into_owned())
    };
    // A warning comes in a success-shaped answer, with no peers.
    text(b"failure reason").or_else(|| text(b"warning message").map(|w| format!("warning: {w}")))
}
