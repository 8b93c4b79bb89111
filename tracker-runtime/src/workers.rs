//! One glommio executor per worker: CPU choice and placement, and the rule
//! that the process exits as soon as any worker dies (and, after a stop on
//! request, once every worker has stopped).

use glommio::{CpuSet, LocalExecutorBuilder, Placement, PoolPlacement};
use std::collections::BTreeSet;
use std::future::Future;
use std::time::Duration;

use std::sync::mpsc;

/// Registered I/O memory per executor. glommio reserves 10 MiB by default for
/// storage I/O, which we never do; the small floor keeps every worker within a
/// tight RLIMIT_MEMLOCK (8 MiB on some hosts, and 64 KiB per worker is glommio's
/// own minimum).
const IO_MEMORY: usize = 64 << 10;

/// Where each worker runs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum WorkerPlacement {
    /// On this one CPU only.
    Pinned(usize),
    /// Anywhere among these CPUs, moved by the kernel as it likes.
    Unpinned(Vec<usize>),
}

/// Parses a CPU list such as `0-3,6` (the format of /sys and taskset).
/// Puts the calling thread under `SCHED_IDLE`: it runs only on a CPU that
/// nothing else wants, so that its work (a snapshot's write, an old
/// tracker's last save) never delays a worker's requests. A CPU kept busy
/// by a flood still gives it a little.
pub fn run_when_idle() -> std::io::Result<()> {
    let lowest = libc::sched_param { sched_priority: 0 };
    // SAFETY: plain syscall on the calling thread (0) with a valid param.
    if unsafe { libc::sched_setscheduler(0, libc::SCHED_IDLE, &lowest) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    Ok(())
}

pub fn parse_cpu_list(text: &str) -> Result<Vec<usize>, String> {
    let mut cpus = BTreeSet::new();
    for part in text.split(',').map(str::trim) {
        let num = |s: &str| {
            s.trim()
                .parse::<usize>()
                .map_err(|_| format!("`{s}` in CPU list `{text}` is not a CPU number"))
        };
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if lo > hi {
                    return Err(format!(
                        "range `{part}` in CPU list `{text}` runs backwards"
                    ));
                }
                cpus.extend(lo..=hi);
            }
            None => {
                cpus.insert(num(part)?);
            }
        }
    }
    Ok(cpus.into_iter().collect())
}

/// The CPUs this process may run on (its affinity mask: a container's or
/// taskset's limits included), in ascending order.
pub fn allowed_cpus() -> Result<Vec<usize>, String> {
    // SAFETY: cpu_set_t is plain data; sched_getaffinity writes at most its size.
    let mut set: libc::cpu_set_t = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::sched_getaffinity(0, std::mem::size_of_val(&set), &mut set) };
    if rc != 0 {
        return Err(format!(
            "sched_getaffinity failed: {}",
            std::io::Error::last_os_error()
        ));
    }
    Ok((0..libc::CPU_SETSIZE as usize)
        .filter(|&cpu| unsafe { libc::CPU_ISSET(cpu, &set) })
        .collect())
}

/// Decides where `workers` workers run. `workers == 0` means one per CPU.
/// `requested` is the `--cpus` list, if given, and must be a subset of
/// `allowed`; pinning needs a CPU of its own for every worker.
pub fn plan_workers(
    workers: usize,
    requested: Option<&[usize]>,
    allowed: &[usize],
    pin: bool,
) -> Result<Vec<WorkerPlacement>, String> {
    let cpus: Vec<usize> = match requested {
        Some(list) => {
            if let Some(bad) = list.iter().find(|c| !allowed.contains(c)) {
                return Err(format!(
                    "CPU {bad} is not available to this process (available: {})",
                    format_cpu_list(allowed)
                ));
            }
            list.to_vec()
        }
        None => allowed.to_vec(),
    };
    if cpus.is_empty() {
        return Err("no CPU to run on".into());
    }
    let workers = if workers == 0 { cpus.len() } else { workers };
    if pin {
        if workers > cpus.len() {
            return Err(format!(
                "{workers} pinned workers need {workers} CPUs, but only {} are listed ({}); \
                 list more CPUs, use fewer workers, or run with --no-pin",
                cpus.len(),
                format_cpu_list(&cpus)
            ));
        }
        Ok(cpus
            .iter()
            .take(workers)
            .map(|&c| WorkerPlacement::Pinned(c))
            .collect())
    } else {
        Ok(vec![WorkerPlacement::Unpinned(cpus); workers])
    }
}

/// Formats CPUs back into the compact list form (`0-3,6`).
pub fn format_cpu_list(cpus: &[usize]) -> String {
    // Runs of consecutive CPUs, each as (first, last).
    let mut runs: Vec<(usize, usize)> = Vec::new();
    for &cpu in cpus {
        match runs.last_mut() {
            Some((_, last)) if cpu == *last + 1 => *last = cpu,
            _ => runs.push((cpu, cpu)),
        }
    }
    let runs: Vec<String> = runs
        .into_iter()
        .map(|(first, last)| {
            if first == last {
                first.to_string()
            } else {
                format!("{first}-{last}")
            }
        })
        .collect();
    runs.join(",")
}

/// A glommio executor builder for one worker: its CPU placement, its name,
/// and the small registered I/O buffer (see `IO_MEMORY`). The tracker and the
/// load generator both build their executors here.
pub fn executor_builder(
    placement: &WorkerPlacement,
    name: &str,
) -> Result<LocalExecutorBuilder, String> {
    // A one-CPU fence is a pin; fencing both ways keeps glommio from reading
    // the topology again as each executor starts.
    let online = topology()?;
    let glommio_placement = match placement {
        WorkerPlacement::Pinned(cpu) => Placement::Fenced(online.filter(|loc| loc.cpu == *cpu)),
        WorkerPlacement::Unpinned(cpus) => {
            Placement::Fenced(online.filter(|loc| cpus.contains(&loc.cpu)))
        }
    };
    // glommio's blocking-task pool (file I/O, which we do not do) would by
    // default be fenced like the executor and read the topology again, from a
    // worker thread that may already be in a chroot.
    Ok(LocalExecutorBuilder::new(glommio_placement)
        .name(name)
        .io_memory(IO_MEMORY)
        .blocking_thread_pool_placement(PoolPlacement::Unbound(1)))
}

/// The CPU topology from /sys, read once: the tracker reads it before it
/// chroots (where /sys is gone) and every executor is placed from this copy.
pub fn topology() -> Result<CpuSet, String> {
    static TOPOLOGY: std::sync::OnceLock<CpuSet> = std::sync::OnceLock::new();
    if let Some(set) = TOPOLOGY.get() {
        return Ok(set.clone());
    }
    let set = CpuSet::online().map_err(|e| format!("cannot read the CPU topology: {e}"))?;
    Ok(TOPOLOGY.get_or_init(|| set).clone())
}

/// Runs one executor per placement, each running `worker(index)`.
///
/// A worker that fails (returns Err or panics) ends the run at once, reported
/// with the worker and the reason, so that the process exits rather than limp
/// on with a shard missing. A worker that returns Ok has stopped on request
/// (workers serve until the process is asked to stop): the run ends once every
/// worker has, with their results in worker order.
///
/// A worker that runs out of work polls for `busy_poll` before it sleeps
/// (`runtime.busy_poll_us`; glommio polls only on bound executors, which
/// ours always are).
pub fn run_workers<F, Fut, T>(
    placements: Vec<WorkerPlacement>,
    busy_poll: Duration,
    worker: F,
) -> Result<Vec<T>, String>
where
    F: Fn(usize) -> Fut + Clone + Send + 'static,
    Fut: Future<Output = Result<T, String>> + 'static,
    T: Send + 'static,
{
    let (done_tx, done_rx) = mpsc::channel::<(usize, Result<T, String>)>();
    let workers = placements.len();
    for (index, placement) in placements.into_iter().enumerate() {
        let worker = worker.clone();
        let mut builder = executor_builder(&placement, &format!("worker-{index}"))?;
        if !busy_poll.is_zero() {
            builder = builder.spin_before_park(busy_poll);
        }
        let handle = builder
            .spawn(move || worker(index))
            .map_err(|e| format!("cannot start worker {index} ({placement:?}): {e}"))?;
        let done_tx = done_tx.clone();
        std::thread::Builder::new()
            .name(format!("watch-{index}"))
            .spawn(move || {
                let result = match handle.join() {
                    Ok(result) => result,
                    Err(glommio::GlommioError::BuilderError(
                        glommio::BuilderErrorKind::ThreadPanic(payload),
                    )) => Err(format!("panicked: {}", panic_text(&payload))),
                    Err(e) => Err(e.to_string()),
                };
                let _ = done_tx.send((index, result));
            })
            .map_err(|e| format!("cannot start a watcher thread: {e}"))?;
    }
    drop(done_tx);
    if workers == 0 {
        return Err("no worker was started".into());
    }
    let mut results: Vec<Option<T>> = (0..workers).map(|_| None).collect();
    for _ in 0..workers {
        match done_rx.recv() {
            Ok((index, Ok(result))) => {
                if let Some(slot) = results.get_mut(index) {
                    *slot = Some(result);
                }
            }
            Ok((index, Err(reason))) => return Err(format!("worker {index} failed: {reason}")),
            Err(_) => return Err("a worker's watcher thread died".into()),
        }
    }
    Ok(results.into_iter().flatten().collect())
}

/// Waits for `tasks`: the first error, or Ok once every one has ended Ok.
pub async fn all_or_first_error<E>(mut tasks: Vec<glommio::Task<Result<(), E>>>) -> Result<(), E> {
    futures_lite::future::poll_fn(|cx| {
        let mut i = 0;
        while let Some(task) = tasks.get_mut(i) {
            match std::pin::Pin::new(task).poll(cx) {
                std::task::Poll::Ready(Err(e)) => return std::task::Poll::Ready(Err(e)),
                std::task::Poll::Ready(Ok(())) => {
                    // Never polled again once done.
                    drop(tasks.swap_remove(i));
                }
                std::task::Poll::Pending => i += 1,
            }
        }
        if tasks.is_empty() {
            std::task::Poll::Ready(Ok(()))
        } else {
            std::task::Poll::Pending
        }
    })
    .await
}

fn panic_text(payload: &Box<dyn std::any::Any + Send>) -> String {
    payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "(no message)".into())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_lists_parse_and_format() {
        assert_eq!(parse_cpu_list("0-3,6").unwrap(), vec![0, 1, 2, 3, 6]);
        assert_eq!(parse_cpu_list("5, 1").unwrap(), vec![1, 5]);
        assert!(parse_cpu_list("3-1").is_err());
        assert!(parse_cpu_list("a").is_err());
        assert!(parse_cpu_list("").is_err());
        assert_eq!(format_cpu_list(&[0, 1, 2, 3, 6, 8, 9]), "0-3,6,8-9");
    }

    #[test]
    fn plans_pinned_and_unpinned() {
        let allowed = [0, 1, 2, 3];
        assert_eq!(
            plan_workers(0, None, &allowed, true).unwrap(),
            (0..4).map(WorkerPlacement::Pinned).collect::<Vec<_>>()
        );
        assert_eq!(
            plan_workers(2, Some(&[2, 3]), &allowed, true).unwrap(),
            vec![WorkerPlacement::Pinned(2), WorkerPlacement::Pinned(3)]
        );
        assert_eq!(
            plan_workers(3, Some(&[1]), &allowed, false).unwrap(),
            vec![WorkerPlacement::Unpinned(vec![1]); 3]
        );
    }

    #[test]
    fn refuses_what_pinning_cannot_honour() {
        let allowed = [0, 1];
        let err = plan_workers(3, None, &allowed, true).unwrap_err();
        assert!(err.contains("3 pinned workers"), "{err}");
        let err = plan_workers(1, Some(&[7]), &allowed, true).unwrap_err();
        assert!(err.contains("CPU 7"), "{err}");
    }

    #[test]
    fn this_process_has_cpus() {
        assert!(!allowed_cpus().unwrap().is_empty());
    }

    #[test]
    fn a_failing_worker_is_reported() {
        let placements = vec![WorkerPlacement::Unpinned(allowed_cpus().unwrap()); 2];
        let err = run_workers(placements, Duration::ZERO, |index| async move {
            if index == 1 {
                return Err("boom".to_string());
            }
            glommio::timer::sleep(std::time::Duration::from_secs(3600)).await;
            Ok(())
        })
        .unwrap_err();
        assert_eq!(err, "worker 1 failed: boom");
    }

    /// A worker's CPU time (this thread's).
    fn thread_cpu_time() -> Duration {
        // SAFETY: rusage is plain integers, for which zeros are valid, and
        // getrusage only writes the struct it is given.
        let (usage, rc) = unsafe {
            let mut usage: libc::rusage = std::mem::zeroed();
            let rc = libc::getrusage(libc::RUSAGE_THREAD, &mut usage);
            (usage, rc)
        };
        assert_eq!(rc, 0);
        let time = |t: libc::timeval| {
            Duration::from_secs(t.tv_sec as u64) + Duration::from_micros(t.tv_usec as u64)
        };
        time(usage.ru_utime) + time(usage.ru_stime)
    }

    #[test]
    fn a_busy_polling_worker_spends_its_wait_polling() {
        let cpus = allowed_cpus().unwrap();
        let cpu_while_waiting = |busy_poll: Duration| {
            let placements = vec![WorkerPlacement::Unpinned(cpus.clone())];
            run_workers(placements, busy_poll, |_| async {
                let before = thread_cpu_time();
                glommio::timer::sleep(Duration::from_millis(40)).await;
                Ok(thread_cpu_time() - before)
            })
            .unwrap()[0]
        };
        // Polls for 20 ms of the 40, then sleeps; even a machine busy with
        // other tests gives the poller a good part of that.
        let polling = cpu_while_waiting(Duration::from_millis(20));
        assert!(polling >= Duration::from_millis(4), "{polling:?} of CPU");
        let sleeping = cpu_while_waiting(Duration::ZERO);
        assert!(sleeping < polling / 2, "{sleeping:?} against {polling:?}");
    }

    #[test]
    fn workers_that_stop_give_their_results_in_order() {
        let placements = vec![WorkerPlacement::Unpinned(allowed_cpus().unwrap()); 3];
        let results = run_workers(placements, Duration::ZERO, |index| async move {
            // The last to start ends first.
            let pause = 30 * (3 - index as u64);
            glommio::timer::sleep(std::time::Duration::from_millis(pause)).await;
            let tasks = (0..3)
                .map(|_| glommio::spawn_local(async { Ok::<(), ()>(()) }))
                .collect();
            all_or_first_error(tasks)
                .await
                .map_err(|()| "a task failed".to_string())?;
            Ok(index * 10)
        })
        .unwrap();
        assert_eq!(results, [0, 10, 20]);
    }

    #[test]
    fn a_failing_task_ends_the_wait_for_the_others() {
        let placements = vec![WorkerPlacement::Unpinned(allowed_cpus().unwrap())];
        let err = run_workers(placements, Duration::ZERO, |_| async move {
            let forever = glommio::spawn_local(async {
                glommio::timer::sleep(std::time::Duration::from_secs(3600)).await;
                Ok(())
            });
            let failing = glommio::spawn_local(async { Err("listener gone".to_string()) });
            all_or_first_error(vec![forever, failing]).await
        })
        .unwrap_err();
        assert_eq!(err, "worker 0 failed: listener gone");
    }

    #[test]
    fn a_panicking_worker_is_reported() {
        let placements = vec![WorkerPlacement::Unpinned(allowed_cpus().unwrap()); 2];
        let err = run_workers(placements, Duration::ZERO, |index| async move {
            if index == 0 {
                panic!("lost a shard");
            }
            glommio::timer::sleep(std::time::Duration::from_secs(3600)).await;
            Ok(())
        })
        .unwrap_err();
        assert!(
            err.contains("worker 0") && err.contains("lost a shard"),
            "{err}"
        );
    }
}
