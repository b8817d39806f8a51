//! Area 10: the Consul-compatible KV API over HTTP on a one-node cluster.
//!
//! Each test starts its own node, so keys and indexes never leak between tests.

use crate::common;

use crate::common::{
    KvEntry, RawResp, Reply, ReplyExt, StartOptions, TestNode, expect_error, http_client,
    wait_until,
};
use reqwest::StatusCode;
use serde_json::Value;
use std::time::Duration;

fn header_u64(resp: &reqwest::Response, name: &str) -> u64 {
    resp.headers()
        .get(name)
        .unwrap_or_else(|| panic!("missing header {name}"))
        .to_str()
        .expect("header is text")
        .parse()
        .unwrap_or_else(|_| panic!("header {name} is not a number"))
}

fn header_str(resp: &reqwest::Response, name: &str) -> String {
    resp.headers()
        .get(name)
        .unwrap_or_else(|| panic!("missing header {name}"))
        .to_str()
        .expect("header is text")
        .to_string()
}

/// Proves the node still serves after a rejected request.
async fn still_serves(node: &TestNode, key: &str) {
    assert!(node.put(key, "after-error").await, "PUT after an error");
    let entry = node.get(key).await.expect("key written after an error");
    assert_eq!(entry.value, b"after-error");
}

#[tokio::test]
async fn put_get_roundtrip_with_flags_headers_and_raw() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;

    let resp = c
        .put(format!("{}?flags=42", node.kv_url("users/alice")))
        .body("hello")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.text().await.unwrap(), "true");

    let resp = c.get(node.kv_url("users/alice")).send().await.unwrap();
    assert_eq!(resp.status(), 200);
    let index = header_u64(&resp, "x-consul-index");
    assert_eq!(header_str(&resp, "x-consul-knownleader"), "true");
    assert_eq!(header_str(&resp, "x-consul-lastcontact"), "0");
    let body: Value = resp.json().await.unwrap();
    let arr = body.as_array().expect("array");
    assert_eq!(arr.len(), 1);
    let obj = arr[0].as_object().expect("object");
    let mut fields: Vec<&str> = obj.keys().map(String::as_str).collect();
    fields.sort_unstable();
    assert_eq!(
        fields,
        [
            "CreateIndex",
            "Flags",
            "Key",
            "LockIndex",
            "ModifyIndex",
            "Value"
        ]
    );
    assert_eq!(obj["LockIndex"], 0);
    assert_eq!(obj["Key"], "users/alice");
    assert_eq!(obj["Flags"], 42);
    assert_eq!(obj["Value"], "aGVsbG8="); // base64("hello")
    let entry = KvEntry::from_json(&arr[0]);
    assert!(entry.create_index > 0);
    assert_eq!(entry.create_index, entry.modify_index);
    assert!(
        index >= entry.modify_index,
        "X-Consul-Index {index} < ModifyIndex {}",
        entry.modify_index
    );

    // ?raw returns the bytes themselves, binary included.
    let binary: Vec<u8> = (0..=255u8).rev().collect();
    assert!(node.put("bin/all-bytes", binary.clone()).await);
    let resp = c
        .get(format!("{}?raw", node.kv_url("bin/all-bytes")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 200);
    assert_eq!(resp.bytes().await.unwrap().as_ref(), binary.as_slice());
    assert_eq!(node.get("bin/all-bytes").await.unwrap().value, binary);

    // An empty value reads back as "Value": null.
    assert!(node.put("empty", Vec::<u8>::new()).await);
    let body: Value = c
        .get(node.kv_url("empty"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body[0]["Value"], Value::Null);
    assert_eq!(body[0]["Key"], "empty");
}

#[tokio::test]
async fn missing_key_is_404_with_empty_body_and_headers() {
    let node = TestNode::start(StartOptions::default()).await;
    let resp = node
        .http
        .get(node.kv_url("no/such/key"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
    header_u64(&resp, "x-consul-index");
    assert_eq!(header_str(&resp, "x-consul-knownleader"), "true");
    assert_eq!(header_str(&resp, "x-consul-lastcontact"), "0");
    assert!(
        resp.bytes().await.unwrap().is_empty(),
        "404 body must be empty"
    );

    let resp = node
        .http
        .get(format!("{}?raw", node.kv_url("no/such/key")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);
}

#[tokio::test]
async fn modify_index_moves_create_index_stays_flags_follow_each_write() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;
    c.put(format!("{}?flags=7", node.kv_url("cfg/x")))
        .body("v1")
        .send()
        .await
        .unwrap();
    let first = node.get("cfg/x").await.unwrap();
    assert_eq!(first.flags, 7);

    assert!(node.put("cfg/x", "v2").await);
    let second = node.get("cfg/x").await.unwrap();
    assert_eq!(second.value, b"v2");
    assert_eq!(second.create_index, first.create_index);
    assert!(second.modify_index > first.modify_index);
    // As in Consul, a PUT without ?flags stores flags 0.
    assert_eq!(second.flags, 0);

    // Writing the same value again is still a write.
    assert!(node.put("cfg/x", "v2").await);
    let third = node.get("cfg/x").await.unwrap();
    assert!(third.modify_index > second.modify_index);
    assert_eq!(third.create_index, first.create_index);

    c.put(format!(
        "{}?flags=18446744073709551615",
        node.kv_url("cfg/x")
    ))
    .body("v3")
    .send()
    .await
    .unwrap();
    assert_eq!(node.get("cfg/x").await.unwrap().flags, u64::MAX);
}

#[tokio::test]
async fn cas_create_only_and_compare_and_set() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;
    let put_cas = |key: &str, cas: u64, body: &'static str| {
        let url = format!("{}?cas={cas}", node.kv_url(key));
        async move {
            let resp = c.put(url).body(body).send().await.unwrap();
            assert_eq!(resp.status(), 200);
            resp.text().await.unwrap()
        }
    };

    // cas=0 creates only when absent.
    assert_eq!(put_cas("lock", 0, "first").await, "true");
    assert_eq!(put_cas("lock", 0, "second").await, "false");
    let entry = node.get("lock").await.unwrap();
    assert_eq!(entry.value, b"first");

    // A wrong index fails and changes nothing.
    assert_eq!(
        put_cas("lock", entry.modify_index + 1000, "wrong").await,
        "false"
    );
    assert_eq!(node.get("lock").await.unwrap(), entry);

    // The right index succeeds, once.
    assert_eq!(put_cas("lock", entry.modify_index, "third").await, "true");
    let after = node.get("lock").await.unwrap();
    assert_eq!(after.value, b"third");
    assert!(after.modify_index > entry.modify_index);
    assert_eq!(after.create_index, entry.create_index);
    assert_eq!(put_cas("lock", entry.modify_index, "stale").await, "false");
    assert_eq!(node.get("lock").await.unwrap().value, b"third");

    // cas=N>0 on an absent key fails and does not create it.
    assert_eq!(put_cas("absent", 5, "x").await, "false");
    assert!(node.get("absent").await.is_none());
}

#[tokio::test]
async fn recurse_keys_and_separator() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;
    // Keys spread over many slots, written out of order.
    for key in [
        "app/e/f/g",
        "other/x",
        "app/b/d",
        "apple",
        "app/a",
        "app/b/c",
        "app/",
    ] {
        assert!(node.put(key, format!("v:{key}")).await);
    }

    let entries = node.list("app/").await;
    let keys: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(keys, ["app/", "app/a", "app/b/c", "app/b/d", "app/e/f/g"]);
    for e in &entries {
        assert_eq!(e.value, format!("v:{}", e.key).as_bytes());
    }
    let keys: Vec<String> = node.list("app").await.into_iter().map(|e| e.key).collect();
    assert_eq!(
        keys,
        ["app/", "app/a", "app/b/c", "app/b/d", "app/e/f/g", "apple"]
    );

    let resp = c
        .get(format!("{}?recurse", node.kv_url("nothing/here/")))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), 404);

    let keys: Vec<String> = c
        .get(format!("{}?keys", node.kv_url("app/")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(keys, ["app/", "app/a", "app/b/c", "app/b/d", "app/e/f/g"]);

    let keys: Vec<String> = c
        .get(format!("{}?keys&separator=/", node.kv_url("app/")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(keys, ["app/", "app/a", "app/b/", "app/e/"]);

    let keys: Vec<String> = c
        .get(format!("{}/v1/kv/?keys&separator=/", node.http_url()))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(keys, ["app/", "apple", "other/"]);
}

/// An unbounded `?recurse` whose shards each hold more rows than are read on the async
/// threads (1,000): the scans run on the blocking pool, and every row comes back, in order.
#[tokio::test]
async fn a_large_recurse_returns_every_row_in_order() {
    let node = TestNode::start(StartOptions {
        shards: Some(2),
        ..StartOptions::default()
    })
    .await;
    let mut resp = common::RawResp::connect(node.resp_addr()).await;
    let keys: Vec<String> = (0..3_000).map(|i| format!("big/{i:05}")).collect();
    for chunk in keys.chunks(500) {
        let mut args: Vec<&[u8]> = vec![b"MSET"];
        for key in chunk {
            args.extend([key.as_bytes(), key.as_bytes()]);
        }
        resp.send_cmd(&args).await;
        assert_eq!(resp.read_reply().await, b"+OK\r\n");
    }
    let entries = node.list("big/").await;
    let listed: Vec<&str> = entries.iter().map(|e| e.key.as_str()).collect();
    assert_eq!(listed, keys, "every key, in key order");
    assert!(entries.iter().all(|e| e.value == e.key.as_bytes()));
    still_serves(&node, "big/after").await;
}

#[tokio::test]
async fn consistency_modes_and_their_conflict() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;
    assert!(node.put("mode/k", "v").await);
    for mode in ["consistent", "stale"] {
        let resp = c
            .get(format!("{}?{mode}", node.kv_url("mode/k")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "?{mode}");
        let body: Value = resp.json().await.unwrap();
        assert_eq!(body[0]["Value"], "dg==", "?{mode}"); // base64("v")
    }
    let resp = c
        .get(format!("{}?consistent&stale", node.kv_url("mode/k")))
        .send()
        .await
        .unwrap();
    let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    assert!(
        message.contains("stale") && message.contains("consistent"),
        "{message}"
    );
    still_serves(&node, "mode/after").await;
}

#[tokio::test]
async fn delete_plain_recurse_and_cas() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;
    let delete = |url: String| async move {
        let resp = c.delete(url).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.text().await.unwrap()
    };

    assert!(node.put("d/one", "1").await);
    assert_eq!(delete(node.kv_url("d/one")).await, "true");
    assert!(node.get("d/one").await.is_none());
    // Deleting an absent key is not an error (Consul answers true).
    assert_eq!(delete(node.kv_url("d/one")).await, "true");

    for key in ["tree/a", "tree/b/c", "tree/b/d", "treehouse", "other"] {
        assert!(node.put(key, "x").await);
    }
    assert_eq!(
        delete(format!("{}?recurse", node.kv_url("tree/"))).await,
        "true"
    );
    assert!(node.list("tree/").await.is_empty());
    assert!(node.get("treehouse").await.is_some(), "sibling prefix kept");
    assert!(node.get("other").await.is_some());

    assert!(node.put("c/k", "v").await);
    let entry = node.get("c/k").await.unwrap();
    assert_eq!(
        delete(format!(
            "{}?cas={}",
            node.kv_url("c/k"),
            entry.modify_index + 7
        ))
        .await,
        "false"
    );
    assert_eq!(node.get("c/k").await.unwrap(), entry);
    assert_eq!(
        delete(format!("{}?cas={}", node.kv_url("c/k"), entry.modify_index)).await,
        "true"
    );
    assert!(node.get("c/k").await.is_none());

    // A key deleted and written again is created anew.
    assert!(node.put("c/k", "again").await);
    let reborn = node.get("c/k").await.unwrap();
    assert!(reborn.create_index > entry.create_index);
}

#[tokio::test]
async fn status_cluster_health_and_metrics() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;
    let ep = node.endpoints().clone();
    let base = node.http_url();

    let leader: Value = c
        .get(format!("{base}/v1/status/leader"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(leader, Value::String(ep.peer.to_string()));
    let peers: Value = c
        .get(format!("{base}/v1/status/peers"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(peers, serde_json::json!([ep.peer.to_string()]));

    let health = c.get(format!("{base}/v1/health")).send().await.unwrap();
    assert_eq!(health.status(), 200);
    let health: trireme_types::admin::HealthDoc = health.json().await.unwrap();
    assert_eq!(health.status, trireme_types::admin::HealthStatus::Ok);
    assert_eq!(health.node, "n1");
    assert!(health.all_shards_led && health.storage_ok);

    assert!(node.put("m/k", "v").await);
    let written = node.get("m/k").await.unwrap();
    let shards = node.shards().await;
    assert_eq!(shards.node, "n1");
    assert_eq!(
        shards.epoch, 1,
        "a new cluster's map is at its first version"
    );
    assert_eq!(shards.shard_count, 16);
    assert_eq!(shards.shards.len(), 16);
    let mut next_slot = 0u32;
    for (i, s) in shards.shards.iter().enumerate() {
        assert_eq!(s.shard, trireme_types::ShardId(i as u32));
        let [a, b] = s.slots;
        assert_eq!(
            u32::from(a),
            next_slot,
            "slot ranges must be contiguous: {s:?}"
        );
        assert!(b >= a);
        next_slot = u32::from(b) + 1;
        let leader = s.leader.as_ref().expect("a single node leads every shard");
        assert_eq!(leader.name, "n1");
        assert_eq!(leader.peer, ep.peer.to_string());
        assert_eq!(leader.http, ep.http.to_string());
        assert_eq!(leader.resp, ep.resp.to_string());
        let as_replica = trireme_types::admin::NodeAddrs {
            role: Some("voter".into()),
            ..leader.clone()
        };
        assert_eq!(s.replicas, vec![as_replica]);
        assert_eq!(s.local_role.as_deref(), Some("Leader"));
        assert!(s.term >= 1);
        assert!(
            s.applied_index <= s.committed_index,
            "applied past committed: {s:?}"
        );
    }
    assert_eq!(next_slot, 16384, "slots must cover 0..=16383");

    // The shard owning m/k (slot from CLUSTER KEYSLOT) reports the write as applied; the
    // figures come from Raft metrics, which may trail the reply for a moment.
    let mut resp = RawResp::connect(ep.resp).await;
    let slot = Reply::parse(&resp.cmd(&[b"CLUSTER", b"KEYSLOT", b"m/k"]).await).int() as u16;
    let reached = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async {
            let shards = node.shards().await;
            shards
                .shard_of_slot(slot)
                .is_some_and(|s| s.applied_index >= written.modify_index)
        },
    )
    .await;
    assert!(
        reached,
        "shard of slot {slot} never reported applied_index >= {}: {:?}",
        written.modify_index,
        node.shards().await
    );

    let metrics = |c: reqwest::Client, base: String| async move {
        let resp = c.get(format!("{base}/metrics")).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.text().await.unwrap()
    };
    let counter = |text: &str, name: &str| -> f64 {
        text.lines()
            .find_map(|l| l.strip_prefix(name)?.trim().parse().ok())
            .unwrap_or_else(|| panic!("metric {name} missing in:\n{text}"))
    };
    let before = metrics(c.clone(), base.clone()).await;
    for name in [
        "trireme_http_requests_total{op=\"get\"}",
        "trireme_storage_syncs_total",
        "trireme_resp_commands_total",
    ] {
        counter(&before, name);
    }
    assert!(counter(&before, "trireme_storage_syncs_total") > 0.0);
    let gets = counter(&before, "trireme_http_requests_total{op=\"get\"}");
    for _ in 0..3 {
        node.get("m/k").await.unwrap();
    }
    let after = metrics(c.clone(), base.clone()).await;
    assert!(
        counter(&after, "trireme_http_requests_total{op=\"get\"}") >= gets + 3.0,
        "GET counter did not move"
    );

    // Every step of the write path counts each of three PUTs made one after another: one
    // entry each, appended, synced and applied, each taking some time.
    for i in 0..3 {
        assert!(node.put(&format!("m/w{i}"), "v").await);
    }
    let written = metrics(c.clone(), base.clone()).await;
    for name in [
        "trireme_raft_entries_proposed_total",
        "trireme_raft_writers_proposed_total",
        "trireme_storage_log_appends_total",
        "trireme_storage_sync_requests_total",
        "trireme_storage_applies_total",
    ] {
        let moved = counter(&written, name) - counter(&after, name);
        assert!(moved >= 3.0, "{name} moved by {moved} for 3 writes");
    }
    for name in [
        "trireme_raft_commit_seconds_total",
        "trireme_storage_log_append_seconds_total",
        "trireme_storage_sync_seconds_total",
        "trireme_storage_apply_seconds_total",
    ] {
        let grew = counter(&written, name) - counter(&after, name);
        // In seconds: three writes take milliseconds (in microseconds this would be thousands).
        assert!(grew > 0.0 && grew < 5.0, "{name} grew by {grew}");
    }
    // These may not grow for writes that find nothing to wait for, but they are there.
    for name in [
        "trireme_raft_entries_completed_total",
        "trireme_raft_gather_seconds_total",
        "trireme_storage_sync_wait_seconds_total",
    ] {
        counter(&written, name);
    }
}

#[tokio::test]
async fn oversized_key_value_and_body_are_refused_and_node_keeps_serving() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;

    // Keys: 8192 bytes is the limit, inclusive.
    let at_limit = "k".repeat(8192);
    assert!(node.put(&at_limit, "ok").await);
    assert_eq!(node.get(&at_limit).await.unwrap().value, b"ok");
    let over = "k".repeat(8193);
    let resp = c.put(node.kv_url(&over)).body("x").send().await.unwrap();
    expect_error(resp, StatusCode::BAD_REQUEST, "key_too_large").await;
    still_serves(&node, "after/key").await;

    // Values: 512 KiB is the limit, inclusive.
    let value = vec![b'v'; 512 * 1024];
    assert!(node.put("big/at-limit", value.clone()).await);
    assert_eq!(node.get("big/at-limit").await.unwrap().value, value);
    let resp = c
        .put(node.kv_url("big/over"))
        .body(vec![b'v'; 512 * 1024 + 1])
        .send()
        .await
        .unwrap();
    expect_error(resp, StatusCode::PAYLOAD_TOO_LARGE, "value_too_large").await;
    assert!(node.get("big/over").await.is_none(), "refused value stored");
    still_serves(&node, "after/value").await;

    // A body past the request cap (1 MiB + 64 KiB). A client of its own: the server may
    // close this connection (see `request_too_large_answer_announces_connection_close`).
    let resp = http_client()
        .put(node.kv_url("big/huge"))
        .body(vec![b'h'; 2 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    expect_error(resp, StatusCode::PAYLOAD_TOO_LARGE, "request_too_large").await;
    assert!(node.get("big/huge").await.is_none(), "refused body stored");
    still_serves(&node, "after/body").await;
}

#[tokio::test]
async fn bad_query_values_name_the_parameter() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;
    assert!(node.put("q/k", "v").await);
    let cases = [
        ("PUT", "?cas=abc", "?cas"),
        ("PUT", "?cas=-1", "?cas"),
        ("PUT", "?flags=-1", "?flags"),
        ("PUT", "?flags=x", "?flags"),
        ("DELETE", "?cas=abc", "?cas"),
    ];
    for (method, query, name) in cases {
        let url = format!("{}{query}", node.kv_url("q/k"));
        let req = match method {
            "PUT" => c.put(url).body("changed"),
            _ => c.delete(url),
        };
        let resp = req.send().await.unwrap();
        let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
        assert!(message.contains(name), "{method} {query}: {message}");
        // The refused request changed nothing, and the node still serves.
        assert_eq!(
            node.get("q/k").await.unwrap().value,
            b"v",
            "{method} {query}"
        );
        still_serves(&node, "q/after").await;
    }
}

#[tokio::test]
async fn configured_limits_apply() {
    let node = TestNode::start(
        StartOptions::default().config("[limits]\nmax_key_bytes = 16\nmax_value_bytes = 100\n"),
    )
    .await;
    let c = &node.http;
    assert!(node.put(&"k".repeat(16), vec![b'v'; 100]).await);
    let resp = c
        .put(node.kv_url(&"k".repeat(17)))
        .body("x")
        .send()
        .await
        .unwrap();
    expect_error(resp, StatusCode::BAD_REQUEST, "key_too_large").await;
    let resp = c
        .put(node.kv_url("small"))
        .body(vec![b'v'; 101])
        .send()
        .await
        .unwrap();
    expect_error(resp, StatusCode::PAYLOAD_TOO_LARGE, "value_too_large").await;
    still_serves(&node, "after").await;
}

#[tokio::test]

async fn request_too_large_answer_announces_connection_close() {
    let node = TestNode::start(StartOptions::default()).await;
    let resp = node
        .http
        .put(node.kv_url("big/huge"))
        .body(vec![b'h'; 2 * 1024 * 1024])
        .send()
        .await
        .unwrap();
    assert_eq!(resp.status(), StatusCode::PAYLOAD_TOO_LARGE);
    let connection = resp
        .headers()
        .get("connection")
        .map(|v| v.to_str().unwrap().to_ascii_lowercase());
    assert_eq!(
        connection.as_deref(),
        Some("close"),
        "the server closes this connection after the answer, so it must say so"
    );
}

#[tokio::test]
async fn keys_are_percent_decoded_and_a_missing_key_is_refused() {
    let node = TestNode::start(StartOptions::default()).await;
    let c = &node.http;
    let resp = c
        .put(format!("{}/v1/kv/hello%20world", node.http_url()))
        .body("spaced")
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "true");
    let entry = node.get("hello%20world").await.expect("decoded key");
    assert_eq!(entry.key, "hello world");
    assert_eq!(entry.value, b"spaced");

    // An encoded slash is the same key as a literal one.
    assert!(node.put("dir%2Fleaf", "x").await);
    assert_eq!(node.get("dir/leaf").await.unwrap().key, "dir/leaf");

    // UTF-8 keys round-trip.
    assert!(node.put("caf%C3%A9", "latte").await);
    let keys: Vec<String> = c
        .get(format!("{}?keys", node.kv_url("caf")))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(keys, ["café"]);

    // PUT /v1/kv/ with no key, as in Consul.
    let resp = c
        .put(format!("{}/v1/kv/", node.http_url()))
        .body("x")
        .send()
        .await
        .unwrap();
    let message = expect_error(resp, StatusCode::BAD_REQUEST, "invalid_argument").await;
    assert!(message.contains("Missing key"), "{message}");
    still_serves(&node, "after/missing-key").await;

    // Unsupported methods are refused without touching the key.
    let resp = c.post(node.kv_url("hello%20world")).send().await.unwrap();
    assert_eq!(resp.status(), StatusCode::METHOD_NOT_ALLOWED);
    assert_eq!(node.get("hello%20world").await.unwrap().value, b"spaced");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cas_is_atomic_under_contention() {
    let node = TestNode::start(StartOptions::default()).await;
    assert!(node.put("counter", "0").await);
    let url = node.kv_url("counter");
    let mut tasks = Vec::new();
    for _ in 0..6 {
        let url = url.clone();
        tasks.push(tokio::spawn(async move {
            let c = http_client();
            let mut wins = 0u64;
            for _ in 0..40 {
                let body: Value = c.get(&url).send().await.unwrap().json().await.unwrap();
                let entry = KvEntry::from_json(&body[0]);
                let n: u64 = String::from_utf8(entry.value).unwrap().parse().unwrap();
                let resp = c
                    .put(format!("{url}?cas={}", entry.modify_index))
                    .body((n + 1).to_string())
                    .send()
                    .await
                    .unwrap();
                if resp.text().await.unwrap() == "true" {
                    wins += 1;
                }
            }
            wins
        }));
    }
    let mut wins = 0;
    for t in tasks {
        wins += t.await.unwrap();
    }
    assert!(wins > 0);
    let value = node.get("counter").await.unwrap().value;
    assert_eq!(
        String::from_utf8(value).unwrap(),
        wins.to_string(),
        "every successful CAS must count exactly once"
    );
}

/// A client that never finishes its headers is cut off after the header timeout, and while it
/// (and a crowd of idle connections) hangs on, everyone else is served.
#[tokio::test]
async fn slow_and_idle_clients_do_not_starve_others() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let node =
        TestNode::start(StartOptions::default().config("[limits]\nheader_read_timeout_ms = 500\n"))
            .await;
    let addr = node.endpoints().http;

    let mut idle = Vec::new();
    for _ in 0..200 {
        idle.push(
            tokio::net::TcpStream::connect(addr)
                .await
                .expect("idle connection"),
        );
    }
    let mut slow = tokio::net::TcpStream::connect(addr)
        .await
        .expect("slow connection");
    slow.write_all(b"PUT /v1/kv/slow HTTP/1.1\r\nHost: x\r\nContent-Le")
        .await
        .expect("half a header");

    for i in 0..20 {
        still_serves(&node, &format!("busy/{i}")).await;
    }

    // The server closes the half-sent request (EOF or reset) well after 500 ms, well before 10 s.
    let started = std::time::Instant::now();
    let mut buf = [0u8; 1024];
    let outcome = tokio::time::timeout(Duration::from_secs(10), slow.read(&mut buf)).await;
    match outcome {
        Ok(Ok(n)) => {
            let answer = String::from_utf8_lossy(&buf[..n]);
            assert!(
                n == 0 || answer.starts_with("HTTP/1.1 408"),
                "unexpected answer {answer:?}"
            );
        }
        Ok(Err(_)) => {}
        Err(_) => panic!("a client holding half-sent headers was never cut off"),
    }
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(
        node.get("slow").await.is_none(),
        "a half-sent request wrote something"
    );
    still_serves(&node, "after/slow").await;
    drop(idle);
}

/// The value of the sample `series` (name and labels exactly), if present.
fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

/// Every sample of metric `name` (any labels).
fn samples<'a>(text: &'a str, name: &'a str) -> impl Iterator<Item = (&'a str, f64)> + 'a {
    text.lines().filter_map(move |l| {
        let rest = l.strip_prefix(name)?;
        let (labels, value) = rest.rsplit_once(' ')?;
        (labels.is_empty() || labels.starts_with('{')).then_some(())?;
        Some((labels, value.parse().ok()?))
    })
}

#[tokio::test]
async fn operator_metrics_move_with_requests() {
    let node = TestNode::start(StartOptions::default().shards(4)).await;
    let c = &node.http;
    let url = format!("{}/metrics", node.http_url());
    let scrape = || async {
        let resp = c.get(&url).send().await.unwrap();
        assert_eq!(resp.status(), 200);
        resp.text().await.unwrap()
    };

    // Writes through both front ends before the first scrape, which counts keys per shard.
    assert!(node.put("ops/a", "1").await);
    assert!(node.put("ops/b", "22").await);
    let mut r = RawResp::connect(node.resp_addr()).await;
    assert_eq!(r.cmd(&[b"SET", b"ops/c", b"333"]).await, b"+OK\r\n");
    for _ in 0..5 {
        node.get("ops/a").await.unwrap();
    }

    let first = scrape().await;
    let kv_get = "trireme_http_request_duration_seconds_count{route=\"kv\",method=\"GET\"}";
    assert_eq!(sample(&first, kv_get), Some(5.0), "{first}");
    assert_eq!(
        sample(
            &first,
            "trireme_http_request_duration_seconds_bucket{route=\"kv\",method=\"GET\",le=\"+Inf\"}"
        ),
        Some(5.0)
    );
    assert!(
        sample(
            &first,
            "trireme_http_request_duration_seconds_sum{route=\"kv\",method=\"GET\"}"
        )
        .is_some_and(|s| s > 0.0 && s < 5.0)
    );
    assert_eq!(
        sample(
            &first,
            "trireme_http_request_duration_seconds_count{route=\"kv\",method=\"PUT\"}"
        ),
        Some(2.0)
    );
    assert!(first.contains("# TYPE trireme_http_request_duration_seconds histogram"));
    // This scrape's own connection is open while it is answered.
    assert!(sample(&first, "trireme_http_connections_open").is_some_and(|n| n >= 1.0));
    assert_eq!(sample(&first, "trireme_resp_connections_open"), Some(1.0));
    assert_eq!(
        sample(
            &first,
            "trireme_resp_command_duration_seconds_count{command=\"set\"}"
        ),
        Some(1.0)
    );

    // Per shard held here: all four, led by this node, first leader counted.
    let roles: Vec<_> = samples(&first, "trireme_replica_role").collect();
    assert_eq!(roles.len(), 4, "{first}");
    assert!(
        roles
            .iter()
            .all(|(l, v)| l.contains("role=\"Leader\"") && *v == 1.0)
    );
    let changes: Vec<_> = samples(&first, "trireme_shard_leader_changes_total").collect();
    assert_eq!(changes.len(), 4);
    assert!(changes.iter().all(|(_, v)| *v >= 1.0), "{changes:?}");
    // A fresh group opens at term 0; electing its first leader begins term 1.
    let elections: Vec<_> = samples(&first, "trireme_shard_elections_total").collect();
    assert_eq!(elections.len(), 4);
    assert!(elections.iter().all(|(_, v)| *v >= 1.0), "{elections:?}");
    assert_eq!(samples(&first, "trireme_shard_committed_index").count(), 4);
    let keys: f64 = samples(&first, "trireme_shard_keys").map(|(_, v)| v).sum();
    assert_eq!(keys, 3.0, "{first}");
    let bytes: f64 = samples(&first, "trireme_shard_bytes").map(|(_, v)| v).sum();
    assert!(bytes > 3.0 * 6.0, "keys and values are counted: {bytes}");
    assert!(sample(&first, "trireme_shard_usage_age_seconds").is_some_and(|a| a < 30.0));
    for name in [
        "trireme_moves_started_total",
        "trireme_moves_completed_total",
        "trireme_moves_cancelled_total",
        "trireme_snapshot_sent_bytes_total",
        "trireme_snapshot_received_bytes_total",
    ] {
        assert_eq!(sample(&first, name), Some(0.0), "{name}");
    }

    // The histograms move with requests; the scrape itself is timed too.
    for _ in 0..3 {
        node.get("ops/b").await.unwrap();
    }
    assert_eq!(r.cmd(&[b"GET", b"ops/c"]).await, b"$3\r\n333\r\n");
    let info = Reply::parse(&r.cmd(&[b"INFO"]).await);
    let info = String::from_utf8_lossy(info.bulk()).to_string();
    assert!(info.contains("connected_clients:1\r\n"), "{info}");
    assert!(info.contains("db0:keys=3,"), "{info}");
    let used: u64 = info
        .lines()
        .find_map(|l| l.strip_prefix("used_memory:"))
        .and_then(|v| v.trim().parse().ok())
        .unwrap_or_else(|| panic!("no used_memory in {info}"));
    assert!(
        used > 1 << 20,
        "a running node uses more than 1 MiB: {used}"
    );

    let second = scrape().await;
    assert_eq!(sample(&second, kv_get), Some(8.0));
    assert!(
        sample(
            &second,
            "trireme_http_request_duration_seconds_count{route=\"metrics\",method=\"GET\"}"
        )
        .is_some_and(|n| n >= 1.0)
    );
    assert_eq!(
        sample(
            &second,
            "trireme_resp_command_duration_seconds_count{command=\"get\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(
            &second,
            "trireme_resp_command_duration_seconds_count{command=\"info\"}"
        ),
        Some(1.0)
    );

    // A closed RESP connection is no longer counted open.
    drop(r);
    let closed = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(20),
        || async { sample(&scrape().await, "trireme_resp_connections_open") == Some(0.0) },
    )
    .await;
    assert!(closed, "trireme_resp_connections_open never fell back to 0");
}
