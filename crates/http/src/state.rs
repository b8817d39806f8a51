use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use trireme_cluster::Node;
use trireme_types::LatencyHistogram;

/// Request counters for `/metrics`.
#[derive(Debug)]
pub struct HttpMetrics {
    /// KV reads.
    pub kv_get: AtomicU64,
    /// KV writes.
    pub kv_put: AtomicU64,
    /// KV deletes.
    pub kv_delete: AtomicU64,
    /// Document reads.
    pub doc_get: AtomicU64,
    /// Document writes.
    pub doc_put: AtomicU64,
    /// Document and collection deletes.
    pub doc_delete: AtomicU64,
    /// Collection listings.
    pub doc_list: AtomicU64,
    /// Collection searches.
    pub doc_search: AtomicU64,
    /// Requests answered with a 4xx or 5xx status.
    pub errors: AtomicU64,
    /// Client connections open now.
    pub open_connections: AtomicU64,
    /// Request latency by route family and method (see `timing.rs`).
    pub(crate) latency: Box<[LatencyHistogram]>,
}

impl Default for HttpMetrics {
    fn default() -> Self {
        Self {
            kv_get: AtomicU64::default(),
            kv_put: AtomicU64::default(),
            kv_delete: AtomicU64::default(),
            doc_get: AtomicU64::default(),
            doc_put: AtomicU64::default(),
            doc_delete: AtomicU64::default(),
            doc_list: AtomicU64::default(),
            doc_search: AtomicU64::default(),
            errors: AtomicU64::default(),
            open_connections: AtomicU64::default(),
            latency: (0..crate::timing::ROUTES.len() * crate::timing::METHODS.len())
                .map(|_| LatencyHistogram::default())
                .collect(),
        }
    }
}

impl HttpMetrics {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }
}

/// Counts a connection as open for as long as it lives.
pub(crate) struct OpenConnection(Option<Arc<HttpMetrics>>);

impl OpenConnection {
    pub(crate) fn new(metrics: Option<Arc<HttpMetrics>>) -> Self {
        if let Some(m) = &metrics {
            m.open_connections.fetch_add(1, Ordering::Relaxed);
        }
        Self(metrics)
    }
}

impl Drop for OpenConnection {
    fn drop(&mut self) {
        if let Some(m) = &self.0 {
            m.open_connections.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    /// The node.
    pub node: Arc<Node>,
    /// HTTP counters.
    pub metrics: Arc<HttpMetrics>,
    /// Extra Prometheus text from other front ends (RESP), appended to `/metrics`.
    pub extra_metrics: Arc<dyn Fn() -> String + Send + Sync>,
    /// The last count of keys and bytes per shard.
    pub(crate) usage: Arc<crate::usage::UsageCache>,
    /// Serve the web console (`/ui`, `/v1/ui/...`); `[ui] enabled` in the config.
    pub console: bool,
    /// Whether the HTTP listener speaks HTTPS (`[tls]`): the scheme of the console's pages,
    /// and so of the origins it answers cross-origin requests from.
    pub https: bool,
    /// The RESP front end's latency buckets, all commands together, for the console's
    /// figures (none until the server wires it).
    pub resp_latency: Arc<dyn Fn() -> crate::figures::Buckets + Send + Sync>,
    /// The console's ring of figures (see `figures.rs`).
    pub(crate) figures: Arc<crate::figures::Figures>,
}

impl AppState {
    /// State for `node` with fresh counters.
    pub fn new(node: Arc<Node>) -> Self {
        Self {
            node,
            metrics: Arc::default(),
            extra_metrics: Arc::new(String::new),
            usage: Arc::default(),
            console: true,
            https: false,
            resp_latency: Arc::new(<crate::figures::Buckets as Default>::default),
            figures: Arc::default(),
        }
    }
}
