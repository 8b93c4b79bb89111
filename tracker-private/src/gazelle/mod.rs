//! Gazelle sites, whose tracker is Ocelot (OPSnet/Ocelot): what this
//! tracker must take and answer as Ocelot does, so that a Gazelle site
//! switches by changing its tracker's address alone.
//!
//! - [`request`]: Gazelle's `update` and `report` calls, parsed as Ocelot
//!   reads them; the deletion reasons and the refusal body clients and
//!   Gazelle read.

pub mod request;
#[cfg(test)]
mod request_tests;

pub use request::{parse_report, parse_update, LeechType, Report, Update};
