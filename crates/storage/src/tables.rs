//! The rows of every shard, in one LSM tree (fjall's `lsm-tree`) without a journal of its own.
//!
//! Every row already reached the disk once, as the Raft log entry that wrote it; a journal
//! would write it a second time. So batches go to the tree's memtable only, and a row becomes
//! durable when the memtable holding it is flushed to a table. What a crash loses is a suffix
//! of applied batches (a memtable is sealed between two batches, and memtables are flushed in
//! order), and the applied log id of each shard is a row of the same batches: after a crash the
//! tree says exactly up to which entry each shard's rows are on disk, and the raft layer
//! re-applies its log from there. The log is purged only behind a snapshot, and a snapshot is
//! taken only after [`Tables::flush`] made everything it covers durable.
//!
//! The three kinds of rows (see [`Space`]) live in the one tree, under a leading tag byte, so
//! that one flush covers all of them together; separate trees would flush at different
//! points and a shard's rows could come back from a crash newer than its applied log id.
//!
//! Two threads keep the tree: one flushes sealed memtables, one compacts (leveled). Writers
//! stall while too many memtables wait for their flush.
//!
//! In front of the tree's data rows sits a record cache ([`RecordCache`]): a point read that
//! hits it skips the LSM lookup. Every batch writes through it before it is published, so a
//! cached row is never older than what a reader's snapshot sees (see its docs).

use crate::StorageError;
use lsm_tree::{AbstractTree, AnyTree, Guard as _, SeqNo, SequenceNumberCounter, Slice};
use std::collections::BTreeMap;
use std::ops::Bound;
use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::Duration;

/// A memtable is sealed (and queued for its flush) once it holds this much. This bounds
/// what a crash makes the node re-apply from its log: the rows of at most
/// `MEMTABLE_BYTES × (MAX_SEALED + 1)` bytes of applied entries.
const MEMTABLE_BYTES: u64 = 32 * 1024 * 1024;

/// Writers wait while this many sealed memtables wait for their flush.
const MAX_SEALED: usize = 3;

/// Writers slow down while level 0 holds this many runs (compaction is behind).
const L0_SLOWDOWN: usize = 20;

/// Which kind of row a key names: the tag byte in front of every stored key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Space {
    /// shard ‖ key → encoded record.
    Data = 1,
    /// shard ‖ name → a state-machine value (applied log id, membership, slots, ...).
    Meta = 2,
    /// shard ‖ expires-at ‖ key → (): keys with a TTL, in expiry order.
    Expiry = 3,
}

fn tagged(space: Space, key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(key.len() + 1);
    out.push(space as u8);
    out.extend_from_slice(key);
    out
}

pub(crate) use trireme_types::keys::prefix_end;

/// One stored row: key (without the tag) and value.
pub(crate) type Row = (Slice, Slice);

/// The node's tables. Cheap to share by reference; dropping it stops its threads and
/// flushes what the memtables hold, so a clean shutdown re-applies nothing.
pub(crate) struct Tables {
    shared: Arc<Shared>,
    workers: Vec<std::thread::JoinHandle<()>>,
}

struct Shared {
    tree: AnyTree,
    /// The next batch's sequence number.
    seqno: SequenceNumberCounter,
    /// Reads see every batch below this one: raised once a batch is wholly in the memtable.
    visible: SequenceNumberCounter,
    /// One batch at a time goes into the memtable, and memtables are sealed between batches.
    write: Mutex<()>,
    /// The sequence numbers of open snapshots (how many at each): compaction keeps every
    /// version they can see.
    snapshots: Mutex<BTreeMap<SeqNo, usize>>,
    /// Wakes the flush and compaction threads, and writers waiting for a flush.
    signals: Mutex<Signals>,
    wake_flush: Condvar,
    wake_compaction: Condvar,
    flushed: Condvar,
    poisoned: Arc<AtomicBool>,
    /// The newest data rows, for point reads.
    cache: RecordCache,
}

#[derive(Default)]
struct Signals {
    flush: bool,
    compact: bool,
    stop: bool,
}

impl Shared {
    fn signals(&self) -> MutexGuard<'_, Signals> {
        self.signals
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Versions below this sequence number that are not the newest one below it are seen by
    /// no reader.
    fn gc_watermark(&self) -> SeqNo {
        let snapshots = self
            .snapshots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let lowest = snapshots.keys().next().copied();
        lowest
            .unwrap_or_else(|| self.visible.get())
            .saturating_sub(1)
    }

    /// Flushes every sealed memtable to tables (synced, with the tree's version file).
    fn flush_sealed(&self) -> Result<(), StorageError> {
        let lock = self.tree.get_flush_lock();
        let flushed = self.tree.flush(&lock, self.gc_watermark());
        drop(lock);
        if let Err(e) = flushed {
            self.poisoned.store(true, Ordering::Release);
            self.flushed.notify_all();
            return Err(e.into());
        }
        crate::crash::point("data-flushed");
        let mut signals = self.signals();
        signals.compact = true;
        self.wake_compaction.notify_one();
        self.flushed.notify_all();
        Ok(())
    }

    /// Caches `value`, read from the tree at `seqno`, if it is still the newest: no batch was
    /// published since `seqno`, and none is being written (the write lock is held).
    fn fill_cache(&self, key: Vec<u8>, value: Option<Slice>, seqno: SeqNo) {
        if !self.cache.enabled() || self.visible.get() != seqno {
            return;
        }
        let Ok(_write) = self.write.try_lock() else {
            return;
        };
        if self.visible.get() == seqno {
            self.cache.fill(key, value, seqno.saturating_sub(1));
        }
    }

    fn compact(&self) -> Result<(), StorageError> {
        let strategy: Arc<dyn lsm_tree::compaction::CompactionStrategy> =
            Arc::new(lsm_tree::compaction::Leveled::default());
        // One call runs one compaction: go on while they change the tree.
        for _ in 0..64 {
            let before = self.tree.current_version().id();
            self.tree.compact(strategy.clone(), self.gc_watermark())?;
            if self.tree.current_version().id() == before || self.signals().stop {
                break;
            }
        }
        Ok(())
    }
}

/// The work of the tables' two threads.
#[derive(Debug, Clone, Copy)]
enum Job {
    Flush,
    Compact,
}

impl Job {
    fn name(self) -> &'static str {
        match self {
            Job::Flush => "trireme-flush",
            Job::Compact => "trireme-compact",
        }
    }

    /// The flag that asks for the job.
    fn wanted(self, signals: &mut Signals) -> &mut bool {
        match self {
            Job::Flush => &mut signals.flush,
            Job::Compact => &mut signals.compact,
        }
    }

    fn wake(self, shared: &Shared) -> &Condvar {
        match self {
            Job::Flush => &shared.wake_flush,
            Job::Compact => &shared.wake_compaction,
        }
    }

    fn run(self, shared: &Shared) -> Result<(), StorageError> {
        match self {
            // A failed flush poisons the store itself.
            Job::Flush => shared.flush_sealed(),
            Job::Compact => shared.compact().inspect_err(|_| {
                shared.poisoned.store(true, Ordering::Release);
            }),
        }
    }
}

/// Runs `job` each time it is asked for, until the tables close or the job fails.
fn spawn_worker(shared: &Arc<Shared>, job: Job) -> std::io::Result<std::thread::JoinHandle<()>> {
    let shared = shared.clone();
    std::thread::Builder::new()
        .name(job.name().into())
        .spawn(move || {
            loop {
                {
                    let mut signals = shared.signals();
                    while !*job.wanted(&mut signals) && !signals.stop {
                        signals = job
                            .wake(&shared)
                            .wait(signals)
                            .unwrap_or_else(std::sync::PoisonError::into_inner);
                    }
                    if signals.stop {
                        return;
                    }
                    *job.wanted(&mut signals) = false;
                }
                if let Err(e) = job.run(&shared) {
                    tracing::error!(error = %e, job = job.name(), "the tables' work failed; the store refuses writes");
                    return;
                }
            }
        })
}

impl Tables {
    /// Opens (or creates) the tables in `folder`, with a block cache of `cache_bytes`.
    /// `poisoned` is set when a flush or compaction fails.
    pub(crate) fn open(
        folder: &Path,
        cache_bytes: u64,
        record_cache_bytes: u64,
        poisoned: Arc<AtomicBool>,
    ) -> Result<Self, StorageError> {
        let seqno = SequenceNumberCounter::default();
        let visible = SequenceNumberCounter::default();
        let tree = lsm_tree::Config::new(folder, seqno.clone(), visible.clone())
            .use_cache(Arc::new(lsm_tree::Cache::with_capacity_bytes(cache_bytes)))
            .open()?;
        if let Some(highest) = tree.get_highest_seqno() {
            seqno.fetch_max(highest + 1);
            visible.fetch_max(highest + 1);
        }
        let shared = Arc::new(Shared {
            tree,
            seqno,
            visible,
            write: Mutex::new(()),
            snapshots: Mutex::default(),
            signals: Mutex::default(),
            wake_flush: Condvar::new(),
            wake_compaction: Condvar::new(),
            flushed: Condvar::new(),
            poisoned,
            cache: RecordCache::new(record_cache_bytes),
        });
        // Tables left by an earlier run may be due for compaction.
        shared.signals().compact = true;
        let flusher = spawn_worker(&shared, Job::Flush)?;
        let compactor = spawn_worker(&shared, Job::Compact)?;
        Ok(Self {
            shared,
            workers: vec![flusher, compactor],
        })
    }

    /// A new, empty batch.
    pub(crate) fn batch(&self) -> Batch<'_> {
        Batch {
            tables: self,
            ops: Vec::new(),
        }
    }

    /// Makes every batch committed so far durable: seals the memtable and flushes it (and any
    /// sealed before it) to synced tables.
    pub(crate) fn flush(&self) -> Result<(), StorageError> {
        {
            let _write = self.write_lock();
            self.shared.tree.rotate_memtable();
        }
        self.shared.flush_sealed()
    }

    fn write_lock(&self) -> MutexGuard<'_, ()> {
        self.shared
            .write
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits while the flush or compaction is too far behind the writers.
    fn wait_for_room(&self) {
        let tree = &self.shared.tree;
        let mut signals = self.shared.signals();
        while tree.sealed_memtable_count() >= MAX_SEALED
            && !signals.stop
            && !self.shared.poisoned.load(Ordering::Acquire)
        {
            signals = self
                .shared
                .flushed
                .wait_timeout(signals, Duration::from_millis(100))
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        drop(signals);
        if tree.l0_run_count() >= L0_SLOWDOWN {
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The current value of `key` in `space`.
    pub(crate) fn get(&self, space: Space, key: &[u8]) -> Result<Option<Slice>, StorageError> {
        Ok(self
            .shared
            .tree
            .get(tagged(space, key), self.shared.visible.get())?)
    }

    /// The rows of `space` whose keys start with `prefix`, in key order.
    pub(crate) fn prefix(
        &self,
        space: Space,
        prefix: &[u8],
    ) -> impl DoubleEndedIterator<Item = Result<Row, StorageError>> + use<> {
        prefix_at(&self.shared.tree, space, prefix, self.shared.visible.get())
    }

    /// The rows of `space` with keys between `lower` and `upper`, in key order (an unbounded
    /// end is the end of the space).
    pub(crate) fn range(
        &self,
        space: Space,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
    ) -> impl DoubleEndedIterator<Item = Result<Row, StorageError>> + use<> {
        range_at(
            &self.shared.tree,
            space,
            lower,
            upper,
            self.shared.visible.get(),
        )
    }

    /// A consistent view of every row as of now: later batches are not seen through it.
    pub(crate) fn snapshot(&self) -> TablesSnapshot {
        let mut snapshots = self
            .shared
            .snapshots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        // Read under the lock, so that compaction cannot pass this sequence number before
        // it is registered.
        let seqno = self.shared.visible.get();
        *snapshots.entry(seqno).or_default() += 1;
        TablesSnapshot {
            shared: self.shared.clone(),
            seqno,
        }
    }

    /// Bytes the tables take on disk.
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.shared.tree.disk_space()
    }
}

impl Drop for Tables {
    fn drop(&mut self) {
        {
            let mut signals = self.shared.signals();
            signals.stop = true;
            self.shared.wake_flush.notify_all();
            self.shared.wake_compaction.notify_all();
            self.shared.flushed.notify_all();
        }
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
        if !self.shared.poisoned.load(Ordering::Acquire)
            && let Err(e) = self.flush()
        {
            tracing::warn!(error = %e, "flushing the tables at close failed; the log has the rows");
        }
    }
}

impl std::fmt::Debug for Tables {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tables")
            .field("visible", &self.shared.visible.get())
            .finish()
    }
}

fn strip(item: lsm_tree::IterGuardImpl) -> Result<Row, StorageError> {
    let (key, value) = item.into_inner()?;
    Ok((Slice::from(&key[1..]), value))
}

fn prefix_at(
    tree: &AnyTree,
    space: Space,
    prefix: &[u8],
    seqno: SeqNo,
) -> impl DoubleEndedIterator<Item = Result<Row, StorageError>> + use<> {
    tree.prefix(tagged(space, prefix), seqno, None).map(strip)
}

fn range_at(
    tree: &AnyTree,
    space: Space,
    lower: Bound<&[u8]>,
    upper: Bound<&[u8]>,
    seqno: SeqNo,
) -> impl DoubleEndedIterator<Item = Result<Row, StorageError>> + use<> {
    let bound = |b: Bound<&[u8]>, end: bool| match b {
        Bound::Included(k) => Bound::Included(tagged(space, k)),
        Bound::Excluded(k) => Bound::Excluded(tagged(space, k)),
        // The open end of a space is where the next space starts.
        Bound::Unbounded if end => Bound::Excluded(vec![space as u8 + 1]),
        Bound::Unbounded => Bound::Included(vec![space as u8]),
    };
    let range = (bound(lower, false), bound(upper, true));
    tree.range(range, seqno, None).map(strip)
}

/// The newest version of recently written or read data rows, by stored key, each tagged with
/// the sequence number of the batch that wrote it.
///
/// Why a read through a snapshot at `S` may use an entry tagged `T < S`: every batch updates
/// the entries of the keys it writes (a removal leaves an empty entry) while it holds the
/// write lock, before it is published; so a batch below `S` that wrote the key after `T` would
/// have retagged the entry. An entry tagged `S` or later is newer than the snapshot and is not
/// used. A read that missed fills the entry only when no batch was published since its
/// snapshot and none is being written, and never over an entry a batch left. Entries are
/// dropped oldest first once the cache passes its size; a dropped entry only costs a tree
/// read.
struct RecordCache {
    parts: Vec<Mutex<CachePart>>,
    /// Bytes each part may hold (0: the cache is off).
    part_bytes: usize,
}

#[derive(Default)]
struct CachePart {
    rows: std::collections::HashMap<Arc<[u8]>, (SeqNo, Option<Slice>)>,
    /// The keys of `rows` in the order they entered it, to drop the oldest first.
    order: std::collections::VecDeque<Arc<[u8]>>,
    bytes: usize,
}

/// Parts of the cache, each under its own lock, so that readers on different keys seldom wait.
const CACHE_PARTS: usize = 16;

/// What one entry costs besides its key and value: the map's slot, the boxed key's and the
/// value's headers.
const CACHE_ENTRY_OVERHEAD: usize = 64;

impl RecordCache {
    fn new(bytes: u64) -> Self {
        Self {
            parts: (0..CACHE_PARTS).map(|_| Mutex::default()).collect(),
            part_bytes: usize::try_from(bytes).unwrap_or(usize::MAX) / CACHE_PARTS,
        }
    }

    fn enabled(&self) -> bool {
        self.part_bytes > 0
    }

    fn part(&self, key: &[u8]) -> MutexGuard<'_, CachePart> {
        use std::hash::Hasher;
        // Unkeyed, so that a key always falls in the same part.
        let mut hasher = std::collections::hash_map::DefaultHasher::new();
        hasher.write(key);
        let index = (hasher.finish() as usize) % CACHE_PARTS;
        self.parts[index]
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// The value of `key` as of a snapshot at `seqno`, if the cache knows it (`Some(None)`:
    /// the key does not exist).
    fn get(&self, key: &[u8], seqno: SeqNo) -> Option<Option<Slice>> {
        if !self.enabled() {
            return None;
        }
        let part = self.part(key);
        match part.rows.get(key) {
            Some((tag, value)) if *tag < seqno => Some(value.clone()),
            _ => None,
        }
    }

    /// A batch at `seqno` wrote `key` (`None`: removed it).
    fn write(&self, key: &[u8], value: Option<Slice>, seqno: SeqNo) {
        if !self.enabled() {
            return;
        }
        let mut part = self.part(key);
        let part = &mut *part;
        match part.rows.get_mut(key) {
            Some(entry) => {
                part.bytes = part.bytes + size_of(&value) - size_of(&entry.1);
                *entry = (seqno, value);
            }
            None => part.insert(Arc::from(key), value, seqno),
        }
        part.evict(self.part_bytes);
    }

    /// A read at a snapshot below `seqno + 1` found `value`, and no batch has written since.
    fn fill(&self, key: Vec<u8>, value: Option<Slice>, seqno: SeqNo) {
        let mut part = self.part(&key);
        if part.rows.contains_key(&key[..]) {
            return;
        }
        part.insert(Arc::from(key), value, seqno);
        part.evict(self.part_bytes);
    }
}

fn size_of(value: &Option<Slice>) -> usize {
    value.as_ref().map_or(0, |v| v.len())
}

impl CachePart {
    fn insert(&mut self, key: Arc<[u8]>, value: Option<Slice>, seqno: SeqNo) {
        self.bytes += key.len() + CACHE_ENTRY_OVERHEAD + size_of(&value);
        self.order.push_back(key.clone());
        self.rows.insert(key, (seqno, value));
    }

    /// Drops the oldest entries until the part holds at most `limit` bytes.
    fn evict(&mut self, limit: usize) {
        while self.bytes > limit {
            let Some(key) = self.order.pop_front() else {
                self.bytes = 0;
                return;
            };
            if let Some((_, value)) = self.rows.remove(&key) {
                self.bytes -= key.len() + CACHE_ENTRY_OVERHEAD + size_of(&value);
            }
        }
    }
}

/// A consistent read-only view of the tables (see [`Tables::snapshot`]).
pub(crate) struct TablesSnapshot {
    shared: Arc<Shared>,
    seqno: SeqNo,
}

impl TablesSnapshot {
    /// The value of `key` in `space` as of the snapshot.
    pub(crate) fn get(&self, space: Space, key: &[u8]) -> Result<Option<Slice>, StorageError> {
        let key = tagged(space, key);
        let cached = space == Space::Data;
        if cached && let Some(value) = self.shared.cache.get(&key, self.seqno) {
            return Ok(value);
        }
        let value = self.shared.tree.get(&key, self.seqno)?;
        if cached {
            self.shared.fill_cache(key, value.clone(), self.seqno);
        }
        Ok(value)
    }

    /// The rows of `space` whose keys start with `prefix`, as of the snapshot.
    pub(crate) fn prefix(
        &self,
        space: Space,
        prefix: &[u8],
    ) -> impl DoubleEndedIterator<Item = Result<Row, StorageError>> + use<> {
        prefix_at(&self.shared.tree, space, prefix, self.seqno)
    }

    /// The rows of `space` with keys between `lower` and `upper`, as of the snapshot.
    pub(crate) fn range(
        &self,
        space: Space,
        lower: Bound<&[u8]>,
        upper: Bound<&[u8]>,
    ) -> impl DoubleEndedIterator<Item = Result<Row, StorageError>> + use<> {
        range_at(&self.shared.tree, space, lower, upper, self.seqno)
    }
}

impl Drop for TablesSnapshot {
    fn drop(&mut self) {
        let mut snapshots = self
            .shared
            .snapshots
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(count) = snapshots.get_mut(&self.seqno) {
            *count -= 1;
            if *count == 0 {
                snapshots.remove(&self.seqno);
            }
        }
    }
}

impl std::fmt::Debug for TablesSnapshot {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TablesSnapshot")
            .field("seqno", &self.seqno)
            .finish()
    }
}

/// Writes that become visible together, or not at all (see [`Batch::commit`]). A key must not
/// be both inserted and removed in one batch: both would carry the same sequence number.
pub(crate) struct Batch<'a> {
    tables: &'a Tables,
    ops: Vec<(Vec<u8>, Option<Slice>)>,
}

impl Batch<'_> {
    /// Sets `key` of `space` to `value`.
    pub(crate) fn insert(&mut self, space: Space, key: impl AsRef<[u8]>, value: impl Into<Slice>) {
        self.ops
            .push((tagged(space, key.as_ref()), Some(value.into())));
    }

    /// Removes `key` of `space`.
    pub(crate) fn remove(&mut self, space: Space, key: impl AsRef<[u8]>) {
        self.ops.push((tagged(space, key.as_ref()), None));
    }

    /// Writes the batch to the memtable under one sequence number and then makes it visible.
    /// Not durable: see [`Tables::flush`].
    pub(crate) fn commit(self) -> Result<(), StorageError> {
        if self.ops.is_empty() {
            return Ok(());
        }
        let tables = self.tables;
        let shared = &tables.shared;
        if shared.poisoned.load(Ordering::Acquire) {
            return Err(StorageError::Poisoned);
        }
        tables.wait_for_room();
        let write = tables.write_lock();
        let seqno = shared.seqno.next();
        let mut memtable_bytes = 0;
        for (key, value) in self.ops {
            if key.first() == Some(&(Space::Data as u8)) {
                shared.cache.write(&key, value.clone(), seqno);
            }
            memtable_bytes = match value {
                Some(value) => shared.tree.insert(key, value, seqno).1,
                None => shared.tree.remove(key, seqno).1,
            };
        }
        // Published only now: a reader that sees this batch finds it in the cache too.
        shared.visible.fetch_max(seqno + 1);
        if memtable_bytes >= MEMTABLE_BYTES {
            shared.tree.rotate_memtable();
            drop(write);
            let mut signals = shared.signals();
            signals.flush = true;
            shared.wake_flush.notify_one();
        }
        Ok(())
    }

    /// How many writes the batch holds.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.ops.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn open(dir: &Path) -> Tables {
        Tables::open(dir, 1 << 20, 1 << 20, Arc::default()).unwrap()
    }

    /// Commits one batch that sets each `(key, value)` of the data rows.
    fn put(tables: &Tables, rows: &[(&[u8], &[u8])]) {
        let mut batch = tables.batch();
        for (key, value) in rows {
            batch.insert(Space::Data, key, value.to_vec());
        }
        assert_eq!(batch.len(), rows.len());
        batch.commit().unwrap();
    }

    fn keys(rows: impl Iterator<Item = Result<Row, StorageError>>) -> Vec<Vec<u8>> {
        rows.map(|row| row.unwrap().0.to_vec()).collect()
    }

    #[test]
    fn spaces_do_not_see_each_others_rows() {
        let dir = tempfile::tempdir().unwrap();
        let tables = open(dir.path());
        let mut batch = tables.batch();
        batch.insert(Space::Data, b"a1", b"d".to_vec());
        batch.insert(Space::Meta, b"a2", b"m".to_vec());
        batch.insert(Space::Expiry, b"a3", Vec::new());
        batch.commit().unwrap();
        assert_eq!(keys(tables.prefix(Space::Data, b"a")), vec![b"a1".to_vec()]);
        assert_eq!(keys(tables.prefix(Space::Meta, b"")), vec![b"a2".to_vec()]);
        assert_eq!(
            keys(
                tables
                    .snapshot()
                    .range(Space::Data, Bound::Unbounded, Bound::Unbounded)
            ),
            vec![b"a1".to_vec()]
        );
        assert_eq!(
            keys(tables.range(Space::Expiry, Bound::Included(b"a"), Bound::Excluded(b"b"))),
            vec![b"a3".to_vec()]
        );
        assert_eq!(tables.get(Space::Meta, b"a1").unwrap(), None);
    }

    #[test]
    fn a_snapshot_does_not_see_later_batches() {
        let dir = tempfile::tempdir().unwrap();
        let tables = open(dir.path());
        put(&tables, &[(b"k", b"1")]);
        let snapshot = tables.snapshot();
        put(&tables, &[(b"k", b"2"), (b"l", b"2")]);
        // Compaction after a flush must keep what the snapshot sees.
        tables.flush().unwrap();
        tables.shared.compact().unwrap();
        assert_eq!(&*snapshot.get(Space::Data, b"k").unwrap().unwrap(), b"1");
        assert_eq!(keys(snapshot.prefix(Space::Data, b"")), vec![b"k".to_vec()]);
        assert_eq!(&*tables.get(Space::Data, b"k").unwrap().unwrap(), b"2");
    }

    #[test]
    fn flushed_rows_survive_a_reopen_and_sequence_numbers_go_on() {
        let dir = tempfile::tempdir().unwrap();
        {
            let tables = open(dir.path());
            put(&tables, &[(b"k", b"1")]);
            tables.flush().unwrap();
        }
        let tables = open(dir.path());
        assert_eq!(&*tables.get(Space::Data, b"k").unwrap().unwrap(), b"1");
        let mut batch = tables.batch();
        batch.remove(Space::Data, b"k");
        batch.commit().unwrap();
        assert_eq!(tables.get(Space::Data, b"k").unwrap(), None);
    }

    #[test]
    fn a_cached_row_is_used_only_by_snapshots_that_see_its_write() {
        let dir = tempfile::tempdir().unwrap();
        let tables = Tables::open(dir.path(), 1 << 20, 1 << 20, Arc::default()).unwrap();
        let write = |value: Option<&[u8]>| {
            let mut batch = tables.batch();
            match value {
                Some(value) => batch.insert(Space::Data, b"k", value.to_vec()),
                None => batch.remove(Space::Data, b"k"),
            }
            batch.commit().unwrap();
        };
        let read = |snapshot: &TablesSnapshot| {
            snapshot.get(Space::Data, b"k").unwrap().map(|v| v.to_vec())
        };
        write(Some(b"1"));
        let old = tables.snapshot();
        write(Some(b"2"));
        // The cache holds "2" now; the older snapshot must still read "1".
        assert_eq!(read(&old), Some(b"1".to_vec()));
        assert_eq!(read(&tables.snapshot()), Some(b"2".to_vec()));
        // A read that missed at an old snapshot does not fill the cache with its older value.
        let key = tagged(Space::Data, b"k");
        assert_eq!(
            tables.shared.cache.get(&key, u64::MAX),
            Some(Some(Slice::from(&b"2"[..])))
        );
        write(None);
        assert_eq!(read(&tables.snapshot()), None);
        assert_eq!(read(&old), Some(b"1".to_vec()));
        assert_eq!(tables.shared.cache.get(&key, u64::MAX), Some(None));
    }

    #[test]
    fn the_cache_keeps_to_its_size_dropping_the_oldest() {
        let cache = RecordCache::new((CACHE_PARTS * 1024) as u64);
        for i in 0..10_000u32 {
            cache.write(&i.to_be_bytes(), Some(Slice::from(&[0u8; 100][..])), 1);
        }
        for part in &cache.parts {
            let part = part.lock().unwrap();
            assert!(part.bytes <= 1024, "{}", part.bytes);
            assert_eq!(part.rows.len(), part.order.len());
        }
        // The newest write is still there; the first is long gone.
        assert!(cache.get(&9_999u32.to_be_bytes(), 2).is_some());
        assert!(cache.get(&0u32.to_be_bytes(), 2).is_none());
        // A removal is remembered as such, and a fill never replaces it.
        cache.write(b"gone", None, 5);
        cache.fill(b"gone".to_vec(), Some(Slice::from(&b"old"[..])), 4);
        assert_eq!(cache.get(b"gone", 6), Some(None));
        assert_eq!(cache.get(b"gone", 5), None, "not seen by an older snapshot");
    }
}
