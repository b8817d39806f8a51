//! Area 70: `trireme cluster up`, `cluster add` and `cluster status`. A real three-node cluster
//! started by the binary is written to on one node and read on another, described by `status`,
//! stopped by one SIGTERM to `cluster up`, and started again on its data; a node added with
//! `cluster add` is stopped and restarted by `cluster up` with the others; a port in use, a
//! directory without a running cluster and an unreachable target are refused with messages
//! that name them.

// Each test runs a cluster of its own: it waits for any other test's cluster to go first.
use crate::common;
use crate::common::cluster::cluster_turn;

use crate::common::{DEADLINE, KvEntry, RawResp, binary, http_client, run_expect_failure};
use rustix::process::{Pid, Signal, kill_process, test_kill_process};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// How long `cluster up` may take to report a serving cluster: three debug servers
/// bootstrapping on a couple of shared cores.
const UP_DEADLINE: Duration = Duration::from_secs(120);
/// Ports a test cluster may use from its base: up to five nodes (three, and two added),
/// node i taking base+10(i-1) to base+10(i-1)+2.
const PORT_SPAN: u16 = 50;

/// A base port with the `PORT_SPAN` ports from it free on 127.0.0.1.
fn free_base_port() -> u16 {
    common::cluster::free_port_block(PORT_SPAN)
}

fn pid(raw: u32) -> Pid {
    Pid::from_raw(i32::try_from(raw).expect("pid fits i32")).expect("pid is positive")
}

fn alive(raw: u32) -> bool {
    test_kill_process(pid(raw)).is_ok()
}

/// One node as `cluster.json` lists it.
#[derive(Debug, Clone)]
struct ListedNode {
    name: String,
    http: SocketAddr,
    resp: SocketAddr,
    peer: SocketAddr,
    pid: u32,
}

/// `cluster.json`, read.
#[derive(Debug)]
struct Manifest {
    state: String,
    shard_count: u64,
    nodes: Vec<ListedNode>,
}

fn read_manifest(dir: &Path) -> Option<Manifest> {
    let text = std::fs::read_to_string(dir.join("cluster.json")).ok()?;
    let v: serde_json::Value = serde_json::from_str(&text).ok()?;
    let nodes = v["nodes"]
        .as_array()?
        .iter()
        .map(|n| {
            Some(ListedNode {
                name: n["name"].as_str()?.to_string(),
                http: n["http"].as_str()?.parse().ok()?,
                resp: n["resp"].as_str()?.parse().ok()?,
                peer: n["peer"].as_str()?.parse().ok()?,
                pid: u32::try_from(n["pid"].as_u64()?).ok()?,
            })
        })
        .collect::<Option<Vec<_>>>()?;
    Some(Manifest {
        state: v["state"].as_str()?.to_string(),
        shard_count: v["shard_count"].as_u64()?,
        nodes,
    })
}

/// A running `trireme cluster up`, its output in files. Dropping it (a failed test) stops it
/// with SIGTERM, and SIGKILLs it and then its own nodes if they outlive the deadline.
struct ClusterUp {
    child: Option<Child>,
    dir: PathBuf,
    stdout: PathBuf,
    stderr: PathBuf,
}

impl ClusterUp {
    /// Starts `trireme cluster up --dir <dir> <args>`; its output goes next to `dir`.
    fn start(dir: &Path, args: &[&str]) -> ClusterUp {
        let parent = dir.parent().expect("dir has a parent");
        let run = std::fs::read_dir(parent).expect("list parent").count();
        let stdout = parent.join(format!("up-{run}.stdout"));
        let stderr = parent.join(format!("up-{run}.stderr"));
        let child = Command::new(binary())
            .args(["cluster", "up", "--dir"])
            .arg(dir)
            .args(args)
            .stdin(Stdio::null())
            .stdout(std::fs::File::create(&stdout).expect("stdout file"))
            .stderr(std::fs::File::create(&stderr).expect("stderr file"))
            .spawn()
            .expect("spawn trireme cluster up");
        ClusterUp {
            child: Some(child),
            dir: dir.to_path_buf(),
            stdout,
            stderr,
        }
    }

    /// What `cluster up` printed so far.
    fn output(&self) -> String {
        format!(
            "--- cluster up stdout ---\n{}\n--- cluster up stderr ---\n{}",
            std::fs::read_to_string(&self.stdout).unwrap_or_default(),
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        )
    }

    fn child(&mut self) -> &mut Child {
        self.child.as_mut().expect("cluster up is running")
    }

    /// Waits (bounded) for `cluster.json` to say the cluster runs.
    async fn wait_running(&mut self) -> Manifest {
        let deadline = Instant::now() + UP_DEADLINE;
        loop {
            if let Some(m) = read_manifest(&self.dir).filter(|m| m.state == "running") {
                return m;
            }
            if let Some(status) = self.child().try_wait().expect("try_wait") {
                panic!(
                    "cluster up exited with {status} before the cluster ran\n{}",
                    self.output()
                );
            }
            assert!(
                Instant::now() < deadline,
                "no running cluster.json within {UP_DEADLINE:?}\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Sends SIGTERM to `cluster up` and waits (bounded) for it to exit.
    async fn terminate(&mut self) -> ExitStatus {
        let child = self.child();
        kill_process(Pid::from_child(child), Signal::TERM).expect("SIGTERM cluster up");
        let deadline = Instant::now() + DEADLINE;
        loop {
            if let Some(status) = self.child().try_wait().expect("try_wait") {
                self.child = None;
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "cluster up still runs {DEADLINE:?} after SIGTERM\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

impl Drop for ClusterUp {
    fn drop(&mut self) {
        let Some(mut child) = self.child.take() else {
            return;
        };
        let _ = kill_process(Pid::from_child(&child), Signal::TERM);
        let deadline = Instant::now() + DEADLINE;
        while child.try_wait().ok().flatten().is_none() {
            if Instant::now() >= deadline {
                let _ = child.kill();
                let _ = child.wait();
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        // Nodes left behind by a killed `cluster up`: only those running from this test's
        // directory, by pid.
        let Some(manifest) = read_manifest(&self.dir) else {
            return;
        };
        let dir = self.dir.display().to_string();
        for node in manifest.nodes {
            let ours = std::fs::read(format!("/proc/{}/cmdline", node.pid))
                .map(|cmd| String::from_utf8_lossy(&cmd).contains(&dir))
                .unwrap_or(false);
            if ours {
                let _ = kill_process(pid(node.pid), Signal::KILL);
            }
        }
    }
}

/// Runs the binary with `args`, expects success within the deadline, returns stdout.
async fn run_ok(args: &[&str]) -> String {
    let output = tokio::time::timeout(
        DEADLINE,
        tokio::process::Command::new(binary())
            .args(args)
            .stdin(Stdio::null())
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("`trireme {}` still ran after {DEADLINE:?}", args.join(" ")))
    .expect("run trireme");
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "`trireme {}` failed with {}\n--- stdout ---\n{stdout}\n--- stderr ---\n{}",
        args.join(" "),
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// A consistent read of `key` through `node`'s HTTP API.
async fn consistent_get(client: &reqwest::Client, node: &ListedNode, key: &str) -> KvEntry {
    let url = format!("http://{}/v1/kv/{key}?consistent", node.http);
    let resp = client.get(&url).send().await.expect("GET ?consistent");
    assert_eq!(resp.status(), 200, "GET {url}");
    let v: serde_json::Value = resp.json().await.expect("JSON body");
    KvEntry::from_json(&v[0])
}

#[tokio::test]
async fn up_serves_reports_stops_on_sigterm_and_restarts_on_its_data() {
    let _turn = cluster_turn().await;
    let tmp = tempfile::Builder::new()
        .prefix("trireme-t70-")
        .tempdir()
        .expect("temp dir");
    let dir = tmp.path().join("cluster");
    let base = free_base_port();
    let base_arg = base.to_string();
    let mut up = ClusterUp::start(
        &dir,
        &[
            "--nodes",
            "3",
            "--shards",
            "4",
            "--base-port",
            &base_arg,
            "--timeout",
            "100s",
        ],
    );
    let manifest = up.wait_running().await;
    assert_eq!(manifest.shard_count, 4);
    let names: Vec<&str> = manifest.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3"]);
    for (i, node) in manifest.nodes.iter().enumerate() {
        let http = base + 10 * u16::try_from(i).expect("small");
        assert_eq!(node.http, SocketAddr::from(([127, 0, 0, 1], http)));
        assert_eq!(node.resp.port(), http + 1);
        assert!(
            alive(node.pid),
            "{} is not running\n{}",
            node.name,
            up.output()
        );
    }
    let stdout = std::fs::read_to_string(&up.stdout).expect("stdout");
    for node in &manifest.nodes {
        assert!(
            stdout.contains(&node.http.to_string()) && stdout.contains(&node.resp.to_string()),
            "the table lists {} with its HTTP and RESP addresses:\n{stdout}",
            node.name
        );
    }
    assert!(
        stdout.contains(&format!("redis-cli -c -p {}", base + 1)),
        "{stdout}"
    );

    // Written on n1, read with ?consistent on n3 (whichever node leads the key's shard).
    let client = http_client();
    let (n1, n2, n3) = (&manifest.nodes[0], &manifest.nodes[1], &manifest.nodes[2]);
    let put = client
        .put(format!("http://{}/v1/kv/t70/greeting", n1.http))
        .body("hello")
        .send()
        .await
        .expect("PUT on n1");
    let put_status = put.status();
    let put_body = put.text().await.expect("PUT body");
    assert_eq!(put_status, 200, "PUT on n1: {put_body}");
    assert_eq!(put_body.trim(), "true");
    assert_eq!(
        consistent_get(&client, n3, "t70/greeting").await.value,
        b"hello"
    );
    // Every node serves both protocols.
    for node in &manifest.nodes {
        let health = client
            .get(format!("http://{}/v1/health", node.http))
            .send()
            .await
            .expect("GET /v1/health");
        assert_eq!(health.status(), 200, "{} is not healthy", node.name);
        let mut resp = RawResp::connect(node.resp).await;
        assert_eq!(resp.cmd(&[b"PING"]).await, b"+PONG\r\n", "{}", node.name);
    }

    // `cluster status` prints every shard with its leader and every replica's lag.
    let status = run_ok(&[
        "cluster",
        "status",
        "--target",
        &format!("http://{}", n1.http),
    ])
    .await;
    for shard in 0..4 {
        let line = status
            .lines()
            .find(|l| l.split_whitespace().next() == Some(&shard.to_string()))
            .unwrap_or_else(|| panic!("no line for shard {shard}:\n{status}"));
        let leader = line.split_whitespace().nth(2).expect("a leader column");
        assert!(
            names.contains(&leader),
            "shard {shard} has no leader: {line:?}\n{status}"
        );
    }
    for node in &manifest.nodes {
        assert!(
            status
                .lines()
                .any(|l| l.split_whitespace().next() == Some(&node.name)
                    && l.contains(&node.http.to_string())),
            "status lists node {}:\n{status}",
            node.name
        );
    }
    assert!(!status.contains("without a known leader"), "{status}");
    let json = run_ok(&[
        "cluster",
        "status",
        "--json",
        "--target",
        &n2.http.to_string(),
    ])
    .await;
    let report: serde_json::Value = serde_json::from_str(&json).expect("status --json");
    assert_eq!(report["target_node"], "n2");
    let shards = report["shards"].as_array().expect("shards");
    assert_eq!(shards.len(), 4);
    for shard in shards {
        assert!(shard["leader"].is_string(), "{shard}");
        let replicas = shard["replicas"].as_array().expect("replicas");
        assert_eq!(replicas.len(), 3, "{shard}");
        for r in replicas {
            assert!(r["applied_index"].as_u64().is_some(), "{shard}");
            assert!(r["lag"].as_u64().is_some(), "{shard}");
        }
    }

    // One SIGTERM to `cluster up` stops every node, and it exits 0.
    let exit = up.terminate().await;
    assert!(
        exit.success(),
        "cluster up exited with {exit}\n{}",
        up.output()
    );
    for node in &manifest.nodes {
        assert!(
            !alive(node.pid),
            "node {} (pid {}) outlived cluster up",
            node.name,
            node.pid
        );
    }
    assert_eq!(read_manifest(&dir).expect("cluster.json").state, "stopped");

    // Started again on the same directory: the same nodes, with their data.
    let mut again = ClusterUp::start(
        &dir,
        &[
            "--nodes",
            "3",
            "--base-port",
            &base_arg,
            "--timeout",
            "100s",
        ],
    );
    let restarted = again.wait_running().await;
    assert_eq!(
        restarted.shard_count, 4,
        "the shard count is the one created"
    );
    for (old, new) in manifest.nodes.iter().zip(&restarted.nodes) {
        assert_eq!((&old.name, old.http), (&new.name, new.http));
        assert_ne!(old.pid, new.pid, "{} is a new process", new.name);
    }
    assert_eq!(
        consistent_get(&client, &restarted.nodes[1], "t70/greeting")
            .await
            .value,
        b"hello"
    );
    let exit = again.terminate().await;
    assert!(
        exit.success(),
        "cluster up exited with {exit}\n{}",
        again.output()
    );
    for node in &restarted.nodes {
        assert!(!alive(node.pid), "node {} outlived cluster up", node.name);
    }
}

#[tokio::test]
async fn a_node_that_dies_is_reported_and_fails_the_exit_status() {
    let _turn = cluster_turn().await;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("cluster");
    let base = free_base_port().to_string();
    let mut up = ClusterUp::start(
        &dir,
        &[
            "--nodes",
            "3",
            "--shards",
            "2",
            "--base-port",
            &base,
            "--timeout",
            "100s",
        ],
    );
    let manifest = up.wait_running().await;
    let victim = &manifest.nodes[1];
    kill_process(pid(victim.pid), Signal::KILL).expect("SIGKILL n2");
    let reported = format!("node n2 (pid {}) exited unexpectedly", victim.pid);
    let seen = common::wait_until(DEADLINE, Duration::from_millis(20), || async {
        std::fs::read_to_string(&up.stderr).is_ok_and(|e| e.contains(&reported))
    })
    .await;
    assert!(seen, "no report of the dead node\n{}", up.output());
    let exit = up.terminate().await;
    assert_eq!(exit.code(), Some(1), "{}", up.output());
    assert!(up.output().contains("n2 had died"), "{}", up.output());
    for node in &manifest.nodes {
        assert!(!alive(node.pid), "node {} outlived cluster up", node.name);
    }
}

#[test]
fn a_port_in_use_is_named_and_nothing_starts() {
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("cluster");
    let base = free_base_port();
    // The RESP port of n2.
    let taken = TcpListener::bind(("127.0.0.1", base + 11)).expect("bind");
    let (code, stderr) = run_expect_failure(
        &[
            "cluster",
            "up",
            "--nodes",
            "3",
            "--dir",
            &dir.display().to_string(),
            "--base-port",
            &base.to_string(),
        ],
        DEADLINE,
    );
    drop(taken);
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&format!("port {} (RESP of node n2)", base + 11)),
        "stderr names the port and its use:\n{stderr}"
    );
    assert!(!dir.join("n1").exists(), "no node was started");
}

#[test]
fn status_of_an_unreachable_target_fails_naming_it() {
    let port = TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind")
        .port();
    // Nobody listens there any more.
    let target = format!("http://127.0.0.1:{port}");
    let (code, stderr) = run_expect_failure(&["cluster", "status", "--target", &target], DEADLINE);
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&target),
        "stderr names the target:\n{stderr}"
    );
}

/// Whether process `raw` runs: a node `cluster add` started is not this test's child, and
/// once it exits it may stay a zombie until whoever adopted it reaps it.
fn running(raw: u32) -> bool {
    trireme_local::process_alive(raw)
}

#[tokio::test]
async fn add_joins_a_running_cluster_and_up_stops_and_restarts_it() {
    let _turn = cluster_turn().await;
    let tmp = tempfile::Builder::new()
        .prefix("trireme-t70-add-")
        .tempdir()
        .expect("temp dir");
    let dir = tmp.path().join("cluster");
    let dir_arg = dir.display().to_string();
    let base = free_base_port();
    let base_arg = base.to_string();
    let up_args = [
        "--nodes",
        "3",
        "--shards",
        "2",
        "--base-port",
        &base_arg,
        "--timeout",
        "100s",
    ];
    let mut up = ClusterUp::start(&dir, &up_args);
    let before = up.wait_running().await;
    assert_eq!(before.nodes.len(), 3);

    let printed = run_ok(&["cluster", "add", "--dir", &dir_arg, "--timeout", "100s"]).await;
    let manifest = read_manifest(&dir).expect("cluster.json");
    assert_eq!(manifest.state, "running");
    let names: Vec<&str> = manifest.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3", "n4"], "{printed}");
    let n4 = &manifest.nodes[3];
    assert_eq!(n4.http, SocketAddr::from(([127, 0, 0, 1], base + 30)));
    assert_eq!(n4.resp.port(), base + 31);
    assert!(
        printed.contains(&n4.http.to_string()) && printed.contains(&n4.pid.to_string()),
        "cluster add prints the new node's endpoints and pid:\n{printed}"
    );
    assert!(running(n4.pid), "n4 runs after cluster add exited");
    let client = http_client();
    for path in ["/v1/health", "/v1/status/leader"] {
        let resp = client
            .get(format!("http://{}{path}", n4.http))
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {path} on n4: {e}"));
        assert_eq!(resp.status(), 200, "GET {path} on n4");
    }
    // n4 is a member of the cluster, not a cluster of its own: n1 lists it among the peers,
    // and both name the same metadata leader.
    let n1 = &manifest.nodes[0];
    let get = |node: &ListedNode, path: &str| {
        let url = format!("http://{}{path}", node.http);
        let client = client.clone();
        async move {
            let resp = client.get(&url).send().await.ok()?;
            resp.json::<serde_json::Value>().await.ok()
        }
    };
    let joined = common::wait_until(DEADLINE, Duration::from_millis(100), || async {
        let peers = get(n1, "/v1/status/peers").await;
        let listed = peers.as_ref().and_then(|p| p.as_array()).is_some_and(|p| {
            p.iter()
                .any(|a| a.as_str() == Some(n4.peer.to_string().as_str()))
        });
        let leaders = (
            get(n1, "/v1/status/leader").await,
            get(n4, "/v1/status/leader").await,
        );
        listed && leaders.0.is_some() && leaders.0 == leaders.1
    })
    .await;
    assert!(
        joined,
        "n1 does not list n4 ({}) among its peers, or they name different leaders\n{}",
        n4.peer,
        std::fs::read_to_string(dir.join("n4.log")).unwrap_or_default()
    );

    // One SIGTERM to `cluster up` stops the added node too.
    let exit = up.terminate().await;
    assert!(
        exit.success(),
        "cluster up exited with {exit}\n{}",
        up.output()
    );
    for node in &manifest.nodes {
        assert!(
            !running(node.pid),
            "node {} (pid {}) outlived cluster up\n{}",
            node.name,
            node.pid,
            up.output()
        );
    }
    let stopped = read_manifest(&dir).expect("cluster.json");
    assert_eq!(stopped.state, "stopped");
    assert_eq!(stopped.nodes.len(), 4, "the added node stays listed");

    // Started again with the same flags: the added node restarts with the others.
    let mut again = ClusterUp::start(&dir, &up_args);
    let restarted = again.wait_running().await;
    let names: Vec<&str> = restarted.nodes.iter().map(|n| n.name.as_str()).collect();
    assert_eq!(names, ["n1", "n2", "n3", "n4"]);
    assert_ne!(restarted.nodes[3].pid, n4.pid, "n4 is a new process");
    let exit = again.terminate().await;
    assert!(exit.success(), "{}", again.output());
    for node in &restarted.nodes {
        assert!(!running(node.pid), "node {} outlived cluster up", node.name);
    }
}

#[tokio::test]
async fn add_without_a_running_cluster_or_with_a_port_in_use_fails_clearly() {
    let _turn = cluster_turn().await;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("cluster");
    let dir_arg = dir.display().to_string();

    // Nothing in the directory.
    std::fs::create_dir_all(&dir).expect("mkdir");
    let (code, stderr) = run_expect_failure(&["cluster", "add", "--dir", &dir_arg], DEADLINE);
    assert_ne!(code, 0);
    assert!(
        stderr.contains("no running cluster") && stderr.contains("trireme cluster up --dir"),
        "stderr says there is no cluster and how to start one:\n{stderr}"
    );

    // A running one-node cluster, and the RESP port the next node would get is taken.
    let base = free_base_port();
    let mut up = ClusterUp::start(
        &dir,
        &[
            "--nodes",
            "1",
            "--shards",
            "1",
            "--base-port",
            &base.to_string(),
            "--timeout",
            "100s",
        ],
    );
    let manifest = up.wait_running().await;
    let taken = TcpListener::bind(("127.0.0.1", base + 11)).expect("bind");
    let (code, stderr) = run_expect_failure(&["cluster", "add", "--dir", &dir_arg], DEADLINE);
    drop(taken);
    assert_ne!(code, 0);
    assert!(
        stderr.contains(&format!("port {} (RESP of node n2)", base + 11)),
        "stderr names the port and its use:\n{stderr}"
    );
    assert!(!dir.join("n2").exists(), "no node was started");
    assert_eq!(
        read_manifest(&dir).expect("cluster.json").nodes.len(),
        1,
        "cluster.json is unchanged"
    );

    let exit = up.terminate().await;
    assert!(exit.success(), "{}", up.output());
    assert!(!alive(manifest.nodes[0].pid));
    // Once `cluster up` has stopped, there is no running cluster to add to.
    let (code, stderr) = run_expect_failure(&["cluster", "add", "--dir", &dir_arg], DEADLINE);
    assert_ne!(code, 0);
    assert!(stderr.contains("cluster.json says stopped"), "{stderr}");
}

/// Options for driving the supervisor `cluster up` is built on directly.
fn supervisor_options(dir: &Path) -> trireme_local::ClusterOptions {
    let mut opts = trireme_local::ClusterOptions::new(3, dir);
    opts.base_port = free_base_port();
    opts.flags.shards = Some(2);
    opts.binary = Some(binary().into());
    opts.start_timeout = UP_DEADLINE;
    opts
}

/// `GET /v1/kv/<key>?consistent&raw` through the node at `http`.
async fn raw_value(client: &reqwest::Client, http: &str, key: &str) -> String {
    let url = format!("http://{http}/v1/kv/{key}?consistent&raw");
    let resp = client.get(&url).send().await.expect("GET");
    assert_eq!(resp.status(), 200, "GET {url}");
    resp.text().await.expect("body")
}

#[tokio::test]
async fn the_supervisor_restarts_one_node_on_its_data_and_stops_all() {
    let _turn = cluster_turn().await;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("cluster");
    let mut cluster = trireme_local::LocalCluster::start(supervisor_options(&dir))
        .await
        .expect("the cluster starts");
    let nodes = cluster.nodes().to_vec();
    let client = http_client();
    let put = client
        .put(format!("http://{}/v1/kv/t70/kept", nodes[0].http))
        .body("kept")
        .send()
        .await
        .expect("PUT");
    assert_eq!(put.status(), 200);

    let old = nodes[1].pid;
    let n2 = cluster.process_mut(1).expect("n2");
    let status = n2.kill().expect("n2 was running");
    assert!(!status.success(), "{status}");
    assert!(!alive(old));
    n2.spawn().expect("n2 restarts");
    cluster.refresh_pid(1);
    cluster
        .wait_ready(UP_DEADLINE)
        .await
        .expect("the cluster serves again");
    let restarted = &cluster.nodes()[1];
    assert_ne!(restarted.pid, old, "n2 is a new process");
    assert_eq!(restarted.http, nodes[1].http, "on the same ports");
    assert_eq!(
        raw_value(&client, &restarted.http, "t70/kept").await,
        "kept"
    );

    cluster.stop().await.expect("every node stops cleanly");
    for node in cluster.nodes() {
        assert!(!alive(node.pid), "{} outlived the stop", node.name);
    }
    assert_eq!(read_manifest(&dir).expect("cluster.json").state, "stopped");
}

#[tokio::test]
async fn the_supervisor_adds_a_node_that_joins_and_stops_it_with_the_others() {
    let _turn = cluster_turn().await;
    let tmp = tempfile::tempdir().expect("temp dir");
    let dir = tmp.path().join("cluster");
    let opts = supervisor_options(&dir);
    let base = opts.base_port;
    let mut cluster = trireme_local::LocalCluster::start(opts)
        .await
        .expect("the cluster starts");
    let n4 = cluster
        .add_node(UP_DEADLINE)
        .await
        .expect("n4 joins")
        .clone();
    assert_eq!(n4.name, "n4");
    assert_eq!(n4.http, format!("127.0.0.1:{}", base + 30));
    assert_eq!(n4.join.as_deref(), Some(cluster.nodes()[0].peer.as_str()));
    let client = http_client();
    let n1 = cluster.nodes()[0].http.clone();
    let member = common::wait_until(DEADLINE, Duration::from_millis(100), || async {
        let peers = client
            .get(format!("http://{n1}/v1/status/peers"))
            .send()
            .await
            .ok();
        match peers {
            Some(r) => r
                .json::<Vec<String>>()
                .await
                .is_ok_and(|p| p.contains(&n4.peer)),
            None => false,
        }
    })
    .await;
    assert!(member, "n1 never listed n4 ({}) among its peers", n4.peer);
    let manifest = read_manifest(&dir).expect("cluster.json");
    assert_eq!(manifest.nodes.len(), 4);

    cluster.stop().await.expect("every node stops cleanly");
    for node in cluster.nodes() {
        assert!(!alive(node.pid), "{} outlived the stop", node.name);
    }
}

#[tokio::test]
async fn up_secure_makes_a_ca_and_a_token_and_turns_acls_and_tls_on() {
    let _turn = cluster_turn().await;
    let tmp = tempfile::Builder::new()
        .prefix("trireme-t70-")
        .tempdir()
        .expect("temp dir");
    let dir = tmp.path().join("cluster");
    let base = free_base_port();
    let base_arg = base.to_string();
    let mut up = ClusterUp::start(
        &dir,
        &[
            "--nodes",
            "3",
            "--shards",
            "2",
            "--base-port",
            &base_arg,
            "--secure",
        ],
    );
    let manifest = up.wait_running().await;
    let ca = dir.join("tls/ca.pem");
    let token = std::fs::read_to_string(dir.join("tls/management-token"))
        .expect("the management token is kept")
        .trim()
        .to_string();
    let stdout = std::fs::read_to_string(&up.stdout).expect("stdout");
    assert!(
        stdout.contains(&format!("management token: {token}")),
        "{stdout}"
    );
    assert!(stdout.contains(&ca.display().to_string()), "{stdout}");

    let ca_pem = std::fs::read_to_string(&ca).expect("CA");
    let client = common::https_client(&ca_pem, None);
    let n1 = &manifest.nodes[0];
    // HTTPS with the token works; without it the default-deny ACL refuses.
    let url = format!("https://{}/v1/kv/t70/secure", n1.http);
    let put = client
        .put(&url)
        .header("X-Consul-Token", &token)
        .body("locked")
        .send()
        .await
        .expect("PUT over HTTPS");
    assert_eq!(put.status(), 200);
    let anonymous = client.get(&url).send().await.expect("GET without token");
    assert_eq!(anonymous.status(), 403);
    // Plain HTTP to the TLS port gets no answer.
    assert!(
        http_client()
            .get(format!("http://{}/v1/health", n1.http))
            .send()
            .await
            .is_err()
    );
    // The CLI reads the token and the CA from the environment, on another node.
    let n3 = &manifest.nodes[2];
    let out = Command::new(binary())
        .args(["kv", "get", "t70/secure", "--target"])
        .arg(format!("https://{}", n3.http))
        .env("TRIREME_TOKEN", &token)
        .env("TRIREME_CA_FILE", &ca)
        .output()
        .expect("trireme kv get");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&out.stdout).trim(), "locked");
    // redis-cli over TLS with the token as password.
    let resp_port = n1.resp.port().to_string();
    let ca_arg = ca.display().to_string();
    let (ok, got, err) = common::run_program(
        "redis-cli",
        &[
            "--tls",
            "--cacert",
            &ca_arg,
            "-p",
            &resp_port,
            "--user",
            "default",
            "--pass",
            &token,
            "--no-auth-warning",
            "GET",
            "t70/secure",
        ]
        .map(String::from),
        Duration::from_secs(20),
    );
    assert!(ok, "{got}{err}");
    assert_eq!(got.trim(), "locked");
    // The benchmark reaches it too: the token in each target's URL, the CA from --ca-file.
    for target in [
        format!("https://:{token}@{}", n1.http),
        format!("rediss://default:{token}@{}", n1.resp),
    ] {
        let preset = if target.starts_with("https") {
            "consul-put"
        } else {
            "dynomite-80-20"
        };
        let out = Command::new(binary())
            .args(["bench", "--preset", preset, "--target", &target])
            .args([
                "--keys",
                "100",
                "--duration",
                "2s",
                "--warmup",
                "0s",
                "--no-results",
            ])
            .arg("--ca-file")
            .arg(&ca)
            .output()
            .expect("trireme bench");
        let stdout = String::from_utf8_lossy(&out.stdout);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(out.status.success(), "{preset}: {stdout}{stderr}");
        let total = stdout
            .lines()
            .find(|l| l.starts_with("total"))
            .unwrap_or_else(|| panic!("no total line: {stdout}"));
        let fields: Vec<&str> = total.split_whitespace().collect();
        assert!(fields[1].parse::<u64>().unwrap_or(0) > 0, "{total}");
        assert_eq!(fields.last(), Some(&"0"), "no errors: {total}");
        assert!(
            !stderr.contains(&token),
            "the token is never printed: {stderr}"
        );
    }
    assert!(up.terminate().await.success(), "{}", up.output());
}
