//! The SVG plot of a comparison: responses per second against workers.

use std::fmt::Write as _;

use super::Point;

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::compare::fixtures::{m, points, scaling};
    use crate::compare::Point;

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
