use super::*;
use crate::config::TrafficConfig;
use crate::model::min_sources;
use tracker_proto::udp::{
    write_announce_response, write_connect_response, write_error_response, write_scrape_response,
};
use tracker_proto::{AnswerPeers, ScrapeStats};

const TARGET: &str = "127.0.0.1:6969";
const LOCAL: &str = "127.1.0.1";

struct Fixture {
    session: Session,
    model: TrafficModel,
    rng: Rng,
    stats: Stats,
}

fn fixture(mix: [u32; 3], in_flight: u32) -> Fixture {
    let traffic = TrafficConfig {
        peers: 1000,
        torrents: 100,
        ..TrafficConfig::default()
    };
    let model = TrafficModel::new(&traffic, min_sources(traffic.peers), 5).unwrap();
    Fixture {
        session: Session::new(
            TARGET.parse().unwrap(),
            LOCAL.parse().unwrap(),
            0,
            Weighted::new(mix).unwrap(),
            in_flight,
            1_000_000_000,
        ),
        model,
        rng: Rng::new(1),
        stats: Stats::default(),
    }
}

impl Fixture {
    fn send(&mut self, now: u64) -> Option<Vec<u8>> {
        let mut out = Vec::new();
        self.session
            .write_next(&self.model, &mut self.rng, now, &mut out, &mut self.stats)
            .then_some(out)
    }

    fn answer(&mut self, packet: &[u8], now: u64) {
        let from = TARGET.parse().unwrap();
        self.session.on_datagram(packet, from, now, &mut self.stats);
    }

    fn connect(&mut self, id: i64) {
        let request = self.send(0).expect("a connect");
        let Ok(Request::Connect(c)) = Request::parse(&request) else {
            panic!("first request must be a connect");
        };
        let mut out = Vec::new();
        write_connect_response(&mut out, c.transaction_id, ConnectionId(id));
        self.answer(&out, 100);
    }
}

fn announce_answer(txid: TransactionId, seeders: u32, peers: &[SocketAddr]) -> Vec<u8> {
    let mut answer_peers = AnswerPeers::default();
    for &addr in peers {
        assert!(answer_peers.push_addr(addr, None));
    }
    let mut out = Vec::new();
    write_announce_response(&mut out, txid, 1800, 0, seeders, answer_peers.compact());
    out
}

#[test]
fn connects_first_then_follows_the_mix_with_the_id() {
    let mut f = fixture([0, 1, 0], 4);
    // Only one connect goes before an id is known.
    f.connect(77);
    assert_eq!(f.stats.counters.ok[Kind::Connect as usize], 1);
    assert!(f.session.connected());
    for _ in 0..4 {
        let request = f.send(1000).unwrap();
        let Ok(Request::Announce(a)) = Request::parse(&request) else {
            panic!("announce expected");
        };
        assert_eq!(a.connection_id, ConnectionId(77));
        assert_eq!(a.num_want, 50);
        assert!(u32::from(a.port) >= crate::model::PORT_BASE);
    }
    // The window is full.
    assert!(f.send(1000).is_none());
    assert_eq!(f.session.in_flight(), 4);
}

#[test]
fn waits_for_the_first_connect() {
    let mut f = fixture([0, 1, 0], 4);
    assert!(f.send(0).is_some());
    assert!(f.send(0).is_none(), "no announce before an id");
    assert_eq!(f.session.in_flight(), 1);
}

#[test]
fn renews_the_connection_id() {
    let mut f = fixture([0, 1, 0], 4);
    f.connect(1);
    // The id came at 100 ns.
    let request = f.send(RENEW_AFTER_NS + 99).unwrap();
    assert!(matches!(Request::parse(&request), Ok(Request::Announce(_))));
    let request = f.send(RENEW_AFTER_NS + 100).unwrap();
    assert!(matches!(Request::parse(&request), Ok(Request::Connect(_))));
    // While the renewal is in flight, the old id serves.
    let request = f.send(RENEW_AFTER_NS + 101).unwrap();
    assert!(matches!(Request::parse(&request), Ok(Request::Announce(_))));
}

#[test]
fn good_answers_count_as_ok_with_latency() {
    let mut f = fixture([0, 1, 0], 4);
    f.connect(9);
    let request = f.send(1_000).unwrap();
    let Ok(Request::Announce(a)) = Request::parse(&request) else {
        panic!()
    };
    let peers: Vec<SocketAddr> = vec![
        "127.1.0.2:5000".parse().unwrap(),
        format!("{LOCAL}:{}", a.port + 1).parse().unwrap(),
    ];
    f.answer(&announce_answer(a.transaction_id, 3, &peers), 51_000);
    assert_eq!(f.stats.counters.ok[Kind::Announce as usize], 1);
    assert_eq!(f.stats.counters.invalid, 0);
    assert_eq!(f.stats.peers_returned, 2);
    assert_eq!(f.stats.latency[Kind::Announce as usize].max(), 50_000);
    assert_eq!(f.session.in_flight(), 0);
}

#[test]
fn bad_announce_answers_are_invalid() {
    let self_addr = |port: u16| -> SocketAddr { format!("{LOCAL}:{port}").parse().unwrap() };
    type Peers = Box<dyn Fn(u16) -> Vec<SocketAddr>>;
    let cases: Vec<(Peers, u32, Invalid)> = vec![
        (
            Box::new(move |p| vec![self_addr(p)]),
            5,
            Invalid::SelfInPeers,
        ),
        (
            Box::new(|_| vec!["10.0.0.1:80".parse().unwrap()]),
            5,
            Invalid::BadPeer,
        ),
        (
            Box::new(|_| vec!["127.0.0.5:0".parse().unwrap()]),
            5,
            Invalid::BadPeer,
        ),
        (
            Box::new(|_| vec!["127.0.0.5:1".parse().unwrap(); 2]),
            1,
            Invalid::ImplausibleCounts,
        ),
        (
            Box::new(|_| vec!["127.0.0.5:1".parse().unwrap(); 51]),
            100,
            Invalid::TooManyPeers,
        ),
    ];
    for (peers, seeders, why) in cases {
        let mut f = fixture([0, 1, 0], 4);
        f.connect(9);
        let request = f.send(1_000).unwrap();
        let Ok(Request::Announce(a)) = Request::parse(&request) else {
            panic!()
        };
        f.answer(
            &announce_answer(a.transaction_id, seeders, &peers(a.port)),
            2_000,
        );
        assert_eq!(f.stats.invalid[why as usize], 1, "{why:?}");
        assert_eq!(f.stats.counters.ok[Kind::Announce as usize], 0);
        assert_eq!(
            f.session.in_flight(),
            0,
            "an invalid answer still ends the request"
        );
    }
}

#[test]
fn scrape_answers_must_match_the_count() {
    let mut f = fixture([0, 0, 1], 4);
    f.connect(9);
    for (extra, ok) in [(0usize, true), (1, false)] {
        let request = f.send(1_000).unwrap();
        let Ok(Request::Scrape(s)) = Request::parse(&request) else {
            panic!()
        };
        let n = s.info_hashes.len() + extra;
        let mut out = Vec::new();
        write_scrape_response(
            &mut out,
            s.transaction_id,
            std::iter::repeat_n(ScrapeStats::default(), n),
        );
        f.answer(&out, 2_000);
        assert_eq!(
            f.stats.invalid[Invalid::ScrapeMismatch as usize],
            u64::from(!ok)
        );
    }
    assert_eq!(f.stats.counters.ok[Kind::Scrape as usize], 1);
}

#[test]
fn unknown_wrong_and_late_answers_are_told_apart() {
    let mut f = fixture([0, 1, 0], 4);
    f.connect(9);
    // Unknown transaction id.
    let mut out = Vec::new();
    write_connect_response(&mut out, TransactionId(0x7fff_0003), ConnectionId(1));
    f.answer(&out, 10);
    assert_eq!(f.stats.invalid[Invalid::UnknownTransaction as usize], 1);
    // A connect response to an announce.
    let request = f.send(1_000).unwrap();
    let Ok(Request::Announce(a)) = Request::parse(&request) else {
        panic!()
    };
    let mut out = Vec::new();
    write_connect_response(&mut out, a.transaction_id, ConnectionId(1));
    f.answer(&out, 2_000);
    assert_eq!(f.stats.invalid[Invalid::WrongAction as usize], 1);
    // Time-out, then the answer arrives late.
    let request = f.send(1_000).unwrap();
    let Ok(Request::Announce(a)) = Request::parse(&request) else {
        panic!()
    };
    f.session.expire(2_000_000_000, &mut f.stats);
    assert_eq!(f.stats.counters.timeouts[Kind::Announce as usize], 1);
    f.answer(&announce_answer(a.transaction_id, 0, &[]), 2_100_000_000);
    assert_eq!(f.stats.late, 1);
    assert_eq!(f.stats.counters.invalid, 2);
    // From another address.
    f.session
        .on_datagram(&out, "127.0.0.1:1".parse().unwrap(), 0, &mut f.stats);
    assert_eq!(f.stats.invalid[Invalid::WrongSource as usize], 1);
    // Garbage.
    f.answer(&[1, 2, 3], 0);
    assert_eq!(f.stats.invalid[Invalid::Malformed as usize], 1);
}

#[test]
fn error_answers_are_counted_by_message() {
    let mut f = fixture([0, 1, 0], 4);
    f.connect(9);
    for _ in 0..2 {
        let request = f.send(1_000).unwrap();
        let Ok(Request::Announce(a)) = Request::parse(&request) else {
            panic!()
        };
        let mut out = Vec::new();
        write_error_response(&mut out, a.transaction_id, b"torrent not allowed");
        f.answer(&out, 2_000);
    }
    assert_eq!(f.stats.counters.errors[Kind::Announce as usize], 2);
    assert_eq!(
        f.stats.error_messages.by_message,
        vec![("torrent not allowed".to_string(), 2)]
    );
}

#[test]
fn nothing_expires_before_its_time_even_at_time_zero() {
    let mut f = fixture([0, 1, 0], 4);
    assert!(f.send(0).is_some());
    f.session.expire(0, &mut f.stats);
    f.session.expire(999_999_999, &mut f.stats);
    assert_eq!(f.session.in_flight(), 1);
    assert_eq!(f.stats.counters.timeouts, [0; Kind::COUNT]);
}

#[test]
fn a_lost_connect_is_retried() {
    let mut f = fixture([0, 1, 0], 4);
    assert!(f.send(0).is_some());
    assert!(f.send(10).is_none());
    f.session.expire(2_000_000_000, &mut f.stats);
    assert_eq!(f.stats.counters.timeouts[Kind::Connect as usize], 1);
    let request = f.send(2_000_000_001).unwrap();
    assert!(matches!(Request::parse(&request), Ok(Request::Connect(_))));
}

#[test]
fn the_mix_is_followed() {
    let mut f = fixture([50, 50, 1], 1 << 16);
    f.connect(9);
    for _ in 0..20_000 {
        f.send(1_000).unwrap();
    }
    let sent = f.stats.counters.sent;
    // The first connect plus about half.
    assert!((9_500..10_600).contains(&sent[0]), "{sent:?}");
    assert!((9_500..10_500).contains(&sent[1]), "{sent:?}");
    assert!((100..330).contains(&sent[2]), "{sent:?}");
    f.session.expire_all(&mut f.stats);
    assert_eq!(f.session.in_flight(), 0);
    assert_eq!(f.stats.counters.timeouts.iter().sum::<u64>(), 20_000);
}

#[test]
fn private_announces_carry_the_passkey_in_url_data() {
    let keys: Vec<crate::private::Passkey> = (0..3)
        .map(|i| crate::private::Passkey::parse(&format!("u{i:031}")).unwrap())
        .collect();
    let traffic = TrafficConfig {
        peers: 1000,
        torrents: 100,
        ..TrafficConfig::default()
    };
    let lists = crate::private::Lists {
        passkeys: Some(keys.into()),
        info_hashes: None,
    };
    let mut f = fixture([0, 1, 0], 4);
    f.model = TrafficModel::with_lists(&traffic, min_sources(traffic.peers), 5, lists).unwrap();
    f.connect(5);
    for i in 0..4 {
        let request = f.send(1_000 + i).expect("an announce");
        let Ok(Request::Announce(a)) = Request::parse(&request) else {
            panic!("expected an announce");
        };
        let url: Vec<u8> = a.url_data().collect::<Vec<_>>().concat();
        let p = f.model.peer_index(&a.peer_id).unwrap();
        let key = f.model.passkey(&f.model.peer(p)).unwrap();
        assert_eq!(url, format!("/announce/{}", key.as_str()).as_bytes());
        let (endpoint, found) = tracker_proto::http::route(&url).unwrap();
        assert_eq!(endpoint, tracker_proto::http::Endpoint::Announce);
        assert_eq!(found, Some(&key.0[..]));
    }
}

#[test]
fn public_announces_have_no_options_and_report_growing_totals() {
    let mut f = fixture([0, 1, 0], 1);
    f.connect(5);
    let request = f.send(1_000).expect("an announce");
    let Ok(Request::Announce(a)) = Request::parse(&request) else {
        panic!("expected an announce");
    };
    assert_eq!(a.url_data().count(), 0);
    let plan_uploaded = a.uploaded;
    // The same pair an hour later reports more (seeders: uploaded only).
    let plan = crate::model::AnnouncePlan {
        torrent: 0,
        info_hash: f.model.info_hash(0),
        peer: f.model.peer(f.model.peer_index(&a.peer_id).unwrap()),
        event: tracker_proto::AnnounceEvent::None,
        left: a.left,
        numwant: 50,
    };
    let early = crate::transfer::transfer(&plan, 0);
    let late = crate::transfer::transfer(&plan, 3_600_000_000_000);
    assert!(late.uploaded > early.uploaded);
    assert!(plan_uploaded > 0);
}
