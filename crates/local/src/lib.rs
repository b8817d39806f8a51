//! Supervision of local `trireme server` processes: the one place that spawns real servers,
//! waits until they serve, signals, restarts and stops them. `trireme cluster up` and
//! `cluster add`, the embedded cluster of `trireme bench`, the integration tests' harness and
//! the chaos runner all go through it, so they agree on flags, readiness and how a node is
//! stopped.
//!
//! Two layers:
//! - [`ServerCommand`] and [`ServerProcess`]: one server's command line (optionally behind a
//!   wrapper such as `ip netns exec NS`), and its process: spawn, wait until it serves
//!   (`endpoints.json`, `GET /v1/health`), SIGSTOP/SIGCONT, kill -9, stop (SIGTERM, then
//!   SIGKILL after a grace period), restart on the same data. Log tails go into errors.
//! - [`LocalCluster`]: N nodes on loopback under one directory with a fixed port layout, the
//!   checks made before anything starts (ports in use, a directory of other nodes), readiness
//!   of the whole cluster (every node healthy, every shard led), `cluster.json`, and nodes
//!   added to a running cluster with `--join` ([`LocalCluster::add_node`] in process,
//!   [`add_to_running`] from another process).
//!
//! Processes are signalled only by the PIDs started here; a PID read back from
//! `cluster.json` is signalled only once `/proc/PID/cmdline` shows it is the server of the
//! data directory it was recorded for. Unix only.

#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod cluster;
pub mod command;
mod error;
pub mod logs;
pub mod process;
pub mod secure;

pub use cluster::{
    AddOptions, ClusterOptions, DEFAULT_BASE_PORT, ExitedNode, LocalCluster, LocalNode, Manifest,
    ServerFlags, add_to_running,
};
pub use command::{Membership, ServerCommand};
pub use error::{Error, Result};
pub use process::{
    Endpoints, NodeState, Output, ServerProcess, StopOutcome, http_client, process_alive,
    read_endpoints, runs_server_for,
};
pub use rustix::process::Signal;
