//! Access lists: which torrents the tracker serves.
//!
//! A list file holds one info-hash per line as 40 hex digits (either case).
//! `#` starts a comment, on a line of its own or after a hash; blank lines and
//! whitespace around a hash are ignored. In `allow` mode only listed torrents
//! are served; in `deny` mode every torrent but the listed ones.
//!
//! The parser is pure (bytes in, set out) so that a reload can run it off
//! the workers (see `reload`) and hand them a finished list.
//!
//! The access API changes the file itself ([`ListSource::edit`]): one line
//! added or taken off, the rest as the operator wrote it, the file's owner
//! and mode kept, and only ever a list that a start would accept.

use std::collections::HashSet;
use std::fmt;
use std::fs::{File, Metadata, Permissions};
use std::io::{self, Write as _};
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::PathBuf;

use ahash::RandomState;
use serde::{Deserialize, Serialize};

use crate::state_file::Replacement;
use tracker_proto::{Hex, InfoHash};

/// What the list means.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum AccessMode {
    /// No list: every torrent is served.
    #[default]
    Off,
    /// Only listed torrents are served.
    Allow,
    /// Every torrent but the listed ones is served.
    Deny,
}

impl AccessMode {
    pub fn as_str(self) -> &'static str {
        match self {
            AccessMode::Off => "off",
            AccessMode::Allow => "allow",
            AccessMode::Deny => "deny",
        }
    }
}

/// Info-hashes as parsed from a list file. The keys of the hasher are random
/// per process: clients choose info-hashes, so they must not be able to aim
/// many at one bucket.
pub type HashList = HashSet<InfoHash, RandomState>;

/// Where a list comes from, and what is accepted of it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListSource {
    /// Not `Off` (then there is no list to consult at all).
    pub mode: AccessMode,
    pub path: PathBuf,
    /// A larger file is refused (`access.max_file_bytes`).
    pub max_bytes: u64,
    /// Whether an allow list of no hashes (which serves nothing, and drops
    /// every swarm it is applied to) is accepted (`access.allow_empty`); a
    /// file truncated to nothing reads as one.
    pub allow_empty: bool,
}

/// A parsed list and the mode that gives it its meaning.
#[derive(Debug)]
pub struct AccessList {
    /// True in allow mode: a listed torrent is served, others are not.
    listed_are_allowed: bool,
    hashes: HashList,
}

impl AccessList {
    /// `mode` must not be `Off` (then there is no list to consult at all).
    pub fn new(mode: AccessMode, hashes: HashList) -> Self {
        debug_assert_ne!(mode, AccessMode::Off);
        AccessList {
            listed_are_allowed: mode == AccessMode::Allow,
            hashes,
        }
    }

    /// Reads and parses the list of `source`: a regular file (a FIFO or a
    /// device is refused, not waited on) of at most its `max_bytes`. The
    /// error names the file, and the line when a line is at fault.
    pub fn load(source: &ListSource) -> Result<Self, AccessListError> {
        let path = &source.path;
        let error = |line, message| AccessListError {
            path: path.clone(),
            line,
            message,
        };
        let bytes = crate::files::read_regular(path, source.max_bytes).map_err(|e| {
            let hint = if e.kind() == std::io::ErrorKind::InvalidData {
                " (access.max_file_bytes)"
            } else {
                ""
            };
            error(None, format!("cannot read the access list: {e}{hint}"))
        })?;
        let hashes =
            parse(&bytes).map_err(|LineError { line, message }| error(Some(line), message))?;
        if source.refuses(&hashes) {
            return Err(error(
                None,
                format!("lists no info-hash: {EMPTY_ALLOW_LIST}"),
            ));
        }
        Ok(AccessList::new(source.mode, hashes))
    }

    /// Whether announces for `info_hash` are served.
    #[inline]
    pub fn allows(&self, info_hash: &InfoHash) -> bool {
        self.hashes.contains(info_hash) == self.listed_are_allowed
    }

    /// Distinct info-hashes listed.
    pub fn len(&self) -> usize {
        self.hashes.len()
    }

    pub fn is_empty(&self) -> bool {
        self.hashes.is_empty()
    }
}

/// A list file that cannot be used, as `FILE:LINE: message` (or
/// `FILE: message` when the file could not be read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AccessListError {
    pub path: PathBuf,
    /// 1-based.
    pub line: Option<usize>,
    pub message: String,
}

impl fmt::Display for AccessListError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self.line {
            Some(line) => write!(f, "{}:{line}: {}", self.path.display(), self.message),
            None => write!(f, "{}: {}", self.path.display(), self.message),
        }
    }
}

impl std::error::Error for AccessListError {}

/// Why an allow list of no hash is refused, unless access.allow_empty.
const EMPTY_ALLOW_LIST: &str = "in allow mode that would serve no torrent and drop every swarm, \
     so it is refused (set access.allow_empty = true if that is meant)";

/// What [`ListSource::edit`] left: the list the file holds now, and whether
/// the file had to be rewritten for it (not when it already said so).
pub struct Edited {
    pub list: AccessList,
    pub written: bool,
}

/// Why [`ListSource::edit`] changed nothing; the file and the list served
/// are as they were.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EditError {
    /// The change (or the file as it is) makes a list that a start would
    /// refuse, or a link is at the path: for the operator to decide.
    Refused(String),
    /// The file could not be read or written.
    Failed(String),
}

impl ListSource {
    /// Whether a list of `hashes` from this source is refused (an empty
    /// allow list, unless access.allow_empty): what start, SIGHUP and the
    /// access API all check.
    fn refuses(&self, hashes: &HashList) -> bool {
        self.mode == AccessMode::Allow && hashes.is_empty() && !self.allow_empty
    }

    /// Lists `info_hash` (`listed`) in the list's file or takes it off, as
    /// the access API asks, and returns the list the file then holds, read
    /// as a start reads it: the file on disk is the list (edits not yet
    /// reloaded included), and what it is given is only ever what a start
    /// would accept. A symbolic link at the path is refused, never followed
    /// or replaced. The new file is written beside the old one with its
    /// owner, group and mode, then renamed over it; a tracker that may not
    /// give it that owner changes nothing (`Failed`).
    pub fn edit(&self, info_hash: InfoHash, listed: bool) -> Result<Edited, EditError> {
        let path = self.path.display();
        let (mut text, old) = crate::files::read_regular_not_link(&self.path, self.max_bytes)
            .map_err(|e| {
                if crate::files::is_link(&e, &self.path) {
                    EditError::Refused(format!(
                        "{path} is a symbolic link: the access API neither writes through a \
                         link nor replaces one (set access.file to the file itself)"
                    ))
                } else if e.kind() == io::ErrorKind::InvalidData {
                    EditError::Refused(format!("{path}: {e} (access.max_file_bytes)"))
                } else {
                    EditError::Failed(format!("cannot read {path}: {e}"))
                }
            })?;
        let mut hashes = parse(&text).map_err(|LineError { line, message }| {
            EditError::Refused(format!(
                "{path}:{line}: {message}: a start would refuse the list as it is, so it is \
                 not changed (fix the file first)"
            ))
        })?;
        let written = hashes.contains(&info_hash) != listed;
        if written {
            if listed {
                hashes.insert(info_hash);
            } else {
                hashes.remove(&info_hash);
            }
            edit_text(&mut text, &info_hash, listed);
        }
        if self.refuses(&hashes) {
            let what = if written {
                format!(
                    "taking {} off would leave {path} listing no info-hash",
                    Hex(&info_hash.0)
                )
            } else {
                format!("{path} lists no info-hash")
            };
            return Err(EditError::Refused(format!("{what}: {EMPTY_ALLOW_LIST}")));
        }
        if text.len() as u64 > self.max_bytes {
            return Err(EditError::Refused(format!(
                "{path} would be {} bytes, more than access.max_file_bytes ({}), which a start \
                 would refuse",
                text.len(),
                self.max_bytes
            )));
        }
        if written {
            self.replace(&text, &old)?;
        }
        Ok(Edited {
            list: AccessList::new(self.mode, hashes),
            written,
        })
    }

    /// Replaces the list's file, `old`, with one holding `text` and old's
    /// owner, group and mode.
    fn replace(&self, text: &[u8], old: &Metadata) -> Result<(), EditError> {
        let path = self.path.display();
        let failed = |e: io::Error| EditError::Failed(format!("cannot write {path}: {e}"));
        let mut new = Replacement::create(&self.path).map_err(failed)?;
        keep_owner_and_mode(new.file(), old).map_err(|e| {
            EditError::Failed(format!(
                "cannot give the new {path} the owner (uid {}, gid {}) and mode ({:04o}) of \
                 the old: {e} (let the tracker's user own the file, or change it by hand and \
                 send SIGHUP)",
                old.uid(),
                old.gid(),
                old.mode() & 0o7777
            ))
        })?;
        new.file().write_all(text).map_err(failed)?;
        // Another writer may have put a file (or a link) there since it was
        // read: that one is not overwritten.
        let now = std::fs::symlink_metadata(&self.path).map_err(failed)?;
        if (now.dev(), now.ino()) != (old.dev(), old.ino()) {
            return Err(EditError::Refused(format!(
                "{path} was replaced while the access API changed it; nothing was changed, try \
                 again"
            )));
        }
        new.commit().map_err(failed)
    }
}

/// Gives `file` the owner, group and mode of `old` (owner first: a change
/// of owner clears set-id bits). Unprivileged, a tracker may give a file
/// only its own user and one of its groups.
fn keep_owner_and_mode(file: &File, old: &Metadata) -> io::Result<()> {
    let new = file.metadata()?;
    if (new.uid(), new.gid()) != (old.uid(), old.gid()) {
        std::os::unix::fs::fchown(file, Some(old.uid()), Some(old.gid()))?;
    }
    file.set_permissions(Permissions::from_mode(old.mode() & 0o7777))
}

/// Lists `info_hash` in a list file's text, or takes it off, changing
/// nothing else: a hash comes on a line of its own at the end; taking one off
/// removes each line that lists it, with the comment after it on that line.
fn edit_text(text: &mut Vec<u8>, info_hash: &InfoHash, listed: bool) {
    if listed {
        if text.last().is_some_and(|&b| b != b'\n') {
            text.push(b'\n');
        }
        // Writing into a Vec cannot fail.
        let _ = writeln!(text, "{}", Hex(&info_hash.0));
        return;
    }
    // The lines that list it (in order), then the rest kept in place: the
    // file may be large.
    let removed: Vec<usize> = text
        .split_inclusive(|&b| b == b'\n')
        .enumerate()
        .filter(|(_, line)| InfoHash::from_hex(line_content(line)) == Some(*info_hash))
        .map(|(index, _)| index)
        .collect();
    let mut removed = removed.into_iter().peekable();
    let mut line = 0;
    let mut keep = removed.next_if_eq(&0).is_none();
    text.retain(|&b| {
        let kept = keep;
        if b == b'\n' {
            line += 1;
            keep = removed.next_if_eq(&line).is_none();
        }
        kept
    });
}

/// The first bad line of a list: its 1-based number and what is wrong.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LineError {
    pub line: usize,
    pub message: String,
}

/// Parses a list file's bytes; stops at the first bad line.
pub fn parse(bytes: &[u8]) -> Result<HashList, LineError> {
    // A hash line takes 41 bytes; sizing the set once avoids rehashing a
    // large list several times while it loads.
    let mut hashes = HashList::with_capacity_and_hasher(bytes.len() / 41, RandomState::new());
    for (index, line) in bytes.split(|&b| b == b'\n').enumerate() {
        let content = line_content(line);
        if content.is_empty() {
            continue;
        }
        let hash = InfoHash::from_hex(content).ok_or_else(|| LineError {
            line: index + 1,
            message: describe(content),
        })?;
        hashes.insert(hash);
    }
    Ok(hashes)
}

/// What a line says: what comes before a `#`, if any, without the
/// whitespace around it.
fn line_content(line: &[u8]) -> &[u8] {
    line.split(|&b| b == b'#')
        .next()
        .unwrap_or(line)
        .trim_ascii()
}

/// Why a non-empty line is not a hash, briefly (the line itself may be long
/// or not text, so it is not quoted whole).
fn describe(content: &[u8]) -> String {
    const EXPECTED: &str = "expected 40 hex digits";
    match content
        .iter()
        .enumerate()
        .find(|(_, b)| !b.is_ascii_hexdigit())
    {
        Some((column, &b)) => {
            let shown = if b.is_ascii_graphic() || b == b' ' {
                format!("`{}`", b as char)
            } else {
                format!("byte 0x{b:02x}")
            };
            format!("{EXPECTED}, found {shown} at column {}", column + 1)
        }
        None => format!("{EXPECTED}, found {}", content.len()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: &str = "0123456789abcdef0123456789abcdef01234567";
    const B: &str = "FEDCBA9876543210FEDCBA9876543210FEDCBA98";

    fn hash(hex: &str) -> InfoHash {
        InfoHash::from_hex(hex.as_bytes()).unwrap()
    }

    #[test]
    fn hashes_comments_blanks_and_whitespace() {
        let text = format!(
            "# whole-line comment\n\n   {A}   \n\t{B} # trailing comment\r\n  # indented comment\n{A}\n"
        );
        let hashes = parse(text.as_bytes()).unwrap();
        assert_eq!(hashes.len(), 2, "a duplicate counts once");
        assert!(hashes.contains(&hash(A)));
        assert!(
            hashes.contains(&hash(&B.to_lowercase())),
            "case does not matter"
        );
        assert_eq!(hash(A).0[0], 0x01);
        assert_eq!(hash(B).0[19], 0x98);
    }

    #[test]
    fn an_empty_file_and_one_without_final_newline() {
        assert!(parse(b"").unwrap().is_empty());
        assert!(parse(b"\n# nothing\n").unwrap().is_empty());
        assert_eq!(parse(A.as_bytes()).unwrap().len(), 1);
    }

    #[test]
    fn bad_lines_are_reported_with_their_number() {
        for (line, why) in [
            (&A[..39], "found 39"),
            ("0123456789abcdef0123456789abcdef012345678", "found 41"),
            (
                "0123456789abcdefg123456789abcdef01234567",
                "`g` at column 17",
            ),
            (
                "0123456789abcdef 0123456789abcdef0123456",
                "` ` at column 17",
            ),
            ("0123456789abcdef0123456789abcdef0123456\u{e9}", "byte 0xc3"),
            (
                "0x23456789abcdef0123456789abcdef01234567",
                "`x` at column 2",
            ),
            ("magnet:?xt=urn:btih:", "`m` at column 1"),
        ] {
            let text = format!("# list\n{A}\n{line}\n{B}\n");
            let err = parse(text.as_bytes()).unwrap_err();
            assert_eq!(err.line, 3, "{line}");
            assert!(err.message.starts_with("expected 40 hex digits"), "{err:?}");
            assert!(err.message.contains(why), "{line}: {}", err.message);
        }
    }

    #[test]
    fn modes_give_the_list_its_meaning() {
        let listed = parse(A.as_bytes()).unwrap();
        let allow = AccessList::new(AccessMode::Allow, listed.clone());
        let deny = AccessList::new(AccessMode::Deny, listed);
        assert!(allow.allows(&hash(A)) && !allow.allows(&hash(B)));
        assert!(!deny.allows(&hash(A)) && deny.allows(&hash(B)));
        let nothing = AccessList::new(AccessMode::Allow, HashList::default());
        assert!(
            !nothing.allows(&hash(A)),
            "an empty allow list serves nothing"
        );
    }

    fn source(mode: AccessMode, path: &std::path::Path) -> ListSource {
        ListSource {
            mode,
            path: path.to_path_buf(),
            max_bytes: 1 << 20,
            allow_empty: false,
        }
    }

    #[test]
    fn an_empty_allow_list_is_refused_unless_allowed_and_a_large_one_always() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("access-empty-{}.txt", std::process::id()));
        std::fs::write(&path, "# all gone\n").unwrap();
        let err = AccessList::load(&source(AccessMode::Allow, &path)).unwrap_err();
        assert!(err.to_string().contains("access.allow_empty"), "{err}");
        // Deny mode: an empty list serves everything, which loses nothing.
        assert!(AccessList::load(&source(AccessMode::Deny, &path)).is_ok());
        let allowed = ListSource {
            allow_empty: true,
            ..source(AccessMode::Allow, &path)
        };
        assert!(AccessList::load(&allowed).unwrap().is_empty());
        std::fs::write(&path, format!("{A}\n{B}\n")).unwrap();
        let small = ListSource {
            max_bytes: 50,
            ..source(AccessMode::Deny, &path)
        };
        let err = AccessList::load(&small).unwrap_err();
        assert!(err.to_string().contains("access.max_file_bytes"), "{err}");
        std::fs::remove_file(&path).unwrap();
    }

    #[test]
    fn load_names_the_file_and_line() {
        let dir = std::env::temp_dir();
        let path = dir.join(format!("access-test-{}.txt", std::process::id()));
        std::fs::write(&path, format!("{A}\nnope\n")).unwrap();
        let err = AccessList::load(&source(AccessMode::Allow, &path)).unwrap_err();
        assert_eq!(
            err.to_string(),
            format!(
                "{}:2: expected 40 hex digits, found `n` at column 1",
                path.display()
            )
        );
        std::fs::write(&path, format!("{A}\n{B}\n")).unwrap();
        let list = AccessList::load(&source(AccessMode::Deny, &path)).unwrap();
        assert_eq!(list.len(), 2);
        std::fs::remove_file(&path).unwrap();
        let err = AccessList::load(&source(AccessMode::Deny, &path)).unwrap_err();
        assert_eq!(err.line, None);
        assert!(err
            .to_string()
            .starts_with(&format!("{}: cannot read", path.display())));
    }

    #[test]
    fn edits_change_one_line_and_nothing_else() {
        let a = hash(A);
        let text = format!("# list\n{A} # why\r\n\n  {B}\n{}\n# end", A.to_uppercase());
        let mut bytes = text.into_bytes();
        edit_text(&mut bytes, &a, false);
        assert_eq!(bytes, format!("# list\n\n  {B}\n# end").as_bytes());
        edit_text(&mut bytes, &a, true);
        assert_eq!(bytes, format!("# list\n\n  {B}\n# end\n{A}\n").as_bytes());
        let mut empty = Vec::new();
        edit_text(&mut empty, &a, true);
        assert_eq!(empty, format!("{A}\n").as_bytes());
        edit_text(&mut empty, &a, false);
        assert!(empty.is_empty());
        let mut last = format!("{B}\n{A}").into_bytes();
        edit_text(&mut last, &a, false);
        assert_eq!(last, format!("{B}\n").as_bytes());
    }

    fn scratch(name: &str) -> std::path::PathBuf {
        let dir = std::env::temp_dir().join(format!("access-edit-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        dir
    }

    fn names(dir: &std::path::Path) -> Vec<std::ffi::OsString> {
        std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect()
    }

    #[test]
    fn the_api_edits_the_file_in_place_keeping_its_mode_and_owner() {
        let dir = scratch("keep");
        let path = dir.join("list");
        let text = format!("# kept\n{A} # note\n");
        std::fs::write(&path, &text).unwrap();
        std::fs::set_permissions(&path, Permissions::from_mode(0o640)).unwrap();
        // SAFETY: geteuid has no preconditions.
        let owner = if unsafe { libc::geteuid() } == 0 {
            std::os::unix::fs::chown(&path, Some(4321), Some(4322)).unwrap();
            (4321, 4322)
        } else {
            let meta = std::fs::metadata(&path).unwrap();
            (meta.uid(), meta.gid())
        };
        let source = source(AccessMode::Allow, &path);
        let edited = source.edit(hash(B), true).unwrap();
        assert!(edited.written && edited.list.allows(&hash(B)) && edited.list.allows(&hash(A)));
        let b = B.to_lowercase();
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("{text}{b}\n"),
            "new hashes in lowercase"
        );
        let meta = std::fs::metadata(&path).unwrap();
        assert_eq!(meta.mode() & 0o7777, 0o640);
        assert_eq!((meta.uid(), meta.gid()), owner);
        // Already so: nothing written, the list as the file has it.
        let edited = source.edit(hash(B), true).unwrap();
        assert!(!edited.written && edited.list.len() == 2);
        let edited = source.edit(hash(A), false).unwrap();
        assert!(edited.written && !edited.list.allows(&hash(A)));
        assert_eq!(
            std::fs::read_to_string(&path).unwrap(),
            format!("# kept\n{b}\n")
        );
        assert_eq!(names(&dir), ["list"]);
        std::fs::remove_dir_all(&dir).unwrap();
    }

    #[test]
    fn the_api_never_writes_what_a_start_would_refuse() {
        let dir = scratch("refuse");
        let path = dir.join("list");
        let refused = |source: &ListSource, listed, why: &str| {
            let before = std::fs::read(&path).unwrap();
            match source.edit(hash(A), listed) {
                Err(EditError::Refused(message)) => assert!(message.contains(why), "{message}"),
                other => panic!("{why}: {:?}", other.map(|e| e.written)),
            }
            assert_eq!(std::fs::read(&path).unwrap(), before, "{why}");
            assert_eq!(names(&dir).len(), 1, "{why}: no temporary file left");
        };
        // The last hash of an allow list.
        std::fs::write(&path, format!("# one\n{A}\n")).unwrap();
        let allow = source(AccessMode::Allow, &path);
        refused(&allow, false, "access.allow_empty");
        let meant = ListSource {
            allow_empty: true,
            ..allow.clone()
        };
        assert!(meant.edit(hash(A), false).unwrap().list.is_empty());
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "# one\n");
        // An emptied file not yet reloaded is not published either.
        refused(&allow, false, "access.allow_empty");
        // Deny mode: an empty list loses nothing.
        let deny = source(AccessMode::Deny, &path);
        assert!(deny.edit(hash(A), true).unwrap().written);
        assert!(deny.edit(hash(A), false).unwrap().written);
        // A list grown past its bound; a file a start refuses as it is.
        std::fs::write(&path, format!("{B}\n")).unwrap();
        let small = ListSource {
            max_bytes: 60,
            ..allow.clone()
        };
        refused(&small, true, "access.max_file_bytes");
        std::fs::write(&path, format!("{B}\nnope\n")).unwrap();
        refused(&allow, true, ":2: expected 40 hex digits");
        // A link: neither followed nor replaced.
        let link = dir.join("link");
        std::os::unix::fs::symlink(&path, &link).unwrap();
        let linked = source(AccessMode::Deny, &link);
        match linked.edit(hash(A), true) {
            Err(EditError::Refused(message)) => assert!(message.contains("symbolic link")),
            other => panic!("{:?}", other.map(|e| e.written)),
        }
        assert!(std::fs::symlink_metadata(&link).unwrap().is_symlink());
        std::fs::remove_dir_all(&dir).unwrap();
    }

    /// Every hash of a large generated list survives the round trip; the
    /// time is printed so that a release run (`cargo test --release -p
    /// tracker-runtime access -- --nocapture`) shows the load speed.
    #[test]
    fn a_large_list_loads_whole() {
        let n = 200_000u32;
        let mut text = String::with_capacity(n as usize * 41);
        for i in 0..n {
            let h = i.wrapping_mul(0x9e37_79b9);
            text.push_str(&format!("{h:08x}{i:08x}000000000000000000000000\n"));
        }
        let start = std::time::Instant::now();
        let hashes = parse(text.as_bytes()).unwrap();
        eprintln!("{n} hashes parsed in {:?}", start.elapsed());
        assert_eq!(hashes.len(), n as usize);
        let mut last = [0u8; 20];
        last[4..8].copy_from_slice(&(n - 1).to_be_bytes());
        last[..4].copy_from_slice(&(n - 1).wrapping_mul(0x9e37_79b9).to_be_bytes());
        assert!(hashes.contains(&InfoHash(last)));
    }
}
