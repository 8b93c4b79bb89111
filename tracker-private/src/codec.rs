//! A binary form of the rows not yet written, with their flush sequence
//! numbers: the state file written when the database is unreachable at a
//! stop, read at the next start, and handed to a successor process.
//!
//! Layout: the magic `TPRVBTCH`, a little-endian u16 version, a u32 count
//! of entries; each entry is a u8 flag (1: numbered) and a u64 sequence
//! (0 when not numbered), four u32 row counts (peers, history, users,
//! torrents) and in version 2 a fifth (unregistered info-hashes), then the
//! rows, all fields little-endian and fixed width (an IP is a tag 4 or 6
//! and its octets; an agent a length byte and at most 64 bytes).
//! Checksums are the file writer's business.
//!
//! Version 2 is written only when some batch has unregistered info-hashes,
//! so that a version before them, to which an operator rolls back, still
//! reads every file that has none; both versions are read.
//!
//! Decoding takes any bytes: it never panics, and it reserves room for no
//! more rows than the remaining input could hold.

use crate::batch::{
    Agent, Batch, HistoryRow, PeerKey, PeerRow, TorrentRow, UnregisteredRow, UserRow,
};
use ahash::AHashMap;
use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use tracker_proto::{InfoHash, PeerId};

const MAGIC: &[u8; 8] = b"TPRVBTCH";
/// Four tables per batch.
const VERSION_1: u16 = 1;
/// Five: `unregistered_info_hashes` too.
const VERSION: u16 = 2;

/// The fewest bytes each thing can take, to bound what a count reserves.
const MIN_ENTRY: usize = 1 + 8 + 4 * 4;
const MIN_PEER: usize = 4 + 4 + 20 + 1 + 4 + 2 + 1 + 3 * 8 + 1 + 2 * 8;
const MIN_HISTORY: usize = 4 + 4 + 1 + 7 * 8 + 1 + 3 * 8;
const USER_LEN: usize = 4 + 2 * 8;
const TORRENT_LEN: usize = 4 + 5 * 8;
const UNREGISTERED_LEN: usize = 4 + 20 + 2 * 8;

/// Why bytes are not a pending-rows file.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CodecError {
    BadMagic,
    UnsupportedVersion(u16),
    /// The input ends inside a field.
    Truncated,
    /// A field holds a value no encoder writes.
    Invalid(&'static str),
    /// A key appears twice in one batch.
    Duplicate(&'static str),
    /// Bytes follow the last entry.
    TrailingBytes,
}

impl fmt::Display for CodecError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            CodecError::BadMagic => f.write_str("not a pending-rows file (bad magic)"),
            CodecError::UnsupportedVersion(v) => write!(f, "unsupported pending-rows version {v}"),
            CodecError::Truncated => f.write_str("pending rows truncated"),
            CodecError::Invalid(what) => write!(f, "invalid {what} in pending rows"),
            CodecError::Duplicate(what) => write!(f, "duplicate {what} key in pending rows"),
            CodecError::TrailingBytes => f.write_str("bytes after the pending rows"),
        }
    }
}

impl std::error::Error for CodecError {}

/// Appends `pending` (each batch with its flush sequence number, None
/// where it was not yet numbered) to `out`.
pub fn encode_pending(pending: &[(Option<u64>, &Batch)], out: &mut Vec<u8>) {
    let version = if pending.iter().any(|(_, b)| !b.unregistered.is_empty()) {
        VERSION
    } else {
        VERSION_1
    };
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&version.to_le_bytes());
    put_len(out, pending.len());
    for (sequence, batch) in pending {
        out.push(u8::from(sequence.is_some()));
        out.extend_from_slice(&sequence.unwrap_or(0).to_le_bytes());
        put_len(out, batch.peers.len());
        put_len(out, batch.history.len());
        put_len(out, batch.users.len());
        put_len(out, batch.torrents.len());
        if version == VERSION {
            put_len(out, batch.unregistered.len());
        }
        for (key, row) in &batch.peers {
            put_peer(out, key, row);
        }
        for (&(user_id, torrent_id), row) in &batch.history {
            out.extend_from_slice(&user_id.to_le_bytes());
            out.extend_from_slice(&torrent_id.to_le_bytes());
            put_history(out, row);
        }
        for (id, row) in &batch.users {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&row.uploaded.to_le_bytes());
            out.extend_from_slice(&row.downloaded.to_le_bytes());
        }
        for (id, row) in &batch.torrents {
            out.extend_from_slice(&id.to_le_bytes());
            out.extend_from_slice(&row.seeders.to_le_bytes());
            out.extend_from_slice(&row.leechers.to_le_bytes());
            out.extend_from_slice(&row.times_completed.to_le_bytes());
            out.extend_from_slice(&row.balance.to_le_bytes());
            out.extend_from_slice(&row.updated_at.to_le_bytes());
        }
        for ((user_id, info_hash), row) in &batch.unregistered {
            out.extend_from_slice(&user_id.to_le_bytes());
            out.extend_from_slice(&info_hash.0);
            out.extend_from_slice(&row.created_at.to_le_bytes());
            out.extend_from_slice(&row.updated_at.to_le_bytes());
        }
    }
}

/// A count as u32: a map never holds 2^32 rows (the memory it would take),
/// so saturating never happens in practice, and the decoder would then
/// refuse the file rather than misread it.
fn put_len(out: &mut Vec<u8>, len: usize) {
    out.extend_from_slice(&u32::try_from(len).unwrap_or(u32::MAX).to_le_bytes());
}

fn put_agent(out: &mut Vec<u8>, agent: &Agent) {
    let bytes = agent.as_bytes();
    out.push(u8::try_from(bytes.len()).unwrap_or(u8::MAX));
    out.extend_from_slice(bytes);
}

fn put_peer(out: &mut Vec<u8>, key: &PeerKey, row: &PeerRow) {
    out.extend_from_slice(&key.user_id.to_le_bytes());
    out.extend_from_slice(&key.torrent_id.to_le_bytes());
    out.extend_from_slice(&key.peer_id.0);
    match row.ip {
        IpAddr::V4(ip) => {
            out.push(4);
            out.extend_from_slice(&ip.octets());
        }
        IpAddr::V6(ip) => {
            out.push(6);
            out.extend_from_slice(&ip.octets());
        }
    }
    out.extend_from_slice(&row.port.to_le_bytes());
    put_agent(out, &row.agent);
    out.extend_from_slice(&row.uploaded.to_le_bytes());
    out.extend_from_slice(&row.downloaded.to_le_bytes());
    out.extend_from_slice(&row.left.to_le_bytes());
    out.push(flags(&[
        row.active,
        row.seeder,
        row.visible,
        row.connectable,
    ]));
    out.extend_from_slice(&row.created_at.to_le_bytes());
    out.extend_from_slice(&row.updated_at.to_le_bytes());
}

fn put_history(out: &mut Vec<u8>, row: &HistoryRow) {
    put_agent(out, &row.agent);
    for n in [
        row.uploaded,
        row.downloaded,
        row.actual_uploaded,
        row.actual_downloaded,
        row.client_uploaded,
        row.client_downloaded,
        row.seedtime,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.push(flags(&[
        row.seeder,
        row.active,
        row.immune,
        row.completed_at.is_some(),
    ]));
    out.extend_from_slice(&row.completed_at.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&row.created_at.to_le_bytes());
    out.extend_from_slice(&row.updated_at.to_le_bytes());
}

/// Bit i set for `bits[i]`.
fn flags(bits: &[bool]) -> u8 {
    bits.iter()
        .enumerate()
        .fold(0, |acc, (i, &bit)| acc | (u8::from(bit) << i))
}

/// The bytes still to read.
struct Reader<'a> {
    rest: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], CodecError> {
        let (head, rest) = self.rest.split_at_checked(n).ok_or(CodecError::Truncated)?;
        self.rest = rest;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], CodecError> {
        self.take(N)?.try_into().map_err(|_| CodecError::Truncated)
    }

    fn u8(&mut self) -> Result<u8, CodecError> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    fn u16(&mut self) -> Result<u16, CodecError> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    fn u32(&mut self) -> Result<u32, CodecError> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    fn u64(&mut self) -> Result<u64, CodecError> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    fn i64(&mut self) -> Result<i64, CodecError> {
        Ok(i64::from_le_bytes(self.array()?))
    }

    /// A count, and the room it may reserve: no more than the remaining
    /// input could hold at `min_len` bytes each.
    fn count(&mut self, min_len: usize) -> Result<(usize, usize), CodecError> {
        let count = usize::try_from(self.u32()?).map_err(|_| CodecError::Invalid("count"))?;
        let room = count.min(self.rest.len() / min_len.max(1));
        Ok((count, room))
    }

    /// Flag bits, refusing any beyond the `n` defined.
    fn flags<const N: usize>(&mut self, what: &'static str) -> Result<[bool; N], CodecError> {
        let byte = self.u8()?;
        if u32::from(byte) >> N != 0 {
            return Err(CodecError::Invalid(what));
        }
        let mut bits = [false; N];
        for (i, bit) in bits.iter_mut().enumerate() {
            *bit = byte >> i & 1 == 1;
        }
        Ok(bits)
    }

    fn agent(&mut self) -> Result<Agent, CodecError> {
        let len = usize::from(self.u8()?);
        if len > Agent::MAX {
            return Err(CodecError::Invalid("agent length"));
        }
        Ok(Agent::new(self.take(len)?))
    }

    fn ip(&mut self) -> Result<IpAddr, CodecError> {
        match self.u8()? {
            4 => Ok(IpAddr::V4(Ipv4Addr::from(self.array::<4>()?))),
            6 => Ok(IpAddr::V6(Ipv6Addr::from(self.array::<16>()?))),
            _ => Err(CodecError::Invalid("IP address family")),
        }
    }
}

/// Reads what [`encode_pending`] wrote; anything else is an error.
pub fn decode_pending(bytes: &[u8]) -> Result<Vec<(Option<u64>, Batch)>, CodecError> {
    let mut r = Reader { rest: bytes };
    if r.take(MAGIC.len()).map_err(|_| CodecError::BadMagic)? != MAGIC {
        return Err(CodecError::BadMagic);
    }
    let version = r.u16()?;
    if version != VERSION && version != VERSION_1 {
        return Err(CodecError::UnsupportedVersion(version));
    }
    let (entries, room) = r.count(MIN_ENTRY)?;
    let mut pending = Vec::with_capacity(room);
    for _ in 0..entries {
        let numbered = r.u8()?;
        let sequence = r.u64()?;
        let sequence = match numbered {
            0 if sequence == 0 => None,
            1 => Some(sequence),
            _ => return Err(CodecError::Invalid("sequence flag")),
        };
        pending.push((sequence, read_batch(&mut r, version)?));
    }
    if !r.rest.is_empty() {
        return Err(CodecError::TrailingBytes);
    }
    Ok(pending)
}

fn insert_new<K: Hash + Eq, V>(
    map: &mut AHashMap<K, V>,
    key: K,
    value: V,
    what: &'static str,
) -> Result<(), CodecError> {
    match map.insert(key, value) {
        None => Ok(()),
        Some(_) => Err(CodecError::Duplicate(what)),
    }
}

fn read_batch(r: &mut Reader<'_>, version: u16) -> Result<Batch, CodecError> {
    let (peers, peers_room) = r.count(MIN_PEER)?;
    let (history, history_room) = r.count(MIN_HISTORY)?;
    let (users, users_room) = r.count(USER_LEN)?;
    let (torrents, torrents_room) = r.count(TORRENT_LEN)?;
    let (unregistered, unregistered_room) = if version == VERSION_1 {
        (0, 0)
    } else {
        r.count(UNREGISTERED_LEN)?
    };
    let mut batch = Batch {
        peers: AHashMap::with_capacity(peers_room),
        history: AHashMap::with_capacity(history_room),
        users: AHashMap::with_capacity(users_room),
        torrents: AHashMap::with_capacity(torrents_room),
        unregistered: AHashMap::with_capacity(unregistered_room),
    };
    for _ in 0..peers {
        let key = PeerKey {
            user_id: r.u32()?,
            torrent_id: r.u32()?,
            peer_id: PeerId(r.array()?),
        };
        let ip = r.ip()?;
        let port = r.u16()?;
        let agent = r.agent()?;
        let (uploaded, downloaded, left) = (r.u64()?, r.u64()?, r.u64()?);
        let [active, seeder, visible, connectable] = r.flags("peer flags")?;
        let row = PeerRow {
            ip,
            port,
            agent,
            uploaded,
            downloaded,
            left,
            active,
            seeder,
            visible,
            connectable,
            created_at: r.u64()?,
            updated_at: r.u64()?,
        };
        insert_new(&mut batch.peers, key, row, "peer")?;
    }
    for _ in 0..history {
        let key = (r.u32()?, r.u32()?);
        let row = read_history(r)?;
        insert_new(&mut batch.history, key, row, "history")?;
    }
    for _ in 0..users {
        let id = r.u32()?;
        let row = UserRow {
            uploaded: r.u64()?,
            downloaded: r.u64()?,
        };
        insert_new(&mut batch.users, id, row, "user")?;
    }
    for _ in 0..torrents {
        let id = r.u32()?;
        let row = TorrentRow {
            seeders: r.i64()?,
            leechers: r.i64()?,
            times_completed: r.u64()?,
            balance: r.i64()?,
            updated_at: r.u64()?,
        };
        insert_new(&mut batch.torrents, id, row, "torrent")?;
    }
    for _ in 0..unregistered {
        let key = (r.u32()?, InfoHash(r.array()?));
        let row = UnregisteredRow {
            created_at: r.u64()?,
            updated_at: r.u64()?,
        };
        insert_new(&mut batch.unregistered, key, row, "unregistered info-hash")?;
    }
    Ok(batch)
}

fn read_history(r: &mut Reader<'_>) -> Result<HistoryRow, CodecError> {
    let agent = r.agent()?;
    let mut n = [0u64; 7];
    for value in &mut n {
        *value = r.u64()?;
    }
    let [uploaded, downloaded, actual_uploaded, actual_downloaded, client_uploaded, client_downloaded, seedtime] =
        n;
    let [seeder, active, immune, completed] = r.flags("history flags")?;
    let completed_at = r.u64()?;
    if !completed && completed_at != 0 {
        return Err(CodecError::Invalid("completed_at"));
    }
    Ok(HistoryRow {
        agent,
        uploaded,
        downloaded,
        actual_uploaded,
        actual_downloaded,
        client_uploaded,
        client_downloaded,
        seedtime,
        seeder,
        active,
        immune,
        completed_at: completed.then_some(completed_at),
        created_at: r.u64()?,
        updated_at: r.u64()?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::arb_batch;
    use proptest::prelude::*;

    fn encoded(pending: &[(Option<u64>, Batch)]) -> Vec<u8> {
        let refs: Vec<_> = pending.iter().map(|(s, b)| (*s, b)).collect();
        let mut out = Vec::new();
        encode_pending(&refs, &mut out);
        out
    }

    fn arb_pending() -> impl Strategy<Value = Vec<(Option<u64>, Batch)>> {
        proptest::collection::vec((any::<Option<u64>>(), arb_batch()), 0..4)
    }

    proptest! {
        #[test]
        fn round_trip(pending in arb_pending()) {
            let bytes = encoded(&pending);
            prop_assert_eq!(decode_pending(&bytes).unwrap(), pending);
        }

        #[test]
        fn any_cut_is_refused(pending in arb_pending(), cut in any::<prop::sample::Index>()) {
            let bytes = encoded(&pending);
            let at = cut.index(bytes.len());
            prop_assert!(decode_pending(&bytes[..at]).is_err());
        }

        #[test]
        fn corrupted_bytes_never_panic(
            pending in arb_pending(),
            flips in proptest::collection::vec((any::<prop::sample::Index>(), any::<u8>()), 1..8),
        ) {
            let mut bytes = encoded(&pending);
            for (at, value) in flips {
                let i = at.index(bytes.len());
                bytes[i] = value;
            }
            let _ = decode_pending(&bytes);
        }

        #[test]
        fn arbitrary_bytes_never_panic(tail in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = decode_pending(&tail);
            let mut bytes = MAGIC.to_vec();
            bytes.extend_from_slice(&VERSION.to_le_bytes());
            bytes.extend_from_slice(&tail);
            let _ = decode_pending(&bytes);
        }
    }

    /// A file with no unregistered info-hashes is version 1, as before
    /// them, so that a rollback still reads it; one with some is version 2.
    #[test]
    fn version_1_is_written_without_unregistered_rows_and_read() {
        let mut batch = Batch::default();
        batch.users.insert(
            1,
            UserRow {
                uploaded: 5,
                downloaded: 6,
            },
        );
        let old = encoded(&[(Some(3), batch.clone())]);
        assert_eq!(u16::from_le_bytes([old[8], old[9]]), VERSION_1);
        assert_eq!(
            decode_pending(&old).unwrap(),
            vec![(Some(3), batch.clone())]
        );
        batch.unregistered.insert(
            (1, InfoHash([9; 20])),
            UnregisteredRow {
                created_at: 10,
                updated_at: 20,
            },
        );
        let new = encoded(&[(None, Batch::default()), (Some(4), batch.clone())]);
        assert_eq!(u16::from_le_bytes([new[8], new[9]]), VERSION);
        assert_eq!(
            decode_pending(&new).unwrap(),
            vec![(None, Batch::default()), (Some(4), batch)]
        );
    }

    #[test]
    fn huge_counts_reserve_nothing_and_fail() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&0u64.to_le_bytes());
        for _ in 0..5 {
            bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        }
        assert_eq!(decode_pending(&bytes), Err(CodecError::Truncated));
    }

    #[test]
    fn headers_and_trailers_are_checked() {
        let good = encoded(&[(Some(7), Batch::default()), (None, Batch::default())]);
        assert_eq!(decode_pending(&good).unwrap().len(), 2);
        assert_eq!(decode_pending(b"nope"), Err(CodecError::BadMagic));
        let mut bad_version = good.clone();
        bad_version[8] = 3;
        assert_eq!(
            decode_pending(&bad_version),
            Err(CodecError::UnsupportedVersion(3))
        );
        let mut trailing = good.clone();
        trailing.push(0);
        assert_eq!(decode_pending(&trailing), Err(CodecError::TrailingBytes));
        let mut bad_flag = good;
        bad_flag[14] = 2;
        assert_eq!(
            decode_pending(&bad_flag),
            Err(CodecError::Invalid("sequence flag"))
        );
        assert_eq!(decode_pending(&encoded(&[])).unwrap(), vec![]);
    }
}
