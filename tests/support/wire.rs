//! Raw BEP 15 and HTTP requests for tests that need many clients or odd
//! packets, built with the tracker's own codecs.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::time::Duration;

use super::owner_of;
use tracker_proto::udp::{
    AnnounceOptions, AnnounceRequest, ConnectRequest, ConnectionId, Request, TransactionId,
};
use tracker_proto::{AnnounceEvent, InfoHash, PeerId};

/// Connects `sock` to the UDP tracker at `target`: the connection id, or None
/// when no answer came within the socket's read timeout.
pub fn udp_connect(sock: &UdpSocket, target: SocketAddr) -> Option<ConnectionId> {
    sock.send_to(&udp_connect_packet(TransactionId(0x0c0c)), target)
        .ok()?;
    let mut buf = [0u8; 64];
    loop {
        let (n, _) = sock.recv_from(&mut buf).ok()?;
        if n == 16 && buf[..4] == 0i32.to_be_bytes() && buf[4..8] == 0x0c0ci32.to_be_bytes() {
            let id = i64::from_be_bytes(buf[8..16].try_into().unwrap());
            return Some(ConnectionId(id));
        }
    }
}

/// A BEP 15 connect request.
pub fn udp_connect_packet(transaction_id: TransactionId) -> Vec<u8> {
    let mut out = Vec::new();
    Request::Connect(ConnectRequest { transaction_id }).write(&mut out);
    out
}

/// A BEP 15 announce of a leecher (`left` 1) or seeder (`left` 0), asking for
/// the tracker's default number of peers.
pub fn udp_announce(
    connection_id: ConnectionId,
    txid: i32,
    info_hash: InfoHash,
    port: u16,
    event: AnnounceEvent,
    left: u64,
) -> Vec<u8> {
    udp_announce_wanting(connection_id, txid, info_hash, port, event, left, -1)
}

/// `udp_announce` asking for `num_want` peers (-1: the tracker's default).
pub fn udp_announce_wanting(
    connection_id: ConnectionId,
    txid: i32,
    info_hash: InfoHash,
    port: u16,
    event: AnnounceEvent,
    left: u64,
    num_want: i32,
) -> Vec<u8> {
    let mut peer_id = [b'-'; 20];
    peer_id[..2].copy_from_slice(&port.to_be_bytes());
    let mut out = Vec::new();
    Request::Announce(AnnounceRequest {
        connection_id,
        transaction_id: TransactionId(txid),
        info_hash,
        peer_id: PeerId(peer_id),
        downloaded: 0,
        left,
        uploaded: 0,
        event,
        ip_address: 0,
        key: 0,
        num_want,
        port,
        options: AnnounceOptions::EMPTY,
    })
    .write(&mut out);
    out
}

/// An HTTP announce from port `port` (its peer id made from the port), compact.
pub fn announce_request(
    info_hash: InfoHash,
    port: u16,
    left: u64,
    event: AnnounceEvent,
) -> tracker_proto::http::AnnounceRequest<'static> {
    let mut peer_id = [b'-'; 20];
    peer_id[..2].copy_from_slice(&port.to_be_bytes());
    tracker_proto::http::AnnounceRequest {
        left,
        event,
        ..tracker_proto::http::AnnounceRequest::new(info_hash, PeerId(peer_id), port)
    }
}

/// The path and query of an HTTP announce.
pub fn target(announce: &tracker_proto::http::AnnounceRequest<'_>) -> String {
    let mut out = Vec::new();
    tracker_proto::http::write_announce_target(&mut out, announce);
    String::from_utf8(out).unwrap()
}

/// The path and query of a leecher's first HTTP announce.
pub fn http_announce_target(info_hash: InfoHash, port: u16) -> String {
    target(&announce_request(
        info_hash,
        port,
        1,
        AnnounceEvent::Started,
    ))
}

/// One HTTP/1.1 request on a new connection, `Connection: close`: the status
/// and the body, or None when the connection failed or took over `wait`.
pub fn http_get(addr: SocketAddr, target: &str, wait: Duration) -> Option<(u16, Vec<u8>)> {
    let mut tcp = TcpStream::connect_timeout(&addr, wait).ok()?;
    tcp.set_read_timeout(Some(wait)).ok()?;
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: t\r\nUser-Agent: tracker-tests/1.0\r\n\
         Connection: close\r\n\r\n"
    );
    tcp.write_all(request.as_bytes()).ok()?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).ok()?;
    let head_end = answer.windows(4).position(|w| w == b"\r\n\r\n")?;
    let status = std::str::from_utf8(answer.get(9..12)?).ok()?.parse().ok()?;
    Some((status, answer[head_end + 4..].to_vec()))
}

/// 40 hex digits of an info-hash (for the tracker's test hook).
pub fn hex(info_hash: &InfoHash) -> String {
    info_hash.0.iter().map(|b| format!("{b:02x}")).collect()
}

/// The body of a 200 answer to one HTTP request on its own connection.
pub fn http_get_ok(addr: SocketAddr, target: &str) -> Vec<u8> {
    match http_get(addr, target, Duration::from_secs(5)) {
        Some((200, body)) => body,
        other => panic!("GET {target}: {other:?}"),
    }
}

/// The first of a run of info-hashes (starting with `seed`) that `owner`
/// owns among `workers`: how a test puts a torrent on the worker it wants.
pub fn hash_owned_by(owner: usize, workers: usize, seed: u32) -> InfoHash {
    (0u32..)
        .map(|i| {
            let mut h = [0u8; 20];
            h[..4].copy_from_slice(&seed.to_be_bytes());
            h[4..8].copy_from_slice(&i.to_be_bytes());
            InfoHash(h)
        })
        .find(|h| owner_of(h, workers) == owner)
        .unwrap()
}
