//! openraft's storage conformance suite, run against our log store and state machine on
//! real files in a temporary directory.

use openraft::StorageError;
use openraft::testing::log::{StoreBuilder, Suite};
use openraft::type_config::TypeConfigExt;
use tempfile::TempDir;
use trireme_raft::{LogStore, ShardStateMachine, TypeConfig};
use trireme_storage::{Storage, StorageOptions};

struct FjallBuilder;

impl StoreBuilder<TypeConfig, LogStore, ShardStateMachine, TempDir> for FjallBuilder {
    async fn build(
        &self,
    ) -> Result<(TempDir, LogStore, ShardStateMachine), StorageError<TypeConfig>> {
        let dir = TempDir::new().map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        let storage = Storage::open(dir.path(), &StorageOptions::default())
            .map_err(|e| StorageError::read(TypeConfig::err_from_error(&e)))?;
        Ok((
            dir,
            LogStore::new(storage.clone(), trireme_types::GroupId(1)),
            ShardStateMachine::new(storage, trireme_types::ShardId(0)),
        ))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn openraft_storage_suite_passes() {
    Suite::test_all(FjallBuilder)
        .await
        .expect("openraft storage conformance suite");
}
