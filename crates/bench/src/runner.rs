//! Running a scenario: optional load phase, then `concurrent` workers until the deadline.
//!
//! Each worker owns one driver connection, its own seeded generator
//! ([`worker_rng`]) and its own [`Recorder`]; nothing is shared on the
//! hot path except the optional [`Progress`] counters. Latencies are recorded only after
//! the warm-up. Failed requests are counted by [`DriverError::kind`] and never stop the run.
//!
//! Workers record into an [`IntervalRecorder`] and hand each closed reporting interval to one
//! collector task, which merges the workers' intervals, turns each complete one into
//! [`IntervalFigures`] and adds it to the run's totals; no worker keeps more than its current
//! interval, however long the run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::{Deserialize, Serialize};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::driver::{self, AnyDriver, DriverError};
use crate::keygen::{KeyGenerator, KeyGeneratorConfig};
use crate::scenario::{Mode, Operation, OperationMix, Scenario};
use crate::stats::{IntervalRecorder, IntervalSnapshot, OpStats, OpSummary, Recorder};
use crate::valuegen::ValueGenerator;
use crate::{BenchError, worker_rng};

/// Pause after a connection-level error before the next request, so a dead target does not
/// turn a worker into a busy loop.
const ERROR_BACKOFF: Duration = Duration::from_millis(10);

/// Stream offset of the load phase's generators, apart from the workers' streams.
const LOAD_STREAM: u64 = 1 << 32;

/// Live counters a caller can poll while [`run`] works (for a progress bar).
#[derive(Debug, Default)]
pub struct Progress {
    /// Keys written by the load phase so far.
    pub loaded: AtomicU64,
    /// Operations completed (successfully or not) by the workers, warm-up included.
    pub ops: AtomicU64,
    /// Failed operations among `ops`.
    pub errors: AtomicU64,
    /// Latencies of `ops` (send to answer), for a live p99.
    pub latency: crate::progress::LiveLatency,
}

/// Outcome of the load phase.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct LoadSummary {
    /// Keys written successfully.
    pub count: u64,
    /// Writes that failed.
    pub errors: u64,
    /// How long the load phase took.
    pub elapsed: Duration,
}

/// Most reporting intervals a run is split into; longer runs get longer intervals.
const MAX_INTERVALS: u64 = 300;

/// The reporting interval for a measured part of `duration`: one second, or longer so that
/// there are at most `MAX_INTERVALS` of them (whole seconds).
#[must_use]
pub fn report_interval(duration: Duration) -> Duration {
    Duration::from_secs(duration.as_secs().div_ceil(MAX_INTERVALS).max(1))
}

/// One operation's figures over one reporting interval.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalOp {
    /// Count, ops/s over the interval, latency percentiles and errors.
    #[serde(flatten)]
    pub summary: OpSummary,
    /// Smallest latency in microseconds (0 when nothing succeeded).
    pub min_us: u64,
}

/// What one reporting interval measured, per operation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct IntervalFigures {
    /// Interval number, 0 for the first after the warm-up.
    pub index: u64,
    /// Start of the interval, in seconds from the start of the measured part.
    pub start_s: f64,
    /// Length of the interval in seconds (the last one runs until the last worker stopped).
    pub length_s: f64,
    /// Figures of every operation with something recorded in the run.
    pub per_op: BTreeMap<Operation, IntervalOp>,
}

impl IntervalFigures {
    fn new(index: u64, start: Duration, length: Duration, recorder: &Recorder) -> Self {
        let per_op = recorder
            .iter()
            .map(|(op, stats)| (op, interval_op(stats, length)))
            .collect();
        IntervalFigures {
            index,
            start_s: start.as_secs_f64(),
            length_s: length.as_secs_f64(),
            per_op,
        }
    }

    /// Seconds from the start of the measured part to the end of this interval.
    #[must_use]
    pub fn end_s(&self) -> f64 {
        self.start_s + self.length_s
    }

    /// Successful operations in the interval, all operations together.
    #[must_use]
    pub fn successful(&self) -> u64 {
        self.per_op.values().map(|o| o.summary.count).sum()
    }

    /// Failed operations in the interval, all operations together.
    #[must_use]
    pub fn failed(&self) -> u64 {
        self.per_op.values().map(|o| o.summary.errors).sum()
    }
}

fn interval_op(stats: &OpStats, length: Duration) -> IntervalOp {
    let h = stats.histogram();
    IntervalOp {
        summary: stats.summary(length),
        min_us: if h.is_empty() { 0 } else { h.min() },
    }
}

/// What a run measured.
///
/// Serialised (for `--json` and `result.json`) without the histograms; the fields added
/// after the first version have serde defaults, so older JSON still reads.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunResult {
    /// The scenario's name.
    pub scenario_name: String,
    /// Length of the measured part (after the warm-up, until the last worker stopped).
    pub elapsed: Duration,
    /// Per-operation summaries (in rate mode, timed from the intended send time).
    pub per_op: BTreeMap<Operation, OpSummary>,
    /// All operations together.
    pub total: OpSummary,
    /// In rate mode, per-operation summaries timed from the actual send time.
    pub uncorrected: Option<BTreeMap<Operation, OpSummary>>,
    /// Failed operations by kind, all operations together.
    pub errors: BTreeMap<String, u64>,
    /// The load phase, if the scenario has one.
    pub load: Option<LoadSummary>,
    /// Nominal length of a reporting interval.
    #[serde(default)]
    pub interval: Duration,
    /// Figures per reporting interval, in time order (empty intervals included).
    #[serde(default)]
    pub intervals: Vec<IntervalFigures>,
    /// The run's latency histograms per operation (not serialised; empty when read back).
    #[serde(skip)]
    pub histograms: Recorder,
}

/// Checks that `driver` can perform every operation of the mix.
fn check_driver(scenario: &Scenario) -> Result<OperationMix, BenchError> {
    let name = driver::driver_name(scenario.driver);
    let mix = OperationMix::new(&scenario.operations)?;
    let unsupported: Vec<&str> = mix
        .operations()
        .filter(|&op| !driver::supports(scenario.driver, op))
        .map(Operation::name)
        .collect();
    if !unsupported.is_empty() {
        return Err(BenchError::invalid(
            "operations",
            format!(
                "the {name} driver does not support {}; remove it from [operations] \
                 or choose another driver",
                unsupported.join(", ")
            ),
        ));
    }
    Ok(mix)
}

fn join_failure(e: tokio::task::JoinError) -> BenchError {
    if e.is_panic() {
        std::panic::resume_unwind(e.into_panic());
    }
    BenchError::invalid("run", format!("a worker task failed: {e}"))
}

/// Runs `scenario` against `targets` (worker `w` uses `targets[w % len]`).
///
/// Fails before sending anything if the mix has an operation the driver cannot do, no
/// target is given, or a target cannot be parsed or reached.
pub async fn run(
    scenario: &Scenario,
    targets: &[String],
    progress: Option<Arc<Progress>>,
) -> Result<RunResult, BenchError> {
    let mix = check_driver(scenario)?;
    if targets.is_empty() {
        return Err(BenchError::invalid(
            "targets",
            "no target given: name at least one (the `trireme bench` command starts a local cluster when none is given)",
        ));
    }
    let progress = progress.unwrap_or_default();
    let workers = u64::from(scenario.concurrent.max(1));

    let mut drivers = Vec::new();
    for w in 0..workers {
        let target = &targets[usize::try_from(w).unwrap_or(0) % targets.len()];
        let driver = AnyDriver::connect(scenario.driver, target, scenario.consistency)
            .await
            .map_err(|e| {
                BenchError::invalid("targets", format!("cannot use target {target}: {e}"))
            })?;
        drivers.push(driver);
    }

    let values = ValueGenerator::new(&scenario.value_generator, scenario.seed)?;
    let keygen = KeyGenerator::new(&scenario.key_generator)?;

    let load = match scenario.load.keys {
        Some(keys) if keys > 0 => {
            let (summary, back) =
                load_phase(drivers, keys, scenario.seed, &values, &progress).await?;
            drivers = back;
            Some(summary)
        }
        _ => None,
    };

    let start = Instant::now();
    let measure_start = start + scenario.warmup;
    let deadline = measure_start + scenario.duration;
    let interval = match scenario.mode {
        Mode::Max => None,
        Mode::Rate(total) => Some(Duration::from_secs_f64(
            workers as f64 / total.max(1) as f64,
        )),
    };
    let latest = matches!(scenario.key_generator, KeyGeneratorConfig::Latest { .. });
    let report = report_interval(scenario.duration);
    let (tx, rx) = mpsc::unbounded_channel();
    let collector = tokio::spawn(collect_intervals(rx, workers, report));

    let mut handles = Vec::new();
    for (w, driver) in (0u64..).zip(drivers) {
        let worker = Worker {
            driver,
            rng: worker_rng(scenario.seed, w),
            keygen: keygen.clone(),
            values: values.clone(),
            mix: mix.clone(),
            latest,
            progress: Arc::clone(&progress),
            measure_start,
            deadline,
            intervals: IntervalRecorder::new(measure_start.into_std(), report),
            closed: tx.clone(),
        };
        // Spread the rate-mode schedules evenly over one interval.
        let first = interval.map(|i| start + i.mul_f64(w as f64 / workers as f64));
        handles.push(tokio::spawn(worker.run(first.zip(interval))));
    }
    drop(tx);
    for handle in handles {
        handle.await.map_err(join_failure)?;
    }
    let elapsed = Instant::now().saturating_duration_since(measure_start);
    let (recorder, mut intervals) = collector.await.map_err(join_failure)??;
    // The last interval runs until the last worker stopped; ops/s follow its real length.
    if let Some(last) = intervals.last_mut() {
        let length = elapsed
            .saturating_sub(Duration::from_secs_f64(last.start_s))
            .max(Duration::from_millis(1))
            .as_secs_f64();
        last.length_s = length;
        for figures in last.per_op.values_mut() {
            figures.summary.ops_per_sec = figures.summary.count as f64 / length;
        }
    }

    let total_stats = recorder.total()?;
    Ok(RunResult {
        scenario_name: scenario.name.clone(),
        elapsed,
        per_op: recorder.summaries(elapsed),
        total: total_stats.summary(elapsed),
        uncorrected: interval.map(|_| {
            recorder
                .iter()
                .map(|(op, stats)| (op, stats.uncorrected_summary(elapsed)))
                .collect()
        }),
        errors: total_stats.errors().clone(),
        load,
        interval: report,
        intervals,
        histograms: recorder,
    })
}

/// Merges the workers' closed intervals by index. An interval every worker has reported is
/// turned into figures and added to the totals at once (its histograms dropped); the rest
/// when the workers are done. Returns the totals and the figures in time order.
async fn collect_intervals(
    mut closed: mpsc::UnboundedReceiver<Vec<IntervalSnapshot>>,
    workers: u64,
    length: Duration,
) -> Result<(Recorder, Vec<IntervalFigures>), BenchError> {
    let mut total = Recorder::new();
    let mut pending: BTreeMap<u64, (Duration, Recorder, u64)> = BTreeMap::new();
    let mut figures = Vec::new();
    while let Some(snapshots) = closed.recv().await {
        for snapshot in snapshots {
            let entry = pending
                .entry(snapshot.index)
                .or_insert_with(|| (snapshot.start_offset, Recorder::new(), 0));
            entry.1.merge(&snapshot.recorder)?;
            entry.2 += 1;
            let complete = entry.2 >= workers;
            if let Some((start, recorder, _)) =
                complete.then(|| pending.remove(&snapshot.index)).flatten()
            {
                figures.push(IntervalFigures::new(
                    snapshot.index,
                    start,
                    length,
                    &recorder,
                ));
                total.merge(&recorder)?;
            }
        }
    }
    for (index, (start, recorder, _)) in pending {
        figures.push(IntervalFigures::new(index, start, length, &recorder));
        total.merge(&recorder)?;
    }
    figures.sort_by_key(|f| f.index);
    // Every interval lists every operation of the run, so series have no holes.
    let ops: Vec<Operation> = total.iter().map(|(op, _)| op).collect();
    for f in &mut figures {
        for &op in &ops {
            f.per_op
                .entry(op)
                .or_insert_with(|| interval_op(&OpStats::new(), length));
        }
    }
    Ok((total, figures))
}

/// Writes keys `0..keys`, each worker a contiguous range, and hands the drivers back.
async fn load_phase(
    drivers: Vec<AnyDriver>,
    keys: u64,
    seed: u64,
    values: &ValueGenerator,
    progress: &Arc<Progress>,
) -> Result<(LoadSummary, Vec<AnyDriver>), BenchError> {
    let started = Instant::now();
    let n = drivers.len() as u64;
    let mut handles = Vec::new();
    for (w, mut driver) in (0u64..).zip(drivers) {
        let range = keys * w / n..keys * (w + 1) / n;
        let values = values.clone();
        let progress = Arc::clone(progress);
        handles.push(tokio::spawn(async move {
            let mut rng = worker_rng(seed, LOAD_STREAM + w);
            let (mut ok, mut failed) = (0u64, 0u64);
            for index in range {
                let value = values.next_value(&mut rng);
                match driver.put(&KeyGenerator::key(index), &value).await {
                    Ok(()) => {
                        ok += 1;
                        progress.loaded.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => {
                        failed += 1;
                        if e.is_connection_error() {
                            tokio::time::sleep(ERROR_BACKOFF).await;
                        }
                    }
                }
            }
            (ok, failed, driver)
        }));
    }
    let (mut count, mut errors, mut back) = (0, 0, Vec::new());
    for handle in handles {
        let (ok, failed, driver) = handle.await.map_err(join_failure)?;
        count += ok;
        errors += failed;
        back.push(driver);
    }
    let summary = LoadSummary {
        count,
        errors,
        elapsed: started.elapsed(),
    };
    Ok((summary, back))
}

struct Worker {
    driver: AnyDriver,
    rng: crate::BenchRng,
    keygen: KeyGenerator,
    values: ValueGenerator,
    mix: OperationMix,
    latest: bool,
    progress: Arc<Progress>,
    measure_start: Instant,
    deadline: Instant,
    /// Where this worker records, one recorder per reporting interval.
    intervals: IntervalRecorder,
    /// Closed intervals go to the collector.
    closed: mpsc::UnboundedSender<Vec<IntervalSnapshot>>,
}

impl Worker {
    /// The recorder for an operation that ended at `end`. An operation ending after the
    /// deadline counts in the last interval, so the intervals cover the measured duration.
    fn recorder(&mut self, end: Instant) -> &mut Recorder {
        let end = self.clamp(end);
        self.intervals.at(end);
        if !self.intervals.finished().is_empty() {
            // The collector outlives the workers; a send can only fail if it failed itself.
            let _ = self.closed.send(self.intervals.drain_finished());
        }
        self.intervals.at(end)
    }

    /// `at`, or the last instant before the deadline if `at` is later.
    fn clamp(&self, at: Instant) -> std::time::Instant {
        let last = self
            .deadline
            .checked_sub(Duration::from_nanos(1))
            .unwrap_or(self.deadline);
        at.min(last).into_std()
    }

    /// Issues one operation; returns when it was sent, when it ended, and its result.
    async fn one(&mut self) -> (Operation, Instant, Instant, Result<(), DriverError>) {
        let op = self.mix.pick(&mut self.rng);
        let index = if op == Operation::Put && self.latest {
            self.keygen.next_insert_index()
        } else {
            self.keygen.next_index(&mut self.rng)
        };
        let key = KeyGenerator::key(index);
        // A cas and a txn write too: they need a value of the scenario's size like put.
        let value = matches!(
            op,
            Operation::Put
                | Operation::Update
                | Operation::Cas
                | Operation::Txn
                | Operation::TxnShards
        )
        .then(|| self.values.next_value(&mut self.rng));
        let start = Instant::now();
        let result = self
            .driver
            .execute(op, &key, value.as_deref(), &mut self.rng)
            .await;
        let end = Instant::now();
        self.progress.ops.fetch_add(1, Ordering::Relaxed);
        self.progress.latency.record(end - start);
        if result.is_err() {
            self.progress.errors.fetch_add(1, Ordering::Relaxed);
        }
        (op, start, end, result)
    }

    async fn back_off(&self, error: &DriverError) {
        if error.is_connection_error() {
            let until = (Instant::now() + ERROR_BACKOFF).min(self.deadline);
            tokio::time::sleep_until(until).await;
        }
    }

    /// Runs until the deadline: back to back, or on the schedule `(first, interval)`.
    async fn run(mut self, schedule: Option<(Instant, Duration)>) {
        match schedule {
            None => {
                while Instant::now() < self.deadline {
                    let (op, start, end, result) = self.one().await;
                    let measured = start >= self.measure_start;
                    match result {
                        Ok(()) if measured => self.recorder(end).record(op, end - start),
                        Ok(()) => {}
                        Err(e) => {
                            if measured {
                                self.recorder(end).record_error(op, e.kind());
                            }
                            self.back_off(&e).await;
                        }
                    }
                }
            }
            Some((first, interval)) => {
                let mut intended = first;
                while intended < self.deadline {
                    tokio::time::sleep_until(intended).await;
                    let (op, start, end, result) = self.one().await;
                    let measured = intended >= self.measure_start;
                    match result {
                        Ok(()) if measured => self.recorder(end).record_corrected(
                            op,
                            intended.into_std(),
                            start.into_std(),
                            end.into_std(),
                        ),
                        Ok(()) => {}
                        Err(e) if measured => self.recorder(end).record_error(op, e.kind()),
                        Err(_) => {}
                    }
                    intended += interval;
                }
            }
        }
        let end = self.clamp(Instant::now());
        let _ = self.closed.send(self.intervals.finish(end));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn snapshot(index: u64, ms: &[u64], errors: u64) -> IntervalSnapshot {
        let mut recorder = Recorder::new();
        for &ms in ms {
            recorder.record(Operation::Get, Duration::from_millis(ms));
        }
        for _ in 0..errors {
            recorder.record_error(Operation::Put, "timeout");
        }
        IntervalSnapshot {
            index,
            start_offset: Duration::from_secs(index),
            length: Duration::from_secs(1),
            recorder,
        }
    }

    #[tokio::test]
    async fn collector_merges_workers_by_index_and_totals_everything() {
        let (tx, rx) = mpsc::unbounded_channel();
        let collector = tokio::spawn(collect_intervals(rx, 2, Duration::from_secs(1)));
        // Worker A closes intervals 0 and 1 early, then its last; worker B reports at the end,
        // with one more interval than A.
        tx.send(vec![snapshot(0, &[1, 2], 0), snapshot(1, &[3], 0)])
            .unwrap();
        tx.send(vec![snapshot(2, &[], 1)]).unwrap();
        tx.send(vec![
            snapshot(0, &[4], 0),
            snapshot(1, &[], 0),
            snapshot(2, &[5, 6, 7], 0),
            snapshot(3, &[8], 2),
        ])
        .unwrap();
        drop(tx);
        let (total, figures) = collector.await.unwrap().unwrap();
        let counts: Vec<(u64, u64, u64)> = figures
            .iter()
            .map(|f| (f.index, f.successful(), f.failed()))
            .collect();
        assert_eq!(counts, vec![(0, 3, 0), (1, 1, 0), (2, 3, 1), (3, 1, 2)]);
        assert_eq!(total.get(Operation::Get).unwrap().count(), 8);
        assert_eq!(total.get(Operation::Put).unwrap().error_count(), 3);
        // Every interval lists both operations; interval 0's get figures are its own.
        assert!(figures.iter().all(|f| f.per_op.len() == 2));
        let get0 = &figures[0].per_op[&Operation::Get];
        assert_eq!((get0.summary.count, get0.min_us), (3, 1000));
        assert!((get0.summary.ops_per_sec - 3.0).abs() < 1e-9);
        assert_eq!(figures[3].start_s, 3.0);
    }

    #[test]
    fn report_interval_keeps_at_most_300_points() {
        assert_eq!(
            report_interval(Duration::from_secs(2)),
            Duration::from_secs(1)
        );
        assert_eq!(
            report_interval(Duration::from_secs(300)),
            Duration::from_secs(1)
        );
        assert_eq!(
            report_interval(Duration::from_secs(301)),
            Duration::from_secs(2)
        );
        assert_eq!(
            report_interval(Duration::from_secs(3600)),
            Duration::from_secs(12)
        );
        assert_eq!(report_interval(Duration::ZERO), Duration::from_secs(1));
    }
}
