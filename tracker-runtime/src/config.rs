//! The tracker's configuration: types with every default in code, validation
//! that names the offending key, and the commented default file that
//! `tracker --print-config` prints.

use crate::access::{AccessMode, ListSource};
use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;
use tracker_proto::IpNetwork;

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub runtime: RuntimeConfig,
    pub log: LogConfig,
    pub swarm: SwarmConfig,
    pub udp: UdpConfig,
    pub http: HttpConfig,
    pub privileges: PrivilegesConfig,
    pub metrics: MetricsConfig,
    pub access: AccessConfig,
    pub state: StateConfig,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Worker executors, one per CPU; 0 means one for every CPU in `cpus`.
    pub workers: usize,
    /// CPUs to run on, as a list such as "0-3,6"; empty means every CPU this
    /// process may use.
    pub cpus: String,
    /// Pin each worker to its own CPU (true) or let the kernel place them.
    pub pin: bool,
    /// Messages each pair of workers can have queued in each direction before
    /// the sender waits (back-pressure).
    pub channel_capacity: usize,
    /// Requests a worker may have handed to other workers and not yet had
    /// answered; past it, further UDP requests for other shards are dropped
    /// (the announces of one receive batch for one owner go, or are
    /// dropped, together).
    pub max_forwarded: usize,
    /// Microseconds a worker that runs out of work keeps polling for more
    /// before it sleeps (0: it sleeps at once). Waking from sleep costs
    /// latency, most on VMs whose idle vCPUs halt; polling spends the idle
    /// CPU instead.
    pub busy_poll_us: u32,
    /// Seconds a SIGHUP reload may spend reading each of its files (the
    /// access list, the certificate and key); past it, the old one is kept.
    pub reload_timeout_secs: u32,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Log level (error, warn, info, debug, trace) or a tracing filter; the
    /// RUST_LOG environment variable overrides it.
    pub level: String,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct SwarmConfig {
    /// Seconds between announces that the tracker asks clients for.
    pub announce_interval_secs: u32,
    /// Seconds after its last announce that a peer is dropped.
    pub peer_timeout_secs: u32,
    /// Seconds for one pass of the clean-up over every torrent of a worker (it
    /// cleans a small segment at a time, spread over this period).
    pub cleanup_interval_secs: u32,
    /// Peers returned when a client does not say how many it wants.
    pub default_numwant: u32,
    /// The most peers returned in one announce answer (UDP is further capped at
    /// what fits one datagram: 200 IPv4 or 66 IPv6 peers).
    pub max_numwant: u32,
    /// Torrents each worker holds at most; announces for new torrents past it
    /// are refused with an error.
    pub max_torrents_per_worker: usize,
    /// Peers each torrent holds at most; new peers past it are answered but not
    /// stored.
    pub max_peers_per_torrent: usize,
    /// Peers each worker holds at most, over all its torrents; new peers past
    /// it are answered but not stored (and create no torrent).
    pub max_peers_per_worker: usize,
    /// Peers each torrent holds at most from one IP address (on different
    /// ports); new ones past it are answered but not stored. 0 turns the
    /// limit off.
    pub max_peers_per_address_per_torrent: usize,
    /// Torrents one client address (an IPv6 client by its /64) may create
    /// per minute on each worker; announces that would create more get an
    /// error. 0 turns the budget off.
    pub new_torrents_per_address_per_minute: u32,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct UdpConfig {
    /// Addresses to serve the UDP tracker on; every worker binds each of them
    /// with SO_REUSEPORT. An empty list turns UDP off.
    pub listen: Vec<SocketAddr>,
    /// 32 hex digits keying the connection ids; empty means random at start.
    /// Instances that share it accept each other's connection ids.
    pub connection_secret: String,
    /// The most info-hashes in one scrape (at most 74 fit one answer datagram).
    pub max_scrape_hashes: usize,
    /// Receive buffer asked for on each socket, in bytes (the kernel caps it at
    /// net.core.rmem_max).
    pub recv_buffer_bytes: usize,
    /// Connect requests answered per second from one IP address, by each
    /// worker; more are dropped. 0 turns the limit off.
    pub max_connects_per_ip_per_sec: u32,
    /// Slots of the per-worker table that tracks the connect limit (addresses
    /// hash into it; colliding ones share a budget). Fixed memory: 8 bytes a
    /// slot, allocated only when the limit is on.
    pub connect_limit_slots: usize,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Addresses to serve the plain HTTP tracker on; every worker binds each of
    /// them with SO_REUSEPORT. An empty list turns plain HTTP off.
    pub listen: Vec<SocketAddr>,
    /// Addresses to serve the HTTPS tracker on, like `listen`. An empty list
    /// turns HTTPS off.
    pub https_listen: Vec<SocketAddr>,
    /// PEM file with the certificate chain for HTTPS, leaf first. Empty (with
    /// `tls_key_file` empty too) serves a self-signed certificate made at start.
    pub tls_cert_file: String,
    /// PEM file with the private key of the certificate (PKCS#8, PKCS#1 or
    /// SEC1). Both files are read again on SIGHUP.
    pub tls_key_file: String,
    /// Open connections each worker serves at most (HTTP and HTTPS together).
    /// When all are taken, the one idle the longest is closed to make room; a
    /// new connection is refused only when none is idle.
    pub max_connections_per_worker: usize,
    /// Open connections each worker serves at most from one client address
    /// (an IPv6 client by its /64); further ones are closed at once. Trusted
    /// proxies are not capped.
    pub max_connections_per_address: usize,
    /// Seconds a connection may wait for the first byte of a request: after
    /// it is accepted (or its TLS handshake ends), and after each answer on a
    /// kept-alive connection. Then it is closed.
    pub idle_timeout_secs: u32,
    /// Seconds a request head may take to arrive whole, counted from its
    /// first byte (or from the previous answer, when the client had sent part
    /// of it already), however slowly the bytes come. Then the connection is
    /// closed.
    pub request_timeout_secs: u32,
    /// Seconds the client may take to receive an answer whole (all the answers
    /// to the requests it pipelined, together). Then the connection is closed.
    pub write_timeout_secs: u32,
    /// Seconds a TLS handshake may take before the connection is closed.
    pub tls_handshake_timeout_secs: u32,
    /// The largest request head (request line and headers) accepted, in bytes;
    /// a larger one is answered with 431. A scrape of N fully percent-encoded
    /// info-hashes needs about 71·N bytes.
    pub max_request_head_bytes: usize,
    /// Requests served on one connection before the tracker closes it (the last
    /// answer says `Connection: close`).
    pub max_requests_per_connection: usize,
    /// The most info-hashes in one scrape; more get a failure reason.
    pub max_scrape_hashes: usize,
    /// A header set by a trusted reverse proxy (such as X-Forwarded-For) that
    /// holds the client's address, used instead of the connection's. Empty:
    /// use the connection's address. Needs `trusted_proxies`.
    pub real_ip_header: String,
    /// The proxies whose `real_ip_header` is believed: addresses or networks
    /// such as "10.0.0.0/8". A request from one of them without the header
    /// gets a failure reason; from anyone else the header is ignored (and
    /// counted) and the connection's address used.
    pub trusted_proxies: Vec<String>,
    /// Answer a scrape without info_hash with the counts of every torrent
    /// (BEP 48 "full scrape"), up to `full_scrape_max_torrents`.
    pub full_scrape: bool,
    /// The most torrents listed in one full scrape.
    pub full_scrape_max_torrents: usize,
}

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct PrivilegesConfig {
    /// The user to become once the ports are bound (started as root). Empty:
    /// stay who we are, which as root needs `allow_root`.
    pub user: String,
    /// The group to become; empty means the user's own group.
    pub group: String,
    /// A directory to chroot into before dropping to `user`; empty: none.
    /// Files read later (certificates and lists on SIGHUP, the state file on
    /// exit) are then looked up inside it.
    pub chroot: String,
    /// Serve as root when started as root with no `user`.
    pub allow_root: bool,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Addresses to serve Prometheus metrics on (`GET /metrics`, plain HTTP,
    /// no authentication), from worker 0. Empty turns the endpoint off.
    pub listen: Vec<SocketAddr>,
    /// Scrape connections served at once. When all are taken, the one that
    /// has waited longest without sending its request is closed to make room.
    pub max_connections: usize,
    /// Scrape connections served at once from one client address.
    pub max_connections_per_address: usize,
    /// Seconds a scrape connection may take, from accept to the last byte of
    /// the answer.
    pub timeout_secs: u32,
    /// The largest scrape request head accepted, in bytes.
    pub max_request_head_bytes: usize,
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    /// "off" serves every torrent; "allow" only those in `file`; "deny" all
    /// but those in `file`.
    pub mode: AccessMode,
    /// The list: one info-hash per line as 40 hex digits, `#` comments. Read
    /// at start and again on SIGHUP. Needed unless `mode` is "off".
    pub file: String,
    /// The largest list file read, in bytes; a larger one is refused.
    pub max_file_bytes: u64,
    /// Accept an allow list of no info-hashes (which serves nothing, and on
    /// reload drops every swarm); off, such a list is refused.
    pub allow_empty: bool,
}

impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            mode: AccessMode::Off,
            file: String::new(),
            max_file_bytes: 256 << 20,
            allow_empty: false,
        }
    }
}

impl AccessConfig {
    /// The list to read, unless access lists are off (validated).
    pub fn list(&self) -> Option<ListSource> {
        (self.mode != AccessMode::Off).then(|| ListSource {
            mode: self.mode,
            path: self.file.clone().into(),
            max_bytes: self.max_file_bytes,
            allow_empty: self.allow_empty,
        })
    }
}

#[derive(Clone, Debug, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// Where the swarms are saved on SIGTERM/SIGINT and loaded from at start;
    /// a relative path is taken from the working directory. Empty: nothing is
    /// saved or loaded.
    pub file: String,
    /// On SIGTERM/SIGINT, seconds that requests already taken get to be
    /// answered before the swarms are saved and the process exits.
    pub drain_timeout_secs: u32,
}

impl StateConfig {
    /// The state file, when one is configured.
    pub fn path(&self) -> Option<&Path> {
        Some(Path::new(&self.file)).filter(|_| !self.file.is_empty())
    }
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            file: "tracker.state".into(),
            drain_timeout_secs: 5,
        }
    }
}

/// The most `runtime.busy_poll_us`: a worker that has had no work for 10 ms
/// gains nothing more by polling.
const MAX_BUSY_POLL_US: u32 = 10_000;

/// The most torrents a worker, or peers a torrent, may be set to hold: the
/// store keeps their positions in 32 bits (see `swarm::slots`).
const MAX_HELD: usize = 1 << 31;

/// The most `state.drain_timeout_secs`: a stop that waits longer than this
/// for clients is stuck, and service managers give up sooner.
const MAX_DRAIN_TIMEOUT_SECS: u32 = 600;

impl HttpConfig {
    /// The certificate and key files, when both are configured (validated).
    pub fn tls_files(&self) -> Option<(&Path, &Path)> {
        if self.tls_cert_file.is_empty() {
            return None;
        }
        Some((
            Path::new(&self.tls_cert_file),
            Path::new(&self.tls_key_file),
        ))
    }

    /// The real-IP header's name, when one is configured.
    pub fn real_ip_header(&self) -> Option<&str> {
        Some(self.real_ip_header.as_str()).filter(|name| !name.is_empty())
    }

    /// The trusted proxies (validated: each entry parses).
    pub fn trusted_proxies(&self) -> Vec<IpNetwork> {
        self.trusted_proxies
            .iter()
            .filter_map(|net| net.parse().ok())
            .collect()
    }
}

impl SwarmConfig {
    /// Peers to return for a request that asked for `requested` (`None`: the
    /// client did not say), within `swarm.max_numwant` and the protocol's own
    /// cap.
    pub fn numwant(&self, requested: Option<u32>, protocol_cap: u32) -> u32 {
        requested
            .unwrap_or(self.default_numwant)
            .min(self.max_numwant)
            .min(protocol_cap)
    }
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            workers: 0,
            cpus: String::new(),
            pin: true,
            channel_capacity: 1024,
            max_forwarded: 4096,
            busy_poll_us: 0,
            reload_timeout_secs: 30,
        }
    }
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
        }
    }
}

impl Default for SwarmConfig {
    fn default() -> Self {
        SwarmConfig {
            announce_interval_secs: 1800,
            peer_timeout_secs: 2700,
            cleanup_interval_secs: 60,
            default_numwant: 50,
            max_numwant: 200,
            max_torrents_per_worker: 5_000_000,
            max_peers_per_torrent: 100_000,
            max_peers_per_worker: 20_000_000,
            max_peers_per_address_per_torrent: 32,
            new_torrents_per_address_per_minute: 600,
        }
    }
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            listen: vec![
                "0.0.0.0:6969".parse().expect("literal"),
                "[::]:6969".parse().expect("literal"),
            ],
            connection_secret: String::new(),
            max_scrape_hashes: 74,
            recv_buffer_bytes: 4 << 20,
            max_connects_per_ip_per_sec: 0,
            connect_limit_slots: 1 << 16,
        }
    }
}

impl Default for MetricsConfig {
    fn default() -> Self {
        MetricsConfig {
            listen: Vec::new(),
            max_connections: 4,
            max_connections_per_address: 2,
            timeout_secs: 10,
            max_request_head_bytes: 8 << 10,
        }
    }
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: vec![
                "0.0.0.0:6969".parse().expect("literal"),
                "[::]:6969".parse().expect("literal"),
            ],
            https_listen: vec![
                "0.0.0.0:6970".parse().expect("literal"),
                "[::]:6970".parse().expect("literal"),
            ],
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            max_connections_per_worker: 8192,
            max_connections_per_address: 128,
            idle_timeout_secs: 30,
            request_timeout_secs: 10,
            write_timeout_secs: 10,
            tls_handshake_timeout_secs: 10,
            max_request_head_bytes: 16 << 10,
            max_requests_per_connection: 1000,
            max_scrape_hashes: 128,
            real_ip_header: String::new(),
            trusted_proxies: Vec::new(),
            full_scrape: false,
            full_scrape_max_torrents: 1000,
        }
    }
}

/// A configuration problem, naming the key (and file) at fault.
#[derive(Debug)]
pub struct ConfigError(String);

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for ConfigError {}

impl ConfigError {
    pub fn new(msg: impl Into<String>) -> Self {
        ConfigError(msg.into())
    }

    fn key(key: &str, msg: impl fmt::Display) -> Self {
        ConfigError(format!("`{key}`: {msg}"))
    }
}

impl Config {
    /// Reads and validates a TOML file; the error names the file and the key.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            ConfigError::new(format!("cannot read config file {}: {e}", path.display()))
        })?;
        let config: Config = toml::from_str(&text).map_err(|e| {
            ConfigError::new(format!(
                "config file {}: {}",
                path.display(),
                e.to_string().trim_end()
            ))
        })?;
        config
            .validate()
            .map_err(|e| ConfigError::new(format!("config file {}: {e}", path.display())))?;
        Ok(config)
    }

    /// Checks the values that their types alone do not constrain.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let r = &self.runtime;
        if !r.cpus.trim().is_empty() {
            crate::workers::parse_cpu_list(&r.cpus)
                .map_err(|e| ConfigError::key("runtime.cpus", e))?;
        }
        positive("runtime.channel_capacity", r.channel_capacity)?;
        positive("runtime.max_forwarded", r.max_forwarded)?;
        at_most(
            "runtime.busy_poll_us",
            r.busy_poll_us as usize,
            MAX_BUSY_POLL_US as usize,
        )?;
        positive(
            "runtime.reload_timeout_secs",
            r.reload_timeout_secs as usize,
        )?;
        let s = &self.swarm;
        positive(
            "swarm.announce_interval_secs",
            s.announce_interval_secs as usize,
        )?;
        positive("swarm.peer_timeout_secs", s.peer_timeout_secs as usize)?;
        positive(
            "swarm.cleanup_interval_secs",
            s.cleanup_interval_secs as usize,
        )?;
        positive("swarm.max_torrents_per_worker", s.max_torrents_per_worker)?;
        positive("swarm.max_peers_per_torrent", s.max_peers_per_torrent)?;
        at_most(
            "swarm.max_torrents_per_worker",
            s.max_torrents_per_worker,
            MAX_HELD,
        )?;
        at_most(
            "swarm.max_peers_per_torrent",
            s.max_peers_per_torrent,
            MAX_HELD,
        )?;
        positive("swarm.max_peers_per_worker", s.max_peers_per_worker)?;

        if s.default_numwant > s.max_numwant {
            return Err(ConfigError::key(
                "swarm.default_numwant",
                format!(
                    "{} is more than swarm.max_numwant ({})",
                    s.default_numwant, s.max_numwant
                ),
            ));
        }
        let u = &self.udp;
        if !u.connection_secret.is_empty() {
            parse_secret(&u.connection_secret)
                .map_err(|e| ConfigError::key("udp.connection_secret", e))?;
        }
        if !(1..=74).contains(&u.max_scrape_hashes) {
            return Err(ConfigError::key(
                "udp.max_scrape_hashes",
                "must be 1 to 74 (what fits one datagram)",
            ));
        }
        if !(1..=MAX_CONNECT_LIMIT_SLOTS).contains(&u.connect_limit_slots) {
            return Err(ConfigError::key(
                "udp.connect_limit_slots",
                format!("must be 1 to {MAX_CONNECT_LIMIT_SLOTS}"),
            ));
        }
        let h = &self.http;
        positive(
            "http.max_connections_per_worker",
            h.max_connections_per_worker,
        )?;
        positive(
            "http.max_connections_per_address",
            h.max_connections_per_address,
        )?;
        positive("http.idle_timeout_secs", h.idle_timeout_secs as usize)?;
        positive("http.request_timeout_secs", h.request_timeout_secs as usize)?;
        positive("http.write_timeout_secs", h.write_timeout_secs as usize)?;
        positive(
            "http.tls_handshake_timeout_secs",
            h.tls_handshake_timeout_secs as usize,
        )?;
        if !(MIN_REQUEST_HEAD_BYTES..=MAX_REQUEST_HEAD_BYTES).contains(&h.max_request_head_bytes) {
            return Err(ConfigError::key(
                "http.max_request_head_bytes",
                format!("must be {MIN_REQUEST_HEAD_BYTES} to {MAX_REQUEST_HEAD_BYTES}"),
            ));
        }
        positive(
            "http.max_requests_per_connection",
            h.max_requests_per_connection,
        )?;
        positive("http.max_scrape_hashes", h.max_scrape_hashes)?;
        positive("http.full_scrape_max_torrents", h.full_scrape_max_torrents)?;
        match (h.tls_cert_file.is_empty(), h.tls_key_file.is_empty()) {
            (true, false) => {
                return Err(ConfigError::key(
                    "http.tls_cert_file",
                    "is needed with http.tls_key_file",
                ))
            }
            (false, true) => {
                return Err(ConfigError::key(
                    "http.tls_key_file",
                    "is needed with http.tls_cert_file",
                ))
            }
            _ => {}
        }
        if !h.real_ip_header.bytes().all(is_header_name_byte) {
            return Err(ConfigError::key(
                "http.real_ip_header",
                format!("`{}` is not an HTTP header name", h.real_ip_header),
            ));
        }
        for net in &h.trusted_proxies {
            net.parse::<IpNetwork>()
                .map_err(|e| ConfigError::key("http.trusted_proxies", e))?;
        }
        match (h.real_ip_header.is_empty(), h.trusted_proxies.is_empty()) {
            (false, true) => {
                return Err(ConfigError::key(
                    "http.trusted_proxies",
                    "is needed with http.real_ip_header (--trusted-proxy): name the proxies \
                     whose header is believed, or anyone can announce any address",
                ))
            }
            (true, false) => {
                return Err(ConfigError::key(
                    "http.trusted_proxies",
                    "has no effect without http.real_ip_header",
                ))
            }
            _ => {}
        }
        let p = &self.privileges;
        if p.user.is_empty() && !p.group.is_empty() {
            return Err(ConfigError::key(
                "privileges.group",
                "needs privileges.user",
            ));
        }
        if !p.chroot.is_empty() {
            if p.user.is_empty() {
                return Err(ConfigError::key(
                    "privileges.chroot",
                    "needs privileges.user (a chroot kept as root is no barrier)",
                ));
            }
            if !Path::new(&p.chroot).is_absolute() {
                return Err(ConfigError::key(
                    "privileges.chroot",
                    format!("`{}` is not an absolute path", p.chroot),
                ));
            }
        }
        let m = &self.metrics;
        positive("metrics.max_connections", m.max_connections)?;
        positive(
            "metrics.max_connections_per_address",
            m.max_connections_per_address,
        )?;
        positive("metrics.timeout_secs", m.timeout_secs as usize)?;
        if !(MIN_REQUEST_HEAD_BYTES..=MAX_REQUEST_HEAD_BYTES).contains(&m.max_request_head_bytes) {
            return Err(ConfigError::key(
                "metrics.max_request_head_bytes",
                format!("must be {MIN_REQUEST_HEAD_BYTES} to {MAX_REQUEST_HEAD_BYTES}"),
            ));
        }
        let a = &self.access;
        if a.mode != AccessMode::Off && a.file.is_empty() {
            return Err(ConfigError::key(
                "access.file",
                format!("is needed with access.mode = \"{}\"", a.mode.as_str()),
            ));
        }
        let st = &self.state;
        if st.file.ends_with('/') || st.file.contains('\0') {
            return Err(ConfigError::key(
                "state.file",
                format!("`{}` is not a file path", st.file),
            ));
        }
        at_most(
            "state.drain_timeout_secs",
            st.drain_timeout_secs as usize,
            MAX_DRAIN_TIMEOUT_SECS as usize,
        )?;
        Ok(())
    }

    /// The UDP connection secret from config, if one is set (validated already).
    pub fn udp_secret(&self) -> Option<[u8; 16]> {
        parse_secret(&self.udp.connection_secret).ok()
    }
}

/// Bounds of `http.max_request_head_bytes`: a request line with a few headers,
/// and a size past which a connection's buffer is a liability.
const MIN_REQUEST_HEAD_BYTES: usize = 512;
const MAX_REQUEST_HEAD_BYTES: usize = 1 << 20;
/// 128 MiB of table per worker at most.
const MAX_CONNECT_LIMIT_SLOTS: usize = 1 << 24;

/// A `tchar` of RFC 9110: what a header name is made of.
fn is_header_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

fn positive(key: &str, value: usize) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::key(key, "must be more than 0"));
    }
    Ok(())
}

fn at_most(key: &str, value: usize, max: usize) -> Result<(), ConfigError> {
    if value > max {
        return Err(ConfigError::key(key, format!("must be at most {max}")));
    }
    Ok(())
}

fn parse_secret(hex: &str) -> Result<[u8; 16], String> {
    let hex = hex.as_bytes();
    if hex.len() != 32 {
        return Err(format!("must be 32 hex digits, not {}", hex.len()));
    }
    tracker_proto::decode_hex(hex).ok_or_else(|| "must be hex digits".to_string())
}

/// The default configuration as a TOML file with a comment on every key.
///
/// The values come from `Config::default()`, so the file cannot drift from the
/// code; a test checks that it parses back to the defaults and has every key.
pub fn default_config_file() -> String {
    let c = Config::default();
    let list = |v: &[SocketAddr]| {
        let items: Vec<String> = v.iter().map(|a| format!("\"{a}\"")).collect();
        format!("[{}]", items.join(", "))
    };
    let strings = |v: &[String]| {
        let items: Vec<String> = v.iter().map(|a| format!("\"{a}\"")).collect();
        format!("[{}]", items.join(", "))
    };
    format!(
        r#"# Configuration of the tracker. Every key is optional: a missing key takes
# the value shown here. Command-line flags override the file.

[runtime]
# Worker executors, one per CPU; 0 means one for every CPU in `cpus`.
workers = {workers}
# CPUs to run on, as a list such as "0-3,6"; empty means every CPU this process
# may use.
cpus = "{cpus}"
# Pin each worker to its own CPU (true), or let the kernel place them (false).
pin = {pin}
# Messages each pair of workers can have queued in each direction before the
# sender waits (back-pressure).
channel_capacity = {channel_capacity}
# Requests a worker may have handed to other workers and not yet had answered;
# past it, further UDP requests for other shards are dropped (the announces of
# one receive batch for one owner go, or are dropped, together).
max_forwarded = {max_forwarded}
# Microseconds a worker that runs out of work keeps polling for more before it
# sleeps (0 to {max_busy_poll}; 0 sleeps at once). Waking from sleep costs
# latency, most on VMs whose idle vCPUs halt; polling spends the idle CPU
# instead, so a polling worker shows busy.
busy_poll_us = {busy_poll_us}
# Seconds a SIGHUP reload may spend reading each of its files (the access list,
# the certificate and key), on a thread of its own; past it (a hung network
# file system, say) the old one is kept. A stop is taken at any time.
reload_timeout_secs = {reload_timeout_secs}

[log]
# Log level (error, warn, info, debug, trace) or a tracing filter such as
# "info,tracker_udp=debug"; the RUST_LOG environment variable overrides it.
level = "{level}"

[swarm]
# Seconds between announces that the tracker asks clients for.
announce_interval_secs = {announce_interval_secs}
# Seconds after its last announce that a peer is dropped.
peer_timeout_secs = {peer_timeout_secs}
# Seconds for one clean-up pass over every torrent of a worker; it cleans a
# small segment at a time, spread over this period, so requests never stall.
cleanup_interval_secs = {cleanup_interval_secs}
# Peers returned when a client does not say how many it wants.
default_numwant = {default_numwant}
# The most peers returned in one announce answer. UDP is further capped at what
# fits one datagram: 200 IPv4 or 66 IPv6 peers.
max_numwant = {max_numwant}
# Torrents each worker holds at most (up to {max_held}); announces for new
# torrents past it get an error.
max_torrents_per_worker = {max_torrents_per_worker}
# Peers each torrent holds at most (up to {max_held}); new peers past it are
# answered, not stored.
max_peers_per_torrent = {max_peers_per_torrent}
# Peers each worker holds at most, over all its torrents; new peers past it are
# answered, not stored, and create no torrent. About 50 bytes per IPv4 peer.
max_peers_per_worker = {max_peers_per_worker}
# Peers each torrent holds at most from one IP address, on different ports;
# new ones past it are answered, not stored, so that one host cannot fill a
# swarm with itself. Clients behind one carrier-grade NAT share an address,
# but rarely more than a few of them share a torrent. Swarms of more than 32
# peers keep a count per address for it: about 11 bytes per address. 0 turns
# the limit (and the counts) off.
max_peers_per_address_per_torrent = {max_peers_per_address_per_torrent}
# Torrents one client address (an IPv6 client by its /64) may create per
# minute on each worker; announces that would create more get the error "too
# many new torrents from this address" and are retried by clients later. Only
# new torrents count: announces to torrents that exist never do, so a seedbox
# starting thousands of torrents (or many users behind one carrier-grade NAT)
# is held back only while it creates them. 0 turns the budget off.
new_torrents_per_address_per_minute = {new_torrents_per_address_per_minute}

[udp]
# Addresses to serve the UDP tracker (BEP 15) on; every worker binds each of
# them with SO_REUSEPORT. An empty list turns UDP off.
listen = {listen}
# 32 hex digits keying the connection ids; empty means random at every start.
# Instances that share it accept each other's connection ids.
connection_secret = "{connection_secret}"
# The most info-hashes in one scrape (at most 74 fit one answer datagram).
max_scrape_hashes = {max_scrape_hashes}
# Receive buffer asked for on each socket, in bytes; the kernel caps it at
# net.core.rmem_max (see deploy/sysctl.conf).
recv_buffer_bytes = {recv_buffer_bytes}
# Connect requests answered per second from one IP address (an IPv6 client by
# its /64), by each worker; more are dropped without an answer. 0 turns the limit off. SO_REUSEPORT may
# spread one address's sockets over several workers, each with its own budget.
max_connects_per_ip_per_sec = {max_connects_per_ip_per_sec}
# Slots of each worker's connect-limit table (1 to {max_slots}); addresses hash
# into it and colliding ones share a budget. 8 bytes a slot, only when the
# limit is on.
connect_limit_slots = {connect_limit_slots}

[http]
# Addresses to serve the plain HTTP tracker (BEP 3, 7, 23, 48) on; every worker
# binds each of them with SO_REUSEPORT. An empty list turns plain HTTP off.
listen = {http_listen}
# Addresses to serve the HTTPS tracker on, like `listen`. An empty list turns
# HTTPS off.
https_listen = {https_listen}
# PEM file with the certificate chain for HTTPS, leaf first. Empty (and
# tls_key_file empty) serves a self-signed certificate made at every start.
tls_cert_file = "{tls_cert_file}"
# PEM file with the certificate's private key (PKCS#8, PKCS#1 or SEC1). Both
# files are read again on SIGHUP: new connections get the new certificate, and
# a bad one is logged and the old one kept.
tls_key_file = "{tls_key_file}"
# Open connections each worker serves at most (HTTP and HTTPS together). When
# all are taken, the one idle the longest is closed to make room for a new one;
# a new one is refused only when every connection has a request under way.
# Each takes a file descriptor: see RLIMIT_NOFILE in the README.
max_connections_per_worker = {max_connections_per_worker}
# Open connections each worker serves at most from one client address (an IPv6
# client counts by its /64); further ones are closed at once, so that no
# address takes every slot. Trusted proxies (trusted_proxies) are not capped.
# Clients behind one carrier-grade NAT share an address, but each holds a
# connection only for the moment of an announce.
max_connections_per_address = {max_connections_per_address}
# Seconds a connection may wait for the first byte of a request, after it is
# accepted (or its TLS handshake ends) and after each answer on a kept-alive
# connection; then it is closed.
idle_timeout_secs = {idle_timeout_secs}
# Seconds a request head may take to arrive whole, from its first byte (or
# from the previous answer, when the client had sent part of it already),
# however slowly the bytes come; then the connection is closed.
request_timeout_secs = {request_timeout_secs}
# Seconds a client may take to receive an answer whole (the answers to all
# the requests it pipelined, together), however slowly it reads; then the
# connection is closed.
write_timeout_secs = {write_timeout_secs}
# Seconds a TLS handshake may take before the connection is closed.
tls_handshake_timeout_secs = {tls_handshake_timeout_secs}
# The largest request head (request line and headers) accepted, in bytes
# ({min_head} to {max_head}); larger ones get 431. A scrape of N fully
# percent-encoded info-hashes needs about 71 * N bytes.
max_request_head_bytes = {max_request_head_bytes}
# Requests served on one keep-alive connection before the tracker closes it.
max_requests_per_connection = {max_requests_per_connection}
# The most info-hashes in one scrape; more get a failure reason.
max_scrape_hashes = {http_max_scrape_hashes}
# A header set by a trusted reverse proxy (such as "X-Forwarded-For") holding
# the client's address, used instead of the connection's; its right-most
# address counts. Empty: use the connection's address. Needs trusted_proxies.
real_ip_header = "{real_ip_header}"
# The proxies whose real_ip_header is believed, as addresses or networks
# (["127.0.0.1", "10.0.0.0/8", "2001:db8::/32"]). From them a request without
# the header gets a failure reason; from anyone else the header is ignored
# (and counted) and the connection's address used, so that no client can
# announce another host's address. The tracker refuses to start with a
# real_ip_header and no trusted proxies. Proxies are not capped by
# max_connections_per_address.
trusted_proxies = {trusted_proxies}
# Answer a scrape without info_hash with the counts of every torrent (a "full
# scrape"), up to full_scrape_max_torrents of them.
full_scrape = {full_scrape}
# The most torrents listed in one full scrape.
full_scrape_max_torrents = {full_scrape_max_torrents}

[privileges]
# The user to become once the ports are bound, when started as root (so ports
# below 1024 need no capabilities). Empty: stay who we are; as root that needs
# allow_root.
user = "{user}"
# The group to become; empty means the user's own group.
group = "{group}"
# A directory to chroot into before becoming `user`; empty: none. Files read
# later (certificates on SIGHUP, the state file on exit) are then looked up
# inside it.
chroot = "{chroot}"
# Serve as root when started as root with no user set. Off, the tracker refuses.
allow_root = {allow_root}

[metrics]
# Addresses to serve Prometheus metrics on, e.g. ["127.0.0.1:9100"]: GET
# /metrics over plain HTTP, served by worker 0. Empty turns it off. It has no
# authentication: keep it on loopback or a private network, never public.
listen = {metrics_listen}
# Scrape connections served at once. When all are taken, the one that has
# waited longest without sending its request is closed to make room.
max_connections = {metrics_max_connections}
# Scrape connections served at once from one client address.
max_connections_per_address = {metrics_max_connections_per_address}
# Seconds a scrape connection may take, from accept to the end of the answer.
timeout_secs = {metrics_timeout_secs}
# The largest scrape request head accepted, in bytes ({min_head} to {max_head}).
max_request_head_bytes = {metrics_max_request_head_bytes}

[access]
# Which torrents are served: "off" (all of them), "allow" (only those listed in
# `file`) or "deny" (all but those listed). Announces for other torrents get
# the error "torrent not allowed", and scrapes of them get zeros.
mode = "{access_mode}"
# The list: one info-hash per line as 40 hex digits, `#` starts a comment.
# Needed unless mode is "off". Read at start (a bad list stops the tracker)
# and again on SIGHUP (a bad list is logged and the old one kept); torrents
# that the new list refuses are dropped. Replace it atomically (write a new
# file, then rename it over the old): a list read while it is being written
# may lose lines, and one cut in a line is refused. It must be a regular file.
file = "{access_file}"
# The largest list file read, in bytes (about 41 per info-hash); a larger one
# is refused.
max_file_bytes = {access_max_file_bytes}
# Accept an allow list that lists no info-hash. Off, such a list (an emptied
# or truncated file, say) is refused, at start and on reload, as it would
# serve no torrent and drop every swarm.
allow_empty = {access_allow_empty}

[state]
# On SIGTERM or SIGINT the tracker stops taking requests, answers those it
# took, saves every swarm and completed count to this file (replaced
# atomically) and exits 0; at start it loads the file, leaving out peers that
# expired meanwhile. A missing or damaged file is reported and the tracker
# starts empty. A relative path is taken from the working directory; --state
# overrides it. Empty: nothing is saved or loaded.
file = "{state_file}"
# Seconds that requests already taken get to be answered (0 to
# {max_drain}) before the swarms are saved; a second SIGTERM or SIGINT exits
# at once without saving.
drain_timeout_secs = {drain_timeout_secs}
"#,
        workers = c.runtime.workers,
        cpus = c.runtime.cpus,
        pin = c.runtime.pin,
        channel_capacity = c.runtime.channel_capacity,
        max_forwarded = c.runtime.max_forwarded,
        busy_poll_us = c.runtime.busy_poll_us,
        reload_timeout_secs = c.runtime.reload_timeout_secs,
        max_busy_poll = MAX_BUSY_POLL_US,
        max_held = MAX_HELD,
        level = c.log.level,
        announce_interval_secs = c.swarm.announce_interval_secs,
        peer_timeout_secs = c.swarm.peer_timeout_secs,
        cleanup_interval_secs = c.swarm.cleanup_interval_secs,
        default_numwant = c.swarm.default_numwant,
        max_numwant = c.swarm.max_numwant,
        max_torrents_per_worker = c.swarm.max_torrents_per_worker,
        max_peers_per_torrent = c.swarm.max_peers_per_torrent,
        max_peers_per_worker = c.swarm.max_peers_per_worker,
        max_peers_per_address_per_torrent = c.swarm.max_peers_per_address_per_torrent,
        new_torrents_per_address_per_minute = c.swarm.new_torrents_per_address_per_minute,
        listen = list(&c.udp.listen),
        connection_secret = c.udp.connection_secret,
        max_scrape_hashes = c.udp.max_scrape_hashes,
        recv_buffer_bytes = c.udp.recv_buffer_bytes,
        max_connects_per_ip_per_sec = c.udp.max_connects_per_ip_per_sec,
        max_slots = MAX_CONNECT_LIMIT_SLOTS,
        connect_limit_slots = c.udp.connect_limit_slots,
        http_listen = list(&c.http.listen),
        https_listen = list(&c.http.https_listen),
        tls_cert_file = c.http.tls_cert_file,
        tls_key_file = c.http.tls_key_file,
        max_connections_per_worker = c.http.max_connections_per_worker,
        max_connections_per_address = c.http.max_connections_per_address,
        idle_timeout_secs = c.http.idle_timeout_secs,
        request_timeout_secs = c.http.request_timeout_secs,
        write_timeout_secs = c.http.write_timeout_secs,
        tls_handshake_timeout_secs = c.http.tls_handshake_timeout_secs,
        min_head = MIN_REQUEST_HEAD_BYTES,
        max_head = MAX_REQUEST_HEAD_BYTES,
        max_request_head_bytes = c.http.max_request_head_bytes,
        max_requests_per_connection = c.http.max_requests_per_connection,
        http_max_scrape_hashes = c.http.max_scrape_hashes,
        real_ip_header = c.http.real_ip_header,
        trusted_proxies = strings(&c.http.trusted_proxies),
        full_scrape = c.http.full_scrape,
        full_scrape_max_torrents = c.http.full_scrape_max_torrents,
        user = c.privileges.user,
        group = c.privileges.group,
        chroot = c.privileges.chroot,
        allow_root = c.privileges.allow_root,
        metrics_listen = list(&c.metrics.listen),
        metrics_max_connections = c.metrics.max_connections,
        metrics_max_connections_per_address = c.metrics.max_connections_per_address,
        metrics_timeout_secs = c.metrics.timeout_secs,
        metrics_max_request_head_bytes = c.metrics.max_request_head_bytes,
        access_mode = c.access.mode.as_str(),
        access_file = c.access.file,
        access_max_file_bytes = c.access.max_file_bytes,
        access_allow_empty = c.access.allow_empty,
        state_file = c.state.file,
        max_drain = MAX_DRAIN_TIMEOUT_SECS,
        drain_timeout_secs = c.state.drain_timeout_secs,
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(value: &toml::Value, prefix: &str, out: &mut Vec<String>) {
        if let toml::Value::Table(t) = value {
            for (k, v) in t {
                let path = if prefix.is_empty() {
                    k.clone()
                } else {
                    format!("{prefix}.{k}")
                };
                if v.is_table() {
                    keys(v, &path, out);
                } else {
                    out.push(path);
                }
            }
        }
    }

    #[test]
    fn default_file_parses_to_the_defaults_and_has_every_key_commented() {
        let text = default_config_file();
        let parsed: Config = toml::from_str(&text).unwrap();
        assert_eq!(parsed, Config::default());
        let mut printed = Vec::new();
        keys(&toml::from_str(&text).unwrap(), "", &mut printed);
        let mut all = Vec::new();
        keys(
            &toml::Value::try_from(Config::default()).unwrap(),
            "",
            &mut all,
        );
        printed.sort();
        all.sort();
        assert_eq!(printed, all);
        // Every key line is directly preceded by a comment line.
        let lines: Vec<&str> = text.lines().collect();
        for (i, line) in lines.iter().enumerate() {
            if line.contains(" = ") {
                assert!(lines[i - 1].starts_with('#'), "no comment above `{line}`");
            }
        }
    }

    #[test]
    fn unknown_key_is_named() {
        let err = toml::from_str::<Config>("[udp]\nlisten_on = []\n").unwrap_err();
        assert!(err.to_string().contains("listen_on"), "{err}");
    }

    #[test]
    fn bad_values_name_their_key() {
        let mut c = Config::default();
        c.udp.connection_secret = "xyz".into();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("udp.connection_secret"));
        let mut c = Config::default();
        c.runtime.cpus = "3-1".into();
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("runtime.cpus"));
        let mut c = Config::default();
        c.swarm.default_numwant = 500;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("swarm.default_numwant"));
        let mut c = Config::default();
        c.udp.max_scrape_hashes = 0;
        assert!(c
            .validate()
            .unwrap_err()
            .to_string()
            .contains("udp.max_scrape_hashes"));
        for (edit, key) in [
            (
                (|c: &mut Config| c.http.tls_key_file = "k.pem".into()) as fn(&mut Config),
                "http.tls_cert_file",
            ),
            (
                |c: &mut Config| c.http.tls_cert_file = "c.pem".into(),
                "http.tls_key_file",
            ),
            (
                |c: &mut Config| {
                    c.http.real_ip_header = "X Forwarded".into();
                    c.http.trusted_proxies = vec!["127.0.0.1".into()];
                },
                "http.real_ip_header",
            ),
            (
                |c: &mut Config| c.http.real_ip_header = "X-Real-IP".into(),
                "http.trusted_proxies",
            ),
            (
                |c: &mut Config| c.http.trusted_proxies = vec!["127.0.0.1".into()],
                "http.trusted_proxies",
            ),
            (
                |c: &mut Config| {
                    c.http.real_ip_header = "X-Real-IP".into();
                    c.http.trusted_proxies = vec!["10.0.0.0/33".into()];
                },
                "http.trusted_proxies",
            ),
            (
                |c: &mut Config| c.http.max_request_head_bytes = 100,
                "http.max_request_head_bytes",
            ),
            (
                |c: &mut Config| c.http.idle_timeout_secs = 0,
                "http.idle_timeout_secs",
            ),
            (
                |c: &mut Config| c.http.max_requests_per_connection = 0,
                "http.max_requests_per_connection",
            ),
            (
                |c: &mut Config| c.privileges.group = "nogroup".into(),
                "privileges.group",
            ),
            (
                |c: &mut Config| c.privileges.chroot = "/var/empty".into(),
                "privileges.chroot",
            ),
            (
                |c: &mut Config| {
                    c.privileges.user = "nobody".into();
                    c.privileges.chroot = "relative".into();
                },
                "privileges.chroot",
            ),
            (
                |c: &mut Config| c.metrics.max_connections = 0,
                "metrics.max_connections",
            ),
            (
                |c: &mut Config| c.metrics.timeout_secs = 0,
                "metrics.timeout_secs",
            ),
            (
                |c: &mut Config| c.metrics.max_request_head_bytes = 10,
                "metrics.max_request_head_bytes",
            ),
            (
                |c: &mut Config| c.access.mode = AccessMode::Deny,
                "access.file",
            ),
            (
                |c: &mut Config| c.state.file = "/var/lib/tracker/".into(),
                "state.file",
            ),
            (
                |c: &mut Config| c.state.drain_timeout_secs = 601,
                "state.drain_timeout_secs",
            ),
            (
                |c: &mut Config| c.runtime.busy_poll_us = 10_001,
                "runtime.busy_poll_us",
            ),
            (
                |c: &mut Config| c.swarm.max_peers_per_worker = 0,
                "swarm.max_peers_per_worker",
            ),
            (
                |c: &mut Config| c.swarm.max_peers_per_torrent = (1 << 31) + 1,
                "swarm.max_peers_per_torrent",
            ),
            (
                |c: &mut Config| c.swarm.max_torrents_per_worker = (1 << 31) + 1,
                "swarm.max_torrents_per_worker",
            ),
            (
                |c: &mut Config| c.udp.connect_limit_slots = 0,
                "udp.connect_limit_slots",
            ),
        ] {
            let mut c = Config::default();
            edit(&mut c);
            let err = c.validate().unwrap_err().to_string();
            assert!(err.contains(key), "{key}: {err}");
        }
    }

    #[test]
    fn http_helpers() {
        let mut c = Config::default();
        assert_eq!(c.http.tls_files(), None);
        assert_eq!(c.http.real_ip_header(), None);
        c.http.tls_cert_file = "c.pem".into();
        c.http.tls_key_file = "k.pem".into();
        c.http.real_ip_header = "X-Real-IP".into();
        c.http.trusted_proxies = vec!["10.0.0.0/8".into(), "::1".into()];
        c.validate().unwrap();
        assert_eq!(c.http.trusted_proxies().len(), 2);
        assert_eq!(
            c.http.tls_files(),
            Some((Path::new("c.pem"), Path::new("k.pem")))
        );
        assert_eq!(c.http.real_ip_header(), Some("X-Real-IP"));
    }

    #[test]
    fn access_modes_parse_and_off_needs_no_file() {
        let c: Config = toml::from_str("[access]\nmode = \"allow\"\nfile = \"a.txt\"\n").unwrap();
        c.validate().unwrap();
        let list = c.access.list().unwrap();
        assert_eq!(
            (list.mode, list.path.as_path()),
            (AccessMode::Allow, Path::new("a.txt"))
        );
        assert_eq!(Config::default().access.list(), None);
        let err = toml::from_str::<Config>("[access]\nmode = \"block\"\n").unwrap_err();
        assert!(err.to_string().contains("mode"), "{err}");
    }

    #[test]
    fn the_state_file_is_on_by_default_and_empty_turns_it_off() {
        let mut c = Config::default();
        assert_eq!(c.state.path(), Some(Path::new("tracker.state")));
        c.state.file.clear();
        c.validate().unwrap();
        assert_eq!(c.state.path(), None);
    }

    #[test]
    fn secret_parses() {
        let mut c = Config::default();
        assert_eq!(c.udp_secret(), None);
        c.udp.connection_secret = "000102030405060708090a0b0c0d0e0f".into();
        c.validate().unwrap();
        assert_eq!(c.udp_secret().unwrap()[15], 15);
    }
}
