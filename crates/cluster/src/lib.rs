//! The router and the node: every request finds its key's slot, the slot's shard, and that
//! shard's Raft group here, whatever front end it came through.
//!
//! [`Node::start`] opens the node's storage, checks that the data directory belongs to this
//! node and cluster, opens one Raft group per shard and bootstraps them on first start.
//! The read and write methods on [`Node`] are the one request path the HTTP and RESP front
//! ends share, in typed requests and outcomes ([`PutRequest`] → [`PutOutcome`], ...);
//! multi-key operations are split per shard and are atomic within each shard.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod acl;
mod backup;
mod balance;
mod blocking;
mod config;
mod error;
mod expiry;
mod forward;
#[cfg(test)]
mod golden_samples;
mod history;
mod identity;
mod join;
mod membership;
mod meta;
mod node;
mod observe;
mod operator;
mod plan;
mod pop_queue;
mod pubsub;
pub mod read_limit;
mod rebalance;
mod request;
mod router;
mod session;
mod txn;
mod whole_read;

pub use acl::{
    ANONYMOUS_ACCESSOR, AclConfig, AclPolicy, AclToken, Caller, GLOBAL_MANAGEMENT_ID, PolicyLink,
    PolicyRequest, Resolved, TokenRequest,
};
pub use blocking::Blocking;
pub use config::NodeConfig;
pub use error::ClusterError;
pub use forward::answered_in_region;
pub use history::ShardEvent;
pub use meta::{NodeInfo, NodeState};
pub use node::{Node, NodeHealth, ShardInfo};
pub use observe::{ReplicaCounts, ReplicaStats};
pub use operator::RemoveOutcome;
pub use pubsub::MessageSink;
pub use rebalance::ElasticMetrics;
pub use request::{
    DeleteRequest, Deleted, Done, EditOutcome, FromApplied, HashOutcome, IncrOutcome, ListOutcome,
    PutOutcome, PutRequest, Records, SetOutcome, SortedSetOutcome, TransactionOutcome,
    TransactionRequest, TtlChanged,
};
pub use router::{MAX_ENTRY_BYTES, ReadMeta, ScanPage, SearchHit, SearchPage};
pub use session::{SessionInfo, SessionRequest, is_session_id};
pub use trireme_raft::{PeerNode, RaftTiming, ReadMode};
pub use trireme_types::{
    Command, CommandResult, End, HashAnswer, HashOp, HashRead, KeyCheck, LexBound, ListAnswer,
    ListOp, ListRead, PutCondition, Score, ScoreBound, SetAnswer, SetCombine, SetOp, SetRead,
    SortedSetAnswer, SortedSetOp, SortedSetRead, StringEdit, TtlUpdate, ValueKind, ZAddCompare,
    ZAddWhen, ZRange,
};
pub use whole_read::{PAGE_ITEMS, WholeReader};

/// Wall-clock Unix milliseconds: the time commands are stamped with and reads compare expiry to.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// A fresh version 4 UUID from the thread's CSPRNG (session ids, ACL ids and secrets).
pub(crate) fn new_uuid() -> String {
    let mut bytes: [u8; 16] = rand::random();
    bytes[6] = (bytes[6] & 0x0f) | 0x40;
    bytes[8] = (bytes[8] & 0x3f) | 0x80;
    let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
    format!(
        "{}-{}-{}-{}-{}",
        &hex[0..8],
        &hex[8..12],
        &hex[12..16],
        &hex[16..20],
        &hex[20..32]
    )
}
