//! The site's records, as UNIT3D keeps them and UNIT3D-Announce reads them.

use std::fmt;
use tracker_proto::InfoHash;

/// `users.id`.
pub type UserId = u32;
/// `torrents.id`.
pub type TorrentId = u32;
/// `groups.id` (a signed `int` in UNIT3D's schema).
pub type GroupId = i32;

/// A user's passkey: the 32 bytes of the announce URL's path
/// (`/announce/{passkey}`); UNIT3D makes them as 32 lowercase hex digits.
///
/// It is a secret: `Debug` never shows it, and nothing may log it.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct Passkey(pub [u8; 32]);

impl Passkey {
    /// The passkey of a URL path segment: exactly 32 bytes, each a visible
    /// ASCII letter or digit (what UNIT3D makes is a subset).
    pub fn parse(bytes: &[u8]) -> Option<Passkey> {
        let key: [u8; 32] = bytes.try_into().ok()?;
        key.iter()
            .all(u8::is_ascii_alphanumeric)
            .then_some(Passkey(key))
    }
}

impl fmt::Debug for Passkey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Passkey(..)")
    }
}

/// A user (`users`, not soft-deleted).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct User {
    pub id: UserId,
    pub group_id: GroupId,
    pub passkey: Passkey,
    /// False: the user may seed but not download (`left` > 0 is refused).
    pub can_download: bool,
    pub is_donor: bool,
    pub is_lifetime: bool,
}

/// A group (`groups`) and what it changes for its users.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Group {
    pub id: GroupId,
    /// `banned`, `validating` and `disabled` may not announce.
    pub slug: String,
    /// Torrents a user of the group may leech at once; None: no limit.
    pub download_slots: Option<u32>,
    /// Written into `history.immune` (hit-and-run immunity).
    pub is_immune: bool,
    pub is_freeleech: bool,
    pub is_double_upload: bool,
}

/// `torrents.status` (UNIT3D's ModerationStatus).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TorrentStatus {
    Pending,
    Approved,
    Rejected,
    Postponed,
    /// Any other value: not approved.
    Other(i16),
}

impl TorrentStatus {
    pub fn from_db(status: i16) -> TorrentStatus {
        match status {
            0 => TorrentStatus::Pending,
            1 => TorrentStatus::Approved,
            2 => TorrentStatus::Rejected,
            3 => TorrentStatus::Postponed,
            other => TorrentStatus::Other(other),
        }
    }

    pub fn to_db(self) -> i16 {
        match self {
            TorrentStatus::Pending => 0,
            TorrentStatus::Approved => 1,
            TorrentStatus::Rejected => 2,
            TorrentStatus::Postponed => 3,
            TorrentStatus::Other(other) => other,
        }
    }
}

/// A registered torrent (`torrents`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Torrent {
    pub id: TorrentId,
    pub info_hash: InfoHash,
    pub status: TorrentStatus,
    /// Soft-deleted (`deleted_at` set): refused.
    pub is_deleted: bool,
    /// Percent of downloaded bytes counted: `100 - min(free, 100)`.
    pub download_factor: u8,
    /// Percent of uploaded bytes credited: 200 when `doubleup`, else 100.
    pub upload_factor: u8,
}

/// Everything the tracker reads from the site's database at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct SiteRecords {
    /// Users not soft-deleted.
    pub users: Vec<User>,
    pub groups: Vec<Group>,
    /// One torrent per info-hash (UNIT3D's `torrents.info_hash` is not
    /// unique: the approved, not deleted one first, then any not deleted,
    /// then a deleted one; the lowest id within each).
    pub torrents: Vec<Torrent>,
    /// `featured_torrents.torrent_id`.
    pub featured: Vec<TorrentId>,
    /// `freeleech_tokens`: (user_id, torrent_id).
    pub tokens: Vec<(UserId, TorrentId)>,
    /// `personal_freeleeches.user_id`.
    pub personal_freeleech: Vec<UserId>,
    /// `blacklist_clients.peer_id_prefix`.
    pub blacklist: Vec<Vec<u8>>,
}
