//! Trireme's storage, per node: one log store (TiKV's `raft-engine`, in `raft-log/`) holding
//! the Raft log, vote and named values of every group, and one LSM tree (fjall's `lsm-tree`,
//! in `tables/`) holding the rows of every shard, without a journal of its own.
//!
//! Three kinds of rows share the tree, each under its own tag byte (docs/architecture.md,
//! "storage"):
//! - `data`: shard ‖ key → [`Record`](trireme_types::Record);
//! - `data_meta`: shard ‖ name → applied log id and membership (and, once touched, the slot
//!   range and the removal watermark), written in the same batch as the data they describe;
//! - `expiry`: shard ‖ expires-at ‖ key → (), an index of keys with a TTL, so finding expired
//!   keys is a range scan instead of a walk over the data.
//!
//! Log writes go to the log store without syncing; [`Storage::sync_log`] queues a callback on
//! the log's group-commit thread, which covers every group's appends so far with one
//! `fdatasync` and then fires every queued callback. Rows go to the tree's memtable only: the
//! log entry that wrote them is their journal. They become durable when a memtable is
//! flushed to a table, by size or when [`Storage::sync_async`] asks (before a snapshot lets
//! the log be purged); after a crash each shard re-applies its log from the applied log id
//! its flushed rows hold. A failed sync or flush poisons the store: it refuses every later
//! write.
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
pub mod crash;
mod disk_space;
mod error;
mod format;
mod group_commit;
mod intents;
mod key_index;
mod keys;
mod member_index;
mod purge;
mod raft_log;
mod read;
mod store;
mod tables;
mod watch;

pub use apply::{
    APPLIED_INDEX_ROW, ApplyEntry, ShardExport, ShardSplit, WholeScan, is_unversioned_row,
};
pub use disk_space::DiskFull;
pub use error::{StorageError, key_in_transaction};
pub use format::CURRENT as DATA_FORMAT;
pub use group_commit::SyncCallback;
pub use read::ShardView;
pub use store::{ApplyObserver, Storage, StorageMetrics, StorageOptions};
pub use watch::{Watch, WatchTarget, Watchers};
