//! `--repeat N`: how much the same scenario's figures vary from one run to the next.
//!
//! For each operation (and the total), [`summarise`] gives the mean, minimum, maximum and
//! relative spread `(max - min) / mean` of the throughput and of the p99 latency over the
//! runs; [`text`] prints them and [`RepeatSummary`] is what `repeat.json` holds.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use serde::{Deserialize, Serialize};

use crate::runner::RunResult;
use crate::stats::OpSummary;

/// Mean, minimum, maximum and relative spread of one figure over the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct Spread {
    /// Arithmetic mean.
    pub mean: f64,
    /// Smallest value.
    pub min: f64,
    /// Largest value.
    pub max: f64,
    /// `(max - min) / mean`; 0 when the mean is 0.
    pub spread: f64,
}

impl Spread {
    /// The spread of `values`; `None` if there are none.
    #[must_use]
    pub fn of(values: &[f64]) -> Option<Spread> {
        if values.is_empty() {
            return None;
        }
        let mean = values.iter().sum::<f64>() / values.len() as f64;
        let min = values.iter().copied().fold(f64::INFINITY, f64::min);
        let max = values.iter().copied().fold(f64::NEG_INFINITY, f64::max);
        let spread = if mean > 0.0 { (max - min) / mean } else { 0.0 };
        Some(Spread {
            mean,
            min,
            max,
            spread,
        })
    }
}

/// The spread of one operation's figures over the runs.
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
pub struct RepeatOp {
    /// Throughput, operations per second.
    pub ops_per_sec: Spread,
    /// p99 latency in milliseconds.
    pub p99_ms: Spread,
}

/// `repeat.json`: the runs of one `--repeat` and their spread.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RepeatSummary {
    /// The scenario's name.
    pub scenario: String,
    /// How many runs there were.
    pub repeat: usize,
    /// Each run's results directory, in order (empty names if results were not written).
    pub runs: Vec<String>,
    /// Per operation (and `total`): the spread.
    pub per_op: BTreeMap<String, RepeatOp>,
}

fn spread_of(summaries: &[&OpSummary]) -> Option<RepeatOp> {
    let ops: Vec<f64> = summaries.iter().map(|s| s.ops_per_sec).collect();
    let p99: Vec<f64> = summaries.iter().map(|s| s.p99_us as f64 / 1000.0).collect();
    Some(RepeatOp {
        ops_per_sec: Spread::of(&ops)?,
        p99_ms: Spread::of(&p99)?,
    })
}

/// The spread per operation over `results`, operations missing from a run left out of that
/// operation's figures, plus `total`.
#[must_use]
pub fn summarise(results: &[&RunResult]) -> BTreeMap<String, RepeatOp> {
    let mut per_op = BTreeMap::new();
    let ops: std::collections::BTreeSet<_> = results
        .iter()
        .flat_map(|r| r.per_op.keys().copied())
        .collect();
    for op in ops {
        let summaries: Vec<&OpSummary> = results.iter().filter_map(|r| r.per_op.get(&op)).collect();
        if let Some(spread) = spread_of(&summaries) {
            per_op.insert(op.to_string(), spread);
        }
    }
    let totals: Vec<&OpSummary> = results.iter().map(|r| &r.total).collect();
    if let Some(spread) = spread_of(&totals) {
        per_op.insert("total".to_owned(), spread);
    }
    per_op
}

/// The spread table: per operation, ops/s and p99 (ms), each as mean, min, max and spread.
#[must_use]
pub fn text(summary: &RepeatSummary) -> String {
    let mut out = format!(
        "{} runs of {}:\n{:<8} {:<8} {:>12} {:>12} {:>12} {:>8}\n",
        summary.repeat, summary.scenario, "op", "figure", "mean", "min", "max", "spread"
    );
    // Table order: operations first (BTreeMap order of their names), total last.
    let rows = summary
        .per_op
        .iter()
        .filter(|(name, _)| *name != "total")
        .chain(summary.per_op.get_key_value("total"));
    for (name, op) in rows {
        for (figure, s, decimals) in [("ops/s", &op.ops_per_sec, 1), ("p99 ms", &op.p99_ms, 3)] {
            let _ = writeln!(
                out,
                "{name:<8} {figure:<8} {:>12.decimals$} {:>12.decimals$} {:>12.decimals$} {:>7.1}%",
                s.mean,
                s.min,
                s.max,
                s.spread * 100.0
            );
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::scenario::Operation;

    #[test]
    fn spread_of_known_values() {
        let s = Spread::of(&[90.0, 100.0, 110.0]).unwrap();
        assert_eq!((s.mean, s.min, s.max), (100.0, 90.0, 110.0));
        assert!((s.spread - 0.2).abs() < 1e-12);
        assert_eq!(Spread::of(&[]), None);
        assert_eq!(Spread::of(&[0.0, 0.0]).unwrap().spread, 0.0);
    }

    #[test]
    fn summarise_runs_per_operation_and_total() {
        let base = crate::results::tests::synthetic_result();
        let runs: Vec<RunResult> = [(1000.0, 1000), (1200.0, 3000)]
            .into_iter()
            .map(|(ops, p99)| {
                let mut r = base.clone();
                for s in r.per_op.values_mut().chain([&mut r.total]) {
                    s.ops_per_sec = ops;
                    s.p99_us = p99;
                }
                r
            })
            .collect();
        let refs: Vec<&RunResult> = runs.iter().collect();
        let per_op = summarise(&refs);
        let get = per_op[Operation::Get.name()];
        assert_eq!(get.ops_per_sec.mean, 1100.0);
        assert!((get.ops_per_sec.spread - 200.0 / 1100.0).abs() < 1e-12);
        assert_eq!(
            (get.p99_ms.min, get.p99_ms.max, get.p99_ms.mean),
            (1.0, 3.0, 2.0)
        );
        assert!((get.p99_ms.spread - 1.0).abs() < 1e-12);
        assert!(per_op.contains_key("total"));
        let summary = RepeatSummary {
            scenario: "s".to_owned(),
            repeat: 2,
            runs: vec!["a".to_owned(), "b".to_owned()],
            per_op,
        };
        let text = text(&summary);
        assert!(
            text.contains("get      ops/s          1100.0       1000.0       1200.0    18.2%"),
            "{text}"
        );
        assert!(
            text.lines().last().unwrap().starts_with("total    p99 ms"),
            "{text}"
        );
    }
}
