//! Status endpoints: who leads, who the peers are, the shard map, health.

use crate::AppState;
use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::json;
use std::collections::BTreeSet;

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
pub(crate) async fn shards(State(state): State<AppState>) -> Json<serde_json::Value> {
    let node = &state.node;
    let shards: Vec<serde_json::Value> = node
        .shards()
        .iter()
        .map(|s| {
            let node_json = |n: &trireme_raft::PeerNode| {
                json!({"name": n.name, "peer": n.peer_addr, "http": n.http_addr, "resp": n.resp_addr})
            };
            json!({
                "shard": s.shard.0,
                "slots": [s.slots.0, s.slots.1],
                "leader": s.leader.as_ref().map(node_json),
                "replicas": s.replicas.iter().map(node_json).collect::<Vec<_>>(),
                "local_role": s.role,
                "term": s.term,
                "applied_index": s.applied_index,
                "committed_index": s.committed_index,
            })
        })
        .collect();
    Json(json!({
        "node": node.me().name,
        "shard_count": node.shard_map().shard_count(),
        "shards": shards,
    }))
}

/// `GET /v1/health`: 200 when every shard has a leader and storage is sound, 503 otherwise.
pub(crate) async fn health(State(state): State<AppState>) -> Response {
    let health = state.node.health();
    let ok = health.all_shards_led && health.storage_ok && !state.node.is_stopping();
    let status = if ok {
        StatusCode::OK
    } else {
        StatusCode::SERVICE_UNAVAILABLE
    };
    let body = json!({
        "status": if ok { "ok" } else { "unavailable" },
        "node": state.node.me().name,
        "all_shards_led": health.all_shards_led,
        "storage_ok": health.storage_ok,
        "uptime_secs": health.uptime_secs,
    });
    (status, Json(body)).into_response()
}
