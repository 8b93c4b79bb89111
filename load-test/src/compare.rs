//! `load-test compare`: starts a tracker command at 1..N workers, pinned and
//! unpinned, runs the same load against each, and writes a Markdown table and
//! an SVG plot of responses per second against workers. The table and the plot
//! are pure functions of the results; the loop around them starts processes.

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
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Point {
    pub workers: usize,
    pub pinned: Option<Measured>,
    pub unpinned: Option<Measured>,
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

fn cell(m: Option<Measured>, f: impl Fn(&Measured) -> String) -> String {
    m.as_ref().map_or_else(|| "–".to_string(), f)
}

/// The Markdown table of the results.
pub fn markdown(title: &str, points: &[Point]) -> String {
    let mut out = format!("### {title}\n\n");
    out += "| workers | pinned resp/s | unpinned resp/s | pinned p99 (µs) | unpinned p99 (µs) | invalid | time-outs |\n";
    out += "|---:|---:|---:|---:|---:|---:|---:|\n";
    for p in points {
        let rate = |m: &Measured| format!("{:.0}", m.responses_per_sec);
        let p99 = |m: &Measured| format!("{:.0}", m.p99_us);
        let sum = |f: fn(&Measured) -> u64| {
            p.pinned.as_ref().map_or(0, f) + p.unpinned.as_ref().map_or(0, f)
        };
        let _ = writeln!(
            out,
            "| {} | {} | {} | {} | {} | {} | {} |",
            p.workers,
            cell(p.pinned, rate),
            cell(p.unpinned, rate),
            cell(p.pinned, p99),
            cell(p.unpinned, p99),
            sum(|m| m.invalid),
            sum(|m| m.timeouts),
        );
    }
    out
}

/// A line plot of responses per second against workers, pinned and unpinned.
pub fn svg(title: &str, points: &[Point]) -> String {
    const W: f64 = 640.0;
    const H: f64 = 400.0;
    const LEFT: f64 = 80.0;
    const RIGHT: f64 = 20.0;
    const TOP: f64 = 40.0;
    const BOTTOM: f64 = 50.0;
    let max_workers = points.iter().map(|p| p.workers).max().unwrap_or(1).max(2) as f64;
    let max_rate = points
        .iter()
        .flat_map(|p| [p.pinned, p.unpinned])
        .flatten()
        .map(|m| m.responses_per_sec)
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
    for w in 1..=max_workers as usize {
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
    type Series = (&'static str, &'static str, fn(&Point) -> Option<Measured>);
    let series: [Series; 2] = [
        ("pinned", "#1f77b4", |p| p.pinned),
        ("unpinned", "#ff7f0e", |p| p.unpinned),
    ];
    for (i, (name, color, get)) in series.iter().enumerate() {
        let coords: Vec<(f64, f64)> = points
            .iter()
            .filter_map(|p| get(p).map(|m| (x(p.workers as f64), y(m.responses_per_sec))))
            .collect();
        let path: Vec<String> = coords
            .iter()
            .map(|(a, b)| format!("{a:.1},{b:.1}"))
            .collect();
        let _ = writeln!(
            out,
            "<polyline fill=\"none\" stroke=\"{color}\" stroke-width=\"2\" points=\"{}\"/>",
            path.join(" ")
        );
        for (a, b) in &coords {
            let _ = writeln!(
                out,
                "<circle cx=\"{a:.1}\" cy=\"{b:.1}\" r=\"3.5\" fill=\"{color}\"/>"
            );
        }
        let ly = TOP + 8.0 + 18.0 * i as f64;
        let _ = writeln!(
            out,
            "<line x1=\"{0}\" y1=\"{ly}\" x2=\"{1}\" y2=\"{ly}\" stroke=\"{color}\" stroke-width=\"2\"/>\
             <text x=\"{2}\" y=\"{3}\">{name}</text>",
            LEFT + 14.0,
            LEFT + 38.0,
            LEFT + 44.0,
            ly + 4.0
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

/// What `compare` needs besides the load's own config.
pub struct CompareOptions {
    /// The tracker command; `{tracker}`, `{addr}`, `{workers}`, `{cpus}`,
    /// `{pin}` and `{config}` are filled in.
    pub template: Option<String>,
    /// CPUs the tracker may use (default: those the generator does not).
    pub tracker_cpus: Option<String>,
    pub max_workers: Option<usize>,
    pub out: PathBuf,
}

enum Proto {
    Udp(SocketAddr),
    Http(SocketAddr, bool),
}

/// Runs the whole comparison and returns the Markdown table.
pub fn run(config: &Config, options: &CompareOptions) -> Result<String, String> {
    use tracker_runtime::workers;
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
    let max_workers = options.max_workers.unwrap_or(tracker_cpus.len());
    std::fs::create_dir_all(&options.out)
        .map_err(|e| format!("cannot create {}: {e}", options.out.display()))?;
    // Our tracker serves every protocol by default: turn off all but the one
    // under test, so nothing else is bound.
    let tracker_config = options.out.join("tracker.toml");
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
         max_peers_per_address_per_torrent = 0\nnew_torrents_per_address_per_minute = 0\n"
    );
    std::fs::write(&tracker_config, tracker_toml).map_err(|e| e.to_string())?;
    let flag = match proto {
        Proto::Udp(_) => "--udp",
        Proto::Http(_, false) => "--http",
        Proto::Http(_, true) => "--https",
    };
    let template = options.template.clone().unwrap_or_else(|| {
        format!("{{tracker}} -c {{config}} {flag} {{addr}} --workers {{workers}} --cpus {{cpus}} {{pin}}")
    });
    let tracker = std::env::current_exe()
        .map_err(|e| e.to_string())?
        .with_file_name("tracker");

    let mut points = Vec::new();
    for workers in 1..=max_workers {
        let mut point = Point {
            workers,
            pinned: None,
            unpinned: None,
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
                    ("cpus", workers::format_cpu_list(&tracker_cpus)),
                    ("pin", if pinned { "--pin" } else { "--no-pin" }.to_string()),
                    ("config", tracker_config.display().to_string()),
                ],
            );
            eprintln!("load-test compare: {label}: {}", command.join(" "));
            let log = options.out.join(format!("{label}.log"));
            let mut child = TrackerProcess::start(&command, &log)?;
            let ready = child.wait_ready(&proto, Duration::from_secs(20));
            let result = ready.and_then(|()| match proto {
                Proto::Udp(_) => crate::udp::run(config),
                Proto::Http(..) => crate::http::run(config),
            });
            drop(child);
            match result {
                Ok(summary) => {
                    let json = options.out.join(format!("{label}.json"));
                    std::fs::write(&json, summary.to_json()).map_err(|e| e.to_string())?;
                    eprintln!(
                        "load-test compare: {label}: {:.0} responses/s",
                        summary.responses_per_sec
                    );
                    let m = Some(Measured::of(&summary));
                    if pinned {
                        point.pinned = m;
                    } else {
                        point.unpinned = m;
                    }
                }
                Err(e) => eprintln!("load-test compare: {label}: {e} (see {})", log.display()),
            }
        }
        points.push(point);
    }
    let title = format!(
        "{} on {target}, tracker on CPUs {}, load on {}",
        match proto {
            Proto::Udp(_) => "UDP",
            Proto::Http(_, false) => "HTTP",
            Proto::Http(_, true) => "HTTPS",
        },
        workers::format_cpu_list(&tracker_cpus),
        config.cpus.as_deref().unwrap_or("any CPU"),
    );
    let table = markdown(&title, &points);
    write(&options.out.join("compare.md"), &table)?;
    write(&options.out.join("compare.svg"), &svg(&title, &points))?;
    Ok(table)
}

fn write(path: &Path, text: &str) -> Result<(), String> {
    std::fs::write(path, text).map_err(|e| format!("cannot write {}: {e}", path.display()))
}

/// A tracker process, killed when dropped.
struct TrackerProcess(Child);

impl TrackerProcess {
    fn start(command: &[String], log: &Path) -> Result<Self, String> {
        let (program, args) = command.split_first().ok_or("empty tracker command")?;
        let log = std::fs::File::create(log).map_err(|e| e.to_string())?;
        let child = Command::new(program)
            .args(args)
            .stdin(Stdio::null())
            .stdout(log.try_clone().map_err(|e| e.to_string())?)
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
            let up = match *proto {
                Proto::Udp(addr) => udp_answers(addr),
                Proto::Http(addr, _) => {
                    TcpStream::connect_timeout(&addr, Duration::from_millis(100)).is_ok()
                }
            };
            if up {
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
            },
            Point {
                workers: 2,
                pinned: None,
                unpinned: m(180_000.0),
            },
        ]
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
    fn the_table_has_a_row_per_worker_count() {
        let table = markdown("UDP", &points());
        let rows: Vec<&str> = table.lines().filter(|l| l.starts_with("| ")).collect();
        assert_eq!(rows.len(), 3, "{table}");
        assert_eq!(rows[1], "| 1 | 150000 | 140000 | 250 | 250 | 0 | 2 |");
        assert_eq!(rows[2], "| 2 | – | 180000 | – | 250 | 0 | 1 |");
    }

    #[test]
    fn the_plot_is_svg_with_both_series() {
        let svg = svg("UDP <1>", &points());
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        assert!(svg.contains("UDP &lt;1&gt;"));
        assert_eq!(svg.matches("<polyline").count(), 2);
        // Three measured points.
        assert_eq!(svg.matches("<circle").count(), 3);
        assert!(svg.contains("200.0k"), "the axis tops at a round number");
    }

    #[test]
    fn nice_ceilings() {
        assert_eq!(nice_ceiling(180_000.0), 200_000.0);
        assert_eq!(nice_ceiling(1.0), 1.0);
        assert_eq!(nice_ceiling(3.2), 5.0);
        assert_eq!(nice_ceiling(7_000.0), 10_000.0);
    }
}
