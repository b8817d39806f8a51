//! Log compaction by size, next to openraft's policy by entry count.
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

use crate::{ShardStateMachine, TypeConfig};
use openraft::Raft;
use std::sync::atomic::{AtomicU64, Ordering};
use tokio::sync::mpsc;

/// Bytes appended to one group's log, and when they call for a snapshot.
#[derive(Debug)]
pub(crate) struct LogBudget {
    /// Log bytes that call for a snapshot (at least).
    every: u64,
    /// Bytes appended since the group opened.
    appended: AtomicU64,
    /// `appended` when the last snapshot was asked for.
    asked_at: AtomicU64,
    /// Encoded size of the last snapshot built or installed here.
    snapshot_bytes: AtomicU64,
    due: mpsc::Sender<()>,
}

impl LogBudget {
    /// A budget of `every` bytes, and the receiver of its snapshot requests (see
    /// [`run_snapshots`]).
    pub(crate) fn new(every: u64) -> (Self, mpsc::Receiver<()>) {
        // One request waiting is enough: a snapshot covers everything applied before it.
        let (due, requests) = mpsc::channel(1);
        let budget = Self {
            every,
            appended: AtomicU64::new(0),
            asked_at: AtomicU64::new(0),
            snapshot_bytes: AtomicU64::new(0),
            due,
        };
        (budget, requests)
    }

    /// Counts `bytes` appended to the log; asks for a snapshot when they add up. Called by
    /// the log store only, from the group's one Raft task.
    pub(crate) fn appended(&self, bytes: u64) {
        let appended = self.appended.fetch_add(bytes, Ordering::Relaxed) + bytes;
        let since = appended - self.asked_at.load(Ordering::Relaxed);
        if since >= self.every.max(self.snapshot_bytes.load(Ordering::Relaxed)) {
            self.asked_at.store(appended, Ordering::Relaxed);
            // Full: a request is already waiting, which will do.
            let _ = self.due.try_send(());
        }
    }

    /// Records the size of the snapshot just built or installed.
    pub(crate) fn snapshot_taken(&self, bytes: u64) {
        self.snapshot_bytes.store(bytes, Ordering::Relaxed);
    }
}

/// Takes a snapshot of the group for each request, until the log store (and with it the
/// sender) is dropped when the group stops.
pub(crate) async fn run_snapshots(
    raft: Raft<TypeConfig, ShardStateMachine>,
    mut requests: mpsc::Receiver<()>,
) {
    while requests.recv().await.is_some() {
        if raft.trigger().snapshot().await.is_err() {
            return;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_snapshot_is_asked_for_each_time_the_log_grows_by_the_budget() {
        let (budget, mut requests) = LogBudget::new(100);
        budget.appended(60);
        assert!(requests.try_recv().is_err(), "60 of 100 bytes");
        budget.appended(40);
        assert!(requests.try_recv().is_ok(), "100 bytes");
        budget.appended(99);
        assert!(requests.try_recv().is_err(), "99 since the last request");
        budget.appended(1);
        assert!(requests.try_recv().is_ok());
    }

    #[test]
    fn a_large_snapshot_raises_the_budget() {
        let (budget, mut requests) = LogBudget::new(100);
        budget.snapshot_taken(250);
        budget.appended(200);
        assert!(
            requests.try_recv().is_err(),
            "200 bytes of log, 250 of snapshot"
        );
        budget.appended(50);
        assert!(requests.try_recv().is_ok());
    }

    #[test]
    fn requests_do_not_pile_up() {
        let (budget, mut requests) = LogBudget::new(10);
        for _ in 0..5 {
            budget.appended(10);
        }
        assert!(requests.try_recv().is_ok());
        assert!(
            requests.try_recv().is_err(),
            "one waiting request covers them all"
        );
    }
}
