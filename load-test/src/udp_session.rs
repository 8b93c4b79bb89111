//! One UDP socket's conversation with the tracker, without the socket: the
//! connection id, the requests in flight (by transaction id), building the next
//! request with the project's codec, and checking every answer. Pure (time is
//! passed in), so it is tested without a network.

use std::net::{IpAddr, SocketAddr};

use tracker_proto::udp::{
    max_peers, write_scrape_request, AnnounceOptions, AnnounceRequest, ConnectRequest,
    ConnectionId, IpFamily, Request, Response, TransactionId,
};
use tracker_proto::InfoHash;

use crate::model::{Kind, Rng, TrafficModel, Weighted, MAX_SCRAPE};
use crate::stats::{Invalid, Stats};

/// A connection id is renewed after this long (BEP 15 ids live about two
/// minutes; trackers accept the current and the previous window).
pub const RENEW_AFTER_NS: u64 = 60_000_000_000;

/// How often timed-out requests are looked for.
const EXPIRE_EVERY_NS: u64 = 10_000_000;

#[derive(Clone, Copy, Debug)]
struct Slot {
    generation: u16,
    busy: bool,
    /// The request of the previous generation timed out (an answer to it is late,
    /// not unknown).
    timed_out: bool,
    kind: Kind,
    sent_ns: u64,
    /// Most peers an announce answer may carry.
    max_peers: u16,
    /// The port the announcing peer gave (it must not get itself back).
    port: u16,
    scrape_hashes: u8,
}

impl Default for Slot {
    fn default() -> Self {
        Slot {
            generation: 0,
            busy: false,
            timed_out: false,
            kind: Kind::Connect,
            sent_ns: 0,
            max_peers: 0,
            port: 0,
            scrape_hashes: 0,
        }
    }
}

pub struct Session {
    target: SocketAddr,
    family: IpFamily,
    /// The address this socket is bound to, which the tracker sees as the
    /// peers' IP.
    local_ip: IpAddr,
    /// The model's source index of this socket.
    source: u32,
    mix: Weighted<3>,
    connection: Option<(ConnectionId, u64)>,
    connects_in_flight: u32,
    slots: Vec<Slot>,
    free: Vec<u16>,
    timeout_ns: u64,
    next_expiry_ns: u64,
    scrape: [InfoHash; MAX_SCRAPE],
}

impl Session {
    /// A session with room for `in_flight` requests (at most 65536).
    pub fn new(
        target: SocketAddr,
        local_ip: IpAddr,
        source: u32,
        mix: Weighted<3>,
        in_flight: u32,
        timeout_ns: u64,
    ) -> Session {
        let in_flight = in_flight.clamp(1, 1 << 16) as usize;
        Session {
            target,
            family: IpFamily::of(target.ip()),
            local_ip,
            source,
            mix,
            connection: None,
            connects_in_flight: 0,
            slots: vec![Slot::default(); in_flight],
            free: (0..in_flight).rev().map(|i| i as u16).collect(),
            timeout_ns,
            next_expiry_ns: 0,
            scrape: [InfoHash::default(); MAX_SCRAPE],
        }
    }

    pub fn in_flight(&self) -> usize {
        self.slots.len() - self.free.len()
    }

    pub fn has_room(&self) -> bool {
        !self.free.is_empty()
    }

    /// Whether requests other than connects can go (a connection id is known).
    pub fn connected(&self) -> bool {
        self.connection.is_some()
    }

    /// Appends the next request to `out` (which must be empty) and marks it in
    /// flight, sent at `now_ns`. False (and nothing written) when no slot is
    /// free, or when the first connect is still awaited.
    pub fn write_next(
        &mut self,
        model: &TrafficModel,
        rng: &mut Rng,
        now_ns: u64,
        out: &mut Vec<u8>,
        stats: &mut Stats,
    ) -> bool {
        let renew = match self.connection {
            None => true,
            Some((_, since)) => now_ns.saturating_sub(since) >= RENEW_AFTER_NS,
        };
        let kind = if renew && self.connects_in_flight == 0 {
            Kind::Connect
        } else if self.connection.is_none() {
            return false;
        } else {
            Kind::ALL[self.mix.sample(rng)]
        };
        let Some(index) = self.free.pop() else {
            return false;
        };
        let slot = &mut self.slots[usize::from(index)];
        slot.generation = slot.generation.wrapping_add(1);
        slot.busy = true;
        slot.kind = kind;
        slot.sent_ns = now_ns;
        let txid = TransactionId(((u32::from(slot.generation) << 16) | u32::from(index)) as i32);
        let connection_id = self.connection.map_or(ConnectionId(0), |(id, _)| id);
        match kind {
            Kind::Connect => {
                self.connects_in_flight += 1;
                Request::Connect(ConnectRequest {
                    transaction_id: txid,
                })
                .write(out);
            }
            Kind::Announce => {
                let plan = model.announce(rng, self.source);
                let cap = max_peers(self.family);
                slot.max_peers = match usize::try_from(plan.numwant) {
                    Ok(n) => n.min(cap),
                    Err(_) => cap,
                } as u16;
                slot.port = plan.peer.port;
                AnnounceRequest {
                    connection_id,
                    transaction_id: txid,
                    info_hash: plan.info_hash,
                    peer_id: plan.peer.peer_id,
                    downloaded: plan.peer.downloaded,
                    left: plan.left,
                    uploaded: plan.peer.uploaded,
                    event: plan.event,
                    ip_address: 0,
                    key: plan.peer.key,
                    num_want: plan.numwant,
                    port: plan.peer.port,
                    options: AnnounceOptions::EMPTY,
                }
                .write(out);
            }
            Kind::Scrape => {
                let n = model.scrape(rng, &mut self.scrape);
                slot.scrape_hashes = n as u8;
                write_scrape_request(out, connection_id, txid, &self.scrape[..n]);
            }
        }
        stats.sent(kind);
        true
    }

    /// Checks one datagram received at `now_ns` and counts it.
    pub fn on_datagram(&mut self, data: &[u8], from: SocketAddr, now_ns: u64, stats: &mut Stats) {
        if from != self.target {
            stats.invalid(Invalid::WrongSource);
            return;
        }
        let response = Response::parse(data, self.family);
        let txid = match &response {
            Ok(response) => Some(response.transaction_id()),
            Err(error) => error.transaction_id,
        };
        let Some(index) = txid.and_then(|txid| self.take_slot(txid, stats)) else {
            if response.is_err() {
                stats.invalid(Invalid::Malformed);
            }
            return;
        };
        let slot = self.slots[index];
        if slot.kind == Kind::Connect {
            self.connects_in_flight -= 1;
        }
        let latency = now_ns.saturating_sub(slot.sent_ns);
        let Ok(response) = response else {
            stats.invalid(Invalid::Malformed);
            return;
        };
        let verdict = match (slot.kind, response) {
            (kind, Response::Error { message, .. }) => {
                stats.error(kind, message, latency);
                return;
            }
            (Kind::Connect, Response::Connect { connection_id, .. }) => {
                if data.len() != 16 {
                    Err(Invalid::BadLength)
                } else {
                    self.connection = Some((connection_id, now_ns));
                    Ok(())
                }
            }
            (
                Kind::Announce,
                Response::Announce {
                    interval,
                    leechers,
                    seeders,
                    peers,
                    ..
                },
            ) => {
                let n = peers.len();
                if n > usize::from(slot.max_peers) {
                    Err(Invalid::TooManyPeers)
                } else if interval == 0 || u64::from(seeders) + u64::from(leechers) < n as u64 {
                    Err(Invalid::ImplausibleCounts)
                } else if let Some(bad) = peers.iter().find_map(|peer| self.check_peer(peer, &slot))
                {
                    Err(bad)
                } else {
                    stats.announce_peers(n);
                    Ok(())
                }
            }
            (Kind::Scrape, Response::Scrape { stats: list, .. }) => {
                if list.len() == usize::from(slot.scrape_hashes) {
                    Ok(())
                } else {
                    Err(Invalid::ScrapeMismatch)
                }
            }
            _ => Err(Invalid::WrongAction),
        };
        match verdict {
            Ok(()) => stats.ok(slot.kind, latency),
            Err(why) => stats.invalid(why),
        }
    }

    fn check_peer(&self, peer: SocketAddr, slot: &Slot) -> Option<Invalid> {
        if peer.port() == 0 || !peer.ip().is_loopback() {
            Some(Invalid::BadPeer)
        } else if peer.ip() == self.local_ip && peer.port() == slot.port {
            Some(Invalid::SelfInPeers)
        } else {
            None
        }
    }

    /// The slot in flight for `txid`, freed; `None` (counted) when there is none.
    fn take_slot(&mut self, txid: TransactionId, stats: &mut Stats) -> Option<usize> {
        let raw = txid.0 as u32;
        let index = (raw & 0xffff) as usize;
        let generation = (raw >> 16) as u16;
        let Some(slot) = self.slots.get_mut(index) else {
            stats.invalid(Invalid::UnknownTransaction);
            return None;
        };
        if slot.busy && slot.generation == generation {
            slot.busy = false;
            slot.timed_out = false;
            self.free.push(index as u16);
            Some(index)
        } else if slot.timed_out && slot.generation == generation {
            slot.timed_out = false;
            stats.late += 1;
            None
        } else {
            stats.invalid(Invalid::UnknownTransaction);
            None
        }
    }

    /// Counts and frees the requests older than the time-out; looks at most
    /// every 10 ms.
    pub fn expire(&mut self, now_ns: u64, stats: &mut Stats) {
        if now_ns < self.next_expiry_ns {
            return;
        }
        self.next_expiry_ns = now_ns + EXPIRE_EVERY_NS;
        let timeout = self.timeout_ns;
        self.expire_where(stats, |slot| now_ns.saturating_sub(slot.sent_ns) >= timeout);
    }

    /// Counts every request still in flight as timed out (at the end of a run).
    pub fn expire_all(&mut self, stats: &mut Stats) {
        self.expire_where(stats, |_| true);
    }

    fn expire_where(&mut self, stats: &mut Stats, old: impl Fn(&Slot) -> bool) {
        for (index, slot) in self.slots.iter_mut().enumerate() {
            if slot.busy && old(slot) {
                slot.busy = false;
                slot.timed_out = true;
                stats.timeout(slot.kind);
                if slot.kind == Kind::Connect {
                    self.connects_in_flight -= 1;
                }
                self.free.push(index as u16);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrafficConfig;
    use crate::model::min_sources;
    use tracker_proto::udp::{
        write_announce_response, write_connect_response, write_error_response,
        write_scrape_response,
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
        assert_eq!(f.stats.counters.timeouts, [0; 3]);
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
}
