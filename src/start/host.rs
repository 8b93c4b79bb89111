//! What the host must offer before a worker starts: a kernel new enough,
//! io_uring allowed, enough locked memory, and file descriptors for the
//! connections configured. Each failed check is one line that names the
//! cause and the fix, so that start-up fails clearly instead of a worker
//! dying later with a bare errno.

use std::ffi::CStr;
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};

/// The oldest kernel we support: glommio needs io_uring's operations up to
/// 5.6's (send, recv, read, write, openat, close, statx, the opcode probe)
/// and names 5.8 its floor; 5.10 is the first long-term kernel after both,
/// and tests/deploy/kernel.sh boots it (Debian 11's) and 6.1 (Debian 12's).
pub const MIN_KERNEL: (u32, u32) = (5, 10);

/// Locked memory one worker needs: glommio registers its I/O buffer with each
/// of its three rings, and io_uring charges every registration to the user's
/// memlock limit (root is not charged). Measured as `nobody` under an 8 MiB
/// limit: 34 workers started, 43 did not; 256 KiB leaves a margin.
pub const MEMLOCK_PER_WORKER: u64 = 256 << 10;

/// The running kernel's release string, such as "6.1.0-18-amd64".
pub fn kernel_release() -> io::Result<String> {
    // SAFETY: uname fills a zeroed utsname; `release` is NUL-terminated.
    unsafe {
        let mut name: libc::utsname = std::mem::zeroed();
        if libc::uname(&mut name) != 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(CStr::from_ptr(name.release.as_ptr())
            .to_string_lossy()
            .into_owned())
    }
}

/// Major and minor from a release string: "5.15.0-91-generic" → (5, 15).
pub fn parse_kernel_version(release: &str) -> Option<(u32, u32)> {
    let mut parts = release.split(|c: char| !c.is_ascii_digit());
    let major = parts.next()?.parse().ok()?;
    let minor = parts.next()?.parse().ok()?;
    Some((major, minor))
}

/// Refuses kernels older than [`MIN_KERNEL`].
pub fn check_kernel(release: &str) -> Result<(), String> {
    let (want_major, want_minor) = MIN_KERNEL;
    match parse_kernel_version(release) {
        Some(version) if version >= MIN_KERNEL => Ok(()),
        Some(_) => Err(format!(
            "kernel {release} is older than {want_major}.{want_minor}, the oldest with the \
             io_uring support this tracker needs: upgrade the kernel"
        )),
        None => Err(format!(
            "cannot read the kernel version from {release:?}: this tracker needs Linux \
             {want_major}.{want_minor} or newer"
        )),
    }
}

/// What this process can see of the things that may refuse it a system
/// call at start: a seccomp filter (a container's profile, systemd's
/// `SystemCallFilter=`) and, for io_uring, `kernel.io_uring_disabled`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Confinement {
    /// The `Seccomp:` line of /proc/self/status: 0 none, 1 strict, 2 a
    /// filter; None where it cannot be read.
    pub seccomp: Option<u32>,
    /// `kernel.io_uring_disabled` (Linux 6.6+): 0 allowed, 1 only for
    /// CAP_SYS_ADMIN and members of `kernel.io_uring_group`, 2 disabled.
    /// None where the knob does not exist.
    pub io_uring_disabled: Option<u32>,
    /// Whether `kernel.io_uring_disabled = 1` lets this process in: it has
    /// CAP_SYS_ADMIN or is in the group `kernel.io_uring_group` names.
    pub io_uring_admitted: bool,
    /// `kernel.io_uring_group`, where the knob exists.
    pub io_uring_group: Option<libc::gid_t>,
}

impl Confinement {
    /// As this process sees it now.
    pub fn of_this_process() -> Confinement {
        let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
        let group =
            read_sysctl("kernel/io_uring_group").and_then(|gid| libc::gid_t::try_from(gid).ok());
        Confinement {
            seccomp: status_field(&status, "Seccomp:").and_then(|v| v.parse().ok()),
            io_uring_disabled: read_sysctl("kernel/io_uring_disabled").map(|v| v as u32),
            io_uring_admitted: has_cap_sys_admin(&status) || group.is_some_and(in_group),
            io_uring_group: group,
        }
    }

    /// The same once root is given up (a chroot may hide /proc then, so
    /// what was read stays): no capability left, only the groups admit.
    pub fn dropped(&self) -> Confinement {
        Confinement {
            io_uring_admitted: self.io_uring_group.is_some_and(in_group),
            ..*self
        }
    }

    fn filtered(&self) -> bool {
        matches!(self.seccomp, Some(1 | 2))
    }
}

/// The value after `name` on its line of a /proc status file.
fn status_field<'a>(status: &'a str, name: &str) -> Option<&'a str> {
    status
        .lines()
        .find_map(|line| line.strip_prefix(name))
        .map(str::trim)
}

/// CAP_SYS_ADMIN (bit 21) in the effective set of /proc/self/status.
fn has_cap_sys_admin(status: &str) -> bool {
    status_field(status, "CapEff:")
        .and_then(|hex| u64::from_str_radix(hex, 16).ok())
        .is_some_and(|caps| caps & (1 << 21) != 0)
}

/// Whether this process's effective or supplementary groups include `gid`.
fn in_group(gid: libc::gid_t) -> bool {
    // SAFETY: getegid cannot fail; getgroups(0, NULL) only counts, and then
    // writes at most `groups.len()` entries.
    unsafe {
        if libc::getegid() == gid {
            return true;
        }
        let count = libc::getgroups(0, std::ptr::null_mut());
        let mut groups = vec![0 as libc::gid_t; usize::try_from(count).unwrap_or(0)];
        let n = libc::getgroups(count.max(0), groups.as_mut_ptr());
        n > 0 && groups.get(..n as usize).is_some_and(|g| g.contains(&gid))
    }
}

/// A number under /proc/sys; None where it does not exist.
fn read_sysctl(path: &str) -> Option<i64> {
    std::fs::read_to_string(format!("/proc/sys/{path}"))
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// The system calls the tracker needs that a container's seccomp profile
/// may block, each made once here as the workers will make it: a failure
/// is one line that names the call, what refused it and the fix, instead of
/// a worker dying later with a bare errno.
/// `seen`: what may refuse them ([`Confinement::of_this_process`], read
/// while /proc is there).
pub fn check_system_calls(seen: &Confinement) -> Result<(), String> {
    check_io_uring(seen)?;
    check_affinity(seen)
}

/// Sets up a one-entry ring, enters it and registers on it, as glommio
/// does for each of a worker's rings: the only reliable test that this
/// process may use io_uring (a sysctl, a seccomp filter, a security module
/// or a kernel built without it can each forbid it, and a profile may allow
/// one of the three calls and not the others).
pub fn check_io_uring(seen: &Confinement) -> Result<(), String> {
    // struct io_uring_params is 120 bytes; zero asks for the defaults.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup reads and writes one io_uring_params.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd < 0 {
        return Err(refusal("io_uring_setup", last_errno(), seen));
    }
    // SAFETY: the ring's fd is ours, and closed once when `ring` drops.
    let ring = unsafe { OwnedFd::from_raw_fd(fd as libc::c_int) };
    // Nothing to submit, nothing to wait for: returns 0 at once.
    // SAFETY: no submission queue entries are read with to_submit = 0.
    let entered = unsafe {
        libc::syscall(
            libc::SYS_io_uring_enter,
            ring.as_raw_fd(),
            0u32,
            0u32,
            0u32,
            std::ptr::null::<libc::sigset_t>(),
            0usize,
        )
    };
    if entered < 0 {
        return Err(refusal("io_uring_enter", last_errno(), seen));
    }
    // The opcodes this kernel supports (IORING_REGISTER_PROBE, Linux 5.6),
    // which glommio reads before anything else: a struct io_uring_probe
    // of 16 bytes and room for 64 ops of 8 bytes each.
    const IORING_REGISTER_PROBE: u32 = 8;
    const PROBE_OPS: u32 = 64;
    let mut probe = [0u64; 2 + PROBE_OPS as usize];
    // SAFETY: the kernel writes at most 16 + 8 * PROBE_OPS bytes to `probe`.
    let registered = unsafe {
        libc::syscall(
            libc::SYS_io_uring_register,
            ring.as_raw_fd(),
            IORING_REGISTER_PROBE,
            probe.as_mut_ptr(),
            PROBE_OPS,
        )
    };
    if registered < 0 {
        return Err(refusal("io_uring_register", last_errno(), seen));
    }
    Ok(())
}

/// Sets this thread's CPU mask to what it is (each worker pins itself, or
/// fences itself to its CPUs, with sched_setaffinity).
fn check_affinity(seen: &Confinement) -> Result<(), String> {
    // SAFETY: a zeroed cpu_set_t is valid; both calls read or write one.
    unsafe {
        let mut set: libc::cpu_set_t = std::mem::zeroed();
        let size = std::mem::size_of::<libc::cpu_set_t>();
        if libc::sched_getaffinity(0, size, &mut set) != 0
            || libc::sched_setaffinity(0, size, &set) != 0
        {
            return Err(refusal("sched_setaffinity", last_errno(), seen));
        }
    }
    Ok(())
}

fn last_errno() -> Option<i32> {
    io::Error::last_os_error().raw_os_error()
}

/// The cause of a refused `call` and what to change, most certain cause
/// first: the io_uring sysctl, which refuses whatever else allows; a
/// seccomp filter, which answers EPERM or ENOSYS as its profile says (a
/// kernel that lacks the call answers ENOSYS too, but only a process with
/// no filter can tell); then the kernel itself.
fn refusal(call: &str, errno: Option<i32>, seen: &Confinement) -> String {
    let io_uring = call.starts_with("io_uring");
    let denied = matches!(errno, Some(libc::EPERM | libc::EACCES));
    match (errno, seen.io_uring_disabled) {
        (Some(libc::ENOMEM), _) if io_uring => {
            return "io_uring cannot allocate its ring: the locked-memory limit is too low; \
                    raise it (LimitMEMLOCK= in the systemd unit, memlock in \
                    /etc/security/limits.conf, --ulimit memlock= for a container)"
                .to_string()
        }
        (_, Some(2)) if io_uring && denied => {
            return "io_uring is disabled by the sysctl kernel.io_uring_disabled = 2: set it to \
                    0, or to 1 with kernel.io_uring_group = the tracker's group (sysctl -w, and \
                    in /etc/sysctl.d; deploy/check-host says which)"
                .to_string()
        }
        (_, Some(1)) if io_uring && denied && !seen.io_uring_admitted => {
            return "io_uring is disabled by the sysctl kernel.io_uring_disabled = 1 for all but \
                    CAP_SYS_ADMIN and the group kernel.io_uring_group names, which this process \
                    is not in: set kernel.io_uring_group to the tracker's group (or \
                    kernel.io_uring_disabled = 0) with sysctl -w, and in /etc/sysctl.d"
                .to_string()
        }
        _ => {}
    }
    let blockable = denied || errno == Some(libc::ENOSYS);
    if blockable && seen.filtered() {
        return format!(
            "{call} is blocked by this process's seccomp filter (a container's default \
             profile? Seccomp: {} in /proc/self/status): run the container with \
             deploy/container/seccomp.json (--security-opt seccomp=FILE), which allows \
             io_uring_setup, io_uring_enter and io_uring_register, or allow {call} in the \
             filter (a systemd unit's SystemCallFilter=); see docs/OPERATIONS.md, \
             \"Containers\"",
            seen.seccomp.unwrap_or(2)
        );
    }
    let what = errno.map_or_else(
        || "unknown error".to_string(),
        |e| io::Error::from_raw_os_error(e).to_string(),
    );
    match errno {
        Some(libc::ENOSYS) if io_uring => "io_uring is not available: the kernel was built \
             without CONFIG_IO_URING (no seccomp filter on this process, so the kernel itself \
             answered ENOSYS); use a kernel that has it"
            .to_string(),
        Some(libc::ENOSYS) => format!("{call} does not exist in this kernel ({what})"),
        _ if denied => format!(
            "{call} was refused ({what}) with no seccomp filter on this process{}: a \
             security module's policy (SELinux, AppArmor) may forbid it; the audit log says",
            match seen.io_uring_disabled {
                Some(level) if io_uring => format!(" and kernel.io_uring_disabled = {level}"),
                _ => String::new(),
            }
        ),
        _ if io_uring => {
            format!("io_uring cannot be set up ({call}: {what}): this tracker needs io_uring")
        }
        _ => format!("{call} failed ({what}): the tracker needs it to place its workers"),
    }
}

/// The soft RLIMIT_MEMLOCK in bytes, or `None` when unlimited.
pub fn memlock_limit() -> Option<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one rlimit struct.
    if unsafe { libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) } != 0
        || limit.rlim_cur == libc::RLIM_INFINITY
    {
        return None;
    }
    Some(limit.rlim_cur)
}

/// The least soft RLIMIT_MEMLOCK under which glommio starts an executor:
/// it checks the limit itself, whoever the process is (root too), and a
/// worker then fails with a bare "MemLockLimit(65536/524288)". Linux before
/// 5.16 gives processes 64 KiB by default.
pub const GLOMMIO_MIN_MEMLOCK: u64 = 512 << 10;

/// Refuses a locked-memory limit under glommio's floor, or one that cannot
/// hold `workers` workers. Root (serving as root, not dropping privileges)
/// is not charged by io_uring, so only the floor applies to it.
pub fn check_memlock(
    limit: Option<u64>,
    workers: usize,
    serves_as_root: bool,
) -> Result<(), String> {
    let Some(limit) = limit else {
        return Ok(());
    };
    const RAISE: &str = "raise it (LimitMEMLOCK= in the systemd unit, memlock in \
                         /etc/security/limits.conf, ulimit -l, --ulimit memlock= for a \
                         container)";
    if limit < GLOMMIO_MIN_MEMLOCK {
        return Err(format!(
            "the locked-memory limit is {} KiB, below the {} KiB that glommio requires to \
             start a worker, as root too (Linux before 5.16 sets 64 KiB by default): {RAISE}",
            limit >> 10,
            GLOMMIO_MIN_MEMLOCK >> 10
        ));
    }
    let need = workers as u64 * MEMLOCK_PER_WORKER;
    if limit < need && !serves_as_root {
        return Err(format!(
            "the locked-memory limit is {} KiB, below the {} KiB that {workers} workers \
             register with io_uring ({} KiB each): {RAISE}, or run fewer workers \
             (--workers {})",
            limit >> 10,
            need >> 10,
            MEMLOCK_PER_WORKER >> 10,
            limit / MEMLOCK_PER_WORKER
        ));
    }
    Ok(())
}

/// Descriptors a worker holds besides its listeners and connections:
/// glommio's rings and eventfds (4 seen), with room to spare.
pub const FDS_PER_WORKER: u64 = 16;

/// Descriptors of the process outside the workers' own: the standard
/// streams, the control socket, the metrics listeners, a file read on
/// SIGHUP or written at the stop, with room to spare.
pub const FDS_OF_THE_PROCESS: u64 = 64;

/// Raises the soft RLIMIT_NOFILE to the hard limit (the soft one is often
/// 1024 outside systemd, less than the connections a single worker may
/// hold); returns the soft limit now in force.
pub fn raise_nofile() -> io::Result<u64> {
    let mut limit = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit and setrlimit read and write one rlimit struct.
    unsafe {
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut limit) != 0 {
            return Err(io::Error::last_os_error());
        }
        if limit.rlim_cur < limit.rlim_max {
            limit.rlim_cur = limit.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &limit) != 0 {
                return Err(io::Error::last_os_error());
            }
        }
    }
    Ok(limit.rlim_cur)
}

/// The connections each of `workers` may hold within `limit` descriptors,
/// when each worker also has `listeners` sockets and the process `others`
/// descriptors of its own beyond [`FDS_OF_THE_PROCESS`]; an error (with the
/// fix) when not even one fits.
pub fn connections_that_fit(
    limit: u64,
    workers: usize,
    listeners: usize,
    others: usize,
) -> Result<u64, String> {
    let workers = workers as u64;
    let fixed = FDS_OF_THE_PROCESS + others as u64 + workers * (FDS_PER_WORKER + listeners as u64);
    match limit.saturating_sub(fixed) / workers.max(1) {
        0 => Err(format!(
            "the file-descriptor limit (RLIMIT_NOFILE) is {limit}, below the {} that {workers} \
             workers need before their first connection: raise it (LimitNOFILE= in the systemd \
             unit, nofile in /etc/security/limits.conf, ulimit -n) or run fewer workers",
            fixed + workers
        )),
        fit => Ok(fit),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connections_share_what_the_descriptor_limit_leaves() {
        let fixed = FDS_OF_THE_PROCESS + 10 + 2 * (FDS_PER_WORKER + 3);
        assert_eq!(connections_that_fit(fixed + 200, 2, 3, 10), Ok(100));
        assert_eq!(connections_that_fit(fixed + 201, 2, 3, 10), Ok(100));
        let err = connections_that_fit(fixed + 1, 2, 3, 10).unwrap_err();
        assert!(
            err.contains("RLIMIT_NOFILE") && err.contains("LimitNOFILE"),
            "{err}"
        );
        assert!(connections_that_fit(10, 2, 3, 10).is_err());
    }

    #[test]
    fn kernel_versions_parse_from_release_strings() {
        assert_eq!(parse_kernel_version("5.15.0-91-generic"), Some((5, 15)));
        assert_eq!(parse_kernel_version("6.18.44-fc-v657"), Some((6, 18)));
        assert_eq!(parse_kernel_version("5.10"), Some((5, 10)));
        assert_eq!(parse_kernel_version("4.19.0+"), Some((4, 19)));
        assert_eq!(parse_kernel_version("linux"), None);
        assert_eq!(parse_kernel_version("6"), None);
    }

    #[test]
    fn kernels_before_5_10_are_refused_with_the_fix() {
        assert!(check_kernel("5.10.0-28-amd64").is_ok());
        assert!(check_kernel("6.1.0").is_ok());
        assert!(check_kernel("10.0.0").is_ok());
        let err = check_kernel("5.4.0-150-generic").unwrap_err();
        assert!(
            err.contains("5.4.0-150-generic") && err.contains("upgrade"),
            "{err}"
        );
        assert!(check_kernel("4.19.0").is_err());
        assert!(check_kernel("garbage").is_err());
    }

    const FILTERED: Confinement = Confinement {
        seccomp: Some(2),
        io_uring_disabled: None,
        io_uring_admitted: false,
        io_uring_group: None,
    };
    const OPEN: Confinement = Confinement {
        seccomp: Some(0),
        io_uring_disabled: Some(0),
        io_uring_admitted: false,
        io_uring_group: None,
    };

    #[test]
    fn a_seccomp_filter_is_named_whatever_errno_its_profile_answers() {
        // podman's default profile answers ENOSYS, Docker's EPERM.
        for errno in [libc::ENOSYS, libc::EPERM] {
            for call in ["io_uring_setup", "io_uring_enter", "io_uring_register"] {
                let text = refusal(call, Some(errno), &FILTERED);
                assert!(
                    text.starts_with(&format!(
                        "{call} is blocked by this process's seccomp filter"
                    )) && text.contains("deploy/container/seccomp.json")
                        && text.contains("docs/OPERATIONS.md"),
                    "{text}"
                );
                assert!(!text.contains("CONFIG_IO_URING"), "{text}");
            }
        }
        let text = refusal("sched_setaffinity", Some(libc::EPERM), &FILTERED);
        assert!(text.starts_with("sched_setaffinity is blocked"), "{text}");
        // Strict mode (1) allows nothing but read, write, exit: a filter too.
        let strict = Confinement {
            seccomp: Some(1),
            ..FILTERED
        };
        assert!(refusal("io_uring_setup", Some(libc::ENOSYS), &strict).contains("seccomp"));
    }

    #[test]
    fn the_sysctl_is_named_before_a_filter_when_it_refuses() {
        for seccomp in [Some(0), Some(2), None] {
            let off = Confinement {
                seccomp,
                io_uring_disabled: Some(2),
                io_uring_admitted: true,
                io_uring_group: None,
            };
            let text = refusal("io_uring_setup", Some(libc::EPERM), &off);
            assert!(text.contains("kernel.io_uring_disabled = 2"), "{text}");
            let group = Confinement {
                seccomp,
                io_uring_disabled: Some(1),
                io_uring_admitted: false,
                io_uring_group: None,
            };
            let text = refusal("io_uring_setup", Some(libc::EPERM), &group);
            assert!(
                text.contains("kernel.io_uring_disabled = 1")
                    && text.contains("kernel.io_uring_group"),
                "{text}"
            );
        }
        // At 1 a member of the group is let in: the refusal came from elsewhere.
        let admitted = Confinement {
            seccomp: Some(2),
            io_uring_disabled: Some(1),
            io_uring_admitted: true,
            io_uring_group: None,
        };
        assert!(refusal("io_uring_setup", Some(libc::EPERM), &admitted).contains("seccomp filter"));
        // The sysctl answers EPERM; a filter's ENOSYS is the filter's.
        let both = Confinement {
            seccomp: Some(2),
            io_uring_disabled: Some(2),
            io_uring_admitted: false,
            io_uring_group: None,
        };
        assert!(refusal("io_uring_setup", Some(libc::ENOSYS), &both).contains("seccomp filter"));
    }

    #[test]
    fn the_kernel_is_blamed_only_when_nothing_else_explains_it() {
        let text = refusal("io_uring_setup", Some(libc::ENOSYS), &OPEN);
        assert!(
            text.contains("CONFIG_IO_URING") && !text.contains("blocked"),
            "{text}"
        );
        let unknown = Confinement {
            seccomp: None,
            io_uring_disabled: None,
            io_uring_admitted: false,
            io_uring_group: None,
        };
        assert!(refusal("io_uring_setup", Some(libc::ENOSYS), &unknown).contains("CONFIG_IO_URING"));
        let text = refusal("io_uring_setup", Some(libc::EPERM), &OPEN);
        assert!(
            text.contains("no seccomp filter") && text.contains("security module"),
            "{text}"
        );
        assert!(refusal("io_uring_setup", Some(libc::ENOMEM), &FILTERED).contains("LimitMEMLOCK"));
        assert!(refusal("io_uring_setup", Some(libc::EINVAL), &OPEN).contains("needs io_uring"));
        assert!(refusal("sched_setaffinity", Some(libc::EINVAL), &OPEN).contains("workers"));
    }

    #[test]
    fn this_process_status_is_read() {
        let seen = Confinement::of_this_process();
        assert!(matches!(seen.seccomp, Some(0..=2)), "{seen:?}");
        let status = "Name:\tx\nCapEff:\t000001ffffffffff\nSeccomp:\t2\n";
        assert_eq!(status_field(status, "Seccomp:"), Some("2"));
        assert!(has_cap_sys_admin(status));
        assert!(!has_cap_sys_admin("CapEff:\t0000000000000400\n"));
        // SAFETY: getegid cannot fail.
        assert!(in_group(unsafe { libc::getegid() }));
    }

    /// Root is admitted by kernel.io_uring_disabled = 1 through
    /// CAP_SYS_ADMIN; the user it drops to only through io_uring_group.
    #[test]
    fn a_dropped_process_is_admitted_by_its_groups_alone() {
        let root = Confinement {
            seccomp: Some(0),
            io_uring_disabled: Some(1),
            io_uring_admitted: true,
            io_uring_group: Some(4_242_424),
        };
        assert!(!root.dropped().io_uring_admitted);
        // SAFETY: getegid cannot fail.
        let mine = unsafe { libc::getegid() };
        let member = Confinement {
            io_uring_group: Some(mine),
            ..root
        };
        assert!(member.dropped().io_uring_admitted);
        assert!(
            refusal("io_uring_setup", Some(libc::EPERM), &root.dropped())
                .contains("io_uring_group")
        );
    }

    #[test]
    fn this_host_can_run_the_tracker() {
        // The test machines are the tracker's machines: these must hold here.
        check_kernel(&kernel_release().unwrap()).unwrap();
        check_system_calls(&Confinement::of_this_process()).unwrap();
    }

    #[test]
    fn memlock_is_checked_per_worker_unless_serving_as_root() {
        let per = MEMLOCK_PER_WORKER;
        assert!(check_memlock(Some(4 * per), 4, false).is_ok());
        assert!(check_memlock(None, 1000, false).is_ok());
        assert!(check_memlock(Some(GLOMMIO_MIN_MEMLOCK), 1000, true).is_ok());
        let err = check_memlock(Some(8 << 20), 64, false).unwrap_err();
        assert!(
            err.contains("8192 KiB") && err.contains("--workers 32"),
            "{err}"
        );
    }

    #[test]
    fn memlock_under_glommios_floor_is_refused_even_as_root() {
        // Linux 5.10's default: glommio refuses it for root too.
        for serves_as_root in [true, false] {
            let err = check_memlock(Some(64 << 10), 1, serves_as_root).unwrap_err();
            assert!(
                err.contains("64 KiB") && err.contains("512 KiB") && err.contains("ulimit -l"),
                "{err}"
            );
        }
        // One worker needs 256 KiB of io_uring's, but glommio 512.
        assert!(check_memlock(Some(MEMLOCK_PER_WORKER), 1, false).is_err());
        assert!(check_memlock(Some(0), 1, true).is_err());
    }
}
