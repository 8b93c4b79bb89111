//! The load generator behind the `load-test` binary: a traffic model, the
//! per-socket (UDP) and per-connection (HTTP, WebSocket) protocol state that
//! checks every answer, thin glommio I/O loops around them, and the
//! statistics and reports.
//!
//! Pure and unit-tested: [`model`], [`histogram`], [`stats`], [`config`],
//! [`udp_session`], [`http_session`], [`ws_session`], [`private`],
//! [`transfer`]. I/O: [`udp`], [`http`],
//! [`ws`], [`runner`].

pub mod compare;
pub mod config;
pub mod histogram;
pub mod http;
pub mod http_session;
pub mod model;
pub mod private;
pub mod runner;
pub mod stats;
pub mod transfer;
pub mod udp;
pub mod udp_session;
pub mod ws;
pub mod ws_session;
