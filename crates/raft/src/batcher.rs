//! Proposal batching: concurrent writes to one shard are proposed together as one log entry.
//!
//! Each log entry costs openraft and storage a fixed amount of work (the entry's trip through
//! the Raft task, a log record for the append, replication, an apply call) on top of the
//! work per key. Under load, a shard's writers queue here while the previous entry commits,
//! and the queue goes out as one [`Command::Batch`] entry, applied in queue order under the
//! entry's index. When fewer writers are queued than the last entry held, the batcher first
//! waits briefly for the rest to come back ([`Linger`]). A lone writer never waits; a command
//! that cannot name its keys (a prefix delete) always goes alone.
//!
//! Writes to the same key may share an entry. Only the last of them is ever visible: the
//! batch is applied atomically, so no read can fall between them, and each command sees the
//! ones before it (a CAS after a put in the same batch fails, as it would one entry later).
//! What is given up is an index of their own for the overwritten values, which nobody could
//! have read. Keeping same-key writes apart cost a log entry per write on a hot key: with
//! them batched, 64 wrk connections writing one key of a 3-node cluster went from 8.7k to
//! 10.5k PUT/s.

use crate::{RaftLayerError, ShardStateMachine, TypeConfig};
use openraft::Raft;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::{mpsc, oneshot};
use trireme_types::{Command, CommandResult, LogCommand, ShardId, Timed};

/// Most commands in one entry.
const MAX_BATCH: usize = 256;
/// Proposals queued per shard before writers wait (their request timeout still applies).
const QUEUE: usize = 4096;

/// What the batchers of a node have proposed, for `/metrics`.
#[derive(Debug, Default)]
pub struct ProposalMetrics {
    /// Entries proposed, and per entry the time from taking its first writer to proposing it:
    /// the wait for more writers (`Linger`) and the taking of those already queued.
    pub gathers: Timed,
    /// Writers (commands) those entries carried, counted with them.
    pub writers: AtomicU64,
    /// Entries whose result (or error) came back, and per entry the time from proposing it
    /// until its writers were handed their results: the append, the wait for and the
    /// fdatasync of group commit, the commit and the apply.
    pub commits: Timed,
}

/// One writer's command and where its result goes.
pub(crate) struct Proposal {
    pub(crate) command: LogCommand,
    pub(crate) reply: oneshot::Sender<Result<CommandResult, RaftLayerError>>,
}

/// Starts the batcher of a shard's group; proposals sent to the returned channel are
/// committed in batches until the channel closes.
pub(crate) fn spawn(
    raft: Raft<TypeConfig, ShardStateMachine>,
    shard: ShardId,
    metrics: Arc<ProposalMetrics>,
) -> mpsc::Sender<Proposal> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(run(raft, shard, rx, metrics));
    tx
}

/// One entry of the shard is in flight at a time: the writers that arrive while it commits
/// queue up and go out together as the next entry. Allowing 4 in flight split the same writers
/// into more, smaller entries, each paying its own trip through openraft, append and sync:
/// - one node, redis-benchmark SET (50 clients, one key), medians of 5–6 alternating rounds
///   of `bench/set-cost.sh`: 18.6 instead of 13.8 SETs per fdatasync, 43 instead of 48–51 µs
///   of server CPU per SET;
/// - 3 nodes, `trireme bench --preset consul-put --keys 1` (64 clients on one key), three
///   rounds each: 10.3k–10.9k PUT/s instead of 8.7k–9.9k, p99 no worse; with the preset's own
///   key space the rates were within the noise of each other.
///
/// Before proposing, the batcher may wait for the last entry's writers to come back
/// ([`Linger`]).
async fn run(
    raft: Raft<TypeConfig, ShardStateMachine>,
    shard: ShardId,
    mut rx: mpsc::Receiver<Proposal>,
    metrics: Arc<ProposalMetrics>,
) {
    let mut carried: Option<Proposal> = None;
    let mut linger = Linger::new();
    loop {
        let first = match carried.take() {
            Some(proposal) => proposal,
            None => match rx.recv().await {
                Some(proposal) => proposal,
                None => break,
            },
        };
        let gathering = Instant::now();
        let mut batch = collect(first, &mut rx, &mut carried);
        linger.gather(&mut batch, &mut rx, &mut carried).await;
        linger.last_batch = batch.len();
        let proposing = Instant::now();
        metrics.gathers.record(proposing - gathering);
        metrics
            .writers
            .fetch_add(batch.len() as u64, Ordering::Relaxed);
        propose(&raft, shard, batch).await;
        metrics.commits.record(proposing.elapsed());
    }
}

/// Takes what is queued behind `first` into one batch, up to an unbatchable command or
/// `MAX_BATCH`; the unbatchable proposal that ended the batch is carried to the next one.
fn collect(
    first: Proposal,
    rx: &mut mpsc::Receiver<Proposal>,
    carried: &mut Option<Proposal>,
) -> Vec<Proposal> {
    if !batchable(&first) {
        return vec![first];
    }
    let mut batch = vec![first];
    take_queued(&mut batch, rx, carried);
    batch
}

/// Moves queued proposals into `batch` up to `MAX_BATCH`, stopping at an unbatchable one,
/// which is carried.
fn take_queued(
    batch: &mut Vec<Proposal>,
    rx: &mut mpsc::Receiver<Proposal>,
    carried: &mut Option<Proposal>,
) {
    while batch.len() < MAX_BATCH {
        let Ok(next) = rx.try_recv() else { break };
        if !batchable(&next) {
            *carried = Some(next);
            break;
        }
        batch.push(next);
    }
}

/// Longest wait for the last entry's writers to come back.
const MAX_LINGER: Duration = Duration::from_millis(2);
/// Most entries proposed without lingering after lingers that timed out.
const MAX_SKIP: u32 = 64;

/// Waits, before proposing, for the writers the previous entry answered.
///
/// A writer that waits for each answer before sending again (every benchmark client, most
/// application threads) comes back a few tens of microseconds after its entry commits, one
/// after another as the client gets to each answer. Proposing at once took only the writers
/// that had arrived during the commit, so a shard's writers split into cohorts that took
/// turns, each entry paying its own trip through openraft, its fdatasync and the thread
/// wake-ups around them. Redis gathers the same writers into one fsync because its fsync
/// blocks its event loop while they arrive.
///
/// So when fewer writers are queued than the last entry carried, the batcher waits for that
/// many, for at most `MAX_LINGER`. A lone writer never waits (its last entry carried one).
/// Writers that do not come back (an open-loop load, a client that left) cost one wait of
/// `MAX_LINGER`, after which the batcher proposes at once for the next entry, then 2, 4, …
/// up to `MAX_SKIP` entries before it tries again; a linger that succeeds resets that.
///
/// Measured with `bench/set-cost.sh`-style alternating rounds (redis-benchmark SET, one node,
/// 50 clients, one key, medians of 4): 46.9 instead of 19.0 SETs per fdatasync, 32.9 instead
/// of 41.5 µs of server CPU per SET, 0.84× instead of 0.71× Redis (`appendfsync always`).
/// Open-loop SETs at 2,000 and 6,000/s (`trireme bench`, `rate = N`) kept their p50 and p99
/// within this machine's run-to-run noise, and 3 nodes under `consul-put` stayed within noise.
struct Linger {
    /// Writers in the last entry: the count to wait for.
    last_batch: usize,
    /// Entries still to propose without lingering.
    skip: u32,
    /// What `skip` is set to after the next linger that times out (doubling up to
    /// `MAX_SKIP`; back to 1 once a linger succeeds).
    backoff: u32,
}

impl Linger {
    fn new() -> Self {
        Self {
            last_batch: 0,
            skip: 0,
            backoff: 1,
        }
    }

    /// Adds to `batch` the proposals that arrive until it holds as many writers as the last
    /// entry, for at most `MAX_LINGER`. A batch that is already closed (it holds an
    /// unbatchable command, or one is carried behind it) is left as it is.
    async fn gather(
        &mut self,
        batch: &mut Vec<Proposal>,
        rx: &mut mpsc::Receiver<Proposal>,
        carried: &mut Option<Proposal>,
    ) {
        let target = self.last_batch.min(MAX_BATCH);
        let open = carried.is_none() && batch.first().is_some_and(batchable);
        if !open || batch.len() >= target {
            return;
        }
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        // One timer for the whole wait, however many writers arrive during it.
        let timeout = tokio::time::sleep(MAX_LINGER);
        tokio::pin!(timeout);
        loop {
            tokio::select! {
                biased;
                next = rx.recv() => {
                    let Some(next) = next else { return };
                    if batchable(&next) {
                        batch.push(next);
                        take_queued(batch, rx, carried);
                    } else {
                        *carried = Some(next);
                    }
                    if batch.len() >= target || carried.is_some() {
                        self.backoff = 1;
                        return;
                    }
                }
                () = &mut timeout => {
                    self.skip = self.backoff;
                    self.backoff = (self.backoff * 2).min(MAX_SKIP);
                    return;
                }
            }
        }
    }
}

/// Commands that name their keys can share an entry; a prefix delete goes alone.
fn batchable(proposal: &Proposal) -> bool {
    proposal.command.command.can_share_an_entry()
}

async fn propose(
    raft: &Raft<TypeConfig, ShardStateMachine>,
    shard: ShardId,
    mut batch: Vec<Proposal>,
) {
    if batch.len() == 1 {
        if let Some(proposal) = batch.pop() {
            let result = raft
                .client_write(proposal.command)
                .await
                .map(|response| response.data)
                .map_err(|e| RaftLayerError::from_write(shard, e));
            let _ = proposal.reply.send(result);
        }
        return;
    }
    // The batch carries the latest proposer clock: the members were stamped microseconds
    // apart, and expiry decisions only need one consistent time per entry.
    let now_ms = batch
        .iter()
        .map(|p| p.command.now_ms)
        .max()
        .unwrap_or_default();
    let (commands, replies): (Vec<Command>, Vec<_>) = batch
        .into_iter()
        .map(|p| (p.command.command, p.reply))
        .unzip();
    let entry = LogCommand {
        now_ms,
        command: Command::Batch(commands),
    };
    match raft.client_write(entry).await {
        Ok(response) => match response.data {
            CommandResult::Batch(results) if results.len() == replies.len() => {
                for (reply, result) in replies.into_iter().zip(results) {
                    let _ = reply.send(Ok(result));
                }
            }
            other => {
                for reply in replies {
                    let _ = reply.send(Err(RaftLayerError::Internal(format!(
                        "batch answered {other:?}"
                    ))));
                }
            }
        },
        Err(e) => {
            let error = RaftLayerError::from_write(shard, e);
            for reply in replies {
                let _ = reply.send(Err(error.duplicate()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use trireme_types::{PutCondition, TtlUpdate};

    fn proposal(command: Command) -> Proposal {
        let (reply, _) = oneshot::channel();
        Proposal {
            command: LogCommand { now_ms: 1, command },
            reply,
        }
    }

    fn put(key: &'static str) -> Command {
        Command::Put {
            key: Bytes::from_static(key.as_bytes()),
            value: Bytes::new(),
            flags: None,
            condition: PutCondition::Always,
            ttl: TtlUpdate::Clear,
            return_previous: false,
        }
    }

    #[tokio::test]
    async fn batches_take_repeated_keys_and_stop_at_an_unbatchable_command() {
        let (tx, mut rx) = mpsc::channel(16);
        for command in [
            put("b"),
            put("a"),
            put("a"),
            Command::DeletePrefix {
                prefix: Bytes::new(),
            },
            put("e"),
        ] {
            assert!(tx.send(proposal(command)).await.is_ok());
        }
        let mut carried = None;
        let batch = collect(proposal(put("a")), &mut rx, &mut carried);
        let commands: Vec<Command> = batch.into_iter().map(|p| p.command.command).collect();
        assert_eq!(
            commands,
            vec![put("a"), put("b"), put("a"), put("a")],
            "queue order, repeated keys included, up to the prefix delete"
        );
        let prefix = carried.take().expect("the prefix delete is carried over");
        assert!(matches!(
            prefix.command.command,
            Command::DeletePrefix { .. }
        ));
        assert_eq!(collect(prefix, &mut rx, &mut carried).len(), 1, "alone");
        assert!(carried.is_none());
        assert_eq!(collect(proposal(put("x")), &mut rx, &mut carried).len(), 2);
    }

    fn after_an_entry_of(writers: usize) -> Linger {
        let mut linger = Linger::new();
        linger.last_batch = writers;
        linger
    }

    #[tokio::test(start_paused = true)]
    async fn a_linger_waits_for_as_many_writers_as_the_last_entry_held() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut linger = after_an_entry_of(3);
        let writers = tokio::spawn(async move {
            for key in ["b", "c", "d"] {
                tokio::task::yield_now().await;
                assert!(tx.send(proposal(put(key))).await.is_ok());
            }
        });
        let gathered = gather_behind_one(&mut linger, &mut rx).await;
        assert_eq!(
            gathered.writers, 3,
            "stops once the last entry's count is back"
        );
        assert!(gathered.carried.is_none());
        assert_eq!(linger.skip, 0);
        writers.await.unwrap();
        assert_eq!(
            rx.len(),
            1,
            "the writer after the count waits for the next entry"
        );
    }

    #[tokio::test(start_paused = true)]
    async fn a_lone_writer_never_waits() {
        let (_tx, mut rx) = mpsc::channel(16);
        let mut linger = after_an_entry_of(1);
        let gathered = gather_behind_one(&mut linger, &mut rx).await;
        assert_eq!((gathered.writers, gathered.took), (1, Duration::ZERO));
        assert_eq!(linger.skip, 0, "no wait, so no backoff either");
    }

    /// What a linger ended with.
    struct Gathered {
        writers: usize,
        carried: Option<Proposal>,
        /// Paused time the linger took.
        took: Duration,
    }

    /// Lingers behind a batch of `first` alone.
    async fn gather_behind(
        first: Command,
        linger: &mut Linger,
        rx: &mut mpsc::Receiver<Proposal>,
    ) -> Gathered {
        let mut carried = None;
        let mut batch = vec![proposal(first)];
        let started = tokio::time::Instant::now();
        linger.gather(&mut batch, rx, &mut carried).await;
        Gathered {
            writers: batch.len(),
            carried,
            took: started.elapsed(),
        }
    }

    /// Lingers behind one put.
    async fn gather_behind_one(linger: &mut Linger, rx: &mut mpsc::Receiver<Proposal>) -> Gathered {
        gather_behind(put("a"), linger, rx).await
    }

    #[tokio::test(start_paused = true)]
    async fn writers_that_do_not_come_back_cost_one_wait_and_lingering_backs_off() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut linger = after_an_entry_of(4);
        let waited = |gathered: Gathered| {
            assert_eq!(gathered.writers, 1, "nobody else came");
            gathered.took >= MAX_LINGER
        };
        assert!(
            waited(gather_behind_one(&mut linger, &mut rx).await),
            "waits once"
        );
        assert!(
            !waited(gather_behind_one(&mut linger, &mut rx).await),
            "skips one"
        );
        assert!(
            waited(gather_behind_one(&mut linger, &mut rx).await),
            "tries again"
        );
        for _ in 0..2 {
            assert!(
                !waited(gather_behind_one(&mut linger, &mut rx).await),
                "skips two"
            );
        }
        assert!(waited(gather_behind_one(&mut linger, &mut rx).await));
        assert_eq!(linger.skip, 4, "then four");
        // A linger that gets its writers resets the backoff.
        linger.skip = 0;
        linger.last_batch = 2;
        assert!(tx.send(proposal(put("b"))).await.is_ok());
        let gathered = gather_behind_one(&mut linger, &mut rx).await;
        assert_eq!((gathered.writers, gathered.took), (2, Duration::ZERO));
        assert_eq!(linger.backoff, 1);
    }

    #[tokio::test(start_paused = true)]
    async fn an_unbatchable_command_ends_the_linger_and_is_carried() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut linger = after_an_entry_of(8);
        assert!(tx.send(proposal(put("b"))).await.is_ok());
        let writer = tokio::spawn(async move {
            tokio::task::yield_now().await;
            let prefix = Command::DeletePrefix {
                prefix: Bytes::new(),
            };
            assert!(tx.send(proposal(prefix)).await.is_ok());
            tx
        });
        let gathered = gather_behind_one(&mut linger, &mut rx).await;
        assert_eq!(gathered.writers, 2);
        assert!(matches!(
            gathered.carried.map(|p| p.command.command),
            Some(Command::DeletePrefix { .. })
        ));
        drop(writer.await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn a_batch_holding_an_unbatchable_command_does_not_wait_or_grow() {
        let (tx, mut rx) = mpsc::channel(16);
        let mut linger = after_an_entry_of(4);
        assert!(tx.send(proposal(put("b"))).await.is_ok());
        let prefix = Command::DeletePrefix {
            prefix: Bytes::new(),
        };
        let gathered = gather_behind(prefix, &mut linger, &mut rx).await;
        assert_eq!((gathered.writers, gathered.took), (1, Duration::ZERO));
        assert_eq!(rx.len(), 1, "the put waits for the next entry");
    }

    #[tokio::test]
    async fn a_batch_stops_at_its_size_limit() {
        let (tx, mut rx) = mpsc::channel(MAX_BATCH + 8);
        for _ in 0..MAX_BATCH + 5 {
            assert!(tx.send(proposal(put("k"))).await.is_ok());
        }
        let mut carried = None;
        let batch = collect(proposal(put("k")), &mut rx, &mut carried);
        assert_eq!(batch.len(), MAX_BATCH);
        assert!(
            carried.is_none(),
            "nothing is carried when the limit ends a batch"
        );
        let rest = collect(proposal(put("k")), &mut rx, &mut carried);
        assert_eq!(rest.len(), 7, "the 6 left in the queue behind a new first");
    }
}
