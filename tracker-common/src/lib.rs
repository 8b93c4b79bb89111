//! What every protocol front end shares: the protocol-neutral request types, the
//! sharded swarm store, routing between workers, the glommio runtime, config and
//! counters.

pub mod types;
pub mod shard;
pub mod swarm;
