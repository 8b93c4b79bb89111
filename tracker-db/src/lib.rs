//! Private mode's database side, for a UNIT3D site's MySQL or MariaDB
//! database, as UNIT3D-Announce uses it:
//! - [`load()`]: the site's records at start (users, groups, one torrent
//!   per info-hash, freeleech tokens, personal freeleech, featured
//!   torrents, the client blacklist);
//! - [`flush()`]: one [`tracker_private::Batch`] settled against the rows
//!   it credits and written into `peers`, `history`, `users` and
//!   `torrents`, in one transaction, exactly once per sequence number (the
//!   tracker's own table `tracker_flushes`, deploy/unit3d/tracker.sql,
//!   remembers the last one);
//! - [`check_privileges`]: every statement a flush makes, tried on no rows
//!   at start, so that a missing grant stops the start;
//! - [`Flusher`]: the database thread that takes the workers' batches,
//!   merges them and flushes them every few seconds, retrying with backoff
//!   through outages and lost acknowledgements without writing anything
//!   twice.
//!
//! Everything here blocks: it runs on one dedicated thread, never on the
//! async executors, which only call [`FlusherHandle::submit`] (a channel
//! send) and [`FlusherHandle::stats`] (atomic loads).
//!
//! The client is blackbeam's synchronous `mysql` crate: blocking I/O fits
//! one database thread, where `mysql_async` or `sqlx` would each bring a
//! tokio runtime beside glommio's executors. It is built without C
//! libraries (pure-Rust compression backend) and without TLS: its rustls
//! feature would switch on rustls' logging for the whole tracker, which the
//! workspace keeps off; UNIT3D's database is reached over its unix socket
//! or loopback.
//!
//! Nothing here logs a passkey or a password: errors show URLs with the
//! password hidden, and load errors name columns, never values.

mod config;
mod error;
pub mod flush;
pub mod flusher;
/// A Gazelle site's database, as Ocelot reads it (issue 43).
pub mod gazelle;
pub mod load;
pub mod peers;

pub use config::DbConfig;
pub use error::{DbError, DbErrorKind};
pub use flush::{
    check_privileges, create_tracker_table, flush, last_sequence, FlushOutcome, UnregisteredTable,
    DEFAULT_MAX_ROWS_PER_STATEMENT,
};
pub use flusher::{Flusher, FlusherConfig, FlusherHandle, FlusherStats, Leftover};
pub use load::{has_table, load, load_with_report, LoadReport};
/// The connection every function here takes (the `mysql` crate's).
pub use mysql::Conn;
pub use peers::load_active_peers;
