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
    /// A read met an intent of a transaction across shards on this key (see
    /// [`trireme_types::txn`]): its value is about to change or stay, which only the
    /// transaction's record says.
    #[error("key {} is held by a transaction in progress", hex_key(.0))]
    InTransaction(bytes::Bytes),
}

/// A key in the message of [`StorageError::InTransaction`]: the node that reads it back
/// waits for that key (see [`key_in_transaction`]).
fn hex_key(key: &[u8]) -> String {
    key.iter().map(|b| format!("{b:02x}")).collect()
}

/// The key a [`ErrorCode::KeyInTransaction`] error names, read back from its message (the
/// error crosses the peer link as a code and a message).
pub fn key_in_transaction(error: &TriremeError) -> Option<bytes::Bytes> {
    if error.code != ErrorCode::KeyInTransaction {
        return None;
    }
    let hex = error.message.strip_prefix("key ")?.split(' ').next()?;
    if hex.len() % 2 != 0 {
        return None;
    }
    (0..hex.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(hex.get(i..i + 2)?, 16).ok())
        .collect::<Option<Vec<u8>>>()
        .map(bytes::Bytes::from)
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
            StorageError::InTransaction(_) => ErrorCode::KeyInTransaction,
            _ => ErrorCode::StorageFailure,
        };
        TriremeError::new(code, e.to_string())
    }
}
