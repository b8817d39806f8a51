//! What commands work with besides their arguments: the state of their connection
//! ([`ClientState`]) and the state every connection of the server shares ([`Shared`]). Kept
//! apart from `connection` and `server` so that `cmd` depends on neither.

use crate::metrics::RespMetrics;
use bytes::Bytes;
use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use trireme_cluster::Node;
use trireme_types::ShardId;

/// Most open `SCAN` cursors remembered; the oldest are forgotten first.
const MAX_CURSORS: usize = 10_000;

/// Per-connection state that commands can read and change.
#[derive(Clone)]
pub(crate) struct ClientState {
    pub(crate) id: u64,
    pub(crate) name: Option<bytes::Bytes>,
    /// RESP2 until the client sends `HELLO 3`.
    pub(crate) protocol: crate::Protocol,
    /// Commands queued since `MULTI`, if one is open.
    pub(crate) multi: Option<Multi>,
    /// Keys under `WATCH`, with the `ModifyIndex` each had then (`None`: missing).
    pub(crate) watches: Vec<(Bytes, Option<u64>)>,
    /// How reads are served: leader lease or ReadIndex by default; after `READONLY`, by any
    /// replica from what it has applied (Redis Cluster's replica reads, stale by design).
    pub(crate) read_mode: trireme_cluster::ReadMode,
    /// Pub/sub channels and patterns this connection listens to.
    pub(crate) subscriptions: Subscriptions,
    /// Turns true when the client hangs up while a blocking command waits: the command
    /// stops waiting and takes nothing more.
    pub(crate) hung_up: tokio::sync::watch::Receiver<bool>,
    /// The ACL secret this connection authenticated with (`AUTH`); `None`: anonymous.
    pub(crate) token: Option<Arc<str>>,
    /// Failed `AUTH` attempts so far: past a few, each failure is answered slowly.
    pub(crate) auth_failures: u32,
}

/// An open `MULTI`: the requests queued so far (`cmd::transaction` queues and runs them).
#[derive(Clone, Debug, Default)]
pub(crate) struct Multi {
    pub(crate) queued: Vec<Vec<Bytes>>,
    /// A queued command was refused: `EXEC` will discard the transaction.
    pub(crate) failed: bool,
    /// The slot every key so far is in.
    pub(crate) slot: Option<u16>,
    /// Bytes queued so far.
    pub(crate) bytes: usize,
}

/// A connection's pub/sub subscriptions, and where its messages are queued.
#[derive(Clone)]
pub(crate) struct Subscriptions {
    pub(crate) channels: std::collections::BTreeSet<Bytes>,
    pub(crate) patterns: std::collections::BTreeSet<Bytes>,
    pub(crate) inbox: crate::pubsub::Inbox,
}

impl Subscriptions {
    /// Channels and patterns together, as Redis counts them in confirmations.
    pub(crate) fn count(&self) -> usize {
        self.channels.len() + self.patterns.len()
    }
}

/// Where a `SCAN` cursor continues: the shard, and the last key returned in it.
pub(crate) type CursorPosition = (ShardId, Option<Bytes>);

/// State shared by every connection of the RESP server.
pub(crate) struct Shared {
    pub(crate) node: Arc<Node>,
    /// This node's pub/sub subscriptions.
    pub(crate) subscribers: Arc<crate::pubsub::Subscribers>,
    pub(crate) metrics: Arc<RespMetrics>,
    next_client_id: AtomicU64,
    cursors: Mutex<Cursors>,
}

#[derive(Default)]
struct Cursors {
    next: u64,
    positions: HashMap<u64, CursorPosition>,
    order: VecDeque<u64>,
}

impl Shared {
    /// The state of a new server of `node`, delivering pub/sub messages to `subscribers`.
    pub(crate) fn new(node: Arc<Node>, subscribers: Arc<crate::pubsub::Subscribers>) -> Self {
        Shared {
            node,
            subscribers,
            metrics: Arc::default(),
            next_client_id: AtomicU64::new(1),
            cursors: Mutex::default(),
        }
    }

    pub(crate) fn client_id(&self) -> u64 {
        self.next_client_id.fetch_add(1, Ordering::Relaxed)
    }

    /// Remembers where a scan stopped and returns the cursor number for it (never 0).
    pub(crate) fn save_cursor(&self, position: CursorPosition) -> u64 {
        let mut cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        cursors.next += 1;
        let id = cursors.next;
        cursors.positions.insert(id, position);
        cursors.order.push_back(id);
        while cursors.order.len() > MAX_CURSORS {
            if let Some(old) = cursors.order.pop_front() {
                cursors.positions.remove(&old);
            }
        }
        id
    }

    /// Where cursor `id` continues, if it is known.
    pub(crate) fn cursor(&self, id: u64) -> Option<CursorPosition> {
        let cursors = self.cursors.lock().unwrap_or_else(|e| e.into_inner());
        cursors.positions.get(&id).cloned()
    }
}
