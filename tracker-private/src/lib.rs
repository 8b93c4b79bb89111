//! Private mode, pure (no I/O, no async): what a private tracker knows of
//! its site (users and their passkeys, groups, registered torrents and
//! their factors, freeleech tokens, personal freeleech, featured torrents,
//! the client blacklist), the rules that credit an announce's bytes, and the
//! rows each flush writes into the site's database (UNIT3D's `peers`,
//! `history`, `users` and `torrents`), merged per key.

pub mod answer;
pub mod api;
pub mod batch;
pub mod change;
pub mod codec;
pub mod ledger;
pub mod refusal;
pub mod rules;
pub mod site;

#[cfg(test)]
mod testing;

pub use answer::{stats_json, torrent_json, user_json, ApiStats, TorrentCounts};
pub use api::{parse_api_request, status_of, ApiError, ApiRequest};
pub use batch::{Agent, Batch, HistoryRow, PeerKey, PeerRow, TorrentRow, UserRow};
pub use change::SiteChange;
pub use codec::{decode_pending, encode_pending, CodecError};
pub use ledger::{Admitted, Ledger, LedgerConfig, PeerSnapshot, PrivateAnnounce};
pub use refusal::{Refusal, RefusalKind};
pub use rules::{credit, FactorOverrides, Factors, GlobalFactors};
pub use site::{
    Group, GroupId, Passkey, Site, SiteRecords, Torrent, TorrentId, TorrentStatus, User, UserId,
};
