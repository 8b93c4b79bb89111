//! What `load-test compare` does differently for the WebSocket load
//! (`--target ws://...` or `wss://...`): our tracker serves WebSocket on its
//! HTTP (ws) or HTTPS (wss) listener, with room for every connection of the
//! load; the descriptors for them are raised before any tracker starts (it
//! inherits the limit); the load is `load-test ws`.

use std::net::SocketAddr;

use crate::config::Config;
use crate::stats::Summary;
use crate::ws_session::WsTarget;

/// The target's address and whether it is wss.
pub(super) fn parse(target: &str) -> Result<(SocketAddr, bool), String> {
    let t = WsTarget::parse(target)?;
    Ok((t.addr, t.tls))
}

/// Our tracker's flag for the listener under test.
pub(super) fn tracker_flag(tls: bool) -> &'static str {
    if tls {
        "--https"
    } else {
        "--http"
    }
}

/// The part of our tracker's config for a WebSocket load: every listener but
/// the one under test off, room on each worker for every connection of the
/// load (the kernel spreads them over the workers unevenly), and for the
/// torrents each announces in (a connection of the load carries the peers
/// of many browsers, each of which announces a few).
pub(super) fn tracker_toml(tls: bool, config: &Config) -> String {
    let off = if tls {
        "[udp]\nlisten = []\n[http]\nlisten = []\n"
    } else {
        "[udp]\nlisten = []\n[http]\nhttps_listen = []\n"
    };
    let room = (config.ws.connections as usize + 1024).max(8192);
    format!(
        "{off}max_connections_per_worker = {room}\n\
         [websocket]\nmax_torrents_per_connection = 100000\n"
    )
}

/// The run's name in the table's title.
pub(super) fn title(tls: bool) -> &'static str {
    if tls {
        "WebSocket over TLS (wss)"
    } else {
        "WebSocket (ws)"
    }
}

/// Before the first tracker starts: descriptors for the load's connections,
/// in this process and in the trackers that inherit its limit.
pub(super) fn prepare(config: &Config) -> Result<(), String> {
    crate::ws::raise_file_limit(u64::from(config.ws.connections) + 256)
}

/// One run of the load.
pub(super) fn measure(config: &Config) -> Result<Summary, String> {
    crate::ws::run(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn our_tracker_serves_the_listener_under_test_with_room_for_the_load() {
        let mut config = Config::default();
        config.ws.connections = 50_000;
        let toml = tracker_toml(true, &config);
        assert!(toml.contains("[http]\nlisten = []\n"), "{toml}");
        assert!(
            toml.contains("max_connections_per_worker = 51024\n"),
            "{toml}"
        );
        assert!(
            toml.ends_with("max_torrents_per_connection = 100000\n"),
            "{toml}"
        );
        config.ws.connections = 10;
        let toml = tracker_toml(false, &config);
        assert!(toml.contains("https_listen = []"), "{toml}");
        assert!(
            toml.contains("max_connections_per_worker = 8192\n"),
            "{toml}"
        );
        assert_eq!(tracker_flag(true), "--https");
        assert!(!parse("ws://127.0.0.1:3000").unwrap().1);
        assert!(parse("http://127.0.0.1:3000").is_err());
    }
}
