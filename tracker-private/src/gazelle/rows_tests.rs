//! A Gazelle site's rows from what the core settled: the columns' rules
//! (addresses, user agents), and the bytes a session's announces credit,
//! through the ledger and a flush, held to Ocelot's (the model): never
//! more upload credited, never less download charged.

use std::net::IpAddr;
use std::sync::Arc;

use proptest::prelude::*;
use tracker_proto::{AnnounceEvent, AnswerPeers};

use super::rows::{gazelle_rows, USER_AGENT_CHARS};
use super::rules_tests::both;
use crate::announce::PrivateAnnounce;
use crate::batch::{Agent, HistoryRow, PeerKey, PeerRow, Rows};
use crate::ledger::{Ledger, LedgerConfig};
use crate::ocelot_model::OcelotQuery;
use crate::slots::LeechingCounts;
use crate::testing::{announce, peer, MemoryDb};

fn peer_row(ip: &str, agent: &[u8]) -> PeerRow {
    PeerRow {
        ip: ip.parse::<IpAddr>().unwrap(),
        port: 6881,
        agent: Agent::new(agent),
        uploaded: 10,
        downloaded: 20,
        left: 30,
        active: true,
        seeder: false,
        visible: true,
        connectable: true,
        created_at: 1000,
        updated_at: 1600,
    }
}

#[test]
fn the_columns_hold_what_the_site_may_have() {
    let (site, _) = both(&[], None, 0);
    let mut rows = Rows::default();
    let key = |user, torrent, n| PeerKey {
        user_id: user,
        torrent_id: torrent,
        peer_id: peer(n),
    };
    let long_agent = [b'x'; 64];
    rows.peers
        .insert(key(1, 1, 1), peer_row("192.0.2.7", &long_agent));
    rows.peers
        .insert(key(1, 2, 2), peer_row("2001:db8::1", b"qBittorrent/4.2.5"));
    rows.peers
        .insert(key(2, 1, 3), peer_row("192.0.2.8", b"Transmission/2.94"));
    let history = |completed_at, actual_downloaded| HistoryRow {
        agent: Agent::new(b""),
        uploaded: 0,
        downloaded: 0,
        actual_uploaded: 0,
        actual_downloaded,
        client_uploaded: 0,
        client_downloaded: 0,
        seedtime: 0,
        seeder: false,
        active: true,
        immune: false,
        completed_at,
        created_at: 1000,
        updated_at: 1600,
    };
    rows.history.insert((1, 1), history(Some(1500), 0));
    rows.history.insert((2, 1), history(Some(1600), 0));
    rows.history.insert((1, 4), history(None, 700));
    rows.history.insert((1, 2), history(None, 700));
    let out = gazelle_rows(&rows, &site);

    let ips: Vec<(u32, u32, &str)> = out
        .peers
        .iter()
        .map(|p| (p.user, p.torrent, p.ip.as_str()))
        .collect();
    // IPv4 as text; IPv6 and a protected user's address left out.
    assert_eq!(ips, [(1, 1, "192.0.2.7"), (2, 1, ""), (1, 2, "")]);
    let first = &out.peers[0];
    assert_eq!(first.useragent.chars().count(), USER_AGENT_CHARS);
    assert_eq!(
        (first.timespent, first.mtime, first.remaining),
        (600, 1600, 30)
    );
    let snatches: Vec<(u32, u32, u64, &str)> = out
        .snatches
        .iter()
        .map(|s| (s.user, s.torrent, s.at, s.ip.as_str()))
        .collect();
    assert_eq!(snatches, [(1, 1, 1500, "192.0.2.7"), (2, 1, 1600, "")]);
    // The token holder's download on the token's torrent only.
    assert_eq!(out.tokens.len(), 1);
    assert_eq!(
        (
            out.tokens[0].user,
            out.tokens[0].torrent,
            out.tokens[0].downloaded
        ),
        (1, 4, 700)
    );
}

proptest! {
    /// A session of announces (a start, then totals that grow, reset or
    /// stay, a stop at the end or not), through the ledger and a flush:
    /// the user's credited upload is never more than Ocelot's, its charged
    /// download never less, on every leech type and with a token.
    #[test]
    fn a_session_credits_no_more_and_charges_no_less_than_ocelot(
        torrent in 1u32..5,
        steps in proptest::collection::vec((0u64..1 << 30, 0u64..1 << 30), 1..6),
        stop in any::<bool>(),
    ) {
        let (site, mut ocelot) = both(&[], None, 0);
        let mut ledger = Ledger::new(LedgerConfig {
            max_upload_rate: 0,
            min_announce_interval: 0,
            ..LedgerConfig::default()
        })
        .with_slots(Arc::new(LeechingCounts::default()));
        let mut db = MemoryDb::default();
        let mut peers = AnswerPeers::default();
        let first = announce(1, torrent, 1);
        let mut announces = vec![first];
        for (i, &(up, down)) in steps.iter().enumerate() {
            let last = i + 1 == steps.len();
            announces.push(PrivateAnnounce {
                uploaded: up,
                downloaded: down,
                event: if last && stop { AnnounceEvent::Stopped } else { AnnounceEvent::None },
                ..first
            });
        }
        let (mut ours_up, mut ours_down, mut theirs_up, mut theirs_down) = (0, 0, 0, 0);
        for (i, a) in announces.iter().enumerate() {
            let now = 1_000 + 60 * i as u64;
            ledger.announce(&site, a, now * 1_000_000, &mut peers).unwrap();
            let records = ocelot.announce(&a.passkey.0, &OcelotQuery::of(a), now as i64).records;
            for r in &records.users {
                theirs_up += r.uploaded as u64;
                theirs_down += r.downloaded as u64;
            }
            // A flush after each announce, as the database thread may.
            let settled = db.flush(&ledger.take_batch(), &ledger.config().credit_rules());
            for u in gazelle_rows(&settled.rows, &site).users {
                ours_up += u.uploaded;
                ours_down += u.downloaded;
            }
        }
        prop_assert!(ours_up <= theirs_up, "upload {} > Ocelot's {}", ours_up, theirs_up);
        prop_assert!(ours_down >= theirs_down, "download {} < Ocelot's {}", ours_down, theirs_down);
    }
}
