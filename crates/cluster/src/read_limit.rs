//! `[limits] max_collection_read`: how many members one command may read of a collection
//! whole. A bigger answer would be built in memory on the replica that serves it and sent as
//! one message, so such reads are refused with an error that names the command that reads
//! the collection in pages, while pages themselves are shortened to the limit.

use crate::ClusterError;
use trireme_types::{ErrorCode, TriremeError};

/// Which reads [`bound_read`] refuses past `[limits] max_collection_read`, rather than
/// shortening them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Whole {
    /// Only reads without a limit (`HGETALL`, `SMEMBERS`): a scan's page (`HSCAN ... COUNT`)
    /// may come back shorter than asked.
    Unlimited,
    /// Any read asking for more (`ZRANGE`, whose `LIMIT` must be honoured or refused).
    PastMax,
}

/// Lowers a read's `limit` to at most `max` (`[limits] max_collection_read`); for a read
/// that must be answered whole, to one past it, so that a collection past it is found out
/// without being read whole. Whether the answer must then be checked.
pub fn bound_read(limit: &mut u64, max: u64, whole: Whole) -> bool {
    if *limit <= max {
        return false;
    }
    if whole == Whole::Unlimited && *limit != u64::MAX {
        *limit = max;
        return false;
    }
    *limit = max.saturating_add(1);
    true
}

/// The refusal of a read of a whole `what` of more than `max` members, naming the command
/// that reads it in pages.
pub fn too_many_to_read(what: &str, max: u64, paging: &str) -> ClusterError {
    ClusterError::Request(TriremeError::new(
        ErrorCode::ValueTooLarge,
        format!(
            "the {what} has more than {max} members, the most one command reads whole \
             ([limits] max_collection_read): read it in pages with {paging}"
        ),
    ))
}

/// The refusal of `SINTER`, `SUNION` or `SDIFF` over sets that could answer more than `max`
/// members.
pub fn too_many_to_combine(max: u64) -> ClusterError {
    ClusterError::Request(TriremeError::new(
        ErrorCode::ValueTooLarge,
        format!(
            "the sets could answer more than {max} members together, the most one command \
             reads whole ([limits] max_collection_read): read them in pages with SSCAN"
        ),
    ))
}
