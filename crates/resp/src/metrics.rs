//! The RESP server's counters and per-command latency histograms, for `/metrics`.

use std::fmt::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;
use trireme_types::LatencyHistogram;

/// Commands timed one by one in `/metrics`; every other name is counted as `other`.
/// The blocking pops come before `other`, under their own names: their time is mostly the
/// wait their client asked for, so readers of latency (the console's figures) leave them out.
pub(crate) const TIMED_COMMANDS: [&str; 37] = [
    "get",
    "set",
    "mget",
    "mset",
    "incr",
    "incrby",
    "decr",
    "decrby",
    "del",
    "unlink",
    "exists",
    "expire",
    "pexpire",
    "ttl",
    "pttl",
    "persist",
    "type",
    "scan",
    "dbsize",
    "ping",
    "echo",
    "hello",
    "select",
    "client",
    "auth",
    "quit",
    "info",
    "command",
    "config",
    "cluster",
    "blpop",
    "brpop",
    "blmove",
    "brpoplpush",
    "bzpopmin",
    "bzpopmax",
    "other",
];

/// The slots of [`TIMED_COMMANDS`] that hold the blocking pops.
const BLOCKING_SLOTS: std::ops::Range<usize> = 30..36;

/// The histogram slot of command `name` (any case).
pub(crate) fn command_slot(name: &[u8]) -> usize {
    TIMED_COMMANDS
        .iter()
        .position(|c| c.as_bytes().eq_ignore_ascii_case(name))
        .unwrap_or(TIMED_COMMANDS.len() - 1)
}

/// Counters for `/metrics`.
#[derive(Debug)]
pub struct RespMetrics {
    /// Connections accepted.
    pub connections: AtomicU64,
    /// Commands executed.
    pub commands: AtomicU64,
    /// Error replies sent.
    pub errors: AtomicU64,
    /// Connections closed for a protocol error.
    pub protocol_errors: AtomicU64,
    /// Connections open now.
    pub open_connections: AtomicU64,
    /// Time to run each command, by [`TIMED_COMMANDS`] slot.
    latency: Box<[LatencyHistogram]>,
}

impl Default for RespMetrics {
    fn default() -> Self {
        Self {
            connections: AtomicU64::default(),
            commands: AtomicU64::default(),
            errors: AtomicU64::default(),
            protocol_errors: AtomicU64::default(),
            open_connections: AtomicU64::default(),
            latency: TIMED_COMMANDS
                .iter()
                .map(|_| LatencyHistogram::default())
                .collect(),
        }
    }
}

impl RespMetrics {
    /// Counts one run of the command in `slot` (see [`command_slot`]).
    pub(crate) fn record(&self, slot: usize, took: Duration) {
        if let Some(histogram) = self.latency.get(slot) {
            histogram.record(took);
        }
    }

    /// Every command's latency buckets added up (see [`LatencyHistogram::bucket_counts`]),
    /// the blocking pops left out: the RESP front end as a whole, for the console's figures.
    pub fn latency_buckets(&self) -> [u64; trireme_types::BUCKET_BOUNDS_MICROS.len() + 1] {
        let mut total = [0; trireme_types::BUCKET_BOUNDS_MICROS.len() + 1];
        for (_, histogram) in self
            .latency
            .iter()
            .enumerate()
            .filter(|(slot, _)| !BLOCKING_SLOTS.contains(slot))
        {
            for (sum, count) in total.iter_mut().zip(histogram.bucket_counts()) {
                *sum += count;
            }
        }
        total
    }

    /// The counters in the Prometheus text format.
    pub fn prometheus(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(
            out,
            "# HELP trireme_resp_connections_open RESP client connections open now.\n# TYPE trireme_resp_connections_open gauge\ntrireme_resp_connections_open {}",
            self.open_connections.load(Ordering::Relaxed)
        );
        let name = "trireme_resp_command_duration_seconds";
        let _ = writeln!(
            out,
            "# HELP {name} Time to run a RESP command, from decoding it to its reply being ready, by command (unknown names count as other); a series appears with its first command.\n# TYPE {name} histogram"
        );
        for (command, histogram) in TIMED_COMMANDS.iter().zip(self.latency.iter()) {
            if histogram.count() > 0 {
                histogram.write_prometheus(&mut out, name, &format!("command=\"{command}\""));
            }
        }
        for (name, help, value) in [
            (
                "trireme_resp_connections_total",
                "RESP connections accepted.",
                &self.connections,
            ),
            (
                "trireme_resp_commands_total",
                "RESP commands executed.",
                &self.commands,
            ),
            (
                "trireme_resp_errors_total",
                "RESP error replies.",
                &self.errors,
            ),
            (
                "trireme_resp_protocol_errors_total",
                "RESP connections closed for a protocol error.",
                &self.protocol_errors,
            ),
        ] {
            let _ = writeln!(
                out,
                "# HELP {name} {help}\n# TYPE {name} counter\n{name} {}",
                value.load(Ordering::Relaxed)
            );
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn commands_find_their_histogram_in_any_case() {
        assert_eq!(TIMED_COMMANDS[command_slot(b"GET")], "get");
        assert_eq!(TIMED_COMMANDS[command_slot(b"cLuStEr")], "cluster");
        assert_eq!(TIMED_COMMANDS[command_slot(b"flushall")], "other");
        assert_eq!(TIMED_COMMANDS[command_slot(b"")], "other");
        let metrics = RespMetrics::default();
        metrics.record(command_slot(b"set"), Duration::from_millis(2));
        let text = metrics.prometheus();
        assert!(
            text.contains("trireme_resp_command_duration_seconds_count{command=\"set\"} 1\n"),
            "{text}"
        );
        assert!(!text.contains("command=\"get\""), "{text}");
        assert!(text.contains("trireme_resp_connections_open 0\n"), "{text}");
    }

    #[test]
    fn blocking_pops_are_timed_apart_and_left_out_of_the_front_end() {
        for name in BLOCKING_SLOTS.map(|slot| TIMED_COMMANDS[slot]) {
            assert!(name.starts_with('b'), "{name} is not a blocking pop");
        }
        assert_eq!(TIMED_COMMANDS[command_slot(b"BLPOP")], "blpop");
        assert_eq!(TIMED_COMMANDS[command_slot(b"bzpopmax")], "bzpopmax");
        assert_eq!(TIMED_COMMANDS[TIMED_COMMANDS.len() - 1], "other");
        let metrics = RespMetrics::default();
        metrics.record(command_slot(b"get"), Duration::from_micros(50));
        metrics.record(command_slot(b"blpop"), Duration::from_secs(5));
        metrics.record(command_slot(b"brpoplpush"), Duration::from_secs(5));
        let buckets = metrics.latency_buckets();
        assert_eq!(buckets.iter().sum::<u64>(), 1, "only the GET: {buckets:?}");
        assert_eq!(buckets[0], 1);
        assert!(
            metrics
                .prometheus()
                .contains("trireme_resp_command_duration_seconds_count{command=\"blpop\"} 1\n")
        );
    }
}
