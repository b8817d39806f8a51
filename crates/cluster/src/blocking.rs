//! Consul's blocking queries: a read that, given the index its client already has, waits
//! until its answer may have changed before it answers.
//!
//! The loop: register a watch on the key or prefix with this node's storage, read as usual
//! (through the shard's leader), and answer if the index passed the client's or the wait is
//! over. Otherwise wait until something the answer depends on changes: on shards with a
//! replica here, the watch registered before the read is woken by this replica's apply; on the
//! others, a node holding a replica is asked to wait there (the same watch, then a look at its
//! own rows in case the change already arrived), for at most [`REMOTE_ROUND`] at a time. Then
//! read again. A waiter is a future and a registry entry, never a thread or a poll, and it is
//! gone as soon as the request is dropped (a client that hangs up).

use crate::ClusterError;
use crate::ListOutcome;
use crate::Node;
use crate::ReadMeta;
use crate::SortedSetOutcome;
use crate::router::ShardIndex;
use bytes::Bytes;
use futures::FutureExt;
use std::ops::Bound;
use std::time::Duration;
use tokio::time::Instant;
use trireme_raft::ReadMode;
use trireme_storage::{Watch, WatchTarget};
use trireme_types::{ListAnswer, ListOp, NodeId, Record, ShardId, SortedSetAnswer, SortedSetOp};

/// Longest wait a node asks of another at once (a request whose client hung up cancels its
/// wait on the other node; should the cancel be lost, the waiter lingers at most this long).
const REMOTE_ROUND: Duration = Duration::from_secs(60);

/// Time added to a remote wait's own limit for the answer to travel back.
const REMOTE_MARGIN: Duration = Duration::from_secs(5);

/// Shortest pause between two reads of one blocking query whose wait ended without its answer
/// changing (a replica that has rows the leader's answer no longer counts, until it applies a
/// split): it doubles up to [`MAX_REREAD_PAUSE`], so such a query never spins.
const MIN_REREAD_PAUSE: Duration = Duration::from_millis(5);
const MAX_REREAD_PAUSE: Duration = Duration::from_millis(500);

/// What a blocking query waits for: an index past `min_index`, for at most `wait`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Blocking {
    /// The index the client has (`?index=`); the answer comes once the query's index is
    /// greater, or when `wait` is over.
    pub min_index: u64,
    /// How long to hold the request at most.
    pub wait: Duration,
}

impl Node {
    /// Reads one key once its index passes `block.min_index`, or after `block.wait`.
    pub async fn get_blocking(
        &self,
        key: &[u8],
        mode: ReadMode,
        block: Blocking,
    ) -> Result<(Option<Record>, ReadMeta), ClusterError> {
        let target = WatchTarget::Key(Bytes::copy_from_slice(key));
        self.block_on(target, block, || self.get_indexed(key, mode))
            .await
    }

    /// Read-your-writes for a stale read of `key`: waits, at most `limit`, until this node's
    /// replica of the key's shard has applied `index` (the `X-Consul-Index` a write of the
    /// shard answered). `false` when there is no replica here that may serve a stale read,
    /// or it did not get there in time: the read should then go to the leader, which has.
    pub async fn await_applied_for_key(&self, key: &[u8], index: u64, limit: Duration) -> bool {
        let shard = self.shard_of(key);
        let Some(group) = self.group(shard) else {
            return false;
        };
        if !self.may_serve(shard, &group, true) {
            return false;
        }
        group
            .await_applied_beyond(index.saturating_sub(1), limit)
            .await;
        group.leader_and_applied().1 >= index
    }

    /// Lists the keys under `prefix` once the listing's index passes `block.min_index`, or
    /// after `block.wait`.
    pub async fn list_blocking(
        &self,
        prefix: &[u8],
        mode: ReadMode,
        block: Blocking,
    ) -> Result<(Vec<(Bytes, Record)>, ReadMeta), ClusterError> {
        self.check_key(prefix)?;
        let target = WatchTarget::Prefix(Bytes::copy_from_slice(prefix));
        self.block_on(target, block, || {
            self.list_indexed(prefix, Bound::Unbounded, mode, usize::MAX)
        })
        .await
    }

    /// `read` once, or with `block`, as [`Node::block_on`] does.
    pub(crate) async fn read_or_block<T, F, Fut>(
        &self,
        target: WatchTarget,
        block: Option<Blocking>,
        read: F,
    ) -> Result<(T, ReadMeta), ClusterError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(T, ReadMeta, Vec<ShardIndex>), ClusterError>>,
    {
        match block {
            Some(block) => self.block_on(target, block, read).await,
            None => read().await.map(|(answer, meta, _)| (answer, meta)),
        }
    }

    /// Answers with `read` once its index passes `block.min_index`, or after `block.wait`.
    pub(crate) async fn block_on<T, F, Fut>(
        &self,
        target: WatchTarget,
        block: Blocking,
        read: F,
    ) -> Result<(T, ReadMeta), ClusterError>
    where
        F: Fn() -> Fut,
        Fut: Future<Output = Result<(T, ReadMeta, Vec<ShardIndex>), ClusterError>>,
    {
        let deadline = Instant::now() + block.wait;
        let mut pause = MIN_REREAD_PAUSE;
        loop {
            // Before the read: a change applied here after it is then never missed.
            let here = self.storage.watchers().watch(target.clone());
            let (answer, meta, parts) = read().await?;
            if meta.index > block.min_index || Instant::now() >= deadline {
                return Ok((answer, meta));
            }
            let started = Instant::now();
            self.wait_for_change(&target, &parts, &here, deadline).await;
            if started.elapsed() < MIN_REREAD_PAUSE {
                tokio::time::sleep_until(deadline.min(Instant::now() + pause)).await;
                pause = (pause * 2).min(MAX_REREAD_PAUSE);
            } else {
                pause = MIN_REREAD_PAUSE;
            }
        }
    }

    /// Waits until one of the shards in `parts` may have changed what `target` covers, or
    /// until `deadline`.
    async fn wait_for_change(
        &self,
        target: &WatchTarget,
        parts: &[ShardIndex],
        here: &Watch,
        deadline: Instant,
    ) {
        let mut waits = Vec::with_capacity(parts.len() + 1);
        if parts.iter().any(|p| self.group(p.shard).is_some()) {
            waits.push(here.changed().boxed());
        }
        for part in parts.iter().filter(|p| self.group(p.shard).is_none()) {
            waits.push(
                self.wait_remote(part.shard, target, part.index, deadline)
                    .boxed(),
            );
        }
        if waits.is_empty() {
            return;
        }
        let _ = tokio::time::timeout_at(deadline, futures::future::select_all(waits)).await;
    }

    /// Asks a node with a replica of `shard` to wait there until `target`'s part passes
    /// `seen`. When no replica answers, returns after a short pause: the next read reports
    /// what is wrong, or finds the answer changed.
    async fn wait_remote(
        &self,
        shard: ShardId,
        target: &WatchTarget,
        seen: u64,
        deadline: Instant,
    ) {
        let round = deadline
            .saturating_duration_since(Instant::now())
            .min(REMOTE_ROUND);
        for to in self.replicas_of(shard) {
            if to == self.node_id {
                continue;
            }
            match self.forward_wait(to, shard, target, seen, round).await {
                Ok(true) => return,
                Ok(false) => continue,
                Err(e) => tracing::debug!(error = %e, shard = shard.0, to, "remote wait failed"),
            }
        }
        tokio::time::sleep(round.min(Duration::from_secs(1))).await;
    }

    /// Waits here, on this node's replica of `shard`, until `target`'s part of a query's index
    /// passes `seen` or `wait` is over; `false` when there is no replica here.
    pub(crate) async fn wait_here(
        &self,
        shard: ShardId,
        target: WatchTarget,
        seen: u64,
        wait: Duration,
    ) -> Result<bool, ClusterError> {
        if self.group(shard).is_none() {
            return Ok(false);
        }
        let watch = self.storage.watchers().watch(target.clone());
        if self.local_part(shard, &target).await? > seen {
            return Ok(true);
        }
        let _ = tokio::time::timeout(wait, watch.changed()).await;
        Ok(true)
    }

    /// `target`'s part of a query's index in this node's replica of `shard`, computed as a
    /// read through the leader computes it (see [`ShardIndex`]).
    async fn local_part(&self, shard: ShardId, target: &WatchTarget) -> Result<u64, ClusterError> {
        let storage = self.storage.clone();
        let target = target.clone();
        let slots = self.owned_slots(shard)?;
        let part = tokio::task::spawn_blocking(move || -> Result<u64, ClusterError> {
            let now = crate::now_ms();
            // Rows first, the watermark second (see `Storage::removal_watermark`).
            let part = match &target {
                WatchTarget::Key(key) => {
                    let found = storage.get(shard, key, now)?;
                    let removed = storage.removal_watermark(shard)?;
                    ShardIndex::of_key(shard, found.as_ref(), removed)
                }
                WatchTarget::Prefix(prefix) => {
                    let rows = storage.scan(shard, prefix, None, usize::MAX, now, slots)?;
                    let removed = storage.removal_watermark(shard)?;
                    let highest = rows.iter().map(|(_, r)| r.modify_index).max();
                    ShardIndex::of_rows(shard, highest, removed)
                }
            };
            Ok(part.index)
        })
        .await
        .map_err(|e| ClusterError::Internal(format!("wait task: {e}")))??;
        Ok(part)
    }

    /// Asks node `to` to wait on its replica of `shard` ([`Node::wait_here`]); `false` when
    /// it has none.
    async fn forward_wait(
        &self,
        to: u64,
        shard: ShardId,
        target: &WatchTarget,
        seen: u64,
        wait: Duration,
    ) -> Result<bool, ClusterError> {
        let op = crate::forward::WireOp::Wait {
            target: target.into(),
            seen,
            wait_ms: u64::try_from(wait.as_millis()).unwrap_or(u64::MAX),
        };
        Ok(self
            .forward_wait_op::<()>(NodeId(to), shard, op, wait + REMOTE_MARGIN)
            .await?
            .is_some())
    }
}

/// How often a blocking pop queued behind others looks whether it heads a queue now,
/// besides being told.
const TURN_RECHECK: Duration = Duration::from_millis(500);

/// How long a Redis blocking command waits at once before looking again (one that waits
/// without a limit waits in rounds of this).
const LIST_ROUND: Duration = Duration::from_secs(600);

impl Node {
    /// Redis blocking pops waiting on this node (`INFO clients`' `blocked_clients`).
    pub fn blocking_pops_waiting(&self) -> usize {
        self.pop_queues.waiting()
    }

    /// Blocking queries waiting here: on this node's replicas (its own clients' and other
    /// nodes'), and blocking pops queued behind others, which wait for their turn instead.
    pub fn blocking_queries_waiting(&self) -> usize {
        self.storage.watchers().len() + self.pop_queues.waiting_for_a_turn()
    }

    /// A Redis blocking list command (`BLPOP`, `BRPOP` as [`ListOp::PopFirst`], `BLMOVE` as
    /// [`ListOp::Move`]): runs `op`, and while it finds every list empty, waits until one of
    /// them may have an element and runs it again, for at most `wait` (`None`: without a
    /// limit). Answers what the last run answered: an empty answer once the wait is over.
    ///
    /// Served in turn with the other waiters on this node (see [`crate::pop_queue`]); once
    /// `hung_up` turns true (the client is gone) it stops waiting and answers empty; a run
    /// already on its way finishes first.
    pub async fn list_command_blocking(
        &self,
        key: Bytes,
        op: ListOp,
        wait: Option<Duration>,
        hung_up: tokio::sync::watch::Receiver<bool>,
    ) -> Result<ListOutcome, ClusterError> {
        let mut keys = vec![key];
        if let ListOp::PopFirst { others, .. } = &op {
            keys.extend(others.iter().cloned());
        }
        let run = |mut first_in: Vec<Bytes>| {
            let key = first_in.remove(0);
            let op = match &op {
                ListOp::PopFirst { end, .. } => ListOp::PopFirst {
                    end: *end,
                    others: first_in,
                },
                other => other.clone(),
            };
            self.list_command(key, op)
        };
        let found_none = |outcome: &ListOutcome| match &outcome.0 {
            Ok(ListAnswer::Popped(None)) => true,
            Ok(ListAnswer::Elements(elements)) => elements.is_empty(),
            _ => false,
        };
        let nothing = ListOutcome(Ok(match &op {
            ListOp::PopFirst { .. } => ListAnswer::Popped(None),
            _ => ListAnswer::Elements(Vec::new()),
        }));
        self.pop_in_turn(keys, wait, hung_up, run, found_none, nothing)
            .await
    }

    /// `BZPOPMIN`, `BZPOPMAX`: pops the member with the lowest score (with `highest`, the
    /// highest) of the first of `keys` that has one, waiting as
    /// [`Node::list_command_blocking`] does. Of more than one key, needs cluster version
    /// [`trireme_types::version::since::SORTED_SET_POP_FIRST`].
    pub async fn sorted_set_pop_blocking(
        &self,
        keys: Vec<Bytes>,
        highest: bool,
        wait: Option<Duration>,
        hung_up: tokio::sync::watch::Receiver<bool>,
    ) -> Result<SortedSetOutcome, ClusterError> {
        let several = keys.len() > 1;
        if several {
            self.require_cluster_version(
                trireme_types::version::since::SORTED_SET_POP_FIRST,
                "BZPOPMIN or BZPOPMAX of more than one key",
            )?;
        }
        let run = |mut first_in: Vec<Bytes>| async move {
            let key = first_in.remove(0);
            if several {
                let op = SortedSetOp::PopFirst {
                    highest,
                    others: first_in,
                };
                return self.sorted_set(key, op).await;
            }
            // One key: the plain pop, which any cluster version has.
            let op = SortedSetOp::Pop { count: 1, highest };
            let outcome = self.sorted_set(key.clone(), op).await?;
            Ok(SortedSetOutcome(outcome.0.map(|answer| {
                match answer {
                    SortedSetAnswer::Pairs(pairs) => SortedSetAnswer::Popped(
                        pairs
                            .into_iter()
                            .next()
                            .map(|(member, score)| (key.clone(), member, score)),
                    ),
                    other => other,
                }
            })))
        };
        let found_none =
            |outcome: &SortedSetOutcome| matches!(&outcome.0, Ok(SortedSetAnswer::Popped(None)));
        let nothing = SortedSetOutcome(Ok(SortedSetAnswer::Popped(None)));
        self.pop_in_turn(keys, wait, hung_up, run, found_none, nothing)
            .await
    }

    /// The loop of every blocking pop: waits for this waiter's turn at some of `keys` (see
    /// [`crate::pop_queue`]), `run`s the pop on the keys it heads, and while that finds
    /// nothing, waits until one of them may have an element, for at most `wait`. A waiter
    /// whose wait ends before its turn came answers `nothing`.
    ///
    /// Each run is a write through the log, so two clients waiting on one key never both
    /// take its element; the waiting is a blocking query on each key, a registry entry woken
    /// by the apply of a change, no polling.
    async fn pop_in_turn<T, F, Fut>(
        &self,
        keys: Vec<Bytes>,
        wait: Option<Duration>,
        mut hung_up: tokio::sync::watch::Receiver<bool>,
        mut run: F,
        found_none: impl Fn(&T) -> bool,
        nothing: T,
    ) -> Result<T, ClusterError>
    where
        F: FnMut(Vec<Bytes>) -> Fut,
        Fut: std::future::Future<Output = Result<T, ClusterError>>,
    {
        let deadline = wait.map(|w| Instant::now() + w);
        let ticket = self.pop_queues.join(&keys);
        let mut pause = MIN_REREAD_PAUSE;
        let mut last = None;
        // The first run pops at once (the key may have an element already); after a run
        // that found nothing, or a turn that came, a read tells first whether there is
        // anything to pop, so a waiter that lost the element to another node's (or found its
        // turn on an empty key) costs a read, not a log write.
        let mut look_first = false;
        // Whether the last run found nothing (and not a turn came since).
        let mut ran_empty = false;
        loop {
            let first_in = ticket.first_in();
            if first_in.is_empty() {
                // Behind other waiters on every key: wait until one of them leaves.
                tokio::select! {
                    () = ticket.next_turn() => {
                        look_first = true;
                        ran_empty = false;
                        continue;
                    }
                    // A look at the queues now and then (no I/O): a turn is never missed
                    // for longer than this, whatever happens to its notification.
                    () = tokio::time::sleep(TURN_RECHECK) => {
                        look_first = true;
                        continue;
                    }
                    () = until(deadline) => {}
                    // A dropped sender is a connection gone too.
                    _ = hung_up.changed() => {}
                }
                return Ok(last.unwrap_or(nothing));
            }
            if look_first {
                let started = Instant::now();
                tokio::select! {
                    waited = self.wait_for_an_element(&first_in, deadline) => waited?,
                    // Heads another queue now: look at it too.
                    () = ticket.next_turn() => {
                        ran_empty = false;
                        continue;
                    }
                    _ = hung_up.changed() => return Ok(last.unwrap_or(nothing)),
                }
                if deadline.is_some_and(|d| Instant::now() >= d) {
                    return Ok(last.unwrap_or(nothing));
                }
                // A key that looks present to the read but empty to the pop (an expired
                // one the reaper has not removed, seen through two clocks) must not spin.
                if ran_empty && started.elapsed() < MIN_REREAD_PAUSE {
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(MAX_REREAD_PAUSE);
                } else {
                    pause = MIN_REREAD_PAUSE;
                }
            }
            let outcome = run(first_in).await?;
            let over = deadline.is_some_and(|d| Instant::now() >= d) || *hung_up.borrow();
            if !found_none(&outcome) || over {
                return Ok(outcome);
            }
            last = Some(outcome);
            look_first = true;
            ran_empty = true;
        }
    }

    /// Waits until one of the collections at `keys` exists (one with no element does not),
    /// or until `deadline`.
    async fn wait_for_an_element(
        &self,
        keys: &[Bytes],
        deadline: Option<Instant>,
    ) -> Result<(), ClusterError> {
        let round = deadline.map_or(LIST_ROUND, |d| {
            d.saturating_duration_since(Instant::now()).min(LIST_ROUND)
        });
        let mut waits = Vec::with_capacity(keys.len());
        for key in keys {
            let (record, meta, _) = self.get_indexed(key, ReadMode::Default).await?;
            // Pushed since the run found it empty: run again at once.
            if record.is_some() {
                return Ok(());
            }
            let block = Blocking {
                min_index: meta.index,
                wait: round,
            };
            let target = WatchTarget::Key(key.clone());
            waits.push(
                async move {
                    self.block_on(target, block, || self.get_indexed(key, ReadMode::Default))
                        .await
                        .map(drop)
                }
                .boxed(),
            );
        }
        futures::future::select_all(waits).await.0
    }
}

/// Resolves at `deadline`, or never without one.
async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d).await,
        None => std::future::pending().await,
    }
}
