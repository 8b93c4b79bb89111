//! Reading and writing the state file on disk. Writes replace the file
//! atomically: a crash or a full disk at any moment leaves either the old file
//! or the new one, never a mix.

use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::time::Instant;

use tracing::{info, warn};

use super::{header, trailer, Section, StateFile};
use crate::clock;

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

/// Writes the workers' sections to the state file, replacing it atomically.
pub fn save(path: &Path, sections: &[Section]) -> Result<(), String> {
    let start = Instant::now();
    let header = header(sections, clock::unix_secs());
    let trailer = trailer(&header, sections);
    let mut parts: Vec<&[u8]> = vec![&header];
    parts.extend(sections.iter().map(Section::as_bytes));
    parts.push(&trailer);
    write_atomic(path, &parts)
        .map_err(|e| format!("cannot save the swarms to {}: {e}", path.display()))?;
    let bytes: usize = parts.iter().map(|p| p.len()).sum();
    info!(
        "stopped: saved {} torrents and {} peers to {} ({bytes} bytes) in {} ms",
        sections.iter().map(Section::torrents).sum::<u64>(),
        sections.iter().map(Section::peers).sum::<u64>(),
        path.display(),
        start.elapsed().as_millis()
    );
    Ok(())
}

/// The whole file, or `None` when there is none.
pub fn read(path: &Path) -> io::Result<Option<Vec<u8>>> {
    match std::fs::read(path) {
        Ok(bytes) => Ok(Some(bytes)),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(e),
    }
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

/// Replaces `path` with the concatenation of `parts`: write a temporary file
/// beside it, fsync it, rename it over `path`, fsync the directory (so that
/// the rename itself is durable). The file is private to the user (0600): it
/// lists clients' addresses.
pub fn write_atomic(path: &Path, parts: &[&[u8]]) -> io::Result<()> {
    let temp = temp_path(path)?;
    let written = (|| {
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)?;
        for part in parts {
            file.write_all(part)?;
        }
        file.sync_all()
    })();
    if let Err(e) = written {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    if let Err(e) = std::fs::rename(&temp, path) {
        let _ = std::fs::remove_file(&temp);
        return Err(e);
    }
    File::open(directory_of(path))?.sync_all()
}

/// Checks at start that the state file can be written at the end, by
/// creating and removing its temporary file, so that a directory without
/// write permission is reported before hours of swarms depend on it.
pub fn check_writable(path: &Path) -> io::Result<()> {
    let temp = temp_path(path)?;
    OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(&temp)?;
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
        check_writable(&path).unwrap();
        write_atomic(&path, &[b"old"]).unwrap();
        write_atomic(&path, &[b"new ", b"parts"]).unwrap();
        assert_eq!(read(&path).unwrap().unwrap(), b"new parts");
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
    fn a_failed_write_keeps_the_old_file() {
        let dir = scratch_dir("fail");
        let path = dir.join("tracker.state");
        write_atomic(&path, &[b"old"]).unwrap();
        // The temporary file's name taken by a directory: the write fails.
        std::fs::create_dir(temp_path(&path).unwrap()).unwrap();
        assert!(write_atomic(&path, &[b"new"]).is_err());
        assert!(check_writable(&path).is_err());
        assert_eq!(read(&path).unwrap().unwrap(), b"old");
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
