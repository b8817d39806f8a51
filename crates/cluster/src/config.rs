use std::path::PathBuf;
use std::time::Duration;
use trireme_raft::RaftTiming;
use trireme_types::Limits;

/// Everything a node needs to start; the binary fills it from flags and the TOML file.
#[derive(Debug, Clone)]
pub struct NodeConfig {
    /// The node's name (`n1`).
    pub name: String,
    /// Name of the cluster; a data directory made by another cluster is refused.
    pub cluster_name: String,
    /// Where the node keeps its data.
    pub data_dir: PathBuf,
    /// Advertised client HTTP address.
    pub http_addr: String,
    /// Advertised client RESP address.
    pub resp_addr: String,
    /// Advertised peer address.
    pub peer_addr: String,
    /// Number of shards the cluster is bootstrapped with (splits add more later); `None` takes
    /// the stored count (or 16 on a fresh data directory).
    pub shards: Option<u32>,
    /// Voters per shard (capped by the number of nodes).
    pub replication_factor: u32,
    /// The nodes of a new cluster, `(name, peer address)`, this node included; empty bootstraps
    /// a one-node cluster. Only read on a fresh data directory.
    pub initial_cluster: Vec<(String, String)>,
    /// A member's peer address to join a running cluster through (only read on a fresh data
    /// directory; a node that has joined finds the cluster in its own metadata afterwards).
    pub join: Option<String>,
    /// Replica moves the metadata leader runs at once, cluster-wide: each sends a snapshot,
    /// which on a busy 2-core machine competes with client requests.
    pub max_moves: usize,
    /// Automatic splits: a shard whose size passes this many bytes is split in two (0: never
    /// by size).
    pub split_bytes: u64,
    /// Automatic splits: a shard whose log grows by more than this many entries a second,
    /// sustained over a minute, is split in two (0: never by load).
    pub split_writes_per_sec: u64,
    /// No automatic split makes more shards than this.
    pub max_shards: u32,
    /// Whether the metadata leader raises the cluster version by itself once every member
    /// runs a newer protocol. Off, it waits for `trireme cluster finalize-upgrade`, and until
    /// then the old build can still be put back on any node (a rollback).
    pub auto_finalize_upgrade: bool,
    /// Whether leaders hand shards to their preferred replicas (see `balance.rs`).
    pub balance_leaders: bool,
    /// Rack label, for placing replicas apart.
    pub rack: Option<String>,
    /// Zone label, for placing replicas apart.
    pub zone: Option<String>,
    /// Region label: stale reads prefer replicas in the node's own region.
    pub region: Option<String>,
    /// Raft timing.
    pub timing: RaftTiming,
    /// Request limits.
    pub limits: Limits,
    /// How often the leader of each shard looks for expired keys to remove through the log.
    pub expiry_interval: Duration,
    /// Access control (off by default).
    pub acl: crate::AclConfig,
    /// How long a change to a document may wait before the search index commits it (the
    /// default search freshness; shorter costs write throughput).
    pub search_commit_interval: Duration,
    /// Cache sizes of the node's storage (`[storage]`).
    pub storage: trireme_storage::StorageOptions,
    /// Mutual TLS on the peer links (`[peer_tls]`), if set.
    pub peer_tls: Option<std::sync::Arc<trireme_tls::PeerTls>>,
    /// `[redis] cross_slot_transactions`: `MULTI`/`EXEC`, `MSET` and `MSETNX` may name keys
    /// in several slots and run as one transaction across shards. Off, they keep Redis
    /// Cluster's `CROSSSLOT` rule, which is what cluster clients expect.
    pub redis_cross_slot: bool,
}

impl NodeConfig {
    /// A configuration with the documented defaults for node `name` storing under `data_dir`.
    pub fn new(name: impl Into<String>, data_dir: impl Into<PathBuf>) -> Self {
        Self {
            name: name.into(),
            cluster_name: "trireme".into(),
            data_dir: data_dir.into(),
            http_addr: "127.0.0.1:7700".into(),
            resp_addr: "127.0.0.1:7701".into(),
            peer_addr: "127.0.0.1:7702".into(),
            shards: None,
            replication_factor: 3,
            initial_cluster: Vec::new(),
            join: None,
            max_moves: 2,
            split_bytes: 256 << 20,
            split_writes_per_sec: 0,
            max_shards: 256,
            auto_finalize_upgrade: true,
            balance_leaders: true,
            rack: None,
            zone: None,
            region: None,
            timing: RaftTiming::default(),
            limits: Limits::default(),
            expiry_interval: Duration::from_millis(250),
            acl: crate::AclConfig::default(),
            search_commit_interval: trireme_search::DEFAULT_COMMIT_INTERVAL,
            storage: trireme_storage::StorageOptions::default(),
            peer_tls: None,
            redis_cross_slot: false,
        }
    }
}
