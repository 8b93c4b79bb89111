//! The `[http]` and `[metrics]` sections of the config.

use std::net::{Ipv4Addr, Ipv6Addr, SocketAddr};
use std::path::Path;

use documented::{Documented, DocumentedFields};
use serde::{Deserialize, Serialize};
use tracker_proto::IpNetwork;
use tracker_runtime::config::{positive, within, ConfigError};

/// Bounds of the largest request heads accepted: a request line with a few
/// headers, and a size past which a connection's buffer is a liability.
const MIN_REQUEST_HEAD_BYTES: usize = 512;
const MAX_REQUEST_HEAD_BYTES: usize = 1 << 20;

/// The HTTP tracker (BEP 3, 7, 23, 48), over plain TCP and over TLS.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct HttpConfig {
    /// Addresses to serve the plain HTTP tracker (BEP 3, 7, 23, 48) on; every
    /// worker binds each of them with SO_REUSEPORT. An empty list turns plain
    /// HTTP off.
    pub listen: Vec<SocketAddr>,
    /// Addresses to serve the HTTPS tracker on, like `listen`. An empty list
    /// turns HTTPS off.
    pub https_listen: Vec<SocketAddr>,
    /// PEM file with the certificate chain for HTTPS, leaf first. Empty (and
    /// tls_key_file empty) serves a self-signed certificate made at every
    /// start.
    pub tls_cert_file: String,
    /// PEM file with the certificate's private key (PKCS#8, PKCS#1 or SEC1).
    /// Both files are read again on SIGHUP: new connections get the new
    /// certificate, and a bad one is logged and the old one kept.
    pub tls_key_file: String,
    /// Open connections each worker serves at most (HTTP and HTTPS together).
    /// When all are taken, the one idle the longest is closed to make room for
    /// a new one; a new one is refused only when every connection has a
    /// request under way. Each takes a file descriptor: the tracker lowers
    /// this to what RLIMIT_NOFILE holds, with a warning (see
    /// docs/OPERATIONS.md).
    pub max_connections_per_worker: usize,
    /// Open connections each worker serves at most from one client address
    /// (an IPv6 client counts by its /64); further ones are reset at once, so
    /// that no address takes every slot. Trusted proxies (trusted_proxies) and
    /// runtime.exempt_networks are not capped, here or per subnet or network.
    /// Clients behind one carrier-grade NAT share an address, but each holds
    /// a connection only for the moment of an announce.
    pub max_connections_per_address: usize,
    /// Open connections each worker serves at most from one subnet (an IPv4
    /// /24, an IPv6 /56), however many of its addresses they come from:
    /// otherwise a host with a /56 holds 256 /64s, each with its own
    /// max_connections_per_address. The default, 4 addresses' worth, leaves
    /// room for a carrier-grade NAT pool or a campus in one /24, whose
    /// clients each hold a connection only for the moment of an announce.
    pub max_connections_per_subnet: usize,
    /// Open connections each worker serves at most from one network (an
    /// IPv4 /16, an IPv6 /48, what one organisation or hosting customer is
    /// usually given): otherwise an attacker with a /48 (65536 /64s) could
    /// hold every slot with half-sent heads. The default is 1/8 of the
    /// default max_connections_per_worker: eight networks are needed to fill
    /// a worker.
    pub max_connections_per_network: usize,
    /// Seconds a connection may wait for the first byte of a request, after it
    /// is accepted (or its TLS handshake ends) and after each answer on a
    /// kept-alive connection; then it is closed.
    pub idle_timeout_secs: u32,
    /// Seconds a request head may take to arrive whole, from its first byte
    /// (or from the previous answer, when the client had sent part of it
    /// already), however slowly the bytes come; then the connection is closed.
    pub request_timeout_secs: u32,
    /// Seconds a client may take to receive an answer whole (the answers to
    /// all the requests it pipelined, together), however slowly it reads; then
    /// the connection is closed.
    pub write_timeout_secs: u32,
    /// Seconds a TLS handshake may take before the connection is closed.
    pub tls_handshake_timeout_secs: u32,
    /// The largest request head (request line and headers) accepted, in bytes
    /// (512 to 1048576); larger ones get 431. A scrape of N fully
    /// percent-encoded info-hashes needs about 71 * N bytes.
    pub max_request_head_bytes: usize,
    /// Requests served on one keep-alive connection before the tracker closes
    /// it.
    pub max_requests_per_connection: usize,
    /// The most info-hashes in one scrape; more get a failure reason.
    pub max_scrape_hashes: usize,
    /// A header set by a trusted reverse proxy (such as "X-Forwarded-For")
    /// holding the client's address, used instead of the connection's; its
    /// right-most address counts. Empty: use the connection's address. Needs
    /// trusted_proxies.
    pub real_ip_header: String,
    /// The proxies whose real_ip_header is believed, as addresses or networks
    /// (["127.0.0.1", "10.0.0.0/8", "2001:db8::/32"]). From them a request
    /// without the header gets a failure reason; from anyone else the header
    /// is ignored (and counted) and the connection's address used, so that no
    /// client can announce another host's address. The tracker refuses to
    /// start with a real_ip_header and no trusted proxies. Proxies are not
    /// capped by max_connections_per_address.
    pub trusted_proxies: Vec<String>,
    /// Answer a scrape without info_hash with the counts of every torrent (a
    /// "full scrape"), up to full_scrape_max_torrents of them.
    pub full_scrape: bool,
    /// The most torrents listed in one full scrape.
    pub full_scrape_max_torrents: usize,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            listen: vec![
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, 6969)),
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, 6969)),
            ],
            https_listen: vec![
                SocketAddr::from((Ipv4Addr::UNSPECIFIED, 6970)),
                SocketAddr::from((Ipv6Addr::UNSPECIFIED, 6970)),
            ],
            tls_cert_file: String::new(),
            tls_key_file: String::new(),
            max_connections_per_worker: 8192,
            max_connections_per_address: 128,
            max_connections_per_subnet: 512,
            max_connections_per_network: 1024,
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

impl HttpConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        positive(
            "http.max_connections_per_worker",
            self.max_connections_per_worker,
        )?;
        positive(
            "http.max_connections_per_address",
            self.max_connections_per_address,
        )?;
        positive(
            "http.max_connections_per_subnet",
            self.max_connections_per_subnet,
        )?;
        positive(
            "http.max_connections_per_network",
            self.max_connections_per_network,
        )?;
        positive("http.idle_timeout_secs", self.idle_timeout_secs as usize)?;
        positive(
            "http.request_timeout_secs",
            self.request_timeout_secs as usize,
        )?;
        positive("http.write_timeout_secs", self.write_timeout_secs as usize)?;
        positive(
            "http.tls_handshake_timeout_secs",
            self.tls_handshake_timeout_secs as usize,
        )?;
        within(
            "http.max_request_head_bytes",
            self.max_request_head_bytes,
            MIN_REQUEST_HEAD_BYTES,
            MAX_REQUEST_HEAD_BYTES,
        )?;
        positive(
            "http.max_requests_per_connection",
            self.max_requests_per_connection,
        )?;
        positive("http.max_scrape_hashes", self.max_scrape_hashes)?;
        positive(
            "http.full_scrape_max_torrents",
            self.full_scrape_max_torrents,
        )?;
        match (self.tls_cert_file.is_empty(), self.tls_key_file.is_empty()) {
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
        if !self.real_ip_header.bytes().all(is_header_name_byte) {
            return Err(ConfigError::key(
                "http.real_ip_header",
                format!("`{}` is not an HTTP header name", self.real_ip_header),
            ));
        }
        for net in &self.trusted_proxies {
            net.parse::<IpNetwork>()
                .map_err(|e| ConfigError::key("http.trusted_proxies", e))?;
        }
        match (
            self.real_ip_header.is_empty(),
            self.trusted_proxies.is_empty(),
        ) {
            (false, true) => Err(ConfigError::key(
                "http.trusted_proxies",
                "is needed with http.real_ip_header (--trusted-proxy): name the proxies whose \
                 header is believed, or anyone can announce any address",
            )),
            (true, false) => Err(ConfigError::key(
                "http.trusted_proxies",
                "has no effect without http.real_ip_header",
            )),
            _ => Ok(()),
        }
    }

    /// The most connections from one address, subnet and network (narrowest
    /// first, as `BlockLevel::ALL`).
    pub fn max_connections_per_block(&self) -> [usize; 3] {
        [
            self.max_connections_per_address,
            self.max_connections_per_subnet,
            self.max_connections_per_network,
        ]
    }

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

/// A `tchar` of RFC 9110: what a header name is made of.
fn is_header_name_byte(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The Prometheus endpoint.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct MetricsConfig {
    /// Addresses to serve Prometheus metrics on, e.g. ["127.0.0.1:9100"]: GET
    /// /metrics over plain HTTP, served by worker 0. Empty turns it off. It
    /// has no authentication: keep it on loopback or a private network, never
    /// public.
    pub listen: Vec<SocketAddr>,
    /// Scrape connections served at once. When all are taken, the one that has
    /// waited longest without sending its request is closed to make room.
    pub max_connections: usize,
    /// Scrape connections served at once from one client address.
    pub max_connections_per_address: usize,
    /// Seconds a scrape connection may take, from accept to the end of the
    /// answer.
    pub timeout_secs: u32,
    /// The largest scrape request head accepted, in bytes (512 to 1048576).
    pub max_request_head_bytes: usize,
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

impl MetricsConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        positive("metrics.max_connections", self.max_connections)?;
        positive(
            "metrics.max_connections_per_address",
            self.max_connections_per_address,
        )?;
        positive("metrics.timeout_secs", self.timeout_secs as usize)?;
        within(
            "metrics.max_request_head_bytes",
            self.max_request_head_bytes,
            MIN_REQUEST_HEAD_BYTES,
            MAX_REQUEST_HEAD_BYTES,
        )
    }
}
