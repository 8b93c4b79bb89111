//! Start-up, in order (`run`): the host checks and the plan of workers,
//! the TLS configuration, the ports bound or taken over (each locked, so
//! one tracker serves a port), AF_XDP attached, privileges given up, the
//! swarms loaded or taken over, the signal thread; then the workers serve
//! (`serving`) until they stop, and the swarms are saved.

pub mod bind;
pub mod capabilities;
pub mod host;
pub mod instance;
pub mod privileges;
mod serving;
pub mod xdp;

use std::net::IpAddr;
use std::os::unix::net::UnixListener;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};
use tracker_http::tls::{self, SharedTlsConfig};
use tracker_runtime::access::AccessList;
use tracker_runtime::owner::Owners;
use tracker_runtime::reloadable::Reloadable;
use tracker_runtime::shutdown::Shutdown;
use tracker_runtime::state_file;
use tracker_runtime::workers::{self, WorkerPlacement};

use crate::config::Config;
use crate::handover::{self, ControlFile, TakeOver};
use crate::private::PrivateMode;
use crate::signals::{spawn_signal_handler, BlockedSignals, SIGHUP, SIGINT, SIGTERM, SIGUSR2};
use bind::{bind_all, steer_udp, udp_addresses, WorkerSockets};
use privileges::PrivilegePlan;
use serving::{Keys, Round, Serving};

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
    let host = check_host(&mut config)?;
    let workers = host.placements.len();
    // The service manager's PID file (systemd's PIDFile=), which follows
    // hand-overs (see `handover::PidFile`).
    let main_pid = Arc::new(handover::MainPid::new(handover::PidFile::from_env()));
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
    let Bound {
        mut sockets,
        control,
        predecessor,
        xdp_taken,
    } = bind_or_take(&config, &host, take_over)?;
    let keys = keys(&config, predecessor.as_ref(), workers)?;
    log_start(&config, &host.placements, &sockets);
    steer_udp(&config, &sockets, &keys.owners);
    // A successor attaches once its predecessor has let go (`take_swarms`).
    let attached = if predecessor.is_none() {
        xdp::attach(
            &config.udp.xdp,
            &udp_addresses(&sockets),
            &mut sockets,
            xdp::RELEASE_WAIT,
        )?
    } else {
        None
    };
    give_up_root(&host)?;
    let state_path = config.state.path().map(PathBuf::from);
    // Removed when this returns, unless a successor took it.
    let (control, mut control_file) = control.unzip();
    let first = match predecessor {
        // Everything that can fail at the start has: now the predecessor
        // stops and hands over its swarms.
        Some(taken) => take_swarms(
            taken,
            &config,
            sockets,
            xdp_taken,
            control,
            control_file.as_mut(),
            main_pid.file(),
        )?,
        // Read, and its writability checked, as the user that writes it at
        // the stop (inside the chroot, if any, where the same path names
        // it): the directory is that user's, and root must not follow what
        // it planted.
        None => {
            main_pid.started();
            Round {
                sockets,
                swarms: state_path
                    .as_deref()
                    .and_then(state_file::load)
                    .map(Arc::new),
                source: config.state.file.clone(),
                control,
                attached,
                before_first_snapshot: None,
            }
        }
    };
    // The last step that needed a privilege is done: the serving process
    // holds none. Before any thread starts, as they are per thread.
    drop_capabilities(first.attached.as_ref(), &host)?;
    follow_routes(first.attached.is_some())?;
    let shutdown = Shutdown::new(workers);
    let successors = Arc::new(handover::Successors::default());
    spawn_signal_handler(
        signals,
        &config,
        tls.clone(),
        access.clone(),
        shutdown.clone(),
        successors.clone(),
        main_pid.clone(),
    )?;
    let serving = Serving {
        handover_timeout: Duration::from_secs(config.runtime.handover_timeout_secs.into()),
        placements: host.placements,
        config,
        tls,
        access,
        shutdown,
        keys,
        private,
        state_path,
        hand_over: Arc::new(handover::Pending::default()),
        successors,
        main_pid: main_pid.clone(),
    };
    let sections = serving.serve_until_stopped(first, &mut control_file)?;
    match &serving.state_path {
        Some(path) => state_file::save(path, &sections)?,
        None => info!("stopped (no state file configured: the swarms are not saved)"),
    }
    // Last: after a hand-over, the PID file names the successor as this
    // process exits, and the service manager supervises it from then on.
    main_pid.exiting()
}

/// What the host allows this run: the workers' CPUs and what the tracker
/// does about root, once the kernel, the system calls and the limits have
/// been checked.
struct HostPlan {
    placements: Vec<WorkerPlacement>,
    confinement: host::Confinement,
    euid: libc::uid_t,
    privileges: PrivilegePlan,
}

/// Plans the workers and checks the host for them; lowers the connection
/// cap where the descriptor limit would not hold it.
fn check_host(config: &mut Config) -> Result<HostPlan, String> {
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
    let privileges = privileges::plan(&config.privileges, euid, privileges::resolve)?;
    host::check_memlock(
        host::memlock_limit(),
        workers,
        privileges.serves_as_root(euid),
    )?;
    fit_connections_to_nofile(config, workers)?;
    Ok(HostPlan {
        placements,
        confinement,
        euid,
        privileges,
    })
}

/// What a start serves on.
struct Bound {
    sockets: Vec<WorkerSockets>,
    /// The control socket hand-overs come to, and its file.
    control: Option<(UnixListener, ControlFile)>,
    /// The running tracker this one takes over from (`--take-over`).
    predecessor: Option<TakeOver>,
    /// Its AF_XDP sockets and programs, where it hands them over.
    xdp_taken: xdp::Taken,
}

/// Binds every port, or with `take_over` takes the running tracker's
/// sockets (it keeps serving until `take_swarms`).
fn bind_or_take(config: &Config, host: &HostPlan, take_over: bool) -> Result<Bound, String> {
    let workers = host.placements.len();
    let control_path = config.runtime.control_socket();
    let owner = match &host.privileges {
        PrivilegePlan::Drop { identity, .. } => Some((identity.uid, identity.gid)),
        PrivilegePlan::Keep => None,
    };
    if !take_over {
        let control = match &control_path {
            Some(path) => handover::bind_control(path, owner)?,
            None => None,
        };
        return Ok(Bound {
            sockets: bind_all(config, workers)?,
            control,
            predecessor: None,
            xdp_taken: xdp::Taken::default(),
        });
    }
    let path = control_path
        .as_deref()
        .ok_or("--take-over needs runtime.control_socket, the running tracker's control socket")?;
    let mut taken = TakeOver::connect(path, owner.map(|(uid, _)| uid))?;
    let handover::Taking {
        sockets,
        control,
        xdp: xdp_taken,
    } = taken.sockets(config, workers)?;
    if config.udp.xdp.enabled()
        && xdp_taken.is_empty()
        && matches!(host.privileges, PrivilegePlan::Drop { .. })
    {
        // A predecessor that cannot hand AF_XDP over lets go of its queues
        // only once it has stopped, after this one has given up root.
        return Err(
            "cannot take over with udp.xdp on and privileges.user set from a tracker that \
             cannot hand its AF_XDP sockets over (before Linux 6.4): this tracker would attach \
             AF_XDP after giving up root, which it cannot; run it with the capabilities instead \
             (docs/OPERATIONS.md, \"AF_XDP\")"
                .into(),
        );
    }
    Ok(Bound {
        sockets,
        control: Some(control),
        predecessor: Some(taken),
        xdp_taken,
    })
}

/// The keys of this run: the UDP secret is the configured one, else the
/// predecessor's (clients keep their ids), else random.
fn keys(config: &Config, predecessor: Option<&TakeOver>, workers: usize) -> Result<Keys, String> {
    let secret = match (config.udp_secret(), predecessor) {
        (Some(secret), _) => secret,
        // Clients keep the ids the predecessor gave them.
        (None, Some(taken)) => taken.secret(),
        (None, None) => random_bytes()?,
    };
    let owner_key = match config.runtime.owner_key() {
        Some(key) => key,
        None => random_bytes()?,
    };
    Ok(Keys {
        secret,
        owners: Owners::new(workers, owner_key),
        seed: u64::from_le_bytes(random_bytes::<8>()?),
    })
}

/// Every socket is bound and every file that needs root read: gives up
/// root before any thread starts, as credentials are per thread.
fn give_up_root(host: &HostPlan) -> Result<(), String> {
    let PrivilegePlan::Drop { identity, chroot } = &host.privileges else {
        if host.euid == 0 {
            warn!("serving as root (privileges.allow_root): set privileges.user to drop root");
        }
        return Ok(());
    };
    workers::topology()?;
    // The change of user takes CAP_SETPCAP with the rest: the bounding set
    // is emptied first, so that the user's process can gain nothing back.
    capabilities::empty_bounding_set(0)?;
    privileges::drop_privileges(identity, chroot.as_deref())?;
    // What root was allowed, the user may not be (the io_uring sysctl
    // admits root by its capability): asked again as the user.
    host::check_io_uring(&host.confinement.dropped())?;
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
    Ok(())
}

/// Gives up every capability (`capabilities`), but those a successor
/// needs to attach AF_XDP again where the kernel cannot hand the sockets
/// over, CAP_IPC_LOCK where the locked-memory limit would not hold the
/// workers' io_uring buffers without it (io_uring charges them to a process
/// without it, root too), and root's access to files where the tracker
/// serves as root.
fn drop_capabilities(attached: Option<&xdp::Attached>, host: &HostPlan) -> Result<(), String> {
    let mut keep: Vec<(capabilities::Caps, &str)> = Vec::new();
    if host.privileges.serves_as_root(host.euid) {
        keep.push((
            capabilities::ROOT_FILES,
            "root's access to files, as it serves as root",
        ));
    }
    if attached.is_some_and(|a| !a.handable()) {
        keep.push((
            capabilities::AF_XDP_AGAIN,
            "AF_XDP's, for a successor that attaches again (before Linux 6.4)",
        ));
    }
    let need = host.placements.len() as u64 * host::MEMLOCK_PER_WORKER;
    if host::memlock_limit().is_some_and(|limit| limit < need) {
        keep.push((
            1 << capabilities::CAP_IPC_LOCK,
            "io_uring's buffers past the locked-memory limit",
        ));
    }
    let dropped = capabilities::drop_all_but(keep.iter().fold(0, |all, (caps, _)| all | caps))?;
    if dropped.before == 0 {
        return Ok(());
    }
    if dropped.capset_refused {
        warn!(
            "capabilities not given up: the system-call filter refuses capset (a unit of a \
             version before this one denies it with @privileged: add \
             SystemCallFilter=capset, as deploy/tracker.service does); the tracker keeps {}",
            capabilities::names(dropped.kept)
        );
        return Ok(());
    }
    let bounding = if dropped.bounding_emptied {
        ""
    } else {
        " (the bounding set is the service manager's: no_new_privs keeps an execve from \
         gaining any)"
    };
    let given_up = capabilities::names(dropped.before & !dropped.kept);
    if dropped.kept == 0 {
        info!("capabilities given up: {given_up}; none held from here on{bounding}");
    } else {
        let kept: Vec<String> = keep
            .iter()
            .filter(|(caps, _)| caps & dropped.kept != 0)
            .map(|(caps, why)| format!("{} ({why})", capabilities::names(caps & dropped.kept)))
            .collect();
        info!(
            "capabilities given up: {given_up}; kept: {}{bounding}",
            kept.join("; ")
        );
    }
    Ok(())
}

/// Starts following the routing table AF_XDP checks its clients by: a
/// thread, so after the capabilities are gone.
fn follow_routes(xdp: bool) -> Result<(), String> {
    if !xdp {
        return Ok(());
    }
    tracker_net::xdp::route::follow_shared()
        .map(drop)
        .map_err(|e| format!("udp.xdp: cannot follow the routing table (netlink): {e}"))
}

/// Tells the predecessor to stop and takes its swarms: the first round.
/// The predecessor has stopped when its swarms come: this one takes over
/// the AF_XDP sockets it handed (`xdp_taken`), or, where it handed none,
/// attaches as the predecessor has closed its own, before its `ok`, so
/// that a failure leaves the predecessor serving.
fn take_swarms(
    taken: TakeOver,
    config: &Config,
    mut sockets: Vec<WorkerSockets>,
    xdp_taken: xdp::Taken,
    control: Option<UnixListener>,
    control_file: Option<&mut ControlFile>,
    pid_file: Option<&handover::PidFile>,
) -> Result<Round, String> {
    let started = Instant::now();
    let source = format!("the tracker at {}", taken.path().display());
    let handover_timeout = Duration::from_secs(config.runtime.handover_timeout_secs.into());
    let mut attached = None;
    let (bytes, predecessor) = taken.swarms(pid_file, || {
        attached = if xdp_taken.is_empty() {
            xdp::attach(
                &config.udp.xdp,
                &udp_addresses(&sockets),
                &mut sockets,
                handover_timeout,
            )?
        } else {
            xdp::adopt(xdp_taken, &mut sockets)?
        };
        Ok(())
    })?;
    if let Some(file) = control_file {
        file.took_over();
    }
    info!(
        "took over: {} bytes of swarms received in {} ms; restoring",
        bytes.len(),
        started.elapsed().as_millis()
    );
    Ok(Round {
        sockets,
        swarms: Some(Arc::new(bytes)),
        source,
        control,
        attached,
        // It saves to the same file as it exits: no snapshot before it
        // is gone.
        before_first_snapshot: Some(Box::new(move || predecessor.wait_gone())),
    })
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
