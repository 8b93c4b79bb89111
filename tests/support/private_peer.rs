//! One peer of a private tracker, as a test drives it: a peer id, port and
//! source address of its own, announcing with its user's passkey over HTTP
//! (in the path) or UDP (BEP 41 URLData), with the whole answer read back
//! (counts, intervals, peers, warning) so that one test body serves both.

use super::site_db::{info_hash, passkey};
use super::udp_client::{announce_packet_of, Client};
use super::wire::target;
use super::Tracker;
use std::io::{Read, Write};
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::time::Duration;
use tracker_proto::http::bencode;
use tracker_proto::udp::Response;
use tracker_proto::{AnnounceEvent, PeerId};

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Proto {
    Http,
    Udp,
}

/// An admitted announce's answer. Over UDP there is no `min interval` nor
/// warning (BEP 15 has no room for them).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Answer {
    pub complete: i64,
    pub incomplete: i64,
    pub interval: i64,
    pub min_interval: Option<i64>,
    pub peers: Vec<SocketAddr>,
    pub warning: Option<String>,
}

#[derive(Clone, Copy, Debug)]
pub struct Peer {
    pub proto: Proto,
    pub user: u32,
    pub torrent: u32,
    pub id: [u8; 20],
    pub port: u16,
    pub from: IpAddr,
}

/// A peer id in a real client's style, unique per (user, n).
pub fn peer_id(user: u32, n: u32) -> [u8; 20] {
    let text = format!("-TR3000-{user:04}{n:08}");
    text.as_bytes().try_into().expect("20 bytes")
}

impl Peer {
    /// User `user`'s peer on `torrent` at 127.0.0.1:`port`, its peer id made
    /// of the user and the port.
    pub fn new(proto: Proto, user: u32, torrent: u32, port: u16) -> Peer {
        Peer {
            proto,
            user,
            torrent,
            id: peer_id(user, port.into()),
            port,
            from: IpAddr::V4(Ipv4Addr::LOCALHOST),
        }
    }

    /// The same peer id announcing from another port.
    pub fn at_port(self, port: u16) -> Peer {
        Peer { port, ..self }
    }

    /// The same peer id announcing from another source address.
    pub fn from(self, from: IpAddr) -> Peer {
        Peer { from, ..self }
    }

    /// The address other peers are handed for it.
    pub fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.from, self.port)
    }

    /// One announce with these totals (uploaded, downloaded, left): the
    /// answer, or the failure reason (HTTP) or error message (UDP).
    pub fn announce(
        &self,
        tracker: &Tracker,
        totals: (u64, u64, u64),
        event: AnnounceEvent,
    ) -> Result<Answer, String> {
        match self.proto {
            Proto::Http => self.over_http(tracker.http[0], totals, event, true),
            Proto::Udp => self.over_udp(tracker.udp[0], totals, event),
        }
    }

    /// [`Peer::announce`] that must be admitted without a warning.
    pub fn ok(&self, tracker: &Tracker, totals: (u64, u64, u64), event: AnnounceEvent) -> Answer {
        let answer = self.announce(tracker, totals, event);
        match answer {
            Ok(answer) if answer.warning.is_none() => answer,
            other => panic!(
                "{:?} announce of user {} on torrent {} from {} ({totals:?}, {event:?}): {other:?}",
                self.proto,
                self.user,
                self.torrent,
                self.addr()
            ),
        }
    }

    /// The HTTP path of an announce (compact unless `compact` is false).
    pub fn http_path(
        &self,
        (uploaded, downloaded, left): (u64, u64, u64),
        event: AnnounceEvent,
        compact: bool,
    ) -> String {
        let req = tracker_proto::http::AnnounceRequest {
            uploaded,
            downloaded,
            left,
            event,
            compact,
            ..tracker_proto::http::AnnounceRequest::new(
                info_hash(self.torrent),
                PeerId(self.id),
                self.port,
            )
        };
        target(&req).replacen(
            "/announce?",
            &format!("/announce/{}?", passkey(self.user)),
            1,
        )
    }

    /// An HTTP announce from `self.from`.
    pub fn over_http(
        &self,
        tracker: SocketAddr,
        totals: (u64, u64, u64),
        event: AnnounceEvent,
        compact: bool,
    ) -> Result<Answer, String> {
        let path = self.http_path(totals, event, compact);
        let mut tcp = super::tcp_from(self.from, tracker);
        tcp.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let request = format!(
            "GET {path} HTTP/1.1\r\nHost: t\r\nUser-Agent: tracker-tests/1.0\r\n\
             Connection: close\r\n\r\n"
        );
        tcp.write_all(request.as_bytes()).unwrap();
        let mut raw = Vec::new();
        tcp.read_to_end(&mut raw).expect("an HTTP answer");
        let head_end = raw
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("a head")
            + 4;
        let body = &raw[head_end..];
        assert!(
            raw.starts_with(b"HTTP/1.1 200"),
            "{path}: {}",
            String::from_utf8_lossy(&raw)
        );
        let value = bencode::decode(body).expect("bencoded");
        let text = |key: &[u8]| {
            value
                .get(key)
                .and_then(|v| v.as_bytes())
                .map(|b| String::from_utf8_lossy(b).into_owned())
        };
        if let Some(reason) = text(b"failure reason") {
            return Err(reason);
        }
        let int = |key: &[u8]| value.get(key).and_then(|v| v.as_int());
        let mut peers = Vec::new();
        if let Some(v4) = value.get(b"peers").and_then(|v| v.as_bytes()) {
            for p in v4.chunks_exact(6) {
                let ip = Ipv4Addr::new(p[0], p[1], p[2], p[3]);
                peers.push(SocketAddr::new(ip.into(), u16::from_be_bytes([p[4], p[5]])));
            }
        }
        if let Some(v6) = value.get(b"peers6").and_then(|v| v.as_bytes()) {
            for p in v6.chunks_exact(18) {
                let ip: [u8; 16] = p[..16].try_into().unwrap();
                let port = u16::from_be_bytes([p[16], p[17]]);
                peers.push(SocketAddr::new(std::net::Ipv6Addr::from(ip).into(), port));
            }
        }
        peers.sort();
        Ok(Answer {
            complete: int(b"complete").expect("complete"),
            incomplete: int(b"incomplete").expect("incomplete"),
            interval: int(b"interval").expect("interval"),
            min_interval: int(b"min interval"),
            peers,
            warning: text(b"warning message"),
        })
    }

    /// A BEP 15 announce from `self.from`, the passkey in its URLData.
    fn over_udp(
        &self,
        tracker: SocketAddr,
        (uploaded, downloaded, left): (u64, u64, u64),
        event: AnnounceEvent,
    ) -> Result<Answer, String> {
        let mut client = Client::new(&SocketAddr::new(self.from, 0).to_string(), tracker);
        let txid = client.txid();
        let url = format!("/announce/{}", passkey(self.user));
        let packet = announce_packet_of(
            (client.connection_id, txid),
            info_hash(self.torrent),
            self.id,
            self.port,
            (uploaded, downloaded, left),
            event,
            Some(&url),
        );
        let raw = client.exchange(&packet);
        match Response::parse(&raw, client.family()).expect("a BEP 15 answer") {
            Response::Announce {
                transaction_id,
                interval,
                leechers,
                seeders,
                peers,
            } if transaction_id == txid => {
                let mut peers: Vec<SocketAddr> = peers.iter().collect();
                peers.sort();
                Ok(Answer {
                    complete: seeders.into(),
                    incomplete: leechers.into(),
                    interval: interval.into(),
                    min_interval: None,
                    peers,
                    warning: None,
                })
            }
            Response::Error {
                transaction_id,
                message,
            } if transaction_id == txid => Err(String::from_utf8_lossy(message).into_owned()),
            other => panic!("not an answer to this announce: {other:?}"),
        }
    }
}
