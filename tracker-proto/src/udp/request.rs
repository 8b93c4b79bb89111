//! Requests: parsed by the tracker, written by the load generator and tests.

use super::*;

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
        let action = bytes.get(ACTION_OFFSET..ACTION_OFFSET + 4)?;
        if bytes.len() < ANNOUNCE_REQUEST_LEN || action != ACTION_ANNOUNCE.to_be_bytes() {
            return None;
        }
        let info_hash = bytes.get(INFO_HASH_OFFSET..INFO_HASH_OFFSET + INFO_HASH_LEN)?;
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

    /// Validates `bytes` as options: an option whose length byte or data
    /// runs past the end is refused, whatever its type; an unknown type is
    /// skipped by its length (BEP 41), so URLData after it still counts;
    /// whatever follows EndOfOptions is ignored.
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
/// truncated option; it stops at EndOfOptions. Every type but EndOfOptions
/// and NOP has a length byte, so one it does not know is stepped over.
struct OptionWalk<'a>(&'a [u8]);

impl<'a> Iterator for OptionWalk<'a> {
    type Item = Result<&'a [u8], ParseErrorKind>;

    fn next(&mut self) -> Option<Self::Item> {
        loop {
            let (&option, tail) = self.0.split_first()?;
            match option {
                OPTION_END => {
                    self.0 = &[];
                    return None;
                }
                OPTION_NOP => self.0 = tail,
                _ => {
                    let split = tail
                        .split_first()
                        .and_then(|(&len, tail)| tail.split_at_checked(len.into()));
                    let Some((data, tail)) = split else {
                        self.0 = &[];
                        return Some(Err(ParseErrorKind::TruncatedOption));
                    };
                    self.0 = tail;
                    if option == OPTION_URL_DATA {
                        return Some(Ok(data));
                    }
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
