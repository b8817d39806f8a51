//! A cluster of real `trireme server` processes on loopback, for multi-node tests.
//!
//! [`TestCluster`] starts its nodes concurrently (a node is ready only once every shard it
//! holds has a leader, so they must come up together) on ports chosen before the first one
//! starts, with short Raft timing from a config file. It kills nodes with SIGKILL by PID,
//! restarts them on the same ports and data directories, and reads `/v1/cluster/shards` to
//! find leaders. [`TestCluster::add_node`] starts one more node that enters the running
//! cluster with `--join`. Every wait polls under a deadline; the processes themselves are
//! handled by `trireme_local` through [`TestNode`].
//!
//! Multi-node tests are CPU-heavy and their timing assertions assume the machine is not
//! shared with another cluster, so only one `TestCluster` exists at a time in the test
//! binary: [`TestCluster::start`] waits for the previous one to be dropped. A chaos run
//! takes the same turn ([`cluster_turn_blocking`]).

use super::{DEADLINE, KvEntry, StartOptions, TestNode, http_client, wait_until};
use std::collections::BTreeMap;
use std::net::{SocketAddr, TcpListener};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};
use trireme_types::admin::{ShardDoc, ShardsDoc};

/// Serializes clusters within a test binary (see the module documentation).
static ONE_CLUSTER_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// Waits for the turn a [`TestCluster`] takes, from a test that is not async (a chaos run,
/// which starts its own cluster); the turn is held until the guard is dropped.
pub fn cluster_turn_blocking() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER_AT_A_TIME.blocking_lock()
}

/// Waits for the turn a [`TestCluster`] takes, for a test that starts a cluster of its own
/// (`trireme cluster up`); the turn is held until the guard is dropped.
pub async fn cluster_turn() -> tokio::sync::MutexGuard<'static, ()> {
    ONE_CLUSTER_AT_A_TIME.lock().await
}

/// Raft timing of a test cluster; written to the nodes' config as `[raft]`.
#[derive(Clone, Debug)]
pub struct RaftTiming {
    pub heartbeat: Duration,
    pub election_min: Duration,
    pub election_max: Duration,
    pub request_timeout: Duration,
    pub snapshot_every: Option<u64>,
    pub keep_after_snapshot: Option<u64>,
    pub snapshot_chunk_bytes: Option<u64>,
}

impl Default for RaftTiming {
    /// Heartbeat 50 ms, elections 300–600 ms, requests time out after 3 s.
    fn default() -> Self {
        RaftTiming {
            heartbeat: Duration::from_millis(50),
            election_min: Duration::from_millis(300),
            election_max: Duration::from_millis(600),
            request_timeout: Duration::from_secs(3),
            snapshot_every: None,
            keep_after_snapshot: None,
            snapshot_chunk_bytes: None,
        }
    }
}

impl RaftTiming {
    /// The `[raft]` section of the config file.
    pub fn toml(&self) -> String {
        let mut out = format!(
            "[raft]\nheartbeat_ms = {}\nelection_timeout_min_ms = {}\nelection_timeout_max_ms = {}\nrequest_timeout_ms = {}\n",
            self.heartbeat.as_millis(),
            self.election_min.as_millis(),
            self.election_max.as_millis(),
            self.request_timeout.as_millis(),
        );
        if let Some(n) = self.snapshot_every {
            out.push_str(&format!("snapshot_every = {n}\n"));
        }
        if let Some(n) = self.keep_after_snapshot {
            out.push_str(&format!("keep_after_snapshot = {n}\n"));
        }
        if let Some(n) = self.snapshot_chunk_bytes {
            out.push_str(&format!("snapshot_chunk_bytes = {n}\n"));
        }
        out
    }
}

/// How to start a cluster.
#[derive(Clone, Debug)]
pub struct ClusterOptions {
    pub nodes: usize,
    pub shards: u32,
    pub timing: RaftTiming,
    /// `--log` of every node.
    pub log: String,
    /// `balance_leaders` in the nodes' config: off where a test needs leaders to stay put.
    pub balance_leaders: bool,
    /// Lines of the `[cluster]` table of the nodes' config (automatic splits), if any.
    pub cluster: String,
    /// Lines of the `[limits]` table of the nodes' config, if any.
    pub limits: String,
    /// Lines of the `[acl]` table of the nodes' config, if any.
    pub acl: String,
    /// More tables for the nodes' config (`[peer_tls]` ...), appended as they are.
    pub extra_toml: String,
    /// Each node's `--data-dir`, by node index, when a test chooses them; empty: each in its
    /// node's temp dir.
    pub data_dirs: Vec<std::path::PathBuf>,
    /// Environment variables of each node's process, by node index (none past the end).
    pub node_env: Vec<Vec<(String, String)>>,
    /// `replication_factor` in the nodes' config (the server's default, 3, when `None`).
    pub replication_factor: Option<u32>,
    /// More command-line arguments of each node, by node index (`--region r1` ...).
    pub node_args: Vec<Vec<String>>,
}

impl Default for ClusterOptions {
    fn default() -> Self {
        ClusterOptions {
            nodes: 3,
            shards: 3,
            timing: RaftTiming::default(),
            // Vote and pre-vote RPCs (openraft logs them at info where they arrive) show what
            // an election did when a test fails.
            log: "info,openraft=error,openraft::raft::api::protocol=info".into(),
            balance_leaders: true,
            cluster: String::new(),
            limits: String::new(),
            acl: String::new(),
            extra_toml: String::new(),
            data_dirs: Vec::new(),
            node_env: Vec::new(),
            replication_factor: None,
            node_args: Vec::new(),
        }
    }
}

impl ClusterOptions {
    /// The nodes' config file.
    pub fn config_toml(&self) -> String {
        // Top-level keys go before the `[raft]` table.
        let factor = self
            .replication_factor
            .map_or_else(String::new, |n| format!("replication_factor = {n}\n"));
        let mut toml = format!(
            "balance_leaders = {}\n{factor}{}",
            self.balance_leaders,
            self.timing.toml()
        );
        if !self.cluster.is_empty() {
            toml.push_str(&format!("[cluster]\n{}\n", self.cluster));
        }
        if !self.limits.is_empty() {
            toml.push_str(&format!("[limits]\n{}\n", self.limits));
        }
        if !self.acl.is_empty() {
            toml.push_str(&format!("[acl]\n{}\n", self.acl));
        }
        toml.push_str(&self.extra_toml);
        toml
    }

    #[must_use]
    pub fn shards(mut self, n: u32) -> Self {
        self.shards = n;
        self
    }
}

/// One shard as one node reports it in `/v1/cluster/shards`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ShardView {
    pub shard: u32,
    pub slots: (u16, u16),
    /// The leader's name, if this node knows one.
    pub leader: Option<String>,
    pub replicas: Vec<String>,
    /// This node's role (`Leader`, `Follower`, ...), `None` when it holds no replica.
    pub role: Option<String>,
    pub term: u64,
    pub applied: u64,
    pub committed: u64,
}

impl ShardView {
    /// The names and numbers of the server's own shard document that the tests look at.
    fn from_doc(doc: ShardDoc) -> ShardView {
        ShardView {
            shard: doc.shard.0,
            slots: (doc.slots[0], doc.slots[1]),
            leader: doc.leader.map(|l| l.name),
            replicas: doc.replicas.into_iter().map(|r| r.name).collect(),
            role: doc.local_role,
            term: doc.term,
            applied: doc.applied_index,
            committed: doc.committed_index,
        }
    }

    pub fn is_leader(&self) -> bool {
        self.role.as_deref() == Some("Leader")
    }
}

/// A shard's leader as the cluster sees it: a running node that reports itself leader, and
/// whom every running node names as leader.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Leadership {
    pub node: usize,
    pub term: u64,
}

/// Three (or `nodes`) real server processes forming one cluster.
pub struct TestCluster {
    /// Node `i` is named `n{i+1}`.
    pub nodes: Vec<TestNode>,
    pub opts: ClusterOptions,
    /// Inclusive slot range of each shard, by shard index.
    slot_ranges: Vec<(u16, u16)>,
    pub http: reqwest::Client,
    /// Dropped last: the next cluster starts only once these processes are gone.
    _turn: tokio::sync::MutexGuard<'static, ()>,
}

/// Polls `probe` every `every` until it returns `Ok`, or `timeout` passes; then returns the
/// last result (so a failure can say what it saw last).
pub async fn poll_until<T, E, F, Fut>(
    timeout: Duration,
    every: Duration,
    mut probe: F,
) -> Result<T, E>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, E>>,
{
    let deadline = std::time::Instant::now() + timeout;
    loop {
        let result = probe().await;
        if result.is_ok() || std::time::Instant::now() >= deadline {
            return result;
        }
        tokio::time::sleep(every).await;
    }
}

/// `n` ports that were free a moment ago, for servers started on fixed ports (a cluster
/// needs each node's addresses before any node starts).
pub fn free_ports(n: usize) -> Vec<u16> {
    let n = u16::try_from(n).expect("a few ports");
    let base = free_port_block(n);
    (base..base + n).collect()
}

/// The first of `len` consecutive ports that were free a moment ago on 127.0.0.1.
///
/// Blocks come from below the kernel's ephemeral range: a port found free inside it can be
/// handed to some test's outgoing connection before the server binds it (t70 failed that way
/// in CI). A cursor shared by the binary's tests walks the range port by port (blocks of
/// different lengths never overlap while it goes round) from an offset drawn from the
/// process id, so concurrent tests (and overlapping binaries) start apart.
pub fn free_port_block(len: u16) -> u16 {
    use std::sync::atomic::{AtomicU32, Ordering};
    const FIRST: u16 = 20_000;
    static NEXT_PORT: AtomicU32 = AtomicU32::new(u32::MAX);
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|range| range.split_whitespace().next()?.parse::<u16>().ok())
        .unwrap_or(32_768);
    let len = len.max(1);
    let span = u32::from(ephemeral_low.saturating_sub(FIRST));
    assert!(
        span >= u32::from(len),
        "no room for {len} ports below the ephemeral range ({ephemeral_low})"
    );
    let _ = NEXT_PORT.compare_exchange(
        u32::MAX,
        std::process::id() % span,
        Ordering::Relaxed,
        Ordering::Relaxed,
    );
    for _ in 0..span / u32::from(len) {
        let mut offset = NEXT_PORT.fetch_add(u32::from(len), Ordering::Relaxed) % span;
        if offset + u32::from(len) > span {
            // The block would pass the range's end: start over at its beginning.
            offset = 0;
        }
        let base = FIRST + u16::try_from(offset).expect("below the ephemeral range");
        if (base..base + len).all(|port| TcpListener::bind(("127.0.0.1", port)).is_ok()) {
            return base;
        }
    }
    panic!("found no {len} consecutive free ports on 127.0.0.1 below {ephemeral_low}");
}

/// The slot of a key (CRC16 with `{hash tags}`, checked against Redis in trireme-types).
pub use trireme_types::key_slot;

/// Runs `f` on every node concurrently (each moved into its own task) and puts them back in
/// order. A panic in one task is re-raised here once every task has finished.
async fn each_concurrently<F, Fut>(nodes: Vec<TestNode>, f: F) -> Vec<TestNode>
where
    F: Fn(TestNode) -> Fut,
    Fut: std::future::Future<Output = TestNode> + Send + 'static,
{
    let handles: Vec<_> = nodes.into_iter().map(|n| tokio::spawn(f(n))).collect();
    let mut out = Vec::new();
    let mut panic = None;
    for h in handles {
        match h.await {
            Ok(node) => out.push(node),
            Err(e) if e.is_panic() => panic = Some(e.into_panic()),
            Err(e) => panic!("node task failed: {e}"),
        }
    }
    if let Some(p) = panic {
        std::panic::resume_unwind(p);
    }
    out
}

impl TestCluster {
    /// Starts `opts.nodes` nodes concurrently and waits until each is ready and healthy.
    pub async fn start(opts: ClusterOptions) -> TestCluster {
        let turn = ONE_CLUSTER_AT_A_TIME.lock().await;
        let ports = free_ports(opts.nodes * 3);
        let names: Vec<String> = (1..=opts.nodes).map(|i| format!("n{i}")).collect();
        let peer = |i: usize| format!("127.0.0.1:{}", ports[3 * i + 2]);
        let initial: Vec<String> = names
            .iter()
            .enumerate()
            .map(|(i, n)| format!("{n}={}", peer(i)))
            .collect();
        let initial = initial.join(",");
        let config = opts.config_toml();
        let starts: Vec<StartOptions> = names
            .iter()
            .enumerate()
            .map(|(i, name)| StartOptions {
                node_id: name.clone(),
                shards: Some(opts.shards),
                config_toml: Some(config.clone()),
                log: opts.log.clone(),
                http_addr: Some(format!("127.0.0.1:{}", ports[3 * i])),
                resp_addr: Some(format!("127.0.0.1:{}", ports[3 * i + 1])),
                peer_addr: Some(peer(i)),
                initial_cluster: Some(initial.clone()),
                data_dir: opts.data_dirs.get(i).cloned(),
                env: opts.node_env.get(i).cloned().unwrap_or_default(),
                extra_args: opts.node_args.get(i).cloned().unwrap_or_default(),
                ..StartOptions::default()
            })
            .collect();
        let handles: Vec<_> = starts
            .into_iter()
            .map(|o| tokio::spawn(TestNode::start(o)))
            .collect();
        let mut nodes = Vec::new();
        for h in handles {
            match h.await {
                Ok(node) => nodes.push(node),
                Err(e) if e.is_panic() => std::panic::resume_unwind(e.into_panic()),
                Err(e) => panic!("start task failed: {e}"),
            }
        }
        let mut cluster = TestCluster {
            nodes,
            opts,
            slot_ranges: Vec::new(),
            http: http_client(),
            _turn: turn,
        };
        let views = cluster
            .view(0)
            .await
            .expect("/v1/cluster/shards of a ready node");
        assert_eq!(
            views.len(),
            cluster.opts.shards as usize,
            "shard count in /v1/cluster/shards"
        );
        cluster.slot_ranges = views.iter().map(|v| v.slots).collect();
        cluster
    }

    pub fn node(&self, i: usize) -> &TestNode {
        &self.nodes[i]
    }

    pub fn name(&self, i: usize) -> String {
        self.nodes[i].options().node_id.clone()
    }

    /// The index of the node called `name`.
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.nodes.iter().position(|n| n.options().node_id == name)
    }

    /// Indexes of the nodes whose process runs.
    pub fn running(&self) -> Vec<usize> {
        (0..self.nodes.len())
            .filter(|&i| self.nodes[i].is_running())
            .collect()
    }

    /// The configured largest election timeout.
    pub fn election_max(&self) -> Duration {
        self.opts.timing.election_max
    }

    pub fn shard_count(&self) -> u32 {
        self.opts.shards
    }

    /// The shard that owns `key`.
    pub fn shard_of(&self, key: &str) -> u32 {
        let slot = key_slot(key.as_bytes());
        let shard = self
            .slot_ranges
            .iter()
            .position(|&(lo, hi)| (lo..=hi).contains(&slot))
            .expect("every slot belongs to a shard");
        u32::try_from(shard).expect("shard index")
    }

    /// The first key `{prefix}{n}` (n = 0, 1, ...) owned by `shard`.
    pub fn key_in_shard(&self, shard: u32, prefix: &str) -> String {
        (0..100_000)
            .map(|n| format!("{prefix}{n}"))
            .find(|k| self.shard_of(k) == shard)
            .expect("a key in every shard")
    }

    /// One key per shard, `{prefix}{n}`, in shard order.
    pub fn key_per_shard(&self, prefix: &str) -> Vec<String> {
        (0..self.shard_count())
            .map(|s| self.key_in_shard(s, prefix))
            .collect()
    }

    /// `/v1/cluster/shards` of node `i`, or `None` when it does not answer.
    pub async fn view(&self, i: usize) -> Option<Vec<ShardView>> {
        if !self.nodes[i].is_running() {
            return None;
        }
        let url = format!("{}/v1/cluster/shards", self.nodes[i].http_url());
        let resp = self
            .http
            .get(url)
            .timeout(Duration::from_secs(2))
            .send()
            .await
            .ok()?;
        if resp.status() != 200 {
            return None;
        }
        let doc: ShardsDoc = resp.json().await.ok()?;
        Some(doc.shards.into_iter().map(ShardView::from_doc).collect())
    }

    /// Every running node's view, by node index.
    pub async fn views(&self) -> BTreeMap<usize, Option<Vec<ShardView>>> {
        let mut out = BTreeMap::new();
        for i in self.running() {
            out.insert(i, self.view(i).await);
        }
        out
    }

    /// Each shard's leader, when one running node reports itself leader and every running
    /// node names it; `None` for a shard without such a leader.
    /// Shards made by splits count once any node shows them.
    pub async fn leaderships(&self) -> Vec<Option<Leadership>> {
        let views = self.views().await;
        let shards = views
            .values()
            .flatten()
            .map(Vec::len)
            .max()
            .unwrap_or(0)
            .max(self.shard_count() as usize);
        (0..shards)
            .map(|s| {
                let mut leader: Option<Leadership> = None;
                for (&i, view) in &views {
                    let shard = view.as_ref()?.get(s)?;
                    if shard.is_leader() && leader.as_ref().is_none_or(|l| shard.term > l.term) {
                        leader = Some(Leadership {
                            node: i,
                            term: shard.term,
                        });
                    }
                }
                let leader = leader?;
                let name = self.name(leader.node);
                views
                    .values()
                    .all(|v| {
                        v.as_ref()
                            .and_then(|v| v.get(s))
                            .is_some_and(|v| v.leader.as_deref() == Some(&name))
                    })
                    .then_some(leader)
            })
            .collect()
    }

    /// The node leading `shard`, if the running nodes agree on one.
    pub async fn leader_of(&self, shard: u32) -> Option<usize> {
        self.leaderships().await[shard as usize]
            .as_ref()
            .map(|l| l.node)
    }

    /// Waits until every shard has a leader the running nodes agree on; returns them.
    pub async fn wait_all_led(&self, timeout: Duration) -> Option<Vec<Leadership>> {
        poll_until(timeout, Duration::from_millis(20), || async {
            let all: Option<Vec<Leadership>> = self.leaderships().await.into_iter().collect();
            all.ok_or(())
        })
        .await
        .ok()
    }

    /// Like [`TestCluster::wait_all_led`], but panics with the nodes' views and logs.
    pub async fn expect_all_led(&self, timeout: Duration) -> Vec<Leadership> {
        match self.wait_all_led(timeout).await {
            Some(l) => l,
            None => panic!(
                "not every shard has an agreed leader after {timeout:?}: {:?}\n{}",
                self.views().await,
                self.logs()
            ),
        }
    }

    /// How many shards each node leads (index → count, every node listed).
    pub fn lead_counts(&self, leaders: &[Leadership]) -> Vec<usize> {
        let mut counts = vec![0; self.nodes.len()];
        for l in leaders {
            counts[l.node] += 1;
        }
        counts
    }

    /// Starts one more node, `n<k>` (k = the node count + 1), that joins the running cluster
    /// with `--join` through a running member's peer address, on ports of its own and with
    /// the cluster's config; waits until it serves. Returns its index: it is killed and
    /// restarted like the others, and a restart keeps `--join`, which the server ignores on a
    /// data directory that has joined.
    pub async fn add_node(&mut self) -> usize {
        let via = self
            .running()
            .first()
            .map(|&i| peer_addr(&self.nodes[i]))
            .expect("a running node to join through");
        let ports = free_ports(3);
        let opts = StartOptions {
            node_id: format!("n{}", self.nodes.len() + 1),
            shards: Some(self.opts.shards),
            config_toml: Some(self.opts.config_toml()),
            log: self.opts.log.clone(),
            http_addr: Some(format!("127.0.0.1:{}", ports[0])),
            resp_addr: Some(format!("127.0.0.1:{}", ports[1])),
            peer_addr: Some(format!("127.0.0.1:{}", ports[2])),
            join: Some(via.to_string()),
            ..StartOptions::default()
        };
        self.nodes.push(TestNode::start(opts).await);
        self.nodes.len() - 1
    }

    /// SIGKILLs node `i` by PID and reaps it.
    pub async fn kill9(&mut self, i: usize) {
        self.nodes[i].kill9().await;
    }

    /// Restarts node `i` on its ports and data dir; waits until it is ready and healthy.
    pub async fn restart(&mut self, i: usize) {
        self.nodes[i].restart().await;
        assert_same_addresses(&self.nodes[i]);
    }

    /// SIGKILLs every running node.
    pub async fn kill9_all(&mut self) {
        for i in self.running() {
            self.nodes[i].kill9().await;
        }
    }

    /// Restarts every stopped node concurrently (each is ready only once its shards have
    /// leaders, which may need the others).
    pub async fn restart_stopped(&mut self) {
        let nodes = std::mem::take(&mut self.nodes);
        self.nodes = each_concurrently(nodes, |mut n| async move {
            if !n.is_running() {
                n.restart().await;
                assert_same_addresses(&n);
            }
            n
        })
        .await;
    }

    /// The last `lines` lines of every node's stderr, every run, for failure messages.
    pub fn logs_tail(&self, lines: usize) -> String {
        let mut out = String::new();
        for node in &self.nodes {
            let all = node.stderr_all();
            let all: Vec<&str> = all.lines().collect();
            let from = all.len().saturating_sub(lines);
            out.push_str(&format!(
                "===== {} (last {} lines of stderr) =====\n",
                node.options().node_id,
                all.len() - from
            ));
            for line in &all[from..] {
                out.push_str(line);
                out.push('\n');
            }
        }
        out
    }

    /// Every node's stderr tail (see [`TestCluster::logs_tail`]).
    pub fn logs(&self) -> String {
        self.logs_tail(60)
    }

    /// PUT through node `i` without panicking: `Ok(true/false)` for the answer, `Err` for a
    /// failed request or a status other than 200.
    pub async fn try_put(
        &self,
        i: usize,
        key: &str,
        query: &str,
        value: &str,
    ) -> Result<bool, String> {
        let url = format!("{}{query}", self.nodes[i].kv_url(key));
        try_put_url(&self.http, &url, value).await
    }

    /// PUT through node `i`, expecting 200 and `true`.
    pub async fn put(&self, i: usize, key: &str, value: &str) {
        match self.try_put(i, key, "", value).await {
            Ok(true) => {}
            other => panic!(
                "at {} UTC: PUT {key} through {} answered {other:?}\n{}",
                utc_now(),
                self.name(i),
                self.logs()
            ),
        }
    }

    /// DELETE through node `i`, expecting 200 and `true`.
    pub async fn delete(&self, i: usize, key: &str) {
        let url = self.nodes[i].kv_url(key);
        let answer = match self.http.delete(&url).send().await {
            Ok(resp) => (
                resp.status().as_u16(),
                resp.text().await.unwrap_or_default(),
            ),
            Err(e) => (0, e.to_string()),
        };
        assert_eq!(
            (answer.0, answer.1.trim()),
            (200, "true"),
            "DELETE {url}\n{}",
            self.logs()
        );
    }

    /// GET through node `i` with `query` (`?consistent`, `?stale`, or empty): the entry (or
    /// `None` on 404) and the response headers.
    pub async fn try_get(
        &self,
        i: usize,
        key: &str,
        query: &str,
    ) -> Result<(Option<KvEntry>, reqwest::header::HeaderMap), String> {
        let url = format!("{}{query}", self.nodes[i].kv_url(key));
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        let headers = resp.headers().clone();
        match resp.status().as_u16() {
            404 => Ok((None, headers)),
            200 => {
                let v: serde_json::Value = resp.json().await.map_err(|e| e.to_string())?;
                let entry = v
                    .as_array()
                    .and_then(|a| a.first())
                    .map(KvEntry::from_json)
                    .ok_or_else(|| format!("GET {url}: body {v}"))?;
                Ok((Some(entry), headers))
            }
            status => Err(format!(
                "GET {url}: status {status}: {}",
                resp.text().await.unwrap_or_default()
            )),
        }
    }

    /// GET through node `i`, panicking on an error answer.
    pub async fn get(&self, i: usize, key: &str, query: &str) -> Option<KvEntry> {
        match self.try_get(i, key, query).await {
            Ok((entry, _)) => entry,
            Err(e) => panic!("at {} UTC: {e}\n{}", utc_now(), self.logs()),
        }
    }

    /// Every entry under `prefix` through node `i` (`?recurse` plus `query`, e.g.
    /// `&consistent`), by key; `Err` for a failed request.
    pub async fn try_list(
        &self,
        i: usize,
        prefix: &str,
        query: &str,
    ) -> Result<BTreeMap<String, KvEntry>, String> {
        let url = format!("{}?recurse{query}", self.nodes[i].kv_url(prefix));
        let resp = self
            .http
            .get(&url)
            .send()
            .await
            .map_err(|e| format!("GET {url}: {e}"))?;
        match resp.status().as_u16() {
            404 => Ok(BTreeMap::new()),
            200 => {
                let v: serde_json::Value = resp.json().await.map_err(|e| e.to_string())?;
                Ok(v.as_array()
                    .ok_or_else(|| format!("GET {url}: body {v}"))?
                    .iter()
                    .map(KvEntry::from_json)
                    .map(|e| (e.key.clone(), e))
                    .collect())
            }
            status => Err(format!(
                "GET {url}: status {status}: {}",
                resp.text().await.unwrap_or_default()
            )),
        }
    }

    /// Writes `(key, value)` pairs through the running nodes in turn, `writers` requests at a
    /// time; panics on any failed write (use it when no node is being disturbed).
    pub async fn put_all(&self, pairs: &[(String, String)], writers: usize) {
        let running = self.running();
        let urls: Vec<String> = running.iter().map(|&i| self.nodes[i].http_url()).collect();
        let mut tasks = Vec::new();
        for w in 0..writers {
            let mine: Vec<(String, String)> =
                pairs.iter().skip(w).step_by(writers).cloned().collect();
            let urls = urls.clone();
            let client = self.http.clone();
            tasks.push(tokio::spawn(async move {
                for (n, (key, value)) in mine.iter().enumerate() {
                    let base = &urls[(w + n) % urls.len()];
                    let url = format!("{base}/v1/kv/{key}");
                    let answer = try_put_url(&client, &url, value).await;
                    assert_eq!(answer, Ok(true), "PUT {url} at {} UTC", utc_now());
                }
            }));
        }
        let mut failure = None;
        for t in tasks {
            if let Err(e) = t.await {
                failure = Some(e);
            }
        }
        if let Some(e) = failure {
            panic!("a writer failed: {e}\n{}", self.logs());
        }
    }
}

/// The time of day in UTC (`HH:MM:SS.mmm`), to line a test's failure up with the nodes' logs.
pub fn utc_now() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let ms = since.as_millis() % 86_400_000;
    format!(
        "{:02}:{:02}:{:02}.{:03}",
        ms / 3_600_000,
        ms / 60_000 % 60,
        ms / 1000 % 60,
        ms % 1000
    )
}

/// A restarted node listens where it did before.
fn assert_same_addresses(node: &TestNode) {
    let e = node.endpoints();
    let o = node.options();
    for (what, now, configured) in [
        ("http", e.http, &o.http_addr),
        ("resp", e.resp, &o.resp_addr),
        ("peer", e.peer, &o.peer_addr),
    ] {
        assert_eq!(
            Some(now.to_string()),
            configured.clone(),
            "{} came back on another {what} address",
            o.node_id
        );
    }
}

/// PUT `value` to `url`: `Ok(true/false)` for a 200 answer, `Err` otherwise.
pub async fn try_put_url(client: &reqwest::Client, url: &str, value: &str) -> Result<bool, String> {
    let resp = client
        .put(url)
        .body(value.to_string())
        .send()
        .await
        .map_err(|e| format!("PUT {url}: {e}"))?;
    let status = resp.status();
    let text = resp.text().await.map_err(|e| format!("PUT {url}: {e}"))?;
    match (status.as_u16(), text.trim()) {
        (200, "true") => Ok(true),
        (200, "false") => Ok(false),
        (status, body) => Err(format!("PUT {url}: status {status}: {body}")),
    }
}

/// The peer address node `i` listens on (from its start options: fixed across restarts).
pub fn peer_addr(node: &TestNode) -> SocketAddr {
    node.options()
        .peer_addr
        .as_deref()
        .expect("a cluster node has a fixed peer address")
        .parse()
        .expect("peer address")
}

/// A generous bound for waits that only depend on the cluster making progress.
pub const CLUSTER_DEADLINE: Duration = DEADLINE;

// ---- steady writers: writes that go on while a test changes the cluster ----

/// What a steady writer saw.
#[derive(Debug, Default)]
pub struct Steady {
    /// Keys whose PUT was acknowledged (`true`); each key's value is the key itself.
    pub acked: Vec<String>,
    /// Failed or refused PUTs, with how long each took.
    pub failures: Vec<String>,
    /// Shared with the test while it runs: how many PUTs have been acknowledged so far.
    pub count: Arc<AtomicUsize>,
    /// The longest any PUT took, answered or not.
    pub slowest: Duration,
}

/// Keeps writing `{prefix}{n}` = `{prefix}{n}` through the nodes `via` in turn until `stop`.
pub fn spawn_steady_writer(
    c: &TestCluster,
    via: &[usize],
    prefix: &'static str,
    stop: Arc<AtomicBool>,
) -> (Arc<AtomicUsize>, tokio::task::JoinHandle<Steady>) {
    let urls: Vec<String> = via.iter().map(|&i| c.node(i).http_url()).collect();
    let client = c.http.clone();
    let count = Arc::new(AtomicUsize::new(0));
    let out = Steady {
        count: count.clone(),
        ..Steady::default()
    };
    let task = tokio::spawn(async move {
        let mut out = out;
        let mut n = 0usize;
        while !stop.load(Ordering::SeqCst) {
            let key = format!("{prefix}{n:05}");
            let url = format!("{}/v1/kv/{key}", urls[n % urls.len()]);
            let started = Instant::now();
            let result = try_put_url(&client, &url, &key).await;
            out.slowest = out.slowest.max(started.elapsed());
            match result {
                Ok(true) => {
                    out.acked.push(key);
                    out.count.fetch_add(1, Ordering::SeqCst);
                }
                other => {
                    out.failures
                        .push(format!("{url} after {:?}: {other:?}", started.elapsed()));
                    // Pacing, not synchronization: a dead node refuses at once, and the
                    // writer should not spin on it.
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
            n += 1;
        }
        out
    });
    (count, task)
}

/// Waits until a steady writer has `n` acknowledged writes.
pub async fn wait_for_acks(count: &AtomicUsize, n: usize) {
    let reached = wait_until(
        Duration::from_secs(20),
        Duration::from_millis(5),
        || async { count.load(Ordering::SeqCst) >= n },
    )
    .await;
    assert!(
        reached,
        "only {} writes acknowledged in 20 s",
        count.load(Ordering::SeqCst)
    );
}

/// Asserts that every key a steady writer had acknowledged reads back (`?consistent`,
/// through node `via`) with its value.
pub async fn assert_acked_readable(c: &TestCluster, via: usize, prefix: &str, steady: &Steady) {
    let listed = c
        .try_list(via, prefix, "&consistent")
        .await
        .unwrap_or_else(|e| panic!("{e}\n{}", c.logs()));
    let lost: Vec<&String> = steady
        .acked
        .iter()
        .filter(|k| listed.get(*k).map(|e| e.value.as_slice()) != Some(k.as_bytes()))
        .collect();
    assert!(
        lost.is_empty(),
        "{} of {} acknowledged writes under {prefix} lost or wrong: {lost:?}\n{}",
        lost.len(),
        steady.acked.len(),
        c.logs()
    );
    // Unacknowledged writes may have landed or not, but nothing else can appear.
    for (key, entry) in &listed {
        assert_eq!(entry.value, key.as_bytes(), "{key}: torn or foreign value");
    }
}

/// Runs a test body under a time bound (the cluster has already started; its start is
/// bounded by the harness). Dropping the body on timeout drops the cluster, which kills it.
pub async fn bounded<F: std::future::Future<Output = ()>>(limit: Duration, body: F) {
    if tokio::time::timeout(limit, body).await.is_err() {
        panic!("the test did not finish within {limit:?}");
    }
}

pub fn header<'a>(headers: &'a reqwest::header::HeaderMap, name: &str) -> &'a str {
    headers
        .get(name)
        .unwrap_or_else(|| panic!("missing header {name}: {headers:?}"))
        .to_str()
        .expect("header is text")
}

/// The first node not in `not`.
pub fn other_than(c: &TestCluster, not: &[usize]) -> usize {
    (0..c.nodes.len())
        .find(|i| !not.contains(i))
        .expect("another node")
}

/// Writes one key per shard through `via`; `Ok` when every write was acknowledged.
pub async fn write_every_shard(
    c: &TestCluster,
    via: usize,
    keys: &[String],
    value: &str,
) -> Result<(), String> {
    let mut tasks = Vec::new();
    for key in keys {
        let url = c.node(via).kv_url(key);
        let client = c.http.clone();
        let value = value.to_string();
        tasks.push(tokio::spawn(async move {
            try_put_url(&client, &url, &value).await
        }));
    }
    let mut errors = Vec::new();
    for t in tasks {
        match t.await.expect("write task") {
            Ok(true) => {}
            other => errors.push(format!("{other:?}")),
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}
