//! The `load-test` binary end to end against a tiny in-test BEP 15 responder:
//! flags, the config file, the JSON summary, and refusals.

use std::net::{SocketAddr, UdpSocket};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tracker_proto::udp::{
    write_announce_response, write_connect_response, write_error_response, write_scrape_response,
    ConnectionId, Request,
};
use tracker_proto::ScrapeStats;

const ID: ConnectionId = ConnectionId(0x1234);

/// Answers connects, announces (no peers) and scrapes on 127.0.0.1 until
/// dropped; an announce or scrape with another connection id gets an error.
struct Responder {
    addr: SocketAddr,
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Responder {
    fn start() -> Responder {
        let socket = UdpSocket::bind("127.0.0.1:0").unwrap();
        socket
            .set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = socket.local_addr().unwrap();
        let stop = Arc::new(AtomicBool::new(false));
        let thread = std::thread::spawn({
            let stop = stop.clone();
            move || {
                let mut buf = [0u8; 2048];
                let mut out = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let Ok((n, from)) = socket.recv_from(&mut buf) else {
                        continue;
                    };
                    out.clear();
                    match Request::parse(&buf[..n]) {
                        Ok(Request::Connect(c)) => {
                            write_connect_response(&mut out, c.transaction_id, ID)
                        }
                        Ok(Request::Announce(a)) if a.connection_id == ID => {
                            write_announce_response(&mut out, a.transaction_id, 1800, 1, 1, &[]);
                        }
                        Ok(Request::Scrape(s)) if s.connection_id == ID => write_scrape_response(
                            &mut out,
                            s.transaction_id,
                            s.info_hashes.iter().map(|_| ScrapeStats::default()),
                        ),
                        Ok(Request::Announce(a)) => {
                            write_error_response(&mut out, a.transaction_id, b"bad id")
                        }
                        Ok(Request::Scrape(s)) => {
                            write_error_response(&mut out, s.transaction_id, b"bad id")
                        }
                        Err(_) => continue,
                    }
                    let _ = socket.send_to(&out, from);
                }
            }
        });
        Responder {
            addr,
            stop,
            thread: Some(thread),
        }
    }
}

impl Drop for Responder {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn load_test() -> Command {
    Command::new(env!("CARGO_BIN_EXE_load-test"))
}

fn temp(name: &str) -> std::path::PathBuf {
    std::env::temp_dir().join(format!("load-test-cli-{}-{name}", std::process::id()))
}

#[test]
fn a_short_udp_run_writes_a_clean_json_summary() {
    let responder = Responder::start();
    let json = temp("summary.json");
    let config = temp("config.toml");
    std::fs::write(
        &config,
        "duration_secs = 30.0\n[traffic]\npeers = 1000\ntorrents = 100\n[udp]\nsources_per_worker = 2\nin_flight = 4\n",
    )
    .unwrap();
    let output = load_test()
        .args(["udp", "--quiet", "--duration", "1", "--workers", "1"])
        .arg("--target")
        .arg(responder.addr.to_string())
        .arg("--config")
        .arg(&config)
        .arg("--json")
        .arg(&json)
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}");
    let summary: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&json).unwrap()).unwrap();
    let _ = std::fs::remove_file(&json);
    let _ = std::fs::remove_file(&config);
    assert_eq!(summary["protocol"], "udp");
    // The flag won over the file's 30 s.
    assert_eq!(summary["duration_secs"], 1.0);
    // IPv4: one socket per worker, sending for every source.
    assert_eq!(summary["sources"], 2);
    assert_eq!(summary["sockets"], 1);
    assert_eq!(summary["invalid"], 0, "{stdout}");
    assert_eq!(summary["errors"], 0, "{stdout}");
    assert_eq!(summary["timeouts"], 0, "{stdout}");
    assert!(summary["responses"].as_u64().unwrap() > 100, "{stdout}");
    for kind in ["connect", "announce", "scrape"] {
        assert!(
            summary["by_kind"][kind]["ok"].as_u64().unwrap() > 0,
            "{kind}: {stdout}"
        );
    }
    assert!(stdout.contains("p99.9"), "{stdout}");
}

#[test]
fn bad_options_are_refused() {
    let config = temp("bad.toml");
    std::fs::write(&config, "[traffic]\ntorents = 5\n").unwrap();
    let cases: [&[&str]; 9] = [
        &["udp", "--target", "10.1.2.3:6969", "--duration", "1"],
        // Ocelot's path form needs passkeys to put first.
        &["http", "--target", "http://127.0.0.1:1/", "--passkey-first"],
        &["udp", "--target", "127.0.0.1:1", "--mix", "1:2"],
        &["http", "--target", "http://192.0.2.1:80/announce"],
        &["ws", "--target", "ws://192.0.2.1:80/announce"],
        &["ws", "--target", "http://127.0.0.1:80/announce"],
        &["ws", "--target", "ws://127.0.0.1:1/", "--offers", "101"],
        &["ws", "--target", "ws://127.0.0.1:1/", "--mix", "1:2:3"],
        &[
            "udp",
            "--target",
            "127.0.0.1:1",
            "--config",
            config.to_str().unwrap(),
        ],
    ];
    for args in cases {
        let output = load_test().args(args).output().unwrap();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(output.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(stderr.contains("load-test:"), "{args:?}: {stderr}");
    }
    let _ = std::fs::remove_file(&config);
}

#[test]
fn info_hashes_lists_the_torrents_the_load_announces() {
    let out = Command::new(env!("CARGO_BIN_EXE_load-test"))
        .args(["info-hashes", "--torrents", "3", "--seed", "7"])
        .output()
        .unwrap();
    assert!(out.status.success());
    let text = String::from_utf8(out.stdout).unwrap();
    let expected: String = (0..3)
        .map(|t| {
            let hex: String = load_test::model::info_hash_of(7, t)
                .0
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect();
            hex + "\n"
        })
        .collect();
    assert_eq!(text, expected);
}
