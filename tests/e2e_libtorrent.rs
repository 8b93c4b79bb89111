//! End to end with a real BitTorrent client: a libtorrent seeder and leecher
//! (tests/e2e/swarm.py) that find each other only through the real tracker
//! binary complete a download.
//!
//! Needs Debian's python3-libtorrent for /usr/bin/python3:
//! `apt-get install python3-libtorrent`. Without it this test fails (it never
//! passes silently).

mod support;

use std::process::{Command, Stdio};
use std::time::Duration;
use support::Tracker;

const PYTHON: &str = "/usr/bin/python3";
/// The script's own limit; the process is killed a while after that.
const SCRIPT_TIMEOUT: Duration = Duration::from_secs(90);
const KILL_AFTER: Duration = Duration::from_secs(120);

/// Fails the test unless /usr/bin/python3 can import libtorrent.
fn require_libtorrent() {
    let out = Command::new(PYTHON)
        .args(["-c", "import libtorrent; print(libtorrent.__version__)"])
        .stdin(Stdio::null())
        .output();
    match out {
        Ok(out) if out.status.success() => {
            eprintln!(
                "libtorrent {} ({PYTHON})",
                String::from_utf8_lossy(&out.stdout).trim()
            );
        }
        Ok(out) => panic!(
            "{PYTHON} cannot import libtorrent; run `apt-get install python3-libtorrent`\n{}",
            String::from_utf8_lossy(&out.stderr)
        ),
        Err(e) => {
            panic!("cannot run {PYTHON} ({e}); run `apt-get install python3 python3-libtorrent`")
        }
    }
}

/// Runs tests/e2e/swarm.py with these arguments; returns (success, output).
fn run_swarm(args: &[String]) -> (bool, String) {
    let mut cmd = Command::new(PYTHON);
    cmd.arg(support::repo_root().join("tests/e2e/swarm.py"))
        .args(args)
        .arg("--timeout")
        .arg(SCRIPT_TIMEOUT.as_secs().to_string())
        .current_dir(support::repo_root());
    let run = support::run_script(cmd, KILL_AFTER);
    (run.succeeded(), run.report("swarm.py"))
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
