//! Starting, describing and stopping a node.
//!
//! Start-up, on every node, fresh or not:
//! 1. open storage and check the data directory's identity; open the peer transport;
//! 2. open the metadata group (group 0); on a fresh directory, the first five initial nodes
//!    initialize it with identical membership (openraft allows that), the rest wait to be
//!    added as learners;
//! 3. register this node's addresses and labels in the metadata group;
//! 4. wait for the cluster map: the metadata leader writes it first, create-only, when every
//!    initial node has registered, spreading each shard's voters over zones and racks;
//! 5. open the shard groups placed here, initialize them with the map's membership while it
//!    is still the bootstrap one (a no-op once initialized), and wait until each has a leader
//!    and has replayed its log.
//!
//! A node started with `--join` on a fresh data directory asks a member to admit it instead
//! (`join.rs`), then follows the metadata log as a learner; it holds no shard until the
//! rebalancer moves replicas to it. From then on every node follows the map: when a move
//! brings a replica here it opens the shard's group (empty; the leader sends a snapshot), and
//! when a replica has moved away it stops the group and deletes its data.

use crate::identity::{self, Identity};
use crate::meta::{self, ClusterMap, META_SHARD, NodeInfo, NodeRow, NodeState};
use crate::request::PutOutcome;
use crate::{ClusterError, NodeConfig};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use trireme_raft::{PeerNode, PeerTransport, ProposalMetrics, ShardGroup};
use trireme_storage::Storage;
use trireme_types::version::Version;
use trireme_types::{Command, GroupId, NodeId, PutCondition, ShardId, ShardMap, TtlUpdate};

/// How long a node waits at start for its peers, the placement, and every shard's leader.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How often a start-up wait looks whether this node has learned that it was removed, or
/// that a replica it waits for has moved away.
const START_POLL: Duration = Duration::from_millis(200);

/// A running node: its storage, its Raft groups, and the request path through them.
pub struct Node {
    pub(crate) config: NodeConfig,
    /// This node's Raft id, as the cluster map and the peer protocol hold ids.
    pub(crate) node_id: u64,
    pub(crate) me: PeerNode,
    pub(crate) storage: Arc<Storage>,
    /// What this node's groups have proposed, shared by all of them.
    proposal_metrics: Arc<ProposalMetrics>,
    /// Key → shard routing, from the cluster map this node follows (the bootstrap layout
    /// until the map arrives); replaced whole when a split changes it.
    routing: RwLock<Arc<ShardMap>>,
    /// The shard count the cluster was bootstrapped with.
    pub(crate) bootstrap_shards: u32,
    pub(crate) transport: PeerTransport,
    pub(crate) meta: ShardGroup,
    /// This node's replica of each shard, by shard index; `None` where it holds none.
    groups: RwLock<Vec<Option<ShardGroup>>>,
    /// The cluster map as this node's copy of the metadata group last applied it.
    cluster_map: RwLock<Option<Arc<ClusterMap>>>,
    /// Every registered node, by id, as read from the metadata group.
    directory: RwLock<BTreeMap<u64, NodeInfo>>,
    /// What each registered node runs, as its row says (builds from before protocol 2 did
    /// not record it).
    registered_versions: RwLock<BTreeMap<u64, Version>>,
    /// Redis blocking pops waiting on this node, in their order per key.
    pub(crate) pop_queues: crate::pop_queue::PopQueues,
    /// The metadata voters a member named when this node joined, to reach the metadata group
    /// until this node's own copy of it arrives.
    meta_voters_hint: Vec<u64>,
    /// Per shard, the highest applied index of a replica elsewhere that answered a stale
    /// read through this node: an answer from one further behind is not passed on. Kept in
    /// memory only (a restarted node starts without floors).
    pub(crate) stale_floors: std::sync::Mutex<std::collections::HashMap<ShardId, u64>>,
    pub(crate) cluster_created_ms: u64,
    started: Instant,
    stopping: AtomicBool,
    /// Set once this node learns that it was removed from the cluster.
    removed: tokio::sync::watch::Sender<bool>,
    /// Bumped at every change of the cluster map here: requests refused because a split moved
    /// their keys wait on it before they are routed again.
    map_changed: tokio::sync::watch::Sender<u64>,
    /// One reconciliation of local groups with the map at a time.
    reconciling: tokio::sync::Mutex<()>,
    /// The metadata leader's memory between rounds (see `rebalance.rs`).
    pub(crate) rebalance: std::sync::Mutex<crate::rebalance::LeaderMemory>,
    /// Counts of shard bytes by slot for split points, as a shard leader (see
    /// `membership.rs`).
    pub(crate) split_counts:
        std::sync::Mutex<std::collections::HashMap<u32, crate::membership::SplitCount>>,
    /// Counters of moves and splits, for `/metrics`.
    pub(crate) elastic_metrics: crate::rebalance::ElasticMetrics,
    /// Where published messages go on this node (the RESP front end's subscribers).
    pub(crate) message_sink: RwLock<Option<Arc<dyn crate::pubsub::MessageSink>>>,
    /// ACL configuration and the cache tokens resolve through.
    pub(crate) acl: crate::acl::Acl,
    /// The document search index of each shard replica here.
    pub(crate) search: Arc<trireme_search::SearchIndexes>,
    /// Whole-collection reads served here, held open between pages.
    pub(crate) open_reads: Arc<crate::whole_read::OpenReads>,
    /// Records of finished transactions across shards, to delete in the background.
    pub(crate) txn_forgets: crate::txn::Forgets,
    /// Decided transactions across shards whose intents are still to be resolved.
    pub(crate) txn_resolutions: crate::txn::Resolutions,
    /// Changes to shard placement this node applied, for the console.
    pub(crate) history: crate::history::ShardHistory,
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
    /// The learners: asynchronous replicas in the regions other than the home region.
    pub learners: Vec<PeerNode>,
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
        let storage = Storage::open(&config.data_dir, &config.storage)?;
        let stored = identity::check(&storage, &config)?;
        // Before any group applies: the indexes follow every applied change.
        let search = trireme_search::SearchIndexes::start(
            &config.data_dir.join("search"),
            storage.clone(),
            config.search_commit_interval,
        )?;
        let node_id = NodeId::from_name(&config.name);
        let me = PeerNode {
            name: config.name.clone(),
            peer_addr: config.peer_addr.clone(),
            http_addr: config.http_addr.clone(),
            resp_addr: config.resp_addr.clone(),
        };
        let joining = stored.is_none() && config.join.is_some();
        let initial = match stored.as_ref().filter(|i| !i.initial_cluster.is_empty()) {
            Some(identity) => identity.initial_cluster.clone(),
            None if joining || stored.is_some() => Vec::new(),
            None => initial_cluster(&config)?,
        };

        let transport = PeerTransport::new(&config.name, config.cluster_name.clone())
            .with_snapshot_chunk_bytes(config.timing.snapshot_chunk_bytes as usize)
            .with_snapshot_rate(config.timing.snapshot_rate_bytes_per_sec)
            .with_tls(config.peer_tls.clone())
            .with_intake_gate(intake_gate(&storage));
        for (name, addr) in &initial {
            transport.set_peer_addr(NodeId::from_name(name), addr);
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

        let mut meta_voters_hint = Vec::new();
        let identity = match stored {
            Some(identity) => identity,
            None => {
                let (shards, created_ms) = match &config.join {
                    Some(member) => {
                        let info = NodeInfo {
                            node: me.clone(),
                            rack: config.rack.clone(),
                            zone: config.zone.clone(),
                            region: config.region.clone(),
                        };
                        let answer = crate::join::ask(&config, info, member).await?;
                        for (id, addr) in &answer.peers {
                            transport.set_peer_addr(NodeId(*id), addr);
                        }
                        meta_voters_hint = answer.meta_voters.clone();
                        tracing::info!(node = %config.name, via = %member, shards = answer.shards, "joined the cluster");
                        (answer.shards, answer.created_ms)
                    }
                    None => {
                        crate::join::refuse_if_cluster_exists(&config, &initial).await?;
                        let shards = config.shards.unwrap_or(16);
                        let voters = meta_voters(&initial);
                        if voters.contains_key(&node_id) {
                            tracing::info!(node = %config.name, nodes = initial.len(), shards, "bootstrapping the cluster");
                            meta.initialize(voters).await?;
                        }
                        (shards, crate::now_ms())
                    }
                };
                let identity = Identity {
                    cluster_name: config.cluster_name.clone(),
                    node_name: config.name.clone(),
                    shards,
                    created_ms,
                    initial_cluster: initial.clone(),
                    removed: false,
                };
                identity::record(&storage, &identity).await?;
                identity
            }
        };
        if meta_voters_hint.is_empty() {
            // A node of the initial cluster beyond the metadata voters reaches the group
            // through them until it is a learner. (A node that joined stores no initial
            // cluster: it is a learner from its join on.)
            meta_voters_hint = meta_voters(&identity.initial_cluster)
                .keys()
                .map(|id| id.0)
                .collect();
        }
        let map = ShardMap::new(identity.shards).ok_or_else(|| {
            ClusterError::Config(format!(
                "shard count must be 1..=16384, got {}",
                identity.shards
            ))
        })?;
        // A node removed while it was down is no longer replicated to: its peers refuse its
        // links or tell it so. It stops then, instead of waiting out START_TIMEOUT for a
        // metadata commit that never comes.
        // A node of the initial cluster beyond the metadata voters has no metadata state to
        // recover until it is a learner: it registers through a voter below, and the leader
        // then adds it as one.
        let recovering = async {
            if meta.is_initialized().await? {
                meta.wait_recovered(START_TIMEOUT).await
            } else {
                Ok(())
            }
        };
        match unless_told_removed(&transport, recovering).await {
            Some(recovered) => recovered?,
            None => {
                tracing::error!(node = %config.name, "{}", removed_message(&config));
                record_removed(&storage, &config).await;
                return Err(ClusterError::Removed(removed_message(&config)));
            }
        }

        let (removed, _) = tokio::sync::watch::channel(false);
        let acl = crate::acl::Acl::new(config.acl.clone());
        let node = Arc::new(Node {
            groups: RwLock::new(vec![None; identity.shards as usize]),
            routing: RwLock::new(Arc::new(map)),
            bootstrap_shards: identity.shards,
            cluster_map: RwLock::new(None),
            directory: RwLock::new(BTreeMap::new()),
            registered_versions: RwLock::new(BTreeMap::new()),
            pop_queues: crate::pop_queue::PopQueues::default(),
            meta_voters_hint,
            stale_floors: std::sync::Mutex::default(),
            config,
            node_id: node_id.0,
            me,
            storage,
            proposal_metrics,
            transport,
            meta,
            cluster_created_ms: identity.created_ms,
            started: Instant::now(),
            stopping: AtomicBool::new(false),
            removed,
            map_changed: tokio::sync::watch::channel(0).0,
            reconciling: tokio::sync::Mutex::new(()),
            rebalance: std::sync::Mutex::default(),
            split_counts: std::sync::Mutex::default(),
            elastic_metrics: crate::rebalance::ElasticMetrics::default(),
            message_sink: RwLock::new(None),
            acl,
            search,
            open_reads: Arc::default(),
            txn_forgets: crate::txn::Forgets::default(),
            txn_resolutions: crate::txn::Resolutions::default(),
            history: crate::history::ShardHistory::default(),
        });
        node.transport
            .set_forward_handler(crate::forward::handler(&node));
        node.transport
            .set_admin_handler(crate::membership::handler(&node));
        node.transport.set_join_handler(crate::join::handler(&node));
        // Reconciliation (opening and closing groups as the map changes) waits until start-up
        // has opened the groups it found: one group must never be opened twice.
        let starting = node.reconciling.lock().await;
        node.refresh_directory();
        node.refresh_map();
        node.refresh_acl();
        spawn_meta_watcher(Arc::downgrade(&node));
        crate::rebalance::spawn(&node);

        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        node.register().await?;
        let cluster_map = node.await_map(deadline).await?;
        if cluster_map.state(node.node_id) == Some(NodeState::Removed) {
            node.mark_removed().await;
            return Err(ClusterError::Removed(removed_message(&node.config)));
        }
        let voting = node.open_shards(&cluster_map).await?;
        // Every group found at start is open: reconciliation may run from here on, and must,
        // while this node waits for its replicas to recover. It opens the replicas that moves
        // bring here meanwhile (a move to this node would otherwise wait for them), and
        // deletes those that moved away.
        drop(starting);
        node.spawn_reconcile();
        node.await_recovered(voting).await?;
        crate::expiry::spawn_reaper(&node);
        crate::session::spawn_session_reaper(&node);
        crate::txn::spawn_resolver(&node);
        crate::txn::spawn_forgetter(&node);
        crate::txn::spawn_resolutions(&node);
        crate::whole_read::spawn_sweeper(&node);
        crate::acl::spawn_initial_token(&node);
        if node.config.balance_leaders {
            crate::balance::spawn_balancer(&node);
        }
        node.spawn_reconcile();
        Ok(node)
    }

    /// Writes this node's row in the metadata group (addresses change across restarts, and
    /// the build with an upgrade).
    async fn register(&self) -> Result<(), ClusterError> {
        let row = NodeRow {
            info: NodeInfo {
                node: self.me.clone(),
                rack: self.config.rack.clone(),
                zone: self.config.zone.clone(),
                region: None,
            },
            region: self.config.region.clone(),
            version: Some(self.transport.own_version()),
        };
        let value = serde_json::to_vec(&row).map_err(|e| ClusterError::Config(e.to_string()))?;
        let put = Command::Put {
            key: Bytes::from(meta::node_key(&self.me.name)),
            value: Bytes::from(value),
            flags: None,
            condition: PutCondition::Always,
            ttl: TtlUpdate::Clear,
            return_previous: false,
        };
        self.write_meta(put).await.map(|_| ())
    }

    pub(crate) async fn write_meta(&self, command: Command) -> Result<PutOutcome, ClusterError> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        loop {
            match self.write_shard(META_SHARD, command.clone()).await {
                Ok(outcome) => return Ok(outcome),
                // Removed: the metadata group refuses this node for good.
                Err(_) if self.transport.told_removed() || self.is_removed() => {
                    self.mark_removed().await;
                    return Err(ClusterError::Removed(removed_message(&self.config)));
                }
                Err(e) if tokio::time::Instant::now() < deadline => {
                    tracing::info!(error = %e, "metadata group not ready yet; retrying");
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Waits until the cluster map is applied here (the metadata leader writes it first when
    /// every initial node has registered; a joining node receives it as a metadata learner).
    async fn await_map(
        &self,
        deadline: tokio::time::Instant,
    ) -> Result<Arc<ClusterMap>, ClusterError> {
        loop {
            self.refresh_map();
            if let Some(map) = self.cluster_map() {
                // Once a shard has split the count grows; before, it must match.
                if map.slots.is_empty() && map.shard_count() != self.bootstrap_shards {
                    return Err(ClusterError::Config(format!(
                        "the cluster was bootstrapped with {} shards, this node with {}",
                        map.replicas.len(),
                        self.bootstrap_shards
                    )));
                }
                return Ok(map);
            }
            if self.transport.told_removed() || self.is_removed() {
                self.mark_removed().await;
                return Err(ClusterError::Removed(removed_message(&self.config)));
            }
            if tokio::time::Instant::now() >= deadline {
                let missing: Vec<String> = self.unregistered().collect();
                return Err(ClusterError::Config(if missing.is_empty() {
                    format!(
                        "no cluster map after {START_TIMEOUT:?}; is the metadata group reachable?"
                    )
                } else {
                    format!(
                        "no shard placement after {START_TIMEOUT:?}; waiting for nodes {missing:?} to join"
                    )
                }));
            }
            let applied = self.meta.leader_and_applied().1;
            self.meta
                .await_applied_beyond(applied, Duration::from_millis(500))
                .await;
        }
    }

    /// Reads the cluster map from this node's copy of the metadata group, with the modify
    /// index of its row (for a compare-and-set).
    pub(crate) fn read_map_row(&self) -> Result<Option<(ClusterMap, u64)>, ClusterError> {
        let Some(record) = self
            .storage
            .get(META_SHARD, meta::PLACEMENT_KEY, crate::now_ms())?
        else {
            return Ok(None);
        };
        serde_json::from_slice(&record.value)
            .map(|map| Some((map, record.modify_index)))
            .map_err(|e| ClusterError::Internal(format!("unreadable cluster map: {e}")))
    }

    /// Reloads the cluster map from this node's copy of the metadata group; returns whether
    /// it changed. Tells the transport which nodes are removed, and notices this node's own
    /// removal.
    fn refresh_map(&self) -> bool {
        let map = match self.read_map_row() {
            Ok(Some((map, _))) => map,
            Ok(None) => return false,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the cluster map");
                return false;
            }
        };
        let mut current = self
            .cluster_map
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Read outside the lock, so another thread may have written a newer map meanwhile:
        // every change bumps the epoch, and a node never goes back to an older one.
        if current
            .as_ref()
            .is_some_and(|c| **c == map || c.epoch > map.epoch)
        {
            return false;
        }
        self.transport
            .set_removed(map.nodes_in(NodeState::Removed).into_iter().map(NodeId));
        self.transport.set_cluster_version(map.cluster_version);
        let own = self.transport.own_version();
        if own.protocol < map.cluster_version {
            tracing::error!(
                cluster_version = map.cluster_version,
                "this node runs {own}, older than the cluster version {}: its peers refuse it; start it with a build of protocol {} or later",
                map.cluster_version,
                map.cluster_version
            );
        }
        match map.shard_map() {
            Some(routing) => {
                *self
                    .routing
                    .write()
                    .unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(routing);
            }
            None => tracing::error!(
                epoch = map.epoch,
                "the cluster map's slot ranges do not cover every slot once; routing unchanged"
            ),
        }
        let map = Arc::new(map);
        *current = Some(map.clone());
        // Names are looked up through the map just written: release it first. The history
        // keeps its own last map, so two threads applying maps here are recorded in epoch
        // order whichever gets there first.
        drop(current);
        self.history.record(&map, |id| {
            self.node_info(NodeId(id))
                .map_or_else(|| format!("{id:016x}"), |n| n.name)
        });
        self.map_changed.send_modify(|epoch| *epoch += 1);
        true
    }

    /// The changes to `shard`'s placement this node has applied since it started, oldest
    /// first (a bounded history, kept in memory only).
    pub fn shard_history(&self, shard: ShardId) -> Vec<crate::ShardEvent> {
        self.history.of_shard(shard.0)
    }

    /// Key → shard routing as this node knows it now.
    pub fn shard_map(&self) -> Arc<ShardMap> {
        self.routing
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Waits until this node's cluster map changes, at most `wait`; whether it did.
    pub(crate) async fn map_change(&self, seen: u64, wait: Duration) -> bool {
        let mut changes = self.map_changed.subscribe();
        tokio::time::timeout(wait, changes.wait_for(|epoch| *epoch != seen))
            .await
            .is_ok_and(|r| r.is_ok())
    }

    /// How many times this node's map has changed since start (see [`Node::map_change`]).
    pub(crate) fn map_version(&self) -> u64 {
        *self.map_changed.borrow()
    }

    /// The cluster map as this node last applied it.
    pub(crate) fn cluster_map(&self) -> Option<Arc<ClusterMap>> {
        self.cluster_map
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The cluster version as this node's map has it (0 before it has one): the replicated
    /// features of protocols up to it may be used (see [`trireme_types::version::since`]).
    pub fn cluster_version(&self) -> u32 {
        self.cluster_map().map_or(0, |m| m.cluster_version)
    }

    /// Refuses a feature that needs cluster version `needed` while the cluster is below it,
    /// naming `what` and both versions.
    pub fn require_cluster_version(&self, needed: u32, what: &str) -> Result<(), ClusterError> {
        let current = self.cluster_version();
        if current >= needed {
            return Ok(());
        }
        Err(crate::membership::refused(
            trireme_types::ErrorCode::Conflict,
            format!(
                "{what} needs cluster version {needed}; this cluster is at {current} until every node runs a build of protocol {needed} or later and the upgrade is finalized (see trireme cluster status)"
            ),
        ))
    }

    /// What node `id` runs, and its name: its live link's announcement, else its row's.
    pub(crate) fn version_of(&self, id: u64) -> (String, Option<Version>) {
        let name = self
            .directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id)
            .map(|info| info.node.name.clone())
            .or_else(|| {
                self.cluster_map()
                    .and_then(|m| m.members.get(&id).map(|n| n.name.clone()))
            })
            .unwrap_or_else(|| format!("{id:016x}"));
        let version = self.transport.peer_version(NodeId(id)).or_else(|| {
            self.registered_versions
                .read()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .get(&id)
                .cloned()
        });
        (name, version)
    }

    /// The version of the cluster map this node follows (0 before it has one); clients
    /// compare it to tell that shards moved.
    pub fn cluster_epoch(&self) -> u64 {
        self.cluster_map().map_or(0, |m| m.epoch)
    }

    /// Records, durably, that this node was removed from the cluster, and tells whoever waits
    /// on [`Node::wait_removed`]. Its data directory is refused from then on.
    pub(crate) async fn mark_removed(&self) {
        if *self.removed.borrow() {
            return;
        }
        tracing::error!(node = %self.config.name, "{}", removed_message(&self.config));
        record_removed(&self.storage, &self.config).await;
        self.removed.send_replace(true);
    }

    /// Resolves once this node has learned that it was removed from the cluster (an operator
    /// decommissioned it, or removed it for dead while it was away); the server then stops.
    pub async fn wait_removed(&self) {
        let mut removed = self.removed.subscribe();
        let _ = removed.wait_for(|r| *r).await;
    }

    /// Whether this node has learned that it was removed from the cluster.
    pub fn is_removed(&self) -> bool {
        *self.removed.borrow()
    }

    /// Initial nodes that have not registered yet.
    fn unregistered(&self) -> impl Iterator<Item = String> + use<> {
        let directory = self
            .directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        self.initial_nodes()
            .into_iter()
            .filter(move |(name, _)| !directory.contains_key(&NodeId::from_name(name).0))
            .map(|(name, _)| name)
    }

    /// The nodes the cluster was bootstrapped with (empty on a node that joined later).
    pub(crate) fn initial_nodes(&self) -> Vec<(String, String)> {
        match identity::check(&self.storage, &self.config) {
            Ok(Some(identity)) => identity.initial_cluster,
            _ => Vec::new(),
        }
    }

    /// Opens, at start, every shard group the map places here or a move brings here, and any
    /// replica left on disk (reconciliation deletes those the map no longer wants); returns
    /// the voting ones, for [`Node::await_recovered`].
    async fn open_shards(&self, map: &ClusterMap) -> Result<Vec<ShardGroup>, ClusterError> {
        let mut voting = Vec::new();
        for shard in (0..map.shard_count()).map(ShardId) {
            let on_disk = self.storage.has_group_state(GroupId::of_shard(shard))?;
            if !map.should_open(shard, self.node_id) && !on_disk {
                continue;
            }
            if !on_disk && self.split_not_applied_here(shard, map)? {
                // Its parent replays the split first; reconciliation opens it then.
                continue;
            }
            let group = self.open_shard(shard, map).await?;
            if map.hosts(shard, self.node_id) {
                voting.push(group);
            }
        }
        Ok(voting)
    }

    /// Waits until each voting replica opened at start has a leader and has replayed what
    /// its group committed before the restart. A replica the map no longer places here is
    /// not waited for: its move finished while this node was down or starting, so its group
    /// no longer replicates to it (reconciliation deletes it). Gives up at once when this
    /// node learns that it was removed from the cluster.
    async fn await_recovered(&self, voting: Vec<ShardGroup>) -> Result<(), ClusterError> {
        let deadline = tokio::time::Instant::now() + START_TIMEOUT;
        for group in voting {
            let shard = group.shard();
            // One wait for the whole budget (its target is fixed when the cluster's commit
            // first covers this replica's log), looked at every START_POLL for a removal or
            // a move away, either of which ends it.
            let remaining = deadline.saturating_duration_since(tokio::time::Instant::now());
            let recovered = group.wait_recovered(remaining);
            tokio::pin!(recovered);
            loop {
                let outcome = tokio::select! {
                    outcome = &mut recovered => Some(outcome),
                    () = tokio::time::sleep(START_POLL) => None,
                };
                if self.transport.told_removed() || self.is_removed() {
                    self.mark_removed().await;
                    return Err(ClusterError::Removed(removed_message(&self.config)));
                }
                if !self
                    .cluster_map()
                    .is_some_and(|m| m.hosts(shard, self.node_id))
                {
                    tracing::info!(
                        shard = shard.0,
                        "this replica moved away while the node was down; not waiting for it"
                    );
                    break;
                }
                match outcome {
                    None => {}
                    Some(Ok(())) => break,
                    Some(Err(e)) => {
                        return Err(ClusterError::Config(format!(
                            "shard {shard} did not recover within {START_TIMEOUT:?}: {e}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    /// Opens this node's replica of `shard`. Only a voter of the bootstrap membership
    /// initializes the group itself; a replica a move brings here starts empty and learns the
    /// membership, a snapshot and the log from the leader.
    async fn open_shard(
        &self,
        shard: ShardId,
        map: &ClusterMap,
    ) -> Result<ShardGroup, ClusterError> {
        // Its index is checked against the rows the group starts from, before it replays
        // its log (which the index then follows).
        self.search.open_shard(shard);
        let group = ShardGroup::open(
            self.storage.clone(),
            GroupId::of_shard(shard),
            shard,
            NodeId(self.node_id),
            &self.config.timing,
            &self.transport,
            self.proposal_metrics.clone(),
        )
        .await?;
        if map.is_bootstrap_membership(shard) && map.hosts(shard, self.node_id) {
            group.initialize(map.membership(shard)).await?;
        }
        {
            let mut groups = self
                .groups
                .write()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if groups.len() <= shard.0 as usize {
                groups.resize(shard.0 as usize + 1, None);
            }
            groups[shard.0 as usize] = Some(group.clone());
        }
        Ok(group)
    }

    /// Whether `shard` was made by a split that this node's replica of the parent has not
    /// applied yet. Such a replica will apply it and write the new shard's first state here;
    /// the new shard's group must not be opened (empty) before that, or the two would meet.
    fn split_not_applied_here(
        &self,
        shard: ShardId,
        map: &ClusterMap,
    ) -> Result<bool, ClusterError> {
        let Some(&(parent, at_slot)) = map.origins.get(&shard.0) else {
            return Ok(false);
        };
        if !self
            .storage
            .has_group_state(GroupId::of_shard(ShardId(parent)))?
        {
            return Ok(false);
        }
        let end = self
            .owned_slots(ShardId(parent))?
            .map_or(u16::MAX, |(_, end)| end);
        Ok(end >= at_slot)
    }

    /// Runs [`Node::reconcile`] in the background.
    fn spawn_reconcile(self: &Arc<Self>) {
        let node = self.clone();
        tokio::spawn(async move { node.reconcile().await });
    }

    /// Brings this node's shard groups in line with the map: opens the groups a move brings
    /// here; stops and deletes the replicas that have moved away. A replica's data is deleted
    /// only when the metadata leader's current map (read through a quorum, not this node's
    /// copy, which may lag) confirms it has gone.
    async fn reconcile(self: Arc<Self>) {
        let _one_at_a_time = self.reconciling.lock().await;
        if self.is_stopping() {
            return;
        }
        let Some(map) = self.cluster_map() else {
            return;
        };
        let mut confirmed: Option<Option<ClusterMap>> = None;
        let mut deferred = false;
        for shard in (0..map.shard_count()).map(ShardId) {
            let want = map.should_open(shard, self.node_id);
            match (want, self.group(shard)) {
                (true, None) if self.split_not_applied_here(shard, &map).unwrap_or(true) => {
                    deferred = true;
                }
                (true, None) => match self.open_shard(shard, &map).await {
                    Ok(group) if map.origins.contains_key(&shard.0) => {
                        tracing::info!(shard = shard.0, "opened a shard made by a split");
                        // Its preferred leader stands at once: its keys wait for a leader.
                        let preferred = map.replicas.get(shard.0 as usize).and_then(|r| r.first());
                        if preferred == Some(&self.node_id)
                            && group.leader().is_none()
                            && let Err(e) = group.campaign().await
                        {
                            tracing::info!(shard = shard.0, error = %e, "cannot stand for election");
                        }
                    }
                    Ok(_) => tracing::info!(shard = shard.0, "opened a replica moving here"),
                    Err(e) => {
                        // Tried again shortly: a move to this node waits for this replica,
                        // and the map may not change again to wake reconciliation.
                        tracing::warn!(shard = shard.0, error = %e, "cannot open a replica");
                        deferred = true;
                    }
                },
                (false, Some(group)) => {
                    if group.is_leader() {
                        continue;
                    }
                    if confirmed.is_none() {
                        confirmed = Some(self.read_map_through_leader().await.ok());
                    }
                    let gone = confirmed
                        .as_ref()
                        .and_then(|m| m.as_ref())
                        .is_some_and(|m| !m.should_open(shard, self.node_id));
                    if !gone {
                        continue;
                    }
                    self.groups
                        .write()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        [shard.0 as usize] = None;
                    match group.destroy().await {
                        Ok(rows) => tracing::info!(
                            shard = shard.0,
                            rows,
                            "a replica moved away; deleted its data here"
                        ),
                        Err(e) => {
                            tracing::warn!(shard = shard.0, error = %e, "cannot delete a moved replica's data")
                        }
                    }
                }
                _ => {}
            }
        }
        if deferred {
            // A split not applied here yet: look again shortly.
            let node = self.clone();
            tokio::spawn(async move {
                tokio::time::sleep(Duration::from_millis(200)).await;
                if !node.is_stopping() {
                    node.spawn_reconcile();
                }
            });
        }
    }

    /// The cluster map as the metadata leader has it now (a consistent read), with its row's
    /// modify index.
    pub(crate) async fn read_map_with_index(&self) -> Result<(ClusterMap, u64), ClusterError> {
        let read = crate::forward::Read::whole(
            trireme_raft::ReadMode::Consistent,
            crate::forward::GetKeys(vec![Bytes::from_static(meta::PLACEMENT_KEY)]),
        );
        let (mut found, _) = self.on_shard(META_SHARD, read).await?;
        let record = found.pop().flatten();
        let record =
            record.ok_or_else(|| ClusterError::Internal("the cluster has no map yet".into()))?;
        let map = serde_json::from_slice(&record.value)
            .map_err(|e| ClusterError::Internal(format!("unreadable cluster map: {e}")))?;
        Ok((map, record.modify_index))
    }

    /// [`Node::read_map_with_index`] without the index.
    pub(crate) async fn read_map_through_leader(&self) -> Result<ClusterMap, ClusterError> {
        Ok(self.read_map_with_index().await?.0)
    }

    /// Reloads the node rows of the metadata group into the directory and the transport.
    fn refresh_directory(&self) {
        let rows = match self.storage.scan(
            META_SHARD,
            meta::NODE_PREFIX,
            None,
            100_000,
            crate::now_ms(),
            None,
        ) {
            Ok(rows) => rows,
            Err(e) => {
                tracing::warn!(error = %e, "cannot read the node directory");
                return;
            }
        };
        let mut directory = BTreeMap::new();
        let mut versions = BTreeMap::new();
        for (key, record) in rows {
            match serde_json::from_slice::<NodeRow>(&record.value) {
                Ok(NodeRow {
                    mut info,
                    region,
                    version,
                }) => {
                    info.region = region;
                    self.transport
                        .set_peer_addr(NodeId(info.id()), &info.node.peer_addr);
                    if let Some(version) = version {
                        versions.insert(info.id(), version);
                    }
                    directory.insert(info.id(), info);
                }
                Err(e) => tracing::warn!(key = ?key, error = %e, "unreadable node row"),
            }
        }
        *self
            .directory
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = directory;
        *self
            .registered_versions
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = versions;
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
    pub fn node_id(&self) -> NodeId {
        NodeId(self.node_id)
    }

    /// The node's storage (metrics, tests).
    pub fn storage(&self) -> &Arc<Storage> {
        &self.storage
    }

    /// The search indexes of the shard replicas here (metrics).
    pub fn search_indexes(&self) -> &Arc<trireme_search::SearchIndexes> {
        &self.search
    }

    /// Moves this node has planned, completed and given up as metadata leader (metrics).
    pub fn elastic_metrics(&self) -> &crate::ElasticMetrics {
        &self.elastic_metrics
    }

    /// Snapshot bytes this node has sent to and received from peers (metrics): what replica
    /// moves and lagging followers cost in transfer.
    pub fn snapshot_bytes(&self) -> (u64, u64) {
        self.transport.snapshot_bytes()
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

    /// Whether this node's replica of `shard` may answer `stale` reads: a voter's may; a
    /// replica a move is still bringing here may hold nothing yet.
    /// A replica of a shard made by a split holds nothing until its first state arrives
    /// (seeded by its parent, or sent by its leader). Asked by [`Node::may_serve`], which
    /// also keeps a replica that has not re-applied its log since a restart from serving.
    fn serves_stale(&self, shard: ShardId) -> bool {
        if shard == META_SHARD {
            return true;
        }
        let Some(map) = self.cluster_map() else {
            return false;
        };
        (map.hosts(shard, self.node_id) || map.is_learner(shard, self.node_id))
            && self.owned_slots(shard).ok().flatten().is_some()
    }

    /// Whether this node's replica `group` of `shard` may answer a request: the leader
    /// always, any replica a stale read ([`Node::serves_stale`]); but no stale read before
    /// the replica has re-applied what its group committed before it opened, not even as
    /// the leader (a default read waits for that through its lease or ReadIndex), nor by a
    /// follower while its disk is nearly full.
    pub(crate) fn may_serve(&self, shard: ShardId, group: &ShardGroup, any_replica: bool) -> bool {
        if !any_replica {
            return group.is_leader();
        }
        if shard != META_SHARD && !group.has_recovered() {
            return false;
        }
        // A follower whose disk is nearly full takes no entries: it falls further behind
        // than its last contact with the leader says.
        if shard != META_SHARD && !group.is_leader() && self.storage.check_disk_space().is_err() {
            return false;
        }
        group.is_leader() || self.serves_stale(shard)
    }

    /// Calls `f` with every shard replica on this node, under the read lock of the list and
    /// without copying it (for readers that run often; `f` must not take the lock again).
    pub(crate) fn for_each_group(&self, mut f: impl FnMut(&ShardGroup)) {
        let groups = self
            .groups
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for group in groups.iter().flatten() {
            f(group);
        }
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
            let voters: Vec<u64> = self.meta.status().voters.iter().map(|v| v.0).collect();
            return if voters.is_empty() {
                self.meta_voters_hint.clone()
            } else {
                voters
            };
        }
        self.cluster_map()
            .and_then(|m| m.replicas.get(shard.0 as usize).cloned())
            .unwrap_or_default()
    }

    /// The learners of `shard` the map places (none for the metadata group here: its
    /// learners are every node beyond its voters).
    pub(crate) fn learners_of(&self, shard: ShardId) -> Vec<u64> {
        self.cluster_map()
            .map(|m| m.learners_of(shard).to_vec())
            .unwrap_or_default()
    }

    /// Name and current addresses of node `id`.
    pub fn node_info(&self, id: NodeId) -> Option<PeerNode> {
        if id.0 == self.node_id {
            return Some(self.me.clone());
        }
        if let Some(info) = self
            .directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id.0)
        {
            return Some(info.node.clone());
        }
        self.cluster_map()
            .and_then(|m| m.members.get(&id.0).cloned())
    }

    /// Every registered node by id.
    /// Node `id`'s region label, as its row in the metadata group says (this node's own from
    /// its configuration).
    pub fn region_of(&self, id: NodeId) -> Option<String> {
        if id.0 == self.node_id {
            return self.config.region.clone();
        }
        self.directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&id.0)
            .and_then(|info| info.region.clone())
    }

    /// This node's datacenter, in Consul's terms: its region, or without one the cluster's
    /// name.
    pub fn datacenter(&self) -> String {
        self.config
            .region
            .clone()
            .unwrap_or_else(|| self.config.cluster_name.clone())
    }

    /// Every region the cluster's nodes are in (a node without a region label counts as the
    /// cluster's name, as [`Node::datacenter`] says), this node's own first, then by name.
    pub fn datacenters(&self) -> Vec<String> {
        let own = self.datacenter();
        let others: BTreeSet<String> = self
            .nodes()
            .into_iter()
            .map(|n| n.region.unwrap_or_else(|| self.config.cluster_name.clone()))
            .filter(|dc| *dc != own)
            .collect();
        std::iter::once(own).chain(others).collect()
    }

    pub(crate) fn directory_snapshot(&self) -> BTreeMap<u64, NodeInfo> {
        self.directory
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// The metadata leader's memory between rounds.
    pub(crate) fn leader_memory(
        &self,
    ) -> std::sync::MutexGuard<'_, crate::rebalance::LeaderMemory> {
        self.rebalance
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
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

    /// The advertised HTTP addresses of the nodes that are not removed (joining, active or
    /// draining), this node's own first: where the web console's pages may come from.
    pub fn member_http_addrs(&self) -> Vec<String> {
        let map = self.cluster_map();
        let removed = |id: u64| {
            map.as_ref()
                .is_some_and(|m| m.state(id) == Some(NodeState::Removed))
        };
        let mut out = vec![self.me().http_addr.clone()];
        for info in self.nodes() {
            if !removed(info.id()) && !out.contains(&info.node.http_addr) {
                out.push(info.node.http_addr);
            }
        }
        out.retain(|addr| !addr.is_empty());
        out
    }

    /// Whether the node has a link up to `id` (itself counts as linked).
    pub fn is_linked(&self, id: NodeId) -> bool {
        id.0 == self.node_id || self.transport.is_linked(id)
    }

    /// The build and protocol node `id` announced when it linked with this node (this
    /// node's own for itself); `None` while there is no link.
    pub fn node_version(&self, id: NodeId) -> Option<trireme_types::version::Version> {
        self.transport.peer_version(id)
    }

    /// Every shard as this node sees it.
    pub fn shards(&self) -> Vec<ShardInfo> {
        let routing = self.shard_map();
        routing
            .shards()
            .map(|shard| {
                let slots = routing.slots_of(shard);
                let replicas: Vec<PeerNode> = self
                    .replicas_of(shard)
                    .into_iter()
                    .filter_map(|id| self.node_info(NodeId(id)))
                    .collect();
                let learners: Vec<PeerNode> = self
                    .learners_of(shard)
                    .into_iter()
                    .filter_map(|id| self.node_info(NodeId(id)))
                    .collect();
                let mut info = ShardInfo {
                    shard,
                    slots: (*slots.start(), *slots.end()),
                    leader: None,
                    replicas,
                    learners,
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
        let map = self.cluster_map();
        let voting = self.local_groups().into_iter().filter(|g| {
            map.as_ref()
                .is_some_and(|m| m.hosts(g.shard(), self.node_id))
        });
        NodeHealth {
            all_shards_led: map.is_some()
                && self.meta.leader().is_some()
                && voting.into_iter().all(|g| g.leader().is_some()),
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
        let search = self.search.clone();
        let _ = tokio::task::spawn_blocking(move || search.stop()).await;
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
        if let Some(other) = seen.insert(NodeId::from_name(name), name) {
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

/// Runs the start-up wait `wait`, but gives up (`None`) as soon as a peer has said that this
/// node was removed from the cluster (it refused this node's link, or told it so).
async fn unless_told_removed<T>(
    transport: &PeerTransport,
    wait: impl std::future::Future<Output = T>,
) -> Option<T> {
    tokio::pin!(wait);
    loop {
        if transport.told_removed() {
            return None;
        }
        tokio::select! {
            out = &mut wait => return Some(out),
            () = tokio::time::sleep(START_POLL) => {}
        }
    }
}

/// Records, durably, that this node was removed: its data directory is refused from then on.
/// Refuses a shard group's entries and snapshots while this node's disk is below its
/// reserve, as a write it would lead is refused (see [`Storage::check_disk_space`]): it falls
/// behind rather than fail on a full disk, and catches up once space is freed. The metadata
/// group's entries are small and still taken, as its writes are.
fn intake_gate(storage: &Arc<Storage>) -> trireme_raft::IntakeGate {
    let storage = Arc::downgrade(storage);
    Arc::new(move |group, incoming| {
        if group == GroupId::META.0 {
            return Ok(());
        }
        match storage.upgrade() {
            Some(storage) => storage
                .check_disk_room(incoming)
                .map_err(|full| full.to_string()),
            None => Ok(()),
        }
    })
}

async fn record_removed(storage: &Storage, config: &NodeConfig) {
    match identity::check(storage, config) {
        Ok(Some(mut identity)) => {
            identity.removed = true;
            if let Err(e) = identity::record(storage, &identity).await {
                tracing::warn!(error = %e, "cannot record the removal in the data directory");
            }
        }
        // Recorded already (the identity check refuses a removed directory), or never made.
        Ok(None) | Err(ClusterError::Removed(_)) => {}
        Err(e) => tracing::warn!(error = %e, "cannot read the identity"),
    }
}

/// What a removed node says when it stops or is started again.
pub(crate) fn removed_message(config: &NodeConfig) -> String {
    format!(
        "node {:?} was removed from cluster {:?}: it no longer serves, and its data directory {} cannot be used again. To add capacity, start a node with a new --node-id and an empty data directory with --join",
        config.name,
        config.cluster_name,
        config.data_dir.display()
    )
}

/// The metadata group's first voters: up to five initial nodes, by name.
pub(crate) fn meta_voters(initial: &[(String, String)]) -> BTreeMap<NodeId, PeerNode> {
    let mut sorted: Vec<&(String, String)> = initial.iter().collect();
    sorted.sort();
    sorted
        .into_iter()
        .take(meta::META_VOTERS)
        .map(|(name, addr)| {
            (
                NodeId::from_name(name),
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

/// Follows the metadata group: reloads the directory and the map when they change (opening
/// and closing groups to match) and, on the metadata leader, does the leader's jobs. Wakes
/// at every applied entry, and at least every half second.
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
                node.refresh_acl();
                if node.refresh_map() {
                    let removed = node
                        .cluster_map()
                        .is_some_and(|m| m.state(node.node_id) == Some(NodeState::Removed));
                    if removed {
                        node.mark_removed().await;
                    }
                    node.spawn_reconcile();
                }
                seen = applied;
            }
            if node.transport.told_removed() {
                node.mark_removed().await;
            }
            let meta = node.meta.clone();
            drop(node);
            meta.await_applied_beyond(seen, Duration::from_millis(500))
                .await;
        }
    });
}
