//! Containing a panic to the one request that caused it.
//!
//! No panic should be reachable from the network (the codecs deny the lints
//! that could cause one, and are fuzzed), but one that happens anyway must not
//! take down a worker and with it a shard of every swarm. Each request's
//! handling runs under [`contain`] (or [`Contained`] for a future): a panic is
//! caught, counted in the caller's `panics` counter, and the request is
//! answered with an error or dropped by the caller. Stack unwinding releases
//! whatever the request held (a `RefCell` borrow of the swarm store, say), so
//! the next request finds the worker as usable as before. This needs
//! `panic = "unwind"`, which the release profile keeps.
//!
//! [`install_panic_hook`] keeps contained panics from flooding the log (a
//! client that found one can repeat it at line rate): they are logged at
//! error level the 1st, 2nd, 4th, 8th, ... time, each line giving the count.
//! Any other panic (one that will end its worker, and so the process) is
//! reported in full by the default hook.

use std::cell::Cell;
use std::future::Future;
use std::panic::{catch_unwind, AssertUnwindSafe};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};

use crate::counters::Counter;

thread_local! {
    /// How many `contain` calls this thread is inside (the hook's way to tell
    /// a contained panic from a fatal one).
    static CONTAINING: Cell<u32> = const { Cell::new(0) };
}

/// Contained panics in the whole process, for the rate-limited log.
static CONTAINED: AtomicU64 = AtomicU64::new(0);

/// Marks this thread as containing for as long as it lives, unwinding included.
struct Containing;

impl Containing {
    fn enter() -> Containing {
        CONTAINING.with(|c| c.set(c.get() + 1));
        Containing
    }
}

impl Drop for Containing {
    fn drop(&mut self) {
        CONTAINING.with(|c| c.set(c.get().saturating_sub(1)));
    }
}

/// Runs `f`; if it panics, counts the panic in `panics` and returns `None`.
///
/// `f` is asserted unwind-safe: what it may leave half-done is one request's
/// answer (the caller discards it) or the swarm store, whose every borrow is
/// released by the unwinding and whose entries stay valid values.
pub fn contain<R>(panics: &Counter, f: impl FnOnce() -> R) -> Option<R> {
    let _containing = Containing::enter();
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(r) => Some(r),
        Err(_payload) => {
            panics.inc();
            None
        }
    }
}

/// A future whose panics are contained like [`contain`]'s: each poll runs
/// under `catch_unwind`, and a panic ends it with `None` (it is never polled
/// again). No allocation: the future is stored inline.
pub struct Contained<'a, F> {
    future: F,
    panics: &'a Counter,
    done: bool,
}

impl<'a, F: Future> Contained<'a, F> {
    pub fn new(panics: &'a Counter, future: F) -> Self {
        Contained {
            future,
            panics,
            done: false,
        }
    }
}

impl<F: Future> Future for Contained<'_, F> {
    type Output = Option<F::Output>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        // SAFETY: `future` is structurally pinned: it is never moved out of
        // `self`, and the other fields are not pinned.
        let this = unsafe { self.get_unchecked_mut() };
        if this.done {
            return Poll::Ready(None);
        }
        // SAFETY: as above; `this` stays where the pin put it.
        let future = unsafe { Pin::new_unchecked(&mut this.future) };
        let _containing = Containing::enter();
        match catch_unwind(AssertUnwindSafe(|| future.poll(cx))) {
            Ok(Poll::Ready(r)) => {
                this.done = true;
                Poll::Ready(Some(r))
            }
            Ok(Poll::Pending) => Poll::Pending,
            Err(_payload) => {
                this.done = true;
                this.panics.inc();
                Poll::Ready(None)
            }
        }
    }
}

/// Installs the process's panic hook (once, at start, before workers run):
/// contained panics are logged at error level on the 1st, 2nd, 4th, ... one
/// with their count; others go to the default hook.
pub fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        if CONTAINING.with(Cell::get) == 0 {
            return default(info);
        }
        let n = CONTAINED.fetch_add(1, Ordering::Relaxed) + 1;
        if n.is_power_of_two() {
            let payload = info.payload();
            let message = payload
                .downcast_ref::<&str>()
                .copied()
                .or_else(|| payload.downcast_ref::<String>().map(String::as_str))
                .unwrap_or("(no message)");
            let location = info
                .location()
                .map_or_else(String::new, |l| format!(" at {}:{}", l.file(), l.line()));
            tracing::error!(
                "contained panic number {n} in a request handler{location}: {message:?}; \
                 the request was dropped or answered with an error and the worker goes \
                 on (logged at the 1st, 2nd, 4th, 8th, ... panic)"
            );
        }
    }));
}

/// Contained panics in this process so far.
pub fn contained_panics() -> u64 {
    CONTAINED.load(Ordering::Relaxed)
}

/// The environment variable naming the info-hash (40 hex digits) whose
/// announces panic, in debug builds only: a test hook that lets integration
/// tests prove containment on the real request paths. Release builds do not
/// read it.
pub const TEST_PANIC_ENV: &str = "TRACKER_TEST_PANIC_INFO_HASH";

/// Test hook (debug builds only): panics when `info_hash` is the one named by
/// [`TEST_PANIC_ENV`].
#[cfg(debug_assertions)]
#[allow(clippy::panic)] // The hook's whole purpose, in debug builds only.
pub fn test_panic_hook(info_hash: &tracker_proto::InfoHash) {
    use std::sync::OnceLock;
    static TARGET: OnceLock<Option<tracker_proto::InfoHash>> = OnceLock::new();
    let target = TARGET.get_or_init(|| {
        tracker_proto::InfoHash::from_hex(std::env::var(TEST_PANIC_ENV).ok()?.as_bytes())
    });
    if target.as_ref() == Some(info_hash) {
        panic!("test hook {TEST_PANIC_ENV}: announce for the named info-hash");
    }
}

/// Release builds: no test hook.
#[cfg(not(debug_assertions))]
#[inline(always)]
pub fn test_panic_hook(_info_hash: &tracker_proto::InfoHash) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn contain_returns_the_value_or_counts_the_panic() {
        let panics = Counter::default();
        assert_eq!(contain(&panics, || 7), Some(7));
        assert_eq!(panics.get(), 0);
        let none: Option<u32> = contain(&panics, || panic!("boom"));
        assert_eq!(none, None);
        assert_eq!(panics.get(), 1);
        // The thread is no longer marked as containing afterwards.
        assert_eq!(CONTAINING.with(Cell::get), 0);
    }

    #[test]
    fn a_refcell_borrow_is_released_by_the_unwinding() {
        let store = std::cell::RefCell::new(vec![1, 2, 3]);
        let panics = Counter::default();
        let r: Option<()> = contain(&panics, || {
            let mut s = store.borrow_mut();
            s.push(4);
            panic!("while borrowed");
        });
        assert!(r.is_none());
        assert!(store.try_borrow_mut().is_ok(), "the borrow is released");
        assert_eq!(store.borrow().len(), 4);
    }

    #[test]
    fn a_contained_future_ends_with_none_on_panic_and_is_not_polled_again() {
        let panics = Counter::default();
        let ok = futures_lite::future::block_on(Contained::new(&panics, async { 5 }));
        assert_eq!(ok, Some(5));
        let polls = Cell::new(0);
        let mut fut = Box::pin(Contained::new(&panics, async {
            polls.set(polls.get() + 1);
            futures_lite::future::yield_now().await;
            polls.set(polls.get() + 1);
            panic!("after an await");
        }));
        let waker = futures_lite::future::block_on(futures_lite::future::poll_fn(|cx| {
            Poll::Ready(cx.waker().clone())
        }));
        let mut cx = Context::from_waker(&waker);
        assert!(fut.as_mut().poll(&mut cx).is_pending());
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(None));
        assert_eq!(fut.as_mut().poll(&mut cx), Poll::Ready(None));
        assert_eq!((polls.get(), panics.get()), (2, 1));
    }
}
