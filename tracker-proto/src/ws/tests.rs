use super::*;
use proptest::prelude::*;

const LIMITS: MessageLimits = MessageLimits {
    max_offers: 10,
    max_sdp_bytes: 256,
    max_scrape_hashes: 4,
};

fn parse(text: &str) -> Result<ClientMessage<'_>, MessageError> {
    parse_client_message(text.as_bytes(), &LIMITS)
}

fn id(byte: u8) -> [u8; 20] {
    [byte; 20]
}

/// An id as a JavaScript binary string would write it.
fn js(id: &[u8; 20]) -> String {
    id.iter().map(|&b| char::from(b)).collect()
}

fn announce(m: &AnnounceMessage<'_>) -> Vec<u8> {
    let mut out = Vec::new();
    write_announce_request(&mut out, m);
    out
}

#[test]
fn an_announce_as_webtorrent_sends_it() {
    let hash = [0xab; 20];
    let text = format!(
        r#"{{"action":"announce","info_hash":"{}","peer_id":"-WW0105-abcdefghijkl","event":"started","uploaded":0,"downloaded":0,"left":null,"numwant":10,"offers":[{{"offer":{{"type":"offer","sdp":"v=0\r\n"}},"offer_id":"{}"}}]}}"#,
        js(&hash),
        js(&id(b'o'))
    );
    let ClientMessage::Announce(m) = parse(&text).unwrap() else {
        panic!("not an announce")
    };
    assert_eq!(m.info_hash, InfoHash(hash));
    assert_eq!(m.peer_id.0, *b"-WW0105-abcdefghijkl");
    assert_eq!(m.event, AnnounceEvent::Started);
    assert_eq!((m.left, m.numwant), (None, Some(10)));
    assert!(!m.is_seeder());
    assert_eq!(m.offers.len(), 1);
    assert_eq!(m.offers[0].offer_id, OfferId(id(b'o')));
    assert_eq!(
        m.offers[0].offer, r#"{"type":"offer","sdp":"v=0\r\n"}"#,
        "relayed as it came, escapes and all"
    );
    assert_eq!(m.answer, None);
}

#[test]
fn an_answer_names_its_offer_and_peer() {
    let text = format!(
        r#"{{"action":"announce","info_hash":"{}","peer_id":"{}","to_peer_id":"{}","offer_id":"{}","answer":{{"type":"answer","sdp":"x"}},"left":0}}"#,
        js(&id(b'h')),
        js(&id(b'p')),
        js(&id(b'q')),
        js(&id(b'o'))
    );
    let ClientMessage::Announce(m) = parse(&text).unwrap() else {
        panic!("not an announce")
    };
    let answer = m.answer.unwrap();
    assert_eq!(answer.to_peer_id, PeerId(id(b'q')));
    assert_eq!(answer.offer_id, OfferId(id(b'o')));
    assert_eq!(answer.answer, r#"{"type":"answer","sdp":"x"}"#);
    assert!(m.is_seeder());
}

#[test]
fn scrapes_name_one_hash_a_list_or_none() {
    let one = format!(r#"{{"action":"scrape","info_hash":"{}"}}"#, js(&id(b'a')));
    let list = format!(
        r#"{{"action":"scrape","info_hash":["{}","{}"]}}"#,
        js(&id(b'a')),
        js(&id(b'b'))
    );
    let scrape = |text: &str| match parse(text).unwrap() {
        ClientMessage::Scrape(s) => s.info_hashes,
        other => panic!("not a scrape: {other:?}"),
    };
    assert_eq!(scrape(&one), vec![InfoHash(id(b'a'))]);
    assert_eq!(scrape(&list), vec![InfoHash(id(b'a')), InfoHash(id(b'b'))]);
    assert_eq!(scrape(r#"{"action":"scrape"}"#), vec![]);
    let twice = format!(
        r#"{{"action":"scrape","info_hash":["{0}","{1}","{0}"]}}"#,
        js(&id(b'a')),
        js(&id(b'b'))
    );
    assert_eq!(
        scrape(&twice),
        vec![InfoHash(id(b'a')), InfoHash(id(b'b'))],
        "a repeated hash counts once"
    );
    let five = format!(
        r#"{{"action":"scrape","info_hash":["{0}","{0}","{0}","{0}","{0}"]}}"#,
        js(&id(b'c'))
    );
    assert_eq!(
        parse(&five).unwrap_err().kind,
        MessageErrorKind::TooManyInfoHashes
    );
}

#[test]
fn ids_must_be_twenty_characters_up_to_u00ff() {
    let with_hash = |hash: &str| {
        format!(
            r#"{{"action":"announce","info_hash":{hash},"peer_id":"{}"}}"#,
            js(&id(b'p'))
        )
    };
    // Escaped characters are read too.
    let escaped = format!("\"{}\\u00ff\"", "a".repeat(19));
    let text = with_hash(&escaped);
    let ClientMessage::Announce(m) = parse(&text).unwrap() else {
        panic!()
    };
    assert_eq!(&m.info_hash.0[19..], &[0xff]);
    for bad in [
        format!("\"{}\"", "a".repeat(19)),
        format!("\"{}\"", "a".repeat(21)),
        format!("\"{}\u{100}\"", "a".repeat(19)),
        format!("\"{}\u{1F600}\"", "a".repeat(19)),
        "12".to_string(),
        "null".to_string(),
        format!("[\"{}\"]", "a".repeat(20)),
    ] {
        let err = parse(&with_hash(&bad)).unwrap_err();
        assert!(
            matches!(
                err.kind,
                MessageErrorKind::InvalidInfoHash
                    | MessageErrorKind::MissingInfoHash
                    | MessageErrorKind::Malformed
            ),
            "{bad}: {err:?}"
        );
    }
}

#[test]
fn every_refusal_has_its_reason() {
    let h = js(&id(b'h'));
    let p = js(&id(b'p'));
    let o = js(&id(b'o'));
    let big = "x".repeat(300);
    let cases: Vec<(String, MessageErrorKind)> = vec![
        ("not json".into(), MessageErrorKind::Malformed),
        ("[1,2]".into(), MessageErrorKind::Malformed),
        (
            r#"{"action":"ping"}"#.into(),
            MessageErrorKind::UnknownAction,
        ),
        (
            r#"{"info_hash":"x"}"#.into(),
            MessageErrorKind::UnknownAction,
        ),
        (
            r#"{"action":"announce"}"#.into(),
            MessageErrorKind::MissingInfoHash,
        ),
        (
            format!(r#"{{"action":"announce","info_hash":"{h}"}}"#),
            MessageErrorKind::MissingPeerId,
        ),
        (
            format!(r#"{{"action":"announce","info_hash":"{h}","peer_id":"short"}}"#),
            MessageErrorKind::InvalidPeerId,
        ),
        (
            format!(
                r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","event":"paused"}}"#
            ),
            MessageErrorKind::InvalidEvent,
        ),
        (
            format!(r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","left":-1}}"#),
            MessageErrorKind::InvalidLeft,
        ),
        (
            format!(r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","left":"0"}}"#),
            MessageErrorKind::InvalidLeft,
        ),
        (
            format!(r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","numwant":-5}}"#),
            MessageErrorKind::InvalidNumwant,
        ),
        (
            format!(
                r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","offers":[{{"offer":{{}},"offer_id":"x"}}]}}"#
            ),
            MessageErrorKind::InvalidOfferId,
        ),
        (
            format!(
                r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","offers":[{{"offer":"sdp","offer_id":"{o}"}}]}}"#
            ),
            MessageErrorKind::InvalidSdp,
        ),
        (
            format!(
                r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","offers":[{{"offer":{{"sdp":"{big}"}},"offer_id":"{o}"}}]}}"#
            ),
            MessageErrorKind::InvalidSdp,
        ),
        (
            format!(
                r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","offers":[{}]}}"#,
                vec![format!(r#"{{"offer":{{}},"offer_id":"{o}"}}"#); 11].join(",")
            ),
            MessageErrorKind::TooManyOffers,
        ),
        (
            format!(r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","answer":{{}}}}"#),
            MessageErrorKind::InvalidAnswer,
        ),
        (
            format!(
                r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","answer":{{}},"to_peer_id":"{p}","offer_id":"short"}}"#
            ),
            MessageErrorKind::InvalidAnswer,
        ),
        (
            format!(r#"{{"action":"announce","info_hash":"{h}","peer_id":"{p}","peer_id":"{p}"}}"#),
            MessageErrorKind::Malformed,
        ),
    ];
    for (text, kind) in cases {
        let err = parse(&text).unwrap_err();
        assert_eq!(err.kind, kind, "{text}");
        assert!(!err.kind.reason().is_empty());
        if kind as u8 >= MessageErrorKind::MissingPeerId as u8 && text.contains(&h) {
            assert_eq!(err.info_hash, Some(InfoHash(id(b'h'))), "{text}");
            assert_eq!(err.action, Some(Action::Announce));
        }
    }
}

#[test]
fn answers_are_json_a_client_reads_back() {
    let hash = InfoHash([
        0x00, b'"', b'\\', 0x7f, 0x80, 0xff, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14,
    ]);
    let peer = PeerId(id(0xe9));
    let offer_id = OfferId(id(b'"'));
    let mut out = Vec::new();
    write_announce_response(&mut out, &hash, 3, 4, 120);
    assert_eq!(
        parse_server_message(&out).unwrap(),
        ServerMessage::AnnounceResponse {
            info_hash: hash,
            complete: 3,
            incomplete: 4,
            interval: 120
        }
    );
    out.clear();
    write_offer(
        &mut out,
        &hash,
        &peer,
        &offer_id,
        r#"{"type":"offer","sdp":"s"}"#,
    );
    let value: serde_json::Value = serde_json::from_slice(&out).unwrap();
    assert_eq!(value["offer"]["sdp"], "s");
    assert_eq!(value["peer_id"], js(&peer.0));
    assert_eq!(
        parse_server_message(&out).unwrap(),
        ServerMessage::Offer {
            info_hash: hash,
            peer_id: peer,
            offer_id,
            offer: r#"{"type":"offer","sdp":"s"}"#
        }
    );
    out.clear();
    write_answer(&mut out, &hash, &peer, &offer_id, r#"{"type":"answer"}"#);
    assert_eq!(
        parse_server_message(&out).unwrap(),
        ServerMessage::Answer {
            info_hash: hash,
            peer_id: peer,
            offer_id,
            answer: r#"{"type":"answer"}"#
        }
    );
    out.clear();
    let stats = ScrapeStats {
        seeders: 1,
        completed: 2,
        leechers: 3,
    };
    let files = [(hash, stats), (InfoHash(id(7)), ScrapeStats::default())];
    write_scrape_response(&mut out, &files);
    assert_eq!(
        parse_server_message(&out).unwrap(),
        ServerMessage::Scrape {
            files: files.to_vec()
        }
    );
    out.clear();
    write_error(
        &mut out,
        Some(Action::Announce),
        Some(&hash),
        "bad \"thing\"",
    );
    assert_eq!(
        parse_server_message(&out).unwrap(),
        ServerMessage::Error {
            reason: "bad \"thing\"".into(),
            action: Some(Action::Announce),
            info_hash: Some(hash)
        }
    );
}

fn arb_id() -> impl Strategy<Value = [u8; 20]> {
    proptest::array::uniform20(any::<u8>())
}

fn arb_event() -> impl Strategy<Value = AnnounceEvent> {
    prop_oneof![
        Just(AnnounceEvent::None),
        Just(AnnounceEvent::Started),
        Just(AnnounceEvent::Stopped),
        Just(AnnounceEvent::Completed),
    ]
}

proptest! {
    #[test]
    fn announces_round_trip(
        hash in arb_id(),
        peer in arb_id(),
        event in arb_event(),
        left in proptest::option::of(0u64..(1 << 53)),
        numwant in proptest::option::of(any::<u32>()),
        offer_ids in proptest::collection::vec(arb_id(), 0..=10),
        answer in proptest::option::of((arb_id(), arb_id())),
        sdp in "[ -~]{0,40}",
    ) {
        let raw = serde_json::json!({"type": "offer", "sdp": sdp}).to_string();
        let m = AnnounceMessage {
            info_hash: InfoHash(hash),
            peer_id: PeerId(peer),
            event,
            left,
            numwant,
            offers: offer_ids.iter().map(|&o| Offer { offer_id: OfferId(o), offer: &raw }).collect(),
            answer: answer.map(|(to, o)| Answer { to_peer_id: PeerId(to), offer_id: OfferId(o), answer: &raw }),
        };
        let text = announce(&m);
        prop_assert_eq!(parse_client_message(&text, &LIMITS), Ok(ClientMessage::Announce(m)));
    }

    #[test]
    fn scrapes_round_trip(hashes in proptest::collection::btree_set(arb_id(), 0..=4)) {
        let hashes: Vec<InfoHash> = hashes.into_iter().map(InfoHash).collect();
        let mut out = Vec::new();
        write_scrape_request(&mut out, &hashes);
        prop_assert_eq!(
            parse_client_message(&out, &LIMITS),
            Ok(ClientMessage::Scrape(ScrapeMessage { info_hashes: hashes }))
        );
    }

    #[test]
    fn any_bytes_are_parsed_or_refused(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        let _ = parse_client_message(&bytes, &LIMITS);
        let _ = parse_server_message(&bytes);
    }

    #[test]
    fn ids_written_are_json_strings_of_their_bytes(bytes in arb_id()) {
        let mut out = Vec::new();
        write_id(&mut out, &bytes);
        let text: String = serde_json::from_slice(&out).unwrap();
        prop_assert_eq!(latin1_id(&text), Some(bytes));
    }
}
