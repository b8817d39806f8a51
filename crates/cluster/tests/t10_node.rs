//! The router against a real in-process node: real log store and table files, real openraft
//! groups.

use bytes::Bytes;
use std::time::{Duration, Instant};
use trireme_cluster::{
    DeleteRequest, IncrOutcome, Node, NodeConfig, PutCondition, PutOutcome, PutRequest, ReadMode,
    TtlUpdate,
};
use trireme_types::ShardId;

fn config(dir: &std::path::Path, shards: u32) -> NodeConfig {
    let mut config = NodeConfig::new("n1", dir);
    config.shards = Some(shards);
    config.peer_addr = "127.0.0.1:0".into();
    config.expiry_interval = Duration::from_millis(50);
    config
}

fn put(key: &str, value: &str) -> PutRequest {
    PutRequest::new(
        Bytes::copy_from_slice(key.as_bytes()),
        Bytes::copy_from_slice(value.as_bytes()),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_route_to_shards_and_read_back_in_every_mode() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(config(dir.path(), 8)).await.unwrap();
    for i in 0..64 {
        let key = format!("k{i:02}");
        node.put(put(&key, &format!("v{i}"))).await.unwrap();
    }
    let shards_used: std::collections::BTreeSet<ShardId> = (0..64)
        .map(|i| node.shard_of(format!("k{i:02}").as_bytes()))
        .collect();
    assert!(
        shards_used.len() > 4,
        "keys should spread over shards: {shards_used:?}"
    );
    for mode in [ReadMode::Default, ReadMode::Consistent, ReadMode::Stale] {
        let (record, meta) = node.get(b"k07", mode).await.unwrap();
        assert_eq!(record.unwrap().value, Bytes::from_static(b"v7"));
        assert!(meta.known_leader);
        assert!(meta.index > 0);
    }
    let (all, _) = node
        .list(b"k", ReadMode::Default, usize::MAX)
        .await
        .unwrap();
    let keys: Vec<String> = all
        .iter()
        .map(|(k, _)| String::from_utf8_lossy(k).into_owned())
        .collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(keys, sorted, "list merges shards in key order");
    assert_eq!(keys.len(), 64);
    let (limited, _) = node.list(b"k1", ReadMode::Default, 3).await.unwrap();
    assert_eq!(limited.len(), 3);
    assert_eq!(limited[0].0, Bytes::from_static(b"k10"));

    // A walk in small pages sees every key exactly once.
    let mut seen = Vec::new();
    let mut position = Some((ShardId(0), None));
    while let Some((shard, after)) = position {
        let page = node.scan_page(shard, after.as_deref(), 5).await.unwrap();
        seen.extend(page.keys);
        position = page.next;
    }
    seen.sort();
    assert_eq!(seen.len(), 64);
    seen.dedup();
    assert_eq!(seen.len(), 64);
    assert_eq!(node.key_count().await.unwrap(), 64);

    assert_eq!(node.delete_prefix(b"k1").await.unwrap(), 10);
    assert_eq!(node.key_count().await.unwrap(), 54);
    let removed = node
        .delete_many(vec![
            Bytes::from_static(b"k20"),
            Bytes::from_static(b"k21"),
            Bytes::from_static(b"nope"),
        ])
        .await
        .unwrap();
    assert_eq!(removed, 2);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limits_are_enforced_before_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(config(dir.path(), 2)).await.unwrap();
    let long_key = "k".repeat(8193);
    let err = node.put(put(&long_key, "v")).await.unwrap_err();
    assert_eq!(err.to_client().code, trireme_types::ErrorCode::KeyTooLarge);
    let big = "v".repeat(512 * 1024 + 1);
    let err = node.put(put("k", &big)).await.unwrap_err();
    assert_eq!(
        err.to_client().code,
        trireme_types::ErrorCode::ValueTooLarge
    );
    let err = node
        .put_many(vec![(Bytes::from_static(b"a"), Bytes::from(big.clone()))])
        .await
        .unwrap_err();
    assert_eq!(
        err.to_client().code,
        trireme_types::ErrorCode::ValueTooLarge
    );
    // Nothing was written, and the node still serves.
    assert_eq!(node.key_count().await.unwrap(), 0);
    node.put(put("k", "ok")).await.unwrap();
    assert_eq!(node.key_count().await.unwrap(), 1);
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn expired_keys_vanish_and_are_reaped_through_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(config(dir.path(), 2)).await.unwrap();
    let at = trireme_cluster::now_ms() + 200;
    node.put(put("ttl", "v").ttl(TtlUpdate::At(at)))
        .await
        .unwrap();
    node.put(put("keep", "v")).await.unwrap();
    let shard = node.shard_of(b"ttl").0;
    assert!(
        node.get(b"ttl", ReadMode::Default)
            .await
            .unwrap()
            .0
            .is_some()
    );
    // Wait (bounded) for the leader's reaper to delete the row itself, through the log.
    let deadline = Instant::now() + Duration::from_secs(10);
    while node
        .storage()
        .get_raw(ShardId(shard), b"ttl")
        .unwrap()
        .is_some()
    {
        assert!(Instant::now() < deadline, "expired key was never reaped");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(trireme_cluster::now_ms() >= at, "reaped before it expired");
    assert!(
        node.get(b"ttl", ReadMode::Default)
            .await
            .unwrap()
            .0
            .is_none()
    );
    assert!(
        node.get(b"keep", ReadMode::Default)
            .await
            .unwrap()
            .0
            .is_some()
    );
    node.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restarted_node_has_everything_it_acknowledged() {
    let dir = tempfile::tempdir().unwrap();
    let mut indexes = Vec::new();
    {
        let node = Node::start(config(dir.path(), 4)).await.unwrap();
        for i in 0..40 {
            let key = format!("r{i}");
            match node.put(put(&key, &i.to_string())).await.unwrap() {
                PutOutcome {
                    written: true,
                    index,
                    ..
                } => indexes.push(index),
                other => panic!("unexpected {other:?}"),
            }
        }
        node.shutdown().await;
    }
    let mut restarted = config(dir.path(), 4);
    restarted.shards = None;
    let node = Node::start(restarted).await.unwrap();
    assert_eq!(
        node.shard_map().shard_count(),
        4,
        "shard count comes from the data dir"
    );
    for (i, index) in indexes.iter().enumerate() {
        let key = format!("r{i}");
        let (record, _) = node.get(key.as_bytes(), ReadMode::Default).await.unwrap();
        let record = record.unwrap_or_else(|| panic!("{key} lost"));
        assert_eq!(record.value, Bytes::from(i.to_string()));
        assert_eq!(record.modify_index, *index);
    }
    node.shutdown().await;
    drop(node);

    let mut other = config(dir.path(), 4);
    other.cluster_name = "another".into();
    let err = Node::start(other)
        .await
        .err()
        .expect("a data dir from another cluster is refused");
    assert!(err.to_string().contains("belongs to cluster"), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn conditional_writes_report_their_outcome() {
    let dir = tempfile::tempdir().unwrap();
    let node = Node::start(config(dir.path(), 2)).await.unwrap();
    let first = node
        .put(put("c", "1").condition(PutCondition::IfAbsent).flags(7))
        .await
        .unwrap();
    assert!(first.written);
    assert_eq!(first.previous, None);
    let again = node
        .put(put("c", "2").condition(PutCondition::IfAbsent))
        .await
        .unwrap();
    assert!(!again.written, "NX on an existing key");
    assert_eq!(
        again.previous.as_ref().unwrap().value,
        Bytes::from_static(b"1")
    );
    let stale = node
        .put(put("c", "3").condition(PutCondition::IfModifyIndex(first.index + 1000)))
        .await
        .unwrap();
    assert!(!stale.written, "CAS at the wrong index");
    let cas = node
        .put(put("c", "4").condition(PutCondition::IfModifyIndex(first.index)))
        .await
        .unwrap();
    assert!(cas.written);
    let (record, _) = node.get(b"c", ReadMode::Default).await.unwrap();
    let record = record.unwrap();
    assert_eq!(record.value, Bytes::from_static(b"4"));
    assert_eq!(record.flags, 7, "a put without flags keeps the key's");
    assert_eq!(record.modify_index, cas.index);

    let wrong = DeleteRequest::new(Bytes::from_static(b"c")).if_modify_index(Some(first.index));
    assert!(
        !node.delete(wrong).await.unwrap(),
        "delete at a stale index"
    );
    let right = DeleteRequest::new(Bytes::from_static(b"c")).if_modify_index(Some(cas.index));
    assert!(node.delete(right).await.unwrap());
    assert!(
        !node
            .delete(DeleteRequest::new(Bytes::from_static(b"c")))
            .await
            .unwrap()
    );

    let n = Bytes::from_static(b"n");
    assert_eq!(
        node.incr(n.clone(), 5).await.unwrap(),
        IncrOutcome::Value(5)
    );
    assert_eq!(
        node.incr(n.clone(), i64::MAX).await.unwrap(),
        IncrOutcome::Overflow
    );
    node.put(put("s", "text")).await.unwrap();
    assert_eq!(
        node.incr(Bytes::from_static(b"s"), 1).await.unwrap(),
        IncrOutcome::NotInteger
    );
    let later = trireme_cluster::now_ms() + 60_000;
    assert!(node.set_ttl(n.clone(), TtlUpdate::At(later)).await.unwrap());
    let (record, _) = node.get(b"n", ReadMode::Default).await.unwrap();
    assert_eq!(record.unwrap().expires_at_ms, Some(later));
    assert!(node.set_ttl(n.clone(), TtlUpdate::Clear).await.unwrap());
    assert!(
        !node
            .set_ttl(Bytes::from_static(b"missing"), TtlUpdate::Clear)
            .await
            .unwrap()
    );
    node.shutdown().await;
}
