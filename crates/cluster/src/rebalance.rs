//! The metadata leader's jobs, run every half second on whichever node leads the metadata
//! group: write the first cluster map once the initial nodes have registered; admit nodes
//! that joined (metadata learner first, then active); keep up to five metadata voters among
//! the active nodes; drive every replica move one step at a time; plan new moves and spread
//! preferred leaders; and retire drained nodes.
//!
//! Every decision is written into the cluster map (with a compare-and-set on its row) before
//! it is acted on, so a new metadata leader picks up each move where the last one left it:
//! a learner that has not caught up is added again or given up, a voter change is made again
//! (openraft's change is idempotent once the voters match), and the map records the result.

use crate::membership::{MembershipOp, MembershipReply, UNDECODABLE_REQUEST};
use crate::meta::{self, ClusterMap, META_SHARD, Move, MovePhase, NodeInfo, NodeState};
use crate::plan::{Planner, spread_preferred};
use crate::{ClusterError, Node};
use bytes::Bytes;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use trireme_types::{Command, ErrorCode, NodeId, PutCondition, ShardId, TtlUpdate};

/// How often the metadata leader looks.
const INTERVAL: Duration = Duration::from_millis(500);
/// A learner this close to the leader's last log index counts as caught up: under load the
/// leader's log keeps growing, and the rest arrives before the voter change commits.
const CAUGHT_UP_SLACK: u64 = 64;
/// A move whose learner makes no progress for this long, while its node is unreachable, is
/// given up.
const STALLED_MOVE: Duration = Duration::from_secs(60);
/// How long a removed node that is still linked keeps receiving the metadata log, so that it
/// learns of its removal and stops, before it is dropped from the metadata group.
const REMOVED_GRACE: Duration = Duration::from_secs(10);

/// What the metadata leader remembers between rounds; lost with leadership, rebuilt.
#[derive(Debug, Default)]
pub(crate) struct LeaderMemory {
    /// Since when each removed node is known removed.
    removed_seen: HashMap<u64, Instant>,
    /// Per moving shard: the learner's last matched index and when it last advanced.
    progress: HashMap<u32, (Option<u64>, Instant)>,
    /// Per shard: its leader's applied index when first seen over a load window, and when.
    load_seen: HashMap<u32, (u64, Instant)>,
    /// When shard sizes and loads were last read.
    usage_read: Option<Instant>,
    /// Each shard's size as last read (its leader's last snapshot), for balancing by bytes.
    shard_bytes: BTreeMap<u32, u64>,
    /// Shards past the split size that no slot divides usefully, their size then and when:
    /// not looked at again for a size split until they grow by a quarter, or for
    /// [`UNSPLITTABLE_KEPT`] (the big key may have gone).
    unsplittable: HashMap<u32, (u64, Instant)>,
}

/// Counters of the elastic cluster's work on this node, for `/metrics`.
#[derive(Debug, Default)]
pub struct ElasticMetrics {
    /// Moves this node (as metadata leader) planned.
    pub moves_started: AtomicU64,
    /// Moves it completed.
    pub moves_completed: AtomicU64,
    /// Moves it gave up.
    pub moves_cancelled: AtomicU64,
    /// Splits it completed (by hand or automatic).
    pub splits_completed: AtomicU64,
    /// Automatic splits it decided.
    pub splits_automatic: AtomicU64,
    /// Automatic splits by size it declined: most of the shard's bytes were in one slot (one
    /// key or hash tag), which no split can divide.
    pub splits_declined: AtomicU64,
}

/// Starts the metadata leader's jobs on `node` (idle while it does not lead).
pub(crate) fn spawn(node: &Arc<Node>) {
    crate::node::spawn_periodic(Arc::downgrade(node), INTERVAL, |node| async move {
        lead(&node).await;
    });
}

/// One round of the metadata leader's jobs.
pub(crate) async fn lead(node: &Arc<Node>) {
    if !node.meta.is_leader() {
        return;
    }
    let Some(map) = node.cluster_map() else {
        write_first_map(node).await;
        return;
    };
    let steps: [(&str, Result<(), ClusterError>); 7] = [
        ("admitting nodes", admit_joined(node, &map).await),
        ("cluster version", raise_cluster_version(node, &map).await),
        ("metadata voters", keep_meta_voters(node, &map).await),
        ("splitting shards", drive_splits(node, &map).await),
        ("moving replicas", drive_moves(node, &map).await),
        ("planning", plan(node, &map).await),
        ("automatic splits", split_when_due(node, &map).await),
    ];
    for (what, result) in steps {
        if let Err(e) = result {
            tracing::info!(error = %e, "metadata leader: {what}");
        }
    }
}

/// Writes the first map, create-only, once every initial node has registered.
async fn write_first_map(node: &Node) {
    let directory = node.directory_snapshot();
    let infos: Option<Vec<NodeInfo>> = node
        .initial_nodes()
        .iter()
        .map(|(name, _)| directory.get(&crate::join::id_of(name)).cloned())
        .collect();
    let Some(infos) = infos.filter(|i| !i.is_empty()) else {
        return;
    };
    let factor = node.config.replication_factor as usize;
    if factor > infos.len() {
        tracing::warn!(
            factor,
            nodes = infos.len(),
            "replication factor exceeds the node count; each shard gets one replica per node"
        );
    }
    let mut map = meta::place(&infos, node.bootstrap_shards, factor);
    // A new cluster starts at the lowest protocol its nodes run (all the same, but in a test
    // of mixed versions).
    map.cluster_version = infos
        .iter()
        .map(|info| node.version_of(info.id()).1.map_or(0, |v| v.protocol))
        .min()
        .unwrap_or(0);
    if map.cluster_version < trireme_types::version::since::REGIONS {
        // A metadata leader of the older build would drop it; an operator sets it once the
        // upgrade is done.
        map.home_region = None;
    }
    match write_map(node, &map, PutCondition::IfAbsent).await {
        Ok(true) => tracing::info!(shards = node.bootstrap_shards, "placed every shard"),
        Ok(false) => tracing::info!("placement written by another node"),
        Err(e) => tracing::info!(error = %e, "placement not written yet"),
    }
}

/// Writes `map` into the metadata group under `condition`; whether it was written (a
/// compare-and-set loses to a change written since the map was read).
async fn write_map(
    node: &Node,
    map: &ClusterMap,
    condition: PutCondition,
) -> Result<bool, ClusterError> {
    let value = serde_json::to_vec(map)
        .map_err(|e| ClusterError::Internal(format!("cannot encode the cluster map: {e}")))?;
    let put = Command::Put {
        key: Bytes::from_static(meta::PLACEMENT_KEY),
        value: Bytes::from(value),
        flags: None,
        condition,
        ttl: TtlUpdate::Clear,
        return_previous: false,
    };
    let outcome: crate::request::PutOutcome = node.write_shard(META_SHARD, put).await?;
    Ok(outcome.written)
}

/// How many times [`update_map`] reads the map again when another change was written
/// between its read and its write.
const MAP_UPDATE_TRIES: u32 = 8;

/// Reads the current map through the metadata leader, lets `change` edit it, and writes it
/// back with a compare-and-set and a new epoch when `change` says it changed something.
/// Returns the map written, if any. When another change (often a step of the metadata
/// leader's own moves) was written in between, `change` runs again on the new map, a few
/// times before the conflict is the caller's.
pub(crate) async fn update_map<T>(
    node: &Node,
    mut change: impl FnMut(&mut ClusterMap) -> Result<Option<T>, ClusterError>,
) -> Result<Option<(ClusterMap, T)>, ClusterError> {
    let mut tries = 0;
    loop {
        let (mut map, index) = node.read_map_with_index().await?;
        let Some(outcome) = change(&mut map)? else {
            return Ok(None);
        };
        map.epoch += 1;
        if write_map(node, &map, PutCondition::IfModifyIndex(index)).await? {
            return Ok(Some((map, outcome)));
        }
        tries += 1;
        if tries == MAP_UPDATE_TRIES {
            return Err(crate::membership::refused(
                ErrorCode::Conflict,
                "the cluster map kept changing while this change was being made; nothing was changed, try again",
            ));
        }
    }
}

/// With `[cluster] auto_finalize_upgrade`, raises the cluster version once every member
/// runs a newer protocol than it (see [`Node::finalize_upgrade`]); never lowers it.
async fn raise_cluster_version(node: &Node, map: &ClusterMap) -> Result<(), ClusterError> {
    if !node.config.auto_finalize_upgrade {
        return Ok(());
    }
    let Ok(next) = meta::next_cluster_version(map, 0, |id| node.version_of(id)) else {
        return Ok(());
    };
    if next <= map.cluster_version {
        return Ok(());
    }
    update_map(node, |map| {
        let next = meta::next_cluster_version(map, 0, |id| node.version_of(id))
            .unwrap_or(map.cluster_version);
        if next <= map.cluster_version {
            return Ok(None);
        }
        tracing::info!(
            from = map.cluster_version,
            to = next,
            "every node runs a newer protocol: the cluster version rises"
        );
        map.cluster_version = next;
        Ok(Some(()))
    })
    .await
    .map(drop)
}

/// Registered nodes that are not in the map yet: added to the metadata group as learners,
/// then, once they follow its log, made active (and given a member identity for shard groups).
async fn admit_joined(node: &Node, map: &ClusterMap) -> Result<(), ClusterError> {
    let status = node.meta.status();
    let mut ready = Vec::new();
    for (id, info) in node.directory_snapshot() {
        if map.state(id).is_some() && status.members.contains_key(&NodeId(id)) {
            continue;
        }
        if map.state(id) == Some(NodeState::Removed) {
            continue;
        }
        if !status.members.contains_key(&NodeId(id)) {
            if let Err(e) = node
                .meta
                .raft()
                .add_learner(id, meta::member(&info.node), false)
                .await
            {
                tracing::info!(node = %info.node.name, error = %e, "cannot add metadata learner yet");
            }
            continue;
        }
        if map.state(id).is_none() && node.meta.follower_caught_up(NodeId(id)) {
            ready.push(info);
        }
    }
    if ready.is_empty() {
        return Ok(());
    }
    update_map(node, |map| {
        let mut changed = false;
        for info in &ready {
            if map.state(info.id()).is_none() {
                map.states.insert(info.id(), NodeState::Active);
                map.members.insert(info.id(), meta::member(&info.node));
                changed = true;
            }
        }
        Ok(changed.then_some(()))
    })
    .await?;
    for info in ready {
        tracing::info!(node = %info.node.name, "node joined: active");
    }
    Ok(())
}

/// Keeps an odd number of metadata voters, up to five, among the active nodes: promotes
/// caught-up learners, demotes voters that are leaving (to learners: a draining node still
/// follows the map), and drops removed nodes from the group once they are gone.
///
/// A voter change left half done (its leader lost leadership or crashed between the joint
/// configuration and the final one) is rolled forward here, to the voters wanted now:
/// openraft never finishes it by itself, and a draining node that is still a voter of the
/// joint configuration would never be marked removed.
async fn keep_meta_voters(node: &Node, map: &ClusterMap) -> Result<(), ClusterError> {
    let status = node.meta.status();
    let active = map.nodes_in(NodeState::Active);
    let removed = map.nodes_in(NodeState::Removed);

    // Removed nodes leave the metadata group once they stopped (or after a grace period);
    // a joint configuration is finished first.
    let gone: Vec<NodeId> = if status.joint {
        Vec::new()
    } else {
        let mut memory = node.leader_memory();
        memory.removed_seen.retain(|id, _| removed.contains(id));
        removed
            .iter()
            .map(|id| NodeId(*id))
            .filter(|id| status.members.contains_key(id) && !status.voters.contains(id))
            .filter(|id| {
                let since = *memory.removed_seen.entry(id.0).or_insert_with(Instant::now);
                !node.is_linked(*id) || since.elapsed() > REMOVED_GRACE
            })
            .collect()
    };
    if let Some(id) = gone.first() {
        // One membership change per round.
        node.meta.remove_learner(*id).await?;
        tracing::info!(node = %id, "removed node left the metadata group");
        return Ok(());
    }

    let most = active.len().clamp(1, meta::META_VOTERS);
    let want = if most.is_multiple_of(2) {
        most - 1
    } else {
        most
    };
    let mut voters: BTreeSet<NodeId> = status
        .voters
        .iter()
        .copied()
        .filter(|v| active.contains(&v.0))
        .collect();
    for id in active.iter().copied().map(NodeId) {
        if voters.len() >= want {
            break;
        }
        if !voters.contains(&id)
            && status.members.contains_key(&id)
            && node.meta.follower_caught_up(id)
            && node.is_linked(id)
        {
            voters.insert(id);
        }
    }
    while voters.len() > want {
        let Some(extra) = voters.iter().rev().find(|v| v.0 != node.node_id).copied() else {
            break;
        };
        voters.remove(&extra);
    }
    if voters.is_empty() || (voters == status.voters && !status.joint) {
        return Ok(());
    }
    if !voters.contains(&node.node_id()) {
        // Hand the metadata leadership to a staying voter; it makes the change.
        if let Some(heir) = voters
            .iter()
            .copied()
            .find(|v| node.is_linked(*v) && node.meta.follower_caught_up(*v))
        {
            node.meta.transfer_leader(heir).await?;
        }
        return Ok(());
    }
    tracing::info!(from = ?status.voters, to = ?voters, joint = status.joint, "changing the metadata voters");
    node.meta.set_voters(voters, true).await?;
    Ok(())
}

/// Finishes the split in progress: has the shard's leader apply it (again, harmlessly, if a
/// previous metadata leader did), then gives the upper slots to the new shard in the map. A
/// split the shard refuses (it no longer owns those slots) is forgotten.
async fn drive_splits(node: &Node, map: &ClusterMap) -> Result<(), ClusterError> {
    for (parent, split) in &map.splits {
        let shard = ShardId(*parent);
        let op = MembershipOp::Split {
            at_slot: split.at_slot,
            child: split.child,
            range: split.range,
        };
        let finish = match node.on_shard_leader(shard, op).await? {
            MembershipReply::Done => true,
            MembershipReply::Refused(why) => {
                tracing::warn!(shard = shard.0, %why, "split refused; forgetting it");
                false
            }
            other => return Err(step_failed(shard, "splitting", other)),
        };
        let written = update_map(node, |map| {
            if map.splits.get(parent) != Some(split) {
                return Ok(None);
            }
            if finish {
                map.finish_split(shard);
            } else {
                map.splits.remove(parent);
            }
            Ok(Some(()))
        })
        .await?;
        if written.is_some() && finish {
            node.elastic_metrics
                .splits_completed
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                shard = shard.0,
                child = split.child,
                at_slot = split.at_slot,
                "shard split"
            );
        }
    }
    Ok(())
}

/// How often shard sizes and loads are read for automatic splits.
const USAGE_INTERVAL: Duration = Duration::from_secs(10);
/// How long a shard found unsplittable by size is left alone unless it grows.
const UNSPLITTABLE_KEPT: Duration = Duration::from_secs(600);
/// How long a shard's write rate is averaged over before it can trigger a split.
const LOAD_WINDOW: Duration = Duration::from_secs(60);

/// Reads each shard's size from its leader every ten seconds while nothing moves (kept for
/// balancing by bytes), and decides an automatic split when a shard has grown past `[cluster]
/// split_bytes` or its log past `split_writes_per_sec` (averaged over a minute): the largest
/// such shard, one at a time, while the shard count is below `max_shards`.
async fn split_when_due(node: &Node, map: &ClusterMap) -> Result<(), ClusterError> {
    let config = &node.config;
    if !map.splits.is_empty() || !map.moves.is_empty() {
        return Ok(());
    }
    {
        let mut memory = node.leader_memory();
        if memory
            .usage_read
            .is_some_and(|at| at.elapsed() < USAGE_INTERVAL)
        {
            return Ok(());
        }
        memory.usage_read = Some(Instant::now());
    }
    let mut due: Option<(u64, ShardId, &'static str)> = None;
    for shard in (0..map.shard_count()).map(ShardId) {
        let MembershipReply::Usage { bytes, applied } =
            node.on_shard_leader(shard, MembershipOp::Usage).await?
        else {
            continue;
        };
        let rate = {
            let mut memory = node.leader_memory();
            let seen = memory
                .load_seen
                .entry(shard.0)
                .or_insert((applied, Instant::now()));
            let elapsed = seen.1.elapsed();
            if elapsed >= LOAD_WINDOW {
                let rate = applied.saturating_sub(seen.0) / elapsed.as_secs().max(1);
                *seen = (applied, Instant::now());
                Some(rate)
            } else {
                None
            }
        };
        let unsplittable = {
            let mut memory = node.leader_memory();
            memory.shard_bytes.insert(shard.0, bytes);
            memory.unsplittable.get(&shard.0).is_some_and(|(at, when)| {
                bytes < at.saturating_add(at / 4) && when.elapsed() < UNSPLITTABLE_KEPT
            })
        };
        let by_size = config.split_bytes > 0 && bytes > config.split_bytes && !unsplittable;
        let by_load = config.split_writes_per_sec > 0
            && rate.is_some_and(|r| r > config.split_writes_per_sec);
        if (by_size || by_load) && due.is_none_or(|(b, _, _)| bytes > b) {
            due = Some((bytes, shard, if by_size { "size" } else { "load" }));
        }
    }
    let off = config.split_bytes == 0 && config.split_writes_per_sec == 0;
    let Some((bytes, shard, why)) = due.filter(|_| !off && map.shard_count() < config.max_shards)
    else {
        return Ok(());
    };
    // A split by size cuts where it halves the shard's bytes, and not at all when one slot
    // holds most of them: the half holding that slot would pass the size again, split again,
    // and each split's snapshots and moves would carry the big key around for nothing.
    let at_slot = if why == "size" {
        let range = map.slot_ranges()[shard.0 as usize];
        match node
            .on_shard_leader(shard, MembershipOp::SplitPoint { range })
            .await?
        {
            MembershipReply::SplitPoint(Some(slot)) => Some(slot),
            MembershipReply::SplitPoint(None) => {
                node.leader_memory()
                    .unsplittable
                    .insert(shard.0, (bytes, Instant::now()));
                node.elastic_metrics
                    .splits_declined
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(
                    shard = shard.0,
                    bytes,
                    "not splitting a shard past the split size: one slot holds most of its bytes (one big key or hash tag)"
                );
                return Ok(());
            }
            // A leader on a build from before split points: the middle of the range.
            MembershipReply::Failed(reason) if reason.starts_with(UNDECODABLE_REQUEST) => None,
            // No leader, or its count of the bytes did not finish in time: the middle of
            // the range might cut through a big key, so the split waits for the next round.
            other => {
                tracing::info!(shard = shard.0, answer = ?other, "no split point for an automatic split; trying again later");
                return Ok(());
            }
        }
    } else {
        None
    };
    match crate::operator::plan_split(node, shard, at_slot).await {
        Ok(started) => {
            node.elastic_metrics
                .splits_automatic
                .fetch_add(1, Ordering::Relaxed);
            tracing::info!(
                shard = shard.0,
                bytes,
                why,
                child = started.child.0,
                at_slot = started.at_slot,
                "splitting a shard automatically"
            );
        }
        Err(e) => tracing::info!(shard = shard.0, error = %e, "automatic split not started"),
    }
    Ok(())
}

/// The largest share of a shard's bytes one side of an automatic split may keep: a cut that
/// cannot do better leaves the shard whole.
const MAX_SPLIT_SHARE: f64 = 0.75;

/// The slot that splits a shard whose slots are `range` (first, last) and which holds
/// `slot_bytes` (bytes per slot) into two parts of about equal bytes: the first slot of the
/// upper part. `None` when even the best cut leaves one part more than [`MAX_SPLIT_SHARE`]
/// of the bytes, or the range has one slot.
pub(crate) fn balanced_split_slot(
    slot_bytes: &BTreeMap<u16, u64>,
    (first, last): (u16, u16),
) -> Option<u16> {
    let within = || slot_bytes.range(first..=last);
    let total: u64 = within().map(|(_, b)| *b).sum();
    if first >= last || total == 0 {
        return None;
    }
    // Cutting just before slot `s` leaves `below` bytes in the lower part. Cuts between two
    // stored slots are all alike; of those the last is taken, just before the upper part's
    // first stored slot.
    let mut below = 0u64;
    let mut best: Option<(u64, u16)> = None;
    for (&slot, &bytes) in within() {
        for cut in [slot, slot.saturating_add(1)] {
            if cut <= first || cut > last {
                continue;
            }
            let lower = if cut == slot { below } else { below + bytes };
            let larger = lower.max(total - lower);
            if best.is_none_or(|(b, _)| larger <= b) {
                best = Some((larger, cut));
            }
        }
        below += bytes;
    }
    best.filter(|(larger, _)| (*larger as f64) <= MAX_SPLIT_SHARE * total as f64)
        .map(|(_, cut)| cut)
}

/// Takes the next step of every move in progress.
async fn drive_moves(node: &Node, map: &ClusterMap) -> Result<(), ClusterError> {
    for (shard, mv) in &map.moves {
        let shard = ShardId(*shard);
        if let Err(e) = step(node, map, shard, mv).await {
            tracing::info!(shard = shard.0, error = %e, "move step");
        }
    }
    Ok(())
}

/// One step of the move of a replica of `shard`.
async fn step(
    node: &Node,
    map: &ClusterMap,
    shard: ShardId,
    mv: &Move,
) -> Result<(), ClusterError> {
    match mv.phase {
        MovePhase::Learner => {
            if map.state(mv.to) != Some(NodeState::Active) {
                return set_phase(node, shard, mv, MovePhase::Cancel).await;
            }
            let member = map.members.get(&mv.to).cloned().ok_or_else(|| {
                ClusterError::Internal(format!("no identity for node {:016x}", mv.to))
            })?;
            match node
                .on_shard_leader(
                    shard,
                    MembershipOp::AddLearner {
                        node: mv.to,
                        member,
                    },
                )
                .await?
            {
                MembershipReply::Done => {}
                other => return Err(step_failed(shard, "adding a learner", other)),
            }
            let (last_index, matched) = match node
                .on_shard_leader(shard, MembershipOp::Progress { node: mv.to })
                .await?
            {
                MembershipReply::Progress {
                    last_index,
                    matched,
                } => (last_index, matched),
                other => return Err(step_failed(shard, "reading progress", other)),
            };
            let stalled = {
                let mut memory = node.leader_memory();
                let entry = memory
                    .progress
                    .entry(shard.0)
                    .or_insert((matched, Instant::now()));
                if entry.0 != matched {
                    *entry = (matched, Instant::now());
                }
                entry.1.elapsed() > STALLED_MOVE
            };
            if matched.is_some_and(|m| m + CAUGHT_UP_SLACK >= last_index) {
                node.leader_memory().progress.remove(&shard.0);
                if mv.learner {
                    // It stays a learner: recorded as one, the move is done.
                    if change_move(node, shard, mv, |map| map.finish_learner(shard, mv)).await? {
                        node.elastic_metrics
                            .moves_completed
                            .fetch_add(1, Ordering::Relaxed);
                        tracing::info!(shard = shard.0, to = %format_args!("{:016x}", mv.to), "learner placed");
                    }
                    return Ok(());
                }
                return set_phase(node, shard, mv, MovePhase::Voter).await;
            }
            if stalled && !node.is_linked(NodeId(mv.to)) {
                tracing::warn!(shard = shard.0, to = %format_args!("{:016x}", mv.to), "move stalled; giving up");
                return set_phase(node, shard, mv, MovePhase::Cancel).await;
            }
            Ok(())
        }
        MovePhase::Voter => {
            let mut voters: BTreeSet<u64> = map
                .replicas
                .get(shard.0 as usize)
                .into_iter()
                .flatten()
                .copied()
                .collect();
            if let Some(from) = mv.from {
                voters.remove(&from);
            }
            voters.insert(mv.to);
            match node
                .on_shard_leader(shard, MembershipOp::SetVoters { voters })
                .await?
            {
                MembershipReply::Done => {}
                MembershipReply::Retry(why) => {
                    tracing::debug!(shard = shard.0, %why, "voter change waits");
                    return Ok(());
                }
                other => return Err(step_failed(shard, "changing voters", other)),
            }
            if change_move(node, shard, mv, |map| map.finish_move(shard, mv)).await? {
                node.elastic_metrics
                    .moves_completed
                    .fetch_add(1, Ordering::Relaxed);
                tracing::info!(shard = shard.0, from = ?mv.from.map(|f| format!("{f:016x}")), to = %format_args!("{:016x}", mv.to), "replica moved");
            }
            Ok(())
        }
        MovePhase::Cancel => {
            // A voter move to a node that already held a learner of the shard leaves that
            // learner in place.
            let keep = !mv.learner && map.is_learner(shard, mv.to);
            if !keep {
                match node
                    .on_shard_leader(shard, MembershipOp::RemoveLearner { node: mv.to })
                    .await?
                {
                    MembershipReply::Done => {}
                    other => return Err(step_failed(shard, "removing a learner", other)),
                }
            }
            if change_move(node, shard, mv, |map| {
                map.moves.remove(&shard.0);
                if mv.learner {
                    map.drop_learner(shard, mv.to);
                }
            })
            .await?
            {
                node.elastic_metrics
                    .moves_cancelled
                    .fetch_add(1, Ordering::Relaxed);
                node.leader_memory().progress.remove(&shard.0);
            }
            Ok(())
        }
    }
}

async fn set_phase(
    node: &Node,
    shard: ShardId,
    mv: &Move,
    phase: MovePhase,
) -> Result<(), ClusterError> {
    change_move(node, shard, mv, |map| {
        if let Some(current) = map.moves.get_mut(&shard.0) {
            current.phase = phase;
        }
    })
    .await
    .map(drop)
}

/// Applies `change` to the map if `shard`'s move is still `mv` there (another leader may have
/// taken it further meanwhile); returns whether it did.
async fn change_move(
    node: &Node,
    shard: ShardId,
    mv: &Move,
    mut change: impl FnMut(&mut ClusterMap),
) -> Result<bool, ClusterError> {
    let written = update_map(node, |map| {
        if map.moves.get(&shard.0) != Some(mv) {
            return Ok(None);
        }
        change(map);
        Ok(Some(()))
    })
    .await?;
    Ok(written.is_some())
}

fn step_failed(shard: ShardId, what: &str, reply: MembershipReply) -> ClusterError {
    ClusterError::Remote(trireme_types::TriremeError::new(
        ErrorCode::Unavailable,
        format!("shard {shard}: {what}: {reply:?}"),
    ))
}

/// Plans new moves within the cluster-wide budget, spreads preferred leaders, and marks
/// drained nodes removed. Reads the map through the leader only when there is work.
async fn plan(node: &Node, map: &ClusterMap) -> Result<(), ClusterError> {
    let infos = node.directory_snapshot();
    let factor = node.config.replication_factor as usize;
    let meta_voters = node.meta.status().voters;
    let shard_bytes = node.leader_memory().shard_bytes.clone();
    let work = |map: &mut ClusterMap| {
        // From the map being changed: the one read again after a lost race may hold more.
        let budget = node.config.max_moves.saturating_sub(map.moves.len());
        let planned = Planner::of_leader(map, &infos, factor, &shard_bytes)
            .next_moves(budget, crate::now_ms());
        // A shard being split keeps its voters until the split is done: they seed the new
        // shard.
        let planned: Vec<_> = planned
            .into_iter()
            .filter(|(shard, _)| !map.splits.contains_key(shard))
            .collect();
        let mut started = planned.len();
        for (shard, mv) in planned {
            map.moves.insert(shard, mv);
        }
        // Learners in the other regions, once every member keeps them in the map.
        if map.cluster_version >= trireme_types::version::since::REGIONS {
            let budget = node.config.max_moves.saturating_sub(map.moves.len());
            let learners = Planner::of_leader(map, &infos, factor, &shard_bytes)
                .learner_moves(budget, crate::now_ms());
            started += learners.len();
            for (shard, mv) in learners {
                map.moves.insert(shard, mv);
            }
        }
        let mut changed = started > 0;
        changed |= spread_preferred(map, &crate::plan::may_lead(map, &infos));
        for id in map.nodes_in(NodeState::Draining) {
            let referenced = map.moves.values().any(|m| m.to == id || m.from == Some(id));
            if map.replica_count(id) == 0
                && map.learner_count(id) == 0
                && !referenced
                && !meta_voters.contains(&NodeId(id))
            {
                map.states.insert(id, NodeState::Removed);
                changed = true;
            }
        }
        if !changed {
            started = 0;
        }
        (changed, started)
    };
    let mut probe = map.clone();
    if !work(&mut probe).0 {
        return Ok(());
    }
    let written = update_map(node, |map| {
        let (changed, started) = work(map);
        Ok(changed.then_some(started))
    })
    .await?;
    if let Some((map, started)) = written {
        node.elastic_metrics
            .moves_started
            .fetch_add(started as u64, Ordering::Relaxed);
        for (shard, mv) in map
            .moves
            .iter()
            .filter(|(_, m)| m.phase == MovePhase::Learner)
        {
            tracing::debug!(shard, to = %format_args!("{:016x}", mv.to), "move planned");
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bytes(rows: &[(u16, u64)]) -> BTreeMap<u16, u64> {
        rows.iter().copied().collect()
    }

    #[test]
    fn a_split_point_halves_the_bytes_rather_than_the_range() {
        // Most bytes in the low slots: the cut falls among them, not at the range's middle.
        let rows = bytes(&[(10, 100), (20, 100), (30, 100), (40, 100), (9_000, 10)]);
        assert_eq!(balanced_split_slot(&rows, (0, 16_383)), Some(30));
        // Only the shard's own range counts.
        assert_eq!(balanced_split_slot(&rows, (25, 16_383)), Some(40));
        // Evenly spread: the cut lands past the first half.
        let even: Vec<(u16, u64)> = (0..100).map(|s| (s * 100, 7)).collect();
        assert_eq!(balanced_split_slot(&bytes(&even), (0, 16_383)), Some(5_000));
    }

    #[test]
    fn no_split_point_when_one_slot_holds_most_bytes() {
        // One big key: whichever side holds its slot keeps 90% of the bytes.
        let rows = bytes(&[(5, 10), (700, 900), (9_000, 90)]);
        assert_eq!(balanced_split_slot(&rows, (0, 16_383)), None);
        // Three quarters on one side is still a split worth making.
        let rows = bytes(&[(5, 250), (700, 750)]);
        assert_eq!(balanced_split_slot(&rows, (0, 16_383)), Some(700));
        // Nothing stored, or a single slot, cannot be split.
        assert_eq!(balanced_split_slot(&BTreeMap::new(), (0, 100)), None);
        assert_eq!(balanced_split_slot(&bytes(&[(7, 5)]), (7, 7)), None);
    }
}
