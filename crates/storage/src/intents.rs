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
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use trireme_types::txn::{Intent, TxnRecord, intent_target, intents_prefix, records_prefix};

/// One shard replica's intents: the key each is on, and when its transaction expires.
#[derive(Debug, Default)]
struct ShardIntents {
    keys: HashMap<Bytes, u64>,
    /// The shard's transaction records, by key.
    records: HashMap<Bytes, TxnRecord>,
    /// Its rows are being replaced outside the apply loop (an install, a split): until
    /// they are read again, every read checks.
    replacing: bool,
}

/// Every shard replica's intents.
#[derive(Debug, Default)]
pub(crate) struct Intents {
    /// Intents held on every shard, plus shards being replaced.
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

    /// Whether a read of `shard` must look for intents.
    pub(crate) fn may_exist(&self, shard: u32) -> bool {
        self.look(shard, |s| s.replacing || !s.keys.is_empty())
            .unwrap_or(false)
    }

    /// Whether `key` of `shard` holds an intent (as of the last published batch).
    pub(crate) fn holds(&self, shard: u32, key: &[u8]) -> bool {
        self.look(shard, |s| s.keys.contains_key(key))
            .unwrap_or(false)
    }

    /// An intent on `key` of `shard` is about to be published.
    pub(crate) fn added(&self, shard: u32, key: Bytes, expires_ms: u64) {
        let mut shards = self.shards();
        if shards
            .entry(shard)
            .or_default()
            .keys
            .insert(key, expires_ms)
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
            let expires = Intent::decode(&record.value).map_or(0, |i| i.expires_ms);
            found.insert(Bytes::copy_from_slice(target), expires);
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
        let before = s.keys.len() as u64 + u64::from(s.replacing);
        s.keys = found;
        s.records = records;
        s.replacing = false;
        let after = s.keys.len() as u64;
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
                s.keys.len() as u64 + u64::from(s.replacing),
                Ordering::AcqRel,
            );
        }
    }

    /// A key of `shard` under `prefix` that holds an intent, if any.
    pub(crate) fn any_under(&self, shard: u32, prefix: &[u8]) -> Option<Bytes> {
        self.look(shard, |s| {
            s.keys.keys().find(|key| key.starts_with(prefix)).cloned()
        })
        .flatten()
    }

    /// The keys of `shard` whose intents' transactions expired by `now_ms`.
    pub(crate) fn expired(&self, shard: u32, now_ms: u64) -> Vec<Bytes> {
        self.look(shard, |s| {
            s.keys
                .iter()
                .filter(|(_, expires)| **expires < now_ms)
                .map(|(key, _)| key.clone())
                .collect()
        })
        .unwrap_or_default()
    }
}
