//! The `tracker` binary's stages, each in a module: the command line over the
//! config file (`cli`, `config`), start-up (`start`: host checks, binding,
//! privileges, then the workers), the signal and reload threads (`signals`,
//! `reload`), and one worker's wiring (`worker`). `main.rs` parses, runs and
//! turns the outcome into an exit code.

mod access_api;
pub mod cli;
pub mod config;
mod handover;
mod private;
mod reload;
mod signals;
pub mod start;
mod worker;
