//! A store to and from the state file: each worker writes its torrents as a
//! section of the file when the tracker stops, and at start takes back the
//! torrents it owns, keeping only what an announce could have stored.
//!
//! A WebRTC torrent is saved as a record with no peers, holding only its
//! downloaded count: WebRTC peers are reached through their connections,
//! which do not outlive the process. The format stays as it was, and the
//! records are told apart by that alone: a BitTorrent torrent is saved only
//! with a live peer, and a tracker that knows no WebRTC skips a record
//! without live peers, so it reads the new files as it read the old.

use std::net::{IpAddr, SocketAddr};

use tracker_proto::{canonical_ip, is_peer_address, InfoHash, PeerId};

use crate::network_peers::NetworkPeers;
use crate::peers::Peer;
use crate::state::{SavedPeer, SavedTorrent, Section, StateError, StateFile, TorrentRecord};
use crate::store::{Quota, SwarmStore};
use crate::torrent::{AddressCap, Clocks, Restore, Torrent};

/// What `SwarmStore::restore` did with the torrents of a state file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Restored {
    /// Torrents created.
    pub torrents: usize,
    /// Peers stored.
    pub peers: usize,
    /// Peers left out because they expired (while the tracker was down, say).
    pub expired: usize,
    /// Peers left out by a limit (`max_torrents`, `max_peers_per_torrent`,
    /// `max_peers`, `max_peers_per_address`, `max_peers_per_network`).
    pub refused: usize,
    /// Peers left out because no announce could have stored them: port 0,
    /// an address of no single host (unspecified, broadcast, multicast), or
    /// an IPv4-mapped address in the IPv6 half.
    pub invalid: usize,
    /// WebRTC torrents created, with their downloaded counts and no peers
    /// (see `SwarmStore::rtc_restore`).
    pub rtc_torrents: usize,
}

impl Restored {
    pub fn add(&mut self, other: Restored) {
        self.torrents += other.torrents;
        self.peers += other.peers;
        self.expired += other.expired;
        self.refused += other.refused;
        self.invalid += other.invalid;
        self.rtc_torrents += other.rtc_torrents;
    }
}

impl SwarmStore {
    /// Writes every torrent with a live peer to `section`: its completed count
    /// and live peers, each with the wall-clock time of its last announce.
    /// `now` is the store's clock and `now_unix` the Unix time at that moment.
    /// A torrent without live peers is left out, as the cleaner would drop it.
    /// A WebRTC torrent is written as its downloaded count alone (see the
    /// module's comment), when it counts any.
    pub fn save(&self, now: u32, now_unix: u64, section: &mut Section) {
        for segment in 0..Self::SEGMENTS {
            self.save_segment(segment, now, now_unix, section);
        }
    }

    /// Writes the torrents of segment `segment` (0..`SEGMENTS`) as `save`
    /// does: a snapshot taken while serving saves one segment per step, so
    /// that no request waits behind more (a torrent is saved whole, in one
    /// step, so that its counts and peers agree).
    pub fn save_segment(&self, segment: usize, now: u32, now_unix: u64, section: &mut Section) {
        let Some(table) = self.segments.get(segment) else {
            return;
        };
        let clocks = Clocks {
            now,
            now_unix,
            timeout: self.limits.peer_timeout_secs,
        };
        let mut scratch = SavedTorrent::default();
        for (info_hash, torrent) in table.iter() {
            torrent.save(&clocks, &mut scratch);
            if scratch.v4.is_empty() && scratch.v6.is_empty() {
                continue;
            }
            scratch.info_hash = *info_hash;
            section.push(&scratch);
        }
        self.rtc_save_segment(segment, now, &mut scratch, section);
    }

    /// Stores the torrents of a state file that `keep` accepts (a worker keeps
    /// those it owns), as `restore` does each; on a damaged record, what was
    /// restored before it comes with the error.
    pub fn restore_file(
        &mut self,
        file: &StateFile<'_>,
        now: u32,
        now_unix: u64,
        keep: impl Fn(&InfoHash) -> bool,
    ) -> Result<Restored, (StateError, Restored)> {
        self.restore_file_as(file, now, now_unix, keep, |_| Quota::Counted)
    }

    /// `restore_file`, each peer's client counting against the limits per
    /// client or not as `quota` says (as its announces would).
    pub fn restore_file_as(
        &mut self,
        file: &StateFile<'_>,
        now: u32,
        now_unix: u64,
        keep: impl Fn(&InfoHash) -> bool,
        quota: impl Fn(IpAddr) -> Quota,
    ) -> Result<Restored, (StateError, Restored)> {
        let mut done = Restored::default();
        for record in file.records() {
            match record {
                Ok(record) if keep(&record.info_hash) => {
                    done.add(self.restore_as(&record, now, now_unix, &quota));
                }
                Ok(_) => {}
                Err(e) => return Err((e, done)),
            }
        }
        Ok(done)
    }

    /// Stores a torrent of a state file (any torrent: the caller decides which
    /// worker owns it). Peers whose last announce is a peer time-out or more
    /// before `now_unix` are left out, and so is a torrent with none left;
    /// so are peers that no announce could have stored (see `is_valid`);
    /// the limits hold as for announces, and a peer already stored is kept.
    /// A record with no peers at all is a WebRTC torrent's count (see
    /// `rtc_restore`).
    pub fn restore(&mut self, record: &TorrentRecord<'_>, now: u32, now_unix: u64) -> Restored {
        self.restore_as(record, now, now_unix, &|_| Quota::Counted)
    }

    fn restore_as(
        &mut self,
        record: &TorrentRecord<'_>,
        now: u32,
        now_unix: u64,
        quota: &dyn Fn(IpAddr) -> Quota,
    ) -> Restored {
        let clocks = Clocks {
            now,
            now_unix,
            timeout: self.limits.peer_timeout_secs,
        };
        let mut done = Restored::default();
        let (v4_live, v4_invalid) = count_live(record.v4.peers(), &clocks);
        let (v6_live, v6_invalid) = count_live(record.v6.peers(), &clocks);
        let live = v4_live + v6_live;
        done.invalid = v4_invalid + v6_invalid;
        done.expired = record.v4.len() + record.v6.len() - live - done.invalid;
        if record.v4.is_empty() && record.v6.is_empty() {
            let created = self.rtc_restore(&record.info_hash, record.completed, now);
            done.rtc_torrents = usize::from(created);
            return done;
        }
        if live == 0 {
            return done;
        }
        // Peers this worker may still take (`max_peers`, all torrents).
        let worker_room = self.limits.max_peers.saturating_sub(self.peers_held());
        let torrents = self.torrents + self.rtc.torrents();
        let (segment, hash) = self.locate(&record.info_hash);
        let networks = &mut self.networks;
        let table = &mut self.segments[segment];
        let torrent = match table.find(hash, &record.info_hash) {
            Some(pos) => table.value_mut(pos),
            None if torrents >= self.limits.max_torrents || worker_room == 0 || table.is_full() => {
                done.refused = live;
                return done;
            }
            None => {
                self.torrents += 1;
                done.torrents = 1;
                table.insert(hash, record.info_hash, Torrent::default())
            }
        };
        let before = torrent.counts();
        torrent.restore_completed(record.completed);
        let room = Room {
            per_torrent: self.limits.max_peers_per_torrent,
            in_worker: worker_room,
            per_address: [Quota::Counted, Quota::Exempt].map(|q| self.limits.address_cap(q)),
            per_network: [Quota::Counted, Quota::Exempt].map(|q| self.limits.network_cap(q)),
            peer_ids: self.limits.peer_ids,
        };
        let mut into = Storing {
            torrent,
            networks,
            done: &mut done,
        };
        restore_half(
            &mut into,
            record.v4.peers(),
            &clocks,
            room,
            quota,
            Torrent::restore_v4,
        );
        restore_half(
            &mut into,
            record.v6.peers(),
            &clocks,
            room,
            quota,
            Torrent::restore_v6,
        );
        let torrent = into.torrent;
        let after = torrent.counts();
        self.peers.replace(before, after);
        done
    }
}

/// How many more peers a restore may store.
#[derive(Clone, Copy)]
struct Room {
    /// `max_peers_per_torrent`.
    per_torrent: usize,
    /// What `max_peers` leaves for this worker, for the whole restore.
    in_worker: usize,
    /// `max_peers_per_address`, for a counted client and an exempt one.
    per_address: [AddressCap; 2],
    /// `max_peers_per_network`, for a counted client and an exempt one.
    per_network: [Option<usize>; 2],
    /// Keep the saved peer ids (`StoreLimits::peer_ids`).
    peer_ids: bool,
}

/// Whether a saved peer could have been stored by an announce: a peer's
/// address (`is_peer_address`), in the form an announce stores it
/// (`canonical_ip`: an IPv4 client is stored as IPv4 whichever socket it
/// came through, so no IPv4-mapped address is ever in an IPv6 half).
fn is_valid<I: Copy + Into<IpAddr>>(peer: &SavedPeer<I>) -> bool {
    let ip = peer.ip.into();
    canonical_ip(ip) == ip && is_peer_address(SocketAddr::new(ip, peer.port))
}

/// The saved peers that are valid and live, and those that are not valid.
fn count_live<I: Copy + Into<IpAddr>>(
    saved: impl Iterator<Item = (bool, SavedPeer<I>)>,
    clocks: &Clocks,
) -> (usize, usize) {
    saved.fold((0, 0), |(live, invalid), (_, p)| {
        if !is_valid(&p) {
            (live, invalid + 1)
        } else {
            (
                live + usize::from(clocks.expiry(p.last_seen).is_some()),
                invalid,
            )
        }
    })
}

/// How a torrent stores a restored peer of one family: `Torrent::restore_v4`
/// or `restore_v6` (the peer, its id if kept, whether it seeds, the cap on
/// its client).
type StorePeer<I> = fn(&mut Torrent, Peer<I>, Option<PeerId>, bool, AddressCap) -> Restore;

/// Where a restore stores a torrent's peers: the torrent, the counts per
/// network of its store, and what it counts of them.
struct Storing<'a> {
    torrent: &'a mut Torrent,
    networks: &'a mut NetworkPeers,
    done: &'a mut Restored,
}

/// Stores one address family's saved peers in `into` with `store`, the
/// expired and invalid ones left out, within `room`.
fn restore_half<I: Copy + Into<IpAddr>>(
    into: &mut Storing<'_>,
    saved: impl Iterator<Item = (bool, SavedPeer<I>)>,
    clocks: &Clocks,
    room: Room,
    quota: &dyn Fn(IpAddr) -> Quota,
    store: StorePeer<I>,
) {
    let Storing {
        torrent,
        networks,
        done,
    } = into;
    for (seeder, p) in saved {
        if !is_valid(&p) {
            continue;
        }
        let Some(expiry) = clocks.expiry(p.last_seen) else {
            continue;
        };
        let ip = p.ip.into();
        let exempt = usize::from(quota(ip) == Quota::Exempt);
        let held = torrent.counts();
        if (held.seeders + held.leechers) as usize >= room.per_torrent
            || done.peers >= room.in_worker
            || networks.is_full(ip, room.per_network[exempt])
        {
            done.refused += 1;
            continue;
        }
        let peer = Peer {
            ip: p.ip,
            port: p.port,
            expiry: expiry.with_completed(p.completed),
        };
        let id = room.peer_ids.then_some(p.peer_id);
        match store(torrent, peer, id, seeder, room.per_address[exempt]) {
            Restore::Stored => {
                done.peers += 1;
                networks.add(ip);
            }
            Restore::Present => {}
            Restore::AddressLimit => done.refused += 1,
        }
    }
}
