//! An executable model of UNIT3D-Announce's accounting, written from its
//! source at HDInnovations/UNIT3D-Announce 946b6e7 (`src/announce.rs`,
//! `src/scheduler.rs`, `src/scheduler/*_update.rs`, `src/tracker/peer.rs`),
//! for the property tests that hold our ledger, settle and flush against
//! it (`model_tests.rs`).
//!
//! One tracker, running continuously: its torrents in memory with their
//! peers keyed by (user, peer id), each announce handled as
//! `announce::announce` handles it, the queues the announce fills and what
//! their flush leaves in the database, and the reaper. Pure and
//! deterministic: the peer list is given as the peers it is drawn from
//! (UNIT3D-Announce draws a random subset of them, up to `numwant`).
//!
//! Left out, as they change no byte credited: the client checks (headers,
//! user agent, blacklists, ports), moderation states, connectivity checks,
//! announce logging, the answer's random interval. Seedtime is not
//! modelled: UNIT3D-Announce computes it in SQL at each flush from the
//! history row's `updated_at` and the flush's clock, so it depends on when
//! flushes run, not on the announces alone. Times are microseconds of a
//! clock the caller advances (UNIT3D-Announce reads `Utc::now()`); the
//! database's rows keep whole seconds.

use crate::site::{GroupId, Passkey, SiteRecords, TorrentId, UserId};
use std::collections::{BTreeMap, BTreeSet};
use std::net::{IpAddr, SocketAddr};
use tracker_proto::{AnnounceEvent, InfoHash, PeerId};

/// UNIT3D-Announce's `.env` settings that bear on accounting.
#[derive(Clone, Copy, Debug)]
pub struct ModelConfig {
    /// `UPLOAD_FACTOR`, `DOWNLOAD_FACTOR` (percent).
    pub upload_factor: u8,
    pub download_factor: u8,
    /// `MAX_PEERS_PER_TORRENT_PER_USER`.
    pub max_peers_per_torrent_per_user: u16,
    /// `ACTIVE_PEER_TTL`, `INACTIVE_PEER_TTL` (seconds).
    pub active_peer_ttl: u64,
    pub inactive_peer_ttl: u64,
    /// `ANNOUNCE_MIN` (seconds): a peer announcing again sooner is warned
    /// "Rate limit exceeded" and handed no peers.
    pub announce_min: u64,
    /// `NUMWANT_DEFAULT`, `NUMWANT_MAX`.
    pub numwant_default: usize,
    pub numwant_max: usize,
}

impl Default for ModelConfig {
    /// `.env.example`'s values.
    fn default() -> ModelConfig {
        ModelConfig {
            upload_factor: 100,
            download_factor: 100,
            max_peers_per_torrent_per_user: 3,
            active_peer_ttl: 7200,
            inactive_peer_ttl: 1_814_400,
            announce_min: 1800,
            numwant_default: 25,
            numwant_max: 50,
        }
    }
}

/// One announce as UNIT3D-Announce parses it (the address is the
/// connection's or the proxy header's).
#[derive(Clone, Copy, Debug)]
pub struct ModelAnnounce {
    pub passkey: Passkey,
    pub info_hash: InfoHash,
    pub peer_id: PeerId,
    pub ip: IpAddr,
    pub port: u16,
    pub event: AnnounceEvent,
    pub uploaded: u64,
    pub downloaded: u64,
    pub left: u64,
    /// None: the query had no `numwant`.
    pub numwant: Option<usize>,
}

/// The refusals that bear on accounting: a refused announce changes
/// nothing and is credited nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelRefusal {
    PasskeyNotFound,
    UserNotFound,
    InfoHashNotFound,
    DownloadPrivilegesRevoked,
    GroupNotFound,
    /// Group `banned`, `validating` or `disabled`.
    GroupNotEnabled,
    /// "Stopped peer doesn't exist.": a stop of a peer not in memory.
    StoppedPeerDoesntExist,
    /// "You already have {max} peers on this torrent. Ignoring."
    PeersPerTorrentPerUserLimit(u16),
}

/// The answer's warning: no peers are handed out with one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ModelWarning {
    /// "Rate limit exceeded. Please wait."
    RateLimit,
    /// "Download slot limit reached.": the peer is not visible, which a
    /// stopped peer never is, so every `stopped` answer carries it.
    DownloadSlotLimit,
}

/// A peer as a peer list carries it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Listed {
    pub user_id: UserId,
    pub peer_id: PeerId,
    pub addr: SocketAddr,
}

/// What one admitted announce did.
#[derive(Clone, Debug)]
pub struct ModelAnswer {
    /// The answer's `complete`, `incomplete` and `downloaded`: the
    /// torrent's counts after this announce.
    pub seeders: u32,
    pub leechers: u32,
    pub times_completed: u32,
    pub warning: Option<ModelWarning>,
    /// The peers the answer's seeds are drawn from (a random
    /// `numwant` of them), then its leechers (a random `numwant` less the
    /// seeds drawn); both empty when no list is handed out.
    pub seeds: Vec<Listed>,
    pub leeches: Vec<Listed>,
    pub numwant: usize,
    /// The peer is visible (in the lists and counts).
    pub visible: bool,
    /// Raw bytes this announce counts, and credited after the factors.
    pub uploaded_delta: u64,
    pub downloaded_delta: u64,
    pub credited_uploaded: u64,
    pub credited_downloaded: u64,
    pub upload_factor: u16,
    pub download_factor: u16,
}

impl ModelAnswer {
    /// Every peer the answer may carry.
    pub fn candidates(&self) -> impl Iterator<Item = &Listed> {
        self.seeds.iter().chain(&self.leeches)
    }
}

/// A peer in memory (`tracker::Peer`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelPeer {
    pub ip: IpAddr,
    pub port: u16,
    pub is_seeder: bool,
    pub is_active: bool,
    pub is_visible: bool,
    /// Microseconds.
    pub updated_at: u64,
    pub uploaded: u64,
    pub downloaded: u64,
}

impl ModelPeer {
    fn in_peer_list(&self) -> bool {
        self.is_active && self.is_visible
    }

    fn in_seed_list(&self) -> bool {
        self.is_seeder && self.in_peer_list()
    }

    fn in_leech_list(&self) -> bool {
        !self.is_seeder && self.in_peer_list()
    }

    fn listed(&self, user_id: UserId, peer_id: PeerId) -> Listed {
        Listed {
            user_id,
            peer_id,
            addr: SocketAddr::new(self.ip, self.port),
        }
    }
}

#[derive(Clone, Debug, Default)]
struct ModelTorrent {
    upload_factor: u8,
    download_factor: u8,
    /// Counts kept by the announces' deltas and the reaper, saturating at 0
    /// (not recounted from the peers).
    seeders: u32,
    leechers: u32,
    times_completed: u32,
    peers: BTreeMap<(UserId, PeerId), ModelPeer>,
}

#[derive(Clone, Debug)]
struct ModelUser {
    group_id: GroupId,
    can_download: bool,
    /// Visible active seeding and leeching peers, over every torrent.
    num_seeding: u32,
    num_leeching: u32,
}

#[derive(Clone, Debug)]
struct ModelGroup {
    slug: String,
    download_slots: Option<u32>,
    is_immune: bool,
    upload_factor: u8,
    download_factor: u8,
}

/// A `history` row as flushes leave it (seedtime left out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ModelHistory {
    pub uploaded: u64,
    pub actual_uploaded: u64,
    pub client_uploaded: u64,
    pub downloaded: u64,
    pub actual_downloaded: u64,
    pub client_downloaded: u64,
    pub seeder: bool,
    pub active: bool,
    pub immune: bool,
    /// Seconds.
    pub completed_at: Option<u64>,
}

/// A `peers` row as flushes leave it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ModelPeerRow {
    pub ip: IpAddr,
    pub port: u16,
    pub uploaded: u64,
    pub downloaded: u64,
    pub left: u64,
    pub active: bool,
    pub seeder: bool,
    pub visible: bool,
    /// Seconds.
    pub updated_at: u64,
}

/// A queued history change (`history_update::HistoryUpdate`).
#[derive(Clone, Copy, Debug)]
struct HistoryUpdate {
    is_active: bool,
    is_seeder: bool,
    is_immune: bool,
    uploaded: u64,
    downloaded: u64,
    uploaded_delta: u64,
    downloaded_delta: u64,
    credited_uploaded_delta: u64,
    credited_downloaded_delta: u64,
    completed_at: Option<u64>,
}

/// The database as the model's flushes leave it.
#[derive(Clone, Debug, Default)]
pub struct ModelDb {
    pub history: BTreeMap<(UserId, TorrentId), ModelHistory>,
    pub peers: BTreeMap<(UserId, TorrentId, PeerId), ModelPeerRow>,
    /// `users.uploaded`, `users.downloaded` (credited).
    pub users: BTreeMap<UserId, (u64, u64)>,
    /// `torrents.seeders`, `leechers`, `times_completed`, added to.
    pub torrents: BTreeMap<TorrentId, (i64, i64, u64)>,
}

/// UNIT3D-Announce with its queues and database.
#[derive(Clone, Debug)]
pub struct Unit3dModel {
    config: ModelConfig,
    /// By the passkey's bytes.
    passkeys: BTreeMap<[u8; 32], UserId>,
    users: BTreeMap<UserId, ModelUser>,
    groups: BTreeMap<GroupId, ModelGroup>,
    info_hashes: BTreeMap<InfoHash, TorrentId>,
    torrents: BTreeMap<TorrentId, ModelTorrent>,
    featured: BTreeSet<TorrentId>,
    tokens: BTreeSet<(UserId, TorrentId)>,
    personal_freeleech: BTreeSet<UserId>,
    history_queue: BTreeMap<(UserId, TorrentId), HistoryUpdate>,
    peer_queue: BTreeMap<(UserId, TorrentId, PeerId), ModelPeerRow>,
    user_queue: BTreeMap<UserId, (u64, u64)>,
    torrent_queue: BTreeMap<TorrentId, (i64, i64, u64)>,
    pub db: ModelDb,
}

/// `factor * delta / 100`, as UNIT3D-Announce computes it in `u64` (whose
/// overflow, past 92 PB at 200 percent, is out of reach here).
fn credit(factor: u16, delta: u64) -> u64 {
    let bytes = u128::from(factor) * u128::from(delta) / 100;
    u64::try_from(bytes).unwrap_or(u64::MAX)
}

fn add_signed(count: u32, delta: i32) -> u32 {
    count.saturating_add_signed(delta)
}

impl Unit3dModel {
    /// The site as UNIT3D-Announce loads it at start, with no peers.
    pub fn new(records: &SiteRecords, config: ModelConfig) -> Unit3dModel {
        let users = records.users.iter().map(|u| {
            let user = ModelUser {
                group_id: u.group_id,
                can_download: u.can_download,
                num_seeding: 0,
                num_leeching: 0,
            };
            (u.id, user)
        });
        // Its queries turn the flags into factors.
        let groups = records.groups.iter().map(|g| {
            let group = ModelGroup {
                slug: g.slug.clone(),
                download_slots: g.download_slots,
                is_immune: g.is_immune,
                upload_factor: if g.is_double_upload { 200 } else { 100 },
                download_factor: if g.is_freeleech { 0 } else { 100 },
            };
            (g.id, group)
        });
        let torrents = records.torrents.iter().map(|t| {
            let torrent = ModelTorrent {
                upload_factor: t.upload_factor,
                download_factor: t.download_factor,
                times_completed: t.times_completed,
                ..ModelTorrent::default()
            };
            (t.id, torrent)
        });
        Unit3dModel {
            config,
            passkeys: records.users.iter().map(|u| (u.passkey.0, u.id)).collect(),
            users: users.collect(),
            groups: groups.collect(),
            info_hashes: records
                .torrents
                .iter()
                .map(|t| (t.info_hash, t.id))
                .collect(),
            torrents: torrents.collect(),
            featured: records.featured.iter().copied().collect(),
            tokens: records.tokens.iter().copied().collect(),
            personal_freeleech: records.personal_freeleech.iter().copied().collect(),
            history_queue: BTreeMap::new(),
            peer_queue: BTreeMap::new(),
            user_queue: BTreeMap::new(),
            torrent_queue: BTreeMap::new(),
            db: ModelDb::default(),
        }
    }

    /// A peer as memory holds it (active or not), if it does.
    pub fn peer(&self, torrent: TorrentId, user: UserId, peer_id: &PeerId) -> Option<&ModelPeer> {
        self.torrents.get(&torrent)?.peers.get(&(user, *peer_id))
    }

    /// The torrent's counts in memory: (seeders, leechers).
    pub fn counts(&self, torrent: TorrentId) -> (u32, u32) {
        self.torrents
            .get(&torrent)
            .map_or((0, 0), |t| (t.seeders, t.leechers))
    }

    /// The user's (seeding, leeching) counts in memory.
    pub fn user_counts(&self, user: UserId) -> (u32, u32) {
        self.users
            .get(&user)
            .map_or((0, 0), |u| (u.num_seeding, u.num_leeching))
    }

    /// One announce at `now_us`, as `announce::announce` handles it.
    pub fn announce(
        &mut self,
        a: &ModelAnnounce,
        now_us: u64,
    ) -> Result<ModelAnswer, ModelRefusal> {
        let stopped = a.event == AnnounceEvent::Stopped;
        let numwant = if stopped {
            0
        } else {
            a.numwant
                .unwrap_or(self.config.numwant_default)
                .min(self.config.numwant_max)
        };
        // Its order: the passkey's and the user's lookups are read first
        // but reported after the torrent's.
        let user_id = self.passkeys.get(&a.passkey.0).copied();
        let torrent_id = *self
            .info_hashes
            .get(&a.info_hash)
            .ok_or(ModelRefusal::InfoHashNotFound)?;
        let user_id = user_id.ok_or(ModelRefusal::PasskeyNotFound)?;
        let user = self
            .users
            .get(&user_id)
            .cloned()
            .ok_or(ModelRefusal::UserNotFound)?;
        if !user.can_download && a.left != 0 {
            return Err(ModelRefusal::DownloadPrivilegesRevoked);
        }
        let group = self
            .groups
            .get(&user.group_id)
            .cloned()
            .ok_or(ModelRefusal::GroupNotFound)?;
        if matches!(group.slug.as_str(), "banned" | "validating" | "disabled") {
            return Err(ModelRefusal::GroupNotEnabled);
        }
        let Some(torrent) = self.torrents.get_mut(&torrent_id) else {
            return Err(ModelRefusal::InfoHashNotFound);
        };
        // The user's leeching count as the announce began: a new leecher
        // past the group's slots is kept out of the lists.
        let has_hit_download_slot_limit =
            a.left > 0 && group.download_slots.is_some_and(|s| s <= user.num_leeching);
        let key = (user_id, a.peer_id);
        let seeder_delta: i32;
        let leecher_delta: i32;
        let times_completed_delta: u32;
        let uploaded_delta: u64;
        let downloaded_delta: u64;
        let is_visible: bool;
        let mut previous_update: Option<u64> = None;
        if stopped {
            let peer = torrent
                .peers
                .remove(&key)
                .ok_or(ModelRefusal::StoppedPeerDoesntExist)?;
            // A stop judges each counter on its own.
            uploaded_delta = a.uploaded.saturating_sub(peer.uploaded);
            downloaded_delta = a.downloaded.saturating_sub(peer.downloaded);
            leecher_delta = -i32::from(peer.in_leech_list());
            seeder_delta = -i32::from(peer.in_seed_list());
            times_completed_delta = 0;
            is_visible = false;
        } else {
            let old = torrent.peers.get(&key).copied();
            let new = match old {
                Some(mut peer) => {
                    peer.ip = a.ip;
                    peer.port = a.port;
                    peer.is_seeder = a.left == 0;
                    // Read with the new seeding flag and the old activity
                    // and visibility: a visible active peer that is now a
                    // leecher keeps its place whatever its slots (a seeder
                    // turning leecher included).
                    peer.is_visible = peer.in_leech_list() || !has_hit_download_slot_limit;
                    peer.is_active = true;
                    peer.updated_at = now_us;
                    peer.uploaded = a.uploaded;
                    peer.downloaded = a.downloaded;
                    peer
                }
                None => ModelPeer {
                    ip: a.ip,
                    port: a.port,
                    is_seeder: a.left == 0,
                    is_active: true,
                    is_visible: !has_hit_download_slot_limit,
                    updated_at: now_us,
                    uploaded: a.uploaded,
                    downloaded: a.downloaded,
                },
            };
            torrent.peers.insert(key, new);
            is_visible = new.is_visible;
            match old {
                Some(old) => {
                    leecher_delta = i32::from(new.in_leech_list()) - i32::from(old.in_leech_list());
                    seeder_delta = i32::from(new.in_seed_list()) - i32::from(old.in_seed_list());
                    // Any leecher-to-seeder flip of any peer, inactive
                    // ones included.
                    times_completed_delta = u32::from(new.is_seeder && !old.is_seeder);
                    // Either counter back: a restarted session, both 0.
                    if a.uploaded < old.uploaded || a.downloaded < old.downloaded {
                        uploaded_delta = 0;
                        downloaded_delta = 0;
                    } else {
                        uploaded_delta = a.uploaded - old.uploaded;
                        downloaded_delta = a.downloaded - old.downloaded;
                    }
                    previous_update = Some(old.updated_at);
                }
                None => {
                    // The limit counts the user's visible active peers,
                    // the new one among them once inserted: N admits N - 1
                    // visible peers besides a new visible one. A hidden
                    // new peer does not count itself.
                    let mut peer_count: u16 = 0;
                    for ((owner, _), peer) in &torrent.peers {
                        if *owner == user_id && peer.in_peer_list() {
                            peer_count += 1;
                            if peer_count >= self.config.max_peers_per_torrent_per_user {
                                torrent.peers.remove(&key);
                                return Err(ModelRefusal::PeersPerTorrentPerUserLimit(
                                    self.config.max_peers_per_torrent_per_user,
                                ));
                            }
                        }
                    }
                    leecher_delta = i32::from(new.in_leech_list());
                    seeder_delta = i32::from(new.in_seed_list());
                    times_completed_delta = 0;
                    // A new peer is credited nothing.
                    uploaded_delta = 0;
                    downloaded_delta = 0;
                }
            }
        }

        torrent.seeders = add_signed(torrent.seeders, seeder_delta);
        torrent.leechers = add_signed(torrent.leechers, leecher_delta);
        torrent.times_completed = torrent
            .times_completed
            .saturating_add(times_completed_delta);

        let announce_min_us = self.config.announce_min.saturating_mul(1_000_000);
        let warning = if previous_update.is_some_and(|then| then + announce_min_us > now_us) {
            Some(ModelWarning::RateLimit)
        } else if !is_visible {
            Some(ModelWarning::DownloadSlotLimit)
        } else {
            None
        };

        let (mut seeds, mut leeches) = (Vec::new(), Vec::new());
        // Lists only for a peer staying, unwarned, where there are
        // leechers (itself counted).
        if !stopped && torrent.leechers > 0 && warning.is_none() {
            let valid = torrent
                .peers
                .iter()
                .filter(|((owner, _), peer)| *owner != user_id && peer.in_peer_list());
            if a.left > 0 && torrent.seeders > 0 && numwant > 0 {
                seeds = valid
                    .clone()
                    .filter(|(_, peer)| peer.is_seeder)
                    .map(|((owner, id), peer)| peer.listed(*owner, *id))
                    .collect();
            }
            if numwant > seeds.len().min(numwant) {
                leeches = valid
                    .filter(|(_, peer)| !peer.is_seeder)
                    .map(|((owner, id), peer)| peer.listed(*owner, *id))
                    .collect();
            }
        }
        let (seeders, leechers, times_completed) =
            (torrent.seeders, torrent.leechers, torrent.times_completed);

        let mut upload_factor = u16::from(self.config.upload_factor)
            .max(u16::from(group.upload_factor))
            .max(u16::from(torrent.upload_factor));
        let mut download_factor = u16::from(self.config.download_factor)
            .min(u16::from(group.download_factor))
            .min(u16::from(torrent.download_factor));
        let featured = self.featured.contains(&torrent_id);
        if self.personal_freeleech.contains(&user_id)
            || self.tokens.contains(&(user_id, torrent_id))
            || featured
        {
            download_factor = 0;
        }
        if featured {
            upload_factor = 200;
        }
        let credited_uploaded = credit(upload_factor, uploaded_delta);
        let credited_downloaded = credit(download_factor, downloaded_delta);

        if seeder_delta != 0 || leecher_delta != 0 {
            if let Some(u) = self.users.get_mut(&user_id) {
                u.num_seeding = add_signed(u.num_seeding, seeder_delta);
                u.num_leeching = add_signed(u.num_leeching, leecher_delta);
            }
        }
        let now_secs = now_us / 1_000_000;
        // The peer's row: replaced whole by its latest announce.
        self.peer_queue.insert(
            (user_id, torrent_id, a.peer_id),
            ModelPeerRow {
                ip: a.ip,
                port: a.port,
                uploaded: a.uploaded,
                downloaded: a.downloaded,
                left: a.left,
                active: !stopped,
                seeder: a.left == 0,
                visible: is_visible,
                updated_at: now_secs,
            },
        );
        let update = HistoryUpdate {
            is_active: !stopped,
            is_seeder: a.left == 0,
            is_immune: group.is_immune,
            uploaded: a.uploaded,
            downloaded: a.downloaded,
            uploaded_delta,
            downloaded_delta,
            credited_uploaded_delta: credited_uploaded,
            credited_downloaded_delta: credited_downloaded,
            completed_at: (a.event == AnnounceEvent::Completed).then_some(now_secs),
        };
        self.history_queue
            .entry((user_id, torrent_id))
            .and_modify(|queued| {
                // Deltas added; the rest assigned, `completed_at` too (a
                // later announce in the same flush clears it); immunity
                // kept from the first.
                queued.is_active = update.is_active;
                queued.is_seeder = update.is_seeder;
                queued.uploaded = update.uploaded;
                queued.downloaded = update.downloaded;
                queued.uploaded_delta += update.uploaded_delta;
                queued.downloaded_delta += update.downloaded_delta;
                queued.credited_uploaded_delta += update.credited_uploaded_delta;
                queued.credited_downloaded_delta += update.credited_downloaded_delta;
                queued.completed_at = update.completed_at;
            })
            .or_insert(update);
        if credited_uploaded != 0 || credited_downloaded != 0 {
            // `IndexMap::insert`: the user's queued credit is replaced, not
            // added to, so `users` gets only the last credited announce of
            // each user per flush.
            self.user_queue
                .insert(user_id, (credited_uploaded, credited_downloaded));
        }
        if seeder_delta != 0 || leecher_delta != 0 || times_completed_delta != 0 {
            let queued = self.torrent_queue.entry(torrent_id).or_default();
            queued.0 += i64::from(seeder_delta);
            queued.1 += i64::from(leecher_delta);
            queued.2 += u64::from(times_completed_delta);
        }

        Ok(ModelAnswer {
            seeders,
            leechers,
            times_completed,
            warning,
            seeds,
            leeches,
            numwant,
            visible: is_visible,
            uploaded_delta,
            downloaded_delta,
            credited_uploaded,
            credited_downloaded,
            upload_factor,
            download_factor,
        })
    }

    /// The reaper at `now_us`: peers inactive past the inactive TTL are
    /// deleted from memory; active peers silent past the active TTL become
    /// inactive (kept, so that a later announce continues them), leave the
    /// counts, and their rows are left as they are.
    pub fn reap(&mut self, now_us: u64) {
        let active_cutoff = now_us.saturating_sub(self.config.active_peer_ttl * 1_000_000);
        let inactive_cutoff = now_us.saturating_sub(self.config.inactive_peer_ttl * 1_000_000);
        for (torrent_id, torrent) in &mut self.torrents {
            torrent
                .peers
                .retain(|_, peer| inactive_cutoff <= peer.updated_at || peer.is_active);
            let (mut seeder_delta, mut leecher_delta) = (0i32, 0i32);
            for ((owner, _), peer) in &mut torrent.peers {
                if peer.updated_at < active_cutoff && peer.is_active {
                    peer.is_active = false;
                    if peer.is_visible {
                        if let Some(u) = self.users.get_mut(owner) {
                            if peer.is_seeder {
                                u.num_seeding = u.num_seeding.saturating_sub(1);
                            } else {
                                u.num_leeching = u.num_leeching.saturating_sub(1);
                            }
                        }
                        if peer.is_seeder {
                            seeder_delta -= 1;
                        } else {
                            leecher_delta -= 1;
                        }
                    }
                }
            }
            if seeder_delta != 0 || leecher_delta != 0 {
                torrent.seeders = add_signed(torrent.seeders, seeder_delta);
                torrent.leechers = add_signed(torrent.leechers, leecher_delta);
                let queued = self.torrent_queue.entry(*torrent_id).or_default();
                queued.0 += i64::from(seeder_delta);
                queued.1 += i64::from(leecher_delta);
            }
        }
    }

    /// A flush: history, peers, torrents, users, each queue's statement
    /// as UNIT3D-Announce writes it.
    pub fn flush(&mut self) {
        for (key, update) in std::mem::take(&mut self.history_queue) {
            let row = self.db.history.entry(key).or_insert(ModelHistory {
                immune: update.is_immune,
                ..ModelHistory::default()
            });
            row.uploaded += update.credited_uploaded_delta;
            row.actual_uploaded += update.uploaded_delta;
            row.client_uploaded = update.uploaded;
            row.downloaded += update.credited_downloaded_delta;
            row.actual_downloaded += update.downloaded_delta;
            row.client_downloaded = update.downloaded;
            row.seeder = update.is_seeder;
            row.active = update.is_active;
            row.immune = row.immune && update.is_immune;
            row.completed_at = row.completed_at.or(update.completed_at);
        }
        self.db.peers.append(&mut self.peer_queue);
        for (id, (seeders, leechers, completed)) in std::mem::take(&mut self.torrent_queue) {
            let row = self.db.torrents.entry(id).or_default();
            row.0 += seeders;
            row.1 += leechers;
            row.2 += completed;
        }
        for (id, (uploaded, downloaded)) in std::mem::take(&mut self.user_queue) {
            let row = self.db.users.entry(id).or_default();
            row.0 += uploaded;
            row.1 += downloaded;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::{group, hash, passkey, peer, records, user};
    use std::net::Ipv4Addr;

    fn at(secs: u64) -> u64 {
        secs * 1_000_000
    }

    fn model(config: ModelConfig) -> Unit3dModel {
        Unit3dModel::new(&records(), config)
    }

    fn quiet() -> ModelConfig {
        ModelConfig {
            announce_min: 0,
            ..ModelConfig::default()
        }
    }

    fn announce(user: u32, torrent: u32, p: u8) -> ModelAnnounce {
        ModelAnnounce {
            passkey: passkey(user),
            info_hash: hash(torrent),
            peer_id: peer(p),
            ip: IpAddr::V4(Ipv4Addr::new(10, 0, user as u8, p)),
            port: 6881,
            event: AnnounceEvent::Started,
            uploaded: 0,
            downloaded: 0,
            left: 100,
            numwant: None,
        }
    }

    #[test]
    fn a_new_peer_is_credited_nothing_then_each_step_its_deltas() {
        let mut m = model(quiet());
        let mut a = announce(1, 1, 1);
        a.uploaded = 500;
        a.downloaded = 700;
        let first = m.announce(&a, at(10)).unwrap();
        assert_eq!((first.uploaded_delta, first.downloaded_delta), (0, 0));
        a.event = AnnounceEvent::Started;
        a.uploaded = 800;
        a.downloaded = 900;
        let second = m.announce(&a, at(20)).unwrap();
        assert_eq!((second.uploaded_delta, second.downloaded_delta), (300, 200));
        m.flush();
        let h = m.db.history[&(1, 1)];
        assert_eq!((h.actual_uploaded, h.actual_downloaded), (300, 200));
        assert_eq!((h.client_uploaded, h.client_downloaded), (800, 900));
    }

    #[test]
    fn either_counter_back_counts_both_as_zero_but_a_stop_judges_each() {
        let mut m = model(quiet());
        let mut a = announce(1, 1, 1);
        a.uploaded = 1000;
        m.announce(&a, at(10)).unwrap();
        a.event = AnnounceEvent::None;
        a.uploaded = 999;
        a.downloaded = 900;
        let back = m.announce(&a, at(20)).unwrap();
        assert_eq!((back.uploaded_delta, back.downloaded_delta), (0, 0));
        a.event = AnnounceEvent::Stopped;
        a.uploaded = 500;
        a.downloaded = 1000;
        let stop = m.announce(&a, at(30)).unwrap();
        assert_eq!((stop.uploaded_delta, stop.downloaded_delta), (0, 100));
        assert_eq!(stop.warning, Some(ModelWarning::DownloadSlotLimit));
        assert_eq!(stop.numwant, 0);
        assert_eq!(
            m.announce(&a, at(40)).unwrap_err(),
            ModelRefusal::StoppedPeerDoesntExist
        );
        // After the stop the peer is new again: nothing credited.
        a.event = AnnounceEvent::None;
        a.downloaded = 5000;
        assert_eq!(m.announce(&a, at(50)).unwrap().downloaded_delta, 0);
    }

    #[test]
    fn factors_of_the_site_group_torrent_token_personal_and_featured() {
        let mut records = records();
        records.groups.push(group(11, "power"));
        records.groups[1].is_double_upload = true;
        records.users.push(user(3, 11));
        records.torrents[1].download_factor = 50;
        records.tokens.push((1, 2));
        records.personal_freeleech.push(2);
        let mut featured = records.clone();
        featured.featured.push(1);
        for (records, user, torrent, factors) in [
            (&records, 1, 1, (100, 100)),
            (&records, 1, 2, (100, 0)),
            (&records, 2, 1, (100, 0)),
            (&records, 3, 2, (200, 50)),
            (&featured, 3, 1, (200, 0)),
        ] {
            let mut m = Unit3dModel::new(records, quiet());
            let mut a = announce(user, torrent, 1);
            m.announce(&a, at(10)).unwrap();
            a.uploaded = 1001;
            a.downloaded = 1001;
            let answer = m.announce(&a, at(20)).unwrap();
            assert_eq!((answer.upload_factor, answer.download_factor), factors);
            assert_eq!(
                (answer.credited_uploaded, answer.credited_downloaded),
                (
                    u64::from(factors.0) * 1001 / 100,
                    u64::from(factors.1) * 1001 / 100
                )
            );
        }
    }

    #[test]
    fn the_peer_limit_counts_the_new_visible_peer_itself() {
        let mut m = model(quiet());
        m.announce(&announce(1, 1, 1), at(10)).unwrap();
        m.announce(&announce(1, 1, 2), at(10)).unwrap();
        assert_eq!(
            m.announce(&announce(1, 1, 3), at(10)).unwrap_err(),
            ModelRefusal::PeersPerTorrentPerUserLimit(3)
        );
        assert!(m.peer(1, 1, &peer(3)).is_none());
    }

    #[test]
    fn download_slots_hide_new_leechers_not_hidden_from_the_limit() {
        let mut records = records();
        records.groups[0].download_slots = Some(1);
        let mut m = Unit3dModel::new(&records, quiet());
        m.announce(&announce(1, 1, 1), at(10)).unwrap();
        let hidden = m.announce(&announce(1, 2, 1), at(10)).unwrap();
        assert!(!hidden.visible);
        assert_eq!(hidden.warning, Some(ModelWarning::DownloadSlotLimit));
        assert_eq!(m.counts(2), (0, 0));
        // Hidden peers count toward no limit: more of them are admitted.
        for p in 2..6 {
            assert!(!m.announce(&announce(1, 2, p), at(10)).unwrap().visible);
        }
        // A visible seeder turning leecher keeps its place past the slots.
        let mut s = announce(1, 2, 9);
        s.left = 0;
        assert!(m.announce(&s, at(10)).unwrap().visible);
        s.left = 50;
        s.event = AnnounceEvent::None;
        assert!(m.announce(&s, at(20)).unwrap().visible);
        assert_eq!(m.user_counts(1), (0, 2));
    }

    #[test]
    fn peer_lists_leave_out_the_users_own_and_need_leechers() {
        let mut m = model(quiet());
        let mut own_seed = announce(1, 1, 1);
        own_seed.left = 0;
        m.announce(&own_seed, at(10)).unwrap();
        let mut other_seed = announce(2, 1, 2);
        other_seed.left = 0;
        // Only seeders: no list.
        let lone = m.announce(&other_seed, at(10)).unwrap();
        assert!(lone.candidates().next().is_none());
        let leecher = m.announce(&announce(1, 1, 3), at(10)).unwrap();
        let listed: Vec<_> = leecher.candidates().map(|l| l.user_id).collect();
        assert_eq!(listed, vec![2]);
        assert_eq!((leecher.seeds.len(), leecher.leeches.len()), (1, 0));
        // A seeder is handed leechers only.
        let seed = m.announce(&other_seed, at(20)).unwrap();
        assert_eq!((seed.seeds.len(), seed.leeches.len()), (0, 1));
    }

    #[test]
    fn a_warned_answer_carries_no_peers() {
        let mut m = model(ModelConfig::default());
        let mut seed = announce(2, 1, 2);
        seed.left = 0;
        m.announce(&seed, at(10)).unwrap();
        let mut a = announce(1, 1, 1);
        assert_eq!(m.announce(&a, at(10)).unwrap().seeds.len(), 1);
        a.event = AnnounceEvent::None;
        let again = m.announce(&a, at(1000)).unwrap();
        assert_eq!(again.warning, Some(ModelWarning::RateLimit));
        assert!(again.candidates().next().is_none());
        assert_eq!(m.announce(&a, at(2801)).unwrap().seeds.len(), 1);
    }

    #[test]
    fn the_reaper_keeps_a_silent_peer_inactive_and_its_next_announce_continues() {
        let mut m = model(quiet());
        let mut a = announce(1, 1, 1);
        m.announce(&a, at(10)).unwrap();
        m.reap(at(10 + 7201));
        assert_eq!(m.counts(1), (0, 0));
        assert!(!m.peer(1, 1, &peer(1)).unwrap().is_active);
        a.event = AnnounceEvent::None;
        a.uploaded = 300;
        a.downloaded = 400;
        let back = m.announce(&a, at(20_000)).unwrap();
        assert_eq!((back.uploaded_delta, back.downloaded_delta), (300, 400));
        assert_eq!(m.counts(1), (0, 1));
        // Past the inactive TTL it is gone: a new peer.
        m.reap(at(20_000 + 7201));
        m.reap(at(20_000 + 1_814_401));
        assert!(m.peer(1, 1, &peer(1)).is_none());
    }

    #[test]
    fn a_flush_keeps_the_last_completed_at_of_its_batch_and_users_only_the_last_credit() {
        let mut m = model(quiet());
        let mut a = announce(1, 1, 1);
        m.announce(&a, at(10)).unwrap();
        a.event = AnnounceEvent::None;
        a.downloaded = 50;
        m.announce(&a, at(20)).unwrap();
        a.event = AnnounceEvent::Completed;
        a.downloaded = 100;
        a.left = 0;
        m.announce(&a, at(30)).unwrap();
        a.event = AnnounceEvent::None;
        a.downloaded = 110;
        assert_eq!(m.announce(&a, at(40)).unwrap().times_completed, 1);
        m.flush();
        let h = m.db.history[&(1, 1)];
        assert_eq!((h.downloaded, h.completed_at), (110, None));
        assert_eq!(m.db.users[&1], (0, 10));
        assert_eq!(m.db.torrents[&1], (1, 0, 1));
        let row = m.db.peers[&(1, 1, peer(1))];
        assert!(row.active && row.seeder && row.visible);
    }
}
