//! Which keys of each shard replica hold an intent of a transaction across shards (see
//! [`trireme_types::txn`]), and which transaction records it holds, kept in memory beside
//! their rows: reads ask for intents on every request, the resolver for records four times a
//! second, and neither may cost a scan.
//!
//! Reads ask it before they take their view: while no shard of the node holds an intent (the
//! usual case) a read checks nothing, at the cost of one atomic load. The count is raised
//! before a batch that writes an intent is published and lowered only after the batch that
//! removes it is, so a read that found it at zero before taking its view can only miss an
//! intent written after that moment: one of a transaction that had not committed then, which
//! the read may ignore.

use crate::StorageError;
use crate::keys::owned_key;
use crate::tables::{Space, Tables};
use bytes::Bytes;
use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use trireme_types::txn::{
    Intent, TxnRecord, hold_target, holds_prefix, intent_target, intents_prefix, records_prefix,
};

/// An intent, or a prefix hold (an intent with no commands), as a replica's rows hold it.
#[derive(Debug, Clone)]
pub(crate) struct Held {
    /// What its row says.
    pub(crate) intent: Arc<Intent>,
    /// The log index of the prepare that wrote it: a commit applies its commands there.
    pub(crate) index: u64,
}

impl Held {
    /// The intent or hold stored as `row`.
    pub(crate) fn of(row: &trireme_types::Record) -> Result<Held, StorageError> {
        let intent = Intent::decode(&row.value)
            .ok_or_else(|| StorageError::Corrupt("an intent row".into()))?;
        Ok(Held {
            intent: Arc::new(intent),
            index: row.modify_index,
        })
    }
}

/// One shard replica's intents by the key each is on, and its prefix holds.
#[derive(Debug, Default)]
struct ShardIntents {
    keys: HashMap<Bytes, Held>,
    /// Prefix holds, by their rows' keys (see [`trireme_types::txn::hold_key`]).
    holds: HashMap<Bytes, Held>,
    /// The shard's transaction records, by key.
    records: HashMap<Bytes, TxnRecord>,
    /// Its rows are being replaced outside the apply loop (an install, a split): until
    /// they are read again, every read checks.
    replacing: bool,
}

/// Every shard replica's intents.
#[derive(Debug, Default)]
pub(crate) struct Intents {
    /// Intents and holds on every shard, plus shards being replaced.
    outstanding: AtomicU64,
    shards: Mutex<HashMap<u32, ShardIntents>>,
}

impl Intents {
    fn shards(&self) -> std::sync::MutexGuard<'_, HashMap<u32, ShardIntents>> {
        self.shards.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// `look` at `shard`'s intents; `None` without taking the lock while no shard holds
    /// any (or when `shard` has none).
    fn look<T>(&self, shard: u32, look: impl FnOnce(&ShardIntents) -> T) -> Option<T> {
        if self.outstanding.load(Ordering::Acquire) == 0 {
            return None;
        }
        self.shards().get(&shard).map(look)
    }

    /// Whether a read of `shard` must look for intents. Holds keep writes out, not reads.
    pub(crate) fn may_exist(&self, shard: u32) -> bool {
        self.look(shard, |s| s.replacing || !s.keys.is_empty())
            .unwrap_or(false)
    }

    /// Whether a command applied to `shard` may meet an intent or a hold.
    pub(crate) fn may_block(&self, shard: u32) -> bool {
        self.look(shard, |s| {
            s.replacing || !s.keys.is_empty() || !s.holds.is_empty()
        })
        .unwrap_or(false)
    }

    /// The intent on `key` of `shard` (as of the last published batch).
    pub(crate) fn intent(&self, shard: u32, key: &[u8]) -> Option<Held> {
        self.look(shard, |s| s.keys.get(key).cloned()).flatten()
    }

    /// The hold whose row is `row` in `shard`.
    pub(crate) fn hold(&self, shard: u32, row: &[u8]) -> Option<Held> {
        self.look(shard, |s| s.holds.get(row).cloned()).flatten()
    }

    /// The rows of the holds in `shard` whose prefixes `key` is under (a write to `key`
    /// waits for them), or, with `overlapping`, that are under `key` too (a prefix read or
    /// delete over `key` waits for those as well).
    pub(crate) fn holds_over(&self, shard: u32, key: &[u8], overlapping: bool) -> Vec<Bytes> {
        self.look(shard, |s| {
            s.holds
                .keys()
                .filter(|row| {
                    hold_target(row).is_some_and(|(_, prefix)| {
                        key.starts_with(prefix) || (overlapping && prefix.starts_with(key))
                    })
                })
                .cloned()
                .collect()
        })
        .unwrap_or_default()
    }

    /// An intent on `key` of `shard` is about to be published.
    pub(crate) fn added(&self, shard: u32, key: Bytes, held: Held) {
        let mut shards = self.shards();
        if shards
            .entry(shard)
            .or_default()
            .keys
            .insert(key, held)
            .is_none()
        {
            self.outstanding.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The intent on `key` of `shard` is gone from the published rows.
    pub(crate) fn removed(&self, shard: u32, key: &[u8]) {
        let mut shards = self.shards();
        if let Some(s) = shards.get_mut(&shard)
            && s.keys.remove(key).is_some()
        {
            self.outstanding.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The hold at `row` of `shard` is about to be published.
    pub(crate) fn hold_added(&self, shard: u32, row: Bytes, held: Held) {
        let mut shards = self.shards();
        if shards
            .entry(shard)
            .or_default()
            .holds
            .insert(row, held)
            .is_none()
        {
            self.outstanding.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// The hold at `row` of `shard` is gone from the published rows.
    pub(crate) fn hold_removed(&self, shard: u32, row: &[u8]) {
        let mut shards = self.shards();
        if let Some(s) = shards.get_mut(&shard)
            && s.holds.remove(row).is_some()
        {
            self.outstanding.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// The transaction record at `key` of `shard`, as the published rows hold it.
    pub(crate) fn record(&self, shard: u32, key: &[u8]) -> Option<TxnRecord> {
        self.shards()
            .get(&shard)
            .and_then(|s| s.records.get(key).cloned())
    }

    /// Record `key` of `shard` is written as `record`.
    pub(crate) fn record_written(&self, shard: u32, key: Bytes, record: TxnRecord) {
        self.shards()
            .entry(shard)
            .or_default()
            .records
            .insert(key, record);
    }

    /// Record `key` of `shard` is gone.
    pub(crate) fn record_removed(&self, shard: u32, key: &[u8]) {
        if let Some(s) = self.shards().get_mut(&shard) {
            s.records.remove(key);
        }
    }

    /// The records of `shard` whose transactions' leases ended before `cutoff_ms`.
    pub(crate) fn records_expired_by(&self, shard: u32, cutoff_ms: u64) -> Vec<(Bytes, TxnRecord)> {
        self.shards().get(&shard).map_or_else(Vec::new, |s| {
            s.records
                .iter()
                .filter(|(_, r)| r.expires_ms < cutoff_ms)
                .map(|(k, r)| (k.clone(), r.clone()))
                .collect()
        })
    }

    /// `shard`'s rows are about to be replaced: every read checks until [`Intents::load`].
    pub(crate) fn replacing(&self, shard: u32) {
        let mut shards = self.shards();
        let s = shards.entry(shard).or_default();
        if !s.replacing {
            s.replacing = true;
            self.outstanding.fetch_add(1, Ordering::AcqRel);
        }
    }

    /// Reads `shard`'s intents from its rows, replacing what was known.
    pub(crate) fn load(&self, tables: &Tables, shard: u32) -> Result<(), StorageError> {
        let mut found = HashMap::new();
        for row in tables.prefix(Space::Data, &owned_key(shard, &intents_prefix())) {
            let (key, value) = row?;
            let Some(target) = intent_target(&key[4..]) else {
                continue;
            };
            let record = trireme_types::Record::decode(&value)?;
            found.insert(Bytes::copy_from_slice(target), Held::of(&record)?);
        }
        let mut holds = HashMap::new();
        for row in tables.prefix(Space::Data, &owned_key(shard, &holds_prefix())) {
            let (key, value) = row?;
            if hold_target(&key[4..]).is_none() {
                continue;
            }
            let record = trireme_types::Record::decode(&value)?;
            holds.insert(Bytes::copy_from_slice(&key[4..]), Held::of(&record)?);
        }
        let mut records = HashMap::new();
        for row in tables.prefix(Space::Data, &owned_key(shard, &records_prefix())) {
            let (key, value) = row?;
            let record = trireme_types::Record::decode(&value)?;
            if let Some(txn) = TxnRecord::decode(&record.value) {
                records.insert(Bytes::copy_from_slice(&key[4..]), txn);
            }
        }
        let mut shards = self.shards();
        let s = shards.entry(shard).or_default();
        let before = (s.keys.len() + s.holds.len()) as u64 + u64::from(s.replacing);
        s.keys = found;
        s.holds = holds;
        s.records = records;
        s.replacing = false;
        let after = (s.keys.len() + s.holds.len()) as u64;
        if after > before {
            self.outstanding.fetch_add(after - before, Ordering::AcqRel);
        } else {
            self.outstanding.fetch_sub(before - after, Ordering::AcqRel);
        }
        Ok(())
    }

    /// Forgets `shard` (its replica was dropped).
    pub(crate) fn drop_shard(&self, shard: u32) {
        if let Some(s) = self.shards().remove(&shard) {
            self.outstanding.fetch_sub(
                (s.keys.len() + s.holds.len()) as u64 + u64::from(s.replacing),
                Ordering::AcqRel,
            );
        }
    }

    /// The keys of `shard` under `prefix` that hold an intent.
    pub(crate) fn under(&self, shard: u32, prefix: &[u8]) -> Vec<Bytes> {
        self.look(shard, |s| {
            s.keys
                .keys()
                .filter(|key| key.starts_with(prefix))
                .cloned()
                .collect()
        })
        .unwrap_or_default()
    }

    /// The keys of `shard` whose intents' transactions expired by `now_ms`.
    pub(crate) fn expired(&self, shard: u32, now_ms: u64) -> Vec<Bytes> {
        self.look(shard, |s| {
            s.keys
                .iter()
                .filter(|(_, held)| held.intent.expires_ms < now_ms)
                .map(|(key, _)| key.clone())
                .collect()
        })
        .unwrap_or_default()
    }

    /// The rows of the holds in `shard` of transactions that expired by `now_ms`, with
    /// what they say.
    pub(crate) fn expired_holds(&self, shard: u32, now_ms: u64) -> Vec<(Bytes, Held)> {
        self.look(shard, |s| {
            s.holds
                .iter()
                .filter(|(_, held)| held.intent.expires_ms < now_ms)
                .map(|(row, held)| (row.clone(), held.clone()))
                .collect()
        })
        .unwrap_or_default()
    }
}
