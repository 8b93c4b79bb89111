//! Private mode, pure (no I/O, no async, no threads, no logging): what a
//! private tracker knows of its site and what it writes back, compatible
//! with UNIT3D-Announce so that a UNIT3D site can use this tracker instead.
//!
//! - [`site`]: the site's records ([`SiteRecords`], read at start) and
//!   [`Site`], the persistent view every worker reads, replaced whole on
//!   each change.
//! - [`api`], [`change`], [`answer`]: the site API (`/announce/{apikey}/...`):
//!   requests parsed, changes applied to a [`Site`], GET answers written.
//! - [`rules`]: the factors and the integer math that credit bytes.
//! - [`ledger`], [`refusal`]: one worker's per-peer accounts; an announce
//!   checked (UNIT3D-Announce's refusal words), credited, and merged into
//!   the rows of the next flush.
//! - [`batch`]: those rows (UNIT3D's `peers`, `history`, `users`,
//!   `torrents`), merged per key.
//! - [`codec`]: the binary form of rows not yet written, for the state
//!   file and a hand-over.
//! - [`slots`], [`lists`]: what the workers count together, per user:
//!   leeching peers (download slots) and peer lists received.

mod account;
mod announce;
pub mod answer;
pub mod api;
mod api_error;
pub mod batch;
pub mod change;
pub mod client;
pub mod codec;
pub mod ledger;
pub mod lists;
pub mod refusal;
pub mod rules;
pub mod site;
pub mod slots;

#[cfg(test)]
mod testing;

pub use answer::{stats_json, torrent_json, user_json, ApiStats, TorrentCounts};
pub use api::{parse_api_request, status_of, ApiError, ApiRequest};
pub use batch::{Agent, Batch, HistoryRow, PeerKey, PeerRow, TorrentRow, UnregisteredRow, UserRow};
pub use change::SiteChange;
pub use codec::{decode_pending, encode_pending, CodecError};
pub use ledger::{Admitted, Ledger, LedgerConfig, PeerSnapshot, PrivateAnnounce};
pub use refusal::{Refusal, RefusalKind};
pub use rules::{credit, FactorOverrides, Factors, GlobalFactors};
pub use site::{
    Group, GroupId, Passkey, Site, SiteRecords, Torrent, TorrentId, TorrentStatus, User, UserId,
};
