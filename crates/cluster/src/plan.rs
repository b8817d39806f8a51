//! Deciding which replicas move next: pure functions of the cluster map and the nodes' labels,
//! so the rebalancer's choices are tested here without a cluster.
//!
//! In order of urgency: replicas on nodes that are leaving (draining, or removed because they
//! died) are moved first; then shards below their replication factor get a replica; then the
//! busiest node gives a replica to the idlest while their counts differ by more than one;
//! then, with counts even and nothing moving, a node far above the mean in bytes trades a big
//! shard for a small one of a node below it.
//! Targets are chosen so a shard's voters stay spread over regions first (with survival
//! `region`; otherwise they are all in the home region), then zones, then racks, then by how
//! many replicas each node holds. Preferred leaders (each shard's first voter) are spread the
//! same way, without moving any data, over the nodes that may lead: with survival `region`
//! only those of the home region, so writes commit a round trip from where they usually
//! come from.

use crate::meta::{self, ClusterMap, Move, MovePhase, NodeInfo, NodeState, Survival};
use std::collections::{BTreeMap, BTreeSet};
use trireme_types::ShardId;

/// The inputs of a plan.
pub(crate) struct Planner<'a> {
    pub map: &'a ClusterMap,
    pub infos: &'a BTreeMap<u64, NodeInfo>,
    /// Voters per shard wanted (capped by the active nodes).
    pub factor: usize,
    /// Approximate bytes of each shard, by shard id (empty: unknown, counts only).
    pub shard_bytes: &'a BTreeMap<u32, u64>,
    /// Bytes a node must hold above the mean before shards are traded for bytes: moving
    /// replicas costs snapshots, worth it only for real imbalance ([`MIN_BYTES_GAP`]).
    pub min_bytes_gap: u64,
}

/// [`Planner::min_bytes_gap`] of the metadata leader.
pub(crate) const MIN_BYTES_GAP: u64 = 64 << 20;

impl<'a> Planner<'a> {
    /// The metadata leader's planner over `map`, with [`MIN_BYTES_GAP`].
    pub fn of_leader(
        map: &'a ClusterMap,
        infos: &'a BTreeMap<u64, NodeInfo>,
        factor: usize,
        shard_bytes: &'a BTreeMap<u32, u64>,
    ) -> Self {
        Planner {
            map,
            infos,
            factor,
            shard_bytes,
            min_bytes_gap: MIN_BYTES_GAP,
        }
    }
    /// The active nodes that may hold voters: with survival `zone`, those in the home region
    /// (when there is one); with survival `region`, all.
    fn active(&self) -> BTreeSet<u64> {
        let home = self.map.home_region.as_deref();
        let anywhere = self.map.survival == Survival::Region;
        self.map
            .nodes_in(NodeState::Active)
            .into_iter()
            .filter(|id| anywhere || meta::in_home_region(home, self.region(*id)))
            .collect()
    }

    fn region(&self, id: u64) -> Option<&str> {
        self.infos.get(&id).and_then(|i| i.region.as_deref())
    }

    /// The region `id` counts in: its label, or the home region for a node without one.
    fn region_or_home(&self, id: u64) -> Option<&str> {
        self.region(id).or(self.map.home_region.as_deref())
    }

    /// Learner moves, at most `budget`: a learner of every shard in each region other than
    /// the home region that holds none of its voters, on the active node there holding the
    /// fewest learners; and the removal of learners that are not wanted (on a node that is
    /// leaving, in the home region, in a region with a voter, or a second one in a region).
    /// Shards with a move in progress wait for it.
    pub fn learner_moves(&self, budget: usize, now_ms: u64) -> Vec<(u32, Move)> {
        let mut planned: Vec<(u32, Move)> = Vec::new();
        let Some(home) = self.map.home_region.as_deref() else {
            return planned;
        };
        let active = self.map.nodes_in(NodeState::Active);
        let mut by_region: BTreeMap<&str, Vec<u64>> = BTreeMap::new();
        for id in &active {
            if let Some(region) = self.region(*id).filter(|r| *r != home) {
                by_region.entry(region).or_default().push(*id);
            }
        }
        let mut load: BTreeMap<u64, usize> = active
            .iter()
            .map(|id| (*id, self.map.learner_count(*id)))
            .collect();
        let learner_move = |to: u64, phase: MovePhase| Move {
            from: None,
            to,
            phase,
            started_ms: now_ms,
            learner: true,
        };
        for shard in 0..self.map.shard_count() {
            if planned.len() >= budget {
                break;
            }
            if self.map.moves.contains_key(&shard) || self.map.splits.contains_key(&shard) {
                continue;
            }
            let learners = self.map.learners_of(ShardId(shard));
            let voters = self.map.replicas.get(shard as usize);
            // Regions that hold a voter need no learner.
            let mut covered: BTreeSet<&str> = voters
                .into_iter()
                .flatten()
                .filter_map(|v| self.region(*v))
                .collect();
            covered.remove(home);
            // One unwanted learner at a time goes first.
            let unwanted = learners.iter().copied().find(|id| {
                let wanted = active.contains(id)
                    && self
                        .region(*id)
                        .is_some_and(|r| r != home && covered.insert(r));
                !wanted
            });
            if let Some(id) = unwanted {
                planned.push((shard, learner_move(id, MovePhase::Cancel)));
                continue;
            }
            let missing = by_region
                .iter()
                .find(|(region, _)| !covered.contains(**region));
            let Some((_, nodes)) = missing else {
                continue;
            };
            let to = nodes
                .iter()
                .copied()
                .filter(|id| !voters.is_some_and(|v| v.contains(id)))
                .min_by_key(|id| (load.get(id).copied().unwrap_or(0), *id));
            if let Some(to) = to {
                *load.entry(to).or_default() += 1;
                planned.push((shard, learner_move(to, MovePhase::Learner)));
            }
        }
        planned
    }

    fn labels(&self, id: u64) -> (Option<&str>, Option<&str>) {
        self.infos
            .get(&id)
            .map_or((None, None), |i| (i.zone.as_deref(), i.rack.as_deref()))
    }

    /// (distinct regions, distinct zones, distinct racks) of a set of nodes: higher is better
    /// spread. Regions only differ with survival `region`; otherwise voters are all home.
    fn spread(&self, nodes: impl IntoIterator<Item = u64>) -> (usize, usize, usize) {
        let mut regions = BTreeSet::new();
        let mut zones = BTreeSet::new();
        let mut racks = BTreeSet::new();
        for (i, id) in nodes.into_iter().enumerate() {
            regions.insert(self.region_or_home(id));
            let (zone, rack) = self.labels(id);
            // Unlabelled nodes count as apart from everyone.
            zones.insert(zone.map_or(format!("\0{i}"), str::to_owned));
            racks.insert(match (zone, rack) {
                (_, None) => format!("\0{i}"),
                (z, Some(r)) => format!("{}/{r}", z.unwrap_or("")),
            });
        }
        (regions.len(), zones.len(), racks.len())
    }

    /// Replicas each active node will hold once the moves in progress are done.
    fn load(&self) -> BTreeMap<u64, usize> {
        let mut load: BTreeMap<u64, usize> = self
            .active()
            .into_iter()
            .map(|id| (id, self.map.replica_count(id)))
            .collect();
        for mv in self.map.moves.values() {
            if mv.phase == MovePhase::Cancel {
                continue;
            }
            if let Some(n) = load.get_mut(&mv.to) {
                *n += 1;
            }
            if let Some(n) = mv.from.and_then(|f| load.get_mut(&f)) {
                *n = n.saturating_sub(1);
            }
        }
        load
    }

    /// The best new home for a replica of a shard whose other voters are `staying`.
    fn target(&self, staying: &[u64], load: &BTreeMap<u64, usize>) -> Option<u64> {
        load.iter()
            .filter(|(id, _)| !staying.contains(id))
            .max_by_key(|(id, count)| {
                let spread = self.spread(staying.iter().copied().chain([**id]));
                // Best spread first, then fewest replicas, then a stable order.
                (spread, std::cmp::Reverse(**count), std::cmp::Reverse(**id))
            })
            .map(|(id, _)| *id)
    }

    /// Up to `budget` new moves, most urgent first.
    pub fn next_moves(&self, budget: usize, now_ms: u64) -> Vec<(u32, Move)> {
        let mut planned: Vec<(u32, Move)> = Vec::new();
        if budget == 0 {
            return planned;
        }
        let active = self.active();
        let mut load = self.load();
        let want = self.factor.min(active.len()).max(1);
        let busy = |shard: u32, planned: &[(u32, Move)]| {
            self.map.moves.contains_key(&shard) || planned.iter().any(|(s, _)| *s == shard)
        };
        // 1. Replicas on leaving nodes, and shards short of voters.
        for (shard, voters) in self.map.replicas.iter().enumerate() {
            let shard = shard as u32;
            if busy(shard, &planned) || !voters.iter().any(|v| active.contains(v)) {
                continue;
            }
            let leaving = voters.iter().copied().find(|v| !active.contains(v));
            let short = voters.len() < want;
            if leaving.is_none() && !short {
                continue;
            }
            let staying: Vec<u64> = voters
                .iter()
                .copied()
                .filter(|v| Some(*v) != leaving)
                .collect();
            // A leaving replica with no replacement available is left in place (the cluster
            // is too small); a shard short of voters only gains one when a node is free.
            if let Some(to) = self.target(&staying, &load) {
                let from = if short { None } else { leaving };
                push_move(&mut planned, &mut load, shard, from, to, now_ms);
            }
            if planned.len() >= budget {
                return planned;
            }
        }

        // 1b. With survival `region`: a shard whose voters share a region while a region
        //     without one of them has a free node moves one voter there (not the preferred
        //     leader while another can go).
        if self.map.survival == Survival::Region {
            let regions: BTreeSet<Option<&str>> =
                active.iter().map(|id| self.region_or_home(*id)).collect();
            for (shard, voters) in self.map.replicas.iter().enumerate() {
                let shard = shard as u32;
                if planned.len() >= budget {
                    return planned;
                }
                let spread = self.spread(voters.iter().copied()).0;
                if busy(shard, &planned) || spread >= regions.len().min(voters.len()) {
                    continue;
                }
                let doubled = voters.iter().rev().copied().find(|v| {
                    voters
                        .iter()
                        .filter(|o| self.region_or_home(**o) == self.region_or_home(*v))
                        .count()
                        > 1
                });
                let Some(from) = doubled else { continue };
                let staying: Vec<u64> = voters.iter().copied().filter(|v| *v != from).collect();
                if let Some(to) = self.target(&staying, &load) {
                    let after = staying.iter().copied().chain([to]);
                    if self.spread(after).0 > spread {
                        push_move(&mut planned, &mut load, shard, Some(from), to, now_ms);
                    }
                }
            }
        }

        // 2. Even out replica counts.
        while planned.len() < budget {
            let Some((&most, &high)) = load.iter().max_by_key(|(id, n)| (**n, **id)) else {
                break;
            };
            let Some((&least, &low)) = load.iter().min_by_key(|(id, n)| (**n, **id)) else {
                break;
            };
            if high <= low + 1 {
                break;
            }
            let candidate = self
                .map
                .replicas
                .iter()
                .enumerate()
                .find(|(shard, voters)| {
                    let shard = *shard as u32;
                    if busy(shard, &planned) || !voters.contains(&most) || voters.contains(&least) {
                        return false;
                    }
                    let after = voters.iter().map(|v| if *v == most { least } else { *v });
                    self.spread(after) >= self.spread(voters.iter().copied())
                });
            match candidate {
                Some((shard, _)) => push_move(
                    &mut planned,
                    &mut load,
                    shard as u32,
                    Some(most),
                    least,
                    now_ms,
                ),
                None => break,
            }
        }

        // 3. Even out bytes, once counts are even and nothing moves: a pair of moves that
        //    keeps every count.
        if planned.is_empty()
            && self.map.moves.is_empty()
            && budget >= 2
            && let Some([(big, heavy), (small, light)]) = self.bytes_exchange(&active)
        {
            push_move(&mut planned, &mut load, big, Some(heavy), light, now_ms);
            push_move(&mut planned, &mut load, small, Some(light), heavy, now_ms);
        }
        planned
    }

    /// Bytes each active node holds, by the shards it is a voter of.
    fn node_bytes(&self, active: &BTreeSet<u64>) -> BTreeMap<u64, u64> {
        let mut bytes: BTreeMap<u64, u64> = active.iter().map(|id| (*id, 0)).collect();
        for (shard, voters) in self.map.replicas.iter().enumerate() {
            let size = self.shard_bytes.get(&(shard as u32)).copied().unwrap_or(0);
            for voter in voters {
                if let Some(total) = bytes.get_mut(voter) {
                    *total += size;
                }
            }
        }
        bytes
    }

    /// When a node holds more than 1.25x the mean bytes: a bigger shard of it to trade with a
    /// smaller shard of a node below the mean, the pair that brings the two closest together
    /// (each trade lowers the sum of squared node sizes, so trading ends). Returns
    /// `[(big shard, heavy node), (small shard, light node)]`.
    fn bytes_exchange(&self, active: &BTreeSet<u64>) -> Option<[(u32, u64); 2]> {
        let bytes = self.node_bytes(active);
        let total: u64 = bytes.values().sum();
        let mean = total / bytes.len().max(1) as u64;
        if total == 0 {
            return None;
        }
        let size = |shard: usize| self.shard_bytes.get(&(shard as u32)).copied().unwrap_or(0);
        let keeps_spread = |voters: &[u64], out: u64, inn: u64| {
            let after = voters.iter().map(|v| if *v == out { inn } else { *v });
            self.spread(after) >= self.spread(voters.iter().copied())
        };
        let mut best: Option<(u64, u32, u64, u32, u64)> = None;
        let heavy_enough = |b: u64| b * 4 > mean * 5 && b - mean >= self.min_bytes_gap;
        for (&heavy, &high) in bytes.iter().filter(|(_, b)| heavy_enough(**b)) {
            for (&light, &low) in bytes.iter().filter(|(_, b)| **b < mean) {
                for (big, big_voters) in self.map.replicas.iter().enumerate() {
                    if !big_voters.contains(&heavy)
                        || big_voters.contains(&light)
                        || !keeps_spread(big_voters, heavy, light)
                    {
                        continue;
                    }
                    for (small, small_voters) in self.map.replicas.iter().enumerate() {
                        if !small_voters.contains(&light)
                            || small_voters.contains(&heavy)
                            || size(small) >= size(big)
                            || !keeps_spread(small_voters, light, heavy)
                        {
                            continue;
                        }
                        let delta = size(big) - size(small);
                        if delta >= high - low {
                            continue;
                        }
                        let gap = (high - delta).abs_diff(low + delta);
                        if best.is_none_or(|(g, ..)| gap < g) {
                            best = Some((gap, big as u32, heavy, small as u32, light));
                        }
                    }
                }
            }
        }
        best.map(|(_, big, heavy, small, light)| [(big, heavy), (small, light)])
    }
}

/// Records a planned move and the load it will shift.
fn push_move(
    planned: &mut Vec<(u32, Move)>,
    load: &mut BTreeMap<u64, usize>,
    shard: u32,
    from: Option<u64>,
    to: u64,
    now_ms: u64,
) {
    *load.entry(to).or_default() += 1;
    if let Some(n) = from.and_then(|f| load.get_mut(&f)) {
        *n = n.saturating_sub(1);
    }
    planned.push((
        shard,
        Move {
            from,
            to,
            phase: MovePhase::Learner,
            started_ms: now_ms,
            learner: false,
        },
    ));
}

/// The nodes that may be a shard's preferred leader: the active ones, and with survival
/// `region` only those in the home region (a node without a region counts as there).
pub(crate) fn may_lead(map: &ClusterMap, infos: &BTreeMap<u64, NodeInfo>) -> BTreeSet<u64> {
    let home = map.home_region.as_deref();
    map.nodes_in(NodeState::Active)
        .into_iter()
        .filter(|id| {
            map.survival == Survival::Zone
                || meta::in_home_region(home, infos.get(id).and_then(|i| i.region.as_deref()))
        })
        .collect()
}

/// Rotates shards' voters so every node that may lead (`leaders`, see [`may_lead`]) is the
/// preferred (first) voter of about as many shards as the others, and no other node is
/// preferred while a voter that may lead is there. Returns whether the map changed.
///
/// A preference can only go to another voter of the same shard, so the node preferred most
/// and the one preferred least may share no shard. The spreading therefore follows chains: the
/// busiest node hands a shard to one of its voters, which hands another shard to one of its
/// own, and so on until a node preferred at least two fewer times than the busiest takes one
/// (a shortest such chain, found breadth-first). Every chain lowers the busiest node's count
/// by one and raises no count above it, so the counts end as even as the placement allows;
/// a shortest chain moves as few leaderships as possible.
pub(crate) fn spread_preferred(map: &mut ClusterMap, leaders: &BTreeSet<u64>) -> bool {
    let active = leaders;
    let mut changed = false;
    // A leaving node (or one that may not lead) gives up its preference to the voter that
    // may lead preferred least.
    for shard in 0..map.replicas.len() {
        let first = map.replicas[shard].first().copied();
        if first.is_some_and(|f| !active.contains(&f)) {
            let best = map.replicas[shard]
                .iter()
                .enumerate()
                .filter(|(_, v)| active.contains(v))
                .min_by_key(|(_, v)| (map.preferred_count(**v), **v))
                .map(|(i, _)| i);
            if let Some(i) = best {
                map.replicas[shard].swap(0, i);
                changed = true;
            }
        }
    }
    // Each chain lowers the sum of squared counts, so this ends; the bound is a safeguard.
    for _ in 0..map.replicas.len() * 4 {
        let counts: BTreeMap<u64, usize> = active
            .iter()
            .map(|id| (*id, map.preferred_count(*id)))
            .collect();
        let mut busiest: Vec<(usize, u64)> = counts.iter().map(|(id, n)| (*n, *id)).collect();
        busiest.sort_by(|a, b| b.cmp(a));
        let chain = busiest
            .iter()
            .find_map(|&(high, from)| handover_chain(map, active, &counts, from, high));
        match chain {
            Some(chain) => {
                for (shard, to) in chain {
                    let voters = &mut map.replicas[shard];
                    if let Some(i) = voters.iter().position(|v| *v == to) {
                        voters.swap(0, i);
                    }
                }
                changed = true;
            }
            None => break,
        }
    }
    changed
}

/// The shortest chain of hand-overs from node `from` (preferred `high` times) to a node
/// preferred at most `high - 2` times: each step is a shard the current node is preferred for
/// and the active voter of it that takes the preference.
fn handover_chain(
    map: &ClusterMap,
    active: &BTreeSet<u64>,
    counts: &BTreeMap<u64, usize>,
    from: u64,
    high: usize,
) -> Option<Vec<(usize, u64)>> {
    // Breadth-first over nodes; `came` records the step that reached each node.
    let mut came: BTreeMap<u64, Option<(usize, u64)>> = BTreeMap::from([(from, None)]);
    let mut queue = std::collections::VecDeque::from([from]);
    while let Some(node) = queue.pop_front() {
        for (shard, voters) in map.replicas.iter().enumerate() {
            if voters.first() != Some(&node) {
                continue;
            }
            for &next in voters.iter().skip(1) {
                if !active.contains(&next) || came.contains_key(&next) {
                    continue;
                }
                came.insert(next, Some((shard, node)));
                if counts.get(&next).is_some_and(|n| n + 2 <= high) {
                    // Walk back to `from`; the steps apply from the end of the chain.
                    let mut chain = Vec::new();
                    let mut at = next;
                    while let Some(Some((shard, previous))) = came.get(&at) {
                        chain.push((*shard, at));
                        at = *previous;
                    }
                    return Some(chain);
                }
                queue.push_back(next);
            }
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::place;
    use trireme_raft::PeerNode;

    fn info(name: &str, zone: Option<&str>, rack: Option<&str>) -> NodeInfo {
        NodeInfo {
            node: PeerNode {
                name: name.into(),
                peer_addr: format!("{name}:1"),
                ..PeerNode::default()
            },
            rack: rack.map(Into::into),
            zone: zone.map(Into::into),
            region: None,
        }
    }

    fn infos(nodes: &[NodeInfo]) -> BTreeMap<u64, NodeInfo> {
        nodes.iter().map(|n| (n.id(), n.clone())).collect()
    }

    /// Applies planned moves as if each completed, until the planner has nothing left.
    fn settle(map: &mut ClusterMap, infos: &BTreeMap<u64, NodeInfo>, factor: usize) -> usize {
        let mut moves = 0;
        for _ in 0..1000 {
            let planned = Planner {
                map,
                infos,
                factor,
                shard_bytes: &BTreeMap::new(),
                min_bytes_gap: 0,
            }
            .next_moves(4, 0);
            if planned.is_empty() {
                return moves;
            }
            for (shard, mv) in planned {
                map.members
                    .entry(mv.to)
                    .or_insert_with(|| infos[&mv.to].node.clone());
                map.finish_move(trireme_types::ShardId(shard), &mv);
                moves += 1;
            }
        }
        panic!("the planner never settles");
    }

    /// A planner for 3 voters per shard that does not weigh bytes.
    fn planner<'a>(map: &'a ClusterMap, infos: &'a BTreeMap<u64, NodeInfo>) -> Planner<'a> {
        Planner {
            map,
            infos,
            factor: 3,
            shard_bytes: const { &BTreeMap::new() },
            min_bytes_gap: 0,
        }
    }

    fn plan(map: &ClusterMap, infos: &BTreeMap<u64, NodeInfo>, budget: usize) -> Vec<(u32, Move)> {
        planner(map, infos).next_moves(budget, 0)
    }

    /// [`spread_preferred`] over the nodes that may lead.
    fn prefer(map: &mut ClusterMap, infos: &BTreeMap<u64, NodeInfo>) -> bool {
        let leaders = may_lead(map, infos);
        spread_preferred(map, &leaders)
    }

    fn join(map: &mut ClusterMap, node: &NodeInfo) {
        map.states.insert(node.id(), NodeState::Active);
    }

    fn in_region(name: &str, region: &str) -> NodeInfo {
        NodeInfo {
            region: Some(region.into()),
            ..info(name, None, None)
        }
    }

    /// a1-a3 in `home`, b1-b2 in `west`, c1 in `east`.
    fn home_west_east() -> Vec<NodeInfo> {
        [("a1", "home"), ("a2", "home"), ("a3", "home")]
            .into_iter()
            .chain([("b1", "west"), ("b2", "west"), ("c1", "east")])
            .map(|(name, region)| in_region(name, region))
            .collect()
    }

    fn learner_plan(map: &ClusterMap, infos: &BTreeMap<u64, NodeInfo>) -> Vec<(u32, Move)> {
        planner(map, infos).learner_moves(100, 0)
    }

    #[test]
    fn voters_stay_home_and_every_other_region_gets_one_learner_per_shard() {
        let nodes = home_west_east();
        let all = infos(&nodes);
        let mut map = place(&nodes, 4, 3);
        assert_eq!(map.home_region.as_deref(), Some("home"));
        for voters in &map.replicas {
            assert!(
                voters
                    .iter()
                    .all(|v| all[v].region.as_deref() == Some("home")),
                "{voters:?}"
            );
        }
        // Nothing for the voters to do: the other regions hold no voters.
        assert!(plan(&map, &all, 8).is_empty());
        // One learner move per shard at a time; settled, each shard has one learner in west
        // and one in east, west's spread over both nodes.
        for _ in 0..4 {
            let planned = learner_plan(&map, &all);
            assert!(
                planned
                    .iter()
                    .all(|(_, m)| m.learner && m.phase == MovePhase::Learner)
            );
            for (shard, mv) in planned {
                map.finish_learner(ShardId(shard), &mv);
            }
        }
        assert!(learner_plan(&map, &all).is_empty(), "settled");
        for shard in 0..4 {
            let regions: Vec<_> = map
                .learners_of(ShardId(shard))
                .iter()
                .map(|l| all[l].region.clone().unwrap())
                .collect();
            assert_eq!(regions.len(), 2, "{regions:?}");
            assert!(regions.contains(&"west".into()) && regions.contains(&"east".into()));
        }
        let b = |n: &str| map.learner_count(nodes.iter().find(|i| i.node.name == n).unwrap().id());
        assert_eq!((b("b1"), b("b2"), b("c1")), (2, 2, 4));

        // A learner on a draining node is removed first; then a new one is placed.
        let b1 = nodes[3].id();
        map.states.insert(b1, NodeState::Draining);
        let planned = learner_plan(&map, &all);
        assert!(!planned.is_empty());
        for (shard, mv) in &planned {
            assert_eq!((mv.to, mv.phase), (b1, MovePhase::Cancel), "shard {shard}");
            map.drop_learner(ShardId(*shard), b1);
        }
        for (_, mv) in learner_plan(&map, &all) {
            assert_eq!((mv.to, mv.phase), (nodes[4].id(), MovePhase::Learner));
        }
    }

    #[test]
    fn without_a_home_region_there_are_no_learners() {
        let nodes: Vec<NodeInfo> = (1..=4)
            .map(|i| info(&format!("n{i}"), None, None))
            .collect();
        let map = place(&nodes, 4, 3);
        assert_eq!(map.home_region, None);
        assert!(learner_plan(&map, &infos(&nodes)).is_empty());
    }

    /// Settles voter and learner moves together, as the rebalancer does, and spreads the
    /// preferred leaders.
    fn settle_all(map: &mut ClusterMap, infos: &BTreeMap<u64, NodeInfo>) {
        for _ in 0..100 {
            let mut planned = plan(map, infos, 4);
            if planned.is_empty() {
                planned = learner_plan(map, infos);
            }
            if planned.is_empty() {
                prefer(map, infos);
                return;
            }
            for (shard, mv) in planned {
                let shard = ShardId(shard);
                match (mv.learner, mv.phase) {
                    (true, MovePhase::Cancel) => map.drop_learner(shard, mv.to),
                    (true, _) => map.finish_learner(shard, &mv),
                    (false, _) => map.finish_move(shard, &mv),
                }
            }
        }
        panic!("the planner never settles: {map:?}");
    }

    #[test]
    fn survival_region_puts_voters_in_three_regions_and_leaders_at_home() {
        let mut nodes = home_west_east();
        nodes.push(in_region("d1", "north"));
        let all = infos(&nodes);
        let mut map = place(&nodes, 6, 3);
        settle_all(&mut map, &all);
        assert!(
            map.learners_of(ShardId(0)).len() == 3,
            "zone: learners only"
        );

        map.survival = Survival::Region;
        settle_all(&mut map, &all);
        let region = |id: &u64| all[id].region.clone().unwrap();
        for (shard, voters) in map.replicas.iter().enumerate() {
            let regions: BTreeSet<String> = voters.iter().map(region).collect();
            assert_eq!(regions.len(), 3, "shard {shard}: voters {voters:?}");
            assert_eq!(region(&voters[0]), "home", "shard {shard} is led from home");
            // A learner only in the region left without a voter.
            let learners = map.learners_of(ShardId(shard as u32));
            assert_eq!(learners.len(), 1, "shard {shard}: {learners:?}");
            assert!(!regions.contains(&region(&learners[0])));
        }
        // Preferences spread over the home region's nodes that hold voters.
        let home_preferred: usize = nodes[..3].iter().map(|n| map.preferred_count(n.id())).sum();
        assert_eq!(home_preferred, 6);
        for n in &nodes[3..] {
            assert_eq!(map.preferred_count(n.id()), 0, "{}", n.node.name);
        }
        // Back to zone: the voters go home again.
        map.survival = Survival::Zone;
        settle_all(&mut map, &all);
        for voters in &map.replicas {
            assert!(voters.iter().all(|v| region(v) == "home"), "{voters:?}");
        }
        assert!(
            (0..6).all(|s| map.learners_of(ShardId(s)).len() == 3),
            "{:?}",
            map.learners
        );
    }

    /// 16 shards placed on n1-n3, and n4 just joined (active, no replica yet).
    fn three_nodes_and_a_newcomer() -> (ClusterMap, BTreeMap<u64, NodeInfo>) {
        let mut nodes: Vec<NodeInfo> = (1..=3)
            .map(|i| info(&format!("n{i}"), None, None))
            .collect();
        let mut map = place(&nodes, 16, 3);
        let n4 = info("n4", None, None);
        join(&mut map, &n4);
        nodes.push(n4);
        (map, infos(&nodes))
    }

    #[test]
    fn a_new_node_gets_its_share_and_no_shard_loses_a_voter() {
        let (mut map, all) = three_nodes_and_a_newcomer();
        let moves = settle(&mut map, &all, 3);
        assert_eq!(
            moves, 12,
            "48 replicas over 4 nodes: 12 move to the new one"
        );
        for id in all.keys() {
            assert_eq!(map.replica_count(*id), 12);
        }
        for voters in &map.replicas {
            assert_eq!(voters.iter().collect::<BTreeSet<_>>().len(), 3);
        }
        assert!(prefer(&mut map, &all));
        for id in all.keys() {
            assert_eq!(
                map.preferred_count(*id),
                4,
                "16 preferred leaders over 4 nodes"
            );
        }
        assert!(!prefer(&mut map, &all), "once spread, nothing changes");
    }

    #[test]
    fn a_draining_node_is_emptied_and_a_dead_one_replaced() {
        let nodes: Vec<NodeInfo> = (1..=4)
            .map(|i| info(&format!("n{i}"), None, None))
            .collect();
        let all = infos(&nodes);
        let mut map = place(&nodes, 8, 3);
        let n1 = nodes[0].id();
        map.states.insert(n1, NodeState::Draining);
        let planned = plan(&map, &all, 100);
        assert!(planned.iter().all(|(_, m)| m.from == Some(n1)));
        assert_eq!(planned.len(), map.replica_count(n1));
        settle(&mut map, &all, 3);
        assert_eq!(map.replica_count(n1), 0);
        assert!(map.replicas.iter().all(|v| v.len() == 3));
        map.states.insert(n1, NodeState::Removed);
        map.states.insert(nodes[1].id(), NodeState::Removed);
        // Two nodes left for three voters: the dead node's replicas have nowhere to go.
        assert!(plan(&map, &all, 100).is_empty());
    }

    #[test]
    fn moves_keep_zones_apart() {
        let nodes = vec![
            info("a1", Some("a"), None),
            info("b1", Some("b"), None),
            info("c1", Some("c"), None),
        ];
        let mut map = place(&nodes, 6, 3);
        let extra = vec![info("a2", Some("a"), None), info("b2", Some("b"), None)];
        for n in &extra {
            join(&mut map, n);
        }
        let all = infos(&[nodes, extra].concat());
        settle(&mut map, &all, 3);
        for voters in &map.replicas {
            let zones: BTreeSet<_> = voters.iter().map(|v| all[v].zone.clone()).collect();
            assert_eq!(zones.len(), 3, "{voters:?} share a zone");
        }
    }

    #[test]
    fn the_budget_and_moves_in_progress_are_respected() {
        let (mut map, all) = three_nodes_and_a_newcomer();
        let first = plan(&map, &all, 2);
        assert_eq!(first.len(), 2);
        map.moves.extend(first.iter().cloned());
        let second = plan(&map, &all, 2);
        assert!(second.iter().all(|(s, _)| !map.moves.contains_key(s)));
    }

    /// Node ids of `n1`..`nN`, in name order.
    fn ids(n: usize) -> Vec<u64> {
        (1..=n)
            .map(|i| info(&format!("n{i}"), None, None).id())
            .collect()
    }

    #[test]
    fn preferences_travel_along_chains_when_no_single_swap_helps() {
        // Four nodes; n1 is preferred twice, n4 never, and they share no shard: only a chain
        // n1 -> n2 -> n3 -> n4 evens the counts.
        let nodes: Vec<NodeInfo> = (1..=4)
            .map(|i| info(&format!("n{i}"), None, None))
            .collect();
        let mut map = place(&nodes, 4, 2);
        let [n1, n2, n3, n4] = ids(4)[..] else {
            unreachable!()
        };
        map.replicas = vec![vec![n1, n2], vec![n1, n2], vec![n2, n3], vec![n3, n4]];
        let all = infos(&nodes);
        assert!(prefer(&mut map, &all));
        for id in [n1, n2, n3, n4] {
            assert_eq!(map.preferred_count(id), 1, "{:?}", map.replicas);
        }
        // The voters of each shard are unchanged, only their order.
        let sets: Vec<BTreeSet<u64>> = map
            .replicas
            .iter()
            .map(|v| v.iter().copied().collect())
            .collect();
        assert_eq!(sets[3], BTreeSet::from([n3, n4]));
        assert!(!prefer(&mut map, &all), "once even, nothing changes");
    }

    #[test]
    fn growing_to_twelve_nodes_spreads_leaders_as_evenly_as_the_shards_allow() {
        for shards in [16u32, 24, 48] {
            let mut nodes: Vec<NodeInfo> = (1..=3)
                .map(|i| info(&format!("n{i}"), None, None))
                .collect();
            let mut map = place(&nodes, shards, 3);
            for stage in [6usize, 12] {
                while nodes.len() < stage {
                    let node = info(&format!("n{}", nodes.len() + 1), None, None);
                    join(&mut map, &node);
                    nodes.push(node);
                }
                let all = infos(&nodes);
                settle(&mut map, &all, 3);
                prefer(&mut map, &all);
                let counts: Vec<usize> = all.keys().map(|id| map.preferred_count(*id)).collect();
                let most = counts.iter().max().copied().unwrap_or(0);
                let least = counts.iter().min().copied().unwrap_or(0);
                let ceiling = (shards as usize).div_ceil(stage);
                assert!(
                    most == ceiling && most - least <= 1,
                    "{shards} shards on {stage} nodes: preferred counts {counts:?}"
                );
                let replicas: Vec<usize> = all.keys().map(|id| map.replica_count(*id)).collect();
                let spread = replicas.iter().max().unwrap() - replicas.iter().min().unwrap();
                assert!(spread <= 1, "replicas {replicas:?}");
            }
        }
    }

    #[test]
    fn a_node_heavy_in_bytes_trades_a_big_shard_for_a_small_one_until_even() {
        // Six shards of three voters on six nodes (three replicas each); shard 0 is huge.
        let nodes: Vec<NodeInfo> = (1..=6)
            .map(|i| info(&format!("n{i}"), None, None))
            .collect();
        let all = infos(&nodes);
        let mut map = place(&nodes, 6, 3);
        let mut sizes: BTreeMap<u32, u64> = (0..6).map(|s| (s, 10)).collect();
        sizes.insert(0, 100);
        sizes.insert(3, 1);
        let mut rounds = 0;
        loop {
            let planned = Planner {
                map: &map,
                infos: &all,
                factor: 3,
                shard_bytes: &sizes,
                min_bytes_gap: 0,
            }
            .next_moves(2, 0);
            if planned.is_empty() {
                break;
            }
            assert_eq!(planned.len(), 2, "trades come in pairs: {planned:?}");
            for (shard, mv) in planned {
                map.finish_move(trireme_types::ShardId(shard), &mv);
            }
            rounds += 1;
            assert!(rounds < 20, "bytes trading never ends");
        }
        for id in all.keys() {
            assert_eq!(map.replica_count(*id), 3, "counts unchanged");
        }
        let planner = Planner {
            map: &map,
            infos: &all,
            factor: 3,
            shard_bytes: &sizes,
            min_bytes_gap: 0,
        };
        let active = map.nodes_in(NodeState::Active);
        let bytes = planner.node_bytes(&active);
        assert!(
            rounds >= 1,
            "a node with the 100-byte shard is far above the mean"
        );
        // Whoever holds shard 0 holds the smallest shard (3) and one other with it.
        for (id, total) in &bytes {
            if map.hosts(trireme_types::ShardId(0), *id) {
                assert!(*total <= 100 + 10 + 1, "{id}: {total} ({bytes:?})");
            }
        }
        // Without sizes, nothing is traded.
        let plain = Planner {
            map: &map,
            infos: &all,
            factor: 3,
            shard_bytes: &BTreeMap::new(),
            min_bytes_gap: 0,
        };
        assert!(plain.next_moves(2, 0).is_empty());
    }
}
