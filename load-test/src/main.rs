//! `load-test`: drives a BEP 15 (UDP), HTTP(S) or WebTorrent (WebSocket)
//! tracker on loopback with a realistic traffic model, checks every answer,
//! and reports rates, errors, time-outs and latency. Wiring only; see the
//! modules.

use clap::{Args, Parser, Subcommand};
use std::path::PathBuf;
use std::process::ExitCode;

use load_test::config::{
    parse_weights, parse_worker_counts, Config, EventWeights, HttpMix, UdpMix,
};
use load_test::{compare, http, stats, udp, ws};
use tracker_proto::Hex;

/// Load generator for BEP 15 (UDP), HTTP(S) and WebTorrent (WebSocket)
/// BitTorrent trackers, on loopback.
#[derive(Parser, Debug)]
#[command(name = "load-test", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand, Debug)]
enum Command {
    /// Load a UDP tracker (BEP 15): connect, announce and scrape.
    Udp(RunArgs),
    /// Load an HTTP or HTTPS tracker over keep-alive connections.
    Http(RunArgs),
    /// Load a WebTorrent tracker over WebSocket (ws:// or wss://):
    /// announces with WebRTC offers, answers to the offers relayed, scrapes.
    Ws(RunArgs),
    /// Start a tracker at 1..N workers (or a list of counts), pinned and
    /// unpinned, and other trackers at the same counts, run the same load
    /// against each, and write a Markdown table and an SVG plot.
    Compare(CompareArgs),
    /// Print the info-hashes of the traffic model's torrents, one in hex per
    /// line: the whitelist a tracker that takes only listed torrents
    /// (Debian's opentracker) needs to serve the load.
    InfoHashes(InfoHashesArgs),
}

#[derive(Args, Debug)]
struct InfoHashesArgs {
    /// Distinct torrents, as given to `udp` (default 1000000).
    #[arg(long, value_name = "N")]
    torrents: Option<u64>,
    /// Seed of the traffic model, as given to `udp` (default 1).
    #[arg(long)]
    seed: Option<u64>,
}

/// Writes the model's info-hashes, hex, a line each.
fn info_hashes(args: &InfoHashesArgs) -> Result<(), String> {
    use std::io::Write;
    let defaults = Config::default();
    let seed = args.seed.unwrap_or(defaults.seed);
    let torrents = args.torrents.unwrap_or(defaults.traffic.torrents);
    let mut out = std::io::BufWriter::new(std::io::stdout().lock());
    for t in 0..torrents {
        let hash = load_test::model::info_hash_of(seed, t);
        writeln!(out, "{}", Hex(&hash.0)).map_err(|e| format!("cannot write: {e}"))?;
    }
    out.flush().map_err(|e| format!("cannot write: {e}"))
}

/// Every flag has a key of the same meaning under `[compare]` in the
/// `--config` file; flags win.
#[derive(Args, Debug)]
struct CompareArgs {
    /// Our tracker's command. {tracker} (the `tracker` binary beside this
    /// one), {addr} (of --target), {workers}, {cpus} (--tracker-cpus), {pin}
    /// (--pin or --no-pin) and {config} (a file turning off the protocols not
    /// under test) are filled in. Default: `{tracker} -c {config} --udp {addr}
    /// --workers {workers} --cpus {cpus} {pin}` (--http or --https for http(s):// and
    /// ws(s):// URLs).
    /// [key: compare.tracker_cmd]
    #[arg(long, value_name = "TEMPLATE")]
    tracker_cmd: Option<String>,
    /// CPUs for the trackers (default: those not in --cpus).
    /// [key: compare.tracker_cpus]
    #[arg(long, value_name = "LIST")]
    tracker_cpus: Option<String>,
    /// Worker counts 1..=N (default: the number of tracker CPUs).
    /// [key: compare.max_workers]
    #[arg(long, value_name = "N", conflicts_with = "worker_counts")]
    max_workers: Option<usize>,
    /// Worker counts to run instead of 1..=N, e.g. 1,2,4,8 or 1-4.
    /// [key: compare.worker_counts = [1, 2, 4, 8]]
    #[arg(long, value_name = "LIST")]
    worker_counts: Option<String>,
    /// Another tracker to run once at each worker count, as NAME=TEMPLATE;
    /// repeatable, one table column and plot line each. {addr}, {workers}
    /// and {cpus} are filled in; it pins itself, or not, as its own
    /// configuration says. E.g. `aquatic=taskset -c {cpus} aquatic_udp -c
    /// dir/aquatic-{workers}.toml`. [key: compare.other = ["NAME=TEMPLATE"]]
    #[arg(long, value_name = "NAME=TEMPLATE")]
    other: Vec<String>,
    /// Where the table (compare.md), the plot (compare.svg), each run's JSON
    /// summary and the tracker logs go (default: compare). [key: compare.out]
    #[arg(long, value_name = "DIR")]
    out: Option<PathBuf>,
    #[command(flatten)]
    run: RunArgs,
}

impl CompareArgs {
    /// The config file (or defaults) with the load's and compare's flags on
    /// top.
    fn config(&self) -> Result<Config, String> {
        let mut config = self.run.config(Protocol::of(self.run.target.as_deref()))?;
        let c = &mut config.compare;
        set(&mut c.tracker_cmd, self.tracker_cmd.clone().map(Some));
        set(&mut c.tracker_cpus, self.tracker_cpus.clone().map(Some));
        // A flag for one way of giving the counts replaces the file's other way.
        if self.max_workers.is_some() {
            c.worker_counts = None;
            c.max_workers = self.max_workers;
        }
        if let Some(text) = &self.worker_counts {
            c.max_workers = None;
            c.worker_counts =
                Some(parse_worker_counts(text).map_err(|e| format!("--worker-counts: {e}"))?);
        }
        if !self.other.is_empty() {
            c.other = self.other.clone();
        }
        set(&mut c.out, self.out.clone().map(Some));
        // One progress line per second over many runs is noise.
        config.progress = false;
        config.validate()?;
        Ok(config)
    }
}

/// Every flag has a key of the same meaning in the `--config` file (see the
/// README); flags win.
#[derive(Args, Debug, Default)]
struct RunArgs {
    /// TOML file with any of the options below.
    #[arg(short = 'c', long, value_name = "FILE")]
    config: Option<PathBuf>,
    /// UDP: ADDR (127.0.0.1:6969); HTTP: URL (https://127.0.0.1:8443/announce);
    /// WebSocket: URL (wss://127.0.0.1:8443/announce). Loopback only.
    /// [key: target]
    #[arg(long, value_name = "ADDR|URL")]
    target: Option<String>,
    /// Seconds of load, fractions allowed (default 10). [key: duration_secs]
    #[arg(long, value_name = "SECS")]
    duration: Option<f64>,
    /// Generator executors (default: one per CPU in --cpus, else 1). [key: workers]
    #[arg(long, value_name = "N")]
    workers: Option<usize>,
    /// CPUs for the generator, e.g. 1 or 2-3; keep them apart from the
    /// tracker's. [key: cpus]
    #[arg(long, value_name = "LIST")]
    cpus: Option<String>,
    /// Open loop at this many requests per second in total (default: closed
    /// loop). [key: rate]
    #[arg(long, value_name = "REQ_PER_SEC")]
    rate: Option<f64>,
    /// Write the summary as JSON to this file. [key: json]
    #[arg(long, value_name = "FILE")]
    json: Option<PathBuf>,
    /// Count a request unanswered after this long as a time-out (default
    /// 1000). [key: timeout_ms]
    #[arg(long, value_name = "MS")]
    timeout_ms: Option<u64>,
    /// Seed of the traffic model (default 1). [key: seed]
    #[arg(long)]
    seed: Option<u64>,
    /// No progress line. [key: progress = false]
    #[arg(long)]
    quiet: bool,
    /// Distinct torrents (default 1000000). [key: traffic.torrents]
    #[arg(long, value_name = "N")]
    torrents: Option<u64>,
    /// Distinct peers (default 2000000). [key: traffic.peers]
    #[arg(long, value_name = "N")]
    peers: Option<u32>,
    /// Popularity skew s: rank k drawn in proportion to 1/k^s (default 1.0;
    /// 0 = uniform). [key: traffic.zipf_exponent]
    #[arg(long, value_name = "S")]
    zipf_exponent: Option<f64>,
    /// Share of peers that seed (default 0.75). [key: traffic.seeder_probability]
    #[arg(long, value_name = "P")]
    seeder_probability: Option<f64>,
    /// Peers asked for per announce, -1 for the tracker's default (default
    /// 50). [key: traffic.numwant]
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    numwant: Option<i32>,
    /// A scrape asks for 1 to N info-hashes (default 10, at most 74).
    /// [key: traffic.scrape_hashes]
    #[arg(long, value_name = "N")]
    scrape_hashes: Option<usize>,
    /// Private tracker: a file of passkeys, one a line (32 letters or
    /// digits); each peer announces with one, always the same, in the path
    /// /announce/{passkey} (HTTP) or BEP 41 URLData (UDP).
    /// [key: traffic.passkeys]
    #[arg(long, value_name = "FILE")]
    passkeys: Option<PathBuf>,
    /// HTTP, with --passkeys: the passkey first in the path,
    /// /{passkey}/announce (Ocelot's form, for Gazelle sites).
    /// [key: http.passkey_first]
    #[arg(long)]
    passkey_first: bool,
    /// A file of info-hashes, 40 hex digits a line, most popular first:
    /// the only torrents asked for (a private tracker's registered ones);
    /// their number replaces --torrents. [key: traffic.info_hashes]
    #[arg(long, value_name = "FILE")]
    info_hashes: Option<PathBuf>,
    /// Event weights NONE:STARTED:COMPLETED:STOPPED (default 85:7:1:7).
    /// [key: traffic.events.*]
    #[arg(long, value_name = "W:W:W:W")]
    events: Option<String>,
    /// Request weights: UDP CONNECT:ANNOUNCE:SCRAPE (default 50:50:1), HTTP
    /// and WebSocket ANNOUNCE:SCRAPE (default 99:1). [key: udp.mix.*,
    /// http.mix.*, ws.mix.*]
    #[arg(long, value_name = "W:W[:W]")]
    mix: Option<String>,
    /// UDP: source addresses per worker, each 127.1.x.y with its own
    /// connection id (default 8; raised to give every peer its own address
    /// and port). [key: udp.sources_per_worker]
    #[arg(long, value_name = "N")]
    sources: Option<u32>,
    /// UDP: requests in flight per source (closed loop, default 16) or the most
    /// allowed (open loop, default 1024). [key: udp.in_flight]
    #[arg(long, value_name = "N")]
    in_flight: Option<u32>,
    /// HTTP: keep-alive connections per worker (default 32); WebSocket:
    /// connections in all (default 64).
    /// [key: http.connections_per_worker, ws.connections]
    #[arg(long, value_name = "N")]
    connections: Option<u32>,
    /// HTTPS, wss: do not check the certificate. [key: http.insecure,
    /// ws.insecure]
    #[arg(long)]
    insecure: bool,
    /// HTTPS, wss: PEM file of CAs to trust (default: the system's).
    /// [key: http.ca, ws.ca]
    #[arg(long, value_name = "FILE")]
    ca: Option<PathBuf>,
    /// WebSocket: WebRTC offers in an announce (default 10, as WebTorrent).
    /// [key: ws.offers]
    #[arg(long, value_name = "N")]
    offers: Option<usize>,
    /// WebSocket: share of the offers received that are answered (default
    /// 0.5). [key: ws.answer_share]
    #[arg(long, value_name = "P")]
    answer_share: Option<f64>,
    /// WebSocket: seconds the connections stay idle once all have opened and
    /// announced, before the measured load (default 0). [key: ws.hold_secs]
    #[arg(long, value_name = "SECS")]
    hold: Option<f64>,
    /// WebSocket: write this file once all connections have opened and
    /// announced (the moment to read a tracker's memory). [key: ws.ready_file]
    #[arg(long, value_name = "FILE")]
    ready_file: Option<PathBuf>,
}

/// The protocol a run speaks, from its subcommand or its target.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Protocol {
    Udp,
    Http,
    Ws,
}

impl Protocol {
    /// By the target's scheme: http(s)://, ws(s)://, else UDP.
    fn of(target: Option<&str>) -> Protocol {
        match target {
            Some(t) if t.starts_with("http") => Protocol::Http,
            Some(t) if t.starts_with("ws") => Protocol::Ws,
            _ => Protocol::Udp,
        }
    }
}

impl RunArgs {
    /// The config file (or defaults) with the flags on top.
    fn config(&self, protocol: Protocol) -> Result<Config, String> {
        let mut c = match &self.config {
            Some(path) => Config::load(path)?,
            None => Config::default(),
        };
        set(&mut c.target, self.target.clone().map(Some));
        set(&mut c.duration_secs, self.duration);
        set(&mut c.workers, self.workers.map(Some));
        set(&mut c.cpus, self.cpus.clone().map(Some));
        set(&mut c.rate, self.rate.map(Some));
        set(&mut c.json, self.json.clone().map(Some));
        set(&mut c.timeout_ms, self.timeout_ms);
        set(&mut c.seed, self.seed);
        if self.quiet {
            c.progress = false;
        }
        let t = &mut c.traffic;
        set(&mut t.torrents, self.torrents);
        set(&mut t.peers, self.peers);
        set(&mut t.zipf_exponent, self.zipf_exponent);
        set(&mut t.seeder_probability, self.seeder_probability);
        set(&mut t.numwant, self.numwant);
        set(&mut t.scrape_hashes, self.scrape_hashes);
        set(&mut t.passkeys, self.passkeys.clone().map(Some));
        set(&mut t.info_hashes, self.info_hashes.clone().map(Some));
        if let Some(text) = &self.events {
            let [none, started, completed, stopped] =
                parse_weights(text).map_err(|e| format!("--events: {e}"))?;
            t.events = EventWeights {
                none,
                started,
                completed,
                stopped,
            };
        }
        if let Some(text) = &self.mix {
            if protocol == Protocol::Udp {
                let [connect, announce, scrape] =
                    parse_weights(text).map_err(|e| format!("--mix: {e}"))?;
                c.udp.mix = UdpMix {
                    connect,
                    announce,
                    scrape,
                };
            } else {
                let [announce, scrape] = parse_weights(text).map_err(|e| format!("--mix: {e}"))?;
                let mix = HttpMix { announce, scrape };
                match protocol {
                    Protocol::Ws => c.ws.mix = mix,
                    _ => c.http.mix = mix,
                }
            }
        }
        set(&mut c.udp.sources_per_worker, self.sources);
        set(&mut c.udp.in_flight, self.in_flight.map(Some));
        if protocol == Protocol::Ws {
            set(&mut c.ws.connections, self.connections);
            c.ws.insecure |= self.insecure;
            set(&mut c.ws.ca, self.ca.clone().map(Some));
        } else {
            set(&mut c.http.connections_per_worker, self.connections);
            c.http.insecure |= self.insecure;
            set(&mut c.http.ca, self.ca.clone().map(Some));
            c.http.passkey_first |= self.passkey_first;
        }
        set(&mut c.ws.offers, self.offers);
        set(&mut c.ws.answer_share, self.answer_share);
        set(&mut c.ws.hold_secs, self.hold);
        set(&mut c.ws.ready_file, self.ready_file.clone().map(Some));
        c.validate()?;
        Ok(c)
    }
}

fn set<T>(slot: &mut T, value: Option<T>) {
    if let Some(value) = value {
        *slot = value;
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match &cli.command {
        Command::Udp(args) => args
            .config(Protocol::Udp)
            .and_then(|c| report(&c, udp::run(&c))),
        Command::Http(args) => args
            .config(Protocol::Http)
            .and_then(|c| report(&c, http::run(&c))),
        Command::Ws(args) => args
            .config(Protocol::Ws)
            .and_then(|c| report(&c, ws::run(&c))),
        Command::Compare(args) => compare(args),
        Command::InfoHashes(args) => info_hashes(args),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            eprintln!("load-test: {e}");
            ExitCode::from(2)
        }
    }
}

fn compare(args: &CompareArgs) -> Result<(), String> {
    print!("{}", compare::run(&args.config()?)?);
    Ok(())
}

/// Prints the summary and writes the JSON file.
fn report(config: &Config, summary: Result<stats::Summary, String>) -> Result<(), String> {
    let summary = summary?;
    print!("{}", summary.to_text());
    if let Some(path) = &config.json {
        std::fs::write(path, summary.to_json() + "\n")
            .map_err(|e| format!("cannot write {}: {e}", path.display()))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(args: &[&str]) -> RunArgs {
        let mut argv = vec!["load-test", "udp"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv).unwrap().command {
            Command::Udp(args) | Command::Http(args) | Command::Ws(args) => args,
            Command::Compare(args) => args.run,
            Command::InfoHashes(_) => unreachable!("parsed as udp"),
        }
    }

    #[test]
    fn flags_override_the_file() {
        let path = std::env::temp_dir().join(format!("load-test-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "target = \"127.0.0.1:1\"\nduration_secs = 3.0\n[traffic]\npeers = 10\ntorrents = 5\n",
        )
        .unwrap();
        let args = parse(&[
            "-c",
            path.to_str().unwrap(),
            "--target",
            "127.0.0.1:2",
            "--numwant",
            "-1",
            "--mix",
            "1:2:3",
            "--events",
            "4:3:2:1",
            "--in-flight",
            "7",
            "--passkeys",
            "keys.txt",
            "--info-hashes",
            "hashes.txt",
            "--quiet",
        ]);
        let c = args.config(Protocol::Udp).unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(c.target.as_deref(), Some("127.0.0.1:2"));
        assert_eq!(c.duration_secs, 3.0);
        assert_eq!(c.traffic.peers, 10);
        assert_eq!(c.traffic.torrents, 5);
        assert_eq!(c.traffic.numwant, -1);
        assert_eq!(c.udp.mix.as_array(), [1, 2, 3]);
        assert_eq!(c.traffic.events.as_array(), [4, 3, 2, 1]);
        assert_eq!(c.udp_in_flight(), 7);
        assert_eq!(c.traffic.passkeys, Some(PathBuf::from("keys.txt")));
        assert_eq!(c.traffic.info_hashes, Some(PathBuf::from("hashes.txt")));
        assert!(!c.progress);
    }

    fn parse_compare(args: &[&str]) -> Result<CompareArgs, String> {
        let mut argv = vec!["load-test", "compare", "--target", "127.0.0.1:7000"];
        argv.extend_from_slice(args);
        match Cli::try_parse_from(argv)
            .map_err(|e| e.to_string())?
            .command
        {
            Command::Compare(args) => Ok(args),
            other => panic!("parsed as {other:?}"),
        }
    }

    #[test]
    fn compare_takes_worker_counts_and_other_trackers() {
        let args = parse_compare(&[
            "--worker-counts",
            "1,2,4,8",
            "--other",
            "aquatic=taskset -c {cpus} aquatic_udp -c a-{workers}.toml",
            "--other",
            "b=b-tracker {addr}",
            "--tracker-cpus",
            "8-15",
            "--cpus",
            "0-7",
            "--out",
            "scaling",
        ])
        .unwrap();
        let c = args.config().unwrap();
        assert!(!c.progress);
        assert_eq!(c.cpus.as_deref(), Some("0-7"));
        let compare = &c.compare;
        assert_eq!(compare.worker_counts, Some(vec![1, 2, 4, 8]));
        assert_eq!(compare.max_workers, None);
        assert_eq!(compare.tracker_cpus.as_deref(), Some("8-15"));
        assert_eq!(compare.out, Some(PathBuf::from("scaling")));
        let others = compare.others().unwrap();
        assert_eq!(others.len(), 2);
        assert_eq!(others[0].name, "aquatic");
        assert_eq!(
            others[0].template,
            "taskset -c {cpus} aquatic_udp -c a-{workers}.toml"
        );
        assert_eq!(others[1].name, "b");
    }

    #[test]
    fn compare_refuses_bad_counts_and_others() {
        assert!(parse_compare(&["--worker-counts", "1,2", "--max-workers", "4"]).is_err());
        for bad in [
            &["--worker-counts", "0,1"][..],
            &["--worker-counts", "one"],
            &["--other", "no-template"],
            &["--other", "a=x", "--other", "a=y"],
            &["--other", "pinned=x"],
        ] {
            assert!(parse_compare(bad).unwrap().config().is_err(), "{bad:?}");
        }
    }

    #[test]
    fn compare_flags_override_the_file() {
        let path =
            std::env::temp_dir().join(format!("load-test-compare-{}.toml", std::process::id()));
        std::fs::write(
            &path,
            "[compare]\nmax_workers = 3\nother = [\"a=x {workers}\"]\nout = \"o\"\n",
        )
        .unwrap();
        let file = path.to_str().unwrap();
        let from_file = parse_compare(&["-c", file]).unwrap().config().unwrap();
        let flagged = parse_compare(&["-c", file, "--worker-counts", "2,4", "--other", "b=y"])
            .unwrap()
            .config()
            .unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!(from_file.compare.max_workers, Some(3));
        assert_eq!(from_file.compare.others().unwrap()[0].name, "a");
        assert_eq!(from_file.compare.out, Some(PathBuf::from("o")));
        // --worker-counts replaces the file's max_workers; --other its list.
        assert_eq!(flagged.compare.max_workers, None);
        assert_eq!(flagged.compare.worker_counts, Some(vec![2, 4]));
        let others = flagged.compare.others().unwrap();
        assert_eq!(others.len(), 1);
        assert_eq!(others[0].name, "b");
    }

    #[test]
    fn http_mix_has_two_weights() {
        let args = parse(&["--mix", "9:1"]);
        assert_eq!(
            args.config(Protocol::Http).unwrap().http.mix.as_array(),
            [9, 1]
        );
        assert!(args.config(Protocol::Udp).is_err());
    }

    #[test]
    fn ws_flags_go_to_the_ws_keys() {
        let args = parse(&[
            "--target",
            "wss://127.0.0.1:8443/announce",
            "--connections",
            "10000",
            "--insecure",
            "--mix",
            "3:1",
            "--offers",
            "5",
            "--answer-share",
            "0.2",
            "--hold",
            "3",
            "--ready-file",
            "ready",
        ]);
        let c = args.config(Protocol::Ws).unwrap();
        assert_eq!(c.ws.connections, 10000);
        assert!(c.ws.insecure && !c.http.insecure);
        assert_eq!(c.ws.mix.as_array(), [3, 1]);
        assert_eq!(c.http.mix.as_array(), [99, 1]);
        assert_eq!(c.http.connections_per_worker, 32);
        assert_eq!(c.ws.offers, 5);
        assert_eq!(c.ws.answer_share, 0.2);
        assert_eq!(c.ws.hold_secs, 3.0);
        assert_eq!(c.ws.ready_file, Some(PathBuf::from("ready")));
        assert_eq!(Protocol::of(Some("ws://127.0.0.1:1/")), Protocol::Ws);
        assert_eq!(Protocol::of(Some("https://127.0.0.1:1/")), Protocol::Http);
        assert_eq!(Protocol::of(Some("127.0.0.1:1")), Protocol::Udp);
        assert!(parse(&["--answer-share", "2"])
            .config(Protocol::Ws)
            .is_err());
    }
}
