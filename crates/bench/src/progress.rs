//! The progress bar `trireme bench` draws on stderr while a run goes.
//!
//! Once a second it reads the runner's [`Progress`] counters and shows elapsed / total time, a
//! bar, operations per second and p99 latency over the last second, and errors so far. On a
//! terminal it redraws one line with `\r`; otherwise (a CI log) it prints a plain line every
//! five seconds. During a load phase it shows the keys loaded instead.
//!
//! The live p99 comes from [`LiveLatency`], not from the workers' HDR histograms, which stay
//! private to each worker until the end: sharing one would put a lock on the hot path. It is
//! the time from sending a request to its answer (in rate mode the report's figures are also
//! timed from the intended start), to within an eighth.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::runner::Progress;

/// Width of the bar in characters.
const BAR_WIDTH: usize = 30;

/// Latencies below this many microseconds have a bucket each.
const EXACT_BELOW: u64 = 16;
/// Buckets per power of two above that: an eighth of the value wide.
const SUB_BUCKETS: u64 = 8;
/// Buckets for every `u64` of microseconds.
const BUCKETS: usize = (EXACT_BELOW + (64 - 4) * SUB_BUCKETS) as usize;

/// A latency histogram that many workers record into at once, one relaxed atomic add each,
/// with log-linear buckets (exact below 16 µs, then eight per power of two).
#[derive(Debug)]
pub struct LiveLatency {
    buckets: Box<[AtomicU64]>,
}

impl Default for LiveLatency {
    fn default() -> Self {
        Self {
            buckets: (0..BUCKETS).map(|_| AtomicU64::new(0)).collect(),
        }
    }
}

fn bucket_of(micros: u64) -> usize {
    if micros < EXACT_BELOW {
        return micros as usize;
    }
    let power = u64::from(63 - micros.leading_zeros()); // >= 4
    let sub = (micros >> (power - 3)) & (SUB_BUCKETS - 1);
    (EXACT_BELOW + (power - 4) * SUB_BUCKETS + sub) as usize
}

/// The largest latency in microseconds that falls into `bucket`.
fn bucket_high(bucket: usize) -> u64 {
    let b = bucket as u64;
    if b < EXACT_BELOW {
        return b;
    }
    let power = (b - EXACT_BELOW) / SUB_BUCKETS + 4;
    let sub = (b - EXACT_BELOW) % SUB_BUCKETS;
    let low = (SUB_BUCKETS + sub) << (power - 3);
    low.saturating_add((1u64 << (power - 3)) - 1)
}

impl LiveLatency {
    /// Counts one operation that took `latency`.
    pub fn record(&self, latency: Duration) {
        let micros = u64::try_from(latency.as_micros()).unwrap_or(u64::MAX);
        self.buckets[bucket_of(micros)].fetch_add(1, Ordering::Relaxed);
    }

    /// The counts so far, to diff against a later snapshot.
    #[must_use]
    pub fn snapshot(&self) -> Vec<u64> {
        self.buckets
            .iter()
            .map(|b| b.load(Ordering::Relaxed))
            .collect()
    }

    /// The `quantile` (0..=1) of what was recorded between snapshots `before` and `after`,
    /// as the top of its bucket; `None` when nothing was.
    #[must_use]
    pub fn quantile_between(before: &[u64], after: &[u64], quantile: f64) -> Option<Duration> {
        let counts: Vec<u64> = after
            .iter()
            .zip(before)
            .map(|(a, b)| a.saturating_sub(*b))
            .collect();
        let total: u64 = counts.iter().sum();
        if total == 0 {
            return None;
        }
        let rank = ((quantile.clamp(0.0, 1.0) * total as f64).ceil() as u64).max(1);
        let mut seen = 0;
        counts.iter().enumerate().find_map(|(bucket, count)| {
            seen += count;
            (seen >= rank).then(|| Duration::from_micros(bucket_high(bucket)))
        })
    }
}

/// One progress line (without `\r` or newline); `p99` is `None` when nothing completed in
/// the last interval.
#[must_use]
pub fn render(
    label: &str,
    elapsed: Duration,
    total: Duration,
    ops_per_sec: f64,
    p99: Option<Duration>,
    errors: u64,
) -> String {
    let done = if total.is_zero() {
        1.0
    } else {
        (elapsed.as_secs_f64() / total.as_secs_f64()).clamp(0.0, 1.0)
    };
    let filled = ((done * BAR_WIDTH as f64).round() as usize).min(BAR_WIDTH);
    let label = if label.is_empty() {
        String::new()
    } else {
        format!("{label} ")
    };
    let p99 = p99.map_or_else(
        || "-".to_owned(),
        |d| format!("{:.2} ms", d.as_secs_f64() * 1000.0),
    );
    format!(
        "{label}{:>4}s/{}s [{}{}] {:>5.1}% {:>10.0} ops/s  p99 {p99:>9}  errors {errors}",
        elapsed.as_secs(),
        total.as_secs(),
        "#".repeat(filled),
        "-".repeat(BAR_WIDTH - filled),
        done * 100.0,
        ops_per_sec,
    )
}

/// The load-phase line.
#[must_use]
pub fn render_load(label: &str, loaded: u64, keys: u64) -> String {
    let label = if label.is_empty() {
        String::new()
    } else {
        format!("{label} ")
    };
    format!("{label}loading {loaded}/{keys} keys")
}

/// A progress bar drawing in the background until [`ProgressBar::finish`].
pub struct ProgressBar {
    stop: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl ProgressBar {
    /// Starts drawing `progress` for a run of `total` (warm-up included) after a load phase
    /// of `load_keys` keys, labelled `label`. Needs a Tokio runtime.
    #[must_use]
    pub fn start(progress: Arc<Progress>, total: Duration, load_keys: u64, label: &str) -> Self {
        let (stop, mut stopped) = oneshot::channel();
        let tty = std::io::stderr().is_terminal();
        let every = if tty { 1 } else { 5 };
        let label = label.to_owned();
        let task = tokio::spawn(async move {
            let mut tick = tokio::time::interval(Duration::from_secs(1));
            tick.tick().await;
            let mut run_start: Option<Instant> = None;
            let mut last_ops = 0u64;
            let mut last_latency = progress.latency.snapshot();
            let mut n = 0u64;
            loop {
                tokio::select! {
                    _ = tick.tick() => {}
                    _ = &mut stopped => break,
                }
                n += 1;
                let loaded = progress.loaded.load(Ordering::Relaxed);
                let ops = progress.ops.load(Ordering::Relaxed);
                let errors = progress.errors.load(Ordering::Relaxed);
                let latency = progress.latency.snapshot();
                let p99 = LiveLatency::quantile_between(&last_latency, &latency, 0.99);
                last_latency = latency;
                let line = if ops == 0 && load_keys > 0 && loaded < load_keys {
                    render_load(&label, loaded, load_keys)
                } else {
                    // The run's clock starts with its first operation (after any load phase).
                    let started = *run_start.get_or_insert_with(Instant::now);
                    render(
                        &label,
                        started.elapsed(),
                        total,
                        ops.saturating_sub(last_ops) as f64,
                        p99,
                        errors,
                    )
                };
                last_ops = ops;
                if n.is_multiple_of(every) {
                    let mut err = std::io::stderr().lock();
                    let _ = if tty {
                        write!(err, "\r{line}\x1b[K")
                    } else {
                        writeln!(err, "{line}")
                    };
                    let _ = err.flush();
                }
            }
            if tty && n > 0 {
                let _ = writeln!(std::io::stderr());
            }
        });
        ProgressBar {
            stop: Some(stop),
            task: Some(task),
        }
    }

    /// Stops drawing (ending the terminal line) and waits for the drawing task.
    pub async fn finish(mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
    }
}

impl Drop for ProgressBar {
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_shows_time_bar_rate_and_errors() {
        let line = render(
            "",
            Duration::from_secs(5),
            Duration::from_secs(10),
            1234.4,
            Some(Duration::from_micros(2_559)),
            3,
        );
        assert_eq!(
            line,
            "   5s/10s [###############---------------]  50.0%       1234 ops/s  p99   2.56 ms  errors 3"
        );
        let over = render(
            "step 2",
            Duration::from_secs(12),
            Duration::from_secs(10),
            0.0,
            None,
            0,
        );
        assert!(over.starts_with("step 2   12s/10s [##############################] 100.0%"));
        assert!(over.contains("p99         -"), "{over}");
        let zero = render("", Duration::ZERO, Duration::ZERO, 0.0, None, 0);
        assert!(zero.contains("100.0%"), "{zero}");
        assert_eq!(render_load("", 10, 100), "loading 10/100 keys");
    }

    #[test]
    fn buckets_cover_every_latency_within_an_eighth() {
        let mut previous_high = None;
        for bucket in 0..BUCKETS {
            let high = bucket_high(bucket);
            assert!(previous_high.is_none_or(|p| high > p), "bucket {bucket}");
            previous_high = Some(high);
        }
        assert_eq!(bucket_high(BUCKETS - 1), u64::MAX);
        for micros in [
            0,
            1,
            15,
            16,
            17,
            100,
            1_000,
            12_345,
            999_999,
            1 << 40,
            u64::MAX,
        ] {
            let bucket = bucket_of(micros);
            let high = bucket_high(bucket);
            assert!(high >= micros, "{micros} above its bucket's top {high}");
            assert!(
                bucket == 0 || bucket_high(bucket - 1) < micros,
                "{micros} belongs to a lower bucket"
            );
            assert!(
                high - micros <= micros / 8,
                "{micros} -> {high}: wider than an eighth"
            );
        }
    }

    #[test]
    fn p99_is_read_from_the_difference_of_two_snapshots() {
        let live = LiveLatency::default();
        for _ in 0..1000 {
            live.record(Duration::from_millis(50));
        }
        let before = live.snapshot();
        for _ in 0..990 {
            live.record(Duration::from_micros(100));
        }
        for _ in 0..10 {
            live.record(Duration::from_millis(10));
        }
        let after = live.snapshot();
        let p99 = LiveLatency::quantile_between(&before, &after, 0.99).unwrap();
        assert!(
            (Duration::from_micros(100)..=Duration::from_micros(112)).contains(&p99),
            "the 990th of 1000 is a 100 µs one, and the earlier 50 ms ones do not count: {p99:?}"
        );
        let p999 = LiveLatency::quantile_between(&before, &after, 0.999).unwrap();
        assert!(
            (Duration::from_millis(10)..=Duration::from_micros(11_250)).contains(&p999),
            "{p999:?}"
        );
        assert_eq!(LiveLatency::quantile_between(&after, &after, 0.99), None);
    }

    #[tokio::test]
    async fn finish_stops_the_bar() {
        let progress = Arc::new(Progress::default());
        let bar = ProgressBar::start(Arc::clone(&progress), Duration::from_secs(3), 0, "t");
        progress.ops.fetch_add(10, Ordering::Relaxed);
        tokio::time::sleep(Duration::from_millis(1200)).await;
        tokio::time::timeout(Duration::from_secs(1), bar.finish())
            .await
            .expect("the bar stops when asked");
    }
}
