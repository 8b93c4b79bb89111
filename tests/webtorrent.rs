//! End to end with real WebTorrent clients over the WebSocket tracker
//! protocol (`ws://` on the HTTP listener, `wss://` on the HTTPS one).
//!
//! - tests/webtorrent/transfer.mjs: two headless Chromium processes run
//!   WebTorrent's browser bundle; one seeds a random file, the other gets only
//!   its info-hash and the tracker's URL, and must download the same bytes
//!   over WebRTC from the peer the tracker introduced.
//! - tests/webtorrent/protocol.mjs: webtorrent's tracker client
//!   (bittorrent-tracker's `Client`, one process per peer) through each step
//!   of the protocol: offers relayed, the answer relayed back, counts in
//!   announce answers and scrapes through `completed` and `stopped`, errors
//!   for messages that are not valid requests.
//!
//! Needs node and npm, Debian's chromium and libnss3-tools (certutil, for the
//! test CA that the browsers trust for wss://), and tests/webtorrent's
//! node_modules (`npm ci --ignore-scripts` there). tests/run.sh installs all
//! of them. Without them these tests fail; they never pass silently.

mod support;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Mutex;
use std::time::Duration;
use support::{tempfile_path::TempPath, TestCert, Tracker};

const NODE: &str = "node";
const CHROMIUM: &str = "/usr/lib/chromium/chromium";
/// The scripts' own limit; the process group is killed a while after that.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(30);
const KILL_AFTER: Duration = Duration::from_secs(45);

/// One browser transfer at a time: two Chromium processes each are enough for
/// the small machines the suite runs on.
static BROWSERS: Mutex<()> = Mutex::new(());

fn webtorrent_dir() -> PathBuf {
    support::repo_root().join("tests/webtorrent")
}

/// Fails the test unless node runs and tests/webtorrent's packages are
/// installed.
fn require_node() {
    match Command::new(NODE)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {
            eprintln!("node {}", String::from_utf8_lossy(&out.stdout).trim());
        }
        Ok(out) => panic!(
            "`{NODE} --version` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!(
            "cannot run {NODE} ({e}); install node and npm (tests/run.sh does: \
             `apt-get install nodejs npm`)"
        ),
    }
    let dir = webtorrent_dir();
    let missing: Vec<&str> = [
        "webtorrent/dist/webtorrent.min.js",
        "bittorrent-tracker/package.json",
        "puppeteer-core/package.json",
        "ws/package.json",
    ]
    .into_iter()
    .filter(|p| !dir.join("node_modules").join(p).exists())
    .collect();
    assert!(
        missing.is_empty(),
        "{}/node_modules lacks {missing:?}; run `npm ci --ignore-scripts` there \
         (tests/run.sh does)",
        dir.display()
    );
}

/// Fails the test unless Debian's chromium and certutil are installed.
fn require_browser() {
    match Command::new(CHROMIUM)
        .args(["--headless=new", "--no-sandbox", "--version"])
        .stdin(Stdio::null())
        .output()
    {
        Ok(out) if out.status.success() => {
            eprintln!("{}", String::from_utf8_lossy(&out.stdout).trim());
        }
        Ok(out) => panic!(
            "`{CHROMIUM} --version` failed: {}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => panic!("cannot run {CHROMIUM} ({e}); run `apt-get install chromium`"),
    }
    if let Err(e) = Command::new("certutil")
        .arg("-H")
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
    {
        panic!("cannot run certutil ({e}); run `apt-get install libnss3-tools`");
    }
}

/// Runs `node tests/webtorrent/<script>` with these arguments in a process
/// group of its own (the browsers it starts are in it too), killed whole if
/// it outlives [`KILL_AFTER`]. Returns whether it exited with status 0 and
/// printed `"ok":true`, and all it wrote.
fn run_node(script: &str, args: &[String]) -> (bool, String) {
    let mut cmd = Command::new(NODE);
    cmd.arg(webtorrent_dir().join(script))
        .args(args)
        .arg("--timeout")
        .arg(SCRIPT_TIMEOUT.as_secs().to_string())
        .current_dir(support::repo_root());
    let run = support::run_script(cmd, KILL_AFTER);
    let ok = run.succeeded() && run.stdout.contains("\"ok\":true");
    (ok, run.report(script))
}

/// The test CA's certificate in a file, for `--ca`.
fn ca_file(tracker: &Tracker) -> TempPath {
    let tls = tracker.tls.as_ref().expect("a tracker with HTTPS");
    let file = TempPath::new("tracker-test-ca", "pem");
    std::fs::write(&file.0, &tls.cert.root_pem).unwrap();
    file
}

/// A tracker serving plain HTTP (ws://), HTTPS (wss://, with a certificate
/// from a test CA) and metrics.
fn ws_tracker() -> Tracker {
    Tracker::builder()
        .http(None)
        .https(None)
        .tls_cert(TestCert::signed_by_test_ca())
        .metrics()
        .start()
}

fn ws_url(tracker: &Tracker, path: &str) -> String {
    format!("ws://127.0.0.1:{}{path}", tracker.http[0].port())
}

/// By name, which the certificate carries and the browsers resolve to
/// loopback on their own.
fn wss_url(tracker: &Tracker, path: &str) -> String {
    format!("wss://localhost:{}{path}", tracker.https[0].port())
}

/// Fails with the script's output and the tracker's log unless `ok`, or if
/// the tracker is gone.
fn assert_ran(ok: bool, what: &str, output: &str, mut tracker: Tracker) -> Tracker {
    let running = tracker.is_running();
    if ok && running {
        println!("{output}");
        return tracker;
    }
    let log = tracker.stop();
    panic!(
        "{what}: {}\n{output}--- tracker log (TRACKER_TEST_LOG=1 shows it live; \
         RUST_LOG=debug for more) ---\n{log}",
        if running {
            "failed"
        } else {
            "the tracker EXITED"
        }
    );
}

/// The tracker's metrics answer after the transfer. Which series there are
/// is left to tests/metrics.rs; the WebSocket ones are printed.
fn check_metrics(tracker: &Tracker) {
    let addr = tracker.metrics.unwrap();
    match support::wire::http_get(addr, "/metrics", Duration::from_secs(5)) {
        Some((200, body)) => {
            let text = String::from_utf8_lossy(&body);
            assert!(!text.trim().is_empty(), "empty /metrics from {addr}");
            for line in text.lines().filter(|l| {
                let l = l.to_ascii_lowercase();
                !l.starts_with('#') && (l.contains("websocket") || l.contains("ws_"))
            }) {
                println!("metrics: {line}");
            }
        }
        other => panic!("GET /metrics from {addr}: {other:?}"),
    }
}

/// Two browsers, the seeder announcing to `seeder` and the leecher to
/// `leecher`, move a file through `tracker`.
fn browsers_transfer(tracker: Tracker, seeder: String, leecher: String, ca: Option<&Path>) {
    require_node();
    require_browser();
    let mut args = vec!["--tracker".into(), seeder.clone()];
    if leecher != seeder {
        args.extend(["--tracker".into(), leecher.clone()]);
    }
    if let Some(ca) = ca {
        args.extend(["--ca".into(), ca.display().to_string()]);
    }
    let (ok, output) = {
        let _one_at_a_time = BROWSERS.lock().unwrap_or_else(|e| e.into_inner());
        run_node("transfer.mjs", &args)
    };
    let tracker = assert_ran(
        ok,
        &format!("no WebTorrent transfer from a seeder on {seeder} to a leecher on {leecher}"),
        &output,
        tracker,
    );
    check_metrics(&tracker);
}

/// ws:// on /announce, the path in most torrents' announce lists.
#[test]
fn browsers_transfer_a_file_over_ws_announce() {
    let tracker = ws_tracker();
    let url = ws_url(&tracker, "/announce");
    browsers_transfer(tracker, url.clone(), url, None);
}

/// ws:// with no path: the browser asks for `/` (webtorrent's client strips
/// a trailing slash itself).
#[test]
fn browsers_transfer_a_file_over_ws_without_a_path() {
    let tracker = ws_tracker();
    let url = ws_url(&tracker, "");
    browsers_transfer(tracker, url.clone(), url, None);
}

/// wss:// on the HTTPS listener, its certificate from a CA the browsers
/// trust (not one whose errors they ignore).
#[test]
fn browsers_transfer_a_file_over_wss() {
    let tracker = ws_tracker();
    let ca = ca_file(&tracker);
    let url = wss_url(&tracker, "/announce");
    browsers_transfer(tracker, url.clone(), url, Some(&ca.0));
}

/// A seeder on ws:// and a leecher on wss:// of one tracker: one swarm
/// behind both listeners.
#[test]
fn wss_leecher_finds_a_ws_seeder() {
    let tracker = ws_tracker();
    let ca = ca_file(&tracker);
    let seeder = ws_url(&tracker, "/announce");
    let leecher = wss_url(&tracker, "/announce");
    browsers_transfer(tracker, seeder, leecher, Some(&ca.0));
}

fn protocol_checks(tracker: Tracker, url: String, ca: Option<&Path>) {
    require_node();
    let mut args = vec!["--tracker".into(), url.clone()];
    if let Some(ca) = ca {
        args.extend(["--ca".into(), ca.display().to_string()]);
    }
    let (ok, output) = run_node("protocol.mjs", &args);
    let tracker = assert_ran(
        ok,
        &format!("the WebSocket protocol's steps through {url}"),
        &output,
        tracker,
    );
    check_metrics(&tracker);
}

#[test]
fn protocol_steps_over_ws() {
    let tracker = ws_tracker();
    let url = ws_url(&tracker, "/announce");
    protocol_checks(tracker, url, None);
}

#[test]
fn protocol_steps_over_wss() {
    let tracker = ws_tracker();
    let ca = ca_file(&tracker);
    let url = wss_url(&tracker, "/announce");
    protocol_checks(tracker, url, Some(&ca.0));
}
