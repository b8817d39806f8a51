//! Area 50: the client programs users already run, unchanged, against a real node:
//! py-consul (Consul's Python client) and redis-benchmark (Debian's redis-tools). Both are
//! installed by `scripts/install-test-deps.sh`.

use crate::common;

use crate::common::{
    RawResp, Reply, ReplyExt, StartOptions, TestNode, run_program, run_program_async,
};
use std::path::PathBuf;
use std::time::Duration;

fn workspace_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../..")
}

#[tokio::test]
async fn py_consul_works_unchanged() {
    let node = TestNode::start(StartOptions::default()).await;
    let python = workspace_root().join("target/test-venv/bin/python");
    let script = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/clients/consul_kv.py");
    let http = node.endpoints().http;
    let (script, ip, port) = (
        script.display().to_string(),
        http.ip().to_string(),
        http.port().to_string(),
    );
    let (ok, stdout, stderr) = run_program_async(
        &python.display().to_string(),
        &[&script, &ip, &port],
        Duration::from_secs(60),
    )
    .await;
    assert!(
        ok,
        "py-consul checks failed:\n{stdout}\n{stderr}\nserver log:\n{}",
        node.stderr_log()
    );
    assert_eq!(stdout.trim(), "ok");
}

#[tokio::test]
async fn redis_benchmark_runs_clean_and_its_writes_are_readable() {
    let node = TestNode::start(StartOptions::default()).await;
    let port = node.resp_addr().port().to_string();
    let (ok, stdout, stderr) = run_program_async(
        "redis-benchmark",
        &[
            "-h",
            "127.0.0.1",
            "-p",
            &port,
            "-t",
            "set,get,incr,mset",
            "-n",
            "2000",
            "-c",
            "10",
            "-r",
            "100",
            "-d",
            "64",
            "--csv",
        ],
        Duration::from_secs(120),
    )
    .await;
    assert!(ok, "redis-benchmark failed: {stdout}\n{stderr}");
    assert!(
        !stdout.contains("ERR") && !stderr.contains("ERR"),
        "errors during the run: {stdout}\n{stderr}"
    );
    for test in ["SET", "GET", "INCR", "MSET (10 keys)"] {
        let row = stdout
            .lines()
            .find(|l| l.starts_with(&format!("\"{test}\"")))
            .unwrap_or_else(|| panic!("no {test} row in:\n{stdout}"));
        let rps: f64 = row
            .split(',')
            .nth(1)
            .and_then(|v| v.trim_matches('"').parse().ok())
            .expect("rps column");
        assert!(rps > 0.0, "{test}: {row}");
    }
    // -r 100 draws keys key:000000000000..key:000000000099 (and counter:..., plus MSET's keys):
    // what it wrote is there, and INCR counted every one of its 2000 increments.
    let mut c = RawResp::connect(node.resp_addr()).await;
    c.send_cmd(&[b"DBSIZE"]).await;
    let keys = Reply::parse(&c.read_reply().await).int();
    assert!((1..=300).contains(&keys), "DBSIZE {keys}");
    let mut total = 0i64;
    for i in 0..100 {
        let key = format!("counter:{i:012}");
        c.send_cmd(&[b"GET", key.as_bytes()]).await;
        if let Reply::Bulk(Some(value)) = Reply::parse(&c.read_reply().await) {
            total += std::str::from_utf8(&value)
                .expect("text")
                .parse::<i64>()
                .expect("integer");
        }
    }
    assert_eq!(total, 2000, "INCR lost or duplicated increments");
}

/// `trireme bench` (RESP driver) runs a preset against a real node and prints the seeds' table.
#[tokio::test]
async fn trireme_bench_runs_a_preset_against_a_node() {
    let node = TestNode::start(StartOptions::default()).await;
    let target = format!("redis://{}", node.resp_addr());
    let (ok, stdout, stderr) = run_program_async(
        common::binary(),
        &[
            "bench",
            "--preset",
            "riak-10-1",
            "--target",
            &target,
            "--duration",
            "1s",
            "--warmup",
            "0s",
            "--keys",
            "100",
            "--concurrent",
            "2",
            "--no-results",
        ],
        Duration::from_secs(120),
    )
    .await;
    assert!(ok, "trireme bench failed:\n{stdout}\n{stderr}");
    assert!(
        stderr.contains("scaled from 1000000 to 100 keys"),
        "{stderr}"
    );
    for op in ["get", "put", "total"] {
        let row = stdout
            .lines()
            .find(|l| l.split_whitespace().next() == Some(op))
            .unwrap_or_else(|| panic!("no {op} row in:\n{stdout}"));
        let columns: Vec<&str> = row.split_whitespace().collect();
        let count: u64 = columns[1].parse().expect("count");
        assert!(count > 0, "{row}");
        assert_eq!(columns.last(), Some(&"0"), "errors in {row}");
    }

    let (ok, _, stderr) = run_program(
        common::binary(),
        &["bench".into(), "--preset".into(), "nope".into()],
        Duration::from_secs(30),
    );
    assert!(!ok);
    assert!(stderr.contains("no preset \"nope\""), "{stderr}");
}

/// The Consul report's tests through `trireme bench`'s Consul KV driver, against a node's HTTP API.
#[tokio::test]
async fn trireme_bench_runs_the_consul_presets_over_http() {
    let node = TestNode::start(StartOptions::default()).await;
    let target = format!("http://{}", node.endpoints().http);
    for preset in ["consul-put", "consul-get-consistent"] {
        let (ok, stdout, stderr) = run_program_async(
            common::binary(),
            &[
                "bench",
                "--preset",
                preset,
                "--target",
                &target,
                "--duration",
                "1s",
                "--warmup",
                "0s",
                "--concurrent",
                "4",
                "--no-results",
            ],
            Duration::from_secs(120),
        )
        .await;
        assert!(ok, "{preset} failed:\n{stdout}\n{stderr}");
        let total = stdout
            .lines()
            .find(|l| l.starts_with("total"))
            .unwrap_or_else(|| panic!("no total row in:\n{stdout}"));
        let columns: Vec<&str> = total.split_whitespace().collect();
        assert!(
            columns[1].parse::<u64>().expect("count") > 0,
            "{preset}: {total}"
        );
        assert_eq!(columns.last(), Some(&"0"), "{preset} had errors: {total}");
    }
    // consul-put wrote the 36-byte value the report used.
    let entry = node
        .get("key:000000000000")
        .await
        .expect("the benchmark's single key");
    assert_eq!(entry.value.len(), 36);
}
