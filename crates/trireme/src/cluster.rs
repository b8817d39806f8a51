//! `trireme cluster`: start a local multi-node cluster on one machine (`up`), and describe a
//! running cluster shard by shard (`status`).
//!
//! [`LocalCluster`] is the reusable part: it spawns real `trireme server` processes (this very
//! binary), waits until they serve, and stops them. `cluster up` is a thin loop around it; the
//! embedded cluster of `trireme bench` (when no `--target` is given) is meant to be another.
//!
//! Every node runs in its own process group, so a Ctrl-C in the terminal reaches `cluster up`
//! alone and the nodes are stopped in order (SIGTERM, then SIGKILL after a grace period)
//! instead of all at once by the terminal. The flip side: a `cluster up` killed with SIGKILL
//! leaves its nodes running; the next `cluster up` on the same directory says so.

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use serde::{Deserialize, Serialize};
use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom, Write as _};
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Where every node of a local cluster listens: loopback only, the cluster is for one machine.
const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// Ports between consecutive nodes: node *i* uses `base + PORT_STRIDE * (i - 1)` and the two
/// after it (DESIGN.md §3a), so node ports are easy to guess from the node number.
const PORT_STRIDE: u32 = 10;
/// Default `--base-port`: node 1 gets the ports of a default `trireme server`.
const DEFAULT_BASE_PORT: u16 = 7700;
/// How many log lines an error message shows per node.
const LOG_TAIL_LINES: usize = 20;
/// How often start-up and `cluster up` look at the nodes.
const POLL_EVERY: Duration = Duration::from_millis(200);

/// Flags of `trireme cluster`.
#[derive(Args, Debug)]
pub struct ClusterArgs {
    #[command(subcommand)]
    command: ClusterCommand,
}

#[derive(Subcommand, Debug)]
enum ClusterCommand {
    /// Start N local nodes as one cluster, print their endpoints, and run until Ctrl-C.
    ///
    /// Node i (from 1) is named n<i> and listens on 127.0.0.1: HTTP on BASE+10(i-1), RESP on
    /// the next port, peer on the one after. Its data goes to DIR/n<i>, its output to
    /// DIR/n<i>.log; DIR/cluster.json lists the nodes once all serve. Running it again on the
    /// same DIR restarts the same nodes with their data. Ctrl-C or SIGTERM stops every node
    /// (a second one kills them), then exits 0 if every node ran until then and stopped
    /// cleanly. A node that dies while up is reported at once; the others keep running, and
    /// the exit status is then non-zero. When every node has died, or the cluster cannot
    /// start within --timeout, it exits non-zero at once.
    Up(UpArgs),
    /// Show a running cluster: its nodes, and per shard the slots, the leader, and each
    /// replica's applied index and lag behind the leader.
    ///
    /// Asks the target node for the shard map, then every node for its own view. Exits
    /// non-zero when the target cannot be reached.
    Status(StatusArgs),
}

/// Flags of `trireme cluster up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Number of nodes.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..=100))]
    nodes: u32,
    /// Number of shards, fixed when the cluster is first created (server default: 16).
    #[arg(long)]
    shards: Option<u32>,
    /// Directory for the nodes' data, logs and cluster.json.
    #[arg(long, default_value = "./trireme-cluster")]
    dir: PathBuf,
    /// First port: node i uses BASE+10(i-1) (HTTP), +1 (RESP), +2 (peer).
    #[arg(long, default_value_t = DEFAULT_BASE_PORT, value_parser = clap::value_parser!(u16).range(1..))]
    base_port: u16,
    /// Voters per shard (server default: 3, capped by the number of nodes).
    #[arg(long)]
    replication_factor: Option<u32>,
    /// How long to wait for every node to serve, e.g. 60s or 2m.
    #[arg(long, default_value = "60s")]
    timeout: String,
    /// Log filter passed to every node (server default: info,openraft=error).
    #[arg(long)]
    log: Option<String>,
}

/// Flags of `trireme cluster status`.
#[derive(Args, Debug)]
pub struct StatusArgs {
    /// HTTP URL of any node of the cluster.
    #[arg(long, default_value = "http://127.0.0.1:7700")]
    target: String,
    /// Print the status as JSON instead of tables.
    #[arg(long)]
    json: bool,
}

pub fn run(args: ClusterArgs) -> anyhow::Result<()> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the async runtime")?;
    match args.command {
        ClusterCommand::Up(args) => runtime.block_on(up(args)),
        ClusterCommand::Status(args) => runtime.block_on(status(args)),
    }
}

// ---------------------------------------------------------------------------------------------
// LocalCluster
// ---------------------------------------------------------------------------------------------

/// How to start a [`LocalCluster`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of nodes, named `n1`..`nN`.
    pub nodes: u32,
    /// `--shards` for a new cluster; `None` keeps the server's default (or, on a restart, the
    /// count the nodes were created with).
    pub shards: Option<u32>,
    /// `--replication-factor` for the nodes; `None` keeps the server's default.
    pub replication_factor: Option<u32>,
    /// Holds `n<i>/` (data), `n<i>.log` and `cluster.json`; created if missing.
    pub dir: PathBuf,
    /// Node *i* listens on `base_port + 10(i-1)` (HTTP), `+1` (RESP), `+2` (peer).
    pub base_port: u16,
    /// `--log` for the nodes; `None` keeps the server's default.
    pub log: Option<String>,
    /// How long [`LocalCluster::start`] waits for every node to serve.
    pub start_timeout: Duration,
    /// How long [`LocalCluster::stop`] waits after SIGTERM before it SIGKILLs a node.
    pub stop_grace: Duration,
    /// The `trireme` binary to run; `None` runs the current executable, which is what the
    /// `trireme` commands want (same version as the caller, wherever it is installed).
    pub binary: Option<PathBuf>,
}

impl ClusterOptions {
    /// `nodes` nodes under `dir`, on the default ports, with the servers' defaults otherwise.
    pub fn new(nodes: u32, dir: impl Into<PathBuf>) -> Self {
        ClusterOptions {
            nodes,
            shards: None,
            replication_factor: None,
            dir: dir.into(),
            base_port: DEFAULT_BASE_PORT,
            log: None,
            start_timeout: Duration::from_secs(60),
            stop_grace: Duration::from_secs(10),
            binary: None,
        }
    }

    /// Fails naming the first of the cluster's ports that cannot be bound now.
    pub fn check_ports(&self) -> anyhow::Result<()> {
        check_ports_free(&self.dir, &self.plan()?)
    }

    /// Each node's name and addresses, checked to fit in the port range.
    fn plan(&self) -> anyhow::Result<Vec<NodeAddrs>> {
        if self.nodes == 0 {
            bail!("a cluster needs at least one node");
        }
        // In u64: no overflow whatever the node count.
        let span = u64::from(PORT_STRIDE) * u64::from(self.nodes - 1) + 2;
        let last = u64::from(self.base_port) + span;
        if self.base_port == 0 || last > u64::from(u16::MAX) {
            bail!(
                "--base-port {} with --nodes {} needs ports up to {last}; use a base port between 1 and {}",
                self.base_port,
                self.nodes,
                u64::from(u16::MAX).saturating_sub(span)
            );
        }
        Ok((0..self.nodes)
            .map(|i| {
                let port = |k: u32| {
                    let port = u32::from(self.base_port) + PORT_STRIDE * i + k;
                    let port = u16::try_from(port).expect("checked against u16::MAX above");
                    SocketAddr::V4(SocketAddrV4::new(HOST, port)).to_string()
                };
                NodeAddrs {
                    name: format!("n{}", i + 1),
                    http: port(0),
                    resp: port(1),
                    peer: port(2),
                }
            })
            .collect())
    }
}

/// One node of a [`LocalCluster`]: where it listens, its process, and its files.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct LocalNode {
    /// `n1`, `n2`, ...
    pub name: String,
    /// Client HTTP address (`IP:port`).
    pub http: String,
    /// Client RESP address.
    pub resp: String,
    /// Peer address.
    pub peer: String,
    /// The server process.
    pub pid: u32,
    /// Its `--data-dir`.
    pub data_dir: PathBuf,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
}

/// A node that exited on its own, as found by [`LocalCluster::reap_exited`].
#[derive(Debug)]
pub struct ExitedNode {
    pub name: String,
    pub pid: u32,
    pub status: ExitStatus,
    pub log: PathBuf,
}

/// `DIR/cluster.json`: for scripts and tests, which nodes run where. `state` is `running` once
/// every node serves and `cluster up` has printed its summary, and `stopped` after a stop (the
/// pids are then those of the last run).
#[derive(Serialize)]
struct Manifest<'a> {
    state: &'a str,
    dir: &'a Path,
    base_port: u16,
    shard_count: u32,
    nodes: &'a [LocalNode],
}

/// A cluster of `trireme server` child processes on this machine.
///
/// Dropping it SIGKILLs whatever nodes still run (the data survives: every write the nodes
/// acknowledged is durable); call [`LocalCluster::stop`] for a clean stop.
pub struct LocalCluster {
    opts: ClusterOptions,
    dir: PathBuf,
    nodes: Vec<LocalNode>,
    /// One per node, `None` once reaped.
    children: Vec<Option<Child>>,
    /// Known once the nodes serve.
    shard_count: u32,
    manifest_written: bool,
}

impl LocalCluster {
    /// Spawns the nodes and waits until every node serves and every shard has a leader. On
    /// failure, stops what it started and says which nodes were missing, with their logs.
    #[allow(
        dead_code,
        reason = "the one-call form for the embedded cluster of `trireme bench`; `cluster up` spawns and waits separately so a Ctrl-C during start-up stops the nodes cleanly"
    )]
    pub async fn start(opts: ClusterOptions) -> anyhow::Result<LocalCluster> {
        let timeout = opts.start_timeout;
        let mut cluster = LocalCluster::spawn(opts)?;
        match cluster
            .wait_ready(timeout)
            .await
            .and_then(|()| cluster.mark_running())
        {
            Ok(()) => Ok(cluster),
            Err(e) => {
                // The start-up error matters more than how the stop went.
                let _ = cluster.stop().await;
                Err(e)
            }
        }
    }

    /// Checks the directory and the ports, then spawns every node without waiting for it.
    /// Nothing is spawned when a check fails.
    pub fn spawn(opts: ClusterOptions) -> anyhow::Result<LocalCluster> {
        let plan = opts.plan()?;
        check_existing_nodes(&opts.dir, &plan)?;
        check_ports_free(&opts.dir, &plan)?;
        std::fs::create_dir_all(&opts.dir)
            .with_context(|| format!("cannot create {}", opts.dir.display()))?;
        // Absolute, so cluster.json and the nodes' paths mean the same from any directory.
        let dir = std::fs::canonicalize(&opts.dir)
            .with_context(|| format!("cannot resolve {}", opts.dir.display()))?;
        // A cluster.json left by an earlier run must not pass for this one before it serves.
        match std::fs::remove_file(dir.join("cluster.json")) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(e).context("cannot remove the old cluster.json"),
        }
        let binary = match &opts.binary {
            Some(path) => path.clone(),
            None => std::env::current_exe().context("cannot find the trireme executable")?,
        };
        let initial_cluster = plan
            .iter()
            .map(|n| format!("{}={}", n.name, n.peer))
            .collect::<Vec<_>>()
            .join(",");

        let mut cluster = LocalCluster {
            opts,
            dir,
            nodes: Vec::new(),
            children: Vec::new(),
            shard_count: 0,
            manifest_written: false,
        };
        for addrs in plan {
            // On an error, dropping `cluster` kills the nodes spawned so far.
            let (node, child) = cluster.spawn_node(&binary, addrs, &initial_cluster)?;
            cluster.nodes.push(node);
            cluster.children.push(Some(child));
        }
        Ok(cluster)
    }

    fn spawn_node(
        &self,
        binary: &Path,
        addrs: NodeAddrs,
        initial_cluster: &str,
    ) -> anyhow::Result<(LocalNode, Child)> {
        let data_dir = self.dir.join(&addrs.name);
        let log = self.dir.join(format!("{}.log", addrs.name));
        // Appended to, so the output of earlier runs stays for whoever investigates.
        let mut out = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log)
            .with_context(|| format!("cannot open {}", log.display()))?;
        writeln!(
            out,
            "{RUN_MARKER} {} at {} ====",
            addrs.name,
            humantime::format_rfc3339_seconds(std::time::SystemTime::now())
        )?;
        let mut command = Command::new(binary);
        command
            .arg("server")
            .args(["--node-id", &addrs.name])
            .arg("--data-dir")
            .arg(&data_dir)
            .args(["--http", &addrs.http])
            .args(["--resp", &addrs.resp])
            .args(["--peer", &addrs.peer])
            .args(["--initial-cluster", initial_cluster]);
        if let Some(shards) = self.opts.shards {
            command.args(["--shards", &shards.to_string()]);
        }
        if let Some(rf) = self.opts.replication_factor {
            command.args(["--replication-factor", &rf.to_string()]);
        }
        if let Some(log) = &self.opts.log {
            command.args(["--log", log]);
        }
        command
            // The output goes to a file: no colour codes in it.
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(out.try_clone()?)
            .stderr(out);
        #[cfg(unix)]
        {
            use std::os::unix::process::CommandExt as _;
            command.process_group(0);
        }
        let child = command
            .spawn()
            .with_context(|| format!("cannot run {} for node {}", binary.display(), addrs.name))?;
        let node = LocalNode {
            name: addrs.name,
            http: addrs.http,
            resp: addrs.resp,
            peer: addrs.peer,
            pid: child.id(),
            data_dir,
            log,
        };
        Ok((node, child))
    }

    /// Waits until every node answers `/v1/health` with 200 and every shard has a leader (the
    /// caller then says so with [`LocalCluster::mark_running`]). Fails at once when a node exits, or at `timeout` naming the nodes
    /// and shards still missing; either way with the tail of the logs concerned. The nodes are
    /// left running: the caller decides how to stop them.
    pub async fn wait_ready(&mut self, timeout: Duration) -> anyhow::Result<()> {
        let client = http_client(Duration::from_secs(2))?;
        let deadline = tokio::time::Instant::now() + timeout;
        // What the last complete look saw, for the error at the deadline.
        let mut last = Probe::nothing_yet(&self.nodes);
        loop {
            if let Some(gone) = self.reap_exited().into_iter().next() {
                bail!(
                    "node {} (pid {}) exited during start-up with {}{}",
                    gone.name,
                    gone.pid,
                    gone.status,
                    log_section(&gone.name, &gone.log)
                );
            }
            // A look can last as long as the client's timeout (a starting node accepts
            // connections before it answers them), so the deadline cuts it short.
            match tokio::time::timeout_at(deadline, self.probe(&client)).await {
                Ok(probe) => last = probe,
                Err(_) => return Err(self.not_ready_error(timeout, &last)),
            }
            if let Some(shard_count) = last.ready() {
                self.shard_count = shard_count;
                return Ok(());
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(self.not_ready_error(timeout, &last));
            }
            tokio::time::sleep(POLL_EVERY).await;
        }
    }

    /// One look at every node at once: which serve, and which shards have a leader.
    async fn probe(&self, client: &reqwest::Client) -> Probe {
        let mut looks = tokio::task::JoinSet::new();
        for node in &self.nodes {
            let client = client.clone();
            let name = node.name.clone();
            let base = format!("http://{}", node.http);
            looks.spawn(async move {
                let healthy = matches!(
                    client.get(format!("{base}/v1/health")).send().await,
                    Ok(r) if r.status() == reqwest::StatusCode::OK
                );
                let view = if healthy {
                    get_json::<ShardsDoc>(&client, &format!("{base}/v1/cluster/shards"))
                        .await
                        .ok()
                } else {
                    None
                };
                (name, view)
            });
        }
        // A node counts as serving only once its answers are in.
        let mut probe = Probe::nothing_yet(&self.nodes);
        while let Some(look) = looks.join_next().await {
            let Ok((name, Some(view))) = look else {
                continue;
            };
            probe.unhealthy.retain(|n| *n != name);
            // A node knows the leaders of the shards it holds; together they know them all.
            probe.shard_count = Some(view.shard_count);
            probe.led.extend(
                view.shards
                    .iter()
                    .filter(|s| s.leader.is_some())
                    .map(|s| s.shard),
            );
        }
        probe
    }

    fn not_ready_error(&self, timeout: Duration, probe: &Probe) -> anyhow::Error {
        let mut msg = format!(
            "the cluster did not come up within {}",
            humantime::format_duration(timeout)
        );
        if !probe.unhealthy.is_empty() {
            let _ = write!(
                msg,
                "; not serving yet (GET /v1/health): {}",
                probe.unhealthy.join(", ")
            );
        }
        if let Some(count) = probe.shard_count {
            let leaderless: Vec<String> = (0..count)
                .filter(|s| !probe.led.contains(s))
                .map(|s| s.to_string())
                .collect();
            if !leaderless.is_empty() {
                let _ = write!(msg, "; shards without a leader: {}", leaderless.join(", "));
            }
        }
        // The logs of the nodes that are not serving; if all serve, every log may matter.
        let all_serve = probe.unhealthy.is_empty();
        for node in &self.nodes {
            if all_serve || probe.unhealthy.contains(&node.name) {
                msg.push_str(&log_section(&node.name, &node.log));
            }
        }
        anyhow!(msg)
    }

    /// The nodes, in order `n1`, `n2`, ...
    pub fn nodes(&self) -> &[LocalNode] {
        &self.nodes
    }

    /// The cluster's directory (absolute).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The number of shards, known once [`LocalCluster::wait_ready`] has succeeded.
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// How many node processes have not been reaped yet.
    pub fn running(&self) -> usize {
        self.children.iter().filter(|c| c.is_some()).count()
    }

    /// Reaps the nodes that exited since the last call and says which.
    pub fn reap_exited(&mut self) -> Vec<ExitedNode> {
        let mut exited = Vec::new();
        for (node, slot) in self.nodes.iter().zip(self.children.iter_mut()) {
            let Some(child) = slot else { continue };
            // An error means the child cannot be waited for now; a later call (or the grace
            // period of a stop) deals with it.
            let Ok(Some(status)) = child.try_wait() else {
                continue;
            };
            *slot = None;
            exited.push(ExitedNode {
                name: node.name.clone(),
                pid: node.pid,
                status,
                log: node.log.clone(),
            });
        }
        exited
    }

    /// Stops every running node: SIGTERM, then SIGKILL for any still running after the grace
    /// period; marks `cluster.json` stopped. Fails, naming them, when a node had to be killed
    /// or exited with an error (nodes that died before the stop are not counted: whoever
    /// called [`LocalCluster::reap_exited`] has seen them). Safe to call again.
    pub async fn stop(&mut self) -> anyhow::Result<()> {
        // Nodes that died earlier but were not reaped yet are not part of this stop's result.
        let _ = self.reap_exited();
        for child in self.children.iter().flatten() {
            send_terminate(child);
        }
        let deadline = Instant::now() + self.opts.stop_grace;
        let mut problems = Vec::new();
        loop {
            for gone in self.reap_exited() {
                if !stopped_cleanly(gone.status) {
                    problems.push(format!("{} exited with {}", gone.name, gone.status));
                }
            }
            if self.running() == 0 {
                break;
            }
            if Instant::now() >= deadline {
                for (node, slot) in self.nodes.iter().zip(self.children.iter_mut()) {
                    if let Some(mut child) = slot.take() {
                        let _ = child.kill();
                        let _ = child.wait();
                        problems.push(format!(
                            "{} (pid {}) did not stop within {} and was killed",
                            node.name,
                            node.pid,
                            humantime::format_duration(self.opts.stop_grace)
                        ));
                    }
                }
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if self.manifest_written {
            self.write_manifest("stopped")?;
        }
        if !problems.is_empty() {
            bail!(
                "not every node stopped cleanly: {}; see the logs in {}",
                problems.join("; "),
                self.dir.display()
            );
        }
        Ok(())
    }

    /// SIGKILLs and reaps every running node at once.
    pub fn kill(&mut self) {
        for mut child in self.children.iter_mut().filter_map(Option::take) {
            let _ = child.kill();
            let _ = child.wait();
        }
        if self.manifest_written {
            let _ = self.write_manifest("stopped");
        }
    }

    /// Writes `cluster.json` with state `running`. Scripts poll for it, so it comes after
    /// everything the caller prints about the running cluster.
    pub fn mark_running(&mut self) -> anyhow::Result<()> {
        self.write_manifest("running")
    }

    fn write_manifest(&mut self, state: &str) -> anyhow::Result<()> {
        let manifest = Manifest {
            state,
            dir: &self.dir,
            base_port: self.opts.base_port,
            shard_count: self.shard_count,
            nodes: &self.nodes,
        };
        let path = self.dir.join("cluster.json");
        // Written whole then renamed, so a reader never sees half a file.
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, serde_json::to_vec_pretty(&manifest)?)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .with_context(|| format!("cannot write {}", path.display()))?;
        self.manifest_written = true;
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.kill();
    }
}

/// What one [`LocalCluster::probe`] saw.
#[derive(Default)]
struct Probe {
    unhealthy: Vec<String>,
    shard_count: Option<u32>,
    led: BTreeSet<u32>,
}

impl Probe {
    /// Nothing known yet: no node counts as serving.
    fn nothing_yet(nodes: &[LocalNode]) -> Probe {
        Probe {
            unhealthy: nodes.iter().map(|n| n.name.clone()).collect(),
            ..Probe::default()
        }
    }

    /// The shard count, when every node serves and every shard has a leader.
    fn ready(&self) -> Option<u32> {
        let count = self.shard_count?;
        (self.unhealthy.is_empty() && (0..count).all(|s| self.led.contains(&s))).then_some(count)
    }
}

#[cfg(unix)]
fn send_terminate(child: &Child) {
    use rustix::process::{Pid, Signal, kill_process};
    // The child is not reaped yet, so its pid cannot belong to another process. An error
    // means it has exited already; the caller reaps it.
    let _ = kill_process(Pid::from_child(child), Signal::TERM);
}

#[cfg(not(unix))]
fn send_terminate(_child: &Child) {
    // No SIGTERM here: the grace period passes and the node is killed.
}

/// Whether a node asked to stop did so as it should: exit 0, or death by the SIGTERM itself,
/// which is how a node still starting up (before it handles signals) stops.
fn stopped_cleanly(status: ExitStatus) -> bool {
    #[cfg(unix)]
    {
        use std::os::unix::process::ExitStatusExt as _;
        status.success() || status.signal() == Some(rustix::process::Signal::TERM.as_raw())
    }
    #[cfg(not(unix))]
    {
        status.success()
    }
}

/// Refuses a directory that holds another set of nodes, or nodes created on other ports:
/// each node remembers its peers' addresses from its first start, so a restart must use the
/// same node count and base port.
fn check_existing_nodes(dir: &Path, plan: &[NodeAddrs]) -> anyhow::Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(()); // a new directory
    };
    let mut found: Vec<u32> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| e.file_name().to_str()?.strip_prefix('n')?.parse().ok())
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    found.sort_unstable();
    let wanted: Vec<u32> = (1..=u32::try_from(plan.len()).unwrap_or(u32::MAX)).collect();
    if found != wanted {
        let names: Vec<String> = found.iter().map(|i| format!("n{i}")).collect();
        bail!(
            "{} already holds the data of nodes {}: restart them with --nodes {}, or use another --dir (a cluster's membership is fixed when it is created)",
            dir.display(),
            names.join(", "),
            found.len()
        );
    }
    for (i, node) in plan.iter().enumerate() {
        let Some(last) = read_endpoints(&dir.join(&node.name)) else {
            continue;
        };
        if last.peer != node.peer {
            let hint = last
                .peer
                .parse::<SocketAddr>()
                .ok()
                .and_then(|a| u32::from(a.port()).checked_sub(2 + PORT_STRIDE * i as u32))
                .map(|p| format!(" (pass --base-port {p})"))
                .unwrap_or_default();
            bail!(
                "node {} in {} was created with peer address {}, and this run would give it {}: the nodes remember each other's addresses, so use the same ports as before{hint}",
                node.name,
                dir.display(),
                last.peer,
                node.peer
            );
        }
    }
    Ok(())
}

/// `<data dir>/endpoints.json`, as the server writes it.
#[derive(Deserialize)]
struct Endpoints {
    peer: String,
    pid: u32,
}

fn read_endpoints(data_dir: &Path) -> Option<Endpoints> {
    let text = std::fs::read_to_string(data_dir.join("endpoints.json")).ok()?;
    serde_json::from_str(&text).ok()
}

/// Fails naming the first port that cannot be bound, so the user learns which one before any
/// node starts (a server would only say so in its log). Binds the way the servers will.
fn check_ports_free(dir: &Path, plan: &[NodeAddrs]) -> anyhow::Result<()> {
    for node in plan {
        for (what, addr) in [
            ("HTTP", &node.http),
            ("RESP", &node.resp),
            ("peer", &node.peer),
        ] {
            if let Err(e) = std::net::TcpListener::bind(addr.as_str()) {
                let port = addr.rsplit_once(':').map_or(addr.as_str(), |(_, p)| p);
                let mut msg = format!(
                    "port {port} ({what} of node {}) is not free on {HOST}: {e}; stop what uses it or pick another --base-port",
                    node.name
                );
                if let Some(pid) = read_endpoints(&dir.join(&node.name))
                    .map(|e| e.pid)
                    .filter(|pid| process_alive(*pid))
                {
                    let _ = write!(
                        msg,
                        " (process {pid}, the last pid of node {} in {}, is running: is a `trireme cluster up` on this directory still running?)",
                        node.name,
                        dir.display()
                    );
                }
                bail!(msg);
            }
        }
    }
    Ok(())
}

#[cfg(unix)]
fn process_alive(pid: u32) -> bool {
    use rustix::process::{Pid, test_kill_process};
    let Some(pid) = i32::try_from(pid).ok().and_then(Pid::from_raw) else {
        return false;
    };
    match test_kill_process(pid) {
        Ok(()) => true,
        // It exists but belongs to someone else.
        Err(e) => e == rustix::io::Errno::PERM,
    }
}

#[cfg(not(unix))]
fn process_alive(_pid: u32) -> bool {
    false
}

/// Starts each run's output in a node's log, which keeps the output of earlier runs.
const RUN_MARKER: &str = "==== trireme cluster up: starting";

/// `\n--- last lines of <log> (<name>) ---\n...`, for error messages.
fn log_section(name: &str, log: &Path) -> String {
    format!(
        "\n--- last lines of {} ({name}) ---\n{}",
        log.display(),
        log_tail(log, LOG_TAIL_LINES)
    )
}

/// The last `lines` lines of a file written since the last [`RUN_MARKER`] (what an earlier run
/// said would mislead), reading at most its last 64 KiB.
fn log_tail(path: &Path, lines: usize) -> String {
    const WINDOW: u64 = 64 * 1024;
    let read = || -> std::io::Result<String> {
        let mut file = std::fs::File::open(path)?;
        let len = file.metadata()?.len();
        let start = len.saturating_sub(WINDOW);
        file.seek(SeekFrom::Start(start))?;
        let mut bytes = Vec::new();
        file.read_to_end(&mut bytes)?;
        let text = String::from_utf8_lossy(&bytes).into_owned();
        let mut all: Vec<&str> = text.lines().collect();
        if start > 0 && !all.is_empty() {
            all.remove(0); // cut in the middle
        }
        if let Some(marker) = all.iter().rposition(|l| l.starts_with(RUN_MARKER)) {
            all.drain(..marker);
        }
        let from = all.len().saturating_sub(lines);
        Ok(all[from..].join("\n"))
    };
    read().unwrap_or_else(|e| format!("(cannot read {}: {e})", path.display()))
}

// ---------------------------------------------------------------------------------------------
// cluster up
// ---------------------------------------------------------------------------------------------

async fn up(args: UpArgs) -> anyhow::Result<()> {
    let opts = ClusterOptions {
        shards: args.shards,
        replication_factor: args.replication_factor,
        base_port: args.base_port,
        log: args.log,
        start_timeout: humantime::parse_duration(&args.timeout).with_context(|| {
            format!(
                "--timeout {:?} is not a duration like 60s or 2m",
                args.timeout
            )
        })?,
        ..ClusterOptions::new(args.nodes, args.dir)
    };
    // Before any node starts: from here on a Ctrl-C must stop the nodes, not just this process.
    let mut signals = StopSignals::register()?;
    let timeout = opts.start_timeout;
    let mut cluster = LocalCluster::spawn(opts)?;
    eprintln!(
        "starting {} nodes in {} (logs: n<i>.log there)",
        cluster.nodes().len(),
        cluster.dir().display()
    );
    let started = tokio::select! {
        ready = cluster.wait_ready(timeout) => Some(ready),
        signal = signals.recv() => {
            eprintln!("{signal} during start-up: stopping the nodes");
            None
        }
    };
    match started {
        Some(Ok(())) => {}
        Some(Err(e)) => {
            if let Err(stop) = cluster.stop().await {
                eprintln!("{stop:#}");
            }
            return Err(e);
        }
        None => return cluster.stop().await,
    }
    print_up_summary(&cluster);
    cluster.mark_running()?;

    // Nodes that died while the cluster was up: reported at once, and in the exit status.
    let mut died = Vec::new();
    let signal = loop {
        tokio::select! {
            signal = signals.recv() => break signal,
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        for gone in cluster.reap_exited() {
            eprintln!(
                "node {} (pid {}) exited unexpectedly with {}{}",
                gone.name,
                gone.pid,
                gone.status,
                log_section(&gone.name, &gone.log)
            );
            died.push(gone.name);
        }
        if cluster.running() == 0 {
            cluster.stop().await?;
            bail!(
                "every node has exited; see the logs in {}",
                cluster.dir().display()
            );
        }
    };
    eprintln!(
        "{signal}: stopping {} nodes (again to kill them)",
        cluster.running()
    );
    let stopped = tokio::select! {
        result = cluster.stop() => Some(result),
        signal = signals.recv() => {
            eprintln!("{signal}: killing the nodes");
            None
        }
    };
    match stopped {
        Some(result) => result?,
        None => {
            cluster.kill();
            bail!("the nodes were killed before they had stopped");
        }
    }
    if !died.is_empty() {
        bail!(
            "stopped; {} had died while the cluster was up (see above)",
            died.join(", ")
        );
    }
    eprintln!("every node stopped");
    Ok(())
}

fn print_up_summary(cluster: &LocalCluster) {
    let nodes = cluster.nodes();
    println!(
        "trireme cluster up: {} nodes, {} shards, in {} (cluster.json)",
        nodes.len(),
        cluster.shard_count(),
        cluster.dir().display()
    );
    let mut rows = vec![row(["NODE", "HTTP", "RESP", "PEER", "PID", "LOG"])];
    for n in nodes {
        rows.push(vec![
            n.name.clone(),
            n.http.clone(),
            n.resp.clone(),
            n.peer.clone(),
            n.pid.to_string(),
            n.log.display().to_string(),
        ]);
    }
    print!("{}", table(&rows));
    let first = &nodes[0];
    let resp_port = first.resp.rsplit_once(':').map_or("", |(_, p)| p);
    println!(
        "try: redis-cli -c -p {resp_port} SET greeting hello; curl 'http://{}/v1/kv/greeting?raw'",
        first.http
    );
    println!(
        "status: trireme cluster status --target http://{}; Ctrl-C stops every node.",
        first.http
    );
}

/// The signals that stop `cluster up`, registered before any node starts.
struct StopSignals {
    #[cfg(unix)]
    interrupt: tokio::signal::unix::Signal,
    #[cfg(unix)]
    terminate: tokio::signal::unix::Signal,
    /// The terminal went away: the nodes, in their own process group, would not know.
    #[cfg(unix)]
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    #[cfg(unix)]
    fn register() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            hangup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
        })
    }

    #[cfg(not(unix))]
    fn register() -> anyhow::Result<Self> {
        Ok(StopSignals {})
    }

    /// Waits for the next signal and names it.
    #[cfg(unix)]
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }

    #[cfg(not(unix))]
    async fn recv(&mut self) -> &'static str {
        let _ = tokio::signal::ctrl_c().await;
        "Ctrl-C"
    }
}

// ---------------------------------------------------------------------------------------------
// cluster status
// ---------------------------------------------------------------------------------------------

// The shard map and the node addresses are the server's own documents (`trireme_types::admin`):
// one type for the server that writes them and every reader.
use trireme_types::admin::{NodeAddrs, ShardDoc, ShardsDoc};

/// What `cluster status` prints, as text or (`--json`) as is.
#[derive(Debug, Serialize)]
struct StatusReport {
    target: String,
    target_node: String,
    shard_count: u32,
    /// `/v1/status/leader` of the target.
    status_leader: String,
    /// `/v1/status/peers` of the target.
    status_peers: Vec<String>,
    nodes: Vec<NodeReport>,
    shards: Vec<ShardReport>,
}

#[derive(Debug, Serialize)]
struct NodeReport {
    #[serde(flatten)]
    addrs: NodeAddrs,
    /// `ok`, `unavailable` (health 503), or `unreachable: <why>`.
    health: String,
}

#[derive(Debug, Serialize)]
struct ShardReport {
    shard: u32,
    slots: [u16; 2],
    leader: Option<String>,
    term: Option<u64>,
    committed_index: Option<u64>,
    replicas: Vec<ReplicaReport>,
}

#[derive(Debug, Serialize)]
struct ReplicaReport {
    name: String,
    /// `None` when the node could not be asked.
    role: Option<String>,
    applied_index: Option<u64>,
    /// Entries applied on the leader but not yet here.
    lag: Option<u64>,
}

async fn status(args: StatusArgs) -> anyhow::Result<()> {
    let report = collect_status(&args.target).await?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_status(&report));
    }
    Ok(())
}

/// `127.0.0.1:7700`, `http://127.0.0.1:7700/` → `http://127.0.0.1:7700`.
fn normalize_target(target: &str) -> anyhow::Result<String> {
    let target = target.trim().trim_end_matches('/');
    if target.is_empty() {
        bail!("--target is empty; give a node's HTTP URL like http://127.0.0.1:7700");
    }
    if target.starts_with("https://") {
        bail!("--target {target}: trireme nodes speak plain HTTP; use http://");
    }
    if target.starts_with("http://") {
        Ok(target.to_string())
    } else if target.contains("://") {
        bail!("--target {target}: give a node's HTTP URL like http://127.0.0.1:7700")
    } else {
        Ok(format!("http://{target}"))
    }
}

async fn collect_status(target: &str) -> anyhow::Result<StatusReport> {
    let target = normalize_target(target)?;
    let client = http_client(Duration::from_secs(5))?;
    let unreachable = || format!("cannot reach the trireme node at {target}");
    let view: ShardsDoc = get_json(&client, &format!("{target}/v1/cluster/shards"))
        .await
        .with_context(unreachable)?;
    let status_leader: String = get_json(&client, &format!("{target}/v1/status/leader"))
        .await
        .with_context(unreachable)?;
    let status_peers: Vec<String> = get_json(&client, &format!("{target}/v1/status/peers"))
        .await
        .with_context(unreachable)?;

    // Every node that holds a replica, by name; then each one's own view, for its indexes.
    let mut addrs: BTreeMap<String, NodeAddrs> = BTreeMap::new();
    for shard in &view.shards {
        for node in shard.replicas.iter().chain(shard.leader.as_ref()) {
            addrs.insert(node.name.clone(), node.clone());
        }
    }
    let mut nodes = Vec::new();
    let mut views: BTreeMap<String, ShardsDoc> = BTreeMap::new();
    for (name, node) in addrs {
        let base = format!("http://{}", node.http);
        let health = match client.get(format!("{base}/v1/health")).send().await {
            Ok(r) if r.status() == reqwest::StatusCode::OK => "ok".to_string(),
            Ok(r) if r.status() == reqwest::StatusCode::SERVICE_UNAVAILABLE => {
                "unavailable".to_string()
            }
            Ok(r) => format!("health answered {}", r.status()),
            Err(e) => format!("unreachable: {}", root_cause(&e)),
        };
        if name == view.node {
            // Already asked; asking again would only add a moment of skew.
        } else if let Ok(own) =
            get_json::<ShardsDoc>(&client, &format!("{base}/v1/cluster/shards")).await
        {
            views.insert(name.clone(), own);
        }
        nodes.push(NodeReport {
            addrs: node,
            health,
        });
    }
    let target_node = view.node.clone();
    let shard_count = view.shard_count;
    let shards = {
        let own = |name: &str, shard: usize| -> Option<&ShardDoc> {
            if name == target_node {
                view.shards.get(shard)
            } else {
                views.get(name)?.shards.get(shard)
            }
        };
        view.shards
            .iter()
            .enumerate()
            .map(|(i, s)| {
                // The target knows the leader of the shards it holds; the replicas know theirs.
                let leader = s.leader.clone().or_else(|| {
                    s.replicas
                        .iter()
                        .find_map(|r| own(&r.name, i).and_then(|v| v.leader.clone()))
                });
                let leader_view = leader
                    .as_ref()
                    .and_then(|l| own(&l.name, i))
                    .filter(|v| v.is_local());
                let replicas = s
                    .replicas
                    .iter()
                    .map(|r| {
                        let mine = own(&r.name, i).filter(|v| v.is_local());
                        let applied = mine.map(|v| v.applied_index);
                        ReplicaReport {
                            name: r.name.clone(),
                            role: mine.and_then(|v| v.local_role.clone()),
                            applied_index: applied,
                            lag: leader_view
                                .zip(applied)
                                .map(|(l, a)| l.applied_index.saturating_sub(a)),
                        }
                    })
                    .collect();
                ShardReport {
                    shard: s.shard,
                    slots: s.slots,
                    leader: leader.map(|l| l.name),
                    term: leader_view.map(|v| v.term),
                    committed_index: leader_view.map(|v| v.committed_index),
                    replicas,
                }
            })
            .collect()
    };
    Ok(StatusReport {
        target,
        target_node,
        shard_count,
        status_leader,
        status_peers,
        nodes,
        shards,
    })
}

fn render_status(report: &StatusReport) -> String {
    let dash = || "-".to_string();
    let opt = |v: Option<u64>| v.map_or_else(dash, |v| v.to_string());
    let mut out = format!(
        "{} is node {}: {} shards on {} nodes\nleader (/v1/status/leader): {}\npeers (/v1/status/peers): {}\n\n",
        report.target,
        report.target_node,
        report.shard_count,
        report.nodes.len(),
        if report.status_leader.is_empty() {
            "none"
        } else {
            &report.status_leader
        },
        report.status_peers.join(", ")
    );
    let mut rows = vec![row(["NODE", "HTTP", "RESP", "PEER", "HEALTH"])];
    for n in &report.nodes {
        rows.push(vec![
            n.addrs.name.clone(),
            n.addrs.http.clone(),
            n.addrs.resp.clone(),
            n.addrs.peer.clone(),
            n.health.clone(),
        ]);
    }
    out.push_str(&table(&rows));
    out.push('\n');

    let mut rows = vec![row([
        "SHARD",
        "SLOTS",
        "LEADER",
        "TERM",
        "COMMITTED",
        "REPLICA",
        "ROLE",
        "APPLIED",
        "LAG",
    ])];
    for s in &report.shards {
        let head = [
            s.shard.to_string(),
            format!("{}-{}", s.slots[0], s.slots[1]),
            s.leader.clone().unwrap_or_else(|| "none".to_string()),
            opt(s.term),
            opt(s.committed_index),
        ];
        if s.replicas.is_empty() {
            rows.push(
                head.iter()
                    .cloned()
                    .chain(std::iter::repeat_n(dash(), 4))
                    .collect(),
            );
        }
        for (k, r) in s.replicas.iter().enumerate() {
            // The shard's own columns once, on its first replica's line.
            let mut line: Vec<String> = if k == 0 {
                head.to_vec()
            } else {
                vec![String::new(); head.len()]
            };
            line.extend([
                r.name.clone(),
                r.role.clone().unwrap_or_else(|| "unreachable".to_string()),
                opt(r.applied_index),
                opt(r.lag),
            ]);
            rows.push(line);
        }
    }
    out.push_str(&table(&rows));
    let leaderless: Vec<String> = report
        .shards
        .iter()
        .filter(|s| s.leader.is_none())
        .map(|s| s.shard.to_string())
        .collect();
    if !leaderless.is_empty() {
        let _ = writeln!(
            out,
            "\nshards without a known leader: {}",
            leaderless.join(", ")
        );
    }
    out
}

// ---------------------------------------------------------------------------------------------
// helpers
// ---------------------------------------------------------------------------------------------

/// A client for loopback and LAN nodes: never through a proxy, never waiting long.
fn http_client(timeout: Duration) -> anyhow::Result<reqwest::Client> {
    reqwest::Client::builder()
        .no_proxy()
        .connect_timeout(timeout)
        .timeout(timeout)
        .build()
        .context("cannot set up the HTTP client")
}

/// GET `url` and decode its JSON body; a non-200 answer is an error.
async fn get_json<T: serde::de::DeserializeOwned>(
    client: &reqwest::Client,
    url: &str,
) -> anyhow::Result<T> {
    let response = client
        .get(url)
        .send()
        .await
        .map_err(|e| anyhow!("GET {url}: {}", root_cause(&e)))?;
    let status = response.status();
    if status != reqwest::StatusCode::OK {
        let body = response.text().await.unwrap_or_default();
        bail!("GET {url} answered {status}: {}", body.trim());
    }
    response
        .json()
        .await
        .map_err(|e| anyhow!("GET {url}: unexpected answer: {}", root_cause(&e)))
}

/// The innermost cause of an error. reqwest's own message ("error sending request for url
/// (...)") repeats the URL and hides why; the innermost cause says it ("Connection refused").
fn root_cause(e: &dyn std::error::Error) -> String {
    let mut cause = e;
    while let Some(source) = cause.source() {
        cause = source;
    }
    cause.to_string()
}

fn row<const N: usize>(cells: [&str; N]) -> Vec<String> {
    cells.iter().map(|c| (*c).to_string()).collect()
}

/// Left-aligned columns two spaces apart, no trailing spaces.
fn table(rows: &[Vec<String>]) -> String {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns)
        .map(|c| {
            rows.iter()
                .filter_map(|r| r.get(c))
                .map(|cell| cell.chars().count())
                .max()
                .unwrap_or(0)
        })
        .collect();
    let mut out = String::new();
    for r in rows {
        let mut line = String::new();
        for (cell, width) in r.iter().zip(&widths) {
            let _ = write!(line, "{cell:<width$}  ");
        }
        out.push_str(line.trim_end());
        out.push('\n');
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_follow_the_design_and_must_fit() {
        let mut opts = ClusterOptions::new(3, "x");
        let plan = opts.plan().unwrap();
        let names: Vec<&str> = plan.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n1", "n2", "n3"]);
        assert_eq!(plan[0].http, "127.0.0.1:7700");
        assert_eq!(plan[0].resp, "127.0.0.1:7701");
        assert_eq!(plan[0].peer, "127.0.0.1:7702");
        assert_eq!(plan[2].http, "127.0.0.1:7720");
        assert_eq!(plan[2].peer, "127.0.0.1:7722");

        opts.base_port = 65_520;
        let err = opts.plan().unwrap_err().to_string();
        assert!(err.contains("--base-port 65520"), "{err}");
        opts.nodes = 0;
        assert!(opts.plan().is_err());
    }

    #[test]
    fn a_directory_of_other_nodes_or_ports_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let opts = ClusterOptions::new(3, dir.path());
        let plan = opts.plan().unwrap();
        check_existing_nodes(dir.path(), &plan).unwrap();
        check_existing_nodes(&dir.path().join("missing"), &plan).unwrap();

        std::fs::create_dir(dir.path().join("n1")).unwrap();
        let err = check_existing_nodes(dir.path(), &plan)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--nodes 1"), "{err}");

        std::fs::create_dir(dir.path().join("n2")).unwrap();
        std::fs::create_dir(dir.path().join("n3")).unwrap();
        check_existing_nodes(dir.path(), &plan).unwrap();

        std::fs::write(
            dir.path().join("n2").join("endpoints.json"),
            r#"{"node":"n2","http":"127.0.0.1:8010","resp":"127.0.0.1:8011","peer":"127.0.0.1:8012","pid":1}"#,
        )
        .unwrap();
        let err = check_existing_nodes(dir.path(), &plan)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--base-port 8000"), "{err}");
    }

    #[test]
    fn targets_are_normalized() {
        assert_eq!(
            normalize_target("127.0.0.1:7700").unwrap(),
            "http://127.0.0.1:7700"
        );
        assert_eq!(
            normalize_target("http://localhost:7710/").unwrap(),
            "http://localhost:7710"
        );
        assert!(normalize_target("redis://127.0.0.1:7701").is_err());
        assert!(normalize_target("").is_err());
    }

    #[test]
    fn log_tail_keeps_the_last_lines() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.log");
        let text: String = (0..100).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, text).unwrap();
        assert_eq!(log_tail(&path, 2), "line 98\nline 99");
        // Only what the last run said.
        let text = format!("old\n{RUN_MARKER} n1 ====\nnew\n");
        std::fs::write(&path, text).unwrap();
        assert_eq!(log_tail(&path, 5), format!("{RUN_MARKER} n1 ====\nnew"));
        assert!(log_tail(&dir.path().join("nope"), 2).starts_with("(cannot read"));
    }

    #[test]
    fn tables_align_columns() {
        let rows = vec![row(["A", "BB"]), row(["CCC", "D"])];
        assert_eq!(table(&rows), "A    BB\nCCC  D\n");
    }

    #[test]
    fn status_renders_lag_and_missing_leaders() {
        let node = |name: &str| NodeAddrs {
            name: name.into(),
            http: format!("{name}:1"),
            resp: format!("{name}:2"),
            peer: format!("{name}:3"),
        };
        let report = StatusReport {
            target: "http://n1:1".into(),
            target_node: "n1".into(),
            shard_count: 2,
            status_leader: "n1:3".into(),
            status_peers: vec!["n1:3".into(), "n2:3".into()],
            nodes: vec![
                NodeReport {
                    addrs: node("n1"),
                    health: "ok".into(),
                },
                NodeReport {
                    addrs: node("n2"),
                    health: "unreachable: refused".into(),
                },
            ],
            shards: vec![
                ShardReport {
                    shard: 0,
                    slots: [0, 8191],
                    leader: Some("n1".into()),
                    term: Some(2),
                    committed_index: Some(10),
                    replicas: vec![
                        ReplicaReport {
                            name: "n1".into(),
                            role: Some("Leader".into()),
                            applied_index: Some(10),
                            lag: Some(0),
                        },
                        ReplicaReport {
                            name: "n2".into(),
                            role: None,
                            applied_index: None,
                            lag: None,
                        },
                    ],
                },
                ShardReport {
                    shard: 1,
                    slots: [8192, 16383],
                    leader: None,
                    term: None,
                    committed_index: None,
                    replicas: vec![],
                },
            ],
        };
        let text = render_status(&report);
        assert!(
            text.contains(
                "0      0-8191      n1      2     10         n1       Leader       10       0"
            ),
            "{text}"
        );
        assert!(text.contains("n2       unreachable  -        -"), "{text}");
        assert!(text.contains("shards without a known leader: 1"), "{text}");
    }
}
