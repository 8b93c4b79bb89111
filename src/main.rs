//! The `tracker` binary: reads the config and flags, binds the sockets, and
//! starts one worker per CPU. Wiring only; the work is in the crates.

mod reload;
mod signals;
mod start;

use clap::Parser;
use reload::{Reloader, TimeLimit};
use signals::{BlockedSignals, SIGHUP, SIGINT, SIGTERM};
use start::host;
use start::instance::InstanceLock;
use start::privileges::{self, PrivilegePlan};
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tracing::{info, warn};
use tracker_http::metrics_endpoint;
use tracker_http::server::HttpService;
use tracker_http::tls::{self, SharedTlsConfig};
use tracker_runtime::access::AccessList;
use tracker_runtime::clock;
use tracker_runtime::config::{default_config_file, Config, ConfigError};
use tracker_runtime::mesh::Meshes;
use tracker_runtime::owner::owner_of;
use tracker_runtime::reloadable::Reloadable;
use tracker_runtime::shard::Shard;
use tracker_runtime::shutdown::{self, Shutdown};
use tracker_runtime::state_file;
use tracker_runtime::workers::{self, WorkerPlacement};
use tracker_swarm::state::{Section, StateFile};
use tracker_swarm::{Restored, StoreLimits, SwarmStore};
use tracker_udp::cookie::ConnectionCookies;
use tracker_udp::server::UdpService;

/// A thread-per-core BitTorrent tracker (UDP BEP 15, HTTP and HTTPS) on io_uring.
#[derive(Parser, Debug)]
#[command(name = "tracker", version, about)]
struct Cli {
    /// Read the configuration from this TOML file (see --print-config).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    config: Option<PathBuf>,
    /// Print the default configuration, with a comment on every key, and exit.
    #[arg(long)]
    print_config: bool,
    /// Worker executors (default: one per CPU in --cpus).
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// CPUs to run on, e.g. 0-3,6 (default: every CPU this process may use).
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Pin each worker to its own CPU (the default).
    #[arg(long, overrides_with = "no_pin")]
    pin: bool,
    /// Let the kernel place the workers instead of pinning them.
    #[arg(long, overrides_with = "pin")]
    no_pin: bool,
    /// Serve the UDP tracker on this address (repeatable; replaces udp.listen).
    /// Default: 0.0.0.0:6969 and [::]:6969.
    #[arg(long = "udp", value_name = "ADDR")]
    udp: Vec<SocketAddr>,
    /// Serve the HTTP tracker on this address (repeatable; replaces
    /// http.listen). Default: 0.0.0.0:6969 and [::]:6969.
    #[arg(long = "http", value_name = "ADDR")]
    http: Vec<SocketAddr>,
    /// Serve the HTTPS tracker on this address (repeatable; replaces
    /// http.https_listen). Default: 0.0.0.0:6970 and [::]:6970.
    #[arg(long = "https", value_name = "ADDR")]
    https: Vec<SocketAddr>,
    /// PEM certificate chain for HTTPS (with --tls-key; default: a
    /// self-signed certificate made at start). Reread on SIGHUP.
    #[arg(long = "tls-cert", value_name = "FILE", requires = "tls_key")]
    tls_cert: Option<PathBuf>,
    /// PEM private key for HTTPS: PKCS#8, PKCS#1 or SEC1. Reread on SIGHUP.
    #[arg(long = "tls-key", value_name = "FILE", requires = "tls_cert")]
    tls_key: Option<PathBuf>,
    /// Take each HTTP client's address from this header, set by a trusted
    /// reverse proxy (e.g. X-Forwarded-For); needs --trusted-proxy.
    #[arg(long = "real-ip-header", value_name = "NAME")]
    real_ip_header: Option<String>,
    /// A proxy (address or network, e.g. 10.0.0.0/8) whose real-IP header is
    /// believed (repeatable; replaces http.trusted_proxies).
    #[arg(long = "trusted-proxy", value_name = "NET")]
    trusted_proxies: Vec<String>,
    /// Once the ports are bound, become this user (started as root).
    #[arg(long, value_name = "NAME")]
    user: Option<String>,
    /// ... and this group (default: the user's own).
    #[arg(long, value_name = "NAME", requires = "user")]
    group: Option<String>,
    /// ... after a chroot to this directory.
    #[arg(long, value_name = "DIR", requires = "user")]
    chroot: Option<String>,
    /// Serve as root when started as root with no --user.
    #[arg(long)]
    allow_root: bool,
    /// Serve Prometheus metrics (GET /metrics) on this address (repeatable;
    /// replaces metrics.listen). Default: off. Keep it off the public network.
    #[arg(long = "metrics", value_name = "ADDR")]
    metrics: Vec<SocketAddr>,
    /// Save the swarms to this file on SIGTERM/SIGINT and load them from it at
    /// start (replaces state.file; default tracker.state in the working
    /// directory). An empty value turns it off.
    #[arg(long = "state", value_name = "FILE")]
    state: Option<String>,
}

/// The values that SIGHUP replaces while the workers run.
#[derive(Clone)]
struct Reloaded {
    /// None without HTTPS.
    tls: Option<SharedTlsConfig>,
    /// None when access lists are off.
    access: Option<Arc<Reloadable<AccessList>>>,
}

/// What one worker serves: its own socket for every address.
#[derive(Default)]
struct WorkerSockets {
    udp: Vec<UdpSocket>,
    http: Vec<TcpListener>,
    https: Vec<TcpListener>,
    /// The metrics endpoint's listeners: worker 0's alone.
    metrics: Vec<TcpListener>,
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if cli.print_config {
        print!("{}", default_config_file());
        return ExitCode::SUCCESS;
    }
    let config = match load_config(&cli) {
        Ok(config) => config,
        Err(e) => {
            eprintln!("tracker: {e}");
            return ExitCode::from(2);
        }
    };
    if let Err(e) = init_logging(&config) {
        eprintln!("tracker: {e}");
        return ExitCode::from(2);
    }
    // A bad list is the user's to fix, like a bad config key: exit 2.
    let access = match load_access_list(&config) {
        Ok(access) => access,
        Err(e) => {
            eprintln!("tracker: `access.file`: {e}");
            return ExitCode::from(2);
        }
    };
    // Before any worker starts: contained panics are logged sparingly.
    tracker_runtime::contain::install_panic_hook();
    match run(config, access) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Once, plainly, whatever the log level: the reason it stopped.
            eprintln!("tracker: {e}");
            ExitCode::FAILURE
        }
    }
}

/// The config file (or the defaults) with the command-line flags on top.
fn load_config(cli: &Cli) -> Result<Config, ConfigError> {
    let mut config = match &cli.config {
        Some(path) => Config::load(path)?,
        None => Config::default(),
    };
    if let Some(workers) = cli.workers {
        config.runtime.workers = workers;
    }
    if let Some(cpus) = &cli.cpus {
        workers::parse_cpu_list(cpus).map_err(|e| ConfigError::new(format!("--cpus: {e}")))?;
        config.runtime.cpus = cpus.clone();
    }
    if cli.pin {
        config.runtime.pin = true;
    }
    if cli.no_pin {
        config.runtime.pin = false;
    }
    if !cli.udp.is_empty() {
        config.udp.listen = cli.udp.clone();
    }
    if !cli.http.is_empty() {
        config.http.listen = cli.http.clone();
    }
    if !cli.https.is_empty() {
        config.http.https_listen = cli.https.clone();
    }
    if let (Some(cert), Some(key)) = (&cli.tls_cert, &cli.tls_key) {
        let text = |path: &PathBuf, flag: &str| {
            path.to_str()
                .map(str::to_string)
                .ok_or_else(|| ConfigError::new(format!("{flag}: the path is not UTF-8")))
        };
        config.http.tls_cert_file = text(cert, "--tls-cert")?;
        config.http.tls_key_file = text(key, "--tls-key")?;
    }
    if let Some(name) = &cli.real_ip_header {
        config.http.real_ip_header = name.clone();
    }
    if !cli.trusted_proxies.is_empty() {
        config.http.trusted_proxies = cli.trusted_proxies.clone();
    }
    if let Some(user) = &cli.user {
        config.privileges.user = user.clone();
    }
    if let Some(group) = &cli.group {
        config.privileges.group = group.clone();
    }
    if let Some(dir) = &cli.chroot {
        config.privileges.chroot = dir.clone();
    }
    if cli.allow_root {
        config.privileges.allow_root = true;
    }
    if !cli.metrics.is_empty() {
        config.metrics.listen = cli.metrics.clone();
    }
    if let Some(file) = &cli.state {
        config.state.file = file.clone();
    }
    config.validate()?;
    if config.udp.listen.is_empty()
        && config.http.listen.is_empty()
        && config.http.https_listen.is_empty()
    {
        return Err(ConfigError::new(
            "nothing to serve: `udp.listen`, `http.listen` and `http.https_listen` are all empty",
        ));
    }
    Ok(config)
}

fn init_logging(config: &Config) -> Result<(), String> {
    use tracing_subscriber::EnvFilter;
    let filter = match std::env::var("RUST_LOG") {
        Ok(text) if !text.is_empty() => {
            EnvFilter::try_new(&text).map_err(|e| format!("RUST_LOG: {e}"))?
        }
        _ => EnvFilter::try_new(&config.log.level).map_err(|e| format!("`log.level`: {e}"))?,
    };
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .init();
    Ok(())
}

/// The shared access list, read from its file; None when lists are off.
fn load_access_list(
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

fn run(mut config: Config, access: Option<Arc<Reloadable<AccessList>>>) -> Result<(), String> {
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
    host::check_io_uring()?;
    let euid = privileges::euid();
    let privilege_plan = privileges::plan(&config.privileges, euid, privileges::resolve)?;
    host::check_memlock(
        host::memlock_limit(),
        workers,
        privilege_plan.serves_as_root(euid),
    )?;
    fit_connections_to_nofile(&mut config, workers)?;
    // Before any other thread starts, so that every thread inherits the mask
    // and only the signal thread ever takes these signals.
    let signals = BlockedSignals::block(&[SIGHUP, SIGTERM, SIGINT])
        .map_err(|e| format!("cannot block SIGHUP, SIGTERM and SIGINT: {e}"))?;
    // Certificate problems first: they are the user's to fix, and a clear
    // message beats a bound port.
    let tls = tls_config(&config)?;
    // Held until the process ends: the ports are this tracker's alone.
    let mut lock = InstanceLock::default();
    let sockets = bind_all(&config, workers, &mut lock)?;
    let secret = match config.udp_secret() {
        Some(secret) => secret,
        None => random_bytes()?,
    };
    let seed = u64::from_le_bytes(random_bytes::<8>()?);
    log_start(&config, &placements, &sockets);
    let state_path = config.state.path().map(PathBuf::from);
    // Every socket is bound and every file that needs root read: give up
    // root before any thread starts, as credentials are per thread.
    if let PrivilegePlan::Drop { identity, chroot } = &privilege_plan {
        workers::topology()?;
        privileges::drop_privileges(identity, chroot.as_deref())?;
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
    let loaded = state_path
        .as_deref()
        .and_then(state_file::load)
        .map(Arc::new);
    let shutdown = Shutdown::new(workers);
    spawn_signal_handler(
        signals,
        &config,
        tls.clone(),
        access.clone(),
        shutdown.clone(),
    )?;
    // Each worker takes its own handle on the file's bytes and drops it once
    // it has restored its torrents, so the bytes go as soon as all have.
    let restore = Arc::new(Mutex::new(RestoreProgress::default()));
    let state_bytes: Vec<Option<Arc<Vec<u8>>>> = (0..workers).map(|_| loaded.clone()).collect();
    drop(loaded);
    let state_bytes = Arc::new(Mutex::new(state_bytes));

    let meshes = Meshes::new(workers, config.runtime.channel_capacity);
    let sockets = Arc::new(Mutex::new(sockets));
    let busy_poll = Duration::from_micros(config.runtime.busy_poll_us.into());
    let sections = workers::run_workers(placements, busy_poll, move |index| {
        let config = config.clone();
        let meshes = meshes.clone();
        let sockets = std::mem::take(&mut sockets.lock().expect("not poisoned")[index]);
        let reloaded = Reloaded {
            tls: tls.clone(),
            access: access.clone(),
        };
        let state = WorkerState {
            shutdown: shutdown.clone(),
            bytes: state_bytes.lock().expect("not poisoned")[index].take(),
            restore: restore.clone(),
            workers,
        };
        worker(
            index,
            config,
            meshes,
            sockets,
            reloaded,
            secret,
            seed ^ index as u64,
            state,
        )
    })?;
    // Every worker stopped on request and has handed over its swarms.
    match state_path {
        Some(path) => state_file::save(&path, &sections.into_iter().flatten().collect::<Vec<_>>()),
        None => {
            info!("stopped (no state file configured: the swarms are not saved)");
            Ok(())
        }
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

/// What a worker needs to restore its swarms at start and stop on request.
struct WorkerState {
    shutdown: Arc<Shutdown>,
    /// The state file, checked, when there is one to load.
    bytes: Option<Arc<Vec<u8>>>,
    restore: Arc<Mutex<RestoreProgress>>,
    workers: usize,
}

/// The workers' restores added up, logged by the last to finish.
#[derive(Default)]
struct RestoreProgress {
    restored: Restored,
    workers_done: usize,
    started: Option<Instant>,
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

/// Starts the thread that takes SIGHUP, SIGTERM and SIGINT. SIGTERM or
/// SIGINT asks the workers to stop (and save); a second one, while they
/// stop, exits at once without saving, as a process killed by it would.
/// SIGHUP asks the reload thread to reread the files (see `reload`) and
/// returns at once: whatever a reload waits for, a stop is taken.
fn spawn_signal_handler(
    signals: BlockedSignals,
    config: &Config,
    tls: Option<SharedTlsConfig>,
    access: Option<Arc<Reloadable<AccessList>>>,
    shutdown: Arc<Shutdown>,
) -> Result<(), String> {
    let reloader = Reloader::spawn(reload(config, tls, access))
        .map_err(|e| format!("cannot start the reload thread: {e}"))?;
    let saving = match config.state.path() {
        Some(path) => format!("then saving the swarms to {}", path.display()),
        None => "then exiting (no state file)".to_string(),
    };
    let drain = config.state.drain_timeout_secs;
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
                } else {
                    warn!("{name} again: exiting at once, without saving the swarms");
                    std::process::exit(128 + signal);
                }
            } else if signal == SIGHUP && !reloader.request() {
                info!("SIGHUP: a reload is under way and another waits; this one joins it");
            }
            ControlFlow::Continue(())
        })
        .map(drop)
        .map_err(|e| format!("cannot start the signal thread: {e}"))
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

/// One worker: its shard of the swarms, the clean-up, and its sockets.
/// One worker: its shard of the swarms (restored from the state file), the
/// clean-up, and its sockets, served until they fail (Err) or the process is
/// asked to stop: then its swarms, for the state file, when one is
/// configured.
#[allow(clippy::too_many_arguments)]
async fn worker(
    index: usize,
    config: Config,
    meshes: Meshes,
    sockets: WorkerSockets,
    reloaded: Reloaded,
    secret: [u8; 16],
    seed: u64,
    state: WorkerState,
) -> Result<Option<Section>, String> {
    let limits = StoreLimits {
        peer_timeout_secs: config.swarm.peer_timeout_secs,
        max_torrents: config.swarm.max_torrents_per_worker,
        max_peers_per_torrent: config.swarm.max_peers_per_torrent,
        max_peers: config.swarm.max_peers_per_worker,
        max_peers_per_address: Some(config.swarm.max_peers_per_address_per_torrent)
            .filter(|&max| max > 0),
        new_torrents_per_address_per_minute: config.swarm.new_torrents_per_address_per_minute,
    };
    let mut store = SwarmStore::new(limits, seed);
    if let Some(bytes) = state.bytes {
        let access = reloaded.access.as_ref().map(|shared| shared.load().0);
        restore_shard(
            &mut store,
            &bytes,
            index,
            &state.restore,
            state.workers,
            access.as_deref(),
            &config,
        );
    }
    let shard = Shard::join(
        index,
        meshes,
        store,
        config.runtime.max_forwarded,
        reloaded.access,
    )
    .await?;
    let period = Duration::from_secs(config.swarm.cleanup_interval_secs.into());
    glommio::spawn_local(shard.clone().clean_forever(period)).detach();
    glommio::spawn_local(shard.clone().enforce_access_forever()).detach();

    let udp = UdpService::new(
        shard.clone(),
        ConnectionCookies::new(secret),
        config.swarm.clone(),
        &config.udp,
    );
    let http = HttpService::new(
        shard.clone(),
        config.swarm.clone(),
        &config.http,
        reloaded.tls,
    );
    let shutdown = state.shutdown;
    {
        let (shutdown, udp, http) = (shutdown.clone(), udp.clone(), http.clone());
        glommio::spawn_local(async move {
            shutdown.requested().await;
            udp.stop();
            http.stop();
        })
        .detach();
    }
    let mut servers: Vec<_> = sockets
        .udp
        .into_iter()
        .map(|socket| glommio::spawn_local(Rc::clone(&udp).serve(socket)))
        .collect();
    for (listeners, tls) in [(sockets.http, false), (sockets.https, true)] {
        servers.extend(
            listeners
                .into_iter()
                .map(|listener| glommio::spawn_local(Rc::clone(&http).serve(listener, tls))),
        );
    }
    let mut endpoints = Vec::new();
    if !sockets.metrics.is_empty() {
        let endpoint = metrics_endpoint::Endpoint::new(shard.clone(), &config.metrics);
        endpoints.extend(
            sockets
                .metrics
                .into_iter()
                .map(|listener| glommio::spawn_local(Rc::clone(&endpoint).serve(listener))),
        );
    }
    // The metrics endpoint serves until the process ends: only its failure
    // ends the worker early.
    let endpoint_failed = async {
        workers::all_or_first_error(endpoints).await?;
        std::future::pending().await
    };
    // Servers run until they fail or stop; the first failure ends the
    // worker, and so the process.
    futures_lite::future::or(workers::all_or_first_error(servers), endpoint_failed).await?;
    if !shutdown.is_requested() {
        return Err("its servers stopped unasked".into());
    }
    // Answer what was taken, then wait for the other workers to do the same
    // (their requests may wait on this shard), all within one deadline; only
    // then is the store complete.
    let deadline = Instant::now() + Duration::from_secs(config.state.drain_timeout_secs.into());
    let busy = || udp.in_flight() + http.open_connections();
    shutdown::until(deadline, || busy() == 0).await;
    shutdown.drained();
    shutdown::until(deadline, || shutdown.all_drained()).await;
    if busy() > 0 || !shutdown.all_drained() {
        warn!(
            "worker {index}: state.drain_timeout_secs passed with {} UDP requests and {} HTTP \
             connections unanswered here, or on other workers",
            udp.in_flight(),
            http.open_connections()
        );
    }
    if config.state.path().is_none() {
        return Ok(None);
    }
    let mut section = Section::with_capacity(64 << 10);
    shard.with_store(|store| store.save(clock::now_secs(), clock::unix_secs(), &mut section));
    Ok(Some(section))
}

/// Restores this worker's torrents (those it owns now, whatever the worker
/// count was when the file was written) from a checked state file; the last
/// worker to finish logs the totals.
fn restore_shard(
    store: &mut SwarmStore,
    bytes: &[u8],
    index: usize,
    progress: &Mutex<RestoreProgress>,
    workers: usize,
    access: Option<&AccessList>,
    config: &Config,
) {
    let started = Instant::now();
    let keep = |hash: &tracker_proto::InfoHash| {
        owner_of(hash, workers) == index && access.map_or(true, |list| list.allows(hash))
    };
    let restored = StateFile::reopen(bytes)
        .map_err(|e| (e, Restored::default()))
        .and_then(|file| store.restore_file(&file, clock::now_secs(), clock::unix_secs(), keep))
        .unwrap_or_else(|(e, restored)| {
            // Cannot happen to a checked file; keep what was read.
            warn!("worker {index}: state file: {e}");
            restored
        });
    let mut progress = progress.lock().unwrap_or_else(|e| e.into_inner());
    progress.restored.add(restored);
    progress.workers_done += 1;
    let first_start = progress.started.map_or(started, |s| s.min(started));
    progress.started = Some(first_start);
    if progress.workers_done == workers {
        let r = progress.restored;
        info!(
            "restored {} torrents and {} peers from {} in {} ms ({} peers had expired; {} \
             over swarm.max_torrents_per_worker, max_peers_per_torrent, max_peers_per_worker \
             or max_peers_per_address_per_torrent; {} dropped as invalid: port 0, or no \
             single host's address)",
            r.torrents,
            r.peers,
            config.state.file,
            first_start.elapsed().as_millis(),
            r.expired,
            r.refused,
            r.invalid
        );
    }
}

/// Binds every address once per worker, before any worker starts, so that a
/// port in use is a clear start-up error. An address with port 0 gets its port
/// from the first bind, so that all workers share it. Each address is locked
/// first (`lock`), so that a second tracker cannot join the first's
/// `SO_REUSEPORT` groups.
fn bind_all(
    config: &Config,
    workers: usize,
    lock: &mut InstanceLock,
) -> Result<Vec<WorkerSockets>, String> {
    let mut per_worker: Vec<WorkerSockets> =
        (0..workers).map(|_| WorkerSockets::default()).collect();
    let recv_buffer = config.udp.recv_buffer_bytes;
    bind_each(
        &config.udp.listen,
        ("udp", "UDP", "--udp"),
        lock,
        &mut per_worker,
        |addr| tracker_net::udp::bind_reuseport(addr, recv_buffer),
        |s| &mut s.udp,
    )?;
    bind_each(
        &config.http.listen,
        ("tcp", "HTTP", "--http"),
        lock,
        &mut per_worker,
        tracker_net::tcp::bind_reuseport,
        |s| &mut s.http,
    )?;
    bind_each(
        &config.http.https_listen,
        ("tcp", "HTTPS", "--https"),
        lock,
        &mut per_worker,
        tracker_net::tcp::bind_reuseport,
        |s| &mut s.https,
    )?;
    // Once, for worker 0: the endpoint gathers every worker's counters itself.
    bind_each(
        &config.metrics.listen,
        ("tcp", "metrics", "--metrics"),
        lock,
        &mut per_worker[..1],
        tracker_http::metrics_endpoint::bind,
        |s| &mut s.metrics,
    )?;
    Ok(per_worker)
}

/// Binds each of `addrs` once for every worker with `bind`, into the list
/// `slot` picks, once it holds the address's lock. `names`: the transport
/// ("udp" or "tcp"), the protocol as messages name it, and its flag.
fn bind_each<S: LocalAddr>(
    addrs: &[SocketAddr],
    (transport, protocol, flag): (&str, &str, &str),
    lock: &mut InstanceLock,
    per_worker: &mut [WorkerSockets],
    bind: impl Fn(SocketAddr) -> std::io::Result<S>,
    slot: impl Fn(&mut WorkerSockets) -> &mut Vec<S>,
) -> Result<(), String> {
    for &addr in addrs {
        lock.take(transport, protocol, addr)
            .map_err(|e| format!("{e} with {flag}"))?;
        let mut addr = addr;
        for sockets in per_worker.iter_mut() {
            let socket = bind(addr).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    format!("cannot bind {protocol} {addr}: the port is in use by another program; stop it or choose another address with {flag}")
                } else {
                    format!("cannot bind {protocol} {addr}: {e}")
                }
            })?;
            let bound = socket.local_addr().map_err(|e| e.to_string())?;
            if addr.port() == 0 {
                // Its port is known now: locked, as a port given in full is.
                lock.take(transport, protocol, bound)?;
            }
            addr = bound;
            slot(sockets).push(socket);
        }
    }
    Ok(())
}

/// A bound socket's address.
trait LocalAddr {
    fn local_addr(&self) -> std::io::Result<SocketAddr>;
}

impl LocalAddr for UdpSocket {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        UdpSocket::local_addr(self)
    }
}

impl LocalAddr for TcpListener {
    fn local_addr(&self) -> std::io::Result<SocketAddr> {
        TcpListener::local_addr(self)
    }
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
