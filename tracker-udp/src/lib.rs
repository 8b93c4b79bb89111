//! The UDP tracker (BEP 15, with BEP 41 options): stateless connection ids
//! and the per-worker socket loop, on the codec of tracker-proto.

// Everything a packet from the network reaches: no panic that input can
// cause, so no unwrap, expect, panic or unchecked indexing outside the tests
// (`cargo clippy -p tracker-udp` enforces it; fuzz/ checks it at run time).
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

pub mod config;
pub mod cookie;
pub mod server;
