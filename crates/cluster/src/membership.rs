//! Membership operations on a shard's Raft group, asked by the metadata leader of whichever
//! node leads the shard: add a learner, read how far it has caught up, change the voters,
//! remove a learner. Only a shard's leader can change its membership, and the metadata
//! leader usually is not it, so each operation travels over the peer link like a forwarded
//! request, to the replicas in turn until the leader answers.

use crate::{ClusterError, Node};
use serde::{Deserialize, Serialize};
use std::collections::BTreeSet;
use std::sync::{Arc, Weak};
use std::time::Duration;
use trireme_raft::{ForwardHandler, PeerNode};
use trireme_types::{Command, ErrorCode, LogCommand, NodeId, ShardId, TriremeError};

/// How a node answers a request it cannot decode: one of a newer build's operations, when
/// the node runs an older one (every build so far words it so).
pub(crate) const UNDECODABLE_REQUEST: &str = "undecodable request";

/// How long one operation may take on the shard leader (a membership change commits twice).
const OP_TIMEOUT: Duration = Duration::from_secs(10);

/// What the metadata leader asks of a shard's leader.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum MembershipOp {
    /// Add `node` as a learner (snapshot, then log), without waiting for it.
    AddLearner { node: u64, member: PeerNode },
    /// How far `node` has caught up.
    Progress { node: u64 },
    /// Make `voters` the voters; any other voter leaves the group. The leader hands its
    /// leadership to one of `voters` first when it is not among them.
    SetVoters { voters: BTreeSet<u64> },
    /// Remove learner `node` (a move given up).
    RemoveLearner { node: u64 },
    /// Split the shard: propose a [`Command::Split`] entry and answer once it is applied
    /// here (committed). Done again it changes nothing: the shard's range no longer matches.
    Split {
        at_slot: u16,
        child: u32,
        range: (u16, u16),
    },
    /// How big the shard is and how far its log has come (for automatic splits).
    Usage,
    /// Where to split the shard, whose slots are `range`, so that each side holds about
    /// half its bytes (an automatic split by size). Builds before it answer `Failed`.
    SplitPoint { range: (u16, u16) },
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct Request {
    pub shard: u32,
    pub op: MembershipOp,
}

/// The shard leader's answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) enum MembershipReply {
    /// Done (or nothing to do).
    Done,
    /// The leader's last log index and what the learner has matched of it.
    Progress {
        last_index: u64,
        matched: Option<u64>,
    },
    /// Not the leader; the leader this node knows of.
    NotLeader(Option<u64>),
    /// Not yet (leadership is being handed over first); ask again.
    Retry(String),
    /// It cannot be done, now or later (a split of slots the shard no longer owns).
    Refused(String),
    /// The shard's approximate size (its last snapshot's) and the leader's applied index.
    Usage { bytes: u64, applied: u64 },
    /// It failed, and why.
    Failed(String),
    /// The slot to split the shard at, `None` when no slot divides its bytes usefully (one
    /// slot, that is one key or one hash tag, holds most of them).
    SplitPoint(Option<u16>),
}

impl Node {
    /// Runs `op` on `shard`'s leader, trying the replicas in turn and following leader hints.
    pub(crate) async fn on_shard_leader(
        &self,
        shard: ShardId,
        op: MembershipOp,
    ) -> Result<MembershipReply, ClusterError> {
        let mut candidates: Vec<u64> = Vec::new();
        if let Some(leader) = self.group(shard).and_then(|g| g.leader()) {
            candidates.push(leader.0);
        }
        candidates.extend(self.replicas_of(shard));
        let payload = postcard::to_stdvec(&Request {
            shard: shard.0,
            op: op.clone(),
        })
        .map_err(|e| ClusterError::Internal(format!("cannot encode a membership request: {e}")))?;
        let mut asked = BTreeSet::new();
        let mut last = MembershipReply::NotLeader(None);
        let mut next = 0;
        while next < candidates.len() && asked.len() < 8 {
            let to = candidates[next];
            next += 1;
            if !asked.insert(to) {
                continue;
            }
            let reply = if to == self.node_id {
                self.serve_membership(shard, op.clone()).await
            } else {
                match self
                    .transport
                    .admin(NodeId(to), payload.clone(), OP_TIMEOUT)
                    .await
                {
                    Ok(bytes) => postcard::from_bytes(&bytes).unwrap_or_else(|e| {
                        MembershipReply::Failed(format!("undecodable answer: {e}"))
                    }),
                    Err(e) => MembershipReply::Failed(e.to_string()),
                }
            };
            match reply {
                MembershipReply::NotLeader(hint) => {
                    if let Some(leader) = hint.filter(|l| !asked.contains(l)) {
                        candidates.insert(next, leader);
                    }
                    // A failure says more than a pointer back to the node that failed (an
                    // older build's leader that could not decode the request, say).
                    if !matches!(last, MembershipReply::Failed(_)) {
                        last = MembershipReply::NotLeader(hint);
                    }
                }
                MembershipReply::Failed(reason) => last = MembershipReply::Failed(reason),
                done => return Ok(done),
            }
        }
        Ok(last)
    }

    /// Serves `op` if this node leads `shard`.
    async fn serve_membership(&self, shard: ShardId, op: MembershipOp) -> MembershipReply {
        let Some(group) = self.group(shard) else {
            return MembershipReply::NotLeader(None);
        };
        if !group.is_leader() {
            return MembershipReply::NotLeader(group.leader().map(|l| l.0));
        }
        let result =
            match op {
                MembershipOp::AddLearner { node, member } => {
                    group.add_learner(NodeId(node), member).await
                }
                MembershipOp::Progress { node } => {
                    return match group.replication_progress(NodeId(node)) {
                        Some((last_index, matched)) => MembershipReply::Progress {
                            last_index,
                            matched,
                        },
                        None => MembershipReply::Failed(format!(
                            "node {node:016x} is not replicated to by this leader"
                        )),
                    };
                }
                MembershipOp::SetVoters { voters } => {
                    if !voters.contains(&self.node_id) {
                        // Hand leadership to a staying voter that holds every entry, then let the
                        // new leader make the change: a leader removing itself would leave the
                        // group leaderless until an election.
                        let heir = voters
                            .iter()
                            .copied()
                            .map(NodeId)
                            .find(|v| self.is_linked(*v) && group.follower_caught_up(*v));
                        return match heir {
                            Some(heir) => match group.transfer_leader(heir).await {
                                Ok(()) => MembershipReply::Retry(format!(
                                    "handing leadership of shard {shard} to {heir:016x} first"
                                )),
                                Err(e) => MembershipReply::Failed(e.to_string()),
                            },
                            None => MembershipReply::Retry(format!(
                                "shard {shard}: no staying voter has caught up yet"
                            )),
                        };
                    }
                    group
                        .set_voters(voters.into_iter().map(NodeId).collect(), false)
                        .await
                }
                MembershipOp::RemoveLearner { node } => group.remove_learner(NodeId(node)).await,
                MembershipOp::Usage => {
                    return MembershipReply::Usage {
                        bytes: group.snapshot_size(),
                        applied: group.leader_and_applied().1,
                    };
                }
                MembershipOp::SplitPoint { range } => return self.split_point(shard, range).await,
                MembershipOp::Split {
                    at_slot,
                    child,
                    range,
                } => {
                    let split = LogCommand {
                        now_ms: crate::now_ms(),
                        command: Command::Split {
                            at_slot,
                            child,
                            range,
                        },
                    };
                    match group.write(split).await {
                        // Applied now, or by an earlier request: the shard's range shows which.
                        Ok(_) => {
                            let applied =
                                self.storage.slot_range(shard).ok().flatten().is_some_and(
                                    |(start, end)| start == range.0 && end + 1 == at_slot,
                                );
                            return if applied {
                                MembershipReply::Done
                            } else {
                                MembershipReply::Refused(format!(
                                    "shard {shard} does not own slots {}..={} any more",
                                    range.0, range.1
                                ))
                            };
                        }
                        Err(e) => Err(e),
                    }
                }
            };
        match result {
            Ok(()) => MembershipReply::Done,
            Err(trireme_raft::RaftLayerError::NotLeader { leader, .. }) => {
                MembershipReply::NotLeader(leader.map(|n| NodeId::from_name(&n.name).0))
            }
            Err(e) => MembershipReply::Failed(e.to_string()),
        }
    }
}

/// The transport's handle on the node for membership operations (weak, like forwarding's).
struct MembershipRequests(Weak<Node>);

impl ForwardHandler for MembershipRequests {
    fn handle(
        &self,
        _from: NodeId,
        payload: Vec<u8>,
    ) -> futures::future::BoxFuture<'static, Vec<u8>> {
        let node = self.0.upgrade();
        Box::pin(async move {
            let reply = match (node, postcard::from_bytes::<Request>(&payload)) {
                (Some(node), Ok(request)) => {
                    node.serve_membership(ShardId(request.shard), request.op)
                        .await
                }
                (None, _) => MembershipReply::Failed("this node is stopping".into()),
                (_, Err(e)) => MembershipReply::Failed(format!("{UNDECODABLE_REQUEST}: {e}")),
            };
            postcard::to_stdvec(&reply).unwrap_or_default()
        })
    }
}

/// How long a shard's counted split point answers again: a caller that gave up waiting for
/// the count (it reads every row) asks again in the next round and gets it.
const SPLIT_POINT_KEPT: Duration = Duration::from_secs(60);

/// A count of a shard's bytes by slot for its split point: running, or done with its answer.
#[derive(Debug, Clone)]
pub(crate) enum SplitCount {
    Running,
    Done {
        at: std::time::Instant,
        range: (u16, u16),
        slot: Option<u16>,
    },
}

impl Node {
    /// Where to split `shard`, whose slots are `range`: one count at a time per shard, its
    /// answer kept for [`SPLIT_POINT_KEPT`].
    async fn split_point(&self, shard: ShardId, range: (u16, u16)) -> MembershipReply {
        {
            let mut counts = self
                .split_counts
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            match counts.get(&shard.0) {
                Some(SplitCount::Running) => {
                    return MembershipReply::Failed(format!(
                        "still counting the bytes of shard {shard}; ask again"
                    ));
                }
                Some(SplitCount::Done { at, range: r, slot })
                    if *r == range && at.elapsed() < SPLIT_POINT_KEPT =>
                {
                    return MembershipReply::SplitPoint(*slot);
                }
                _ => {}
            }
            counts.insert(shard.0, SplitCount::Running);
        }
        let storage = self.storage.clone();
        let counted = tokio::task::spawn_blocking(move || storage.slot_bytes(shard)).await;
        let slot = match counted {
            Ok(Ok(bytes)) => Ok(crate::rebalance::balanced_split_slot(&bytes, range)),
            Ok(Err(e)) => Err(e.to_string()),
            Err(e) => Err(e.to_string()),
        };
        let mut counts = self
            .split_counts
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match slot {
            Ok(slot) => {
                counts.insert(
                    shard.0,
                    SplitCount::Done {
                        at: std::time::Instant::now(),
                        range,
                        slot,
                    },
                );
                MembershipReply::SplitPoint(slot)
            }
            Err(reason) => {
                counts.remove(&shard.0);
                MembershipReply::Failed(reason)
            }
        }
    }
}

/// The handler to install on the node's transport.
pub(crate) fn handler(node: &Arc<Node>) -> Arc<dyn ForwardHandler> {
    Arc::new(MembershipRequests(Arc::downgrade(node)))
}

/// A client-visible error for a membership step that could not be taken.
pub(crate) fn refused(code: ErrorCode, message: impl Into<String>) -> ClusterError {
    ClusterError::Request(TriremeError::new(code, message))
}
