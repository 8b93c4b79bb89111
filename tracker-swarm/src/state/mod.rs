//! The state file: every swarm and completed count, written when the tracker
//! stops on request and read back when it starts, so that a restart or an
//! upgrade loses nothing but the requests of the moment.
//!
//! This module is the codec alone, pure (bytes in, bytes out); the binary
//! does the I/O (atomic replace) and the swarm store turns its torrents into
//! [`SavedTorrent`]s and back.
//!
//! Layout, all integers little-endian:
//!
//! ```text
//! header (40 bytes)
//!   magic         8   "TRKSTATE"
//!   version       u32 FORMAT_VERSION
//!   reserved      u32 0
//!   saved_at      u64 Unix seconds when written
//!   torrents      u64 torrent records in the body
//!   body_len      u64 bytes of the body
//! body: `torrents` records, each
//!   info_hash     20
//!   completed     u32
//!   v4_peers u32, v4_seeders u32, v6_peers u32, v6_seeders u32
//!   v4_peers x  { ip 4,  port u16, last_seen u64, peer_id 20, flags u8 }  (35 bytes)
//!   v6_peers x  { ip 16, port u16, last_seen u64, peer_id 20, flags u8 }  (47 bytes)
//!   seeders first in each family; flags: bit 0 set for a peer that had a
//!   download counted (`SavedPeer::completed`), the others 0
//!   (version 1, still read: no flags, peers of 34 and 46 bytes)
//!   (a record with no peers at all is a WebRTC torrent's downloaded count:
//!   see `persist`)
//! trailer
//!   crc32         u32 CRC-32 (IEEE) of header and body
//! ```
//!
//! Why so: fixed-size peers let a reader skip a torrent it does not own in
//! O(1), so every worker scans the file in parallel and keeps its own
//! torrents, whatever the worker count was when it was written (ownership is
//! recomputed, never stored). The body length in the header tells a truncated
//! file from a corrupt one; the checksum catches the rest before anything is
//! loaded. Peers carry the wall-clock time of their last announce, not the
//! process's monotonic clock, so their age survives the restart.
//!
//! Version 2 added the flags (issue 37: a peer that flipped between leecher
//! and completed counted a download per flip, and the mark that stops it
//! must outlive a restart). A tracker reads both versions and writes the
//! newer one, so an upgrade keeps every swarm; an older tracker refuses the
//! newer version and starts empty.

#[cfg(test)]
pub(crate) mod tests;

use std::fmt;
use std::net::{Ipv4Addr, Ipv6Addr};

use tracker_proto::{InfoHash, PeerId};

pub const MAGIC: [u8; 8] = *b"TRKSTATE";
/// Bumped on any change of layout; what is written.
pub const FORMAT_VERSION: u32 = 2;
/// The oldest version still read; a reader refuses any other outside
/// `OLDEST_FORMAT_VERSION..=FORMAT_VERSION`.
pub const OLDEST_FORMAT_VERSION: u32 = 1;
pub const HEADER_LEN: usize = 40;
pub const TRAILER_LEN: usize = 4;
/// A torrent record before its peers.
const TORRENT_HEAD_LEN: usize = 20 + 4 + 4 * 4;

/// An address family as stored: its size on the wire.
pub trait SavedIp: Copy + Eq + fmt::Debug {
    const LEN: usize;
    fn write(&self, out: &mut Vec<u8>);
    /// `bytes` is exactly `LEN` long.
    fn read(bytes: &[u8]) -> Self;
}

impl SavedIp for Ipv4Addr {
    const LEN: usize = 4;
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.octets());
    }
    fn read(bytes: &[u8]) -> Self {
        <[u8; 4]>::try_from(bytes).map_or(Ipv4Addr::UNSPECIFIED, Ipv4Addr::from)
    }
}

impl SavedIp for Ipv6Addr {
    const LEN: usize = 16;
    fn write(&self, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.octets());
    }
    fn read(bytes: &[u8]) -> Self {
        <[u8; 16]>::try_from(bytes).map_or(Ipv6Addr::UNSPECIFIED, Ipv6Addr::from)
    }
}

/// Bytes of one stored peer of family `I` in a file of `version`.
const fn peer_len<I: SavedIp>(version: u32) -> usize {
    I::LEN + 2 + 8 + 20 + if version >= 2 { 1 } else { 0 }
}

/// The flag of a peer that had a download counted.
const FLAG_COMPLETED: u8 = 1;

/// About the bytes of a section of `torrents` holding `peers`, room for an
/// eighth of them being IPv6 included: what a snapshot reserves, so that its
/// section is not copied as it grows.
pub const fn section_len_hint(torrents: usize, peers: usize) -> usize {
    let v4 = peer_len::<Ipv4Addr>(FORMAT_VERSION);
    let v6 = peer_len::<Ipv6Addr>(FORMAT_VERSION);
    torrents * TORRENT_HEAD_LEN + peers * v4 + peers / 8 * (v6 - v4)
}

/// One peer as saved.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SavedPeer<I> {
    pub ip: I,
    pub port: u16,
    pub peer_id: PeerId,
    /// Unix seconds of its last announce.
    pub last_seen: u64,
    /// Whether it had a download counted (the torrent's `completed`), so
    /// that it counts none again (see `Expiry::completed` in the store). A
    /// version 1 file has no such mark: its seeders are read as marked
    /// (each has what a completion would give it), its leechers not.
    pub completed: bool,
}

/// The peers of one family of a torrent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SavedHalf<I> {
    pub seeders: Vec<SavedPeer<I>>,
    pub leechers: Vec<SavedPeer<I>>,
}

impl<I> Default for SavedHalf<I> {
    fn default() -> Self {
        SavedHalf {
            seeders: Vec::new(),
            leechers: Vec::new(),
        }
    }
}

impl<I> SavedHalf<I> {
    pub fn clear(&mut self) {
        self.seeders.clear();
        self.leechers.clear();
    }

    pub fn len(&self) -> usize {
        self.seeders.len() + self.leechers.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// One torrent as saved; reused as scratch space by the writer of a store.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SavedTorrent {
    pub info_hash: InfoHash,
    pub completed: u32,
    pub v4: SavedHalf<Ipv4Addr>,
    pub v6: SavedHalf<Ipv6Addr>,
}

impl SavedTorrent {
    pub fn clear(&mut self) {
        self.completed = 0;
        self.v4.clear();
        self.v6.clear();
    }
}

/// Part of a body: the torrents of one worker, encoded while it stops. The
/// workers' sections are joined by [`header`] and [`trailer`] into a file.
#[derive(Clone, Debug, Default)]
pub struct Section {
    bytes: Vec<u8>,
    torrents: u64,
    peers: u64,
}

impl Section {
    pub fn with_capacity(bytes: usize) -> Self {
        Section {
            bytes: Vec::with_capacity(bytes),
            torrents: 0,
            peers: 0,
        }
    }

    /// Appends one torrent record. Counts are u32 on the wire; a store never
    /// holds more peers than that per torrent (its limit is capped there).
    pub fn push(&mut self, t: &SavedTorrent) {
        let out = &mut self.bytes;
        out.reserve(
            TORRENT_HEAD_LEN
                + t.v4.len() * peer_len::<Ipv4Addr>(FORMAT_VERSION)
                + t.v6.len() * peer_len::<Ipv6Addr>(FORMAT_VERSION),
        );
        out.extend_from_slice(&t.info_hash.0);
        out.extend_from_slice(&t.completed.to_le_bytes());
        for (len, seeders) in [
            (t.v4.len(), t.v4.seeders.len()),
            (t.v6.len(), t.v6.seeders.len()),
        ] {
            out.extend_from_slice(&(len as u32).to_le_bytes());
            out.extend_from_slice(&(seeders as u32).to_le_bytes());
        }
        write_peers(out, &t.v4);
        write_peers(out, &t.v6);
        self.torrents += 1;
        self.peers += (t.v4.len() + t.v6.len()) as u64;
    }

    pub fn torrents(&self) -> u64 {
        self.torrents
    }

    pub fn peers(&self) -> u64 {
        self.peers
    }

    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

fn write_peers<I: SavedIp>(out: &mut Vec<u8>, half: &SavedHalf<I>) {
    for peer in half.seeders.iter().chain(&half.leechers) {
        peer.ip.write(out);
        out.extend_from_slice(&peer.port.to_le_bytes());
        out.extend_from_slice(&peer.last_seen.to_le_bytes());
        out.extend_from_slice(&peer.peer_id.0);
        out.push(if peer.completed { FLAG_COMPLETED } else { 0 });
    }
}

/// The header of a file whose body is `sections`, in order.
fn header(sections: &[Section], saved_at: u64) -> [u8; HEADER_LEN] {
    let torrents: u64 = sections.iter().map(|s| s.torrents).sum();
    let body_len: u64 = sections.iter().map(|s| s.bytes.len() as u64).sum();
    let mut h = [0u8; HEADER_LEN];
    h[..8].copy_from_slice(&MAGIC);
    h[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    h[16..24].copy_from_slice(&saved_at.to_le_bytes());
    h[24..32].copy_from_slice(&torrents.to_le_bytes());
    h[32..40].copy_from_slice(&body_len.to_le_bytes());
    h
}

/// The trailer after `header` and the `sections` it describes.
fn trailer(header: &[u8; HEADER_LEN], sections: &[Section]) -> [u8; TRAILER_LEN] {
    let mut crc = crc32fast::Hasher::new();
    crc.update(header);
    for section in sections {
        crc.update(&section.bytes);
    }
    crc.finalize().to_le_bytes()
}

/// A whole file as its parts, in order, without joining them: the header,
/// the workers' sections, the trailer.
pub struct Framed<'a> {
    header: [u8; HEADER_LEN],
    sections: &'a [Section],
    trailer: [u8; TRAILER_LEN],
}

impl<'a> Framed<'a> {
    /// The file of `sections`, saved at Unix time `saved_at`.
    pub fn new(sections: &'a [Section], saved_at: u64) -> Self {
        let header = header(sections, saved_at);
        let trailer = trailer(&header, sections);
        Framed {
            header,
            sections,
            trailer,
        }
    }

    pub fn parts(&self) -> impl Iterator<Item = &[u8]> {
        std::iter::once(&self.header[..])
            .chain(self.sections.iter().map(Section::as_bytes))
            .chain(std::iter::once(&self.trailer[..]))
    }

    /// Its bytes in all.
    pub fn byte_len(&self) -> usize {
        self.parts().map(<[u8]>::len).sum()
    }
}

/// A whole file in one buffer (for tests and tools; the tracker writes the
/// parts without joining them).
pub fn encode(sections: &[Section], saved_at: u64) -> Vec<u8> {
    Framed::new(sections, saved_at)
        .parts()
        .flatten()
        .copied()
        .collect()
}

/// Why a state file cannot be loaded.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum StateError {
    /// It does not start with the magic bytes.
    NotAStateFile,
    /// Written by a version of the tracker with another layout.
    UnsupportedVersion(u32),
    /// Shorter than its header says: the write was cut off.
    Truncated { expected: u64, found: u64 },
    /// Longer than its header says.
    TrailingBytes { expected: u64, found: u64 },
    /// The checksum does not match: the bytes changed after writing.
    ChecksumMismatch,
    /// The checksum matches but the records do not add up.
    Malformed(&'static str),
}

impl fmt::Display for StateError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StateError::NotAStateFile => f.write_str("not a tracker state file (no magic bytes)"),
            StateError::UnsupportedVersion(v) => write!(
                f,
                "format version {v}, but this tracker reads versions \
                 {OLDEST_FORMAT_VERSION} to {FORMAT_VERSION}"
            ),
            StateError::Truncated { expected, found } => {
                write!(f, "truncated: {found} bytes of {expected}")
            }
            StateError::TrailingBytes { expected, found } => {
                write!(f, "{found} bytes where {expected} were written")
            }
            StateError::ChecksumMismatch => f.write_str("corrupt: checksum mismatch"),
            StateError::Malformed(what) => write!(f, "corrupt: {what}"),
        }
    }
}

impl std::error::Error for StateError {}

/// A state file whose header, length, checksum and records were all checked.
#[derive(Clone, Copy, Debug)]
pub struct StateFile<'a> {
    /// The version it was written in (`OLDEST_FORMAT_VERSION` to
    /// `FORMAT_VERSION`).
    pub version: u32,
    pub saved_at: u64,
    pub torrents: u64,
    body: &'a [u8],
}

impl<'a> StateFile<'a> {
    /// Checks everything before a single torrent is loaded: a file that fails
    /// any check is not loaded at all, rather than loaded in part.
    pub fn parse(bytes: &'a [u8]) -> Result<StateFile<'a>, StateError> {
        if bytes.len() < MAGIC.len() || bytes[..8] != MAGIC {
            return Err(StateError::NotAStateFile);
        }
        let min = (HEADER_LEN + TRAILER_LEN) as u64;
        if bytes.len() < 12 {
            return Err(StateError::Truncated {
                expected: min,
                found: bytes.len() as u64,
            });
        }
        let version = u32_at(bytes, 8);
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(StateError::UnsupportedVersion(version));
        }
        if bytes.len() < HEADER_LEN + TRAILER_LEN {
            return Err(StateError::Truncated {
                expected: min,
                found: bytes.len() as u64,
            });
        }
        let saved_at = u64_at(bytes, 16);
        let torrents = u64_at(bytes, 24);
        let body_len = u64_at(bytes, 32);
        let expected = body_len.saturating_add(min);
        let found = bytes.len() as u64;
        if found < expected {
            return Err(StateError::Truncated { expected, found });
        }
        if found > expected {
            return Err(StateError::TrailingBytes { expected, found });
        }
        let (data, crc) = bytes.split_at(bytes.len() - TRAILER_LEN);
        if crc32fast::hash(data).to_le_bytes() != crc {
            return Err(StateError::ChecksumMismatch);
        }
        let file = StateFile {
            version,
            saved_at,
            torrents,
            body: &data[HEADER_LEN..],
        };
        let mut records = file.records();
        let mut seen = 0u64;
        for record in &mut records {
            record?;
            seen += 1;
        }
        if seen != torrents {
            return Err(StateError::Malformed(
                "the torrent count does not match the records",
            ));
        }
        Ok(file)
    }

    /// A file that [`parse`](Self::parse) accepted, opened again without
    /// checking its checksum and records again: the main thread checks the
    /// file once and each worker reopens it to read its own torrents. Its
    /// records are still read with every bound checked.
    pub fn reopen(bytes: &'a [u8]) -> Result<StateFile<'a>, StateError> {
        if bytes.len() < HEADER_LEN + TRAILER_LEN || bytes[..8] != MAGIC {
            return Err(StateError::NotAStateFile);
        }
        let version = u32_at(bytes, 8);
        if !(OLDEST_FORMAT_VERSION..=FORMAT_VERSION).contains(&version) {
            return Err(StateError::UnsupportedVersion(version));
        }
        Ok(StateFile {
            version,
            saved_at: u64_at(bytes, 16),
            torrents: u64_at(bytes, 24),
            body: &bytes[HEADER_LEN..bytes.len() - TRAILER_LEN],
        })
    }

    /// The torrent records, in file order.
    pub fn records(&self) -> Records<'a> {
        Records {
            rest: self.body,
            version: self.version,
        }
    }
}

fn u32_at(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn u64_at(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// Iterates torrent records; an error ends it.
pub struct Records<'a> {
    rest: &'a [u8],
    /// The file's, which sets the size of its peers.
    version: u32,
}

impl<'a> Iterator for Records<'a> {
    type Item = Result<TorrentRecord<'a>, StateError>;

    fn next(&mut self) -> Option<Self::Item> {
        if self.rest.is_empty() {
            return None;
        }
        let result = self.take();
        if result.is_err() {
            self.rest = &[];
        }
        Some(result)
    }
}

impl<'a> Records<'a> {
    fn take(&mut self) -> Result<TorrentRecord<'a>, StateError> {
        let head = self
            .rest
            .get(..TORRENT_HEAD_LEN)
            .ok_or(StateError::Malformed("a torrent record is cut short"))?;
        let info_hash = InfoHash(head[..20].try_into().expect("20 bytes"));
        let completed = u32_at(head, 20);
        let (v4_len, v4_seeders) = (u32_at(head, 24), u32_at(head, 28));
        let (v6_len, v6_seeders) = (u32_at(head, 32), u32_at(head, 36));
        if v4_seeders > v4_len || v6_seeders > v6_len {
            return Err(StateError::Malformed("more seeders than peers"));
        }
        // u64: counts up to u32::MAX times 46 bytes do not overflow it.
        let v4_bytes = u64::from(v4_len) * peer_len::<Ipv4Addr>(self.version) as u64;
        let v6_bytes = u64::from(v6_len) * peer_len::<Ipv6Addr>(self.version) as u64;
        let after_head = &self.rest[TORRENT_HEAD_LEN..];
        if v4_bytes + v6_bytes > after_head.len() as u64 {
            return Err(StateError::Malformed("a torrent's peers are cut short"));
        }
        let (v4, after_v4) = after_head.split_at(v4_bytes as usize);
        let (v6, rest) = after_v4.split_at(v6_bytes as usize);
        self.rest = rest;
        Ok(TorrentRecord {
            info_hash,
            completed,
            v4: HalfRecord {
                seeders: v4_seeders as usize,
                bytes: v4,
                version: self.version,
                _ip: std::marker::PhantomData,
            },
            v6: HalfRecord {
                seeders: v6_seeders as usize,
                bytes: v6,
                version: self.version,
                _ip: std::marker::PhantomData,
            },
        })
    }
}

/// One torrent record, read in place.
#[derive(Clone, Copy, Debug)]
pub struct TorrentRecord<'a> {
    pub info_hash: InfoHash,
    pub completed: u32,
    pub v4: HalfRecord<'a, Ipv4Addr>,
    pub v6: HalfRecord<'a, Ipv6Addr>,
}

impl TorrentRecord<'_> {
    /// The record as an owned torrent.
    pub fn to_saved(&self) -> SavedTorrent {
        let mut t = SavedTorrent {
            info_hash: self.info_hash,
            completed: self.completed,
            ..SavedTorrent::default()
        };
        for (seeder, peer) in self.v4.peers() {
            let list = if seeder {
                &mut t.v4.seeders
            } else {
                &mut t.v4.leechers
            };
            list.push(peer);
        }
        for (seeder, peer) in self.v6.peers() {
            let list = if seeder {
                &mut t.v6.seeders
            } else {
                &mut t.v6.leechers
            };
            list.push(peer);
        }
        t
    }
}

/// The peers of one family of a record, read in place.
#[derive(Clone, Copy, Debug)]
pub struct HalfRecord<'a, I> {
    seeders: usize,
    bytes: &'a [u8],
    /// The file's, which sets the size of its peers and whether they have
    /// flags.
    version: u32,
    _ip: std::marker::PhantomData<I>,
}

impl<'a, I: SavedIp> HalfRecord<'a, I> {
    pub fn len(&self) -> usize {
        self.bytes.len() / peer_len::<I>(self.version)
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// Each peer with whether it seeds, leechers first: the order a swarm
    /// keeps them in, so that restoring them in turn moves none.
    pub fn peers(&self) -> impl Iterator<Item = (bool, SavedPeer<I>)> + 'a {
        let entries = self.bytes.chunks_exact(peer_len::<I>(self.version));
        let seeders = entries.clone().take(self.seeders).map(|p| (true, p));
        let leechers = entries.skip(self.seeders).map(|p| (false, p));
        leechers.chain(seeders).map(|(seeder, p)| {
            let (ip, rest) = p.split_at(I::LEN);
            let peer = SavedPeer {
                ip: I::read(ip),
                port: u16::from_le_bytes([rest[0], rest[1]]),
                last_seen: u64_at(rest, 2),
                peer_id: PeerId(rest[10..30].try_into().expect("20 bytes")),
                // Version 1 has no flags (see `SavedPeer::completed`).
                completed: rest
                    .get(30)
                    .map_or(seeder, |flags| flags & FLAG_COMPLETED != 0),
            };
            (seeder, peer)
        })
    }
}
