//! Private mode over UDP: the passkey comes in the announce's URLData
//! (BEP 41), the path of the announce URL (`/announce/{passkey}` or
//! `/{passkey}/announce`), as libtorrent sends it. Only clients with a valid
//! connection id get here, so no answer can be aimed at a forged address.

use crate::server::{Answers, InFlight, Path, UdpService, UdpStats};
use std::rc::Rc;
use tracker_private::client::check_port;
use tracker_private::client_name::agent_of;
use tracker_private::{Passkey, PrivateAnnounce};
use tracker_proto::http::{route, Endpoint};
use tracker_proto::udp::{write_error_response, AnnounceRequest, TransactionId};
use tracker_proto::{Announce, AnswerPeers, IpFamily};
use tracker_runtime::contain::Contained;
use tracker_runtime::shard::{PrivateCounts, PrivateRefused, PrivateRequest};

/// URLData longer than this is refused: a path with a passkey needs far
/// less, and the copy is kept on the stack.
const MAX_URL_DATA: usize = 512;

/// UNIT3D-Announce's words for an announce without a passkey.
const INVALID_PASSKEY: &[u8] = b"Invalid passkey.";

/// The passkey in an announce's URLData, if its path has one.
fn passkey(req: &AnnounceRequest<'_>) -> Option<Passkey> {
    let mut url = [0u8; MAX_URL_DATA];
    let mut len = 0;
    for part in req.url_data() {
        let end = len + part.len();
        url.get_mut(len..end)?.copy_from_slice(part);
        len = end;
    }
    let url = url.get(..len)?;
    let path = url.split(|&b| b == b'?').next()?;
    match route(path)? {
        (Endpoint::Announce, Some(key)) => Passkey::parse(key),
        _ => None,
    }
}

impl UdpService {
    /// Answers a private announce (the connection id already checked): at
    /// once when it has no passkey or its torrent is this worker's, else
    /// once its torrent's owner has.
    pub(crate) fn private_announce<P: Path>(
        self: &Rc<Self>,
        req: &AnnounceRequest<'_>,
        announce: Announce,
        path: &Rc<P>,
        tx: &mut P::Batch,
        reply: P::Reply,
    ) {
        let stats = path.stats(self);
        let txid = req.transaction_id;
        let family = IpFamily::of(announce.peer_addr.ip());
        let Some(passkey) = passkey(req) else {
            Self::count_announce_response(stats, family);
            stats.errors_sent.inc();
            write_error_response(tx.push(reply), txid, INVALID_PASSKEY);
            return;
        };
        if let Err(refusal) = check_port(req.port, req.event) {
            Self::count_announce_response(stats, family);
            stats.refused.inc();
            stats.errors_sent.inc();
            let message = refusal.to_string();
            write_error_response(tx.push(reply), txid, message.as_bytes());
            return;
        }
        let account = PrivateAnnounce {
            info_hash: req.info_hash,
            peer_id: req.peer_id,
            passkey,
            ip: announce.peer_addr.ip(),
            port: req.port,
            event: req.event,
            uploaded: req.uploaded,
            downloaded: req.downloaded,
            left: req.left,
            // No user agent over UDP: the client its peer id names.
            agent: agent_of(&req.peer_id),
            numwant: announce.numwant,
        };
        let request = PrivateRequest { announce, account };
        // Steering brings nearly every announce to its owner: answered in
        // this receive batch's answers, with no task and no buffer of its
        // own.
        let here = self.shard.private_announce_here(&request, |counts, peers| {
            self.write_private(stats, tx.push(reply), txid, family, counts, peers)
        });
        if here.is_some() {
            stats.announces_local.inc();
            return;
        }
        stats.announces_forwarded.inc();
        let this = self.clone();
        let (path, in_flight) = (path.clone(), InFlight::new(self));
        glommio::spawn_local(async move {
            let _in_flight = in_flight;
            let stats = path.stats(&this);
            let task = async {
                let mut out = Vec::new();
                let answered = this.shard.private_announce(request, |counts, peers| {
                    this.write_private(stats, &mut out, txid, family, counts, peers)
                });
                if let Err(e) = answered.await {
                    return this.route_failed(e, stats);
                }
                path.send_now(&out, reply, stats);
            };
            Contained::new(&stats.panics, task).await;
        })
        .detach();
    }

    fn write_private(
        &self,
        stats: &UdpStats,
        out: &mut Vec<u8>,
        txid: TransactionId,
        family: IpFamily,
        counts: Result<PrivateCounts, PrivateRefused>,
        peers: &AnswerPeers,
    ) {
        match counts {
            // BEP 15 has no warnings: the leecher past its download slots
            // (accounted, handed no peers) is told why as an error.
            Ok(PrivateCounts {
                warning: Some(warning),
                ..
            }) => {
                Self::count_announce_response(stats, family);
                stats.errors_sent.inc();
                write_error_response(out, txid, warning.reason().as_bytes());
            }
            // BEP 15's answer has no room for snatches.
            Ok(counts) => {
                let peers = peers.compact();
                self.write_announce(stats, out, txid, family, Ok(counts.swarm), peers)
            }
            Err(PrivateRefused::Store(refused)) => {
                self.write_announce(stats, out, txid, family, Err(refused), &[])
            }
            Err(PrivateRefused::Site(refusal)) => {
                Self::count_announce_response(stats, family);
                stats.refused.inc();
                stats.errors_sent.inc();
                write_error_response(out, txid, refusal.reason().as_bytes());
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracker_proto::udp::{AnnounceOptions, Request};

    fn announce_with(url: &[u8]) -> Vec<u8> {
        let mut packet = Vec::new();
        packet.extend_from_slice(&0x41727101980u64.to_be_bytes());
        packet.extend_from_slice(&1u32.to_be_bytes());
        packet.extend_from_slice(&7u32.to_be_bytes());
        packet.extend_from_slice(&[1; 20]);
        packet.extend_from_slice(&[2; 20]);
        packet.extend_from_slice(&[0; 8 * 3 + 4 + 4 + 4]);
        packet.extend_from_slice(&(-1i32).to_be_bytes());
        packet.extend_from_slice(&6881u16.to_be_bytes());
        AnnounceOptions::write_url_data(&mut packet, url);
        packet
    }

    #[test]
    fn the_passkey_of_either_path_form() {
        let key = b"0123456789abcdef0123456789abcdef";
        for (url, expected) in [
            (&b"/announce/0123456789abcdef0123456789abcdef"[..], true),
            (b"/0123456789abcdef0123456789abcdef/announce?x=1", true),
            (b"/announce", false),
            (b"/announce/short", false),
            (b"/scrape/0123456789abcdef0123456789abcdef", false),
            (b"", false),
        ] {
            let packet = announce_with(url);
            let Ok(Request::Announce(req)) = Request::parse(&packet) else {
                panic!("not an announce");
            };
            assert_eq!(passkey(&req), expected.then_some(Passkey(*key)), "{url:?}");
        }
    }
}
