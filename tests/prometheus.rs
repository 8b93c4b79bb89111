//! The dashboard and the alerting rules in deploy/ against a real Prometheus
//! scraping the real tracker: every PromQL expression must parse, every
//! series it selects must exist, every rule must load and evaluate cleanly,
//! none may fire on an idle, healthy tracker, and promtool must accept the
//! rules and the example config. A renamed metric or label then fails here
//! rather than as an empty panel or an alert that never fires.
//!
//! Needs the `prometheus` and `promtool` binaries (Debian package
//! `prometheus`, which tests/run.sh installs).

mod support;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use support::site_db::{info_hash, passkey, SiteDb};
use support::udp_client::Client;
use support::{free_port, repo_root, Tracker};
use tracker_proto::AnnounceEvent;

const DASHBOARD: &str = "deploy/grafana/tracker-dashboard.json";
const RULES: &str = "deploy/prometheus/tracker-rules.yml";
const EXAMPLE_CONFIG: &str = "deploy/prometheus/prometheus.yml";
/// promtool's unit tests of the rules: the alerts that must fire soon do.
const RULE_TESTS: &str = "deploy/prometheus/tracker-rules.test.yml";
/// The job the rules select (`job="tracker"`).
const JOB: &str = "tracker";

/// What the dashboard's template variables stand for here: every instance
/// and worker, as "All" selects them.
const TEMPLATE_VALUES: [(&str, &str); 6] = [
    ("__rate_interval", "1m"),
    ("__interval", "1m"),
    ("__range", "1h"),
    ("job", JOB),
    ("instance", ".+"),
    ("worker", ".+"),
];

#[test]
fn dashboard_and_rules_select_series_the_tracker_exports() {
    require_tool("prometheus");
    require_tool("promtool");
    let root = repo_root();

    let mut problems = Vec::new();
    for args in [
        ["check", "rules", RULES],
        ["check", "config", EXAMPLE_CONFIG],
        ["test", "rules", RULE_TESTS],
    ] {
        let out = Command::new("promtool")
            .args(args)
            .current_dir(&root)
            .output()
            .expect("run promtool");
        if !out.status.success() {
            problems.push(format!(
                "promtool {}: {}{}",
                args.join(" "),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }

    // A private tracker (a site's database on the tests' MariaDB), so that
    // private mode's series exist too; the rest are the same in either mode.
    let site = SiteDb::new();
    site.user(1, 1);
    site.torrent(1, 0, 1);
    let private = format!(
        "[private]\nenabled = true\ndatabase_url = \"{}\"\nflush_interval_ms = 200\n\
         api_listen = \"127.0.0.1:{}\"\napi_key = \"{}\"\n",
        site.url,
        free_port(),
        "k".repeat(32)
    );
    let tracker = Tracker::builder()
        .udp(None)
        .metrics()
        .config(&private)
        .start();
    let metrics = tracker.metrics.expect("a metrics address");
    // A connect and two announces, so that counters and the swarm gauges
    // hold more than zeros, and a flush is written.
    let mut client = Client::new("127.0.0.1:0", tracker.udp[0]);
    let hash = info_hash(1);
    let url = format!("/announce/{}", passkey(1));
    let started = client.announce_with_url(hash, 6881, (0, 0, 10), AnnounceEvent::Started, &url);
    assert_eq!(started, Ok(()));
    let again = client.announce_with_url(hash, 6881, (5, 5, 5), AnnounceEvent::None, &url);
    assert_eq!(again, Ok(()));
    assert_eq!(tracker.metric("tracker_torrents", &[]), 1);
    site.wait_for("SELECT uploaded FROM users WHERE id = 1", 5u64);

    // A public tracker beside it, for the WebSocket and scrape series: a
    // private one serves no WebSocket, and refuses scrapes.
    let public = Tracker::builder().http(None).udp(None).metrics().start();
    let public_metrics = public.metrics.expect("a metrics address");
    Client::new("127.0.0.1:0", public.udp[0]).scrape(&[hash]);
    let prometheus = Prometheus::start(&[metrics, public_metrics], &root.join(RULES));
    prometheus.wait_until_scraping();
    // Enough samples for rate() and increase() over any window.
    let scrapes = format!("count_over_time(up{{job=\"{JOB}\"}}[1m])");
    prometheus.wait_for(&scrapes, |v| v >= 3.0);

    let dashboard = Json::parse(&std::fs::read_to_string(root.join(DASHBOARD)).unwrap())
        .unwrap_or_else(|e| panic!("{DASHBOARD} is not JSON: {e}"));
    let mut exprs = Vec::new();
    dashboard.strings_at("expr", &mut exprs);
    assert!(exprs.len() >= 10, "only {} expressions found", exprs.len());
    for raw in &exprs {
        let expr = substitute(raw);
        if let Err(e) = prometheus.query(&expr) {
            problems.push(format!("dashboard: {expr}: {e}"));
        }
        let selected = selectors(&expr);
        if selected.is_empty() {
            problems.push(format!("dashboard: no selector found in {expr}"));
        }
        for selector in selected {
            if !prometheus.has_series(&selector) {
                problems.push(format!("dashboard: no series for {selector} (in {expr})"));
            }
        }
    }
    // Template variables: label_values(SELECTOR, LABEL).
    let mut definitions = Vec::new();
    dashboard.strings_at("definition", &mut definitions);
    for raw in &definitions {
        let definition = substitute(raw);
        let Some((selector, label)) = definition
            .strip_prefix("label_values(")
            .and_then(|rest| rest.strip_suffix(')'))
            .and_then(|args| args.rsplit_once(','))
        else {
            problems.push(format!("dashboard: unexpected variable query {definition}"));
            continue;
        };
        let (selector, label) = (selector.trim(), label.trim());
        let query = format!("count({selector}) by ({label})");
        match prometheus.query(&query) {
            Ok(result) if result.iter().any(|r| r.label(label).is_some()) => {}
            other => problems.push(format!("dashboard: {definition}: {other:?}")),
        }
    }

    // The rules as Prometheus loaded them: all of them, evaluated cleanly.
    prometheus.wait_for_rule_evaluations();
    let rules = prometheus.rules();
    let in_file = std::fs::read_to_string(root.join(RULES))
        .unwrap()
        .lines()
        .filter(|l| l.trim_start().starts_with("- alert:"))
        .count();
    assert_eq!(rules.len(), in_file, "rules loaded: {rules:?}");
    for rule in &rules {
        let name = rule.get("name").and_then(Json::as_str).unwrap_or("?");
        let query = rule.get("query").and_then(Json::as_str).unwrap_or("");
        let health = rule.get("health").and_then(Json::as_str);
        let error = rule.get("lastError").and_then(Json::as_str).unwrap_or("");
        if health != Some("ok") || !error.is_empty() {
            problems.push(format!("rule {name}: health {health:?}, error {error:?}"));
        }
        let selected = selectors(query);
        if selected.is_empty() {
            problems.push(format!("rule {name}: no selector found in {query}"));
        }
        for selector in selected {
            if !prometheus.has_series(&selector) {
                problems.push(format!("rule {name}: no series for {selector}"));
            }
        }
    }
    // An idle tracker that answers every scrape is healthy: nothing pending.
    for alert in prometheus.alerts() {
        problems.push(format!("alert raised on a healthy tracker: {alert:?}"));
    }

    assert!(
        problems.is_empty(),
        "{} problems:\n{}\n\nprometheus log:\n{}",
        problems.len(),
        problems.join("\n"),
        prometheus.log()
    );
    drop((tracker, public));
}

#[test]
fn selectors_are_found_outside_functions_groupings_and_strings() {
    let expr = r#"sum without (worker, kind) (rate(tracker_x_total{job="a", kind=~"b|c{"}[5m] offset 1h)) / on (instance) group_left count(up) > 0 and time() - tracker_y > 1e3"#;
    assert_eq!(
        selectors(expr),
        [
            r#"tracker_x_total{job="a", kind=~"b|c{"}"#,
            "up",
            "tracker_y"
        ]
    );
}

/// Fails the test, rather than skipping it, when a tool is missing.
fn require_tool(name: &str) {
    if let Err(e) = Command::new(name).arg("--version").output() {
        panic!(
            "cannot run `{name}` ({e}): run tests/run.sh, which installs the Debian \
             package prometheus (prometheus and promtool)"
        );
    }
}

/// The dashboard's template variables (`$name`, `${name}`) replaced by
/// [`TEMPLATE_VALUES`]; an unknown one fails the test.
fn substitute(expr: &str) -> String {
    let mut out = expr.to_string();
    // Longest names first: `$__interval` must not eat `$__interval_ms`.
    let mut values = TEMPLATE_VALUES;
    values.sort_by_key(|(name, _)| std::cmp::Reverse(name.len()));
    for (name, value) in values {
        out = out.replace(&format!("${{{name}}}"), value);
        out = out.replace(&format!("${name}"), value);
    }
    assert!(!out.contains('$'), "unknown template variable in {expr}");
    out
}

/// The series selectors of a PromQL expression: each metric name with its
/// label matchers, as written. Names of functions, aggregations and
/// keywords, label lists of `by (...)` and the like, strings, durations and
/// numbers are not selectors.
fn selectors(expr: &str) -> Vec<String> {
    const NOT_METRICS: &[&str] = &[
        "and",
        "or",
        "unless",
        "bool",
        "offset",
        "sum",
        "min",
        "max",
        "avg",
        "count",
        "group",
        "stddev",
        "stdvar",
        "topk",
        "bottomk",
        "quantile",
        "count_values",
        "atan2",
        "inf",
        "nan",
    ];
    const LABEL_LISTS: &[&str] = &[
        "by",
        "without",
        "on",
        "ignoring",
        "group_left",
        "group_right",
    ];
    let bytes = expr.as_bytes();
    let ident = |b: u8| b.is_ascii_alphanumeric() || b == b'_' || b == b':';
    let next_non_space = |mut i: usize| {
        while i < bytes.len() && bytes[i].is_ascii_whitespace() {
            i += 1;
        }
        i
    };
    let mut found = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        if b == b'"' || b == b'\'' || b == b'`' {
            i = skip_string(bytes, i);
        } else if b == b'[' {
            i = skip_to(bytes, i, b']');
        } else if b == b'{' {
            // A selector without a name (`{__name__=...}`): not used here.
            i = skip_to(bytes, i, b'}');
        } else if b.is_ascii_digit() || b == b'.' {
            while i < bytes.len() && (ident(bytes[i]) || bytes[i] == b'.') {
                i += 1;
            }
        } else if ident(b) {
            let start = i;
            while i < bytes.len() && ident(bytes[i]) {
                i += 1;
            }
            let word = &expr[start..i];
            let after = next_non_space(i);
            let opens = |c| bytes.get(after) == Some(&c);
            if LABEL_LISTS.contains(&word) && opens(b'(') {
                i = skip_to(bytes, after, b')');
            } else if opens(b'(') || NOT_METRICS.contains(&word) || LABEL_LISTS.contains(&word) {
                // A function, an aggregation or a keyword; its arguments are
                // scanned on.
            } else if opens(b'{') {
                i = skip_to(bytes, after, b'}');
                found.push(format!("{word}{}", &expr[after..i]));
            } else {
                found.push(word.to_string());
            }
        } else {
            i += 1;
        }
    }
    found
}

/// The index just past the string that starts at `i`.
fn skip_string(bytes: &[u8], i: usize) -> usize {
    let quote = bytes[i];
    let mut j = i + 1;
    while j < bytes.len() && bytes[j] != quote {
        j += if bytes[j] == b'\\' && quote != b'`' {
            2
        } else {
            1
        };
    }
    j + 1
}

/// The index just past the `close` that ends the group opened at `i`,
/// stepping over strings inside it.
fn skip_to(bytes: &[u8], i: usize, close: u8) -> usize {
    let mut j = i + 1;
    while j < bytes.len() && bytes[j] != close {
        j = if matches!(bytes[j], b'"' | b'\'' | b'`') {
            skip_string(bytes, j)
        } else {
            j + 1
        };
    }
    (j + 1).min(bytes.len())
}

/// A Prometheus server of the test's own: its own port, config and storage
/// in a temporary directory, killed and removed on drop.
struct Prometheus {
    child: Child,
    addr: SocketAddr,
    dir: PathBuf,
}

impl Prometheus {
    fn start(targets: &[SocketAddr], rules: &Path) -> Prometheus {
        let dir =
            std::env::temp_dir().join(format!("tracker-test-prometheus-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let config = dir.join("prometheus.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("\"{t}\"")).collect();
        let targets = targets.join(", ");
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\n  evaluation_interval: 1s\n\
                 rule_files:\n  - {rules:?}\n\
                 scrape_configs:\n  - job_name: {JOB}\n    static_configs:\n      - targets: [{targets}]\n"
            ),
        )
        .unwrap();
        let addr = SocketAddr::from(([127, 0, 0, 1], free_port()));
        let log = std::fs::File::create(dir.join("log")).unwrap();
        let child = Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!(
                "--storage.tsdb.path={}",
                dir.join("data").display()
            ))
            .arg(format!("--web.listen-address={addr}"))
            .stdin(Stdio::null())
            .stdout(log.try_clone().unwrap())
            .stderr(log)
            .spawn()
            .expect("start prometheus");
        Prometheus { child, addr, dir }
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.dir.join("log")).unwrap_or_default()
    }

    /// `data` of a successful API answer, or the error Prometheus gave.
    fn api(&self, path_and_query: &str) -> Result<Json, String> {
        let body = http_get(self.addr, path_and_query)?;
        let answer = Json::parse(&body).map_err(|e| format!("{e}: {body}"))?;
        match answer.get("status").and_then(Json::as_str) {
            Some("success") => Ok(answer.get("data").cloned().unwrap_or(Json::Null)),
            _ => Err(body),
        }
    }

    /// An instant query's result vector (or scalar, as one element).
    fn query(&self, promql: &str) -> Result<Vec<Json>, String> {
        let data = self.api(&format!("/api/v1/query?query={}", url_encode(promql)))?;
        match data.get("result") {
            Some(Json::Array(items)) => Ok(items.clone()),
            Some(other) => Ok(vec![other.clone()]),
            None => Err(format!("no result: {data:?}")),
        }
    }

    fn has_series(&self, selector: &str) -> bool {
        matches!(
            self.api(&format!("/api/v1/series?match[]={}", url_encode(selector))),
            Ok(Json::Array(series)) if !series.is_empty()
        )
    }

    /// Waits until the first sample of `promql` satisfies `ready`.
    fn wait_for(&self, promql: &str, ready: impl Fn(f64) -> bool) {
        self.wait(&format!("{promql} to be ready"), || {
            let result = self.query(promql).ok()?;
            let value = result.first()?.get("value")?.as_array()?.get(1)?.as_str()?;
            ready(value.parse().ok()?).then_some(())
        });
    }

    /// Waits until every tracker target is up, with no scrape error.
    fn wait_until_scraping(&self) {
        self.wait("the tracker targets to be up", || {
            let data = self.api("/api/v1/targets").ok()?;
            let targets = data.get("activeTargets")?.as_array()?;
            let up = targets.iter().all(|t| {
                t.get("health").and_then(Json::as_str) == Some("up")
                    && t.get("lastError").and_then(Json::as_str) == Some("")
            });
            (up && !targets.is_empty()).then_some(())
        });
    }

    /// Every rule of every group, as `/api/v1/rules` lists them.
    fn rules(&self) -> Vec<Json> {
        let data = self.api("/api/v1/rules").unwrap();
        let mut rules = Vec::new();
        for group in data.get("groups").and_then(Json::as_array).unwrap() {
            rules.extend(group.get("rules").and_then(Json::as_array).unwrap().clone());
        }
        rules
    }

    /// Waits until every rule has been evaluated at least once.
    fn wait_for_rule_evaluations(&self) {
        self.wait("every rule to be evaluated", || {
            let rules = self.rules();
            (!rules.is_empty()
                && rules.iter().all(|r| {
                    r.get("lastEvaluation")
                        .and_then(Json::as_str)
                        .is_some_and(|t| !t.starts_with("0001-"))
                }))
            .then_some(())
        });
    }

    fn alerts(&self) -> Vec<Json> {
        let data = self.api("/api/v1/alerts").unwrap();
        data.get("alerts").and_then(Json::as_array).unwrap().clone()
    }

    fn wait(&self, what: &str, ready: impl Fn() -> Option<()>) {
        let deadline = Instant::now() + Duration::from_secs(60);
        while ready().is_none() {
            assert!(
                Instant::now() < deadline,
                "timed out waiting for {what}; prometheus log:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

impl Drop for Prometheus {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// One GET over HTTP/1.0, so that the answer is neither chunked nor kept
/// alive: its body, if the status is 200 or a Prometheus API error.
fn http_get(addr: SocketAddr, target: &str) -> Result<String, String> {
    let mut tcp =
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    tcp.write_all(format!("GET {target} HTTP/1.0\r\nHost: {addr}\r\n\r\n").as_bytes())
        .map_err(|e| e.to_string())?;
    let mut answer = Vec::new();
    tcp.read_to_end(&mut answer).map_err(|e| e.to_string())?;
    let answer = String::from_utf8(answer).map_err(|e| e.to_string())?;
    let (_head, body) = answer
        .split_once("\r\n\r\n")
        .ok_or_else(|| format!("no head: {answer}"))?;
    Ok(body.to_string())
}

fn url_encode(text: &str) -> String {
    text.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                char::from(b).to_string()
            }
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// Just enough JSON for the dashboard and Prometheus's API answers (no
/// JSON crate among the dev-dependencies).
#[derive(Debug, Clone, PartialEq)]
enum Json {
    Null,
    Bool(bool),
    /// As written: nothing here does arithmetic on JSON numbers.
    Number(String),
    String(String),
    Array(Vec<Json>),
    Object(Vec<(String, Json)>),
}

impl Json {
    fn parse(text: &str) -> Result<Json, String> {
        let mut parser = JsonParser {
            bytes: text.as_bytes(),
            at: 0,
        };
        let value = parser.value()?;
        parser.space();
        if parser.at != parser.bytes.len() {
            return Err(format!("trailing bytes at {}", parser.at));
        }
        Ok(value)
    }

    fn get(&self, key: &str) -> Option<&Json> {
        match self {
            Json::Object(members) => members.iter().find(|(k, _)| k == key).map(|(_, v)| v),
            _ => None,
        }
    }

    fn as_str(&self) -> Option<&str> {
        match self {
            Json::String(s) => Some(s),
            _ => None,
        }
    }

    fn as_array(&self) -> Option<&Vec<Json>> {
        match self {
            Json::Array(items) => Some(items),
            _ => None,
        }
    }

    /// A label of a query result (`{"metric": {...}, "value": ...}`).
    fn label(&self, name: &str) -> Option<&str> {
        self.get("metric")?.get(name)?.as_str()
    }

    /// Every string value under the key `key`, at any depth.
    fn strings_at(&self, key: &str, out: &mut Vec<String>) {
        match self {
            Json::Array(items) => items.iter().for_each(|v| v.strings_at(key, out)),
            Json::Object(members) => {
                for (k, v) in members {
                    match v {
                        Json::String(s) if k == key => out.push(s.clone()),
                        _ => v.strings_at(key, out),
                    }
                }
            }
            _ => {}
        }
    }
}

struct JsonParser<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl JsonParser<'_> {
    fn space(&mut self) {
        while self.at < self.bytes.len() && self.bytes[self.at].is_ascii_whitespace() {
            self.at += 1;
        }
    }

    fn peek(&mut self) -> Option<u8> {
        self.space();
        self.bytes.get(self.at).copied()
    }

    fn expect(&mut self, byte: u8) -> Result<(), String> {
        if self.peek() == Some(byte) {
            self.at += 1;
            Ok(())
        } else {
            Err(format!("expected {:?} at {}", char::from(byte), self.at))
        }
    }

    fn literal(&mut self, word: &str, value: Json) -> Result<Json, String> {
        if self.bytes[self.at..].starts_with(word.as_bytes()) {
            self.at += word.len();
            Ok(value)
        } else {
            Err(format!("unexpected byte at {}", self.at))
        }
    }

    fn value(&mut self) -> Result<Json, String> {
        match self.peek().ok_or("unexpected end")? {
            b'{' => {
                self.at += 1;
                let mut members = Vec::new();
                if self.peek() == Some(b'}') {
                    self.at += 1;
                    return Ok(Json::Object(members));
                }
                loop {
                    let key = self.string()?;
                    self.expect(b':')?;
                    members.push((key, self.value()?));
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        _ => break,
                    }
                }
                self.expect(b'}')?;
                Ok(Json::Object(members))
            }
            b'[' => {
                self.at += 1;
                let mut items = Vec::new();
                if self.peek() == Some(b']') {
                    self.at += 1;
                    return Ok(Json::Array(items));
                }
                loop {
                    items.push(self.value()?);
                    match self.peek() {
                        Some(b',') => self.at += 1,
                        _ => break,
                    }
                }
                self.expect(b']')?;
                Ok(Json::Array(items))
            }
            b'"' => Ok(Json::String(self.string()?)),
            b't' => self.literal("true", Json::Bool(true)),
            b'f' => self.literal("false", Json::Bool(false)),
            b'n' => self.literal("null", Json::Null),
            _ => {
                let start = self.at;
                while self.at < self.bytes.len()
                    && matches!(
                        self.bytes[self.at],
                        b'-' | b'+' | b'.' | b'e' | b'E' | b'0'..=b'9'
                    )
                {
                    self.at += 1;
                }
                if start == self.at {
                    return Err(format!("unexpected byte at {start}"));
                }
                let number = std::str::from_utf8(&self.bytes[start..self.at]).unwrap();
                Ok(Json::Number(number.to_string()))
            }
        }
    }

    fn string(&mut self) -> Result<String, String> {
        self.expect(b'"')?;
        let mut out = Vec::new();
        loop {
            let b = *self.bytes.get(self.at).ok_or("unterminated string")?;
            self.at += 1;
            match b {
                b'"' => break,
                b'\\' => {
                    let escape = *self.bytes.get(self.at).ok_or("unterminated escape")?;
                    self.at += 1;
                    let c = match escape {
                        b'n' => '\n',
                        b't' => '\t',
                        b'r' => '\r',
                        b'b' => '\u{8}',
                        b'f' => '\u{c}',
                        b'u' => {
                            let high = self.hex4()?;
                            let code = if (0xd800..0xdc00).contains(&high) {
                                self.at += 2; // the `\u` of the low surrogate
                                let low = self.hex4()?;
                                0x10000 + ((high - 0xd800) << 10) + (low - 0xdc00)
                            } else {
                                high
                            };
                            char::from_u32(code).ok_or("bad \\u escape")?
                        }
                        other => char::from(other),
                    };
                    out.extend_from_slice(c.encode_utf8(&mut [0; 4]).as_bytes());
                }
                _ => out.push(b),
            }
        }
        String::from_utf8(out).map_err(|e| e.to_string())
    }

    fn hex4(&mut self) -> Result<u32, String> {
        let digits = self
            .bytes
            .get(self.at..self.at + 4)
            .ok_or("short \\u escape")?;
        self.at += 4;
        u32::from_str_radix(std::str::from_utf8(digits).map_err(|e| e.to_string())?, 16)
            .map_err(|e| e.to_string())
    }
}
