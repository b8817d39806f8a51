//! Starting, describing and stopping a node.

use crate::identity::{self, Identity};
use crate::{ClusterError, NodeConfig};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use trireme_raft::{PeerNode, ShardGroup};
use trireme_storage::{Storage, StorageOptions};
use trireme_types::{NodeId, ShardId, ShardMap};

/// How long a node waits at start for every shard to elect a leader and replay its log.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running node: its storage, its shard groups, and the request path through them.
pub struct Node {
    pub(crate) config: NodeConfig,
    pub(crate) node_id: u64,
    pub(crate) me: PeerNode,
    pub(crate) storage: Arc<Storage>,
    pub(crate) map: ShardMap,
    pub(crate) groups: Vec<ShardGroup>,
    pub(crate) cluster_created_ms: u64,
    started: Instant,
    stopping: AtomicBool,
}

/// One shard as this node sees it.
#[derive(Debug, Clone)]
pub struct ShardInfo {
    /// The shard.
    pub shard: ShardId,
    /// Its inclusive slot range.
    pub slots: (u16, u16),
    /// The leader, if known.
    pub leader: Option<PeerNode>,
    /// The voters.
    pub replicas: Vec<PeerNode>,
    /// This node's role in the group (`Leader`, `Follower`, ...).
    pub role: String,
    /// Current term.
    pub term: u64,
    /// Last index applied here.
    pub applied_index: u64,
    /// Last index known committed.
    pub committed_index: u64,
}

/// Whether the node can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHealth {
    /// Every shard has a known leader.
    pub all_shards_led: bool,
    /// Storage has not been poisoned by a failed sync.
    pub storage_ok: bool,
    /// Seconds since start.
    pub uptime_secs: u64,
}

impl Node {
    /// Opens the node's storage and shard groups, bootstrapping a one-node cluster on a fresh
    /// data directory, and returns once every shard has a leader and has replayed its log.
    pub async fn start(config: NodeConfig) -> Result<Arc<Self>, ClusterError> {
        let storage = Storage::open(&config.data_dir, &StorageOptions::default())?;
        let stored = identity::check(&storage, &config)?;
        let shards = stored
            .as_ref()
            .map(|i| i.shards)
            .or(config.shards)
            .unwrap_or(16);
        let map = ShardMap::new(shards).ok_or_else(|| {
            ClusterError::Config(format!("shard count must be 1..=16384, got {shards}"))
        })?;
        let node_id = NodeId::from_name(&config.name).0;
        let me = PeerNode {
            name: config.name.clone(),
            peer_addr: config.peer_addr.clone(),
            http_addr: config.http_addr.clone(),
            resp_addr: config.resp_addr.clone(),
        };

        let mut groups = Vec::with_capacity(shards as usize);
        for shard in map.shards() {
            groups.push(ShardGroup::open(storage.clone(), shard, node_id, &config.timing).await?);
        }
        let identity = match stored {
            Some(identity) => identity,
            None => {
                tracing::info!(node = %config.name, shards, "bootstrapping a one-node cluster");
                let members = BTreeMap::from([(node_id, me.clone())]);
                for group in &groups {
                    group.initialize(members.clone()).await?;
                }
                let identity = Identity {
                    cluster_name: config.cluster_name.clone(),
                    node_name: config.name.clone(),
                    shards,
                    created_ms: crate::now_ms(),
                };
                identity::record(&storage, &identity).await?;
                identity
            }
        };
        for group in &groups {
            group.wait_for_leader(START_TIMEOUT).await?;
            group.wait_recovered(START_TIMEOUT).await?;
        }

        let node = Arc::new(Node {
            config,
            node_id,
            me,
            storage,
            map,
            groups,
            cluster_created_ms: identity.created_ms,
            started: Instant::now(),
            stopping: AtomicBool::new(false),
        });
        crate::expiry::spawn_reaper(Arc::downgrade(&node));
        Ok(node)
    }

    /// This node's configuration.
    pub fn config(&self) -> &NodeConfig {
        &self.config
    }

    /// This node's name and addresses.
    pub fn me(&self) -> &PeerNode {
        &self.me
    }

    /// This node's Raft id.
    pub fn node_id(&self) -> u64 {
        self.node_id
    }

    /// The shard map.
    pub fn shard_map(&self) -> &ShardMap {
        &self.map
    }

    /// The node's storage (metrics, tests).
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// When the cluster was bootstrapped, Unix ms (a stable cluster identifier for clients).
    pub fn cluster_created_ms(&self) -> u64 {
        self.cluster_created_ms
    }

    /// Seconds since this process started the node.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    pub(crate) fn group(&self, shard: ShardId) -> &ShardGroup {
        // Shard ids come from this node's own map, so the index is always in range.
        &self.groups[shard.0 as usize]
    }

    /// Every shard as this node sees it.
    pub fn shards(&self) -> Vec<ShardInfo> {
        self.groups
            .iter()
            .map(|group| {
                let status = group.status();
                let slots = self.map.slots_of(group.shard());
                ShardInfo {
                    shard: group.shard(),
                    slots: (*slots.start(), *slots.end()),
                    leader: status
                        .leader
                        .and_then(|id| status.members.get(&id).cloned()),
                    replicas: status.members.values().cloned().collect(),
                    role: format!("{:?}", status.state),
                    term: status.term,
                    applied_index: status.applied_index,
                    committed_index: status.committed_index,
                }
            })
            .collect()
    }

    /// Whether the node can serve.
    pub fn health(&self) -> NodeHealth {
        NodeHealth {
            all_shards_led: self.groups.iter().all(|g| g.status().leader.is_some()),
            storage_ok: !self.storage.is_poisoned(),
            uptime_secs: self.started.elapsed().as_secs(),
        }
    }

    /// Whether [`Node::shutdown`] has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Stops every shard group and makes everything written so far durable.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        for group in &self.groups {
            group.shutdown().await;
        }
        if let Err(e) = self.storage.sync_async().await {
            tracing::warn!(error = %e, "final sync at shutdown");
        }
    }
}
