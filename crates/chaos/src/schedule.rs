//! The fault plan of a run: a pure function of the seed, the node count, the duration and the
//! fault kinds allowed, so a printed seed replays the same faults at the same offsets.

use std::fmt;
use std::time::Duration;

use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;

/// The kinds of fault a run may inject (`--faults`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FaultKind {
    /// Network partitions: the leader isolated, or a minority cut from the majority.
    Partition,
    /// One node drops everything it receives from another.
    OneWay,
    /// Random packet loss on every link between nodes.
    Loss,
    /// Every peer link holds each chunk for 20-300 ms.
    Delay,
    /// `kill -9` of one node or of a majority, restarted after a while.
    Kill,
    /// `kill -9` of every node, then all restarted.
    KillAll,
    /// SIGSTOP of one node (often the leader) for 1-10 s, then SIGCONT.
    Pause,
    /// `kill -9` of the source or the target of a replica move in progress (of the busiest
    /// leader when none is), restarted after a while.
    KillMover,
    /// The metadata leader cut from every other node, while a move is in progress if one is.
    IsolateMeta,
    /// Every node of one region cut from the nodes of the others (only with regions).
    CutRegion,
}

impl FaultKind {
    /// Every kind, the default mix.
    pub const ALL: [FaultKind; 7] = [
        FaultKind::Partition,
        FaultKind::OneWay,
        FaultKind::Loss,
        FaultKind::Delay,
        FaultKind::Kill,
        FaultKind::KillAll,
        FaultKind::Pause,
    ];

    /// The faults aimed at replica moves, added to the default mix when the run moves
    /// replicas (splits or membership changes).
    pub const MID_MOVE: [FaultKind; 2] = [FaultKind::KillMover, FaultKind::IsolateMeta];

    /// The faults aimed at regions, added to the default mix when the nodes are spread over
    /// regions.
    pub const REGIONAL: [FaultKind; 1] = [FaultKind::CutRegion];

    /// The name used on the command line.
    #[must_use]
    pub fn name(self) -> &'static str {
        match self {
            FaultKind::Partition => "partition",
            FaultKind::OneWay => "one-way",
            FaultKind::Loss => "loss",
            FaultKind::Delay => "delay",
            FaultKind::Kill => "kill",
            FaultKind::KillAll => "kill-all",
            FaultKind::Pause => "pause",
            FaultKind::KillMover => "kill-mover",
            FaultKind::IsolateMeta => "isolate-meta",
            FaultKind::CutRegion => "cut-region",
        }
    }

    /// Parses a name from [`FaultKind::name`].
    #[must_use]
    pub fn parse(name: &str) -> Option<FaultKind> {
        FaultKind::ALL
            .into_iter()
            .chain(FaultKind::MID_MOVE)
            .chain(FaultKind::REGIONAL)
            .find(|k| k.name() == name)
    }
}

/// Which node a fault hits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Target {
    /// The node leading the most shards when the fault starts.
    Leader,
    /// A node by index (0-based).
    Node(usize),
}

/// One fault, with its nodes by index (0-based).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Fault {
    /// Cut the target from every other node.
    Isolate(Target),
    /// Cut `minority` from the rest.
    Split {
        /// The smaller side.
        minority: Vec<usize>,
    },
    /// `at` drops every packet from `from`.
    OneWay {
        /// The receiving node.
        at: usize,
        /// The node whose packets are dropped.
        from: usize,
    },
    /// Each packet between nodes is dropped with this probability, in percent.
    Loss {
        /// Drop probability in percent.
        percent: u32,
    },
    /// Each chunk on every peer link is held this long.
    Delay {
        /// Milliseconds.
        ms: u64,
    },
    /// `kill -9` of these nodes; restarted when the fault ends.
    Kill(Vec<usize>),
    /// SIGSTOP of the target; SIGCONT when the fault ends.
    Pause(Target),
    /// `kill -9` of the source (or, when `source` is false or the move has none, the target)
    /// of a move in progress; restarted when the fault ends.
    KillMover {
        /// Which end of the move.
        source: bool,
    },
    /// Cut the metadata leader from every other node.
    IsolateMeta,
    /// Cut every node of region `region` (0-based: `r1` is 0) from the others.
    CutRegion {
        /// The region.
        region: u32,
        /// Its nodes.
        nodes: Vec<usize>,
    },
}

impl Fault {
    /// The kind this fault belongs to.
    #[must_use]
    pub fn kind(&self, nodes: usize) -> FaultKind {
        match self {
            Fault::Isolate(_) | Fault::Split { .. } => FaultKind::Partition,
            Fault::OneWay { .. } => FaultKind::OneWay,
            Fault::Loss { .. } => FaultKind::Loss,
            Fault::Delay { .. } => FaultKind::Delay,
            Fault::Kill(victims) if victims.len() == nodes => FaultKind::KillAll,
            Fault::Kill(_) => FaultKind::Kill,
            Fault::Pause(_) => FaultKind::Pause,
            Fault::KillMover { .. } => FaultKind::KillMover,
            Fault::IsolateMeta => FaultKind::IsolateMeta,
            Fault::CutRegion { .. } => FaultKind::CutRegion,
        }
    }
}

fn names(nodes: &[usize]) -> String {
    nodes
        .iter()
        .map(|i| format!("n{}", i + 1))
        .collect::<Vec<_>>()
        .join(",")
}

impl fmt::Display for Target {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Target::Leader => write!(f, "the busiest leader"),
            Target::Node(i) => write!(f, "n{}", i + 1),
        }
    }
}

impl fmt::Display for Fault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Fault::Isolate(t) => write!(f, "isolate {t}"),
            Fault::Split { minority } => write!(f, "partition {} from the rest", names(minority)),
            Fault::OneWay { at, from } => write!(f, "n{} drops packets from n{}", at + 1, from + 1),
            Fault::Loss { percent } => write!(f, "{percent}% packet loss between nodes"),
            Fault::Delay { ms } => write!(f, "{ms} ms delay on every peer link"),
            Fault::Kill(v) => write!(f, "kill -9 {}", names(v)),
            Fault::Pause(t) => write!(f, "SIGSTOP {t}"),
            Fault::KillMover { source: true } => write!(f, "kill -9 the source of a move"),
            Fault::KillMover { source: false } => write!(f, "kill -9 the target of a move"),
            Fault::IsolateMeta => write!(f, "isolate the metadata leader"),
            Fault::CutRegion { region, nodes } => {
                write!(f, "cut region r{} ({}) off", region + 1, names(nodes))
            }
        }
    }
}

/// A fault with its start (from the start of the workload) and how long it lasts.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Step {
    /// When it starts.
    pub at: Duration,
    /// How long until it is healed (restarted, resumed).
    pub hold: Duration,
    /// What it is.
    pub fault: Fault,
}

/// Quiet time at the end of the workload (also kept after the last fault of a counted plan), so the last operations meet a healed cluster.
pub const TAIL: Duration = Duration::from_secs(3);

fn millis(rng: &mut ChaCha8Rng, lo: u64, hi: u64) -> Duration {
    Duration::from_millis(rng.random_range(lo..=hi))
}

/// `count` distinct node indexes out of `nodes`, in ascending order.
fn pick(rng: &mut ChaCha8Rng, nodes: usize, count: usize) -> Vec<usize> {
    let mut all: Vec<usize> = (0..nodes).collect();
    for i in 0..count.min(nodes) {
        let j = rng.random_range(i..nodes);
        all.swap(i, j);
    }
    let mut chosen = all[..count.min(nodes)].to_vec();
    chosen.sort_unstable();
    chosen
}

/// How many faults a plan holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Extent {
    /// As many as fit in this duration, none running into its last 3 s.
    Within(Duration),
    /// Exactly this many (the run lasts as long as they take).
    Count(usize),
}

/// The plan: faults one after another, each preceded by 1-3 s of calm. An empty `kinds` gives
/// an empty plan. With `regions` above 1, node `i` is in region `i % regions` (as the lab
/// places them); below, [`FaultKind::CutRegion`] is left out.
#[must_use]
pub fn plan(
    seed: u64,
    nodes: usize,
    regions: u32,
    extent: Extent,
    kinds: &[FaultKind],
) -> Vec<Step> {
    let mut rng = ChaCha8Rng::seed_from_u64(seed);
    let mut steps = Vec::new();
    let kinds: Vec<FaultKind> = kinds
        .iter()
        .copied()
        .filter(|k| regions > 1 || *k != FaultKind::CutRegion)
        .collect();
    if kinds.is_empty() || nodes == 0 {
        return steps;
    }
    let majority = nodes / 2 + 1;
    let mut at = Duration::ZERO;
    loop {
        at += millis(&mut rng, 1_000, 3_000);
        let kind = kinds[rng.random_range(0..kinds.len())];
        let (fault, hold) = match kind {
            FaultKind::Partition => {
                let fault = if rng.random_bool(0.5) {
                    Fault::Isolate(Target::Leader)
                } else {
                    Fault::Split {
                        minority: pick(&mut rng, nodes, nodes / 2),
                    }
                };
                (fault, millis(&mut rng, 2_000, 6_000))
            }
            FaultKind::OneWay => {
                let pair = pick(&mut rng, nodes, 2);
                let (at, from) = if rng.random_bool(0.5) {
                    (pair[0], pair[1 % pair.len()])
                } else {
                    (pair[1 % pair.len()], pair[0])
                };
                (Fault::OneWay { at, from }, millis(&mut rng, 2_000, 6_000))
            }
            FaultKind::Loss => (
                Fault::Loss {
                    percent: rng.random_range(5..=30),
                },
                millis(&mut rng, 2_000, 5_000),
            ),
            FaultKind::Delay => (
                Fault::Delay {
                    ms: rng.random_range(20..=300),
                },
                millis(&mut rng, 2_000, 6_000),
            ),
            FaultKind::Kill => {
                let count = if rng.random_bool(0.5) { 1 } else { majority };
                (
                    Fault::Kill(pick(&mut rng, nodes, count)),
                    millis(&mut rng, 500, 4_000),
                )
            }
            FaultKind::KillAll => (
                Fault::Kill((0..nodes).collect()),
                millis(&mut rng, 200, 2_000),
            ),
            FaultKind::Pause => {
                let target = if rng.random_bool(0.5) {
                    Target::Leader
                } else {
                    Target::Node(rng.random_range(0..nodes))
                };
                (Fault::Pause(target), millis(&mut rng, 1_000, 10_000))
            }
            FaultKind::KillMover => (
                Fault::KillMover {
                    source: rng.random_bool(0.5),
                },
                millis(&mut rng, 500, 4_000),
            ),
            FaultKind::IsolateMeta => (Fault::IsolateMeta, millis(&mut rng, 2_000, 6_000)),
            FaultKind::CutRegion => {
                let region = rng.random_range(0..regions);
                let nodes = (0..nodes)
                    .filter(|i| *i as u32 % regions == region)
                    .collect();
                (
                    Fault::CutRegion { region, nodes },
                    millis(&mut rng, 3_000, 8_000),
                )
            }
        };
        match extent {
            Extent::Within(duration) if at + hold + TAIL > duration => break,
            Extent::Count(count) if steps.len() >= count => break,
            _ => {}
        }
        steps.push(Step { at, hold, fault });
        at += hold;
    }
    steps
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_seed_replays_the_same_plan_and_another_seed_does_not() {
        let d = Duration::from_secs(60);
        let a = plan(7, 5, 0, Extent::Within(d), &FaultKind::ALL);
        assert_eq!(a, plan(7, 5, 0, Extent::Within(d), &FaultKind::ALL));
        assert_ne!(a, plan(8, 5, 0, Extent::Within(d), &FaultKind::ALL));
        assert!(a.len() >= 4, "a minute holds several faults: {a:?}");
    }

    #[test]
    fn faults_do_not_overlap_and_end_before_the_tail() {
        let d = Duration::from_secs(120);
        for seed in 0..50 {
            let steps = plan(seed, 3, 0, Extent::Within(d), &FaultKind::ALL);
            let mut free_from = Duration::ZERO;
            for s in &steps {
                assert!(s.at >= free_from + Duration::from_secs(1), "{steps:?}");
                free_from = s.at + s.hold;
            }
            assert!(free_from + TAIL <= d);
        }
    }

    #[test]
    fn only_the_allowed_kinds_appear_and_node_indexes_are_valid() {
        for seed in 0..50 {
            for s in plan(
                seed,
                5,
                0,
                Extent::Within(Duration::from_secs(60)),
                &[FaultKind::Kill, FaultKind::OneWay],
            ) {
                let kind = s.fault.kind(5);
                assert!(matches!(kind, FaultKind::Kill | FaultKind::OneWay), "{s:?}");
                match s.fault {
                    Fault::Kill(v) => {
                        assert!(v.len() == 1 || v.len() == 3, "one or a majority: {v:?}");
                        assert!(v.iter().all(|&i| i < 5));
                    }
                    Fault::OneWay { at, from } => assert!(at != from && at < 5 && from < 5),
                    other => panic!("unexpected {other:?}"),
                }
            }
        }
    }

    #[test]
    fn kill_all_kills_every_node() {
        let steps = plan(3, 3, 0, Extent::Count(10), &[FaultKind::KillAll]);
        assert_eq!(steps.len(), 10);
        for s in steps {
            assert_eq!(s.fault, Fault::Kill(vec![0, 1, 2]));
            assert_eq!(s.fault.kind(3), FaultKind::KillAll);
        }
    }

    #[test]
    fn a_region_cut_takes_every_node_of_one_region_and_needs_regions() {
        let steps = plan(5, 6, 3, Extent::Count(12), &[FaultKind::CutRegion]);
        assert_eq!(steps.len(), 12);
        let mut cut = std::collections::BTreeSet::new();
        for s in steps {
            let Fault::CutRegion { region, nodes } = s.fault else {
                panic!("unexpected {s:?}");
            };
            assert_eq!(nodes, [region as usize, region as usize + 3]);
            cut.insert(region);
        }
        assert!(cut.len() > 1, "more than one region is cut: {cut:?}");
        assert!(plan(5, 6, 0, Extent::Count(3), &[FaultKind::CutRegion]).is_empty());
    }

    #[test]
    fn names_round_trip() {
        for k in FaultKind::ALL
            .into_iter()
            .chain(FaultKind::MID_MOVE)
            .chain(FaultKind::REGIONAL)
        {
            assert_eq!(FaultKind::parse(k.name()), Some(k));
        }
        assert_eq!(FaultKind::parse("meteor"), None);
    }
}
