use crate::TypeConfig;
use openraft::errors::{ClientWriteError, Fatal, LinearizableReadError, RaftError};
use trireme_types::{ErrorCode, ShardId, TriremeError};

/// What can go wrong between a request and a shard's Raft group.
#[derive(Debug, thiserror::Error)]
pub enum RaftLayerError {
    /// This node does not lead the group; the leader, if known, is named.
    #[error("not the leader of shard {shard}; leader is {leader:?}")]
    NotLeader {
        /// The shard.
        shard: ShardId,
        /// The leader's node name and HTTP address, if known.
        leader: Option<crate::PeerNode>,
    },
    /// Leadership could not be confirmed (no quorum reached in time).
    #[error("shard {shard} could not confirm its leader: {reason}")]
    NoQuorum {
        /// The shard.
        shard: ShardId,
        /// What openraft said.
        reason: String,
    },
    /// The group has stopped (shutdown or a fatal storage error).
    #[error("shard {shard} is not running: {reason}")]
    Stopped {
        /// The shard.
        shard: ShardId,
        /// Why.
        reason: String,
    },
    /// The write's entry was appended here, then dropped from this node's log when it followed
    /// another leader; another node may still commit it. Unlike `NotLeader` (refused before it
    /// was appended), retrying it could apply it twice.
    #[error(
        "shard {shard}: the write's log entry was discarded on a leader change; it may or may not have been applied ({reason})"
    )]
    OutcomeUnknown {
        /// The shard.
        shard: ShardId,
        /// What openraft said.
        reason: String,
    },
    /// The request did not finish in time; it may or may not have been applied.
    #[error(
        "shard {shard}: no answer within {millis} ms; the write may or may not have been applied"
    )]
    Timeout {
        /// The shard.
        shard: ShardId,
        /// The time limit.
        millis: u64,
    },
    /// Storage failed.
    #[error(transparent)]
    Storage(#[from] trireme_storage::StorageError),
    /// openraft refused a setup call (initialize, membership).
    #[error("raft: {0}")]
    Setup(String),
    /// Something failed while serving that a client cannot fix (a task died, a state that
    /// should not occur); unlike `Setup`, not a problem with how the group was set up.
    #[error("raft: {0}")]
    Internal(String),
}

impl RaftLayerError {
    pub(crate) fn from_write(
        shard: ShardId,
        e: RaftError<TypeConfig, ClientWriteError<TypeConfig>>,
    ) -> Self {
        match e {
            RaftError::APIError(ClientWriteError::ForwardToLeader(f)) => {
                RaftLayerError::NotLeader {
                    shard,
                    leader: f.leader_node,
                }
            }
            RaftError::APIError(discarded @ ClientWriteError::LogEntryDiscarded(_)) => {
                RaftLayerError::OutcomeUnknown {
                    shard,
                    reason: discarded.to_string(),
                }
            }
            RaftError::APIError(other) => RaftLayerError::NoQuorum {
                shard,
                reason: other.to_string(),
            },
            RaftError::Fatal(fatal) => Self::from_fatal(shard, fatal),
        }
    }

    pub(crate) fn from_read(
        shard: ShardId,
        e: RaftError<TypeConfig, LinearizableReadError<TypeConfig>>,
    ) -> Self {
        match e {
            RaftError::APIError(LinearizableReadError::ForwardToLeader(f)) => {
                RaftLayerError::NotLeader {
                    shard,
                    leader: f.leader_node,
                }
            }
            RaftError::APIError(other) => RaftLayerError::NoQuorum {
                shard,
                reason: other.to_string(),
            },
            RaftError::Fatal(fatal) => Self::from_fatal(shard, fatal),
        }
    }

    /// The same error again, for every writer of a failed batch.
    pub(crate) fn duplicate(&self) -> Self {
        match self {
            RaftLayerError::NotLeader { shard, leader } => RaftLayerError::NotLeader {
                shard: *shard,
                leader: leader.clone(),
            },
            RaftLayerError::NoQuorum { shard, reason } => RaftLayerError::NoQuorum {
                shard: *shard,
                reason: reason.clone(),
            },
            RaftLayerError::Stopped { shard, reason } => RaftLayerError::Stopped {
                shard: *shard,
                reason: reason.clone(),
            },
            RaftLayerError::OutcomeUnknown { shard, reason } => RaftLayerError::OutcomeUnknown {
                shard: *shard,
                reason: reason.clone(),
            },
            RaftLayerError::Timeout { shard, millis } => RaftLayerError::Timeout {
                shard: *shard,
                millis: *millis,
            },
            RaftLayerError::Storage(e) => RaftLayerError::Internal(format!("storage: {e}")),
            RaftLayerError::Setup(m) => RaftLayerError::Setup(m.clone()),
            RaftLayerError::Internal(m) => RaftLayerError::Internal(m.clone()),
        }
    }

    pub(crate) fn from_fatal(shard: ShardId, fatal: Fatal<TypeConfig>) -> Self {
        RaftLayerError::Stopped {
            shard,
            reason: fatal.to_string(),
        }
    }
}

impl RaftLayerError {
    /// The code a client sees: 503 when the write certainly was not applied, 504 when it may
    /// have been.
    pub fn code(&self) -> ErrorCode {
        match self {
            RaftLayerError::NotLeader { .. } | RaftLayerError::NoQuorum { .. } => {
                ErrorCode::NoLeader
            }
            RaftLayerError::Stopped { .. } => ErrorCode::Unavailable,
            RaftLayerError::OutcomeUnknown { .. } | RaftLayerError::Timeout { .. } => {
                ErrorCode::Timeout
            }
            RaftLayerError::Storage(_) => ErrorCode::StorageFailure,
            RaftLayerError::Setup(_) | RaftLayerError::Internal(_) => ErrorCode::Internal,
        }
    }
}

impl From<RaftLayerError> for TriremeError {
    fn from(e: RaftLayerError) -> Self {
        TriremeError::new(e.code(), e.to_string())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use openraft::errors::ForwardToLeader;

    #[test]
    fn a_write_refused_before_its_append_may_be_retried_a_discarded_one_may_not() {
        let refused = RaftLayerError::from_write(
            ShardId(7),
            RaftError::APIError(ClientWriteError::ForwardToLeader(ForwardToLeader::empty())),
        );
        assert!(matches!(
            refused,
            RaftLayerError::NotLeader {
                shard: ShardId(7),
                ..
            }
        ));
        assert_eq!(TriremeError::from(refused).code, ErrorCode::NoLeader);

        let discarded = RaftLayerError::from_write(
            ShardId(7),
            RaftError::APIError(ClientWriteError::LogEntryDiscarded(ForwardToLeader::empty())),
        );
        assert!(
            matches!(
                discarded,
                RaftLayerError::OutcomeUnknown {
                    shard: ShardId(7),
                    ..
                }
            ),
            "{discarded:?}"
        );
        assert!(
            discarded
                .to_string()
                .contains("may or may not have been applied")
        );
        let to_client = TriremeError::from(discarded.duplicate());
        assert_eq!(to_client.code, ErrorCode::Timeout, "504: outcome unknown");
    }

    #[test]
    fn a_failure_while_serving_is_internal() {
        let died = RaftLayerError::Internal("the proposal task died".into());
        assert_eq!(died.duplicate().code(), ErrorCode::Internal);
        assert_eq!(died.to_string(), "raft: the proposal task died");
    }
}
