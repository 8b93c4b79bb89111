//! A Gazelle site's rules held to Ocelot's (the executable model,
//! `crate::ocelot_model`): the same refusals in the same order and words,
//! and the same bytes credited; and a user who may not leech accounted,
//! hidden and refused after, through a ledger.

use std::sync::Arc;

use proptest::prelude::*;
use tracker_proto::{AnnounceEvent, AnswerPeers};

use super::refusal::GazelleRefusal;
use super::request::LeechType;
use super::rules::factors;
use super::site::{GazelleRecords, GazelleSite, GazelleTorrent, GazelleUser};
use crate::admission::SiteRules;
use crate::ledger::{Ledger, LedgerConfig};
use crate::ocelot_model::{
    OcelotConfig, OcelotModel, OcelotQuery, OcelotRows, TorrentRow, UserRow,
};
use crate::refusal::Refusal;
use crate::rules::credit;
use crate::slots::LeechingCounts;
use crate::testing::{announce, hash, passkey, peer};

/// The column's text of a leech type, as a load reads it.
fn column(leech: LeechType) -> &'static [u8] {
    match leech {
        LeechType::Normal => b"0",
        LeechType::Free => b"1",
        LeechType::Neutral => b"2",
    }
}

/// One site, as our view and as Ocelot's model: users 1 (may leech) and 2
/// (may not; its address protected), torrents 1 (normal), 2 (freeleech),
/// 3 (neutral), 4 (normal, user 1's token), 5 (deleted with `reason`, when
/// given), and the whitelist `whitelist`.
pub(super) fn both(
    whitelist: &[&[u8]],
    deleted: Option<i32>,
    now: u64,
) -> (GazelleSite, OcelotModel) {
    let users = [(1, true), (2, false)];
    let torrents = [
        (1, LeechType::Normal),
        (2, LeechType::Free),
        (3, LeechType::Neutral),
        (4, LeechType::Normal),
        (5, LeechType::Normal),
    ];
    let records = GazelleRecords {
        users: users
            .iter()
            .map(|&(id, can_leech)| GazelleUser {
                id,
                passkey: passkey(id),
                can_leech,
                protected: id == 2,
            })
            .collect(),
        torrents: torrents
            .iter()
            .map(|&(id, leech)| GazelleTorrent {
                id,
                info_hash: hash(id),
                leech,
                snatched: 0,
            })
            .collect(),
        tokens: vec![(1, 4)],
        whitelist: whitelist.iter().map(|p| p.to_vec()).collect(),
    };
    let rows = OcelotRows {
        users: users
            .iter()
            .map(|&(id, can_leech)| UserRow {
                id,
                can_leech,
                passkey: passkey(id).0.to_vec(),
                protected: id == 2,
            })
            .collect(),
        torrents: torrents
            .iter()
            .map(|&(id, leech)| TorrentRow {
                id,
                info_hash: hash(id).0.to_vec(),
                freetorrent: column(leech).to_vec(),
                snatched: 0,
            })
            .collect(),
        tokens: vec![(1, hash(4).0.to_vec())],
        whitelist: records.whitelist.clone(),
    };
    let mut site = GazelleSite::from_records(records, 1800, 240);
    let mut model = OcelotModel::started(OcelotConfig::default(), &rows);
    if let Some(reason) = deleted {
        let update = super::request::Update::DeleteTorrent {
            info_hash: hash(5),
            reason,
        };
        site.apply(&update, now);
        model.delete_torrent(&hash(5).0, Some(reason), now as i64);
    }
    (site, model)
}

proptest! {
    /// Whoever announces whatever, our rules refuse what Ocelot refuses,
    /// first things first, in its words; and admit the rest (a user who
    /// may not leech included: Ocelot refuses it only after accounting).
    #[test]
    fn refusals_are_ocelots(
        user in 1u32..4,
        torrent in 1u32..7,
        peer_n in 0u8..3,
        whitelist in proptest::sample::subsequence(vec![&b"-TR40"[..], b"-qB", b"M"], 0..3),
        deleted in proptest::option::of(prop_oneof![Just(-1i32), 0i32..25, Just(99)]),
    ) {
        let (site, mut model) = both(&whitelist, deleted, 1000);
        let mut a = announce(user, torrent, peer_n);
        if peer_n == 2 {
            a.peer_id.0[..3].copy_from_slice(b"M00");
        }
        let ours = site.admit(&a).err().map(|r| r.reason().into_owned());
        let theirs = model.announce(&a.passkey.0, &OcelotQuery::of(&a), 1000).reply.err();
        let theirs = theirs
            .filter(|r| *r != crate::ocelot_model::OcelotRefusal::LeechingForbidden)
            .map(|r| r.text());
        prop_assert_eq!(ours, theirs);
    }

    /// What a second announce credits, by leech type and token, is what
    /// Ocelot credits.
    #[test]
    fn credit_is_ocelots(torrent in 1u32..5, up in 0u64..1 << 40, down in 0u64..1 << 40) {
        let (site, mut model) = both(&[], None, 0);
        let first = announce(1, torrent, 1);
        let admitted = site.admit(&first).unwrap();
        model.announce(&first.passkey.0, &OcelotQuery::of(&first), 0);
        let second = crate::announce::PrivateAnnounce {
            uploaded: up,
            downloaded: down,
            event: AnnounceEvent::None,
            ..first
        };
        let records = model.announce(&second.passkey.0, &OcelotQuery::of(&second), 60).records;
        let (theirs_up, theirs_down) = records
            .users
            .iter()
            .fold((0, 0), |(u, d), r| (u + r.uploaded as u64, d + r.downloaded as u64));
        let f = admitted.factors;
        prop_assert_eq!((credit(up, f.upload), credit(down, u16::from(f.download))), (theirs_up, theirs_down));
    }
}

#[test]
fn refusal_words() {
    let words = |r: GazelleRefusal| Refusal::Site(r.words()).reason().into_owned();
    assert_eq!(words(GazelleRefusal::PasskeyNotFound), "Passkey not found");
    assert_eq!(
        words(GazelleRefusal::Unregistered { reason: None }),
        "Unregistered torrent"
    );
    assert_eq!(
        words(GazelleRefusal::Unregistered { reason: Some(0) }),
        "Unregistered torrent: Dupe"
    );
    assert_eq!(
        words(GazelleRefusal::Unregistered { reason: Some(99) }),
        "Unregistered torrent: "
    );
    assert!(!Refusal::Site(GazelleRefusal::LeechingForbidden.words()).answers_with_counts());
    assert!(Refusal::DownloadSlotLimit.answers_with_counts());
    assert_eq!(factors(LeechType::Neutral, true).upload, 0);
}

/// A user who may not leech is admitted with no download slot: its
/// leecher is accounted (its bytes credited at the flush), listed to no
/// one and handed no peers, and told Ocelot's words; as a seeder it is
/// listed.
#[test]
fn a_user_who_may_not_leech_is_accounted_and_refused_after() {
    let (site, _) = both(&[], None, 0);
    let mut ledger =
        Ledger::new(LedgerConfig::default()).with_slots(Arc::new(LeechingCounts::default()));
    let mut peers = AnswerPeers::default();
    // A seeder of user 1, so that the torrent has someone to list.
    let mut seeder = announce(1, 1, 1);
    seeder.left = 0;
    ledger
        .announce(&site, &seeder, 1_000_000, &mut peers)
        .unwrap();

    let leecher = announce(2, 1, 2);
    let admitted = ledger
        .announce(&site, &leecher, 2_000_000, &mut peers)
        .unwrap();
    assert!(admitted.hidden);
    assert_eq!(
        admitted.slot_refusal,
        Refusal::Site(GazelleRefusal::LeechingForbidden.words())
    );
    assert_eq!((admitted.seeders, admitted.leechers), (1, 0), "not listed");
    assert_eq!(peers.len(), 0, "no peers handed out");
    let batch = ledger.take_batch();
    assert!(
        batch
            .peers
            .keys()
            .any(|k| k.user_id == 2 && k.peer_id == peer(2)),
        "accounted"
    );

    let mut as_seeder = announce(2, 1, 3);
    as_seeder.left = 0;
    let admitted = ledger
        .announce(&site, &as_seeder, 3_000_000, &mut peers)
        .unwrap();
    assert!(!admitted.hidden);
    assert_eq!(admitted.seeders, 2);
}
