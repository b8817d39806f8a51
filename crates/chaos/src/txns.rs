//! The transaction clients: Consul `PUT /v1/txn` on small groups of keys that share a hash
//! tag (so every transaction is one shard's), or with `--txn` keys hashed apart (so most
//! transactions commit across shards), recorded for the checker's multi-key model.
//! The group keys are touched by transactions only: reads, writes of the whole group,
//! mixed writes and deletes, and creates guarded by `check-not-exists`. A `get` of an absent
//! key fails its transaction, as in Consul, so the reads double as conditions.
//!
//! A share of the operations read a whole group in one request instead, the ways clients
//! read several keys at once: `MGET` over RESP, and a `?recurse` listing of the group's tag
//! over HTTP (default or `consistent`). They are recorded as transactions of `read` steps
//! (the value seen, or none for an absent key), held to the same model: a read that shows
//! part of another transaction is a violation.

use std::collections::HashMap;
use std::sync::atomic::Ordering;

use base64::Engine as _;
use rand::Rng;
use rand::seq::SliceRandom;
use rand_chacha::ChaCha8Rng;
use serde_json::json;

use crate::history::{Event, OpKind, TxnStep};
use crate::workload::{
    Endpoint, Outcome, Workload, client_rng, finish, http_client, pacer, refused, resp_conn, since,
    unanswered,
};
use trireme_bench::RespDriver;
use trireme_bench::reply::Reply;

/// Percent of a transaction client's operations that read a whole group in one request.
const GROUP_READ_PERCENT: u32 = 30;

/// Keys of a group.
const GROUP_KEYS: [&str; 3] = ["a", "b", "c"];

/// The name of group `g` and its keys: `t{g0}a` ... (the tag keeps them in one shard), or
/// with `across`, `tx/g0/a` ... (hashed apart, so in several shards as a rule).
fn group(g: u32, across: bool) -> (String, Vec<String>) {
    let name = format!("g{g}");
    let keys = GROUP_KEYS
        .iter()
        .map(|k| {
            if across {
                format!("tx/{name}/{k}")
            } else {
                format!("t{{{name}}}{k}")
            }
        })
        .collect();
    (name, keys)
}

fn step(verb: &str, key: &str, value: Option<&str>) -> TxnStep {
    TxnStep {
        verb: verb.to_string(),
        key: key.to_string(),
        value: value.map(str::to_string),
    }
}

/// A transaction of one of four shapes over the group's keys, writing `value`.
fn draw(rng: &mut ChaCha8Rng, keys: &[String], value: &str) -> Vec<TxnStep> {
    let mut order: Vec<&String> = keys.iter().collect();
    order.shuffle(rng);
    match rng.random_range(0..100u32) {
        0..35 => keys.iter().map(|k| step("get", k, None)).collect(),
        35..70 => keys.iter().map(|k| step("set", k, Some(value))).collect(),
        70..85 => vec![
            step("set", order[0], Some(value)),
            step("delete", order[1], None),
            step("get", order[2], None),
        ],
        _ => vec![
            step("check-not-exists", order[0], None),
            step("set", order[0], Some(value)),
            step("set", order[1], Some(value)),
        ],
    }
}

/// The request body Consul takes.
fn body(steps: &[TxnStep]) -> serde_json::Value {
    let ops: Vec<_> = steps
        .iter()
        .map(|s| {
            let mut kv = json!({"Verb": s.verb, "Key": s.key});
            if let Some(v) = &s.value {
                kv["Value"] = json!(base64::engine::general_purpose::STANDARD.encode(v));
            }
            json!({ "KV": kv })
        })
        .collect();
    json!(ops)
}

/// Sends the transaction: Ok(true) with the gets' values filled in when it applied,
/// Ok(false) when a condition failed (409).
async fn send(client: &reqwest::Client, base: &str, steps: &mut [TxnStep]) -> Outcome<bool> {
    let resp = match client
        .put(format!("{base}/v1/txn"))
        .json(&body(steps))
        .send()
        .await
    {
        Ok(r) => r,
        Err(e) => return unanswered(&e),
    };
    match resp.status().as_u16() {
        200 => {}
        409 => return Outcome::Ok(false),
        _ => return refused(resp.status()),
    }
    let answer: serde_json::Value = match resp.json().await {
        Ok(v) => v,
        Err(e) => return Outcome::Unknown(format!("bad txn body: {e}")),
    };
    // Only a get's entry carries a value (a set's does not), and a transaction gets each
    // key at most once.
    let empty = Vec::new();
    let results = answer["Results"].as_array().unwrap_or(&empty);
    for s in steps.iter_mut().filter(|s| s.verb == "get") {
        let found = results.iter().find_map(|r| {
            let kv = &r["KV"];
            (kv["Key"].as_str() == Some(&s.key))
                .then(|| kv["Value"].as_str())
                .flatten()
                .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
                .and_then(|bytes| String::from_utf8(bytes).ok())
        });
        match found {
            Some(v) => s.value = Some(v),
            None => return Outcome::Unknown(format!("txn applied without get {}'s value", s.key)),
        }
    }
    Outcome::Ok(true)
}

/// How a whole group is read in one request.
#[derive(Debug, Clone, Copy)]
enum GroupRead {
    /// `MGET` of the group's keys over RESP (the default read mode).
    Mget,
    /// `GET /v1/kv/t{gN}?recurse` in the default mode.
    List,
    /// The same with `&consistent`.
    ListConsistent,
}

/// What one group read saw: each key's value, `None` when absent.
type Seen = Vec<Option<String>>;

/// A listing of the group's tag: the value of each of `keys` (listed or not).
async fn list_group(
    client: &reqwest::Client,
    base: &str,
    name: &str,
    keys: &[String],
    consistent: bool,
) -> Outcome<Seen> {
    let mode = if consistent { "&consistent" } else { "" };
    let url = format!("{base}/v1/kv/t{{{name}}}?recurse{mode}");
    let resp = match client.get(url).send().await {
        Ok(r) => r,
        Err(e) => return unanswered(&e),
    };
    match resp.status().as_u16() {
        404 => return Outcome::Ok(vec![None; keys.len()]),
        200 => {}
        _ => return refused(resp.status()),
    }
    let body: serde_json::Value = match resp.json().await {
        Ok(v) => v,
        Err(e) => return Outcome::Unknown(format!("bad listing body: {e}")),
    };
    let empty = Vec::new();
    let entries = body.as_array().unwrap_or(&empty);
    let mut seen = vec![None; keys.len()];
    for entry in entries {
        let Some(at) = keys.iter().position(|k| entry["Key"].as_str() == Some(k)) else {
            return Outcome::Unknown(format!("a listing of {name} holds another key: {entry}"));
        };
        let value = entry["Value"]
            .as_str()
            .and_then(|b64| base64::engine::general_purpose::STANDARD.decode(b64).ok())
            .and_then(|bytes| String::from_utf8(bytes).ok());
        match value {
            Some(v) => seen[at] = Some(v),
            None => return Outcome::Unknown(format!("a listed key without a value: {entry}")),
        }
    }
    Outcome::Ok(seen)
}

/// `MGET` of the group's keys on the client's connection to `node` (opened on first use).
/// Anything but an answer is a failed read: a read that was not answered tells nothing.
async fn mget_group(
    conns: &mut HashMap<String, RespDriver>,
    node: &Endpoint,
    keys: &[String],
) -> Outcome<Seen> {
    let conn = match resp_conn(conns, node) {
        Ok(conn) => conn,
        Err(e) => return Outcome::Fail(e.to_string()),
    };
    let mut args: Vec<&[u8]> = vec![b"MGET"];
    args.extend(keys.iter().map(|k| k.as_bytes()));
    match conn.request(&args).await {
        Ok(Reply::Array(Some(items))) if items.len() == keys.len() => {
            let mut seen = Vec::with_capacity(items.len());
            for item in items {
                match item {
                    Reply::Bulk(v) => {
                        seen.push(v.map(|b| String::from_utf8_lossy(&b).into_owned()));
                    }
                    Reply::Null => seen.push(None),
                    other => return Outcome::Fail(format!("MGET answered {other:?}")),
                }
            }
            Outcome::Ok(seen)
        }
        Ok(other) => Outcome::Fail(format!("MGET answered {other:?}")),
        Err(e) => Outcome::Fail(e.to_string()),
    }
}

/// Transaction client `id`'s loop over `groups` groups (spread over shards with `across`):
/// paced transactions until the stop; returns its history.
pub async fn client(id: u32, work: Workload, groups: u32, across: bool) -> Vec<Event> {
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
        let node = work
            .endpoints
            .get(rng.random_range(0..work.endpoints.len()));
        let (name, keys) = group(rng.random_range(0..groups.max(1)), across);
        if !across && rng.random_range(0..100u32) < GROUP_READ_PERCENT {
            let how = match rng.random_range(0..3u32) {
                0 => GroupRead::Mget,
                1 => GroupRead::List,
                _ => GroupRead::ListConsistent,
            };
            let proto = if matches!(how, GroupRead::Mget) {
                "resp"
            } else {
                "http"
            };
            let mut e = Event::new(id, &node.name, proto, OpKind::Txn, &name, since(work.clock));
            let outcome = match how {
                GroupRead::Mget => mget_group(&mut resp, &node, &keys).await,
                GroupRead::List => list_group(&http, &node.http_base, &name, &keys, false).await,
                GroupRead::ListConsistent => {
                    list_group(&http, &node.http_base, &name, &keys, true).await
                }
            };
            // A read changes nothing: one that was not answered is left out, not unknown.
            let outcome = match outcome {
                Outcome::Unknown(why) => Outcome::Fail(why),
                other => other,
            };
            let mut steps: Vec<TxnStep> = keys.iter().map(|k| step("read", k, None)).collect();
            finish(&mut e, work.clock, outcome, |e, seen: Seen| {
                e.result = Some(true);
                for (s, v) in steps.iter_mut().zip(seen) {
                    s.value = v;
                }
            });
            e.txn = Some(steps);
            events.push(e);
            continue;
        }
        counter += 1;
        let value = format!("c{id}-{counter}");
        let mut steps = draw(&mut rng, &keys, &value);
        let mut e = Event::new(
            id,
            &node.name,
            "http",
            OpKind::Txn,
            &name,
            since(work.clock),
        );
        let outcome = send(&http, &node.http_base, &mut steps).await;
        finish(&mut e, work.clock, outcome, |e, applied| {
            e.result = Some(applied)
        });
        if e.result != Some(true) {
            // What a get read is known only when the transaction applied.
            for s in steps.iter_mut().filter(|s| s.verb == "get") {
                s.value = None;
            }
        }
        e.txn = Some(steps);
        events.push(e);
    }
    events
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_group_is_one_hash_tag_and_bodies_are_consuls() {
        let (name, keys) = group(2, false);
        assert_eq!(name, "g2");
        assert_eq!(keys, ["t{g2}a", "t{g2}b", "t{g2}c"]);
        let (_, spread) = group(2, true);
        assert_eq!(spread, ["tx/g2/a", "tx/g2/b", "tx/g2/c"]);
        let body = body(&[
            step("set", "t{g2}a", Some("v")),
            step("get", "t{g2}b", None),
        ]);
        assert_eq!(
            body,
            json!([
                {"KV": {"Verb": "set", "Key": "t{g2}a", "Value": "dg=="}},
                {"KV": {"Verb": "get", "Key": "t{g2}b"}}
            ])
        );
    }
}
