//! Cluster administration: the cluster's status (nodes with their lifecycle state, shards,
//! replica moves in progress), removing a node, and splitting a shard. Any node answers; a change is decided
//! against the metadata leader's map.

use crate::access::Access;
use crate::{ApiError, AppState};
use axum::Json;
use axum::extract::{Path, Query, State};
use serde::Deserialize;
use trireme_types::cluster_status::{
    ClusterStatus, FinalizeResult, Placement, PlacementChange, RemoveResult, SplitResult,
};

/// `GET /v1/cluster/status`.
pub(crate) async fn status(
    State(state): State<AppState>,
    access: Access,
) -> Result<Json<ClusterStatus>, ApiError> {
    access.operator_read()?;
    Ok(Json(state.node.cluster_status().await))
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
    access: Access,
    Path(name): Path<String>,
    Query(query): Query<RemoveQuery>,
) -> Result<Json<RemoveResult>, ApiError> {
    access.operator_write()?;
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

/// `POST /v1/cluster/nodes/{name}/cancel-drain`: a draining node becomes active again and
/// keeps the replicas it still holds. 404 for an unknown node, 409 for one whose drain has
/// finished (it is removed) or that raced with another change; a node that is not draining
/// is answered as it is, with nothing changed.
pub(crate) async fn cancel_drain(
    State(state): State<AppState>,
    access: Access,
    Path(name): Path<String>,
) -> Result<Json<RemoveResult>, ApiError> {
    access.operator_write()?;
    Ok(Json(state.node.cancel_drain(&name).await?))
}

/// `POST /v1/cluster/finalize-upgrade`: raises the cluster version to this node's protocol
/// once every member runs it, turning on the features that change what is replicated. 409,
/// naming them, while some node runs an older build.
pub(crate) async fn finalize_upgrade(
    State(state): State<AppState>,
    access: Access,
) -> Result<Json<FinalizeResult>, ApiError> {
    access.operator_write()?;
    Ok(Json(state.node.finalize_upgrade().await?))
}

/// `GET /v1/cluster/placement`: the home region, the survival goal, and each region's
/// active nodes.
pub(crate) async fn placement(
    State(state): State<AppState>,
    access: Access,
) -> Result<Json<Placement>, ApiError> {
    access.operator_read()?;
    Ok(Json(state.node.placement()))
}

/// `PUT /v1/cluster/placement` with `{"home_region": "R", "survival": "zone" | "region"}`
/// (either may be left out): moves leaders to region R, and voters where the goal wants
/// them. 400 for a region with no active node, an unknown survival goal or survival
/// `region` with fewer than three regions, 409 below the cluster version that brought
/// regions; the map is unchanged then.
pub(crate) async fn set_placement(
    State(state): State<AppState>,
    access: Access,
    body: axum::body::Bytes,
) -> Result<Json<Placement>, ApiError> {
    access.operator_write()?;
    let change: PlacementChange = serde_json::from_slice(&body).map_err(|e| {
        ApiError::invalid(format!(
            "expected {{\"home_region\": \"R\", \"survival\": \"zone\"}}: {e}"
        ))
    })?;
    Ok(Json(state.node.set_placement(change).await?))
}

/// Query of `POST /v1/cluster/shards/{id}/split`.
#[derive(Debug, Deserialize)]
pub(crate) struct SplitQuery {
    /// The first slot the new shard takes (default: the middle of the shard's range).
    #[serde(default)]
    at: Option<String>,
}

/// `POST /v1/cluster/shards/{id}/split[?at=SLOT]`: splits the shard in two; the new shard
/// takes the slots from `at` to the end of the range. 404 for an unknown shard, 400 for a slot
/// outside it (or a one-slot shard), 409 while the shard moves a replica or another split
/// runs. Answers once the split is decided; `GET /v1/cluster/status` shows it until done.
pub(crate) async fn split_shard(
    State(state): State<AppState>,
    access: Access,
    Path(shard): Path<String>,
    Query(query): Query<SplitQuery>,
) -> Result<Json<SplitResult>, ApiError> {
    access.operator_write()?;
    let shard: u32 = shard
        .parse()
        .map_err(|_| ApiError::invalid(format!("a shard is a number, got {shard:?}")))?;
    let at = match query.at.as_deref() {
        None | Some("") => None,
        Some(text) => Some(
            text.parse::<u16>()
                .ok()
                .filter(|s| *s < trireme_types::SLOT_COUNT)
                .ok_or_else(|| {
                    ApiError::invalid(format!("at must be a slot from 0 to 16383, got {text:?}"))
                })?,
        ),
    };
    Ok(Json(state.node.split_shard(shard, at).await?))
}
