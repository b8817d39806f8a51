//! The request path: key → slot → shard → that shard's group, for reads and writes.
//!
//! Single-key requests go to one shard. Multi-key requests are split per shard, sent to the
//! shards concurrently, and are atomic within each shard only. Each shard operation is served
//! where it can be (see `forward.rs`): by this node's replica when it leads the shard (or for
//! `stale` reads), otherwise by the leader over the peer link.

use crate::forward::{Freshness, ShardAnswer, ShardOp};
use crate::search::SearchQuery;
use crate::{ClusterError, Node};
use bytes::Bytes;
use futures::future::try_join_all;
use std::collections::BTreeMap;
use std::ops::Bound;
use trireme_raft::ReadMode;
use trireme_types::{Command, CommandResult, LogCommand, Record, ShardId};

/// What a reader learns about the freshness of what it read (Consul's `X-Consul-*` headers).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadMeta {
    /// The highest modify index among the results, or the shard's applied index when nothing
    /// was found (`X-Consul-Index`).
    pub index: u64,
    /// Whether the shard(s) had a known leader (`X-Consul-KnownLeader`).
    pub known_leader: bool,
    /// Milliseconds since this replica last heard from its leader; 0 on the leader
    /// (`X-Consul-LastContact`).
    pub last_contact_ms: u64,
}

/// One page of search results.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SearchPage {
    /// How many documents match in all, across every shard.
    pub total: u64,
    /// The requested slice of the matches, in key order.
    pub rows: Vec<(Bytes, Record)>,
}

/// One page of a cluster-wide key walk (RESP `SCAN`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanPage {
    /// Keys found, in shard then key order.
    pub keys: Vec<Bytes>,
    /// Where to continue: the shard and the last key returned in it; `None` when done.
    pub next: Option<(ShardId, Option<Bytes>)>,
}

impl Node {
    fn check_key(&self, key: &[u8]) -> Result<(), ClusterError> {
        Ok(self.config.limits.check_key(key)?)
    }

    /// The shard that owns `key`.
    pub fn shard_of(&self, key: &[u8]) -> ShardId {
        self.map.shard_of_key(key)
    }

    /// Reads one key.
    pub async fn get(
        &self,
        key: &[u8],
        mode: ReadMode,
    ) -> Result<(Option<Record>, ReadMeta), ClusterError> {
        self.check_key(key)?;
        let op = ShardOp::Get(vec![Bytes::copy_from_slice(key)]);
        let (answer, fresh) = self.on_shard(self.shard_of(key), mode, op).await?;
        let record = records(answer)?.pop().flatten();
        let meta = read_meta([fresh], record.as_ref().map(|r| r.modify_index));
        Ok((record, meta))
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
        let mut per_shard: BTreeMap<ShardId, (Vec<usize>, Vec<Bytes>)> = BTreeMap::new();
        for (i, key) in keys.iter().enumerate() {
            self.check_key(key)?;
            let entry = per_shard.entry(self.shard_of(key)).or_default();
            entry.0.push(i);
            entry.1.push(key.clone());
        }
        let answers = try_join_all(per_shard.into_iter().map(
            |(shard, (slots, keys))| async move {
                let (answer, _) = self.on_shard(shard, mode, ShardOp::Get(keys)).await?;
                Ok::<_, ClusterError>((slots, records(answer)?))
            },
        ))
        .await?;
        let mut out = vec![None; keys.len()];
        for (slots, found) in answers {
            for (i, record) in slots.into_iter().zip(found) {
                out[i] = record;
            }
        }
        Ok(out)
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

    /// Live keys starting with `prefix` from `start` on (a page of a collection listing),
    /// merged across shards in key order, at most `limit`. Every shard is asked for `limit`
    /// rows, since any of them may hold the next ones. An inclusive start is read as a scan
    /// after it plus a read of the key itself, sent together.
    pub async fn list_range(
        &self,
        prefix: &[u8],
        start: Bound<&[u8]>,
        mode: ReadMode,
        limit: usize,
    ) -> Result<(Vec<(Bytes, Record)>, ReadMeta), ClusterError> {
        self.check_key(prefix)?;
        let (after, first) = match start {
            Bound::Unbounded => (None, None),
            Bound::Excluded(k) => (Some(Bytes::copy_from_slice(k)), None),
            Bound::Included(k) => (
                Some(Bytes::copy_from_slice(k)),
                Some(Bytes::copy_from_slice(k)),
            ),
        };
        if let Some(after) = &after {
            self.check_key(after)?;
        }
        let prefix = Bytes::copy_from_slice(prefix);
        let limit32 = u32::try_from(limit).unwrap_or(u32::MAX);
        let scans = try_join_all(self.map.shards().map(|shard| {
            let op = ShardOp::Scan {
                prefix: prefix.clone(),
                after: after.clone(),
                limit: limit32,
            };
            self.on_shard(shard, mode, op)
        }));
        let first_key = async {
            match &first {
                Some(key) if key.starts_with(&prefix) => Ok(Some(self.get(key, mode).await?)),
                _ => Ok::<_, ClusterError>(None),
            }
        };
        let (answers, first_read) = futures::try_join!(scans, first_key)?;
        let mut merged = Vec::new();
        let mut fresh = Vec::with_capacity(answers.len());
        for (answer, f) in answers {
            merged.extend(rows(answer)?);
            fresh.push(f);
        }
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        if let (Some(key), Some((Some(record), _))) = (first, first_read) {
            // The start key sorts before everything scanned after it.
            merged.insert(0, (key, record));
        }
        merged.truncate(limit);
        let found = merged.iter().map(|(_, r)| r.modify_index).max();
        Ok((merged, read_meta(fresh, found)))
    }

    /// Searches the documents under `prefix` (a collection) with `query` (see
    /// [`crate::SearchQuery`]): every shard evaluates it over its own rows and sends back
    /// only matches; they are merged in key order, `offset` of them skipped, at most `limit`
    /// kept. The cost is a read of the whole collection per search: there is no index.
    pub async fn search(
        &self,
        prefix: &[u8],
        query: &str,
        offset: usize,
        limit: usize,
        mode: ReadMode,
    ) -> Result<(SearchPage, ReadMeta), ClusterError> {
        self.check_key(prefix)?;
        // Refuse a bad query here, once, before any shard is asked.
        SearchQuery::parse(query)?;
        let prefix = Bytes::copy_from_slice(prefix);
        let want = u32::try_from(offset.saturating_add(limit)).unwrap_or(u32::MAX);
        let answers = try_join_all(self.map.shards().map(|shard| {
            let op = ShardOp::Search {
                prefix: prefix.clone(),
                query: query.to_owned(),
                limit: want,
            };
            self.on_shard(shard, mode, op)
        }))
        .await?;
        let mut total = 0;
        let mut merged = Vec::new();
        let mut fresh = Vec::with_capacity(answers.len());
        for (answer, f) in answers {
            match answer {
                ShardAnswer::Matches { total: n, rows } => {
                    total += n;
                    merged.extend(rows);
                }
                other => return Err(unexpected(&other)),
            }
            fresh.push(f);
        }
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        let rows: Vec<(Bytes, Record)> = merged.into_iter().skip(offset).take(limit).collect();
        let found = rows.iter().map(|(_, r)| r.modify_index).max();
        Ok((SearchPage { total, rows }, read_meta(fresh, found)))
    }

    /// One page of a walk over every key, shard by shard (`SCAN`).
    pub async fn scan_page(
        &self,
        from: ShardId,
        after: Option<&[u8]>,
        count: usize,
    ) -> Result<ScanPage, ClusterError> {
        let mut keys = Vec::new();
        let mut shard = from;
        let mut after = after.map(Bytes::copy_from_slice);
        while shard.0 < self.map.shard_count() {
            let want = count.saturating_sub(keys.len()).max(1);
            let op = ShardOp::Scan {
                prefix: Bytes::new(),
                after: after.take(),
                limit: u32::try_from(want).unwrap_or(u32::MAX),
            };
            let found = rows(self.on_shard(shard, ReadMode::Default, op).await?.0)?;
            let full = found.len() >= want;
            let last = found.last().map(|(k, _)| k.clone());
            keys.extend(found.into_iter().map(|(k, _)| k));
            if full {
                return Ok(ScanPage {
                    keys,
                    next: Some((shard, last)),
                });
            }
            shard = ShardId(shard.0 + 1);
        }
        Ok(ScanPage { keys, next: None })
    }

    /// Number of live keys in the cluster (`DBSIZE`); counts every row, so it is O(keys).
    pub async fn key_count(&self) -> Result<u64, ClusterError> {
        let answers = try_join_all(
            self.map
                .shards()
                .map(|shard| self.on_shard(shard, ReadMode::Default, ShardOp::Count)),
        )
        .await?;
        answers
            .into_iter()
            .map(|(answer, _)| match answer {
                ShardAnswer::Count(n) => Ok(n),
                other => Err(unexpected(&other)),
            })
            .sum()
    }

    /// Proposes `command` to `shard`'s group and waits for it to be applied.
    pub async fn write_shard(
        &self,
        shard: ShardId,
        command: Command,
    ) -> Result<CommandResult, ClusterError> {
        if let Command::Put { value, .. } = &command {
            self.config.limits.check_value(value)?;
        }
        let log = LogCommand {
            now_ms: crate::now_ms(),
            command,
        };
        match self
            .on_shard(shard, ReadMode::Default, ShardOp::Write(log))
            .await?
        {
            (ShardAnswer::Written(result), _) => Ok(result),
            (other, _) => Err(unexpected(&other)),
        }
    }

    /// Proposes a single-key command routed by `key`.
    pub async fn write(&self, key: &[u8], command: Command) -> Result<CommandResult, ClusterError> {
        self.check_key(key)?;
        self.write_shard(self.shard_of(key), command).await
    }

    /// Writes several keys (`MSET`): one command per shard, atomic within each shard.
    pub async fn put_many(&self, pairs: Vec<(Bytes, Bytes)>) -> Result<(), ClusterError> {
        let mut per_shard: BTreeMap<ShardId, Vec<(Bytes, Bytes)>> = BTreeMap::new();
        for (key, value) in pairs {
            self.check_key(&key)?;
            self.config.limits.check_value(&value)?;
            per_shard
                .entry(self.shard_of(&key))
                .or_default()
                .push((key, value));
        }
        try_join_all(
            per_shard
                .into_iter()
                .map(|(shard, pairs)| self.write_shard(shard, Command::PutMany { pairs })),
        )
        .await?;
        Ok(())
    }

    /// Deletes keys (`DEL`): one command per shard; returns how many existed.
    pub async fn delete_many(&self, keys: Vec<Bytes>) -> Result<u64, ClusterError> {
        let mut per_shard: BTreeMap<ShardId, Vec<Bytes>> = BTreeMap::new();
        for key in keys {
            self.check_key(&key)?;
            per_shard.entry(self.shard_of(&key)).or_default().push(key);
        }
        let results = try_join_all(
            per_shard
                .into_iter()
                .map(|(shard, keys)| self.write_shard(shard, Command::Delete { keys, cas: None })),
        )
        .await?;
        Ok(total_deleted(results))
    }

    /// Deletes every key starting with `prefix` in every shard; returns how many existed.
    /// Atomic within each shard, not across shards.
    pub async fn delete_prefix(&self, prefix: &[u8]) -> Result<u64, ClusterError> {
        self.check_key(prefix)?;
        let prefix = Bytes::copy_from_slice(prefix);
        let results = try_join_all(self.map.shards().map(|shard| {
            self.write_shard(
                shard,
                Command::DeletePrefix {
                    prefix: prefix.clone(),
                },
            )
        }))
        .await?;
        Ok(total_deleted(results))
    }
}

/// Combines the freshness of the shards a read touched into Consul's headers.
fn read_meta(fresh: impl IntoIterator<Item = Freshness>, found_index: Option<u64>) -> ReadMeta {
    let mut meta = ReadMeta {
        index: found_index.unwrap_or(0),
        known_leader: true,
        last_contact_ms: 0,
    };
    for f in fresh {
        meta.known_leader &= f.known_leader;
        meta.last_contact_ms = meta.last_contact_ms.max(f.last_contact_ms);
        if found_index.is_none() {
            meta.index = meta.index.max(f.applied);
        }
    }
    meta
}

fn unexpected(answer: &ShardAnswer) -> ClusterError {
    ClusterError::Config(format!("unexpected shard answer {answer:?}"))
}

fn records(answer: ShardAnswer) -> Result<Vec<Option<Record>>, ClusterError> {
    match answer {
        ShardAnswer::Records(records) => Ok(records),
        other => Err(unexpected(&other)),
    }
}

fn rows(answer: ShardAnswer) -> Result<Vec<(Bytes, Record)>, ClusterError> {
    match answer {
        ShardAnswer::Rows(rows) => Ok(rows),
        other => Err(unexpected(&other)),
    }
}

/// The number of keys removed by per-shard delete commands.
fn total_deleted(results: Vec<CommandResult>) -> u64 {
    results
        .into_iter()
        .map(|r| {
            if let CommandResult::Deleted(n) = r {
                n
            } else {
                0
            }
        })
        .sum()
}
