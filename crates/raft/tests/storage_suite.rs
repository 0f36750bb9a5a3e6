//! openraft's own storage test suite (`openraft::testing::Suite`, 34 tests of log storage and
//! state machine) run against the oncelog adapter, on a fresh partition directory each.

use std::sync::Arc;

use oncelog::{Environment, FlushPolicy, HighWatermarkPolicy, Log, LogConfig};
use oncelog_raft::store::{LogStore, Partition, StateMachine};
use oncelog_raft::{NodeId, TypeConfig};
use openraft::testing::{StoreBuilder, Suite};
use openraft::StorageError;

struct OncelogBuilder;

impl StoreBuilder<TypeConfig, LogStore, StateMachine, tempfile::TempDir> for OncelogBuilder {
    async fn build(
        &self,
    ) -> Result<(tempfile::TempDir, LogStore, StateMachine), StorageError<NodeId>> {
        let dir = tempfile::tempdir().expect("temp dir");
        let config = LogConfig::builder()
            .high_watermark(HighWatermarkPolicy::SetByCaller)
            .flush_policy(FlushPolicy::Manual)
            .segment_bytes(4096)
            .build()
            .unwrap();
        let env = Environment::default();
        let fs = Arc::clone(&env.fs);
        let log = Log::open_in(env, dir.path().join("p-0"), config).expect("open");
        let partition = Arc::new(Partition::open(log, fs).expect("partition"));
        Ok((
            dir,
            LogStore(Arc::clone(&partition)),
            StateMachine(partition),
        ))
    }
}

#[test]
fn openraft_storage_suite_passes() {
    Suite::test_all(OncelogBuilder).expect("openraft's storage suite");
}
