//! Start-up as root: refusing to serve as root unless told, dropping to a
//! user (and a chroot) after binding, and the locked-memory check that the
//! drop makes necessary. Tests that need root say so and pass without it.

mod support;

use std::net::UdpSocket;
use std::time::Duration;
use support::Tracker;

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
}

/// The (real, effective, saved, fs) ids on a `Uid:` or `Gid:` line of a
/// /proc status file.
fn ids(status: &str, key: &str) -> Vec<u32> {
    status
        .lines()
        .find(|l| l.starts_with(key))
        .unwrap_or_else(|| panic!("no {key} in {status}"))
        .split_whitespace()
        .skip(1)
        .map(|n| n.parse().unwrap())
        .collect()
}

fn connect_answers(tracker: &Tracker) -> bool {
    let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
    sock.set_read_timeout(Some(Duration::from_secs(2))).unwrap();
    let mut connect = [0u8; 16];
    connect[..8].copy_from_slice(&0x41727101980i64.to_be_bytes());
    connect[12..].copy_from_slice(&9i32.to_be_bytes());
    sock.send_to(&connect, tracker.udp[0]).unwrap();
    let mut buf = [0u8; 64];
    matches!(sock.recv(&mut buf), Ok(16))
}

#[test]
fn root_is_refused_without_a_user_or_allow_root() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let tracker = Tracker::builder().udp(None).without_allow_root().spawn();
    let (code, err) = tracker.wait_exit(Duration::from_secs(20));
    assert_ne!(code, Some(0), "{err}");
    assert!(err.contains("refusing to serve as root"), "{err}");
    assert!(
        err.contains("--user") && err.contains("--allow-root"),
        "{err}"
    );
}

#[test]
fn drops_to_nobody_in_every_thread_after_binding() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    // Port 0 is no privilege test; the bind happening before the drop is what
    // lets a real deployment bind ports below 1024.
    let tracker = Tracker::builder()
        .udp(None)
        .https(None)
        .arg("--user")
        .arg("nobody")
        .without_allow_root()
        .start();
    assert!(connect_answers(&tracker));
    // SAFETY: getpwnam's entry is read at once, before any other lookup.
    let nobody = unsafe { (*libc::getpwnam(c"nobody".as_ptr())).pw_uid };
    let tasks = std::fs::read_dir(format!("/proc/{}/task", tracker.pid())).unwrap();
    let mut threads = 0;
    for task in tasks {
        let status = std::fs::read_to_string(task.unwrap().path().join("status")).unwrap();
        assert_eq!(ids(&status, "Uid:"), vec![nobody; 4], "{status}");
        assert!(ids(&status, "Gid:").iter().all(|&g| g != 0), "{status}");
        let groups = status.lines().find(|l| l.starts_with("Groups:")).unwrap();
        assert!(!groups.split_whitespace().any(|g| g == "0"), "{groups}");
        threads += 1;
    }
    // The main thread, the signal thread and two workers at least.
    assert!(threads >= 4, "{threads} threads");
}

#[test]
fn chroots_before_dropping() {
    if !is_root() {
        eprintln!("skipped: needs root");
        return;
    }
    let dir = std::env::temp_dir().join(format!("tracker-chroot-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let tracker = Tracker::builder()
        .udp(None)
        .arg("--user")
        .arg("nobody")
        .arg("--chroot")
        .arg(dir.to_str().unwrap())
        .start();
    assert!(connect_answers(&tracker));
    let root = std::fs::read_link(format!("/proc/{}/root", tracker.pid())).unwrap();
    assert_eq!(root, dir);
    // No capability held, none to be gained by an execve, and no /proc in
    // the chroot to read its own by: the drop reads them from the kernel.
    let status = std::fs::read_to_string(format!("/proc/{}/status", tracker.pid())).unwrap();
    for want in [
        "CapInh:\t0000000000000000",
        "CapPrm:\t0000000000000000",
        "CapEff:\t0000000000000000",
        "CapBnd:\t0000000000000000",
        "CapAmb:\t0000000000000000",
        "NoNewPrivs:\t1",
    ] {
        assert!(status.contains(want), "{want:?} not in:\n{status}");
    }
    drop(tracker);
    let _ = std::fs::remove_dir(&dir);
}

#[test]
fn a_user_that_does_not_exist_is_a_start_up_error() {
    let tracker = Tracker::builder()
        .udp(None)
        .arg("--user")
        .arg("no-such-user-for-the-tracker")
        .spawn();
    let (code, err) = tracker.wait_exit(Duration::from_secs(20));
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("no such user: no-such-user-for-the-tracker"),
        "{err}"
    );
}

fn memlock_64k() -> std::io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: 64 << 10,
        rlim_max: 64 << 10,
    };
    // SAFETY: setrlimit reads one rlimit; async-signal-safe.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn too_little_locked_memory_for_the_workers_is_a_start_up_error() {
    if !is_root() {
        eprintln!("skipped: needs root (to drop to nobody, who is charged)");
        return;
    }
    let tracker = Tracker::builder()
        .udp(None)
        .arg("--user")
        .arg("nobody")
        .pre_exec(memlock_64k)
        .spawn();
    let (code, err) = tracker.wait_exit(Duration::from_secs(20));
    assert_ne!(code, Some(0), "{err}");
    assert!(
        err.contains("locked-memory limit is 64 KiB") && err.contains("LimitMEMLOCK"),
        "{err}"
    );
}

/// In a child before it runs the tracker: becomes nobody (uid and gid 65534).
fn become_nobody() -> std::io::Result<()> {
    // SAFETY: plain system calls, async-signal-safe.
    unsafe {
        if libc::setgroups(0, std::ptr::null()) != 0
            || libc::setgid(65534) != 0
            || libc::setuid(65534) != 0
        {
            return Err(std::io::Error::last_os_error());
        }
    }
    Ok(())
}

/// Another process of the tracker's user can neither trace it nor read its
/// memory (the connection-id key, the swarms): it is not dumpable, which
/// shows as its /proc files belonging to root. Started as that user, not
/// dropped to it (a drop alone may leave it undumpable, as fs.suid_dumpable
/// says).
#[test]
fn a_process_of_the_same_user_cannot_read_the_trackers_memory() {
    // SAFETY: getpwnam's entry is read at once, before any other lookup.
    if !is_root() || unsafe { (*libc::getpwnam(c"nobody".as_ptr())).pw_uid } != 65534 {
        eprintln!("skipped: needs root, and nobody as uid 65534");
        return;
    }
    use std::os::unix::fs::MetadataExt;
    for started in ["as nobody", "as root, dropping to nobody"] {
        let builder = Tracker::builder().udp(None);
        let tracker = match started {
            "as nobody" => builder.pre_exec(become_nobody),
            _ => builder.arg("--user").arg("nobody").without_allow_root(),
        }
        .start();
        let status = std::fs::read_to_string(format!("/proc/{}/status", tracker.pid())).unwrap();
        assert_eq!(ids(&status, "Uid:"), vec![65534; 4], "{started}: {status}");
        let mem = std::fs::metadata(format!("/proc/{}/mem", tracker.pid())).unwrap();
        assert_eq!(mem.uid(), 0, "{started}: /proc/PID/mem is its user's");
        // And it serves as before.
        assert!(connect_answers(&tracker), "{started}");
    }
}

/// A process of another user that holds a name a tracker of old took as
/// its lock of a port (any user may bind any abstract socket name): it
/// could not share the port with a tracker of root's (SO_REUSEPORT lets
/// only sockets of one user share a port), so it must not stop one.
#[test]
fn a_lock_name_squatted_by_another_user_does_not_stop_the_start() {
    // SAFETY: getpwnam's entry is read at once, before any other lookup.
    if !is_root() || unsafe { (*libc::getpwnam(c"nobody".as_ptr())).pw_uid } != 65534 {
        eprintln!("skipped: needs root, and nobody as uid 65534");
        return;
    }
    let port = support::free_port();
    let squatters: Vec<Squatter> = ["udp4", "tcp4"]
        .iter()
        .map(|proto| Squatter::start(&format!("tracker-lock/{proto}/{port}/*")))
        .collect();
    let addr = std::net::SocketAddr::from(([127, 0, 0, 1], port));
    let tracker = Tracker::builder().udp(Some(addr)).http(Some(addr)).start();
    assert!(connect_answers(&tracker));
    drop(squatters);
}

/// A child process of nobody's that listens on an abstract Unix socket
/// name; killed when dropped.
struct Squatter(libc::pid_t);

impl Squatter {
    fn start(name: &str) -> Squatter {
        // Everything the child needs is made before the fork: after it, the
        // child makes system calls only.
        // SAFETY: sockaddr_un is plain data; all zeroes is valid.
        let mut addr: libc::sockaddr_un = unsafe { std::mem::zeroed() };
        addr.sun_family = libc::AF_UNIX as libc::sa_family_t;
        for (to, from) in addr.sun_path[1..].iter_mut().zip(name.as_bytes()) {
            *to = *from as libc::c_char;
        }
        let len = (std::mem::size_of::<libc::sa_family_t>() + 1 + name.len()) as libc::socklen_t;
        let mut ready = [0; 2];
        // SAFETY: a pipe into two ints.
        assert_eq!(unsafe { libc::pipe(ready.as_mut_ptr()) }, 0);
        // SAFETY: the child makes async-signal-safe system calls only, then
        // waits to be killed.
        let pid = unsafe { libc::fork() };
        if pid == 0 {
            unsafe {
                // Only the pipe's end kept: no copy of another test's socket
                // (a port it is about to give a tracker) outlives the fork.
                libc::dup2(ready[1], 3);
                libc::syscall(libc::SYS_close_range, 4, u32::MAX, 0);
                libc::setgroups(0, std::ptr::null());
                libc::setgid(65534);
                libc::setuid(65534);
                let fd = libc::socket(libc::AF_UNIX, libc::SOCK_STREAM, 0);
                let bound = libc::bind(fd, (&addr as *const libc::sockaddr_un).cast(), len) == 0
                    && libc::listen(fd, 16) == 0;
                libc::write(3, [bound as u8].as_ptr().cast(), 1);
                loop {
                    libc::pause();
                }
            }
        }
        let mut bound = [0u8];
        // SAFETY: reads one byte into a one-byte buffer.
        unsafe {
            libc::close(ready[1]);
            assert_eq!(libc::read(ready[0], bound.as_mut_ptr().cast(), 1), 1);
            libc::close(ready[0]);
        }
        let squatter = Squatter(pid);
        assert_eq!(bound[0], 1, "the squatter could not bind {name}");
        squatter
    }
}

impl Drop for Squatter {
    fn drop(&mut self) {
        // SAFETY: our own child, killed and reaped.
        unsafe {
            libc::kill(self.0, libc::SIGKILL);
            libc::waitpid(self.0, std::ptr::null_mut(), 0);
        }
    }
}
