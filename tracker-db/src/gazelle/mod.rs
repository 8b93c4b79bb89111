//! A Gazelle site's database, as Ocelot (OPSnet/Ocelot 2.1.3, the tracker
//! Gazelle sites run) uses it: the tables of deploy/gazelle/schema.sql.
//!
//! - [`load()`]: the site's records at start (enabled users, torrents
//!   with their leech stats, unexpired freeleech tokens, the client
//!   whitelist), read as Ocelot's `load_users`, `load_torrents`,
//!   `load_tokens` and `load_whitelist` read them, as a user granted only
//!   deploy/gazelle/grants.sql.
//!
//! Like the UNIT3D side, everything here blocks and runs on the database
//! thread; nothing here logs a passkey.

pub mod load;

pub use load::{load, load_with_report, LoadReport};
