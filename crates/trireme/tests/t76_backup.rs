//! Area 76: `trireme backup` and `trireme restore` against real clusters: a backup of a
//! 4-node, 4-shard cluster (three replicas each) taken while a client keeps writing, restored
//! into a one-node cluster of another shard count with every value, flag, expiry and document
//! intact; a damaged or truncated file, a target that is not empty, or one whose limits are
//! too small, refused with nothing written.

use crate::common;

use crate::common::cluster::{ClusterOptions, TestCluster};
use crate::common::{RawResp, Reply, ReplyExt, StartOptions, TestNode, binary, http_client};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Duration;

/// Runs `trireme ARGS` within 120 s: success, stdout, stderr.
async fn trireme(args: &[&str]) -> (bool, String, String) {
    common::run_program_async(binary(), args, Duration::from_secs(120)).await
}

/// The keys a node lists (`?keys`), empty when it has none.
async fn keys(base: &str) -> Vec<String> {
    let resp = http_client()
        .get(format!("{base}/v1/kv/?keys"))
        .send()
        .await
        .expect("GET ?keys");
    if resp.status() == 404 {
        return Vec::new();
    }
    resp.json().await.expect("a JSON list of keys")
}

/// Entry `key` as `/v1/kv` answers it.
async fn entry(base: &str, key: &str) -> serde_json::Value {
    let resp = http_client()
        .get(format!("{base}/v1/kv/{key}"))
        .send()
        .await
        .expect("GET");
    assert_eq!(resp.status(), 200, "{key}");
    let body: serde_json::Value = resp.json().await.expect("JSON");
    body[0].clone()
}

fn value_of(entry: &serde_json::Value) -> String {
    use base64::Engine as _;
    let b64 = entry["Value"].as_str().unwrap_or_default();
    String::from_utf8(
        base64::engine::general_purpose::STANDARD
            .decode(b64)
            .expect("base64"),
    )
    .expect("UTF-8")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backup_taken_under_writes_restores_into_a_cluster_of_another_shape() {
    // Four nodes for three replicas: the node asked does not hold every shard.
    let source = TestCluster::start(ClusterOptions {
        nodes: 4,
        shards: 4,
        ..ClusterOptions::default()
    })
    .await;
    let base = source.node(0).http_url();
    let pairs: Vec<(String, String)> = (0..300)
        .map(|i| (format!("b/k{i}"), format!("v{i}")))
        .collect();
    source.put_all(&pairs, 4).await;
    let client = http_client();
    let put = |url: String, body: &'static str| {
        let client = client.clone();
        async move {
            let resp = client.put(url).body(body).send().await.expect("PUT");
            assert!(resp.status().is_success(), "{}", resp.status());
        }
    };
    put(format!("{base}/v1/kv/flagged?flags=42"), "f").await;
    // Values near the limit: the restore must cut its pieces to fit a request body.
    let big = "x".repeat(400 * 1024);
    for i in 0..4 {
        let resp = client
            .put(format!("{base}/v1/kv/big/{i}"))
            .body(big.clone())
            .send()
            .await
            .expect("PUT");
        assert_eq!(resp.status(), 200);
    }
    put(format!("{base}/v0/users/alice"), r#"{"name":"Alice"}"#).await;
    let mut resp = RawResp::connect(source.node(1).resp_addr()).await;
    let ok = resp
        .cmd(&[b"SET", b"expiring", b"soon", b"PX", b"600000"])
        .await;
    assert_eq!(ok, b"+OK\r\n");
    let ok = resp
        .cmd(&[b"SET", b"bin\xff\x00key", b"\x00\x01\x02"])
        .await;
    assert_eq!(ok, b"+OK\r\n");
    // A hash larger than one backup entry (two of them), with an expiry, and a small one.
    let field_value = vec![b'h'; 1024];
    for i in 0..400 {
        let field = format!("f{i:03}");
        let added = resp
            .cmd(&[b"HSET", b"hash/big", field.as_bytes(), &field_value])
            .await;
        assert_eq!(added, b":1\r\n");
    }
    let set = resp.cmd(&[b"PEXPIRE", b"hash/big", b"600000"]).await;
    assert_eq!(set, b":1\r\n");
    let added = resp
        .cmd(&[b"HSET", b"hash/small", b"a", b"1", b"b", b"2"])
        .await;
    assert_eq!(added, b":2\r\n");
    let added = resp.cmd(&[b"SADD", b"set/tags", b"x", b"y", b"z"]).await;
    assert_eq!(added, b":3\r\n");
    let pushed = resp.cmd(&[b"RPUSH", b"list/q", b"c", b"a", b"b"]).await;
    assert_eq!(pushed, b":3\r\n");
    let scored = resp
        .cmd(&[
            b"ZADD",
            b"zset/board",
            b"2.5",
            b"b",
            b"-inf",
            b"a",
            b"1e20",
            b"c",
        ])
        .await;
    assert_eq!(scored, b":3\r\n");
    // A key held by a lock: its value is kept, the lock (and the session) are not.
    let session: serde_json::Value = client
        .put(format!("{base}/v1/session/create"))
        .body("{}")
        .send()
        .await
        .expect("session")
        .json()
        .await
        .expect("JSON");
    let id = session["ID"].as_str().expect("ID").to_string();
    let took = client
        .put(format!("{base}/v1/kv/locked?acquire={id}"))
        .body("leader")
        .send()
        .await
        .expect("acquire")
        .text()
        .await
        .expect("body");
    assert_eq!(took, "true");

    // A client keeps writing while the backup runs: the cluster serves throughout.
    let stop = Arc::new(AtomicBool::new(false));
    let during = Arc::new(AtomicU64::new(0));
    let writer = {
        let (stop, during, base, client) =
            (stop.clone(), during.clone(), base.clone(), client.clone());
        tokio::spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let n = during.load(Ordering::Relaxed);
                let resp = client
                    .put(format!("{base}/v1/kv/during/k{n}"))
                    .body("x")
                    .send()
                    .await
                    .expect("PUT during the backup");
                assert_eq!(resp.status(), 200);
                during.fetch_add(1, Ordering::Relaxed);
            }
        })
    };
    let started = common::wait_until(Duration::from_secs(10), Duration::from_millis(5), || {
        let during = during.clone();
        async move { during.load(Ordering::Relaxed) >= 5 }
    })
    .await;
    assert!(started, "the writer never got going");
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("cluster.trb");
    let file_arg = file.to_str().expect("path");
    let (ok, out, err) = trireme(&["backup", "--target", &base, "--out", file_arg]).await;
    stop.store(true, Ordering::Relaxed);
    writer.await.expect("writer");
    assert!(ok, "backup failed: {out}{err}");
    assert!(out.contains("from 4 shards"), "{out}");
    assert!(
        during.load(Ordering::Relaxed) > 0,
        "writes were served during the backup"
    );
    assert!(!dir.path().join("cluster.trb.partial").exists());

    // A cluster whose values are limited below the backup's largest: refused up front.
    let small =
        TestNode::start(StartOptions::default().config("[limits]\nmax_value_bytes = 102400\n"))
            .await;
    let (ok, _, err) = trireme(&["restore", file_arg, "--target", &small.http_url()]).await;
    assert!(!ok);
    assert!(err.contains("max_value_bytes"), "{err}");
    assert_eq!(keys(&small.http_url()).await, Vec::<String>::new());

    // Into one node with 2 shards, where a Consul session is open (not data: no refusal).
    let target = TestNode::start(StartOptions::default().shards(2)).await;
    let into = target.http_url();
    let opened = client
        .put(format!("{into}/v1/session/create"))
        .body("{}")
        .send()
        .await
        .expect("session");
    assert_eq!(opened.status(), 200);
    let (ok, out, err) = trireme(&["restore", file_arg, "--target", &into]).await;
    assert!(ok, "restore failed: {out}{err}");
    for (key, value) in &pairs {
        assert_eq!(value_of(&entry(&into, key).await), *value, "{key}");
    }
    for i in 0..4 {
        assert_eq!(value_of(&entry(&into, &format!("big/{i}")).await), big);
    }
    let flagged = entry(&into, "flagged").await;
    assert_eq!(flagged["Flags"], 42);
    let locked = entry(&into, "locked").await;
    assert_eq!(value_of(&locked), "leader");
    assert!(
        locked.get("Session").is_none_or(|s| s.is_null()),
        "{locked}"
    );
    let doc: serde_json::Value = client
        .get(format!("{into}/v0/users/alice"))
        .send()
        .await
        .expect("GET document")
        .json()
        .await
        .expect("JSON");
    assert_eq!(doc["name"], "Alice");
    let found: serde_json::Value = client
        .get(format!("{into}/v0/users?query=name:alice&consistent"))
        .send()
        .await
        .expect("search")
        .json()
        .await
        .expect("JSON");
    assert_eq!(found["total_count"], 1, "{found}");
    let mut resp = RawResp::connect(target.resp_addr()).await;
    let pttl = Reply::parse(&resp.cmd(&[b"PTTL", b"expiring"]).await).int();
    assert!((1..=600_000).contains(&pttl), "PTTL {pttl}");
    let bin = resp.cmd(&[b"GET", b"bin\xff\x00key"]).await;
    assert_eq!(bin, b"$3\r\n\x00\x01\x02\r\n");
    let small = resp.cmd(&[b"HGETALL", b"hash/small"]).await;
    assert_eq!(small, b"*4\r\n$1\r\na\r\n$1\r\n1\r\n$1\r\nb\r\n$1\r\n2\r\n");
    assert_eq!(resp.cmd(&[b"HLEN", b"hash/big"]).await, b":400\r\n");
    let last = Reply::parse(&resp.cmd(&[b"HGET", b"hash/big", b"f399"]).await);
    assert_eq!(last.bulk(), &field_value[..]);
    let pttl = Reply::parse(&resp.cmd(&[b"PTTL", b"hash/big"]).await).int();
    assert!((1..=600_000).contains(&pttl), "PTTL {pttl}");
    let tags = resp.cmd(&[b"SMEMBERS", b"set/tags"]).await;
    assert_eq!(tags, b"*3\r\n$1\r\nx\r\n$1\r\ny\r\n$1\r\nz\r\n");
    let queue = resp.cmd(&[b"LRANGE", b"list/q", b"0", b"-1"]).await;
    assert_eq!(
        queue, b"*3\r\n$1\r\nc\r\n$1\r\na\r\n$1\r\nb\r\n",
        "in order"
    );
    let board = resp
        .cmd(&[b"ZRANGE", b"zset/board", b"0", b"-1", b"WITHSCORES"])
        .await;
    assert_eq!(
        board,
        &b"*6\r\n$1\r\na\r\n$4\r\n-inf\r\n$1\r\nb\r\n$3\r\n2.5\r\n$1\r\nc\r\n$5\r\n1e+20\r\n"[..],
        "members with their scores, in score order"
    );
    // Every key the backup held, and the ones written during it that it caught.
    let restored = keys(&into).await;
    assert!(
        restored.len() >= pairs.len() + 11,
        "{} keys",
        restored.len()
    );
    // One entry per key, and one more for the big hash's second part.
    let n = restored.len() + 1;
    assert!(
        out.starts_with(&format!("restored {n} of {n} entries")),
        "{out}"
    );

    // Restoring again into the same cluster: refused, nothing written.
    let (ok, _, err) = trireme(&["restore", file_arg, "--target", &into]).await;
    assert!(!ok);
    assert!(err.contains("restore into an empty cluster"), "{err}");
    assert_eq!(keys(&into).await.len(), restored.len());
}

#[tokio::test]
async fn a_damaged_or_truncated_backup_is_refused_before_anything_is_written() {
    let source = TestNode::start(StartOptions::default()).await;
    let base = source.http_url();
    let client = http_client();
    for i in 0..50 {
        let resp = client
            .put(format!("{base}/v1/kv/k{i}"))
            .body(format!("value {i}"))
            .send()
            .await
            .expect("PUT");
        assert_eq!(resp.status(), 200);
    }
    let dir = tempfile::tempdir().expect("tempdir");
    let file = dir.path().join("good.trb");
    let (ok, out, err) = trireme(&[
        "backup",
        "--target",
        &base,
        "--out",
        file.to_str().expect("path"),
    ])
    .await;
    assert!(ok, "{out}{err}");
    let good = std::fs::read(&file).expect("backup file");

    let target = TestNode::start(StartOptions::default()).await;
    let into = target.http_url();
    let mut flipped = good.clone();
    let middle = flipped.len() / 2;
    flipped[middle] ^= 0x20;
    let cases: [(&str, Vec<u8>, &str); 3] = [
        ("flipped.trb", flipped, "damaged"),
        ("short.trb", good[..good.len() - 5].to_vec(), "truncated"),
        (
            "other.trb",
            b"key,value\nk1,v1\n".to_vec(),
            "not a Trireme backup",
        ),
    ];
    for (name, bytes, says) in cases {
        let path = dir.path().join(name);
        std::fs::write(&path, bytes).expect("write");
        let (ok, _, err) =
            trireme(&["restore", path.to_str().expect("path"), "--target", &into]).await;
        assert!(!ok, "{name} was accepted");
        assert!(
            err.contains(says) && err.contains("nothing was written"),
            "{name}: {err}"
        );
        assert_eq!(keys(&into).await, Vec::<String>::new(), "{name}");
    }
    // The good file restores.
    let (ok, out, err) =
        trireme(&["restore", file.to_str().expect("path"), "--target", &into]).await;
    assert!(ok, "{out}{err}");
    assert!(out.starts_with("restored 50 of 50 entries"), "{out}");
    assert_eq!(keys(&into).await.len(), 50);
}
