//! Area 30: acknowledged writes survive `kill -9` and restart.
//!
//! A write is acknowledged only after its log entry is fdatasync'ed, so SIGKILL at any moment
//! must lose none of them: every acknowledged write reads back exactly after a restart.

use crate::common;

use crate::common::{
    KvEntry, RawResp, Reply, ReplyExt, StartOptions, TestNode, http_client, wait_until,
};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::Mutex;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::Duration;

fn by_key(entries: Vec<KvEntry>) -> BTreeMap<String, KvEntry> {
    entries.into_iter().map(|e| (e.key.clone(), e)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sequential_writes_survive_kill9_with_their_indexes() {
    let mut node = TestNode::start(StartOptions::default()).await;
    let c = node.http.clone();
    for i in 0..120 {
        let url = format!("{}?flags={i}", node.kv_url(&format!("seq/{i:03}")));
        let resp = c.put(url).body(format!("value-{i}")).send().await.unwrap();
        assert_eq!(resp.text().await.unwrap(), "true");
    }
    // Overwrites and deletes are acknowledged writes too.
    for i in (0..120).step_by(10) {
        assert!(
            node.put(&format!("seq/{i:03}"), format!("second-{i}"))
                .await
        );
    }
    for i in (5..120).step_by(20) {
        let resp = c
            .delete(node.kv_url(&format!("seq/{i:03}")))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.text().await.unwrap(), "true");
    }
    let before = by_key(node.list("seq/").await);
    assert_eq!(before.len(), 120 - 6);

    node.kill9().await;
    node.restart().await;

    let after = by_key(node.list("seq/").await);
    assert_eq!(
        after.keys().collect::<Vec<_>>(),
        before.keys().collect::<Vec<_>>()
    );
    for (key, entry) in &before {
        assert_eq!(&after[key], entry, "{key} changed across kill -9");
    }
    assert_eq!(after["seq/010"].value, b"second-10");
    assert_eq!(after["seq/011"].value, b"value-11");
    assert_eq!(after["seq/011"].flags, 11);
    assert!(!after.contains_key("seq/005"));

    // Writing after recovery continues the indexes instead of reusing them.
    let old = after["seq/010"].clone();
    assert!(node.put("seq/010", "third").await);
    let now = node.get("seq/010").await.unwrap();
    assert!(now.modify_index > old.modify_index);
    assert_eq!(now.create_index, old.create_index);

    // A clean stop (SIGTERM) exits 0 and keeps everything too.
    let status = node.terminate().await;
    assert!(status.success(), "SIGTERM exit: {status}");
    node.restart().await;
    assert_eq!(node.get("seq/010").await.unwrap(), now);
    assert_eq!(node.list("seq/").await.len(), 120 - 6);
}

/// One cycle of the concurrent load: returns every acknowledged (key, value).
async fn load_until_killed(
    node: &mut TestNode,
    cycle: usize,
    writers: usize,
    kill_after: usize,
) -> Vec<(String, String)> {
    let acked: Arc<Mutex<Vec<(String, String)>>> = Arc::default();
    let count = Arc::new(AtomicUsize::new(0));
    let killed = Arc::new(AtomicBool::new(false));
    let errors_before_kill: Arc<Mutex<Vec<String>>> = Arc::default();
    let base = node.http_url();
    let mut tasks = Vec::new();
    for w in 0..writers {
        let (acked, count, killed) = (acked.clone(), count.clone(), killed.clone());
        let errors = errors_before_kill.clone();
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            let client = http_client();
            for n in 0.. {
                if killed.load(Ordering::SeqCst) {
                    break;
                }
                let key = format!("load/c{cycle}/w{w}/{n:05}");
                let value = format!("{key}#{n}");
                let result = client
                    .put(format!("{base}/v1/kv/{key}"))
                    .body(value.clone())
                    .send()
                    .await;
                let ok = match result {
                    Ok(resp) if resp.status() == 200 => {
                        matches!(resp.text().await.as_deref(), Ok("true"))
                    }
                    _ => false,
                };
                if ok {
                    acked.lock().expect("lock").push((key, value));
                    count.fetch_add(1, Ordering::SeqCst);
                } else {
                    // After the kill every request fails; before it none may.
                    if !killed.load(Ordering::SeqCst) {
                        errors.lock().expect("lock").push(key);
                    }
                    break;
                }
            }
        }));
    }
    let reached = wait_until(Duration::from_secs(30), Duration::from_millis(5), || {
        let count = count.clone();
        async move { count.load(Ordering::SeqCst) >= kill_after }
    })
    .await;
    killed.store(true, Ordering::SeqCst);
    node.kill9().await;
    for t in tasks {
        t.await.expect("writer task");
    }
    assert!(
        reached,
        "cycle {cycle}: only {} acknowledged writes in 30 s",
        count.load(Ordering::SeqCst)
    );
    let errors = errors_before_kill.lock().expect("lock").clone();
    assert!(
        errors.is_empty(),
        "cycle {cycle}: writes failed before the kill: {errors:?}\n{}",
        node.stderr_log()
    );
    acked.lock().expect("lock").clone()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_writes_under_concurrent_load_survive_repeated_kill9() {
    let mut node = TestNode::start(StartOptions::default()).await;
    let mut all_acked: Vec<(String, String)> = Vec::new();
    for cycle in 0..3 {
        let acked = load_until_killed(&mut node, cycle, 8, 300).await;
        assert!(acked.len() >= 300);
        node.restart().await;

        let present = by_key(node.list(&format!("load/c{cycle}/")).await);
        for (key, value) in &acked {
            let entry = present
                .get(key)
                .unwrap_or_else(|| panic!("cycle {cycle}: acknowledged {key} lost"));
            assert_eq!(entry.value, value.as_bytes(), "cycle {cycle}: {key}");
        }
        // Unacknowledged writes may or may not have landed, but nothing else can appear,
        // and whatever landed is whole.
        for (key, entry) in &present {
            let n = key.rsplit('/').next().unwrap().parse::<u64>().unwrap();
            assert_eq!(
                entry.value,
                format!("{key}#{n}").as_bytes(),
                "cycle {cycle}: torn or foreign value"
            );
        }
        // And nothing from earlier cycles went missing.
        all_acked.extend(acked);
        let everything = by_key(node.list("load/").await);
        for (key, value) in &all_acked {
            assert_eq!(
                everything.get(key).map(|e| e.value.as_slice()),
                Some(value.as_bytes()),
                "after cycle {cycle}: {key}"
            );
        }
    }
}

/// A log that grows by `snapshot_log_bytes` is snapshotted and purged long before
/// `snapshot_every` entries, and the node recovers from that snapshot after `kill -9`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_is_compacted_by_size_as_well_as_by_entries() {
    let config = "[raft]\nsnapshot_log_bytes = 1048576\nkeep_after_snapshot = 2\n";
    let mut node = start_logging_purges(1, config).await;
    let snapshot = node.data_dir().join("snapshots").join("shard-0.snap");

    // 48 writes of 64 KiB: 3 MiB of log in 48 entries, far below snapshot_every (20,000).
    write_big_values(&node).await;
    let compacted = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        let taken = snapshot.exists();
        let purged = node.stderr_log().contains("purge log");
        async move { taken && purged }
    })
    .await;
    assert!(compacted, "no snapshot and purge after 3 MiB of log");

    node.kill9().await;
    node.restart().await;
    read_big_values(&node).await;
}

/// Behind a snapshot, the log is purged down to `keep_after_snapshot_bytes` even when that
/// is far fewer entries than `keep_after_snapshot`, and the node recovers after `kill -9`
/// from the snapshot and what is left of the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_behind_a_snapshot_is_purged_by_size_as_well_as_by_entries() {
    // 1,000 entries would keep this whole test's log (48 entries); 128 KiB keeps one of them
    // (each is a little over 64 KiB).
    let config = "[raft]\nsnapshot_log_bytes = 1048576\nkeep_after_snapshot = 1000\n\
                  keep_after_snapshot_bytes = 131072\n";
    let mut opts = StartOptions::default().shards(1).config(config);
    opts.log = "warn,openraft::engine=info".into();
    let mut node = TestNode::start(opts).await;

    write_big_values(&node).await;
    // openraft logs the purge it was asked for, and the purge itself.
    let purged = wait_until(Duration::from_secs(10), Duration::from_millis(20), || {
        let log = node.stderr_log();
        async move { log.contains("trigger_purge_log: purge_upto") }
    })
    .await;
    assert!(
        purged,
        "no purge by size after 3 MiB of log:\n{}",
        node.stderr_log()
    );

    node.kill9().await;
    node.restart().await;
    read_big_values(&node).await;
}

/// Writes `big:0` .. `big:47`, 64 KiB each (3 MiB of log in 48 entries, one per write).
async fn write_big_values(node: &TestNode) {
    let mut conn = RawResp::connect(node.resp_addr()).await;
    for i in 0..48u8 {
        let value = vec![b'a' + i % 26; 64 * 1024];
        conn.send_cmd(&[b"SET", format!("big:{i}").as_bytes(), &value])
            .await;
        assert_eq!(conn.read_reply().await, b"+OK\r\n", "SET big:{i}");
    }
}

/// Checks every value `write_big_values` wrote.
async fn read_big_values(node: &TestNode) {
    let mut conn = RawResp::connect(node.resp_addr()).await;
    for i in 0..48u8 {
        conn.send_cmd(&[b"GET", format!("big:{i}").as_bytes()])
            .await;
        let want = [&b"$65536\r\n"[..], &vec![b'a' + i % 26; 64 * 1024], b"\r\n"].concat();
        assert!(conn.read_reply().await == want, "big:{i} after restart");
    }
}

/// A node with `shards` shards and `config`, logging openraft's log purges (at info level):
/// proof, in `stderr_log`, that compaction really ran.
async fn start_logging_purges(shards: u32, config: &str) -> TestNode {
    let mut opts = StartOptions::default().shards(shards).config(config);
    opts.log = "warn,openraft::engine::handler=info".into();
    TestNode::start(opts).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_from_snapshots_and_compacted_logs() {
    let config = "[raft]\nsnapshot_every = 50\nkeep_after_snapshot = 5\n";
    let mut node = start_logging_purges(2, config).await;

    // 500 keys from 4 writers: some 250 log entries per shard, so several snapshots each.
    let base = node.http_url();
    let mut tasks = Vec::new();
    for w in 0..4 {
        let base = base.clone();
        tasks.push(tokio::spawn(async move {
            let client = http_client();
            for i in (w..500).step_by(4) {
                let resp = client
                    .put(format!("{base}/v1/kv/snap/{i:03}?flags={i}"))
                    .body(format!("v{i}"))
                    .send()
                    .await
                    .expect("PUT");
                assert_eq!(resp.text().await.unwrap(), "true", "PUT snap/{i:03}");
            }
        }));
    }
    for t in tasks {
        t.await.expect("writer task");
    }
    // Overwrites and deletes after many snapshots have been taken.
    for i in (0..500).step_by(50) {
        assert!(node.put(&format!("snap/{i:03}"), "rewritten").await);
    }
    let resp = node
        .http
        .delete(node.kv_url("snap/499"))
        .send()
        .await
        .unwrap();
    assert_eq!(resp.text().await.unwrap(), "true");
    let before = by_key(node.list("snap/").await);
    assert_eq!(before.len(), 499);
    let applied_before: Vec<u64> = node
        .shards()
        .await
        .shards
        .iter()
        .map(|s| s.applied_index)
        .collect();
    assert!(
        applied_before.iter().all(|&a| a > 100),
        "each shard should have applied well past snapshot_every: {applied_before:?}"
    );

    assert!(
        node.stderr_log().contains("purge log"),
        "no log was purged after snapshots; this test would not exercise snapshot recovery"
    );

    for round in 0..2 {
        node.kill9().await;
        node.restart().await;
        let after = by_key(node.list("snap/").await);
        assert_eq!(after.len(), before.len(), "round {round}");
        for (key, entry) in &before {
            assert_eq!(after.get(key), Some(entry), "round {round}: {key}");
        }
        // Raft metrics may trail the first reads for a moment after the restart.
        let restored = wait_until(
            Duration::from_secs(10),
            Duration::from_millis(20),
            || async {
                let shards = node.shards().await;
                shards
                    .shards
                    .iter()
                    .zip(&applied_before)
                    .all(|(s, b)| s.applied_index >= *b)
            },
        )
        .await;
        assert!(
            restored,
            "round {round}: applied index went back: {:?} vs {applied_before:?}",
            node.shards().await
        );
    }
    assert_eq!(node.get("snap/100").await.unwrap().value, b"rewritten");
    assert_eq!(node.get("snap/101").await.unwrap().flags, 101);
    assert!(node.get("snap/499").await.is_none());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expiry_deadlines_survive_kill9() {
    let mut node = TestNode::start(StartOptions::default()).await;
    let mut c = RawResp::connect(node.resp_addr()).await;
    assert_eq!(
        c.cmd(&[b"SET", b"ttl/long", b"v", b"EX", b"1000"]).await,
        b"+OK\r\n"
    );
    assert_eq!(
        c.cmd(&[b"SET", b"ttl/short", b"v", b"PX", b"1500"]).await,
        b"+OK\r\n"
    );
    assert_eq!(c.cmd(&[b"SET", b"ttl/none", b"v"]).await, b"+OK\r\n");
    node.kill9().await;
    node.restart().await;

    let mut c = RawResp::connect(node.resp_addr()).await;
    let ttl = Reply::parse(&c.cmd(&[b"TTL", b"ttl/long"]).await).int();
    assert!((900..=1000).contains(&ttl), "TTL after restart: {ttl}");
    assert_eq!(c.cmd(&[b"TTL", b"ttl/none"]).await, b":-1\r\n");
    // The short key's deadline is absolute: it still expires, restart or not.
    let addr = node.resp_addr();
    let gone = wait_until(
        Duration::from_secs(15),
        Duration::from_millis(25),
        || async {
            let mut c = RawResp::connect(addr).await;
            c.cmd(&[b"EXISTS", b"ttl/short"]).await == b":0\r\n"
        },
    )
    .await;
    assert!(gone, "PX 1500 key outlived its deadline across a restart");
    let reaped = wait_until(
        Duration::from_secs(10),
        Duration::from_millis(25),
        || async {
            let mut c = RawResp::connect(addr).await;
            c.cmd(&[b"DBSIZE"]).await == b":2\r\n"
        },
    )
    .await;
    assert!(reaped, "the expired key was never reaped after the restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_resp_writes_acknowledged_before_kill9_survive() {
    let mut node = TestNode::start(StartOptions::default()).await;
    let addr = node.resp_addr();
    let acked = Arc::new(AtomicUsize::new(0));
    let writer = {
        let acked = acked.clone();
        tokio::spawn(async move {
            let mut c = RawResp::connect(addr).await;
            // Batches of 50 SETs in one write; a batch's replies come back in order.
            for batch in 0.. {
                let mut bytes = Vec::new();
                for i in 0..50 {
                    let n = batch * 50 + i;
                    bytes.extend(common::encode_cmd(&[
                        b"SET",
                        format!("pipe/{n:06}").as_bytes(),
                        format!("v{n}").as_bytes(),
                    ]));
                }
                if c.try_send(&bytes).await.is_err() {
                    return;
                }
                for _ in 0..50 {
                    match c.try_read_reply().await {
                        Some(r) if r == b"+OK\r\n" => {
                            acked.fetch_add(1, Ordering::SeqCst);
                        }
                        Some(r) => panic!("SET answered {:?}", String::from_utf8_lossy(&r)),
                        None => return,
                    }
                }
            }
        })
    };
    let reached = wait_until(
        Duration::from_secs(30),
        Duration::from_millis(5),
        || async { acked.load(Ordering::SeqCst) >= 1000 },
    )
    .await;
    node.kill9().await;
    writer.await.expect("writer task");
    assert!(
        reached,
        "only {} SETs acknowledged in 30 s",
        acked.load(Ordering::SeqCst)
    );
    let acked = acked.load(Ordering::SeqCst);
    node.restart().await;

    let present = by_key(node.list("pipe/").await);
    for n in 0..acked {
        let key = format!("pipe/{n:06}");
        let entry = present
            .get(&key)
            .unwrap_or_else(|| panic!("acknowledged {key} lost ({acked} acknowledged)"));
        assert_eq!(entry.value, format!("v{n}").as_bytes());
    }
    for (key, entry) in &present {
        let n: usize = key["pipe/".len()..].parse().unwrap();
        assert_eq!(entry.value, format!("v{n}").as_bytes(), "torn value");
    }
}
