//! Parsing of tracker requests: the HTTP head ([`parse_head`]), then the query of an
//! announce ([`parse_announce`]) or a scrape ([`parse_scrape`]); and the reverse,
//! building request targets for a load generator ([`write_announce_target`],
//! [`write_scrape_target`]).
//!
//! Nothing here allocates, except that [`parse_scrape`] pushes into a vector the
//! caller reuses. Query values are percent-decoded on the fly (`+` is a space, as in
//! HTML forms); keys are compared as sent. Unknown keys are ignored; a repeated key
//! counts once, with its last value, except `info_hash` in a scrape.

use std::fmt;
use std::net::IpAddr;

use crate::is_host_address;

/// Header lines a request may carry; more are refused with 431.
pub const MAX_HEADERS: usize = 32;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/announce` (or `/announce/`).
    Announce,
    /// `/scrape` (or `/scrape/`).
    Scrape,
    /// A WebSocket upgrade (WebTorrent) of `/` or `/announce`: the request's
    /// `websocket_key` holds its `Sec-WebSocket-Key`.
    WebSocket,
}

/// Whether the connection stays open after the answer, and what the answer's
/// `Connection` header must say so that the client agrees.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Connection {
    /// HTTP/1.1 without `Connection: close`: persistent by default, no header needed.
    KeepAlive,
    /// HTTP/1.0 with `Connection: keep-alive`: the answer must repeat it.
    KeepAliveHttp10,
    /// Anything else: answer with `Connection: close`, then close.
    Close,
}

impl Connection {
    pub fn keep_alive(self) -> bool {
        self != Connection::Close
    }
}

/// A complete request head.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Request<'a> {
    pub endpoint: Endpoint,
    /// The raw query, after `?` (empty without one), for [`parse_announce`] or
    /// [`parse_scrape`].
    pub query: &'a [u8],
    /// An upgrade's `Sec-WebSocket-Key` ([`Endpoint::WebSocket`] only).
    pub websocket_key: Option<&'a [u8]>,
    /// The key in the path of an announce or scrape
    /// (`/announce/{key}` or `/{key}/announce`): a private tracker's
    /// passkey. A secret: never logged.
    pub key: Option<&'a [u8]>,
    /// The `User-Agent` header, as sent.
    pub user_agent: Option<&'a [u8]>,
    /// It carries a header that browsers send and BitTorrent clients do not
    /// (see [`BROWSER_HEADERS`]): a private tracker refuses it.
    pub browser_headers: bool,
    pub connection: Connection,
    /// The address in the real-IP header, read from a trusted proxy only
    /// ([`RealIp::Required`]); `None` otherwise.
    pub real_ip: Option<IpAddr>,
    /// The real-IP header came from a client that is not a trusted proxy
    /// ([`RealIp::Ignored`]): it was not read.
    pub real_ip_ignored: bool,
}

/// How [`parse_head`] treats the real-IP header (such as `X-Forwarded-For`)
/// that a reverse proxy sets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RealIp<'a> {
    /// None is configured: the connection's address is the client's.
    Off,
    /// The connection comes from a trusted proxy: the header must hold the
    /// client's address.
    Required(&'a str),
    /// The connection does not come from a trusted proxy: the header is not
    /// read (anyone could name any address in it), only noticed.
    Ignored(&'a str),
}

/// The outcome of [`parse_head`] on the bytes received so far.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// The head is not complete yet: read more and parse again.
    Partial,
    /// A request whose head took the first `consumed` bytes; a pipelined request
    /// may follow them.
    Complete {
        request: Request<'a>,
        consumed: usize,
    },
}

/// Why a request gets no regular answer.
///
/// After an error from [`parse_head`] the position in the byte stream is lost:
/// answer with `Connection: close`, then close. Errors from [`parse_announce`] and
/// [`parse_scrape`] come after a complete head, so the connection may go on as the
/// request's [`Connection`] says.
///
/// Errors of the HTTP layer have a 4xx [`status`](Self::status). Tracker failures
/// (bad or missing query values, a bad real-IP header) have status 200, because
/// BitTorrent clients show the bencoded `failure reason` only of a 200 answer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RequestError {
    /// Not HTTP/1.x, or a broken header value.
    Malformed,
    /// Too many header lines, or (the caller's judgement) a head that does not fit
    /// its buffer.
    HeadTooLarge,
    /// A `Content-Length` above 0 or a `Transfer-Encoding`: tracker requests have no body.
    BodyNotAllowed,
    NotFound,
    MethodNotAllowed,
    MissingRealIp,
    InvalidRealIp,
    /// A `%` not followed by two hex digits.
    BadEscape,
    /// `Upgrade: websocket` without a key, or of a version other than 13.
    BadUpgrade,
    MissingInfoHash,
    InvalidInfoHash,
    MissingPeerId,
    InvalidPeerId,
    MissingPort,
    InvalidPort,
    InvalidUploaded,
    InvalidDownloaded,
    InvalidLeft,
    InvalidEvent,
    InvalidCompact,
    InvalidNoPeerId,
    InvalidNumwant,
    TooManyInfoHashes,
}

impl RequestError {
    /// The HTTP status of the answer.
    pub fn status(self) -> u16 {
        match self {
            RequestError::Malformed | RequestError::BodyNotAllowed | RequestError::BadUpgrade => {
                400
            }
            RequestError::NotFound => 404,
            RequestError::MethodNotAllowed => 405,
            RequestError::HeadTooLarge => 431,
            _ => 200,
        }
    }

    /// The text for the answer's bencoded `failure reason`.
    pub fn reason(self) -> &'static str {
        match self {
            RequestError::Malformed => "malformed HTTP request",
            RequestError::HeadTooLarge => "request header too large",
            RequestError::BodyNotAllowed => "request body not allowed",
            RequestError::NotFound => "not found",
            RequestError::MethodNotAllowed => "method not allowed",
            RequestError::MissingRealIp => "missing real IP header",
            RequestError::InvalidRealIp => "invalid real IP header",
            RequestError::BadEscape => "invalid percent-encoding",
            RequestError::BadUpgrade => "invalid WebSocket upgrade",
            RequestError::MissingInfoHash => "missing info_hash",
            RequestError::InvalidInfoHash => "info_hash is not 20 bytes",
            RequestError::MissingPeerId => "missing peer_id",
            RequestError::InvalidPeerId => "peer_id is not 20 bytes",
            RequestError::MissingPort => "missing port",
            RequestError::InvalidPort => "invalid port",
            RequestError::InvalidUploaded => "invalid uploaded",
            RequestError::InvalidDownloaded => "invalid downloaded",
            RequestError::InvalidLeft => "invalid left",
            RequestError::InvalidEvent => "invalid event",
            RequestError::InvalidCompact => "invalid compact",
            RequestError::InvalidNoPeerId => "invalid no_peer_id",
            RequestError::InvalidNumwant => "invalid numwant",
            RequestError::TooManyInfoHashes => "too many info_hash values",
        }
    }
}

impl fmt::Display for RequestError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.reason())
    }
}

impl std::error::Error for RequestError {}

/// Parses the request head at the start of `buf`.
///
/// Only `GET` of `/announce` and `/scrape` (a trailing `/` allowed) is served,
/// and a WebSocket upgrade (`Upgrade: websocket`, version 13) of `/` or
/// `/announce`, as WebTorrent's announce URLs name them.
/// With [`RealIp::Required`] (the connection comes from a trusted reverse
/// proxy), the named header must hold the address of one host; of a
/// comma-separated list, and of repeated header lines, the right-most address
/// counts: it is the one the proxy added, while those left of it come from the
/// client and can be forged.
///
/// A head that stays [`Parsed::Partial`] with the caller's buffer full should be
/// answered with [`RequestError::HeadTooLarge`].
pub fn parse_head<'a>(buf: &'a [u8], real_ip: RealIp<'_>) -> Result<Parsed<'a>, RequestError> {
    let real_ip_header = match real_ip {
        RealIp::Off => None,
        RealIp::Required(name) | RealIp::Ignored(name) => Some(name),
    };
    let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
    let mut head = httparse::Request::new(&mut headers);
    let consumed = match head.parse(buf) {
        Ok(httparse::Status::Complete(consumed)) => consumed,
        Ok(httparse::Status::Partial) => return Ok(Parsed::Partial),
        Err(httparse::Error::TooManyHeaders) => return Err(RequestError::HeadTooLarge),
        Err(_) => return Err(RequestError::Malformed),
    };
    let (Some(method), Some(target), Some(version)) = (head.method, head.path, head.version) else {
        return Err(RequestError::Malformed);
    };

    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let upgrade = head.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("upgrade")
            && h.value.trim_ascii().eq_ignore_ascii_case(b"websocket")
    });
    let (endpoint, key) = match route(path.as_bytes()) {
        Some((Endpoint::Announce, None)) if upgrade => (Endpoint::WebSocket, None),
        Some(route) => route,
        None if upgrade && path == "/" => (Endpoint::WebSocket, None),
        None => return Err(RequestError::NotFound),
    };
    if method != "GET" {
        return Err(RequestError::MethodNotAllowed);
    }
    let mut websocket_key = None;
    if endpoint == Endpoint::WebSocket {
        let mut version_13 = false;
        for header in head.headers.iter() {
            if header.name.eq_ignore_ascii_case("sec-websocket-key") {
                websocket_key = Some(header.value.trim_ascii());
            } else if header.name.eq_ignore_ascii_case("sec-websocket-version") {
                version_13 = header.value.trim_ascii() == b"13";
            }
        }
        // RFC 6455: a 16-byte nonce in base64 is 24 characters.
        if !version_13 || websocket_key.is_none_or(|key| key.len() != 24) {
            return Err(RequestError::BadUpgrade);
        }
    }

    let (mut close, mut keep_alive) = (false, false);
    let mut real_ip_value = None;
    let mut user_agent = None;
    let mut browser_headers = false;
    for header in head.headers.iter() {
        let name = header.name;
        if name.eq_ignore_ascii_case("user-agent") {
            user_agent = Some(header.value);
        }
        browser_headers |= BROWSER_HEADERS
            .iter()
            .any(|browser| name.eq_ignore_ascii_case(browser));
        if name.eq_ignore_ascii_case("content-length") {
            match parse_decimal(header.value.trim_ascii()) {
                Some(0) => {}
                Some(_) => return Err(RequestError::BodyNotAllowed),
                None => return Err(RequestError::Malformed),
            }
        } else if name.eq_ignore_ascii_case("transfer-encoding") {
            return Err(RequestError::BodyNotAllowed);
        } else if name.eq_ignore_ascii_case("connection") {
            for option in header.value.split(|&b| b == b',') {
                let option = option.trim_ascii();
                close |= option.eq_ignore_ascii_case(b"close");
                keep_alive |= option.eq_ignore_ascii_case(b"keep-alive");
            }
        }
        if real_ip_header.is_some_and(|wanted| name.eq_ignore_ascii_case(wanted)) {
            real_ip_value = Some(header.value);
        }
    }

    let (real_ip, real_ip_ignored) = match (real_ip, real_ip_value) {
        (RealIp::Off, _) => (None, false),
        (RealIp::Ignored(_), value) => (None, value.is_some()),
        (RealIp::Required(_), None) => return Err(RequestError::MissingRealIp),
        (RealIp::Required(_), Some(value)) => (Some(parse_forwarded_ip(value)?), false),
    };
    let connection = match version {
        _ if close => Connection::Close,
        1 => Connection::KeepAlive,
        _ if keep_alive => Connection::KeepAliveHttp10,
        _ => Connection::Close,
    };
    let request = Request {
        endpoint,
        query: query.as_bytes(),
        websocket_key,
        key,
        user_agent,
        browser_headers,
        connection,
        real_ip,
        real_ip_ignored,
    };
    Ok(Parsed::Complete { request, consumed })
}

/// Headers that browsers (and the cheating tools that pose as clients
/// through them) send, and BitTorrent clients do not: UNIT3D-Announce's
/// list, refused in private mode.
pub const BROWSER_HEADERS: [&str; 4] = [
    "accept-language",
    "referer",
    "accept-charset",
    "want-digest",
];

/// Longest key a path may carry (a UNIT3D passkey has 32 bytes).
pub const MAX_PATH_KEY: usize = 64;

/// What an announce URL's path names: `/announce` or `/scrape` (a trailing
/// `/` allowed), or either with a key in UNIT3D's form (`/announce/{key}`)
/// or Gazelle's (`/{key}/announce`). A key is one path segment of 1 to
/// [`MAX_PATH_KEY`] bytes, kept as sent. Also reads the path of a UDP
/// announce's URLData (BEP 41), whose query the caller cuts off first.
pub fn route(path: &[u8]) -> Option<(Endpoint, Option<&[u8]>)> {
    let path = path.strip_suffix(b"/").unwrap_or(path);
    let rest = path.strip_prefix(b"/")?;
    let endpoint = |name: &[u8]| match name {
        b"announce" => Some(Endpoint::Announce),
        b"scrape" => Some(Endpoint::Scrape),
        _ => None,
    };
    let is_key = |key: &[u8]| (1..=MAX_PATH_KEY).contains(&key.len()) && !key.contains(&b'/');
    match rest.iter().position(|&b| b == b'/') {
        None => Some((endpoint(rest)?, None)),
        Some(slash) => {
            let (first, second) = (rest.get(..slash)?, rest.get(slash + 1..)?);
            match endpoint(first) {
                Some(e) if is_key(second) => Some((e, Some(second))),
                Some(_) => None,
                None if is_key(first) => Some((endpoint(second)?, Some(first))),
                None => None,
            }
        }
    }
}

/// The right-most address of a comma-separated list, if it names one host.
fn parse_forwarded_ip(value: &[u8]) -> Result<IpAddr, RequestError> {
    let last = value.rsplit(|&b| b == b',').next().unwrap_or(value);
    std::str::from_utf8(last.trim_ascii())
        .ok()
        .and_then(|text| text.parse().ok())
        .filter(|&ip| is_host_address(ip))
        .ok_or(RequestError::InvalidRealIp)
}

/// A plain decimal number, for headers.
fn parse_decimal(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text)
        .ok()
        .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
}
