//! Stopping on request (SIGTERM, SIGINT) without dropping what is in flight.
//!
//! The signal thread marks a [`Shutdown`] shared by every worker. Each worker
//! notices within [`POLL`] (one relaxed load on a timer: the signal thread
//! cannot wake a glommio task directly) and fires its own [`StopEvent`],
//! which wakes its accept loops and idle connections at once. Then, in two
//! steps bounded by one deadline:
//!
//! 1. each worker stops taking new requests and waits until it has answered
//!    those it took, then says it has drained;
//! 2. each worker keeps serving other workers' forwarded requests until all
//!    of them have drained, since a request in flight on one worker may wait
//!    on another worker's shard.
//!
//! Only then does a worker read its store for the state file, so no answered
//! announce is missing from it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use slab::Slab;

/// How often a worker looks whether a stop was requested: the most a stop
/// waits before the workers act on it.
pub const POLL: Duration = Duration::from_millis(100);
/// How often a draining worker looks whether its requests are answered.
const DRAIN_POLL: Duration = Duration::from_millis(5);

/// A stop request shared by the signal thread and every worker.
pub struct Shutdown {
    requested: AtomicBool,
    workers: usize,
    /// Workers still answering requests they took before the stop.
    busy: AtomicUsize,
    /// The swarms go to a new tracker: the workers hand them in at the stop
    /// even without a state file.
    handing_over: AtomicBool,
    /// Run by whoever asks for the stop, before the workers are told: what
    /// must let go of traffic first (see [`Shutdown::before_stop`]).
    before_stop: Mutex<Option<Box<dyn FnOnce() + Send>>>,
}

impl Shutdown {
    pub fn new(workers: usize) -> Arc<Shutdown> {
        Arc::new(Shutdown {
            requested: AtomicBool::new(false),
            workers,
            busy: AtomicUsize::new(workers),
            handing_over: AtomicBool::new(false),
            before_stop: Mutex::new(None),
        })
    }

    /// `hook` runs once, at the next stop, before any worker is told of it:
    /// AF_XDP's programs detach there, so that the kernel's sockets take
    /// the traffic while the workers drain their rings (nothing arrives in
    /// a ring that will not be read again). Replaces a hook not yet run.
    pub fn before_stop(&self, hook: impl FnOnce() + Send + 'static) {
        *self.hook() = Some(Box::new(hook));
    }

    fn hook(&self) -> std::sync::MutexGuard<'_, Option<Box<dyn FnOnce() + Send>>> {
        self.before_stop.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Asks every worker to stop; true the first time.
    pub fn request(&self) -> bool {
        // Held while the hook runs: a second request waits for it, so no
        // worker is told before the hook is done.
        let mut hook = self.hook();
        if self.is_requested() {
            return false;
        }
        if let Some(hook) = hook.take() {
            hook();
        }
        !self.requested.swap(true, Ordering::AcqRel)
    }

    /// Asks every worker to stop for a hand-over; true when no stop was
    /// asked for before (a stop under way is not turned into a hand-over).
    pub fn hand_over(&self) -> bool {
        if self.is_requested() {
            return false;
        }
        self.handing_over.store(true, Ordering::Release);
        self.request()
    }

    /// Serves again after a stop for a hand-over that failed, once every
    /// worker has ended: as new, for the workers started next.
    pub fn resume(&self) {
        self.busy.store(self.workers, Ordering::Release);
        self.handing_over.store(false, Ordering::Release);
        self.requested.store(false, Ordering::Release);
    }

    /// Whether the stop is a hand-over.
    pub fn is_hand_over(&self) -> bool {
        self.handing_over.load(Ordering::Acquire)
    }

    pub fn is_requested(&self) -> bool {
        self.requested.load(Ordering::Acquire)
    }

    /// Resolves once a stop has been requested.
    pub async fn requested(&self) {
        while !self.is_requested() {
            glommio::timer::sleep(POLL).await;
        }
    }

    /// Says that this worker has answered every request it took (once per
    /// worker).
    pub fn drained(&self) {
        let _ = self
            .busy
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| n.checked_sub(1));
    }

    /// True once every worker has drained.
    pub fn all_drained(&self) -> bool {
        self.busy.load(Ordering::Acquire) == 0
    }
}

/// Waits until `done()` holds or `deadline` passes; returns whether it held.
pub async fn until(deadline: Instant, done: impl Fn() -> bool) -> bool {
    loop {
        if done() {
            return true;
        }
        let now = Instant::now();
        if now >= deadline {
            return false;
        }
        glommio::timer::sleep(DRAIN_POLL.min(deadline - now)).await;
    }
}

/// A one-time event on one executor: tasks wait for it, and firing it wakes
/// them all. Waiting costs a slot in a slab (no allocation once it has grown)
/// and a waker clone, so a connection may wait on it beside every read.
#[derive(Default)]
pub struct StopEvent {
    fired: Cell<bool>,
    waiters: RefCell<Slab<Option<Waker>>>,
}

impl StopEvent {
    pub fn fire(&self) {
        if self.fired.replace(true) {
            return;
        }
        // Taken out first: a waker may run code that waits again.
        let wakers: Vec<Waker> = self
            .waiters
            .borrow_mut()
            .iter_mut()
            .filter_map(|(_, waker)| waker.take())
            .collect();
        wakers.into_iter().for_each(Waker::wake);
    }

    #[inline]
    pub fn is_fired(&self) -> bool {
        self.fired.get()
    }

    /// Resolves once the event has fired (at once if it has).
    pub fn wait(&self) -> Stopped<'_> {
        Stopped {
            event: self,
            key: None,
        }
    }

    /// Tasks waiting now (for tests).
    pub fn waiting(&self) -> usize {
        self.waiters.borrow().len()
    }
}

/// The future of [`StopEvent::wait`].
pub struct Stopped<'a> {
    event: &'a StopEvent,
    key: Option<usize>,
}

impl Future for Stopped<'_> {
    type Output = ();

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        if self.event.is_fired() {
            return Poll::Ready(());
        }
        let mut waiters = self.event.waiters.borrow_mut();
        match self.key {
            Some(key) => match waiters.get_mut(key) {
                Some(Some(waker)) if waker.will_wake(cx.waker()) => {}
                Some(slot) => *slot = Some(cx.waker().clone()),
                // Gone only if this waiter was dropped: it is not polled then.
                None => {}
            },
            None => {
                let key = waiters.insert(Some(cx.waker().clone()));
                drop(waiters);
                self.key = Some(key);
            }
        }
        Poll::Pending
    }
}

impl Drop for Stopped<'_> {
    fn drop(&mut self) {
        if let Some(key) = self.key {
            self.event.waiters.borrow_mut().try_remove(key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::workers::{allowed_cpus, executor_builder, WorkerPlacement};
    use std::rc::Rc;

    /// Runs `f` on an executor built as the workers' are (small I/O memory,
    /// so that it starts under a tight locked-memory limit).
    fn run<F: Future<Output = ()> + 'static>(f: impl FnOnce() -> F + Send + 'static) {
        let placement = WorkerPlacement::Unpinned(allowed_cpus().unwrap());
        executor_builder(&placement, "test")
            .unwrap()
            .spawn(f)
            .unwrap()
            .join()
            .unwrap();
    }

    #[test]
    fn a_stop_is_requested_once_and_drains_count_down() {
        let shutdown = Shutdown::new(2);
        assert!(!shutdown.is_requested());
        assert!(shutdown.request());
        assert!(!shutdown.request(), "the second request is not the first");
        assert!(shutdown.is_requested());
        shutdown.drained();
        assert!(!shutdown.all_drained());
        shutdown.drained();
        assert!(shutdown.all_drained());
        shutdown.drained();
        assert!(shutdown.all_drained(), "never below zero");
    }

    #[test]
    fn the_hook_runs_once_before_any_worker_can_see_the_stop() {
        let shutdown = Shutdown::new(1);
        let seen_requested = Arc::new(AtomicBool::new(true));
        let runs = Arc::new(AtomicUsize::new(0));
        let (watched, seen, count) = (shutdown.clone(), seen_requested.clone(), runs.clone());
        shutdown.before_stop(move || {
            seen.store(watched.is_requested(), Ordering::SeqCst);
            count.fetch_add(1, Ordering::SeqCst);
        });
        assert!(shutdown.request());
        assert!(
            !seen_requested.load(Ordering::SeqCst),
            "the stop was visible first"
        );
        assert!(!shutdown.request());
        assert_eq!(runs.load(Ordering::SeqCst), 1);
    }

    #[test]
    fn a_failed_hand_over_resumes_as_new() {
        let shutdown = Shutdown::new(2);
        assert!(shutdown.hand_over());
        shutdown.drained();
        shutdown.drained();
        shutdown.resume();
        assert!(!shutdown.is_requested() && !shutdown.is_hand_over());
        assert!(!shutdown.all_drained());
        assert!(shutdown.request());
        assert!(!shutdown.is_hand_over());
    }

    #[test]
    fn firing_wakes_every_waiter_and_dropped_waiters_leave() {
        run(|| async {
            let event = Rc::new(StopEvent::default());
            let woken = Rc::new(Cell::new(0));
            let tasks: Vec<_> = (0..3)
                .map(|_| {
                    let (event, woken) = (event.clone(), woken.clone());
                    glommio::spawn_local(async move {
                        event.wait().await;
                        woken.set(woken.get() + 1);
                    })
                })
                .collect();
            // A waiter that gives up (a read won the race) leaves its slot.
            let gave_up = futures_lite::future::or(event.wait(), async {
                glommio::timer::sleep(Duration::from_millis(1)).await;
            });
            gave_up.await;
            glommio::yield_if_needed().await;
            futures_lite::future::yield_now().await;
            assert_eq!(event.waiting(), 3);
            assert_eq!(woken.get(), 0);
            event.fire();
            for task in tasks {
                task.await;
            }
            assert_eq!(woken.get(), 3);
            assert_eq!(event.waiting(), 0);
            // After the fact, waiting ends at once.
            event.wait().await;
            assert!(event.is_fired());
        });
    }

    #[test]
    fn until_gives_up_at_the_deadline() {
        run(|| async {
            let start = Instant::now();
            let held = until(start + Duration::from_millis(30), || false).await;
            assert!(!held);
            assert!(start.elapsed() >= Duration::from_millis(30));
            assert!(until(Instant::now() + Duration::from_secs(5), || true).await);
        });
    }
}
