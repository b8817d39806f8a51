//! Backup and restore: `GET /v1/backup/shard/{id}` streams one shard's keys from its leader
//! (the `trireme backup` command asks each shard's leader in turn), and
//! `POST /v1/backup/restore` writes a piece of a backup, routed by the cluster's own shards.
//! Both carry frames of the backup format (`trireme_types::backup`).

use crate::access::Access;
use crate::routes::request_body;
use crate::{ApiError, AppState};
use axum::body::{Body, Bytes};
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, Query, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use trireme_cluster::ReadMode;
use trireme_types::backup::FrameReader;
use trireme_types::{ErrorCode, ShardId, TriremeError};

/// `GET /v1/backup/shard/{id}`: the shard's live keys as entry frames, then an end frame;
/// on the shard's leader only (another node answers with the error a read there would get).
pub(crate) async fn export(
    State(state): State<AppState>,
    access: Access,
    Path(shard): Path<String>,
) -> Result<Response, ApiError> {
    // A backup holds every key: the token must be allowed to read them all.
    access.operator_write()?;
    access.require(access.can().key_list_prefix(b""), "key:list", Some(b""))?;
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
    /// With `first`: the longest key in the backup, checked against this cluster's limit
    /// before anything is written.
    #[serde(default)]
    max_key: Option<usize>,
    /// With `first`: the largest value in the backup, likewise.
    #[serde(default)]
    max_value: Option<usize>,
}

/// `POST /v1/backup/restore[?first&max_key=K&max_value=V]`: writes the entry frames of the
/// body (whole frames only); answers `{"written": N}`. With `first`, a cluster that already
/// holds keys answers 409, and one whose limits are below `max_key` or `max_value` 413;
/// nothing is written then.
pub(crate) async fn restore(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<RestoreQuery>,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    // A restore may write any key.
    access.operator_write()?;
    access.key_write_prefix(b"")?;
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
            frame if frame.is_entry() => entries.push(frame),
            _ => {
                return Err(ApiError::invalid(
                    "a restore piece carries entries only, not an end mark",
                ));
            }
        }
    }
    if reader.has_partial() {
        return Err(ApiError::invalid("the body ends inside a frame"));
    }
    if query.first.is_some() {
        let limits = &state.node.config().limits;
        let over = [
            (query.max_key, limits.max_key_bytes, "key", "max_key_bytes"),
            (
                query.max_value,
                limits.max_value_bytes,
                "value",
                "max_value_bytes",
            ),
        ]
        .into_iter()
        .find(|(wanted, limit, _, _)| wanted.is_some_and(|w| w > *limit));
        if let Some((wanted, limit, what, setting)) = over {
            return Err(ApiError(TriremeError::new(
                ErrorCode::RequestTooLarge,
                format!(
                    "the backup holds a {what} of {} bytes; this cluster takes at most {limit} ([limits] {setting})",
                    wanted.unwrap_or_default()
                ),
            )));
        }
        // Clients' keys only: a Consul session somebody opened is not data.
        let (found, _) = state.node.list(b"", ReadMode::Default, 1).await?;
        if let Some((key, _)) = found.first() {
            return Err(ApiError(TriremeError::new(
                ErrorCode::Conflict,
                format!(
                    "the cluster already holds keys ({:?}, ...): restore into an empty cluster",
                    String::from_utf8_lossy(key)
                ),
            )));
        }
    }
    let written = state.node.restore(entries).await?;
    Ok((
        StatusCode::OK,
        axum::Json(trireme_types::admin::RestoreAnswer { written }),
    )
        .into_response())
}
