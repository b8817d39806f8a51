//! Keys and bytes per shard replica on this node, for `/metrics`. Counting them reads every
//! row of the shard, so a scrape gets the last count and starts a new one in the background
//! once that is older than [`MAX_AGE`]; only the first scrape waits for a count.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trireme_cluster::Node;

/// How old a count may be before a scrape starts the next one.
pub(crate) const MAX_AGE: Duration = Duration::from_secs(30);

/// A count of every local shard: (shard, rows, bytes), and when it was made.
#[derive(Clone)]
pub(crate) struct Usage {
    pub(crate) at: Instant,
    pub(crate) shards: Vec<(u32, u64, u64)>,
}

/// The last count and whether a new one is under way.
#[derive(Default)]
pub(crate) struct UsageCache {
    last: Mutex<Option<Usage>>,
    counting: AtomicBool,
}

impl UsageCache {
    /// The last count (making the first one now), refreshed in the background when stale.
    pub(crate) async fn get(self: &Arc<Self>, node: &Arc<Node>) -> Option<Usage> {
        let last = self
            .last
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        match last {
            Some(usage) => {
                if usage.at.elapsed() > MAX_AGE && !self.counting.swap(true, Ordering::AcqRel) {
                    let cache = self.clone();
                    let node = node.clone();
                    tokio::spawn(async move {
                        cache.count(node).await;
                    });
                }
                Some(usage)
            }
            None => {
                self.count(node.clone()).await;
                self.last
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)
                    .clone()
            }
        }
    }

    async fn count(&self, node: Arc<Node>) {
        let counted = tokio::task::spawn_blocking(move || {
            let shards = node
                .replica_stats()
                .into_iter()
                .filter_map(|replica| {
                    let shard = replica.shard.0;
                    match node.storage().shard_usage(replica.shard) {
                        Ok((rows, bytes)) => Some((shard, rows, bytes)),
                        Err(e) => {
                            tracing::warn!(shard, error = %e, "cannot count the shard's rows");
                            None
                        }
                    }
                })
                .collect();
            Usage {
                at: Instant::now(),
                shards,
            }
        })
        .await;
        if let Ok(usage) = counted {
            *self
                .last
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(usage);
        }
        self.counting.store(false, Ordering::Release);
    }
}
