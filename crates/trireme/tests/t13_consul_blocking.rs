//! Area 13: Consul blocking queries (`?index=&wait=`). Consul's Go client watches a key, a
//! prefix and a key listing on a 3-node cluster, and keeps a watch across a killed leader by
//! blocking through another node; raw requests check the index across a node
//! with no replica of the key (its wait runs on another node), a leader killed under a
//! watcher, a shard split, a client that hangs up, and the parameters refused.

use crate::common::cluster::{ClusterOptions, TestCluster, bounded, header, poll_until};
use crate::common::{
    StartOptions, TestNode, blocking_queries_waiting, clients, until_blocking_queries,
};
use serde_json::Value;
use std::time::{Duration, Instant};

/// A client for requests that may block longer than the shared client's timeout.
fn patient() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("reqwest client")
}

/// `GET url`: status, `X-Consul-Index`, body.
async fn get(client: &reqwest::Client, url: &str) -> (u16, u64, String) {
    let resp = client.get(url).send().await.expect("GET");
    let status = resp.status().as_u16();
    let index = match status {
        200 | 404 => header(resp.headers(), "X-Consul-Index")
            .parse()
            .unwrap_or(0),
        _ => 0,
    };
    (status, index, resp.text().await.unwrap_or_default())
}

/// A blocking GET of `url` with `?index=` (or `&index=`), running until it answers.
fn watch(url: String, index: u64) -> tokio::task::JoinHandle<(u16, u64, String, Duration)> {
    tokio::spawn(async move {
        let sep = if url.contains('?') { '&' } else { '?' };
        let started = Instant::now();
        let (status, index, body) =
            get(&patient(), &format!("{url}{sep}index={index}&wait=30s")).await;
        (status, index, body, started.elapsed())
    })
}

/// `github.com/hashicorp/consul/api` with its defaults: Get, List and Keys with `WaitIndex`
/// hold until a write through another node changes what they read (a delete included) and
/// answer with a higher index; with nothing changing they hold for their `WaitTime`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consuls_go_client_watches_keys_and_prefixes() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("consul/watch", out.path()).await;
    let c = TestCluster::start(ClusterOptions::default()).await;
    let mut client = tokio::process::Command::new(&binary);
    client
        .arg(c.node(0).http_url().trim_start_matches("http://"))
        .arg(c.node(1).http_url().trim_start_matches("http://"));
    let output = clients::run_bounded(client, Duration::from_secs(120), "the Consul client").await;
    let seen = clients::json_line(&output, &c.logs());
    assert_eq!(seen["failures"], Value::Null, "{seen}");
}

/// Consul's Go client keeps its watch across a failover: it reads a key's index through the
/// shard's leader, the leader is killed, and the client blocks through another node with the
/// index it has. That node must hold the query (not answer at once with an index that went
/// back, which the client would take for a reset) until the next write, then answer with the
/// new value and a higher index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn consuls_go_client_keeps_its_watch_across_a_leader_killed() {
    let out = tempfile::tempdir().expect("temp dir");
    let binary = clients::go_build("consul/failover", out.path()).await;
    let mut c = TestCluster::start(ClusterOptions::default()).await;
    let key = "failover/k";
    c.put(0, key, "v1").await;
    let shard = c.shard_of(key);
    let leader = leader_of(&c, shard).await;
    let go = |args: Vec<String>| {
        let mut command = tokio::process::Command::new(&binary);
        command.args(args);
        clients::run_bounded(command, Duration::from_secs(60), "the Consul client")
    };
    let addr = |c: &TestCluster, i: usize| {
        c.node(i)
            .http_url()
            .trim_start_matches("http://")
            .to_string()
    };
    let first = clients::json_line(
        &go(vec!["index".into(), addr(&c, leader), key.into()]).await,
        "index",
    );
    let index = first["index"].as_u64().expect("index");
    assert_eq!(first["value"], "v1");

    c.kill9(leader).await;
    // The watcher comes back once the shard has a leader again, as a client retrying would.
    leader_of(&c, shard).await;
    let via = c.running()[0];
    let writer = c.running()[1];
    let watcher = tokio::spawn(go(vec![
        "wait".into(),
        addr(&c, via),
        key.into(),
        index.to_string(),
    ]));
    until_blocking_queries(c.node(via), 1).await;
    c.put(writer, key, "v2").await;
    let output = watcher.await.expect("watcher");
    let woke = clients::json_line(&output, &c.logs_tail(40));
    assert_eq!(woke["value"], "v2", "held until the write: {woke}");
    assert!(
        woke["index"].as_u64() > Some(index),
        "index {} after {index}",
        woke["index"]
    );
}

/// On a 4-node cluster a node without a replica of the key's shard waits on another node;
/// a write wakes it at once, and a watcher that hangs up frees that wait at once. Then the
/// shard's leader is killed: the index the watcher holds is still the key's on every node
/// left, a blocking query there holds, and the next write wakes it with a higher index.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_survives_a_remote_wait_and_a_leader_killed() {
    let mut c = TestCluster::start(ClusterOptions {
        nodes: 4,
        ..ClusterOptions::default()
    })
    .await;
    bounded(Duration::from_secs(120), async {
        // A shard without a replica on some node: its watchers there wait remotely.
        let views = c.view(0).await.expect("shards view");
        let (shard, outsider) = views
            .iter()
            .find_map(|v| {
                (0..4)
                    .find(|&i| !v.replicas.contains(&c.name(i)))
                    .map(|i| (v.shard, i))
            })
            .expect("with 4 nodes and 3 replicas some node lacks each shard");
        let key = c.key_in_shard(shard, "remote/");
        let writer = (0..4).find(|&i| i != outsider).expect("another node");
        c.put(writer, &key, "v1").await;
        let url = c.node(outsider).kv_url(&key);
        let (_, first, _) = get(&patient(), &url).await;

        // The waits of the outsider's watchers, registered on the nodes holding the shard.
        let remote_waits = async |n: u64| {
            poll_until(
                Duration::from_secs(10),
                Duration::from_millis(20),
                || async {
                    let mut total = 0;
                    for i in (0..4).filter(|&i| i != outsider) {
                        total += blocking_queries_waiting(c.node(i)).await;
                    }
                    if total == n { Ok(()) } else { Err(total) }
                },
            )
            .await
            .unwrap_or_else(|total| panic!("{total} remote waits, never {n}"));
        };

        // A watcher that hangs up frees its remote wait at once (not after its round).
        let quitter = watch(url.clone(), first);
        remote_waits(1).await;
        quitter.abort();
        remote_waits(0).await;

        let watcher = watch(url.clone(), first);
        remote_waits(1).await;
        c.put(writer, &key, "v2").await;
        let (status, second, body, took) = watcher.await.expect("watcher");
        assert_eq!(status, 200, "{body}");
        assert!(second > first, "index {second} after {first}");
        assert!(body.contains("djI="), "the new value: {body}");
        assert!(took < Duration::from_secs(15), "woken after {took:?}");

        // Kill the shard's leader; every node left answers the same index for the key.
        let leader = leader_of(&c, shard).await;
        c.kill9(leader).await;
        leader_of(&c, shard).await;
        let left: Vec<usize> = c.running();
        for &i in &left {
            // Each node answers once it knows the new leader; then with the same index.
            let answer = poll_until(
                Duration::from_secs(20),
                Duration::from_millis(50),
                || async {
                    match get(&patient(), &c.node(i).kv_url(&key)).await {
                        (200, index, body) => Ok((index, body)),
                        _ => Err(()),
                    }
                },
            )
            .await;
            let (index, body) = answer.unwrap_or_else(|_| panic!("node {i} never answered"));
            assert_eq!(index, second, "node {i}: {body}");
        }
        // A watcher on another node, holding the index from before the failover, waits for
        // the next change and no longer.
        let via = left[0];
        let watcher = watch(c.node(via).kv_url(&key), second);
        let writer = left[left.len() - 1];
        c.put(writer, &key, "v3").await;
        let (status, third, body, _) = watcher.await.expect("watcher");
        assert_eq!(status, 200, "{body}");
        assert!(third > second, "index {third} after {second}");
        assert!(body.contains("djM="), "the newest value: {body}");
    })
    .await;
}

/// The running node that leads `shard` (nodes without a replica do not know it), once one
/// does.
async fn leader_of(c: &TestCluster, shard: u32) -> usize {
    poll_until(
        Duration::from_secs(30),
        Duration::from_millis(50),
        || async {
            for i in c.running() {
                let leads = c
                    .view(i)
                    .await
                    .is_some_and(|views| views.iter().any(|v| v.shard == shard && v.is_leader()));
                if leads {
                    return Ok(i);
                }
            }
            Err(())
        },
    )
    .await
    .unwrap_or_else(|_| panic!("shard {shard} has no leader\n{}", c.logs()))
}

/// A split moves keys to a new shard with a log of its own: the index of a moved key and of
/// a listing over both halves never goes back, and grows with the next write.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn indexes_keep_growing_across_a_split() {
    let c = TestCluster::start(ClusterOptions::default().shards(2)).await;
    bounded(Duration::from_secs(120), async {
        c.expect_all_led(Duration::from_secs(30)).await;
        let keys: Vec<String> = (0..40).map(|i| format!("split/{i:02}")).collect();
        for key in &keys {
            c.put(0, key, "before").await;
        }
        let client = patient();
        let list_url = format!("{}?recurse", c.node(1).kv_url("split/"));
        let (_, list_before, _) = get(&client, &list_url).await;
        let mut key_before = Vec::new();
        for key in &keys {
            key_before.push(get(&client, &c.node(1).kv_url(key)).await.1);
        }

        let resp = c
            .http
            .post(format!(
                "{}/v1/cluster/shards/0/split",
                c.node(0).http_url()
            ))
            .send()
            .await
            .expect("POST split");
        assert_eq!(resp.status().as_u16(), 200, "{:?}", resp.text().await);
        poll_until(
            Duration::from_secs(60),
            Duration::from_millis(100),
            || async {
                match c.view(1).await {
                    Some(v) if v.len() == 3 && v.iter().all(|s| s.leader.is_some()) => Ok(()),
                    _ => Err(()),
                }
            },
        )
        .await
        .expect("the split never finished");

        let (_, list_after, _) = get(&client, &list_url).await;
        assert!(list_after >= list_before, "{list_after} < {list_before}");
        for (key, before) in keys.iter().zip(&key_before) {
            let (_, now, _) = get(&client, &c.node(2).kv_url(key)).await;
            assert_eq!(now, *before, "{key}: a key's index is its ModifyIndex");
            c.put(0, key, "after").await;
            let (_, after, _) = get(&client, &c.node(2).kv_url(key)).await;
            assert!(after > *before, "{key}: {after} after {before}");
        }
        let (_, list_last, _) = get(&client, &list_url).await;
        assert!(list_last > list_after, "{list_last} after {list_after}");
    })
    .await;
}

/// A client that hangs up frees its waiter at once; bad parameters are refused with
/// Consul's status and a JSON message, and the node keeps serving.
#[tokio::test]
async fn a_client_that_hangs_up_frees_its_waiter_and_bad_parameters_are_refused() {
    let node = TestNode::start(StartOptions::default()).await;
    let client = patient();
    let url = format!("{}/v1/kv/hang", node.http_url());
    client.put(&url).body("x").send().await.expect("PUT");
    let (_, index, _) = get(&client, &url).await;
    let watcher = watch(url.clone(), index);
    until_blocking_queries(&node, 1).await;
    watcher.abort();
    until_blocking_queries(&node, 0).await;

    for (query, says) in [
        ("index=abc", "Invalid index"),
        ("index=-1", "Invalid index"),
        ("index=1&wait=5", "Invalid wait time"),
        ("index=1&wait=soon", "Invalid wait time"),
    ] {
        let resp = client
            .get(format!("{url}?{query}"))
            .send()
            .await
            .expect("GET");
        assert_eq!(resp.status().as_u16(), 400, "{query}");
        let body: Value = resp.json().await.expect("a JSON error");
        assert!(
            body["error"].as_str().is_some_and(|e| e.contains(says)),
            "{query}: {body}"
        );
    }
    // A wait past the maximum is cut to it, as in Consul: with an index already passed the
    // answer comes at once.
    let (status, _, _) = get(&client, &format!("{url}?index=1&wait=1h")).await;
    assert_eq!(status, 200);
}
