//! Restarts without losing swarms: SIGTERM or SIGINT saves every swarm and
//! completed count to the state file and exits 0, and the next start, with
//! any worker count, serves them again; a damaged state file is reported and
//! the tracker starts empty.

mod support;

use std::collections::BTreeSet;
use std::io::Read;
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::{Duration, Instant};

use support::tempfile_path::TempPath;
use support::udp_client::Client;
use support::wire::{announce_request, hash_owned_by, http_get_ok, target};
use support::Tracker;
use tracker_proto::http::bencode::{decode, Value};
use tracker_proto::http::write_scrape_target;
use tracker_proto::{AnnounceEvent, InfoHash};
use tracker_swarm::state::StateFile;

/// An HTTP announce from 127.0.0.1:`port`; the peers handed back.
fn http_announce(
    addr: SocketAddr,
    hash: InfoHash,
    port: u16,
    left: u64,
    event: AnnounceEvent,
) -> BTreeSet<u16> {
    let body = http_get_ok(addr, &target(&announce_request(hash, port, left, event)));
    let value = decode(&body).unwrap();
    let Some(Value::Bytes(peers)) = value.get(b"peers") else {
        panic!("no peers in {:?}", String::from_utf8_lossy(&body));
    };
    peers
        .chunks(6)
        .map(|p| u16::from_be_bytes([p[4], p[5]]))
        .collect()
}

/// `[seeders, completed, leechers]` of each hash, by an HTTP scrape.
fn http_scrape(addr: SocketAddr, hashes: &[InfoHash]) -> Vec<[i64; 3]> {
    let mut out = Vec::new();
    write_scrape_target(&mut out, hashes);
    let body = http_get_ok(addr, std::str::from_utf8(&out).unwrap());
    let value = decode(&body).unwrap();
    let Some(Value::Dict(files)) = value.get(b"files") else {
        panic!("no files in {:?}", String::from_utf8_lossy(&body));
    };
    hashes
        .iter()
        .map(|h| {
            let stats = files
                .iter()
                .find(|(k, _)| *k == &h.0[..])
                .map(|(_, v)| v)
                .expect("every hash scraped");
            let n = |k: &[u8]| stats.get(k).and_then(Value::as_int).unwrap();
            [n(b"complete"), n(b"downloaded"), n(b"incomplete")]
        })
        .collect()
}

fn start(workers: usize, state: &Path) -> Tracker {
    Tracker::builder()
        .runtime_args(&["--workers", &workers.to_string(), "--no-pin"])
        .udp(None)
        .http(None)
        .state_file(state)
        .start()
}

/// Sends `signal` and waits for the exit; the exit code and the log.
fn stop(tracker: Tracker, signal: i32) -> (Option<i32>, String) {
    tracker.signal(signal);
    tracker.wait_exit(Duration::from_secs(20))
}

#[test]
fn swarms_survive_sigterm_and_sigint_and_restarts_on_other_worker_counts() {
    let state = TempPath::new("tracker-test-restart", "state");
    let tracker = start(2, &state.0);
    let http = tracker.http[0];
    // One torrent on each worker; peers over HTTP and UDP, seeders that
    // completed, leechers.
    let hashes = [hash_owned_by(0, 2, 1), hash_owned_by(1, 2, 2)];
    let mut udp = Client::new("127.0.0.1:0", tracker.udp[0]);
    for (n, hash) in hashes.iter().enumerate() {
        let base = 1000 * (n as u16 + 1);
        http_announce(http, *hash, base + 1, 0, AnnounceEvent::Completed);
        http_announce(http, *hash, base + 2, 5, AnnounceEvent::Started);
        udp.announce(*hash, base + 3, AnnounceEvent::Completed, 0, -1);
        udp.announce(*hash, base + 4, AnnounceEvent::Started, 0, -1);
    }
    let before = http_scrape(http, &hashes);
    assert_eq!(before, [[3, 2, 1], [3, 2, 1]]);
    let peers_before: Vec<BTreeSet<u16>> = hashes
        .iter()
        .map(|h| http_announce(http, *h, 9, 1, AnnounceEvent::Started))
        .collect();
    let before = http_scrape(http, &hashes);
    assert_eq!(before, [[3, 2, 2], [3, 2, 2]]);

    let (code, log) = stop(tracker, libc::SIGTERM);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("saved 2 torrents and 10 peers"), "{log}");
    assert!(Path::new(&state.0).exists());

    // The same worker count, stopped with SIGINT this time; then three
    // workers and one: the torrents move to other owners.
    for (workers, signal) in [(2, libc::SIGINT), (3, libc::SIGTERM), (1, libc::SIGTERM)] {
        let tracker = start(workers, &state.0);
        let http = tracker.http[0];
        assert_eq!(http_scrape(http, &hashes), before, "{workers} workers");
        let mut udp = Client::new("127.0.0.1:0", tracker.udp[0]);
        let stats = udp.scrape(&hashes);
        assert_eq!(
            stats
                .iter()
                .map(|s| [s.seeders, s.completed, s.leechers])
                .collect::<Vec<_>>(),
            [[3, 2, 2], [3, 2, 2]]
        );
        // The peers themselves are back, not only their counts: a new peer
        // gets them (and then leaves, so the counts stay as they were).
        for (hash, peers) in hashes.iter().zip(&peers_before) {
            let got = http_announce(http, *hash, 77, 1, AnnounceEvent::Started);
            let expected: BTreeSet<u16> = peers.iter().copied().chain([9]).collect();
            assert_eq!(got, expected, "{workers} workers");
            http_announce(http, *hash, 77, 1, AnnounceEvent::Stopped);
        }
        let (code, log) = stop(tracker, signal);
        assert_eq!(code, Some(0), "{workers} workers: {log}");
        assert!(log.contains("restored 2 torrents and 10 peers"), "{log}");
        assert!(log.contains("saved 2 torrents and 10 peers"), "{log}");
    }
}

#[test]
fn a_stop_does_not_wait_for_idle_connections_and_a_second_signal_exits_at_once() {
    let state = TempPath::new("tracker-test-idle", "state");
    let tracker = Tracker::builder()
        .http(None)
        .state_file(&state.0)
        .config("[state]\ndrain_timeout_secs = 60\n")
        .start();
    let mut idle = TcpStream::connect(tracker.http[0]).unwrap();
    idle.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let started = Instant::now();
    let (code, log) = stop(tracker, libc::SIGTERM);
    assert_eq!(code, Some(0), "{log}");
    assert!(
        started.elapsed() < Duration::from_secs(5),
        "an idle keep-alive connection held the stop for {:?}",
        started.elapsed()
    );
    assert_eq!(idle.read(&mut [0u8; 16]).unwrap_or(0), 0, "closed");
    assert!(StateFile::parse(&std::fs::read(&state.0).unwrap()).is_ok());

    // A second signal while the first still drains exits at once, without
    // saving: the file keeps what the first tracker saved. A connection
    // closed by the stop lingers up to a second for its client to close,
    // which this one never does: that holds the drain.
    let tracker = Tracker::builder()
        .http(None)
        .state_file(&state.0)
        .config("[state]\ndrain_timeout_secs = 60\n")
        .start();
    http_announce(
        tracker.http[0],
        InfoHash([5; 20]),
        1,
        0,
        AnnounceEvent::Started,
    );
    let _idle = TcpStream::connect(tracker.http[0]).unwrap();
    std::thread::sleep(Duration::from_millis(100));
    tracker.signal(libc::SIGTERM);
    // Apart, so that the kernel does not merge them into one pending signal.
    std::thread::sleep(Duration::from_millis(400));
    tracker.signal(libc::SIGTERM);
    let (code, log) = tracker.wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(128 + libc::SIGTERM), "{log}");
    assert!(log.contains("SIGTERM again: exiting at once"), "{log}");
    let file = std::fs::read(&state.0).unwrap();
    assert_eq!(StateFile::parse(&file).unwrap().torrents, 0);
}

#[test]
fn a_damaged_state_file_is_reported_and_the_tracker_starts_empty() {
    let state = TempPath::new("tracker-test-damaged", "state");
    let hash = InfoHash([7; 20]);
    let tracker = start(1, &state.0);
    http_announce(tracker.http[0], hash, 1, 0, AnnounceEvent::Completed);
    let (code, log) = stop(tracker, libc::SIGTERM);
    assert_eq!(code, Some(0), "{log}");
    let good = std::fs::read(&state.0).unwrap();

    let mut flipped = good.clone();
    flipped[good.len() / 2] ^= 0x10;
    let mut other_version = good.clone();
    other_version[8] = 99;
    let cases: [(&str, Vec<u8>, &str); 4] = [
        (
            "garbage",
            b"this is not a state file at all\n".to_vec(),
            "not a tracker state file",
        ),
        ("truncated", good[..good.len() - 9].to_vec(), "truncated"),
        ("flipped byte", flipped, "checksum mismatch"),
        ("newer version", other_version, "format version 99"),
    ];
    for (what, bytes, reason) in cases {
        std::fs::write(&state.0, &bytes).unwrap();
        let tracker = start(1, &state.0);
        // It serves, and it started empty.
        assert_eq!(http_scrape(tracker.http[0], &[hash]), [[0, 0, 0]], "{what}");
        http_announce(tracker.http[0], hash, 2, 5, AnnounceEvent::Started);
        let (code, log) = stop(tracker, libc::SIGTERM);
        assert_eq!(code, Some(0), "{what}: {log}");
        let named = format!("state file {}: ", state.0.display());
        assert!(
            log.lines()
                .any(|l| l.contains("WARN") && l.contains(&named) && l.contains(reason)),
            "{what}: no warning naming the file and `{reason}`: {log}"
        );
        // The stop replaced it with a good file of what was served since.
        let saved = std::fs::read(&state.0).unwrap();
        let file = StateFile::parse(&saved).expect("a good file after the stop");
        assert_eq!(file.torrents, 1, "{what}");
    }
}

#[test]
fn an_empty_state_path_turns_saving_off() {
    let tracker = Tracker::builder()
        .http(None)
        .state_file(Path::new(""))
        .start();
    http_announce(
        tracker.http[0],
        InfoHash([3; 20]),
        1,
        0,
        AnnounceEvent::Started,
    );
    let (code, log) = stop(tracker, libc::SIGINT);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("the swarms are not saved"), "{log}");
    assert!(!log.contains("none yet"), "nothing looked for: {log}");
}

/// Snapshots every second: after one taken since the announces, a SIGKILL
/// loses nothing, and the restarted tracker serves the swarms again.
#[test]
fn a_sigkill_after_a_snapshot_loses_no_swarm() {
    let state = TempPath::new("tracker-test-snapshot", "state");
    let tracker = Tracker::builder()
        .udp(None)
        .http(None)
        .metrics()
        .config("[state]\nsnapshot_interval_secs = 1\n")
        .state_file(&state.0)
        .start();
    let http = tracker.http[0];
    let hashes = [hash_owned_by(0, 2, 1), hash_owned_by(1, 2, 2)];
    let mut udp = Client::new("127.0.0.1:0", tracker.udp[0]);
    for (n, hash) in hashes.iter().enumerate() {
        let base = 1000 * (n as u16 + 1);
        http_announce(http, *hash, base + 1, 0, AnnounceEvent::Completed);
        udp.announce(*hash, base + 2, AnnounceEvent::Started, 5, -1);
    }
    let before = http_scrape(http, &hashes);
    assert_eq!(before, [[1, 1, 1], [1, 1, 1]]);
    // A round that began before the announces may leave them out: wait for
    // the one after it.
    let saved = tracker.metric("tracker_snapshots_total", &[("result", "saved")]);
    let deadline = Instant::now() + Duration::from_secs(20);
    while tracker.metric("tracker_snapshots_total", &[("result", "saved")]) < saved + 2 {
        assert!(Instant::now() < deadline, "no snapshot in 20 s");
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(
        tracker.metric("tracker_snapshots_total", &[("result", "failed")]),
        0
    );
    let saved_at = tracker.metric("tracker_snapshot_last_saved_timestamp_seconds", &[]);
    assert!(saved_at > 1_700_000_000, "{saved_at}");
    let file = std::fs::read(&state.0).unwrap();
    assert_eq!(StateFile::parse(&file).unwrap().torrents, 2);

    let (code, _) = stop(tracker, libc::SIGKILL);
    assert_eq!(code, None, "killed, not exited");
    let tracker = start(3, &state.0);
    assert_eq!(http_scrape(tracker.http[0], &hashes), before);
    let (code, log) = stop(tracker, libc::SIGTERM);
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("restored 2 torrents and 4 peers"), "{log}");
}
