//! Line charts as hand-written SVG: throughput and latency over time.
//!
//! [`line_chart`] draws any set of [`Series`] with axes, ticks at round values, grid lines,
//! axis labels and a legend; [`throughput`] and [`latency`] build the series from one or
//! several runs (several for `bench compare`, each series then prefixed by its run's label).
//! The SVG stands alone (no fonts or styles from outside), so it can be inlined in HTML.

use std::fmt::Write as _;

use crate::runner::RunResult;

/// Series colours, picked in turn (colour-blind-friendly Tableau 10).
pub const PALETTE: [&str; 10] = [
    "#4e79a7", "#f28e2b", "#e15759", "#76b7b2", "#59a14f", "#edc948", "#b07aa1", "#ff9da7",
    "#9c755f", "#bab0ac",
];

const WIDTH: f64 = 860.0;
const MIN_HEIGHT: f64 = 380.0;
const LEFT: f64 = 80.0;
const RIGHT: f64 = 200.0;
const TOP: f64 = 44.0;
const BOTTOM: f64 = 56.0;
const LEGEND_ROW: f64 = 20.0;

/// One line of a chart.
#[derive(Debug, Clone, PartialEq)]
pub struct Series {
    /// Shown in the legend.
    pub label: String,
    /// `(x, y)` points in data units, in x order.
    pub points: Vec<(f64, f64)>,
    /// Stroke colour (`#rrggbb`).
    pub color: String,
    /// SVG `stroke-dasharray`, if the line is dashed.
    pub dash: Option<&'static str>,
}

/// A chart: title, axis labels, series.
#[derive(Debug, Clone, PartialEq)]
pub struct Chart {
    /// Shown above the plot.
    pub title: String,
    /// Label of the x axis.
    pub x_label: String,
    /// Label of the y axis.
    pub y_label: String,
    /// The lines.
    pub series: Vec<Series>,
}

/// Escapes `text` for XML character data and attribute values.
#[must_use]
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

/// A round step (1, 2 or 5 times a power of ten) splitting `range` into about `target` parts.
fn nice_step(range: f64, target: f64) -> f64 {
    if !(range.is_finite() && range > 0.0) {
        return 1.0;
    }
    let raw = range / target;
    let magnitude = 10f64.powf(raw.log10().floor());
    let norm = raw / magnitude;
    let nice = if norm <= 1.0 {
        1.0
    } else if norm <= 2.0 {
        2.0
    } else if norm <= 5.0 {
        5.0
    } else {
        10.0
    };
    nice * magnitude
}

/// Tick positions `0, step, ...` up to the first at or above `max`.
fn ticks(max: f64) -> (Vec<f64>, f64) {
    let step = nice_step(max, 5.0);
    let top = ((max / step).ceil() * step).max(step);
    let n = (top / step).round() as u32;
    ((0..=n).map(|i| f64::from(i) * step).collect(), step)
}

/// A tick label with as many decimals as the step needs.
fn tick_label(value: f64, step: f64) -> String {
    let decimals = if step >= 1.0 {
        0
    } else {
        (-step.log10()).ceil() as usize
    };
    format!("{value:.decimals$}")
}

/// Formats a coordinate with two decimals (enough at this size, short files).
fn c(v: f64) -> String {
    format!("{v:.2}")
}

/// Draws `chart` as a standalone SVG document.
#[must_use]
pub fn line_chart(chart: &Chart) -> String {
    let height = MIN_HEIGHT.max(TOP + BOTTOM + LEGEND_ROW * (chart.series.len() as f64 + 1.0));
    let (plot_w, plot_h) = (WIDTH - LEFT - RIGHT, height - TOP - BOTTOM);
    let all = chart.series.iter().flat_map(|s| s.points.iter());
    let (x_max, y_max) = all.fold((0.0f64, 0.0f64), |(x, y), &(px, py)| (x.max(px), y.max(py)));
    // The x axis ends where the data does (ticks at round values inside it); the y axis
    // at the round value above the data.
    let (mut x_ticks, x_step) = ticks(x_max);
    let x_top = if x_max > 0.0 {
        x_ticks.retain(|&x| x <= x_max * (1.0 + 1e-9));
        x_max
    } else {
        x_ticks.last().copied().unwrap_or(1.0)
    };
    let (y_ticks, y_step) = ticks(y_max);
    let y_top = y_ticks.last().copied().unwrap_or(1.0);
    let sx = |x: f64| LEFT + x / x_top * plot_w;
    let sy = |y: f64| TOP + plot_h - y / y_top * plot_h;

    let mut out = String::new();
    let _ = writeln!(
        out,
        r#"<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" viewBox="0 0 {WIDTH} {height}" font-family="system-ui, -apple-system, 'Segoe UI', sans-serif" font-size="12">"#
    );
    let _ = writeln!(
        out,
        r##"<rect x="0" y="0" width="{WIDTH}" height="{height}" fill="#ffffff"/>"##
    );
    let _ = writeln!(
        out,
        r##"<text x="{}" y="24" font-size="15" font-weight="600" fill="#222">{}</text>"##,
        c(LEFT),
        escape(&chart.title)
    );
    // Grid and ticks.
    let _ = writeln!(
        out,
        r##"<g class="grid" stroke="#e6e6e6" stroke-width="1">"##
    );
    for &y in &y_ticks {
        let _ = writeln!(
            out,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}"/>"#,
            c(LEFT),
            c(sy(y)),
            c(LEFT + plot_w),
            c(sy(y))
        );
    }
    for &x in &x_ticks {
        let _ = writeln!(
            out,
            r#"<line x1="{}" y1="{}" x2="{}" y2="{}"/>"#,
            c(sx(x)),
            c(TOP),
            c(sx(x)),
            c(TOP + plot_h)
        );
    }
    let _ = writeln!(out, "</g>");
    let _ = writeln!(out, r##"<g class="axes" stroke="#444" stroke-width="1">"##);
    let _ = writeln!(
        out,
        r#"<line x1="{l}" y1="{b}" x2="{r}" y2="{b}"/><line x1="{l}" y1="{t}" x2="{l}" y2="{b}"/>"#,
        l = c(LEFT),
        r = c(LEFT + plot_w),
        t = c(TOP),
        b = c(TOP + plot_h)
    );
    for &x in &x_ticks {
        let _ = writeln!(
            out,
            r#"<line x1="{x}" y1="{b}" x2="{x}" y2="{b5}"/>"#,
            x = c(sx(x)),
            b = c(TOP + plot_h),
            b5 = c(TOP + plot_h + 5.0)
        );
    }
    for &y in &y_ticks {
        let _ = writeln!(
            out,
            r#"<line x1="{l5}" y1="{y}" x2="{l}" y2="{y}"/>"#,
            l5 = c(LEFT - 5.0),
            l = c(LEFT),
            y = c(sy(y))
        );
    }
    let _ = writeln!(out, "</g>");
    let _ = writeln!(out, r##"<g class="tick-labels" fill="#444">"##);
    for &x in &x_ticks {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="middle">{}</text>"#,
            c(sx(x)),
            c(TOP + plot_h + 19.0),
            tick_label(x, x_step)
        );
    }
    for &y in &y_ticks {
        let _ = writeln!(
            out,
            r#"<text x="{}" y="{}" text-anchor="end">{}</text>"#,
            c(LEFT - 8.0),
            c(sy(y) + 4.0),
            tick_label(y, y_step)
        );
    }
    let _ = writeln!(out, "</g>");
    let _ = writeln!(
        out,
        r##"<text class="x-label" x="{}" y="{}" text-anchor="middle" fill="#222">{}</text>"##,
        c(LEFT + plot_w / 2.0),
        c(height - 14.0),
        escape(&chart.x_label)
    );
    let _ = writeln!(
        out,
        r##"<text class="y-label" transform="translate(18 {}) rotate(-90)" text-anchor="middle" fill="#222">{}</text>"##,
        c(TOP + plot_h / 2.0),
        escape(&chart.y_label)
    );
    // The lines.
    for s in &chart.series {
        let points: Vec<String> = s
            .points
            .iter()
            .map(|&(x, y)| format!("{},{}", c(sx(x)), c(sy(y))))
            .collect();
        let dash = dash_attribute(s.dash);
        let _ = writeln!(
            out,
            r#"<polyline fill="none" stroke="{}" stroke-width="2" stroke-linejoin="round"{dash} points="{}"><title>{}</title></polyline>"#,
            escape(&s.color),
            points.join(" "),
            escape(&s.label)
        );
        // A lone point draws no line: mark it.
        if let [(x, y)] = s.points[..] {
            let _ = writeln!(
                out,
                r#"<circle cx="{}" cy="{}" r="3" fill="{}"/>"#,
                c(sx(x)),
                c(sy(y)),
                escape(&s.color)
            );
        }
    }
    // The legend, right of the plot.
    let lx = LEFT + plot_w + 20.0;
    let _ = writeln!(out, r#"<g class="legend">"#);
    for (i, s) in chart.series.iter().enumerate() {
        let y = TOP + 8.0 + LEGEND_ROW * i as f64;
        let dash = dash_attribute(s.dash);
        let _ = writeln!(
            out,
            r##"<line x1="{}" y1="{y}" x2="{}" y2="{y}" stroke="{}" stroke-width="2"{dash}/><text x="{}" y="{}" fill="#222">{}</text>"##,
            c(lx),
            c(lx + 24.0),
            escape(&s.color),
            c(lx + 30.0),
            c(y + 4.0),
            escape(&s.label),
            y = c(y),
        );
    }
    let _ = writeln!(out, "</g>");
    out.push_str("</svg>\n");
    out
}

/// Legend prefix of a run: its label followed by a space, or nothing.
fn prefix(label: &str) -> String {
    if label.is_empty() {
        String::new()
    } else {
        format!("{label} ")
    }
}

/// Operations/s per operation over time, one line per operation and run.
#[must_use]
pub fn throughput(runs: &[(&str, &RunResult)]) -> String {
    let mut series = Vec::new();
    for (label, result) in runs {
        for &op in result.per_op.keys() {
            let points = result
                .intervals
                .iter()
                .map(|i| {
                    (
                        i.end_s(),
                        i.per_op.get(&op).map_or(0.0, |f| f.summary.ops_per_sec),
                    )
                })
                .collect();
            series.push(Series {
                label: format!("{}{op}", prefix(label)),
                points,
                color: PALETTE[series.len() % PALETTE.len()].to_owned(),
                dash: None,
            });
        }
    }
    line_chart(&Chart {
        title: "Throughput".to_owned(),
        x_label: "seconds since the start of the measured part".to_owned(),
        y_label: "operations/s".to_owned(),
        series,
    })
}

/// The latency percentiles drawn per operation, with their line styles.
const LATENCY_LINES: [(&str, Option<&str>); 3] =
    [("p50", None), ("p95", Some("7 4")), ("p99", Some("2 3"))];

/// p50, p95 and p99 per operation over time, in milliseconds: one colour per operation and
/// run, one line style per percentile.
#[must_use]
pub fn latency(runs: &[(&str, &RunResult)]) -> String {
    let mut series = Vec::new();
    let mut colour = 0;
    for (label, result) in runs {
        for &op in result.per_op.keys() {
            let color = PALETTE[colour % PALETTE.len()];
            colour += 1;
            for (name, dash) in LATENCY_LINES {
                let points = result
                    .intervals
                    .iter()
                    .map(|i| {
                        let us = i.per_op.get(&op).map_or(0, |f| match name {
                            "p50" => f.summary.p50_us,
                            "p95" => f.summary.p95_us,
                            _ => f.summary.p99_us,
                        });
                        (i.end_s(), us as f64 / 1000.0)
                    })
                    .collect();
                series.push(Series {
                    label: format!("{}{op} {name}", prefix(label)),
                    points,
                    color: color.to_owned(),
                    dash,
                });
            }
        }
    }
    line_chart(&Chart {
        title: "Latency".to_owned(),
        x_label: "seconds since the start of the measured part".to_owned(),
        y_label: "milliseconds".to_owned(),
        series,
    })
}

/// The SVG attribute that draws a series dashed (empty for a solid line).
fn dash_attribute(dash: Option<&str>) -> String {
    dash.map(|d| format!(r#" stroke-dasharray="{d}""#))
        .unwrap_or_default()
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;

    /// A minimal XML well-formedness check: every tag closes in order, attributes are quoted,
    /// no stray `<` or `&` in text. Returns the element names in document order.
    pub(crate) fn check_xml(text: &str) -> Vec<String> {
        let mut stack: Vec<String> = Vec::new();
        let mut names = Vec::new();
        let mut rest = text;
        while let Some(open) = rest.find('<') {
            let between = &rest[..open];
            assert!(!between.contains('>'), "stray > in text {between:?}");
            check_entities(between);
            let close = rest[open..].find('>').expect("unclosed tag") + open;
            let tag = &rest[open + 1..close];
            rest = &rest[close + 1..];
            if let Some(name) = tag.strip_prefix('/') {
                assert_eq!(
                    stack.pop().as_deref(),
                    Some(name.trim()),
                    "mismatched </{name}>"
                );
                continue;
            }
            if tag.starts_with('!') || tag.starts_with('?') {
                continue;
            }
            let self_closing = tag.ends_with('/');
            let body = tag.trim_end_matches('/');
            let name = body.split_whitespace().next().expect("tag name").to_owned();
            assert!(
                body.matches('"').count().is_multiple_of(2),
                "unbalanced quotes in <{body}>"
            );
            check_entities(body);
            names.push(name.clone());
            if !self_closing {
                stack.push(name);
            }
        }
        assert!(stack.is_empty(), "unclosed elements {stack:?}");
        names
    }

    fn check_entities(text: &str) {
        for (i, _) in text.match_indices('&') {
            let entity = &text[i..];
            let end = entity.find(';').expect("& without ;");
            assert!(end < 8, "bad entity {}", &entity[..end.min(12)]);
        }
    }

    fn chart(series: usize, points: usize) -> Chart {
        Chart {
            title: "T <&>".to_owned(),
            x_label: "x".to_owned(),
            y_label: "y".to_owned(),
            series: (0..series)
                .map(|i| Series {
                    label: format!("s{i} \"q\""),
                    points: (0..points).map(|p| (p as f64, (p * i) as f64)).collect(),
                    color: PALETTE[i].to_owned(),
                    dash: (i == 1).then_some("4 2"),
                })
                .collect(),
        }
    }

    #[test]
    fn chart_is_well_formed_with_one_polyline_per_series() {
        let svg = line_chart(&chart(3, 10));
        let names = check_xml(&svg);
        assert_eq!(names[0], "svg");
        assert_eq!(names.iter().filter(|n| *n == "polyline").count(), 3);
        assert!(svg.contains("T &lt;&amp;&gt;"));
        assert!(svg.contains("s1 &quot;q&quot;"));
        assert!(svg.contains(r#"stroke-dasharray="4 2""#));
        // Every polyline has all its points, inside the plot area.
        for line in svg.lines().filter(|l| l.starts_with("<polyline")) {
            let points = line
                .split("points=\"")
                .nth(1)
                .unwrap()
                .split('"')
                .next()
                .unwrap();
            let pairs: Vec<(f64, f64)> = points
                .split(' ')
                .map(|p| {
                    let (x, y) = p.split_once(',').unwrap();
                    (x.parse().unwrap(), y.parse().unwrap())
                })
                .collect();
            assert_eq!(pairs.len(), 10);
            for (x, y) in pairs {
                assert!((LEFT..=WIDTH - RIGHT).contains(&x), "x {x}");
                assert!((TOP..=MIN_HEIGHT - BOTTOM).contains(&y), "y {y}");
            }
        }
    }

    #[test]
    fn ticks_are_round_and_cover_the_data() {
        let (t, step) = ticks(93.0);
        assert_eq!(step, 20.0);
        assert_eq!(t, vec![0.0, 20.0, 40.0, 60.0, 80.0, 100.0]);
        let (t, step) = ticks(0.37);
        assert!((step - 0.1).abs() < 1e-12);
        assert_eq!(tick_label(t[4], step), "0.4");
        assert_eq!(ticks(0.0).0, vec![0.0, 1.0]);
        assert_eq!(tick_label(12_000.0, 5000.0), "12000");
    }

    #[test]
    fn empty_and_single_point_charts_still_draw() {
        let svg = line_chart(&chart(0, 0));
        check_xml(&svg);
        let svg = line_chart(&chart(2, 1));
        let names = check_xml(&svg);
        assert_eq!(names.iter().filter(|n| *n == "circle").count(), 2);
        assert!(!svg.contains("NaN"));
    }

    #[test]
    fn run_plots_have_a_line_per_operation_and_percentile() {
        let result = crate::results::tests::synthetic_result();
        let svg = throughput(&[("", &result)]);
        let names = check_xml(&svg);
        assert_eq!(names.iter().filter(|n| *n == "polyline").count(), 1);
        let svg = latency(&[("a", &result), ("b", &result)]);
        let names = check_xml(&svg);
        assert_eq!(names.iter().filter(|n| *n == "polyline").count(), 6);
        assert!(svg.contains(">b get p99<"));
    }
}
