//! Area 80: the Consul KV driver's `cas` and `list` against a real Trireme node, and the YCSB
//! presets that need them (E: scans, F: read-modify-write) run end to end.

mod common;

use std::time::Duration;

use common::{StartOptions, TestNode, binary, run_bench, run_program_async};
use serde_json::Value;
use trireme_bench::driver::{DriverError, HttpDriver};
use trireme_bench::scenario::{Consistency, Operation};

#[tokio::test]
async fn cas_writes_only_over_the_index_it_read_and_list_reads_one_prefix() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut driver = HttpDriver::connect(&node.http_url(), Consistency::Consistent)
        .await
        .expect("connect");

    // cas=0 creates only.
    assert_eq!(driver.modify_index("key:000000000041").await.unwrap(), None);
    assert!(driver.cas("key:000000000041", 0, b"v1").await.unwrap());
    assert!(!driver.cas("key:000000000041", 0, b"v2").await.unwrap());
    let first = driver
        .modify_index("key:000000000041")
        .await
        .unwrap()
        .expect("written");
    driver.put("key:000000000041", b"v3").await.unwrap();
    assert!(
        !driver.cas("key:000000000041", first, b"v4").await.unwrap(),
        "a write since index {first} makes the cas fail"
    );
    assert_eq!(
        driver.get("key:000000000041").await.unwrap().as_deref(),
        Some(&b"v3"[..])
    );
    let now = driver.modify_index("key:000000000041").await.unwrap();
    assert!(now > Some(first));
    driver
        .execute(Operation::Cas, "key:000000000041", Some(b"v5"))
        .await
        .expect("a read-then-cas with no other writer succeeds");
    assert_eq!(
        driver.get("key:000000000041").await.unwrap().as_deref(),
        Some(&b"v5"[..])
    );

    for key in ["key:000000000040", "key:000000000049", "key:000000000050"] {
        driver.put(key, b"x").await.unwrap();
    }
    let listed: Vec<String> = driver
        .list("key:00000000004")
        .await
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(
        listed,
        ["key:000000000040", "key:000000000041", "key:000000000049"],
        "the prefix's keys in order, and nothing past it"
    );
    assert!(driver.list("nothing-here/").await.unwrap().is_empty());
    driver
        .execute(Operation::List, "key:000000000043", None)
        .await
        .expect("list");
    assert!(matches!(
        driver.execute(Operation::Search, "key:1", None).await,
        Err(DriverError::Unsupported { .. })
    ));
}

/// Runs `trireme bench` with `args` and returns the parsed `--json` result.
async fn bench_json(args: &[&str]) -> Value {
    let mut all = args.to_vec();
    all.extend(["--json", "--quiet", "--no-results"]);
    let stdout = run_bench(&all).await;
    // With --json, stdout holds the JSON document alone (the table goes to stderr).
    serde_json::from_str(&stdout).unwrap_or_else(|e| panic!("{e}: {stdout}"))
}

#[tokio::test]
async fn ycsb_e_and_f_run_their_scans_and_read_modify_writes() {
    let node = TestNode::start(StartOptions::default()).await;
    let target = node.http_url();
    for (preset, op) in [("ycsb-e", "list"), ("ycsb-f", "cas")] {
        let result = bench_json(&[
            "--preset",
            preset,
            "--keys",
            "200",
            "--duration",
            "2s",
            "--warmup",
            "0s",
            "--concurrent",
            "4",
            "--target",
            &target,
        ])
        .await;
        let done = result["per_op"][op]["count"].as_u64().unwrap_or(0);
        assert!(done > 0, "{preset}: no successful {op}: {result}");
        let errors = result["errors"].as_object().expect("errors by kind");
        assert!(
            errors.keys().all(|kind| kind == "conflict"),
            "{preset}: only lost cas races may fail: {errors:?}"
        );
    }
}

#[tokio::test]
async fn a_mix_with_search_is_refused_before_it_starts() {
    let node = TestNode::start(StartOptions::default()).await;
    let target = node.http_url();
    let args = [
        "bench",
        "--preset",
        "orchestrate-production-mix",
        "--target",
        &target,
        "--keys",
        "100",
        "--duration",
        "1s",
        "--no-results",
        "--quiet",
    ];
    let (ok, _, stderr) = run_program_async(binary(), &args, Duration::from_secs(60)).await;
    assert!(!ok, "a mix with search ran: {stderr}");
    assert!(
        stderr.contains("search"),
        "the refusal names the operation: {stderr}"
    );
}
