//! Every option of a run, from a TOML file (`--config`) with command-line
//! flags on top. Unknown keys are refused so that a typo does not silently
//! run a different load.

use serde::Deserialize;
use std::path::{Path, PathBuf};

/// Everything a `udp`, `http` or `ws` run needs. The file may hold `[udp]`,
/// `[http]` and `[ws]`; each subcommand reads its own, and only `compare`
/// reads `[compare]`.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct Config {
    /// `ADDR` for UDP (`127.0.0.1:6969`), a URL for HTTP
    /// (`https://127.0.0.1:8443/announce`).
    pub target: Option<String>,
    /// Seconds of load (fractions allowed).
    pub duration_secs: f64,
    /// Load-generator executors; default one per CPU in `cpus`, else 1.
    pub workers: Option<usize>,
    /// CPUs for the generator, e.g. `1` or `2-3` (keep it off the tracker's).
    pub cpus: Option<String>,
    /// Open loop: requests per second in total, sent on a schedule whatever the
    /// answers. Absent: closed loop, a fixed number in flight.
    pub rate: Option<f64>,
    /// Write the summary as JSON here.
    pub json: Option<PathBuf>,
    /// A request unanswered after this long counts as a time-out.
    pub timeout_ms: u64,
    /// Seed of the traffic model (info-hashes, peers, choices).
    pub seed: u64,
    /// Print a progress line every second.
    pub progress: bool,
    pub traffic: TrafficConfig,
    pub udp: UdpConfig,
    pub http: HttpConfig,
    pub ws: WsConfig,
    pub compare: CompareConfig,
}

impl Default for Config {
    fn default() -> Self {
        Config {
            target: None,
            duration_secs: 10.0,
            workers: None,
            cpus: None,
            rate: None,
            json: None,
            timeout_ms: 1000,
            seed: 1,
            progress: true,
            traffic: TrafficConfig::default(),
            udp: UdpConfig::default(),
            http: HttpConfig::default(),
            ws: WsConfig::default(),
            compare: CompareConfig::default(),
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct TrafficConfig {
    /// Distinct torrents.
    pub torrents: u64,
    /// Distinct peers (each a fixed loopback address and port, and peer id).
    pub peers: u32,
    /// Popularity skew: torrent of rank k is asked for in proportion to 1/k^s.
    pub zipf_exponent: f64,
    /// Share of peers that seed (announce left = 0).
    pub seeder_probability: f64,
    /// Peers asked for per announce; -1 asks for the tracker's default.
    pub numwant: i32,
    /// A scrape asks for 1 to this many info-hashes (at most 74).
    pub scrape_hashes: usize,
    /// Announce events by weight.
    pub events: EventWeights,
    /// Private tracker: a file of passkeys, one a line (32 letters or
    /// digits); each peer announces with one of them, over HTTP in the path
    /// `/announce/{passkey}`, over UDP in BEP 41's URLData.
    pub passkeys: Option<PathBuf>,
    /// A file of info-hashes, 40 hex digits a line, the most popular
    /// first: the only torrents announced and scraped (a private tracker's
    /// registered ones); their number replaces `torrents`.
    pub info_hashes: Option<PathBuf>,
}

impl Default for TrafficConfig {
    fn default() -> Self {
        TrafficConfig {
            torrents: 1_000_000,
            peers: 2_000_000,
            zipf_exponent: 1.0,
            seeder_probability: 0.75,
            numwant: 50,
            scrape_hashes: 10,
            events: EventWeights::default(),
            passkeys: None,
            info_hashes: None,
        }
    }
}

/// Weights of the announce events. A client sends `started` once, `stopped`
/// once and `completed` at most once per session, and announces without an
/// event every interval in between.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct EventWeights {
    pub none: u32,
    pub started: u32,
    pub completed: u32,
    pub stopped: u32,
}

impl Default for EventWeights {
    fn default() -> Self {
        EventWeights {
            none: 85,
            started: 7,
            completed: 1,
            stopped: 7,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct UdpConfig {
    /// Source addresses per worker, 127.1.x.y each with its own connection
    /// id (raised so that every peer has its own address and port).
    pub sources_per_worker: u32,
    /// Requests in flight per source: kept so in the closed loop, the most
    /// allowed in the open loop (default 16 closed, 1024 open).
    pub in_flight: Option<u32>,
    pub mix: UdpMix,
}

impl Default for UdpConfig {
    fn default() -> Self {
        UdpConfig {
            sources_per_worker: 8,
            in_flight: None,
            mix: UdpMix::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct UdpMix {
    pub connect: u32,
    pub announce: u32,
    pub scrape: u32,
}

impl Default for UdpMix {
    fn default() -> Self {
        UdpMix {
            connect: 50,
            announce: 50,
            scrape: 1,
        }
    }
}

#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpConfig {
    /// Keep-alive connections per worker (raised so that every peer has its
    /// own address and port).
    pub connections_per_worker: u32,
    /// Skip certificate checks (a self-signed test certificate).
    pub insecure: bool,
    /// PEM file of CAs to trust for https (default: the system's bundle).
    pub ca: Option<PathBuf>,
    /// Private: the passkey first in the path, `/{passkey}/announce?...` and
    /// `/{passkey}/scrape?...` (Ocelot's form, for Gazelle sites), instead of
    /// `/announce/{passkey}?...`. Needs `traffic.passkeys`.
    pub passkey_first: bool,
    pub mix: HttpMix,
}

impl Default for HttpConfig {
    fn default() -> Self {
        HttpConfig {
            connections_per_worker: 32,
            insecure: false,
            ca: None,
            passkey_first: false,
            mix: HttpMix::default(),
        }
    }
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct HttpMix {
    pub announce: u32,
    pub scrape: u32,
}

impl Default for HttpMix {
    fn default() -> Self {
        HttpMix {
            announce: 99,
            scrape: 1,
        }
    }
}

/// The WebSocket (WebTorrent) load: connections that each carry many
/// peers, announcing with WebRTC offers and answering offers relayed to them.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct WsConfig {
    /// Connections in all (not per worker), each from one of the addresses
    /// 127.0.0.2, 127.0.0.3, ... (10000 connections to an address).
    pub connections: u32,
    /// Offers in an announce (WebTorrent sends 10 at most, and none with
    /// `stopped` or `completed`).
    pub offers: usize,
    /// Share of the offers received that are answered.
    pub answer_share: f64,
    /// Seconds the connections stay idle after all have opened and
    /// announced once, before the measured load (to read a tracker's memory
    /// per connection).
    pub hold_secs: f64,
    /// A file written (with the connections open) when all have opened and
    /// announced once: the moment to read a tracker's memory.
    pub ready_file: Option<PathBuf>,
    /// wss: skip certificate checks (a self-signed test certificate).
    pub insecure: bool,
    /// wss: PEM file of CAs to trust (default: the system's bundle).
    pub ca: Option<PathBuf>,
    pub mix: HttpMix,
}

impl Default for WsConfig {
    fn default() -> Self {
        WsConfig {
            connections: 64,
            offers: 10,
            answer_share: 0.5,
            hold_secs: 0.0,
            ready_file: None,
            insecure: false,
            ca: None,
            mix: HttpMix::default(),
        }
    }
}

/// Most offers an announce may carry here (WebTorrent sends 10 at most).
pub const MAX_WS_OFFERS: usize = 100;

/// What `load-test compare` runs: our tracker at each worker count, pinned
/// and unpinned, and each other tracker once at each count.
#[derive(Clone, Debug, Default, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
pub struct CompareConfig {
    /// Our tracker's command template (default: the `tracker` binary beside
    /// `load-test`, with the protocol under test only).
    pub tracker_cmd: Option<String>,
    /// CPUs for the trackers (default: those not in `cpus`).
    pub tracker_cpus: Option<String>,
    /// Worker counts 1..=N (default: one per tracker CPU).
    pub max_workers: Option<usize>,
    /// Worker counts to run instead of 1..=N, e.g. `[1, 2, 4, 8]`.
    pub worker_counts: Option<Vec<usize>>,
    /// Other trackers, each `NAME=TEMPLATE`, run once per worker count.
    pub other: Vec<String>,
    /// Where the table, the plot, the JSON summaries and the logs go
    /// (default `compare`).
    pub out: Option<PathBuf>,
}

/// Another tracker for `compare`: a name for its column and its command
/// template.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OtherTracker {
    pub name: String,
    pub template: String,
}

impl OtherTracker {
    /// Parses `NAME=TEMPLATE`. The name heads a column and names the run's
    /// files, so it is kept to letters, digits, `.`, `_` and `-`, and may not
    /// be one of our own runs' (`pinned`, `unpinned`).
    pub fn parse(text: &str) -> Result<OtherTracker, String> {
        let (name, template) = text
            .split_once('=')
            .ok_or_else(|| format!("`{text}`: expected NAME=TEMPLATE"))?;
        let name = name.trim();
        if name.is_empty()
            || !name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-'))
        {
            return Err(format!(
                "`{text}`: the name must be letters, digits, `.`, `_` or `-`"
            ));
        }
        if matches!(name, "pinned" | "unpinned") {
            return Err(format!(
                "`{text}`: `{name}` is taken by our own runs; choose another name"
            ));
        }
        if template.split_whitespace().next().is_none() {
            return Err(format!("`{text}`: the command template is empty"));
        }
        Ok(OtherTracker {
            name: name.to_string(),
            template: template.trim().to_string(),
        })
    }
}

/// Parses a worker-count list such as `1,2,4,8` or `1-4,8`.
pub fn parse_worker_counts(text: &str) -> Result<Vec<usize>, String> {
    let mut counts = Vec::new();
    for part in text.split(',').map(str::trim) {
        let num = |s: &str| match s.trim().parse::<usize>() {
            Ok(n) if n > 0 => Ok(n),
            _ => Err(format!(
                "`{s}` in `{text}` is not a worker count (a whole number above 0)"
            )),
        };
        match part.split_once('-') {
            Some((lo, hi)) => {
                let (lo, hi) = (num(lo)?, num(hi)?);
                if lo > hi {
                    return Err(format!("range `{part}` in `{text}` runs backwards"));
                }
                counts.extend(lo..=hi);
            }
            None => counts.push(num(part)?),
        }
    }
    Ok(counts)
}

impl CompareConfig {
    fn validate(&self) -> Result<(), String> {
        if self.max_workers == Some(0) {
            return Err("`compare.max_workers` must be at least 1".into());
        }
        if let Some(counts) = &self.worker_counts {
            if counts.is_empty() || counts.contains(&0) {
                return Err(
                    "`compare.worker_counts` must list counts of at least 1 (or be left out)"
                        .into(),
                );
            }
            if self.max_workers.is_some() {
                return Err(
                    "give `compare.worker_counts` or `compare.max_workers`, not both".into(),
                );
            }
        }
        let mut names = Vec::new();
        for text in &self.other {
            let other = OtherTracker::parse(text).map_err(|e| format!("`compare.other`: {e}"))?;
            if names.contains(&other.name) {
                return Err(format!(
                    "`compare.other`: the name `{}` is given twice",
                    other.name
                ));
            }
            names.push(other.name);
        }
        Ok(())
    }

    /// The other trackers, in the order given.
    pub fn others(&self) -> Result<Vec<OtherTracker>, String> {
        self.other.iter().map(|t| OtherTracker::parse(t)).collect()
    }
}

impl UdpMix {
    /// connect, announce, scrape.
    pub fn as_array(&self) -> [u32; 3] {
        [self.connect, self.announce, self.scrape]
    }
}

impl HttpMix {
    /// announce, scrape.
    pub fn as_array(&self) -> [u32; 2] {
        [self.announce, self.scrape]
    }
}

impl Config {
    pub fn load(path: &Path) -> Result<Config, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read {}: {e}", path.display()))?;
        Self::parse(&text).map_err(|e| format!("{}: {e}", path.display()))
    }

    pub fn parse(text: &str) -> Result<Config, String> {
        toml::from_str(text).map_err(|e| e.to_string())
    }

    /// Checks what the model does not (it checks the traffic itself).
    pub fn validate(&self) -> Result<(), String> {
        if !(self.duration_secs.is_finite() && self.duration_secs > 0.0) {
            return Err("`duration_secs` must be above 0".into());
        }
        if self.timeout_ms == 0 {
            return Err("`timeout_ms` must be above 0".into());
        }
        if let Some(rate) = self.rate {
            if !(rate.is_finite() && rate > 0.0) {
                return Err("`rate` must be above 0 (leave it out for a closed loop)".into());
            }
        }
        if self.workers == Some(0) {
            return Err("`workers` must be at least 1".into());
        }
        if self.udp.sources_per_worker == 0 {
            return Err("`udp.sources_per_worker` must be at least 1".into());
        }
        if matches!(self.udp.in_flight, Some(0 | 65536..)) {
            return Err("`udp.in_flight` must be within 1..=65535".into());
        }
        if self.http.connections_per_worker == 0 {
            return Err("`http.connections_per_worker` must be at least 1".into());
        }
        if self.http.passkey_first && self.traffic.passkeys.is_none() {
            return Err("`http.passkey_first` needs `traffic.passkeys`".into());
        }
        if self.ws.connections == 0 {
            return Err("`ws.connections` must be at least 1".into());
        }
        if self.ws.offers > MAX_WS_OFFERS {
            return Err(format!("`ws.offers` must be at most {MAX_WS_OFFERS}"));
        }
        if !(0.0..=1.0).contains(&self.ws.answer_share) {
            return Err("`ws.answer_share` must be within 0..=1".into());
        }
        if !(self.ws.hold_secs.is_finite() && self.ws.hold_secs >= 0.0) {
            return Err("`ws.hold_secs` must be 0 or more".into());
        }
        self.compare.validate()
    }

    /// Requests in flight per UDP source.
    pub fn udp_in_flight(&self) -> u32 {
        self.udp
            .in_flight
            .unwrap_or(if self.rate.is_some() { 1024 } else { 16 })
    }
}

/// Parses `A:B:C` weights (as many as `N`).
pub fn parse_weights<const N: usize>(text: &str) -> Result<[u32; N], String> {
    let parts: Vec<&str> = text.split(':').collect();
    if parts.len() != N {
        return Err(format!("`{text}`: expected {N} weights separated by `:`"));
    }
    let mut out = [0u32; N];
    for (slot, part) in out.iter_mut().zip(parts) {
        *slot = part
            .trim()
            .parse()
            .map_err(|_| format!("`{part}` in `{text}` is not a whole number"))?;
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_key_is_read() {
        let text = r#"
            target = "127.0.0.1:7000"
            duration_secs = 2.5
            workers = 2
            cpus = "1-2"
            rate = 50000.0
            json = "out.json"
            timeout_ms = 500
            seed = 9
            progress = false
            [traffic]
            torrents = 10
            peers = 20
            zipf_exponent = 0.8
            seeder_probability = 0.5
            numwant = -1
            scrape_hashes = 3
            passkeys = "keys.txt"
            info_hashes = "hashes.txt"
            [traffic.events]
            none = 1
            started = 2
            completed = 3
            stopped = 4
            [udp]
            sources_per_worker = 4
            in_flight = 32
            [udp.mix]
            connect = 1
            announce = 2
            scrape = 3
            [http]
            connections_per_worker = 8
            insecure = true
            ca = "ca.pem"
            passkey_first = true
            [http.mix]
            announce = 5
            scrape = 6
            [ws]
            connections = 1000
            offers = 5
            answer_share = 0.25
            hold_secs = 2.0
            ready_file = "ready"
            insecure = true
            ca = "ws-ca.pem"
            [ws.mix]
            announce = 7
            scrape = 8
            [compare]
            tracker_cmd = "{tracker} --udp {addr}"
            tracker_cpus = "4-7"
            worker_counts = [1, 2, 4]
            other = ["aquatic=aquatic_udp -c aquatic-{workers}.toml"]
            out = "scaling"
        "#;
        let config = Config::parse(text).unwrap();
        config.validate().unwrap();
        assert_eq!(config.target.as_deref(), Some("127.0.0.1:7000"));
        assert_eq!(config.duration_secs, 2.5);
        assert_eq!(config.workers, Some(2));
        assert_eq!(config.cpus.as_deref(), Some("1-2"));
        assert_eq!(config.rate, Some(50000.0));
        assert_eq!(config.json, Some(PathBuf::from("out.json")));
        assert_eq!(config.timeout_ms, 500);
        assert_eq!(config.seed, 9);
        assert!(!config.progress);
        assert_eq!(config.traffic.torrents, 10);
        assert_eq!(config.traffic.peers, 20);
        assert_eq!(config.traffic.zipf_exponent, 0.8);
        assert_eq!(config.traffic.seeder_probability, 0.5);
        assert_eq!(config.traffic.numwant, -1);
        assert_eq!(config.traffic.scrape_hashes, 3);
        assert_eq!(config.traffic.events.as_array(), [1, 2, 3, 4]);
        assert_eq!(config.traffic.passkeys, Some(PathBuf::from("keys.txt")));
        assert_eq!(
            config.traffic.info_hashes,
            Some(PathBuf::from("hashes.txt"))
        );
        assert_eq!(config.udp.sources_per_worker, 4);
        assert_eq!(config.udp_in_flight(), 32);
        assert_eq!(
            config.udp.mix,
            UdpMix {
                connect: 1,
                announce: 2,
                scrape: 3
            }
        );
        assert_eq!(config.http.connections_per_worker, 8);
        assert!(config.http.insecure);
        assert_eq!(config.http.ca, Some(PathBuf::from("ca.pem")));
        assert!(config.http.passkey_first);
        assert_eq!(
            config.http.mix,
            HttpMix {
                announce: 5,
                scrape: 6
            }
        );
        let ws = &config.ws;
        assert_eq!(ws.connections, 1000);
        assert_eq!(ws.offers, 5);
        assert_eq!(ws.answer_share, 0.25);
        assert_eq!(ws.hold_secs, 2.0);
        assert_eq!(ws.ready_file, Some(PathBuf::from("ready")));
        assert!(ws.insecure);
        assert_eq!(ws.ca, Some(PathBuf::from("ws-ca.pem")));
        assert_eq!(ws.mix.as_array(), [7, 8]);
        let c = &config.compare;
        assert_eq!(c.tracker_cmd.as_deref(), Some("{tracker} --udp {addr}"));
        assert_eq!(c.tracker_cpus.as_deref(), Some("4-7"));
        assert_eq!(c.max_workers, None);
        assert_eq!(c.worker_counts, Some(vec![1, 2, 4]));
        assert_eq!(
            c.others().unwrap(),
            [OtherTracker {
                name: "aquatic".into(),
                template: "aquatic_udp -c aquatic-{workers}.toml".into()
            }]
        );
        assert_eq!(c.out, Some(PathBuf::from("scaling")));
    }

    #[test]
    fn an_empty_file_gives_the_defaults() {
        let config = Config::parse("").unwrap();
        assert_eq!(config, Config::default());
        assert_eq!(config.traffic.torrents, 1_000_000);
        assert_eq!(config.traffic.peers, 2_000_000);
        assert_eq!(config.udp.mix.as_array(), [50, 50, 1]);
        assert_eq!(config.http.mix.as_array(), [99, 1]);
        assert_eq!(config.ws.mix.as_array(), [99, 1]);
        assert_eq!(config.ws.offers, 10);
        assert_eq!(config.udp_in_flight(), 16);
        config.validate().unwrap();
    }

    #[test]
    fn unknown_keys_are_refused() {
        for text in [
            "targt = \"x\"",
            "[traffic]\ntorents = 1",
            "[udp.mix]\nannounces = 1",
            "[traffic.events]\npaused = 1",
            "[compare]\nothers = []",
            "[bogus]",
        ] {
            assert!(Config::parse(text).is_err(), "{text}");
        }
    }

    #[test]
    fn bad_values_are_refused() {
        let cases = [
            "duration_secs = 0.0",
            "timeout_ms = 0",
            "rate = -1.0",
            "workers = 0",
            "[udp]\nsources_per_worker = 0",
            "[udp]\nin_flight = 70000",
            "[http]\nconnections_per_worker = 0",
            "[ws]\nconnections = 0",
            "[ws]\noffers = 101",
            "[ws]\nanswer_share = 1.5",
            "[ws]\nhold_secs = -1.0",
            "[compare]\nmax_workers = 0",
            "[compare]\nworker_counts = []",
            "[compare]\nworker_counts = [1, 0]",
            "[compare]\nworker_counts = [1]\nmax_workers = 2",
            "[compare]\nother = [\"no template\"]",
            "[compare]\nother = [\"a=x\", \"a=y\"]",
        ];
        for text in cases {
            let config = Config::parse(text).unwrap();
            assert!(config.validate().is_err(), "{text}");
        }
    }

    #[test]
    fn worker_counts_parse() {
        assert_eq!(parse_worker_counts("1,2,4,8").unwrap(), [1, 2, 4, 8]);
        assert_eq!(parse_worker_counts("1-3, 8").unwrap(), [1, 2, 3, 8]);
        assert_eq!(parse_worker_counts("4").unwrap(), [4]);
        for bad in ["", "0", "1,,2", "two", "4-2", "-1", "1.5"] {
            assert!(parse_worker_counts(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn other_trackers_parse() {
        let other =
            OtherTracker::parse("aquatic_udp-io=taskset -c {cpus} aquatic_udp -c a-{workers}.toml")
                .unwrap();
        assert_eq!(other.name, "aquatic_udp-io");
        assert_eq!(
            other.template,
            "taskset -c {cpus} aquatic_udp -c a-{workers}.toml"
        );
        // Only the first `=` separates: the template may hold more.
        assert_eq!(
            OtherTracker::parse("x=run --opt=1").unwrap().template,
            "run --opt=1"
        );
        for bad in [
            "no-equals-sign",
            "=cmd",
            "name=",
            "name=   ",
            "two words=cmd",
            "a|b=cmd",
            "pinned=cmd",
            "unpinned=cmd",
        ] {
            assert!(OtherTracker::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn weights_parse() {
        assert_eq!(parse_weights::<3>("50:50:1").unwrap(), [50, 50, 1]);
        assert!(parse_weights::<3>("50:50").is_err());
        assert!(parse_weights::<2>("a:1").is_err());
    }
}
