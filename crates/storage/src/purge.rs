//! The rows of dead collection versions, removed in the background.
//!
//! A collection's member and score rows are keyed under its version, the `CreateIndex` of
//! its record (see [`trireme_types::collection`]). Deleting, expiring or overwriting a
//! collection of any size changes its record only: the old version's rows are dead from
//! that moment (no read asks for them, a snapshot or a split leaves them out) and this
//! module's thread removes them, a bounded piece per batch, so that no applying batch walks
//! a whole collection.
//!
//! Nothing here is replicated: each replica removes its own dead rows. The queue is not
//! stored either. A crash loses it, and the rows it named are found again when the shard's
//! key index is next built (which walks every row), and queued again. Score rows go before
//! member rows, so that a purge cut short always leaves member rows for that build to find.
//!
//! A queued version was the stored one before the batch that replaced it, so every entry
//! that batch or a later one applies has a higher index: no later write creates rows under
//! it. It is still checked against its record before each piece, so a version queued in
//! error is left alone. The purge writes nothing while the store refuses writes or its disk
//! is short of its reserve: deletion markers are rows too, and a failed flush would stop
//! the whole store.

use crate::StorageError;
use crate::disk_space::DiskSpace;
use crate::keys::owned_key;
use crate::tables::{Space, Tables, TablesSnapshot};
use bytes::Bytes;
use std::collections::VecDeque;
use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};
use std::time::{Duration, Instant};
use trireme_types::collection::RowTable;
use trireme_types::{Record, ValueKind};

/// Rows removed per batch: small enough that an applying batch waits little for it.
const PIECE_ROWS: usize = 2048;

/// How far behind its pace the purge may fall and then catch up at full speed.
const MAX_PACE_CREDIT: Duration = Duration::from_secs(1);

/// How long the purge waits before it looks again at a store that refuses writes.
const WRITE_RETRY: Duration = Duration::from_secs(1);

/// Keeps the purge at no more than a set number of rows a second (0: unpaced), measured from
/// when the thread last found work after idling: a long purge shares the node's CPU and disk
/// with the requests it serves instead of taking a core for as long as it runs.
struct Pace {
    rows_per_sec: u64,
    since: Instant,
    rows: u64,
}

impl Pace {
    fn new(rows_per_sec: u64) -> Self {
        Pace {
            rows_per_sec,
            since: Instant::now(),
            rows: 0,
        }
    }

    /// Starts counting again (the thread was idle).
    fn restart(&mut self) {
        self.since = Instant::now();
        self.rows = 0;
    }

    /// Counts `rows` removed and waits until they are due at the pace; `false` if the purger
    /// is stopping.
    fn removed(&mut self, shared: &Shared, rows: u64) -> bool {
        self.rows += rows;
        if self.rows_per_sec == 0 {
            return true;
        }
        let due = self.since + Duration::from_secs_f64(self.rows as f64 / self.rows_per_sec as f64);
        if Instant::now().saturating_duration_since(due) > MAX_PACE_CREDIT {
            // Behind by more than the credit (it waited for the store to take writes): the
            // pace starts again from now rather than catch up unpaced.
            self.restart();
            return true;
        }
        let mut state = shared.state();
        loop {
            if state.stop {
                return false;
            }
            let wait = due.saturating_duration_since(Instant::now());
            if wait.is_zero() {
                return true;
            }
            state = shared
                .wake
                .wait_timeout(state, wait)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
    }
}

/// What the purge must know before it writes: whether the store still takes writes.
pub(crate) struct WriteGuard {
    pub(crate) poisoned: Arc<AtomicBool>,
    pub(crate) disk_space: Arc<DiskSpace>,
}

impl WriteGuard {
    fn allows(&self) -> bool {
        !self.poisoned.load(Ordering::Acquire) && self.disk_space.check().is_ok()
    }
}

/// One dead version of one collection of one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct DeadVersion {
    pub(crate) shard: u32,
    pub(crate) key: Bytes,
    pub(crate) version: u64,
}

/// The queue of dead versions and the thread that removes their rows.
pub(crate) struct Purger {
    shared: Arc<Shared>,
    thread: Option<std::thread::JoinHandle<()>>,
}

struct Shared {
    state: Mutex<State>,
    /// Wakes the thread: work queued, or stop.
    wake: Condvar,
    /// Wakes those waiting for the queue to empty.
    idle: Condvar,
}

#[derive(Default)]
struct State {
    queue: VecDeque<DeadVersion>,
    /// Whether the thread is removing the rows of a version taken off the queue.
    busy: bool,
    stop: bool,
    /// Rows removed since the store opened.
    removed: u64,
}

impl Shared {
    fn state(&self) -> MutexGuard<'_, State> {
        self.state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

impl Purger {
    /// Starts the thread, which removes at most `rows_per_sec` rows a second (0: as fast as
    /// it can); it holds the tables until the purger is dropped.
    pub(crate) fn start(tables: Arc<Tables>, guard: WriteGuard, rows_per_sec: u64) -> Purger {
        let shared = Arc::new(Shared {
            state: Mutex::default(),
            wake: Condvar::new(),
            idle: Condvar::new(),
        });
        let worker = shared.clone();
        let thread = std::thread::Builder::new()
            .name("trireme-purge".into())
            .spawn(move || run(&worker, &tables, &guard, rows_per_sec))
            .ok();
        if thread.is_none() {
            tracing::warn!("could not start the purge thread: dead collection rows stay");
        }
        Purger { shared, thread }
    }

    /// Queues dead versions for removal.
    pub(crate) fn queue(&self, dead: impl IntoIterator<Item = DeadVersion>) {
        if self.thread.is_none() {
            // Nothing would take them: the next start finds them again.
            return;
        }
        let mut state = self.shared.state();
        let before = state.queue.len();
        state.queue.extend(dead);
        if state.queue.len() > before {
            self.shared.wake.notify_one();
        }
    }

    /// Versions queued or being removed.
    pub(crate) fn pending(&self) -> usize {
        let state = self.shared.state();
        state.queue.len() + usize::from(state.busy)
    }

    /// Rows removed since the store opened.
    pub(crate) fn removed_rows(&self) -> u64 {
        self.shared.state().removed
    }

    /// Waits until nothing is queued or being removed, at most `timeout`; whether it is so.
    pub(crate) fn wait_idle(&self, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut state = self.shared.state();
        while !state.queue.is_empty() || state.busy {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return false;
            }
            state = self
                .shared
                .idle
                .wait_timeout(state, left)
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .0;
        }
        true
    }
}

impl Drop for Purger {
    fn drop(&mut self) {
        self.shared.state().stop = true;
        self.shared.wake.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

fn run(shared: &Shared, tables: &Tables, guard: &WriteGuard, rows_per_sec: u64) {
    let mut pace = Pace::new(rows_per_sec);
    loop {
        let dead = {
            let mut state = shared.state();
            loop {
                if state.stop {
                    return;
                }
                if let Some(dead) = state.queue.pop_front() {
                    state.busy = true;
                    break dead;
                }
                shared.idle.notify_all();
                state = shared
                    .wake
                    .wait(state)
                    .unwrap_or_else(std::sync::PoisonError::into_inner);
                pace.restart();
            }
        };
        let removed = match remove_rows(shared, tables, guard, &dead, &mut pace) {
            Ok(removed) => removed,
            Err(e) => {
                // Left for the next key index build to find again.
                tracing::warn!(shard = dead.shard, error = %e, "could not purge dead collection rows");
                0
            }
        };
        let mut state = shared.state();
        state.busy = false;
        state.removed += removed;
        if state.queue.is_empty() {
            shared.idle.notify_all();
        }
    }
}

/// Removes the rows of `dead`, a piece per batch, unless its version is live: score rows
/// first, then member rows.
fn remove_rows(
    shared: &Shared,
    tables: &Tables,
    guard: &WriteGuard,
    dead: &DeadVersion,
    pace: &mut Pace,
) -> Result<u64, StorageError> {
    let mut removed = 0u64;
    for table in [RowTable::Scores, RowTable::Members] {
        let prefix = owned_key(dead.shard, &table.prefix(&dead.key, dead.version));
        let end = crate::tables::prefix_end(&prefix);
        let mut after: Option<Vec<u8>> = None;
        loop {
            if !wait_until_writable(shared, guard) {
                return Ok(removed);
            }
            let snapshot = tables.snapshot();
            if version_is_live(&snapshot, dead.shard, &dead.key, dead.version)? {
                return Ok(removed);
            }
            let lower = after
                .as_deref()
                .map_or(Bound::Included(&prefix[..]), Bound::Excluded);
            let upper = end.as_deref().map_or(Bound::Unbounded, Bound::Excluded);
            let mut batch = tables.batch();
            let mut rows = 0usize;
            for row in snapshot.range(Space::Data, lower, upper).take(PIECE_ROWS) {
                let (key, _) = row?;
                after = Some(key.to_vec());
                batch.remove(Space::Data, key);
                rows += 1;
            }
            drop(snapshot);
            if rows == 0 {
                break;
            }
            batch.commit()?;
            removed += rows as u64;
            if !pace.removed(shared, rows as u64) {
                return Ok(removed);
            }
        }
    }
    Ok(removed)
}

/// Waits while the store refuses writes; `false` once the purger is stopping.
fn wait_until_writable(shared: &Shared, guard: &WriteGuard) -> bool {
    let mut state = shared.state();
    loop {
        if state.stop {
            return false;
        }
        if guard.allows() {
            return true;
        }
        state = shared
            .wake
            .wait_timeout(state, WRITE_RETRY)
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .0;
    }
}

/// Whether version `version` of the collection at `key` of `shard` is the one its record
/// holds in `snapshot` (expired or not: an expired record's rows go when the record does).
pub(crate) fn version_is_live(
    snapshot: &TablesSnapshot,
    shard: u32,
    key: &[u8],
    version: u64,
) -> Result<bool, StorageError> {
    Ok(collection_version(snapshot, &owned_key(shard, key))? == Some(version))
}

/// The version the collection record at `stored_key` (shard prefix included) holds in
/// `snapshot`: its `create_index`; `None` when there is no record or it is a string.
fn collection_version(
    snapshot: &TablesSnapshot,
    stored_key: &[u8],
) -> Result<Option<u64>, StorageError> {
    Ok(match snapshot.get(Space::Data, stored_key)? {
        Some(bytes) => Some(Record::decode(&bytes)?)
            .filter(|r| r.kind != ValueKind::String)
            .map(|r| r.create_index),
        None => None,
    })
}

/// The versions of collections, read while rows are walked in key order, where one
/// collection's rows come together: one record read per collection, not per row. A walk over
/// one shard uses [`CollectionVersions::is_live`]; a walk over every shard (the format
/// upgrade) gives each row's shard to [`CollectionVersions::version_of`].
pub(crate) struct CollectionVersions<'s> {
    snapshot: &'s TablesSnapshot,
    shard: u32,
    /// The last record asked about (shard prefix included) and its version.
    last: Option<(Vec<u8>, Option<u64>)>,
}

impl<'s> CollectionVersions<'s> {
    /// Reads records from `snapshot`; `shard` is the shard [`Self::is_live`] asks about.
    pub(crate) fn new(snapshot: &'s TablesSnapshot, shard: u32) -> Self {
        CollectionVersions {
            snapshot,
            shard,
            last: None,
        }
    }

    /// Whether version `version` of the collection at `key` (of this walk's shard) is live.
    pub(crate) fn is_live(&mut self, key: &[u8], version: u64) -> Result<bool, StorageError> {
        Ok(self.version_of(self.shard, key)? == Some(version))
    }

    /// The version the collection record at `key` of `shard` holds (`None`: no collection
    /// there).
    pub(crate) fn version_of(
        &mut self,
        shard: u32,
        key: &[u8],
    ) -> Result<Option<u64>, StorageError> {
        let stored = owned_key(shard, key);
        if let Some((last, version)) = &self.last
            && *last == stored
        {
            return Ok(*version);
        }
        let version = collection_version(self.snapshot, &stored)?;
        self.last = Some((stored, version));
        Ok(version)
    }
}
