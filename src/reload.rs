//! SIGHUP reloads, kept off the signal thread: that thread only asks for one
//! and goes back to waiting, so a SIGTERM is taken whatever a reload is doing.
//! Reloads run one at a time on a thread of their own ([`Reloader`]), and each
//! file they read is read on a further thread, waited for only so long
//! ([`TimeLimit`]): a read stuck on a hung network mount is given up on, the
//! old value kept, and no second read of the same file starts while it hangs.

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc::{self, SyncSender, TrySendError};
use std::sync::Arc;
use std::time::Duration;

/// The thread that runs reloads, and the way to ask it for one.
pub struct Reloader {
    requests: SyncSender<()>,
}

impl Reloader {
    /// Starts the thread that calls `reload` once for each request.
    pub fn spawn(mut reload: impl FnMut() + Send + 'static) -> io::Result<Reloader> {
        // One request waits while a reload runs; more merge with it.
        let (requests, waiting) = mpsc::sync_channel(1);
        std::thread::Builder::new()
            .name("reload".into())
            .spawn(move || {
                while waiting.recv().is_ok() {
                    reload();
                }
            })?;
        Ok(Reloader { requests })
    }

    /// Asks for a reload and returns at once; false when one was waiting
    /// already (this request merges with it).
    pub fn request(&self) -> bool {
        match self.requests.try_send(()) {
            Ok(()) => true,
            Err(TrySendError::Full(())) | Err(TrySendError::Disconnected(())) => false,
        }
    }
}

/// Runs reads of one file on a thread of their own and waits for each up to
/// a limit.
pub struct TimeLimit {
    limit: Duration,
    /// A read given up on is still running: it may never end.
    stuck: Arc<AtomicBool>,
}

impl TimeLimit {
    pub fn new(limit: Duration) -> TimeLimit {
        TimeLimit {
            limit,
            stuck: Arc::new(AtomicBool::new(false)),
        }
    }

    /// What `read` returns, if it returns within the limit; otherwise an
    /// error naming `what`. A read that overran is left to finish on its
    /// own, its result dropped; until it does, no other read is started.
    pub fn run<T: Send + 'static>(
        &self,
        what: &str,
        read: impl FnOnce() -> T + Send + 'static,
    ) -> Result<T, String> {
        if self.stuck.load(Ordering::Acquire) {
            return Err(format!(
                "an earlier read of {what} has not returned yet (a hung file system?): not \
                 reading it again until it does"
            ));
        }
        let (done, result) = mpsc::sync_channel(1);
        let stuck = self.stuck.clone();
        stuck.store(true, Ordering::Release);
        let spawned = std::thread::Builder::new()
            .name("reload-read".into())
            .spawn(move || {
                let value = read();
                // Cleared first: a caller that got the value may read again.
                stuck.store(false, Ordering::Release);
                // The receiver is gone when the caller gave up: dropped.
                let _ = done.send(value);
            });
        if let Err(e) = spawned {
            self.stuck.store(false, Ordering::Release);
            return Err(format!("cannot start a thread to read {what}: {e}"));
        }
        result.recv_timeout(self.limit).map_err(|_| {
            format!(
                "reading {what} took more than {} s (runtime.reload_timeout_secs): given up",
                self.limit.as_secs_f64()
            )
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;
    use std::time::Instant;

    #[test]
    fn requests_run_one_at_a_time_and_merge_while_one_waits() {
        let (started, starts) = mpsc::channel();
        let gate = Arc::new(Mutex::new(()));
        let held = gate.lock().unwrap();
        let inner = gate.clone();
        let reloader = Reloader::spawn(move || {
            started.send(()).unwrap();
            drop(inner.lock().unwrap());
        })
        .unwrap();
        assert!(reloader.request());
        starts.recv_timeout(Duration::from_secs(5)).unwrap();
        // The first runs (held at the gate): one more waits, the rest merge.
        assert!(reloader.request());
        assert!(!reloader.request());
        assert!(!reloader.request());
        drop(held);
        starts.recv_timeout(Duration::from_secs(5)).unwrap();
        assert!(starts.recv_timeout(Duration::from_millis(200)).is_err());
    }

    #[test]
    fn a_read_that_overruns_is_given_up_and_not_started_again_until_it_ends() {
        let limit = TimeLimit::new(Duration::from_millis(100));
        assert_eq!(limit.run("a file", || 7), Ok(7));
        let (release, gate) = mpsc::channel::<()>();
        let start = Instant::now();
        let err = limit
            .run("the access list", move || gate.recv().is_ok())
            .unwrap_err();
        assert!(start.elapsed() < Duration::from_secs(2));
        assert!(
            err.contains("the access list") && err.contains("given up"),
            "{err}"
        );
        let err = limit.run("the access list", || true).unwrap_err();
        assert!(err.contains("has not returned yet"), "{err}");
        release.send(()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        while limit.run("the access list", || 1) != Ok(1) {
            assert!(Instant::now() < deadline, "the stuck read never cleared");
            std::thread::sleep(Duration::from_millis(10));
        }
    }
}
