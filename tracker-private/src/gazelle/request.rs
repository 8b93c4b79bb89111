//! Gazelle's calls to its tracker, parsed as Ocelot 2.1.3 parses them
//! (`src/worker.cpp`, `worker::work` and `worker::update`), without I/O:
//! `GET /{site_password}/update?action=...` changes what the tracker
//! knows of the site, `GET /{report_password}/report?get=...` asks what it
//! knows. Gazelle builds these query strings without URL-encoding (only
//! info-hashes are `%XX`-encoded), and Ocelot reads them raw: a value is
//! the bytes after the first `=` up to the next `&` (a further `=` is
//! dropped, as Ocelot drops it), the last of a repeated key wins, and only
//! info-hashes are `%XX`-decoded. So does this.
//!
//! Where Ocelot takes a malformed value (an id that is not a number, a
//! passkey or info-hash of the wrong length, an unknown action) and
//! answers `success` having changed nothing or something wrong (a torrent
//! of id 0, whose rows no foreign key would take), this parses it to
//! [`Update::Ignored`], naming what was wrong: the caller answers
//! `success` as Ocelot does (Gazelle alerts its staff on anything else and
//! retries), changes nothing, and counts it.

use tracker_proto::InfoHash;

use crate::site::{Passkey, TorrentId, UserId};

/// Ocelot's longest whitelisted prefix: `xbt_client_whitelist.peer_id` is
/// `varchar(20)`, and a peer id is 20 bytes.
pub const MAX_PREFIX: usize = 20;

/// A torrent's leech type, as Ocelot maps `freetorrent`: `0` normal, `1`
/// freeleech, anything else (Gazelle sends `2`) neutral leech.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LeechType {
    /// Download and upload counted.
    Normal,
    /// No download counted; upload counted.
    Free,
    /// Neither counted.
    Neutral,
}

impl LeechType {
    /// Ocelot's reading of an update's `freetorrent`: only `0` and `1` are
    /// what they say, anything else (a missing value too) is neutral.
    pub fn from_update(value: &[u8]) -> LeechType {
        match value {
            b"0" => LeechType::Normal,
            b"1" => LeechType::Free,
            _ => LeechType::Neutral,
        }
    }

    /// Ocelot's reading of the `torrents.FreeTorrent` column at a load
    /// (`db.cpp:125-131`): `1` free, `2` neutral, anything else normal, the
    /// other way round from [`LeechType::from_update`].
    pub fn from_column(value: &[u8]) -> LeechType {
        match value {
            b"1" => LeechType::Free,
            b"2" => LeechType::Neutral,
            _ => LeechType::Normal,
        }
    }
}

/// An `update` request's action, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Update {
    /// `change_passkey`: the user of `old` is known by `new` from now on.
    ChangePasskey { old: Passkey, new: Passkey },
    /// `add_torrent`: a new torrent; for a known info-hash, only its leech
    /// type changes (Ocelot keeps its id).
    AddTorrent {
        info_hash: InfoHash,
        id: TorrentId,
        leech: LeechType,
    },
    /// `update_torrent` (one) and `update_torrents` (20-byte info-hashes,
    /// concatenated): each known one's leech type.
    SetLeechType {
        info_hashes: Vec<InfoHash>,
        leech: LeechType,
    },
    /// `add_token`: the user spent a freeleech token on the torrent.
    AddToken { info_hash: InfoHash, user: UserId },
    /// `remove_token`: the token expired.
    RemoveToken { info_hash: InfoHash, user: UserId },
    /// `delete_torrent`: the torrent and its peers go; announces for it
    /// are refused with the reason's words for a while (Ocelot's
    /// `del_reason_lifetime`). `reason`: Gazelle's code, -1 for none.
    DeleteTorrent { info_hash: InfoHash, reason: i32 },
    /// `add_user`: a new user, who may leech; `protected` (`visible=0`):
    /// its address is never written. A known passkey is only undeleted.
    AddUser {
        passkey: Passkey,
        id: UserId,
        protected: bool,
    },
    /// `remove_user` (one) and `remove_users` (32-byte passkeys,
    /// concatenated).
    RemoveUsers { passkeys: Vec<Passkey> },
    /// `update_user`: whether the user may leech (`can_leech=0`: no), and
    /// whether its address is protected (`visible=0`); a missing value is
    /// "may leech" and "not protected", as in Ocelot.
    UpdateUser {
        passkey: Passkey,
        can_leech: bool,
        protected: bool,
    },
    /// `trace_user` (Ocelot 2.1.5, which Gazelle targets): whether the
    /// tracker traces the user's announces (`trace=1`); reported back in
    /// the user report's `traced`.
    TraceUser { passkey: Passkey, traced: bool },
    /// `add_whitelist`: a peer-id prefix that may announce.
    AddWhitelist { prefix: Vec<u8> },
    /// `remove_whitelist`: the first entry equal to `prefix` goes.
    RemoveWhitelist { prefix: Vec<u8> },
    /// `edit_whitelist`: the first entry equal to `old` goes, and `new` is
    /// added whether or not it was there (as Ocelot does).
    EditWhitelist { old: Vec<u8>, new: Vec<u8> },
    /// `update_announce_interval`, in seconds: until the next restart or
    /// configuration reload.
    AnnounceInterval(u32),
    /// `update_announce_jitter`, in seconds: likewise.
    AnnounceJitter(u32),
    /// `info_torrent`: the torrent's id and leech type as one line of
    /// Ocelot's JSON. `hex`: the value as sent, which Ocelot echoes.
    InfoTorrent {
        hex: Vec<u8>,
        info_hash: Option<InfoHash>,
    },
    /// Not taken: an unknown action, or a value that is not what the
    /// action needs (the field and why). Answered `success`, as Ocelot
    /// answers it, changing nothing.
    Ignored {
        field: &'static str,
        why: &'static str,
    },
}

/// A `report` request, parsed.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Report {
    /// `get=stats`: the tracker's counters, one line of JSON.
    Stats,
    /// `get=user&key=PASSKEY`.
    User(Passkey),
    /// `get=user` without a key: Ocelot's "Announce key missing".
    UserKeyMissing,
    /// `get=user` with a key no user has (not 32 letters and digits
    /// included): "Announce key not found".
    UserKeyUnknown,
    /// `get=torrent&info_hash=...` (Ocelot 2.1.5).
    Torrent(Option<InfoHash>),
    /// `get=prom_stats`: Prometheus text.
    PromStats,
    /// `get=jemalloc`: the allocator's statistics, which this tracker does
    /// not have.
    Jemalloc,
    /// Anything else: "unrecognized report query".
    Unrecognized,
}

/// A query string's pairs as Ocelot reads them (see the module's comment):
/// in order, so that a lookup from the end finds the last of a key.
pub struct Params<'a> {
    pairs: Vec<(&'a [u8], Vec<u8>)>,
}

impl<'a> Params<'a> {
    /// The pairs of `query` (the bytes after `?`, without the space that
    /// ends the request target).
    pub fn parse(query: &'a [u8]) -> Params<'a> {
        let mut pairs = Vec::new();
        for part in query.split(|&b| b == b'&') {
            let mut halves = part.splitn(2, |&b| b == b'=');
            let key = halves.next().unwrap_or_default();
            let value = halves.next().unwrap_or_default();
            // Ocelot switches to the value at each `=`, and keeps none.
            let value: Vec<u8> = value.iter().copied().filter(|&b| b != b'=').collect();
            pairs.push((key, value));
        }
        Params { pairs }
    }

    /// The value of the last `key`, raw.
    pub fn get(&self, key: &str) -> Option<&[u8]> {
        self.pairs
            .iter()
            .rev()
            .find(|(k, _)| *k == key.as_bytes())
            .map(|(_, v)| v.as_slice())
    }

    /// The value of `key`, or empty: Ocelot's `params[key]`.
    fn text(&self, key: &str) -> &[u8] {
        self.get(key).unwrap_or_default()
    }
}

/// Ocelot's `hex_decode`: `%XX` decoded (either case), every other byte
/// kept, `+` included; a `%` without two bytes after it kept as it is.
/// Unlike Ocelot, a `%` followed by what is not a hex digit is kept as
/// the three bytes it is, rather than decoded to garbage.
pub fn percent_decode(text: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(text.len().min(64));
    let mut rest = text;
    while let Some((&first, after)) = rest.split_first() {
        match (first, after) {
            (b'%', [high, low, tail @ ..]) if hex_digit(*high).is_some() => {
                match (hex_digit(*high), hex_digit(*low)) {
                    (Some(high), Some(low)) => {
                        out.push(high << 4 | low);
                        rest = tail;
                    }
                    _ => {
                        out.push(first);
                        rest = after;
                    }
                }
            }
            _ => {
                out.push(first);
                rest = after;
            }
        }
    }
    out
}

fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// A decimal number that is all of `text`, within `T`.
fn number<T: std::str::FromStr>(text: &[u8]) -> Option<T> {
    if text.is_empty() || !text.iter().all(|b| b.is_ascii_digit() || *b == b'-') {
        return None;
    }
    std::str::from_utf8(text).ok()?.parse().ok()
}

/// A site id: a decimal number above 0 (Ocelot would take garbage as 0,
/// which names no row).
fn id(text: &[u8]) -> Option<u32> {
    number::<u32>(text).filter(|&id| id > 0)
}

/// 20 bytes, as an info-hash.
fn twenty(bytes: &[u8]) -> Option<InfoHash> {
    bytes.try_into().ok().map(InfoHash)
}

fn info_hash(params: &Params<'_>) -> Option<InfoHash> {
    twenty(&percent_decode(params.text("info_hash")))
}

fn prefix(text: &[u8]) -> Option<Vec<u8>> {
    (!text.is_empty() && text.len() <= MAX_PREFIX).then(|| text.to_vec())
}

/// Parses an `update` request's query.
pub fn parse_update(query: &[u8]) -> Update {
    let params = Params::parse(query);
    match parse_update_action(&params) {
        Ok(update) => update,
        Err((field, why)) => Update::Ignored { field, why },
    }
}

type Invalid = (&'static str, &'static str);

const NOT_A_PASSKEY: &str = "not 32 ASCII letters and digits";
const NOT_AN_INFO_HASH: &str = "not 20 bytes once %XX-decoded";
const NOT_AN_ID: &str = "not a decimal number above 0 within u32";

fn passkey(params: &Params<'_>, field: &'static str) -> Result<Passkey, Invalid> {
    Passkey::parse(params.text(field)).ok_or((field, NOT_A_PASSKEY))
}

fn parse_update_action(params: &Params<'_>) -> Result<Update, Invalid> {
    let hash = || info_hash(params).ok_or(("info_hash", NOT_AN_INFO_HASH));
    let leech = || LeechType::from_update(params.text("freetorrent"));
    let user_id = |field| id(params.text(field)).ok_or((field, NOT_AN_ID));
    Ok(match params.text("action") {
        b"change_passkey" => Update::ChangePasskey {
            old: passkey(params, "oldpasskey")?,
            new: passkey(params, "newpasskey")?,
        },
        b"add_torrent" => Update::AddTorrent {
            info_hash: hash()?,
            id: user_id("id")?,
            leech: leech(),
        },
        b"update_torrent" => Update::SetLeechType {
            info_hashes: vec![hash()?],
            leech: leech(),
        },
        b"update_torrents" => {
            let bytes = percent_decode(params.text("info_hashes"));
            if bytes.is_empty() || !bytes.len().is_multiple_of(20) {
                return Err(("info_hashes", "not 20-byte info-hashes once %XX-decoded"));
            }
            Update::SetLeechType {
                info_hashes: bytes.chunks_exact(20).filter_map(twenty).collect(),
                leech: leech(),
            }
        }
        b"add_token" => Update::AddToken {
            info_hash: hash()?,
            user: user_id("userid")?,
        },
        b"remove_token" => Update::RemoveToken {
            info_hash: hash()?,
            user: user_id("userid")?,
        },
        b"delete_torrent" => Update::DeleteTorrent {
            info_hash: hash()?,
            reason: match params.get("reason") {
                None => -1,
                Some(text) => number(text).ok_or(("reason", "not a decimal number"))?,
            },
        },
        b"add_user" => Update::AddUser {
            passkey: passkey(params, "passkey")?,
            id: user_id("id")?,
            protected: params.text("visible") == b"0",
        },
        b"remove_user" => Update::RemoveUsers {
            passkeys: vec![passkey(params, "passkey")?],
        },
        b"remove_users" => {
            let text = params.text("passkeys");
            if text.is_empty() || !text.len().is_multiple_of(32) {
                return Err(("passkeys", "not 32-byte passkeys, concatenated"));
            }
            let passkeys: Option<Vec<Passkey>> =
                text.chunks_exact(32).map(Passkey::parse).collect();
            Update::RemoveUsers {
                passkeys: passkeys.ok_or(("passkeys", NOT_A_PASSKEY))?,
            }
        }
        b"update_user" => Update::UpdateUser {
            passkey: passkey(params, "passkey")?,
            can_leech: params.text("can_leech") != b"0",
            protected: params.text("visible") == b"0",
        },
        b"trace_user" => Update::TraceUser {
            passkey: passkey(params, "passkey")?,
            traced: params.text("trace") == b"1",
        },
        b"add_whitelist" => Update::AddWhitelist {
            prefix: prefix(params.text("peer_id")).ok_or(("peer_id", "empty or past 20 bytes"))?,
        },
        b"remove_whitelist" => Update::RemoveWhitelist {
            prefix: prefix(params.text("peer_id")).ok_or(("peer_id", "empty or past 20 bytes"))?,
        },
        b"edit_whitelist" => Update::EditWhitelist {
            old: params.text("old_peer_id").to_vec(),
            new: prefix(params.text("new_peer_id"))
                .ok_or(("new_peer_id", "empty or past 20 bytes"))?,
        },
        b"update_announce_interval" => Update::AnnounceInterval(
            number::<u32>(params.text("new_announce_interval"))
                .filter(|&s| s > 0)
                .ok_or(("new_announce_interval", "not a number of seconds above 0"))?,
        ),
        b"update_announce_jitter" => Update::AnnounceJitter(
            number(params.text("new_announce_jitter"))
                .ok_or(("new_announce_jitter", "not a number of seconds"))?,
        ),
        b"info_torrent" => Update::InfoTorrent {
            hex: params.text("info_hash").to_vec(),
            info_hash: info_hash(params),
        },
        _ => return Err(("action", "not an action Ocelot takes")),
    })
}

/// Parses a `report` request's query.
pub fn parse_report(query: &[u8]) -> Report {
    let params = Params::parse(query);
    match params.text("get") {
        b"stats" => Report::Stats,
        b"prom_stats" => Report::PromStats,
        b"jemalloc" => Report::Jemalloc,
        b"torrent" => Report::Torrent(info_hash(&params)),
        b"user" => match params.text("key") {
            b"" => Report::UserKeyMissing,
            key => Passkey::parse(key).map_or(Report::UserKeyUnknown, Report::User),
        },
        _ => Report::Unrecognized,
    }
}

/// Gazelle's deletion reasons, by the code `delete_torrent` carries
/// (Ocelot's `get_del_reason`): what a client is told for a torrent
/// deleted with it, after "Unregistered torrent: ". Unknown codes: "".
pub fn deletion_reason(code: i32) -> &'static str {
    const REASONS: [&str; 23] = [
        "Dupe",
        "Trump",
        "Bad File Names",
        "Bad Folder Names",
        "Bad Tags",
        "Disallowed Format",
        "Discs Missing",
        "Discography",
        "Edited Log",
        "Inaccurate Bitrate",
        "Low Bitrate",
        "Mutt Rip",
        "Disallowed Source",
        "Encode Errors",
        "Specifically Banned",
        "Tracks Missing",
        "Transcode",
        "Unapproved Cassette",
        "Unsplit Album",
        "User Compilation",
        "Wrong Format",
        "Wrong Media",
        "Audience Recording",
    ];
    usize::try_from(code)
        .ok()
        .and_then(|i| REASONS.get(i))
        .copied()
        .unwrap_or("")
}

/// The body of Ocelot's refusals, which Gazelle and clients read: a
/// bencoded `failure reason` with both intervals at 5400 s.
pub fn failure_body(reason: &str) -> Vec<u8> {
    let mut body = Vec::with_capacity(reason.len() + 64);
    body.extend_from_slice(b"d14:failure reason");
    body.extend_from_slice(reason.len().to_string().as_bytes());
    body.push(b':');
    body.extend_from_slice(reason.as_bytes());
    body.extend_from_slice(b"12:min intervali5400e8:intervali5400ee");
    body
}

/// The body of every `update` answer but `info_torrent`'s.
pub const SUCCESS: &[u8] = b"success";
