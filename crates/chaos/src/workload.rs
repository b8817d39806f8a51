//! The clients of a run. Each client issues one operation at a time against a node chosen at
//! random, over HTTP (Consul KV: default, `?consistent` and `?stale` reads, PUT, CAS, DELETE)
//! or RESP (GET, SET, DEL), and records every operation with its invocation and completion
//! time. Every written value is unique (`c<client>-<n>`), which is what lets the checker tell
//! the writes apart.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, PoisonError, RwLock};
use std::time::{Duration, Instant};

use base64::Engine as _;
use rand::{Rng, SeedableRng};
use rand_chacha::ChaCha8Rng;
use trireme_bench::reply::Reply;
use trireme_bench::{DriverError, RespDriver};

use crate::history::{Event, OpKind, Status};

/// Longest a client waits for one answer; longer than the servers' own request timeout, so
/// a server that can answer "timed out" or "no leader" gets to say so.
pub const OP_TIMEOUT: Duration = Duration::from_secs(4);

/// A node as the clients see it.
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// Node name.
    pub name: String,
    /// `http://ip:port`.
    pub http_base: String,
    /// `ip:port` of its RESP listener.
    pub resp_addr: String,
}

/// The lab slots as the clients see them, shared with the runner: a slot keeps its address
/// when a replacement node takes it over, but not its name (a stale read is only checked
/// against earlier reads from the same node).
#[derive(Debug, Clone)]
pub struct Endpoints(Arc<RwLock<Vec<Endpoint>>>);

impl Endpoints {
    /// The slots, in lab order.
    #[must_use]
    pub fn new(slots: Vec<Endpoint>) -> Self {
        Endpoints(Arc::new(RwLock::new(slots)))
    }

    /// Slot `slot` as it is now.
    #[must_use]
    pub fn get(&self, slot: usize) -> Endpoint {
        self.0.read().unwrap_or_else(PoisonError::into_inner)[slot].clone()
    }

    /// How many slots.
    #[must_use]
    pub fn len(&self) -> usize {
        self.0.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// Whether there are none.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Renames slot `slot` (a replacement took it over).
    pub fn rename(&self, slot: usize, name: &str) {
        self.0.write().unwrap_or_else(PoisonError::into_inner)[slot].name = name.to_string();
    }
}

/// What the clients share.
#[derive(Debug, Clone)]
pub struct Workload {
    /// The nodes, one per lab slot (a slot without a running node refuses the connection:
    /// a certain failure).
    pub endpoints: Endpoints,
    /// Keys `k0` .. `k{keys-1}`.
    pub keys: u32,
    /// Operations per second of each client (paced, not a target under load).
    pub client_rate: f64,
    /// The run's clock: every time in the history counts from here.
    pub clock: Instant,
    /// Set when clients should stop issuing operations.
    pub stop: Arc<AtomicBool>,
    /// Seed of the run; client `i` draws from stream `i`.
    pub seed: u64,
    /// Records `?stale` reads as default ones: a planted bug, so a history that must fail the
    /// check shows the whole pipeline catching it.
    pub stale_as_default: bool,
    /// Added to the lease the lock clients record: a planted bug (a paused holder then seems
    /// to hold its lock after it was granted to another), which the check must catch.
    pub overstate_lease: Duration,
}

/// Nanoseconds since the run's clock started.
pub fn since(clock: Instant) -> u64 {
    u64::try_from(clock.elapsed().as_nanos()).unwrap_or(u64::MAX)
}

/// An HTTP client for the run: no proxy, no retries of its own, [`OP_TIMEOUT`].
/// In a secure run it trusts the run's CA and sends its management token.
pub fn http_client() -> reqwest::Client {
    let mut builder = reqwest::Client::builder();
    if let Some(security) = crate::secure::current() {
        if let Ok(pem) = std::fs::read(&security.ca_file)
            && let Ok(ca) = reqwest::Certificate::from_pem(&pem)
        {
            builder = builder
                .tls_built_in_root_certs(false)
                .add_root_certificate(ca);
        }
        let mut headers = reqwest::header::HeaderMap::new();
        if let Ok(token) = reqwest::header::HeaderValue::from_str(&security.token) {
            headers.insert("X-Consul-Token", token);
        }
        builder = builder.default_headers(headers);
    }
    builder
        .no_proxy()
        .timeout(OP_TIMEOUT)
        .connect_timeout(Duration::from_secs(1))
        .pool_max_idle_per_host(4)
        .build()
        .unwrap_or_else(|_| reqwest::Client::new())
}

/// The RESP target of `addr`: over TLS with the token in a secure run.
fn resp_target(addr: &str) -> String {
    match crate::secure::current() {
        Some(security) => format!("rediss://default:{}@{addr}", security.token),
        None => format!("redis://{addr}"),
    }
}

/// A read's answer over HTTP: the value and its ModifyIndex, or absent.
pub type Found = Option<(String, u64)>;

/// How an HTTP request ended, in the terms of the history.
#[derive(Debug)]
pub enum Outcome<T> {
    /// Answered.
    Ok(T),
    /// Certainly not applied: the connection was refused, or the node answered that it could
    /// not even propose the request (400, 413, 503 "no leader" / "unavailable").
    Fail(String),
    /// May have been applied: timed out, broken connection, 5xx timeout / internal.
    Unknown(String),
}

/// A request that got no answer: certain failure only when the connection was never made.
pub(crate) fn unanswered<T>(e: &reqwest::Error) -> Outcome<T> {
    if e.is_connect() {
        Outcome::Fail(format!("connect: {e}"))
    } else {
        Outcome::Unknown(e.to_string())
    }
}

/// An error answer: 400 / 413 (refused as bad input) and 503 (no leader, not ready) mean the
/// request was never proposed; anything else (504 timeout, 500) may have been applied.
pub(crate) fn refused<T>(status: reqwest::StatusCode) -> Outcome<T> {
    match status.as_u16() {
        400 | 413 | 503 => Outcome::Fail(status.to_string()),
        _ => Outcome::Unknown(status.to_string()),
    }
}

fn kv_url(base: &str, key: &str) -> String {
    format!("{base}/v1/kv/{key}")
}

/// A stale read's `X-Consul-LastContact` at or past this (over 30 years) says the replica
/// could not bound its age.
const UNBOUNDED_MS: u64 = 1 << 40;

/// GET `/v1/kv/<key>` in `mode` (`default`, `consistent`, `stale`).
pub async fn http_read(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    mode: &str,
) -> Outcome<Found> {
    http_read_bounded(client, base, key, mode).await.0
}

/// [`http_read`], with the age the answer said it may have (`X-Consul-LastContact`, in ms)
/// when it came with one.
pub async fn http_read_bounded(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    mode: &str,
) -> (Outcome<Found>, Option<u64>) {
    let url = match mode {
        "consistent" => format!("{}?consistent", kv_url(base, key)),
        "stale" => format!("{}?stale", kv_url(base, key)),
        _ => kv_url(base, key),
    };
    let resp = match client.get(url).send().await {
        Ok(r) => r,
        Err(e) => return (unanswered(&e), None),
    };
    let bound = resp
        .headers()
        .get("X-Consul-LastContact")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse().ok());
    match resp.status().as_u16() {
        404 => return (Outcome::Ok(None), bound),
        200 => {}
        _ => return (refused(resp.status()), None),
    }
    let body: serde_json::Value = match resp.json().await {
        Ok(v) => v,
        Err(e) => return (Outcome::Unknown(format!("bad read body: {e}")), None),
    };
    let entry = &body[0];
    let index = entry["ModifyIndex"].as_u64();
    let value = entry["Value"]
        .as_str()
        .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
        .and_then(|bytes| String::from_utf8(bytes).ok());
    match (value, index) {
        (Some(value), Some(index)) => (Outcome::Ok(Some((value, index))), bound),
        _ => (
            Outcome::Unknown(format!("unexpected read body {body}")),
            None,
        ),
    }
}

/// PUT (with a `query` such as `cas=7` or `acquire=<session>`), or DELETE when `value` is
/// None; the answer's `true` or `false`.
pub async fn http_write(
    client: &reqwest::Client,
    base: &str,
    key: &str,
    value: Option<&str>,
    query: Option<&str>,
) -> Outcome<bool> {
    let mut url = kv_url(base, key);
    if let Some(query) = query {
        url.push('?');
        url.push_str(query);
    }
    let request = match value {
        Some(v) => client.put(url).body(v.to_string()),
        None => client.delete(url),
    };
    let resp = match request.send().await {
        Ok(r) => r,
        Err(e) => return unanswered(&e),
    };
    if resp.status() != reqwest::StatusCode::OK {
        return refused(resp.status());
    }
    match resp.text().await.as_deref().map(str::trim) {
        Ok("true") => Outcome::Ok(true),
        Ok("false") => Outcome::Ok(false),
        Ok(other) => Outcome::Unknown(format!("unexpected answer {other:?}")),
        Err(e) => Outcome::Unknown(e.to_string()),
    }
}

/// Client `id`'s random stream: stream `id + 1` of the run's seed.
pub(crate) fn client_rng(work: &Workload, id: u32) -> ChaCha8Rng {
    let mut rng = ChaCha8Rng::seed_from_u64(work.seed);
    rng.set_stream(u64::from(id) + 1);
    rng
}

/// A client's pace: one tick per operation at `client_rate`, never catching up on ticks a
/// slow operation missed.
pub(crate) fn pacer(work: &Workload) -> tokio::time::Interval {
    let period = Duration::from_secs_f64(1.0 / work.client_rate.max(0.1));
    let mut ticker = tokio::time::interval(period);
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticker
}

/// Client `id`'s loop: paced operations until the deadline; returns its history.
pub async fn client(id: u32, work: Workload) -> Vec<Event> {
    let mut rng = client_rng(&work, id);
    let http = http_client();
    let mut resp: HashMap<String, RespDriver> = HashMap::new();
    let mut events = Vec::new();
    let mut counter = 0u64;
    let mut ticker = pacer(&work);
    loop {
        ticker.tick().await;
        if work.stop.load(Ordering::Relaxed) {
            break;
        }
        let node = &work
            .endpoints
            .get(rng.random_range(0..work.endpoints.len()));
        let key = format!("k{}", rng.random_range(0..work.keys));
        counter += 1;
        let value = format!("c{id}-{counter}");
        let base = Event::new(id, &node.name, "http", OpKind::Read, &key, 0);
        match rng.random_range(0..100u32) {
            0..15 => events.push(read(&http, &work, node, base, "default").await.0),
            15..30 => events.push(read(&http, &work, node, base, "consistent").await.0),
            30..40 => {
                let (mut e, _) = read(&http, &work, node, base, "stale").await;
                if work.stale_as_default {
                    e.mode = Some("default".into());
                }
                events.push(e);
            }
            40..55 => {
                let mut e = Event {
                    op: OpKind::Write,
                    value: Some(value.clone()),
                    call: since(work.clock),
                    ..base
                };
                let outcome = http_write(&http, &node.http_base, &key, Some(&value), None).await;
                finish(&mut e, work.clock, outcome, |_, _| {});
                events.push(e);
            }
            55..65 => {
                // Compare-and-set needs the current ModifyIndex: read it first (recorded as
                // a read of its own), then PUT ?cas= with it.
                let (read_event, found) =
                    read(&http, &work, node, base.clone(), "consistent").await;
                events.push(read_event);
                let Some(found) = found else { continue };
                let (expect, index) = match found {
                    Some((v, i)) => (Some(v), i),
                    None => (None, 0),
                };
                let mut e = Event {
                    op: OpKind::Cas,
                    value: Some(value.clone()),
                    expect,
                    call: since(work.clock),
                    ..base
                };
                let query = format!("cas={index}");
                let outcome =
                    http_write(&http, &node.http_base, &key, Some(&value), Some(&query)).await;
                finish(&mut e, work.clock, outcome, |e, applied| {
                    e.result = Some(applied)
                });
                if e.status == Status::Unknown {
                    e.result = Some(true);
                }
                events.push(e);
            }
            65..70 => {
                let mut e = Event {
                    op: OpKind::Delete,
                    call: since(work.clock),
                    ..base
                };
                let outcome = http_write(&http, &node.http_base, &key, None, None).await;
                finish(&mut e, work.clock, outcome, |_, _| {});
                events.push(e);
            }
            70..82 => {
                let e = resp_op(&mut resp, &work, node, base, &["SET", &key, &value]).await;
                events.push(e);
            }
            82..96 => {
                let e = resp_op(&mut resp, &work, node, base, &["GET", &key]).await;
                events.push(e);
            }
            _ => {
                let e = resp_op(&mut resp, &work, node, base, &["DEL", &key]).await;
                events.push(e);
            }
        }
    }
    events
}

/// Sets the status and completion time of `e` from `outcome`, calling `on_ok` with the answer.
pub(crate) fn finish<T>(
    e: &mut Event,
    clock: Instant,
    outcome: Outcome<T>,
    on_ok: impl FnOnce(&mut Event, T),
) {
    e.ret = since(clock);
    match outcome {
        Outcome::Ok(v) => {
            e.status = Status::Ok;
            on_ok(e, v);
        }
        Outcome::Fail(_) => e.status = Status::Fail,
        Outcome::Unknown(_) => e.status = Status::Unknown,
    }
}

/// An HTTP read; also returns what it found when it completed.
async fn read(
    http: &reqwest::Client,
    work: &Workload,
    node: &Endpoint,
    base: Event,
    mode: &str,
) -> (Event, Option<Found>) {
    let mut e = Event {
        op: OpKind::Read,
        mode: Some(mode.into()),
        call: since(work.clock),
        ..base
    };
    let (outcome, bound) = http_read_bounded(http, &node.http_base, &e.key, mode).await;
    if mode == "stale" {
        // The checker holds the answer to it: nothing acknowledged longer ago is missing.
        // A replica that cannot bound its age says so with a huge number: nothing to hold
        // it to.
        e.bound = bound
            .filter(|ms| *ms < UNBOUNDED_MS)
            .map(|ms| ms * 1_000_000);
    }
    let mut found = None;
    finish(&mut e, work.clock, outcome, |e, f: Found| {
        if let Some((v, i)) = &f {
            e.value = Some(v.clone());
            e.index = Some(*i);
        }
        found = Some(f);
    });
    (e, found)
}

/// The client's RESP connection to `node`, opened on first use (the driver reopens it after
/// a failure).
pub(crate) fn resp_conn<'c>(
    conns: &'c mut HashMap<String, RespDriver>,
    node: &Endpoint,
) -> Result<&'c mut RespDriver, DriverError> {
    if !conns.contains_key(&node.name) {
        let driver = RespDriver::new(&resp_target(&node.resp_addr))?.with_timeout(OP_TIMEOUT);
        conns.insert(node.name.clone(), driver);
    }
    conns
        .get_mut(&node.name)
        .ok_or_else(|| DriverError::Io(std::io::Error::other("connection not kept")))
}

/// A RESP command on the client's connection to `node` (opened on first use, reopened by the
/// driver after a failure).
async fn resp_op(
    conns: &mut HashMap<String, RespDriver>,
    work: &Workload,
    node: &Endpoint,
    base: Event,
    args: &[&str],
) -> Event {
    let (op, value) = match args[0] {
        "SET" => (OpKind::Write, args.get(2).map(|v| (*v).to_string())),
        "DEL" => (OpKind::Delete, None),
        _ => (OpKind::Read, None),
    };
    let mut e = Event {
        proto: "resp".into(),
        op,
        mode: (op == OpKind::Read).then(|| "default".to_string()),
        value,
        call: since(work.clock),
        ..base
    };
    let Ok(conn) = resp_conn(conns, node) else {
        e.ret = since(work.clock);
        e.status = Status::Fail;
        return e;
    };
    let args: Vec<&[u8]> = args.iter().map(|a| a.as_bytes()).collect();
    let reply = conn.request(&args).await;
    e.ret = since(work.clock);
    e.status = match (op, reply) {
        (OpKind::Write, Ok(Reply::Simple(s))) if s == "OK" => Status::Ok,
        (OpKind::Delete, Ok(Reply::Integer(_))) => Status::Ok,
        (OpKind::Read, Ok(Reply::Bulk(v))) => {
            e.value = v.map(|b| String::from_utf8_lossy(&b).into_owned());
            Status::Ok
        }
        // Nothing was sent to a node that refused the connection.
        (_, Err(DriverError::Io(io))) if io.kind() == std::io::ErrorKind::ConnectionRefused => {
            Status::Fail
        }
        // A read that got no usable answer tells nothing; drop it.
        (OpKind::Read, _) => Status::Fail,
        // -TRYAGAIN (no leader) was not applied, but it is counted with -TIMEOUT and any
        // other error reply, a timeout or a broken connection as possibly applied: unknown
        // only widens what the checker accepts.
        _ => Status::Unknown,
    };
    e
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn status_codes_map_to_certain_or_unknown_outcomes() {
        for code in [400u16, 413, 503] {
            let s = reqwest::StatusCode::from_u16(code).unwrap();
            assert!(matches!(refused::<()>(s), Outcome::Fail(_)), "{code}");
        }
        for code in [500u16, 502, 504] {
            let s = reqwest::StatusCode::from_u16(code).unwrap();
            assert!(matches!(refused::<()>(s), Outcome::Unknown(_)), "{code}");
        }
    }
}
