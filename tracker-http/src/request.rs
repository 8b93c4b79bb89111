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
use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use tracker_common::types::{hex_digit, is_host_address, AnnounceEvent, InfoHash, PeerId};

/// Header lines a request may carry; more are refused with 431.
pub const MAX_HEADERS: usize = 32;

/// What a request asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    /// `/announce` (or `/announce/`).
    Announce,
    /// `/scrape` (or `/scrape/`).
    Scrape,
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
            RequestError::Malformed | RequestError::BodyNotAllowed => 400,
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
/// Only `GET` of `/announce` and `/scrape` (a trailing `/` allowed) is served.
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
    let endpoint = match path.strip_suffix('/').unwrap_or(path) {
        "/announce" => Endpoint::Announce,
        "/scrape" => Endpoint::Scrape,
        _ => return Err(RequestError::NotFound),
    };
    if method != "GET" {
        return Err(RequestError::MethodNotAllowed);
    }

    let (mut close, mut keep_alive) = (false, false);
    let mut real_ip_value = None;
    for header in head.headers.iter() {
        let name = header.name;
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
        connection,
        real_ip,
        real_ip_ignored,
    };
    Ok(Parsed::Complete { request, consumed })
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

/// The query of an announce.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnounceRequest<'a> {
    pub info_hash: InfoHash,
    pub peer_id: PeerId,
    /// Never 0.
    pub port: u16,
    pub uploaded: u64,
    pub downloaded: u64,
    /// Bytes left to download. A client that does not say (BEP 3 requires it, but
    /// leniency costs nothing) reads as `u64::MAX`: a leecher.
    pub left: u64,
    /// `started`, `completed`, `stopped`, or none for an absent or empty value and
    /// for BEP 21's `paused` (a partial seed announcing as usual). Others are refused.
    pub event: AnnounceEvent,
    /// BEP 23 compact peers: the default, off only with `compact=0`.
    pub compact: bool,
    pub no_peer_id: bool,
    /// `numwant`, saturated to `u32::MAX`; the server clamps it.
    pub numwant: Option<u32>,
    /// `key` as sent, still percent-encoded.
    pub key: Option<&'a [u8]>,
    /// `trackerid` as sent, still percent-encoded.
    pub trackerid: Option<&'a [u8]>,
    /// The BEP 3 / BEP 7 `ip`, `ipv4` and `ipv6` parameters. A tracker normally
    /// ignores them (a client could name someone else's address), and so they are
    /// only read when they hold an address (optionally with a port, which is
    /// dropped); anything else, such as the DNS name BEP 3 allows, reads as `None`.
    pub ip: Option<IpAddr>,
    pub ipv4: Option<Ipv4Addr>,
    pub ipv6: Option<Ipv6Addr>,
}

impl AnnounceRequest<'_> {
    /// An announce with the required parameters only: every other one reads as
    /// it does when a client leaves it out.
    pub fn new(info_hash: InfoHash, peer_id: PeerId, port: u16) -> Self {
        AnnounceRequest {
            info_hash,
            peer_id,
            port,
            uploaded: 0,
            downloaded: 0,
            left: u64::MAX,
            event: AnnounceEvent::None,
            compact: true,
            no_peer_id: false,
            numwant: None,
            key: None,
            trackerid: None,
            ip: None,
            ipv4: None,
            ipv6: None,
        }
    }
}

/// Parses the query of an announce. `info_hash`, `peer_id` and `port` are required.
pub fn parse_announce(query: &[u8]) -> Result<AnnounceRequest<'_>, RequestError> {
    let (mut info_hash, mut peer_id, mut port) = (None, None, None);
    let mut announce = AnnounceRequest::new(InfoHash::default(), PeerId::default(), 0);
    for (key, value) in pairs(query) {
        match key {
            b"info_hash" => info_hash = Some(decode_20(value, RequestError::InvalidInfoHash)?),
            b"peer_id" => peer_id = Some(decode_20(value, RequestError::InvalidPeerId)?),
            b"port" => {
                let n = decode_u64(value, RequestError::InvalidPort)?;
                port = Some(
                    u16::try_from(n)
                        .ok()
                        .filter(|&p| p != 0)
                        .ok_or(RequestError::InvalidPort)?,
                );
            }
            b"uploaded" => announce.uploaded = decode_u64(value, RequestError::InvalidUploaded)?,
            b"downloaded" => {
                announce.downloaded = decode_u64(value, RequestError::InvalidDownloaded)?;
            }
            b"left" => announce.left = decode_u64(value, RequestError::InvalidLeft)?,
            b"event" => announce.event = decode_event(value)?,
            b"compact" => announce.compact = decode_u64(value, RequestError::InvalidCompact)? != 0,
            b"no_peer_id" => {
                announce.no_peer_id = decode_u64(value, RequestError::InvalidNoPeerId)? != 0;
            }
            b"numwant" => {
                let n = decode_u64(value, RequestError::InvalidNumwant)?;
                announce.numwant = Some(u32::try_from(n).unwrap_or(u32::MAX));
            }
            b"key" => announce.key = Some(value),
            b"trackerid" => announce.trackerid = Some(value),
            b"ip" => announce.ip = decode_ip(value),
            b"ipv4" => announce.ipv4 = decode_ip(value).and_then(ipv4),
            b"ipv6" => announce.ipv6 = decode_ip(value).and_then(ipv6),
            _ => {}
        }
    }
    announce.info_hash = InfoHash(info_hash.ok_or(RequestError::MissingInfoHash)?);
    announce.peer_id = PeerId(peer_id.ok_or(RequestError::MissingPeerId)?);
    announce.port = port.ok_or(RequestError::MissingPort)?;
    Ok(announce)
}

fn ipv4(ip: IpAddr) -> Option<Ipv4Addr> {
    match ip {
        IpAddr::V4(ip) => Some(ip),
        IpAddr::V6(_) => None,
    }
}

fn ipv6(ip: IpAddr) -> Option<Ipv6Addr> {
    match ip {
        IpAddr::V6(ip) => Some(ip),
        IpAddr::V4(_) => None,
    }
}

/// Parses the query of a scrape into `info_hashes` (cleared first), in request
/// order, repeats included. No `info_hash` at all asks for a full scrape, which the
/// server may refuse; more than `max` is an error.
pub fn parse_scrape(
    query: &[u8],
    max: usize,
    info_hashes: &mut Vec<InfoHash>,
) -> Result<(), RequestError> {
    info_hashes.clear();
    for (key, value) in pairs(query) {
        if key == b"info_hash" {
            if info_hashes.len() >= max {
                return Err(RequestError::TooManyInfoHashes);
            }
            info_hashes.push(InfoHash(decode_20(value, RequestError::InvalidInfoHash)?));
        }
    }
    Ok(())
}

/// The `key=value` pairs of a query; a pair without `=` has an empty value.
fn pairs(query: &[u8]) -> impl Iterator<Item = (&[u8], &[u8])> {
    query
        .split(|&b| b == b'&')
        .filter(|pair| !pair.is_empty())
        .map(|pair| {
            let mut parts = pair.splitn(2, |&b| b == b'=');
            let key = parts.next().unwrap_or_default();
            (key, parts.next().unwrap_or_default())
        })
}

/// The bytes of a percent-encoded value.
fn percent_decode(value: &[u8]) -> impl Iterator<Item = Result<u8, RequestError>> + '_ {
    let mut rest = value;
    std::iter::from_fn(move || {
        let (&first, tail) = rest.split_first()?;
        rest = tail;
        Some(match first {
            b'+' => Ok(b' '),
            b'%' => {
                let [high, low, tail @ ..] = rest else {
                    rest = &[];
                    return Some(Err(RequestError::BadEscape));
                };
                rest = tail;
                match (hex_digit(*high), hex_digit(*low)) {
                    (Some(high), Some(low)) => Ok(high << 4 | low),
                    _ => Err(RequestError::BadEscape),
                }
            }
            other => Ok(other),
        })
    })
}

/// Decodes exactly 20 bytes, or fails with `wrong_length`.
fn decode_20(value: &[u8], wrong_length: RequestError) -> Result<[u8; 20], RequestError> {
    let mut out = [0; 20];
    let mut len = 0;
    for byte in percent_decode(value) {
        *out.get_mut(len).ok_or(wrong_length)? = byte?;
        len += 1;
    }
    if len == out.len() {
        Ok(out)
    } else {
        Err(wrong_length)
    }
}

/// Decodes a decimal `u64`, or fails with `invalid`.
fn decode_u64(value: &[u8], invalid: RequestError) -> Result<u64, RequestError> {
    if value.is_empty() {
        return Err(invalid);
    }
    percent_decode(value).try_fold(0u64, |n, byte| {
        let digit = char::from(byte?).to_digit(10).ok_or(invalid)?;
        n.checked_mul(10)
            .and_then(|n| n.checked_add(digit.into()))
            .ok_or(invalid)
    })
}

/// A plain decimal number, for headers.
fn parse_decimal(text: &[u8]) -> Option<u64> {
    std::str::from_utf8(text)
        .ok()
        .filter(|t| t.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|t| t.parse().ok())
}

fn decode_event(value: &[u8]) -> Result<AnnounceEvent, RequestError> {
    let mut buf = [0; 9];
    match decode_into(value, &mut buf) {
        Some(b"started") => Ok(AnnounceEvent::Started),
        Some(b"completed") => Ok(AnnounceEvent::Completed),
        Some(b"stopped") => Ok(AnnounceEvent::Stopped),
        Some(b"" | b"paused") => Ok(AnnounceEvent::None),
        _ => Err(RequestError::InvalidEvent),
    }
}

/// An `ip`, `ipv4` or `ipv6` value: `None` unless it is an address or a socket
/// address (BEP 7's `[v6]:port` included).
fn decode_ip(value: &[u8]) -> Option<IpAddr> {
    // Long enough for any IPv6 socket address text.
    let mut buf = [0; 64];
    let text = std::str::from_utf8(decode_into(value, &mut buf)?).ok()?;
    text.parse()
        .ok()
        .or_else(|| text.parse::<SocketAddr>().ok().map(|s| s.ip()))
}

/// Decodes `value` into `buf`; `None` if it does not fit or has a bad escape.
fn decode_into<'b>(value: &[u8], buf: &'b mut [u8]) -> Option<&'b [u8]> {
    let mut len = 0;
    for byte in percent_decode(value) {
        *buf.get_mut(len)? = byte.ok()?;
        len += 1;
    }
    buf.get(..len)
}

/// Appends `bytes` percent-encoded: RFC 3986 unreserved bytes as they are, all
/// others as `%XX`.
pub fn percent_encode(out: &mut Vec<u8>, bytes: &[u8]) {
    for &b in bytes {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(b);
        } else {
            out.extend_from_slice(&[b'%', upper_hex(b >> 4), upper_hex(b & 15)]);
        }
    }
}

/// The upper-case hex digit of a nibble (`n` below 16).
fn upper_hex(n: u8) -> u8 {
    match n {
        0..=9 => b'0' + n,
        _ => b'A' + (n & 15).saturating_sub(10),
    }
}

/// Appends the request target `/announce?...` of `announce`; [`parse_announce`]
/// reads the query back as it was. `left == u64::MAX` and `compact` are written
/// like any value; `key` and `trackerid` go out as they are.
pub fn write_announce_target(out: &mut Vec<u8>, announce: &AnnounceRequest<'_>) {
    out.extend_from_slice(b"/announce?info_hash=");
    percent_encode(out, &announce.info_hash.0);
    out.extend_from_slice(b"&peer_id=");
    percent_encode(out, &announce.peer_id.0);
    // Writing to a Vec cannot fail.
    let _ = write!(
        out,
        "&port={}&uploaded={}&downloaded={}&left={}&compact={}",
        announce.port,
        announce.uploaded,
        announce.downloaded,
        announce.left,
        u8::from(announce.compact),
    );
    let event = match announce.event {
        AnnounceEvent::None => None,
        AnnounceEvent::Started => Some("started"),
        AnnounceEvent::Completed => Some("completed"),
        AnnounceEvent::Stopped => Some("stopped"),
    };
    if let Some(event) = event {
        let _ = write!(out, "&event={event}");
    }
    if announce.no_peer_id {
        out.extend_from_slice(b"&no_peer_id=1");
    }
    if let Some(numwant) = announce.numwant {
        let _ = write!(out, "&numwant={numwant}");
    }
    for (name, value) in [("key", announce.key), ("trackerid", announce.trackerid)] {
        if let Some(value) = value {
            let _ = write!(out, "&{name}=");
            out.extend_from_slice(value);
        }
    }
    if let Some(ip) = announce.ip {
        let _ = write!(out, "&ip={ip}");
    }
    if let Some(ip) = announce.ipv4 {
        let _ = write!(out, "&ipv4={ip}");
    }
    if let Some(ip) = announce.ipv6 {
        let _ = write!(out, "&ipv6={ip}");
    }
}

/// Appends the request target `/scrape?info_hash=...&info_hash=...`.
pub fn write_scrape_target(out: &mut Vec<u8>, info_hashes: &[InfoHash]) {
    out.extend_from_slice(b"/scrape");
    let mut separator = b'?';
    for info_hash in info_hashes {
        out.push(separator);
        out.extend_from_slice(b"info_hash=");
        percent_encode(out, &info_hash.0);
        separator = b'&';
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    const HASH: &str = "%01%02%03%04%05%06%07%08%09%0a%0B%0c%0D%0e%0F%10abcd";
    const HASH_BYTES: [u8; 20] =
        *b"\x01\x02\x03\x04\x05\x06\x07\x08\x09\x0a\x0b\x0c\x0d\x0e\x0f\x10abcd";
    const PEER: &str = "-XX0001-abcdefghijkl";

    fn head(request: &[u8]) -> Result<Parsed<'_>, RequestError> {
        parse_head(request, RealIp::Off)
    }

    fn complete(parsed: Result<Parsed<'_>, RequestError>) -> (Request<'_>, usize) {
        match parsed {
            Ok(Parsed::Complete { request, consumed }) => (request, consumed),
            other => panic!("not a complete request: {other:?}"),
        }
    }

    fn announce(extra: &str) -> Result<AnnounceRequest<'static>, RequestError> {
        let query = format!("info_hash={HASH}&peer_id={PEER}&port=6881{extra}");
        parse_announce(query.leak().as_bytes())
    }

    #[test]
    fn parses_announce_head() {
        let buf = b"GET /announce?info_hash=x&port=1 HTTP/1.1\r\nHost: t\r\n\r\n";
        let (request, consumed) = complete(head(buf));
        assert_eq!(consumed, buf.len());
        assert_eq!(request.endpoint, Endpoint::Announce);
        assert_eq!(request.query, b"info_hash=x&port=1");
        assert_eq!(request.connection, Connection::KeepAlive);
        assert_eq!(request.real_ip, None);
    }

    #[test]
    fn routes_paths_and_methods() {
        for (buf, expected) in [
            (&b"GET /scrape HTTP/1.1\r\n\r\n"[..], Ok(Endpoint::Scrape)),
            (
                b"GET /scrape/?info_hash=a HTTP/1.1\r\n\r\n",
                Ok(Endpoint::Scrape),
            ),
            (b"GET /announce/ HTTP/1.1\r\n\r\n", Ok(Endpoint::Announce)),
            (
                b"GET /announce.php HTTP/1.1\r\n\r\n",
                Err(RequestError::NotFound),
            ),
            (b"GET / HTTP/1.1\r\n\r\n", Err(RequestError::NotFound)),
            (
                b"GET /announce// HTTP/1.1\r\n\r\n",
                Err(RequestError::NotFound),
            ),
            (
                b"POST /announce HTTP/1.1\r\n\r\n",
                Err(RequestError::MethodNotAllowed),
            ),
            (
                b"HEAD /scrape HTTP/1.1\r\n\r\n",
                Err(RequestError::MethodNotAllowed),
            ),
            (
                b"GET /announce HTTP/2.0\r\n\r\n",
                Err(RequestError::Malformed),
            ),
            (
                b"GET /announce?\xff HTTP/1.1\r\n\r\n",
                Err(RequestError::Malformed),
            ),
            (
                b"GET /\xc3\xa9 HTTP/1.1\r\n\r\n",
                Err(RequestError::NotFound),
            ),
            (b"\x00\x01\x02\r\n\r\n", Err(RequestError::Malformed)),
        ] {
            let got = head(buf).map(|parsed| complete(Ok(parsed)).0.endpoint);
            assert_eq!(got, expected, "{}", String::from_utf8_lossy(buf));
        }
    }

    #[test]
    fn decides_keep_alive() {
        for (version, connection, expected) in [
            ("1.1", "", Connection::KeepAlive),
            ("1.1", "Connection: close\r\n", Connection::Close),
            (
                "1.1",
                "connection: Keep-Alive, CLOSE\r\n",
                Connection::Close,
            ),
            ("1.1", "Connection: keep-alive\r\n", Connection::KeepAlive),
            ("1.0", "", Connection::Close),
            (
                "1.0",
                "Connection: keep-alive\r\n",
                Connection::KeepAliveHttp10,
            ),
            (
                "1.0",
                "Connection: upgrade , Keep-Alive\r\n",
                Connection::KeepAliveHttp10,
            ),
        ] {
            let buf = format!("GET /announce HTTP/{version}\r\n{connection}\r\n");
            assert_eq!(
                complete(head(buf.as_bytes())).0.connection,
                expected,
                "{buf}"
            );
        }
        assert!(Connection::KeepAliveHttp10.keep_alive());
        assert!(!Connection::Close.keep_alive());
    }

    #[test]
    fn refuses_bodies() {
        for (header, expected) in [
            ("Content-Length: 0", Ok(())),
            ("Content-Length:  0 ", Ok(())),
            ("Content-Length: 1", Err(RequestError::BodyNotAllowed)),
            ("Content-Length: x", Err(RequestError::Malformed)),
            ("Content-Length: -0", Err(RequestError::Malformed)),
            (
                "Content-Length: 99999999999999999999999",
                Err(RequestError::Malformed),
            ),
            (
                "Transfer-Encoding: chunked",
                Err(RequestError::BodyNotAllowed),
            ),
        ] {
            let buf = format!("GET /announce HTTP/1.1\r\n{header}\r\n\r\n");
            assert_eq!(head(buf.as_bytes()).map(drop), expected, "{header}");
        }
    }

    #[test]
    fn refuses_too_many_headers() {
        let lines = |n| "X: y\r\n".repeat(n);
        let fits = format!("GET /announce HTTP/1.1\r\n{}\r\n", lines(MAX_HEADERS));
        assert!(head(fits.as_bytes()).is_ok());
        let too_many = format!("GET /announce HTTP/1.1\r\n{}\r\n", lines(MAX_HEADERS + 1));
        assert_eq!(head(too_many.as_bytes()), Err(RequestError::HeadTooLarge));
        assert_eq!(RequestError::HeadTooLarge.status(), 431);
    }

    #[test]
    fn reads_the_right_most_real_ip() {
        let parse = |headers: &str| {
            let buf = format!("GET /announce HTTP/1.1\r\n{headers}\r\n");
            parse_head(buf.as_bytes(), RealIp::Required("X-Forwarded-For"))
                .map(|parsed| complete(Ok(parsed)).0.real_ip)
        };
        let ip = |s: &str| Ok(Some(s.parse().unwrap()));
        assert_eq!(parse("x-forwarded-for: 10.0.0.1\r\n"), ip("10.0.0.1"));
        assert_eq!(
            parse("X-Forwarded-For: 1.1.1.1, 2001:db8::1 \r\n"),
            ip("2001:db8::1")
        );
        assert_eq!(
            parse("X-Forwarded-For: 1.1.1.1\r\nX-Forwarded-For: 3.3.3.3,4.4.4.4\r\n"),
            ip("4.4.4.4")
        );
        assert_eq!(parse(""), Err(RequestError::MissingRealIp));
        assert_eq!(
            parse("X-Real-IP: 1.1.1.1\r\n"),
            Err(RequestError::MissingRealIp)
        );
        for bad in [
            "",
            "1.1.1.1,",
            "example.com",
            "1.1.1.1:80",
            "\u{e9}",
            "0.0.0.0",
            "255.255.255.255",
            "224.0.0.1",
            "::",
            "ff02::1",
        ] {
            let headers = format!("X-Forwarded-For: {bad}\r\n");
            assert_eq!(parse(&headers), Err(RequestError::InvalidRealIp), "{bad}");
        }
        let buf = b"GET /announce HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n";
        let (request, _) = complete(head(buf));
        assert_eq!((request.real_ip, request.real_ip_ignored), (None, false));
    }

    #[test]
    fn a_real_ip_header_from_an_untrusted_client_is_noticed_and_not_read() {
        let buf = b"GET /announce HTTP/1.1\r\nX-Forwarded-For: 1.1.1.1\r\n\r\n";
        let ignored = RealIp::Ignored("x-forwarded-for");
        let (request, _) = complete(parse_head(buf, ignored));
        assert_eq!((request.real_ip, request.real_ip_ignored), (None, true));
        // Nor does its absence (or a bad value) matter.
        let buf = b"GET /announce HTTP/1.1\r\nX-Forwarded-For: nonsense\r\n\r\n";
        assert!(complete(parse_head(buf, ignored)).0.real_ip_ignored);
        let buf = b"GET /announce HTTP/1.1\r\n\r\n";
        let (request, _) = complete(parse_head(buf, ignored));
        assert_eq!((request.real_ip, request.real_ip_ignored), (None, false));
    }

    #[test]
    fn parses_pipelined_requests_in_order() {
        let first = &b"GET /announce?a=1 HTTP/1.1\r\nHost: t\r\n\r\n"[..];
        let second = &b"GET /scrape?b=2 HTTP/1.0\r\n\r\n"[..];
        let buf = [first, second].concat();
        let (request, consumed) = complete(head(&buf));
        assert_eq!(
            (request.endpoint, request.query, consumed),
            (Endpoint::Announce, &b"a=1"[..], first.len())
        );
        let (request, consumed) = complete(head(&buf[consumed..]));
        assert_eq!(
            (request.endpoint, request.query, consumed),
            (Endpoint::Scrape, &b"b=2"[..], second.len())
        );
        assert_eq!(head(b""), Ok(Parsed::Partial));
    }

    #[test]
    fn parses_announce_query() {
        let query = format!(
            "info_hash={HASH}&peer_id={PEER}&port=6881&uploaded=1&downloaded=2&left=0\
             &event=completed&compact=0&no_peer_id=1&numwant=99999999999&key=a%2Bb&trackerid=t\
             &ip=example.com&ipv4=1.2.3.4:5&ipv6=%5B2001:db8::1%5D:6881&unknown=%zz&&flag"
        );
        let announce = parse_announce(query.as_bytes()).unwrap();
        assert_eq!(
            announce,
            AnnounceRequest {
                info_hash: InfoHash(HASH_BYTES),
                peer_id: PeerId(*b"-XX0001-abcdefghijkl"),
                port: 6881,
                uploaded: 1,
                downloaded: 2,
                left: 0,
                event: AnnounceEvent::Completed,
                compact: false,
                no_peer_id: true,
                numwant: Some(u32::MAX),
                key: Some(b"a%2Bb"),
                trackerid: Some(b"t"),
                ip: None,
                ipv4: Some(Ipv4Addr::new(1, 2, 3, 4)),
                ipv6: Some("2001:db8::1".parse().unwrap()),
            }
        );
    }

    #[test]
    fn announce_defaults() {
        let announce = announce("").unwrap();
        assert_eq!(announce.left, u64::MAX);
        assert_eq!(announce.event, AnnounceEvent::None);
        assert!(announce.compact && !announce.no_peer_id);
        assert_eq!(
            (announce.uploaded, announce.downloaded, announce.numwant),
            (0, 0, None)
        );
        assert_eq!(
            (announce.key, announce.trackerid, announce.ip),
            (None, None, None)
        );
    }

    #[test]
    fn last_value_wins() {
        let announce =
            announce("&port=1&left=5&left=6&event=started&event=&peer_id=%41aaaaaaaaaaaaaaaaaaa")
                .unwrap();
        assert_eq!(
            (announce.port, announce.left, announce.event),
            (1, 6, AnnounceEvent::None)
        );
        assert_eq!(&announce.peer_id.0, b"Aaaaaaaaaaaaaaaaaaaa");
    }

    #[test]
    fn reads_events() {
        for (value, expected) in [
            ("started", Ok(AnnounceEvent::Started)),
            ("stopped", Ok(AnnounceEvent::Stopped)),
            ("complete%64", Ok(AnnounceEvent::Completed)),
            ("paused", Ok(AnnounceEvent::None)),
            ("", Ok(AnnounceEvent::None)),
            ("Started", Err(RequestError::InvalidEvent)),
            ("completedx", Err(RequestError::InvalidEvent)),
            ("%ff", Err(RequestError::InvalidEvent)),
        ] {
            assert_eq!(
                announce(&format!("&event={value}")).map(|a| a.event),
                expected,
                "{value}"
            );
        }
    }

    #[test]
    fn refuses_bad_values() {
        use RequestError::*;
        let u64_overflow = "18446744073709551616";
        for (extra, expected) in [
            ("&info_hash=", InvalidInfoHash),
            ("&info_hash=%01", InvalidInfoHash),
            ("&info_hash=aaaaaaaaaaaaaaaaaaaaa", InvalidInfoHash),
            ("&peer_id=short", InvalidPeerId),
            ("&info_hash=%G1aaaaaaaaaaaaaaaaaaa", BadEscape),
            ("&info_hash=aaaaaaaaaaaaaaaaaaa%4", BadEscape),
            ("&info_hash=aaaaaaaaaaaaaaaaaaa%", BadEscape),
            ("&uploaded=%4", BadEscape),
            ("&port=0", InvalidPort),
            ("&port=65536", InvalidPort),
            ("&port=-1", InvalidPort),
            ("&port=", InvalidPort),
            ("&port", InvalidPort),
            ("&port=+1", InvalidPort),
            (&format!("&left={u64_overflow}"), InvalidLeft),
            (&format!("&uploaded={u64_overflow}0"), InvalidUploaded),
            ("&downloaded=1.5", InvalidDownloaded),
            ("&compact=yes", InvalidCompact),
            ("&no_peer_id=", InvalidNoPeerId),
            ("&numwant=-1", InvalidNumwant),
            ("&event=%", InvalidEvent),
        ] {
            assert_eq!(announce(extra), Err(expected), "{extra}");
        }
        assert_eq!(
            announce("&left=18446744073709551615").map(|a| a.left),
            Ok(u64::MAX)
        );
    }

    #[test]
    fn names_missing_keys() {
        let full = format!("info_hash={HASH}&peer_id={PEER}&port=1");
        for (key, expected) in [
            ("info_hash", RequestError::MissingInfoHash),
            ("peer_id", RequestError::MissingPeerId),
            ("port", RequestError::MissingPort),
        ] {
            let query: Vec<&str> = full.split('&').filter(|p| !p.starts_with(key)).collect();
            let err = parse_announce(query.join("&").as_bytes()).unwrap_err();
            assert_eq!(err, expected);
            assert_eq!(err.reason(), format!("missing {key}"));
            assert_eq!(err.status(), 200);
        }
    }

    #[test]
    fn decodes_plus_as_space() {
        let announce = announce("&peer_id=+++++%20%20%20%20%20aaaaaaaaaa").unwrap();
        assert_eq!(&announce.peer_id.0, b"          aaaaaaaaaa");
    }

    #[test]
    fn collects_scrape_hashes() {
        let mut hashes = vec![InfoHash([9; 20])];
        let query = format!("info_hash={HASH}&x=1&info_hash=bbbbbbbbbbbbbbbbbbbb&info_hash={HASH}");
        parse_scrape(query.as_bytes(), 3, &mut hashes).unwrap();
        let b = InfoHash([b'b'; 20]);
        assert_eq!(hashes, [InfoHash(HASH_BYTES), b, InfoHash(HASH_BYTES)]);
        assert_eq!(
            parse_scrape(query.as_bytes(), 2, &mut hashes),
            Err(RequestError::TooManyInfoHashes)
        );
        parse_scrape(b"", 2, &mut hashes).unwrap();
        assert!(hashes.is_empty(), "no info_hash asks for a full scrape");
        assert_eq!(
            parse_scrape(b"info_hash=a", 2, &mut hashes),
            Err(RequestError::InvalidInfoHash)
        );
    }

    #[test]
    fn writes_targets() {
        let mut out = Vec::new();
        write_scrape_target(&mut out, &[]);
        assert_eq!(out, b"/scrape");
        out.clear();
        write_scrape_target(&mut out, &[InfoHash(HASH_BYTES), InfoHash([b'~'; 20])]);
        let expected = "/scrape?info_hash=%01%02%03%04%05%06%07%08%09%0A%0B%0C%0D%0E%0F%10abcd\
                        &info_hash=~~~~~~~~~~~~~~~~~~~~";
        assert_eq!(String::from_utf8(out).unwrap(), expected);
    }

    #[test]
    fn statuses_and_reasons() {
        use RequestError::*;
        for (error, status) in [
            (Malformed, 400),
            (HeadTooLarge, 431),
            (BodyNotAllowed, 400),
            (NotFound, 404),
            (MethodNotAllowed, 405),
            (MissingRealIp, 200),
            (InvalidInfoHash, 200),
            (TooManyInfoHashes, 200),
        ] {
            assert_eq!(error.status(), status);
        }
        assert_eq!(InvalidInfoHash.to_string(), "info_hash is not 20 bytes");
        assert_eq!(InvalidPort.reason(), "invalid port");
    }

    /// A percent-encoding of `bytes`: each byte as `%xx` in either case, or raw if
    /// unreserved, as `choices` says.
    fn encode_mixed(bytes: &[u8], choices: &[u8]) -> String {
        bytes
            .iter()
            .zip(choices)
            .map(|(&b, choice)| match choice % 3 {
                0 if b.is_ascii_alphanumeric() || b"-._~".contains(&b) => char::from(b).to_string(),
                1 => format!("%{b:02x}"),
                _ => format!("%{b:02X}"),
            })
            .collect()
    }

    fn arb_announce() -> impl Strategy<Value = AnnounceRequest<'static>> {
        let event = prop_oneof![
            Just(AnnounceEvent::None),
            Just(AnnounceEvent::Started),
            Just(AnnounceEvent::Completed),
            Just(AnnounceEvent::Stopped),
        ];
        let token =
            prop::option::of("[a-zA-Z0-9._~-]{0,12}").prop_map(|t| t.map(|t| t.leak().as_bytes()));
        (
            (
                any::<[u8; 20]>(),
                any::<[u8; 20]>(),
                1..=u16::MAX,
                any::<[u64; 3]>(),
                event,
            ),
            (
                any::<bool>(),
                any::<bool>(),
                any::<Option<u32>>(),
                token.clone(),
                token,
            ),
            (
                any::<Option<IpAddr>>(),
                any::<Option<Ipv4Addr>>(),
                any::<Option<Ipv6Addr>>(),
            ),
        )
            .prop_map(
                |(
                    (info_hash, peer_id, port, [uploaded, downloaded, left], event),
                    (compact, no_peer_id, numwant, key, trackerid),
                    (ip, ipv4, ipv6),
                )| AnnounceRequest {
                    info_hash: InfoHash(info_hash),
                    peer_id: PeerId(peer_id),
                    port,
                    uploaded,
                    downloaded,
                    left,
                    event,
                    compact,
                    no_peer_id,
                    numwant,
                    key,
                    trackerid,
                    ip,
                    ipv4,
                    ipv6,
                },
            )
    }

    proptest! {
        #[test]
        fn info_hash_round_trips(bytes in any::<[u8; 20]>(), choices in any::<[u8; 20]>()) {
            let query = format!("info_hash={}", encode_mixed(&bytes, &choices));
            let mut hashes = Vec::new();
            parse_scrape(query.as_bytes(), 1, &mut hashes).unwrap();
            prop_assert_eq!(hashes, [InfoHash(bytes)]);
        }

        #[test]
        fn every_byte_round_trips(byte in any::<u8>(), choice in any::<u8>()) {
            let encoded = encode_mixed(&[byte; 20], &[choice; 20]);
            let mut hashes = Vec::new();
            parse_scrape(format!("info_hash={encoded}").as_bytes(), 1, &mut hashes).unwrap();
            prop_assert_eq!(hashes, [InfoHash([byte; 20])]);
        }

        #[test]
        fn announce_target_round_trips(announce in arb_announce()) {
            let mut target = Vec::new();
            write_announce_target(&mut target, &announce);
            let query = target.strip_prefix(b"/announce?").unwrap();
            prop_assert_eq!(parse_announce(query), Ok(announce));
        }

        #[test]
        fn scrape_target_round_trips(hashes in prop::collection::vec(any::<[u8; 20]>(), 0..8)) {
            let hashes: Vec<InfoHash> = hashes.into_iter().map(InfoHash).collect();
            let mut target = b"GET ".to_vec();
            write_scrape_target(&mut target, &hashes);
            target.extend_from_slice(b" HTTP/1.1\r\n\r\n");
            let (request, _) = complete(head(&target));
            let mut parsed = Vec::new();
            parse_scrape(request.query, 8, &mut parsed).unwrap();
            prop_assert_eq!(parsed, hashes);
        }

        #[test]
        fn prefixes_are_partial(cut in 0..usize::MAX) {
            let buf = b"GET /announce?info_hash=abc HTTP/1.1\r\nHost: tracker\r\nConnection: close\r\n\r\n";
            let cut = cut % buf.len();
            prop_assert_eq!(head(&buf[..cut]), Ok(Parsed::Partial));
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..300)) {
            let _ = parse_head(&bytes, RealIp::Required("x-forwarded-for"));
            let _ = parse_announce(&bytes);
            let _ = parse_scrape(&bytes, 4, &mut Vec::new());
        }

        #[test]
        fn arbitrary_queries_never_panic(query in "([a-z_]{1,10}(=[%0-9a-fA-FgG+&=.:\\[\\]]{0,30})?&?){0,8}") {
            let _ = parse_announce(query.as_bytes());
            let _ = parse_scrape(query.as_bytes(), 4, &mut Vec::new());
            let buf = format!("GET /announce?{query} HTTP/1.1\r\nX-Forwarded-For: {query}\r\n\r\n");
            let _ = parse_head(buf.as_bytes(), RealIp::Required("x-forwarded-for"));
        }
    }
}
