//! What a flush writes to a Gazelle site's tables, from the rows the core
//! settled ([`Rows`]): Ocelot's tables, with Ocelot's rules where they are
//! the site's, and not where they lose what users own.
//!
//! - `xbt_files_users`, a row per (user, torrent, peer id): the client's
//!   totals, `remaining`, `active`, `mtime` (Gazelle's hourly seedtime
//!   reads active seeders' rows by it), the time since the session began;
//!   the address as text for an IPv4 client of a user who is not
//!   protected, else `''` (the column is `varchar(15)`: an IPv6 address
//!   would fail the whole statement under strict mode, and Ocelot writes
//!   none); the user agent cut to the column's 51 characters, where Ocelot
//!   fails the statement.
//! - `users_leech_stats`: the credited bytes, added.
//! - `torrents_leech_stats`: the changes of the counts, added (Ocelot
//!   assigns its own counts, which two trackers on one database would
//!   overwrite in turn), snatches added, the balance added (Ocelot's starts
//!   from 0 at each start and overwrites the site's).
//! - `xbt_snatched`: a user's completion, once per user and torrent (the
//!   core counts snatches so; Ocelot writes one per completing peer).
//! - `users_freeleeches`: a token holder's download as reported, added to
//!   the row Gazelle made when the token was spent (updated, never
//!   inserted: its `Time` has no default, and an insert fails under
//!   Gazelle's strict mode).

use std::net::IpAddr;

use ahash::AHashMap;
use tracker_proto::PeerId;

use super::site::GazelleSite;
use crate::batch::Rows;
use crate::site::{TorrentId, UserId};

/// `xbt_files_users.useragent`'s width, in characters.
pub const USER_AGENT_CHARS: usize = 51;

/// An `xbt_files_users` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PeerRecord {
    pub user: UserId,
    pub torrent: TorrentId,
    pub peer_id: PeerId,
    pub active: bool,
    pub uploaded: u64,
    pub downloaded: u64,
    pub remaining: u64,
    /// Seconds since the session's first announce.
    pub timespent: u64,
    pub ip: String,
    pub useragent: String,
    /// Unix seconds of the latest announce.
    pub mtime: u64,
    pub connectable: bool,
}

/// A `users_leech_stats` change: added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserStats {
    pub user: UserId,
    pub uploaded: u64,
    pub downloaded: u64,
}

/// A `torrents_leech_stats` change: added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TorrentStats {
    pub torrent: TorrentId,
    pub seeders: i64,
    pub leechers: i64,
    pub snatched: u64,
    pub balance: i64,
    /// Unix seconds: `last_action` where the torrent has seeders.
    pub at: u64,
}

/// An `xbt_snatched` row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Snatch {
    pub user: UserId,
    pub torrent: TorrentId,
    pub at: u64,
    pub ip: String,
}

/// A `users_freeleeches` change: `Downloaded` added.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TokenDownload {
    pub user: UserId,
    pub torrent: TorrentId,
    pub downloaded: u64,
}

/// Everything one flush writes, in key order (so that two trackers lock
/// rows in the same order).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GazelleRows {
    pub peers: Vec<PeerRecord>,
    pub users: Vec<UserStats>,
    pub torrents: Vec<TorrentStats>,
    pub snatches: Vec<Snatch>,
    pub tokens: Vec<TokenDownload>,
}

/// The address as `xbt_files_users.ip` and `xbt_snatched.IP` hold it.
fn ip_text(ip: IpAddr, protected: bool) -> String {
    match ip {
        IpAddr::V4(v4) if !protected => v4.to_string(),
        _ => String::new(),
    }
}

/// `agent` as text of at most [`USER_AGENT_CHARS`] characters.
fn user_agent(agent: &[u8]) -> String {
    String::from_utf8_lossy(agent)
        .chars()
        .take(USER_AGENT_CHARS)
        .collect()
}

/// The rows of a Gazelle site for what the core settled; `site` tells who
/// is protected and who holds a token (a user the view no longer has is
/// taken as protected: its address is not written).
pub fn gazelle_rows(rows: &Rows, site: &GazelleSite) -> GazelleRows {
    let protected = |user: UserId| site.user_by_id(user).is_none_or(|u| u.protected);
    let mut out = GazelleRows::default();
    for (key, row) in &rows.peers {
        out.peers.push(PeerRecord {
            user: key.user_id,
            torrent: key.torrent_id,
            peer_id: key.peer_id,
            active: row.active,
            uploaded: row.uploaded,
            downloaded: row.downloaded,
            remaining: row.left,
            timespent: row.updated_at.saturating_sub(row.created_at),
            ip: ip_text(row.ip, protected(key.user_id)),
            useragent: user_agent(row.agent.as_bytes()),
            mtime: row.updated_at,
            connectable: row.connectable,
        });
    }
    for (&user, row) in &rows.users {
        out.users.push(UserStats {
            user,
            uploaded: row.uploaded,
            downloaded: row.downloaded,
        });
    }
    for (&torrent, row) in &rows.torrents {
        out.torrents.push(TorrentStats {
            torrent,
            seeders: row.seeders,
            leechers: row.leechers,
            snatched: row.times_completed,
            balance: row.balance,
            at: row.updated_at,
        });
    }
    // The address of a user's peer on a torrent, for its snatch.
    let addresses: AHashMap<(UserId, TorrentId), IpAddr> = rows
        .peers
        .iter()
        .map(|(k, p)| ((k.user_id, k.torrent_id), p.ip))
        .collect();
    for (&(user, torrent), row) in &rows.history {
        if let Some(at) = row.completed_at {
            let ip = addresses
                .get(&(user, torrent))
                .map(|&ip| ip_text(ip, protected(user)))
                .unwrap_or_default();
            out.snatches.push(Snatch {
                user,
                torrent,
                at,
                ip,
            });
        }
        if row.actual_downloaded > 0 && site.has_token(user, torrent) {
            out.tokens.push(TokenDownload {
                user,
                torrent,
                downloaded: row.actual_downloaded,
            });
        }
    }
    out.peers.sort_by_key(|p| (p.torrent, p.user, p.peer_id.0));
    out.users.sort_by_key(|u| u.user);
    out.torrents.sort_by_key(|t| t.torrent);
    out.snatches.sort_by_key(|s| (s.user, s.torrent));
    out.tokens.sort_by_key(|t| (t.user, t.torrent));
    out
}
