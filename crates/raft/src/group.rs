//! [`ShardGroup`]: one shard's Raft group on this node, and the write and read paths through it.

use crate::{LogStore, NoPeers, PeerNode, RaftLayerError, ShardStateMachine, TypeConfig};
use openraft::type_config::async_runtime::WatchReceiver;
use openraft::{Config, Raft, ReadPolicy, ServerState, SnapshotPolicy};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;
use trireme_storage::Storage;
use trireme_types::{CommandResult, LogCommand, ShardId};

/// The Raft handle type of a shard.
type ShardRaft = Raft<TypeConfig, ShardStateMachine>;

/// Raft timing and log-compaction settings (DESIGN.md: heartbeat 100 ms, elections 1–2 s).
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
            request_timeout: Duration::from_secs(10),
        }
    }
}

impl RaftTiming {
    fn config(&self) -> Result<Config, RaftLayerError> {
        let config = Config {
            cluster_name: "trireme".into(),
            heartbeat_interval: self.heartbeat.as_millis() as u64,
            election_timeout_min: self.election_min.as_millis() as u64,
            election_timeout_max: self.election_max.as_millis() as u64,
            snapshot_policy: SnapshotPolicy::LogsSinceLast(self.snapshot_every),
            max_in_snapshot_log_to_keep: self.keep_after_snapshot,
            enable_pre_vote: Some(true),
            ..Default::default()
        };
        config
            .validate()
            .map_err(|e| RaftLayerError::Setup(e.to_string()))
    }
}

/// How a read is ordered against writes (DESIGN.md "reads").
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
    pub leader: Option<u64>,
    /// Voters and how to reach them.
    pub members: BTreeMap<u64, PeerNode>,
    /// Current term.
    pub term: u64,
    /// Last log index applied here.
    pub applied_index: u64,
    /// Last log index known committed.
    pub committed_index: u64,
    /// Milliseconds since a quorum last acknowledged this leader (leaders only).
    pub millis_since_quorum_ack: Option<u64>,
}

/// One shard's Raft group on this node.
#[derive(Clone)]
pub struct ShardGroup {
    shard: ShardId,
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
}

impl ShardGroup {
    /// Opens the group of `shard` from `storage` and starts it.
    pub async fn open(
        storage: Arc<Storage>,
        shard: ShardId,
        node_id: u64,
        timing: &RaftTiming,
    ) -> Result<Self, RaftLayerError> {
        let group = trireme_types::GroupId::of_shard(shard).0;
        let config = Arc::new(timing.config()?);
        let raft = Raft::new(
            node_id,
            config,
            NoPeers,
            LogStore::new(storage.clone(), group),
            ShardStateMachine::new(storage, shard.0),
        )
        .await
        .map_err(|e| RaftLayerError::from_fatal(shard.0, e))?;
        let metrics = raft.metrics();
        let proposals = crate::batcher::spawn(raft.clone(), shard.0);
        Ok(Self {
            shard,
            proposals,
            raft,
            timeout: timing.request_timeout,
            lease: timing.election_min,
            metrics,
        })
    }

    /// The shard.
    pub fn shard(&self) -> ShardId {
        self.shard
    }

    /// The openraft handle, for administration.
    pub fn raft(&self) -> &ShardRaft {
        &self.raft
    }

    /// Makes this group's first membership (bootstrap). Only on a fresh group.
    pub async fn initialize(&self, members: BTreeMap<u64, PeerNode>) -> Result<(), RaftLayerError> {
        if self
            .raft
            .is_initialized()
            .await
            .map_err(|e| RaftLayerError::from_fatal(self.shard.0, e))?
        {
            return Ok(());
        }
        self.raft
            .initialize(members)
            .await
            .map_err(|e| RaftLayerError::Setup(e.to_string()))
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
    pub async fn wait_for_leader(&self, timeout: Duration) -> Result<u64, RaftLayerError> {
        let metrics = self
            .raft
            .wait(Some(timeout))
            .metrics(|m| m.current_leader.is_some(), "leader elected")
            .await
            .map_err(|e| RaftLayerError::Setup(e.to_string()))?;
        metrics
            .current_leader
            .ok_or_else(|| RaftLayerError::Setup("no leader".into()))
    }

    /// Proposes a command and returns its result once it is committed and applied here.
    pub async fn write(&self, command: LogCommand) -> Result<CommandResult, RaftLayerError> {
        let shard = self.shard.0;
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

    /// Returns once a local read of the state machine is ordered as `mode` promises.
    pub async fn read_barrier(&self, mode: ReadMode) -> Result<(), RaftLayerError> {
        let shard = self.shard.0;
        let policy = match mode {
            ReadMode::Stale => return Ok(()),
            ReadMode::Default if self.holds_lease() => return Ok(()),
            ReadMode::Default => ReadPolicy::LeaseRead,
            ReadMode::Consistent => ReadPolicy::ReadIndex,
        };
        let attempt = async {
            match self.raft.ensure_linearizable(policy).await {
                Ok(_) => Ok(()),
                // The lease lapsed: confirm leadership with a quorum instead.
                Err(_) if mode == ReadMode::Default && self.raft.is_leader() => self
                    .raft
                    .ensure_linearizable(ReadPolicy::ReadIndex)
                    .await
                    .map(|_| ())
                    .map_err(|e| RaftLayerError::from_read(shard, e)),
                Err(e) => Err(RaftLayerError::from_read(shard, e)),
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
    /// anyone: it leads, a quorum acknowledged it within the lease (or it is the only voter),
    /// and it has applied an entry of its own term, so everything committed by earlier
    /// leaders is applied here. Reads only the published metrics: no round trip to the Raft
    /// task. Stale metrics can only make this answer `false` too late by at most the lease,
    /// which is what the lease is for.
    fn holds_lease(&self) -> bool {
        let m = self.metrics.borrow_watched();
        if m.state != ServerState::Leader || m.current_leader != Some(m.id) {
            return false;
        }
        if m.last_applied.as_ref().map(|l| l.leader_id.term) != Some(m.current_term) {
            return false;
        }
        let membership = m.membership_config.membership();
        let mut voters = membership.voter_ids();
        let only_voter = matches!((voters.next(), voters.next()), (Some(id), None) if id == m.id);
        only_voter
            || m.last_quorum_acked
                .as_ref()
                .is_some_and(|acked| openraft::Instant::elapsed(&acked.into_inner()) < self.lease)
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
            leader: m.current_leader,
            members: m
                .membership_config
                .membership()
                .nodes()
                .map(|(id, node)| (*id, node.clone()))
                .collect(),
            term: m.current_term,
            applied_index: m.last_applied.as_ref().map_or(0, |l| l.index),
            committed_index: m.cluster_committed.as_ref().map_or(0, |l| l.index),
            millis_since_quorum_ack: m
                .last_quorum_acked
                .as_ref()
                .map(|t| openraft::Instant::elapsed(&t.into_inner()).as_millis() as u64),
        }
    }

    /// Stops the group.
    pub async fn shutdown(&self) {
        if let Err(e) = self.raft.shutdown().await {
            tracing::warn!(shard = self.shard.0, error = %e, "raft shutdown");
        }
    }
}
