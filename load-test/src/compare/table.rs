//! The Markdown table of a comparison, with our scaling efficiency.

use std::fmt::Write as _;

use super::{Measured, Point};

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
    cpu_table(&mut out, others, points);
    out
}

/// Each run's tracker CPU, where it was read: what tells a tracker that
/// ran out of CPU from one the load could not feed.
fn cpu_table(out: &mut String, others: &[String], points: &[Point]) {
    let runs = |p: &Point| -> Vec<Option<Measured>> {
        [p.pinned, p.unpinned]
            .into_iter()
            .chain(p.others.iter().copied())
            .collect()
    };
    if !points
        .iter()
        .flat_map(runs)
        .flatten()
        .any(|m| m.cpus_busy.is_some())
    {
        return;
    }
    *out += "\nTracker CPU: µs per response, and in brackets the CPUs it kept busy, \
             over each whole run (its set-up included; user and system time of all \
             its threads, from /proc/PID/stat).\n\n| workers | ours pinned | ours unpinned |";
    for name in others {
        let _ = write!(out, " {name} |");
    }
    *out += "\n|";
    *out += &"---:|".repeat(3 + others.len());
    *out += "\n";
    for p in points {
        let _ = write!(out, "| {} |", p.workers);
        for m in runs(p) {
            let text = m
                .and_then(|m| {
                    Some(format!(
                        "{:.2} ({:.1})",
                        m.cpu_us_per_response()?,
                        m.cpus_busy?
                    ))
                })
                .unwrap_or_else(|| "–".to_string());
            let _ = write!(out, " {text} |");
        }
        *out += "\n";
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::fixtures::{points, rows, scaling};

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
        // The CPU table: 10 µs a response in every run of the fixtures.
        let cpu: Vec<&str> = table
            .lines()
            .skip_while(|l| !l.starts_with("Tracker CPU"))
            .filter(|l| l.starts_with("| "))
            .collect();
        assert_eq!(
            cpu[0],
            "| workers | ours pinned | ours unpinned | aquatic | opentracker |"
        );
        assert_eq!(
            cpu[2],
            "| 2 | 10.00 (1.9) | 10.00 (1.6) | – | 10.00 (0.9) |"
        );
    }

    #[test]
    fn without_cpu_readings_there_is_no_cpu_table() {
        let (names, mut points) = scaling();
        for p in &mut points {
            for m in [&mut p.pinned, &mut p.unpinned]
                .into_iter()
                .chain(p.others.iter_mut())
                .flatten()
            {
                m.cpus_busy = None;
            }
        }
        assert!(!markdown("UDP", &names, &points).contains("Tracker CPU"));
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
}
