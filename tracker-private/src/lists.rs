//! How many peer lists each user may receive, UNIT3D-Announce's guard
//! against scraping a private tracker's swarms: per user, one count of seed
//! lists and one of leech lists for each window (60 s, 15 min, ... a
//! week), each decaying exponentially (`count * e^(-elapsed / window)`) and
//! raised by one per list handed out; a list is handed out only while every
//! window of its kind stays at or under its maximum.
//!
//! The counts are shared by every worker's ledger, as [`crate::slots`]'s
//! are: a table of atomic words indexed by user id in chunks allocated on
//! first use, so a user's lists count wherever their torrents live, and
//! no lookup takes a lock. Each word holds one window's count (in 1/1024)
//! and the second it was last raised.

use crate::site::UserId;
use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;

/// Windows per kind of list at most (UNIT3D-Announce's defaults have 5).
pub const MAX_WINDOWS: usize = 8;

/// Users per chunk of the table: with the default ten windows, 5 MiB a
/// chunk, allocated when one of its users first receives a list; the
/// table of chunks itself takes 1.5 MiB.
const CHUNK: usize = 1 << 16;
/// Chunks: enough for every u32 user id.
const CHUNKS: usize = (u32::MAX as usize >> 16) + 1;
/// A count's fixed-point unit.
const ONE: f64 = 1024.0;

/// One kind of list's windows: seconds and the most lists in each.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ListLimits {
    windows: Vec<(u32, u32)>,
}

/// Why a list of limits does not parse.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ListLimitsError(String);

impl fmt::Display for ListLimitsError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl ListLimits {
    /// Parses UNIT3D-Announce's form, `WINDOW_SECS=MAX;...`
    /// (`60=10;900=25`); empty: no limit.
    pub fn parse(text: &str) -> Result<ListLimits, ListLimitsError> {
        let mut windows = Vec::new();
        for part in text.split(';').map(str::trim).filter(|p| !p.is_empty()) {
            let parsed = part.split_once('=').and_then(|(window, max)| {
                Some((
                    window.trim().parse::<u32>().ok()?,
                    max.trim().parse::<u32>().ok()?,
                ))
            });
            let Some((window, max)) = parsed.filter(|&(window, max)| window > 0 && max > 0) else {
                return Err(ListLimitsError(format!(
                    "`{part}` is not SECONDS=MAX with both above 0"
                )));
            };
            if windows.iter().any(|&(w, _)| w == window) {
                return Err(ListLimitsError(format!("the window {window} comes twice")));
            }
            windows.push((window, max));
        }
        if windows.len() > MAX_WINDOWS {
            return Err(ListLimitsError(format!(
                "{} windows: at most {MAX_WINDOWS}",
                windows.len()
            )));
        }
        Ok(ListLimits { windows })
    }

    pub fn is_off(&self) -> bool {
        self.windows.is_empty()
    }
}

/// The kinds of list.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ListKind {
    Seeders,
    Leechers,
}

/// One window's count of one user's lists, in UNIT3D-Announce's terms.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct WindowCount {
    /// Lists counted (decayed) when last raised.
    pub count: f64,
    /// The most the window allows.
    pub max_count: f64,
    /// Seconds.
    pub window: f64,
    /// Unix seconds of `count`.
    pub updated_at: f64,
}

/// Every user's counts of lists received, shared by the workers.
pub struct ListRates {
    seeders: ListLimits,
    leechers: ListLimits,
    /// Words per user: the seed windows, then the leech windows.
    per_user: usize,
    chunks: Box<[OnceLock<Box<[AtomicU64]>>]>,
}

impl fmt::Debug for ListRates {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let used = self.chunks.iter().filter(|c| c.get().is_some()).count();
        write!(f, "ListRates({used} chunks)")
    }
}

impl ListRates {
    pub fn new(seeders: ListLimits, leechers: ListLimits) -> ListRates {
        let per_user = seeders.windows.len() + leechers.windows.len();
        let chunks = if per_user == 0 { 0 } else { CHUNKS };
        ListRates {
            seeders,
            leechers,
            per_user,
            chunks: (0..chunks).map(|_| OnceLock::new()).collect(),
        }
    }

    /// Whether `user` may receive a list of `kind` at `now` (Unix
    /// seconds); if so, it counts. A list refused counts nothing.
    pub fn take(&self, user: UserId, kind: ListKind, now: u64) -> bool {
        let (limits, first) = match kind {
            ListKind::Seeders => (&self.seeders, 0),
            ListKind::Leechers => (&self.leechers, self.seeders.windows.len()),
        };
        if limits.is_off() {
            return true;
        }
        let Some(words) = self.words(user) else {
            return true;
        };
        let now = u32::try_from(now).unwrap_or(u32::MAX);
        let windows = limits.windows.iter().zip(words.iter().skip(first));
        let under = windows.clone().all(|(&(window, max), word)| {
            decayed(word.load(Ordering::Relaxed), window, now) + ONE <= f64::from(max) * ONE
        });
        if under {
            for (&(window, _), word) in windows {
                // A CAS loop: two workers may count a list of one user at
                // once, and neither count may be lost.
                let _ = word.fetch_update(Ordering::Relaxed, Ordering::Relaxed, |old| {
                    Some(pack(decayed(old, window, now) + ONE, now))
                });
            }
        }
        under
    }

    /// `user`'s count of lists of `kind` in each window, as the site API
    /// shows them (UNIT3D-Announce's `rates`): the count as it was when
    /// last raised, and when that was; a window never raised counts 0 at
    /// `now`. Reads only: a user who never received a list allocates
    /// nothing.
    pub fn windows(
        &self,
        user: UserId,
        kind: ListKind,
        now: u64,
    ) -> impl Iterator<Item = WindowCount> + '_ {
        let (limits, first) = match kind {
            ListKind::Seeders => (&self.seeders, 0),
            ListKind::Leechers => (&self.leechers, self.seeders.windows.len()),
        };
        let user = user as usize;
        let words = self
            .chunks
            .get(user / CHUNK)
            .and_then(OnceLock::get)
            .and_then(|chunk| {
                let start = user % CHUNK * self.per_user + first;
                chunk.get(start..start + limits.windows.len())
            });
        limits
            .windows
            .iter()
            .enumerate()
            .map(move |(i, &(window, max))| {
                let word = words
                    .and_then(|w| w.get(i))
                    .map_or(0, |w| w.load(Ordering::Relaxed));
                let raised_at = word as u32;
                WindowCount {
                    count: f64::from((word >> 32) as u32) / ONE,
                    max_count: f64::from(max),
                    window: f64::from(window),
                    updated_at: if word == 0 {
                        now as f64
                    } else {
                        f64::from(raised_at)
                    },
                }
            })
    }

    fn words(&self, user: UserId) -> Option<&[AtomicU64]> {
        let user = user as usize;
        let chunk = self.chunks.get(user / CHUNK)?;
        let chunk = chunk.get_or_init(|| {
            (0..CHUNK * self.per_user)
                .map(|_| AtomicU64::new(0))
                .collect()
        });
        let start = user % CHUNK * self.per_user;
        chunk.get(start..start + self.per_user)
    }
}

/// A word's count at `now`, in 1/1024, decayed over the seconds since it was
/// last raised.
fn decayed(word: u64, window: u32, now: u32) -> f64 {
    let count = f64::from((word >> 32) as u32);
    let at = word as u32;
    let elapsed = f64::from(now.saturating_sub(at));
    count * (-elapsed / f64::from(window)).exp()
}

fn pack(count: f64, now: u32) -> u64 {
    // Saturating: a count past u32::MAX / 1024 lists is over any limit.
    let count = count.min(f64::from(u32::MAX)) as u32;
    u64::from(count) << 32 | u64::from(now)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn limits(text: &str) -> ListLimits {
        ListLimits::parse(text).unwrap()
    }

    #[test]
    fn limits_parse_as_unit3d_announce_writes_them() {
        let parsed = limits("60=10;900=25; 7200 = 125 ;");
        assert_eq!(parsed.windows, vec![(60, 10), (900, 25), (7200, 125)]);
        assert!(limits("").is_off() && limits(" ; ").is_off());
        for bad in ["60", "60=", "=10", "0=10", "60=0", "x=1", "60=10;60=20"] {
            assert!(ListLimits::parse(bad).is_err(), "{bad}");
        }
        let nine = (1..=9)
            .map(|i| format!("{i}=1"))
            .collect::<Vec<_>>()
            .join(";");
        assert!(ListLimits::parse(&nine).is_err());
    }

    #[test]
    fn lists_are_counted_per_user_and_kind_until_a_window_is_full() {
        let rates = ListRates::new(limits("60=3;3600=4"), limits("60=1"));
        let t = 1_000_000;
        for _ in 0..3 {
            assert!(rates.take(7, ListKind::Seeders, t));
        }
        assert!(!rates.take(7, ListKind::Seeders, t), "60 s window full");
        assert!(rates.take(8, ListKind::Seeders, t), "another user");
        assert!(rates.take(7, ListKind::Leechers, t), "another kind");
        assert!(!rates.take(7, ListKind::Leechers, t + 1));
        // After a minute the short window has mostly drained (3 e^-1 = 1.1):
        // one more fits it, and then the hour's 4 is full.
        assert!(rates.take(7, ListKind::Seeders, t + 60));
        assert!(
            !rates.take(7, ListKind::Seeders, t + 120),
            "the hour's window"
        );
        // Much later, everything has drained.
        assert!(rates.take(7, ListKind::Seeders, t + 100_000));
    }

    #[test]
    fn no_limits_count_nothing_and_allocate_nothing() {
        let rates = ListRates::new(ListLimits::default(), ListLimits::default());
        for _ in 0..100 {
            assert!(rates.take(u32::MAX, ListKind::Seeders, 5));
        }
        assert_eq!(format!("{rates:?}"), "ListRates(0 chunks)");
        let seeds_only = ListRates::new(limits("60=1"), ListLimits::default());
        assert!(seeds_only.take(1, ListKind::Leechers, 5));
        assert!(seeds_only.take(1, ListKind::Leechers, 5));
        assert!(seeds_only.take(u32::MAX, ListKind::Seeders, 5));
        assert!(!seeds_only.take(u32::MAX, ListKind::Seeders, 5));
    }

    #[test]
    fn each_window_reads_as_unit3d_announce_shows_it() {
        let rates = ListRates::new(limits("60=3;3600=4"), limits("900=2"));
        let t = 1_000_000;
        let never: Vec<_> = rates.windows(7, ListKind::Seeders, t).collect();
        let zero = |window, max_count| WindowCount {
            count: 0.0,
            max_count,
            window,
            updated_at: t as f64,
        };
        assert_eq!(never, [zero(60.0, 3.0), zero(3600.0, 4.0)]);
        assert_eq!(
            format!("{rates:?}"),
            "ListRates(0 chunks)",
            "reads allocate nothing"
        );
        assert!(rates.take(7, ListKind::Seeders, t));
        assert!(rates.take(7, ListKind::Seeders, t + 60));
        let seeds: Vec<_> = rates.windows(7, ListKind::Seeders, t + 100).collect();
        // 1 decayed over 60 s, plus 1: 1 + e^-1 in the minute's window.
        assert!(
            (seeds[0].count - (1.0 + (-1.0f64).exp())).abs() < 0.01,
            "{seeds:?}"
        );
        assert!((seeds[1].count - (1.0 + (-60.0f64 / 3600.0).exp())).abs() < 0.01);
        assert_eq!(seeds[0].updated_at, (t + 60) as f64);
        let leeches: Vec<_> = rates.windows(7, ListKind::Leechers, t + 100).collect();
        assert_eq!(
            leeches,
            [zero(900.0, 2.0)].map(|w| WindowCount {
                updated_at: (t + 100) as f64,
                ..w
            })
        );
        let off = ListRates::new(ListLimits::default(), ListLimits::default());
        assert_eq!(off.windows(7, ListKind::Seeders, t).count(), 0);
    }
}
