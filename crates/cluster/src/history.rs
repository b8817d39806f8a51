//! What happened to each shard's placement, as this node saw it: every cluster map it applies
//! is compared with the last one it recorded, and each difference (a move begun, a step of it,
//! a move done or given up, a split decided, finished or given up, a shard created, voters
//! changed otherwise) is kept as an event. The cluster itself keeps no history of placement,
//! so this is per node, in memory, and bounded: a restarted node starts empty, and the oldest
//! events go first.
//!
//! Maps are compared in epoch order: one that is not newer than the last recorded is passed
//! over, and when a node applies a map several epochs after the last (it was down, or behind),
//! the events say which epochs they cover, since the steps between are not seen.

use crate::meta::{ClusterMap, MovePhase};
use serde::Serialize;
use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

/// Events kept on a node, across every shard: at about 150 bytes each, well under a MiB.
pub(crate) const HISTORY_EVENTS: usize = 4096;

/// One change to one shard's placement, as the console shows it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ShardEvent {
    /// The shard.
    pub shard: u32,
    /// The cluster map's epoch that carried the change.
    pub epoch: u64,
    /// The first epoch the change may have come in: `epoch` itself when this node applied
    /// the map just before it, lower when it applied several epochs at once (the steps in
    /// between are not seen).
    pub from_epoch: u64,
    /// When this node applied it, Unix ms.
    pub at_ms: u64,
    /// `move_started`, `move_phase`, `move_done`, `move_given_up`, `split_started`,
    /// `split_done`, `split_given_up`, `created_by_split`, `created` or `voters_changed`.
    pub kind: &'static str,
    /// What happened, in words, with node names.
    pub text: String,
}

/// The bounded list of [`ShardEvent`]s a node keeps, and the map they were last taken from.
#[derive(Debug, Default)]
pub(crate) struct ShardHistory {
    inner: Mutex<Recorded>,
}

#[derive(Debug, Default)]
struct Recorded {
    events: VecDeque<ShardEvent>,
    /// The newest map compared so far.
    last: Option<Arc<ClusterMap>>,
}

impl ShardHistory {
    /// Records what changed from the last map recorded to `new`: nothing for the first map
    /// (there is no before to compare with), nor for a map whose epoch is not above the last
    /// one's (applied out of order, or again). Maps are compared under one lock, so the events
    /// are in epoch order whichever thread applied which map.
    pub(crate) fn record(&self, new: &Arc<ClusterMap>, name: impl Fn(u64) -> String) {
        let mut recorded = self
            .inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let found = match &recorded.last {
            Some(last) if new.epoch <= last.epoch => return,
            Some(last) => diff(last, new, crate::now_ms(), &name),
            None => Vec::new(),
        };
        recorded.last = Some(new.clone());
        for event in found {
            if recorded.events.len() == HISTORY_EVENTS {
                recorded.events.pop_front();
            }
            recorded.events.push_back(event);
        }
    }

    /// The events of `shard`, oldest first.
    pub(crate) fn of_shard(&self, shard: u32) -> Vec<ShardEvent> {
        self.inner
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .events
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
            from_epoch: old.epoch.saturating_add(1).min(new.epoch),
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
                // Done when the target holds a voter afterwards (whether the leaving replica
                // was swapped for it, or only removed because the target was a voter
                // already); given up when it was being cancelled or the target has none.
                let landed =
                    mv.phase != MovePhase::Cancel && after.is_some_and(|r| r.contains(&mv.to));
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
                match origin {
                    Some((parent, at)) => event(
                        shard,
                        "created_by_split",
                        format!(
                            "created by the split of shard {parent} at slot {at}, on {}",
                            names(a)
                        ),
                    ),
                    None => event(shard, "created", format!("created on {}", names(a))),
                }
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
                if new.replicas.len() > split.child as usize {
                    event(
                        shard,
                        "split_done",
                        format!(
                            "split done: keeps slots {}..={}, shard {} has the rest",
                            split.range.0,
                            split.at_slot.saturating_sub(1),
                            split.child
                        ),
                    );
                } else {
                    event(
                        shard,
                        "split_given_up",
                        format!("split at slot {} given up", split.at_slot),
                    );
                }
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

    fn map(epoch: u64, replicas: Vec<Vec<u64>>) -> Arc<ClusterMap> {
        Arc::new(ClusterMap {
            epoch,
            replicas,
            members: Default::default(),
            generations: Vec::new(),
            states: Default::default(),
            moves: Default::default(),
            slots: Vec::new(),
            splits: Default::default(),
            origins: Default::default(),
            cluster_version: 0,
            home_region: None,
            learners: Default::default(),
            survival: Default::default(),
        })
    }

    /// `base` at `epoch`, changed by `change`.
    fn next(
        base: &ClusterMap,
        epoch: u64,
        change: impl FnOnce(&mut ClusterMap),
    ) -> Arc<ClusterMap> {
        let mut map = base.clone();
        map.epoch = epoch;
        change(&mut map);
        Arc::new(map)
    }

    fn moving(from: Option<u64>, to: u64, phase: MovePhase) -> Move {
        Move {
            from,
            to,
            phase,
            started_ms: 0,
            learner: false,
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
        let start = map(1, vec![vec![1, 2], vec![2, 3]]);
        history.record(&start, name);
        assert!(
            history.of_shard(0).is_empty(),
            "the first map has no before"
        );
        let learner = next(&start, 2, |m| {
            m.moves.insert(1, moving(Some(3), 1, MovePhase::Learner));
        });
        history.record(&learner, name);
        let voter = next(&learner, 3, |m| {
            m.moves.get_mut(&1).unwrap().phase = MovePhase::Voter;
        });
        history.record(&voter, name);
        let done = next(&voter, 4, |m| {
            let mv = m.moves[&1].clone();
            m.finish_move(trireme_types::ShardId(1), &mv);
        });
        history.record(&done, name);

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
        let epochs: Vec<(u64, u64)> = history
            .of_shard(1)
            .iter()
            .map(|e| (e.from_epoch, e.epoch))
            .collect();
        assert_eq!(epochs, vec![(2, 2), (3, 3), (4, 4)], "one epoch each");
        assert!(history.of_shard(0).is_empty(), "shard 0 never changed");
    }

    #[test]
    fn a_move_to_a_voter_already_there_is_done_and_a_cancelled_one_given_up() {
        let history = ShardHistory::default();
        let start = map(1, vec![vec![1, 2, 3], vec![1, 2]]);
        history.record(&start, name);
        // Shard 0: n3 leaves and n2, a voter already, takes its place: n3 is only removed.
        let both = next(&start, 2, |m| {
            m.moves.insert(0, moving(Some(3), 2, MovePhase::Voter));
            m.moves.insert(1, moving(Some(2), 3, MovePhase::Learner));
        });
        history.record(&both, name);
        let cancelling = next(&both, 3, |m| {
            m.moves.get_mut(&1).unwrap().phase = MovePhase::Cancel;
        });
        history.record(&cancelling, name);
        let over = next(&cancelling, 4, |m| {
            let mv = m.moves[&0].clone();
            m.finish_move(trireme_types::ShardId(0), &mv);
            m.moves.remove(&1);
        });
        history.record(&over, name);
        assert_eq!(
            kinds(&history, 0).last().unwrap(),
            &(
                "move_done",
                "move n3 -> n2 done; voters now n1, n2".to_string()
            )
        );
        assert_eq!(
            kinds(&history, 1).last().unwrap(),
            &("move_given_up", "move n2 -> n3 given up".to_string())
        );
    }

    #[test]
    fn maps_are_taken_in_epoch_order_and_skipped_epochs_are_said() {
        let history = ShardHistory::default();
        let one = map(1, vec![vec![1, 2]]);
        history.record(&one, name);
        let three = next(&one, 3, |m| m.replicas[0] = vec![1, 3]);
        let two = next(&one, 2, |m| m.replicas[0] = vec![2, 3]);
        history.record(&three, name);
        // Applied after epoch 3 by a slower thread: not newer, so not compared.
        history.record(&two, name);
        history.record(&three, name);
        let events = history.of_shard(0);
        assert_eq!(events.len(), 1, "{events:?}");
        assert_eq!((events[0].from_epoch, events[0].epoch), (2, 3));
        assert_eq!(events[0].text, "voters n1, n2 -> n1, n3");
        // The next map is compared with epoch 3's, not with the stale one.
        let four = next(&three, 4, |m| m.replicas[0] = vec![3, 1]);
        history.record(&four, name);
        assert_eq!(
            kinds(&history, 0).last().unwrap(),
            &("voters_changed", "preferred leader now n3".to_string())
        );
    }

    #[test]
    fn splits_and_new_shards_are_told_apart() {
        let history = ShardHistory::default();
        let start = map(1, vec![vec![1, 2]]);
        history.record(&start, name);
        let pending = PendingSplit {
            at_slot: 8192,
            child: 1,
            range: (0, 16383),
            started_ms: 0,
        };
        let splitting = next(&start, 2, |m| {
            m.splits.insert(0, pending.clone());
        });
        history.record(&splitting, name);
        let split = next(&splitting, 3, |m| m.finish_split(trireme_types::ShardId(0)));
        history.record(&split, name);
        let again = next(&split, 4, |m| {
            m.splits.insert(
                0,
                PendingSplit {
                    at_slot: 4096,
                    child: 2,
                    range: (0, 8191),
                    ..pending.clone()
                },
            );
        });
        history.record(&again, name);
        let given_up = next(&again, 5, |m| {
            m.splits.clear();
        });
        history.record(&given_up, name);
        // A shard that appears with no split behind it.
        let grown = next(&given_up, 6, |m| m.replicas.push(vec![2, 3]));
        history.record(&grown, name);

        let events = kinds(&history, 0);
        assert_eq!(events[0].0, "split_started");
        assert_eq!(
            events[1],
            (
                "split_done",
                "split done: keeps slots 0..=8191, shard 1 has the rest".into()
            )
        );
        assert_eq!(events[2].0, "split_started");
        assert_eq!(
            events[3],
            ("split_given_up", "split at slot 4096 given up".into())
        );
        assert_eq!(
            kinds(&history, 1),
            vec![(
                "created_by_split",
                "created by the split of shard 0 at slot 8192, on n1, n2".to_string()
            )]
        );
        assert_eq!(
            kinds(&history, 2),
            vec![("created", "created on n2, n3".to_string())]
        );
    }

    #[test]
    fn the_history_is_bounded() {
        let history = ShardHistory::default();
        history.record(&map(1, vec![vec![1, 2]]), name);
        for epoch in 2..(HISTORY_EVENTS as u64 + 12) {
            let voters = if epoch % 2 == 0 {
                vec![1, 3]
            } else {
                vec![1, 2]
            };
            history.record(&map(epoch, vec![voters]), name);
        }
        let events = history.of_shard(0);
        assert_eq!(events.len(), HISTORY_EVENTS);
        assert!(
            events.windows(2).all(|w| w[0].epoch < w[1].epoch),
            "oldest first"
        );
        assert_eq!(events[0].epoch, 12, "the oldest went first");
    }
}
