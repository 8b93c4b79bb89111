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
use crate::{private, transfer};

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
            Kind::UDP[self.mix.sample(rng)]
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
                let totals = transfer::transfer(&plan, now_ns);
                AnnounceRequest {
                    connection_id,
                    transaction_id: txid,
                    info_hash: plan.info_hash,
                    peer_id: plan.peer.peer_id,
                    downloaded: totals.downloaded,
                    left: totals.left,
                    uploaded: totals.uploaded,
                    event: plan.event,
                    ip_address: 0,
                    key: plan.peer.key,
                    num_want: plan.numwant,
                    port: plan.peer.port,
                    options: AnnounceOptions::EMPTY,
                }
                .write(out);
                if let Some(passkey) = model.passkey(&plan.peer) {
                    private::write_url_data(out, passkey);
                }
            }
            // A scrape: the UDP mix has no other kind.
            _ => {
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
mod tests;
