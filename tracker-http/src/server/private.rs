//! Private mode's requests: an announce with a passkey in its path
//! (`/announce/{passkey}` or `/{passkey}/announce`), checked and accounted
//! at its torrent's owner (see `tracker_runtime::shard::PrivateShard`).

use super::answer::Scratch;
use super::*;
use tracker_private::client::{check_headers, check_port, SCRAPES_NOT_SERVED};
use tracker_private::{Agent, Passkey, PrivateAnnounce};
use tracker_proto::http::write_warning;
use tracker_runtime::shard::{PrivateCounts, PrivateRefused, PrivateRequest};

/// UNIT3D-Announce's answer to a path key that cannot be a passkey.
const INVALID_PASSKEY: &str = "Invalid passkey.";

/// UNIT3D-Announce's answer to `compact=0`.
const COMPACT_ONLY: &str = "Your client does not support compact announces.";

impl HttpService {
    pub(super) async fn private_request(
        &self,
        request: &Request<'_>,
        key: &[u8],
        connection: Connection,
        peer_ip: IpAddr,
        traffic: &HttpTraffic,
        s: Scratch<'_>,
    ) {
        let Some(passkey) = Passkey::parse(key) else {
            return self.fail(s.out, 200, connection, INVALID_PASSKEY);
        };
        match request.endpoint {
            Endpoint::Announce => {}
            // UNIT3D-Announce serves no scrape: nor do we, in private mode.
            _ => return self.fail(s.out, 200, connection, SCRAPES_NOT_SERVED),
        }
        let req = match parse_announce(request.query) {
            Ok(req) => req,
            Err(e) => return self.fail(s.out, e.status(), connection, e.reason()),
        };
        // UNIT3D-Announce serves compact answers only: the peer ids of a
        // private swarm are not handed out.
        if !req.compact {
            self.stats.refused.inc();
            return self.fail(s.out, 200, connection, COMPACT_ONLY);
        }
        // The client's own checks, before any lookup.
        let client = check_headers(request.browser_headers, request.user_agent)
            .and_then(|()| check_port(req.port, req.event));
        if let Err(refusal) = client {
            self.stats.refused.inc();
            return self.fail(s.out, 200, connection, &refusal.to_string());
        }
        let ip = request.real_ip.map_or(peer_ip, canonical_ip);
        let announce = self.announce_of(&req, ip);
        let account = PrivateAnnounce {
            info_hash: req.info_hash,
            peer_id: req.peer_id,
            passkey,
            ip,
            port: req.port,
            event: req.event,
            uploaded: req.uploaded,
            downloaded: req.downloaded,
            left: req.left,
            agent: Agent::new(request.user_agent.unwrap_or_default()),
            numwant: announce.numwant,
        };
        if self.shard.is_local(&announce.info_hash) {
            traffic.announces_local.inc();
        } else {
            traffic.announces_forwarded.inc();
        }
        let out = &mut *s.out;
        let routed =
            self.shard
                .private_announce(
                    PrivateRequest { announce, account },
                    |counts, peers| match counts {
                        Ok(counts) => self.write_private(out, connection, &req, counts, peers),
                        Err(PrivateRefused::Store(refused)) => {
                            self.write_announce(out, connection, &req, Err(refused), peers)
                        }
                        // As UNIT3D-Announce answers a torrent in
                        // moderation, or a stop from a peer it does not know.
                        Err(PrivateRefused::Site(refusal)) if refusal.is_critical_warning() => {
                            self.stats.refused.inc();
                            let (interval, reason) = (refusal.interval_secs(), refusal.reason());
                            write_response(out, 200, connection, |body| {
                                write_warning(body, interval, reason.as_bytes())
                            });
                        }
                        Err(PrivateRefused::Site(refusal)) => {
                            self.stats.refused.inc();
                            self.fail(out, 200, connection, &refusal.reason())
                        }
                    },
                );
        if let Err(e) = routed.await {
            self.route_failed(s.out, connection, e);
        }
    }

    /// An admitted announce's answer, with UNIT3D-Announce's keys:
    /// `downloaded` (the torrent's snatches) and `min interval` (the
    /// shortest wait not held back).
    fn write_private(
        &self,
        out: &mut Vec<u8>,
        connection: Connection,
        req: &AnnounceRequest<'_>,
        counts: PrivateCounts,
        peers: &AnswerPeers,
    ) {
        let warning = counts.warning.map(|w| w.reason());
        let answer = AnnounceResponse {
            interval: self.swarm.announce_interval_secs,
            min_interval: self.shard.private().and_then(|p| p.min_interval()),
            complete: counts.swarm.seeders,
            downloaded: Some(counts.times_completed),
            incomplete: counts.swarm.leechers,
            peers,
            compact: req.compact,
            no_peer_id: req.no_peer_id,
            warning: warning.as_deref().map(str::as_bytes),
        };
        write_response(out, 200, connection, |body| write_announce(body, &answer));
    }
}
