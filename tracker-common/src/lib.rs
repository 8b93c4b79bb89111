//! What every protocol front end shares: the protocol-neutral request types, the
//! sharded swarm store, routing between workers, the glommio runtime, config and
//! counters.

pub mod clock;
pub mod config;
pub mod contain;
pub mod mesh;
pub mod runtime;
pub mod shard;
pub mod signals;
pub mod stats;
pub mod swarm;
pub mod types;
