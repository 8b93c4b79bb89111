//! A peer's account between its announces, and a torrent's accounts: what a
//! ledger keeps to check, hold back, bound and list the next announce. What
//! an announce credits is decided at the flush ([`crate::settle`]).
//!
//! A torrent's swarm in private mode is its accounts: one per user and peer
//! id, whatever ports and addresses that peer id announces from, so that
//! the counts are those of `peers`' rows and a peer that moves leaves no
//! ghost behind. The visible ones are also listed by kind and address
//! family, which is what peer lists are drawn from and counts read.

use crate::batch::{Agent, PeerRow, Point, PointState};
use crate::site::UserId;
use ahash::AHashMap;
use std::net::{IpAddr, SocketAddr};
use tracker_proto::{AnswerPeers, IpFamily, PeerId};

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
    /// out, not counted in its torrent's leechers nor in the user's leeching
    /// peers.
    pub(crate) hidden: bool,
    /// Its place in its torrent's list (see [`Swarm`]); unused while hidden.
    pub(crate) slot: u32,
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

    /// Its `peers` row after a point in `state`: a stop is inactive and not
    /// visible (as UNIT3D-Announce writes it), an expiry inactive but as
    /// visible as the peer was, so that the flush tells the two apart.
    pub(crate) fn row(&self, state: PointState, updated_at: u64) -> PeerRow {
        PeerRow {
            ip: self.ip,
            port: self.port,
            agent: self.agent,
            uploaded: self.point.uploaded,
            downloaded: self.point.downloaded,
            left: self.left,
            active: state == PointState::Active,
            seeder: self.point.seeder,
            visible: state != PointState::Stopped && !self.hidden,
            connectable: false,
            created_at: self.created_at,
            updated_at,
        }
    }

    fn addr(&self) -> SocketAddr {
        SocketAddr::new(self.ip, self.port)
    }
}

/// What one user has on one torrent.
#[derive(Clone, Copy, Debug, Default)]
pub(crate) struct UserOnTorrent {
    /// Peers in the torrent's lists: UNIT3D-Announce's count for
    /// `max_peers_per_torrent_per_user`.
    pub(crate) visible: u16,
    /// Leechers held back by the user's download slots, bounded apart by
    /// the same limit.
    pub(crate) hidden: u16,
    /// Unix microseconds until which the user's upload-rate bound on this
    /// torrent is spent: each credited upload takes its bytes' time at the
    /// bound, after the previous one's, across the user's peers.
    pub(crate) upload_until_us: u64,
    /// Unix microseconds until which the user's seeding here is counted
    /// (see `Step::seeded_until_us`).
    pub(crate) seeded_until_us: u64,
    /// One of the user's peers completed the torrent here: the ledger's
    /// snatches count a user once, as `times_completed` does.
    pub(crate) completed: bool,
}

impl UserOnTorrent {
    pub(crate) fn peers(&self) -> u16 {
        self.visible.saturating_add(self.hidden)
    }
}

/// A visible peer as its torrent's list holds it.
#[derive(Clone, Copy, Debug)]
struct Listed {
    user_id: UserId,
    peer_id: PeerId,
    addr: SocketAddr,
}

/// A torrent's visible peers, by kind and address family.
#[derive(Debug, Default)]
struct Lists {
    v4_seeders: Vec<Listed>,
    v4_leechers: Vec<Listed>,
    v6_seeders: Vec<Listed>,
    v6_leechers: Vec<Listed>,
}

impl Lists {
    fn of(&self, seeder: bool, family: IpFamily) -> &Vec<Listed> {
        match (family, seeder) {
            (IpFamily::V4, true) => &self.v4_seeders,
            (IpFamily::V4, false) => &self.v4_leechers,
            (IpFamily::V6, true) => &self.v6_seeders,
            (IpFamily::V6, false) => &self.v6_leechers,
        }
    }

    fn of_mut(&mut self, seeder: bool, ip: IpAddr) -> &mut Vec<Listed> {
        match (IpFamily::of(ip), seeder) {
            (IpFamily::V4, true) => &mut self.v4_seeders,
            (IpFamily::V4, false) => &mut self.v4_leechers,
            (IpFamily::V6, true) => &mut self.v6_seeders,
            (IpFamily::V6, false) => &mut self.v6_leechers,
        }
    }
}

/// One torrent's accounts.
#[derive(Debug, Default)]
pub(crate) struct Swarm {
    peers: AHashMap<(UserId, PeerId), Account>,
    /// Per user, for the per-user limit, `history.active` and the upload
    /// bound.
    pub(crate) users: AHashMap<UserId, UserOnTorrent>,
    /// The visible peers: what peer lists are drawn from and the counts
    /// read. A peer's `slot` is its place in its list.
    lists: Lists,
}

impl Swarm {
    pub(crate) fn get(&self, user: UserId, peer: &PeerId) -> Option<&Account> {
        self.peers.get(&(user, *peer))
    }

    pub(crate) fn accounts(&self) -> impl Iterator<Item = (&(UserId, PeerId), &Account)> {
        self.peers.iter()
    }

    pub(crate) fn is_empty(&self) -> bool {
        self.peers.is_empty()
    }

    /// Accounts held, hidden ones included.
    pub(crate) fn len(&self) -> usize {
        self.peers.len()
    }

    pub(crate) fn user(&self, user: UserId) -> UserOnTorrent {
        self.users.get(&user).copied().unwrap_or_default()
    }

    /// Visible seeders, as UNIT3D-Announce counts them.
    pub(crate) fn seeders(&self) -> u32 {
        let n = self.lists.v4_seeders.len() + self.lists.v6_seeders.len();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Visible leechers.
    pub(crate) fn leechers(&self) -> u32 {
        let n = self.lists.v4_leechers.len() + self.lists.v6_leechers.len();
        u32::try_from(n).unwrap_or(u32::MAX)
    }

    /// Adds the account of `user`'s `peer` (which it does not hold).
    pub(crate) fn insert(&mut self, user: UserId, peer: PeerId, mut account: Account) {
        let on = self.users.entry(user).or_default();
        if account.hidden {
            on.hidden = on.hidden.saturating_add(1);
        } else {
            on.visible = on.visible.saturating_add(1);
            let list = self.lists.of_mut(account.point.seeder, account.ip);
            account.slot = u32::try_from(list.len()).unwrap_or(u32::MAX);
            list.push(Listed {
                user_id: user,
                peer_id: peer,
                addr: account.addr(),
            });
        }
        self.peers.insert((user, peer), account);
    }

    /// Puts `user`'s `peer`'s account in, over the one it held (`held`):
    /// in place where it stays in the same list (the common announce),
    /// else out of one list and into another.
    pub(crate) fn put(&mut self, user: UserId, peer: PeerId, account: Account, held: bool) {
        if held {
            if let Some(old) = self.peers.get_mut(&(user, peer)) {
                let same_list = !old.hidden
                    && !account.hidden
                    && old.point.seeder == account.point.seeder
                    && IpFamily::of(old.ip) == IpFamily::of(account.ip);
                if same_list {
                    let slot = old.slot;
                    *old = Account { slot, ..account };
                    let list = self.lists.of_mut(account.point.seeder, account.ip);
                    if let Some(listed) = list.get_mut(slot as usize) {
                        listed.addr = account.addr();
                    }
                    return;
                }
            }
            self.remove(user, &peer);
        }
        self.insert(user, peer, account);
    }

    /// Takes `user`'s `peer` out, if held. The user's entry stays (its
    /// upload window) until [`Swarm::forget_user_if_gone`].
    pub(crate) fn remove(&mut self, user: UserId, peer: &PeerId) -> Option<Account> {
        let account = self.peers.remove(&(user, *peer))?;
        if let Some(on) = self.users.get_mut(&user) {
            if account.hidden {
                on.hidden = on.hidden.saturating_sub(1);
            } else {
                on.visible = on.visible.saturating_sub(1);
            }
        }
        if !account.hidden {
            let list = self.lists.of_mut(account.point.seeder, account.ip);
            let slot = account.slot as usize;
            if slot < list.len() {
                list.swap_remove(slot);
                if let Some(moved) = list.get(slot) {
                    if let Some(a) = self.peers.get_mut(&(moved.user_id, moved.peer_id)) {
                        a.slot = account.slot;
                    }
                }
            }
        }
        Some(account)
    }

    /// Drops `user`'s entry once it has no peer here.
    pub(crate) fn forget_user_if_gone(&mut self, user: UserId) {
        if self.users.get(&user).is_some_and(|on| on.peers() == 0) {
            self.users.remove(&user);
        }
    }

    /// Writes up to `want` visible peers of `family` to `out`, none of
    /// `user`'s own (UNIT3D-Announce leaves a user's own peers out, so that
    /// no one is handed, and paid for moving bytes to, itself): for a
    /// leecher, seeders first, then leechers; for a seeder, leechers only.
    /// Each list is read from a random place (`start`), around once.
    pub(crate) fn pick(&self, pick: Pick, out: &mut AnswerPeers) {
        let mut room = pick.want;
        let mut start = pick.start;
        for (seeders, wanted) in [(true, pick.seeders), (false, pick.leechers)] {
            if !wanted || room == 0 {
                continue;
            }
            let list = self.lists.of(seeders, pick.family);
            let len = list.len();
            if len == 0 {
                continue;
            }
            let from = (start % len as u64) as usize;
            start = start.rotate_left(17);
            let (before, after) = list.split_at(from);
            for peer in after.iter().chain(before) {
                if room == 0 {
                    break;
                }
                if peer.user_id != pick.user && out.push_addr(peer.addr, None) {
                    room -= 1;
                }
            }
        }
    }
}

/// What [`Swarm::pick`] draws.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Pick {
    /// The announcing user, whose own peers are left out.
    pub(crate) user: UserId,
    pub(crate) family: IpFamily,
    pub(crate) want: usize,
    pub(crate) seeders: bool,
    pub(crate) leechers: bool,
    /// A random number: where each list is read from.
    pub(crate) start: u64,
}

/// Raw upload minus raw download, as `torrents.balance` adds it.
pub(crate) fn balance(uploaded: u64, downloaded: u64) -> i64 {
    let diff = i128::from(uploaded) - i128::from(downloaded);
    i64::try_from(diff).unwrap_or(if diff < 0 { i64::MIN } else { i64::MAX })
}
