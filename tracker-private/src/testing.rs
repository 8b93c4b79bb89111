//! Builders and strategies the tests share.

use crate::batch::{
    Agent, Batch, Claim, Credit, CreditRules, HistoryMark, HistoryRow, PeerEntry, PeerKey, PeerRow,
    Point, PointState, Resumed, Rows, Step, StepKind, TorrentRow, UnregisteredRow, UserRow,
};
use crate::ledger::{Admitted, Ledger, PrivateAnnounce};
use crate::refusal::Refusal;
use crate::rules::{Factors, GlobalFactors};
use crate::settle::{pairs_needing_history, settle, Settled, StoredHistory, StoredPeer};
use crate::site::{
    Group, Passkey, Site, SiteRecords, Torrent, TorrentId, TorrentStatus, User, UserId,
};
use proptest::prelude::*;
use std::collections::BTreeMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use tracker_proto::{AnnounceEvent, AnswerPeers, InfoHash, PeerId};

/// A passkey of 32 alphanumerics that differs per `n`.
pub fn passkey(n: u32) -> Passkey {
    Passkey::parse(format!("{n:0>32}").as_bytes()).unwrap()
}

pub fn hash(n: u32) -> InfoHash {
    let mut bytes = [0xaa; 20];
    bytes[..4].copy_from_slice(&n.to_le_bytes());
    InfoHash(bytes)
}

pub fn peer(n: u8) -> PeerId {
    let mut id = *b"-TR4050-000000000000";
    id[19] = n;
    PeerId(id)
}

pub fn user(id: u32, group_id: i32) -> User {
    User {
        id,
        group_id,
        passkey: passkey(id),
        can_download: true,
        is_donor: false,
        is_lifetime: false,
    }
}

pub fn group(id: i32, slug: &str) -> Group {
    Group {
        id,
        slug: slug.to_string(),
        download_slots: None,
        is_immune: false,
        is_freeleech: false,
        is_double_upload: false,
    }
}

pub fn torrent(id: u32) -> Torrent {
    Torrent {
        id,
        info_hash: hash(id),
        status: TorrentStatus::Approved,
        is_deleted: false,
        download_factor: 100,
        upload_factor: 100,
        times_completed: 0,
    }
}

/// Users 1 and 2 in group 10 (`user`), torrents 1 and 2, no blacklist.
pub fn records() -> SiteRecords {
    SiteRecords {
        users: vec![user(1, 10), user(2, 10)],
        groups: vec![group(10, "user")],
        torrents: vec![torrent(1), torrent(2)],
        ..SiteRecords::default()
    }
}

pub fn site() -> Site {
    Site::from_records(records(), GlobalFactors::default())
}

/// User `user`'s peer `peer` on torrent `torrent`, a leecher with nothing
/// moved yet.
pub fn announce(user: u32, torrent: u32, peer_n: u8) -> PrivateAnnounce {
    PrivateAnnounce {
        info_hash: hash(torrent),
        peer_id: peer(peer_n),
        passkey: passkey(user),
        ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        port: 6881,
        event: AnnounceEvent::Started,
        uploaded: 0,
        downloaded: 0,
        left: 1000,
        agent: Agent::new(b"Transmission/4.0.5"),
        numwant: 50,
    }
}

/// `Ledger::announce` with the answer's peers thrown away, for tests of
/// what is accounted.
pub trait Admit {
    fn admit(&mut self, site: &Site, a: &PrivateAnnounce, now_us: u64)
        -> Result<Admitted, Refusal>;
}

impl Admit for Ledger {
    fn admit(
        &mut self,
        site: &Site,
        a: &PrivateAnnounce,
        now_us: u64,
    ) -> Result<Admitted, Refusal> {
        self.announce(site, a, now_us, &mut AnswerPeers::default())
    }
}

fn arb_ip() -> impl Strategy<Value = IpAddr> {
    prop_oneof![
        any::<[u8; 4]>().prop_map(|b| IpAddr::V4(Ipv4Addr::from(b))),
        any::<[u8; 16]>().prop_map(|b| IpAddr::V6(Ipv6Addr::from(b))),
    ]
}

fn arb_agent() -> impl Strategy<Value = Agent> {
    proptest::collection::vec(any::<u8>(), 0..80).prop_map(|b| Agent::new(&b))
}

/// Keys from small ranges, so that batches share keys and merge.
fn arb_peer_key() -> impl Strategy<Value = PeerKey> {
    (0u32..4, 0u32..4, 0u8..4).prop_map(|(u, t, p)| PeerKey {
        user_id: u,
        torrent_id: t,
        peer_id: peer(p),
    })
}

fn arb_peer_row() -> impl Strategy<Value = PeerRow> {
    (
        arb_ip(),
        any::<u16>(),
        arb_agent(),
        any::<(u64, u64, u64)>(),
        any::<(bool, bool, bool, bool)>(),
        any::<(u64, u64)>(),
    )
        .prop_map(
            |(ip, port, agent, (up, down, left), (active, seeder, visible, conn), (c, u))| {
                PeerRow {
                    ip,
                    port,
                    agent,
                    uploaded: up,
                    downloaded: down,
                    left,
                    active,
                    seeder,
                    visible,
                    connectable: conn,
                    created_at: c,
                    updated_at: u,
                }
            },
        )
}

/// A peer row of no importance.
pub fn any_peer_row() -> PeerRow {
    PeerRow {
        ip: IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1)),
        port: 6881,
        agent: Agent::default(),
        uploaded: 0,
        downloaded: 0,
        left: 0,
        active: true,
        seeder: false,
        visible: true,
        connectable: false,
        created_at: 0,
        updated_at: 0,
    }
}

fn arb_history_row() -> impl Strategy<Value = HistoryRow> {
    (
        arb_agent(),
        any::<[u64; 7]>(),
        any::<(bool, bool, bool)>(),
        any::<Option<u64>>(),
        any::<(u64, u64)>(),
    )
        .prop_map(
            |(agent, n, (seeder, active, immune), completed_at, (c, u))| HistoryRow {
                agent,
                uploaded: n[0],
                downloaded: n[1],
                actual_uploaded: n[2],
                actual_downloaded: n[3],
                client_uploaded: n[4],
                client_downloaded: n[5],
                seedtime: n[6],
                seeder,
                active,
                immune,
                completed_at,
                created_at: c,
                updated_at: u,
            },
        )
}

fn arb_history_mark() -> impl Strategy<Value = HistoryMark> {
    (
        arb_agent(),
        any::<(u64, u64)>(),
        any::<(bool, bool, bool, bool)>(),
        any::<Option<u64>>(),
        any::<(u64, u64)>(),
    )
        .prop_map(
            |(agent, (up, down), (seeder, active, immune, weak), completed_at, (c, u))| {
                HistoryMark {
                    agent,
                    client_uploaded: up,
                    client_downloaded: down,
                    seeder,
                    active,
                    immune,
                    completed_at,
                    created_at: c,
                    updated_at: u,
                    weak,
                }
            },
        )
}

/// Signed fields stay far from the limits: saturating sums of mixed
/// signs are not associative at the edges.
fn arb_torrent_row() -> impl Strategy<Value = TorrentRow> {
    let small = -(1i64 << 40)..(1i64 << 40);
    (
        small.clone(),
        small.clone(),
        any::<u64>(),
        small,
        any::<u64>(),
    )
        .prop_map(
            |(seeders, leechers, times_completed, balance, updated_at)| TorrentRow {
                seeders,
                leechers,
                times_completed,
                balance,
                updated_at,
            },
        )
}

fn arb_point() -> impl Strategy<Value = Point> {
    (any::<(u64, u64, u64)>(), any::<bool>(), 0u8..3).prop_map(
        |((uploaded, downloaded, at_us), seeder, state)| Point {
            uploaded,
            downloaded,
            at_us,
            seeder,
            state: [PointState::Active, PointState::Expired, PointState::Stopped]
                [usize::from(state)],
        },
    )
}

fn arb_step() -> impl Strategy<Value = Step> {
    (
        arb_point(),
        0u8..3,
        any::<(u16, u8)>(),
        any::<bool>(),
        any::<u64>(),
    )
        .prop_map(
            |(point, kind, (upload, download), flagged, seeded_until_us)| Step {
                point,
                kind: [StepKind::Announce, StepKind::Stopped, StepKind::Expired][usize::from(kind)],
                factors: Factors { upload, download },
                flagged,
                seeded_until_us,
            },
        )
}

fn arb_credit() -> impl Strategy<Value = Credit> {
    any::<([u64; 5], bool)>().prop_map(|(n, completed)| Credit {
        uploaded: n[0],
        downloaded: n[1],
        actual_uploaded: n[2],
        actual_downloaded: n[3],
        seedtime: n[4],
        completed,
    })
}

fn arb_claim() -> impl Strategy<Value = Claim> {
    let resumed = proptest::option::of((arb_step(), arb_step(), arb_credit(), arb_credit()))
        .prop_map(|run| {
            run.map(|(after, first, joined, rest)| Resumed {
                after,
                first,
                joined,
                rest,
            })
        });
    (
        proptest::option::of(arb_point()),
        arb_step(),
        arb_credit(),
        resumed,
        arb_step(),
        any::<bool>(),
        any::<Option<u64>>(),
    )
        .prop_map(
            |(base, first, rest, resumed, last, stops_only, prior)| Claim {
                base,
                first,
                rest,
                resumed,
                last,
                stops_only,
                prior,
            },
        )
}

fn arb_rows() -> impl Strategy<Value = Rows> {
    (
        proptest::collection::hash_map(arb_peer_key(), arb_peer_row(), 0..3),
        proptest::collection::hash_map((0u32..4, 0u32..4), arb_history_row(), 0..3),
        proptest::collection::hash_map(0u32..4, any::<(u64, u64)>(), 0..3),
        proptest::collection::hash_map(0u32..4, arb_torrent_row(), 0..3),
    )
        .prop_map(|(peers, history, users, torrents)| Rows {
            peers: peers.into_iter().collect(),
            history: history.into_iter().collect(),
            users: users
                .into_iter()
                .map(|(id, (uploaded, downloaded))| {
                    (
                        id,
                        UserRow {
                            uploaded,
                            downloaded,
                        },
                    )
                })
                .collect(),
            torrents: torrents.into_iter().collect(),
        })
}

pub fn arb_batch() -> impl Strategy<Value = Batch> {
    (
        proptest::collection::hash_map(
            arb_peer_key(),
            (arb_peer_row(), arb_claim()).prop_map(|(row, claim)| PeerEntry { row, claim }),
            0..6,
        ),
        proptest::collection::hash_map((0u32..4, 0u32..4), arb_history_mark(), 0..6),
        proptest::collection::hash_map(
            (0u32..4, (0u8..3).prop_map(|b| InfoHash([b; 20]))),
            (0u64..1 << 40, 0u64..1 << 40).prop_map(|(created_at, updated_at)| UnregisteredRow {
                created_at,
                updated_at,
            }),
            0..4,
        ),
        arb_rows(),
    )
        .prop_map(|(peers, history, unregistered, settled)| Batch {
            peers: peers.into_iter().collect(),
            history: history.into_iter().collect(),
            unregistered: unregistered.into_iter().collect(),
            settled,
        })
}

/// A site's database as flushes leave it, in memory: rows written as the
/// flush's statements write them (tracker-db), for tests of what settles.
#[derive(Clone, Debug, Default)]
pub struct MemoryDb {
    pub peers: BTreeMap<PeerKey, PeerRow>,
    pub history: BTreeMap<(UserId, TorrentId), HistoryRow>,
    pub users: BTreeMap<UserId, UserRow>,
    /// Seeders, leechers and completions as the table holds them.
    pub torrents: BTreeMap<TorrentId, TorrentRow>,
}

impl MemoryDb {
    /// Settles `batch` against the rows held and writes what it settled,
    /// reading as tracker-db reads: the history rows of the pairs
    /// `pairs_needing_history` names, and no other.
    pub fn flush(&mut self, batch: &Batch, rules: &CreditRules) -> Settled {
        let stored = |key: &PeerKey| self.peers.get(key).map(StoredPeer::of_row);
        let read = pairs_needing_history(batch, stored, rules);
        let settled = settle(
            batch,
            stored,
            |user, torrent| {
                read.binary_search(&(user, torrent)).ok()?;
                self.history.get(&(user, torrent)).map(|h| StoredHistory {
                    completed: h.completed_at.is_some(),
                    updated_at: h.updated_at,
                    client_downloaded: h.client_downloaded,
                })
            },
            rules,
        );
        self.apply(&settled.rows);
        settled
    }

    fn apply(&mut self, rows: &Rows) {
        for (key, row) in &rows.peers {
            let created_at = self.peers.get(key).map_or(row.created_at, |r| r.created_at);
            self.peers.insert(*key, PeerRow { created_at, ..*row });
        }
        for (key, row) in &rows.history {
            match self.history.get_mut(key) {
                Some(old) => old.merge(row),
                None => {
                    self.history.insert(*key, *row);
                }
            }
        }
        for (id, row) in &rows.users {
            let user = self.users.entry(*id).or_default();
            user.uploaded += row.uploaded;
            user.downloaded += row.downloaded;
        }
        for (id, row) in &rows.torrents {
            let t = self.torrents.entry(*id).or_default();
            t.seeders += row.seeders;
            t.leechers += row.leechers;
            t.times_completed += row.times_completed;
            t.balance += row.balance;
        }
    }

    /// A torrent's active and visible rows: (seeders, leechers).
    pub fn visible(&self, torrent: TorrentId) -> (i64, i64) {
        let mut counts = (0, 0);
        for (key, row) in &self.peers {
            match (key.torrent_id == torrent)
                .then(|| row.counted_as_seeder())
                .flatten()
            {
                Some(true) => counts.0 += 1,
                Some(false) => counts.1 += 1,
                None => {}
            }
        }
        counts
    }
}
