//! The HTTP tracker protocol (BEP 3, 7, 23, 48): pure request and response
//! codecs, and the per-worker HTTP and HTTPS server on them.

pub mod bencode;
pub mod request;
pub mod response;
pub mod server;
pub mod tls;
