use trireme_raft::RaftLayerError;
use trireme_storage::StorageError;
use trireme_types::{ErrorCode, TriremeError};

/// What can go wrong in the router or while starting a node.
#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    /// The request itself is not acceptable (limits, arguments).
    #[error(transparent)]
    Request(#[from] TriremeError),
    /// The shard's Raft group could not serve it.
    #[error(transparent)]
    Raft(#[from] RaftLayerError),
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
    /// The node that served a forwarded request answered with this error.
    #[error("{0}")]
    Remote(TriremeError),
    /// The node cannot start with this configuration or data directory. Start-up only: a
    /// failure while serving is [`ClusterError::Internal`].
    #[error("{0}")]
    Config(String),
    /// This node was removed from the cluster (drained, or removed by force while it was
    /// away): it must not serve, and its data directory is refused from now on. The server
    /// exits with [`trireme_types::admin::EXIT_REMOVED`].
    #[error("{0}")]
    Removed(String),
    /// A failure of this node's own making while serving a request: a task that died, an
    /// answer whose shape does not match the request. A bug, not the client's doing.
    #[error("internal error: {0}")]
    Internal(String),
}

impl ClusterError {
    /// The client-visible form of this error.
    pub fn to_client(&self) -> TriremeError {
        match self {
            ClusterError::Request(e) | ClusterError::Remote(e) => e.clone(),
            ClusterError::Raft(e) => TriremeError::new(e.code(), e.to_string()),
            ClusterError::Storage(e @ StorageError::InTransaction(_)) => {
                TriremeError::new(ErrorCode::KeyInTransaction, e.to_string())
            }
            ClusterError::Storage(e) => TriremeError::new(ErrorCode::StorageFailure, e.to_string()),
            ClusterError::Config(m) | ClusterError::Removed(m) => {
                TriremeError::new(ErrorCode::Internal, m.clone())
            }
            ClusterError::Internal(_) => TriremeError::new(ErrorCode::Internal, self.to_string()),
        }
    }
}

impl From<trireme_search::SearchError> for ClusterError {
    fn from(e: trireme_search::SearchError) -> Self {
        match e {
            trireme_search::SearchError::Storage(e) => ClusterError::Storage(e),
            other => ClusterError::Request(other.to_client()),
        }
    }
}
