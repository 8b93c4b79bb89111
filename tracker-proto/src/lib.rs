//! The tracker's wire formats and the types they share, pure: bytes in,
//! values out and back, with no I/O, no async and no runtime. The tracker's
//! servers, the load generator, the tests and the fuzzers all speak through
//! these codecs.

// Bytes from the network reach all of it: no panic that input can cause, so
// no unwrap, expect, panic or unchecked indexing outside the tests (fuzz/
// checks it at run time).
#![cfg_attr(
    not(test),
    deny(
        clippy::unwrap_used,
        clippy::expect_used,
        clippy::panic,
        clippy::indexing_slicing,
        clippy::unreachable,
        clippy::todo,
        clippy::unimplemented
    )
)]

pub mod address;
pub mod http;
pub mod types;
pub mod udp;

pub use address::*;
pub use types::*;
