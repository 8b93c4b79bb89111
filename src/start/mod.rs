//! Start-up, in order: the host checks, the plan of workers, the TLS
//! configuration, the ports (each locked, so one tracker serves a port),
//! privileges given up, the state file loaded, the signal thread; then the
//! workers run until they stop, and the swarms are saved.

pub mod bind;
pub mod host;
pub mod instance;
pub mod privileges;
pub mod xdp;

use std::net::IpAddr;
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tracing::{info, warn};
use tracker_http::tls::{self, SharedTlsConfig};
use tracker_runtime::access::AccessList;
use tracker_runtime::mesh::Meshes;
use tracker_runtime::owner::Owners;
use tracker_runtime::reloadable::Reloadable;
use tracker_runtime::shutdown::Shutdown;
use tracker_runtime::workers::{self, WorkerPlacement};
use tracker_runtime::{clock, snapshot, state_file};
use tracker_swarm::state::{Framed, Section};

use crate::config::Config;
use crate::handover::{self, TakeOver};
use crate::private::PrivateMode;
use crate::signals::{
    spawn_signal_handler, BlockedSignals, Reloaded, SIGHUP, SIGINT, SIGTERM, SIGUSR2,
};
use crate::worker::{RestoreProgress, Worker, WorkerState};
use bind::{bind_all, steer_udp, udp_addresses, WorkerSockets};
use privileges::PrivilegePlan;

/// The shared access list, read from its file; None when lists are off.
pub fn load_access_list(
    config: &Config,
) -> Result<Option<Arc<Reloadable<AccessList>>>, tracker_runtime::access::AccessListError> {
    let Some(source) = config.access.list() else {
        return Ok(None);
    };
    let list = AccessList::load(&source)?;
    info!(
        "access list {} ({} mode): {} info-hashes",
        source.path.display(),
        source.mode.as_str(),
        list.len()
    );
    Ok(Some(Arc::new(Reloadable::new(Arc::new(list)))))
}

/// Runs the tracker until it stops; `take_over`: with the sockets and
/// swarms of the tracker running on the same control socket.
pub fn run(
    mut config: Config,
    access: Option<Arc<Reloadable<AccessList>>>,
    take_over: bool,
) -> Result<(), String> {
    let allowed = workers::allowed_cpus()?;
    let requested = match config.runtime.cpus.trim() {
        "" => None,
        list => Some(workers::parse_cpu_list(list)?),
    };
    let placements = workers::plan_workers(
        config.runtime.workers,
        requested.as_deref(),
        &allowed,
        config.runtime.pin,
    )?;
    let workers = placements.len();
    let kernel =
        host::kernel_release().map_err(|e| format!("cannot read the kernel version: {e}"))?;
    host::check_kernel(&kernel)?;
    let confinement = host::Confinement::of_this_process();
    host::check_system_calls(&confinement)?;
    let euid = privileges::euid();
    let privilege_plan = privileges::plan(&config.privileges, euid, privileges::resolve)?;
    host::check_memlock(
        host::memlock_limit(),
        workers,
        privilege_plan.serves_as_root(euid),
    )?;
    fit_connections_to_nofile(&mut config, workers)?;
    // The site's users and torrents, before anything is bound: a database
    // that cannot be read is a start-up error, said at once.
    let private = PrivateMode::load(&config)?;
    // Before any other thread starts, so that every thread inherits the mask
    // and only the signal thread ever takes these signals.
    let signals = BlockedSignals::block(&[SIGHUP, SIGTERM, SIGINT, SIGUSR2])
        .map_err(|e| format!("cannot block SIGHUP, SIGTERM and SIGINT: {e}"))?;
    // Certificate problems first: they are the user's to fix, and a clear
    // message beats a bound port.
    let tls = tls_config(&config)?;
    let control_path = config.runtime.control_socket();
    let owner = match &privilege_plan {
        PrivilegePlan::Drop { identity, .. } => Some((identity.uid, identity.gid)),
        PrivilegePlan::Keep => None,
    };
    if take_over && config.udp.xdp.enabled() && matches!(privilege_plan, PrivilegePlan::Drop { .. })
    {
        // The predecessor lets go of its queues only once it has stopped,
        // after this one has given up root.
        return Err(
            "cannot take over with udp.xdp on and privileges.user set: this tracker \
                    would attach AF_XDP after giving up root, which it cannot; run it with the \
                    capabilities instead (docs/OPERATIONS.md, \"AF_XDP\")"
                .into(),
        );
    }
    let (mut taking_over, mut sockets, mut control) = if take_over {
        let path = control_path.as_deref().ok_or(
            "--take-over needs runtime.control_socket, the running tracker's control socket",
        )?;
        let mut taken = TakeOver::connect(path, owner.map(|(uid, _)| uid))?;
        let (sockets, control) = taken.sockets(&config, workers)?;
        (Some(taken), sockets, Some(control))
    } else {
        let sockets = bind_all(&config, workers)?;
        let control = match &control_path {
            Some(path) => handover::bind_control(path, owner)?,
            None => None,
        };
        (None, sockets, control)
    };
    let secret = match (config.udp_secret(), &taking_over) {
        (Some(secret), _) => secret,
        // Clients keep the ids the predecessor gave them.
        (None, Some(taken)) => taken.secret(),
        (None, None) => random_bytes()?,
    };
    let owner_key = match config.runtime.owner_key() {
        Some(key) => key,
        None => random_bytes()?,
    };
    let owners = Owners::new(workers, owner_key);
    let seed = u64::from_le_bytes(random_bytes::<8>()?);
    log_start(&config, &placements, &sockets);
    steer_udp(&config, &sockets, &owners);
    // A successor attaches once its predecessor has let go (below).
    let mut attached = if taking_over.is_none() {
        xdp::attach(
            &config.udp.xdp,
            &udp_addresses(&sockets),
            &mut sockets,
            xdp::RELEASE_WAIT,
        )?
    } else {
        None
    };
    let state_path = config.state.path().map(PathBuf::from);
    // Every socket is bound and every file that needs root read: give up
    // root before any thread starts, as credentials are per thread.
    if let PrivilegePlan::Drop { identity, chroot } = &privilege_plan {
        workers::topology()?;
        privileges::drop_privileges(identity, chroot.as_deref())?;
        // What root was allowed, the user may not be (the io_uring sysctl
        // admits root by its capability): asked again as the user.
        host::check_io_uring(&confinement.dropped())?;
        info!(
            "serving as user {} (uid {}, gid {}){}",
            identity.user,
            identity.uid,
            identity.gid,
            chroot
                .as_ref()
                .map(|dir| format!(", chrooted to {}", dir.display()))
                .unwrap_or_default()
        );
    } else if euid == 0 {
        warn!("serving as root (privileges.allow_root): set privileges.user to drop root");
    }
    // Read, and its writability checked, as the user that writes it at the
    // stop (inside the chroot, if any, where the same path names it): the
    // directory is that user's, and root must not follow what it planted.
    // Everything that can fail at the start has: now the predecessor, if
    // any, stops and hands over its swarms.
    let mut predecessor = None;
    let mut predecessor_name = None;
    let loaded = match taking_over.take() {
        Some(taken) => {
            let started = std::time::Instant::now();
            predecessor_name = Some(format!("the tracker at {}", taken.path().display()));
            // The predecessor has stopped and closed its AF_XDP sockets
            // when its swarms come: this one attaches before its `ok`, so
            // that a failure leaves the predecessor serving.
            let handover_timeout = Duration::from_secs(config.runtime.handover_timeout_secs.into());
            let (bytes, old) = taken.swarms(|| {
                attached = xdp::attach(
                    &config.udp.xdp,
                    &udp_addresses(&sockets),
                    &mut sockets,
                    handover_timeout,
                )?;
                Ok(())
            })?;
            if let Some((_, file)) = &mut control {
                file.took_over();
            }
            info!(
                "took over: {} bytes of swarms received in {} ms; restoring",
                bytes.len(),
                started.elapsed().as_millis()
            );
            predecessor = Some(old);
            Some(Arc::new(bytes))
        }
        None => state_path
            .as_deref()
            .and_then(state_file::load)
            .map(Arc::new),
    };
    let shutdown = Shutdown::new(workers);
    let hand_over = Arc::new(handover::Pending::default());
    let successors = Arc::new(handover::Successors::default());
    spawn_signal_handler(
        signals,
        &config,
        tls.clone(),
        access.clone(),
        shutdown.clone(),
        successors.clone(),
    )?;
    let handover_timeout = Duration::from_secs(config.runtime.handover_timeout_secs.into());
    let serving = Serving {
        placements,
        config,
        tls,
        access,
        shutdown: shutdown.clone(),
        secret,
        owners,
        seed,
        private: private.clone(),
    };
    // Removed when this returns, unless a successor took it.
    let (mut control, mut control_file) = control.unzip();
    let mut sockets = sockets;
    let mut loaded = loaded;
    let mut source = predecessor_name.unwrap_or_else(|| serving.config.state.file.clone());
    // The predecessor of a hand-over saves to the same file as it exits: no
    // snapshot before it is gone.
    let mut first = predecessor
        .take()
        .map(|old| Box::new(move || old.wait_gone()) as Box<dyn FnOnce() + Send>);
    let sections = loop {
        // Stopped (and any write of it finished) when it drops: before the
        // stop's own save below, which it must never overwrite.
        let snapshots = match (&state_path, serving.config.state.snapshot_interval()) {
            (Some(path), Some(interval)) => Some(
                snapshot::Writer::start(path.clone(), workers, interval, first.take())
                    .map_err(|e| format!("cannot start the snapshot thread: {e}"))?,
            ),
            _ => None,
        };
        let (snapshot_writer, snapshots) = snapshots.unzip();
        if let (Some(control), Some(control_file)) = (control.take(), &control_file) {
            let handed = handover::copies(&sockets, &control, control_file)
                .map_err(|e| format!("cannot copy the sockets for a hand-over: {e}"))?;
            let manifest = handover::Manifest { workers, secret };
            handover::serve_control(
                control,
                handed,
                manifest,
                successors.clone(),
                shutdown.clone(),
                hand_over.clone(),
            )
            .map_err(|e| format!("cannot start the control thread: {e}"))?;
        }
        // Each serve has its database thread, started once the swarms are
        // here: a successor's, after its predecessor wrote what its own
        // could not (see `PrivateMode::stop_flusher`).
        let restored_peers = match &private {
            Some(private) => private.start_flusher(&serving.owners)?,
            None => Vec::new(),
        };
        // Detached as the stop begins: the kernel's sockets take the
        // AF_XDP traffic while the workers drain their rings, for a
        // successor or until the end.
        if let Some(attached) = attached.take() {
            shutdown.before_stop(move || attached.detach());
        }
        let served = serving.serve(
            std::mem::take(&mut sockets),
            loaded.take(),
            &source,
            snapshots,
            restored_peers,
        );
        if let Some(private) = &private {
            let drain = Duration::from_secs(serving.config.state.drain_timeout_secs.into());
            private.stop_flusher(std::time::Instant::now() + drain)?;
        }
        let sections = served?;
        drop(snapshot_writer);
        let Some(handing) = hand_over.take() else {
            break sections;
        };
        let started = std::time::Instant::now();
        let pid = handing.pid();
        match handing.send_swarms(&sections, clock::unix_secs(), handover_timeout) {
            Ok(()) => {
                info!(
                    "handed over {} torrents and {} peers to pid {pid} in {} ms",
                    sections.iter().map(|s| s.torrents()).sum::<u64>(),
                    sections.iter().map(|s| s.peers()).sum::<u64>(),
                    started.elapsed().as_millis()
                );
                if let Some(file) = &mut control_file {
                    file.handed_over();
                }
                // The state file is written below for a crash of the new one
                // before its first snapshot: with a CPU no one else wants,
                // as the new one restores the swarms on the same CPUs.
                let _ = workers::run_when_idle();
                break sections;
            }
            // It holds every socket: once it cannot serve on them, this one
            // serves again rather than leave clients with no one for a
            // restart's time.
            Err(e) => match handing.reclaim(workers) {
                Ok((reclaimed, listener)) => {
                    warn!(
                        "hand-over to pid {pid} failed after the stop: {e}; killed it; serving \
                         again, the same swarms on the same sockets"
                    );
                    // Its steering program, keyed by its own owner key, is
                    // on the groups now.
                    steer_udp(&serving.config, &reclaimed, &serving.owners);
                    let mut reclaimed = reclaimed;
                    // The successor's program goes with it.
                    match xdp::attach(
                        &serving.config.udp.xdp,
                        &udp_addresses(&reclaimed),
                        &mut reclaimed,
                        handover_timeout,
                    ) {
                        Ok(again) => attached = again,
                        Err(e) => warn!(
                            "AF_XDP not attached again ({e}): the UDP sockets serve all UDP \
                             traffic until a restart"
                        ),
                    }
                    sockets = reclaimed;
                    control = Some(listener);
                    loaded = Some(Arc::new(state_bytes(&sections)));
                    source = format!("the swarms held before the hand-over to pid {pid}");
                    shutdown.resume();
                }
                // Saved, for the restart that serves them.
                Err(why) => {
                    warn!("hand-over to pid {pid} failed after the stop: {e}; {why}");
                    if let Some(file) = &mut control_file {
                        file.handed_over();
                    }
                    if let Some(path) = &state_path {
                        state_file::save(path, &sections)?;
                    }
                    return Err(format!(
                        "the hand-over failed after the stop ({e}), and this tracker cannot \
                         serve again: {why}"
                    ));
                }
            },
        }
    };
    match state_path {
        Some(path) => state_file::save(&path, &sections),
        None => {
            info!("stopped (no state file configured: the swarms are not saved)");
            Ok(())
        }
    }
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

/// What the workers are started with, each time they serve.
struct Serving {
    placements: Vec<WorkerPlacement>,
    config: Config,
    tls: Option<SharedTlsConfig>,
    access: Option<Arc<Reloadable<AccessList>>>,
    shutdown: Arc<Shutdown>,
    secret: [u8; 16],
    owners: Owners,
    seed: u64,
    private: Option<Arc<PrivateMode>>,
}

impl Serving {
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
            secret,
            owners,
            seed,
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
        let (secret, owners, seed) = (*secret, *owners, *seed);
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

/// Raises the descriptor limit as far as it goes, and lowers
/// `http.max_connections_per_worker` (with a warning that says how to raise
/// the limit) when the connections it allows would not fit: a worker at its
/// connection cap closes its idlest connection for a newcomer, where one out
/// of descriptors could accept nothing at all.
fn fit_connections_to_nofile(config: &mut Config, workers: usize) -> Result<(), String> {
    let limit = host::raise_nofile()
        .map_err(|e| format!("cannot read or raise the file-descriptor limit: {e}"))?;
    let listeners =
        config.udp.listen.len() + config.http.listen.len() + config.http.https_listen.len();
    let others = config.metrics.listen.len() * (1 + config.metrics.max_connections);
    let fit = host::connections_that_fit(limit, workers, listeners, others)?;
    let serves_tcp = !(config.http.listen.is_empty() && config.http.https_listen.is_empty());
    let wanted = config.http.max_connections_per_worker as u64;
    if serves_tcp && fit < wanted {
        warn!(
            "the file-descriptor limit (RLIMIT_NOFILE) is {limit}: {workers} workers can hold \
             {fit} connections each, not the {wanted} of http.max_connections_per_worker, which \
             is lowered to {fit}; raise the limit (LimitNOFILE= in the systemd unit, nofile in \
             /etc/security/limits.conf, ulimit -n) to serve them all"
        );
        config.http.max_connections_per_worker = fit as usize;
    } else {
        info!("file-descriptor limit {limit}: room for {fit} connections per worker");
    }
    Ok(())
}

/// The HTTPS configuration: from the configured files, or a self-signed
/// certificate made now. None when HTTPS is off.
fn tls_config(config: &Config) -> Result<Option<SharedTlsConfig>, String> {
    if config.http.https_listen.is_empty() {
        return Ok(None);
    }
    let loaded = match config.http.tls_files() {
        Some((cert, key)) => {
            let loaded = tls::load_pem_files(cert, key)?;
            info!(
                "HTTPS certificate {} (SHA-256 {})",
                cert.display(),
                loaded.fingerprint
            );
            loaded
        }
        None => {
            let mut names = vec!["localhost".to_string()];
            let mut ips: Vec<IpAddr> =
                vec![[127, 0, 0, 1].into(), std::net::Ipv6Addr::LOCALHOST.into()];
            for addr in &config.http.https_listen {
                if !addr.ip().is_unspecified() && !ips.contains(&addr.ip()) {
                    ips.push(addr.ip());
                }
            }
            names.extend(ips.iter().map(IpAddr::to_string));
            let (loaded, _pem) = tls::self_signed(&names)?;
            info!(
                "no TLS certificate configured (http.tls_cert_file, --tls-cert): HTTPS uses a \
                 self-signed certificate made at start for {}, SHA-256 {}; clients must be told \
                 to accept it",
                names.join(", "),
                loaded.fingerprint
            );
            loaded
        }
    };
    Ok(Some(Arc::new(Reloadable::new(Arc::new(loaded.config)))))
}

fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    use std::io::Read;
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes)
}

fn log_start(config: &Config, placements: &[WorkerPlacement], sockets: &[WorkerSockets]) {
    let placement = match placements.first() {
        Some(WorkerPlacement::Pinned(_)) => {
            let cpus: Vec<usize> = placements
                .iter()
                .filter_map(|p| match p {
                    WorkerPlacement::Pinned(cpu) => Some(*cpu),
                    WorkerPlacement::Unpinned(_) => None,
                })
                .collect();
            format!("pinned to CPUs {}", workers::format_cpu_list(&cpus))
        }
        Some(WorkerPlacement::Unpinned(cpus)) => {
            format!("unpinned on CPUs {}", workers::format_cpu_list(cpus))
        }
        None => String::new(),
    };
    info!("starting {} workers, {placement}", placements.len());
    match host::memlock_limit() {
        Some(limit) => info!(
            "locked-memory limit {} KiB, enough for {} workers",
            limit >> 10,
            limit / host::MEMLOCK_PER_WORKER
        ),
        None => info!("locked-memory limit: unlimited"),
    }
    if let Some(first) = sockets.first() {
        for addr in first.udp.iter().filter_map(|s| s.local_addr().ok()) {
            info!("serving UDP tracker on udp://{addr}/announce");
        }
        for addr in first.http.iter().filter_map(|s| s.local_addr().ok()) {
            info!("serving HTTP tracker on http://{addr}/announce");
        }
        for addr in first.https.iter().filter_map(|s| s.local_addr().ok()) {
            info!("serving HTTPS tracker on https://{addr}/announce");
        }
        // WebTorrent's upgrades, on the same listeners (path / or /announce).
        if config.websocket.serves(config.private.enabled) {
            for addr in first.http.iter().filter_map(|s| s.local_addr().ok()) {
                info!("serving WebSocket tracker on ws://{addr}/announce");
            }
            for addr in first.https.iter().filter_map(|s| s.local_addr().ok()) {
                info!("serving WebSocket tracker on wss://{addr}/announce");
            }
        }
        for addr in first.metrics.iter().filter_map(|s| s.local_addr().ok()) {
            info!("serving Prometheus metrics on http://{addr}/metrics");
        }
    }
    if let Some(header) = config.http.real_ip_header() {
        info!(
            "HTTP clients' addresses are taken from the {header} header of requests from {}",
            config.http.trusted_proxies.join(", ")
        );
    }
    if config.udp.connection_secret.is_empty() {
        info!("UDP connection ids use a random secret: they do not survive a restart");
    }
}
