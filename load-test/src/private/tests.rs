use super::*;
use crate::config::TrafficConfig;
use crate::model::{min_sources, Rng, TrafficModel};

const KEY_A: &str = "0123456789abcdef0123456789abcdef";
const KEY_B: &str = "ABCDEFGHIJKLMNOPQRSTUVWXYZ012345";

#[test]
fn passkeys_parse_one_a_line() {
    let text = format!("{KEY_A}\n\n  {KEY_B}  \n# a comment\n{KEY_A}\r\n");
    let keys = parse_passkeys(&text).unwrap();
    assert_eq!(
        keys.len(),
        3,
        "duplicates are kept, blanks and comments not"
    );
    assert_eq!(keys[0].as_str(), KEY_A);
    assert_eq!(keys[1].as_str(), KEY_B);
    assert_eq!(keys[2], keys[0]);
}

#[test]
fn bad_passkeys_are_refused_with_their_line() {
    for (text, line) in [
        ("0123456789abcdef0123456789abcde\n", 1),   // 31
        ("0123456789abcdef0123456789abcdef0\n", 1), // 33
        (
            &format!("{KEY_A}\n0123456789abcdef0123456789abcd/f\n")[..],
            2,
        ),
        (&format!("{KEY_A}\n0123456789abcdef 123456789abcdef\n"), 2),
        (&format!("{KEY_A}\n0123456789abcdef0123456789abcdé\n"), 2),
    ] {
        let err = parse_passkeys(text).unwrap_err();
        assert!(err.starts_with(&format!("line {line}:")), "{text:?}: {err}");
    }
    assert!(parse_passkeys("").is_err());
    assert!(parse_passkeys("\n# nothing\n").is_err());
}

#[test]
fn info_hashes_parse_as_hex_of_either_case() {
    let text =
        "00112233445566778899aabbccddeeff00112233\n\nFFEEDDCCBBAA99887766554433221100FFEEDDCC\n";
    let hashes = parse_info_hashes(text).unwrap();
    assert_eq!(hashes.len(), 2);
    assert_eq!(hashes[0].0[..4], [0x00, 0x11, 0x22, 0x33]);
    assert_eq!(hashes[0].0[19], 0x33);
    assert_eq!(hashes[1].0[..2], [0xff, 0xee]);
    for bad in [
        "00112233445566778899aabbccddeeff0011223",   // 39
        "00112233445566778899aabbccddeeff001122334", // 41
        "00112233445566778899aabbccddeeff0011223g",
        "+0112233445566778899aabbccddeeff00112233",
        "",
    ] {
        assert!(parse_info_hashes(bad).is_err(), "{bad}");
    }
}

#[test]
fn the_passkey_goes_into_the_path_before_the_query() {
    let key = Passkey::parse(KEY_A).unwrap();
    let mut out = b"GET /prefix/announce?info_hash=x&port=1".to_vec();
    insert_passkey(&mut out, 4, &key);
    assert_eq!(
        out,
        format!("GET /prefix/announce/{KEY_A}?info_hash=x&port=1").as_bytes()
    );
    let mut out = b"GET /scrape".to_vec();
    insert_passkey(&mut out, 4, &key);
    assert_eq!(out, format!("GET /scrape/{KEY_A}").as_bytes());
    // What the tracker's router reads back.
    let path = announce_path(&key);
    let (endpoint, found) = tracker_proto::http::route(&path).unwrap();
    assert_eq!(endpoint, tracker_proto::http::Endpoint::Announce);
    assert_eq!(found, Some(KEY_A.as_bytes()));
}

#[test]
fn the_passkey_goes_first_in_ocelots_form() {
    let key = Passkey::parse(KEY_A).unwrap();
    let mut out = b"GET /announce?info_hash=x&port=1".to_vec();
    insert_passkey_first(&mut out, 4, &key);
    assert_eq!(
        out,
        format!("GET /{KEY_A}/announce?info_hash=x&port=1").as_bytes()
    );
    // Where Ocelot reads them: the passkey at bytes 5..37, a '/' at 37, the
    // action's first letter at 38.
    assert_eq!(&out[5..37], KEY_A.as_bytes());
    assert_eq!((out[37], out[38]), (b'/', b'a'));
    let mut out = b"GET /prefix/scrape?info_hash=x".to_vec();
    insert_passkey_first(&mut out, 11, &key);
    assert_eq!(
        out,
        format!("GET /prefix/{KEY_A}/scrape?info_hash=x").as_bytes()
    );
}

#[test]
fn url_data_carries_the_announce_path() {
    let key = Passkey::parse(KEY_B).unwrap();
    let mut out = Vec::new();
    write_url_data(&mut out, &key);
    assert_eq!(out[0], 2, "URLData");
    assert_eq!(usize::from(out[1]), "/announce/".len() + PASSKEY_LEN);
    assert_eq!(&out[2..], format!("/announce/{KEY_B}").as_bytes());
}

fn model(lists: Lists) -> TrafficModel {
    let traffic = TrafficConfig {
        peers: 1000,
        torrents: 50,
        ..TrafficConfig::default()
    };
    TrafficModel::with_lists(&traffic, min_sources(traffic.peers), 5, lists).unwrap()
}

#[test]
fn each_peer_keeps_one_passkey_and_all_are_used() {
    let keys: Vec<Passkey> = (0..10)
        .map(|i| Passkey::parse(&format!("{i:032}")).unwrap())
        .collect();
    let m = model(Lists {
        passkeys: Some(keys.clone().into()),
        info_hashes: None,
    });
    let mut used = std::collections::HashSet::new();
    for p in 0..1000 {
        let peer = m.peer(p);
        let key = *m.passkey(&peer).unwrap();
        assert_eq!(m.passkey(&m.peer(p)), Some(&key));
        used.insert(key);
    }
    assert_eq!(used.len(), keys.len());
    assert_eq!(model(Lists::default()).passkey(&m.peer(0)), None);
}

#[test]
fn the_listed_info_hashes_replace_the_models() {
    let hashes: Vec<InfoHash> = (0..7u8).map(|i| InfoHash([i; 20])).collect();
    let m = model(Lists {
        passkeys: None,
        info_hashes: Some(hashes.clone().into()),
    });
    assert_eq!(
        m.torrents(),
        7,
        "the list's length wins over traffic.torrents"
    );
    let mut rng = Rng::new(9);
    let mut seen = std::collections::HashSet::new();
    for _ in 0..2000 {
        let plan = m.announce(&mut rng, 0);
        assert!(hashes.contains(&plan.info_hash));
        assert_eq!(plan.info_hash, hashes[plan.torrent as usize]);
        seen.insert(plan.info_hash);
    }
    assert_eq!(seen.len(), 7);
}

#[test]
fn lists_load_from_the_files_the_config_names() {
    let dir = std::env::temp_dir().join(format!("load-test-lists-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let (keys, hashes) = (dir.join("keys"), dir.join("hashes"));
    std::fs::write(&keys, format!("{KEY_A}\n{KEY_B}\n")).unwrap();
    std::fs::write(&hashes, "00112233445566778899aabbccddeeff00112233\n").unwrap();
    let traffic = TrafficConfig {
        passkeys: Some(keys.clone()),
        info_hashes: Some(hashes),
        ..TrafficConfig::default()
    };
    let lists = Lists::load(&traffic).unwrap();
    assert_eq!(lists.passkeys.unwrap().len(), 2);
    assert_eq!(lists.info_hashes.unwrap().len(), 1);
    let missing = TrafficConfig {
        passkeys: Some(dir.join("absent")),
        ..TrafficConfig::default()
    };
    assert!(Lists::load(&missing).unwrap_err().contains("absent"));
    std::fs::write(&keys, "short\n").unwrap();
    let bad = TrafficConfig {
        passkeys: Some(keys),
        ..TrafficConfig::default()
    };
    assert!(Lists::load(&bad).unwrap_err().contains("line 1"));
    std::fs::remove_dir_all(&dir).unwrap();
    assert!(Lists::load(&TrafficConfig::default())
        .unwrap()
        .passkeys
        .is_none());
}
