//! Error codes a client can see, and the one mapping from a code to an HTTP status and a RESP
//! error prefix. Library crates have their own error enums; each maps onto an [`ErrorCode`].

use serde::{Deserialize, Serialize};
use std::fmt;

/// A stable code for what went wrong. Clients and tests match on the code, not on the message.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum ErrorCode {
    /// The request is malformed or an argument is invalid.
    InvalidArgument,
    /// A key is longer than the configured limit.
    KeyTooLarge,
    /// A value is longer than the configured limit.
    ValueTooLarge,
    /// A request body or frame is larger than the configured limit.
    RequestTooLarge,
    /// The value is not an integer.
    NotInteger,
    /// An integer operation would overflow.
    Overflow,
    /// The key's shard has no leader reachable from here right now.
    NoLeader,
    /// The request did not complete in time; it may or may not have taken effect.
    Timeout,
    /// The node's storage failed; it has stopped serving writes.
    StorageFailure,
    /// The node is shutting down or not ready yet.
    Unavailable,
    /// A bug or an unexpected condition.
    Internal,
    /// The thing asked for does not exist (a document API read; the Consul API answers a
    /// missing key with a bare 404 of its own).
    NotFound,
    /// A conditional write's condition did not hold (`If-Match`, `If-None-Match`).
    PreconditionFailed,
    /// The request conflicts with the cluster's state or with a change made meanwhile (an
    /// operator command that would break the cluster, or raced with another); nothing changed.
    Conflict,
    /// The key's slots moved to another shard (a split) and this node's routing has not caught
    /// up yet; nothing changed, and the request can be sent again.
    Moved,
    /// A lock was asked for with a Consul session that does not exist or has ended; answered
    /// with 500, as Consul does.
    InvalidSession,
    /// The key holds a value of another type than the command works on (Redis's
    /// `WRONGTYPE`): a string command on a hash, a hash command on a string.
    WrongType,
    /// The request's ACL token is unknown (or was deleted): Consul's 403 "ACL not found".
    AclNotFound,
    /// The request's ACL token lacks the right it needs: Consul's 403 "Permission denied",
    /// Redis's `NOPERM`.
    PermissionDenied,
    /// The node that would write it keeps too little disk free: nothing was written, and
    /// writes resume once space is freed. HTTP 507; Redis's `MISCONF`, which it answers when
    /// it cannot write its append-only file.
    DiskFull,
    /// The key holds an intent of a transaction across shards that is being committed or
    /// aborted: nothing was done, and the request can be sent again. Nodes wait for the
    /// intent and retry by themselves; a client sees this only when the wait ran out.
    KeyInTransaction,
}

impl ErrorCode {
    /// The HTTP status for this code.
    pub fn http_status(self) -> u16 {
        match self {
            ErrorCode::InvalidArgument
            | ErrorCode::KeyTooLarge
            | ErrorCode::NotInteger
            | ErrorCode::Overflow => 400,
            ErrorCode::ValueTooLarge | ErrorCode::RequestTooLarge => 413,
            ErrorCode::NoLeader
            | ErrorCode::Unavailable
            | ErrorCode::StorageFailure
            | ErrorCode::Moved
            | ErrorCode::KeyInTransaction => 503,
            ErrorCode::Timeout => 504,
            ErrorCode::Internal | ErrorCode::InvalidSession => 500,
            ErrorCode::NotFound => 404,
            ErrorCode::PreconditionFailed => 412,
            ErrorCode::Conflict | ErrorCode::WrongType => 409,
            ErrorCode::AclNotFound | ErrorCode::PermissionDenied => 403,
            ErrorCode::DiskFull => 507,
        }
    }

    /// The first word of a RESP error reply (`-ERR ...`, `-TRYAGAIN ...`).
    ///
    /// `TRYAGAIN` only when the command certainly did not take effect: Redis Cluster clients
    /// retry it on their own. A command that may have been applied gets `TIMEOUT`, which they
    /// pass to the caller, so that an `INCR` is not silently applied twice.
    pub fn resp_prefix(self) -> &'static str {
        match self {
            ErrorCode::NoLeader
            | ErrorCode::Unavailable
            | ErrorCode::Moved
            | ErrorCode::KeyInTransaction => "TRYAGAIN",
            ErrorCode::Timeout => "TIMEOUT",
            ErrorCode::StorageFailure => "IOERR",
            ErrorCode::WrongType => "WRONGTYPE",
            ErrorCode::PermissionDenied => "NOPERM",
            ErrorCode::DiskFull => "MISCONF",
            _ => "ERR",
        }
    }

    /// A stable snake_case name, used in JSON error bodies and metrics.
    pub fn as_str(self) -> &'static str {
        match self {
            ErrorCode::InvalidArgument => "invalid_argument",
            ErrorCode::KeyTooLarge => "key_too_large",
            ErrorCode::ValueTooLarge => "value_too_large",
            ErrorCode::RequestTooLarge => "request_too_large",
            ErrorCode::NotInteger => "not_integer",
            ErrorCode::Overflow => "overflow",
            ErrorCode::NoLeader => "no_leader",
            ErrorCode::Timeout => "timeout",
            ErrorCode::StorageFailure => "storage_failure",
            ErrorCode::Unavailable => "unavailable",
            ErrorCode::Internal => "internal",
            ErrorCode::NotFound => "not_found",
            ErrorCode::PreconditionFailed => "precondition_failed",
            ErrorCode::Conflict => "conflict",
            ErrorCode::Moved => "moved",
            ErrorCode::InvalidSession => "invalid_session",
            ErrorCode::WrongType => "wrong_type",
            ErrorCode::AclNotFound => "acl_not_found",
            ErrorCode::PermissionDenied => "permission_denied",
            ErrorCode::DiskFull => "disk_full",
            ErrorCode::KeyInTransaction => "key_in_transaction",
        }
    }
}

impl fmt::Display for ErrorCode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An error as a client sees it: a code and a human-readable message.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{message}")]
pub struct TriremeError {
    /// What kind of failure.
    pub code: ErrorCode,
    /// What happened, for a person.
    pub message: String,
}

impl TriremeError {
    /// An error with a code and a message.
    pub fn new(code: ErrorCode, message: impl Into<String>) -> Self {
        Self {
            code,
            message: message.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_certainly_unapplied_failures_invite_a_retry() {
        for code in [ErrorCode::NoLeader, ErrorCode::Unavailable] {
            assert_eq!(code.resp_prefix(), "TRYAGAIN", "{code}");
            assert_eq!(code.http_status(), 503, "{code}");
        }
        assert_eq!(ErrorCode::Timeout.resp_prefix(), "TIMEOUT");
        assert_eq!(ErrorCode::Timeout.http_status(), 504);
        assert_eq!(ErrorCode::StorageFailure.resp_prefix(), "IOERR");
        assert_eq!(ErrorCode::InvalidArgument.resp_prefix(), "ERR");
        assert_eq!(ErrorCode::DiskFull.resp_prefix(), "MISCONF");
        assert_eq!(ErrorCode::DiskFull.http_status(), 507);
    }
}
