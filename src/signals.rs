//! Process signals for a thread-per-core server: taken by one thread, never
//! by a worker.
//!
//! The workers must never be interrupted by a signal handler (glommio's
//! executors would see EINTR in odd places, and a handler can do almost
//! nothing safely). So the signals the tracker acts on are blocked in the main
//! thread before any other thread starts, every thread inherits that mask, and
//! one dedicated thread takes them with `sigwait` and runs ordinary code. What
//! it replaces reaches the workers through `tracker_runtime::reloadable`.

use std::io;
use std::ops::ControlFlow;
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::thread::JoinHandleExt;
    use std::sync::mpsc;
    use std::time::Duration;

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
