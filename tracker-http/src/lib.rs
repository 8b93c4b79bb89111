//! The HTTP tracker (BEP 3, 7, 23, 48) over plain TCP and TLS: the per-worker
//! HTTP and HTTPS servers, on the codecs of tracker-proto.

mod accept;
pub mod config;
pub mod connections;
mod deadline;
mod endpoint;
mod linger;
pub mod metrics_endpoint;
pub mod send_buffer;
pub mod server;
pub mod site_api;
pub mod tls;
