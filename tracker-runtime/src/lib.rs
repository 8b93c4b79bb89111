//! What runs the tracker's workers, below the protocols: one glommio
//! executor per CPU, a busy task's quantum, the meshes between workers and
//! each worker's shard with its routing by owner, values reloaded while
//! serving, shutdown and panic containment, counters and metric families,
//! and the operator's files (access lists, the state file on disk, and its
//! snapshots while serving).

pub mod access;
pub mod clock;
pub mod config;
pub mod contain;
pub mod counters;
pub mod files;
pub mod mesh;
pub mod metrics;
pub mod owner;
pub mod private_config;
pub mod quantum;
pub mod ready;
pub mod reloadable;
pub mod shard;
pub mod shutdown;
pub mod snapshot;
pub mod state_file;
pub mod throttle;
pub mod workers;
