use super::*;
use crate::types::{AnnounceEvent, InfoHash, PeerId};
use proptest::prelude::*;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

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
fn keys_in_paths_in_unit3d_and_gazelle_forms() {
    let key = b"0123456789abcdef0123456789ABCDEF";
    for (path, expected) in [
        (&b"/announce"[..], Some((Endpoint::Announce, None))),
        (b"/scrape/", Some((Endpoint::Scrape, None))),
        (
            b"/announce/0123456789abcdef0123456789ABCDEF",
            Some((Endpoint::Announce, Some(&key[..]))),
        ),
        (
            b"/0123456789abcdef0123456789ABCDEF/announce/",
            Some((Endpoint::Announce, Some(&key[..]))),
        ),
        (
            b"/0123456789abcdef0123456789ABCDEF/scrape",
            Some((Endpoint::Scrape, Some(&key[..]))),
        ),
        (b"/scrape/k", Some((Endpoint::Scrape, Some(&b"k"[..])))),
        // A key is one segment, of at most 64 bytes.
        (b"/announce/a/b", None),
        (b"/a/b/announce", None),
        (b"/announce//", None),
        (b"//announce", None),
        (b"/key/other", None),
        (b"/", None),
        (b"", None),
        (b"announce", None),
        (b"/a", None),
    ] {
        assert_eq!(route(path), expected, "{}", String::from_utf8_lossy(path));
    }
    let long = [b"/announce/".as_slice(), &[b'k'; MAX_PATH_KEY + 1]].concat();
    assert_eq!(route(&long), None);
    assert_eq!(
        route(&long[..long.len() - 1]).map(|r| r.0),
        Some(Endpoint::Announce)
    );

    let buf = b"GET /announce/0123456789abcdef0123456789ABCDEF?port=1 HTTP/1.1\r\n\
                User-Agent: qBittorrent/5.0.1\r\n\r\n";
    let (request, _) = complete(head(buf));
    assert_eq!(request.endpoint, Endpoint::Announce);
    assert_eq!(request.key, Some(&key[..]));
    assert_eq!(request.query, b"port=1");
    assert_eq!(request.user_agent, Some(&b"qBittorrent/5.0.1"[..]));
    assert!(!request.browser_headers);
    let (request, _) = complete(head(b"GET /announce HTTP/1.1\r\n\r\n"));
    assert_eq!((request.key, request.user_agent), (None, None));
}

#[test]
fn a_header_only_browsers_send_is_noted() {
    for header in [
        "Accept-Language: en",
        "referer: http://example.org/",
        "ACCEPT-CHARSET: utf-8",
        "Want-Digest: sha-256",
    ] {
        let buf = format!("GET /announce/key?port=1 HTTP/1.1\r\nUser-Agent: x\r\n{header}\r\n\r\n");
        let (request, _) = complete(head(buf.as_bytes()));
        assert!(request.browser_headers, "{header}");
    }
    for header in ["Accept: */*", "Accept-Encoding: gzip", "Referrer-Policy: x"] {
        let buf = format!("GET /announce/key?port=1 HTTP/1.1\r\n{header}\r\n\r\n");
        let (request, _) = complete(head(buf.as_bytes()));
        assert!(!request.browser_headers, "{header}");
    }
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
fn port_0_only_with_a_stop() {
    let stop = announce("&port=0&event=stopped").unwrap();
    assert_eq!((stop.port, stop.event), (0, AnnounceEvent::Stopped));
    // The event may come before or after the port.
    assert!(announce("&event=stopped&port=0").is_ok());
    assert_eq!(
        announce("&port=0&event=started").map(|a| a.port),
        Err(RequestError::InvalidPort)
    );
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

#[test]
fn websocket_upgrades_of_root_and_announce() {
    let key = "dGhlIHNhbXBsZSBub25jZQ==";
    for path in ["/", "/announce", "/announce/"] {
        let head = format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n"
        );
        let Ok(Parsed::Complete { request, consumed }) = parse_head(head.as_bytes(), RealIp::Off)
        else {
            panic!("{path}: not parsed")
        };
        assert_eq!(consumed, head.len());
        assert_eq!(request.endpoint, Endpoint::WebSocket, "{path}");
        assert_eq!(request.websocket_key, Some(key.as_bytes()));
    }
    for (extra, error) in [
        ("Sec-WebSocket-Version: 13\r\n", RequestError::BadUpgrade),
        (
            "Sec-WebSocket-Key: short\r\nSec-WebSocket-Version: 13\r\n",
            RequestError::BadUpgrade,
        ),
        (
            "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 8\r\n",
            RequestError::BadUpgrade,
        ),
    ] {
        let head = format!("GET / HTTP/1.1\r\nUpgrade: websocket\r\n{extra}\r\n");
        assert_eq!(
            parse_head(head.as_bytes(), RealIp::Off),
            Err(error),
            "{extra}"
        );
    }
    // Without the upgrade, `/` is not served, and a scrape is not upgraded.
    assert_eq!(
        parse_head(b"GET / HTTP/1.1\r\n\r\n", RealIp::Off),
        Err(RequestError::NotFound)
    );
    let scrape = "GET /scrape HTTP/1.1\r\nUpgrade: websocket\r\n\r\n";
    let Ok(Parsed::Complete { request, .. }) = parse_head(scrape.as_bytes(), RealIp::Off) else {
        panic!("scrape not parsed")
    };
    assert_eq!(request.endpoint, Endpoint::Scrape);
    assert_eq!(request.websocket_key, None);
}
