//! Area 62: three real nodes on loopback: failover after `kill -9` without losing an
//! acknowledged write, rejoining, the whole cluster killed and restarted, and a node that
//! joins with `--join` and restarts from its data.
//!
//! Each test starts its own cluster (3 nodes, 2–4 shards, heartbeat 50 ms, elections
//! 300–600 ms); the harness runs one cluster at a time. Every wait polls under a deadline.

use crate::common;

use crate::common::cluster::{
    CLUSTER_DEADLINE, ClusterOptions, TestCluster, assert_acked_readable, bounded, peer_addr,
    poll_until, spawn_steady_writer, wait_for_acks, write_every_shard,
};
use crate::common::{RawResp, wait_until};
use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

// ---------------------------------------------------------------------------------------
// 4. failover and rejoin
// ---------------------------------------------------------------------------------------

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
// a clean stop
// ---------------------------------------------------------------------------------------

/// A node stopped with SIGTERM hands the leaderships it holds to caught-up voters before it
/// exits: the moment it is gone, the other nodes already agree on a live leader for every
/// shard, where after a kill they would wait out an election timeout (300–600 ms here)
/// still naming it. A writer through the other nodes sees no failure.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_node_stopped_cleanly_hands_its_leaderships_over_first() {
    // Leader balancing off, so that what moves leaders is the stop alone.
    let mut c = TestCluster::start(ClusterOptions {
        balance_leaders: false,
        ..ClusterOptions::default().shards(4)
    })
    .await;
    let c = &mut c;
    bounded(Duration::from_secs(120), async {
        let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
        // The node leading the most shards stops (the metadata group may be led there too).
        let mut led = vec![0; c.nodes.len()];
        for l in &leaders {
            led[l.node] += 1;
        }
        let stopping = (0..c.nodes.len()).max_by_key(|i| led[*i]).expect("a node");
        assert!(led[stopping] > 0, "someone leads: {leaders:?}");
        let others: Vec<usize> = (0..c.nodes.len()).filter(|i| *i != stopping).collect();
        let stop = Arc::new(AtomicBool::new(false));
        let (count, writer) = spawn_steady_writer(c, &others, "clean/", stop.clone());
        wait_for_acks(&count, 20).await;

        let started = Instant::now();
        c.nodes[stopping].terminate().await;
        let took = started.elapsed();
        let after_exit = c.leaderships().await;
        let stale: Vec<(usize, &Option<common::cluster::Leadership>)> = after_exit
            .iter()
            .enumerate()
            .filter(|(_, l)| l.as_ref().is_none_or(|l| l.node == stopping))
            .collect();
        assert!(
            stale.is_empty(),
            "shards without an agreed live leader right after the stop: {stale:?}\n{}",
            c.logs_tail(40)
        );
        assert!(
            c.nodes[stopping]
                .stderr_log()
                .contains("every leadership handed over"),
            "{}",
            c.logs_tail(40)
        );
        assert!(took < Duration::from_secs(5), "the stop took {took:?}");
        for (shard, before) in leaders.iter().enumerate() {
            if before.node == stopping {
                eprintln!(
                    "shard {shard}: leader n{} -> {:?}",
                    stopping + 1,
                    after_exit[shard]
                );
            }
        }

        wait_for_acks(&count, count.load(Ordering::SeqCst) + 20).await;
        stop.store(true, Ordering::SeqCst);
        let steady = writer.await.expect("writer");
        assert!(
            steady.failures.is_empty(),
            "writes through the other nodes failed during the stop: {:?}",
            steady.failures
        );
        assert_acked_readable(c, others[0], "clean/", &steady).await;
    })
    .await;
}
