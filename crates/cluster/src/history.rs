//! What happened to each shard's placement, as this node saw it: every cluster map it applies
//! is compared with the one before, and each difference (a move begun, a step of it, a move
//! done or given up, a split decided or finished, voters changed otherwise) is kept as an
//! event. The cluster itself keeps no history of placement, so this is per node, in memory,
//! and bounded: a restarted node starts empty, and the oldest events go first.

use crate::meta::{ClusterMap, MovePhase};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::Mutex;

/// Events kept on a node, across every shard: at about 150 bytes each, well under a MiB.
pub(crate) const HISTORY_EVENTS: usize = 4096;

/// One change to one shard's placement, as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardEvent {
    /// The shard.
    pub shard: u32,
    /// The cluster map's epoch that carried the change.
    pub epoch: u64,
    /// When this node applied it, Unix ms.
    pub at_ms: u64,
    /// `move_started`, `move_phase`, `move_done`, `move_given_up`, `split_started`,
    /// `split_done`, `created_by_split` or `voters_changed`.
    pub kind: &'static str,
    /// What happened, in words, with node names.
    pub text: String,
}

/// The bounded list of [`ShardEvent`]s a node keeps.
#[derive(Debug, Default)]
pub(crate) struct ShardHistory {
    events: Mutex<VecDeque<ShardEvent>>,
}

impl ShardHistory {
    /// Records what changed from `old` to `new` (nothing for the first map a node applies:
    /// it has no before to compare with).
    pub(crate) fn record(
        &self,
        old: Option<&ClusterMap>,
        new: &ClusterMap,
        name: impl Fn(u64) -> String,
    ) {
        let Some(old) = old else {
            return;
        };
        let found = diff(old, new, crate::now_ms(), &name);
        if found.is_empty() {
            return;
        }
        let mut events = self
            .events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        for event in found {
            if events.len() == HISTORY_EVENTS {
                events.pop_front();
            }
            events.push_back(event);
        }
    }

    /// The events of `shard`, oldest first.
    pub(crate) fn of_shard(&self, shard: u32) -> Vec<ShardEvent> {
        self.events
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .iter()
            .filter(|e| e.shard == shard)
            .cloned()
            .collect()
    }
}

/// The placement changes between two maps, shard by shard.
fn diff(
    old: &ClusterMap,
    new: &ClusterMap,
    at_ms: u64,
    name: &impl Fn(u64) -> String,
) -> Vec<ShardEvent> {
    let mut out = Vec::new();
    let mut event = |shard: u32, kind: &'static str, text: String| {
        out.push(ShardEvent {
            shard,
            epoch: new.epoch,
            at_ms,
            kind,
            text,
        });
    };
    let names = |ids: &[u64]| {
        ids.iter()
            .map(|id| name(*id))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let from = |from: Option<u64>| from.map_or_else(|| "(new replica)".to_string(), name);
    let phase = |p: MovePhase| match p {
        MovePhase::Learner => "catching up as a learner",
        MovePhase::Voter => "becoming a voter",
        MovePhase::Cancel => "being given up",
    };
    let shards = old.replicas.len().max(new.replicas.len()) as u32;
    for shard in 0..shards {
        let before = old.replicas.get(shard as usize);
        let after = new.replicas.get(shard as usize);
        match (old.moves.get(&shard), new.moves.get(&shard)) {
            (None, Some(mv)) => event(
                shard,
                "move_started",
                format!(
                    "move {} -> {} started ({})",
                    from(mv.from),
                    name(mv.to),
                    phase(mv.phase)
                ),
            ),
            (Some(was), Some(mv)) if was.phase != mv.phase || was.to != mv.to => event(
                shard,
                "move_phase",
                format!(
                    "move {} -> {}: {}",
                    from(mv.from),
                    name(mv.to),
                    phase(mv.phase)
                ),
            ),
            (Some(mv), None) => {
                let landed = after.is_some_and(|r| r.contains(&mv.to))
                    && !before.is_some_and(|r| r.contains(&mv.to));
                if landed {
                    event(
                        shard,
                        "move_done",
                        format!(
                            "move {} -> {} done; voters now {}",
                            from(mv.from),
                            name(mv.to),
                            names(after.map_or(&[][..], Vec::as_slice))
                        ),
                    );
                } else {
                    event(
                        shard,
                        "move_given_up",
                        format!("move {} -> {} given up", from(mv.from), name(mv.to)),
                    );
                }
            }
            _ => {}
        }
        let moved = old.moves.contains_key(&shard) && !new.moves.contains_key(&shard);
        match (before, after) {
            (Some(b), Some(a)) if !moved && b != a => {
                let mut sorted_b = b.clone();
                let mut sorted_a = a.clone();
                sorted_b.sort_unstable();
                sorted_a.sort_unstable();
                if sorted_b == sorted_a {
                    event(
                        shard,
                        "voters_changed",
                        format!("preferred leader now {}", names(&a[..1.min(a.len())])),
                    );
                } else {
                    event(
                        shard,
                        "voters_changed",
                        format!("voters {} -> {}", names(b), names(a)),
                    );
                }
            }
            (None, Some(a)) => {
                let origin = new.origins.get(&shard);
                let text = match origin {
                    Some((parent, at)) => format!(
                        "created by the split of shard {parent} at slot {at}, on {}",
                        names(a)
                    ),
                    None => format!("created on {}", names(a)),
                };
                event(shard, "created_by_split", text);
            }
            _ => {}
        }
        match (old.splits.get(&shard), new.splits.get(&shard)) {
            (None, Some(split)) => event(
                shard,
                "split_started",
                format!(
                    "split decided at slot {}: shard {} takes slots {}..={}",
                    split.at_slot, split.child, split.at_slot, split.range.1
                ),
            ),
            (Some(split), None) => {
                let done = new.replicas.len() > split.child as usize;
                event(
                    shard,
                    "split_done",
                    if done {
                        format!(
                            "split done: keeps slots {}..={}, shard {} has the rest",
                            split.range.0,
                            split.at_slot - 1,
                            split.child
                        )
                    } else {
                        format!("split at slot {} given up", split.at_slot)
                    },
                );
            }
            _ => {}
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::meta::{Move, PendingSplit};

    fn map(replicas: Vec<Vec<u64>>) -> ClusterMap {
        ClusterMap {
            epoch: 1,
            replicas,
            members: Default::default(),
            generations: Vec::new(),
            states: Default::default(),
            moves: Default::default(),
            slots: Vec::new(),
            splits: Default::default(),
            origins: Default::default(),
            cluster_version: 0,
        }
    }

    fn name(id: u64) -> String {
        format!("n{id}")
    }

    fn kinds(history: &ShardHistory, shard: u32) -> Vec<(&'static str, String)> {
        history
            .of_shard(shard)
            .into_iter()
            .map(|e| (e.kind, e.text))
            .collect()
    }

    #[test]
    fn a_move_is_recorded_step_by_step() {
        let history = ShardHistory::default();
        let start = map(vec![vec![1, 2], vec![2, 3]]);
        history.record(None, &start, name);
        assert!(
            history.of_shard(0).is_empty(),
            "the first map has no before"
        );

        let mut learner = start.clone();
        learner.epoch = 2;
        learner.moves.insert(
            1,
            Move {
                from: Some(3),
                to: 1,
                phase: MovePhase::Learner,
                started_ms: 0,
            },
        );
        history.record(Some(&start), &learner, name);
        let mut voter = learner.clone();
        voter.epoch = 3;
        voter.moves.get_mut(&1).unwrap().phase = MovePhase::Voter;
        history.record(Some(&learner), &voter, name);
        let mut done = voter.clone();
        done.epoch = 4;
        let mv = done.moves[&1].clone();
        done.finish_move(trireme_types::ShardId(1), &mv);
        history.record(Some(&voter), &done, name);

        assert_eq!(
            kinds(&history, 1),
            vec![
                (
                    "move_started",
                    "move n3 -> n1 started (catching up as a learner)".to_string()
                ),
                ("move_phase", "move n3 -> n1: becoming a voter".to_string()),
                (
                    "move_done",
                    "move n3 -> n1 done; voters now n2, n1".to_string()
                ),
            ]
        );
        assert_eq!(
            history
                .of_shard(1)
                .iter()
                .map(|e| e.epoch)
                .collect::<Vec<_>>(),
            vec![2, 3, 4]
        );
        assert!(history.of_shard(0).is_empty(), "shard 0 never changed");
    }

    #[test]
    fn a_given_up_move_and_a_split_are_told_apart() {
        let history = ShardHistory::default();
        let start = map(vec![vec![1, 2]]);
        let mut moving = start.clone();
        moving.moves.insert(
            0,
            Move {
                from: None,
                to: 3,
                phase: MovePhase::Learner,
                started_ms: 0,
            },
        );
        history.record(Some(&start), &moving, name);
        history.record(Some(&moving), &start, name);
        let mut splitting = start.clone();
        splitting.splits.insert(
            0,
            PendingSplit {
                at_slot: 8192,
                child: 1,
                range: (0, 16383),
                started_ms: 0,
            },
        );
        history.record(Some(&start), &splitting, name);
        let mut split = splitting.clone();
        split.finish_split(trireme_types::ShardId(0));
        history.record(Some(&splitting), &split, name);

        let events = kinds(&history, 0);
        assert_eq!(events[0].0, "move_started");
        assert_eq!(
            events[1],
            ("move_given_up", "move (new replica) -> n3 given up".into())
        );
        assert_eq!(events[2].0, "split_started");
        assert_eq!(
            events[3],
            (
                "split_done",
                "split done: keeps slots 0..=8191, shard 1 has the rest".into()
            )
        );
        assert_eq!(
            kinds(&history, 1),
            vec![(
                "created_by_split",
                "created by the split of shard 0 at slot 8192, on n1, n2".to_string()
            )]
        );
    }

    #[test]
    fn the_history_is_bounded() {
        let history = ShardHistory::default();
        let a = map(vec![vec![1, 2]]);
        let b = map(vec![vec![1, 3]]);
        for i in 0..HISTORY_EVENTS + 10 {
            if i % 2 == 0 {
                history.record(Some(&a), &b, name);
            } else {
                history.record(Some(&b), &a, name);
            }
        }
        assert_eq!(history.of_shard(0).len(), HISTORY_EVENTS);
    }
}
