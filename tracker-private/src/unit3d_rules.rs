//! UNIT3D's rules as the ledger consults them: UNIT3D-Announce's checks in
//! its order and words ([`crate::refusal`]), then the factors of the user's
//! group, the torrent and the site ([`crate::rules`]).

use crate::admission::{Admission, SiteRules};
use crate::announce::PrivateAnnounce;
use crate::refusal::{check, Refusal};
use crate::rules::{self, Factors};
use crate::site::{Passkey, Site, UserId};

impl SiteRules for Site {
    /// UNIT3D-Announce's checks in its order ([`check`]), then the factors
    /// of the user's group, the torrent and the site ([`Factors::of`]).
    fn admit(&self, a: &PrivateAnnounce) -> Result<Admission, Refusal> {
        let (user, group, torrent) = check(self, a)?;
        Ok(Admission {
            user: user.id,
            torrent: torrent.id,
            factors: Factors::of(self, user, group, torrent),
            immune: rules::immune(self, user, group),
            download_slots: group.download_slots,
            slot_refusal: Refusal::DownloadSlotLimit,
            snatched: torrent.times_completed,
        })
    }

    fn user_of(&self, passkey: &Passkey) -> Option<UserId> {
        self.passkey_user_id(passkey)
    }
}
