//! Backup and restore on a node's side: a shard's live keys streamed out from one point in
//! time, and backed-up keys written back, routed by the cluster's current shape.
//!
//! The export is served by the shard's leader after a linearizable read barrier, from one
//! storage snapshot: every key acknowledged before the request is in it, and nothing written
//! after the snapshot is. Shards are exported one by one, so a backup is a consistent cut of
//! each shard, not of the cluster as a whole. Internal keys (sessions) and locks are left
//! out: sessions do not outlive their clients.

use crate::forward::Write;
use crate::request::FromApplied;
use crate::{ClusterError, Node};
use bytes::Bytes;
use std::collections::BTreeMap;
use tokio::sync::mpsc;
use trireme_raft::ReadMode;
use trireme_types::backup::{
    BackupEntry, Frame, HASH_ENTRY_BYTES, HashEntry, ListEntry, SetEntry, SortedSetEntry,
    encode_frame,
};
use trireme_types::collection::member_prefix;
use trireme_types::session::is_internal_key;
use trireme_types::{
    Command, CommandResult, ErrorCode, HashOp, ListOp, LogCommand, PutCondition, Record,
    SLOT_COUNT, Score, SetOp, ShardId, SortedSetOp, TriremeError, TtlUpdate, ValueKind,
    ZAddCompare, ZAddWhen, key_slot,
};

/// Bytes of frames sent at once.
const CHUNK: usize = 256 << 10;

/// Whether a restore's batch for one shard came back with keys a split moved away.
struct Restored {
    moved: bool,
    /// Why a hash was refused (a key of that name is not a hash, or it would pass the
    /// field limit).
    refused: Option<ErrorCode>,
}

impl FromApplied for Restored {
    const WHAT: &'static str = "a restore batch";

    fn from_applied(result: CommandResult) -> Result<Self, CommandResult> {
        match result {
            CommandResult::Batch(results) => Ok(Restored {
                moved: results.iter().any(|r| matches!(r, CommandResult::Moved)),
                refused: results.iter().find_map(|r| match r {
                    CommandResult::Hash(Err(code))
                    | CommandResult::SetMembers(Err(code))
                    | CommandResult::List(Err(code))
                    | CommandResult::SortedSet(Err(code)) => Some(*code),
                    _ => None,
                }),
            }),
            other => Err(other),
        }
    }
}

/// Walks the members of version `version` (its record's `CreateIndex`) of the collection at
/// `key` in `view` and hands `emit` its frames, each
/// made by `frame` from the items `item` makes of members (with their sizes), cut at
/// [`HASH_ENTRY_BYTES`] so that each fits a restore request.
fn collection_frames<T>(
    view: &trireme_storage::ShardView<'_>,
    key: &[u8],
    version: u64,
    item: impl Fn(&[u8], &[u8]) -> (T, usize),
    frame: impl Fn(Vec<T>) -> Frame,
    emit: &mut impl FnMut(Frame),
) -> Result<(), trireme_storage::StorageError> {
    let mut part = Vec::new();
    let mut bytes = 0;
    view.for_each_member(&member_prefix(key, version), |member, value| {
        let (one, size) = item(member, value);
        // Each item costs its framing too: a list of empty strings is not free.
        let size = size + 16;
        if bytes + size > HASH_ENTRY_BYTES && !part.is_empty() {
            emit(frame(std::mem::take(&mut part)));
            bytes = 0;
        }
        bytes += size;
        part.push(one);
    })?;
    if !part.is_empty() {
        emit(frame(part));
    }
    Ok(())
}

/// Adds to its shard's batch the command that restores a part of the collection at `key`,
/// then its expiry.
fn push_collection(
    per_shard: &mut BTreeMap<ShardId, Vec<Command>>,
    routing: &trireme_types::ShardMap,
    key: &Bytes,
    add: Command,
    expires_at_ms: Option<u64>,
) {
    let commands = per_shard.entry(routing.shard_of_key(key)).or_default();
    commands.push(add);
    if let Some(at) = expires_at_ms {
        commands.push(Command::SetTtl {
            key: key.clone(),
            ttl: TtlUpdate::At(at),
        });
    }
}

impl Node {
    /// Streams `shard`'s live keys as backup frames (entries, then a shard end frame with
    /// their count and slot range), in chunks. Only the shard's leader exports; another node
    /// answers `NotLeader`.
    pub async fn export_shard(
        &self,
        shard: ShardId,
    ) -> Result<mpsc::Receiver<Result<Bytes, ClusterError>>, ClusterError> {
        // The metadata group is not a data shard: its rows (the ACL store among them) are
        // never exported.
        let group = (shard != crate::meta::META_SHARD)
            .then(|| self.group(shard))
            .flatten()
            .ok_or_else(|| {
                ClusterError::Request(TriremeError::new(
                    ErrorCode::NotFound,
                    format!(
                        "node {} holds no replica of shard {shard}",
                        self.config.name
                    ),
                ))
            })?;
        group.read_barrier(ReadMode::Consistent).await?;
        let bootstrap_shards = self.bootstrap_shards;
        let storage = self.storage.clone();
        let (tx, rx) = mpsc::channel(4);
        tokio::task::spawn_blocking(move || {
            let view = storage.shard_view(shard);
            let now = crate::now_ms();
            let mut chunk = Vec::with_capacity(CHUNK);
            let mut entries = 0u64;
            let mut gone = false;
            let mut corrupt = None;
            // The range from the same snapshot as the rows: a split applied just before
            // shows in both, so the stream never claims slots whose rows already left.
            let slots = match view.slot_range() {
                Ok(Some(range)) => Some(range),
                Ok(None) => trireme_types::even_range(bootstrap_shards, shard),
                Err(e) => {
                    let _ = tx.blocking_send(Err(ClusterError::Storage(e)));
                    return;
                }
            };
            let walked = view.for_each_record_while(|key, raw| {
                let owned = slots.is_none_or(|(a, b)| (a..=b).contains(&key_slot(key)));
                if !owned || is_internal_key(key) {
                    return true;
                }
                let record = match Record::decode(raw) {
                    Ok(record) => record,
                    Err(e) => {
                        corrupt = Some(format!("key {:?}: {e}", String::from_utf8_lossy(key)));
                        return false;
                    }
                };
                if record.is_expired(now) {
                    return true;
                }
                let mut emit = |frame: Frame| {
                    chunk.extend(encode_frame(&frame));
                    entries += 1;
                    // Sent as it fills: a large collection is never all in memory.
                    if chunk.len() >= CHUNK && !gone {
                        let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK));
                        gone = tx.blocking_send(Ok(Bytes::from(full))).is_err();
                    }
                };
                let (key_bytes, expires_at_ms) =
                    (Bytes::copy_from_slice(key), record.expires_at_ms);
                let walked = match record.kind {
                    ValueKind::String => {
                        emit(Frame::Entry(BackupEntry {
                            key: key_bytes,
                            value: record.value,
                            flags: record.flags,
                            expires_at_ms,
                        }));
                        Ok(())
                    }
                    ValueKind::Hash => collection_frames(
                        &view,
                        key,
                        record.create_index,
                        |field, value| {
                            let size = field.len() + value.len();
                            let pair =
                                (Bytes::copy_from_slice(field), Bytes::copy_from_slice(value));
                            (pair, size)
                        },
                        |fields| {
                            Frame::Hash(HashEntry {
                                key: key_bytes.clone(),
                                fields,
                                expires_at_ms,
                            })
                        },
                        &mut emit,
                    ),
                    ValueKind::Set => collection_frames(
                        &view,
                        key,
                        record.create_index,
                        |member, _| (Bytes::copy_from_slice(member), member.len()),
                        |members| {
                            Frame::Set(SetEntry {
                                key: key_bytes.clone(),
                                members,
                                expires_at_ms,
                            })
                        },
                        &mut emit,
                    ),
                    ValueKind::SortedSet => collection_frames(
                        &view,
                        key,
                        record.create_index,
                        |member, score| {
                            let pair = (
                                Bytes::copy_from_slice(member),
                                // Every member row holds a score it was written with.
                                Score::from_row(score).unwrap_or(Score::ZERO),
                            );
                            (pair, member.len() + 8)
                        },
                        |members| {
                            Frame::SortedSet(SortedSetEntry {
                                key: key_bytes.clone(),
                                members,
                                expires_at_ms,
                            })
                        },
                        &mut emit,
                    ),
                    ValueKind::List => {
                        let from = std::cell::Cell::new(0u64);
                        collection_frames(
                            &view,
                            key,
                            record.create_index,
                            |_, element| (Bytes::copy_from_slice(element), element.len()),
                            |elements| {
                                let first = from.get();
                                from.set(first + elements.len() as u64);
                                Frame::List(ListEntry {
                                    key: key_bytes.clone(),
                                    from: first,
                                    elements,
                                    expires_at_ms,
                                })
                            },
                            &mut emit,
                        )
                    }
                };
                if let Err(e) = walked {
                    corrupt = Some(format!(
                        "the members of {:?}: {e}",
                        String::from_utf8_lossy(key)
                    ));
                    return false;
                }
                if chunk.len() >= CHUNK {
                    let full = std::mem::replace(&mut chunk, Vec::with_capacity(CHUNK));
                    // The receiver is gone when the client hung up: stop there.
                    gone = tx.blocking_send(Ok(Bytes::from(full))).is_err();
                }
                !gone
            });
            let last = match (walked, corrupt) {
                (Err(e), _) => Err(ClusterError::Storage(e)),
                (Ok(()), Some(what)) => Err(ClusterError::Internal(format!(
                    "shard {shard} holds an undecodable record, {what}"
                ))),
                (Ok(()), None) => {
                    let (first_slot, last_slot) = slots.unwrap_or((0, SLOT_COUNT - 1));
                    chunk.extend(encode_frame(&Frame::ShardEnd {
                        entries,
                        first_slot,
                        last_slot,
                    }));
                    Ok(Bytes::from(chunk))
                }
            };
            if !gone {
                let _ = tx.blocking_send(last);
            }
        });
        Ok(rx)
    }

    /// Writes backed-up keys with their flags and expiry, and hashes, sets and lists (or
    /// parts of them) with their fields, members or elements and expiry; keys already expired are skipped. One batch per shard of the
    /// current map; returns how many entries were written. Other frames are refused.
    pub async fn restore(&self, entries: Vec<Frame>) -> Result<u64, ClusterError> {
        let now = crate::now_ms();
        let mut live = Vec::with_capacity(entries.len());
        let mut bytes = 0;
        for frame in entries {
            let (key, expires_at_ms) = match &frame {
                Frame::Entry(e) => {
                    self.config.limits.check_value(&e.value)?;
                    bytes += e.value.len();
                    (e.key.clone(), e.expires_at_ms)
                }
                Frame::Hash(h) => {
                    for (field, value) in &h.fields {
                        self.config.limits.check_member(field)?;
                        self.config.limits.check_value(value)?;
                        bytes += field.len() + value.len();
                    }
                    (h.key.clone(), h.expires_at_ms)
                }
                Frame::Set(set) => {
                    for member in &set.members {
                        self.config.limits.check_member(member)?;
                        bytes += member.len();
                    }
                    (set.key.clone(), set.expires_at_ms)
                }
                Frame::List(list) => {
                    for element in &list.elements {
                        self.config.limits.check_value(element)?;
                        bytes += element.len();
                    }
                    (list.key.clone(), list.expires_at_ms)
                }
                Frame::SortedSet(sorted) => {
                    for (member, _) in &sorted.members {
                        self.config.limits.check_member(member)?;
                        bytes += member.len() + 8;
                    }
                    (sorted.key.clone(), sorted.expires_at_ms)
                }
                Frame::End { .. } | Frame::ShardEnd { .. } => {
                    return Err(ClusterError::Request(TriremeError::new(
                        ErrorCode::InvalidArgument,
                        "a restore carries entries only, not end marks",
                    )));
                }
            };
            self.check_key(&key)?;
            bytes += key.len();
            if expires_at_ms.is_none_or(|at| at > now) {
                live.push(frame);
            }
        }
        crate::router::check_entry_size(bytes)?;
        let max_fields = self.config.limits.max_collection_members;
        let written = live.len() as u64;
        self.routed(|routing| {
            let mut per_shard: BTreeMap<ShardId, Vec<Command>> = BTreeMap::new();
            for frame in &live {
                match frame {
                    Frame::Entry(e) => per_shard
                        .entry(routing.shard_of_key(&e.key))
                        .or_default()
                        .push(Command::Put {
                            key: e.key.clone(),
                            value: e.value.clone(),
                            flags: Some(e.flags),
                            condition: PutCondition::Always,
                            ttl: e.expires_at_ms.map_or(TtlUpdate::Clear, TtlUpdate::At),
                            return_previous: false,
                        }),
                    Frame::Hash(h) => {
                        let op = HashOp::Set {
                            pairs: h.fields.clone(),
                            only_new: false,
                            max_fields,
                        };
                        let add = Command::Hash {
                            key: h.key.clone(),
                            op,
                        };
                        push_collection(&mut per_shard, &routing, &h.key, add, h.expires_at_ms);
                    }
                    Frame::Set(set) => {
                        let op = SetOp::Add {
                            members: set.members.clone(),
                            max_members: max_fields,
                        };
                        let add = Command::SetMembers {
                            key: set.key.clone(),
                            op,
                        };
                        push_collection(&mut per_shard, &routing, &set.key, add, set.expires_at_ms);
                    }
                    Frame::List(list) => {
                        let op = ListOp::Restore {
                            elements: list.elements.clone(),
                            from: list.from,
                            max_len: max_fields,
                        };
                        let add = Command::List {
                            key: list.key.clone(),
                            op,
                        };
                        push_collection(
                            &mut per_shard,
                            &routing,
                            &list.key,
                            add,
                            list.expires_at_ms,
                        );
                    }
                    Frame::SortedSet(sorted) => {
                        let op = SortedSetOp::Add {
                            members: sorted
                                .members
                                .iter()
                                .map(|(m, s)| (*s, m.clone()))
                                .collect(),
                            when: ZAddWhen::Always,
                            compare: ZAddCompare::Any,
                            increment: false,
                            max_members: max_fields,
                        };
                        let add = Command::SortedSet {
                            key: sorted.key.clone(),
                            op,
                        };
                        push_collection(
                            &mut per_shard,
                            &routing,
                            &sorted.key,
                            add,
                            sorted.expires_at_ms,
                        );
                    }
                    Frame::End { .. } | Frame::ShardEnd { .. } => {}
                }
            }
            async move {
                futures::future::try_join_all(per_shard.into_iter().map(
                    |(shard, puts)| async move {
                        let log = LogCommand {
                            now_ms: crate::now_ms(),
                            command: Command::Batch(puts),
                        };
                        let result = self.on_shard(shard, Write(log)).await?;
                        match Restored::read(result)? {
                            // Written again once routed anew: putting a value twice is
                            // harmless.
                            Restored { moved: true, .. } => Err(crate::forward::moved(shard)),
                            Restored {
                                refused: Some(code),
                                ..
                            } => Err(ClusterError::Request(TriremeError::new(
                                code,
                                format!("a hash of the backup was refused: {code}"),
                            ))),
                            Restored { .. } => Ok(()),
                        }
                    },
                ))
                .await
                .map(drop)
            }
        })
        .await?;
        Ok(written)
    }
}
