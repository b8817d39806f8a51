//! Area 75: `trireme kv`, the command-line client, against a real one-node cluster: what it
//! prints, what it writes, and its exit status (0 done, 1 missing key or failed
//! check-and-set, 2 an error).

use crate::common::{StartOptions, TestNode, binary};
use serde_json::Value;
use std::process::Stdio;
use std::time::Duration;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader, Lines};
use tokio::process::{ChildStdout, Command};

/// What one `trireme kv ...` run did.
struct Run {
    code: i32,
    stdout: Vec<u8>,
    stderr: String,
}

impl Run {
    fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.stdout).into_owned()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}): {}", self.stdout()))
    }
}

/// Runs `trireme kv ARGS --target <node>` with `stdin` as its input, within 30 s.
async fn kv(node: &TestNode, args: &[&str], stdin: &[u8]) -> Run {
    let mut child = Command::new(binary())
        .arg("kv")
        .args(args)
        .args(["--target", &node.http_url()])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn trireme kv");
    let mut input = child.stdin.take().expect("stdin");
    // A subcommand that does not read stdin may have exited already: nothing to check here.
    let _ = input.write_all(stdin).await;
    drop(input);
    let output = tokio::time::timeout(Duration::from_secs(30), child.wait_with_output())
        .await
        .unwrap_or_else(|_| panic!("trireme kv {args:?} did not finish within 30 s"))
        .expect("trireme kv output");
    Run {
        code: output.status.code().expect("exited, not killed"),
        stdout: output.stdout,
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// Like [`kv`], and the run must succeed.
async fn kv_ok(node: &TestNode, args: &[&str]) -> Run {
    let run = kv(node, args, b"").await;
    assert_eq!(
        run.code,
        0,
        "trireme kv {args:?} failed\nstdout: {}\nstderr: {}",
        run.stdout(),
        run.stderr
    );
    run
}

#[tokio::test]
async fn put_get_list_and_delete_round_trip() {
    let node = TestNode::start(StartOptions::default()).await;

    assert!(
        kv_ok(&node, &["put", "app/a", "one"])
            .await
            .stdout
            .is_empty()
    );
    // `-` reads the value from stdin, byte for byte (a newline and a non-UTF-8 byte included).
    let value = b"two\n\xff";
    let run = kv(&node, &["put", "app/b c", "-"], value).await;
    assert_eq!(run.code, 0, "put from stdin: {}", run.stderr);
    assert_eq!(node.get("app/b%20c").await.expect("written").value, value);

    // Values come back raw: no newline added when stdout is not a terminal.
    assert_eq!(kv_ok(&node, &["get", "app/a"]).await.stdout, b"one");
    assert_eq!(kv_ok(&node, &["get", "app/b c"]).await.stdout, value);
    for mode in ["--consistent", "--stale"] {
        assert_eq!(kv_ok(&node, &["get", "app/a", mode]).await.stdout, b"one");
    }

    kv_ok(&node, &["put", "app/sub/x", "3"]).await;
    kv_ok(&node, &["put", "other", "4"]).await;
    let run = kv_ok(&node, &["list", "app/"]).await;
    assert_eq!(run.stdout(), "app/a\napp/b c\napp/sub/x\n");
    let run = kv_ok(&node, &["list", "app/", "--separator", "/"]).await;
    assert_eq!(run.stdout(), "app/a\napp/b c\napp/sub/\n");
    // An empty prefix lists every key; a prefix with nothing under it lists nothing.
    let run = kv_ok(&node, &["list"]).await;
    assert_eq!(run.stdout(), "app/a\napp/b c\napp/sub/x\nother\n");
    assert!(kv_ok(&node, &["list", "nothing/"]).await.stdout.is_empty());

    kv_ok(&node, &["delete", "app/a"]).await;
    let run = kv(&node, &["get", "app/a"], b"").await;
    assert_eq!(run.code, 1, "a deleted key is missing: {}", run.stderr);
    assert_eq!(
        kv_ok(&node, &["list", "app/"]).await.stdout(),
        "app/b c\napp/sub/x\n"
    );

    kv_ok(&node, &["delete", "app/", "--recurse"]).await;
    assert!(kv_ok(&node, &["list", "app/"]).await.stdout.is_empty());
    assert_eq!(kv_ok(&node, &["get", "other"]).await.stdout, b"4");
    // An empty prefix would delete everything: refused, and nothing is deleted.
    let run = kv(&node, &["delete", "", "--recurse"], b"").await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("prefix"), "{}", run.stderr);
    assert_eq!(kv_ok(&node, &["get", "other"]).await.stdout, b"4");

    // A key with `..` in it is that key, not resolved like a path.
    kv_ok(&node, &["put", "dots/../x", "5"]).await;
    assert_eq!(kv_ok(&node, &["get", "dots/../x"]).await.stdout, b"5");
    assert_eq!(kv(&node, &["get", "x"], b"").await.code, 1);
    assert_eq!(
        kv_ok(&node, &["list", "dots/"]).await.stdout(),
        "dots/../x\n"
    );
}

#[tokio::test]
async fn check_and_set_failures_exit_1_and_say_why() {
    let node = TestNode::start(StartOptions::default()).await;
    kv_ok(&node, &["put", "cfg", "v1"]).await;
    let index = kv_ok(&node, &["get", "cfg", "--json"]).await.json()["ModifyIndex"]
        .as_u64()
        .expect("ModifyIndex");

    let stale = (index + 1000).to_string();
    let run = kv(&node, &["put", "cfg", "v2", "--cas", &stale], b"").await;
    assert_eq!(run.code, 1, "a failed cas: {}", run.stderr);
    assert!(
        run.stderr.contains(&format!("ModifyIndex {index}")),
        "says where the key is: {}",
        run.stderr
    );
    assert_eq!(kv_ok(&node, &["get", "cfg"]).await.stdout, b"v1");

    let run = kv(&node, &["put", "cfg", "v3", "--cas", "0"], b"").await;
    assert_eq!(run.code, 1, "cas 0 on an existing key: {}", run.stderr);
    assert!(run.stderr.contains("exist"), "{}", run.stderr);

    kv_ok(&node, &["put", "cfg", "v2", "--cas", &index.to_string()]).await;
    assert_eq!(kv_ok(&node, &["get", "cfg"]).await.stdout, b"v2");
    kv_ok(&node, &["put", "fresh", "x", "--cas", "0"]).await;

    // Delete with the old index fails and keeps the key; with the current one it deletes.
    let run = kv(&node, &["delete", "cfg", "--cas", &index.to_string()], b"").await;
    assert_eq!(run.code, 1, "a failed delete cas: {}", run.stderr);
    assert!(run.stderr.contains("not deleted"), "{}", run.stderr);
    let now = kv_ok(&node, &["get", "cfg", "--json"]).await.json()["ModifyIndex"]
        .as_u64()
        .expect("ModifyIndex");
    assert!(now > index);
    kv_ok(&node, &["delete", "cfg", "--cas", &now.to_string()]).await;
    assert_eq!(kv(&node, &["get", "cfg"], b"").await.code, 1);
}

#[tokio::test]
async fn json_output_is_consuls_entry_shape() {
    let node = TestNode::start(StartOptions::default()).await;
    kv_ok(&node, &["put", "j/k", "hello", "--flags", "7"]).await;
    let entry = kv_ok(&node, &["get", "j/k", "--json"]).await.json();
    assert_eq!(entry["Key"], "j/k");
    assert_eq!(entry["Value"], "aGVsbG8=", "the value in base64, as Consul");
    assert_eq!(entry["Flags"], 7);
    assert_eq!(entry["LockIndex"], 0);
    let create = entry["CreateIndex"].as_u64().expect("CreateIndex");
    assert_eq!(entry["ModifyIndex"].as_u64(), Some(create));

    kv_ok(&node, &["put", "j/l", ""]).await;
    let entries = kv_ok(&node, &["list", "j/", "--json"]).await.json();
    let entries = entries.as_array().expect("an array of entries");
    let keys: Vec<&str> = entries.iter().filter_map(|e| e["Key"].as_str()).collect();
    assert_eq!(keys, ["j/k", "j/l"]);
    assert_eq!(entries[1]["Value"], Value::Null, "an empty value is null");
    assert_eq!(
        kv_ok(&node, &["list", "none/", "--json"]).await.json(),
        serde_json::json!([])
    );
}

#[tokio::test]
async fn missing_keys_exit_1_and_errors_exit_2() {
    let node = TestNode::start(StartOptions::default()).await;
    for args in [&["get", "nope"][..], &["get", "nope", "--json"]] {
        let run = kv(&node, args, b"").await;
        assert_eq!(run.code, 1, "{args:?}: {}", run.stderr);
        assert!(run.stdout.is_empty(), "{args:?} printed {}", run.stdout());
        assert!(run.stderr.contains("\"nope\" not found"), "{}", run.stderr);
    }

    // Conflicting read modes: a usage error.
    let run = kv(&node, &["get", "k", "--consistent", "--stale"], b"").await;
    assert_eq!(run.code, 2, "{}", run.stderr);

    // A node's error answer is passed on with its code.
    let big = "k".repeat(9000);
    let run = kv(&node, &["put", &big, "v"], b"").await;
    assert_eq!(run.code, 2, "{}", run.stderr);
    assert!(run.stderr.contains("key_too_large"), "{}", run.stderr);

    // Nobody listening: an error, not a missing key. A port this test bound and released.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    let target = format!("http://{closed}");
    let output = Command::new(binary())
        .args(["kv", "get", "k", "--target", &target])
        .output()
        .await
        .expect("run trireme kv");
    assert_eq!(output.status.code(), Some(2));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(&closed.to_string()),
        "names the target: {stderr}"
    );
}

/// The next line a watcher printed, within 20 s.
async fn next_line(lines: &mut Lines<BufReader<ChildStdout>>) -> String {
    tokio::time::timeout(Duration::from_secs(20), lines.next_line())
        .await
        .expect("watch printed nothing within 20 s")
        .expect("read watch output")
        .expect("watch ended early")
}

#[tokio::test]
async fn watch_prints_the_value_then_each_change() {
    let node = TestNode::start(StartOptions::default()).await;
    kv_ok(&node, &["put", "w", "first"]).await;
    let mut child = Command::new(binary())
        .args(["kv", "watch", "w", "--count", "3"])
        .args(["--target", &node.http_url()])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .expect("spawn trireme kv watch");
    let mut lines = BufReader::new(child.stdout.take().expect("stdout")).lines();
    assert_eq!(next_line(&mut lines).await, "first");
    // Each write happens after the watcher showed the one before, so none is coalesced.
    kv_ok(&node, &["put", "w", "second"]).await;
    assert_eq!(next_line(&mut lines).await, "second");
    kv_ok(&node, &["put", "w", "third"]).await;
    assert_eq!(next_line(&mut lines).await, "third");
    let status = tokio::time::timeout(Duration::from_secs(20), child.wait())
        .await
        .expect("watch stops after --count values")
        .expect("wait");
    assert!(status.success(), "{status}");
}
