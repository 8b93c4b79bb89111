//! The control socket's file: made where no other user can redirect it,
//! in place of nothing or of a socket no tracker listens on (anything else
//! is left alone), and removed at the stop while its path still names it.
//!
//! Root makes it for the user the tracker will serve as, often in a
//! directory that user can write (the working directory, for the state
//! file), so that user can swap a link in for any name there at any time.
//! So nothing is done by a path that user could change: the socket is
//! bound in a directory of root's own, made for it and empty, where its
//! mode and owner are set, then renamed into place; the directories are
//! held open and named through `/proc/self/fd`.

use std::ffi::{CString, OsStr};
use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};

use tracing::{info, warn};

/// The control socket's file as this tracker (or its predecessor) made it.
pub struct ControlFile {
    path: PathBuf,
    /// Its device and inode, which only this file has; None when a
    /// predecessor did not say (one from before this was sent).
    id: Option<(u64, u64)>,
    /// This tracker's to remove: not while a predecessor still answers on
    /// it, nor once a successor does.
    ours: bool,
}

impl ControlFile {
    /// The file of a predecessor, from the id its manifest gives: its own
    /// until it has handed over (`took_over`).
    pub fn taken(path: &Path, id: &str) -> ControlFile {
        let id = id
            .split_once(':')
            .and_then(|(dev, ino)| Some((dev.parse().ok()?, ino.parse().ok()?)));
        ControlFile {
            path: path.to_path_buf(),
            id,
            ours: false,
        }
    }

    /// The predecessor has handed over: this tracker answers at this path.
    pub fn took_over(&mut self) {
        self.ours = true;
    }

    /// Its id for a successor's manifest (`-` when unknown).
    pub fn id(&self) -> String {
        self.id
            .map_or_else(|| "-".into(), |(dev, ino)| format!("{dev}:{ino}"))
    }

    /// The socket went to a successor, which now answers at this path (or
    /// may: one lost that could not be killed).
    pub fn handed_over(&mut self) {
        self.ours = false;
    }
}

impl Drop for ControlFile {
    /// Removes the file while its path still names it: not one another
    /// tracker made since, nor whatever the path names inside a chroot.
    fn drop(&mut self) {
        let Some(id) = self.id.filter(|_| self.ours) else {
            return;
        };
        let removed = split(&self.path).and_then(|(dir, name)| {
            let dir = open_dir(dir)?;
            match stat_at(&dir, name) {
                Ok(st) if (st.st_dev, st.st_ino) == id => unlink_at(&dir, name, 0),
                Ok(_) => Ok(()),
                Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(e),
            }
        });
        if let Err(e) = removed {
            info!(
                "control socket {}: not removed ({e}); the next start replaces it",
                self.path.display()
            );
        }
    }
}

/// The control socket at `path`, for the user the tracker will serve as
/// (`owner`, when it drops root): None when another tracker listens there
/// (its own hand-overs go on; this one has none).
pub fn bind_control(
    path: &Path,
    owner: Option<(libc::uid_t, libc::gid_t)>,
) -> Result<Option<(UnixListener, ControlFile)>, String> {
    let fail = |e: io::Error| {
        format!(
            "control socket {} (`runtime.control_socket`): {e}",
            path.display()
        )
    };
    let (dir, name) = split(path).map_err(fail)?;
    let dir = open_dir(dir).map_err(fail)?;
    match stat_at(&dir, name) {
        Ok(st) if st.st_mode & libc::S_IFMT == libc::S_IFSOCK => {
            match UnixStream::connect(through(&dir, name)) {
                Ok(_) => {
                    warn!(
                        "control socket {}: another tracker listens there; this one takes no \
                         hand-over (set runtime.control_socket to a path of its own)",
                        path.display()
                    );
                    return Ok(None);
                }
                // Left by a tracker that is gone: replaced below.
                Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {}
                Err(e) => return Err(fail(e)),
            }
        }
        Ok(st) => {
            return Err(format!(
                "control socket {} (`runtime.control_socket`): {} is there, not a socket; the \
                 tracker replaces only a socket that no tracker listens on: remove it, or \
                 choose another path",
                path.display(),
                kind(st.st_mode)
            ))
        }
        Err(e) if e.kind() == io::ErrorKind::NotFound => {}
        Err(e) => return Err(fail(e)),
    }
    let private = PrivateDir::make(&dir, name).map_err(fail)?;
    let made = (|| {
        let listener = UnixListener::bind(through(&private.fd, name))?;
        // In a directory no one else can write, its name is this socket.
        chmod_at(&private.fd, name, 0o600)?;
        if let Some((uid, gid)) = owner {
            chown_at(&private.fd, name, uid, gid)?;
        }
        let st = stat_at(&private.fd, name)?;
        rename_at(&private.fd, name, &dir, name)?;
        Ok((listener, (st.st_dev, st.st_ino)))
    })();
    private.remove(&dir);
    let (listener, id) = made.map_err(fail)?;
    Ok(Some((
        listener,
        ControlFile {
            path: path.to_path_buf(),
            id: Some(id),
            ours: true,
        },
    )))
}

/// A directory of root's (of the user we run as) beside the socket's path,
/// made for one bind: no one else can add, swap or remove a name in it.
struct PrivateDir {
    name: CString,
    fd: OwnedFd,
}

impl PrivateDir {
    fn make(dir: &OwnedFd, socket: &OsStr) -> io::Result<PrivateDir> {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let mut name = b".".to_vec();
        name.extend_from_slice(socket.as_bytes());
        name.extend_from_slice(format!(".{}.{nanos}", std::process::id()).as_bytes());
        let name = CString::new(name).map_err(io::Error::other)?;
        // SAFETY: a valid directory fd and a NUL-terminated name.
        if unsafe { libc::mkdirat(dir.as_raw_fd(), name.as_ptr(), 0o700) } != 0 {
            return Err(io::Error::last_os_error());
        }
        let private = open_at(dir, &name, libc::O_NOFOLLOW)
            .map(|fd| PrivateDir { name, fd })
            .map_err(|e| io::Error::other(format!("a directory of its own for the bind: {e}")))?;
        // The directory it made, not one swapped in for it: ours, private,
        // and empty.
        let st = fstat(&private.fd)?;
        if st.st_mode & libc::S_IFMT != libc::S_IFDIR
            || st.st_uid != crate::start::privileges::euid()
            || st.st_mode & 0o077 != 0
            || st.st_nlink != 2
        {
            return Err(io::Error::other(
                "the directory made for the bind was replaced; refusing to bind there",
            ));
        }
        Ok(private)
    }

    /// Removes the directory, empty once the socket went into place.
    fn remove(self, dir: &OwnedFd) {
        let name = OsStr::from_bytes(self.name.as_bytes());
        if let Err(e) = unlink_at(dir, name, libc::AT_REMOVEDIR) {
            warn!(
                "cannot remove the directory {:?} made for the control socket: {e}",
                self.name
            );
        }
    }
}

/// The directory and the file name of `path` (a relative path in the
/// working directory).
fn split(path: &Path) -> io::Result<(&Path, &OsStr)> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::other("not a file path"))?;
    let dir = match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    };
    Ok((dir, name))
}

/// `name` in the directory `dir` holds open, whatever its path is now.
fn through(dir: &OwnedFd, name: &OsStr) -> PathBuf {
    PathBuf::from(format!("/proc/self/fd/{}", dir.as_raw_fd())).join(name)
}

fn cstring(name: &OsStr) -> io::Result<CString> {
    CString::new(name.as_bytes()).map_err(io::Error::other)
}

fn check(rc: libc::c_int) -> io::Result<()> {
    if rc != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// A directory, held for lookups and renames in it (`O_PATH`).
fn open_dir(dir: &Path) -> io::Result<OwnedFd> {
    let path = cstring(dir.as_os_str())?;
    open_at_raw(libc::AT_FDCWD, &path, 0)
}

fn open_at(dir: &OwnedFd, name: &CString, flags: libc::c_int) -> io::Result<OwnedFd> {
    open_at_raw(dir.as_raw_fd(), name, flags)
}

fn open_at_raw(dir: libc::c_int, name: &CString, flags: libc::c_int) -> io::Result<OwnedFd> {
    let flags = flags | libc::O_PATH | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: a NUL-terminated name; the fd returned is ours alone.
    let fd = unsafe { libc::openat(dir, name.as_ptr(), flags) };
    if fd < 0 {
        return Err(io::Error::last_os_error());
    }
    // SAFETY: a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

fn stat_at(dir: &OwnedFd, name: &OsStr) -> io::Result<libc::stat> {
    let name = cstring(name)?;
    // SAFETY: stat is plain data that fstatat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd, a NUL-terminated name and a stat to fill.
    check(unsafe {
        libc::fstatat(
            dir.as_raw_fd(),
            name.as_ptr(),
            &mut st,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })?;
    Ok(st)
}

fn fstat(fd: &OwnedFd) -> io::Result<libc::stat> {
    // SAFETY: stat is plain data that fstat fills.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid fd and a stat to fill.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) })?;
    Ok(st)
}

fn chmod_at(dir: &OwnedFd, name: &OsStr, mode: libc::mode_t) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: a valid fd and a NUL-terminated name.
    check(unsafe { libc::fchmodat(dir.as_raw_fd(), name.as_ptr(), mode, 0) })
}

fn chown_at(dir: &OwnedFd, name: &OsStr, uid: libc::uid_t, gid: libc::gid_t) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: a valid fd and a NUL-terminated name.
    check(unsafe {
        libc::fchownat(
            dir.as_raw_fd(),
            name.as_ptr(),
            uid,
            gid,
            libc::AT_SYMLINK_NOFOLLOW,
        )
    })
}

fn rename_at(from: &OwnedFd, name: &OsStr, to: &OwnedFd, new_name: &OsStr) -> io::Result<()> {
    let (name, new_name) = (cstring(name)?, cstring(new_name)?);
    // SAFETY: valid fds and NUL-terminated names.
    check(unsafe {
        libc::renameat(
            from.as_raw_fd(),
            name.as_ptr(),
            to.as_raw_fd(),
            new_name.as_ptr(),
        )
    })
}

fn unlink_at(dir: &OwnedFd, name: &OsStr, flags: libc::c_int) -> io::Result<()> {
    let name = cstring(name)?;
    // SAFETY: a valid fd and a NUL-terminated name.
    check(unsafe { libc::unlinkat(dir.as_raw_fd(), name.as_ptr(), flags) })
}

/// What a file of this mode is, for a message.
fn kind(mode: libc::mode_t) -> &'static str {
    match mode & libc::S_IFMT {
        libc::S_IFREG => "a regular file",
        libc::S_IFDIR => "a directory",
        libc::S_IFLNK => "a symbolic link",
        _ => "a special file",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::{MetadataExt, PermissionsExt};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    /// A directory of its own in the temp dir, removed at the end.
    struct TempDir(PathBuf);
    impl TempDir {
        fn new(name: &str) -> TempDir {
            let dir = std::env::temp_dir().join(format!("{name}-{}", std::process::id()));
            let _ = std::fs::remove_dir_all(&dir);
            std::fs::create_dir(&dir).unwrap();
            TempDir(dir)
        }
    }
    impl Drop for TempDir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }

    /// The race of issue 28: the user the tracker will serve as can write
    /// the socket's directory, and swaps a link to a file of root's in for
    /// the socket while root sets its mode and owner. Root's file must keep
    /// its own.
    #[test]
    fn a_link_swapped_in_for_the_socket_redirects_neither_mode_nor_owner() {
        // SAFETY: geteuid cannot fail.
        if unsafe { libc::geteuid() } != 0 {
            eprintln!("skipped: needs root (to give the socket to another user)");
            return;
        }
        let dir = TempDir::new("tracker-control-race");
        let victim = dir.0.join("root-file");
        std::fs::write(&victim, "root's").unwrap();
        std::fs::set_permissions(&victim, std::fs::Permissions::from_mode(0o644)).unwrap();
        let path = dir.0.join("tracker.control");
        let stop = Arc::new(AtomicBool::new(false));
        let swapper = {
            let (stop, victim, path) = (stop.clone(), victim.clone(), path.clone());
            let link = dir.0.join("link");
            std::thread::spawn(move || {
                while !stop.load(Ordering::Relaxed) {
                    let _ = std::os::unix::fs::symlink(&victim, &link);
                    let _ = std::fs::rename(&link, &path);
                }
            })
        };
        let mut bound = 0;
        for _ in 0..3000 {
            // What is there is not a socket: taken away, so that the next
            // start gets as far as the bind.
            let _ = std::fs::remove_file(&path);
            if let Ok(Some(_)) = bind_control(&path, Some((65534, 65534))) {
                bound += 1;
            }
        }
        stop.store(true, Ordering::Relaxed);
        swapper.join().unwrap();
        assert!(bound > 0, "never got as far as the bind");
        let meta = std::fs::metadata(&victim).unwrap();
        assert_eq!(
            (meta.uid(), meta.gid(), meta.mode() & 0o777),
            (0, 0, 0o644),
            "root's file was given away"
        );
    }
}
