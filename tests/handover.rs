//! Upgrades without a gap: a tracker started with --take-over takes the
//! running one's sockets and swarms; the old one answers what it took and
//! exits. Under load, no request goes unanswered and no swarm is lost; a
//! hand-over that fails midway leaves the old tracker serving.

mod support;

use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use support::tempfile_path::TempPath;
use support::udp_client::Client;
use support::wire::hash_owned_by;
use support::{small_load, TestCert, Tracker};
use tracker_proto::{AnnounceEvent, InfoHash, ScrapeStats};

fn control_config(control: &Path) -> String {
    format!("[runtime]\ncontrol_socket = \"{}\"\n", control.display())
}

/// Swarms on both workers' torrents: a seeder that completed and a leecher
/// on each; their scrape.
fn fill(target: SocketAddr) -> ([InfoHash; 2], Vec<ScrapeStats>) {
    let hashes = [hash_owned_by(0, 2, 7), hash_owned_by(1, 2, 8)];
    let mut seeder = Client::new("127.0.0.2:0", target);
    let mut leecher = Client::new("127.0.0.3:0", target);
    for hash in hashes {
        seeder.announce(hash, 7001, AnnounceEvent::Completed, 0, -1);
        leecher.announce(hash, 7002, AnnounceEvent::Started, 100, -1);
    }
    let stats = seeder.scrape(&hashes);
    (hashes, stats)
}

#[test]
fn a_hand_over_under_load_loses_no_request_and_no_swarm() {
    if !is_root() {
        eprintln!("skipped: needs root (a successor started by hand must be root)");
        return;
    }
    let control = TempPath::new("tracker-test-control", "sock");
    let state = TempPath::new("tracker-test-handover", "state");
    let config = control_config(&control.0);
    let cert = TestCert::new();
    let old = Tracker::builder()
        .udp(None)
        .https(None)
        .tls_cert(cert.clone())
        .config(&config)
        .state_file(&state.0)
        .start();
    let (hashes, before) = fill(old.udp[0]);
    assert_eq!(
        before
            .iter()
            .map(|s| [s.seeders, s.completed, s.leechers])
            .collect::<Vec<_>>(),
        [[1, 1, 1], [1, 1, 1]]
    );

    // A few thousand requests a second over UDP and HTTPS, from before the
    // hand-over until after it.
    let mut udp_load = small_load(old.udp[0].to_string());
    udp_load.duration_secs = 6.0;
    udp_load.rate = Some(2000.0);
    let mut https_load = small_load(format!("https://{}/announce", old.https[0]));
    https_load.duration_secs = 6.0;
    https_load.rate = Some(1000.0);
    https_load.http.ca = Some(old.tls.as_ref().unwrap().cert_file.0.clone());
    let udp = std::thread::spawn(move || load_test::udp::run(&udp_load));
    let https = std::thread::spawn(move || load_test::http::run(&https_load));
    std::thread::sleep(Duration::from_millis(1500));

    let new = Tracker::builder()
        .udp(Some(old.udp[0]))
        .https(Some(old.https[0]))
        .tls_cert(cert)
        .config(&config)
        .state_file(&state.0)
        .arg("--take-over")
        .spawn();
    let (code, log) = old.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("handed over"), "{log}");
    // The control socket is the new tracker's now: the old one left it.
    assert!(std::fs::symlink_metadata(&control.0).is_ok(), "{log}");

    for (name, summary) in [
        ("udp", udp.join().unwrap().expect("load-test udp")),
        ("https", https.join().unwrap().expect("load-test https")),
    ] {
        let text = summary.to_text();
        assert_eq!(summary.timeouts, 0, "{name}: {text}");
        assert_eq!(summary.invalid, 0, "{name}: {text}");
        assert_eq!(summary.errors, 0, "{name}: {text}");
        assert!(summary.responses > 1000, "{name}: {text}");
    }
    // The swarms came along: the same counts from the new tracker.
    let mut client = Client::new("127.0.0.4:0", new.udp[0]);
    assert_eq!(client.scrape(&hashes), before);
    let log = new.stop();
    assert!(log.contains("took over"), "{log}");
    // ... and removes it at its own stop.
    assert!(std::fs::symlink_metadata(&control.0).is_err(), "{log}");
}

#[test]
fn a_hand_over_that_fails_midway_leaves_the_old_tracker_serving() {
    if !is_root() {
        eprintln!("skipped: needs root (a successor started by hand must be root)");
        return;
    }
    let control = TempPath::new("tracker-test-control", "sock");
    let config = control_config(&control.0);
    let old = Tracker::builder().udp(None).config(&config).start();
    let (hashes, before) = fill(old.udp[0]);
    let mut client = Client::new("127.0.0.5:0", old.udp[0]);
    // Private to the tracker's user: no one else may even connect.
    use std::os::unix::fs::PermissionsExt;
    let mode = std::fs::metadata(&control.0).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);

    // It took the sockets, then found it has a worker too many: it gives up
    // before the old tracker stops.
    let (code, err) = Tracker::builder()
        .udp(Some(old.udp[0]))
        .config(&config)
        .runtime_args(&["--workers", "3", "--no-pin", "--take-over"])
        .spawn()
        .wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("has 2 workers and this one would have 3"),
        "{err}"
    );
    // Another config's addresses: refused too.
    let (code, err) = Tracker::builder()
        .udp(None)
        .config(&config)
        .arg("--take-over")
        .spawn()
        .wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("a hand-over keeps the addresses"), "{err}");
    // It took the sockets and failed later (a chroot that is not there):
    // the control socket is still the old one's, and stays.
    let (code, err) = Tracker::builder()
        .udp(Some(old.udp[0]))
        .config(&config)
        .arg("--user")
        .arg("root")
        .arg("--chroot")
        .arg("/nonexistent-chroot-of-the-tests")
        .arg("--take-over")
        .spawn()
        .wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("cannot chroot"), "{err}");
    assert!(std::fs::symlink_metadata(&control.0).is_ok(), "{err}");

    // The old one serves on, with its swarms, and can still hand over.
    assert_eq!(client.scrape(&hashes), before);
    client.announce(hashes[0], 7003, AnnounceEvent::Started, 5, -1);
    let new = Tracker::builder()
        .udp(Some(old.udp[0]))
        .config(&config)
        .arg("--take-over")
        .start();
    let (code, log) = old.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("abandoned by it: still serving"), "{log}");
    let mut client = Client::new("127.0.0.6:0", new.udp[0]);
    assert_eq!(client.scrape(&hashes)[0].leechers, 2);
}

/// nobody's uid and gid, as `become_nobody` assumes.
const NOBODY: u32 = 65534;

/// Whether this test can start processes as nobody: it runs as root and
/// nobody is uid 65534.
fn can_be_nobody() -> bool {
    // SAFETY: getpwnam's entry is read at once, before any other lookup.
    is_root() && unsafe { (*libc::getpwnam(c"nobody".as_ptr())).pw_uid } == NOBODY
}

/// In a child before it runs the tracker: becomes nobody.
fn become_nobody() -> std::io::Result<()> {
    // SAFETY: plain system calls, async-signal-safe.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(NOBODY) != 0
            || libc::setuid(NOBODY) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

fn is_root() -> bool {
    // SAFETY: geteuid cannot fail.
    unsafe { libc::geteuid() == 0 }
}

/// Asks the tracker at `control` for its sockets as a new tracker would,
/// and reads the manifest (its descriptors are closed unread): the
/// connection, ready for `go`.
fn ask_for_sockets(control: &Path) -> std::os::unix::net::UnixStream {
    use std::io::{BufRead, BufReader, Write};
    let stream = std::os::unix::net::UnixStream::connect(control).unwrap();
    (&stream).write_all(b"take-over 1\n").unwrap();
    // Byte by byte, so that nothing past the manifest is read.
    let mut reader = BufReader::with_capacity(1, &stream);
    let mut line = String::new();
    while line != "end\n" {
        line.clear();
        assert!(
            reader.read_line(&mut line).unwrap() > 0,
            "manifest cut short"
        );
    }
    stream
}

/// The system call `pid`'s main thread waits in, from /proc/PID/syscall.
fn waits_in(pid: u32) -> Option<i64> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/syscall")).ok()?;
    text.split(' ').next()?.parse().ok()
}

/// Two new trackers at once: the second waits its turn, through a signal
/// that interrupts its wait (a stop and a continue, as a debugger or a job
/// shell sends), then takes over once the first has gone away.
#[test]
fn a_second_successor_waits_its_turn_through_a_signal() {
    if !is_root() {
        eprintln!("skipped: needs root (a successor started by hand must be root)");
        return;
    }
    let control = TempPath::new("tracker-test-control", "sock");
    let config = control_config(&control.0);
    let old = Tracker::builder().udp(None).config(&config).start();
    let (hashes, before) = fill(old.udp[0]);
    // The first: it holds the old tracker's attention and says nothing.
    let first = ask_for_sockets(&control.0);
    let mut second = Tracker::builder()
        .udp(Some(old.udp[0]))
        .config(&config)
        .arg("--take-over")
        .spawn();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while waits_in(second.pid()) != Some(libc::SYS_recvmsg) {
        assert!(std::time::Instant::now() < deadline, "it never waited");
        std::thread::sleep(Duration::from_millis(20));
    }
    second.signal(libc::SIGSTOP);
    std::thread::sleep(Duration::from_millis(100));
    second.signal(libc::SIGCONT);
    std::thread::sleep(Duration::from_millis(200));
    if !second.is_running() {
        let (code, log) = second.wait_exit(Duration::from_secs(1));
        panic!("the second gave up ({code:?}): {log}");
    }
    drop(first);
    let (code, log) = old.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{log}");
    let mut client = Client::new("127.0.0.10:0", second.udp[0]);
    assert_eq!(client.scrape(&hashes), before);
    let log = second.stop();
    assert!(log.contains("took over"), "{log}");
}

/// The pid of the process whose command line is `cmdline` (NUL-separated).
fn pid_running(cmdline: &[u8]) -> Option<i32> {
    std::fs::read_dir("/proc")
        .ok()?
        .flatten()
        .find_map(|entry| {
            let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
            let line = std::fs::read(entry.path().join("cmdline")).ok()?;
            (line == cmdline && !gone(pid)).then_some(pid)
        })
}

/// True once `pid` has exited (a zombie counts: its parent is gone).
fn gone(pid: i32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| rest.starts_with('Z')),
        Err(_) => true,
    }
}

#[test]
fn sigusr2_starts_the_binary_at_the_same_path_which_takes_over() {
    let control = TempPath::new("tracker-test-control", "sock");
    let config = control_config(&control.0);
    let mut old = Tracker::builder().udp(None).config(&config).start();
    let old_pid = old.pid() as i32;
    let (hashes, before) = fill(old.udp[0]);
    let mut cmdline = std::fs::read(format!("/proc/{old_pid}/cmdline")).unwrap();
    cmdline.extend_from_slice(b"--take-over\0");
    old.signal(libc::SIGUSR2);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while old.is_running() {
        assert!(std::time::Instant::now() < deadline, "no hand-over");
        std::thread::sleep(Duration::from_millis(50));
    }
    let new_pid = pid_running(&cmdline).expect("the successor, running");
    let mut client = Client::new("127.0.0.7:0", old.udp[0]);
    assert_eq!(client.scrape(&hashes), before);
    // SAFETY: a signal to the successor, which this test started.
    unsafe { libc::kill(new_pid, libc::SIGTERM) };
    while !gone(new_pid) {
        assert!(
            std::time::Instant::now() < deadline,
            "the successor did not stop"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // Both wrote to the same stderr; it ends once both have exited.
    let (code, log) = old.wait_exit(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{log}");
    assert!(
        log.contains(&format!("SIGUSR2: started pid {new_pid}")),
        "{log}"
    );
    assert!(log.contains("took over"), "{log}");
    assert!(
        log.contains(&format!(
            "handed over 2 torrents and 4 peers to pid {new_pid}"
        )),
        "{log}"
    );
}

/// A tracker that dropped root to nobody (its control socket then belongs
/// to nobody), and a successor started as root that drops to nobody too:
/// each takes the other as a peer.
#[test]
fn a_successor_started_as_root_takes_over_from_one_that_dropped_root() {
    // SAFETY: geteuid cannot fail.
    if unsafe { libc::geteuid() } != 0 {
        eprintln!("skipped: needs root");
        return;
    }
    let control = TempPath::new("tracker-test-control", "sock");
    let config = control_config(&control.0);
    let old = Tracker::builder()
        .udp(None)
        .config(&config)
        .arg("--user")
        .arg("nobody")
        .without_allow_root()
        .start();
    // Its control socket belongs to the user it serves as.
    use std::os::unix::fs::MetadataExt;
    // SAFETY: getpwnam's entry is read at once, before any other lookup.
    let nobody = unsafe { (*libc::getpwnam(c"nobody".as_ptr())).pw_uid };
    assert_eq!(std::fs::metadata(&control.0).unwrap().uid(), nobody);
    let (hashes, before) = fill(old.udp[0]);
    let new = Tracker::builder()
        .udp(Some(old.udp[0]))
        .config(&config)
        .arg("--user")
        .arg("nobody")
        .without_allow_root()
        .arg("--take-over")
        .start();
    let (code, log) = old.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{log}");
    let mut client = Client::new("127.0.0.8:0", new.udp[0]);
    assert_eq!(client.scrape(&hashes), before);
}

/// A tracker that serves as nobody (as a start-up message once suggested)
/// is not taken over by any other process of nobody's: only root, or the
/// successor it starts itself on SIGUSR2, may take it over.
#[test]
fn another_process_of_the_same_user_cannot_take_over() {
    if !can_be_nobody() {
        eprintln!("skipped: needs root, and nobody as uid {NOBODY}");
        return;
    }
    let control = TempPath::new("tracker-test-control", "sock");
    let config = control_config(&control.0);
    let old = Tracker::builder()
        .udp(None)
        .config(&config)
        .arg("--user")
        .arg("nobody")
        .without_allow_root()
        .start();
    let (hashes, before) = fill(old.udp[0]);
    // The same binary, with the same config, started by nobody.
    let (code, err) = Tracker::builder()
        .udp(Some(old.udp[0]))
        .config(&config)
        .arg("--user")
        .arg("nobody")
        .without_allow_root()
        .arg("--take-over")
        .pre_exec(become_nobody)
        .spawn()
        .wait_exit(Duration::from_secs(20));
    assert_eq!(code, Some(1), "{err}");
    let mut client = Client::new("127.0.0.11:0", old.udp[0]);
    assert_eq!(client.scrape(&hashes), before);
    let log = old.stop();
    assert!(
        log.contains("refused") && log.contains("neither root nor the tracker"),
        "{log}"
    );
}

/// Under a user of its own, SIGUSR2 still upgrades: the successor it starts
/// runs as that user, and is the one process of it let in.
#[test]
fn sigusr2_upgrades_a_tracker_that_dropped_root() {
    if !can_be_nobody() {
        eprintln!("skipped: needs root, and nobody as uid {NOBODY}");
        return;
    }
    let control = TempPath::new("tracker-test-control", "sock");
    let config = control_config(&control.0);
    let mut old = Tracker::builder()
        .udp(None)
        .config(&config)
        .arg("--user")
        .arg("nobody")
        .without_allow_root()
        .start();
    let (hashes, before) = fill(old.udp[0]);
    let old_pid = old.pid() as i32;
    let mut cmdline = std::fs::read(format!("/proc/{old_pid}/cmdline")).unwrap();
    cmdline.extend_from_slice(b"--take-over\0");
    // The second while the first is under way (held up behind a request
    // that says nothing) starts none: the first, once it has taken over,
    // would refuse it.
    let holding = ask_for_sockets(&control.0);
    old.signal(libc::SIGUSR2);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while pid_running(&cmdline).is_none() {
        assert!(std::time::Instant::now() < deadline, "no successor");
        std::thread::sleep(Duration::from_millis(20));
    }
    old.signal(libc::SIGUSR2);
    std::thread::sleep(Duration::from_millis(200));
    drop(holding);
    while old.is_running() {
        assert!(std::time::Instant::now() < deadline, "no hand-over");
        std::thread::sleep(Duration::from_millis(50));
    }
    let new_pid = pid_running(&cmdline).expect("the successor, running");
    let mut client = Client::new("127.0.0.12:0", old.udp[0]);
    assert_eq!(client.scrape(&hashes), before);
    // SAFETY: a signal to the successor, which this test started.
    unsafe { libc::kill(new_pid, libc::SIGTERM) };
    while !gone(new_pid) {
        assert!(std::time::Instant::now() < deadline, "it did not stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    let (code, log) = old.wait_exit(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{log}");
    assert!(log.contains("took over"), "{log}");
    assert!(
        log.contains(&format!(
            "SIGUSR2: pid {new_pid}, started on an earlier SIGUSR2"
        )),
        "{log}"
    );
}

/// Not a test of its own: the new tracker that the next test starts as a
/// process of its own (`TRACKER_TEST_FAKE_SUCCESSOR=MODE:PATH`). It asks
/// for the sockets, says `go`, then hangs up (MODE `hang-up`) or keeps the
/// connection and says nothing more (`silent`), and waits to be killed.
#[test]
fn fake_successor() {
    let Ok(spec) = std::env::var("TRACKER_TEST_FAKE_SUCCESSOR") else {
        return;
    };
    let (mode, path) = spec.split_once(':').expect("MODE:PATH");
    let stream = ask_for_sockets(Path::new(path));
    use std::io::Write;
    (&stream).write_all(b"go\n").unwrap();
    if mode == "hang-up" {
        drop(stream);
    }
    loop {
        std::thread::sleep(Duration::from_secs(60));
    }
}

/// A child process, killed when dropped.
struct Child(std::process::Child);
impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts `fake_successor` against the control socket at `control`, as
/// `mode` says (`hang-up` or `silent`).
fn spawn_fake_successor(mode: &str, control: &Path) -> Child {
    Child(
        std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "fake_successor",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                "TRACKER_TEST_FAKE_SUCCESSOR",
                format!("{mode}:{}", control.display()),
            )
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap(),
    )
}

/// A successor that goes away (hangs up) or silent after `go`, once the old
/// tracker has stopped: the old one kills it, as it holds every socket, and
/// serves again within seconds, in the same process, with the same swarms
/// and connection ids; and can still hand over after.
#[test]
fn a_successor_lost_after_go_is_killed_and_the_old_tracker_serves_again() {
    if !is_root() {
        eprintln!("skipped: needs root (a successor started by hand must be root)");
        return;
    }
    use std::os::unix::process::ExitStatusExt;
    let control = TempPath::new("tracker-test-control", "sock");
    let config = control_config(&control.0);
    let pid_file = TempPath::new("tracker-test", "pid");
    let pid_file_var = pid_file.0.to_str().unwrap();
    let mut old = Tracker::builder()
        .udp(None)
        .config(&config)
        .env("PIDFILE", pid_file_var)
        .start();
    let (hashes, before) = fill(old.udp[0]);
    let mut client = Client::new("127.0.0.9:0", old.udp[0]);
    for mode in ["hang-up", "silent"] {
        let mut fake = spawn_fake_successor(mode, &control.0);
        // Killed after runtime.handover_timeout_secs (5 s) of silence at
        // most, once the old one has stopped (its drain: well under 1 s);
        // the bound leaves room for a busy machine, and is half of the
        // minute an old tracker used to wait.
        let started = std::time::Instant::now();
        let status = loop {
            if let Some(status) = fake.0.try_wait().unwrap() {
                break status;
            }
            if started.elapsed() > Duration::from_secs(30) || !old.is_running() {
                panic!("{mode}: the lost successor was not killed: {}", old.stop());
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert_eq!(status.signal(), Some(libc::SIGKILL), "{mode}");
        // The same swarms, and the same connection id still good.
        assert_eq!(client.scrape(&hashes), before, "{mode}");
        // The service's main process is still this one.
        assert_eq!(read_pid_file(&pid_file.0), Some(old.pid()), "{mode}");
    }
    // It hands over as before.
    let new = Tracker::builder()
        .udp(Some(old.udp[0]))
        .config(&config)
        .env("PIDFILE", pid_file_var)
        .arg("--take-over")
        .start();
    let (code, log) = old.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(log.matches("killed it; serving again").count(), 2, "{log}");
    assert_eq!(read_pid_file(&pid_file.0), Some(new.pid()), "{log}");
    let mut client = Client::new("127.0.0.13:0", new.udp[0]);
    assert_eq!(client.scrape(&hashes), before);
}

/// The pid the PID file holds.
fn read_pid_file(path: &Path) -> Option<u32> {
    std::fs::read_to_string(path).ok()?.trim().parse().ok()
}

/// Under systemd, the PID file (`$PIDFILE`, from the unit's `PIDFile=`)
/// names the process that serves: the tracker, from its start; the
/// successor SIGUSR2 started, as the old tracker exits, once it has written
/// its state file (systemd reads the file when the main process exits and
/// supervises the process it names, its own child by then: issue 42); and
/// so on, hand-over after hand-over.
#[test]
fn the_pid_file_names_the_successor_as_the_old_tracker_exits() {
    let control = TempPath::new("tracker-test-control", "sock");
    let state = TempPath::new("tracker-test-handover", "state");
    let pid_file = TempPath::new("tracker-test", "pid");
    let config = control_config(&control.0);
    let first = Tracker::builder()
        .udp(None)
        .config(&config)
        .state_file(&state.0)
        .env("PIDFILE", pid_file.0.to_str().unwrap())
        .start();
    let first_pid = first.pid() as i32;
    assert_eq!(read_pid_file(&pid_file.0), Some(first_pid as u32));
    let (hashes, before) = fill(first.udp[0]);
    let mut cmdline = std::fs::read(format!("/proc/{first_pid}/cmdline")).unwrap();
    cmdline.extend_from_slice(b"--take-over\0");
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    // Twice: the first tracker hands over, then its successor.
    let mut serving = first_pid;
    let mut pids = vec![first_pid];
    for _ in 0..2 {
        // SAFETY: a signal to a tracker this test started.
        unsafe { libc::kill(serving, libc::SIGUSR2) };
        let successor = loop {
            assert!(std::time::Instant::now() < deadline, "no hand-over");
            std::thread::sleep(Duration::from_millis(50));
            if let Some(pid) = pid_running(&cmdline).filter(|pid| !pids.contains(pid)) {
                if gone(serving) {
                    break pid;
                }
            }
        };
        assert_eq!(read_pid_file(&pid_file.0), Some(successor as u32));
        let mut client = Client::new("127.0.0.15:0", first.udp[0]);
        assert_eq!(client.scrape(&hashes), before);
        pids.push(successor);
        serving = successor;
    }
    // SAFETY: a signal to the last successor, which this test started.
    unsafe { libc::kill(serving, libc::SIGTERM) };
    while !gone(serving) {
        assert!(std::time::Instant::now() < deadline, "no stop");
        std::thread::sleep(Duration::from_millis(50));
    }
    // All three wrote to the same stderr; it ends once all have exited.
    let (code, log) = first.wait_exit(Duration::from_secs(5));
    assert_eq!(code, Some(0), "{log}");
    let path = pid_file.0.display();
    assert!(
        log.contains(&format!("PID file {path}: this process\n")),
        "{log}"
    );
    for pid in &pids[1..] {
        let named = log
            .find(&format!("PID file {path}: pid {pid}, the new tracker"))
            .unwrap_or_else(|| panic!("pid {pid} not named: {log}"));
        // After its predecessor's save.
        assert!(log[..named].contains("stopped: saved 2 torrents"), "{log}");
    }
    assert_eq!(log.matches("stopped: saved 2 torrents").count(), 3, "{log}");
    // Each predecessor named its successor; none named itself.
    assert!(!log.contains("keeps none"), "{log}");
}

/// A successor of a tracker that keeps no PID file (one of an earlier
/// version, which told systemd `MAINPID=` instead; here one started
/// without `$PIDFILE`) names itself there before it lets that one exit.
#[test]
fn a_successor_names_itself_where_its_predecessor_kept_no_pid_file() {
    if !is_root() {
        eprintln!("skipped: needs root (a successor started by hand must be root)");
        return;
    }
    let control = TempPath::new("tracker-test-control", "sock");
    let pid_file = TempPath::new("tracker-test", "pid");
    let config = control_config(&control.0);
    let old = Tracker::builder().udp(None).config(&config).start();
    let (hashes, before) = fill(old.udp[0]);
    let new = Tracker::builder()
        .udp(Some(old.udp[0]))
        .config(&config)
        .env("PIDFILE", pid_file.0.to_str().unwrap())
        .arg("--take-over")
        .start();
    let (code, log) = old.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(0), "{log}");
    assert_eq!(read_pid_file(&pid_file.0), Some(new.pid()), "{log}");
    let mut client = Client::new("127.0.0.16:0", new.udp[0]);
    assert_eq!(client.scrape(&hashes), before);
    let log = new.stop();
    assert!(log.contains("keeps none"), "{log}");
}

/// A lost successor that the old tracker cannot kill (root's, while the old
/// one dropped root) might still serve on its sockets: the old one does not
/// serve beside it, but saves its swarms and exits 1, for a restart.
#[test]
fn a_lost_successor_that_cannot_be_killed_costs_a_restart_not_a_swarm() {
    if !can_be_nobody() {
        eprintln!("skipped: needs root, and nobody as uid {NOBODY}");
        return;
    }
    let control = TempPath::new("tracker-test-control", "sock");
    let state = TempPath::new("tracker-test-handover", "state");
    let config = control_config(&control.0);
    let old = Tracker::builder()
        .udp(None)
        .config(&config)
        .state_file(&state.0)
        .arg("--user")
        .arg("nobody")
        .without_allow_root()
        .start();
    let (hashes, before) = fill(old.udp[0]);
    let _fake = spawn_fake_successor("silent", &control.0);
    let (code, log) = old.wait_exit(Duration::from_secs(30));
    assert_eq!(code, Some(1), "{log}");
    assert!(log.contains("cannot serve again"), "{log}");
    let restarted = Tracker::builder().udp(None).state_file(&state.0).start();
    let mut client = Client::new("127.0.0.14:0", restarted.udp[0]);
    assert_eq!(client.scrape(&hashes), before);
}

/// Only a socket that no tracker listens on may be replaced: any other file
/// at `runtime.control_socket` is a start-up error that names it, and stays.
#[test]
fn a_file_at_the_control_socket_path_is_a_start_up_error() {
    let control = TempPath::new("tracker-test-control", "sock");
    let config = control_config(&control.0);
    let target = TempPath::new("tracker-test-control-target", "txt");
    std::fs::write(&target.0, "not a socket").unwrap();
    for kind in ["a regular file", "a symbolic link"] {
        let _ = std::fs::remove_file(&control.0);
        match kind {
            "a regular file" => std::fs::write(&control.0, "an operator's file").unwrap(),
            _ => std::os::unix::fs::symlink(&target.0, &control.0).unwrap(),
        }
        let (code, err) = Tracker::builder()
            .udp(None)
            .config(&config)
            .spawn()
            .wait_exit(Duration::from_secs(20));
        assert_eq!(code, Some(1), "{kind}: {err}");
        assert!(
            err.contains(&control.0.display().to_string())
                && err.contains("runtime.control_socket")
                && err.contains(kind),
            "{kind}: {err}"
        );
        let left = std::fs::symlink_metadata(&control.0).expect("still there");
        assert_eq!(left.file_type().is_symlink(), kind == "a symbolic link");
    }
    assert_eq!(std::fs::read(&target.0).unwrap(), b"not a socket");
}

/// The control socket goes at a stop; a stale one (no tracker listens) is
/// replaced at start.
#[test]
fn the_control_socket_is_removed_at_a_stop() {
    let control = TempPath::new("tracker-test-control", "sock");
    let config = control_config(&control.0);
    for _ in 0..2 {
        let tracker = Tracker::builder().udp(None).config(&config).start();
        assert!(std::fs::symlink_metadata(&control.0).is_ok());
        let log = tracker.stop();
        assert!(std::fs::symlink_metadata(&control.0).is_err(), "{log}");
    }
    // One left by a tracker killed outright is replaced.
    let killed = Tracker::builder().udp(None).config(&config).start();
    drop(killed);
    assert!(std::fs::symlink_metadata(&control.0).is_ok());
    let tracker = Tracker::builder().udp(None).config(&config).start();
    tracker.stop();
    assert!(std::fs::symlink_metadata(&control.0).is_err());
}

/// A relative `runtime.control_socket` (the default, `tracker.control`) is
/// taken from `$RUNTIME_DIRECTORY`, which systemd sets from
/// `RuntimeDirectory=`.
#[test]
fn a_relative_control_socket_goes_to_the_runtime_directory() {
    let dir = std::env::temp_dir().join(format!("tracker-test-runtime-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tracker = Tracker::builder()
        .udp(None)
        .config("[runtime]\ncontrol_socket = \"tracker-test.control\"\n")
        .env("RUNTIME_DIRECTORY", dir.to_str().unwrap())
        .start();
    let socket = dir.join("tracker-test.control");
    let meta = std::fs::symlink_metadata(&socket);
    let log = tracker.stop();
    let _ = std::fs::remove_dir_all(&dir);
    use std::os::unix::fs::FileTypeExt;
    assert!(meta.is_ok_and(|m| m.file_type().is_socket()), "{log}");
    assert!(!Path::new("tracker-test.control").exists(), "{log}");
}
