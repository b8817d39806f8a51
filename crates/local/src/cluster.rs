//! A local cluster: N nodes on loopback under one directory, with a port layout a person can
//! guess, a `cluster.json` that says which processes serve where, and `cluster add` for one
//! more node joining a running cluster.
//!
//! Layout: node *k* (from 1) is named `n<k>`, keeps its data in `DIR/n<k>`, its output in
//! `DIR/n<k>.log`, and listens on `BASE + 10(k-1)` (HTTP), the next port (RESP) and the one
//! after (peer).

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::net::{Ipv4Addr, SocketAddr, SocketAddrV4};
use std::path::{Path, PathBuf};
use std::process::ExitStatus;
use std::time::Duration;

use rustix::process::Signal;
use serde::{Deserialize, Serialize};

use crate::command::{Membership, ServerCommand};
use crate::logs::log_section;
use crate::process::{
    Output, ServerProcess, http_client, process_alive, read_endpoints, runs_server_for, signal_pid,
};
use crate::{Error, Result};

/// Where every node of a local cluster listens: loopback only, the cluster is for one machine.
pub const HOST: Ipv4Addr = Ipv4Addr::LOCALHOST;
/// Ports between consecutive nodes: node *k* uses `base + PORT_STRIDE * (k - 1)` and the two
/// after it, so node ports are easy to guess from the node number.
pub const PORT_STRIDE: u32 = 10;
/// Default base port: node 1 gets the ports of a default `trireme server`.
pub const DEFAULT_BASE_PORT: u16 = 7700;
/// How often start-up looks at the nodes.
const POLL_EVERY: Duration = Duration::from_millis(200);
/// The file `cluster.json` is read and written under, so `cluster add` and the stop of
/// `cluster up` never work from different versions of it.
const LOCK_FILE: &str = "cluster.lock";
const MANIFEST_FILE: &str = "cluster.json";

/// How to start a [`LocalCluster`].
#[derive(Debug, Clone)]
pub struct ClusterOptions {
    /// Number of nodes that bootstrap the cluster, named `n1`..`nN`. Nodes added later are
    /// restarted with them, from `cluster.json`.
    pub nodes: u32,
    /// Server flags every node gets.
    pub flags: ServerFlags,
    /// Holds `n<k>/` (data), `n<k>.log`, `cluster.json`; created if missing.
    pub dir: PathBuf,
    /// Node *k* listens on `base_port + 10(k-1)` (HTTP), `+1` (RESP), `+2` (peer).
    pub base_port: u16,
    /// How long [`LocalCluster::start`] waits for every node to serve.
    pub start_timeout: Duration,
    /// How long [`LocalCluster::stop`] waits after SIGTERM before it SIGKILLs a node.
    pub stop_grace: Duration,
    /// The `trireme` binary to run; `None` runs the current executable, which is what the
    /// `trireme` commands want (same version as the caller, wherever it is installed).
    pub binary: Option<PathBuf>,
}

/// The server flags of a local cluster, recorded in `cluster.json` so that `cluster add`
/// starts its node the way the others were started.
#[derive(Debug, Clone, Default, Serialize, Deserialize, PartialEq, Eq)]
pub struct ServerFlags {
    /// `--shards` for a new cluster; `None` keeps the server's default (on a restart the
    /// nodes keep the count they were created with).
    pub shards: Option<u32>,
    /// `--replication-factor`; `None` keeps the server's default.
    pub replication_factor: Option<u32>,
    /// `--cluster-name`; `None` keeps the server's default.
    pub cluster_name: Option<String>,
    /// `--log`; `None` keeps the server's default.
    pub log: Option<String>,
    /// ACLs, TLS on the client ports and mutual TLS between nodes, with a CA and a token
    /// made in the cluster's directory (see `secure.rs`).
    #[serde(default)]
    pub secure: bool,
}

/// The base URL of a node's HTTP address in a cluster with or without TLS.
fn node_url(secure: bool, http: &str) -> String {
    if secure {
        format!("https://{http}")
    } else {
        http.to_string()
    }
}

/// The client that talks to the nodes of the cluster in `dir`.
fn cluster_client(secure: bool, dir: &Path, timeout: Duration) -> Result<reqwest::Client> {
    if secure {
        crate::secure::client(dir, timeout)
    } else {
        http_client(timeout)
    }
}

impl ServerFlags {
    fn apply(&self, command: &mut ServerCommand) {
        command.shards = self.shards;
        command.replication_factor = self.replication_factor;
        command.cluster_name.clone_from(&self.cluster_name);
        command.log.clone_from(&self.log);
    }
}

impl ClusterOptions {
    /// `nodes` nodes under `dir`, on the default ports, with the servers' defaults otherwise.
    pub fn new(nodes: u32, dir: impl Into<PathBuf>) -> Self {
        ClusterOptions {
            nodes,
            flags: ServerFlags::default(),
            dir: dir.into(),
            base_port: DEFAULT_BASE_PORT,
            start_timeout: Duration::from_secs(60),
            stop_grace: Duration::from_secs(10),
            binary: None,
        }
    }

    /// Fails naming the first of the cluster's ports that cannot be bound now.
    pub fn check_ports(&self) -> Result<()> {
        check_ports_free(&self.dir, &self.plan()?)
    }

    /// Each bootstrapping node's name and addresses, checked to fit in the port range.
    fn plan(&self) -> Result<Vec<NodeAddrs>> {
        if self.nodes == 0 {
            return Err(Error::Refused("a cluster needs at least one node".into()));
        }
        (1..=self.nodes)
            .map(|k| {
                node_addrs(self.base_port, k).ok_or_else(|| {
                    let span = u64::from(PORT_STRIDE) * u64::from(self.nodes - 1) + 2;
                    Error::Refused(format!(
                        "--base-port {} with --nodes {} needs ports up to {}; use a base port between 1 and {}",
                        self.base_port,
                        self.nodes,
                        u64::from(self.base_port) + span,
                        u64::from(u16::MAX).saturating_sub(span)
                    ))
                })
            })
            .collect()
    }
}

/// A node's name and the addresses the layout gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct NodeAddrs {
    name: String,
    http: String,
    resp: String,
    peer: String,
}

/// Node `k`'s addresses from `base_port`; `None` when they do not fit in the port range.
fn node_addrs(base_port: u16, k: u32) -> Option<NodeAddrs> {
    let first = u64::from(base_port) + u64::from(PORT_STRIDE) * u64::from(k.checked_sub(1)?);
    let port = |offset: u64| -> Option<String> {
        let port = u16::try_from(first + offset).ok()?;
        Some(SocketAddr::V4(SocketAddrV4::new(HOST, port)).to_string())
    };
    if base_port == 0 {
        return None;
    }
    Some(NodeAddrs {
        name: format!("n{k}"),
        http: port(0)?,
        resp: port(1)?,
        peer: port(2)?,
    })
}

/// The number in a node name `n<k>`.
fn node_number(name: &str) -> Option<u32> {
    name.strip_prefix('n')?.parse().ok()
}

/// One node of a local cluster: where it listens, its process, and its files.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct LocalNode {
    /// `n1`, `n2`, ...
    pub name: String,
    /// Client HTTP address (`IP:port`).
    pub http: String,
    /// Client RESP address.
    pub resp: String,
    /// Peer address.
    pub peer: String,
    /// The server process of the current (or last) run.
    pub pid: u32,
    /// Its `--data-dir`.
    pub data_dir: PathBuf,
    /// Where its stdout and stderr go.
    pub log: PathBuf,
    /// For a node added to a running cluster: the `--join` address it was started with (it
    /// restarts from its data directory, where the server ignores the flag).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<String>,
}

/// A node that exited on its own, as found by [`LocalCluster::reap_exited`].
#[derive(Debug)]
pub struct ExitedNode {
    /// Its name.
    pub name: String,
    /// The process that exited.
    pub pid: u32,
    /// How it exited.
    pub status: ExitStatus,
    /// Its log, for the reader.
    pub log: PathBuf,
}

/// `DIR/cluster.json`: for scripts, tests and `cluster add`, which nodes run where and how
/// they were started. `state` is `starting` while the nodes come up, `running` once every
/// node serves (and `cluster up` has printed its summary), and `stopped` after a stop (the
/// pids are then those of the last run).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Manifest {
    /// `starting`, `running` or `stopped`.
    pub state: String,
    /// The cluster's directory, absolute.
    pub dir: PathBuf,
    /// See [`ClusterOptions::base_port`].
    pub base_port: u16,
    /// Known once the nodes serve; 0 before.
    pub shard_count: u32,
    /// The process that started the cluster and stops it (`cluster up`).
    #[serde(default)]
    pub supervisor_pid: Option<u32>,
    /// The flags every node was started with.
    #[serde(default)]
    pub flags: ServerFlags,
    /// Every node, the bootstrapping ones first, then those added in the order they joined.
    pub nodes: Vec<LocalNode>,
}

impl Manifest {
    /// Reads `dir/cluster.json`; `None` when there is none.
    pub fn read(dir: &Path) -> Result<Option<Manifest>> {
        let path = dir.join(MANIFEST_FILE);
        let text = match std::fs::read_to_string(&path) {
            Ok(text) => text,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(Error::io(format!("cannot read {}", path.display()), e)),
        };
        serde_json::from_str(&text)
            .map(Some)
            .map_err(|source| Error::Manifest {
                path: path.display().to_string(),
                source,
            })
    }

    /// Writes `dir/cluster.json` whole, then renames it into place, so a reader never sees
    /// half a file.
    pub fn write(&self, dir: &Path) -> Result<()> {
        let path = dir.join(MANIFEST_FILE);
        let text = serde_json::to_vec_pretty(self).map_err(|source| Error::Manifest {
            path: path.display().to_string(),
            source,
        })?;
        let tmp = path.with_extension("json.tmp");
        std::fs::write(&tmp, text)
            .and_then(|()| std::fs::rename(&tmp, &path))
            .map_err(|e| Error::io(format!("cannot write {}", path.display()), e))
    }
}

/// An exclusive hold on `DIR/cluster.lock`, released when dropped.
struct DirLock {
    _file: std::fs::File,
}

impl DirLock {
    fn open(dir: &Path) -> Result<std::fs::File> {
        let path = dir.join(LOCK_FILE);
        std::fs::OpenOptions::new()
            .create(true)
            .truncate(false)
            .write(true)
            .open(&path)
            .map_err(|e| Error::io(format!("cannot open {}", path.display()), e))
    }

    /// Takes the lock, waiting for whoever holds it for at most `timeout`.
    async fn acquire(dir: &Path, timeout: Duration) -> Result<DirLock> {
        let file = DirLock::open(dir)?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            match file.try_lock() {
                Ok(()) => return Ok(DirLock { _file: file }),
                Err(std::fs::TryLockError::WouldBlock) => {}
                Err(std::fs::TryLockError::Error(e)) => {
                    return Err(Error::io(
                        format!("cannot lock {}", dir.join(LOCK_FILE).display()),
                        e,
                    ));
                }
            }
            if tokio::time::Instant::now() >= deadline {
                return Err(Error::Refused(format!(
                    "{} stayed locked for {} (is a `trireme cluster add` on this directory still running?)",
                    dir.join(LOCK_FILE).display(),
                    humantime::format_duration(timeout)
                )));
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }

    /// Takes the lock if it is free now.
    fn try_acquire(dir: &Path) -> Option<DirLock> {
        let file = DirLock::open(dir).ok()?;
        file.try_lock().ok()?;
        Some(DirLock { _file: file })
    }
}

/// A cluster of `trireme server` child processes on this machine.
///
/// Dropping it SIGKILLs whatever nodes still run (the data survives: every write the nodes
/// acknowledged is durable); call [`LocalCluster::stop`] for a clean stop.
pub struct LocalCluster {
    opts: ClusterOptions,
    dir: PathBuf,
    binary: PathBuf,
    nodes: Vec<LocalNode>,
    /// One per node of `nodes`, in the same order.
    processes: Vec<ServerProcess>,
    /// Nodes another process (`cluster add`) started and recorded in `cluster.json`, taken
    /// over by a stop once their pids were checked.
    adopted: Vec<LocalNode>,
    /// Known once the nodes serve.
    shard_count: u32,
    manifest_written: bool,
}

impl LocalCluster {
    /// Spawns the nodes and waits until every node serves and every shard has a leader. On
    /// failure, stops what it started and says which nodes were missing, with their logs.
    pub async fn start(opts: ClusterOptions) -> Result<LocalCluster> {
        let timeout = opts.start_timeout;
        let mut cluster = LocalCluster::spawn(opts)?;
        match cluster.wait_ready(timeout).await {
            Ok(()) => {
                cluster.mark_running()?;
                Ok(cluster)
            }
            Err(e) => {
                // The start-up error matters more than how the stop went.
                let _ = cluster.stop().await;
                Err(e)
            }
        }
    }

    /// Checks the directory and the ports, then spawns every node (the bootstrapping ones,
    /// and those an earlier run's `cluster.json` lists as added) without waiting for them.
    /// Nothing is spawned when a check fails.
    pub fn spawn(opts: ClusterOptions) -> Result<LocalCluster> {
        let mut plan: Vec<(NodeAddrs, Option<String>)> =
            opts.plan()?.into_iter().map(|a| (a, None)).collect();
        for added in added_nodes(&opts.dir)? {
            let k = node_number(&added.name).unwrap_or(0);
            if k <= opts.nodes {
                return Err(Error::Refused(format!(
                    "{} lists {} as added to the cluster with `trireme cluster add`; start the cluster with the --nodes it was created with ({}), and the added nodes restart with it",
                    opts.dir.join(MANIFEST_FILE).display(),
                    added.name,
                    k.saturating_sub(1).min(opts.nodes)
                )));
            }
            let addrs = node_addrs(opts.base_port, k).ok_or_else(|| {
                Error::Refused(format!(
                    "--base-port {} leaves no ports for node {}",
                    opts.base_port, added.name
                ))
            })?;
            plan.push((addrs, added.join));
        }
        let addrs: Vec<NodeAddrs> = plan.iter().map(|(a, _)| a.clone()).collect();
        check_existing_nodes(&opts.dir, &addrs, opts.nodes)?;
        check_ports_free(&opts.dir, &addrs)?;
        std::fs::create_dir_all(&opts.dir)
            .map_err(|e| Error::io(format!("cannot create {}", opts.dir.display()), e))?;
        // Absolute, so cluster.json and the nodes' paths mean the same from any directory.
        let dir = std::fs::canonicalize(&opts.dir)
            .map_err(|e| Error::io(format!("cannot resolve {}", opts.dir.display()), e))?;
        let binary = match &opts.binary {
            Some(path) => path.clone(),
            None => std::env::current_exe()
                .map_err(|e| Error::io("cannot find the trireme executable", e))?,
        };
        let initial_cluster = plan
            .iter()
            .filter(|(_, join)| join.is_none())
            .map(|(n, _)| format!("{}={}", n.name, n.peer))
            .collect::<Vec<_>>()
            .join(",");

        let mut cluster = LocalCluster {
            opts,
            dir,
            binary,
            nodes: Vec::new(),
            processes: Vec::new(),
            adopted: Vec::new(),
            shard_count: 0,
            manifest_written: false,
        };
        for (addrs, join) in plan {
            let membership = match &join {
                Some(peer) => Membership::Join(peer.clone()),
                None => Membership::Bootstrap(initial_cluster.clone()),
            };
            // On an error, dropping `cluster` kills the nodes spawned so far.
            let (node, process) = cluster.spawn_node(addrs, membership)?;
            cluster.nodes.push(node);
            cluster.processes.push(process);
        }
        // A cluster.json left by an earlier run must not pass for this one before it serves,
        // nor lose the nodes added to it if this start fails.
        // Every node the old file listed as added is in the plan: nothing else is kept.
        cluster.write_manifest("starting", false)?;
        Ok(cluster)
    }

    fn spawn_node(
        &self,
        addrs: NodeAddrs,
        membership: Membership,
    ) -> Result<(LocalNode, ServerProcess)> {
        let data_dir = self.dir.join(&addrs.name);
        let log = self.dir.join(format!("{}.log", addrs.name));
        let mut command = ServerCommand::new(&self.binary, &addrs.name, &data_dir);
        command.http.clone_from(&addrs.http);
        command.resp.clone_from(&addrs.resp);
        command.peer.clone_from(&addrs.peer);
        let join = match &membership {
            Membership::Join(peer) => Some(peer.clone()),
            _ => None,
        };
        command.membership = membership;
        self.opts.flags.apply(&mut command);
        if self.opts.flags.secure {
            command.config = Some(crate::secure::prepare_node(&self.dir, &addrs.name)?);
        }
        let mut process =
            ServerProcess::new(command, Output::Append(log.clone())).in_own_process_group();
        let pid = process.spawn()?;
        let node = LocalNode {
            name: addrs.name,
            http: addrs.http,
            resp: addrs.resp,
            peer: addrs.peer,
            pid,
            data_dir,
            log,
            join,
        };
        Ok((node, process))
    }

    /// Waits until every node answers `/v1/health` with 200 and every shard has a leader (the
    /// caller then says so with [`LocalCluster::mark_running`]). Fails at once when a node
    /// exits, or at `timeout` naming the nodes and shards still missing; either way with the
    /// tail of the logs concerned. The nodes are left running: the caller decides how to stop
    /// them.
    pub async fn wait_ready(&mut self, timeout: Duration) -> Result<()> {
        let client = cluster_client(self.opts.flags.secure, &self.dir, Duration::from_secs(2))?;
        let deadline = tokio::time::Instant::now() + timeout;
        // What the last complete look saw, for the error at the deadline.
        let mut last = Probe::nothing_yet(&self.nodes);
        loop {
            if let Some(gone) = self.reap_exited().into_iter().next() {
                return Err(Error::NotReady(format!(
                    "node {} (pid {}) exited during start-up with {}{}",
                    gone.name,
                    gone.pid,
                    gone.status,
                    log_section(&gone.name, &gone.log)
                )));
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
            let http = node_url(self.opts.flags.secure, &node.http);
            looks.spawn(async move {
                let view = if crate::process::healthy(&client, &http).await {
                    shard_leaders(&client, &http).await
                } else {
                    None
                };
                (name, view)
            });
        }
        // A node counts as serving only once its answers are in.
        let mut probe = Probe::nothing_yet(&self.nodes);
        while let Some(look) = looks.join_next().await {
            let Ok((name, Some((count, led)))) = look else {
                continue;
            };
            probe.unhealthy.retain(|n| *n != name);
            // A node knows the leaders of the shards it holds; together they know them all.
            probe.shard_count = Some(count);
            probe.led.extend(led);
        }
        probe
    }

    fn not_ready_error(&self, timeout: Duration, probe: &Probe) -> Error {
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
        Error::NotReady(msg)
    }

    /// The nodes started here, in order `n1`, `n2`, ... (added nodes last).
    pub fn nodes(&self) -> &[LocalNode] {
        &self.nodes
    }

    /// The process of node `i` (as in [`LocalCluster::nodes`]), to kill, pause, resume, stop
    /// or restart it one at a time. A restart keeps the node's flags, ports and data.
    pub fn process_mut(&mut self, i: usize) -> Option<&mut ServerProcess> {
        self.processes.get_mut(i)
    }

    /// Records node `i`'s new pid after a restart through [`LocalCluster::process_mut`].
    pub fn refresh_pid(&mut self, i: usize) {
        if let (Some(node), Some(pid)) = (
            self.nodes.get_mut(i),
            self.processes.get(i).and_then(ServerProcess::pid),
        ) {
            node.pid = pid;
        }
    }

    /// The cluster's directory (absolute).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The number of shards, known once [`LocalCluster::wait_ready`] has succeeded.
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// How many node processes started here have not been reaped yet.
    pub fn running(&self) -> usize {
        self.processes.iter().filter(|p| p.is_running()).count()
    }

    /// Reaps the nodes that exited since the last call and says which.
    pub fn reap_exited(&mut self) -> Vec<ExitedNode> {
        let mut exited = Vec::new();
        for (node, process) in self.nodes.iter().zip(self.processes.iter_mut()) {
            let Some(status) = process.try_reap() else {
                continue;
            };
            exited.push(ExitedNode {
                name: node.name.clone(),
                pid: node.pid,
                status,
                log: node.log.clone(),
            });
        }
        exited
    }

    /// Adds node `n<k>` (the next number) to the running cluster: it starts with `--join`
    /// through a running member's peer address, on the next ports of the layout, and counts
    /// once it answers `/v1/health`. Fails, killing it and removing its new data directory,
    /// when it does not serve within `timeout`.
    pub async fn add_node(&mut self, timeout: Duration) -> Result<&LocalNode> {
        let _ = self.reap_exited();
        let join = self
            .nodes
            .iter()
            .zip(&self.processes)
            .find(|(_, p)| p.is_running())
            .map(|(n, _)| n.peer.clone())
            .ok_or_else(|| Error::Refused("no node of the cluster is running".into()))?;
        // Nodes another process added are listed in cluster.json only.
        let listed = Manifest::read(&self.dir)
            .ok()
            .flatten()
            .map(|m| m.nodes)
            .unwrap_or_default();
        let k = self
            .nodes
            .iter()
            .chain(&listed)
            .filter_map(|n| node_number(&n.name))
            .max()
            .unwrap_or(0)
            + 1;
        let addrs = next_node_addrs(&self.dir, self.opts.base_port, k)?;
        let (node, mut process) = self.spawn_node(addrs, Membership::Join(join))?;
        let secure = self.opts.flags.secure;
        let client = cluster_client(secure, &self.dir, Duration::from_secs(2))?;
        if let Err(e) = process
            .wait_healthy(&client, &node_url(secure, &node.http), timeout)
            .await
        {
            drop(process); // SIGKILLs it
            // Unlisted, its data directory would stop the next start on this directory.
            let _ = std::fs::remove_dir_all(&node.data_dir);
            return Err(e);
        }
        self.nodes.push(node);
        self.processes.push(process);
        if self.manifest_written {
            self.write_manifest("running", true)?;
        }
        Ok(&self.nodes[self.nodes.len() - 1])
    }

    /// Stops every running node: SIGTERM, then SIGKILL for any still running after the grace
    /// period; marks `cluster.json` stopped. Nodes `cluster add` started and recorded there
    /// are stopped too, each only once its `/proc/PID/cmdline` shows it is the server of its
    /// data directory. Fails, naming them, when a node had to be killed or exited with an
    /// error (nodes that died before the stop are not counted: whoever called
    /// [`LocalCluster::reap_exited`] has seen them). Safe to call again.
    pub async fn stop(&mut self) -> Result<()> {
        // Nodes that died earlier but were not reaped yet are not part of this stop's result.
        let _ = self.reap_exited();
        // Held until cluster.json says stopped: no `cluster add` slips a node in meanwhile.
        // One that is adding a node now finishes first, and its node is stopped with the rest.
        let lock = if self.manifest_written {
            DirLock::acquire(&self.dir, Duration::from_secs(600))
                .await
                .ok()
        } else {
            None
        };
        self.adopt_added();
        for process in &mut self.processes {
            // An error means it has exited already; the wait below reaps it.
            let _ = process.send_stop();
        }
        // Checked again: a pid from an earlier stop may belong to another process by now.
        self.adopted
            .retain(|node| runs_server_for(node.pid, &node.data_dir));
        for node in &self.adopted {
            let _ = signal_pid(node.pid, Signal::TERM);
        }
        let grace = self.opts.stop_grace;
        let deadline = tokio::time::Instant::now() + grace;
        let mut problems = Vec::new();
        for (node, process) in self.nodes.iter().zip(self.processes.iter_mut()) {
            let left = deadline.saturating_duration_since(tokio::time::Instant::now());
            match process.finish_stop(left).await {
                Ok(Some(outcome)) if outcome.killed => problems.push(format!(
                    "{} (pid {}) did not stop within {} and was killed",
                    node.name,
                    node.pid,
                    humantime::format_duration(grace)
                )),
                Ok(Some(outcome)) if !outcome.clean() => {
                    problems.push(format!("{} exited with {}", node.name, outcome.status));
                }
                Ok(_) => {}
                Err(e) => problems.push(e.to_string()),
            }
        }
        for node in &self.adopted {
            while process_alive(node.pid) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            if runs_server_for(node.pid, &node.data_dir) {
                let _ = signal_pid(node.pid, Signal::KILL);
                problems.push(format!(
                    "{} (pid {}) did not stop within {} and was killed",
                    node.name,
                    node.pid,
                    humantime::format_duration(grace)
                ));
            }
        }
        if self.manifest_written {
            self.write_manifest("stopped", true)?;
        }
        drop(lock);
        if !problems.is_empty() {
            return Err(Error::Unclean(format!(
                "not every node stopped cleanly: {}; see the logs in {}",
                problems.join("; "),
                self.dir.display()
            )));
        }
        Ok(())
    }

    /// SIGKILLs and reaps every running node at once, added ones included (by their checked
    /// pids).
    pub fn kill(&mut self) {
        self.adopt_added();
        for process in &mut self.processes {
            let _ = process.kill();
        }
        for node in &self.adopted {
            if runs_server_for(node.pid, &node.data_dir) {
                let _ = signal_pid(node.pid, Signal::KILL);
            }
        }
        if self.manifest_written {
            let _lock = DirLock::try_acquire(&self.dir);
            let _ = self.write_manifest("stopped", true);
        }
    }

    /// Takes over the nodes `cluster.json` lists that were not started here and still run
    /// as the servers of their data directories.
    fn adopt_added(&mut self) {
        if !self.manifest_written {
            return;
        }
        let Ok(Some(manifest)) = Manifest::read(&self.dir) else {
            return;
        };
        for node in manifest.nodes {
            let known = self
                .nodes
                .iter()
                .chain(&self.adopted)
                .any(|n| n.name == node.name);
            if !known && runs_server_for(node.pid, &node.data_dir) {
                self.adopted.push(node);
            }
        }
    }

    /// Writes `cluster.json` with state `running`. Scripts poll for it, so it comes after
    /// everything the caller prints about the running cluster.
    pub fn mark_running(&mut self) -> Result<()> {
        self.write_manifest("running", true)
    }

    /// Writes `cluster.json`: the nodes started here, then (with `keep_others`) any other node
    /// the file lists, added by `cluster add` while this cluster ran, so that no run forgets
    /// a node that joined.
    fn write_manifest(&mut self, state: &str, keep_others: bool) -> Result<()> {
        let mut nodes = self.nodes.clone();
        let others: Vec<LocalNode> = if keep_others {
            Manifest::read(&self.dir)
                .ok()
                .flatten()
                .map(|m| m.nodes)
                .unwrap_or_default()
        } else {
            Vec::new()
        };
        for node in others {
            if !nodes.iter().any(|n| n.name == node.name) {
                nodes.push(node);
            }
        }
        let manifest = Manifest {
            state: state.to_string(),
            dir: self.dir.clone(),
            base_port: self.opts.base_port,
            shard_count: self.shard_count,
            supervisor_pid: Some(std::process::id()),
            flags: self.opts.flags.clone(),
            nodes,
        };
        manifest.write(&self.dir)?;
        self.manifest_written = true;
        Ok(())
    }
}

impl Drop for LocalCluster {
    fn drop(&mut self) {
        self.kill();
    }
}

/// How to add a node to a running cluster from another process ([`add_to_running`]).
#[derive(Debug, Clone)]
pub struct AddOptions {
    /// How long to wait for the new node to serve.
    pub timeout: Duration,
    /// The `trireme` binary; `None` runs the current executable.
    pub binary: Option<PathBuf>,
}

/// `trireme cluster add`: starts node `n<k>` (the next number) in `dir`, whose cluster a
/// `cluster up` started and still supervises, joining it through a running member; waits
/// until the node answers `/v1/health`, records it (with its pid) in `cluster.json`, and
/// leaves it running in its own process group for that `cluster up` to stop. Fails with a
/// message that says what to do when there is no running cluster in `dir` or a port of the
/// new node is in use; a node that does not come up is killed and its new data directory
/// removed.
pub async fn add_to_running(dir: &Path, opts: AddOptions) -> Result<LocalNode> {
    let no_cluster = |why: String| {
        Error::Refused(format!(
            "no running cluster in {}: {why}; start one with `trireme cluster up --dir {}`",
            dir.display(),
            dir.display()
        ))
    };
    let dir = std::fs::canonicalize(dir).map_err(|e| no_cluster(e.to_string()))?;
    let Some(first_look) = Manifest::read(&dir)? else {
        return Err(no_cluster("it has no cluster.json".into()));
    };
    if first_look.state != "running" {
        return Err(no_cluster(format!(
            "cluster.json says {}",
            first_look.state
        )));
    }
    // Another `cluster add` may hold it while its node starts.
    let _lock = DirLock::acquire(&dir, opts.timeout + Duration::from_secs(10)).await?;
    let Some(mut manifest) = Manifest::read(&dir)? else {
        return Err(no_cluster("it has no cluster.json".into()));
    };
    if manifest.state != "running" {
        return Err(no_cluster(format!("cluster.json says {}", manifest.state)));
    }
    match manifest.supervisor_pid {
        Some(pid) if process_alive(pid) => {}
        Some(pid) => {
            return Err(no_cluster(format!(
                "the `trireme cluster up` that started it (pid {pid}) has exited"
            )));
        }
        None => {
            return Err(no_cluster(
                "cluster.json names no supervising process".into(),
            ));
        }
    }
    let member = manifest
        .nodes
        .iter()
        .find(|n| runs_server_for(n.pid, &n.data_dir))
        .ok_or_else(|| no_cluster("none of the nodes cluster.json lists is running".into()))?;
    let join = member.peer.clone();
    let k = manifest
        .nodes
        .iter()
        .filter_map(|n| node_number(&n.name))
        .max()
        .unwrap_or(0)
        + 1;
    let addrs = next_node_addrs(&dir, manifest.base_port, k)?;
    let data_dir = dir.join(&addrs.name);
    let log = dir.join(format!("{}.log", addrs.name));
    let binary = match opts.binary {
        Some(path) => path,
        None => std::env::current_exe()
            .map_err(|e| Error::io("cannot find the trireme executable", e))?,
    };
    let mut command = ServerCommand::new(binary, &addrs.name, &data_dir);
    command.http.clone_from(&addrs.http);
    command.resp.clone_from(&addrs.resp);
    command.peer.clone_from(&addrs.peer);
    command.membership = Membership::Join(join.clone());
    manifest.flags.apply(&mut command);
    let secure = manifest.flags.secure;
    if secure {
        command.config = Some(crate::secure::prepare_node(&dir, &addrs.name)?);
    }
    let mut process =
        ServerProcess::new(command, Output::Append(log.clone())).in_own_process_group();
    let pid = process.spawn()?;
    let client = cluster_client(secure, &dir, Duration::from_secs(2))?;
    let started = process
        .wait_healthy(&client, &node_url(secure, &addrs.http), opts.timeout)
        .await
        // A `cluster up` killed meanwhile (its second Ctrl-C does not wait for this lock)
        // would leave the node without a supervisor.
        .and_then(|()| match Manifest::read(&dir) {
            Ok(Some(now))
                if now.state == "running" && now.supervisor_pid.is_some_and(process_alive) =>
            {
                Ok(())
            }
            _ => Err(Error::NotReady(format!(
                "the `trireme cluster up` of {} stopped while node {} started",
                dir.display(),
                addrs.name
            ))),
        });
    if let Err(e) = started {
        let _ = process.kill();
        // Nothing else knows of this node: a directory left behind would stop the next
        // `cluster up` on this directory.
        let removed = std::fs::remove_dir_all(&data_dir).map_or_else(
            |_| String::new(),
            |()| format!(" (its data directory {} was removed)", data_dir.display()),
        );
        return Err(Error::NotReady(format!(
            "{e}\nnode {} was stopped{removed}",
            addrs.name
        )));
    }
    let node = LocalNode {
        name: addrs.name,
        http: addrs.http,
        resp: addrs.resp,
        peer: addrs.peer,
        pid,
        data_dir,
        log,
        join: Some(join),
    };
    manifest.nodes.push(node.clone());
    if let Err(e) = manifest.write(&dir) {
        let _ = process.kill();
        return Err(e);
    }
    // From here on the node belongs to the `cluster up` that supervises the directory.
    let _ = process.detach();
    Ok(node)
}

/// Node `k`'s addresses for a node added now: they must fit, be free, and `n<k>` must be new.
fn next_node_addrs(dir: &Path, base_port: u16, k: u32) -> Result<NodeAddrs> {
    let addrs = node_addrs(base_port, k).ok_or_else(|| {
        Error::Refused(format!(
            "node n{k} would need ports above {} (base port {base_port})",
            u16::MAX
        ))
    })?;
    if dir.join(&addrs.name).exists() {
        return Err(Error::Refused(format!(
            "{} already exists but cluster.json does not list {}: move it away to add a node",
            dir.join(&addrs.name).display(),
            addrs.name
        )));
    }
    check_ports_free(dir, std::slice::from_ref(&addrs))?;
    Ok(addrs)
}

/// The nodes an earlier run's `cluster.json` lists as added with `cluster add`.
fn added_nodes(dir: &Path) -> Result<Vec<LocalNode>> {
    Ok(Manifest::read(dir)?
        .map(|m| m.nodes.into_iter().filter(|n| n.join.is_some()).collect())
        .unwrap_or_default())
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

/// A node's `/v1/cluster/shards`: the shard count and the shards it knows a leader of.
async fn shard_leaders(client: &reqwest::Client, http: &str) -> Option<(u32, Vec<u32>)> {
    let url = format!("{}/v1/cluster/shards", crate::process::base_url(http));
    let response = client.get(url).send().await.ok()?;
    if response.status() != reqwest::StatusCode::OK {
        return None;
    }
    let view: trireme_types::admin::ShardsDoc = response.json().await.ok()?;
    let led = view
        .shards
        .iter()
        .filter(|s| s.leader.is_some())
        .map(|s| s.shard.0)
        .collect();
    Some((view.shard_count, led))
}

/// Refuses a directory that holds another set of nodes, or nodes created on other ports:
/// each node remembers its peers' addresses from its first start, so a restart must use the
/// same node count and base port.
fn check_existing_nodes(dir: &Path, plan: &[NodeAddrs], bootstrapping: u32) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Ok(()); // a new directory
    };
    let found: BTreeSet<u32> = entries
        .filter_map(Result::ok)
        .filter(|e| e.path().is_dir())
        .filter_map(|e| node_number(e.file_name().to_str()?))
        .collect();
    if found.is_empty() {
        return Ok(());
    }
    let wanted: BTreeSet<u32> = plan.iter().filter_map(|n| node_number(&n.name)).collect();
    if found != wanted {
        let added = wanted.len().saturating_sub(bootstrapping as usize);
        let names: Vec<String> = found.iter().map(|i| format!("n{i}")).collect();
        return Err(Error::Refused(format!(
            "{} already holds the data of nodes {}: restart them with --nodes {}, or use another --dir (a cluster's first nodes are fixed when it is created; nodes added with `trireme cluster add` are listed in cluster.json)",
            dir.display(),
            names.join(", "),
            found.len().saturating_sub(added)
        )));
    }
    for node in plan {
        let Some(last) = read_endpoints(&dir.join(&node.name)) else {
            continue;
        };
        if last.peer != node.peer {
            let k = node_number(&node.name).unwrap_or(1);
            let hint = last
                .peer
                .parse::<SocketAddr>()
                .ok()
                .and_then(|a| u32::from(a.port()).checked_sub(2 + PORT_STRIDE * (k - 1)))
                .map(|p| format!(" (pass --base-port {p})"))
                .unwrap_or_default();
            return Err(Error::Refused(format!(
                "node {} in {} was created with peer address {}, and this run would give it {}: the nodes remember each other's addresses, so use the same ports as before{hint}",
                node.name,
                dir.display(),
                last.peer,
                node.peer
            )));
        }
    }
    Ok(())
}

/// Fails naming the first port that cannot be bound, so the user learns which one before any
/// node starts (a server would only say so in its log). Binds the way the servers will.
fn check_ports_free(dir: &Path, plan: &[NodeAddrs]) -> Result<()> {
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
                return Err(Error::Refused(msg));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_follow_the_layout_and_must_fit() {
        let mut opts = ClusterOptions::new(3, "x");
        let plan = opts.plan().unwrap();
        let names: Vec<&str> = plan.iter().map(|n| n.name.as_str()).collect();
        assert_eq!(names, ["n1", "n2", "n3"]);
        assert_eq!(plan[0].http, "127.0.0.1:7700");
        assert_eq!(plan[0].resp, "127.0.0.1:7701");
        assert_eq!(plan[0].peer, "127.0.0.1:7702");
        assert_eq!(plan[2].http, "127.0.0.1:7720");
        assert_eq!(plan[2].peer, "127.0.0.1:7722");
        // The node `cluster add` would start next continues the layout.
        assert_eq!(node_addrs(7700, 4).unwrap().http, "127.0.0.1:7730");

        opts.base_port = 65_520;
        let err = opts.plan().unwrap_err().to_string();
        assert!(err.contains("--base-port 65520"), "{err}");
        opts.nodes = 0;
        assert!(opts.plan().is_err());
        assert!(node_addrs(65_534, 1).is_none());
        assert!(node_addrs(0, 1).is_none());
    }

    #[test]
    fn a_directory_of_other_nodes_or_ports_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let opts = ClusterOptions::new(3, dir.path());
        let plan = opts.plan().unwrap();
        check_existing_nodes(dir.path(), &plan, 3).unwrap();
        check_existing_nodes(&dir.path().join("missing"), &plan, 3).unwrap();

        std::fs::create_dir(dir.path().join("n1")).unwrap();
        let err = check_existing_nodes(dir.path(), &plan, 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--nodes 1"), "{err}");

        std::fs::create_dir(dir.path().join("n2")).unwrap();
        std::fs::create_dir(dir.path().join("n3")).unwrap();
        check_existing_nodes(dir.path(), &plan, 3).unwrap();

        // An added node's directory is expected once cluster.json lists it.
        std::fs::create_dir(dir.path().join("n4")).unwrap();
        let err = check_existing_nodes(dir.path(), &plan, 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--nodes 4"), "{err}");
        let mut with_added = plan.clone();
        with_added.push(node_addrs(7700, 4).unwrap());
        check_existing_nodes(dir.path(), &with_added, 3).unwrap();

        std::fs::write(
            dir.path().join("n2").join("endpoints.json"),
            r#"{"node":"n2","http":"127.0.0.1:8010","resp":"127.0.0.1:8011","peer":"127.0.0.1:8012","pid":1}"#,
        )
        .unwrap();
        let err = check_existing_nodes(dir.path(), &with_added, 3)
            .unwrap_err()
            .to_string();
        assert!(err.contains("--base-port 8000"), "{err}");
    }

    #[test]
    fn a_port_in_use_is_named() {
        let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = taken.local_addr().unwrap().port();
        let node = NodeAddrs {
            name: "n2".into(),
            http: "127.0.0.1:0".into(),
            resp: format!("127.0.0.1:{port}"),
            peer: "127.0.0.1:0".into(),
        };
        let err = check_ports_free(Path::new("/nowhere"), &[node])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains(&format!("port {port} (RESP of node n2)")),
            "{err}"
        );
    }

    #[test]
    fn the_manifest_keeps_added_nodes_and_flags() {
        let dir = tempfile::tempdir().unwrap();
        assert!(Manifest::read(dir.path()).unwrap().is_none());
        let node = |k: u32, join: Option<&str>| LocalNode {
            name: format!("n{k}"),
            http: format!("127.0.0.1:{}", 7690 + 10 * k),
            resp: String::new(),
            peer: String::new(),
            pid: 1,
            data_dir: dir.path().join(format!("n{k}")),
            log: dir.path().join(format!("n{k}.log")),
            join: join.map(str::to_string),
        };
        let manifest = Manifest {
            state: "running".into(),
            dir: dir.path().to_path_buf(),
            base_port: 7700,
            shard_count: 4,
            supervisor_pid: Some(7),
            flags: ServerFlags {
                cluster_name: Some("c".into()),
                ..ServerFlags::default()
            },
            nodes: vec![node(1, None), node(2, Some("127.0.0.1:7702"))],
        };
        manifest.write(dir.path()).unwrap();
        let read = Manifest::read(dir.path()).unwrap().unwrap();
        assert_eq!(read.flags, manifest.flags);
        assert_eq!(read.nodes, manifest.nodes);
        let added = added_nodes(dir.path()).unwrap();
        assert_eq!(added.len(), 1);
        assert_eq!(added[0].name, "n2");
        // The bootstrapping node has no `join` key at all.
        let text = std::fs::read_to_string(dir.path().join(MANIFEST_FILE)).unwrap();
        assert_eq!(text.matches("\"join\"").count(), 1, "{text}");
    }

    #[tokio::test]
    async fn adding_to_a_directory_without_a_running_cluster_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let opts = AddOptions {
            timeout: Duration::from_secs(5),
            binary: Some("/nonexistent/trireme".into()),
        };
        let err = add_to_running(dir.path(), opts.clone())
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("no running cluster"), "{err}");
        assert!(err.contains("no cluster.json"), "{err}");

        let manifest = Manifest {
            state: "running".into(),
            dir: dir.path().to_path_buf(),
            base_port: 7700,
            shard_count: 1,
            // No process has this pid: the supervisor is gone.
            supervisor_pid: Some(u32::MAX / 2),
            flags: ServerFlags::default(),
            nodes: Vec::new(),
        };
        manifest.write(dir.path()).unwrap();
        let err = add_to_running(dir.path(), opts)
            .await
            .unwrap_err()
            .to_string();
        assert!(err.contains("has exited"), "{err}");
        assert!(!dir.path().join("n1").exists());
    }
}
