//! The group coordinator of a cluster (docs/design.md, "The group coordinator in a cluster"):
//! the node that leads the offsets group ([`super::OFFSETS_TOPIC`]) loads the coordinator's
//! state from the replicated log before it answers as coordinator, and forgets it when it
//! stops leading. The coordinator's code is the single broker's; only its log is replicated
//! ([`crate::offsets_log::OffsetsLog::replicated`]).

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::task::JoinHandle;

use super::{offsets_group, Cluster};
use crate::broker::Broker;

/// How often the offsets group's leadership is looked at.
const WATCH_EVERY: Duration = Duration::from_millis(50);

/// Watches the offsets group's leadership on this node: a new term led here loads the state,
/// a lost leadership unloads it.
pub fn keep_coordinating(broker: Arc<Broker>, cluster: Arc<Cluster>) -> JoinHandle<()> {
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            let Ok(status) = cluster.host.status(&offsets_group()) else {
                continue;
            };
            let leading = status.leader == Some(cluster.me() as u64);
            let loaded = cluster.coordinating.load(Ordering::Acquire);
            if leading && loaded != status.term && cluster.image_caught_up() {
                let b = Arc::clone(&broker);
                let started = std::time::Instant::now();
                let done = tokio::task::spawn_blocking(move || b.offsets.load(&b.groups)).await;
                match done {
                    Ok(Ok(())) => {
                        cluster.coordinating.store(status.term, Ordering::Release);
                        tracing::info!(
                            term = status.term,
                            took_ms = started.elapsed().as_millis() as u64,
                            "group coordinator loaded"
                        );
                    }
                    // Not leading any more, or raft failed: looked at again next round.
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot load the group coordinator"),
                    Err(e) => tracing::error!(error = %e, "group coordinator load task failed"),
                }
            } else if !leading && loaded != 0 {
                cluster.coordinating.store(0, Ordering::Release);
                broker.offsets.unload(&broker.groups);
                tracing::info!(term = status.term, "group coordinator unloaded");
            }
        }
    })
}
