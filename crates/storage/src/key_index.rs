//! An in-memory index of every key of each shard replica, with the few fields a plain write
//! needs from the key's current record: whether it exists, its `CreateIndex`, flags, expiry,
//! type, and whether a Consul lock is on it. A SET or a Consul PUT then writes without reading
//! the old record (a point read that missed the block cache was a quarter of a SET's CPU),
//! as Aerospike keeps its primary index in memory.
//!
//! A shard's index is built from its rows the first time a batch is applied to it after the
//! node starts (or after the shard's rows were replaced wholesale: a snapshot installed, a
//! split, the replica dropped), and kept by the apply loop from then on, under the shard's
//! own lock: only the applying thread reads it. Member rows of collections are not in it:
//! the [`MemberIndex`] beside it says which members a collection holds.

use crate::StorageError;
use crate::member_index::{MemberBudget, MemberIndex};
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

/// The keys of one shard replica and the members of its collections.
#[derive(Debug)]
pub(crate) struct ShardKeys {
    keys: HashMap<Box<[u8]>, KeyMeta>,
    pub(crate) members: MemberIndex,
}

impl ShardKeys {
    pub(crate) fn new(budget: Arc<MemberBudget>) -> Self {
        ShardKeys {
            keys: HashMap::new(),
            members: MemberIndex::new(budget),
        }
    }

    pub(crate) fn get(&self, key: &[u8]) -> Option<KeyMeta> {
        self.keys.get(key).copied()
    }

    pub(crate) fn insert(&mut self, key: &[u8], meta: KeyMeta) {
        match self.keys.get_mut(key) {
            Some(old) => *old = meta,
            None => {
                self.keys.insert(Box::from(key), meta);
            }
        }
    }

    pub(crate) fn remove(&mut self, key: &[u8]) {
        self.keys.remove(key);
    }
}

/// Every shard replica's [`ShardKeys`] (`None` until built), and the budget their member
/// indexes share.
#[derive(Debug)]
pub(crate) struct KeyIndex {
    shards: Mutex<HashMap<u32, Arc<Mutex<Option<ShardKeys>>>>>,
    member_budget: Arc<MemberBudget>,
}

impl KeyIndex {
    /// An empty index whose member indexes take at most `member_bytes` together.
    pub(crate) fn new(member_bytes: u64) -> Self {
        KeyIndex {
            shards: Mutex::default(),
            member_budget: MemberBudget::new(member_bytes),
        }
    }

    /// The budget every shard's member index draws on.
    pub(crate) fn member_budget(&self) -> &Arc<MemberBudget> {
        &self.member_budget
    }

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
        // Freed here, not on the discard thread: its member index gives its budget back as
        // it is dropped, and the next apply builds a new one at once, which would find the
        // budget still taken.
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

/// One stored row of a shard, as the index build reads it.
pub(crate) enum IndexedRow {
    /// A key and its record.
    Key(Box<[u8]>, Record),
    /// A member row of version `version` of the collection at `key`; with `indexed`, the
    /// member and what the index may keep of it (`None`: its record did not decode).
    /// `after_record`: the row sorts after where the collection's record is (every key but
    /// one starting with a byte past the internal prefix's), so the record was met first if
    /// there is one.
    Member {
        key: Box<[u8]>,
        version: u64,
        indexed: Option<(Box<[u8]>, Option<MemberRow>)>,
        after_record: bool,
    },
}

/// What the index may keep of a member row, before its collection's kind is known.
#[derive(Debug, Clone, Copy)]
pub(crate) struct MemberRow {
    create_index: u64,
    /// The first eight bytes of the value: a sorted set member's score.
    leading: Option<u64>,
}

impl MemberRow {
    pub(crate) fn of(record: &Record) -> Self {
        MemberRow {
            create_index: record.create_index,
            leading: record
                .value
                .get(..8)
                .and_then(|b| b.try_into().ok())
                .map(u64::from_be_bytes),
        }
    }

    /// The number the member index keeps for the row in a collection of `kind`.
    pub(crate) fn number(self, kind: ValueKind) -> Option<u64> {
        match kind {
            ValueKind::SortedSet => self.leading,
            ValueKind::Hash | ValueKind::Set => Some(self.create_index),
            _ => None,
        }
    }
}

/// The key and version of a collection whose rows the build found dead.
pub(crate) type DeadRows = (Box<[u8]>, u64);

/// Builds the index of a shard from its rows (score rows of sorted sets left out), and
/// finds the collection versions whose rows are dead (their record is gone or holds another
/// version): each once, in row order.
pub(crate) fn build(
    rows: impl Iterator<Item = Result<IndexedRow, StorageError>>,
    budget: Arc<MemberBudget>,
) -> Result<(ShardKeys, Vec<DeadRows>), StorageError> {
    let mut index = ShardKeys::new(budget);
    let mut dead: Vec<DeadRows> = Vec::new();
    // Member rows sort after most keys but not all: a member of a collection whose key sorts
    // after it is held (without its value) until the keys are known.
    let mut unsure = Vec::new();
    for row in rows {
        match row? {
            IndexedRow::Key(key, record) => {
                index.keys.insert(key, KeyMeta::of(&record));
            }
            IndexedRow::Member {
                key,
                version,
                indexed,
                after_record,
            } => match index.keys.get(&key) {
                Some(meta) => index.add_built(&key, version, indexed, Some(*meta), &mut dead),
                // No record before the row: none at all. A big collection deleted just
                // before a restart is all dead rows, never held here.
                None if after_record => index.add_built(&key, version, None, None, &mut dead),
                None => unsure.push((key, version, indexed)),
            },
        }
    }
    for (key, version, indexed) in unsure {
        let meta = index.keys.get(&key).copied();
        index.add_built(&key, version, indexed, meta, &mut dead);
    }
    Ok((index, dead))
}

impl ShardKeys {
    /// Indexes a member row the build found, of version `version` of a collection whose
    /// record is `meta` (`None`: the row has no collection record); a row of another
    /// version is dead, and its version is added to `dead` (once per run of its rows).
    fn add_built(
        &mut self,
        key: &[u8],
        version: u64,
        indexed: Option<(Box<[u8]>, Option<MemberRow>)>,
        meta: Option<KeyMeta>,
        dead: &mut Vec<DeadRows>,
    ) {
        let live = meta.filter(|m| m.kind != ValueKind::String && m.create_index == version);
        let Some(meta) = live else {
            if dead
                .last()
                .is_none_or(|(k, v)| **k != *key || *v != version)
            {
                dead.push((Box::from(key), version));
            }
            return;
        };
        let Some((member, row)) = indexed else {
            return;
        };
        if meta.kind == ValueKind::List {
            // No write needs to know a list's elements.
            return;
        }
        match row.and_then(|row| row.number(meta.kind)) {
            Some(number) => self.members.insert(key, &member, number),
            // Rows that do not decode: read them, never trust them.
            None => self.members.leave_out(key),
        }
    }
}

/// The number the member index keeps for a member row of a collection of `kind`: a sorted
/// set member's score bits, a hash field's or set member's `CreateIndex`; `None` for a list,
/// whose elements are not indexed.
pub(crate) fn member_number(kind: ValueKind, record: &Record) -> Option<u64> {
    MemberRow::of(record).number(kind)
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
        let index = KeyIndex::new(0);
        *index.shard(1).lock().unwrap() = Some(ShardKeys::new(index.member_budget().clone()));
        assert!(index.shard(1).lock().unwrap().is_some());
        index.forget(1);
        assert!(index.shard(1).lock().unwrap().is_none());
    }
}
