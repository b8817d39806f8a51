//! A Raft group's log and vote, kept in the node's shared storage.
//!
//! Appends are written to the node's log store at once (a `write(2)` into its active segment,
//! no fsync), so openraft can read them back as soon as `append` returns, and made durable by
//! the storage's log group-commit thread, which fires openraft's flush callback after one
//! fdatasync that covers every group. That write is short and never waits for the disk to
//! flush, which is why it is done inline rather than on a blocking thread.

use crate::TypeConfig;
use crate::compaction::LogBudget;
use crate::freshness::Freshness;
use openraft::entry::RaftEntry;
use openraft::storage::{IOFlushed, RaftLogStorage};
use openraft::type_config::alias::{EntryOf, LogIdOf, VoteOf};
use openraft::{LogState, OptionalSend, RaftLogReader};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::collections::VecDeque;
use std::fmt::Debug;
use std::io;
use std::ops::{Bound, RangeBounds};
use std::sync::{Arc, Mutex};
use trireme_storage::Storage;
use trireme_types::GroupId;

const VOTE: &str = "vote";
const PURGED: &str = "purged";

/// The log store of one group.
#[derive(Clone, Debug)]
pub struct LogStore {
    storage: Arc<Storage>,
    group: GroupId,
    recent: Arc<Mutex<RecentEntries>>,
    budget: Option<Arc<LogBudget>>,
    clock: Option<Arc<Freshness>>,
}

/// Most entries, and most encoded bytes, kept in [`RecentEntries`] per group.
const RECENT_MAX_ENTRIES: usize = 4096;
const RECENT_MAX_BYTES: usize = 4 * 1024 * 1024;

/// The newest entries of the log, decoded, with contiguous indexes. openraft reads every
/// entry back right after appending it (to apply it, to replicate it); serving those reads
/// from memory saves an LSM range scan and a decode (which copies the value) per entry.
#[derive(Debug, Default)]
struct RecentEntries {
    entries: VecDeque<(EntryOf<TypeConfig>, usize)>,
    bytes: usize,
}

impl RecentEntries {
    fn first_index(&self) -> Option<u64> {
        self.entries.front().map(|(e, _)| e.index())
    }

    fn push(&mut self, entry: EntryOf<TypeConfig>, size: usize) {
        let follows = self
            .entries
            .back()
            .is_none_or(|(last, _)| last.index() + 1 == entry.index());
        if !follows {
            self.clear();
        }
        self.bytes += size;
        self.entries.push_back((entry, size));
        while self.entries.len() > RECENT_MAX_ENTRIES || self.bytes > RECENT_MAX_BYTES {
            if let Some((_, size)) = self.entries.pop_front() {
                self.bytes -= size;
            }
        }
    }

    /// Entries `start..end` if all of them are here.
    fn get(&self, start: u64, end: u64) -> Option<Vec<EntryOf<TypeConfig>>> {
        let first = self.first_index()?;
        let last = self.entries.back().map(|(e, _)| e.index())?;
        if start < first || end > last + 1 {
            return None;
        }
        let from = (start - first) as usize;
        let to = (end.min(last + 1) - first) as usize;
        Some(
            self.entries
                .range(from..to)
                .map(|(e, _)| e.clone())
                .collect(),
        )
    }

    /// Drops entries with index >= `from`.
    fn truncate(&mut self, from: u64) {
        while self.entries.back().is_some_and(|(e, _)| e.index() >= from) {
            if let Some((_, size)) = self.entries.pop_back() {
                self.bytes -= size;
            }
        }
    }

    /// Drops entries with index < `upto`.
    fn purge(&mut self, upto: u64) {
        while self.entries.front().is_some_and(|(e, _)| e.index() < upto) {
            if let Some((_, size)) = self.entries.pop_front() {
                self.bytes -= size;
            }
        }
    }

    fn clear(&mut self) {
        self.entries.clear();
        self.bytes = 0;
    }
}

impl LogStore {
    /// The log of `group` inside `storage`.
    pub fn new(storage: Arc<Storage>, group: GroupId) -> Self {
        Self {
            storage,
            group,
            recent: Arc::default(),
            budget: None,
            clock: None,
        }
    }

    /// Tells `clock` when entries are appended and cut, for the leader's freshness stamps.
    pub(crate) fn with_clock(mut self, clock: Arc<Freshness>) -> Self {
        self.clock = Some(clock);
        self
    }

    /// Counts appended bytes against `budget`, which asks for snapshots by log size.
    pub(crate) fn with_budget(mut self, budget: Arc<LogBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    fn recent(&self) -> std::sync::MutexGuard<'_, RecentEntries> {
        self.recent.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn get_meta<T: DeserializeOwned>(&self, name: &str) -> Result<Option<T>, io::Error> {
        match self
            .storage
            .raft_meta(self.group, name)
            .map_err(io::Error::other)?
        {
            Some(bytes) => Ok(Some(decode(&bytes)?)),
            None => Ok(None),
        }
    }

    fn put_meta<T: Serialize>(&self, name: &str, value: &T) -> Result<(), io::Error> {
        self.storage
            .put_raft_meta(self.group, name, encode(value)?)
            .map_err(io::Error::other)
    }
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, io::Error> {
    postcard::to_allocvec(value).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

pub(crate) fn decode<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, io::Error> {
    postcard::from_bytes(bytes).map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))
}

fn bounds(range: &impl RangeBounds<u64>) -> (u64, u64) {
    let start = match range.start_bound() {
        Bound::Included(&i) => i,
        Bound::Excluded(&i) => i.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match range.end_bound() {
        Bound::Included(&i) => i.saturating_add(1),
        Bound::Excluded(&i) => i,
        Bound::Unbounded => u64::MAX,
    };
    (start, end)
}

impl RaftLogReader<TypeConfig> for LogStore {
    async fn try_get_log_entries<RB: RangeBounds<u64> + Clone + Debug + OptionalSend>(
        &mut self,
        range: RB,
    ) -> Result<Vec<EntryOf<TypeConfig>>, io::Error> {
        let (start, end) = bounds(&range);
        if start >= end {
            return Ok(Vec::new());
        }
        if let Some(entries) = self.recent().get(start, end) {
            return Ok(entries);
        }
        let rows = self
            .storage
            .read_log(self.group, start, end)
            .map_err(io::Error::other)?;
        if end != u64::MAX && (rows.len() as u64) < end - start {
            // openraft asks only for entries it knows are in the log; a short answer (an
            // entry it counts on is missing) shows up here before it shows up as a replica
            // that stops applying.
            tracing::warn!(
                group = self.group.0,
                start,
                end,
                got = rows.len(),
                first = rows.first().map(|(i, _)| *i),
                "a log read returned fewer entries than asked"
            );
        }
        // A hole inside the range is never allowed (openraft's contract): applying past it
        // would skip a committed entry on this replica only. Better the group stops here,
        // with the reason in the log.
        if let Some(w) = rows.windows(2).find(|w| w[1].0 != w[0].0 + 1) {
            return Err(io::Error::other(format!(
                "log of group {} has a hole: entry {} follows {}",
                self.group.0, w[1].0, w[0].0
            )));
        }
        rows.iter().map(|(_, bytes)| decode(bytes)).collect()
    }

    async fn read_vote(&mut self) -> Result<Option<VoteOf<TypeConfig>>, io::Error> {
        self.get_meta(VOTE)
    }
}

impl RaftLogStorage<TypeConfig> for LogStore {
    type LogReader = Self;

    async fn get_log_state(&mut self) -> Result<LogState<TypeConfig>, io::Error> {
        let last_purged: Option<LogIdOf<TypeConfig>> = self.get_meta(PURGED)?;
        let last = match self
            .storage
            .last_log(self.group)
            .map_err(io::Error::other)?
        {
            Some((_, bytes)) => Some(decode::<EntryOf<TypeConfig>>(&bytes)?.log_id()),
            None => None,
        };
        Ok(LogState {
            last_log_id: last.or(last_purged),
            last_purged_log_id: last_purged,
        })
    }

    async fn get_log_reader(&mut self) -> Self::LogReader {
        self.clone()
    }

    async fn save_vote(&mut self, vote: &VoteOf<TypeConfig>) -> Result<(), io::Error> {
        self.put_meta(VOTE, vote)?;
        // A vote must be on disk before it is acted upon.
        self.storage
            .sync_log_async()
            .await
            .map_err(io::Error::other)
    }

    // `save_committed` / `read_committed` keep openraft's defaults (not persisted): writing the
    // committed id on every commit showed in write-heavy profiles. After a restart the state
    // machine catches up once the group commits an entry of a new term, and reads wait for
    // that (the lease check requires an applied entry of the current term; ReadIndex waits for
    // the read index), so no read sees a state older than an acknowledged write. This needs
    // every restarted node to go through an election: group.rs turns openraft's leader restore
    // off.

    async fn append<I>(
        &mut self,
        entries: I,
        callback: IOFlushed<TypeConfig>,
    ) -> Result<(), io::Error>
    where
        I: IntoIterator<Item = EntryOf<TypeConfig>> + OptionalSend,
        I::IntoIter: OptionalSend,
    {
        let entries: Vec<EntryOf<TypeConfig>> = entries.into_iter().collect();
        if let (Some(clock), Some(first), Some(last)) =
            (&self.clock, entries.first(), entries.last())
        {
            clock.appended(first.index(), last.index());
        }
        let rows = entries
            .iter()
            .map(|entry| Ok((entry.index(), encode(entry)?)))
            .collect::<Result<Vec<_>, io::Error>>()?;
        let sizes: Vec<usize> = rows.iter().map(|(_, bytes)| bytes.len()).collect();
        self.storage
            .append_log(self.group, rows)
            .map_err(io::Error::other)?;
        if let Some(budget) = &self.budget {
            budget.appended(
                entries
                    .iter()
                    .zip(&sizes)
                    .map(|(entry, size)| (entry.index(), *size as u64)),
            );
        }
        {
            let mut recent = self.recent();
            for (entry, size) in entries.into_iter().zip(sizes) {
                recent.push(entry, size);
            }
        }
        self.storage.sync_log(Box::new(move |result| {
            callback.io_completed(result.map_err(io::Error::other));
        }));
        Ok(())
    }

    async fn truncate_after(
        &mut self,
        last_log_id: Option<LogIdOf<TypeConfig>>,
    ) -> Result<(), io::Error> {
        let from = last_log_id.map_or(0, |id| id.index() + 1);
        self.recent().truncate(from);
        if let Some(clock) = &self.clock {
            clock.truncated(from);
        }
        if let Some(budget) = &self.budget {
            budget.truncated(from);
        }
        self.storage
            .truncate_log(self.group, from)
            .map_err(io::Error::other)
    }

    async fn purge(&mut self, log_id: LogIdOf<TypeConfig>) -> Result<(), io::Error> {
        // Record the purge point first: entries at or below it are ignored from then on, so
        // deleting them need not be atomic with it.
        self.put_meta(PURGED, &log_id)?;
        let upto = log_id.index() + 1;
        self.recent().purge(upto);
        if let Some(budget) = &self.budget {
            budget.purged(log_id.index());
        }
        // Dropping the entries is an in-memory change of the log store's index (their segment
        // files go once nothing live is left in them), so it is done inline.
        self.storage
            .purge_log(self.group, upto)
            .map_err(io::Error::other)?;
        Ok(())
    }
}
