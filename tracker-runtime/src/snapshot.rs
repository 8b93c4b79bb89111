//! Snapshots: the state file written while serving, every
//! `state.snapshot_interval_secs`, so that a crash or a SIGKILL loses at
//! most one interval of swarms rather than all since the last clean stop.
//!
//! A writer thread paces the rounds. For each it raises the round number;
//! every worker, which looks at it a few times a second, saves its shard
//! one segment per step with a yield between steps (so no request waits
//! behind more than a segment), and sends its section to the writer. The
//! writer, once it has every worker's, replaces the file atomically off the
//! workers' threads, as the stop does. A round that a worker does not
//! finish in time is given up and counted as failed; the next one starts
//! afresh. The writer is stopped, and any write of it finished, before the
//! stop's own save, so a snapshot never replaces the final file.

use std::path::PathBuf;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError, Sender};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use tracing::{debug, warn};
use tracker_swarm::state::{section_len_hint, Section};
use tracker_swarm::SwarmStore;

use crate::clock;
use crate::metrics::{
    MetricSource, Sample, SNAPSHOTS, SNAPSHOT_DURATION, SNAPSHOT_LAST_SAVED, SNAPSHOT_SLOWEST_STEP,
};
use crate::quantum::Quantum;
use crate::shard::Shard;
use crate::state_file;

/// How often a worker looks for a new round.
const POLL: Duration = Duration::from_millis(200);
/// The least time the workers get to hand in their parts (more when the
/// interval is longer: a round may take up to an interval).
#[cfg(not(test))]
const MIN_ROUND_TIME: Duration = Duration::from_secs(60);
/// Tests give up on a round sooner.
#[cfg(test)]
const MIN_ROUND_TIME: Duration = Duration::from_millis(300);

/// A worker's part of one round.
struct Part {
    worker: usize,
    round: u64,
    section: Section,
    slowest_step: Duration,
}

enum ToWriter {
    Part(Part),
    Stop,
}

/// What the metrics show of the snapshots, kept by the writer.
#[derive(Debug, Default)]
struct SnapshotStats {
    saved: AtomicU64,
    failed: AtomicU64,
    last_saved_unix: AtomicU64,
    duration_ms: AtomicU64,
    slowest_step_us: AtomicU64,
}

/// A worker's handle on the snapshots (`Send`: made on the start thread).
#[derive(Clone)]
pub struct Snapshots {
    requested: Arc<AtomicU64>,
    parts: Sender<ToWriter>,
    stats: Arc<SnapshotStats>,
}

impl Snapshots {
    /// Takes this worker's part of every round until the process ends.
    /// Worker 0 exports the snapshot metrics.
    pub async fn take_forever(self, shard: Rc<Shard>) {
        let stats: Rc<dyn MetricSource> = Rc::new(StatsOf(self.stats.clone()));
        if shard.index() == 0 {
            shard.add_metric_source(Rc::downgrade(&stats));
        }
        let mut done = self.requested.load(Ordering::Acquire);
        loop {
            glommio::timer::sleep(POLL).await;
            let round = self.requested.load(Ordering::Acquire);
            if round == done {
                continue;
            }
            done = round;
            let hint = shard.with_store(|store| {
                let peers = store.peer_count();
                section_len_hint(store.torrent_count(), peers.seeders + peers.leechers)
            });
            let mut section = Section::with_capacity(hint);
            let mut slowest_step = Duration::ZERO;
            // Steps taken back to back would hold the reactor off (glommio
            // polls it only when no task is runnable, or every 100 ms): the
            // quantum goes round it every 500 µs.
            let mut quantum = Quantum::default();
            for segment in 0..SwarmStore::SEGMENTS {
                let started = Instant::now();
                shard.with_store(|store| {
                    store.save_segment(segment, clock::now_secs(), clock::unix_secs(), &mut section)
                });
                slowest_step = slowest_step.max(started.elapsed());
                quantum.yield_now().await;
            }
            let part = Part {
                worker: shard.index(),
                round,
                section,
                slowest_step,
            };
            // The writer is gone only when the process stops.
            if self.parts.send(ToWriter::Part(part)).is_err() {
                return;
            }
        }
    }
}

/// The stats as a metric source of worker 0 (the `Arc` is shared with the
/// writer; a shard holds its sources as `Weak<dyn MetricSource>`).
struct StatsOf(Arc<SnapshotStats>);

impl MetricSource for StatsOf {
    fn samples(&self, out: &mut Vec<Sample>) {
        let get = |value: &AtomicU64| value.load(Ordering::Relaxed);
        let stats = &self.0;
        out.extend([
            Sample::new(&SNAPSHOTS, &[("result", "saved")], get(&stats.saved)),
            Sample::new(&SNAPSHOTS, &[("result", "failed")], get(&stats.failed)),
            Sample::new(&SNAPSHOT_LAST_SAVED, &[], get(&stats.last_saved_unix)),
            Sample::new(&SNAPSHOT_DURATION, &[], get(&stats.duration_ms)),
            Sample::new(&SNAPSHOT_SLOWEST_STEP, &[], get(&stats.slowest_step_us)),
        ]);
    }
}

/// The writer thread: stopped (and joined) on drop.
pub struct Writer {
    parts: Sender<ToWriter>,
    thread: Option<JoinHandle<()>>,
}

impl Writer {
    /// Starts the writer of `path` for `workers`, a round every `interval`,
    /// and the handle each worker takes.
    /// `first`, run on the writer's thread before the first round: waits
    /// for a predecessor that still writes the same file to be done.
    pub fn start(
        path: PathBuf,
        workers: usize,
        interval: Duration,
        first: Option<Box<dyn FnOnce() + Send>>,
    ) -> std::io::Result<(Writer, Snapshots)> {
        let (parts, received) = mpsc::channel();
        let requested = Arc::new(AtomicU64::new(0));
        let stats = Arc::new(SnapshotStats::default());
        let rounds = Rounds {
            path,
            workers,
            interval,
            requested: requested.clone(),
            received,
            stats: stats.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("snapshots".into())
            .spawn(move || {
                if let Some(first) = first {
                    first();
                }
                rounds.run()
            })?;
        let snapshots = Snapshots {
            requested,
            parts: parts.clone(),
            stats,
        };
        Ok((
            Writer {
                parts,
                thread: Some(thread),
            },
            snapshots,
        ))
    }
}

impl Drop for Writer {
    fn drop(&mut self) {
        let _ = self.parts.send(ToWriter::Stop);
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// The writer thread's state.
struct Rounds {
    path: PathBuf,
    workers: usize,
    interval: Duration,
    requested: Arc<AtomicU64>,
    received: Receiver<ToWriter>,
    stats: Arc<SnapshotStats>,
}

/// What waiting on the workers came to.
enum Waited {
    Parts(Vec<Section>, Duration),
    TimedOut(usize),
    Stopped,
}

impl Rounds {
    fn run(self) {
        // The file's checksum and copy take a CPU for a while.
        if let Err(e) = crate::workers::run_when_idle() {
            warn!(
                "snapshots: cannot lower the writer thread's priority ({e}); its writes may \
                 delay requests"
            );
        }
        let mut round = 0;
        let mut next = Instant::now() + self.interval;
        loop {
            // Parts of a round given up may still come in: dropped.
            if self.wait_until(next, 0).is_err() {
                return;
            }
            round += 1;
            let started = Instant::now();
            next = started + self.interval;
            self.requested.store(round, Ordering::Release);
            let parts = self.collect(round, started + self.interval.max(MIN_ROUND_TIME));
            let (sections, slowest_step) = match parts {
                Waited::Stopped => return,
                Waited::TimedOut(missing) => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    warn!(
                        "snapshot {round} given up: {missing} of {} workers did not hand in \
                         their swarms in time; the state file keeps the previous one",
                        self.workers
                    );
                    continue;
                }
                Waited::Parts(sections, slowest_step) => (sections, slowest_step),
            };
            match state_file::write(&self.path, &sections) {
                Ok(bytes) => {
                    let stats = &self.stats;
                    stats.saved.fetch_add(1, Ordering::Relaxed);
                    stats
                        .last_saved_unix
                        .store(clock::unix_secs(), Ordering::Relaxed);
                    stats
                        .duration_ms
                        .store(started.elapsed().as_millis() as u64, Ordering::Relaxed);
                    stats
                        .slowest_step_us
                        .store(slowest_step.as_micros() as u64, Ordering::Relaxed);
                    debug!(
                        "snapshot {round}: {} torrents and {} peers, {bytes} bytes, in {} ms \
                         (slowest step {} µs)",
                        sections.iter().map(Section::torrents).sum::<u64>(),
                        sections.iter().map(Section::peers).sum::<u64>(),
                        started.elapsed().as_millis(),
                        slowest_step.as_micros()
                    );
                }
                Err(e) => {
                    self.stats.failed.fetch_add(1, Ordering::Relaxed);
                    warn!("snapshot {round}: {e}; the state file keeps the previous one");
                }
            }
        }
    }

    /// Waits for every worker's part of `round` until `deadline`.
    fn collect(&self, round: u64, deadline: Instant) -> Waited {
        let mut sections: Vec<Option<Section>> = (0..self.workers).map(|_| None).collect();
        let mut slowest_step = Duration::ZERO;
        let mut missing = self.workers;
        while missing > 0 {
            match self.wait_until(deadline, round) {
                Err(()) => return Waited::Stopped,
                Ok(None) => return Waited::TimedOut(missing),
                Ok(Some(part)) => {
                    let Some(slot) = sections.get_mut(part.worker) else {
                        continue;
                    };
                    if slot.is_none() {
                        missing -= 1;
                    }
                    *slot = Some(part.section);
                    slowest_step = slowest_step.max(part.slowest_step);
                }
            }
        }
        Waited::Parts(sections.into_iter().flatten().collect(), slowest_step)
    }

    /// The next part of `round` before `deadline` (parts of other rounds are
    /// dropped); `Ok(None)` at the deadline, `Err` when told to stop.
    fn wait_until(&self, deadline: Instant, round: u64) -> Result<Option<Part>, ()> {
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            match self.received.recv_timeout(left) {
                Ok(ToWriter::Part(part)) if part.round == round && round > 0 => {
                    return Ok(Some(part))
                }
                Ok(ToWriter::Part(_)) => continue,
                Err(RecvTimeoutError::Timeout) => return Ok(None),
                Ok(ToWriter::Stop) | Err(RecvTimeoutError::Disconnected) => return Err(()),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracker_proto::InfoHash;
    use tracker_swarm::state::{SavedTorrent, StateFile};

    /// Stands in for worker `worker`: hands in a section of one torrent
    /// for each round the writer asks for, `rounds` times.
    fn worker(snapshots: Snapshots, worker: usize, rounds: u64) -> std::thread::JoinHandle<()> {
        std::thread::spawn(move || {
            for round in 1..=rounds {
                while snapshots.requested.load(Ordering::Acquire) < round {
                    std::thread::sleep(Duration::from_millis(5));
                }
                let mut section = Section::default();
                let torrent = SavedTorrent {
                    info_hash: InfoHash([worker as u8; 20]),
                    ..SavedTorrent::default()
                };
                section.push(&torrent);
                let part = Part {
                    worker,
                    round,
                    section,
                    slowest_step: Duration::from_micros(7),
                };
                let _ = snapshots.parts.send(ToWriter::Part(part));
            }
        })
    }

    fn wait_for(what: impl Fn() -> bool) {
        let deadline = Instant::now() + Duration::from_secs(10);
        while !what() {
            assert!(Instant::now() < deadline, "not in 10 s");
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn temp(name: &str) -> PathBuf {
        std::env::temp_dir().join(format!("snapshot-{name}-{}", std::process::id()))
    }

    #[test]
    fn a_round_with_every_part_is_written_and_counted() {
        let path = temp("written");
        let (writer, snapshots) =
            Writer::start(path.clone(), 2, Duration::from_millis(20), None).unwrap();
        let stats = snapshots.stats.clone();
        let workers = [worker(snapshots.clone(), 0, 1), worker(snapshots, 1, 1)];
        wait_for(|| stats.saved.load(Ordering::Relaxed) == 1);
        let bytes = std::fs::read(&path).unwrap();
        assert_eq!(StateFile::parse(&bytes).unwrap().torrents, 2);
        assert_eq!(stats.slowest_step_us.load(Ordering::Relaxed), 7);
        assert!(stats.last_saved_unix.load(Ordering::Relaxed) > 0);
        drop(writer);
        workers.into_iter().for_each(|w| w.join().unwrap());
        let _ = std::fs::remove_file(path);
    }

    #[test]
    fn a_round_a_worker_misses_is_given_up_and_the_file_kept() {
        let path = temp("missed");
        let (writer, snapshots) =
            Writer::start(path.clone(), 2, Duration::from_millis(20), None).unwrap();
        let stats = snapshots.stats.clone();
        // Worker 1 never hands in its part.
        let only = worker(snapshots, 0, 1);
        wait_for(|| stats.failed.load(Ordering::Relaxed) >= 1);
        assert_eq!(stats.saved.load(Ordering::Relaxed), 0);
        assert!(!path.exists());
        drop(writer);
        only.join().unwrap();
    }

    #[test]
    fn a_file_that_cannot_be_written_is_counted_as_failed() {
        let path = temp("no-such-dir").join("state");
        let (writer, snapshots) = Writer::start(path, 1, Duration::from_millis(20), None).unwrap();
        let stats = snapshots.stats.clone();
        let only = worker(snapshots, 0, 1);
        wait_for(|| stats.failed.load(Ordering::Relaxed) == 1);
        assert_eq!(stats.saved.load(Ordering::Relaxed), 0);
        drop(writer);
        only.join().unwrap();
    }
}
