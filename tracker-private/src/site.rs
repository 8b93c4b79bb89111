//! The site's records, as UNIT3D keeps them and UNIT3D-Announce reads them,
//! and [`Site`], the view of them that every worker reads.

use imbl::shared_ptr::DefaultSharedPtr;
use imbl::{GenericHashMap, GenericHashSet};
use std::fmt;
use tracker_proto::{InfoHash, PeerId};

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
    /// Snatches as the database had them when the torrent was read (at
    /// start, or at the site's first PUT of it); the tracker's own since
    /// then are the ledgers' (see `Ledger::snatches`).
    pub times_completed: u32,
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

/// A persistent hash map: a clone shares the whole tree (O(1)) and a change
/// copies one path (O(log n)), so the site view can be replaced whole on
/// every change while workers keep reading the previous one.
pub(crate) type Map<K, V> = GenericHashMap<K, V, ahash::RandomState, DefaultSharedPtr>;
/// The set counterpart of [`Map`].
pub(crate) type Set<T> = GenericHashSet<T, ahash::RandomState, DefaultSharedPtr>;

/// Prefixes longer than a peer id can never match one; they are kept (the
/// site may delete them again) but not looked up.
const PEER_ID_LEN: usize = 20;

/// What every worker reads to admit and credit an announce: the site's
/// records, indexed for the announce path. It is shared as an `Arc<Site>`
/// and replaced whole on each change (copy-on-write): the maps are
/// persistent, so that copy costs O(1) and the change O(log n).
#[derive(Clone)]
pub struct Site {
    pub(crate) users: Map<UserId, User>,
    pub(crate) passkeys: Map<Passkey, UserId>,
    pub(crate) groups: Map<GroupId, Group>,
    pub(crate) torrents: Map<InfoHash, Torrent>,
    pub(crate) torrent_ids: Map<TorrentId, InfoHash>,
    pub(crate) featured: Set<TorrentId>,
    pub(crate) tokens: Set<(UserId, TorrentId)>,
    pub(crate) personal_freeleech: Set<UserId>,
    pub(crate) blacklist: Set<Vec<u8>>,
    /// How many blacklisted prefixes have each length 0..=20, so that a
    /// lookup tries only the lengths present: at most 21 hash lookups,
    /// whatever the blacklist's size.
    pub(crate) prefix_lengths: [u32; PEER_ID_LEN + 1],
    pub(crate) factors: GlobalFactors,
}

impl Default for Site {
    fn default() -> Site {
        Site::from_records(SiteRecords::default(), GlobalFactors::default())
    }
}

impl fmt::Debug for Site {
    /// Sizes only: the view is large, and it holds passkeys.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Site")
            .field("users", &self.users.len())
            .field("passkeys", &self.passkeys.len())
            .field("groups", &self.groups.len())
            .field("torrents", &self.torrents.len())
            .field("featured", &self.featured.len())
            .field("tokens", &self.tokens.len())
            .field("personal_freeleech", &self.personal_freeleech.len())
            .field("blacklist", &self.blacklist.len())
            .field("factors", &self.factors)
            .finish()
    }
}

impl Site {
    /// The view of what was read at start. Should two torrents share an
    /// info-hash, or two users a passkey, the later one wins (the loader
    /// already keeps one torrent per info-hash, and passkeys are unique).
    pub fn from_records(records: SiteRecords, factors: GlobalFactors) -> Site {
        let mut site = Site {
            users: Map::default(),
            passkeys: Map::default(),
            groups: Map::default(),
            torrents: Map::default(),
            torrent_ids: Map::default(),
            featured: records.featured.into_iter().collect(),
            tokens: records.tokens.into_iter().collect(),
            personal_freeleech: records.personal_freeleech.into_iter().collect(),
            blacklist: Set::default(),
            prefix_lengths: [0; PEER_ID_LEN + 1],
            factors,
        };
        for user in records.users {
            site.put_user(user);
        }
        for group in records.groups {
            site.groups.insert(group.id, group);
        }
        for torrent in records.torrents {
            site.put_torrent(torrent);
        }
        for prefix in records.blacklist {
            site.blacklist_insert(prefix);
        }
        site
    }

    pub fn user(&self, id: UserId) -> Option<&User> {
        self.users.get(&id)
    }

    /// The user an announce URL's passkey names.
    pub fn user_by_passkey(&self, passkey: &Passkey) -> Option<&User> {
        self.users.get(self.passkeys.get(passkey)?)
    }

    /// The user id a passkey maps to, even where the user itself is gone
    /// (UNIT3D-Announce then says "User does not exist").
    pub fn passkey_user_id(&self, passkey: &Passkey) -> Option<UserId> {
        self.passkeys.get(passkey).copied()
    }

    pub fn group(&self, id: GroupId) -> Option<&Group> {
        self.groups.get(&id)
    }

    pub fn torrent(&self, info_hash: &InfoHash) -> Option<&Torrent> {
        self.torrents.get(info_hash)
    }

    pub fn torrent_by_id(&self, id: TorrentId) -> Option<&Torrent> {
        self.torrents.get(self.torrent_ids.get(&id)?)
    }

    /// Whether the peer id starts with a blacklisted prefix (an empty
    /// prefix matches every peer id, as in UNIT3D-Announce).
    pub fn is_blacklisted(&self, peer_id: &PeerId) -> bool {
        self.prefix_lengths
            .iter()
            .enumerate()
            .filter(|(_, count)| **count > 0)
            .filter_map(|(len, _)| peer_id.0.get(..len))
            .any(|prefix| self.blacklist.contains(prefix))
    }

    /// Whether `user` holds a freeleech token for `torrent`.
    pub fn has_token(&self, user: UserId, torrent: TorrentId) -> bool {
        self.tokens.contains(&(user, torrent))
    }

    pub fn has_personal_freeleech(&self, user: UserId) -> bool {
        self.personal_freeleech.contains(&user)
    }

    pub fn is_featured(&self, torrent: TorrentId) -> bool {
        self.featured.contains(&torrent)
    }

    pub fn factors(&self) -> &GlobalFactors {
        &self.factors
    }

    /// The configured factors change (a configuration reload).
    pub fn set_factors(&mut self, factors: GlobalFactors) {
        self.factors = factors;
    }

    pub fn users_len(&self) -> usize {
        self.users.len()
    }

    pub fn torrents_len(&self) -> usize {
        self.torrents.len()
    }

    /// Stores `user` and maps its passkey to it, dropping the mapping of
    /// the passkey it had before (a passkey reset).
    pub(crate) fn put_user(&mut self, user: User) {
        if let Some(old) = self.users.get(&user.id) {
            let old_key = old.passkey;
            if old_key != user.passkey {
                self.unmap_passkey(&old_key, user.id);
            }
        }
        self.passkeys.insert(user.passkey, user.id);
        self.users.insert(user.id, user);
    }

    /// Drops `passkey`'s mapping if it still maps to `user`.
    pub(crate) fn unmap_passkey(&mut self, passkey: &Passkey, user: UserId) {
        if self.passkeys.get(passkey) == Some(&user) {
            self.passkeys.remove(passkey);
        }
    }

    /// Stores `torrent` under its info-hash. Its previous info-hash, if the
    /// site changed it, is dropped, and so is the id of another torrent that
    /// held this info-hash: one torrent per info-hash, the latest wins.
    pub(crate) fn put_torrent(&mut self, mut torrent: Torrent) {
        // The snatches read first stay: those since are counted by the
        // ledgers, and the site's figure may already hold some of them.
        let known = self.torrent_ids.get(&torrent.id);
        if let Some(old) = known.and_then(|hash| self.torrents.get(hash)) {
            torrent.times_completed = old.times_completed;
        }
        if let Some(old_hash) = self.torrent_ids.get(&torrent.id).copied() {
            if old_hash != torrent.info_hash {
                self.torrents.remove(&old_hash);
            }
        }
        if let Some(other) = self.torrents.get(&torrent.info_hash) {
            if other.id != torrent.id {
                let other_id = other.id;
                self.torrent_ids.remove(&other_id);
            }
        }
        self.torrent_ids.insert(torrent.id, torrent.info_hash);
        self.torrents.insert(torrent.info_hash, torrent);
    }

    pub(crate) fn blacklist_insert(&mut self, prefix: Vec<u8>) {
        let len = prefix.len();
        if self.blacklist.insert(prefix).is_none() {
            if let Some(count) = self.prefix_lengths.get_mut(len) {
                *count += 1;
            }
        }
    }

    pub(crate) fn blacklist_remove(&mut self, prefix: &[u8]) {
        if self.blacklist.remove(prefix).is_some() {
            if let Some(count) = self.prefix_lengths.get_mut(prefix.len()) {
                *count = count.saturating_sub(1);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, passkey, peer, torrent, user};

    #[test]
    fn lookups() {
        let mut records = testing::records();
        records.featured = vec![1];
        records.tokens = vec![(1, 2)];
        records.personal_freeleech = vec![2];
        let site = Site::from_records(records, GlobalFactors::default());
        assert_eq!(site.user_by_passkey(&passkey(1)).map(|u| u.id), Some(1));
        assert_eq!(site.user_by_passkey(&passkey(3)), None);
        assert_eq!(site.user(2).map(|u| u.group_id), Some(10));
        assert_eq!(site.group(10).map(|g| g.slug.as_str()), Some("user"));
        assert_eq!(site.torrent(&testing::hash(2)).map(|t| t.id), Some(2));
        assert_eq!(
            site.torrent_by_id(1).map(|t| t.info_hash),
            Some(testing::hash(1))
        );
        assert!(site.is_featured(1) && !site.is_featured(2));
        assert!(site.has_token(1, 2) && !site.has_token(2, 1));
        assert!(site.has_personal_freeleech(2) && !site.has_personal_freeleech(1));
        assert_eq!((site.users_len(), site.torrents_len()), (2, 2));
        assert!(!format!("{site:?}").contains(&"0".repeat(31)));
    }

    #[test]
    fn the_blacklist_matches_prefixes() {
        let mut site = Site::default();
        assert!(!site.is_blacklisted(&peer(1)));
        site.blacklist_insert(b"-TR40".to_vec());
        site.blacklist_insert(b"-TR40".to_vec());
        site.blacklist_insert(b"-TR4050-000000000000-longer".to_vec());
        assert!(site.is_blacklisted(&peer(1)));
        assert!(!site.is_blacklisted(&PeerId(*b"-qB4620-000000000000")));
        site.blacklist_remove(b"-TR40");
        assert!(!site.is_blacklisted(&peer(1)));
        site.blacklist_insert(peer(1).0.to_vec());
        assert!(site.is_blacklisted(&peer(1)) && !site.is_blacklisted(&peer(2)));
        site.blacklist_insert(Vec::new());
        assert!(site.is_blacklisted(&peer(2)), "an empty prefix matches all");
    }

    #[test]
    fn a_passkey_reset_drops_the_old_passkey() {
        let mut site = testing::site();
        let mut reset = user(1, 10);
        reset.passkey = passkey(77);
        site.put_user(reset);
        assert_eq!(site.user_by_passkey(&passkey(1)), None);
        assert_eq!(site.user_by_passkey(&passkey(77)).map(|u| u.id), Some(1));
    }

    #[test]
    fn one_torrent_per_info_hash() {
        let mut site = testing::site();
        let mut moved = torrent(1);
        moved.info_hash = testing::hash(9);
        site.put_torrent(moved);
        assert_eq!(site.torrent(&testing::hash(1)), None);
        assert_eq!(
            site.torrent_by_id(1).map(|t| t.info_hash),
            Some(testing::hash(9))
        );
        let mut twin = torrent(5);
        twin.info_hash = testing::hash(2);
        site.put_torrent(twin);
        assert_eq!(site.torrent(&testing::hash(2)).map(|t| t.id), Some(5));
        assert_eq!(site.torrent_by_id(2), None);
    }

    #[test]
    fn a_clone_is_a_snapshot() {
        let mut site = testing::site();
        let before = site.clone();
        site.put_user(user(3, 10));
        assert_eq!(before.user(3), None);
        assert!(site.user(3).is_some());
    }
}

/// One kind of donor's overrides (`DONOR_*_OVERRIDE` or
/// `LIFETIME_DONOR_*_OVERRIDE`): None leaves the rule as it is.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct FactorOverrides {
    /// Raises the upload percent to at least this.
    pub upload: Option<u8>,
    /// Lowers the download percent to at most this.
    pub download: Option<u8>,
    /// Replaces the group's hit-and-run immunity.
    pub immune: Option<bool>,
}

/// The configured factors: site-wide double upload or freeleech, and the
/// donors' overrides.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct GlobalFactors {
    /// Percent of uploaded bytes credited (`UPLOAD_FACTOR`, default 100;
    /// 200 is a site-wide double upload).
    pub upload: u8,
    /// Percent of downloaded bytes counted (`DOWNLOAD_FACTOR`, default 100;
    /// 0 is a site-wide freeleech).
    pub download: u8,
    /// For users with `is_donor` (and not `is_lifetime`).
    pub donor: FactorOverrides,
    /// For users with `is_lifetime`; they take precedence over donors'.
    pub lifetime: FactorOverrides,
}

impl Default for GlobalFactors {
    fn default() -> GlobalFactors {
        GlobalFactors {
            upload: 100,
            download: 100,
            donor: FactorOverrides::default(),
            lifetime: FactorOverrides::default(),
        }
    }
}

impl GlobalFactors {
    /// The overrides that apply to `user`, if any: a lifetime donor's
    /// first, else a donor's.
    pub fn overrides_for(&self, user: &User) -> Option<&FactorOverrides> {
        if user.is_lifetime {
            Some(&self.lifetime)
        } else if user.is_donor {
            Some(&self.donor)
        } else {
            None
        }
    }
}
