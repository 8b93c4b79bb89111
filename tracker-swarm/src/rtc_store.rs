//! The store's WebRTC side: announces, scrapes and closes of WebRTC peers,
//! and their part in each clean, save, restore and access-list step (the
//! tables themselves are `rtc`'s).

use crate::counts::{CleanReport, MemoryUse, PeerTotals, SwarmCounts};
use crate::expiry::Expiry;
use crate::refusal::{AnnounceRefused, Quota};
use crate::rtc::swarm::{RtcTorrent, Visit};
use crate::rtc::{ConnectionRef, RtcAnnounce};
use crate::state::{SavedTorrent, Section};
use crate::store::{Eviction, SwarmStore};
use crate::torrent::{Unstored, CLEAN_WINDOW};
use tracker_proto::{InfoHash, PeerId, ScrapeStats};

impl SwarmStore {
    /// Stores (or updates, or on `Stopped` removes) the announcing peer and,
    /// unless it stopped, appends to `receivers` up to `req.offers` distinct
    /// peers of the torrent drawn at random, each (peer_id, connection):
    /// live ones, none of the announcer's connection, and for a seeder
    /// leechers only (a seeder has nothing to gain from another). Returns the
    /// torrent's WebRTC counts after the announce.
    ///
    /// A peer is its peer id and its connection (see `rtc::swarm`): an id
    /// announced from another connection is another peer, never refused,
    /// so that no one who learnt a browser's id (offers carry them) can
    /// keep it out of a torrent by announcing the id there first.
    ///
    /// The limits are those of `announce_as`, shared with the BitTorrent
    /// side: `max_torrents` and `max_peers` count both kinds together, and a
    /// new torrent charges the same budgets. Only a store full of torrents
    /// differs: it refuses a new WebRTC torrent (`TorrentLimit`) rather than
    /// drop one for it (see `rtc_create`).
    pub fn rtc_announce(
        &mut self,
        req: &RtcAnnounce,
        now: u32,
        quota: Quota,
        receivers: &mut Vec<(PeerId, ConnectionRef)>,
    ) -> Result<SwarmCounts, AnnounceRefused> {
        let (segment, hash) = self.locate(&req.info_hash);
        let pos = match self.rtc.segments[segment].find(hash, &req.info_hash) {
            Some(pos) => pos,
            None => match self.rtc_create(req, segment, hash, now, quota)? {
                Some(pos) => pos,
                None => return Ok(SwarmCounts::default()),
            },
        };
        let store_room = self.limits.max_peers.saturating_sub(self.peers_held());
        let SwarmStore {
            rtc,
            limits,
            rng,
            stats,
            ..
        } = self;
        let torrent = rtc.segments[segment].value_mut(pos);
        let before = torrent.counts();
        let visit = Visit {
            req,
            now,
            expiry: Expiry::at(now.wrapping_add(limits.peer_timeout_secs)),
            per_torrent: limits.max_peers_per_torrent,
            store_room,
            per_address: limits.address_cap(quota),
        };
        match torrent.announce(&visit, rng, receivers) {
            None => {}
            Some(Unstored::NoRoom) => stats.unstored_peers += 1,
            Some(Unstored::AddressLimit) => stats.address_peers += 1,
            Some(Unstored::NetworkLimit) => stats.network_peers += 1,
        }
        let after = torrent.counts();
        rtc.peers.replace(before, after);
        Ok(after)
    }

    /// Creates the WebRTC torrent of `req`, which `segment` does not hold
    /// (its hash there is `hash`), within the limits; its position, or None
    /// when there is to be none (a stop, or no room for its peer).
    fn rtc_create(
        &mut self,
        req: &RtcAnnounce,
        segment: usize,
        hash: u32,
        now: u32,
        quota: Quota,
    ) -> Result<Option<usize>, AnnounceRefused> {
        // No torrent of either kind is dropped for a WebRTC one. Eviction
        // weighs a BitTorrent swarm by its peers' addresses, which tell one
        // client's torrents from a shared one's; a WebRTC swarm's would tell
        // little (browsers behind one NAT, one proxy), and dropping swarms
        // of one kind for the other would let either push the other out.
        let full = self.rtc.segments[segment].is_full();
        if !self.admit_torrent(req.event, req.ip, full, now, quota, Eviction::Refused)? {
            return Ok(None);
        }
        self.rtc.torrents += 1;
        let table = &mut self.rtc.segments[segment];
        let pos = table.len();
        table.insert(hash, req.info_hash, RtcTorrent::default());
        Ok(Some(pos))
    }

    /// The WebRTC counts of a torrent; zeros for one not stored.
    pub fn rtc_scrape(&self, info_hash: &InfoHash) -> ScrapeStats {
        let (segment, hash) = self.locate(info_hash);
        let table = self.rtc.segments.get(segment);
        table
            .and_then(|table| table.get(hash, info_hash))
            .map(RtcTorrent::scrape)
            .unwrap_or_default()
    }

    /// Appends the counts of up to `max` WebRTC torrents, in no set order,
    /// to `out` (a bounded full scrape, as `scrape_some` is for the
    /// BitTorrent side).
    pub fn rtc_scrape_some(&self, max: usize, out: &mut Vec<(InfoHash, ScrapeStats)>) {
        let torrents = self.rtc.segments.iter().flat_map(|segment| segment.iter());
        out.extend(
            torrents
                .take(max)
                .map(|(info_hash, torrent)| (*info_hash, torrent.scrape())),
        );
    }

    /// The connection closed: its peer `peer_id` leaves the torrent (a peer
    /// of that id of another connection stays). A torrent left without
    /// peers goes at its segment's next clean step.
    pub fn rtc_disconnected(
        &mut self,
        info_hash: &InfoHash,
        peer_id: &PeerId,
        connection: ConnectionRef,
    ) {
        let (segment, hash) = self.locate(info_hash);
        let Some(table) = self.rtc.segments.get_mut(segment) else {
            return;
        };
        let Some(pos) = table.find(hash, info_hash) else {
            return;
        };
        let torrent = table.value_mut(pos);
        let before = torrent.counts();
        if torrent.disconnect(peer_id, connection) {
            self.rtc.peers.replace(before, torrent.counts());
        }
    }

    /// WebRTC torrents stored (`torrent_count` counts the BitTorrent ones).
    pub fn rtc_torrent_count(&self) -> usize {
        self.rtc.torrents
    }

    /// Stored WebRTC peers of all torrents, expired ones until cleaned
    /// (`peer_count` counts the BitTorrent ones).
    pub fn rtc_peer_count(&self) -> PeerTotals {
        self.rtc.peers
    }

    /// `clean_segment` for the WebRTC torrents of segment `segment`: drops
    /// expired peers, and torrents left with none (but those restored and
    /// still waiting for their peers), leaving those of more than
    /// `CLEAN_WINDOW` peers to `rtc_clean_more`.
    pub(crate) fn rtc_clean_segment(&mut self, segment: usize, now: u32) -> CleanReport {
        let mut removed = CleanReport::default();
        let rtc = &mut self.rtc;
        let Some(table) = rtc.segments.get_mut(segment) else {
            return removed;
        };
        let pending = &mut rtc.clean_pending;
        table.retain(|info_hash, torrent| {
            if torrent.len() > CLEAN_WINDOW {
                pending.push(*info_hash);
                return true;
            }
            let before = torrent.counts();
            // Done in one step: it holds no more than a window.
            torrent.drop_expired(now);
            removed.count(before, torrent.counts());
            let keep = !torrent.is_done(now);
            removed.torrents += usize::from(!keep);
            keep
        });
        table.shrink();
        rtc.forget(removed);
        removed
    }

    /// `clean_more` for a large WebRTC torrent: one window of it.
    pub(crate) fn rtc_clean_more(&mut self, now: u32) -> CleanReport {
        let mut removed = CleanReport::default();
        let Some(&info_hash) = self.rtc.clean_pending.last() else {
            return removed;
        };
        let (segment, hash) = self.locate(&info_hash);
        let rtc = &mut self.rtc;
        let table = &mut rtc.segments[segment];
        // Gone already if an access list removed it in between.
        let Some(pos) = table.find(hash, &info_hash) else {
            rtc.clean_pending.pop();
            return removed;
        };
        let torrent = table.value_mut(pos);
        let before = torrent.counts();
        let done = torrent.drop_expired(now);
        removed.count(before, torrent.counts());
        if done {
            rtc.clean_pending.pop();
            if torrent.is_done(now) {
                table.remove_at(pos);
                removed.torrents += 1;
            }
        }
        rtc.forget(removed);
        removed
    }

    /// `retain_torrents` for the WebRTC torrents of segment `segment`.
    pub(crate) fn rtc_retain(
        &mut self,
        segment: usize,
        mut keep: impl FnMut(&InfoHash) -> bool,
    ) -> CleanReport {
        let mut removed = CleanReport::default();
        let Some(table) = self.rtc.segments.get_mut(segment) else {
            return removed;
        };
        table.retain(|info_hash, torrent| {
            if keep(info_hash) {
                return true;
            }
            removed.torrents += 1;
            removed.count(torrent.counts(), SwarmCounts::default());
            false
        });
        table.shrink();
        self.rtc.forget(removed);
        removed
    }

    /// Writes the WebRTC torrents of segment `segment` that the state file
    /// keeps to `section`: each as a record with no peers and its downloaded
    /// count (see `persist`), using `scratch`. Their peers are never saved:
    /// a connection does not outlive the process.
    pub(crate) fn rtc_save_segment(
        &self,
        segment: usize,
        now: u32,
        scratch: &mut SavedTorrent,
        section: &mut Section,
    ) {
        let Some(table) = self.rtc.segments.get(segment) else {
            return;
        };
        for (info_hash, torrent) in table.iter() {
            let Some(downloaded) = torrent.saved_count(now) else {
                continue;
            };
            scratch.clear();
            scratch.info_hash = *info_hash;
            scratch.completed = downloaded;
            section.push(scratch);
        }
    }

    /// Restores a WebRTC torrent's `downloaded` count from a record of the
    /// state file with no peers: as a torrent without peers, kept for a peer
    /// time-out for its browsers to announce again, then cleaned as any
    /// empty torrent is. The larger count if it is held already. Whether it
    /// created a torrent (not past `max_torrents`).
    pub(crate) fn rtc_restore(&mut self, info_hash: &InfoHash, downloaded: u32, now: u32) -> bool {
        if downloaded == 0 {
            return false;
        }
        let held_until = Expiry::at(now.wrapping_add(self.limits.peer_timeout_secs));
        let full = self.torrents + self.rtc.torrents >= self.limits.max_torrents;
        let (segment, hash) = self.locate(info_hash);
        let table = &mut self.rtc.segments[segment];
        match table.find(hash, info_hash) {
            Some(pos) => {
                table
                    .value_mut(pos)
                    .restore_again(downloaded, held_until, now);
                false
            }
            None if full || table.is_full() => false,
            None => {
                table.insert(
                    hash,
                    *info_hash,
                    RtcTorrent::restored(downloaded, held_until),
                );
                self.rtc.torrents += 1;
                true
            }
        }
    }

    /// Adds what the WebRTC side holds to `memory.rtc`.
    pub(crate) fn rtc_memory(&self, memory: &mut MemoryUse) {
        for table in self.rtc.segments.iter() {
            memory.rtc += table.bytes();
            for (_, torrent) in table.iter() {
                torrent.add_memory(memory);
            }
        }
    }

    /// Whether it holds a WebRTC torrent for `info_hash` (one without peers,
    /// left for the cleaner, included).
    #[cfg(test)]
    pub(crate) fn rtc_holds(&self, info_hash: &InfoHash) -> bool {
        let (segment, hash) = self.locate(info_hash);
        self.rtc.segments[segment].find(hash, info_hash).is_some()
    }

    /// Asserts the invariants of every WebRTC torrent (see
    /// `RtcTorrent::check_invariants`) and the totals.
    #[cfg(test)]
    pub(crate) fn rtc_check_invariants(&self) {
        let mut totals = PeerTotals::default();
        let mut torrents = 0;
        for table in self.rtc.segments.iter() {
            for (_, torrent) in table.iter() {
                torrent.check_invariants();
                let counts = torrent.counts();
                totals.seeders += counts.seeders as usize;
                totals.leechers += counts.leechers as usize;
                torrents += 1;
            }
        }
        assert_eq!((torrents, totals), (self.rtc.torrents, self.rtc.peers));
    }

    /// The WebRTC peers of a torrent, leechers first, each with its
    /// connection and whether it seeds.
    #[cfg(test)]
    pub(crate) fn rtc_peers(&self, info_hash: &InfoHash) -> Vec<(PeerId, ConnectionRef, bool)> {
        let (segment, hash) = self.locate(info_hash);
        self.rtc.segments[segment]
            .get(hash, info_hash)
            .map(RtcTorrent::peer_list)
            .unwrap_or_default()
    }
}
