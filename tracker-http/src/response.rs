//! Writing tracker answers: bencoded bodies and the HTTP framing around them.
//! Everything appends to a `Vec<u8>` that the caller reuses, so answering does not
//! allocate once the vector has grown to its working size.

use std::io::Write;
use std::net::IpAddr;

use tracker_common::types::{InfoHash, PeerEntry, ScrapeStats};

use crate::request::Connection;

/// What a successful announce answer says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnounceResponse<'a> {
    /// Seconds until the client should announce again.
    pub interval: u32,
    /// Seconds a client must wait between announces, if the tracker insists.
    pub min_interval: Option<u32>,
    /// Seeders.
    pub complete: u32,
    /// Leechers.
    pub incomplete: u32,
    pub peers: &'a [PeerEntry],
    /// BEP 23: `peers` as 6 bytes per IPv4 peer and `peers6` as 18 bytes per IPv6
    /// peer; otherwise one `peers` list of dictionaries of both families.
    pub compact: bool,
    /// Leave `peer id` out of the dictionaries of a non-compact answer.
    pub no_peer_id: bool,
}

/// Appends the bencoded body of an announce answer. Compact answers always carry
/// `peers` (clients expect it, even empty) and carry `peers6` only when there are
/// IPv6 peers.
pub fn write_announce(out: &mut Vec<u8>, announce: &AnnounceResponse<'_>) {
    // Keys in byte order, as bencode requires.
    out.extend_from_slice(b"d8:complete");
    put_int(out, announce.complete.into());
    out.extend_from_slice(b"10:incomplete");
    put_int(out, announce.incomplete.into());
    out.extend_from_slice(b"8:interval");
    put_int(out, announce.interval.into());
    if let Some(min_interval) = announce.min_interval {
        out.extend_from_slice(b"12:min interval");
        put_int(out, min_interval.into());
    }
    out.extend_from_slice(b"5:peers");
    if announce.compact {
        put_compact_peers(out, announce.peers);
    } else {
        out.push(b'l');
        for peer in announce.peers {
            out.extend_from_slice(b"d2:ip");
            put_ip_text(out, peer.ip);
            if !announce.no_peer_id {
                out.extend_from_slice(b"7:peer id20:");
                out.extend_from_slice(&peer.peer_id.0);
            }
            out.extend_from_slice(b"4:port");
            put_int(out, peer.port.into());
            out.push(b'e');
        }
        out.push(b'e');
    }
    out.push(b'e');
}

/// The value of `peers`, then `peers6` if there are IPv6 peers.
fn put_compact_peers(out: &mut Vec<u8>, peers: &[PeerEntry]) {
    let ipv4 = peers.iter().filter(|peer| peer.ip.is_ipv4()).count();
    put_length(out, 6 * ipv4);
    for peer in peers {
        if let IpAddr::V4(ip) = peer.ip {
            out.extend_from_slice(&ip.octets());
            out.extend_from_slice(&peer.port.to_be_bytes());
        }
    }
    let ipv6 = peers.len() - ipv4;
    if ipv6 > 0 {
        out.extend_from_slice(b"6:peers6");
        put_length(out, 18 * ipv6);
        for peer in peers {
            if let IpAddr::V6(ip) = peer.ip {
                out.extend_from_slice(&ip.octets());
                out.extend_from_slice(&peer.port.to_be_bytes());
            }
        }
    }
}

/// Appends the bencoded body of a scrape answer (BEP 48). Bencode wants the
/// info-hash keys in order, so `files` is sorted in place (without allocating) and
/// a repeated info-hash is written once.
pub fn write_scrape(out: &mut Vec<u8>, files: &mut [(InfoHash, ScrapeStats)]) {
    files.sort_unstable_by_key(|(info_hash, _)| *info_hash);
    out.extend_from_slice(b"d5:filesd");
    let mut previous = None;
    for (info_hash, stats) in files.iter() {
        if previous == Some(info_hash) {
            continue;
        }
        previous = Some(info_hash);
        out.extend_from_slice(b"20:");
        out.extend_from_slice(&info_hash.0);
        out.extend_from_slice(b"d8:complete");
        put_int(out, stats.seeders.into());
        out.extend_from_slice(b"10:downloaded");
        put_int(out, stats.completed.into());
        out.extend_from_slice(b"10:incomplete");
        put_int(out, stats.leechers.into());
        out.push(b'e');
    }
    out.extend_from_slice(b"ee");
}

/// Appends the bencoded body of a failure answer.
pub fn write_failure(out: &mut Vec<u8>, reason: &[u8]) {
    out.extend_from_slice(b"d14:failure reason");
    put_length(out, reason.len());
    out.extend_from_slice(reason);
    out.push(b'e');
}

/// Appends a whole HTTP answer: `body` appends the body to the vector it is given
/// (it must not remove anything), and the head with its exact `Content-Length` is
/// then moved in front of it.
pub fn write_response(
    out: &mut Vec<u8>,
    status: u16,
    connection: Connection,
    body: impl FnOnce(&mut Vec<u8>),
) {
    let start = out.len();
    body(out);
    let body_len = out.len() - start;
    out.extend_from_slice(b"HTTP/1.1 ");
    put_uint(out, status.into());
    out.push(b' ');
    out.extend_from_slice(status_text(status).as_bytes());
    out.extend_from_slice(b"\r\nContent-Type: text/plain\r\nContent-Length: ");
    put_uint(out, body_len as u64);
    out.extend_from_slice(match connection {
        Connection::KeepAlive => b"\r\n\r\n".as_slice(),
        Connection::KeepAliveHttp10 => b"\r\nConnection: keep-alive\r\n\r\n",
        Connection::Close => b"\r\nConnection: close\r\n\r\n",
    });
    let head_len = out.len() - start - body_len;
    if let Some(answer) = out.get_mut(start..) {
        answer.rotate_right(head_len);
    }
}

/// The reason phrase of the statuses a tracker answers with.
fn status_text(status: u16) -> &'static str {
    match status {
        200 => "OK",
        400 => "Bad Request",
        404 => "Not Found",
        405 => "Method Not Allowed",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        503 => "Service Unavailable",
        // The reason phrase is optional.
        _ => "",
    }
}

/// `n` in decimal.
fn put_uint(out: &mut Vec<u8>, mut n: u64) {
    // u64::MAX has 20 digits; written backwards, then reversed in place.
    let from = out.len();
    loop {
        out.push(b'0' + (n % 10) as u8);
        n /= 10;
        if n == 0 {
            break;
        }
    }
    if let Some(digits) = out.get_mut(from..) {
        digits.reverse();
    }
}

/// A bencoded integer.
fn put_int(out: &mut Vec<u8>, n: u64) {
    out.push(b'i');
    put_uint(out, n);
    out.push(b'e');
}

/// The `<length>:` prefix of a bencoded string.
fn put_length(out: &mut Vec<u8>, len: usize) {
    put_uint(out, len as u64);
    out.push(b':');
}

/// The text form of `ip` as a bencoded string.
fn put_ip_text(out: &mut Vec<u8>, ip: IpAddr) {
    // IPv6 text is at most 39 bytes, or 45 with a dotted IPv4 tail.
    let mut text = [0; 45];
    let mut unused = text.as_mut_slice();
    // Display always fits, so writing cannot fail.
    let _ = write!(unused, "{ip}");
    let unused = unused.len();
    let len = text.len() - unused;
    put_length(out, len);
    out.extend_from_slice(text.get(..len).unwrap_or_default());
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::net::{Ipv4Addr, Ipv6Addr};

    use proptest::prelude::*;
    use tracker_common::types::PeerId;

    use super::*;
    use crate::bencode::{decode, Value};

    fn peer(ip: &str, port: u16, id: u8) -> PeerEntry {
        PeerEntry {
            ip: ip.parse().unwrap(),
            port,
            peer_id: PeerId([id; 20]),
        }
    }

    fn response(peers: &[PeerEntry], compact: bool, no_peer_id: bool) -> AnnounceResponse<'_> {
        AnnounceResponse {
            interval: 1800,
            min_interval: Some(900),
            complete: 3,
            incomplete: 4_000_000_000,
            peers,
            compact,
            no_peer_id,
        }
    }

    fn int(value: &Value, key: &[u8]) -> Option<i64> {
        value.get(key).and_then(Value::as_int)
    }

    /// The peers of a decoded announce answer, compact or not, IPv4 ones first.
    fn decoded_peers(body: &Value) -> Vec<(IpAddr, u16, Option<[u8; 20]>)> {
        if let Some(list) = body.get(b"peers").and_then(Value::as_list) {
            let mut peers: Vec<(IpAddr, u16, Option<[u8; 20]>)> = list
                .iter()
                .map(|d| {
                    let ip = std::str::from_utf8(d.get(b"ip").and_then(Value::as_bytes).unwrap());
                    let port = u16::try_from(int(d, b"port").unwrap()).unwrap();
                    let id = d.get(b"peer id").and_then(Value::as_bytes);
                    (
                        ip.unwrap().parse().unwrap(),
                        port,
                        id.map(|id| id.try_into().unwrap()),
                    )
                })
                .collect();
            peers.sort_by_key(|(ip, _, _)| ip.is_ipv6());
            return peers;
        }
        let bytes = |key| body.get(key).and_then(Value::as_bytes);
        let ipv4 = bytes(b"peers").unwrap().chunks(6).map(|c| {
            let ip: [u8; 4] = c[..4].try_into().unwrap();
            (
                Ipv4Addr::from(ip).into(),
                u16::from_be_bytes([c[4], c[5]]),
                None,
            )
        });
        let ipv6 = bytes(b"peers6").unwrap_or_default().chunks(18).map(|c| {
            let ip: [u8; 16] = c[..16].try_into().unwrap();
            (
                Ipv6Addr::from(ip).into(),
                u16::from_be_bytes([c[16], c[17]]),
                None,
            )
        });
        ipv4.chain(ipv6).collect()
    }

    #[test]
    fn writes_compact_announce() {
        let peers = [
            peer("1.2.3.4", 0x1ae1, 1),
            peer("::1", 2, 2),
            peer("5.6.7.8", 3, 3),
        ];
        let mut out = Vec::new();
        write_announce(&mut out, &response(&peers, true, false));
        let mut expected = b"d8:completei3e10:incompletei4000000000e8:intervali1800e\
                             12:min intervali900e5:peers12:\x01\x02\x03\x04\x1a\xe1\x05\x06\x07\x08\x00\x03\
                             6:peers618:"
            .to_vec();
        expected.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        expected.extend_from_slice(b"\x00\x02e");
        assert_eq!(out, expected);
    }

    #[test]
    fn compact_announce_always_has_peers() {
        let mut out = Vec::new();
        let mut announce = response(&[], true, false);
        announce.min_interval = None;
        write_announce(&mut out, &announce);
        assert_eq!(
            out,
            b"d8:completei3e10:incompletei4000000000e8:intervali1800e5:peers0:e"
        );
    }

    #[test]
    fn writes_dictionary_peers() {
        let peers = [peer("1.2.3.4", 6881, 1), peer("2001:db8::1", 2, 2)];
        for no_peer_id in [false, true] {
            let mut out = Vec::new();
            write_announce(&mut out, &response(&peers, false, no_peer_id));
            let body = decode(&out).unwrap();
            let id = |n| (!no_peer_id).then_some([n; 20]);
            assert_eq!(
                decoded_peers(&body),
                [(peers[0].ip, 6881, id(1)), (peers[1].ip, 2, id(2)),]
            );
            assert_eq!(body.get(b"peers6"), None);
        }
    }

    #[test]
    fn writes_longest_ip_texts() {
        let peers = [
            peer("ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff", 1, 1),
            peer("::ffff:255.255.255.255", 1, 1),
            peer("255.255.255.255", 1, 1),
        ];
        let mut out = Vec::new();
        write_announce(&mut out, &response(&peers, false, true));
        let body = decode(&out).unwrap();
        let ips: Vec<IpAddr> = decoded_peers(&body).into_iter().map(|p| p.0).collect();
        assert_eq!(ips, [peers[2].ip, peers[0].ip, peers[1].ip]);
    }

    #[test]
    fn writes_sorted_unique_scrape() {
        let stats = |n| ScrapeStats {
            seeders: n,
            completed: n + 1,
            leechers: u32::MAX,
        };
        let mut files = [
            (InfoHash([2; 20]), stats(2)),
            (InfoHash([1; 20]), stats(1)),
            (InfoHash([2; 20]), stats(2)),
        ];
        let mut out = b"prefix".to_vec();
        write_scrape(&mut out, &mut files);
        let mut expected = b"prefixd5:filesd20:".to_vec();
        expected.extend_from_slice(&[1; 20]);
        expected.extend_from_slice(b"d8:completei1e10:downloadedi2e10:incompletei4294967295ee20:");
        expected.extend_from_slice(&[2; 20]);
        expected.extend_from_slice(b"d8:completei2e10:downloadedi3e10:incompletei4294967295eeee");
        assert_eq!(out, expected);

        out.clear();
        write_scrape(&mut out, &mut []);
        assert_eq!(out, b"d5:filesdee");
    }

    #[test]
    fn writes_failure() {
        let mut out = Vec::new();
        write_failure(&mut out, b"missing info_hash");
        assert_eq!(out, b"d14:failure reason17:missing info_hashe");
    }

    /// Splits an answer into status, headers and body, checking `Content-Length`.
    fn split_response(buf: &[u8]) -> (u16, Vec<(String, String)>, &[u8]) {
        let mut headers = [httparse::EMPTY_HEADER; 8];
        let mut response = httparse::Response::new(&mut headers);
        let httparse::Status::Complete(head_len) = response.parse(buf).unwrap() else {
            panic!("partial head");
        };
        let headers: Vec<(String, String)> = response
            .headers
            .iter()
            .map(|h| {
                (
                    h.name.to_owned(),
                    String::from_utf8(h.value.to_vec()).unwrap(),
                )
            })
            .collect();
        let length = headers.iter().find(|(n, _)| n == "Content-Length").unwrap();
        assert_eq!(length.1.parse::<usize>().unwrap(), buf.len() - head_len);
        (response.code.unwrap(), headers, &buf[head_len..])
    }

    #[test]
    fn frames_answers() {
        let mut out = b"earlier answer".to_vec();
        write_response(&mut out, 404, Connection::Close, |body| {
            write_failure(body, b"not found");
        });
        let answer = out.strip_prefix(b"earlier answer").unwrap();
        assert_eq!(
            answer,
            b"HTTP/1.1 404 Not Found\r\nContent-Type: text/plain\r\nContent-Length: 30\r\n\
              Connection: close\r\n\r\nd14:failure reason9:not founde"
        );

        for (connection, header) in [
            (Connection::KeepAlive, None),
            (Connection::KeepAliveHttp10, Some("keep-alive")),
            (Connection::Close, Some("close")),
        ] {
            let mut out = Vec::new();
            write_response(&mut out, 200, connection, |_| {});
            let (status, headers, body) = split_response(&out);
            assert_eq!((status, body), (200, &b""[..]));
            let found = headers.iter().find(|(n, _)| n == "Connection");
            assert_eq!(found.map(|(_, v)| v.as_str()), header);
        }
    }

    #[test]
    fn frames_a_large_scrape() {
        let mut files: Vec<_> = (0..=255u8)
            .map(|n| (InfoHash([n; 20]), ScrapeStats::default()))
            .collect();
        let mut out = Vec::new();
        write_response(&mut out, 200, Connection::KeepAlive, |body| {
            write_scrape(body, &mut files);
        });
        let (status, _, body) = split_response(&out);
        assert_eq!(status, 200);
        let files = decode(body).unwrap();
        let Some(Value::Dict(entries)) = files.get(b"files") else {
            panic!("no files");
        };
        assert_eq!(entries.len(), 256);
    }

    #[test]
    fn writes_integers() {
        for n in [0, 9, 10, 99, 100, 1_234_567_890, u64::MAX] {
            let mut out = Vec::new();
            put_uint(&mut out, n);
            assert_eq!(out, n.to_string().as_bytes());
        }
    }

    fn arb_peer() -> impl Strategy<Value = PeerEntry> {
        (any::<IpAddr>(), any::<u16>(), any::<[u8; 20]>()).prop_map(|(ip, port, id)| PeerEntry {
            ip,
            port,
            peer_id: PeerId(id),
        })
    }

    proptest! {
        #[test]
        fn announce_round_trips(
            peers in prop::collection::vec(arb_peer(), 0..40),
            counts in any::<(u32, Option<u32>, u32, u32)>(),
            compact in any::<bool>(),
            no_peer_id in any::<bool>(),
        ) {
            let (interval, min_interval, complete, incomplete) = counts;
            let announce = AnnounceResponse {
                interval, min_interval, complete, incomplete, peers: &peers, compact, no_peer_id,
            };
            let mut out = Vec::new();
            write_response(&mut out, 200, Connection::KeepAlive, |b| write_announce(b, &announce));
            let (_, _, body) = split_response(&out);
            let body = decode(body).unwrap();
            prop_assert_eq!(int(&body, b"interval"), Some(interval.into()));
            prop_assert_eq!(int(&body, b"min interval"), min_interval.map(i64::from));
            prop_assert_eq!(int(&body, b"complete"), Some(complete.into()));
            prop_assert_eq!(int(&body, b"incomplete"), Some(incomplete.into()));

            let mut expected: Vec<_> = peers
                .iter()
                .map(|p| (p.ip, p.port, (!compact && !no_peer_id).then_some(p.peer_id.0)))
                .collect();
            expected.sort_by_key(|(ip, _, _)| ip.is_ipv6());
            prop_assert_eq!(decoded_peers(&body), expected);
            let has_ipv6 = peers.iter().any(|p| p.ip.is_ipv6());
            prop_assert_eq!(body.get(b"peers6").is_some(), compact && has_ipv6);
        }

        #[test]
        fn scrape_round_trips(
            files in prop::collection::vec((any::<[u8; 20]>(), any::<[u32; 3]>()), 0..30),
            repeats in any::<prop::sample::Index>(),
        ) {
            let mut files: Vec<(InfoHash, ScrapeStats)> = files
                .into_iter()
                .map(|(hash, [seeders, completed, leechers])| {
                    (InfoHash(hash), ScrapeStats { seeders, completed, leechers })
                })
                .collect();
            if !files.is_empty() {
                files.push(files[repeats.index(files.len())]);
            }
            let expected: BTreeMap<[u8; 20], ScrapeStats> =
                files.iter().map(|(h, s)| (h.0, *s)).collect();
            let mut out = Vec::new();
            write_scrape(&mut out, &mut files);
            let body = decode(&out).unwrap();
            let Some(Value::Dict(entries)) = body.get(b"files") else {
                panic!("no files");
            };
            let decoded: BTreeMap<[u8; 20], ScrapeStats> = entries
                .iter()
                .map(|(hash, stats)| {
                    let count = |key| u32::try_from(int(stats, key).unwrap()).unwrap();
                    let stats = ScrapeStats {
                        seeders: count(b"complete"),
                        completed: count(b"downloaded"),
                        leechers: count(b"incomplete"),
                    };
                    (<[u8; 20]>::try_from(*hash).unwrap(), stats)
                })
                .collect();
            prop_assert_eq!(entries.len(), expected.len());
            prop_assert_eq!(decoded, expected);
        }
    }
}
