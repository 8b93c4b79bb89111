//! The tracker's configuration: types with every default in code, validation
//! that names the offending key, and the commented default file that
//! `tracker --print-config` prints.

use serde::{Deserialize, Serialize};
use std::fmt;
use std::net::SocketAddr;
use std::path::Path;

#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub runtime: RuntimeConfig,
    pub log: LogConfig,
    pub swarm: SwarmConfig,
    pub udp: UdpConfig,
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
    /// answered; past it, further UDP requests for other shards are dropped.
    pub max_forwarded: usize,
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
            crate::runtime::parse_cpu_list(&r.cpus)
                .map_err(|e| ConfigError::key("runtime.cpus", e))?;
        }
        positive("runtime.channel_capacity", r.channel_capacity)?;
        positive("runtime.max_forwarded", r.max_forwarded)?;
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
        Ok(())
    }

    /// The UDP connection secret from config, if one is set (validated already).
    pub fn udp_secret(&self) -> Option<[u8; 16]> {
        parse_secret(&self.udp.connection_secret).ok()
    }
}

fn positive(key: &str, value: usize) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::key(key, "must be more than 0"));
    }
    Ok(())
}

fn parse_secret(hex: &str) -> Result<[u8; 16], String> {
    let hex = hex.as_bytes();
    if hex.len() != 32 {
        return Err(format!("must be 32 hex digits, not {}", hex.len()));
    }
    let mut out = [0u8; 16];
    for (byte, pair) in out.iter_mut().zip(hex.chunks_exact(2)) {
        let text = std::str::from_utf8(pair).map_err(|_| "must be hex digits".to_string())?;
        *byte = u8::from_str_radix(text, 16).map_err(|_| format!("`{text}` is not hex"))?;
    }
    Ok(out)
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
# past it, further UDP requests for other shards are dropped.
max_forwarded = {max_forwarded}

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
# Torrents each worker holds at most; announces for new torrents past it get
# an error.
max_torrents_per_worker = {max_torrents_per_worker}
# Peers each torrent holds at most; new peers past it are answered, not stored.
max_peers_per_torrent = {max_peers_per_torrent}

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
# net.core.rmem_max (see deploy/sysctl).
recv_buffer_bytes = {recv_buffer_bytes}
"#,
        workers = c.runtime.workers,
        cpus = c.runtime.cpus,
        pin = c.runtime.pin,
        channel_capacity = c.runtime.channel_capacity,
        max_forwarded = c.runtime.max_forwarded,
        level = c.log.level,
        announce_interval_secs = c.swarm.announce_interval_secs,
        peer_timeout_secs = c.swarm.peer_timeout_secs,
        cleanup_interval_secs = c.swarm.cleanup_interval_secs,
        default_numwant = c.swarm.default_numwant,
        max_numwant = c.swarm.max_numwant,
        max_torrents_per_worker = c.swarm.max_torrents_per_worker,
        max_peers_per_torrent = c.swarm.max_peers_per_torrent,
        listen = list(&c.udp.listen),
        connection_secret = c.udp.connection_secret,
        max_scrape_hashes = c.udp.max_scrape_hashes,
        recv_buffer_bytes = c.udp.recv_buffer_bytes,
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
