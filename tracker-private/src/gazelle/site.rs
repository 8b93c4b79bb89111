//! What a Gazelle site tells its tracker, as Ocelot keeps it: users by
//! passkey (may they leech, is their address protected, are they traced),
//! torrents by info-hash (their id, leech type and snatches), freeleech
//! tokens, the client whitelist, the reasons torrents were deleted for,
//! and the announce interval. Read from the site's database at start
//! ([`GazelleRecords`], as Ocelot's `load_users`, `load_torrents`,
//! `load_tokens` and `load_whitelist` read it), then changed by the site's
//! `update` calls ([`GazelleSite::apply`]).
//!
//! Like the UNIT3D view ([`crate::Site`]), every worker reads one
//! `Arc<GazelleSite>` and a change replaces it whole: the maps are
//! persistent, so a copy is O(1) and a change O(log n).
//!
//! Where Ocelot errs, this does not: `change_passkey` to the same key
//! keeps the user (Ocelot's insert-then-erase drops it); a torrent added
//! again under another info-hash with a known id moves (Ocelot would keep
//! two torrents of one id, whose rows collide); the whitelist holds each
//! prefix once (the site's table has a unique key on it), and at most
//! [`MAX_WHITELIST`] of them.

use tracker_proto::{InfoHash, PeerId};

use super::request::{LeechType, Update};
use crate::site::{Map, Passkey, Set, TorrentId, UserId};

/// The most whitelisted prefixes kept: far past any site's list (Gazelle
/// seeds 32), so that a runaway caller cannot grow it without bound.
pub const MAX_WHITELIST: usize = 4096;

/// A peer id's length: no longer prefix can start one.
const PEER_ID_LEN: usize = 20;

/// A user (`users_main`, `Enabled = '1'`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GazelleUser {
    pub id: UserId,
    pub passkey: Passkey,
    /// False: may seed, not leech (Ocelot's "leeching forbidden").
    pub can_leech: bool,
    /// Its address is never written (`Visible = '0'` or its `IP` is
    /// 127.0.0.1, as Ocelot reads it).
    pub protected: bool,
}

/// A torrent (`torrents` joined with `torrents_leech_stats`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GazelleTorrent {
    pub id: TorrentId,
    pub info_hash: InfoHash,
    pub leech: LeechType,
    /// `torrents_leech_stats.Snatched` as read; the tracker's own since
    /// are its ledgers'.
    pub snatched: u32,
}

/// Everything read from the site's database at start.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct GazelleRecords {
    pub users: Vec<GazelleUser>,
    pub torrents: Vec<GazelleTorrent>,
    /// `users_freeleeches` not expired: (user, torrent).
    pub tokens: Vec<(UserId, TorrentId)>,
    /// `xbt_client_whitelist.peer_id`; empty: every client may announce.
    pub whitelist: Vec<Vec<u8>>,
}

/// A user as the view keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct UserState {
    pub id: UserId,
    pub can_leech: bool,
    pub protected: bool,
    /// `trace_user` (Ocelot 2.1.5): reported back in the user report.
    pub traced: bool,
}

/// A torrent as the view keeps it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TorrentState {
    pub id: TorrentId,
    pub leech: LeechType,
    pub snatched: u32,
}

/// Why an info-hash is not served: unknown, or deleted with a reason
/// (Gazelle's code) at a time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Deleted {
    pub reason: i32,
    pub at_secs: u64,
}

/// What an update did, for the log and the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Applied {
    /// The view changed.
    Changed,
    /// It named a user or torrent the view does not have, or changed
    /// nothing: answered `success` all the same, as Ocelot answers it.
    Unknown,
    /// A question, not a change (`info_torrent`).
    Read,
    /// Malformed (see [`Update::Ignored`]).
    Ignored,
}

/// The view every worker reads (see the module's comment).
#[derive(Clone, Debug, Default)]
pub struct GazelleSite {
    users: Map<Passkey, UserState>,
    /// Each user's passkey, for what is looked up by id (a flush's rows).
    passkeys: Map<UserId, Passkey>,
    torrents: Map<InfoHash, TorrentState>,
    torrent_ids: Map<TorrentId, InfoHash>,
    tokens: Set<(UserId, TorrentId)>,
    /// In the site's order; and for the announce path, as a set, with how
    /// many prefixes have each length a peer id can start with (0 to 20),
    /// so that a lookup tries only the lengths present: at most 21 hash
    /// lookups, whatever the list's size.
    whitelist: Vec<Vec<u8>>,
    prefixes: Set<Vec<u8>>,
    prefix_lengths: [u32; PEER_ID_LEN + 1],
    deleted: Map<InfoHash, Deleted>,
    announce_interval: u32,
    announce_jitter: u32,
}

impl GazelleSite {
    /// The view of what was read at start, announcing every
    /// `announce_interval` seconds plus up to `announce_jitter`.
    pub fn from_records(
        records: GazelleRecords,
        announce_interval: u32,
        announce_jitter: u32,
    ) -> GazelleSite {
        let mut site = GazelleSite {
            announce_interval,
            announce_jitter,
            tokens: records.tokens.into_iter().collect(),
            ..GazelleSite::default()
        };
        for user in records.users {
            site.put_user(
                user.passkey,
                UserState {
                    id: user.id,
                    can_leech: user.can_leech,
                    protected: user.protected,
                    traced: false,
                },
            );
        }
        for torrent in records.torrents {
            site.put_torrent(
                torrent.info_hash,
                torrent.id,
                torrent.leech,
                torrent.snatched,
            );
        }
        for prefix in records.whitelist {
            site.whitelist_add(prefix);
        }
        site
    }

    pub fn user(&self, passkey: &Passkey) -> Option<&UserState> {
        self.users.get(passkey)
    }

    /// The torrent of `info_hash`, or why there is none: deleted (with the
    /// reason, until [`GazelleSite::forget_deletions`] forgets it), or
    /// unknown (None).
    pub fn torrent(&self, info_hash: &InfoHash) -> Result<&TorrentState, Option<Deleted>> {
        self.torrents
            .get(info_hash)
            .ok_or_else(|| self.deleted.get(info_hash).copied())
    }

    pub fn torrent_by_id(&self, id: TorrentId) -> Option<(&InfoHash, &TorrentState)> {
        let hash = self.torrent_ids.get(&id)?;
        Some((hash, self.torrents.get(hash)?))
    }

    pub fn has_token(&self, user: UserId, torrent: TorrentId) -> bool {
        self.tokens.contains(&(user, torrent))
    }

    /// Whether a client of `peer_id` may announce: the whitelist is empty,
    /// or one of its prefixes starts the peer id (Ocelot's rule).
    pub fn whitelisted(&self, peer_id: &PeerId) -> bool {
        self.whitelist.is_empty()
            || (0..=PEER_ID_LEN).any(|len| {
                self.prefix_lengths.get(len).is_some_and(|&n| n > 0)
                    && peer_id
                        .0
                        .get(..len)
                        .is_some_and(|prefix| self.prefixes.contains(prefix))
            })
    }

    pub fn whitelist(&self) -> &[Vec<u8>] {
        &self.whitelist
    }

    /// `min interval` and the base of `interval`, in seconds.
    pub fn announce_interval(&self) -> u32 {
        self.announce_interval
    }

    /// The most added to `interval` (each answer draws from 0 to this).
    pub fn announce_jitter(&self) -> u32 {
        self.announce_jitter
    }

    pub fn users_len(&self) -> usize {
        self.users.len()
    }

    pub fn torrents_len(&self) -> usize {
        self.torrents.len()
    }

    /// Forgets deletions older than `lifetime_secs` (Ocelot's
    /// `del_reason_lifetime`): their info-hashes are then just unknown.
    pub fn forget_deletions(&mut self, now_secs: u64, lifetime_secs: u64) {
        let old: Vec<InfoHash> = self
            .deleted
            .iter()
            .filter(|(_, d)| d.at_secs.saturating_add(lifetime_secs) <= now_secs)
            .map(|(hash, _)| *hash)
            .collect();
        for hash in old {
            self.deleted.remove(&hash);
        }
    }

    /// Applies one of the site's updates, at `now_secs`.
    pub fn apply(&mut self, update: &Update, now_secs: u64) -> Applied {
        let changed = |did: bool| {
            if did {
                Applied::Changed
            } else {
                Applied::Unknown
            }
        };
        match update {
            Update::ChangePasskey { old, new } => {
                if old == new {
                    return Applied::Unknown;
                }
                match self.remove_user(old) {
                    Some(user) => {
                        self.put_user(*new, user);
                        Applied::Changed
                    }
                    None => Applied::Unknown,
                }
            }
            Update::AddTorrent {
                info_hash,
                id,
                leech,
            } => {
                if let Some(torrent) = self.torrents.get_mut(info_hash) {
                    // Known: only its leech type (Ocelot keeps the rest).
                    torrent.leech = *leech;
                } else {
                    self.deleted.remove(info_hash);
                    self.put_torrent(*info_hash, *id, *leech, 0);
                }
                Applied::Changed
            }
            Update::SetLeechType { info_hashes, leech } => {
                let mut any = false;
                for hash in info_hashes {
                    if let Some(torrent) = self.torrents.get_mut(hash) {
                        torrent.leech = *leech;
                        any = true;
                    }
                }
                changed(any)
            }
            Update::AddToken { info_hash, user } => match self.torrents.get(info_hash) {
                Some(torrent) => {
                    self.tokens.insert((*user, torrent.id));
                    Applied::Changed
                }
                None => Applied::Unknown,
            },
            Update::RemoveToken { info_hash, user } => match self.torrents.get(info_hash) {
                Some(torrent) => changed(self.tokens.remove(&(*user, torrent.id)).is_some()),
                None => Applied::Unknown,
            },
            Update::DeleteTorrent { info_hash, reason } => match self.torrents.remove(info_hash) {
                Some(torrent) => {
                    self.torrent_ids.remove(&torrent.id);
                    // Its tokens go with it, as Ocelot keeps them on the
                    // torrent: added again, it has none until the site
                    // adds them.
                    let spent: Vec<(UserId, TorrentId)> = self
                        .tokens
                        .iter()
                        .filter(|(_, t)| *t == torrent.id)
                        .copied()
                        .collect();
                    for token in spent {
                        self.tokens.remove(&token);
                    }
                    self.deleted.insert(
                        *info_hash,
                        Deleted {
                            reason: *reason,
                            at_secs: now_secs,
                        },
                    );
                    Applied::Changed
                }
                None => Applied::Unknown,
            },
            Update::AddUser {
                passkey,
                id,
                protected,
            } => {
                if self.users.contains_key(passkey) {
                    // Known: Ocelot only undeletes it, which a user in the
                    // view is not.
                    return Applied::Unknown;
                }
                // One user, one passkey: a user added again under another
                // key (a re-enabled account) is known by the new one.
                if let Some(old) = self.passkeys.get(id).copied() {
                    self.remove_user(&old);
                }
                self.put_user(
                    *passkey,
                    UserState {
                        id: *id,
                        can_leech: true,
                        protected: *protected,
                        traced: false,
                    },
                );
                Applied::Changed
            }
            Update::RemoveUsers { passkeys } => {
                let mut any = false;
                for key in passkeys {
                    any |= self.remove_user(key).is_some();
                }
                changed(any)
            }
            Update::UpdateUser {
                passkey,
                can_leech,
                protected,
            } => match self.users.get_mut(passkey) {
                Some(user) => {
                    user.can_leech = *can_leech;
                    user.protected = *protected;
                    Applied::Changed
                }
                None => Applied::Unknown,
            },
            Update::TraceUser { passkey, traced } => match self.users.get_mut(passkey) {
                Some(user) => {
                    user.traced = *traced;
                    Applied::Changed
                }
                None => Applied::Unknown,
            },
            Update::AddWhitelist { prefix } => changed(self.whitelist_add(prefix.clone())),
            Update::RemoveWhitelist { prefix } => changed(self.whitelist_remove(prefix)),
            Update::EditWhitelist { old, new } => {
                let removed = self.whitelist_remove(old);
                let added = self.whitelist_add(new.clone());
                changed(removed || added)
            }
            Update::AnnounceInterval(secs) => {
                self.announce_interval = *secs;
                Applied::Changed
            }
            Update::AnnounceJitter(secs) => {
                self.announce_jitter = *secs;
                Applied::Changed
            }
            Update::InfoTorrent { .. } => Applied::Read,
            Update::Ignored { .. } => Applied::Ignored,
        }
    }

    /// The user of id `id`, by its passkey.
    pub fn user_by_id(&self, id: UserId) -> Option<&UserState> {
        self.users.get(self.passkeys.get(&id)?)
    }

    fn put_user(&mut self, passkey: Passkey, user: UserState) {
        self.passkeys.insert(user.id, passkey);
        self.users.insert(passkey, user);
    }

    fn remove_user(&mut self, passkey: &Passkey) -> Option<UserState> {
        let user = self.users.remove(passkey)?;
        if self.passkeys.get(&user.id) == Some(passkey) {
            self.passkeys.remove(&user.id);
        }
        Some(user)
    }

    fn put_torrent(&mut self, info_hash: InfoHash, id: TorrentId, leech: LeechType, snatched: u32) {
        // One torrent per id: an id known under another info-hash moves.
        if let Some(old) = self.torrent_ids.insert(id, info_hash) {
            if old != info_hash {
                self.torrents.remove(&old);
            }
        }
        self.torrents.insert(
            info_hash,
            TorrentState {
                id,
                leech,
                snatched,
            },
        );
    }

    fn whitelist_add(&mut self, prefix: Vec<u8>) -> bool {
        if self.whitelist.len() >= MAX_WHITELIST || self.prefixes.contains(&prefix) {
            return false;
        }
        // Past a peer id's length it can match none, but is listed.
        if let Some(count) = self.prefix_lengths.get_mut(prefix.len()) {
            *count += 1;
        }
        self.prefixes.insert(prefix.clone());
        self.whitelist.push(prefix);
        true
    }

    fn whitelist_remove(&mut self, prefix: &[u8]) -> bool {
        if self.prefixes.remove(prefix).is_none() {
            return false;
        }
        if let Some(count) = self.prefix_lengths.get_mut(prefix.len()) {
            *count -= 1;
        }
        self.whitelist.retain(|p| p.as_slice() != prefix);
        true
    }
}
