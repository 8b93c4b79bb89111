//! Responses: written by the tracker, parsed by the load generator and tests.

use super::*;

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
/// [`crate::AnswerPeers::compact`]) of the family the
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
