//! The Gazelle view, changed by the site's calls as Gazelle sends them,
//! held to Ocelot's own handling of the same calls (the executable model,
//! `crate::ocelot_model`) but where the module's comment says why not.

use proptest::prelude::*;
use tracker_proto::{InfoHash, PeerId};

use super::request::{parse_update, LeechType};
use super::site::*;
use crate::ocelot_model::{FreeType, OcelotConfig, OcelotModel};
use crate::site::Passkey;

const KEYS: [&[u8; 32]; 3] = [
    b"abcdefghijkmnopqrstuvwxyzABCDEFG",
    b"ABCDEFGabcdefghijkmnopqrstuvwxyz",
    b"zyxwvutsrqponmkjihgfedcbaGFEDCBA",
];
const PREFIXES: [&[u8]; 3] = [b"-qB42", b"-TR2", b"M"];

fn key(i: usize) -> Passkey {
    Passkey(*KEYS[i])
}

fn hash(i: usize) -> [u8; 20] {
    [i as u8 + 1; 20]
}

/// An info-hash as Gazelle sends it (`rawurlencode`).
fn encoded(hash: &[u8; 20]) -> String {
    hash.iter().map(|b| format!("%{b:02X}")).collect()
}

fn text(bytes: &[u8]) -> &str {
    std::str::from_utf8(bytes).unwrap()
}

fn site() -> GazelleSite {
    GazelleSite::from_records(
        GazelleRecords {
            users: vec![GazelleUser {
                id: 1,
                passkey: key(0),
                can_leech: true,
                protected: false,
            }],
            torrents: vec![GazelleTorrent {
                id: 10,
                info_hash: InfoHash(hash(0)),
                leech: LeechType::Normal,
                snatched: 4,
            }],
            tokens: vec![],
            whitelist: vec![],
        },
        1800,
        240,
    )
}

fn apply(site: &mut GazelleSite, query: &str, now: u64) -> Applied {
    site.apply(&parse_update(query.as_bytes()), now)
}

#[test]
fn torrents_come_and_go_with_their_reasons() {
    let mut site = site();
    let h0 = InfoHash(hash(0));
    assert_eq!(site.torrent(&h0).unwrap().snatched, 4);
    // Added again: only its leech type changes.
    let q = format!(
        "action=add_torrent&info_hash={}&id=99&freetorrent=1",
        encoded(&hash(0))
    );
    assert_eq!(apply(&mut site, &q, 0), Applied::Changed);
    let t = site.torrent(&h0).unwrap();
    assert_eq!((t.id, t.leech, t.snatched), (10, LeechType::Free, 4));
    // Deleted with a reason: told until the reason is forgotten.
    let q = format!(
        "action=delete_torrent&info_hash={}&reason=2&id=10",
        encoded(&hash(0))
    );
    assert_eq!(apply(&mut site, &q, 100), Applied::Changed);
    assert_eq!(
        site.torrent(&h0),
        Err(Some(Deleted {
            reason: 2,
            at_secs: 100
        }))
    );
    assert!(site.torrent_by_id(10).is_none());
    site.forget_deletions(100 + 599, 600);
    assert!(site.torrent(&h0).unwrap_err().is_some());
    site.forget_deletions(100 + 600, 600);
    assert_eq!(site.torrent(&h0), Err(None));
    assert_eq!(apply(&mut site, &q, 800), Applied::Unknown);
    // An id added again under another info-hash moves to it.
    let q = format!(
        "action=add_torrent&info_hash={}&id=11&freetorrent=0",
        encoded(&hash(1))
    );
    apply(&mut site, &q, 900);
    let q = format!(
        "action=add_torrent&info_hash={}&id=11&freetorrent=2",
        encoded(&hash(2))
    );
    apply(&mut site, &q, 900);
    assert_eq!(site.torrent(&InfoHash(hash(1))), Err(None));
    let (moved, t) = site.torrent_by_id(11).unwrap();
    assert_eq!((*moved, t.leech), (InfoHash(hash(2)), LeechType::Neutral));
}

#[test]
fn users_tokens_and_the_whitelist() {
    let mut site = site();
    let k0 = text(KEYS[0]);
    let k1 = text(KEYS[1]);
    apply(
        &mut site,
        &format!("action=update_user&passkey={k0}&can_leech=0&visible=0"),
        0,
    );
    let u = *site.user(&key(0)).unwrap();
    assert_eq!((u.id, u.can_leech, u.protected), (1, false, true));
    apply(
        &mut site,
        &format!("action=trace_user&passkey={k0}&trace=1"),
        0,
    );
    assert!(site.user(&key(0)).unwrap().traced);
    // A passkey changed to itself keeps its user (Ocelot's drops it).
    let q = format!("action=change_passkey&oldpasskey={k0}&newpasskey={k0}");
    assert_eq!(apply(&mut site, &q, 0), Applied::Unknown);
    assert!(site.user(&key(0)).is_some());
    let q = format!("action=change_passkey&oldpasskey={k0}&newpasskey={k1}");
    assert_eq!(apply(&mut site, &q, 0), Applied::Changed);
    assert!(site.user(&key(0)).is_none());
    assert!(!site.user(&key(1)).unwrap().can_leech);
    // One user, one passkey: added again under another, it moves.
    apply(
        &mut site,
        &format!("action=add_user&passkey={k0}&id=1&visible=1"),
        0,
    );
    assert!(site.user(&key(1)).is_none());
    assert!(site.user(&key(0)).unwrap().can_leech);
    apply(
        &mut site,
        &format!("action=remove_users&passkeys={k0}{k1}"),
        0,
    );
    assert_eq!(site.users_len(), 0);

    let h = encoded(&hash(0));
    apply(
        &mut site,
        &format!("action=add_token&info_hash={h}&userid=5"),
        0,
    );
    assert!(site.has_token(5, 10));
    apply(
        &mut site,
        &format!("action=remove_token&info_hash={h}&userid=5"),
        0,
    );
    assert!(!site.has_token(5, 10));

    let peer = |text: &[u8]| {
        let mut id = [b'0'; 20];
        id[..text.len()].copy_from_slice(text);
        PeerId(id)
    };
    assert!(site.whitelisted(&peer(b"-XX1000-")), "empty: everyone");
    apply(&mut site, "action=add_whitelist&peer_id=-qB42", 0);
    apply(&mut site, "action=add_whitelist&peer_id=-qB42", 0);
    assert_eq!(site.whitelist().len(), 1, "each prefix once");
    assert!(site.whitelisted(&peer(b"-qB4250-")));
    assert!(!site.whitelisted(&peer(b"-TR2940-")));
    apply(
        &mut site,
        "action=edit_whitelist&old_peer_id=-qB42&new_peer_id=-TR2",
        0,
    );
    assert!(site.whitelisted(&peer(b"-TR2940-")));
    assert!(!site.whitelisted(&peer(b"-qB4250-")));
    apply(&mut site, "action=remove_whitelist&peer_id=-TR2", 0);
    assert!(site.whitelist().is_empty());

    apply(
        &mut site,
        "action=update_announce_interval&new_announce_interval=900",
        0,
    );
    apply(
        &mut site,
        "action=update_announce_jitter&new_announce_jitter=30",
        0,
    );
    assert_eq!(
        (site.announce_interval(), site.announce_jitter()),
        (900, 30)
    );
    assert_eq!(apply(&mut site, "action=nonsense", 0), Applied::Ignored);
}

/// One of Gazelle's calls, over small pools of passkeys, info-hashes and
/// prefixes, as a property test draws them.
#[derive(Clone, Debug)]
enum Call {
    AddTorrent(usize, u8),
    SetLeech(usize, u8),
    DeleteTorrent(usize, i32),
    AddToken(usize, u32),
    RemoveToken(usize, u32),
    AddUser(usize),
    RemoveUser(usize),
    UpdateUser(usize, bool, bool),
    ChangePasskey(usize, usize),
    AddWhitelist(usize),
    RemoveWhitelist(usize),
    Interval(u32),
}

fn call() -> impl Strategy<Value = Call> {
    let k = 0..KEYS.len();
    let h = 0..3usize;
    let p = 0..PREFIXES.len();
    prop_oneof![
        (h.clone(), 0u8..3).prop_map(|(h, f)| Call::AddTorrent(h, f)),
        (h.clone(), 0u8..3).prop_map(|(h, f)| Call::SetLeech(h, f)),
        (h.clone(), -1i32..25).prop_map(|(h, r)| Call::DeleteTorrent(h, r)),
        (h.clone(), 1u32..4).prop_map(|(h, u)| Call::AddToken(h, u)),
        (h, 1u32..4).prop_map(|(h, u)| Call::RemoveToken(h, u)),
        k.clone().prop_map(Call::AddUser),
        k.clone().prop_map(Call::RemoveUser),
        (k.clone(), any::<bool>(), any::<bool>()).prop_map(|(k, l, v)| Call::UpdateUser(k, l, v)),
        (k.clone(), k).prop_map(|(a, b)| Call::ChangePasskey(a, b)),
        p.clone().prop_map(Call::AddWhitelist),
        p.prop_map(Call::RemoveWhitelist),
        (600u32..4000).prop_map(Call::Interval),
    ]
}

proptest! {
    /// Any sequence of Gazelle's calls leaves the view as Ocelot's, but for
    /// the module's named exceptions, which the sequences steer clear of:
    /// no passkey changed to itself or onto a known one, each user added
    /// under an id of its own, each torrent id under one info-hash, no
    /// prefix whitelisted twice.
    #[test]
    fn the_view_follows_the_calls_as_ocelot_does(calls in proptest::collection::vec(call(), 0..40)) {
        let mut ours = GazelleSite::from_records(GazelleRecords::default(), 1800, 240);
        let mut model = OcelotModel::new(OcelotConfig::default());
        let mut next_user = 1u32;
        for (now, call) in calls.iter().enumerate() {
            let now = now as u64;
            let query = match call {
                Call::AddTorrent(h, f) => {
                    let id = *h as u32 + 1;
                    model.add_torrent(&hash(*h), id, Some(f.to_string().as_bytes()));
                    format!("action=add_torrent&info_hash={}&id={id}&freetorrent={f}", encoded(&hash(*h)))
                }
                Call::SetLeech(h, f) => {
                    model.update_torrent(&hash(*h), Some(f.to_string().as_bytes()));
                    format!("action=update_torrent&info_hash={}&freetorrent={f}", encoded(&hash(*h)))
                }
                Call::DeleteTorrent(h, r) => {
                    model.delete_torrent(&hash(*h), Some(*r), now as i64);
                    format!("action=delete_torrent&info_hash={}&reason={r}", encoded(&hash(*h)))
                }
                Call::AddToken(h, u) => {
                    model.add_token(&hash(*h), *u);
                    format!("action=add_token&info_hash={}&userid={u}", encoded(&hash(*h)))
                }
                Call::RemoveToken(h, u) => {
                    model.remove_token(&hash(*h), *u);
                    format!("action=remove_token&info_hash={}&userid={u}", encoded(&hash(*h)))
                }
                Call::AddUser(k) => {
                    if model.user(KEYS[*k]).is_some() {
                        continue;
                    }
                    let id = next_user;
                    next_user += 1;
                    model.add_user(KEYS[*k], id, Some(b"1"));
                    format!("action=add_user&passkey={}&id={id}&visible=1", text(KEYS[*k]))
                }
                Call::RemoveUser(k) => {
                    model.remove_user(KEYS[*k]);
                    format!("action=remove_user&passkey={}", text(KEYS[*k]))
                }
                Call::UpdateUser(k, leech, visible) => {
                    let (l, v) = (u8::from(*leech), u8::from(*visible));
                    model.update_user(KEYS[*k], Some(l.to_string().as_bytes()), Some(v.to_string().as_bytes()));
                    format!("action=update_user&passkey={}&can_leech={l}&visible={v}", text(KEYS[*k]))
                }
                Call::ChangePasskey(a, b) => {
                    if a == b || model.user(KEYS[*b]).is_some() {
                        continue;
                    }
                    model.change_passkey(KEYS[*a], KEYS[*b]);
                    format!("action=change_passkey&oldpasskey={}&newpasskey={}", text(KEYS[*a]), text(KEYS[*b]))
                }
                Call::AddWhitelist(p) => {
                    if model.whitelist().iter().any(|w| w.as_slice() == PREFIXES[*p]) {
                        continue;
                    }
                    model.add_whitelist(PREFIXES[*p]);
                    format!("action=add_whitelist&peer_id={}", text(PREFIXES[*p]))
                }
                Call::RemoveWhitelist(p) => {
                    model.remove_whitelist(PREFIXES[*p]);
                    format!("action=remove_whitelist&peer_id={}", text(PREFIXES[*p]))
                }
                Call::Interval(s) => {
                    model.update_announce_interval(s.to_string().as_bytes());
                    format!("action=update_announce_interval&new_announce_interval={s}")
                }
            };
            apply(&mut ours, &query, now);
        }
        for (k, passkey) in KEYS.iter().enumerate() {
            let theirs = model.user(*passkey).map(|u| (u.id, u.can_leech, u.protected));
            let mine = ours.user(&key(k)).map(|u| (u.id, u.can_leech, u.protected));
            prop_assert_eq!(mine, theirs, "passkey {}", k);
            if let Some(user) = ours.user(&key(k)) {
                prop_assert_eq!(ours.user_by_id(user.id), Some(user), "by id");
            }
        }
        for h in 0..3 {
            let leech = |f: FreeType| match f {
                FreeType::Normal => LeechType::Normal,
                FreeType::Free => LeechType::Free,
                FreeType::Neutral => LeechType::Neutral,
            };
            let theirs = model.torrent(&hash(h)).map(|t| (t.id, leech(t.free)));
            let mine = ours.torrent(&InfoHash(hash(h))).ok().map(|t| (t.id, t.leech));
            prop_assert_eq!(mine, theirs, "torrent {}", h);
            if let Some(t) = model.torrent(&hash(h)) {
                for u in 1..4 {
                    prop_assert_eq!(ours.has_token(u, t.id), t.tokened_users.contains(&u));
                }
            } else {
                let theirs = model.del_reason(&hash(h)).map(|(reason, _)| reason);
                let mine = ours.torrent(&InfoHash(hash(h))).unwrap_err().map(|d| d.reason);
                prop_assert_eq!(mine, theirs, "deleted torrent {}", h);
            }
        }
        prop_assert_eq!(ours.whitelist(), model.whitelist());
        prop_assert_eq!(ours.announce_interval(), model.config.announce_interval);
    }
}
