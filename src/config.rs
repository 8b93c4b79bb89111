//! The whole configuration file: every crate's section under its table, and
//! the two sections only the binary reads (`[log]`, `[privileges]`).
//! `tracker --print-config` prints it with every key's comment, taken from
//! the fields' doc comments.

use std::path::Path;

use documented::{Documented, DocumentedFields};
use serde::{Deserialize, Serialize};
use tracker_http::config::{HttpConfig, MetricsConfig};
use tracker_runtime::config::{
    write_comment, write_section, AccessConfig, ConfigError, RuntimeConfig, StateConfig,
    SwarmConfig,
};
use tracker_runtime::private_config::PrivateConfig;
use tracker_udp::config::UdpConfig;
use tracker_ws::WebSocketConfig;

/// Configuration of the tracker. Every key is optional: a missing key takes
/// the value shown here. Command-line flags override the file.
#[derive(Clone, Debug, Default, PartialEq, Deserialize, Serialize, Documented)]
#[serde(default, deny_unknown_fields)]
pub struct Config {
    pub runtime: RuntimeConfig,
    pub log: LogConfig,
    pub swarm: SwarmConfig,
    pub udp: UdpConfig,
    pub http: HttpConfig,
    pub websocket: WebSocketConfig,
    pub privileges: PrivilegesConfig,
    pub metrics: MetricsConfig,
    pub access: AccessConfig,
    pub state: StateConfig,
    pub private: PrivateConfig,
}

/// Logging, to stderr.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct LogConfig {
    /// Log level (error, warn, info, debug, trace) or a tracing filter such as
    /// "info,tracker_udp=debug"; the RUST_LOG environment variable overrides
    /// it.
    pub level: String,
}

impl Default for LogConfig {
    fn default() -> Self {
        LogConfig {
            level: "info".into(),
        }
    }
}

/// Who the tracker serves as, when started as root.
#[derive(
    Clone, Debug, Default, PartialEq, Deserialize, Serialize, Documented, DocumentedFields,
)]
#[serde(default, deny_unknown_fields)]
pub struct PrivilegesConfig {
    /// The user to become once the ports are bound, when started as root (so
    /// ports below 1024 need no capabilities). Give it a user of its own,
    /// such as tracker, not one other programs share such as nobody: any
    /// process of that user could stop it, or remove its control socket.
    /// Empty: stay who we are; as root that needs allow_root.
    pub user: String,
    /// The group to become; empty means the user's own group.
    pub group: String,
    /// A directory to chroot into before becoming `user`; empty: none. Files
    /// read later (certificates on SIGHUP, the state file on exit) are then
    /// looked up inside it.
    pub chroot: String,
    /// Serve as root when started as root with no user set. Off, the tracker
    /// refuses.
    pub allow_root: bool,
}

impl PrivilegesConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.user.is_empty() && !self.group.is_empty() {
            return Err(ConfigError::key(
                "privileges.group",
                "needs privileges.user",
            ));
        }
        if !self.chroot.is_empty() {
            if self.user.is_empty() {
                return Err(ConfigError::key(
                    "privileges.chroot",
                    "needs privileges.user (a chroot kept as root is no barrier)",
                ));
            }
            if !Path::new(&self.chroot).is_absolute() {
                return Err(ConfigError::key(
                    "privileges.chroot",
                    format!("`{}` is not an absolute path", self.chroot),
                ));
            }
        }
        Ok(())
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

    /// Checks the values that their types alone do not constrain, section by
    /// section.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.runtime.validate()?;
        self.swarm.validate()?;
        self.udp.validate()?;
        self.http.validate()?;
        self.websocket.validate(self.private.enabled)?;
        self.privileges.validate()?;
        self.metrics.validate()?;
        self.access.validate()?;
        self.state.validate()?;
        self.private.validate()
    }

    /// The API's address: private mode's site API, or else the access
    /// list's, when one is configured.
    pub fn site_api_listen(&self) -> Vec<std::net::SocketAddr> {
        let listen = if self.private.enabled {
            &self.private.api_listen
        } else {
            &self.access.api_listen
        };
        listen.parse().into_iter().collect()
    }

    /// The UDP connection secret from config, if one is set (validated already).
    pub fn udp_secret(&self) -> Option<[u8; 16]> {
        self.udp.secret()
    }
}

/// The default configuration as a TOML file with a comment on every key:
/// the values come from `Config::default()` and the comments from the
/// fields' doc comments, so the file cannot drift from the code; a test
/// checks that it parses back to the defaults and has every key.
pub fn default_config_file() -> String {
    let c = Config::default();
    let mut out = String::new();
    write_comment(&mut out, Config::DOCS);
    let mut section = |name: &str, write: &dyn Fn(&mut String, &str)| {
        out.push('\n');
        write(&mut out, name);
    };
    section("runtime", &|out, name| write_section(out, name, &c.runtime));
    section("log", &|out, name| write_section(out, name, &c.log));
    section("swarm", &|out, name| write_section(out, name, &c.swarm));
    section("udp", &|out, name| write_section(out, name, &c.udp));
    section("udp.xdp", &|out, name| write_section(out, name, &c.udp.xdp));
    section("http", &|out, name| write_section(out, name, &c.http));
    section("websocket", &|out, name| {
        write_section(out, name, &c.websocket)
    });
    section("privileges", &|out, name| {
        write_section(out, name, &c.privileges)
    });
    section("metrics", &|out, name| write_section(out, name, &c.metrics));
    section("access", &|out, name| write_section(out, name, &c.access));
    section("state", &|out, name| write_section(out, name, &c.state));
    section("private", &|out, name| write_section(out, name, &c.private));
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use tracker_runtime::access::AccessMode;

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
            // A peer's expiry is 15 bits: these bound how far it may be
            // from the clock.
            (
                |c: &mut Config| c.swarm.peer_timeout_secs = 14_401,
                "swarm.peer_timeout_secs",
            ),
            (
                |c: &mut Config| c.swarm.cleanup_interval_secs = 3601,
                "swarm.cleanup_interval_secs",
            ),
            (
                |c: &mut Config| c.state.snapshot_interval_secs = 86_401,
                "state.snapshot_interval_secs",
            ),
            (
                |c: &mut Config| c.runtime.control_socket = "/run/tracker/".into(),
                "runtime.control_socket",
            ),
            (
                |c: &mut Config| c.runtime.handover_timeout_secs = 0,
                "runtime.handover_timeout_secs",
            ),
            (
                |c: &mut Config| c.runtime.handover_timeout_secs = 601,
                "runtime.handover_timeout_secs",
            ),
            (
                |c: &mut Config| c.swarm.max_peers_per_torrent = (1 << 24) - 1,
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
            (
                |c: &mut Config| {
                    c.udp.xdp.interfaces = vec!["eth0".into()];
                    c.udp.listen.clear();
                },
                "udp.xdp.interfaces",
            ),
            (
                |c: &mut Config| c.udp.xdp.interfaces = vec!["eth0".into(), "eth0".into()],
                "udp.xdp.interfaces",
            ),
            (
                |c: &mut Config| c.udp.xdp.interfaces = vec!["a/b".into()],
                "udp.xdp.interfaces",
            ),
            (
                |c: &mut Config| {
                    c.udp.xdp.interfaces = vec!["eth0".into()];
                    c.udp.xdp.queues = vec![1, 1];
                },
                "udp.xdp.queues",
            ),
            (
                |c: &mut Config| {
                    c.udp.xdp.interfaces = vec!["eth0".into()];
                    c.udp.xdp.frames = 100;
                },
                "udp.xdp.frames",
            ),
            (
                |c: &mut Config| {
                    c.udp.xdp.interfaces = vec!["eth0".into()];
                    c.udp.xdp.frame_size = 3000;
                },
                "udp.xdp.frame_size",
            ),
            (
                |c: &mut Config| {
                    c.udp.xdp.interfaces = vec!["eth0".into()];
                    c.udp.xdp.zero_copy = true;
                    c.udp.xdp.generic = true;
                },
                "udp.xdp.zero_copy",
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
