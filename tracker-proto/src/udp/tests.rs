use super::*;
use crate::AnswerPeers;
use proptest::collection::vec;
use proptest::prelude::*;

fn header(connection_id: i64, action: i32, txid: i32) -> Vec<u8> {
    let mut out = Vec::new();
    write_request_header(&mut out, connection_id, action, TransactionId(txid));
    out
}

fn announce(options: AnnounceOptions<'_>) -> AnnounceRequest<'_> {
    AnnounceRequest {
        connection_id: ConnectionId(0x1234_5678_9abc_def0),
        transaction_id: TransactionId(-7),
        info_hash: InfoHash([0xaa; 20]),
        peer_id: PeerId(*b"-lt20A0-abcdefghijkl"),
        downloaded: 0,
        left: 1 << 30,
        uploaded: 0,
        event: AnnounceEvent::Started,
        ip_address: 0,
        key: 0xdead_beef,
        num_want: -1,
        port: 6881,
        options,
    }
}

fn announce_bytes(tail: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    announce(AnnounceOptions::EMPTY).write(&mut out);
    out.extend_from_slice(tail);
    out
}

fn request_error(bytes: &[u8]) -> ParseError {
    Request::parse(bytes).expect_err("malformed request parsed")
}

#[test]
fn short_requests_report_the_ids_they_have() {
    let full = header(PROTOCOL_ID, ACTION_CONNECT, 9);
    for len in 0..16 {
        let error = request_error(&full[..len]);
        assert_eq!(error.kind, ParseErrorKind::TooShort);
        assert_eq!(error.connection_id.is_some(), len >= 8);
        assert_eq!(error.transaction_id, None);
    }
    let error = request_error(&announce_bytes(&[])[..97]);
    assert_eq!(error.kind, ParseErrorKind::TooShort);
    assert_eq!(
        error.connection_id,
        Some(ConnectionId(0x1234_5678_9abc_def0))
    );
    assert_eq!(error.transaction_id, Some(TransactionId(-7)));
}

#[test]
fn connect_needs_the_magic_and_tolerates_trailing_bytes() {
    let error = request_error(&header(PROTOCOL_ID + 1, ACTION_CONNECT, 5));
    assert_eq!(error.kind, ParseErrorKind::BadProtocolId);
    assert_eq!(error.transaction_id, Some(TransactionId(5)));

    let mut padded = header(PROTOCOL_ID, ACTION_CONNECT, 5);
    padded.extend_from_slice(&[0; 4]);
    let expected = Request::Connect(ConnectRequest {
        transaction_id: TransactionId(5),
    });
    assert_eq!(Request::parse(&padded), Ok(expected));
}

#[test]
fn unknown_actions_are_refused() {
    for action in [ACTION_ERROR, 4, -1, i32::MAX] {
        let error = request_error(&header(PROTOCOL_ID, action, 1));
        assert_eq!(error.kind, ParseErrorKind::UnknownAction);
    }
}

#[test]
fn bad_event_is_refused() {
    let mut bytes = announce_bytes(&[]);
    bytes[80..84].copy_from_slice(&4i32.to_be_bytes());
    assert_eq!(request_error(&bytes).kind, ParseErrorKind::BadEvent);
}

#[test]
fn truncated_options_are_refused() {
    for tail in [
        &[2][..],
        &[2, 3, b'a', b'b'],
        &[1, 2],
        &[2, 0, 2, 255],
        // Unknown types have a length byte too: cut short, they are refused
        // the same way.
        &[7],
        &[7, 3, 1, 2],
        &[2, 1, b'a', 255, 1],
    ] {
        let error = request_error(&announce_bytes(tail));
        assert_eq!(error.kind, ParseErrorKind::TruncatedOption, "{tail:?}");
    }
}

#[test]
fn options_stop_at_end_of_options() {
    for tail in [&[2, 1, b'a', 0, 2, 9][..], &[1, 1, 2, 1, b'a', 0, 7]] {
        let bytes = announce_bytes(tail);
        let Ok(Request::Announce(request)) = Request::parse(&bytes) else {
            panic!("announce with options {tail:?} refused");
        };
        assert_eq!(request.url_data().collect::<Vec<_>>(), [b"a"]);
    }
}

/// BEP 41: an option of a type the tracker does not know is skipped by its
/// length, so URLData after it (the passkey of a private tracker) is kept.
#[test]
fn unknown_option_types_are_skipped_by_their_length() {
    let mut options = Vec::new();
    AnnounceOptions::write_url_data(&mut options, b"/announce");
    options.extend_from_slice(&[3, 0, 0x7f, 4, 2, 0, 1, 9, 255, 2, 0xaa, 0xbb, 1]);
    AnnounceOptions::write_url_data(&mut options, b"?passkey=abc");
    options.extend_from_slice(&[0, 3, 200]);
    let bytes = announce_bytes(&options);
    let Ok(Request::Announce(request)) = Request::parse(&bytes) else {
        panic!("announce refused");
    };
    assert_eq!(
        request.url_data().collect::<Vec<_>>(),
        [&b"/announce"[..], b"?passkey=abc"]
    );
    let mut again = Vec::new();
    request.write(&mut again);
    assert_eq!(again, bytes, "written back as read");
}

#[test]
fn url_data_split_over_two_options() {
    // A libtorrent-style started announce for a private torrent.
    let mut options = Vec::new();
    for part in [&b"/announce"[..], b"?passkey=abc"] {
        AnnounceOptions::write_url_data(&mut options, part);
    }
    options.push(OPTION_END);
    let bytes = announce_bytes(&options);
    assert_eq!(bytes.len(), 98 + 2 + 9 + 2 + 12 + 1);

    let Ok(Request::Announce(request)) = Request::parse(&bytes) else {
        panic!("announce refused");
    };
    assert_eq!(
        request.url_data().collect::<Vec<_>>().concat(),
        b"/announce?passkey=abc"
    );
    assert_eq!(request.event, AnnounceEvent::Started);
    assert_eq!(request.num_want, -1);
    assert_eq!(request.port, 6881);
    assert_eq!(request.peer_id, PeerId(*b"-lt20A0-abcdefghijkl"));
}

#[test]
fn long_url_data_is_split_into_255_byte_options() {
    let url = [b'x'; 600];
    let mut options = Vec::new();
    AnnounceOptions::write_url_data(&mut options, &url);
    let parsed = AnnounceOptions::parse(&options).expect("valid options");
    let lens: Vec<_> = parsed.url_data().map(<[u8]>::len).collect();
    assert_eq!(lens, [255, 255, 90]);
}

#[test]
fn negative_counters_read_as_large_unsigned() {
    let mut bytes = announce_bytes(&[]);
    bytes[64..72].copy_from_slice(&(-1i64).to_be_bytes());
    let Ok(Request::Announce(request)) = Request::parse(&bytes) else {
        panic!("announce refused");
    };
    assert_eq!(request.left, u64::MAX);
}

#[test]
fn bad_scrape_lengths_are_refused() {
    let cases = [
        (0, ParseErrorKind::NoInfoHashes),
        (19, ParseErrorKind::BadLength),
        (21, ParseErrorKind::BadLength),
        (20 * 75, ParseErrorKind::TooManyInfoHashes),
    ];
    for (tail, kind) in cases {
        let mut bytes = header(42, ACTION_SCRAPE, 3);
        bytes.resize(16 + tail, 0xee);
        let error = request_error(&bytes);
        assert_eq!(error.kind, kind, "{tail} bytes of hashes");
        assert_eq!(error.connection_id, Some(ConnectionId(42)));
        assert_eq!(error.transaction_id, Some(TransactionId(3)));
    }
}

#[test]
fn malformed_responses_are_refused() {
    let txid = TransactionId(1);
    let mut connect = Vec::new();
    write_connect_response(&mut connect, txid, ConnectionId(2));
    let mut announce = Vec::new();
    write_announce_response(&mut announce, txid, 1, 2, 3, &[]);
    let mut scrape = Vec::new();
    write_scrape_response(&mut scrape, txid, [ScrapeStats::default()]);
    let cases = [
        (&connect[..12], IpFamily::V4, ParseErrorKind::TooShort),
        (&connect[..7], IpFamily::V4, ParseErrorKind::TooShort),
        (&announce[..19], IpFamily::V4, ParseErrorKind::TooShort),
        (&scrape[..19], IpFamily::V4, ParseErrorKind::BadLength),
        (
            &[0, 0, 0, 9, 0, 0, 0, 1][..],
            IpFamily::V4,
            ParseErrorKind::UnknownAction,
        ),
    ];
    for (bytes, family, kind) in cases {
        let error = Response::parse(bytes, family).expect_err("malformed response parsed");
        assert_eq!(error.kind, kind, "{bytes:?}");
        assert_eq!(error.connection_id, None);
    }
    // Six bytes of peers are one IPv4 peer but a third of an IPv6 one.
    announce.extend_from_slice(&[127, 0, 0, 1, 0x1a, 0xe1]);
    assert!(Response::parse(&announce, IpFamily::V4).is_ok());
    let error = Response::parse(&announce, IpFamily::V6).expect_err("parsed");
    assert_eq!(error.kind, ParseErrorKind::BadLength);
}

fn event() -> impl Strategy<Value = AnnounceEvent> {
    prop_oneof![
        Just(AnnounceEvent::None),
        Just(AnnounceEvent::Completed),
        Just(AnnounceEvent::Started),
        Just(AnnounceEvent::Stopped),
    ]
}

fn family() -> impl Strategy<Value = IpFamily> {
    prop_oneof![Just(IpFamily::V4), Just(IpFamily::V6)]
}

/// One BEP 41 option as a client might send it.
#[derive(Clone, Debug)]
enum TestOption {
    Nop,
    UrlData(Vec<u8>),
    /// A type the tracker does not know (3 to 255), with its data.
    Unknown(u8, Vec<u8>),
}

/// Options as a client might send them: URLData, NOPs and options of types
/// unknown to the tracker, then maybe EndOfOptions followed by junk.
fn options() -> impl Strategy<Value = (Vec<TestOption>, Option<Vec<u8>>)> {
    let data = || vec(any::<u8>(), 0..=255);
    let option = prop_oneof![
        Just(TestOption::Nop),
        data().prop_map(TestOption::UrlData),
        (3..=u8::MAX, data()).prop_map(|(kind, data)| TestOption::Unknown(kind, data)),
    ];
    (
        vec(option, 0..5),
        proptest::option::of(vec(any::<u8>(), 0..8)),
    )
}

/// Parses, writes and parses again, which must give the same value.
fn assert_reparses(bytes: &[u8], family: IpFamily) {
    if let Ok(request) = Request::parse(bytes) {
        let mut out = Vec::new();
        request.write(&mut out);
        assert_eq!(Request::parse(&out), Ok(request));
        match request {
            Request::Announce(announce) => {
                assert_eq!(
                    Request::peek_announce(bytes),
                    Some(AnnouncePeek {
                        info_hash: announce.info_hash,
                        port: announce.port
                    })
                );
                let url_len: usize = announce.url_data().map(<[u8]>::len).sum();
                assert!(url_len <= announce.options.as_bytes().len());
            }
            Request::Scrape(scrape) => {
                assert_eq!(Request::peek_announce(bytes), None);
                assert_eq!(scrape.info_hashes.iter().count(), scrape.info_hashes.len());
            }
            Request::Connect(_) => assert_eq!(Request::peek_announce(bytes), None),
        }
    }
    if let Ok(response) = Response::parse(bytes, family) {
        let mut out = Vec::new();
        response.write(&mut out);
        assert_eq!(Response::parse(&out, family), Ok(response));
        match response {
            Response::Announce { peers, .. } => assert_eq!(peers.iter().count(), peers.len()),
            Response::Scrape { stats, .. } => assert_eq!(stats.iter().count(), stats.len()),
            _ => {}
        }
    }
}

proptest! {
    #[test]
    fn connect_request_round_trips(txid: i32) {
        let request = Request::Connect(ConnectRequest { transaction_id: TransactionId(txid) });
        let mut out = Vec::new();
        request.write(&mut out);
        prop_assert_eq!(out.len(), 16);
        prop_assert_eq!(Request::parse(&out), Ok(request));
    }

    #[test]
    fn announce_request_round_trips(
        ids in (any::<i64>(), any::<i32>()),
        hashes in (any::<[u8; 20]>(), any::<[u8; 20]>()),
        counters in (any::<u64>(), any::<u64>(), any::<u64>()),
        event in event(),
        fields in (any::<u32>(), any::<u32>(), any::<i32>(), any::<u16>()),
        (options, end) in options(),
    ) {
        let mut option_bytes = Vec::new();
        for option in &options {
            let (kind, data) = match option {
                TestOption::Nop => {
                    option_bytes.push(OPTION_NOP);
                    continue;
                }
                TestOption::UrlData(data) => (OPTION_URL_DATA, data),
                TestOption::Unknown(kind, data) => (*kind, data),
            };
            option_bytes.extend_from_slice(&[kind, data.len() as u8]);
            option_bytes.extend_from_slice(data);
        }
        if let Some(junk) = &end {
            option_bytes.push(OPTION_END);
            option_bytes.extend_from_slice(junk);
        }
        let request = AnnounceRequest {
            connection_id: ConnectionId(ids.0),
            transaction_id: TransactionId(ids.1),
            info_hash: InfoHash(hashes.0),
            peer_id: PeerId(hashes.1),
            downloaded: counters.0,
            left: counters.1,
            uploaded: counters.2,
            event,
            ip_address: fields.0,
            key: fields.1,
            num_want: fields.2,
            port: fields.3,
            options: AnnounceOptions::parse(&option_bytes).expect("valid options"),
        };
        let mut out = Vec::new();
        Request::Announce(request).write(&mut out);
        prop_assert_eq!(out.len(), ANNOUNCE_REQUEST_LEN + option_bytes.len());
        let parsed = Request::parse(&out);
        prop_assert_eq!(parsed, Ok(Request::Announce(request)));
        let peek = AnnouncePeek {
            info_hash: request.info_hash,
            port: request.port,
        };
        prop_assert_eq!(Request::peek_announce(&out), Some(peek));
        let url: Vec<u8> = options
            .iter()
            .filter_map(|option| match option {
                TestOption::UrlData(data) => Some(data.as_slice()),
                _ => None,
            })
            .flatten()
            .copied()
            .collect();
        prop_assert_eq!(request.url_data().collect::<Vec<_>>().concat(), url);
    }

    #[test]
    fn scrape_request_round_trips(
        ids in (any::<i64>(), any::<i32>()),
        hashes in vec(any::<[u8; 20]>().prop_map(InfoHash), 1..=MAX_SCRAPE_INFO_HASHES),
    ) {
        let mut out = Vec::new();
        write_scrape_request(&mut out, ConnectionId(ids.0), TransactionId(ids.1), &hashes);
        let Ok(Request::Scrape(request)) = Request::parse(&out) else {
            panic!("scrape refused");
        };
        prop_assert_eq!(request.connection_id, ConnectionId(ids.0));
        prop_assert_eq!(request.transaction_id, TransactionId(ids.1));
        prop_assert_eq!(request.info_hashes.len(), hashes.len());
        prop_assert_eq!(request.info_hashes.iter().collect::<Vec<_>>(), hashes);
        let mut again = Vec::new();
        Request::Scrape(request).write(&mut again);
        prop_assert_eq!(again, out);
    }

    #[test]
    fn announce_response_round_trips(
        family in family(),
        counts in (any::<i32>(), any::<u32>(), any::<u32>(), any::<u32>()),
        peer_bytes in (0..=MAX_PEERS_V4).prop_flat_map(|n| vec(any::<u8>(), n * 18)),
    ) {
        let len = peer_bytes.len() / 18 * family.peer_len();
        let peers = CompactPeers::parse(family, &peer_bytes[..len]).expect("whole peers");
        let response = Response::Announce {
            transaction_id: TransactionId(counts.0),
            interval: counts.1,
            leechers: counts.2,
            seeders: counts.3,
            peers,
        };
        let mut out = Vec::new();
        response.write(&mut out);
        prop_assert_eq!(Response::parse(&out, family), Ok(response));
    }

    #[test]
    fn announce_response_from_peers_round_trips(
        family in family(),
        addrs in vec(any::<SocketAddr>(), 0..MAX_PEERS_V4),
    ) {
        let mut peers = AnswerPeers::default();
        peers.reset(family);
        let expected: Vec<_> = addrs
            .iter()
            .filter(|&&addr| peers.push_addr(addr, None))
            .map(|addr| SocketAddr::new(addr.ip().to_canonical(), addr.port()))
            .collect();
        let mut out = Vec::new();
        write_announce_response(&mut out, TransactionId(3), 1800, 4, 5, peers.compact());
        let Ok(Response::Announce { transaction_id, interval, leechers, seeders, peers }) =
            Response::parse(&out, family)
        else {
            panic!("announce response refused");
        };
        prop_assert_eq!((transaction_id, interval, leechers, seeders), (TransactionId(3), 1800, 4, 5));
        prop_assert_eq!(peers.len(), expected.len());
        prop_assert_eq!(peers.iter().collect::<Vec<_>>(), expected);
    }

    #[test]
    fn scrape_response_round_trips(
        txid: i32,
        stats in vec(any::<(u32, u32, u32)>(), 0..=MAX_SCRAPE_INFO_HASHES),
    ) {
        let stats: Vec<_> = stats
            .into_iter()
            .map(|(seeders, completed, leechers)| ScrapeStats { seeders, completed, leechers })
            .collect();
        let mut out = Vec::new();
        write_scrape_response(&mut out, TransactionId(txid), stats.iter().copied());
        let parsed = Response::parse(&out, IpFamily::V4);
        let Ok(Response::Scrape { transaction_id, stats: list }) = parsed else {
            panic!("scrape response refused");
        };
        prop_assert_eq!(transaction_id, TransactionId(txid));
        prop_assert_eq!(list.iter().collect::<Vec<_>>(), stats);
        let mut again = Vec::new();
        parsed.expect("parsed").write(&mut again);
        prop_assert_eq!(again, out);
    }

    #[test]
    fn connect_and_error_responses_round_trip(
        txid: i32,
        connection_id: i64,
        message in vec(any::<u8>(), 0..100),
        family in family(),
    ) {
        let responses = [
            Response::Connect { transaction_id: TransactionId(txid), connection_id: ConnectionId(connection_id) },
            Response::Error { transaction_id: TransactionId(txid), message: &message },
        ];
        for response in responses {
            let mut out = Vec::new();
            response.write(&mut out);
            prop_assert_eq!(Response::parse(&out, family), Ok(response));
            prop_assert_eq!(response.transaction_id(), TransactionId(txid));
        }
    }

    #[test]
    fn arbitrary_bytes_never_panic(bytes in vec(any::<u8>(), 0..2000), family in family()) {
        assert_reparses(&bytes, family);
    }

    /// Random bytes rarely hold a known action; this puts one in front.
    #[test]
    fn arbitrary_bodies_never_panic(
        magic: bool,
        action in 0..5i32,
        body in vec(any::<u8>(), 0..2000),
        family in family(),
    ) {
        let mut bytes = header(if magic { PROTOCOL_ID } else { 1 }, action, 7);
        bytes.extend_from_slice(&body);
        assert_reparses(&bytes, family);
        // The same body as a response: action and transaction id first.
        assert_reparses(&bytes[8..], family);
    }
}
