//! Running a scenario: optional load phase, then `concurrent` workers until the deadline.
//!
//! Each worker owns one driver connection, its own seeded generator
//! ([`worker_rng`]) and its own [`Recorder`]; nothing is shared on the
//! hot path except the optional [`Progress`] counters. Latencies are recorded only after
//! the warm-up. Failed requests are counted by [`DriverError::kind`] and never stop the run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::driver::{self, AnyDriver, DriverError};
use crate::keygen::{KeyGenerator, KeyGeneratorConfig};
use crate::scenario::{Mode, Operation, OperationMix, Scenario};
use crate::stats::{OpSummary, Recorder};
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
}

/// Outcome of the load phase.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct LoadSummary {
    /// Keys written successfully.
    pub count: u64,
    /// Writes that failed.
    pub errors: u64,
    /// How long the load phase took.
    pub elapsed: Duration,
}

/// What a run measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
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
            "no target given; starting a local cluster is not implemented yet",
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
        };
        // Spread the rate-mode schedules evenly over one interval.
        let first = interval.map(|i| start + i.mul_f64(w as f64 / workers as f64));
        handles.push(tokio::spawn(worker.run(first.zip(interval))));
    }
    let mut recorder = Recorder::new();
    for handle in handles {
        recorder.merge(&handle.await.map_err(join_failure)?)?;
    }
    let elapsed = Instant::now().saturating_duration_since(measure_start);

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
    })
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
}

impl Worker {
    /// Issues one operation; returns when it was sent, when it ended, and its result.
    async fn one(&mut self) -> (Operation, Instant, Instant, Result<(), DriverError>) {
        let op = self.mix.pick(&mut self.rng);
        let index = if op == Operation::Put && self.latest {
            self.keygen.next_insert_index()
        } else {
            self.keygen.next_index(&mut self.rng)
        };
        let key = KeyGenerator::key(index);
        // A cas writes too: it needs a value of the scenario's size like put and update.
        let value = matches!(op, Operation::Put | Operation::Update | Operation::Cas)
            .then(|| self.values.next_value(&mut self.rng));
        let start = Instant::now();
        let result = self.driver.execute(op, &key, value.as_deref()).await;
        let end = Instant::now();
        self.progress.ops.fetch_add(1, Ordering::Relaxed);
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
    async fn run(mut self, schedule: Option<(Instant, Duration)>) -> Recorder {
        let mut recorder = Recorder::new();
        match schedule {
            None => {
                while Instant::now() < self.deadline {
                    let (op, start, end, result) = self.one().await;
                    let measured = start >= self.measure_start;
                    match result {
                        Ok(()) if measured => recorder.record(op, end - start),
                        Ok(()) => {}
                        Err(e) => {
                            if measured {
                                recorder.record_error(op, e.kind());
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
                        Ok(()) if measured => recorder.record_corrected(
                            op,
                            intended.into_std(),
                            start.into_std(),
                            end.into_std(),
                        ),
                        Ok(()) => {}
                        Err(e) if measured => recorder.record_error(op, e.kind()),
                        Err(_) => {}
                    }
                    intended += interval;
                }
            }
        }
        recorder
    }
}
