//! A shard's state machine: committed commands applied to the shard's rows in storage, with the
//! applied log id and membership written in the same batch.
//!
//! Snapshots are point-in-time exports of the shard, kept as one file per shard under
//! `<data dir>/snapshots/`; they exist so that the log can be compacted and so that a lagging
//! replica can be brought up to date.

use crate::TypeConfig;
use crate::compaction::LogBudget;
use crate::log_store::{decode, encode};
use futures::{Stream, TryStreamExt};
use openraft::entry::RaftEntry;
use openraft::storage::{EntryResponder, RaftStateMachine};
use openraft::type_config::alias::{LogIdOf, SnapshotMetaOf, SnapshotOf, StoredMembershipOf};
use openraft::{EntryPayload, OptionalSend, RaftSnapshotBuilder};
use serde::{Deserialize, Serialize};
use std::io::{self, Cursor};
use std::path::PathBuf;
use std::sync::Arc;
use trireme_storage::{ApplyEntry, ShardExport, Storage};

const APPLIED: &str = "applied";
const MEMBERSHIP: &str = "membership";

/// The state machine of one shard.
#[derive(Clone, Debug)]
pub struct ShardStateMachine {
    storage: Arc<Storage>,
    shard: u32,
    budget: Option<Arc<LogBudget>>,
}

/// What a snapshot file holds.
#[derive(Serialize, Deserialize)]
struct SnapshotFile {
    meta: SnapshotMetaOf<TypeConfig>,
    records: Vec<(Vec<u8>, Vec<u8>)>,
}

impl ShardStateMachine {
    /// The state machine of `shard` inside `storage`.
    pub fn new(storage: Arc<Storage>, shard: u32) -> Self {
        Self {
            storage,
            shard,
            budget: None,
        }
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
        self.storage
            .dir()
            .join("snapshots")
            .join(format!("shard-{}.snap", self.shard))
    }

    fn read_applied(
        storage: &Storage,
        shard: u32,
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

    /// Writes the snapshot file atomically (temp file, fsync, rename).
    async fn save_snapshot_file(&self, file: SnapshotFile) -> Result<(), io::Error> {
        let path = self.snapshot_path();
        tokio::task::spawn_blocking(move || -> Result<(), io::Error> {
            use std::io::Write;
            let dir = path
                .parent()
                .ok_or_else(|| io::Error::other("snapshot path"))?;
            std::fs::create_dir_all(dir)?;
            let tmp = path.with_extension("tmp");
            let mut out = std::fs::File::create(&tmp)?;
            out.write_all(&encode(&file)?)?;
            out.sync_data()?;
            std::fs::rename(&tmp, &path)?;
            std::fs::File::open(dir)?.sync_all()
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
        let (export, applied, membership) = tokio::task::spawn_blocking(move || {
            let export = storage.export_shard(shard).map_err(io::Error::other)?;
            // The applied state must be the one the exported rows were read with.
            let find = |name: &str| {
                export
                    .meta
                    .iter()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
            };
            let applied: Option<LogIdOf<TypeConfig>> = match find(APPLIED) {
                Some(bytes) => decode(&bytes)?,
                None => None,
            };
            let membership: StoredMembershipOf<TypeConfig> = match find(MEMBERSHIP) {
                Some(bytes) => decode(&bytes)?,
                None => Default::default(),
            };
            Ok::<_, io::Error>((export, applied, membership))
        })
        .await
        .map_err(io::Error::other)??;
        // The log is purged up to this snapshot next: the rows it covers must be on disk first.
        self.storage.sync_async().await.map_err(io::Error::other)?;
        let meta = SnapshotMetaOf::<TypeConfig> {
            last_log_id: applied,
            last_membership: membership,
        };
        let data = encode(&export.records)?;
        self.save_snapshot_file(SnapshotFile {
            meta: meta.clone(),
            records: export.records,
        })
        .await?;
        self.snapshot_built(data.len(), meta.last_log_id.as_ref().map(|id| id.index()));
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
        let mut batch = Vec::new();
        while let Some(item) = entries.try_next().await? {
            batch.push(item);
        }
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
        // Inline, not on a blocking thread: the batch goes to fjall's memtable and journal
        // buffer (no sync), and a thread hop per batch cost more than the write itself.
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

    async fn get_snapshot_builder(&mut self) -> Self::SnapshotBuilder {
        self.clone()
    }

    async fn install_snapshot(
        &mut self,
        meta: &SnapshotMetaOf<TypeConfig>,
        snapshot: Self::SnapshotData,
    ) -> Result<(), io::Error> {
        self.snapshot_installed(snapshot.get_ref().len());
        let records: Vec<(Vec<u8>, Vec<u8>)> = decode(snapshot.get_ref())?;
        let export = ShardExport {
            meta: vec![
                (APPLIED.to_string(), encode(&meta.last_log_id)?),
                (MEMBERSHIP.to_string(), encode(&meta.last_membership)?),
            ],
            records,
        };
        let storage = self.storage.clone();
        let shard = self.shard;
        let export = tokio::task::spawn_blocking(move || {
            storage.import_shard(shard, &export).map(|()| export)
        })
        .await
        .map_err(io::Error::other)?
        .map_err(io::Error::other)?;
        // The installed rows replace the log up to the snapshot: make them durable now.
        self.storage.sync_async().await.map_err(io::Error::other)?;
        self.save_snapshot_file(SnapshotFile {
            meta: meta.clone(),
            records: export.records,
        })
        .await
    }

    async fn get_current_snapshot(
        &mut self,
    ) -> Result<Option<SnapshotOf<TypeConfig, Self::SnapshotData>>, io::Error> {
        let path = self.snapshot_path();
        let bytes = match tokio::fs::read(&path).await {
            Ok(bytes) => bytes,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(e),
        };
        let file: SnapshotFile = decode(&bytes)?;
        Ok(Some(SnapshotOf::<TypeConfig, Self::SnapshotData> {
            meta: file.meta,
            snapshot: Cursor::new(encode(&file.records)?),
        }))
    }
}
