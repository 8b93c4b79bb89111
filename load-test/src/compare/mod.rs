//! `load-test compare`: starts a tracker command at each worker count (1..N,
//! or a list such as 1, 2, 4, 8), pinned and unpinned, and each other tracker
//! named with `--other` once at each count, runs the same load against each,
//! and writes a Markdown table (with our scaling efficiency) and an SVG plot
//! of responses per second against workers. The table and the plot are pure
//! functions of the results; the loop around them starts processes.
//!
//! - [`template`]: command templates and their `{placeholders}` (pure);
//! - [`table`]: the Markdown table and the scaling efficiency (pure);
//! - [`plot`]: the SVG plot (pure);
//! - [`process`]: starting a tracker, waiting until it serves, stopping it;
//! - [`run`](mod@run): the loop over worker counts and trackers;
//! - [`ws`]: what differs for the WebSocket load.

pub mod plot;
pub mod process;
pub mod run;
pub mod table;
pub mod template;
pub mod ws;

pub use plot::svg;
pub use run::run;
pub use table::{efficiency, markdown};
pub use template::{expand, unknown_placeholders};

use crate::stats::Summary;

/// One measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub responses_per_sec: f64,
    pub p99_us: f64,
    pub invalid: u64,
    pub timeouts: u64,
    /// The tracker's CPU over the run (all its threads, user and system),
    /// where /proc let it be read: how many CPUs it kept busy.
    pub cpus_busy: Option<f64>,
}

impl Measured {
    /// A run's summary, with `cpu` the tracker's CPU time over `wall`, the
    /// run's whole length (its set-up included).
    pub fn of(
        summary: &Summary,
        cpu: Option<std::time::Duration>,
        wall: std::time::Duration,
    ) -> Measured {
        Measured {
            responses_per_sec: summary.responses_per_sec,
            p99_us: summary.latency.p99_us,
            invalid: summary.invalid,
            timeouts: summary.timeouts,
            cpus_busy: cpu
                .filter(|_| !wall.is_zero())
                .map(|cpu| cpu.as_secs_f64() / wall.as_secs_f64()),
        }
    }

    /// The tracker's CPU microseconds per response.
    pub fn cpu_us_per_response(&self) -> Option<f64> {
        let busy = self.cpus_busy?;
        (self.responses_per_sec > 0.0).then(|| busy * 1e6 / self.responses_per_sec)
    }
}

/// The results at one worker count; `None` where that run was not possible
/// (more pinned workers than CPUs) or failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub workers: usize,
    pub pinned: Option<Measured>,
    pub unpinned: Option<Measured>,
    /// One per other tracker, in the order of their names.
    pub others: Vec<Option<Measured>>,
}

/// The worker counts to run: the list asked for (sorted, once each), else
/// 1..=`max_workers`, else one per tracker CPU.
pub fn worker_counts(
    asked: Option<&[usize]>,
    max_workers: Option<usize>,
    tracker_cpus: usize,
) -> Vec<usize> {
    match asked {
        Some(counts) => {
            let mut counts = counts.to_vec();
            counts.sort_unstable();
            counts.dedup();
            counts
        }
        None => (1..=max_workers.unwrap_or(tracker_cpus)).collect(),
    }
}

#[cfg(test)]
pub(crate) mod fixtures;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn worker_counts_from_a_list_or_a_maximum() {
        assert_eq!(worker_counts(Some(&[8, 1, 4, 2, 4]), None, 8), [1, 2, 4, 8]);
        assert_eq!(worker_counts(None, Some(3), 8), [1, 2, 3]);
        assert_eq!(worker_counts(None, None, 4), [1, 2, 3, 4]);
    }
}
