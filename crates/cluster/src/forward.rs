//! Serving a shard operation where it can be served: here when this node may (it leads the
//! shard, or holds a replica and the read is `stale`), otherwise forwarded once over the peer
//! link to the node that can. A node that is asked but cannot serve answers with the leader it
//! knows, and the sender follows that hint; nothing is forwarded twice by the same request.
//!
//! A write is retried on another node only when it was certainly not proposed (refused by a
//! non-leader, or never sent). When the link breaks or the time runs out after a write was
//! sent, the client is told the outcome is unknown, never retried behind its back.

use crate::search::SearchQuery;
use crate::{ClusterError, Node};
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;
use trireme_raft::{ForwardHandler, PeerError, RaftLayerError, ReadMode, ShardGroup};
use trireme_types::{CommandResult, ErrorCode, LogCommand, NodeId, Record, ShardId, TriremeError};

/// Attempts per request (local or remote) before giving up on finding a leader; the request
/// timeout bounds them too.
const MAX_ATTEMPTS: usize = 12;

/// One operation on one shard.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) enum ShardOp {
    /// Propose a command.
    Write(LogCommand),
    /// Read keys.
    Get(Vec<Bytes>),
    /// Live rows starting with `prefix`, after `after`, at most `limit`.
    Scan {
        prefix: Bytes,
        after: Option<Bytes>,
        limit: u32,
    },
    /// Count live rows.
    Count,
    /// Documents under `prefix` matching `query` (text, parsed where it runs, so the wire
    /// format does not fix the query's shape): the first `limit` in key order, and how many
    /// match in all. Reads every row under the prefix: there is no index.
    Search {
        prefix: Bytes,
        query: String,
        limit: u32,
    },
}

/// Rows a scan may ask for and still be read on the async threads; a larger scan (an
/// unbounded Consul `?recurse`, a big list page) goes to the blocking pool, so that it does
/// not stall the other requests of its thread.
const INLINE_SCAN_ROWS: u32 = 1_000;

impl ShardOp {
    fn is_write(&self) -> bool {
        matches!(self, ShardOp::Write(_))
    }

    /// A point lookup or a small scan: cheap enough for the async threads.
    fn is_cheap_read(&self) -> bool {
        match self {
            ShardOp::Get(_) => true,
            ShardOp::Scan { limit, .. } => *limit <= INLINE_SCAN_ROWS,
            ShardOp::Count | ShardOp::Search { .. } | ShardOp::Write(_) => false,
        }
    }
}

/// What a shard operation returned.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ShardAnswer {
    Written(CommandResult),
    Records(Vec<Option<Record>>),
    Rows(Vec<(Bytes, Record)>),
    Count(u64),
    /// A search: the first matches in key order, and the number of all matches.
    Matches {
        total: u64,
        rows: Vec<(Bytes, Record)>,
    },
}

/// How fresh the serving replica was (Consul's `X-Consul-*` headers).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct Freshness {
    pub known_leader: bool,
    pub applied: u64,
    pub last_contact_ms: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
enum WireMode {
    Consistent,
    Default,
    Stale,
}

impl From<ReadMode> for WireMode {
    fn from(mode: ReadMode) -> Self {
        match mode {
            ReadMode::Consistent => WireMode::Consistent,
            ReadMode::Default => WireMode::Default,
            ReadMode::Stale => WireMode::Stale,
        }
    }
}

impl From<WireMode> for ReadMode {
    fn from(mode: WireMode) -> Self {
        match mode {
            WireMode::Consistent => ReadMode::Consistent,
            WireMode::Default => ReadMode::Default,
            WireMode::Stale => ReadMode::Stale,
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
struct ForwardRequest {
    shard: u32,
    mode: WireMode,
    op: ShardOp,
}

#[derive(Debug, Serialize, Deserialize)]
enum ForwardReply {
    Served(ShardAnswer, Freshness),
    /// This node cannot serve it; the leader it knows of.
    NotLeader(Option<u64>),
    Failed(TriremeError),
}

/// Where the next attempt goes.
enum Target {
    Local(ShardGroup),
    Remote(u64),
}

impl Node {
    /// Runs `op` on `shard` wherever it can be served, following leader hints.
    pub(crate) async fn on_shard(
        &self,
        shard: ShardId,
        mode: ReadMode,
        op: ShardOp,
    ) -> Result<(ShardAnswer, Freshness), ClusterError> {
        if let Some(served) = self.read_here_at_once(shard, mode, &op) {
            return served;
        }
        let deadline = Instant::now() + self.config.timing.request_timeout;
        let mut hint: Option<u64> = None;
        let mut last_error: Option<ClusterError> = None;
        // Nodes asked since the last pause. During a leader handover the old leader names the
        // new one before the new one knows it won, and each points at the other: asking a
        // node twice without a pause would spend every attempt in a millisecond.
        let mut asked: Vec<u64> = Vec::with_capacity(MAX_ATTEMPTS);
        for attempt in 0..MAX_ATTEMPTS {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                break;
            }
            let target = match self
                .pick_target(shard, mode, &op, hint, attempt, left)
                .await
            {
                Some(target) => target,
                None => {
                    last_error = Some(no_leader(shard));
                    continue;
                }
            };
            let node = match &target {
                Target::Local(_) => self.node_id,
                Target::Remote(to) => *to,
            };
            let mut left = left;
            if asked.contains(&node) {
                self.pause(attempt, left, &mut asked).await;
                left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    break;
                }
            }
            asked.push(node);
            match target {
                Target::Local(group) => match self.serve_local(&group, mode, op.clone()).await {
                    Err(ClusterError::Raft(RaftLayerError::NotLeader { leader, .. })) => {
                        hint = leader.map(|n| NodeId::from_name(&n.name).0);
                        last_error = Some(no_leader(shard));
                        self.yield_to_election(&group, hint, left).await;
                    }
                    other => return other,
                },
                Target::Remote(to) => match self.forward(to, shard, mode, &op, left).await {
                    Ok(ForwardReply::Served(answer, fresh)) => return Ok((answer, fresh)),
                    Ok(ForwardReply::NotLeader(leader)) => {
                        hint = leader.filter(|l| *l != to);
                        last_error = Some(no_leader(shard));
                        if hint.is_none() {
                            self.pause(attempt, left, &mut asked).await;
                        }
                    }
                    Ok(ForwardReply::Failed(e)) => return Err(ClusterError::Remote(e)),
                    Err(PeerError::Unreachable(..) | PeerError::Failed(..)) => {
                        hint = None;
                        last_error = Some(unreachable(shard, to));
                        self.pause(attempt, left, &mut asked).await;
                    }
                    Err(e @ (PeerError::Lost(..) | PeerError::Timeout(..))) if op.is_write() => {
                        return Err(ClusterError::Remote(TriremeError::new(
                            ErrorCode::Timeout,
                            format!(
                                "shard {shard}: {e}; the write may or may not have been applied"
                            ),
                        )));
                    }
                    Err(_) => {
                        hint = None;
                        last_error = Some(unreachable(shard, to));
                    }
                },
            }
        }
        Err(
            last_error.unwrap_or(ClusterError::Raft(RaftLayerError::Timeout {
                shard: shard.0,
                millis: self.config.timing.request_timeout.as_millis() as u64,
            })),
        )
    }

    /// Chooses where to send the next attempt; `None` after waiting in vain for a leader.
    async fn pick_target(
        &self,
        shard: ShardId,
        mode: ReadMode,
        op: &ShardOp,
        hint: Option<u64>,
        attempt: usize,
        left: Duration,
    ) -> Option<Target> {
        let me = self.node_id;
        if let Some(group) = self.group(shard) {
            if (mode == ReadMode::Stale && !op.is_write()) || group.is_leader() {
                return Some(Target::Local(group));
            }
            let leader = match hint.or_else(|| group.leader()) {
                Some(leader) => Some(leader),
                // A voter learns of the next leader by itself. A metadata learner not added
                // yet never would: it asks the voters below instead.
                None if self.replicas_of(shard).contains(&me) => {
                    Some(group.await_leader(left).await?)
                }
                None => None,
            };
            if let Some(leader) = leader {
                return Some(if leader == me {
                    Target::Local(group)
                } else {
                    Target::Remote(leader)
                });
            }
        }
        // Not a replica here (or a metadata learner not yet added): ask the hinted leader, or
        // each replica in turn.
        if let Some(leader) = hint {
            return Some(Target::Remote(leader));
        }
        let replicas = self.replicas_of(shard);
        if replicas.is_empty() {
            return None;
        }
        Some(Target::Remote(replicas[attempt % replicas.len()]))
    }

    /// After a local group refused as not leader: wait for the leader it named to be known.
    /// (Not a pause: a leader already known, if stale, ends the wait at once.)
    async fn yield_to_election(&self, group: &ShardGroup, hint: Option<u64>, left: Duration) {
        if hint.is_none() {
            group.await_leader(left.min(Duration::from_secs(1))).await;
        }
    }

    /// Backs off a little between attempts that found nobody able to serve; after it, any
    /// node may be asked again.
    async fn pause(&self, attempt: usize, left: Duration, asked: &mut Vec<u64>) {
        let wait = Duration::from_millis(20 << attempt.min(5)).min(left);
        tokio::time::sleep(wait).await;
        asked.clear();
    }

    async fn forward(
        &self,
        to: u64,
        shard: ShardId,
        mode: ReadMode,
        op: &ShardOp,
        left: Duration,
    ) -> Result<ForwardReply, PeerError> {
        let request = ForwardRequest {
            shard: shard.0,
            mode: mode.into(),
            op: op.clone(),
        };
        let payload = postcard::to_stdvec(&request)
            .map_err(|e| PeerError::Failed(to, format!("cannot encode: {e}")))?;
        let answer = self.transport.forward(to, payload, left).await?;
        // The request was served, whatever the answer says: never retried as unsent.
        postcard::from_bytes(&answer)
            .map_err(|e| PeerError::Lost(to, format!("undecodable answer: {e}")))
    }

    /// The common read, served here with none of the retry loop's bookkeeping: this node
    /// leads the shard and holds its lease, or the read is `stale` and a replica is here.
    /// `None` when the loop must decide (a write, a count, a `consistent` read, no lease).
    fn read_here_at_once(
        &self,
        shard: ShardId,
        mode: ReadMode,
        op: &ShardOp,
    ) -> Option<Result<(ShardAnswer, Freshness), ClusterError>> {
        if !op.is_cheap_read() {
            return None;
        }
        let group = self.group(shard)?;
        if !group.can_read_at_once(mode) {
            return None;
        }
        Some(
            read_shard(&self.storage, group.shard().0, op)
                .map(|answer| (answer, freshness(&group))),
        )
    }

    /// Serves `op` with this node's replica of the shard.
    pub(crate) async fn serve_local(
        &self,
        group: &ShardGroup,
        mode: ReadMode,
        op: ShardOp,
    ) -> Result<(ShardAnswer, Freshness), ClusterError> {
        let shard = group.shard().0;
        let answer = match op {
            ShardOp::Write(command) => ShardAnswer::Written(group.write(command).await?),
            read => {
                group.read_barrier(mode).await?;
                if read.is_cheap_read() {
                    read_shard(&self.storage, shard, &read)?
                } else {
                    let storage = self.storage.clone();
                    tokio::task::spawn_blocking(move || read_shard(&storage, shard, &read))
                        .await
                        .map_err(|e| ClusterError::Config(format!("shard read task: {e}")))??
                }
            }
        };
        Ok((answer, freshness(group)))
    }

    /// Serves a request another node forwarded: only with a replica here, never forwarding on.
    async fn serve_forwarded(&self, payload: &[u8]) -> ForwardReply {
        let request: ForwardRequest = match postcard::from_bytes(payload) {
            Ok(request) => request,
            Err(e) => {
                tracing::warn!(error = %e, "undecodable forwarded request");
                return ForwardReply::Failed(TriremeError::new(
                    ErrorCode::Internal,
                    format!("undecodable forwarded request: {e}"),
                ));
            }
        };
        let shard = ShardId(request.shard);
        let mode = ReadMode::from(request.mode);
        let Some(group) = self.group(shard) else {
            return ForwardReply::NotLeader(None);
        };
        let stale_read = mode == ReadMode::Stale && !request.op.is_write();
        if !stale_read && !group.is_leader() {
            return ForwardReply::NotLeader(group.leader());
        }
        match self.serve_local(&group, mode, request.op).await {
            Ok((answer, fresh)) => ForwardReply::Served(answer, fresh),
            Err(ClusterError::Raft(RaftLayerError::NotLeader { leader, .. })) => {
                ForwardReply::NotLeader(leader.map(|n| NodeId::from_name(&n.name).0))
            }
            Err(e) => ForwardReply::Failed(e.to_client()),
        }
    }
}

/// Serves a read from a replica of `shard`: keys, a range, a count or a search. Only
/// [`ShardOp::is_cheap_read`] ones may run on the async threads.
fn read_shard(
    storage: &trireme_storage::Storage,
    shard: u32,
    op: &ShardOp,
) -> Result<ShardAnswer, ClusterError> {
    let now = crate::now_ms();
    Ok(match op {
        ShardOp::Get(keys) => ShardAnswer::Records(
            keys.iter()
                .map(|k| storage.get(shard, k, now))
                .collect::<Result<_, _>>()?,
        ),
        ShardOp::Scan {
            prefix,
            after,
            limit,
        } => ShardAnswer::Rows(storage.scan(
            shard,
            prefix,
            after.as_deref(),
            *limit as usize,
            now,
        )?),
        ShardOp::Count => ShardAnswer::Count(count_rows(storage, shard, now)?),
        ShardOp::Search {
            prefix,
            query,
            limit,
        } => {
            let query = SearchQuery::parse(query)?;
            let (total, rows) = search_rows(storage, shard, prefix, &query, *limit as usize, now)?;
            ShardAnswer::Matches { total, rows }
        }
        ShardOp::Write(_) => unreachable!("not a read"),
    })
}

/// Live rows of a shard; O(rows), run off the async threads. Counted where they are
/// stored: no row is decoded or copied.
fn count_rows(
    storage: &trireme_storage::Storage,
    shard: u32,
    now: u64,
) -> Result<u64, trireme_storage::StorageError> {
    Ok(storage.scan_filtered(shard, b"", now, 0, |_| true)?.0)
}

/// The documents of a shard under `prefix` that match `query`: the first `limit` in key
/// order and the number of all matches. O(rows under the prefix), each read as JSON where it
/// is stored (only the fields the query names are built, only matches are copied); run off
/// the async threads.
fn search_rows(
    storage: &trireme_storage::Storage,
    shard: u32,
    prefix: &[u8],
    query: &SearchQuery,
    limit: usize,
    now: u64,
) -> Result<(u64, Vec<(Bytes, Record)>), trireme_storage::StorageError> {
    storage.scan_filtered(shard, prefix, now, limit, |value| {
        // Only objects are documents; the first byte rules most other values out unparsed.
        value.trim_ascii_start().first() == Some(&b'{') && query.matches_json(value)
    })
}

fn freshness(group: &ShardGroup) -> Freshness {
    let (known_leader, applied) = group.leader_and_applied();
    Freshness {
        known_leader,
        applied,
        last_contact_ms: group.last_contact_ms().unwrap_or(u64::MAX / 2),
    }
}

fn no_leader(shard: ShardId) -> ClusterError {
    ClusterError::Remote(TriremeError::new(
        ErrorCode::NoLeader,
        format!("shard {shard} has no reachable leader"),
    ))
}

fn unreachable(shard: ShardId, to: u64) -> ClusterError {
    ClusterError::Remote(TriremeError::new(
        ErrorCode::Unavailable,
        format!("shard {shard}: node {to:016x} is unreachable"),
    ))
}

/// The transport's handle on the node for forwarded requests. Weak, so a stopped node is not
/// kept alive by its own transport.
struct ForwardedRequests(Weak<Node>);

impl ForwardHandler for ForwardedRequests {
    fn handle(&self, _from: u64, payload: Vec<u8>) -> futures::future::BoxFuture<'static, Vec<u8>> {
        let node = self.0.upgrade();
        Box::pin(async move {
            let reply = match node {
                Some(node) => node.serve_forwarded(&payload).await,
                None => ForwardReply::Failed(TriremeError::new(
                    ErrorCode::Unavailable,
                    "this node is stopping",
                )),
            };
            // Encoding our own reply type cannot fail; an empty answer reads as undecodable.
            postcard::to_stdvec(&reply).unwrap_or_default()
        })
    }
}

/// The handler to install on the node's transport.
pub(crate) fn handler(node: &Arc<Node>) -> Arc<dyn ForwardHandler> {
    Arc::new(ForwardedRequests(Arc::downgrade(node)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn scan(limit: u32) -> ShardOp {
        ShardOp::Scan {
            prefix: Bytes::new(),
            after: None,
            limit,
        }
    }

    #[test]
    fn only_point_reads_and_small_scans_stay_on_the_async_threads() {
        assert!(ShardOp::Get(vec![Bytes::from_static(b"k")]).is_cheap_read());
        assert!(scan(INLINE_SCAN_ROWS).is_cheap_read());
        assert!(!scan(INLINE_SCAN_ROWS + 1).is_cheap_read());
        assert!(!scan(u32::MAX).is_cheap_read(), "an unbounded ?recurse");
        assert!(!ShardOp::Count.is_cheap_read());
    }
}
