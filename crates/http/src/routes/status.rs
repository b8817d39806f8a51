//! Status endpoints: who leads, who the peers are, the shard map, health.

use crate::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use std::collections::BTreeSet;
use trireme_types::admin::{HealthDoc, HealthStatus, NodeAddrs, ShardDoc, ShardsDoc};

/// `GET /v1/status/leader`: the peer address of the metadata group's leader, like Consul's
/// Raft leader; `""` when there is none (what Consul clients check).
pub(crate) async fn leader(State(state): State<AppState>) -> Json<String> {
    let leader = state
        .node
        .meta_leader()
        .map(|l| l.peer_addr)
        .unwrap_or_default();
    Json(leader)
}

/// `GET /v1/agent/self`: the fields Consul's clients probe at start-up (`Config.NodeName`,
/// `Config.Datacenter`, `Member`). The datacenter is the cluster's name.
pub(crate) async fn agent_self(State(state): State<AppState>) -> Json<serde_json::Value> {
    let node = &state.node;
    let me = node.me();
    let (host, port) = me
        .peer_addr
        .rsplit_once(':')
        .map(|(h, p)| {
            (
                h.trim_matches(['[', ']']).to_string(),
                p.parse::<u16>().unwrap_or(0),
            )
        })
        .unwrap_or_default();
    Json(serde_json::json!({
        "Config": {
            "Datacenter": node.datacenter(),
            "NodeName": me.name,
            "NodeID": format!("{:016x}", node.node_id()),
            "Server": true,
            "Version": env!("CARGO_PKG_VERSION"),
            "Revision": "trireme",
        },
        "Member": {
            "Name": me.name,
            "Addr": host,
            "Port": port,
            "Tags": {"role": "trireme", "dc": node.datacenter()},
            "Status": 1,
        },
        "Meta": {},
    }))
}

/// `GET /v1/catalog/datacenters`: the regions the cluster's nodes are in (a node without a
/// region label counts as the cluster's name, as `Config.Datacenter` says), this node's own
/// first, then by name. Consul orders them by estimated round trip; this node's region is
/// the nearest.
pub(crate) async fn datacenters(State(state): State<AppState>) -> Json<Vec<String>> {
    Json(state.node.datacenters())
}

/// `GET /v1/status/peers`: peer addresses of every node in the cluster.
pub(crate) async fn peers(State(state): State<AppState>) -> Json<Vec<String>> {
    let peers: BTreeSet<String> = state
        .node
        .nodes()
        .into_iter()
        .map(|n| n.node.peer_addr)
        .collect();
    Json(peers.into_iter().collect())
}

/// `GET /v1/cluster/shards`: slot ranges, replicas and leaders of every shard.
pub(crate) async fn shards(State(state): State<AppState>) -> Json<ShardsDoc> {
    let node = &state.node;
    let addrs = |n: &trireme_cluster::PeerNode| NodeAddrs {
        name: n.name.clone(),
        peer: n.peer_addr.clone(),
        http: n.http_addr.clone(),
        resp: n.resp_addr.clone(),
        version: node.node_version(trireme_types::NodeId::from_name(&n.name)),
        region: node.region_of(trireme_types::NodeId::from_name(&n.name)),
        role: None,
    };
    let replica = |n: &trireme_cluster::PeerNode, role: &str| NodeAddrs {
        role: Some(role.into()),
        ..addrs(n)
    };
    let shards = node
        .shards()
        .into_iter()
        .map(|s| ShardDoc {
            shard: s.shard,
            slots: [s.slots.0, s.slots.1],
            leader: s.leader.as_ref().map(addrs),
            replicas: s
                .replicas
                .iter()
                .map(|n| replica(n, "voter"))
                .chain(s.learners.iter().map(|n| replica(n, "learner")))
                .collect(),
            local_role: s.role,
            term: s.term,
            applied_index: s.applied_index,
            committed_index: s.committed_index,
        })
        .collect();
    Json(ShardsDoc {
        node: node.me().name.clone(),
        // The cluster map's version: it changes whenever replicas move.
        epoch: node.cluster_epoch(),
        shard_count: node.shard_map().shard_count(),
        shards,
    })
}

/// Whether the node can serve: every shard it holds a voter of has a leader, its storage is
/// sound and it is not stopping. What `/v1/health` answers, and the console shows.
pub(crate) fn serving(node: &trireme_cluster::Node, health: &trireme_cluster::NodeHealth) -> bool {
    health.all_shards_led && health.storage_ok && !node.is_stopping()
}

/// `GET /v1/health`: 200 when every shard has a leader and storage is sound, 503 otherwise.
pub(crate) async fn health(State(state): State<AppState>) -> Response {
    let health = state.node.health();
    let ok = serving(&state.node, &health);
    let (status, code) = if ok {
        (HealthStatus::Ok, StatusCode::OK)
    } else {
        (HealthStatus::Unavailable, StatusCode::SERVICE_UNAVAILABLE)
    };
    let body = HealthDoc {
        status,
        node: state.node.me().name.clone(),
        all_shards_led: health.all_shards_led,
        storage_ok: health.storage_ok,
        uptime_secs: health.uptime_secs,
    };
    (code, Json(body)).into_response()
}
