//! A peer's account between its announces, and a torrent's accounts: what a
//! ledger keeps to check, hold back and bound the next announce. What an
//! announce credits is decided at the flush ([`crate::settle`]).

use crate::batch::{Agent, PeerRow, Point};
use crate::site::UserId;
use ahash::AHashMap;
use std::net::IpAddr;
use tracker_proto::PeerId;

/// What the ledger keeps of one peer between its announces.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Account {
    /// Its last announce: totals, time, seeding.
    pub(crate) point: Point,
    pub(crate) left: u64,
    pub(crate) ip: IpAddr,
    pub(crate) port: u16,
    pub(crate) agent: Agent,
    pub(crate) created_at: u64,
    pub(crate) has_sent_completed: bool,
    /// Went from leecher to seeder here once (the site API's snatches count
    /// each peer once).
    pub(crate) completed: bool,
    /// A leecher past its user's download slots: accounted, but not handed
    /// out and not counted in the user's leeching peers.
    pub(crate) hidden: bool,
}

impl Account {
    /// Counted in its user's leeching peers (see `LeechingCounts`).
    pub(crate) fn leeching(&self) -> bool {
        !self.point.seeder && !self.hidden
    }

    /// Unix seconds of its last announce.
    pub(crate) fn last_seen(&self) -> u64 {
        self.point.at_secs()
    }

    pub(crate) fn row(&self, active: bool, updated_at: u64) -> PeerRow {
        PeerRow {
            ip: self.ip,
            port: self.port,
            agent: self.agent,
            uploaded: self.point.uploaded,
            downloaded: self.point.downloaded,
            left: self.left,
            active,
            seeder: self.point.seeder,
            visible: active && !self.hidden,
            connectable: false,
            created_at: self.created_at,
            updated_at,
        }
    }
}

/// What one user has on one torrent.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct UserOnTorrent {
    pub(crate) peers: u16,
    /// Unix microseconds until which the user's upload-rate bound on this
    /// torrent is spent: each credited upload takes its bytes' time at the
    /// bound, after the previous one's, across the user's peers.
    pub(crate) upload_until_us: u64,
}

/// One torrent's accounts.
#[derive(Debug, Default)]
pub(crate) struct Swarm {
    pub(crate) peers: AHashMap<(UserId, PeerId), Account>,
    /// Per user, for the per-user limit, `history.active` and the upload
    /// bound.
    pub(crate) users: AHashMap<UserId, UserOnTorrent>,
    pub(crate) seeders: u32,
    pub(crate) leechers: u32,
}

impl Swarm {
    pub(crate) fn user_peers(&self, user: UserId) -> u16 {
        self.users.get(&user).map_or(0, |u| u.peers)
    }

    pub(crate) fn add(&mut self, user: UserId, seeder: bool) {
        let on = self.users.entry(user).or_default();
        on.peers = on.peers.saturating_add(1);
        self.count(seeder, true);
    }

    pub(crate) fn remove(&mut self, user: UserId, seeder: bool) {
        if let Some(on) = self.users.get_mut(&user) {
            on.peers = on.peers.saturating_sub(1);
            if on.peers == 0 {
                self.users.remove(&user);
            }
        }
        self.count(seeder, false);
    }

    /// A peer staying, from seeding `was` to `now`.
    pub(crate) fn reclassify(&mut self, was: bool, now: bool) {
        if was != now {
            self.count(was, false);
            self.count(now, true);
        }
    }

    fn count(&mut self, seeder: bool, up: bool) {
        let count = if seeder {
            &mut self.seeders
        } else {
            &mut self.leechers
        };
        *count = if up {
            count.saturating_add(1)
        } else {
            count.saturating_sub(1)
        };
    }
}

/// Raw upload minus raw download, as `torrents.balance` adds it.
pub(crate) fn balance(uploaded: u64, downloaded: u64) -> i64 {
    let diff = i128::from(uploaded) - i128::from(downloaded);
    i64::try_from(diff).unwrap_or(if diff < 0 { i64::MIN } else { i64::MAX })
}
