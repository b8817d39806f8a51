//! The request path: key → slot → shard → that shard's group, for reads and writes.
//!
//! Single-key requests go to one group. Multi-key requests are split per shard, sent to the
//! shards concurrently, and are atomic within each shard only. Reads first pass the group's
//! read barrier for the requested mode, then read the shard's rows straight from storage.

use crate::{ClusterError, Node};
use bytes::Bytes;
use futures::future::try_join_all;
use std::collections::BTreeMap;
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

    fn read_meta(
        &self,
        shards: impl IntoIterator<Item = ShardId>,
        found_index: Option<u64>,
    ) -> ReadMeta {
        let mut meta = ReadMeta {
            index: found_index.unwrap_or(0),
            known_leader: true,
            last_contact_ms: 0,
        };
        for shard in shards {
            let (known_leader, applied) = self.group(shard).leader_and_applied();
            meta.known_leader &= known_leader;
            if found_index.is_none() {
                meta.index = meta.index.max(applied);
            }
        }
        meta
    }

    /// Reads one key.
    pub async fn get(
        &self,
        key: &[u8],
        mode: ReadMode,
    ) -> Result<(Option<Record>, ReadMeta), ClusterError> {
        let record = self.get_record(key, mode).await?;
        let meta = self.read_meta(
            [self.shard_of(key)],
            record.as_ref().map(|r| r.modify_index),
        );
        Ok((record, meta))
    }

    /// Reads one key without the freshness metadata (the RESP path has nowhere to put it).
    pub async fn get_record(
        &self,
        key: &[u8],
        mode: ReadMode,
    ) -> Result<Option<Record>, ClusterError> {
        self.check_key(key)?;
        let shard = self.shard_of(key);
        self.group(shard).read_barrier(mode).await?;
        Ok(self.storage.get(shard.0, key, crate::now_ms())?)
    }

    /// Reads several keys (`MGET`); each shard's barrier is passed once.
    pub async fn get_many(
        &self,
        keys: &[Bytes],
        mode: ReadMode,
    ) -> Result<Vec<Option<Record>>, ClusterError> {
        let mut shards: Vec<ShardId> = Vec::new();
        for key in keys {
            self.check_key(key)?;
            shards.push(self.shard_of(key));
        }
        let mut distinct = shards.clone();
        distinct.sort();
        distinct.dedup();
        try_join_all(distinct.iter().map(|s| self.group(*s).read_barrier(mode))).await?;
        let now = crate::now_ms();
        keys.iter()
            .zip(shards)
            .map(|(key, shard)| Ok(self.storage.get(shard.0, key, now)?))
            .collect()
    }

    /// Live keys starting with `prefix`, merged across shards in key order, at most `limit`.
    pub async fn list(
        &self,
        prefix: &[u8],
        mode: ReadMode,
        limit: usize,
    ) -> Result<(Vec<(Bytes, Record)>, ReadMeta), ClusterError> {
        self.check_key(prefix)?;
        let shards: Vec<ShardId> = self.map.shards().collect();
        try_join_all(shards.iter().map(|s| self.group(*s).read_barrier(mode))).await?;
        let now = crate::now_ms();
        let mut merged = Vec::new();
        for shard in &shards {
            merged.extend(self.storage.scan(shard.0, prefix, None, limit, now)?);
        }
        merged.sort_by(|a, b| a.0.cmp(&b.0));
        merged.truncate(limit);
        let found = merged.iter().map(|(_, r)| r.modify_index).max();
        let meta = self.read_meta(shards, found);
        Ok((merged, meta))
    }

    /// One page of a walk over every key, shard by shard (`SCAN`). Reads this replica's state.
    pub fn scan_page(
        &self,
        from: ShardId,
        after: Option<&[u8]>,
        count: usize,
    ) -> Result<ScanPage, ClusterError> {
        let now = crate::now_ms();
        let mut keys = Vec::new();
        let mut shard = from;
        let mut after = after.map(Bytes::copy_from_slice);
        while shard.0 < self.map.shard_count() {
            let want = count.saturating_sub(keys.len()).max(1);
            let rows = self
                .storage
                .scan(shard.0, b"", after.as_deref(), want, now)?;
            let full = rows.len() >= want;
            let last = rows.last().map(|(k, _)| k.clone());
            keys.extend(rows.into_iter().map(|(k, _)| k));
            if full {
                return Ok(ScanPage {
                    keys,
                    next: Some((shard, last)),
                });
            }
            shard = ShardId(shard.0 + 1);
            after = None;
        }
        Ok(ScanPage { keys, next: None })
    }

    /// Number of live keys held here (`DBSIZE`); counts every row, so it is O(keys).
    pub fn key_count(&self) -> Result<u64, ClusterError> {
        let now = crate::now_ms();
        let mut total = 0u64;
        for shard in self.map.shards() {
            let mut after: Option<Bytes> = None;
            loop {
                let rows = self
                    .storage
                    .scan(shard.0, b"", after.as_deref(), 4096, now)?;
                total += rows.len() as u64;
                match rows.last() {
                    Some((k, _)) if rows.len() == 4096 => after = Some(k.clone()),
                    _ => break,
                }
            }
        }
        Ok(total)
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
        Ok(self.group(shard).write(log).await?)
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
