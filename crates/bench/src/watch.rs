//! The blocking-watch fan-out: N watchers hold Consul blocking queries on one key, spread over
//! the targets; one writer changes the key; each write is timed to every watcher's wake-up.
//!
//! Before each write the writer waits until every watcher is waiting again, as the targets'
//! `trireme_blocking_queries_waiting` gauge counts them (so the figure is a wake-up, never a
//! watcher that had not yet asked); the delay runs from the write's start to the moment the
//! watcher's answer, carrying the new value, is read. With `hold`, the watchers wait on a key
//! nobody writes, for the given time: the load of idle watchers, to run beside another
//! benchmark.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

use serde::Serialize;
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::driver::DriverError;
use crate::driver::http1::HttpConnection;
use crate::probe::DelaySummary;

/// How long each blocking query asks to be held.
const WAIT: &str = "60s";

/// A request's time limit: the wait, its jitter (a sixteenth) and room to spare.
const REQUEST_LIMIT: Duration = Duration::from_secs(90);

/// How long the writer waits for every watcher to be waiting, or for every wake-up.
const STEP_LIMIT: Duration = Duration::from_secs(60);

/// How a fan-out runs.
#[derive(Debug, Clone)]
pub struct WatchConfig {
    /// Nodes' HTTP addresses (`host:port`); watchers go to them in turn, writes to the first.
    pub targets: Vec<String>,
    /// Watchers in all.
    pub watchers: usize,
    /// Writes, one after the other (each once every watcher saw the one before).
    pub writes: u64,
    /// The key watched.
    pub key: String,
    /// Hold idle watchers this long instead of writing.
    pub hold: Option<Duration>,
}

/// What a fan-out measured.
#[derive(Debug, Clone, Serialize)]
pub struct WatchResult {
    /// Watchers in all.
    pub watchers: usize,
    /// Writes made.
    pub writes: u64,
    /// From each write's start to each watcher's wake-up with it.
    pub wakeups: DelaySummary,
    /// Wake-ups that did not come within the step limit.
    pub missed: u64,
    /// The writes' own latency.
    pub write_latency: DelaySummary,
    /// Failed blocking queries (each is asked again).
    pub errors: u64,
}

impl WatchResult {
    /// The text report.
    #[must_use]
    pub fn report(&self) -> String {
        let ms = |us: u64| format!("{}.{:03}", us / 1000, us % 1000);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "blocking-watch fan-out: {} watchers, {} writes, {} wake-ups missed, {} query errors",
            self.watchers, self.writes, self.missed, self.errors
        );
        let _ = writeln!(
            out,
            "{:<14} {:>8} {:>10} {:>10} {:>10} {:>10}",
            "from write", "count", "p50 ms", "p95 ms", "p99 ms", "max ms"
        );
        for (name, s) in [
            ("to wake-up", &self.wakeups),
            ("to write ack", &self.write_latency),
        ] {
            let _ = writeln!(
                out,
                "{name:<14} {:>8} {:>10} {:>10} {:>10} {:>10}",
                s.count,
                ms(s.p50_us),
                ms(s.p95_us),
                ms(s.p99_us),
                ms(s.max_us)
            );
        }
        out
    }
}

/// Blocking queries waiting on the targets, summed from their `/metrics`.
async fn waiting(targets: &[String]) -> Result<u64, DriverError> {
    let mut total = 0;
    for target in targets {
        let mut conn = HttpConnection::new(target.clone(), "");
        let response = conn.request("GET", "/metrics", b"").await?;
        let text = String::from_utf8_lossy(&response.body);
        total += text
            .lines()
            .find_map(|l| l.strip_prefix("trireme_blocking_queries_waiting "))
            .and_then(|v| v.trim().parse::<u64>().ok())
            .ok_or_else(|| {
                DriverError::Protocol(format!(
                    "{target}/metrics has no trireme_blocking_queries_waiting: not a Trireme node?"
                ))
            })?;
    }
    Ok(total)
}

/// Waits until at least `n` blocking queries wait on the targets.
async fn until_waiting(targets: &[String], n: u64) -> Result<(), DriverError> {
    let deadline = Instant::now() + STEP_LIMIT;
    loop {
        if waiting(targets).await? >= n {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(DriverError::Protocol(format!(
                "fewer than {n} watchers waiting after {STEP_LIMIT:?}"
            )));
        }
        // Pacing between looks at the gauge; the condition is checked each time.
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

/// One watcher: asks again and again with the last index, and reports each value it wakes
/// with (the writer's sequence number) and when.
async fn watcher(
    target: String,
    path: String,
    mut index: u64,
    woke: mpsc::UnboundedSender<(u64, Instant)>,
    errors: Arc<AtomicU64>,
    stop: Arc<AtomicBool>,
) {
    let mut conn = HttpConnection::new(target, "").with_timeout(REQUEST_LIMIT);
    while !stop.load(Ordering::Relaxed) {
        let url = format!("{path}?raw&index={index}&wait={WAIT}");
        match conn.request("GET", &url, b"").await {
            Ok(response) if response.status == 200 => {
                let now = Instant::now();
                let new = response.index.unwrap_or(index);
                if new > index
                    && let Some(seq) = std::str::from_utf8(&response.body)
                        .ok()
                        .and_then(|v| v.parse::<u64>().ok())
                {
                    let _ = woke.send((seq, now));
                }
                index = new;
            }
            _ => {
                errors.fetch_add(1, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}

/// Runs the fan-out (or, with `hold`, holds idle watchers).
pub async fn run_watch(config: &WatchConfig) -> Result<WatchResult, DriverError> {
    let first = config
        .targets
        .first()
        .ok_or_else(|| DriverError::Protocol("no target".into()))?;
    let path = format!("/v1/kv/{}", config.key);
    let mut writer = HttpConnection::new(first.clone(), "");
    let put = |seq: u64| seq.to_string().into_bytes();
    let response = writer.request("PUT", &path, &put(0)).await?;
    if !response.is_success() {
        return Err(DriverError::Protocol(format!(
            "PUT {path}: status {}",
            response.status
        )));
    }
    let start = writer.request("GET", &path, b"").await?;
    let index = start.index.unwrap_or(1);

    let (tx, mut rx) = mpsc::unbounded_channel();
    let errors = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let already = waiting(&config.targets).await?;
    let tasks: Vec<_> = (0..config.watchers)
        .map(|i| {
            let target = config.targets[i % config.targets.len()].clone();
            tokio::spawn(watcher(
                target,
                path.clone(),
                index,
                tx.clone(),
                errors.clone(),
                stop.clone(),
            ))
        })
        .collect();
    drop(tx);
    let everyone = already + config.watchers as u64;
    let mut wakeups = Vec::new();
    let mut write_latency = Vec::new();
    let mut missed = 0;
    let mut writes = 0;
    let outcome = async {
        until_waiting(&config.targets, everyone).await?;
        if let Some(hold) = config.hold {
            eprintln!(
                "{} watchers waiting; holding them for {hold:?}",
                config.watchers
            );
            tokio::time::sleep(hold).await;
            return Ok(());
        }
        for seq in 1..=config.writes {
            until_waiting(&config.targets, everyone).await?;
            let started = Instant::now();
            let response = writer.request("PUT", &path, &put(seq)).await?;
            write_latency.push(started.elapsed());
            if !response.is_success() {
                return Err(DriverError::Protocol(format!(
                    "PUT {path}: status {}",
                    response.status
                )));
            }
            writes += 1;
            let mut seen = 0;
            let deadline = started + STEP_LIMIT;
            while seen < config.watchers {
                match tokio::time::timeout_at(deadline, rx.recv()).await {
                    Ok(Some((s, at))) if s == seq => {
                        seen += 1;
                        wakeups.push(at.saturating_duration_since(started));
                    }
                    Ok(Some(_)) => {}
                    Ok(None) | Err(_) => break,
                }
            }
            missed += (config.watchers - seen) as u64;
        }
        Ok::<_, DriverError>(())
    }
    .await;
    stop.store(true, Ordering::Relaxed);
    for task in tasks {
        task.abort();
    }
    outcome?;
    Ok(WatchResult {
        watchers: config.watchers,
        writes,
        wakeups: DelaySummary::of(&wakeups),
        missed,
        write_latency: DelaySummary::of(&write_latency),
        errors: errors.load(Ordering::Relaxed),
    })
}
