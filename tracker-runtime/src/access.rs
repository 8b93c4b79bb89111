//! Access lists: which torrents the tracker serves.
//!
//! A list file holds one info-hash per line as 40 hex digits (either case).
//! `#` starts a comment, on a line of its own or after a hash; blank lines and
//! whitespace around a hash are ignored. In `allow` mode only listed torrents
//! are served; in `deny` mode every torrent but the listed ones.
//!
//! The parser is pure (bytes in, set out) so that a reload can run it off
//! the workers (see `reload`) and hand them a finished list.

use std::collections::HashSet;
use std::fmt;
use std::path::PathBuf;

use ahash::RandomState;
use serde::{Deserialize, Serialize};

use std::io::Write as _;
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
        if source.mode == AccessMode::Allow && hashes.is_empty() && !source.allow_empty {
            return Err(error(
                None,
                "lists no info-hash: in allow mode that would serve no torrent and drop every \
                 swarm, so it is refused (set access.allow_empty = true if that is meant)"
                    .into(),
            ));
        }
        Ok(AccessList::new(source.mode, hashes))
    }

    /// Whether announces for `info_hash` are served.
    #[inline]
    pub fn allows(&self, info_hash: &InfoHash) -> bool {
        self.hashes.contains(info_hash) == self.listed_are_allowed
    }

    /// A copy with `info_hash` listed (`listed`) or not: what the access
    /// API publishes. None when that changes nothing.
    pub fn with(&self, info_hash: InfoHash, listed: bool) -> Option<AccessList> {
        if self.hashes.contains(&info_hash) == listed {
            return None;
        }
        let mut hashes = self.hashes.clone();
        if listed {
            hashes.insert(info_hash);
        } else {
            hashes.remove(&info_hash);
        }
        Some(AccessList {
            listed_are_allowed: self.listed_are_allowed,
            hashes,
        })
    }

    /// The list as a file `parse` reads back: one info-hash per line, in
    /// 40 lowercase hex digits, sorted.
    pub fn to_file(&self) -> Vec<u8> {
        let mut hashes: Vec<&InfoHash> = self.hashes.iter().collect();
        hashes.sort_unstable();
        let mut out = Vec::with_capacity(hashes.len() * 41 + 64);
        out.extend_from_slice(b"# written by the tracker's access API\n");
        for hash in hashes {
            // Writing into a Vec cannot fail.
            let _ = writeln!(out, "{}", Hex(&hash.0));
        }
        out
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
        // What comes before a `#`, if any.
        let content = line.split(|&b| b == b'#').next().unwrap_or(line);
        let content = content.trim_ascii();
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
