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
//! - [`admission`]: what the ledger asks of a site's rules (`SiteRules`);
//!   UNIT3D's (`unit3d_rules.rs`) and a Gazelle site's ([`gazelle`]).
//! - [`ledger`], [`refusal`]: one worker's per-peer accounts; an announce
//!   checked (UNIT3D-Announce's refusal words) and merged into the claims
//!   of the next flush.
//! - [`batch`]: those claims (each peer's steps since the tracker's last
//!   view of it) and history marks, merged per key.
//! - [`settle`]: what a flush credits, each claim measured from the peer's
//!   row as the database holds it: UNIT3D's `peers`, `history`, `users`,
//!   `torrents` rows.
//! - [`codec`]: the binary form of rows not yet written, for the state
//!   file and a hand-over.
//! - [`slots`], [`lists`], [`quota`]: what the workers count together, per
//!   user: leeching peers (download slots), peer lists received, and
//!   unregistered info-hashes noted per hour.
//! - [`client`], [`client_name`]: the client's own checks (user agent,
//!   port), and the name a client without a user agent (UDP) is known by.
//! - [`gazelle`]: Gazelle sites (Ocelot's): their calls to the tracker.

mod account;
pub mod admission;
mod announce;
pub mod answer;
pub mod api;
mod api_error;
pub mod batch;
pub mod change;
pub mod client;
pub mod client_name;
pub mod codec;
pub mod gazelle;
pub mod ledger;
pub mod lists;
pub mod quota;
pub mod refusal;
pub mod rules;
pub mod settle;
pub mod site;
pub mod slots;
mod unit3d_rules;
mod user_table;

#[cfg(test)]
mod model_tests;
#[cfg(test)]
mod ocelot_model;
#[cfg(test)]
mod testing;
#[cfg(test)]
mod unit3d_model;

pub use admission::{Admission, SiteRules};
pub use answer::{stats_json, torrent_json, user_json, ApiStats, TorrentCounts, UserCounts};
pub use api::{parse_api_request, status_of, ApiError, ApiRequest};
pub use batch::{
    first_credit, Agent, Batch, Claim, Credit, CreditRules, HistoryMark, HistoryRow, PeerEntry,
    PeerKey, PeerRow, Point, PointState, Resumed, Rows, Step, StepKind, TorrentRow,
    UnregisteredRow, UserRow,
};
pub use change::SiteChange;
pub use codec::{decode_pending, encode_pending, CodecError};
pub use ledger::{Admitted, Ledger, LedgerConfig, PeerSnapshot, PrivateAnnounce};
pub use refusal::{Refusal, RefusalKind};
pub use rules::{credit, FactorOverrides, Factors, GlobalFactors};
pub use settle::{pairs_needing_history, settle, Settled, StoredHistory, StoredPeer};
pub use site::{
    Group, GroupId, Passkey, Site, SiteRecords, Torrent, TorrentId, TorrentStatus, User, UserId,
};
