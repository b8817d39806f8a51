//! The progress bar `trireme bench` draws on stderr while a run goes.
//!
//! Once a second it reads the runner's [`Progress`] counters and shows elapsed / total time, a
//! bar, operations per second over the last second, and errors so far. On a terminal it redraws
//! one line with `\r`; otherwise (a CI log) it prints a plain line every five seconds. During a
//! load phase it shows the keys loaded instead. Live latency is not shown: the runner's
//! workers keep their histograms to themselves until the end, and sharing one would put a lock
//! on the hot path.

use std::io::{IsTerminal, Write};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use tokio::sync::oneshot;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::runner::Progress;

/// Width of the bar in characters.
const BAR_WIDTH: usize = 30;

/// One progress line (without `\r` or newline).
#[must_use]
pub fn render(
    label: &str,
    elapsed: Duration,
    total: Duration,
    ops_per_sec: f64,
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
    format!(
        "{label}{:>4}s/{}s [{}{}] {:>5.1}% {:>10.0} ops/s  errors {errors}",
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
            3,
        );
        assert_eq!(
            line,
            "   5s/10s [###############---------------]  50.0%       1234 ops/s  errors 3"
        );
        let over = render(
            "step 2",
            Duration::from_secs(12),
            Duration::from_secs(10),
            0.0,
            0,
        );
        assert!(over.starts_with("step 2   12s/10s [##############################] 100.0%"));
        let zero = render("", Duration::ZERO, Duration::ZERO, 0.0, 0);
        assert!(zero.contains("100.0%"), "{zero}");
        assert_eq!(render_load("", 10, 100), "loading 10/100 keys");
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
