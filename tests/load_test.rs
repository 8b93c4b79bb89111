//! Smoke tests of the load generator against the real tracker: a second of
//! load over UDP and over HTTPS (certificate checked), and not one invalid
//! answer, error or time-out. The generator runs in-process (the `load-test`
//! library behind the binary); the tracker is the real binary.

mod support;

use support::{small_load, Tracker};

fn assert_clean(summary: &load_test::stats::Summary, kinds: &[&str]) {
    let text = summary.to_text();
    assert_eq!(summary.invalid, 0, "{text}");
    assert_eq!(summary.errors, 0, "{text}");
    assert_eq!(summary.timeouts, 0, "{text}");
    assert_eq!(summary.send_failed, 0, "{text}");
    assert!(summary.responses >= 100, "{text}");
    for kind in kinds {
        assert!(summary.by_kind[*kind].ok > 0, "no {kind} answered: {text}");
    }
    // Swarms fill up within the second: announces get peers back.
    assert!(summary.peers_per_announce > 0.0, "{text}");
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
