//! What every protocol front end shares: the protocol-neutral request types, the
//! sharded swarm store, routing between workers, the glommio runtime, config and
//! counters.

pub mod access;
pub mod clock;
pub mod config;
pub mod host;
pub mod mesh;
pub mod metrics;
pub mod privileges;
pub mod runtime;
pub mod shard;
pub mod shutdown;
pub mod signals;
pub mod state;
pub mod stats;
pub mod swarm;
pub mod types;
