//! Leader balance. Each shard has a preferred leader: the first replica of its placement,
//! rotated over the nodes when the shards were placed. Elections do not care, so after a
//! bootstrap or a failover one node may lead most shards and do most of the work. Every few
//! seconds a leader that is not the preferred one hands leadership over, once the preferred
//! node is linked and holds every entry of the log; once there, leadership stays.

use crate::Node;
use std::sync::Arc;
use std::time::Duration;
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
