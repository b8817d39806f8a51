//! Area 60: three real nodes on loopback: replication, forwarding to leaders, the three read
//! modes, leaders moving to their preferred replicas, and what leaders report of their
//! followers.
//!
//! Each test starts its own cluster (3 nodes, 2–4 shards, heartbeat 50 ms, elections
//! 300–600 ms); the harness runs one cluster at a time. Every wait polls under a deadline.

use crate::common::cluster::{
    CLUSTER_DEADLINE, ClusterOptions, TestCluster, bounded, header, key_slot, other_than,
    poll_until,
};
use crate::common::{RawResp, Reply, ReplyExt, wait_until};
use std::collections::BTreeMap;
use std::time::Duration;

// ---------------------------------------------------------------------------------------
// 1. replication
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_on_one_node_are_read_on_the_others_over_http_and_resp() {
    let c = TestCluster::start(ClusterOptions::default().shards(3)).await;
    bounded(Duration::from_secs(60), async {
        let keys = c.key_per_shard("repl/");
        // The harness computes slots itself; the server must agree, or "the shard of a key"
        // in every other test means nothing.
        let mut resp = RawResp::connect(c.node(1).resp_addr()).await;
        for key in keys
            .iter()
            .chain(["repl/{tag}x".to_string(), "other".into()].iter())
        {
            let slot = Reply::parse(&resp.cmd(&[b"CLUSTER", b"KEYSLOT", key.as_bytes()]).await);
            assert_eq!(
                slot.int(),
                i64::from(key_slot(key.as_bytes())),
                "slot of {key}"
            );
        }

        // HTTP: a PUT on each node in turn, read on both others, consistent and default.
        for (round, writer) in [0usize, 1, 2].into_iter().enumerate() {
            for key in &keys {
                let value = format!("{key}@{}#{round}", c.name(writer));
                c.put(writer, key, &value).await;
                let mut seen = Vec::new();
                for reader in (0..3).filter(|&r| r != writer) {
                    for query in ["?consistent", ""] {
                        let entry = c.get(reader, key, query).await.unwrap_or_else(|| {
                            panic!(
                                "{key} written on {} is missing on {} with {query:?}",
                                c.name(writer),
                                c.name(reader)
                            )
                        });
                        assert_eq!(
                            entry.value,
                            value.as_bytes(),
                            "{key} on {} with {query:?}",
                            c.name(reader)
                        );
                        seen.push(entry);
                    }
                }
                // Every node answered with the same record (same indexes), not a copy of it.
                assert!(
                    seen.windows(2).all(|w| w[0] == w[1]),
                    "{key}: different records on different nodes: {seen:?}"
                );
            }
        }

        // RESP: SET on one node, GET on the others; and the HTTP API sees the same key.
        for (i, key) in keys.iter().enumerate() {
            let writer = i % 3;
            let value = format!("resp-{key}-{writer}");
            let mut w = RawResp::connect(c.node(writer).resp_addr()).await;
            assert_eq!(
                w.cmd(&[b"SET", key.as_bytes(), value.as_bytes()]).await,
                b"+OK\r\n",
                "SET {key} on {}",
                c.name(writer)
            );
            for reader in (0..3).filter(|&r| r != writer) {
                let mut r = RawResp::connect(c.node(reader).resp_addr()).await;
                let got = Reply::parse(&r.cmd(&[b"GET", key.as_bytes()]).await);
                assert_eq!(
                    got,
                    Reply::Bulk(Some(value.clone().into_bytes().into())),
                    "GET {key} on {} after SET on {}",
                    c.name(reader),
                    c.name(writer)
                );
                let entry = c
                    .get(reader, key, "?consistent")
                    .await
                    .expect("key over HTTP");
                assert_eq!(entry.value, value.as_bytes());
            }
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 2. forwarding
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_and_cas_through_a_node_that_does_not_lead_the_shard() {
    let c = TestCluster::start(ClusterOptions::default().shards(3)).await;
    bounded(Duration::from_secs(60), async {
        let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
        for (shard, leadership) in leaders.iter().enumerate() {
            let shard = u32::try_from(shard).unwrap();
            let leader = leadership.node;
            let via = other_than(&c, &[leader]);
            let view = c.view(via).await.expect("view");
            assert!(
                !view[shard as usize].is_leader(),
                "{} was picked as a non-leader of shard {shard}: {view:?}",
                c.name(via)
            );
            let plain = c.key_in_shard(shard, "fwd/plain/");
            let cas = c.key_in_shard(shard, "fwd/cas/");

            // A plain PUT to the non-leader lands on the leader.
            c.put(via, &plain, "forwarded").await;
            let entry = c.get(leader, &plain, "?consistent").await;
            assert_eq!(
                entry.map(|e| e.value),
                Some(b"forwarded".to_vec()),
                "shard {shard}"
            );

            // CAS through the non-leader: create-only, then compare-and-set on ModifyIndex.
            assert_eq!(c.try_put(via, &cas, "?cas=0", "first").await, Ok(true));
            assert_eq!(
                c.try_put(via, &cas, "?cas=0", "second").await,
                Ok(false),
                "cas=0 on an existing key must fail (shard {shard})"
            );
            let first = c.get(via, &cas, "?consistent").await.expect("cas key");
            assert_eq!(first.value, b"first");
            let wrong = format!("?cas={}", first.modify_index + 1000);
            assert_eq!(c.try_put(via, &cas, &wrong, "wrong").await, Ok(false));
            let right = format!("?cas={}", first.modify_index);
            assert_eq!(c.try_put(via, &cas, &right, "third").await, Ok(true));
            // The index it matched is gone now: the same CAS fails the second time.
            assert_eq!(c.try_put(via, &cas, &right, "fourth").await, Ok(false));
            let third = c.get(leader, &cas, "?consistent").await.expect("cas key");
            assert_eq!(third.value, b"third", "shard {shard}");
            assert!(third.modify_index > first.modify_index);
            assert_eq!(third.create_index, first.create_index);

            // CAS deletes are forwarded too.
            let url = |index: u64| format!("{}?cas={index}", c.node(via).kv_url(&cas));
            let resp = c
                .http
                .delete(url(third.modify_index + 1))
                .send()
                .await
                .unwrap();
            assert_eq!(
                resp.text().await.unwrap(),
                "false",
                "DELETE with a wrong cas"
            );
            assert!(c.get(leader, &cas, "?consistent").await.is_some());
            let resp = c.http.delete(url(third.modify_index)).send().await.unwrap();
            assert_eq!(
                resp.text().await.unwrap(),
                "true",
                "DELETE with the right cas"
            );
            assert_eq!(c.get(leader, &cas, "?consistent").await, None);
            assert_eq!(c.get(via, &cas, "?consistent").await, None);
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 3. read modes
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stale_reads_on_followers_and_linearizable_reads_from_every_node() {
    let c = TestCluster::start(ClusterOptions::default().shards(2)).await;
    bounded(Duration::from_secs(60), async {
        let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
        for (shard, leadership) in leaders.iter().enumerate() {
            let shard = u32::try_from(shard).unwrap();
            let leader = leadership.node;
            let follower = other_than(&c, &[leader]);
            let key = c.key_in_shard(shard, "modes/stale/");
            c.put(leader, &key, "fresh").await;

            // ?stale on a follower: served from its own replica, so it may lag, but not forever.
            let headers = poll_until(Duration::from_secs(10), Duration::from_millis(10), || async {
                match c.try_get(follower, &key, "?stale").await {
                    Ok((Some(e), headers)) if e.value == b"fresh" => Ok(headers),
                    other => Err(other),
                }
            })
            .await
            .unwrap_or_else(|last| {
                panic!(
                    "stale read of {key} on follower {} never returned the value; last: {last:?}",
                    c.name(follower)
                )
            });
            assert_eq!(header(&headers, "X-Consul-KnownLeader"), "true");
            let contact: u64 = header(&headers, "X-Consul-LastContact")
                .parse()
                .expect("X-Consul-LastContact is a number");
            // Heartbeats come every 50 ms; a follower that heard nothing would report huge
            // numbers (or none).
            assert!(
                contact < 5_000,
                "follower's last contact {contact} ms ago with heartbeats every 50 ms"
            );
            let index: u64 = header(&headers, "X-Consul-Index").parse().unwrap();
            assert!(index > 0);

            // On the leader, ?stale is as fresh as it gets.
            let (entry, headers) = c.try_get(leader, &key, "?stale").await.unwrap();
            assert_eq!(entry.unwrap().value, b"fresh");
            assert_eq!(header(&headers, "X-Consul-LastContact"), "0");
            assert_eq!(header(&headers, "X-Consul-KnownLeader"), "true");
        }

        // Linearizable from any node: once a write is acknowledged (anywhere), every
        // consistent and default read (anywhere) returns it or something newer — and nothing
        // newer exists, so exactly it.
        let keys = c.key_per_shard("modes/lin/");
        for i in 0..60 {
            let key = &keys[i % keys.len()];
            let writer = i % 3;
            let value = format!("v{i}");
            c.put(writer, key, &value).await;
            for reader in 0..3 {
                for query in ["?consistent", ""] {
                    let got = c.get(reader, key, query).await.map(|e| e.value);
                    assert_eq!(
                        got.as_deref(),
                        Some(value.as_bytes()),
                        "write {i} of {key} acknowledged by {}, read {query:?} on {} saw an older value",
                        c.name(writer),
                        c.name(reader)
                    );
                }
            }
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 8. leader balance
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_move_to_their_preferred_replicas_and_spread_over_the_nodes() {
    let c = TestCluster::start(ClusterOptions::default().shards(6)).await;
    bounded(Duration::from_secs(60), async {
        // The placement rotates each shard's first (preferred) replica over the nodes; the
        // balancer hands leadership there, so every node ends up leading two of six shards.
        let last = std::sync::Mutex::new(None);
        let balanced = wait_until(
            Duration::from_secs(30),
            Duration::from_millis(100),
            || async {
                let Some(view) = c.view(0).await else {
                    return false;
                };
                let ok = view
                    .iter()
                    .all(|s| s.leader.is_some() && s.leader.as_ref() == s.replicas.first());
                *last.lock().unwrap() = Some(view);
                ok
            },
        )
        .await;
        let last = last.into_inner().unwrap();
        assert!(
            balanced,
            "leaders never reached their preferred replicas: {last:?}\n{}",
            c.logs()
        );
        let view = last.expect("a view");
        let mut per_node: BTreeMap<String, usize> = BTreeMap::new();
        for s in &view {
            *per_node
                .entry(s.leader.clone().unwrap_or_default())
                .or_default() += 1;
        }
        assert_eq!(per_node.len(), 3, "leaders not spread: {per_node:?}");
        assert!(
            per_node.values().all(|n| *n == 2),
            "uneven leaders: {per_node:?}"
        );
        // Writes work through every node once balanced.
        for i in 0..3 {
            c.put(i, &format!("bal/{i}"), "x").await;
        }
    })
    .await;
}

/// A write its leader has proposed but cannot commit (both followers killed) may still be
/// applied later, so it is answered as "outcome unknown": RESP `-TIMEOUT`, HTTP 504. Never
/// `-TRYAGAIN`, which Redis Cluster clients retry on their own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_without_a_quorum_is_answered_as_outcome_unknown() {
    let mut options = ClusterOptions::default().shards(1);
    options.balance_leaders = false;
    options.timing.request_timeout = Duration::from_millis(1_500);
    let mut c = TestCluster::start(options).await;
    let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
    let leader = leaders[0].node;
    bounded(Duration::from_secs(60), async {
        for i in (0..3).filter(|&i| i != leader) {
            c.kill9(i).await;
        }
        let key = c.key_in_shard(0, "lost/");

        // Both sent at once, while the leader still leads: both are proposed.
        let node = c.node(leader);
        let incr = async {
            let mut resp = RawResp::connect(node.resp_addr()).await;
            resp.cmd(&[b"INCR", key.as_bytes()]).await
        };
        let put = async {
            let put = node.http.put(node.kv_url(&key)).body("x").send().await;
            let put = put.expect("PUT without a quorum gets an answer");
            let status = put.status().as_u16();
            (
                status,
                put.json::<serde_json::Value>()
                    .await
                    .expect("JSON error body"),
            )
        };
        let (reply, (status, body)) = tokio::join!(incr, put);
        assert!(
            reply.starts_with(b"-TIMEOUT "),
            "INCR without a quorum: {}",
            String::from_utf8_lossy(&reply)
        );
        assert_eq!(
            (status, &body["code"]),
            (504, &serde_json::json!("timeout")),
            "{body}"
        );

        // With the followers back, the group commits again.
        c.restart_stopped().await;
        let ok = wait_until(CLUSTER_DEADLINE, Duration::from_millis(50), || {
            let resp = RawResp::connect(c.node(leader).resp_addr());
            let key = key.clone();
            async move {
                let mut resp = resp.await;
                resp.cmd(&[b"SET", key.as_bytes(), b"back"]).await == b"+OK\r\n"
            }
        })
        .await;
        assert!(ok, "no write committed after the followers came back");
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 10. metrics of a replicated shard
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn leaders_report_follower_lag_and_every_replica_its_role() {
    let c = TestCluster::start(ClusterOptions::default().shards(2)).await;
    bounded(Duration::from_secs(60), async {
        c.expect_all_led(CLUSTER_DEADLINE).await;
        for key in c.key_per_shard("lag") {
            c.put(0, &key, "v").await;
        }
        let names: Vec<String> = (0..c.nodes.len()).map(|i| c.name(i)).collect();
        // Each shard: one node says it leads, lists the two others' lag, and the lag reaches
        // 0 once the writes are replicated; the other two say they follow.
        let settled = wait_until(CLUSTER_DEADLINE, Duration::from_millis(50), || async {
            let mut texts = Vec::new();
            for i in 0..c.nodes.len() {
                let url = format!("{}/metrics", c.node(i).http_url());
                match c.node(i).http.get(&url).send().await {
                    Ok(resp) => texts.push(resp.text().await.unwrap_or_default()),
                    Err(_) => return false,
                }
            }
            (0..c.shard_count()).all(|shard| {
                let role = |text: &str, role: &str| {
                    text.contains(&format!(
                        "trireme_replica_role{{shard=\"{shard}\",role=\"{role}\"}} 1\n"
                    ))
                };
                let leaders: Vec<usize> = (0..texts.len())
                    .filter(|i| role(&texts[*i], "Leader"))
                    .collect();
                let [leader] = leaders[..] else { return false };
                let followers_say_so = (0..texts.len())
                    .filter(|i| *i != leader)
                    .all(|i| role(&texts[i], "Follower"));
                let lag_is_zero = names.iter().enumerate().filter(|(i, _)| *i != leader).all(
                    |(_, name)| {
                        texts[leader].contains(&format!(
                            "trireme_shard_follower_lag_entries{{shard=\"{shard}\",follower=\"{name}\"}} 0\n"
                        ))
                    },
                );
                followers_say_so && lag_is_zero
            })
        })
        .await;
        assert!(
            settled,
            "leaders never showed both followers at lag 0:\n{}",
            c.logs_tail(40)
        );
    })
    .await;
}
