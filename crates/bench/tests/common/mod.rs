//! What the bench crate's driver tests share.

#![allow(dead_code)]

use std::process::Command;
use std::time::{Duration, Instant};
use trireme_bench::{Scenario, run};

/// Runs `scenario` against `targets` and SIGKILLs the server `pid` 300 ms in. The run must
/// end on time, and the dead target must show up as counted `io` errors, not as a failed run.
pub async fn assert_killed_target_counts_io_errors(
    scenario: &Scenario,
    targets: &[String],
    pid: u32,
) {
    let killer = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        let status = Command::new("kill")
            .args(["-KILL", &pid.to_string()])
            .status()
            .unwrap();
        assert!(status.success());
    });
    let started = Instant::now();
    let result = tokio::time::timeout(Duration::from_secs(10), run(scenario, targets, None))
        .await
        .expect("the run hung")
        .unwrap();
    killer.await.unwrap();
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert!(
        result.errors.get("io").copied().unwrap_or(0) > 0,
        "{:?}",
        result.errors
    );
    assert!(result.total.count > 0);
    assert_eq!(result.total.errors, result.errors.values().sum::<u64>());
}
