//! Results shared by the table's and the plot's tests.

use super::{Measured, Point};

pub fn m(rate: f64) -> Option<Measured> {
    Some(Measured {
        responses_per_sec: rate,
        p99_us: 250.0,
        invalid: 0,
        timeouts: 1,
        cpus_busy: Some(rate / 100_000.0),
    })
}

pub fn points() -> Vec<Point> {
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
pub fn scaling() -> (Vec<String>, Vec<Point>) {
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

/// The rows of the first table (the throughput; the CPU table follows).
pub fn rows(table: &str) -> Vec<&str> {
    table
        .lines()
        .skip_while(|l| !l.starts_with('|'))
        .take_while(|l| l.starts_with('|'))
        .filter(|l| l.starts_with("| "))
        .collect()
}
