//! Serving, round by round: the workers with the snapshot, control and
//! database threads around them, until they stop; then the hand-over, or,
//! where the successor fails after the stop, another round on the sockets
//! taken back from it.

use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tracing::{info, warn};
use tracker_http::tls::SharedTlsConfig;
use tracker_runtime::access::AccessList;
use tracker_runtime::mesh::Meshes;
use tracker_runtime::owner::Owners;
use tracker_runtime::reloadable::Reloadable;
use tracker_runtime::shutdown::Shutdown;
use tracker_runtime::workers::{self, WorkerPlacement};
use tracker_runtime::{clock, snapshot, state_file};
use tracker_swarm::state::{Framed, Section};

use super::bind::{steer_udp, udp_addresses, WorkerSockets};
use super::xdp;
use crate::config::Config;
use crate::handover::{self, ControlFile};
use crate::private::PrivateMode;
use crate::signals::Reloaded;
use crate::worker::{RestoreProgress, Worker, WorkerState};

/// What this run keys with, for all its rounds.
#[derive(Clone, Copy)]
pub(super) struct Keys {
    /// The UDP connection ids' secret.
    pub(super) secret: [u8; 16],
    /// Which worker owns which torrent.
    pub(super) owners: Owners,
    pub(super) seed: u64,
}

/// What the workers serve from, once: the first round from the start, and
/// another from a hand-over that failed after the stop.
pub(super) struct Round {
    pub(super) sockets: Vec<WorkerSockets>,
    /// A state file's bytes, from `source`.
    pub(super) swarms: Option<Arc<Vec<u8>>>,
    pub(super) source: String,
    /// Listened on for hand-overs while the round serves.
    pub(super) control: Option<UnixListener>,
    /// Detached as the round's stop begins.
    pub(super) attached: Option<xdp::Attached>,
    pub(super) before_first_snapshot: Option<Box<dyn FnOnce() + Send>>,
}

/// The swarms as a state file's bytes, as a start reads them.
fn state_bytes(sections: &[Section]) -> Vec<u8> {
    let file = Framed::new(sections, clock::unix_secs());
    let mut bytes = Vec::with_capacity(file.byte_len());
    for part in file.parts() {
        bytes.extend_from_slice(part);
    }
    bytes
}

/// What the workers are started with, each round.
pub(super) struct Serving {
    pub(super) placements: Vec<WorkerPlacement>,
    pub(super) config: Config,
    pub(super) tls: Option<SharedTlsConfig>,
    pub(super) access: Option<Arc<Reloadable<AccessList>>>,
    pub(super) shutdown: Arc<Shutdown>,
    pub(super) keys: Keys,
    pub(super) private: Option<Arc<PrivateMode>>,
    pub(super) state_path: Option<PathBuf>,
    /// Where the control thread puts a hand-over that goes ahead.
    pub(super) hand_over: Arc<handover::Pending>,
    pub(super) successors: Arc<handover::Successors>,
    pub(super) handover_timeout: Duration,
    /// Told of a successor that took the swarms, for the PID file.
    pub(super) main_pid: Arc<handover::MainPid>,
}

impl Serving {
    /// Serves round after round, until the workers stop and no successor
    /// fails to take their swarms: those swarms.
    pub(super) fn serve_until_stopped(
        &self,
        first: Round,
        control_file: &mut Option<ControlFile>,
    ) -> Result<Vec<Section>, String> {
        let mut round = first;
        loop {
            let sections = self.serve_round(round, control_file.as_ref())?;
            let Some(handing) = self.hand_over.take() else {
                return Ok(sections);
            };
            match self.hand_over(handing, &sections, control_file)? {
                Some(again) => round = again,
                None => return Ok(sections),
            }
        }
    }

    /// One round: the snapshots, the control thread and the database
    /// thread around the workers, until they stop.
    fn serve_round(
        &self,
        round: Round,
        control_file: Option<&ControlFile>,
    ) -> Result<Vec<Section>, String> {
        let workers = self.placements.len();
        // Stopped (and any write of it finished) when it drops: before the
        // stop's own save, which it must never overwrite.
        let snapshots = match (&self.state_path, self.config.state.snapshot_interval()) {
            (Some(path), Some(interval)) => Some(
                snapshot::Writer::start(
                    path.clone(),
                    workers,
                    interval,
                    round.before_first_snapshot,
                )
                .map_err(|e| format!("cannot start the snapshot thread: {e}"))?,
            ),
            _ => None,
        };
        let (snapshot_writer, snapshots) = snapshots.unzip();
        let mut xdp_copies = handover::XdpCopies::default();
        if let (Some(control), Some(control_file)) = (round.control, control_file) {
            let handed = handover::copies(&round.sockets, &control, control_file)
                .map_err(|e| format!("cannot copy the sockets for a hand-over: {e}"))?;
            if let Some(attached) = &round.attached {
                xdp_copies = handover::XdpCopies::new(
                    handover::xdp_copies(&round.sockets, attached).map_err(|e| {
                        format!("cannot copy the AF_XDP sockets for a hand-over: {e}")
                    })?,
                );
            }
            let manifest = handover::Manifest {
                workers,
                secret: self.keys.secret,
            };
            handover::serve_control(
                control,
                handed,
                xdp_copies.clone(),
                manifest,
                self.successors.clone(),
                self.shutdown.clone(),
                self.hand_over.clone(),
            )
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
        }
        // Each round has its database thread, started once the swarms are
        // here: a successor's, after its predecessor wrote what its own
        // could not (see `PrivateMode::stop_flusher`).
        let restored_peers = match &self.private {
            Some(private) => private.start_flusher(&self.keys.owners)?,
            None => Vec::new(),
        };
        // Detached as the stop begins: the kernel's sockets take the
        // AF_XDP traffic while the workers drain their rings, until the
        // end. Or, at a hand-over whose successor takes the AF_XDP sockets
        // over (it holds the links too), left attached: the traffic waits
        // on their rings (a successor that cannot attach again, holding no
        // capability, could not take it back from the kernel's sockets).
        if let Some(attached) = round.attached {
            let shutdown = Arc::downgrade(&self.shutdown);
            self.shutdown.before_stop(move || {
                let handing = shutdown.upgrade().is_some_and(|s| s.is_hand_over());
                if handing && attached.handable() {
                    attached.leave_to_successor();
                } else {
                    xdp_copies.close();
                    attached.detach();
                }
            });
        }
        let served = self.serve(
            round.sockets,
            round.swarms,
            &round.source,
            snapshots,
            restored_peers,
        );
        if let Some(private) = &self.private {
            let drain = Duration::from_secs(self.config.state.drain_timeout_secs.into());
            private.stop_flusher(Instant::now() + drain)?;
        }
        let sections = served?;
        drop(snapshot_writer);
        Ok(sections)
    }

    /// Sends the stopped workers' swarms to the successor: None once it
    /// has them. It holds every socket: where it cannot serve on them,
    /// this one takes them back and serves again (the round returned)
    /// rather than leave clients with no one for a restart's time.
    fn hand_over(
        &self,
        handing: handover::Handing,
        sections: &[Section],
        control_file: &mut Option<ControlFile>,
    ) -> Result<Option<Round>, String> {
        let started = Instant::now();
        let pid = handing.pid();
        let e = match handing.send_swarms(sections, clock::unix_secs(), self.handover_timeout) {
            Ok(()) => {
                info!(
                    "handed over {} torrents and {} peers to pid {pid} in {} ms",
                    sections.iter().map(|s| s.torrents()).sum::<u64>(),
                    sections.iter().map(|s| s.peers()).sum::<u64>(),
                    started.elapsed().as_millis()
                );
                if let Some(file) = control_file {
                    file.handed_over();
                }
                self.main_pid
                    .handed_over(pid as u32, handing.into_successor());
                // The state file is written at the end for a crash of the
                // new one before its first snapshot: with a CPU no one else
                // wants, as the new one restores the swarms on the same CPUs.
                let _ = workers::run_when_idle();
                return Ok(None);
            }
            Err(e) => e,
        };
        let reclaimed = match handing.reclaim(self.placements.len()) {
            Ok(reclaimed) => reclaimed,
            // Saved, for the restart that serves them.
            Err(why) => {
                warn!("hand-over to pid {pid} failed after the stop: {e}; {why}");
                if let Some(file) = control_file {
                    file.handed_over();
                }
                if let Some(path) = &self.state_path {
                    state_file::save(path, sections)?;
                }
                return Err(format!(
                    "the hand-over failed after the stop ({e}), and this tracker cannot serve \
                     again: {why}"
                ));
            }
        };
        warn!(
            "hand-over to pid {pid} failed after the stop: {e}; killed it; serving again, the \
             same swarms on the same sockets"
        );
        let handover::Reclaimed {
            mut sockets,
            control: listener,
            xdp: taken,
        } = reclaimed;
        // Its steering program, keyed by its own owner key, is on the
        // groups now. AF_XDP handed over stayed attached, and is taken
        // back; else its XDP program went with it, and is attached again
        // (with the capabilities this tracker kept for that).
        steer_udp(&self.config, &sockets, &self.keys.owners);
        let attached = if taken.is_empty() {
            xdp::attach(
                &self.config.udp.xdp,
                &udp_addresses(&sockets),
                &mut sockets,
                self.handover_timeout,
            )
        } else {
            xdp::adopt(taken, &mut sockets)
        }
        .unwrap_or_else(|e| {
            warn!(
                "AF_XDP not attached again ({e}): the UDP sockets serve all UDP traffic until \
                 a restart"
            );
            None
        });
        self.shutdown.resume();
        Ok(Some(Round {
            sockets,
            swarms: Some(Arc::new(state_bytes(sections))),
            source: format!("the swarms held before the hand-over to pid {pid}"),
            control: Some(listener),
            attached,
            before_first_snapshot: None,
        }))
    }

    /// Runs the workers on `sockets`, their swarms restored from `loaded`
    /// (a state file's bytes, from `source`), until they stop; their swarms.
    fn serve(
        &self,
        sockets: Vec<WorkerSockets>,
        loaded: Option<Arc<Vec<u8>>>,
        source: &str,
        snapshots: Option<snapshot::Snapshots>,
        restored_peers: Vec<crate::private::RestoredPeers>,
    ) -> Result<Vec<Section>, String> {
        let workers = self.placements.len();
        // Each worker takes its own handle on the file's bytes and drops it
        // once it has restored its torrents, so the bytes go as soon as all
        // have.
        let restore = Arc::new(Mutex::new(RestoreProgress::new(source.to_string())));
        let state_bytes: Vec<Option<Arc<Vec<u8>>>> = (0..workers).map(|_| loaded.clone()).collect();
        drop(loaded);
        let state_bytes = Arc::new(Mutex::new(state_bytes));
        let mut restored_peers = restored_peers;
        restored_peers.resize_with(workers, Vec::new);
        let restored_peers = Arc::new(Mutex::new(restored_peers));
        // Each worker takes its own handle, made here (see `Meshes`).
        let meshes: Vec<Option<Meshes>> =
            Meshes::for_workers(workers, self.config.runtime.channel_capacity)
                .into_iter()
                .map(Some)
                .collect();
        let meshes = Arc::new(Mutex::new(meshes));
        let sockets = Arc::new(Mutex::new(sockets));
        let busy_poll = Duration::from_micros(self.config.runtime.busy_poll_us.into());
        let Serving {
            config,
            tls,
            access,
            shutdown,
            keys,
            private,
            ..
        } = self;
        let private = private.clone();
        let (config, tls, access, shutdown) = (
            config.clone(),
            tls.clone(),
            access.clone(),
            shutdown.clone(),
        );
        let Keys {
            secret,
            owners,
            seed,
        } = *keys;
        let sections = workers::run_workers(self.placements.clone(), busy_poll, move |index| {
            let config = config.clone();
            let meshes = meshes.lock().expect("not poisoned")[index]
                .take()
                .expect("each worker starts once");
            let sockets = std::mem::take(&mut sockets.lock().expect("not poisoned")[index]);
            let reloaded = Reloaded {
                tls: tls.clone(),
                access: access.clone(),
            };
            let state = WorkerState {
                shutdown: shutdown.clone(),
                bytes: state_bytes.lock().expect("not poisoned")[index].take(),
                restore: restore.clone(),
                snapshots: snapshots.clone(),
            };
            Worker {
                index,
                config,
                meshes,
                sockets,
                reloaded,
                secret,
                owners,
                seed: seed ^ index as u64,
                state,
                private: private.clone(),
                restored_peers: std::mem::take(
                    &mut restored_peers.lock().expect("not poisoned")[index],
                ),
            }
            .run()
        })?;
        // Every worker stopped on request and has handed in its swarms.
        Ok(sections.into_iter().flatten().collect())
    }
}
