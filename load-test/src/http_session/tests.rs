use super::*;
use crate::config::TrafficConfig;
use crate::model::min_sources;
use tracker_proto::http::{parse_announce, parse_head, parse_scrape, Endpoint, Parsed, RealIp};
use tracker_proto::http::{
    write_announce, write_failure, write_response, write_scrape, AnnounceResponse,
};
use tracker_proto::{AnswerPeers, IpFamily, ScrapeStats};

const LOCAL: &str = "127.1.0.1";

fn session(mix: [u32; 2]) -> (HttpSession, TrafficModel, Rng, Stats) {
    let traffic = TrafficConfig {
        peers: 1000,
        torrents: 50,
        ..TrafficConfig::default()
    };
    let model = TrafficModel::new(&traffic, min_sources(traffic.peers), 5).unwrap();
    let target = HttpTarget::parse("https://127.0.0.1:8443/announce").unwrap();
    let session = HttpSession::new(
        target,
        0,
        LOCAL.parse().unwrap(),
        Weighted::new(mix).unwrap(),
    );
    (session, model, Rng::new(3), Stats::default())
}

fn respond(status: u16, body: impl FnOnce(&mut Vec<u8>)) -> Vec<u8> {
    let mut out = Vec::new();
    write_response(
        &mut out,
        status,
        tracker_proto::http::Connection::KeepAlive,
        body,
    );
    out
}

fn peer(addr: &str) -> SocketAddr {
    addr.parse().unwrap()
}

#[test]
fn targets_parse() {
    let t = HttpTarget::parse("http://127.0.0.1:8080").unwrap();
    assert_eq!(
        t,
        HttpTarget {
            tls: false,
            addr: "127.0.0.1:8080".parse().unwrap(),
            host: "127.0.0.1:8080".into(),
            prefix: String::new()
        }
    );
    let t = HttpTarget::parse("https://[::1]:8443/announce").unwrap();
    assert!(t.tls);
    assert_eq!(t.prefix, "");
    assert_eq!(t.addr, "[::1]:8443".parse().unwrap());
    let t = HttpTarget::parse("https://127.0.0.2/pass/announce").unwrap();
    assert_eq!(t.addr.port(), 443);
    assert_eq!(t.prefix, "/pass");
    assert!(HttpTarget::parse("http://10.0.0.1:80").is_err());
    assert!(HttpTarget::parse("http://example.com/").is_err());
    assert!(HttpTarget::parse("ftp://127.0.0.1:1").is_err());
}

#[test]
fn requests_parse_with_the_trackers_parser() {
    let (mut s, model, mut rng, mut stats) = session([1, 1]);
    let mut kinds = [0; 3];
    for _ in 0..200 {
        let mut out = Vec::new();
        s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
        let Ok(Parsed::Complete { request, consumed }) = parse_head(&out, RealIp::Off) else {
            panic!("{}", String::from_utf8_lossy(&out));
        };
        assert_eq!(consumed, out.len());
        assert!(out.starts_with(b"GET /"));
        match request.endpoint {
            Endpoint::Announce => {
                let a = parse_announce(request.query).unwrap();
                assert_eq!(a.numwant, Some(50));
                assert!(a.compact);
                assert_eq!(s.pending(), Some(Kind::Announce));
                kinds[1] += 1;
            }
            Endpoint::Scrape => {
                let mut hashes = Vec::new();
                parse_scrape(request.query, 74, &mut hashes).unwrap();
                assert!(!hashes.is_empty());
                kinds[2] += 1;
            }
            Endpoint::WebSocket => panic!("the HTTP load asked for an upgrade"),
        }
    }
    assert!(kinds[1] > 50 && kinds[2] > 50, "{kinds:?}");
    assert_eq!(stats.counters.sent[1] + stats.counters.sent[2], 200);
}

/// The session's answer to one announce, with `peers` (all of one family).
fn announce_once(peers: &[SocketAddr], complete: u32, tweak: impl FnOnce(&mut Vec<u8>)) -> Stats {
    let mut answer_peers = AnswerPeers::default();
    answer_peers.reset(peers.first().map_or(IpFamily::V4, |a| IpFamily::of(a.ip())));
    for &addr in peers {
        assert!(answer_peers.push_addr(addr, None));
    }
    let peers = &answer_peers;
    let (mut s, model, mut rng, mut stats) = session([1, 0]);
    let mut out = Vec::new();
    s.write_request(&model, &mut rng, 1_000, &mut out, &mut stats);
    let answer = respond(200, |body| {
        write_announce(
            body,
            &AnnounceResponse {
                interval: 1800,
                min_interval: None,
                complete,
                downloaded: None,
                incomplete: 0,
                peers,
                compact: true,
                no_peer_id: false,
                warning: None,
            },
        );
        tweak(body);
    });
    match frame(&answer) {
        Ok(Some(framed)) => s.on_answer(&answer, framed, 5_000, &mut stats),
        Ok(None) => panic!("incomplete"),
        Err(why) => stats.invalid(why),
    }
    stats
}

#[test]
fn a_prefix_goes_before_the_endpoint() {
    let (_, model, mut rng, mut stats) = session([1, 1]);
    let target = HttpTarget::parse("http://127.0.0.1:80/key/announce").unwrap();
    let mut s = HttpSession::new(
        target,
        0,
        LOCAL.parse().unwrap(),
        Weighted::new([1, 1]).unwrap(),
    );
    for _ in 0..20 {
        let mut out = Vec::new();
        s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
        assert!(
            out.starts_with(b"GET /key/announce?") || out.starts_with(b"GET /key/scrape?"),
            "{}",
            String::from_utf8_lossy(&out)
        );
    }
}

#[test]
fn good_announces_are_ok() {
    let stats = announce_once(&[peer("127.1.0.9:2000")], 5, |_| {});
    assert_eq!(stats.counters.ok[Kind::Announce as usize], 1);
    assert_eq!(stats.counters.invalid, 0);
    assert_eq!(stats.peers_returned, 1);
    assert_eq!(stats.latency[Kind::Announce as usize].max(), 4_000);
}

#[test]
fn a_crlf_after_the_body_is_tolerated_and_garbage_is_not() {
    let stats = announce_once(&[peer("127.1.0.9:2000")], 5, |b| {
        b.extend_from_slice(b"\r\n")
    });
    assert_eq!(stats.counters.ok[Kind::Announce as usize], 1);
    let stats = announce_once(&[peer("127.1.0.9:2000")], 5, |b| b.extend_from_slice(b"x"));
    assert_eq!(stats.counters.ok[Kind::Announce as usize], 0);
}

#[test]
fn bad_announces_are_invalid() {
    let cases: [(Vec<SocketAddr>, u32, Invalid); 4] = [
        (vec![peer("10.1.0.9:2000")], 5, Invalid::BadPeer),
        (
            vec![peer("127.1.0.9:2000"); 2],
            1,
            Invalid::ImplausibleCounts,
        ),
        (vec![peer("127.1.0.9:2000"); 51], 100, Invalid::TooManyPeers),
        (vec![peer("[::1]:2000")], 5, Invalid::BadPeer),
    ];
    for (peers, complete, why) in cases {
        let stats = announce_once(&peers, complete, |_| {});
        assert_eq!(stats.invalid[why as usize], 1, "{why:?}");
    }
    let stats = announce_once(&[], 1, |body| body.push(b'x'));
    assert_eq!(stats.invalid[Invalid::BadBencode as usize], 1);
}

#[test]
fn failures_count_as_errors() {
    let (mut s, model, mut rng, mut stats) = session([1, 0]);
    let mut out = Vec::new();
    s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
    let answer = respond(200, |b| write_failure(b, b"unregistered torrent"));
    let framed = frame(&answer).unwrap().unwrap();
    s.on_answer(&answer, framed, 10, &mut stats);
    assert_eq!(stats.counters.errors[Kind::Announce as usize], 1);
    assert_eq!(stats.error_messages.by_message[0].0, "unregistered torrent");
    // Not 200: invalid.
    s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
    let answer = respond(404, |b| write_failure(b, b"not found"));
    let framed = frame(&answer).unwrap().unwrap();
    s.on_answer(&answer, framed, 10, &mut stats);
    assert_eq!(stats.invalid[Invalid::HttpStatus as usize], 1);
}

#[test]
fn scrapes_must_answer_the_hashes_asked() {
    for (drop_one, ok) in [(false, true), (true, false)] {
        let (mut s, model, mut rng, mut stats) = session([0, 1]);
        let mut out = Vec::new();
        // Ask until a scrape of at least two distinct hashes comes up.
        let hashes = loop {
            out.clear();
            s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
            let Ok(Parsed::Complete { request, .. }) = parse_head(&out, RealIp::Off) else {
                panic!()
            };
            let mut hashes = Vec::new();
            parse_scrape(request.query, 74, &mut hashes).unwrap();
            hashes.sort();
            hashes.dedup();
            if hashes.len() >= 2 {
                break hashes;
            }
        };
        let mut files: Vec<_> = hashes
            .iter()
            .map(|h| (*h, ScrapeStats::default()))
            .collect();
        if drop_one {
            files.pop();
        }
        let answer = respond(200, |b| write_scrape(b, &mut files));
        let framed = frame(&answer).unwrap().unwrap();
        s.on_answer(&answer, framed, 10, &mut stats);
        assert_eq!(stats.counters.ok[Kind::Scrape as usize], u64::from(ok));
        assert_eq!(
            stats.invalid[Invalid::ScrapeMismatch as usize],
            u64::from(!ok)
        );
    }
}

#[test]
fn framing_waits_for_the_whole_body() {
    let answer = respond(200, |b| b.extend_from_slice(b"d8:intervali1ee"));
    for cut in 0..answer.len() {
        assert_eq!(frame(&answer[..cut]), Ok(None), "cut at {cut}");
    }
    let framed = frame(&answer).unwrap().unwrap();
    assert_eq!(framed.len, answer.len());
    assert!(!framed.close);
    let close = b"HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 0\r\n\r\n";
    assert!(frame(close).unwrap().unwrap().close);
    let chunked = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n";
    assert_eq!(frame(chunked), Err(Invalid::Malformed));
    let no_length = b"HTTP/1.1 200 OK\r\n\r\n";
    assert_eq!(frame(no_length), Err(Invalid::Malformed));
    assert_eq!(frame(b"SSH-2.0\r\n\r\n"), Err(Invalid::Malformed));
}

#[test]
fn abandoned_requests_are_counted() {
    let (mut s, model, mut rng, mut stats) = session([1, 0]);
    let mut out = Vec::new();
    s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
    s.abandon(true, &mut stats);
    s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
    s.abandon(false, &mut stats);
    s.abandon(false, &mut stats);
    assert_eq!(stats.counters.timeouts[Kind::Announce as usize], 1);
    assert_eq!(stats.invalid[Invalid::ConnectionLost as usize], 1);
}

/// A valid announce answer (no peers) for the request in flight of `s`.
fn answer_announce(s: &mut HttpSession, now_ns: u64, stats: &mut Stats) {
    let peers = AnswerPeers::default();
    let answer = respond(200, |body| {
        write_announce(
            body,
            &AnnounceResponse {
                interval: 1800,
                min_interval: None,
                complete: 1,
                downloaded: None,
                incomplete: 0,
                peers: &peers,
                compact: true,
                no_peer_id: false,
                warning: None,
            },
        );
    });
    let framed = frame(&answer).unwrap().unwrap();
    s.on_answer(&answer, framed, now_ns, stats);
}

#[test]
fn a_request_lost_before_any_answer_is_retried_once() {
    let (mut s, model, mut rng, mut stats) = session([1, 0]);
    let mut out = Vec::new();
    s.write_request(&model, &mut rng, 1_000, &mut out, &mut stats);
    // Nothing to resend on a fresh connection.
    assert!(!s.resend_due());
    assert!(s.lost(false, &mut stats));
    assert!(s.resend_due());
    assert_eq!(stats.counters.invalid, 0);
    // The next connection sends it again, and its answer counts from the
    // first send.
    assert!(s.resend(&mut stats));
    assert!(!s.resend(&mut stats));
    assert_eq!(stats.retried, 1);
    assert_eq!(s.pending(), Some(Kind::Announce));
    answer_announce(&mut s, 9_000, &mut stats);
    assert_eq!(stats.counters.ok[Kind::Announce as usize], 1);
    assert_eq!(stats.latency[Kind::Announce as usize].max(), 8_000);
    assert_eq!(stats.counters.sent[Kind::Announce as usize], 1);
    assert_eq!(stats.counters.invalid, 0);
}

#[test]
fn a_request_lost_twice_or_mid_answer_is_invalid() {
    let (mut s, model, mut rng, mut stats) = session([1, 0]);
    let mut out = Vec::new();
    // Lost, sent again, lost again.
    s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
    assert!(s.lost(false, &mut stats));
    assert!(s.resend(&mut stats));
    assert!(!s.lost(false, &mut stats));
    assert_eq!(s.pending(), None);
    assert_eq!(stats.invalid[Invalid::ConnectionLost as usize], 1);
    // Lost after part of its answer: no retry.
    s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
    assert!(!s.lost(true, &mut stats));
    assert!(!s.resend(&mut stats));
    assert_eq!(stats.invalid[Invalid::ConnectionLost as usize], 2);
    // A retried request that times out is a time-out.
    s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
    assert!(s.lost(false, &mut stats));
    assert!(s.resend(&mut stats));
    s.abandon(true, &mut stats);
    assert_eq!(stats.counters.timeouts[Kind::Announce as usize], 1);
    // One lost that never found a new connection counts when given up.
    s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
    assert!(s.lost(false, &mut stats));
    s.abandon(false, &mut stats);
    assert_eq!(stats.invalid[Invalid::ConnectionLost as usize], 3);
    assert_eq!(stats.retried, 2);
    assert_eq!(stats.counters.invalid, 3);
}

/// A session over a model whose peers announce with passkeys.
fn private_session() -> (HttpSession, TrafficModel, Rng, Stats) {
    let (s, _, rng, stats) = session([1, 1]);
    let keys: Vec<crate::private::Passkey> = (0..5)
        .map(|i| crate::private::Passkey::parse(&format!("k{i:031}")).unwrap())
        .collect();
    let traffic = TrafficConfig {
        peers: 1000,
        torrents: 50,
        ..TrafficConfig::default()
    };
    let lists = crate::private::Lists {
        passkeys: Some(keys.into()),
        info_hashes: None,
    };
    let model = TrafficModel::with_lists(&traffic, min_sources(traffic.peers), 5, lists).unwrap();
    (s, model, rng, stats)
}

#[test]
fn private_requests_carry_the_peers_passkey_in_the_path() {
    let (mut s, model, mut rng, mut stats) = private_session();
    let mut announces = 0;
    for _ in 0..200 {
        let mut out = Vec::new();
        s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
        let Ok(Parsed::Complete { request, .. }) = parse_head(&out, RealIp::Off) else {
            panic!("{}", String::from_utf8_lossy(&out));
        };
        let key = request.key.expect("a passkey in the path");
        assert!(out.starts_with(b"GET /announce/k0") || out.starts_with(b"GET /scrape/k0"));
        if request.endpoint == Endpoint::Announce {
            announces += 1;
            let a = parse_announce(request.query).unwrap();
            let p = model.peer_index(&a.peer_id).unwrap();
            assert_eq!(model.passkey(&model.peer(p)).unwrap().0[..], key[..]);
        }
    }
    assert!(announces > 50);
}

#[test]
fn passkey_first_requests_are_in_ocelots_form() {
    let (s, model, mut rng, mut stats) = private_session();
    let mut s = s.with_passkey_first(true);
    let (mut announces, mut scrapes) = (0, 0);
    for _ in 0..200 {
        let mut out = Vec::new();
        s.write_request(&model, &mut rng, 0, &mut out, &mut stats);
        // Ocelot's fixed offsets: the passkey at 5..37, '/' at 37, the action.
        assert!(
            out.starts_with(b"GET /k0"),
            "{}",
            String::from_utf8_lossy(&out)
        );
        assert_eq!(out[37], b'/');
        let key =
            crate::private::Passkey::parse(std::str::from_utf8(&out[5..37]).unwrap()).unwrap();
        if out[38..].starts_with(b"announce?") {
            announces += 1;
            let query_at = 38 + "announce?".len();
            let end = query_at + out[query_at..].iter().position(|&b| b == b' ').unwrap();
            let a = parse_announce(&out[query_at..end]).unwrap();
            let p = model.peer_index(&a.peer_id).unwrap();
            assert_eq!(model.passkey(&model.peer(p)), Some(&key));
        } else {
            assert!(out[38..].starts_with(b"scrape?"));
            scrapes += 1;
        }
    }
    assert!(announces > 50 && scrapes > 50);
}

#[test]
fn a_pairs_totals_grow_from_announce_to_announce() {
    // One torrent, one peer: every announce is of the same pair.
    let traffic = TrafficConfig {
        peers: 1,
        torrents: 1,
        seeder_probability: 0.0,
        events: crate::config::EventWeights {
            none: 1,
            started: 0,
            completed: 0,
            stopped: 0,
        },
        ..TrafficConfig::default()
    };
    let model = TrafficModel::new(&traffic, 1, 5).unwrap();
    let (mut s, _, mut rng, mut stats) = session([1, 0]);
    let mut last = (0, 0, u64::MAX);
    for secs in [0u64, 1, 5, 30, 600] {
        let mut out = Vec::new();
        s.write_request(&model, &mut rng, secs * 1_000_000_000, &mut out, &mut stats);
        let Ok(Parsed::Complete { request, .. }) = parse_head(&out, RealIp::Off) else {
            panic!("{}", String::from_utf8_lossy(&out));
        };
        assert_eq!(request.key, None, "no passkeys given, none sent");
        let a = parse_announce(request.query).unwrap();
        assert!(a.uploaded > last.0 || secs == 0, "uploaded grows");
        assert!(a.downloaded > last.1 || secs == 0, "downloaded grows");
        assert!(a.left < last.2 && a.left > 0, "left shrinks");
        last = (a.uploaded, a.downloaded, a.left);
    }
}

#[test]
fn a_warning_is_counted_and_the_answer_still_valid() {
    let stats = announce_once(&[], 0, |body| {
        // Put a warning in before the dictionary's end.
        body.pop();
        body.extend_from_slice(b"15:warning message13:Rate limited.e");
    });
    assert_eq!(stats.counters.ok[Kind::Announce as usize], 1);
    assert_eq!(stats.counters.invalid, 0);
    assert_eq!(
        stats.warnings.by_message,
        [("Rate limited.".to_string(), 1)]
    );
}
