//! `GET /v1/cluster/status`: the cluster's nodes with their lifecycle state, its shards, and
//! the replica moves in progress. One type, written by the server and read by `trireme cluster
//! status`, the tests and chaos.

use crate::ShardId;
use serde::{Deserialize, Serialize};

/// The whole document.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ClusterStatus {
    /// The cluster map's version; bumped by every change of placement or node state.
    pub epoch: u64,
    /// The node that answered.
    pub node: String,
    /// The metadata group's leader, if known.
    pub meta_leader: Option<String>,
    /// Voters wanted per shard.
    pub replication_factor: u32,
    /// Replica moves allowed at once, cluster-wide.
    pub max_moves: u32,
    /// Every node the cluster knows.
    pub nodes: Vec<NodeStatus>,
    /// Every shard.
    pub shards: Vec<ShardPlacement>,
    /// Moves in progress.
    pub moves: Vec<MoveStatus>,
    /// The split in progress, if any.
    #[serde(default)]
    pub splits: Vec<SplitResult>,
    /// The cluster version: the lowest protocol the cluster agreed every member runs.
    /// Replicated features of later protocols wait for it (0 from a node of a build from
    /// before it was recorded).
    #[serde(default)]
    pub cluster_version: u32,
}

impl ClusterStatus {
    /// Whether every shard has its replication factor in voters (capped by the active nodes),
    /// all on active nodes: the cluster is whole again.
    pub fn at_replication_factor(&self) -> bool {
        let active: Vec<&str> = self
            .nodes
            .iter()
            .filter(|n| n.state == "active")
            .map(|n| n.name.as_str())
            .collect();
        let factor = (self.replication_factor as usize).min(active.len());
        self.shards.iter().all(|s| {
            s.replicas.len() == factor && s.replicas.iter().all(|r| active.contains(&r.as_str()))
        })
    }

    /// Whether nothing moves or splits and every shard is at its replication factor.
    pub fn is_settled(&self) -> bool {
        self.moves.is_empty() && self.splits.is_empty() && self.at_replication_factor()
    }
}

/// One node.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeStatus {
    /// Its name.
    pub name: String,
    /// `joining`, `active`, `draining` or `removed`.
    pub state: String,
    /// Peer address.
    pub peer: String,
    /// Client HTTP address.
    pub http: String,
    /// Client RESP address.
    pub resp: String,
    /// Shards it holds a voter of.
    pub replicas: u32,
    /// Shards that prefer it as their leader.
    pub preferred_leaders: u32,
    /// `voter`, `learner` or `none`: its place in the metadata group.
    pub meta: String,
    /// Whether the answering node has a link to it (itself counts).
    pub linked: bool,
    /// The build and protocol it announced when it linked with the answering node (the
    /// answering node's own for itself); absent without a link.
    #[serde(default)]
    pub version: Option<crate::version::Version>,
    /// How far its drain has come, while it is `draining`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub drain: Option<DrainProgress>,
}

/// How far a draining node's drain has come. It is removed (and stops) once it holds no
/// replica, no move involves it, and it no longer votes in the metadata group.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct DrainProgress {
    /// Replicas still to move away: the shards it still holds a voter of (those moving now
    /// included).
    pub replicas_left: u32,
    /// Of those, the ones moving away now.
    pub moving: u32,
    /// Whether it still votes in the metadata group (its vote is handed over first).
    pub meta_voter: bool,
}

/// One shard's placement.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ShardPlacement {
    /// The shard.
    pub shard: ShardId,
    /// Its inclusive slot range.
    pub slots: [u16; 2],
    /// Its voters by name, the preferred leader first.
    pub replicas: Vec<String>,
    /// Its leader, when the answering node knows it.
    pub leader: Option<String>,
}

/// A replica move in progress.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MoveStatus {
    /// The shard.
    pub shard: ShardId,
    /// The node giving up its replica, if any.
    pub from: Option<String>,
    /// The node receiving one.
    pub to: String,
    /// `learner` (catching up), `voter` (membership change) or `cancel` (being given up).
    pub phase: String,
    /// When it started, Unix ms.
    pub started_ms: u64,
    /// The shard leader's last log index and what the new replica has of it, when known.
    pub progress: Option<(u64, Option<u64>)>,
}

/// The answer to `POST /v1/cluster/nodes/{name}/remove`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemoveResult {
    /// The node.
    pub node: String,
    /// Its state now: `draining` (its replicas are being moved away) or `removed`.
    pub state: String,
    /// Shards that lost their quorum with it (`--force` only): they cannot be repaired by
    /// moving replicas; their other replicas must come back.
    pub lost_quorum: Vec<u32>,
    /// What happens next, in words.
    pub message: String,
}

/// `GET /v1/cluster/placement`, and the answer to `PUT` on it: where voters and learners go.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Placement {
    /// The region whose nodes hold every shard's voters; `None` when no node declared a
    /// region at bootstrap (voters then go anywhere, and there are no learners).
    pub home_region: Option<String>,
    /// What the placement survives: `zone` (voters in distinct zones of the home region, one
    /// learner of every shard in every other region) or `region` (voters in three regions,
    /// leaders in the home region, learners in the regions beyond).
    pub survival: String,
    /// Every region with active nodes (`null`: nodes that declare none, counted as in the
    /// home region).
    pub regions: Vec<RegionNodes>,
    /// The cluster map's epoch the answer was read at.
    pub epoch: u64,
}

/// The active nodes of one region.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RegionNodes {
    /// The region label, `null` for nodes without one.
    pub region: Option<String>,
    /// Whether this is the home region: leaders go here (and with survival `zone`, every
    /// voter).
    pub home: bool,
    /// The nodes' names.
    pub nodes: Vec<String>,
    /// How many learners they hold, together.
    pub learners: usize,
}

/// The body of `PUT /v1/cluster/placement`: what to change (absent: unchanged).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct PlacementChange {
    /// The new home region: it must have an active node.
    #[serde(default)]
    pub home_region: Option<String>,
    /// The survival goal: `zone` or `region`.
    #[serde(default)]
    pub survival: Option<String>,
}

/// The answer to `POST /v1/cluster/finalize-upgrade`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FinalizeResult {
    /// The cluster version before.
    pub previous: u32,
    /// The cluster version now.
    pub cluster_version: u32,
    /// What changed, in words.
    pub message: String,
}

/// A shard split: the answer to `POST /v1/cluster/shards/{id}/split`, and a split in progress
/// in [`ClusterStatus`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SplitResult {
    /// The shard being split.
    pub shard: ShardId,
    /// The new shard, which takes the upper slots.
    pub child: ShardId,
    /// The first slot the new shard owns.
    pub at_slot: u16,
    /// The shard's slot range before the split.
    pub slots: [u16; 2],
    /// When it was decided, Unix ms.
    pub started_ms: u64,
    /// The cluster map's epoch that recorded the split (0 in a status listing).
    #[serde(default)]
    pub epoch: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, state: &str) -> NodeStatus {
        NodeStatus {
            name: name.into(),
            state: state.into(),
            peer: String::new(),
            http: String::new(),
            resp: String::new(),
            replicas: 0,
            preferred_leaders: 0,
            meta: "voter".into(),
            linked: true,
            version: None,
            drain: None,
        }
    }

    fn shard(replicas: &[&str]) -> ShardPlacement {
        ShardPlacement {
            shard: ShardId(0),
            slots: [0, 16383],
            replicas: replicas.iter().map(|r| r.to_string()).collect(),
            leader: None,
        }
    }

    #[test]
    fn settled_means_every_shard_whole_on_active_nodes_and_nothing_in_flight() {
        let mut status = ClusterStatus {
            epoch: 1,
            node: "a".into(),
            meta_leader: None,
            replication_factor: 3,
            max_moves: 2,
            cluster_version: 2,
            nodes: vec![
                node("a", "active"),
                node("b", "active"),
                node("c", "active"),
            ],
            shards: vec![shard(&["a", "b", "c"])],
            moves: Vec::new(),
            splits: Vec::new(),
        };
        assert!(status.is_settled());
        status.nodes[2].state = "removed".into();
        assert!(!status.at_replication_factor(), "a voter on a removed node");
        status.shards = vec![shard(&["a", "b"])];
        assert!(
            status.at_replication_factor(),
            "two active nodes cap the factor"
        );
        status.splits.push(SplitResult {
            shard: ShardId(0),
            child: ShardId(1),
            at_slot: 8192,
            slots: [0, 16383],
            started_ms: 0,
            epoch: 0,
        });
        assert!(!status.is_settled());
    }
}
