//! The web console: `/ui`, a page of plain HTML, CSS and JavaScript built into the binary
//! (no CDN, nothing fetched at build or run time), and the few JSON endpoints under `/v1/ui/`
//! it reads besides the node's own APIs. Every endpoint checks the caller's ACL token as its
//! neighbours do; the page sends the token in `X-Consul-Token`, never in a URL.
//!
//! A page served by one node reads the per-node endpoints (`/v1/ui/node`, `/v1/ui/figures`)
//! of the others straight from the browser. Those two answer cross-origin requests, but only
//! from the origins of this cluster's own nodes (`http(s)://` and a member's advertised HTTP
//! address), so no other site can read them through a visitor's browser.

use crate::access::Access;
use crate::{ApiError, AppState};
use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use trireme_cluster::{ReadMode, ShardEvent};
use trireme_types::{
    HashAnswer, HashRead, ListAnswer, ListRead, SetAnswer, SetRead, ShardId, SortedSetAnswer,
    SortedSetRead, ValueKind, ZRange,
};

/// One file of the page.
struct Asset {
    path: &'static str,
    mime: &'static str,
    body: &'static [u8],
    /// A hash of the body, so a browser revalidates with one small request.
    etag: u64,
}

/// FNV-1a over the bytes, at compile time.
const fn fnv(bytes: &[u8]) -> u64 {
    let mut hash = 0xcbf2_9ce4_8422_2325_u64;
    let mut i = 0;
    while i < bytes.len() {
        hash ^= bytes[i] as u64;
        hash = hash.wrapping_mul(0x0100_0000_01b3);
        i += 1;
    }
    hash
}

macro_rules! asset {
    ($path:literal, $mime:literal) => {
        Asset {
            path: $path,
            mime: $mime,
            body: include_bytes!(concat!("../../ui/", $path)),
            etag: fnv(include_bytes!(concat!("../../ui/", $path))),
        }
    };
}

/// Every file of the page, by its path under `/ui/`.
const ASSETS: [Asset; 9] = [
    asset!("index.html", "text/html; charset=utf-8"),
    asset!("console.css", "text/css; charset=utf-8"),
    asset!("js/app.js", "text/javascript; charset=utf-8"),
    asset!("js/api.js", "text/javascript; charset=utf-8"),
    asset!("js/overview.js", "text/javascript; charset=utf-8"),
    asset!("js/shards.js", "text/javascript; charset=utf-8"),
    asset!("js/keys.js", "text/javascript; charset=utf-8"),
    asset!("js/figures.js", "text/javascript; charset=utf-8"),
    asset!("js/dom.js", "text/javascript; charset=utf-8"),
];

/// What the page may load and where it may connect: its own files only, and the cluster's
/// nodes over HTTP(S) for their figures. No inline script, no frames of it elsewhere.
const CONTENT_SECURITY_POLICY: &str = "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self' http: https:; frame-ancestors 'none'; base-uri 'none'; form-action 'none'";

/// The console's routes, merged into the node's router when `[ui] enabled` (the default).
pub(crate) fn routes() -> Router<AppState> {
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/{*path}", get(asset))
        .route("/v1/ui/access", get(access_of))
        .route("/v1/ui/node", get(node_summary).options(preflight))
        .route("/v1/ui/figures", get(figures).options(preflight))
        .route("/v1/ui/kv/{*key}", get(key_details))
        .route("/v1/ui/shards/{shard}/history", get(shard_history))
}

async fn index(headers: HeaderMap) -> Response {
    serve(&ASSETS[0], &headers)
}

async fn asset(Path(path): Path<String>, headers: HeaderMap) -> Response {
    match ASSETS.iter().find(|a| a.path == path) {
        Some(asset) => serve(asset, &headers),
        None => ApiError(trireme_types::TriremeError::new(
            trireme_types::ErrorCode::NotFound,
            format!("the console has no file {path:?}"),
        ))
        .into_response(),
    }
}

/// A file with its type, its ETag (304 when the browser has it already) and the headers that
/// keep the page to itself.
fn serve(asset: &Asset, headers: &HeaderMap) -> Response {
    let etag = format!("\"{:016x}\"", asset.etag);
    let fresh = headers
        .get(header::IF_NONE_MATCH)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|v| v.split(',').any(|tag| tag.trim() == etag));
    let mut response = if fresh {
        StatusCode::NOT_MODIFIED.into_response()
    } else {
        ([(header::CONTENT_TYPE, asset.mime)], asset.body).into_response()
    };
    let h = response.headers_mut();
    if let Ok(value) = HeaderValue::from_str(&etag) {
        h.insert(header::ETAG, value);
    }
    h.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-cache"));
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CONTENT_SECURITY_POLICY),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("no-referrer"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    response
}

/// `GET /v1/ui/access`: whether ACLs are on and what the caller's token may do, so the page
/// shows the login when it must and leaves out what it may not read. It grants nothing: every
/// request the page makes is checked again by its own endpoint. A secret matching no token
/// is a 403 (`ACL not found`), as everywhere.
#[derive(Debug, Serialize)]
struct AccessDoc {
    acl: bool,
    anonymous: bool,
    accessor_id: Option<String>,
    operator_read: bool,
    operator_write: bool,
    acl_read: bool,
    /// `key:list` on the whole keyspace (the keys view starts at the top).
    key_list: bool,
}

async fn access_of(State(state): State<AppState>, access: Access) -> Json<AccessDoc> {
    let can = access.can();
    Json(AccessDoc {
        acl: state.node.acl_enabled(),
        anonymous: matches!(access.0, trireme_cluster::Caller::Anonymous(_)),
        accessor_id: access.0.accessor_id().map(str::to_owned),
        operator_read: can.operator_read(),
        operator_write: can.operator_write(),
        acl_read: can.acl_read(),
        key_list: can.key_list(b""),
    })
}

/// The `Access-Control-Allow-Origin` to answer `headers` with: the request's origin when it is
/// one of this cluster's nodes, else none (the browser then keeps the answer from the page).
fn allowed_origin(state: &AppState, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    let text = origin.to_str().ok()?;
    let (scheme, host) = text.split_once("://")?;
    if scheme != "http" && scheme != "https" {
        return None;
    }
    let node = &state.node;
    let member = std::iter::once(node.me().http_addr.clone())
        .chain(node.nodes().into_iter().map(|n| n.node.http_addr))
        .any(|addr| addr.eq_ignore_ascii_case(host));
    member.then(|| origin.clone())
}

/// Adds the CORS headers of an answer to a node of the cluster.
fn with_cors(state: &AppState, headers: &HeaderMap, mut response: Response) -> Response {
    if let Some(origin) = allowed_origin(state, headers) {
        let h = response.headers_mut();
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
        h.insert(header::VARY, HeaderValue::from_static("Origin"));
    }
    response
}

/// `OPTIONS` of the per-node endpoints: a browser's question whether a page of another node
/// may send its token here. 204 for the cluster's own origins, 403 with a message otherwise.
async fn preflight(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(origin) = allowed_origin(&state, &headers) else {
        return ApiError(trireme_types::TriremeError::new(
            trireme_types::ErrorCode::PermissionDenied,
            "cross-origin requests are answered only for pages of this cluster's nodes",
        ))
        .into_response();
    };
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
    h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    h.insert(
        header::ACCESS_CONTROL_ALLOW_METHODS,
        HeaderValue::from_static("GET"),
    );
    h.insert(
        header::ACCESS_CONTROL_ALLOW_HEADERS,
        HeaderValue::from_static("X-Consul-Token"),
    );
    h.insert(
        header::ACCESS_CONTROL_MAX_AGE,
        HeaderValue::from_static("600"),
    );
    h.insert(header::VARY, HeaderValue::from_static("Origin"));
    response
}

/// `GET /v1/ui/node`: this node as only it knows itself: version, health, uptime, disk and
/// memory, the shards it holds and leads, and how far behind each follower of those it leads
/// is. `operator:read`, like `/v1/cluster/status`.
#[derive(Debug, Serialize)]
struct NodeDoc {
    node: String,
    cluster: String,
    http: String,
    version: Option<trireme_types::version::Version>,
    uptime_secs: u64,
    healthy: bool,
    all_shards_led: bool,
    storage_ok: bool,
    /// Region, zone and rack labels; nodes have no region label yet, so it is always null.
    region: Option<String>,
    zone: Option<String>,
    rack: Option<String>,
    /// Free bytes on the data directory's file system; null where the system does not say.
    disk_free_bytes: Option<u64>,
    /// Writes are refused once less than this is free.
    disk_min_free_bytes: u64,
    log_bytes: u64,
    table_bytes: u64,
    /// Resident memory of the process; null where `/proc` does not say.
    memory_rss_bytes: Option<u64>,
    replicas: u32,
    leaders: u32,
    /// Per shard held here: `[shard, role]`.
    roles: Vec<(u32, String)>,
    /// Per shard led here: each follower's name and how many log entries it is behind.
    lag: Vec<LedShard>,
}

#[derive(Debug, Serialize)]
struct LedShard {
    shard: u32,
    followers: Vec<(String, u64)>,
}

async fn node_summary(
    State(state): State<AppState>,
    headers: HeaderMap,
    access: Access,
) -> Response {
    let answer = access.operator_read().map(|()| Json(summary(&state)));
    with_cors(&state, &headers, answer.into_response())
}

fn summary(state: &AppState) -> NodeDoc {
    let node = &state.node;
    let me = node.me();
    let labels = node.nodes().into_iter().find(|n| n.node.name == me.name);
    let health = node.health();
    let replicas = node.replica_stats();
    let storage = node.storage();
    let free = storage.free_disk_bytes();
    NodeDoc {
        node: me.name.clone(),
        cluster: node.config().cluster_name.clone(),
        http: me.http_addr.clone(),
        version: node.node_version(node.node_id()),
        uptime_secs: health.uptime_secs,
        healthy: health.all_shards_led && health.storage_ok && !node.is_stopping(),
        all_shards_led: health.all_shards_led,
        storage_ok: health.storage_ok,
        region: None,
        zone: labels.as_ref().and_then(|l| l.zone.clone()),
        rack: labels.as_ref().and_then(|l| l.rack.clone()),
        disk_free_bytes: (free != u64::MAX).then_some(free),
        disk_min_free_bytes: node.config().storage.min_free_bytes,
        log_bytes: storage.log_disk_bytes(),
        table_bytes: storage.table_disk_bytes(),
        memory_rss_bytes: resident_bytes(),
        replicas: replicas.len() as u32,
        leaders: replicas.iter().filter(|r| r.role == "Leader").count() as u32,
        roles: replicas
            .iter()
            .map(|r| (r.shard.0, r.role.clone()))
            .collect(),
        lag: replicas
            .into_iter()
            .filter(|r| r.role == "Leader")
            .map(|r| LedShard {
                shard: r.shard.0,
                followers: r.follower_lag,
            })
            .collect(),
    }
}

/// The process's resident memory, from `/proc/self/status` (Linux).
fn resident_bytes() -> Option<u64> {
    let status = std::fs::read_to_string("/proc/self/status").ok()?;
    let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Query of `GET /v1/ui/figures`.
#[derive(Debug, Deserialize)]
struct FiguresQuery {
    /// Only samples after this one (the `seq` of the last sample the page has).
    since: Option<String>,
}

/// `GET /v1/ui/figures[?since=SEQ]`: this node's samples of the last 15 minutes, one a
/// second, oldest first (see `figures.rs`). `operator:read`, like `/metrics`.
async fn figures(
    State(state): State<AppState>,
    headers: HeaderMap,
    access: Access,
    Query(query): Query<FiguresQuery>,
) -> Response {
    let answer = (|| {
        access.operator_read()?;
        let since = match query.since.as_deref() {
            None | Some("") => 0,
            Some(text) => text.parse::<u64>().map_err(|_| {
                ApiError::invalid(format!(
                    "since must be a sample number (a whole number), got {text:?}"
                ))
            })?,
        };
        Ok::<_, ApiError>(Json(serde_json::json!({
            "node": state.node.me().name,
            "every_ms": 1000,
            "samples": state.figures.since(since),
        })))
    })();
    with_cors(&state, &headers, answer.into_response())
}

/// How many members of a collection the keys view shows.
const FIRST_MEMBERS: u64 = 20;

/// `GET /v1/ui/kv/{key}`: what the Consul API cannot say about a key: its Redis type, and for
/// a collection its size and first members (a hash's fields and values, a set's members in
/// order, a list's first elements, a sorted set's lowest scores). `key:read` on the key, as
/// a read of it. 404 for a missing key.
#[derive(Debug, Serialize)]
struct KeyDoc {
    key: String,
    /// `string`, `hash`, `set`, `list` or `zset`, as Redis's `TYPE` says.
    kind: &'static str,
    /// Bytes of a string's value; members, fields or elements of a collection.
    size: u64,
    flags: u64,
    create_index: u64,
    modify_index: u64,
    /// The first members, as text (bytes that are not UTF-8 shown replaced).
    members: Vec<Member>,
}

#[derive(Debug, Serialize)]
struct Member {
    /// A hash's field, a set's or sorted set's member, a list's element.
    name: String,
    /// A hash field's value.
    #[serde(skip_serializing_if = "Option::is_none")]
    value: Option<String>,
    /// A sorted set member's score.
    #[serde(skip_serializing_if = "Option::is_none")]
    score: Option<f64>,
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn member(name: &[u8]) -> Member {
    Member {
        name: text(name),
        value: None,
        score: None,
    }
}

async fn key_details(
    State(state): State<AppState>,
    access: Access,
    Path(key): Path<String>,
) -> Result<Json<KeyDoc>, ApiError> {
    let key = key.into_bytes();
    access.key_read(&key)?;
    let node = &state.node;
    let mode = ReadMode::Default;
    let (record, _) = node.get(&key, mode).await?;
    let Some(record) = record else {
        return Err(ApiError(trireme_types::TriremeError::new(
            trireme_types::ErrorCode::NotFound,
            format!("no key {:?}", text(&key)),
        )));
    };
    let unexpected = || ApiError::invalid("the key changed type while it was read; read it again");
    let (size, members) = match record.kind {
        ValueKind::String => (record.value.len() as u64, Vec::new()),
        ValueKind::Hash => {
            let size = match node.hash_read(&key, HashRead::Len, mode).await?.0 {
                Ok(HashAnswer::Count(n)) => n,
                _ => return Err(unexpected()),
            };
            let first = HashRead::Fields {
                after: None,
                limit: FIRST_MEMBERS,
            };
            let members = match node.hash_read(&key, first, mode).await?.0 {
                Ok(HashAnswer::Pairs(pairs)) => pairs
                    .iter()
                    .map(|(field, value)| Member {
                        value: Some(text(value)),
                        ..member(field)
                    })
                    .collect(),
                _ => return Err(unexpected()),
            };
            (size, members)
        }
        ValueKind::Set => {
            let size = match node.set_read(&key, SetRead::Len, mode).await?.0 {
                Ok(SetAnswer::Count(n)) => n,
                _ => return Err(unexpected()),
            };
            let first = SetRead::Members {
                after: None,
                limit: FIRST_MEMBERS,
            };
            let members = match node.set_read(&key, first, mode).await?.0 {
                Ok(SetAnswer::Members(all)) => all.iter().map(|m| member(m)).collect(),
                _ => return Err(unexpected()),
            };
            (size, members)
        }
        ValueKind::List => {
            let size = match node.list_read(&key, ListRead::Len, mode).await?.0 {
                Ok(ListAnswer::Count(n)) => n,
                _ => return Err(unexpected()),
            };
            let first = ListRead::Range {
                start: 0,
                stop: FIRST_MEMBERS as i64 - 1,
            };
            let members = match node.list_read(&key, first, mode).await?.0 {
                Ok(ListAnswer::Elements(all)) => all.iter().map(|m| member(m)).collect(),
                _ => return Err(unexpected()),
            };
            (size, members)
        }
        ValueKind::SortedSet => {
            let size = match node
                .sorted_set_read(&key, SortedSetRead::Len, mode)
                .await?
                .0
            {
                Ok(SortedSetAnswer::Count(n)) => n,
                _ => return Err(unexpected()),
            };
            let first = SortedSetRead::Range {
                range: ZRange::Rank {
                    start: 0,
                    stop: FIRST_MEMBERS as i64 - 1,
                },
                reverse: false,
                offset: 0,
                limit: FIRST_MEMBERS,
            };
            let members = match node.sorted_set_read(&key, first, mode).await?.0 {
                Ok(SortedSetAnswer::Pairs(pairs)) => pairs
                    .iter()
                    .map(|(name, score)| Member {
                        score: Some(score.get()),
                        ..member(name)
                    })
                    .collect(),
                _ => return Err(unexpected()),
            };
            (size, members)
        }
    };
    Ok(Json(KeyDoc {
        key: text(&key),
        kind: record.kind.type_name(),
        size,
        flags: record.flags,
        create_index: record.create_index,
        modify_index: record.modify_index,
        members,
    }))
}

/// `GET /v1/ui/shards/{shard}/history`: the changes to the shard's placement this node has
/// applied since it started (moves, their steps, splits), oldest first. The cluster keeps
/// no such history: each node keeps its own in memory, bounded, and loses it at a restart.
/// `operator:read`.
async fn shard_history(
    State(state): State<AppState>,
    access: Access,
    Path(shard): Path<String>,
) -> Result<Json<serde_json::Value>, ApiError> {
    access.operator_read()?;
    let shard: u32 = shard
        .parse()
        .map_err(|_| ApiError::invalid(format!("a shard is a number, got {shard:?}")))?;
    if shard >= state.node.shard_map().shard_count() {
        return Err(ApiError(trireme_types::TriremeError::new(
            trireme_types::ErrorCode::NotFound,
            format!("there is no shard {shard}"),
        )));
    }
    let events: Vec<ShardEvent> = state.node.shard_history(ShardId(shard));
    Ok(Json(serde_json::json!({
        "node": state.node.me().name,
        "shard": shard,
        "since_ms": trireme_cluster::now_ms().saturating_sub(state.node.uptime().as_millis() as u64),
        "events": events,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_asset_is_there_and_typed() {
        for asset in &ASSETS {
            assert!(!asset.body.is_empty(), "{} is empty", asset.path);
            let ext = asset.path.rsplit('.').next().unwrap();
            let expected = match ext {
                "html" => "text/html",
                "css" => "text/css",
                "js" => "text/javascript",
                other => panic!("unexpected asset type {other}"),
            };
            assert!(asset.mime.starts_with(expected), "{}", asset.path);
        }
        let index = std::str::from_utf8(ASSETS[0].body).unwrap();
        // Every script and stylesheet the page names is served, and nothing from elsewhere.
        for asset in &ASSETS[1..] {
            let named = format!("/ui/{}", asset.path);
            let imported = ASSETS
                .iter()
                .filter_map(|a| std::str::from_utf8(a.body).ok())
                .any(|body| {
                    body.contains(&named) || body.contains(&format!("./{}", &asset.path[3..]))
                });
            assert!(imported, "{} is served but nothing loads it", asset.path);
        }
        for body in ASSETS
            .iter()
            .filter_map(|a| std::str::from_utf8(a.body).ok())
        {
            // SVG's namespace is a name, not an address anything is fetched from.
            let body = body.replace("http://www.w3.org/2000/svg", "");
            assert!(
                !body.contains("http://") && !body.contains("https://"),
                "an asset names an address outside the node"
            );
        }
        assert!(index.contains("/ui/js/app.js"));
    }

    #[test]
    fn etags_change_with_the_body() {
        assert_ne!(fnv(b"a"), fnv(b"b"));
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        let etags: std::collections::BTreeSet<u64> = ASSETS.iter().map(|a| a.etag).collect();
        assert_eq!(etags.len(), ASSETS.len());
    }
}
