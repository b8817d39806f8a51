//! Area 66: nodes of different protocol versions in one cluster. Each node announces its build
//! and protocol when it links; nodes one protocol apart serve together (a rolling upgrade),
//! nodes two apart are refused with both versions named, and the cluster status shows what
//! each node runs. The cluster version waits for the last node: a feature that changes what
//! is replicated (a Consul transaction over a prefix) is refused until then, turns on when the
//! upgrade is finalized (by the operator, or by the cluster itself), and from then on a node
//! of the older build is refused.
//!
//! One real binary plays every version: a node started with `TRIREME_TEST_ANNOUNCE_PROTOCOL`
//! announces that protocol instead of its own (it still speaks its own). Building an older
//! release for the test would cost CI a second full build; what is tested here is the
//! handshake's decision and what the operator sees, which the switch reaches whole.
//!
//! The cluster: 3 nodes, 3 shards, heartbeat 50 ms, elections 300–600 ms. Every wait polls
//! under a deadline.

use crate::common;

use crate::common::RawResp;
use crate::common::cluster::{
    CLUSTER_DEADLINE, ClusterOptions, TestCluster, assert_acked_readable, bounded, poll_until,
    spawn_steady_writer, wait_for_acks, write_every_shard,
};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
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
    // Started before the bound: the start may wait for another test's cluster to go.
    let mut c = TestCluster::start(ClusterOptions::default()).await;
    bounded(Duration::from_secs(240), async {
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

/// A cluster whose node n3 announces the protocol before this build's.
fn one_node_behind(cluster: &str) -> ClusterOptions {
    ClusterOptions {
        cluster: cluster.to_string(),
        node_env: vec![
            Vec::new(),
            Vec::new(),
            vec![(
                ANNOUNCE_PROTOCOL_ENV.to_string(),
                (PROTOCOL - 1).to_string(),
            )],
        ],
        // In one region, whose placement the newest protocol lets an operator set.
        node_args: vec![vec!["--region".to_string(), "r1".to_string()]; 3],
        ..ClusterOptions::default()
    }
}

/// Waits until node `via` reports the cluster version `wanted`.
async fn until_cluster_version(c: &TestCluster, via: usize, wanted: u32) {
    poll_until(CLUSTER_DEADLINE, Duration::from_millis(100), || async {
        match status(c, via).await?.cluster_version {
            v if v == wanted => Ok(()),
            v => Err(format!("n{} reports cluster version {v}", via + 1)),
        }
    })
    .await
    .unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));
}

/// `POST /v1/cluster/finalize-upgrade` through node `via`: the status and the body.
async fn finalize(c: &TestCluster, via: usize) -> (u16, serde_json::Value) {
    let url = format!("{}/v1/cluster/finalize-upgrade", c.node(via).http_url());
    let response = c.http.post(&url).send().await.expect("finalize answers");
    let status = response.status().as_u16();
    (status, response.json().await.expect("a JSON answer"))
}

/// The replicated feature of the newest protocol: setting the home region (which a metadata
/// leader of an older build would drop from the map), through node `via`; its status and
/// body.
async fn newest_feature(c: &TestCluster, via: usize) -> (u16, String) {
    let url = format!("{}/v1/cluster/placement", c.node(via).http_url());
    let response = c
        .http
        .put(&url)
        .json(&serde_json::json!({"home_region": "r1"}))
        .send()
        .await
        .expect("PUT /v1/cluster/placement");
    let status = response.status().as_u16();
    (status, response.text().await.unwrap_or_default())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upgrade_finalized_by_the_operator_turns_on_its_features_and_shuts_out_older_builds() {
    // Started before the bound: the start may wait for another test's cluster to go.
    let mut c = TestCluster::start(one_node_behind("auto_finalize_upgrade = false")).await;
    bounded(Duration::from_secs(300), async {
        // A new cluster starts at the lowest protocol its nodes run.
        until_cluster_version(&c, 0, PROTOCOL - 1).await;
        let stop = Arc::new(AtomicBool::new(false));
        // Through the nodes that stay up (a refused node's clients wait out their timeout);
        // n3 holds a replica of every shard, so it is written to throughout.
        let (count, writer) = spawn_steady_writer(&c, &[0, 1], "upgrade/", stop.clone());
        wait_for_acks(&count, 20).await;

        // A replicated feature of the new protocol is refused, naming both versions.
        let mut client = RawResp::connect(c.node(1).resp_addr()).await;
        client.cmd(&[b"ZADD", b"{z}full", b"1.5", b"m"]).await;
        let (status, refused) = newest_feature(&c, 0).await;
        assert!(
            status == 409
                && refused.contains(&format!("needs cluster version {PROTOCOL}"))
                && refused.contains(&format!("at {}", PROTOCOL - 1)),
            "{status} {refused}"
        );
        // A feature of an older protocol works (a pop of one sorted set needs nothing new).
        let one = client.cmd(&[b"BZPOPMIN", b"{z}full", b"1"]).await;
        assert_eq!(one, b"*3\r\n$7\r\n{z}full\r\n$1\r\nm\r\n$3\r\n1.5\r\n");

        // The operator cannot finalize while n3 runs the older build: 409, naming it.
        let (code, body) = finalize(&c, 1).await;
        assert_eq!(code, 409, "{body}");
        let message = body.to_string();
        assert!(
            message.contains(&format!("n3 runs build {} (protocol {})", Version::current().build, PROTOCOL - 1)),
            "{message}"
        );

        // n3 upgraded: still nothing changes by itself (auto_finalize_upgrade = false).
        restart_announcing(&mut c, 2, None).await;
        wait_for_acks(&count, count.load(Ordering::SeqCst) + 20).await;
        let (code, body) = poll_until(CLUSTER_DEADLINE, Duration::from_millis(200), || async {
            match finalize(&c, 1).await {
                (200, body) => Ok((200, body)),
                (code, body) => Err(format!("finalize answered {code}: {body}")),
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));
        assert_eq!(code, 200);
        assert_eq!(body["previous"], PROTOCOL - 1, "{body}");
        assert_eq!(body["cluster_version"], PROTOCOL, "{body}");
        for via in 0..3 {
            until_cluster_version(&c, via, PROTOCOL).await;
        }
        // A second finalize changes nothing.
        let (code, body) = finalize(&c, 2).await;
        assert_eq!((code, &body["cluster_version"]), (200, &serde_json::json!(PROTOCOL)));

        // The feature is on.
        let (status, body) = newest_feature(&c, 0).await;
        assert_eq!(status, 200, "{body}");

        // The older build is refused now, naming the cluster version; the rest serve.
        c.nodes[2].terminate().await;
        c.nodes[2].options_mut().env = vec![(
            ANNOUNCE_PROTOCOL_ENV.to_string(),
            (PROTOCOL - 1).to_string(),
        )];
        c.nodes[2].restart_in_background();
        let wanted = format!("older than the cluster version {PROTOCOL}");
        poll_until(CLUSTER_DEADLINE, Duration::from_millis(100), || async {
            let log = c.nodes[0].stderr_log() + &c.nodes[1].stderr_log();
            if log.lines().any(|l| l.contains(&wanted)) {
                Ok(())
            } else {
                Err("no refusal of the older build logged by n1 or n2".to_string())
            }
        })
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs_tail(30)));
        let before = count.load(Ordering::SeqCst);
        wait_for_acks(&count, before + 20).await;

        // Back on this build, n3 rejoins; no acknowledged write was lost.
        restart_announcing(&mut c, 2, None).await;
        wait_for_acks(&count, count.load(Ordering::SeqCst) + 20).await;
        stop.store(true, Ordering::SeqCst);
        let steady = writer.await.expect("writer");
        assert_acked_readable(&c, 0, "upgrade/", &steady).await;
        eprintln!(
            "{} writes acknowledged, {} failed during the upgrade (through a refused node or a restarting one)",
            steady.acked.len(),
            steady.failures.len()
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_cluster_version_rises_by_itself_once_the_last_node_is_upgraded() {
    // Started before the bound: the start may wait for another test's cluster to go.
    let mut c = TestCluster::start(one_node_behind("")).await;
    bounded(Duration::from_secs(180), async {
        until_cluster_version(&c, 0, PROTOCOL - 1).await;
        let (status, refused) = newest_feature(&c, 1).await;
        assert!(
            status == 409 && refused.contains("needs cluster version"),
            "{status} {refused}"
        );
        restart_announcing(&mut c, 2, None).await;
        for via in 0..3 {
            until_cluster_version(&c, via, PROTOCOL).await;
        }
        let (status, body) = newest_feature(&c, 2).await;
        assert_eq!(status, 200, "{body}");

        // A new node of the older build asking to join is refused, and says why.
        let dir = tempfile::tempdir().expect("a temp dir");
        let ports = common::cluster::free_ports(3);
        let joined = tokio::process::Command::new(common::binary())
            .args(["server", "--node-id", "n4", "--join"])
            .arg(common::cluster::peer_addr(c.node(0)).to_string())
            .arg("--data-dir")
            .arg(dir.path().join("data"))
            .args(["--http", &format!("127.0.0.1:{}", ports[0])])
            .args(["--resp", &format!("127.0.0.1:{}", ports[1])])
            .args(["--peer", &format!("127.0.0.1:{}", ports[2])])
            .env(ANNOUNCE_PROTOCOL_ENV, (PROTOCOL - 1).to_string())
            .kill_on_drop(true)
            .output();
        let output = tokio::time::timeout(CLUSTER_DEADLINE, joined)
            .await
            .expect("the refused node exits")
            .expect("the node ran");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{stderr}");
        assert!(
            stderr.contains("cannot join")
                && stderr.contains(&format!("older than the cluster version {PROTOCOL}")),
            "{stderr}"
        );
    })
    .await;
}
