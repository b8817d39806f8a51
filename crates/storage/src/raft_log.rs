//! The Raft logs of every group of this node, in one log store built for Raft logs: TiKV's
//! `raft-engine` (append-only segment files, an in-memory index per group, purge by dropping
//! whole files). A log entry is written to disk once, where the LSM it used to live in wrote
//! it to a journal, flushed it to a table and compacted it, only for the entry to be purged
//! minutes later.
//!
//! Writes happen inline and unsynced (a `write(2)` into the active segment, then the engine's
//! in-memory index), so an entry can be read back as soon as it is appended. Durability comes
//! from [`LogFileSync`], which the group-commit thread runs: one `fdatasync` of the active
//! segment covers every group's appends. raft-engine's own synced write is not used for that
//! because it holds the engine's write lock during the flush, and every appending group
//! would wait behind it on the async executor.
//!
//! raft-engine has no command to cut a log's tail: a group's log is cut by appending over
//! it. [`RaftLogs::truncate`] therefore records the cut in memory until the next append
//! overwrites the tail on disk; a crash in between brings the cut entries back, which Raft
//! treats like a lost message (they were never acknowledged after the cut).

use crate::StorageError;
use protobuf::well_known_types::BytesValue;
use raft_engine::internals::{FileId, FileNameExt, LogQueue};
use raft_engine::{Command, Config, Engine, LogBatch, MessageExt, ReadableSize};
use std::collections::HashMap;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, RwLock, mpsc};
use std::time::Duration;

/// The directory of the log store, inside the data directory.
pub(crate) const DIR: &str = "raft-log";

/// Segment size: the unit a purge drops. Small enough that a node's logs, each purged after a
/// snapshot, do not hold much dead space; large enough that rotations (two fsyncs) are rare.
const SEGMENT_BYTES: u64 = 32 * 1024 * 1024;

/// Past this many bytes of segments, a purge rewrites what is still live in the oldest ones
/// (a group that has not snapshotted for long) so they can be dropped.
const PURGE_THRESHOLD_BYTES: u64 = 256 * 1024 * 1024;

/// How often the purge thread looks for segments that hold no live entry.
const PURGE_INTERVAL: Duration = Duration::from_secs(2);

/// Entries are stored as protobuf `BytesValue`s (raft-engine requires a protobuf message):
/// the first 8 bytes are the entry's index, big-endian, then the caller's encoded entry.
struct Entries;

impl MessageExt for Entries {
    type Entry = BytesValue;

    fn index(entry: &BytesValue) -> u64 {
        entry_index(&entry.value).unwrap_or(0)
    }
}

fn entry_index(value: &[u8]) -> Option<u64> {
    Some(u64::from_be_bytes(value.get(..8)?.try_into().ok()?))
}

/// The log store. Every call blocks on the disk at most for a `write(2)`; syncing is
/// [`LogFileSync`]'s.
pub(crate) struct RaftLogs {
    engine: Arc<Engine>,
    /// Reads of entries hold this shared and the purge thread holds it exclusively: in 0.4.2
    /// a read finds an entry's file in the index and then opens it, and a purge that drops
    /// (or recycles) the file in between makes the read fail.
    files: Arc<RwLock<()>>,
    /// Per group, the first index cut from its log by [`RaftLogs::truncate`], until the next
    /// append overwrites the tail on disk.
    cuts: Mutex<HashMap<u32, u64>>,
    /// Dropping it stops the purge thread.
    _stop_purges: mpsc::Sender<()>,
}

impl std::fmt::Debug for RaftLogs {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RaftLogs")
            .field("dir", &self.engine.path())
            .finish()
    }
}

impl RaftLogs {
    /// Opens (or creates) the log store in `dir`, replaying its segments, and reads every
    /// entry once to check it. A torn tail (a write the crash cut short) is dropped; an entry
    /// that fails its checksum is an error that names the group and index.
    pub(crate) fn open(dir: &Path) -> Result<Self, StorageError> {
        std::fs::create_dir_all(dir)?;
        let config = Config {
            dir: dir.to_string_lossy().into_owned(),
            recovery_threads: 1,
            // Entries are already compact; compressing them costs CPU on the write path.
            batch_compression_threshold: ReadableSize(0),
            target_file_size: ReadableSize(SEGMENT_BYTES),
            purge_threshold: ReadableSize(PURGE_THRESHOLD_BYTES),
            ..Config::default()
        };
        let engine = Arc::new(Engine::open(config)?);
        let files = Arc::new(RwLock::new(()));
        let (stop, stopped) = mpsc::channel();
        start_purges(Arc::downgrade(&engine), files.clone(), stopped);
        let logs = Self {
            engine,
            files,
            cuts: Mutex::default(),
            _stop_purges: stop,
        };
        logs.check_entries()?;
        Ok(logs)
    }

    /// Reads every entry of every group, so that damage is found at start-up, before Raft
    /// relies on the log, rather than when an entry is needed. Logs are short (a snapshot
    /// lets them be purged), so this reads megabytes, not the data.
    fn check_entries(&self) -> Result<(), StorageError> {
        const CHUNK: u64 = 1024;
        for region in self.engine.raft_groups() {
            let Ok(group) = u32::try_from(region) else {
                continue;
            };
            let Some((first, last)) = self.span(group) else {
                continue;
            };
            let mut start = first;
            while start <= last {
                let end = (start + CHUNK).min(last + 1);
                if self.read(group, start, end).is_err() {
                    for index in start..end {
                        if let Err(e) = self.read(group, index, index + 1) {
                            return Err(StorageError::Corrupt(format!(
                                "the Raft log of group {group} in {} is damaged at entry \
                                 {index} (its entries {first}..={last}): {e}; the node \
                                 cannot start on it: remove the node and add it back \
                                 empty, and its replicas are copied from the others",
                                self.engine.path()
                            )));
                        }
                    }
                }
                start = end;
            }
        }
        Ok(())
    }

    /// A [`LogFileSync`] for the group-commit thread.
    pub(crate) fn file_sync(&self) -> LogFileSync {
        LogFileSync {
            engine: self.engine.clone(),
            dir: PathBuf::from(self.engine.path()),
            active: None,
        }
    }

    fn cuts(&self) -> std::sync::MutexGuard<'_, HashMap<u32, u64>> {
        self.cuts.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Appends entries of `group`, consecutive by index. Entries at or after the first one's
    /// index are replaced; a gap after the last entry (the log was purged past its end, as
    /// after a snapshot is installed) starts the log anew at the first entry.
    pub(crate) fn append(
        &self,
        group: u32,
        entries: impl IntoIterator<Item = (u64, Vec<u8>)>,
    ) -> Result<(), StorageError> {
        let region = u64::from(group);
        let entries: Vec<BytesValue> = entries
            .into_iter()
            .map(|(index, bytes)| {
                let mut value = Vec::with_capacity(8 + bytes.len());
                value.extend_from_slice(&index.to_be_bytes());
                value.extend_from_slice(&bytes);
                BytesValue {
                    value,
                    ..Default::default()
                }
            })
            .collect();
        let Some(first) = entries.first().map(Entries::index) else {
            return Ok(());
        };
        let mut batch = LogBatch::with_capacity(1);
        if self
            .engine
            .last_index(region)
            .is_some_and(|last| first > last + 1)
        {
            batch.add_command(region, Command::Compact { index: first });
        }
        batch.add_entries::<Entries>(region, &entries)?;
        self.engine.write(&mut batch, false)?;
        self.cuts().remove(&group);
        Ok(())
    }

    /// The first and last index of `group`'s log, if it holds entries.
    pub(crate) fn span(&self, group: u32) -> Option<(u64, u64)> {
        let region = u64::from(group);
        let first = self.engine.first_index(region)?;
        let mut end = self.engine.last_index(region)?.saturating_add(1);
        if let Some(cut) = self.cuts().get(&group) {
            end = end.min(*cut);
        }
        (first < end).then(|| (first, end - 1))
    }

    /// Entries `start..end` of `group`, in order; what the log does not hold is left out.
    pub(crate) fn read(
        &self,
        group: u32,
        start: u64,
        end: u64,
    ) -> Result<Vec<(u64, Vec<u8>)>, StorageError> {
        let Some((first, last)) = self.span(group) else {
            return Ok(Vec::new());
        };
        let start = start.max(first);
        let end = end.min(last + 1);
        if start >= end {
            return Ok(Vec::new());
        }
        let mut entries = Vec::with_capacity((end - start).min(4096) as usize);
        {
            let _files = self.files.read().unwrap_or_else(|e| e.into_inner());
            self.engine.fetch_entries_to::<Entries>(
                u64::from(group),
                start,
                end,
                None,
                &mut entries,
            )?;
        }
        entries
            .into_iter()
            .map(|entry| {
                let mut value = entry.value;
                let index = entry_index(&value)
                    .ok_or_else(|| StorageError::Corrupt("log entry without its index".into()))?;
                value.drain(..8);
                Ok((index, value))
            })
            .collect()
    }

    /// Cuts `group`'s log before index `from` (see the module's note on durability).
    pub(crate) fn truncate(&self, group: u32, from: u64) {
        let mut cuts = self.cuts();
        let cut = cuts.entry(group).or_insert(u64::MAX);
        *cut = (*cut).min(from);
    }

    /// Drops entries of `group` below `upto`. Their space is reclaimed when no live entry is
    /// left in their segment files.
    pub(crate) fn purge(&self, group: u32, upto: u64) -> Result<(), StorageError> {
        let mut batch = LogBatch::with_capacity(1);
        batch.add_command(u64::from(group), Command::Compact { index: upto });
        self.engine.write(&mut batch, false)?;
        Ok(())
    }

    /// Sets a named value of `group`: its vote, its purge point, the node's identity.
    pub(crate) fn put_meta(
        &self,
        group: u32,
        name: &str,
        value: Vec<u8>,
    ) -> Result<(), StorageError> {
        let mut batch = LogBatch::with_capacity(1);
        batch.put(u64::from(group), name.as_bytes().to_vec(), value)?;
        self.engine.write(&mut batch, false)?;
        Ok(())
    }

    /// A named value of `group`.
    pub(crate) fn meta(&self, group: u32, name: &str) -> Option<Vec<u8>> {
        self.engine.get(u64::from(group), name.as_bytes())
    }

    /// Whether `group` has anything here: entries (even purged to nothing) or named values.
    pub(crate) fn has_group(&self, group: u32) -> bool {
        self.engine.raft_groups().contains(&u64::from(group))
    }

    /// Removes everything of `group`.
    pub(crate) fn remove_group(&self, group: u32) -> Result<(), StorageError> {
        let mut batch = LogBatch::with_capacity(1);
        batch.add_command(u64::from(group), Command::Clean);
        self.engine.write(&mut batch, false)?;
        self.cuts().remove(&group);
        Ok(())
    }

    /// Bytes of segment files on disk.
    pub(crate) fn disk_bytes(&self) -> u64 {
        self.engine.get_used_size() as u64
    }
}

/// Drops segments that hold no live entry, every [`PURGE_INTERVAL`], until the store is gone.
fn start_purges(engine: std::sync::Weak<Engine>, files: Arc<RwLock<()>>, stop: mpsc::Receiver<()>) {
    let spawned = std::thread::Builder::new()
        .name("trireme-log-purge".into())
        .spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = stop.recv_timeout(PURGE_INTERVAL) {
                let Some(engine) = engine.upgrade() else {
                    return;
                };
                let _files = files.write().unwrap_or_else(|e| e.into_inner());
                match engine.purge_expired_files() {
                    Ok(lagging) if !lagging.is_empty() => {
                        tracing::debug!(groups = ?lagging, "groups hold entries in old log segments");
                    }
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "purging log segments failed"),
                }
            }
        });
    if let Err(e) = spawned {
        tracing::error!(error = %e, "cannot start the log purge thread; log segments are kept");
    }
}

/// Makes every write to the log store so far durable with one `fdatasync` of the active
/// segment. A segment that is no longer active was synced by raft-engine when it rotated to
/// the next one, so the writes of a round are either in a synced older file or in the file
/// that is active after they returned, which this syncs.
pub(crate) struct LogFileSync {
    engine: Arc<Engine>,
    dir: PathBuf,
    /// The active segment's sequence number and an open handle to it.
    active: Option<(u64, File)>,
}

impl LogFileSync {
    pub(crate) fn sync(&mut self) -> Result<(), StorageError> {
        let (_, seq) = self.engine.file_span(LogQueue::Append);
        if self.active.as_ref().is_none_or(|(held, _)| *held != seq) {
            let path = FileId::new(LogQueue::Append, seq).build_file_path(&self.dir);
            self.active = Some((seq, File::open(path)?));
        }
        if let Some((_, file)) = &self.active {
            file.sync_data()?;
        }
        crate::crash::point("log-synced");
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entries(range: std::ops::RangeInclusive<u64>, tag: &str) -> Vec<(u64, Vec<u8>)> {
        range
            .map(|i| (i, format!("{tag}{i}").into_bytes()))
            .collect()
    }

    fn values(logs: &RaftLogs, group: u32, start: u64, end: u64) -> Vec<String> {
        logs.read(group, start, end)
            .unwrap()
            .into_iter()
            .map(|(i, v)| format!("{i}:{}", String::from_utf8(v).unwrap()))
            .collect()
    }

    #[test]
    fn appends_read_back_and_survive_reopen_after_sync() {
        let dir = tempfile::tempdir().unwrap();
        {
            let logs = RaftLogs::open(dir.path()).unwrap();
            logs.append(1, entries(1..=3, "a")).unwrap();
            logs.append(2, entries(5..=6, "b")).unwrap();
            logs.put_meta(1, "vote", b"v1".to_vec()).unwrap();
            assert_eq!(values(&logs, 1, 0, u64::MAX), ["1:a1", "2:a2", "3:a3"]);
            logs.file_sync().sync().unwrap();
        }
        let logs = RaftLogs::open(dir.path()).unwrap();
        assert_eq!(logs.span(1), Some((1, 3)));
        assert_eq!(logs.span(2), Some((5, 6)));
        assert_eq!(logs.meta(1, "vote").as_deref(), Some(&b"v1"[..]));
        assert_eq!(values(&logs, 2, 6, 7), ["6:b6"]);
    }

    #[test]
    fn truncation_hides_the_tail_until_an_append_replaces_it() {
        let dir = tempfile::tempdir().unwrap();
        let logs = RaftLogs::open(dir.path()).unwrap();
        logs.append(1, entries(1..=5, "old")).unwrap();
        logs.truncate(1, 4);
        assert_eq!(logs.span(1), Some((1, 3)));
        assert_eq!(values(&logs, 1, 3, 10), ["3:old3"]);
        logs.append(1, entries(4..=4, "new")).unwrap();
        assert_eq!(logs.span(1), Some((1, 4)));
        assert_eq!(values(&logs, 1, 3, 10), ["3:old3", "4:new4"]);
        logs.truncate(1, 0);
        assert_eq!(logs.span(1), None);
        assert!(values(&logs, 1, 0, 10).is_empty());
    }

    #[test]
    fn purge_and_a_gap_start_the_log_anew() {
        let dir = tempfile::tempdir().unwrap();
        let logs = RaftLogs::open(dir.path()).unwrap();
        logs.append(1, entries(1..=5, "a")).unwrap();
        logs.purge(1, 3).unwrap();
        assert_eq!(logs.span(1), Some((3, 5)));
        assert_eq!(values(&logs, 1, 0, 4), ["3:a3"]);
        // A snapshot installed at 9: the next entry is 10, past the end.
        logs.append(1, entries(10..=11, "b")).unwrap();
        assert_eq!(logs.span(1), Some((10, 11)));
        logs.purge(1, 100).unwrap();
        assert_eq!(logs.span(1), None);
        assert!(logs.has_group(1));
        logs.remove_group(1).unwrap();
        assert!(!logs.has_group(1));
    }
}

#[cfg(test)]
mod damage_tests {
    use super::*;

    fn segments(dir: &Path) -> Vec<PathBuf> {
        let mut files: Vec<PathBuf> = std::fs::read_dir(dir)
            .unwrap()
            .map(|e| e.unwrap().path())
            .filter(|p| p.extension().is_some_and(|x| x == "raftlog"))
            .collect();
        files.sort();
        files
    }

    /// A log store holding entries 1..=10 of group 1, each written and synced on its own.
    fn ten_synced_entries() -> tempfile::TempDir {
        let dir = tempfile::tempdir().unwrap();
        let logs = RaftLogs::open(dir.path()).unwrap();
        for i in 1..=10u64 {
            logs.append(1, [(i, vec![i as u8; 100])]).unwrap();
        }
        logs.file_sync().sync().unwrap();
        dir
    }

    #[test]
    fn a_torn_tail_keeps_every_entry_before_it() {
        let dir = ten_synced_entries();
        let last = segments(dir.path()).pop().unwrap();
        let len = std::fs::metadata(&last).unwrap().len();
        // The last write cut short, as a crash during it would leave it.
        let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
        file.set_len(len - 30).unwrap();
        drop(file);
        let logs = RaftLogs::open(dir.path()).unwrap();
        assert_eq!(logs.span(1), Some((1, 9)));
    }

    #[test]
    fn damage_inside_the_log_is_reported() {
        let dir = ten_synced_entries();
        let last = segments(dir.path()).pop().unwrap();
        let mut bytes = std::fs::read(&last).unwrap();
        let at = bytes.len() / 2;
        bytes[at] ^= 0xff;
        std::fs::write(&last, bytes).unwrap();
        let refused = RaftLogs::open(dir.path()).unwrap_err().to_string();
        assert!(
            refused.contains("group 1") && refused.contains("damaged at entry"),
            "{refused}"
        );
    }
}
