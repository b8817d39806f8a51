//! What `/metrics` shows of this node's shard replicas: role, term, indexes, leader changes,
//! and on a leader how far each follower is behind. Read from each group's Raft metrics, so
//! a scrape takes no lock on the request path and does no I/O.

use crate::Node;
use std::sync::atomic::Ordering;
use trireme_types::{NodeId, ShardId};

/// One shard replica on this node.
#[derive(Debug, Clone)]
pub struct ReplicaStats {
    /// The shard.
    pub shard: ShardId,
    /// This node's role in the group (`Leader`, `Follower`, `Candidate`, `Learner`).
    pub role: String,
    /// Current term.
    pub term: u64,
    /// Last log index applied here.
    pub applied_index: u64,
    /// Last log index known committed.
    pub committed_index: u64,
    /// Last log index purged from this replica's log.
    pub purged_index: u64,
    /// Times the known leader changed since this replica was opened.
    pub leader_changes: u64,
    /// Elections (terms begun) seen since this replica was opened.
    pub elections: u64,
    /// On a leader: each follower's name (or id, if unknown) and how many entries it is
    /// behind the leader's log.
    pub follower_lag: Vec<(String, u64)>,
    /// On a leader: each snapshot being sent to a follower, as its name (or id), the bytes
    /// it has acknowledged and the snapshot's size.
    pub snapshots: Vec<(String, u64, u64)>,
}

/// [`Node::replica_stats`] in three numbers: replicas held here, how many of them lead, and
/// the most entries any follower of those is behind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicaCounts {
    /// Shard replicas held here.
    pub replicas: u32,
    /// Of those, the ones this node leads.
    pub leaders: u32,
    /// The most log entries any follower of a shard led here is behind (0 when it leads none).
    pub max_lag: u64,
}

impl Node {
    /// Replicas, leaders and the largest follower lag, read from each group's published
    /// metrics without copying any group's status, naming a node or allocating: cheap enough
    /// for a sampler that runs every second (the console's figures).
    pub fn replica_counts(&self) -> ReplicaCounts {
        let mut counts = ReplicaCounts::default();
        self.for_each_group(|group| {
            counts.replicas += 1;
            if group.is_leader() {
                counts.leaders += 1;
                counts.max_lag = counts.max_lag.max(group.max_follower_lag());
            }
        });
        counts
    }

    /// Every shard replica held on this node, by shard.
    pub fn replica_stats(&self) -> Vec<ReplicaStats> {
        let transfers = self.transport.snapshot_transfers();
        let name_of = |id: NodeId| {
            self.node_info(id)
                .map_or_else(|| id.0.to_string(), |n| n.name)
        };
        let mut out: Vec<ReplicaStats> = self
            .local_groups()
            .into_iter()
            .map(|group| {
                let status = group.status();
                let events = group.events();
                let follower_lag = group
                    .follower_lag()
                    .into_iter()
                    .map(|(id, lag)| (name_of(id), lag))
                    .collect();
                let snapshots = transfers
                    .iter()
                    .filter(|t| t.group == group.group_id())
                    .map(|t| (name_of(t.target), t.sent, t.total))
                    .collect();
                ReplicaStats {
                    shard: group.shard(),
                    role: format!("{:?}", status.state),
                    term: status.term,
                    applied_index: status.applied_index,
                    committed_index: status.committed_index,
                    purged_index: status.purged_index,
                    leader_changes: events.leader_changes.load(Ordering::Relaxed),
                    elections: events.elections.load(Ordering::Relaxed),
                    follower_lag,
                    snapshots,
                }
            })
            .collect();
        out.sort_by_key(|r| r.shard.0);
        out
    }
}
