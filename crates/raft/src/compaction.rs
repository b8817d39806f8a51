//! Log compaction by size, next to openraft's policy by entry count.
//!
//! (The measurements below were taken while the logs lived in fjall. They now live in a log
//! store of segment files, where a long log costs disk space in segments that cannot be
//! dropped and replay time at start-up rather than SST flushes; the budget bounds both.)
//!
//! openraft snapshots a group every `snapshot_every` entries, but an entry is a batch of up to
//! 256 commands, so 20,000 entries of 1 KiB writes are some 260 MB of log. That is more than
//! fjall keeps in a memtable (64 MiB), so the entries were flushed to SSTs only to be deleted
//! after the snapshot. A [`LogBudget`] asks for a snapshot once the log has grown by
//! `snapshot_log_bytes` since the last one, or by the size of the last snapshot if that is
//! larger: a snapshot rewrites the whole shard, so a big shard is not rewritten for every few
//! MB of writes, and the cost stays at most one shard write per shard-sized stretch of log.
//!
//! Measured with redis-benchmark SET (1 KiB, one key, 150k writes): 247 MB written to the
//! disk without the budget, 146–148 MB with 8 MiB (the `raft_log` SSTs flushed from the
//! memtable went from 2 × 64 MB to 2 × 15 MB).
//!
//! Behind a snapshot, openraft keeps `keep_after_snapshot` entries for followers slightly
//! behind, again counted in entries: 1,000 entries of ~45 KiB (a batch of 1 KiB writes) are
//! ~45 MB that stay in the log, fill the memtable and are flushed to SSTs only to be deleted.
//! So once openraft has a new snapshot, [`run_compaction`] also purges what lies more than
//! `keep_after_snapshot_bytes` behind it, found through the size of each entry, which the
//! budget keeps until the entry is purged ([`LogBudget::purge_point`]). A follower further behind than that gets the snapshot
//! instead of the entries, as it would behind `keep_after_snapshot` entries.
//!
//! Measured with redis-benchmark SET (1 KiB, 50 clients, one key, 150k writes, per-thread CPU
//! from /proc, two runs each): fjall's flush threads went from 0.8–1.1 to 0.1–0.3 µs of CPU per
//! SET and the node's total from ~26–30 to ~23–26 µs; `trireme bench --preset consul-put
//! --keys 1` on 3 nodes gave 27.5k and 30.4k PUT/s against 20.2k and 28.0k before.

use crate::{ShardStateMachine, TypeConfig};
use openraft::Raft;
use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, Weak};
use std::time::Duration;
use tokio::sync::{mpsc, watch};
use trireme_types::NodeId;

/// Most entry sizes kept per group (they are dropped as the log is purged, so this only bounds
/// a log that is never purged). Dropping the oldest loses nothing a purge point needs: the
/// walk back from a snapshot stops at the first entry that does not fit, and the ones before
/// it go anyway.
const MAX_MARKS: usize = 1 << 16;

/// How long to wait for openraft to take up a snapshot built here before purging behind it.
const SNAPSHOT_TAKEN_UP: Duration = Duration::from_secs(10);

/// Bytes appended to one group's log, and when they call for a snapshot.
#[derive(Debug)]
pub(crate) struct LogBudget {
    /// Log bytes that call for a snapshot (at least).
    every: u64,
    /// Percent added to every threshold on this replica (see [`stagger_percent`]).
    stagger: u64,
    /// Bytes appended since the group opened.
    appended: AtomicU64,
    /// `appended` when the last snapshot was asked for.
    asked_at: AtomicU64,
    /// Encoded size of the last snapshot built or installed here.
    snapshot_bytes: AtomicU64,
    due: mpsc::Sender<()>,
    /// The size of each entry not yet purged, oldest first.
    marks: Mutex<Marks>,
    /// The last index of the newest snapshot built here.
    built: watch::Sender<Option<u64>>,
}

/// What [`run_compaction`] waits on: snapshot requests, and snapshots built.
pub(crate) struct CompactionEvents {
    requests: mpsc::Receiver<()>,
    built: watch::Receiver<Option<u64>>,
}

impl LogBudget {
    /// A budget of `every` bytes, and the events it raises (see [`run_compaction`]).
    pub(crate) fn new(every: u64) -> (Self, CompactionEvents) {
        // One request waiting is enough: a snapshot covers everything applied before it.
        let (due, requests) = mpsc::channel(1);
        let (built, built_rx) = watch::channel(None);
        let budget = Self {
            every,
            stagger: 0,
            appended: AtomicU64::new(0),
            asked_at: AtomicU64::new(0),
            snapshot_bytes: AtomicU64::new(0),
            due,
            marks: Mutex::new(Marks::default()),
            built,
        };
        let events = CompactionEvents {
            requests,
            built: built_rx,
        };
        (budget, events)
    }

    /// Raises every threshold of this replica by `percent` (see [`stagger_percent`]).
    pub(crate) fn staggered(mut self, percent: u64) -> Self {
        self.stagger = percent;
        self
    }

    fn marks(&self) -> std::sync::MutexGuard<'_, Marks> {
        self.marks.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Counts appended entries (index and encoded size); asks for a snapshot when their sizes
    /// add up. Called by the log store only, from the group's one Raft task.
    pub(crate) fn appended(&self, entries: impl IntoIterator<Item = (u64, u64)>) {
        let mut bytes = 0;
        {
            let mut marks = self.marks();
            for (index, size) in entries {
                marks.push(index, size);
                bytes += size;
            }
        }
        let appended = self.appended.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let since = appended - self.asked_at.load(Ordering::Relaxed);
        let threshold = self.every.max(self.snapshot_bytes.load(Ordering::Relaxed));
        if since >= threshold + threshold / 100 * self.stagger {
            self.asked_at.store(appended, Ordering::Relaxed);
            // Full: a request is already waiting, which will do.
            let _ = self.due.try_send(());
        }
    }

    /// Forgets entries `from` and later, which the log store truncated.
    pub(crate) fn truncated(&self, from: u64) {
        self.marks().truncate(from);
    }

    /// Forgets entries up to `upto`, which the log store purged (whoever asked for it).
    pub(crate) fn purged(&self, upto: u64) {
        self.marks().purge(upto);
    }

    /// Records the size of a snapshot just installed from the leader.
    pub(crate) fn snapshot_installed(&self, bytes: u64) {
        self.snapshot_bytes.store(bytes, Ordering::Relaxed);
    }

    /// Records the size and last index of a snapshot just built here.
    pub(crate) fn snapshot_built(&self, bytes: u64, last_index: u64) {
        self.snapshot_bytes.store(bytes, Ordering::Relaxed);
        self.built.send_replace(Some(last_index));
    }

    /// The highest index to purge so that at most `keep_bytes` of log stay behind a snapshot
    /// ending at `snapshot` (see [`Marks::purge_point`]). It may already be purged or
    /// scheduled; openraft then does nothing.
    pub(crate) fn purge_point(&self, snapshot: u64, keep_bytes: u64) -> Option<u64> {
        self.marks().purge_point(snapshot, keep_bytes)
    }
}

/// How much later than the configured thresholds (percent, 0 to 40) node `node_id` snapshots
/// its replicas. Every replica of a shard sees the same log, so without it all of them built
/// their snapshot at the same entry: three builds of a 200 MB shard (about 3 s of CPU each)
/// at once on the same two cores stalled every request for seconds (measured by
/// `bench/move.sh` on 2026-11-24, in the run without a move).
pub(crate) fn stagger_percent(node_id: NodeId) -> u64 {
    // The id is a hash of the node's name: its bits are spread enough.
    let id = node_id.0;
    (id ^ (id >> 29)) % 41
}

/// The sizes of a group's entries not yet purged.
#[derive(Debug, Default)]
struct Marks {
    /// Per entry, oldest first: its index and its encoded size in bytes.
    entries: VecDeque<(u64, u64)>,
}

impl Marks {
    fn push(&mut self, index: u64, bytes: u64) {
        // An entry appended again after a truncation replaces the old one and those after it.
        self.truncate(index);
        if self.entries.len() == MAX_MARKS {
            self.entries.pop_front();
        }
        self.entries.push_back((index, bytes));
    }

    fn truncate(&mut self, from: u64) {
        while self.entries.back().is_some_and(|&(index, _)| index >= from) {
            self.entries.pop_back();
        }
    }

    fn purge(&mut self, upto: u64) {
        while self
            .entries
            .front()
            .is_some_and(|&(index, _)| index <= upto)
        {
            self.entries.pop_front();
        }
    }

    /// Walks back from the snapshot, keeping entries while their sizes fit in `keep_bytes`;
    /// the first that does not fit is the purge point. `None` when all of them fit.
    fn purge_point(&self, snapshot: u64, keep_bytes: u64) -> Option<u64> {
        let mut kept = 0u64;
        self.entries
            .iter()
            .rev()
            .filter(|&&(index, _)| index <= snapshot)
            .find(|&&(_, bytes)| {
                kept = kept.saturating_add(bytes);
                kept > keep_bytes
            })
            .map(|&(index, _)| index)
    }
}

/// Takes a snapshot of the group for each request, and purges the log behind each snapshot
/// built here down to `keep_bytes` (openraft's own purge keeps `keep_after_snapshot`
/// entries, whatever their size). Runs until the group's log store and state machine, which
/// hold the budget, are dropped when the group stops.
pub(crate) async fn run_compaction(
    raft: Raft<TypeConfig, ShardStateMachine>,
    budget: Weak<LogBudget>,
    mut events: CompactionEvents,
    keep_bytes: u64,
) {
    loop {
        tokio::select! {
            request = events.requests.recv() => {
                if request.is_none() || raft.trigger().snapshot().await.is_err() {
                    return;
                }
            }
            built = events.built.changed() => {
                if built.is_err() {
                    return;
                }
                let Some(snapshot) = *events.built.borrow_and_update() else { continue };
                // openraft purges nothing beyond the snapshot it knows of: wait until it has
                // taken this one up.
                let taken_up = raft
                    .wait(Some(SNAPSHOT_TAKEN_UP))
                    .metrics(
                        |m| m.snapshot.as_ref().is_some_and(|s| s.index() >= snapshot),
                        "snapshot taken up",
                    )
                    .await;
                if taken_up.is_err() {
                    continue;
                }
                let Some(budget) = budget.upgrade() else { return };
                let Some(upto) = budget.purge_point(snapshot, keep_bytes) else { continue };
                drop(budget);
                if raft.trigger().purge_log(upto).await.is_err() {
                    return;
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_asked_for_each_time_the_log_grows_by_the_budget() {
        let (budget, mut events) = LogBudget::new(100);
        budget.appended([(1, 60)]);
        assert!(events.requests.try_recv().is_err(), "60 of 100 bytes");
        budget.appended([(2, 15), (3, 25)]);
        assert!(events.requests.try_recv().is_ok(), "100 bytes");
        budget.appended([(4, 99)]);
        assert!(
            events.requests.try_recv().is_err(),
            "99 since the last request"
        );
        budget.appended([(5, 1)]);
        assert!(events.requests.try_recv().is_ok());
    }

    #[test]
    fn a_large_snapshot_raises_the_budget() {
        let (budget, mut events) = LogBudget::new(100);
        budget.snapshot_installed(250);
        budget.appended([(1, 200)]);
        assert!(
            events.requests.try_recv().is_err(),
            "200 bytes of log, 250 of snapshot"
        );
        budget.appended([(2, 50)]);
        assert!(events.requests.try_recv().is_ok());
    }

    #[test]
    fn requests_do_not_pile_up() {
        let (budget, mut events) = LogBudget::new(10);
        for index in 1..=5 {
            budget.appended([(index, 10)]);
        }
        assert!(events.requests.try_recv().is_ok());
        assert!(
            events.requests.try_recv().is_err(),
            "one waiting request covers them all"
        );
    }

    /// Entries 1..=10 of 100 bytes each, appended two at a time.
    fn ten_entries() -> LogBudget {
        let (budget, _events) = LogBudget::new(1 << 30);
        for first in (1..=10).step_by(2) {
            budget.appended([(first, 100), (first + 1, 100)]);
        }
        budget
    }

    #[test]
    fn the_purge_point_keeps_at_most_the_bytes_asked_for_behind_the_snapshot() {
        let budget = ten_entries();
        // Behind a snapshot at 8: keeping 250 bytes keeps 7 and 8 (200 bytes), not 6 too.
        assert_eq!(budget.purge_point(8, 250), Some(6));
        assert_eq!(budget.purge_point(8, 200), Some(6));
        assert_eq!(budget.purge_point(8, 199), Some(7));
        assert_eq!(budget.purge_point(8, 0), Some(8));
        // Entries after the snapshot are not counted: they stay in any case.
        assert_eq!(budget.purge_point(5, 250), Some(3));
    }

    #[test]
    fn nothing_to_purge_when_the_log_behind_the_snapshot_fits() {
        let (budget, _events) = LogBudget::new(1 << 30);
        assert_eq!(budget.purge_point(10, 0), None, "no entries");
        budget.appended([(20, 100)]);
        assert_eq!(
            budget.purge_point(10, 0),
            None,
            "nothing at or below the snapshot"
        );
        budget.appended([(21, 100)]);
        assert_eq!(budget.purge_point(21, 200), None, "200 bytes fit");
    }

    #[test]
    fn purged_and_truncated_entries_no_longer_count() {
        let budget = ten_entries();
        // Purged up to 6 (by openraft's own count, say): 7 and 8 are all that is known.
        budget.purged(6);
        assert_eq!(budget.purge_point(8, 250), None);
        assert_eq!(budget.purge_point(8, 150), Some(7));
        // Entries 9 and 10 truncated: a snapshot at 10 only finds 7 and 8 behind it.
        budget.truncated(9);
        assert_eq!(budget.purge_point(10, 150), Some(7));
        // Entry 9 appended again, larger.
        budget.appended([(9, 1_000)]);
        assert_eq!(budget.purge_point(9, 999), Some(9));
        assert_eq!(budget.purge_point(9, 1_000), Some(8));
    }

    #[test]
    fn a_full_record_drops_its_oldest_entries() {
        let mut marks = Marks::default();
        for index in 1..=(MAX_MARKS as u64 + 2) {
            marks.push(index, 1);
        }
        assert_eq!(marks.entries.len(), MAX_MARKS);
        assert_eq!(marks.entries.front(), Some(&(3, 1)));
        let newest = MAX_MARKS as u64 + 2;
        assert_eq!(marks.purge_point(newest, 10), Some(newest - 10));
    }

    #[test]
    fn a_staggered_replica_asks_later_and_nodes_spread_over_the_range() {
        let (plain, mut plain_events) = LogBudget::new(100);
        let (late, mut late_events) = LogBudget::new(100);
        let late = late.staggered(40);
        plain.appended([(1, 110)]);
        late.appended([(1, 110)]);
        assert!(plain_events.requests.try_recv().is_ok());
        assert!(late_events.requests.try_recv().is_err(), "110 < 140");
        late.appended([(2, 40)]);
        assert!(late_events.requests.try_recv().is_ok());
        let spread: std::collections::BTreeSet<u64> = ["n1", "n2", "n3", "n4", "n5"]
            .iter()
            .map(|n| stagger_percent(NodeId::from_name(n)))
            .collect();
        assert!(spread.iter().all(|p| *p <= 40));
        assert!(
            spread.len() >= 3,
            "five nodes, few distinct staggers: {spread:?}"
        );
    }
}
