//! `trireme server` configuration: a TOML file (`--config`) overlaid by flags.

use anyhow::{Context, bail};
use clap::Args;
use serde::Deserialize;
use std::path::{Path, PathBuf};
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
    /// Client HTTP listen address (Consul KV API), `HOST:PORT`.
    #[arg(long)]
    pub http: Option<String>,
    /// Client RESP listen address (Redis protocol), `HOST:PORT`.
    #[arg(long)]
    pub resp: Option<String>,
    /// Peer listen address (Raft and forwarding), `HOST:PORT`.
    #[arg(long)]
    pub peer: Option<String>,
    /// HTTP address clients are told to use (default: the listen address).
    #[arg(long)]
    pub advertise_http: Option<String>,
    /// RESP address clients are told to use, e.g. in `CLUSTER SLOTS` (default: the listen
    /// address).
    #[arg(long)]
    pub advertise_resp: Option<String>,
    /// Peer address other nodes dial (default: the listen address).
    #[arg(long)]
    pub advertise_peer: Option<String>,
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
    /// Region label (a datacenter): stale reads prefer replicas in the reader's region, and
    /// Consul's `/v1/catalog/datacenters` lists the regions.
    #[arg(long)]
    pub region: Option<String>,
    /// Name of the cluster; a data dir from a cluster with another name is refused.
    #[arg(long)]
    pub cluster_name: Option<String>,
    /// Log filter (`info`, `debug`, `trireme=debug,openraft=warn`, ...).
    #[arg(long)]
    pub log: Option<String>,
    /// Check every request's ACL token (`[acl] enabled`).
    #[arg(long)]
    pub acl: bool,
    /// What a request gets where no rule of its token answers: allow or deny
    /// (`[acl] default_policy`; implies --acl).
    #[arg(long)]
    pub acl_default_policy: Option<String>,
    /// Certificate chain (PEM) of the HTTP and RESP ports: turns TLS on (`[tls] cert_file`).
    #[arg(long)]
    pub tls_cert_file: Option<PathBuf>,
    /// Private key (PEM) of that certificate (`[tls] key_file`).
    #[arg(long)]
    pub tls_key_file: Option<PathBuf>,
    /// CA (PEM) client certificates must chain to; requires them (`[tls] ca_file` with
    /// `verify_incoming = true`).
    #[arg(long)]
    pub tls_ca_file: Option<PathBuf>,
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
    advertise_http: Option<String>,
    advertise_resp: Option<String>,
    advertise_peer: Option<String>,
    initial_cluster: Option<String>,
    join: Option<String>,
    shards: Option<u32>,
    replication_factor: Option<u32>,
    rack: Option<String>,
    zone: Option<String>,
    region: Option<String>,
    cluster_name: Option<String>,
    /// Hand shard leadership to each shard's preferred replica (default true).
    balance_leaders: Option<bool>,
    log: Option<String>,
    limits: Option<Limits>,
    raft: Option<RaftSection>,
    cluster: Option<ClusterSection>,
    search: Option<SearchSection>,
    storage: Option<StorageSection>,
    acl: Option<AclSection>,
    tls: Option<TlsSection>,
    peer_tls: Option<TlsSection>,
    ui: Option<UiSection>,
    redis: Option<RedisSection>,
}

/// `[redis]`: the RESP front end.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct RedisSection {
    /// Let `MULTI`/`EXEC`, `MSET` and `MSETNX` span slots as one transaction across shards
    /// (default false: `CROSSSLOT`, as Redis Cluster answers).
    cross_slot_transactions: Option<bool>,
}

/// `[ui]`: the web console at `/ui` on the HTTP port.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct UiSection {
    /// Serve the console and its `/v1/ui/...` endpoints (default true).
    enabled: Option<bool>,
}

/// `[tls]` (the HTTP and RESP client ports) and `[peer_tls]` (node to node, always mutual).
/// Relative paths are taken from the config file's directory.
#[derive(Deserialize, Debug)]
#[serde(deny_unknown_fields)]
struct TlsSection {
    cert_file: PathBuf,
    key_file: PathBuf,
    ca_file: Option<PathBuf>,
    /// Clients must present a certificate signed by `ca_file` (default false; the peer
    /// link always requires one).
    verify_incoming: Option<bool>,
}

impl TlsSection {
    fn files(self, base: &Path) -> trireme_tls::TlsFiles {
        trireme_tls::TlsFiles {
            cert_file: base.join(self.cert_file),
            key_file: base.join(self.key_file),
            ca_file: self.ca_file.map(|ca| base.join(ca)),
            verify_incoming: self.verify_incoming.unwrap_or(false),
        }
    }
}

/// `[acl]`: Consul-style access control (off by default).
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct AclSection {
    /// Check every request's token (default false).
    enabled: Option<bool>,
    /// `allow` or `deny`: what a request gets where no rule of its token answers (default
    /// `allow`, as Consul).
    default_policy: Option<String>,
    /// A management token created at start unless it exists; else bootstrap through
    /// `PUT /v1/acl/bootstrap`.
    initial_management_token: Option<String>,
}

/// `[cluster]`: how the metadata leader rebalances.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct ClusterSection {
    /// Replica moves at once, cluster-wide (default 2).
    max_moves: Option<usize>,
    /// Split a shard automatically once it holds more than this many bytes (default 256 MiB;
    /// 0 turns splits by size off).
    split_bytes: Option<u64>,
    /// Split a shard automatically once its log grows faster than this many entries a second
    /// over a minute (default 0: off).
    split_writes_per_sec: Option<u64>,
    /// No automatic split makes more shards than this (default 256).
    max_shards: Option<u32>,
    /// Raise the cluster version as soon as every node runs the new build (default true);
    /// false waits for `trireme cluster finalize-upgrade`, keeping a rollback possible.
    auto_finalize_upgrade: Option<bool>,
}

/// `[search]`: the document search index.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct SearchSection {
    /// How long a changed document may wait before the index commits it and searches see
    /// it (default 1000; shorter costs write throughput).
    commit_interval_ms: Option<u64>,
}

/// `[storage]`: cache sizes and the free space kept, in bytes.
#[derive(Deserialize, Debug, Default)]
#[serde(deny_unknown_fields)]
struct StorageSection {
    /// Blocks of the tables as read from disk (default 64 MiB).
    cache_bytes: Option<u64>,
    /// The newest records written or read, in front of the tables, for point reads (default
    /// 64 MiB; 0 turns it off).
    record_cache_bytes: Option<u64>,
    /// Free space kept on the data directory's file system: below it writes are refused
    /// (default 256 MiB; 0 turns the check off).
    min_free_bytes: Option<u64>,
    /// Memory for the index of hash, set and sorted set members that lets their writes skip
    /// reading member rows (default 256 MiB; 0 turns it off).
    member_index_bytes: Option<u64>,
    /// Rows of deleted collections the background purge removes per second at most
    /// (default 50,000; 0: unpaced).
    purge_rows_per_sec: Option<u64>,
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
    /// The node's settings; its `http_addr`, `resp_addr` and `peer_addr` are what is
    /// advertised, filled in by `server::run` once the listeners are bound.
    pub node: NodeConfig,
    /// Where to listen, and what to advertise for each listener.
    pub listen: Listen,
    pub log: String,
    /// TLS of the client ports (`[tls]`), if any.
    pub tls: Option<trireme_tls::TlsFiles>,
    /// Serve the web console (`[ui] enabled`, default true).
    pub ui: bool,
}

/// The three listeners of a node.
#[derive(Debug)]
pub struct Listen {
    pub http: Endpoint,
    pub resp: Endpoint,
    pub peer: Endpoint,
}

/// One listener: the address bound, and the one others are told about when it differs (a
/// node on `0.0.0.0`, or behind NAT or a container's port mapping).
#[derive(Debug, Clone)]
pub struct Endpoint {
    /// The flag that sets it, for messages (`--http`).
    pub flag: &'static str,
    /// `HOST:PORT` to bind; a host name is resolved when binding.
    pub bind: String,
    /// `HOST:PORT` to advertise, if given.
    pub advertise: Option<String>,
}

impl Endpoint {
    fn new(
        flag: &'static str,
        bind: Option<String>,
        default: &str,
        advertise: Option<String>,
    ) -> anyhow::Result<Self> {
        let bind = bind.unwrap_or_else(|| default.to_string());
        let name = flag.trim_start_matches('-');
        let (host, port) =
            split_host_port(&bind).with_context(|| format!("{flag} {bind:?} is not HOST:PORT"))?;
        if let Some(advertise) = &advertise {
            let (host, port) = split_host_port(advertise)
                .with_context(|| format!("--advertise-{name} {advertise:?} is not HOST:PORT"))?;
            if port == 0 || is_unspecified(host) {
                bail!(
                    "--advertise-{name} {advertise:?} cannot be dialled: give the host and port others connect to"
                );
            }
        } else if is_unspecified(host) {
            let example_port = if port == 0 {
                "PORT".to_string()
            } else {
                port.to_string()
            };
            bail!(
                "{flag} {bind:?} listens on every interface, which tells other nodes and clients nothing about where to connect: also pass --advertise-{name} HOST:PORT (`advertise_{name}` in the config file) with an address they can reach, e.g. db1.internal:{example_port}"
            );
        }
        Ok(Self {
            flag,
            bind,
            advertise,
        })
    }

    /// What to advertise once the listener is bound at `local`: the advertise address if one
    /// was given; else the listen address with port 0 replaced by the real port, keeping a
    /// host name as written (it is what the operator chose to publish).
    pub fn advertised(&self, local: std::net::SocketAddr) -> String {
        if let Some(advertise) = &self.advertise {
            return advertise.clone();
        }
        match split_host_port(&self.bind) {
            Ok((host, _)) if host.parse::<std::net::IpAddr>().is_err() => {
                format!("{host}:{}", local.port())
            }
            _ => local.to_string(),
        }
    }
}

/// Splits `HOST:PORT` (`127.0.0.1:7700`, `[::1]:7700`, `db1.internal:7700`) into the host,
/// brackets removed, and the port. The host is checked for shape only; it is resolved when
/// binding or dialling.
pub fn split_host_port(text: &str) -> anyhow::Result<(&str, u16)> {
    if let Ok(addr) = text.parse::<std::net::SocketAddr>() {
        let host = text
            .rsplit_once(':')
            .map_or(text, |(host, _)| host)
            .trim_start_matches('[')
            .trim_end_matches(']');
        return Ok((host, addr.port()));
    }
    let (host, port) = text
        .rsplit_once(':')
        .context("expected HOST:PORT, e.g. 127.0.0.1:7700 or db1.internal:7700")?;
    let port: u16 = port
        .parse()
        .with_context(|| format!("port {port:?} is not a number from 0 to 65535"))?;
    let label_ok = |label: &str| {
        !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
    };
    if host.contains(':') {
        bail!("an IPv6 address needs brackets: [{host}]:{port}");
    }
    if host.is_empty() || host.len() > 253 || !host.split('.').all(label_ok) {
        bail!("{host:?} is neither an IP address nor a host name");
    }
    Ok((host, port))
}

/// Whether `host` is the any-address (`0.0.0.0`, `::`), which can be bound but not dialled.
fn is_unspecified(host: &str) -> bool {
    host.parse::<std::net::IpAddr>()
        .is_ok_and(|ip| ip.is_unspecified())
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
        let listen = Listen {
            http: Endpoint::new(
                "--http",
                self.http.or(file.http),
                &node.http_addr,
                self.advertise_http.or(file.advertise_http),
            )?,
            resp: Endpoint::new(
                "--resp",
                self.resp.or(file.resp),
                &node.resp_addr,
                self.advertise_resp.or(file.advertise_resp),
            )?,
            peer: Endpoint::new(
                "--peer",
                self.peer.or(file.peer),
                &node.peer_addr,
                self.advertise_peer.or(file.advertise_peer),
            )?,
        };
        // Until the listeners are bound (and port 0 becomes a real port), the node is told
        // the addresses as configured.
        node.http_addr = listen
            .http
            .advertise
            .clone()
            .unwrap_or(listen.http.bind.clone());
        node.resp_addr = listen
            .resp
            .advertise
            .clone()
            .unwrap_or(listen.resp.bind.clone());
        node.peer_addr = listen
            .peer
            .advertise
            .clone()
            .unwrap_or(listen.peer.bind.clone());
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
            if limits.max_multi_commands == 0
                || limits.pubsub_buffer_bytes == 0
                || limits.max_txn_ops == 0
            {
                bail!(
                    "[limits] max_multi_commands, pubsub_buffer_bytes and max_txn_ops must be positive"
                );
            }
            node.limits = limits;
        }
        if let Some(raft) = file.raft {
            node.timing = raft_timing(raft)?;
        }
        let cluster = file.cluster.unwrap_or_default();
        if let Some(max_moves) = cluster.max_moves {
            if !(1..=64).contains(&max_moves) {
                bail!("[cluster] max_moves must be between 1 and 64, got {max_moves}");
            }
            node.max_moves = max_moves;
        }
        if let Some(bytes) = cluster.split_bytes {
            if bytes != 0 && bytes < 1 << 20 {
                bail!(
                    "[cluster] split_bytes must be 0 (off) or at least 1048576 (1 MiB), got {bytes}"
                );
            }
            node.split_bytes = bytes;
        }
        if let Some(rate) = cluster.split_writes_per_sec {
            node.split_writes_per_sec = rate;
        }
        if let Some(max_shards) = cluster.max_shards {
            if !(1..=16384).contains(&max_shards) {
                bail!("[cluster] max_shards must be between 1 and 16384, got {max_shards}");
            }
            node.max_shards = max_shards;
        }
        if let Some(auto) = cluster.auto_finalize_upgrade {
            node.auto_finalize_upgrade = auto;
        }
        if let Some(ms) = file.search.and_then(|s| s.commit_interval_ms) {
            if !(10..=60_000).contains(&ms) {
                bail!("[search] commit_interval_ms must be between 10 and 60000, got {ms}");
            }
            node.search_commit_interval = Duration::from_millis(ms);
        }
        if let Some(storage) = file.storage {
            const MIB: u64 = 1024 * 1024;
            if let Some(bytes) = storage.cache_bytes {
                if !(MIB..=1024 * 1024 * MIB).contains(&bytes) {
                    bail!("[storage] cache_bytes must be between 1 MiB and 1 TiB, got {bytes}");
                }
                node.storage.cache_bytes = bytes;
            }
            if let Some(bytes) = storage.record_cache_bytes {
                if bytes > 1024 * 1024 * MIB {
                    bail!("[storage] record_cache_bytes must be at most 1 TiB, got {bytes}");
                }
                node.storage.record_cache_bytes = bytes;
            }
            if let Some(bytes) = storage.min_free_bytes {
                node.storage.min_free_bytes = bytes;
            }
            if let Some(bytes) = storage.member_index_bytes {
                if bytes > 1024 * 1024 * MIB {
                    bail!("[storage] member_index_bytes must be at most 1 TiB, got {bytes}");
                }
                node.storage.member_index_bytes = bytes;
            }
            if let Some(rows) = storage.purge_rows_per_sec {
                node.storage.purge_rows_per_sec = rows;
            }
        }
        let join = self.join.or(file.join);
        let initial = self.initial_cluster.or(file.initial_cluster);
        if let (Some(_), Some(_)) = (&join, &initial) {
            bail!(
                "--join and --initial-cluster exclude each other: a new cluster is bootstrapped with --initial-cluster, a node is added to a running one with --join"
            );
        }
        if let Some(member) = &join {
            split_host_port(member)
                .with_context(|| format!("--join {member:?} is not HOST:PORT"))?;
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
        let mut acl_section = file.acl.unwrap_or_default();
        if self.acl || self.acl_default_policy.is_some() {
            acl_section.enabled = Some(true);
        }
        if let Some(policy) = self.acl_default_policy {
            acl_section.default_policy = Some(policy);
        }
        node.acl = acl_config(acl_section)?;
        let base = self
            .config
            .as_deref()
            .and_then(Path::parent)
            .unwrap_or(Path::new(""))
            .to_path_buf();
        let mut tls = file.tls.map(|t| t.files(&base));
        match (self.tls_cert_file, self.tls_key_file) {
            (Some(cert_file), Some(key_file)) => {
                tls = Some(trireme_tls::TlsFiles {
                    verify_incoming: self.tls_ca_file.is_some(),
                    ca_file: self.tls_ca_file,
                    cert_file,
                    key_file,
                });
            }
            (None, None) if self.tls_ca_file.is_none() => {}
            _ => bail!(
                "--tls-cert-file and --tls-key-file go together (and --tls-ca-file with them)"
            ),
        }
        if let Some(files) = &tls {
            // Read now, so a bad file stops the node before it touches its data.
            trireme_tls::ServerTls::load(files.clone(), &[]).context("[tls]")?;
        }
        let ui_enabled = file.ui.and_then(|ui| ui.enabled).unwrap_or(true);
        if let Some(section) = file.peer_tls {
            let files = section.files(&base);
            if files.ca_file.is_none() {
                bail!("[peer_tls] needs ca_file: peers are checked against the cluster CA");
            }
            let peer_tls = trireme_tls::PeerTls::load(files).context("[peer_tls]")?;
            // Peers check that this node's certificate names it: refused by all, it would
            // never serve.
            trireme_tls::check_node_name(&node.name)
                .map_err(|reason| anyhow::anyhow!("--node-id: {reason}"))?;
            peer_tls
                .check_names_node(&node.name)
                .context("[peer_tls]")?;
            node.peer_tls = Some(peer_tls);
        }
        node.rack = self.rack.or(file.rack);
        node.zone = self.zone.or(file.zone);
        node.region = self.region.or(file.region);
        node.redis_cross_slot = file
            .redis
            .and_then(|r| r.cross_slot_transactions)
            .unwrap_or(false);
        Ok(ServerConfig {
            node,
            listen,
            tls,
            ui: ui_enabled,
            log: self
                .log
                .or(file.log)
                .unwrap_or_else(|| "info,openraft=error".into()),
        })
    }
}

fn acl_config(section: AclSection) -> anyhow::Result<trireme_cluster::AclConfig> {
    let default_policy = match section.default_policy.as_deref() {
        None => trireme_types::acl::DefaultPolicy::Allow,
        Some(text) => text.parse().map_err(|_| {
            anyhow::anyhow!(
                "[acl] default_policy (--acl-default-policy) must be \"allow\" or \"deny\", got {text:?}"
            )
        })?,
    };
    if let Some(token) = &section.initial_management_token
        && (token.is_empty()
            || token.len() > 256
            || !token.bytes().all(|b| b.is_ascii_graphic())
            || token == "anonymous")
    {
        bail!(
            "[acl] initial_management_token must be 1 to 256 printable ASCII characters without spaces"
        );
    }
    Ok(trireme_cluster::AclConfig {
        enabled: section.enabled.unwrap_or(false),
        default_policy,
        initial_management_token: section.initial_management_token,
    })
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

/// Parses `n1=127.0.0.1:7702,n2=db2.internal:7702,...`.
pub fn parse_initial_cluster(text: &str) -> anyhow::Result<Vec<(String, String)>> {
    let mut members = Vec::new();
    for item in text.split(',').filter(|s| !s.is_empty()) {
        let (id, addr) = item
            .split_once('=')
            .with_context(|| format!("--initial-cluster entry {item:?} is not ID=HOST:PORT"))?;
        validate_name(id)?;
        split_host_port(addr).with_context(|| {
            format!("--initial-cluster entry {item:?}: {addr:?} is not HOST:PORT")
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

    #[test]
    fn security_comes_from_the_tables_or_the_flags() {
        let dir = tempfile::tempdir().unwrap();
        let ca = trireme_tls::LocalCa::generate().unwrap();
        let ca_file = ca.write(dir.path()).unwrap();
        let (cert, key) = ca.write_node(dir.path(), "n1").unwrap();
        let path = dir.path().join("t.toml");
        // Relative paths in the file are read from the file's directory.
        let config = from_file(
            &path,
            "[acl]\nenabled = true\ndefault_policy = \"deny\"\n[tls]\ncert_file = \"n1.pem\"\nkey_file = \"n1-key.pem\"\n[peer_tls]\ncert_file = \"n1.pem\"\nkey_file = \"n1-key.pem\"\nca_file = \"ca.pem\"\n",
        )
        .unwrap();
        assert!(config.node.acl.enabled);
        assert_eq!(
            config.node.acl.default_policy,
            trireme_types::acl::DefaultPolicy::Deny
        );
        assert_eq!(config.tls.as_ref().unwrap().cert_file, cert);
        assert!(config.node.peer_tls.is_some());
        // The flags, without a file.
        let config = ServerArgs {
            acl_default_policy: Some("deny".into()),
            tls_cert_file: Some(cert.clone()),
            tls_key_file: Some(key.clone()),
            tls_ca_file: Some(ca_file.clone()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert!(config.node.acl.enabled);
        let tls = config.tls.unwrap();
        assert!(
            tls.verify_incoming,
            "a client CA means client certificates are required"
        );
        assert_eq!(tls.ca_file, Some(ca_file));
        for (args, named) in [
            (
                ServerArgs {
                    tls_cert_file: Some(cert.clone()),
                    ..Default::default()
                },
                "--tls-key-file",
            ),
            (
                ServerArgs {
                    acl_default_policy: Some("maybe".into()),
                    ..Default::default()
                },
                "--acl-default-policy",
            ),
        ] {
            let err = args.resolve().unwrap_err();
            assert!(format!("{err:#}").contains(named), "{err:#}");
        }
        let err = from_file(
            &path,
            "[peer_tls]\ncert_file = \"n1.pem\"\nkey_file = \"n1-key.pem\"\n",
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("ca_file"), "{err:#}");
        let err = from_file(
            &path,
            "[tls]\ncert_file = \"missing.pem\"\nkey_file = \"n1-key.pem\"\n",
        )
        .unwrap_err();
        assert!(format!("{err:#}").contains("missing.pem"), "{err:#}");
        // A peer certificate that names another node: every peer would refuse this one.
        ca.write_node(dir.path(), "n2").unwrap();
        let peer_tls =
            "[peer_tls]\ncert_file = \"n2.pem\"\nkey_file = \"n2-key.pem\"\nca_file = \"ca.pem\"\n";
        let err = from_file(&path, peer_tls).unwrap_err();
        assert!(
            format!("{err:#}").contains("does not name node n1 (node-n1.trireme)"),
            "{err:#}"
        );
        // A name a certificate cannot tell from another.
        let err = ServerArgs {
            config: Some(path.clone()),
            node_id: Some("N2".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap_err();
        assert!(format!("{err:#}").contains("lower case"), "{err:#}");
    }

    #[test]
    fn storage_cache_sizes_are_read_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("trireme.toml");
        let config = from_file(&path, "").unwrap();
        assert_eq!(config.node.storage.record_cache_bytes, 64 * 1024 * 1024);
        assert_eq!(config.node.storage.min_free_bytes, 256 * 1024 * 1024);
        assert_eq!(config.node.storage.member_index_bytes, 256 * 1024 * 1024);
        assert_eq!(config.node.storage.purge_rows_per_sec, 50_000);
        let config = from_file(
            &path,
            "[storage]\ncache_bytes = 16777216\nrecord_cache_bytes = 0\nmin_free_bytes = 0\nmember_index_bytes = 0\npurge_rows_per_sec = 0\n",
        )
        .unwrap();
        assert_eq!(config.node.storage.purge_rows_per_sec, 0);
        assert_eq!(config.node.storage.cache_bytes, 16 * 1024 * 1024);
        assert_eq!(config.node.storage.record_cache_bytes, 0);
        assert_eq!(config.node.storage.min_free_bytes, 0);
        assert_eq!(config.node.storage.member_index_bytes, 0);
        let err = from_file(&path, "[storage]\ncache_bytes = 5\n").unwrap_err();
        assert!(err.to_string().contains("cache_bytes"), "{err}");
        let err = from_file(&path, "[storage]\nblock_cache = 5\n").unwrap_err();
        assert!(format!("{err:#}").contains("block_cache"), "{err:#}");
    }

    #[test]
    fn cross_slot_redis_transactions_are_off_unless_turned_on() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        assert!(!from_file(&path, "").unwrap().node.redis_cross_slot);
        let on = "[redis]\ncross_slot_transactions = true\n";
        assert!(from_file(&path, on).unwrap().node.redis_cross_slot);
        let err = from_file(&path, "[redis]\ncross_slot = true\n").unwrap_err();
        assert!(format!("{err:#}").contains("cross_slot"), "{err:#}");
    }

    #[test]
    fn the_console_is_on_unless_turned_off() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        assert!(from_file(&path, "").unwrap().ui);
        assert!(from_file(&path, "[ui]\nenabled = true\n").unwrap().ui);
        assert!(!from_file(&path, "[ui]\nenabled = false\n").unwrap().ui);
        let err = from_file(&path, "[ui]\nport = 80\n").unwrap_err();
        assert!(format!("{err:#}").contains("port"), "{err:#}");
    }

    #[test]
    fn the_search_commit_interval_is_read_and_bounded() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        let config = from_file(&path, "").unwrap();
        assert_eq!(
            config.node.search_commit_interval,
            trireme_search::DEFAULT_COMMIT_INTERVAL
        );
        let config = from_file(&path, "[search]\ncommit_interval_ms = 250\n").unwrap();
        assert_eq!(
            config.node.search_commit_interval,
            Duration::from_millis(250)
        );
        for bad in ["0", "5", "60001"] {
            let err =
                from_file(&path, &format!("[search]\ncommit_interval_ms = {bad}\n")).unwrap_err();
            assert!(format!("{err:#}").contains("commit_interval_ms"), "{err:#}");
        }
        let err = from_file(&path, "[search]\nrefresh = 1\n").unwrap_err();
        assert!(format!("{err:#}").contains("refresh"), "{err:#}");
    }

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
        let members = parse_initial_cluster("n1=db1.internal:7702,n2=[::1]:7712").unwrap();
        assert_eq!(members[0].1, "db1.internal:7702");
        assert_eq!(members[1].1, "[::1]:7712");
        assert!(parse_initial_cluster("n1").is_err());
        assert!(parse_initial_cluster("n1=localhost").is_err());
        assert!(parse_initial_cluster("n1=bad_host!:7702").is_err());
        assert!(parse_initial_cluster("").is_err());
    }

    #[test]
    fn host_port_takes_ips_and_host_names_and_refuses_the_rest() {
        assert_eq!(
            split_host_port("127.0.0.1:7700").unwrap(),
            ("127.0.0.1", 7700)
        );
        assert_eq!(split_host_port("[::1]:7700").unwrap(), ("::1", 7700));
        assert_eq!(split_host_port("localhost:0").unwrap(), ("localhost", 0));
        assert_eq!(
            split_host_port("db1.internal:7702").unwrap(),
            ("db1.internal", 7702)
        );
        for bad in [
            "localhost",
            ":7700",
            "host:port",
            "host:70000",
            "::1:7700",
            "a..b:1",
            "-a:1",
            "sp ace:1",
        ] {
            assert!(split_host_port(bad).is_err(), "{bad} must be refused");
        }
    }

    #[test]
    fn listen_and_advertise_addresses() {
        let config = ServerArgs {
            http: Some("localhost:7700".into()),
            resp: Some("db1.internal:7701".into()),
            join: Some("db2.internal:7702".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(config.listen.http.bind, "localhost:7700");
        assert_eq!(config.node.http_addr, "localhost:7700");
        assert_eq!(config.node.resp_addr, "db1.internal:7701");
        assert_eq!(config.node.peer_addr, "127.0.0.1:7702");
        assert_eq!(config.node.join.as_deref(), Some("db2.internal:7702"));
        // Port 0 becomes the bound port; a host name is kept, an IP is the bound one.
        let local: std::net::SocketAddr = "127.0.0.1:4242".parse().unwrap();
        assert_eq!(config.listen.http.advertised(local), "localhost:4242");
        assert_eq!(config.listen.peer.advertised(local), "127.0.0.1:4242");

        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("t.toml");
        let config = from_file(
            &path,
            "http = \"0.0.0.0:7700\"\nadvertise_http = \"10.1.2.3:17700\"\n",
        )
        .unwrap();
        assert_eq!(config.listen.http.bind, "0.0.0.0:7700");
        assert_eq!(config.node.http_addr, "10.1.2.3:17700");
        let local: std::net::SocketAddr = "0.0.0.0:7700".parse().unwrap();
        assert_eq!(config.listen.http.advertised(local), "10.1.2.3:17700");

        // The flag wins over the file.
        let config = ServerArgs {
            config: Some(path.clone()),
            advertise_http: Some("db1.internal:80".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(config.node.http_addr, "db1.internal:80");
    }

    #[test]
    fn binding_every_interface_needs_an_advertise_address() {
        for (args, flag) in [
            (
                ServerArgs {
                    http: Some("0.0.0.0:7700".into()),
                    ..Default::default()
                },
                "--advertise-http",
            ),
            (
                ServerArgs {
                    resp: Some("[::]:7701".into()),
                    ..Default::default()
                },
                "--advertise-resp",
            ),
            (
                ServerArgs {
                    peer: Some("0.0.0.0:7702".into()),
                    advertise_http: Some("10.0.0.1:7700".into()),
                    ..Default::default()
                },
                "--advertise-peer",
            ),
        ] {
            let err = args.resolve().unwrap_err().to_string();
            assert!(err.contains(flag), "{err}");
            assert!(err.contains("every interface"), "{err}");
        }
        // An advertise address must be one others can dial.
        for bad in ["0.0.0.0:7700", "10.0.0.1:0", "nowhere"] {
            let err = ServerArgs {
                advertise_http: Some(bad.into()),
                ..Default::default()
            }
            .resolve()
            .unwrap_err();
            assert!(err.to_string().contains("--advertise-http"), "{bad}: {err}");
        }
        let config = ServerArgs {
            peer: Some("0.0.0.0:7702".into()),
            advertise_peer: Some("db1.internal:7702".into()),
            ..Default::default()
        }
        .resolve()
        .unwrap();
        assert_eq!(config.node.peer_addr, "db1.internal:7702");
    }
}
