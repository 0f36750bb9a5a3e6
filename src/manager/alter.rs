//! Changing an open partition's settings ([`LogManager::alter_config`]).

use std::sync::Arc;

use super::{Inner, LogManager, ManagerError, PartitionConfig, ResolvedConfig, Slot, SlotState};
use crate::TopicPartition;

impl LogManager {
    /// Replaces an online partition's own settings (its `oncelog.properties`: Kafka's topic
    /// configuration, `config` over the manager's defaults) while it stays open, as Kafka's
    /// IncrementalAlterConfigs does: the log takes them through
    /// [`Log::reconfigure`](crate::Log::reconfigure) (when each setting takes effect is said
    /// there), the manager's jobs from their next run (`flush.messages`, `flush.ms`, the
    /// cleanup policy). The file is written (atomically, durably) before the log changes, so a
    /// crash between the two reopens the partition with the new settings. A configuration the
    /// log refuses changes nothing. Returns the partition's settings resolved.
    pub fn alter_config(
        &self,
        topic: &str,
        partition: i32,
        config: PartitionConfig,
    ) -> Result<ResolvedConfig, ManagerError> {
        self.inner.check_open()?;
        alter(&self.inner, &TopicPartition::new(topic, partition), config)
    }
}

fn alter(
    inner: &Inner,
    tp: &TopicPartition,
    config: PartitionConfig,
) -> Result<ResolvedConfig, ManagerError> {
    let _changes = inner.changes.lock();
    let slot = inner.partitions.read().get(tp).cloned();
    let slot = slot.ok_or_else(|| ManagerError::UnknownPartition {
        partition: tp.clone(),
    })?;
    let log = match &slot.state {
        SlotState::Online { log, .. } => Arc::clone(log),
        SlotState::Offline(f) => {
            return Err(ManagerError::PartitionOffline {
                partition: tp.clone(),
                failure: Arc::clone(f),
            })
        }
    };
    let resolved = config.resolve(&inner.config);
    // Checked in full before the file is written: a refusal changes nothing.
    resolved.log.validate()?;
    log.check_reconfigure(&resolved.log)?;
    config.write(inner.env.fs.as_ref(), &slot.path)?;
    log.reconfigure(resolved.log.clone())?;
    let updated = Slot {
        tp: slot.tp.clone(),
        dir: slot.dir,
        path: slot.path.clone(),
        state: SlotState::Online {
            log,
            config: Box::new(resolved.clone()),
        },
        kept: slot.kept,
        dirty_since: parking_lot::Mutex::new(*slot.dirty_since.lock()),
    };
    inner.partitions.write().insert(tp.clone(), Arc::new(updated));
    Ok(resolved)
}
