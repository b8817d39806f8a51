//! Starting, describing and stopping a node.
//!
//! Start-up, on every node, fresh or not:
//! 1. open storage and check the data directory's identity; open the peer transport;
//! 2. open the metadata group (group 0); on a fresh directory, the first five initial nodes
//!    initialize it with identical membership (openraft allows that), the rest wait to be
//!    added as learners;
//! 3. register this node's addresses and labels in the metadata group;
//! 4. wait for the placement: the metadata leader writes it once, create-only, when every
//!    initial node has registered, spreading each shard's voters over zones and racks;
//! 5. open the shard groups placed here, initialize them with the placement's membership (a
//!    no-op once initialized), and wait until each has a leader and has replayed its log.

use crate::identity::{self, Identity};
use crate::meta::{self, META_SHARD, NodeInfo, Placement};
use crate::request::PutOutcome;
use crate::{ClusterError, NodeConfig};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock, RwLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use trireme_raft::{PeerNode, PeerTransport, ProposalMetrics, ShardGroup};
use trireme_storage::{Storage, StorageOptions};
use trireme_types::{Command, GroupId, NodeId, PutCondition, ShardId, ShardMap, TtlUpdate};

/// How long a node waits at start for its peers, the placement, and every shard's leader.
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running node: its storage, its Raft groups, and the request path through them.
pub struct Node {
    pub(crate) config: NodeConfig,
    pub(crate) node_id: u64,
    pub(crate) me: PeerNode,
    pub(crate) storage: Arc<Storage>,
    /// What this node's groups have proposed, shared by all of them.
    proposal_metrics: Arc<ProposalMetrics>,
    pub(crate) map: ShardMap,
    pub(crate) transport: PeerTransport,
    pub(crate) meta: ShardGroup,
    /// This node's replica of each shard, by shard index; `None` where it holds none.
    groups: RwLock<Vec<Option<ShardGroup>>>,
    placement: OnceLock<Placement>,
    /// Every registered node, by id, as read from the metadata group.
    directory: RwLock<BTreeMap<u64, NodeInfo>>,
    /// Names and peer addresses the cluster was bootstrapped with.
    initial: Vec<(String, String)>,
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
    /// This node's role in the group (`Leader`, `Follower`, ...), or `None` when it holds no
    /// replica of the shard.
    pub role: Option<String>,
    /// Current term (0 when not a replica here).
    pub term: u64,
    /// Last index applied here.
    pub applied_index: u64,
    /// Last index known committed.
    pub committed_index: u64,
}

/// Whether the node can serve.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeHealth {
    /// Every shard held here, and the metadata group, has a known leader.
    pub all_shards_led: bool,
    /// Storage has not been poisoned by a failed sync.
    pub storage_ok: bool,
    /// Seconds since start.
    pub uptime_secs: u64,
}

impl Node {
    /// Binds `config.peer_addr` and starts the node (see [`Node::start_with_listener`]).
    pub async fn start(config: NodeConfig) -> Result<Arc<Self>, ClusterError> {
        let listener = TcpListener::bind(&config.peer_addr).await.map_err(|e| {
            ClusterError::Config(format!("cannot listen on {}: {e}", config.peer_addr))
        })?;
        let mut config = config;
        if let Ok(addr) = listener.local_addr() {
            config.peer_addr = addr.to_string();
        }
        Self::start_with_listener(config, listener).await
    }

    /// Starts the node with its peer listener already bound, bootstrapping the cluster on a
    /// fresh data directory, and returns once every shard placed here has a leader and has
    /// replayed its log.
    pub async fn start_with_listener(
        config: NodeConfig,
        peer_listener: TcpListener,
    ) -> Result<Arc<Self>, ClusterError> {
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
        let initial = match stored.as_ref().filter(|i| !i.initial_cluster.is_empty()) {
            Some(identity) => identity.initial_cluster.clone(),
            None => initial_cluster(&config)?,
        };

        let transport = PeerTransport::new(node_id, config.cluster_name.clone())
            .with_snapshot_chunk_bytes(config.timing.snapshot_chunk_bytes as usize);
        for (name, addr) in &initial {
            transport.set_peer_addr(NodeId::from_name(name).0, addr);
        }
        transport.serve(peer_listener);
        let proposal_metrics = Arc::new(ProposalMetrics::default());
        let meta = ShardGroup::open(
            storage.clone(),
            GroupId::META,
            META_SHARD,
            node_id,
            &config.timing,
            &transport,
            proposal_metrics.clone(),
        )
        .await?;

        let identity = match stored {
            Some(identity) => identity,
            None => {
                let voters = meta_voters(&initial);
                if voters.contains_key(&node_id) {
                    tracing::info!(node = %config.name, nodes = initial.len(), shards, "bootstrapping the cluster");
                    meta.initialize(voters).await?;
                }
                let identity = Identity {
                    cluster_name: config.cluster_name.clone(),
                    node_name: config.name.clone(),
                    shards,
                    created_ms: crate::now_ms(),
                    initial_cluster: initial.clone(),
                };
                identity::record(&storage, &identity).await?;
                identity
            }
        };
        meta.wait_recovered(START_TIMEOUT).await?;

        let node = Arc::new(Node {
            groups: RwLock::new(vec![None; shards as usize]),
            placement: OnceLock::new(),
            directory: RwLock::new(BTreeMap::new()),
            initial,
            config,
            node_id,
            me,
            storage,
            proposal_metrics,
            map,
            transport,
            meta,
            cluster_created_ms: identity.created_ms,
            started: Instant::now(),
            stopping: AtomicBool::new(false),
        });
        node.transport
            .set_forward_handler(crate::forward::handler(&node));
        node.refresh_directory();
        spawn_meta_watcher(Arc::downgrade(&node));

        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        node.register().await?;
        let placement = node.await_placement(deadline).await?;
        node.open_shards(&placement).await?;
        crate::expiry::spawn_reaper(&node);
        if node.config.balance_leaders {
            crate::balance::spawn_balancer(&node);
        }
        Ok(node)
    }

    /// Writes this node's row in the metadata group (addresses change across restarts).
    async fn register(&self) -> Result<(), ClusterError> {
        let info = NodeInfo {
            node: self.me.clone(),
            rack: self.config.rack.clone(),
            zone: self.config.zone.clone(),
        };
        let value = serde_json::to_vec(&info).map_err(|e| ClusterError::Config(e.to_string()))?;
        let put = Command::Put {
            key: Bytes::from(meta::node_key(&self.me.name)),
            value: Bytes::from(value),
            flags: None,
            condition: PutCondition::Always,
            ttl: TtlUpdate::Clear,
        };
        self.write_meta(put).await.map(|_| ())
    }

    async fn write_meta(&self, command: Command) -> Result<PutOutcome, ClusterError> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            match self.write_shard(META_SHARD, command.clone()).await {
                Ok(outcome) => return Ok(outcome),
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::info!(error = %e, "metadata group not ready yet; retrying");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until the placement is applied here (the metadata leader writes it).
    async fn await_placement(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<Placement, ClusterError> {
        loop {
            if let Some(placement) = self.read_placement()? {
                if placement.replicas.len() != self.map.shard_count() as usize {
                    return Err(ClusterError::Config(format!(
                        "the cluster was bootstrapped with {} shards, this node with {}",
                        placement.replicas.len(),
                        self.map.shard_count()
                    )));
                }
                let _ = self.placement.set(placement.clone());
                return Ok(placement);
            }
            if tokio::time::Instant::now() >= deadline {
                let missing: Vec<&str> = self.unregistered().collect();
                return Err(ClusterError::Config(format!(
                    "no shard placement after {START_TIMEOUT:?}; waiting for nodes {missing:?} to join"
                )));
            }
            let applied = self.meta.leader_and_applied().1;
            self.meta
                .await_applied_beyond(applied, Duration::from_millis(500))
                .await;
        }
    }

    fn read_placement(&self) -> Result<Option<Placement>, ClusterError> {
        let Some(record) = self
            .storage
            .get(META_SHARD.0, meta::PLACEMENT_KEY, crate::now_ms())?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&record.value)
            .map(Some)
            .map_err(|e| ClusterError::Config(format!("unreadable placement: {e}")))
    }

    /// Initial nodes that have not registered yet.
    fn unregistered(&self) -> impl Iterator<Item = &str> {
        let directory = self
            .directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        self.initial
            .iter()
            .filter(move |(name, _)| !directory.contains_key(&NodeId::from_name(name).0))
            .map(|(name, _)| name.as_str())
    }

    async fn open_shards(&self, placement: &Placement) -> Result<(), ClusterError> {
        let mut opened = Vec::new();
        for shard in self.map.shards() {
            if !placement.hosts(shard, self.node_id) {
                continue;
            }
            let group = ShardGroup::open(
                self.storage.clone(),
                GroupId::of_shard(shard),
                shard,
                self.node_id,
                &self.config.timing,
                &self.transport,
                self.proposal_metrics.clone(),
            )
            .await?;
            group.initialize(placement.membership(shard)).await?;
            self.groups
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner)[shard.0 as usize] =
                Some(group.clone());
            opened.push(group);
        }
        for group in &opened {
            group.wait_for_leader(START_TIMEOUT).await?;
            group.wait_recovered(START_TIMEOUT).await?;
        }
        Ok(())
    }

    /// Reloads the node rows of the metadata group into the directory and the transport.
    fn refresh_directory(&self) {
        let rows = match self.storage.scan(
            META_SHARD.0,
            meta::NODE_PREFIX,
            None,
            100_000,
            crate::now_ms(),
        ) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the node directory");
                return;
            }
        };
        let mut directory = BTreeMap::new();
        for (key, record) in rows {
            match serde_json::from_slice::<NodeInfo>(&record.value) {
                Ok(info) => {
                    self.transport
                        .set_peer_addr(info.id(), &info.node.peer_addr);
                    directory.insert(info.id(), info);
                }
                Err(e) => tracing::warn!(key = ?key, error = %e, "unreadable node row"),
            }
        }
        *self
            .directory
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = directory;
    }

    /// The metadata leader's jobs: write the placement once every initial node has
    /// registered; add registered nodes beyond the metadata voters as learners.
    async fn lead_metadata(&self) {
        if !self.meta.is_leader() {
            return;
        }
        let directory = self
            .directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        if self.placement.get().is_none() && matches!(self.read_placement(), Ok(None)) {
            let infos: Option<Vec<NodeInfo>> = self
                .initial
                .iter()
                .map(|(name, _)| directory.get(&NodeId::from_name(name).0).cloned())
                .collect();
            if let Some(infos) = infos {
                let factor = self.config.replication_factor as usize;
                if factor > infos.len() {
                    tracing::warn!(
                        factor,
                        nodes = infos.len(),
                        "replication factor exceeds the node count; each shard gets one replica per node"
                    );
                }
                let placement = meta::place(&infos, self.map.shard_count(), factor);
                match serde_json::to_vec(&placement) {
                    Ok(value) => {
                        let put = Command::Put {
                            key: Bytes::from_static(meta::PLACEMENT_KEY),
                            value: Bytes::from(value),
                            flags: None,
                            condition: PutCondition::IfAbsent,
                            ttl: TtlUpdate::Clear,
                        };
                        let log = trireme_types::LogCommand {
                            now_ms: crate::now_ms(),
                            command: put,
                        };
                        match self.meta.write(log).await {
                            Ok(_) => tracing::info!(
                                shards = self.map.shard_count(),
                                "placed every shard"
                            ),
                            Err(e) => tracing::info!(error = %e, "placement not written yet"),
                        }
                    }
                    Err(e) => tracing::error!(error = %e, "cannot encode the placement"),
                }
            }
        }
        let members = self.meta.status().members;
        for (id, info) in directory {
            if !members.contains_key(&id) {
                let node = meta::member(&info.node);
                if let Err(e) = self.meta.raft().add_learner(id, node, false).await {
                    tracing::info!(node = %info.node.name, error = %e, "cannot add metadata learner yet");
                }
            }
        }
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

    /// What this node's Raft groups have proposed (metrics).
    pub fn proposal_metrics(&self) -> &ProposalMetrics {
        &self.proposal_metrics
    }

    /// When the cluster was bootstrapped, Unix ms (a stable cluster identifier for clients).
    pub fn cluster_created_ms(&self) -> u64 {
        self.cluster_created_ms
    }

    /// Seconds since this process started the node.
    pub fn uptime(&self) -> Duration {
        self.started.elapsed()
    }

    /// This node's replica of `shard` (the metadata group for its storage shard id).
    pub(crate) fn group(&self, shard: ShardId) -> Option<ShardGroup> {
        if shard == META_SHARD {
            return Some(self.meta.clone());
        }
        self.groups
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(shard.0 as usize)
            .cloned()
            .flatten()
    }

    /// Every shard replica on this node.
    pub(crate) fn local_groups(&self) -> Vec<ShardGroup> {
        self.groups
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .flatten()
            .cloned()
            .collect()
    }

    /// The voters of `shard` by node id.
    pub(crate) fn replicas_of(&self, shard: ShardId) -> Vec<u64> {
        if shard == META_SHARD {
            return meta_voters(&self.initial).into_keys().collect();
        }
        self.placement
            .get()
            .and_then(|p| p.replicas.get(shard.0 as usize).cloned())
            .unwrap_or_default()
    }

    /// Name and current addresses of node `id`.
    pub fn node_info(&self, id: u64) -> Option<PeerNode> {
        if id == self.node_id {
            return Some(self.me.clone());
        }
        if let Some(info) = self
            .directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
        {
            return Some(info.node.clone());
        }
        self.placement
            .get()
            .and_then(|p| p.members.get(&id).cloned())
    }

    /// Every node the cluster knows, with its labels.
    pub fn nodes(&self) -> Vec<NodeInfo> {
        self.directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .values()
            .cloned()
            .collect()
    }

    /// Whether the node has a link up to `id` (itself counts as linked).
    pub fn is_linked(&self, id: u64) -> bool {
        id == self.node_id || self.transport.is_linked(id)
    }

    /// Every shard as this node sees it.
    pub fn shards(&self) -> Vec<ShardInfo> {
        self.map
            .shards()
            .map(|shard| {
                let slots = self.map.slots_of(shard);
                let replicas: Vec<PeerNode> = self
                    .replicas_of(shard)
                    .into_iter()
                    .filter_map(|id| self.node_info(id))
                    .collect();
                let mut info = ShardInfo {
                    shard,
                    slots: (*slots.start(), *slots.end()),
                    leader: None,
                    replicas,
                    role: None,
                    term: 0,
                    applied_index: 0,
                    committed_index: 0,
                };
                if let Some(group) = self.group(shard) {
                    let status = group.status();
                    info.leader = status.leader.and_then(|id| self.node_info(id));
                    info.role = Some(format!("{:?}", status.state));
                    info.term = status.term;
                    info.applied_index = status.applied_index;
                    info.committed_index = status.committed_index;
                }
                info
            })
            .collect()
    }

    /// The metadata group's leader, if known.
    pub fn meta_leader(&self) -> Option<PeerNode> {
        self.meta.leader().and_then(|id| self.node_info(id))
    }

    /// Whether the node can serve.
    pub fn health(&self) -> NodeHealth {
        let groups = self.local_groups();
        NodeHealth {
            all_shards_led: self.placement.get().is_some()
                && self.meta.leader().is_some()
                && groups.iter().all(|g| g.leader().is_some()),
            storage_ok: !self.storage.is_poisoned(),
            uptime_secs: self.started.elapsed().as_secs(),
        }
    }

    /// Whether [`Node::shutdown`] has begun.
    pub fn is_stopping(&self) -> bool {
        self.stopping.load(Ordering::Acquire)
    }

    /// Stops every Raft group and the transport and makes everything written so far durable.
    pub async fn shutdown(&self) {
        self.stopping.store(true, Ordering::Release);
        for group in self.local_groups() {
            group.shutdown().await;
        }
        self.meta.shutdown().await;
        self.transport.stop();
        if let Err(e) = self.storage.sync_async().await {
            tracing::warn!(error = %e, "final sync at shutdown");
        }
    }
}

/// The initial cluster from the configuration: `--initial-cluster`, or this node alone.
fn initial_cluster(config: &NodeConfig) -> Result<Vec<(String, String)>, ClusterError> {
    if config.initial_cluster.is_empty() {
        return Ok(vec![(config.name.clone(), config.peer_addr.clone())]);
    }
    let mut seen = BTreeMap::new();
    for (name, addr) in &config.initial_cluster {
        if let Some(other) = seen.insert(NodeId::from_name(name).0, name) {
            return Err(ClusterError::Config(format!(
                "--initial-cluster names {other:?} and {name:?} collide (same node id)"
            )));
        }
        if addr.is_empty() {
            return Err(ClusterError::Config(format!(
                "--initial-cluster gives no peer address for {name:?}"
            )));
        }
    }
    if !config
        .initial_cluster
        .iter()
        .any(|(n, _)| *n == config.name)
    {
        return Err(ClusterError::Config(format!(
            "--initial-cluster does not list this node ({:?})",
            config.name
        )));
    }
    Ok(config.initial_cluster.clone())
}

/// The metadata group's first voters: up to five initial nodes, by name.
fn meta_voters(initial: &[(String, String)]) -> BTreeMap<u64, PeerNode> {
    let mut sorted: Vec<&(String, String)> = initial.iter().collect();
    sorted.sort();
    sorted
        .into_iter()
        .take(meta::META_VOTERS)
        .map(|(name, addr)| {
            (
                NodeId::from_name(name).0,
                PeerNode {
                    name: name.clone(),
                    peer_addr: addr.clone(),
                    http_addr: String::new(),
                    resp_addr: String::new(),
                },
            )
        })
        .collect()
}

/// Runs `job` on the node every `interval` (missed ticks delayed, not bunched) until the node
/// stops or is dropped. The job holds the node only while it runs.
pub(crate) fn spawn_periodic<F, Fut>(node: std::sync::Weak<Node>, interval: Duration, job: F)
where
    F: Fn(Arc<Node>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send,
{
    tokio::spawn(async move {
        let mut ticker = tokio::time::interval(interval);
        ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            ticker.tick().await;
            let Some(node) = node.upgrade() else { return };
            if node.is_stopping() {
                return;
            }
            job(node).await;
        }
    });
}

/// Follows the metadata group: reloads the directory when it changes and, on the metadata
/// leader, does the leader's jobs.
fn spawn_meta_watcher(node: std::sync::Weak<Node>) {
    tokio::spawn(async move {
        let mut seen = 0;
        loop {
            let Some(node) = node.upgrade() else { return };
            if node.is_stopping() {
                return;
            }
            let applied = node.meta.leader_and_applied().1;
            if applied != seen {
                node.refresh_directory();
                seen = applied;
            }
            node.lead_metadata().await;
            let meta = node.meta.clone();
            drop(node);
            meta.await_applied_beyond(seen, Duration::from_millis(500))
                .await;
        }
    });
}
