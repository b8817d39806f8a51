//! Latency statistics: HDR histograms per operation, errors by kind, and summaries.
//!
//! Each worker keeps its own [`Recorder`] (no sharing on the hot path); at the end the
//! recorders are merged with [`Recorder::merge`]. For latency over time a worker uses an
//! [`IntervalRecorder`], which starts a fresh [`Recorder`] every reporting interval.
//!
//! Latencies are stored in microseconds in [`hdrhistogram::Histogram`]s tracking 1 µs to one
//! hour with 3 significant digits (values above an hour are clamped to it). In rate mode the
//! harness calls [`OpStats::record_corrected`], which keeps two histograms: the latency
//! from the intended send time (corrected for coordinated omission, the headline figure)
//! and from the actual send time (uncorrected, reported beside it). In closed-loop mode
//! there is no intended time and [`OpStats::record`] puts the same value in both.

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

use crate::BenchError;
use crate::scenario::Operation;

/// Lowest latency tracked with full precision, in microseconds.
pub const LOWEST_TRACKABLE_US: u64 = 1;
/// Highest latency tracked (one hour), in microseconds; longer latencies are clamped to it.
pub const HIGHEST_TRACKABLE_US: u64 = 3_600_000_000;
/// Significant decimal digits kept by the histograms.
pub const SIGNIFICANT_DIGITS: u8 = 3;

fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(
        LOWEST_TRACKABLE_US,
        HIGHEST_TRACKABLE_US,
        SIGNIFICANT_DIGITS,
    )
    .expect("constant histogram bounds are valid")
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

/// Summary of one operation's results over a run or an interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct OpSummary {
    /// Successful operations (the ones with a recorded latency).
    pub count: u64,
    /// `count` divided by the elapsed time.
    pub ops_per_sec: f64,
    /// Mean latency in microseconds.
    pub mean_us: f64,
    /// Median latency in microseconds.
    pub p50_us: u64,
    /// 95th percentile latency in microseconds.
    pub p95_us: u64,
    /// 99th percentile latency in microseconds.
    pub p99_us: u64,
    /// 99.9th percentile latency in microseconds.
    pub p999_us: u64,
    /// Largest latency in microseconds.
    pub max_us: u64,
    /// Failed operations, all kinds together.
    pub errors: u64,
}

/// Latencies and errors of one operation.
#[derive(Debug, Clone, PartialEq)]
pub struct OpStats {
    corrected: Histogram<u64>,
    uncorrected: Histogram<u64>,
    errors: BTreeMap<String, u64>,
}

impl Default for OpStats {
    fn default() -> Self {
        OpStats {
            corrected: new_histogram(),
            uncorrected: new_histogram(),
            errors: BTreeMap::new(),
        }
    }
}

impl OpStats {
    /// Empty statistics.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Records a successful operation that took `latency` (closed loop: the corrected and
    /// uncorrected figures are the same).
    pub fn record(&mut self, latency: Duration) {
        let us = micros(latency);
        self.corrected.saturating_record(us);
        self.uncorrected.saturating_record(us);
    }

    /// Records a successful operation in rate mode: it was due at `intended_start`, sent at
    /// `start` and answered at `end`. The corrected latency runs from `intended_start`, the
    /// uncorrected one from `start`.
    pub fn record_corrected(&mut self, intended_start: Instant, start: Instant, end: Instant) {
        self.corrected
            .saturating_record(micros(end.saturating_duration_since(intended_start)));
        self.uncorrected
            .saturating_record(micros(end.saturating_duration_since(start)));
    }

    /// Counts a failed operation under `kind` (for example `timeout` or `http_503`).
    pub fn record_error(&mut self, kind: &str) {
        *self.errors.entry(kind.to_owned()).or_insert(0) += 1;
    }

    /// Number of successful operations recorded.
    #[must_use]
    pub fn count(&self) -> u64 {
        self.corrected.len()
    }

    /// Number of failed operations, all kinds together.
    #[must_use]
    pub fn error_count(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Failed operations by kind.
    #[must_use]
    pub fn errors(&self) -> &BTreeMap<String, u64> {
        &self.errors
    }

    /// Histogram of latencies from the intended start (the headline figures).
    #[must_use]
    pub fn histogram(&self) -> &Histogram<u64> {
        &self.corrected
    }

    /// Histogram of latencies from the actual send time.
    #[must_use]
    pub fn uncorrected_histogram(&self) -> &Histogram<u64> {
        &self.uncorrected
    }

    /// Summary of the corrected latencies over `elapsed`.
    #[must_use]
    pub fn summary(&self, elapsed: Duration) -> OpSummary {
        self.summarise(&self.corrected, elapsed)
    }

    /// Summary of the uncorrected latencies over `elapsed`.
    #[must_use]
    pub fn uncorrected_summary(&self, elapsed: Duration) -> OpSummary {
        self.summarise(&self.uncorrected, elapsed)
    }

    fn summarise(&self, h: &Histogram<u64>, elapsed: Duration) -> OpSummary {
        let count = h.len();
        let seconds = elapsed.as_secs_f64();
        let empty = count == 0;
        let pick = |q: f64| if empty { 0 } else { h.value_at_quantile(q) };
        OpSummary {
            count,
            ops_per_sec: if seconds > 0.0 {
                count as f64 / seconds
            } else {
                0.0
            },
            mean_us: if empty { 0.0 } else { h.mean() },
            p50_us: pick(0.5),
            p95_us: pick(0.95),
            p99_us: pick(0.99),
            p999_us: pick(0.999),
            max_us: if empty { 0 } else { h.max() },
            errors: self.error_count(),
        }
    }

    /// Adds `other`'s latencies and errors to these.
    pub fn merge(&mut self, other: &OpStats) -> Result<(), BenchError> {
        self.corrected
            .add(&other.corrected)
            .map_err(|e| BenchError::Merge(format!("{e:?}")))?;
        self.uncorrected
            .add(&other.uncorrected)
            .map_err(|e| BenchError::Merge(format!("{e:?}")))?;
        for (kind, n) in &other.errors {
            *self.errors.entry(kind.clone()).or_insert(0) += n;
        }
        Ok(())
    }
}

/// Statistics for every operation of a run (or of one interval).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Recorder {
    ops: BTreeMap<Operation, OpStats>,
}

impl Recorder {
    /// An empty recorder.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    fn op(&mut self, op: Operation) -> &mut OpStats {
        self.ops.entry(op).or_default()
    }

    /// Records a successful `op` that took `latency` (closed loop).
    pub fn record(&mut self, op: Operation, latency: Duration) {
        self.op(op).record(latency);
    }

    /// Records a successful `op` in rate mode; see [`OpStats::record_corrected`].
    pub fn record_corrected(
        &mut self,
        op: Operation,
        intended_start: Instant,
        start: Instant,
        end: Instant,
    ) {
        self.op(op).record_corrected(intended_start, start, end);
    }

    /// Counts a failed `op` under `kind`.
    pub fn record_error(&mut self, op: Operation, kind: &str) {
        self.op(op).record_error(kind);
    }

    /// Statistics of `op`, if anything was recorded for it.
    #[must_use]
    pub fn get(&self, op: Operation) -> Option<&OpStats> {
        self.ops.get(&op)
    }

    /// Operations with something recorded, in table order, with their statistics.
    pub fn iter(&self) -> impl Iterator<Item = (Operation, &OpStats)> {
        self.ops.iter().map(|(op, stats)| (*op, stats))
    }

    /// All operations merged into one.
    pub fn total(&self) -> Result<OpStats, BenchError> {
        let mut total = OpStats::new();
        for stats in self.ops.values() {
            total.merge(stats)?;
        }
        Ok(total)
    }

    /// Per-operation summaries over `elapsed`.
    #[must_use]
    pub fn summaries(&self, elapsed: Duration) -> BTreeMap<Operation, OpSummary> {
        self.ops
            .iter()
            .map(|(op, stats)| (*op, stats.summary(elapsed)))
            .collect()
    }

    /// Adds `other` (for example another worker's recorder) to this one.
    pub fn merge(&mut self, other: &Recorder) -> Result<(), BenchError> {
        for (op, stats) in &other.ops {
            self.op(*op).merge(stats)?;
        }
        Ok(())
    }

    /// Takes everything recorded so far, leaving this recorder empty.
    pub fn take(&mut self) -> Recorder {
        std::mem::take(self)
    }
}

/// One reporting interval's statistics.
#[derive(Debug, Clone)]
pub struct IntervalSnapshot {
    /// Interval number, counting from 0 at the recorder's start.
    pub index: u64,
    /// Offset of the interval's start from the run's start.
    pub start_offset: Duration,
    /// Interval length.
    pub length: Duration,
    /// What was recorded during the interval.
    pub recorder: Recorder,
}

/// Records into a fresh [`Recorder`] per fixed-length interval, for latency and throughput
/// over time. Intervals with nothing recorded still appear (empty), so a stall shows.
#[derive(Debug)]
pub struct IntervalRecorder {
    start: Instant,
    interval: Duration,
    index: u64,
    current: Recorder,
    finished: Vec<IntervalSnapshot>,
}

impl IntervalRecorder {
    /// Intervals of `interval` (at least 1 ms) counted from `start`.
    #[must_use]
    pub fn new(start: Instant, interval: Duration) -> Self {
        IntervalRecorder {
            start,
            interval: interval.max(Duration::from_millis(1)),
            index: 0,
            current: Recorder::new(),
            finished: Vec::new(),
        }
    }

    fn index_at(&self, now: Instant) -> u64 {
        let n = now.saturating_duration_since(self.start).as_nanos() / self.interval.as_nanos();
        u64::try_from(n).unwrap_or(u64::MAX)
    }

    fn snapshot(&self, index: u64, recorder: Recorder) -> IntervalSnapshot {
        let offset = self
            .interval
            .saturating_mul(u32::try_from(index).unwrap_or(u32::MAX));
        IntervalSnapshot {
            index,
            start_offset: offset,
            length: self.interval,
            recorder,
        }
    }

    /// The recorder for the interval containing `now`, closing earlier intervals first.
    /// A `now` in an interval already closed records into the current one.
    pub fn at(&mut self, now: Instant) -> &mut Recorder {
        let target = self.index_at(now);
        while self.index < target {
            let recorder = self.current.take();
            let snapshot = self.snapshot(self.index, recorder);
            self.finished.push(snapshot);
            self.index += 1;
        }
        &mut self.current
    }

    /// Intervals closed so far.
    #[must_use]
    pub fn finished(&self) -> &[IntervalSnapshot] {
        &self.finished
    }

    /// Takes the intervals closed so far (for a caller that merges them as the run goes).
    pub fn drain_finished(&mut self) -> Vec<IntervalSnapshot> {
        std::mem::take(&mut self.finished)
    }

    /// Closes every interval up to and including the one containing `now`, and returns all
    /// not taken by [`IntervalRecorder::drain_finished`].
    #[must_use]
    pub fn finish(mut self, now: Instant) -> Vec<IntervalSnapshot> {
        self.at(now);
        let last = self.current.take();
        let snapshot = self.snapshot(self.index, last);
        self.finished.push(snapshot);
        self.finished
    }
}

/// Merges another worker's intervals into `into`, matching them by index.
pub fn merge_intervals(
    into: &mut Vec<IntervalSnapshot>,
    other: &[IntervalSnapshot],
) -> Result<(), BenchError> {
    for snapshot in other {
        match into.iter_mut().find(|s| s.index == snapshot.index) {
            Some(existing) => existing.recorder.merge(&snapshot.recorder)?,
            None => into.push(snapshot.clone()),
        }
    }
    into.sort_by_key(|s| s.index);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: u64 = 1000;

    /// HDR with 3 significant digits: a reported value is within 0.1% of the true one.
    fn close(got: u64, want: u64) -> bool {
        got.abs_diff(want) <= want / 1000 + 1
    }

    fn one_to_hundred_ms() -> OpStats {
        let mut stats = OpStats::new();
        for ms in 1..=100 {
            stats.record(Duration::from_millis(ms));
        }
        stats
    }

    #[test]
    fn known_inputs_give_known_percentiles() {
        let s = one_to_hundred_ms().summary(Duration::from_secs(10));
        assert_eq!(s.count, 100);
        assert!((s.ops_per_sec - 10.0).abs() < 1e-9);
        assert!((s.mean_us - 50_500.0).abs() < 50.0, "mean {}", s.mean_us);
        assert!(close(s.p50_us, 50 * MS), "p50 {}", s.p50_us);
        assert!(close(s.p95_us, 95 * MS), "p95 {}", s.p95_us);
        assert!(close(s.p99_us, 99 * MS), "p99 {}", s.p99_us);
        assert!(close(s.p999_us, 100 * MS), "p99.9 {}", s.p999_us);
        assert!(close(s.max_us, 100 * MS), "max {}", s.max_us);
        assert_eq!(s.errors, 0);
    }

    #[test]
    fn empty_summary_is_zero() {
        let s = OpStats::new().summary(Duration::ZERO);
        assert_eq!((s.count, s.p99_us, s.max_us), (0, 0, 0));
        assert_eq!((s.ops_per_sec, s.mean_us), (0.0, 0.0));
    }

    #[test]
    fn huge_latencies_are_clamped_not_lost() {
        let mut stats = OpStats::new();
        stats.record(Duration::from_secs(10 * 3600));
        assert_eq!(stats.count(), 1);
        assert!(close(
            stats.summary(Duration::from_secs(1)).max_us,
            HIGHEST_TRACKABLE_US
        ));
    }

    #[test]
    fn merge_adds_counts_and_errors() {
        let mut a = Recorder::new();
        let mut b = Recorder::new();
        for ms in 1..=100 {
            a.record(Operation::Get, Duration::from_millis(ms));
            b.record(Operation::Get, Duration::from_millis(ms + 100));
        }
        b.record(Operation::Put, Duration::from_millis(5));
        a.record_error(Operation::Get, "timeout");
        b.record_error(Operation::Get, "timeout");
        b.record_error(Operation::Get, "refused");
        a.merge(&b).unwrap();
        let get = a.get(Operation::Get).unwrap();
        assert_eq!(get.count(), 200);
        assert!(close(get.summary(Duration::from_secs(1)).max_us, 200 * MS));
        assert!(close(get.summary(Duration::from_secs(1)).p50_us, 100 * MS));
        assert_eq!(get.errors()["timeout"], 2);
        assert_eq!(get.errors()["refused"], 1);
        assert_eq!(a.get(Operation::Put).unwrap().count(), 1);
        let total = a.total().unwrap();
        assert_eq!((total.count(), total.error_count()), (201, 3));
        let summaries = a.summaries(Duration::from_secs(2));
        assert_eq!(summaries[&Operation::Get].errors, 3);
        assert!((summaries[&Operation::Get].ops_per_sec - 100.0).abs() < 1e-9);
    }

    #[test]
    fn corrected_latency_counts_from_intended_start() {
        let mut stats = OpStats::new();
        let t0 = Instant::now();
        for i in 0..100u64 {
            let intended = t0 + Duration::from_millis(i);
            // Sent 10 ms late (the sender was stalled), answered 1 ms after sending.
            let start = intended + Duration::from_millis(10);
            let end = start + Duration::from_millis(1);
            stats.record_corrected(intended, start, end);
        }
        let corrected = stats.summary(Duration::from_secs(1));
        let uncorrected = stats.uncorrected_summary(Duration::from_secs(1));
        assert_eq!((corrected.count, uncorrected.count), (100, 100));
        assert!(close(corrected.p50_us, 11 * MS), "{}", corrected.p50_us);
        assert!(close(uncorrected.p50_us, MS), "{}", uncorrected.p50_us);
        assert!(close(uncorrected.max_us, MS));
        // Closed-loop records are the same in both.
        let plain = one_to_hundred_ms();
        assert_eq!(
            plain.summary(Duration::from_secs(1)),
            plain.uncorrected_summary(Duration::from_secs(1))
        );
    }

    #[test]
    fn errors_are_counted_by_kind() {
        let mut stats = OpStats::new();
        stats.record_error("timeout");
        stats.record_error("http_503");
        stats.record_error("timeout");
        let expected: BTreeMap<String, u64> =
            [("http_503".to_owned(), 1), ("timeout".to_owned(), 2)].into();
        assert_eq!(stats.errors(), &expected);
        assert_eq!(stats.error_count(), 3);
        assert_eq!(stats.count(), 0);
        assert_eq!(stats.summary(Duration::from_secs(1)).errors, 3);
    }

    #[test]
    fn intervals_split_by_time_and_keep_empty_ones() {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut intervals = IntervalRecorder::new(t0, Duration::from_secs(1));
        for ms in [500, 1200, 1500, 3100] {
            intervals
                .at(at(ms))
                .record(Operation::Get, Duration::from_millis(2));
        }
        assert_eq!(intervals.finished().len(), 3);
        let snapshots = intervals.finish(at(3500));
        let counts: Vec<u64> = snapshots
            .iter()
            .map(|s| s.recorder.get(Operation::Get).map_or(0, OpStats::count))
            .collect();
        assert_eq!(counts, vec![1, 2, 0, 1]);
        assert_eq!(snapshots[3].index, 3);
        assert_eq!(snapshots[3].start_offset, Duration::from_secs(3));

        let mut other = IntervalRecorder::new(t0, Duration::from_secs(1));
        other
            .at(at(1100))
            .record(Operation::Get, Duration::from_millis(2));
        let other = other.finish(at(4200));
        let mut merged = snapshots.clone();
        merge_intervals(&mut merged, &other).unwrap();
        let counts: Vec<u64> = merged
            .iter()
            .map(|s| s.recorder.get(Operation::Get).map_or(0, OpStats::count))
            .collect();
        assert_eq!(counts, vec![1, 3, 0, 1, 0]);
    }
}
