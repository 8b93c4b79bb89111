//! A BEP 15 client for tests, spoken with the tracker's own codec.

use std::net::{SocketAddr, UdpSocket};
use std::time::Duration;

use super::wire::{udp_announce_wanting, udp_connect_packet};
use tracker_proto::udp::{write_scrape_request, ConnectionId, IpFamily, Response, TransactionId};
use tracker_proto::{AnnounceEvent, InfoHash, ScrapeStats};

/// A BEP 15 client bound to one loopback address.
pub struct Client {
    pub sock: UdpSocket,
    pub target: SocketAddr,
    pub connection_id: ConnectionId,
    next_txid: i32,
}

#[derive(Debug)]
pub struct Announced {
    pub interval: u32,
    pub seeders: u32,
    pub leechers: u32,
    pub peers: Vec<SocketAddr>,
}

impl Client {
    pub fn new(bind: &str, target: SocketAddr) -> Client {
        let sock = UdpSocket::bind(bind).unwrap();
        sock.set_read_timeout(Some(Duration::from_secs(3))).unwrap();
        let mut client = Client {
            sock,
            target,
            connection_id: ConnectionId(0),
            next_txid: 1,
        };
        client.connect();
        client
    }

    pub fn family(&self) -> IpFamily {
        IpFamily::of(self.target.ip())
    }

    pub fn txid(&mut self) -> TransactionId {
        self.next_txid += 1;
        TransactionId(self.next_txid)
    }

    pub fn exchange(&mut self, packet: &[u8]) -> Vec<u8> {
        self.sock.send_to(packet, self.target).unwrap();
        let mut buf = vec![0u8; 4096];
        let (n, from) = self.sock.recv_from(&mut buf).expect("an answer");
        assert_eq!(from, self.target, "answer from another address");
        buf.truncate(n);
        buf
    }

    pub fn connect(&mut self) {
        let txid = self.txid();
        let answer = self.exchange(&udp_connect_packet(txid));
        assert_eq!(answer.len(), 16);
        match Response::parse(&answer, self.family()).unwrap() {
            Response::Connect {
                transaction_id,
                connection_id,
            } => {
                assert_eq!(transaction_id, txid);
                self.connection_id = connection_id;
            }
            other => panic!("expected connect answer, got {other:?}"),
        }
    }

    pub fn announce_packet(
        &mut self,
        info_hash: InfoHash,
        port: u16,
        event: AnnounceEvent,
        left: u64,
        numwant: i32,
    ) -> (TransactionId, Vec<u8>) {
        let txid = self.txid();
        let out = udp_announce_wanting(
            self.connection_id,
            txid.0,
            info_hash,
            port,
            event,
            left,
            numwant,
        );
        (txid, out)
    }

    pub fn announce(
        &mut self,
        info_hash: InfoHash,
        port: u16,
        event: AnnounceEvent,
        left: u64,
        numwant: i32,
    ) -> Announced {
        let (txid, packet) = self.announce_packet(info_hash, port, event, left, numwant);
        let answer = self.exchange(&packet);
        match Response::parse(&answer, self.family()).unwrap() {
            Response::Announce {
                transaction_id,
                interval,
                leechers,
                seeders,
                peers,
            } => {
                assert_eq!(transaction_id, txid);
                Announced {
                    interval,
                    seeders,
                    leechers,
                    peers: peers.iter().collect(),
                }
            }
            other => panic!("expected announce answer, got {other:?}"),
        }
    }

    /// An announce with these totals (uploaded, downloaded, left) and `url`
    /// as its URLData (BEP 41): Ok for an announce answer, or the error's
    /// message.
    pub fn announce_with_url(
        &mut self,
        info_hash: InfoHash,
        port: u16,
        (uploaded, downloaded, left): (u64, u64, u64),
        event: AnnounceEvent,
        url: &str,
    ) -> Result<(), String> {
        let txid = self.txid();
        let packet = announce_packet(
            (self.connection_id, txid),
            info_hash,
            port,
            (uploaded, downloaded, left),
            event,
            Some(url),
        );
        let answer = self.exchange(&packet);
        match Response::parse(&answer, self.family()).unwrap() {
            Response::Announce { transaction_id, .. } if transaction_id == txid => Ok(()),
            Response::Error {
                transaction_id,
                message,
            } if transaction_id == txid => Err(String::from_utf8_lossy(message).into_owned()),
            other => panic!("expected an announce answer or an error, got {other:?}"),
        }
    }

    pub fn scrape(&mut self, hashes: &[InfoHash]) -> Vec<ScrapeStats> {
        let txid = self.txid();
        let mut out = Vec::new();
        write_scrape_request(&mut out, self.connection_id, txid, hashes);
        let answer = self.exchange(&out);
        match Response::parse(&answer, self.family()).unwrap() {
            Response::Scrape {
                transaction_id,
                stats,
            } => {
                assert_eq!(transaction_id, txid);
                stats.iter().collect()
            }
            other => panic!("expected scrape answer, got {other:?}"),
        }
    }

    /// Sends a packet and returns the answer, if one comes within `wait`.
    pub fn try_exchange(&mut self, packet: &[u8], wait: Duration) -> Option<Vec<u8>> {
        self.sock.set_read_timeout(Some(wait)).unwrap();
        self.sock.send_to(packet, self.target).unwrap();
        let mut buf = vec![0u8; 4096];
        let got = self
            .sock
            .recv_from(&mut buf)
            .ok()
            .map(|(n, _)| buf[..n].to_vec());
        self.sock
            .set_read_timeout(Some(Duration::from_secs(3)))
            .unwrap();
        got
    }
}

/// A BEP 15 announce of the peer at `port` (its peer id made of the port)
/// with these totals (uploaded, downloaded, left), and `url` as its URLData
/// (BEP 41), if any.
pub fn announce_packet(
    ids: (tracker_proto::udp::ConnectionId, TransactionId),
    info_hash: InfoHash,
    port: u16,
    totals: (u64, u64, u64),
    event: AnnounceEvent,
    url: Option<&str>,
) -> Vec<u8> {
    let mut peer_id = [b'-'; 20];
    peer_id[..2].copy_from_slice(&port.to_be_bytes());
    announce_packet_of(ids, info_hash, peer_id, port, totals, event, url)
}

/// [`announce_packet`] of the peer id `peer_id`, whatever its port.
pub fn announce_packet_of(
    (connection_id, transaction_id): (tracker_proto::udp::ConnectionId, TransactionId),
    info_hash: InfoHash,
    peer_id: [u8; 20],
    port: u16,
    (uploaded, downloaded, left): (u64, u64, u64),
    event: AnnounceEvent,
    url: Option<&str>,
) -> Vec<u8> {
    use tracker_proto::udp::{AnnounceOptions, AnnounceRequest, Request};
    let mut packet = Vec::new();
    Request::Announce(AnnounceRequest {
        connection_id,
        transaction_id,
        info_hash,
        peer_id: tracker_proto::PeerId(peer_id),
        downloaded,
        left,
        uploaded,
        event,
        ip_address: 0,
        key: 0,
        num_want: -1,
        port,
        options: AnnounceOptions::EMPTY,
    })
    .write(&mut packet);
    if let Some(url) = url {
        AnnounceOptions::write_url_data(&mut packet, url.as_bytes());
    }
    packet
}
