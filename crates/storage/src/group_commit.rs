//! Group commit: one thread turns many "make my writes durable" requests into one fdatasync.

use crate::StorageError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;
use std::time::{Duration, Instant};

/// The longest a sync waits for more requests to join it.
const MAX_LINGER: Duration = Duration::from_micros(400);

/// Under load, requests arrive spread out over the previous sync, and syncing as soon as the
/// first one arrives splits them into many small syncs, each paying the device's full flush
/// cost. When fewer than half as many requests are waiting as the last sync covered, wait a
/// little (at most a quarter of the last sync's duration, and `MAX_LINGER`) for the rest.
/// A lone client never waits: its previous batch was 1, so the target is already met.
fn linger(
    rx: &mpsc::Receiver<Queued>,
    waiting: &mut Vec<Queued>,
    last_batch: usize,
    last_sync: Duration,
) {
    let target = last_batch / 2;
    if waiting.len() >= target {
        return;
    }
    let deadline = Instant::now() + (last_sync / 4).min(MAX_LINGER);
    while waiting.len() < target {
        let Some(left) = deadline.checked_duration_since(Instant::now()) else {
            return;
        };
        match rx.recv_timeout(left) {
            Ok(callback) => {
                waiting.push(callback);
                waiting.extend(rx.try_iter());
            }
            Err(_) => return,
        }
    }
}

/// Called once the writes made before it was queued are durable (or the sync failed).
pub type SyncCallback = Box<dyn FnOnce(Result<(), StorageError>) + Send>;

/// A callback and when it was queued, to count how long it waited for its sync.
type Queued = (Instant, SyncCallback);

/// Handle to the group-commit thread. Dropping the last handle stops the thread.
pub(crate) struct GroupCommit {
    /// `None` once dropped: the thread ends when the channel closes.
    tx: Option<mpsc::Sender<Queued>>,
    poisoned: Arc<AtomicBool>,
    thread: Option<thread::JoinHandle<()>>,
}

impl GroupCommit {
    /// Starts the thread `name`. `sync` is the fdatasync of the files it covers; `metrics`,
    /// when given, count its waits and syncs.
    pub(crate) fn start(
        name: &str,
        mut sync: impl FnMut() -> Result<(), StorageError> + Send + 'static,
        poisoned: Arc<AtomicBool>,
        metrics: Option<Arc<crate::store::StorageMetrics>>,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<Queued>();
        let flag = poisoned.clone();
        let spawned = thread::Builder::new()
            .name(name.into())
            .spawn(move || {
                let mut waiting = Vec::new();
                let mut last_batch = 0usize;
                let mut last_sync = Duration::ZERO;
                // Block for the first request, then take everything queued behind it: all of
                // their writes happened before they were queued, so one sync covers them all.
                while let Ok(first) = rx.recv() {
                    waiting.push(first);
                    waiting.extend(rx.try_iter());
                    linger(&rx, &mut waiting, last_batch, last_sync);
                    let result = if flag.load(Ordering::Acquire) {
                        Err(StorageError::Poisoned)
                    } else {
                        let started = Instant::now();
                        let waited = waiting
                            .iter()
                            .map(|(queued, _)| started.saturating_duration_since(*queued))
                            .sum();
                        if let Some(metrics) = &metrics {
                            metrics.sync_waits.record_many(waiting.len() as u64, waited);
                        }
                        let result = sync();
                        last_sync = started.elapsed();
                        last_batch = waiting.len();
                        if let Some(metrics) = &metrics {
                            metrics.syncs.record(last_sync);
                        }
                        result.inspect_err(|e| {
                            tracing::error!(error = %e, "fdatasync failed: poisoning storage, the node stops accepting writes");
                            flag.store(true, Ordering::Release);
                        })
                    };
                    for (_, callback) in waiting.drain(..) {
                        let outcome = match &result {
                            Ok(()) => Ok(()),
                            Err(_) => Err(StorageError::Poisoned),
                        };
                        callback(outcome);
                    }
                }
            });
        let thread = match spawned {
            Ok(thread) => Some(thread),
            Err(e) => {
                // Without the thread nothing can become durable: refuse every write.
                tracing::error!(error = %e, "cannot start the group-commit thread");
                poisoned.store(true, Ordering::Release);
                None
            }
        };
        Self {
            tx: Some(tx),
            poisoned,
            thread,
        }
    }

    /// Queues `callback` behind the next sync.
    pub(crate) fn sync(&self, callback: SyncCallback) {
        if self.poisoned.load(Ordering::Acquire) {
            callback(Err(StorageError::Poisoned));
            return;
        }
        let Some(tx) = &self.tx else {
            callback(Err(StorageError::Closed));
            return;
        };
        if let Err(mpsc::SendError((_, callback))) = tx.send((Instant::now(), callback)) {
            callback(Err(StorageError::Closed));
        }
    }
}

/// Waits for the thread to finish the syncs queued so far, so that whatever its sync holds
/// (the log store's files, the tables) is released when the store is: a store reopened
/// right after finds them free.
impl Drop for GroupCommit {
    fn drop(&mut self) {
        self.tx = None;
        if let Some(thread) = self.thread.take()
            // The last owner of the store may be a callback run on the thread itself.
            && thread.thread().id() != thread::current().id()
        {
            let _ = thread.join();
        }
    }
}
