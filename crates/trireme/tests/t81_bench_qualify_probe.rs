//! Area 80: `trireme bench probe` (replication delay, the Dynomite report's method) against a
//! real 3-node cluster, and `trireme bench qualify` (the Aerospike report's rate search)
//! against a real node, both through the binary as a user runs them.

use crate::common;

use crate::common::cluster::{ClusterOptions, TestCluster};
use crate::common::{StartOptions, TestNode};
use std::time::Duration;

/// Runs `trireme ARGS` off the async runtime with a deadline; returns (success, stdout, stderr).
async fn trireme(args: &[&str], limit: Duration) -> (bool, String, String) {
    common::run_program_async(common::binary(), args, limit).await
}

#[tokio::test]
async fn probe_measures_replication_delay_between_two_nodes() {
    let cluster = TestCluster::start(ClusterOptions::default()).await;
    let write = cluster.node(0).http_url();
    let read = cluster.node(1).http_url();
    let (ok, stdout, stderr) = trireme(
        &[
            "bench",
            "probe",
            "--write-target",
            &write,
            "--read-target",
            &read,
            "--samples",
            "40",
            "--concurrent",
            "2",
            "--json",
        ],
        Duration::from_secs(120),
    )
    .await;
    assert!(ok, "probe failed:\n{stdout}\n{stderr}");
    let result: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    assert_eq!(result["samples"], 40, "{result}");
    assert_eq!(result["visible"], 40, "{result}\n{stderr}");
    assert_eq!(result["timeouts"], 0, "{result}");
    assert_eq!(result["write_errors"], 0, "{result}");
    assert_eq!(result["after_ack"]["count"], 40, "{result}");
    let max = result["after_ack"]["max_us"].as_u64().expect("max");
    let p50 = result["after_ack"]["p50_us"].as_u64().expect("p50");
    assert!(p50 <= max && max < 5_000_000, "{result}");
    // From the write's start is never shorter than from its acknowledgement.
    assert!(result["from_start"]["p50_us"].as_u64().expect("p50") >= p50);
    assert!(result["mean_reads"].as_f64().expect("reads") >= 1.0);
    assert!(
        stderr.contains("samples 40  visible 40  timeouts 0"),
        "{stderr}"
    );
    assert!(stderr.contains("Delay after ack histogram"), "{stderr}");
    // The probe's keys are really on the read node.
    let listed = cluster.node(1).list("probe/").await;
    assert_eq!(listed.len(), 40, "keys on node 2");
}

#[tokio::test]
async fn qualify_finds_a_passing_rate_on_one_node() {
    let node = TestNode::start(StartOptions::default()).await;
    let target = node.http_url();
    let out = tempfile::tempdir().expect("temp dir");
    let out_dir = out.path().display().to_string();
    let common_args = [
        "bench",
        "qualify",
        "--target",
        &target,
        "--driver",
        "consul",
        "--keys",
        "500",
        "--concurrent",
        "4",
        "--step-duration",
        "1s",
        "--warmup",
        "0s",
        "--repeat",
        "1",
        "--quiet",
    ];
    let mut args = common_args.to_vec();
    args.extend([
        "--start-rate",
        "40",
        "--max-rate",
        "120",
        "--bound-ms",
        "50",
        "--cost-per-hour",
        "0.36",
        "--out",
        &out_dir,
        "--json",
    ]);
    let (ok, stdout, stderr) = trireme(&args, Duration::from_secs(180)).await;
    assert!(ok, "qualify failed:\n{stdout}\n{stderr}");
    let report: serde_json::Value = serde_json::from_str(&stdout).expect("JSON on stdout");
    let rate = report["median_rate"].as_u64().expect("a passing rate");
    assert!((40..=120).contains(&rate), "{report}");
    let steps = report["repeats"][0]["steps"].as_array().expect("steps");
    assert_eq!(steps[0]["result"]["offered"], 40);
    for step in steps {
        let offered = step["result"]["offered"].as_u64().expect("offered");
        assert!(offered <= 120, "{step}");
        assert!(step["result"]["ops"].as_u64().expect("ops") > 0, "{step}");
    }
    let passed = steps.iter().filter(|s| s["failure"].is_null());
    assert_eq!(
        passed.filter_map(|s| s["result"]["offered"].as_u64()).max(),
        Some(rate)
    );
    let cost = report["cost_per_million"].as_f64().expect("cost");
    assert!((cost - 0.36 / (rate as f64 * 3600.0 / 1e6)).abs() < 1e-9);
    assert!(
        stderr.contains(&format!("qualified: {rate} ops/s")),
        "{stderr}"
    );
    let file = std::fs::read_to_string(out.path().join("qualify.json")).expect("qualify.json");
    let written: serde_json::Value = serde_json::from_str(&file).expect("JSON file");
    assert_eq!(written, report);

    // An impossible bound: the start rate fails and nothing passes.
    let mut args = common_args.to_vec();
    args.extend(["--start-rate", "40", "--bound-ms", "0.001"]);
    let (ok, stdout, stderr) = trireme(&args, Duration::from_secs(120)).await;
    assert!(ok, "qualify failed:\n{stdout}\n{stderr}");
    assert!(stdout.contains("qualified: no passing rate"), "{stdout}");
    assert!(stdout.contains("FAIL latency"), "{stdout}");
}
