//! The results directory of a run: everything `trireme bench` leaves behind for later.
//!
//! [`crate::output::write_run_dir`] writes, into one directory:
//!
//! - `summary.txt`: the seeds' table and hey's histogram per operation ([`crate::report`]);
//! - `summary.csv` and `<op>_latencies.csv`: basho_bench's CSV files ([`summary_csv`],
//!   [`latencies_csv`]), so its R and gnuplot scripts read our runs;
//! - `<op>.hgrm`: HdrHistogram's percentile distribution ([`hgrm`]);
//! - `result.json`: the [`ResultFile`], which `bench compare` reads back ([`read_result`]);
//! - `throughput.svg`, `latency.svg` and `report.html` ([`crate::plot`], [`crate::html`]).

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::runner::RunResult;
use crate::scenario::{Operation, Scenario};
use crate::stats::SIGNIFICANT_DIGITS;

/// Errors reading or writing results files; each names the file.
#[derive(Debug, thiserror::Error)]
pub enum ResultsError {
    /// A file or directory could not be read or written.
    #[error("{}: {error}", path.display())]
    Io {
        /// The file or directory.
        path: PathBuf,
        /// What the system said.
        error: std::io::Error,
    },
    /// A `result.json` is not valid JSON of the expected shape.
    #[error("{}: not a trireme bench result: {error}", path.display())]
    Json {
        /// The file.
        path: PathBuf,
        /// What serde said (line, column, field).
        error: serde_json::Error,
    },
}

/// The machine a run was driven from.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct HostInfo {
    /// Host name, if the system tells it.
    pub hostname: Option<String>,
    /// CPUs available to the benchmark process.
    pub cores: usize,
    /// Operating system (`linux`, `macos`, ...).
    pub os: String,
    /// CPU architecture (`x86_64`, `aarch64`, ...).
    pub arch: String,
}

impl HostInfo {
    /// This machine.
    #[must_use]
    pub fn current() -> Self {
        let hostname = std::fs::read_to_string("/proc/sys/kernel/hostname")
            .ok()
            .map(|h| h.trim().to_owned())
            .filter(|h| !h.is_empty())
            .or_else(|| std::env::var("HOSTNAME").ok());
        HostInfo {
            hostname,
            cores: std::thread::available_parallelism().map_or(1, std::num::NonZero::get),
            os: std::env::consts::OS.to_owned(),
            arch: std::env::consts::ARCH.to_owned(),
        }
    }
}

/// `result.json`: a run's result with what is needed to understand it later.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ResultFile {
    /// Version of the `trireme` binary that ran the benchmark.
    pub trireme_version: String,
    /// When the run started (RFC 3339, UTC).
    pub started_at: String,
    /// The command line, as typed.
    pub command: String,
    /// The machine the benchmark ran on.
    pub host: HostInfo,
    /// The scenario after the flags were applied.
    pub scenario: Scenario,
    /// What the run measured (corrected and uncorrected summaries, errors by kind,
    /// per-interval figures).
    pub result: RunResult,
}

/// `t` as RFC 3339 in UTC, to the second (`2026-11-21T10:48:50Z`).
#[must_use]
pub fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

/// `t` as `YYYYMMDD-HHMMSS` in UTC, for directory names.
#[must_use]
pub fn stamp(t: SystemTime) -> String {
    rfc3339(t)
        .chars()
        .filter_map(|c| match c {
            'T' => Some('-'),
            c if c.is_ascii_digit() => Some(c),
            _ => None,
        })
        .collect()
}

/// The name of a run's results directory: `<UTC YYYYMMDD-HHMMSS>-<scenario>`, the scenario
/// name reduced to characters safe in a path.
#[must_use]
pub fn run_dir_name(started: SystemTime, scenario: &str) -> String {
    let name: String = scenario
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') {
                c
            } else {
                '_'
            }
        })
        .collect();
    format!("{}-{name}", stamp(started))
}

/// Seconds as basho_bench prints them with Erlang's `~w` (shortest form, always a
/// decimal point: `1.0`, `2.5`).
fn seconds(s: f64) -> String {
    format!("{s:?}")
}

/// basho_bench's `summary.csv`: one row per reporting interval.
///
/// Matches `basho_bench_stats_writer_csv`: the header `elapsed, window, total, successful,
/// failed`, then per interval the seconds since the start (here: of the measured part, at the
/// interval's end), the interval's length in seconds, operations done (successful plus
/// failed), successful and failed, separated by `", "`.
#[must_use]
pub fn summary_csv(result: &RunResult) -> String {
    let mut out = String::from("elapsed, window, total, successful, failed\n");
    for interval in &result.intervals {
        let (ok, failed) = (interval.successful(), interval.failed());
        let _ = writeln!(
            out,
            "{}, {}, {}, {ok}, {failed}",
            seconds(interval.end_s()),
            seconds(interval.length_s),
            ok + failed,
        );
    }
    out
}

/// basho_bench's `<op>_latencies.csv` for `op`: one row per reporting interval.
///
/// Matches `basho_bench_stats_writer_csv`: the header `elapsed, window, n, min, mean, median,
/// 95th, 99th, 99_9th, max, errors`; latencies in microseconds, the mean with one decimal
/// (`~.1f`), `n` the successful operations of the interval; an interval with none is
/// written as basho_bench does, `elapsed, window, 0, 0, 0, 0, 0, 0, 0, 0, errors`.
#[must_use]
pub fn latencies_csv(result: &RunResult, op: Operation) -> String {
    let mut out =
        String::from("elapsed, window, n, min, mean, median, 95th, 99th, 99_9th, max, errors\n");
    for interval in &result.intervals {
        let (elapsed, window) = (seconds(interval.end_s()), seconds(interval.length_s));
        let Some(figures) = interval.per_op.get(&op) else {
            let _ = writeln!(out, "{elapsed}, {window}, 0, 0, 0, 0, 0, 0, 0, 0, 0");
            continue;
        };
        let s = &figures.summary;
        if s.count == 0 {
            let _ = writeln!(
                out,
                "{elapsed}, {window}, 0, 0, 0, 0, 0, 0, 0, 0, {}",
                s.errors
            );
        } else {
            let _ = writeln!(
                out,
                "{elapsed}, {window}, {}, {}, {:.1}, {}, {}, {}, {}, {}, {}",
                s.count,
                figures.min_us,
                s.mean_us,
                s.p50_us,
                s.p95_us,
                s.p99_us,
                s.p999_us,
                s.max_us,
                s.errors
            );
        }
    }
    out
}

/// Sub-buckets of a histogram with `digits` significant digits, as HdrHistogram computes
/// them (the power of two covering `2 × 10^digits`).
fn sub_buckets(digits: u8) -> u64 {
    (2 * 10u64.pow(u32::from(digits))).next_power_of_two()
}

/// Percentile ticks per halving of the distance to 100 %, HdrHistogram's default.
const TICKS_PER_HALF_DISTANCE: u32 = 5;

/// HdrHistogram's percentile distribution of a histogram of microseconds, values in
/// milliseconds: the text `outputPercentileDistribution(out, 5, 1000.0)` prints (the
/// `.hgrm` format HdrHistogram's plotter reads), with its `#[Mean ...]` footer.
#[must_use]
pub fn hgrm(h: &Histogram<u64>) -> String {
    let digits = usize::from(SIGNIFICANT_DIGITS);
    let mut out = format!(
        "{:>12} {:>14} {:>10} {:>14}\n\n",
        "Value", "Percentile", "TotalCount", "1/(1-Percentile)"
    );
    let mut total = 0u64;
    if !h.is_empty() {
        for v in h.iter_quantiles(TICKS_PER_HALF_DISTANCE) {
            total += v.count_since_last_iteration();
            let value = v.value_iterated_to() as f64 / 1000.0;
            let q = v.quantile_iterated_to();
            if q < 1.0 {
                let _ = writeln!(
                    out,
                    "{value:12.digits$} {q:2.12} {total:10} {:14.2}",
                    1.0 / (1.0 - q)
                );
            } else {
                let _ = writeln!(out, "{value:12.digits$} {q:2.12} {total:10}");
            }
        }
    }
    let (mean, stdev, max) = if h.is_empty() {
        (0.0, 0.0, 0.0)
    } else {
        (
            h.mean() / 1000.0,
            h.stdev() / 1000.0,
            h.max() as f64 / 1000.0,
        )
    };
    let _ = writeln!(
        out,
        "#[Mean    = {mean:12.digits$}, StdDeviation   = {stdev:12.digits$}]"
    );
    let _ = writeln!(
        out,
        "#[Max     = {max:12.digits$}, Total count    = {:12}]",
        h.len()
    );
    let _ = writeln!(
        out,
        "#[Buckets = {:12}, SubBuckets     = {:12}]",
        h.buckets(),
        sub_buckets(SIGNIFICANT_DIGITS)
    );
    out
}

fn write(dir: &Path, name: &str, text: &str) -> Result<PathBuf, ResultsError> {
    let path = dir.join(name);
    std::fs::write(&path, text).map_err(|error| ResultsError::Io {
        path: path.clone(),
        error,
    })?;
    Ok(path)
}

/// Creates `dir` (and its parents).
pub fn create_dir(dir: &Path) -> Result<(), ResultsError> {
    std::fs::create_dir_all(dir).map_err(|error| ResultsError::Io {
        path: dir.to_owned(),
        error,
    })
}

/// Writes `text` to `dir/name`; returns the path.
pub fn write_file(dir: &Path, name: &str, text: &str) -> Result<PathBuf, ResultsError> {
    write(dir, name, text)
}

/// `value` as pretty JSON.
fn json<T: Serialize>(path: &Path, value: &T) -> Result<String, ResultsError> {
    serde_json::to_string_pretty(value).map_err(|error| ResultsError::Json {
        path: path.to_owned(),
        error,
    })
}

/// Writes `value` as pretty JSON to `dir/name`; returns the path.
pub fn write_json<T: Serialize>(
    dir: &Path,
    name: &str,
    value: &T,
) -> Result<PathBuf, ResultsError> {
    let text = json(&dir.join(name), value)?;
    write(dir, name, &text)
}

/// Reads `result.json` from a run directory (or the file itself, if `path` is a file).
pub fn read_result(path: &Path) -> Result<ResultFile, ResultsError> {
    let file = if path.is_file() {
        path.to_owned()
    } else {
        path.join("result.json")
    };
    let text = std::fs::read_to_string(&file).map_err(|error| ResultsError::Io {
        path: file.clone(),
        error,
    })?;
    serde_json::from_str(&text).map_err(|error| ResultsError::Json { path: file, error })
}

#[cfg(test)]
pub(crate) mod tests {
    use std::collections::BTreeMap;
    use std::time::Duration;

    use super::*;
    use crate::runner::{IntervalFigures, IntervalOp};
    use crate::stats::{OpStats, OpSummary, Recorder};

    fn ms_histogram(values_ms: impl IntoIterator<Item = u64>) -> OpStats {
        let mut stats = OpStats::new();
        for ms in values_ms {
            stats.record(Duration::from_millis(ms));
        }
        stats
    }

    /// A result with get intervals of 10, 20 and 30 operations (errors 0, 1, 2).
    pub(crate) fn synthetic_result() -> RunResult {
        let mut histograms = Recorder::new();
        let mut intervals = Vec::new();
        for i in 0..3u64 {
            let mut recorder = Recorder::new();
            for k in 0..(i + 1) * 10 {
                recorder.record(Operation::Get, Duration::from_micros(100 + k * 10));
            }
            for _ in 0..i {
                recorder.record_error(Operation::Get, "timeout");
            }
            let stats = recorder.get(Operation::Get).cloned().unwrap_or_default();
            let op = IntervalOp {
                summary: stats.summary(Duration::from_secs(1)),
                min_us: stats.histogram().min(),
            };
            intervals.push(IntervalFigures {
                index: i,
                start_s: i as f64,
                length_s: 1.0,
                per_op: [(Operation::Get, op)].into(),
            });
            histograms.merge(&recorder).unwrap();
        }
        let total = histograms.total().unwrap();
        RunResult {
            scenario_name: "synthetic".to_owned(),
            elapsed: Duration::from_secs(3),
            per_op: histograms.summaries(Duration::from_secs(3)),
            total: total.summary(Duration::from_secs(3)),
            uncorrected: None,
            errors: total.errors().clone(),
            load: None,
            interval: Duration::from_secs(1),
            intervals,
            histograms,
        }
    }

    #[test]
    fn summary_csv_has_basho_columns_and_rows_sum_to_the_total() {
        let result = synthetic_result();
        let csv = summary_csv(&result);
        let mut lines = csv.lines();
        assert_eq!(
            lines.next(),
            Some("elapsed, window, total, successful, failed")
        );
        let rows: Vec<Vec<String>> = lines
            .map(|l| l.split(", ").map(str::to_owned).collect())
            .collect();
        assert_eq!(rows.len(), 3);
        assert_eq!(rows[0], ["1.0", "1.0", "10", "10", "0"]);
        assert_eq!(rows[2], ["3.0", "1.0", "32", "30", "2"]);
        let successful: u64 = rows.iter().map(|r| r[3].parse::<u64>().unwrap()).sum();
        let failed: u64 = rows.iter().map(|r| r[4].parse::<u64>().unwrap()).sum();
        assert_eq!(successful, result.total.count);
        assert_eq!(failed, result.total.errors);
    }

    #[test]
    fn latencies_csv_rows_carry_the_interval_figures() {
        let result = synthetic_result();
        let csv = latencies_csv(&result, Operation::Get);
        let lines: Vec<&str> = csv.lines().collect();
        assert_eq!(
            lines[0],
            "elapsed, window, n, min, mean, median, 95th, 99th, 99_9th, max, errors"
        );
        // First interval: 100, 110, ..., 190 µs, exact in the histogram.
        assert_eq!(
            lines[1],
            "1.0, 1.0, 10, 100, 145.0, 140, 190, 190, 190, 190, 0"
        );
        assert_eq!(lines.len(), 4);
        assert!(lines[3].starts_with("3.0, 1.0, 30, 100, "), "{}", lines[3]);
        assert!(lines[3].ends_with(", 390, 2"), "{}", lines[3]);
        // An operation the run never did: zero rows, as basho_bench writes them.
        let none = latencies_csv(&result, Operation::Put);
        assert_eq!(
            none.lines().nth(1),
            Some("1.0, 1.0, 0, 0, 0, 0, 0, 0, 0, 0, 0")
        );
    }

    #[test]
    fn hgrm_lines_and_footer_for_known_values() {
        let stats = ms_histogram(1..=100);
        let h = stats.histogram();
        let text = hgrm(h);
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(
            lines[0],
            "       Value     Percentile TotalCount 1/(1-Percentile)"
        );
        assert_eq!(lines[1], "");
        assert_eq!(
            lines[2],
            "       1.000 0.000000000000          1           1.00"
        );
        let median = lines
            .iter()
            .find(|l| l.contains(" 0.500000000000 "))
            .expect("a 50% line");
        let fields: Vec<&str> = median.split_whitespace().collect();
        let want = h.highest_equivalent(50_000) as f64 / 1000.0;
        assert_eq!(fields[0], format!("{want:.3}"));
        assert_eq!(fields[2], "50");
        assert_eq!(fields[3], "2.00");
        // The last line is the 100% one, with no 1/(1-Percentile) column.
        let footer_at = lines.iter().position(|l| l.starts_with("#[Mean")).unwrap();
        let last: Vec<&str> = lines[footer_at - 1].split_whitespace().collect();
        assert_eq!(last.len(), 3, "{last:?}");
        assert_eq!(last[1], "1.000000000000");
        assert_eq!(last[2], "100");
        assert!(lines[footer_at].starts_with("#[Mean    =       50.5"));
        assert_eq!(
            lines[footer_at + 1],
            format!(
                "#[Max     = {:>12.3}, Total count    =          100]",
                h.max() as f64 / 1000.0
            )
        );
        assert_eq!(
            lines[footer_at + 2],
            format!(
                "#[Buckets = {:>12}, SubBuckets     =         2048]",
                h.buckets()
            )
        );
        // Cumulative counts never go down and percentiles ascend.
        let rows: Vec<(f64, u64)> = lines[2..footer_at]
            .iter()
            .map(|l| {
                let f: Vec<&str> = l.split_whitespace().collect();
                (f[1].parse().unwrap(), f[2].parse().unwrap())
            })
            .collect();
        assert!(
            rows.windows(2)
                .all(|w| w[0].0 <= w[1].0 && w[0].1 <= w[1].1)
        );
    }

    #[test]
    fn empty_histogram_gives_header_and_zero_footer() {
        let text = hgrm(OpStats::new().histogram());
        assert!(text.contains("#[Max     =        0.000, Total count    =            0]"));
    }

    #[test]
    fn result_json_round_trips_and_keeps_the_run_json_fields() {
        let result = synthetic_result();
        let file = ResultFile {
            trireme_version: "0.1.0".to_owned(),
            started_at: rfc3339(SystemTime::UNIX_EPOCH),
            command: "trireme bench --preset consul-put".to_owned(),
            host: HostInfo::current(),
            scenario: crate::preset("consul-put").unwrap(),
            result,
        };
        let dir = tempfile::tempdir().unwrap();
        let path = write_json(dir.path(), "result.json", &file).unwrap();
        let back = read_result(dir.path()).unwrap();
        // Histograms are not serialised; everything else comes back.
        let mut expected = file.clone();
        expected.result.histograms = Recorder::new();
        assert_eq!(back, expected);
        let v: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap();
        for field in [
            "scenario_name",
            "elapsed",
            "per_op",
            "total",
            "errors",
            "intervals",
        ] {
            assert!(v["result"].get(field).is_some(), "missing {field}");
        }
        assert_eq!(v["result"]["intervals"][0]["per_op"]["get"]["p99_us"], 190);
        assert_eq!(v["scenario"]["name"], "consul-put");
        assert_eq!(v["started_at"], "1970-01-01T00:00:00Z");
        assert!(v["host"]["cores"].as_u64().unwrap() >= 1);
        let _: BTreeMap<String, OpSummary> =
            serde_json::from_value(v["result"]["per_op"].clone()).unwrap();
    }

    #[test]
    fn missing_or_invalid_result_json_names_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let err = read_result(dir.path()).unwrap_err().to_string();
        assert!(
            err.contains(&dir.path().join("result.json").display().to_string()),
            "{err}"
        );
        std::fs::write(dir.path().join("result.json"), "{\"nope\": 1}").unwrap();
        let err = read_result(dir.path()).unwrap_err().to_string();
        assert!(err.contains("result.json"), "{err}");
        assert!(err.contains("not a trireme bench result"), "{err}");
    }

    #[test]
    fn names_and_stamps() {
        let t = SystemTime::UNIX_EPOCH + Duration::from_secs(1_795_000_000);
        assert_eq!(rfc3339(t), "2026-11-18T11:06:40Z");
        assert_eq!(stamp(t), "20261118-110640");
        assert_eq!(run_dir_name(t, "ycsb a/b"), "20261118-110640-ycsb_a_b");
        assert_eq!(sub_buckets(3), 2048);
        assert_eq!(sub_buckets(2), 256);
    }

    #[test]
    fn run_dir_has_every_file() {
        let result = synthetic_result();
        let file = ResultFile {
            trireme_version: "0.1.0".to_owned(),
            started_at: rfc3339(SystemTime::now()),
            command: "trireme bench x".to_owned(),
            host: HostInfo::current(),
            scenario: crate::preset("consul-put").unwrap(),
            result,
        };
        let dir = tempfile::tempdir().unwrap();
        let run = dir.path().join("run");
        crate::output::write_run_dir(&run, &file).unwrap();
        for name in [
            "summary.txt",
            "summary.csv",
            "get_latencies.csv",
            "get.hgrm",
            "result.json",
            "throughput.svg",
            "latency.svg",
            "report.html",
        ] {
            let path = run.join(name);
            assert!(path.is_file(), "{name} missing");
            assert!(std::fs::metadata(&path).unwrap().len() > 0, "{name} empty");
        }
        let summary = std::fs::read_to_string(run.join("summary.txt")).unwrap();
        assert!(summary.contains("Response time histogram"), "{summary}");
        assert!(summary.contains("Latency distribution"), "{summary}");
    }
}
