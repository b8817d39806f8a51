//! The server processes of a run: real `trireme server` processes started inside the node
//! namespaces through `ip netns exec` (which replaces itself with the server, so the child's
//! PID is the server's), killed, paused, resumed and restarted by PID. The process handling
//! is `trireme-local`'s, shared with `trireme cluster up` and the integration tests; only
//! processes started here are ever signalled.

use std::path::{Path, PathBuf};

use trireme_local::{Membership, Output, ServerCommand, ServerProcess};

use crate::ChaosError;
use crate::lab::LabNode;
use crate::workload::Endpoint;

pub use trireme_local::NodeState;

/// HTTP, RESP and peer ports of every node (each node has its own address).
pub const HTTP_PORT: u16 = 7700;
/// See [`HTTP_PORT`].
pub const RESP_PORT: u16 = 7701;
/// See [`HTTP_PORT`].
pub const PEER_PORT: u16 = 7702;

/// Where the node of a lab slot stands in the cluster.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// Not started yet: it joins the running cluster when the run says so.
    Spare,
    /// In the cluster: restarted after a fault kills it.
    Member,
    /// Being drained: still restarted after a kill, until the cluster has removed it.
    Draining,
    /// Removed from the cluster (drained, or killed for good and removed by force): never
    /// started again. A replacement may take over the slot under a new name.
    Gone,
}

/// One server node of the run: a lab slot, and the node running in it.
#[derive(Debug)]
pub struct NodeProcess {
    /// Where it sits in the lab.
    pub lab: LabNode,
    /// Its HTTP port speaks TLS (a secure run).
    pub https: bool,
    /// The node's name in the cluster: the slot's name, or a replacement's new name.
    pub node_id: String,
    /// Where it stands in the cluster.
    pub role: Role,
    process: ServerProcess,
    log: PathBuf,
    /// How the node's last process ended, once reaped (`None` while it runs).
    last_exit: Option<std::process::ExitStatus>,
}

/// Settings shared by every node of a run.
#[derive(Debug, Clone)]
pub struct ServerSettings {
    /// The `trireme` executable.
    pub exe: PathBuf,
    /// Shards of the cluster.
    pub shards: u32,
    /// Directory holding each node's data dir, config and log.
    pub dir: PathBuf,
    /// Regions the lab slots are spread over, round-robin (`r1`, `r2`, ...); 0 or 1: no
    /// region labels.
    pub regions: u32,
    /// Short election timeouts and frequent snapshots, so that faults heal and snapshots
    /// are sent within a run; off, the servers' defaults (for measuring).
    pub chaos_timing: bool,
}

/// The region of lab slot `slot` when the nodes are spread over `regions` regions.
#[must_use]
pub fn region_of_slot(slot: usize, regions: u32) -> Option<String> {
    (regions > 1).then(|| format!("r{}", slot % regions as usize + 1))
}

/// The `[raft]` timing of chaos nodes: elections within a second, and snapshots often enough
/// that restarted nodes catch up by snapshot during a 30 s run.
const CONFIG: &str = "[raft]\n\
heartbeat_ms = 100\n\
election_timeout_min_ms = 500\n\
election_timeout_max_ms = 1000\n\
request_timeout_ms = 2000\n\
snapshot_every = 300\n\
keep_after_snapshot = 50\n\
[limits]\n\
session_ttl_min_ms = 1000\n";

impl NodeProcess {
    /// The node's HTTP base URL (reachable from the hub namespace).
    #[must_use]
    pub fn http_base(&self) -> String {
        let scheme = if self.https { "https" } else { "http" };
        format!("{scheme}://{}:{HTTP_PORT}", self.lab.ip)
    }

    /// The node's RESP address.
    #[must_use]
    pub fn resp_addr(&self) -> String {
        format!("{}:{RESP_PORT}", self.lab.ip)
    }

    /// The node as the clients address it.
    #[must_use]
    pub fn endpoint(&self) -> Endpoint {
        Endpoint {
            name: self.node_id.clone(),
            http_base: self.http_base(),
            resp_addr: self.resp_addr(),
        }
    }

    /// Current state.
    #[must_use]
    pub fn state(&self) -> NodeState {
        self.process.state()
    }

    /// Starts the server (no-op when it already runs); a restart after a kill reuses the
    /// node's data directory and flags.
    pub fn start(&mut self) -> Result<(), ChaosError> {
        self.last_exit = None;
        self.process.spawn().map(|_| ()).map_err(local_error)
    }

    /// Whether the cluster counts this node in: a member, or one being drained.
    #[must_use]
    pub fn in_cluster(&self) -> bool {
        matches!(self.role, Role::Member | Role::Draining)
    }

    /// Whether the process exited on its own (it is then reaped, and the state is Down).
    pub fn exited(&mut self) -> bool {
        if let Some(status) = self.process.try_reap() {
            self.last_exit = Some(status);
            return true;
        }
        self.state() == NodeState::Down
    }

    /// Whether the process exited on its own saying that the cluster removed its node
    /// ([`trireme_types::admin::EXIT_REMOVED`]): drained, or found removed when it started.
    /// Such a node is never started again.
    pub fn said_removed(&mut self) -> bool {
        self.exited()
            && self
                .last_exit
                .is_some_and(|s| s.code() == Some(i32::from(trireme_types::admin::EXIT_REMOVED)))
    }

    /// Starts the spare: it joins the cluster through the member at `peer`.
    pub fn join(&mut self, peer: &str) -> Result<(), ChaosError> {
        self.process.command_mut().membership = Membership::Join(peer.to_string());
        self.role = Role::Member;
        self.start()
    }

    /// Starts a new node named `node_id` in this slot, with an empty data directory under
    /// `dir`, joining the cluster through the member at `peer`. The slot's node must be gone.
    pub fn replace(&mut self, node_id: &str, dir: &Path, peer: &str) -> Result<(), ChaosError> {
        let _ = self.process.kill();
        let mut command = self.process.command().clone();
        command.node_id = node_id.to_string();
        command.data_dir = dir.join(node_id);
        command.membership = Membership::Join(peer.to_string());
        self.process = ServerProcess::new(command, Output::Append(self.log.clone()));
        self.last_exit = None;
        self.node_id = node_id.to_string();
        self.role = Role::Member;
        self.start()
    }

    /// The node's peer address, for a joining node to enter through.
    #[must_use]
    pub fn peer_addr(&self) -> String {
        format!("{}:{PEER_PORT}", self.lab.ip)
    }

    /// `kill -9`, then reaps the process.
    pub fn kill(&mut self) -> Result<(), ChaosError> {
        if let Some(status) = self.process.kill() {
            self.last_exit = Some(status);
        }
        Ok(())
    }

    /// SIGSTOP.
    pub fn pause(&mut self) -> Result<(), ChaosError> {
        self.process.pause().map_err(local_error)
    }

    /// SIGCONT.
    pub fn resume(&mut self) -> Result<(), ChaosError> {
        self.process.resume().map_err(local_error)
    }

    /// The server log (all starts appended).
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

/// Prepares (but does not start) one process per lab node, with its config written to
/// `settings.dir`. The last `spares` slots are spares: not in the initial cluster, they join
/// it through the first node when started.
pub fn prepare(
    lab_nodes: &[LabNode],
    settings: &ServerSettings,
    spares: usize,
) -> Result<Vec<NodeProcess>, ChaosError> {
    let founders = lab_nodes.len().saturating_sub(spares);
    let initial_cluster = lab_nodes[..founders]
        .iter()
        .map(|n| format!("{}={}:{PEER_PORT}", n.name, n.ip))
        .collect::<Vec<_>>()
        .join(",");
    let config = settings.dir.join("node.toml");
    let security = crate::secure::current();
    let timing = if settings.chaos_timing { CONFIG } else { "" };
    let text = match &security {
        Some(security) => format!("{timing}{}", security.config),
        None => timing.to_string(),
    };
    std::fs::write(&config, text).map_err(|e| ChaosError::io(config.display(), e))?;
    Ok(lab_nodes
        .iter()
        .enumerate()
        .map(|(slot, lab)| {
            let mut command =
                ServerCommand::new(&settings.exe, &lab.name, settings.dir.join(&lab.name));
            command.wrapper = ["ip", "netns", "exec", &lab.netns]
                .map(str::to_string)
                .to_vec();
            command.http = format!("{}:{HTTP_PORT}", lab.ip);
            command.resp = format!("{}:{RESP_PORT}", lab.ip);
            command.peer = format!("{}:{PEER_PORT}", lab.ip);
            let spare = slot >= founders;
            command.membership = if spare {
                Membership::Join(format!("{}:{PEER_PORT}", lab_nodes[0].ip))
            } else {
                Membership::Bootstrap(initial_cluster.clone())
            };
            command.shards = Some(settings.shards);
            command.config = Some(config.clone());
            command.log = Some("info,openraft=warn".into());
            if let Some(region) = region_of_slot(slot, settings.regions) {
                command.extra = vec!["--region".into(), region];
            }
            let log = settings.dir.join(format!("{}.log", lab.name));
            NodeProcess {
                https: security.is_some(),
                lab: lab.clone(),
                node_id: lab.name.clone(),
                role: if spare { Role::Spare } else { Role::Member },
                // Dropping it SIGKILLs the server, a paused one too: no server outlives its run.
                process: ServerProcess::new(command, Output::Append(log.clone())),
                log,
                last_exit: None,
            }
        })
        .collect())
}

/// A failure of the process supervisor, in the runner's terms.
fn local_error(e: trireme_local::Error) -> ChaosError {
    match e {
        trireme_local::Error::Spawn { command, source } => ChaosError::Command {
            command,
            message: source.to_string(),
        },
        other => ChaosError::Cluster(other.to_string()),
    }
}
