//! `bench compare`: runs side by side, each against the first.
//!
//! [`load`] reads each run's `result.json`; [`rows`] lays out, per operation (and the total),
//! throughput and the latency figures of every run with the ratio of each run to the first;
//! [`text`] prints them; [`crate::output::write_compare_dir`] writes them out with
//! `compare.html` and the overlaid plots.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::PathBuf;

use crate::results::{self, ResultFile, ResultsError};
use crate::stats::OpSummary;

/// One run being compared.
#[derive(Debug, Clone, PartialEq)]
pub struct Run {
    /// How the run is named in the output: its directory's name.
    pub label: String,
    /// The directory (or file) it was read from.
    pub path: PathBuf,
    /// Its `result.json`.
    pub file: ResultFile,
}

/// Reads the `result.json` of each directory in `paths`, in order.
pub fn load(paths: &[PathBuf]) -> Result<Vec<Run>, ResultsError> {
    paths
        .iter()
        .map(|path| {
            let file = results::read_result(path)?;
            let named = if path.is_dir() {
                path.as_path()
            } else {
                path.parent().unwrap_or(path)
            };
            let label = named.file_name().map_or_else(
                || path.display().to_string(),
                |n| n.to_string_lossy().into_owned(),
            );
            Ok(Run {
                label,
                path: path.clone(),
                file,
            })
        })
        .collect()
}

/// A figure compared between runs.
#[derive(Debug, Clone, Copy)]
pub struct Metric {
    /// Shown in the first column.
    pub name: &'static str,
    /// Whether a larger value is better (throughput) or worse (latency).
    pub higher_is_better: bool,
    value: fn(&OpSummary) -> f64,
}

impl PartialEq for Metric {
    /// Metrics are told apart by name.
    fn eq(&self, other: &Self) -> bool {
        self.name == other.name
    }
}

/// The compared figures: ops/s, then mean, p50, p95, p99 and p99.9 in milliseconds.
pub const METRICS: [Metric; 6] = [
    Metric {
        name: "ops/s",
        higher_is_better: true,
        value: |s| s.ops_per_sec,
    },
    Metric {
        name: "mean ms",
        higher_is_better: false,
        value: |s| s.mean_us / 1000.0,
    },
    Metric {
        name: "p50 ms",
        higher_is_better: false,
        value: |s| s.p50_us as f64 / 1000.0,
    },
    Metric {
        name: "p95 ms",
        higher_is_better: false,
        value: |s| s.p95_us as f64 / 1000.0,
    },
    Metric {
        name: "p99 ms",
        higher_is_better: false,
        value: |s| s.p99_us as f64 / 1000.0,
    },
    Metric {
        name: "p99.9 ms",
        higher_is_better: false,
        value: |s| s.p999_us as f64 / 1000.0,
    },
];

/// One line of the comparison: a metric of an operation in every run.
#[derive(Debug, Clone, PartialEq)]
pub struct Row {
    /// Operation name, or `total`.
    pub op: String,
    /// The figure.
    pub metric: Metric,
    /// Its value per run (`None` where the run did not do the operation).
    pub values: Vec<Option<f64>>,
    /// Each value over the first run's (`None` for the first run's own, and where either is
    /// missing or the first is 0).
    pub ratios: Vec<Option<f64>>,
}

/// The comparison rows, per operation (every operation of any run, in table order) and then
/// for the total; six metrics each.
#[must_use]
pub fn rows(runs: &[Run]) -> Vec<Row> {
    let ops: BTreeSet<_> = runs
        .iter()
        .flat_map(|r| r.file.result.per_op.keys().copied())
        .collect();
    let mut groups: Vec<(String, Vec<Option<&OpSummary>>)> = ops
        .iter()
        .map(|op| {
            let summaries = runs.iter().map(|r| r.file.result.per_op.get(op)).collect();
            (op.to_string(), summaries)
        })
        .collect();
    groups.push((
        "total".to_owned(),
        runs.iter().map(|r| Some(&r.file.result.total)).collect(),
    ));
    let mut rows = Vec::new();
    for (op, summaries) in groups {
        for metric in METRICS {
            let values: Vec<Option<f64>> = summaries
                .iter()
                .map(|s| s.map(|s| (metric.value)(s)))
                .collect();
            let first = values.first().copied().flatten();
            let ratios = values
                .iter()
                .enumerate()
                .map(|(i, v)| match (i, first, v) {
                    (0, _, _) => None,
                    (_, Some(base), Some(v)) if base > 0.0 => Some(v / base),
                    _ => None,
                })
                .collect();
            rows.push(Row {
                op: op.clone(),
                metric,
                values,
                ratios,
            });
        }
    }
    rows
}

/// The comparison as text: the runs, then per operation a block of the metrics, each run's
/// value followed by its ratio to run `[1]`.
#[must_use]
pub fn text(runs: &[Run]) -> String {
    let mut out = String::from("runs:\n");
    for (i, run) in runs.iter().enumerate() {
        let f = &run.file;
        let _ = writeln!(
            out,
            "  [{}] {} ({}, started {}, {} cores)",
            i + 1,
            run.path.display(),
            f.result.scenario_name,
            f.started_at,
            f.host.cores
        );
    }
    let mut current = String::new();
    for row in rows(runs) {
        if row.op != current {
            current.clone_from(&row.op);
            let _ = write!(out, "\n{:<10}", row.op);
            for i in 0..runs.len() {
                let _ = write!(out, " {:>12}", format!("[{}]", i + 1));
                if i > 0 {
                    let _ = write!(out, " {:>8}", format!("/[1]"));
                }
            }
            out.push('\n');
        }
        let _ = write!(out, "{:<10}", row.metric.name);
        for (i, (value, ratio)) in row.values.iter().zip(&row.ratios).enumerate() {
            let value = value.map_or("-".to_owned(), |v| {
                if row.metric.higher_is_better {
                    format!("{v:.1}")
                } else {
                    format!("{v:.3}")
                }
            });
            let _ = write!(out, " {value:>12}");
            if i > 0 {
                let ratio = ratio.map_or("-".to_owned(), |r| format!("{r:.2}x"));
                let _ = write!(out, " {ratio:>8}");
            }
        }
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, SystemTime};

    use super::*;
    use crate::results::{HostInfo, rfc3339, write_json};
    use crate::scenario::Operation;
    use std::path::Path;

    /// Writes a synthetic run whose get and total figures have the given ops/s and p99.
    fn write_run(dir: &Path, name: &str, ops_per_sec: f64, p99_us: u64) -> PathBuf {
        let mut result = crate::results::tests::synthetic_result();
        for s in result.per_op.values_mut().chain([&mut result.total]) {
            s.ops_per_sec = ops_per_sec;
            s.p99_us = p99_us;
        }
        result.elapsed = Duration::from_secs(3);
        let file = ResultFile {
            trireme_version: "0.1.0".to_owned(),
            started_at: rfc3339(SystemTime::UNIX_EPOCH),
            command: "trireme bench".to_owned(),
            host: HostInfo::current(),
            scenario: crate::preset("consul-put").unwrap(),
            result,
        };
        let run = dir.join(name);
        std::fs::create_dir_all(&run).unwrap();
        write_json(&run, "result.json", &file).unwrap();
        run
    }

    #[test]
    fn ratios_are_each_run_over_the_first() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_run(dir.path(), "a", 1000.0, 2000);
        let b = write_run(dir.path(), "b", 1500.0, 1000);
        let runs = load(&[a, b]).unwrap();
        assert_eq!(runs[0].label, "a");
        let rows = rows(&runs);
        assert_eq!(rows.len(), 2 * METRICS.len(), "get and total");
        let find = |op: &str, metric: &str| {
            rows.iter()
                .find(|r| r.op == op && r.metric.name == metric)
                .unwrap()
                .clone()
        };
        let ops = find("get", "ops/s");
        assert_eq!(ops.values, vec![Some(1000.0), Some(1500.0)]);
        assert_eq!(ops.ratios, vec![None, Some(1.5)]);
        let p99 = find("total", "p99 ms");
        assert_eq!(p99.values, vec![Some(2.0), Some(1.0)]);
        assert_eq!(p99.ratios, vec![None, Some(0.5)]);
        let text = text(&runs);
        assert!(text.contains("1.50x"), "{text}");
        assert!(text.contains("0.50x"), "{text}");
        let out = dir.path().join("cmp");
        crate::output::write_compare_dir(&out, &runs).unwrap();
        for name in [
            "compare.html",
            "compare-throughput.svg",
            "compare-latency.svg",
        ] {
            assert!(out.join(name).is_file(), "{name}");
        }
        let svg = std::fs::read_to_string(out.join("compare-throughput.svg")).unwrap();
        let names = crate::plot::tests::check_xml(&svg);
        assert_eq!(names.iter().filter(|n| *n == "polyline").count(), 2);
        let html = std::fs::read_to_string(out.join("compare.html")).unwrap();
        assert!(html.contains("1.50×"));
    }

    #[test]
    fn an_operation_missing_from_a_run_has_no_value_or_ratio() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_run(dir.path(), "a", 1000.0, 2000);
        let b = write_run(dir.path(), "b", 1000.0, 2000);
        let mut runs = load(&[a, b]).unwrap();
        runs[0].file.result.per_op.remove(&Operation::Get);
        let rows = rows(&runs);
        let get = rows.iter().find(|r| r.op == "get").unwrap();
        assert_eq!(get.values, vec![None, Some(1000.0)]);
        assert_eq!(get.ratios, vec![None, None]);
    }

    #[test]
    fn a_missing_result_json_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let a = write_run(dir.path(), "a", 1000.0, 2000);
        let missing = dir.path().join("nothing-here");
        std::fs::create_dir_all(&missing).unwrap();
        let err = load(&[a, missing.clone()]).unwrap_err().to_string();
        assert!(
            err.contains(&missing.join("result.json").display().to_string()),
            "{err}"
        );
    }
}
