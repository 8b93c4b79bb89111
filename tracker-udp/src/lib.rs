//! The UDP tracker (BEP 15, with BEP 41 options): stateless connection ids
//! and the per-worker socket loop, on the codec of tracker-proto.

pub mod coalesce;
pub mod config;
pub mod cookie;
mod private;
pub mod server;
pub mod steering;
pub mod xdp;
