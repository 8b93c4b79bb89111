//! A Gazelle site's rules for an announce, as Ocelot 2.1.3 applies them
//! (`worker::work` and `worker::announce`): the passkey, then the torrent
//! (unknown, or deleted with a reason), then the client whitelist; the
//! checks of the query itself (`compact`, the peer id) are the front
//! end's. What is credited: upload raw and download raw on a normal
//! torrent; no download on a freeleech one or with the user's token;
//! neither on a neutral one. A user who may not leech is accounted all the
//! same, listed to no one, handed no peers and refused after (Ocelot's
//! "leeching forbidden", which comes after its accounting): the ledger's
//! download slots, none for that user, with Ocelot's words.

use super::refusal::GazelleRefusal;
use super::request::LeechType;
use super::site::GazelleSite;
use crate::admission::{Admission, SiteRules};
use crate::announce::PrivateAnnounce;
use crate::refusal::Refusal;
use crate::rules::Factors;
use crate::site::{Passkey, UserId};

/// The percents a leech type credits: Ocelot credits raw bytes, with no
/// factors but these.
pub fn factors(leech: LeechType, token: bool) -> Factors {
    match (leech, token) {
        (LeechType::Neutral, _) => Factors {
            upload: 0,
            download: 0,
        },
        (LeechType::Free, _) | (LeechType::Normal, true) => Factors {
            upload: 100,
            download: 0,
        },
        (LeechType::Normal, false) => Factors {
            upload: 100,
            download: 100,
        },
    }
}

impl SiteRules for GazelleSite {
    fn admit(&self, a: &PrivateAnnounce) -> Result<Admission, Refusal> {
        let refuse = |r: GazelleRefusal| Err(Refusal::Site(r.words()));
        let Some(user) = self.user(&a.passkey) else {
            return refuse(GazelleRefusal::PasskeyNotFound);
        };
        let torrent = match self.torrent(&a.info_hash) {
            Ok(torrent) => torrent,
            Err(deleted) => {
                // Ocelot keeps -1 ("no reason") as a deletion with none.
                let reason = deleted.map(|d| d.reason).filter(|&r| r != -1);
                return refuse(GazelleRefusal::Unregistered { reason });
            }
        };
        if !self.whitelisted(&a.peer_id) {
            return refuse(GazelleRefusal::NotWhitelisted);
        }
        Ok(Admission {
            user: user.id,
            torrent: torrent.id,
            factors: factors(torrent.leech, self.has_token(user.id, torrent.id)),
            immune: false,
            download_slots: (!user.can_leech).then_some(0),
            slot_refusal: Refusal::Site(GazelleRefusal::LeechingForbidden.words()),
            snatched: torrent.snatched,
        })
    }

    fn user_of(&self, passkey: &Passkey) -> Option<UserId> {
        self.user(passkey).map(|u| u.id)
    }
}
