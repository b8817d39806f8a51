//! A shard's state machine: committed commands applied to the shard's rows in storage, with the
//! applied log id and membership written in the same batch.
//!
//! Snapshots are point-in-time exports of the shard, kept as one file per shard under
//! `<data dir>/snapshots/`; they exist so that the log can be compacted and so that a lagging
//! replica can be brought up to date. The file holds the snapshot's meta followed by the
//! snapshot's data exactly as it travels to a follower, so serving it is one read of the file,
//! with the data checked against its checksum but not decoded.

use crate::PeerNode;
use crate::TypeConfig;
use crate::compaction::LogBudget;
use crate::log_store::{decode, encode};
use futures::{Stream, TryStreamExt};
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::type_config::alias::{
    LeaderIdOf, LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf,
};
use openraft::vote::RaftLeaderId;
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use serde::Deserialize;
use std::collections::{BTreeMap, BTreeSet};
use std::io::{self, Cursor};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use trireme_storage::{ApplyEntry, ShardExport, ShardSplit, ShardView, Storage};
use trireme_types::{Command, CommandResult, GroupId, LogCommand, ShardId};
use xxhash_rust::xxh3::Xxh3;

const APPLIED: &str = "applied";
const MEMBERSHIP: &str = "membership";

/// The state machine of one shard.
#[derive(Clone, Debug)]
pub struct ShardStateMachine {
    storage: Arc<Storage>,
    shard: ShardId,
    /// The node this replica is on: a split seeds the new shard here only if this node was
    /// one of the shard's voters.
    node: Option<u64>,
    budget: Option<Arc<LogBudget>>,
    /// The newest snapshot this process saved to the file, shared with the builders (clones):
    /// openraft builds snapshots on a task of their own, so a build can finish after a newer
    /// snapshot was installed, and must not replace it.
    saved: Arc<Mutex<Option<LogIdOf<TypeConfig>>>>,
}

/// First bytes of a snapshot file. Then come the meta's length (u32, little-endian), the meta,
/// the checksum of the meta and the data together (xxh3, u64, little-endian) and the data. No
/// file of the earlier layout starts with them: its first byte is an `Option` tag.
const SNAPSHOT_MAGIC: &[u8; 8] = b"TRSNAP2\n";

/// A snapshot file of the earlier layout: meta and records encoded together, so serving it
/// meant decoding every record and encoding them again.
#[derive(Deserialize)]
struct LegacySnapshotFile {
    meta: SnapshotMetaOf<TypeConfig>,
    records: Vec<(Vec<u8>, Vec<u8>)>,
}

/// The meta and the data of the snapshot file `bytes`, of either layout. Both are checked
/// against the checksum: the data is sent on without being decoded here, and a damaged meta
/// can still decode (to another log id), so nothing else would notice a damaged file.
fn parse_snapshot_file(
    mut bytes: Vec<u8>,
) -> Result<(SnapshotMetaOf<TypeConfig>, Vec<u8>), io::Error> {
    let Some(rest) = bytes.strip_prefix(SNAPSHOT_MAGIC.as_slice()) else {
        let legacy: LegacySnapshotFile = decode(&bytes)?;
        return Ok((legacy.meta, encode(&legacy.records)?));
    };
    let invalid = |what: &str| io::Error::new(io::ErrorKind::InvalidData, what.to_string());
    let field = |at: usize, len: usize| {
        at.checked_add(len)
            .and_then(|end| rest.get(at..end))
            .ok_or_else(|| invalid("truncated snapshot file"))
    };
    let length = u32::from_le_bytes(field(0, 4)?.try_into().map_err(io::Error::other)?) as usize;
    let encoded_meta = field(4, length)?;
    let checksum_at = 4 + length;
    let checksum = u64::from_le_bytes(
        field(checksum_at, 8)?
            .try_into()
            .map_err(io::Error::other)?,
    );
    let data = &rest[checksum_at + 8..];
    if checksum_of(encoded_meta, data) != checksum {
        return Err(invalid(
            "snapshot file does not match its checksum (damaged on disk)",
        ));
    }
    let meta = decode(encoded_meta)?;
    // The data stays in the buffer it was read into.
    bytes.drain(..SNAPSHOT_MAGIC.len() + checksum_at + 8);
    Ok((meta, bytes))
}

/// First bytes of a snapshot's data when it carries state-machine rows besides the applied
/// id and membership (a split shard's `slots`): never the start of a row count, which is a
/// varint of at most ten bytes and whose tenth byte is below 0x80.
const EXTRA_META_MARK: [u8; 10] = [0xFF; 10];

/// The state-machine rows a snapshot carries besides the applied id and membership (which
/// travel in its meta, the applied index with them).
fn extra_meta(meta: Vec<(String, Vec<u8>)>) -> Vec<(String, Vec<u8>)> {
    meta.into_iter()
        .filter(|(name, _)| {
            name != APPLIED && name != MEMBERSHIP && name != trireme_storage::APPLIED_INDEX_ROW
        })
        .collect()
}

/// State-machine rows by name: what a snapshot's data carries besides its records.
type MetaRows = Vec<(String, Vec<u8>)>;

/// The extra state-machine rows at the front of a snapshot's data, and where its records
/// (encoded as postcard encodes a `Vec<(Vec<u8>, Vec<u8>)>`) begin.
fn split_snapshot_data(data: &[u8]) -> Result<(MetaRows, usize), io::Error> {
    match data.strip_prefix(EXTRA_META_MARK.as_slice()) {
        Some(marked) => {
            let (meta, rest): (MetaRows, _) =
                postcard::take_from_bytes(marked).map_err(io::Error::other)?;
            Ok((meta, data.len() - rest.len()))
        }
        None => Ok((Vec::new(), 0)),
    }
}

/// Rows written per piece when a snapshot is installed into an empty replica.
const INSTALL_PIECE_BYTES: usize = 4 << 20;
/// Pause between pieces: other writers on the node get the store between them.
const INSTALL_PIECE_PAUSE: std::time::Duration = std::time::Duration::from_millis(10);

/// Installs a snapshot's `records` into `shard`, which holds no applied state, in pieces of
/// about [`INSTALL_PIECE_BYTES`] read straight from the buffer (no row is decoded into its own
/// allocation), then its state-machine rows (`meta`) last. A
/// crash in between leaves rows without an applied id: the replica still counts as empty,
/// its leader sends the snapshot again, and this starts by clearing what the last try wrote.
/// Installing a 210 MB shard in one batch took 0.9-1.5 s to decode and 1.1-2.2 s to write
/// while every other write of the node waited behind it. Returns the number of pieces.
fn install_by_pieces(
    storage: &Storage,
    shard: ShardId,
    records: &[u8],
    meta: Vec<(String, Vec<u8>)>,
) -> Result<usize, io::Error> {
    let mut rest = records;
    storage
        .import_shard(shard, &ShardExport::default())
        .map_err(io::Error::other)?;
    let truncated = || io::Error::new(io::ErrorKind::InvalidData, "truncated snapshot data");
    let count = take_varint(&mut rest).ok_or_else(truncated)?;
    let rows_start = rest;
    let mut piece: Vec<(&[u8], &[u8])> = Vec::new();
    let (mut piece_bytes, mut pieces) = (0usize, 0usize);
    // Two walks over the rows: records first, then the collection rows, which are stored
    // under the versions their records hold.
    for collection_rows in [false, true] {
        rest = rows_start;
        for _ in 0..count {
            let key = take_bytes(&mut rest).ok_or_else(truncated)?;
            let value = take_bytes(&mut rest).ok_or_else(truncated)?;
            if trireme_storage::is_unversioned_row(key) != collection_rows {
                continue;
            }
            piece_bytes += key.len() + value.len();
            piece.push((key, value));
            if piece_bytes >= INSTALL_PIECE_BYTES {
                storage
                    .import_rows(shard, &piece)
                    .map_err(io::Error::other)?;
                piece.clear();
                piece_bytes = 0;
                pieces += 1;
                std::thread::sleep(INSTALL_PIECE_PAUSE);
            }
        }
        if !rest.is_empty() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                "bytes after the last row of the snapshot data",
            ));
        }
        storage
            .import_rows(shard, &piece)
            .map_err(io::Error::other)?;
        piece.clear();
        piece_bytes = 0;
    }
    storage
        .replace_shard_meta(shard, &meta)
        .map_err(io::Error::other)?;
    Ok(pieces + 1)
}

/// Reads a varint as postcard writes lengths, advancing `input`.
fn take_varint(input: &mut &[u8]) -> Option<u64> {
    let mut value = 0u64;
    for (i, byte) in input.iter().enumerate().take(10) {
        value |= u64::from(byte & 0x7F) << (7 * i);
        if byte & 0x80 == 0 {
            *input = &input[i + 1..];
            return Some(value);
        }
    }
    None
}

/// Reads a length-prefixed byte string as postcard writes a `Vec<u8>`, advancing `input`.
fn take_bytes<'a>(input: &mut &'a [u8]) -> Option<&'a [u8]> {
    let len = usize::try_from(take_varint(input)?).ok()?;
    let bytes = input.get(..len)?;
    *input = &input[len..];
    Some(bytes)
}

/// Room kept for the row count at the front of a snapshot's data: the longest varint of a u64.
const COUNT_ROOM: usize = 10;

/// A snapshot's data: the shard's rows as `encode` writes a `Vec<(Vec<u8>, Vec<u8>)>` (what
/// `install_snapshot` decodes), written row by row in one pass over the view. The count, which
/// comes first, is only known at the end: it is written into room left for it. Collecting the
/// rows first held the shard twice, with two allocations per row. `size_hint` (the last
/// snapshot's size) spares the buffer most of its growing.
fn encode_records(
    view: &ShardView<'_>,
    extra: &[(String, Vec<u8>)],
    size_hint: usize,
) -> Result<Vec<u8>, io::Error> {
    let mut head = Vec::new();
    if !extra.is_empty() {
        head.extend_from_slice(&EXTRA_META_MARK);
        head.extend_from_slice(&encode(&extra)?);
    }
    let mut data = Vec::with_capacity(head.len() + COUNT_ROOM + size_hint);
    data.extend_from_slice(&head);
    let room = head.len();
    data.resize(room + COUNT_ROOM, 0);
    let mut rows = 0u64;
    view.for_each_snapshot_row(|key, value| {
        put_varint(&mut data, key.len() as u64);
        data.extend_from_slice(key);
        put_varint(&mut data, value.len() as u64);
        data.extend_from_slice(value);
        rows += 1;
    })
    .map_err(io::Error::other)?;
    let mut count = Vec::with_capacity(COUNT_ROOM);
    put_varint(&mut count, rows);
    let start = room + COUNT_ROOM - count.len();
    data[start..room + COUNT_ROOM].copy_from_slice(&count);
    data.drain(room..start);
    Ok(data)
}

/// Writes `value` as postcard writes a length: LEB128, seven bits a byte, low bits first.
fn put_varint(out: &mut Vec<u8>, mut value: u64) {
    while value >= 0x80 {
        out.push((value as u8) | 0x80);
        value >>= 7;
    }
    out.push(value as u8);
}

/// The header of a snapshot file that holds `meta` and `data`.
fn snapshot_file_header(
    meta: &SnapshotMetaOf<TypeConfig>,
    data: &[u8],
) -> Result<Vec<u8>, io::Error> {
    let meta = encode(meta)?;
    let length = u32::try_from(meta.len()).map_err(io::Error::other)?;
    let mut header = Vec::with_capacity(SNAPSHOT_MAGIC.len() + 4 + meta.len() + 8);
    header.extend_from_slice(SNAPSHOT_MAGIC);
    header.extend_from_slice(&length.to_le_bytes());
    header.extend_from_slice(&meta);
    header.extend_from_slice(&checksum_of(&meta, data).to_le_bytes());
    Ok(header)
}

/// The checksum a snapshot file keeps: of its encoded meta and its data, in that order.
fn checksum_of(encoded_meta: &[u8], data: &[u8]) -> u64 {
    let mut hasher = Xxh3::new();
    hasher.update(encoded_meta);
    hasher.update(data);
    hasher.digest()
}

impl ShardStateMachine {
    /// The state machine of `shard` inside `storage`.
    pub fn new(storage: Arc<Storage>, shard: ShardId) -> Self {
        Self {
            storage,
            shard,
            node: None,
            budget: None,
            saved: Arc::default(),
        }
    }

    /// Tells the state machine which node it runs on (see [`ShardStateMachine::node`]).
    pub(crate) fn on_node(mut self, node: u64) -> Self {
        self.node = Some(node);
        self
    }

    /// Reports snapshots to `budget`: a larger shard is snapshotted less often, and the log
    /// behind a snapshot built here is purged by size.
    pub(crate) fn with_budget(mut self, budget: Arc<LogBudget>) -> Self {
        self.budget = Some(budget);
        self
    }

    fn snapshot_built(&self, bytes: usize, last_index: Option<u64>) {
        if let (Some(budget), Some(last_index)) = (&self.budget, last_index) {
            budget.snapshot_built(bytes as u64, last_index);
        }
    }

    fn snapshot_installed(&self, bytes: usize) {
        if let Some(budget) = &self.budget {
            budget.snapshot_installed(bytes as u64);
        }
    }

    fn snapshot_path(&self) -> PathBuf {
        snapshot_path(self.storage.dir(), self.shard.0)
    }

    fn read_applied(
        storage: &Storage,
        shard: ShardId,
    ) -> Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>), io::Error> {
        let applied = match storage
            .data_meta(shard, APPLIED)
            .map_err(io::Error::other)?
        {
            Some(bytes) => decode(&bytes)?,
            None => None,
        };
        let membership = match storage
            .data_meta(shard, MEMBERSHIP)
            .map_err(io::Error::other)?
        {
            Some(bytes) => decode(&bytes)?,
            None => StoredMembershipOf::<TypeConfig>::default(),
        };
        Ok((applied, membership))
    }

    /// Applies a run of entries with no split among them, in one storage batch.
    fn apply_run(&self, batch: Vec<EntryResponder<TypeConfig>>) -> Result<(), io::Error> {
        let Some((last, _)) = batch.last() else {
            return Ok(());
        };
        let mut meta = vec![(APPLIED, encode(&Some(last.log_id()))?)];
        if let Some((entry, _)) = batch
            .iter()
            .rev()
            .find(|(e, _)| matches!(e.payload, EntryPayload::Membership(_)))
            && let EntryPayload::Membership(m) = &entry.payload
        {
            let stored = StoredMembershipOf::<TypeConfig>::new(Some(entry.log_id()), m.clone());
            meta.push((MEMBERSHIP, encode(&stored)?));
        }
        let apply: Vec<ApplyEntry<'_>> = batch
            .iter()
            .map(|(entry, _)| ApplyEntry {
                index: entry.index(),
                command: match &entry.payload {
                    EntryPayload::Normal(command) => Some(command),
                    _ => None,
                },
            })
            .collect();
        // Inline, not on a blocking thread: the batch goes to the tables' memtable only (no
        // journal, no sync), and a thread hop per batch cost more than the write itself.
        let results = self
            .storage
            .apply(self.shard, &apply, &meta)
            .map_err(io::Error::other)?;
        drop(apply);
        for ((_, responder), result) in batch.into_iter().zip(results) {
            if let Some(responder) = responder {
                responder.send(result);
            }
        }
        Ok(())
    }

    /// Applies a split entry at `log_id`. The upper rows leave this shard on every replica.
    /// On a replica of a node that votes in this shard they become the new shard's first
    /// state: applied at the split entry's index with this shard's voters as its membership,
    /// as if a group of those voters had been initialized and compacted up to there. Every such replica derives the same
    /// state from the same entry; a voter that skipped the entry (it installed a later
    /// snapshot of this shard) has no state for the new shard, and its leader sends it a
    /// snapshot, since no log precedes the state. A node that already has state for the new
    /// shard (a replica that came later and replays this entry) keeps it.
    fn apply_split(
        &self,
        log_id: LogIdOf<TypeConfig>,
        split: &ShardSplit,
    ) -> Result<CommandResult, io::Error> {
        let (_, membership) = Self::read_applied(&self.storage, self.shard)?;
        let voters: BTreeSet<u64> = membership.membership().voter_ids().collect();
        let child_group = GroupId::of_shard(split.child);
        let fresh = !self
            .storage
            .has_shard_state(split.child)
            .map_err(io::Error::other)?
            && !self
                .storage
                .has_group_state(child_group)
                .map_err(io::Error::other)?;
        let seed = match self.node {
            Some(me) if voters.contains(&me) && fresh => {
                let first = voters.first().copied().unwrap_or_default();
                let leader = LeaderIdOf::<TypeConfig>::new(0, first).to_committed();
                // The new group's log begins after the split entry, so every index it assigns
                // is above the ModifyIndex of every row it starts with, and above the removal
                // watermark both shards take from the split: a Consul query over keys that
                // move keeps an index that only grows.
                let start = Some(LogIdOf::<TypeConfig>::new(leader, log_id.index()));
                let nodes: BTreeMap<u64, PeerNode> = membership
                    .membership()
                    .nodes()
                    .filter(|(id, _)| voters.contains(id))
                    .map(|(id, node)| (*id, node.clone()))
                    .collect();
                let membership = openraft::Membership::new(vec![voters.clone()], nodes)
                    .map_err(io::Error::other)?;
                let first_membership = StoredMembershipOf::<TypeConfig>::new(start, membership);
                Some(vec![
                    (APPLIED, encode(&start)?),
                    (MEMBERSHIP, encode(&first_membership)?),
                ])
            }
            _ => None,
        };
        let parent_meta = [(APPLIED, encode(&Some(log_id))?)];
        let moved = self
            .storage
            .split_shard(split, log_id.index(), &parent_meta, seed.as_deref())
            .map_err(io::Error::other)?;
        match moved {
            Some(rows) => {
                tracing::info!(
                    shard = self.shard.0,
                    child = split.child.0,
                    at_slot = split.at_slot,
                    rows,
                    seeded = seed.is_some(),
                    "split the shard"
                );
                Ok(CommandResult::Done)
            }
            None => Ok(CommandResult::Moved),
        }
    }

    /// Writes the snapshot file atomically (temp file, fsync, rename, fsync of the folder) and
    /// hands `data` back, with whether it was written: a snapshot older than one already saved
    /// is not. Saves are one at a time, so they never share the temp file.
    async fn save_snapshot_file(
        &self,
        meta: &SnapshotMetaOf<TypeConfig>,
        data: Vec<u8>,
    ) -> Result<(Vec<u8>, bool), io::Error> {
        let path = self.snapshot_path();
        let meta = meta.clone();
        let saved = self.saved.clone();
        tokio::task::spawn_blocking(move || -> Result<(Vec<u8>, bool), io::Error> {
            use std::io::Write;
            let mut saved = saved.lock().unwrap_or_else(|e| e.into_inner());
            if meta.last_log_id < *saved {
                return Ok((data, false));
            }
            let header = snapshot_file_header(&meta, &data)?;
            let dir = path
                .parent()
                .ok_or_else(|| io::Error::other("snapshot path"))?;
            std::fs::create_dir_all(dir)?;
            let tmp = path.with_extension("tmp");
            let mut out = std::fs::File::create(&tmp)?;
            out.write_all(&header)?;
            out.write_all(&data)?;
            out.sync_data()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(dir)?.sync_all()?;
            *saved = meta.last_log_id;
            Ok((data, true))
        })
        .await
        .map_err(io::Error::other)?
    }
}

impl RaftSnapshotBuilder<TypeConfig> for ShardStateMachine {
    type SnapshotData = Cursor<Vec<u8>>;

    async fn build_snapshot(
        &mut self,
    ) -> Result<SnapshotOf<TypeConfig, Self::SnapshotData>, io::Error> {
        let storage = self.storage.clone();
        let shard = self.shard;
        let path = self.snapshot_path();
        let started = std::time::Instant::now();
        let (data, applied, membership) = tokio::task::spawn_blocking(move || {
            let view = storage.shard_view(shard);
            let meta = view.meta().map_err(io::Error::other)?;
            // The applied state must be the one the exported rows were read with.
            let find = |name: &str| meta.iter().find(|(n, _)| n == name).map(|(_, v)| v.clone());
            let applied: Option<LogIdOf<TypeConfig>> = match find(APPLIED) {
                Some(bytes) => decode(&bytes)?,
                None => None,
            };
            let membership: StoredMembershipOf<TypeConfig> = match find(MEMBERSHIP) {
                Some(bytes) => decode(&bytes)?,
                None => Default::default(),
            };
            // The shard is about the size it was at the last snapshot.
            let size_hint = std::fs::metadata(&path).map_or(0, |m| m.len() as usize);
            let extra = extra_meta(meta);
            Ok::<_, io::Error>((
                encode_records(&view, &extra, size_hint)?,
                applied,
                membership,
            ))
        })
        .await
        .map_err(io::Error::other)??;
        // The log is purged up to this snapshot next: the rows it covers must be on disk first.
        self.storage.sync_async().await.map_err(io::Error::other)?;
        let meta = SnapshotMetaOf::<TypeConfig> {
            last_log_id: applied,
            last_membership: membership,
        };
        let (data, saved) = self.save_snapshot_file(&meta, data).await?;
        trireme_storage::crash::point("snapshot-saved");
        if saved {
            self.snapshot_built(data.len(), meta.last_log_id.as_ref().map(|id| id.index()));
        }
        tracing::info!(
            shard = shard.0,
            bytes = data.len(),
            ms = started.elapsed().as_millis() as u64,
            saved,
            "built a snapshot"
        );
        Ok(SnapshotOf::<TypeConfig, Self::SnapshotData> {
            meta,
            snapshot: Cursor::new(data),
        })
    }
}

impl RaftStateMachine<TypeConfig> for ShardStateMachine {
    type SnapshotData = Cursor<Vec<u8>>;
    type SnapshotBuilder = Self;

    async fn applied_state(
        &mut self,
    ) -> Result<(Option<LogIdOf<TypeConfig>>, StoredMembershipOf<TypeConfig>), io::Error> {
        Self::read_applied(&self.storage, self.shard)
    }

    async fn apply<Strm>(&mut self, mut entries: Strm) -> Result<(), io::Error>
    where
        Strm: Stream<Item = Result<EntryResponder<TypeConfig>, io::Error>> + Unpin + OptionalSend,
    {
        let mut run = Vec::new();
        while let Some(item) = entries.try_next().await? {
            // A split is applied on its own, after what came before it.
            if let EntryPayload::Normal(LogCommand {
                command:
                    Command::Split {
                        at_slot,
                        child,
                        range,
                    },
                ..
            }) = &item.0.payload
            {
                let split = ShardSplit {
                    parent: self.shard,
                    child: ShardId(*child),
                    at_slot: *at_slot,
                    range: *range,
                };
                self.apply_run(std::mem::take(&mut run))?;
                let result = self.apply_split(item.0.log_id(), &split)?;
                if let Some(responder) = item.1 {
                    responder.send(result);
                }
                continue;
            }
            run.push(item);
        }
        self.apply_run(run)
    }

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TypeConfig>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        let data = snapshot.into_inner();
        self.snapshot_installed(data.len());
        let started = std::time::Instant::now();
        let (extra, rows_at) = split_snapshot_data(&data)?;
        let mut state = vec![
            (APPLIED.to_string(), encode(&meta.last_log_id)?),
            (MEMBERSHIP.to_string(), encode(&meta.last_membership)?),
            (
                trireme_storage::APPLIED_INDEX_ROW.to_string(),
                meta.last_log_id
                    .as_ref()
                    .map_or(0, |id| id.index())
                    .to_be_bytes()
                    .to_vec(),
            ),
        ];
        state.extend(extra_meta(extra));
        // A replica that holds nothing yet (a move brings it here) takes the rows in pieces;
        // one with state to replace, atomically.
        let empty = Self::read_applied(&self.storage, self.shard)?.0.is_none();
        let storage = self.storage.clone();
        let shard = self.shard;
        let (data, pieces) = tokio::task::spawn_blocking(move || {
            let rows = &data[rows_at..];
            let pieces = if empty {
                install_by_pieces(&storage, shard, rows, state)?
            } else {
                let export = ShardExport {
                    meta: state,
                    records: decode(rows)?,
                };
                storage
                    .import_shard(shard, &export)
                    .map_err(io::Error::other)?;
                1
            };
            Ok::<_, io::Error>((data, pieces))
        })
        .await
        .map_err(io::Error::other)??;
        let imported = started.elapsed();
        // The installed rows replace the log up to the snapshot: make them durable now.
        self.storage.sync_async().await.map_err(io::Error::other)?;
        let synced = started.elapsed();
        // The file keeps the data as it arrived: it is what this node sends on.
        let bytes = data.len();
        self.save_snapshot_file(meta, data).await?;
        tracing::info!(
            shard = shard.0,
            bytes,
            pieces,
            import_ms = imported.as_millis() as u64,
            sync_ms = (synced - imported).as_millis() as u64,
            save_ms = (started.elapsed() - synced).as_millis() as u64,
            "installed a snapshot"
        );
        Ok(())
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, Self::SnapshotData>>, io::Error> {
        let path = self.snapshot_path();
        // Reading and checking a large file takes a while: off the async executor.
        let read = tokio::task::spawn_blocking(move || match std::fs::read(&path) {
            Ok(bytes) => parse_snapshot_file(bytes)
                .map(Some)
                .map_err(|e| io::Error::new(e.kind(), format!("{}: {e}", path.display()))),
            Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(e) => Err(e),
        });
        let Some((meta, data)) = read.await.map_err(io::Error::other)?? else {
            return Ok(None);
        };
        Ok(Some(SnapshotOf::<TypeConfig, Self::SnapshotData> {
            meta,
            snapshot: Cursor::new(data),
        }))
    }
}

/// Where the snapshot of `shard` is kept under the data directory `dir`.
pub(crate) fn snapshot_path(dir: &std::path::Path, shard: u32) -> PathBuf {
    dir.join("snapshots").join(format!("shard-{shard}.snap"))
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use serde::Serialize;
    use tempfile::TempDir;
    use trireme_storage::StorageOptions;
    use trireme_types::{Command, LogCommand, PutCondition, TtlUpdate};

    const SHARD: ShardId = ShardId(3);
    const CHILD: ShardId = ShardId(4);

    /// A state machine whose shard holds `a` and `b`, applied up to index 7.
    fn state_machine_with_two_keys(dir: &TempDir) -> ShardStateMachine {
        let storage = Storage::open(dir.path(), &StorageOptions::default()).expect("storage");
        let put = |key: &'static str| Command::Put {
            key: Bytes::from_static(key.as_bytes()),
            value: Bytes::from_static(b"value"),
            flags: None,
            condition: PutCondition::Always,
            ttl: TtlUpdate::Clear,
            return_previous: false,
        };
        let command = LogCommand {
            now_ms: 1,
            command: Command::Batch(vec![put("a"), put("b")]),
        };
        let applied = Some(openraft::testing::log_id::<TypeConfig>(2, 1, 7));
        storage
            .apply(
                SHARD,
                &[ApplyEntry {
                    index: 7,
                    command: Some(&command),
                }],
                &[(APPLIED, encode(&applied).expect("encode"))],
            )
            .expect("apply");
        ShardStateMachine::new(storage, SHARD)
    }

    fn keys(data: &[u8]) -> Vec<Vec<u8>> {
        let records: Vec<(Vec<u8>, Vec<u8>)> = decode(data).expect("snapshot data");
        records.into_iter().map(|(key, _)| key).collect()
    }

    /// Asserts that `machine`'s current snapshot is `built`, meta and data; returns it.
    async fn assert_serves(
        machine: &mut ShardStateMachine,
        built: &SnapshotOf<TypeConfig, Cursor<Vec<u8>>>,
    ) -> SnapshotOf<TypeConfig, Cursor<Vec<u8>>> {
        let served = machine
            .get_current_snapshot()
            .await
            .expect("read")
            .expect("a snapshot");
        assert_eq!(served.meta, built.meta);
        assert_eq!(served.snapshot.get_ref(), built.snapshot.get_ref());
        served
    }

    #[tokio::test]
    async fn a_snapshot_is_served_from_its_file_byte_for_byte_as_it_was_built() {
        let dir = TempDir::new().expect("temp dir");
        let mut machine = state_machine_with_two_keys(&dir);
        let built = machine.build_snapshot().await.expect("build");
        assert_eq!(built.meta.last_log_id.map(|id| id.index()), Some(7));
        let file = std::fs::read(machine.snapshot_path()).expect("snapshot file");
        assert!(file.starts_with(SNAPSHOT_MAGIC));
        assert!(file.ends_with(built.snapshot.get_ref()), "the data as sent");

        let served = assert_serves(&mut machine, &built).await;
        assert_eq!(
            keys(served.snapshot.get_ref()),
            [b"a".to_vec(), b"b".to_vec()]
        );
    }

    #[tokio::test]
    async fn an_installed_snapshot_is_what_the_node_serves_next() {
        let (from, to) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
        let built = state_machine_with_two_keys(&from)
            .build_snapshot()
            .await
            .expect("build");
        let storage = Storage::open(to.path(), &StorageOptions::default()).expect("storage");
        let mut follower = ShardStateMachine::new(storage.clone(), SHARD);
        follower
            .install_snapshot(&built.meta, built.snapshot.clone())
            .await
            .expect("install");
        assert!(storage.get_raw(SHARD, b"b").expect("read").is_some());
        assert_serves(&mut follower, &built).await;
    }

    #[tokio::test]
    async fn a_split_shard_keeps_its_slot_range_through_a_snapshot() {
        let (from, to) = (TempDir::new().expect("dir"), TempDir::new().expect("dir"));
        let mut leader = state_machine_with_two_keys(&from);
        let split = ShardSplit {
            parent: SHARD,
            child: CHILD,
            at_slot: 8192,
            range: (0, 16383),
        };
        leader
            .storage
            .split_shard(&split, 1, &[], None)
            .expect("split")
            .expect("applied");
        let built = leader.build_snapshot().await.expect("build");
        assert!(built.snapshot.get_ref().starts_with(&EXTRA_META_MARK));
        let storage = Storage::open(to.path(), &StorageOptions::default()).expect("storage");
        let mut follower = ShardStateMachine::new(storage.clone(), SHARD);
        follower
            .install_snapshot(&built.meta, built.snapshot.clone())
            .await
            .expect("install");
        assert_eq!(storage.slot_range(SHARD).expect("range"), Some((0, 8191)));
        // "a" (slot 15495) left with the split; "b" (slot 3300) stayed.
        assert!(storage.get_raw(SHARD, b"a").expect("read").is_none());
        assert!(storage.get_raw(SHARD, b"b").expect("read").is_some());
        assert_serves(&mut follower, &built).await;
    }

    #[tokio::test]
    async fn an_empty_replica_installs_by_pieces_what_a_full_one_installs_at_once() {
        let (from, to, full) = (
            TempDir::new().expect("dir"),
            TempDir::new().expect("dir"),
            TempDir::new().expect("dir"),
        );
        let leader = state_machine_with_two_keys(&from);
        // Enough rows of ~100 KB for several pieces, one with an expiry, and a split range.
        let command = LogCommand {
            now_ms: 1,
            command: Command::Batch(
                (0..120)
                    .map(|i| Command::Put {
                        key: Bytes::from(format!("big{i}")),
                        value: Bytes::from(vec![b'x'; 100_000]),
                        flags: None,
                        condition: PutCondition::Always,
                        ttl: if i == 0 {
                            TtlUpdate::At(5_000)
                        } else {
                            TtlUpdate::Clear
                        },
                        return_previous: false,
                    })
                    .collect(),
            ),
        };
        let entry = ApplyEntry {
            index: 8,
            command: Some(&command),
        };
        let applied = Some(openraft::testing::log_id::<TypeConfig>(2, 1, 8));
        leader
            .storage
            .apply(
                SHARD,
                &[entry],
                &[(APPLIED, encode(&applied).expect("encode"))],
            )
            .expect("apply");
        let split = ShardSplit {
            parent: SHARD,
            child: CHILD,
            at_slot: 16000,
            range: (0, 16383),
        };
        leader
            .storage
            .split_shard(&split, 1, &[], None)
            .expect("split");
        let mut leader = leader;
        let built = leader.build_snapshot().await.expect("build");

        let empty = Storage::open(to.path(), &StorageOptions::default()).expect("storage");
        // Left by an install cut short: cleared first.
        empty
            .import_rows(SHARD, &[(b"leftover".as_slice(), b"junk".as_slice())])
            .expect("leftover");
        let mut by_pieces = ShardStateMachine::new(empty.clone(), SHARD);
        by_pieces
            .install_snapshot(&built.meta, built.snapshot.clone())
            .await
            .expect("install");
        let other = Storage::open(full.path(), &StorageOptions::default()).expect("storage");
        let mut at_once = ShardStateMachine::new(other.clone(), SHARD);
        let bytes = encode(&Some(openraft::testing::log_id::<TypeConfig>(1, 1, 1))).unwrap();
        other
            .apply(SHARD, &[], &[(APPLIED, bytes)])
            .expect("an applied id: not empty");
        at_once
            .install_snapshot(&built.meta, built.snapshot.clone())
            .await
            .expect("install");
        let rows = |storage: &Storage| {
            let mut out = Vec::new();
            storage
                .shard_view(SHARD)
                .for_each_record(|k, v| out.push((k.to_vec(), v.to_vec())))
                .expect("rows");
            out
        };
        assert_eq!(rows(&empty), rows(&other));
        assert!(storage_has_no_leftover(&empty));
        assert_eq!(
            empty.slot_range(SHARD).expect("range"),
            other.slot_range(SHARD).expect("range")
        );
        assert_eq!(
            ShardStateMachine::read_applied(&empty, SHARD).expect("applied"),
            ShardStateMachine::read_applied(&other, SHARD).expect("applied")
        );
        assert_eq!(
            empty.expired_keys(SHARD, 10_000, 10).expect("expiry"),
            other.expired_keys(SHARD, 10_000, 10).expect("expiry")
        );
    }

    fn storage_has_no_leftover(storage: &Storage) -> bool {
        storage.get_raw(SHARD, b"leftover").expect("read").is_none()
    }

    /// How snapshot files were written before the data was kept as sent.
    #[derive(Serialize)]
    struct EarlierLayout {
        meta: SnapshotMetaOf<TypeConfig>,
        records: Vec<(Vec<u8>, Vec<u8>)>,
    }

    #[tokio::test]
    async fn a_snapshot_file_of_the_earlier_layout_is_still_served() {
        let dir = TempDir::new().expect("temp dir");
        let mut machine = state_machine_with_two_keys(&dir);
        let built = machine.build_snapshot().await.expect("build");
        let records: Vec<(Vec<u8>, Vec<u8>)> = decode(built.snapshot.get_ref()).expect("data");
        let earlier = EarlierLayout {
            meta: built.meta.clone(),
            records,
        };
        std::fs::write(machine.snapshot_path(), encode(&earlier).expect("encode")).expect("write");

        assert_serves(&mut machine, &built).await;
    }

    #[test]
    fn snapshot_data_is_written_exactly_as_postcard_encodes_the_rows() {
        let dir = TempDir::new().expect("temp dir");
        let storage = Storage::open(dir.path(), &StorageOptions::default()).expect("storage");
        // Lengths around the varint boundaries (127/128 bytes, 16383/16384) and an empty value.
        let values = [0usize, 1, 127, 128, 300, 16_383, 16_384, 70_000];
        let command = LogCommand {
            now_ms: 1,
            command: Command::Batch(
                values
                    .iter()
                    .enumerate()
                    .map(|(i, len)| Command::Put {
                        key: Bytes::from(format!("key-{i}").repeat(i * 20 + 1)),
                        value: Bytes::from(vec![b'v'; *len]),
                        flags: None,
                        condition: PutCondition::Always,
                        ttl: TtlUpdate::Clear,
                        return_previous: false,
                    })
                    .collect(),
            ),
        };
        let entry = ApplyEntry {
            index: 1,
            command: Some(&command),
        };
        storage.apply(SHARD, &[entry], &[]).expect("apply");
        let mut rows = Vec::new();
        let view = storage.shard_view(SHARD);
        view.for_each_record(|key, value| rows.push((key.to_vec(), value.to_vec())))
            .expect("rows");
        let expected = encode(&rows).expect("encode");
        let streamed = encode_records(&view, &[], expected.len()).expect("stream");
        assert_eq!(streamed, expected);
        assert_eq!(
            streamed.capacity(),
            COUNT_ROOM + expected.len(),
            "a hint of the data's size is enough: the buffer never grew"
        );
        assert_eq!(
            encode_records(&view, &[], 0).expect("stream"),
            expected,
            "no hint"
        );
        let empty = encode_records(&storage.shard_view(CHILD), &[], 0).expect("stream");
        assert_eq!(
            empty,
            encode(&Vec::<(Vec<u8>, Vec<u8>)>::new()).expect("encode")
        );
    }

    #[test]
    fn varints_are_written_as_postcard_writes_them() {
        for value in [0, 1, 127, 128, 16_383, 16_384, u32::MAX as u64, u64::MAX] {
            let mut out = Vec::new();
            put_varint(&mut out, value);
            assert!(out.len() <= COUNT_ROOM, "{value}");
            assert_eq!(
                out,
                postcard::to_allocvec(&value).expect("postcard"),
                "{value}"
            );
        }
    }

    #[test]
    fn a_truncated_snapshot_file_is_an_error() {
        let truncated = |file: &[u8]| {
            parse_snapshot_file(file.to_vec())
                .expect_err("a truncated file")
                .to_string()
                .contains("truncated")
        };
        let meta = encode(&SnapshotMetaOf::<TypeConfig>::default()).expect("encode");
        let mut file = SNAPSHOT_MAGIC.to_vec();
        assert!(truncated(&file), "no meta length");
        file.extend_from_slice(&(meta.len() as u32).to_le_bytes());
        file.extend_from_slice(&meta[..meta.len() - 1]);
        assert!(truncated(&file), "meta cut short");
        file.push(meta[meta.len() - 1]);
        file.extend_from_slice(&[0; 7]);
        assert!(truncated(&file), "checksum cut short");
    }

    /// Flips one bit of the snapshot file at `at` bytes from its start.
    fn damage(machine: &ShardStateMachine, at: usize) {
        let path = machine.snapshot_path();
        let mut file = std::fs::read(&path).expect("snapshot file");
        file[at] ^= 1;
        std::fs::write(&path, file).expect("write");
    }

    #[tokio::test]
    async fn a_snapshot_file_with_a_damaged_meta_is_refused() {
        let dir = TempDir::new().expect("temp dir");
        let mut machine = state_machine_with_two_keys(&dir);
        machine.build_snapshot().await.expect("build");
        // The meta starts after the magic and its length.
        damage(&machine, SNAPSHOT_MAGIC.len() + 4 + 1);
        let error = machine
            .get_current_snapshot()
            .await
            .expect_err("a damaged file");
        assert!(error.to_string().contains("checksum"), "{error}");
    }

    #[tokio::test]
    async fn a_snapshot_older_than_the_one_saved_does_not_replace_it() {
        let dir = TempDir::new().expect("temp dir");
        let mut machine = state_machine_with_two_keys(&dir);
        let newer = machine.build_snapshot().await.expect("build");
        let mut older = newer.meta.clone();
        older.last_log_id = Some(openraft::testing::log_id::<TypeConfig>(2, 1, 5));
        let (_, saved) = machine
            .save_snapshot_file(&older, b"older".to_vec())
            .await
            .expect("save");
        assert!(
            !saved,
            "a build that finished after a newer save is dropped"
        );
        assert_serves(&mut machine, &newer).await;
    }

    #[tokio::test]
    async fn a_damaged_snapshot_file_is_refused_not_sent_on() {
        let dir = TempDir::new().expect("temp dir");
        let mut machine = state_machine_with_two_keys(&dir);
        machine.build_snapshot().await.expect("build");
        let last = std::fs::metadata(machine.snapshot_path())
            .expect("snapshot file")
            .len() as usize
            - 1;
        damage(&machine, last);
        let error = machine
            .get_current_snapshot()
            .await
            .expect_err("a damaged file");
        assert!(error.to_string().contains("checksum"), "{error}");
    }
}
