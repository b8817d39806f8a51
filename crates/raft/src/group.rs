//! [`ShardGroup`]: one shard's Raft group on this node, and the write and read paths through it.

use crate::batcher::ProposalMetrics;
use crate::compaction::{LogBudget, run_compaction};
use crate::freshness::Freshness;
use crate::{LogStore, PeerNode, PeerTransport, RaftLayerError, ShardStateMachine, TypeConfig};
use openraft::type_config::async_runtime::WatchReceiver;
use openraft::{Config, Raft, ReadPolicy, ServerState, SnapshotPolicy};
use openraft_multi::GroupNetworkFactory;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use trireme_storage::Storage;
use trireme_types::{CommandResult, GroupId, LogCommand, NodeId, ShardId};

/// The Raft handle type of a shard.
type ShardRaft = Raft<TypeConfig, ShardStateMachine>;

/// Raft timing and log-compaction settings (defaults: heartbeat 100 ms, elections 1–2 s).
#[derive(Debug, Clone)]
pub struct RaftTiming {
    /// Leader heartbeat interval.
    pub heartbeat: Duration,
    /// Smallest election timeout.
    pub election_min: Duration,
    /// Largest election timeout.
    pub election_max: Duration,
    /// Take a snapshot (and compact the log) after this many entries.
    pub snapshot_every: u64,
    /// Log entries kept behind a snapshot, for followers slightly behind.
    pub keep_after_snapshot: u64,
    /// At most this many bytes of them: entries are batches of up to 256 writes, so a count
    /// alone can keep tens of MB (see `compaction.rs`).
    pub keep_after_snapshot_bytes: u64,
    /// Also take a snapshot once the log has grown by this many bytes (or by the size of the
    /// last snapshot, if larger) since the last one: see `compaction.rs`.
    pub snapshot_log_bytes: u64,
    /// Snapshots are sent to lagging followers in chunks of this many bytes.
    pub snapshot_chunk_bytes: u64,
    /// Each snapshot transfer is paced to this many bytes per second (0: unpaced).
    pub snapshot_rate_bytes_per_sec: u64,
    /// How long a write or a read barrier may take before the client gets a timeout.
    pub request_timeout: Duration,
}

impl Default for RaftTiming {
    fn default() -> Self {
        Self {
            heartbeat: Duration::from_millis(100),
            election_min: Duration::from_millis(1000),
            election_max: Duration::from_millis(2000),
            snapshot_every: 20_000,
            keep_after_snapshot: 1_000,
            keep_after_snapshot_bytes: 8 << 20,
            snapshot_log_bytes: 8 << 20,
            snapshot_chunk_bytes: crate::DEFAULT_SNAPSHOT_CHUNK_BYTES as u64,
            snapshot_rate_bytes_per_sec: 32 << 20,
            request_timeout: Duration::from_secs(10),
        }
    }
}

/// How long a follower may take to answer one snapshot chunk.
const SNAPSHOT_CHUNK_TIMEOUT: Duration = Duration::from_secs(10);

impl RaftTiming {
    /// openraft's config for a group on node `node_id` (whose snapshots are staggered).
    fn config(&self, node_id: NodeId) -> Result<Config, RaftLayerError> {
        let every = self.snapshot_every;
        let every = every + every / 100 * crate::compaction::stagger_percent(node_id);
        let config = Config {
            cluster_name: "trireme".into(),
            heartbeat_interval: self.heartbeat.as_millis() as u64,
            election_timeout_min: self.election_min.as_millis() as u64,
            election_timeout_max: self.election_max.as_millis() as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(every),
            max_in_snapshot_log_to_keep: self.keep_after_snapshot,
            enable_pre_vote: Some(true),
            // Each snapshot chunk must be answered within this (the last one gets more: see
            // peer/snapshot.rs). openraft's default, 200 ms, bounded the whole transfer and
            // install while a snapshot was one frame.
            install_snapshot_timeout: SNAPSHOT_CHUNK_TIMEOUT.as_millis() as u64,
            // A leader restarted after kill -9 must win a new election, not resume its old
            // term: the committed index is not persisted (see log_store.rs), so a resumed
            // leader's state machine may lack entries it committed before the crash, and its
            // lease and read index would let it serve them stale. Found by `trireme chaos`
            // (seed 104: a default read returned a value overwritten by an acknowledged write).
            enable_leader_restore: Some(false),
            ..Default::default()
        };
        config
            .validate()
            .map_err(|e| RaftLayerError::Setup(e.to_string()))
    }
}

/// How a read is ordered against writes (docs/architecture.md, "Reads").
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadMode {
    /// ReadIndex: leadership confirmed by a quorum for this read.
    Consistent,
    /// Leader lease when held, ReadIndex otherwise.
    Default,
    /// Whatever this replica has applied.
    Stale,
}

/// What a group looks like from this node, for status endpoints and `CLUSTER` commands.
#[derive(Debug, Clone)]
pub struct GroupStatus {
    /// This node's role.
    pub state: ServerState,
    /// The leader's node id, if known.
    pub leader: Option<NodeId>,
    /// Voters and learners, and how to reach them.
    pub members: BTreeMap<NodeId, PeerNode>,
    /// The voters (of every configuration, while a membership change is in its joint phase).
    pub voters: BTreeSet<NodeId>,
    /// Whether a membership change is half done (a joint configuration).
    pub joint: bool,
    /// Current term.
    pub term: u64,
    /// Last log index applied here.
    pub applied_index: u64,
    /// Last log index known committed.
    pub committed_index: u64,
    /// Last log index purged from this replica's log (0 when none): a follower that needs
    /// an entry at or below it gets a snapshot instead.
    pub purged_index: u64,
    /// Milliseconds since a quorum last acknowledged this leader (leaders only).
    pub millis_since_quorum_ack: Option<u64>,
}

/// One Raft group on this node: a shard's, or the metadata group (whose state machine rows
/// live under a storage shard id of their own).
#[derive(Clone)]
pub struct ShardGroup {
    shard: ShardId,
    storage: Arc<Storage>,
    group: GroupId,
    transport: PeerTransport,
    /// When this node last received AppendEntries for the group, stamped by the transport.
    last_append: Arc<Mutex<Option<Instant>>>,
    /// How old this replica's state may be (see `freshness.rs`).
    freshness: Arc<Freshness>,
    raft: ShardRaft,
    timeout: Duration,
    /// How long after a quorum acknowledged this leader it may serve reads alone. Followers
    /// refuse to vote for anyone else for `election_max` after they last heard from a leader,
    /// so `election_min` leaves a margin for clock drift.
    lease: Duration,
    proposals: tokio::sync::mpsc::Sender<crate::batcher::Proposal>,
    metrics: openraft::type_config::alias::WatchReceiverOf<
        TypeConfig,
        openraft::RaftMetrics<TypeConfig>,
    >,
    /// Leader changes and elections seen since the group was opened (`/metrics`).
    events: Arc<GroupEvents>,
    /// Set once the state machine holds everything the group had committed before this
    /// replica opened. The rows on disk may be older than what it served before a crash
    /// (applied entries reach the tables at the next flush), so until then a `stale` read
    /// here could go back in time.
    recovered: Arc<std::sync::atomic::AtomicBool>,
}

/// What a group has been through on this node since it was opened, counted by a task that
/// watches every change of the group's Raft metrics (sampling at scrape time would miss a
/// leader that came and went between two scrapes).
#[derive(Debug, Default)]
pub struct GroupEvents {
    /// Times the known leader became a node other than the last one known.
    pub leader_changes: std::sync::atomic::AtomicU64,
    /// Elections held since the group was opened, counted as the terms the group advanced
    /// by (every election, won or not, starts a new term; a term seen skipped still counts).
    pub elections: std::sync::atomic::AtomicU64,
}

/// Sets `recovered` once the cluster's commit index covers this replica's log as it stood
/// at open (`opened_with`, its last index; less if a tail is cut meanwhile) and the state
/// machine has applied up to it. That is what openraft's `wait_for_recovery` waits for,
/// except that it compares with the log's end as it grows, which under steady writes a
/// follower's log keeps ahead of the commit index it has heard of. Watched without holding
/// the Raft handle, so the task ends with the group.
fn watch_recovery(
    mut metrics: openraft::type_config::alias::WatchReceiverOf<
        TypeConfig,
        openraft::RaftMetrics<TypeConfig>,
    >,
    opened_with: Option<u64>,
    recovered: Arc<std::sync::atomic::AtomicBool>,
) {
    tokio::spawn(async move {
        let mut target = None;
        loop {
            {
                let m = metrics.borrow_watched();
                let committed = m.cluster_committed.as_ref().map(|l| l.index);
                // A tail cut since (never committed) leaves the log shorter than at open.
                let must_cover = opened_with.min(m.last_log_index);
                if target.is_none() && committed.is_some() && committed >= must_cover {
                    target = committed;
                }
                if target.is_some() && m.last_applied.as_ref().map(|l| l.index) >= target {
                    recovered.store(true, std::sync::atomic::Ordering::Release);
                    return;
                }
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    });
}

/// Counts leader changes and elections in `metrics` into `events` until the group stops.
fn watch_events(
    mut metrics: openraft::type_config::alias::WatchReceiverOf<
        TypeConfig,
        openraft::RaftMetrics<TypeConfig>,
    >,
    events: Arc<GroupEvents>,
) {
    use std::sync::atomic::Ordering::Relaxed;
    // Terms count from the one the group opened at, read here rather than in the task, which
    // may first run after an election. The first leader known counts as a change.
    let mut term = metrics.borrow_watched().current_term;
    tokio::spawn(async move {
        let mut leader = None;
        loop {
            let (now_leader, now_term) = {
                let m = metrics.borrow_watched();
                (m.current_leader, m.current_term)
            };
            if now_leader.is_some() && now_leader != leader {
                events.leader_changes.fetch_add(1, Relaxed);
                leader = now_leader;
            }
            if now_term > term {
                events.elections.fetch_add(now_term - term, Relaxed);
                term = now_term;
            }
            if metrics.changed().await.is_err() {
                return;
            }
        }
    });
}

impl ShardGroup {
    /// Opens Raft group `group` from `storage`, its state machine rows under `shard`, registers
    /// it with the peer transport and starts it. Its proposals are counted in
    /// `proposal_metrics`, which the node's groups share.
    pub async fn open(
        storage: Arc<Storage>,
        group: GroupId,
        shard: ShardId,
        node_id: NodeId,
        timing: &RaftTiming,
        transport: &PeerTransport,
        proposal_metrics: Arc<ProposalMetrics>,
    ) -> Result<Self, RaftLayerError> {
        let config = Arc::new(timing.config(node_id)?);
        let (budget, compaction_events) = LogBudget::new(timing.snapshot_log_bytes);
        let budget = budget.staggered(crate::compaction::stagger_percent(node_id));
        let budget = Arc::new(budget);
        let budget_seen_by_compaction = Arc::downgrade(&budget);
        let opened_with = storage.last_log_index(group);
        let lease = timing.election_min;
        let freshness = Arc::new(Freshness::new(lease));
        let raft = Raft::new(
            node_id.0,
            config,
            GroupNetworkFactory::new(transport.clone(), group.0),
            LogStore::new(storage.clone(), group)
                .with_budget(budget.clone())
                .with_clock(freshness.clone()),
            ShardStateMachine::new(storage.clone(), shard)
                .on_node(node_id.0)
                .with_budget(budget),
        )
        .await
        .map_err(|e| RaftLayerError::from_fatal(shard, e))?;
        tokio::spawn(run_compaction(
            raft.clone(),
            budget_seen_by_compaction,
            compaction_events,
            timing.keep_after_snapshot_bytes,
        ));
        freshness.set_metrics(raft.metrics());
        let last_append = transport.register(group.0, raft.clone(), freshness.clone());
        let metrics = raft.metrics();
        let events = Arc::new(GroupEvents::default());
        watch_events(raft.metrics(), events.clone());
        let recovered = Arc::new(std::sync::atomic::AtomicBool::new(false));
        watch_recovery(raft.metrics(), opened_with, recovered.clone());
        let proposals = crate::batcher::spawn(raft.clone(), shard, proposal_metrics);
        Ok(Self {
            shard,
            storage,
            group,
            transport: transport.clone(),
            last_append,
            freshness,
            proposals,
            raft,
            timeout: timing.request_timeout,
            lease,
            metrics,
            events,
            recovered,
        })
    }

    /// Whether this replica has applied everything its group committed before it opened:
    /// until then it must not answer `stale` reads (see [`ShardGroup::open`]'s recovery watch).
    pub fn has_recovered(&self) -> bool {
        self.recovered.load(std::sync::atomic::Ordering::Acquire)
    }

    /// The shard whose rows this group's state machine holds.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// The Raft group id.
    pub fn group_id(&self) -> GroupId {
        self.group
    }

    /// Whether this node currently leads the group.
    pub fn is_leader(&self) -> bool {
        let m = self.metrics.borrow_watched();
        m.state == ServerState::Leader && m.current_leader == Some(m.id)
    }

    /// The leader's node id, if known.
    pub fn leader(&self) -> Option<NodeId> {
        self.metrics.borrow_watched().current_leader.map(NodeId)
    }

    /// How many milliseconds old this replica's state may be: every write acknowledged
    /// longer ago than that is applied here, as far as the nodes' clocks agree (see
    /// `freshness.rs`). `None` when it cannot tell: no leader stamp is covered yet, or this
    /// leader lost its lease. A follower whose leader never stamps anything (a build from
    /// before stamps, during an upgrade) has only [`ShardGroup::last_contact_ms`] to go by.
    pub fn staleness_ms(&self) -> Option<u64> {
        if self.is_leader() {
            return self.freshness.leader_bound();
        }
        let applied = self.metrics.borrow_watched().last_applied.as_ref()?.index;
        match self.freshness.follower_bound(applied) {
            Some(bound) => Some(bound),
            None if !self.freshness.has_stamps() => self.last_contact_ms(),
            None => None,
        }
    }

    /// Milliseconds since this replica last heard from its leader: 0 on the leader itself,
    /// `None` when it never has. Says nothing of what it has applied: a leader of a build that
    /// sends no stamps leaves only this.
    pub fn last_contact_ms(&self) -> Option<u64> {
        if self.is_leader() {
            return Some(0);
        }
        let stamp = *self
            .last_append
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        stamp.map(|at| at.elapsed().as_millis() as u64)
    }

    /// Whether, as leader, this node knows that `follower` holds every entry of its log.
    pub fn follower_caught_up(&self, follower: NodeId) -> bool {
        let m = self.metrics.borrow_watched();
        let last = m.last_log_index;
        m.replication
            .as_ref()
            .and_then(|r| r.get(&follower.0))
            .is_some_and(|matched| matched.as_ref().map(|l| l.index) == last)
    }

    /// Hands leadership to `to` (ignored unless this node leads).
    pub async fn transfer_leader(&self, to: NodeId) -> Result<(), RaftLayerError> {
        self.raft
            .trigger()
            .transfer_leader(to.0)
            .await
            .map_err(|e| RaftLayerError::from_fatal(self.shard, e))
    }

    /// Starts an election now instead of waiting for the election timeout: for a group whose
    /// replicas all start at once with the same state (a new shard made by a split), where
    /// nobody else would stand for a second or two.
    pub async fn campaign(&self) -> Result<(), RaftLayerError> {
        self.raft
            .trigger()
            .elect(false)
            .await
            .map_err(|e| RaftLayerError::from_fatal(self.shard, e))
    }

    /// Waits until this replica has applied past `index`, or `timeout` passes.
    pub async fn await_applied_beyond(&self, index: u64, timeout: Duration) {
        let mut metrics = self.metrics.clone();
        let wait = async {
            loop {
                let applied = metrics
                    .borrow_watched()
                    .last_applied
                    .as_ref()
                    .map_or(0, |l| l.index);
                if applied > index || metrics.changed().await.is_err() {
                    return;
                }
            }
        };
        let _ = tokio::time::timeout(timeout, wait).await;
    }

    /// Waits until a leader is known or `timeout` passes; returns it.
    pub async fn await_leader(&self, timeout: Duration) -> Option<NodeId> {
        let mut metrics = self.metrics.clone();
        let wait = async {
            loop {
                if let Some(leader) = metrics.borrow_watched().current_leader {
                    return Some(NodeId(leader));
                }
                if metrics.changed().await.is_err() {
                    return None;
                }
            }
        };
        tokio::time::timeout(timeout, wait).await.ok().flatten()
    }

    /// The openraft handle, for administration.
    pub fn raft(&self) -> &ShardRaft {
        &self.raft
    }

    /// Makes this group's first membership (bootstrap). Only on a fresh group.
    pub async fn initialize(
        &self,
        members: BTreeMap<NodeId, PeerNode>,
    ) -> Result<(), RaftLayerError> {
        if self.is_initialized().await? {
            return Ok(());
        }
        let members: BTreeMap<u64, PeerNode> =
            members.into_iter().map(|(id, node)| (id.0, node)).collect();
        match self.raft.initialize(members).await {
            Ok(()) => Ok(()),
            // Another replica initialized with the same membership first and has already
            // asked this one for its vote: the group exists, its log will arrive by replication.
            Err(openraft::errors::RaftError::APIError(
                openraft::errors::InitializeError::NotAllowed(e),
            )) => {
                tracing::debug!(shard = self.shard.0, reason = %e, "group already started by a peer");
                Ok(())
            }
            Err(e) => Err(RaftLayerError::Setup(e.to_string())),
        }
    }

    /// Whether this replica knows a membership: it started the group, or a leader has
    /// replicated to it.
    pub async fn is_initialized(&self) -> Result<bool, RaftLayerError> {
        self.raft
            .is_initialized()
            .await
            .map_err(|e| RaftLayerError::from_fatal(self.shard, e))
    }

    /// Waits until the state machine has caught up with what was committed before a restart,
    /// so that reads never see an older state than before.
    pub async fn wait_recovered(&self, timeout: Duration) -> Result<(), RaftLayerError> {
        self.raft
            .wait_for_recovery(Some(timeout))
            .await
            .map(|_| ())
            .map_err(|e| RaftLayerError::Setup(e.to_string()))
    }

    /// Waits until the group has a leader (any node), up to `timeout`.
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<NodeId, RaftLayerError> {
        let metrics = self
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader.is_some(), "leader elected")
            .await
            .map_err(|e| RaftLayerError::Internal(e.to_string()))?;
        metrics
            .current_leader
            .map(NodeId)
            .ok_or_else(|| RaftLayerError::Internal("no leader".into()))
    }

    /// Proposes a command and returns its result once it is committed and applied here.
    pub async fn write(&self, command: LogCommand) -> Result<CommandResult, RaftLayerError> {
        let shard = self.shard;
        let stopped = || RaftLayerError::Stopped {
            shard,
            reason: "the group's proposal queue is closed".into(),
        };
        let (reply, result) = tokio::sync::oneshot::channel();
        let proposal = crate::batcher::Proposal { command, reply };
        let attempt = async {
            self.proposals.send(proposal).await.map_err(|_| stopped())?;
            result.await.map_err(|_| stopped())?
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(RaftLayerError::Timeout {
                shard,
                millis: self.timeout.as_millis() as u64,
            }),
        }
    }

    /// Whether a read in `mode` may be served from this replica right now, with no round trip
    /// at all: any replica for `stale`, the leader holding its lease for `default`, never for
    /// `consistent`. When this says `false`, [`ShardGroup::read_barrier`] decides.
    pub fn can_read_at_once(&self, mode: ReadMode) -> bool {
        match mode {
            ReadMode::Stale => true,
            ReadMode::Default => self.holds_lease(),
            ReadMode::Consistent => false,
        }
    }

    /// Returns once a local read of the state machine is ordered as `mode` promises.
    pub async fn read_barrier(&self, mode: ReadMode) -> Result<(), RaftLayerError> {
        let shard = self.shard;
        let policy = match mode {
            ReadMode::Stale => return Ok(()),
            ReadMode::Default if self.holds_lease() => return Ok(()),
            ReadMode::Default => ReadPolicy::LeaseRead,
            ReadMode::Consistent => ReadPolicy::ReadIndex,
        };
        let attempt = async {
            let mut policy = policy;
            let mut backoff = Duration::from_millis(5);
            loop {
                match self.raft.ensure_linearizable(policy).await {
                    Ok(_) => return Ok(()),
                    Err(e) => match RaftLayerError::from_read(shard, e) {
                        // Not the leader: the caller forwards; nothing to wait for here.
                        e @ (RaftLayerError::NotLeader { .. } | RaftLayerError::Stopped { .. }) => {
                            return Err(e);
                        }
                        // The lease lapsed, or a quorum did not answer in time (a slow
                        // heartbeat reply): confirm with a quorum again, until the request
                        // timeout says otherwise.
                        e => {
                            if !self.raft.is_leader() {
                                return Err(e);
                            }
                            tracing::debug!(shard = shard.0, error = %e, "read barrier retried");
                            policy = ReadPolicy::ReadIndex;
                            tokio::time::sleep(backoff).await;
                            backoff = (backoff * 2).min(Duration::from_millis(100));
                        }
                    },
                }
            }
        };
        match tokio::time::timeout(self.timeout, attempt).await {
            Ok(result) => result,
            Err(_) => Err(RaftLayerError::Timeout {
                shard,
                millis: self.timeout.as_millis() as u64,
            }),
        }
    }

    /// Whether this node may serve a default-mode read from its own state without asking
    /// anyone (see [`crate::freshness::holds_lease`]). Reads only the published metrics: no
    /// round trip to the Raft task.
    fn holds_lease(&self) -> bool {
        crate::freshness::holds_lease(&self.metrics.borrow_watched(), self.lease)
    }

    /// Whether a leader is known, and the last applied index: the cheap part of
    /// [`ShardGroup::status`], for every read's freshness headers.
    pub fn leader_and_applied(&self) -> (bool, u64) {
        let m = self.metrics.borrow_watched();
        (
            m.current_leader.is_some(),
            m.last_applied.as_ref().map_or(0, |l| l.index),
        )
    }

    /// A snapshot of the group's state as this node sees it.
    pub fn status(&self) -> GroupStatus {
        let m = self.metrics.borrow_watched();
        GroupStatus {
            state: m.state,
            leader: m.current_leader.map(NodeId),
            members: m
                .membership_config
                .membership()
                .nodes()
                .map(|(id, node)| (NodeId(*id), node.clone()))
                .collect(),
            voters: m
                .membership_config
                .membership()
                .voter_ids()
                .map(NodeId)
                .collect(),
            joint: m.membership_config.membership().get_joint_config().len() > 1,
            term: m.current_term,
            applied_index: m.last_applied.as_ref().map_or(0, |l| l.index),
            committed_index: m.cluster_committed.as_ref().map_or(0, |l| l.index),
            purged_index: m.purged.as_ref().map_or(0, |l| l.index),
            millis_since_quorum_ack: m
                .last_quorum_acked
                .as_ref()
                .map(|t| openraft::Instant::elapsed(&t.into_inner()).as_millis() as u64),
        }
    }

    /// How far `follower` has got, as this leader sees it: (the leader's last log index, the
    /// follower's matched index). `None` when this node does not lead or does not replicate to
    /// `follower`.
    pub fn replication_progress(&self, follower: NodeId) -> Option<(u64, Option<u64>)> {
        let m = self.metrics.borrow_watched();
        let matched = m.replication.as_ref()?.get(&follower.0)?;
        Some((
            m.last_log_index.unwrap_or(0),
            matched.as_ref().map(|l| l.index),
        ))
    }

    /// Leader changes and elections seen here since the group was opened.
    pub fn events(&self) -> &GroupEvents {
        &self.events
    }

    /// On a leader, how many log entries each follower (and learner) is behind: the leader's
    /// last log index minus the follower's matched index. Empty on other replicas.
    pub fn follower_lag(&self) -> Vec<(NodeId, u64)> {
        let m = self.metrics.borrow_watched();
        let last = m.last_log_index.unwrap_or(0);
        m.replication.as_ref().map_or_else(Vec::new, |replication| {
            replication
                .iter()
                .filter(|(id, _)| **id != m.id)
                .map(|(id, matched)| {
                    let matched = matched.as_ref().map_or(0, |l| l.index);
                    (NodeId(*id), last.saturating_sub(matched))
                })
                .collect()
        })
    }

    /// On a leader, the most log entries any follower (or learner) is behind; 0 on other
    /// replicas. [`ShardGroup::follower_lag`] as one number, with nothing allocated, for a
    /// reader that asks every second (the console's figures).
    pub fn max_follower_lag(&self) -> u64 {
        let m = self.metrics.borrow_watched();
        let last = m.last_log_index.unwrap_or(0);
        m.replication.as_ref().map_or(0, |replication| {
            replication
                .iter()
                .filter(|(id, _)| **id != m.id)
                .map(|(_, matched)| last.saturating_sub(matched.as_ref().map_or(0, |l| l.index)))
                .max()
                .unwrap_or(0)
        })
    }

    /// Adds `id` as a learner without waiting for it to catch up; a no-op when it is a member
    /// already. Only on the leader.
    pub async fn add_learner(&self, id: NodeId, node: PeerNode) -> Result<(), RaftLayerError> {
        if self.status().members.contains_key(&id) {
            return Ok(());
        }
        self.raft
            .add_learner(id.0, node, false)
            .await
            .map(drop)
            .map_err(|e| RaftLayerError::from_write(self.shard, e))
    }

    /// Makes `voters` the group's voters; every other voter stays as a learner with `retain`,
    /// or leaves the group. Rolls forward a change left half done. Only on the leader; every
    /// id in `voters` must be a member already.
    pub async fn set_voters(
        &self,
        voters: BTreeSet<NodeId>,
        retain: bool,
    ) -> Result<(), RaftLayerError> {
        let status = self.status();
        if status.voters == voters && !status.joint {
            return Ok(());
        }
        let voters = voters.iter().map(|v| v.0).collect();
        self.raft
            .change_membership(openraft::ChangeMembers::ReplaceAllVoters(voters), retain)
            .await
            .map(drop)
            .map_err(|e| RaftLayerError::from_write(self.shard, e))
    }

    /// Removes learner `id` from the group (a move given up); a no-op when it is not a member.
    /// A voter is not removed this way.
    pub async fn remove_learner(&self, id: NodeId) -> Result<(), RaftLayerError> {
        let status = self.status();
        if !status.members.contains_key(&id) || status.voters.contains(&id) {
            return Ok(());
        }
        self.raft
            .change_membership(
                openraft::ChangeMembers::RemoveNodes(BTreeSet::from([id.0])),
                false,
            )
            .await
            .map(drop)
            .map_err(|e| RaftLayerError::from_write(self.shard, e))
    }

    /// The size of this replica's last snapshot file, bytes (0 before its first): about the
    /// size of the shard, read without touching its rows. A shard snapshots whenever its log
    /// has grown by a fraction of its size, so this trails the truth by that much at most.
    pub fn snapshot_size(&self) -> u64 {
        let path = crate::state_machine::snapshot_path(self.storage.dir(), self.shard.0);
        std::fs::metadata(path).map_or(0, |m| m.len())
    }

    /// Stops the group and deletes this replica's data: log, Raft state, rows and snapshot
    /// file. For a replica that has moved to another node, once the group's membership no
    /// longer names this node. Returns the rows deleted.
    pub async fn destroy(&self) -> Result<u64, RaftLayerError> {
        self.shutdown().await;
        let storage = self.storage.clone();
        let (group, shard) = (self.group, self.shard);
        let snapshot = crate::state_machine::snapshot_path(storage.dir(), shard.0);
        let deleted = tokio::task::spawn_blocking(move || {
            let rows = storage.drop_replica(group, shard)?;
            match std::fs::remove_file(&snapshot) {
                Ok(()) => {}
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                Err(e) => tracing::warn!(path = %snapshot.display(), error = %e, "cannot delete a moved replica's snapshot"),
            }
            Ok::<_, trireme_storage::StorageError>(rows)
        })
        .await
        .map_err(|e| RaftLayerError::Internal(format!("dropping shard {shard}: {e}")))??;
        self.storage.sync_async().await?;
        Ok(deleted)
    }

    /// Stops the group.
    pub async fn shutdown(&self) {
        self.transport.unregister(self.group.0);
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(shard = self.shard.0, error = %e, "raft shutdown");
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_restarted_leader_must_be_elected_again() {
        let config = RaftTiming::default().config(NodeId(0)).unwrap();
        assert_eq!(config.enable_leader_restore, Some(false));
        assert_eq!(config.enable_pre_vote, Some(true));
    }
}
