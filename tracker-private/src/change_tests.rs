use super::*;
use crate::testing::{self, group, hash, passkey, peer, torrent, user};
use tracker_proto::PeerId;

#[test]
fn put_and_delete_torrents() {
    let mut site = testing::site();
    let mut t = torrent(3);
    t.download_factor = 0;
    site.apply(SiteChange::PutTorrent(t.clone())).unwrap();
    assert_eq!(site.torrent(&hash(3)), Some(&t));
    site.apply(SiteChange::DeleteTorrent(3)).unwrap();
    assert!(
        site.torrent(&hash(3)).unwrap().is_deleted,
        "kept, marked deleted"
    );
    assert!(site.torrent_by_id(3).is_some());
    let e = site.apply(SiteChange::DeleteTorrent(99)).unwrap_err();
    assert_eq!(e.status(), 400);
    // A PUT brings it back (UNIT3D's resurrection).
    site.apply(SiteChange::PutTorrent(torrent(3))).unwrap();
    assert!(!site.torrent(&hash(3)).unwrap().is_deleted);
}

#[test]
fn put_users_and_passkey_resets() {
    let mut site = testing::site();
    let mut u = user(3, 10);
    site.apply(SiteChange::PutUser {
        user: u.clone(),
        replaced: None,
    })
    .unwrap();
    assert_eq!(site.user_by_passkey(&passkey(3)), Some(&u));

    // new_passkey: the old one no longer announces.
    u.passkey = passkey(33);
    site.apply(SiteChange::PutUser {
        user: u.clone(),
        replaced: Some(passkey(3)),
    })
    .unwrap();
    assert_eq!(site.user_by_passkey(&passkey(3)), None);
    assert_eq!(site.user_by_passkey(&passkey(33)), Some(&u));

    // A changed passkey without new_passkey replaces the old one too.
    u.passkey = passkey(34);
    u.can_download = false;
    site.apply(SiteChange::PutUser {
        user: u.clone(),
        replaced: None,
    })
    .unwrap();
    assert_eq!(site.user_by_passkey(&passkey(33)), None);
    assert_eq!(site.user_by_passkey(&passkey(34)), Some(&u));

    // A stale `replaced` that maps to another user is left alone.
    site.apply(SiteChange::PutUser {
        user: user(4, 10),
        replaced: Some(passkey(1)),
    })
    .unwrap();
    assert_eq!(site.user_by_passkey(&passkey(1)).map(|u| u.id), Some(1));
}

#[test]
fn delete_users() {
    let mut site = testing::site();
    site.apply(SiteChange::DeleteUser {
        id: 1,
        passkey: passkey(1),
    })
    .unwrap();
    assert_eq!(site.user(1), None);
    assert_eq!(site.passkey_user_id(&passkey(1)), None);
    // Unknown users, and a passkey that belongs to another: harmless.
    site.apply(SiteChange::DeleteUser {
        id: 9,
        passkey: passkey(2),
    })
    .unwrap();
    assert_eq!(site.user_by_passkey(&passkey(2)).map(|u| u.id), Some(2));
}

#[test]
fn groups() {
    let mut site = testing::site();
    let mut g = group(11, "banned");
    g.is_freeleech = true;
    site.apply(SiteChange::PutGroup(g.clone())).unwrap();
    assert_eq!(site.group(11), Some(&g));
    site.apply(SiteChange::DeleteGroup(11)).unwrap();
    assert_eq!(site.group(11), None);
    site.apply(SiteChange::DeleteGroup(11)).unwrap();
}

#[test]
fn blacklist() {
    let mut site = testing::site();
    site.apply(SiteChange::PutBlacklist(b"-TR".to_vec()))
        .unwrap();
    assert!(site.is_blacklisted(&peer(1)));
    assert!(!site.is_blacklisted(&PeerId(*b"-qB4620-000000000000")));
    site.apply(SiteChange::DeleteBlacklist(b"-TR".to_vec()))
        .unwrap();
    assert!(!site.is_blacklisted(&peer(1)));
    site.apply(SiteChange::DeleteBlacklist(b"-TR".to_vec()))
        .unwrap();
}

#[test]
fn tokens_personal_freeleech_and_featured() {
    let mut site = testing::site();
    let token = |put| {
        if put {
            SiteChange::PutToken {
                user_id: 1,
                torrent_id: 2,
            }
        } else {
            SiteChange::DeleteToken {
                user_id: 1,
                torrent_id: 2,
            }
        }
    };
    site.apply(token(true)).unwrap();
    assert!(site.has_token(1, 2));
    site.apply(token(false)).unwrap();
    assert!(!site.has_token(1, 2));
    site.apply(SiteChange::PutPersonalFreeleech(1)).unwrap();
    assert!(site.has_personal_freeleech(1));
    site.apply(SiteChange::DeletePersonalFreeleech(1)).unwrap();
    assert!(!site.has_personal_freeleech(1));
    site.apply(SiteChange::PutFeatured(2)).unwrap();
    assert!(site.is_featured(2));
    site.apply(SiteChange::DeleteFeatured(2)).unwrap();
    assert!(!site.is_featured(2));
}

#[test]
fn parsed_changes_apply() {
    let mut site = testing::site();
    let body = br#"{"id":1,"group_id":10,"passkey":"00000000000000000000000000000001","new_passkey":"abcdefabcdefabcdefabcdefabcdefab","can_download":true,"is_donor":false,"is_lifetime":false,"num_seeding":0,"num_leeching":0}"#;
    let Ok(crate::ApiRequest::Change(change)) = crate::parse_api_request(b"PUT", b"/users", body)
    else {
        panic!("not a change");
    };
    site.apply(change).unwrap();
    assert_eq!(site.user_by_passkey(&passkey(1)), None);
    let new = Passkey::parse(b"abcdefabcdefabcdefabcdefabcdefab").unwrap();
    assert_eq!(site.user_by_passkey(&new).map(|u| u.id), Some(1));
}
