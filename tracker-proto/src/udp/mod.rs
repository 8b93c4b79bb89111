//! BEP 15 packets (with BEP 41 announce options), in both directions: the tracker
//! parses requests and writes responses, the load generator and tests do the
//! reverse. Pure byte work: no I/O, and parsing borrows from the packet instead of
//! allocating.
//!
//! Length policy: a connect request or response may carry trailing bytes (they are
//! ignored; BEP 15 only asks for "at least 16 bytes"); an announce is at least 98
//! bytes and everything after byte 98 is BEP 41 options; a scrape request is exactly
//! 16 + 20·N bytes with 1 <= N <= [`MAX_SCRAPE_INFO_HASHES`]; the peers of an
//! announce response and the entries of a scrape response must fill their tail
//! exactly.

use std::fmt;
use std::net::SocketAddr;

pub use crate::types::IpFamily;
use crate::{AnnounceEvent, InfoHash, PeerId, ScrapeStats};

/// The magic a connect request carries in place of a connection id.
pub const PROTOCOL_ID: i64 = 0x41727101980;

/// Most IPv4 peers one announce response carries, so that it stays inside one
/// unfragmented datagram (opentracker's cap).
pub const MAX_PEERS_V4: usize = 200;
/// Most IPv6 peers one announce response carries (opentracker's cap).
pub const MAX_PEERS_V6: usize = 66;
/// Most info-hashes one scrape request may ask for; more is refused at parse time
/// so that one datagram cannot fan out into unbounded work.
pub const MAX_SCRAPE_INFO_HASHES: usize = 74;

/// Length of an announce request without BEP 41 options.
pub const ANNOUNCE_REQUEST_LEN: usize = 98;

pub const ACTION_CONNECT: i32 = 0;
pub const ACTION_ANNOUNCE: i32 = 1;
pub const ACTION_SCRAPE: i32 = 2;
pub const ACTION_ERROR: i32 = 3;

/// Where a request's action starts (after the connection id).
pub const ACTION_OFFSET: usize = 8;
/// Where an announce's info-hash, and a scrape's first, starts (after the
/// action and the transaction id).
pub const INFO_HASH_OFFSET: usize = 16;

const OPTION_END: u8 = 0;
const OPTION_NOP: u8 = 1;
const OPTION_URL_DATA: u8 = 2;

pub const INFO_HASH_LEN: usize = 20;
const SCRAPE_ENTRY_LEN: usize = 12;

// A response within the caps fits the IPv6 minimum MTU less the IPv6 and UDP
// headers, so it is never fragmented.
const _: () = {
    const PAYLOAD: usize = 1280 - 40 - 8;
    assert!(20 + MAX_PEERS_V4 * IpFamily::V4.peer_len() <= PAYLOAD);
    assert!(20 + MAX_PEERS_V6 * IpFamily::V6.peer_len() <= PAYLOAD);
    assert!(8 + MAX_SCRAPE_INFO_HASHES * SCRAPE_ENTRY_LEN <= PAYLOAD);
};

/// The id a connect response hands out and later requests carry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ConnectionId(pub i64);

/// The client's tag that each response echoes.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct TransactionId(pub i32);

/// Most peers of `family` that fit one unfragmented response.
pub const fn max_peers(family: IpFamily) -> usize {
    match family {
        IpFamily::V4 => MAX_PEERS_V4,
        IpFamily::V6 => MAX_PEERS_V6,
    }
}

/// Why a packet was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParseErrorKind {
    /// The packet ends before a required field.
    TooShort,
    /// A connect request without [`PROTOCOL_ID`].
    BadProtocolId,
    UnknownAction,
    /// Trailing bytes that do not make a whole info-hash, peer or scrape entry.
    BadLength,
    /// An announce event other than 0..=3.
    BadEvent,
    /// A BEP 41 option (of any type but EndOfOptions and NOP) whose length
    /// byte or data runs past the end.
    TruncatedOption,
    NoInfoHashes,
    TooManyInfoHashes,
}

impl ParseErrorKind {
    /// Text for the error response.
    pub fn message(self) -> &'static str {
        match self {
            Self::TooShort => "packet too short",
            Self::BadProtocolId => "connect without protocol id",
            Self::UnknownAction => "unknown action",
            Self::BadLength => "bad packet length",
            Self::BadEvent => "unknown event",
            Self::TruncatedOption => "truncated option",
            Self::NoInfoHashes => "no info-hashes",
            Self::TooManyInfoHashes => "too many info-hashes",
        }
    }
}

/// A refused packet, with the ids it got far enough to carry, so the tracker can
/// decide whether (valid connection id) and how (transaction id) to answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ParseError {
    pub kind: ParseErrorKind,
    /// Always `None` when parsing a response, which has no connection id.
    pub connection_id: Option<ConnectionId>,
    pub transaction_id: Option<TransactionId>,
}

impl ParseError {
    /// Text for the error response.
    pub fn message(&self) -> &'static str {
        self.kind.message()
    }
}

impl fmt::Display for ParseError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.message())
    }
}

impl std::error::Error for ParseError {}

/// Splits the first `N` bytes off `rest`, or `None` when fewer are left.
fn take<const N: usize>(rest: &mut &[u8]) -> Option<[u8; N]> {
    let (head, tail) = rest.split_first_chunk::<N>()?;
    *rest = tail;
    Some(*head)
}

fn take_i64(rest: &mut &[u8]) -> Option<i64> {
    take(rest).map(i64::from_be_bytes)
}

fn take_u64(rest: &mut &[u8]) -> Option<u64> {
    take(rest).map(u64::from_be_bytes)
}

fn take_i32(rest: &mut &[u8]) -> Option<i32> {
    take(rest).map(i32::from_be_bytes)
}

fn take_u32(rest: &mut &[u8]) -> Option<u32> {
    take(rest).map(u32::from_be_bytes)
}

fn take_u16(rest: &mut &[u8]) -> Option<u16> {
    take(rest).map(u16::from_be_bytes)
}

fn event_from_wire(event: i32) -> Option<AnnounceEvent> {
    Some(match event {
        0 => AnnounceEvent::None,
        1 => AnnounceEvent::Completed,
        2 => AnnounceEvent::Started,
        3 => AnnounceEvent::Stopped,
        _ => return None,
    })
}

fn write_request_header(out: &mut Vec<u8>, connection_id: i64, action: i32, txid: TransactionId) {
    out.extend_from_slice(&connection_id.to_be_bytes());
    out.extend_from_slice(&action.to_be_bytes());
    out.extend_from_slice(&txid.0.to_be_bytes());
}

fn write_response_header(out: &mut Vec<u8>, action: i32, txid: TransactionId) {
    out.extend_from_slice(&action.to_be_bytes());
    out.extend_from_slice(&txid.0.to_be_bytes());
}

mod request;
mod response;
#[cfg(test)]
mod tests;

pub use request::*;
pub use response::*;
