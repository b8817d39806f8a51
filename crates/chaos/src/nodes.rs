//! The server processes of a run: real `trireme server` processes started inside the node
//! namespaces (`ip netns exec` replaces itself with the server, so the child's PID is the
//! server's), killed, paused, resumed and restarted by PID. Only processes started here are
//! ever signalled.

use std::fs::OpenOptions;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};

use rustix::process::{Pid, Signal, kill_process};

use crate::ChaosError;
use crate::lab::LabNode;

/// HTTP, RESP and peer ports of every node (each node has its own address).
pub const HTTP_PORT: u16 = 7700;
/// See [`HTTP_PORT`].
pub const RESP_PORT: u16 = 7701;
/// See [`HTTP_PORT`].
pub const PEER_PORT: u16 = 7702;

/// How a node's process stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Running and not paused.
    Up,
    /// Stopped with SIGSTOP.
    Paused,
    /// Killed (or never started).
    Down,
}

/// One server node of the run.
#[derive(Debug)]
pub struct NodeProcess {
    /// Where it sits in the lab.
    pub lab: LabNode,
    child: Option<Child>,
    paused: bool,
    args: Vec<String>,
    log: PathBuf,
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
}

/// The `[raft]` timing of chaos nodes: elections within a second, and snapshots often enough
/// that restarted nodes catch up by snapshot during a 30 s run.
const CONFIG: &str = "[raft]\n\
heartbeat_ms = 100\n\
election_timeout_min_ms = 500\n\
election_timeout_max_ms = 1000\n\
request_timeout_ms = 2000\n\
snapshot_every = 300\n\
keep_after_snapshot = 50\n";

impl NodeProcess {
    /// The node's HTTP base URL (reachable from the hub namespace).
    #[must_use]
    pub fn http_base(&self) -> String {
        format!("http://{}:{HTTP_PORT}", self.lab.ip)
    }

    /// The node's RESP address.
    #[must_use]
    pub fn resp_addr(&self) -> String {
        format!("{}:{RESP_PORT}", self.lab.ip)
    }

    /// Current state.
    #[must_use]
    pub fn state(&self) -> NodeState {
        match (&self.child, self.paused) {
            (None, _) => NodeState::Down,
            (Some(_), true) => NodeState::Paused,
            (Some(_), false) => NodeState::Up,
        }
    }

    /// Starts the server (no-op when it already runs).
    pub fn start(&mut self) -> Result<(), ChaosError> {
        if self.child.is_some() {
            return Ok(());
        }
        let log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .map_err(|e| ChaosError::io(self.log.display(), e))?;
        let log_err = log
            .try_clone()
            .map_err(|e| ChaosError::io(self.log.display(), e))?;
        let child = Command::new("ip")
            .args(["netns", "exec", &self.lab.netns])
            .args(&self.args)
            .stdin(Stdio::null())
            .stdout(log)
            .stderr(log_err)
            .spawn()
            .map_err(|e| ChaosError::Command {
                command: format!("ip netns exec {} trireme server", self.lab.netns),
                message: e.to_string(),
            })?;
        self.child = Some(child);
        self.paused = false;
        Ok(())
    }

    fn signal(&self, signal: Signal) -> Result<(), ChaosError> {
        let Some(child) = &self.child else {
            return Ok(());
        };
        let pid = i32::try_from(child.id())
            .ok()
            .and_then(Pid::from_raw)
            .ok_or_else(|| ChaosError::Cluster(format!("bad pid {}", child.id())))?;
        kill_process(pid, signal).map_err(|e| ChaosError::Command {
            command: format!("kill -{signal:?} {}", child.id()),
            message: e.to_string(),
        })
    }

    /// `kill -9`, then reaps the process.
    pub fn kill(&mut self) -> Result<(), ChaosError> {
        if self.child.is_none() {
            return Ok(());
        }
        self.signal(Signal::KILL)?;
        if let Some(mut child) = self.child.take() {
            let _ = child.wait();
        }
        self.paused = false;
        Ok(())
    }

    /// SIGSTOP.
    pub fn pause(&mut self) -> Result<(), ChaosError> {
        if self.child.is_some() && !self.paused {
            self.signal(Signal::STOP)?;
            self.paused = true;
        }
        Ok(())
    }

    /// SIGCONT.
    pub fn resume(&mut self) -> Result<(), ChaosError> {
        if self.paused {
            self.signal(Signal::CONT)?;
            self.paused = false;
        }
        Ok(())
    }

    /// The server log (all starts appended).
    #[must_use]
    pub fn log_path(&self) -> &Path {
        &self.log
    }
}

impl Drop for NodeProcess {
    fn drop(&mut self) {
        // SIGKILL ends a stopped process too; no server outlives its run.
        let _ = self.kill();
    }
}

/// Prepares (but does not start) one process per lab node, with its config written to
/// `settings.dir`.
pub fn prepare(
    lab_nodes: &[LabNode],
    settings: &ServerSettings,
) -> Result<Vec<NodeProcess>, ChaosError> {
    let initial_cluster = lab_nodes
        .iter()
        .map(|n| format!("{}={}:{PEER_PORT}", n.name, n.ip))
        .collect::<Vec<_>>()
        .join(",");
    let config = settings.dir.join("node.toml");
    std::fs::write(&config, CONFIG).map_err(|e| ChaosError::io(config.display(), e))?;
    let exe = settings.exe.display().to_string();
    Ok(lab_nodes
        .iter()
        .map(|lab| {
            let args = vec![
                exe.clone(),
                "server".into(),
                "--config".into(),
                config.display().to_string(),
                "--node-id".into(),
                lab.name.clone(),
                "--data-dir".into(),
                settings.dir.join(&lab.name).display().to_string(),
                "--http".into(),
                format!("{}:{HTTP_PORT}", lab.ip),
                "--resp".into(),
                format!("{}:{RESP_PORT}", lab.ip),
                "--peer".into(),
                format!("{}:{PEER_PORT}", lab.ip),
                "--initial-cluster".into(),
                initial_cluster.clone(),
                "--shards".into(),
                settings.shards.to_string(),
                "--log".into(),
                "info,openraft=warn".into(),
            ];
            NodeProcess {
                lab: lab.clone(),
                child: None,
                paused: false,
                args,
                log: settings.dir.join(format!("{}.log", lab.name)),
            }
        })
        .collect())
}
