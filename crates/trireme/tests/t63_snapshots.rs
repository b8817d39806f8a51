//! Area 63: three real nodes on loopback: a node behind compacted logs catches up from a
//! snapshot, and a large snapshot reaches a node that was down.
//!
//! Each test starts its own cluster (3 nodes, 2–4 shards, heartbeat 50 ms, elections
//! 300–600 ms); the harness runs one cluster at a time. Every wait polls under a deadline.

use crate::common::cluster::{
    CLUSTER_DEADLINE, ClusterOptions, RaftTiming, TestCluster, bounded, poll_until,
    write_every_shard,
};
use crate::common::{metric, metrics_text};
use std::collections::BTreeMap;
use std::time::Duration;

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
        // The leader must stay the one whose log the victim falls behind: a leadership
        // handed to the preferred replica right after start could go to a node that has not
        // purged its log yet, and the victim would catch up from the log, not a snapshot.
        balance_leaders: false,
        ..ClusterOptions::default()
    };
    let mut c = TestCluster::start(opts).await;
    let c = &mut c;
    bounded(Duration::from_secs(180), async {
        let leaders = c.expect_all_led(CLUSTER_DEADLINE).await;
        let victim = (0..3).find(|&i| i != leaders[0].node).unwrap();
        c.kill9(victim).await;
        // Nothing is written while the victim is down but the pairs below, so its log ends
        // at or before what the leader has committed now.
        let before = &c.view(leaders[0].node).await.expect("leader's view")[0];
        let (victim_last, shard) = (before.committed, before.shard);
        let purged_series = format!("trireme_shard_log_purged_index{{shard=\"{shard}\"}}");

        let pairs: Vec<(String, String)> = (0..48u8)
            .map(|i| {
                let fill = char::from(b'a' + i % 26).to_string().repeat(500 * 1024 - 2);
                (format!("big/{i:02}"), format!("{i:02}{fill}"))
            })
            .collect();
        c.put_all(&pairs, 2).await;
        let leader = c.expect_all_led(CLUSTER_DEADLINE).await[0].node;
        let target = c.view(leader).await.expect("leader's view")[0].applied;
        // Purges follow snapshots in the background: wait until no running node's log still
        // holds what the victim needs, whichever of them leads when it returns. Otherwise
        // it would catch up from the log and the test would show nothing.
        let purged = poll_until(CLUSTER_DEADLINE, Duration::from_millis(100), || async {
            let mut least = u64::MAX;
            for i in c.running() {
                let text = metrics_text(&c.http, &c.node(i).http_url()).await;
                let at = metric(&text, &purged_series).unwrap_or(0.0);
                least = least.min(at as u64);
            }
            if least > victim_last {
                Ok(())
            } else {
                Err(least)
            }
        })
        .await;
        if let Err(least) = purged {
            panic!("the running nodes purged their logs only to {least}, not past {victim_last}");
        }
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
