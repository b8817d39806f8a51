//! The request path: key → slot → shard → that shard's group, for reads and writes.
//!
//! Single-key requests go to one shard. Multi-key requests are split per shard, sent to the
//! shards concurrently, and are atomic within each shard only. Each shard operation is served
//! where it can be (see `forward.rs`): by this node's replica when it leads the shard (or for
//! `stale` reads), otherwise by the leader over the peer link.
//!
//! Front ends speak to the node in typed requests and outcomes ([`crate::PutRequest`],
//! [`crate::PutOutcome`], ...); they name log commands only as the steps of a transaction
//! (see [`crate::request`]).

use crate::forward::{
    CountExpiring, CountRows, Freshness, GetKeys, Read, ReadHash, ReadList, ReadSet, ReadSortedSet,
    ScanRows, SearchShard,
};
use crate::read_limit::{Whole, bound_read, too_many_to_combine, too_many_to_read};
use crate::request::{
    DeleteRequest, Deleted, Done, EditOutcome, FromApplied, HashOutcome, IncrOutcome, ListOutcome,
    PutOutcome, PutRequest, SetOutcome, SortedSetOutcome, TransactionOutcome, TransactionRequest,
    TtlChanged,
};
use crate::{ClusterError, Node};
use bytes::Bytes;
use futures::future::try_join_all;
use std::collections::BTreeMap;
use std::future::Future;
use std::ops::Bound;
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;
use trireme_raft::ReadMode;
use trireme_types::{
    Command, CommandResult, ErrorCode, HashAnswer, HashOp, HashRead, ListAnswer, ListOp, ListRead,
    Record, SetAnswer, SetCombine, SetOp, SetRead, ShardId, ShardMap, SortedSetAnswer, SortedSetOp,
    SortedSetRead, StringEdit, TriremeError, TtlUpdate,
};

/// Most bytes of keys and values one write may carry into a log entry (a transaction, an
/// `MSET`'s part for one shard): far below what the peer link takes in one frame, so a
/// follower never has to refuse an entry its leader accepted.
pub const MAX_ENTRY_BYTES: usize = 64 << 20;

/// Refuses a write whose keys and values pass [`MAX_ENTRY_BYTES`].
pub(crate) fn check_entry_size(bytes: usize) -> Result<(), ClusterError> {
    if bytes > MAX_ENTRY_BYTES {
        return Err(ClusterError::Request(TriremeError::new(
            ErrorCode::RequestTooLarge,
            format!(
                "one write may carry at most {} MiB of keys and values; this one carries {bytes} bytes",
                MAX_ENTRY_BYTES >> 20
            ),
        )));
    }
    Ok(())
}

/// What a reader learns about the freshness of what it read (Consul's `X-Consul-*` headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadMeta {
    /// The index of the answer (`X-Consul-Index`): a key's `ModifyIndex`, or for a listing
    /// the construction `ShardIndex` describes. It never goes backwards for the same query,
    /// on any node, and grows whenever the answer changes.
    pub index: u64,
    /// Whether the shard(s) had a known leader (`X-Consul-KnownLeader`).
    pub known_leader: bool,
    /// Milliseconds since this replica last heard from its leader; 0 on the leader
    /// (`X-Consul-LastContact`).
    pub last_contact_ms: u64,
}

/// One page of search results.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchPage {
    /// How many documents match in all, across every shard.
    pub total: u64,
    /// The requested slice of the matches, best first.
    pub rows: Vec<SearchHit>,
}

/// One search result: the document's key, its relevance and its record.
#[derive(Debug, Clone, PartialEq)]
pub struct SearchHit {
    /// The document's key (`collection/key`).
    pub key: Bytes,
    /// Relevance (BM25, computed per shard); higher is better.
    pub score: f32,
    /// The document's record as stored when the shard answered.
    pub record: Record,
}

/// One page of a cluster-wide key walk (RESP `SCAN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    /// Keys found, in shard then key order.
    pub keys: Vec<Bytes>,
    /// The type of each key in `keys`.
    pub kinds: Vec<trireme_types::ValueKind>,
    /// Where to continue: the shard and the last key returned in it; `None` when done.
    pub next: Option<(ShardId, Option<Bytes>)>,
}

/// How long, in all, a request refused because a split moved its keys waits for this
/// node's cluster map to show the split before it gives up; the map changes within a second
/// of the split, unless this node is cut off from the metadata group.
const REROUTE_WAIT: Duration = Duration::from_secs(5);

impl Node {
    pub(crate) fn check_key(&self, key: &[u8]) -> Result<(), ClusterError> {
        Ok(self.config.limits.check_key(key)?)
    }

    /// The shard that owns `key`.
    pub fn shard_of(&self, key: &[u8]) -> ShardId {
        self.shard_map().shard_of_key(key)
    }

    /// Runs `op` with this node's current routing; when a shard refuses it because a split
    /// moved the keys (the refusal guarantees nothing was done), waits for the map to change
    /// and runs it again with the new routing.
    ///
    /// The attempt is boxed: a request's future nests every layer from the front end down to
    /// the peer link, and one more generic layer here put it past the compiler's depth limit.
    pub(crate) async fn routed<T, F, Fut>(&self, mut op: F) -> Result<T, ClusterError>
    where
        F: FnMut(Arc<ShardMap>) -> Fut,
        Fut: Future<Output = Result<T, ClusterError>> + Send,
    {
        let deadline = Instant::now() + REROUTE_WAIT;
        loop {
            let seen = self.map_version();
            let attempt: std::pin::Pin<
                Box<dyn Future<Output = Result<T, ClusterError>> + Send + '_>,
            > = Box::pin(op(self.shard_map()));
            match attempt.await {
                Err(e) if is_moved(&e) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    tracing::debug!(error = %e, seen, "a split moved the keys; waiting for the map");
                    if left.is_zero() || !self.map_change(seen, left).await {
                        tracing::warn!(error = %e, seen, now = self.map_version(), "the map did not change after a split moved the keys");
                        return Err(e);
                    }
                }
                other => return other,
            }
        }
    }

    /// A read of `shard` within the slots `routing` gives it.
    pub(crate) fn read_of<Q>(
        routing: &ShardMap,
        shard: ShardId,
        mode: ReadMode,
        query: Q,
    ) -> Read<Q> {
        let slots = routing.slots_of(shard);
        Read {
            mode,
            query,
            slots: Some((*slots.start(), *slots.end())),
        }
    }

    /// Reads one key.
    pub async fn get(
        &self,
        key: &[u8],
        mode: ReadMode,
    ) -> Result<(Option<Record>, ReadMeta), ClusterError> {
        let (record, meta, _) = self.get_indexed(key, mode).await?;
        Ok((record, meta))
    }

    /// Reads one key, with the index of the answer in the shard that served it.
    pub(crate) async fn get_indexed(
        &self,
        key: &[u8],
        mode: ReadMode,
    ) -> Result<(Option<Record>, ReadMeta, Vec<ShardIndex>), ClusterError> {
        self.check_key(key)?;
        self.get_unchecked(key, mode).await
    }

    /// [`Node::get_indexed`] without the client limits: for internal keys (sessions).
    pub(crate) async fn get_unchecked(
        &self,
        key: &[u8],
        mode: ReadMode,
    ) -> Result<(Option<Record>, ReadMeta, Vec<ShardIndex>), ClusterError> {
        let key = Bytes::copy_from_slice(key);
        let (mut found, fresh, shard) = self
            .routed(|routing| {
                let shard = routing.shard_of_key(&key);
                let read = Self::read_of(&routing, shard, mode, GetKeys(vec![key.clone()]));
                async move {
                    let (found, fresh) = self.on_shard(shard, read).await?;
                    Ok((found, fresh, shard))
                }
            })
            .await?;
        let record = found.pop().flatten();
        let part = ShardIndex::of_key(shard, record.as_ref(), fresh.removed);
        let meta = read_meta([(fresh, part.index)]);
        Ok((record, meta, vec![part]))
    }

    /// Reads one key without the freshness metadata (the RESP path has nowhere to put it).
    pub async fn get_record(
        &self,
        key: &[u8],
        mode: ReadMode,
    ) -> Result<Option<Record>, ClusterError> {
        Ok(self.get(key, mode).await?.0)
    }

    /// Reads several keys (`MGET`): one read per shard, concurrently.
    pub async fn get_many(
        &self,
        keys: &[Bytes],
        mode: ReadMode,
    ) -> Result<Vec<Option<Record>>, ClusterError> {
        for key in keys {
            self.check_key(key)?;
        }
        self.routed(|routing| async move {
            let mut per_shard: BTreeMap<ShardId, (Vec<usize>, Vec<Bytes>)> = BTreeMap::new();
            for (i, key) in keys.iter().enumerate() {
                let entry = per_shard.entry(routing.shard_of_key(key)).or_default();
                entry.0.push(i);
                entry.1.push(key.clone());
            }
            let routing = &routing;
            let answers = try_join_all(per_shard.into_iter().map(
                |(shard, (positions, keys))| async move {
                    let read = Self::read_of(routing, shard, mode, GetKeys(keys));
                    let (found, _) = self.on_shard(shard, read).await?;
                    Ok::<_, ClusterError>((positions, found))
                },
            ))
            .await?;
            let mut out = vec![None; keys.len()];
            for (positions, found) in answers {
                for (i, record) in positions.into_iter().zip(found) {
                    out[i] = record;
                }
            }
            Ok(out)
        })
        .await
    }

    /// Live keys starting with `prefix`, merged across shards in key order, at most `limit`.
    pub async fn list(
        &self,
        prefix: &[u8],
        mode: ReadMode,
        limit: usize,
    ) -> Result<(Vec<(Bytes, Record)>, ReadMeta), ClusterError> {
        self.list_range(prefix, Bound::Unbounded, mode, limit).await
    }

    /// Live keys starting with `prefix`, in key order, as they all were at one moment: a
    /// `consistent` listing (Consul's `?recurse&consistent`). Across several shards it is a
    /// transaction of one prefix read (see [`Node::transaction_across_shards`]: read twice
    /// without the logs first, held only when writes keep moving it). Default and stale
    /// listings read each shard at its own moment instead.
    pub async fn list_consistent(
        &self,
        prefix: &[u8],
    ) -> Result<(Vec<(Bytes, Record)>, ReadMeta), ClusterError> {
        self.check_key(prefix)?;
        if self.cluster_version() < trireme_types::version::since::PREFIX_TRANSACTIONS
            || self.shard_map().shard_count() <= 1
        {
            return self.list(prefix, ReadMode::Consistent, usize::MAX).await;
        }
        let read = Command::ReadPrefix {
            prefix: Bytes::copy_from_slice(prefix),
        };
        let outcome = self.transaction_across_shards(vec![read]).await?;
        match outcome.0.map(|mut results| results.pop()) {
            Ok(Some(CommandResult::Entries { entries, index })) => Ok((
                entries,
                ReadMeta {
                    index,
                    known_leader: true,
                    last_contact_ms: 0,
                },
            )),
            _ => Err(ClusterError::Internal(
                "a prefix read answered something else".into(),
            )),
        }
    }

    /// Live keys starting with `prefix` from `start` on (a page of a collection listing),
    /// merged across shards in key order, at most `limit`. Every shard is asked for `limit`
    /// rows, since any of them may hold the next ones; each shard's rows come from one view
    /// of it (see [`trireme_storage::ShardView`]).
    pub async fn list_range(
        &self,
        prefix: &[u8],
        start: Bound<&[u8]>,
        mode: ReadMode,
        limit: usize,
    ) -> Result<(Vec<(Bytes, Record)>, ReadMeta), ClusterError> {
        self.check_key(prefix)?;
        let (rows, meta, _) = self.list_indexed(prefix, start, mode, limit).await?;
        Ok((rows, meta))
    }

    /// [`Node::list_range`], with each shard's part of the answer's index; the caller checks
    /// the prefix against the client limits (an internal prefix is not a client's).
    pub(crate) async fn list_indexed(
        &self,
        prefix: &[u8],
        start: Bound<&[u8]>,
        mode: ReadMode,
        limit: usize,
    ) -> Result<(Vec<(Bytes, Record)>, ReadMeta, Vec<ShardIndex>), ClusterError> {
        let (after, from_after) = match start {
            Bound::Unbounded => (None, false),
            Bound::Excluded(k) => (Some(Bytes::copy_from_slice(k)), false),
            Bound::Included(k) => (Some(Bytes::copy_from_slice(k)), true),
        };
        if let Some(after) = &after {
            self.check_key(after)?;
        }
        let prefix = Bytes::copy_from_slice(prefix);
        let limit32 = u32::try_from(limit).unwrap_or(u32::MAX);
        let answers = self
            .routed(|routing| {
                let (prefix, after) = (prefix.clone(), after.clone());
                async move {
                    try_join_all(routing.shards().map(|shard| {
                        let query = ScanRows {
                            prefix: prefix.clone(),
                            after: after.clone(),
                            limit: limit32,
                            from_after,
                        };
                        let read = Self::read_of(&routing, shard, mode, query);
                        async move {
                            let (rows, fresh) = self.on_shard(shard, read).await?;
                            Ok::<_, ClusterError>((rows, fresh, shard))
                        }
                    }))
                    .await
                }
            })
            .await?;
        let mut merged = Vec::new();
        let mut fresh = Vec::with_capacity(answers.len());
        let mut parts = Vec::with_capacity(answers.len());
        for (rows, f, shard) in answers {
            let part = ShardIndex::of_rows(
                shard,
                rows.iter().map(|(_, r)| r.modify_index).max(),
                f.removed,
            );
            fresh.push((f, part.index));
            parts.push(part);
            merged.extend(rows);
        }
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        merged.truncate(limit);
        let mut meta = read_meta(fresh);
        meta.index = parts.iter().map(|p| p.index).sum();
        Ok((merged, meta, parts))
    }

    /// Searches the documents of `collection` with `query` (see [`trireme_search`] for the
    /// language): every shard searches its index and sends back its number of matches and the
    /// keys of its best `offset + limit`; they are merged by score, or by the values of the
    /// `sort` fields when it names any (ties by key, so pages are stable), `offset` of them
    /// skipped, at most `limit` kept, and those records read. The counts add up to the exact
    /// total: each document lives in one shard.
    pub async fn search(
        &self,
        collection: &[u8],
        query: &str,
        sort: &[trireme_search::SortKey],
        offset: usize,
        limit: usize,
        mode: ReadMode,
    ) -> Result<(SearchPage, ReadMeta), ClusterError> {
        self.check_key(collection)?;
        // Refuse a bad query here, once, before any shard is asked.
        trireme_search::parse(query)?;
        let collection = Bytes::copy_from_slice(collection);
        let want = u32::try_from(offset.saturating_add(limit)).unwrap_or(u32::MAX);
        let answers = self
            .routed(|routing| {
                let collection = collection.clone();
                async move {
                    try_join_all(routing.shards().map(|shard| {
                        let slots = routing.slots_of(shard);
                        let search = SearchShard {
                            mode: mode.into(),
                            slots: Some((*slots.start(), *slots.end())),
                            collection: collection.clone(),
                            query: query.to_owned(),
                            want,
                            sort: sort.to_vec(),
                        };
                        self.on_shard(shard, search)
                    }))
                    .await
                }
            })
            .await?;
        let mut total = 0;
        let mut merged = Vec::new();
        let mut fresh = Vec::with_capacity(answers.len());
        for (n, hits, f) in answers {
            total += n;
            fresh.push((f, f.applied.max(f.removed)));
            merged.extend(hits);
        }
        // Each shard's matches hold one type under a sort field; two shards may disagree.
        trireme_search::check_one_type(merged.iter().map(|hit| hit.sort.as_slice()), sort)?;
        merged.sort_by(|a, b| a.order(b, sort));
        let page: Vec<trireme_search::Hit> = merged.into_iter().skip(offset).take(limit).collect();
        let keys: Vec<Bytes> = page.iter().map(|hit| hit.key.clone()).collect();
        let records = self.get_many(&keys, mode).await?;
        let rows = page
            .into_iter()
            .zip(records)
            // A record gone since the index's last commit is no result any more.
            .filter_map(|(hit, record)| {
                Some(SearchHit {
                    key: hit.key,
                    score: hit.score,
                    record: record?,
                })
            })
            .collect();
        Ok((SearchPage { total, rows }, read_meta(fresh)))
    }

    /// One page of a walk over every key, shard by shard in id order (`SCAN`). A split
    /// gives its keys to a shard with a higher id than any before, so a walk that began
    /// before the split still meets them (perhaps twice, which `SCAN` allows).
    pub async fn scan_page(
        &self,
        from: ShardId,
        after: Option<&[u8]>,
        count: usize,
    ) -> Result<ScanPage, ClusterError> {
        let mut keys = Vec::new();
        let mut kinds = Vec::new();
        let mut shard = from;
        let mut after = after.map(Bytes::copy_from_slice);
        loop {
            let want = count.saturating_sub(keys.len()).max(1);
            let query = ScanRows {
                prefix: Bytes::new(),
                after: after.take(),
                limit: u32::try_from(want).unwrap_or(u32::MAX),
                from_after: false,
            };
            let answer = self
                .routed(|routing| {
                    let query = query.clone();
                    async move {
                        if shard.0 >= routing.shard_count() {
                            return Ok(None);
                        }
                        let read = Self::read_of(&routing, shard, ReadMode::Default, query);
                        Ok(Some(self.on_shard(shard, read).await?))
                    }
                })
                .await?;
            let Some((found, _)) = answer else { break };
            let full = found.len() >= want;
            let last = found.last().map(|(k, _)| k.clone());
            for (key, record) in found {
                keys.push(key);
                kinds.push(record.kind);
            }
            if full {
                return Ok(ScanPage {
                    keys,
                    kinds,
                    next: Some((shard, last)),
                });
            }
            shard = ShardId(shard.0 + 1);
        }
        Ok(ScanPage {
            keys,
            kinds,
            next: None,
        })
    }

    /// Number of live keys in the cluster (`DBSIZE`); counts every row, so it is O(keys).
    pub async fn key_count(&self) -> Result<u64, ClusterError> {
        let answers = self
            .routed(|routing| async move {
                try_join_all(routing.shards().map(|shard| {
                    let read = Self::read_of(&routing, shard, ReadMode::Default, CountRows);
                    self.on_shard(shard, read)
                }))
                .await
            })
            .await?;
        Ok(answers.into_iter().map(|(n, _)| n).sum())
    }

    /// How many live keys have an expiry, and their average time to live in milliseconds
    /// (0 without any), over every shard: `INFO keyspace`'s `expires` and `avg_ttl`.
    pub async fn expiring_keys(&self) -> Result<(u64, u64), ClusterError> {
        let answers = self
            .routed(|routing| async move {
                try_join_all(routing.shards().map(|shard| {
                    let read = Self::read_of(&routing, shard, ReadMode::Default, CountExpiring);
                    self.on_shard(shard, read)
                }))
                .await
            })
            .await?;
        let (count, sum) = answers
            .into_iter()
            .fold((0u64, 0u64), |(count, sum), ((c, s), _)| {
                (count + c, sum.saturating_add(s))
            });
        Ok((count, sum.checked_div(count).unwrap_or(0)))
    }

    /// Proposes `command` to `shard`'s group, waits for it to be applied, and reads what
    /// applying it returned as the outcome `O`: the one path every write takes. Client limits
    /// are checked by the callers that take client requests, not here: the node's own
    /// writes (its row in the metadata group, reaps) are not bound by them. A shard that no
    /// longer owns a key of the command (split since it was routed) refuses it unapplied,
    /// with [`ErrorCode::Moved`](trireme_types::ErrorCode::Moved).
    pub(crate) async fn write_shard<O: FromApplied>(
        &self,
        shard: ShardId,
        command: Command,
    ) -> Result<O, ClusterError> {
        match self.apply_on_shard(shard, command).await? {
            CommandResult::Moved => Err(crate::forward::moved(shard)),
            result => O::read(result),
        }
    }

    /// Proposes a single-key command, routed by `key` (again, if a split moves the key).
    pub(crate) async fn write_key<O: FromApplied>(
        &self,
        key: &[u8],
        command: Command,
    ) -> Result<O, ClusterError> {
        self.check_key(key)?;
        self.write_unchecked(key, command).await
    }

    /// [`Node::write_key`] without the client limits: for internal keys (sessions).
    pub(crate) async fn write_unchecked<O: FromApplied>(
        &self,
        key: &[u8],
        command: Command,
    ) -> Result<O, ClusterError> {
        self.routed(|routing| self.write_shard(routing.shard_of_key(key), command.clone()))
            .await
    }

    /// Writes one key, on the request's condition: Consul `PUT` (`?cas`, `?flags`), Redis
    /// `SET` (`NX`, `XX`, `GET`, expiries), a document `PUT` (`If-Match`).
    pub async fn put(&self, request: PutRequest) -> Result<PutOutcome, ClusterError> {
        self.config.limits.check_value(&request.value)?;
        let key = request.key.clone();
        self.write_key(&key, request.into_command()).await
    }

    /// Deletes one key, at the request's `ModifyIndex` if it names one; whether the key
    /// existed (and was at that index) and is gone.
    pub async fn delete(&self, request: DeleteRequest) -> Result<bool, ClusterError> {
        let command = Command::Delete {
            keys: vec![request.key.clone()],
            cas: request.if_modify_index,
        };
        let Deleted(n) = self.write_key(&request.key, command).await?;
        Ok(n > 0)
    }

    /// Adds `delta` to the integer at `key`, creating it at 0 and keeping its expiry
    /// (`INCR`, `DECRBY`, ...).
    pub async fn incr(&self, key: Bytes, delta: i64) -> Result<IncrOutcome, ClusterError> {
        let command = Command::Incr {
            key: key.clone(),
            delta,
        };
        self.write_key(&key, command).await
    }

    /// Changes the string at `key` in place (`APPEND`, `SETRANGE`, `INCRBYFLOAT`, `GETDEL`,
    /// `GETEX`). Growing edits carry this node's value limit, so every replica refuses a
    /// value past it the same way.
    pub async fn edit(
        &self,
        key: Bytes,
        mut edit: StringEdit,
    ) -> Result<EditOutcome, ClusterError> {
        let limit = self.config.limits.max_value_bytes as u64;
        match &mut edit {
            StringEdit::Append { bytes, max_len } | StringEdit::SetRange { bytes, max_len, .. } => {
                self.config.limits.check_value(bytes)?;
                *max_len = limit;
            }
            StringEdit::IncrByFloat(_) | StringEdit::GetDel | StringEdit::GetEx(_) => {}
        }
        let command = Command::Edit {
            key: key.clone(),
            edit,
        };
        self.write_key(&key, command).await
    }

    /// A Redis hash command on `key` (`HSET`, `HDEL`, `HINCRBY`, ...). Field names and values
    /// are checked against the limits here, and the hash's field limit travels in the
    /// command, so every replica refuses a hash past it the same way.
    pub async fn hash(&self, key: Bytes, mut op: HashOp) -> Result<HashOutcome, ClusterError> {
        let bytes = key.len() + self.prepare_hash(&mut op)?;
        check_entry_size(bytes)?;
        let command = Command::Hash {
            key: key.clone(),
            op,
        };
        self.write_key(&key, command).await
    }

    /// Checks a hash command's fields and values against the limits and gives it the field
    /// limit; the bytes it carries.
    fn prepare_hash(&self, op: &mut HashOp) -> Result<usize, ClusterError> {
        let limits = &self.config.limits;
        let mut bytes = 0;
        match op {
            HashOp::Set {
                pairs, max_fields, ..
            } => {
                for (field, value) in pairs.iter() {
                    limits.check_member(field)?;
                    limits.check_value(value)?;
                    bytes += field.len() + value.len();
                }
                *max_fields = limits.max_collection_members;
            }
            HashOp::Delete { fields } => {
                for field in fields.iter() {
                    limits.check_member(field)?;
                    bytes += field.len();
                }
            }
            HashOp::IncrBy {
                field, max_fields, ..
            }
            | HashOp::IncrByFloat {
                field, max_fields, ..
            } => {
                limits.check_member(field)?;
                *max_fields = limits.max_collection_members;
            }
            HashOp::Read(_) => {}
        }
        Ok(bytes)
    }

    /// Reads the hash at `key` (`HGET`, `HGETALL`, `HLEN`, ...), the way `mode` says.
    pub async fn hash_read(
        &self,
        key: &[u8],
        read: HashRead,
        mode: ReadMode,
    ) -> Result<HashOutcome, ClusterError> {
        self.check_key(key)?;
        let key = Bytes::copy_from_slice(key);
        let mut read = read;
        let max = self.config.limits.max_collection_read;
        let bounded = match &mut read {
            HashRead::Fields { limit, .. } => bound_read(limit, max, Whole::Unlimited),
            _ => false,
        };
        let query = ReadHash {
            key: key.clone(),
            read,
        };
        let found = self.read_collection(&key, query, mode).await?;
        if bounded && matches!(&found, Ok(HashAnswer::Pairs(pairs)) if pairs.len() as u64 > max) {
            return Err(too_many_to_read("hash", max, "HSCAN"));
        }
        Ok(HashOutcome(found))
    }

    /// Runs `query` of the collection at `key` on its shard; a key of another type is
    /// `WrongType`.
    async fn read_collection<Q, A>(
        &self,
        key: &Bytes,
        query: Q,
        mode: ReadMode,
    ) -> Result<Result<A, ErrorCode>, ClusterError>
    where
        Q: crate::forward::ReadQuery<Found = Result<A, ErrorCode>>,
        A: Send + 'static,
    {
        let found = self
            .routed(|routing| {
                let shard = routing.shard_of_key(key);
                let read = Self::read_of(&routing, shard, mode, query.clone());
                async move { Ok(self.on_shard(shard, read).await?.0) }
            })
            .await?;
        match found {
            Err(ErrorCode::WrongType) => Err(crate::request::wrong_type()),
            found => Ok(found),
        }
    }

    /// A Redis set command on `key` (`SADD`, `SREM`, `SPOP`, `SMOVE`, `S*STORE`). Every key
    /// it names must be in `key`'s shard (the RESP front end answers `CROSSSLOT` for keys in
    /// different slots before it gets here).
    pub async fn set_members(&self, key: Bytes, mut op: SetOp) -> Result<SetOutcome, ClusterError> {
        let bytes = key.len() + self.prepare_set(&mut op)?;
        check_entry_size(bytes)?;
        let command = Command::SetMembers {
            key: key.clone(),
            op,
        };
        self.check_one_shard(&command)?;
        self.write_key(&key, command).await
    }

    /// Reads the set at `key` (`SISMEMBER`, `SMEMBERS`, `SINTER`, ...), the way `mode` says.
    pub async fn set_read(
        &self,
        key: &[u8],
        read: SetRead,
        mode: ReadMode,
    ) -> Result<SetOutcome, ClusterError> {
        let key = Bytes::copy_from_slice(key);
        self.check_one_shard(&Command::SetMembers {
            key: key.clone(),
            op: SetOp::Read(read.clone()),
        })?;
        let mut read = read;
        let max = self.config.limits.max_collection_read;
        let bounded = match &mut read {
            SetRead::Members { limit, .. } => bound_read(limit, max, Whole::Unlimited),
            SetRead::Combine { combine, others } => {
                // The combination has no limit to give: the sets are measured first (each
                // keeps its size in its record), and the answer checked after, as they may
                // have grown in between.
                let mut sizes = Vec::with_capacity(others.len() + 1);
                for set in std::iter::once(&key).chain(others.iter()) {
                    sizes.push(self.set_size(set, mode).await?);
                }
                if combined_size_bound(*combine, &sizes) > max {
                    return Err(too_many_to_combine(max));
                }
                true
            }
            _ => false,
        };
        let query = ReadSet {
            key: key.clone(),
            read,
        };
        let found = self.read_collection(&key, query, mode).await?;
        if bounded
            && matches!(&found, Ok(SetAnswer::Members(members)) if members.len() as u64 > max)
        {
            return Err(too_many_to_read("set", max, "SSCAN"));
        }
        Ok(SetOutcome(found))
    }

    /// How many members the set at `key` has (0 when it is missing; a key of another type is
    /// `WRONGTYPE` at once).
    async fn set_size(&self, key: &Bytes, mode: ReadMode) -> Result<u64, ClusterError> {
        let query = ReadSet {
            key: key.clone(),
            read: SetRead::Len,
        };
        Ok(match self.read_collection(key, query, mode).await? {
            Ok(SetAnswer::Count(n)) => n,
            _ => 0,
        })
    }

    /// A Redis list command on `key` (`LPUSH`, `LPOP`, `LSET`, `LMOVE`, ...). Every key it
    /// names must be in `key`'s shard (the RESP front end answers `CROSSSLOT` first).
    pub async fn list_command(
        &self,
        key: Bytes,
        mut op: ListOp,
    ) -> Result<ListOutcome, ClusterError> {
        let bytes = key.len() + self.prepare_list(&mut op)?;
        check_entry_size(bytes)?;
        let command = Command::List {
            key: key.clone(),
            op,
        };
        self.check_one_shard(&command)?;
        self.write_key(&key, command).await
    }

    /// Reads the list at `key` (`LLEN`, `LRANGE`, `LINDEX`, `LPOS`), the way `mode` says.
    pub async fn list_read(
        &self,
        key: &[u8],
        read: ListRead,
        mode: ReadMode,
    ) -> Result<ListOutcome, ClusterError> {
        self.check_key(key)?;
        let key = Bytes::copy_from_slice(key);
        let max = self.config.limits.max_collection_read;
        let range = matches!(read, ListRead::Range { .. });
        if let ListRead::Range { start, stop } = read {
            // A range that may be long is measured first (a list keeps its length in its
            // record): the read itself has no limit to give.
            let short = start >= 0 && stop >= start && ((stop - start) as u64) < max;
            if !short {
                let query = ReadList {
                    key: key.clone(),
                    read: ListRead::Len,
                };
                if let Ok(ListAnswer::Count(len)) = self.read_collection(&key, query, mode).await?
                    && range_length(start, stop, len) > max
                {
                    return Err(too_many_to_read("list", max, "LRANGE over a shorter range"));
                }
            }
        }
        let query = ReadList {
            key: key.clone(),
            read,
        };
        let found = self.read_collection(&key, query, mode).await?;
        // The list may have grown since it was measured.
        if range && matches!(&found, Ok(ListAnswer::Elements(all)) if all.len() as u64 > max) {
            return Err(too_many_to_read("list", max, "LRANGE over a shorter range"));
        }
        Ok(ListOutcome(found))
    }

    /// A Redis sorted set command on `key` (`ZADD`, `ZREM`, `ZPOPMIN`, ...).
    pub async fn sorted_set(
        &self,
        key: Bytes,
        mut op: SortedSetOp,
    ) -> Result<SortedSetOutcome, ClusterError> {
        let bytes = key.len() + self.prepare_sorted_set(&mut op)?;
        check_entry_size(bytes)?;
        self.check_key(&key)?;
        let command = Command::SortedSet {
            key: key.clone(),
            op,
        };
        self.write_key(&key, command).await
    }

    /// Reads the sorted set at `key` (`ZSCORE`, `ZRANGE`, `ZRANK`, `ZCOUNT`, ...), the way
    /// `mode` says.
    pub async fn sorted_set_read(
        &self,
        key: &[u8],
        read: SortedSetRead,
        mode: ReadMode,
    ) -> Result<SortedSetOutcome, ClusterError> {
        self.check_key(key)?;
        let key = Bytes::copy_from_slice(key);
        let mut read = read;
        let max = self.config.limits.max_collection_read;
        let bounded = match &mut read {
            SortedSetRead::Range { limit, .. } => bound_read(limit, max, Whole::PastMax),
            SortedSetRead::Members { limit, .. } => bound_read(limit, max, Whole::Unlimited),
            _ => false,
        };
        let query = ReadSortedSet {
            key: key.clone(),
            read,
        };
        let found = self.read_collection(&key, query, mode).await?;
        if bounded
            && matches!(&found, Ok(SortedSetAnswer::Pairs(pairs)) if pairs.len() as u64 > max)
        {
            return Err(too_many_to_read(
                "sorted set",
                max,
                "ZRANGE with LIMIT, or ZSCAN",
            ));
        }
        Ok(SortedSetOutcome(found))
    }

    /// Checks a sorted set command's members against the limits and gives it the member
    /// limit; the bytes it carries.
    fn prepare_sorted_set(&self, op: &mut SortedSetOp) -> Result<usize, ClusterError> {
        let limits = &self.config.limits;
        let mut bytes = 0;
        match op {
            SortedSetOp::Add {
                members,
                max_members,
                ..
            } => {
                for (_, member) in members.iter() {
                    limits.check_member(member)?;
                    bytes += member.len() + 8;
                }
                *max_members = limits.max_collection_members;
            }
            SortedSetOp::Remove { members }
            | SortedSetOp::Read(SortedSetRead::Scores { members }) => {
                for member in members.iter() {
                    limits.check_member(member)?;
                    bytes += member.len();
                }
            }
            SortedSetOp::PopFirst { .. } => self.require_cluster_version(
                trireme_types::version::since::SORTED_SET_POP_FIRST,
                "a pop across several sorted sets (BZPOPMIN or BZPOPMAX of more than one key)",
            )?,
            SortedSetOp::Pop { .. } | SortedSetOp::RemoveRange { .. } | SortedSetOp::Read(_) => {}
        }
        Ok(bytes)
    }

    /// Checks a list command's elements against the limits and gives it the length limit;
    /// the bytes it carries.
    fn prepare_list(&self, op: &mut ListOp) -> Result<usize, ClusterError> {
        let limits = &self.config.limits;
        let mut bytes = 0;
        match op {
            ListOp::Push {
                elements, max_len, ..
            }
            | ListOp::Restore {
                elements, max_len, ..
            } => {
                for element in elements.iter() {
                    limits.check_value(element)?;
                    bytes += element.len();
                }
                *max_len = limits.max_collection_members;
            }
            ListOp::Insert {
                pivot,
                element,
                max_len,
                ..
            } => {
                limits.check_value(element)?;
                bytes += pivot.len() + element.len();
                *max_len = limits.max_collection_members;
            }
            ListOp::Set { element, .. } | ListOp::Remove { element, .. } => {
                limits.check_value(element)?;
                bytes += element.len();
            }
            ListOp::Move { max_len, .. } => *max_len = limits.max_collection_members,
            ListOp::Pop { .. }
            | ListOp::PopFirst { .. }
            | ListOp::Trim { .. }
            | ListOp::Read(_) => {}
        }
        Ok(bytes)
    }

    /// Refuses a command whose keys are not all in one shard.
    fn check_one_shard(&self, command: &Command) -> Result<(), ClusterError> {
        let keys = command.keys();
        for key in &keys {
            self.check_key(key)?;
        }
        let map = self.shard_map();
        let mut shards = keys.iter().map(|k| map.shard_of_key(k));
        let first = shards.next();
        if shards.any(|s| Some(s) != first) {
            return Err(ClusterError::Request(TriremeError::new(
                ErrorCode::InvalidArgument,
                "the keys of one command must all be in one shard: put them under one {hash tag}",
            )));
        }
        Ok(())
    }

    /// Checks a set command's members against the limits, gives it the member limit and,
    /// for `SPOP`, the seed that picks the members; the bytes it carries.
    fn prepare_set(&self, op: &mut SetOp) -> Result<usize, ClusterError> {
        let limits = &self.config.limits;
        let mut bytes = 0;
        match op {
            SetOp::Add {
                members,
                max_members,
            } => {
                for member in members.iter() {
                    limits.check_member(member)?;
                    bytes += member.len();
                }
                *max_members = limits.max_collection_members;
            }
            SetOp::Remove { members } => {
                for member in members.iter() {
                    limits.check_member(member)?;
                    bytes += member.len();
                }
            }
            SetOp::Move {
                member,
                max_members,
                ..
            } => {
                limits.check_member(member)?;
                bytes += member.len();
                *max_members = limits.max_collection_members;
            }
            SetOp::Store { max_members, .. } => *max_members = limits.max_collection_members,
            SetOp::Pop { seed, .. } => *seed = rand::random(),
            SetOp::Read(_) => {}
        }
        Ok(bytes)
    }

    /// Applies a Redis transaction as one log entry of the shard its keys live in: all of
    /// its commands, or none if a watched key changed. Keys in more than one shard are
    /// refused (the RESP front end answers `CROSSSLOT` before it gets here).
    pub async fn transaction(
        &self,
        request: TransactionRequest,
    ) -> Result<TransactionOutcome, ClusterError> {
        let mut commands = request.commands;
        let mut bytes = 0;
        for c in &mut commands {
            match c {
                Command::Hash { op, .. } => bytes += self.prepare_hash(op)?,
                Command::SetMembers { op, .. } => bytes += self.prepare_set(op)?,
                Command::List { op, .. } => bytes += self.prepare_list(op)?,
                Command::SortedSet { op, .. } => bytes += self.prepare_sorted_set(op)?,
                _ => {}
            }
        }
        let over_prefixes = commands
            .iter()
            .any(|c| matches!(c, Command::DeletePrefix { .. } | Command::ReadPrefix { .. }));
        let command = Command::Transaction {
            watches: request.watches,
            commands,
        };
        let keys: Vec<Bytes> = command.keys().into_iter().cloned().collect();
        if keys.is_empty() && !over_prefixes {
            return Ok(TransactionOutcome(Ok(Vec::new())));
        }
        for key in &keys {
            self.check_key(key)?;
        }
        bytes += keys.iter().map(Bytes::len).sum::<usize>();
        if let Command::Transaction { commands, .. } = &command {
            for c in commands {
                bytes += self.checked_value_bytes(c)?;
            }
        }
        check_entry_size(bytes)?;
        if over_prefixes {
            self.require_cluster_version(
                trireme_types::version::since::PREFIX_TRANSACTIONS,
                "a prefix read or delete in a transaction",
            )?;
            let Command::Transaction { watches, commands } = command else {
                return Err(ClusterError::Internal("a transaction was built".into()));
            };
            for c in &commands {
                if let Command::DeletePrefix { prefix } | Command::ReadPrefix { prefix } = c {
                    self.check_key(prefix)?;
                }
            }
            if !watches.is_empty() {
                return Err(ClusterError::Request(TriremeError::new(
                    ErrorCode::InvalidArgument,
                    "a transaction that watches keys cannot read or delete a prefix",
                )));
            }
            // A prefix's keys may be in every shard.
            return self.transaction_across_shards(commands).await;
        }
        let first = keys[0].clone();
        let map = self.shard_map();
        let shard = map.shard_of_key(&first);
        if keys.iter().any(|k| map.shard_of_key(k) != shard) {
            let Command::Transaction { watches, commands } = command else {
                return Err(ClusterError::Internal("a transaction was built".into()));
            };
            return self.across_shards_key_by_key(watches, commands).await;
        }
        self.write_key(&first, command).await
    }

    /// The bytes of the values `command` writes, each checked against the value limit (a
    /// growing edit's bytes count as a value's, as `edit` checks them alone).
    pub(crate) fn checked_value_bytes(&self, command: &Command) -> Result<usize, ClusterError> {
        let mut bytes = 0;
        match command {
            Command::Put { value, .. } => {
                self.config.limits.check_value(value)?;
                bytes += value.len();
            }
            Command::Edit {
                edit:
                    StringEdit::Append { bytes: added, .. } | StringEdit::SetRange { bytes: added, .. },
                ..
            } => {
                self.config.limits.check_value(added)?;
                bytes += added.len();
            }
            Command::PutMany { pairs } => {
                for (_, value) in pairs {
                    self.config.limits.check_value(value)?;
                    bytes += value.len();
                }
            }
            _ => {}
        }
        Ok(bytes)
    }

    /// Changes the expiry of `key` (`EXPIRE`, `PERSIST`); whether the key exists and its
    /// expiry changed (when clearing: whether it had one).
    pub async fn set_ttl(&self, key: Bytes, ttl: TtlUpdate) -> Result<bool, ClusterError> {
        let command = Command::SetTtl {
            key: key.clone(),
            ttl,
        };
        let TtlChanged(changed) = self.write_key(&key, command).await?;
        Ok(changed)
    }

    /// Writes several keys (`MSET`): one command per shard, atomic within each shard. A
    /// shard that refuses its part after a split gets it again, routed anew (writing the
    /// same values twice is harmless).
    pub async fn put_many(&self, pairs: Vec<(Bytes, Bytes)>) -> Result<(), ClusterError> {
        for (key, value) in &pairs {
            self.check_key(key)?;
            self.config.limits.check_value(value)?;
        }
        check_entry_size(pairs.iter().map(|(k, v)| k.len() + v.len()).sum())?;
        self.routed(|routing| {
            let mut per_shard: BTreeMap<ShardId, Vec<(Bytes, Bytes)>> = BTreeMap::new();
            for (key, value) in &pairs {
                per_shard
                    .entry(routing.shard_of_key(key))
                    .or_default()
                    .push((key.clone(), value.clone()));
            }
            async move {
                try_join_all(per_shard.into_iter().map(|(shard, pairs)| {
                    self.write_shard::<Done>(shard, Command::PutMany { pairs })
                }))
                .await
                .map(drop)
            }
        })
        .await
    }

    /// Deletes keys (`DEL`): one command per shard; returns how many existed. Each shard's
    /// part is routed again on its own if a split refuses it, so the count stays exact.
    pub async fn delete_many(&self, keys: Vec<Bytes>) -> Result<u64, ClusterError> {
        for key in &keys {
            self.check_key(key)?;
        }
        let mut per_shard: BTreeMap<ShardId, Vec<Bytes>> = BTreeMap::new();
        let routing = self.shard_map();
        for key in keys {
            per_shard
                .entry(routing.shard_of_key(&key))
                .or_default()
                .push(key);
        }
        let deleted = try_join_all(per_shard.into_values().map(|keys| async move {
            // All in one shard under the first routing; possibly two after a split. The keys
            // a shard deleted leave `left`, so a rerouted attempt asks only for the rest.
            let left = std::sync::Mutex::new(keys);
            let total = std::sync::atomic::AtomicU64::new(0);
            self.routed(|routing| {
                let (left, total) = (&left, &total);
                async move {
                    loop {
                        let keys = left.lock().unwrap_or_else(|e| e.into_inner()).clone();
                        let Some(first) = keys.first() else {
                            return Ok(());
                        };
                        let shard = routing.shard_of_key(first);
                        let here: Vec<Bytes> = keys
                            .into_iter()
                            .filter(|k| routing.shard_of_key(k) == shard)
                            .collect();
                        let command = Command::Delete {
                            keys: here.clone(),
                            cas: None,
                        };
                        let Deleted(n) = self.write_shard::<Deleted>(shard, command).await?;
                        total.fetch_add(n, std::sync::atomic::Ordering::Relaxed);
                        let done: std::collections::HashSet<&Bytes> = here.iter().collect();
                        left.lock()
                            .unwrap_or_else(|e| e.into_inner())
                            .retain(|k| !done.contains(k));
                    }
                }
            })
            .await?;
            Ok::<_, ClusterError>(total.into_inner())
        }))
        .await?;
        Ok(deleted.into_iter().sum())
    }

    /// Deletes every key starting with `prefix` in every shard; returns how many existed.
    /// From cluster version 4 one transaction across every shard: all or nothing, and no
    /// reader of a key or a consistent listing sees some of the keys gone and others not.
    /// Before, or when a shard holds more keys under the prefix than one transaction may
    /// (see [`crate::txn`]), atomic within each shard only (and a split landing meanwhile
    /// could leave the keys it hands over untouched).
    pub async fn delete_prefix(&self, prefix: &[u8]) -> Result<u64, ClusterError> {
        self.check_key(prefix)?;
        let prefix = Bytes::copy_from_slice(prefix);
        if self.cluster_version() >= trireme_types::version::since::PREFIX_TRANSACTIONS
            && self.shard_map().shard_count() > 1
        {
            // One transaction over every shard: all of it is deleted, or none.
            let delete = Command::DeletePrefix {
                prefix: prefix.clone(),
            };
            match self.transaction_across_shards(vec![delete]).await {
                Ok(outcome) => {
                    return match outcome.0.map(|mut results| results.pop()) {
                        Ok(Some(CommandResult::Deleted(n))) => Ok(n),
                        _ => Err(ClusterError::Internal(
                            "a prefix delete answered something else".into(),
                        )),
                    };
                }
                // Too many keys for one transaction: shard by shard, as before.
                Err(e) if e.to_client().code == ErrorCode::RequestTooLarge => {
                    tracing::info!(prefix = ?String::from_utf8_lossy(&prefix), "a recursive delete too large for one transaction goes shard by shard");
                }
                Err(e) => return Err(e),
            }
        }
        let deleted = try_join_all(self.shard_map().shards().map(|shard| {
            let command = Command::DeletePrefix {
                prefix: prefix.clone(),
            };
            self.write_shard::<Deleted>(shard, command)
        }))
        .await?;
        Ok(deleted.into_iter().map(|Deleted(n)| n).sum())
    }
}

/// Whether `error` says a group cannot answer just now (no leader, or not open on the node
/// asked yet): worth trying again shortly, with a newer map.
pub(crate) fn is_transient(error: &ClusterError) -> bool {
    matches!(
        error.to_client().code,
        ErrorCode::NoLeader | ErrorCode::Unavailable
    )
}

/// Whether `error` is a shard's refusal of keys a split moved away.
pub(crate) fn is_moved(error: &ClusterError) -> bool {
    matches!(error, ClusterError::Remote(e) | ClusterError::Request(e) if e.code == ErrorCode::Moved)
}

/// One shard's part of the index of a Consul query (`X-Consul-Index`).
///
/// Each shard has a log of its own, so indexes of two shards cannot be compared; within one
/// shard they can, on every replica. A shard's part is the highest `ModifyIndex` among the
/// rows it answered with, or its removal watermark when that is higher (a row that left the
/// answer took the highest index with it). A query's index is the sum of its shards' parts:
/// each part only grows (a change writes a higher index, a removal raises the watermark, a
/// split raises both shards' watermarks to the split's index and the new shard's log
/// continues from there), so the sum only grows, and it grows whenever any part does. One
/// key's index is its `ModifyIndex`, as in Consul.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ShardIndex {
    pub shard: ShardId,
    pub index: u64,
}

impl ShardIndex {
    /// The part of a listing whose rows' highest `ModifyIndex` is `highest_found`.
    pub(crate) fn of_rows(shard: ShardId, highest_found: Option<u64>, removed: u64) -> Self {
        let index = highest_found.unwrap_or(0).max(removed);
        Self { shard, index }
    }

    /// The index of one key: its `ModifyIndex`, or the watermark when it does not exist.
    pub(crate) fn of_key(shard: ShardId, found: Option<&Record>, removed: u64) -> Self {
        let index = found.map_or(removed, |r| r.modify_index);
        Self { shard, index }
    }
}

/// Combines the freshness of the shards a read touched, and their parts of the index, into
/// Consul's headers.
fn read_meta(parts: impl IntoIterator<Item = (Freshness, u64)>) -> ReadMeta {
    let mut meta = ReadMeta {
        index: 0,
        known_leader: true,
        last_contact_ms: 0,
    };
    for (f, index) in parts {
        meta.known_leader &= f.known_leader;
        meta.last_contact_ms = meta.last_contact_ms.max(f.last_contact_ms);
        meta.index += index;
    }
    meta
}

/// The most members `SINTER`, `SUNION` or `SDIFF` can answer over sets of `sizes` (the
/// first is the command's own key).
fn combined_size_bound(combine: SetCombine, sizes: &[u64]) -> u64 {
    match combine {
        SetCombine::Intersection => sizes.iter().copied().min().unwrap_or(0),
        SetCombine::Union => sizes.iter().fold(0, |sum, n| sum.saturating_add(*n)),
        SetCombine::Difference => sizes.first().copied().unwrap_or(0),
    }
}

/// How many elements `LRANGE start stop` takes from a list of `len`.
fn range_length(start: i64, stop: i64, len: u64) -> u64 {
    trireme_types::collection::list_range(start, stop, len).map_or(0, |(from, to)| to - from + 1)
}
