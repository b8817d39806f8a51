//! Proposal batching: concurrent writes to one shard are proposed together as one log entry.
//!
//! Each log entry costs openraft and fjall a fixed amount of work (the entry's trip through
//! the Raft task, a journal record for the append, replication, an apply call) on top of the
//! work per key. Under load, a shard's writers queue here while the previous entry commits,
//! and the queue goes out as one [`Command::Batch`] entry, applied in queue order under the
//! entry's index. A lone writer never waits; a command that cannot name its keys (a prefix
//! delete) always goes alone.
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
use tokio::sync::{mpsc, oneshot};
use trireme_types::{Command, CommandResult, LogCommand};

/// Most commands in one entry.
const MAX_BATCH: usize = 256;
/// Proposals queued per shard before writers wait (their request timeout still applies).
const QUEUE: usize = 4096;

/// One writer's command and where its result goes.
pub(crate) struct Proposal {
    pub(crate) command: LogCommand,
    pub(crate) reply: oneshot::Sender<Result<CommandResult, RaftLayerError>>,
}

/// Starts the batcher of a shard's group; proposals sent to the returned channel are
/// committed in batches until the channel closes.
pub(crate) fn spawn(
    raft: Raft<TypeConfig, ShardStateMachine>,
    shard: u32,
) -> mpsc::Sender<Proposal> {
    let (tx, rx) = mpsc::channel(QUEUE);
    tokio::spawn(run(raft, shard, rx));
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
async fn run(
    raft: Raft<TypeConfig, ShardStateMachine>,
    shard: u32,
    mut rx: mpsc::Receiver<Proposal>,
) {
    let mut carried: Option<Proposal> = None;
    loop {
        let first = match carried.take() {
            Some(proposal) => proposal,
            None => match rx.recv().await {
                Some(proposal) => proposal,
                None => break,
            },
        };
        let batch = collect(first, &mut rx, &mut carried);
        propose(&raft, shard, batch).await;
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
    while batch.len() < MAX_BATCH {
        let Ok(next) = rx.try_recv() else { break };
        if !batchable(&next) {
            *carried = Some(next);
            break;
        }
        batch.push(next);
    }
    batch
}

/// Commands that name their keys can share an entry; a prefix delete goes alone.
fn batchable(proposal: &Proposal) -> bool {
    proposal.command.command.can_share_an_entry()
}

async fn propose(raft: &Raft<TypeConfig, ShardStateMachine>, shard: u32, mut batch: Vec<Proposal>) {
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
                    let _ = reply.send(Err(RaftLayerError::Setup(format!(
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
