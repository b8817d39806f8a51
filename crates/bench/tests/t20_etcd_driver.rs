//! The etcd driver and the runner against a real single-member `etcd` on loopback.
//!
//! `etcd` comes from Debian's etcd-server (`scripts/install-test-deps.sh`). Where it is not
//! installed the tests that need it say so and pass, so a developer without it can still run
//! the suite; under CI (`CI` set) a missing binary fails them instead, because there a skip
//! would hide a broken install step.

#![allow(clippy::unwrap_used)]

mod common;

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use trireme_bench::driver::{self, DriverError, EtcdDriver};
use trireme_bench::scenario::{Consistency, Driver, Operation};
use trireme_bench::{BenchError, Scenario, report, run};

/// An `etcd` child process with its data directory, killed (by its PID) when dropped.
struct Etcd {
    child: Child,
    client_port: u16,
    /// Whether clients reach it over TLS (`https://`).
    tls: bool,
    dir: tempfile::TempDir,
}

/// Two distinct free loopback ports: both are bound at once, so they differ, then released
/// for etcd to take.
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

impl Etcd {
    /// Starts a single-member cluster and waits until it serves linearizable reads (so it has
    /// elected itself leader); `None` when `etcd` is missing and the tests may skip.
    async fn start() -> Option<Etcd> {
        Self::start_with(tempfile::tempdir().unwrap(), &[]).await
    }

    /// [`Etcd::start`] serving clients over TLS with a certificate for 127.0.0.1 from a new
    /// CA, which the bench's drivers are told to trust.
    async fn start_tls() -> Option<Etcd> {
        let dir = tempfile::tempdir().unwrap();
        let ca = trireme_tls::LocalCa::generate().unwrap();
        let ca_file = ca.write(dir.path()).unwrap();
        let (cert, key) = ca.write_node(dir.path(), "etcd").unwrap();
        driver::use_ca_file(&ca_file).unwrap();
        let args = [
            format!("--cert-file={}", cert.display()),
            format!("--key-file={}", key.display()),
        ];
        Self::start_with(dir, &args).await
    }

    async fn start_with(dir: tempfile::TempDir, tls_args: &[String]) -> Option<Etcd> {
        let tls = !tls_args.is_empty();
        let (client_port, peer_port) = free_ports();
        let scheme = if tls { "https" } else { "http" };
        let client = format!("{scheme}://127.0.0.1:{client_port}");
        let peer = format!("http://127.0.0.1:{peer_port}");
        let log = std::fs::File::create(dir.path().join("etcd.log")).unwrap();
        let spawned = Command::new("etcd")
            .args(tls_args)
            .arg("--name=t20")
            .arg(format!("--data-dir={}", dir.path().join("data").display()))
            .arg(format!("--listen-client-urls={client}"))
            .arg(format!("--advertise-client-urls={client}"))
            .arg(format!("--listen-peer-urls={peer}"))
            .arg(format!("--initial-advertise-peer-urls={peer}"))
            .arg(format!("--initial-cluster=t20={peer}"))
            .arg("--initial-cluster-state=new")
            .stdout(Stdio::null())
            .stderr(log)
            .spawn();
        let child = match spawned {
            Ok(child) => child,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                assert!(
                    std::env::var_os("CI").is_none(),
                    "etcd is not installed (scripts/install-test-deps.sh installs it)"
                );
                eprintln!("skipping: etcd is not installed (scripts/install-test-deps.sh)");
                return None;
            }
            Err(e) => panic!("cannot start etcd: {e}"),
        };
        let mut etcd = Etcd {
            child,
            client_port,
            tls,
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            if let Ok(mut d) = EtcdDriver::connect(&etcd.target(), Consistency::Default).await
                && d.get("t20:ready").await.is_ok()
            {
                return Some(etcd);
            }
            if let Some(status) = etcd.child.try_wait().unwrap() {
                panic!("etcd exited with {status}:\n{}", etcd.log());
            }
            assert!(
                Instant::now() < deadline,
                "etcd did not serve a read within 30 s:\n{}",
                etcd.log()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    fn target(&self) -> String {
        let scheme = if self.tls { "https" } else { "http" };
        format!("{scheme}://127.0.0.1:{}", self.client_port)
    }

    fn pid(&self) -> u32 {
        self.child.id()
    }

    fn log(&self) -> String {
        let path: PathBuf = self.dir.path().join("etcd.log");
        std::fs::read_to_string(path).unwrap_or_default()
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// `name` as `trireme bench --preset NAME --driver etcd --target T` would build it, made
/// short and small (`--duration`, `--warmup`, `--concurrent`, `--keys`).
fn preset_for(name: &str, target: &str, concurrent: u32, keys: u64) -> Scenario {
    let mut s = trireme_bench::preset(name).unwrap();
    s.driver = Driver::Etcd;
    s.targets = vec![target.to_owned()];
    s.duration = Duration::from_millis(800);
    s.warmup = Duration::from_millis(200);
    s.concurrent = concurrent;
    s.key_generator.set_keys(keys);
    if s.load.keys.is_some() {
        s.load.keys = Some(keys);
    }
    s.validate().unwrap();
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn driver_operations_against_etcd() {
    let Some(etcd) = Etcd::start().await else {
        return;
    };
    let target = etcd.target();
    let mut d = EtcdDriver::connect(&target, Consistency::Default)
        .await
        .unwrap();
    assert_eq!(d.target(), target);

    // put, then get through each consistency.
    d.put("t20:a", b"one").await.unwrap();
    assert_eq!(d.get("t20:a").await.unwrap().unwrap(), b"one");
    for consistency in [Consistency::Consistent, Consistency::Stale] {
        let mut other = EtcdDriver::connect(&target, consistency).await.unwrap();
        assert_eq!(
            other.get("t20:a").await.unwrap().unwrap(),
            b"one",
            "{consistency:?}"
        );
    }
    d.execute(Operation::Update, "t20:a", Some(b"two"))
        .await
        .unwrap();
    assert_eq!(d.get("t20:a").await.unwrap().unwrap(), b"two");

    // delete, then the key is gone.
    assert!(d.delete("t20:a").await.unwrap());
    assert_eq!(d.get("t20:a").await.unwrap(), None);
    assert!(!d.delete("t20:a").await.unwrap());
    d.execute(Operation::Delete, "t20:a", None).await.unwrap();

    // cas: wins on the revision it read (0: the key must be absent), loses on any other.
    assert!(d.cas("t20:c", 0, b"v1").await.unwrap());
    assert!(!d.cas("t20:c", 0, b"v2").await.unwrap());
    let (value, revision) = d.get_with_revision("t20:c").await.unwrap().unwrap();
    assert_eq!(value, b"v1");
    assert!(revision > 0);
    assert!(!d.cas("t20:c", revision + 1, b"v2").await.unwrap());
    assert!(d.cas("t20:c", revision, b"v2").await.unwrap());
    assert!(!d.cas("t20:c", revision, b"v3").await.unwrap());
    assert_eq!(d.get("t20:c").await.unwrap().unwrap(), b"v2");
    d.execute(Operation::Cas, "t20:c", Some(b"v4"))
        .await
        .unwrap();
    assert_eq!(d.get("t20:c").await.unwrap().unwrap(), b"v4");

    // list: in key order, within the prefix, from the start key, up to the limit.
    for i in 0..15 {
        d.put(&format!("t20:l:{i:02}"), format!("value {i}").as_bytes())
            .await
            .unwrap();
    }
    d.put("t20:m", b"outside").await.unwrap();
    d.put("t20:l", b"outside too").await.unwrap();
    let all = d.list("t20:l:", "t20:l:", 100).await.unwrap();
    assert_eq!(all.len(), 15);
    for (i, (key, value)) in all.iter().enumerate() {
        assert_eq!(key, format!("t20:l:{i:02}").as_bytes());
        assert_eq!(value, format!("value {i}").as_bytes());
    }
    let some: Vec<Vec<u8>> = d
        .list("t20:l:05", "t20:l:", 3)
        .await
        .unwrap()
        .into_iter()
        .map(|(key, _)| key)
        .collect();
    assert_eq!(some, [&b"t20:l:05"[..], b"t20:l:06", b"t20:l:07"]);
    assert!(d.list("t20:l:99", "t20:l:", 10).await.unwrap().is_empty());
    d.execute(Operation::List, "t20:l:10", None).await.unwrap();

    let err = d
        .execute(Operation::Search, "t20:a", None)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), "unsupported");

    // The gateway's errors (answered chunked) are server errors carrying its message, and the
    // connection stays usable after them. 1.6 MB is over etcd's 1.5 MiB request limit.
    let err = d.put("", b"x").await.unwrap_err();
    assert!(matches!(err, DriverError::Server(_)), "{err}");
    assert!(err.to_string().contains("key is not provided"), "{err}");
    let err = d.put("t20:big", &vec![0u8; 1_600_000]).await.unwrap_err();
    assert_eq!(err.kind(), "server", "{err}");
    assert!(err.to_string().contains("too large"), "{err}");
    assert_eq!(d.get("t20:c").await.unwrap().unwrap(), b"v4");
}

/// An etcd serving clients over TLS is reached with an `https://` target, and a plain
/// `http://` target to the same port gets no answers.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_driver_speaks_tls_to_an_etcd_that_serves_it() {
    let Some(etcd) = Etcd::start_tls().await else {
        return;
    };
    let target = etcd.target();
    assert!(target.starts_with("https://"));
    let mut d = EtcdDriver::connect(&target, Consistency::Default)
        .await
        .unwrap();
    d.put("t20:tls", b"sealed").await.unwrap();
    assert_eq!(d.get("t20:tls").await.unwrap().unwrap(), b"sealed");
    let mut stale = EtcdDriver::connect(&target, Consistency::Stale)
        .await
        .unwrap();
    assert_eq!(stale.get("t20:tls").await.unwrap().unwrap(), b"sealed");

    let plain = target.replacen("https://", "http://", 1);
    let mut d = EtcdDriver::new(&plain, Consistency::Default).unwrap();
    assert!(
        d.get("t20:tls").await.is_err(),
        "plain HTTP to a TLS port answered"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn runs_preset_mixes_against_etcd() {
    let Some(etcd) = Etcd::start().await else {
        return;
    };
    let target = etcd.target();
    // (preset, workers, keys): ycsb-f runs one worker so no cas can lose a race; the others
    // cannot conflict.
    for (name, concurrent, keys) in [
        ("consul-put", 2, 1),
        ("consul-get-stale", 2, 1),
        ("ycsb-a", 2, 200),
        ("ycsb-e", 2, 200),
        ("ycsb-f", 1, 200),
    ] {
        let s = preset_for(name, &target, concurrent, keys);
        let result = run(&s, &s.targets, None).await.unwrap();
        let load = result.load.clone().unwrap();
        assert_eq!((load.count, load.errors), (keys, 0), "{name}");
        assert!(result.errors.is_empty(), "{name}: {:?}", result.errors);
        let mix = s.operation_mix().unwrap();
        for op in mix.operations() {
            let summary = &result.per_op[&op];
            assert!(summary.count > 0, "{name} {op}: {summary:?}");
            assert_eq!(summary.errors, 0, "{name} {op}");
        }
        let table = report::table(&result);
        assert!(
            table.lines().last().unwrap().starts_with("total "),
            "{table}"
        );
    }
    // The load phase and the runs wrote through the gateway: the keys are there.
    let mut d = EtcdDriver::connect(&target, Consistency::Default)
        .await
        .unwrap();
    assert_eq!(
        d.get("key:000000000199").await.unwrap().unwrap().len(),
        1000
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_killed_etcd_is_counted_as_io_errors() {
    let Some(etcd) = Etcd::start().await else {
        return;
    };
    let mut s = preset_for("ycsb-a", &etcd.target(), 2, 100);
    s.duration = Duration::from_millis(1500);
    s.warmup = Duration::ZERO;
    s.load.keys = None;
    common::assert_killed_target_counts_io_errors(&s, &s.targets, etcd.pid()).await;
}

#[tokio::test]
async fn search_is_refused_before_anything_is_sent() {
    // No server at all: the refusal must come before connecting.
    for op in [
        Operation::Get,
        Operation::Put,
        Operation::Delete,
        Operation::Update,
        Operation::List,
        Operation::Cas,
    ] {
        assert!(driver::supports(Driver::Etcd, op), "{op}");
    }
    assert!(!driver::supports(Driver::Etcd, Operation::Search));
    let mut s = trireme_bench::preset("orchestrate-production-mix").unwrap();
    s.driver = Driver::Etcd;
    match run(&s, &["http://127.0.0.1:1".to_owned()], None)
        .await
        .unwrap_err()
    {
        BenchError::Invalid { field, message } => {
            assert_eq!(field, "operations");
            assert!(
                message.contains("search") && message.contains("etcd"),
                "{message}"
            );
            assert!(!message.contains("list"), "{message}");
        }
        other => panic!("{other}"),
    }
    match EtcdDriver::new("redis://127.0.0.1:2379", Consistency::Default) {
        Err(e) => assert_eq!(e.kind(), "target"),
        Ok(_) => panic!("a redis:// target was accepted"),
    }
}
