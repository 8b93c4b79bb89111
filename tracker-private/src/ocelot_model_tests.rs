//! One test per rule of the Ocelot model, each naming its source line.

use super::*;
use tracker_proto::AnnounceEvent::{Completed, Started, Stopped};

const T: Time = 1_000_000;

fn pk(user: u32) -> Vec<u8> {
    format!("{user:0>32}").into_bytes()
}

fn hash(n: u8) -> Vec<u8> {
    vec![n; 20]
}

/// A 20-byte peer id whose last byte is `n`.
fn pid(n: u8) -> Vec<u8> {
    let mut id = b"-TR4050-000000000000".to_vec();
    id[19] = n;
    id
}

/// Users 1 to 5 (may leech, not protected), torrents 1 and 2 (normal).
fn rows() -> OcelotRows {
    OcelotRows {
        users: (1..=5)
            .map(|id| UserRow {
                id,
                can_leech: true,
                passkey: pk(id),
                protected: false,
            })
            .collect(),
        torrents: (1..=2)
            .map(|id| TorrentRow {
                id: u32::from(id),
                info_hash: hash(id),
                freetorrent: b"0".to_vec(),
                snatched: 0,
            })
            .collect(),
        ..OcelotRows::default()
    }
}

fn model() -> OcelotModel {
    OcelotModel::started(OcelotConfig::default(), &rows())
}

/// User `user`'s peer `p` on torrent `torrent`: a compact leecher with
/// 1000 bytes left, from 10.0.user.p:6881.
fn q(user: u32, torrent: u8, p: u8) -> OcelotQuery {
    OcelotQuery {
        info_hash: hash(torrent),
        peer_id: Some(pid(p)),
        compact: true,
        left: 1000,
        port: 6881,
        ip: format!("10.0.{user}.{p}").into_bytes(),
        user_agent: b"qBittorrent/4.6.0".to_vec(),
        ..OcelotQuery::default()
    }
}

fn seed(user: u32, torrent: u8, p: u8) -> OcelotQuery {
    OcelotQuery {
        left: 0,
        ..q(user, torrent, p)
    }
}

fn go(m: &mut OcelotModel, user: u32, query: &OcelotQuery, now: Time) -> OcelotAnnounced {
    m.announce(&pk(user), query, now)
}

fn answer(a: &OcelotAnnounced) -> &OcelotAnswer {
    a.reply.as_ref().expect("an answer")
}

/// The peers handed out, as (user, last byte of the peer id).
fn who(a: &OcelotAnnounced) -> Vec<(UserId, u8)> {
    answer(a)
        .peers
        .iter()
        .map(|l| (l.user_id, l.peer_id[19]))
        .collect()
}

fn user_delta(user_id: UserId, uploaded: i64, downloaded: i64) -> Vec<UserDelta> {
    vec![UserDelta {
        user_id,
        uploaded,
        downloaded,
    }]
}

// ---- Refusals (`:292-365`, `:773-775`) ----

#[test]
fn refusals_come_in_ocelots_order_and_change_nothing() {
    let mut m = model();
    m.add_whitelist(b"-TR");
    let mut bad = OcelotQuery {
        info_hash: hash(9),
        peer_id: None,
        compact: false,
        ..q(1, 1, 1)
    };
    let mut steps = Vec::new();
    steps.push(m.announce(&pk(9), &bad, T).reply);
    steps.push(go(&mut m, 1, &bad, T).reply);
    bad.info_hash = hash(1);
    steps.push(go(&mut m, 1, &bad, T).reply);
    bad.compact = true;
    steps.push(go(&mut m, 1, &bad, T).reply);
    bad.peer_id = Some(b"-TR4050-0000".to_vec());
    steps.push(go(&mut m, 1, &bad, T).reply);
    bad.peer_id = Some(b"-qB4500-000000000000".to_vec());
    steps.push(go(&mut m, 1, &bad, T).reply);
    let refusals: Vec<_> = steps.into_iter().map(|r| r.unwrap_err()).collect();
    assert_eq!(
        refusals,
        vec![
            OcelotRefusal::PasskeyNotFound,
            OcelotRefusal::UnregisteredTorrent,
            OcelotRefusal::NotCompact,
            OcelotRefusal::NoPeerId,
            OcelotRefusal::InvalidPeerId,
            OcelotRefusal::NotWhitelisted,
        ]
    );
    assert!(m.pending().is_empty());
    assert!(m.torrent(&hash(1)).unwrap().leechers.is_empty());
    bad.peer_id = Some(pid(1));
    assert!(go(&mut m, 1, &bad, T).reply.is_ok());
}

#[test]
fn refusal_words_are_ocelots() {
    let texts: Vec<String> = [
        OcelotRefusal::PasskeyNotFound,
        OcelotRefusal::UnregisteredTorrent,
        OcelotRefusal::DeletedTorrent(0),
        OcelotRefusal::DeletedTorrent(22),
        OcelotRefusal::DeletedTorrent(23),
        OcelotRefusal::NotCompact,
        OcelotRefusal::NoPeerId,
        OcelotRefusal::InvalidPeerId,
        OcelotRefusal::NotWhitelisted,
        OcelotRefusal::LeechingForbidden,
    ]
    .into_iter()
    .map(OcelotRefusal::text)
    .collect();
    assert_eq!(
        texts,
        [
            "Passkey not found",
            "Unregistered torrent",
            "Unregistered torrent: Dupe",
            "Unregistered torrent: Audience Recording",
            "Unregistered torrent: ",
            "Your client does not support compact announces",
            "No peer ID",
            "Invalid peer ID",
            "Your client is not on the whitelist",
            "Access denied, leeching forbidden",
        ]
    );
    assert_eq!(deletion_reason(5), "Disallowed Format");
    assert_eq!(deletion_reason(14), "Specifically Banned");
    assert_eq!(deletion_reason(-1), "");
}

#[test]
fn a_deleted_torrent_answers_its_reason_until_the_reaper_drops_it() {
    let mut m = model();
    m.add_torrent(&hash(3), 3, Some(b"0"));
    m.add_torrent(&hash(4), 4, Some(b"0"));
    m.delete_torrent(&hash(1), Some(0), T);
    m.delete_torrent(&hash(2), None, T);
    m.delete_torrent(&hash(3), Some(99), T);
    m.delete_torrent(&hash(4), Some(-1), T);
    // An unknown torrent leaves no reason.
    m.delete_torrent(&hash(7), Some(1), T);
    let refusal = |m: &mut OcelotModel, t: u8, now| go(m, 1, &q(1, t, 1), now).reply.unwrap_err();
    assert_eq!(refusal(&mut m, 1, T), OcelotRefusal::DeletedTorrent(0));
    assert_eq!(refusal(&mut m, 2, T), OcelotRefusal::UnregisteredTorrent);
    assert_eq!(refusal(&mut m, 3, T).text(), "Unregistered torrent: ");
    assert_eq!(refusal(&mut m, 4, T), OcelotRefusal::UnregisteredTorrent);
    assert_eq!(refusal(&mut m, 7, T), OcelotRefusal::UnregisteredTorrent);
    // The announce does not look at the reason's age; the reaper does,
    // dropping those at least `del_reason_lifetime` old.
    let lifetime = i64::from(m.config.del_reason_lifetime);
    assert_eq!(
        refusal(&mut m, 1, T + 10 * lifetime),
        OcelotRefusal::DeletedTorrent(0)
    );
    m.reap(T + lifetime - 1);
    assert_eq!(m.del_reason(&hash(1)), Some((0, T)));
    m.reap(T + lifetime);
    assert_eq!(m.del_reason(&hash(1)), None);
    assert_eq!(
        refusal(&mut m, 1, T + lifetime),
        OcelotRefusal::UnregisteredTorrent
    );
    // Added again, it answers (a later reason would replace the old).
    m.add_torrent(&hash(3), 3, Some(b"0"));
    assert!(go(&mut m, 1, &q(1, 3, 1), T).reply.is_ok());
}

#[test]
fn a_leecher_that_may_not_leech_is_accounted_then_refused() {
    let mut m = model();
    m.update_user(&pk(1), Some(b"0"), None);
    let a = go(&mut m, 1, &q(1, 1, 1), T);
    assert_eq!(a.reply, Err(OcelotRefusal::LeechingForbidden));
    assert_eq!(a.records.heavy_peers.len(), 1);
    assert_eq!(
        a.records.torrents,
        vec![TorrentStats {
            torrent_id: 1,
            seeders: 0,
            leechers: 1,
            snatched: 0,
            balance: 0,
        }]
    );
    let (s, l) = m.peer(&hash(1), 1, &pid(1));
    assert!(s.is_none());
    assert!(!l.unwrap().visible);
    let moved = OcelotQuery {
        uploaded: 500,
        downloaded: 300,
        ..q(1, 1, 1)
    };
    let a = go(&mut m, 1, &moved, T + 10);
    assert_eq!(a.reply, Err(OcelotRefusal::LeechingForbidden));
    assert_eq!(a.records.users, user_delta(1, 500, 300));
    // Counted, but handed to no one.
    let other = go(&mut m, 2, &q(2, 1, 2), T + 20);
    assert_eq!(answer(&other).incomplete, 2);
    assert!(who(&other).is_empty());
    // A stop too: credited, removed, refused.
    let stop = OcelotQuery {
        event: Stopped,
        uploaded: 600,
        ..moved
    };
    let a = go(&mut m, 1, &stop, T + 30);
    assert_eq!(a.reply, Err(OcelotRefusal::LeechingForbidden));
    assert_eq!(a.records.users, user_delta(1, 100, 0));
    assert!(!a.records.heavy_peers[0].active);
    assert_eq!(m.peer(&hash(1), 1, &pid(1)), (None, None));
    // Seeding is answered, and visible.
    let s = go(&mut m, 1, &seed(1, 1, 3), T + 40);
    assert_eq!(who(&s), vec![(2, 2)]);
    assert!(m.peer(&hash(1), 1, &pid(3)).0.unwrap().visible);
}

// ---- Finding the peer (`:401-446`) ----

#[test]
fn an_unknown_leecher_is_inserted_and_credited_nothing() {
    let mut m = model();
    let first = OcelotQuery {
        uploaded: 5000,
        downloaded: 7000,
        ..q(1, 1, 1)
    };
    let a = go(&mut m, 1, &first, T);
    assert!(a.records.users.is_empty());
    let heavy = &a.records.heavy_peers[0];
    assert_eq!((heavy.uploaded, heavy.downloaded), (5000, 7000));
    assert_eq!((heavy.timespent, heavy.announced), (0, 1));
    let p = m.peer(&hash(1), 1, &pid(1)).1.unwrap();
    assert_eq!((p.uploaded, p.downloaded), (5000, 7000));
    assert_eq!(m.torrent(&hash(1)).unwrap().balance, 0);
}

#[test]
fn an_unknown_seeder_is_inserted_as_a_seeder() {
    let mut m = model();
    let a = go(&mut m, 1, &seed(1, 1, 1), T);
    assert_eq!((answer(&a).complete, answer(&a).incomplete), (1, 0));
    assert!(a.records.snatches.is_empty());
    assert!(m.peer(&hash(1), 1, &pid(1)).0.is_some());
}

#[test]
fn a_seeder_reporting_left_gets_a_second_entry_and_keeps_the_first() {
    let mut m = model();
    go(&mut m, 1, &seed(1, 1, 1), T);
    let again = OcelotQuery {
        uploaded: 50,
        ..q(1, 1, 1)
    };
    let a = go(&mut m, 1, &again, T + 10);
    assert!(a.records.users.is_empty());
    assert_eq!((answer(&a).complete, answer(&a).incomplete), (1, 1));
    let (s, l) = m.peer(&hash(1), 1, &pid(1));
    assert!(s.is_some() && l.is_some());
}

#[test]
fn completing_beside_a_stale_seeder_entry_charges_and_credits_twice() {
    // The seeder entry is kept when the leecher completes (`insert` does
    // not replace, `:631-633`), and the next announce is measured from it.
    let mut m = model();
    let at = |up, down, left| OcelotQuery {
        uploaded: up,
        downloaded: down,
        left,
        ..q(1, 1, 1)
    };
    go(&mut m, 1, &at(0, 1000, 0), T);
    assert!(go(&mut m, 1, &at(0, 1000, 500), T + 10)
        .records
        .users
        .is_empty());
    let a = go(&mut m, 1, &at(100, 1300, 500), T + 20);
    assert_eq!(a.records.users, user_delta(1, 100, 300));
    let done = OcelotQuery {
        event: Completed,
        ..at(100, 1500, 0)
    };
    let c = go(&mut m, 1, &done, T + 30);
    assert_eq!(c.records.users, user_delta(1, 0, 200));
    assert_eq!(c.records.snatches.len(), 1);
    assert_eq!((answer(&c).complete, answer(&c).incomplete), (1, 0));
    let (s, l) = m.peer(&hash(1), 1, &pid(1));
    assert!(l.is_none());
    let s = s.unwrap();
    assert_eq!((s.uploaded, s.downloaded, s.last_announced), (0, 1000, T));
    let n = go(&mut m, 1, &at(100, 1500, 0), T + 40);
    assert_eq!(n.records.users, user_delta(1, 100, 500));
    // 100 bytes up and 500 down, credited 200 and charged 1000.
    m.flush();
    assert_eq!(m.db.users_leech_stats[&1], (200, 1000));
}

#[test]
fn completed_by_an_unknown_peer_inserts_a_seeder_and_counts() {
    let mut m = model();
    let done = OcelotQuery {
        event: Completed,
        downloaded: 900,
        ..seed(1, 1, 1)
    };
    let a = go(&mut m, 1, &done, T);
    assert!(a.records.users.is_empty());
    assert_eq!(a.records.snatches.len(), 1);
    assert_eq!(a.records.torrents[0].snatched, 1);
    assert_eq!(answer(&a).downloaded, 1);
    assert_eq!(answer(&a).complete, 1);
}

#[test]
fn completed_by_a_known_seeder_is_no_completion() {
    let mut m = model();
    go(&mut m, 1, &seed(1, 1, 1), T);
    let done = OcelotQuery {
        event: Completed,
        ..seed(1, 1, 1)
    };
    let a = go(&mut m, 1, &done, T + 10);
    assert!(a.records.snatches.is_empty());
    assert!(a.records.torrents.is_empty());
    assert_eq!(m.torrent(&hash(1)).unwrap().completed, 0);
}

#[test]
fn completed_by_a_leecher_moves_it_credits_and_counts() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    let done = OcelotQuery {
        event: Completed,
        downloaded: 1000,
        ..seed(1, 1, 1)
    };
    let a = go(&mut m, 1, &done, T + 10);
    assert_eq!(a.records.users, user_delta(1, 0, 1000));
    assert_eq!(
        a.records.snatches,
        vec![Snatch {
            user_id: 1,
            torrent_id: 1,
            tstamp: T + 10,
            ip: b"10.0.1.1".to_vec(),
        }]
    );
    assert_eq!(
        a.records.torrents,
        vec![TorrentStats {
            torrent_id: 1,
            seeders: 1,
            leechers: 0,
            snatched: 1,
            balance: -1000,
        }]
    );
    assert_eq!(a.records.heavy_peers[0].remaining, 0);
    assert_eq!(m.peer(&hash(1), 1, &pid(1)).1, None);
    assert!(m.peer(&hash(1), 1, &pid(1)).0.is_some());
}

#[test]
fn completed_with_bytes_left_is_no_completion() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    let early = OcelotQuery {
        event: Completed,
        left: 5,
        ..q(1, 1, 1)
    };
    let a = go(&mut m, 1, &early, T + 10);
    assert!(a.records.snatches.is_empty());
    assert_eq!(answer(&a).incomplete, 1);
}

#[test]
fn a_leecher_done_without_completed_moves_with_no_snatch() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    let a = go(&mut m, 1, &seed(1, 1, 1), T + 10);
    assert!(a.records.snatches.is_empty());
    // The move alone writes the peer (heavy), not the torrent.
    assert_eq!(a.records.heavy_peers.len(), 1);
    assert!(a.records.torrents.is_empty());
    assert_eq!((answer(&a).complete, answer(&a).incomplete), (1, 0));
    assert_eq!(answer(&a).downloaded, 0);
}

// ---- Credit (`:449-523`) ----

#[test]
fn started_on_a_known_peer_credits_nothing_and_resets_its_base() {
    let mut m = model();
    let at = |up, down| OcelotQuery {
        uploaded: up,
        downloaded: down,
        ..q(1, 1, 1)
    };
    go(&mut m, 1, &at(100, 100), T);
    let restarted = OcelotQuery {
        event: Started,
        ..at(900, 900)
    };
    let a = go(&mut m, 1, &restarted, T + 10);
    assert!(a.records.users.is_empty());
    assert_eq!(a.records.torrents.len(), 1);
    let heavy = &a.records.heavy_peers[0];
    assert_eq!((heavy.timespent, heavy.announced), (0, 1));
    let a = go(&mut m, 1, &at(1000, 950), T + 20);
    assert_eq!(a.records.users, user_delta(1, 100, 50));
    let heavy = &a.records.heavy_peers[0];
    assert_eq!((heavy.timespent, heavy.announced), (10, 2));
}

#[test]
fn a_counter_gone_back_credits_nothing_and_resets_but_keeps_corrupt() {
    let mut m = model();
    let at = |up, down, corrupt| OcelotQuery {
        uploaded: up,
        downloaded: down,
        corrupt,
        ..q(1, 1, 1)
    };
    go(&mut m, 1, &at(1000, 1000, 50), T);
    let a = go(&mut m, 1, &at(999, 5000, 80), T + 10);
    assert!(a.records.users.is_empty());
    assert!(a.records.torrents.is_empty());
    assert_eq!(a.records.heavy_peers[0].announced, 2);
    let p = m.peer(&hash(1), 1, &pid(1)).1.unwrap();
    assert_eq!((p.uploaded, p.downloaded, p.corrupt), (999, 5000, 50));
    let a = go(&mut m, 1, &at(1099, 5100, 80), T + 20);
    assert_eq!(a.records.users, user_delta(1, 100, 100));
    assert_eq!(a.records.torrents[0].balance, -30);
}

#[test]
fn deltas_are_credited_raw_and_move_the_balance() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    let a = go(
        &mut m,
        1,
        &OcelotQuery {
            uploaded: 700,
            downloaded: 300,
            ..q(1, 1, 1)
        },
        T + 10,
    );
    assert_eq!(a.records.users, user_delta(1, 700, 300));
    assert_eq!(m.torrent(&hash(1)).unwrap().balance, 400);
    // Negative counters count as 0.
    let a = go(
        &mut m,
        1,
        &OcelotQuery {
            uploaded: -5,
            downloaded: -5,
            ..q(1, 1, 1)
        },
        T + 20,
    );
    assert!(a.records.users.is_empty());
    assert_eq!(a.records.heavy_peers[0].uploaded, 0);
}

#[test]
fn corrupt_alone_moves_the_balance_and_credits_nobody() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    let a = go(
        &mut m,
        1,
        &OcelotQuery {
            corrupt: 40,
            ..q(1, 1, 1)
        },
        T + 10,
    );
    assert!(a.records.users.is_empty());
    assert_eq!(a.records.torrents[0].balance, -40);
    let heavy = &a.records.heavy_peers[0];
    assert_eq!((heavy.corrupt, heavy.upspeed), (40, 0));
}

#[test]
fn speeds_are_raw_bytes_per_second_since_the_last_announce() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    let at = |up, down| OcelotQuery {
        uploaded: up,
        downloaded: down,
        ..q(1, 1, 1)
    };
    let a = go(&mut m, 1, &at(1000, 500), T + 10);
    let heavy = &a.records.heavy_peers[0];
    assert_eq!((heavy.upspeed, heavy.downspeed), (100, 50));
    // Within the same second: no speed.
    let a = go(&mut m, 1, &at(2000, 500), T + 10);
    assert_eq!(a.records.heavy_peers[0].upspeed, 0);
    let a = go(&mut m, 1, &at(2007, 500), T + 15);
    assert_eq!(a.records.heavy_peers[0].upspeed, 1);
}

#[test]
fn an_unchanged_peer_gets_a_light_record_and_the_torrent_one_hourly() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    let a = go(&mut m, 1, &q(1, 1, 1), T + 3600);
    assert!(a.records.heavy_peers.is_empty() && a.records.users.is_empty());
    assert_eq!(
        a.records.light_peers,
        vec![LightPeer {
            user_id: 1,
            torrent_id: 1,
            timespent: 3600,
            announced: 2,
            peer_id: pid(1),
            mtime: T + 3600,
        }]
    );
    assert!(a.records.torrents.is_empty());
    let a = go(&mut m, 1, &q(1, 1, 1), T + 3601);
    assert_eq!(a.records.torrents.len(), 1);
    assert!(go(&mut m, 1, &q(1, 1, 1), T + 3602)
        .records
        .torrents
        .is_empty());
}

// ---- Freeleech, neutral, tokens (`:501-514`, `:638-641`) ----

fn step(m: &mut OcelotModel, up: i64, down: i64, now: Time) -> OcelotRecords {
    let query = OcelotQuery {
        uploaded: up,
        downloaded: down,
        ..q(1, 1, 1)
    };
    go(m, 1, &query, now).records
}

#[test]
fn neutral_credits_nothing_and_passes_no_token() {
    let mut m = model();
    m.update_torrent(&hash(1), Some(b"2"));
    m.add_token(&hash(1), 1);
    go(&mut m, 1, &q(1, 1, 1), T);
    let r = step(&mut m, 100, 200, T + 10);
    assert!(r.users.is_empty() && r.freeleeches.is_empty());
    assert_eq!(r.torrents[0].balance, -100);
    let done = OcelotQuery {
        event: Completed,
        uploaded: 100,
        downloaded: 300,
        ..seed(1, 1, 1)
    };
    let r = go(&mut m, 1, &done, T + 20).records;
    assert!(r.expired_tokens.is_empty());
    assert!(m.torrent(&hash(1)).unwrap().tokened_users.contains(&1));
}

#[test]
fn free_charges_no_download_and_credits_upload() {
    let mut m = model();
    m.update_torrent(&hash(1), Some(b"1"));
    go(&mut m, 1, &q(1, 1, 1), T);
    let r = step(&mut m, 100, 200, T + 10);
    assert_eq!(r.users, user_delta(1, 100, 0));
    assert!(r.freeleeches.is_empty());
    let r = step(&mut m, 100, 300, T + 20);
    assert!(r.users.is_empty());
    assert_eq!(r.torrents[0].balance, -200);
}

#[test]
fn a_token_charges_no_download_and_records_it_raw_even_when_zero() {
    let mut m = model();
    m.add_token(&hash(1), 1);
    go(&mut m, 1, &q(1, 1, 1), T);
    let r = step(&mut m, 100, 200, T + 10);
    assert_eq!(r.users, user_delta(1, 100, 0));
    let record = |downloaded| {
        vec![FreeleechDelta {
            user_id: 1,
            torrent_id: 1,
            downloaded,
        }]
    };
    assert_eq!(r.freeleeches, record(200));
    let r = step(&mut m, 150, 200, T + 20);
    assert_eq!(r.users, user_delta(1, 50, 0));
    assert_eq!(r.freeleeches, record(0));
    assert!(step(&mut m, 150, 200, T + 30).freeleeches.is_empty());
    // Another user holds none.
    go(&mut m, 2, &q(2, 1, 1), T);
    let other = OcelotQuery {
        downloaded: 200,
        ..q(2, 1, 1)
    };
    assert_eq!(
        go(&mut m, 2, &other, T + 10).records.users,
        user_delta(2, 0, 200)
    );
    // Free and a token: the token's record too.
    m.update_torrent(&hash(1), Some(b"1"));
    assert_eq!(step(&mut m, 150, 300, T + 40).freeleeches, record(100));
}

#[test]
fn a_token_used_on_the_completing_announce_expires() {
    let mut m = model();
    m.add_token(&hash(1), 1);
    go(&mut m, 1, &q(1, 1, 1), T);
    step(&mut m, 0, 100, T + 10);
    let done = OcelotQuery {
        event: Completed,
        downloaded: 200,
        ..seed(1, 1, 1)
    };
    let r = go(&mut m, 1, &done, T + 20).records;
    assert_eq!(r.expired_tokens, vec![(1, 1)]);
    assert!(r.users.is_empty());
    assert!(m.torrent(&hash(1)).unwrap().tokened_users.is_empty());
    // Download is charged from then on.
    go(&mut m, 1, &q(1, 1, 2), T + 30);
    let next = OcelotQuery {
        downloaded: 100,
        ..q(1, 1, 2)
    };
    assert_eq!(
        go(&mut m, 1, &next, T + 40).records.users,
        user_delta(1, 0, 100)
    );
}

#[test]
fn a_completion_that_moved_no_bytes_leaves_the_token() {
    let mut m = model();
    m.add_token(&hash(1), 1);
    go(&mut m, 1, &q(1, 1, 1), T);
    let done = OcelotQuery {
        event: Completed,
        ..seed(1, 1, 1)
    };
    let r = go(&mut m, 1, &done, T + 10).records;
    assert_eq!(r.snatches.len(), 1);
    assert!(r.expired_tokens.is_empty());
    // No bytes: a light record, though the peer moved.
    assert_eq!((r.heavy_peers.len(), r.light_peers.len()), (0, 1));
    assert!(m.torrent(&hash(1)).unwrap().tokened_users.contains(&1));
}

// ---- Completions (`:613-641`) ----

#[test]
fn every_completing_peer_counts_two_of_one_user_included() {
    let mut m = model();
    for p in [1, 2] {
        go(&mut m, 1, &q(1, 1, p), T);
    }
    for p in [1, 2] {
        let done = OcelotQuery {
            event: Completed,
            downloaded: 1000,
            ..seed(1, 1, p)
        };
        assert_eq!(go(&mut m, 1, &done, T + 10).records.snatches.len(), 1);
    }
    assert_eq!(m.torrent(&hash(1)).unwrap().completed, 2);
    // Stopped, then completed again: a third.
    let stop = OcelotQuery {
        event: Stopped,
        ..seed(1, 1, 1)
    };
    go(&mut m, 1, &stop, T + 20);
    let again = OcelotQuery {
        event: Completed,
        ..seed(1, 1, 1)
    };
    assert_eq!(answer(&go(&mut m, 1, &again, T + 30)).downloaded, 3);
    m.flush();
    assert_eq!(m.db.xbt_snatched.len(), 3);
    assert_eq!(m.db.torrents_leech_stats[&1].snatched, 3);
}

#[test]
fn a_protected_user_is_listed_but_its_address_is_not_recorded() {
    let mut m = model();
    m.update_user(&pk(3), None, Some(b"0"));
    let done = OcelotQuery {
        event: Completed,
        ..seed(3, 1, 1)
    };
    let a = go(&mut m, 3, &done, T);
    assert_eq!(a.records.snatches[0].ip, b"");
    assert_eq!(a.records.heavy_peers[0].ip, b"");
    assert_eq!(who(&go(&mut m, 1, &q(1, 1, 1), T)), vec![(3, 1)]);
}

// ---- Stops (`:606-612`, `:754-761`) ----

#[test]
fn a_stop_is_credited_then_removed_and_gets_no_peers() {
    let mut m = model();
    go(&mut m, 2, &seed(2, 1, 1), T);
    go(&mut m, 1, &q(1, 1, 1), T);
    let stop = OcelotQuery {
        event: Stopped,
        uploaded: 100,
        downloaded: 100,
        left: 500,
        ..q(1, 1, 1)
    };
    let a = go(&mut m, 1, &stop, T + 10);
    assert_eq!(a.records.users, user_delta(1, 100, 100));
    assert!(!a.records.heavy_peers[0].active);
    assert_eq!(a.records.torrents[0].leechers, 0);
    assert!(who(&a).is_empty());
    assert_eq!((answer(&a).complete, answer(&a).incomplete), (1, 0));
    assert_eq!(m.peer(&hash(1), 1, &pid(1)), (None, None));
}

#[test]
fn a_stop_that_moved_no_bytes_still_writes_the_peer_inactive_and_the_torrent() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    let stop = OcelotQuery {
        event: Stopped,
        ..q(1, 1, 1)
    };
    let a = go(&mut m, 1, &stop, T + 10);
    assert!(a.records.users.is_empty() && a.records.light_peers.is_empty());
    assert!(!a.records.heavy_peers[0].active);
    assert_eq!(a.records.torrents[0].leechers, 0);
}

#[test]
fn a_stop_of_an_unknown_peer_credits_nothing_and_keeps_nothing() {
    let mut m = model();
    let stop = OcelotQuery {
        event: Stopped,
        uploaded: 100,
        downloaded: 100,
        ..q(1, 1, 1)
    };
    let a = go(&mut m, 1, &stop, T);
    assert!(a.records.users.is_empty());
    let heavy = &a.records.heavy_peers[0];
    assert!(!heavy.active);
    assert_eq!(heavy.uploaded, 100);
    assert_eq!(a.records.torrents[0].leechers, 0);
    assert_eq!(m.peer(&hash(1), 1, &pid(1)), (None, None));
}

#[test]
fn a_seeder_stopping_with_bytes_left_stays_a_seeder() {
    let mut m = model();
    go(&mut m, 1, &seed(1, 1, 1), T);
    let stop = OcelotQuery {
        event: Stopped,
        ..q(1, 1, 1)
    };
    let a = go(&mut m, 1, &stop, T + 10);
    assert_eq!((answer(&a).complete, answer(&a).incomplete), (1, 0));
    assert!(m.peer(&hash(1), 1, &pid(1)).0.is_some());
}

// ---- Addresses and visibility (`:543-577`, `:1246-1250`) ----

#[test]
fn compact_addresses_are_built_from_the_string_with_octets_wrapping() {
    let port = 6881;
    assert_eq!(
        compact_address(b"1.2.3.4", port),
        (vec![1, 2, 3, 4, 0x1a, 0xe1], false)
    );
    assert_eq!(compact_address(b"300.1.1.1", port).0[0], 44);
    assert_eq!(compact_address(b"1..2.3", port).0[..4], [1, 0, 2, 3]);
    for bad in [&b"1.2.3"[..], b"", b"1.2.3.4.5", b"::1", b"1.2.3.4 "] {
        assert_eq!(compact_address(bad, port), (vec![], true), "{bad:?}");
    }
}

#[test]
fn an_invalid_address_is_warned_counted_and_listed_to_nobody() {
    let mut m = model();
    let v6 = OcelotQuery {
        ip: b"2001:db8::1".to_vec(),
        ..q(2, 1, 1)
    };
    let a = go(&mut m, 2, &v6, T);
    assert_eq!(answer(&a).warning, Some(IP_WARNING));
    assert_eq!(a.records.heavy_peers[0].ip, b"2001:db8::1");
    // Unchanged address: not rebuilt, still warned.
    assert_eq!(
        answer(&go(&mut m, 2, &v6, T + 10)).warning,
        Some(IP_WARNING)
    );
    let l = go(&mut m, 1, &q(1, 1, 1), T + 10);
    assert_eq!(answer(&l).incomplete, 2);
    assert!(who(&l).is_empty());
    let v4 = go(&mut m, 2, &q(2, 1, 1), T + 20);
    assert_eq!(answer(&v4).warning, None);
    assert_eq!(who(&go(&mut m, 1, &q(1, 1, 1), T + 20)), vec![(2, 1)]);
}

#[test]
fn visibility_is_set_at_the_peers_own_announce() {
    let mut m = model();
    go(&mut m, 2, &q(2, 1, 1), T);
    m.update_user(&pk(2), Some(b"0"), None);
    assert_eq!(who(&go(&mut m, 1, &q(1, 1, 1), T)), vec![(2, 1)]);
    go(&mut m, 2, &q(2, 1, 1), T + 10);
    assert!(who(&go(&mut m, 1, &q(1, 1, 1), T + 10)).is_empty());
}

// ---- Peer selection (`:597-717`) ----

#[test]
fn peer_keys_order_the_lists_by_a_peer_id_byte_then_the_decimal_user_id() {
    let id = pid(7);
    let key = peer_key(1, 12, &id);
    assert_eq!(key[0], id[13]);
    assert_eq!(&key[1..3], b"12");
    assert_eq!(&key[3..], &id[..]);
    assert_eq!(peer_key(7, 1, &id)[0], 7);
    assert_eq!(peer_key(15, 1, &id)[0], 7);

    let mut m = model();
    m.add_user(&pk(9), 9, None);
    m.add_user(&pk(10), 10, None);
    let mut late = seed(2, 1, 1);
    late.peer_id.as_mut().unwrap()[13] = b'1';
    go(&mut m, 2, &late, T);
    go(&mut m, 9, &seed(9, 1, 1), T);
    go(&mut m, 10, &seed(10, 1, 1), T);
    assert_eq!(
        who(&go(&mut m, 1, &q(1, 1, 1), T)),
        vec![(10, 1), (9, 1), (2, 1)]
    );
}

#[test]
fn a_leecher_gets_seeders_then_other_leechers_skipping_its_own_and_hidden() {
    let mut m = model();
    go(&mut m, 1, &seed(1, 1, 2), T);
    go(&mut m, 2, &seed(2, 1, 1), T);
    go(&mut m, 3, &seed(3, 1, 1), T);
    go(&mut m, 4, &q(4, 1, 1), T);
    let hidden = OcelotQuery {
        ip: b"::1".to_vec(),
        ..q(5, 1, 1)
    };
    go(&mut m, 5, &hidden, T);
    // User 2's leecher at the announcer's address and port.
    let same = OcelotQuery {
        ip: b"10.0.1.1".to_vec(),
        ..q(2, 1, 3)
    };
    go(&mut m, 2, &same, T);
    let a = go(&mut m, 1, &q(1, 1, 1), T);
    assert_eq!(who(&a), vec![(2, 1), (3, 1), (4, 1)]);
    assert_eq!(answer(&a).peers[0].compact, vec![10, 0, 2, 1, 0x1a, 0xe1]);

    // A deleted user's peers: skipped for leechers, not for seeders.
    m.remove_user(&pk(3));
    m.remove_user(&pk(4));
    assert_eq!(who(&go(&mut m, 1, &q(1, 1, 1), T + 10)), vec![(2, 1)]);
    let s = go(&mut m, 2, &seed(2, 1, 1), T + 10);
    assert_eq!(who(&s), vec![(1, 1), (4, 1)]);
}

#[test]
fn a_lone_leecher_is_handed_no_leechers() {
    let mut m = model();
    assert!(who(&go(&mut m, 1, &q(1, 1, 1), T)).is_empty());
    go(&mut m, 2, &q(2, 1, 1), T);
    assert_eq!(who(&go(&mut m, 1, &q(1, 1, 1), T)), vec![(2, 1)]);
}

#[test]
fn a_seeder_gets_leechers_only_and_not_its_users_own() {
    let mut m = model();
    go(&mut m, 2, &seed(2, 1, 1), T);
    go(&mut m, 1, &q(1, 1, 1), T);
    go(&mut m, 3, &q(3, 1, 1), T);
    assert_eq!(who(&go(&mut m, 3, &seed(3, 1, 2), T)), vec![(1, 1)]);
}

#[test]
fn the_seeder_cursor_goes_round_but_skips_the_one_after_the_first() {
    let mut m = model();
    for user in 2..=5 {
        go(&mut m, user, &seed(user, 1, 1), T);
    }
    let one = OcelotQuery {
        numwant: Some(1),
        ..q(1, 1, 1)
    };
    let rounds: Vec<_> = (0..5)
        .map(|i| who(&go(&mut m, 1, &one, T + i))[0].0)
        .collect();
    assert_eq!(rounds, vec![2, 4, 5, 2, 4]);
    assert_eq!(
        m.torrent(&hash(1)).unwrap().last_selected_seeder,
        peer_key(1, 4, &pid(1))
    );

    let mut m = model();
    for user in 2..=4 {
        go(&mut m, user, &seed(user, 1, 1), T);
    }
    let two = OcelotQuery {
        numwant: Some(2),
        ..q(1, 1, 1)
    };
    let rounds: Vec<_> = (0..3).map(|i| who(&go(&mut m, 1, &two, T + i))).collect();
    assert_eq!(
        rounds,
        vec![
            vec![(2, 1), (3, 1)],
            vec![(4, 1), (2, 1)],
            vec![(4, 1), (2, 1)]
        ]
    );
    // The cursor's seeder gone: from the start.
    let stop = OcelotQuery {
        event: Stopped,
        ..seed(2, 1, 1)
    };
    go(&mut m, 2, &stop, T + 10);
    assert_eq!(who(&go(&mut m, 1, &two, T + 10)), vec![(3, 1), (4, 1)]);
}

#[test]
fn numwant_defaults_to_the_limit_caps_at_it_and_wraps_when_negative() {
    let config = OcelotConfig {
        numwant_limit: 2,
        ..OcelotConfig::default()
    };
    let mut m = OcelotModel::started(config, &rows());
    for user in 2..=4 {
        go(&mut m, user, &seed(user, 1, 1), T);
    }
    let count = |m: &mut OcelotModel, numwant| {
        let query = OcelotQuery {
            numwant,
            ..q(1, 1, 1)
        };
        who(&go(m, 1, &query, T)).len()
    };
    assert_eq!(count(&mut m, None), 2);
    assert_eq!(count(&mut m, Some(10)), 2);
    assert_eq!(count(&mut m, Some(1)), 1);
    assert_eq!(count(&mut m, Some(0)), 0);
    assert_eq!(count(&mut m, Some(-1)), 3);
}

// ---- The answer (`:777-799`) ----

#[test]
fn the_answer_carries_the_counts_completions_and_interval_bounds() {
    let mut r = rows();
    r.torrents[0].snatched = 41;
    let mut m = OcelotModel::started(OcelotConfig::default(), &r);
    m.update_announce_interval(b"900");
    m.update_announce_jitter(b"30");
    go(&mut m, 2, &seed(2, 1, 1), T);
    let a = go(&mut m, 1, &q(1, 1, 1), T);
    let answer = answer(&a);
    assert_eq!(
        (answer.complete, answer.incomplete, answer.downloaded),
        (1, 1, 41)
    );
    assert_eq!(answer.min_interval, 900);
    assert_eq!(answer.interval, 900..=930);
    assert_eq!(answer.warning, None);
    // A negative value wraps as Ocelot's unsigned setting does.
    m.update_announce_jitter(b"-1");
    assert_eq!(m.config.announce_jitter, u32::MAX);
}

// ---- Scrape (`:811-839`) ----

#[test]
fn a_scrape_answers_known_hashes_in_order_and_skips_the_rest() {
    let mut m = model();
    go(&mut m, 1, &seed(1, 2, 1), T);
    go(&mut m, 2, &q(2, 1, 1), T);
    assert_eq!(
        m.scrape(&pk(9), &[hash(1)]),
        Err(OcelotRefusal::PasskeyNotFound)
    );
    let scraped = m
        .scrape(&pk(1), &[hash(2), hash(9), hash(1), hash(2)])
        .unwrap();
    let counts: Vec<_> = scraped
        .iter()
        .map(|s| (s.info_hash[0], s.complete, s.incomplete, s.downloaded))
        .collect();
    assert_eq!(counts, vec![(2, 1, 0, 0), (1, 0, 1, 0), (2, 1, 0, 0)]);
}

// ---- Update actions (`:841-1079`) ----

#[test]
fn change_passkey_moves_the_object_and_the_same_key_drops_it() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    m.change_passkey(&pk(1), &pk(11));
    assert_eq!(
        go(&mut m, 1, &q(1, 1, 1), T).reply,
        Err(OcelotRefusal::PasskeyNotFound)
    );
    let a = m.announce(
        &pk(11),
        &OcelotQuery {
            downloaded: 10,
            ..q(1, 1, 1)
        },
        T + 10,
    );
    // The same user: its peer continues.
    assert_eq!(a.records.users, user_delta(1, 0, 10));
    m.change_passkey(&pk(99), &pk(12));
    assert!(m.user(&pk(12)).is_none());
    m.change_passkey(&pk(11), &pk(11));
    assert!(m.user(&pk(11)).is_none());
}

#[test]
fn add_torrent_adds_or_only_retypes() {
    let mut m = model();
    m.add_torrent(&hash(3), 3, Some(b"0"));
    let t = m.torrent(&hash(3)).unwrap();
    assert_eq!(
        (t.id, t.free, t.completed, t.balance),
        (3, FreeType::Normal, 0, 0)
    );
    let done = OcelotQuery {
        event: Completed,
        ..seed(1, 1, 1)
    };
    go(&mut m, 1, &done, T);
    m.add_torrent(&hash(1), 99, Some(b"1"));
    let t = m.torrent(&hash(1)).unwrap();
    assert_eq!(
        (t.id, t.free, t.completed, t.seeders.len()),
        (1, FreeType::Free, 1, 1)
    );
    m.add_torrent(&hash(1), 99, None);
    assert_eq!(m.torrent(&hash(1)).unwrap().free, FreeType::Neutral);
}

#[test]
fn freetorrent_reads_differently_in_updates_and_loads() {
    assert_eq!(FreeType::from_update(Some(b"0")), FreeType::Normal);
    assert_eq!(FreeType::from_update(Some(b"1")), FreeType::Free);
    assert_eq!(FreeType::from_update(Some(b"2")), FreeType::Neutral);
    assert_eq!(FreeType::from_update(Some(b"x")), FreeType::Neutral);
    assert_eq!(FreeType::from_update(None), FreeType::Neutral);
    assert_eq!(FreeType::from_db(b"0"), FreeType::Normal);
    assert_eq!(FreeType::from_db(b"1"), FreeType::Free);
    assert_eq!(FreeType::from_db(b"2"), FreeType::Neutral);
    assert_eq!(FreeType::from_db(b"x"), FreeType::Normal);
}

#[test]
fn update_torrents_cuts_the_hashes_every_twenty_bytes() {
    let mut m = model();
    let mut hashes = [hash(1), hash(2)].concat();
    hashes.extend_from_slice(b"tail");
    m.update_torrents(&hashes, Some(b"1"));
    assert_eq!(m.torrent(&hash(1)).unwrap().free, FreeType::Free);
    assert_eq!(m.torrent(&hash(2)).unwrap().free, FreeType::Free);
    m.update_torrent(&hash(2), Some(b"0"));
    assert_eq!(m.torrent(&hash(2)).unwrap().free, FreeType::Normal);
    m.update_torrent(&hash(9), Some(b"0"));
    assert!(m.torrent(&hash(9)).is_none());
}

#[test]
fn tokens_are_added_and_removed_per_known_torrent() {
    let mut m = model();
    m.add_token(&hash(1), 4);
    m.add_token(&hash(9), 4);
    assert!(m.torrent(&hash(1)).unwrap().tokened_users.contains(&4));
    m.remove_token(&hash(1), 4);
    assert!(m.torrent(&hash(1)).unwrap().tokened_users.is_empty());
}

#[test]
fn delete_torrent_drops_it_and_its_peers() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    m.delete_torrent(&hash(1), Some(14), T);
    assert!(m.torrent(&hash(1)).is_none());
    assert_eq!(
        go(&mut m, 1, &q(1, 1, 1), T).reply.unwrap_err().text(),
        "Unregistered torrent: Specifically Banned"
    );
    m.add_torrent(&hash(1), 1, Some(b"0"));
    assert_eq!(answer(&go(&mut m, 2, &q(2, 1, 1), T)).incomplete, 1);
}

#[test]
fn users_added_removed_and_updated() {
    let mut m = model();
    m.add_user(&pk(7), 7, Some(b"0"));
    assert_eq!(
        m.user(&pk(7)).copied(),
        Some(OcelotUser {
            id: 7,
            can_leech: true,
            protected: true,
            deleted: false,
        })
    );
    // A known passkey keeps its object and id.
    m.add_user(&pk(7), 8, None);
    assert_eq!(m.user(&pk(7)).unwrap().id, 7);
    m.update_user(&pk(7), Some(b"0"), Some(b"1"));
    let u = m.user(&pk(7)).unwrap();
    assert_eq!((u.can_leech, u.protected), (false, false));
    // Missing parameters: may leech, not protected.
    m.update_user(&pk(7), None, None);
    let u = m.user(&pk(7)).unwrap();
    assert_eq!((u.can_leech, u.protected), (true, false));
    m.remove_user(&pk(7));
    assert!(m.user(&pk(7)).is_none());
    let mut keys = [pk(1), pk(2)].concat();
    keys.extend_from_slice(b"short");
    m.remove_users(&keys);
    assert!(m.user(&pk(1)).is_none() && m.user(&pk(2)).is_none());
    assert!(m.user(&pk(3)).is_some());
}

#[test]
fn a_removed_users_peers_stay_deleted_until_they_announce_again() {
    let mut m = model();
    go(&mut m, 2, &seed(2, 1, 1), T);
    m.remove_user(&pk(2));
    let object = m.peer(&hash(1), 2, &pid(1)).0.unwrap().user;
    assert!(m.user_object(object).unwrap().deleted);
    // Added again: a new object; the old peer still points at the old.
    m.add_user(&pk(2), 2, None);
    assert!(who(&go(&mut m, 1, &q(1, 1, 1), T)).is_empty());
    go(&mut m, 2, &seed(2, 1, 1), T + 10);
    assert_eq!(who(&go(&mut m, 1, &q(1, 1, 1), T + 10)), vec![(2, 1)]);
}

#[test]
fn the_whitelist_matches_prefixes_of_the_peer_id() {
    let mut m = model();
    m.add_whitelist(b"-qB");
    m.add_whitelist(b"-qB");
    m.add_whitelist(b"-TR4050-0000000000000");
    let refused = |m: &mut OcelotModel| go(m, 1, &q(1, 1, 1), T).reply.is_err();
    // Longer than the peer id: never a match.
    assert!(refused(&mut m));
    m.edit_whitelist(b"-zz", b"-TR40");
    assert!(!refused(&mut m));
    m.remove_whitelist(b"-TR40");
    m.remove_whitelist(b"-qB");
    assert_eq!(
        m.whitelist(),
        [b"-qB".to_vec(), b"-TR4050-0000000000000".to_vec()]
    );
    assert!(refused(&mut m));
    m.add_whitelist(b"");
    assert!(!refused(&mut m));
}

// ---- The reaper (`:1101-1167`) ----

#[test]
fn the_reaper_drops_silent_peers_and_records_only_emptied_torrents() {
    let mut m = model();
    let timeout = i64::from(m.config.peers_timeout);
    go(&mut m, 1, &q(1, 1, 1), T);
    go(&mut m, 2, &seed(2, 1, 1), T + 100);
    go(&mut m, 1, &q(1, 2, 1), T);
    let moved = OcelotQuery {
        uploaded: 50,
        ..q(1, 2, 1)
    };
    go(&mut m, 1, &moved, T + 1);
    // Exactly `peers_timeout` silent: kept.
    assert!(m.reap(T + timeout).is_empty());
    assert!(m.peer(&hash(1), 1, &pid(1)).1.is_some());
    let r = m.reap(T + timeout + 2);
    assert_eq!(
        r.torrents,
        vec![TorrentStats {
            torrent_id: 2,
            seeders: 0,
            leechers: 0,
            snatched: 0,
            balance: 50,
        }]
    );
    assert!(r.heavy_peers.is_empty() && r.light_peers.is_empty());
    assert_eq!(m.peer(&hash(1), 1, &pid(1)), (None, None));
    assert!(m.peer(&hash(1), 2, &pid(1)).0.is_some());
    // Back after the reaper: a new peer, credited nothing.
    let back = OcelotQuery {
        uploaded: 500,
        ..q(1, 1, 1)
    };
    assert!(go(&mut m, 1, &back, T + timeout + 3)
        .records
        .users
        .is_empty());
}

// ---- Loads (`db.cpp:89-247`) ----

#[test]
fn a_load_reads_the_rows_as_ocelot_does() {
    let mut r = rows();
    r.torrents[0].freetorrent = b"2".to_vec();
    r.torrents[0].snatched = 7;
    r.torrents.push(TorrentRow {
        id: 3,
        info_hash: Vec::new(),
        freetorrent: b"1".to_vec(),
        snatched: 0,
    });
    r.users[2].protected = true;
    r.users[3].can_leech = false;
    r.tokens = vec![(1, hash(1)), (2, hash(9))];
    r.whitelist = vec![b"-TR".to_vec()];
    let m = OcelotModel::started(OcelotConfig::default(), &r);
    let t = m.torrent(&hash(1)).unwrap();
    assert_eq!((t.free, t.completed), (FreeType::Neutral, 7));
    assert_eq!(t.tokened_users, BTreeSet::from([1]));
    assert!(m.torrent(&[]).is_none());
    assert!(m.user(&pk(3)).unwrap().protected);
    assert!(!m.user(&pk(4)).unwrap().can_leech);
    assert_eq!(m.whitelist(), [b"-TR".to_vec()]);
}

#[test]
fn a_reload_keeps_known_torrents_and_users_and_drops_the_missing() {
    let mut r = rows();
    r.tokens = vec![(1, hash(1))];
    let mut m = OcelotModel::started(OcelotConfig::default(), &r);
    let done = OcelotQuery {
        event: Completed,
        ..seed(2, 1, 1)
    };
    go(&mut m, 2, &done, T);
    let mut again = rows();
    again.torrents[0].freetorrent = b"1".to_vec();
    again.torrents[0].snatched = 50;
    again.torrents[0].id = 77;
    again.torrents.remove(1);
    again.tokens = vec![(3, hash(1))];
    again.users.remove(1);
    again.users[0].can_leech = false;
    m.load(&again);
    let t = m.torrent(&hash(1)).unwrap();
    assert_eq!(
        (t.id, t.free, t.completed, t.seeders.len()),
        (1, FreeType::Free, 1, 1)
    );
    assert_eq!(t.tokened_users, BTreeSet::from([3]));
    // A torrent gone from the rows answers with no reason.
    // (before the user's leeching is judged).
    assert_eq!(
        go(&mut m, 1, &q(1, 2, 1), T).reply,
        Err(OcelotRefusal::UnregisteredTorrent)
    );
    assert!(!m.user(&pk(1)).unwrap().can_leech);
    assert!(m.user(&pk(2)).is_none());
    let object = m.peer(&hash(1), 2, &pid(1)).0.unwrap().user;
    assert!(m.user_object(object).unwrap().deleted);
}

// ---- The flush (`db.cpp:311-477`) ----

#[test]
fn a_flush_applies_each_statement_as_its_sql_does() {
    let mut m = model();
    go(&mut m, 1, &q(1, 1, 1), T);
    step(&mut m, 10, 20, T + 10);
    let moved = OcelotQuery {
        uploaded: 20,
        downloaded: 30,
        ip: b"10.9.9.9".to_vec(),
        user_agent: b"other".to_vec(),
        ..q(1, 1, 1)
    };
    go(&mut m, 1, &moved, T + 20);
    m.flush();
    assert!(m.pending().is_empty());
    assert_eq!(m.db.users_leech_stats[&1], (20, 30));
    assert_eq!(
        m.db.torrents_leech_stats[&1],
        TlsRow {
            seeders: 0,
            leechers: 1,
            snatched: 0,
            balance: -10,
        }
    );
    let row = &m.db.xbt_files_users[&(1, 1, pid(1))];
    // ip and useragent are written only by the insert.
    assert_eq!(
        (&row.ip[..], &row.useragent[..]),
        (&b"10.0.1.1"[..], &b"qBittorrent/4.6.0"[..])
    );
    assert_eq!(
        (row.uploaded, row.downloaded, row.announced, row.mtime),
        (20, 30, 3, T + 20)
    );

    // A light record before a heavy one in the same flush is applied after
    // it: the older time wins.
    go(&mut m, 1, &moved, T + 30);
    step(&mut m, 40, 30, T + 40);
    m.flush();
    let row = &m.db.xbt_files_users[&(1, 1, pid(1))];
    assert_eq!((row.uploaded, row.mtime, row.upspeed), (40, T + 30, 0));

    // A light record whose row is gone inserts the columns' defaults.
    m.db.xbt_files_users.clear();
    step(&mut m, 40, 30, T + 50);
    m.flush();
    let row = &m.db.xbt_files_users[&(1, 1, pid(1))];
    assert_eq!(
        (row.active, row.remaining, row.uploaded, row.timespent),
        (true, 0, 0, 50)
    );
}

#[test]
fn a_flush_adds_freeleech_downloads_and_sends_token_expiries() {
    let mut m = model();
    m.add_token(&hash(1), 1);
    go(&mut m, 1, &q(1, 1, 1), T);
    step(&mut m, 0, 100, T + 10);
    step(&mut m, 0, 250, T + 20);
    let done = OcelotQuery {
        event: Completed,
        downloaded: 300,
        ..seed(1, 1, 1)
    };
    go(&mut m, 1, &done, T + 30);
    m.flush();
    assert_eq!(m.db.users_freeleeches[&(1, 1)], 300);
    assert_eq!(m.db.expired_tokens, vec![(1, 1)]);
    assert!(!m.db.users_leech_stats.contains_key(&1));
}

// ---- Reading the request (`misc_functions.cpp`, `:392-400`, `:526-541`) ----

#[test]
fn hex_decode_reads_percent_escapes_as_ocelot_does() {
    assert_eq!(hex_decode(b"%41%6a%4A+"), b"AjJ+");
    // A `%` in the last two bytes is kept.
    assert_eq!(hex_decode(b"a%4"), b"a%4");
    assert_eq!(hex_decode(b"%41"), b"A");
    // A bad first digit leaves '0' (0x30), a bad second adds nothing.
    assert_eq!(hex_decode(b"%g1"), [0x31]);
    assert_eq!(hex_decode(b"%4g"), [0x40]);
}

#[test]
fn numbers_are_read_as_istringstream_reads_them() {
    assert_eq!(strtoint64(b"123abc"), 123);
    assert_eq!(strtoint64(b" \t+42"), 42);
    assert_eq!(strtoint64(b"-7"), -7);
    assert_eq!(strtoint64(b""), 0);
    assert_eq!(strtoint64(b"abc"), 0);
    assert_eq!(strtoint64(b"-"), 0);
    assert_eq!(strtoint64(b"99999999999999999999"), i64::MAX);
    assert_eq!(strtoint64(b"-99999999999999999999"), i64::MIN);
    assert_eq!(strtoint32(b"3000000000"), i32::MAX);
    assert_eq!(strtoint32(b"-1"), -1);
}

#[test]
fn the_event_and_the_address_are_read_as_ocelot_reads_them() {
    assert_eq!(event_from_param(Some(b"started")), Started);
    assert_eq!(event_from_param(Some(b"completed")), Completed);
    assert_eq!(event_from_param(Some(b"stopped")), Stopped);
    assert_eq!(event_from_param(Some(b"paused")), AnnounceEvent::None);
    assert_eq!(event_from_param(Some(b"Stopped")), AnnounceEvent::None);
    assert_eq!(event_from_param(None), AnnounceEvent::None);
    let socket = b"192.0.2.1";
    assert_eq!(announce_ip(Some(b""), Some(b"1.1.1.1"), None, socket), b"");
    assert_eq!(
        announce_ip(None, Some(b"1.1.1.1"), None, socket),
        b"1.1.1.1"
    );
    assert_eq!(
        announce_ip(None, None, Some(b"2.2.2.2, 3.3.3.3"), socket),
        b"2.2.2.2"
    );
    assert_eq!(
        announce_ip(None, None, Some(b" 2.2.2.2"), socket),
        b" 2.2.2.2"
    );
    assert_eq!(announce_ip(None, None, None, socket), socket);
}
