//! Where a site family's rules meet every private tracker's ledger: the
//! ledger asks the site's view to admit an announce ([`SiteRules::admit`]),
//! and takes from it only what any site decides (whose announce, on which
//! torrent, credited at what percents, its download slots), never the
//! site's own records. UNIT3D's view ([`crate::Site`]) is one such set of
//! rules, in its words; a Gazelle site's another.

use crate::announce::PrivateAnnounce;
use crate::refusal::Refusal;
use crate::rules::Factors;
use crate::site::{Passkey, TorrentId, UserId};

/// What a site's rules make of one announce they admit.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Admission {
    pub user: UserId,
    pub torrent: TorrentId,
    /// The percents of upload credited and download charged.
    pub factors: Factors,
    /// Immune to hit-and-run (UNIT3D's `history.immune`).
    pub immune: bool,
    /// Torrents the user may leech at once; None: no limit.
    pub download_slots: Option<u32>,
    /// What a leecher past those slots is told: it is accounted, listed to
    /// no one and handed no peers, and answered with this (beside the
    /// counts where [`Refusal::answers_with_counts`]).
    pub slot_refusal: Refusal,
    /// The torrent's snatches as the site had them when the view read
    /// them; the ledgers' own since are added to them.
    pub snatched: u32,
}

/// A site family's rules, as a ledger consults them.
pub trait SiteRules {
    /// Admits `a`, or refuses it in the site's words.
    fn admit(&self, a: &PrivateAnnounce) -> Result<Admission, Refusal>;

    /// The user a passkey names, if any: whose unregistered info-hashes
    /// are noted.
    fn user_of(&self, passkey: &Passkey) -> Option<UserId>;
}
