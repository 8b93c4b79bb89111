//! A peer's account between its announces, and the deltas an announce
//! makes of it: UNIT3D-Announce's rules (a first announce credits nothing,
//! counters going backwards credit nothing, a stop credits each counter on
//! its own), with seedtime and the upload-rate bound added.

use crate::announce::{LedgerConfig, PrivateAnnounce};
use crate::batch::{Agent, PeerRow};
use crate::site::UserId;
use ahash::AHashMap;
use std::net::IpAddr;
use tracker_proto::PeerId;

/// What the ledger keeps of one peer between its announces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Account {
    pub(crate) uploaded: u64,
    pub(crate) downloaded: u64,
    pub(crate) left: u64,
    pub(crate) seeder: bool,
    pub(crate) last_seen: u64,
    pub(crate) ip: IpAddr,
    pub(crate) port: u16,
    pub(crate) agent: Agent,
    pub(crate) created_at: u64,
    pub(crate) has_sent_completed: bool,
    /// A leecher past its user's download slots: accounted, but not handed
    /// out and not counted in the user's leeching peers.
    pub(crate) hidden: bool,
}

impl Account {
    /// Counted in its user's leeching peers (see `LeechingCounts`).
    pub(crate) fn leeching(&self) -> bool {
        !self.seeder && !self.hidden
    }
}

impl Account {
    pub(crate) fn row(&self, active: bool, updated_at: u64) -> PeerRow {
        PeerRow {
            ip: self.ip,
            port: self.port,
            agent: self.agent,
            uploaded: self.uploaded,
            downloaded: self.downloaded,
            left: self.left,
            active,
            seeder: self.seeder,
            visible: active && !self.hidden,
            connectable: false,
            created_at: self.created_at,
            updated_at,
        }
    }
}

/// One torrent's accounts.
#[derive(Debug, Default)]
pub(crate) struct Swarm {
    pub(crate) peers: AHashMap<(UserId, PeerId), Account>,
    /// Peers per user, for the per-user limit and `history.active`.
    pub(crate) per_user: AHashMap<UserId, u16>,
    pub(crate) seeders: u32,
    pub(crate) leechers: u32,
}

impl Swarm {
    pub(crate) fn user_peers(&self, user: UserId) -> u16 {
        self.per_user.get(&user).copied().unwrap_or(0)
    }

    pub(crate) fn add(&mut self, user: UserId, seeder: bool) {
        let count = self.per_user.entry(user).or_insert(0);
        *count = count.saturating_add(1);
        if seeder {
            self.seeders = self.seeders.saturating_add(1);
        } else {
            self.leechers = self.leechers.saturating_add(1);
        }
    }

    pub(crate) fn remove(&mut self, user: UserId, seeder: bool) {
        if let Some(count) = self.per_user.get_mut(&user) {
            *count = count.saturating_sub(1);
            if *count == 0 {
                self.per_user.remove(&user);
            }
        }
        if seeder {
            self.seeders = self.seeders.saturating_sub(1);
        } else {
            self.leechers = self.leechers.saturating_sub(1);
        }
    }
}

/// The deltas of one announce, before they become rows.
#[derive(Default)]
pub(crate) struct Deltas {
    pub(crate) uploaded: u64,
    pub(crate) downloaded: u64,
    pub(crate) seedtime: u64,
    pub(crate) completed: bool,
    pub(crate) flagged: bool,
    pub(crate) seeders: i64,
    pub(crate) leechers: i64,
}

/// Raw upload minus raw download, as `torrents.balance` adds it.
pub(crate) fn balance(uploaded: u64, downloaded: u64) -> i64 {
    let diff = i128::from(uploaded) - i128::from(downloaded);
    i64::try_from(diff).unwrap_or(if diff < 0 { i64::MIN } else { i64::MAX })
}

/// The byte and time deltas of an existing peer's announce.
pub(crate) fn account_deltas(
    config: &LedgerConfig,
    old: &Account,
    a: &PrivateAnnounce,
    stopped: bool,
    now: u64,
) -> Deltas {
    let (uploaded, downloaded) = if stopped {
        // UNIT3D-Announce counts a stop's deltas each on its own.
        (
            a.uploaded.saturating_sub(old.uploaded),
            a.downloaded.saturating_sub(old.downloaded),
        )
    } else if a.uploaded < old.uploaded || a.downloaded < old.downloaded {
        // The client restarted with the same peer id: its totals began
        // again, and nothing is known of what it moved meanwhile.
        (0, 0)
    } else {
        (a.uploaded - old.uploaded, a.downloaded - old.downloaded)
    };
    let elapsed = now.saturating_sub(old.last_seen);
    let seeder = a.left == 0;
    let seedtime = if old.seeder && seeder {
        elapsed.min(config.active_peer_ttl)
    } else {
        0
    };
    // Times are whole seconds: two announces 0.9 s apart read as 0 s, so
    // the bound allows one second more than the clock shows.
    let flagged = config.max_upload_rate != 0
        && u128::from(uploaded) > u128::from(config.max_upload_rate) * (u128::from(elapsed) + 1);
    Deltas {
        uploaded,
        downloaded,
        seedtime,
        completed: !stopped && seeder && !old.seeder,
        flagged,
        seeders: 0,
        leechers: 0,
    }
}
