//! The node's storage: the Raft logs of every group in one log store ([`crate::raft_log`]),
//! the rows of every shard in one LSM tree ([`crate::tables`]), and the operations the raft
//! layer and the read path need.

use crate::group_commit::GroupCommit;
use crate::keys::owned_key;
use crate::raft_log::RaftLogs;
use crate::tables::{Space, Tables};
use crate::{StorageError, SyncCallback};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::Instant;
use trireme_types::{GroupId, LatencyHistogram, Record, ShardId, Timed};

/// How to open the store.
#[derive(Debug, Clone)]
pub struct StorageOptions {
    /// The tables' block cache (blocks of rows, indexes and filters as read from disk), bytes.
    pub cache_bytes: u64,
    /// The record cache in front of the tables (the newest written or read records, for point
    /// reads), bytes; 0 turns it off.
    pub record_cache_bytes: u64,
    /// Free space kept on the data directory's file system: below it, writes are refused
    /// before they are proposed (see [`Storage::check_disk_space`]); 0 turns it off.
    pub min_free_bytes: u64,
    /// Memory the in-memory index of collection members may take on this node, bytes:
    /// writes to the collections beyond it read their member rows instead (see
    /// [`crate::member_index`]).
    pub member_index_bytes: u64,
    /// Rows of dead collection versions the background purge removes per second at most
    /// (see [`crate::purge`]); 0 removes them as fast as one thread can.
    pub purge_rows_per_sec: u64,
}

impl Default for StorageOptions {
    fn default() -> Self {
        Self {
            cache_bytes: 64 * 1024 * 1024,
            record_cache_bytes: 64 * 1024 * 1024,
            min_free_bytes: 256 * 1024 * 1024,
            member_index_bytes: 256 * 1024 * 1024,
            purge_rows_per_sec: 50_000,
        }
    }
}

/// What the write path's storage steps cost, for `/metrics`: how often each ran and for how
/// long in total. Each log entry passes through them in order: appended, then waits for the
/// group-commit thread, is covered by one of its fdatasyncs, and is applied once committed.
#[derive(Debug, Default)]
pub struct StorageMetrics {
    /// `append_log` calls (one per Raft append, of one or more entries).
    pub appends: Timed,
    /// Durability requests, and how long each waited from being queued until the fdatasync
    /// that covered it started (the group-commit thread waking, lingering, or finishing the
    /// previous sync).
    pub sync_waits: Timed,
    /// fdatasync calls by group commit and the time spent in them.
    pub syncs: Timed,
    /// `apply` calls (one per batch of committed entries of one shard).
    pub applies: Timed,
    /// The same batches by how long each took: every other write of the shard waits while
    /// one applies, so the slow ones matter, not the sum.
    pub apply_batches: LatencyHistogram,
}

/// One node's storage. Cheap to share behind an `Arc`.
pub struct Storage {
    /// Every group's Raft log, vote and named values.
    logs: RaftLogs,
    /// Makes log writes durable: one fdatasync of the log store for every group's appends.
    log_commit: GroupCommit,
    /// Every shard's rows, made durable by flushes rather than a journal.
    pub(crate) tables: Arc<Tables>,
    /// Flushes the tables for [`Storage::sync_async`] (before a snapshot lets the log be
    /// purged): one flush for every caller waiting.
    data_commit: GroupCommit,
    poisoned: Arc<AtomicBool>,
    metrics: Arc<StorageMetrics>,
    dir: PathBuf,
    /// The free space left for the log and the tables.
    disk_space: Arc<crate::disk_space::DiskSpace>,
    /// Each shard's slot range as its `slots` row says (`None`: no row, the shard has never
    /// been split nor was made by a split), read once: every applied batch checks it.
    slot_ranges: std::sync::RwLock<std::collections::HashMap<u32, Option<(u16, u16)>>>,
    /// Each shard's removal watermark (see [`Storage::removal_watermark`]), read once.
    removals: std::sync::RwLock<std::collections::HashMap<u32, u64>>,
    /// Each shard's [`RemovalGate`].
    removal_gates: std::sync::RwLock<std::collections::HashMap<u32, Arc<RemovalGate>>>,
    /// Blocking queries waiting for keys of this node's replicas to change.
    watchers: Arc<crate::watch::Watchers>,
    /// Every key of each shard replica, for writes that need not read the old record.
    key_index: crate::key_index::KeyIndex,
    /// Told of every applied change (document search keeps its indexes by it); set once.
    observer: std::sync::OnceLock<Arc<dyn ApplyObserver>>,
    /// Removes the rows of dead collection versions in the background.
    pub(crate) purger: crate::purge::Purger,
    /// The keys of each shard replica that hold a transaction's intent.
    pub(crate) intents: crate::intents::Intents,
}

/// Reads the intents of every shard stored in `tables` (one seek per shard to find the next).
fn load_every_shards_intents(
    tables: &Tables,
    intents: &crate::intents::Intents,
) -> Result<(), StorageError> {
    let mut from = Vec::new();
    loop {
        let Some(row) = tables
            .range(
                Space::Data,
                std::ops::Bound::Included(from.as_slice()),
                std::ops::Bound::Unbounded,
            )
            .next()
        else {
            return Ok(());
        };
        let (key, _) = row?;
        let Some(shard) = key.get(..4).and_then(|b| <[u8; 4]>::try_from(b).ok()) else {
            return Ok(());
        };
        let shard = u32::from_be_bytes(shard);
        intents.load(tables, shard)?;
        match shard.checked_add(1) {
            Some(next) => from = next.to_be_bytes().to_vec(),
            None => return Ok(()),
        }
    }
}

/// What wants to follow the rows of every shard as they change here, after each change is
/// written: document search, whose indexes are kept from it. Called on the thread that
/// applies, so each call must be quick (hand the work on); calls for one shard come in the
/// order of its changes.
pub trait ApplyObserver: Send + Sync {
    /// Whether changes to `key` of `shard` matter to it; asked of every changed row.
    fn wants(&self, shard: ShardId, key: &[u8]) -> bool;
    /// Entries of `shard` up to log index `index` changed these rows (`None`: removed).
    fn applied(&self, shard: ShardId, index: u64, changes: Vec<(bytes::Bytes, Option<Record>)>);
    /// Every row of `shard` may have changed at once (a snapshot installed, a split): what
    /// was known of its rows no longer holds.
    fn replaced(&self, shard: ShardId);
    /// This node no longer holds `shard`.
    fn dropped(&self, shard: ShardId);
}

/// The tables' folder in the data directory.
const TABLES_DIR: &str = "tables";

/// Name of the `data_meta` row that holds a shard's slot range once a split has touched it.
pub(crate) const SLOTS_ROW: &str = "slots";

/// Name of the `data_meta` row that holds a shard's removal watermark.
pub(crate) const REMOVED_ROW: &str = "removed";

impl std::fmt::Debug for Storage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Storage").field("dir", &self.dir).finish()
    }
}

impl Storage {
    /// Opens (or creates) the store under `dir`.
    pub fn open(dir: &Path, options: &StorageOptions) -> Result<Arc<Self>, StorageError> {
        std::fs::create_dir_all(dir)?;
        let found = crate::format::check_or_record(dir)?;
        let poisoned = Arc::new(AtomicBool::new(false));
        let tables = Arc::new(Tables::open(
            &dir.join(TABLES_DIR),
            options.cache_bytes,
            options.record_cache_bytes,
            poisoned.clone(),
        )?);
        if let crate::format::Found::Upgradable(from) = found {
            tracing::info!(
                dir = %dir.display(),
                from,
                to = crate::format::CURRENT,
                "upgrading the data directory's format"
            );
            crate::format::begin_upgrade(dir, from)?;
            let rows = crate::format::upgrade_collection_rows(&tables)?;
            tables.flush()?;
            crate::format::finish_upgrade(dir)?;
            tracing::info!(rows, "upgraded the data directory's format");
        }
        let metrics = Arc::new(StorageMetrics::default());
        let logs = RaftLogs::open(&dir.join(crate::raft_log::DIR))?;
        let mut log_file = logs.file_sync();
        let log_commit = GroupCommit::start(
            "trireme-log-commit",
            move || log_file.sync(),
            poisoned.clone(),
            Some(metrics.clone()),
        );
        // Weak: the tables close (flush, stop their threads) when the storage is dropped, not
        // whenever this thread notices.
        let flushed = Arc::downgrade(&tables);
        let data_commit = GroupCommit::start(
            "trireme-data-commit",
            move || match flushed.upgrade() {
                Some(tables) => tables.flush(),
                None => Err(StorageError::Closed),
            },
            poisoned.clone(),
            None,
        );
        let disk_space = Arc::new(crate::disk_space::DiskSpace::new(
            dir.to_path_buf(),
            options.min_free_bytes,
        ));
        let purger = crate::purge::Purger::start(
            tables.clone(),
            crate::purge::WriteGuard {
                poisoned: poisoned.clone(),
                disk_space: disk_space.clone(),
            },
            options.purge_rows_per_sec,
        );
        let intents = crate::intents::Intents::default();
        load_every_shards_intents(&tables, &intents)?;
        Ok(Arc::new(Self {
            logs,
            log_commit,
            tables,
            data_commit,
            poisoned,
            metrics,
            dir: dir.to_path_buf(),
            disk_space,
            slot_ranges: std::sync::RwLock::default(),
            removals: std::sync::RwLock::default(),
            removal_gates: std::sync::RwLock::default(),
            watchers: Arc::default(),
            key_index: crate::key_index::KeyIndex::new(options.member_index_bytes),
            observer: std::sync::OnceLock::new(),
            purger,
            intents,
        }))
    }

    /// Installs the observer of applied changes; only the first one counts. Install it before
    /// any group applies, or it misses their changes.
    pub fn set_observer(&self, observer: Arc<dyn ApplyObserver>) {
        let _ = self.observer.set(observer);
    }

    /// The key index of every shard replica (see [`crate::key_index`]).
    pub(crate) fn key_index(&self) -> &crate::key_index::KeyIndex {
        &self.key_index
    }

    /// Builds `shard`'s key index from its rows, and queues the dead collection versions it
    /// finds for their purge (a crash lost the queue that named them).
    pub(crate) fn build_key_index(
        &self,
        shard: u32,
    ) -> Result<crate::key_index::ShardKeys, StorageError> {
        use crate::key_index::{IndexedRow, MemberRow};
        use trireme_types::collection::{RowTable, row_parts};
        let members = self.key_index.member_budget().enabled();
        let rows = self
            .tables
            .prefix(Space::Data, &shard.to_be_bytes())
            .filter_map(|row| {
                let (key, value) = match row {
                    Ok(row) => row,
                    Err(e) => return Some(Err(e)),
                };
                let user_key = key.get(4..).unwrap_or_default();
                if let Some(parts) = row_parts(user_key) {
                    // A sorted set's score row: its member row says all the index keeps.
                    let version = parts.version.filter(|_| parts.table == RowTable::Members)?;
                    let indexed = members.then(|| {
                        let row = Record::decode(&value).ok().map(|r| MemberRow::of(&r));
                        (Box::from(parts.rest), row)
                    });
                    return Some(Ok(IndexedRow::Member {
                        key: Box::from(parts.key),
                        version,
                        indexed,
                        after_record: parts.key < user_key,
                    }));
                }
                Some(
                    Record::decode(&value)
                        .map(|record| IndexedRow::Key(Box::from(user_key), record))
                        .map_err(StorageError::from),
                )
            });
        let (keys, dead) = crate::key_index::build(rows, self.key_index.member_budget().clone())?;
        if !dead.is_empty() {
            tracing::info!(
                shard,
                versions = dead.len(),
                "found dead collection rows to purge"
            );
        }
        self.purger.queue(
            dead.into_iter()
                .map(|(key, version)| crate::purge::DeadVersion {
                    shard,
                    key: bytes::Bytes::from(Vec::from(key)),
                    version,
                }),
        );
        Ok(keys)
    }

    /// Dead collection versions whose rows wait for their background purge (or are being
    /// purged now).
    pub fn purges_pending(&self) -> usize {
        self.purger.pending()
    }

    /// Rows of dead collection versions purged since the store opened.
    pub fn purged_rows(&self) -> u64 {
        self.purger.removed_rows()
    }

    /// Waits until no dead collection rows wait for their purge, at most `timeout`; whether
    /// none do.
    pub fn wait_for_purges(&self, timeout: std::time::Duration) -> bool {
        self.purger.wait_idle(timeout)
    }

    /// The observer of applied changes, if one is installed.
    pub(crate) fn observer(&self) -> Option<&Arc<dyn ApplyObserver>> {
        self.observer.get()
    }

    /// The directory the store lives in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// `Err` while the data directory's file system has less free space than the node keeps
    /// (`min_free_bytes`): a new write must then be refused before it is proposed, so that
    /// no log append or flush meets a full disk. Measured at most every 100 ms.
    pub fn check_disk_space(&self) -> Result<(), crate::DiskFull> {
        self.disk_space.check()
    }

    /// As [`Storage::check_disk_space`], with room for `incoming` more bytes besides (a
    /// snapshot about to be installed).
    pub fn check_disk_room(&self, incoming: u64) -> Result<(), crate::DiskFull> {
        self.disk_space.check_room(incoming)
    }

    /// Bytes free on the data directory's file system, as last measured.
    pub fn free_disk_bytes(&self) -> u64 {
        self.disk_space.free_bytes()
    }

    /// Memory the member index of every shard replica takes, as it counts against
    /// [`StorageOptions::member_index_bytes`].
    pub fn member_index_bytes(&self) -> u64 {
        self.key_index.member_budget().used()
    }

    /// Whether a failed sync has poisoned the store.
    pub fn is_poisoned(&self) -> bool {
        self.poisoned.load(Ordering::Acquire)
    }

    /// What the write path's storage steps cost so far.
    pub fn metrics(&self) -> &StorageMetrics {
        &self.metrics
    }

    pub(crate) fn check_writable(&self) -> Result<(), StorageError> {
        if self.is_poisoned() {
            return Err(StorageError::Poisoned);
        }
        Ok(())
    }

    /// Calls `callback` once every log write (append, vote, purge) made before this call is
    /// on disk: one fdatasync covers the appends of every group.
    pub fn sync_log(&self, callback: SyncCallback) {
        self.log_commit.sync(callback);
    }

    /// Waits until every log write made before this call is on disk.
    pub async fn sync_log_async(&self) -> Result<(), StorageError> {
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.sync_log(Box::new(move |result| {
            let _ = tx.send(result);
        }));
        rx.await.map_err(|_| StorageError::Closed)?
    }

    /// Waits until every write made before this call, to the logs and to the rows, is on disk.
    pub async fn sync_async(&self) -> Result<(), StorageError> {
        self.sync_log_async().await?;
        let (tx, rx) = tokio::sync::oneshot::channel();
        self.data_commit.sync(Box::new(move |result| {
            let _ = tx.send(result);
        }));
        rx.await.map_err(|_| StorageError::Closed)?
    }

    // ---- raft log ----

    /// Appends log entries of `group`, consecutive by index (not yet durable: call
    /// [`Storage::sync_log`]). An entry replaces any at its index and after it; an entry past
    /// a gap after the last one (a snapshot was installed) starts the log anew.
    pub fn append_log(
        &self,
        group: GroupId,
        entries: impl IntoIterator<Item = (u64, Vec<u8>)>,
    ) -> Result<(), StorageError> {
        self.check_writable()?;
        let started = Instant::now();
        self.logs.append(group.0, entries)?;
        crate::crash::point("log-written");
        self.metrics.appends.record(started.elapsed());
        Ok(())
    }

    /// Reads entries `start..end` of `group`, in order; entries the log does not hold (purged,
    /// never written) are left out.
    pub fn read_log(
        &self,
        group: GroupId,
        start: u64,
        end: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        self.logs.read(group.0, start, end)
    }

    /// The index of the last entry of `group`'s log, if it holds any.
    pub fn last_log_index(&self, group: GroupId) -> Option<u64> {
        self.logs.span(group.0).map(|(_, last)| last)
    }

    /// The last entry of `group`'s log, if any.
    pub fn last_log(&self, group: GroupId) -> Result<Option<(u64, Vec<u8>)>, StorageError> {
        let Some((_, last)) = self.logs.span(group.0) else {
            return Ok(None);
        };
        Ok(self.logs.read(group.0, last, last + 1)?.pop())
    }

    /// Cuts `group`'s log before index `from`. The cut is made durable by the next append,
    /// which replaces the tail on disk; a crash before that brings the cut entries back, as
    /// if the cut had never been asked for (Raft never acknowledged them after it).
    pub fn truncate_log(&self, group: GroupId, from: u64) -> Result<(), StorageError> {
        self.check_writable()?;
        self.logs.truncate(group.0, from);
        Ok(())
    }

    /// Drops entries of `group` below `upto` (not yet durable: a crash may bring them back,
    /// which is harmless: they are below the purge point that the caller recorded).
    pub fn purge_log(&self, group: GroupId, upto: u64) -> Result<(), StorageError> {
        self.check_writable()?;
        self.logs.purge(group.0, upto)?;
        crate::crash::point("log-purged");
        Ok(())
    }

    /// Bytes the log store's segment files take on disk.
    pub fn log_disk_bytes(&self) -> u64 {
        self.logs.disk_bytes()
    }

    /// Bytes the tables holding the rows take on disk.
    pub fn table_disk_bytes(&self) -> u64 {
        self.tables.disk_bytes()
    }

    /// Sets a named Raft value of `group` (vote, purge point, the node's identity); durable
    /// once [`Storage::sync_log`] says so.
    pub fn put_raft_meta(
        &self,
        group: GroupId,
        name: &str,
        value: Vec<u8>,
    ) -> Result<(), StorageError> {
        self.check_writable()?;
        self.logs.put_meta(group.0, name, value)
    }

    /// Reads a named Raft value of `group`.
    pub fn raft_meta(&self, group: GroupId, name: &str) -> Result<Option<Vec<u8>>, StorageError> {
        Ok(self.logs.meta(group.0, name))
    }

    /// Whether `group` has Raft state here (a vote, log entries): a replica this node holds,
    /// or held and has not dropped.
    pub fn has_group_state(&self, group: GroupId) -> Result<bool, StorageError> {
        Ok(self.logs.has_group(group.0))
    }

    /// Deletes everything of one replica: `group`'s log and Raft metadata, and `shard`'s rows
    /// with their metadata and expiry entries. Used once the replica has moved to another
    /// node, after its group stopped. Written in batches of bounded size (a shard may hold
    /// gigabytes); durable once synced. Returns the number of rows deleted.
    pub fn drop_replica(&self, group: GroupId, shard: ShardId) -> Result<u64, StorageError> {
        let shard = shard.0;
        let group = group.0;
        const BATCH_ROWS: usize = 10_000;
        self.check_writable()?;
        self.forget_slot_range(shard);
        self.key_index.forget(shard);
        self.intents.replacing(shard);
        let mut deleted = 0u64;
        self.logs.remove_group(group)?;
        for space in [Space::Data, Space::Meta, Space::Expiry] {
            loop {
                let mut keys = Vec::with_capacity(BATCH_ROWS);
                for row in self
                    .tables
                    .prefix(space, &shard.to_be_bytes())
                    .take(BATCH_ROWS)
                {
                    keys.push(row?.0);
                }
                if keys.is_empty() {
                    break;
                }
                let mut batch = self.tables.batch();
                for key in &keys {
                    batch.remove(space, key);
                }
                batch.commit()?;
                if space == Space::Data {
                    deleted += keys.len() as u64;
                }
            }
        }
        self.forget_slot_range(shard);
        self.forget_removal(shard);
        self.intents.drop_shard(shard);
        self.watchers.everything_changed();
        if let Some(observer) = self.observer() {
            observer.dropped(ShardId(shard));
        }
        // Nothing in the log brings these removals back after a crash: make them durable.
        self.tables.flush()?;
        Ok(deleted)
    }

    // ---- state machine ----

    /// Reads a state-machine metadata value of `shard` (applied log id, membership).
    pub fn data_meta(
        &self,
        shard: ShardId,
        name: &str,
    ) -> Result<Option<lsm_tree::Slice>, StorageError> {
        let shard = shard.0;
        self.tables
            .get(Space::Meta, &owned_key(shard, name.as_bytes()))
    }

    /// The slot range `shard` owns as its replicated state says: `None` until a split has
    /// touched the shard (it then owns the range it was bootstrapped with).
    ///
    /// Read on every read request and every applied batch: a shared lock on a cached answer.
    pub fn slot_range(&self, shard: ShardId) -> Result<Option<(u16, u16)>, StorageError> {
        let shard = shard.0;
        let cached = self
            .slot_ranges
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&shard)
            .copied();
        if let Some(range) = cached {
            return Ok(range);
        }
        // Read and cached under the write lock, so a concurrent forget is not undone.
        let mut cache = self
            .slot_ranges
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let range = match self.data_meta(ShardId(shard), SLOTS_ROW)? {
            Some(bytes) => Some(decode_slots(&bytes)?),
            None => None,
        };
        cache.insert(shard, range);
        Ok(range)
    }

    /// The log index of the last entry that removed a row from `shard` (a delete, an expiry
    /// reaped, a split that took rows away; 0 if none ever did). With the `ModifyIndex` of the
    /// rows it holds, it makes the index of a Consul query that never goes backwards: a row
    /// that leaves a result takes its index with it, and the watermark covers it.
    ///
    /// It is raised in the cache before the batch that removes the row is written, so a
    /// reader that reads rows first and the watermark second never sees a removal the
    /// watermark does not cover.
    pub fn removal_watermark(&self, shard: ShardId) -> Result<u64, StorageError> {
        let shard = shard.0;
        let cached = self
            .removals
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&shard)
            .copied();
        if let Some(at) = cached {
            return Ok(at);
        }
        let mut cache = self
            .removals
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let stored = self.stored_removal(shard)?;
        let at = *cache.entry(shard).or_insert(stored);
        Ok(at)
    }

    fn stored_removal(&self, shard: u32) -> Result<u64, StorageError> {
        Ok(match self.data_meta(ShardId(shard), REMOVED_ROW)? {
            Some(bytes) => decode_removal(&bytes)?,
            None => 0,
        })
    }

    /// Raises the cached removal watermark of `shard` to `at` (never lowers it); the caller
    /// writes the row in the batch it is about to commit.
    pub(crate) fn raise_removal(&self, shard: u32, at: u64) -> Result<(), StorageError> {
        let stored = self.removal_watermark(ShardId(shard))?;
        let mut cache = self
            .removals
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let entry = cache.entry(shard).or_insert(stored);
        *entry = (*entry).max(at);
        Ok(())
    }

    /// The gate that removals from `shard` pass.
    pub(crate) fn removal_gate(&self, shard: u32) -> Result<Arc<RemovalGate>, StorageError> {
        if let Some(gate) = self
            .removal_gates
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .get(&shard)
        {
            return Ok(gate.clone());
        }
        let settled = self.removal_watermark(ShardId(shard))?;
        Ok(self
            .removal_gates
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .entry(shard)
            .or_insert_with(|| Arc::new(RemovalGate::new(settled)))
            .clone())
    }

    /// Runs `read` of `shard`'s rows and reads the shard's removal watermark so that the
    /// watermark covers no removal the rows do not show. A read that overlapped a removal
    /// being written could otherwise pair the rows from before it with the watermark from
    /// after it: an index past what the rows show, and a blocking query would sleep through
    /// the change. Tried a few times as a sequence lock (then the watermark is exact);
    /// after that, the watermark of the removals committed before the read began is used,
    /// which may lag what the rows show (a watcher then wakes once more), never lead it.
    /// Readers never wait for writers, nor writers for readers.
    pub fn read_with_removals<T, E>(
        &self,
        shard: ShardId,
        mut read: impl FnMut() -> Result<T, E>,
    ) -> Result<(T, u64), E>
    where
        E: From<StorageError>,
    {
        let gate = self.removal_gate(shard.0)?;
        for _ in 0..4 {
            let before = gate.generation.load(Ordering::Acquire);
            if before % 2 == 1 {
                std::thread::yield_now();
                continue;
            }
            let found = read()?;
            let removed = self.removal_watermark(shard)?;
            std::sync::atomic::fence(Ordering::Acquire);
            if gate.generation.load(Ordering::Acquire) == before {
                return Ok((found, removed));
            }
        }
        let settled = gate.settled.load(Ordering::Acquire);
        let found = read()?;
        Ok((found, settled))
    }

    /// Forgets the cached removal watermark of `shard` (its replica was dropped).
    pub(crate) fn forget_removal(&self, shard: u32) {
        self.removal_gates
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&shard);
        self.removals
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&shard);
    }

    /// The blocking queries waiting on this node's replicas.
    pub fn watchers(&self) -> &Arc<crate::watch::Watchers> {
        &self.watchers
    }

    /// Forgets the cached slot range of `shard` (its `slots` row was just written or removed).
    pub(crate) fn forget_slot_range(&self, shard: u32) {
        self.slot_ranges
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .remove(&shard);
    }

    /// The keys of `shard` holding intents of transactions that expired by `now_ms`: the
    /// shard's leader resolves them (see [`trireme_types::txn`]).
    pub fn expired_intents(&self, shard: ShardId, now_ms: u64) -> Vec<bytes::Bytes> {
        self.intents.expired(shard.0, now_ms)
    }

    /// The prefix holds of `shard` whose transactions expired by `now_ms`: each hold's key
    /// and what it says. The shard's leader resolves them as it does expired intents.
    pub fn expired_holds(
        &self,
        shard: ShardId,
        now_ms: u64,
    ) -> Vec<(bytes::Bytes, std::sync::Arc<trireme_types::txn::Intent>)> {
        self.intents
            .expired_holds(shard.0, now_ms)
            .into_iter()
            .map(|(row, held)| (row, held.intent))
            .collect()
    }

    /// The transaction records `shard` holds whose leases ended before `cutoff_ms`: the
    /// shard's leader finishes them (see [`trireme_types::txn`]).
    pub fn txn_records_expired_by(
        &self,
        shard: ShardId,
        cutoff_ms: u64,
    ) -> Vec<(bytes::Bytes, trireme_types::txn::TxnRecord)> {
        self.intents.records_expired_by(shard.0, cutoff_ms)
    }

    /// Reads a key as stored, expired or not (one read: see [`Storage::shard_view`] for
    /// several that must agree).
    pub fn get_raw(&self, shard: ShardId, key: &[u8]) -> Result<Option<Record>, StorageError> {
        self.shard_view(shard).get_raw(key)
    }

    /// Reads a key, treating a record expired at `now_ms` as absent.
    pub fn get(
        &self,
        shard: ShardId,
        key: &[u8],
        now_ms: u64,
    ) -> Result<Option<Record>, StorageError> {
        self.shard_view(shard).get(key, now_ms)
    }

    /// [`ShardView::scan`] of a view taken now, from after `after` (exclusive, if given).
    pub fn scan(
        &self,
        shard: ShardId,
        prefix: &[u8],
        after: Option<&[u8]>,
        limit: usize,
        now_ms: u64,
        slots: Option<(u16, u16)>,
    ) -> Result<Vec<(bytes::Bytes, Record)>, StorageError> {
        let start = after.map_or(std::ops::Bound::Unbounded, std::ops::Bound::Excluded);
        self.shard_view(shard)
            .scan(prefix, start, limit, now_ms, slots)
    }

    /// [`ShardView::scan_filtered`] of a view taken now.
    pub fn scan_filtered(
        &self,
        shard: ShardId,
        prefix: &[u8],
        now_ms: u64,
        limit: usize,
        slots: Option<(u16, u16)>,
        keep: impl FnMut(&[u8]) -> bool,
    ) -> Result<(u64, Vec<(bytes::Bytes, Record)>), StorageError> {
        self.shard_view(shard)
            .scan_filtered(prefix, now_ms, limit, slots, keep)
    }

    /// Keys of `shard` whose expiry has passed at `now_ms`, at most `limit` of them.
    pub fn expired_keys(
        &self,
        shard: ShardId,
        now_ms: u64,
        limit: usize,
    ) -> Result<Vec<bytes::Bytes>, StorageError> {
        let shard = shard.0;
        let mut out = Vec::new();
        let start = crate::keys::expiry_key(shard, 0, b"");
        let end = crate::keys::expiry_key(shard, now_ms.saturating_add(1), b"");
        let rows = self.tables.range(
            Space::Expiry,
            std::ops::Bound::Included(start.as_slice()),
            std::ops::Bound::Excluded(end.as_slice()),
        );
        for row in rows.take(limit) {
            let (key, _) = row?;
            out.push(bytes::Bytes::copy_from_slice(&key[12..]));
        }
        Ok(out)
    }

    /// [`ShardView::expiring`] of a view taken now.
    pub fn expiring(
        &self,
        shard: ShardId,
        now_ms: u64,
        slots: Option<(u16, u16)>,
    ) -> Result<(u64, u64), StorageError> {
        self.shard_view(shard).expiring(now_ms, slots)
    }

    /// Approximate number of keys stored for `shard` (expired ones included).
    pub fn count_keys(&self, shard: ShardId) -> usize {
        let shard = shard.0;
        self.tables
            .prefix(Space::Data, &shard.to_be_bytes())
            .count()
    }

    /// Rows stored for `shard` (expired ones not yet removed included) and their bytes (keys
    /// and encoded records). Reads every row of the shard, so callers run it off the request
    /// path and cache the answer.
    pub fn shard_usage(&self, shard: ShardId) -> Result<(u64, u64), StorageError> {
        let shard = shard.0;
        let (mut rows, mut bytes) = (0u64, 0u64);
        for row in self.tables.prefix(Space::Data, &shard.to_be_bytes()) {
            let (key, value) = row?;
            rows += 1;
            bytes += (key.len() + value.len()) as u64;
        }
        Ok((rows, bytes))
    }

    /// The bytes `shard` stores for each slot that holds any (keys and encoded records, a
    /// collection's member rows counted under its key's slot, rows of dead collection
    /// versions left out, as a snapshot leaves them), for choosing where to split it. Reads
    /// every row of the shard, as [`Storage::shard_usage`] does.
    pub fn slot_bytes(&self, shard: ShardId) -> Result<BTreeMap<u16, u64>, StorageError> {
        let mut bytes: BTreeMap<u16, u64> = BTreeMap::new();
        self.shard_view(shard).for_each_snapshot_row(|key, value| {
            *bytes.entry(trireme_types::key_slot(key)).or_default() +=
                (key.len() + value.len()) as u64;
        })?;
        Ok(bytes)
    }
}

/// What a removal from a shard passes while it is written (see
/// [`Storage::read_with_removals`]): a generation, odd from just before the removal's
/// watermark is raised until its batch is committed, and the watermark of the removals
/// committed so far. A shard's removals are written one at a time (its state machine's).
#[derive(Debug)]
pub(crate) struct RemovalGate {
    pub(crate) generation: std::sync::atomic::AtomicU64,
    pub(crate) settled: AtomicU64,
}

impl RemovalGate {
    fn new(settled: u64) -> Self {
        RemovalGate {
            generation: AtomicU64::new(0),
            settled: AtomicU64::new(settled),
        }
    }

    /// Marks a removal as being written until the guard is dropped.
    pub(crate) fn enter(&self) -> RemovalWrite<'_> {
        self.generation.fetch_add(1, Ordering::AcqRel);
        RemovalWrite {
            gate: self,
            settled: None,
        }
    }
}

/// A removal being written: see [`RemovalGate::enter`].
pub(crate) struct RemovalWrite<'g> {
    gate: &'g RemovalGate,
    settled: Option<u64>,
}

impl RemovalWrite<'_> {
    /// The removal raises the watermark to `at` once committed (when the guard is dropped).
    pub(crate) fn raises_to(&mut self, at: u64) {
        self.settled = Some(self.settled.unwrap_or(0).max(at));
    }
}

impl Drop for RemovalWrite<'_> {
    fn drop(&mut self) {
        if let Some(at) = self.settled {
            self.gate.settled.fetch_max(at, Ordering::AcqRel);
        }
        self.gate.generation.fetch_add(1, Ordering::AcqRel);
    }
}

/// Whether `key` is in the inclusive slot range `slots` (every key is when there is none).
pub(crate) fn in_slots(key: &[u8], slots: Option<(u16, u16)>) -> bool {
    slots.is_none_or(|(start, end)| (start..=end).contains(&trireme_types::key_slot(key)))
}

/// A `slots` row: first and last slot, big-endian.
pub(crate) fn encode_slots((start, end): (u16, u16)) -> Vec<u8> {
    let mut out = Vec::with_capacity(4);
    out.extend_from_slice(&start.to_be_bytes());
    out.extend_from_slice(&end.to_be_bytes());
    out
}

pub(crate) fn decode_slots(bytes: &[u8]) -> Result<(u16, u16), StorageError> {
    match bytes {
        [a, b, c, d] => Ok((u16::from_be_bytes([*a, *b]), u16::from_be_bytes([*c, *d]))),
        _ => Err(StorageError::Corrupt(format!(
            "a slots row of {} bytes",
            bytes.len()
        ))),
    }
}

pub(crate) fn encode_removal(at: u64) -> Vec<u8> {
    at.to_be_bytes().to_vec()
}

pub(crate) fn decode_removal(bytes: &[u8]) -> Result<u64, StorageError> {
    let bytes: [u8; 8] = bytes.try_into().map_err(|_| {
        StorageError::Corrupt(format!("a removal watermark row of {} bytes", bytes.len()))
    })?;
    Ok(u64::from_be_bytes(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn log_survives_reopen_after_sync() {
        let dir = tempfile::tempdir().unwrap();
        {
            let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
            storage
                .append_log(GroupId(1), (1..=5).map(|i| (i, vec![i as u8])))
                .unwrap();
            storage
                .append_log(GroupId(2), [(1, b"other".to_vec())])
                .unwrap();
            storage
                .put_raft_meta(GroupId(1), "vote", b"v".to_vec())
                .unwrap();
            storage.sync_async().await.unwrap();
            let metrics = storage.metrics();
            assert_eq!(metrics.appends.count(), 2);
            assert!(metrics.syncs.count() >= 1);
            assert_eq!(metrics.sync_waits.count(), 1);
        }
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let entries = storage.read_log(GroupId(1), 2, 5).unwrap();
        let indexes: Vec<u64> = entries.iter().map(|(i, _)| *i).collect();
        assert_eq!(indexes, vec![2, 3, 4]);
        assert_eq!(
            storage.last_log(GroupId(1)).unwrap().map(|(i, _)| i),
            Some(5)
        );
        assert_eq!(
            storage.last_log(GroupId(2)).unwrap().map(|(i, _)| i),
            Some(1)
        );
        assert_eq!(storage.last_log(GroupId(3)).unwrap().map(|(i, _)| i), None);
        assert_eq!(
            storage.raft_meta(GroupId(1), "vote").unwrap().as_deref(),
            Some(&b"v"[..])
        );
        storage.truncate_log(GroupId(1), 4).unwrap();
        storage.purge_log(GroupId(1), 2).unwrap();
        let indexes: Vec<u64> = storage
            .read_log(GroupId(1), 0, 100)
            .unwrap()
            .iter()
            .map(|(i, _)| *i)
            .collect();
        assert_eq!(indexes, vec![2, 3]);
    }

    #[test]
    fn a_read_never_pairs_old_rows_with_a_newer_removal() {
        use std::sync::atomic::AtomicBool;
        use std::sync::mpsc;
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let written = Arc::new(AtomicBool::new(false));
        let (entered, is_entered) = mpsc::channel();
        let (go_on, may_go_on) = mpsc::channel::<()>();
        let writer = {
            let (storage, written) = (storage.clone(), written.clone());
            std::thread::spawn(move || {
                let gate = storage.removal_gate(3).unwrap();
                let mut removing = gate.enter();
                removing.raises_to(9);
                storage.raise_removal(3, 9).unwrap();
                entered.send(()).unwrap();
                may_go_on.recv().unwrap();
                written.store(true, Ordering::SeqCst);
                drop(removing);
            })
        };
        is_entered.recv().unwrap();
        let reader = {
            let (storage, written) = (storage.clone(), written.clone());
            std::thread::spawn(move || {
                storage
                    .read_with_removals(ShardId(3), || {
                        Ok::<_, StorageError>(written.load(Ordering::SeqCst))
                    })
                    .unwrap()
            })
        };
        go_on.send(()).unwrap();
        // Whenever the reader ran, its watermark covers no removal its read did not see:
        // with the removal's rows it may say 9, without them it must say 0.
        let (saw_removal, removed) = reader.join().unwrap();
        assert!(saw_removal || removed == 0, "{saw_removal} {removed}");
        writer.join().unwrap();
        // A shard nothing is removed from reads at once.
        let (found, removed) = storage
            .read_with_removals(ShardId(4), || Ok::<_, StorageError>(7))
            .unwrap();
        assert_eq!((found, removed), (7, 0));
    }

    #[tokio::test]
    async fn many_concurrent_syncs_share_fdatasyncs() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(dir.path(), &StorageOptions::default()).unwrap();
        let mut waits = Vec::new();
        for i in 0..200u64 {
            storage.append_log(GroupId(1), [(i, vec![0; 100])]).unwrap();
            let (tx, rx) = tokio::sync::oneshot::channel();
            storage.sync_log(Box::new(move |r| {
                let _ = tx.send(r.is_ok());
            }));
            waits.push(rx);
        }
        for rx in waits {
            assert!(rx.await.unwrap());
        }
        let metrics = storage.metrics();
        assert_eq!(metrics.appends.count(), 200);
        assert_eq!(metrics.sync_waits.count(), 200);
        // 200 requests queued within microseconds of each other cannot each get their own sync.
        assert!(metrics.syncs.count() < 200);
    }
}
