//! Area 32: a disk that fills. The node keeps `[storage] min_free_bytes` free on its data
//! directory's file system: below it, writes are refused before they reach the log (HTTP 507
//! with a JSON message, RESP `-MISCONF`, as Redis answers when it cannot write its
//! append-only file), reads go on, and writes resume by themselves once space is freed.
//! Nothing acknowledged before is lost, across a restart too.
//!
//! A follower whose disk fills takes no more entries of the shards it follows (heartbeats
//! still pass): the group commits with its other replicas, and the follower catches up once
//! space is freed, instead of failing on a full disk.
//!
//! Each data directory sits on a small tmpfs this test mounts (root only, as in CI); a
//! ballast file takes the space, as another program filling the disk would.

use crate::common;

use crate::common::cluster::{CLUSTER_DEADLINE, ClusterOptions, TestCluster, poll_until};
use crate::common::{RawResp, StartOptions, TestNode, http_client};
use std::path::{Path, PathBuf};
use std::time::Duration;

const MIB: u64 = 1024 * 1024;
/// The file system's size: a fresh node and its first writes take a few MiB of it.
const FS_BYTES: u64 = 96 * MIB;
/// What the node keeps free.
const RESERVE: u64 = 24 * MIB;
/// How long the node may take to notice a change of the free space (it measures every
/// 100 ms).
const NOTICE: Duration = Duration::from_secs(10);

/// A tmpfs mounted on a temp dir for the length of a test.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(bytes: u64) -> Tmpfs {
        assert!(
            rustix::process::geteuid().is_root(),
            "the disk-full test needs root (it mounts a tmpfs)"
        );
        let dir = tempfile::Builder::new()
            .prefix("trireme-small-fs-")
            .tempdir()
            .expect("tempdir");
        let size = format!("size={bytes}");
        let args = [
            "-t",
            "tmpfs",
            "-o",
            &size,
            "tmpfs",
            &dir.path().to_string_lossy(),
        ]
        .map(String::from);
        let (ok, out, err) = common::run_program("mount", &args, Duration::from_secs(10));
        assert!(ok, "mount {args:?}: {out}{err}");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    fn free_bytes(&self) -> u64 {
        let stats = rustix::fs::statvfs(self.path()).expect("statvfs");
        stats.f_bavail * stats.f_frsize
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let path = self.path().to_string_lossy().into_owned();
        let (ok, _, _) = common::run_program(
            "umount",
            std::slice::from_ref(&path),
            Duration::from_secs(10),
        );
        if !ok {
            let _ = common::run_program("umount", &["-l".into(), path], Duration::from_secs(10));
        }
    }
}

/// Takes all but `leave` bytes of the file system's free space, in a file of its own.
fn fill_leaving(fs: &Tmpfs, leave: u64) -> PathBuf {
    let path = fs.path().join("ballast");
    let take = fs.free_bytes().saturating_sub(leave);
    let file = std::fs::File::create(&path).expect("create ballast");
    rustix::fs::fallocate(&file, rustix::fs::FallocateFlags::empty(), 0, take)
        .expect("fallocate ballast");
    path
}

/// PUT `key` = `value` over HTTP: the status and the body.
async fn put(http: &reqwest::Client, node: &TestNode, key: &str, value: &str) -> (u16, String) {
    match http
        .put(node.kv_url(key))
        .body(value.to_string())
        .send()
        .await
    {
        Ok(resp) => (
            resp.status().as_u16(),
            resp.text().await.unwrap_or_default(),
        ),
        Err(e) => (0, e.to_string()),
    }
}

/// Polls a PUT of `key` until it answers `status`; the last answer when it never does.
async fn put_until(
    http: &reqwest::Client,
    node: &TestNode,
    key: &str,
    status: u16,
) -> Result<String, (u16, String)> {
    poll_until(NOTICE, Duration::from_millis(50), || async {
        let (got, body) = put(http, node, key, "v").await;
        if got == status {
            Ok(body)
        } else {
            Err((got, body))
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_disk_refuses_writes_keeps_reads_and_recovers_when_space_returns() {
    let fs = Tmpfs::mount(FS_BYTES);
    let mut node = TestNode::start(StartOptions {
        data_dir: Some(fs.path().join("data")),
        config_toml: Some(format!("[storage]\nmin_free_bytes = {RESERVE}\n")),
        ..StartOptions::default().shards(2)
    })
    .await;
    let http = http_client();
    let mut acknowledged = Vec::new();
    for i in 0..40 {
        let (key, value) = (format!("before/{i}"), format!("value {i}"));
        assert_eq!(put(&http, &node, &key, &value).await, (200, "true".into()));
        acknowledged.push((key, value));
    }

    let ballast = fill_leaving(&fs, RESERVE / 2);
    let body = put_until(&http, &node, "during/http", 507)
        .await
        .unwrap_or_else(|last| panic!("no 507 with {} bytes free: {last:?}", fs.free_bytes()));
    let error: serde_json::Value = serde_json::from_str(&body).expect("a JSON error body");
    assert_eq!(error["code"], "disk_full", "{error}");
    assert!(
        error["error"]
            .as_str()
            .unwrap_or_default()
            .contains("disk full"),
        "{error}"
    );

    // The PUTs before the node noticed were written; from here on every write is refused.
    assert_eq!(put(&http, &node, "refused/http", "v").await.0, 507);
    let mut resp = RawResp::connect(node.resp_addr()).await;
    let set = resp.cmd(&[b"SET", b"refused/resp", b"v"]).await;
    let set = String::from_utf8_lossy(&set);
    assert!(set.starts_with("-MISCONF disk full"), "{set}");
    // Reads go on, over both protocols, and the refused writes changed nothing.
    for (key, value) in &acknowledged {
        let entry = node.get(key).await.expect("an acknowledged key");
        assert_eq!(entry.value, value.as_bytes());
    }
    assert_eq!(resp.cmd(&[b"GET", b"before/7"]).await, b"$7\r\nvalue 7\r\n");
    assert_eq!(resp.cmd(&[b"EXISTS", b"refused/resp"]).await, b":0\r\n");
    assert!(node.get("refused/http").await.is_none());
    let metrics = common::metrics_text(&http, &node.http_url()).await;
    let free = common::metric_of(&metrics, "trireme_storage_free_bytes");
    assert!(free < RESERVE as f64, "trireme_storage_free_bytes {free}");

    // Space returns: writes resume without a restart.
    std::fs::remove_file(&ballast).expect("remove ballast");
    put_until(&http, &node, "after/http", 200)
        .await
        .unwrap_or_else(|last| panic!("writes did not resume: {last:?}"));
    acknowledged.push(("after/http".into(), "v".into()));
    assert_eq!(resp.cmd(&[b"SET", b"after/resp", b"v"]).await, b"+OK\r\n");

    // Everything acknowledged survives a restart.
    node.terminate().await;
    node.restart().await;
    for (key, value) in &acknowledged {
        let entry = node
            .get(key)
            .await
            .expect("an acknowledged key after the restart");
        assert_eq!(entry.value, value.as_bytes(), "{key}");
    }
    let entry = node.get("after/resp").await.expect("after/resp");
    assert_eq!(entry.value, b"v");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_with_a_full_disk_falls_behind_and_catches_up_when_space_returns() {
    let disks: Vec<Tmpfs> = (0..3).map(|_| Tmpfs::mount(FS_BYTES)).collect();
    let c = TestCluster::start(ClusterOptions {
        balance_leaders: false,
        extra_toml: format!("[storage]\nmin_free_bytes = {RESERVE}\n"),
        data_dirs: disks.iter().map(|d| d.path().join("data")).collect(),
        ..ClusterOptions::default().shards(1)
    })
    .await;
    let leader = c.expect_all_led(CLUSTER_DEADLINE).await[0].node;
    let follower = (leader + 1) % 3;
    let key = |i: usize| format!("big/{i}");
    c.put(leader, &key(0), "before the disk filled").await;

    // Less than a MiB left: the 4 MiB below would not fit.
    let ballast = fill_leaving(&disks[follower], MIB);
    let http = http_client();
    let noticed = poll_until(NOTICE, Duration::from_millis(50), || async {
        let text = common::metrics_text(&http, &c.node(follower).http_url()).await;
        match common::metric(&text, "trireme_storage_free_bytes") {
            Some(free) if free < RESERVE as f64 => Ok(()),
            other => Err(other),
        }
    })
    .await;
    assert!(
        noticed.is_ok(),
        "free bytes on {}: {noticed:?}",
        c.name(follower)
    );

    let value = "x".repeat(64 * 1024);
    for i in 1..=64 {
        c.put(leader, &key(i), &value).await;
    }
    assert!(c.node(follower).is_running(), "{}", c.logs());
    let cluster = &c;
    let applied = move |i: usize| async move {
        cluster.view(i).await.expect("a running node's shard view")[0].applied
    };
    let written = applied(leader).await;
    let behind = applied(follower).await;
    assert!(
        behind < written,
        "{} applied up to {behind} with its disk full; the leader {written}",
        c.name(follower)
    );
    // A stale read through it is not answered from its old rows, but by another replica.
    let read = c.try_get(follower, &key(64), "?stale").await;
    assert_eq!(
        read.map(|(entry, _)| entry.map(|e| e.value.len())),
        Ok(Some(value.len())),
        "stale read of {} through {}",
        key(64),
        c.name(follower)
    );

    std::fs::remove_file(&ballast).expect("remove ballast");
    let caught_up = poll_until(CLUSTER_DEADLINE, Duration::from_millis(50), || async {
        let now = applied(follower).await;
        if now >= written { Ok(()) } else { Err(now) }
    })
    .await;
    assert!(
        caught_up.is_ok(),
        "{} did not catch up once space returned: {caught_up:?}\n{}",
        c.name(follower),
        c.logs()
    );
    let first = c.get(follower, &key(0), "?stale").await.expect("big/0");
    assert_eq!(first.value, b"before the disk filled");
    drop(c);
}
