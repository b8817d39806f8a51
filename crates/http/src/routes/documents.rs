//! `/v0/{collection}/{key}`: JSON documents, Orchestrate-style, in the one keyspace.
//!
//! The document `/v0/users/alice` is the key `users/alice` that `/v1/kv` and RESP see; a
//! collection is the key prefix `users/`. A document's ref is its record's `ModifyIndex`,
//! so `If-Match` is Consul's check-and-set under another name. Listing a collection is a
//! prefix scan merged across shards; searching it reads every document of the collection on
//! every shard (there is no index), see [`trireme_cluster::SearchQuery`] for the language.
//!
//! Values under a collection's prefix that are not JSON objects (written through `/v1/kv`
//! or RESP) are not documents: reads answer 404 and listings and searches pass over them.

use crate::access::Access;
use crate::query::Query;
use crate::routes::kv::read_mode;
use crate::routes::request_body;
use crate::state::HttpMetrics;
use crate::{ApiError, AppState};
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use percent_encoding::{AsciiSet, CONTROLS, percent_decode_str, utf8_percent_encode};
use serde::Serialize;
use serde_json::Value;
use std::ops::Bound;
use trireme_cluster::{DeleteRequest, PutCondition, PutRequest, ReadMode};
use trireme_types::{ErrorCode, Record, TriremeError};

/// Results per page when `?limit` is not given, and the most a page may ask for.
const DEFAULT_LIMIT: u64 = 10;
const MAX_LIMIT: u64 = 100;

/// Deepest `?offset` a search accepts: every shard sends back `offset + limit` matches, so
/// the offset bounds what one search may hold in memory.
const MAX_OFFSET: u64 = 10_000;

/// What is escaped when a collection or key goes back into a path segment.
const SEGMENT: &AsciiSet = &CONTROLS
    .add(b' ')
    .add(b'"')
    .add(b'#')
    .add(b'%')
    .add(b'/')
    .add(b'<')
    .add(b'>')
    .add(b'?')
    .add(b'`')
    .add(b'{')
    .add(b'}');

/// A collection and, for the document routes, a key; both percent-decoded UTF-8.
struct DocPath {
    collection: String,
    key: Option<String>,
}

impl DocPath {
    fn parse(uri: &Uri) -> Result<Self, ApiError> {
        Self::parse_path(uri.path())
    }

    fn parse_path(path: &str) -> Result<Self, ApiError> {
        let rest = path.strip_prefix("/v0/").unwrap_or_default();
        let (collection, key) = match rest.split_once('/') {
            Some((c, k)) => (c, Some(k)),
            None => (rest, None),
        };
        let collection = decode("collection", collection)?;
        if collection.is_empty() {
            return Err(ApiError::invalid(
                "missing collection name in /v0/{collection}",
            ));
        }
        if collection.contains('/') {
            return Err(ApiError::invalid(format!(
                "collection name {collection:?} contains '/'"
            )));
        }
        let key = match key {
            None => None,
            Some(raw) => {
                let key = decode("key", raw)?;
                if key.is_empty() {
                    return Err(ApiError::invalid(
                        "missing document key in /v0/{collection}/{key}",
                    ));
                }
                Some(key)
            }
        };
        Ok(Self { collection, key })
    }

    /// The collection's key prefix, `users/`.
    fn prefix(&self) -> String {
        format!("{}/", self.collection)
    }

    /// The document's key in the keyspace, `users/alice`.
    fn full_key(&self) -> Result<String, ApiError> {
        match &self.key {
            Some(key) => Ok(format!("{}/{key}", self.collection)),
            None => Err(ApiError::invalid("missing document key")),
        }
    }

    fn key(&self) -> &str {
        self.key.as_deref().unwrap_or_default()
    }
}

fn decode(what: &str, raw: &str) -> Result<String, ApiError> {
    percent_decode_str(raw)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ApiError::invalid(format!("the {what} is not UTF-8 once percent-decoded")))
}

fn segment(text: &str) -> String {
    utf8_percent_encode(text, SEGMENT).to_string()
}

fn query_value(text: &str) -> String {
    form_urlencoded::byte_serialize(text.as_bytes()).collect()
}

/// `/v0/users/alice/refs/12`: where a version of a document is named (served while it is
/// the current one: refs history is not kept).
fn ref_location(collection: &str, key: &str, reference: u64) -> String {
    format!(
        "/v0/{}/{}/refs/{reference}",
        segment(collection),
        segment(key)
    )
}

fn etag(reference: u64) -> HeaderValue {
    // Digits and quotes are always a valid header value.
    HeaderValue::from_str(&format!("\"{reference}\"")).unwrap_or(HeaderValue::from_static("\"0\""))
}

fn header_value(location: &str) -> Result<HeaderValue, ApiError> {
    HeaderValue::from_str(location).map_err(|_| {
        ApiError(TriremeError::new(
            ErrorCode::Internal,
            "unencodable location",
        ))
    })
}

fn not_found(message: String) -> ApiError {
    ApiError(TriremeError::new(ErrorCode::NotFound, message))
}

fn precondition_failed(message: String) -> ApiError {
    ApiError(TriremeError::new(ErrorCode::PreconditionFailed, message))
}

/// Whether a stored value is a document: a JSON object.
fn is_document(value: &[u8]) -> bool {
    value.trim_ascii_start().first() == Some(&b'{')
        && serde_json::from_slice::<serde::de::IgnoredAny>(value).is_ok()
}

/// A request's condition on the document's current ref.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Precondition {
    None,
    /// `If-Match: "12"`: the document is at ref 12.
    Ref(u64),
    /// `If-Match: *`: the document exists.
    Exists,
    /// `If-None-Match: *`: the document does not exist.
    Absent,
}

fn precondition(headers: &HeaderMap) -> Result<Precondition, ApiError> {
    let text = |name: &header::HeaderName| -> Result<Option<String>, ApiError> {
        headers
            .get(name)
            .map(|v| {
                v.to_str()
                    .map(|s| s.trim().to_owned())
                    .map_err(|_| ApiError::invalid(format!("{name}: not a readable value")))
            })
            .transpose()
    };
    match (text(&header::IF_MATCH)?, text(&header::IF_NONE_MATCH)?) {
        (Some(_), Some(_)) => Err(ApiError::invalid(
            "give If-Match or If-None-Match, not both",
        )),
        (None, None) => Ok(Precondition::None),
        (None, Some(v)) if v == "*" => Ok(Precondition::Absent),
        (None, Some(v)) => Err(ApiError::invalid(format!(
            "If-None-Match: only \"*\" (create only) is supported, got {v:?}"
        ))),
        (Some(v), None) if v == "*" => Ok(Precondition::Exists),
        (Some(v), None) => {
            let tag = v.strip_prefix("W/").unwrap_or(&v);
            let tag = tag
                .strip_prefix('"')
                .and_then(|t| t.strip_suffix('"'))
                .unwrap_or(tag);
            tag.parse::<u64>().map(Precondition::Ref).map_err(|_| {
                ApiError::invalid(format!(
                    "If-Match: expected one ref like \"12\" (or *), got {v:?}"
                ))
            })
        }
    }
}

/// `PUT /v0/{collection}/{key}` with a JSON object as body → 201, `ETag`, `Location`.
pub(crate) async fn put(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.doc_put);
    let body = match request_body(body) {
        Ok(body) => body,
        Err(response) => return Ok(*response),
    };
    let path = DocPath::parse(&uri)?;
    let key = path.full_key()?;
    access.key_write(key.as_bytes())?;
    document_body(&body)?;
    let when = precondition(&headers)?;
    let condition = match when {
        Precondition::None => PutCondition::IfNotCollection,
        Precondition::Ref(r) => PutCondition::IfModifyIndex(r),
        // "Whatever is there" means whatever document: a Redis collection is not replaced.
        Precondition::Exists => PutCondition::IfPresentString,
        Precondition::Absent => PutCondition::IfAbsent,
    };
    // Flags are a Consul notion; a document write leaves whatever the key had.
    let request = PutRequest::new(key.clone(), body).condition(condition);
    let outcome = state.node.put(request).await?;
    let index = outcome.index;
    if let Some(previous) = &outcome.previous
        && !outcome.written
        && matches!(when, Precondition::None | Precondition::Exists)
        && previous.kind != trireme_types::ValueKind::String
    {
        return Err(ApiError(super::kv::collection_error(previous.kind)));
    }
    if !outcome.written {
        let now = outcome.previous.map(|r| r.modify_index);
        return Err(precondition_failed(match (when, now) {
            (Precondition::Absent, Some(r)) => format!("{key} already exists (ref \"{r}\")"),
            (_, None) => format!("{key} does not exist"),
            (_, Some(r)) => format!("{key} is at ref \"{r}\", not the one in If-Match"),
        }));
    }
    created(&path.collection, path.key(), index)
}

/// `GET /v0/{collection}/{key}` → the document, with its ref as `ETag`.
pub(crate) async fn get(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.doc_get);
    let path = DocPath::parse(&uri)?;
    let key = path.full_key()?;
    access.key_read(key.as_bytes())?;
    let mode = read_mode(&Query::parse(uri.query()))?;
    let (record, _) = state.node.get(key.as_bytes(), mode).await?;
    let Some(record) = record else {
        return Err(not_found(format!("no document {key}")));
    };
    if !is_document(&record.value) {
        return Err(not_found(format!(
            "{key} holds a value that is not a JSON object, so not a document"
        )));
    }
    let location = ref_location(&path.collection, path.key(), record.modify_index);
    let mut response = record.value.into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::ETAG, etag(record.modify_index));
    h.insert(header::CONTENT_LOCATION, header_value(&location)?);
    Ok(response)
}

/// `DELETE /v0/{collection}/{key}` → 204; with `If-Match`, only at that ref.
pub(crate) async fn delete(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
    headers: HeaderMap,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.doc_delete);
    let path = DocPath::parse(&uri)?;
    let key = path.full_key()?;
    access.key_write(key.as_bytes())?;
    let when = precondition(&headers)?;
    let cas = match when {
        Precondition::Ref(r) => Some(r),
        Precondition::None | Precondition::Exists => None,
        Precondition::Absent => {
            return Err(ApiError::invalid(
                "If-None-Match applies to PUT only, not DELETE",
            ));
        }
    };
    let request = DeleteRequest::new(key.clone()).if_modify_index(cas);
    let deleted = state.node.delete(request).await?;
    if !deleted && when != Precondition::None {
        return Err(precondition_failed(match cas {
            Some(r) => format!("{key} does not exist or is not at ref \"{r}\""),
            None => format!("{key} does not exist"),
        }));
    }
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// The JSON object a request body must be, or the 400 saying what it is instead.
fn document_body(body: &[u8]) -> Result<Value, ApiError> {
    match serde_json::from_slice::<Value>(body) {
        Ok(value @ Value::Object(_)) => Ok(value),
        Ok(_) => Err(ApiError::invalid(
            "the body must be a JSON object (a document)",
        )),
        Err(e) => Err(ApiError::invalid(format!("the body is not JSON: {e}"))),
    }
}

/// A 201 naming the document's new ref.
fn created(collection: &str, key: &str, index: u64) -> Result<Response, ApiError> {
    let location = ref_location(collection, key, index);
    let mut response = StatusCode::CREATED.into_response();
    let h = response.headers_mut();
    h.insert(header::ETAG, etag(index));
    h.insert(header::LOCATION, header_value(&location)?);
    Ok(response)
}

/// `POST /v0/{collection}` with a JSON object → 201, the document stored under a new key
/// (16 hex digits, random), named in `Location`.
pub(crate) async fn post(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.doc_put);
    let body = match request_body(body) {
        Ok(body) => body,
        Err(response) => return Ok(*response),
    };
    let path = DocPath::parse(&uri)?;
    access.key_write_prefix(path.prefix().as_bytes())?;
    document_body(&body)?;
    // 64 random bits: a collision is unlikely enough that one retry settles it.
    for _ in 0..2 {
        let key = format!("{:016x}", rand::random::<u64>());
        let full = format!("{}{key}", path.prefix());
        let request = PutRequest::new(full, body.clone()).condition(PutCondition::IfAbsent);
        let outcome = state.node.put(request).await?;
        if outcome.written {
            return created(&path.collection, &key, outcome.index);
        }
    }
    Err(ApiError(TriremeError::new(
        ErrorCode::Internal,
        "could not find a free key for the document",
    )))
}

/// Attempts of a `PATCH` without `If-Match` that another write beat to the document.
const PATCH_ATTEMPTS: usize = 5;

/// `PATCH /v0/{collection}/{key}`: a JSON Patch (an array of operations, or any body sent as
/// `application/json-patch+json`) or a JSON Merge Patch (an object) applied to the document
/// as it is, written back only if it is still at the ref it was read at. With `If-Match`,
/// only at that ref (else 412); without, a write that got in between makes it read and
/// apply again. 201 with the new ref; 404 without a document; 400 (naming the operation)
/// when the patch does not apply; 409 when the result is not an object.
pub(crate) async fn patch(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.doc_put);
    let body = match request_body(body) {
        Ok(body) => body,
        Err(response) => return Ok(*response),
    };
    let path = DocPath::parse(&uri)?;
    let key = path.full_key()?;
    access.key_write(key.as_bytes())?;
    access.key_read(key.as_bytes())?;
    let patch: Value = serde_json::from_slice(&body)
        .map_err(|e| ApiError::invalid(format!("the patch is not JSON: {e}")))?;
    let json_patch = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.starts_with("application/json-patch+json"))
        || patch.is_array();
    let wanted = match precondition(&headers)? {
        Precondition::Ref(r) => Some(r),
        Precondition::None | Precondition::Exists => None,
        Precondition::Absent => {
            return Err(ApiError::invalid(
                "If-None-Match does not apply to PATCH: there must be a document to patch",
            ));
        }
    };
    for _ in 0..PATCH_ATTEMPTS {
        let (record, _) = state.node.get(key.as_bytes(), ReadMode::Consistent).await?;
        let Some(record) = record.filter(|r| is_document(&r.value)) else {
            return Err(not_found(format!("no document {key} to patch")));
        };
        if let Some(r) = wanted
            && r != record.modify_index
        {
            return Err(precondition_failed(format!(
                "{key} is at ref \"{}\", not the one in If-Match",
                record.modify_index
            )));
        }
        let current: Value = serde_json::from_slice(&record.value)
            .map_err(|e| ApiError::invalid(format!("the stored document is not JSON: {e}")))?;
        let changed = if json_patch {
            let most = state.node.config().limits.max_value_bytes;
            super::patch::apply_json_patch(&current, &patch, record.value.len(), most)
                .map_err(ApiError::invalid)?
        } else {
            super::patch::apply_merge_patch(&current, &patch)
        };
        if !changed.is_object() {
            return Err(ApiError(TriremeError::new(
                ErrorCode::Conflict,
                "the patch would leave a value that is not a JSON object (a document)",
            )));
        }
        let bytes = serde_json::to_vec(&changed)
            .map_err(|e| ApiError::invalid(format!("the patched document: {e}")))?;
        let request = PutRequest::new(key.clone(), Bytes::from(bytes))
            .condition(PutCondition::IfModifyIndex(record.modify_index));
        let outcome = state.node.put(request).await?;
        if outcome.written {
            return created(&path.collection, path.key(), outcome.index);
        }
        if wanted.is_some() {
            return Err(precondition_failed(format!(
                "{key} changed while it was being patched"
            )));
        }
    }
    Err(ApiError(TriremeError::new(
        ErrorCode::Conflict,
        format!("{key} kept changing while it was being patched; try again"),
    )))
}

/// `GET /v0/{collection}/{key}/refs/{ref}`: the document at that ref. Only the current ref is
/// kept (a write replaces the document): an older ref answers 404 saying which ref is
/// current.
pub(crate) async fn get_ref(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.doc_get);
    let (document, reference) = uri
        .path()
        .rsplit_once("/refs/")
        .ok_or_else(|| ApiError::invalid("expected /v0/{collection}/{key}/refs/{ref}"))?;
    let reference: u64 = reference
        .trim_matches('"')
        .parse()
        .map_err(|_| ApiError::invalid(format!("{reference:?} is not a ref (a number)")))?;
    let path = DocPath::parse_path(document)?;
    let key = path.full_key()?;
    access.key_read(key.as_bytes())?;
    let mode = read_mode(&Query::parse(uri.query()))?;
    let (record, _) = state.node.get(key.as_bytes(), mode).await?;
    let Some(record) = record.filter(|r| is_document(&r.value)) else {
        return Err(not_found(format!("no document {key}")));
    };
    if record.modify_index != reference {
        return Err(not_found(format!(
            "{key} is at ref \"{}\"; older refs are not kept",
            record.modify_index
        )));
    }
    let mut response = record.value.into_response();
    let h = response.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    h.insert(header::ETAG, etag(record.modify_index));
    Ok(response)
}

/// `DELETE /v0/{collection}?force=true`: every key of the collection, shard by shard.
pub(crate) async fn delete_collection(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
) -> Result<Response, ApiError> {
    HttpMetrics::inc(&state.metrics.doc_delete);
    let path = DocPath::parse(&uri)?;
    access.key_write_prefix(path.prefix().as_bytes())?;
    let query = Query::parse(uri.query());
    if query.str("force") != Some("true") {
        return Err(ApiError::invalid(
            "deleting a whole collection needs ?force=true",
        ));
    }
    state.node.delete_prefix(path.prefix().as_bytes()).await?;
    Ok(StatusCode::NO_CONTENT.into_response())
}

/// Where a result lives: Orchestrate's `path` object.
#[derive(Serialize)]
struct ItemPath<'a> {
    collection: &'a str,
    key: &'a str,
    #[serde(rename = "ref")]
    reference: String,
}

#[derive(Serialize)]
struct Item<'a> {
    path: ItemPath<'a>,
    value: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f64>,
}

#[derive(Serialize)]
struct Page<'a> {
    count: usize,
    #[serde(skip_serializing_if = "Option::is_none")]
    total_count: Option<u64>,
    results: Vec<Item<'a>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    next: Option<String>,
}

/// The documents among `rows` (keys under `prefix`), as result items; other values skipped.
fn items<'a>(collection: &'a str, prefix: &str, rows: &'a [(Bytes, Record)]) -> Vec<Item<'a>> {
    rows.iter()
        .filter_map(|(k, record)| item(collection, prefix, k, record, None))
        .collect()
}

/// The row at `key` as a result item, if it is a document of the collection.
fn item<'a>(
    collection: &'a str,
    prefix: &str,
    key: &'a [u8],
    record: &Record,
    score: Option<f64>,
) -> Option<Item<'a>> {
    let key = std::str::from_utf8(key.get(prefix.len()..)?).ok()?;
    if key.is_empty() || record.value.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    let value: Value = serde_json::from_slice(&record.value).ok()?;
    Some(Item {
        path: ItemPath {
            collection,
            key,
            reference: record.modify_index.to_string(),
        },
        value,
        score,
    })
}

fn bounded(query: &Query, name: &str, default: u64, max: u64, min: u64) -> Result<u64, ApiError> {
    let value = query.u64(name)?.unwrap_or(default);
    if !(min..=max).contains(&value) {
        return Err(ApiError::invalid(format!(
            "?{name}={value} is out of range: {min} to {max}"
        )));
    }
    Ok(value)
}

/// The read-mode flag to carry into a `next` link.
fn mode_suffix(mode: ReadMode) -> &'static str {
    match mode {
        ReadMode::Consistent => "&consistent",
        ReadMode::Stale => "&stale",
        ReadMode::Default => "",
    }
}

fn json_page(page: &Page<'_>) -> Response {
    let mut response = axum::Json(page).into_response();
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// `GET /v0/{collection}`: a page of the collection in key order (`?limit`, `?afterKey` or
/// `?startKey`), or with `?query=` a search (`?limit`, `?offset`). Needs `key:list` on the
/// whole collection, with no narrower rule below it granting less: pages, cursors and
/// counts would otherwise tell what such a rule hides.
pub(crate) async fn get_collection(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
) -> Result<Response, ApiError> {
    let path = DocPath::parse(&uri)?;
    let prefix = path.prefix();
    access.require(
        access.can().key_list_prefix(prefix.as_bytes()),
        "key:list",
        Some(prefix.as_bytes()),
    )?;
    let query = Query::parse(uri.query());
    let mode = read_mode(&query)?;
    let limit = bounded(&query, "limit", DEFAULT_LIMIT, MAX_LIMIT, 1)?;
    let collection = path.collection.as_str();
    let base = format!("/v0/{}?limit={limit}", segment(collection));

    if let Some(text) = query.str("query") {
        HttpMetrics::inc(&state.metrics.doc_search);
        let sort = match query.str("sort") {
            Some(sort) => {
                trireme_search::parse_sort(sort).map_err(|e| ApiError::invalid(e.to_string()))?
            }
            None => Vec::new(),
        };
        let offset = bounded(&query, "offset", 0, MAX_OFFSET, 0)?;
        let (page, _) = state
            .node
            .search(
                collection.as_bytes(),
                text,
                &sort,
                offset as usize,
                limit as usize,
                mode,
            )
            .await?;
        let results: Vec<Item<'_>> = page
            .rows
            .iter()
            .filter_map(|hit| {
                item(
                    collection,
                    &prefix,
                    &hit.key,
                    &hit.record,
                    Some(f64::from(hit.score)),
                )
            })
            .collect();
        let sorted = query
            .str("sort")
            .map(|sort| format!("&sort={}", query_value(sort)))
            .unwrap_or_default();
        let next = (offset + limit < page.total).then(|| {
            format!(
                "{base}&query={}{sorted}&offset={}{}",
                query_value(text),
                offset + limit,
                mode_suffix(mode)
            )
        });
        return Ok(json_page(&Page {
            count: results.len(),
            total_count: Some(page.total),
            results,
            next,
        }));
    }

    HttpMetrics::inc(&state.metrics.doc_list);
    let start = match (query.str("afterKey"), query.str("startKey")) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid("give ?afterKey or ?startKey, not both"));
        }
        (Some(after), None) => Bound::Excluded(format!("{prefix}{after}")),
        (None, Some(start)) => Bound::Included(format!("{prefix}{start}")),
        (None, None) => Bound::Unbounded,
    };
    let (rows, _) = state
        .node
        .list_range(
            prefix.as_bytes(),
            start.as_ref().map(|k| k.as_bytes()),
            mode,
            limit as usize,
        )
        .await?;
    // A full page may have more behind it; a short one is the end.
    let next = match rows.last() {
        Some((last, _)) if rows.len() as u64 >= limit => {
            let after = String::from_utf8_lossy(&last[prefix.len()..]);
            Some(format!(
                "{base}&afterKey={}{}",
                query_value(&after),
                mode_suffix(mode)
            ))
        }
        _ => None,
    };
    let results = items(collection, &prefix, &rows);
    Ok(json_page(&Page {
        count: results.len(),
        total_count: None,
        results,
        next,
    }))
}

/// Anything else below a document (the list of refs, events, relations): not kept, so not
/// served.
pub(crate) async fn unsupported(uri: Uri) -> ApiError {
    not_found(format!(
        "{} is not served: refs history, events and relations are not supported",
        uri.path()
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn path(uri: &str) -> Result<(String, Option<String>), String> {
        let uri: Uri = uri.parse().unwrap();
        DocPath::parse(&uri)
            .map(|p| (p.collection, p.key))
            .map_err(|e| e.0.message)
    }

    #[test]
    fn paths_are_percent_decoded_and_checked() {
        assert_eq!(path("/v0/users"), Ok(("users".into(), None)));
        assert_eq!(
            path("/v0/users/al%20ice"),
            Ok(("users".into(), Some("al ice".into())))
        );
        assert_eq!(
            path("/v0/users/a%2Fb"),
            Ok(("users".into(), Some("a/b".into())))
        );
        assert!(path("/v0/").unwrap_err().contains("missing collection"));
        assert!(path("/v0/a%2Fb").unwrap_err().contains("'/'"));
        assert!(
            path("/v0/users/")
                .unwrap_err()
                .contains("missing document key")
        );
        assert!(path("/v0/users/%FF").unwrap_err().contains("UTF-8"));
    }

    fn headers(pairs: &[(&'static str, &'static str)]) -> HeaderMap {
        let mut h = HeaderMap::new();
        for (name, value) in pairs {
            h.insert(*name, HeaderValue::from_static(value));
        }
        h
    }

    #[test]
    fn preconditions_read_refs_and_stars() {
        let p = |pairs: &[(&'static str, &'static str)]| precondition(&headers(pairs));
        assert_eq!(p(&[]).unwrap(), Precondition::None);
        assert_eq!(p(&[("if-match", "\"12\"")]).unwrap(), Precondition::Ref(12));
        assert_eq!(p(&[("if-match", "W/\"7\"")]).unwrap(), Precondition::Ref(7));
        assert_eq!(p(&[("if-match", "7")]).unwrap(), Precondition::Ref(7));
        assert_eq!(p(&[("if-match", "*")]).unwrap(), Precondition::Exists);
        assert_eq!(p(&[("if-none-match", "*")]).unwrap(), Precondition::Absent);
        assert!(p(&[("if-match", "\"a\"")]).is_err());
        assert!(p(&[("if-match", "\"1\", \"2\"")]).is_err());
        assert!(p(&[("if-none-match", "\"3\"")]).is_err());
        assert!(p(&[("if-match", "1"), ("if-none-match", "*")]).is_err());
    }

    #[test]
    fn locations_escape_segments_and_documents_are_objects() {
        assert_eq!(
            ref_location("users", "a b/c", 9),
            "/v0/users/a%20b%2Fc/refs/9"
        );
        assert_eq!(etag(42), HeaderValue::from_static("\"42\""));
        assert!(is_document(b" {\"a\": 1}"));
        assert!(!is_document(b"[1]"));
        assert!(!is_document(b"{\"a\":"));
        assert!(!is_document(b"plain text"));
    }
}
