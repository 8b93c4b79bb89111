//! The HTTP tracker protocol (BEP 3, 7, 23, 48), pure: request heads
//! ([`parse_head`]), then the query of an announce ([`parse_announce`]) or a
//! scrape ([`parse_scrape`]); bencoded answers and their HTTP framing; and the
//! reverse for a load generator (request targets, the bencode decoder).

pub mod bencode;
mod head;
mod query;
mod response;
#[cfg(test)]
mod tests;

pub use head::*;
pub use query::*;
pub use response::*;
