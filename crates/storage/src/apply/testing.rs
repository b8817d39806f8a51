//! What the state machine's tests of collections share.

use crate::{ApplyEntry, Storage};
use bytes::Bytes;
use trireme_types::{Command, CommandResult, LogCommand, ShardId};

pub(super) fn b(s: &str) -> Bytes {
    Bytes::copy_from_slice(s.as_bytes())
}

pub(super) fn bs(items: &[&str]) -> Vec<Bytes> {
    items.iter().map(|s| b(s)).collect()
}

/// Applies `commands` to shard 0 at `now`, one entry each from index `first`.
pub(super) fn run_at(
    storage: &Storage,
    first: u64,
    now: u64,
    commands: Vec<Command>,
) -> Vec<CommandResult> {
    let logs: Vec<LogCommand> = commands
        .into_iter()
        .map(|command| LogCommand {
            now_ms: now,
            command,
        })
        .collect();
    let entries: Vec<_> = logs
        .iter()
        .enumerate()
        .map(|(i, c)| ApplyEntry {
            index: first + i as u64,
            command: Some(c),
        })
        .collect();
    storage.apply(ShardId(0), &entries, &[]).unwrap()
}

/// [`run_at`] at time 1.
pub(super) fn run(storage: &Storage, first: u64, commands: Vec<Command>) -> Vec<CommandResult> {
    run_at(storage, first, 1, commands)
}

/// Splits shard 0 (every slot) at slot 8192 into shard 1, as the split entry at index 100.
pub(super) fn split_in_half(storage: &Storage) {
    let split = crate::ShardSplit {
        parent: ShardId(0),
        child: ShardId(1),
        at_slot: 8192,
        range: (0, 16383),
    };
    storage
        .split_shard(&split, 100, &[], Some(&[]))
        .unwrap()
        .expect("applied");
}

/// A store in a fresh directory (kept alive by the returned guard).
pub(super) fn storage() -> (tempfile::TempDir, std::sync::Arc<Storage>) {
    let dir = tempfile::tempdir().unwrap();
    let storage = Storage::open(dir.path(), &crate::StorageOptions::default()).unwrap();
    (dir, storage)
}

/// Applies sorted set `ops` on `key` to shard 0, one entry each from index 1; their answers.
pub(super) fn apply_all(
    storage: &Storage,
    key: &Bytes,
    ops: Vec<trireme_types::SortedSetOp>,
) -> Vec<Result<trireme_types::SortedSetAnswer, trireme_types::ErrorCode>> {
    let commands = ops
        .into_iter()
        .map(|op| Command::SortedSet {
            key: key.clone(),
            op,
        })
        .collect();
    run(storage, 1, commands)
        .into_iter()
        .map(|result| match result {
            CommandResult::SortedSet(answer) => answer,
            other => panic!("not a sorted set answer: {other:?}"),
        })
        .collect()
}
