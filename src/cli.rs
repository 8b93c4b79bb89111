//! The command line: its flags, and the config they override.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Parser;
use tracker_runtime::config::ConfigError;
use tracker_runtime::workers;

use crate::config::Config;

/// A thread-per-core BitTorrent tracker (UDP BEP 15, HTTP and HTTPS) on io_uring.
#[derive(Parser, Debug)]
#[command(name = "tracker", version, about)]
pub struct Cli {
    /// Read the configuration from this TOML file (see --print-config).
    #[arg(short = 'c', long = "config", value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Print the default configuration, with a comment on every key, and exit.
    #[arg(long)]
    pub print_config: bool,
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
    /// A network (or address) whose clients no limit per client counts, for a
    /// load test from one machine, e.g. 127.0.0.0/8 (repeatable; replaces
    /// runtime.exempt_networks). Never a network the Internet reaches.
    #[arg(long = "exempt-network", value_name = "NET")]
    exempt_networks: Vec<String>,
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
    /// Take the sockets and swarms of the tracker running with this config
    /// (through runtime.control_socket), which then exits: an upgrade
    /// without a gap. The same addresses and worker count are needed.
    #[arg(long)]
    pub take_over: bool,
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

/// The config file (or the defaults) with the command-line flags on top.
pub fn load_config(cli: &Cli) -> Result<Config, ConfigError> {
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
    if !cli.exempt_networks.is_empty() {
        config.runtime.exempt_networks = cli.exempt_networks.clone();
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
