//! An in-memory index of every key of each shard replica, with the few fields a plain write
//! needs from the key's current record: whether it exists, its `CreateIndex`, flags, expiry,
//! type, and whether a Consul lock is on it. A SET or a Consul PUT then writes without reading
//! the old record (a point read that missed the block cache was a quarter of a SET's CPU),
//! as Aerospike keeps its primary index in memory.
//!
//! A shard's index is built from its rows the first time a batch is applied to it after the
//! node starts (or after the shard's rows were replaced wholesale: a snapshot installed, a
//! split, the replica dropped), and kept by the apply loop from then on, under the shard's
//! own lock: only the applying thread reads it. Member rows of collections are not in it.

use crate::StorageError;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use trireme_types::{Record, ValueKind};

/// What the index keeps of one key: 32 bytes beside the key (see [`KeyIndex::bytes_per_key`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct KeyMeta {
    pub(crate) create_index: u64,
    pub(crate) flags: u64,
    /// Unix milliseconds; 0 for none.
    expires_at_ms: u64,
    pub(crate) kind: ValueKind,
    /// A Consul lock is held or was held on the key: its details live in the record only.
    pub(crate) locked: bool,
}

impl KeyMeta {
    pub(crate) fn of(record: &Record) -> Self {
        KeyMeta {
            create_index: record.create_index,
            flags: record.flags,
            expires_at_ms: record.expires_at_ms.unwrap_or(0),
            kind: record.kind,
            locked: record.lock != Default::default(),
        }
    }

    pub(crate) fn expires_at_ms(&self) -> Option<u64> {
        (self.expires_at_ms != 0).then_some(self.expires_at_ms)
    }
}

/// The keys of one shard replica; `None` until built.
pub(crate) type ShardKeys = HashMap<Box<[u8]>, KeyMeta>;

/// Every shard replica's [`ShardKeys`].
#[derive(Debug, Default)]
pub(crate) struct KeyIndex {
    shards: Mutex<HashMap<u32, Arc<Mutex<Option<ShardKeys>>>>>,
}

impl KeyIndex {
    /// The index of `shard`, to lock for the length of an apply.
    pub(crate) fn shard(&self, shard: u32) -> Arc<Mutex<Option<ShardKeys>>> {
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .entry(shard)
            .or_default()
            .clone()
    }

    /// Drops `shard`'s index: its rows changed outside the apply loop. An apply that holds
    /// the old one finishes on it and it is thrown away; the next apply builds a new one.
    pub(crate) fn forget(&self, shard: u32) {
        self.shards
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .remove(&shard);
    }

    /// Memory the index takes per key besides the key's own bytes: the table entry (a boxed
    /// key and its [`KeyMeta`]) and the table's control byte, at the table's lowest load.
    /// The figure docs/architecture.md gives; checked by the tests.
    #[cfg(test)]
    fn bytes_per_key() -> usize {
        let entry = std::mem::size_of::<(Box<[u8]>, KeyMeta)>() + 1;
        // hashbrown grows at 7/8 full, so right after growing a table is 7/16 full.
        entry * 16 / 7
    }
}

/// Builds the index of a shard from its rows, each given as (key, encoded record).
pub(crate) fn build<'a>(
    rows: impl Iterator<Item = Result<(Box<[u8]>, Record), StorageError>> + 'a,
) -> Result<ShardKeys, StorageError> {
    let mut keys = ShardKeys::new();
    for row in rows {
        let (key, record) = row?;
        keys.insert(key, KeyMeta::of(&record));
    }
    Ok(keys)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_entry_stays_small() {
        assert_eq!(std::mem::size_of::<KeyMeta>(), 32);
        // 48-byte entries and a control byte, at worst 7/16 full: 112 bytes.
        assert!(
            KeyIndex::bytes_per_key() <= 112,
            "{}",
            KeyIndex::bytes_per_key()
        );
    }

    #[test]
    fn a_forgotten_shard_starts_empty() {
        let index = KeyIndex::default();
        *index.shard(1).lock().unwrap() = Some(ShardKeys::new());
        assert!(index.shard(1).lock().unwrap().is_some());
        index.forget(1);
        assert!(index.shard(1).lock().unwrap().is_none());
    }
}
