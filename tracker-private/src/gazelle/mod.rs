//! Gazelle sites, whose tracker is Ocelot (OPSnet/Ocelot): what this
//! tracker must take and answer as Ocelot does, so that a Gazelle site
//! switches by changing its tracker's address alone.
//!
//! - [`answer`]: the bodies of the answers Gazelle reads (the reports).
//! - [`request`]: Gazelle's `update` and `report` calls, parsed as Ocelot
//!   reads them; the deletion reasons and the refusal body clients and
//!   Gazelle read.
//! - [`rows`]: what a flush writes to the site's tables, from the rows
//!   the core settled.
//! - [`rules`]: an announce admitted or refused as Ocelot would, in its
//!   words, and credited by the torrent's leech type and the user's token.
//! - [`site`]: what the site tells the tracker (users, torrents, tokens,
//!   the client whitelist, deletions), read at start and changed by those
//!   calls.

pub mod answer;
pub mod refusal;
pub mod request;
#[cfg(test)]
mod request_tests;
pub mod rows;
#[cfg(test)]
mod rows_tests;
pub mod rules;
#[cfg(test)]
mod rules_tests;
pub mod site;
#[cfg(test)]
mod site_tests;
#[cfg(test)]
mod transcript_tests;

pub use refusal::GazelleRefusal;
pub use request::{parse_report, parse_update, LeechType, Report, Update};
pub use site::{Applied, GazelleRecords, GazelleSite, GazelleTorrent, GazelleUser};
