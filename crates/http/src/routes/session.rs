//! `/v1/session/*`: Consul's sessions (create, destroy, info, list, node, renew), in Consul's
//! JSON shapes, so that `api.Session`, `api.Lock` and `api.Semaphore` work unchanged.

use crate::access::Access;
use crate::query::Query;
use crate::routes::kv::{consul_headers, read_mode};
use crate::routes::request_body;
use crate::{ApiError, AppState};
use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{Path, State};
use axum::http::{StatusCode, Uri};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use std::time::Duration;
use trireme_cluster::{Blocking, ReadMeta, ReadMode, SessionInfo, SessionRequest, is_session_id};
use trireme_types::session::SessionBehavior;

/// Lock-delay when the request names none, and the longest one allowed (Consul's).
const DEFAULT_LOCK_DELAY: Duration = Duration::from_secs(15);
const MAX_LOCK_DELAY: Duration = Duration::from_secs(60);

/// Longest session TTL (Consul's).
const MAX_TTL: Duration = Duration::from_secs(24 * 3600);

/// A duration as Go prints it, for the `TTL` field (`15s`, `1500ms`).
fn go_duration(ms: u64) -> String {
    if ms.is_multiple_of(1000) {
        format!("{}s", ms / 1000)
    } else {
        format!("{ms}ms")
    }
}

/// Consul's `SessionEntry`.
fn entry(info: &SessionInfo) -> Value {
    let s = &info.state;
    json!({
        "ID": s.id,
        "Name": s.name,
        "Node": s.node,
        "LockDelay": s.lock_delay_ms.saturating_mul(1_000_000),
        "Behavior": match s.behavior {
            SessionBehavior::Release => "release",
            SessionBehavior::Delete => "delete",
        },
        "TTL": if s.ttl_ms == 0 { String::new() } else { go_duration(s.ttl_ms) },
        "NodeChecks": [],
        "ServiceChecks": null,
        "CreateIndex": info.create_index,
        "ModifyIndex": info.modify_index,
    })
}

/// A duration field of the create body: a Go duration string (`15s`, `500ms`), or a number,
/// which Consul reads as seconds below 1000 and as nanoseconds from there.
fn duration_field(body: &Value, name: &str) -> Result<Option<Duration>, ApiError> {
    match body.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(Value::String(text)) if text.is_empty() => Ok(None),
        Some(Value::String(text)) => crate::blocking::parse_go_duration(text)
            .map(Some)
            .ok_or_else(|| {
                ApiError::invalid(format!(
                    "Invalid {name} {text:?}: expected a duration such as 15s"
                ))
            }),
        Some(Value::Number(n)) => match n.as_u64() {
            Some(n) if n < 1000 => Ok(Some(Duration::from_secs(n))),
            Some(n) => Ok(Some(Duration::from_nanos(n))),
            None => Err(ApiError::invalid(format!("Invalid {name} {n}"))),
        },
        Some(other) => Err(ApiError::invalid(format!("Invalid {name} {other}"))),
    }
}

fn check_id(id: &str) -> Result<(), ApiError> {
    if is_session_id(id) {
        Ok(())
    } else {
        Err(ApiError::invalid(format!(
            "Session id {id:?} is not a UUID"
        )))
    }
}

/// Refuses `session:write` on the node of session `id` (a session that does not exist is
/// left to the operation, which answers for it).
async fn require_session_write(
    state: &AppState,
    access: &Access,
    id: &str,
) -> Result<(), ApiError> {
    if !state.node.acl_enabled() {
        return Ok(());
    }
    let (found, _) = state.node.session_info(id, ReadMode::Default, None).await?;
    if let Some(session) = &found {
        let node = &session.state.node;
        access.require(
            access.can().session_write(node),
            "session:write",
            Some(node.as_bytes()),
        )?;
    }
    Ok(())
}

/// `PUT /v1/session/create`: `{"ID": ...}`; `session:write` on the session's node.
pub(crate) async fn create(
    State(state): State<AppState>,
    access: Access,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    let body = match request_body(body) {
        Ok(body) => body,
        Err(response) => return Ok(*response),
    };
    let body: Value = if body.iter().all(u8::is_ascii_whitespace) {
        json!({})
    } else {
        serde_json::from_slice(&body)
            .map_err(|e| ApiError::invalid(format!("Request decode failed: {e}")))?
    };
    if !body.is_object() {
        return Err(ApiError::invalid(
            "Request decode failed: expected a JSON object",
        ));
    }
    let text = |name: &str| {
        body.get(name)
            .and_then(Value::as_str)
            .unwrap_or_default()
            .to_string()
    };
    let behavior = match text("Behavior").as_str() {
        "" | "release" => SessionBehavior::Release,
        "delete" => SessionBehavior::Delete,
        other => {
            return Err(ApiError::invalid(format!(
                "Invalid Behavior setting {other:?}"
            )));
        }
    };
    let ttl = duration_field(&body, "TTL")?.filter(|t| !t.is_zero());
    let min = Duration::from_millis(state.node.config().limits.session_ttl_min_ms);
    if let Some(ttl) = ttl
        && (ttl < min || ttl > MAX_TTL)
    {
        return Err(ApiError::invalid(format!(
            "Invalid Session TTL '{}', must be between [{}={}]",
            go_duration(u64::try_from(ttl.as_millis()).unwrap_or(u64::MAX)),
            go_duration(u64::try_from(min.as_millis()).unwrap_or(u64::MAX)),
            go_duration(u64::try_from(MAX_TTL.as_millis()).unwrap_or(u64::MAX)),
        )));
    }
    let lock_delay = duration_field(&body, "LockDelay")?.unwrap_or(DEFAULT_LOCK_DELAY);
    if lock_delay > MAX_LOCK_DELAY {
        return Err(ApiError::invalid(format!(
            "Invalid LockDelay: at most {}s",
            MAX_LOCK_DELAY.as_secs()
        )));
    }
    let node = Some(text("Node")).filter(|n| !n.is_empty());
    let on = node.as_deref().unwrap_or(&state.node.me().name);
    access.require(
        access.can().session_write(on),
        "session:write",
        Some(on.as_bytes()),
    )?;
    let request = SessionRequest {
        name: text("Name"),
        node,
        lock_delay,
        behavior,
        ttl,
    };
    let info = state.node.session_create(request).await?;
    Ok(Json(json!({ "ID": info.state.id })).into_response())
}

/// `PUT /v1/session/destroy/<id>`: `true`, whether or not the session existed.
pub(crate) async fn destroy(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
) -> Result<Json<bool>, ApiError> {
    check_id(&id)?;
    require_session_write(&state, &access, &id).await?;
    state.node.session_destroy(&id).await?;
    Ok(Json(true))
}

/// The read mode and blocking query (`?index=&wait=`) a session read asks for.
fn read_of(uri: &Uri) -> Result<(ReadMode, Option<Blocking>), ApiError> {
    let query = Query::parse(uri.query());
    Ok((read_mode(&query)?, crate::blocking::blocking(&query)?))
}

/// Entries as Consul lists them, with the read's index headers: those of nodes the caller
/// may read sessions of.
fn listed<'a>(
    meta: &ReadMeta,
    access: &Access,
    sessions: impl Iterator<Item = &'a SessionInfo>,
) -> Response {
    let body: Vec<Value> = sessions
        .filter(|s| access.can().session_read(&s.state.node))
        .map(entry)
        .collect();
    (consul_headers(meta), Json(body)).into_response()
}

/// `GET /v1/session/info/<id>`: a list of one entry, or an empty list; blocks with
/// `?index=` until the session changes or ends.
pub(crate) async fn info(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    check_id(&id)?;
    let (mode, block) = read_of(&uri)?;
    let (found, meta) = state.node.session_info(&id, mode, block).await?;
    Ok(listed(&meta, &access, found.iter()))
}

/// `GET /v1/session/list`: every live session; blocks with `?index=` until one is created,
/// renewed or ends.
pub(crate) async fn list(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (mode, block) = read_of(&uri)?;
    let (all, meta) = state.node.session_list(mode, block).await?;
    Ok(listed(&meta, &access, all.iter()))
}

/// `GET /v1/session/node/<node>`: the live sessions of one node; blocks as `list` does.
pub(crate) async fn of_node(
    State(state): State<AppState>,
    access: Access,
    Path(node): Path<String>,
    uri: Uri,
) -> Result<Response, ApiError> {
    let (mode, block) = read_of(&uri)?;
    let (all, meta) = state.node.session_list(mode, block).await?;
    Ok(listed(
        &meta,
        &access,
        all.iter().filter(|s| s.state.node == node),
    ))
}

/// `PUT /v1/session/renew/<id>`: the renewed entry in a list, or 404 when the session does
/// not exist or has ended.
pub(crate) async fn renew(
    State(state): State<AppState>,
    access: Access,
    Path(id): Path<String>,
) -> Result<Response, ApiError> {
    check_id(&id)?;
    require_session_write(&state, &access, &id).await?;
    match state.node.session_renew(&id).await? {
        Some(info) => Ok(Json(vec![entry(&info)]).into_response()),
        None => Ok((
            StatusCode::NOT_FOUND,
            Json(json!({
                "error": format!("Session id '{id}' not found"),
                "code": "not_found",
            })),
        )
            .into_response()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn durations_read_as_consul_reads_them() {
        let body =
            json!({"TTL": "15s", "LockDelay": 5, "A": 2_000_000_000u64, "B": "soon", "C": ""});
        assert_eq!(
            duration_field(&body, "TTL").unwrap(),
            Some(Duration::from_secs(15))
        );
        assert_eq!(
            duration_field(&body, "LockDelay").unwrap(),
            Some(Duration::from_secs(5))
        );
        assert_eq!(
            duration_field(&body, "A").unwrap(),
            Some(Duration::from_secs(2))
        );
        assert!(duration_field(&body, "B").is_err());
        assert_eq!(duration_field(&body, "C").unwrap(), None);
        assert_eq!(duration_field(&body, "missing").unwrap(), None);
        assert_eq!(go_duration(15_000), "15s");
        assert_eq!(go_duration(1_500), "1500ms");
    }
}
