//! The changes the site's API makes to the site view, with
//! UNIT3D-Announce's meaning, so that UNIT3D's calls do what they do
//! there.

use crate::api_error::ApiError;
use crate::site::{Group, GroupId, Passkey, Site, Torrent, TorrentId, User, UserId};

/// One change the site asks for (a PUT or DELETE of the site API).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum SiteChange {
    /// Adds or replaces a torrent (and maps its info-hash to it).
    PutTorrent(Torrent),
    /// Marks a torrent deleted; it stays known, so its announces get
    /// "Torrent has been deleted.".
    DeleteTorrent(TorrentId),
    /// Adds or replaces a user. `user.passkey` is the passkey to map;
    /// `replaced` the one a passkey reset (`new_passkey`) retires.
    PutUser {
        user: User,
        replaced: Option<Passkey>,
    },
    /// Removes a user and its passkey.
    DeleteUser {
        id: UserId,
        passkey: Passkey,
    },
    PutGroup(Group),
    DeleteGroup(GroupId),
    /// Adds a peer-id prefix to the blacklist.
    PutBlacklist(Vec<u8>),
    DeleteBlacklist(Vec<u8>),
    PutToken {
        user_id: UserId,
        torrent_id: TorrentId,
    },
    DeleteToken {
        user_id: UserId,
        torrent_id: TorrentId,
    },
    PutPersonalFreeleech(UserId),
    DeletePersonalFreeleech(UserId),
    PutFeatured(TorrentId),
    DeleteFeatured(TorrentId),
}

impl Site {
    /// Applies one change. Only deleting an unknown torrent fails (400, as
    /// UNIT3D-Announce answers it); deleting anything else that is not
    /// there succeeds, so the site's retries stay harmless.
    pub fn apply(&mut self, change: SiteChange) -> Result<(), ApiError> {
        match change {
            SiteChange::PutTorrent(torrent) => self.put_torrent(torrent),
            SiteChange::DeleteTorrent(id) => {
                let hash = self
                    .torrent_ids
                    .get(&id)
                    .copied()
                    .ok_or(ApiError::Invalid {
                        field: "id",
                        why: "no torrent has this id",
                    })?;
                if let Some(torrent) = self.torrents.get_mut(&hash) {
                    torrent.is_deleted = true;
                }
            }
            SiteChange::PutUser { user, replaced } => {
                if let Some(old) = replaced {
                    self.unmap_passkey(&old, user.id);
                }
                self.put_user(user);
            }
            SiteChange::DeleteUser { id, passkey } => {
                if let Some(user) = self.users.remove(&id) {
                    self.unmap_passkey(&user.passkey, id);
                }
                self.unmap_passkey(&passkey, id);
            }
            SiteChange::PutGroup(group) => {
                self.groups.insert(group.id, group);
            }
            SiteChange::DeleteGroup(id) => {
                self.groups.remove(&id);
            }
            SiteChange::PutBlacklist(prefix) => self.blacklist_insert(prefix),
            SiteChange::DeleteBlacklist(prefix) => self.blacklist_remove(&prefix),
            SiteChange::PutToken {
                user_id,
                torrent_id,
            } => {
                self.tokens.insert((user_id, torrent_id));
            }
            SiteChange::DeleteToken {
                user_id,
                torrent_id,
            } => {
                self.tokens.remove(&(user_id, torrent_id));
            }
            SiteChange::PutPersonalFreeleech(user) => {
                self.personal_freeleech.insert(user);
            }
            SiteChange::DeletePersonalFreeleech(user) => {
                self.personal_freeleech.remove(&user);
            }
            SiteChange::PutFeatured(torrent) => {
                self.featured.insert(torrent);
            }
            SiteChange::DeleteFeatured(torrent) => {
                self.featured.remove(&torrent);
            }
        }
        Ok(())
    }
}

#[cfg(test)]
#[path = "change_tests.rs"]
mod tests;
