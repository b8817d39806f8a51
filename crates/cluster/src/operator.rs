//! What an operator asks of the cluster through any node: its status (nodes with their
//! lifecycle state, shards, moves in progress) and the removal of a node, gracefully (its
//! replicas are moved away first) or by force (it is gone; its replicas are rebuilt from the
//! survivors). Each command is checked against the map as the metadata leader has it and
//! written with a compare-and-set: a bad or conflicting command changes nothing.

use crate::membership::{MembershipOp, MembershipReply, refused};
use crate::meta::{ClusterMap, MovePhase, NodeState};
use crate::{ClusterError, Node};
use std::collections::BTreeSet;
use trireme_types::cluster_status::{
    ClusterStatus, MoveStatus, NodeStatus, RemoveResult, ShardPlacement,
};
use trireme_types::{ErrorCode, ShardId};

/// What a removal did.
pub type RemoveOutcome = RemoveResult;

impl Node {
    /// The cluster's nodes, shards and moves as this node sees them (the map from its own copy
    /// of the metadata group; move progress asked of the shards' leaders).
    pub async fn cluster_status(&self) -> ClusterStatus {
        let map = self.cluster_map();
        let meta = self.meta.status();
        let name = |id: u64| {
            self.node_info(id)
                .map_or_else(|| format!("{id:016x}"), |n| n.name)
        };
        let mut nodes = Vec::new();
        let mut ids: BTreeSet<u64> = self.directory_snapshot().into_keys().collect();
        if let Some(map) = &map {
            ids.extend(map.members.keys());
            ids.extend(map.states.keys());
        }
        for id in ids {
            let info = self.node_info(id).unwrap_or_default();
            let state = map
                .as_ref()
                .and_then(|m| m.state(id))
                .map_or("joining", NodeState::as_str);
            let role = if meta.voters.contains(&id) {
                "voter"
            } else if meta.members.contains_key(&id) {
                "learner"
            } else {
                "none"
            };
            nodes.push(NodeStatus {
                name: if info.name.is_empty() {
                    name(id)
                } else {
                    info.name
                },
                state: state.to_string(),
                peer: info.peer_addr,
                http: info.http_addr,
                resp: info.resp_addr,
                replicas: map.as_ref().map_or(0, |m| m.replica_count(id)) as u32,
                preferred_leaders: map.as_ref().map_or(0, |m| m.preferred_count(id)) as u32,
                meta: role.to_string(),
                linked: self.is_linked(id),
            });
        }
        let shards = self
            .map
            .shards()
            .map(|shard| {
                let slots = self.map.slots_of(shard);
                ShardPlacement {
                    shard: shard.0,
                    slots: [*slots.start(), *slots.end()],
                    replicas: self.replicas_of(shard).into_iter().map(name).collect(),
                    leader: self.group(shard).and_then(|g| g.leader()).map(name),
                }
            })
            .collect();
        let mut moves = Vec::new();
        for (shard, mv) in map.as_ref().map(|m| m.moves.clone()).unwrap_or_default() {
            let progress = if mv.phase == MovePhase::Learner {
                match self
                    .on_shard_leader(ShardId(shard), MembershipOp::Progress { node: mv.to })
                    .await
                {
                    Ok(MembershipReply::Progress {
                        last_index,
                        matched,
                    }) => Some((last_index, matched)),
                    _ => None,
                }
            } else {
                None
            };
            moves.push(MoveStatus {
                shard,
                from: mv.from.map(name),
                to: name(mv.to),
                phase: match mv.phase {
                    MovePhase::Learner => "learner",
                    MovePhase::Voter => "voter",
                    MovePhase::Cancel => "cancel",
                }
                .to_string(),
                started_ms: mv.started_ms,
                progress,
            });
        }
        ClusterStatus {
            epoch: map.as_ref().map_or(0, |m| m.epoch),
            node: self.me.name.clone(),
            meta_leader: self.meta_leader().map(|n| n.name),
            replication_factor: self.config.replication_factor,
            max_moves: self.config.max_moves as u32,
            nodes,
            shards,
            moves,
        }
    }

    /// Removes node `name` from the cluster. Without `force` the node is drained: its
    /// replicas move to the other nodes, its leaderships and metadata vote are handed over,
    /// then it is marked removed and stops. With `force` (for a node that is gone) it is
    /// marked removed at once and every shard it held gets a new replica from the survivors;
    /// shards that lost their quorum with it are named in the answer.
    pub async fn remove_node(
        &self,
        name: &str,
        force: bool,
    ) -> Result<RemoveOutcome, ClusterError> {
        let id = crate::join::id_of(name);
        let factor = self.config.replication_factor as usize;
        let linked: BTreeSet<u64> = self
            .directory_snapshot()
            .into_keys()
            .filter(|id| self.is_linked(*id))
            .collect();
        let mut answer = None;
        crate::rebalance::update_map(self, |map| {
            let outcome = plan_removal(map, id, name, force, factor, &linked)?;
            let already_draining = !force && map.state(id) == Some(NodeState::Draining);
            answer = Some(outcome);
            if already_draining {
                return Ok(None);
            }
            let state = if force {
                NodeState::Removed
            } else {
                NodeState::Draining
            };
            map.states.insert(id, state);
            if force {
                // A move towards the dead node is given up.
                for mv in map.moves.values_mut() {
                    if mv.to == id {
                        mv.phase = MovePhase::Cancel;
                    }
                }
            }
            Ok(Some(()))
        })
        .await?;
        answer.ok_or_else(|| refused(ErrorCode::Internal, "the removal was not decided"))
    }
}

/// Checks a removal against `map`; the answer to give when it may go ahead.
fn plan_removal(
    map: &ClusterMap,
    id: u64,
    name: &str,
    force: bool,
    factor: usize,
    linked: &BTreeSet<u64>,
) -> Result<RemoveResult, ClusterError> {
    match map.state(id) {
        None => {
            return Err(refused(
                ErrorCode::NotFound,
                format!("no node named {name:?} in this cluster"),
            ));
        }
        Some(NodeState::Removed) => {
            return Err(refused(
                ErrorCode::InvalidArgument,
                format!("node {name:?} was removed already"),
            ));
        }
        Some(NodeState::Draining) if !force => {
            return Ok(RemoveResult {
                node: name.to_string(),
                state: NodeState::Draining.as_str().to_string(),
                lost_quorum: Vec::new(),
                message: format!("node {name:?} is already draining"),
            });
        }
        Some(_) => {}
    }
    let active_after = map
        .nodes_in(NodeState::Active)
        .into_iter()
        .filter(|n| *n != id)
        .count();
    let widest = map.replicas.iter().map(Vec::len).max().unwrap_or(0);
    if !force && active_after < widest.min(factor.max(1)) {
        return Err(refused(
            ErrorCode::Conflict,
            format!(
                "removing {name:?} would leave {active_after} active node(s) for shards of {widest} voters: add a node first (or use --force for a node that is gone for good)"
            ),
        ));
    }
    if !force {
        return Ok(RemoveResult {
            node: name.to_string(),
            state: NodeState::Draining.as_str().to_string(),
            lost_quorum: Vec::new(),
            message: format!(
                "node {name:?} is draining: its {} replica(s) move to the other nodes, then it is removed and stops",
                map.replica_count(id)
            ),
        });
    }
    let lost_quorum: Vec<u32> = map
        .replicas
        .iter()
        .enumerate()
        .filter(|(_, voters)| voters.contains(&id))
        .filter(|(_, voters)| {
            let alive = voters
                .iter()
                .filter(|v| **v != id && linked.contains(v))
                .count();
            alive < voters.len() / 2 + 1
        })
        .map(|(shard, _)| shard as u32)
        .collect();
    let message = if lost_quorum.is_empty() {
        format!(
            "node {name:?} is removed: each of its {} replica(s) is rebuilt on another node from the survivors",
            map.replica_count(id)
        )
    } else {
        format!(
            "node {name:?} is removed, but shard(s) {lost_quorum:?} have fewer than a quorum of live replicas left: they cannot serve or be repaired until enough of their other replicas come back (restart those nodes with their data); the other shards are rebuilt"
        )
    };
    Ok(RemoveResult {
        node: name.to_string(),
        state: NodeState::Removed.as_str().to_string(),
        lost_quorum,
        message,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{NodeInfo, place};
    use trireme_raft::PeerNode;

    fn nodes(n: usize) -> Vec<NodeInfo> {
        (1..=n)
            .map(|i| NodeInfo {
                node: PeerNode {
                    name: format!("n{i}"),
                    peer_addr: format!("n{i}:1"),
                    ..PeerNode::default()
                },
                rack: None,
                zone: None,
            })
            .collect()
    }

    #[test]
    fn removals_that_would_break_the_cluster_are_refused() {
        let infos = nodes(3);
        let map = place(&infos, 4, 3);
        let all: BTreeSet<u64> = infos.iter().map(NodeInfo::id).collect();
        let n3 = infos[2].id();
        let e = plan_removal(&map, 99, "nx", false, 3, &all).unwrap_err();
        assert_eq!(e.to_client().code, ErrorCode::NotFound);
        let e = plan_removal(&map, n3, "n3", false, 3, &all).unwrap_err();
        assert_eq!(e.to_client().code, ErrorCode::Conflict);
        assert!(e.to_string().contains("add a node first"), "{e}");
        // By force it goes ahead, and with two survivors every shard keeps its quorum.
        let ok = plan_removal(&map, n3, "n3", true, 3, &all).unwrap();
        assert!(ok.lost_quorum.is_empty());
        assert_eq!(ok.state, "removed");
    }

    #[test]
    fn a_forced_removal_names_the_shards_that_lost_their_quorum() {
        let infos = nodes(3);
        let map = place(&infos, 4, 3);
        let only_n1: BTreeSet<u64> = [infos[0].id()].into();
        let ok = plan_removal(&map, infos[2].id(), "n3", true, 3, &only_n1).unwrap();
        assert_eq!(ok.lost_quorum, vec![0, 1, 2, 3]);
        assert!(ok.message.contains("cannot serve"), "{}", ok.message);
    }

    #[test]
    fn draining_a_fourth_node_is_allowed_once() {
        let infos = nodes(4);
        let map = place(&infos, 4, 3);
        let all: BTreeSet<u64> = infos.iter().map(NodeInfo::id).collect();
        let ok = plan_removal(&map, infos[3].id(), "n4", false, 3, &all).unwrap();
        assert_eq!(ok.state, "draining");
        let mut draining = map.clone();
        draining.states.insert(infos[3].id(), NodeState::Draining);
        let again = plan_removal(&draining, infos[3].id(), "n4", false, 3, &all).unwrap();
        assert!(again.message.contains("already draining"));
    }
}
