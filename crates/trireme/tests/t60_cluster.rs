//! Area 60: three real nodes on loopback: replication, forwarding to leaders, the
//! three read modes, failover after `kill -9`, rejoining, whole-cluster restart, catching up
//! from a snapshot, peers that speak garbage, and a node that joins with `--join`.
//!
//! Each test starts its own cluster (3 nodes, 2–4 shards, heartbeat 50 ms, elections
//! 300–600 ms); the harness runs one cluster at a time. Every wait polls under a deadline.

mod common;

use common::cluster::{
    CLUSTER_DEADLINE, ClusterOptions, RaftTiming, TestCluster, assert_acked_readable, key_slot,
    peer_addr, poll_until, spawn_steady_writer, try_put_url, wait_for_acks,
};
use common::{RawResp, Reply, ReplyExt, wait_until};
use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Runs a test body under a time bound (the cluster has already started; its start is
/// bounded by the harness). Dropping the body on timeout drops the cluster, which kills it.
async fn bounded<F: std::future::Future<Output = ()>>(limit: Duration, body: F) {
    if tokio::time::timeout(limit, body).await.is_err() {
        panic!("the test did not finish within {limit:?}");
    }
}

fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("missing header {name}: {headers:?}"))
        .to_str()
        .expect("header is text")
}

/// The first node not in `not`.
fn other_than(c: &TestCluster, not: &[usize]) -> usize {
    (0..c.nodes.len())
        .find(|i| !not.contains(i))
        .expect("another node")
}

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
// 4. failover and rejoin
// ---------------------------------------------------------------------------------------

/// Writes one key per shard through `via`; `Ok` when every write was acknowledged.
async fn write_every_shard(
    c: &TestCluster,
    via: usize,
    keys: &[String],
    value: &str,
) -> Result<(), String> {
    let mut tasks = Vec::new();
    for key in keys {
        let url = c.node(via).kv_url(key);
        let client = c.http.clone();
        let value = value.to_string();
        tasks.push(tokio::spawn(async move {
            try_put_url(&client, &url, &value).await
        }));
    }
    let mut errors = Vec::new();
    for t in tasks {
        match t.await.expect("write task") {
            Ok(true) => {}
            other => errors.push(format!("{other:?}")),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failover_after_kill9_loses_no_acknowledged_write_and_the_node_rejoins_quietly() {
    // Leader balancing off: it would (rightly) hand shards back to the rejoined node, and this
    // test checks that the rejoin by itself changes no leader and no term (pre-vote).
    let mut c = TestCluster::start(ClusterOptions {
        balance_leaders: false,
        ..ClusterOptions::default().shards(4)
    })
    .await;
    let c = &mut c;
    bounded(Duration::from_secs(120), async {
        let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
        let pairs: Vec<(String, String)> = (0..200)
            .map(|i| (format!("fo/{i:03}"), format!("before-{i}")))
            .collect();
        c.put_all(&pairs, 4).await;
        let mut per_shard = vec![0; c.shard_count() as usize];
        for (k, _) in &pairs {
            per_shard[c.shard_of(k) as usize] += 1;
        }
        assert!(per_shard.iter().all(|&n| n > 0), "keys per shard: {per_shard:?}");

        // The node leading the most shards goes down hard.
        let counts = c.lead_counts(&leaders);
        let victim = (0..counts.len()).max_by_key(|&i| counts[i]).unwrap();
        let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
        let probes = c.key_per_shard("fo-probe/");
        let bound = 2 * c.election_max() + Duration::from_secs(1);

        // Writes are in flight through every node (the victim included) when it dies.
        let stop_inflight = Arc::new(AtomicBool::new(false));
        let (inflight_count, inflight) =
            spawn_steady_writer(c, &[0, 1, 2], "fo-inflight/", stop_inflight.clone());
        wait_for_acks(&inflight_count, 30).await;
        let killed_at = Instant::now();
        c.kill9(victim).await;

        // Until every shard has a leader among the survivors and takes a write through one.
        let mut recovered = None;
        let mut last = String::new();
        let mut attempt = 0;
        while killed_at.elapsed() < Duration::from_secs(20) {
            let led = c.leaderships().await;
            if led.iter().all(Option::is_some) {
                let via = survivors[attempt % survivors.len()];
                match write_every_shard(c, via, &probes, "after-failover").await {
                    Ok(()) => {
                        recovered = Some(killed_at.elapsed());
                        break;
                    }
                    Err(e) => last = format!("writes through {}: {e}", c.name(via)),
                }
            } else {
                last = format!("leaders: {led:?}");
            }
            attempt += 1;
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let Some(recovered) = recovered else {
            panic!(
                "no full recovery 20 s after killing {} (leader of {} shards); last: {last}\n{}",
                c.name(victim),
                counts[victim],
                c.logs()
            );
        };
        eprintln!(
            "failover: {} led {} of {} shards; every shard led and writable again after {recovered:?} (bound {bound:?})",
            c.name(victim),
            counts[victim],
            c.shard_count()
        );
        assert!(
            recovered <= bound,
            "failover took {recovered:?}, more than 2 x election_timeout_max + 1 s = {bound:?}\n{}",
            c.logs()
        );

        stop_inflight.store(true, Ordering::SeqCst);
        let inflight = inflight.await.expect("in-flight writer");

        // Every write acknowledged before the kill is there, read linearizably.
        let (a, b) = (survivors[0], survivors[1]);
        assert_acked_readable(c, a, "fo-inflight/", &inflight).await;
        let listed = c.try_list(a, "fo/", "&consistent").await.unwrap();
        assert_eq!(listed.len(), pairs.len(), "keys under fo/ after the failover");
        for (key, value) in &pairs {
            assert_eq!(
                listed.get(key).map(|e| e.value.clone()),
                Some(value.clone().into_bytes()),
                "{key} listed on {}",
                c.name(a)
            );
            let got = c.get(b, key, "?consistent").await.map(|e| e.value);
            assert_eq!(got, Some(value.clone().into_bytes()), "{key} on {}", c.name(b));
        }

        // While it is down: overwrite some keys, delete some, and add new ones.
        let mut expected: BTreeMap<String, Vec<u8>> = pairs
            .iter()
            .map(|(k, v)| (k.clone(), v.clone().into_bytes()))
            .collect();
        let mut later = Vec::new();
        for i in (0..200).step_by(4) {
            later.push((format!("fo/{i:03}"), format!("while-down-{i}")));
        }
        for i in 200..250 {
            later.push((format!("fo/{i:03}"), format!("new-{i}")));
        }
        c.put_all(&later, 4).await;
        for (k, v) in &later {
            expected.insert(k.clone(), v.clone().into_bytes());
        }
        for i in (2..200).step_by(10) {
            let key = format!("fo/{i:03}");
            c.delete(survivors[i % 2], &key).await;
            expected.remove(&key);
        }

        // Rejoin. Pre-vote: the returning node must not depose anyone, so each shard keeps
        // its leader and term, and writes keep succeeding while it comes back.
        let before = c.expect_all_led(CLUSTER_DEADLINE).await;
        let stop = Arc::new(AtomicBool::new(false));
        let (_, writer) = spawn_steady_writer(c, &survivors, "fo-rejoin/", stop.clone());
        c.restart(victim).await;

        // It catches up: its own replica (?stale) returns the latest values.
        let caught_up = poll_until(Duration::from_secs(20), Duration::from_millis(50), || async {
            let got = c.try_list(victim, "fo/", "&stale").await?;
            let got: BTreeMap<String, Vec<u8>> =
                got.into_iter().map(|(k, e)| (k, e.value)).collect();
            let wrong: Vec<&String> = expected
                .iter()
                .filter(|(k, v)| got.get(*k) != Some(v))
                .map(|(k, _)| k)
                .collect();
            if wrong.is_empty() && got.len() == expected.len() {
                Ok(())
            } else {
                Err(format!(
                    "{} of {} keys missing or old (first: {:?}), {} listed",
                    wrong.len(),
                    expected.len(),
                    wrong.first(),
                    got.len()
                ))
            }
        })
        .await;
        stop.store(true, Ordering::SeqCst);
        let rejoin = writer.await.expect("steady writer");
        if let Err(last) = caught_up {
            panic!(
                "{} did not catch up after its restart: {last}\n{}",
                c.name(victim),
                c.logs()
            );
        }
        assert!(
            rejoin.failures.is_empty(),
            "writes failed while {} rejoined ({} succeeded): {:?}\n{}",
            c.name(victim),
            rejoin.acked.len(),
            rejoin.failures,
            c.logs()
        );
        assert!(
            !rejoin.acked.is_empty(),
            "no write went through while the node rejoined"
        );
        assert_acked_readable(c, victim, "fo-rejoin/", &rejoin).await;

        let after = c.expect_all_led(CLUSTER_DEADLINE).await;
        assert_eq!(
            after,
            before,
            "leaders or terms changed when {} rejoined (pre-vote should prevent that)\n{}",
            c.name(victim),
            c.logs()
        );
        // Linearizable reads through the rejoined node see the latest state too.
        for i in (0..250).step_by(3) {
            let key = format!("fo/{i:03}");
            for query in ["?consistent", ""] {
                let got = c.get(victim, &key, query).await.map(|e| e.value);
                assert_eq!(
                    got.as_ref(),
                    expected.get(&key),
                    "{key} read {query:?} through the rejoined {}",
                    c.name(victim)
                );
            }
        }
        let view = c.view(victim).await.expect("the rejoined node's view");
        for (s, l) in before.iter().enumerate() {
            assert_eq!(
                view[s].term, l.term,
                "shard {s}: the rejoined node is in another term"
            );
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 5. whole-cluster restart
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kill9_of_every_node_then_restart_keeps_every_acknowledged_write() {
    let mut c = TestCluster::start(ClusterOptions::default().shards(3)).await;
    let c = &mut c;
    bounded(Duration::from_secs(90), async {
        let pairs: Vec<(String, String)> = (0..150)
            .map(|i| (format!("all/{i:03}"), format!("v{i}")))
            .collect();
        c.put_all(&pairs, 4).await;
        // A few over RESP too, on each node.
        for i in 0..3 {
            let mut r = RawResp::connect(c.node(i).resp_addr()).await;
            let key = format!("all/resp-{i}");
            assert_eq!(
                r.cmd(&[b"SET", key.as_bytes(), b"resp-value"]).await,
                b"+OK\r\n"
            );
        }
        let before = c.try_list(0, "all/", "&consistent").await.unwrap();
        assert_eq!(before.len(), 153);

        // Writes are in flight through every node when they all die.
        let stop = Arc::new(AtomicBool::new(false));
        let (count, writer) = spawn_steady_writer(c, &[0, 1, 2], "all-inflight/", stop.clone());
        wait_for_acks(&count, 30).await;
        c.kill9_all().await;
        stop.store(true, Ordering::SeqCst);
        let inflight = writer.await.expect("in-flight writer");
        assert!(c.running().is_empty());
        c.restart_stopped().await;
        c.expect_all_led(CLUSTER_DEADLINE).await;
        assert_acked_readable(c, 1, "all-inflight/", &inflight).await;

        for i in 0..3 {
            let after = c.try_list(i, "all/", "&consistent").await.unwrap();
            assert_eq!(
                after.keys().collect::<Vec<_>>(),
                before.keys().collect::<Vec<_>>(),
                "keys listed on {} after restarting every node",
                c.name(i)
            );
            for (key, entry) in &before {
                assert_eq!(
                    &after[key],
                    entry,
                    "{key} on {} changed across kill -9",
                    c.name(i)
                );
            }
        }
        for (key, value) in pairs.iter().step_by(7) {
            for i in 0..3 {
                let got = c.get(i, key, "").await.map(|e| e.value);
                assert_eq!(
                    got,
                    Some(value.clone().into_bytes()),
                    "{key} on {}",
                    c.name(i)
                );
            }
        }
        // And the restarted cluster takes writes in every shard, through every node.
        let keys = c.key_per_shard("all/after/");
        for i in 0..3 {
            write_every_shard(c, i, &keys, "after")
                .await
                .unwrap_or_else(|e| panic!("writes through {}: {e}\n{}", c.name(i), c.logs()));
        }
    })
    .await;
}

// ---------------------------------------------------------------------------------------
// 6. catching up from a snapshot
// ---------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_behind_compacted_logs_catches_up_from_a_snapshot() {
    let timing = RaftTiming {
        snapshot_every: Some(50),
        keep_after_snapshot: Some(10),
        // Snapshots of a few KB: sent in several chunks.
        snapshot_chunk_bytes: Some(2048),
        ..RaftTiming::default()
    };
    let opts = ClusterOptions {
        shards: 2,
        timing,
        // Log purges and snapshot installs are reported at info level: proof that this test
        // exercises what it says.
        log:
            "info,openraft=error,openraft::engine::handler=info,openraft::raft::api::protocol=info"
                .into(),
        ..ClusterOptions::default()
    };
    let mut c = TestCluster::start(opts).await;
    let c = &mut c;
    bounded(Duration::from_secs(120), async {
        let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
        // Stop a node that leads as few shards as possible, so the others need no election.
        let counts = c.lead_counts(&leaders);
        let victim = (0..counts.len()).min_by_key(|&i| counts[i]).unwrap();
        let survivors: Vec<usize> = (0..3).filter(|&i| i != victim).collect();
        // Keys the stopped node will hold when it stops, and that change while it is down.
        let old: Vec<(String, String)> = (0..40)
            .map(|i| (format!("snap/old/{i:02}"), format!("old-{i}")))
            .collect();
        c.put_all(&old, 4).await;
        let holds = poll_until(Duration::from_secs(10), Duration::from_millis(20), || async {
            match c.try_list(victim, "snap/old/", "&stale").await {
                Ok(got) if got.len() == old.len() => Ok(()),
                other => Err(other),
            }
        })
        .await;
        assert!(holds.is_ok(), "the node to stop never held the old keys: {holds:?}");
        let behind = c.view(victim).await.expect("view");
        c.kill9(victim).await;

        let mut expected: BTreeMap<String, Vec<u8>> = BTreeMap::new();
        for (i, (key, _)) in old.iter().enumerate() {
            if i < 20 {
                c.delete(survivors[i % 2], key).await;
            } else {
                c.put(survivors[i % 2], key, &format!("new-{i}")).await;
                expected.insert(key.clone(), format!("new-{i}").into_bytes());
            }
        }
        let pairs: Vec<(String, String)> = (0..500)
            .map(|i| (format!("snap/{i:03}"), format!("value-{i}")))
            .collect();
        c.put_all(&pairs, 4).await;
        for (k, v) in &pairs {
            expected.insert(k.clone(), v.clone().into_bytes());
        }
        let led = c.expect_all_led(CLUSTER_DEADLINE).await;
        let mut target = Vec::new();
        for (s, l) in led.iter().enumerate() {
            let applied = c.view(l.node).await.expect("leader's view")[s].applied;
            assert!(
                applied > behind[s].applied + 50 + 10,
                "shard {s}: leader applied {applied}, the stopped node {}: not enough to need a snapshot",
                behind[s].applied
            );
            target.push(applied);
        }
        for &i in &survivors {
            assert!(
                c.node(i).stderr_all().contains("purge log"),
                "{} never purged its log; the snapshot path is not exercised",
                c.name(i)
            );
        }

        c.restart(victim).await;
        let converged = poll_until(Duration::from_secs(30), Duration::from_millis(50), || async {
            match c.view(victim).await {
                Some(v) if v.iter().zip(&target).all(|(s, &t)| s.applied >= t) => Ok(()),
                other => Err(other),
            }
        })
        .await;
        if let Err(last) = converged {
            panic!(
                "{} never reached the leaders' applied indexes {target:?}: {last:?}\n{}",
                c.name(victim),
                c.logs()
            );
        }
        // Its own replica has exactly the leaders' state: new keys, new values, and none of
        // the keys deleted while it was down.
        let got: BTreeMap<String, Vec<u8>> = c
            .try_list(victim, "snap/", "&stale")
            .await
            .unwrap()
            .into_iter()
            .map(|(k, e)| (k, e.value))
            .collect();
        let missing: Vec<&String> = expected
            .iter()
            .filter(|(k, v)| got.get(*k) != Some(v))
            .map(|(k, _)| k)
            .collect();
        let extra: Vec<&String> = got.keys().filter(|k| !expected.contains_key(*k)).collect();
        assert!(
            missing.is_empty() && extra.is_empty(),
            "the caught-up node differs from the leaders: {} keys missing or old {missing:.10?}, {} keys it should not have {extra:?}\n{}",
            missing.len(),
            extra.len(),
            c.logs()
        );
        let log = c.node(victim).stderr_log();
        assert!(
            log.contains("install_full_snapshot"),
            "{} caught up without installing a snapshot:\n{}",
            c.name(victim),
            c.logs()
        );
        // Reassembled from chunks.
        let received = snapshots_received(&log);
        assert!(
            received.iter().any(|&(_, chunks)| chunks > 1),
            "{} installed no snapshot sent in several chunks ({received:?}):\n{}",
            c.name(victim),
            c.logs()
        );
        // It is a working member again: writes through it still succeed.
        let keys = c.key_per_shard("snap/after/");
        write_every_shard(c, victim, &keys, "after")
            .await
            .unwrap_or_else(|e| panic!("writes through the rejoined node: {e}\n{}", c.logs()));
    })
    .await;
}

/// A snapshot of some tens of MB, sent in several default-sized chunks and installed within
/// the chunk timeouts: one shard, 48 values of 500 KiB written while a node is down.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_snapshot_reaches_a_node_that_was_down() {
    let timing = RaftTiming {
        snapshot_every: Some(20),
        keep_after_snapshot: Some(5),
        ..RaftTiming::default()
    };
    let opts = ClusterOptions {
        shards: 1,
        timing,
        log: "info,openraft=error,openraft::raft::api::protocol=info".into(),
        ..ClusterOptions::default()
    };
    let mut c = TestCluster::start(opts).await;
    let c = &mut c;
    bounded(Duration::from_secs(180), async {
        let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
        let victim = (0..3).find(|&i| i != leaders[0].node).unwrap();
        c.kill9(victim).await;

        let pairs: Vec<(String, String)> = (0..48u8)
            .map(|i| {
                let fill = char::from(b'a' + i % 26).to_string().repeat(500 * 1024 - 2);
                (format!("big/{i:02}"), format!("{i:02}{fill}"))
            })
            .collect();
        c.put_all(&pairs, 2).await;
        let leader = c.expect_all_led(CLUSTER_DEADLINE).await[0].node;
        let target = c.view(leader).await.expect("leader's view")[0].applied;
        c.restart(victim).await;
        let converged = poll_until(
            Duration::from_secs(90),
            Duration::from_millis(100),
            || async {
                match c.view(victim).await {
                    Some(v) if v[0].applied >= target => Ok(()),
                    other => Err(other.map(|v| v[0].applied)),
                }
            },
        )
        .await;
        if let Err(last) = converged {
            panic!(
                "{} never reached the leader's applied index {target}: {last:?}\n{}",
                c.name(victim),
                c.logs()
            );
        }
        let got = c.try_list(victim, "big/", "&stale").await.unwrap();
        let wrong: Vec<&String> = pairs
            .iter()
            .filter(|(k, v)| got.get(k).map(|e| e.value.as_slice()) != Some(v.as_bytes()))
            .map(|(k, _)| k)
            .collect();
        assert!(
            wrong.is_empty() && got.len() == pairs.len(),
            "the caught-up node holds {} keys, {} missing or different: {wrong:?}",
            got.len(),
            wrong.len()
        );
        let received = snapshots_received(&c.node(victim).stderr_log());
        assert!(
            received
                .iter()
                .any(|&(bytes, chunks)| bytes > 16 << 20 && chunks > 1),
            "{} installed no snapshot over 16 MiB sent in several chunks: {received:?}\n{}",
            c.name(victim),
            c.logs()
        );
    })
    .await;
}

/// `(bytes, chunks)` of each snapshot a node's log says it received.
fn snapshots_received(log: &str) -> Vec<(u64, u32)> {
    log.lines()
        .filter(|l| l.contains("snapshot received"))
        .filter_map(|l| {
            let field = |name: &str| l.split(name).nth(1)?.split_whitespace().next();
            Some((
                field("bytes=")?.parse().ok()?,
                field("chunks=")?.parse().ok()?,
            ))
        })
        .collect()
}

// ---------------------------------------------------------------------------------------
// 7. bad peers
// ---------------------------------------------------------------------------------------

fn varint(mut v: u64, out: &mut Vec<u8>) {
    loop {
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(byte);
            return;
        }
        out.push(byte | 0x80);
    }
}

/// A length-prefixed frame around `body`.
fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = u32::try_from(body.len())
        .expect("frame length")
        .to_be_bytes()
        .to_vec();
    out.extend_from_slice(body);
    out
}

/// postcard of `Frame::Hello { cluster, from, to }` (variant 0), framed.
fn hello(cluster: &str, from: u64, to: u64) -> Vec<u8> {
    let mut body = vec![0];
    varint(cluster.len() as u64, &mut body);
    body.extend_from_slice(cluster.as_bytes());
    varint(from, &mut body);
    varint(to, &mut body);
    frame(&body)
}

/// Reads a varint at `at`; returns (value, next position).
fn read_varint(bytes: &[u8], mut at: usize) -> Option<(u64, usize)> {
    let mut v = 0u64;
    for shift in (0..64).step_by(7) {
        let b = *bytes.get(at)?;
        at += 1;
        v |= u64::from(b & 0x7f) << shift;
        if b & 0x80 == 0 {
            return Some((v, at));
        }
    }
    None
}

/// The reason of a framed `Frame::Refused { reason }` (variant 2), if `bytes` is one.
fn refused_reason(bytes: &[u8]) -> Option<String> {
    let len = u32::from_be_bytes(bytes.get(..4)?.try_into().ok()?) as usize;
    let body = bytes.get(4..4 + len)?;
    if body.first() != Some(&2) {
        return None;
    }
    let (n, at) = read_varint(body, 1)?;
    let reason = body.get(at..at + usize::try_from(n).ok()?)?;
    String::from_utf8(reason.to_vec()).ok()
}

/// Sends `bytes` on a fresh connection to a peer port and reads until the node closes it.
/// Returns what came back and how long the node took to close; panics if it keeps the
/// connection open.
async fn send_to_peer_port(addr: SocketAddr, bytes: &[u8]) -> (Vec<u8>, Duration) {
    let mut stream = TcpStream::connect(addr)
        .await
        .expect("connect to the peer port");
    let started = Instant::now();
    // The node may close before reading everything; a failed write is fine.
    let _ = stream.write_all(bytes).await;
    let mut got = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match tokio::time::timeout(Duration::from_secs(10), stream.read(&mut chunk)).await {
            Err(_) => panic!(
                "the node kept a connection open 10 s after {:?}; it sent {got:?}",
                &bytes[..bytes.len().min(32)]
            ),
            Ok(Ok(0)) => return (got, started.elapsed()),
            Ok(Ok(n)) => got.extend_from_slice(&chunk[..n]),
            Ok(Err(e))
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::ConnectionReset | std::io::ErrorKind::BrokenPipe
                ) =>
            {
                return (got, started.elapsed());
            }
            Ok(Err(e)) => panic!("reading from the peer port: {e}"),
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_on_the_peer_port_is_refused_and_the_node_keeps_serving() {
    let c = TestCluster::start(ClusterOptions::default().shards(2)).await;
    bounded(Duration::from_secs(90), async {
        let target = 0;
        let addr = peer_addr(c.node(target));
        // Deterministic "random" bytes; the seed is printed so a failure replays.
        let seed: u64 = 0x5eed_7e57_0f0f;
        eprintln!("random frame seed: {seed:#x}");
        let mut x = seed;
        let mut random = |n: usize| -> Vec<u8> {
            (0..n)
                .map(|_| {
                    x ^= x << 13;
                    x ^= x >> 7;
                    x ^= x << 17;
                    (x >> 24) as u8
                })
                .collect()
        };
        let cases: Vec<(&str, Vec<u8>)> = vec![
            (
                "plain garbage",
                b"GET / HTTP/1.1\r\nHost: x\r\n\r\n".to_vec(),
            ),
            (
                "a huge length prefix",
                vec![0xff, 0xff, 0xff, 0xff, 1, 2, 3],
            ),
            ("a frame of garbage", frame(&[0xff; 16])),
            ("a frame of random bytes", frame(&random(64))),
            ("an empty frame", frame(&[])),
        ];
        // Each is dropped (`send_to_peer_port` fails if the connection stays open), and
        // answered with nothing or a refusal.
        for (what, bytes) in &cases {
            let (answer, took) = send_to_peer_port(addr, bytes).await;
            eprintln!("{what}: closed after {took:?}");
            assert!(
                answer.is_empty() || refused_reason(&answer).is_some(),
                "{what}: the node answered {answer:?}, neither nothing nor a Refused frame"
            );
        }

        // A well-formed Hello from another cluster: refused with a reason, and logged.
        let (answer, _) = send_to_peer_port(addr, &hello("other-cluster", 7, 8)).await;
        let reason = refused_reason(&answer)
            .unwrap_or_else(|| panic!("no Refused frame for another cluster's Hello: {answer:?}"));
        assert!(
            reason.contains("other-cluster"),
            "refusal reason does not name the cluster: {reason:?}"
        );
        // The right cluster but the wrong node.
        let (answer, _) = send_to_peer_port(addr, &hello("trireme", 7, 8)).await;
        let reason = refused_reason(&answer).unwrap_or_else(|| {
            panic!("no Refused frame for a Hello to the wrong node: {answer:?}")
        });
        assert!(reason.contains("meant to reach"), "{reason:?}");

        // Many bad connections at once.
        let mut tasks = Vec::new();
        for i in 0..20u8 {
            tasks.push(tokio::spawn(async move {
                send_to_peer_port(addr, &frame(&[0x03, i, 0xff, 0xfe])).await
            }));
        }
        for t in tasks {
            let (_, took) = t.await.expect("bad connection task");
            assert!(
                took < Duration::from_secs(5),
                "a bad connection lingered {took:?}"
            );
        }

        // Every refusal is logged.
        let refusals = cases.len() + 2 + 20;
        let logged = wait_until(
            Duration::from_secs(5),
            Duration::from_millis(20),
            || async {
                c.node(target)
                    .stderr_log()
                    .matches("refused a peer link")
                    .count()
                    >= refusals
            },
        )
        .await;
        let log = c.node(target).stderr_log();
        assert!(
            logged,
            "{} of {refusals} refusals logged:\n{log}",
            log.matches("refused a peer link").count()
        );
        assert!(
            log.lines()
                .any(|l| l.contains("refused a peer link") && l.contains("other-cluster")),
            "the other cluster's Hello is not in the log:\n{log}"
        );
        // Garbage is refused for what it is, not left to the 2 s handshake timeout like a
        // silent dialer (this test never stays silent).
        assert!(
            !log.contains("no handshake in time"),
            "garbage was treated as silence:\n{log}"
        );

        // The node keeps serving, and its real peer links still carry Raft and forwarding.
        let resp = c
            .http
            .get(format!("{}/v1/health", c.node(target).http_url()))
            .send()
            .await
            .unwrap();
        assert_eq!(resp.status(), 200, "health after bad peers");
        c.expect_all_led(CLUSTER_DEADLINE).await;
        let keys = c.key_per_shard("bad-peers/");
        for i in 0..3 {
            write_every_shard(&c, i, &keys, &format!("through-{i}"))
                .await
                .unwrap_or_else(|e| panic!("writes through {}: {e}\n{}", c.name(i), c.logs()));
            for key in &keys {
                let got = c.get(target, key, "?consistent").await.map(|e| e.value);
                assert_eq!(got, Some(format!("through-{i}").into_bytes()));
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
// 9. a node that joins a running cluster
// ---------------------------------------------------------------------------------------

/// Whether node `via` lists `peer` in `/v1/status/peers`.
async fn lists_peer(c: &TestCluster, via: usize, peer: &str) -> bool {
    let url = format!("{}/v1/status/peers", c.node(via).http_url());
    let Ok(resp) = c.http.get(url).send().await else {
        return false;
    };
    resp.json::<Vec<String>>()
        .await
        .is_ok_and(|peers| peers.iter().any(|p| p == peer))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_added_with_join_becomes_a_member_and_restarts_from_its_data() {
    let mut c = TestCluster::start(ClusterOptions::default().shards(2)).await;
    let added = c.add_node().await;
    bounded(Duration::from_secs(120), async {
        assert_eq!(c.name(added), "n4");
        let peer = peer_addr(c.node(added)).to_string();
        let member = wait_until(CLUSTER_DEADLINE, Duration::from_millis(50), || {
            lists_peer(&c, 0, &peer)
        })
        .await;
        assert!(member, "n1 never listed n4 ({peer})\n{}", c.logs());

        // Writes through the new node reach the cluster, and it reads what others wrote.
        c.put(added, "join/from-n4", "4").await;
        c.put(0, "join/from-n1", "1").await;
        let value = |e: Option<common::KvEntry>| e.map(|e| e.value);
        assert_eq!(
            value(c.get(1, "join/from-n4", "?consistent").await),
            Some(b"4".to_vec())
        );
        assert_eq!(
            value(c.get(added, "join/from-n1", "?consistent").await),
            Some(b"1".to_vec())
        );

        // Killed and restarted (with --join still on its command line), it comes back as the
        // same member on the same ports.
        c.kill9(added).await;
        c.restart(added).await;
        assert!(lists_peer(&c, 0, &peer).await, "{}", c.logs());
        assert_eq!(
            value(c.get(added, "join/from-n1", "?consistent").await),
            Some(b"1".to_vec())
        );
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
