//! The request rates the site API's `GET stats` reports (UNIT3D-Announce's
//! figures: requests and announce answers per second over 1 s, 10 s, 60 s,
//! 15 min and 2 h), from every worker's counters, gathered once a second on
//! worker 0.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::Rc;
use std::time::Duration;

use tracker_private::answer::ApiStats;
use tracker_runtime::clock;
use tracker_runtime::metrics::{REQUESTS, RESPONSES};
use tracker_runtime::shard::Shard;

/// The windows, in seconds; the longest bounds the history kept.
const WINDOWS: [u64; 5] = [1, 10, 60, 900, 7200];

/// Totals once a second, with what `GET stats` derives from them.
pub struct RequestRates {
    started_at: u64,
    /// (Unix seconds, requests, announce answers), oldest first, at most
    /// the longest window and one more.
    history: RefCell<VecDeque<(u64, u64, u64)>>,
    last_request_at: Cell<u64>,
    last_announce_response_at: Cell<u64>,
}

impl RequestRates {
    pub fn new() -> Rc<RequestRates> {
        Rc::new(RequestRates {
            started_at: clock::unix_secs(),
            history: RefCell::new(VecDeque::with_capacity(WINDOWS[4] as usize + 2)),
            last_request_at: Cell::new(0),
            last_announce_response_at: Cell::new(0),
        })
    }

    /// Gathers every worker's totals once a second, until the process ends.
    pub async fn record_forever(self: Rc<Self>, shard: Rc<Shard>) {
        loop {
            glommio::timer::sleep(Duration::from_secs(1)).await;
            let Ok(workers) = shard.metrics().await else {
                continue;
            };
            let (mut requests, mut announces) = (0u64, 0u64);
            for sample in workers.iter().flat_map(|(_, samples)| samples) {
                if std::ptr::eq(sample.family, &REQUESTS) {
                    requests += sample.value;
                } else if std::ptr::eq(sample.family, &RESPONSES)
                    && sample.labels.contains(&("action", "announce"))
                {
                    announces += sample.value;
                }
            }
            self.record(clock::unix_secs(), requests, announces);
        }
    }

    fn record(&self, now: u64, requests: u64, announces: u64) {
        let mut history = self.history.borrow_mut();
        // Counted from zero at start: the first sample sees what came before.
        let (_, last_requests, last_announces) = history.back().copied().unwrap_or_default();
        if requests > last_requests {
            self.last_request_at.set(now);
        }
        if announces > last_announces {
            self.last_announce_response_at.set(now);
        }
        history.push_back((now, requests, announces));
        while history.len() > WINDOWS[4] as usize + 1 {
            history.pop_front();
        }
    }

    /// The rates over each window (over the history there is, for a window
    /// longer than the time served so far).
    pub fn stats(&self) -> ApiStats {
        let history = self.history.borrow();
        let rate = |window: u64, pick: fn(&(u64, u64, u64)) -> u64| -> f64 {
            let Some(newest) = history.back() else {
                return 0.0;
            };
            let since = newest.0.saturating_sub(window);
            let oldest = history
                .iter()
                .find(|entry| entry.0 >= since)
                .unwrap_or(newest);
            let secs = newest.0.saturating_sub(oldest.0);
            if secs == 0 {
                return 0.0;
            }
            pick(newest).saturating_sub(pick(oldest)) as f64 / secs as f64
        };
        let requests = |w| rate(w, |e| e.1);
        let announces = |w| rate(w, |e| e.2);
        ApiStats {
            created_at: self.started_at as f64,
            last_request_at: self.last_request_at.get() as f64,
            last_announce_response_at: self.last_announce_response_at.get() as f64,
            requests_per_1s: requests(WINDOWS[0]),
            requests_per_10s: requests(WINDOWS[1]),
            requests_per_60s: requests(WINDOWS[2]),
            requests_per_900s: requests(WINDOWS[3]),
            requests_per_7200s: requests(WINDOWS[4]),
            announce_responses_per_1s: announces(WINDOWS[0]),
            announce_responses_per_10s: announces(WINDOWS[1]),
            announce_responses_per_60s: announces(WINDOWS[2]),
            announce_responses_per_900s: announces(WINDOWS[3]),
            announce_responses_per_7200s: announces(WINDOWS[4]),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_over_each_window_from_the_totals() {
        let rates = RequestRates::new();
        assert_eq!(rates.stats().requests_per_10s, 0.0);
        // 100 requests and 50 announce answers a second for 20 s, then
        // nothing for 5 s.
        for t in 0..=20 {
            rates.record(1000 + t, 100 * t, 50 * t);
        }
        for t in 21..=25 {
            rates.record(1000 + t, 2000, 1000);
        }
        let stats = rates.stats();
        assert_eq!(stats.requests_per_1s, 0.0);
        assert_eq!(stats.requests_per_10s, 500.0 / 10.0);
        assert_eq!(stats.announce_responses_per_60s, 1000.0 / 25.0);
        assert_eq!(stats.last_request_at, 1020.0);
        assert_eq!(stats.last_announce_response_at, 1020.0);
        // The history stops at the longest window.
        for t in 26..10_000 {
            rates.record(1000 + t, 2000, 1000);
        }
        assert_eq!(rates.history.borrow().len(), 7201);
    }
}
