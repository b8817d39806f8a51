//! Leader balance. Each shard has a preferred leader: the first replica of its placement,
//! rotated over the nodes when the shards were placed. Elections do not care, so after a
//! bootstrap or a failover one node may lead most shards and do most of the work. Every few
//! seconds a leader that is not the preferred one hands leadership over, once the preferred
//! node is linked and holds every entry of the log; once there, leadership stays.

use crate::Node;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use trireme_raft::ShardGroup;
use trireme_types::NodeId;

/// How often leaders check.
const INTERVAL: Duration = Duration::from_secs(2);
/// Transfers one node starts per check, so a recovering node is not flooded with elections.
const MAX_TRANSFERS: usize = 4;

pub(crate) fn spawn_balancer(node: &Arc<Node>) {
    crate::node::spawn_periodic(Arc::downgrade(node), INTERVAL, balance_once);
}

/// Starts up to [`MAX_TRANSFERS`] handovers from this node to shards' preferred replicas.
async fn balance_once(node: Arc<Node>) {
    let mut started = 0;
    for group in node.local_groups() {
        if started == MAX_TRANSFERS {
            break;
        }
        if !group.is_leader() {
            continue;
        }
        let Some(preferred) = node.replicas_of(group.shard()).first().copied().map(NodeId) else {
            continue;
        };
        if preferred.0 == node.node_id
            || !node.is_linked(preferred)
            || !group.follower_caught_up(preferred)
        {
            continue;
        }
        tracing::debug!(shard = group.shard().0, to = %preferred, "handing leadership to the preferred replica");
        if let Err(e) = group.transfer_leader(preferred).await {
            tracing::warn!(shard = group.shard().0, error = %e, "leader transfer");
        }
        started += 1;
    }
}

/// How often a stopping node looks again at the leaderships it still holds.
const HANDOVER_ROUND: Duration = Duration::from_millis(100);

impl Node {
    /// Before a clean stop: hands each leadership this node holds (shards and the metadata
    /// group) to a voter that is linked and holds every entry, and waits until it leads
    /// nothing, for at most `limit`. Without it, every shard the node led would be leaderless
    /// until an election timeout, and its writes answered 503 meanwhile. From the call on,
    /// the node refuses leadership handed to it (the balancer would hand it back).
    pub async fn hand_over_leaderships(&self, limit: Duration) {
        self.transport.refuse_leadership();
        let deadline = Instant::now() + limit;
        let mut asked: std::collections::HashMap<u32, Instant> = Default::default();
        loop {
            let mut groups = self.local_groups();
            groups.push(self.meta.clone());
            let leading: Vec<ShardGroup> =
                groups.into_iter().filter(ShardGroup::is_leader).collect();
            if leading.is_empty() {
                tracing::info!("every leadership handed over");
                return;
            }
            if Instant::now() >= deadline {
                tracing::warn!(
                    still_leading = leading.len(),
                    "stopping while still leading: those groups elect a leader after their timeout"
                );
                return;
            }
            // Whether some leadership may still move: asked lately, or asked now.
            let mut moving = false;
            for group in leading {
                let key = group.group_id().0;
                // A transfer takes a round trip and an election: ask again only if it did
                // not happen within a few rounds.
                if asked
                    .get(&key)
                    .is_some_and(|at| at.elapsed() < HANDOVER_ROUND * 5)
                {
                    moving = true;
                    continue;
                }
                let heir = group.status().voters.into_iter().find(|v| {
                    v.0 != self.node_id && self.is_linked(*v) && group.follower_caught_up(*v)
                });
                if let Some(heir) = heir {
                    if let Err(e) = group.transfer_leader(heir).await {
                        tracing::info!(group = key, error = %e, "leadership not handed over");
                    }
                    asked.insert(key, Instant::now());
                    moving = true;
                }
            }
            if !moving {
                // No voter to take any of them (the others are down, or behind).
                tracing::info!("no voter can take the leaderships left; stopping with them");
                return;
            }
            tokio::time::sleep(HANDOVER_ROUND).await;
        }
    }
}
