//! Area 40: starting `trireme server`: readiness, clean stops, and every refusal with its
//! message and a non-zero exit.

use crate::common::{StartOptions, TestNode, run_expect_failure};
use std::path::Path;
use std::time::Duration;

const FAIL_WITHIN: Duration = Duration::from_secs(30);

/// `server` arguments on free ports for `dir`; a flag in `extra` replaces the default one.
fn server_args<'a>(dir: &'a str, extra: &[&'a str]) -> Vec<&'a str> {
    let defaults = [
        ("--data-dir", dir),
        ("--http", "127.0.0.1:0"),
        ("--resp", "127.0.0.1:0"),
        ("--peer", "127.0.0.1:0"),
        ("--log", "warn"),
    ];
    let mut args = vec!["server"];
    for (flag, value) in defaults {
        if !extra.contains(&flag) {
            args.extend([flag, value]);
        }
    }
    args.extend_from_slice(extra);
    args
}

/// Runs the server expecting it to fail; asserts a non-zero exit and `needle` on stderr.
fn expect_refusal(args: &[&str], needle: &str) -> String {
    let (code, stderr) = run_expect_failure(args, FAIL_WITHIN);
    assert_ne!(code, 0, "`trireme {}` must fail", args.join(" "));
    assert!(
        stderr.contains(needle),
        "stderr of `trireme {}` should contain {needle:?}:\n{stderr}",
        args.join(" ")
    );
    stderr
}

fn path_str(p: &Path) -> String {
    p.display().to_string()
}

#[tokio::test]
async fn ready_line_endpoints_and_clean_stops() {
    let mut node = TestNode::start(StartOptions::default().shards(4)).await;
    let ep = node.endpoints().clone();
    assert_eq!(ep.pid, node.pid());
    let line = node.ready_stdout().await;
    assert_eq!(
        line.trim_end(),
        format!(
            "trireme node n1 ready: http={} resp={} peer={} shards=4",
            ep.http, ep.resp, ep.peer
        )
    );
    assert_eq!(line.lines().count(), 1, "one line on stdout: {line:?}");
    assert_ne!(ep.http.port(), 0);
    assert_ne!(ep.resp.port(), 0);
    assert_ne!(ep.peer.port(), 0);

    let status = node.terminate().await;
    assert!(status.success(), "SIGTERM: {status}\n{}", node.stderr_log());
    node.restart().await;
    assert!(node.put("k", "v").await);
    let status = node.stop_with("INT").await;
    assert!(status.success(), "SIGINT: {status}\n{}", node.stderr_log());
    node.restart().await;
    assert_eq!(node.get("k").await.unwrap().value, b"v");
}

#[tokio::test]
async fn unknown_config_fields_are_named() {
    let dir = tempfile::tempdir().unwrap();
    let data = path_str(&dir.path().join("data"));
    let cases = [
        ("top.toml", "node_id = \"n1\"\nshardz = 4\n", "shardz"),
        ("raft.toml", "[raft]\nheartbeat = 50\n", "heartbeat"),
        (
            "limits.toml",
            "[limits]\nmax_key_size = 10\n",
            "max_key_size",
        ),
    ];
    for (file, text, field) in cases {
        let path = dir.path().join(file);
        std::fs::write(&path, text).unwrap();
        let path = path_str(&path);
        expect_refusal(&server_args(&data, &["--config", &path]), field);
    }
    // Nothing was bootstrapped by the refused starts.
    assert!(!dir.path().join("data").join("endpoints.json").exists());

    // A known but inconsistent setting is refused too.
    let path = dir.path().join("timing.toml");
    std::fs::write(
        &path,
        "[raft]\nheartbeat_ms = 500\nelection_timeout_min_ms = 400\nelection_timeout_max_ms = 800\n",
    )
    .unwrap();
    expect_refusal(
        &server_args(&data, &["--config", &path_str(&path)]),
        "heartbeat_ms",
    );
    let missing = path_str(&dir.path().join("missing.toml"));
    expect_refusal(&server_args(&data, &["--config", &missing]), "missing.toml");
}

#[tokio::test]
async fn bad_flag_values_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let data = path_str(&dir.path().join("data"));
    expect_refusal(&server_args(&data, &["--shards", "0"]), "--shards");
    expect_refusal(&server_args(&data, &["--shards", "16385"]), "--shards");
    expect_refusal(&server_args(&data, &["--shards", "many"]), "--shards");
    let stderr = expect_refusal(&server_args(&data, &["--http", "nonsense"]), "--http");
    assert!(stderr.contains("nonsense"), "{stderr}");
    expect_refusal(&server_args(&data, &["--resp", "127.0.0.1"]), "--resp");
}

#[tokio::test]
async fn a_port_in_use_is_named() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap().to_string();
    let dir = tempfile::tempdir().unwrap();
    let data = path_str(&dir.path().join("data"));
    for flag in ["--http", "--resp", "--peer"] {
        expect_refusal(
            &server_args(&data, &[flag, &addr]),
            &format!("cannot listen on {flag} {addr}"),
        );
    }
    drop(taken);
}

#[tokio::test]
async fn a_data_dir_from_another_cluster_is_refused() {
    let mut node = TestNode::start(StartOptions {
        cluster_name: Some("alpha".into()),
        ..Default::default()
    })
    .await;
    assert!(node.put("k", "alpha-data").await);
    node.terminate().await;

    let data = path_str(&node.data_dir());
    expect_refusal(
        &server_args(&data, &["--cluster-name", "beta"]),
        "belongs to cluster",
    );
    // The refusal touched nothing: the rightful cluster still starts with its data.
    node.restart().await;
    assert_eq!(node.get("k").await.unwrap().value, b"alpha-data");
}

#[tokio::test]
async fn a_data_dir_from_another_node_is_refused() {
    let mut node = TestNode::start(StartOptions::default()).await;
    assert!(node.put("k", "n1-data").await);
    node.kill9().await;

    let data = path_str(&node.data_dir());
    expect_refusal(&server_args(&data, &["--node-id", "n2"]), "belongs to node");
    node.restart().await;
    assert_eq!(node.get("k").await.unwrap().value, b"n1-data");
}

/// A data directory records its format; one written by a newer build (a higher format) is
/// refused, naming it, and nothing in it is touched: the right build starts on it as before.
#[tokio::test]
async fn a_data_dir_of_another_format_is_refused() {
    let mut node = TestNode::start(StartOptions::default()).await;
    assert!(node.put("k", "kept").await);
    node.kill9().await;
    let format = node.data_dir().join("FORMAT");
    let recorded = std::fs::read_to_string(&format).expect("a FORMAT file");
    assert_eq!(
        recorded,
        format!("trireme-data-format {}\n", trireme_storage::DATA_FORMAT)
    );

    std::fs::write(&format, "trireme-data-format 99\n").expect("write FORMAT");
    let data = path_str(&node.data_dir());
    expect_refusal(&server_args(&data, &[]), "holds data format 99");
    assert_eq!(
        std::fs::read_to_string(&format).expect("FORMAT"),
        "trireme-data-format 99\n"
    );

    std::fs::write(&format, recorded).expect("write FORMAT");
    node.restart().await;
    assert_eq!(node.get("k").await.expect("k").value, b"kept");
}

#[tokio::test]
async fn the_shard_count_is_fixed_at_bootstrap() {
    let mut node = TestNode::start(StartOptions::default().shards(4)).await;
    assert_eq!(node.shards().await.shard_count, 4);
    assert!(node.put("k", "v").await);
    node.terminate().await;

    let data = path_str(&node.data_dir());
    expect_refusal(
        &server_args(&data, &["--shards", "8"]),
        "shard count is fixed at bootstrap",
    );

    // Without --shards the stored count is kept (not the default of 16).
    node.options_mut().shards = None;
    node.restart().await;
    let shards = node.shards().await;
    assert_eq!(shards.shard_count, 4, "{shards:?}");
    assert_eq!(shards.shards.len(), 4);
    assert!(
        node.stdout_log().contains("shards=4"),
        "{}",
        node.stdout_log()
    );
    assert_eq!(node.get("k").await.unwrap().value, b"v");

    // Repeating the stored count is fine.
    node.terminate().await;
    node.options_mut().shards = Some(4);
    node.restart().await;
    assert_eq!(node.shards().await.shard_count, 4);
}

#[tokio::test]
async fn a_second_process_on_a_live_data_dir_is_refused() {
    let node = TestNode::start(StartOptions::default()).await;
    let data = path_str(&node.data_dir());
    let endpoints = std::fs::read_to_string(node.data_dir().join("endpoints.json")).unwrap();
    let (code, stderr) = run_expect_failure(&server_args(&data, &[]), FAIL_WITHIN);
    assert_ne!(code, 0, "{stderr}");
    assert!(!stderr.trim().is_empty(), "a refusal must say why");
    // The running node's endpoints.json is untouched and it keeps serving.
    assert_eq!(
        std::fs::read_to_string(node.data_dir().join("endpoints.json")).unwrap(),
        endpoints
    );
    assert!(node.put("k", "v").await);
}
