//! Giving up every capability once the start has done what needed one
//! (the ports bound, AF_XDP attached, root given up): the serving process
//! holds none, so nothing it does later can use one (a SIGHUP reload, a
//! snapshot, the route follower's netlink reads, the AF_XDP statistics, a
//! hand-over, the successor started on SIGUSR2 all need none).
//!
//! The effective, permitted and inheritable sets are emptied (`capset`),
//! the ambient set cleared, and the bounding set emptied where the process
//! may (with CAP_SETPCAP: a tracker started as root; under systemd the
//! unit's `CapabilityBoundingSet=` has already cut it to what the unit
//! grants); and `no_new_privs` is set, so that no execve (the successor
//! started on SIGUSR2) can gain one back from a file's capabilities or a
//! set-user-ID bit. A uid 0 process with none is charged for locked memory
//! like any other user (io_uring asks CAP_IPC_LOCK, not the uid).
//!
//! Capabilities belong to threads: the drop is made while the process has
//! one thread (refused otherwise, naming the others), before the signal,
//! route, snapshot and worker threads start, so that every thread inherits
//! the empty sets.
//!
//! `keep` spares a set: AF_XDP's four on a kernel that cannot hand its
//! sockets over (before Linux 6.4), where the successor must attach again;
//! `ROOT_FILES` for a tracker that serves as root. They stay effective,
//! permitted, inheritable and ambient, so that the successor inherits them
//! through execve.

use std::io;

/// A set of capabilities, one bit per capability (linux/capability.h).
pub type Caps = u64;

pub const CAP_CHOWN: u32 = 0;
pub const CAP_DAC_OVERRIDE: u32 = 1;
pub const CAP_DAC_READ_SEARCH: u32 = 2;
pub const CAP_FOWNER: u32 = 3;
pub const CAP_SETPCAP: u32 = 8;
pub const CAP_NET_BIND_SERVICE: u32 = 10;
pub const CAP_NET_ADMIN: u32 = 12;
pub const CAP_NET_RAW: u32 = 13;
pub const CAP_IPC_LOCK: u32 = 14;
pub const CAP_SYS_ADMIN: u32 = 21;
pub const CAP_PERFMON: u32 = 38;
pub const CAP_BPF: u32 = 39;

/// What a tracker that serves as root (`privileges.allow_root`) keeps of
/// root's: its files' access and ownership, as root has them (the access
/// list and the state file it writes keep their owner and mode, and files
/// of other users that root reads stay readable). Nothing of the network,
/// the kernel or other processes.
pub const ROOT_FILES: Caps =
    1 << CAP_CHOWN | 1 << CAP_DAC_OVERRIDE | 1 << CAP_DAC_READ_SEARCH | 1 << CAP_FOWNER;

/// What AF_XDP needs to attach.
pub const AF_XDP: Caps = 1 << CAP_NET_ADMIN | 1 << CAP_NET_RAW | 1 << CAP_IPC_LOCK | 1 << CAP_BPF;

/// What a successor needs to attach AF_XDP again: the four, and
/// CAP_PERFMON, without which Linux 5.10's verifier refuses the program's
/// packet-bounds comparisons ("pointer comparison prohibited"; 6.1 takes
/// them), where the process holds it.
pub const AF_XDP_AGAIN: Caps = AF_XDP | 1 << CAP_PERFMON;

/// The names of the capabilities in `caps`, for a message; a set of more
/// than a few (root's) by its count and mask.
pub fn names(caps: Caps) -> String {
    if caps.count_ones() > 8 {
        return format!("{} capabilities ({caps:#x})", caps.count_ones());
    }
    const NAMES: [(u32, &str); 12] = [
        (CAP_CHOWN, "CAP_CHOWN"),
        (CAP_DAC_OVERRIDE, "CAP_DAC_OVERRIDE"),
        (CAP_DAC_READ_SEARCH, "CAP_DAC_READ_SEARCH"),
        (CAP_FOWNER, "CAP_FOWNER"),
        (CAP_NET_BIND_SERVICE, "CAP_NET_BIND_SERVICE"),
        (CAP_SETPCAP, "CAP_SETPCAP"),
        (CAP_NET_ADMIN, "CAP_NET_ADMIN"),
        (CAP_NET_RAW, "CAP_NET_RAW"),
        (CAP_IPC_LOCK, "CAP_IPC_LOCK"),
        (CAP_SYS_ADMIN, "CAP_SYS_ADMIN"),
        (CAP_PERFMON, "CAP_PERFMON"),
        (CAP_BPF, "CAP_BPF"),
    ];
    let mut named: Vec<String> = Vec::new();
    for bit in 0..64 {
        if caps & (1 << bit) == 0 {
            continue;
        }
        match NAMES.iter().find(|(b, _)| *b == bit) {
            Some((_, name)) => named.push((*name).to_string()),
            None => named.push(format!("capability {bit}")),
        }
    }
    if named.is_empty() {
        "none".to_string()
    } else {
        named.join(", ")
    }
}

/// A thread's capability sets, and whether it may gain any.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Sets {
    pub effective: Caps,
    pub permitted: Caps,
    pub inheritable: Caps,
    pub ambient: Caps,
    pub bounding: Caps,
    pub no_new_privs: bool,
}

impl Sets {
    /// The calling thread's, from the kernel (no /proc: a chrooted
    /// tracker has none).
    pub fn of_this_process() -> io::Result<Sets> {
        let [effective, permitted, inheritable] = capget()?;
        let (mut ambient, mut bounding) = (0, 0);
        for cap in 0..=last_cap() {
            // SAFETY: prctl with plain integers.
            let is_set = unsafe {
                libc::prctl(
                    libc::PR_CAP_AMBIENT,
                    libc::PR_CAP_AMBIENT_IS_SET as libc::c_ulong,
                    cap as libc::c_ulong,
                    0,
                    0,
                )
            };
            if is_set == 1 {
                ambient |= 1 << cap;
            }
            // SAFETY: prctl with plain integers.
            if unsafe { libc::prctl(libc::PR_CAPBSET_READ, cap as libc::c_ulong, 0, 0, 0) } == 1 {
                bounding |= 1 << cap;
            }
        }
        // SAFETY: prctl with plain integers.
        let no_new_privs = unsafe { libc::prctl(libc::PR_GET_NO_NEW_PRIVS, 0, 0, 0, 0) } == 1;
        Ok(Sets {
            effective,
            permitted,
            inheritable,
            ambient,
            bounding,
            no_new_privs,
        })
    }
}

/// What the drop left.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Dropped {
    /// Held before.
    pub before: Caps,
    /// Held now: `keep`, as far as it was held.
    pub kept: Caps,
    /// Whether the bounding set was emptied too (else `no_new_privs` alone
    /// keeps an execve from gaining any).
    pub bounding_emptied: bool,
    /// capset(2) was refused with EPERM, which lowering never is but by a
    /// system-call filter (a unit's `SystemCallFilter=~@privileged`
    /// without `capset`): `kept` is then all that was held.
    pub capset_refused: bool,
}

/// Gives up every capability but those of `keep` that the process holds
/// (see the module's comment). Err names the step that failed.
pub fn drop_all_but(keep: Caps) -> Result<Dropped, String> {
    one_thread()?;
    let before = Sets::of_this_process()
        .map_err(|e| format!("cannot read the capabilities to drop them: {e}"))?;
    let kept = keep & before.permitted;
    if before.effective & (1 << CAP_SETPCAP) != 0 {
        empty_bounding_set(kept)?;
    }
    // SAFETY: prctl with plain integers.
    if unsafe {
        libc::prctl(
            libc::PR_CAP_AMBIENT,
            libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
            0,
            0,
            0,
        )
    } != 0
    {
        return Err(format!(
            "cannot clear the ambient capabilities: {}",
            io::Error::last_os_error()
        ));
    }
    match capset(kept) {
        Ok(()) => {}
        Err(e) if e.raw_os_error() == Some(libc::EPERM) => {
            set_no_new_privs()?;
            return Ok(Dropped {
                before: before.permitted,
                kept: before.permitted,
                bounding_emptied: false,
                capset_refused: true,
            });
        }
        Err(e) => return Err(format!("cannot drop the capabilities (capset): {e}")),
    }
    for cap in 0..64 {
        if kept & (1 << cap) == 0 {
            continue;
        }
        // SAFETY: prctl with plain integers.
        if unsafe {
            libc::prctl(
                libc::PR_CAP_AMBIENT,
                libc::PR_CAP_AMBIENT_RAISE as libc::c_ulong,
                cap as libc::c_ulong,
                0,
                0,
            )
        } != 0
        {
            return Err(format!(
                "cannot keep {} for the successor (ambient): {}",
                names(1 << cap),
                io::Error::last_os_error()
            ));
        }
    }
    set_no_new_privs()?;
    let after = Sets::of_this_process()
        .map_err(|e| format!("cannot read the capabilities after dropping them: {e}"))?;
    let left = [
        after.effective,
        after.permitted,
        after.inheritable,
        after.ambient,
    ];
    if left.iter().any(|&set| set != kept) || !after.no_new_privs {
        return Err(format!(
            "the capabilities were not dropped: {after:?} left, {} wanted",
            names(kept)
        ));
    }
    Ok(Dropped {
        before: before.permitted,
        kept,
        bounding_emptied: after.bounding & !kept == 0,
        capset_refused: false,
    })
}

/// No execve of this process or its children gains a privilege.
fn set_no_new_privs() -> Result<(), String> {
    // SAFETY: prctl with plain integers.
    if unsafe { libc::prctl(libc::PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) } != 0 {
        return Err(format!(
            "cannot set no_new_privs: {}",
            io::Error::last_os_error()
        ));
    }
    Ok(())
}

/// Empties the bounding set but for `keep` (needs CAP_SETPCAP): no execve
/// of this process or its children can gain a capability outside it, a
/// set-user-ID root binary's included. Done before root is given up for a
/// user (`privileges.user`), which takes CAP_SETPCAP with it, as the rest
/// of the drop comes after; that change of user needs only the permitted
/// set, which this leaves alone.
pub fn empty_bounding_set(keep: Caps) -> Result<(), String> {
    for cap in 0..=last_cap() {
        if keep & (1 << cap) != 0 {
            continue;
        }
        // SAFETY: prctl with plain integers.
        if unsafe { libc::prctl(libc::PR_CAPBSET_DROP, cap as libc::c_ulong, 0, 0, 0) } != 0 {
            let e = io::Error::last_os_error();
            // Past the kernel's last capability.
            if e.raw_os_error() == Some(libc::EINVAL) {
                break;
            }
            return Err(format!(
                "cannot drop capability {cap} from the bounding set: {e}"
            ));
        }
    }
    Ok(())
}

/// Refuses a process with more than one thread: the others would keep
/// their capabilities. A guard against a start that spawns a thread too
/// early (a bug), which the tests run into; where there is no /proc to
/// list the threads by (a chroot), the start's order alone holds.
fn one_thread() -> Result<(), String> {
    let tasks = match std::fs::read_dir("/proc/self/task") {
        Ok(tasks) => tasks,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => {
            return Err(format!(
                "cannot list this process's threads (/proc/self/task): {e}"
            ))
        }
    };
    let tasks: Vec<String> = tasks
        .filter_map(Result::ok)
        .map(|task| {
            std::fs::read_to_string(task.path().join("comm"))
                .map(|comm| comm.trim().to_string())
                .unwrap_or_else(|_| task.file_name().to_string_lossy().into_owned())
        })
        .collect();
    if tasks.len() > 1 {
        return Err(format!(
            "cannot drop the capabilities: threads {} were started before, and would keep \
             theirs (a bug)",
            tasks.join(", ")
        ));
    }
    Ok(())
}

/// The calling thread's effective, permitted and inheritable sets.
fn capget() -> io::Result<[Caps; 3]> {
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let mut data = [Data::default(); 2];
    // SAFETY: a version-3 header and the two data words it fills, alive
    // for the call.
    if unsafe { libc::syscall(libc::SYS_capget, &mut header, data.as_mut_ptr()) } != 0 {
        return Err(io::Error::last_os_error());
    }
    let join = |low: u32, high: u32| u64::from(low) | u64::from(high) << 32;
    Ok([
        join(data[0].effective, data[1].effective),
        join(data[0].permitted, data[1].permitted),
        join(data[0].inheritable, data[1].inheritable),
    ])
}

/// capget(2) and capset(2)'s header and data (linux/capability.h).
#[repr(C)]
struct Header {
    version: u32,
    pid: libc::c_int,
}
#[repr(C)]
#[derive(Clone, Copy, Default)]
struct Data {
    effective: u32,
    permitted: u32,
    inheritable: u32,
}
const VERSION_3: u32 = 0x2008_0522;

/// The kernel's last capability (/proc/sys/kernel/cap_last_cap), or 63.
fn last_cap() -> u32 {
    std::fs::read_to_string("/proc/sys/kernel/cap_last_cap")
        .ok()
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(63)
}

/// Sets the effective, permitted and inheritable sets of the calling
/// thread to `caps` (version 3: two 32-bit words per set).
fn capset(caps: Caps) -> io::Result<()> {
    let mut header = Header {
        version: VERSION_3,
        pid: 0,
    };
    let word = |shift: u32| (caps >> shift) as u32;
    let data = [
        Data {
            effective: word(0),
            permitted: word(0),
            inheritable: word(0),
        },
        Data {
            effective: word(32),
            permitted: word(32),
            inheritable: word(32),
        },
    ];
    // SAFETY: a version-3 header and the two data words it asks for,
    // alive for the call.
    let rc = unsafe { libc::syscall(libc::SYS_capset, &mut header, data.as_ptr()) };
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_are_given() {
        assert_eq!(
            names(AF_XDP),
            "CAP_NET_ADMIN, CAP_NET_RAW, CAP_IPC_LOCK, CAP_BPF"
        );
        assert_eq!(names(1 << 10), "CAP_NET_BIND_SERVICE");
        assert_eq!(names(1 << 20), "capability 20");
        assert_eq!(names(u64::MAX >> 23), "41 capabilities (0x1ffffffffff)");
        assert_eq!(names(0), "none");
    }

    /// In a child process of its own (the drop is for good, and for one
    /// thread): as root, every set is emptied, the bounding set too; with
    /// `keep`, those stay, ambient included.
    #[test]
    fn a_drop_leaves_nothing_but_what_is_kept() {
        if Sets::of_this_process().unwrap().effective & (1 << CAP_SETPCAP) == 0 {
            eprintln!("skipped: needs CAP_SETPCAP (root)");
            return;
        }
        for keep in [0, AF_XDP] {
            // SAFETY: the child only makes system calls and exits.
            let pid = unsafe { libc::fork() };
            assert!(pid >= 0);
            if pid == 0 {
                let code = match drop_all_but(keep) {
                    Ok(dropped) if dropped.kept == keep && dropped.bounding_emptied => {
                        let sets = Sets::of_this_process().unwrap();
                        if sets.bounding == keep && sets.ambient == keep {
                            0
                        } else {
                            2
                        }
                    }
                    _ => 1,
                };
                // SAFETY: ends the child without running the parent's
                // destructors.
                unsafe { libc::_exit(code) };
            }
            let mut status = 0;
            // SAFETY: waits for our own child.
            assert_eq!(unsafe { libc::waitpid(pid, &mut status, 0) }, pid);
            assert!(
                libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0,
                "keep {keep:#x}: {status:#x}"
            );
        }
    }
}
