//! Metrics: every metric family, the samples workers take of their counters,
//! and the Prometheus text format (0.0.4) they are rendered in. The endpoint
//! that serves them is tracker-http's `metrics_endpoint`.
//!
//! Counters stay per worker and uncontended (see `stats`). A scrape asks every
//! worker for a snapshot over the mesh, as plain numbers tagged with static
//! descriptions, and renders them with a `worker` label; Prometheus sums
//! across workers (`sum without (worker) (...)`).

use std::fmt::Write as _;

/// Whether a family only grows or goes up and down.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Counter,
    Gauge,
}

/// One metric family: its name, help text and type, printed once per scrape.
#[derive(Debug)]
pub struct Family {
    pub name: &'static str,
    pub help: &'static str,
    pub kind: Kind,
}

/// A label name and value.
pub type Label = (&'static str, &'static str);

/// One value of one worker, with what it is: plain data that crosses the mesh.
#[derive(Clone, Copy, Debug)]
pub struct Sample {
    pub family: &'static Family,
    /// Labels the owner of the counters adds (the protocol of a service).
    pub scope: &'static [Label],
    /// The value's own labels.
    pub labels: &'static [Label],
    pub value: u64,
}

impl Sample {
    pub fn new(family: &'static Family, labels: &'static [Label], value: u64) -> Self {
        Sample {
            family,
            scope: &[],
            labels,
            value,
        }
    }
}

/// What a worker registers with its shard to be included in every scrape.
pub trait MetricSource {
    fn samples(&self, out: &mut Vec<Sample>);
}

macro_rules! families {
    ($($(#[$meta:meta])* $id:ident = $name:literal, $kind:ident, $help:literal;)*) => {
        $(
            $(#[$meta])*
            pub static $id: Family = Family { name: $name, help: $help, kind: Kind::$kind };
        )*
        /// Every family, in the order of this list.
        pub static ALL: &[&Family] = &[$(&$id),*];
    };
}

families! {
    /// Labels: protocol (udp, http, https), action (connect, announce,
    /// scrape), family (ipv4, ipv6).
    REQUESTS = "tracker_requests_total", Counter,
        "Requests received, by protocol, action and client address family.";
    /// Labels as for REQUESTS.
    RESPONSES = "tracker_responses_total", Counter,
        "Answers made to requests (error answers included), by protocol, action and client address family.";
    RECEIVED_BYTES = "tracker_received_bytes_total", Counter,
        "Bytes received from clients (UDP payloads, HTTP(S) bytes read), by protocol.";
    SENT_BYTES = "tracker_sent_bytes_total", Counter,
        "Bytes sent to clients (UDP payloads, HTTP(S) bytes written), by protocol.";
    /// Label: kind.
    UDP_ERRORS = "tracker_udp_errors_total", Counter,
        "UDP requests not served normally and failed sends, by kind.";
    UDP_ERROR_RESPONSES = "tracker_udp_error_responses_total", Counter,
        "UDP error answers sent.";
    /// Label: kind, and level (address, subnet, network) for address_limit.
    /// HTTP and HTTPS together.
    HTTP_ERRORS = "tracker_http_errors_total", Counter,
        "HTTP and HTTPS requests and connections not served normally, by kind.";
    HTTP_FAILURE_RESPONSES = "tracker_http_failure_responses_total", Counter,
        "HTTP and HTTPS answers carrying a failure reason.";
    HTTP_FULL_SCRAPES = "tracker_http_full_scrapes_total", Counter,
        "HTTP and HTTPS scrapes without info_hash (full scrapes) served.";
    /// Label: protocol (http, https).
    CONNECTIONS_ACCEPTED = "tracker_connections_accepted_total", Counter,
        "TCP connections accepted and served, by protocol.";
    /// Label: protocol (http, https).
    OPEN_CONNECTIONS = "tracker_open_connections", Gauge,
        "TCP connections open now, by protocol.";
    TLS_HANDSHAKES = "tracker_tls_handshakes_total", Counter,
        "TLS handshakes completed.";
    /// Label: kind (error, timeout).
    TLS_HANDSHAKE_FAILURES = "tracker_tls_handshake_failures_total", Counter,
        "TLS handshakes that failed or timed out, by kind.";
    /// Labels: protocol (udp, http, https), route (local, forwarded).
    ANNOUNCES_ROUTED = "tracker_announces_routed_total", Counter,
        "Announces answered by the worker that received them (route local) or sent to the worker that owns their torrent (forwarded), by protocol.";
    MESH_FORWARDED = "tracker_mesh_forwarded_total", Counter,
        "Requests sent to the worker owning their torrent.";
    MESH_SERVED = "tracker_mesh_served_total", Counter,
        "Requests from other workers answered as the owner of their torrent.";
    MESH_BACKPRESSURE = "tracker_mesh_backpressure_waits_total", Counter,
        "Sends to another worker that found the channel full and waited.";
    MESH_OVERLOADED = "tracker_mesh_overloaded_total", Counter,
        "Requests for other workers refused because too many awaited answers.";
    /// Label: component (udp, http, mesh).
    PANICS = "tracker_panics_total", Counter,
        "Panics contained to one request (the request failed, the worker went on), by component.";
    /// Label: kind (connection_limit, address_limit, evicted_idle, timeout).
    METRICS_ENDPOINT_ERRORS = "tracker_metrics_endpoint_errors_total", Counter,
        "Connections to the metrics endpoint refused, closed to make room, or timed out, by kind.";
    /// Label: outcome (admitted, flagged, too_soon, seed_list_limited,
    /// leech_list_limited, blacklisted,
    /// unknown_torrent, torrent_state, unknown_user, user_state,
    /// too_many_peers; stopped_peer_missing: a stop of a peer the worker did
    /// not know, admitted and credited from its row if there is one).
    PRIVATE_ANNOUNCES = "tracker_private_announces_total", Counter,
        "Private announces at their torrent's owner, by outcome: admitted ones (flagged counts those whose upload passed private.max_upload_rate and was not credited, too_soon those that came before private.min_announce_interval_percent of the announce interval and were answered no peers, seed_list_limited and leech_list_limited those answered without that kind of peer past the user's private.*_list_limits, slot_limited leechers past their group's download slots, answered no peers), and refused ones by why (tracker_full: past swarm.max_peers_per_torrent or swarm.max_peers_per_worker).";
    /// Label: direction (uploaded, downloaded: credited with factors;
    /// actual_uploaded, actual_downloaded: as reported).
    PRIVATE_CREDITED_BYTES = "tracker_private_bytes_total", Counter,
        "Bytes the applied flushes credited from private announces, by direction.";
    PRIVATE_SEEDTIME = "tracker_private_seedtime_seconds_total", Counter,
        "Seconds of seedtime the applied flushes added to history.";
    PRIVATE_PEERS_SUPERSEDED = "tracker_private_peers_superseded_total", Counter,
        "Peers whose announces here another tracker sharing the database had recorded later: nothing credited twice, their rows left as the other wrote them.";
    PRIVATE_ENTRIES_DROPPED = "tracker_private_entries_dropped_total", Counter,
        "Entries of accounting the database thread dropped past private.max_pending_entries or its per-user bound while the database was unreachable.";
    PRIVATE_LEDGER_PEERS = "tracker_private_ledger_peers", Gauge,
        "Peers the private ledger keeps accounts of.";
    PRIVATE_UNREGISTERED_DROPPED = "tracker_private_unregistered_dropped_total", Counter,
        "Rows of unregistered_info_hashes not written: past private.max_unregistered_per_flush in one flush of one worker, or past a user's private.max_unregistered_per_user_per_hour.";
    /// Label: outcome (applied, already_applied, failed, refused).
    PRIVATE_FLUSHES = "tracker_private_flushes_total", Counter,
        "Flushes of the accounting into the site's database, by outcome: already_applied counts retries whose commit had landed (a lost acknowledgement), failed counts attempts that did not commit, refused those of them that retrying cannot fix (a privilege or the schema).";
    PRIVATE_ROWS_SKIPPED = "tracker_private_rows_skipped_total", Counter,
        "Rows the applied flushes left out: their user or torrent was deleted on the site since the tracker read it.";
    PRIVATE_ROWS_WRITTEN = "tracker_private_rows_written_total", Counter,
        "Rows the applied flushes wrote (peers, history, users, torrents, unregistered_info_hashes).";
    PRIVATE_PENDING_ROWS = "tracker_private_pending_rows", Gauge,
        "Rows of accounting waiting for the database, merged per key; it grows with the active (user, torrent) pairs while the database is unreachable.";
    PRIVATE_LAST_FLUSH = "tracker_private_last_flush_timestamp_seconds", Gauge,
        "Unix time of the last flush that reached the database; 0 before the first.";
    PRIVATE_DATABASE_UP = "tracker_private_database_up", Gauge,
        "1 when the last attempt reached the site's database, else 0.";
    /// Label: outcome (ok, bad_request, not_found, wrong_key, too_large,
    /// timeout, connection_limit).
    SITE_API_REQUESTS = "tracker_site_api_requests_total", Counter,
        "Requests to the private site API, by outcome; wrong_key counts paths whose key did not match.";
    /// Label: kind (torrent_refused, peer_not_stored, peers_per_address,
    /// peers_per_network, torrent_budget, torrent_evicted).
    STORE_FULL = "tracker_store_full_total", Counter,
        "Announces the swarm store could not take in full because a limit was reached, and torrents it dropped to make room for new ones when full (torrent_evicted), by kind.";
    TORRENTS = "tracker_torrents", Gauge,
        "Torrents stored (in private mode, the torrents with peers accounted).";
    /// Label: role (seeder, leecher).
    PEERS = "tracker_peers", Gauge,
        "Peers stored, by role; expired peers count until the clean-up reaches them (in private mode, the visible peers accounted).";
    /// Label: result (saved, failed). Exported by worker 0 alone: snapshots
    /// are the process's, not a worker's.
    SNAPSHOTS = "tracker_snapshots_total", Counter,
        "Snapshots of the swarms taken while serving: written to the state file (saved), or given up (failed: the file could not be written, or a worker did not hand in its part in time).";
    SNAPSHOT_LAST_SAVED = "tracker_snapshot_last_saved_timestamp_seconds", Gauge,
        "Unix time at which the last snapshot was written (0: none yet).";
    SNAPSHOT_DURATION = "tracker_snapshot_duration_milliseconds", Gauge,
        "How long the last snapshot written took, from its start to the file in place.";
    /// Label: protocol (ws, wss).
    WS_UPGRADES = "tracker_websocket_upgrades_total", Counter,
        "HTTP(S) connections upgraded to WebSocket (WebTorrent), by protocol.";
    /// Label: protocol (ws, wss).
    WS_OPEN = "tracker_websocket_connections", Gauge,
        "WebSocket connections open now, by protocol.";
    /// Label: action (announce, answer, scrape, invalid).
    WS_MESSAGES = "tracker_websocket_messages_total", Counter,
        "WebSocket messages received, by action (an announce carrying an answer counts as answer; invalid: refused as malformed or past a limit).";
    /// Label: kind (offer, answer).
    WS_RELAYED = "tracker_websocket_relayed_total", Counter,
        "WebRTC offers and answers handed to the connection of the peer they were for.";
    /// Label: reason (mesh_full, connection_gone, queue_full, unknown_offer, no_service).
    WS_RELAYS_DROPPED = "tracker_websocket_relays_dropped_total", Counter,
        "WebRTC offers and answers not delivered, by reason: the channel to the worker was full, the connection had gone, its queue was full, or an answer matched no offer made to its sender (unknown or expired).";
    /// Label: kind.
    WS_ERRORS = "tracker_websocket_errors_total", Counter,
        "WebSocket messages and connections not served normally, by kind.";
    WEBRTC_TORRENTS = "tracker_webrtc_torrents", Gauge,
        "Torrents with WebRTC (WebTorrent) peers stored.";
    /// Label: role (seeder, leecher).
    WEBRTC_PEERS = "tracker_webrtc_peers", Gauge,
        "WebRTC (WebTorrent) peers stored, by role.";
    SNAPSHOT_SLOWEST_STEP = "tracker_snapshot_slowest_step_microseconds", Gauge,
        "The longest a worker's requests waited behind one step of the last snapshot written (one segment of its torrents).";
}

/// Appends the scrape of all workers (each with its index) in the Prometheus
/// text format 0.0.4: every family once, with HELP and TYPE before its
/// samples, and all its samples together, worker by worker.
pub fn render(workers: &[(usize, Vec<Sample>)], out: &mut String) {
    // Families in the order they first appear, and each sample's place.
    let mut families: Vec<&'static Family> = Vec::new();
    let mut rows: Vec<(usize, usize, usize)> = Vec::new();
    for (w, (_, samples)) in workers.iter().enumerate() {
        for (i, sample) in samples.iter().enumerate() {
            let f = match families.iter().position(|f| f.name == sample.family.name) {
                Some(f) => f,
                None => {
                    families.push(sample.family);
                    families.len() - 1
                }
            };
            rows.push((f, w, i));
        }
    }
    rows.sort_unstable();
    let mut last = usize::MAX;
    for (f, w, i) in rows {
        // Positions this loop built above: each names a family and a sample.
        let (Some(&family), Some((worker, samples))) = (families.get(f), workers.get(w)) else {
            continue;
        };
        let Some(sample) = samples.get(i) else {
            continue;
        };
        if f != last {
            last = f;
            out.push_str("# HELP ");
            out.push_str(family.name);
            out.push(' ');
            escape_help(family.help, out);
            out.push_str("\n# TYPE ");
            out.push_str(family.name);
            out.push_str(match family.kind {
                Kind::Counter => " counter\n",
                Kind::Gauge => " gauge\n",
            });
        }
        let _ = write!(out, "{}{{worker=\"{worker}\"", family.name);
        for (name, value) in sample.scope.iter().chain(sample.labels) {
            out.push(',');
            out.push_str(name);
            out.push_str("=\"");
            escape_label_value(value, out);
            out.push('"');
        }
        let _ = writeln!(out, "}} {}", sample.value);
    }
}

/// HELP text escapes backslash and line feed.
fn escape_help(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            c => out.push(c),
        }
    }
}

/// Label values also escape the double quote.
fn escape_label_value(text: &str, out: &mut String) {
    for c in text.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '"' => out.push_str("\\\""),
            c => out.push(c),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    static TEST: Family = Family {
        name: "tracker_test_total",
        help: "A \\ test\nwith two lines.",
        kind: Kind::Counter,
    };

    #[test]
    fn families_group_with_help_and_type_once_and_workers_in_order() {
        let worker = |udp: u64, torrents: u64| {
            vec![
                Sample {
                    family: &REQUESTS,
                    scope: &[("protocol", "udp")],
                    labels: &[("action", "connect"), ("family", "ipv4")],
                    value: udp,
                },
                Sample::new(&TORRENTS, &[], torrents),
                Sample {
                    family: &REQUESTS,
                    scope: &[("protocol", "http")],
                    labels: &[("action", "announce"), ("family", "ipv6")],
                    value: 7,
                },
            ]
        };
        let mut out = String::new();
        render(&[(0, worker(1, 10)), (1, worker(2, 20))], &mut out);
        let expected = "\
# HELP tracker_requests_total Requests received, by protocol, action and client address family.
# TYPE tracker_requests_total counter
tracker_requests_total{worker=\"0\",protocol=\"udp\",action=\"connect\",family=\"ipv4\"} 1
tracker_requests_total{worker=\"0\",protocol=\"http\",action=\"announce\",family=\"ipv6\"} 7
tracker_requests_total{worker=\"1\",protocol=\"udp\",action=\"connect\",family=\"ipv4\"} 2
tracker_requests_total{worker=\"1\",protocol=\"http\",action=\"announce\",family=\"ipv6\"} 7
# HELP tracker_torrents Torrents stored (in private mode, the torrents with peers accounted).
# TYPE tracker_torrents gauge
tracker_torrents{worker=\"0\"} 10
tracker_torrents{worker=\"1\"} 20
";
        assert_eq!(out, expected);
    }

    #[test]
    fn help_and_label_values_are_escaped() {
        let mut out = String::new();
        let sample = Sample::new(&TEST, &[("path", "C:\\x \"y\"\nz")], u64::MAX);
        render(&[(3, vec![sample])], &mut out);
        assert_eq!(
            out,
            "# HELP tracker_test_total A \\\\ test\\nwith two lines.\n\
             # TYPE tracker_test_total counter\n\
             tracker_test_total{worker=\"3\",path=\"C:\\\\x \\\"y\\\"\\nz\"} 18446744073709551615\n"
        );
    }

    #[test]
    fn nothing_renders_as_nothing() {
        let mut out = String::new();
        render(&[(0, Vec::new())], &mut out);
        assert_eq!(out, "");
    }

    #[test]
    fn family_names_are_prometheus_names_and_unique() {
        let mut names: Vec<&str> = ALL.iter().map(|f| f.name).collect();
        for family in ALL {
            let name = family.name;
            assert!(name.starts_with("tracker_"), "{name}");
            assert!(
                name.bytes().all(|b| b.is_ascii_lowercase() || b == b'_'),
                "{name}"
            );
            assert_eq!(
                name.ends_with("_total"),
                family.kind == Kind::Counter,
                "counters and only counters end in _total: {name}"
            );
            assert!(family.help.ends_with('.'), "{name}");
        }
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), ALL.len());
    }
}
