use trireme_types::{ErrorCode, TriremeError};

/// What can go wrong in storage.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The tables holding the rows reported an error.
    #[error("tables: {0}")]
    Tables(#[from] lsm_tree::Error),
    /// The Raft log store reported an error.
    #[error("raft log: {0}")]
    Log(#[from] raft_engine::Error),
    /// A file operation failed.
    #[error("io: {0}")]
    Io(#[from] std::io::Error),
    /// Stored bytes could not be decoded.
    #[error("corrupt data: {0}")]
    Corrupt(String),
    /// An earlier sync failed; this store no longer accepts writes.
    #[error("storage is poisoned after a failed sync; the node must be restarted")]
    Poisoned,
    /// The group-commit thread is gone (the store is shutting down).
    #[error("storage is shutting down")]
    Closed,
    /// The data directory is in a format this build does not read (the message says which
    /// and what to do).
    #[error("{0}")]
    Format(String),
}

impl From<trireme_types::record::CorruptRecord> for StorageError {
    fn from(e: trireme_types::record::CorruptRecord) -> Self {
        StorageError::Corrupt(e.to_string())
    }
}

impl From<StorageError> for TriremeError {
    fn from(e: StorageError) -> Self {
        let code = match e {
            StorageError::Closed => ErrorCode::Unavailable,
            _ => ErrorCode::StorageFailure,
        };
        TriremeError::new(code, e.to_string())
    }
}
