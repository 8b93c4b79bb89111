//! The UDP tracker protocol (BEP 15, with BEP 41 options): a pure codec,
//! stateless connection ids, and the per-worker socket loop.

pub mod codec;
pub mod cookie;
pub mod server;
pub mod socket;
