//! Area 61: a running cluster grows, shrinks and heals. A node joins and replicas move to it;
//! a node is drained and removed, stops, and its data directory is refused; a dead node is
//! removed by force and its replicas rebuilt; the whole cluster restarts in the middle of a
//! move; a shard splits under load and `redis-cli -c` follows; bad membership commands
//! change nothing. Writers run throughout, and every
//! acknowledged write is read back at the end.
//!
//! Real processes on loopback, one cluster at a time, every wait under a deadline.

use crate::common;

use crate::common::cluster::{
    ClusterOptions, Steady, TestCluster, assert_acked_readable, bounded, free_ports, peer_addr,
    spawn_steady_writer, wait_for_acks,
};
use crate::common::{run_program_async, wait_until};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use trireme_types::cluster_status::{ClusterStatus, RemoveResult, SplitResult};

/// How long a cluster may take to settle after a membership change (moves run two at a time,
/// each a snapshot and two membership changes, on a busy 2-core machine).
const SETTLE: Duration = Duration::from_secs(120);

/// `GET /v1/cluster/status` of node `via`.
async fn status(c: &TestCluster, via: usize) -> Option<ClusterStatus> {
    let url = format!("{}/v1/cluster/status", c.node(via).http_url());
    c.http.get(&url).send().await.ok()?.json().await.ok()
}

/// Replicas per node in state `state`.
fn replicas_in(status: &ClusterStatus, state: &str) -> BTreeMap<String, u32> {
    status
        .nodes
        .iter()
        .filter(|n| n.state == state)
        .map(|n| (n.name.clone(), n.replicas))
        .collect()
}

/// Polls node `via` until no move is in progress and `done` holds; returns that status.
async fn settle(
    c: &TestCluster,
    via: usize,
    what: &str,
    done: impl Fn(&ClusterStatus) -> bool,
) -> ClusterStatus {
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        let seen = status(c, via).await;
        if let Some(s) = seen.as_ref().filter(|s| s.moves.is_empty() && done(s)) {
            return s.clone();
        }
        assert!(
            std::time::Instant::now() < deadline,
            "never {what}; last status {seen:#?}\n{}",
            c.logs()
        );
        // Pacing between looks, not synchronization: the condition is checked each time.
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Stops a steady writer and checks that it only ever failed with retryable answers.
async fn finish_writer(stop: &AtomicBool, writer: tokio::task::JoinHandle<Steady>) -> Steady {
    finish_writer_allowing(stop, writer, &["status 503"]).await
}

/// Stops a steady writer and checks that every failure it met has one of the `allowed`
/// answers (a 504 is allowed where a node the writes are forwarded to is killed: its outcome
/// is unknown, and only acknowledged writes are read back).
async fn finish_writer_allowing(
    stop: &AtomicBool,
    writer: tokio::task::JoinHandle<Steady>,
    allowed: &[&str],
) -> Steady {
    stop.store(true, Ordering::SeqCst);
    let steady = writer.await.expect("steady writer");
    assert!(!steady.acked.is_empty(), "no write was acknowledged");
    let unexpected: Vec<&String> = steady
        .failures
        .iter()
        .filter(|f| !allowed.iter().any(|a| f.contains(a)))
        .collect();
    assert!(
        unexpected.is_empty(),
        "writes failed with something other than {allowed:?}: {unexpected:#?}"
    );
    steady
}

/// `POST /v1/cluster/nodes/{name}/remove[?force]` through node `via`: status and body.
async fn remove(c: &TestCluster, via: usize, name: &str, force: bool) -> (u16, String) {
    let mut url = format!("{}/v1/cluster/nodes/{name}/remove", c.node(via).http_url());
    if force {
        url.push_str("?force=true");
    }
    let resp = c.http.post(&url).send().await.expect("POST remove");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_joining_node_gets_its_share_of_replicas_while_writes_go_on() {
    let mut c = TestCluster::start(ClusterOptions::default().shards(8)).await;
    let before = status(&c, 0).await.expect("status").epoch;
    let stop = Arc::new(AtomicBool::new(false));
    let (count, writer) = spawn_steady_writer(&c, &[0, 1, 2], "grow/", stop.clone());
    wait_for_acks(&count, 20).await;
    let n4 = c.add_node().await;
    bounded(SETTLE * 2, async {
        // 24 replicas over 4 nodes, and 8 preferred leaders two each.
        let settled = settle(&c, 0, "moved 6 replicas to n4", |s| {
            replicas_in(s, "active").values().all(|n| *n == 6)
                && replicas_in(s, "active").len() == 4
                && s.nodes.iter().all(|n| n.preferred_leaders == 2)
        })
        .await;
        assert!(settled.epoch > before, "the map's epoch did not move");
        assert!(settled.at_replication_factor());
        // The new node reads everything written before, during and after its join.
        wait_for_acks(&count, count.load(Ordering::SeqCst) + 20).await;
        let steady = finish_writer(&stop, writer).await;
        assert_acked_readable(&c, n4, "grow/", &steady).await;
        // And the view is the same from the newcomer.
        let from_n4 = status(&c, n4).await.expect("status from n4");
        assert_eq!(from_n4.epoch, settled.epoch);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_that_joins_after_a_split_serves_every_shard_it_receives() {
    let mut c = TestCluster::start(ClusterOptions::default().shards(4)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (count, writer) = spawn_steady_writer(&c, &[0, 1, 2], "late/", stop.clone());
    wait_for_acks(&count, 20).await;
    bounded(SETTLE * 3, async {
        let (code, body) = split(&c, 0, "2", None).await;
        assert_eq!(code, 200, "{body}");
        settle(&c, 0, "split shard 2", |s| {
            s.splits.is_empty() && s.shards.len() == 5
        })
        .await;
        // The newcomer learns the layout of shards no split touched from the bootstrap
        // count, not from today's five shards.
        let n4 = c.add_node().await;
        let settled = settle(&c, 0, "gave n4 its replicas", |s| {
            replicas_in(s, "active").len() == 4
                && replicas_in(s, "active").get("n4").is_some_and(|r| *r >= 3)
        })
        .await;
        assert!(settled.at_replication_factor());
        wait_for_acks(&count, count.load(Ordering::SeqCst) + 20).await;
        let steady = finish_writer(&stop, writer).await;
        assert_acked_readable(&c, n4, "late/", &steady).await;
        // Its own replicas answer reads that stay on the node (a follower may trail the
        // last writes by a moment, so each key gets a few seconds to show up).
        for key in &steady.acked {
            let deadline = std::time::Instant::now() + Duration::from_secs(5);
            loop {
                let found = c.try_get(n4, key, "?stale").await;
                if matches!(&found, Ok((Some(e), _)) if e.value == key.as_bytes()) {
                    break;
                }
                assert!(
                    std::time::Instant::now() < deadline,
                    "{key} through n4 ?stale: {found:?}\n{}",
                    c.logs_tail(40)
                );
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    })
    .await;
}

/// Sends `remove` for both nodes at once, through different nodes, until exactly one is
/// accepted (a rebalancer write can make both lose their compare-and-set; then they are sent
/// again). Never may both be accepted. Returns the index of the node being drained.
async fn drain_one_of(c: &TestCluster, rivals: [(usize, &str); 2]) -> usize {
    for _ in 0..3 {
        let (a, b) = tokio::join!(
            remove(c, 0, rivals[0].1, false),
            remove(c, 1, rivals[1].1, false)
        );
        let accepted: Vec<usize> = [(&a, rivals[0].0), (&b, rivals[1].0)]
            .iter()
            .filter(|((code, _), _)| *code == 200)
            .map(|(_, index)| *index)
            .collect();
        for (code, body) in [&a, &b] {
            assert!(*code == 200 || *code == 409, "{code}: {body}");
        }
        assert!(accepted.len() < 2, "both removals accepted: {a:?} {b:?}");
        if let Some(&index) = accepted.first() {
            let (_, body) = if accepted[0] == rivals[0].0 { &a } else { &b };
            let answer: RemoveResult = serde_json::from_str(body).expect("a RemoveResult");
            assert_eq!(answer.state, "draining");
            let (_, refused) = if accepted[0] == rivals[0].0 { &b } else { &a };
            assert!(
                refused.contains("add a node first") || refused.contains("try again"),
                "{refused}"
            );
            return index;
        }
    }
    panic!("neither of two rival removals was accepted in three tries");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drained_node_hands_over_stops_and_its_data_directory_is_refused() {
    let c = TestCluster::start(ClusterOptions {
        nodes: 4,
        ..ClusterOptions::default().shards(8)
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    // The writer avoids n3 and n4: either may be the one drained.
    let (count, writer) = spawn_steady_writer(&c, &[0, 1], "drain/", stop.clone());
    wait_for_acks(&count, 20).await;
    bounded(SETTLE * 2, async {
        // Two operators remove n3 and n4 at once: with four nodes for three voters only one
        // may go. The other is refused (the map changed under it, or no room is left).
        let drained = drain_one_of(&c, [(2, "n3"), (3, "n4")]).await;
        let name = c.name(drained);
        let settled = settle(&c, 0, "drained a node", |s| {
            s.nodes
                .iter()
                .any(|n| n.name == name && n.state == "removed")
        })
        .await;
        assert!(settled.at_replication_factor(), "{settled:#?}");
        assert_eq!(replicas_in(&settled, "removed").get(&name), Some(&0));
        assert_eq!(replicas_in(&settled, "active").len(), 3, "{settled:#?}");
        // The removed node stops by itself (its process exits; a zombie counts as gone).
        let pid = c.node(drained).pid();
        let stopped = wait_until(SETTLE, Duration::from_millis(100), || async {
            !trireme_local::process_alive(pid)
        })
        .await;
        assert!(
            stopped,
            "{name} kept running after its removal\n{}",
            c.logs()
        );
        assert!(
            c.node(drained)
                .stderr_log()
                .contains("was removed from the cluster"),
            "{name} did not say why it stopped\n{}",
            c.node(drained).stderr_log()
        );
        let steady = finish_writer(&stop, writer).await;
        assert_acked_readable(&c, 1, "drain/", &steady).await;

        // Started again on its data directory, it is refused, saying why.
        let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_trireme"))
            .args(c.node(drained).server_args())
            .output()
            .await
            .expect("run trireme server");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(i32::from(trireme_types::admin::EXIT_REMOVED)),
            "a removed node started again, or failed for another reason: {stderr}"
        );
        assert!(stderr.contains("was removed from cluster"), "{stderr}");
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_node_removed_by_force_has_its_replicas_rebuilt() {
    let mut c = TestCluster::start(ClusterOptions {
        nodes: 4,
        ..ClusterOptions::default().shards(8)
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let (count, writer) = spawn_steady_writer(&c, &[0, 2, 3], "heal/", stop.clone());
    wait_for_acks(&count, 20).await;
    c.kill9(1).await;
    bounded(SETTLE * 2, async {
        let (code, body) = remove(&c, 0, "n2", true).await;
        assert_eq!(code, 200, "{body}");
        let answer: RemoveResult = serde_json::from_str(&body).expect("a RemoveResult");
        assert_eq!(answer.state, "removed");
        assert!(answer.lost_quorum.is_empty(), "{answer:?}");
        // Each survivor ends with its share: 24 replicas over 3 nodes (between two moves
        // the counts may be uneven for a moment).
        let settled = settle(&c, 0, "rebuilt n2's replicas", |s| {
            s.at_replication_factor() && replicas_in(s, "active").values().all(|n| *n == 8)
        })
        .await;
        assert_eq!(
            replicas_in(&settled, "removed").get("n2"),
            Some(&0),
            "{settled:#?}"
        );
        wait_for_acks(&count, count.load(Ordering::SeqCst) + 20).await;
        // Writes forwarded to the killed node's shards may time out (504) when it dies.
        let steady = finish_writer_allowing(&stop, writer, &["status 503", "status 504"]).await;
        assert_acked_readable(&c, 3, "heal/", &steady).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cluster_restarted_in_the_middle_of_a_move_finishes_it() {
    let mut c = TestCluster::start(ClusterOptions::default().shards(8)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (count, writer) = spawn_steady_writer(&c, &[0, 1, 2], "restart/", stop.clone());
    wait_for_acks(&count, 50).await;
    let n4 = c.add_node().await;
    let moving = wait_until(SETTLE, Duration::from_millis(20), || async {
        status(&c, 0).await.is_some_and(|s| !s.moves.is_empty())
    })
    .await;
    assert!(moving, "no move started after n4 joined\n{}", c.logs());
    let steady = finish_writer(&stop, writer).await;
    c.kill9_all().await;
    c.restart_stopped().await;
    bounded(SETTLE * 2, async {
        let settled = settle(&c, 0, "finished the moves after the restart", |s| {
            replicas_in(s, "active").len() == 4
                && replicas_in(s, "active").values().all(|n| *n == 6)
        })
        .await;
        assert!(settled.at_replication_factor(), "{settled:#?}");
        assert_acked_readable(&c, n4, "restart/", &steady).await;
    })
    .await;
}

/// `POST /v1/cluster/shards/{shard}/split[?at=...]` through node `via`: status and body.
async fn split(c: &TestCluster, via: usize, shard: &str, at: Option<&str>) -> (u16, String) {
    let mut url = format!("{}/v1/cluster/shards/{shard}/split", c.node(via).http_url());
    if let Some(at) = at {
        url.push_str(&format!("?at={at}"));
    }
    let resp = c.http.post(&url).send().await.expect("POST split");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

/// `redis-cli -c` (it follows MOVED answers like a cluster client) against node `via`.
async fn redis_cli(c: &TestCluster, via: usize, args: &[&str]) -> String {
    let port = c.node(via).resp_addr().port().to_string();
    let mut all = vec!["-c", "-h", "127.0.0.1", "-p", &port];
    all.extend_from_slice(args);
    let (ok, stdout, stderr) = run_program_async("redis-cli", &all, Duration::from_secs(30)).await;
    assert!(ok, "redis-cli {args:?} failed: {stdout}\n{stderr}");
    stdout
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_split_under_load_hands_over_its_keys_and_loses_nothing() {
    let mut c = TestCluster::start(ClusterOptions::default().shards(4)).await;
    let stop = Arc::new(AtomicBool::new(false));
    let (count, writer) = spawn_steady_writer(&c, &[0, 1, 2], "split/", stop.clone());
    wait_for_acks(&count, 100).await;
    // Keys of shard 1 written through RESP before the split, read back after it.
    let tagged: Vec<String> = (0..40)
        .map(|i| format!("resp{i}"))
        .filter(|k| c.shard_of(k) == 1)
        .collect();
    assert!(tagged.len() >= 5, "some keys fall in shard 1: {tagged:?}");
    for key in &tagged {
        assert_eq!(redis_cli(&c, 0, &["SET", key, key]).await.trim(), "OK");
    }
    bounded(SETTLE * 2, async {
        let before = status(&c, 0).await.expect("status");
        // A burst of writes to the slots the new shard takes, through the node that will be
        // its preferred leader, from just before the split until it is done.
        let preferred = c
            .index_of(&before.shards[1].replicas[0])
            .expect("a node of the cluster");
        let url = c.node(preferred).http_url();
        let burst_stop = Arc::new(AtomicBool::new(false));
        let bursts: Vec<_> = (0..16)
            .map(|t| {
                let (client, url, stop) = (c.http.clone(), url.clone(), burst_stop.clone());
                tokio::spawn(async move {
                    let mut slowest = Duration::ZERO;
                    let mut n = 0;
                    while !stop.load(Ordering::SeqCst) {
                        let key = format!("burst{t}-{n}");
                        n += 1;
                        if !(6144..=8191).contains(&trireme_types::key_slot(key.as_bytes())) {
                            continue;
                        }
                        let started = std::time::Instant::now();
                        let put = common::cluster::try_put_url(
                            &client,
                            &format!("{url}/v1/kv/{key}"),
                            &key,
                        )
                        .await;
                        slowest = slowest.max(started.elapsed());
                        assert!(
                            put.is_ok() || slowest < Duration::from_secs(5),
                            "{key}: {put:?} after {slowest:?}"
                        );
                    }
                    slowest
                })
            })
            .collect();
        let (code, body) = split(&c, 1, "1", None).await;
        assert_eq!(code, 200, "{body}");
        let started: SplitResult = serde_json::from_str(&body).expect("a split");
        assert_eq!(
            (started.shard.0, started.child.0, started.at_slot),
            (1, 4, 6144),
            "{body}"
        );
        let settled = settle(&c, 2, "split shard 1", |s| {
            s.splits.is_empty() && s.shards.len() == 5
        })
        .await;
        assert!(settled.epoch > before.epoch);
        let slots: BTreeMap<u32, [u16; 2]> = settled
            .shards
            .iter()
            .map(|s| (s.shard.0, s.slots))
            .collect();
        assert_eq!(slots[&1], [4096, 6143]);
        assert_eq!(slots[&4], [6144, 8191]);
        assert_eq!(settled.shards[4].replicas.len(), 3);
        c.expect_all_led(SETTLE).await;
        burst_stop.store(true, Ordering::SeqCst);
        for burst in bursts {
            let slowest = burst.await.expect("burst writer");
            assert!(
                slowest < Duration::from_secs(5),
                "a write to the new shard's slots took {slowest:?} during the split"
            );
        }

        // Writes go on through the split and after it, into both halves.
        wait_for_acks(&count, count.load(Ordering::SeqCst) + 100).await;
        let steady = finish_writer(&stop, writer).await;
        // Requests for the keys handed over wait for the new shard, but not for long (a
        // request that cannot be served gives up after the 10 s request timeout).
        assert!(
            steady.slowest < Duration::from_secs(5),
            "a write took {:?} during the split; failures: {:?}",
            steady.slowest,
            steady.failures
        );
        let upper = steady
            .acked
            .iter()
            .filter(|k| trireme_types::key_slot(k.as_bytes()) >= 6144)
            .filter(|k| trireme_types::key_slot(k.as_bytes()) <= 8191)
            .count();
        assert!(upper > 10, "writes reached the new shard's slots: {upper}");
        for via in 0..3 {
            assert_acked_readable(&c, via, "split/", &steady).await;
        }
        // The redis-cli cluster client finds the new shard and every key where it is.
        let nodes = redis_cli(&c, 0, &["CLUSTER", "SHARDS"]).await;
        assert!(
            nodes.contains("6144"),
            "CLUSTER SHARDS shows the new range: {nodes}"
        );
        for key in &tagged {
            assert_eq!(redis_cli(&c, 2, &["GET", key]).await.trim(), key.as_str());
        }
        let moved = tagged
            .iter()
            .find(|k| trireme_types::key_slot(k.as_bytes()) >= 6144)
            .or(tagged.first())
            .expect("a key");
        assert_eq!(
            redis_cli(&c, 1, &["SET", moved, "after"]).await.trim(),
            "OK"
        );
        assert_eq!(redis_cli(&c, 0, &["GET", moved]).await.trim(), "after");

        // The new shard's state survives a restart of the whole cluster.
        c.kill9_all().await;
        c.restart_stopped().await;
        c.expect_all_led(SETTLE).await;
        assert_acked_readable(&c, 1, "split/", &steady).await;
        assert_eq!(redis_cli(&c, 2, &["GET", moved]).await.trim(), "after");
        let again = status(&c, 0).await.expect("status");
        assert_eq!(again.shards.len(), 5);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_py_cluster_with_its_defaults_keeps_working_across_a_split() {
    let c = TestCluster::start(ClusterOptions::default().shards(4)).await;
    let python = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/../../target/test-venv/bin/python"
    );
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/clients/redis_cluster_split.py"
    );
    let folder = tempfile::tempdir().expect("temp dir");
    let port = c.node(0).resp_addr().port().to_string();
    let client = tokio::process::Command::new(python)
        .args([script, "127.0.0.1", &port])
        .arg(folder.path())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("run redis-py (scripts/install-test-deps.sh installs it)");
    bounded(SETTLE, async {
        let started = folder.path().join("started");
        let writing = wait_until(
            Duration::from_secs(60),
            Duration::from_millis(20),
            || async { started.exists() },
        )
        .await;
        assert!(writing, "redis-py never acknowledged 100 writes");
        let (code, body) = split(&c, 1, "1", None).await;
        assert_eq!(code, 200, "{body}");
        settle(&c, 0, "split shard 1", |s| {
            s.splits.is_empty() && s.shards.len() == 5
        })
        .await;
        std::fs::write(folder.path().join("stop"), b"").expect("stop file");
        let output = client.wait_with_output().await.expect("redis-py ran");
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(
            output.status.success(),
            "redis-py lost or misread writes across the split: {stdout}\n{}",
            String::from_utf8_lossy(&output.stderr)
        );
        let seen: serde_json::Value = serde_json::from_str(stdout.trim()).expect("a JSON line");
        assert_eq!(seen["protocol"], 3, "redis-py's default is RESP3: {seen}");
        assert!(seen["acked"].as_u64() > Some(200), "{seen}");
        let ranges = seen["ranges"].as_array().expect("ranges");
        assert_eq!(
            ranges.len(),
            5,
            "CLUSTER SHARDS shows the new shard: {seen}"
        );
        assert!(
            ranges.iter().any(|r| r[0] == 6144 && r[1] == 8191),
            "{seen}"
        );
    })
    .await;
}

/// Two shards that split by themselves past 1 MiB, into three at most.
async fn size_split_cluster() -> TestCluster {
    TestCluster::start(ClusterOptions {
        timing: common::cluster::RaftTiming {
            snapshot_every: Some(100),
            ..Default::default()
        },
        cluster: "split_bytes = 1048576\nmax_shards = 3".into(),
        ..ClusterOptions::default().shards(2)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_past_the_size_threshold_splits_by_itself() {
    let c = size_split_cluster().await;
    bounded(SETTLE, async {
        // About 2.5 MB into shard 0 only; shard 1 stays small.
        let value = "v".repeat(10_000);
        let mut written = Vec::new();
        for n in 0.. {
            let key = format!("big{n}");
            if c.shard_of(&key) != 0 {
                continue;
            }
            c.put(n % 3, &key, &value).await;
            written.push(key);
            if written.len() == 250 {
                break;
            }
        }
        let settled = settle(&c, 1, "split shard 0 by itself", |s| {
            s.shards.len() == 3 && s.splits.is_empty()
        })
        .await;
        let slots: BTreeMap<u32, [u16; 2]> = settled
            .shards
            .iter()
            .map(|s| (s.shard.0, s.slots))
            .collect();
        // Cut where the bytes halve: the new shard takes the upper part of shard 0's range,
        // and each part holds a fair share of the keys written (all of one size).
        let cut = slots[&2][0];
        assert_eq!(slots[&0], [0, cut - 1], "{settled:#?}");
        assert_eq!(slots[&2], [cut, 8191], "{settled:#?}");
        let lower = written
            .iter()
            .filter(|k| trireme_types::key_slot(k.as_bytes()) < cut)
            .count();
        assert!(
            (63..=187).contains(&lower),
            "{lower} of 250 keys below the cut at slot {cut}"
        );
        let automatic = metric_sum(&c, "trireme_splits_automatic_total").await;
        assert!(automatic >= 1.0, "no automatic split counted");
        for key in &written {
            let entry = c.get(2, key, "").await.expect("the key reads back");
            assert_eq!(entry.value.len(), value.len());
        }
    })
    .await;
}

/// The sum of `name` over every node's `/metrics`.
async fn metric_sum(c: &TestCluster, name: &str) -> f64 {
    let mut sum = 0.0;
    for i in 0..3 {
        let metrics = c
            .http
            .get(format!("{}/metrics", c.node(i).http_url()))
            .send()
            .await
            .expect("metrics")
            .text()
            .await
            .expect("metrics body");
        sum += metrics
            .lines()
            .find_map(|l| l.strip_prefix(name)?.strip_prefix(' '))
            .and_then(|v| v.trim().parse::<f64>().ok())
            .unwrap_or(0.0);
    }
    sum
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_grown_by_one_big_key_is_not_split() {
    let c = size_split_cluster().await;
    bounded(SETTLE, async {
        // About 2.5 MB into one key of shard 0: a split would leave all of it on one side.
        let key = (0..)
            .map(|n| format!("big{n}"))
            .find(|k| c.shard_of(k) == 0)
            .expect("a key of shard 0");
        let mut redis = common::RawResp::connect(c.node(0).resp_addr()).await;
        let value = "v".repeat(10_000);
        for n in 0..250 {
            let field = format!("f{n}");
            let added = redis
                .cmd(&[b"HSET", key.as_bytes(), field.as_bytes(), value.as_bytes()])
                .await;
            assert_eq!(added, b":1\r\n");
        }
        let declined = wait_until(SETTLE, Duration::from_millis(200), || async {
            metric_sum(&c, "trireme_splits_declined_total").await >= 1.0
        })
        .await;
        assert!(declined, "no automatic split was declined");
        let after = status(&c, 0).await.expect("status");
        assert_eq!(after.shards.len(), 2, "{after:#?}");
        assert_eq!(metric_sum(&c, "trireme_splits_automatic_total").await, 0.0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_membership_commands_are_refused_and_change_nothing() {
    let c = TestCluster::start(ClusterOptions::default().shards(2)).await;
    bounded(SETTLE, async {
        let before = status(&c, 0).await.expect("status");

        let (code, body) = remove(&c, 1, "nx", false).await;
        assert_eq!(code, 404, "{body}");
        assert!(body.contains("no node named"), "{body}");

        // Three nodes for three voters: draining one would leave shards short.
        let (code, body) = remove(&c, 1, "n3", false).await;
        assert_eq!(code, 409, "{body}");
        assert!(body.contains("add a node first"), "{body}");

        let url = format!(
            "{}/v1/cluster/nodes/n3/remove?force=maybe",
            c.node(0).http_url()
        );
        let resp = c.http.post(&url).send().await.expect("POST");
        assert_eq!(resp.status().as_u16(), 400);

        // Splits of a shard that does not exist, at a slot outside the shard, or of no shard.
        let (code, body) = split(&c, 0, "7", None).await;
        assert_eq!(code, 404, "{body}");
        assert!(body.contains("no shard 7"), "{body}");
        let (code, body) = split(&c, 0, "1", Some("100")).await;
        assert_eq!(code, 400, "{body}");
        assert!(body.contains("owns slots 8192..=16383"), "{body}");
        for bad in ["x", "-1"] {
            let (code, body) = split(&c, 0, bad, None).await;
            assert_eq!(code, 400, "{bad}: {body}");
        }
        let (code, body) = split(&c, 0, "0", Some("99999")).await;
        assert_eq!(code, 400, "{body}");

        // A node of another cluster, one that takes a member's name, and one that advertises
        // a member's address are refused.
        let via = peer_addr(c.node(0)).to_string();
        let taken = c
            .node(1)
            .http_url()
            .trim_start_matches("http://")
            .to_string();
        for (name, cluster, extra, expect) in [
            ("n9", "other", vec![], "belongs to cluster"),
            ("n2", "trireme", vec![], "already a member"),
            (
                "n9",
                "trireme",
                vec!["--advertise-http", taken.as_str()],
                "is already used by member",
            ),
        ] {
            let dir = tempfile::tempdir().expect("temp dir");
            let ports = free_ports(3);
            let output = tokio::process::Command::new(env!("CARGO_BIN_EXE_trireme"))
                .args(["server", "--node-id", name, "--cluster-name", cluster])
                .arg("--data-dir")
                .arg(dir.path())
                .args(["--http", &format!("127.0.0.1:{}", ports[0])])
                .args(["--resp", &format!("127.0.0.1:{}", ports[1])])
                .args(["--peer", &format!("127.0.0.1:{}", ports[2])])
                .args(["--join", &via])
                .args(&extra)
                .output()
                .await
                .expect("run trireme server");
            let stderr = String::from_utf8_lossy(&output.stderr);
            assert!(!output.status.success(), "{name} joined\n{stderr}");
            assert!(stderr.contains(expect), "{name}: {stderr}");
        }

        let after = status(&c, 0).await.expect("status");
        assert_eq!(
            after.epoch, before.epoch,
            "a refused command changed the map"
        );
        assert_eq!(after.nodes.len(), 3, "{after:#?}");
    })
    .await;
}

/// `POST /v1/cluster/nodes/{name}/cancel-drain` through node `via`: status and body.
async fn cancel_drain(c: &TestCluster, via: usize, name: &str) -> (u16, String) {
    let url = format!(
        "{}/v1/cluster/nodes/{name}/cancel-drain",
        c.node(via).http_url()
    );
    let resp = c.http.post(&url).send().await.expect("POST cancel-drain");
    (
        resp.status().as_u16(),
        resp.text().await.unwrap_or_default(),
    )
}

/// Drains node `drained` through node `via` and waits until a replica is moving away from it;
/// the status then, which shows how far the drain has come.
async fn drain_until_moving(c: &TestCluster, via: usize, drained: usize) -> ClusterStatus {
    let name = c.name(drained);
    let (code, body) = remove(c, via, &name, false).await;
    assert_eq!(code, 200, "{body}");
    let deadline = std::time::Instant::now() + SETTLE;
    loop {
        if let Some(s) = status(c, via).await
            && !s.moves.is_empty()
        {
            let node = s.nodes.iter().find(|n| n.name == name).expect("listed");
            let progress = node
                .drain
                .as_ref()
                .expect("a draining node shows its progress");
            assert!(progress.replicas_left > 0, "{s:#?}");
            return s;
        }
        assert!(std::time::Instant::now() < deadline, "no move began");
        // Pacing between looks, not synchronization.
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits (from node `via`) until `name` is removed with every shard back at its replication
/// factor, and then until its process has stopped by itself.
async fn settle_drained(c: &TestCluster, via: usize, drained: usize) {
    let name = c.name(drained);
    let settled = settle(c, via, "finished the drain", |s| {
        s.at_replication_factor()
            && s.nodes
                .iter()
                .any(|n| n.name == name && n.state == "removed" && n.drain.is_none())
    })
    .await;
    assert_eq!(replicas_in(&settled, "removed").get(&name), Some(&0));
}

/// A node (not the metadata leader) is drained; in the middle of its drain the metadata leader
/// is killed, and started again once another node leads. The next metadata leader carries the
/// drain on from the map: it finishes within two minutes, and every acknowledged write of a
/// writer on the two other nodes is read back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_goes_on_after_its_metadata_leader_is_killed() {
    let mut c = TestCluster::start(ClusterOptions {
        nodes: 4,
        ..ClusterOptions::default().shards(8)
    })
    .await;
    let first = status(&c, 0).await.expect("status");
    let leader = first
        .meta_leader
        .as_deref()
        .and_then(|n| c.index_of(n))
        .expect("a metadata leader");
    let drained = (0..4).rev().find(|i| *i != leader).expect("another node");
    let others: Vec<usize> = (0..4).filter(|i| *i != leader && *i != drained).collect();
    let stop = Arc::new(AtomicBool::new(false));
    let (count, writer) = spawn_steady_writer(&c, &others, "meta-kill/", stop.clone());
    wait_for_acks(&count, 20).await;
    bounded(SETTLE * 2, async {
        drain_until_moving(&c, others[0], drained).await;
        c.kill9(leader).await;
        let old = c.name(leader);
        let moved_on = wait_until(SETTLE, Duration::from_millis(100), || async {
            status(&c, others[0])
                .await
                .and_then(|s| s.meta_leader)
                .is_some_and(|l| l != old)
        })
        .await;
        assert!(moved_on, "no new metadata leader\n{}", c.logs());
        c.restart(leader).await;
        settle_drained(&c, others[0], drained).await;
        wait_for_acks(&count, count.load(Ordering::SeqCst) + 20).await;
        // Writes forwarded to the killed node's shards may time out (504) when it dies.
        let steady = finish_writer_allowing(&stop, writer, &["status 503", "status 504"]).await;
        assert_acked_readable(&c, others[1], "meta-kill/", &steady).await;
    })
    .await;
}

/// In the middle of a drain every other node (a majority) is killed and started again, as
/// chaos seed 9103 did: the drain finishes within two minutes of their restart, and the
/// keys written before are all there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_goes_on_after_a_majority_is_killed() {
    let mut c = TestCluster::start(ClusterOptions {
        nodes: 4,
        ..ClusterOptions::default().shards(8)
    })
    .await;
    let pairs: Vec<(String, String)> = (0..40)
        .map(|i| (format!("majority/{i}"), format!("v{i}")))
        .collect();
    c.put_all(&pairs, 4).await;
    let drained = 3;
    bounded(SETTLE * 3, async {
        drain_until_moving(&c, 0, drained).await;
        for i in 0..3 {
            c.kill9(i).await;
        }
        c.restart_stopped().await;
        settle_drained(&c, 0, drained).await;
        for (key, value) in &pairs {
            let entry = c.get(1, key, "?consistent").await;
            assert_eq!(
                entry.map(|e| e.value),
                Some(value.as_bytes().to_vec()),
                "{key}"
            );
        }
    })
    .await;
}

/// A draining node killed in the middle of its drain is removed while it is down. Started
/// again on its data directory, it stops within 5 s with its message and exit status 3
/// (it does not wait for groups that no longer replicate to it); cancelling the finished
/// drain is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_removed_while_it_was_down_stops_at_once_when_started() {
    let mut c = TestCluster::start(ClusterOptions {
        nodes: 4,
        ..ClusterOptions::default().shards(8)
    })
    .await;
    let drained = 3;
    bounded(SETTLE * 2, async {
        drain_until_moving(&c, 0, drained).await;
        c.kill9(drained).await;
        settle_drained(&c, 0, drained).await;
        let started = std::time::Instant::now();
        let output = tokio::time::timeout(
            Duration::from_secs(60),
            tokio::process::Command::new(env!("CARGO_BIN_EXE_trireme"))
                .args(c.node(drained).server_args())
                .kill_on_drop(true)
                .output(),
        )
        .await
        .expect("the removed node stops by itself")
        .expect("run trireme server");
        let took = started.elapsed();
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert_eq!(
            output.status.code(),
            Some(i32::from(trireme_types::admin::EXIT_REMOVED)),
            "{stderr}"
        );
        assert!(stderr.contains("was removed from"), "{stderr}");
        assert!(
            took <= Duration::from_secs(5),
            "stopped after {took:?}\n{stderr}"
        );
        // Started once more, the data directory itself now says so.
        let again = tokio::process::Command::new(env!("CARGO_BIN_EXE_trireme"))
            .args(c.node(drained).server_args())
            .output()
            .await
            .expect("run trireme server");
        assert_eq!(
            again.status.code(),
            Some(i32::from(trireme_types::admin::EXIT_REMOVED))
        );
        let (code, body) = cancel_drain(&c, 0, &c.name(drained)).await;
        assert_eq!(code, 409, "{body}");
        assert!(body.contains("removed already"), "{body}");
        let (code, body) = cancel_drain(&c, 0, "n9").await;
        assert_eq!(code, 404, "{body}");
    })
    .await;
}

/// `trireme cluster cancel-drain` right after a drain began: the node is active again, the
/// cluster settles with every node holding its share, and a second cancellation changes
/// nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_is_cancelled_before_it_finishes() {
    let c = TestCluster::start(ClusterOptions {
        nodes: 4,
        ..ClusterOptions::default().shards(8)
    })
    .await;
    let stop = Arc::new(AtomicBool::new(false));
    let (count, writer) = spawn_steady_writer(&c, &[0, 1], "cancel/", stop.clone());
    wait_for_acks(&count, 20).await;
    bounded(SETTLE * 2, async {
        let (code, body) = remove(&c, 0, "n4", false).await;
        assert_eq!(code, 200, "{body}");
        let target = c.node(1).http_url();
        let (ok, stdout, stderr) = run_program_async(
            env!("CARGO_BIN_EXE_trireme"),
            &["cluster", "cancel-drain", "n4", "--target", &target],
            Duration::from_secs(30),
        )
        .await;
        assert!(ok, "{stdout}\n{stderr}");
        assert!(stdout.contains("active again"), "{stdout}");
        // 24 replicas over 4 active nodes again, n4 among them.
        let settled = settle(&c, 0, "gave n4 its share back", |s| {
            s.at_replication_factor()
                && replicas_in(s, "active").len() == 4
                && replicas_in(s, "active").values().all(|n| *n == 6)
        })
        .await;
        assert!(settled.nodes.iter().all(|n| n.drain.is_none()));
        let (code, body) = cancel_drain(&c, 1, "n4").await;
        assert_eq!(code, 200, "{body}");
        assert!(body.contains("nothing changed"), "{body}");
        wait_for_acks(&count, count.load(Ordering::SeqCst) + 20).await;
        let steady = finish_writer(&stop, writer).await;
        assert_acked_readable(&c, 3, "cancel/", &steady).await;
    })
    .await;
}
