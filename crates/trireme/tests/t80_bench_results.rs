//! Area 80: `trireme bench`'s results directory, from a real run against one real node.

use std::path::Path;

use crate::common::{StartOptions, TestNode, run_bench};
use serde_json::Value;

fn read(dir: &Path, name: &str) -> String {
    std::fs::read_to_string(dir.join(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
}

/// The numbers of one CSV column (after the header), `", "`-separated as basho_bench writes.
fn column(csv: &str, index: usize) -> Vec<u64> {
    csv.lines()
        .skip(1)
        .map(|l| {
            l.split(", ")
                .nth(index)
                .unwrap_or_else(|| panic!("short row {l:?}"))
                .parse()
                .unwrap_or_else(|_| panic!("not a count in {l:?}"))
        })
        .collect()
}

#[tokio::test]
async fn a_run_writes_every_results_file_and_they_agree() {
    let node = TestNode::start(StartOptions::default()).await;
    let out = tempfile::tempdir().expect("temp dir");
    let run = out.path().join("run");
    let target = node.http_url();
    let run_str = run.display().to_string();
    let stdout = run_bench(&[
        "--preset",
        "consul-put",
        "--duration",
        "2s",
        "--warmup",
        "0s",
        "--concurrent",
        "4",
        "--target",
        &target,
        "--driver",
        "consul",
        "--out",
        &run_str,
    ])
    .await;
    assert!(stdout.contains("Response time histogram"), "{stdout}");
    assert!(stdout.contains("Latency distribution"), "{stdout}");

    let result: Value = serde_json::from_str(&read(&run, "result.json")).expect("result.json");
    let ops = result["result"]["total"]["count"]
        .as_u64()
        .expect("total count");
    let errors = result["result"]["total"]["errors"]
        .as_u64()
        .expect("errors");
    assert!(ops > 0, "no successful operation: {result}");
    assert_eq!(result["scenario"]["name"], "consul-put");
    assert!(result["host"]["cores"].as_u64().unwrap_or(0) >= 1);
    assert!(
        result["command"]
            .as_str()
            .is_some_and(|c| c.contains("--preset consul-put")),
        "{}",
        result["command"]
    );

    let summary = read(&run, "summary.csv");
    assert!(summary.starts_with("elapsed, window, total, successful, failed\n"));
    let successful: u64 = column(&summary, 3).iter().sum();
    let failed: u64 = column(&summary, 4).iter().sum();
    let total: u64 = column(&summary, 2).iter().sum();
    assert_eq!(
        successful, ops,
        "summary.csv successful vs result.json\n{summary}"
    );
    assert_eq!(failed, errors);
    assert_eq!(total, ops + errors);
    let intervals = result["result"]["intervals"].as_array().expect("intervals");
    assert_eq!(intervals.len(), summary.lines().count() - 1);

    let latencies = read(&run, "put_latencies.csv");
    assert!(
        latencies.starts_with(
            "elapsed, window, n, min, mean, median, 95th, 99th, 99_9th, max, errors\n"
        )
    );
    assert_eq!(column(&latencies, 2).iter().sum::<u64>(), ops);

    let hgrm = read(&run, "put.hgrm");
    assert!(hgrm.starts_with("       Value     Percentile TotalCount 1/(1-Percentile)"));
    assert!(hgrm.contains("#[Mean    ="), "{hgrm}");
    assert!(
        hgrm.contains(&format!("Total count    = {ops:>12}]")),
        "{hgrm}"
    );

    for svg in ["throughput.svg", "latency.svg"] {
        let text = read(&run, svg);
        assert!(text.starts_with("<svg") && text.trim_end().ends_with("</svg>"));
        assert!(text.contains("<polyline"), "{svg}");
    }
    let html = read(&run, "report.html");
    assert!(html.contains("<svg") && !html.contains("src=\"http"));
    assert!(read(&run, "summary.txt").contains("Latency distribution"));

    // compare reads the run back (twice: against itself every ratio is 1).
    let cmp = out.path().join("cmp");
    let cmp_str = cmp.display().to_string();
    let text = run_bench(&["compare", &run_str, &run_str, "--out", &cmp_str]).await;
    assert!(text.contains("1.00x"), "{text}");
    assert!(cmp.join("compare.html").is_file());
}
