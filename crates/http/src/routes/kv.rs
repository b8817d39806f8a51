//! `/v1/kv/<key>`: Consul's KV API.

use crate::access::Access;
use crate::query::Query;
use crate::routes::request_body;
use crate::state::HttpMetrics;
use crate::{ApiError, AppState};
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use serde::Serialize;
use std::time::Duration;
use trireme_cluster::{DeleteRequest, PutCondition, PutRequest, ReadMeta, ReadMode};
use trireme_types::{ErrorCode, Record, TriremeError, ValueKind};

/// The key is everything after `/v1/kv/`, percent-decoded; keys are bytes, not necessarily UTF-8.
fn key_of(uri: &Uri) -> Vec<u8> {
    let path = uri.path();
    let raw = path.strip_prefix("/v1/kv").unwrap_or(path);
    let raw = raw.strip_prefix('/').unwrap_or(raw);
    percent_encoding::percent_decode_str(raw).collect()
}

pub(crate) fn read_mode(query: &Query) -> Result<ReadMode, ApiError> {
    let stale = query.flag("stale")? || max_stale(query)?.is_some();
    match (query.flag("consistent")?, stale) {
        (true, true) => Err(ApiError::invalid(
            "Cannot specify ?stale with ?consistent, conflicting semantics.",
        )),
        (true, false) => Ok(ReadMode::Consistent),
        (false, true) => Ok(ReadMode::Stale),
        (false, false) => Ok(ReadMode::Default),
    }
}

/// Consul's `?max_stale=D` (a Go duration), in milliseconds: a stale read from a replica that
/// may be older than `D` is run again on the leader. As in Consul, it implies `?stale`.
pub(crate) fn max_stale(query: &Query) -> Result<Option<u64>, ApiError> {
    let Some(raw) = query.str("max_stale") else {
        return Ok(None);
    };
    let bound = crate::blocking::parse_go_duration(raw).ok_or_else(|| {
        ApiError::invalid(format!(
            "Invalid max_stale {raw:?}: expected a duration such as 5s or 250ms"
        ))
    })?;
    Ok(Some(bound.as_millis() as u64).filter(|ms| *ms > 0))
}

/// How long a stale read with `?after_index=I` waits for its replica to apply `I` before it
/// goes to the leader instead.
const AFTER_INDEX_WAIT: Duration = Duration::from_secs(2);

/// Trireme's `?after_index=I` (read-your-writes): the index a write answered in
/// `X-Consul-Index`. A stale read carrying it is answered by the local replica once that has
/// applied `I`, and otherwise by the leader.
pub(crate) fn after_index(query: &Query) -> Result<Option<u64>, ApiError> {
    Ok(query.u64("after_index")?.filter(|i| *i > 0))
}

/// Whether a read answered with `meta` must run again on the leader: it was stale, and its
/// replica could be older than `max_stale` allows.
pub(crate) fn too_stale(mode: ReadMode, max_stale: Option<u64>, meta: &ReadMeta) -> bool {
    mode == ReadMode::Stale && max_stale.is_some_and(|max| meta.last_contact_ms > max)
}

/// Consul's array of entries (`LockIndex`, `Key`, `Flags`, `Value` in base64 or `null`,
/// `CreateIndex`, `ModifyIndex`), written straight into one buffer. This is the body of every
/// default GET; serde's derive path built a `String` for each key and each value on the way.
fn entries_body<'a>(entries: impl IntoIterator<Item = (&'a [u8], &'a Record)>) -> Vec<u8> {
    use std::io::Write as _;
    let mut out = Vec::with_capacity(128);
    out.push(b'[');
    for (i, (key, record)) in entries.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        // Writing to a Vec cannot fail.
        let _ = write!(out, "{{\"LockIndex\":{},\"Key\":", record.lock.index);
        serde_json::to_writer(&mut out, &*String::from_utf8_lossy(key))
            .expect("writing a string to a Vec cannot fail");
        let _ = write!(out, ",\"Flags\":{},\"Value\":", record.flags);
        // A Redis collection's row holds its member count, not a value: it reads as empty.
        if record.value.is_empty() || record.kind != ValueKind::String {
            out.extend_from_slice(b"null");
        } else {
            let engine = &base64::engine::general_purpose::STANDARD;
            let at = out.len() + 1;
            let len = base64::encoded_len(record.value.len(), true).unwrap_or(0);
            out.resize(at + len + 1, b'"');
            let written = engine
                .encode_slice(&record.value, &mut out[at..at + len])
                .unwrap_or(0);
            debug_assert_eq!(written, len);
        }
        if let Some(session) = &record.lock.session {
            out.extend_from_slice(b",\"Session\":");
            serde_json::to_writer(&mut out, &*String::from_utf8_lossy(session))
                .expect("writing a string to a Vec cannot fail");
        }
        let _ = write!(
            out,
            ",\"CreateIndex\":{},\"ModifyIndex\":{}}}",
            record.create_index, record.modify_index
        );
    }
    out.push(b']');
    out
}

/// Why a plain HTTP write does not replace a Redis collection.
pub(crate) fn collection_error(kind: ValueKind) -> TriremeError {
    TriremeError::new(
        ErrorCode::WrongType,
        format!(
            "the key holds a Redis {}: change it over RESP, or delete it first",
            kind.type_name()
        ),
    )
}

/// `X-Consul-Index`, `X-Consul-KnownLeader` and `X-Consul-LastContact` of a read.
pub(crate) fn consul_headers(meta: &ReadMeta) -> HeaderMap {
    // Room for these three and the content type: no regrowth on the way out.
    let mut headers = HeaderMap::with_capacity(4);
    headers.insert("X-Consul-Index", HeaderValue::from(meta.index.max(1)));
    headers.insert(
        "X-Consul-KnownLeader",
        HeaderValue::from_static(if meta.known_leader { "true" } else { "false" }),
    );
    headers.insert(
        "X-Consul-LastContact",
        HeaderValue::from(meta.last_contact_ms),
    );
    headers
}

fn json_response(headers: HeaderMap, body: &impl Serialize) -> Response {
    match serde_json::to_vec(body) {
        Ok(body) => json_bytes_response(headers, body),
        Err(e) => ApiError(TriremeError::new(
            ErrorCode::Internal,
            format!("cannot render the answer: {e}"),
        ))
        .into_response(),
    }
}

fn json_bytes_response(mut headers: HeaderMap, body: Vec<u8>) -> Response {
    headers.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    (headers, body).into_response()
}

fn not_found(headers: HeaderMap) -> Response {
    (StatusCode::NOT_FOUND, headers).into_response()
}

/// The other region a request names with Consul's `?dc=`; `None` for none, this node's own
/// region or the cluster's name. Consul's own error for a datacenter it does not know.
pub(crate) fn asked_region(
    query: &Query,
    node: &trireme_cluster::Node,
) -> Result<Option<String>, ApiError> {
    let Some(dc) = query.str("dc").filter(|dc| !dc.is_empty()) else {
        return Ok(None);
    };
    if dc == node.datacenter() || dc == node.config().cluster_name {
        return Ok(None);
    }
    if !node.datacenters().iter().any(|known| known == dc) {
        return Err(ApiError(TriremeError::new(
            ErrorCode::Internal,
            "No path to datacenter",
        )));
    }
    Ok(Some(dc.to_owned()))
}

/// `GET /v1/kv/<key>`.
///
/// Listings (`keys`, `recurse`) need `key:list` on the prefix and show only the keys the
/// caller may read. With `?dc=` naming another region, stale reads are answered by replicas
/// there.
pub(crate) async fn get(
    state: State<AppState>,
    access: Access,
    uri: Uri,
) -> Result<Response, ApiError> {
    let query = Query::parse(uri.query());
    match asked_region(&query, &state.node)? {
        Some(region) => {
            trireme_cluster::answered_in_region(region, get_here(state, access, uri, true)).await
        }
        None => get_here(state, access, uri, false).await,
    }
}

/// [`get`], answered by this node's region, or another one's (`elsewhere`).
async fn get_here(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
    elsewhere: bool,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.kv_get);
    let key = key_of(&uri);
    let query = Query::parse(uri.query());
    let mut mode = read_mode(&query)?;
    let max_stale = max_stale(&query)?;
    let after_index = after_index(&query)?;
    let node = &state.node;
    // Indexes are per shard: a listing, which may span shards, carrying one is read through
    // the leaders; a key is read here once this replica has applied the index (in another
    // region, through the leader).
    if mode == ReadMode::Stale
        && let Some(index) = after_index
        && (elsewhere
            || query.flag("keys")?
            || query.flag("recurse")?
            || key.is_empty()
            || !node
                .await_applied_for_key(&key, index, AFTER_INDEX_WAIT)
                .await)
    {
        mode = ReadMode::Default;
    }

    let block = crate::blocking::blocking(&query)?;
    let list_in = async |prefix: &[u8], mode: ReadMode| match block {
        Some(block) => node.list_blocking(prefix, mode, block).await,
        None if mode == ReadMode::Consistent => node.list_consistent(prefix).await,
        None => node.list(prefix, mode, usize::MAX).await,
    };
    let list = async |prefix: &[u8]| {
        let answer = list_in(prefix, mode).await?;
        if too_stale(mode, max_stale, &answer.1) {
            return list_in(prefix, ReadMode::Default).await;
        }
        Ok::<_, trireme_cluster::ClusterError>(answer)
    };

    if query.flag("keys")? {
        access.key_list(&key)?;
        let (mut entries, meta) = list(&key).await?;
        entries.retain(|(k, _)| access.can().key_read(k));
        let separator = query.str("separator").filter(|s| !s.is_empty());
        let mut keys: Vec<String> = Vec::with_capacity(entries.len());
        for (k, _) in &entries {
            let sep = separator.unwrap_or_default().as_bytes();
            let shown = folder_of(k, key.len(), sep).unwrap_or(k);
            let shown = String::from_utf8_lossy(shown).into_owned();
            if keys.last() != Some(&shown) {
                keys.push(shown);
            }
        }
        let headers = consul_headers(&meta);
        if keys.is_empty() {
            return Ok(not_found(headers));
        }
        return Ok(json_response(headers, &keys));
    }

    if query.flag("recurse")? {
        access.key_list(&key)?;
        let (mut entries, meta) = list(&key).await?;
        entries.retain(|(k, _)| access.can().key_read(k));
        let headers = consul_headers(&meta);
        if entries.is_empty() {
            return Ok(not_found(headers));
        }
        let body = entries_body(entries.iter().map(|(k, r)| (&k[..], r)));
        return Ok(json_bytes_response(headers, body));
    }

    if key.is_empty() {
        return Err(ApiError::invalid("Missing key name"));
    }
    access.key_read(&key)?;
    let get_in = async |mode: ReadMode| match block {
        Some(block) => node.get_blocking(&key, mode, block).await,
        None => node.get(&key, mode).await,
    };
    let (mut record, mut meta) = get_in(mode).await?;
    if too_stale(mode, max_stale, &meta) {
        (record, meta) = get_in(ReadMode::Default).await?;
    }
    let headers = consul_headers(&meta);
    let Some(record) = record else {
        return Ok(not_found(headers));
    };
    if query.flag("raw")? {
        let value = if record.kind == ValueKind::String {
            record.value
        } else {
            Bytes::new()
        };
        let mut response = (headers, value).into_response();
        response.headers_mut().insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/octet-stream"),
        );
        return Ok(response);
    }
    Ok(json_bytes_response(
        headers,
        entries_body([(&key[..], &record)]),
    ))
}

fn bool_response(value: bool) -> Response {
    json_response(HeaderMap::new(), &value)
}

/// `PUT /v1/kv/<key>` with the raw value as body.
pub(crate) async fn put(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.kv_put);
    let body = match request_body(body) {
        Ok(body) => body,
        Err(response) => return Ok(*response),
    };
    let key = key_of(&uri);
    let query = Query::parse(uri.query());
    if key.is_empty() {
        return Err(ApiError::invalid("Missing key name"));
    }
    access.key_write(&key)?;
    let flags = query.u64("flags")?.unwrap_or(0);
    match (query.str("acquire"), query.str("release")) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "Conflicting flags: ?acquire and ?release together",
            ));
        }
        (Some(session), None) => {
            let taken = state.node.acquire(key.into(), body, flags, session).await?;
            return Ok(bool_response(taken));
        }
        (None, Some(session)) => {
            let released = state.node.release(key.into(), body, flags, session).await?;
            return Ok(bool_response(released));
        }
        (None, None) => {}
    }
    let condition = match query.u64("cas")? {
        None => PutCondition::IfNotCollection,
        Some(0) => PutCondition::IfAbsent,
        Some(index) => PutCondition::IfModifyIndex(index),
    };
    let request = PutRequest::new(key, body).flags(flags).condition(condition);
    let outcome = state.node.put(request).await?;
    // Refused only because the key holds a collection: say so, rather than a bare `false`.
    if let Some(previous) = &outcome.previous
        && !outcome.written
        && condition == PutCondition::IfNotCollection
        && previous.kind != ValueKind::String
    {
        return Err(ApiError(collection_error(previous.kind)));
    }
    let mut response = bool_response(outcome.written);
    if outcome.written {
        // Not sent by Consul: the index a stale read's `?after_index` waits for.
        response
            .headers_mut()
            .insert("X-Consul-Index", HeaderValue::from(outcome.index));
    }
    Ok(response)
}

/// `DELETE /v1/kv/<key>`.
pub(crate) async fn delete(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.kv_delete);
    let key = key_of(&uri);
    let query = Query::parse(uri.query());
    if query.flag("recurse")? {
        access.key_write_prefix(&key)?;
        state.node.delete_prefix(&key).await?;
        return Ok(bool_response(true));
    }
    if key.is_empty() {
        return Err(ApiError::invalid("Missing key name"));
    }
    access.key_write(&key)?;
    let cas = query.u64("cas")?;
    let request = DeleteRequest::new(key).if_modify_index(cas);
    let deleted = state.node.delete(request).await?;
    Ok(bool_response(cas.is_none() || deleted))
}

/// The folder `key` is in one level below its first `prefix_len` bytes (Consul's
/// `?keys&separator=`): up to and with the first `separator` after them. `None` when there
/// is none, or no separator.
pub(crate) fn folder_of<'k>(
    key: &'k [u8],
    prefix_len: usize,
    separator: &[u8],
) -> Option<&'k [u8]> {
    if separator.is_empty() {
        return None;
    }
    let rest = key.get(prefix_len..)?;
    let at = rest.windows(separator.len()).position(|w| w == separator)?;
    Some(&key[..prefix_len + at + separator.len()])
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_percent_decoded_bytes() {
        let uri: Uri = "/v1/kv/a%2Fb/c%20d%FF?raw".parse().unwrap();
        assert_eq!(key_of(&uri), b"a/b/c d\xff".to_vec());
        let uri: Uri = "/v1/kv/".parse().unwrap();
        assert_eq!(key_of(&uri), Vec::<u8>::new());
    }

    #[test]
    fn entries_render_like_consul() {
        let record = Record {
            value: Bytes::from_static(b"hello"),
            flags: 3,
            create_index: 5,
            modify_index: 9,
            expires_at_ms: None,
            lock: Default::default(),
            kind: Default::default(),
        };
        let parse = |body: Vec<u8>| -> serde_json::Value {
            serde_json::from_slice(&body).expect("the body is JSON")
        };
        assert_eq!(
            parse(entries_body([(&b"k"[..], &record)])),
            serde_json::json!([{"LockIndex":0,"Key":"k","Flags":3,"Value":"aGVsbG8=","CreateIndex":5,"ModifyIndex":9}])
        );
        let empty = Record {
            value: Bytes::new(),
            ..record.clone()
        };
        let odd = Record {
            value: Bytes::from_static(b"\x00\xffab"),
            ..record.clone()
        };
        let two = parse(entries_body([
            (&b"quote\"back\\slash\n\xff"[..], &empty),
            (&b"k2"[..], &odd),
        ]));
        assert_eq!(two[0]["Key"], "quote\"back\\slash\n\u{fffd}");
        assert_eq!(two[0]["Value"], serde_json::Value::Null);
        assert_eq!(two[1]["Value"], "AP9hYg==");
        assert_eq!(parse(entries_body([])), serde_json::json!([]));
        let locked = Record {
            lock: trireme_types::LockInfo {
                index: 2,
                session: Some(Bytes::from_static(b"adf4238a-882b-9ddc-4a9d-5b6758e4159e")),
                delay_until_ms: 0,
            },
            ..record.clone()
        };
        let entry = &parse(entries_body([(&b"k"[..], &locked)]))[0];
        assert_eq!(entry["LockIndex"], 2);
        assert_eq!(entry["Session"], "adf4238a-882b-9ddc-4a9d-5b6758e4159e");
        assert_eq!(
            parse(entries_body([(&b"k"[..], &record)]))[0].get("Session"),
            None
        );
    }
}
