//! Area 31: a crash between any two steps of the write path (the log written, synced, the
//! entry applied, the rows flushed, a snapshot saved, the log purged) loses no acknowledged write and applies
//! no entry twice.
//!
//! The server aborts at a crash point armed through `TRIREME_CRASH_AT` while one client
//! INCRs a counter, one command at a time. After a restart the counter must hold every
//! acknowledged INCR, plus at most the one that was in flight when the process died (its
//! entry may have committed without an answer); more would be an entry applied twice.

use crate::common::{RawResp, Reply, ReplyExt, StartOptions, TestNode};
use std::os::unix::process::ExitStatusExt as _;
use std::time::{Duration, Instant};

/// Snapshots every 20 entries of a group, keeping 5 behind, so that a snapshot and a purge
/// come within the load.
const CONFIG: &str = "[raft]\nsnapshot_every = 20\nkeep_after_snapshot = 5\n";

/// Arms `point` to fire on pass `pass`, INCRs until the server dies there, restarts it and
/// checks the counter.
async fn crash_at(point: &str, pass: u64) {
    let mut node = TestNode::start(StartOptions {
        shards: Some(2),
        env: vec![("TRIREME_CRASH_AT".to_string(), format!("{point}:{pass}"))],
        ..StartOptions::default().config(CONFIG)
    })
    .await;
    let mut conn = RawResp::connect(node.resp_addr()).await;
    let mut acknowledged = 0i64;
    let started = Instant::now();
    loop {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "{point}: the server did not reach the crash point after {acknowledged} INCRs"
        );
        let sent = conn
            .try_send(b"*2\r\n$4\r\nINCR\r\n$7\r\ncounter\r\n")
            .await;
        let Some(reply) = (match sent {
            Ok(()) => conn.try_read_reply().await,
            Err(_) => None,
        }) else {
            break;
        };
        let value = Reply::parse(&reply).int();
        acknowledged += 1;
        assert_eq!(value, acknowledged, "{point}: INCR answered out of turn");
    }
    let status = node.wait_exit().await;
    assert_eq!(
        status.signal(),
        Some(6),
        "{point}: the server should have aborted at the crash point: {status}\n{}",
        node.stderr_log()
    );
    assert!(
        node.stderr_log()
            .contains(&format!("crash point {point} reached")),
        "{point}: {}",
        node.stderr_log()
    );

    eprintln!("{point}: {acknowledged} acknowledged");
    node.options_mut().env.clear();
    node.restart().await;
    let mut conn = RawResp::connect(node.resp_addr()).await;
    let reply = conn.cmd(&[b"GET", b"counter"]).await;
    let counter: i64 = String::from_utf8_lossy(Reply::parse(&reply).bulk())
        .parse()
        .expect("the counter is an integer");
    assert!(
        counter == acknowledged || counter == acknowledged + 1,
        "{point}: {acknowledged} INCRs acknowledged, the counter reads {counter} after restart"
    );
    // The node goes on from there.
    let next = Reply::parse(&conn.cmd(&[b"INCR", b"counter"]).await).int();
    assert_eq!(next, counter + 1, "{point}: INCR after restart");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_log_is_written_but_not_synced() {
    crash_at("log-written", 80).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_log_is_synced_before_anyone_hears_of_it() {
    crash_at("log-synced", 80).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_an_entry_is_applied_before_its_answer() {
    crash_at("applied", 60).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_the_rows_are_flushed_before_the_snapshot_is_saved() {
    crash_at("data-flushed", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_after_a_snapshot_is_saved_before_the_log_is_purged() {
    crash_at("snapshot-saved", 3).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_right_after_the_log_is_purged() {
    crash_at("log-purged", 3).await;
}
