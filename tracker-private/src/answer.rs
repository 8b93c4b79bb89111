//! The JSON bodies of the site API's GET answers, in UNIT3D-Announce's
//! shape, which UNIT3D's `Unit3dAnnounce::getUser`, `getTorrent` and
//! `getStats` read (and partly validate).
//!
//! What the site view does not hold is given by the caller: a user's
//! seeding and leeching counts and the windows of its peer-list limits
//! (see [`crate::lists`]), a torrent's counts and peers, the request rates.

use crate::ledger::PeerSnapshot;
use crate::lists::WindowCount;
use crate::site::{Torrent, TorrentStatus, User};
use serde::Serialize;
use std::collections::BTreeMap;
use tracker_proto::Hex;

/// A torrent's counts, as the caller knows them.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TorrentCounts {
    pub seeders: u32,
    pub leechers: u32,
    pub times_completed: u32,
}

/// GET `stats`: requests and announce answers per second, each over the
/// window its name gives, and times in Unix seconds.
#[derive(Clone, Copy, Debug, Default, PartialEq, Serialize)]
pub struct ApiStats {
    pub created_at: f64,
    pub last_request_at: f64,
    pub last_announce_response_at: f64,
    pub requests_per_1s: f64,
    pub requests_per_10s: f64,
    pub requests_per_60s: f64,
    pub requests_per_900s: f64,
    pub requests_per_7200s: f64,
    pub announce_responses_per_1s: f64,
    pub announce_responses_per_10s: f64,
    pub announce_responses_per_60s: f64,
    pub announce_responses_per_900s: f64,
    pub announce_responses_per_7200s: f64,
}

/// One window of a peer-list limit; UNIT3D checks that each is a float.
#[derive(Serialize)]
struct RateJson {
    count: f64,
    max_count: f64,
    window: f64,
    updated_at: f64,
}

#[derive(Serialize)]
struct Rates {
    rates: Vec<RateJson>,
}

impl Rates {
    fn of(windows: impl IntoIterator<Item = WindowCount>) -> Rates {
        let rates = windows.into_iter().map(|w| RateJson {
            count: w.count,
            max_count: w.max_count,
            window: w.window,
            updated_at: w.updated_at,
        });
        Rates {
            rates: rates.collect(),
        }
    }
}

/// What GET `users/{id}` tells of a user beyond the site's record: its
/// peers, and its peer-list windows (seed lists, then leech lists).
pub struct UserCounts<S, L> {
    pub num_seeding: u32,
    pub num_leeching: u32,
    pub seed_lists: S,
    pub leech_lists: L,
}

#[derive(Serialize)]
struct UserJson<'a> {
    id: u32,
    group_id: i32,
    passkey: &'a str,
    can_download: bool,
    num_seeding: u32,
    num_leeching: u32,
    is_donor: bool,
    is_lifetime: bool,
    receive_seed_list_rates: Rates,
    receive_leech_list_rates: Rates,
}

#[derive(Serialize)]
struct PeerJson {
    ip_address: String,
    port: u16,
    is_seeder: bool,
    is_active: bool,
    is_visible: bool,
    is_connectable: bool,
    has_sent_completed: bool,
    updated_at: u64,
    uploaded: u64,
    downloaded: u64,
}

#[derive(Serialize)]
struct TorrentJson {
    id: u32,
    status: &'static str,
    is_deleted: bool,
    peers: BTreeMap<String, PeerJson>,
    seeders: u32,
    leechers: u32,
    times_completed: u32,
    download_factor: u8,
    upload_factor: u8,
}

/// Serializing these types cannot fail (string keys, no I/O); an empty
/// body would stand for the impossible failure.
fn to_json<T: Serialize>(value: &T) -> Vec<u8> {
    serde_json::to_vec(value).unwrap_or_default()
}

/// GET `users/{id}`. The passkey is in it, as in UNIT3D-Announce: the
/// answer goes only to the holder of the API key.
pub fn user_json<S, L>(user: &User, counts: UserCounts<S, L>) -> Vec<u8>
where
    S: IntoIterator<Item = WindowCount>,
    L: IntoIterator<Item = WindowCount>,
{
    let passkey = String::from_utf8_lossy(&user.passkey.0);
    to_json(&UserJson {
        id: user.id,
        group_id: user.group_id,
        passkey: &passkey,
        can_download: user.can_download,
        num_seeding: counts.num_seeding,
        num_leeching: counts.num_leeching,
        is_donor: user.is_donor,
        is_lifetime: user.is_lifetime,
        receive_seed_list_rates: Rates::of(counts.seed_lists),
        receive_leech_list_rates: Rates::of(counts.leech_lists),
    })
}

/// UNIT3D-Announce's name of a status (serialized as a string).
fn status_name(status: TorrentStatus) -> &'static str {
    match status {
        TorrentStatus::Pending => "Pending",
        TorrentStatus::Approved => "Approved",
        TorrentStatus::Rejected => "Rejected",
        TorrentStatus::Postponed => "Postponed",
        TorrentStatus::Other(_) => "Unknown",
    }
}

/// GET `torrents/{id}`: `peers` is keyed `{user_id}-{PEER_ID_IN_UPPER_HEX}`,
/// the form UNIT3D checks.
pub fn torrent_json(
    torrent: &Torrent,
    counts: TorrentCounts,
    peers: impl IntoIterator<Item = PeerSnapshot>,
) -> Vec<u8> {
    let peers = peers
        .into_iter()
        .map(|p| {
            let key = format!(
                "{}-{}",
                p.key.user_id,
                Hex(&p.key.peer_id.0).to_string().to_ascii_uppercase()
            );
            let peer = PeerJson {
                ip_address: p.row.ip.to_string(),
                port: p.row.port,
                is_seeder: p.row.seeder,
                is_active: p.row.active,
                is_visible: p.row.visible,
                is_connectable: p.row.connectable,
                has_sent_completed: p.has_sent_completed,
                updated_at: p.row.updated_at,
                uploaded: p.row.uploaded,
                downloaded: p.row.downloaded,
            };
            (key, peer)
        })
        .collect();
    to_json(&TorrentJson {
        id: torrent.id,
        status: status_name(torrent.status),
        is_deleted: torrent.is_deleted,
        peers,
        seeders: counts.seeders,
        leechers: counts.leechers,
        times_completed: counts.times_completed,
        download_factor: torrent.download_factor,
        upload_factor: torrent.upload_factor,
    })
}

/// GET `stats`.
pub fn stats_json(stats: &ApiStats) -> Vec<u8> {
    to_json(stats)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::batch::PeerKey;
    use crate::testing::{announce, peer, site, torrent, user};
    use crate::Ledger;
    use serde_json::{json, Value};

    fn parse(bytes: &[u8]) -> Value {
        serde_json::from_slice(bytes).unwrap()
    }

    #[test]
    fn a_user_in_unit3d_announces_shape() {
        let u = user(7, 10);
        let window = WindowCount {
            count: 1.5,
            max_count: 10.0,
            window: 60.0,
            updated_at: 1_700_000_000.0,
        };
        let counts = UserCounts {
            num_seeding: 2,
            num_leeching: 1,
            seed_lists: [window],
            leech_lists: [],
        };
        let text = user_json(&u, counts);
        let v = parse(&text);
        assert_eq!(
            v,
            json!({
                "id": 7, "group_id": 10, "passkey": "00000000000000000000000000000007",
                "can_download": true, "num_seeding": 2, "num_leeching": 1,
                "is_donor": false, "is_lifetime": false,
                "receive_seed_list_rates": {"rates": [{
                    "count": 1.5, "max_count": 10.0, "window": 60.0,
                    "updated_at": 1_700_000_000.0,
                }]},
                "receive_leech_list_rates": {"rates": []},
            })
        );
        // PHP's json_decode makes a float only of a number with a point.
        let text = String::from_utf8(text).unwrap();
        assert!(
            text.contains(r#""max_count":10.0,"window":60.0,"updated_at":1700000000.0"#),
            "{text}"
        );
    }

    #[test]
    fn a_torrent_in_unit3d_announces_shape() {
        let site = site();
        let mut ledger = Ledger::default();
        // The ledger's clock is in microseconds; rows keep seconds.
        ledger
            .announce(
                &site,
                &announce(1, 1, 0xab),
                1_234_000_000,
                &mut tracker_proto::AnswerPeers::default(),
            )
            .unwrap();
        let counts = TorrentCounts {
            seeders: 0,
            leechers: 1,
            times_completed: 5,
        };
        let v = parse(&torrent_json(&torrent(1), counts, ledger.peers_of(1)));
        let key = PeerKey {
            user_id: 1,
            torrent_id: 1,
            peer_id: peer(0xab),
        };
        let name = format!("1-{}", Hex(&key.peer_id.0).to_string().to_uppercase());
        assert!(name.ends_with("AB"));
        assert_eq!(
            v,
            json!({
                "id": 1, "status": "Approved", "is_deleted": false,
                "peers": { name: {
                    "ip_address": "192.0.2.1", "port": 6881, "is_seeder": false,
                    "is_active": true, "is_visible": true, "is_connectable": false,
                    "has_sent_completed": false, "updated_at": 1234,
                    "uploaded": 0, "downloaded": 0,
                }},
                "seeders": 0, "leechers": 1, "times_completed": 5,
                "download_factor": 100, "upload_factor": 100,
            })
        );
        let other = Torrent {
            status: TorrentStatus::Other(7),
            ..torrent(2)
        };
        let v = parse(&torrent_json(&other, TorrentCounts::default(), []));
        assert_eq!(v["status"], "Unknown");
    }

    #[test]
    fn stats_have_the_thirteen_keys() {
        let v = parse(&stats_json(&ApiStats::default()));
        assert_eq!(v.as_object().unwrap().len(), 13);
        assert_eq!(v["announce_responses_per_7200s"], 0.0);
    }
}
