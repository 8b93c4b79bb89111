//! WebTorrent over WebSocket against the real binary: every message, every
//! error, relays between connections on different workers, closes, and the
//! limits a hostile client meets. A plain tungstenite client speaks the
//! protocol; tests/webtorrent.rs runs real browsers.

mod support;

use std::io::{ErrorKind, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::Tracker;
use tracker_proto::ws::{
    parse_server_message, write_announce_request, write_scrape_request, AnnounceMessage, Answer,
    Offer, OfferId, ServerMessage,
};
use tracker_proto::{AnnounceEvent, InfoHash, PeerId, ScrapeStats};
use tungstenite::protocol::frame::coding::CloseCode;
use tungstenite::{Message, WebSocket};

const SDP: &str = r#"{"type":"offer","sdp":"v=0\r\no=- 1 2 IN IP4 127.0.0.1\r\n"}"#;
const ANSWER: &str = r#"{"type":"answer","sdp":"v=0\r\n"}"#;

struct Peer<S: Read + Write> {
    ws: WebSocket<S>,
    id: PeerId,
}

fn connect(addr: SocketAddr, path: &str, id: u8) -> Peer<TcpStream> {
    let stream = TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (ws, _) = tungstenite::client(format!("ws://{addr}{path}"), stream).unwrap();
    Peer {
        ws,
        id: PeerId([id; 20]),
    }
}

fn hash(n: u8) -> InfoHash {
    InfoHash([n; 20])
}

impl<S: Read + Write> Peer<S> {
    fn send(&mut self, text: Vec<u8>) {
        self.ws
            .send(Message::text(String::from_utf8(text).unwrap()))
            .unwrap();
    }

    fn announce(&mut self, info_hash: InfoHash, event: AnnounceEvent, left: u64, offers: usize) {
        let ids: Vec<OfferId> = (0..offers).map(|i| OfferId([b'a' + i as u8; 20])).collect();
        let m = AnnounceMessage {
            info_hash,
            peer_id: self.id,
            event,
            left: Some(left),
            numwant: Some(offers as u32),
            offers: ids
                .iter()
                .map(|&offer_id| Offer {
                    offer_id,
                    offer: SDP,
                })
                .collect(),
            answer: None,
        };
        let mut out = Vec::new();
        write_announce_request(&mut out, &m);
        self.send(out);
    }

    fn answer(&mut self, info_hash: InfoHash, to: PeerId, offer_id: OfferId) {
        let m = AnnounceMessage {
            info_hash,
            peer_id: self.id,
            event: AnnounceEvent::None,
            left: None,
            numwant: None,
            offers: Vec::new(),
            answer: Some(Answer {
                to_peer_id: to,
                offer_id,
                answer: ANSWER,
            }),
        };
        let mut out = Vec::new();
        write_announce_request(&mut out, &m);
        self.send(out);
    }

    /// The next text message, as text (parsed by the caller).
    fn next_text(&mut self) -> String {
        loop {
            match self.ws.read().unwrap() {
                Message::Text(text) => return text.to_string(),
                Message::Ping(_) | Message::Pong(_) => continue,
                other => panic!("expected a text message, got {other:?}"),
            }
        }
    }

    /// The next announce response: (complete, incomplete).
    fn counts(&mut self) -> (u32, u32) {
        let text = self.next_text();
        match parse_server_message(text.as_bytes()).unwrap() {
            ServerMessage::AnnounceResponse {
                complete,
                incomplete,
                interval,
                ..
            } => {
                assert_eq!(interval, 120);
                (complete, incomplete)
            }
            other => panic!("expected an announce response, got {other:?}"),
        }
    }

    fn scrape(&mut self, hashes: &[InfoHash]) -> Vec<(InfoHash, ScrapeStats)> {
        let mut out = Vec::new();
        write_scrape_request(&mut out, hashes);
        self.send(out);
        let text = self.next_text();
        match parse_server_message(text.as_bytes()).unwrap() {
            ServerMessage::Scrape { files } => files,
            other => panic!("expected a scrape, got {other:?}"),
        }
    }

    fn error(&mut self) -> String {
        let text = self.next_text();
        match parse_server_message(text.as_bytes()).unwrap() {
            ServerMessage::Error { reason, .. } => reason.into_owned(),
            other => panic!("expected an error, got {other:?}"),
        }
    }
}

fn stats(files: &[(InfoHash, ScrapeStats)]) -> (u32, u32, u32) {
    let s = files.first().unwrap().1;
    (s.seeders, s.leechers, s.completed)
}

#[test]
fn offers_and_answers_are_relayed_between_peers_on_every_worker() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "4", "--no-pin"])
        .http(None)
        .metrics()
        .start();
    let addr = tracker.http[0];
    // Enough connections that, however the kernel spreads them, offers and
    // answers cross between workers as well as within one.
    let torrent = hash(7);
    let mut seeders: Vec<_> = (0..6)
        .map(|i| connect(addr, "/announce", 100 + i))
        .collect();
    for (i, seeder) in seeders.iter_mut().enumerate() {
        seeder.announce(torrent, AnnounceEvent::Started, 0, 0);
        assert_eq!(seeder.counts(), (i as u32 + 1, 0));
    }
    for round in 0..6u8 {
        let mut leecher = connect(addr, if round % 2 == 0 { "/" } else { "/announce" }, round);
        leecher.announce(torrent, AnnounceEvent::Started, 1000, 6);
        assert_eq!(leecher.counts(), (6, 1));
        // Each seeder gets one of its offers.
        let mut offer_ids = Vec::new();
        for seeder in &mut seeders {
            let text = seeder.next_text();
            let ServerMessage::Offer {
                info_hash,
                peer_id,
                offer_id,
                offer,
            } = parse_server_message(text.as_bytes()).unwrap()
            else {
                panic!("expected an offer: {text}")
            };
            assert_eq!((info_hash, peer_id, offer), (torrent, leecher.id, SDP));
            offer_ids.push(offer_id);
            seeder.answer(torrent, leecher.id, offer_id);
        }
        offer_ids.sort();
        offer_ids.dedup();
        assert_eq!(offer_ids.len(), 6, "each offer to a different peer");
        let mut from = Vec::new();
        for _ in 0..6 {
            let text = leecher.next_text();
            let ServerMessage::Answer {
                info_hash,
                peer_id,
                answer,
                ..
            } = parse_server_message(text.as_bytes()).unwrap()
            else {
                panic!("expected an answer: {text}")
            };
            assert_eq!((info_hash, answer), (torrent, ANSWER));
            from.push(peer_id);
        }
        from.sort();
        let mut expected: Vec<_> = seeders.iter().map(|s| s.id).collect();
        expected.sort();
        assert_eq!(from, expected);
        // A second answer to the same offer is refused: offers are answered
        // once.
        seeders[0].answer(torrent, leecher.id, offer_ids[0]);
        assert!(seeders[0].error().contains("offer"));
        leecher.announce(torrent, AnnounceEvent::Stopped, 1000, 0);
        assert_eq!(leecher.counts(), (6, 0));
    }
    assert!(tracker.metric("tracker_websocket_relayed_total", &[("kind", "offer")]) >= 36);
    assert!(tracker.metric("tracker_websocket_relayed_total", &[("kind", "answer")]) >= 36);
}

#[test]
fn scrapes_count_webrtc_peers_apart_and_a_closed_connection_stops() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "2", "--no-pin"])
        .http(None)
        .udp(None)
        .metrics()
        .start();
    let addr = tracker.http[0];
    let torrent = hash(9);
    let mut a = connect(addr, "/announce", 1);
    let mut b = connect(addr, "/announce", 2);
    a.announce(torrent, AnnounceEvent::Started, 10, 0);
    assert_eq!(a.counts(), (0, 1));
    b.announce(torrent, AnnounceEvent::Started, 10, 0);
    assert_eq!(b.counts(), (0, 2));
    b.announce(torrent, AnnounceEvent::Completed, 0, 0);
    assert_eq!(b.counts(), (1, 1));
    // Completed once only.
    b.announce(torrent, AnnounceEvent::Completed, 0, 0);
    assert_eq!(b.counts(), (1, 1));
    assert_eq!(stats(&a.scrape(&[torrent])), (1, 1, 1));
    // A BitTorrent peer of the same torrent is counted apart.
    let mut http = TcpStream::connect(addr).unwrap();
    let query = format!(
        "GET /announce?info_hash={}&peer_id=-qB0000-000000000000&port=6881&left=0&compact=1 \
         HTTP/1.1\r\n\r\n",
        "%09".repeat(20)
    );
    http.write_all(query.as_bytes()).unwrap();
    let mut buf = [0u8; 512];
    let n = http.read(&mut buf).unwrap();
    let text = String::from_utf8_lossy(&buf[..n]);
    assert!(text.contains("8:completei1e10:incompletei0e"), "{text}");
    assert_eq!(stats(&a.scrape(&[torrent])), (1, 1, 1), "unchanged");
    // A closed connection stops its peers.
    drop(b);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if stats(&a.scrape(&[torrent])) == (0, 1, 1) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "b's peer outlived its connection"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    // A list of hashes, one unknown.
    let files = a.scrape(&[torrent, hash(10)]);
    assert_eq!(files.len(), 2);
    assert_eq!(files[1].1, ScrapeStats::default());
    // Full scrapes follow http.full_scrape (off by default).
    a.send(br#"{"action":"scrape"}"#.to_vec());
    assert!(a.error().contains("full scrape"));
    assert_eq!(
        tracker.metric("tracker_webrtc_peers", &[("role", "leecher")]),
        1
    );
    assert!(tracker.metric("tracker_websocket_upgrades_total", &[("protocol", "ws")]) >= 2);
}

#[test]
fn bad_messages_get_errors_and_the_connection_goes_on() {
    let tracker = Tracker::builder().http(None).metrics().start();
    let addr = tracker.http[0];
    let torrent = hash(3);
    let mut a = connect(addr, "/announce", 1);
    let mut b = connect(addr, "/announce", 2);
    for (text, reason) in [
        ("nonsense", "malformed message"),
        (r#"{"action":"ping"}"#, "unknown action"),
        (
            r#"{"action":"announce","info_hash":"short"}"#,
            "invalid info_hash",
        ),
    ] {
        a.send(text.as_bytes().to_vec());
        assert_eq!(a.error(), reason, "{text}");
    }
    a.announce(torrent, AnnounceEvent::Started, 5, 0);
    assert_eq!(a.counts(), (0, 1));
    // One peer id per torrent on a connection ...
    a.id = PeerId([9; 20]);
    a.announce(torrent, AnnounceEvent::None, 5, 0);
    assert!(a.error().contains("one peer id"));
    // ... and a peer id another connection holds is another peer there.
    b.id = PeerId([1; 20]);
    b.announce(torrent, AnnounceEvent::Started, 5, 0);
    assert_eq!(b.counts(), (0, 2));
    // An answer to an offer never made to this peer is dropped.
    b.answer(torrent, PeerId([1; 20]), OfferId([1; 20]));
    assert!(b.error().contains("no such offer"));
    // Binary messages close the connection (the protocol is text).
    a.ws.send(Message::binary(vec![1, 2, 3])).unwrap();
    match a.ws.read() {
        Ok(Message::Close(Some(frame))) => assert_eq!(frame.code, CloseCode::Unsupported),
        other => panic!("expected a close, got {other:?}"),
    }
    assert!(tracker.metric("tracker_websocket_messages_total", &[("action", "invalid")]) >= 3);
}

#[test]
fn limits_hold_against_hostile_clients() {
    let tracker = Tracker::builder()
        .http(None)
        .config(
            "[websocket]\nmax_message_bytes = 4096\nmax_frame_bytes = 4096\nmax_offers = 2\n\
             max_sdp_bytes = 2048\nmax_torrents_per_connection = 3\n",
        )
        .metrics()
        .start();
    let addr = tracker.http[0];
    let mut a = connect(addr, "/announce", 1);
    // Too many offers.
    a.announce(hash(1), AnnounceEvent::Started, 5, 3);
    assert_eq!(a.error(), "too many offers");
    // Too many torrents on one connection.
    for n in 1..=3 {
        a.announce(hash(n), AnnounceEvent::Started, 5, 0);
        assert_eq!(a.counts(), (0, 1));
    }
    a.announce(hash(4), AnnounceEvent::Started, 5, 0);
    assert!(a.error().contains("too many torrents"));
    // A message past the limit closes the connection.
    a.send(format!(r#"{{"action":"scrape","x":"{}"}}"#, "x".repeat(5000)).into_bytes());
    match a.ws.read() {
        Ok(Message::Close(Some(frame))) => assert_eq!(frame.code, CloseCode::Size),
        other => panic!("expected a close, got {other:?}"),
    }
    // Its peers left their torrents.
    let mut b = connect(addr, "/announce", 2);
    let deadline = Instant::now() + Duration::from_secs(5);
    while stats(&b.scrape(&[hash(1)])) != (0, 0, 0) {
        assert!(Instant::now() < deadline);
        std::thread::sleep(Duration::from_millis(50));
    }
    // An upgrade without a key or of another version is refused.
    let mut raw = TcpStream::connect(addr).unwrap();
    raw.write_all(b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nSec-WebSocket-Version: 13\r\n\r\n")
        .unwrap();
    let mut buf = [0u8; 256];
    let n = raw.read(&mut buf).unwrap();
    assert!(buf[..n].starts_with(b"HTTP/1.1 400"));
    assert!(
        tracker.metric(
            "tracker_websocket_errors_total",
            &[("kind", "message_too_large")]
        ) >= 1
    );
}

#[test]
fn a_client_that_does_not_read_is_cut() {
    let tracker = Tracker::builder()
        .http(None)
        .config("[websocket]\nmax_queued_messages = 8\nmax_queued_bytes = 65536\nwrite_timeout_secs = 1\n")
        .metrics()
        .start();
    let addr = tracker.http[0];
    let torrent = hash(5);
    let mut sleeper = connect(addr, "/announce", 1);
    sleeper.announce(torrent, AnnounceEvent::Started, 0, 0);
    assert_eq!(sleeper.counts(), (1, 0));
    // Offers to the sleeper, which reads nothing, until its queue and
    // socket buffers are full and it is cut.
    let mut offerer = connect(addr, "/announce", 2);
    let deadline = Instant::now() + Duration::from_secs(20);
    let big = format!(r#"{{"type":"offer","sdp":"{}"}}"#, "s".repeat(7000));
    loop {
        let m = AnnounceMessage {
            info_hash: torrent,
            peer_id: offerer.id,
            event: AnnounceEvent::None,
            left: Some(5),
            numwant: Some(1),
            offers: vec![Offer {
                offer_id: OfferId([3; 20]),
                offer: &big,
            }],
            answer: None,
        };
        let mut out = Vec::new();
        write_announce_request(&mut out, &m);
        offerer.send(out);
        let (seeders, _) = offerer.counts();
        if seeders == 0 {
            break;
        }
        assert!(Instant::now() < deadline, "the sleeper was never cut");
    }
    assert!(
        tracker.metric("tracker_websocket_errors_total", &[("kind", "queue_full")])
            + tracker.metric(
                "tracker_websocket_errors_total",
                &[("kind", "write_timeout")]
            )
            >= 1
    );
}

#[test]
fn a_stop_closes_connections_with_going_away() {
    let tracker = Tracker::builder().http(None).start();
    let mut a = connect(tracker.http[0], "/announce", 1);
    a.announce(hash(2), AnnounceEvent::Started, 5, 0);
    assert_eq!(a.counts(), (0, 1));
    tracker.signal(libc::SIGTERM);
    match a.ws.read() {
        Ok(Message::Close(Some(frame))) => assert_eq!(frame.code, CloseCode::Away),
        other => panic!("expected a close frame, got {other:?}"),
    }
    let (code, _) = tracker.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0));
}

#[test]
fn wss_on_the_https_listener() {
    let tracker = Tracker::builder().https(None).start();
    let addr = tracker.https[0];
    let config = tracker.tls.as_ref().unwrap().cert.client_config();
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let tcp = TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let tls = rustls::StreamOwned::new(rustls::ClientConnection::new(config, name).unwrap(), tcp);
    let (ws, _) =
        tungstenite::client(format!("wss://localhost:{}/announce", addr.port()), tls).unwrap();
    let mut peer = Peer {
        ws,
        id: PeerId([4; 20]),
    };
    peer.announce(hash(4), AnnounceEvent::Started, 0, 0);
    assert_eq!(peer.counts(), (1, 0));
    assert_eq!(stats(&peer.scrape(&[hash(4)])), (1, 0, 0));
}

#[test]
fn completed_counts_of_webrtc_torrents_survive_a_restart() {
    let state = support::tempfile_path::TempPath::new("ws-state", "state");
    let port = support::free_port();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let tracker = Tracker::builder()
        .http(Some(addr))
        .state_file(&state.0)
        .start();
    let mut a = connect(addr, "/announce", 1);
    a.announce(hash(8), AnnounceEvent::Started, 5, 0);
    assert_eq!(a.counts(), (0, 1));
    a.announce(hash(8), AnnounceEvent::Completed, 0, 0);
    assert_eq!(a.counts(), (1, 0));
    tracker.signal(libc::SIGTERM);
    let (code, _) = tracker.wait_exit(Duration::from_secs(10));
    assert_eq!(code, Some(0));
    let _tracker = Tracker::builder()
        .http(Some(addr))
        .state_file(&state.0)
        .start();
    let mut b = connect(addr, "/announce", 2);
    // The peer is gone (browsers reconnect and announce again); the count
    // stays.
    assert_eq!(stats(&b.scrape(&[hash(8)])), (0, 0, 1));
}

#[test]
fn an_offer_expires_and_is_answered_once() {
    let tracker = Tracker::builder()
        .http(None)
        .config("[websocket]\noffer_timeout_secs = 1\n")
        .start();
    let addr = tracker.http[0];
    let torrent = hash(11);
    let mut seeder = connect(addr, "/announce", 1);
    seeder.announce(torrent, AnnounceEvent::Started, 0, 0);
    assert_eq!(seeder.counts(), (1, 0));
    let mut leecher = connect(addr, "/announce", 2);
    leecher.announce(torrent, AnnounceEvent::Started, 9, 1);
    assert_eq!(leecher.counts(), (1, 1));
    let text = seeder.next_text();
    let ServerMessage::Offer { offer_id, .. } = parse_server_message(text.as_bytes()).unwrap()
    else {
        panic!("expected an offer: {text}")
    };
    // Past offer_timeout_secs (the clock counts whole seconds) the answer
    // is refused and never reaches the leecher.
    std::thread::sleep(Duration::from_millis(2100));
    seeder.answer(torrent, leecher.id, offer_id);
    assert!(seeder.error().contains("no such offer"));
    leecher
        .ws
        .get_mut()
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    assert!(leecher.ws.read().is_err(), "nothing was relayed");
}

/// A client's frame as a hostile client writes it, bypassing its library:
/// masked with a zero key, which leaves the payload as it is.
fn client_frame(opcode: u8, fin: bool, payload: &[u8]) -> Vec<u8> {
    let mut out = vec![opcode | if fin { 0x80 } else { 0 }];
    match payload.len() {
        n if n < 126 => out.push(0x80 | n as u8),
        n => {
            out.push(0x80 | 126);
            out.extend_from_slice(&(n as u16).to_be_bytes());
        }
    }
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(payload);
    out
}

/// A peer whose socket takes little before it is full: a client that does
/// not read fills it, and then the tracker's send buffer, soon.
fn connect_small_window(addr: SocketAddr, id: u8) -> Peer<TcpStream> {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket.connect(&addr.into()).unwrap();
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(5)))
        .unwrap();
    let (ws, _) = tungstenite::client(format!("ws://{addr}/announce"), stream).unwrap();
    Peer {
        ws,
        id: PeerId([id; 20]),
    }
}

fn hash16(n: u16) -> InfoHash {
    let mut hash = [0x5a; 20];
    hash[..2].copy_from_slice(&n.to_be_bytes());
    InfoHash(hash)
}

/// Pongs to a client that never reads are queued for it like any answer:
/// once the kernel's buffers are full, it is cut within write_timeout_secs,
/// however long it goes on pinging (the frame layer used to keep a pong per
/// ping, up to 1.1 MB, and never cut it).
#[test]
fn a_client_that_pings_and_never_reads_is_cut() {
    let tracker = Tracker::builder()
        .http(None)
        .config("[websocket]\nwrite_timeout_secs = 1\n")
        .metrics()
        .start();
    let mut peer = connect_small_window(tracker.http[0], 1);
    peer.announce(hash(30), AnnounceEvent::Started, 0, 0);
    assert_eq!(peer.counts(), (1, 0));
    let raw = peer.ws.get_mut();
    raw.set_write_timeout(Some(Duration::from_millis(200)))
        .unwrap();
    let ping = client_frame(0x9, true, &[b'p'; 125]);
    let start = Instant::now();
    let mut pings = 0u64;
    loop {
        match raw.write_all(&ping) {
            Ok(()) => pings += 1,
            // The tracker reads no more pings than it has room for pongs.
            Err(e) if matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut) => {}
            Err(_) => break,
        }
        assert!(
            start.elapsed() < Duration::from_secs(15),
            "a client that never reads was held past its write timeout ({pings} pings)"
        );
    }
    assert!(
        tracker.metric(
            "tracker_websocket_errors_total",
            &[("kind", "write_timeout")]
        ) >= 1
    );
}

/// Only messages keep a connection open: one that sends nothing but pings
/// is idle, and closed at idle_timeout_secs.
#[test]
fn pings_do_not_keep_an_idle_connection_open() {
    let tracker = Tracker::builder()
        .http(None)
        .config("[websocket]\nannounce_interval_secs = 1\nidle_timeout_secs = 2\n")
        .start();
    let mut peer = connect(tracker.http[0], "/announce", 1);
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(8),
            "pings kept an idle connection open"
        );
        peer.ws.send(Message::Ping(vec![7; 4].into())).unwrap();
        match peer.ws.read() {
            Ok(Message::Pong(_)) => std::thread::sleep(Duration::from_millis(200)),
            Ok(Message::Close(Some(frame))) => {
                assert_eq!(
                    (frame.code, frame.reason.as_str()),
                    (CloseCode::Normal, "idle")
                );
                break;
            }
            other => panic!("expected a pong or a close, got {other:?}"),
        }
    }
    assert!(start.elapsed() >= Duration::from_millis(1900));
}

/// A message must come whole within message_timeout_secs of its first
/// byte, pings between its fragments or not.
#[test]
fn a_message_must_come_whole_in_time() {
    let tracker = Tracker::builder()
        .http(None)
        .config("[websocket]\nmessage_timeout_secs = 1\n")
        .metrics()
        .start();
    let mut peer = connect(tracker.http[0], "/announce", 1);
    let first = client_frame(0x1, false, br#"{"action":"announce","#);
    peer.ws.get_mut().write_all(&first).unwrap();
    let start = Instant::now();
    loop {
        assert!(
            start.elapsed() < Duration::from_secs(6),
            "an unfinished message was kept past its deadline"
        );
        let ping = client_frame(0x9, true, b"still here");
        peer.ws.get_mut().write_all(&ping).unwrap();
        match peer.ws.read() {
            Ok(Message::Pong(_)) => std::thread::sleep(Duration::from_millis(200)),
            Ok(Message::Close(Some(frame))) => {
                assert_eq!(frame.code, CloseCode::Policy);
                break;
            }
            other => panic!("expected a pong or a close, got {other:?}"),
        }
    }
    assert!(start.elapsed() >= Duration::from_millis(900));
    assert!(
        tracker.metric(
            "tracker_websocket_errors_total",
            &[("kind", "message_timeout")]
        ) >= 1
    );
}

/// The bytes of unfinished messages count for their address (on each
/// worker: one here): the connection whose message takes it past its
/// budget is closed, the others go on.
#[test]
fn unfinished_messages_count_against_their_address() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .http(None)
        .config("[websocket]\nmax_unfinished_bytes_per_address = 65536\n")
        .metrics()
        .start();
    let addr = tracker.http[0];
    let mut a = connect(addr, "/announce", 1);
    let mut b = connect(addr, "/announce", 2);
    let padding = [b' '; 15_000];
    let mut held = client_frame(0x1, false, &padding);
    held.extend(client_frame(0x0, false, &padding));
    held.extend(client_frame(0x0, false, &padding));
    a.ws.get_mut().write_all(&held).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    // 45,000 bytes held for the address; 30,000 more pass 65,536.
    let mut more = client_frame(0x1, false, &padding);
    more.extend(client_frame(0x0, false, &padding));
    b.ws.get_mut().write_all(&more).unwrap();
    match b.ws.read() {
        Ok(Message::Close(Some(frame))) => assert_eq!(frame.code, CloseCode::Again),
        other => panic!("expected a close, got {other:?}"),
    }
    // A's message, finished, is read and answered.
    let end = client_frame(
        0x0,
        true,
        br#"{"action":"scrape","info_hash":"aaaaaaaaaaaaaaaaaaaa"}"#,
    );
    a.ws.get_mut().write_all(&end).unwrap();
    let _ = a.next_text();
    assert!(
        tracker.metric(
            "tracker_websocket_errors_total",
            &[("kind", "unfinished_bytes"), ("level", "address")]
        ) >= 1
    );
}

/// A seeder announces all its torrents on its one connection: hundreds are
/// served (256 were, at most).
#[test]
fn a_seeder_announces_hundreds_of_torrents_on_one_connection() {
    let tracker = Tracker::builder().http(None).start();
    let mut seeder = connect(tracker.http[0], "/announce", 1);
    for n in 0..400 {
        seeder.announce(hash16(n), AnnounceEvent::Started, 0, 0);
        assert_eq!(seeder.counts(), (1, 0), "torrent {n}");
    }
}

/// What bounds the WebRTC peers connections hold is their address's cap
/// on each worker (one here), over all its connections.
#[test]
fn the_webrtc_peers_of_one_address_are_capped() {
    let tracker = Tracker::builder()
        .runtime_args(&["--workers", "1", "--no-pin"])
        .http(None)
        .config("[websocket]\nmax_peers_per_address = 4\n")
        .metrics()
        .start();
    let addr = tracker.http[0];
    let mut a = connect(addr, "/announce", 1);
    let mut b = connect(addr, "/announce", 2);
    for n in 0..3 {
        a.announce(hash16(n), AnnounceEvent::Started, 0, 0);
        assert_eq!(a.counts(), (1, 0));
    }
    b.announce(hash16(10), AnnounceEvent::Started, 0, 0);
    assert_eq!(b.counts(), (1, 0));
    b.announce(hash16(11), AnnounceEvent::Started, 0, 0);
    assert!(b.error().contains("too many WebRTC peers"));
    // Announces in torrents it holds are served still.
    b.announce(hash16(10), AnnounceEvent::None, 0, 0);
    assert_eq!(b.counts(), (1, 0));
    // A peer that stops, or a connection that closes, makes room.
    a.announce(hash16(0), AnnounceEvent::Stopped, 0, 0);
    assert_eq!(a.counts(), (0, 0));
    b.announce(hash16(11), AnnounceEvent::Started, 0, 0);
    assert_eq!(b.counts(), (1, 0));
    drop(a);
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        b.announce(hash16(12), AnnounceEvent::Started, 0, 0);
        let text = b.next_text();
        if !text.contains("too many WebRTC peers") {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a closed connection kept its peers"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(
        tracker.metric(
            "tracker_websocket_errors_total",
            &[("kind", "peers_per_address"), ("level", "address")]
        ) >= 1
    );
}

/// Offers carry peer ids: whoever learns one and announces it first in a
/// torrent keeps its owner out of none, and gets none of its answers.
#[test]
fn a_peer_id_learnt_from_an_offer_keeps_its_owner_out_of_no_torrent() {
    let tracker = Tracker::builder().http(None).start();
    let addr = tracker.http[0];
    let (first, second) = (hash(40), hash(41));
    let mut thief = connect(addr, "/announce", 66);
    thief.announce(first, AnnounceEvent::Started, 0, 0);
    assert_eq!(thief.counts(), (1, 0));
    let mut victim = connect(addr, "/announce", 1);
    victim.announce(first, AnnounceEvent::Started, 10, 1);
    assert_eq!(victim.counts(), (1, 1));
    let text = thief.next_text();
    let ServerMessage::Offer { peer_id, .. } = parse_server_message(text.as_bytes()).unwrap()
    else {
        panic!("expected an offer: {text}")
    };
    assert_eq!(peer_id, victim.id);
    // The thief is there first with the victim's id...
    thief.id = victim.id;
    thief.announce(second, AnnounceEvent::Started, 10, 0);
    assert_eq!(thief.counts(), (0, 1));
    // ... and the victim is served all the same, as another peer.
    victim.announce(second, AnnounceEvent::Started, 10, 0);
    assert_eq!(victim.counts(), (0, 2));
    // Offers to the victim's id there reach the victim's own connection.
    let mut seeder = connect(addr, "/announce", 3);
    seeder.announce(second, AnnounceEvent::Started, 0, 2);
    assert_eq!(seeder.counts(), (1, 2));
    let text = victim.next_text();
    let ServerMessage::Offer { offer_id, .. } = parse_server_message(text.as_bytes()).unwrap()
    else {
        panic!("expected an offer: {text}")
    };
    // An answer from the thief to the offer made to the victim is refused.
    thief.answer(second, seeder.id, offer_id);
    let mut refused = false;
    for _ in 0..2 {
        let text = thief.next_text();
        match parse_server_message(text.as_bytes()).unwrap() {
            ServerMessage::Error { reason, .. } => {
                assert!(reason.contains("no such offer"));
                refused = true;
                break;
            }
            ServerMessage::Offer { .. } => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert!(refused);
}

/// A peer's completion counts once, however often it turns leecher and
/// completes again.
#[test]
fn a_peer_flipping_between_leecher_and_completed_completes_once() {
    let tracker = Tracker::builder().http(None).start();
    let mut peer = connect(tracker.http[0], "/announce", 1);
    let torrent = hash(50);
    peer.announce(torrent, AnnounceEvent::Started, 10, 0);
    assert_eq!(peer.counts(), (0, 1));
    for _ in 0..20 {
        peer.announce(torrent, AnnounceEvent::Completed, 0, 0);
        assert_eq!(peer.counts(), (1, 0));
        peer.announce(torrent, AnnounceEvent::None, 10, 0);
        assert_eq!(peer.counts(), (0, 1));
    }
    assert_eq!(stats(&peer.scrape(&[torrent])), (0, 1, 1));
}
