//! What an operator asks of the cluster through any node: its status (nodes with their
//! lifecycle state, shards, moves in progress) and the removal of a node, gracefully (its
//! replicas are moved away first) or by force (it is gone; its replicas are rebuilt from the
//! survivors). Each command is checked against the map as the metadata leader has it and
//! written with a compare-and-set: a bad or conflicting command changes nothing.

use crate::membership::{MembershipOp, MembershipReply, refused};
use crate::meta::{ClusterMap, MovePhase, NodeInfo, NodeState, PendingSplit, Survival};
use crate::{ClusterError, Node};
use std::collections::{BTreeMap, BTreeSet};
use std::time::{Duration, Instant};
use trireme_types::cluster_status::{
    ClusterStatus, DrainProgress, FinalizeResult, MoveStatus, NodeStatus, Placement,
    PlacementChange, RegionNodes, RemoveResult, ShardPlacement, SplitResult,
};
use trireme_types::{ErrorCode, NodeId, ShardId};

/// What a removal did.
pub type RemoveOutcome = RemoveResult;

impl Node {
    /// The cluster's nodes, shards and moves as this node sees them (the map from its own copy
    /// of the metadata group; move progress asked of the shards' leaders).
    pub async fn cluster_status(&self) -> ClusterStatus {
        let map = self.cluster_map();
        let meta = self.meta.status();
        let name = |id: u64| {
            self.node_info(NodeId(id))
                .map_or_else(|| format!("{id:016x}"), |n| n.name)
        };
        let mut nodes = Vec::new();
        let mut ids: BTreeSet<u64> = self.directory_snapshot().into_keys().collect();
        if let Some(map) = &map {
            ids.extend(map.members.keys());
            ids.extend(map.states.keys());
        }
        for id in ids {
            let info = self.node_info(NodeId(id)).unwrap_or_default();
            let state = map
                .as_ref()
                .and_then(|m| m.state(id))
                .map_or("joining", NodeState::as_str);
            let drain = map
                .as_ref()
                .filter(|m| m.state(id) == Some(NodeState::Draining))
                .map(|m| DrainProgress {
                    replicas_left: m.replica_count(id) as u32,
                    moving: m
                        .moves
                        .values()
                        .filter(|mv| mv.from == Some(id) && mv.phase != MovePhase::Cancel)
                        .count() as u32,
                    meta_voter: meta.voters.contains(&NodeId(id)),
                });
            let role = if meta.voters.contains(&NodeId(id)) {
                "voter"
            } else if meta.members.contains_key(&NodeId(id)) {
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
                linked: self.is_linked(NodeId(id)),
                version: self.node_version(NodeId(id)),
                drain,
            });
        }
        let routing = map
            .as_ref()
            .and_then(|m| m.shard_map())
            .map_or_else(|| self.shard_map(), std::sync::Arc::new);
        let shards = routing
            .shards()
            .map(|shard| {
                let slots = routing.slots_of(shard);
                ShardPlacement {
                    shard,
                    slots: [*slots.start(), *slots.end()],
                    // From the same copy of the map as the nodes above, so one status never
                    // mixes two versions of it.
                    replicas: map
                        .as_ref()
                        .and_then(|m| m.replicas.get(shard.0 as usize))
                        .into_iter()
                        .flatten()
                        .map(|id| name(*id))
                        .collect(),
                    leader: self
                        .group(shard)
                        .and_then(|g| g.leader())
                        .map(|l| name(l.0)),
                }
            })
            .collect();
        let splits = map
            .as_ref()
            .map(|m| {
                m.splits
                    .iter()
                    .map(|(shard, split)| split_result(ShardId(*shard), split))
                    .collect()
            })
            .unwrap_or_default();
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
                shard: ShardId(shard),
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
            splits,
            cluster_version: map.as_ref().map_or(0, |m| m.cluster_version),
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
        with_meta_leader(|| self.remove_node_once(name, force)).await
    }

    async fn remove_node_once(
        &self,
        name: &str,
        force: bool,
    ) -> Result<RemoveOutcome, ClusterError> {
        let id = crate::join::id_of(name);
        let factor = self.config.replication_factor as usize;
        let linked: BTreeSet<u64> = self
            .directory_snapshot()
            .into_keys()
            .filter(|id| self.is_linked(NodeId(*id)))
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
                give_up_learner_moves(map, |mv| mv.to == id);
            }
            Ok(Some(()))
        })
        .await?;
        answer.ok_or_else(|| refused(ErrorCode::Internal, "the removal was not decided"))
    }
}

impl Node {
    /// Stops the drain of node `name`: it is active again and keeps the replicas it still
    /// holds. Moves away from it that are still catching up are given up (their learners
    /// removed); a move already changing its shard's voters finishes, and the rebalancer
    /// evens the counts afterwards. Its metadata vote comes back with the next round.
    pub async fn cancel_drain(&self, name: &str) -> Result<RemoveOutcome, ClusterError> {
        with_meta_leader(|| self.cancel_drain_once(name)).await
    }

    async fn cancel_drain_once(&self, name: &str) -> Result<RemoveOutcome, ClusterError> {
        let id = crate::join::id_of(name);
        let mut answer = None;
        crate::rebalance::update_map(self, |map| {
            let outcome = check_cancel_drain(map, id, name)?;
            answer = Some(outcome);
            if map.state(id) != Some(NodeState::Draining) {
                return Ok(None);
            }
            map.states.insert(id, NodeState::Active);
            give_up_learner_moves(map, |mv| mv.from == Some(id));
            Ok(Some(()))
        })
        .await?;
        answer.ok_or_else(|| refused(ErrorCode::Internal, "the cancellation was not decided"))
    }
}

/// Gives up the moves `which` picks that are still in their learner phase. A move in its
/// voter phase is left to finish: its voter change may be in effect already (the map only
/// records it afterwards), and cancelling it would only remove a learner, leaving the map
/// naming other voters than the group has. Moves to a node removed by force finish so too,
/// and the planner then rebuilds that replica elsewhere like the node's others.
fn give_up_learner_moves(map: &mut ClusterMap, which: impl Fn(&crate::meta::Move) -> bool) {
    for mv in map.moves.values_mut() {
        if mv.phase == MovePhase::Learner && which(mv) {
            mv.phase = MovePhase::Cancel;
        }
    }
}

/// Checks the cancellation of node `name`'s drain against `map`; the answer to give.
fn check_cancel_drain(map: &ClusterMap, id: u64, name: &str) -> Result<RemoveResult, ClusterError> {
    let message = match map.state(id) {
        None => {
            return Err(refused(
                ErrorCode::NotFound,
                format!("no node named {name:?} in this cluster"),
            ));
        }
        Some(NodeState::Removed) => {
            return Err(refused(
                ErrorCode::Conflict,
                format!(
                    "node {name:?} was removed already: its drain had finished. To add capacity, start a node with a new --node-id and an empty data directory with --join"
                ),
            ));
        }
        Some(NodeState::Active) => {
            format!("node {name:?} is active (not draining); nothing changed")
        }
        Some(NodeState::Draining) => {
            let giving_up = map
                .moves
                .values()
                .filter(|mv| mv.from == Some(id) && mv.phase == MovePhase::Learner)
                .count();
            format!(
                "node {name:?} is active again: it keeps its {} replica(s); {giving_up} move(s) away from it still catching up are given up",
                map.replica_count(id)
            )
        }
    };
    Ok(RemoveResult {
        node: name.to_string(),
        state: NodeState::Active.as_str().to_string(),
        lost_quorum: Vec::new(),
        message,
    })
}

impl Node {
    /// Raises the cluster version to the protocol this build speaks, once every member that
    /// is not removed runs it: features that change what is replicated turn on, and nodes of
    /// older builds are refused from then on (so the upgrade cannot be rolled back). Refused,
    /// naming them, while some member runs an older build. With `[cluster]
    /// auto_finalize_upgrade` (the default) the metadata leader does this by itself.
    pub async fn finalize_upgrade(&self) -> Result<FinalizeResult, ClusterError> {
        with_meta_leader(|| self.finalize_upgrade_once()).await
    }

    async fn finalize_upgrade_once(&self) -> Result<FinalizeResult, ClusterError> {
        let wanted = self.transport.own_version().protocol;
        let mut answer = None;
        crate::rebalance::update_map(self, |map| {
            let previous = map.cluster_version;
            let next = crate::meta::next_cluster_version(map, wanted, |id| self.version_of(id))
                .map_err(|older| {
                    refused(
                        ErrorCode::Conflict,
                        format!(
                            "cannot finalize the upgrade to protocol {wanted}: {older}; upgrade those nodes (or remove them) first"
                        ),
                    )
                })?;
            let message = if next > previous {
                format!(
                    "the cluster version is {next} (was {previous}): its features are on, and nodes of older builds are refused from now on"
                )
            } else {
                format!("the cluster version is {previous} already; nothing changed")
            };
            answer = Some(FinalizeResult {
                previous,
                cluster_version: next.max(previous),
                message,
            });
            if next <= previous {
                return Ok(None);
            }
            map.cluster_version = next;
            Ok(Some(()))
        })
        .await?;
        answer.ok_or_else(|| refused(ErrorCode::Internal, "the finalize was not decided"))
    }
}

/// Distinct regions survival `region` needs: a shard's three voters, one in each.
const REGIONS_TO_SURVIVE_ONE: usize = 3;

impl Node {
    /// Where voters and learners go, as the cluster map says now.
    pub fn placement(&self) -> Placement {
        match self.cluster_map() {
            Some(map) => placement_of(&map, &self.directory_snapshot()),
            None => Placement {
                home_region: None,
                survival: Survival::Zone.as_str().into(),
                regions: Vec::new(),
                epoch: 0,
            },
        }
    }

    /// Changes the home region and the survival goal: the rebalancer then moves voters
    /// where the goal wants them (learner first: into the home region for `zone`, one per
    /// region for `region`), keeps a learner in every region without a voter, and hands
    /// leaderships to the home region. Refused, with the map unchanged, for a region with no
    /// active node, an unknown goal, survival `region` with fewer than three regions holding
    /// active nodes, or below cluster version [`trireme_types::version::since::REGIONS`].
    pub async fn set_placement(&self, change: PlacementChange) -> Result<Placement, ClusterError> {
        self.require_cluster_version(trireme_types::version::since::REGIONS, "a home region")?;
        let survival = match change.survival.as_deref() {
            None => None,
            Some(name) => Some(Survival::parse(name).ok_or_else(|| {
                let known: Vec<&str> = Survival::ALL.iter().map(|s| s.as_str()).collect();
                refused(
                    ErrorCode::InvalidArgument,
                    format!(
                        "survival {name:?} is not a survival goal (known: {}); nothing was changed",
                        known.join(", ")
                    ),
                )
            })?),
        };
        let directory = self.directory_snapshot();
        let written = with_meta_leader(|| async {
            crate::rebalance::update_map(self, |map| {
                let active = map.nodes_in(NodeState::Active);
                let region_of = |id: &u64| directory.get(id).and_then(|i| i.region.clone());
                let home = change
                    .home_region
                    .clone()
                    .or_else(|| map.home_region.clone());
                if let Some(wanted) = change.home_region.as_deref()
                    && !active.iter().any(|id| region_of(id).as_deref() == Some(wanted))
                {
                    return Err(refused(
                        ErrorCode::InvalidArgument,
                        format!("home region {wanted:?} has no active node; nothing was changed"),
                    ));
                }
                let survival = survival.unwrap_or(map.survival);
                if survival == Survival::Region {
                    // A node without a region counts as in the home region.
                    let regions: BTreeSet<String> = active
                        .iter()
                        .filter_map(|id| region_of(id).or_else(|| home.clone()))
                        .collect();
                    if regions.len() < REGIONS_TO_SURVIVE_ONE {
                        return Err(refused(
                            ErrorCode::InvalidArgument,
                            format!(
                                "survival \"region\" puts each shard's voters in {REGIONS_TO_SURVIVE_ONE} regions, and active nodes are in {} ({}); nothing was changed",
                                regions.len(),
                                regions.into_iter().collect::<Vec<_>>().join(", ")
                            ),
                        ));
                    }
                }
                if map.home_region == home && map.survival == survival {
                    return Ok(None);
                }
                tracing::info!(
                    from = ?(map.home_region.as_deref(), map.survival.as_str()),
                    to = ?(home.as_deref(), survival.as_str()),
                    "the placement changes"
                );
                map.home_region = home;
                map.survival = survival;
                Ok(Some(()))
            })
            .await
        })
        .await?;
        // The map as written (or as read, unchanged), not this node's copy, which may not
        // have caught up yet.
        let map = match written {
            Some((map, ())) => map,
            None => self.read_map_with_index().await?.0,
        };
        Ok(placement_of(&map, &directory))
    }

    /// Splits `shard` in two at `at_slot` (default: the middle of its range): the metadata
    /// leader has the shard's leader apply the split, then gives the upper slots to a new
    /// shard on the same voters, which the rebalancer moves like any other. Returns once the
    /// split is decided; `cluster status` shows it until it is done (about a second).
    pub async fn split_shard(
        &self,
        shard: u32,
        at_slot: Option<u16>,
    ) -> Result<SplitResult, ClusterError> {
        with_meta_leader(|| plan_split(self, ShardId(shard), at_slot)).await
    }
}

/// The placement `map` describes, with each active node's region from `directory`.
fn placement_of(map: &ClusterMap, directory: &BTreeMap<u64, NodeInfo>) -> Placement {
    let home = map.home_region.as_deref();
    let mut regions: BTreeMap<Option<String>, RegionNodes> = BTreeMap::new();
    for id in map.nodes_in(NodeState::Active) {
        let info = directory.get(&id);
        let region = info.and_then(|i| i.region.clone());
        let entry = regions
            .entry(region.clone())
            .or_insert_with(|| RegionNodes {
                home: crate::meta::in_home_region(home, region.as_deref()),
                region,
                nodes: Vec::new(),
                learners: 0,
            });
        entry
            .nodes
            .push(info.map_or_else(|| format!("{id:016x}"), |i| i.node.name.clone()));
        entry.learners += map.learner_count(id);
    }
    Placement {
        home_region: map.home_region.clone(),
        survival: map.survival.as_str().into(),
        regions: regions.into_values().collect(),
        epoch: map.epoch,
    }
}

/// How long an operator's command waits for the metadata group to have a reachable leader:
/// the node that just died may have led it, and removing that node is often the next thing
/// an operator does.
const META_WAIT: Duration = Duration::from_secs(15);

/// Runs `attempt` again while it fails because the metadata group has no reachable leader
/// (then nothing was written: a write whose outcome is unknown answers a timeout, which is
/// not retried), for at most [`META_WAIT`].
async fn with_meta_leader<T, F, Fut>(mut attempt: F) -> Result<T, ClusterError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, ClusterError>>,
{
    let deadline = Instant::now() + META_WAIT;
    loop {
        match attempt().await {
            Err(e) if crate::router::is_transient(&e) && Instant::now() < deadline => {
                tracing::info!(error = %e, "operator command: no metadata leader yet; trying again");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
            other => return other,
        }
    }
}

/// Records a split of `shard` in the map, if `check_split` allows it.
pub(crate) async fn plan_split(
    node: &Node,
    shard: ShardId,
    at_slot: Option<u16>,
) -> Result<SplitResult, ClusterError> {
    let written = crate::rebalance::update_map(node, |map| {
        let split = check_split(map, shard, at_slot, crate::now_ms())?;
        let answer = split_result(shard, &split);
        map.splits.insert(shard.0, split);
        Ok(Some(answer))
    })
    .await?;
    written
        .map(|(map, answer)| SplitResult {
            epoch: map.epoch,
            ..answer
        })
        .ok_or_else(|| refused(ErrorCode::Internal, "the split was not decided"))
}

fn split_result(shard: ShardId, split: &PendingSplit) -> SplitResult {
    SplitResult {
        shard,
        child: ShardId(split.child),
        at_slot: split.at_slot,
        slots: [split.range.0, split.range.1],
        started_ms: split.started_ms,
        epoch: 0,
    }
}

/// Checks a split of `shard` at `at_slot` (the middle of its range if `None`) against `map`.
fn check_split(
    map: &ClusterMap,
    shard: ShardId,
    at_slot: Option<u16>,
    now_ms: u64,
) -> Result<PendingSplit, ClusterError> {
    let ranges = map.slot_ranges();
    let Some(&(start, end)) = ranges.get(shard.0 as usize) else {
        return Err(refused(
            ErrorCode::NotFound,
            format!(
                "no shard {shard}: the cluster has shards 0 to {}",
                ranges.len().saturating_sub(1)
            ),
        ));
    };
    if let Some((other, _)) = map.splits.iter().next() {
        return Err(refused(
            ErrorCode::Conflict,
            format!("shard {other} is being split; one split at a time, try again in a moment"),
        ));
    }
    if map.moves.contains_key(&shard.0) {
        return Err(refused(
            ErrorCode::Conflict,
            format!(
                "shard {shard} is moving a replica; split it once the move is done (cluster status shows moves)"
            ),
        ));
    }
    if start == end {
        return Err(refused(
            ErrorCode::InvalidArgument,
            format!("shard {shard} owns a single slot ({start}) and cannot be split"),
        ));
    }
    let at_slot = at_slot.unwrap_or(start + (end - start).div_ceil(2));
    if at_slot <= start || at_slot > end {
        return Err(refused(
            ErrorCode::InvalidArgument,
            format!(
                "slot {at_slot} does not split shard {shard}: it owns slots {start}..={end}, so the new shard must start at a slot from {} to {end}",
                start + 1
            ),
        ));
    }
    Ok(PendingSplit {
        at_slot,
        child: map.shard_count(),
        range: (start, end),
        started_ms: now_ms,
    })
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
                region: None,
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
    fn splits_that_cannot_be_done_are_refused_and_the_rest_take_the_next_id() {
        let infos = nodes(3);
        let mut map = place(&infos, 4, 3);
        let e = check_split(&map, ShardId(4), None, 1).unwrap_err();
        assert_eq!(e.to_client().code, ErrorCode::NotFound);
        let e = check_split(&map, ShardId(1), Some(4096), 1).unwrap_err();
        assert_eq!(e.to_client().code, ErrorCode::InvalidArgument);
        assert!(e.to_string().contains("4097"), "{e}");
        let split = check_split(&map, ShardId(1), None, 1).unwrap();
        assert_eq!(
            (split.child, split.at_slot, split.range),
            (4, 6144, (4096, 8191))
        );
        map.splits.insert(1, split);
        let e = check_split(&map, ShardId(2), None, 1).unwrap_err();
        assert_eq!(e.to_client().code, ErrorCode::Conflict);
        map.finish_split(ShardId(1));
        assert_eq!(map.shard_count(), 5);
        assert_eq!(map.slot_ranges()[1], (4096, 6143));
        assert_eq!(map.slot_ranges()[4], (6144, 8191));
        assert_eq!(map.replicas[4], map.replicas[1]);
        assert!(!map.is_bootstrap_membership(ShardId(4)));
        assert_eq!(map.origins.get(&4), Some(&(1, 6144)));
        let routing = map.shard_map().expect("a cover");
        assert_eq!(routing.shard_of_slot(6144), ShardId(4));
        map.moves.insert(
            2,
            crate::meta::Move {
                from: None,
                to: infos[0].id(),
                phase: MovePhase::Learner,
                started_ms: 0,
                learner: false,
            },
        );
        let e = check_split(&map, ShardId(2), None, 1).unwrap_err();
        assert_eq!(e.to_client().code, ErrorCode::Conflict);
        let mut single = place(&infos, 16384, 3);
        single.slots = single.slot_ranges();
        let e = check_split(&single, ShardId(0), None, 1).unwrap_err();
        assert_eq!(e.to_client().code, ErrorCode::InvalidArgument);
    }

    #[test]
    fn only_moves_still_catching_up_are_given_up() {
        let infos = nodes(4);
        let mut map = place(&infos, 4, 3);
        let n4 = infos[3].id();
        let n1 = infos[0].id();
        for (shard, phase) in [(0u32, MovePhase::Learner), (1, MovePhase::Voter)] {
            map.moves.insert(
                shard,
                crate::meta::Move {
                    from: Some(n1),
                    to: n4,
                    phase,
                    started_ms: 0,
                    learner: false,
                },
            );
        }
        give_up_learner_moves(&mut map, |mv| mv.to == n4);
        assert_eq!(map.moves[&0].phase, MovePhase::Cancel);
        assert_eq!(map.moves[&1].phase, MovePhase::Voter);
    }

    #[test]
    fn a_drain_is_cancelled_until_it_has_finished() {
        let infos = nodes(4);
        let mut map = place(&infos, 4, 3);
        let n4 = infos[3].id();
        let e = check_cancel_drain(&map, 99, "nx").unwrap_err();
        assert_eq!(e.to_client().code, ErrorCode::NotFound);
        let ok = check_cancel_drain(&map, n4, "n4").unwrap();
        assert!(ok.message.contains("nothing changed"), "{}", ok.message);
        map.states.insert(n4, NodeState::Draining);
        let ok = check_cancel_drain(&map, n4, "n4").unwrap();
        assert_eq!(ok.state, "active");
        map.states.insert(n4, NodeState::Removed);
        let e = check_cancel_drain(&map, n4, "n4").unwrap_err();
        assert_eq!(e.to_client().code, ErrorCode::Conflict);
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
