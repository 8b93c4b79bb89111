//! The `tracker` binary: reads the config and flags, binds the sockets, and
//! starts one worker per CPU. Wiring only; the work is in the crates.

use clap::Parser;
use std::net::{IpAddr, SocketAddr, TcpListener, UdpSocket};
use std::ops::ControlFlow;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{error, info, warn};
use tracker_common::config::{default_config_file, Config, ConfigError};
use tracker_common::mesh::{Meshes, Shard};
use tracker_common::runtime::{self, WorkerPlacement};
use tracker_common::signals::{BlockedSignals, Reloadable, SIGHUP};
use tracker_common::swarm::{StoreLimits, SwarmStore};
use tracker_http::server::HttpService;
use tracker_http::tls::{self, SharedTlsConfig};
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
    /// reverse proxy (e.g. X-Forwarded-For).
    #[arg(long = "real-ip-header", value_name = "NAME")]
    real_ip_header: Option<String>,
}

/// What one worker serves: its own socket for every address.
#[derive(Default)]
struct WorkerSockets {
    udp: Vec<UdpSocket>,
    http: Vec<TcpListener>,
    https: Vec<TcpListener>,
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
    // Before any worker starts: contained panics are logged sparingly.
    tracker_common::contain::install_panic_hook();
    match run(config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            error!("{e}");
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
        runtime::parse_cpu_list(cpus).map_err(|e| ConfigError::new(format!("--cpus: {e}")))?;
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

fn run(config: Config) -> Result<(), String> {
    let allowed = runtime::allowed_cpus()?;
    let requested = match config.runtime.cpus.trim() {
        "" => None,
        list => Some(runtime::parse_cpu_list(list)?),
    };
    let placements = runtime::plan_workers(
        config.runtime.workers,
        requested.as_deref(),
        &allowed,
        config.runtime.pin,
    )?;
    let workers = placements.len();
    // Before any other thread starts, so that every thread inherits the mask
    // and only the signal thread ever takes SIGHUP.
    let signals =
        BlockedSignals::block(&[SIGHUP]).map_err(|e| format!("cannot block SIGHUP: {e}"))?;
    // Certificate problems first: they are the user's to fix, and a clear
    // message beats a bound port.
    let tls = tls_config(&config)?;
    let sockets = bind_all(&config, workers)?;
    let secret = match config.udp_secret() {
        Some(secret) => secret,
        None => random_bytes()?,
    };
    log_start(&config, &placements, &sockets);
    spawn_signal_handler(signals, &config, tls.clone())?;

    let meshes = Meshes::new(workers, config.runtime.channel_capacity);
    let sockets = Arc::new(Mutex::new(sockets));
    let seed = u64::from_le_bytes(random_bytes::<8>()?);
    runtime::run_workers(placements, move |index| {
        let config = config.clone();
        let meshes = meshes.clone();
        let sockets = std::mem::take(&mut sockets.lock().expect("not poisoned")[index]);
        let tls = tls.clone();
        worker(
            index,
            config,
            meshes,
            sockets,
            tls,
            secret,
            seed ^ index as u64,
        )
    })
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

/// Starts the thread that takes SIGHUP: it reloads the TLS certificate and
/// key (new connections get them; a bad pair is reported and the old one kept).
fn spawn_signal_handler(
    signals: BlockedSignals,
    config: &Config,
    tls: Option<SharedTlsConfig>,
) -> Result<(), String> {
    let files = config
        .http
        .tls_files()
        .map(|(cert, key)| (cert.to_path_buf(), key.to_path_buf()));
    signals
        .spawn_handler(move |signal| {
            if signal == SIGHUP {
                match (&tls, &files) {
                    (Some(shared), Some((cert, key))) => match tls::load_pem_files(cert, key) {
                        Ok(loaded) => {
                            shared.store(Arc::new(loaded.config));
                            info!(
                                "SIGHUP: reloaded HTTPS certificate {} (SHA-256 {})",
                                cert.display(),
                                loaded.fingerprint
                            );
                        }
                        Err(e) => warn!("SIGHUP: keeping the old HTTPS certificate: {e}"),
                    },
                    _ => info!("SIGHUP: no certificate files configured, nothing to reload"),
                }
            }
            ControlFlow::Continue(())
        })
        .map(drop)
        .map_err(|e| format!("cannot start the signal thread: {e}"))
}

/// One worker: its shard of the swarms, the clean-up, and its sockets.
async fn worker(
    index: usize,
    config: Config,
    meshes: Meshes,
    sockets: WorkerSockets,
    tls: Option<SharedTlsConfig>,
    secret: [u8; 16],
    seed: u64,
) -> Result<(), String> {
    let limits = StoreLimits {
        peer_timeout_secs: config.swarm.peer_timeout_secs,
        max_torrents: config.swarm.max_torrents_per_worker,
        max_peers_per_torrent: config.swarm.max_peers_per_torrent,
        max_peers: config.swarm.max_peers_per_worker,
    };
    let shard = Shard::join(
        index,
        meshes,
        SwarmStore::new(limits, seed),
        config.runtime.max_forwarded,
    )
    .await?;
    let period = Duration::from_secs(config.swarm.cleanup_interval_secs.into());
    glommio::spawn_local(shard.clone().clean_forever(period)).detach();

    let udp = UdpService::new(
        shard.clone(),
        ConnectionCookies::new(secret),
        config.swarm.clone(),
        &config.udp,
    );
    let http = HttpService::new(shard, config.swarm.clone(), &config.http, tls);
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
    // Servers run until they fail; the first failure ends the worker, and so
    // the process.
    runtime::first_to_end(servers).await
}

/// Binds every address once per worker, before any worker starts, so that a
/// port in use is a clear start-up error. An address with port 0 gets its port
/// from the first bind, so that all workers share it.
fn bind_all(config: &Config, workers: usize) -> Result<Vec<WorkerSockets>, String> {
    let mut per_worker: Vec<WorkerSockets> =
        (0..workers).map(|_| WorkerSockets::default()).collect();
    let recv_buffer = config.udp.recv_buffer_bytes;
    bind_each(
        &config.udp.listen,
        "UDP",
        "--udp",
        &mut per_worker,
        |addr| tracker_udp::socket::bind_reuseport(addr, recv_buffer),
        |s| &mut s.udp,
    )?;
    bind_each(
        &config.http.listen,
        "HTTP",
        "--http",
        &mut per_worker,
        tracker_http::server::bind_reuseport,
        |s| &mut s.http,
    )?;
    bind_each(
        &config.http.https_listen,
        "HTTPS",
        "--https",
        &mut per_worker,
        tracker_http::server::bind_reuseport,
        |s| &mut s.https,
    )?;
    Ok(per_worker)
}

/// Binds each of `addrs` once for every worker with `bind`, into the list
/// `slot` picks.
fn bind_each<S: LocalAddr>(
    addrs: &[SocketAddr],
    protocol: &str,
    flag: &str,
    per_worker: &mut [WorkerSockets],
    bind: impl Fn(SocketAddr) -> std::io::Result<S>,
    slot: impl Fn(&mut WorkerSockets) -> &mut Vec<S>,
) -> Result<(), String> {
    for &addr in addrs {
        let mut addr = addr;
        for sockets in per_worker.iter_mut() {
            let socket = bind(addr).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    format!("cannot bind {protocol} {addr}: the port is in use by another program; stop it or choose another address with {flag}")
                } else {
                    format!("cannot bind {protocol} {addr}: {e}")
                }
            })?;
            addr = socket.local_addr().map_err(|e| e.to_string())?;
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

fn is_root() -> bool {
    // SAFETY: geteuid has no preconditions.
    unsafe { libc::geteuid() == 0 }
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
            format!("pinned to CPUs {}", runtime::format_cpu_list(&cpus))
        }
        Some(WorkerPlacement::Unpinned(cpus)) => {
            format!("unpinned on CPUs {}", runtime::format_cpu_list(cpus))
        }
        None => String::new(),
    };
    info!("starting {} workers, {placement}", placements.len());
    let workers = placements.len() as u64;
    match runtime::memlock_limit() {
        // io_uring does not charge root's registrations to the limit.
        Some(limit) if limit < workers * runtime::MEMLOCK_PER_WORKER && !is_root() => warn!(
            "locked-memory limit {} KiB is below the ~{} KiB that {workers} workers register; \
             workers may fail to start: raise it (LimitMEMLOCK= in the systemd unit, \
             memlock in limits.conf) or run fewer workers",
            limit >> 10,
            (workers * runtime::MEMLOCK_PER_WORKER) >> 10
        ),
        Some(limit) => info!(
            "locked-memory limit {} KiB, enough for {} workers",
            limit >> 10,
            limit / runtime::MEMLOCK_PER_WORKER
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
    }
    if let Some(header) = config.http.real_ip_header() {
        info!("HTTP clients' addresses are taken from the {header} header");
    }
    if config.udp.connection_secret.is_empty() {
        info!("UDP connection ids use a random secret: they do not survive a restart");
    }
}
