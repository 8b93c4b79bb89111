//! The PID file, which tells systemd which process is the service's main
//! one across hand-overs (the unit's `PIDFile=`, `/run/tracker/tracker.pid`).
//!
//! Why a file and not `sd_notify(MAINPID=)`, as earlier versions sent (issue
//! 42): systemd takes a main PID it did not fork as "alien" (systemd 252,
//! `service_set_main_pid`: `main_pid_alien = pid_is_my_child(pid) == 0`,
//! and logs "Supervising process N which is not our child"), and a
//! successor is the old tracker's child when it says so. At the stop,
//! `unit_kill_context` sends SIGTERM but waits only for a main process that
//! is not alien, or for other processes of the cgroup (the main one is left
//! out of that count); the tracker is alone in its cgroup, so systemd found
//! nothing to wait for and sent SIGKILL at once: nothing saved. It does so
//! under any `Type=`, on cgroup v1 and v2 alike, and never asks again: the
//! flag is set when the main PID changes.
//!
//! systemd reads the PID file when the main process exits, before it takes
//! that exit for the service's ("forking services may occasionally move to
//! a new PID", `service_sigchld_event`), and makes the process it names the
//! main one. By then the successor is systemd's own child: the kernel gave
//! it to PID 1 as the old tracker exited. So systemd waits for it at the
//! stop and takes its exit status, as for the process it started.
//!
//! Who writes it, so that it names the main process whenever systemd reads
//! it (when the main one exits, and after `systemctl reload`):
//! - a tracker that starts (not a successor): its own pid;
//! - a tracker that handed over: its successor's, as the last thing it
//!   does before it exits, when the successor is alive ([`MainPid::exiting`]);
//!   not earlier, as a reload meanwhile would make systemd take the
//!   successor while it is still the old one's child, alien again;
//! - a successor whose predecessor does not keep the file (an earlier
//!   version: the file names no live process): its own, just before it
//!   tells the predecessor to exit.
//!
//! It is `$PIDFILE`, which systemd sets from `PIDFile=`; else `tracker.pid`
//! in `$RUNTIME_DIRECTORY`, for a tracker whose first generation a unit
//! without `PIDFile=` started (an earlier version's), whose successors read
//! the environment it was given; else there is none.

use std::ffi::{CString, OsStr};
use std::fs::File;
use std::io::{self, Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing::{info, warn};

/// The file's name in `$RUNTIME_DIRECTORY` when `$PIDFILE` is not set: what
/// the unit's `PIDFile=` names.
const NAME: &str = "tracker.pid";

/// The PID file: its directory, opened at start (so that it is the same
/// directory after the tracker gives up root, or is chrooted), and its
/// name there.
pub struct PidFile {
    path: PathBuf,
    dir: OwnedFd,
    name: CString,
}

impl PidFile {
    /// The PID file of this tracker's environment, if any; None, with a
    /// warning, when its directory cannot be opened.
    pub fn from_env() -> Option<PidFile> {
        let path = PidFile::path_from(
            std::env::var_os("PIDFILE").as_deref(),
            std::env::var_os("RUNTIME_DIRECTORY").as_deref(),
        )?;
        PidFile::at(&path)
            .map_err(|e| {
                warn!(
                    "PID file {}: {e}; systemd (PIDFile=) will not follow a hand-over",
                    path.display()
                )
            })
            .ok()
    }

    /// `pid_file` when absolute; else `tracker.pid` in the first of
    /// `runtime_dirs` (systemd separates several with `:`).
    fn path_from(pid_file: Option<&OsStr>, runtime_dirs: Option<&OsStr>) -> Option<PathBuf> {
        if let Some(path) = pid_file.map(Path::new).filter(|p| p.is_absolute()) {
            return Some(path.to_path_buf());
        }
        let dir = runtime_dirs?.as_bytes().split(|&b| b == b':').next()?;
        let dir = Path::new(OsStr::from_bytes(dir));
        dir.is_absolute().then(|| dir.join(NAME))
    }

    /// The PID file at `path`, its directory opened.
    fn at(path: &Path) -> io::Result<PidFile> {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return Err(io::Error::other("not a file's path"));
        };
        let cstring = |s: &OsStr| {
            CString::new(s.as_bytes()).map_err(|_| io::Error::other("a NUL in the path"))
        };
        let dir_name = cstring(dir.as_os_str())?;
        // SAFETY: a NUL-terminated path; the fd returned is ours alone.
        let fd = unsafe {
            libc::open(
                dir_name.as_ptr(),
                libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC,
            )
        };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(PidFile {
            path: path.to_path_buf(),
            // SAFETY: a new fd that nothing else owns.
            dir: unsafe { OwnedFd::from_raw_fd(fd) },
            name: cstring(name)?,
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Replaces the file with one that holds `pid`: written beside it
    /// under a name of this process's own, created anew (never through a
    /// link someone put there), then renamed over it, so that systemd reads
    /// either the old pid or the new one, whole.
    pub fn write(&self, pid: u32) -> io::Result<()> {
        let mut temp = self.name.as_bytes().to_vec();
        temp.extend_from_slice(format!(".{}.tmp", std::process::id()).as_bytes());
        let temp = CString::new(temp).expect("no NUL");
        let mut file = match self.create(&temp) {
            // Left by this pid's namesake, which died writing it.
            Err(e) if e.kind() == io::ErrorKind::AlreadyExists => {
                self.unlink(&temp)?;
                self.create(&temp)?
            }
            other => other?,
        };
        let written = file
            .write_all(format!("{pid}\n").as_bytes())
            .and_then(|()| {
                let dir = self.dir.as_raw_fd();
                // SAFETY: NUL-terminated names in a directory fd of ours.
                check(unsafe { libc::renameat(dir, temp.as_ptr(), dir, self.name.as_ptr()) })
            });
        if written.is_err() {
            let _ = self.unlink(&temp);
        }
        written
    }

    fn create(&self, name: &CString) -> io::Result<File> {
        let flags =
            libc::O_WRONLY | libc::O_CREAT | libc::O_EXCL | libc::O_NOFOLLOW | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated name in a directory fd of ours.
        let fd = unsafe { libc::openat(self.dir.as_raw_fd(), name.as_ptr(), flags, 0o644) };
        if fd < 0 {
            return Err(io::Error::last_os_error());
        }
        // SAFETY: a new fd that nothing else owns.
        Ok(unsafe { File::from_raw_fd(fd) })
    }

    fn unlink(&self, name: &CString) -> io::Result<()> {
        // SAFETY: a NUL-terminated name in a directory fd of ours.
        check(unsafe { libc::unlinkat(self.dir.as_raw_fd(), name.as_ptr(), 0) })
    }

    /// The pid the file holds, if it can be read.
    pub fn named(&self) -> Option<u32> {
        let flags = libc::O_RDONLY | libc::O_NOFOLLOW | libc::O_NONBLOCK | libc::O_CLOEXEC;
        // SAFETY: a NUL-terminated name in a directory fd of ours.
        let fd = unsafe { libc::openat(self.dir.as_raw_fd(), self.name.as_ptr(), flags) };
        if fd < 0 {
            return None;
        }
        // SAFETY: a new fd that nothing else owns.
        let file = unsafe { File::from_raw_fd(fd) };
        let mut text = String::new();
        file.take(32).read_to_string(&mut text).ok()?;
        text.trim().parse().ok()
    }
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc < 0 {
        Err(io::Error::last_os_error())
    } else {
        Ok(())
    }
}

/// The service's main process as the PID file names it: this tracker until
/// it has handed over, then its successor, named as this one exits.
pub struct MainPid {
    file: Option<PidFile>,
    /// The successor this tracker handed over to: its pid and pidfd.
    successor: Mutex<Option<(u32, OwnedFd)>>,
}

impl MainPid {
    pub fn new(file: Option<PidFile>) -> MainPid {
        MainPid {
            file,
            successor: Mutex::new(None),
        }
    }

    pub fn file(&self) -> Option<&PidFile> {
        self.file.as_ref()
    }

    /// A tracker that did not take over starts: the file names it.
    pub fn started(&self) {
        let Some(file) = &self.file else { return };
        match file.write(std::process::id()) {
            Ok(()) => info!("PID file {}: this process", file.path.display()),
            Err(e) => warn!(
                "cannot write the PID file {}: {e}; systemd (PIDFile=) will not follow a \
                 hand-over to the next tracker",
                file.path.display()
            ),
        }
    }

    /// This tracker has handed over to the process of `pidfd`, `pid`, which
    /// serves now: the file names it as this one exits.
    pub fn handed_over(&self, pid: u32, pidfd: OwnedFd) {
        *self.successor.lock().unwrap_or_else(|e| e.into_inner()) = Some((pid, pidfd));
    }

    /// Whether this tracker has handed over.
    pub fn has_handed_over(&self) -> bool {
        self.successor
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .is_some()
    }

    /// This tracker exits: after a hand-over, the file names the successor,
    /// which systemd then supervises as its own child. Err when the
    /// successor has exited since: then this exit is the service's, and a
    /// failed one, for a restart.
    pub fn exiting(&self) -> Result<(), String> {
        let successor = self.successor.lock().unwrap_or_else(|e| e.into_inner());
        let Some((pid, pidfd)) = successor.as_ref() else {
            return Ok(());
        };
        if has_exited(pidfd) {
            return Err(format!(
                "the new tracker (pid {pid}) has exited since it took over, and no tracker \
                 serves: exiting 1, for a restart (which loads the state file this one wrote)"
            ));
        }
        let Some(file) = &self.file else {
            return Ok(());
        };
        match file.write(*pid) {
            Ok(()) => info!(
                "PID file {}: pid {pid}, the new tracker, which the service manager \
                 supervises from now on",
                file.path.display()
            ),
            Err(e) => warn!(
                "cannot name pid {pid} in the PID file {}: {e}; systemd may take this exit for \
                 the service's and stop pid {pid}",
                file.path.display()
            ),
        }
        Ok(())
    }
}

/// Whether the process of `pidfd` has exited (a zombie has: a pidfd reads
/// as ready once its process has exited, reaped or not).
fn has_exited(pidfd: &OwnedFd) -> bool {
    let mut poll = libc::pollfd {
        fd: pidfd.as_raw_fd(),
        events: libc::POLLIN,
        revents: 0,
    };
    // SAFETY: one pollfd, alive for the call; no wait.
    unsafe { libc::poll(&mut poll, 1, 0) > 0 }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(pid_file: Option<&str>, runtime_dirs: Option<&str>) -> Option<PathBuf> {
        PidFile::path_from(pid_file.map(OsStr::new), runtime_dirs.map(OsStr::new))
    }

    #[test]
    fn systemd_s_pidfile_else_the_runtime_directory_s() {
        assert_eq!(
            at(Some("/run/t/x.pid"), Some("/run/tracker")),
            Some("/run/t/x.pid".into())
        );
        assert_eq!(
            at(None, Some("/run/tracker:/run/other")),
            Some("/run/tracker/tracker.pid".into())
        );
        assert_eq!(
            at(Some("relative.pid"), Some("/run/tracker")),
            Some("/run/tracker/tracker.pid".into())
        );
        assert_eq!(at(None, None), None);
        assert_eq!(at(None, Some("")), None);
        assert_eq!(at(None, Some("relative")), None);
    }

    #[test]
    fn a_write_replaces_the_file_and_never_follows_a_link() {
        let dir = std::env::temp_dir().join(format!("tracker-pid-file-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let target = dir.join("target");
        std::fs::write(&target, "someone's file").unwrap();
        let file = PidFile::at(&dir.join("tracker.pid")).unwrap();
        // A link at the file's path is replaced, not written through; so is
        // one at the temporary name a process of this pid would use.
        std::os::unix::fs::symlink(&target, &file.path).unwrap();
        let temp = dir.join(format!("tracker.pid.{}.tmp", std::process::id()));
        std::os::unix::fs::symlink(&target, &temp).unwrap();
        file.write(1234).unwrap();
        assert_eq!(file.named(), Some(1234));
        file.write(99).unwrap();
        assert_eq!(std::fs::read_to_string(&file.path).unwrap(), "99\n");
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "someone's file");
        assert!(!temp.exists());
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
