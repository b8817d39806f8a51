//! The one error type of the crate.

/// Why a node or a local cluster could not be started, checked, signalled or stopped. The
/// messages are meant for a person at a terminal: they name the node, the port or the file,
/// and for a node that did not come up they end with the last lines of its log.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// A check made before anything starts failed: the ports do not fit or are in use, the
    /// directory holds other nodes, there is no running cluster to add a node to.
    #[error("{0}")]
    Refused(String),
    /// A file or directory of the cluster could not be read or written.
    #[error("{what}: {source}")]
    Io {
        /// The file and what was being done with it.
        what: String,
        /// The underlying error.
        source: std::io::Error,
    },
    /// The server process could not be started at all.
    #[error("cannot run {command}: {source}")]
    Spawn {
        /// The command line, as far as it helps a reader retry it.
        command: String,
        /// Why the operating system refused.
        source: std::io::Error,
    },
    /// A signal could not be delivered to a process this crate started.
    #[error("cannot send {signal} to process {pid}: {source}")]
    Signal {
        /// The signal, e.g. `SIGSTOP`.
        signal: String,
        /// The process.
        pid: u32,
        /// The underlying error.
        source: std::io::Error,
    },
    /// A node exited during start-up, or the nodes did not serve within the time allowed.
    #[error("{0}")]
    NotReady(String),
    /// A stop did not go cleanly: a node had to be killed or exited with an error.
    #[error("{0}")]
    Unclean(String),
    /// `cluster.json` could not be encoded or decoded.
    #[error("{path}: {source}")]
    Manifest {
        /// The file.
        path: String,
        /// What serde said.
        source: serde_json::Error,
    },
    /// The HTTP client used for readiness checks could not be built.
    #[error("cannot set up the HTTP client: {0}")]
    Http(#[from] reqwest::Error),
}

impl Error {
    pub(crate) fn io(what: impl std::fmt::Display, source: std::io::Error) -> Self {
        Error::Io {
            what: what.to_string(),
            source,
        }
    }
}

/// The crate's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
