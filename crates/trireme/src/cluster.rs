//! `trireme cluster`: start a local multi-node cluster on one machine (`up`), add a node to it
//! while it runs (`add`), and describe a running cluster shard by shard (`status`).
//!
//! Starting, watching and stopping the nodes is the job of the `trireme-local` crate, which
//! the embedded cluster of `trireme bench`, the integration tests and the chaos runner use
//! too; `up` and `add` are thin loops around it.
//!
//! Every node runs in its own process group, so a Ctrl-C in the terminal reaches `cluster up`
//! alone and the nodes are stopped in order (SIGTERM, then SIGKILL after a grace period)
//! instead of all at once by the terminal. The flip side: a `cluster up` killed with SIGKILL
//! leaves its nodes running; the next `cluster up` on the same directory says so. A node
//! `cluster add` started is recorded in `DIR/cluster.json`; the `cluster up` supervising DIR
//! reads that file when it stops and stops the node with the others.

use anyhow::{Context, anyhow, bail};
use clap::{Args, Subcommand};
use serde::Serialize;
use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;
use trireme_local::logs::log_section;
use trireme_local::{
    AddOptions, ClusterOptions, DEFAULT_BASE_PORT, LocalCluster, LocalNode, ServerFlags,
};

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
    /// DIR/n<i>.log; DIR/cluster.json lists the nodes, with state "running" once all serve
    /// and "stopped" after a stop. Running it again on the
    /// same DIR restarts the same nodes with their data, including those added with `cluster
    /// add`. Ctrl-C or SIGTERM stops every node, added ones too (a second one kills them),
    /// then exits 0 if every node ran until then and stopped cleanly. A node that dies while
    /// up is reported at once; the others keep running, and the exit status is then non-zero.
    /// When every node has died, or the cluster cannot start within --timeout, it exits
    /// non-zero at once.
    Up(UpArgs),
    /// Add one node to the cluster a running `trireme cluster up --dir DIR` started.
    ///
    /// The new node is n<k>, k the next number, on the next ports of the layout (HTTP
    /// BASE+10(k-1), RESP +1, peer +2), with the flags the cluster was started with; it joins
    /// through a running member (--join), logs to DIR/n<k>.log, and is recorded in
    /// DIR/cluster.json once it answers /v1/health. It keeps running after this command exits
    /// 0; the `cluster up` of DIR stops it with the others, and restarts it with them later.
    Add(AddArgs),
    /// Show a running cluster: its nodes, and per shard the slots, the leader, and each
    /// replica's applied index and lag behind the leader.
    ///
    /// Asks the target node for the shard map, then every node for its own view. Exits
    /// non-zero when the target cannot be reached.
    Status(StatusArgs),
    /// Remove a node from the cluster: drain it (its replicas move to the other nodes, then it
    /// stops), or with --force remove a node that is gone for good and rebuild its replicas.
    ///
    /// Exits non-zero when the removal is refused (an unknown node, or too few nodes would be
    /// left for the replication factor without --force), and when shards lost their quorum.
    Remove(crate::cluster_admin::RemoveArgs),
    /// Stop draining a node: it becomes active again and keeps the replicas it still holds
    /// (`cluster status` shows how many are left while it drains).
    ///
    /// Exits non-zero when the node is unknown or was removed already (its drain finished).
    CancelDrain(crate::cluster_admin::CancelDrainArgs),
    /// Finish a rolling upgrade: raise the cluster version to the protocol of the build the
    /// nodes run now, turning on its features that change what is replicated. Nodes of older
    /// builds are refused from then on, so the upgrade can no longer be rolled back.
    ///
    /// Needed only with `[cluster] auto_finalize_upgrade = false`; otherwise the cluster does
    /// it once every node runs the new build. Exits non-zero, naming them, while some node
    /// runs an older build.
    FinalizeUpgrade(crate::cluster_admin::FinalizeArgs),
    /// Split a shard in two: the new shard takes the upper part of its slots (from --at, by
    /// default the middle), starting on the same replicas; the rebalancer then spreads it.
    ///
    /// Waits until the new shard is in the cluster map. Exits non-zero when the split is
    /// refused (an unknown shard, a slot outside it, a shard moving a replica, another split
    /// in progress).
    Split(crate::cluster_admin::SplitArgs),
    /// Show where voters and learners go (the home region, the survival goal, each region's
    /// nodes), or change them: --home-region R moves leaders (and, with survival zone, every
    /// voter) to R; --survival zone keeps voters in the home region and a learner of every
    /// shard in each other region; --survival region puts each shard's voters in three
    /// regions, so writes go on when one is lost.
    ///
    /// Exits non-zero when the change is refused (a region with no active node, an unknown
    /// goal, survival region with fewer than three regions, a cluster still upgrading to the
    /// build that brought regions).
    Placement(crate::cluster_admin::PlacementArgs),
}

/// Flags of `trireme cluster up`.
#[derive(Args, Debug)]
pub struct UpArgs {
    /// Number of nodes that bootstrap the cluster; nodes added with `cluster add` are not
    /// counted (they restart with these from cluster.json).
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
    /// Name of the cluster, passed to every node (server default); a node refuses a data
    /// directory created under another name.
    #[arg(long)]
    cluster_name: Option<String>,
    /// How long to wait for every node to serve, e.g. 60s or 2m.
    #[arg(long, default_value = "60s")]
    timeout: String,
    /// Log filter passed to every node (server default: info,openraft=error).
    #[arg(long)]
    log: Option<String>,
    /// ACLs (default deny) and TLS: makes a CA, node certificates and a management token in
    /// DIR/tls, and prints how to reach the nodes.
    #[arg(long)]
    secure: bool,
}

/// Flags of `trireme cluster add`.
#[derive(Args, Debug)]
pub struct AddArgs {
    /// The directory of the running cluster (the --dir of its `cluster up`).
    #[arg(long, default_value = "./trireme-cluster")]
    dir: PathBuf,
    /// How long to wait for the new node to serve, e.g. 60s or 2m.
    #[arg(long, default_value = "60s")]
    timeout: String,
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
        ClusterCommand::Add(args) => runtime.block_on(add(args)),
        ClusterCommand::Status(args) => runtime.block_on(status(args)),
        ClusterCommand::Remove(args) => runtime.block_on(crate::cluster_admin::remove(args)),
        ClusterCommand::CancelDrain(args) => {
            runtime.block_on(crate::cluster_admin::cancel_drain(args))
        }
        ClusterCommand::Split(args) => runtime.block_on(crate::cluster_admin::split(args)),
        ClusterCommand::Placement(args) => runtime.block_on(crate::cluster_admin::placement(args)),
        ClusterCommand::FinalizeUpgrade(args) => {
            runtime.block_on(crate::cluster_admin::finalize_upgrade(args))
        }
    }
}

fn parse_timeout(text: &str) -> anyhow::Result<Duration> {
    humantime::parse_duration(text)
        .with_context(|| format!("--timeout {text:?} is not a duration like 60s or 2m"))
}

// ---------------------------------------------------------------------------------------------
// cluster up
// ---------------------------------------------------------------------------------------------

async fn up(args: UpArgs) -> anyhow::Result<()> {
    let opts = ClusterOptions {
        flags: ServerFlags {
            shards: args.shards,
            replication_factor: args.replication_factor,
            cluster_name: args.cluster_name,
            log: args.log,
            secure: args.secure,
        },
        base_port: args.base_port,
        start_timeout: parse_timeout(&args.timeout)?,
        ..ClusterOptions::new(args.nodes, args.dir)
    };
    // Before any node starts: from here on a Ctrl-C must stop the nodes, not just this process.
    let mut signals = StopSignals::register()?;
    let timeout = opts.start_timeout;
    let secure = opts.flags.secure;
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
            return Err(e.into());
        }
        None => return Ok(cluster.stop().await?),
    }
    print_up_summary(&cluster, secure);
    cluster.mark_running()?;

    // Nodes that died while the cluster was up: reported at once, and in the exit status.
    let mut died = Vec::new();
    let signal = loop {
        tokio::select! {
            signal = signals.recv() => break signal,
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        for gone in cluster.reap_exited() {
            if gone.status.code() == Some(i32::from(trireme_types::admin::EXIT_REMOVED)) {
                // Drained (or removed by force) and stopped by itself, as it should.
                eprintln!(
                    "node {} (pid {}) was removed from the cluster and stopped",
                    gone.name, gone.pid
                );
                continue;
            }
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
    eprintln!("{signal}: stopping the nodes (again to kill them)");
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

fn print_up_summary(cluster: &LocalCluster, secure: bool) {
    let nodes = cluster.nodes();
    println!(
        "trireme cluster up: {} nodes, {} shards, in {} (cluster.json)",
        nodes.len(),
        cluster.shard_count(),
        cluster.dir().display()
    );
    print!("{}", node_table(nodes));
    let first = &nodes[0];
    let resp_port = first.resp.rsplit_once(':').map_or("", |(_, p)| p);
    if secure {
        let dir = cluster.dir();
        let ca = trireme_local::secure::ca_file(dir);
        let token = trireme_local::secure::management_token(dir).unwrap_or_default();
        println!("secure: ACLs on (default deny), TLS on every port");
        println!("management token: {token}");
        println!("CA certificate: {}", ca.display());
        println!(
            "try: export TRIREME_TOKEN={token} TRIREME_CA_FILE={ca}; trireme kv put greeting hello --target https://{http}; redis-cli --tls --cacert {ca} -p {resp_port} --user default --pass $TRIREME_TOKEN GET greeting",
            ca = ca.display(),
            http = first.http,
        );
        println!(
            "status: trireme cluster status --target https://{}; Ctrl-C stops every node.",
            first.http
        );
        return;
    }
    println!(
        "try: redis-cli -c -p {resp_port} SET greeting hello; curl 'http://{}/v1/kv/greeting?raw'",
        first.http
    );
    println!(
        "status: trireme cluster status --target http://{}; add a node: trireme cluster add --dir {}; Ctrl-C stops every node.",
        first.http,
        cluster.dir().display()
    );
}

/// The nodes with their addresses, pids and logs, one line each.
fn node_table(nodes: &[LocalNode]) -> String {
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
    table(&rows)
}

/// The signals that stop `cluster up`, registered before any node starts.
struct StopSignals {
    interrupt: tokio::signal::unix::Signal,
    terminate: tokio::signal::unix::Signal,
    /// The terminal went away: the nodes, in their own process group, would not know.
    hangup: tokio::signal::unix::Signal,
}

impl StopSignals {
    fn register() -> anyhow::Result<Self> {
        use tokio::signal::unix::{SignalKind, signal};
        Ok(StopSignals {
            interrupt: signal(SignalKind::interrupt()).context("cannot handle SIGINT")?,
            terminate: signal(SignalKind::terminate()).context("cannot handle SIGTERM")?,
            hangup: signal(SignalKind::hangup()).context("cannot handle SIGHUP")?,
        })
    }

    /// Waits for the next signal and names it.
    async fn recv(&mut self) -> &'static str {
        tokio::select! {
            _ = self.interrupt.recv() => "SIGINT",
            _ = self.terminate.recv() => "SIGTERM",
            _ = self.hangup.recv() => "SIGHUP",
        }
    }
}

// ---------------------------------------------------------------------------------------------
// cluster add
// ---------------------------------------------------------------------------------------------

async fn add(args: AddArgs) -> anyhow::Result<()> {
    let opts = AddOptions {
        timeout: parse_timeout(&args.timeout)?,
        binary: None,
    };
    eprintln!("adding a node to the cluster in {}", args.dir.display());
    let node = trireme_local::add_to_running(&args.dir, opts).await?;
    println!(
        "trireme cluster add: {} joined through {} and serves; the `cluster up` of {} stops it with the others",
        node.name,
        node.join.as_deref().unwrap_or("?"),
        args.dir.display()
    );
    print!("{}", node_table(std::slice::from_ref(&node)));
    Ok(())
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
    /// `/v1/cluster/status` of the target: nodes' states and moves in progress.
    membership: Option<trireme_types::cluster_status::ClusterStatus>,
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
    shard: trireme_types::ShardId,
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
    let mut report = collect_status(&args.target).await?;
    // Nodes' lifecycle and the moves in progress; a node of an older build has no such page.
    report.membership = crate::cluster_admin::fetch_status(&args.target).await.ok();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
    } else {
        print!("{}", render_status(&report));
        if let Some(membership) = &report.membership {
            print!("\n{}", crate::cluster_admin::render_membership(membership));
        }
    }
    Ok(())
}

/// `127.0.0.1:7700`, `http://127.0.0.1:7700/` → `http://127.0.0.1:7700`.
pub(crate) fn normalize_target(target: &str) -> anyhow::Result<String> {
    let target = target.trim().trim_end_matches('/');
    if target.is_empty() {
        bail!("--target is empty; give a node's HTTP URL like http://127.0.0.1:7700");
    }
    if target.starts_with("http://") || target.starts_with("https://") {
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
        // The other nodes speak what the target does.
        let scheme = if target.starts_with("https://") {
            "https"
        } else {
            "http"
        };
        let base = format!("{scheme}://{}", node.http);
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
        membership: None,
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
    let mut rows = vec![row(["NODE", "HTTP", "RESP", "PEER", "HEALTH", "REGION"])];
    for n in &report.nodes {
        rows.push(vec![
            n.addrs.name.clone(),
            n.addrs.http.clone(),
            n.addrs.resp.clone(),
            n.addrs.peer.clone(),
            n.health.clone(),
            n.addrs.region.clone().unwrap_or_else(dash),
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

/// The ACL token `--token` (or `TRIREME_TOKEN`) gave, sent by every client [`http_client`]
/// makes.
static TOKEN: std::sync::OnceLock<String> = std::sync::OnceLock::new();
/// The CA certificate (PEM) `--ca-file` (or `TRIREME_CA_FILE`) gave: `https://` nodes must
/// have a certificate it signed.
static CA_PEM: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();

/// Remembers the command line's ACL token and CA file for [`http_client`].
pub(crate) fn use_credentials(token: Option<String>, ca_file: Option<&Path>) -> anyhow::Result<()> {
    if let Some(token) = token.filter(|t| !t.is_empty()) {
        let _ = TOKEN.set(token);
    }
    if let Some(path) = ca_file {
        let pem = std::fs::read(path)
            .with_context(|| format!("cannot read --ca-file {}", path.display()))?;
        let _ = CA_PEM.set(pem);
    }
    Ok(())
}

/// A client for loopback and LAN nodes: never through a proxy, never waiting long; it
/// carries the command line's ACL token, if any.
pub(crate) fn http_client(timeout: Duration) -> anyhow::Result<reqwest::Client> {
    let mut headers = reqwest::header::HeaderMap::new();
    if let Some(token) = TOKEN.get() {
        let mut value = reqwest::header::HeaderValue::from_str(token)
            .context("--token holds characters a header cannot carry")?;
        value.set_sensitive(true);
        headers.insert("X-Trireme-Token", value);
    }
    let mut builder = reqwest::Client::builder();
    if let Some(pem) = CA_PEM.get() {
        let ca =
            reqwest::Certificate::from_pem(pem).context("--ca-file holds no PEM certificate")?;
        builder = builder
            .tls_built_in_root_certs(false)
            .add_root_certificate(ca);
    }
    builder
        .default_headers(headers)
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
pub(crate) fn root_cause(e: &dyn std::error::Error) -> String {
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
            version: None,
            region: None,
            role: None,
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
            membership: None,
            shards: vec![
                ShardReport {
                    shard: trireme_types::ShardId(0),
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
                    shard: trireme_types::ShardId(1),
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
