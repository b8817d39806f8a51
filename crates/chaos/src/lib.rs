//! The chaos runner: a Trireme cluster whose nodes each live in their own network namespace,
//! concurrent clients recording a history of every operation, faults injected on a schedule
//! drawn from a printed seed, and at the end a linearizability check (the Go checker under
//! `chaos/checker`, built on porcupine) plus a durability check over every replica.
//!
//! The path of one run, file by file:
//! - [`lab`]: namespaces, veth pairs and a bridge, all created by the run and removed after it;
//!   iptables rules inside the node namespaces for partitions and packet loss.
//! - [`nodes`]: real `trireme server` processes started in the namespaces; kill -9, SIGSTOP,
//!   SIGCONT and restart, by PID, through the `trireme-local` supervisor.
//! - [`delay`]: user-space proxies on the peer links, for delay faults.
//! - [`schedule`]: the fault plan, a pure function of the seed.
//! - [`workload`]: clients over HTTP (Consul KV) and RESP, each operation recorded in
//!   [`history`] with its invocation and completion times; [`txns`]: clients of Consul
//!   transactions over groups of keys; [`locks`]: clients that take Consul locks with
//!   sessions, and sometimes stall while holding one.
//! - [`elastic`]: splits and membership changes (join, drain, replace) between the faults.
//! - [`mod@run`]: drives one run and its verification ([`verify`]).
//! - [`mod@hold`]: the same lab without faults, held up while one command (a benchmark)
//!   runs against it.

#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

pub mod delay;
pub mod elastic;
pub mod history;
pub mod hold;
pub mod lab;
pub mod locks;
pub mod nodes;
pub mod run;
pub mod schedule;
pub mod secure;
pub mod txns;
pub mod verify;
pub mod workload;

pub use hold::{HoldConfig, hold};
pub use run::{ChaosConfig, RunSummary, run};
pub use schedule::FaultKind;

/// Everything that can stop a chaos run from producing a verdict. A verdict of "not
/// linearizable" is not an error: it is part of [`RunSummary`].
#[derive(Debug, thiserror::Error)]
pub enum ChaosError {
    /// A command the lab depends on (`ip`, `iptables`, `go`) failed or is missing.
    #[error("{command}: {message}")]
    Command {
        /// The command line, for the reader to retry by hand.
        command: String,
        /// Its stderr, or why it could not start.
        message: String,
    },
    /// A file of the run could not be read or written.
    #[error("{path}: {source}")]
    Io {
        /// The file or directory.
        path: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The cluster did not reach the state the run waits for (started, healed, converged).
    #[error("{0}")]
    Cluster(String),
    /// The run was configured with values it cannot use.
    #[error("{0}")]
    Config(String),
}

impl ChaosError {
    pub(crate) fn io(path: impl std::fmt::Display, source: std::io::Error) -> Self {
        ChaosError::Io {
            path: path.to_string(),
            source,
        }
    }
}
