//! The answer to one request: an announce or a scrape (full or not) from
//! this worker's shard or its owner's, or a failure reason.

use super::*;

impl HttpService {
    /// Appends the answer to one request.
    pub(super) async fn answer(
        &self,
        request: &Request<'_>,
        connection: Connection,
        peer_ip: IpAddr,
        traffic: &HttpTraffic,
        s: Scratch<'_>,
    ) {
        // Keys in paths are private mode's, and private mode has no others;
        // a public tracker has no such URLs, as before they were read.
        match (request.key, self.shard.private().is_some()) {
            (None, false) => {}
            (Some(key), true) => {
                return self
                    .private_request(request, key, connection, peer_ip, traffic, s)
                    .await
            }
            _ => {
                self.stats.not_found.inc();
                let e = RequestError::NotFound;
                return self.fail(s.out, e.status(), connection, e.reason());
            }
        }
        match request.endpoint {
            Endpoint::Announce => match parse_announce(request.query) {
                Ok(announce) => {
                    let ip = request.real_ip.map_or(peer_ip, canonical_ip);
                    self.announce(&announce, ip, connection, traffic, s.out)
                        .await;
                }
                Err(e) => self.fail(s.out, e.status(), connection, e.reason()),
            },
            Endpoint::Scrape => {
                match parse_scrape(request.query, self.config.max_scrape_hashes, s.hashes) {
                    Ok(()) => self.scrape(connection, s).await,
                    Err(e) => self.fail(s.out, e.status(), connection, e.reason()),
                }
            }
            // Upgrades are taken before any answer (see `connection`).
            Endpoint::WebSocket => {
                let e = RequestError::NotFound;
                self.fail(s.out, e.status(), connection, e.reason())
            }
        }
    }

    pub(super) async fn announce(
        &self,
        req: &AnnounceRequest<'_>,
        ip: IpAddr,
        connection: Connection,
        traffic: &HttpTraffic,
        out: &mut Vec<u8>,
    ) {
        let announce = self.announce_of(req, ip);
        if self.shard.is_local(&announce.info_hash) {
            traffic.announces_local.inc();
        } else {
            traffic.announces_forwarded.inc();
        }
        let routed = self.shard.announce(announce, |counts, peers| {
            self.write_announce(out, connection, req, counts, peers)
        });
        if let Err(e) = routed.await {
            self.route_failed(out, connection, e);
        }
    }

    /// The swarm's part of an HTTP announce from `ip`.
    pub(super) fn announce_of(&self, req: &AnnounceRequest<'_>, ip: IpAddr) -> Announce {
        Announce {
            info_hash: req.info_hash,
            peer_id: req.peer_id,
            peer_addr: SocketAddr::new(ip, req.port),
            event: req.event,
            left: req.left,
            // HTTP has no datagram to fit: only swarm.max_numwant caps it.
            numwant: self.swarm.numwant(req.numwant, u32::MAX),
            peer_ids: !req.compact && !req.no_peer_id,
        }
    }

    pub(super) fn write_announce(
        &self,
        out: &mut Vec<u8>,
        connection: Connection,
        req: &AnnounceRequest<'_>,
        counts: Result<SwarmCounts, AnnounceRefused>,
        peers: &AnswerPeers,
    ) {
        match counts {
            Ok(SwarmCounts { seeders, leechers }) => {
                let answer = AnnounceResponse {
                    interval: self.swarm.announce_interval_secs,
                    min_interval: None,
                    complete: seeders,
                    downloaded: None,
                    incomplete: leechers,
                    peers,
                    compact: req.compact,
                    no_peer_id: req.no_peer_id,
                    warning: None,
                };
                write_response(out, 200, connection, |body| write_announce(body, &answer));
            }
            Err(refused) => {
                match refused {
                    AnnounceRefused::NotAllowed => self.stats.not_allowed.inc(),
                    AnnounceRefused::TorrentLimit | AnnounceRefused::AddressBudget(_) => {
                        self.stats.refused.inc()
                    }
                }
                self.fail(out, 200, connection, refused.reason());
            }
        }
    }

    pub(super) async fn scrape(&self, connection: Connection, s: Scratch<'_>) {
        if s.hashes.is_empty() {
            // A full scrape: the codec reads no info_hash as asking for one.
            return self.full_scrape(connection, s).await;
        }
        s.files.clear();
        if s.hashes.iter().all(|h| self.shard.is_local(h)) {
            s.files
                .extend(s.hashes.iter().map(|h| (*h, self.shard.scrape_local(h))));
        } else {
            if let Err(e) = self.shard.scrape(s.hashes, s.stats).await {
                return self.route_failed(s.out, connection, e);
            }
            s.files
                .extend(s.hashes.iter().copied().zip(s.stats.iter().copied()));
        }
        write_response(s.out, 200, connection, |body| write_scrape(body, s.files));
    }

    async fn full_scrape(&self, connection: Connection, s: Scratch<'_>) {
        if !self.config.full_scrape {
            return self.fail(
                s.out,
                200,
                connection,
                "full scrape is disabled: give info_hash",
            );
        }
        self.stats.full_scrapes.inc();
        s.files.clear();
        if let Err(e) = self
            .shard
            .scrape_some(self.config.full_scrape_max_torrents, s.files)
            .await
        {
            return self.route_failed(s.out, connection, e);
        }
        write_response(s.out, 200, connection, |body| write_scrape(body, s.files));
    }

    pub(super) fn route_failed(&self, out: &mut Vec<u8>, connection: Connection, e: RouteError) {
        let (status, reason) = match e {
            RouteError::Overloaded => (503, "tracker overloaded: try again later"),
            RouteError::OwnerGone => (503, "tracker is stopping"),
            RouteError::Failed => {
                self.stats.failed_at_owner.inc();
                return self.fail(out, 500, connection, INTERNAL_ERROR);
            }
        };
        self.stats.overloaded.inc();
        self.fail(out, status, connection, reason);
    }

    pub(super) fn fail(
        &self,
        out: &mut Vec<u8>,
        status: u16,
        connection: Connection,
        reason: &str,
    ) {
        self.stats.failures.inc();
        write_response(out, status, connection, |body| {
            write_failure(body, reason.as_bytes())
        });
    }
}

/// The parts of a connection's state that one request's answer works in (all
/// but the read buffer, which the request borrows).
pub(super) struct Scratch<'a> {
    pub(super) out: &'a mut Vec<u8>,
    pub(super) hashes: &'a mut Vec<InfoHash>,
    pub(super) stats: &'a mut Vec<ScrapeStats>,
    pub(super) files: &'a mut Vec<(InfoHash, ScrapeStats)>,
}
