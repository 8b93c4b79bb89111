//! Reading and writing the state file on disk. Writes replace the file
//! atomically: a crash or a full disk at any moment leaves either the old file
//! or the new one, never a mix.
//!
//! The directory may be writable by others than the tracker (the service user
//! of an earlier run, say), so nothing at a path there is trusted: a
//! temporary file left behind is removed, not reused (it could be a symlink
//! to any file, or another user's file that keeps its owner and mode), and
//! the new one is created exclusively without following links. Call every
//! function here as the user that writes the file, after privileges are
//! dropped.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tracing::{info, warn};

use crate::clock;
use tracker_swarm::state::{Framed, Section, StateFile, MAGIC};

/// Reads and checks the state file: its bytes when it can be loaded, None
/// (and a message saying why) when the tracker must start empty. A damaged
/// file never stops the tracker; it is replaced at the next stop.
pub fn load(path: &Path) -> Option<Vec<u8>> {
    let start = Instant::now();
    if let Err(e) = check_writable(path) {
        warn!(
            "state file {}: cannot write beside it ({e}): the swarms will not be saved at \
             the next stop unless that is fixed",
            path.display()
        );
    }
    let bytes = match read(path) {
        Ok(Some(bytes)) => bytes,
        Ok(None) => {
            info!("state file {}: none yet, starting empty", path.display());
            return None;
        }
        Err(e) => {
            warn!(
                "state file {}: cannot read it ({e}); starting empty",
                path.display()
            );
            return None;
        }
    };
    match StateFile::parse(&bytes) {
        Ok(file) => {
            info!(
                "state file {}: {} torrents saved {} s ago, {} bytes checked in {} ms; \
                 restoring",
                path.display(),
                file.torrents,
                clock::unix_secs().saturating_sub(file.saved_at),
                bytes.len(),
                start.elapsed().as_millis()
            );
        }
        Err(e) => {
            warn!(
                "state file {}: {e}; starting empty (the file is replaced at the next stop)",
                path.display()
            );
            return None;
        }
    }
    Some(bytes)
}

/// Writes the workers' sections to the state file, replacing it atomically,
/// at the stop.
pub fn save(path: &Path, sections: &[Section]) -> Result<(), String> {
    let start = Instant::now();
    let bytes = write(path, sections)?;
    info!(
        "stopped: saved {} torrents and {} peers to {} ({bytes} bytes) in {} ms",
        sections.iter().map(Section::torrents).sum::<u64>(),
        sections.iter().map(Section::peers).sum::<u64>(),
        path.display(),
        start.elapsed().as_millis()
    );
    Ok(())
}

/// Writes the sections as a state file saved now, replacing `path`
/// atomically: the bytes written.
pub fn write(path: &Path, sections: &[Section]) -> Result<usize, String> {
    let file = Framed::new(sections, clock::unix_secs());
    let parts: Vec<&[u8]> = file.parts().collect();
    write_atomic(path, &parts)
        .map_err(|e| format!("cannot save the swarms to {}: {e}", path.display()))?;
    Ok(file.byte_len())
}

/// The whole file, or `None` when there is none. It must be a regular file
/// (a FIFO or a device is refused, not waited on); one that does not start
/// as a state file does is read no further than that start, which is enough
/// for `StateFile::parse` to refuse it, so a wrong path costs no memory.
pub fn read(path: &Path) -> io::Result<Option<Vec<u8>>> {
    let (mut file, len) = match crate::files::open_regular(path) {
        Ok(opened) => opened,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let mut bytes = Vec::new();
    (&mut file)
        .take(MAGIC.len() as u64)
        .read_to_end(&mut bytes)?;
    if bytes[..] == MAGIC {
        bytes.reserve(len.saturating_sub(MAGIC.len() as u64) as usize);
        file.read_to_end(&mut bytes)?;
    }
    Ok(Some(bytes))
}

/// Where the new file is written before it replaces the old one: beside it,
/// so that the rename stays within one file system.
pub fn temp_path(path: &Path) -> io::Result<PathBuf> {
    let name = path
        .file_name()
        .ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "the path names no file"))?;
    let mut temp = name.to_os_string();
    temp.push(".tmp");
    Ok(path.with_file_name(temp))
}

/// Creates the temporary file beside `path`: whatever is at its name (a file
/// a crash left, or a link someone planted) is removed first, and the new
/// one is created exclusively, private to the user (0600: it lists clients'
/// addresses), never through a link.
fn create_temp(temp: &Path) -> io::Result<File> {
    match std::fs::remove_file(temp) {
        Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
        _ => {}
    }
    OpenOptions::new()
        .write(true)
        .create_new(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_CLOEXEC)
        .mode(0o600)
        .open(temp)
}

/// Replaces `path` with the concatenation of `parts`: write a temporary file
/// beside it (see `create_temp`), fsync it, rename it over `path`, fsync the
/// directory (so that the rename itself is durable).
pub fn write_atomic(path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    let mut new = Replacement::create(path)?;
    for part in parts {
        new.file().write_all(part)?;
    }
    new.commit()
}

/// A file being written to replace another at once: created beside it (see
/// `create_temp`), renamed over it by `commit`, and removed if dropped
/// before that (a failed write leaves the old file alone).
pub struct Replacement {
    path: PathBuf,
    temp: PathBuf,
    file: File,
    /// Once renamed, there is no temporary file left to remove.
    renamed: bool,
}

impl Replacement {
    pub fn create(path: &Path) -> io::Result<Replacement> {
        let temp = temp_path(path)?;
        let file = create_temp(&temp)?;
        Ok(Replacement {
            path: path.to_path_buf(),
            temp,
            file,
            renamed: false,
        })
    }

    /// The new file (private to the user until told otherwise), to write
    /// and to give an owner and a mode.
    pub fn file(&mut self) -> &mut File {
        &mut self.file
    }

    /// Fsyncs the new file, renames it over the old one and fsyncs the
    /// directory.
    pub fn commit(mut self) -> io::Result<()> {
        self.file.sync_all()?;
        std::fs::rename(&self.temp, &self.path)?;
        self.renamed = true;
        File::open(directory_of(&self.path))?.sync_all()
    }
}

impl Drop for Replacement {
    fn drop(&mut self) {
        if !self.renamed {
            let _ = std::fs::remove_file(&self.temp);
        }
    }
}

/// Checks at start that the state file can be written at the end, by
/// creating and removing its temporary file as `write_atomic` will, so that a
/// directory without write permission (for the user the tracker runs as) is
/// reported before hours of swarms depend on it.
pub fn check_writable(path: &Path) -> io::Result<()> {
    let temp = temp_path(path)?;
    create_temp(&temp)?;
    std::fs::remove_file(&temp)
}

fn directory_of(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch_dir(name: &str) -> PathBuf {
        let dir = std::env::temp_dir().join(format!("tracker-state-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn writes_replace_the_file_whole_and_leave_no_temporary_file() {
        let dir = scratch_dir("replace");
        let path = dir.join("tracker.state");
        assert_eq!(read(&path).unwrap(), None);
        // Not a state file: read no further than its start.
        std::fs::write(&path, b"no state file, but long").unwrap();
        assert_eq!(read(&path).unwrap().unwrap(), b"no state");
        check_writable(&path).unwrap();
        write_atomic(&path, &[b"old"]).unwrap();
        write_atomic(&path, &[b"new ", b"parts"]).unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), b"new parts");
        let names: Vec<_> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(names, ["tracker.state"]);
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&path).unwrap().permissions().mode();
        assert_eq!(mode & 0o077, 0, "private to its user: {mode:o}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_temporary_file_left_or_planted_is_replaced_never_written_through() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let dir = scratch_dir("planted");
        let path = dir.join("tracker.state");
        let temp = temp_path(&path).unwrap();
        let victim = dir.join("victim");
        std::fs::write(&victim, b"precious").unwrap();
        std::os::unix::fs::symlink(&victim, &temp).unwrap();
        check_writable(&path).unwrap();
        assert!(
            std::fs::symlink_metadata(&temp).is_err(),
            "the link is gone"
        );
        std::os::unix::fs::symlink(&victim, &temp).unwrap();
        write_atomic(&path, &[b"state"]).unwrap();
        assert_eq!(std::fs::read(&victim).unwrap(), b"precious");
        assert_eq!(std::fs::read(&path).unwrap(), b"state");
        // A file left with another mode is not reused as it is.
        std::fs::write(&temp, b"left").unwrap();
        std::fs::set_permissions(&temp, std::fs::Permissions::from_mode(0o666)).unwrap();
        write_atomic(&path, &[b"new"]).unwrap();
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o777, 0o600);
        assert!(std::fs::symlink_metadata(&temp).is_err());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_failed_write_keeps_the_old_file() {
        let dir = scratch_dir("fail");
        let path = dir.join("tracker.state");
        write_atomic(&path, &[b"old"]).unwrap();
        // The temporary file's name taken by a directory: the write fails.
        std::fs::create_dir(temp_path(&path).unwrap()).unwrap();
        assert!(write_atomic(&path, &[b"new"]).is_err());
        assert!(check_writable(&path).is_err());
        assert_eq!(std::fs::read(&path).unwrap(), b"old");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn temporary_files_sit_beside_the_state_file() {
        assert_eq!(
            temp_path(Path::new("/var/lib/tracker/tracker.state")).unwrap(),
            Path::new("/var/lib/tracker/tracker.state.tmp")
        );
        assert_eq!(temp_path(Path::new("s")).unwrap(), Path::new("s.tmp"));
        assert!(temp_path(Path::new("/")).is_err());
        assert_eq!(directory_of(Path::new("s")), Path::new("."));
    }
}
