//! Which cluster and node a data directory belongs to, recorded at bootstrap and checked at
//! every start, so a node never joins its data to the wrong cluster or changes its shard count.

use crate::{ClusterError, NodeConfig};
use serde::{Deserialize, Serialize};
use trireme_storage::Storage;
use trireme_types::GroupId;

/// Stored in the metadata group's `raft_meta` rows.
const GROUP: GroupId = GroupId(0);
const NAME: &str = "identity";

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Identity {
    pub cluster_name: String,
    pub node_name: String,
    pub shards: u32,
    pub created_ms: u64,
    /// The `--initial-cluster` the node was bootstrapped with (name, peer address); later
    /// starts use this one.
    #[serde(default)]
    pub initial_cluster: Vec<(String, String)>,
    /// Set when the node learned that it was removed from the cluster: the directory is
    /// refused from then on (a removed node's id is never reused).
    #[serde(default)]
    pub removed: bool,
}

/// Returns the stored identity after checking it against `config`, or `None` for a fresh
/// data directory.
pub(crate) fn check(
    storage: &Storage,
    config: &NodeConfig,
) -> Result<Option<Identity>, ClusterError> {
    let Some(bytes) = storage.raft_meta(GROUP, NAME)? else {
        return Ok(None);
    };
    let stored: Identity = serde_json::from_slice(&bytes).map_err(|e| {
        ClusterError::Config(format!(
            "unreadable identity in {}: {e}",
            storage.dir().display()
        ))
    })?;
    let dir = storage.dir().display();
    if stored.cluster_name != config.cluster_name {
        return Err(ClusterError::Config(format!(
            "data dir {dir} belongs to cluster {:?}, not {:?}",
            stored.cluster_name, config.cluster_name
        )));
    }
    if stored.node_name != config.name {
        return Err(ClusterError::Config(format!(
            "data dir {dir} belongs to node {:?}, not {:?}",
            stored.node_name, config.name
        )));
    }
    if stored.removed {
        return Err(ClusterError::Removed(crate::node::removed_message(config)));
    }
    if config.shards.is_some_and(|asked| asked != stored.shards) {
        return Err(ClusterError::Config(format!(
            "the shard count is fixed at bootstrap: data dir {dir} has {} shards, the configuration asks for {}",
            stored.shards,
            config.shards.unwrap_or_default()
        )));
    }
    Ok(Some(stored))
}

/// Records the identity durably.
pub(crate) async fn record(storage: &Storage, identity: &Identity) -> Result<(), ClusterError> {
    let bytes = serde_json::to_vec(identity).map_err(|e| ClusterError::Config(e.to_string()))?;
    storage.put_raft_meta(GROUP, NAME, bytes)?;
    storage.sync_async().await?;
    Ok(())
}
