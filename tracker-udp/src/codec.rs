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

pub use tracker_common::types::IpFamily;
use tracker_common::types::{AnnounceEvent, InfoHash, PeerId, ScrapeStats};

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

const ACTION_CONNECT: i32 = 0;
const ACTION_ANNOUNCE: i32 = 1;
const ACTION_SCRAPE: i32 = 2;
const ACTION_ERROR: i32 = 3;

const OPTION_NOP: u8 = 1;
const OPTION_URL_DATA: u8 = 2;

const INFO_HASH_LEN: usize = 20;
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
    /// A BEP 41 option whose length byte or payload runs past the end.
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

/// A request from a client.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Request<'a> {
    Connect(ConnectRequest),
    Announce(AnnounceRequest<'a>),
    Scrape(ScrapeRequest<'a>),
}

impl<'a> Request<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ParseError> {
        let mut rest = bytes;
        let mut error = ParseError {
            kind: ParseErrorKind::TooShort,
            connection_id: None,
            transaction_id: None,
        };
        let connection_id = take_i64(&mut rest).ok_or(error)?;
        error.connection_id = Some(ConnectionId(connection_id));
        let action = take_i32(&mut rest).ok_or(error)?;
        let transaction_id = TransactionId(take_i32(&mut rest).ok_or(error)?);
        error.transaction_id = Some(transaction_id);
        let fail = |kind| ParseError { kind, ..error };

        match action {
            ACTION_CONNECT if connection_id == PROTOCOL_ID => {
                Ok(Self::Connect(ConnectRequest { transaction_id }))
            }
            ACTION_CONNECT => Err(fail(ParseErrorKind::BadProtocolId)),
            ACTION_ANNOUNCE => {
                AnnounceRequest::parse_body(ConnectionId(connection_id), transaction_id, rest)
                    .map(Self::Announce)
                    .map_err(fail)
            }
            ACTION_SCRAPE => InfoHashes::parse(rest)
                .map(|info_hashes| {
                    Self::Scrape(ScrapeRequest {
                        connection_id: ConnectionId(connection_id),
                        transaction_id,
                        info_hashes,
                    })
                })
                .map_err(fail),
            _ => Err(fail(ParseErrorKind::UnknownAction)),
        }
    }

    /// The info-hash and port of a packet that looks like an announce,
    /// without parsing the rest: enough to start loading its torrent and
    /// peer ahead of `parse`, which still decides whether it is one.
    pub fn peek_announce(bytes: &[u8]) -> Option<AnnouncePeek> {
        let action = bytes.get(8..12)?;
        if bytes.len() < ANNOUNCE_REQUEST_LEN || action != ACTION_ANNOUNCE.to_be_bytes() {
            return None;
        }
        let info_hash = bytes.get(16..16 + INFO_HASH_LEN)?;
        let port = bytes.get(96..98)?;
        Some(AnnouncePeek {
            info_hash: InfoHash(info_hash.try_into().ok()?),
            port: u16::from_be_bytes(port.try_into().ok()?),
        })
    }

    /// Appends the packet to `out`.
    pub fn write(&self, out: &mut Vec<u8>) {
        match self {
            Self::Connect(request) => request.write(out),
            Self::Announce(request) => request.write(out),
            Self::Scrape(request) => request.write(out),
        }
    }
}

/// What `Request::peek_announce` reads of an announce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnouncePeek {
    pub info_hash: InfoHash,
    pub port: u16,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConnectRequest {
    pub transaction_id: TransactionId,
}

impl ConnectRequest {
    pub fn write(&self, out: &mut Vec<u8>) {
        write_request_header(out, PROTOCOL_ID, ACTION_CONNECT, self.transaction_id);
    }
}

/// An announce with every field as sent.
///
/// `downloaded`, `left` and `uploaded` are i64 on the wire; they are read as the
/// same 64 bits unsigned. A negative value (some clients send `left = -1` when
/// they do not know the size yet) thus becomes huge rather than 0, so such a
/// client counts as a leecher, never as a seeder, and writing gives back the
/// bytes that were read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnounceRequest<'a> {
    pub connection_id: ConnectionId,
    pub transaction_id: TransactionId,
    pub info_hash: InfoHash,
    pub peer_id: PeerId,
    pub downloaded: u64,
    pub left: u64,
    pub uploaded: u64,
    pub event: AnnounceEvent,
    /// The IPv4 address field as sent (0 = use the sender's).
    pub ip_address: u32,
    pub key: u32,
    /// Peers wanted; -1 asks for the tracker's default.
    pub num_want: i32,
    pub port: u16,
    pub options: AnnounceOptions<'a>,
}

impl<'a> AnnounceRequest<'a> {
    /// Parses what follows the 16-byte request header.
    fn parse_body(
        connection_id: ConnectionId,
        transaction_id: TransactionId,
        mut rest: &'a [u8],
    ) -> Result<Self, ParseErrorKind> {
        let short = ParseErrorKind::TooShort;
        let info_hash = InfoHash(take(&mut rest).ok_or(short)?);
        let peer_id = PeerId(take(&mut rest).ok_or(short)?);
        let downloaded = take_u64(&mut rest).ok_or(short)?;
        let left = take_u64(&mut rest).ok_or(short)?;
        let uploaded = take_u64(&mut rest).ok_or(short)?;
        let event = take_i32(&mut rest).ok_or(short)?;
        let ip_address = take_u32(&mut rest).ok_or(short)?;
        let key = take_u32(&mut rest).ok_or(short)?;
        let num_want = take_i32(&mut rest).ok_or(short)?;
        let port = take_u16(&mut rest).ok_or(short)?;
        // Checked after the length so that a short packet reports TooShort.
        let event = event_from_wire(event).ok_or(ParseErrorKind::BadEvent)?;
        let options = AnnounceOptions::parse(rest)?;
        Ok(Self {
            connection_id,
            transaction_id,
            info_hash,
            peer_id,
            downloaded,
            left,
            uploaded,
            event,
            ip_address,
            key,
            num_want,
            port,
            options,
        })
    }

    /// The URLData payloads in order; concatenated they are the path and query of
    /// the announce URL (e.g. `/announce?passkey=...`).
    pub fn url_data(&self) -> impl Iterator<Item = &'a [u8]> {
        self.options.url_data()
    }

    pub fn write(&self, out: &mut Vec<u8>) {
        out.reserve(ANNOUNCE_REQUEST_LEN + self.options.0.len());
        write_request_header(
            out,
            self.connection_id.0,
            ACTION_ANNOUNCE,
            self.transaction_id,
        );
        out.extend_from_slice(&self.info_hash.0);
        out.extend_from_slice(&self.peer_id.0);
        out.extend_from_slice(&self.downloaded.to_be_bytes());
        out.extend_from_slice(&self.left.to_be_bytes());
        out.extend_from_slice(&self.uploaded.to_be_bytes());
        out.extend_from_slice(&(self.event as i32).to_be_bytes());
        out.extend_from_slice(&self.ip_address.to_be_bytes());
        out.extend_from_slice(&self.key.to_be_bytes());
        out.extend_from_slice(&self.num_want.to_be_bytes());
        out.extend_from_slice(&self.port.to_be_bytes());
        out.extend_from_slice(self.options.0);
    }
}

/// The BEP 41 options after byte 98 of an announce, as sent, known not to contain
/// a truncated option.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct AnnounceOptions<'a>(&'a [u8]);

impl<'a> AnnounceOptions<'a> {
    pub const EMPTY: Self = Self(&[]);

    /// Validates `bytes` as options: a truncated URLData is refused; whatever
    /// follows EndOfOptions or an unknown option type is ignored.
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ParseErrorKind> {
        OptionWalk(bytes).try_for_each(|payload| payload.map(drop))?;
        Ok(Self(bytes))
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.0
    }

    /// The URLData payloads in order.
    pub fn url_data(&self) -> impl Iterator<Item = &'a [u8]> {
        // Validated at parse time, so the walk never meets an error.
        OptionWalk(self.0).map_while(Result::ok)
    }

    /// Appends `data` to `out` as URLData options of at most 255 bytes each (the
    /// length is one byte), for a client that builds options to send.
    pub fn write_url_data(out: &mut Vec<u8>, data: &[u8]) {
        for chunk in data.chunks(usize::from(u8::MAX)) {
            out.push(OPTION_URL_DATA);
            // chunks() of 255 keeps every length within a u8.
            out.push(chunk.len() as u8);
            out.extend_from_slice(chunk);
        }
    }
}

/// Walks BEP 41 options, yielding each URLData payload, or one error for a
/// truncated option; it stops at EndOfOptions and at a type it cannot skip.
struct OptionWalk<'a>(&'a [u8]);

impl<'a> Iterator for OptionWalk<'a> {
    type Item = Result<&'a [u8], ParseErrorKind>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (&option, tail) = self.0.split_first()?;
            match option {
                OPTION_NOP => self.0 = tail,
                OPTION_URL_DATA => {
                    let split = tail
                        .split_first()
                        .and_then(|(&len, tail)| tail.split_at_checked(len.into()));
                    let Some((payload, tail)) = split else {
                        self.0 = &[];
                        return Some(Err(ParseErrorKind::TruncatedOption));
                    };
                    self.0 = tail;
                    return Some(Ok(payload));
                }
                // EndOfOptions (0), or an unknown type whose length we cannot know.
                _ => {
                    self.0 = &[];
                    return None;
                }
            }
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrapeRequest<'a> {
    pub connection_id: ConnectionId,
    pub transaction_id: TransactionId,
    pub info_hashes: InfoHashes<'a>,
}

impl ScrapeRequest<'_> {
    pub fn write(&self, out: &mut Vec<u8>) {
        write_request_header(
            out,
            self.connection_id.0,
            ACTION_SCRAPE,
            self.transaction_id,
        );
        out.extend_from_slice(self.info_hashes.0);
    }
}

/// Appends a scrape request for `info_hashes`, for a client holding owned hashes.
pub fn write_scrape_request(
    out: &mut Vec<u8>,
    connection_id: ConnectionId,
    transaction_id: TransactionId,
    info_hashes: &[InfoHash],
) {
    out.reserve(16 + INFO_HASH_LEN * info_hashes.len());
    write_request_header(out, connection_id.0, ACTION_SCRAPE, transaction_id);
    for info_hash in info_hashes {
        out.extend_from_slice(&info_hash.0);
    }
}

/// The info-hashes of a scrape request, borrowed from the packet: between 1 and
/// [`MAX_SCRAPE_INFO_HASHES`] of them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct InfoHashes<'a>(&'a [u8]);

impl<'a> InfoHashes<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ParseErrorKind> {
        let count = bytes.len() / INFO_HASH_LEN;
        if !bytes.len().is_multiple_of(INFO_HASH_LEN) {
            Err(ParseErrorKind::BadLength)
        } else if count == 0 {
            Err(ParseErrorKind::NoInfoHashes)
        } else if count > MAX_SCRAPE_INFO_HASHES {
            Err(ParseErrorKind::TooManyInfoHashes)
        } else {
            Ok(Self(bytes))
        }
    }

    pub fn len(&self) -> usize {
        self.0.len() / INFO_HASH_LEN
    }

    /// Always false for a parsed scrape; here for the `len` convention.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The info-hashes in request order.
    pub fn iter(&self) -> impl Iterator<Item = InfoHash> + 'a {
        self.0
            .chunks_exact(INFO_HASH_LEN)
            .filter_map(|chunk| chunk.try_into().ok().map(InfoHash))
    }
}

/// A response from the tracker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Response<'a> {
    Connect {
        transaction_id: TransactionId,
        connection_id: ConnectionId,
    },
    Announce {
        transaction_id: TransactionId,
        interval: u32,
        leechers: u32,
        seeders: u32,
        peers: CompactPeers<'a>,
    },
    Scrape {
        transaction_id: TransactionId,
        stats: ScrapeStatsList<'a>,
    },
    Error {
        transaction_id: TransactionId,
        message: &'a [u8],
    },
}

impl<'a> Response<'a> {
    /// Parses a response to a request sent over `family`, which decides the size
    /// of the announce peers.
    pub fn parse(bytes: &'a [u8], family: IpFamily) -> Result<Self, ParseError> {
        let mut rest = bytes;
        let mut error = ParseError {
            kind: ParseErrorKind::TooShort,
            connection_id: None,
            transaction_id: None,
        };
        let action = take_i32(&mut rest).ok_or(error)?;
        let transaction_id = TransactionId(take_i32(&mut rest).ok_or(error)?);
        error.transaction_id = Some(transaction_id);
        let fail = |kind| ParseError { kind, ..error };

        match action {
            ACTION_CONNECT => {
                let connection_id = ConnectionId(take_i64(&mut rest).ok_or(error)?);
                Ok(Self::Connect {
                    transaction_id,
                    connection_id,
                })
            }
            ACTION_ANNOUNCE => {
                let interval = take_u32(&mut rest).ok_or(error)?;
                let leechers = take_u32(&mut rest).ok_or(error)?;
                let seeders = take_u32(&mut rest).ok_or(error)?;
                let peers = CompactPeers::parse(family, rest).map_err(fail)?;
                Ok(Self::Announce {
                    transaction_id,
                    interval,
                    leechers,
                    seeders,
                    peers,
                })
            }
            ACTION_SCRAPE => {
                let stats = ScrapeStatsList::parse(rest).map_err(fail)?;
                Ok(Self::Scrape {
                    transaction_id,
                    stats,
                })
            }
            ACTION_ERROR => Ok(Self::Error {
                transaction_id,
                message: rest,
            }),
            _ => Err(fail(ParseErrorKind::UnknownAction)),
        }
    }

    pub fn transaction_id(&self) -> TransactionId {
        match *self {
            Self::Connect { transaction_id, .. }
            | Self::Announce { transaction_id, .. }
            | Self::Scrape { transaction_id, .. }
            | Self::Error { transaction_id, .. } => transaction_id,
        }
    }

    /// Appends the packet to `out`; the tracker uses the `write_*_response`
    /// functions instead, which need no `Response` value.
    pub fn write(&self, out: &mut Vec<u8>) {
        match *self {
            Self::Connect {
                transaction_id,
                connection_id,
            } => write_connect_response(out, transaction_id, connection_id),
            Self::Announce {
                transaction_id,
                interval,
                leechers,
                seeders,
                peers,
            } => {
                write_announce_header(out, transaction_id, interval, leechers, seeders);
                out.extend_from_slice(peers.bytes);
            }
            Self::Scrape {
                transaction_id,
                stats,
            } => {
                write_response_header(out, ACTION_SCRAPE, transaction_id);
                out.extend_from_slice(stats.0);
            }
            Self::Error {
                transaction_id,
                message,
            } => write_error_response(out, transaction_id, message),
        }
    }
}

pub fn write_connect_response(
    out: &mut Vec<u8>,
    transaction_id: TransactionId,
    connection_id: ConnectionId,
) {
    write_response_header(out, ACTION_CONNECT, transaction_id);
    out.extend_from_slice(&connection_id.0.to_be_bytes());
}

fn write_announce_header(
    out: &mut Vec<u8>,
    transaction_id: TransactionId,
    interval: u32,
    leechers: u32,
    seeders: u32,
) {
    write_response_header(out, ACTION_ANNOUNCE, transaction_id);
    out.extend_from_slice(&interval.to_be_bytes());
    out.extend_from_slice(&leechers.to_be_bytes());
    out.extend_from_slice(&seeders.to_be_bytes());
}

/// Appends an announce response with `peers`, compact entries (see
/// [`tracker_common::types::AnswerPeers::compact`]) of the family the
/// client asked over (their entry size is the one it expects). The caller
/// caps them (see [`max_peers`]).
pub fn write_announce_response(
    out: &mut Vec<u8>,
    transaction_id: TransactionId,
    interval: u32,
    leechers: u32,
    seeders: u32,
    peers: &[u8],
) {
    out.reserve(20 + peers.len());
    write_announce_header(out, transaction_id, interval, leechers, seeders);
    out.extend_from_slice(peers);
}

/// Appends a scrape response: one (seeders, completed, leechers) entry per stats
/// item, in the order given (the request's).
pub fn write_scrape_response(
    out: &mut Vec<u8>,
    transaction_id: TransactionId,
    stats: impl IntoIterator<Item = ScrapeStats>,
) {
    write_response_header(out, ACTION_SCRAPE, transaction_id);
    for s in stats {
        out.extend_from_slice(&s.seeders.to_be_bytes());
        out.extend_from_slice(&s.completed.to_be_bytes());
        out.extend_from_slice(&s.leechers.to_be_bytes());
    }
}

pub fn write_error_response(out: &mut Vec<u8>, transaction_id: TransactionId, message: &[u8]) {
    write_response_header(out, ACTION_ERROR, transaction_id);
    out.extend_from_slice(message);
}

/// The peers of an announce response, borrowed from the packet: whole entries of
/// the family's size.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompactPeers<'a> {
    family: IpFamily,
    bytes: &'a [u8],
}

impl<'a> CompactPeers<'a> {
    pub fn parse(family: IpFamily, bytes: &'a [u8]) -> Result<Self, ParseErrorKind> {
        if bytes.len().is_multiple_of(family.peer_len()) {
            Ok(Self { family, bytes })
        } else {
            Err(ParseErrorKind::BadLength)
        }
    }

    pub fn family(&self) -> IpFamily {
        self.family
    }

    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    pub fn len(&self) -> usize {
        self.bytes.len() / self.family.peer_len()
    }

    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = SocketAddr> + 'a {
        self.family.compact_addrs(self.bytes)
    }
}

/// The entries of a scrape response, borrowed from the packet, in request order.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ScrapeStatsList<'a>(&'a [u8]);

impl<'a> ScrapeStatsList<'a> {
    pub fn parse(bytes: &'a [u8]) -> Result<Self, ParseErrorKind> {
        if bytes.len().is_multiple_of(SCRAPE_ENTRY_LEN) {
            Ok(Self(bytes))
        } else {
            Err(ParseErrorKind::BadLength)
        }
    }

    pub fn len(&self) -> usize {
        self.0.len() / SCRAPE_ENTRY_LEN
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub fn iter(&self) -> impl Iterator<Item = ScrapeStats> + 'a {
        self.0.chunks_exact(SCRAPE_ENTRY_LEN).filter_map(|entry| {
            let mut entry = entry;
            Some(ScrapeStats {
                seeders: take_u32(&mut entry)?,
                completed: take_u32(&mut entry)?,
                leechers: take_u32(&mut entry)?,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::collection::vec;
    use proptest::prelude::*;
    use tracker_common::types::AnswerPeers;

    const OPTION_END: u8 = 0;

    fn header(connection_id: i64, action: i32, txid: i32) -> Vec<u8> {
        let mut out = Vec::new();
        write_request_header(&mut out, connection_id, action, TransactionId(txid));
        out
    }

    fn announce(options: AnnounceOptions<'_>) -> AnnounceRequest<'_> {
        AnnounceRequest {
            connection_id: ConnectionId(0x1234_5678_9abc_def0),
            transaction_id: TransactionId(-7),
            info_hash: InfoHash([0xaa; 20]),
            peer_id: PeerId(*b"-lt20A0-abcdefghijkl"),
            downloaded: 0,
            left: 1 << 30,
            uploaded: 0,
            event: AnnounceEvent::Started,
            ip_address: 0,
            key: 0xdead_beef,
            num_want: -1,
            port: 6881,
            options,
        }
    }

    fn announce_bytes(tail: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        announce(AnnounceOptions::EMPTY).write(&mut out);
        out.extend_from_slice(tail);
        out
    }

    fn request_error(bytes: &[u8]) -> ParseError {
        Request::parse(bytes).expect_err("malformed request parsed")
    }

    #[test]
    fn short_requests_report_the_ids_they_have() {
        let full = header(PROTOCOL_ID, ACTION_CONNECT, 9);
        for len in 0..16 {
            let error = request_error(&full[..len]);
            assert_eq!(error.kind, ParseErrorKind::TooShort);
            assert_eq!(error.connection_id.is_some(), len >= 8);
            assert_eq!(error.transaction_id, None);
        }
        let error = request_error(&announce_bytes(&[])[..97]);
        assert_eq!(error.kind, ParseErrorKind::TooShort);
        assert_eq!(
            error.connection_id,
            Some(ConnectionId(0x1234_5678_9abc_def0))
        );
        assert_eq!(error.transaction_id, Some(TransactionId(-7)));
    }

    #[test]
    fn connect_needs_the_magic_and_tolerates_trailing_bytes() {
        let error = request_error(&header(PROTOCOL_ID + 1, ACTION_CONNECT, 5));
        assert_eq!(error.kind, ParseErrorKind::BadProtocolId);
        assert_eq!(error.transaction_id, Some(TransactionId(5)));

        let mut padded = header(PROTOCOL_ID, ACTION_CONNECT, 5);
        padded.extend_from_slice(&[0; 4]);
        let expected = Request::Connect(ConnectRequest {
            transaction_id: TransactionId(5),
        });
        assert_eq!(Request::parse(&padded), Ok(expected));
    }

    #[test]
    fn unknown_actions_are_refused() {
        for action in [ACTION_ERROR, 4, -1, i32::MAX] {
            let error = request_error(&header(PROTOCOL_ID, action, 1));
            assert_eq!(error.kind, ParseErrorKind::UnknownAction);
        }
    }

    #[test]
    fn bad_event_is_refused() {
        let mut bytes = announce_bytes(&[]);
        bytes[80..84].copy_from_slice(&4i32.to_be_bytes());
        assert_eq!(request_error(&bytes).kind, ParseErrorKind::BadEvent);
    }

    #[test]
    fn truncated_options_are_refused() {
        for tail in [&[2][..], &[2, 3, b'a', b'b'], &[1, 2], &[2, 0, 2, 255]] {
            let error = request_error(&announce_bytes(tail));
            assert_eq!(error.kind, ParseErrorKind::TruncatedOption, "{tail:?}");
        }
    }

    #[test]
    fn options_stop_at_end_or_unknown_type() {
        for tail in [
            &[2, 1, b'a', 0, 2, 9][..],
            &[2, 1, b'a', 7, 2, 9],
            &[1, 1, 2, 1, b'a'],
        ] {
            let bytes = announce_bytes(tail);
            let Ok(Request::Announce(request)) = Request::parse(&bytes) else {
                panic!("announce with options {tail:?} refused");
            };
            assert_eq!(request.url_data().collect::<Vec<_>>(), [b"a"]);
        }
    }

    #[test]
    fn url_data_split_over_two_options() {
        // A libtorrent-style started announce for a private torrent.
        let mut options = Vec::new();
        for part in [&b"/announce"[..], b"?passkey=abc"] {
            AnnounceOptions::write_url_data(&mut options, part);
        }
        options.push(OPTION_END);
        let bytes = announce_bytes(&options);
        assert_eq!(bytes.len(), 98 + 2 + 9 + 2 + 12 + 1);

        let Ok(Request::Announce(request)) = Request::parse(&bytes) else {
            panic!("announce refused");
        };
        assert_eq!(
            request.url_data().collect::<Vec<_>>().concat(),
            b"/announce?passkey=abc"
        );
        assert_eq!(request.event, AnnounceEvent::Started);
        assert_eq!(request.num_want, -1);
        assert_eq!(request.port, 6881);
        assert_eq!(request.peer_id, PeerId(*b"-lt20A0-abcdefghijkl"));
    }

    #[test]
    fn long_url_data_is_split_into_255_byte_options() {
        let url = [b'x'; 600];
        let mut options = Vec::new();
        AnnounceOptions::write_url_data(&mut options, &url);
        let parsed = AnnounceOptions::parse(&options).expect("valid options");
        let lens: Vec<_> = parsed.url_data().map(<[u8]>::len).collect();
        assert_eq!(lens, [255, 255, 90]);
    }

    #[test]
    fn negative_counters_read_as_large_unsigned() {
        let mut bytes = announce_bytes(&[]);
        bytes[64..72].copy_from_slice(&(-1i64).to_be_bytes());
        let Ok(Request::Announce(request)) = Request::parse(&bytes) else {
            panic!("announce refused");
        };
        assert_eq!(request.left, u64::MAX);
    }

    #[test]
    fn bad_scrape_lengths_are_refused() {
        let cases = [
            (0, ParseErrorKind::NoInfoHashes),
            (19, ParseErrorKind::BadLength),
            (21, ParseErrorKind::BadLength),
            (20 * 75, ParseErrorKind::TooManyInfoHashes),
        ];
        for (tail, kind) in cases {
            let mut bytes = header(42, ACTION_SCRAPE, 3);
            bytes.resize(16 + tail, 0xee);
            let error = request_error(&bytes);
            assert_eq!(error.kind, kind, "{tail} bytes of hashes");
            assert_eq!(error.connection_id, Some(ConnectionId(42)));
            assert_eq!(error.transaction_id, Some(TransactionId(3)));
        }
    }

    #[test]
    fn malformed_responses_are_refused() {
        let txid = TransactionId(1);
        let mut connect = Vec::new();
        write_connect_response(&mut connect, txid, ConnectionId(2));
        let mut announce = Vec::new();
        write_announce_response(&mut announce, txid, 1, 2, 3, &[]);
        let mut scrape = Vec::new();
        write_scrape_response(&mut scrape, txid, [ScrapeStats::default()]);
        let cases = [
            (&connect[..12], IpFamily::V4, ParseErrorKind::TooShort),
            (&connect[..7], IpFamily::V4, ParseErrorKind::TooShort),
            (&announce[..19], IpFamily::V4, ParseErrorKind::TooShort),
            (&scrape[..19], IpFamily::V4, ParseErrorKind::BadLength),
            (
                &[0, 0, 0, 9, 0, 0, 0, 1][..],
                IpFamily::V4,
                ParseErrorKind::UnknownAction,
            ),
        ];
        for (bytes, family, kind) in cases {
            let error = Response::parse(bytes, family).expect_err("malformed response parsed");
            assert_eq!(error.kind, kind, "{bytes:?}");
            assert_eq!(error.connection_id, None);
        }
        // Six bytes of peers are one IPv4 peer but a third of an IPv6 one.
        announce.extend_from_slice(&[127, 0, 0, 1, 0x1a, 0xe1]);
        assert!(Response::parse(&announce, IpFamily::V4).is_ok());
        let error = Response::parse(&announce, IpFamily::V6).expect_err("parsed");
        assert_eq!(error.kind, ParseErrorKind::BadLength);
    }

    fn event() -> impl Strategy<Value = AnnounceEvent> {
        prop_oneof![
            Just(AnnounceEvent::None),
            Just(AnnounceEvent::Completed),
            Just(AnnounceEvent::Started),
            Just(AnnounceEvent::Stopped),
        ]
    }

    fn family() -> impl Strategy<Value = IpFamily> {
        prop_oneof![Just(IpFamily::V4), Just(IpFamily::V6)]
    }

    /// Options as a client might send them: URLData (`Some`) and NOPs (`None`),
    /// then maybe EndOfOptions followed by junk.
    fn options() -> impl Strategy<Value = (Vec<Option<Vec<u8>>>, Option<Vec<u8>>)> {
        let option = prop_oneof![Just(None), vec(any::<u8>(), 0..=255).prop_map(Some)];
        (
            vec(option, 0..4),
            proptest::option::of(vec(any::<u8>(), 0..8)),
        )
    }

    /// Parses, writes and parses again, which must give the same value.
    fn assert_reparses(bytes: &[u8], family: IpFamily) {
        if let Ok(request) = Request::parse(bytes) {
            let mut out = Vec::new();
            request.write(&mut out);
            assert_eq!(Request::parse(&out), Ok(request));
            match request {
                Request::Announce(announce) => {
                    assert_eq!(
                        Request::peek_announce(bytes),
                        Some(AnnouncePeek {
                            info_hash: announce.info_hash,
                            port: announce.port
                        })
                    );
                    let url_len: usize = announce.url_data().map(<[u8]>::len).sum();
                    assert!(url_len <= announce.options.as_bytes().len());
                }
                Request::Scrape(scrape) => {
                    assert_eq!(Request::peek_announce(bytes), None);
                    assert_eq!(scrape.info_hashes.iter().count(), scrape.info_hashes.len());
                }
                Request::Connect(_) => assert_eq!(Request::peek_announce(bytes), None),
            }
        }
        if let Ok(response) = Response::parse(bytes, family) {
            let mut out = Vec::new();
            response.write(&mut out);
            assert_eq!(Response::parse(&out, family), Ok(response));
            match response {
                Response::Announce { peers, .. } => assert_eq!(peers.iter().count(), peers.len()),
                Response::Scrape { stats, .. } => assert_eq!(stats.iter().count(), stats.len()),
                _ => {}
            }
        }
    }

    proptest! {
        #[test]
        fn connect_request_round_trips(txid: i32) {
            let request = Request::Connect(ConnectRequest { transaction_id: TransactionId(txid) });
            let mut out = Vec::new();
            request.write(&mut out);
            prop_assert_eq!(out.len(), 16);
            prop_assert_eq!(Request::parse(&out), Ok(request));
        }

        #[test]
        fn announce_request_round_trips(
            ids in (any::<i64>(), any::<i32>()),
            hashes in (any::<[u8; 20]>(), any::<[u8; 20]>()),
            counters in (any::<u64>(), any::<u64>(), any::<u64>()),
            event in event(),
            fields in (any::<u32>(), any::<u32>(), any::<i32>(), any::<u16>()),
            (options, end) in options(),
        ) {
            let mut option_bytes = Vec::new();
            for option in &options {
                match option {
                    Some(data) => {
                        option_bytes.extend_from_slice(&[OPTION_URL_DATA, data.len() as u8]);
                        option_bytes.extend_from_slice(data);
                    }
                    None => option_bytes.push(OPTION_NOP),
                }
            }
            if let Some(junk) = &end {
                option_bytes.push(OPTION_END);
                option_bytes.extend_from_slice(junk);
            }
            let request = AnnounceRequest {
                connection_id: ConnectionId(ids.0),
                transaction_id: TransactionId(ids.1),
                info_hash: InfoHash(hashes.0),
                peer_id: PeerId(hashes.1),
                downloaded: counters.0,
                left: counters.1,
                uploaded: counters.2,
                event,
                ip_address: fields.0,
                key: fields.1,
                num_want: fields.2,
                port: fields.3,
                options: AnnounceOptions::parse(&option_bytes).expect("valid options"),
            };
            let mut out = Vec::new();
            Request::Announce(request).write(&mut out);
            prop_assert_eq!(out.len(), ANNOUNCE_REQUEST_LEN + option_bytes.len());
            let parsed = Request::parse(&out);
            prop_assert_eq!(parsed, Ok(Request::Announce(request)));
            let peek = AnnouncePeek {
                info_hash: request.info_hash,
                port: request.port,
            };
            prop_assert_eq!(Request::peek_announce(&out), Some(peek));
            let url: Vec<u8> = options.iter().flatten().flatten().copied().collect();
            prop_assert_eq!(request.url_data().collect::<Vec<_>>().concat(), url);
        }

        #[test]
        fn scrape_request_round_trips(
            ids in (any::<i64>(), any::<i32>()),
            hashes in vec(any::<[u8; 20]>().prop_map(InfoHash), 1..=MAX_SCRAPE_INFO_HASHES),
        ) {
            let mut out = Vec::new();
            write_scrape_request(&mut out, ConnectionId(ids.0), TransactionId(ids.1), &hashes);
            let Ok(Request::Scrape(request)) = Request::parse(&out) else {
                panic!("scrape refused");
            };
            prop_assert_eq!(request.connection_id, ConnectionId(ids.0));
            prop_assert_eq!(request.transaction_id, TransactionId(ids.1));
            prop_assert_eq!(request.info_hashes.len(), hashes.len());
            prop_assert_eq!(request.info_hashes.iter().collect::<Vec<_>>(), hashes);
            let mut again = Vec::new();
            Request::Scrape(request).write(&mut again);
            prop_assert_eq!(again, out);
        }

        #[test]
        fn announce_response_round_trips(
            family in family(),
            counts in (any::<i32>(), any::<u32>(), any::<u32>(), any::<u32>()),
            peer_bytes in (0..=MAX_PEERS_V4).prop_flat_map(|n| vec(any::<u8>(), n * 18)),
        ) {
            let len = peer_bytes.len() / 18 * family.peer_len();
            let peers = CompactPeers::parse(family, &peer_bytes[..len]).expect("whole peers");
            let response = Response::Announce {
                transaction_id: TransactionId(counts.0),
                interval: counts.1,
                leechers: counts.2,
                seeders: counts.3,
                peers,
            };
            let mut out = Vec::new();
            response.write(&mut out);
            prop_assert_eq!(Response::parse(&out, family), Ok(response));
        }

        #[test]
        fn announce_response_from_peers_round_trips(
            family in family(),
            addrs in vec(any::<SocketAddr>(), 0..MAX_PEERS_V4),
        ) {
            let mut peers = AnswerPeers::default();
            peers.reset(family);
            let expected: Vec<_> = addrs
                .iter()
                .filter(|&&addr| peers.push_addr(addr, None))
                .map(|addr| SocketAddr::new(addr.ip().to_canonical(), addr.port()))
                .collect();
            let mut out = Vec::new();
            write_announce_response(&mut out, TransactionId(3), 1800, 4, 5, peers.compact());
            let Ok(Response::Announce { transaction_id, interval, leechers, seeders, peers }) =
                Response::parse(&out, family)
            else {
                panic!("announce response refused");
            };
            prop_assert_eq!((transaction_id, interval, leechers, seeders), (TransactionId(3), 1800, 4, 5));
            prop_assert_eq!(peers.len(), expected.len());
            prop_assert_eq!(peers.iter().collect::<Vec<_>>(), expected);
        }

        #[test]
        fn scrape_response_round_trips(
            txid: i32,
            stats in vec(any::<(u32, u32, u32)>(), 0..=MAX_SCRAPE_INFO_HASHES),
        ) {
            let stats: Vec<_> = stats
                .into_iter()
                .map(|(seeders, completed, leechers)| ScrapeStats { seeders, completed, leechers })
                .collect();
            let mut out = Vec::new();
            write_scrape_response(&mut out, TransactionId(txid), stats.iter().copied());
            let parsed = Response::parse(&out, IpFamily::V4);
            let Ok(Response::Scrape { transaction_id, stats: list }) = parsed else {
                panic!("scrape response refused");
            };
            prop_assert_eq!(transaction_id, TransactionId(txid));
            prop_assert_eq!(list.iter().collect::<Vec<_>>(), stats);
            let mut again = Vec::new();
            parsed.expect("parsed").write(&mut again);
            prop_assert_eq!(again, out);
        }

        #[test]
        fn connect_and_error_responses_round_trip(
            txid: i32,
            connection_id: i64,
            message in vec(any::<u8>(), 0..100),
            family in family(),
        ) {
            let responses = [
                Response::Connect { transaction_id: TransactionId(txid), connection_id: ConnectionId(connection_id) },
                Response::Error { transaction_id: TransactionId(txid), message: &message },
            ];
            for response in responses {
                let mut out = Vec::new();
                response.write(&mut out);
                prop_assert_eq!(Response::parse(&out, family), Ok(response));
                prop_assert_eq!(response.transaction_id(), TransactionId(txid));
            }
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..2000), family in family()) {
            assert_reparses(&bytes, family);
        }

        /// Random bytes rarely hold a known action; this puts one in front.
        #[test]
        fn arbitrary_bodies_never_panic(
            magic: bool,
            action in 0..5i32,
            body in vec(any::<u8>(), 0..2000),
            family in family(),
        ) {
            let mut bytes = header(if magic { PROTOCOL_ID } else { 1 }, action, 7);
            bytes.extend_from_slice(&body);
            assert_reparses(&bytes, family);
            // The same body as a response: action and transaction id first.
            assert_reparses(&bytes[8..], family);
        }
    }
}
