//! The web console: `/ui`, a page of plain HTML, CSS and JavaScript built into the binary
//! (no CDN, nothing fetched at build or run time), and the few JSON endpoints under `/v1/ui/`
//! it reads besides the node's own APIs. Every endpoint checks the caller's ACL token as its
//! neighbours do; the page sends the token in `X-Consul-Token`, never in a URL.
//!
//! A page served by one node reads the per-node endpoints (`/v1/ui/node`, `/v1/ui/figures`)
//! of the others straight from the browser. Those two answer cross-origin requests, but only
//! from the origins of this cluster's own nodes (the listener's scheme and a member's
//! advertised HTTP address, default ports filled in), so no other site can read them through
//! a visitor's browser; the page's Content-Security-Policy lets it connect to those origins
//! and no others.

use crate::access::Access;
use crate::{ApiError, AppState};
use axum::Json;
use axum::Router;
use axum::extract::{Path, Query, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use serde::{Deserialize, Serialize};
use std::ops::Bound;
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
/// nodes for their figures (`connect-src`, filled in per answer from the members'
/// advertised addresses). No inline script, no frames of it elsewhere.
const CONTENT_SECURITY_POLICY: [&str; 2] = [
    "default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'",
    "; frame-ancestors 'none'; base-uri 'none'; form-action 'none'",
];

/// The console's routes, merged into the node's router when `[ui] enabled` (the default).
/// The two per-node endpoints a page of another node reads go through [`cors`], so that
/// every answer of theirs (a refusal of the token too) carries the CORS headers.
pub(crate) fn routes(state: &AppState) -> Router<AppState> {
    let cors = middleware::from_fn_with_state(state.clone(), cors);
    Router::new()
        .route("/ui", get(index))
        .route("/ui/", get(index))
        .route("/ui/{*path}", get(asset))
        .route("/v1/ui/access", get(access_of))
        .route(
            "/v1/ui/node",
            get(node_summary).options(preflight).layer(cors.clone()),
        )
        .route(
            "/v1/ui/figures",
            get(figures).options(preflight).layer(cors),
        )
        .route("/v1/ui/keys", get(list_keys))
        .route("/v1/ui/kv/{*key}", get(key_details))
        .route("/v1/ui/shards/{shard}/history", get(shard_history))
}

async fn index(State(state): State<AppState>, headers: HeaderMap) -> Response {
    serve(&state, &ASSETS[0], &headers)
}

async fn asset(
    State(state): State<AppState>,
    Path(path): Path<String>,
    headers: HeaderMap,
) -> Response {
    match ASSETS.iter().find(|a| a.path == path) {
        Some(asset) => serve(&state, asset, &headers),
        None => ApiError(trireme_types::TriremeError::new(
            trireme_types::ErrorCode::NotFound,
            format!("the console has no file {path:?}"),
        ))
        .into_response(),
    }
}

/// The page's Content-Security-Policy: [`CONTENT_SECURITY_POLICY`] with the origins of the
/// cluster's nodes in `connect-src`.
fn content_security_policy(state: &AppState) -> String {
    let mut policy = CONTENT_SECURITY_POLICY[0].to_string();
    for origin in member_origins(state) {
        policy.push(' ');
        policy.push_str(&origin.to_string());
    }
    policy.push_str(CONTENT_SECURITY_POLICY[1]);
    policy
}

/// A file with its type, its ETag (304 when the browser has it already) and the headers that
/// keep the page to itself.
fn serve(state: &AppState, asset: &Asset, headers: &HeaderMap) -> Response {
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
    // Every origin in it is made of checked characters (see `Origin::of_addr`).
    if let Ok(policy) = HeaderValue::from_str(&content_security_policy(state)) {
        h.insert(header::CONTENT_SECURITY_POLICY, policy);
    }
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

/// A web origin: scheme, host (lower case; an IPv6 address in brackets) and port.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Origin {
    https: bool,
    host: String,
    port: u16,
}

impl Origin {
    /// An `Origin` header's value: `http://host` or `https://host:port` (a browser leaves
    /// the default port out); `None` for anything else (`null`, another scheme, a path).
    fn parse(text: &str) -> Option<Origin> {
        let (scheme, rest) = text.split_once("://")?;
        let https = match scheme.to_ascii_lowercase().as_str() {
            "http" => false,
            "https" => true,
            _ => return None,
        };
        Origin::of_addr(https, rest)
    }

    /// The origin of a page at `addr` (`host`, `host:port`, `[v6]:port`), as an advertised
    /// HTTP address is written, with the scheme's default port when it names none. Only
    /// the characters of host names and addresses are taken, so an origin is safe to put
    /// in a header.
    fn of_addr(https: bool, addr: &str) -> Option<Origin> {
        let default = if https { 443 } else { 80 };
        let (host, port) = if let Some(rest) = addr.strip_prefix('[') {
            let (v6, after) = rest.split_once(']')?;
            if v6.is_empty()
                || !v6
                    .chars()
                    .all(|c| c.is_ascii_hexdigit() || c == ':' || c == '.')
            {
                return None;
            }
            (format!("[{v6}]"), after)
        } else {
            let cut = addr.find(':').unwrap_or(addr.len());
            let host = &addr[..cut];
            let ok = |c: char| c.is_ascii_alphanumeric() || c == '.' || c == '-' || c == '_';
            if host.is_empty() || !host.chars().all(ok) {
                return None;
            }
            (host.to_string(), &addr[cut..])
        };
        let port = match after_colon(port)? {
            None => default,
            Some(digits) => digits.parse().ok()?,
        };
        Some(Origin {
            https,
            host: host.to_ascii_lowercase(),
            port,
        })
    }
}

/// What follows a host: nothing (`Some(None)`) or `:PORT` (`Some(Some(PORT))`).
fn after_colon(rest: &str) -> Option<Option<&str>> {
    if rest.is_empty() {
        return Some(None);
    }
    let digits = rest.strip_prefix(':')?;
    (!digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit())).then_some(Some(digits))
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let scheme = if self.https { "https" } else { "http" };
        write!(f, "{scheme}://{}:{}", self.host, self.port)
    }
}

/// The origins of the pages of this cluster's nodes that are not removed: the listener's
/// scheme (`https` with `[tls]`) and each one's advertised HTTP address.
fn member_origins(state: &AppState) -> Vec<Origin> {
    let mut out: Vec<Origin> = Vec::new();
    for origin in state
        .node
        .member_http_addrs()
        .iter()
        .filter_map(|addr| Origin::of_addr(state.https, addr))
    {
        if !out.contains(&origin) {
            out.push(origin);
        }
    }
    out
}

/// The `Access-Control-Allow-Origin` to answer `headers` with: the request's origin when it is
/// one of this cluster's nodes, else none (the browser then keeps the answer from the page).
fn allowed_origin(state: &AppState, headers: &HeaderMap) -> Option<HeaderValue> {
    let origin = headers.get(header::ORIGIN)?;
    let wanted = Origin::parse(origin.to_str().ok()?)?;
    member_origins(state)
        .contains(&wanted)
        .then(|| origin.clone())
}

/// The CORS headers of the per-node endpoints, on every answer they give (the handler's, a
/// refusal of the caller's token, a preflight): `Vary: Origin` always, since the answer
/// depends on it, and `Access-Control-Allow-Origin` for a page of one of the cluster's nodes.
async fn cors(State(state): State<AppState>, request: Request, next: Next) -> Response {
    let origin = allowed_origin(&state, request.headers());
    let mut response = next.run(request).await;
    let h = response.headers_mut();
    h.append(header::VARY, HeaderValue::from_static("Origin"));
    if let Some(origin) = origin {
        h.insert(header::ACCESS_CONTROL_ALLOW_ORIGIN, origin);
    }
    response
}

/// `OPTIONS` of the per-node endpoints: a browser's question whether a page of another node
/// may send its token here. 204 for the cluster's own origins, 403 with a message otherwise
/// ([`cors`] adds the origin).
async fn preflight(State(state): State<AppState>, headers: HeaderMap) -> Response {
    if allowed_origin(&state, &headers).is_none() {
        return ApiError(trireme_types::TriremeError::new(
            trireme_types::ErrorCode::PermissionDenied,
            "cross-origin requests are answered only for pages of this cluster's nodes",
        ))
        .into_response();
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    let h = response.headers_mut();
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
    response
}

/// `GET /v1/ui/node`: this node as only it knows itself: version, health, uptime, disk and
/// memory, the shards it holds and leads, how far behind each follower of those it leads is,
/// and the snapshots it is sending them. `operator:read`, like `/v1/cluster/status`.
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
    /// Region, zone and rack labels (null where the node has none).
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
    /// Per shard led here: the snapshots being sent, so a move shows its progress in bytes.
    snapshots: Vec<SnapshotSent>,
}

#[derive(Debug, Serialize)]
struct LedShard {
    shard: u32,
    followers: Vec<(String, u64)>,
}

#[derive(Debug, Serialize)]
struct SnapshotSent {
    shard: u32,
    /// The follower's name, as in `lag`.
    target: String,
    /// Bytes the follower has acknowledged.
    sent: u64,
    total: u64,
}

async fn node_summary(
    State(state): State<AppState>,
    access: Access,
) -> Result<Json<NodeDoc>, ApiError> {
    access.operator_read()?;
    Ok(Json(summary(&state)))
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
        healthy: crate::routes::status::serving(node, &health),
        all_shards_led: health.all_shards_led,
        storage_ok: health.storage_ok,
        region: node.config().region.clone(),
        zone: labels.as_ref().and_then(|l| l.zone.clone()),
        rack: labels.as_ref().and_then(|l| l.rack.clone()),
        disk_free_bytes: (free != u64::MAX).then_some(free),
        disk_min_free_bytes: node.config().storage.min_free_bytes,
        log_bytes: storage.log_disk_bytes(),
        table_bytes: storage.table_disk_bytes(),
        memory_rss_bytes: trireme_types::process::resident_bytes(),
        replicas: replicas.len() as u32,
        leaders: replicas.iter().filter(|r| r.role == "Leader").count() as u32,
        roles: replicas
            .iter()
            .map(|r| (r.shard.0, r.role.clone()))
            .collect(),
        snapshots: replicas
            .iter()
            .filter(|r| r.role == "Leader")
            .flat_map(|r| {
                r.snapshots
                    .iter()
                    .map(|(target, sent, total)| SnapshotSent {
                        shard: r.shard.0,
                        target: target.clone(),
                        sent: *sent,
                        total: *total,
                    })
            })
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

/// Query of `GET /v1/ui/figures`.
#[derive(Debug, Deserialize)]
struct FiguresQuery {
    /// Only samples after this one (the `seq` of the last sample the page has).
    since: Option<String>,
    /// The series the page's samples are of (`boot_ms` of the answer it had them from).
    boot: Option<String>,
}

/// `GET /v1/ui/figures[?since=SEQ&boot=MS]`: this node's samples of the last 15 minutes, one
/// a second, oldest first (see `figures.rs`), with `boot_ms`, which names this process's
/// series: a page whose samples are of another one (the node restarted) gets every sample
/// kept here and starts again from them. `operator:read`, like `/metrics`.
async fn figures(
    State(state): State<AppState>,
    access: Access,
    Query(query): Query<FiguresQuery>,
) -> Result<Json<serde_json::Value>, ApiError> {
    access.operator_read()?;
    let number = |name: &str, text: Option<&str>| match text {
        None | Some("") => Ok(None),
        Some(text) => text
            .parse::<u64>()
            .map(Some)
            .map_err(|_| ApiError::invalid(format!("{name} must be a whole number, got {text:?}"))),
    };
    let since = number("since (a sample number)", query.since.as_deref())?.unwrap_or(0);
    let boot = number("boot (a series' boot_ms)", query.boot.as_deref())?;
    Ok(Json(serde_json::json!({
        "node": state.node.me().name,
        "boot_ms": state.figures.boot_ms(),
        "every_ms": crate::figures::EVERY.as_millis() as u64,
        "samples": state.figures.since(since, boot),
    })))
}

/// Entries a page of the keys view holds unless it asks for fewer.
const KEYS_PAGE: usize = 200;
/// The most entries a page may ask for.
const KEYS_MOST: usize = 1_000;
/// Rows one listing reads before it answers with what it has (and where to go on): a
/// token may read few of the keys under a prefix, and a page then takes several reads.
const KEYS_READ_MOST: usize = 10_000;

/// One entry of the keys view: a key, or a folder (every key that goes on past the
/// separator after the prefix, shown once, as Consul's `?keys&separator=` shows it).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
struct KeyEntry {
    key: String,
    folder: bool,
}

/// `GET /v1/ui/keys`'s answer.
#[derive(Debug, Serialize)]
struct KeysDoc {
    prefix: String,
    entries: Vec<KeyEntry>,
    /// Where the next page starts (its `from`); null when this page is the last.
    next: Option<String>,
}

/// A page of a keys listing, put together from rows read in key order: keys one level
/// below the prefix, and folders, each read past once it is seen.
struct Listing<'a> {
    prefix: &'a [u8],
    separator: &'a [u8],
    limit: usize,
    entries: Vec<KeyEntry>,
    /// The key to read from next (inclusive); `None` once nothing is left.
    next: Option<Vec<u8>>,
}

impl<'a> Listing<'a> {
    fn new(prefix: &'a [u8], separator: &'a [u8], from: Option<Vec<u8>>, limit: usize) -> Self {
        Listing {
            prefix,
            separator,
            limit,
            entries: Vec::new(),
            next: Some(from.unwrap_or_else(|| prefix.to_vec())),
        }
    }

    /// Where to read from, while the page has room and something may be left.
    fn wanted(&self) -> Option<&[u8]> {
        self.next
            .as_deref()
            .filter(|_| self.entries.len() < self.limit)
    }

    /// How many rows to ask for: the room left, and one more to learn whether more follow.
    fn ask(&self) -> usize {
        self.limit - self.entries.len() + 1
    }

    /// The folder `key` is in, one level below the prefix, if it is in one.
    fn folder_of<'k>(&self, key: &'k [u8]) -> Option<&'k [u8]> {
        super::kv::folder_of(key, self.prefix.len(), self.separator)
    }

    /// Takes the keys of rows read from [`Listing::wanted`] on, in key order; `all` is false
    /// when the read answered fewer rows than asked (there are no more). Keys the caller may
    /// not read are passed over. A folder ends the batch: the next read starts after it.
    fn take(&mut self, keys: &[axum::body::Bytes], all: bool, readable: impl Fn(&[u8]) -> bool) {
        // Right after `key`: the key with a zero byte appended.
        let after = |key: &[u8]| {
            let mut after = Vec::with_capacity(key.len() + 1);
            after.extend_from_slice(key);
            after.push(0);
            after
        };
        for (i, key) in keys.iter().enumerate() {
            if !readable(key) {
                continue;
            }
            if let Some(folder) = self.folder_of(key) {
                self.entries.push(KeyEntry {
                    key: text(folder),
                    folder: true,
                });
                // Past every key in the folder; a folder of only 0xff bytes ends the space.
                self.next = trireme_types::keys::prefix_end(folder);
                return;
            }
            self.entries.push(KeyEntry {
                key: text(key),
                folder: false,
            });
            if self.entries.len() == self.limit {
                self.next = (i + 1 < keys.len() || all).then(|| after(key));
                return;
            }
        }
        self.next = match keys.last() {
            Some(last) if all => Some(after(last)),
            _ => None,
        };
    }
}

/// `GET /v1/ui/keys?prefix=P[&separator=/][&from=K][&limit=N]`: the keys view's listing,
/// keys only and a page at a time: the keys under `P` one level down, and each folder below
/// once (`separator` `/` by default; empty lists every key), in key order from `from` (the
/// `next` of the page before), at most `limit` (200 by default, at most 1,000). A folder is
/// read past once seen rather than read through, so a prefix over millions of keys in a few
/// folders answers at once; each read asks every shard for one page of rows.
///
/// `key:list` on the prefix, and only keys the caller may read are shown, as
/// `/v1/kv/P?keys&separator=/` does.
async fn list_keys(
    State(state): State<AppState>,
    access: Access,
    uri: Uri,
) -> Result<Json<KeysDoc>, ApiError> {
    let query = crate::query::Query::parse(uri.query());
    let prefix = query.str("prefix").unwrap_or_default().as_bytes().to_vec();
    let separator = query.str("separator").unwrap_or("/").as_bytes().to_vec();
    let from = query.str("from").filter(|f| !f.is_empty());
    let limit = match query.u64("limit")? {
        None => KEYS_PAGE,
        Some(n) if (1..=KEYS_MOST as u64).contains(&n) => n as usize,
        Some(n) => {
            return Err(ApiError::invalid(format!(
                "limit must be from 1 to {KEYS_MOST}, got {n}"
            )));
        }
    };
    access.key_list(&prefix)?;
    let can = access.can();
    let mut listing = Listing::new(
        &prefix,
        &separator,
        from.map(|f| f.as_bytes().to_vec()),
        limit,
    );
    let mut read = 0;
    while let Some(start) = listing.wanted() {
        if read >= KEYS_READ_MOST {
            break;
        }
        let ask = listing.ask();
        let (rows, _) = state
            .node
            .list_range(&prefix, Bound::Included(start), ReadMode::Default, ask)
            .await?;
        read += rows.len();
        let keys: Vec<axum::body::Bytes> = rows.into_iter().map(|(key, _)| key).collect();
        listing.take(&keys, keys.len() >= ask, |k| can.key_read(k));
    }
    Ok(Json(KeysDoc {
        prefix: text(&prefix),
        next: listing.next.as_deref().map(text),
        entries: listing.entries,
    }))
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
            // Modules import each other by a path relative to `js/`: `./api.js`.
            let relative = asset
                .path
                .strip_prefix("js/")
                .map(|name| format!("'./{name}'"));
            let imported = ASSETS
                .iter()
                .filter(|a| a.path != asset.path)
                .filter_map(|a| std::str::from_utf8(a.body).ok())
                .any(|body| {
                    body.contains(&named) || relative.as_ref().is_some_and(|r| body.contains(r))
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
    fn origins_compare_scheme_host_and_port_with_default_ports() {
        let http = |addr: &str| Origin::of_addr(false, addr);
        let parsed = |text: &str| Origin::parse(text);
        // Browsers leave out the default port; an advertised address may name it.
        assert_eq!(parsed("http://db1.internal"), http("db1.internal:80"));
        assert_eq!(parsed("http://DB1.Internal:80"), http("db1.internal"));
        assert_eq!(
            parsed("https://db1.internal"),
            Origin::of_addr(true, "db1.internal:443")
        );
        assert_eq!(parsed("http://127.0.0.1:7700"), http("127.0.0.1:7700"));
        assert_eq!(parsed("http://[::1]:7700"), http("[::1]:7700"));
        assert_ne!(parsed("http://127.0.0.1:7700"), http("127.0.0.1:7710"));
        assert_ne!(parsed("https://127.0.0.1:7700"), http("127.0.0.1:7700"));
        assert_ne!(parsed("http://db1.internal"), http("db1.internal:8080"));
        for refused in [
            "null",
            "ftp://db1:21",
            "http://",
            "http://db1:",
            "http://db1:port",
            "http://db1:7700/path",
            "http://db1 x:7700",
            "http://db1;script-src *",
            "http://[::1",
            "http://a@b:80",
        ] {
            assert_eq!(parsed(refused), None, "{refused}");
        }
        assert_eq!(
            http("Db1.Internal:80").unwrap().to_string(),
            "http://db1.internal:80"
        );
        assert_eq!(
            Origin::of_addr(true, "[::1]:7700").unwrap().to_string(),
            "https://[::1]:7700"
        );
    }

    fn keys(names: &[&str]) -> Vec<axum::body::Bytes> {
        names
            .iter()
            .map(|n| axum::body::Bytes::copy_from_slice(n.as_bytes()))
            .collect()
    }

    fn shown(listing: &Listing<'_>) -> Vec<String> {
        listing
            .entries
            .iter()
            .map(|e| format!("{}{}", e.key, if e.folder { " (folder)" } else { "" }))
            .collect()
    }

    #[test]
    fn a_listing_reads_past_each_folder_and_pages_by_limit() {
        let mut listing = Listing::new(b"app/", b"/", None, 3);
        assert_eq!(listing.wanted(), Some(&b"app/"[..]));
        assert_eq!(listing.ask(), 4);
        // A folder ends the batch: the next read starts after every key in it.
        listing.take(&keys(&["app/a", "app/cfg/x", "app/cfg/y"]), true, |_| true);
        assert_eq!(shown(&listing), ["app/a", "app/cfg/ (folder)"]);
        assert_eq!(listing.wanted(), Some(&b"app/cfg0"[..]), "past app/cfg/");
        assert_eq!(listing.ask(), 2);
        // The page fills with rows left over: the next page starts right after the last.
        listing.take(&keys(&["app/d", "app/e"]), true, |_| true);
        assert_eq!(shown(&listing), ["app/a", "app/cfg/ (folder)", "app/d"]);
        assert_eq!(listing.wanted(), None, "the page is full");
        assert_eq!(listing.next.as_deref(), Some(&b"app/d\0"[..]));

        // The next page, from there: fewer rows than asked means nothing is left.
        let mut page = Listing::new(b"app/", b"/", Some(b"app/d\0".to_vec()), 3);
        page.take(&keys(&["app/e"]), false, |_| true);
        assert_eq!(shown(&page), ["app/e"]);
        assert_eq!(page.next, None);
    }

    #[test]
    fn a_listing_shows_only_what_the_caller_may_read() {
        // An unreadable key does not hide a folder whose later keys are readable, and a
        // page that ends on its last row when the read was short has no next page.
        let mut listing = Listing::new(b"", b"/", None, 2);
        let readable = |k: &[u8]| !k.starts_with(b"secret") && k != b"top/hidden";
        listing.take(
            &keys(&["secret/a", "secret/b", "top/hidden", "top/shown", "z"]),
            false,
            readable,
        );
        assert_eq!(shown(&listing), ["top/ (folder)"]);
        assert_eq!(listing.wanted(), Some(&b"top0"[..]));
        listing.take(&keys(&["z"]), false, readable);
        assert_eq!(shown(&listing), ["top/ (folder)", "z"]);
        assert_eq!(listing.next, None);
        // Without a separator, every key is an entry.
        let mut flat = Listing::new(b"a/", b"", None, 10);
        flat.take(&keys(&["a/b/c", "a/d"]), false, |_| true);
        assert_eq!(shown(&flat), ["a/b/c", "a/d"]);
    }

    #[test]
    fn etags_change_with_the_body() {
        assert_ne!(fnv(b"a"), fnv(b"b"));
        assert_eq!(fnv(b""), 0xcbf2_9ce4_8422_2325);
        let etags: std::collections::BTreeSet<u64> = ASSETS.iter().map(|a| a.etag).collect();
        assert_eq!(etags.len(), ASSETS.len());
    }
}
