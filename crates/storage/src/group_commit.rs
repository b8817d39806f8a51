//! Group commit: one thread turns many "make my writes durable" requests into one fdatasync.

use crate::StorageError;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, mpsc};
use std::thread;

/// Called once the writes made before it was queued are durable (or the sync failed).
pub type SyncCallback = Box<dyn FnOnce(Result<(), StorageError>) + Send>;

/// Handle to the group-commit thread. Dropping the last handle stops the thread.
pub(crate) struct GroupCommit {
    tx: mpsc::Sender<SyncCallback>,
    poisoned: Arc<AtomicBool>,
}

impl GroupCommit {
    /// Starts the thread. `sync` is the fdatasync of the shared journal.
    pub(crate) fn start(
        mut sync: impl FnMut() -> Result<(), fjall::Error> + Send + 'static,
        poisoned: Arc<AtomicBool>,
        metrics: Arc<crate::store::SyncMetrics>,
    ) -> Self {
        let (tx, rx) = mpsc::channel::<SyncCallback>();
        let flag = poisoned.clone();
        let spawned = thread::Builder::new()
            .name("trireme-group-commit".into())
            .spawn(move || {
                let mut waiting = Vec::new();
                // Block for the first request, then take everything queued behind it: all of
                // their writes happened before they were queued, so one sync covers them all.
                while let Ok(first) = rx.recv() {
                    waiting.push(first);
                    waiting.extend(rx.try_iter());
                    let result = if flag.load(Ordering::Acquire) {
                        Err(StorageError::Poisoned)
                    } else {
                        let started = std::time::Instant::now();
                        let result = sync();
                        metrics.record(waiting.len(), started.elapsed());
                        result.map_err(|e| {
                            tracing::error!(error = %e, "fdatasync failed: poisoning storage, the node stops accepting writes");
                            flag.store(true, Ordering::Release);
                            StorageError::Engine(e)
                        })
                    };
                    for callback in waiting.drain(..) {
                        let outcome = match &result {
                            Ok(()) => Ok(()),
                            Err(_) => Err(StorageError::Poisoned),
                        };
                        callback(outcome);
                    }
                }
            });
        if let Err(e) = spawned {
            // Without the thread nothing can become durable: refuse every write.
            tracing::error!(error = %e, "cannot start the group-commit thread");
            poisoned.store(true, Ordering::Release);
        }
        Self { tx, poisoned }
    }

    /// Queues `callback` behind the next sync.
    pub(crate) fn sync(&self, callback: SyncCallback) {
        if self.poisoned.load(Ordering::Acquire) {
            callback(Err(StorageError::Poisoned));
            return;
        }
        if let Err(mpsc::SendError(callback)) = self.tx.send(callback) {
            callback(Err(StorageError::Closed));
        }
    }
}
