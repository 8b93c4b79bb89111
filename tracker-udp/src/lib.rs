//! The UDP tracker protocol (BEP 15, with BEP 41 options).

pub mod codec;
pub mod cookie;
