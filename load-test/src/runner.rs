//! Running the generator's workers: one glommio executor each, placed on the
//! CPUs asked for (the project's `plan_workers`), a progress line once a
//! second from counters the workers publish, and their statistics merged at
//! the end.

use futures_lite::FutureExt;
use std::cell::RefCell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracker_runtime::workers::{self, WorkerPlacement};

use crate::model::Kind;
use crate::stats::{progress_line, Counters, Stats};

/// Where the workers run: pinned one per CPU when `cpus` lists enough of them,
/// otherwise free to move among them (or among all CPUs without `cpus`).
pub fn placements(
    workers: Option<usize>,
    cpus: Option<&str>,
) -> Result<Vec<WorkerPlacement>, String> {
    let allowed = workers::allowed_cpus()?;
    match cpus {
        Some(list) => {
            let cpus = workers::parse_cpu_list(list).map_err(|e| format!("--cpus: {e}"))?;
            let n = workers.unwrap_or(cpus.len());
            workers::plan_workers(n, Some(&cpus), &allowed, n <= cpus.len())
        }
        None => workers::plan_workers(workers.unwrap_or(1), None, &allowed, false),
    }
}

/// What a worker gets besides its index: when the run started (shared by all,
/// so their clocks agree) and where to publish its counters for the progress
/// line.
#[derive(Clone)]
pub struct WorkerEnv {
    pub index: usize,
    pub start: Instant,
    pub live: Arc<Mutex<Counters>>,
}

impl WorkerEnv {
    /// Nanoseconds since the start of the run.
    pub fn now_ns(&self) -> u64 {
        self.start.elapsed().as_nanos() as u64
    }

    pub fn publish(&self, counters: &Counters) {
        if let Ok(mut live) = self.live.lock() {
            *live = *counters;
        }
    }
}

/// Awaits a worker's tasks while publishing its counters for the progress
/// line every 200 ms, then publishes them a last time and returns the tasks'
/// results with the worker's final statistics.
pub async fn finish_worker<T>(
    env: &WorkerEnv,
    stats: &RefCell<Stats>,
    tasks: Vec<glommio::Task<T>>,
) -> (Vec<T>, Stats) {
    let ticker = async {
        loop {
            glommio::timer::sleep(Duration::from_millis(200)).await;
            env.publish(&stats.borrow().counters);
        }
    };
    let all = async {
        let mut results = Vec::with_capacity(tasks.len());
        for task in tasks {
            results.push(task.await);
        }
        results
    };
    let results = futures_lite::future::or(all, ticker).await;
    env.publish(&stats.borrow().counters);
    let stats = stats.borrow().clone();
    (results, stats)
}

/// Runs `worker` on every placement, prints progress until they have all
/// ended, and returns their merged statistics.
/// A worker that has not ended `deadline` after the start is an error (every
/// worker loop is bounded in time; this is the backstop).
pub fn run<F, Fut>(
    placements: Vec<WorkerPlacement>,
    progress: bool,
    deadline: Duration,
    kinds: &[Kind],
    worker: F,
) -> Result<Stats, String>
where
    F: Fn(WorkerEnv) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<Stats, String>> + 'static,
{
    let start = Instant::now();
    let finished = Arc::new(AtomicUsize::new(0));
    let mut handles = Vec::new();
    let mut lives = Vec::new();
    for (index, placement) in placements.iter().enumerate() {
        let live = Arc::new(Mutex::new(Counters::default()));
        lives.push(live.clone());
        let env = WorkerEnv { index, start, live };
        let worker = worker.clone();
        let finished = finished.clone();
        let handle = workers::executor_builder(placement, &format!("load-{index}"))?
            .spawn(move || async move {
                let result = AssertUnwindSafe(worker(env)).catch_unwind().await;
                finished.fetch_add(1, Ordering::SeqCst);
                result.unwrap_or_else(|panic| {
                    let text = panic
                        .downcast_ref::<&str>()
                        .map(|s| s.to_string())
                        .or_else(|| panic.downcast_ref::<String>().cloned())
                        .unwrap_or_default();
                    Err(format!("panicked: {text}"))
                })
            })
            .map_err(|e| format!("cannot start worker {index} ({placement:?}): {e}"))?;
        handles.push(handle);
    }

    let workers = handles.len();
    let mut before = Counters::default();
    let mut last = Instant::now();
    let mut next = 1u64;
    while finished.load(Ordering::SeqCst) < workers {
        std::thread::sleep(Duration::from_millis(20));
        let elapsed = start.elapsed();
        if elapsed > deadline {
            return Err(format!(
                "workers still running {} s after the start",
                deadline.as_secs()
            ));
        }
        if progress && elapsed >= Duration::from_secs(next) {
            next = elapsed.as_secs() + 1;
            let mut now = Counters::default();
            for live in &lives {
                now.add(&live.lock().map(|c| *c).unwrap_or_default());
            }
            let dt = last.elapsed().as_secs_f64();
            last = Instant::now();
            eprintln!(
                "{}",
                progress_line(elapsed.as_secs_f64(), &now, &before, dt, kinds)
            );
            before = now;
        }
    }

    let mut total = Stats::default();
    let mut failures = Vec::new();
    for (index, handle) in handles.into_iter().enumerate() {
        match handle.join() {
            Ok(Ok(stats)) => total.merge(&stats),
            Ok(Err(e)) => failures.push(format!("worker {index}: {e}")),
            Err(e) => failures.push(format!("worker {index}: {e}")),
        }
    }
    if failures.is_empty() {
        Ok(total)
    } else {
        Err(failures.join("; "))
    }
}
