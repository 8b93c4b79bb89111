//! The `tracker` binary: reads the config and flags, binds the sockets, and
//! starts one worker per CPU. Wiring only; the work is in the crates.

use clap::Parser;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::rc::Rc;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tracing::{error, info};
use tracker_common::config::{default_config_file, Config, ConfigError};
use tracker_common::mesh::{Meshes, Shard};
use tracker_common::runtime::{self, WorkerPlacement};
use tracker_common::swarm::{StoreLimits, SwarmStore};
use tracker_udp::cookie::ConnectionCookies;
use tracker_udp::server::UdpService;

/// A thread-per-core BitTorrent tracker (UDP BEP 15) on io_uring.
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
    config.validate()?;
    if config.udp.listen.is_empty() {
        return Err(ConfigError::new("nothing to serve: `udp.listen` is empty"));
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
    let udp_sockets = bind_udp(&config, workers)?;
    let secret = match config.udp_secret() {
        Some(secret) => secret,
        None => random_bytes()?,
    };
    log_start(&config, &placements, &udp_sockets);

    let meshes = Meshes::new(workers, config.runtime.channel_capacity);
    let udp_sockets = Arc::new(Mutex::new(udp_sockets));
    let seed = u64::from_le_bytes(random_bytes::<8>()?);
    runtime::run_workers(placements, move |index| {
        let config = config.clone();
        let meshes = meshes.clone();
        let sockets = std::mem::take(&mut udp_sockets.lock().expect("not poisoned")[index]);
        worker(index, config, meshes, sockets, secret, seed ^ index as u64)
    })
}

/// One worker: its shard of the swarms, the clean-up, and its sockets.
async fn worker(
    index: usize,
    config: Config,
    meshes: Meshes,
    udp_sockets: Vec<std::net::UdpSocket>,
    secret: [u8; 16],
    seed: u64,
) -> Result<(), String> {
    let limits = StoreLimits {
        peer_timeout_secs: config.swarm.peer_timeout_secs,
        max_torrents: config.swarm.max_torrents_per_worker,
        max_peers_per_torrent: config.swarm.max_peers_per_torrent,
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
        shard,
        ConnectionCookies::new(secret),
        config.swarm.clone(),
        &config.udp,
    );
    let servers = udp_sockets
        .into_iter()
        .map(|socket| glommio::spawn_local(Rc::clone(&udp).serve(socket)))
        .collect();
    // Servers run until they fail; the first failure ends the worker, and so
    // the process.
    runtime::first_to_end(servers).await
}

/// Binds every UDP address once per worker. An address with port 0 gets its
/// port from the first bind, so that all workers share it.
fn bind_udp(config: &Config, workers: usize) -> Result<Vec<Vec<std::net::UdpSocket>>, String> {
    let mut per_worker: Vec<Vec<std::net::UdpSocket>> = (0..workers).map(|_| Vec::new()).collect();
    for &addr in &config.udp.listen {
        let mut addr = addr;
        for sockets in per_worker.iter_mut() {
            let socket = tracker_udp::socket::bind_reuseport(addr, config.udp.recv_buffer_bytes).map_err(|e| {
                if e.kind() == std::io::ErrorKind::AddrInUse {
                    format!("cannot bind UDP {addr}: the port is in use by another program; stop it or choose another address with --udp")
                } else {
                    format!("cannot bind UDP {addr}: {e}")
                }
            })?;
            addr = socket.local_addr().map_err(|e| e.to_string())?;
            sockets.push(socket);
        }
    }
    Ok(per_worker)
}

fn random_bytes<const N: usize>() -> Result<[u8; N], String> {
    use std::io::Read;
    let mut bytes = [0u8; N];
    std::fs::File::open("/dev/urandom")
        .and_then(|mut f| f.read_exact(&mut bytes))
        .map_err(|e| format!("cannot read /dev/urandom: {e}"))?;
    Ok(bytes)
}

fn log_start(config: &Config, placements: &[WorkerPlacement], udp: &[Vec<std::net::UdpSocket>]) {
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
    match runtime::memlock_limit() {
        Some(limit) => info!(
            "locked-memory limit {} KiB: glommio needs about {} KiB per worker",
            limit >> 10,
            runtime::MEMLOCK_PER_WORKER >> 10
        ),
        None => info!("locked-memory limit: unlimited"),
    }
    for socket in udp.first().into_iter().flatten() {
        if let Ok(addr) = socket.local_addr() {
            info!("serving UDP tracker on udp://{addr}/announce");
        }
    }
    if config.udp.connection_secret.is_empty() {
        info!("UDP connection ids use a random secret: they do not survive a restart");
    }
}
