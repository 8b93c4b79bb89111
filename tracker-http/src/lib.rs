//! The HTTP tracker (BEP 3, 7, 23, 48) over plain TCP and TLS: the per-worker
//! HTTP and HTTPS servers, on the codecs of tracker-proto.

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

mod accept;
pub mod config;
pub mod connections;
mod deadline;
pub mod metrics_endpoint;
pub mod server;
pub mod tls;
