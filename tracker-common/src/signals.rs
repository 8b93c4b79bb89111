//! Process signals for a thread-per-core server, and values that a signal
//! replaces while the workers run.
//!
//! The workers must never be interrupted by a signal handler (glommio's
//! executors would see EINTR in odd places, and a handler can do almost
//! nothing safely). So the signals the tracker acts on are blocked in the main
//! thread before any other thread starts, every thread inherits that mask, and
//! one dedicated thread takes them with `sigwait` and runs ordinary code.
//!
//! What that code changes reaches the workers through [`Reloadable`]: a value
//! behind a mutex with a generation counter beside it. A worker keeps its own
//! [`LocalCopy`] and only looks at the counter (one relaxed atomic load) on its
//! hot path; it takes the mutex only in the rare case that the value changed.

use std::io;
use std::ops::ControlFlow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub use libc::{SIGHUP, SIGINT, SIGTERM};

/// A set of signals blocked in the thread that built it (and so in every thread
/// it starts afterwards), to be taken by [`BlockedSignals::spawn_handler`].
pub struct BlockedSignals {
    set: libc::sigset_t,
}

impl BlockedSignals {
    /// Blocks `signals` in the calling thread. Call it in `main` before any
    /// other thread starts, so that no thread but the handler ever receives
    /// them.
    pub fn block(signals: &[libc::c_int]) -> io::Result<BlockedSignals> {
        // SAFETY: sigset_t is plain data, initialised by sigemptyset before use.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe { libc::sigemptyset(&mut set) };
        for &signal in signals {
            // SAFETY: `set` is initialised; a bad number is reported, not UB.
            if unsafe { libc::sigaddset(&mut set, signal) } != 0 {
                return Err(io::Error::last_os_error());
            }
        }
        // SAFETY: a valid set; the old mask is not wanted.
        let rc = unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut()) };
        if rc != 0 {
            return Err(io::Error::from_raw_os_error(rc));
        }
        Ok(BlockedSignals { set })
    }

    /// Starts the thread that waits for the blocked signals and calls
    /// `handler` with each one as it arrives, until the handler breaks.
    ///
    /// Signals that arrive while the handler runs are kept pending by the
    /// kernel (one of each kind) and handled next, in order.
    pub fn spawn_handler<F>(self, mut handler: F) -> io::Result<JoinHandle<()>>
    where
        F: FnMut(libc::c_int) -> ControlFlow<()> + Send + 'static,
    {
        let set = SigSet(self.set);
        std::thread::Builder::new()
            .name("signals".into())
            .spawn(move || {
                let set = set;
                // Blocked here too, in case the caller built the set on another
                // thread: sigwait needs them blocked in its own thread.
                // SAFETY: a valid set.
                unsafe { libc::pthread_sigmask(libc::SIG_BLOCK, &set.0, std::ptr::null_mut()) };
                loop {
                    let mut signal: libc::c_int = 0;
                    // SAFETY: a valid set and an int to write the signal to.
                    let rc = unsafe { libc::sigwait(&set.0, &mut signal) };
                    if rc != 0 {
                        // Only EINVAL is documented, for a bad set: nothing to wait for.
                        tracing::error!(
                            "waiting for signals failed: {}",
                            io::Error::from_raw_os_error(rc)
                        );
                        return;
                    }
                    if handler(signal).is_break() {
                        return;
                    }
                }
            })
    }
}

/// A sigset_t that may move to the handler thread (it is plain data).
struct SigSet(libc::sigset_t);

// SAFETY: sigset_t is a plain bit array without pointers.
unsafe impl Send for SigSet {}

/// A value replaced now and then (on SIGHUP) and read by every worker.
///
/// Readers poll [`generation`](Self::generation), which is cheap, and call
/// [`load`](Self::load) only when it moved; [`LocalCopy`] does that for them.
pub struct Reloadable<T> {
    current: Mutex<Arc<T>>,
    generation: AtomicU64,
}

impl<T> Reloadable<T> {
    pub fn new(value: Arc<T>) -> Self {
        Reloadable {
            current: Mutex::new(value),
            generation: AtomicU64::new(0),
        }
    }

    /// Publishes `value` for every reader's next look.
    pub fn store(&self, value: Arc<T>) {
        let mut current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        *current = value;
        // Bumped under the lock, so a reader that sees the new generation and
        // then locks finds the new value (or a later one).
        self.generation.fetch_add(1, Ordering::Release);
    }

    /// Changes each time a value is stored.
    #[inline]
    pub fn generation(&self) -> u64 {
        self.generation.load(Ordering::Relaxed)
    }

    /// The current value and its generation.
    pub fn load(&self) -> (Arc<T>, u64) {
        let current = self.current.lock().unwrap_or_else(|e| e.into_inner());
        (current.clone(), self.generation.load(Ordering::Acquire))
    }
}

/// One worker's copy of a [`Reloadable`] value.
pub struct LocalCopy<T> {
    shared: Arc<Reloadable<T>>,
    value: Arc<T>,
    generation: u64,
}

impl<T> LocalCopy<T> {
    pub fn new(shared: Arc<Reloadable<T>>) -> Self {
        let (value, generation) = shared.load();
        LocalCopy {
            shared,
            value,
            generation,
        }
    }

    /// The newest value: the one held, unless a newer one was published since.
    #[inline]
    pub fn get(&mut self) -> &Arc<T> {
        if self.shared.generation() != self.generation {
            (self.value, self.generation) = self.shared.load();
        }
        &self.value
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::thread::JoinHandleExt;
    use std::sync::mpsc;
    use std::time::Duration;

    #[test]
    fn local_copies_follow_the_published_value() {
        let shared = Arc::new(Reloadable::new(Arc::new(1)));
        let mut a = LocalCopy::new(shared.clone());
        let mut b = LocalCopy::new(shared.clone());
        assert_eq!(**a.get(), 1);
        let before = shared.generation();
        shared.store(Arc::new(2));
        assert_ne!(shared.generation(), before);
        assert_eq!((**a.get(), **b.get()), (2, 2));
        let held = a.get().clone();
        shared.store(Arc::new(3));
        assert_eq!(**a.get(), 3);
        assert_eq!(*held, 2, "a value taken earlier is untouched");
    }

    #[test]
    fn the_handler_thread_takes_blocked_signals() {
        // Blocked on this test thread only, and sent to the handler thread
        // alone (pthread_kill), so no other test or thread is disturbed. SIGUSR2
        // is used by nothing else in the tests.
        let (tx, rx) = mpsc::channel();
        let blocked = BlockedSignals::block(&[libc::SIGUSR2]).unwrap();
        let handle = blocked
            .spawn_handler(move |signal| {
                tx.send(signal).unwrap();
                ControlFlow::Break(())
            })
            .unwrap();
        // SAFETY: the thread is alive until it handled the signal.
        let rc = unsafe { libc::pthread_kill(handle.as_pthread_t(), libc::SIGUSR2) };
        assert_eq!(rc, 0);
        assert_eq!(
            rx.recv_timeout(Duration::from_secs(5)).unwrap(),
            libc::SIGUSR2
        );
        handle.join().unwrap();
        // Leave this thread as it was.
        let mut set: libc::sigset_t = unsafe { std::mem::zeroed() };
        unsafe {
            libc::sigemptyset(&mut set);
            libc::sigaddset(&mut set, libc::SIGUSR2);
            libc::pthread_sigmask(libc::SIG_UNBLOCK, &set, std::ptr::null_mut());
        }
    }

    #[test]
    fn bad_signal_numbers_are_errors() {
        assert!(BlockedSignals::block(&[100_000]).is_err());
    }
}
