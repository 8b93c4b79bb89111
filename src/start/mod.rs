//! Start-up: what the host must offer, who the tracker serves as, and the
//! locks that keep one tracker per port.

pub mod host;
pub mod instance;
pub mod privileges;
