//! What changes the cluster's shape during a run, interleaved with the faults: shard splits
//! and, with `membership`, the three changes an operator makes: a new node joins, a node is
//! drained and removed, and a node is killed for good, removed by force and replaced by a new
//! one. Each membership change waits for the one before it to finish, as an operator would:
//! the cluster never has two nodes leaving at once.

use std::time::{Duration, Instant};

use serde::Serialize;
use trireme_types::cluster_status::ClusterStatus;

use crate::ChaosError;
use crate::nodes::{NodeProcess, NodeState, Role};
use crate::verify;
use crate::workload::{Endpoint, Endpoints};

/// The membership changes of a run, in order.
const CHANGES: [Change; 3] = [Change::Join, Change::Drain, Change::Replace];

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Change {
    /// The spare slot's node joins through a running member.
    Join,
    /// A running member is drained (`remove` without force) until the cluster removes it and
    /// its process stops by itself.
    Drain,
    /// A running member is killed for good and removed by force; a node under a new name
    /// joins in its slot, with an empty data directory.
    Replace,
}

/// A membership change as it happened.
#[derive(Debug, Clone, Serialize)]
pub struct MembershipRecord {
    /// Seconds from the start of the workload when it was asked for.
    pub at_secs: f64,
    /// What was done, with the nodes named.
    pub change: String,
    /// Seconds from the start of the workload when the cluster had finished it.
    pub done_secs: Option<f64>,
}

/// A change asked for and not finished yet.
#[derive(Debug, Clone, Copy)]
enum InFlight {
    Joining {
        slot: usize,
    },
    Draining {
        slot: usize,
    },
    /// Killed; the forced removal not accepted yet.
    Removing {
        slot: usize,
    },
    Replacing {
        slot: usize,
    },
}

/// What the run did to the cluster's shape, and what it still has to do.
#[derive(Debug, Default)]
pub struct Elastic {
    /// Splits started.
    pub splits_done: u32,
    /// Splits asked for.
    pub splits_wanted: u32,
    /// Whether the run makes the membership changes.
    pub membership: bool,
    /// The membership changes started, with when each finished.
    pub changes: Vec<MembershipRecord>,
    /// Replica moves completed, from the nodes' `/metrics` after healing.
    pub moves_completed: u64,
    /// Whether every shard ended at its replication factor on active nodes, nothing moving.
    pub settled: bool,
    in_flight: Option<InFlight>,
}

impl Elastic {
    /// A run that makes `splits` splits, and the membership changes when `membership`.
    #[must_use]
    pub fn new(splits: u32, membership: bool) -> Self {
        Elastic {
            splits_wanted: splits,
            membership,
            ..Elastic::default()
        }
    }

    /// Whether the run changes the cluster's shape at all (and so must see it settle).
    #[must_use]
    pub fn reshapes(&self) -> bool {
        self.splits_wanted > 0 || self.membership
    }

    /// Whether every split was made and every membership change finished.
    #[must_use]
    pub fn all_done(&self) -> bool {
        self.splits_done >= self.splits_wanted && self.membership_done()
    }

    fn membership_done(&self) -> bool {
        !self.membership
            || (self.changes.len() == CHANGES.len()
                && self.changes.iter().all(|c| c.done_secs.is_some()))
    }
}

/// The slots whose nodes the cluster counts in, under their current names.
#[must_use]
pub fn live(servers: &[NodeProcess]) -> Vec<Endpoint> {
    servers
        .iter()
        .filter(|s| s.in_cluster())
        .map(NodeProcess::endpoint)
        .collect()
}

/// Everything one step needs.
pub struct Shaper<'a> {
    /// The run's HTTP client.
    pub client: &'a reqwest::Client,
    /// The seed (which shard splits, which node leaves).
    pub seed: u64,
    /// The clients' view of the slots, renamed when a replacement takes one over.
    pub slots: &'a Endpoints,
    /// Where a replacement's data directory goes.
    pub dir: &'a std::path::Path,
    /// The workload's start, for the records.
    pub start: Instant,
}

impl Shaper<'_> {
    /// One step: a split if one is due, and the membership change in flight moved on (or the
    /// next one started). Refusals during a fault are expected: the next step tries again.
    pub async fn step(
        &self,
        elastic: &mut Elastic,
        servers: &mut [NodeProcess],
    ) -> Result<(), ChaosError> {
        if elastic.splits_done < elastic.splits_wanted {
            self.try_split(elastic, servers).await;
        }
        if elastic.membership && !elastic.membership_done() {
            self.advance_membership(elastic, servers).await?;
        }
        Ok(())
    }

    /// Asks one reachable node to split a shard (which one: from the seed and the splits done
    /// so far). Refused while there is no leader, or another split or a move on that shard.
    async fn try_split(&self, elastic: &mut Elastic, servers: &[NodeProcess]) {
        let nodes = live(servers);
        let Some(shards) = verify::shard_count(self.client, &nodes).await else {
            return;
        };
        let shard = (self.seed + u64::from(elastic.splits_done) * 7) % u64::from(shards.max(1));
        for node in &nodes {
            let url = format!("{}/v1/cluster/shards/{shard}/split", node.http_base);
            let answer =
                tokio::time::timeout(Duration::from_secs(5), self.client.post(&url).send()).await;
            match answer {
                Ok(Ok(r)) if r.status().is_success() => {
                    elastic.splits_done += 1;
                    eprintln!("split shard {shard} (asked {})", node.name);
                    return;
                }
                Ok(Ok(r)) if r.status().as_u16() == 409 => return,
                _ => {}
            }
        }
    }

    async fn advance_membership(
        &self,
        elastic: &mut Elastic,
        servers: &mut [NodeProcess],
    ) -> Result<(), ChaosError> {
        let status = verify::cluster_status(self.client, &live(servers)).await;
        let state_of = |name: &str| -> Option<String> {
            let status: &ClusterStatus = status.as_ref()?;
            let node = status.nodes.iter().find(|n| n.name == name)?;
            Some(node.state.clone())
        };
        match elastic.in_flight.take() {
            Some(flight @ (InFlight::Joining { slot } | InFlight::Replacing { slot })) => {
                if state_of(&servers[slot].node_id).as_deref() == Some("active") {
                    self.finish(elastic);
                } else {
                    elastic.in_flight = Some(flight);
                }
            }
            Some(InFlight::Draining { slot }) => {
                let removed = state_of(&servers[slot].node_id).as_deref() == Some("removed");
                // The removed node stops serving by itself; the run waits for its exit. Its
                // exit status says it was removed even when no member answers the status
                // (the node may have been down when the drain finished, and stopped at once
                // when it was started again).
                if servers[slot].said_removed() || (removed && servers[slot].exited()) {
                    servers[slot].role = Role::Gone;
                    self.finish(elastic);
                } else {
                    elastic.in_flight = Some(InFlight::Draining { slot });
                }
            }
            Some(InFlight::Removing { slot }) => {
                let name = servers[slot].node_id.clone();
                if self.remove(servers, &name, true).await {
                    let new_name = format!("n{}", servers.len() + 1);
                    let peer = running_member(servers, self.seed)
                        .map(|i| servers[i].peer_addr())
                        .unwrap_or_default();
                    self.slots.rename(slot, &new_name);
                    servers[slot].replace(&new_name, self.dir, &peer)?;
                    eprintln!("{name} removed by force; {new_name} joins in its place");
                    if let Some(record) = elastic.changes.last_mut() {
                        record.change = format!(
                            "{name} killed for good, removed by force, replaced by {new_name}"
                        );
                    }
                    elastic.in_flight = Some(InFlight::Replacing { slot });
                } else {
                    elastic.in_flight = Some(InFlight::Removing { slot });
                }
            }
            None => self.start_next(elastic, servers).await?,
        }
        Ok(())
    }

    /// Ends the drain in flight if its node has exited saying it was removed, and starts
    /// nothing: for the end of the run, so that the node does not count as unhealthy.
    pub fn note_drained(&self, elastic: &mut Elastic, servers: &mut [NodeProcess]) {
        if let Some(InFlight::Draining { slot }) = elastic.in_flight
            && servers[slot].said_removed()
        {
            servers[slot].role = Role::Gone;
            elastic.in_flight = None;
            self.finish(elastic);
        }
    }

    fn finish(&self, elastic: &mut Elastic) {
        let now = self.start.elapsed().as_secs_f64();
        if let Some(record) = elastic.changes.last_mut() {
            record.done_secs = Some(now);
            eprintln!("membership change done: {}", record.change);
        }
    }

    async fn start_next(
        &self,
        elastic: &mut Elastic,
        servers: &mut [NodeProcess],
    ) -> Result<(), ChaosError> {
        let Some(change) = CHANGES.get(elastic.changes.len()).copied() else {
            return Ok(());
        };
        let at_secs = self.start.elapsed().as_secs_f64();
        let pick = self.seed.wrapping_add(elastic.changes.len() as u64);
        let started = match change {
            Change::Join => {
                let spare = servers.iter().position(|s| s.role == Role::Spare);
                let through = running_member(servers, pick);
                match (spare, through) {
                    (Some(slot), Some(member)) => {
                        let peer = servers[member].peer_addr();
                        servers[slot].join(&peer)?;
                        elastic.in_flight = Some(InFlight::Joining { slot });
                        Some(format!("{} joins", servers[slot].node_id))
                    }
                    _ => None,
                }
            }
            Change::Drain => match running_member(servers, pick) {
                Some(slot) => {
                    let name = servers[slot].node_id.clone();
                    if self.remove(servers, &name, false).await {
                        servers[slot].role = Role::Draining;
                        elastic.in_flight = Some(InFlight::Draining { slot });
                        Some(format!("{name} drained"))
                    } else {
                        None
                    }
                }
                None => None,
            },
            Change::Replace => match running_member(servers, pick) {
                Some(slot) => {
                    let name = servers[slot].node_id.clone();
                    servers[slot].kill()?;
                    servers[slot].role = Role::Gone;
                    elastic.in_flight = Some(InFlight::Removing { slot });
                    Some(format!("{name} killed for good, to be removed by force"))
                }
                None => None,
            },
        };
        if let Some(change) = started {
            eprintln!("membership change: {change}");
            elastic.changes.push(MembershipRecord {
                at_secs,
                change,
                done_secs: None,
            });
        }
        Ok(())
    }

    /// `POST /v1/cluster/nodes/NAME/remove[?force]` through a node in the cluster; whether it
    /// was accepted.
    async fn remove(&self, servers: &[NodeProcess], name: &str, force: bool) -> bool {
        let query = if force { "?force" } else { "" };
        for node in live(servers).iter().filter(|n| n.name != name) {
            let url = format!("{}/v1/cluster/nodes/{name}/remove{query}", node.http_base);
            // The node waits for a metadata leader for up to 15 s before it answers.
            let answer =
                tokio::time::timeout(Duration::from_secs(20), self.client.post(&url).send()).await;
            match answer {
                Ok(Ok(r)) if r.status().is_success() => return true,
                Ok(Ok(r)) => {
                    let code = r.status();
                    let text = r.text().await.unwrap_or_default();
                    eprintln!(
                        "remove {name}{query} refused by {}: {code} {text}",
                        node.name
                    );
                    return false;
                }
                _ => {}
            }
        }
        false
    }
}

/// A member whose process runs (which one: `pick` modulo how many there are).
fn running_member(servers: &[NodeProcess], pick: u64) -> Option<usize> {
    let running: Vec<usize> = servers
        .iter()
        .enumerate()
        .filter(|(_, s)| s.role == Role::Member && s.state() == NodeState::Up)
        .map(|(i, _)| i)
        .collect();
    if running.is_empty() {
        return None;
    }
    Some(running[(pick % running.len() as u64) as usize])
}
