//! One worker's shard of the swarms: its torrents and their peers, pure and
//! single-threaded (each worker owns its shard, so nothing here locks), with
//! no I/O. Time is the caller's: `now` is seconds on a monotonic clock, which
//! keeps expiry testable. The state file's codec is here too, since its
//! records are the store's torrents.

mod blocks;
mod budget;
mod counts;
mod evict;
mod expiry;
mod index;
mod ip_counts;
mod network_peers;
mod peers;
mod persist;
mod prefetch;
pub mod ratelimit;
mod refusal;
mod rng;
mod rtc;
mod rtc_store;
mod slots;
pub mod state;
mod store;
mod table;
#[cfg(test)]
mod tests;
mod torrent;

pub use counts::*;
pub use expiry::{MAX_CLEANUP_INTERVAL_SECS, MAX_PEER_TIMEOUT_SECS};
pub use persist::Restored;
pub use rtc::{ConnectionRef, RtcAnnounce};
pub use store::*;
