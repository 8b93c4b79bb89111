use super::*;
use crate::testing::passkey as key;

const HASH: &str = "0123456789abcdef0123456789abcdef01234567";
const KEY: &str = "0123456789abcdef0123456789abcdef";
const KEY2: &str = "fedcba9876543210fedcba9876543210";

fn change(method: &str, path: &str, body: &str) -> SiteChange {
    match parse_api_request(method.as_bytes(), path.as_bytes(), body.as_bytes()) {
        Ok(ApiRequest::Change(change)) => change,
        other => panic!("{method} {path} {body}: {other:?}"),
    }
}

fn error(method: &str, path: &str, body: &str) -> ApiError {
    parse_api_request(method.as_bytes(), path.as_bytes(), body.as_bytes()).unwrap_err()
}

fn pk(text: &str) -> Passkey {
    Passkey::parse(text.as_bytes()).unwrap()
}

#[test]
fn unit3d_torrent_bodies() {
    let put = format!(
        r#"{{"id":12,"status":1,"info_hash":"{HASH}","is_deleted":false,"seeders":3,"leechers":4,"times_completed":5,"download_factor":75,"upload_factor":200}}"#
    );
    assert_eq!(
        change("PUT", "/torrents", &put),
        SiteChange::PutTorrent(Torrent {
            id: 12,
            info_hash: InfoHash::from_hex(HASH.as_bytes()).unwrap(),
            status: TorrentStatus::Approved,
            is_deleted: false,
            download_factor: 75,
            upload_factor: 200,
            times_completed: 5,
        })
    );
    let upper = put
        .replace(HASH, &HASH.to_uppercase())
        .replace(r#""status":1"#, r#""status":3"#);
    assert!(matches!(
        change("PUT", "torrents", &upper),
        SiteChange::PutTorrent(Torrent {
            status: TorrentStatus::Postponed,
            ..
        })
    ));
    let delete = format!(r#"{{"id":12,"info_hash":"{HASH}"}}"#);
    assert_eq!(
        change("DELETE", "/torrents", &delete),
        SiteChange::DeleteTorrent(12)
    );
}

#[test]
fn unit3d_user_bodies() {
    let put = format!(
        r#"{{"id":5,"group_id":3,"passkey":"{KEY}","new_passkey":null,"can_download":true,"is_donor":false,"is_lifetime":true,"num_seeding":1,"num_leeching":2}}"#
    );
    let user = User {
        id: 5,
        group_id: 3,
        passkey: pk(KEY),
        can_download: true,
        is_donor: false,
        is_lifetime: true,
    };
    assert_eq!(
        change("PUT", "/users", &put),
        SiteChange::PutUser {
            user: user.clone(),
            replaced: None
        }
    );
    let reset = put.replace("null", &format!(r#""{KEY2}""#));
    assert_eq!(
        change("PUT", "/users", &reset),
        SiteChange::PutUser {
            user: User {
                passkey: pk(KEY2),
                ..user
            },
            replaced: Some(pk(KEY))
        }
    );
    let without = put.replace(r#""new_passkey":null,"#, "");
    assert!(matches!(
        change("PUT", "/users", &without),
        SiteChange::PutUser { replaced: None, .. }
    ));
    let delete = format!(r#"{{"id":5,"passkey":"{KEY}"}}"#);
    assert_eq!(
        change("DELETE", "/users", &delete),
        SiteChange::DeleteUser {
            id: 5,
            passkey: pk(KEY)
        }
    );
}

#[test]
fn unit3d_group_and_set_bodies() {
    let put = r#"{"id":3,"slug":"user","download_slots":null,"is_immune":true,"is_freeleech":false,"is_double_upload":true}"#;
    assert_eq!(
        change("PUT", "/groups", put),
        SiteChange::PutGroup(Group {
            id: 3,
            slug: "user".into(),
            download_slots: None,
            is_immune: true,
            is_freeleech: false,
            is_double_upload: true,
        })
    );
    let slots = put.replace("null", "2");
    assert!(matches!(
        change("PUT", "/groups", &slots),
        SiteChange::PutGroup(Group {
            download_slots: Some(2),
            ..
        })
    ));
    assert_eq!(
        change("DELETE", "/groups", r#"{"id":-1}"#),
        SiteChange::DeleteGroup(-1)
    );
    assert_eq!(
        change("PUT", "/blacklisted-agents", r#"{"peer_id_prefix":"-TR2"}"#),
        SiteChange::PutBlacklist(b"-TR2".to_vec())
    );
    assert_eq!(
        change(
            "DELETE",
            "/blacklisted-agents",
            r#"{"peer_id_prefix":[45,0,255]}"#
        ),
        SiteChange::DeleteBlacklist(vec![45, 0, 255])
    );
    let token = r#"{"user_id":1,"torrent_id":2}"#;
    assert_eq!(
        change("PUT", "/freeleech-tokens", token),
        SiteChange::PutToken {
            user_id: 1,
            torrent_id: 2
        }
    );
    assert_eq!(
        change("DELETE", "/freeleech-tokens", token),
        SiteChange::DeleteToken {
            user_id: 1,
            torrent_id: 2
        }
    );
    assert_eq!(
        change("PUT", "/personal-freeleech", r#"{"user_id":4}"#),
        SiteChange::PutPersonalFreeleech(4)
    );
    assert_eq!(
        change("DELETE", "/personal-freeleech", r#"{"user_id":4}"#),
        SiteChange::DeletePersonalFreeleech(4)
    );
    assert_eq!(
        change("PUT", "/featured-torrents", r#"{"torrent_id":9}"#),
        SiteChange::PutFeatured(9)
    );
    assert_eq!(
        change("DELETE", "/featured-torrents", r#"{"torrent_id":9}"#),
        SiteChange::DeleteFeatured(9)
    );
}

#[test]
fn gets() {
    let get = |path: &str| parse_api_request(b"GET", path.as_bytes(), b"");
    assert_eq!(get("/users/5"), Ok(ApiRequest::GetUser(5)));
    assert_eq!(
        get("/torrents/4294967295"),
        Ok(ApiRequest::GetTorrent(u32::MAX))
    );
    assert_eq!(get("/stats"), Ok(ApiRequest::GetStats));
    for bad in [
        "/users/",
        "/users/x",
        "/users/+1",
        "/users/-1",
        "/torrents/4294967296",
    ] {
        let e = get(bad).unwrap_err();
        assert_eq!(e.status(), 400, "{bad}");
    }
}

#[test]
fn routes_and_methods() {
    assert_eq!(error("GET", "/nope", ""), ApiError::NoRoute);
    assert_eq!(error("GET", "/users/1/2", ""), ApiError::NoRoute);
    assert_eq!(error("GET", "", ""), ApiError::NoRoute);
    assert_eq!(
        error("PUT", "/torrents/1", "{}"),
        ApiError::MethodNotAllowed
    );
    assert_eq!(error("GET", "/torrents", ""), ApiError::MethodNotAllowed);
    assert_eq!(error("POST", "/users", "{}"), ApiError::MethodNotAllowed);
    assert_eq!(error("PATCH", "/users", "{}"), ApiError::MethodNotAllowed);
    assert_eq!(error("DELETE", "/stats", ""), ApiError::MethodNotAllowed);
    let reload = error("POST", "/config/reload", "");
    assert_eq!(reload.status(), 501);
    assert!(reload.to_string().contains("not supported"));
    assert_eq!(error("GET", "/config/reload", "").status(), 405);
}

#[test]
fn bad_bodies_are_refused_naming_the_field() {
    let put = format!(
        r#"{{"id":12,"status":1,"info_hash":"{HASH}","is_deleted":false,"seeders":3,"leechers":4,"times_completed":5,"download_factor":75,"upload_factor":200}}"#
    );
    let cases = [
        ("/torrents", put.replace(HASH, &HASH[1..]), "info_hash"),
        ("/torrents", put.replace(HASH, &HASH.replace('a', "g")), "info_hash"),
        ("/torrents", put.replace(r#""seeders":3,"#, ""), "seeders"),
        ("/torrents", put.replace("200", "256"), "256"),
        ("/torrents", put.replace("false", "0"), "bool"),
        ("/torrents", "not json".into(), "expected"),
        ("/groups", r#"{"id":3,"slug":"","download_slots":null,"is_immune":true,"is_freeleech":false,"is_double_upload":true}"#.into(), "slug"),
        ("/groups", r#"{"id":3,"slug":"x","download_slots":-1,"is_immune":true,"is_freeleech":false,"is_double_upload":true}"#.into(), "-1"),
        ("/blacklisted-agents", format!(r#"{{"peer_id_prefix":"{}"}}"#, "x".repeat(256)), "peer_id_prefix"),
        ("/freeleech-tokens", r#"{"user_id":1}"#.into(), "torrent_id"),
    ];
    for (path, body, needle) in cases {
        let e = error("PUT", path, &body);
        assert_eq!(e.status(), 400, "{path} {body}");
        assert!(e.to_string().contains(needle), "{path}: {e} lacks {needle}");
    }
}

#[test]
fn bad_passkeys_are_refused_and_never_echoed() {
    let secret = "0123456789abcdef0123456789abcde-";
    let user = |passkey: &str, new: &str| {
        format!(
            r#"{{"id":5,"group_id":3,"passkey":"{passkey}","new_passkey":{new},"can_download":true,"is_donor":false,"is_lifetime":true,"num_seeding":1,"num_leeching":2}}"#
        )
    };
    let cases = [
        ("PUT", user(secret, "null"), "'passkey'"),
        ("PUT", user(&KEY[1..], "null"), "'passkey'"),
        ("PUT", user(KEY, &format!(r#""{secret}""#)), "'new_passkey'"),
        (
            "DELETE",
            format!(r#"{{"id":5,"passkey":"{secret}"}}"#),
            "'passkey'",
        ),
        // A passkey in a field of another type: serde quotes the value.
        (
            "DELETE",
            format!(r#"{{"id":"{KEY}","passkey":"{KEY}"}}"#),
            "invalid type",
        ),
    ];
    for (method, body, needle) in cases {
        let e = error(method, "/users", &body);
        let text = e.to_string();
        assert_eq!(e.status(), 400);
        assert!(text.contains(needle), "{text}");
        assert!(
            !text.contains(&secret[..20]) && !text.contains(&KEY[..20]),
            "{text}"
        );
    }
    let _ = key(1);
}

#[test]
fn redaction_blanks_every_quoted_string() {
    assert_eq!(
        redact(r#"invalid type: string "a\"b", expected u32 at line 1"#),
        r#"invalid type: string "…", expected u32 at line 1"#
    );
    assert_eq!(redact("missing field `id`"), "missing field `id`");
    assert_eq!(redact(r#"open "abc"#), r#"open ""#);
}

#[test]
fn outcomes_have_statuses() {
    assert_eq!(status_of(&Ok(())), 200);
    assert_eq!(status_of(&Err(ApiError::UnknownUser(1))), 404);
    assert_eq!(status_of(&Err(ApiError::UnknownTorrent(1))), 404);
    assert_eq!(status_of(&Err(ApiError::Json(String::new()))), 400);
}
