use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use trireme_cluster::Node;

/// Request counters for `/metrics`.
#[derive(Debug, Default)]
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
}

impl HttpMetrics {
    pub(crate) fn inc(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
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
}

impl AppState {
    /// State for `node` with fresh counters.
    pub fn new(node: Arc<Node>) -> Self {
        Self {
            node,
            metrics: Arc::default(),
            extra_metrics: Arc::new(String::new),
        }
    }
}
