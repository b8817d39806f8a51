//! Text reports of a [`RunResult`]: the seeds' table and hey's histogram.

use std::collections::BTreeMap;
use std::fmt::Write as _;

use hdrhistogram::Histogram;

use crate::scenario::Operation;

use crate::runner::RunResult;
use crate::stats::OpSummary;

/// Buckets of hey's response time histogram (it has one more: the slowest latency).
const HEY_BUCKETS: u32 = 10;
/// Width of the longest bar of hey's histogram, in characters.
const HEY_BAR: u64 = 40;
/// The percentiles of hey's "Latency distribution".
pub const HEY_PERCENTILES: [u32; 7] = [10, 25, 50, 75, 90, 95, 99];

/// Microseconds as milliseconds with three decimals, without going through floats.
fn ms(us: u64) -> String {
    format!("{}.{:03}", us / 1000, us % 1000)
}

fn row(out: &mut String, name: &str, s: &OpSummary) {
    // Writing to a String cannot fail.
    let _ = writeln!(
        out,
        "{name:<8} {:>10} {:>11.1} {:>10.3} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        s.count,
        s.ops_per_sec,
        s.mean_us / 1000.0,
        ms(s.p50_us),
        ms(s.p95_us),
        ms(s.p99_us),
        ms(s.p999_us),
        ms(s.max_us),
        s.errors,
    );
}

/// The seeds' latency table: one row per operation and a total row; latencies in
/// milliseconds with three decimals, throughput in operations per second.
#[must_use]
pub fn table(result: &RunResult) -> String {
    table_of(&result.per_op, &result.total)
}

/// [`table`] for any per-operation summaries and total (for example the uncorrected ones).
#[must_use]
pub fn table_of(per_op: &BTreeMap<Operation, OpSummary>, total: &OpSummary) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "{:<8} {:>10} {:>11} {:>10} {:>10} {:>10} {:>10} {:>10} {:>10} {:>8}",
        "op",
        "count",
        "ops/s",
        "mean ms",
        "median ms",
        "p95 ms",
        "p99 ms",
        "p99.9 ms",
        "max ms",
        "errors"
    );
    for (op, summary) in per_op {
        row(&mut out, op.name(), summary);
    }
    row(&mut out, "total", total);
    out
}

/// hey's "Response time histogram" and "Latency distribution" of a latency histogram in
/// microseconds, as hey prints them (eleven buckets from the fastest to the slowest
/// latency, bars of ■ scaled to 40 characters, the 10, 25, 50, 75, 90, 95 and 99 % lines),
/// except that latencies are in milliseconds (hey's seconds with three decimals would read
/// 0.000 for most of what a KV store answers). Empty for an empty histogram.
#[must_use]
pub fn hey(h: &Histogram<u64>) -> String {
    let mut out = String::new();
    let buckets = hey_buckets(h);
    if buckets.is_empty() {
        return out;
    }
    let most = buckets.iter().map(|b| b.1).max().unwrap_or(0).max(1);
    let _ = writeln!(out, "Response time histogram (ms):");
    for (mark, count) in &buckets {
        let bar = usize::try_from((count * HEY_BAR + most / 2) / most).unwrap_or(0);
        let _ = writeln!(
            out,
            "  {:4.3} [{count}]\t|{}",
            mark / 1000.0,
            "■".repeat(bar)
        );
    }
    let _ = writeln!(out, "\nLatency distribution:");
    for (p, us) in hey_percentiles(h) {
        let _ = writeln!(out, "  {p}% in {:4.4} ms", us as f64 / 1000.0);
    }
    out
}

/// hey's latency distribution: `(percent, microseconds)` for [`HEY_PERCENTILES`], leaving
/// out zero latencies as hey does.
#[must_use]
pub fn hey_percentiles(h: &Histogram<u64>) -> Vec<(u32, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    HEY_PERCENTILES
        .iter()
        .map(|&p| (p, h.value_at_quantile(f64::from(p) / 100.0)))
        .filter(|&(_, us)| us > 0)
        .collect()
}

/// hey's histogram buckets: `(upper mark in microseconds, count)`, ten equal steps from the
/// fastest latency and one at the slowest; empty for an empty histogram.
#[must_use]
pub fn hey_buckets(h: &Histogram<u64>) -> Vec<(f64, u64)> {
    if h.is_empty() {
        return Vec::new();
    }
    let fastest = h.min() as f64;
    let slowest = h.max() as f64;
    let step = (slowest - fastest) / f64::from(HEY_BUCKETS);
    let mut marks: Vec<f64> = (0..HEY_BUCKETS)
        .map(|i| fastest + step * f64::from(i))
        .collect();
    marks.push(slowest);
    let mut counts = vec![0u64; marks.len()];
    let mut bucket = 0;
    // Recorded values ascend; each goes to the first bucket whose mark is not below it.
    for value in h.iter_recorded() {
        let latency = h.lowest_equivalent(value.value_iterated_to()) as f64;
        while latency > marks[bucket] && bucket + 1 < marks.len() {
            bucket += 1;
        }
        counts[bucket] += value.count_at_value();
    }
    marks.into_iter().zip(counts).collect()
}

/// The table followed by a hey block per operation, as printed after a run and written to
/// `summary.txt`.
#[must_use]
pub fn summary_text(result: &RunResult) -> String {
    let mut out = table(result);
    if let Some(uncorrected) = &result.uncorrected {
        // Rate mode: the same run timed from the actual send times, for comparison.
        let total = result.histograms.total().map_or_else(
            |_| result.total.clone(),
            |t| t.uncorrected_summary(result.elapsed),
        );
        let _ = write!(
            out,
            "\nuncorrected (timed from the actual send, not the intended one):\n{}",
            table_of(uncorrected, &total)
        );
    }
    for (op, stats) in result.histograms.iter() {
        let block = hey(stats.histogram());
        if !block.is_empty() {
            let _ = write!(out, "\n{op}:\n{block}");
        }
    }
    if !result.errors.is_empty() {
        let _ = writeln!(out, "\nErrors:");
        for (kind, n) in &result.errors {
            let _ = writeln!(out, "  {kind}: {n}");
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;

    fn summary(count: u64, base_us: u64, errors: u64) -> OpSummary {
        OpSummary {
            count,
            ops_per_sec: count as f64 / 2.0,
            mean_us: base_us as f64 * 1.25,
            p50_us: base_us,
            p95_us: base_us * 3,
            p99_us: base_us * 5,
            p999_us: base_us * 9,
            max_us: 1_234_567,
            errors,
        }
    }

    #[test]
    fn table_is_formatted_exactly() {
        let per_op: BTreeMap<Operation, OpSummary> = [
            (Operation::Put, summary(100, 2_001, 3)),
            (Operation::Get, summary(1000, 248, 0)),
        ]
        .into();
        let result = RunResult {
            scenario_name: "t".to_owned(),
            elapsed: Duration::from_secs(2),
            per_op,
            total: summary(1100, 400, 3),
            uncorrected: None,
            errors: [("io".to_owned(), 3)].into(),
            load: None,
            interval: Duration::from_secs(1),
            intervals: Vec::new(),
            histograms: crate::stats::Recorder::new(),
        };
        let expected = "\
op            count       ops/s    mean ms  median ms     p95 ms     p99 ms   p99.9 ms     max ms   errors
get            1000       500.0      0.310      0.248      0.744      1.240      2.232   1234.567        0
put             100        50.0      2.501      2.001      6.003     10.005     18.009   1234.567        3
total          1100       550.0      0.500      0.400      1.200      2.000      3.600   1234.567        3
";
        assert_eq!(table(&result), expected);
    }

    #[test]
    fn hey_histogram_of_one_to_hundred_ms() {
        let mut stats = crate::stats::OpStats::new();
        for ms in 1..=100 {
            stats.record(Duration::from_millis(ms));
        }
        let text = hey(stats.histogram());
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "Response time histogram (ms):");
        // Marks from 1 ms to 100 ms in steps of 9.9 ms: 1 value, then 9, then 10 each.
        let bars = |n: usize| "■".repeat(n);
        assert_eq!(lines[1], format!("  1.000 [1]\t|{}", bars(4)));
        assert_eq!(lines[2], format!("  10.903 [9]\t|{}", bars(36)));
        assert_eq!(lines[3], format!("  20.806 [10]\t|{}", bars(40)));
        assert!(lines[11].starts_with("  100.031 [10]\t|"), "{}", lines[11]);
        assert_eq!(lines.len(), 1 + 11 + 2 + 7);
        assert_eq!(lines[13], "Latency distribution:");
        assert_eq!(lines[14], "  10% in 10.0070 ms");
        assert_eq!(lines[16], "  50% in 50.0150 ms");
        assert!(hey(crate::stats::OpStats::new().histogram()).is_empty());
    }
}
