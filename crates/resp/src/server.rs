//! The RESP listener: accepts clients up to a cap and runs each on its own task.

use crate::connection::Connection;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::fmt::Write;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::net::TcpListener;
use tokio::sync::Semaphore;
use trireme_cluster::Node;
use trireme_types::{LatencyHistogram, ShardId};

/// Most clients connected at once (Redis's default `maxclients`).
const MAX_CONNECTIONS: usize = 10_000;
/// Most open `SCAN` cursors remembered; the oldest are forgotten first.
const MAX_CURSORS: usize = 10_000;

/// Commands timed one by one in `/metrics`; every other name is counted as `other`.
pub(crate) const TIMED_COMMANDS: [&str; 31] = [
    "get", "set", "mget", "mset", "incr", "incrby", "decr", "decrby", "del", "unlink", "exists",
    "expire", "pexpire", "ttl", "pttl", "persist", "type", "scan", "dbsize", "ping", "echo",
    "hello", "select", "client", "auth", "quit", "info", "command", "config", "cluster", "other",
];

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

/// Where a `SCAN` cursor continues: the shard, and the last key returned in it.
pub(crate) type CursorPosition = (ShardId, Option<Bytes>);

/// State shared by every connection of the RESP server.
pub(crate) struct Shared {
    pub(crate) node: Arc<Node>,
    /// This node's pub/sub subscriptions.
    pub(crate) subscribers: Arc<crate::pubsub::Subscribers>,
    pub(crate) metrics: Arc<RespMetrics>,
    next_client_id: AtomicU64,
    cursors: Mutex<Cursors>,
}

#[derive(Default)]
struct Cursors {
    next: u64,
    positions: HashMap<u64, CursorPosition>,
    order: VecDeque<u64>,
}

impl Shared {
    pub(crate) fn client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Remembers where a scan stopped and returns the cursor number for it (never 0).
    pub(crate) fn save_cursor(&self, position: CursorPosition) -> u64 {
        let mut cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        cursors.next += 1;
        let id = cursors.next;
        cursors.positions.insert(id, position);
        cursors.order.push_back(id);
        while cursors.order.len() > MAX_CURSORS {
            if let Some(old) = cursors.order.pop_front() {
                cursors.positions.remove(&old);
            }
        }
        id
    }

    /// Where cursor `id` continues, if it is known.
    pub(crate) fn cursor(&self, id: u64) -> Option<CursorPosition> {
        let cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        cursors.positions.get(&id).cloned()
    }
}

/// The Redis-protocol server of a node.
pub struct RespServer {
    shared: Arc<Shared>,
}

impl RespServer {
    /// A server for `node`.
    pub fn new(node: Arc<Node>) -> Self {
        let subscribers = Arc::new(crate::pubsub::Subscribers::new(
            node.config().limits.pubsub_buffer_bytes,
        ));
        node.set_message_sink(subscribers.clone());
        Self {
            shared: Arc::new(Shared {
                node,
                subscribers,
                metrics: Arc::default(),
                next_client_id: AtomicU64::new(1),
                cursors: Mutex::default(),
            }),
        }
    }

    /// The server's counters.
    pub fn metrics(&self) -> Arc<RespMetrics> {
        self.shared.metrics.clone()
    }

    /// Serves clients on `listener` until `shutdown` completes.
    pub async fn serve(
        self,
        listener: TcpListener,
        shutdown: impl Future<Output = ()> + Send + 'static,
    ) {
        let permits = Arc::new(Semaphore::new(MAX_CONNECTIONS));
        tokio::pin!(shutdown);
        loop {
            let permit = tokio::select! {
                _ = &mut shutdown => return,
                permit = permits.clone().acquire_owned() => match permit {
                    Ok(permit) => permit,
                    Err(_) => return,
                },
            };
            let socket = tokio::select! {
                _ = &mut shutdown => return,
                accepted = listener.accept() => match accepted {
                    Ok((socket, _)) => socket,
                    Err(e) => {
                        tracing::warn!(error = %e, "resp accept failed");
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                },
            };
            let _ = socket.set_nodelay(true);
            self.shared
                .metrics
                .connections
                .fetch_add(1, Ordering::Relaxed);
            let shared = self.shared.clone();
            let open = OpenConnection::new(shared.metrics.clone());
            tokio::spawn(async move {
                let _permit = permit;
                let _open = open;
                if let Err(e) = Connection::new(socket, shared).run().await {
                    tracing::debug!(error = %e, "resp connection ended with an error");
                }
            });
        }
    }
}

/// Counts a connection as open for as long as it lives.
struct OpenConnection(Arc<RespMetrics>);

impl OpenConnection {
    fn new(metrics: Arc<RespMetrics>) -> Self {
        metrics.open_connections.fetch_add(1, Ordering::Relaxed);
        Self(metrics)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        self.0.open_connections.fetch_sub(1, Ordering::Relaxed);
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
}
