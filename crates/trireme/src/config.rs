//! `trireme server` configuration: a TOML file (`--config`) overlaid by flags.

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;
use std::path::PathBuf;
use std::time::Duration;
use trireme_cluster::{NodeConfig, RaftTiming};
use trireme_types::Limits;

/// Flags of `trireme server`. Each overrides the same setting from `--config`.
#[derive(Args, Debug, Default)]
pub struct ServerArgs {
    /// TOML configuration file; flags override it.
    #[arg(long)]
    pub config: Option<PathBuf>,
    /// This node's name.
    #[arg(long)]
    pub node_id: Option<String>,
    /// Data directory.
    #[arg(long)]
    pub data_dir: Option<PathBuf>,
    /// Client HTTP listen address (Consul KV API).
    #[arg(long)]
    pub http: Option<String>,
    /// Client RESP listen address (Redis protocol).
    #[arg(long)]
    pub resp: Option<String>,
    /// Peer listen address (Raft and forwarding).
    #[arg(long)]
    pub peer: Option<String>,
    /// Initial members, `ID=PEER_ADDR,...` (multi-node bootstrap).
    #[arg(long)]
    pub initial_cluster: Option<String>,
    /// Join an existing cluster through this peer address.
    #[arg(long)]
    pub join: Option<String>,
    /// Number of shards, fixed at bootstrap (default 16).
    #[arg(long)]
    pub shards: Option<u32>,
    /// Voters per shard (default 3; capped by the number of nodes).
    #[arg(long)]
    pub replication_factor: Option<u32>,
    /// Rack label used to spread replicas.
    #[arg(long)]
    pub rack: Option<String>,
    /// Zone label used to spread replicas.
    #[arg(long)]
    pub zone: Option<String>,
    /// Name of the cluster; a data dir from a cluster with another name is refused.
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// Log filter (`info`, `debug`, `trireme=debug,openraft=warn`, ...).
    #[arg(long)]
    pub log: Option<String>,
}

/// The TOML file. Unknown fields are rejected by name.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
pub struct FileConfig {
    node_id: Option<String>,
    data_dir: Option<PathBuf>,
    http: Option<String>,
    resp: Option<String>,
    peer: Option<String>,
    initial_cluster: Option<String>,
    join: Option<String>,
    shards: Option<u32>,
    replication_factor: Option<u32>,
    rack: Option<String>,
    zone: Option<String>,
    cluster_name: Option<String>,
    /// Hand shard leadership to each shard's preferred replica (default true).
    balance_leaders: Option<bool>,
    log: Option<String>,
    limits: Option<Limits>,
    raft: Option<RaftSection>,
    cluster: Option<ClusterSection>,
}

/// `[cluster]`: how the metadata leader rebalances.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct ClusterSection {
    /// Replica moves at once, cluster-wide (default 2).
    max_moves: Option<usize>,
}

/// `[raft]`: timing in milliseconds.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct RaftSection {
    heartbeat_ms: Option<u64>,
    election_timeout_min_ms: Option<u64>,
    election_timeout_max_ms: Option<u64>,
    snapshot_every: Option<u64>,
    keep_after_snapshot: Option<u64>,
    keep_after_snapshot_bytes: Option<u64>,
    snapshot_log_bytes: Option<u64>,
    snapshot_chunk_bytes: Option<u64>,
    snapshot_rate_bytes_per_sec: Option<u64>,
    request_timeout_ms: Option<u64>,
}

/// Everything `server::run` needs.
#[derive(Debug)]
pub struct ServerConfig {
    pub node: NodeConfig,
    pub log: String,
}

impl ServerArgs {
    /// Merges the file (if any) and the flags, and validates the result.
    pub fn resolve(self) -> anyhow::Result<ServerConfig> {
        let file = match &self.config {
            Some(path) => {
                let text = std::fs::read_to_string(path)
                    .with_context(|| format!("cannot read config file {}", path.display()))?;
                toml::from_str::<FileConfig>(&text)
                    .with_context(|| format!("invalid config file {}", path.display()))?
            }
            None => FileConfig::default(),
        };
        let name = self.node_id.or(file.node_id).unwrap_or_else(|| "n1".into());
        validate_name(&name)?;
        let data_dir = self
            .data_dir
            .or(file.data_dir)
            .unwrap_or_else(|| PathBuf::from("./trireme-data"));
        let mut node = NodeConfig::new(name.clone(), data_dir);
        if let Some(http) = self.http.or(file.http) {
            node.http_addr = http;
        }
        if let Some(resp) = self.resp.or(file.resp) {
            node.resp_addr = resp;
        }
        if let Some(peer) = self.peer.or(file.peer) {
            node.peer_addr = peer;
        }
        for (what, addr) in [
            ("--http", &node.http_addr),
            ("--resp", &node.resp_addr),
            ("--peer", &node.peer_addr),
        ] {
            addr.parse::<std::net::SocketAddr>()
                .with_context(|| format!("{what} {addr:?} is not an IP:port address"))?;
        }
        node.shards = self.shards.or(file.shards);
        if let Some(shards) = node.shards
            && !(1..=16384).contains(&shards)
        {
            bail!("--shards must be between 1 and 16384, got {shards}");
        }
        node.replication_factor = self
            .replication_factor
            .or(file.replication_factor)
            .unwrap_or(3);
        if !(1..=7).contains(&node.replication_factor) {
            bail!(
                "--replication-factor must be between 1 and 7, got {}",
                node.replication_factor
            );
        }
        if let Some(cluster) = self.cluster_name.or(file.cluster_name) {
            node.cluster_name = cluster;
        }
        if let Some(limits) = file.limits {
            if limits.max_key_bytes == 0 || limits.max_value_bytes == 0 {
                bail!("[limits] max_key_bytes and max_value_bytes must be positive");
            }
            if !(1..=60_000).contains(&limits.header_read_timeout_ms) {
                bail!("[limits] header_read_timeout_ms must be between 1 and 60000");
            }
            node.limits = limits;
        }
        if let Some(raft) = file.raft {
            node.timing = raft_timing(raft)?;
        }
        if let Some(max_moves) = file.cluster.and_then(|c| c.max_moves) {
            if !(1..=64).contains(&max_moves) {
                bail!("[cluster] max_moves must be between 1 and 64, got {max_moves}");
            }
            node.max_moves = max_moves;
        }
        let join = self.join.or(file.join);
        let initial = self.initial_cluster.or(file.initial_cluster);
        if let (Some(_), Some(_)) = (&join, &initial) {
            bail!(
                "--join and --initial-cluster exclude each other: a new cluster is bootstrapped with --initial-cluster, a node is added to a running one with --join"
            );
        }
        node.join = join;
        if let Some(initial) = initial {
            let members = parse_initial_cluster(&initial)?;
            for (id, _) in &members {
                validate_name(id)?;
            }
            if !members.iter().any(|(id, _)| id == &name) {
                bail!("--initial-cluster does not list this node ({name})");
            }
            node.initial_cluster = members;
        }
        if let Some(balance) = file.balance_leaders {
            node.balance_leaders = balance;
        }
        node.rack = self.rack.or(file.rack);
        node.zone = self.zone.or(file.zone);
        Ok(ServerConfig {
            node,
            log: self
                .log
                .or(file.log)
                .unwrap_or_else(|| "info,openraft=error".into()),
        })
    }
}

fn validate_name(name: &str) -> anyhow::Result<()> {
    if name.is_empty()
        || name.len() > 64
        || !name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_' || c == '.')
    {
        bail!("--node-id {name:?}: use 1-64 characters from A-Z a-z 0-9 - _ .");
    }
    Ok(())
}

/// Parses `n1=127.0.0.1:7702,n2=...`.
pub fn parse_initial_cluster(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut members = Vec::new();
    for item in text.split(',').filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .with_context(|| format!("--initial-cluster entry {item:?} is not ID=HOST:PORT"))?;
        validate_name(id)?;
        addr.parse::<std::net::SocketAddr>().with_context(|| {
            format!("--initial-cluster entry {item:?}: {addr:?} is not an IP:port address")
        })?;
        members.push((id.to_string(), addr.to_string()));
    }
    if members.is_empty() {
        bail!("--initial-cluster is empty");
    }
    Ok(members)
}

fn raft_timing(raft: RaftSection) -> anyhow::Result<RaftTiming> {
    let mut timing = RaftTiming::default();
    let ms = Duration::from_millis;
    if let Some(v) = raft.heartbeat_ms {
        timing.heartbeat = ms(v);
    }
    if let Some(v) = raft.election_timeout_min_ms {
        timing.election_min = ms(v);
    }
    if let Some(v) = raft.election_timeout_max_ms {
        timing.election_max = ms(v);
    }
    if let Some(v) = raft.snapshot_every {
        timing.snapshot_every = v;
    }
    if let Some(v) = raft.keep_after_snapshot {
        timing.keep_after_snapshot = v;
    }
    if let Some(v) = raft.keep_after_snapshot_bytes {
        timing.keep_after_snapshot_bytes = v;
    }
    if let Some(v) = raft.snapshot_log_bytes {
        timing.snapshot_log_bytes = v;
    }
    if let Some(v) = raft.snapshot_chunk_bytes {
        timing.snapshot_chunk_bytes = v;
    }
    if let Some(v) = raft.snapshot_rate_bytes_per_sec {
        timing.snapshot_rate_bytes_per_sec = v;
    }
    if let Some(v) = raft.request_timeout_ms {
        timing.request_timeout = ms(v);
    }
    if timing.heartbeat.is_zero()
        || timing.heartbeat >= timing.election_min
        || timing.election_min >= timing.election_max
    {
        bail!("[raft] needs 0 < heartbeat_ms < election_timeout_min_ms < election_timeout_max_ms");
    }
    if timing.snapshot_every == 0 {
        bail!("[raft] snapshot_every must be positive");
    }
    if timing.snapshot_log_bytes == 0 {
        bail!("[raft] snapshot_log_bytes must be positive");
    }
    const MAX_SNAPSHOT_CHUNK_BYTES: u64 = trireme_raft::MAX_SNAPSHOT_CHUNK_BYTES as u64;
    if timing.snapshot_chunk_bytes == 0 || timing.snapshot_chunk_bytes > MAX_SNAPSHOT_CHUNK_BYTES {
        bail!(
            "[raft] snapshot_chunk_bytes must be between 1 and {MAX_SNAPSHOT_CHUNK_BYTES} \
             (a chunk travels as one peer frame)"
        );
    }
    Ok(timing)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Writes `toml` to `path` and resolves a config from that file alone.
    fn from_file(path: &std::path::Path, toml: &str) -> anyhow::Result<ServerConfig> {
        std::fs::write(path, toml).unwrap();
        ServerArgs {
            config: Some(path.to_path_buf()),
            ..Default::default()
        }
        .resolve()
    }

    #[test]
    fn flags_override_the_file_and_bad_values_are_named() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        std::fs::write(&path, "node_id = \"a\"\nshards = 4\nhttp = \"127.0.0.1:1\"\n[raft]\nheartbeat_ms = 50\nelection_timeout_min_ms = 300\nelection_timeout_max_ms = 600\n").unwrap();
        let args = ServerArgs {
            config: Some(path.clone()),
            node_id: Some("b".into()),
            ..Default::default()
        };
        let config = args.resolve().unwrap();
        assert_eq!(config.node.name, "b");
        assert_eq!(config.node.shards, Some(4));
        assert_eq!(config.node.http_addr, "127.0.0.1:1");
        assert_eq!(config.node.timing.heartbeat, Duration::from_millis(50));

        let err = from_file(&path, "node_id = \"a\"\nshardz = 4\n").unwrap_err();
        assert!(format!("{err:#}").contains("shardz"), "{err:#}");

        let err = ServerArgs {
            shards: Some(0),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("--shards"), "{err}");
        let err = ServerArgs {
            http: Some("nowhere".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(err.to_string().contains("--http"), "{err}");

        let config = from_file(&path, "[raft]\nsnapshot_log_bytes = 4096\n").unwrap();
        assert_eq!(config.node.timing.snapshot_log_bytes, 4096);
        let err = from_file(&path, "[raft]\nsnapshot_log_bytes = 0\n").unwrap_err();
        assert!(err.to_string().contains("snapshot_log_bytes"), "{err}");

        let config = from_file(&path, "[raft]\nsnapshot_chunk_bytes = 65536\n").unwrap();
        assert_eq!(config.node.timing.snapshot_chunk_bytes, 65536);
        for bad in ["0", "1073741824"] {
            let toml = format!("[raft]\nsnapshot_chunk_bytes = {bad}\n");
            let err = from_file(&path, &toml).unwrap_err();
            assert!(
                err.to_string().contains("snapshot_chunk_bytes"),
                "{bad}: {err}"
            );
        }
    }

    #[test]
    fn initial_cluster_parses_and_rejects_garbage() {
        let members = parse_initial_cluster("n1=127.0.0.1:7702,n2=127.0.0.1:7712").unwrap();
        assert_eq!(members[1], ("n2".to_string(), "127.0.0.1:7712".to_string()));
        assert!(parse_initial_cluster("n1").is_err());
        assert!(parse_initial_cluster("n1=localhost").is_err());
        assert!(parse_initial_cluster("").is_err());
    }
}
