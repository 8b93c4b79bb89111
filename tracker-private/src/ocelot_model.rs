//! An executable model of Ocelot's accounting, written from its source at
//! OPSnet/Ocelot d4aaff7 (version 2.1.3: `src/worker.cpp`, `src/db.cpp`,
//! `src/ocelot.h`, `src/user.h`, `src/misc_functions.cpp`), for the
//! property tests that will hold a Gazelle adapter against it as
//! `model_tests.rs` holds ours against [`crate::unit3d_model`]: never less
//! download charged, never more upload credited than Ocelot would.
//!
//! One Ocelot process: its users (by passkey), torrents (by info-hash) with
//! their seeder and leecher maps keyed as Ocelot keys them, the client
//! whitelist and the deletion reasons; each announce handled as
//! `worker::announce` handles it, returning its answer or refusal and the
//! records it adds to the database's buffers; scrape, the `update` actions
//! that change state, the lists' (re)load, the reaper, and a flush that
//! applies the buffers with the SQL Ocelot sends. Pure and deterministic:
//! the answer's random `interval` is given as its bounds, and every time is
//! the caller's clock in whole seconds (Ocelot reads `time(NULL)`).
//!
//! Citations are `worker.cpp:LINE` unless another file is named.
//!
//! Left out, as they change no byte credited: the request line and headers
//! (the caller hands in the parameters as Ocelot has read them; the helpers
//! [`hex_decode`], [`strtoint32`], [`strtoint64`] and [`announce_ip`] read
//! them as it does), the tracker's status (PAUSED, CLOSING), the report
//! actions and `info_torrent`, the users' seeding and leeching counters
//! (only the user report shows them), the statistics, SIGHUP (which
//! reverts the interval and jitter to the configuration file's), a load
//! that fails, and the flush's failures, retries and dropped peer
//! statements (`db.cpp:411-437`).

use crate::site::{TorrentId, UserId};
use std::collections::{BTreeMap, BTreeSet};
use std::ops::RangeInclusive;
use tracker_proto::AnnounceEvent;

/// Seconds, as `time(NULL)` gives them.
pub type Time = i64;

/// The settings `worker::load_config` reads (`:36-45`), with
/// `config.cpp:72-81`'s defaults.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OcelotConfig {
    /// The answer's `min interval`; `interval` adds the jitter.
    pub announce_interval: u32,
    /// `interval` is `announce_interval + U[0, announce_jitter]` (`:44,785`).
    pub announce_jitter: u32,
    /// The default and the cap of `numwant` (`:598-604`).
    pub numwant_limit: u32,
    /// A peer silent more than this is reaped (`:1111,1124`).
    pub peers_timeout: u32,
    /// A deletion reason older than this is dropped by the reaper (`:1153`).
    pub del_reason_lifetime: u32,
}

impl Default for OcelotConfig {
    fn default() -> OcelotConfig {
        OcelotConfig {
            announce_interval: 1800,
            announce_jitter: 240,
            numwant_limit: 50,
            peers_timeout: 7200,
            del_reason_lifetime: 86400,
        }
    }
}

/// A torrent's freeleech type (`ocelot.h:46`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum FreeType {
    #[default]
    Normal,
    /// Download not charged, upload credited.
    Free,
    /// Neither charged nor credited.
    Neutral,
}

impl FreeType {
    /// The `freetorrent` parameter of an update action (`:871-877,883-889,
    /// 903-909`): `0` normal, `1` free, anything else (missing included)
    /// neutral.
    pub fn from_update(param: Option<&[u8]>) -> FreeType {
        match param {
            Some(b"0") => FreeType::Normal,
            Some(b"1") => FreeType::Free,
            _ => FreeType::Neutral,
        }
    }

    /// The `torrents.freetorrent` column as a load reads it
    /// (`db.cpp:125-131`): `1` free, `2` neutral, anything else normal (the
    /// other way round from [`FreeType::from_update`]).
    pub fn from_db(value: &[u8]) -> FreeType {
        match value {
            b"1" => FreeType::Free,
            b"2" => FreeType::Neutral,
            _ => FreeType::Normal,
        }
    }
}

/// The `event` parameter: only the exact words `started`, `completed` and
/// `stopped` matter (`:392-400,451`); anything else, or none, is
/// [`AnnounceEvent::None`].
pub fn event_from_param(param: Option<&[u8]>) -> AnnounceEvent {
    match param {
        Some(b"started") => AnnounceEvent::Started,
        Some(b"completed") => AnnounceEvent::Completed,
        Some(b"stopped") => AnnounceEvent::Stopped,
        _ => AnnounceEvent::None,
    }
}

/// An announce's parameters as Ocelot has read them (`:310-604`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OcelotQuery {
    /// `hex_decode` of `info_hash` (any length: it is only looked up).
    pub info_hash: Vec<u8>,
    /// `hex_decode` of `peer_id`; `None` when the query has none.
    pub peer_id: Option<Vec<u8>>,
    /// `compact` is exactly `1`.
    pub compact: bool,
    /// `strtoint64` of each (0 when missing or garbage); the model clamps
    /// negatives to 0 as Ocelot does (`:368-371`).
    pub uploaded: i64,
    pub downloaded: i64,
    pub left: i64,
    pub corrupt: i64,
    pub event: AnnounceEvent,
    /// `strtoint32` of `port`; the model keeps its low 16 bits (`:543`).
    pub port: i32,
    /// The address string as [`announce_ip`] chooses it (`:526-541`).
    pub ip: Vec<u8>,
    /// `strtoint32` of `numwant`; `None` when the query has none.
    pub numwant: Option<i32>,
    /// The `user-agent` header, empty when missing.
    pub user_agent: Vec<u8>,
}

impl OcelotQuery {
    /// The query a client sends for announce `a` (compact, from
    /// 192.0.2.1, as Transmission), for holding the tracker's rules to the
    /// model's.
    pub fn of(a: &crate::announce::PrivateAnnounce) -> OcelotQuery {
        OcelotQuery {
            info_hash: a.info_hash.0.to_vec(),
            peer_id: Some(a.peer_id.0.to_vec()),
            compact: true,
            uploaded: a.uploaded as i64,
            downloaded: a.downloaded as i64,
            left: a.left as i64,
            corrupt: 0,
            event: a.event,
            port: i32::from(a.port),
            ip: b"192.0.2.1".to_vec(),
            numwant: Some(50),
            user_agent: b"Transmission/4.0.5".to_vec(),
        }
    }
}

/// Every refusal of an announce or scrape past the request line, in
/// Ocelot's order of checks. All but [`OcelotRefusal::LeechingForbidden`]
/// change nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OcelotRefusal {
    /// `:296-300`.
    PasskeyNotFound,
    /// Unknown info-hash, with no deletion reason or reason -1 (`:317-324`).
    UnregisteredTorrent,
    /// Deleted with this reason code, not yet reaped (`:316-318`).
    DeletedTorrent(i32),
    /// `:336-339`.
    NotCompact,
    /// `:341-345`.
    NoPeerId,
    /// `:346-350`.
    InvalidPeerId,
    /// `:352-365`.
    NotWhitelisted,
    /// A leecher whose user may not leech, after the whole announce has been
    /// accounted (`:773-775`).
    LeechingForbidden,
}

impl OcelotRefusal {
    /// The failure reason, word for word.
    pub fn text(self) -> String {
        match self {
            OcelotRefusal::PasskeyNotFound => "Passkey not found".into(),
            OcelotRefusal::UnregisteredTorrent => "Unregistered torrent".into(),
            OcelotRefusal::DeletedTorrent(code) => {
                format!("Unregistered torrent: {}", deletion_reason(code))
            }
            OcelotRefusal::NotCompact => "Your client does not support compact announces".into(),
            OcelotRefusal::NoPeerId => "No peer ID".into(),
            OcelotRefusal::InvalidPeerId => "Invalid peer ID".into(),
            OcelotRefusal::NotWhitelisted => "Your client is not on the whitelist".into(),
            OcelotRefusal::LeechingForbidden => "Access denied, leeching forbidden".into(),
        }
    }
}

/// `get_del_reason` (`:1169-1244`, codes at `ocelot.h:60-84`): "" for an
/// unknown code.
pub fn deletion_reason(code: i32) -> &'static str {
    // The words are the tracker's own table, which the recorded transcript
    // (gazelle::transcript_tests) holds to the real Ocelot's.
    crate::gazelle::request::deletion_reason(code)
}

/// The warning of an answer to a peer whose address is not dotted decimal
/// (`:796-798`).
pub const IP_WARNING: &str = "Illegal character found in IP address. IPv6 is not supported";

/// A peer handed out, in the answer's order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcelotListed {
    /// Its user object's id.
    pub user_id: UserId,
    pub peer_id: Vec<u8>,
    /// The six bytes the answer carries (`ip_port`).
    pub compact: Vec<u8>,
}

/// A successful announce's answer (`:777-799`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcelotAnswer {
    /// The torrent's map sizes after the announce (a stopped peer already
    /// removed), invisible peers and double entries included.
    pub complete: usize,
    pub incomplete: usize,
    /// The completions loaded (`Snatched`) plus those since.
    pub downloaded: u32,
    pub min_interval: u32,
    /// `interval` is drawn uniformly from these (`:785`). Ocelot prints it
    /// through an `int`, which only a value past `i32::MAX` would show.
    pub interval: RangeInclusive<u64>,
    pub peers: Vec<OcelotListed>,
    pub warning: Option<&'static str>,
}

/// A `users_leech_stats` record: added to `Uploaded`, `Downloaded`
/// (`:516-521`, `db.cpp:325-326`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserDelta {
    pub user_id: UserId,
    pub uploaded: i64,
    pub downloaded: i64,
}

/// A `torrents_leech_stats` record (`:764-771,1135-1141`): `Seeders`,
/// `Leechers`, `Balance` assigned, `Snatched` added to (`db.cpp:351-354`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TorrentStats {
    pub torrent_id: TorrentId,
    pub seeders: usize,
    pub leechers: usize,
    /// 1 on a completion, else 0.
    pub snatched: u32,
    pub balance: i64,
}

/// A full `xbt_files_users` record, for a changed peer (`:581-590`,
/// `db.cpp:271-279,420-426`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HeavyPeer {
    pub user_id: UserId,
    pub torrent_id: TorrentId,
    /// False for a stop.
    pub active: bool,
    /// The client's totals, clamped at 0, not deltas.
    pub uploaded: i64,
    pub downloaded: i64,
    /// Raw bytes per second since the peer's last announce; 0 unless bytes
    /// moved.
    pub upspeed: i64,
    pub downspeed: i64,
    pub remaining: i64,
    pub corrupt: i64,
    /// `now - first_announced`.
    pub timespent: i64,
    pub announced: u32,
    /// Empty for a protected user; never updated on a duplicate key.
    pub ip: Vec<u8>,
    pub peer_id: Vec<u8>,
    /// Never updated on a duplicate key.
    pub useragent: Vec<u8>,
    pub mtime: Time,
}

/// A light `xbt_files_users` record, for a peer that did not change
/// (`:591-595`, `db.cpp:280-288,438-441`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LightPeer {
    pub user_id: UserId,
    pub torrent_id: TorrentId,
    pub timespent: i64,
    pub announced: u32,
    pub peer_id: Vec<u8>,
    pub mtime: Time,
}

/// An `xbt_snatched` row (`:618-627`, `db.cpp:290-297,381`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snatch {
    pub user_id: UserId,
    pub torrent_id: TorrentId,
    pub tstamp: Time,
    /// Empty for a protected user.
    pub ip: Vec<u8>,
}

/// A `users_freeleeches` record: the raw download of a token holder, added
/// to `Downloaded` (`:506-512`, `db.cpp:468-469`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FreeleechDelta {
    pub user_id: UserId,
    pub torrent_id: TorrentId,
    pub downloaded: i64,
}

/// What an announce or the reaper adds to the buffers, each list in the
/// order produced.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OcelotRecords {
    pub users: Vec<UserDelta>,
    pub torrents: Vec<TorrentStats>,
    pub heavy_peers: Vec<HeavyPeer>,
    pub light_peers: Vec<LightPeer>,
    pub snatches: Vec<Snatch>,
    pub freeleeches: Vec<FreeleechDelta>,
    /// `(user, torrent)`: the token expiries sent to Gazelle's
    /// `tools.php?type=expiretoken` (`:638-641`, `site_comm.cpp:42-57`).
    pub expired_tokens: Vec<(UserId, TorrentId)>,
}

impl OcelotRecords {
    pub fn is_empty(&self) -> bool {
        *self == OcelotRecords::default()
    }

    fn append(&mut self, other: &OcelotRecords) {
        self.users.extend_from_slice(&other.users);
        self.torrents.extend_from_slice(&other.torrents);
        self.heavy_peers.extend_from_slice(&other.heavy_peers);
        self.light_peers.extend_from_slice(&other.light_peers);
        self.snatches.extend_from_slice(&other.snatches);
        self.freeleeches.extend_from_slice(&other.freeleeches);
        self.expired_tokens.extend_from_slice(&other.expired_tokens);
    }
}

/// One announce's outcome: its reply and the records it produced (none
/// for a refusal other than [`OcelotRefusal::LeechingForbidden`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcelotAnnounced {
    pub reply: Result<OcelotAnswer, OcelotRefusal>,
    pub records: OcelotRecords,
}

/// One entry of a scrape's answer (`:811-839`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcelotScraped {
    pub info_hash: Vec<u8>,
    pub complete: usize,
    pub incomplete: usize,
    pub downloaded: u32,
}

/// A user object (`user.h`). Peers point at the object, not the passkey:
/// a removed user's object stays `deleted` for its peers even if the
/// passkey is added again (a new object).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct OcelotUser {
    pub id: UserId,
    pub can_leech: bool,
    /// `Visible = '0'` (or `IP = '127.0.0.1'` at a load): its address is
    /// left out of the records, not out of the peer lists.
    pub protected: bool,
    pub deleted: bool,
}

/// A peer in a torrent's map (`ocelot.h:28-42`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OcelotPeer {
    /// The base of the next announce's deltas.
    pub uploaded: i64,
    pub downloaded: i64,
    pub corrupt: i64,
    pub left: i64,
    pub last_announced: Time,
    pub first_announced: Time,
    pub announces: u32,
    pub port: u16,
    pub visible: bool,
    pub invalid_ip: bool,
    /// Index of its user object ([`OcelotModel::user_object`]).
    pub user: usize,
    /// Empty when the address is invalid.
    pub ip_port: Vec<u8>,
    pub ip: Vec<u8>,
    /// Not a field of Ocelot's peer: the last 20 bytes of its key.
    pub peer_id: Vec<u8>,
}

impl OcelotPeer {
    /// A peer just inserted (`:1081-1085`); every field is set before it
    /// is read.
    fn new(user: usize, peer_id: &[u8]) -> OcelotPeer {
        OcelotPeer {
            uploaded: 0,
            downloaded: 0,
            corrupt: 0,
            left: 0,
            last_announced: 0,
            first_announced: 0,
            announces: 0,
            port: 0,
            visible: false,
            invalid_ip: false,
            user,
            ip_port: Vec::new(),
            ip: Vec::new(),
            peer_id: peer_id.to_vec(),
        }
    }
}

/// A torrent (`ocelot.h:48-58`). Its maps are ordered as Ocelot's
/// `std::map<std::string, peer>`: by the bytes of [`peer_key`].
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OcelotTorrent {
    pub id: TorrentId,
    pub completed: u32,
    /// Upload minus download minus corrupt, raw, since this process loaded
    /// or added the torrent.
    pub balance: i64,
    pub free: FreeType,
    /// When its last announce record was written: 0 at first (Ocelot
    /// leaves a loaded torrent's uninitialised, `db.cpp:113`).
    pub last_flushed: Time,
    pub seeders: BTreeMap<Vec<u8>, OcelotPeer>,
    pub leechers: BTreeMap<Vec<u8>, OcelotPeer>,
    /// The key of the seeder last handed out; empty at first.
    pub last_selected_seeder: Vec<u8>,
    pub tokened_users: BTreeSet<UserId>,
}

/// A `users_main` row as a load selects it (`db.cpp:158`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UserRow {
    pub id: UserId,
    pub can_leech: bool,
    pub passkey: Vec<u8>,
    pub protected: bool,
}

/// A `torrents` row joined to its `torrents_leech_stats` (`db.cpp:90`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TorrentRow {
    pub id: TorrentId,
    pub info_hash: Vec<u8>,
    /// The `freetorrent` enum's text.
    pub freetorrent: Vec<u8>,
    pub snatched: u32,
}

/// What a load reads from the database (`db.cpp:89-247`).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OcelotRows {
    pub users: Vec<UserRow>,
    pub torrents: Vec<TorrentRow>,
    /// Unexpired `users_freeleeches` as `(UserID, info_hash)`.
    pub tokens: Vec<(UserId, Vec<u8>)>,
    /// `xbt_client_whitelist.peer_id`.
    pub whitelist: Vec<Vec<u8>>,
}

/// An `xbt_files_users` row, keyed by `(uid, fid, peer_id)` (Gazelle's
/// primary key); `completed` and `connectable` are never written.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XfuRow {
    pub active: bool,
    pub uploaded: i64,
    pub downloaded: i64,
    pub upspeed: i64,
    pub downspeed: i64,
    pub remaining: i64,
    pub corrupt: i64,
    pub timespent: i64,
    pub announced: u32,
    pub ip: Vec<u8>,
    pub useragent: Vec<u8>,
    pub mtime: Time,
}

impl Default for XfuRow {
    /// The columns' defaults, as a light record inserting a row leaves them.
    fn default() -> XfuRow {
        XfuRow {
            active: true,
            uploaded: 0,
            downloaded: 0,
            upspeed: 0,
            downspeed: 0,
            remaining: 0,
            corrupt: 0,
            timespent: 0,
            announced: 0,
            ip: Vec::new(),
            useragent: Vec::new(),
            mtime: 0,
        }
    }
}

/// A `torrents_leech_stats` row.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TlsRow {
    pub seeders: usize,
    pub leechers: usize,
    pub snatched: u64,
    pub balance: i64,
}

/// The tables as the model's flushes leave them, from empty: what this
/// process added (or, for assigned columns, last wrote).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct OcelotDb {
    /// `(Uploaded, Downloaded)` added.
    pub users_leech_stats: BTreeMap<UserId, (i64, i64)>,
    pub torrents_leech_stats: BTreeMap<TorrentId, TlsRow>,
    pub xbt_files_users: BTreeMap<(UserId, TorrentId, Vec<u8>), XfuRow>,
    pub xbt_snatched: Vec<Snatch>,
    /// `Downloaded` added.
    pub users_freeleeches: BTreeMap<(UserId, TorrentId), i64>,
    /// The expiries Gazelle was called with, in order.
    pub expired_tokens: Vec<(UserId, TorrentId)>,
}

/// One Ocelot process.
#[derive(Clone, Debug, Default)]
pub struct OcelotModel {
    pub config: OcelotConfig,
    /// Every user object ever made; `passkeys` points at some of them.
    users: Vec<OcelotUser>,
    passkeys: BTreeMap<Vec<u8>, usize>,
    torrents: BTreeMap<Vec<u8>, OcelotTorrent>,
    whitelist: Vec<Vec<u8>>,
    /// By info-hash: (reason code, when deleted).
    del_reasons: BTreeMap<Vec<u8>, (i32, Time)>,
    /// The buffers the next flush writes.
    pending: OcelotRecords,
    pub db: OcelotDb,
}

/// The key of a peer in its torrent's maps (`:385-390`): the peer id's
/// byte at `12 + (torrent id & 7)`, the user id in decimal, the peer id.
/// `peer_id` must be 20 bytes.
pub fn peer_key(torrent_id: TorrentId, user_id: UserId, peer_id: &[u8]) -> Vec<u8> {
    let pick = 12 + (torrent_id & 7) as usize;
    let mut key: Vec<u8> = peer_id.get(pick).copied().into_iter().collect();
    key.extend_from_slice(user_id.to_string().as_bytes());
    key.extend_from_slice(peer_id);
    key
}

/// The compact address built from the address string and port
/// (`:545-573`): dotted decimal, each octet's digits accumulated into a
/// byte that wraps silently, empty octets 0; anything but digits and dots,
/// or other than four octets, is invalid (empty, `true`).
pub fn compact_address(ip: &[u8], port: u16) -> (Vec<u8>, bool) {
    let mut out = Vec::with_capacity(6);
    let mut octet: u8 = 0;
    let mut invalid = false;
    for &c in ip {
        if c == b'.' {
            out.push(octet);
            octet = 0;
        } else if c.is_ascii_digit() {
            octet = octet.wrapping_mul(10).wrapping_add(c - b'0');
        } else {
            invalid = true;
            break;
        }
    }
    if !invalid {
        out.push(octet);
        out.extend_from_slice(&port.to_be_bytes());
    }
    if out.len() != 6 {
        out.clear();
        invalid = true;
    }
    (out, invalid)
}

/// The peer's address string (`:526-541`): the `ip` parameter, else
/// `ipv4`, else `X-Forwarded-For` up to its first comma (untrimmed), else
/// the connection's address. Parameters are taken verbatim, even empty.
pub fn announce_ip(
    ip: Option<&[u8]>,
    ipv4: Option<&[u8]>,
    x_forwarded_for: Option<&[u8]>,
    socket: &[u8],
) -> Vec<u8> {
    if let Some(v) = ip.or(ipv4) {
        return v.to_vec();
    }
    match x_forwarded_for {
        Some(h) => h.split(|&c| c == b',').next().unwrap_or(h).to_vec(),
        None => socket.to_vec(),
    }
}

/// `hex_decode` (`misc_functions.cpp:32-62`): `%XX` decoded (either case)
/// unless the `%` is in the last two bytes; a bad digit leaves `'0'` (for
/// the first) or adds nothing (for the second); `+` is kept.
pub fn hex_decode(input: &[u8]) -> Vec<u8> {
    fn digit(c: u8) -> Option<u8> {
        match c {
            b'a'..=b'f' => Some(c - 87),
            b'A'..=b'F' => Some(c - 55),
            b'0'..=b'9' => Some(c - 48),
            _ => None,
        }
    }
    let mut out = Vec::with_capacity(20);
    let mut i = 0;
    while let Some(&c) = input.get(i) {
        if c == b'%' && i + 2 < input.len() {
            let high = input.get(i + 1).copied().and_then(digit);
            let low = input.get(i + 2).copied().and_then(digit);
            let x = high.map_or(b'0', |h| h << 4);
            out.push(x.wrapping_add(low.unwrap_or(0)));
            i += 3;
        } else {
            out.push(c);
            i += 1;
        }
    }
    out
}

/// `istringstream >> int64_t` (`misc_functions.cpp:16-21`): leading white
/// space skipped, an optional sign, decimal digits up to the first other
/// byte; no digit gives 0, an overflow the nearest bound.
pub fn strtoint64(input: &[u8]) -> i64 {
    let rest = match input
        .iter()
        .position(|c| !c.is_ascii_whitespace() && *c != 0x0b)
    {
        Some(start) => input.get(start..).unwrap_or_default(),
        None => return 0,
    };
    let (negative, digits) = match rest.split_first() {
        Some((b'-', tail)) => (true, tail),
        Some((b'+', tail)) => (false, tail),
        _ => (false, rest),
    };
    let mut value: i128 = 0;
    let mut any = false;
    for &c in digits.iter().take_while(|c| c.is_ascii_digit()) {
        any = true;
        value = (value * 10 + i128::from(c - b'0')).min(i128::from(i64::MAX) + 1);
    }
    if !any {
        return 0;
    }
    let value = if negative { -value } else { value };
    i64::try_from(value.clamp(i128::from(i64::MIN), i128::from(i64::MAX))).unwrap_or(0)
}

/// `istringstream >> int32_t` (`misc_functions.cpp:9-14`), as
/// [`strtoint64`] with `i32`'s bounds.
pub fn strtoint32(input: &[u8]) -> i32 {
    let wide = strtoint64(input);
    i32::try_from(wide.clamp(i64::from(i32::MIN), i64::from(i32::MAX))).unwrap_or(0)
}

/// Where the announcing peer's entry is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum List {
    Seeders,
    Leechers,
}

impl OcelotModel {
    /// A process with nothing loaded.
    pub fn new(config: OcelotConfig) -> OcelotModel {
        OcelotModel {
            config,
            ..OcelotModel::default()
        }
    }

    /// A process started on these rows (`ocelot.cpp:165-167`).
    pub fn started(config: OcelotConfig, rows: &OcelotRows) -> OcelotModel {
        let mut model = OcelotModel::new(config);
        model.load(rows);
        model
    }

    /// The lists' load, at start and on SIGUSR1 (`:51-57`): torrents
    /// (`db.cpp:89-155`: new ones added with their `Snatched`, known ones
    /// keep their peers, counts and id and take the new type, those not in
    /// the rows dropped), tokens (`db.cpp:201-223`: cleared on the known
    /// torrents, then added where the torrent is loaded), users
    /// (`db.cpp:157-199`: known passkeys keep their object, whose flags are
    /// set and which is undeleted; those not in the rows are deleted and
    /// dropped), the whitelist (`db.cpp:226-247`: replaced).
    pub fn load(&mut self, rows: &OcelotRows) {
        let mut gone: BTreeSet<Vec<u8>> = self.torrents.keys().cloned().collect();
        for row in &rows.torrents {
            if row.info_hash.is_empty() {
                continue;
            }
            let free = FreeType::from_db(&row.freetorrent);
            match self.torrents.get_mut(&row.info_hash) {
                Some(t) => {
                    t.tokened_users.clear();
                    gone.remove(&row.info_hash);
                    t.free = free;
                }
                None => {
                    let t = OcelotTorrent {
                        id: row.id,
                        completed: row.snatched,
                        free,
                        ..OcelotTorrent::default()
                    };
                    self.torrents.insert(row.info_hash.clone(), t);
                }
            }
        }
        for hash in &gone {
            self.torrents.remove(hash);
        }
        for (user_id, hash) in &rows.tokens {
            if let Some(t) = self.torrents.get_mut(hash) {
                t.tokened_users.insert(*user_id);
            }
        }

        let mut gone: BTreeSet<Vec<u8>> = self.passkeys.keys().cloned().collect();
        for row in &rows.users {
            match self.passkeys.get(&row.passkey) {
                Some(&known) => {
                    if let Some(u) = self.users.get_mut(known) {
                        u.can_leech = row.can_leech;
                        u.protected = row.protected;
                        u.deleted = false;
                    }
                    gone.remove(&row.passkey);
                }
                None => {
                    let object = self.new_user(row.id, row.can_leech, row.protected);
                    self.passkeys.insert(row.passkey.clone(), object);
                }
            }
        }
        for passkey in &gone {
            self.delete_user(passkey);
        }

        self.whitelist.clone_from(&rows.whitelist);
    }

    fn new_user(&mut self, id: UserId, can_leech: bool, protected: bool) -> usize {
        self.users.push(OcelotUser {
            id,
            can_leech,
            protected,
            deleted: false,
        });
        self.users.len() - 1
    }

    /// Marks the passkey's object deleted and drops the passkey.
    fn delete_user(&mut self, passkey: &[u8]) {
        if let Some(object) = self.passkeys.remove(passkey) {
            if let Some(u) = self.users.get_mut(object) {
                u.deleted = true;
            }
        }
    }

    /// The user object a passkey names.
    pub fn user(&self, passkey: &[u8]) -> Option<&OcelotUser> {
        self.passkeys.get(passkey).and_then(|&i| self.users.get(i))
    }

    /// A user object by index (as [`OcelotPeer::user`] holds it).
    pub fn user_object(&self, index: usize) -> Option<&OcelotUser> {
        self.users.get(index)
    }

    pub fn torrent(&self, info_hash: &[u8]) -> Option<&OcelotTorrent> {
        self.torrents.get(info_hash)
    }

    pub fn whitelist(&self) -> &[Vec<u8>] {
        &self.whitelist
    }

    /// The deletion reason kept for an info-hash: (code, when).
    pub fn del_reason(&self, info_hash: &[u8]) -> Option<(i32, Time)> {
        self.del_reasons.get(info_hash).copied()
    }

    /// The records buffered since the last flush.
    pub fn pending(&self) -> &OcelotRecords {
        &self.pending
    }

    /// The user's entries on the torrent: (seeder, leecher), either or
    /// both.
    pub fn peer(
        &self,
        info_hash: &[u8],
        user_id: UserId,
        peer_id: &[u8],
    ) -> (Option<&OcelotPeer>, Option<&OcelotPeer>) {
        let Some(t) = self.torrents.get(info_hash) else {
            return (None, None);
        };
        let key = peer_key(t.id, user_id, peer_id);
        (t.seeders.get(&key), t.leechers.get(&key))
    }

    /// One announce at `now`, as `worker::work` and `worker::announce`
    /// handle it past the request line (`:291-809`).
    pub fn announce(&mut self, passkey: &[u8], q: &OcelotQuery, now: Time) -> OcelotAnnounced {
        let refuse = |refusal| OcelotAnnounced {
            reply: Err(refusal),
            records: OcelotRecords::default(),
        };
        // The checks, in order (`:292-365`).
        let Some(&object) = self.passkeys.get(passkey) else {
            return refuse(OcelotRefusal::PasskeyNotFound);
        };
        let Some(user) = self.users.get(object).copied() else {
            return refuse(OcelotRefusal::PasskeyNotFound);
        };
        if !self.torrents.contains_key(&q.info_hash) {
            return refuse(match self.del_reasons.get(&q.info_hash) {
                Some(&(reason, _)) if reason != -1 => OcelotRefusal::DeletedTorrent(reason),
                _ => OcelotRefusal::UnregisteredTorrent,
            });
        }
        if !q.compact {
            return refuse(OcelotRefusal::NotCompact);
        }
        let Some(peer_id) = q.peer_id.as_deref() else {
            return refuse(OcelotRefusal::NoPeerId);
        };
        if peer_id.len() != 20 {
            return refuse(OcelotRefusal::InvalidPeerId);
        }
        // `compare(0, len, entry)`: an entry longer than the peer id never
        // matches; an empty one matches every peer id.
        if !self.whitelist.is_empty() && !self.whitelist.iter().any(|w| peer_id.starts_with(w)) {
            return refuse(OcelotRefusal::NotWhitelisted);
        }
        let Some(tor) = self.torrents.get_mut(&q.info_hash) else {
            return refuse(OcelotRefusal::UnregisteredTorrent);
        };

        let left = q.left.max(0);
        let uploaded = q.uploaded.max(0);
        let downloaded = q.downloaded.max(0);
        let corrupt = q.corrupt.max(0);
        let user_id = user.id;
        let key = peer_key(tor.id, user_id, peer_id);
        let mut records = OcelotRecords::default();

        let stopped = q.event == AnnounceEvent::Stopped;
        // Only with nothing left (`:392-394`).
        let mut completed = q.event == AnnounceEvent::Completed && left == 0;
        let mut peer_changed = stopped;
        let mut update_torrent = stopped;
        let mut inserted = false;

        // Find the peer, or insert it (`:401-446`). A leecher is looked for
        // among the leechers only: a seeder now reporting `left > 0` gets a
        // second entry, its seeder entry kept until reaped.
        let list = if left > 0 {
            if !tor.leechers.contains_key(&key) {
                tor.leechers
                    .insert(key.clone(), OcelotPeer::new(object, peer_id));
                inserted = true;
            }
            List::Leechers
        } else if completed {
            if tor.leechers.contains_key(&key) {
                // (Found in both: only the user's seeding count changes.)
                List::Leechers
            } else if tor.seeders.contains_key(&key) {
                completed = false;
                List::Seeders
            } else {
                tor.seeders
                    .insert(key.clone(), OcelotPeer::new(object, peer_id));
                inserted = true;
                List::Seeders
            }
        } else {
            if !tor.seeders.contains_key(&key) {
                if let Some(leecher) = tor.leechers.remove(&key) {
                    // A leecher done without `completed`: moved, no snatch.
                    tor.seeders.insert(key.clone(), leecher);
                    peer_changed = true;
                } else {
                    tor.seeders
                        .insert(key.clone(), OcelotPeer::new(object, peer_id));
                    inserted = true;
                }
            }
            List::Seeders
        };
        let entries = match list {
            List::Seeders => &mut tor.seeders,
            List::Leechers => &mut tor.leechers,
        };
        let Some(p) = entries.get_mut(&key) else {
            return refuse(OcelotRefusal::UnregisteredTorrent);
        };

        // The accounting (`:449-523`).
        let mut upspeed = 0;
        let mut downspeed = 0;
        let mut expire_token = false;
        if inserted || q.event == AnnounceEvent::Started {
            // New (or restarted): nothing credited, the base reset.
            update_torrent = true;
            if inserted {
                p.user = object;
            }
            p.first_announced = now;
            p.last_announced = 0;
            p.uploaded = uploaded;
            p.downloaded = downloaded;
            p.corrupt = corrupt;
            p.announces = 1;
            peer_changed = true;
        } else if uploaded < p.uploaded || downloaded < p.downloaded {
            // A counter went back: nothing credited, the base reset; the
            // corrupt base is kept.
            p.announces = p.announces.wrapping_add(1);
            p.uploaded = uploaded;
            p.downloaded = downloaded;
            peer_changed = true;
        } else {
            p.announces = p.announces.wrapping_add(1);
            let mut uploaded_change = uploaded - p.uploaded;
            let mut downloaded_change = downloaded - p.downloaded;
            p.uploaded = uploaded;
            p.downloaded = downloaded;
            let corrupt_change = corrupt - p.corrupt;
            if corrupt_change != 0 {
                p.corrupt = corrupt;
                tor.balance = tor.balance.wrapping_sub(corrupt_change);
                update_torrent = true;
            }
            peer_changed |= uploaded_change != 0 || downloaded_change != 0 || corrupt_change != 0;
            if uploaded_change != 0 || downloaded_change != 0 {
                tor.balance = tor
                    .balance
                    .wrapping_add(uploaded_change)
                    .wrapping_sub(downloaded_change);
                update_torrent = true;
                if now > p.last_announced {
                    let elapsed = now - p.last_announced;
                    upspeed = uploaded_change / elapsed;
                    downspeed = downloaded_change / elapsed;
                }
                // Freeleech (`:501-514`): neutral credits nothing and
                // passes no token; free or a token charges no download, a
                // token's raw download recorded even when 0.
                let tokened = tor.tokened_users.contains(&user_id);
                if tor.free == FreeType::Neutral {
                    downloaded_change = 0;
                    uploaded_change = 0;
                } else if tor.free == FreeType::Free || tokened {
                    if tokened {
                        expire_token = true;
                        records.freeleeches.push(FreeleechDelta {
                            user_id,
                            torrent_id: tor.id,
                            downloaded: downloaded_change,
                        });
                    }
                    downloaded_change = 0;
                }
                if uploaded_change != 0 || downloaded_change != 0 {
                    records.users.push(UserDelta {
                        user_id,
                        uploaded: uploaded_change,
                        downloaded: downloaded_change,
                    });
                }
            }
        }
        p.left = left;

        // The address, rebuilt when new or changed (`:543-573`).
        let port = (q.port & 0xFFFF) as u16;
        let invalid_ip = if inserted || port != p.port || q.ip != p.ip {
            p.port = port;
            p.ip.clone_from(&q.ip);
            let (ip_port, invalid) = compact_address(&q.ip, port);
            p.ip_port = ip_port;
            p.invalid_ip = invalid;
            invalid
        } else {
            p.invalid_ip
        };
        p.last_announced = now;
        // Visibility (`:1246-1250`), by the announcer's user as it is now.
        p.visible = (p.left == 0 || user.can_leech) && !p.invalid_ip;

        // The peer's record (`:580-595`).
        let record_ip = if user.protected {
            Vec::new()
        } else {
            q.ip.clone()
        };
        let timespent = now.wrapping_sub(p.first_announced);
        if peer_changed {
            records.heavy_peers.push(HeavyPeer {
                user_id,
                torrent_id: tor.id,
                active: !stopped,
                uploaded,
                downloaded,
                upspeed,
                downspeed,
                remaining: left,
                corrupt,
                timespent,
                announced: p.announces,
                ip: record_ip.clone(),
                peer_id: peer_id.to_vec(),
                useragent: q.user_agent.clone(),
                mtime: now,
            });
        } else {
            records.light_peers.push(LightPeer {
                user_id,
                torrent_id: tor.id,
                timespent,
                announced: p.announces,
                peer_id: peer_id.to_vec(),
                mtime: now,
            });
        }
        let my_ip_port = p.ip_port.clone();

        // How many peers (`:597-604`): a negative numwant wraps to a huge
        // unsigned one.
        let limit = self.config.numwant_limit;
        let mut numwant: u32 = match q.numwant {
            None => limit,
            Some(n) => (limit as i32).min(n) as u32,
        };
        let mut snatched = 0;
        let mut list = list;
        if stopped {
            numwant = 0;
        } else if completed {
            // A completion (`:613-641`): every completing peer counts.
            snatched = 1;
            update_torrent = true;
            tor.completed = tor.completed.wrapping_add(1);
            records.snatches.push(Snatch {
                user_id,
                torrent_id: tor.id,
                tstamp: now,
                ip: record_ip,
            });
            if !inserted {
                // Moved to the seeders, unless a seeder entry of the same
                // key is there already: `insert` then keeps the old entry,
                // whose base the next announce is measured from.
                if let Some(leecher) = tor.leechers.remove(&key) {
                    tor.seeders.entry(key.clone()).or_insert(leecher);
                }
                list = List::Seeders;
            }
            if expire_token {
                records.expired_tokens.push((user_id, tor.id));
                tor.tokened_users.remove(&user_id);
            }
        } else if !user.can_leech && left > 0 {
            numwant = 0;
        }

        // The peers handed out (`:646-717`).
        let mut peers = Vec::new();
        let listed = |users: &[OcelotUser], p: &OcelotPeer| OcelotListed {
            user_id: users.get(p.user).map_or(0, |u| u.id),
            peer_id: p.peer_id.clone(),
            compact: p.ip_port.clone(),
        };
        let is_deleted =
            |users: &[OcelotUser], p: &OcelotPeer| users.get(p.user).is_none_or(|u| u.deleted);
        let is_own = |users: &[OcelotUser], p: &OcelotPeer| {
            users.get(p.user).is_some_and(|u| u.id == user_id)
        };
        if numwant > 0 {
            let mut found: u32 = 0;
            if left > 0 {
                // Seeders, from the round-robin cursor (`:651-693`).
                let keys: Vec<&Vec<u8>> = tor.seeders.keys().collect();
                let n = keys.len();
                if n > 0 {
                    // Index `n` stands for `end()`.
                    let mut i = if tor.last_selected_seeder.is_empty() {
                        0
                    } else {
                        match keys.binary_search(&&tor.last_selected_seeder) {
                            Ok(j) if j + 1 < n => j + 1,
                            _ => 0,
                        }
                    };
                    // The stop: `end()` from the start, else the one before
                    // the start; when that is the first, the start moves on
                    // one (so the seeder after the first is left out).
                    let end = if i == 0 {
                        n
                    } else if i - 1 == 0 {
                        i += 1;
                        i - 1
                    } else {
                        i - 1
                    };
                    while i != end && found < numwant {
                        if i == n {
                            i = 0;
                        }
                        let Some(k) = keys.get(i) else { break };
                        let Some(s) = tor.seeders.get(*k) else { break };
                        if is_deleted(&self.users, s) || is_own(&self.users, s) || !s.visible {
                            i += 1;
                            continue;
                        }
                        peers.push(listed(&self.users, s));
                        found += 1;
                        tor.last_selected_seeder.clone_from(k);
                        i += 1;
                    }
                }
                // Then leechers from the start, when there is another
                // (`:695-705`).
                if found < numwant && tor.leechers.len() > 1 {
                    for l in tor.leechers.values() {
                        if found >= numwant {
                            break;
                        }
                        if is_deleted(&self.users, l)
                            || l.ip_port == my_ip_port
                            || is_own(&self.users, l)
                            || !l.visible
                        {
                            continue;
                        }
                        found += 1;
                        peers.push(listed(&self.users, l));
                    }
                }
            } else {
                // A seeder gets leechers only; deleted users are not
                // skipped (`:706-716`).
                for l in tor.leechers.values() {
                    if found >= numwant {
                        break;
                    }
                    if is_own(&self.users, l) || !l.visible {
                        continue;
                    }
                    found += 1;
                    peers.push(listed(&self.users, l));
                }
            }
        }

        // The entry takes the announcer's user object (`:740-752`).
        let entries = match list {
            List::Seeders => &mut tor.seeders,
            List::Leechers => &mut tor.leechers,
        };
        if let Some(p) = entries.get_mut(&key) {
            p.user = object;
        }
        // A stop is removed last (`:754-761`).
        if stopped {
            if left > 0 {
                tor.leechers.remove(&key);
            } else {
                tor.seeders.remove(&key);
            }
        }
        // The torrent's record, on a change or hourly (`:763-771`).
        if update_torrent || tor.last_flushed.wrapping_add(3600) < now {
            tor.last_flushed = now;
            records.torrents.push(TorrentStats {
                torrent_id: tor.id,
                seeders: tor.seeders.len(),
                leechers: tor.leechers.len(),
                snatched,
                balance: tor.balance,
            });
        }
        self.pending.append(&records);

        if !user.can_leech && left > 0 {
            return OcelotAnnounced {
                reply: Err(OcelotRefusal::LeechingForbidden),
                records,
            };
        }
        let base = u64::from(self.config.announce_interval);
        let answer = OcelotAnswer {
            complete: tor.seeders.len(),
            incomplete: tor.leechers.len(),
            downloaded: tor.completed,
            min_interval: self.config.announce_interval,
            interval: base..=base + u64::from(self.config.announce_jitter),
            peers,
            warning: invalid_ip.then_some(IP_WARNING),
        };
        OcelotAnnounced {
            reply: Ok(answer),
            records,
        }
    }

    /// A scrape (`:291-306,811-839`): a known passkey, then each known
    /// info-hash in the request's order (repeats repeated), unknown ones
    /// skipped.
    pub fn scrape(
        &self,
        passkey: &[u8],
        info_hashes: &[Vec<u8>],
    ) -> Result<Vec<OcelotScraped>, OcelotRefusal> {
        if !self.passkeys.contains_key(passkey) {
            return Err(OcelotRefusal::PasskeyNotFound);
        }
        Ok(info_hashes
            .iter()
            .filter_map(|h| {
                self.torrents.get(h).map(|t| OcelotScraped {
                    info_hash: h.clone(),
                    complete: t.seeders.len(),
                    incomplete: t.leechers.len(),
                    downloaded: t.completed,
                })
            })
            .collect())
    }

    /// `change_passkey` (`:844-855`): the same object under the new key,
    /// then the old key erased, so that old = new drops the user. An
    /// unknown old key changes nothing.
    pub fn change_passkey(&mut self, old: &[u8], new: &[u8]) {
        if let Some(&object) = self.passkeys.get(old) {
            self.passkeys.insert(new.to_vec(), object);
            self.passkeys.remove(old);
        }
    }

    /// `add_torrent` (`:856-878`): a new torrent with this id, no balance
    /// and no completions; a known one keeps everything but its type.
    pub fn add_torrent(&mut self, info_hash: &[u8], id: TorrentId, freetorrent: Option<&[u8]>) {
        let t = self
            .torrents
            .entry(info_hash.to_vec())
            .or_insert_with(|| OcelotTorrent {
                id,
                ..OcelotTorrent::default()
            });
        t.free = FreeType::from_update(freetorrent);
    }

    /// `update_torrent` (`:879-897`): the type of a known torrent.
    pub fn update_torrent(&mut self, info_hash: &[u8], freetorrent: Option<&[u8]>) {
        if let Some(t) = self.torrents.get_mut(info_hash) {
            t.free = FreeType::from_update(freetorrent);
        }
    }

    /// `update_torrents` (`:898-920`): the decoded `info_hashes` cut every
    /// 20 bytes (a short tail looked up as it is).
    pub fn update_torrents(&mut self, info_hashes: &[u8], freetorrent: Option<&[u8]>) {
        for hash in info_hashes.chunks(20) {
            self.update_torrent(hash, freetorrent);
        }
    }

    /// `add_token` (`:921-930`).
    pub fn add_token(&mut self, info_hash: &[u8], user_id: UserId) {
        if let Some(t) = self.torrents.get_mut(info_hash) {
            t.tokened_users.insert(user_id);
        }
    }

    /// `remove_token` (`:931-940`).
    pub fn remove_token(&mut self, info_hash: &[u8], user_id: UserId) {
        if let Some(t) = self.torrents.get_mut(info_hash) {
            t.tokened_users.remove(&user_id);
        }
    }

    /// `delete_torrent` (`:941-969`): a known torrent is dropped with its
    /// peers, and its reason (-1 when none is given) kept from `now`; an
    /// unknown one leaves no reason.
    pub fn delete_torrent(&mut self, info_hash: &[u8], reason: Option<i32>, now: Time) {
        if self.torrents.remove(info_hash).is_some() {
            self.del_reasons
                .insert(info_hash.to_vec(), (reason.unwrap_or(-1), now));
        }
    }

    /// `add_user` (`:970-983`): a new object that may leech, protected
    /// when `visible` is `0`; a known passkey is only undeleted.
    pub fn add_user(&mut self, passkey: &[u8], id: UserId, visible: Option<&[u8]>) {
        match self.passkeys.get(passkey) {
            Some(&object) => {
                if let Some(u) = self.users.get_mut(object) {
                    u.deleted = false;
                }
            }
            None => {
                let object = self.new_user(id, true, visible == Some(b"0"));
                self.passkeys.insert(passkey.to_vec(), object);
            }
        }
    }

    /// `remove_user` (`:984-992`): the object marked deleted (its peers
    /// stay, skipped in leechers' lists), the passkey dropped.
    pub fn remove_user(&mut self, passkey: &[u8]) {
        self.delete_user(passkey);
    }

    /// `remove_users` (`:993-1005`): the passkeys concatenated, cut every
    /// 32 bytes.
    pub fn remove_users(&mut self, passkeys: &[u8]) {
        for passkey in passkeys.chunks(32) {
            self.delete_user(passkey);
        }
    }

    /// `update_user` (`:1006-1024`): may leech unless `can_leech` is `0`,
    /// protected when `visible` is `0` (missing parameters: may leech, not
    /// protected). Peers' visibility changes at their next announce.
    pub fn update_user(
        &mut self,
        passkey: &[u8],
        can_leech: Option<&[u8]>,
        visible: Option<&[u8]>,
    ) {
        if let Some(u) = self
            .passkeys
            .get(passkey)
            .and_then(|&i| self.users.get_mut(i))
        {
            u.protected = visible == Some(b"0");
            u.can_leech = can_leech != Some(b"0");
        }
    }

    /// `add_whitelist` (`:1025-1029`): appended, repeats included.
    pub fn add_whitelist(&mut self, peer_id: &[u8]) {
        self.whitelist.push(peer_id.to_vec());
    }

    /// `remove_whitelist` (`:1030-1039`): the first exact match.
    pub fn remove_whitelist(&mut self, peer_id: &[u8]) {
        if let Some(i) = self.whitelist.iter().position(|w| w == peer_id) {
            self.whitelist.remove(i);
        }
    }

    /// `edit_whitelist` (`:1040-1051`): the first match of the old removed,
    /// the new always appended.
    pub fn edit_whitelist(&mut self, old_peer_id: &[u8], new_peer_id: &[u8]) {
        self.remove_whitelist(old_peer_id);
        self.whitelist.push(new_peer_id.to_vec());
    }

    /// `update_announce_interval` (`:1052-1056`): `strtoint32` of the raw
    /// value as an unsigned int (`config.cpp:46-54`).
    pub fn update_announce_interval(&mut self, value: &[u8]) {
        self.config.announce_interval = strtoint32(value) as u32;
    }

    /// `update_announce_jitter` (`:1057-1061`).
    pub fn update_announce_jitter(&mut self, value: &[u8]) {
        self.config.announce_jitter = strtoint32(value) as u32;
    }

    /// The reaper at `now` (`:1101-1167`): peers silent more than
    /// `peers_timeout` dropped (no peer record); a torrent emptied by it
    /// gets a record `(id, 0, 0, 0, balance)`; deletion reasons at least
    /// `del_reason_lifetime` old dropped. Returns its records.
    pub fn reap(&mut self, now: Time) -> OcelotRecords {
        let timeout = i64::from(self.config.peers_timeout);
        let mut records = OcelotRecords::default();
        for tor in self.torrents.values_mut() {
            let before = tor.leechers.len() + tor.seeders.len();
            let alive =
                |_: &Vec<u8>, p: &mut OcelotPeer| p.last_announced.wrapping_add(timeout) >= now;
            tor.leechers.retain(alive);
            tor.seeders.retain(alive);
            let reaped = tor.leechers.len() + tor.seeders.len() < before;
            if reaped && tor.seeders.is_empty() && tor.leechers.is_empty() {
                records.torrents.push(TorrentStats {
                    torrent_id: tor.id,
                    seeders: 0,
                    leechers: 0,
                    snatched: 0,
                    balance: tor.balance,
                });
            }
        }
        let oldest = now.wrapping_sub(i64::from(self.config.del_reason_lifetime));
        self.del_reasons.retain(|_, &mut (_, at)| at > oldest);
        self.pending.append(&records);
        records
    }

    /// A flush (`db.cpp:303-309,311-477`, `site_comm.cpp:59-79`): each
    /// buffer as one statement, applied row by row; the peers' heavy
    /// statement before their light one.
    pub fn flush(&mut self) {
        let pending = std::mem::take(&mut self.pending);
        let db = &mut self.db;
        for r in &pending.users {
            let row = db.users_leech_stats.entry(r.user_id).or_default();
            row.0 = row.0.wrapping_add(r.uploaded);
            row.1 = row.1.wrapping_add(r.downloaded);
        }
        for r in &pending.torrents {
            let row = db.torrents_leech_stats.entry(r.torrent_id).or_default();
            row.seeders = r.seeders;
            row.leechers = r.leechers;
            row.snatched += u64::from(r.snatched);
            row.balance = r.balance;
        }
        db.xbt_snatched.extend_from_slice(&pending.snatches);
        for r in &pending.heavy_peers {
            let key = (r.user_id, r.torrent_id, r.peer_id.clone());
            let row = db.xbt_files_users.entry(key).or_insert_with(|| XfuRow {
                ip: r.ip.clone(),
                useragent: r.useragent.clone(),
                ..XfuRow::default()
            });
            row.active = r.active;
            row.uploaded = r.uploaded;
            row.downloaded = r.downloaded;
            row.upspeed = r.upspeed;
            row.downspeed = r.downspeed;
            row.remaining = r.remaining;
            row.corrupt = r.corrupt;
            row.timespent = r.timespent;
            row.announced = r.announced;
            row.mtime = r.mtime;
        }
        for r in &pending.light_peers {
            let key = (r.user_id, r.torrent_id, r.peer_id.clone());
            let row = db.xbt_files_users.entry(key).or_default();
            row.upspeed = 0;
            row.downspeed = 0;
            row.timespent = r.timespent;
            row.announced = r.announced;
            row.mtime = r.mtime;
        }
        for r in &pending.freeleeches {
            let row = db
                .users_freeleeches
                .entry((r.user_id, r.torrent_id))
                .or_default();
            *row = row.wrapping_add(r.downloaded);
        }
        db.expired_tokens.extend_from_slice(&pending.expired_tokens);
    }
}

#[cfg(test)]
#[path = "ocelot_model_tests.rs"]
mod tests;
