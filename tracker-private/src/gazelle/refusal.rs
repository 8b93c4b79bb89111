//! Ocelot's words for the announces a Gazelle site refuses.

use super::request::deletion_reason;
use crate::refusal::{RefusalKind, SiteWords};

/// Ocelot's refusals of an announce past the query's own checks, in its
/// words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GazelleRefusal {
    /// "Passkey not found".
    PasskeyNotFound,
    /// "Unregistered torrent", or for a torrent the site deleted with a
    /// reason (its code), "Unregistered torrent: " and the reason's words.
    Unregistered { reason: Option<i32> },
    /// "Your client is not on the whitelist".
    NotWhitelisted,
    /// "Access denied, leeching forbidden": after the announce is
    /// accounted.
    LeechingForbidden,
}

impl GazelleRefusal {
    /// Its words, as the core carries them.
    pub fn words(self) -> SiteWords {
        let (reason, detail, kind) = match self {
            GazelleRefusal::PasskeyNotFound => ("Passkey not found", "", RefusalKind::UnknownUser),
            GazelleRefusal::Unregistered { reason: None } => {
                ("Unregistered torrent", "", RefusalKind::UnknownTorrent)
            }
            GazelleRefusal::Unregistered { reason: Some(code) } => (
                "Unregistered torrent: ",
                deletion_reason(code),
                RefusalKind::UnknownTorrent,
            ),
            GazelleRefusal::NotWhitelisted => (
                "Your client is not on the whitelist",
                "",
                RefusalKind::Blacklisted,
            ),
            GazelleRefusal::LeechingForbidden => (
                "Access denied, leeching forbidden",
                "",
                RefusalKind::UserState,
            ),
        };
        SiteWords {
            reason,
            detail,
            kind,
            beside_counts: false,
        }
    }
}
