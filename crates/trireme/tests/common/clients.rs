//! Client programs in other languages (under `tests/clients/`), built and run with a bound
//! on time: go-redis, node-redis, Consul's Go client, redis-py.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

/// The source folder of client `name` under `tests/clients/`.
pub fn source(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/clients")
        .join(name)
}

/// Runs `command` to its end within `limit` and returns its output; panics with `what` if
/// it cannot start or does not finish.
pub async fn run_bounded(
    mut command: tokio::process::Command,
    limit: Duration,
    what: &str,
) -> Output {
    let run = command.kill_on_drop(true).output();
    tokio::time::timeout(limit, run)
        .await
        .unwrap_or_else(|_| panic!("{what} did not finish within {limit:?}"))
        .unwrap_or_else(|e| panic!("cannot run {what}: {e}"))
}

/// Builds the Go client `name` (a folder under `tests/clients/`, perhaps nested, such as
/// `consul/txn`; its modules come from the Go module proxy) into `out`; the binary's path.
pub async fn go_build(name: &str, out: &Path) -> PathBuf {
    let binary = out.join(name.replace('/', "-"));
    let mut build = tokio::process::Command::new("go");
    build
        .args(["build", "-o"])
        .arg(&binary)
        .arg(".")
        .current_dir(source(name));
    let built = run_bounded(build, Duration::from_secs(300), "go build").await;
    assert!(
        built.status.success(),
        "go build of {name}: {}",
        String::from_utf8_lossy(&built.stderr)
    );
    binary
}

/// Asserts that a client program succeeded and printed one JSON line; that line.
pub fn json_line(output: &Output, context: &str) -> serde_json::Value {
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(output.status.success(), "{stdout}\n{stderr}\n{context}");
    serde_json::from_str(stdout.trim())
        .unwrap_or_else(|e| panic!("{e}: not one JSON line: {stdout}"))
}
