//! The console's live figures: once a second a task reads the counters and histograms the node
//! already keeps for `/metrics` and turns the change since the last reading into one sample
//! (requests per second and p50/p99 latency per front end, applies and fsyncs per second,
//! the largest follower lag of the shards led here). The last 15 minutes of samples stay in a
//! ring in memory, for `GET /v1/ui/figures`: the console needs no Prometheus to draw them.
//!
//! The sampler runs while the console is on (`[ui] enabled`), whether or not a page is open:
//! each second it reads the histograms' buckets and a few atomics per shard replica, and
//! allocates nothing but the sample. An open page adds the requests it makes.
//!
//! Left out of the latency figures: the console's own requests, and the long polls (Consul
//! blocking queries and the blocking RESP pops), whose time is the wait their client asked
//! for. `/metrics` has both as series of their own.

use crate::AppState;
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Mutex;
use std::time::{Duration, Instant};
use trireme_types::BUCKET_BOUNDS_MICROS;

/// Samples kept: one a second for 15 minutes.
pub(crate) const KEPT: usize = 15 * 60;

/// How often a sample is taken.
pub(crate) const EVERY: Duration = Duration::from_secs(1);

/// Bucket counts of a latency histogram, `+Inf` last (see
/// [`trireme_types::LatencyHistogram::bucket_counts`]).
pub type Buckets = [u64; BUCKET_BOUNDS_MICROS.len() + 1];

/// One front end in one second.
#[derive(Debug, Clone, Copy, PartialEq, Serialize)]
pub(crate) struct FrontEnd {
    /// Requests (RESP: commands) answered per second.
    pub rps: f64,
    /// Median latency in milliseconds, `None` in a second without requests.
    pub p50_ms: Option<f64>,
    /// 99th percentile latency in milliseconds.
    pub p99_ms: Option<f64>,
}

/// One second of a node's work.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub(crate) struct Sample {
    /// Numbers the samples of this process, from 1: a reader asks for those after the last
    /// one it has (and tells a restarted node by its [`Figures::boot_ms`]).
    pub seq: u64,
    /// When it was taken, Unix ms.
    pub at_ms: u64,
    /// The HTTP front end, the console's own requests and Consul blocking queries left out.
    pub http: FrontEnd,
    /// The RESP front end, the blocking pops (`BLPOP` and the like) left out.
    pub resp: FrontEnd,
    /// Batches of committed entries applied per second.
    pub applies: f64,
    /// fdatasync calls of the log per second.
    pub fsyncs: f64,
    /// The most log entries any follower of a shard led here is behind (0 when this node
    /// leads nothing).
    pub max_lag: u64,
    /// Shards led here.
    pub leaders: u32,
    /// Shard replicas held here.
    pub replicas: u32,
}

/// The counters one reading takes, to subtract from the next.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
struct Reading {
    http: Buckets,
    resp: Buckets,
    applies: u64,
    syncs: u64,
}

/// The ring of samples, and which process took them.
#[derive(Debug)]
pub struct Figures {
    /// When this process began sampling, Unix ms: its samples' series. A reader holding
    /// samples of another series (the node restarted) starts again from what is here.
    boot_ms: u64,
    samples: Mutex<VecDeque<Sample>>,
}

impl Default for Figures {
    fn default() -> Self {
        Self {
            boot_ms: trireme_cluster::now_ms(),
            samples: Mutex::default(),
        }
    }
}

impl Figures {
    fn push(&self, sample: Sample) {
        let mut samples = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if samples.len() == KEPT {
            samples.pop_front();
        }
        samples.push_back(sample);
    }

    /// The series of this process (see the field).
    pub(crate) fn boot_ms(&self) -> u64 {
        self.boot_ms
    }

    /// What a reader that has the samples of series `boot` up to `seq` has not seen, oldest
    /// first: those after `seq`, or every sample kept when the reader's are of another
    /// series (`boot` is not this process's, or `seq` is past the newest sample here: the
    /// node restarted and numbers from 1 again). A reader with nothing asks with `seq` 0.
    pub(crate) fn since(&self, seq: u64, boot: Option<u64>) -> Vec<Sample> {
        let samples = self
            .samples
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let newest = samples.back().map_or(0, |s| s.seq);
        if boot.is_some_and(|b| b != self.boot_ms) || seq > newest {
            return samples.iter().cloned().collect();
        }
        // Sequence numbers are consecutive: skip straight to the first one wanted.
        let first = samples.front().map_or(0, |s| s.seq);
        let skip = if seq < first {
            0
        } else {
            usize::try_from(seq - first + 1).unwrap_or(usize::MAX)
        };
        samples.iter().skip(skip).cloned().collect()
    }
}

/// Takes a sample every second until the node stops. Started by the server when the console
/// is on.
pub fn spawn_figures(state: &AppState) -> tokio::task::JoinHandle<()> {
    let state = state.clone();
    tokio::spawn(async move {
        let mut ticks = tokio::time::interval(EVERY);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        let mut last = read(&state);
        let mut last_at = Instant::now();
        let mut seq = 0;
        ticks.tick().await;
        loop {
            ticks.tick().await;
            if state.node.is_stopping() {
                return;
            }
            let now = read(&state);
            let at = Instant::now();
            seq += 1;
            state.figures.push(sample(
                &state,
                seq,
                &last,
                &now,
                at.duration_since(last_at).as_secs_f64(),
            ));
            last = now;
            last_at = at;
        }
    })
}

/// The counters now.
fn read(state: &AppState) -> Reading {
    use crate::timing::{BLOCKING, CONSOLE, METHODS};
    let mut http = [0; BUCKET_BOUNDS_MICROS.len() + 1];
    for (slot, histogram) in state.metrics.latency.iter().enumerate() {
        let route = slot / METHODS.len();
        if route == CONSOLE || route == BLOCKING {
            continue;
        }
        add(&mut http, &histogram.bucket_counts());
    }
    let storage = state.node.storage().metrics();
    Reading {
        http,
        resp: (state.resp_latency)(),
        applies: storage.applies.count(),
        syncs: storage.syncs.count(),
    }
}

fn add(into: &mut Buckets, counts: &Buckets) {
    for (sum, count) in into.iter_mut().zip(counts) {
        *sum += count;
    }
}

/// The sample for the time between two readings `seconds` apart.
fn sample(state: &AppState, seq: u64, last: &Reading, now: &Reading, seconds: f64) -> Sample {
    let replicas = state.node.replica_counts();
    let per_second = |now: u64, last: u64| now.saturating_sub(last) as f64 / seconds.max(0.001);
    Sample {
        seq,
        at_ms: trireme_cluster::now_ms(),
        http: front_end(&last.http, &now.http, seconds),
        resp: front_end(&last.resp, &now.resp, seconds),
        applies: per_second(now.applies, last.applies),
        fsyncs: per_second(now.syncs, last.syncs),
        max_lag: replicas.max_lag,
        leaders: replicas.leaders,
        replicas: replicas.replicas,
    }
}

/// Rate and quantiles of the requests counted between two readings of a histogram.
fn front_end(last: &Buckets, now: &Buckets, seconds: f64) -> FrontEnd {
    let delta: Buckets = std::array::from_fn(|i| now[i].saturating_sub(last[i]));
    let total: u64 = delta.iter().sum();
    FrontEnd {
        rps: total as f64 / seconds.max(0.001),
        p50_ms: quantile_ms(&delta, 0.50),
        p99_ms: quantile_ms(&delta, 0.99),
    }
}

/// The `q` quantile of the requests in `counts`, in milliseconds, interpolated inside its
/// bucket as Prometheus's `histogram_quantile` does; a quantile in `+Inf` is the last bound.
pub(crate) fn quantile_ms(counts: &Buckets, q: f64) -> Option<f64> {
    let total: u64 = counts.iter().sum();
    if total == 0 {
        return None;
    }
    let rank = q * total as f64;
    let mut below = 0u64;
    for (i, count) in counts.iter().enumerate() {
        if *count == 0 || ((below + count) as f64) < rank {
            below += count;
            continue;
        }
        let Some(upper) = BUCKET_BOUNDS_MICROS.get(i) else {
            break;
        };
        let lower = if i == 0 {
            0
        } else {
            BUCKET_BOUNDS_MICROS[i - 1]
        };
        let within = ((rank - below as f64) / *count as f64).clamp(0.0, 1.0);
        let micros = lower as f64 + (upper - lower) as f64 * within;
        return Some(micros / 1000.0);
    }
    BUCKET_BOUNDS_MICROS
        .last()
        .map(|micros| *micros as f64 / 1000.0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn buckets(pairs: &[(usize, u64)]) -> Buckets {
        let mut b = [0; BUCKET_BOUNDS_MICROS.len() + 1];
        for (i, n) in pairs {
            b[*i] = *n;
        }
        b
    }

    #[test]
    fn quantiles_interpolate_inside_their_bucket() {
        assert_eq!(quantile_ms(&buckets(&[]), 0.5), None);
        // 100 requests between 1 and 2.5 ms: the median is half way through that bucket.
        let one_bucket = buckets(&[(4, 100)]);
        assert_eq!(quantile_ms(&one_bucket, 0.5), Some(1.75));
        assert_eq!(quantile_ms(&one_bucket, 1.0), Some(2.5));
        // 98 fast ones under 100 µs and 2 slow ones between 50 and 100 ms.
        let tail = buckets(&[(0, 98), (9, 2)]);
        let p50 = quantile_ms(&tail, 0.5).unwrap();
        assert!(p50 > 0.0 && p50 <= 0.1, "{p50}");
        let p99 = quantile_ms(&tail, 0.99).unwrap();
        assert!((50.0..=100.0).contains(&p99), "{p99}");
        // Past the last bound: the last bound, not infinity.
        assert_eq!(quantile_ms(&buckets(&[(16, 3)]), 0.5), Some(10_000.0));
    }

    #[test]
    fn a_front_end_is_the_change_between_readings() {
        let last = buckets(&[(0, 10), (4, 5)]);
        let now = buckets(&[(0, 30), (4, 5)]);
        let f = front_end(&last, &now, 2.0);
        assert_eq!(f.rps, 10.0);
        assert_eq!(f.p50_ms, Some(0.05));
        let idle = front_end(&now, &now, 1.0);
        assert_eq!((idle.rps, idle.p50_ms, idle.p99_ms), (0.0, None, None));
    }

    fn sample(seq: u64) -> Sample {
        let quiet = FrontEnd {
            rps: 0.0,
            p50_ms: None,
            p99_ms: None,
        };
        Sample {
            seq,
            at_ms: seq * 1000,
            http: quiet,
            resp: quiet,
            applies: 0.0,
            fsyncs: 0.0,
            max_lag: 0,
            leaders: 0,
            replicas: 0,
        }
    }

    #[test]
    fn the_ring_keeps_fifteen_minutes_and_answers_what_is_new() {
        let figures = Figures::default();
        let boot = Some(figures.boot_ms());
        assert!(figures.since(0, None).is_empty());
        for seq in 1..=(KEPT as u64 + 10) {
            figures.push(sample(seq));
        }
        let all = figures.since(0, boot);
        assert_eq!(all.len(), KEPT);
        assert_eq!(all[0].seq, 11, "the oldest went first");
        let seqs: Vec<u64> = figures
            .since(KEPT as u64 + 7, boot)
            .iter()
            .map(|s| s.seq)
            .collect();
        assert_eq!(
            seqs,
            vec![KEPT as u64 + 8, KEPT as u64 + 9, KEPT as u64 + 10]
        );
        assert!(
            figures.since(KEPT as u64 + 10, boot).is_empty(),
            "nothing new"
        );
        assert_eq!(
            figures.since(3, boot).len(),
            KEPT,
            "older than the ring: all of it"
        );
    }

    #[test]
    fn a_reader_of_a_restarted_node_gets_the_new_series_whole() {
        // The page has samples 1..=120 of the node's first run; the node restarts and has
        // taken 5 samples since, numbered from 1 again.
        let before = Figures {
            boot_ms: 1_000,
            samples: Mutex::default(),
        };
        for seq in 1..=120 {
            before.push(sample(seq));
        }
        let last = before.since(0, None).last().map(|s| s.seq).unwrap();
        let after = Figures {
            boot_ms: 2_000,
            samples: Mutex::default(),
        };
        for seq in 1..=5 {
            after.push(sample(seq));
        }
        let seqs = |samples: Vec<Sample>| samples.iter().map(|s| s.seq).collect::<Vec<_>>();
        // Asked with the old series' name: everything of the new one.
        assert_eq!(seqs(after.since(last, Some(1_000))), vec![1, 2, 3, 4, 5]);
        // Asked by a reader that does not name its series: a number past the newest is
        // of another run, so everything too.
        assert_eq!(seqs(after.since(last, None)), vec![1, 2, 3, 4, 5]);
        // A number inside the new run, from an older series: still everything (the old
        // sample 3 is not the new one).
        assert_eq!(seqs(after.since(3, Some(1_000))), vec![1, 2, 3, 4, 5]);
        // Once the reader has the new series, only what is new.
        assert_eq!(seqs(after.since(3, Some(2_000))), vec![4, 5]);
        assert!(after.since(5, Some(2_000)).is_empty());
    }
}
