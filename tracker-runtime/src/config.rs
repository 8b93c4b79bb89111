//! Configuration: what every section shares (the error that names a key,
//! the checks sections make, and the printer of a commented section), and
//! the sections the runtime owns: `[runtime]`, `[swarm]`, `[access]` and
//! `[state]`. The protocols own theirs (`tracker_udp::config`,
//! `tracker_http::config`); the binary joins them into one file.
//!
//! A key is documented once, by the doc comment of its field: the printed
//! default config (`tracker --print-config`) is those comments over the
//! values of `Default`, so it cannot drift from the code.

use std::fmt;
use std::path::{Path, PathBuf};

use documented::{Documented, DocumentedFields};
use serde::{Deserialize, Serialize};
use tracker_swarm::{Quota, StoreLimits};

use crate::access::{AccessMode, ListSource};
use crate::owner::KEY_BYTES;
use tracker_proto::{decode_hex, IpNetwork};

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

    /// A problem with the value of `key` (such as `udp.listen`).
    pub fn key(key: &str, msg: impl fmt::Display) -> Self {
        ConfigError(format!("`{key}`: {msg}"))
    }
}

/// `key` must be more than 0.
pub fn positive(key: &str, value: usize) -> Result<(), ConfigError> {
    if value == 0 {
        return Err(ConfigError::key(key, "must be more than 0"));
    }
    Ok(())
}

/// `key` must be at most `max`.
pub fn at_most(key: &str, value: usize, max: usize) -> Result<(), ConfigError> {
    if value > max {
        return Err(ConfigError::key(key, format!("must be at most {max}")));
    }
    Ok(())
}

/// `key` must be within `min..=max`.
pub fn within(key: &str, value: usize, min: usize, max: usize) -> Result<(), ConfigError> {
    if !(min..=max).contains(&value) {
        return Err(ConfigError::key(key, format!("must be {min} to {max}")));
    }
    Ok(())
}

/// The secret of `N` bytes that `text` spells in hex; None when it is empty
/// (a random one is drawn at start).
pub fn hex_secret<const N: usize>(key: &str, text: &str) -> Result<Option<[u8; N]>, ConfigError> {
    if text.is_empty() {
        return Ok(None);
    }
    if text.len() != 2 * N {
        return Err(ConfigError::key(
            key,
            format!("must be {} hex digits, not {}", 2 * N, text.len()),
        ));
    }
    decode_hex(text.as_bytes())
        .map(Some)
        .ok_or_else(|| ConfigError::key(key, "must be hex digits"))
}

/// Appends the section `[name]`: its own doc comment, then every key, each
/// under its field's doc comment, with the value `section` holds.
pub fn write_section<S>(out: &mut String, name: &str, section: &S)
where
    S: Serialize + Documented + DocumentedFields,
{
    let values = toml::Value::try_from(section)
        .ok()
        .and_then(|v| v.as_table().cloned())
        .unwrap_or_default();
    write_comment(out, S::DOCS);
    out.push_str(&format!("[{name}]\n"));
    for (key, docs) in S::FIELD_NAMES.iter().zip(S::FIELD_DOCS) {
        // A table is a section of its own (`[udp.xdp]`), written by the
        // caller after this one.
        if values.get(*key).is_some_and(toml::Value::is_table) {
            continue;
        }
        write_comment(out, docs);
        match values.get(*key) {
            Some(value) => out.push_str(&format!("{key} = {value}\n")),
            // No TOML value (None): shown commented out.
            None => out.push_str(&format!("#{key} =\n")),
        }
    }
}

/// Writes `text` as `#` comment lines.
pub fn write_comment(out: &mut String, text: &str) {
    for line in text.lines() {
        if line.is_empty() {
            out.push_str("#\n");
        } else {
            out.push_str(&format!("# {line}\n"));
        }
    }
}

/// The most `runtime.busy_poll_us`: a worker that has had no work for 10 ms
/// gains nothing more by polling.
const MAX_BUSY_POLL_US: u32 = 10_000;

/// The most torrents a worker may be set to hold: the store counts them in 32
/// bits. (A torrent's peers: `tracker_swarm::MAX_PEERS_PER_TORRENT`.)
const MAX_HELD: usize = 1 << 31;

/// The most `runtime.handover_timeout_secs`: the tracker serves no one
/// while it waits, and service managers give up on a stop sooner.
const MAX_HANDOVER_TIMEOUT_SECS: u32 = 600;

/// The most `state.drain_timeout_secs`: a stop that waits longer than this
/// for clients is stuck, and service managers give up sooner.
const MAX_DRAIN_TIMEOUT_SECS: u32 = 600;
/// A day: a snapshot less often than that is hardly a snapshot.
const MAX_SNAPSHOT_INTERVAL_SECS: u32 = 86_400;

/// How the workers run: how many, on which CPUs, and how they talk.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct RuntimeConfig {
    /// Worker executors, one per CPU; 0 means one for every CPU in `cpus`.
    pub workers: usize,
    /// CPUs to run on, as a list such as "0-3,6"; empty means every CPU this
    /// process may use.
    pub cpus: String,
    /// Pin each worker to its own CPU (true), or let the kernel place them
    /// (false).
    pub pin: bool,
    /// Messages each pair of workers can have queued in each direction before
    /// the sender waits (back-pressure).
    pub channel_capacity: usize,
    /// Requests a worker may have handed to other workers and not yet had
    /// answered; past it, further UDP requests for other shards are dropped
    /// (the announces of one receive batch for one owner go, or are dropped,
    /// together).
    pub max_forwarded: usize,
    /// 48 hex digits keying the function that gives each torrent to a
    /// worker; empty means random at every start, which keeps it from
    /// clients, so that none can choose info-hashes that all land on one
    /// worker. Set it only to predict which worker owns a torrent (tests,
    /// benchmarks). Saved swarms are given out anew at each start, so it
    /// need not stay the same across restarts.
    pub owner_key: String,
    /// Microseconds a worker that runs out of work keeps polling for more
    /// before it sleeps (0 to 10000; 0 sleeps at once). Waking from sleep
    /// costs latency, most on VMs whose idle vCPUs halt; polling spends the
    /// idle CPU instead, so a polling worker shows busy.
    pub busy_poll_us: u32,
    /// Seconds a SIGHUP reload may spend reading each of its files (the
    /// access list, the certificate and key), on a thread of its own; past it
    /// (a hung network file system, say) the old one is kept. A stop is taken
    /// at any time.
    pub reload_timeout_secs: u32,
    /// The Unix socket through which a new tracker started with
    /// --take-over takes this one's sockets and swarms (an upgrade without
    /// a gap). Created at start, private to the user the tracker serves as
    /// (mode 0600; only root, and the successor SIGUSR2 starts, may take
    /// over), and removed at the stop where that user may. A relative path
    /// is taken from $RUNTIME_DIRECTORY, which systemd sets from the unit's
    /// RuntimeDirectory= (/run/tracker for the unit in deploy/), else from
    /// the working directory. Keep it in a directory only the tracker's
    /// user and root can write, such as that one: whoever can write there
    /// can remove the socket, and so the hand-overs. Only a socket no
    /// tracker listens on is replaced at start; any other file there stops
    /// the start. Empty: no hand-over.
    pub control_socket: String,
    /// Seconds a tracker that has stopped for a hand-over waits on the new
    /// tracker at each step after its `go` (1 to 600): to take each write
    /// of the swarms, then to check them all and say `ok`. It serves no one
    /// meanwhile, so past it the new tracker is killed (it holds every
    /// socket) and this one serves again, the same swarms on the same
    /// sockets. The check reads the swarms at about 1 GB/s (a 108 MB state
    /// file in 0.12 s): raise it only for swarms of several GB.
    pub handover_timeout_secs: u32,
    /// Networks (such as "127.0.0.0/8" or "2001:db8::/48") whose clients no
    /// limit per client counts: not the new-torrent budgets, the peers per
    /// address in a torrent, the UDP connects per address, nor the HTTP
    /// connections per address. For a load test from loopback, which sends
    /// what thousands of clients would from a few addresses and would
    /// otherwise be turned away as one greedy client:
    /// `exempt_networks = ["127.0.0.0/8", "::1"]`. Never list a network
    /// that the Internet reaches: its clients could fill the tracker. The
    /// limits in total (torrents, peers, connections per worker) still hold.
    pub exempt_networks: Vec<String>,
}

impl Default for RuntimeConfig {
    fn default() -> Self {
        RuntimeConfig {
            workers: 0,
            cpus: String::new(),
            pin: true,
            channel_capacity: 1024,
            max_forwarded: 4096,
            owner_key: String::new(),
            busy_poll_us: 0,
            reload_timeout_secs: 30,
            control_socket: "tracker.control".into(),
            handover_timeout_secs: 5,
            exempt_networks: Vec::new(),
        }
    }
}

impl RuntimeConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.control_socket.ends_with('/') || self.control_socket.contains('\0') {
            return Err(ConfigError::key(
                "runtime.control_socket",
                format!("`{}` is not a file path", self.control_socket),
            ));
        }
        for net in &self.exempt_networks {
            net.parse::<IpNetwork>()
                .map_err(|e| ConfigError::key("runtime.exempt_networks", e))?;
        }
        if !self.cpus.trim().is_empty() {
            crate::workers::parse_cpu_list(&self.cpus)
                .map_err(|e| ConfigError::key("runtime.cpus", e))?;
        }
        positive("runtime.channel_capacity", self.channel_capacity)?;
        positive("runtime.max_forwarded", self.max_forwarded)?;
        hex_secret::<KEY_BYTES>("runtime.owner_key", &self.owner_key)?;
        at_most(
            "runtime.busy_poll_us",
            self.busy_poll_us as usize,
            MAX_BUSY_POLL_US as usize,
        )?;
        within(
            "runtime.handover_timeout_secs",
            self.handover_timeout_secs as usize,
            1,
            MAX_HANDOVER_TIMEOUT_SECS as usize,
        )?;
        positive(
            "runtime.reload_timeout_secs",
            self.reload_timeout_secs as usize,
        )
    }

    /// The control socket, when hand-overs are on: a relative path in
    /// `$RUNTIME_DIRECTORY` (the service's runtime directory), when set.
    pub fn control_socket(&self) -> Option<PathBuf> {
        control_socket_in(
            &self.control_socket,
            std::env::var_os("RUNTIME_DIRECTORY").as_deref(),
        )
    }

    /// The networks exempt from the limits per client (validated already).
    pub fn exempt_networks(&self) -> ExemptNetworks {
        ExemptNetworks(
            self.exempt_networks
                .iter()
                .filter_map(|net| net.parse().ok())
                .collect(),
        )
    }

    /// The key of the owner function, if one is set (validated already).
    pub fn owner_key(&self) -> Option<[u8; KEY_BYTES]> {
        hex_secret("runtime.owner_key", &self.owner_key)
            .ok()
            .flatten()
    }
}

/// `path` (empty: none), a relative one in the first directory that
/// `runtime_dirs` lists (systemd separates several with `:`), if any.
fn control_socket_in(path: &str, runtime_dirs: Option<&std::ffi::OsStr>) -> Option<PathBuf> {
    use std::os::unix::ffi::OsStrExt;
    if path.is_empty() {
        return None;
    }
    let runtime_dir = runtime_dirs
        .and_then(|dirs| dirs.as_bytes().split(|&b| b == b':').next())
        .filter(|dir| !dir.is_empty())
        .map(|dir| Path::new(std::ffi::OsStr::from_bytes(dir)));
    match runtime_dir {
        Some(dir) if Path::new(path).is_relative() => Some(dir.join(path)),
        _ => Some(PathBuf::from(path)),
    }
}

/// The networks that `runtime.exempt_networks` leaves out of every limit
/// per client.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ExemptNetworks(Vec<IpNetwork>);

impl ExemptNetworks {
    /// Whether the client at `ip` is exempt (a short list, scanned: none in
    /// the default config).
    pub fn contains(&self, ip: std::net::IpAddr) -> bool {
        self.0.iter().any(|net| net.contains(ip))
    }

    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Whether the store's limits per client count the client at `ip`.
    pub fn quota(&self, ip: std::net::IpAddr) -> Quota {
        if self.contains(ip) {
            Quota::Exempt
        } else {
            Quota::Counted
        }
    }
}

/// The swarms: how often clients announce, how long peers live, how many
/// peers an answer carries, and what each worker holds at most.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct SwarmConfig {
    /// Seconds between announces that the tracker asks clients for.
    pub announce_interval_secs: u32,
    /// Seconds after its last announce that a peer is dropped (at most
    /// 14400: a stored peer keeps its expiry in 15 bits).
    pub peer_timeout_secs: u32,
    /// Seconds for one clean-up pass over every torrent of a worker (at most
    /// 3600); it cleans a small segment at a time, spread over this period,
    /// so requests never stall.
    pub cleanup_interval_secs: u32,
    /// Peers returned when a client does not say how many it wants.
    pub default_numwant: u32,
    /// The most peers returned in one announce answer. UDP is further capped
    /// at what fits one datagram: 200 IPv4 or 66 IPv6 peers.
    pub max_numwant: u32,
    /// Torrents each worker holds at most (up to 2147483648). A new torrent
    /// past it takes the place of one worth less among 8 drawn at random:
    /// one whose peers (at most 4) all come from one network, an IPv4 /16 or
    /// an IPv6 /48, the creator's own first, so that a few networks that
    /// fill the worker cannot lock honest new torrents out. It gets the
    /// error "tracker is full" only when none of those drawn may go.
    pub max_torrents_per_worker: usize,
    /// Peers each torrent holds at most (up to 16777214); new peers past it
    /// are answered, not stored.
    pub max_peers_per_torrent: usize,
    /// Peers each worker holds at most, over all its torrents; new peers past
    /// it are answered, not stored, and create no torrent. About 25-40 bytes
    /// per IPv4 peer, torrents and indexes included (two and a half times that with
    /// `store_peer_ids`).
    pub max_peers_per_worker: usize,
    /// Peers each torrent holds at most from one client address (an IPv6
    /// client by its /64, any address of which one host can use), on
    /// different ports; new ones past it are answered, not stored, so that
    /// one host cannot fill a swarm with itself. Clients behind one
    /// carrier-grade NAT share an address, but rarely more than a few of them
    /// share a torrent. Swarms of more than 32 peers keep a count per client
    /// for it: about 11 bytes per client. 0 turns the limit (and the counts)
    /// off.
    pub max_peers_per_address_per_torrent: usize,
    /// BitTorrent peers each worker holds at most from one network (an IPv4
    /// /16, an IPv6 /48: what an organisation or a hosting customer is
    /// given), over all its torrents (WebRTC peers have websocket's caps);
    /// new ones past it are answered, not stored, and create no torrent.
    /// Without it a /48, or a thousand addresses of one /16, could fill
    /// max_peers_per_worker, and two networks that announce every torrent
    /// they create from both could hold max_torrents_per_worker for good (a
    /// torrent two networks share is never dropped for a new one). The cap
    /// used is at most an eighth of max_peers_per_worker and a quarter of
    /// max_torrents_per_worker, whatever is set here, so that it takes eight
    /// networks to fill either (the default, 1,250,000, is a quarter of the
    /// default torrents and a sixteenth of the default peers). Clients of
    /// runtime.exempt_networks are not held to it. It costs a table of 256
    /// KiB per worker, nothing per peer. 0 turns it (and the table) off.
    pub max_peers_per_network: usize,
    /// Torrents one client address (an IPv6 client by its /64) may create per
    /// minute on each worker; announces that would create more get the error
    /// "too many new torrents from this address" and are retried by clients
    /// later. Only new torrents count: announces to torrents that exist never
    /// do, so a seedbox starting thousands of torrents (or many users behind
    /// one carrier-grade NAT) is held back only while it creates them. 0 turns
    /// the budget off.
    pub new_torrents_per_address_per_minute: u32,
    /// Torrents the clients of one subnet (an IPv4 /24, an IPv6 /56: what a
    /// home, an office or a rack of servers is given) may create per minute
    /// on each worker, together ("too many new torrents from this subnet").
    /// Without it a network could create as many torrents as it has
    /// addresses: a /56 holds 256 /64s. Four addresses' budgets, so that
    /// seedboxes sharing a /24 restart without waiting long. 0 turns it off.
    pub new_torrents_per_subnet_per_minute: u32,
    /// Torrents the clients of one network (an IPv4 /16, an IPv6 /48: what an
    /// organisation or a hosting customer is given) may create per minute on
    /// each worker, together ("too many new torrents from this network"): a
    /// /48 holds 65,536 /64s. Ten addresses' budgets, so that the clients of
    /// a large network announcing after a restart without a state file are
    /// held back a few minutes at most. 0 turns it off.
    pub new_torrents_per_network_per_minute: u32,
    /// Keep each peer's peer id, for HTTP clients that ask for non-compact
    /// answers with them: 20 bytes more per peer (an IPv4 peer takes 8
    /// without). Off, non-compact answers leave `peer id` out, as BEP 23's
    /// no_peer_id does, which every client we know takes.
    pub store_peer_ids: bool,
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
            max_peers_per_network: 1_250_000,
            new_torrents_per_address_per_minute: 600,
            new_torrents_per_subnet_per_minute: 2_400,
            new_torrents_per_network_per_minute: 6_000,
            store_peer_ids: false,
        }
    }
}

impl SwarmConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        positive(
            "swarm.announce_interval_secs",
            self.announce_interval_secs as usize,
        )?;
        positive("swarm.peer_timeout_secs", self.peer_timeout_secs as usize)?;
        at_most(
            "swarm.peer_timeout_secs",
            self.peer_timeout_secs as usize,
            tracker_swarm::MAX_PEER_TIMEOUT_SECS as usize,
        )?;
        positive(
            "swarm.cleanup_interval_secs",
            self.cleanup_interval_secs as usize,
        )?;
        at_most(
            "swarm.cleanup_interval_secs",
            self.cleanup_interval_secs as usize,
            tracker_swarm::MAX_CLEANUP_INTERVAL_SECS as usize,
        )?;
        positive(
            "swarm.max_torrents_per_worker",
            self.max_torrents_per_worker,
        )?;
        positive("swarm.max_peers_per_torrent", self.max_peers_per_torrent)?;
        at_most(
            "swarm.max_torrents_per_worker",
            self.max_torrents_per_worker,
            MAX_HELD,
        )?;
        at_most(
            "swarm.max_peers_per_torrent",
            self.max_peers_per_torrent,
            tracker_swarm::MAX_PEERS_PER_TORRENT,
        )?;
        positive("swarm.max_peers_per_worker", self.max_peers_per_worker)?;
        if self.default_numwant > self.max_numwant {
            return Err(ConfigError::key(
                "swarm.default_numwant",
                format!(
                    "{} is more than swarm.max_numwant ({})",
                    self.default_numwant, self.max_numwant
                ),
            ));
        }
        Ok(())
    }

    /// Peers to return for a request that asked for `requested` (`None`: the
    /// client did not say), within `swarm.max_numwant` and the protocol's own
    /// cap.
    pub fn numwant(&self, requested: Option<u32>, protocol_cap: u32) -> u32 {
        requested
            .unwrap_or(self.default_numwant)
            .min(self.max_numwant)
            .min(protocol_cap)
    }

    /// The cap on one network's peers in a worker: what is set, within the
    /// shares of both caps that leave seven networks short of filling
    /// either (see `max_peers_per_network`). Seven networks hold 7/8 of the
    /// peers at most; and each torrent that eviction spares holds peers of
    /// two networks (or more than 4 of one), so at most 7/4 / 2 = 7/8 of
    /// the torrents. None when off.
    fn peers_per_network(&self) -> Option<usize> {
        const NETWORKS_TO_FILL: usize = 8;
        let share_of_peers = self.max_peers_per_worker / NETWORKS_TO_FILL;
        let share_of_torrents = 2 * self.max_torrents_per_worker / NETWORKS_TO_FILL;
        Some(self.max_peers_per_network)
            .filter(|&max| max > 0)
            .map(|max| max.min(share_of_peers).min(share_of_torrents).max(1))
    }

    /// What each worker's store may hold.
    pub fn store_limits(&self) -> StoreLimits {
        StoreLimits {
            peer_timeout_secs: self.peer_timeout_secs,
            max_torrents: self.max_torrents_per_worker,
            max_peers_per_torrent: self.max_peers_per_torrent,
            max_peers: self.max_peers_per_worker,
            max_peers_per_address: Some(self.max_peers_per_address_per_torrent)
                .filter(|&max| max > 0),
            max_peers_per_network: self.peers_per_network(),
            new_torrents_per_minute: [
                self.new_torrents_per_address_per_minute,
                self.new_torrents_per_subnet_per_minute,
                self.new_torrents_per_network_per_minute,
            ],
            peer_ids: self.store_peer_ids,
        }
    }
}

/// The shortest API key accepted (UNIT3D-Announce's rule).
pub const MIN_API_KEY_LEN: usize = 32;

/// An API key that goes in a URL path: at least [`MIN_API_KEY_LEN`]
/// visible characters, no `/`. `listen` names the key that needs it.
pub fn api_key(key: &str, value: &str, listen: &str) -> Result<(), ConfigError> {
    if value.len() < MIN_API_KEY_LEN || !value.bytes().all(|b| b.is_ascii_graphic() && b != b'/') {
        return Err(ConfigError::key(
            key,
            format!(
                "needs at least {MIN_API_KEY_LEN} visible characters, no `/`, when {listen} is set"
            ),
        ));
    }
    Ok(())
}

/// Access lists: which torrents are served.
#[derive(Clone, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct AccessConfig {
    /// Which torrents are served: "off" (all of them), "allow" (only those
    /// listed in `file`) or "deny" (all but those listed). Announces for other
    /// torrents get the error "torrent not allowed", and scrapes of them get
    /// zeros.
    pub mode: AccessMode,
    /// The list: one info-hash per line as 40 hex digits, `#` starts a
    /// comment. Needed unless mode is "off". Read at start (a bad list stops
    /// the tracker) and again on SIGHUP (a bad list is logged and the old one
    /// kept); torrents that the new list refuses are dropped. Replace it
    /// atomically (write a new file, then rename it over the old): a list read
    /// while it is being written may lose lines, and one cut in a line is
    /// refused. It must be a regular file.
    pub file: String,
    /// The largest list file read, in bytes (about 41 per info-hash); a larger
    /// one is refused.
    pub max_file_bytes: u64,
    /// Accept an allow list that lists no info-hash. Off, such a list (an
    /// emptied or truncated file, say) is refused, at start and on reload, as
    /// it would serve no torrent and drop every swarm, and the access API
    /// refuses (409) to take off the last hash.
    pub allow_empty: bool,
    /// Where the access API listens: PUT and DELETE of
    /// /announce/{api_key}/access-list with a body {"info_hash": "40 hex
    /// digits"} add a torrent to the list or take it off, at once on every
    /// worker, and change its line in `file` (replaced atomically, its other
    /// lines, owner and mode kept), so the change is kept across restarts
    /// and SIGHUP reloads. A change into a list that a start would refuse
    /// is refused (409), as is a symbolic link at `file`; the tracker's user
    /// must be able to write the file's directory and to give the new file
    /// the old one's owner (own it, or be root), else nothing changes (500).
    /// Plain HTTP: keep it on loopback or a private network. Empty: no API.
    /// Needs a mode other than "off".
    /// (In private mode the site API, private.api_listen, takes its place.)
    pub api_listen: String,
    /// The access API's key, at least 32 visible characters, compared in
    /// constant time. A secret: never logged.
    pub api_key: String,
}

// The API key stays out of debug output.
impl fmt::Debug for AccessConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("AccessConfig")
            .field("mode", &self.mode)
            .field("file", &self.file)
            .field("api_listen", &self.api_listen)
            .finish_non_exhaustive()
    }
}

impl Default for AccessConfig {
    fn default() -> Self {
        AccessConfig {
            mode: AccessMode::Off,
            file: String::new(),
            max_file_bytes: 256 << 20,
            allow_empty: false,
            api_listen: String::new(),
            api_key: String::new(),
        }
    }
}

impl AccessConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.mode != AccessMode::Off && self.file.is_empty() {
            return Err(ConfigError::key(
                "access.file",
                format!("is needed with access.mode = \"{}\"", self.mode.as_str()),
            ));
        }
        if self.api_listen.is_empty() {
            return Ok(());
        }
        if self.mode == AccessMode::Off {
            return Err(ConfigError::key(
                "access.api_listen",
                "needs access.mode = \"allow\" or \"deny\" (and access.file)",
            ));
        }
        if self.api_listen.parse::<std::net::SocketAddr>().is_err() {
            return Err(ConfigError::key(
                "access.api_listen",
                format!("`{}` is not an address and port", self.api_listen),
            ));
        }
        api_key("access.api_key", &self.api_key, "access.api_listen")
    }

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

/// The state file: every swarm kept across a restart.
#[derive(Clone, Debug, PartialEq, Deserialize, Serialize, Documented, DocumentedFields)]
#[serde(default, deny_unknown_fields)]
pub struct StateConfig {
    /// On SIGTERM or SIGINT the tracker stops taking requests, answers those
    /// it took, saves every swarm and completed count to this file (replaced
    /// atomically) and exits 0; at start it loads the file, leaving out peers
    /// that expired meanwhile. A missing or damaged file is reported and the
    /// tracker starts empty. A relative path is taken from the working
    /// directory; --state overrides it. Empty: nothing is saved or loaded.
    pub file: String,
    /// Seconds that requests already taken get to be answered (0 to 600)
    /// before the swarms are saved; a second SIGTERM or SIGINT exits at once
    /// without saving.
    pub drain_timeout_secs: u32,
    /// Seconds between snapshots: the file written while serving (1 to
    /// 86400; 0: only at the stop), so that a crash or a SIGKILL loses at
    /// most this much. Each worker saves its torrents a segment at a time,
    /// between requests, and a thread writes the file; until it is written
    /// the process holds a second copy of the swarms, about the file's size.
    pub snapshot_interval_secs: u32,
}

impl Default for StateConfig {
    fn default() -> Self {
        StateConfig {
            file: "tracker.state".into(),
            drain_timeout_secs: 5,
            snapshot_interval_secs: 300,
        }
    }
}

impl StateConfig {
    pub fn validate(&self) -> Result<(), ConfigError> {
        if self.file.ends_with('/') || self.file.contains('\0') {
            return Err(ConfigError::key(
                "state.file",
                format!("`{}` is not a file path", self.file),
            ));
        }
        at_most(
            "state.drain_timeout_secs",
            self.drain_timeout_secs as usize,
            MAX_DRAIN_TIMEOUT_SECS as usize,
        )?;
        at_most(
            "state.snapshot_interval_secs",
            self.snapshot_interval_secs as usize,
            MAX_SNAPSHOT_INTERVAL_SECS as usize,
        )
    }

    /// How often snapshots are taken, when they are (a state file and a
    /// non-zero interval).
    pub fn snapshot_interval(&self) -> Option<std::time::Duration> {
        let secs = u64::from(self.snapshot_interval_secs);
        (self.path().is_some() && secs > 0).then(|| std::time::Duration::from_secs(secs))
    }

    /// The state file, when one is configured.
    pub fn path(&self) -> Option<&Path> {
        Some(Path::new(&self.file)).filter(|_| !self.file.is_empty())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A small section, to see the printer's layout.
    #[derive(Default, Serialize, Documented, DocumentedFields)]
    struct Sample {
        /// One line.
        a: u32,
        /// Two lines,
        /// the second.
        ///
        /// And a paragraph.
        b: Vec<String>,
    }

    #[test]
    fn a_relative_control_socket_is_in_the_runtime_directory() {
        let dirs = |s: &'static str| Some(std::ffi::OsStr::new(s));
        let at = |path, dirs| control_socket_in(path, dirs);
        assert_eq!(at("", dirs("/run/tracker")), None);
        assert_eq!(
            at("tracker.control", dirs("/run/tracker:/run/other")),
            Some(PathBuf::from("/run/tracker/tracker.control"))
        );
        assert_eq!(
            at("/srv/t.control", dirs("/run/tracker")),
            Some(PathBuf::from("/srv/t.control"))
        );
        assert_eq!(
            at("tracker.control", None),
            Some(PathBuf::from("tracker.control"))
        );
        assert_eq!(
            at("tracker.control", dirs("")),
            Some(PathBuf::from("tracker.control"))
        );
    }

    #[test]
    fn a_section_prints_its_doc_then_each_key_under_its_comment() {
        let mut out = String::new();
        let sample = Sample {
            a: 7,
            b: vec!["x".into()],
        };
        write_section(&mut out, "sample", &sample);
        assert_eq!(
            out,
            "# A small section, to see the printer's layout.\n[sample]\n# One line.\na = 7\n\
             # Two lines,\n# the second.\n#\n# And a paragraph.\nb = [\"x\"]\n"
        );
    }

    #[test]
    fn exempt_networks_are_checked_and_matched() {
        let mut runtime = RuntimeConfig::default();
        assert!(runtime.exempt_networks().is_empty());
        runtime.exempt_networks = vec!["127.0.0.0/8".into(), "::1".into()];
        runtime.validate().unwrap();
        let exempt = runtime.exempt_networks();
        assert!(exempt.contains([127, 1, 2, 3].into()));
        assert!(exempt.contains("::1".parse().unwrap()));
        assert!(!exempt.contains([192, 0, 2, 1].into()));
        runtime.exempt_networks.push("10.0.0.0/40".into());
        let e = runtime.validate().unwrap_err().to_string();
        assert!(e.contains("runtime.exempt_networks"), "{e}");
    }

    #[test]
    fn swarm_limits_follow_the_config_and_zero_turns_the_address_cap_off() {
        let mut swarm = SwarmConfig::default();
        assert_eq!(swarm.store_limits().max_peers_per_address, Some(32));
        swarm.max_peers_per_address_per_torrent = 0;
        assert_eq!(swarm.store_limits().max_peers_per_address, None);
        let budgets = swarm.store_limits().new_torrents_per_minute;
        assert_eq!(budgets, [600, 2_400, 6_000], "address, subnet, network");
        // The cap per network: what is set, within an eighth of the peers
        // and a quarter of the torrents (the default is both).
        assert_eq!(swarm.store_limits().max_peers_per_network, Some(1_250_000));
        swarm.max_peers_per_network = 1000;
        assert_eq!(swarm.store_limits().max_peers_per_network, Some(1000));
        swarm.max_peers_per_worker = 4000;
        assert_eq!(swarm.store_limits().max_peers_per_network, Some(500));
        swarm.max_torrents_per_worker = 400;
        assert_eq!(swarm.store_limits().max_peers_per_network, Some(100));
        swarm.max_torrents_per_worker = 1;
        assert_eq!(swarm.store_limits().max_peers_per_network, Some(1));
        swarm.max_peers_per_network = 0;
        assert_eq!(swarm.store_limits().max_peers_per_network, None);
        assert_eq!(swarm.numwant(None, 74), 50);
        assert_eq!(swarm.numwant(Some(1000), 74), 74);
    }
}
