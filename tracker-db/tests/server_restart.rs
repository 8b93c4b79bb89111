//! The flusher through a real server stop and start (tests/mariadb.sh
//! stop/start, on the same data directory and port). A test binary of its
//! own: cargo runs test binaries one after another, so no other test sees
//! the server go away.

// clippy.toml lets #[test] functions unwrap and panic; the fixtures in
// support/ are plain functions of this test crate, and may as well.
#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing
)]

mod support;

use std::process::Command;
use std::time::{Duration, Instant};
use support::*;
use tracker_db::{Flusher, FlusherConfig};

fn server(action: &str) {
    let var = |name: &str| {
        std::env::var(name).unwrap_or_else(|_| {
            panic!(
                "{name} is not set: run the tests through tests/run.sh or tests/mariadb.sh setup"
            )
        })
    };
    let ctl = var("TRACKER_TEST_MARIADB_CTL");
    let mut command = Command::new(ctl);
    command.arg(action).arg(var("TRACKER_TEST_MARIADB_DATADIR"));
    if action == "start" {
        command.arg(var("TRACKER_TEST_MARIADB_PORT"));
    }
    let status = command.status().unwrap();
    assert!(status.success(), "tests/mariadb.sh {action}: {status}");
}

#[test]
fn deltas_wait_out_a_server_restart_and_land_once() {
    let db = TestDb::new();
    db.seed(2, 1);
    let mut config = FlusherConfig::new(db.url.clone(), "restart");
    config.interval = Duration::from_millis(50);
    config.backoff_min = Duration::from_millis(50);
    config.backoff_max = Duration::from_millis(200);
    config.db.connect_timeout = Duration::from_secs(2);
    config.db.io_timeout = Duration::from_secs(5);
    let handle = Flusher::spawn(config, Vec::new()).unwrap();
    handle.submit(credit(&[1], &[1], 10, T0));
    wait_until(Duration::from_secs(10), "the first flush", || {
        handle.stats().pending_rows == 0
    });

    server("stop");
    let restarted = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        for i in 0..5 {
            handle.submit(credit(&[1, 2], &[1], 1, T0 + i));
        }
        wait_until(
            Duration::from_secs(10),
            "the flusher sees the outage",
            || {
                let stats = handle.stats();
                stats.consecutive_failures >= 2 && !stats.reachable
            },
        );
    }));
    // Whatever happened, the server comes back for the tests after this.
    server("start");
    restarted.unwrap();

    wait_until(Duration::from_secs(20), "the deltas land", || {
        handle.stats().pending_rows == 0
    });
    let totals: Vec<(u32, u64)> = db.rows("SELECT id, uploaded FROM users ORDER BY id");
    assert_eq!(totals, vec![(1, 15), (2, 5)]);
    assert!(handle.stats().reachable);
    assert!(handle
        .stop(Instant::now() + Duration::from_secs(5))
        .is_empty());
}
