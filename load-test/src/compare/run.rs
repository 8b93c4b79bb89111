//! The comparison's loop: our tracker at each worker count, pinned and
//! unpinned, and each other tracker once at each count, the same load against
//! each, then the table and the plot.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::plot::svg;
use super::process::{Proto, TrackerProcess};
use super::table::markdown;
use super::template::{check_placeholders, expand, OTHER_PLACEHOLDERS, OUR_PLACEHOLDERS};
use super::{worker_counts, Measured, Point};
use crate::config::Config;
use crate::http_session::HttpTarget;

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
    } else if target.starts_with("ws") {
        let (addr, tls) = super::ws::parse(target)?;
        Proto::Ws(addr, tls)
    } else {
        Proto::Udp(crate::udp::parse_target(target)?)
    };
    let addr = match proto {
        Proto::Udp(a) | Proto::Http(a, _) | Proto::Ws(a, _) => a,
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
        Proto::Ws(_, tls) => super::ws::tracker_flag(tls),
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
        Proto::Udp(_) => "[http]\nlisten = []\nhttps_listen = []\n".to_string(),
        Proto::Http(_, false) => "[udp]\nlisten = []\n[http]\nhttps_listen = []\n".to_string(),
        Proto::Http(_, true) => "[udp]\nlisten = []\n[http]\nlisten = []\n".to_string(),
        Proto::Ws(_, tls) => {
            super::ws::prepare(config)?;
            super::ws::tracker_toml(tls, config)
        }
    };
    // No state file: every run starts empty and none leaves swarms behind.
    // A benchmark serves as whoever runs it, root included. The load comes
    // from a few loopback addresses, each the peers of thousands: loopback is
    // exempt from the limits per client, which would turn most of it away.
    let tracker_toml = format!(
        "{off}[state]\nfile = \"\"\n[privileges]\nallow_root = true\n[runtime]\n\
         exempt_networks = [\"127.0.0.0/8\", \"::1\"]\n"
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
            Proto::Ws(_, tls) => super::ws::title(tls),
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
        if !self.proto.free_within(Duration::from_secs(5)) {
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
        let (cpu_before, started) = (child.cpu_time(), Instant::now());
        let result = ready.and_then(|()| match self.proto {
            Proto::Udp(_) => crate::udp::run(self.config),
            Proto::Http(..) => crate::http::run(self.config),
            Proto::Ws(..) => super::ws::measure(self.config),
        });
        let cpu = child
            .cpu_time()
            .zip(cpu_before)
            .and_then(|(after, before)| after.checked_sub(before));
        let wall = started.elapsed();
        drop(child);
        match result {
            Ok(summary) => {
                write(&self.out.join(format!("{label}.json")), &summary.to_json())?;
                eprintln!(
                    "load-test compare: {label}: {:.0} responses/s",
                    summary.responses_per_sec
                );
                Ok(Some(Measured::of(&summary, cpu, wall)))
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
