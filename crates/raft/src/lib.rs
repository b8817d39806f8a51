//! openraft wiring for Trireme: the type configuration, the log and state-machine adaptors that
//! put every group into the node's one [`trireme_storage::Storage`], the peer network, and
//! [`ShardGroup`], the handle the router uses to write and to read at a chosen consistency.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod batcher;
mod compaction;
mod error;
mod freshness;
#[cfg(test)]
mod golden_samples;
mod group;
mod log_store;
mod peer;
mod state_machine;
mod types;

pub use batcher::ProposalMetrics;
pub use error::RaftLayerError;
pub use group::{GroupEvents, GroupStatus, RaftTiming, ReadMode, ShardGroup};
pub use log_store::LogStore;
pub use peer::{
    DEFAULT_SNAPSHOT_CHUNK_BYTES, ForwardHandler, IntakeGate, JoinHandler,
    MAX_SNAPSHOT_CHUNK_BYTES, PeerError, PeerTransport, SnapshotTransfer,
};
pub use state_machine::ShardStateMachine;
pub use types::{PeerNode, TypeConfig};

/// Decodes one peer frame (without its length prefix) and drops it: the decoder every byte
/// from a peer goes through, exposed for the fuzz target (`fuzz/fuzz_targets/peer_frames.rs`).
pub fn decode_peer_frame(body: &[u8]) -> Result<(), String> {
    peer::decode_frame(body)
}

/// openraft itself, re-exported at the pinned version.
pub use openraft;
