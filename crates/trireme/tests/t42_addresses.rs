//! Area 42: listen and advertise addresses. A node binds what `--http`, `--resp` and `--peer`
//! say (host names resolved when binding) and tells clients and other nodes the advertised
//! addresses: in its metadata row, `/v1/cluster/shards`, `CLUSTER SLOTS` and `endpoints.json`.

use crate::common::cluster::free_ports;
use crate::common::{RawResp, Reply, ReplyExt, StartOptions, TestNode, run_expect_failure};
use std::time::Duration;

#[tokio::test]
async fn host_names_bind_and_advertise_addresses_are_published() {
    let node = TestNode::start(StartOptions {
        http_addr: Some("localhost:0".into()),
        peer_addr: Some("localhost:0".into()),
        extra_args: vec![
            "--advertise-resp".into(),
            // Published only, never dialled: `.test` names resolve nowhere.
            "redis.example.test:6390".into(),
        ],
        ..StartOptions::default().shards(4)
    })
    .await;
    let bound = node.endpoints().clone();
    assert!(bound.http.ip().is_loopback(), "{bound:?}");
    assert!(bound.peer.ip().is_loopback(), "{bound:?}");
    let http_advertised = format!("localhost:{}", bound.http.port());
    let peer_advertised = format!("localhost:{}", bound.peer.port());

    // endpoints.json: the bound socket addresses at the top, the advertised ones beside them.
    let text = std::fs::read_to_string(node.data_dir().join("endpoints.json")).unwrap();
    let endpoints: serde_json::Value = serde_json::from_str(&text).unwrap();
    assert_eq!(endpoints["advertised"]["http"], http_advertised.as_str());
    assert_eq!(endpoints["advertised"]["resp"], "redis.example.test:6390");
    assert_eq!(endpoints["advertised"]["peer"], peer_advertised.as_str());
    assert_eq!(endpoints["resp"], bound.resp.to_string().as_str());

    let line = node.ready_stdout().await;
    assert!(
        line.contains(&format!(
            "http={http_advertised} resp=redis.example.test:6390 peer={peer_advertised}"
        )),
        "{line}"
    );

    // The node row in the metadata group, as /v1/cluster/shards shows every replica.
    let shards = node.shards().await.shards;
    assert_eq!(shards.len(), 4);
    for shard in &shards {
        let leader = shard
            .leader
            .as_ref()
            .expect("a one-node cluster leads every shard");
        for who in [leader, &shard.replicas[0]] {
            assert_eq!(who.http, http_advertised, "{shard:?}");
            assert_eq!(who.resp, "redis.example.test:6390", "{shard:?}");
            assert_eq!(who.peer, peer_advertised, "{shard:?}");
        }
    }

    // Redis cluster clients are sent to the advertised RESP address.
    let mut c = RawResp::connect(bound.resp).await;
    let reply = Reply::parse(&c.cmd(&[b"CLUSTER", b"SLOTS"]).await);
    assert_eq!(reply.array().len(), 4);
    for range in reply.array() {
        let master = range.array()[2].array();
        assert_eq!(master[0].bulk(), b"redis.example.test");
        assert_eq!(master[1].int(), 6390);
    }
}

#[tokio::test]
async fn every_interface_without_an_advertise_address_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = dir.path().join("data").display().to_string();
    for (flag, value, advertise) in [
        ("--http", "0.0.0.0:0", "--advertise-http"),
        ("--resp", "[::]:0", "--advertise-resp"),
        ("--peer", "0.0.0.0:0", "--advertise-peer"),
    ] {
        let mut args = vec!["server", "--data-dir", &data, "--log", "warn"];
        for (other, default) in [
            ("--http", "127.0.0.1:0"),
            ("--resp", "127.0.0.1:0"),
            ("--peer", "127.0.0.1:0"),
        ] {
            args.extend([other, if other == flag { value } else { default }]);
        }
        let (code, stderr) = run_expect_failure(&args, Duration::from_secs(30));
        assert_ne!(code, 0, "{flag} {value} must be refused");
        assert!(
            stderr.contains(advertise) && stderr.contains("every interface"),
            "{flag} {value}: {stderr}"
        );
    }
    assert!(
        !dir.path().join("data").exists(),
        "a refused start must not create the data directory"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peers_named_by_host_name_form_a_cluster() {
    // Peer addresses by name only: the nodes dial each other by resolving `localhost`.
    let ports = free_ports(2);
    let peer = |i: usize| format!("localhost:{}", ports[i]);
    let initial = format!("n1={},n2={}", peer(0), peer(1));
    let handles: Vec<_> = (0..2)
        .map(|i| {
            tokio::spawn(TestNode::start(StartOptions {
                node_id: format!("n{}", i + 1),
                peer_addr: Some(peer(i)),
                initial_cluster: Some(initial.clone()),
                ..StartOptions::default().shards(2)
            }))
        })
        .collect();
    let mut nodes = Vec::new();
    for handle in handles {
        match handle.await {
            Ok(node) => nodes.push(node),
            Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
            Err(e) => panic!("start task failed: {e}"),
        }
    }

    // A write through one node is read through the other, whichever leads the key's shard.
    for (i, key) in ["named/a", "named/b", "named/c", "named/d"]
        .iter()
        .enumerate()
    {
        assert!(
            nodes[i % 2].put(key, "v").await,
            "PUT {key} through n{}",
            i % 2 + 1
        );
        let read = nodes[(i + 1) % 2].get(key).await;
        assert_eq!(read.map(|e| e.value), Some(b"v".to_vec()), "{key}");
    }
    for shard in nodes[0].shards().await.shards {
        let peers: Vec<&str> = shard.replicas.iter().map(|r| r.peer.as_str()).collect();
        assert_eq!(peers.len(), 2, "{shard:?}");
        for p in peers {
            assert!(p == peer(0) || p == peer(1), "{p} in {shard:?}");
        }
    }
}
