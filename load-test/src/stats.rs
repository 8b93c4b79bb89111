//! What a run counts, per worker, merged at the end; the progress line and the
//! final summary (text and JSON). Pure: no I/O besides formatting.

use serde::Serialize;

use crate::histogram::Histogram;
use crate::model::Kind;

/// Why a response was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Invalid {
    /// The codec refused the datagram, or the HTTP framing was broken.
    Malformed,
    /// A datagram from another address than the target.
    WrongSource,
    /// A transaction id that no request in flight has (and none that timed out).
    UnknownTransaction,
    /// An answer of another action than the request's (connect answered by an
    /// announce response, ...).
    WrongAction,
    /// A connect response that is not exactly 16 bytes.
    BadLength,
    /// More peers than asked for (or than a datagram holds).
    TooManyPeers,
    /// Fewer seeders + leechers than peers returned, or a zero interval.
    ImplausibleCounts,
    /// A peer address outside loopback, or port 0.
    BadPeer,
    /// The announcing peer handed back to itself.
    SelfInPeers,
    /// A scrape answer with other info-hashes or another count than asked.
    ScrapeMismatch,
    /// An HTTP status other than 200.
    HttpStatus,
    /// A body that is not bencode, or lacks a required key.
    BadBencode,
    /// The tracker closed the connection (or it broke) with a request in
    /// flight: after part of its answer, or again after the request was sent
    /// once more (see `Stats::retried`).
    ConnectionLost,
    /// WebSocket: a relayed offer or answer whose offer id this load did not
    /// make, or an answer to an offer another connection made.
    UnknownOffer,
    /// WebSocket: a relayed offer or answer, or an error, naming another
    /// info-hash than the one its offer was made for.
    WrongInfoHash,
    /// WebSocket: a relayed offer or answer from a peer id that does not
    /// speak for that torrent on the connection that sent it.
    WrongPeer,
}

impl Invalid {
    pub const ALL: [Invalid; 16] = [
        Invalid::Malformed,
        Invalid::WrongSource,
        Invalid::UnknownTransaction,
        Invalid::WrongAction,
        Invalid::BadLength,
        Invalid::TooManyPeers,
        Invalid::ImplausibleCounts,
        Invalid::BadPeer,
        Invalid::SelfInPeers,
        Invalid::ScrapeMismatch,
        Invalid::HttpStatus,
        Invalid::BadBencode,
        Invalid::ConnectionLost,
        Invalid::UnknownOffer,
        Invalid::WrongInfoHash,
        Invalid::WrongPeer,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Invalid::Malformed => "malformed",
            Invalid::WrongSource => "wrong_source",
            Invalid::UnknownTransaction => "unknown_transaction",
            Invalid::WrongAction => "wrong_action",
            Invalid::BadLength => "bad_length",
            Invalid::TooManyPeers => "too_many_peers",
            Invalid::ImplausibleCounts => "implausible_counts",
            Invalid::BadPeer => "bad_peer",
            Invalid::SelfInPeers => "self_in_peers",
            Invalid::ScrapeMismatch => "scrape_mismatch",
            Invalid::HttpStatus => "http_status",
            Invalid::BadBencode => "bad_bencode",
            Invalid::ConnectionLost => "connection_lost",
            Invalid::UnknownOffer => "unknown_offer",
            Invalid::WrongInfoHash => "wrong_info_hash",
            Invalid::WrongPeer => "wrong_peer",
        }
    }
}

/// The counters that the progress line needs; cheap to copy.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counters {
    pub sent: [u64; Kind::COUNT],
    /// Valid answers that were not errors.
    pub ok: [u64; Kind::COUNT],
    /// Valid error answers (BEP 15 action 3, HTTP `failure reason`).
    pub errors: [u64; Kind::COUNT],
    pub timeouts: [u64; Kind::COUNT],
    pub invalid: u64,
}

impl Counters {
    pub fn add(&mut self, other: &Counters) {
        for k in 0..Kind::COUNT {
            self.sent[k] += other.sent[k];
            self.ok[k] += other.ok[k];
            self.errors[k] += other.errors[k];
            self.timeouts[k] += other.timeouts[k];
        }
        self.invalid += other.invalid;
    }

    pub fn answered(&self) -> u64 {
        self.ok.iter().sum::<u64>() + self.errors.iter().sum::<u64>()
    }
}

/// Error answers by message. A run sees only a few distinct messages, so this
/// is a short list searched linearly; a message is copied only when first
/// seen, and past `MAX_MESSAGES` distinct ones the rest count as "other".
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct ErrorMessages {
    pub by_message: Vec<(String, u64)>,
    pub other: u64,
}

const MAX_MESSAGES: usize = 32;

impl ErrorMessages {
    pub fn add(&mut self, message: &[u8], n: u64) {
        let text = String::from_utf8_lossy(message);
        let text = text.trim();
        if let Some(entry) = self.by_message.iter_mut().find(|(m, _)| m == text) {
            entry.1 += n;
        } else if self.by_message.len() < MAX_MESSAGES {
            self.by_message.push((text.chars().take(120).collect(), n));
        } else {
            self.other += n;
        }
    }

    /// By message, with `(other)` for those past the first 32.
    pub fn to_map(&self) -> std::collections::BTreeMap<String, u64> {
        let mut map: std::collections::BTreeMap<String, u64> =
            self.by_message.iter().cloned().collect();
        if self.other > 0 {
            map.insert("(other)".into(), self.other);
        }
        map
    }

    pub fn merge(&mut self, other: &ErrorMessages) {
        for (message, n) in &other.by_message {
            self.add(message.as_bytes(), *n);
        }
        self.other += other.other;
    }
}

/// Everything one worker counts.
#[derive(Clone, Debug, Default)]
pub struct Stats {
    pub counters: Counters,
    pub invalid: [u64; Invalid::ALL.len()],
    /// Answers that came after their request had timed out.
    pub late: u64,
    /// Datagrams the kernel refused to send, connections that failed to open.
    pub send_failed: u64,
    /// Open loop: scheduled requests not sent because too many were in flight.
    pub skipped: u64,
    /// HTTP: connections opened (the first ones included).
    pub connections: u64,
    /// HTTP: requests sent again on a new connection because theirs closed
    /// before any byte of the answer (RFC 9112 9.3.1); counted once in `sent`.
    pub retried: u64,
    /// WebSocket: announce answers to the announces that carried an answer
    /// (aquatic_ws sends them, webtorrent's tracker does not); not counted
    /// as responses.
    pub answer_acks: u64,
    /// Peers in valid announce answers, and those answers.
    pub peers_returned: u64,
    pub announces_with_peers: u64,
    pub error_messages: ErrorMessages,
    /// Valid answers that carried a warning (HTTP `warning message`), by
    /// message; counted in `ok` too.
    pub warnings: ErrorMessages,
    /// Why sends or connections failed (counted in `send_failed`).
    pub failures: ErrorMessages,
    pub latency: [Histogram; Kind::COUNT],
}

impl Stats {
    pub fn sent(&mut self, kind: Kind) {
        self.counters.sent[kind as usize] += 1;
    }

    pub fn ok(&mut self, kind: Kind, latency_ns: u64) {
        self.counters.ok[kind as usize] += 1;
        self.latency[kind as usize].record(latency_ns);
    }

    pub fn error(&mut self, kind: Kind, message: &[u8], latency_ns: u64) {
        self.counters.errors[kind as usize] += 1;
        self.latency[kind as usize].record(latency_ns);
        self.error_messages.add(message, 1);
    }

    pub fn timeout(&mut self, kind: Kind) {
        self.counters.timeouts[kind as usize] += 1;
    }

    pub fn invalid(&mut self, why: Invalid) {
        self.invalid[why as usize] += 1;
        self.counters.invalid += 1;
    }

    /// An answer's warning (the answer itself is counted as it checks).
    pub fn warning(&mut self, message: &[u8]) {
        self.warnings.add(message, 1);
    }

    /// A send or connection that failed, with the reason.
    pub fn failure(&mut self, reason: &[u8]) {
        self.send_failed += 1;
        self.failures.add(reason, 1);
    }

    pub fn announce_peers(&mut self, peers: usize) {
        self.peers_returned += peers as u64;
        self.announces_with_peers += 1;
    }

    pub fn merge(&mut self, other: &Stats) {
        self.counters.add(&other.counters);
        for (a, b) in self.invalid.iter_mut().zip(other.invalid) {
            *a += b;
        }
        self.late += other.late;
        self.send_failed += other.send_failed;
        self.skipped += other.skipped;
        self.connections += other.connections;
        self.retried += other.retried;
        self.answer_acks += other.answer_acks;
        self.peers_returned += other.peers_returned;
        self.announces_with_peers += other.announces_with_peers;
        self.error_messages.merge(&other.error_messages);
        self.warnings.merge(&other.warnings);
        self.failures.merge(&other.failures);
        for (a, b) in self.latency.iter_mut().zip(&other.latency) {
            a.merge(b);
        }
    }

    /// Adds what went wrong in `other` (invalid answers, time-outs, error
    /// answers, failures) but none of its traffic: the problems of a phase
    /// that is not measured (the WebSocket ramp) still count.
    pub fn merge_problems(&mut self, other: &Stats) {
        for (a, b) in self.invalid.iter_mut().zip(other.invalid) {
            *a += b;
        }
        self.counters.invalid += other.counters.invalid;
        for k in 0..Kind::COUNT {
            self.counters.errors[k] += other.counters.errors[k];
            self.counters.timeouts[k] += other.counters.timeouts[k];
        }
        self.late += other.late;
        self.send_failed += other.send_failed;
        self.error_messages.merge(&other.error_messages);
        self.warnings.merge(&other.warnings);
        self.failures.merge(&other.failures);
    }
}

/// The progress line for one interval: rates from the difference of two
/// snapshots `dt_secs` apart.
pub fn progress_line(
    elapsed_secs: f64,
    now: &Counters,
    before: &Counters,
    dt_secs: f64,
    kinds: &[Kind],
) -> String {
    let rate = |a: u64, b: u64| (a - b) as f64 / dt_secs;
    let mut line = format!("{elapsed_secs:6.1}s");
    let mut total = 0.0;
    for &k in kinds {
        let i = k as usize;
        let r = rate(now.ok[i] + now.errors[i], before.ok[i] + before.errors[i]);
        total += r;
        line += &format!("  {} {}/s", k.name(), si(r));
    }
    line += &format!("  total {}/s", si(total));
    let sum = |c: &Counters, f: fn(&Counters) -> &[u64; Kind::COUNT]| f(c).iter().sum::<u64>();
    line += &format!(
        "  errors {}  timeouts {}  invalid {}",
        sum(now, |c| &c.errors) - sum(before, |c| &c.errors),
        sum(now, |c| &c.timeouts) - sum(before, |c| &c.timeouts),
        now.invalid - before.invalid
    );
    line
}

/// 123456.0 as "123.5k".
pub fn si(x: f64) -> String {
    if x >= 1e6 {
        format!("{:.2}M", x / 1e6)
    } else if x >= 1e3 {
        format!("{:.1}k", x / 1e3)
    } else {
        format!("{x:.0}")
    }
}

/// Latency quantiles in microseconds.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Latency {
    pub count: u64,
    pub mean_us: f64,
    pub p50_us: f64,
    pub p90_us: f64,
    pub p99_us: f64,
    pub p999_us: f64,
    pub max_us: f64,
}

impl Latency {
    pub fn of(h: &Histogram) -> Latency {
        let us = |ns: u64| ns as f64 / 1000.0;
        Latency {
            count: h.count(),
            mean_us: h.mean() / 1000.0,
            p50_us: us(h.quantile(0.5)),
            p90_us: us(h.quantile(0.9)),
            p99_us: us(h.quantile(0.99)),
            p999_us: us(h.quantile(0.999)),
            max_us: us(h.max()),
        }
    }
}

#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct KindSummary {
    pub sent: u64,
    pub ok: u64,
    pub errors: u64,
    pub timeouts: u64,
    /// Answers (ok and errors) per second.
    pub responses_per_sec: f64,
    pub latency: Latency,
}

/// The end-of-run report; also what `--json` writes.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Summary {
    pub protocol: String,
    pub target: String,
    pub mode: String,
    pub workers: usize,
    /// Sockets (UDP) or connections (HTTP) in all.
    pub sockets: u32,
    /// Source addresses the load came from (UDP; for HTTP, a connection is
    /// a source).
    pub sources: u32,
    pub duration_secs: f64,
    pub requests_sent: u64,
    pub responses: u64,
    pub responses_per_sec: f64,
    pub ok: u64,
    pub errors: u64,
    pub timeouts: u64,
    pub invalid: u64,
    pub late: u64,
    pub send_failed: u64,
    pub skipped: u64,
    pub connections: u64,
    /// HTTP: requests sent again after their connection closed unanswered.
    pub retried: u64,
    /// WebSocket: announce answers to answer-announces (not in `responses`).
    pub answer_acks: u64,
    /// WebSocket: how the connections were opened before the measured load.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ramp: Option<Ramp>,
    pub peers_per_announce: f64,
    pub latency: Latency,
    pub by_kind: std::collections::BTreeMap<String, KindSummary>,
    pub invalid_by_reason: std::collections::BTreeMap<String, u64>,
    pub errors_by_message: std::collections::BTreeMap<String, u64>,
    /// Valid answers that carried a warning, by message (counted in `ok`).
    #[serde(skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub warnings_by_message: std::collections::BTreeMap<String, u64>,
    pub failures_by_reason: std::collections::BTreeMap<String, u64>,
}

/// WebSocket: every connection opened and announced once before the
/// measured load.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Ramp {
    /// Connections open and answered when the measured load began.
    pub connections: u64,
    /// Connections asked for.
    pub asked: u64,
    /// Seconds from the start until they were.
    pub secs: f64,
    /// Seconds the connections then stayed idle (`ws.hold_secs`).
    pub hold_secs: f64,
}

pub struct RunInfo<'a> {
    pub protocol: &'a str,
    pub target: &'a str,
    pub mode: String,
    pub workers: usize,
    pub sockets: u32,
    pub sources: u32,
    pub kinds: &'a [Kind],
}

impl Summary {
    pub fn new(stats: &Stats, info: &RunInfo<'_>, duration_secs: f64) -> Summary {
        let c = &stats.counters;
        let mut all = Histogram::default();
        let mut by_kind = std::collections::BTreeMap::new();
        for &k in info.kinds {
            let i = k as usize;
            all.merge(&stats.latency[i]);
            by_kind.insert(
                k.name().to_string(),
                KindSummary {
                    sent: c.sent[i],
                    ok: c.ok[i],
                    errors: c.errors[i],
                    timeouts: c.timeouts[i],
                    responses_per_sec: (c.ok[i] + c.errors[i]) as f64 / duration_secs,
                    latency: Latency::of(&stats.latency[i]),
                },
            );
        }
        let invalid_by_reason = Invalid::ALL
            .iter()
            .filter(|why| stats.invalid[**why as usize] > 0)
            .map(|why| (why.name().to_string(), stats.invalid[*why as usize]))
            .collect();
        let errors_by_message = stats.error_messages.to_map();
        let warnings_by_message = stats.warnings.to_map();
        let failures_by_reason = stats
            .failures
            .by_message
            .iter()
            .map(|(m, n)| (m.clone(), *n))
            .collect();
        let responses = c.answered();
        Summary {
            protocol: info.protocol.into(),
            target: info.target.into(),
            mode: info.mode.clone(),
            workers: info.workers,
            sockets: info.sockets,
            sources: info.sources,
            duration_secs,
            // Offers ride inside announces: they are not requests of their own.
            requests_sent: Kind::ALL
                .iter()
                .filter(|&&k| k != Kind::Offer)
                .map(|&k| c.sent[k as usize])
                .sum(),
            responses,
            responses_per_sec: responses as f64 / duration_secs,
            ok: c.ok.iter().sum(),
            errors: c.errors.iter().sum(),
            timeouts: c.timeouts.iter().sum(),
            invalid: c.invalid,
            late: stats.late,
            send_failed: stats.send_failed,
            skipped: stats.skipped,
            connections: stats.connections,
            retried: stats.retried,
            answer_acks: stats.answer_acks,
            ramp: None,
            peers_per_announce: if stats.announces_with_peers == 0 {
                0.0
            } else {
                stats.peers_returned as f64 / stats.announces_with_peers as f64
            },
            latency: Latency::of(&all),
            by_kind,
            invalid_by_reason,
            errors_by_message,
            warnings_by_message,
            failures_by_reason,
        }
    }

    pub fn to_json(&self) -> String {
        serde_json::to_string_pretty(self).expect("a summary always serializes")
    }

    /// The human-readable report.
    pub fn to_text(&self) -> String {
        let mut out = String::new();
        let mut line = |s: String| {
            out.push_str(&s);
            out.push('\n');
        };
        let endpoints = match self.protocol.as_str() {
            "udp" => format!("{} sources on {} sockets", self.sources, self.sockets),
            "ws" | "wss" => format!(
                "{} connections from {} addresses",
                self.sockets, self.sources
            ),
            _ => format!("{} connections", self.sockets),
        };
        line(format!(
            "{} load on {} ({}), {} worker(s), {endpoints}, {:.2} s",
            self.protocol, self.target, self.mode, self.workers, self.duration_secs
        ));
        line(format!(
            "requests sent {}   responses {} ({}/s)   errors {}   time-outs {}   invalid {}",
            self.requests_sent,
            self.responses,
            si(self.responses_per_sec),
            self.errors,
            self.timeouts,
            self.invalid
        ));
        if self.late + self.send_failed + self.skipped > 0 {
            line(format!(
                "late answers {}   send failures {}   skipped (too many in flight) {}",
                self.late, self.send_failed, self.skipped
            ));
        }
        if let Some(ramp) = &self.ramp {
            line(format!(
                "ramp: {} of {} connections open and announced in {:.2} s, then idle {:.2} s",
                ramp.connections, ramp.asked, ramp.secs, ramp.hold_secs
            ));
        }
        if self.answer_acks > 0 {
            line(format!(
                "announce answers to answers (not counted as responses) {}",
                self.answer_acks
            ));
        }
        if self.connections > 0 {
            line(format!(
                "connections opened {}   retried on a new connection {}",
                self.connections, self.retried
            ));
        }
        line(format!(
            "{:<9} {:>10} {:>10} {:>8} {:>9} {:>10} {:>8} {:>8} {:>8} {:>8} {:>9}",
            "",
            "sent",
            "resp/s",
            "errors",
            "timeouts",
            "p50 us",
            "p90",
            "p99",
            "p99.9",
            "max",
            "mean"
        ));
        let all = KindSummary {
            sent: self.requests_sent,
            ok: self.ok,
            errors: self.errors,
            timeouts: self.timeouts,
            responses_per_sec: self.responses_per_sec,
            latency: self.latency.clone(),
        };
        let kinds = self
            .by_kind
            .iter()
            .map(|(name, k)| (name.as_str(), k))
            .chain(std::iter::once(("all", &all)));
        for (name, k) in kinds {
            let l = &k.latency;
            line(format!(
                "{:<9} {:>10} {:>10} {:>8} {:>9} {:>10.1} {:>8.1} {:>8.1} {:>8.1} {:>8.1} {:>9.1}",
                name,
                k.sent,
                si(k.responses_per_sec),
                k.errors,
                k.timeouts,
                l.p50_us,
                l.p90_us,
                l.p99_us,
                l.p999_us,
                l.max_us,
                l.mean_us
            ));
        }
        // WebTorrent's announce answers hand out no peers (offers go instead).
        if !matches!(self.protocol.as_str(), "ws" | "wss") {
            line(format!(
                "peers per announce response {:.1}",
                self.peers_per_announce
            ));
        }
        for (why, n) in &self.invalid_by_reason {
            line(format!("invalid: {why} {n}"));
        }
        for (message, n) in &self.errors_by_message {
            line(format!("error answer: \"{message}\" {n}"));
        }
        for (message, n) in &self.warnings_by_message {
            line(format!("warning (answer valid): \"{message}\" {n}"));
        }
        for (reason, n) in &self.failures_by_reason {
            line(format!("failure: {reason} {n}"));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_adds_everything() {
        let mut a = Stats::default();
        a.sent(Kind::Announce);
        a.ok(Kind::Announce, 1000);
        a.announce_peers(10);
        a.error(Kind::Connect, b"bad thing", 5);
        a.invalid(Invalid::SelfInPeers);
        let mut b = Stats::default();
        b.sent(Kind::Announce);
        b.ok(Kind::Announce, 3000);
        b.announce_peers(20);
        b.error(Kind::Scrape, b"bad thing", 5);
        b.error(Kind::Scrape, b"another", 5);
        b.timeout(Kind::Scrape);
        b.late += 2;
        b.connections += 3;
        b.retried += 1;
        a.merge(&b);
        assert_eq!(a.counters.sent[Kind::Announce as usize], 2);
        assert_eq!(a.counters.ok[Kind::Announce as usize], 2);
        assert_eq!(a.counters.timeouts[Kind::Scrape as usize], 1);
        assert_eq!(a.counters.invalid, 1);
        assert_eq!(a.invalid[Invalid::SelfInPeers as usize], 1);
        assert_eq!(a.late, 2);
        assert_eq!(a.retried, 1);
        assert_eq!(a.latency[Kind::Announce as usize].count(), 2);
        assert_eq!(
            a.error_messages.by_message,
            vec![("bad thing".to_string(), 2), ("another".to_string(), 1)]
        );

        let info = RunInfo {
            protocol: "udp",
            target: "127.0.0.1:1",
            mode: "closed loop".into(),
            workers: 2,
            sockets: 4,
            sources: 4,
            kinds: &Kind::ALL,
        };
        let summary = Summary::new(&a, &info, 2.0);
        assert_eq!(summary.requests_sent, 2);
        assert_eq!(summary.responses, 5);
        assert_eq!(summary.responses_per_sec, 2.5);
        assert_eq!(summary.peers_per_announce, 15.0);
        assert_eq!(summary.invalid_by_reason["self_in_peers"], 1);
        assert_eq!(summary.errors_by_message["bad thing"], 2);
        assert_eq!(summary.by_kind["announce"].latency.max_us, 3.0);
        let json: serde_json::Value = serde_json::from_str(&summary.to_json()).unwrap();
        assert_eq!(json["responses"], 5);
        assert_eq!(json["by_kind"]["scrape"]["timeouts"], 1);
        assert_eq!(json["retried"], 1);
        let text = summary.to_text();
        assert!(text.contains("retried on a new connection 1"), "{text}");
        assert!(text.contains("invalid: self_in_peers 1"), "{text}");
        assert!(text.contains("peers per announce response 15.0"), "{text}");
    }

    #[test]
    fn error_messages_are_bounded() {
        let mut m = ErrorMessages::default();
        for i in 0..100 {
            m.add(format!("message {i}").as_bytes(), 1);
        }
        assert_eq!(m.by_message.len(), MAX_MESSAGES);
        assert_eq!(m.other, 100 - MAX_MESSAGES as u64);
    }

    #[test]
    fn progress_shows_rates_of_the_interval() {
        let before = Counters::default();
        let mut now = Counters::default();
        now.ok[Kind::Connect as usize] = 1500;
        now.ok[Kind::Announce as usize] = 1000;
        now.errors[Kind::Announce as usize] = 500;
        now.timeouts[Kind::Scrape as usize] = 3;
        let line = progress_line(2.0, &now, &before, 0.5, &Kind::ALL);
        assert!(line.contains("connect 3.0k/s"), "{line}");
        assert!(line.contains("announce 3.0k/s"), "{line}");
        assert!(line.contains("total 6.0k/s"), "{line}");
        assert!(line.contains("errors 500"), "{line}");
        assert!(line.contains("timeouts 3"), "{line}");
        assert_eq!(si(1_234_567.0), "1.23M");
        assert_eq!(si(999.0), "999");
    }
}
