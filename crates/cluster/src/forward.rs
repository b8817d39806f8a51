//! Serving a shard operation where it can be served: here when this node may (it leads the
//! shard, or holds a replica and the read is `stale`), otherwise forwarded once over the peer
//! link to the node that can. A node that is asked but cannot serve answers with the leader it
//! knows, and the sender follows that hint; nothing is forwarded twice by the same request.
//!
//! A write is retried on another node only when it was certainly not proposed (refused by a
//! non-leader, or never sent). When the link breaks or the time runs out after a write was
//! sent, the client is told the outcome is unknown, never retried behind its back.
//!
//! Reads and writes take the same loop but not the same request: a [`Read`] carries its read
//! mode and a query (keys, a scan, a count, a search), a [`Write`] only its log command, and
//! each answers in its own type, here and over the peer link alike.

use crate::{ClusterError, Node};
use bytes::Bytes;
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use std::future::Future;
use std::sync::{Arc, Weak};
use std::time::Duration;
use tokio::time::Instant;
use trireme_raft::{ForwardHandler, PeerError, RaftLayerError, ReadMode, ShardGroup};
use trireme_storage::{ShardView, WatchTarget};
use trireme_types::{CommandResult, ErrorCode, LogCommand, NodeId, Record, ShardId, TriremeError};

tokio::task_local! {
    /// The region a request named (Consul's `?dc=`), while it is served.
    static ASKED_REGION: String;
}

/// Runs `request` with its stale reads answered by replicas in `region` (Consul's `?dc=`
/// naming another datacenter), where the shard has one; writes and other reads go to the
/// leader as always.
pub async fn answered_in_region<F: Future>(region: String, request: F) -> F::Output {
    ASKED_REGION.scope(region, request).await
}

/// What a node answers to a forwarded request it cannot decode (one from a newer build):
/// the sender may then fall back to what older builds understand.
pub(crate) const UNDECODABLE_FORWARD: &str = "undecodable forwarded request";

/// Attempts per request (local or remote) before giving up on finding a leader; the request
/// timeout bounds them too.
const MAX_ATTEMPTS: usize = 12;

/// How long a request waits, per attempt, for a replica this node is about to open (the map
/// places it here, and reconciliation opens it within moments).
const OPENING_PAUSE: Duration = Duration::from_millis(50);

/// One request to one shard, as [`Node::on_shard`] runs it: a read ([`Read`]) or a write
/// ([`Write`]). Each kind says what it answers, so a caller gets the answer's own type and
/// never has to check the shape of what came back, locally or over the peer link.
pub(crate) trait ShardRequest: Clone + Send + Sync + 'static {
    /// What serving it returns.
    type Answer: Serialize + DeserializeOwned + Send + 'static;

    /// Whether it changes the shard: once sent, a lost answer leaves its outcome unknown, so
    /// it is never retried elsewhere.
    const WRITES: bool;

    /// Whether any replica may serve it (a `stale` read), not only the leader.
    fn any_replica(&self) -> bool;

    /// Served at once by this node's replica, without the retry loop's bookkeeping, when that
    /// is certain to be right (a cheap read under the leader's lease); `None` otherwise.
    fn at_once(&self, node: &Node, shard: ShardId) -> Option<Result<Self::Answer, ClusterError>>;

    /// Serves it with this node's replica `group`.
    fn serve(
        self,
        node: &Node,
        group: &ShardGroup,
    ) -> impl Future<Output = Result<Self::Answer, ClusterError>> + Send;

    /// Its form on the peer link.
    fn to_wire(&self) -> WireOp;

    /// The applied log index of the replica that served `answer`, for a read.
    fn applied(_answer: &Self::Answer) -> Option<u64> {
        None
    }

    /// Undoes what serving it left held on node `served_by`, for an answer thrown away (a
    /// `stale` answer from a replica behind what this node already showed): nothing for
    /// most requests.
    fn discarded(
        _answer: Self::Answer,
        _node: &Node,
        _shard: ShardId,
        _served_by: u64,
    ) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// A write: a command proposed to the shard's group, answered once applied.
#[derive(Debug, Clone)]
pub(crate) struct Write(pub LogCommand);

impl ShardRequest for Write {
    type Answer = CommandResult;
    const WRITES: bool = true;

    fn any_replica(&self) -> bool {
        false
    }

    fn at_once(&self, _: &Node, _: ShardId) -> Option<Result<CommandResult, ClusterError>> {
        None
    }

    /// Refused before it is proposed when this node (it leads the shard) keeps too little
    /// disk free; the metadata group still writes, so that placement changes that free
    /// space (a shard moving away) go on.
    async fn serve(self, node: &Node, group: &ShardGroup) -> Result<CommandResult, ClusterError> {
        if group.shard() != crate::meta::META_SHARD
            && let Err(full) = node.storage.check_disk_space()
        {
            return Err(ClusterError::Request(TriremeError::new(
                ErrorCode::DiskFull,
                full.to_string(),
            )));
        }
        Ok(group.write(self.0).await?)
    }

    fn to_wire(&self) -> WireOp {
        WireOp::Write(self.0.clone())
    }
}

/// A read of one shard in a read mode: what it reads is the query `Q`, within the slots the
/// sender's routing says the shard owns (`None`: the whole shard, for the node's own reads).
/// A replica whose shard no longer owns all of them (split since) refuses with
/// [`ErrorCode::Moved`]; one that still owns more (it has not applied the split yet) reads
/// only those, so that rows already handed to the new shard are not read twice.
#[derive(Debug, Clone)]
pub(crate) struct Read<Q> {
    pub mode: ReadMode,
    pub query: Q,
    pub slots: Option<(u16, u16)>,
}

impl<Q> Read<Q> {
    /// A read of the whole shard, without a slot check (the metadata group, the node's own
    /// bookkeeping).
    pub(crate) fn whole(mode: ReadMode, query: Q) -> Self {
        Read {
            mode,
            query,
            slots: None,
        }
    }
}

/// What a read of one shard looks up, and how it runs on a replica's storage.
pub(crate) trait ReadQuery: Clone + Send + Sync + 'static {
    /// What it finds.
    type Found: Serialize + DeserializeOwned + Send + 'static;

    /// Cheap enough for the async threads (a point lookup, a small scan); the others run on
    /// the blocking pool so as not to stall the other requests of their thread.
    fn is_cheap(&self) -> bool;

    /// Runs it on `view`, this node's replica of a shard as of one point of its applied log,
    /// over the keys in `slots` only, if given. Every row it reads comes from that one view,
    /// so it sees each applied entry (a transaction, an MSET) whole or not at all.
    fn run(
        &self,
        view: &ShardView<'_>,
        now: u64,
        slots: Option<(u16, u16)>,
    ) -> Result<Self::Found, ClusterError>;

    /// Its form on the peer link.
    fn to_wire(&self) -> WireQuery;
}

impl<Q: ReadQuery> ShardRequest for Read<Q> {
    type Answer = (Q::Found, Freshness);
    const WRITES: bool = false;

    fn any_replica(&self) -> bool {
        self.mode == ReadMode::Stale
    }

    fn at_once(&self, node: &Node, shard: ShardId) -> Option<Result<Self::Answer, ClusterError>> {
        if !self.query.is_cheap() {
            return None;
        }
        let group = node.group(shard)?;
        if !group.can_read_at_once(self.mode)
            || (self.mode == ReadMode::Stale && !node.may_serve(shard, &group, true))
        {
            return None;
        }
        let bootstrap = node.bootstrap_shards;
        let found = node
            .storage
            .read_with_removals(shard, || {
                read_view(
                    &node.storage,
                    bootstrap,
                    shard,
                    self.slots,
                    &self.query,
                    false,
                )
            })
            .map(|((found, _), removed)| (found, freshness(&group, removed, None)));
        Some(found)
    }

    async fn serve(self, node: &Node, group: &ShardGroup) -> Result<Self::Answer, ClusterError> {
        group.read_barrier(self.mode).await?;
        let shard = group.shard();
        let (bootstrap, slots) = (node.bootstrap_shards, self.slots);
        let query_is_cheap = self.query.is_cheap();
        let storage = node.storage.clone();
        let query = self.query;
        // A stale read may be answered to another node, which must know how far along the
        // view was (see `Node::stale_floor_admits`); the published metrics may lag it.
        let with_index = self.mode == ReadMode::Stale;
        let read = move || {
            storage.read_with_removals(shard, || {
                read_view(&storage, bootstrap, shard, slots, &query, with_index)
            })
        };
        let ((found, index), removed) = if query_is_cheap {
            read()?
        } else {
            tokio::task::spawn_blocking(read)
                .await
                .map_err(|e| ClusterError::Internal(format!("shard read task: {e}")))??
        };
        Ok((found, freshness(group, removed, index)))
    }

    fn to_wire(&self) -> WireOp {
        WireOp::Read(self.mode.into(), self.slots, self.query.to_wire())
    }

    fn applied(answer: &Self::Answer) -> Option<u64> {
        Some(answer.1.applied)
    }
}

/// Read keys: one record (or none) per key, in order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct GetKeys(pub Vec<Bytes>);

impl ReadQuery for GetKeys {
    type Found = Vec<Option<Record>>;

    fn is_cheap(&self) -> bool {
        true
    }

    fn run(
        &self,
        view: &ShardView<'_>,
        now: u64,
        _: Option<(u16, u16)>,
    ) -> Result<Self::Found, ClusterError> {
        // The keys were routed by the same slots: no filter needed.
        Ok(self
            .0
            .iter()
            .map(|k| view.get(k, now))
            .collect::<Result<_, _>>()?)
    }

    fn to_wire(&self) -> WireQuery {
        WireQuery::Get(self.clone())
    }
}

/// Live rows starting with `prefix`, after `after` (or from it, with `from_after`), at most
/// `limit`, in key order.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ScanRows {
    pub prefix: Bytes,
    pub after: Option<Bytes>,
    pub limit: u32,
    /// Whether the row at `after` itself counts (a page that starts at a key).
    pub from_after: bool,
}

impl ScanRows {
    fn start(&self) -> std::ops::Bound<&[u8]> {
        match (&self.after, self.from_after) {
            (None, _) => std::ops::Bound::Unbounded,
            (Some(key), false) => std::ops::Bound::Excluded(key),
            (Some(key), true) => std::ops::Bound::Included(key),
        }
    }
}

/// Rows a scan may ask for and still be read on the async threads; a larger scan (an
/// unbounded Consul `?recurse`, a big list page) goes to the blocking pool, so that it does
/// not stall the other requests of its thread.
const INLINE_SCAN_ROWS: u32 = 1_000;

impl ReadQuery for ScanRows {
    type Found = Vec<(Bytes, Record)>;

    fn is_cheap(&self) -> bool {
        self.limit <= INLINE_SCAN_ROWS
    }

    fn run(
        &self,
        view: &ShardView<'_>,
        now: u64,
        slots: Option<(u16, u16)>,
    ) -> Result<Self::Found, ClusterError> {
        Ok(view.scan(&self.prefix, self.start(), self.limit as usize, now, slots)?)
    }

    fn to_wire(&self) -> WireQuery {
        WireQuery::Scan(self.clone())
    }
}

/// The number of live rows. O(rows): counted where they are stored, no row decoded or copied.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CountRows;

impl ReadQuery for CountRows {
    type Found = u64;

    fn is_cheap(&self) -> bool {
        false
    }

    fn run(
        &self,
        view: &ShardView<'_>,
        now: u64,
        slots: Option<(u16, u16)>,
    ) -> Result<u64, ClusterError> {
        Ok(view.scan_filtered(b"", now, 0, slots, |_| true)?.0)
    }

    fn to_wire(&self) -> WireQuery {
        WireQuery::Count(self.clone())
    }
}

/// The live keys with an expiry and the sum of their times to live in milliseconds (Redis's
/// `expires` and `avg_ttl` in `INFO keyspace`). O(keys with an expiry).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct CountExpiring;

impl ReadQuery for CountExpiring {
    type Found = (u64, u64);

    fn is_cheap(&self) -> bool {
        false
    }

    fn run(
        &self,
        view: &ShardView<'_>,
        now: u64,
        slots: Option<(u16, u16)>,
    ) -> Result<(u64, u64), ClusterError> {
        Ok(view.expiring(now, slots)?)
    }

    fn to_wire(&self) -> WireQuery {
        WireQuery::CountExpiring(self.clone())
    }
}

/// How long a `consistent` search waits for a shard's index to cover what the shard had
/// applied when the search reached it.
const CONSISTENT_SEARCH_WAIT: Duration = Duration::from_secs(5);

/// A search of one shard's index (see [`trireme_search`]): the number of documents of
/// `collection` that match `query` within the slots routed to the shard, and the keys of the
/// best `want` of them by relevance (or by the values of the `sort` fields), with their
/// scores and sort values. The records are not sent: most of a
/// shard's best are not among the best of all shards, and the caller reads the few that are.
/// The query travels as text and is parsed where it runs, so the wire format does not fix its
/// shape.
///
/// In the `consistent` mode, after the shard's read barrier, the search waits until the
/// index covers every change the replica had applied by then; in the others it reads the
/// index as last committed (at most the commit interval behind, plus the
/// time to index what came in).
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct SearchShard {
    pub mode: WireMode,
    pub slots: Option<(u16, u16)>,
    pub collection: Bytes,
    pub query: String,
    pub want: u32,
    pub sort: Vec<trireme_search::SortKey>,
}

impl ShardRequest for SearchShard {
    type Answer = (u64, Vec<trireme_search::Hit>, Freshness);
    const WRITES: bool = false;

    fn any_replica(&self) -> bool {
        matches!(self.mode, WireMode::Stale)
    }

    fn at_once(&self, _: &Node, _: ShardId) -> Option<Result<Self::Answer, ClusterError>> {
        None
    }

    async fn serve(self, node: &Node, group: &ShardGroup) -> Result<Self::Answer, ClusterError> {
        let mode = ReadMode::from(self.mode);
        group.read_barrier(mode).await?;
        let shard = group.shard();
        let only = node.slots_to_read(shard, self.slots)?;
        if mode == ReadMode::Consistent {
            node.search
                .wait_covered(shard, CONSISTENT_SEARCH_WAIT)
                .await?;
        }
        let query = trireme_search::parse(&self.query)?;
        let search = node.search.clone();
        let storage = node.storage.clone();
        let want = self.want as usize;
        let collection = self.collection;
        let sort = self.sort;
        let read = move || {
            storage.read_with_removals(shard, || -> Result<_, ClusterError> {
                let hits = search.search(shard, &collection, &query, only, want, &sort)?;
                Ok((hits.total, hits.top))
            })
        };
        let ((total, rows), removed) = tokio::task::spawn_blocking(read)
            .await
            .map_err(|e| ClusterError::Internal(format!("search task: {e}")))??;
        Ok((total, rows, freshness(group, removed, None)))
    }

    fn to_wire(&self) -> WireOp {
        WireOp::Search(self.clone())
    }
}

/// A read of one hash (`HGET`, `HGETALL`, `HLEN`, ...): its answer, or `WrongType` when the
/// key holds something else.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReadHash {
    pub key: Bytes,
    pub read: trireme_types::HashRead,
}

impl ReadQuery for ReadHash {
    type Found = Result<trireme_types::HashAnswer, trireme_types::ErrorCode>;

    fn is_cheap(&self) -> bool {
        match &self.read {
            trireme_types::HashRead::Fields { limit, .. } => *limit <= u64::from(INLINE_SCAN_ROWS),
            _ => true,
        }
    }

    fn run(
        &self,
        view: &ShardView<'_>,
        now: u64,
        _: Option<(u16, u16)>,
    ) -> Result<Self::Found, ClusterError> {
        // Routed by the key's slot, as a get is: no filter needed.
        Ok(view.hash_read(&self.key, &self.read, now)?)
    }

    fn to_wire(&self) -> WireQuery {
        WireQuery::Hash(self.clone())
    }
}

/// A read of one set (`SISMEMBER`, `SMEMBERS`, `SINTER`, ...): its answer, or `WrongType`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReadSet {
    pub key: Bytes,
    pub read: trireme_types::SetRead,
}

impl ReadQuery for ReadSet {
    type Found = Result<trireme_types::SetAnswer, trireme_types::ErrorCode>;

    fn is_cheap(&self) -> bool {
        match &self.read {
            trireme_types::SetRead::Members { limit, .. } => *limit <= u64::from(INLINE_SCAN_ROWS),
            trireme_types::SetRead::Combine { .. } => false,
            _ => true,
        }
    }

    fn run(
        &self,
        view: &ShardView<'_>,
        now: u64,
        _: Option<(u16, u16)>,
    ) -> Result<Self::Found, ClusterError> {
        // Routed by the key's slot (every key of a combination shares it): no filter needed.
        Ok(view.set_read(&self.key, &self.read, now)?)
    }

    fn to_wire(&self) -> WireQuery {
        WireQuery::Set(self.clone())
    }
}

/// A read of one list (`LLEN`, `LRANGE`, `LINDEX`, `LPOS`): its answer, or `WrongType`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReadList {
    pub key: Bytes,
    pub read: trireme_types::ListRead,
}

impl ReadQuery for ReadList {
    type Found = Result<trireme_types::ListAnswer, trireme_types::ErrorCode>;

    fn is_cheap(&self) -> bool {
        match &self.read {
            trireme_types::ListRead::Range { start, stop } => {
                // A short range from either end; anything else may read the whole list.
                (*start >= 0 && *stop >= 0 || *start < 0 && *stop < 0)
                    && stop.saturating_sub(*start) < i64::from(INLINE_SCAN_ROWS)
            }
            trireme_types::ListRead::Positions { .. } => false,
            _ => true,
        }
    }

    fn run(
        &self,
        view: &ShardView<'_>,
        now: u64,
        _: Option<(u16, u16)>,
    ) -> Result<Self::Found, ClusterError> {
        Ok(view.list_read(&self.key, &self.read, now)?)
    }

    fn to_wire(&self) -> WireQuery {
        WireQuery::List(self.clone())
    }
}

/// A read of one sorted set (`ZSCORE`, `ZRANGE`, `ZRANK`, ...): its answer, or `WrongType`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct ReadSortedSet {
    pub key: Bytes,
    pub read: trireme_types::SortedSetRead,
}

impl ReadQuery for ReadSortedSet {
    type Found = Result<trireme_types::SortedSetAnswer, trireme_types::ErrorCode>;

    fn is_cheap(&self) -> bool {
        use trireme_types::SortedSetRead;
        match &self.read {
            SortedSetRead::Len | SortedSetRead::Scores { .. } => true,
            SortedSetRead::Members { limit, .. } => *limit <= u64::from(INLINE_SCAN_ROWS),
            // A range by rank near the start: its walk is `stop + 1` rows. Anything else may
            // walk the whole set.
            SortedSetRead::Range {
                range: trireme_types::ZRange::Rank { start, stop },
                ..
            } => *start >= 0 && (0..i64::from(INLINE_SCAN_ROWS)).contains(stop),
            _ => false,
        }
    }

    fn run(
        &self,
        view: &ShardView<'_>,
        now: u64,
        _: Option<(u16, u16)>,
    ) -> Result<Self::Found, ClusterError> {
        Ok(view.sorted_set_read(&self.key, &self.read, now)?)
    }

    fn to_wire(&self) -> WireQuery {
        WireQuery::SortedSet(self.clone())
    }
}

/// How fresh the serving replica was (Consul's `X-Consul-*` headers).
#[derive(Debug, Clone, Copy, Default, Serialize, Deserialize)]
pub(crate) struct Freshness {
    pub known_leader: bool,
    pub applied: u64,
    /// The shard's removal watermark on the serving replica.
    pub removed: u64,
    pub last_contact_ms: u64,
}

#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub(crate) enum WireMode {
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

/// A read query on the peer link.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum WireQuery {
    Get(GetKeys),
    Scan(ScanRows),
    Count(CountRows),
    Hash(ReadHash),
    Set(ReadSet),
    List(ReadList),
    SortedSet(ReadSortedSet),
    CountExpiring(CountExpiring),
}

/// A shard request on the peer link: a read carries its mode, a write none.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum WireOp {
    Read(WireMode, Option<(u16, u16)>, WireQuery),
    Write(LogCommand),
    /// A search of the shard's index.
    Search(SearchShard),
    /// A pub/sub message for this node's subscribers (no shard involved); answered with how
    /// many received it.
    Publish {
        channel: Bytes,
        message: Bytes,
    },
    /// Wait on this node's replica until the part of a blocking query's index that `target`
    /// has in the shard passes `seen`, or `wait_ms` ran out; answered with `()` (see
    /// `blocking.rs`), or "not leader" when there is no replica here.
    Wait {
        target: WireTarget,
        seen: u64,
        wait_ms: u64,
    },
    /// Open a whole-collection read on the replica here and answer its first page (see
    /// `whole_read.rs`).
    OpenWhole(WireMode, Option<(u16, u16)>, crate::whole_read::WholeQuery),
    /// The next page of a whole read this node holds open (no shard involved).
    WholePage {
        read: u64,
    },
    /// Close a whole read this node holds open; answered with `()`.
    CloseWhole {
        read: u64,
    },
}

/// What a blocking query watches, on the peer link.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum WireTarget {
    Key(Bytes),
    Prefix(Bytes),
}

impl From<&WatchTarget> for WireTarget {
    fn from(target: &WatchTarget) -> Self {
        match target {
            WatchTarget::Key(key) => WireTarget::Key(key.clone()),
            WatchTarget::Prefix(prefix) => WireTarget::Prefix(prefix.clone()),
        }
    }
}

impl From<WireTarget> for WatchTarget {
    fn from(target: WireTarget) -> Self {
        match target {
            WireTarget::Key(key) => WatchTarget::Key(key),
            WireTarget::Prefix(prefix) => WatchTarget::Prefix(prefix),
        }
    }
}

#[derive(Debug, Serialize, Deserialize)]
pub(crate) struct ForwardRequest {
    pub shard: u32,
    pub op: WireOp,
}

/// The answer to a forwarded request. The sender knows `A` from the request it sent; the
/// other variants encode the same whatever `A` is.
#[derive(Debug, Serialize, Deserialize)]
pub(crate) enum ForwardReply<A> {
    Served(A),
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
    /// Runs `op` on `shard` wherever it can be served, following leader hints. A read that
    /// meets a key held by a transaction across shards is run again once the key is free
    /// (see `crate::txn`); a write refused for that answers so, and `Node::apply_on_shard`
    /// proposes it again.
    pub(crate) async fn on_shard<R: ShardRequest>(
        &self,
        shard: ShardId,
        op: R,
    ) -> Result<R::Answer, ClusterError> {
        let first = self.on_shard_once(shard, &op).await;
        let Some(key) = first.as_ref().err().and_then(crate::txn::held_key) else {
            return first;
        };
        self.on_shard_past_intents(shard, &op, key).await
    }

    /// [`Node::on_shard`] without waiting for keys held by transactions: what settling
    /// such a key uses itself.
    pub(crate) async fn on_shard_once<R: ShardRequest>(
        &self,
        shard: ShardId,
        op: &R,
    ) -> Result<R::Answer, ClusterError> {
        // A stale read asked of another region is never served here at once.
        let elsewhere = op.any_replica() && ASKED_REGION.try_with(|_| ()).is_ok();
        if !elsewhere && let Some(served) = op.at_once(self, shard) {
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
            let target = match self.pick_target(shard, op, hint, attempt, left).await {
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
                Target::Local(group) => match op.clone().serve(self, &group).await {
                    Err(ClusterError::Raft(RaftLayerError::NotLeader { leader, .. })) => {
                        hint = leader.map(|n| NodeId::from_name(&n.name).0);
                        last_error = Some(no_leader(shard));
                        self.yield_to_election(&group, hint, left).await;
                    }
                    other => return other,
                },
                Target::Remote(to) => match self.forward(NodeId(to), shard, op, left).await {
                    Ok(ForwardReply::Served(answer)) => {
                        if !op.any_replica() || self.stale_floor_admits(shard, R::applied(&answer))
                        {
                            return Ok(answer);
                        }
                        R::discarded(answer, self, shard, to).await;
                        // That replica is behind one that already answered through this
                        // node: try the next replica (after a pause, the same one again,
                        // caught up by then) rather than let a client reading here see the
                        // shard go back.
                        hint = None;
                        last_error = Some(behind(shard, to));
                        self.pause(attempt, left, &mut asked).await;
                    }
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
                    Err(e @ (PeerError::Lost(..) | PeerError::Timeout(..))) if R::WRITES => {
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
                shard,
                millis: self.config.timing.request_timeout.as_millis() as u64,
            })),
        )
    }

    /// Chooses where to send the next attempt; `None` after waiting in vain for a leader.
    async fn pick_target(
        &self,
        shard: ShardId,
        op: &impl ShardRequest,
        hint: Option<u64>,
        attempt: usize,
        left: Duration,
    ) -> Option<Target> {
        let me = self.node_id;
        if op.any_replica()
            && let Some(there) = self.replicas_in_asked_region(shard)
        {
            return Some(Target::Remote(there[attempt % there.len()]));
        }
        if let Some(group) = self.group(shard) {
            if self.may_serve(shard, &group, op.any_replica()) {
                return Some(Target::Local(group));
            }
            let leader = match hint.or_else(|| group.leader().map(|l| l.0)) {
                Some(leader) => Some(leader),
                // A voter learns of the next leader by itself. A metadata learner not added
                // yet never would: it asks the voters below instead.
                None if self.replicas_of(shard).contains(&me) => {
                    Some(group.await_leader(left).await?.0)
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
        // each other replica in turn. Never this node itself: the map may already place a
        // replica here (a new shard, a move) whose group is not open yet; then wait a moment
        // for it instead.
        if let Some(leader) = hint.filter(|l| *l != me) {
            return Some(Target::Remote(leader));
        }
        let mut others: Vec<u64> = self
            .replicas_of(shard)
            .into_iter()
            .filter(|r| *r != me)
            .collect();
        if hint == Some(me) || others.is_empty() {
            tokio::time::sleep(OPENING_PAUSE.min(left)).await;
            return None;
        }
        if op.any_replica() {
            // A stale read goes to the nearest replica, learners included: one in this
            // node's region first.
            others.extend(self.learners_of(shard).into_iter().filter(|l| *l != me));
            let mine = self.config.region.clone();
            if mine.is_some() {
                others.sort_by_key(|r| self.region_of(NodeId(*r)) != mine);
            }
        }
        Some(Target::Remote(others[attempt % others.len()]))
    }

    /// With a region asked for by the request (see [`answered_in_region`]) other than this
    /// node's: the replicas of `shard` there, voters and learners; `None` when none is there
    /// (the read is then served as if no region were asked for).
    fn replicas_in_asked_region(&self, shard: ShardId) -> Option<Vec<u64>> {
        let asked = ASKED_REGION.try_with(Clone::clone).ok()?;
        if self.config.region.as_deref() == Some(asked.as_str()) {
            return None;
        }
        let mut there: Vec<u64> = self.replicas_of(shard);
        there.extend(self.learners_of(shard));
        there.retain(|r| {
            *r != self.node_id && self.region_of(NodeId(*r)).as_deref() == Some(&asked)
        });
        (!there.is_empty()).then_some(there)
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

    /// Asks node `to` to deliver a pub/sub message to its subscribers; how many got it.
    pub(crate) async fn forward_publish(
        &self,
        to: NodeId,
        channel: Bytes,
        message: Bytes,
        left: Duration,
    ) -> Result<u64, PeerError> {
        let request = ForwardRequest {
            shard: 0,
            op: WireOp::Publish { channel, message },
        };
        let payload = postcard::to_stdvec(&request)
            .map_err(|e| PeerError::Failed(to, format!("cannot encode: {e}")))?;
        let answer = self.transport.forward(to, payload, left).await?;
        match postcard::from_bytes(&answer) {
            Ok(ForwardReply::Served(n)) => Ok(n),
            Ok(_) => Ok(0),
            Err(e) => Err(PeerError::Lost(to, format!("undecodable answer: {e}"))),
        }
    }

    /// Sends `op`, which only waits, for `shard` to node `to` alone (no leader hints
    /// followed) and waits up to `left` for its answer: `Ok(None)` when `to` says it cannot
    /// serve it. Dropped before the answer, it tells `to` to stop waiting.
    pub(crate) async fn forward_wait_op<A: DeserializeOwned>(
        &self,
        to: NodeId,
        shard: ShardId,
        op: WireOp,
        left: Duration,
    ) -> Result<Option<A>, ClusterError> {
        let request = ForwardRequest { shard: shard.0, op };
        let payload = postcard::to_stdvec(&request)
            .map_err(|e| ClusterError::Internal(format!("cannot encode: {e}")))?;
        let answer = self
            .transport
            .forward_cancellable(to, payload, left)
            .await
            .map_err(|e| unreachable_node(to, e))?;
        match postcard::from_bytes(&answer) {
            Ok(ForwardReply::Served(answer)) => Ok(Some(answer)),
            Ok(ForwardReply::NotLeader(_)) => Ok(None),
            Ok(ForwardReply::Failed(e)) => Err(ClusterError::Remote(e)),
            Err(e) => Err(ClusterError::Internal(format!(
                "undecodable answer from node {to:016x}: {e}"
            ))),
        }
    }

    async fn forward<R: ShardRequest>(
        &self,
        to: NodeId,
        shard: ShardId,
        op: &R,
        left: Duration,
    ) -> Result<ForwardReply<R::Answer>, PeerError> {
        let request = ForwardRequest {
            shard: shard.0,
            op: op.to_wire(),
        };
        let payload = postcard::to_stdvec(&request)
            .map_err(|e| PeerError::Failed(to, format!("cannot encode: {e}")))?;
        let answer = self.transport.forward(to, payload, left).await?;
        // The request was served, whatever the answer says: never retried as unsent.
        postcard::from_bytes(&answer)
            .map_err(|e| PeerError::Lost(to, format!("undecodable answer: {e}")))
    }

    /// Serves a request another node forwarded: only with a replica here, never forwarding
    /// on. Returns the encoded reply.
    async fn serve_forwarded(&self, payload: &[u8]) -> Vec<u8> {
        let request: ForwardRequest = match postcard::from_bytes(payload) {
            Ok(request) => request,
            Err(e) => {
                tracing::warn!(error = %e, "undecodable forwarded request");
                return encode_reply(&ForwardReply::<()>::Failed(TriremeError::new(
                    ErrorCode::Internal,
                    format!("{UNDECODABLE_FORWARD}: {e}"),
                )));
            }
        };
        let shard = ShardId(request.shard);
        match request.op {
            WireOp::Publish { channel, message } => {
                let receivers = self.deliver_here(&channel, &message);
                encode_reply(&ForwardReply::Served(receivers))
            }
            WireOp::Write(command) => self.serve_here(shard, Write(command)).await,
            WireOp::Search(search) => self.serve_here(shard, search).await,
            WireOp::Wait {
                target,
                seen,
                wait_ms,
            } => {
                let wait = Duration::from_millis(wait_ms);
                match self.wait_here(shard, target.into(), seen, wait).await {
                    Ok(true) => encode_reply(&ForwardReply::Served(())),
                    Ok(false) => encode_reply(&ForwardReply::<()>::NotLeader(None)),
                    Err(e) => encode_reply(&ForwardReply::<()>::Failed(e.to_client())),
                }
            }
            WireOp::OpenWhole(mode, slots, query) => {
                let op = crate::whole_read::OpenWhole {
                    mode: mode.into(),
                    slots,
                    query,
                };
                self.serve_here(shard, op).await
            }
            WireOp::WholePage { read } => match self.serve_whole_page(read).await {
                Ok(page) => encode_reply(&ForwardReply::Served(page)),
                Err(e) => encode_reply(&ForwardReply::<()>::Failed(e.to_client())),
            },
            WireOp::CloseWhole { read } => {
                self.close_whole(read);
                encode_reply(&ForwardReply::Served(()))
            }
            WireOp::Read(mode, slots, query) => {
                let mode = ReadMode::from(mode);
                match query {
                    WireQuery::Get(query) => {
                        self.serve_here(shard, Read { mode, query, slots }).await
                    }
                    WireQuery::Scan(query) => {
                        self.serve_here(shard, Read { mode, query, slots }).await
                    }
                    WireQuery::Count(query) => {
                        self.serve_here(shard, Read { mode, query, slots }).await
                    }
                    WireQuery::Hash(query) => {
                        self.serve_here(shard, Read { mode, query, slots }).await
                    }
                    WireQuery::Set(query) => {
                        self.serve_here(shard, Read { mode, query, slots }).await
                    }
                    WireQuery::List(query) => {
                        self.serve_here(shard, Read { mode, query, slots }).await
                    }
                    WireQuery::SortedSet(query) => {
                        self.serve_here(shard, Read { mode, query, slots }).await
                    }
                    WireQuery::CountExpiring(query) => {
                        self.serve_here(shard, Read { mode, query, slots }).await
                    }
                }
            }
        }
    }

    /// Serves a forwarded `op` with the replica here, if this node may; the encoded reply.
    async fn serve_here<R: ShardRequest>(&self, shard: ShardId, op: R) -> Vec<u8> {
        let Some(group) = self.group(shard) else {
            return encode_reply(&ForwardReply::<R::Answer>::NotLeader(None));
        };
        if !self.may_serve(shard, &group, op.any_replica()) {
            return encode_reply(&ForwardReply::<R::Answer>::NotLeader(
                group.leader().map(|l| l.0),
            ));
        }
        let reply = match op.serve(self, &group).await {
            Ok(answer) => ForwardReply::Served(answer),
            Err(ClusterError::Raft(RaftLayerError::NotLeader { leader, .. })) => {
                ForwardReply::NotLeader(leader.map(|n| NodeId::from_name(&n.name).0))
            }
            Err(e) => ForwardReply::Failed(e.to_client()),
        };
        encode_reply(&reply)
    }
}

/// Encoding our own reply type cannot fail; an empty answer reads as undecodable.
fn encode_reply<A: Serialize>(reply: &ForwardReply<A>) -> Vec<u8> {
    postcard::to_stdvec(reply).unwrap_or_default()
}

/// A forwarded stale read refused because the replica that served it was behind.
fn behind(shard: ShardId, node: u64) -> ClusterError {
    ClusterError::Request(TriremeError::new(
        ErrorCode::Unavailable,
        format!(
            "shard {shard}: node {node:016x} is behind what this node already answered; \
             no replica reachable from here has caught up"
        ),
    ))
}

impl Node {
    /// Whether a stale read of `shard` served elsewhere at log index `applied` may be
    /// answered: not when a replica further along answered through this node before, or
    /// stale reads through one node could go back in time. Raises the floor otherwise.
    fn stale_floor_admits(&self, shard: ShardId, applied: Option<u64>) -> bool {
        let Some(applied) = applied else {
            return true;
        };
        let mut floors = self
            .stale_floors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        let floor = floors.entry(shard).or_default();
        if applied < *floor {
            return false;
        }
        *floor = applied;
        true
    }
}

/// What a read reports as its staleness when the replica cannot bound it: more than any
/// `max_stale`, so such a read is run again on the leader.
pub(crate) const UNKNOWN_STALENESS_MS: u64 = u64::MAX / 2;

/// The freshness of `group`'s replica, read after the rows it served: the removal watermark
/// `removed` then covers every removal the rows reflect (see
/// [`Storage::removal_watermark`]). `view_index` is the applied index of the view it read,
/// when known: exact, where the group's published index may be behind or (an apply
/// published since the view was taken) ahead of it.
fn freshness(group: &ShardGroup, removed: u64, view_index: Option<u64>) -> Freshness {
    let (known_leader, published) = group.leader_and_applied();
    let applied = view_index.unwrap_or(published);
    Freshness {
        known_leader,
        applied,
        removed,
        last_contact_ms: group.staleness_ms().unwrap_or(UNKNOWN_STALENESS_MS),
    }
}

/// Runs `query` on a view of `shard` taken now, over the slots a read that expects the shard
/// to own `expected` must keep to. Called inside [`Storage::read_with_removals`]: a split
/// passes the shard's removal gate and changes the slot range under it, so a split that lands
/// between the ownership check and the view makes the read run again, checked anew.
fn read_view<Q: ReadQuery>(
    storage: &trireme_storage::Storage,
    bootstrap_shards: u32,
    shard: ShardId,
    expected: Option<(u16, u16)>,
    query: &Q,
    with_index: bool,
) -> Result<(Q::Found, Option<u64>), ClusterError> {
    let only = slots_to_read(storage, bootstrap_shards, shard, expected)?;
    let view = storage.shard_view(shard);
    let found = query.run(&view, crate::now_ms(), only)?;
    let index = if with_index {
        Some(view.applied_index()?)
    } else {
        None
    };
    Ok((found, index))
}

/// Which slots a read of `shard` that expects it to own `expected` must keep to: `None` for
/// all it holds. Refuses with [`ErrorCode::Moved`] when the shard here no longer owns all of
/// `expected` (the reader's routing is older than a split).
pub(crate) fn slots_to_read(
    storage: &trireme_storage::Storage,
    bootstrap_shards: u32,
    shard: ShardId,
    expected: Option<(u16, u16)>,
) -> Result<Option<(u16, u16)>, ClusterError> {
    let Some(expected) = expected else {
        return Ok(None);
    };
    match owned_slots(storage, bootstrap_shards, shard)? {
        Some(owned) if owned == expected => Ok(None),
        Some(owned) if owned.0 <= expected.0 && expected.1 <= owned.1 => Ok(Some(expected)),
        _ => Err(moved(shard)),
    }
}

/// The slots this node's replica of `shard` owns: as its state records them once a split
/// touched it, else as the cluster was bootstrapped (`None` for a shard made by a split whose
/// first state has not arrived here).
fn owned_slots(
    storage: &trireme_storage::Storage,
    bootstrap_shards: u32,
    shard: ShardId,
) -> Result<Option<(u16, u16)>, ClusterError> {
    Ok(match storage.slot_range(shard)? {
        Some(owned) => Some(owned),
        None => trireme_types::even_range(bootstrap_shards, shard),
    })
}

impl Node {
    /// [`slots_to_read`] for this node's replica of `shard`.
    pub(crate) fn slots_to_read(
        &self,
        shard: ShardId,
        expected: Option<(u16, u16)>,
    ) -> Result<Option<(u16, u16)>, ClusterError> {
        slots_to_read(&self.storage, self.bootstrap_shards, shard, expected)
    }

    /// [`owned_slots`] of this node's replica of `shard`.
    pub(crate) fn owned_slots(&self, shard: ShardId) -> Result<Option<(u16, u16)>, ClusterError> {
        owned_slots(&self.storage, self.bootstrap_shards, shard)
    }
}

/// The error for a request whose keys a split moved to another shard since it was routed.
pub(crate) fn moved(shard: ShardId) -> ClusterError {
    ClusterError::Remote(TriremeError::new(
        ErrorCode::Moved,
        format!("shard {shard} was split and no longer owns these keys; route the request again"),
    ))
}

fn unreachable_node(to: NodeId, error: PeerError) -> ClusterError {
    ClusterError::Remote(TriremeError::new(
        ErrorCode::Unavailable,
        format!("node {to:016x}: {error}"),
    ))
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
    fn handle(
        &self,
        _from: NodeId,
        payload: Vec<u8>,
    ) -> futures::future::BoxFuture<'static, Vec<u8>> {
        let node = self.0.upgrade();
        Box::pin(async move {
            match node {
                Some(node) => node.serve_forwarded(&payload).await,
                None => encode_reply(&ForwardReply::<()>::Failed(TriremeError::new(
                    ErrorCode::Unavailable,
                    "this node is stopping",
                ))),
            }
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

    fn scan(limit: u32) -> ScanRows {
        ScanRows {
            prefix: Bytes::new(),
            after: None,
            limit,
            from_after: false,
        }
    }

    #[test]
    fn only_point_reads_and_small_scans_stay_on_the_async_threads() {
        assert!(GetKeys(vec![Bytes::from_static(b"k")]).is_cheap());
        assert!(scan(INLINE_SCAN_ROWS).is_cheap());
        assert!(!scan(INLINE_SCAN_ROWS + 1).is_cheap());
        assert!(!scan(u32::MAX).is_cheap(), "an unbounded ?recurse");
        assert!(!CountRows.is_cheap());
    }

    #[test]
    fn only_stale_reads_go_to_any_replica_and_only_writes_are_never_retried() {
        let read = |mode| Read::whole(mode, CountRows);
        assert!(read(ReadMode::Stale).any_replica());
        assert!(!read(ReadMode::Default).any_replica());
        assert!(!read(ReadMode::Consistent).any_replica());
        let write = Write(LogCommand {
            now_ms: 0,
            command: trireme_types::Command::Reap { keys: Vec::new() },
        });
        assert!(!write.any_replica());
        const { assert!(Write::WRITES && !Read::<CountRows>::WRITES) };
    }

    #[test]
    fn replies_decode_as_the_answer_the_sender_expects() {
        // A refusal encoded for any answer type reads back as the sender's own.
        let bytes = encode_reply(&ForwardReply::<()>::NotLeader(Some(7)));
        let back: ForwardReply<CommandResult> = postcard::from_bytes(&bytes).unwrap();
        assert!(matches!(back, ForwardReply::NotLeader(Some(7))));
        let served = encode_reply(&ForwardReply::Served((3u64, Freshness::default())));
        let back: ForwardReply<<Read<CountRows> as ShardRequest>::Answer> =
            postcard::from_bytes(&served).unwrap();
        assert!(matches!(back, ForwardReply::Served((3, _))));
    }
}
