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
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tracing::{info, warn};
use tracker_http::tls::{self, SharedTlsConfig};
use tracker_runtime::access::AccessList;
use tracker_runtime::reloadable::Reloadable;
use tracker_runtime::shutdown::Shutdown;

use crate::config::Config;
use crate::handover::{MainPid, Successors};
use crate::reload::{Reloader, TimeLimit};

pub use libc::{SIGHUP, SIGINT, SIGTERM, SIGUSR2};

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

/// The values that SIGHUP replaces while the workers run.
#[derive(Clone)]
pub struct Reloaded {
    /// None without HTTPS.
    pub tls: Option<SharedTlsConfig>,
    /// None when access lists are off.
    pub access: Option<Arc<Reloadable<AccessList>>>,
}

/// Starts the thread that takes SIGHUP, SIGTERM, SIGINT and SIGUSR2. SIGTERM or
/// SIGINT asks the workers to stop (and save); a second one, while they
/// stop, exits at once without saving, as a process killed by it would.
/// SIGHUP asks the reload thread to reread the files (see `reload`) and
/// returns at once: whatever a reload waits for, a stop is taken. SIGUSR2
/// starts an upgrade (see `upgrade`), a successor listed in `successors`.
/// Once this tracker has handed over (`main_pid`), SIGTERM or SIGINT exits
/// at once, with status 0: the successor has the swarms (and the same
/// stop, from a service manager), and the PID file names it first.
pub fn spawn_signal_handler(
    signals: BlockedSignals,
    config: &Config,
    tls: Option<SharedTlsConfig>,
    access: Option<Arc<Reloadable<AccessList>>>,
    shutdown: Arc<Shutdown>,
    successors: Arc<Successors>,
    main_pid: Arc<MainPid>,
) -> Result<(), String> {
    let reloader = Reloader::spawn(reload(config, tls, access))
        .map_err(|e| format!("cannot start the reload thread: {e}"))?;
    let saving = match config.state.path() {
        Some(path) => format!("then saving the swarms to {}", path.display()),
        None => "then exiting (no state file)".to_string(),
    };
    let drain = config.state.drain_timeout_secs;
    let upgrades = config.runtime.control_socket().is_some();
    signals
        .spawn_handler(move |signal| {
            if signal == SIGTERM || signal == SIGINT {
                let name = if signal == SIGTERM {
                    "SIGTERM"
                } else {
                    "SIGINT"
                };
                if shutdown.request() {
                    info!(
                        "{name}: stopping: answering requests in flight (up to {drain} s), \
                         {saving}; another {name} exits at once"
                    );
                } else if main_pid.has_handed_over() && main_pid.exiting().is_ok() {
                    info!(
                        "{name} after the hand-over: exiting now; the new tracker has the swarms"
                    );
                    std::process::exit(0);
                } else {
                    warn!("{name} again: exiting at once, without saving the swarms");
                    std::process::exit(128 + signal);
                }
            } else if signal == SIGHUP && !reloader.request() {
                info!("SIGHUP: a reload is under way and another waits; this one joins it");
            } else if signal == SIGUSR2 {
                upgrade(upgrades, &shutdown, &successors);
            }
            ControlFlow::Continue(())
        })
        .map(drop)
        .map_err(|e| format!("cannot start the signal thread: {e}"))
}

/// SIGUSR2: starts the binary at this tracker's path to take over from it
/// (see `crate::handover`); this one serves until it has. One at a time:
/// a second would be refused by the first once it has taken over, as it
/// was not the one to start it.
fn upgrade(upgrades: bool, shutdown: &Shutdown, successors: &Arc<Successors>) {
    if !upgrades {
        warn!("SIGUSR2: no upgrade without runtime.control_socket");
    } else if shutdown.is_requested() {
        warn!("SIGUSR2: the tracker is stopping; no upgrade");
    } else if let Some(pid) = successors.under_way() {
        warn!(
            "SIGUSR2: pid {pid}, started on an earlier SIGUSR2, has not taken over yet; this \
             one starts no other (send it again once that one has taken over or exited)"
        );
    } else {
        match crate::handover::start_successor(successors) {
            Ok(pid) => {
                info!("SIGUSR2: started pid {pid} to take over; this tracker serves until it has")
            }
            Err(e) => warn!("SIGUSR2: cannot start the new tracker: {e}; this one serves on"),
        }
    }
}

/// What a SIGHUP reloads, run on the reload thread: the access list (parsed
/// here, off the workers, and published whole; a bad one is reported and the
/// old one kept) and the TLS certificate and key (new connections get them;
/// a bad pair is reported and the old one kept). Each file is read within
/// `runtime.reload_timeout_secs`.
fn reload(
    config: &Config,
    tls: Option<SharedTlsConfig>,
    access: Option<Arc<Reloadable<AccessList>>>,
) -> impl FnMut() + Send + 'static {
    let limit = Duration::from_secs(config.runtime.reload_timeout_secs.into());
    let files = config
        .http
        .tls_files()
        .map(|(cert, key)| (cert.to_path_buf(), key.to_path_buf()));
    let access = access.zip(config.access.list());
    let (access_limit, tls_limit) = (TimeLimit::new(limit), TimeLimit::new(limit));
    move || {
        let mut replaced = None;
        if let Some((shared, source)) = &access {
            let path = source.path.display();
            let read = {
                let source = source.clone();
                access_limit.run(&format!("access list {path}"), move || {
                    AccessList::load(&source).map_err(|e| e.to_string())
                })
            };
            match read.and_then(|list| list) {
                Ok(list) => {
                    let count = list.len();
                    let (old, _) = shared.load();
                    shared.store(Arc::new(list));
                    info!("SIGHUP: reloaded access list {path}: {count} info-hashes");
                    replaced = Some(old);
                }
                Err(e) => warn!("SIGHUP: keeping the old access list: {e}"),
            }
        }
        match (&tls, &files) {
            (Some(shared), Some((cert, key))) => {
                let read = {
                    let (cert, key) = (cert.clone(), key.clone());
                    let what = format!("certificate {}", cert.display());
                    tls_limit.run(&what, move || tls::load_pem_files(&cert, &key))
                };
                match read.and_then(|loaded| loaded) {
                    Ok(loaded) => {
                        shared.store(Arc::new(loaded.config));
                        info!(
                            "SIGHUP: reloaded HTTPS certificate {} (SHA-256 {})",
                            cert.display(),
                            loaded.fingerprint
                        );
                    }
                    Err(e) => warn!("SIGHUP: keeping the old HTTPS certificate: {e}"),
                }
            }
            // The access list was what there was to reload.
            _ if access.is_some() => {}
            _ => info!("SIGHUP: no certificate files configured, nothing to reload"),
        }
        // Last, so that waiting for it delays no other reload.
        if let Some(old) = replaced {
            free_when_unused(old);
        }
    }
}

/// Drops `old` here once no worker holds it any more (each lets go within a
/// fraction of a second), so that no worker pays for freeing a list of
/// millions of hashes on its request path. Gives up after a while: then the
/// last holder frees it.
fn free_when_unused<T>(old: Arc<T>) {
    for _ in 0..500 {
        if Arc::strong_count(&old) == 1 {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(old);
}

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
