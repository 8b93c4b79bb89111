use std::net::{Ipv4Addr, Ipv6Addr};

use proptest::prelude::*;

use super::*;

fn peer4(n: u8, last_seen: u64) -> SavedPeer<Ipv4Addr> {
    SavedPeer {
        ip: Ipv4Addr::new(10, 0, 0, n),
        port: 6881 + u16::from(n),
        peer_id: PeerId([n; 20]),
        last_seen,
        completed: n.is_multiple_of(2),
    }
}

fn peer6(n: u8, last_seen: u64) -> SavedPeer<Ipv6Addr> {
    SavedPeer {
        ip: Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, n.into()),
        port: 6881,
        peer_id: PeerId([n ^ 0xff; 20]),
        last_seen,
        completed: n.is_multiple_of(2),
    }
}

fn sample() -> Vec<SavedTorrent> {
    vec![
        SavedTorrent {
            info_hash: InfoHash([1; 20]),
            completed: 7,
            v4: SavedHalf {
                seeders: vec![peer4(1, 1_700_000_000)],
                leechers: vec![peer4(2, 1_700_000_001), peer4(3, 5)],
            },
            v6: SavedHalf {
                seeders: vec![],
                leechers: vec![peer6(4, u64::MAX)],
            },
        },
        SavedTorrent {
            info_hash: InfoHash([2; 20]),
            completed: u32::MAX,
            ..SavedTorrent::default()
        },
    ]
}

fn encode_all(torrents: &[SavedTorrent], split: usize, saved_at: u64) -> Vec<u8> {
    let split = split.min(torrents.len());
    let mut sections = vec![Section::default(), Section::with_capacity(64)];
    for t in &torrents[..split] {
        sections[0].push(t);
    }
    for t in &torrents[split..] {
        sections[1].push(t);
    }
    encode(&sections, saved_at)
}

fn decode_all(bytes: &[u8]) -> Result<(u64, Vec<SavedTorrent>), StateError> {
    let file = StateFile::parse(bytes)?;
    let torrents = file
        .records()
        .map(|r| r.map(|r| r.to_saved()))
        .collect::<Result<Vec<_>, _>>()?;
    assert_eq!(file.torrents, torrents.len() as u64);
    Ok((file.saved_at, torrents))
}

/// Sets the checksum right after an edit, so that a test reaches the checks
/// behind it.
fn reseal(bytes: &mut [u8]) {
    let end = bytes.len() - TRAILER_LEN;
    let crc = crc32fast::hash(&bytes[..end]);
    bytes[end..].copy_from_slice(&crc.to_le_bytes());
}

#[test]
fn round_trips_torrents_across_sections() {
    let torrents = sample();
    let bytes = encode_all(&torrents, 1, 1_234);
    assert_eq!(&bytes[..8], b"TRKSTATE");
    assert_eq!(decode_all(&bytes).unwrap(), (1_234, torrents));
}

#[test]
fn sections_count_torrents_and_peers_and_reopening_reads_the_same() {
    let torrents = sample();
    let mut section = Section::default();
    torrents.iter().for_each(|t| section.push(t));
    assert_eq!((section.torrents(), section.peers()), (2, 4));
    let bytes = encode(&[section], 5);
    let file = StateFile::reopen(&bytes).unwrap();
    let again: Vec<SavedTorrent> = file.records().map(|r| r.unwrap().to_saved()).collect();
    assert_eq!((file.saved_at, again), (5, torrents));
    assert!(StateFile::reopen(b"short").is_err());
}

#[test]
fn records_tell_seeders_and_sizes_without_copying() {
    let bytes = encode_all(&sample(), 2, 0);
    let file = StateFile::parse(&bytes).unwrap();
    let first = file.records().next().unwrap().unwrap();
    assert_eq!((first.v4.len(), first.v6.len()), (3, 1));
    let seeders: Vec<bool> = first.v4.peers().map(|(s, _)| s).collect();
    assert_eq!(seeders, [false, false, true]);
    assert!(file.records().nth(1).unwrap().unwrap().v6.is_empty());
}

#[test]
fn an_empty_file_is_valid() {
    let bytes = encode(&[], 9);
    assert_eq!(bytes.len(), HEADER_LEN + TRAILER_LEN);
    assert_eq!(decode_all(&bytes).unwrap(), (9, vec![]));
}

#[test]
fn garbage_and_foreign_files_are_refused() {
    assert_eq!(decode_all(b""), Err(StateError::NotAStateFile));
    assert_eq!(
        decode_all(b"hello, this is not a state file at all, really"),
        Err(StateError::NotAStateFile)
    );
    for version in [0, FORMAT_VERSION + 1] {
        let mut bytes = encode_all(&sample(), 0, 0);
        bytes[8..12].copy_from_slice(&version.to_le_bytes());
        assert_eq!(
            decode_all(&bytes),
            Err(StateError::UnsupportedVersion(version))
        );
        assert_eq!(
            StateFile::reopen(&bytes).unwrap_err(),
            StateError::UnsupportedVersion(version)
        );
    }
}

/// `torrents` in a file of version 1, which had no flags: what a tracker
/// before issue 37 wrote.
pub(crate) fn encode_version_1(torrents: &[SavedTorrent], saved_at: u64) -> Vec<u8> {
    fn peers<I: SavedIp>(body: &mut Vec<u8>, half: &SavedHalf<I>) {
        for p in half.seeders.iter().chain(&half.leechers) {
            p.ip.write(body);
            body.extend_from_slice(&p.port.to_le_bytes());
            body.extend_from_slice(&p.last_seen.to_le_bytes());
            body.extend_from_slice(&p.peer_id.0);
        }
    }
    let mut body = Vec::new();
    for t in torrents {
        body.extend_from_slice(&t.info_hash.0);
        body.extend_from_slice(&t.completed.to_le_bytes());
        for (len, seeders) in [
            (t.v4.len(), t.v4.seeders.len()),
            (t.v6.len(), t.v6.seeders.len()),
        ] {
            body.extend_from_slice(&(len as u32).to_le_bytes());
            body.extend_from_slice(&(seeders as u32).to_le_bytes());
        }
        peers(&mut body, &t.v4);
        peers(&mut body, &t.v6);
    }
    let mut bytes = Vec::new();
    bytes.extend_from_slice(&MAGIC);
    bytes.extend_from_slice(&1u32.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&saved_at.to_le_bytes());
    bytes.extend_from_slice(&(torrents.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&(body.len() as u64).to_le_bytes());
    bytes.extend_from_slice(&body);
    let crc = crc32fast::hash(&bytes);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes
}

/// Issue 37: version 2 added a flag per peer; a file of version 1 is still
/// read, its seeders taken as having completed and its leechers not.
#[test]
fn a_version_1_file_is_read_its_seeders_marked_as_completed() {
    let torrents = sample();
    let bytes = encode_version_1(&torrents, 77);
    let file = StateFile::parse(&bytes).unwrap();
    assert_eq!(file.version, 1);
    let mut want = torrents.clone();
    for t in &mut want {
        t.v4.seeders.iter_mut().for_each(|p| p.completed = true);
        t.v4.leechers.iter_mut().for_each(|p| p.completed = false);
        t.v6.seeders.iter_mut().for_each(|p| p.completed = true);
        t.v6.leechers.iter_mut().for_each(|p| p.completed = false);
    }
    assert_eq!(decode_all(&bytes).unwrap(), (77, want.clone()));
    let again: Vec<SavedTorrent> = StateFile::reopen(&bytes)
        .unwrap()
        .records()
        .map(|r| r.unwrap().to_saved())
        .collect();
    assert_eq!(again, want);
    // What is written now is version 2, a byte longer per peer.
    let now = encode_all(&torrents, 1, 77);
    assert_eq!(StateFile::parse(&now).unwrap().version, FORMAT_VERSION);
    assert_eq!(now.len(), bytes.len() + 4);
}

#[test]
fn every_truncation_is_reported() {
    let bytes = encode_all(&sample(), 1, 0);
    for len in 0..bytes.len() {
        let err = decode_all(&bytes[..len]).unwrap_err();
        match err {
            StateError::Truncated { found, .. } => assert_eq!(found, len as u64),
            StateError::NotAStateFile => assert!(len < 8),
            other => panic!("{len} bytes: {other:?}"),
        }
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(matches!(
        decode_all(&longer),
        Err(StateError::TrailingBytes { .. })
    ));
}

#[test]
fn every_flipped_bit_is_caught() {
    let bytes = encode_all(&sample(), 1, 42);
    for i in 0..bytes.len() {
        for bit in 0..8 {
            let mut bad = bytes.clone();
            bad[i] ^= 1 << bit;
            assert!(decode_all(&bad).is_err(), "byte {i} bit {bit} went unseen");
        }
    }
}

#[test]
fn records_that_do_not_add_up_are_malformed_even_with_a_good_checksum() {
    let good = encode_all(&sample(), 1, 0);
    let first_torrent = HEADER_LEN;
    // More seeders than peers.
    let mut bad = good.clone();
    bad[first_torrent + 28..first_torrent + 32].copy_from_slice(&9u32.to_le_bytes());
    reseal(&mut bad);
    assert_eq!(
        decode_all(&bad),
        Err(StateError::Malformed("more seeders than peers"))
    );
    // A peer count past the end of the body, even a huge one.
    for count in [4u32, u32::MAX] {
        let mut bad = good.clone();
        bad[first_torrent + 24..first_torrent + 28].copy_from_slice(&count.to_le_bytes());
        reseal(&mut bad);
        assert!(matches!(decode_all(&bad), Err(StateError::Malformed(_))));
    }
    // A torrent count that disagrees with the records.
    let mut bad = good.clone();
    bad[24..32].copy_from_slice(&3u64.to_le_bytes());
    reseal(&mut bad);
    assert!(matches!(decode_all(&bad), Err(StateError::Malformed(_))));
}

#[test]
fn errors_read_well() {
    assert_eq!(
        StateError::Truncated {
            expected: 100,
            found: 10
        }
        .to_string(),
        "truncated: 10 bytes of 100"
    );
    assert!(StateError::UnsupportedVersion(7)
        .to_string()
        .contains("version 7"));
}

/// A saved peer with any address that `ip` draws.
fn arb_peer<I: std::fmt::Debug>(
    ip: impl Strategy<Value = I>,
) -> impl Strategy<Value = SavedPeer<I>> {
    let fields = (any::<u16>(), any::<[u8; 20]>(), any::<u64>(), any::<bool>());
    (ip, fields).prop_map(|(ip, (port, id, last_seen, completed))| SavedPeer {
        ip,
        port,
        peer_id: PeerId(id),
        last_seen,
        completed,
    })
}

fn arb_peer4() -> impl Strategy<Value = SavedPeer<Ipv4Addr>> {
    arb_peer(any::<[u8; 4]>().prop_map(Ipv4Addr::from))
}

fn arb_peer6() -> impl Strategy<Value = SavedPeer<Ipv6Addr>> {
    arb_peer(any::<[u8; 16]>().prop_map(Ipv6Addr::from))
}

fn arb_torrent() -> impl Strategy<Value = SavedTorrent> {
    let v4 = (
        prop::collection::vec(arb_peer4(), 0..4),
        prop::collection::vec(arb_peer4(), 0..4),
    );
    let v6 = (
        prop::collection::vec(arb_peer6(), 0..3),
        prop::collection::vec(arb_peer6(), 0..3),
    );
    (any::<[u8; 20]>(), any::<u32>(), v4, v6).prop_map(|(hash, completed, v4, v6)| SavedTorrent {
        info_hash: InfoHash(hash),
        completed,
        v4: SavedHalf {
            seeders: v4.0,
            leechers: v4.1,
        },
        v6: SavedHalf {
            seeders: v6.0,
            leechers: v6.1,
        },
    })
}

proptest! {
    #[test]
    fn any_torrents_round_trip(
        torrents in prop::collection::vec(arb_torrent(), 0..12),
        split in 0usize..12,
        saved_at in any::<u64>(),
    ) {
        let bytes = encode_all(&torrents, split, saved_at);
        prop_assert_eq!(decode_all(&bytes).unwrap(), (saved_at, torrents));
    }

    /// Whatever the bytes, parsing answers (never panics), and a file that
    /// parses yields only records that read.
    #[test]
    fn arbitrary_bytes_never_panic(
        mut bytes in prop::collection::vec(any::<u8>(), 0..400),
        seal in any::<bool>(),
        version in OLDEST_FORMAT_VERSION..=FORMAT_VERSION,
    ) {
        if bytes.len() >= HEADER_LEN + TRAILER_LEN && seal {
            bytes[..8].copy_from_slice(&MAGIC);
            bytes[8..12].copy_from_slice(&version.to_le_bytes());
            let body = (bytes.len() - HEADER_LEN - TRAILER_LEN) as u64;
            bytes[32..40].copy_from_slice(&body.to_le_bytes());
            reseal(&mut bytes);
        }
        if let Ok(file) = StateFile::parse(&bytes) {
            for record in file.records() {
                let record = record.unwrap();
                let _ = record.to_saved();
            }
        }
    }
}
