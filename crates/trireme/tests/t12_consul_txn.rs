//! Area 12: Consul's `/v1/txn` for KV, and `/v1/agent/self`. Consul's own Go client runs
//! transactions against a 3-node cluster, on keys in one shard and across shards; raw
//! requests check atomicity (a failed check undoes what came before it) and the errors for
//! what is refused. Transactions across shards under faults and contention are area 33.

use crate::common::clients;
use crate::common::cluster::{ClusterOptions, TestCluster};
use crate::common::{StartOptions, TestNode};
use serde_json::{Value, json};
use std::time::Duration;

async fn txn(node: &TestNode, body: &str) -> (u16, Value) {
    let response = reqwest::Client::new()
        .put(format!("{}/v1/txn", node.http_url()))
        .body(body.to_string())
        .send()
        .await
        .expect("PUT /v1/txn");
    let status = response.status().as_u16();
    let body = response.json().await.unwrap_or(Value::Null);
    (status, body)
}

/// `github.com/hashicorp/consul/api`'s `Txn` with its defaults: sets and a get together,
/// a transfer guarded by `check-index` and `cas`, a stale `cas` that rolls back the whole
/// transaction (and names the operation), `check-not-exists`, `delete-cas`; then the same
/// Vault's way, 20 keys under one prefix in every shard, with a lock taken among them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consuls_go_client_runs_kv_transactions_on_a_cluster() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("consul/txn", out.path()).await;
    let c = TestCluster::start(ClusterOptions::default()).await;
    let mut client = tokio::process::Command::new(&binary);
    client.arg(c.node(1).http_url().trim_start_matches("http://"));
    let output = clients::run_bounded(client, Duration::from_secs(120), "the Consul client").await;
    let seen = clients::json_line(&output, &c.logs());
    assert_eq!(seen["failures"], Value::Null, "{seen}");
}

/// A failed check undoes every write before it in the same transaction; a passing one lets
/// later operations see earlier ones.
#[tokio::test]
async fn a_failed_check_undoes_the_whole_transaction() {
    let node = TestNode::start(StartOptions::default()).await;
    let (status, body) = txn(
        &node,
        r#"[{"KV":{"Verb":"set","Key":"{t}/a","Value":"MQ=="}},
            {"KV":{"Verb":"delete","Key":"{t}/b"}},
            {"KV":{"Verb":"set","Key":"{t}/c","Value":"Mw=="}},
            {"KV":{"Verb":"check-not-exists","Key":"{t}/a"}}]"#,
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body,
        json!({"Results": null, "Errors": [{"OpIndex": 3, "What": "key \"{t}/a\" exists"}]})
    );
    // Nothing of it happened: the keys it set are missing.
    let get = reqwest::get(format!("{}/v1/kv/{{t}}/a", node.http_url()))
        .await
        .expect("GET");
    assert_eq!(get.status().as_u16(), 404);
    let get = reqwest::get(format!("{}/v1/kv/{{t}}/c", node.http_url()))
        .await
        .expect("GET");
    assert_eq!(get.status().as_u16(), 404);

    // In order: a get sees the set before it; check-index on the index it got passes.
    let (status, body) = txn(
        &node,
        r#"[{"KV":{"Verb":"set","Key":"{t}/a","Value":"MQ==","Flags":5}},
            {"KV":{"Verb":"get","Key":"{t}/a"}}]"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][1]["KV"]["Value"], "MQ==", "{body}");
    assert_eq!(body["Results"][1]["KV"]["Flags"], 5, "{body}");
    assert_eq!(body["Results"][0]["KV"]["Value"], Value::Null, "{body}");
    let index = body["Results"][0]["KV"]["ModifyIndex"].clone();
    let (status, body) = txn(
        &node,
        &format!(r#"[{{"KV":{{"Verb":"check-index","Key":"{{t}}/a","Index":{index}}}}}]"#),
    )
    .await;
    assert_eq!(status, 200, "{body}");
    assert_eq!(body["Results"][0]["KV"]["ModifyIndex"], index, "{body}");
    let stale = index.as_u64().unwrap_or(0) + 1000;
    let (status, body) = txn(
        &node,
        &format!(r#"[{{"KV":{{"Verb":"check-index","Key":"{{t}}/a","Index":{stale}}}}}]"#),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["Errors"][0]["What"],
        format!("current modify index {index} != {stale}"),
        "{body}"
    );
    // A stale cas names itself; delete-cas of a key that is gone succeeds, as in Consul.
    let (status, body) = txn(
        &node,
        &format!(r#"[{{"KV":{{"Verb":"cas","Key":"{{t}}/a","Value":"Mg==","Index":{stale}}}}}]"#),
    )
    .await;
    assert_eq!(status, 409, "{body}");
    assert_eq!(
        body["Errors"][0]["What"], "failed to set key \"{t}/a\", index is stale",
        "{body}"
    );
    let (status, body) = txn(
        &node,
        r#"[{"KV":{"Verb":"delete-cas","Key":"{t}/gone","Index":7}}]"#,
    )
    .await;
    assert_eq!(status, 200, "{body}");
}

/// Bad transactions get a clear error and change nothing; the node keeps serving.
#[tokio::test]
async fn refused_transactions_say_why() {
    let node = TestNode::start(StartOptions::default().config("[limits]\nmax_txn_ops = 4\n")).await;
    for (body, status, says) in [
        ("not json", 400, "Failed to parse body"),
        (
            r#"[{"KV":{"Verb":"frobnicate","Key":"k"}}]"#,
            400,
            "unknown KV verb",
        ),
        (
            r#"[{"KV":{"Verb":"set","Key":""}}]"#,
            400,
            "Key cannot be empty",
        ),
        (
            r#"[{"KV":{"Verb":"lock","Key":"k"}}]"#,
            400,
            "needs a Session",
        ),
        (r#"[{"Node":{"Verb":"get"}}]"#, 400, "only KV operations"),
        (
            r#"[{"KV":{"Verb":"set","Key":"k","Value":"%%%"}}]"#,
            400,
            "Value",
        ),
        (
            r#"[{"KV":{"Verb":"set","Key":"a"}},{"KV":{"Verb":"set","Key":"b"}},{"KV":{"Verb":"set","Key":"c"}},{"KV":{"Verb":"set","Key":"d"}},{"KV":{"Verb":"set","Key":"e"}}]"#,
            413,
            "too many operations (5 > 4)",
        ),
    ] {
        let (got, answer) = txn(&node, body).await;
        assert_eq!(got, status, "{body}: {answer}");
        assert!(answer.to_string().contains(says), "{body}: {answer}");
    }
    let keys = reqwest::get(format!("{}/v1/kv/?keys", node.http_url()))
        .await
        .expect("GET ?keys");
    assert_eq!(
        keys.status().as_u16(),
        404,
        "a refused transaction wrote something"
    );
}

/// `/v1/agent/self` answers the fields Consul's clients probe at start-up.
#[tokio::test]
async fn agent_self_names_the_node_and_its_datacenter() {
    let node = TestNode::start(StartOptions::default()).await;
    let body: Value = reqwest::get(format!("{}/v1/agent/self", node.http_url()))
        .await
        .expect("GET /v1/agent/self")
        .json()
        .await
        .expect("JSON");
    assert_eq!(body["Config"]["NodeName"], "n1", "{body}");
    assert_eq!(body["Config"]["Datacenter"], "trireme", "{body}");
    assert_eq!(body["Member"]["Name"], "n1", "{body}");
    assert_eq!(body["Member"]["Addr"], "127.0.0.1", "{body}");
    assert!(
        body["Member"]["Port"].as_u64().is_some_and(|p| p > 0),
        "{body}"
    );
}
