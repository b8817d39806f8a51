//! Cluster administration: the cluster's status (nodes with their lifecycle state, shards,
//! replica moves in progress) and removing a node. Any node answers; a change is decided
//! against the metadata leader's map.

use crate::{ApiError, AppState};
use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use trireme_types::cluster_status::{ClusterStatus, RemoveResult};

/// `GET /v1/cluster/status`.
pub(crate) async fn status(State(state): State<AppState>) -> Json<ClusterStatus> {
    Json(state.node.cluster_status().await)
}

/// Query of `POST /v1/cluster/nodes/{name}/remove`.
#[derive(Debug, Deserialize)]
pub(crate) struct RemoveQuery {
    /// `true` (or `1`, or present with no value) for a node that is gone for good.
    #[serde(default)]
    force: Option<String>,
}

/// `POST /v1/cluster/nodes/{name}/remove[?force]`: drains the node (or, with `force`,
/// removes a dead one and rebuilds its replicas). 404 for an unknown node, 409 for a removal
/// that would leave shards without enough nodes, or that raced with another change.
pub(crate) async fn remove_node(
    State(state): State<AppState>,
    Path(name): Path<String>,
    Query(query): Query<RemoveQuery>,
) -> Result<Json<RemoveResult>, ApiError> {
    let force = match query.force.as_deref() {
        None | Some("false" | "0") => false,
        Some("" | "true" | "1") => true,
        Some(other) => {
            return Err(ApiError::invalid(format!(
                "force must be true or false, got {other:?}"
            )));
        }
    };
    Ok(Json(state.node.remove_node(&name, force).await?))
}
