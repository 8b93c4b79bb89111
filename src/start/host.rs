//! What the host must offer before a worker starts: a kernel new enough,
//! io_uring allowed, enough locked memory, and file descriptors for the
//! connections configured. Each failed check is one line that names the
//! cause and the fix, so that start-up fails clearly instead of a worker
//! dying later with a bare errno.

use std::ffi::CStr;
use std::io;

/// The oldest kernel we support: glommio's io_uring operations and the
/// accounting the memlock check relies on are there from 5.10 (an LTS).
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

/// `kernel.io_uring_disabled` (Linux 6.6+): 0 allowed, 1 only for members of
/// `kernel.io_uring_group`, 2 disabled. None where the knob does not exist.
pub fn io_uring_disabled_sysctl() -> Option<u32> {
    std::fs::read_to_string("/proc/sys/kernel/io_uring_disabled")
        .ok()?
        .trim()
        .parse()
        .ok()
}

/// Sets up and closes a one-entry ring: the only reliable test that this
/// process may use io_uring (a sysctl, a seccomp filter or a kernel built
/// without it can each forbid it).
pub fn check_io_uring() -> Result<(), String> {
    // struct io_uring_params is 120 bytes; zero asks for the defaults.
    let mut params = [0u8; 120];
    // SAFETY: io_uring_setup reads and writes one io_uring_params.
    let fd = unsafe { libc::syscall(libc::SYS_io_uring_setup, 1u32, params.as_mut_ptr()) };
    if fd >= 0 {
        // SAFETY: the ring's fd is ours and closed once.
        unsafe { libc::close(fd as libc::c_int) };
        return Ok(());
    }
    let err = io::Error::last_os_error();
    Err(io_uring_failure(
        err.raw_os_error(),
        io_uring_disabled_sysctl(),
    ))
}

/// The message for a failed io_uring_setup: the cause and what to change.
fn io_uring_failure(errno: Option<i32>, sysctl: Option<u32>) -> String {
    match (errno, sysctl) {
        (Some(libc::ENOSYS), _) => "io_uring is not available: the kernel was built without \
             CONFIG_IO_URING; use a kernel that has it"
            .to_string(),
        (Some(libc::EPERM), Some(level @ 1..)) => format!(
            "io_uring is disabled by the sysctl kernel.io_uring_disabled = {level}: set it to \
             0 (sysctl -w kernel.io_uring_disabled=0, and in /etc/sysctl.d) or, at 1, run the \
             tracker in the group kernel.io_uring_group names"
        ),
        (Some(libc::EPERM), _) => "io_uring is forbidden to this process (a seccomp filter, \
             such as a container runtime's default profile, or a systemd \
             SystemCallFilter=): allow io_uring_setup, io_uring_enter and io_uring_register"
            .to_string(),
        (Some(libc::ENOMEM), _) => "io_uring cannot allocate its ring: the locked-memory \
             limit is too low; raise it (LimitMEMLOCK= in the systemd unit, memlock in \
             /etc/security/limits.conf)"
            .to_string(),
        (errno, _) => format!(
            "io_uring cannot be set up ({}): this tracker needs io_uring",
            errno.map_or_else(
                || "unknown error".to_string(),
                |e| io::Error::from_raw_os_error(e).to_string()
            )
        ),
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

/// Refuses a locked-memory limit that cannot hold `workers` workers. Root
/// (serving as root, not dropping privileges) is not charged by io_uring.
pub fn check_memlock(
    limit: Option<u64>,
    workers: usize,
    serves_as_root: bool,
) -> Result<(), String> {
    let need = workers as u64 * MEMLOCK_PER_WORKER;
    match limit {
        Some(limit) if limit < need && !serves_as_root => Err(format!(
            "the locked-memory limit is {} KiB, below the {} KiB that {workers} workers \
             register with io_uring ({} KiB each): raise it (LimitMEMLOCK= in the systemd \
             unit, memlock in /etc/security/limits.conf, ulimit -l) or run fewer workers \
             (--workers {})",
            limit >> 10,
            need >> 10,
            MEMLOCK_PER_WORKER >> 10,
            (limit / MEMLOCK_PER_WORKER).max(1)
        )),
        _ => Ok(()),
    }
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

    #[test]
    fn io_uring_failures_name_the_cause_and_the_fix() {
        assert!(io_uring_failure(Some(libc::ENOSYS), None).contains("CONFIG_IO_URING"));
        let sysctl = io_uring_failure(Some(libc::EPERM), Some(2));
        assert!(sysctl.contains("kernel.io_uring_disabled = 2"), "{sysctl}");
        assert!(io_uring_failure(Some(libc::EPERM), Some(0)).contains("seccomp"));
        assert!(io_uring_failure(Some(libc::EPERM), None).contains("seccomp"));
        assert!(io_uring_failure(Some(libc::ENOMEM), None).contains("LimitMEMLOCK"));
        assert!(io_uring_failure(Some(libc::EINVAL), None).contains("needs io_uring"));
    }

    #[test]
    fn this_host_can_run_the_tracker() {
        // The test machines are the tracker's machines: these must hold here.
        check_kernel(&kernel_release().unwrap()).unwrap();
        check_io_uring().unwrap();
    }

    #[test]
    fn memlock_is_checked_per_worker_unless_serving_as_root() {
        let per = MEMLOCK_PER_WORKER;
        assert!(check_memlock(Some(4 * per), 4, false).is_ok());
        assert!(check_memlock(None, 1000, false).is_ok());
        assert!(check_memlock(Some(per), 1000, true).is_ok());
        let err = check_memlock(Some(8 << 20), 64, false).unwrap_err();
        assert!(
            err.contains("8192 KiB") && err.contains("--workers 32"),
            "{err}"
        );
        assert!(check_memlock(Some(0), 1, false)
            .unwrap_err()
            .contains("--workers 1"));
    }
}
