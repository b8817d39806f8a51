//! The RESP driver and the runner against a real `redis-server` on loopback.

#![allow(clippy::unwrap_used)]

mod common;

use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use trireme_bench::driver::{self, DriverError};
use trireme_bench::scenario::{Driver, Operation};
use trireme_bench::{BenchError, RespDriver, Scenario, report, run};

/// A `redis-server` child process, killed (by its PID) when dropped.
struct Redis {
    child: Child,
    port: u16,
}

impl Redis {
    async fn start() -> Redis {
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let child = Command::new("redis-server")
            .args(["--port", &port.to_string(), "--bind", "127.0.0.1"])
            .args(["--save", "", "--appendonly", "no"])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("redis-server is installed");
        let redis = Redis { child, port };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Ok(mut d) = RespDriver::connect(&redis.target()).await
                && d.ping().await.is_ok()
            {
                return redis;
            }
            assert!(
                Instant::now() < deadline,
                "redis-server did not answer PING"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }

    fn target(&self) -> String {
        format!("redis://127.0.0.1:{}", self.port)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Redis {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn scenario(extra: &str, ops: &str) -> Scenario {
    let text = format!(
        r#"
name = "t10"
mode = "max"
driver = "resp"
seed = 7
{extra}

[key_generator]
kind = "uniform"
keys = 1000

[value_generator]
kind = "fixed"
size = 100

[operations]
{ops}
"#
    );
    Scenario::from_toml_str(&text).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_a_small_mix_against_redis() {
    let redis = Redis::start().await;
    let s = scenario(
        "duration = \"1s\"\nwarmup = \"200ms\"\nconcurrent = 2\n[load]\nkeys = 1000",
        "get = 1\nput = 1",
    );
    let result = run(&s, &[redis.target()], None).await.unwrap();

    let load = result.load.clone().unwrap();
    assert_eq!((load.count, load.errors), (1000, 0));
    assert!(result.errors.is_empty(), "{:?}", result.errors);
    assert!(result.uncorrected.is_none());
    assert!(
        result.elapsed >= Duration::from_millis(990),
        "{:?}",
        result.elapsed
    );
    for op in [Operation::Get, Operation::Put] {
        let s = &result.per_op[&op];
        assert!(s.count > 0, "{op}: {s:?}");
        assert_eq!(s.errors, 0);
        assert!(s.p50_us > 0 && s.p99_us >= s.p50_us, "{op}: {s:?}");
        assert!(s.ops_per_sec > 0.0);
    }
    assert_eq!(
        result.total.count,
        result.per_op.values().map(|s| s.count).sum::<u64>()
    );
    let table = report::table(&result);
    assert!(table.lines().any(|l| l.starts_with("get ")), "{table}");
    assert!(table.lines().last().unwrap().starts_with("total "));

    let mut d = RespDriver::connect(&redis.target()).await.unwrap();
    let value = d.get("key:000000000999").await.unwrap().unwrap();
    assert_eq!(value.len(), 100);
    assert_eq!(d.get("no-such-key").await.unwrap(), None);
    assert!(d.delete("key:000000000999").await.unwrap());
    assert_eq!(d.get("key:000000000999").await.unwrap(), None);
    // A server error reply is an error of kind "server", and the connection stays usable.
    let err = d.request(&[b"NOSUCHCOMMAND"]).await.unwrap_err();
    assert!(matches!(err, DriverError::Server(_)), "{err}");
    assert_eq!(err.kind(), "server");
    d.ping().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_server_is_counted_as_io_errors() {
    let redis = Redis::start().await;
    let s = scenario(
        "duration = \"1500ms\"\nwarmup = \"0s\"\nconcurrent = 2",
        "get = 1\nput = 1",
    );
    common::assert_killed_target_counts_io_errors(&s, &[redis.target()], redis.pid()).await;
}

#[tokio::test]
async fn refuses_what_it_cannot_do_before_starting() {
    // No server at all: every refusal must happen before anything is sent.
    let target = vec!["redis://127.0.0.1:1".to_owned()];
    let s = scenario("duration = \"1s\"\nconcurrent = 1", "get = 1\nlist = 1");
    assert!(!driver::supports(Driver::Resp, Operation::List));
    assert!(driver::supports(Driver::Resp, Operation::Get));
    match run(&s, &target, None).await.unwrap_err() {
        BenchError::Invalid { field, message } => {
            assert_eq!(field, "operations");
            assert!(
                message.contains("list") && message.contains("resp"),
                "{message}"
            );
            assert!(!message.contains("get"), "{message}");
        }
        other => panic!("{other}"),
    }

    let s = scenario("duration = \"1s\"\nconcurrent = 1", "get = 1");
    match run(&s, &[], None).await.unwrap_err() {
        BenchError::Invalid { field, message } => {
            assert_eq!(field, "targets");
            assert!(message.contains("no target given"), "{message}");
        }
        other => panic!("{other}"),
    }
    let bad = vec!["http://127.0.0.1:6379".to_owned()];
    match run(&s, &bad, None).await.unwrap_err() {
        BenchError::Invalid { field, message } => {
            assert_eq!(field, "targets");
            assert!(message.contains("redis://host:port"), "{message}");
        }
        other => panic!("{other}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_mode_paces_and_reports_uncorrected() {
    let redis = Redis::start().await;
    let text = scenario(
        "duration = \"1s\"\nwarmup = \"100ms\"\nconcurrent = 2",
        "get = 3\nput = 1",
    )
    .to_toml_string()
    .unwrap()
    .replace("mode = \"max\"", "rate = 400");
    let s = Scenario::from_toml_str(&text).unwrap();
    let result = run(&s, &[redis.target(), redis.target()], None)
        .await
        .unwrap();
    let count = result.total.count;
    assert!((300..=440).contains(&count), "{count} ops at 400/s for 1 s");
    assert!(result.errors.is_empty(), "{:?}", result.errors);
    let uncorrected = result.uncorrected.unwrap();
    for (op, corrected) in &result.per_op {
        assert!(corrected.p99_us >= uncorrected[op].p50_us, "{op}");
        assert_eq!(corrected.count, uncorrected[op].count);
    }
}
