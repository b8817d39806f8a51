//! What the metadata group (group 0) holds, and how shards are placed on nodes.
//!
//! The metadata group's state machine is an ordinary keyspace under a storage shard id no data
//! shard uses, so it is replicated, snapshotted and recovered like any shard. It holds:
//! - `node/<name>`: each node's [`NodeInfo`] (addresses, rack, zone), written by the node itself
//!   at every start (and by the member that admits a joining node), so clients and peers always
//!   see its current addresses;
//! - `placement`: the [`ClusterMap`]: where every shard's replicas live, each node's lifecycle
//!   state, and the replica moves in progress. The metadata leader writes it first when every
//!   initial node has registered (create-only), and from then on only with a compare-and-set
//!   on the row's modify index, so two writers (a new metadata leader, an operator's command)
//!   never overwrite each other's change. Every change bumps the map's epoch.

use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use trireme_raft::PeerNode;
use trireme_types::version::Version;
use trireme_types::{NodeId, ShardId};

/// The storage shard id of the metadata group's rows (data shards count up from 0).
pub(crate) const META_SHARD: ShardId = ShardId(u32::MAX);
/// At most this many nodes are voters of the metadata group; the rest are learners.
pub(crate) const META_VOTERS: usize = 5;

/// Key of a node's row.
pub(crate) fn node_key(name: &str) -> Vec<u8> {
    format!("node/{name}").into_bytes()
}
/// Prefix of every node row.
pub(crate) const NODE_PREFIX: &[u8] = b"node/";
/// Key of the cluster map's row (named for what it first held).
pub(crate) const PLACEMENT_KEY: &[u8] = b"placement";

/// A node as the cluster knows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct NodeInfo {
    /// Name and addresses.
    pub node: PeerNode,
    /// Rack label; replicas of a shard avoid sharing one.
    pub rack: Option<String>,
    /// Zone label; replicas of a shard avoid sharing one before racks are considered.
    pub zone: Option<String>,
    /// Region label. Not part of a join request's encoding (postcard, where a new field
    /// would shift what follows it): it travels in the node's row ([`NodeRow::region`]),
    /// which the node writes itself at every start.
    #[serde(skip)]
    pub region: Option<String>,
}

/// A node's row in the metadata group: its [`NodeInfo`] and the build it runs. A separate
/// type because a [`NodeInfo`] also travels in postcard (a join request), where a new field
/// would shift what follows it; in the row's JSON a build that does not know `version`
/// skips it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct NodeRow {
    /// Name, addresses, labels.
    #[serde(flatten)]
    pub info: NodeInfo,
    /// The region label (see [`NodeInfo::region`]); absent in rows of nodes without one and
    /// of builds from before regions.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// The build and protocol it runs, as it last registered (none: a build from before
    /// protocol 2, which did not record it). What the cluster version waits for.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub version: Option<Version>,
}

impl NodeInfo {
    /// The node's Raft id.
    pub fn id(&self) -> u64 {
        NodeId::from_name(&self.node.name).0
    }
}

/// Where a node is in its life in the cluster. A node that has registered but is not in the
/// map yet is *joining*; the metadata leader makes it active once it follows the metadata log.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize, Deserialize)]
pub enum NodeState {
    /// Holds replicas and is given more by the rebalancer.
    Active,
    /// An operator asked for it to leave: its replicas are moved away, its leaderships and
    /// its metadata vote handed over; then it becomes `Removed`.
    Draining,
    /// Gone for good: its id is never reused, its data directory is refused.
    Removed,
}

impl NodeState {
    /// The lower-case name shown by `cluster status`.
    pub fn as_str(self) -> &'static str {
        match self {
            NodeState::Active => "active",
            NodeState::Draining => "draining",
            NodeState::Removed => "removed",
        }
    }
}

/// The step a replica move is at. Each step is recorded in the map before it is taken, so a
/// new metadata leader resumes a move where the last one stopped (rolled forward or back).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub enum MovePhase {
    /// The target opens the shard's group; the leader adds it as a learner and sends it a
    /// snapshot, then the log, until it is caught up.
    Learner,
    /// The learner is caught up: the leader makes it a voter in place of the replica leaving
    /// (handing leadership away first when the leaving replica leads).
    Voter,
    /// Given up (the target left or stopped answering): the learner is removed from the
    /// group's membership, and the move is forgotten.
    Cancel,
}

/// One replica of a shard moving to another node (or, with no `from`, a replica added to a
/// shard below its replication factor).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Move {
    /// The node whose replica leaves, if any.
    pub from: Option<u64>,
    /// The node that receives a replica.
    pub to: u64,
    /// The step it is at.
    pub phase: MovePhase,
    /// When it started, Unix ms.
    pub started_ms: u64,
    /// The replica stays a learner: once caught up it is recorded among the shard's learners
    /// instead of replacing a voter (a replica in a region other than the home region).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub learner: bool,
}

/// A split the metadata leader has decided and not yet finished: the shard's leader is asked
/// to apply it (a [`trireme_types::Command::Split`] entry in the shard's log), then the map
/// gives the upper slots to the new shard, placed on the shard's voters.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingSplit {
    /// The first slot the new shard owns.
    pub at_slot: u16,
    /// The new shard's id: the next free one when the split was decided.
    pub child: u32,
    /// The shard's slot range when the split was decided.
    pub range: (u16, u16),
    /// When it was decided, Unix ms.
    pub started_ms: u64,
}

/// Where every shard's replicas live and what state every node is in: the one document the
/// metadata leader changes, and every node follows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct ClusterMap {
    /// Bumped by every change; clients compare it to tell the topology changed.
    #[serde(default)]
    pub epoch: u64,
    /// Voters of shard `i`, by node id; the first is the shard's preferred leader.
    pub replicas: Vec<Vec<u64>>,
    /// Name and peer address of every node that ever held a replica: what group memberships
    /// carry about a node, nothing that changes at restart.
    pub members: BTreeMap<u64, PeerNode>,
    /// Completed membership changes per shard. At 0 a shard still has the membership it was
    /// bootstrapped with, and only then may a replica initialize its group itself.
    #[serde(default)]
    pub generations: Vec<u64>,
    /// Lifecycle of every node in the map; a node missing here is joining.
    #[serde(default)]
    pub states: BTreeMap<u64, NodeState>,
    /// Replica moves in progress, at most one per shard.
    #[serde(default)]
    pub moves: BTreeMap<u32, Move>,
    /// Inclusive slot range of each shard, by shard id. Empty until the first split: the
    /// shards then own equal ranges.
    #[serde(default)]
    pub slots: Vec<(u16, u16)>,
    /// The split in progress, by the shard being split (one at a time in the cluster, so the
    /// new shard's id is known when it is decided).
    #[serde(default)]
    pub splits: BTreeMap<u32, PendingSplit>,
    /// Where each shard made by a split came from: its parent and the first slot it took.
    #[serde(default)]
    pub origins: BTreeMap<u32, (u32, u16)>,
    /// The lowest protocol every member runs, as far as the cluster has agreed: features it
    /// brought may be used, and nodes of an older one are refused. It only rises (see
    /// [`next_cluster_version`]). A map written before it was recorded reads 0, and 0 is
    /// left out, so such a map is written as it was.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub cluster_version: u32,
    /// The region whose nodes hold every shard's voters; each other region holds one learner
    /// of every shard. `None` (no node declared a region at bootstrap): voters go anywhere and
    /// there are no learners. Set from cluster version
    /// [`trireme_types::version::since::REGIONS`] on.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub home_region: Option<String>,
    /// Learners of each shard, by shard id: asynchronous replicas that never vote.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub learners: BTreeMap<u32, Vec<u64>>,
    /// What the placement survives: the loss of a zone (voters in the home region) or of a
    /// whole region (voters in distinct regions).
    #[serde(default, skip_serializing_if = "Survival::is_zone")]
    pub survival: Survival,
}

/// What losing part of the cluster may cost: the placement's goal, set by the operator.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Survival {
    /// A shard's voters in distinct zones of the home region, one learner in every other
    /// region: writes commit inside the home region, and stop if it is lost.
    #[default]
    Zone,
    /// A shard's voters in distinct regions (leaders kept in the home region, learners in
    /// regions beyond the voters): writes pay a round trip to the nearest other region, and
    /// go on when a region is lost.
    Region,
}

impl Survival {
    /// Every goal, by the name an operator gives it.
    pub const ALL: [Survival; 2] = [Survival::Zone, Survival::Region];

    /// Its name in the API and the CLI.
    pub fn as_str(self) -> &'static str {
        match self {
            Survival::Zone => "zone",
            Survival::Region => "region",
        }
    }

    /// The goal named `name`.
    pub fn parse(name: &str) -> Option<Survival> {
        Survival::ALL.into_iter().find(|s| s.as_str() == name)
    }

    fn is_zone(&self) -> bool {
        *self == Survival::Zone
    }
}

impl ClusterMap {
    /// The voters of `shard` with the identities their group was initialized with.
    pub fn membership(&self, shard: ShardId) -> BTreeMap<NodeId, PeerNode> {
        self.replicas
            .get(shard.0 as usize)
            .into_iter()
            .flatten()
            .filter_map(|id| self.members.get(id).map(|n| (NodeId(*id), n.clone())))
            .collect()
    }

    /// Whether node `id` holds a voting replica of `shard`.
    pub fn hosts(&self, shard: ShardId, id: u64) -> bool {
        self.replicas
            .get(shard.0 as usize)
            .is_some_and(|r| r.contains(&id))
    }

    /// Whether node `id` holds a learner of `shard`.
    pub fn is_learner(&self, shard: ShardId, id: u64) -> bool {
        self.learners.get(&shard.0).is_some_and(|l| l.contains(&id))
    }

    /// The learners of `shard`.
    pub fn learners_of(&self, shard: ShardId) -> &[u64] {
        self.learners.get(&shard.0).map_or(&[], Vec::as_slice)
    }

    /// How many shards node `id` holds a learner of.
    pub fn learner_count(&self, id: u64) -> usize {
        self.learners.values().filter(|l| l.contains(&id)).count()
    }

    /// Records a learner move's replica as one of the shard's learners, and forgets the move.
    pub fn finish_learner(&mut self, shard: ShardId, mv: &Move) {
        let learners = self.learners.entry(shard.0).or_default();
        if !learners.contains(&mv.to) {
            learners.push(mv.to);
        }
        self.moves.remove(&shard.0);
    }

    /// Forgets a learner of `shard` (its replica was removed from the group).
    pub fn drop_learner(&mut self, shard: ShardId, id: u64) {
        if let Some(learners) = self.learners.get_mut(&shard.0) {
            learners.retain(|l| *l != id);
            if learners.is_empty() {
                self.learners.remove(&shard.0);
            }
        }
    }

    /// Whether node `id` should have `shard`'s group open: it is a voter or a learner, or a
    /// move is bringing a replica to it.
    pub fn should_open(&self, shard: ShardId, id: u64) -> bool {
        self.hosts(shard, id)
            || self.is_learner(shard, id)
            || self
                .moves
                .get(&shard.0)
                .is_some_and(|m| m.to == id && m.phase != MovePhase::Cancel)
    }

    /// Whether `shard` still has its bootstrap membership.
    pub fn is_bootstrap_membership(&self, shard: ShardId) -> bool {
        self.generations.get(shard.0 as usize).copied().unwrap_or(0) == 0
    }

    /// A node's state; nodes placed before states were recorded are active.
    pub fn state(&self, id: u64) -> Option<NodeState> {
        self.states.get(&id).copied().or_else(|| {
            (self.states.is_empty() && self.members.contains_key(&id)).then_some(NodeState::Active)
        })
    }

    /// Nodes in `state`.
    pub fn nodes_in(&self, state: NodeState) -> BTreeSet<u64> {
        let mut ids: BTreeSet<u64> = self.members.keys().copied().collect();
        ids.extend(self.states.keys().copied());
        ids.into_iter()
            .filter(|id| self.state(*id) == Some(state))
            .collect()
    }

    /// How many shards node `id` holds a voter of.
    pub fn replica_count(&self, id: u64) -> usize {
        self.replicas.iter().filter(|r| r.contains(&id)).count()
    }

    /// How many shards prefer node `id` as their leader.
    pub fn preferred_count(&self, id: u64) -> usize {
        self.replicas
            .iter()
            .filter(|r| r.first() == Some(&id))
            .count()
    }

    /// Every shard's inclusive slot range, by shard id.
    pub fn slot_ranges(&self) -> Vec<(u16, u16)> {
        if self.slots.len() == self.replicas.len() {
            self.slots.clone()
        } else {
            trireme_types::even_ranges(self.replicas.len() as u32)
        }
    }

    /// The routing this map describes; `None` if its ranges do not cover every slot once
    /// (never written so; a map read from a damaged row).
    pub fn shard_map(&self) -> Option<trireme_types::ShardMap> {
        trireme_types::ShardMap::from_ranges(self.slot_ranges(), self.epoch)
    }

    /// How many shards there are.
    pub fn shard_count(&self) -> u32 {
        self.replicas.len() as u32
    }

    /// Completes the split of `parent` recorded in `splits`: the upper slots go to the new
    /// shard, whose voters are the parent's (the replicas that seeded it, in the same order),
    /// at generation 1, so no replica ever initializes it: its first state came from the
    /// parent's log.
    pub fn finish_split(&mut self, parent: ShardId) {
        let Some(split) = self.splits.remove(&parent.0) else {
            return;
        };
        let mut ranges = self.slot_ranges();
        let voters = self
            .replicas
            .get(parent.0 as usize)
            .cloned()
            .unwrap_or_default();
        if split.child as usize != self.replicas.len() {
            return;
        }
        if let Some(range) = ranges.get_mut(parent.0 as usize) {
            *range = (split.range.0, split.at_slot - 1);
        }
        ranges.push((split.at_slot, split.range.1));
        self.slots = ranges;
        self.replicas.push(voters);
        if self.generations.len() < self.replicas.len() - 1 {
            self.generations.resize(self.replicas.len() - 1, 0);
        }
        self.generations.push(1);
        self.origins.insert(split.child, (parent.0, split.at_slot));
    }

    /// Completes a move: `to` replaces `from` in `shard`'s voters (at the same position, so a
    /// preferred leader that leaves is succeeded by the newcomer), and the move is forgotten.
    /// A learner that became a voter is a learner no more.
    pub fn finish_move(&mut self, shard: ShardId, mv: &Move) {
        let index = shard.0 as usize;
        self.drop_learner(shard, mv.to);
        if let Some(voters) = self.replicas.get_mut(index) {
            match mv.from.and_then(|f| voters.iter().position(|v| *v == f)) {
                Some(at) if !voters.contains(&mv.to) => voters[at] = mv.to,
                Some(at) => {
                    voters.remove(at);
                }
                None if !voters.contains(&mv.to) => voters.push(mv.to),
                None => {}
            }
        }
        if self.generations.len() < self.replicas.len() {
            self.generations.resize(self.replicas.len(), 0);
        }
        if let Some(generation) = self.generations.get_mut(index) {
            *generation += 1;
        }
        self.moves.remove(&shard.0);
    }
}

/// The membership Raft groups start with: name and peer address, nothing that changes at restart.
pub(crate) fn member(node: &PeerNode) -> PeerNode {
    PeerNode {
        name: node.name.clone(),
        peer_addr: node.peer_addr.clone(),
        http_addr: String::new(),
        resp_addr: String::new(),
    }
}

/// The home region of a cluster bootstrapped by `nodes`: the region most of them are in (of
/// those that declare one; the first by name on a tie). `None` when none declares one.
pub(crate) fn bootstrap_home_region(nodes: &[NodeInfo]) -> Option<String> {
    let mut counts: BTreeMap<&str, usize> = BTreeMap::new();
    for region in nodes.iter().filter_map(|n| n.region.as_deref()) {
        *counts.entry(region).or_default() += 1;
    }
    let most = counts.values().copied().max()?;
    counts
        .into_iter()
        .find(|(_, n)| *n == most)
        .map(|(region, _)| region.to_owned())
}

/// Whether a node labelled `region` may hold voters when the home region is `home`: any node
/// without a home region, and a node that declares no region counts as in the home region.
pub(crate) fn in_home_region(home: Option<&str>, region: Option<&str>) -> bool {
    match (home, region) {
        (Some(home), Some(region)) => home == region,
        _ => true,
    }
}

/// Places `shards` shards of `factor` voters each on `nodes`: distinct nodes per shard, zones
/// spread first, then racks, and the first replica (where the election usually lands first)
/// rotated so leaders and load spread evenly; voters only in the home region (see
/// [`bootstrap_home_region`]), whose other regions' learners the metadata leader adds later.
/// Deterministic for the same input.
pub(crate) fn place(nodes: &[NodeInfo], shards: u32, factor: usize) -> ClusterMap {
    let home_region = bootstrap_home_region(nodes);
    let mut sorted: Vec<&NodeInfo> = nodes
        .iter()
        .filter(|n| in_home_region(home_region.as_deref(), n.region.as_deref()))
        .collect();
    // Interleave racks and zones in the ring so consecutive picks land apart.
    sorted.sort_by(|a, b| a.node.name.cmp(&b.node.name));
    let factor = factor.clamp(1, sorted.len().max(1));
    let mut replicas = Vec::with_capacity(shards as usize);
    for shard in 0..shards as usize {
        let mut chosen: Vec<&NodeInfo> = Vec::with_capacity(factor);
        let ring = (0..sorted.len()).map(|i| sorted[(shard + i) % sorted.len()]);
        let ring: Vec<&NodeInfo> = ring.collect();
        // Pass 1: a new zone and a new rack; pass 2: a new rack; pass 3: any node not chosen.
        for pass in 0..3 {
            for candidate in &ring {
                if chosen.len() == factor {
                    break;
                }
                if chosen.iter().any(|c| c.node.name == candidate.node.name) {
                    continue;
                }
                let zones: BTreeSet<&Option<String>> = chosen.iter().map(|c| &c.zone).collect();
                let racks: BTreeSet<(&Option<String>, &Option<String>)> =
                    chosen.iter().map(|c| (&c.zone, &c.rack)).collect();
                let new_zone = candidate.zone.is_none() || !zones.contains(&candidate.zone);
                let new_rack = candidate.rack.is_none()
                    || !racks.contains(&(&candidate.zone, &candidate.rack));
                let ok = match pass {
                    0 => new_zone && new_rack,
                    1 => new_rack,
                    _ => true,
                };
                if ok {
                    chosen.push(candidate);
                }
            }
        }
        replicas.push(chosen.iter().map(|n| n.id()).collect());
    }
    ClusterMap {
        epoch: 1,
        generations: vec![0; replicas.len()],
        replicas,
        members: nodes.iter().map(|n| (n.id(), member(&n.node))).collect(),
        states: nodes.iter().map(|n| (n.id(), NodeState::Active)).collect(),
        moves: BTreeMap::new(),
        slots: Vec::new(),
        splits: BTreeMap::new(),
        origins: BTreeMap::new(),
        cluster_version: 0,
        home_region,
        learners: BTreeMap::new(),
        survival: Survival::Zone,
    }
}

fn is_zero(version: &u32) -> bool {
    *version == 0
}

/// Why the cluster version cannot rise to what this build speaks: the members that run an
/// older protocol, by name, with what they run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct OlderMembers(pub Vec<(String, Option<Version>)>);

impl std::fmt::Display for OlderMembers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let named: Vec<String> = self
            .0
            .iter()
            .map(|(name, version)| match version {
                Some(v) => format!("{name} runs {v}"),
                None => format!("{name} runs a build from before protocol 2"),
            })
            .collect();
        f.write_str(&named.join(", "))
    }
}

/// The cluster version `map` may move to: the lowest protocol among its members that are not
/// removed, as `version_of` tells each one's (a live link's announcement, else its row), and
/// never below the current one. `Err` names the members below `wanted` (this build's
/// protocol, for an operator's finalize).
pub(crate) fn next_cluster_version(
    map: &ClusterMap,
    wanted: u32,
    version_of: impl Fn(u64) -> (String, Option<Version>),
) -> Result<u32, OlderMembers> {
    let mut lowest = u32::MAX;
    let mut older = Vec::new();
    let mut ids: BTreeSet<u64> = map.members.keys().copied().collect();
    ids.extend(map.states.keys().copied());
    for id in ids {
        if map.state(id) == Some(NodeState::Removed) {
            continue;
        }
        let (name, version) = version_of(id);
        let protocol = version.as_ref().map_or(0, |v| v.protocol);
        lowest = lowest.min(protocol);
        if protocol < wanted {
            older.push((name, version));
        }
    }
    if !older.is_empty() {
        return Err(OlderMembers(older));
    }
    Ok(lowest.max(map.cluster_version))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn node(name: &str, zone: Option<&str>, rack: Option<&str>) -> NodeInfo {
        NodeInfo {
            node: PeerNode {
                name: name.into(),
                peer_addr: format!("{name}:1"),
                http_addr: String::new(),
                resp_addr: String::new(),
            },
            rack: rack.map(Into::into),
            zone: zone.map(Into::into),
            region: None,
        }
    }

    #[test]
    fn three_nodes_factor_three_puts_every_shard_everywhere() {
        let nodes = [
            node("n1", None, None),
            node("n2", None, None),
            node("n3", None, None),
        ];
        let p = place(&nodes, 16, 3);
        assert_eq!(p.replicas.len(), 16);
        for r in &p.replicas {
            let distinct: BTreeSet<_> = r.iter().collect();
            assert_eq!(distinct.len(), 3);
        }
        // The first replica rotates.
        let firsts: BTreeSet<_> = p.replicas.iter().map(|r| r[0]).collect();
        assert_eq!(firsts.len(), 3);
    }

    #[test]
    fn replicas_spread_over_racks_before_sharing_one() {
        let nodes = [
            node("a1", None, Some("a")),
            node("a2", None, Some("a")),
            node("b1", None, Some("b")),
            node("b2", None, Some("b")),
            node("c1", None, Some("c")),
        ];
        let p = place(&nodes, 32, 3);
        let rack_of: BTreeMap<u64, char> = nodes
            .iter()
            .map(|n| (n.id(), n.node.name.chars().next().unwrap()))
            .collect();
        for r in &p.replicas {
            let racks: BTreeSet<char> = r.iter().map(|id| rack_of[id]).collect();
            assert_eq!(racks.len(), 3, "replicas {r:?} share a rack");
        }
    }

    #[test]
    fn zones_come_before_racks_and_factor_is_capped_by_node_count() {
        let nodes = [
            node("x1", Some("x"), Some("r1")),
            node("x2", Some("x"), Some("r2")),
            node("y1", Some("y"), Some("r1")),
        ];
        let p = place(&nodes, 8, 2);
        let y = nodes[2].id();
        for r in &p.replicas {
            assert_eq!(r.len(), 2);
            assert!(r.contains(&y), "two replicas in zone x: {r:?}");
        }
        let p = place(&nodes[..1], 4, 3);
        assert!(p.replicas.iter().all(|r| r.len() == 1));
    }

    #[test]
    fn placement_is_deterministic_and_membership_is_identical() {
        let nodes = [node("n2", None, None), node("n1", None, None)];
        let a = place(&nodes, 4, 2);
        let b = place(&[nodes[1].clone(), nodes[0].clone()], 4, 2);
        assert_eq!(a, b);
        let m = a.membership(ShardId(0));
        assert_eq!(m.len(), 2);
        assert!(m.values().all(|n| n.http_addr.is_empty()));
    }

    #[test]
    fn the_cluster_version_waits_for_every_member_not_removed_and_never_falls() {
        let nodes: Vec<NodeInfo> = ["a", "b", "c", "d"]
            .iter()
            .map(|n| node(n, None, None))
            .collect();
        let mut map = place(&nodes[..3], 4, 3);
        map.cluster_version = 1;
        let id = |name: &str| nodes.iter().find(|n| n.node.name == name).unwrap().id();
        let runs = |protocols: [(&'static str, Option<u32>); 4]| {
            move |which: u64| {
                let (name, protocol) = protocols
                    .iter()
                    .find(|(n, _)| NodeId::from_name(n).0 == which)
                    .copied()
                    .unwrap_or(("?", None));
                let version = protocol.map(|p| Version {
                    protocol: p,
                    build: format!("0.{p}.0"),
                });
                (name.to_string(), version)
            }
        };
        // c still runs protocol 1: the version stays, and a finalize to 2 names c alone.
        let mixed = runs([("a", Some(2)), ("b", Some(2)), ("c", Some(1)), ("d", None)]);
        assert_eq!(next_cluster_version(&map, 0, mixed), Ok(1));
        let older = next_cluster_version(&map, 2, mixed).unwrap_err();
        assert_eq!(older.0.len(), 1, "{older}");
        assert!(
            older
                .to_string()
                .contains("c runs build 0.1.0 (protocol 1)"),
            "{older}"
        );

        // Every member upgraded: it rises. `d` (not a member) does not count.
        let upgraded = runs([("a", Some(2)), ("b", Some(2)), ("c", Some(2)), ("d", None)]);
        assert_eq!(next_cluster_version(&map, 2, upgraded), Ok(2));

        // A member of a build that did not record its version holds it back...
        let unrecorded = runs([("a", Some(2)), ("b", Some(2)), ("c", None), ("d", None)]);
        let older = next_cluster_version(&map, 2, unrecorded).unwrap_err();
        assert!(older.to_string().contains("before protocol 2"), "{older}");
        // ...until it is removed.
        map.states.insert(id("c"), NodeState::Removed);
        assert_eq!(next_cluster_version(&map, 2, unrecorded), Ok(2));

        // Never lower than it is.
        map.cluster_version = 3;
        assert_eq!(next_cluster_version(&map, 0, upgraded), Ok(3));
    }
}
