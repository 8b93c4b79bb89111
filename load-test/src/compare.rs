//! `load-test compare`: starts a tracker command at each worker count (1..N,
//! or a list such as 1, 2, 4, 8), pinned and unpinned, and each other tracker
//! named with `--other` once at each count, runs the same load against each,
//! and writes a Markdown table (with our scaling efficiency) and an SVG plot
//! of responses per second against workers. The table and the plot are pure
//! functions of the results; the loop around them starts processes.

use std::fmt::Write as _;
use std::net::{SocketAddr, TcpStream, UdpSocket};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::http_session::HttpTarget;
use crate::stats::Summary;

/// One measurement.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Measured {
    pub responses_per_sec: f64,
    pub p99_us: f64,
    pub invalid: u64,
    pub timeouts: u64,
}

impl Measured {
    pub fn of(summary: &Summary) -> Measured {
        Measured {
            responses_per_sec: summary.responses_per_sec,
            p99_us: summary.latency.p99_us,
            invalid: summary.invalid,
            timeouts: summary.timeouts,
        }
    }
}

/// The results at one worker count; `None` where that run was not possible
/// (more pinned workers than CPUs) or failed.
#[derive(Clone, Debug, PartialEq)]
pub struct Point {
    pub workers: usize,
    pub pinned: Option<Measured>,
    pub unpinned: Option<Measured>,
    /// One per other tracker, in the order of their names.
    pub others: Vec<Option<Measured>>,
}

/// The command for one run: `template` split on whitespace, with `{name}`
/// replaced by its value in every word.
pub fn expand(template: &str, values: &[(&str, String)]) -> Vec<String> {
    template
        .split_whitespace()
        .map(|word| {
            values.iter().fold(word.to_string(), |w, (name, value)| {
                w.replace(&format!("{{{name}}}"), value)
            })
        })
        .filter(|w| !w.is_empty())
        .collect()
}

/// The `{name}` placeholders of `template` that are not in `known`: a typo
/// would otherwise reach the tracker as a literal argument.
pub fn unknown_placeholders(template: &str, known: &[&str]) -> Vec<String> {
    let mut unknown = Vec::new();
    let mut rest = template;
    while let Some(open) = rest.find('{') {
        rest = &rest[open + 1..];
        let Some(close) = rest.find('}') else { break };
        let name = &rest[..close];
        if !name.is_empty()
            && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
            && !known.contains(&name)
            && !unknown.iter().any(|u: &String| u == name)
        {
            unknown.push(name.to_string());
        }
    }
    unknown
}

fn check_placeholders(what: &str, template: &str, known: &[&str]) -> Result<(), String> {
    let unknown = unknown_placeholders(template, known);
    if unknown.is_empty() {
        return Ok(());
    }
    Err(format!(
        "{what}: unknown placeholder(s) {{{}}}; known: {{{}}}",
        unknown.join("}, {"),
        known.join("}, {")
    ))
}

/// The worker counts to run: the list asked for (sorted, once each), else
/// 1..=`max_workers`, else one per tracker CPU.
pub fn worker_counts(
    asked: Option<&[usize]>,
    max_workers: Option<usize>,
    tracker_cpus: usize,
) -> Vec<usize> {
    match asked {
        Some(counts) => {
            let mut counts = counts.to_vec();
            counts.sort_unstable();
            counts.dedup();
            counts
        }
        None => (1..=max_workers.unwrap_or(tracker_cpus)).collect(),
    }
}

/// Scaling efficiency: responses/s at `workers` over `workers` times the
/// 1-worker figure (1.0 = linear scaling).
pub fn efficiency(workers: usize, rate: f64, one_worker_rate: f64) -> Option<f64> {
    (workers > 0 && one_worker_rate > 0.0).then(|| rate / (workers as f64 * one_worker_rate))
}

/// The efficiency of one of our series at `point`, from the 1-worker point of
/// the same series.
fn series_efficiency(
    points: &[Point],
    point: &Point,
    series: fn(&Point) -> Option<Measured>,
) -> Option<f64> {
    let one = points.iter().find(|p| p.workers == 1).and_then(series)?;
    efficiency(
        point.workers,
        series(point)?.responses_per_sec,
        one.responses_per_sec,
    )
}

fn cell(m: Option<Measured>, f: impl Fn(&Measured) -> String) -> String {
    m.as_ref().map_or_else(|| "–".to_string(), f)
}

/// The Markdown table of the results: ours pinned and unpinned with their
/// scaling efficiency, then a column per other tracker (`others` names them).
pub fn markdown(title: &str, others: &[String], points: &[Point]) -> String {
    let mut out = format!("### {title}\n\n");
    out += "| workers | ours pinned resp/s | ours unpinned resp/s | pinned efficiency | unpinned efficiency |";
    for name in others {
        let _ = write!(out, " {name} resp/s |");
    }
    out += " pinned p99 (µs) | unpinned p99 (µs) | invalid | time-outs |\n|";
    out += &"---:|".repeat(9 + others.len());
    out += "\n";
    let rate = |m: &Measured| format!("{:.0}", m.responses_per_sec);
    let p99 = |m: &Measured| format!("{:.0}", m.p99_us);
    for p in points {
        let runs = || {
            [p.pinned, p.unpinned]
                .into_iter()
                .chain(p.others.iter().copied())
                .flatten()
        };
        let ratio = |series: fn(&Point) -> Option<Measured>| {
            series_efficiency(points, p, series)
                .map_or_else(|| "–".to_string(), |e| format!("{e:.2}"))
        };
        let _ = write!(
            out,
            "| {} | {} | {} | {} | {} |",
            p.workers,
            cell(p.pinned, rate),
            cell(p.unpinned, rate),
            ratio(|p| p.pinned),
            ratio(|p| p.unpinned),
        );
        for i in 0..others.len() {
            let _ = write!(out, " {} |", cell(p.others.get(i).copied().flatten(), rate));
        }
        let _ = writeln!(
            out,
            " {} | {} | {} | {} |",
            cell(p.pinned, p99),
            cell(p.unpinned, p99),
            runs().map(|m| m.invalid).sum::<u64>(),
            runs().map(|m| m.timeouts).sum::<u64>(),
        );
    }
    out += "\nEfficiency: responses/s at N workers over N times the 1-worker figure of \
            the same series (1.00 = linear). Invalid answers and time-outs are summed \
            over every run of the row; each run's JSON summary has its own.\n";
    out
}

/// Colours of the plot's series, in order (repeated past the last).
const COLOURS: [&str; 8] = [
    "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f",
];

/// A line plot of responses per second against workers: ours pinned, ours
/// unpinned and each other tracker, with a legend.
pub fn svg(title: &str, others: &[String], points: &[Point]) -> String {
    const W: f64 = 640.0;
    const H: f64 = 400.0;
    const LEFT: f64 = 80.0;
    const RIGHT: f64 = 20.0;
    const TOP: f64 = 40.0;
    const BOTTOM: f64 = 50.0;
    let mut series: Vec<(String, Vec<(usize, f64)>)> = vec![
        ("ours pinned".to_string(), Vec::new()),
        ("ours unpinned".to_string(), Vec::new()),
    ];
    series.extend(others.iter().map(|name| (name.clone(), Vec::new())));
    for p in points {
        let measured = [p.pinned, p.unpinned]
            .into_iter()
            .chain((0..others.len()).map(|i| p.others.get(i).copied().flatten()));
        for ((_, line), m) in series.iter_mut().zip(measured) {
            if let Some(m) = m {
                line.push((p.workers, m.responses_per_sec));
            }
        }
    }
    let max_workers = points.iter().map(|p| p.workers).max().unwrap_or(1).max(2) as f64;
    let max_rate = series
        .iter()
        .flat_map(|(_, line)| line.iter().map(|&(_, rate)| rate))
        .fold(0.0, f64::max);
    let top_rate = nice_ceiling(max_rate.max(1.0));
    let x = |w: f64| LEFT + (w - 1.0) / (max_workers - 1.0) * (W - LEFT - RIGHT);
    let y = |r: f64| H - BOTTOM - r / top_rate * (H - TOP - BOTTOM);
    let mut out = format!(
        "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"{W}\" height=\"{H}\" viewBox=\"0 0 {W} {H}\" font-family=\"sans-serif\" font-size=\"12\">\n\
         <rect width=\"100%\" height=\"100%\" fill=\"white\"/>\n\
         <text x=\"{}\" y=\"22\" text-anchor=\"middle\" font-size=\"15\">{}</text>\n",
        W / 2.0,
        escape(title)
    );
    // Axes, grid and ticks.
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{}\" x2=\"{}\" y2=\"{}\" stroke=\"black\"/>",
        H - BOTTOM,
        W - RIGHT,
        H - BOTTOM
    );
    let _ = writeln!(
        out,
        "<line x1=\"{LEFT}\" y1=\"{TOP}\" x2=\"{LEFT}\" y2=\"{}\" stroke=\"black\"/>",
        H - BOTTOM
    );
    for i in 0..=5 {
        let r = top_rate * f64::from(i) / 5.0;
        let _ = writeln!(
            out,
            "<line x1=\"{LEFT}\" y1=\"{0:.1}\" x2=\"{1}\" y2=\"{0:.1}\" stroke=\"#ddd\"/>\
             <text x=\"{2}\" y=\"{3:.1}\" text-anchor=\"end\">{4}</text>",
            y(r),
            W - RIGHT,
            LEFT - 6.0,
            y(r) + 4.0,
            crate::stats::si(r)
        );
    }
    // A tick at each count measured: 1..=64 in steps of one would crowd.
    let mut ticks: Vec<usize> = points.iter().map(|p| p.workers).collect();
    ticks.sort_unstable();
    ticks.dedup();
    for w in ticks {
        let _ = writeln!(
            out,
            "<text x=\"{:.1}\" y=\"{}\" text-anchor=\"middle\">{w}</text>",
            x(w as f64),
            H - BOTTOM + 18.0
        );
    }
    let _ = writeln!(
        out,
        "<text x=\"{}\" y=\"{}\" text-anchor=\"middle\">workers</text>\n\
         <text x=\"18\" y=\"{}\" text-anchor=\"middle\" transform=\"rotate(-90 18 {})\">responses/s</text>",
        (LEFT + W - RIGHT) / 2.0,
        H - 12.0,
        (TOP + H - BOTTOM) / 2.0,
        (TOP + H - BOTTOM) / 2.0
    );
    for (i, (_, line)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        if !line.is_empty() {
            let path: Vec<String> = line
                .iter()
                .map(|&(w, r)| format!("{:.1},{:.1}", x(w as f64), y(r)))
                .collect();
            let _ = writeln!(
                out,
                "<polyline fill=\"none\" stroke=\"{colour}\" stroke-width=\"2\" points=\"{}\"/>",
                path.join(" ")
            );
        }
        for &(w, r) in line {
            let _ = writeln!(
                out,
                "<circle cx=\"{:.1}\" cy=\"{:.1}\" r=\"3.5\" fill=\"{colour}\"/>",
                x(w as f64),
                y(r)
            );
        }
    }
    // The legend, top left, where rising lines leave room, over a white
    // backing so that a line crossing it does not hide a name. A series with
    // no point is still named, so a missing line is seen to be missing.
    let longest = series
        .iter()
        .map(|(name, _)| name.chars().count())
        .max()
        .unwrap_or(0);
    let _ = writeln!(
        out,
        "<rect x=\"{}\" y=\"{}\" width=\"{:.1}\" height=\"{}\" fill=\"white\" fill-opacity=\"0.85\"/>",
        LEFT + 8.0,
        TOP - 4.0,
        // About 7 px a character at 12 px sans-serif, plus the swatch.
        44.0 + 7.0 * longest as f64,
        18.0 * series.len() as f64 + 6.0
    );
    for (i, (name, _)) in series.iter().enumerate() {
        let colour = COLOURS[i % COLOURS.len()];
        let ly = TOP + 8.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            "<line x1=\"{0}\" y1=\"{ly}\" x2=\"{1}\" y2=\"{ly}\" stroke=\"{colour}\" stroke-width=\"2\"/>\
             <text x=\"{2}\" y=\"{3}\">{4}</text>",
            LEFT + 14.0,
            LEFT + 38.0,
            LEFT + 44.0,
            ly + 4.0,
            escape(name)
        );
    }
    out += "</svg>\n";
    out
}

/// 1, 2 or 5 times a power of ten, at least `x`.
fn nice_ceiling(x: f64) -> f64 {
    let power = 10f64.powf(x.log10().floor());
    [1.0, 2.0, 5.0, 10.0]
        .iter()
        .map(|m| m * power)
        .find(|&c| c >= x)
        .unwrap_or(10.0 * power)
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
}

/// Placeholders of our tracker's command template.
const OUR_PLACEHOLDERS: [&str; 6] = ["tracker", "addr", "workers", "cpus", "pin", "config"];
/// Placeholders of another tracker's command template: it pins itself, or
/// not, as its own configuration says.
const OTHER_PLACEHOLDERS: [&str; 3] = ["addr", "workers", "cpus"];

enum Proto {
    Udp(SocketAddr),
    Http(SocketAddr, bool),
}

impl Proto {
    /// Whether something serves the target: a UDP connect is answered, or a
    /// TCP connection taken.
    fn answers(&self) -> bool {
        match *self {
            Proto::Udp(addr) => udp_answers(addr),
            Proto::Http(addr, _) => {
                TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok()
            }
        }
    }
}

/// Runs the whole comparison (`config.compare` says what to run) and returns
/// the Markdown table.
pub fn run(config: &Config) -> Result<String, String> {
    use tracker_runtime::workers;
    let options = &config.compare;
    let others = options.others()?;
    let target = config.target.as_deref().ok_or("--target is required")?;
    let proto = if target.starts_with("http") {
        let t = HttpTarget::parse(target)?;
        Proto::Http(t.addr, t.tls)
    } else {
        Proto::Udp(crate::udp::parse_target(target)?)
    };
    let addr = match proto {
        Proto::Udp(a) | Proto::Http(a, _) => a,
    };
    let allowed = workers::allowed_cpus()?;
    let load_cpus = match &config.cpus {
        Some(list) => workers::parse_cpu_list(list)?,
        None => Vec::new(),
    };
    let tracker_cpus = match &options.tracker_cpus {
        Some(list) => workers::parse_cpu_list(list)?,
        None => allowed
            .iter()
            .copied()
            .filter(|c| !load_cpus.contains(c))
            .collect(),
    };
    if tracker_cpus.is_empty() {
        return Err("no CPU left for the tracker: give --tracker-cpus".into());
    }
    let counts = worker_counts(
        options.worker_counts.as_deref(),
        options.max_workers,
        tracker_cpus.len(),
    );
    let flag = match proto {
        Proto::Udp(_) => "--udp",
        Proto::Http(_, false) => "--http",
        Proto::Http(_, true) => "--https",
    };
    let template = options.tracker_cmd.clone().unwrap_or_else(|| {
        format!("{{tracker}} -c {{config}} {flag} {{addr}} --workers {{workers}} --cpus {{cpus}} {{pin}}")
    });
    // Every template is checked before the first run, not after an hour of them.
    check_placeholders("--tracker-cmd", &template, &OUR_PLACEHOLDERS)?;
    for other in &others {
        let what = format!("--other {}", other.name);
        check_placeholders(&what, &other.template, &OTHER_PLACEHOLDERS)?;
    }
    let out = options
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("compare"));
    std::fs::create_dir_all(&out).map_err(|e| format!("cannot create {}: {e}", out.display()))?;
    // Our tracker serves every protocol by default: turn off all but the one
    // under test, so nothing else is bound.
    let tracker_config = out.join("tracker.toml");
    let off = match proto {
        Proto::Udp(_) => "[http]\nlisten = []\nhttps_listen = []\n",
        Proto::Http(_, false) => "[udp]\nlisten = []\n[http]\nhttps_listen = []\n",
        Proto::Http(_, true) => "[udp]\nlisten = []\n[http]\nlisten = []\n",
    };
    // No state file: every run starts empty and none leaves swarms behind.
    // A benchmark serves as whoever runs it, root included. The load comes
    // from a few loopback addresses, each the peers of thousands: the limits
    // per client address would turn most of it away.
    let tracker_toml = format!(
        "{off}[state]\nfile = \"\"\n[privileges]\nallow_root = true\n[swarm]\n\
         max_peers_per_address_per_torrent = 0\nnew_torrents_per_address_per_minute = 0\n\
         new_torrents_per_subnet_per_minute = 0\nnew_torrents_per_network_per_minute = 0\n"
    );
    write(&tracker_config, &tracker_toml)?;
    let tracker = std::env::current_exe()
        .map_err(|e| format!("cannot find the load-test binary's folder: {e}"))?
        .with_file_name("tracker");
    let cpu_list = workers::format_cpu_list(&tracker_cpus);
    let runner = Runner {
        config,
        proto: &proto,
        out: &out,
    };

    let mut points = Vec::new();
    for &workers in &counts {
        let mut point = Point {
            workers,
            pinned: None,
            unpinned: None,
            others: Vec::new(),
        };
        for pinned in [true, false] {
            if pinned && workers > tracker_cpus.len() {
                continue;
            }
            let label = format!("{workers}-{}", if pinned { "pinned" } else { "unpinned" });
            let command = expand(
                &template,
                &[
                    ("tracker", tracker.display().to_string()),
                    ("addr", addr.to_string()),
                    ("workers", workers.to_string()),
                    ("cpus", cpu_list.clone()),
                    ("pin", if pinned { "--pin" } else { "--no-pin" }.to_string()),
                    ("config", tracker_config.display().to_string()),
                ],
            );
            let m = runner.measure(&label, &command)?;
            if pinned {
                point.pinned = m;
            } else {
                point.unpinned = m;
            }
        }
        for other in &others {
            let label = format!("{workers}-{}", other.name);
            let command = expand(
                &other.template,
                &[
                    ("addr", addr.to_string()),
                    ("workers", workers.to_string()),
                    ("cpus", cpu_list.clone()),
                ],
            );
            point.others.push(runner.measure(&label, &command)?);
        }
        points.push(point);
    }
    let title = format!(
        "{} on {target}, trackers on CPUs {cpu_list}, load on {}",
        match proto {
            Proto::Udp(_) => "UDP",
            Proto::Http(_, false) => "HTTP",
            Proto::Http(_, true) => "HTTPS",
        },
        config.cpus.as_deref().unwrap_or("any CPU"),
    );
    let names: Vec<String> = others.into_iter().map(|o| o.name).collect();
    let table = markdown(&title, &names, &points);
    write(&out.join("compare.md"), &table)?;
    write(&out.join("compare.svg"), &svg(&title, &names, &points))?;
    Ok(table)
}

/// What each run shares: the load, the protocol and the output folder.
struct Runner<'a> {
    config: &'a Config,
    proto: &'a Proto,
    out: &'a Path,
}

impl Runner<'_> {
    /// Starts `command`, waits until it serves, runs the load against it and
    /// stops it. A run that fails is reported and left out (`None`); only a
    /// target already served by something else, or a file that cannot be
    /// written, stops the comparison.
    fn measure(&self, label: &str, command: &[String]) -> Result<Option<Measured>, String> {
        eprintln!("load-test compare: {label}: {}", command.join(" "));
        // Whatever already serves the target would be measured in place of
        // this run's tracker, and of every run after it.
        if self.proto.answers() {
            return Err(format!(
                "something already serves the target before {label} started \
                 (a tracker left running?): stop it or choose another port"
            ));
        }
        let log = self.out.join(format!("{label}.log"));
        let log_file = std::fs::File::create(&log)
            .map_err(|e| format!("cannot create {}: {e}", log.display()))?;
        // A command that cannot start (a missing binary) fails its own runs
        // only; the others still measure.
        let mut child = match TrackerProcess::start(command, log_file) {
            Ok(child) => child,
            Err(e) => {
                eprintln!("load-test compare: {label}: {e}");
                return Ok(None);
            }
        };
        let ready = child.wait_ready(self.proto, Duration::from_secs(20));
        let result = ready.and_then(|()| match self.proto {
            Proto::Udp(_) => crate::udp::run(self.config),
            Proto::Http(..) => crate::http::run(self.config),
        });
        drop(child);
        match result {
            Ok(summary) => {
                write(&self.out.join(format!("{label}.json")), &summary.to_json())?;
                eprintln!(
                    "load-test compare: {label}: {:.0} responses/s",
                    summary.responses_per_sec
                );
                Ok(Some(Measured::of(&summary)))
            }
            Err(e) => {
                eprintln!("load-test compare: {label}: {e} (see {})", log.display());
                Ok(None)
            }
        }
    }
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A tracker process, killed when dropped.
struct TrackerProcess(Child);

impl TrackerProcess {
    /// Starts `command` with its output in `log`.
    fn start(command: &[String], log: std::fs::File) -> Result<Self, String> {
        let (program, args) = command.split_first().ok_or("empty tracker command")?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(
                log.try_clone()
                    .map_err(|e| format!("cannot share the log file: {e}"))?,
            )
            .stderr(log)
            .spawn()
            .map_err(|e| format!("cannot start {program}: {e}"))?;
        Ok(TrackerProcess(child))
    }

    /// Waits until the tracker answers a UDP connect or takes a TCP connection.
    fn wait_ready(&mut self, proto: &Proto, timeout: Duration) -> Result<(), String> {
        let deadline = Instant::now() + timeout;
        while Instant::now() < deadline {
            if let Ok(Some(status)) = self.0.try_wait() {
                return Err(format!("the tracker exited ({status})"));
            }
            if proto.answers() {
                return Ok(());
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        Err("the tracker did not answer in time".into())
    }
}

impl Drop for TrackerProcess {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

fn udp_answers(addr: SocketAddr) -> bool {
    let bind: SocketAddr = if addr.is_ipv4() {
        ([127, 0, 0, 1], 0).into()
    } else {
        "[::1]:0".parse().expect("an address")
    };
    let Ok(socket) = UdpSocket::bind(bind) else {
        return false;
    };
    let _ = socket.set_read_timeout(Some(Duration::from_millis(100)));
    let mut connect = Vec::new();
    tracker_proto::udp::Request::Connect(tracker_proto::udp::ConnectRequest {
        transaction_id: tracker_proto::udp::TransactionId(1),
    })
    .write(&mut connect);
    let mut buf = [0u8; 64];
    socket.send_to(&connect, addr).is_ok() && matches!(socket.recv_from(&mut buf), Ok((16, _)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn m(rate: f64) -> Option<Measured> {
        Some(Measured {
            responses_per_sec: rate,
            p99_us: 250.0,
            invalid: 0,
            timeouts: 1,
        })
    }

    fn points() -> Vec<Point> {
        vec![
            Point {
                workers: 1,
                pinned: m(150_000.0),
                unpinned: m(140_000.0),
                others: vec![],
            },
            Point {
                workers: 2,
                pinned: None,
                unpinned: m(180_000.0),
                others: vec![],
            },
        ]
    }

    /// 1, 2 and 4 workers, with two other trackers, one of which failed at 2.
    fn scaling() -> (Vec<String>, Vec<Point>) {
        let names = vec!["aquatic".to_string(), "opentracker".to_string()];
        let points = vec![
            Point {
                workers: 1,
                pinned: m(100_000.0),
                unpinned: m(80_000.0),
                others: vec![m(90_000.0), m(50_000.0)],
            },
            Point {
                workers: 2,
                pinned: m(190_000.0),
                unpinned: m(160_000.0),
                others: vec![None, m(95_000.0)],
            },
            Point {
                workers: 4,
                pinned: m(360_000.0),
                unpinned: m(240_000.0),
                others: vec![m(300_000.0), m(170_000.0)],
            },
        ];
        (names, points)
    }

    fn rows(table: &str) -> Vec<&str> {
        table.lines().filter(|l| l.starts_with("| ")).collect()
    }

    #[test]
    fn templates_expand_word_by_word() {
        let words = expand(
            "{tracker} --udp {addr}  --workers {workers} {pin}",
            &[
                ("tracker", "/x/tracker".into()),
                ("addr", "127.0.0.1:1".into()),
                ("workers", "3".into()),
                ("pin", "--no-pin".into()),
            ],
        );
        assert_eq!(
            words,
            [
                "/x/tracker",
                "--udp",
                "127.0.0.1:1",
                "--workers",
                "3",
                "--no-pin"
            ]
        );
    }

    #[test]
    fn a_placeholder_inside_a_word_is_filled_in() {
        let words = expand(
            "taskset -c {cpus} aquatic_udp -c /d/aquatic-{workers}.toml",
            &[("cpus", "8-15".into()), ("workers", "4".into())],
        );
        assert_eq!(
            words,
            [
                "taskset",
                "-c",
                "8-15",
                "aquatic_udp",
                "-c",
                "/d/aquatic-4.toml"
            ]
        );
    }

    #[test]
    fn unknown_placeholders_are_found() {
        let known = ["addr", "workers", "cpus"];
        assert!(unknown_placeholders("x -c a-{workers}.toml {addr} {cpus}", &known).is_empty());
        assert_eq!(
            unknown_placeholders("x {worker} {pin} {worker} {addr}", &known),
            ["worker", "pin"]
        );
        // Braces that are no placeholder (JSON, shell-like text) are left alone.
        assert!(unknown_placeholders("x {} {\"a\":1} {a b} {", &known).is_empty());
        let err = check_placeholders("--other a", "x {worker}", &known).unwrap_err();
        assert_eq!(
            err,
            "--other a: unknown placeholder(s) {worker}; known: {addr}, {workers}, {cpus}"
        );
    }

    #[test]
    fn worker_counts_from_a_list_or_a_maximum() {
        assert_eq!(worker_counts(Some(&[8, 1, 4, 2, 4]), None, 8), [1, 2, 4, 8]);
        assert_eq!(worker_counts(None, Some(3), 8), [1, 2, 3]);
        assert_eq!(worker_counts(None, None, 4), [1, 2, 3, 4]);
    }

    #[test]
    fn efficiency_is_against_n_times_one_worker() {
        assert_eq!(efficiency(1, 100.0, 100.0), Some(1.0));
        assert_eq!(efficiency(4, 360.0, 100.0), Some(0.9));
        assert_eq!(efficiency(2, 250.0, 100.0), Some(1.25));
        assert_eq!(efficiency(2, 100.0, 0.0), None);
        assert_eq!(efficiency(0, 100.0, 100.0), None);
    }

    #[test]
    fn the_table_has_a_row_per_worker_count() {
        let table = markdown("UDP", &[], &points());
        let rows = rows(&table);
        assert_eq!(rows.len(), 3, "{table}");
        assert_eq!(
            rows[0],
            "| workers | ours pinned resp/s | ours unpinned resp/s | pinned efficiency | unpinned efficiency | pinned p99 (µs) | unpinned p99 (µs) | invalid | time-outs |"
        );
        assert_eq!(
            rows[1],
            "| 1 | 150000 | 140000 | 1.00 | 1.00 | 250 | 250 | 0 | 2 |"
        );
        assert_eq!(rows[2], "| 2 | – | 180000 | – | 0.64 | – | 250 | 0 | 1 |");
        let alignment = table.lines().find(|l| l.starts_with("|--")).unwrap();
        assert_eq!(alignment.matches("---:").count(), 9);
    }

    #[test]
    fn the_table_has_a_column_per_other_tracker_and_the_efficiency() {
        let (names, points) = scaling();
        let table = markdown("UDP", &names, &points);
        let rows = rows(&table);
        assert_eq!(rows.len(), 4, "{table}");
        assert!(
            rows[0].contains(
                "| unpinned efficiency | aquatic resp/s | opentracker resp/s | pinned p99 (µs) |"
            ),
            "{}",
            rows[0]
        );
        let alignment = table.lines().find(|l| l.starts_with("|--")).unwrap();
        assert_eq!(alignment.matches("---:").count(), 11, "one per column");
        // Time-outs are summed over all four runs of the row (one each).
        assert_eq!(
            rows[1],
            "| 1 | 100000 | 80000 | 1.00 | 1.00 | 90000 | 50000 | 250 | 250 | 0 | 4 |"
        );
        // 190k / (2 x 100k), 160k / (2 x 80k); the failed run is a dash and
        // adds nothing to the sums.
        assert_eq!(
            rows[2],
            "| 2 | 190000 | 160000 | 0.95 | 1.00 | – | 95000 | 250 | 250 | 0 | 3 |"
        );
        // 360k / (4 x 100k), 240k / (4 x 80k).
        assert_eq!(
            rows[3],
            "| 4 | 360000 | 240000 | 0.90 | 0.75 | 300000 | 170000 | 250 | 250 | 0 | 4 |"
        );
        assert!(table.contains("Efficiency: "));
    }

    #[test]
    fn without_a_one_worker_run_there_is_no_efficiency() {
        let (names, mut points) = scaling();
        points.remove(0);
        let table = markdown("UDP", &names, &points);
        assert!(rows(&table)[1].starts_with("| 2 | 190000 | 160000 | – | – |"));
        // Nor when the 1-worker run of that series failed.
        let (names, mut points) = scaling();
        points[0].pinned = None;
        let table = markdown("UDP", &names, &points);
        assert!(rows(&table)[2].starts_with("| 2 | 190000 | 160000 | – | 1.00 |"));
    }

    #[test]
    fn the_plot_is_svg_with_both_series() {
        let svg = svg("UDP <1>", &[], &points());
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("UDP &lt;1&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        // Three measured points.
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("200.0k"), "the axis tops at a round number");
    }

    #[test]
    fn the_plot_has_a_line_and_a_legend_entry_per_series() {
        let (names, points) = scaling();
        let svg = svg("UDP", &names, &points);
        assert_eq!(svg.matches("<polyline").count(), 4);
        // 3 + 3 of ours, 2 + 3 of the others.
        assert_eq!(svg.matches("<circle").count(), 11);
        for (entry, colour) in [
            ("ours pinned", COLOURS[0]),
            ("ours unpinned", COLOURS[1]),
            ("aquatic", COLOURS[2]),
            ("opentracker", COLOURS[3]),
        ] {
            assert!(svg.contains(&format!(">{entry}</text>")), "{entry}");
            assert!(
                svg.contains(&format!("stroke=\"{colour}\" stroke-width=\"2\" points=")),
                "{entry}"
            );
        }
        // Ticks at the counts measured, not at every count up to the largest.
        for tick in [1, 2, 4] {
            assert!(svg.contains(&format!("text-anchor=\"middle\">{tick}</text>")));
        }
        assert!(!svg.contains("text-anchor=\"middle\">3</text>"));
        assert!(svg.contains("400.0k"), "the axis tops at a round number");
        // One backing for the legend, after (over) every line.
        assert_eq!(svg.matches("fill-opacity").count(), 1);
        assert!(svg.rfind("<polyline").unwrap() < svg.find("fill-opacity").unwrap());
    }

    #[test]
    fn a_series_with_no_point_is_still_in_the_legend() {
        let names = vec!["aquatic".to_string()];
        let points = vec![Point {
            workers: 1,
            pinned: m(1000.0),
            unpinned: m(900.0),
            others: vec![None],
        }];
        let svg = svg("UDP", &names, &points);
        assert_eq!(svg.matches("<polyline").count(), 2);
        assert!(svg.contains(">aquatic</text>"));
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(180_000.0), 200_000.0);
        assert_eq!(nice_ceiling(1.0), 1.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(7_000.0), 10_000.0);
    }
}
