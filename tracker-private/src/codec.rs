//! A binary form of the claims and rows not yet written, with their flush
//! sequence numbers: the state file written when the database is
//! unreachable at a stop, read at the next start, and handed to a
//! successor process.
//!
//! Layout: the magic `TPRVBTCH`, a little-endian u16 version, a u32 count
//! of entries; each entry is a u8 flag (1: numbered) and a u64 sequence
//! (0 when not numbered), then its counts and rows, all fields
//! little-endian and fixed width (an IP is a tag 4 or 6 and its octets; an
//! agent a length byte and at most 64 bytes).
//! - Version 4 (written): seven u32 counts (peer claims, history marks,
//!   unregistered info-hashes, then the settled rows: peers, history,
//!   users, torrents), then those rows in that order. A point's flags are
//!   seeder, active and stopped (neither: expired). A step ends with the
//!   time its user's seeding was counted until (u64). A claim ends with a
//!   flag byte and, when 1, its prior report (u64), then a flag byte and,
//!   when 1, its latest run (the step before it, its first step, and two
//!   credits). A history mark's flags end with `weak`.
//! - Version 3 (read): the same, but a claim also carries the credit of
//!   its steps after a stop nobody recorded (now counted like the rest),
//!   a point only seeder and active (a step's kind tells a stop), and a
//!   step kind 1 for `started` (now an announce like any other).
//! - Versions 1 and 2 (read): the rows of a version before claims, already
//!   settled: four counts (peers, history, users, torrents) and in version
//!   2 a fifth (unregistered info-hashes). They are written as that version
//!   would have written them, so an upgrade while the database is down
//!   loses nothing.
//!
//! Checksums are the file writer's business. Decoding takes any bytes: it
//! never panics, and it reserves room for no more rows than the remaining
//! input could hold.

use crate::batch::{
    Agent, Batch, Claim, Credit, HistoryMark, HistoryRow, PeerEntry, PeerKey, PeerRow, Point,
    PointState, Resumed, Rows, Step, StepKind, TorrentRow, UnregisteredRow, UserRow,
};
use crate::rules::Factors;
use ahash::AHashMap;
use std::fmt;
use std::hash::Hash;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use tracker_proto::{InfoHash, PeerId};

const MAGIC: &[u8; 8] = b"TPRVBTCH";
/// Settled rows of four tables.
const VERSION_1: u16 = 1;
/// Five: `unregistered_info_hashes` too.
const VERSION_2: u16 = 2;
/// Claims, as crediting was until `started` was an announce like any
/// other.
const VERSION_3: u16 = 3;
/// Claims.
const VERSION: u16 = 4;

/// The fewest bytes each thing can take, to bound what a count reserves.
const MIN_ENTRY: usize = 1 + 8 + 4 * 4;
const MIN_PEER: usize = 4 + 4 + 20 + 1 + 4 + 2 + 1 + 3 * 8 + 1 + 2 * 8;
const POINT_LEN: usize = 3 * 8 + 1;
const STEP_LEN: usize = POINT_LEN + 1 + 2 + 1 + 1 + 8;
const CREDIT_LEN: usize = 5 * 8 + 1;
const MIN_CLAIM: usize = MIN_PEER + 1 + 2 * STEP_LEN + CREDIT_LEN + 1 + 1 + 1;
const MIN_MARK: usize = 4 + 4 + 1 + 2 * 8 + 1 + 3 * 8;
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
    out.extend_from_slice(MAGIC);
    out.extend_from_slice(&VERSION.to_le_bytes());
    put_len(out, pending.len());
    for (sequence, batch) in pending {
        out.push(u8::from(sequence.is_some()));
        out.extend_from_slice(&sequence.unwrap_or(0).to_le_bytes());
        let settled = &batch.settled;
        for len in [
            batch.peers.len(),
            batch.history.len(),
            batch.unregistered.len(),
            settled.peers.len(),
            settled.history.len(),
            settled.users.len(),
            settled.torrents.len(),
        ] {
            put_len(out, len);
        }
        for (key, entry) in &batch.peers {
            put_peer(out, key, &entry.row);
            put_claim(out, &entry.claim);
        }
        for (&(user_id, torrent_id), mark) in &batch.history {
            out.extend_from_slice(&user_id.to_le_bytes());
            out.extend_from_slice(&torrent_id.to_le_bytes());
            put_mark(out, mark);
        }
        for ((user_id, info_hash), row) in &batch.unregistered {
            out.extend_from_slice(&user_id.to_le_bytes());
            out.extend_from_slice(&info_hash.0);
            out.extend_from_slice(&row.created_at.to_le_bytes());
            out.extend_from_slice(&row.updated_at.to_le_bytes());
        }
        put_rows(out, settled);
    }
}

fn put_rows(out: &mut Vec<u8>, rows: &Rows) {
    for (key, row) in &rows.peers {
        put_peer(out, key, row);
    }
    for (&(user_id, torrent_id), row) in &rows.history {
        out.extend_from_slice(&user_id.to_le_bytes());
        out.extend_from_slice(&torrent_id.to_le_bytes());
        put_history(out, row);
    }
    for (id, row) in &rows.users {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&row.uploaded.to_le_bytes());
        out.extend_from_slice(&row.downloaded.to_le_bytes());
    }
    for (id, row) in &rows.torrents {
        out.extend_from_slice(&id.to_le_bytes());
        out.extend_from_slice(&row.seeders.to_le_bytes());
        out.extend_from_slice(&row.leechers.to_le_bytes());
        out.extend_from_slice(&row.times_completed.to_le_bytes());
        out.extend_from_slice(&row.balance.to_le_bytes());
        out.extend_from_slice(&row.updated_at.to_le_bytes());
    }
}

fn put_point(out: &mut Vec<u8>, point: &Point) {
    out.extend_from_slice(&point.uploaded.to_le_bytes());
    out.extend_from_slice(&point.downloaded.to_le_bytes());
    out.extend_from_slice(&point.at_us.to_le_bytes());
    out.push(flags(&[
        point.seeder,
        point.state == PointState::Active,
        point.state == PointState::Stopped,
    ]));
}

fn put_step(out: &mut Vec<u8>, step: &Step) {
    put_point(out, &step.point);
    out.push(match step.kind {
        StepKind::Announce => 0,
        StepKind::Stopped => 2,
        StepKind::Expired => 3,
    });
    out.extend_from_slice(&step.factors.upload.to_le_bytes());
    out.push(step.factors.download);
    out.push(u8::from(step.flagged));
    out.extend_from_slice(&step.seeded_until_us.to_le_bytes());
}

fn put_claim(out: &mut Vec<u8>, claim: &Claim) {
    match &claim.base {
        Some(base) => {
            out.push(1);
            put_point(out, base);
        }
        None => out.push(0),
    }
    put_step(out, &claim.first);
    put_credit(out, &claim.rest);
    put_step(out, &claim.last);
    out.push(u8::from(claim.stops_only));
    match claim.prior {
        Some(prior) => {
            out.push(1);
            out.extend_from_slice(&prior.to_le_bytes());
        }
        None => out.push(0),
    }
    match &claim.resumed {
        Some(run) => {
            out.push(1);
            put_step(out, &run.after);
            put_step(out, &run.first);
            put_credit(out, &run.joined);
            put_credit(out, &run.rest);
        }
        None => out.push(0),
    }
}

fn put_credit(out: &mut Vec<u8>, credit: &Credit) {
    for n in [
        credit.uploaded,
        credit.downloaded,
        credit.actual_uploaded,
        credit.actual_downloaded,
        credit.seedtime,
    ] {
        out.extend_from_slice(&n.to_le_bytes());
    }
    out.push(u8::from(credit.completed));
}

fn put_mark(out: &mut Vec<u8>, mark: &HistoryMark) {
    put_agent(out, &mark.agent);
    out.extend_from_slice(&mark.client_uploaded.to_le_bytes());
    out.extend_from_slice(&mark.client_downloaded.to_le_bytes());
    out.push(flags(&[
        mark.seeder,
        mark.active,
        mark.immune,
        mark.completed_at.is_some(),
        mark.weak,
    ]));
    out.extend_from_slice(&mark.completed_at.unwrap_or(0).to_le_bytes());
    out.extend_from_slice(&mark.created_at.to_le_bytes());
    out.extend_from_slice(&mark.updated_at.to_le_bytes());
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
    if !matches!(version, VERSION_1 | VERSION_2 | VERSION_3 | VERSION) {
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
    if version < VERSION_3 {
        return read_settled_batch(r, version);
    }
    let (peers, peers_room) = r.count(MIN_CLAIM)?;
    let (history, history_room) = r.count(MIN_MARK)?;
    let (unregistered, unregistered_room) = r.count(UNREGISTERED_LEN)?;
    let settled_counts = [
        r.count(MIN_PEER)?,
        r.count(MIN_HISTORY)?,
        r.count(USER_LEN)?,
        r.count(TORRENT_LEN)?,
    ];
    let mut batch = Batch {
        peers: AHashMap::with_capacity(peers_room),
        history: AHashMap::with_capacity(history_room),
        unregistered: AHashMap::with_capacity(unregistered_room),
        settled: Rows::default(),
    };
    for _ in 0..peers {
        let (key, row) = read_peer(r)?;
        let claim = read_claim(r, version)?;
        insert_new(&mut batch.peers, key, PeerEntry { row, claim }, "peer")?;
    }
    for _ in 0..history {
        let key = (r.u32()?, r.u32()?);
        let mark = read_mark(r, version)?;
        insert_new(&mut batch.history, key, mark, "history")?;
    }
    read_unregistered(r, unregistered, &mut batch.unregistered)?;
    read_rows(r, settled_counts, &mut batch.settled)?;
    Ok(batch)
}

/// A batch of a version before claims: settled rows.
fn read_settled_batch(r: &mut Reader<'_>, version: u16) -> Result<Batch, CodecError> {
    let counts = [
        r.count(MIN_PEER)?,
        r.count(MIN_HISTORY)?,
        r.count(USER_LEN)?,
        r.count(TORRENT_LEN)?,
    ];
    let (unregistered, unregistered_room) = if version == VERSION_1 {
        (0, 0)
    } else {
        r.count(UNREGISTERED_LEN)?
    };
    let mut batch = Batch {
        unregistered: AHashMap::with_capacity(unregistered_room),
        ..Batch::default()
    };
    read_rows(r, counts, &mut batch.settled)?;
    read_unregistered(r, unregistered, &mut batch.unregistered)?;
    Ok(batch)
}

fn read_rows(
    r: &mut Reader<'_>,
    counts: [(usize, usize); 4],
    rows: &mut Rows,
) -> Result<(), CodecError> {
    let [(peers, peers_room), (history, history_room), (users, users_room), (torrents, torrents_room)] =
        counts;
    rows.peers.reserve(peers_room);
    rows.history.reserve(history_room);
    rows.users.reserve(users_room);
    rows.torrents.reserve(torrents_room);
    for _ in 0..peers {
        let (key, row) = read_peer(r)?;
        insert_new(&mut rows.peers, key, row, "peer")?;
    }
    for _ in 0..history {
        let key = (r.u32()?, r.u32()?);
        let row = read_history(r)?;
        insert_new(&mut rows.history, key, row, "history")?;
    }
    for _ in 0..users {
        let id = r.u32()?;
        let row = UserRow {
            uploaded: r.u64()?,
            downloaded: r.u64()?,
        };
        insert_new(&mut rows.users, id, row, "user")?;
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
        insert_new(&mut rows.torrents, id, row, "torrent")?;
    }
    Ok(())
}

fn read_unregistered(
    r: &mut Reader<'_>,
    count: usize,
    into: &mut AHashMap<(u32, InfoHash), UnregisteredRow>,
) -> Result<(), CodecError> {
    for _ in 0..count {
        let key = (r.u32()?, InfoHash(r.array()?));
        let row = UnregisteredRow {
            created_at: r.u64()?,
            updated_at: r.u64()?,
        };
        insert_new(into, key, row, "unregistered info-hash")?;
    }
    Ok(())
}

fn read_peer(r: &mut Reader<'_>) -> Result<(PeerKey, PeerRow), CodecError> {
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
    Ok((key, row))
}

fn read_point(r: &mut Reader<'_>, version: u16) -> Result<Point, CodecError> {
    let (uploaded, downloaded, at_us) = (r.u64()?, r.u64()?, r.u64()?);
    let state = if version == VERSION_3 {
        // A stop's point is told by its step's kind (see `read_step`).
        match r.flags("point flags")? {
            [seeder, true] => (seeder, PointState::Active),
            [seeder, false] => (seeder, PointState::Expired),
        }
    } else {
        match r.flags("point flags")? {
            [seeder, true, false] => (seeder, PointState::Active),
            [seeder, false, false] => (seeder, PointState::Expired),
            [seeder, false, true] => (seeder, PointState::Stopped),
            [_, true, true] => return Err(CodecError::Invalid("point flags")),
        }
    };
    Ok(Point {
        uploaded,
        downloaded,
        at_us,
        seeder: state.0,
        state: state.1,
    })
}

fn read_step(r: &mut Reader<'_>, version: u16) -> Result<Step, CodecError> {
    let mut point = read_point(r, version)?;
    let kind = match (r.u8()?, version) {
        (0, _) => StepKind::Announce,
        // Version 3's `started`.
        (1, VERSION_3) => StepKind::Announce,
        (2, _) => StepKind::Stopped,
        (3, _) => StepKind::Expired,
        _ => return Err(CodecError::Invalid("step kind")),
    };
    if version == VERSION_3 && kind == StepKind::Stopped {
        point.state = PointState::Stopped;
    }
    let factors = Factors {
        upload: r.u16()?,
        download: r.u8()?,
    };
    let [flagged] = r.flags("step flags")?;
    let seeded_until_us = if version == VERSION_3 { 0 } else { r.u64()? };
    Ok(Step {
        point,
        kind,
        factors,
        flagged,
        seeded_until_us,
    })
}

fn read_claim(r: &mut Reader<'_>, version: u16) -> Result<Claim, CodecError> {
    let base = match r.u8()? {
        0 => None,
        1 => Some(read_point(r, version)?),
        _ => return Err(CodecError::Invalid("claim base flag")),
    };
    let first = read_step(r, version)?;
    let mut rest = read_credit(r)?;
    if version == VERSION_3 {
        // What followed a stop nobody recorded: credited like the rest now.
        let lead = rest;
        rest = read_credit(r)?;
        rest.add(&lead);
    }
    let last = read_step(r, version)?;
    let stops_only = r.flags::<1>("claim flags")?[0];
    // Version 3 claims had no prior report and were one run.
    let prior = match if version == VERSION_3 { 0 } else { r.u8()? } {
        0 => None,
        1 => Some(r.u64()?),
        _ => return Err(CodecError::Invalid("claim prior flag")),
    };
    let flag = if version == VERSION_3 { 0 } else { r.u8()? };
    let resumed = match flag {
        0 => None,
        1 => Some(Resumed {
            after: read_step(r, version)?,
            first: read_step(r, version)?,
            joined: read_credit(r)?,
            rest: read_credit(r)?,
        }),
        _ => return Err(CodecError::Invalid("claim run flag")),
    };
    Ok(Claim {
        base,
        first,
        rest,
        resumed,
        last,
        stops_only,
        prior,
    })
}

fn read_credit(r: &mut Reader<'_>) -> Result<Credit, CodecError> {
    let mut n = [0u64; 5];
    for value in &mut n {
        *value = r.u64()?;
    }
    let [uploaded, downloaded, actual_uploaded, actual_downloaded, seedtime] = n;
    let [completed] = r.flags("credit flags")?;
    Ok(Credit {
        uploaded,
        downloaded,
        actual_uploaded,
        actual_downloaded,
        seedtime,
        completed,
    })
}

fn read_mark(r: &mut Reader<'_>, version: u16) -> Result<HistoryMark, CodecError> {
    let agent = r.agent()?;
    let (client_uploaded, client_downloaded) = (r.u64()?, r.u64()?);
    let [seeder, active, immune, completed, weak] = if version == VERSION_3 {
        let [seeder, active, immune, completed] = r.flags("history flags")?;
        [seeder, active, immune, completed, false]
    } else {
        r.flags("history flags")?
    };
    let completed_at = r.u64()?;
    if !completed && completed_at != 0 {
        return Err(CodecError::Invalid("completed_at"));
    }
    Ok(HistoryMark {
        agent,
        client_uploaded,
        client_downloaded,
        seeder,
        active,
        immune,
        completed_at: completed.then_some(completed_at),
        created_at: r.u64()?,
        updated_at: r.u64()?,
        weak,
    })
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

    /// The files of a version before claims (1 and 2) are read as rows
    /// already settled, so that an upgrade while the database is down
    /// writes them as that version would have.
    #[test]
    fn versions_before_claims_are_read_as_settled_rows() {
        // Version 2, written by hand as the version before claims wrote it:
        // one user row, one unregistered info-hash, in a numbered batch.
        let mut old = MAGIC.to_vec();
        old.extend_from_slice(&VERSION_2.to_le_bytes());
        old.extend_from_slice(&1u32.to_le_bytes());
        old.push(1);
        old.extend_from_slice(&3u64.to_le_bytes());
        for count in [0u32, 0, 1, 0, 1] {
            old.extend_from_slice(&count.to_le_bytes());
        }
        old.extend_from_slice(&1u32.to_le_bytes());
        old.extend_from_slice(&5u64.to_le_bytes());
        old.extend_from_slice(&6u64.to_le_bytes());
        old.extend_from_slice(&1u32.to_le_bytes());
        old.extend_from_slice(&[9; 20]);
        old.extend_from_slice(&10u64.to_le_bytes());
        old.extend_from_slice(&20u64.to_le_bytes());
        let mut batch = Batch::default();
        batch.settled.users.insert(
            1,
            UserRow {
                uploaded: 5,
                downloaded: 6,
            },
        );
        batch.unregistered.insert(
            (1, InfoHash([9; 20])),
            UnregisteredRow {
                created_at: 10,
                updated_at: 20,
            },
        );
        assert_eq!(
            decode_pending(&old).unwrap(),
            vec![(Some(3), batch.clone())]
        );
        // Version 1: four counts, no unregistered rows.
        let mut v1 = MAGIC.to_vec();
        v1.extend_from_slice(&VERSION_1.to_le_bytes());
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.push(0);
        v1.extend_from_slice(&0u64.to_le_bytes());
        for count in [0u32, 0, 1, 0] {
            v1.extend_from_slice(&count.to_le_bytes());
        }
        v1.extend_from_slice(&1u32.to_le_bytes());
        v1.extend_from_slice(&5u64.to_le_bytes());
        v1.extend_from_slice(&6u64.to_le_bytes());
        batch.unregistered.clear();
        assert_eq!(decode_pending(&v1).unwrap(), vec![(None, batch.clone())]);
        // Written again, they are the current version.
        let new = encoded(&[(Some(4), batch.clone())]);
        assert_eq!(u16::from_le_bytes([new[8], new[9]]), VERSION);
        assert_eq!(decode_pending(&new).unwrap(), vec![(Some(4), batch)]);
    }

    /// A version 3 file (claims, as crediting was while `started` was
    /// special): its `started` steps are announces, a stop's point is
    /// stopped, and what followed a stop nobody recorded is credited with
    /// the rest.
    #[test]
    fn version_3_claims_are_read_as_this_version_credits() {
        let point = |out: &mut Vec<u8>, up: u64, at: u64, active: bool| {
            out.extend_from_slice(&up.to_le_bytes());
            out.extend_from_slice(&0u64.to_le_bytes());
            out.extend_from_slice(&at.to_le_bytes());
            out.push(u8::from(active) << 1);
        };
        let step = |out: &mut Vec<u8>, up: u64, at: u64, kind: u8| {
            point(out, up, at, kind != 2);
            out.push(kind);
            out.extend_from_slice(&100u16.to_le_bytes());
            out.push(100);
            out.push(0);
        };
        let credit = |out: &mut Vec<u8>, up: u64| {
            for n in [up, 0, up, 0, 0] {
                out.extend_from_slice(&n.to_le_bytes());
            }
            out.push(0);
        };
        let key = PeerKey {
            user_id: 1,
            torrent_id: 2,
            peer_id: PeerId([3; 20]),
        };
        let row = crate::testing::any_peer_row();
        let mut v3 = MAGIC.to_vec();
        v3.extend_from_slice(&VERSION_3.to_le_bytes());
        v3.extend_from_slice(&1u32.to_le_bytes());
        v3.push(0);
        v3.extend_from_slice(&0u64.to_le_bytes());
        for count in [1u32, 0, 0, 0, 0, 0, 0] {
            v3.extend_from_slice(&count.to_le_bytes());
        }
        put_peer(&mut v3, &key, &row);
        v3.push(0);
        step(&mut v3, 0, 10, 2);
        credit(&mut v3, 7);
        credit(&mut v3, 5);
        step(&mut v3, 40, 30, 1);
        v3.push(0);
        let decoded = decode_pending(&v3).unwrap();
        let claim = decoded[0].1.peers[&key].claim;
        assert_eq!(claim.first.kind, StepKind::Stopped);
        assert_eq!(claim.first.point.state, PointState::Stopped);
        assert_eq!(claim.last.kind, StepKind::Announce);
        assert_eq!(claim.last.point.state, PointState::Active);
        assert_eq!(claim.rest.actual_uploaded, 12);
        assert!(!claim.stops_only);
    }

    #[test]
    fn huge_counts_reserve_nothing_and_fail() {
        let mut bytes = MAGIC.to_vec();
        bytes.extend_from_slice(&VERSION.to_le_bytes());
        bytes.extend_from_slice(&u32::MAX.to_le_bytes());
        bytes.push(0);
        bytes.extend_from_slice(&0u64.to_le_bytes());
        for _ in 0..7 {
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
        bad_version[8] = 5;
        assert_eq!(
            decode_pending(&bad_version),
            Err(CodecError::UnsupportedVersion(5))
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
