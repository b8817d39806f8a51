//! Area 80: the Consul KV driver's `cas` and `list` against a real Trireme node, and the YCSB
//! presets that need them (E: scans, F: read-modify-write) run end to end; the documents
//! driver (`orchestrate`) and the Orchestrate production mix, search included.

use std::time::Duration;

use crate::common::{StartOptions, TestNode, binary, run_bench, run_program_async};
use serde_json::Value;
use trireme_bench::driver::{DriverError, HttpDriver, OrchestrateDriver};
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
async fn a_mix_with_search_is_refused_before_it_starts_by_a_driver_without_search() {
    let node = TestNode::start(StartOptions::default()).await;
    let target = node.http_url();
    let args = [
        "bench",
        "--preset",
        "orchestrate-production-mix",
        "--driver",
        "consul",
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
        stderr.contains("the consul driver does not support search"),
        "the refusal names the driver and the operation: {stderr}"
    );
}

#[tokio::test]
async fn the_documents_driver_writes_reads_cas_lists_and_searches() {
    let node = TestNode::start(StartOptions::default()).await;
    let mut d = OrchestrateDriver::connect(&node.http_url(), Consistency::Consistent)
        .await
        .expect("connect");
    let mut rng = trireme_bench::worker_rng(1, 0);

    // A cas on an absent document creates it; the stored document is built from the value.
    d.execute(Operation::Cas, "key:000000000107", Some(b"abc"), &mut rng)
        .await
        .expect("create through cas");
    let (body, first) = d.get("key:000000000107").await.unwrap().expect("written");
    let doc: Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(
        (doc["n"].as_u64(), doc["group"].as_str()),
        (Some(107), Some("g7"))
    );
    assert_eq!(doc["text"].as_str().map(str::len), Some(3));
    // The same key through the KV API: one keyspace.
    assert!(node.get("bench/key:000000000107").await.is_some());

    // A write since the ref was read makes the conditional write a conflict.
    d.put("key:000000000107", b"defg").await.unwrap();
    let lost = d.write_if("key:000000000107", b"x", Some(&first)).await;
    assert!(matches!(lost, Err(DriverError::Conflict(_))), "{lost:?}");
    let created_twice = d.write_if("key:000000000107", b"x", None).await;
    assert!(
        matches!(created_twice, Err(DriverError::Conflict(_))),
        "{created_twice:?}"
    );
    let (_, now) = d
        .get("key:000000000107")
        .await
        .unwrap()
        .expect("still there");
    d.write_if("key:000000000107", b"xyz", Some(&now))
        .await
        .expect("a write at the current ref");

    // list and search answer pages; a miss and a delete are not errors.
    for i in [7u64, 8, 9, 207] {
        d.put(&format!("key:{i:012}"), b"v").await.unwrap();
    }
    assert_eq!(
        d.list("key:000000000008", 10).await.unwrap(),
        4,
        "8, 9, 107, 207"
    );
    assert_eq!(d.list("key:000000000008", 2).await.unwrap(), 2);
    assert_eq!(
        d.search("group:g7", 10).await.unwrap(),
        (3, 3),
        "7, 107, 207"
    );
    assert_eq!(d.search("group:g7", 1).await.unwrap(), (1, 3));
    d.delete("key:000000000207").await.unwrap();
    assert_eq!(d.get("key:000000000207").await.unwrap(), None);
    d.execute(Operation::Get, "key:000000000999", None, &mut rng)
        .await
        .expect("a miss is not an error");
    for op in [Operation::List, Operation::Search, Operation::Delete] {
        d.execute(op, "key:000000000009", None, &mut rng)
            .await
            .unwrap_or_else(|e| panic!("{op}: {e}"));
    }
    assert!(matches!(
        d.search("group:", 10).await,
        Err(DriverError::Server(m)) if m.contains("400")
    ));
}

#[tokio::test]
async fn the_orchestrate_production_mix_runs_every_operation_search_included() {
    let node = TestNode::start(StartOptions::default()).await;
    let target = node.http_url();
    let result = bench_json(&[
        "--preset",
        "orchestrate-production-mix",
        "--keys",
        "300",
        "--duration",
        "3s",
        "--warmup",
        "0s",
        "--concurrent",
        "3",
        "--target",
        &target,
    ])
    .await;
    for op in ["get", "put", "delete", "list", "search"] {
        let done = result["per_op"][op]["count"].as_u64().unwrap_or(0);
        assert!(done > 0, "no successful {op}: {result}");
        let p50 = result["per_op"][op]["p50_us"].as_u64().unwrap_or(0);
        assert!(p50 > 0, "{op} has a latency: {result}");
    }
    let errors = result["errors"].as_object().expect("errors by kind");
    assert!(errors.is_empty(), "errors: {errors:?}");
    assert_eq!(
        result["load"]["count"], 300,
        "the load phase wrote every document"
    );

    // What the run searched for is really there: a group search through the server returns
    // exactly the documents of that group, as a full listing of the collection shows them.
    let c = &node.http;
    let mut by_group: std::collections::BTreeMap<String, Vec<String>> = Default::default();
    let mut next = Some("/v0/bench?limit=100".to_string());
    while let Some(path) = next.take() {
        let page: Value = c
            .get(format!("{target}{path}"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        for r in page["results"].as_array().expect("results") {
            let group = r["value"]["group"].as_str().expect("a group").to_string();
            let key = r["path"]["key"].as_str().expect("a key").to_string();
            by_group.entry(group).or_default().push(key);
        }
        next = page["next"].as_str().map(str::to_string);
    }
    let listed: usize = by_group.values().map(Vec::len).sum();
    assert!(listed > 250, "most of the 300 documents remain: {listed}");
    for group in ["g0", "g7", "g42", "g99"] {
        let url = format!("{target}/v0/bench?query=group:{group}&limit=100&consistent");
        let page: Value = c.get(url).send().await.unwrap().json().await.unwrap();
        let mut found: Vec<String> = page["results"]
            .as_array()
            .expect("results")
            .iter()
            .map(|r| {
                assert_eq!(r["value"]["group"], group, "a result outside {group}: {r}");
                r["path"]["key"].as_str().unwrap().to_string()
            })
            .collect();
        found.sort();
        let mut expected = by_group.get(group).cloned().unwrap_or_default();
        expected.sort();
        assert!(!expected.is_empty(), "the load wrote documents of {group}");
        assert_eq!(found, expected, "search for {group}");
        assert_eq!(page["total_count"], expected.len(), "{group}");
    }
}
