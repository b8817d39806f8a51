//! Expired keys are removed through the log: the leader of each shard finds keys whose expiry
//! has passed and proposes a `Reap` command, which every replica applies identically. Reads
//! never return an expired key even before it is reaped.

use crate::Node;
use crate::request::Done;
use std::sync::Arc;
use trireme_types::Command;

/// Most keys one reap command removes.
const REAP_BATCH: usize = 1000;

pub(crate) fn spawn_reaper(node: &Arc<Node>) {
    crate::node::spawn_periodic(Arc::downgrade(node), node.config.expiry_interval, reap_once);
}

/// On every shard this node leads: one batch of expired keys, removed through the log.
async fn reap_once(node: Arc<Node>) {
    for group in node.local_groups() {
        if !group.is_leader() {
            continue;
        }
        let storage = node.storage.clone();
        let shard = group.shard();
        let now = crate::now_ms();
        let due =
            tokio::task::spawn_blocking(move || storage.expired_keys(shard, now, REAP_BATCH)).await;
        let keys = match due {
            Ok(Ok(keys)) if !keys.is_empty() => keys,
            Ok(Ok(_)) => continue,
            Ok(Err(e)) => {
                tracing::warn!(shard = shard.0, error = %e, "expiry scan failed");
                continue;
            }
            // The runtime is shutting down.
            Err(_) => return,
        };
        let count = keys.len();
        match node
            .write_shard::<Done>(shard, Command::Reap { keys })
            .await
        {
            Ok(_) => tracing::debug!(shard = shard.0, count, "reaped expired keys"),
            Err(e) => tracing::debug!(shard = shard.0, error = %e, "reap not applied"),
        }
    }
}
