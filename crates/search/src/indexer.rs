//! The search index of every shard replica on this node, kept by one thread from the changes
//! storage applies.
//!
//! Storage tells [`SearchIndexes`] of each applied batch of rows (see
//! [`ApplyObserver`]); the batch goes down a bounded channel to the indexer thread, which
//! indexes it and commits at most the commit interval ([`DEFAULT_COMMIT_INTERVAL`] unless
//! configured) after the first uncommitted change: searches see a write within about that
//! long (the default freshness). Each commit writes a segment that merges must later
//! rewrite, so a shorter interval costs throughput under writes: at 200 ms the production
//! mix ran about a sixth slower than at one second.
//! Each message of a shard is numbered; a search that must see every write applied before it
//! (`consistent`) takes the number sent last for its shard once the shard's read barrier has
//! passed, asks for a commit and waits until the commits have covered that number.
//!
//! When a shard's rows change wholesale (a snapshot installed, a split) and when a replica is
//! opened at start, its index is checked against the rows: documents whose `ModifyIndex`
//! differs are indexed again, documents whose rows are gone are removed. After a `kill -9`
//! the rows come back as of their last flush, behind what the index may have committed, and
//! the shard re-applies its log from there: documents the index holds at a `ModifyIndex`
//! past the rows' applied index are left as they are, and their re-applied changes are not
//! indexed a second time. So the check finds only the changes the index had not committed;
//! the rows are read, not indexed again.
//!
//! The applying threads never wait on the indexer for long: when its channel stays full for
//! [`FULL_CHANNEL_WAIT`] (the indexer busy with a long check, say), a shard's messages are
//! left out from there on and the shard is marked; once the indexer has taken every message
//! of the shard sent before the mark, it checks the shard against its rows, which covers
//! everything left out. That holds because a shard's changes come from one thread, in order
//! (its group applies one batch at a time): a change still in flight when the check starts is
//! taken after it, and any later change of the same keys after that. Other threads send only
//! requests for a check (a replica opened, a split's new shard), which carry no rows.

use crate::Query;
use crate::SearchError;
use crate::SortKey;
use crate::index::{Hits, Indexable, NodeIndex};
use bytes::Bytes;
use crossbeam_channel::{Receiver, RecvTimeoutError, SendTimeoutError, Sender};
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock};
use std::time::{Duration, Instant};
use trireme_storage::{ApplyObserver, Storage};
use trireme_types::histogram::LatencyHistogram;
use trireme_types::session::is_internal_key;
use trireme_types::{Record, ShardId, ValueKind, key_slot};

/// The longest a change waits, once indexed, before a commit makes it searchable, unless the
/// node is configured otherwise (as Elasticsearch's default refresh interval).
pub const DEFAULT_COMMIT_INTERVAL: Duration = Duration::from_secs(1);

/// Batches the indexer may hold before an applying thread waits for it.
const CHANNEL_BATCHES: usize = 4_096;

/// The longest an applying thread waits for room in a full channel before it leaves the
/// shard's messages out and marks the shard to be checked against its rows instead. Long
/// enough that a commit or a merge does not set off a check; short enough that a long check
/// holds up an applied batch for no longer than this (a split, which tells of two shards,
/// twice this).
pub const FULL_CHANNEL_WAIT: Duration = Duration::from_millis(250);

/// The pause between tries of a check that keeps failing.
const RETRY_PAUSE: Duration = Duration::from_secs(1);

/// What the indexer thread is told.
enum Message {
    Changes {
        shard: ShardId,
        seq: u64,
        index: u64,
        changes: Vec<(Bytes, Option<Record>)>,
    },
    Replaced {
        shard: ShardId,
        seq: u64,
    },
    Dropped {
        shard: ShardId,
        seq: u64,
    },
    CommitNow,
}

impl Message {
    /// The shard the message is about, if any.
    fn shard(&self) -> Option<ShardId> {
        match self {
            Message::Changes { shard, .. }
            | Message::Replaced { shard, .. }
            | Message::Dropped { shard, .. } => Some(*shard),
            Message::CommitNow => None,
        }
    }
}

/// What searches and metrics see of one shard's part of the index.
struct ShardState {
    /// Numbers handed to this shard's messages so far.
    sent: AtomicU64,
    /// The number of the last message a commit covers.
    committed: tokio::sync::watch::Sender<u64>,
    /// The last log index whose changes were sent, and the last one a commit covers.
    applied_index: AtomicU64,
    covered_index: AtomicU64,
    /// Messages being sent or sent down the channel that the indexer has not taken yet.
    queued: AtomicU64,
    /// Set when messages were left out because the channel was full; cleared by the indexer
    /// when it starts the check that covers them.
    marked: AtomicBool,
}

impl ShardState {
    fn new() -> Self {
        Self {
            sent: AtomicU64::new(0),
            committed: tokio::sync::watch::Sender::new(0),
            applied_index: AtomicU64::new(0),
            covered_index: AtomicU64::new(0),
            queued: AtomicU64::new(0),
            marked: AtomicBool::new(false),
        }
    }
}

/// One shard's part of the index as `/metrics` shows it.
#[derive(Debug, Clone)]
pub struct ShardIndexStats {
    pub shard: ShardId,
    /// Log entries applied to the shard here that no commit of the index covers yet.
    pub lag_entries: u64,
}

/// The indexes of every shard replica on this node.
pub struct SearchIndexes {
    dir: PathBuf,
    /// Weak: the storage holds this as its observer, and a cycle would keep both (and the
    /// database's lock) alive after the node is dropped.
    storage: std::sync::Weak<Storage>,
    shards: RwLock<HashMap<u32, Arc<ShardState>>>,
    /// The searchable side of the index, once the indexer thread has opened it.
    reader: RwLock<Option<crate::index::Searchable>>,
    /// Index bytes and live documents, as of the last commit.
    bytes: AtomicU64,
    docs: AtomicU64,
    sender: Mutex<Option<Sender<Message>>>,
    /// How long an applying thread waits for room in the channel: [`FULL_CHANNEL_WAIT`].
    full_wait: Duration,
    /// Set when some shard's messages were left out: the indexer then looks for shards to
    /// check.
    left_out: Arc<AtomicBool>,
    /// Set by a `consistent` search that needs a commit now; the indexer sees it even when
    /// the channel is too full to carry the request.
    commit_wanted: Arc<AtomicBool>,
    thread: Mutex<Option<std::thread::JoinHandle<()>>>,
    /// Time each shard search took here.
    pub latency: LatencyHistogram,
    /// Documents indexed (put or replaced) since start.
    pub indexed: AtomicU64,
    /// Times a shard's changes were left out because the indexer was behind, each covered
    /// by a check of the shard's rows.
    pub left_out_checks: AtomicU64,
}

impl std::fmt::Debug for SearchIndexes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SearchIndexes")
            .field("dir", &self.dir)
            .finish()
    }
}

impl SearchIndexes {
    /// Starts the indexer for the shards of `storage`, keeping indexes under `dir`, and
    /// installs it as `storage`'s observer. Shards are indexed as [`SearchIndexes::open_shard`]
    /// names them, and as their changes arrive.
    pub fn start(
        dir: &Path,
        storage: Arc<Storage>,
        commit_interval: Duration,
    ) -> Result<Arc<Self>, SearchError> {
        Self::start_with(
            dir,
            storage,
            commit_interval,
            CHANNEL_BATCHES,
            FULL_CHANNEL_WAIT,
        )
    }

    /// [`SearchIndexes::start`] with a channel of `batches` and `full_wait` (tests make both
    /// small).
    fn start_with(
        dir: &Path,
        storage: Arc<Storage>,
        commit_interval: Duration,
        batches: usize,
        full_wait: Duration,
    ) -> Result<Arc<Self>, SearchError> {
        std::fs::create_dir_all(dir).map_err(tantivy::TantivyError::from)?;
        let (sender, receiver) = crossbeam_channel::bounded(batches);
        let indexes = Arc::new(Self {
            dir: dir.to_path_buf(),
            storage: Arc::downgrade(&storage),
            shards: RwLock::default(),
            reader: RwLock::new(None),
            bytes: AtomicU64::new(0),
            docs: AtomicU64::new(0),
            sender: Mutex::new(Some(sender)),
            full_wait,
            left_out: Arc::default(),
            commit_wanted: Arc::default(),
            thread: Mutex::new(None),
            latency: LatencyHistogram::default(),
            indexed: AtomicU64::new(0),
            left_out_checks: AtomicU64::new(0),
        });
        let index = NodeIndex::open(dir)?;
        indexes.published(&index);
        let weak = Arc::downgrade(&indexes);
        let flags = Flags {
            commit_wanted: indexes.commit_wanted.clone(),
            left_out: indexes.left_out.clone(),
        };
        let thread = std::thread::Builder::new()
            .name("search-indexer".into())
            .spawn(move || Indexer::new(weak, index, commit_interval, flags).run(receiver))
            .map_err(tantivy::TantivyError::from)?;
        *indexes.thread.lock().unwrap_or_else(|e| e.into_inner()) = Some(thread);
        storage.set_observer(indexes.clone());
        Ok(indexes)
    }

    /// Stops the indexer thread after it has committed what it holds.
    pub fn stop(&self) {
        drop(self.sender.lock().unwrap_or_else(|e| e.into_inner()).take());
        if let Some(thread) = self.thread.lock().unwrap_or_else(|e| e.into_inner()).take() {
            let _ = thread.join();
        }
    }

    fn state(&self, shard: ShardId) -> Arc<ShardState> {
        if let Some(state) = self
            .shards
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .get(&shard.0)
        {
            return state.clone();
        }
        self.shards
            .write()
            .unwrap_or_else(|e| e.into_inner())
            .entry(shard.0)
            .or_insert_with(|| Arc::new(ShardState::new()))
            .clone()
    }

    /// The way to the indexer thread, unless it was stopped.
    fn sender(&self) -> Option<Sender<Message>> {
        self.sender
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
    }

    /// Numbers a message of `shard` and hands it to the indexer, waiting at most `full_wait`
    /// for room. A message that finds no room, and every later one of the shard until the
    /// indexer starts its check, is left out; the shard is marked for that check.
    fn deliver(&self, shard: ShardId, message: impl FnOnce(u64) -> Message) {
        let state = self.state(shard);
        // SeqCst: see `Indexer::check_left_out`.
        let seq = state.sent.fetch_add(1, Ordering::SeqCst) + 1;
        // A stopped indexer has nothing more to keep.
        let Some(sender) = self.sender() else {
            return;
        };
        if !state.marked.load(Ordering::SeqCst) {
            state.queued.fetch_add(1, Ordering::AcqRel);
            let sent = sender.send_timeout(message(seq), self.full_wait);
            if sent.is_err() {
                state.queued.fetch_sub(1, Ordering::AcqRel);
            }
            match sent {
                Ok(()) | Err(SendTimeoutError::Disconnected(_)) => return,
                Err(SendTimeoutError::Timeout(_)) => tracing::warn!(
                    shard = shard.0,
                    "search indexer is behind; the shard's changes will be indexed by a check of its rows"
                ),
            }
        }
        // The indexer may have cleared the mark since it was read: this marks the shard anew.
        state.marked.store(true, Ordering::SeqCst);
        self.left_out.store(true, Ordering::Release);
    }

    /// Opens (or creates) the index of this node's replica of `shard` and checks it against
    /// the shard's rows.
    pub fn open_shard(&self, shard: ShardId) {
        self.deliver(shard, |seq| Message::Replaced { shard, seq });
    }

    /// Waits until the index of `shard` covers every change applied here before this call.
    pub async fn wait_covered(&self, shard: ShardId, timeout: Duration) -> Result<(), SearchError> {
        let state = self.state(shard);
        let target = state.sent.load(Ordering::Acquire);
        let mut committed = state.committed.subscribe();
        if *committed.borrow() >= target {
            return Ok(());
        }
        // Never block a search's thread on a full channel: the flag is seen between messages,
        // the message only wakes an idle indexer.
        self.commit_wanted.store(true, Ordering::Release);
        if let Some(sender) = self.sender() {
            let _ = sender.try_send(Message::CommitNow);
        }
        let reached = tokio::time::timeout(timeout, committed.wait_for(|seen| *seen >= target));
        match reached.await {
            Ok(Ok(_)) => Ok(()),
            _ => Err(SearchError::Refused(format!(
                "the search index of shard {} did not catch up within {} ms; retry, or search without consistent",
                shard.0,
                timeout.as_millis()
            ))),
        }
    }

    /// Makes what `index` last committed the index searches read.
    fn published(&self, index: &NodeIndex) {
        *self.reader.write().unwrap_or_else(|e| e.into_inner()) = Some(index.searchable());
        let (bytes, docs) = index.usage();
        self.bytes.store(bytes, Ordering::Relaxed);
        self.docs.store(docs, Ordering::Relaxed);
    }

    /// The index's files' size in bytes and its live documents, as of the last commit.
    pub fn usage(&self) -> (u64, u64) {
        (
            self.bytes.load(Ordering::Relaxed),
            self.docs.load(Ordering::Relaxed),
        )
    }

    /// Searches this node's index of `shard`: see [`crate::index::Searchable::search`].
    pub fn search(
        &self,
        shard: ShardId,
        collection: &[u8],
        query: &Query,
        slots: Option<(u16, u16)>,
        want: usize,
        sort: &[SortKey],
    ) -> Result<Hits, SearchError> {
        let started = Instant::now();
        let reader = self
            .reader
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .clone()
            .ok_or(SearchError::NoIndex)?;
        let hits = reader.search(shard, collection, query, slots, want, sort);
        self.latency.record(started.elapsed());
        hits
    }

    /// Every shard index here, for `/metrics`.
    pub fn stats(&self) -> Vec<ShardIndexStats> {
        let shards = self.shards.read().unwrap_or_else(|e| e.into_inner());
        let mut out: Vec<ShardIndexStats> = shards
            .iter()
            .map(|(shard, state)| ShardIndexStats {
                shard: ShardId(*shard),
                lag_entries: state
                    .applied_index
                    .load(Ordering::Relaxed)
                    .saturating_sub(state.covered_index.load(Ordering::Relaxed)),
            })
            .collect();
        out.sort_by_key(|s| s.shard.0);
        out
    }
}

/// Whether a key may hold a document: `collection/key`, not one of the internal rows.
fn may_be_document(key: &[u8]) -> bool {
    key.contains(&b'/') && !is_internal_key(key)
}

/// The JSON object a stored record holds, if it holds one.
fn document_of(record: &Record) -> Option<serde_json::Map<String, serde_json::Value>> {
    if record.kind != ValueKind::String || record.value.trim_ascii_start().first() != Some(&b'{') {
        return None;
    }
    match serde_json::from_slice(&record.value) {
        Ok(serde_json::Value::Object(map)) => Some(map),
        _ => None,
    }
}

impl ApplyObserver for SearchIndexes {
    fn wants(&self, shard: ShardId, key: &[u8]) -> bool {
        shard.0 != u32::MAX && may_be_document(key)
    }

    fn applied(&self, shard: ShardId, index: u64, changes: Vec<(Bytes, Option<Record>)>) {
        self.state(shard)
            .applied_index
            .fetch_max(index, Ordering::SeqCst);
        self.deliver(shard, |seq| Message::Changes {
            shard,
            seq,
            index,
            changes,
        });
    }

    fn replaced(&self, shard: ShardId) {
        self.open_shard(shard);
    }

    fn dropped(&self, shard: ShardId) {
        // Left out, the check it leads to finds no rows and removes the shard's documents.
        self.deliver(shard, |seq| Message::Dropped { shard, seq });
    }
}

/// The indexer thread's own state: the writer, and what each shard has not had committed.
struct Indexer {
    owner: std::sync::Weak<SearchIndexes>,
    index: NodeIndex,
    commit_interval: Duration,
    flags: Flags,
    pending: HashMap<u32, Pending>,
    /// When the oldest change not yet committed came in.
    dirty_since: Option<Instant>,
    commit_asked: bool,
    /// Shards whose changes failed to index, to check against their rows again.
    needs_check: std::collections::HashSet<u32>,
    /// The shard the last check for left-out changes was of: the next goes to another.
    last_left_out_check: u32,
    /// When failed checks may be tried again.
    next_retry: Option<Instant>,
    /// Per shard, documents the index holds ahead of the rows it was last checked against
    /// (key → `ModifyIndex`), and the highest of those: their changes come again as the
    /// shard re-applies its log, and need not be indexed again.
    ahead: HashMap<u32, (HashMap<Vec<u8>, u64>, u64)>,
    /// Per shard, the rows' applied index at its last check: changes up to it, still queued
    /// when the check read the rows, are in what it read.
    checked: HashMap<u32, u64>,
}

/// Of the `marked` shards (number, whether ready), the ready one to check next: the first
/// after `last` in shard order, wrapping around.
fn next_in_turn(marked: &[(u32, bool)], last: u32) -> Option<u32> {
    marked
        .iter()
        .filter(|(_, ready)| *ready)
        .map(|(shard, _)| *shard)
        .min_by_key(|shard| (*shard <= last, *shard))
}

/// [`SearchIndexes`]'s flags, shared so that reading them costs no upgrade of the owner.
struct Flags {
    commit_wanted: Arc<AtomicBool>,
    left_out: Arc<AtomicBool>,
}

/// What the indexer took in for one shard since the last commit.
#[derive(Default)]
struct Pending {
    /// The number of the last message, and the log index it carried.
    seen_seq: u64,
    seen_index: u64,
}

impl Indexer {
    fn new(
        owner: std::sync::Weak<SearchIndexes>,
        index: NodeIndex,
        commit_interval: Duration,
        flags: Flags,
    ) -> Self {
        Self {
            owner,
            index,
            commit_interval,
            flags,
            pending: HashMap::new(),
            dirty_since: None,
            commit_asked: false,
            needs_check: std::collections::HashSet::new(),
            last_left_out_check: 0,
            next_retry: None,
            ahead: HashMap::new(),
            checked: HashMap::new(),
        }
    }

    fn run(mut self, receiver: Receiver<Message>) {
        loop {
            let wait = if self.flags.left_out.load(Ordering::Acquire) {
                // Shards still to check: take what is there and go on with them.
                Duration::ZERO
            } else {
                self.dirty_since
                    .map(|since| self.commit_interval.saturating_sub(since.elapsed()))
                    .unwrap_or(Duration::from_secs(1))
            };
            match receiver.recv_timeout(wait) {
                Ok(message) => {
                    self.take_guarded(message);
                    // Under a steady stream of changes the channel never empties: stop to
                    // commit when one is due.
                    while !self.commit_is_due() {
                        let Ok(message) = receiver.try_recv() else {
                            break;
                        };
                        self.take_guarded(message);
                    }
                }
                Err(RecvTimeoutError::Timeout) => {}
                Err(RecvTimeoutError::Disconnected) => {
                    self.commit_due(true);
                    return;
                }
            }
            if self.flags.left_out.swap(false, Ordering::AcqRel) {
                self.check_left_out();
            }
            if !self.needs_check.is_empty() && self.next_retry.is_none_or(|at| Instant::now() >= at)
            {
                self.retry_checks();
            }
            self.commit_due(false);
        }
    }

    /// [`Indexer::take`], surviving a panic in the index library: the thread goes on, and the
    /// shard is checked against its rows again.
    fn take_guarded(&mut self, message: Message) {
        // A dropped shard has nothing left to check.
        let shard = match &message {
            Message::Dropped { .. } => None,
            other => other.shard(),
        };
        let taken = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| self.take(message)));
        if taken.is_err() {
            tracing::error!(shard = ?shard, "search indexer panicked; the shard will be checked again");
            if let Some(shard) = shard {
                self.needs_check.insert(shard.0);
            }
        }
    }

    fn take(&mut self, message: Message) {
        let Some(owner) = self.owner.upgrade() else {
            return;
        };
        let shard = message.shard();
        if let Some(shard) = shard {
            owner.state(shard).queued.fetch_sub(1, Ordering::AcqRel);
        }
        let outcome = match message {
            Message::Changes {
                shard,
                seq,
                index,
                changes,
            } => self.index_changes(&owner, shard, seq, index, changes),
            Message::Replaced { shard, seq } => self.reconcile(&owner, shard, seq, 0),
            Message::Dropped { shard, seq } => {
                self.drop_shard(shard, seq);
                Ok(())
            }
            Message::CommitNow => {
                self.commit_asked = true;
                Ok(())
            }
        };
        if let Err(e) = outcome {
            // What the index holds of the shard is now in doubt: check it against the rows
            // again at the next tick (which also covers its message number).
            tracing::error!(error = %e, shard = ?shard, "search indexer; the shard will be checked again");
            if let Some(shard) = shard {
                self.needs_check.insert(shard.0);
            }
        }
    }

    /// Checks again the shards whose changes failed to index; if some fail again, not before
    /// [`RETRY_PAUSE`] has passed (each try reads the shard's rows).
    fn retry_checks(&mut self) {
        let Some(owner) = self.owner.upgrade() else {
            return;
        };
        self.next_retry = Some(Instant::now() + RETRY_PAUSE);
        for shard in std::mem::take(&mut self.needs_check) {
            let state = owner.state(ShardId(shard));
            if state.marked.load(Ordering::SeqCst) {
                // Its check for left-out changes waits for its queued ones and covers this.
                // (An unmarked shard is checked at once, even with changes still queued:
                // they land after the check and may show an older value until the next
                // commit, which is better than a busy shard never being repaired.)
                self.needs_check.insert(shard);
                continue;
            }
            let applied = state.applied_index.load(Ordering::Acquire);
            let seq = state.sent.load(Ordering::Acquire);
            self.check_guarded(&owner, ShardId(shard), seq, applied);
        }
    }

    /// [`Indexer::reconcile`], surviving a panic in the index library; a shard whose check
    /// failed is checked again at the next tick.
    fn check_guarded(&mut self, owner: &SearchIndexes, shard: ShardId, seq: u64, applied: u64) {
        let checked = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            self.reconcile(owner, shard, seq, applied)
        }));
        match checked {
            Ok(Ok(())) => {
                self.needs_check.remove(&shard.0);
            }
            Ok(Err(e)) => {
                tracing::error!(error = %e, shard = shard.0, "search index check failed; retrying");
                self.needs_check.insert(shard.0);
            }
            Err(_) => {
                tracing::error!(shard = shard.0, "search index check panicked; retrying");
                self.needs_check.insert(shard.0);
            }
        }
    }

    /// Checks one shard whose messages were left out, once every message of it sent before
    /// the mark has been taken: none of its changes can then land after the check (a
    /// `Replaced` from another thread still may, and it only asks for another check). One
    /// shard per call, so the channel is drained between checks and does not fill up again
    /// behind a run of them; in turns by shard number after the last one checked, so a busy
    /// shard marked again and again does not keep the others waiting.
    fn check_left_out(&mut self) {
        let Some(owner) = self.owner.upgrade() else {
            return;
        };
        let marked: Vec<(u32, Arc<ShardState>)> = owner
            .shards
            .read()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|(_, state)| state.marked.load(Ordering::SeqCst))
            .map(|(shard, state)| (*shard, state.clone()))
            .collect();
        let readiness: Vec<(u32, bool)> = marked
            .iter()
            .map(|(shard, state)| (*shard, state.queued.load(Ordering::Acquire) == 0))
            .collect();
        let next = next_in_turn(&readiness, self.last_left_out_check);
        if marked.len() > usize::from(next.is_some()) {
            // Left for a later turn of the loop.
            self.flags.left_out.store(true, Ordering::Release);
        }
        let Some((shard, state)) = next.and_then(|n| marked.iter().find(|(s, _)| *s == n)) else {
            return;
        };
        self.last_left_out_check = *shard;
        // Cleared before the rows are read: a change applied from here on is sent again
        // (and taken after the check), one applied before is in the rows the check reads.
        // SeqCst with the applier's numbering and reading of the mark (see `deliver`): each
        // side sees the other's write, so a change is either sent or numbered in time for
        // the check to cover it.
        state.marked.store(false, Ordering::SeqCst);
        owner.left_out_checks.fetch_add(1, Ordering::Relaxed);
        let applied = state.applied_index.load(Ordering::SeqCst);
        let seq = state.sent.load(Ordering::SeqCst);
        self.check_guarded(&owner, ShardId(*shard), seq, applied);
    }

    /// Notes that `shard`'s message `seq` (log index `index`) is taken in.
    fn took(&mut self, shard: ShardId, seq: u64, index: u64) {
        let pending = self.pending.entry(shard.0).or_default();
        pending.seen_seq = pending.seen_seq.max(seq);
        pending.seen_index = pending.seen_index.max(index);
        self.dirty_since.get_or_insert_with(Instant::now);
    }

    fn index_changes(
        &mut self,
        owner: &SearchIndexes,
        shard: ShardId,
        seq: u64,
        index: u64,
        changes: Vec<(Bytes, Option<Record>)>,
    ) -> Result<(), SearchError> {
        if self
            .checked
            .get(&shard.0)
            .is_some_and(|&checked| index <= checked)
        {
            self.took(shard, seq, index);
            return Ok(());
        }
        let mut ahead = self.ahead.remove(&shard.0);
        for (key, record) in changes {
            let known = ahead.as_mut().and_then(|(docs, _)| docs.remove(&key[..]));
            if known.is_some() && known == record.as_ref().map(|r| r.modify_index) {
                // Re-applied after a crash: the index has it already.
                continue;
            }
            match record.as_ref().and_then(|r| document_of(r).map(|d| (r, d))) {
                Some((record, object)) => {
                    self.index.put(Indexable {
                        shard,
                        key: &key,
                        slot: key_slot(&key),
                        modify_index: record.modify_index,
                        object,
                    })?;
                    owner.indexed.fetch_add(1, Ordering::Relaxed);
                }
                None => self.index.remove(&key),
            }
        }
        if let Some((docs, highest)) = ahead
            && index < highest
            && !docs.is_empty()
        {
            self.ahead.insert(shard.0, (docs, highest));
        }
        self.took(shard, seq, index);
        Ok(())
    }

    /// Brings the index of `shard` in line with its rows: see the module's documentation.
    /// The check covers messages up to `seq` and, when it stands in for changes left out,
    /// the log up to `applied`.
    fn reconcile(
        &mut self,
        owner: &SearchIndexes,
        shard: ShardId,
        seq: u64,
        applied: u64,
    ) -> Result<(), SearchError> {
        // What the index holds is read from its last commit.
        self.commit_now(owner)?;
        let mut indexed: HashMap<Vec<u8>, u64> = self.index.indexed(shard)?.into_iter().collect();
        let Some(storage) = owner.storage.upgrade() else {
            // The node is going away: nothing to check.
            return Ok(());
        };
        let view = storage.shard_view(shard);
        // Documents indexed past the rows' applied index come from entries the shard is
        // about to re-apply (it crashed before its rows were flushed): left alone.
        let rows_applied = view.applied_index()?;
        self.checked.insert(shard.0, rows_applied);
        let ahead: HashMap<Vec<u8>, u64> = indexed
            .iter()
            .filter(|(_, modify)| **modify > rows_applied)
            .map(|(key, modify)| (key.clone(), *modify))
            .collect();
        indexed.retain(|key, _| !ahead.contains_key(key));
        let mut failure = None;
        let mut reindexed = 0u64;
        let index = &mut self.index;
        view.for_each_record(|key, value| {
            if failure.is_some() || !may_be_document(key) || ahead.contains_key(key) {
                return;
            }
            let Ok(record) = Record::decode(value) else {
                return;
            };
            let was = indexed.remove(key);
            match document_of(&record) {
                Some(object) if was != Some(record.modify_index) => {
                    if let Err(e) = index.put(Indexable {
                        shard,
                        key,
                        slot: key_slot(key),
                        modify_index: record.modify_index,
                        object,
                    }) {
                        failure = Some(e);
                    }
                    reindexed += 1;
                }
                Some(_) => {}
                None if was.is_some() => index.remove(key),
                None => {}
            }
        })?;
        if let Some(e) = failure {
            return Err(e);
        }
        for key in indexed.keys() {
            self.index.remove(key);
        }
        owner.indexed.fetch_add(reindexed, Ordering::Relaxed);
        if reindexed > 0 || !indexed.is_empty() || !ahead.is_empty() {
            tracing::info!(
                shard = shard.0,
                reindexed,
                removed = indexed.len(),
                ahead = ahead.len(),
                "search index checked against the shard's rows"
            );
        }
        match ahead.values().max().copied() {
            Some(highest) => {
                self.ahead.insert(shard.0, (ahead, highest));
            }
            None => {
                self.ahead.remove(&shard.0);
            }
        }
        self.took(shard, seq, applied);
        self.commit_asked = true;
        Ok(())
    }

    /// Removes the documents of a shard this node no longer holds. Its numbering state is
    /// kept: a replica added back later continues it, so no old number can pass for a new one.
    fn drop_shard(&mut self, shard: ShardId, seq: u64) {
        self.index.remove_shard(shard);
        self.needs_check.remove(&shard.0);
        self.ahead.remove(&shard.0);
        self.checked.remove(&shard.0);
        self.took(shard, seq, 0);
    }

    /// Whether a commit is due: the oldest uncommitted change has waited its interval, or a
    /// commit was asked for.
    fn commit_is_due(&mut self) -> bool {
        if self.flags.commit_wanted.swap(false, Ordering::AcqRel) {
            self.commit_asked = true;
        }
        self.dirty_since
            .is_some_and(|since| self.commit_asked || since.elapsed() >= self.commit_interval)
    }

    /// Commits when one is due (or whatever is pending, when `all`).
    fn commit_due(&mut self, all: bool) {
        if self.dirty_since.is_none() || !(all || self.commit_is_due()) {
            return;
        }
        let Some(owner) = self.owner.upgrade() else {
            return;
        };
        if let Err(e) = self.commit_now(&owner) {
            tracing::error!(error = %e, "search index commit");
        }
    }

    /// Commits, and tells each shard's waiters what the commit covers.
    fn commit_now(&mut self, owner: &SearchIndexes) -> Result<(), SearchError> {
        if self.dirty_since.is_none() {
            return Ok(());
        }
        self.index.commit()?;
        self.dirty_since = None;
        self.commit_asked = false;
        owner.published(&self.index);
        for (shard, pending) in self.pending.drain() {
            let state = owner.state(ShardId(shard));
            state
                .covered_index
                .fetch_max(pending.seen_index, Ordering::Relaxed);
            // Only ever up: numbers of one shard may arrive out of order (a split's first
            // check and the new group's own changes).
            state.committed.send_if_modified(|committed| {
                let raised = pending.seen_seq > *committed;
                *committed = (*committed).max(pending.seen_seq);
                raised
            });
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use trireme_storage::{ApplyEntry, StorageOptions};
    use trireme_types::{Command, LogCommand, PutCondition, TtlUpdate};

    /// Writes `value` under `key` in shard 0 as the entry at `index`, as a group applies it.
    fn put(storage: &Storage, index: u64, key: &str, value: &str) {
        let entry = LogCommand {
            now_ms: 1,
            command: Command::Put {
                key: Bytes::copy_from_slice(key.as_bytes()),
                value: Bytes::copy_from_slice(value.as_bytes()),
                flags: None,
                condition: PutCondition::Always,
                ttl: TtlUpdate::Clear,
                return_previous: false,
            },
        };
        let entries = [ApplyEntry {
            index,
            command: Some(&entry),
        }];
        storage.apply(ShardId(0), &entries, &[]).unwrap();
    }

    #[test]
    fn marked_shards_are_checked_in_turn() {
        let marked = [(7, true), (2, true), (5, false), (9, true)];
        assert_eq!(next_in_turn(&marked, 0), Some(2));
        assert_eq!(next_in_turn(&marked, 2), Some(7), "5 is not ready");
        assert_eq!(next_in_turn(&marked, 7), Some(9));
        assert_eq!(next_in_turn(&marked, 9), Some(2), "around again");
        assert_eq!(next_in_turn(&[(3, true)], 3), Some(3), "alone, again");
        assert_eq!(next_in_turn(&[(3, false)], 0), None);
    }

    fn search_total(indexes: &SearchIndexes, query: &str) -> u64 {
        let query = crate::parse(query).unwrap();
        indexes
            .search(ShardId(0), b"c", &query, None, 100, &[])
            .unwrap()
            .total
    }

    /// An indexer held up (here in the commit that ends a shard's check) must not hold up
    /// the applying thread: once the channel is full, the shard's changes are left out, and
    /// the check that follows indexes every one of them. Commits are due at once, so the
    /// indexer looks for shards to check between any two messages, with the two queued
    /// before the mark still to take: the check must wait for them.
    #[test]
    fn applies_go_on_while_the_indexer_is_held_and_a_check_covers_what_was_left_out() {
        let dir = tempfile::tempdir().unwrap();
        let storage = Storage::open(&dir.path().join("data"), &StorageOptions::default()).unwrap();
        let indexes = SearchIndexes::start_with(
            &dir.path().join("search"),
            storage.clone(),
            Duration::ZERO,
            2,
            Duration::from_millis(20),
        )
        .unwrap();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_time()
            .build()
            .unwrap();
        // The indexer publishes each commit under this lock: holding it stops the indexer
        // in the commit that ends the check at opening, the first message it takes.
        let held = indexes.reader.read().unwrap();
        indexes.open_shard(ShardId(0));
        let state = indexes.state(ShardId(0));
        while state.queued.load(Ordering::Acquire) > 0 {
            std::thread::yield_now();
        }

        let (done, finished) = std::sync::mpsc::channel();
        let writer = {
            let storage = storage.clone();
            std::thread::spawn(move || {
                for i in 1..=40u64 {
                    put(&storage, i, &format!("c/{i}"), &format!(r#"{{"n":{i}}}"#));
                }
                // Two keys written again: the check must index their newest values, not
                // the ones still queued before the mark.
                put(&storage, 41, "c/1", r#"{"n":101}"#);
                put(&storage, 42, "c/2", r#"{"n":102}"#);
                let _ = done.send(());
            })
        };
        let applied = finished.recv_timeout(Duration::from_secs(60));
        drop(held);
        assert!(applied.is_ok(), "the applies waited for the held indexer");
        writer.join().unwrap();

        runtime
            .block_on(indexes.wait_covered(ShardId(0), Duration::from_secs(60)))
            .unwrap();
        let checks = indexes.left_out_checks.load(Ordering::Relaxed);
        assert!(checks >= 1);
        assert_eq!(search_total(&indexes, "*"), 40);
        assert_eq!(search_total(&indexes, "n:[38 TO 40]"), 3);
        assert_eq!(search_total(&indexes, "n:1 OR n:2"), 0);
        assert_eq!(search_total(&indexes, "n:101 OR n:102"), 2);
        let lag: Vec<u64> = indexes.stats().iter().map(|s| s.lag_entries).collect();
        assert_eq!(lag, [0], "the check covers the log it stood in for");

        // After the check, changes are sent and indexed one by one again.
        put(&storage, 43, "c/3", r#"{"n":100}"#);
        runtime
            .block_on(indexes.wait_covered(ShardId(0), Duration::from_secs(60)))
            .unwrap();
        assert_eq!(search_total(&indexes, "n:100"), 1);
        assert_eq!(indexes.left_out_checks.load(Ordering::Relaxed), checks);
        // Nothing queued before the mark landed after the check (its covering number is
        // past theirs, so only a later commit shows them).
        assert_eq!(search_total(&indexes, "n:1 OR n:2"), 0);
        assert_eq!(search_total(&indexes, "n:101 OR n:102"), 2);
        indexes.stop();
    }
}
