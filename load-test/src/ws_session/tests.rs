use super::*;
use crate::config::TrafficConfig;
use tracker_proto::ws::{
    parse_client_message, write_announce_response, write_answer, write_error, write_offer,
    write_scrape_response, ClientMessage, MessageLimits,
};
use tracker_proto::ScrapeStats;

const SOURCES: u32 = 4;

fn model(torrents: u64) -> TrafficModel {
    let traffic = TrafficConfig {
        peers: 1000,
        torrents,
        ..TrafficConfig::default()
    };
    TrafficModel::new(&traffic, SOURCES, 5).unwrap()
}

/// A session on connection `conn` that only announces and answers every
/// offer.
fn session(conn: u32) -> WsSession {
    WsSession::new(conn, Weighted::new([1, 0]).unwrap(), 10, 1.0)
}

struct Fixture {
    traffic: WsTraffic,
    rng: Rng,
    stats: Stats,
}

fn fixture_of(torrents: u64) -> Fixture {
    Fixture {
        traffic: WsTraffic {
            model: model(torrents),
            sdp: Sdp::default(),
        },
        rng: Rng::new(7),
        stats: Stats::default(),
    }
}

fn fixture() -> Fixture {
    fixture_of(50)
}

impl Fixture {
    /// Writes the session's next request, as a parsed announce (or None
    /// for a scrape), with its bytes.
    fn request(&mut self, s: &mut WsSession, first: bool, now: u64) -> Vec<u8> {
        let mut out = Vec::new();
        s.write_request(
            &self.traffic,
            &mut self.rng,
            first,
            now,
            &mut out,
            &mut self.stats,
        );
        out
    }

    fn deliver(&mut self, s: &mut WsSession, message: &[u8], now: u64) -> (Outcome, Vec<u8>) {
        let mut answer = Vec::new();
        let outcome = s.on_message(
            message,
            &self.traffic,
            &mut self.rng,
            now,
            &mut answer,
            &mut self.stats,
        );
        (outcome, answer)
    }

    fn invalid(&self, why: Invalid) -> u64 {
        self.stats.invalid[why as usize]
    }
}

fn announce_of(bytes: &[u8]) -> tracker_proto::ws::AnnounceMessage<'_> {
    match parse_client_message(bytes, &MessageLimits::default()).unwrap() {
        ClientMessage::Announce(a) => a,
        other => panic!("not an announce: {other:?}"),
    }
}

fn response(info_hash: &InfoHash, complete: u32, incomplete: u32) -> Vec<u8> {
    let mut out = Vec::new();
    write_announce_response(&mut out, info_hash, complete, incomplete, 120);
    out
}

#[test]
fn targets_parse() {
    let t = WsTarget::parse("ws://127.0.0.1:8080/announce").unwrap();
    assert_eq!(
        t,
        WsTarget {
            tls: false,
            addr: "127.0.0.1:8080".parse().unwrap(),
            url: "ws://127.0.0.1:8080/announce".into(),
        }
    );
    let t = WsTarget::parse("wss://[::1]:8443").unwrap();
    assert!(t.tls);
    assert_eq!(t.url, "wss://[::1]:8443/");
    assert_eq!(WsTarget::parse("wss://127.0.0.2").unwrap().addr.port(), 443);
    for bad in [
        "http://127.0.0.1:1/",
        "ws://10.0.0.1:3000/",
        "ws://localhost:3000/",
        "ws://127.0.0.1:3000/?x=1",
    ] {
        assert!(WsTarget::parse(bad).is_err(), "{bad}");
    }
}

#[test]
fn offer_ids_name_their_origin() {
    let origin = OfferOrigin {
        conn: 70_000,
        sent_ns: 123_456_789_012,
        torrent: 42,
    };
    let id = offer_id(origin, 9);
    assert_eq!(offer_origin(&id), Some(origin));
    assert_ne!(id, offer_id(origin, 10), "the sequence keeps them apart");
    assert_eq!(offer_origin(&OfferId(*b"abcdefghijklmnopqrst")), None);
    // An id of any bytes is written as a valid JSON string and read back.
    let mut out = Vec::new();
    tracker_proto::ws::write_id(&mut out, &id.0);
    assert!(std::str::from_utf8(&out).is_ok());
}

#[test]
fn the_sdp_is_a_realistic_size_and_valid_json() {
    let sdp = Sdp::default();
    assert!(
        (600..1000).contains(&OFFER_SDP.len()),
        "{}",
        OFFER_SDP.len()
    );
    let offer: serde_json::Value = serde_json::from_str(&sdp.offer).unwrap();
    assert_eq!(offer["type"], "offer");
    assert_eq!(offer["sdp"], OFFER_SDP);
    let answer: serde_json::Value = serde_json::from_str(&sdp.answer).unwrap();
    assert_eq!(answer["type"], "answer");
    // A tracker that re-encodes (other key order) relays the same offer.
    let reencoded = format!(
        "{{\"sdp\":{},\"type\":\"offer\"}}",
        serde_json::Value::from(OFFER_SDP)
    );
    assert!(same_sdp(&reencoded, &sdp.offer, "offer", OFFER_SDP));
    assert!(!same_sdp(&sdp.answer, &sdp.offer, "offer", OFFER_SDP));
}

#[test]
fn an_announce_carries_offers_that_name_it() {
    let mut f = fixture();
    let mut s = session(1);
    let bytes = f.request(&mut s, true, 5_000);
    let a = announce_of(&bytes);
    assert_eq!(a.event, AnnounceEvent::Started);
    assert_eq!(a.offers.len(), 10);
    assert_eq!(a.numwant, Some(10));
    let origin = offer_origin(&a.offers[0].offer_id).unwrap();
    assert_eq!(origin.conn, 1);
    assert_eq!(origin.sent_ns, 5_000);
    assert_eq!(
        f.traffic.model.info_hash(origin.torrent.into()),
        a.info_hash
    );
    // The connection's peer for the torrent announces it, every time.
    let peer = f.traffic.model.peer_for_torrent(1, origin.torrent.into());
    assert_eq!(a.peer_id, peer.peer_id);
    assert_eq!(a.left, Some(if peer.seeder { 0 } else { peer.left }));
    let ids: std::collections::HashSet<_> = a.offers.iter().map(|o| o.offer_id).collect();
    assert_eq!(ids.len(), 10, "every offer has its own id");
    assert_eq!(s.pending(), Some(Kind::Announce));
    assert_eq!(f.stats.counters.sent[Kind::Announce as usize], 1);
    assert_eq!(f.stats.counters.sent[Kind::Offer as usize], 10);
}

#[test]
fn stopped_and_completed_announces_make_no_offers() {
    let mut f = fixture();
    let mut seen = [false; 2];
    for i in 0..2000 {
        let mut s = session(0);
        let bytes = f.request(&mut s, false, i);
        let a = announce_of(&bytes);
        match a.event {
            AnnounceEvent::Stopped | AnnounceEvent::Completed => {
                assert!(a.offers.is_empty());
                assert_eq!(a.numwant, None);
                seen[(a.event == AnnounceEvent::Stopped) as usize] = true;
            }
            _ => assert_eq!(a.offers.len(), 10),
        }
    }
    assert_eq!(seen, [true, true]);
}

#[test]
fn the_announce_answer_is_checked() {
    let mut f = fixture();
    let mut s = session(0);
    let a = f.request(&mut s, true, 1_000);
    let hash = announce_of(&a).info_hash;
    // Another torrent's answer is not this one's.
    let (outcome, _) = f.deliver(&mut s, &response(&InfoHash([9; 20]), 1, 0), 2_000);
    assert!(!outcome.answered);
    assert_eq!(f.invalid(Invalid::WrongInfoHash), 1);
    let (outcome, _) = f.deliver(&mut s, &response(&hash, 1, 0), 31_000);
    assert!(outcome.answered);
    assert_eq!(f.stats.counters.ok[Kind::Announce as usize], 1);
    assert_eq!(f.stats.latency[Kind::Announce as usize].max(), 30_000);
    // Nothing in flight now.
    f.deliver(&mut s, &response(&hash, 1, 0), 40_000);
    assert_eq!(f.invalid(Invalid::UnknownTransaction), 1);
}

#[test]
fn an_empty_swarm_after_an_announce_is_implausible() {
    let mut f = fixture();
    let mut s = session(0);
    let a = f.request(&mut s, true, 1_000);
    let hash = announce_of(&a).info_hash;
    let (outcome, _) = f.deliver(&mut s, &response(&hash, 0, 0), 2_000);
    assert!(outcome.answered);
    assert_eq!(f.invalid(Invalid::ImplausibleCounts), 1);
    assert_eq!(f.stats.counters.ok[Kind::Announce as usize], 0);
}

/// Conn 1 announces; the offers it made, relayed to conn 0.
fn offers_from_conn_1(f: &mut Fixture) -> (InfoHash, Vec<(PeerId, OfferId)>, Vec<u8>) {
    let mut maker = session(1);
    let bytes = f.request(&mut maker, true, 1_000);
    let a = announce_of(&bytes);
    let offers = a.offers.iter().map(|o| (a.peer_id, o.offer_id)).collect();
    (a.info_hash, offers, bytes.clone())
}

fn relayed_offer(f: &Fixture, info_hash: &InfoHash, from: &PeerId, id: &OfferId) -> Vec<u8> {
    let mut out = Vec::new();
    write_offer(&mut out, info_hash, from, id, &f.traffic.sdp.offer);
    out
}

#[test]
fn a_relayed_offer_is_checked_timed_and_answered() {
    let mut f = fixture();
    let (hash, offers, _) = offers_from_conn_1(&mut f);
    let (from, id) = offers[0];
    let mut s = session(0);
    let message = relayed_offer(&f, &hash, &from, &id);
    let (outcome, answer) = f.deliver(&mut s, &message, 21_000);
    assert!(outcome.answer && !outcome.answered);
    assert_eq!(f.stats.counters.ok[Kind::Offer as usize], 1);
    assert_eq!(f.stats.latency[Kind::Offer as usize].max(), 20_000);
    let a = announce_of(&answer);
    let torrent = offer_origin(&id).unwrap().torrent;
    assert_eq!(a.info_hash, hash);
    assert_eq!(
        a.peer_id,
        f.traffic.model.peer_for_torrent(0, torrent.into()).peer_id
    );
    assert!(a.offers.is_empty());
    assert_eq!(
        (a.left, a.event, a.numwant),
        (None, AnnounceEvent::None, None)
    );
    let answered = a.answer.unwrap();
    assert_eq!(answered.to_peer_id, from);
    assert_eq!(answered.offer_id, id);
    assert_eq!(answered.answer, f.traffic.sdp.answer);
    assert_eq!(f.stats.counters.sent[Kind::Answer as usize], 1);
    // The tracker answers the answer-announce (as aquatic_ws does): learnt.
    assert_eq!(s.answer_acks(), AnswerAcks::Unknown);
    let (outcome, _) = f.deliver(&mut s, &response(&hash, 2, 0), 30_000);
    assert!(!outcome.answered);
    assert_eq!(s.answer_acks(), AnswerAcks::Yes);
    assert_eq!(f.stats.answer_acks, 1);
    assert_eq!(f.stats.counters.invalid, 0);
}

#[test]
fn relayed_offers_that_do_not_fit_are_invalid() {
    let mut f = fixture();
    let (hash, offers, _) = offers_from_conn_1(&mut f);
    let (from, id) = offers[0];
    let mut s = session(0);
    // Another torrent's info-hash.
    let m = relayed_offer(&f, &InfoHash([3; 20]), &from, &id);
    f.deliver(&mut s, &m, 2_000);
    assert_eq!(f.invalid(Invalid::WrongInfoHash), 1);
    // Another peer than the one that made it.
    let other = f.traffic.model.peer(999).peer_id;
    let m = relayed_offer(&f, &hash, &other, &id);
    f.deliver(&mut s, &m, 2_000);
    assert_eq!(f.invalid(Invalid::WrongPeer), 1);
    // An offer id the load never made.
    let m = relayed_offer(&f, &hash, &from, &OfferId([b'x'; 20]));
    f.deliver(&mut s, &m, 2_000);
    assert_eq!(f.invalid(Invalid::UnknownOffer), 1);
    // Its own offer, back to the connection that made it.
    let m = relayed_offer(&f, &hash, &from, &id);
    f.deliver(&mut session(1), &m, 2_000);
    assert_eq!(f.invalid(Invalid::SelfInPeers), 1);
    // Another SDP.
    let mut m = Vec::new();
    write_offer(
        &mut m,
        &hash,
        &from,
        &id,
        "{\"type\":\"offer\",\"sdp\":\"x\"}",
    );
    f.deliver(&mut s, &m, 2_000);
    assert_eq!(f.invalid(Invalid::Malformed), 1);
    assert_eq!(f.stats.counters.ok[Kind::Offer as usize], 0);
    assert_eq!(f.stats.counters.sent[Kind::Answer as usize], 0);
}

#[test]
fn a_share_of_the_offers_is_answered() {
    let mut f = fixture();
    let (hash, offers, _) = offers_from_conn_1(&mut f);
    let (from, id) = offers[0];
    let mut s = WsSession::new(0, Weighted::new([1, 0]).unwrap(), 10, 0.25);
    let m = relayed_offer(&f, &hash, &from, &id);
    let answered = (0..4000)
        .filter(|&i| f.deliver(&mut s, &m, 2_000 + i).0.answer)
        .count();
    assert!((800..1200).contains(&answered), "{answered}");
    let mut never = WsSession::new(0, Weighted::new([1, 0]).unwrap(), 10, 0.0);
    assert!(!f.deliver(&mut never, &m, 2_000).0.answer);
}

#[test]
fn a_relayed_answer_is_checked_and_timed() {
    let mut f = fixture();
    // Conn 1 made the offers; conn 0 answered one; the answer goes to conn 1.
    let (hash, offers, _) = offers_from_conn_1(&mut f);
    let (_, id) = offers[3];
    let torrent = u64::from(offer_origin(&id).unwrap().torrent);
    let answerer = f.traffic.model.peer_for_torrent(0, torrent).peer_id;
    let mut m = Vec::new();
    write_answer(&mut m, &hash, &answerer, &id, &f.traffic.sdp.answer);
    let mut maker = session(1);
    let (outcome, out) = f.deliver(&mut maker, &m, 51_000);
    assert_eq!(outcome, Outcome::default());
    assert!(out.is_empty());
    assert_eq!(f.stats.counters.ok[Kind::Answer as usize], 1);
    assert_eq!(f.stats.latency[Kind::Answer as usize].max(), 50_000);
    // The same answer at another connection: not its offer.
    f.deliver(&mut session(2), &m, 51_000);
    assert_eq!(f.invalid(Invalid::UnknownOffer), 1);
    // From a peer that does not speak for the torrent on its connection.
    let wrong = f.traffic.model.peer(1).peer_id;
    let mut m = Vec::new();
    write_answer(&mut m, &hash, &wrong, &id, &f.traffic.sdp.answer);
    if f.traffic.model.peer_for_torrent(1, torrent).peer_id != wrong {
        f.deliver(&mut maker, &m, 51_000);
        assert_eq!(
            f.invalid(Invalid::WrongPeer) + f.invalid(Invalid::SelfInPeers),
            1
        );
    }
}

#[test]
fn scrape_answers_hold_only_what_was_asked() {
    let mut f = fixture();
    let mut s = WsSession::new(0, Weighted::new([0, 1]).unwrap(), 10, 1.0);
    let request = f.request(&mut s, false, 0);
    let asked = match parse_client_message(&request, &MessageLimits::default()).unwrap() {
        ClientMessage::Scrape(s) => s.info_hashes,
        other => panic!("{other:?}"),
    };
    assert!(!asked.is_empty());
    for (i, hash) in asked.iter().enumerate() {
        assert!(!asked[..i].contains(hash), "each hash once");
    }
    // A subset, as aquatic_ws sends (it leaves out torrents it does not know).
    let files = vec![(asked[0], ScrapeStats::default())];
    let mut m = Vec::new();
    write_scrape_response(&mut m, &files);
    let (outcome, _) = f.deliver(&mut s, &m, 10);
    assert!(outcome.answered);
    assert_eq!(f.stats.counters.ok[Kind::Scrape as usize], 1);
    // A hash not asked for.
    f.request(&mut s, false, 20);
    let files = vec![(InfoHash([1; 20]), ScrapeStats::default())];
    let mut m = Vec::new();
    write_scrape_response(&mut m, &files);
    f.deliver(&mut s, &m, 30);
    assert_eq!(f.invalid(Invalid::ScrapeMismatch), 1);
    // A hash twice.
    let request = f.request(&mut s, false, 40);
    let first = match parse_client_message(&request, &MessageLimits::default()).unwrap() {
        ClientMessage::Scrape(s) => s.info_hashes[0],
        other => panic!("{other:?}"),
    };
    let files = vec![
        (first, ScrapeStats::default()),
        (first, ScrapeStats::default()),
    ];
    let mut m = Vec::new();
    write_scrape_response(&mut m, &files);
    f.deliver(&mut s, &m, 50);
    assert_eq!(f.invalid(Invalid::ScrapeMismatch), 2);
    // A scrape answer while an announce is in flight.
    let mut announcing = session(0);
    f.request(&mut announcing, true, 60);
    f.deliver(&mut announcing, &m, 70);
    assert_eq!(f.invalid(Invalid::WrongAction), 1);
}

#[test]
fn error_answers_are_counted_by_message() {
    let mut f = fixture();
    let mut s = session(0);
    let hash = announce_of(&f.request(&mut s, true, 0)).info_hash;
    let mut m = Vec::new();
    write_error(
        &mut m,
        Some(Action::Announce),
        Some(&hash),
        "torrent not allowed",
    );
    let (outcome, _) = f.deliver(&mut s, &m, 100);
    assert!(outcome.answered);
    assert_eq!(f.stats.counters.errors[Kind::Announce as usize], 1);
    assert_eq!(
        f.stats.error_messages.by_message,
        [("torrent not allowed".to_string(), 1)]
    );
    // An error about an answer-announce (aquatic's "offer expired") is the
    // answer's, and the request in flight still awaits its own.
    let (ohash, offers, _) = offers_from_conn_1(&mut f);
    let m = relayed_offer(&f, &ohash, &offers[0].0, &offers[0].1);
    let mut s = session(0);
    let mine = announce_of(&f.request(&mut s, true, 200)).info_hash;
    let (outcome, _) = f.deliver(&mut s, &m, 300);
    if ohash == mine {
        // Not answered while an announce of that torrent is in flight.
        assert!(!outcome.answer);
        return;
    }
    assert!(outcome.answer);
    let mut e = Vec::new();
    write_error(
        &mut e,
        Some(Action::Announce),
        Some(&ohash),
        "offer expired",
    );
    let (outcome, _) = f.deliver(&mut s, &e, 400);
    assert!(!outcome.answered);
    assert_eq!(f.stats.counters.errors[Kind::Answer as usize], 1);
    assert_eq!(s.pending(), Some(Kind::Announce));
    // An error naming nothing answers the request in flight.
    let mut e = Vec::new();
    write_error(&mut e, None, None, "malformed message");
    assert!(f.deliver(&mut s, &e, 500).0.answered);
    assert_eq!(f.stats.counters.errors[Kind::Announce as usize], 2);
}

#[test]
fn requests_time_out_and_late_answers_are_late() {
    let mut f = fixture();
    let mut s = session(0);
    let hash = announce_of(&f.request(&mut s, true, 0)).info_hash;
    assert_eq!(s.deadline_ns(1_000), Some(1_000));
    assert!(!s.expire(999, 1_000, &mut f.stats));
    assert!(s.expire(1_000, 1_000, &mut f.stats));
    assert_eq!(f.stats.counters.timeouts[Kind::Announce as usize], 1);
    assert_eq!(s.pending(), None);
    f.deliver(&mut s, &response(&hash, 1, 0), 2_000);
    assert_eq!(f.stats.late, 1);
    assert_eq!(f.stats.counters.invalid, 0);
}

#[test]
fn unanswered_answer_announces_teach_that_none_will_be() {
    let mut f = fixture();
    let (hash, offers, _) = offers_from_conn_1(&mut f);
    let m = relayed_offer(&f, &hash, &offers[0].0, &offers[0].1);
    let mut s = session(0);
    assert!(f.deliver(&mut s, &m, 0).0.answer);
    s.expire(1_000, 1_000, &mut f.stats);
    assert_eq!(s.answer_acks(), AnswerAcks::No);
    assert_eq!(f.stats.counters.timeouts.iter().sum::<u64>(), 0);
    // Where they are answered, one left unanswered is a time-out.
    let mut s = session(0);
    f.deliver(&mut s, &m, 0);
    f.deliver(&mut s, &response(&hash, 1, 0), 10);
    f.deliver(&mut s, &m, 20);
    s.expire(2_000, 1_000, &mut f.stats);
    assert_eq!(f.stats.counters.timeouts[Kind::Answer as usize], 1);
}

#[test]
fn no_announce_of_a_torrent_whose_answer_is_in_flight() {
    // One torrent: every announce would be of the answered torrent.
    let mut f = fixture_of(1);
    let (hash, offers, _) = offers_from_conn_1(&mut f);
    let m = relayed_offer(&f, &hash, &offers[0].0, &offers[0].1);
    let mut s = session(0);
    assert!(f.deliver(&mut s, &m, 0).0.answer);
    assert_eq!(f.request(&mut s, false, 10).first(), Some(&b'{'));
    assert_eq!(s.pending(), Some(Kind::Scrape));
    // And no answer while an announce of that torrent is in flight.
    let mut s = session(0);
    f.request(&mut s, true, 0);
    assert!(!f.deliver(&mut s, &m, 10).0.answer);
}

#[test]
fn a_lost_connection_loses_the_request_in_flight() {
    let mut f = fixture();
    let mut s = session(0);
    f.request(&mut s, true, 0);
    s.lost(&mut f.stats);
    assert_eq!(f.invalid(Invalid::ConnectionLost), 1);
    assert_eq!(s.pending(), None);
    s.lost(&mut f.stats);
    assert_eq!(f.invalid(Invalid::ConnectionLost), 1);
}

#[test]
fn garbage_is_malformed() {
    let mut f = fixture();
    let mut s = session(0);
    for m in [&b"not json"[..], b"{\"action\":\"dance\"}", b"[]"] {
        f.deliver(&mut s, m, 0);
    }
    assert_eq!(f.invalid(Invalid::Malformed), 3);
}
