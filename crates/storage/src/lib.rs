//! Trireme's storage: one fjall [`fjall::Database`] per node holding the Raft logs, votes and
//! state machines of every group, with group commit.
//!
//! Keyspaces (docs/architecture.md, "storage"):
//! - `raft_log`: group ‖ index (big-endian) → encoded log entry;
//! - `raft_meta`: group ‖ name → vote, committed, purged (opaque bytes);
//! - `data`: shard ‖ key → [`Record`](trireme_types::Record);
//! - `data_meta`: shard ‖ name → applied log id and membership (and, once touched, the slot
//!   range and the removal watermark), written in the same batch as the data they describe;
//! - `expiry`: shard ‖ expires-at ‖ key → (), an index of keys with a TTL, so finding expired
//!   keys is a range scan instead of a walk over the data.
//!
//! Writes go to fjall's journal without syncing; [`Storage::sync`] queues a callback on the
//! group-commit thread, which covers everything written so far with one `fdatasync` and then
//! fires every queued callback. A failed sync poisons the store: it refuses every later write.
//!
//! The data directory records its format version in a `FORMAT` file (see [`DATA_FORMAT`]);
//! a directory of another format is refused when it is opened.
//!
//! Every call here blocks on disk I/O; async callers run them on a blocking thread.
//! No openraft type appears in this crate: the raft layer hands it bytes.
#![deny(missing_docs)]
#![deny(clippy::unwrap_used)]
#![cfg_attr(test, allow(clippy::unwrap_used))]

mod apply;
mod error;
mod format;
mod group_commit;
mod keys;
mod read;
mod store;
mod watch;

pub use apply::{ApplyEntry, ShardExport, ShardSplit};
pub use error::StorageError;
pub use format::CURRENT as DATA_FORMAT;
pub use group_commit::SyncCallback;
pub use read::ShardView;
pub use store::{ApplyObserver, Storage, StorageMetrics, StorageOptions};
pub use watch::{Watch, WatchTarget, Watchers};
