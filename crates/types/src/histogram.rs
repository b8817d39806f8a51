//! [`LatencyHistogram`]: request latencies as a Prometheus histogram, recorded with one
//! atomic add per bucket and no lock, so every request of every front end can be timed.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// Upper bounds of the buckets, microseconds: 100 µs to 10 s, about three per decade. A
/// lease read on a loaded node takes a few hundred microseconds and a synced write a few
/// milliseconds; a request near the Raft timeout (10 s) still lands in a finite bucket.
pub const BUCKET_BOUNDS_MICROS: [u64; 16] = [
    100, 250, 500, 1_000, 2_500, 5_000, 10_000, 25_000, 50_000, 100_000, 250_000, 500_000,
    1_000_000, 2_500_000, 5_000_000, 10_000_000,
];

/// A latency histogram with the buckets of [`BUCKET_BOUNDS_MICROS`] and `+Inf`.
///
/// Each bucket holds its own count (not the running total); rendering adds them up into
/// Prometheus's cumulative `le` buckets, which keeps recording to one add per sample.
#[derive(Debug, Default)]
pub struct LatencyHistogram {
    buckets: [AtomicU64; BUCKET_BOUNDS_MICROS.len() + 1],
    sum_micros: AtomicU64,
}

impl LatencyHistogram {
    /// Counts one request that took `took`.
    pub fn record(&self, took: Duration) {
        let micros = u64::try_from(took.as_micros()).unwrap_or(u64::MAX);
        let bucket = BUCKET_BOUNDS_MICROS
            .iter()
            .position(|bound| micros <= *bound)
            .unwrap_or(BUCKET_BOUNDS_MICROS.len());
        self.buckets[bucket].fetch_add(1, Ordering::Relaxed);
        self.sum_micros.fetch_add(micros, Ordering::Relaxed);
    }

    /// How many requests each bucket holds (not cumulative), `+Inf` last: what a reader
    /// that samples the histogram (the console's figures) subtracts from its last copy.
    pub fn bucket_counts(&self) -> [u64; BUCKET_BOUNDS_MICROS.len() + 1] {
        std::array::from_fn(|i| self.buckets[i].load(Ordering::Relaxed))
    }

    /// Requests counted so far.
    pub fn count(&self) -> u64 {
        self.buckets.iter().map(|b| b.load(Ordering::Relaxed)).sum()
    }

    /// Appends the `_bucket`, `_sum` and `_count` samples of metric `name` with `labels`
    /// (`op="get"`, or empty) to `out`. The `# HELP` and `# TYPE` lines are the caller's,
    /// written once per metric name.
    pub fn write_prometheus(&self, out: &mut String, name: &str, labels: &str) {
        let sep = if labels.is_empty() { "" } else { "," };
        let mut total = 0u64;
        for (i, bucket) in self.buckets.iter().enumerate() {
            total += bucket.load(Ordering::Relaxed);
            let le = match BUCKET_BOUNDS_MICROS.get(i) {
                Some(micros) => seconds(*micros),
                None => "+Inf".to_string(),
            };
            let _ = writeln!(out, "{name}_bucket{{{labels}{sep}le=\"{le}\"}} {total}");
        }
        let braces = if labels.is_empty() {
            String::new()
        } else {
            format!("{{{labels}}}")
        };
        let sum = seconds(self.sum_micros.load(Ordering::Relaxed));
        let _ = writeln!(out, "{name}_sum{braces} {sum}");
        let _ = writeln!(out, "{name}_count{braces} {total}");
    }
}

/// Microseconds as seconds, exactly, without trailing zeros (`0.00025`, `1`).
fn seconds(micros: u64) -> String {
    let whole = micros / 1_000_000;
    let frac = micros % 1_000_000;
    if frac == 0 {
        return whole.to_string();
    }
    let digits = format!("{frac:06}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_are_cumulative_when_rendered() {
        let h = LatencyHistogram::default();
        h.record(Duration::from_micros(80));
        h.record(Duration::from_micros(100));
        h.record(Duration::from_millis(3));
        h.record(Duration::from_secs(60));
        assert_eq!(h.count(), 4);
        let mut out = String::new();
        h.write_prometheus(&mut out, "t_seconds", "op=\"get\"");
        assert!(
            out.contains("t_seconds_bucket{op=\"get\",le=\"0.0001\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("t_seconds_bucket{op=\"get\",le=\"0.0025\"} 2\n"),
            "{out}"
        );
        assert!(
            out.contains("t_seconds_bucket{op=\"get\",le=\"0.005\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("t_seconds_bucket{op=\"get\",le=\"10\"} 3\n"),
            "{out}"
        );
        assert!(
            out.contains("t_seconds_bucket{op=\"get\",le=\"+Inf\"} 4\n"),
            "{out}"
        );
        assert!(
            out.contains("t_seconds_sum{op=\"get\"} 60.00318\n"),
            "{out}"
        );
        assert!(out.contains("t_seconds_count{op=\"get\"} 4\n"), "{out}");

        let mut out = String::new();
        LatencyHistogram::default().write_prometheus(&mut out, "t", "");
        assert!(out.contains("t_bucket{le=\"+Inf\"} 0\n"), "{out}");
        assert!(out.contains("t_count 0\n"), "{out}");
    }
}
