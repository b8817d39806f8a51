//! Backup and restore: `GET /v1/backup/shard/{id}` streams one shard's keys from its leader
//! (the `trireme backup` command asks each shard's leader in turn), and
//! `POST /v1/backup/restore` writes a piece of a backup, routed by the cluster's own shards.
//! Both carry frames of the backup format (`trireme_types::backup`).

use crate::routes::request_body;
use crate::{ApiError, AppState};
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use trireme_types::backup::{Frame, FrameReader};
use trireme_types::{ErrorCode, ShardId, TriremeError};

/// `GET /v1/backup/shard/{id}`: the shard's live keys as entry frames, then an end frame;
/// on the shard's leader only (another node answers with the error a read there would get).
pub(crate) async fn export(
    State(state): State<AppState>,
    Path(shard): Path<String>,
) -> Result<Response, ApiError> {
    let shard: u32 = shard
        .parse()
        .map_err(|_| ApiError::invalid(format!("a shard is a number, got {shard:?}")))?;
    let chunks = state.node.export_shard(ShardId(shard)).await?;
    let stream = futures::stream::unfold(chunks, |mut chunks| async move {
        let next = chunks.recv().await?;
        // An error ends the body early: the client sees no end frame and refuses the shard.
        let item = next.map_err(|e| std::io::Error::other(e.to_string()));
        Some((item, chunks))
    });
    Ok((
        [(header::CONTENT_TYPE, "application/octet-stream")],
        Body::from_stream(stream),
    )
        .into_response())
}

/// Query of `POST /v1/backup/restore`.
#[derive(Debug, Deserialize)]
pub(crate) struct RestoreQuery {
    /// The first piece of a restore: refused unless the cluster holds no key yet.
    #[serde(default)]
    first: Option<String>,
}

/// `POST /v1/backup/restore[?first]`: writes the entry frames of the body (whole frames
/// only); answers `{"written": N}`. With `first`, a cluster that already holds keys answers
/// 409 and nothing is written.
pub(crate) async fn restore(
    State(state): State<AppState>,
    Query(query): Query<RestoreQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = match request_body(body) {
        Ok(body) => body,
        Err(response) => return Ok(*response),
    };
    let mut reader = FrameReader::new();
    reader.push(&body);
    let mut entries = Vec::new();
    while let Some((frame, _)) = reader
        .next_frame()
        .map_err(|e| ApiError::invalid(e.to_string()))?
    {
        match frame {
            Frame::Entry(entry) => entries.push(entry),
            Frame::End { .. } => {
                return Err(ApiError::invalid(
                    "a restore piece carries entries only, not the backup's end mark",
                ));
            }
        }
    }
    if reader.has_partial() {
        return Err(ApiError::invalid("the body ends inside a frame"));
    }
    if query.first.is_some() {
        let keys = state.node.key_count().await?;
        if keys > 0 {
            return Err(ApiError(TriremeError::new(
                ErrorCode::Conflict,
                format!("the cluster already holds {keys} keys: restore into an empty cluster"),
            )));
        }
    }
    let written = state.node.restore(entries).await?;
    Ok((
        StatusCode::OK,
        axum::Json(serde_json::json!({ "written": written })),
    )
        .into_response())
}
