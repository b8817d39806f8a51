//! Area 66: nodes of different protocol versions in one cluster. Each node announces its build
//! and protocol when it links; nodes one protocol apart serve together (a rolling upgrade),
//! nodes two apart are refused with both versions named, and the cluster status shows what
//! each node runs.
//!
//! One real binary plays every version: a node started with `TRIREME_TEST_ANNOUNCE_PROTOCOL`
//! announces that protocol instead of its own (it still speaks its own). Building an older
//! release for the test would cost CI a second full build; what is tested here is the
//! handshake's decision and what the operator sees, which the switch reaches whole.
//!
//! The cluster: 3 nodes, 3 shards, heartbeat 50 ms, elections 300–600 ms. Every wait polls
//! under a deadline.

mod common;

use common::cluster::{
    CLUSTER_DEADLINE, ClusterOptions, TestCluster, bounded, poll_until, write_every_shard,
};
use std::time::Duration;
use trireme_types::cluster_status::ClusterStatus;
use trireme_types::version::{ANNOUNCE_PROTOCOL_ENV, PROTOCOL, Version};

async fn status(c: &TestCluster, via: usize) -> Result<ClusterStatus, String> {
    let url = format!("{}/v1/cluster/status", c.node(via).http_url());
    let response = c.http.get(&url).send().await.map_err(|e| e.to_string())?;
    response.json().await.map_err(|e| e.to_string())
}

/// What node `name` runs, as node `via` reports it.
async fn version_seen(c: &TestCluster, via: usize, name: &str) -> Result<Option<Version>, String> {
    let status = status(c, via).await?;
    let node = status
        .nodes
        .iter()
        .find(|n| n.name == name)
        .ok_or_else(|| format!("{name} is not in the status"))?;
    Ok(node.version.clone())
}

/// Restarts node `i` announcing `protocol` (`None`: its own) and waits until it serves.
async fn restart_announcing(c: &mut TestCluster, i: usize, protocol: Option<u32>) {
    c.nodes[i].terminate().await;
    c.nodes[i].options_mut().env = protocol
        .map(|p| (ANNOUNCE_PROTOCOL_ENV.to_string(), p.to_string()))
        .into_iter()
        .collect();
    c.restart(i).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adjacent_protocols_serve_together_and_farther_ones_are_refused() {
    bounded(Duration::from_secs(240), async {
        let mut c = TestCluster::start(ClusterOptions::default()).await;
        let keys = c.key_per_shard("version");

        // Every node runs this build: each shows it to every other.
        let own = Version::current();
        for via in 0..3 {
            for name in ["n1", "n2", "n3"] {
                let seen = poll_until(CLUSTER_DEADLINE, Duration::from_millis(100), || async {
                    match version_seen(&c, via, name).await? {
                        Some(v) => Ok(v),
                        None => Err(format!("n{} sees no version of {name}", via + 1)),
                    }
                })
                .await
                .unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));
                assert_eq!(seen, own, "n{} reports {name}", via + 1);
            }
        }

        // n3 "upgraded" one protocol ahead: it links, serves, and shows its version.
        restart_announcing(&mut c, 2, Some(PROTOCOL + 1)).await;
        let seen = poll_until(CLUSTER_DEADLINE, Duration::from_millis(100), || async {
            match version_seen(&c, 0, "n3").await? {
                Some(v) if v.protocol == PROTOCOL + 1 => Ok(v),
                other => Err(format!("n1 sees n3 at {other:?}")),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));
        assert_eq!(seen.build, own.build);
        write_every_shard(&c, 2, &keys, "through n3 one protocol ahead")
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));
        let shards = c.node(0).shards().await;
        let n3 = shards
            .shards
            .iter()
            .flat_map(|s| s.replicas.iter())
            .find(|r| r.name == "n3")
            .expect("n3 holds a replica");
        assert_eq!(
            n3.version.as_ref().map(|v| v.protocol),
            Some(PROTOCOL + 1),
            "/v1/cluster/shards shows n3's version"
        );

        // Two protocols ahead: its peers refuse it, naming both versions, and keep serving.
        c.nodes[2].terminate().await;
        c.nodes[2].options_mut().env = vec![(
            ANNOUNCE_PROTOCOL_ENV.to_string(),
            (PROTOCOL + 2).to_string(),
        )];
        c.nodes[2].restart_in_background();
        let refusal = format!("protocol {}", PROTOCOL + 2);
        let logged = poll_until(CLUSTER_DEADLINE, Duration::from_millis(100), || async {
            let log = c.nodes[0].stderr_log() + &c.nodes[1].stderr_log();
            match log
                .lines()
                .find(|l| l.contains("more than one protocol apart") && l.contains(&refusal))
            {
                Some(line) => Ok(line.to_string()),
                None => Err("no refusal logged by n1 or n2".to_string()),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));
        assert!(
            logged.contains(&format!("protocol {PROTOCOL}")),
            "the refusal names this node's protocol too: {logged}"
        );
        let n3_log = poll_until(CLUSTER_DEADLINE, Duration::from_millis(100), || async {
            let log = c.nodes[2].stderr_log();
            if log.contains("more than one protocol apart") {
                Ok(log)
            } else {
                Err("n3 does not say why it was refused".to_string())
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));
        assert!(n3_log.contains("refused"), "{n3_log}");
        let status = status(&c, 0).await.expect("n1 answers");
        let n3 = status
            .nodes
            .iter()
            .find(|n| n.name == "n3")
            .expect("n3 is a member");
        assert!(!n3.linked && n3.version.is_none(), "{n3:?}");
        write_every_shard(&c, 0, &keys, "while n3 is refused")
            .await
            .unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));

        // Back on this build, n3 rejoins and catches up.
        restart_announcing(&mut c, 2, None).await;
        let value = poll_until(CLUSTER_DEADLINE, Duration::from_millis(100), || async {
            let mut values = Vec::new();
            for key in &keys {
                match c.try_get(2, key, "?stale").await? {
                    (Some(entry), _) => values.push(entry.value),
                    (None, _) => return Err(format!("n3 has no {key} yet")),
                }
            }
            if values.iter().all(|v| v == b"while n3 is refused") {
                Ok(())
            } else {
                Err(format!("n3 still reads {values:?}"))
            }
        })
        .await;
        value.unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));
    })
    .await;
}
