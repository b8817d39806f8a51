//! The replication-delay probe, the Dynomite report's method: write a value on one node, poll
//! another until the value shows, and time it.
//!
//! Each sample writes a unique value to a fresh key on the write target, then reads the key on
//! the read target back to back (stale reads by default: a node answering from its own replica
//! is what shows replication delay) until the value is there. The delay is taken from the
//! write's acknowledgement and from its start to the answer of the first read that returned
//! the value, so it is an upper bound by up to one read round trip; the number of reads it took
//! is kept too (one read means the value was already there when first asked). A value not
//! visible within the timeout counts as a timeout, never as a delay.

use std::fmt::Write as _;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use serde::Serialize;
use tokio::time::Instant;

use crate::BenchError;
use crate::driver::{DriverError, HttpDriver, RespDriver};
use crate::runner::Progress;
use crate::scenario::{Consistency, Driver};

/// How a probe runs.
#[derive(Debug, Clone)]
pub struct ProbeConfig {
    /// Protocol: `trireme` and `consul` speak the Consul KV HTTP API, `resp` RESP.
    pub driver: Driver,
    /// Where values are written (`http://host:port` or `redis://host:port`).
    pub write_target: String,
    /// Where they are polled.
    pub read_target: String,
    /// Consistency of the polling reads (HTTP drivers).
    pub consistency: Consistency,
    /// Samples in all.
    pub samples: u64,
    /// Samples in flight at once.
    pub concurrent: u32,
    /// How long a value may take to show before the sample counts as a timeout.
    pub timeout: Duration,
}

/// One node's client; the trireme driver is used without its routing here, since the probe
/// must write to and read from the nodes it was given.
enum ProbeClient {
    Http(HttpDriver),
    Resp(RespDriver),
}

impl ProbeClient {
    async fn connect(
        driver: Driver,
        target: &str,
        consistency: Consistency,
    ) -> Result<Self, DriverError> {
        match driver {
            // The documents driver's targets are Trireme nodes: the KV API is there too.
            Driver::Trireme | Driver::Consul | Driver::Orchestrate => Ok(ProbeClient::Http(
                HttpDriver::connect(target, consistency).await?,
            )),
            Driver::Resp => Ok(ProbeClient::Resp(RespDriver::connect(target).await?)),
            Driver::Etcd => Err(DriverError::Target {
                target: target.to_owned(),
                message: "the probe speaks trireme, consul or resp, not etcd".into(),
            }),
        }
    }

    async fn put(&mut self, key: &str, value: &[u8]) -> Result<(), DriverError> {
        match self {
            ProbeClient::Http(d) => d.put(key, value).await,
            ProbeClient::Resp(d) => d.put(key, value).await,
        }
    }

    async fn get(&mut self, key: &str) -> Result<Option<Vec<u8>>, DriverError> {
        match self {
            ProbeClient::Http(d) => d.get(key).await,
            ProbeClient::Resp(d) => Ok(d.get(key).await?.map(|b| b.to_vec())),
        }
    }
}

/// One sample whose value became visible.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Sample {
    /// From the write's acknowledgement to the first read that returned the value.
    pub after_ack: Duration,
    /// From the write's start to the same read.
    pub from_start: Duration,
    /// Reads it took (1: visible at the first read).
    pub reads: u32,
}

/// Latency statistics of a set of delays, in microseconds (exact: nearest-rank percentiles
/// over the sorted samples).
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct DelaySummary {
    /// Number of delays.
    pub count: u64,
    /// Mean.
    pub mean_us: f64,
    /// Smallest.
    pub min_us: u64,
    /// Median.
    pub p50_us: u64,
    /// 95th percentile.
    pub p95_us: u64,
    /// 99th percentile.
    pub p99_us: u64,
    /// Largest.
    pub max_us: u64,
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl DelaySummary {
    /// Summarises `delays` (any order).
    #[must_use]
    pub fn of(delays: &[Duration]) -> Self {
        let mut us: Vec<u64> = delays.iter().map(|&d| micros(d)).collect();
        us.sort_unstable();
        let n = us.len();
        if n == 0 {
            return DelaySummary::default();
        }
        let rank = |q: f64| us[((q * n as f64).ceil() as usize).clamp(1, n) - 1];
        DelaySummary {
            count: n as u64,
            mean_us: us.iter().map(|&v| v as f64).sum::<f64>() / n as f64,
            min_us: us[0],
            p50_us: rank(0.50),
            p95_us: rank(0.95),
            p99_us: rank(0.99),
            max_us: us[n - 1],
        }
    }
}

/// One bar of the histogram: delays up to `upper_ms` (above the previous bar's bound).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Bucket {
    /// Upper bound in milliseconds.
    pub upper_ms: f64,
    /// Delays in the bucket.
    pub count: u64,
}

/// hey's histogram: `buckets` equal-width bars from the smallest to the largest delay.
#[must_use]
pub fn histogram(delays: &[Duration], buckets: usize) -> Vec<Bucket> {
    let ms: Vec<f64> = delays.iter().map(|d| d.as_secs_f64() * 1e3).collect();
    let (Some(min), Some(max)) = (
        ms.iter().copied().reduce(f64::min),
        ms.iter().copied().reduce(f64::max),
    ) else {
        return Vec::new();
    };
    let buckets = buckets.max(1);
    let width = (max - min) / buckets as f64;
    let mut out: Vec<Bucket> = (1..=buckets)
        .map(|i| Bucket {
            upper_ms: if i == buckets {
                max
            } else {
                min + width * i as f64
            },
            count: 0,
        })
        .collect();
    for v in ms {
        let i = if width > 0.0 {
            (((v - min) / width).ceil() as usize).saturating_sub(1)
        } else {
            0
        };
        out[i.min(buckets - 1)].count += 1;
    }
    out
}

/// The histogram as hey prints it: bound, count and a bar of up to 40 `■`.
#[must_use]
pub fn histogram_text(buckets: &[Bucket]) -> String {
    let most = buckets.iter().map(|b| b.count).max().unwrap_or(0).max(1);
    let mut out = String::new();
    for b in buckets {
        let bar = usize::try_from(b.count * 40 / most).unwrap_or(40);
        let _ = writeln!(
            out,
            "  {:>9.3} [{}]\t|{}",
            b.upper_ms,
            b.count,
            "■".repeat(bar)
        );
    }
    out
}

/// What a probe measured.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ProbeResult {
    /// Where values were written.
    pub write_target: String,
    /// Where they were polled.
    pub read_target: String,
    /// Samples asked for.
    pub samples: u64,
    /// Samples whose value became visible.
    pub visible: u64,
    /// Samples whose value was not visible within the timeout.
    pub timeouts: u64,
    /// Samples whose write failed (nothing to poll for).
    pub write_errors: u64,
    /// Polling reads that failed (the sample kept polling).
    pub read_errors: u64,
    /// Delay from the write's acknowledgement.
    pub after_ack: DelaySummary,
    /// Delay from the write's start.
    pub from_start: DelaySummary,
    /// Mean reads per visible sample.
    pub mean_reads: f64,
    /// Samples visible at the first read.
    pub first_read_hits: u64,
    /// Histogram of the delays after acknowledgement.
    pub histogram: Vec<Bucket>,
}

/// Tallies of one worker.
#[derive(Default)]
struct Tally {
    samples: Vec<Sample>,
    timeouts: u64,
    write_errors: u64,
    read_errors: u64,
}

impl ProbeResult {
    fn new(config: &ProbeConfig, tally: Tally) -> Self {
        let after: Vec<Duration> = tally.samples.iter().map(|s| s.after_ack).collect();
        let from: Vec<Duration> = tally.samples.iter().map(|s| s.from_start).collect();
        let visible = tally.samples.len() as u64;
        let reads: u64 = tally.samples.iter().map(|s| u64::from(s.reads)).sum();
        ProbeResult {
            write_target: crate::driver::redact_target(&config.write_target),
            read_target: crate::driver::redact_target(&config.read_target),
            samples: config.samples,
            visible,
            timeouts: tally.timeouts,
            write_errors: tally.write_errors,
            read_errors: tally.read_errors,
            after_ack: DelaySummary::of(&after),
            from_start: DelaySummary::of(&from),
            mean_reads: if visible == 0 {
                0.0
            } else {
                reads as f64 / visible as f64
            },
            first_read_hits: tally.samples.iter().filter(|s| s.reads == 1).count() as u64,
            histogram: histogram(&after, 10),
        }
    }

    /// The text report: counts, the two delay rows, then the histogram.
    #[must_use]
    pub fn report(&self) -> String {
        let ms = |us: u64| format!("{}.{:03}", us / 1000, us % 1000);
        let mut out = String::new();
        let _ = writeln!(
            out,
            "replication delay: write {} -> read {}",
            self.write_target, self.read_target
        );
        let _ = writeln!(
            out,
            "samples {}  visible {}  timeouts {}  write errors {}  read errors {}",
            self.samples, self.visible, self.timeouts, self.write_errors, self.read_errors
        );
        let _ = writeln!(
            out,
            "reads per sample {:.2} (visible at the first read: {})",
            self.mean_reads, self.first_read_hits
        );
        let _ = writeln!(
            out,
            "{:<12} {:>8} {:>10} {:>10} {:>10} {:>10} {:>10}",
            "delay", "count", "mean ms", "p50 ms", "p95 ms", "p99 ms", "max ms"
        );
        for (name, s) in [
            ("after ack", &self.after_ack),
            ("from start", &self.from_start),
        ] {
            let _ = writeln!(
                out,
                "{name:<12} {:>8} {:>10.3} {:>10} {:>10} {:>10} {:>10}",
                s.count,
                s.mean_us / 1000.0,
                ms(s.p50_us),
                ms(s.p95_us),
                ms(s.p99_us),
                ms(s.max_us)
            );
        }
        if !self.histogram.is_empty() {
            out.push_str("\nDelay after ack histogram (ms):\n");
            out.push_str(&histogram_text(&self.histogram));
        }
        out
    }
}

/// A key no earlier probe used: the process, the clock and the sample number.
fn run_tag() -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    format!("{}-{nanos}", std::process::id())
}

/// Runs the probe: `config.concurrent` workers share `config.samples` samples.
/// `progress.ops` counts finished samples and `progress.errors` the failed ones.
pub async fn run_probe(
    config: &ProbeConfig,
    progress: Option<Arc<Progress>>,
) -> Result<ProbeResult, BenchError> {
    let progress = progress.unwrap_or_default();
    let workers = u64::from(config.concurrent.max(1)).min(config.samples.max(1));
    let tag = run_tag();
    let mut handles = Vec::new();
    for w in 0..workers {
        let connect = |target: &str, consistency| {
            let target = target.to_owned();
            async move {
                ProbeClient::connect(config.driver, &target, consistency)
                    .await
                    .map_err(|e| {
                        BenchError::invalid("targets", format!("cannot use target {target}: {e}"))
                    })
            }
        };
        let writer = connect(&config.write_target, Consistency::Default).await?;
        let reader = connect(&config.read_target, config.consistency).await?;
        let range = config.samples * w / workers..config.samples * (w + 1) / workers;
        let keys: Vec<String> = range.map(|n| format!("probe/{tag}/{n}")).collect();
        let progress = Arc::clone(&progress);
        let timeout = config.timeout;
        handles.push(tokio::spawn(probe_worker(
            writer, reader, keys, timeout, progress,
        )));
    }
    let mut all = Tally::default();
    for handle in handles {
        let tally = handle
            .await
            .map_err(|e| BenchError::invalid("probe", format!("a probe task failed: {e}")))?;
        all.samples.extend(tally.samples);
        all.timeouts += tally.timeouts;
        all.write_errors += tally.write_errors;
        all.read_errors += tally.read_errors;
    }
    Ok(ProbeResult::new(config, all))
}

async fn probe_worker(
    mut writer: ProbeClient,
    mut reader: ProbeClient,
    keys: Vec<String>,
    timeout: Duration,
    progress: Arc<Progress>,
) -> Tally {
    let mut tally = Tally::default();
    for key in keys {
        let value = format!("{key}@{}", run_tag());
        let start = Instant::now();
        if writer.put(&key, value.as_bytes()).await.is_err() {
            tally.write_errors += 1;
            progress.errors.fetch_add(1, Ordering::Relaxed);
            progress.ops.fetch_add(1, Ordering::Relaxed);
            continue;
        }
        let acked = Instant::now();
        let deadline = acked + timeout;
        let mut reads = 0u32;
        let visible = loop {
            if Instant::now() >= deadline {
                break None;
            }
            reads += 1;
            match tokio::time::timeout_at(deadline, reader.get(&key)).await {
                Ok(Ok(Some(got))) if got == value.as_bytes() => break Some(Instant::now()),
                Ok(Ok(_)) => {}
                Ok(Err(_)) => {
                    tally.read_errors += 1;
                    // A failed connection is reopened by the next request; do not spin.
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
                Err(_) => break None,
            }
        };
        match visible {
            Some(seen) => tally.samples.push(Sample {
                after_ack: seen - acked,
                from_start: seen - start,
                reads,
            }),
            None => {
                tally.timeouts += 1;
                progress.errors.fetch_add(1, Ordering::Relaxed);
            }
        }
        progress.ops.fetch_add(1, Ordering::Relaxed);
    }
    tally
}

#[cfg(test)]
mod tests {
    use super::*;

    fn us(v: &[u64]) -> Vec<Duration> {
        v.iter().map(|&u| Duration::from_micros(u)).collect()
    }

    #[test]
    fn summary_of_known_delays() {
        // 1..=100 ms in a shuffled order.
        let mut delays: Vec<u64> = (1..=100).map(|ms| ms * 1000).collect();
        delays.reverse();
        delays.swap(3, 70);
        let s = DelaySummary::of(&us(&delays));
        assert_eq!(s.count, 100);
        assert!((s.mean_us - 50_500.0).abs() < 1e-9);
        assert_eq!(
            (s.min_us, s.p50_us, s.p95_us, s.p99_us, s.max_us),
            (1000, 50_000, 95_000, 99_000, 100_000)
        );
        let one = DelaySummary::of(&us(&[420]));
        assert_eq!((one.p50_us, one.p99_us, one.max_us), (420, 420, 420));
        assert_eq!(DelaySummary::of(&[]), DelaySummary::default());
    }

    #[test]
    fn histogram_buckets_cover_every_delay() {
        let delays = us(&[1000, 1000, 1500, 2000, 5000, 10_000]);
        let h = histogram(&delays, 9);
        assert_eq!(h.len(), 9);
        assert_eq!(h.iter().map(|b| b.count).sum::<u64>(), 6);
        // 1..10 ms in 9 bars of 1 ms: the first holds 1, 1, 1.5 and 2 ms (upper bounds
        // are inclusive), the fourth 5 ms, the last 10 ms.
        assert_eq!(
            h.iter().map(|b| b.count).collect::<Vec<_>>(),
            vec![4, 0, 0, 1, 0, 0, 0, 0, 1]
        );
        assert!((h[0].upper_ms - 2.0).abs() < 1e-9);
        assert!((h[8].upper_ms - 10.0).abs() < 1e-9);
        // All equal: one full bar.
        let same = histogram(&us(&[700, 700]), 10);
        assert_eq!(same[0].count, 2);
        assert!(histogram(&[], 10).is_empty());
        let text = histogram_text(&h);
        assert_eq!(text.lines().count(), 9);
        assert!(
            text.lines().next().unwrap().ends_with(&"■".repeat(40)),
            "{text}"
        );
        assert!(
            text.lines()
                .nth(3)
                .unwrap()
                .ends_with(&format!("|{}", "■".repeat(10)))
        );
    }

    #[test]
    fn result_counts_and_report() {
        let config = ProbeConfig {
            driver: Driver::Trireme,
            write_target: "http://a:1".into(),
            read_target: "http://reader:s3cret@b:2".into(),
            consistency: Consistency::Stale,
            samples: 5,
            concurrent: 1,
            timeout: Duration::from_secs(5),
        };
        let sample = |ms: u64, reads| Sample {
            after_ack: Duration::from_millis(ms),
            from_start: Duration::from_millis(ms + 1),
            reads,
        };
        let tally = Tally {
            samples: vec![sample(1, 1), sample(2, 3), sample(3, 2)],
            timeouts: 1,
            write_errors: 1,
            read_errors: 4,
        };
        let r = ProbeResult::new(&config, tally);
        assert_eq!((r.visible, r.timeouts, r.write_errors), (3, 1, 1));
        // The token never reaches the result (it is printed and saved).
        assert_eq!(r.write_target, "http://a:1");
        assert_eq!(r.read_target, "http://reader:***@b:2");
        assert!((r.mean_reads - 2.0).abs() < 1e-9);
        assert_eq!(r.first_read_hits, 1);
        assert_eq!(r.after_ack.p50_us, 2000);
        assert_eq!(r.from_start.max_us, 4000);
        let text = r.report();
        assert!(text.contains("samples 5  visible 3  timeouts 1"), "{text}");
        assert!(text.contains("after ack           3      2.000"), "{text}");
        assert!(text.contains("histogram"), "{text}");
    }
}
