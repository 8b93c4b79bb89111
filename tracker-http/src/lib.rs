//! The HTTP tracker protocol (BEP 3, 7, 23, 48).

pub mod bencode;
pub mod request;
pub mod response;
