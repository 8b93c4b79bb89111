//! Gazelle's calls as `app/Tracker.php` (OPSnet/Gazelle 71b4515) builds
//! them, parsed; and what Ocelot would do with malformed ones.

use proptest::prelude::*;
use tracker_proto::InfoHash;

use super::request::*;
use crate::site::Passkey;

const KEY: &str = "abcdefghijkmnopqrstuvwxyzABCDEFG";
const KEY2: &str = "ABCDEFGabcdefghijkmnopqrstuvwxyz";

fn key(text: &str) -> Passkey {
    Passkey::parse(text.as_bytes()).unwrap()
}

/// An info-hash as Gazelle sends it: `rawurlencode` of the 20 bytes.
fn encoded(hash: &[u8; 20]) -> String {
    hash.iter()
        .map(|&b| {
            if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
                (b as char).to_string()
            } else {
                format!("%{b:02X}")
            }
        })
        .collect()
}

const HASH: [u8; 20] = *b"\x01\x02abc\xff\x00%=&+ \x7f0123456";

fn update(query: &str) -> Update {
    parse_update(query.as_bytes())
}

#[test]
fn every_action_gazelle_sends_is_taken() {
    let h = encoded(&HASH);
    let info_hash = InfoHash(HASH);
    assert_eq!(
        update(&format!(
            "action=add_torrent&info_hash={h}&id=42&freetorrent=0"
        )),
        Update::AddTorrent {
            info_hash,
            id: 42,
            leech: LeechType::Normal
        }
    );
    for (free, leech) in [
        ("0", LeechType::Normal),
        ("1", LeechType::Free),
        ("2", LeechType::Neutral),
        ("", LeechType::Neutral),
        ("x", LeechType::Neutral),
    ] {
        assert_eq!(
            update(&format!(
                "action=update_torrent&info_hash={h}&freetorrent={free}"
            )),
            Update::SetLeechType {
                info_hashes: vec![info_hash],
                leech
            }
        );
    }
    assert_eq!(
        update(&format!("action=add_token&info_hash={h}&userid=7")),
        Update::AddToken { info_hash, user: 7 }
    );
    assert_eq!(
        update(&format!("action=remove_token&info_hash={h}&userid=7")),
        Update::RemoveToken { info_hash, user: 7 }
    );
    assert_eq!(
        update(&format!(
            "action=delete_torrent&id=42&info_hash={h}&reason=3"
        )),
        Update::DeleteTorrent {
            info_hash,
            reason: 3
        }
    );
    assert_eq!(
        update(&format!("action=delete_torrent&info_hash={h}")),
        Update::DeleteTorrent {
            info_hash,
            reason: -1
        }
    );
    assert_eq!(
        update(&format!(
            "action=change_passkey&oldpasskey={KEY}&newpasskey={KEY2}"
        )),
        Update::ChangePasskey {
            old: key(KEY),
            new: key(KEY2)
        }
    );
    assert_eq!(
        update(&format!("action=add_user&passkey={KEY}&id=9&visible=0")),
        Update::AddUser {
            passkey: key(KEY),
            id: 9,
            protected: true
        }
    );
    assert_eq!(
        update(&format!(
            "action=update_user&passkey={KEY}&can_leech=0&visible=1"
        )),
        Update::UpdateUser {
            passkey: key(KEY),
            can_leech: false,
            protected: false
        }
    );
    // Missing values: may leech, not protected (Ocelot's defaults).
    assert_eq!(
        update(&format!("action=update_user&passkey={KEY}")),
        Update::UpdateUser {
            passkey: key(KEY),
            can_leech: true,
            protected: false
        }
    );
    assert_eq!(
        update(&format!("action=trace_user&passkey={KEY}&trace=1")),
        Update::TraceUser {
            passkey: key(KEY),
            traced: true
        }
    );
    assert_eq!(
        update(&format!("action=remove_user&passkey={KEY}")),
        Update::RemoveUsers {
            passkeys: vec![key(KEY)]
        }
    );
    assert_eq!(
        update(&format!("action=remove_users&passkeys={KEY}{KEY2}")),
        Update::RemoveUsers {
            passkeys: vec![key(KEY), key(KEY2)]
        }
    );
    // Whitelist prefixes are raw: not decoded, `%` and `#` kept.
    assert_eq!(
        update("action=add_whitelist&peer_id=-qB42"),
        Update::AddWhitelist {
            prefix: b"-qB42".to_vec()
        }
    );
    assert_eq!(
        update("action=edit_whitelist&old_peer_id=#utest-&new_peer_id=-TR%2"),
        Update::EditWhitelist {
            old: b"#utest-".to_vec(),
            new: b"-TR%2".to_vec()
        }
    );
    assert_eq!(
        update("action=remove_whitelist&peer_id=M"),
        Update::RemoveWhitelist {
            prefix: b"M".to_vec()
        }
    );
    assert_eq!(
        update("action=update_announce_interval&new_announce_interval=1800"),
        Update::AnnounceInterval(1800)
    );
    assert_eq!(
        update("action=update_announce_jitter&new_announce_jitter=0"),
        Update::AnnounceJitter(0)
    );
}

#[test]
fn several_torrents_and_users_come_concatenated() {
    let other = [7u8; 20];
    let both = format!("{}{}", encoded(&HASH), encoded(&other));
    assert_eq!(
        update(&format!(
            "action=update_torrents&info_hashes={both}&freetorrent=1"
        )),
        Update::SetLeechType {
            info_hashes: vec![InfoHash(HASH), InfoHash(other)],
            leech: LeechType::Free
        }
    );
    // A partial hash or passkey at the end: the whole request is refused,
    // rather than the rest taken.
    assert!(matches!(
        update(&format!(
            "action=update_torrents&info_hashes={both}%01&freetorrent=1"
        )),
        Update::Ignored {
            field: "info_hashes",
            ..
        }
    ));
    assert!(matches!(
        update(&format!("action=remove_users&passkeys={KEY}abc")),
        Update::Ignored {
            field: "passkeys",
            ..
        }
    ));
}

#[test]
fn ocelots_reading_of_a_query_string() {
    // The last of a repeated key wins; a further `=` in a value is
    // dropped; a key without `=` has an empty value.
    let params = Params::parse(b"a=1&a=2&b=x=y&c&=d");
    assert_eq!(params.get("a"), Some(&b"2"[..]));
    assert_eq!(params.get("b"), Some(&b"xy"[..]));
    assert_eq!(params.get("c"), Some(&b""[..]));
    assert_eq!(params.get(""), Some(&b"d"[..]));
    assert_eq!(params.get("e"), None);
    // `%XX` in either case, `+` kept, a `%` without two hex digits kept.
    assert_eq!(percent_decode(b"%41%6a+%zz%4"), b"Aj+%zz%4");
}

#[test]
fn what_ocelot_takes_wrongly_is_ignored_and_named() {
    let h = encoded(&HASH);
    for (query, field) in [
        // A torrent of id 0 (Ocelot's reading of garbage), whose rows no
        // foreign key takes.
        (format!("action=add_torrent&info_hash={h}&id=x"), "id"),
        (format!("action=add_torrent&info_hash={h}&id=0"), "id"),
        (format!("action=add_torrent&info_hash={h}&id=-1"), "id"),
        ("action=add_torrent&info_hash=abc&id=1".into(), "info_hash"),
        (format!("action=add_token&info_hash={h}"), "userid"),
        (
            format!("action=delete_torrent&info_hash={h}&reason=x"),
            "reason",
        ),
        ("action=add_user&passkey=short&id=1".into(), "passkey"),
        (
            format!("action=change_passkey&oldpasskey={KEY}&newpasskey=a%20b"),
            "newpasskey",
        ),
        ("action=add_whitelist&peer_id=".into(), "peer_id"),
        (
            "action=add_whitelist&peer_id=-qB4200000000000000000".into(),
            "peer_id",
        ),
        (
            "action=update_announce_interval&new_announce_interval=0".into(),
            "new_announce_interval",
        ),
        ("action=remove_torrent&info_hash=x".into(), "action"),
        ("".into(), "action"),
    ] {
        match update(&query) {
            Update::Ignored { field: got, .. } => assert_eq!(got, field, "{query}"),
            other => panic!("{query}: {other:?}"),
        }
    }
}

#[test]
fn reports_as_gazelle_asks_for_them() {
    assert_eq!(parse_report(b"get=stats"), Report::Stats);
    assert_eq!(parse_report(b"get=prom_stats"), Report::PromStats);
    assert_eq!(parse_report(b"get=jemalloc"), Report::Jemalloc);
    assert_eq!(
        parse_report(format!("get=user&key={KEY}").as_bytes()),
        Report::User(key(KEY))
    );
    assert_eq!(parse_report(b"get=user"), Report::UserKeyMissing);
    assert_eq!(parse_report(b"get=user&key=nope"), Report::UserKeyUnknown);
    assert_eq!(
        parse_report(format!("get=torrent&info_hash={}", encoded(&HASH)).as_bytes()),
        Report::Torrent(Some(InfoHash(HASH)))
    );
    assert_eq!(parse_report(b"get=torrent"), Report::Torrent(None));
    assert_eq!(parse_report(b"get=other"), Report::Unrecognized);
    assert_eq!(parse_report(b""), Report::Unrecognized);
}

#[test]
fn refusals_and_reasons_read_as_ocelots() {
    assert_eq!(
        failure_body("Passkey not found"),
        b"d14:failure reason17:Passkey not found12:min intervali5400e8:intervali5400ee"
    );
    assert_eq!(deletion_reason(0), "Dupe");
    assert_eq!(deletion_reason(22), "Audience Recording");
    assert_eq!(deletion_reason(23), "");
    assert_eq!(deletion_reason(-1), "");
}

proptest! {
    /// Any bytes parse to something, and every info-hash Gazelle encodes
    /// comes back as it was.
    #[test]
    fn any_query_parses(query in proptest::collection::vec(any::<u8>(), 0..300)) {
        let _ = parse_update(&query);
        let _ = parse_report(&query);
    }

    #[test]
    fn encoded_info_hashes_come_back(hash in any::<[u8; 20]>(), id in 1u32..) {
        let query = format!("action=add_torrent&info_hash={}&id={id}&freetorrent=1", encoded(&hash));
        prop_assert_eq!(
            update(&query),
            Update::AddTorrent { info_hash: InfoHash(hash), id, leech: LeechType::Free }
        );
    }
}
