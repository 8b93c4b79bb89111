//! The queries of announces and scrapes: parsed by the tracker, written by the
//! load generator (percent-encoded request targets).

use std::io::Write;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use super::RequestError;
use crate::types::{hex_digit, AnnounceEvent, InfoHash, PeerId};

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
                port = Some(u16::try_from(n).map_err(|_| RequestError::InvalidPort)?);
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
    // Some clients send port 0 with `stopped` (UNIT3D-Announce takes it so):
    // a peer that leaves needs no port, and refusing its stop would leave
    // it counted.
    if announce.port == 0 && announce.event != AnnounceEvent::Stopped {
        return Err(RequestError::InvalidPort);
    }
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
