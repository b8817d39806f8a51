//! Reading a shard: [`ShardView`], one consistent point of the shard's applied log.

use crate::keys::owned_key;
use crate::purge::CollectionVersions;
use crate::store::{SLOTS_ROW, in_slots};
use crate::tables::{Space, TablesSnapshot};
use crate::{Storage, StorageError};
use std::ops::Bound;
use trireme_types::collection::{row_parts, unversioned_row};
use trireme_types::session::is_internal_key;
use trireme_types::txn::{intent_key, intent_target, intents_prefix};
use trireme_types::{Record, ShardId};

/// One shard as of one point of its applied log, read from one snapshot of the tables. Every
/// read that touches more than one row goes through one view, taken once: an applied batch
/// of log entries is one batch of the tables, published at once, so a view holds each entry whole or
/// not at all (a read at the newest sequence number instead can meet a batch halfway
/// through its insertion into the memtable). A snapshot of the shard can also be written out
/// row by row from a view, without first collecting every row in memory.
pub struct ShardView<'s> {
    /// A view is read while its store is open.
    storage: std::marker::PhantomData<&'s Storage>,
    snapshot: TablesSnapshot,
    shard: u32,
    /// Whether the shard may hold intents of transactions across shards, as known just before
    /// the snapshot was taken: only then do reads look for them (see [`crate::intents`]).
    intents: bool,
}

impl ShardView<'_> {
    /// The shard's `data_meta` rows, name → value.
    pub fn meta(&self) -> Result<Vec<(String, Vec<u8>)>, StorageError> {
        let mut meta = Vec::new();
        for row in self.snapshot.prefix(Space::Meta, &self.shard.to_be_bytes()) {
            let (key, value) = row?;
            meta.push((
                String::from_utf8_lossy(&key[4..]).into_owned(),
                value.to_vec(),
            ));
        }
        Ok(meta)
    }

    /// Calls `visit` with each stored key (without the shard prefix) and its encoded record, in
    /// key order.
    pub fn for_each_record(&self, mut visit: impl FnMut(&[u8], &[u8])) -> Result<(), StorageError> {
        self.for_each_record_while(|key, value| {
            visit(key, value);
            true
        })
    }

    /// Like [`ShardView::for_each_record`], stopping as soon as `visit` returns `false`.
    pub fn for_each_record_while(
        &self,
        mut visit: impl FnMut(&[u8], &[u8]) -> bool,
    ) -> Result<(), StorageError> {
        for row in self.snapshot.prefix(Space::Data, &self.shard.to_be_bytes()) {
            let (key, value) = row?;
            if !visit(&key[4..], &value) {
                break;
            }
        }
        Ok(())
    }

    /// Calls `visit` with each row a snapshot of the shard carries: every record, and the
    /// rows of live collection versions in the unversioned layout (see
    /// [`trireme_types::collection`]), which any build reads; rows of dead versions are left
    /// out. Rows come in the order of the stored keys, so some records (keys starting with a
    /// byte past the internal prefix's) come after collection rows: an install puts records
    /// first.
    pub fn for_each_snapshot_row(
        &self,
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), StorageError> {
        let mut live = CollectionVersions::new(&self.snapshot, self.shard);
        for row in self.snapshot.prefix(Space::Data, &self.shard.to_be_bytes()) {
            let (key, value) = row?;
            let user_key = &key[4..];
            let Some(parts) = row_parts(user_key) else {
                visit(user_key, &value);
                continue;
            };
            // An unversioned row is never stored; one that was would be read by nothing.
            if let Some(version) = parts.version
                && live.is_live(parts.key, version)?
                && let Some(plain) = unversioned_row(user_key)
            {
                visit(&plain, &value);
            }
        }
        Ok(())
    }

    /// Calls `visit` with each member (without `prefix`) and its value, of the collection
    /// whose member rows start with `prefix` (see [`trireme_types::collection`]), in order.
    pub fn for_each_member(
        &self,
        prefix: &[u8],
        mut visit: impl FnMut(&[u8], &[u8]),
    ) -> Result<(), StorageError> {
        let full = owned_key(self.shard, prefix);
        for row in self.snapshot.prefix(Space::Data, &full) {
            let (key, value) = row?;
            let value = Record::peek_value(&value).ok_or_else(|| {
                StorageError::Corrupt("a member row shorter than its header".into())
            })?;
            visit(&key[full.len()..], value);
        }
        Ok(())
    }

    /// The log index of the last entry applied to the shard as of this view (0: none).
    /// After a crash, the rows come back as of the last flush and the shard re-applies its
    /// log from there: what was derived from rows beyond this point (a search index) is
    /// ahead of them until the re-applied entries come through again.
    pub fn applied_index(&self) -> Result<u64, StorageError> {
        let row = owned_key(self.shard, crate::apply::APPLIED_INDEX_ROW.as_bytes());
        match self.snapshot.get(Space::Meta, &row)? {
            Some(bytes) => {
                let bytes: [u8; 8] = bytes[..].try_into().map_err(|_| {
                    StorageError::Corrupt(format!("an applied index row of {} bytes", bytes.len()))
                })?;
                Ok(u64::from_be_bytes(bytes))
            }
            None => Ok(0),
        }
    }

    /// The shard's slot range as of this view, once a split recorded one (`None`: the range
    /// the shard had at bootstrap).
    pub fn slot_range(&self) -> Result<Option<(u16, u16)>, StorageError> {
        match self
            .snapshot
            .get(Space::Meta, &owned_key(self.shard, SLOTS_ROW.as_bytes()))?
        {
            Some(bytes) => Ok(Some(crate::store::decode_slots(&bytes)?)),
            None => Ok(None),
        }
    }
}

impl ShardView<'_> {
    /// The shard this view reads.
    pub fn shard(&self) -> ShardId {
        ShardId(self.shard)
    }

    pub(crate) fn snapshot(&self) -> &TablesSnapshot {
        &self.snapshot
    }

    /// Reads a key as stored, expired or not. A key that holds a transaction's intent is
    /// refused with [`StorageError::InTransaction`].
    pub fn get_raw(&self, key: &[u8]) -> Result<Option<Record>, StorageError> {
        if self.intents
            && !is_internal_key(key)
            && self
                .snapshot
                .get(Space::Data, &owned_key(self.shard, &intent_key(key)))?
                .is_some()
        {
            return Err(StorageError::InTransaction(bytes::Bytes::copy_from_slice(
                key,
            )));
        }
        self.get_stored(key)
    }

    /// Reads a key as stored, intent or not: for the apply loop, which judges intents
    /// itself.
    pub(crate) fn get_stored(&self, key: &[u8]) -> Result<Option<Record>, StorageError> {
        match self
            .snapshot
            .get(Space::Data, &owned_key(self.shard, key))?
        {
            Some(bytes) => Ok(Some(Record::decode(&bytes)?)),
            None => Ok(None),
        }
    }

    /// Reads a key, treating a record expired at `now_ms` as absent.
    pub fn get(&self, key: &[u8], now_ms: u64) -> Result<Option<Record>, StorageError> {
        Ok(self
            .get_raw(key)?
            .filter(|record| !record.is_expired(now_ms)))
    }

    /// Live keys starting with `prefix` from `start` on (all of them when unbounded), in key
    /// order, at most `limit` of them. Internal keys (sessions) count only when `prefix` is
    /// internal itself.
    ///
    /// With `slots`, only keys in that inclusive slot range count: a replica that has not yet
    /// applied a split of its shard still holds rows the reader routes to the new shard.
    pub fn scan(
        &self,
        prefix: &[u8],
        start: Bound<&[u8]>,
        limit: usize,
        now_ms: u64,
        slots: Option<(u16, u16)>,
    ) -> Result<Vec<(bytes::Bytes, Record)>, StorageError> {
        let mut out = Vec::new();
        let full_prefix = owned_key(self.shard, prefix);
        // A start past every key under the prefix: nothing to read (and no range whose ends
        // cross to hand to the store).
        if let Bound::Included(from) | Bound::Excluded(from) = start
            && from > prefix
            && !from.starts_with(prefix)
        {
            return Ok(out);
        }
        let lower = match start {
            Bound::Included(from) if from >= prefix => Bound::Included(owned_key(self.shard, from)),
            Bound::Excluded(after) if after >= prefix => {
                Bound::Excluded(owned_key(self.shard, after))
            }
            _ => Bound::Included(full_prefix.clone()),
        };
        let upper = crate::tables::prefix_end(&full_prefix);
        let hide_internal = !is_internal_key(prefix);
        if hide_internal {
            self.refuse_intents_under(prefix, start, slots)?;
        }
        let rows = self.snapshot.range(
            Space::Data,
            lower.as_ref().map(Vec::as_slice),
            upper.as_deref().map_or(Bound::Unbounded, Bound::Excluded),
        );
        for row in rows {
            if out.len() >= limit {
                break;
            }
            let (key, value) = row?;
            if Record::peek_expiry(&value).is_some_and(|at| at <= now_ms)
                || !in_slots(&key[4..], slots)
                || (hide_internal && is_internal_key(&key[4..]))
            {
                continue;
            }
            let record = Record::decode(&value)?;
            out.push((bytes::Bytes::copy_from_slice(&key[4..]), record));
        }
        Ok(out)
    }

    /// Walks every live row under `prefix` in key order, handing `keep` each value borrowed
    /// (no copy); returns how many it kept and the first `limit` of those, decoded. For
    /// filters that read many rows and keep few (document search): only kept rows are copied
    /// out of the store. `slots` limits the walk as in [`ShardView::scan`].
    pub fn scan_filtered(
        &self,
        prefix: &[u8],
        now_ms: u64,
        limit: usize,
        slots: Option<(u16, u16)>,
        mut keep: impl FnMut(&[u8]) -> bool,
    ) -> Result<(u64, Vec<(bytes::Bytes, Record)>), StorageError> {
        let mut kept = 0u64;
        let mut out = Vec::new();
        let hide_internal = !is_internal_key(prefix);
        if hide_internal {
            self.refuse_intents_under(prefix, Bound::Unbounded, slots)?;
        }
        for row in self
            .snapshot
            .prefix(Space::Data, &owned_key(self.shard, prefix))
        {
            let (key, value) = row?;
            if Record::peek_expiry(&value).is_some_and(|at| at <= now_ms)
                || !in_slots(&key[4..], slots)
                || (hide_internal && is_internal_key(&key[4..]))
            {
                continue;
            }
            let stored = Record::peek_value(&value)
                .ok_or_else(|| StorageError::Corrupt("a record shorter than its header".into()))?;
            if keep(stored) {
                kept += 1;
                if out.len() < limit {
                    out.push((
                        bytes::Bytes::copy_from_slice(&key[4..]),
                        Record::decode(&value)?,
                    ));
                }
            }
        }
        Ok((kept, out))
    }

    /// Refuses a scan under `prefix` from `start` (in `slots`) if any key there holds a
    /// transaction's intent: the rows a scan returns must all be settled. A key past the
    /// scan's last row counts too (the check comes first): at worst the scan waits for a
    /// transaction it would not have shown.
    fn refuse_intents_under(
        &self,
        prefix: &[u8],
        start: Bound<&[u8]>,
        slots: Option<(u16, u16)>,
    ) -> Result<(), StorageError> {
        if !self.intents {
            return Ok(());
        }
        for row in self
            .snapshot
            .prefix(Space::Data, &owned_key(self.shard, &intents_prefix()))
        {
            let (key, _) = row?;
            let Some(target) = intent_target(&key[4..]) else {
                continue;
            };
            let after_start = match start {
                Bound::Unbounded => true,
                Bound::Included(from) => target >= from,
                Bound::Excluded(after) => target > after,
            };
            if target.starts_with(prefix) && after_start && in_slots(target, slots) {
                return Err(StorageError::InTransaction(bytes::Bytes::copy_from_slice(
                    target,
                )));
            }
        }
        Ok(())
    }

    /// How many live keys (in `slots`) have an expiry at `now_ms`, and the sum of their times
    /// to live in milliseconds: Redis's `expires` and `avg_ttl`. Walks the expiry index from
    /// `now_ms` on, O(keys with an expiry).
    pub fn expiring(
        &self,
        now_ms: u64,
        slots: Option<(u16, u16)>,
    ) -> Result<(u64, u64), StorageError> {
        let start = crate::keys::expiry_key(self.shard, now_ms.saturating_add(1), b"");
        let end = crate::keys::expiry_key(self.shard.saturating_add(1), 0, b"");
        let (mut count, mut ttl_sum) = (0u64, 0u64);
        for row in self.snapshot.range(
            Space::Expiry,
            Bound::Included(start.as_slice()),
            Bound::Excluded(end.as_slice()),
        ) {
            let (key, _) = row?;
            if key.get(..4) != Some(&self.shard.to_be_bytes()[..]) {
                break;
            }
            if !in_slots(&key[12..], slots) {
                continue;
            }
            let at: [u8; 8] = key[4..12]
                .try_into()
                .map_err(|_| StorageError::Corrupt("an expiry index row".into()))?;
            count += 1;
            ttl_sum = ttl_sum.saturating_add(u64::from_be_bytes(at).saturating_sub(now_ms));
        }
        Ok((count, ttl_sum))
    }
}

impl Storage {
    /// A view of `shard` as of now: every read through it sees the same applied prefix of
    /// the shard's log, however many rows it reads and however long it takes.
    pub fn shard_view(&self, shard: ShardId) -> ShardView<'_> {
        // Asked before the snapshot is taken: see `crate::intents`.
        let intents = self.intents.may_exist(shard.0);
        self.view_now(shard, intents)
    }

    /// A view for the apply loop, which looks for intents itself.
    pub(crate) fn stored_view(&self, shard: ShardId) -> ShardView<'_> {
        self.view_now(shard, false)
    }

    /// Like [`Storage::shard_view`], for a read handed out in pieces over time (a
    /// whole-collection read in pages): the view owns what it reads, so it may be kept
    /// across requests. While it is held, compaction keeps every row version it sees, so it
    /// must be dropped as soon as the read ends or is abandoned.
    pub fn pinned_view(&self, shard: ShardId) -> ShardView<'static> {
        let intents = self.intents.may_exist(shard.0);
        self.view_now(shard, intents)
    }

    /// A view of `shard` from a snapshot taken now.
    fn view_now<'v>(&self, shard: ShardId, intents: bool) -> ShardView<'v> {
        ShardView {
            storage: std::marker::PhantomData,
            snapshot: self.tables.snapshot(),
            shard: shard.0,
            intents,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{ApplyEntry, StorageOptions};
    use bytes::Bytes;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    use trireme_types::{Command, LogCommand};

    const ROWS: usize = 16;

    fn key(i: usize) -> Bytes {
        Bytes::from(format!("row{i:03}"))
    }

    /// Every entry rewrites all of a shard's rows with its generation, while readers take
    /// views and read the rows by a scan and by point reads: each view shows one generation
    /// in every row (never a batch halfway into the memtable), and a later view never an
    /// older one.
    #[test]
    fn a_view_sees_each_applied_entry_whole() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let shard = ShardId(0);
        let done = AtomicBool::new(false);
        let views_taken = AtomicU64::new(0);
        let apply = |generation: u64| {
            let command = LogCommand {
                now_ms: 1,
                command: Command::PutMany {
                    pairs: (0..ROWS)
                        .map(|i| (key(i), Bytes::from(generation.to_string())))
                        .collect(),
                },
            };
            let entry = ApplyEntry {
                index: generation,
                command: Some(&command),
            };
            storage.apply(shard, &[entry], &[]).unwrap();
        };
        apply(1);
        let value = |record: &Record| -> u64 {
            std::str::from_utf8(&record.value).unwrap().parse().unwrap()
        };
        std::thread::scope(|scope| {
            let readers: Vec<_> = (0..2)
                .map(|_| {
                    let (storage, done, views_taken) = (&storage, &done, &views_taken);
                    scope.spawn(move || {
                        let (mut views, mut last, mut generations) = (0u64, 0u64, 0u64);
                        while !done.load(Ordering::Acquire) {
                            let view = storage.shard_view(shard);
                            let rows = view.scan(b"row", Bound::Unbounded, ROWS, 1, None).unwrap();
                            assert_eq!(rows.len(), ROWS);
                            let seen = value(&rows[0].1);
                            for (k, record) in &rows {
                                assert_eq!(value(record), seen, "{k:?} in a view of {seen}");
                            }
                            for i in [ROWS - 1, ROWS / 2, 0] {
                                let record = view.get(&key(i), 1).unwrap().unwrap();
                                assert_eq!(value(&record), seen, "row {i} read after the scan");
                            }
                            assert!(seen >= last, "a view of {seen} after one of {last}");
                            generations += u64::from(seen != last);
                            (views, last) = (views + 1, seen);
                            views_taken.fetch_add(1, Ordering::Relaxed);
                        }
                        (views, generations)
                    })
                })
                .collect();
            // Applies go on until the readers have taken enough views (bounded, should the
            // readers starve).
            let mut generation = 2;
            let stop = std::time::Instant::now() + std::time::Duration::from_secs(10);
            while generation < 200
                || (views_taken.load(Ordering::Relaxed) < 200 && std::time::Instant::now() < stop)
            {
                apply(generation);
                generation += 1;
            }
            done.store(true, Ordering::Release);
            for reader in readers {
                let (views, generations) = reader.join().unwrap();
                // The reads overlapped the applies: they saw many different entries.
                assert!(views >= 20 && generations >= 5, "{views} {generations}");
            }
        });
    }
}
