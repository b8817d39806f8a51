//! Pub/sub across the cluster: a message published on any node reaches the subscribers of
//! every node. As in Redis, messages are neither stored nor replicated through Raft: a node
//! that is down or cut off when a message is published misses it, and a subscriber that
//! reconnects gets only what is published after.

use crate::Node;
use bytes::Bytes;
use futures::future::join_all;
use std::sync::Arc;
use std::time::Duration;
use trireme_types::NodeId;

/// How long a publish waits for another node to say how many of its subscribers got the
/// message; a node that does not answer in time counts as none.
const PUBLISH_WAIT: Duration = Duration::from_secs(1);

/// What a front end gives the node so that messages reach its subscribers.
pub trait MessageSink: Send + Sync {
    /// Hands `message` on `channel` to this node's subscribers; how many it reached.
    fn deliver(&self, channel: &Bytes, message: &Bytes) -> u64;
}

impl Node {
    /// Sets where published messages go on this node.
    pub fn set_message_sink(&self, sink: Arc<dyn MessageSink>) {
        *self
            .message_sink
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sink);
    }

    /// Delivers `message` to `channel`'s subscribers on this node.
    pub(crate) fn deliver_here(&self, channel: &Bytes, message: &Bytes) -> u64 {
        let sink = self
            .message_sink
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        sink.map_or(0, |sink| sink.deliver(channel, message))
    }

    /// Publishes `message` on `channel` to the subscribers of every node (`PUBLISH`); how
    /// many received it. Nodes are asked at once; one that cannot be reached within a second
    /// counts as none (its subscribers miss the message, as Redis's would on a partitioned
    /// node).
    pub async fn publish(&self, channel: Bytes, message: Bytes) -> u64 {
        let here = self.deliver_here(&channel, &message);
        let me = self.node_id();
        let others: Vec<NodeId> = self
            .nodes()
            .iter()
            .map(|info| NodeId(info.id()))
            .filter(|id| *id != me && self.is_linked(*id))
            .collect();
        let answers = join_all(others.into_iter().map(|to| {
            let (channel, message) = (channel.clone(), message.clone());
            async move {
                self.forward_publish(to, channel, message, PUBLISH_WAIT)
                    .await
                    .unwrap_or(0)
            }
        }))
        .await;
        here + answers.into_iter().sum::<u64>()
    }
}
