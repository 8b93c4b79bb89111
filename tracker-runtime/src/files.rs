//! Reading the files an operator names (the state file, the access list, the
//! certificate and key) without trusting what is at the path: a FIFO or a
//! device is refused rather than waited on (it is opened without blocking
//! and must be a regular file), and a file is read only up to a size, so
//! that a wrong path can neither hang the reader nor fill its memory. A
//! file the tracker is about to replace is also never a link's target.

use std::fs::{File, Metadata, OpenOptions};
use std::io::{self, Read};
use std::os::unix::fs::OpenOptionsExt;
use std::path::Path;

/// The regular file at `path`, opened for reading, and its length;
/// `NotFound` when there is none.
pub fn open_regular(path: &Path) -> io::Result<(File, u64)> {
    let (file, meta) = open_regular_with(path, 0)?;
    Ok((file, meta.len()))
}

/// `path` opened for reading with `flags` besides, if it is a regular file.
fn open_regular_with(path: &Path, flags: libc::c_int) -> io::Result<(File, Metadata)> {
    let file = OpenOptions::new()
        .read(true)
        // O_NONBLOCK: opening a FIFO with no writer would wait for one.
        .custom_flags(libc::O_NONBLOCK | libc::O_NOCTTY | flags)
        .open(path)?;
    let meta = file.metadata()?;
    if !meta.is_file() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "not a regular file",
        ));
    }
    Ok((file, meta))
}

/// The whole of the regular file at `path`, which must hold at most
/// `max_bytes`; `NotFound` when there is none.
pub fn read_regular(path: &Path, max_bytes: u64) -> io::Result<Vec<u8>> {
    let (file, len) = open_regular(path)?;
    read_bounded(file, len, max_bytes)
}

/// As [`read_regular`], for a file about to be replaced: a symbolic link
/// at `path` is refused ([`is_link`] tells that error), never followed;
/// also the file's metadata (its owner, mode and identity).
pub fn read_regular_not_link(path: &Path, max_bytes: u64) -> io::Result<(Vec<u8>, Metadata)> {
    let (file, meta) = open_regular_with(path, libc::O_NOFOLLOW)?;
    Ok((read_bounded(file, meta.len(), max_bytes)?, meta))
}

/// Whether `error`, from [`read_regular_not_link`], means a symbolic link is
/// at `path`.
pub fn is_link(error: &io::Error, path: &Path) -> bool {
    error.raw_os_error() == Some(libc::ELOOP)
        && std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_symlink())
}

fn read_bounded(file: File, len: u64, max_bytes: u64) -> io::Result<Vec<u8>> {
    if len > max_bytes {
        return Err(too_large(max_bytes));
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // The file may grow while it is read: never past the bound.
    file.take(max_bytes + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > max_bytes {
        return Err(too_large(max_bytes));
    }
    Ok(bytes)
}

fn too_large(max_bytes: u64) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("larger than {max_bytes} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("tracker-files-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    #[test]
    fn reads_regular_files_up_to_their_bound() {
        let dir = scratch("bound");
        let path = dir.join("f");
        std::fs::write(&path, b"0123456789").unwrap();
        assert_eq!(read_regular(&path, 10).unwrap(), b"0123456789");
        let err = read_regular(&path, 9).unwrap_err();
        assert!(err.to_string().contains("larger than 9 bytes"), "{err}");
        let missing = read_regular(&dir.join("none"), 10).unwrap_err();
        assert_eq!(missing.kind(), io::ErrorKind::NotFound);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_link_is_refused_where_it_must_not_be_followed() {
        let dir = scratch("link");
        let (target, link) = (dir.join("target"), dir.join("link"));
        std::fs::write(&target, b"list").unwrap();
        std::os::unix::fs::symlink(&target, &link).unwrap();
        assert_eq!(read_regular(&link, 10).unwrap(), b"list");
        let err = read_regular_not_link(&link, 10).unwrap_err();
        assert!(is_link(&err, &link), "{err}");
        let (bytes, meta) = read_regular_not_link(&target, 10).unwrap();
        assert_eq!((bytes.as_slice(), meta.len()), (&b"list"[..], 4));
        let err = read_regular_not_link(&target, 3).unwrap_err();
        assert!(!is_link(&err, &target), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn a_fifo_or_a_directory_is_refused_at_once() {
        let dir = scratch("fifo");
        let fifo = dir.join("fifo");
        let path = std::ffi::CString::new(fifo.as_os_str().as_encoded_bytes()).unwrap();
        // SAFETY: a NUL-terminated path.
        assert_eq!(unsafe { libc::mkfifo(path.as_ptr(), 0o600) }, 0);
        let err = read_regular(&fifo, 10).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        let err = read_regular(&dir, 10).unwrap_err();
        assert!(err.to_string().contains("not a regular file"), "{err}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
