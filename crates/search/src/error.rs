//! The one error type of this crate.

use trireme_types::{ErrorCode, TriremeError};

/// What can go wrong in a search or in keeping an index.
#[derive(Debug, thiserror::Error)]
pub enum SearchError {
    /// The query is not one this language reads; the message names the construct.
    #[error("query {query:?}: {problem}")]
    Syntax { query: String, problem: String },
    /// The request asks for something the index will not do (a sort on a field of mixed
    /// types, a page too deep); the message says what.
    #[error("{0}")]
    Refused(String),
    /// The index could not be read or written.
    #[error("search index: {0}")]
    Index(#[from] tantivy::TantivyError),
    /// The shard's data could not be read while rebuilding its index.
    #[error("search index: reading the shard: {0}")]
    Storage(#[from] trireme_storage::StorageError),
    /// The shard has no index on this node (not a replica here, or being dropped).
    #[error("no search index for this shard here")]
    NoIndex,
}

impl SearchError {
    /// The error a client is shown.
    pub fn to_client(&self) -> TriremeError {
        match self {
            SearchError::Syntax { .. } | SearchError::Refused(_) => {
                TriremeError::new(ErrorCode::InvalidArgument, self.to_string())
            }
            SearchError::NoIndex => TriremeError::new(ErrorCode::Unavailable, self.to_string()),
            SearchError::Index(_) | SearchError::Storage(_) => {
                TriremeError::new(ErrorCode::Internal, self.to_string())
            }
        }
    }
}
