//! Writing tracker answers: bencoded bodies and the HTTP framing around them.
//! Everything appends to a `Vec<u8>` that the caller reuses, so answering does not
//! allocate once the vector has grown to its working size.

use std::io::Write;
use std::net::IpAddr;

use crate::{AnswerPeers, InfoHash, IpFamily, ScrapeStats};

use super::Connection;

/// What a successful announce answer says.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AnnounceResponse<'a> {
    /// Seconds until the client should announce again.
    pub interval: u32,
    /// Seconds a client must wait between announces, if the tracker insists.
    pub min_interval: Option<u32>,
    /// Seeders.
    pub complete: u32,
    /// The torrent's snatches, where the tracker counts them (a private
    /// tracker: its site's `times_completed`).
    pub downloaded: Option<u32>,
    /// Leechers.
    pub incomplete: u32,
    /// Of one family, the requester's.
    pub peers: &'a AnswerPeers,
    /// BEP 23: `peers` as 6 bytes per IPv4 peer, or BEP 7's `peers6` as 18
    /// bytes per IPv6 peer; otherwise one `peers` list of dictionaries.
    pub compact: bool,
    /// Leave `peer id` out of the dictionaries of a non-compact answer (they
    /// are left out, too, of one whose peers were asked without their ids).
    pub no_peer_id: bool,
    /// A `warning message` beside the answer (a private tracker's
    /// download-slot warning).
    pub warning: Option<&'a [u8]>,
}

/// Appends the bencoded body of an announce answer. Compact answers always carry
/// `peers` (clients expect it, even empty) and carry `peers6` only when there are
/// IPv6 peers.
pub fn write_announce(out: &mut Vec<u8>, announce: &AnnounceResponse<'_>) {
    // Keys in byte order, as bencode requires.
    out.extend_from_slice(b"d8:complete");
    put_int(out, announce.complete.into());
    if let Some(downloaded) = announce.downloaded {
        out.extend_from_slice(b"10:downloaded");
        put_int(out, downloaded.into());
    }
    out.extend_from_slice(b"10:incomplete");
    put_int(out, announce.incomplete.into());
    out.extend_from_slice(b"8:interval");
    put_int(out, announce.interval.into());
    if let Some(min_interval) = announce.min_interval {
        out.extend_from_slice(b"12:min interval");
        put_int(out, min_interval.into());
    }
    out.extend_from_slice(b"5:peers");
    let peers = announce.peers;
    if announce.compact {
        match peers.family() {
            IpFamily::V4 => put_bytes(out, peers.compact()),
            IpFamily::V6 => {
                put_bytes(out, &[]);
                if !peers.is_empty() {
                    out.extend_from_slice(b"6:peers6");
                    put_bytes(out, peers.compact());
                }
            }
        }
    } else {
        let ids = if announce.no_peer_id {
            &[][..]
        } else {
            peers.peer_ids()
        };
        out.push(b'l');
        for (i, addr) in peers.addrs().enumerate() {
            out.extend_from_slice(b"d2:ip");
            put_ip_text(out, addr.ip());
            if let Some(id) = ids.get(i) {
                out.extend_from_slice(b"7:peer id20:");
                out.extend_from_slice(&id.0);
            }
            out.extend_from_slice(b"4:port");
            put_int(out, addr.port().into());
            out.push(b'e');
        }
        out.push(b'e');
    }
    // Last: `warning message` sorts after `peers` and `peers6`.
    if let Some(warning) = announce.warning {
        out.extend_from_slice(b"15:warning message");
        put_bytes(out, warning);
    }
    out.push(b'e');
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

/// Appends an announce answer with no peers and a `warning message`, told
/// to come back after `interval` seconds: what private trackers answer
/// where a failure would make clients misbehave (libtorrent backs off on a
/// failure; some clients retry a refused `stopped` at once).
pub fn write_warning(out: &mut Vec<u8>, interval: u32, warning: &[u8]) {
    out.extend_from_slice(b"d8:completei0e10:downloadedi0e10:incompletei0e8:interval");
    put_int(out, interval.into());
    out.extend_from_slice(b"12:min interval");
    put_int(out, interval.into());
    out.extend_from_slice(b"5:peers0:15:warning message");
    put_bytes(out, warning);
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

/// `bytes` as a bencoded string.
fn put_bytes(out: &mut Vec<u8>, bytes: &[u8]) {
    put_length(out, bytes.len());
    out.extend_from_slice(bytes);
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
    use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};

    use crate::PeerId;
    use proptest::prelude::*;

    use super::*;
    use crate::http::bencode::{decode, Value};

    /// An answer's peers of `family`, with their ids.
    fn answer_peers(family: IpFamily, peers: &[(&str, u16, u8)]) -> AnswerPeers {
        let mut out = AnswerPeers::default();
        out.reset(family);
        for &(ip, port, id) in peers {
            let addr = SocketAddr::new(ip.parse().unwrap(), port);
            assert!(out.push_addr(addr, Some(&PeerId([id; 20]))));
        }
        out
    }

    fn response(peers: &AnswerPeers, compact: bool, no_peer_id: bool) -> AnnounceResponse<'_> {
        AnnounceResponse {
            interval: 1800,
            min_interval: Some(900),
            complete: 3,
            downloaded: None,
            incomplete: 4_000_000_000,
            peers,
            compact,
            no_peer_id,
            warning: None,
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
        let v4 = answer_peers(IpFamily::V4, &[("1.2.3.4", 0x1ae1, 1), ("5.6.7.8", 3, 3)]);
        let mut out = Vec::new();
        write_announce(&mut out, &response(&v4, true, false));
        let head = b"d8:completei3e10:incompletei4000000000e8:intervali1800e12:min intervali900e";
        let mut expected = head.to_vec();
        expected.extend_from_slice(b"5:peers12:\x01\x02\x03\x04\x1a\xe1\x05\x06\x07\x08\x00\x03e");
        assert_eq!(out, expected);

        let v6 = answer_peers(IpFamily::V6, &[("::1", 2, 2)]);
        out.clear();
        write_announce(&mut out, &response(&v6, true, false));
        let mut expected = head.to_vec();
        expected.extend_from_slice(b"5:peers0:6:peers618:");
        expected.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
        expected.extend_from_slice(b"\x00\x02e");
        assert_eq!(out, expected);
    }

    /// UNIT3D-Announce's keys, in bencode's order: `downloaded` between
    /// `complete` and `incomplete`.
    #[test]
    fn writes_downloaded_where_the_tracker_counts_snatches() {
        let none = answer_peers(IpFamily::V4, &[]);
        let mut announce = response(&none, true, false);
        announce.downloaded = Some(12);
        let mut out = Vec::new();
        write_announce(&mut out, &announce);
        assert_eq!(
            out,
            b"d8:completei3e10:downloadedi12e10:incompletei4000000000e8:intervali1800e\
              12:min intervali900e5:peers0:e"
        );
    }

    #[test]
    fn compact_announce_always_has_peers() {
        for family in [IpFamily::V4, IpFamily::V6] {
            let mut out = Vec::new();
            let none = answer_peers(family, &[]);
            let mut announce = response(&none, true, false);
            announce.min_interval = None;
            write_announce(&mut out, &announce);
            assert_eq!(
                out,
                b"d8:completei3e10:incompletei4000000000e8:intervali1800e5:peers0:e"
            );
        }
    }

    #[test]
    fn writes_dictionary_peers() {
        let v4 = [("1.2.3.4", 6881, 1), ("5.6.7.8", 2, 2)];
        let v6 = [("2001:db8::1", 3, 3)];
        for (family, peers) in [(IpFamily::V4, &v4[..]), (IpFamily::V6, &v6)] {
            let answer = answer_peers(family, peers);
            for no_peer_id in [false, true] {
                let mut out = Vec::new();
                write_announce(&mut out, &response(&answer, false, no_peer_id));
                let body = decode(&out).unwrap();
                let expected: Vec<_> = peers
                    .iter()
                    .map(|&(ip, port, id)| {
                        (ip.parse().unwrap(), port, (!no_peer_id).then_some([id; 20]))
                    })
                    .collect();
                assert_eq!(decoded_peers(&body), expected);
                assert_eq!(body.get(b"peers6"), None);
            }
        }
    }

    #[test]
    fn dictionary_peers_asked_without_ids_have_none() {
        let mut answer = AnswerPeers::default();
        answer.push_addr("1.2.3.4:5".parse().unwrap(), None);
        let mut out = Vec::new();
        write_announce(&mut out, &response(&answer, false, false));
        let body = decode(&out).unwrap();
        assert_eq!(
            decoded_peers(&body),
            [("1.2.3.4".parse().unwrap(), 5, None)]
        );
    }

    #[test]
    fn writes_longest_ip_texts() {
        let longest = [
            (IpFamily::V6, "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff"),
            (IpFamily::V4, "255.255.255.255"),
        ];
        for (family, ip) in longest {
            let mut out = Vec::new();
            let answer = answer_peers(family, &[(ip, 1, 1)]);
            write_announce(&mut out, &response(&answer, false, true));
            let body = decode(&out).unwrap();
            let ips: Vec<IpAddr> = decoded_peers(&body).into_iter().map(|p| p.0).collect();
            assert_eq!(ips, [ip.parse::<IpAddr>().unwrap()]);
        }
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

    proptest! {
        #[test]
        fn announce_round_trips(
            addrs in prop::collection::vec(any::<(SocketAddr, [u8; 20])>(), 0..40),
            v6 in any::<bool>(),
            with_ids in any::<bool>(),
            counts in any::<(u32, Option<u32>, u32, Option<u32>, u32)>(),
            compact in any::<bool>(),
            no_peer_id in any::<bool>(),
        ) {
            let mut peers = AnswerPeers::default();
            peers.reset(if v6 { IpFamily::V6 } else { IpFamily::V4 });
            let kept = with_ids && !compact && !no_peer_id;
            let expected: Vec<_> = addrs
                .iter()
                .filter(|(addr, id)| peers.push_addr(*addr, with_ids.then_some(&PeerId(*id))))
                .map(|(addr, id)| (addr.ip().to_canonical(), addr.port(), kept.then_some(*id)))
                .collect();
            let (interval, min_interval, complete, downloaded, incomplete) = counts;
            let announce = AnnounceResponse {
                interval, min_interval, complete, downloaded, incomplete, peers: &peers, compact,
                no_peer_id,
                warning: None,
            };
            let mut out = Vec::new();
            write_response(&mut out, 200, Connection::KeepAlive, |b| write_announce(b, &announce));
            let (_, _, body) = split_response(&out);
            let body = decode(body).unwrap();
            prop_assert_eq!(int(&body, b"interval"), Some(interval.into()));
            prop_assert_eq!(int(&body, b"min interval"), min_interval.map(i64::from));
            prop_assert_eq!(int(&body, b"complete"), Some(complete.into()));
            prop_assert_eq!(int(&body, b"downloaded"), downloaded.map(i64::from));
            prop_assert_eq!(int(&body, b"incomplete"), Some(incomplete.into()));
            prop_assert_eq!(decoded_peers(&body), expected);
            prop_assert_eq!(body.get(b"peers6").is_some(), compact && v6 && !peers.is_empty());
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
