//! The tracker's wire formats and the types they share, pure: bytes in,
//! values out and back, with no I/O, no async and no runtime. The tracker's
//! servers, the load generator, the tests and the fuzzers all speak through
//! these codecs. Bytes from the network reach all of it, so it takes the
//! workspace's lints against panics (see the root Cargo.toml).

pub mod address;
pub mod http;
pub mod types;
pub mod udp;
pub mod ws;

pub use address::*;
pub use types::*;
