//! The vocabulary every other Trireme crate speaks: how a key maps to a slot and a shard,
//! what a stored record looks like, which commands go through the Raft log, and the
//! limits and error codes a client can see.
//!
//! Nothing here does I/O or depends on tokio, so every layer (storage, raft, front ends,
//! client, bench) can share these types without pulling in the others.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]

pub mod acl;
pub mod admin;
pub mod backup;
pub mod cluster_status;
pub mod collection;
pub mod command;
pub mod error;
#[cfg(any(test, feature = "golden"))]
pub mod golden;
#[cfg(test)]
mod golden_samples;
pub mod histogram;
pub mod ids;
pub mod int;
pub mod keys;
pub mod limits;
pub mod process;
pub mod record;
pub mod session;
pub mod slot;
pub mod sorted;
pub mod timed;
pub mod txn;
pub mod version;
pub mod whole;

pub use command::{
    Command, CommandResult, End, HashAnswer, HashOp, HashRead, KeyCheck, ListAnswer, ListOp,
    ListRead, LockOp, LockOutcome, LogCommand, PutCondition, SessionOp, SetAnswer, SetCombine,
    SetOp, SetRead, StringEdit, TtlUpdate,
};
pub use error::{ErrorCode, TriremeError};
pub use histogram::{BUCKET_BOUNDS_MICROS, LatencyHistogram};
pub use ids::{GroupId, NodeId, ShardId};
pub use limits::Limits;
pub use record::{LockInfo, Record, ValueKind};
pub use slot::{SLOT_COUNT, ShardMap, even_range, even_ranges, key_slot};
pub use sorted::{
    LexBound, Score, ScoreBound, SortedSetAnswer, SortedSetOp, SortedSetRead, ZAddCompare,
    ZAddWhen, ZRange,
};
pub use timed::Timed;
