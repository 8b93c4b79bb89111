//! Why an announce is refused, in UNIT3D-Announce's exact words, so that a
//! site's users see the messages their site's help pages describe.

use crate::announce::PrivateAnnounce;
use crate::site::{Group, Site, Torrent, TorrentStatus, User};
use std::borrow::Cow;
use std::fmt;

/// A refused announce. The reason never names the passkey.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The peer id starts with a blacklisted prefix.
    Blacklisted,
    /// No registered torrent has this info-hash.
    InfoHashNotFound,
    TorrentDeleted,
    TorrentPending,
    TorrentRejected,
    TorrentPostponed,
    /// Any other moderation status but approved.
    TorrentNotApproved,
    /// No user has this passkey.
    PasskeyNotFound,
    /// The passkey maps to a user id the site no longer has.
    UserNotFound,
    /// `can_download` is off and the peer is not a seeder.
    DownloadDisabled,
    GroupNotFound,
    /// The user's group is `banned`, `validating` or `disabled`.
    AccountBanned,
    AccountValidating,
    AccountDisabled,
    /// A new peer would exceed the peers one user may have on a torrent.
    TooManyPeers {
        max: u16,
    },
    /// A new peer would exceed the peers the tracker holds for a torrent,
    /// or in all (its memory bound).
    TrackerFull,
    /// Not a refusal of the announce, which is accounted: a leecher past
    /// its user's download slots, handed no peers and told so (over HTTP
    /// as a warning beside the counts, as UNIT3D-Announce answers; over
    /// UDP, which has no warnings, as an error).
    DownloadSlotLimit,
    /// In a site family's own words (an adapter's: a Gazelle site's).
    Site(SiteWords),
}

/// A refusal in an adapter's words: `reason`, then `detail` (a site's
/// reason for deleting a torrent, say), counted as `kind`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SiteWords {
    pub reason: &'static str,
    pub detail: &'static str,
    pub kind: RefusalKind,
    /// Of a leecher past its slots, which is accounted: answered as a
    /// warning beside the swarm's counts, not as a failure.
    pub beside_counts: bool,
}

/// What a refusal counts as, for the metrics.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum RefusalKind {
    Blacklisted,
    UnknownTorrent,
    /// Deleted, or not approved.
    TorrentState,
    UnknownUser,
    /// Download disabled, or the group may not announce.
    UserState,
    TooManyPeers,
    Full,
}

impl Refusal {
    /// UNIT3D-Announce's message, word for word.
    pub fn reason(&self) -> Cow<'static, str> {
        Cow::Borrowed(match self {
            Refusal::Blacklisted => "Client is not acceptable. Please check our blacklist.",
            Refusal::InfoHashNotFound => "InfoHash not found.",
            Refusal::TorrentDeleted => "Torrent has been deleted.",
            Refusal::TorrentPending => "Torrent is pending moderation.",
            Refusal::TorrentRejected => "Torrent has been rejected.",
            Refusal::TorrentPostponed => "Torrent has been postponed.",
            Refusal::TorrentNotApproved => "Torrent not approved.",
            Refusal::PasskeyNotFound => {
                "Passkey does not exist. Please re-download the .torrent file."
            }
            Refusal::UserNotFound => "User does not exist. Please re-download the .torrent file.",
            Refusal::DownloadDisabled => "Your downloading privileges have been disabled.",
            Refusal::GroupNotFound => "Group not found.",
            Refusal::AccountBanned => "Your account is not enabled. (Current: banned).",
            Refusal::AccountValidating => "Your account is not enabled. (Current: validating).",
            Refusal::AccountDisabled => "Your account is not enabled. (Current: disabled).",
            Refusal::DownloadSlotLimit => "Download slot limit reached.",
            Refusal::TrackerFull => "The tracker is full. Please try again later.",
            Refusal::TooManyPeers { max } => {
                return Cow::Owned(format!(
                    "You already have {max} peers on this torrent. Ignoring."
                ))
            }
            Refusal::Site(words) if words.detail.is_empty() => words.reason,
            Refusal::Site(words) => return Cow::Owned(format!("{}{}", words.reason, words.detail)),
        })
    }

    /// Whether the refusal of a leecher past its slots, which is
    /// accounted, is answered as a warning beside the swarm's counts
    /// (UNIT3D-Announce's slot limit), rather than as a failure (Ocelot's
    /// "leeching forbidden").
    pub fn answers_with_counts(&self) -> bool {
        !matches!(self, Refusal::Site(words) if !words.beside_counts)
    }

    /// An info-hash the site does not serve (unknown, or deleted): noted
    /// for the user, as UNIT3D-Announce notes it.
    pub fn is_unregistered(&self) -> bool {
        matches!(
            self,
            Refusal::InfoHashNotFound
                | Refusal::TorrentDeleted
                | Refusal::Site(SiteWords {
                    kind: RefusalKind::UnknownTorrent,
                    ..
                })
        )
    }

    pub fn kind(&self) -> RefusalKind {
        match self {
            Refusal::Blacklisted => RefusalKind::Blacklisted,
            Refusal::InfoHashNotFound => RefusalKind::UnknownTorrent,
            Refusal::TorrentDeleted
            | Refusal::TorrentPending
            | Refusal::TorrentRejected
            | Refusal::TorrentPostponed
            | Refusal::TorrentNotApproved => RefusalKind::TorrentState,
            Refusal::PasskeyNotFound | Refusal::UserNotFound => RefusalKind::UnknownUser,
            Refusal::DownloadDisabled
            | Refusal::GroupNotFound
            | Refusal::AccountBanned
            | Refusal::AccountValidating
            | Refusal::AccountDisabled
            | Refusal::DownloadSlotLimit => RefusalKind::UserState,
            Refusal::TooManyPeers { .. } => RefusalKind::TooManyPeers,
            Refusal::TrackerFull => RefusalKind::Full,
            Refusal::Site(words) => words.kind,
        }
    }

    /// UNIT3D-Announce v0.3.1 answers these with a success-shaped body
    /// whose `warning message` is the reason (no peers, counts 0), since
    /// libtorrent backs off on failures and Transmission repeats a failed
    /// `stopped`.
    pub fn is_critical_warning(&self) -> bool {
        matches!(
            self,
            Refusal::TorrentPending | Refusal::TorrentRejected | Refusal::TorrentPostponed
        )
    }

    /// The `interval` and `min interval` of the answer: 30 s for a torrent
    /// awaiting moderation (it may soon be approved), else 5400 s.
    pub fn interval_secs(&self) -> u32 {
        match self {
            Refusal::TorrentPending | Refusal::TorrentRejected | Refusal::TorrentPostponed => 30,
            _ => 5400,
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason())
    }
}

/// The site's checks (the HTTP-layer ones aside): the blacklist, then
/// whether the passkey's user may announce at all (its passkey, user and
/// group), then the torrent, then the user's right to download.
///
/// UNIT3D-Announce looks the torrent up before the passkey, so that any
/// passkey, a made-up one included, tells a registered info-hash ("Torrent
/// is pending moderation.", "Passkey does not exist.") from an unknown one
/// ("InfoHash not found."): anyone could learn what the site tracks, and
/// what its staff has not yet approved. Here a passkey that may not
/// announce is refused alike whatever the info-hash; the words are still
/// UNIT3D-Announce's, and differ from its only where two things are wrong.
pub(crate) fn check<'s>(
    site: &'s Site,
    a: &PrivateAnnounce,
) -> Result<(&'s User, &'s Group, &'s Torrent), Refusal> {
    if site.is_blacklisted(&a.peer_id) {
        return Err(Refusal::Blacklisted);
    }
    let user_id = site
        .passkey_user_id(&a.passkey)
        .ok_or(Refusal::PasskeyNotFound)?;
    let user = site.user(user_id).ok_or(Refusal::UserNotFound)?;
    let group = site.group(user.group_id).ok_or(Refusal::GroupNotFound)?;
    match group.slug.as_str() {
        "banned" => return Err(Refusal::AccountBanned),
        "validating" => return Err(Refusal::AccountValidating),
        "disabled" => return Err(Refusal::AccountDisabled),
        _ => {}
    }
    let torrent = site
        .torrent(&a.info_hash)
        .ok_or(Refusal::InfoHashNotFound)?;
    if torrent.is_deleted {
        return Err(Refusal::TorrentDeleted);
    }
    match torrent.status {
        TorrentStatus::Approved => {}
        TorrentStatus::Pending => return Err(Refusal::TorrentPending),
        TorrentStatus::Rejected => return Err(Refusal::TorrentRejected),
        TorrentStatus::Postponed => return Err(Refusal::TorrentPostponed),
        TorrentStatus::Other(_) => return Err(Refusal::TorrentNotApproved),
    }
    if !user.can_download && a.left != 0 {
        return Err(Refusal::DownloadDisabled);
    }
    Ok((user, group, torrent))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{self, announce, group, torrent, user};
    use crate::GlobalFactors;

    /// Whoever may not announce learns nothing of the torrents: the same
    /// refusal for a registered info-hash (approved, pending, deleted) as
    /// for an unknown one.
    #[test]
    fn a_passkey_that_may_not_announce_tells_no_torrent_from_another() {
        let mut records = testing::records();
        records.groups.push(group(11, "banned"));
        records.users.extend([user(5, 11), user(6, 99)]);
        let mut deleted = torrent(3);
        deleted.is_deleted = true;
        records.torrents.push(deleted);
        records.torrents.push(Torrent {
            status: TorrentStatus::Pending,
            ..torrent(4)
        });
        let mut site = Site::from_records(records, GlobalFactors::default());
        site.passkeys.insert(testing::passkey(8), 8);
        for (user, refusal) in [
            (99, Refusal::PasskeyNotFound),
            (8, Refusal::UserNotFound),
            (6, Refusal::GroupNotFound),
            (5, Refusal::AccountBanned),
        ] {
            for torrent in [1, 3, 4, 50] {
                let refused = check(&site, &announce(user, torrent, 1)).map(|_| ());
                assert_eq!(refused, Err(refusal), "user {user}, torrent {torrent}");
            }
        }
        // A member is told what the torrent is.
        let member = |torrent| check(&site, &announce(1, torrent, 1)).map(|_| ());
        assert_eq!(member(50), Err(Refusal::InfoHashNotFound));
        assert_eq!(member(3), Err(Refusal::TorrentDeleted));
        assert_eq!(member(4), Err(Refusal::TorrentPending));
        assert_eq!(member(1), Ok(()));
    }
}
