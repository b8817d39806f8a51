//! Waiting for keys to change: the registry behind Consul's blocking queries.
//!
//! A blocking query registers a [`Watch`] on a key or a key prefix, reads, and if the answer
//! has not moved past the index its client already has, waits on the watch. Every applied
//! batch wakes the watches whose key or prefix it touched, after the batch is written; events
//! that touch a whole shard at once (a split, a snapshot install, a replica dropped) wake
//! every watch. A watch that is woken needs no other bookkeeping: the waiter reads again and
//! decides. Nothing here polls, and a waiter is a future holding one [`Notify`], not a thread.
//!
//! Registration happens before the read it guards, so a change that lands between the read
//! and the wait is not lost: [`Notify`] keeps the wake-up until the waiter awaits it.

use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use tokio::sync::Notify;

/// What a watch waits on.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum WatchTarget {
    /// One key.
    Key(Bytes),
    /// Every key starting with these bytes (the empty prefix: every key).
    Prefix(Bytes),
}

type Waiters = Vec<(u64, Arc<Notify>)>;

#[derive(Default)]
struct Registry {
    next_id: u64,
    keys: HashMap<Bytes, Waiters>,
    prefixes: HashMap<Bytes, Waiters>,
    /// How many distinct watched prefixes have each length: a changed key is looked up once
    /// per length present, not once per byte of its length.
    prefix_lengths: BTreeMap<usize, usize>,
}

/// Every watch registered on one node.
#[derive(Default)]
pub struct Watchers {
    registry: Mutex<Registry>,
    /// Watches registered; when 0 an applied batch skips the registry without locking it.
    active: AtomicUsize,
}

impl std::fmt::Debug for Watchers {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watchers")
            .field("active", &self.len())
            .finish()
    }
}

/// One registered wait; deregistered when dropped (a client that hangs up frees it at once).
pub struct Watch {
    watchers: Arc<Watchers>,
    id: u64,
    target: WatchTarget,
    notify: Arc<Notify>,
}

impl Watch {
    /// Completes once a change to the target was applied here since the watch was registered
    /// (or since the last time this completed).
    pub async fn changed(&self) {
        self.notify.notified().await;
    }
}

impl Drop for Watch {
    fn drop(&mut self) {
        self.watchers.remove(self.id, &self.target);
    }
}

impl Watchers {
    fn lock(&self) -> MutexGuard<'_, Registry> {
        // Every change to the registry completes under the lock; a panicking holder leaves
        // nothing half done.
        self.registry
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Registers a watch on `target`.
    pub fn watch(self: &Arc<Self>, target: WatchTarget) -> Watch {
        let notify = Arc::new(Notify::new());
        let mut registry = self.lock();
        registry.next_id += 1;
        let id = registry.next_id;
        match &target {
            WatchTarget::Key(key) => registry
                .keys
                .entry(key.clone())
                .or_default()
                .push((id, notify.clone())),
            WatchTarget::Prefix(prefix) => {
                let waiters = registry.prefixes.entry(prefix.clone()).or_default();
                waiters.push((id, notify.clone()));
                if waiters.len() == 1 {
                    *registry.prefix_lengths.entry(prefix.len()).or_default() += 1;
                }
            }
        }
        self.active.fetch_add(1, Ordering::Release);
        Watch {
            watchers: self.clone(),
            id,
            target,
            notify,
        }
    }

    fn remove(&self, id: u64, target: &WatchTarget) {
        let mut registry = self.lock();
        let registry = &mut *registry;
        match target {
            WatchTarget::Key(key) => {
                if let Some(waiters) = registry.keys.get_mut(key) {
                    waiters.retain(|(i, _)| *i != id);
                    if waiters.is_empty() {
                        registry.keys.remove(key);
                    }
                }
            }
            WatchTarget::Prefix(prefix) => {
                if let Some(waiters) = registry.prefixes.get_mut(prefix) {
                    waiters.retain(|(i, _)| *i != id);
                    if waiters.is_empty() {
                        registry.prefixes.remove(prefix);
                        if let Some(n) = registry.prefix_lengths.get_mut(&prefix.len()) {
                            *n -= 1;
                            if *n == 0 {
                                registry.prefix_lengths.remove(&prefix.len());
                            }
                        }
                    }
                }
            }
        }
        self.active.fetch_sub(1, Ordering::Release);
    }

    /// How many watches are registered (blocking queries waiting on this node).
    pub fn len(&self) -> usize {
        self.active.load(Ordering::Acquire)
    }

    /// Whether no watch is registered.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Wakes the watches on any of `keys` or on a prefix of one of them.
    pub(crate) fn keys_changed<'k>(&self, keys: impl IntoIterator<Item = &'k [u8]>) {
        if self.is_empty() {
            return;
        }
        let registry = self.lock();
        for key in keys {
            if let Some(waiters) = registry.keys.get(key) {
                waiters.iter().for_each(|(_, n)| n.notify_one());
            }
            for &len in registry.prefix_lengths.keys() {
                if len > key.len() {
                    break;
                }
                if let Some(waiters) = registry.prefixes.get(&key[..len]) {
                    waiters.iter().for_each(|(_, n)| n.notify_one());
                }
            }
        }
    }

    /// Wakes every watch: a change whose keys are not listed (a split, an install).
    pub(crate) fn everything_changed(&self) {
        if self.is_empty() {
            return;
        }
        let registry = self.lock();
        for waiters in registry.keys.values().chain(registry.prefixes.values()) {
            waiters.iter().for_each(|(_, n)| n.notify_one());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::Duration;

    async fn woken(watch: &Watch) -> bool {
        tokio::time::timeout(Duration::from_millis(20), watch.changed())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn a_change_wakes_the_watches_on_its_key_and_its_prefixes_only() {
        let watchers = Arc::new(Watchers::default());
        let key = watchers.watch(WatchTarget::Key(Bytes::from_static(b"app/a")));
        let other = watchers.watch(WatchTarget::Key(Bytes::from_static(b"app/b")));
        let prefix = watchers.watch(WatchTarget::Prefix(Bytes::from_static(b"app/")));
        let everything = watchers.watch(WatchTarget::Prefix(Bytes::new()));
        let elsewhere = watchers.watch(WatchTarget::Prefix(Bytes::from_static(b"web/")));
        let longer = watchers.watch(WatchTarget::Prefix(Bytes::from_static(b"app/a/b")));
        assert_eq!(watchers.len(), 6);

        // Woken before anyone waits: the wake-up is kept.
        watchers.keys_changed([&b"app/a"[..]]);
        assert!(woken(&key).await);
        assert!(woken(&prefix).await);
        assert!(woken(&everything).await);
        assert!(!woken(&other).await);
        assert!(!woken(&elsewhere).await);
        assert!(!woken(&longer).await, "a prefix longer than the key");
        // Consumed: no second wake-up without a second change.
        assert!(!woken(&key).await);

        watchers.everything_changed();
        for watch in [&key, &other, &prefix, &everything, &elsewhere, &longer] {
            assert!(woken(watch).await);
        }
    }

    #[tokio::test]
    async fn dropped_watches_leave_the_registry() {
        let watchers = Arc::new(Watchers::default());
        let a = watchers.watch(WatchTarget::Prefix(Bytes::from_static(b"p")));
        let b = watchers.watch(WatchTarget::Prefix(Bytes::from_static(b"p")));
        let c = watchers.watch(WatchTarget::Key(Bytes::from_static(b"k")));
        drop(a);
        assert_eq!(watchers.lock().prefix_lengths.get(&1), Some(&1));
        drop(b);
        drop(c);
        assert!(watchers.is_empty());
        let registry = watchers.lock();
        assert!(registry.keys.is_empty() && registry.prefixes.is_empty());
        assert!(registry.prefix_lengths.is_empty());
    }
}
