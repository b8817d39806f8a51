//! Joining a running cluster. A node started with `--join MEMBER_PEER_ADDR` on a fresh data
//! directory asks that member to admit it. The member checks the request against the cluster
//! map (a consistent read through the metadata leader): a name in use or removed before, or an
//! address another node uses, is refused with the reason. Otherwise it registers the node in
//! the metadata group and answers with what the node needs to start: the shard count, the
//! peers' addresses and the metadata voters. The metadata leader then adds the node to the
//! metadata group as a learner, marks it active, and the rebalancer starts moving replicas
//! to it (`rebalance.rs`).
//!
//! The same exchange, as a probe, lets a node on an empty data directory bootstrapping with
//! `--initial-cluster` find out that the cluster already exists: it must not vote with an
//! empty log as if it were the member it was.

use crate::meta::{self, META_SHARD, NodeInfo, NodeState};
use crate::{ClusterError, Node, NodeConfig};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Weak};
use std::time::Duration;
use trireme_raft::{JoinHandler, PeerTransport};
use trireme_types::{Command, NodeId, PutCondition, TtlUpdate};

/// How long a joining node waits for the member's answer (it writes to the metadata group).
const JOIN_TIMEOUT: Duration = Duration::from_secs(20);
/// How long a probe waits for each initial member.
const PROBE_TIMEOUT: Duration = Duration::from_secs(2);
/// Attempts at reaching the member before giving up.
const JOIN_ATTEMPTS: u32 = 10;
/// What a member answers when it cannot decide on a join for now (no reachable metadata
/// leader, as right after the leader's node died): the joining node tries again, where any
/// other refusal is final.
const NOT_NOW: &str = "the cluster cannot admit nodes right now";

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct JoinRequest {
    pub info: NodeInfo,
    /// Only ask whether the cluster exists and what state this name has; register nothing.
    pub probe: bool,
}

/// What a member tells a node it admitted (or probed).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct JoinAnswer {
    /// The cluster's shard count.
    pub shards: u32,
    /// When the cluster was bootstrapped, Unix ms.
    pub created_ms: u64,
    /// Every member's id and peer address.
    pub peers: Vec<(u64, String)>,
    /// The metadata group's voters.
    pub meta_voters: Vec<u64>,
    /// Whether the cluster has a map already (it is past its bootstrap).
    pub exists: bool,
    /// The state of the asking node's name in the map.
    pub state: Option<NodeState>,
}

/// Asks the member at `member` to admit this node; returns its answer or why it refused.
pub(crate) async fn ask(
    config: &NodeConfig,
    info: NodeInfo,
    member: &str,
) -> Result<JoinAnswer, ClusterError> {
    let request = JoinRequest { info, probe: false };
    let payload = postcard::to_stdvec(&request)
        .map_err(|e| ClusterError::Config(format!("cannot encode the join request: {e}")))?;
    let mut attempt = 0;
    loop {
        attempt += 1;
        match PeerTransport::ask_to_join(
            member,
            &config.name,
            &config.cluster_name,
            payload.clone(),
            JOIN_TIMEOUT,
            config.peer_tls.as_deref(),
        )
        .await
        {
            Ok(bytes) => {
                return postcard::from_bytes(&bytes).map_err(|e| {
                    ClusterError::Config(format!("undecodable answer from {member}: {e}"))
                });
            }
            Err(reason) if attempt < JOIN_ATTEMPTS && worth_retrying(&reason) => {
                tracing::info!(%member, %reason, "cannot join yet; retrying");
                tokio::time::sleep(Duration::from_secs(1)).await;
            }
            Err(reason) => {
                return Err(ClusterError::Config(format!(
                    "cannot join the cluster through {member}: {reason}"
                )));
            }
        }
    }
}

/// Whether a failed join is worth another try: the member was not up yet, or busy, or had no
/// metadata leader for now. Any other refusal is final.
fn worth_retrying(reason: &str) -> bool {
    !reason.contains(" refused: ") || reason.contains(NOT_NOW)
}

/// On a fresh data directory bootstrapping with `initial`: refuses to start when another
/// initial member answers that the cluster exists already. Members that cannot be reached
/// are skipped (at a real bootstrap they may not be up yet).
pub(crate) async fn refuse_if_cluster_exists(
    config: &NodeConfig,
    initial: &[(String, String)],
) -> Result<(), ClusterError> {
    let info = NodeInfo {
        node: trireme_raft::PeerNode {
            name: config.name.clone(),
            peer_addr: config.peer_addr.clone(),
            http_addr: config.http_addr.clone(),
            resp_addr: config.resp_addr.clone(),
        },
        rack: None,
        zone: None,
        region: None,
    };
    let payload = postcard::to_stdvec(&JoinRequest { info, probe: true })
        .map_err(|e| ClusterError::Config(format!("cannot encode a probe: {e}")))?;
    for (name, addr) in initial.iter().filter(|(n, _)| *n != config.name) {
        let Ok(bytes) = PeerTransport::ask_to_join(
            addr,
            &config.name,
            &config.cluster_name,
            payload.clone(),
            PROBE_TIMEOUT,
            config.peer_tls.as_deref(),
        )
        .await
        else {
            continue;
        };
        let Ok(answer) = postcard::from_bytes::<JoinAnswer>(&bytes) else {
            continue;
        };
        if answer.exists {
            return Err(ClusterError::Config(format!(
                "cluster {:?} already exists ({name} at {addr} says so), but data directory {} is empty: a node that lost its data must not vote as the member it was. Remove the old member (trireme cluster remove {} --force) and start this node with a new --node-id and --join {addr}",
                config.cluster_name,
                config.data_dir.display(),
                config.name,
            )));
        }
    }
    Ok(())
}

impl Node {
    /// Decides on a join request (see the module docs).
    async fn admit(&self, request: JoinRequest) -> Result<JoinAnswer, String> {
        let id = request.info.id();
        let name = request.info.node.name.clone();
        if request.probe {
            let map = self.cluster_map();
            return Ok(self.join_answer(
                map.is_some(),
                map.and_then(|m| m.state(id)),
                self.bootstrap_shards,
            ));
        }
        let map = self
            .read_map_through_leader()
            .await
            .map_err(|e| format!("{NOT_NOW}: {e}"))?;
        match map.state(id) {
            Some(NodeState::Removed) => {
                return Err(format!(
                    "node name {name:?} was removed from this cluster, and a removed name is never reused: start the node with a new --node-id"
                ));
            }
            Some(_) => {
                return Err(format!(
                    "a node named {name:?} is already a member of this cluster; a node that lost its data must first be removed (trireme cluster remove {name} --force) and then join under a new --node-id"
                ));
            }
            None => {}
        }
        for other in self.nodes() {
            if other.id() == id && other.node.name != name {
                return Err(format!(
                    "node name {name:?} has the same id as member {:?}; choose another --node-id",
                    other.node.name
                ));
            }
            if other.id() == id || map.state(other.id()) == Some(NodeState::Removed) {
                continue;
            }
            let theirs = [
                &other.node.peer_addr,
                &other.node.http_addr,
                &other.node.resp_addr,
            ];
            let mine = [
                &request.info.node.peer_addr,
                &request.info.node.http_addr,
                &request.info.node.resp_addr,
            ];
            if let Some(addr) = mine.iter().find(|a| theirs.contains(a)) {
                return Err(format!(
                    "address {addr} is already used by member {:?}",
                    other.node.name
                ));
            }
        }
        let value = serde_json::to_vec(&request.info).map_err(|e| e.to_string())?;
        let register = Command::Put {
            key: Bytes::from(meta::node_key(&name)),
            value: Bytes::from(value),
            flags: None,
            condition: PutCondition::Always,
            ttl: TtlUpdate::Clear,
            return_previous: false,
        };
        self.write_meta(register)
            .await
            .map_err(|e| format!("cannot register the node: {e}"))?;
        tracing::info!(node = %name, peer = %request.info.node.peer_addr, "admitted a joining node");
        // The bootstrap count, not today's: a shard no split has touched still owns its
        // slots in the bootstrap layout, and the newcomer works them out from this count.
        let mut answer = self.join_answer(true, None, self.bootstrap_shards);
        answer.peers.push((id, request.info.node.peer_addr.clone()));
        Ok(answer)
    }

    fn join_answer(&self, exists: bool, state: Option<NodeState>, shards: u32) -> JoinAnswer {
        let mut peers: Vec<(u64, String)> = self
            .nodes()
            .into_iter()
            .map(|n| (n.id(), n.node.peer_addr))
            .collect();
        if !peers.iter().any(|(id, _)| *id == self.node_id) {
            peers.push((self.node_id, self.me.peer_addr.clone()));
        }
        JoinAnswer {
            shards,
            created_ms: self.cluster_created_ms,
            peers,
            meta_voters: self.replicas_of(META_SHARD),
            exists,
            state,
        }
    }
}

/// The transport's handle on the node for join requests.
struct JoinRequests(Weak<Node>);

impl JoinHandler for JoinRequests {
    fn handle(
        &self,
        payload: Vec<u8>,
        identity: trireme_tls::PeerIdentity,
    ) -> futures::future::BoxFuture<'static, Result<Vec<u8>, String>> {
        let node = self.0.upgrade();
        Box::pin(async move {
            let node = node.ok_or_else(|| "this node is stopping".to_string())?;
            let request: JoinRequest = postcard::from_bytes(&payload)
                .map_err(|e| format!("undecodable join request: {e}"))?;
            // With `[peer_tls]`, a certificate lets its holder join only as the node it names.
            identity
                .check_is_node(&request.info.node.name)
                .map_err(|reason| {
                    format!("node {:?} cannot join: {reason}", request.info.node.name)
                })?;
            let answer = node.admit(request).await?;
            postcard::to_stdvec(&answer).map_err(|e| e.to_string())
        })
    }
}

/// The handler to install on the node's transport.
pub(crate) fn handler(node: &Arc<Node>) -> Arc<dyn JoinHandler> {
    Arc::new(JoinRequests(Arc::downgrade(node)))
}

/// Whether a node id belongs to a registered name (for operator commands by name).
pub(crate) fn id_of(name: &str) -> u64 {
    NodeId::from_name(name).0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_final_refusals_end_a_join() {
        assert!(worth_retrying("connect to 10.0.0.2:7702 timed out"));
        assert!(worth_retrying(&format!(
            "10.0.0.2:7702 refused: {NOT_NOW}: shard 4294967295: node 08b3 is unreachable"
        )));
        assert!(!worth_retrying(
            "10.0.0.2:7702 refused: node name \"n1\" was removed from this cluster"
        ));
    }
}
