//! What the binary says at start: the system calls a container's seccomp
//! profile blocks are named as blocked by it (not blamed on the kernel), and
//! the start log names every URL served.

mod support;

use std::io;
use std::time::Duration;

use support::Tracker;

/// Installs a seccomp filter that answers system call `NR` with `ERRNO`
/// and allows every other, as a container runtime's profile does for the
/// calls it leaves out (podman's answers ENOSYS, Docker's EPERM).
#[cfg(target_arch = "x86_64")]
fn block<const NR: i64, const ERRNO: u32>() -> io::Result<()> {
    const AUDIT_ARCH_X86_64: u32 = 0xc000_003e;
    const SECCOMP_RET_ALLOW: u32 = 0x7fff_0000;
    const SECCOMP_RET_ERRNO: u32 = 0x0005_0000;
    // BPF_LD | BPF_W | BPF_ABS, BPF_JMP | BPF_JEQ | BPF_K, BPF_RET | BPF_K.
    const LOAD: u16 = 0x20;
    const JEQ: u16 = 0x15;
    const RET: u16 = 0x06;
    let op = |code, jt, jf, k| libc::sock_filter { code, jt, jf, k };
    // struct seccomp_data: nr at offset 0, arch at 4.
    let mut filter = [
        op(LOAD, 0, 0, 4),
        op(JEQ, 1, 0, AUDIT_ARCH_X86_64),
        op(RET, 0, 0, SECCOMP_RET_ALLOW),
        op(LOAD, 0, 0, 0),
        op(JEQ, 0, 1, NR as u32),
        op(RET, 0, 0, SECCOMP_RET_ERRNO | ERRNO),
        op(RET, 0, 0, SECCOMP_RET_ALLOW),
    ];
    let program = libc::sock_fprog {
        len: filter.len() as u16,
        filter: filter.as_mut_ptr(),
    };
    // SAFETY: prctl with a filter program that outlives the call; both are
    // async-signal-safe, as pre_exec requires.
    unsafe {
        if libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0
            || libc::prctl(
                libc::PR_SET_SECCOMP,
                libc::SECCOMP_MODE_FILTER,
                &program as *const libc::sock_fprog,
            ) != 0
        {
            return Err(io::Error::last_os_error());
        }
    }
    Ok(())
}

/// A `pre_exec` hook that installs a seccomp filter.
type Filter = fn() -> io::Result<()>;

/// The first line the tracker writes, and its exit status, when it is
/// started under `filter`.
fn first_line_under(filter: Filter) -> (Option<i32>, String) {
    let (code, stderr) = Tracker::builder()
        .udp(None)
        .pre_exec(filter)
        .spawn()
        .wait_exit(Duration::from_secs(20));
    (code, stderr.lines().next().unwrap_or_default().to_string())
}

#[cfg(target_arch = "x86_64")]
#[test]
fn io_uring_blocked_by_a_container_profile_is_named_as_seccomp() {
    const SETUP: i64 = libc::SYS_io_uring_setup;
    const ENOSYS: u32 = libc::ENOSYS as u32;
    const EPERM: u32 = libc::EPERM as u32;
    // podman's default profile (ENOSYS for what it leaves out), then Docker's
    // (EPERM): the kernel has io_uring either way.
    for filter in [block::<SETUP, ENOSYS>, block::<SETUP, EPERM>] {
        let (code, line) = first_line_under(filter);
        assert_eq!(code, Some(1), "{line}");
        assert!(
            line.starts_with("tracker: io_uring_setup is blocked by this process's seccomp filter")
                && line.contains("deploy/container/seccomp.json"),
            "{line}"
        );
        assert!(!line.contains("CONFIG_IO_URING"), "{line}");
    }
}

#[cfg(target_arch = "x86_64")]
#[test]
fn each_start_up_call_a_profile_may_leave_out_is_named() {
    const ENOSYS: u32 = libc::ENOSYS as u32;
    const EPERM: u32 = libc::EPERM as u32;
    let cases: [(Filter, &str); 3] = [
        (
            block::<{ libc::SYS_io_uring_enter }, ENOSYS>,
            "io_uring_enter",
        ),
        (
            block::<{ libc::SYS_io_uring_register }, ENOSYS>,
            "io_uring_register",
        ),
        (
            block::<{ libc::SYS_sched_setaffinity }, EPERM>,
            "sched_setaffinity",
        ),
    ];
    for (filter, call) in cases {
        let (code, line) = first_line_under(filter);
        assert_eq!(code, Some(1), "{line}");
        assert!(
            line.starts_with(&format!(
                "tracker: {call} is blocked by this process's seccomp filter"
            )),
            "{line}"
        );
    }
}

#[test]
fn the_start_log_names_every_url_served() {
    let tracker = Tracker::builder()
        .udp(None)
        .http(None)
        .https(None)
        .metrics()
        .start();
    let (udp, http, https) = (tracker.udp[0], tracker.http[0], tracker.https[0]);
    let metrics = tracker.metrics.unwrap();
    let log = tracker.stop();
    for url in [
        format!("serving UDP tracker on udp://{udp}/announce"),
        format!("serving HTTP tracker on http://{http}/announce"),
        format!("serving HTTPS tracker on https://{https}/announce"),
        format!("serving WebSocket tracker on ws://{http}/announce"),
        format!("serving WebSocket tracker on wss://{https}/announce"),
        format!("serving Prometheus metrics on http://{metrics}/metrics"),
    ] {
        assert!(log.contains(&url), "no {url:?} in\n{log}");
    }
}

/// Linux's default before 5.16.
fn memlock_64k() -> io::Result<()> {
    let limit = libc::rlimit {
        rlim_cur: 64 << 10,
        rlim_max: 64 << 10,
    };
    // SAFETY: setrlimit reads one rlimit; async-signal-safe.
    if unsafe { libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit) } != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[test]
fn locked_memory_under_glommios_floor_is_refused_at_start_even_as_root() {
    // Serving as root, io_uring charges nothing; glommio still refuses a
    // worker under 512 KiB (a kernel before 5.16 gives 64 KiB).
    let (code, line) = first_line_under(memlock_64k);
    assert_eq!(code, Some(1), "{line}");
    assert!(
        line.starts_with("tracker: the locked-memory limit is 64 KiB, below the 512 KiB")
            && line.contains("ulimit -l"),
        "{line}"
    );
}
