//! What every protocol front end shares: the protocol-neutral request types, the
//! sharded swarm store, routing between workers, the glommio runtime, config and
//! counters.

pub mod access;
pub mod clock;
pub mod config;
pub mod contain;
pub mod files;
// Routing runs on every forwarded request: nothing in it may panic.
#[cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::unreachable
    )
)]
pub mod mesh;
pub mod metrics;
pub mod reloadable;
pub mod runtime;
pub mod shard;
pub mod shutdown;
pub mod state_file;
pub mod stats;
pub mod throttle;
