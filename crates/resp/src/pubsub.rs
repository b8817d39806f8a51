//! This node's subscribers: who listens to which channel or pattern, and the hand-off of
//! messages to their connections. Messages published on other nodes arrive through the
//! cluster ([`trireme_cluster::MessageSink`]); what is published here goes to every node.
//!
//! Each subscribed connection has a bounded queue (`[limits] pubsub_buffer_bytes` of
//! messages, 32 MiB by default, and at most [`QUEUE_MESSAGES`] of them). A subscriber that does not read falls behind until its queue
//! is full; it is then dropped from every channel and its connection closed, as Redis closes
//! a client past its pub/sub output buffer limit (32 MiB by default), so a slow reader costs
//! bounded memory and never holds up a publisher.

use bytes::Bytes;
use std::collections::{BTreeMap, HashMap};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use tokio::sync::mpsc;

/// Messages queued for one subscribed connection before it counts as too slow.
pub(crate) const QUEUE_MESSAGES: usize = 65_536;

/// A message on its way to one connection.
#[derive(Debug, Clone)]
pub(crate) struct Delivery {
    /// The pattern it matched (`pmessage`), or `None` for a channel subscription (`message`).
    pub(crate) pattern: Option<Bytes>,
    pub(crate) channel: Bytes,
    pub(crate) message: Bytes,
}

/// One connection's end: where its messages go, and the wake-up that closes it when it
/// fell behind.
#[derive(Debug, Clone)]
pub(crate) struct Inbox {
    pub(crate) sender: mpsc::Sender<Delivery>,
    /// Bytes of messages queued and not yet taken by the connection.
    pub(crate) queued_bytes: Arc<AtomicUsize>,
    /// Wakes the connection to close it once it fell behind.
    pub(crate) kicked: Arc<tokio::sync::Notify>,
}

impl Delivery {
    /// What the message costs in a queue.
    pub(crate) fn size(&self) -> usize {
        self.channel.len() + self.message.len() + self.pattern.as_ref().map_or(0, Bytes::len)
    }
}

/// Every subscription on this node.
#[derive(Default)]
pub(crate) struct Subscribers {
    inner: Mutex<Registry>,
    /// Bytes queued for one connection before it counts as too slow.
    limit_bytes: usize,
}

#[derive(Default)]
struct Registry {
    /// Channel → subscribed connections (by client id).
    channels: HashMap<Bytes, BTreeMap<u64, Inbox>>,
    /// Pattern → subscribed connections.
    patterns: HashMap<Bytes, BTreeMap<u64, Inbox>>,
}

impl Subscribers {
    /// No subscriptions yet; a subscriber falls behind past `limit_bytes` queued.
    pub(crate) fn new(limit_bytes: usize) -> Self {
        Self {
            inner: Mutex::default(),
            limit_bytes,
        }
    }

    fn registry(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.inner.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// Subscribes client `id` to `channel` (or, with `pattern`, to a glob pattern).
    pub(crate) fn subscribe(&self, id: u64, name: Bytes, pattern: bool, inbox: &Inbox) {
        let mut registry = self.registry();
        let map = if pattern {
            &mut registry.patterns
        } else {
            &mut registry.channels
        };
        map.entry(name).or_default().insert(id, inbox.clone());
    }

    /// Unsubscribes client `id` from `name`.
    pub(crate) fn unsubscribe(&self, id: u64, name: &Bytes, pattern: bool) {
        let mut registry = self.registry();
        let map = if pattern {
            &mut registry.patterns
        } else {
            &mut registry.channels
        };
        if let Some(subscribers) = map.get_mut(name) {
            subscribers.remove(&id);
            if subscribers.is_empty() {
                map.remove(name);
            }
        }
    }

    /// Forgets every subscription of client `id` (its connection closed or fell behind).
    pub(crate) fn forget(&self, id: u64) {
        let mut guard = self.registry();
        let registry = &mut *guard;
        for map in [&mut registry.channels, &mut registry.patterns] {
            map.retain(|_, subscribers| {
                subscribers.remove(&id);
                !subscribers.is_empty()
            });
        }
    }

    /// Channels with at least one subscriber here, matching `pattern` if given.
    pub(crate) fn channels(&self, pattern: Option<&[u8]>) -> Vec<Bytes> {
        let mut names: Vec<Bytes> = self
            .registry()
            .channels
            .keys()
            .filter(|c| pattern.is_none_or(|p| crate::glob::matches(p, c)))
            .cloned()
            .collect();
        names.sort();
        names
    }

    /// Subscribers of `channel` here (not counting patterns), as `PUBSUB NUMSUB` answers.
    pub(crate) fn count(&self, channel: &Bytes) -> usize {
        self.registry()
            .channels
            .get(channel)
            .map_or(0, BTreeMap::len)
    }

    /// Patterns subscribed here, as `PUBSUB NUMPAT` answers.
    pub(crate) fn pattern_count(&self) -> usize {
        self.registry().patterns.len()
    }
}

impl trireme_cluster::MessageSink for Subscribers {
    fn deliver(&self, channel: &Bytes, message: &Bytes) -> u64 {
        let mut delivered = 0;
        let mut fallen_behind = Vec::new();
        {
            let registry = self.registry();
            let direct = registry
                .channels
                .get(channel)
                .into_iter()
                .flatten()
                .map(|(id, inbox)| (id, inbox, None));
            let matched = registry
                .patterns
                .iter()
                .filter(|(pattern, _)| crate::glob::matches(pattern, channel))
                .flat_map(|(pattern, subscribers)| {
                    subscribers
                        .iter()
                        .map(move |(id, inbox)| (id, inbox, Some(pattern.clone())))
                });
            for (id, inbox, pattern) in direct.chain(matched) {
                let delivery = Delivery {
                    pattern,
                    channel: channel.clone(),
                    message: message.clone(),
                };
                let size = delivery.size();
                if inbox.queued_bytes.fetch_add(size, Ordering::SeqCst) + size > self.limit_bytes {
                    inbox.kicked.notify_one();
                    fallen_behind.push(*id);
                    continue;
                }
                match inbox.sender.try_send(delivery) {
                    Ok(()) => delivered += 1,
                    Err(mpsc::error::TrySendError::Full(_)) => {
                        inbox.kicked.notify_one();
                        fallen_behind.push(*id);
                    }
                    // The connection is gone; its subscriptions go when it is dropped.
                    Err(mpsc::error::TrySendError::Closed(_)) => {}
                }
            }
        }
        for id in fallen_behind {
            tracing::info!(
                client = id,
                limit_bytes = self.limit_bytes,
                "a subscriber fell behind; its connection is closed"
            );
            self.forget(id);
        }
        delivered
    }
}
