//! Tracker answers built from fuzzer-chosen values with `write_announce`,
//! `write_scrape` and `write_failure` (and framed by `write_response`) must decode
//! with the independent strict decoder in `tracker_http::bencode` to exactly the
//! values that went in.
#![no_main]

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use arbitrary::Arbitrary;
use libfuzzer_sys::fuzz_target;
use tracker_proto::{AnswerPeers, InfoHash, IpFamily, PeerId, ScrapeStats};
use tracker_proto::http::bencode::{decode, Value};
use tracker_proto::http::Connection;
use tracker_proto::http::{
    write_announce, write_failure, write_response, write_scrape, AnnounceResponse,
};

#[derive(Arbitrary, Debug)]
enum Ip {
    V4([u8; 4]),
    V6([u8; 16]),
}

#[derive(Arbitrary, Debug)]
struct Peer {
    ip: Ip,
    port: u16,
    peer_id: [u8; 20],
}

#[derive(Arbitrary, Debug)]
enum Body {
    Announce {
        interval: u32,
        min_interval: Option<u32>,
        complete: u32,
        incomplete: u32,
        peers: Vec<Peer>,
        /// The answer's family: only its peers are kept.
        v6: bool,
        /// Whether the answer keeps the peers' ids.
        with_ids: bool,
        compact: bool,
        no_peer_id: bool,
    },
    Scrape {
        /// (info-hash, seeders, completed, leechers); a small hash alphabet
        /// (`hash_seed`) makes repeated info-hashes likely.
        files: Vec<(u8, [u8; 20], u32, u32, u32)>,
    },
    Failure {
        reason: Vec<u8>,
    },
}

#[derive(Arbitrary, Debug)]
struct Input {
    body: Body,
    /// Bytes already in the caller's output vector.
    prefix: Vec<u8>,
    status: u8,
    connection: u8,
}

const STATUSES: [u16; 7] = [200, 400, 404, 405, 431, 500, 503];

fn keys<'a>(value: &'a Value<'_>) -> Vec<&'a [u8]> {
    match value {
        Value::Dict(entries) => entries.iter().map(|(k, _)| *k).collect(),
        other => panic!("not a dictionary: {other:?}"),
    }
}

fn int(value: &Value<'_>, key: &[u8]) -> i64 {
    value
        .get(key)
        .and_then(Value::as_int)
        .unwrap_or_else(|| panic!("no integer {}", String::from_utf8_lossy(key)))
}

fn bytes<'a>(value: &Value<'a>, key: &[u8]) -> &'a [u8] {
    value
        .get(key)
        .and_then(Value::as_bytes)
        .unwrap_or_else(|| panic!("no string {}", String::from_utf8_lossy(key)))
}

fn compact_peers(bytes: &[u8], len: usize) -> Vec<SocketAddr> {
    assert_eq!(bytes.len() % len, 0, "compact peers of a partial entry");
    bytes
        .chunks_exact(len)
        .map(|entry| {
            let (ip, port) = entry.split_at(len - 2);
            let ip = match ip.len() {
                4 => IpAddr::V4(Ipv4Addr::from(<[u8; 4]>::try_from(ip).unwrap())),
                _ => IpAddr::V6(Ipv6Addr::from(<[u8; 16]>::try_from(ip).unwrap())),
            };
            SocketAddr::new(ip, u16::from_be_bytes([port[0], port[1]]))
        })
        .collect()
}

/// Appends `body` to the empty `out` and checks what decodes from it.
fn write_and_check(body: &Body, out: &mut Vec<u8>) {
    match body {
        Body::Announce {
            interval,
            min_interval,
            complete,
            incomplete,
            peers,
            v6,
            with_ids,
            compact,
            no_peer_id,
        } => {
            let mut answer = AnswerPeers::default();
            answer.reset(if *v6 { IpFamily::V6 } else { IpFamily::V4 });
            // The peers kept, as a client should decode them.
            let peers: Vec<(SocketAddr, PeerId)> = peers
                .iter()
                .map(|peer| {
                    let ip = match peer.ip {
                        Ip::V4(ip) => IpAddr::from(ip),
                        Ip::V6(ip) => IpAddr::from(ip),
                    };
                    (SocketAddr::new(ip, peer.port), PeerId(peer.peer_id))
                })
                .filter(|(addr, id)| answer.push_addr(*addr, with_ids.then_some(id)))
                .map(|(addr, id)| (SocketAddr::new(addr.ip().to_canonical(), addr.port()), id))
                .collect();
            let announce = AnnounceResponse {
                interval: *interval,
                min_interval: *min_interval,
                complete: *complete,
                downloaded: None,
                incomplete: *incomplete,
                peers: &answer,
                compact: *compact,
                no_peer_id: *no_peer_id,
                warning: None,
            };
            write_announce(out, &announce);
            let value = decode(out).expect("announce answer does not decode");
            assert_eq!(int(&value, b"complete"), i64::from(*complete));
            assert_eq!(int(&value, b"incomplete"), i64::from(*incomplete));
            assert_eq!(int(&value, b"interval"), i64::from(*interval));
            assert_eq!(
                value
                    .get(b"min interval")
                    .map(|v| v.as_int().expect("min interval")),
                min_interval.map(i64::from)
            );
            let addrs: Vec<SocketAddr> = peers.iter().map(|(addr, _)| *addr).collect();
            let mut expected_keys: Vec<&[u8]> = vec![b"complete", b"incomplete", b"interval"];
            if min_interval.is_some() {
                expected_keys.push(b"min interval");
            }
            expected_keys.push(b"peers");
            if *compact {
                if !*v6 {
                    assert_eq!(compact_peers(bytes(&value, b"peers"), 6), addrs);
                } else if addrs.is_empty() {
                    assert!(bytes(&value, b"peers").is_empty());
                    assert!(value.get(b"peers6").is_none());
                } else {
                    assert!(bytes(&value, b"peers").is_empty());
                    expected_keys.push(b"peers6");
                    assert_eq!(compact_peers(bytes(&value, b"peers6"), 18), addrs);
                }
            } else {
                let list = value
                    .get(b"peers")
                    .and_then(Value::as_list)
                    .expect("peer list");
                assert_eq!(list.len(), peers.len());
                for (entry, (addr, id)) in list.iter().zip(&peers) {
                    let ip = std::str::from_utf8(bytes(entry, b"ip")).expect("ip text");
                    assert_eq!(ip.parse::<IpAddr>().ok(), Some(addr.ip()), "{ip}");
                    assert_eq!(int(entry, b"port"), i64::from(addr.port()));
                    if *no_peer_id || !*with_ids {
                        assert_eq!(keys(entry), [&b"ip"[..], b"port"]);
                    } else {
                        assert_eq!(keys(entry), [&b"ip"[..], b"peer id", b"port"]);
                        assert_eq!(bytes(entry, b"peer id"), id.0);
                    }
                }
            }
            assert_eq!(keys(&value), expected_keys);
        }
        Body::Scrape { files } => {
            let mut input: Vec<(InfoHash, ScrapeStats)> = files
                .iter()
                .map(|&(seed, hash, seeders, completed, leechers)| {
                    // Half the time a hash from a 4-value alphabet.
                    let hash = if seed & 1 == 0 {
                        [seed >> 1 & 3; 20]
                    } else {
                        hash
                    };
                    let stats = ScrapeStats {
                        seeders,
                        completed,
                        leechers,
                    };
                    (InfoHash(hash), stats)
                })
                .collect();
            let original = input.clone();
            write_scrape(out, &mut input);
            let value = decode(out).expect("scrape answer does not decode");
            assert_eq!(keys(&value), [&b"files"[..]]);
            let Some(Value::Dict(decoded)) = value.get(b"files") else {
                panic!("files is not a dictionary");
            };
            let mut distinct: Vec<[u8; 20]> = original.iter().map(|(h, _)| h.0).collect();
            distinct.sort_unstable();
            distinct.dedup();
            let decoded_hashes: Vec<&[u8]> = decoded.iter().map(|(k, _)| *k).collect();
            let distinct_refs: Vec<&[u8]> = distinct.iter().map(|h| &h[..]).collect();
            assert_eq!(decoded_hashes, distinct_refs);
            for (hash, stats) in decoded {
                assert_eq!(
                    keys(stats),
                    [&b"complete"[..], b"downloaded", b"incomplete"]
                );
                let got = ScrapeStats {
                    seeders: u32::try_from(int(stats, b"complete")).expect("u32"),
                    completed: u32::try_from(int(stats, b"downloaded")).expect("u32"),
                    leechers: u32::try_from(int(stats, b"incomplete")).expect("u32"),
                };
                // A repeated info-hash is written once, with one of its entries.
                assert!(
                    original.iter().any(|(h, s)| h.0 == *hash && *s == got),
                    "stats for {hash:?} are not an input's"
                );
            }
        }
        Body::Failure { reason } => {
            write_failure(out, reason);
            let value = decode(out).expect("failure answer does not decode");
            assert_eq!(keys(&value), [&b"failure reason"[..]]);
            assert_eq!(bytes(&value, b"failure reason"), &reason[..]);
        }
    }
}

fuzz_target!(|input: Input| {
    let mut body = Vec::new();
    write_and_check(&input.body, &mut body);

    // The same body framed as an HTTP answer after bytes already in the vector.
    let status = STATUSES[usize::from(input.status) % STATUSES.len()];
    let connection = match input.connection % 3 {
        0 => Connection::KeepAlive,
        1 => Connection::KeepAliveHttp10,
        _ => Connection::Close,
    };
    let mut out = input.prefix.clone();
    write_response(&mut out, status, connection, |out| {
        out.extend_from_slice(&body)
    });
    let (prefix, answer) = out.split_at(input.prefix.len());
    assert_eq!(
        prefix,
        &input.prefix[..],
        "write_response touched earlier bytes"
    );
    let mut headers = [httparse::EMPTY_HEADER; 8];
    let mut response = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(head_len)) = response.parse(answer) else {
        panic!(
            "answer head does not parse: {:?}",
            String::from_utf8_lossy(answer)
        );
    };
    assert_eq!(response.code, Some(status));
    let header = |name: &str| {
        response
            .headers
            .iter()
            .find(|h| h.name.eq_ignore_ascii_case(name))
            .map(|h| h.value)
    };
    let length = header("content-length").expect("content-length");
    assert_eq!(length, body.len().to_string().as_bytes());
    let expected_connection: Option<&[u8]> = match connection {
        Connection::KeepAlive => None,
        Connection::KeepAliveHttp10 => Some(b"keep-alive"),
        Connection::Close => Some(b"close"),
    };
    assert_eq!(header("connection"), expected_connection);
    assert_eq!(&answer[head_len..], &body[..], "body differs");
});
