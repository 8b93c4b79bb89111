//! Access lists end to end: the real binary with two workers (so announces
//! are routed to their owners), spoken to over UDP and HTTP, its list file
//! rewritten and reloaded with SIGHUP.

mod support;

use std::net::{SocketAddr, UdpSocket};
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU32, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::tempfile_path::TempPath;
use support::wire::{
    hash_owned_by, hex, http_announce_target, http_get_ok, udp_announce_wanting, udp_connect_packet,
};
use support::Tracker;
use tracker_proto::http::bencode::{decode, Value};
use tracker_proto::http::write_scrape_target;
use tracker_proto::udp::{write_scrape_request, ConnectionId, IpFamily, Response, TransactionId};
use tracker_proto::{AnnounceEvent, InfoHash};

const WORKERS: usize = 2;

/// What an announce got: served with (seeders, leechers), or an error text.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Answer {
    Served(u32, u32),
    Refused(String),
}

fn not_allowed() -> Answer {
    Answer::Refused("torrent not allowed".into())
}

/// A small BEP 15 client on loopback.
struct Udp {
    sock: UdpSocket,
    target: SocketAddr,
    connection_id: ConnectionId,
    txid: i32,
}

impl Udp {
    fn new(target: SocketAddr) -> Udp {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut udp = Udp {
            sock,
            target,
            connection_id: ConnectionId(0),
            txid: 0,
        };
        let txid = udp.next_txid();
        let answer = udp
            .exchange(&udp_connect_packet(txid))
            .expect("a connect answer");
        match Response::parse(&answer, IpFamily::V4).unwrap() {
            Response::Connect { connection_id, .. } => udp.connection_id = connection_id,
            other => panic!("not a connect answer: {other:?}"),
        }
        udp
    }

    fn next_txid(&mut self) -> TransactionId {
        self.txid += 1;
        TransactionId(self.txid)
    }

    /// Sends and waits for the answer with the same transaction id; None
    /// when none comes within the read timeout.
    fn exchange(&mut self, packet: &[u8]) -> Option<Vec<u8>> {
        self.sock.send_to(packet, self.target).unwrap();
        let mut buf = vec![0u8; 2048];
        let (n, _) = self.sock.recv_from(&mut buf).ok()?;
        buf.truncate(n);
        Some(buf)
    }

    /// None when the answer was lost.
    fn try_announce(&mut self, info_hash: InfoHash, port: u16) -> Option<Answer> {
        let txid = self.next_txid();
        let out = udp_announce_wanting(
            self.connection_id,
            txid.0,
            info_hash,
            port,
            AnnounceEvent::Started,
            1,
            10,
        );
        let answer = self.exchange(&out)?;
        Some(
            match Response::parse(&answer, IpFamily::V4).expect("a BEP 15 answer") {
                Response::Announce {
                    transaction_id,
                    seeders,
                    leechers,
                    ..
                } => {
                    assert_eq!(transaction_id, txid);
                    Answer::Served(seeders, leechers)
                }
                Response::Error {
                    transaction_id,
                    message,
                } => {
                    assert_eq!(transaction_id, txid);
                    Answer::Refused(String::from_utf8_lossy(message).into_owned())
                }
                other => panic!("not an announce answer: {other:?}"),
            },
        )
    }

    fn announce(&mut self, info_hash: InfoHash, port: u16) -> Answer {
        self.try_announce(info_hash, port).expect("an answer")
    }

    /// (seeders, completed, leechers) of each hash.
    fn scrape(&mut self, hashes: &[InfoHash]) -> Vec<[u32; 3]> {
        let txid = self.next_txid();
        let mut out = Vec::new();
        write_scrape_request(&mut out, self.connection_id, txid, hashes);
        let answer = self.exchange(&out).expect("a scrape answer");
        match Response::parse(&answer, IpFamily::V4).unwrap() {
            Response::Scrape {
                transaction_id,
                stats,
            } => {
                assert_eq!(transaction_id, txid);
                stats
                    .iter()
                    .map(|s| [s.seeders, s.completed, s.leechers])
                    .collect()
            }
            other => panic!("not a scrape answer: {other:?}"),
        }
    }
}

fn http_announce(addr: SocketAddr, info_hash: InfoHash, port: u16) -> Answer {
    let body = http_get_ok(addr, &http_announce_target(info_hash, port));
    let value = decode(&body).unwrap();
    if let Some(reason) = value.get(b"failure reason").and_then(Value::as_bytes) {
        return Answer::Refused(String::from_utf8_lossy(reason).into_owned());
    }
    let int = |key: &[u8]| value.get(key).and_then(Value::as_int).unwrap() as u32;
    Answer::Served(int(b"complete"), int(b"incomplete"))
}

/// (complete, downloaded, incomplete) of each hash, in the order asked.
fn http_scrape(addr: SocketAddr, hashes: &[InfoHash]) -> Vec<[u32; 3]> {
    let mut target = Vec::new();
    write_scrape_target(&mut target, hashes);
    let body = http_get_ok(addr, std::str::from_utf8(&target).unwrap());
    let value = decode(&body).unwrap();
    let files = value.get(b"files").expect("files");
    hashes
        .iter()
        .map(|h| match files.get(&h.0) {
            Some(stats) => [b"complete".as_slice(), b"downloaded", b"incomplete"]
                .map(|k| stats.get(k).and_then(Value::as_int).unwrap() as u32),
            None => [0; 3],
        })
        .collect()
}

/// One hash on each worker.
fn pair(seed: u8) -> [InfoHash; 2] {
    [0, 1].map(|owner| hash_owned_by(owner, WORKERS, seed.into()))
}

/// A list file in the formats people write: comments, blank lines, both
/// cases, indentation.
fn write_list(path: &Path, hashes: &[InfoHash]) {
    let mut text = String::from("# access list\n\n");
    for (i, h) in hashes.iter().enumerate() {
        match i % 3 {
            0 => text.push_str(&format!("{}\n", hex(h))),
            1 => text.push_str(&format!(
                "  {}  # trailing comment\n",
                hex(h).to_uppercase()
            )),
            _ => text.push_str(&format!("\t{}\r\n", hex(h))),
        }
    }
    std::fs::write(path, text).unwrap();
}

fn start(mode: &str, list: &TempPath) -> Tracker {
    Tracker::builder()
        .udp(None)
        .http(None)
        .runtime_args(&["--workers", "2", "--no-pin"])
        .config(&format!(
            "[access]\nmode = \"{mode}\"\nfile = \"{}\"\n",
            list.0.display()
        ))
        .start()
}

/// Starts a tracker with `config` that must refuse to start: its exit status
/// and what it printed.
fn refused_start(config: &str) -> (Option<i32>, String) {
    Tracker::builder()
        .udp(None)
        .config(config)
        .spawn()
        .wait_exit(Duration::from_secs(10))
}

fn sighup(tracker: &Tracker) {
    // SAFETY: a signal to our own child process.
    let rc = unsafe { libc::kill(tracker.pid() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0);
}

/// Stops the tracker and returns what it logged.
fn stop(tracker: Tracker) -> String {
    // SAFETY: a signal to our own child process.
    let rc = unsafe { libc::kill(tracker.pid() as libc::pid_t, libc::SIGTERM) };
    assert_eq!(rc, 0);
    tracker.wait_exit(Duration::from_secs(10)).1
}

/// Polls `check` until it holds, for up to 10 s.
fn eventually(what: &str, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + Duration::from_secs(10);
    while !check() {
        assert!(Instant::now() < deadline, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// Serves `served` and refuses `refused`, on both protocols and both workers.
fn check_decisions(tracker: &Tracker, served: &[InfoHash], refused: &[InfoHash]) {
    let mut udp = Udp::new(tracker.udp[0]);
    let http = tracker.http[0];
    for h in served {
        assert!(
            matches!(udp.announce(*h, 1000), Answer::Served(..)),
            "UDP {h:?}"
        );
        assert!(
            matches!(http_announce(http, *h, 2000), Answer::Served(..)),
            "HTTP {h:?}"
        );
    }
    for h in refused {
        assert_eq!(udp.announce(*h, 1000), not_allowed(), "UDP {h:?}");
        assert_eq!(http_announce(http, *h, 2000), not_allowed(), "HTTP {h:?}");
    }
    // Served torrents hold the two peers; refused ones were never stored.
    let all: Vec<InfoHash> = served.iter().chain(refused).copied().collect();
    let expected: Vec<[u32; 3]> = (served.iter().map(|_| [0, 0, 2]))
        .chain(refused.iter().map(|_| [0; 3]))
        .collect();
    assert_eq!(udp.scrape(&all), expected);
    assert_eq!(http_scrape(http, &all), expected);
}

#[test]
fn allow_mode_serves_listed_torrents_only() {
    let list = TempPath::new("tracker-access", "txt");
    let listed = pair(1);
    write_list(&list.0, &listed);
    let tracker = start("allow", &list);
    check_decisions(&tracker, &listed, &pair(2));
}

#[test]
fn deny_mode_refuses_listed_torrents_only() {
    let list = TempPath::new("tracker-access", "txt");
    let listed = pair(1);
    write_list(&list.0, &listed);
    let tracker = start("deny", &list);
    check_decisions(&tracker, &pair(2), &listed);
}

/// A reload changes decisions at once, drops the torrents that became
/// refused, and costs a client that keeps announcing no answer.
#[test]
fn sighup_reloads_the_list_and_drops_torrents_it_refuses() {
    let list = TempPath::new("tracker-access", "txt");
    let kept = pair(1);
    let going = pair(2);
    let coming = pair(3);
    write_list(&list.0, &[kept, going].concat());
    let tracker = start("allow", &list);
    let mut udp = Udp::new(tracker.udp[0]);
    let http = tracker.http[0];
    for h in kept.iter().chain(&going) {
        assert_eq!(udp.announce(*h, 1000), Answer::Served(0, 1));
        assert_eq!(http_announce(http, *h, 2000), Answer::Served(0, 2));
    }
    for h in &coming {
        assert_eq!(udp.announce(*h, 1000), not_allowed());
    }

    // A client announcing to a kept and a going torrent all along.
    let stop_flag = Arc::new(AtomicBool::new(false));
    let answered = Arc::new(AtomicU32::new(0));
    let background = {
        let stop_flag = stop_flag.clone();
        let answered = answered.clone();
        let mut udp = Udp::new(tracker.udp[0]);
        let (kept, going) = (kept[1], going[0]);
        std::thread::spawn(move || {
            let (mut answers, mut lost, mut seen) = (0u32, 0u32, Vec::new());
            while !stop_flag.load(Ordering::Relaxed) {
                for h in [kept, going] {
                    match udp.try_announce(h, 3000) {
                        Some(answer) => {
                            answers += 1;
                            answered.fetch_add(1, Ordering::Relaxed);
                            if h == going && seen.last() != Some(&answer) {
                                seen.push(answer);
                            }
                        }
                        None => lost += 1,
                    }
                }
            }
            (answers, lost, seen)
        })
    };
    // Some answers before the reload, and some after it took effect.
    let answers_after = |n: u32| {
        let start = answered.load(Ordering::Relaxed);
        eventually("the client is answered", || {
            answered.load(Ordering::Relaxed) >= start + n
        });
    };
    answers_after(4);

    write_list(&list.0, &[kept, coming].concat());
    sighup(&tracker);
    eventually("the new list serves its torrents", || {
        matches!(udp.announce(coming[0], 1000), Answer::Served(..))
    });
    answers_after(4);
    stop_flag.store(true, Ordering::Relaxed);
    let (answers, lost, seen) = background.join().unwrap();
    assert_eq!(lost, 0, "answers lost during the reload ({answers} came)");
    assert_eq!(
        seen,
        [Answer::Served(0, 3), not_allowed()],
        "the going torrent was served, then refused"
    );

    check_decisions_after_reload(&tracker, &mut udp, kept, going, coming);
}

fn check_decisions_after_reload(
    tracker: &Tracker,
    udp: &mut Udp,
    kept: [InfoHash; 2],
    going: [InfoHash; 2],
    coming: [InfoHash; 2],
) {
    let http = tracker.http[0];
    for h in &going {
        assert_eq!(udp.announce(*h, 1000), not_allowed());
        assert_eq!(http_announce(http, *h, 2000), not_allowed());
    }
    assert!(matches!(
        http_announce(http, coming[1], 2000),
        Answer::Served(..)
    ));
    // The torrents that became refused are gone from the store, peers and
    // all; the kept ones are untouched.
    eventually("refused torrents are dropped", || {
        udp.scrape(&going) == [[0; 3]; 2] && http_scrape(http, &going) == [[0; 3]; 2]
    });
    assert_eq!(udp.scrape(&kept), [[0, 0, 2], [0, 0, 3]]);
}

#[test]
fn a_bad_list_on_reload_is_logged_and_the_old_one_kept() {
    let list = TempPath::new("tracker-access", "txt");
    let listed = pair(1);
    write_list(&list.0, &listed);
    let tracker = start("deny", &list);
    check_decisions(&tracker, &pair(2), &listed);

    // Line 3 is bad; the good line before it must not be taken either.
    std::fs::write(
        &list.0,
        format!(
            "# new list\n{}\n{}x\n",
            hex(&pair(2)[0]),
            &hex(&listed[0])[1..]
        ),
    )
    .unwrap();
    sighup(&tracker);
    std::thread::sleep(Duration::from_millis(500));
    let mut udp = Udp::new(tracker.udp[0]);
    for h in listed {
        assert_eq!(udp.announce(h, 1000), not_allowed());
    }
    for h in pair(2) {
        assert!(matches!(udp.announce(h, 1000), Answer::Served(..)));
    }
    let log = stop(tracker);
    let place = format!("{}:3: expected 40 hex digits", list.0.display());
    assert!(
        log.contains("keeping the old access list") && log.contains(&place),
        "{log}"
    );
}

#[test]
fn bad_lists_at_start_exit_2_naming_the_file_and_line() {
    let list = TempPath::new("tracker-access", "txt");
    std::fs::write(&list.0, format!("{}\n\nnot a hash\n", hex(&pair(1)[0]))).unwrap();
    let (code, err) = refused_start(&format!(
        "[access]\nmode = \"allow\"\nfile = \"{}\"\n",
        list.0.display()
    ));
    assert_eq!(code, Some(2), "{err}");
    let place = format!("{}:3: expected 40 hex digits", list.0.display());
    assert!(err.contains(&place), "{err}");

    // A missing file, and a mode without a file.
    let missing = TempPath::new("tracker-access-missing", "txt");
    for (config, named) in [
        (
            format!(
                "[access]\nmode = \"deny\"\nfile = \"{}\"\n",
                missing.0.display()
            ),
            missing.0.display().to_string(),
        ),
        (
            "[access]\nmode = \"deny\"\n".to_string(),
            "access.file".to_string(),
        ),
    ] {
        let (code, err) = refused_start(&config);
        assert_eq!(code, Some(2), "{err}");
        assert!(err.contains(&named), "{named}: {err}");
    }
}

/// Replaces `path` with a FIFO that nobody writes.
fn make_fifo(path: &Path) {
    let _ = std::fs::remove_file(path);
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()).unwrap();
    // SAFETY: a NUL-terminated path.
    assert_eq!(unsafe { libc::mkfifo(c.as_ptr(), 0o600) }, 0);
}

#[test]
fn a_list_that_would_block_the_reload_is_refused_and_a_stop_is_still_taken() {
    let list = TempPath::new("tracker-access", "txt");
    let listed = pair(1);
    write_list(&list.0, &listed);
    let tracker = start("allow", &list);
    check_decisions(&tracker, &listed, &pair(2));
    // A FIFO without a writer: reading it would wait for ever.
    make_fifo(&list.0);
    sighup(&tracker);
    std::thread::sleep(Duration::from_millis(300));
    check_decisions(&tracker, &[], &pair(2));
    let mut udp = Udp::new(tracker.udp[0]);
    for h in listed {
        assert!(matches!(udp.announce(h, 1001), Answer::Served(..)));
    }
    // SIGTERM is taken at once (stop() waits 10 s at most).
    let start = Instant::now();
    let log = stop(tracker);
    assert!(start.elapsed() < Duration::from_secs(5), "{log}");
    assert!(
        log.contains("keeping the old access list") && log.contains("not a regular file"),
        "{log}"
    );
    assert!(log.contains("saved"), "{log}");
}

#[test]
fn an_emptied_allow_list_is_refused_unless_that_is_meant() {
    let list = TempPath::new("tracker-access", "txt");
    let listed = pair(1);
    write_list(&list.0, &listed);
    let tracker = start("allow", &list);
    check_decisions(&tracker, &listed, &pair(2));
    // Emptied (or truncated to its comment): refused, the swarms kept.
    write_list(&list.0, &[]);
    sighup(&tracker);
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(
        http_scrape(tracker.http[0], &listed),
        [[0, 0, 2], [0, 0, 2]],
        "the swarms were dropped"
    );
    let log = stop(tracker);
    assert!(
        log.contains("keeping the old access list") && log.contains("access.allow_empty"),
        "{log}"
    );
    // Refused at start too ...
    let (code, err) = refused_start(&format!(
        "[access]\nmode = \"allow\"\nfile = \"{}\"\n",
        list.0.display()
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("access.allow_empty"), "{err}");
    // ... unless the operator says so: then it serves nothing.
    let tracker = Tracker::builder()
        .udp(None)
        .http(None)
        .config(&format!(
            "[access]\nmode = \"allow\"\nfile = \"{}\"\nallow_empty = true\n",
            list.0.display()
        ))
        .start();
    assert_eq!(http_announce(tracker.http[0], listed[0], 1), not_allowed());
}

#[test]
fn a_list_larger_than_its_bound_is_refused() {
    let list = TempPath::new("tracker-access", "txt");
    write_list(&list.0, &pair(1));
    let (code, err) = refused_start(&format!(
        "[access]\nmode = \"deny\"\nfile = \"{}\"\nmax_file_bytes = 50\n",
        list.0.display()
    ));
    assert_eq!(code, Some(2), "{err}");
    assert!(err.contains("access.max_file_bytes"), "{err}");
}

const API_KEY: &str = "access-api-key-0123456789abcdef012";

/// PUT or DELETE of /announce/{key}/access-list: the status and the body.
fn access_api_answer(port: u16, key: &str, method: &str, body: &str) -> (u16, String) {
    use std::io::{Read, Write};
    let mut tcp = std::net::TcpStream::connect(("127.0.0.1", port)).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let request = format!(
        "{method} /announce/{key}/access-list HTTP/1.1\r\nHost: t\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    tcp.write_all(request.as_bytes()).unwrap();
    let mut answer = String::new();
    tcp.read_to_string(&mut answer).unwrap();
    let body = answer
        .split_once("\r\n\r\n")
        .map_or("", |(_, body)| body)
        .to_string();
    (answer[9..12].parse().unwrap(), body)
}

/// PUT or DELETE of /announce/{key}/access-list; the status.
fn access_api(port: u16, key: &str, method: &str, body: &str) -> u16 {
    access_api_answer(port, key, method, body).0
}

/// The API's body naming `hash`.
fn api_body(hash: &InfoHash) -> String {
    format!(r#"{{"info_hash":"{}"}}"#, hex(hash))
}

/// The config of a tracker in allow mode on `list` with the access API on
/// `port`, and `more` lines of [access].
fn api_config(list: &Path, port: u16, more: &str) -> String {
    format!(
        "[access]\nmode = \"allow\"\nfile = \"{}\"\napi_listen = \"127.0.0.1:{port}\"\n\
         api_key = \"{API_KEY}\"\n{more}",
        list.display()
    )
}

/// A tracker of two workers with the access API (see `api_config`), and
/// the API's port.
fn start_with_api(list: &Path, more: &str) -> (Tracker, u16) {
    let port = support::free_port();
    let tracker = Tracker::builder()
        .http(None)
        .runtime_args(&["--workers", &WORKERS.to_string(), "--no-pin"])
        .config(&api_config(list, port, more))
        .start();
    (tracker, port)
}

#[test]
fn the_access_api_changes_the_list_at_once_and_keeps_it_across_restarts() {
    let list = TempPath::new("tracker-test-access-api", "list");
    let (kept, added) = (hash_owned_by(0, WORKERS, 31), hash_owned_by(1, WORKERS, 32));
    std::fs::write(&list.0, format!("{}\n", hex(&kept))).unwrap();
    let key = API_KEY;
    let (tracker, port) = start_with_api(&list.0, "");
    let http = tracker.http[0];
    assert_eq!(http_announce(http, added, 7001), not_allowed());
    let body = api_body;
    assert_eq!(access_api(port, key, "PUT", &body(&added)), 200);
    assert_eq!(http_announce(http, added, 7001), Answer::Served(0, 1));
    // Taken off: refused again, on every worker.
    assert_eq!(access_api(port, key, "DELETE", &body(&kept)), 200);
    assert_eq!(http_announce(http, kept, 7002), not_allowed());
    // A wrong key, a bad body, another path.
    assert_eq!(access_api(port, "wrong-key", "PUT", &body(&kept)), 404);
    assert_eq!(access_api(port, key, "PUT", r#"{"info_hash":"12"}"#), 400);
    assert_eq!(access_api(port, key, "GET", ""), 405);
    tracker.stop();

    // The file holds the changes: a restart serves the same list.
    let file = std::fs::read_to_string(&list.0).unwrap();
    assert!(
        file.contains(&hex(&added)) && !file.contains(&hex(&kept)),
        "{file}"
    );
    let (tracker, _) = start_with_api(&list.0, "");
    assert_eq!(
        http_announce(tracker.http[0], added, 7003),
        Answer::Served(0, 1)
    );
    assert_eq!(http_announce(tracker.http[0], kept, 7004), not_allowed());
    tracker.stop();
}

/// The API writes only what a start and a reload accept: the last hash of
/// an allow list stays (409, and why) unless access.allow_empty says an
/// empty list is meant, and then start, SIGHUP and the API all take it.
#[test]
fn the_access_api_empties_an_allow_list_only_where_a_start_would_take_it() {
    let list = TempPath::new("tracker-test-access-api", "list");
    let last = hash_owned_by(1, WORKERS, 41);
    std::fs::write(&list.0, format!("# the one torrent\n{}\n", hex(&last))).unwrap();
    let written = std::fs::read(&list.0).unwrap();
    let (tracker, port) = start_with_api(&list.0, "");
    let http = tracker.http[0];
    assert_eq!(http_announce(http, last, 7001), Answer::Served(0, 1));
    let (status, why) = access_api_answer(port, API_KEY, "DELETE", &api_body(&last));
    assert_eq!(status, 409, "{why}");
    assert!(why.contains("access.allow_empty"), "{why}");
    assert_eq!(std::fs::read(&list.0).unwrap(), written, "the file is kept");
    // Still served, its swarm kept; the file still reloads.
    assert_eq!(http_announce(http, last, 7002), Answer::Served(0, 2));
    sighup(&tracker);
    std::thread::sleep(Duration::from_millis(500));
    let log = stop(tracker);
    assert!(
        log.contains("reloaded access list") && !log.contains("keeping the old access list"),
        "{log}"
    );

    // Meant: taken off, and the empty list starts and reloads.
    let (tracker, port) = start_with_api(&list.0, "allow_empty = true\n");
    assert_eq!(access_api(port, API_KEY, "DELETE", &api_body(&last)), 200);
    assert_eq!(http_announce(tracker.http[0], last, 7003), not_allowed());
    sighup(&tracker);
    std::thread::sleep(Duration::from_millis(500));
    let log = stop(tracker);
    let reloaded = format!("reloaded access list {}: 0 info-hashes", list.0.display());
    assert!(log.contains(&reloaded), "{log}");
    assert_eq!(
        std::fs::read_to_string(&list.0).unwrap(),
        "# the one torrent\n"
    );
    let (tracker, _) = start_with_api(&list.0, "allow_empty = true\n");
    assert_eq!(http_announce(tracker.http[0], last, 7004), not_allowed());
    tracker.stop();
}

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// A rewrite changes the one line it is about: comments, blank lines,
/// order, line ends and case stay as the operator wrote them, and the file
/// keeps its owner (when the tracker may give it: as root here) and mode.
#[test]
fn the_access_api_keeps_the_list_files_owner_mode_and_comments() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    let list = TempPath::new("tracker-test-access-api", "list");
    let [first, second, added] = [51, 52, 53].map(|seed| hash_owned_by(0, WORKERS, seed));
    let first_line = format!("{}   # the first, with a note\n", hex(&first));
    let text = format!(
        "# torrents of the week\n\n{first_line}  {}\r\n# the end\n",
        hex(&second).to_uppercase()
    );
    std::fs::write(&list.0, &text).unwrap();
    std::fs::set_permissions(&list.0, std::fs::Permissions::from_mode(0o640)).unwrap();
    let owner = if is_root() {
        std::os::unix::fs::chown(&list.0, Some(4321), Some(4322)).unwrap();
        (4321, 4322)
    } else {
        let meta = std::fs::metadata(&list.0).unwrap();
        (meta.uid(), meta.gid())
    };
    let (tracker, port) = start_with_api(&list.0, "");
    let check_file = |expected: &str| {
        assert_eq!(std::fs::read_to_string(&list.0).unwrap(), expected);
        let meta = std::fs::symlink_metadata(&list.0).unwrap();
        assert!(meta.is_file());
        assert_eq!(meta.mode() & 0o7777, 0o640, "the mode is kept");
        assert_eq!((meta.uid(), meta.gid()), owner, "the owner is kept");
    };

    assert_eq!(access_api(port, API_KEY, "PUT", &api_body(&added)), 200);
    let text = format!("{text}{}\n", hex(&added));
    check_file(&text);
    // Already listed (in capitals): nothing to write.
    assert_eq!(access_api(port, API_KEY, "PUT", &api_body(&second)), 200);
    check_file(&text);
    // Taken off: its line goes, note and all; nothing else does.
    assert_eq!(access_api(port, API_KEY, "DELETE", &api_body(&first)), 200);
    check_file(&text.replacen(&first_line, "", 1));
    let http = tracker.http[0];
    assert_eq!(http_announce(http, first, 7001), not_allowed());
    assert_eq!(http_announce(http, second, 7002), Answer::Served(0, 1));
    assert_eq!(http_announce(http, added, 7003), Answer::Served(0, 1));
    tracker.stop();
}

/// A link at access.file is neither followed nor replaced by the API: the
/// change is refused (409, and why), the link and its target stay as they
/// are. (Start and SIGHUP read through it, as they only read.)
#[test]
fn the_access_api_refuses_a_link_at_the_list_path() {
    let target = TempPath::new("tracker-test-access-api-target", "list");
    let link = TempPath::new("tracker-test-access-api-link", "list");
    let [listed, added] = [61, 62].map(|seed| hash_owned_by(1, WORKERS, seed));
    let text = format!("{}\n", hex(&listed));
    std::fs::write(&target.0, &text).unwrap();
    std::os::unix::fs::symlink(&target.0, &link.0).unwrap();
    let (tracker, port) = start_with_api(&link.0, "");
    let (status, why) = access_api_answer(port, API_KEY, "PUT", &api_body(&added));
    assert_eq!(status, 409, "{why}");
    assert!(why.contains("symbolic link"), "{why}");
    assert!(std::fs::symlink_metadata(&link.0)
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read_to_string(&target.0).unwrap(), text);
    let http = tracker.http[0];
    assert_eq!(http_announce(http, added, 7001), not_allowed());
    assert_eq!(http_announce(http, listed, 7002), Answer::Served(0, 1));
    let log = stop(tracker);
    assert!(log.contains("symbolic link"), "{log}");
}

/// A tracker that may not give the new file the old one's owner (one that
/// runs as its own user, the list root's) changes nothing: 500, and why;
/// the file, its owner and mode, and the list served stay as they were.
#[test]
fn the_access_api_changes_nothing_when_it_cannot_keep_the_owner() {
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    // A directory the tracker's user may write in, holding root's list.
    let dir =
        std::env::temp_dir().join(format!("tracker-test-access-owner-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir(&dir).unwrap();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o777)).unwrap();
    let list = dir.join("access.list");
    let [listed, added] = [71, 72].map(|seed| hash_owned_by(0, WORKERS, seed));
    let text = format!("# root's list\n{}\n", hex(&listed));
    std::fs::write(&list, &text).unwrap();
    std::fs::set_permissions(&list, std::fs::Permissions::from_mode(0o644)).unwrap();
    let port = support::free_port();
    let tracker = Tracker::builder()
        .http(None)
        .runtime_args(&["--workers", &WORKERS.to_string(), "--no-pin"])
        .arg("--user")
        .arg("nobody")
        .without_allow_root()
        .config(&api_config(&list, port, ""))
        .start();
    let (status, why) = access_api_answer(port, API_KEY, "PUT", &api_body(&added));
    assert_eq!(status, 500, "{why}");
    assert!(why.contains("owner"), "{why}");
    assert_eq!(std::fs::read_to_string(&list).unwrap(), text);
    let meta = std::fs::metadata(&list).unwrap();
    assert_eq!(
        (meta.uid(), meta.gid(), meta.mode() & 0o7777),
        (0, 0, 0o644)
    );
    let names: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["access.list"], "no temporary file is left");
    let http = tracker.http[0];
    assert_eq!(http_announce(http, added, 7001), not_allowed());
    assert_eq!(http_announce(http, listed, 7002), Answer::Served(0, 1));
    drop(tracker);
    std::fs::remove_dir_all(&dir).unwrap();
}
