//! What a peer reports it has transferred of a torrent: `uploaded` and
//! `downloaded` that grow with time, as a client's session totals do, so
//! that a private tracker credits a delta on every announce after the
//! first of a (peer, torrent), and `left` that shrinks as a leecher
//! downloads. Stateless: a function of the peer, the torrent and the time
//! since the load began, so that every announce of a pair reports at least
//! what the one before did, whichever connection or socket sends it.

use crate::model::{mix64, AnnouncePlan};

/// Most a peer uploads, bytes per second (a seeder; a leecher a quarter).
pub const MAX_UPLOAD_RATE: u64 = 2 << 20;
/// Most a leecher downloads, bytes per second.
pub const MAX_DOWNLOAD_RATE: u64 = 4 << 20;
/// Most a pair has transferred when the load begins (its session so far).
const MAX_START: u64 = 1 << 30;

/// The totals an announce reports.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transfer {
    pub uploaded: u64,
    pub downloaded: u64,
    pub left: u64,
}

/// The totals of `plan`'s peer on its torrent `now_ns` after the load
/// began. Each pair has its own totals at the start and its own rates; a
/// seeder (or a `completed` announce) reports `left` 0, a leecher what it
/// still lacks, never less than 1 byte (it keeps leeching, as the model
/// says).
pub fn transfer(plan: &AnnouncePlan, now_ns: u64) -> Transfer {
    let h = mix64(u64::from(plan.peer.index) ^ plan.torrent.rotate_left(32) ^ 0x7472_616e);
    let h2 = mix64(h);
    let secs_x1024 = u128::from(now_ns) * 1024 / 1_000_000_000;
    let grown = |rate: u64| (u128::from(rate) * secs_x1024 / 1024) as u64;
    // By what the peer is, not by this announce's `left`: a leecher's
    // `completed` (left 0) keeps its totals growing as before.
    let seeder = plan.peer.seeder;
    let up_rate = (h >> 32) % MAX_UPLOAD_RATE / if seeder { 1 } else { 4 };
    let uploaded = (h % MAX_START).saturating_add(grown(up_rate));
    let got = if seeder {
        0
    } else {
        grown((h2 >> 32) % MAX_DOWNLOAD_RATE)
    };
    let downloaded = (h2 % MAX_START).saturating_add(got);
    let left = if plan.left == 0 {
        0
    } else {
        plan.left.saturating_sub(got).max(1)
    };
    Transfer {
        uploaded,
        downloaded,
        left,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::TrafficConfig;
    use crate::model::{Rng, TrafficModel};

    fn plans(seeder_probability: f64) -> Vec<AnnouncePlan> {
        let config = TrafficConfig {
            torrents: 50,
            peers: 200,
            seeder_probability,
            ..TrafficConfig::default()
        };
        let model = TrafficModel::new(&config, 4, 3).unwrap();
        let mut rng = Rng::new(5);
        (0..200).map(|i| model.announce(&mut rng, i % 4)).collect()
    }

    #[test]
    fn totals_grow_and_left_shrinks_with_time() {
        let mut moved = 0;
        for plan in plans(0.5) {
            let mut last = transfer(&plan, 0);
            for secs in [1, 2, 10, 100, 3600] {
                let now = transfer(&plan, secs * 1_000_000_000);
                assert!(now.uploaded >= last.uploaded, "{plan:?}");
                assert!(now.downloaded >= last.downloaded, "{plan:?}");
                assert!(now.left <= last.left, "{plan:?}");
                moved += usize::from(now.uploaded > last.uploaded);
                last = now;
            }
        }
        // Nearly every pair uploads something every second or more.
        assert!(moved > 900, "{moved}");
    }

    #[test]
    fn seeders_report_nothing_left_and_leechers_something() {
        for plan in plans(0.5) {
            for secs in [0, 7, 1_000_000] {
                let t = transfer(&plan, secs * 1_000_000_000);
                if plan.left == 0 {
                    assert_eq!(t.left, 0);
                    if plan.peer.seeder {
                        assert_eq!(t.downloaded, transfer(&plan, 0).downloaded);
                    }
                } else {
                    assert!(t.left >= 1 && t.left <= plan.left);
                }
            }
        }
    }

    #[test]
    fn rates_stay_within_the_bounds() {
        for plan in plans(0.5) {
            let a = transfer(&plan, 10_000_000_000);
            let b = transfer(&plan, 20_000_000_000);
            assert!(b.uploaded - a.uploaded <= 10 * MAX_UPLOAD_RATE);
            assert!(b.downloaded - a.downloaded <= 10 * MAX_DOWNLOAD_RATE);
        }
    }

    #[test]
    fn the_same_pair_at_the_same_time_reports_the_same() {
        let all = plans(0.5);
        assert_eq!(transfer(&all[0], 123), transfer(&all[0], 123));
        // Pairs differ from one another.
        let distinct: std::collections::HashSet<u64> =
            all.iter().map(|p| transfer(p, 0).uploaded).collect();
        assert!(distinct.len() > 100);
    }
}
