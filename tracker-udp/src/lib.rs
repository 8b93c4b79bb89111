//! The UDP tracker protocol (BEP 15, with BEP 41 options): a pure codec,
//! stateless connection ids, and the per-worker socket loop.

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

pub mod cookie;
pub mod server;
// Its arrays are indexed by counts below `BATCH` that the kernel returns
// (recvmmsg and sendmmsg never report more than they were given).
#[allow(clippy::indexing_slicing)]
pub mod socket;
