//! The HTTP tracker protocol (BEP 3, 7, 23, 48): pure request and response
//! codecs, and the per-worker HTTP and HTTPS server on them.

// What bytes from the network reach (and the bencode decoder the load
// generator runs on answers): no panic that input can cause, so no unwrap,
// expect, panic or unchecked indexing outside the tests (`cargo clippy -p
// tracker-http` enforces it; fuzz/ checks it at run time).
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

mod deadline;
pub mod server;
pub mod tls;
