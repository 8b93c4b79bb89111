//! Smoke tests of the load generator against the real tracker: a second of
//! load over UDP, over HTTPS (certificate checked) and over WebSocket (ws
//! and wss), and not one invalid answer, error or time-out. The generator runs in-process (the `load-test`
//! library behind the binary); the tracker is the real binary.

mod support;

use support::{small_load, Tracker};

fn assert_clean(summary: &load_test::stats::Summary, kinds: &[&str]) {
    assert_valid(summary, kinds);
    // Swarms fill up within the second: announces get peers back.
    let text = summary.to_text();
    assert!(summary.peers_per_announce > 0.0, "{text}");
}

fn assert_valid(summary: &load_test::stats::Summary, kinds: &[&str]) {
    let text = summary.to_text();
    assert_eq!(summary.invalid, 0, "{text}");
    assert_eq!(summary.errors, 0, "{text}");
    assert_eq!(summary.timeouts, 0, "{text}");
    assert_eq!(summary.send_failed, 0, "{text}");
    assert!(summary.responses >= 100, "{text}");
    for kind in kinds {
        assert!(summary.by_kind[*kind].ok > 0, "no {kind} answered: {text}");
    }
}

#[test]
fn udp_load_gets_only_valid_answers() {
    let tracker = Tracker::builder().udp(None).start();
    let mut config = small_load(tracker.udp[0].to_string());
    // Enough scrapes to see some in a second.
    config.udp.mix.scrape = 10;
    let summary = load_test::udp::run(&config).expect("load-test udp");
    assert_clean(&summary, &["connect", "announce", "scrape"]);
}

#[test]
fn https_load_gets_only_valid_answers() {
    let tracker = Tracker::builder().https(None).start();
    let tls = tracker.tls.as_ref().expect("test certificate");
    let mut config = small_load(format!("https://{}/announce", tracker.https[0]));
    config.http.ca = Some(tls.cert_file.0.clone());
    config.http.mix.scrape = 10;
    let summary = load_test::http::run(&config).expect("load-test http");
    assert_clean(&summary, &["announce", "scrape"]);
}

/// A WebSocket load of a second: every connection opens and announces
/// first, then announces with offers, answers half the offers relayed to it,
/// and scrapes; offers and answers come back through the tracker to the
/// connections of the peers they are for.
fn ws_load(target: String) -> load_test::config::Config {
    let mut config = small_load(target);
    config.ws.connections = 16;
    config.ws.mix.scrape = 10;
    // Few torrents, so that swarms hold peers to send offers to.
    config.traffic.torrents = 200;
    config
}

fn assert_ws_clean(summary: &load_test::stats::Summary) {
    assert_valid(summary, &["announce", "offer", "answer", "scrape"]);
    let text = summary.to_text();
    let ramp = summary.ramp.as_ref().expect("a ramp");
    assert_eq!(ramp.connections, 16, "{text}");
    // Our tracker announces no answer that comes alone (WebTorrent's).
    assert_eq!(summary.answer_acks, 0, "{text}");
}

#[test]
fn ws_load_gets_only_valid_answers() {
    let tracker = Tracker::builder().http(None).start();
    let config = ws_load(format!("ws://{}/announce", tracker.http[0]));
    let summary = load_test::ws::run(&config).expect("load-test ws");
    assert_ws_clean(&summary);
}

#[test]
fn wss_load_gets_only_valid_answers() {
    let tracker = Tracker::builder().https(None).start();
    let tls = tracker.tls.as_ref().expect("test certificate");
    let mut config = ws_load(format!("wss://{}/", tracker.https[0]));
    config.ws.ca = Some(tls.cert_file.0.clone());
    let summary = load_test::ws::run(&config).expect("load-test ws");
    assert_ws_clean(&summary);
}
