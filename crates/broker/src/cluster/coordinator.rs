//! The group, transaction and share coordinators of a cluster (docs/design.md, "The group
//! coordinator in a cluster", "The transaction coordinator in a cluster", "Share groups in a
//! cluster"): the node that leads the offsets group ([`super::OFFSETS_TOPIC`]) loads the
//! coordinators' state from the
//! replicated log before it answers as coordinator, completes the transactions whose end was
//! decided, and forgets it all when it stops leading. The coordinators' code is the single
//! broker's; only their log is replicated
//! ([`crate::offsets_log::OffsetsLog::replicated`], [`crate::txn_coordinator::Txns::replicated`]).

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
            if leading && loaded != status.term && cluster.image_caught_up().await {
                let b = Arc::clone(&broker);
                let started = std::time::Instant::now();
                let term = status.term;
                // The consumer groups' assignments are resolved against the image's topics,
                // caught up with the metadata log (above).
                let topics = crate::api::cluster_topic_infos(&cluster);
                let done = tokio::task::spawn_blocking(move || {
                    // The offsets' load commits the barrier both replays need.
                    b.offsets
                        .load(&b.groups, &topics)
                        .map_err(|e| e.to_string())?;
                    let endings = b.txns.load(term).map_err(|e| e.to_string())?;
                    b.shares.load().map_err(|e| e.to_string())?;
                    Ok::<_, String>(endings)
                })
                .await;
                match done {
                    Ok(Ok(endings)) => {
                        cluster.coordinating.store(term, Ordering::Release);
                        tracing::info!(
                            term,
                            took_ms = started.elapsed().as_millis() as u64,
                            decided = endings.len(),
                            "group, transaction and share coordinators loaded"
                        );
                        // The transactions whose end a previous coordinator decided are
                        // completed now; their ids answer CONCURRENT_TRANSACTIONS meanwhile.
                        for ending in endings {
                            let b = Arc::clone(&broker);
                            tokio::task::spawn_blocking(move || {
                                if let Err(e) = crate::txn_coordinator::write_ending_of(&b, &ending)
                                {
                                    tracing::warn!(
                                        transactional_id = %ending.transactional_id,
                                        error = ?e,
                                        "cannot complete a decided transaction"
                                    );
                                }
                            });
                        }
                    }
                    // Not leading any more, or raft failed: looked at again next round.
                    Ok(Err(e)) => tracing::warn!(error = %e, "cannot load the group coordinator"),
                    Err(e) => tracing::error!(error = %e, "group coordinator load task failed"),
                }
            } else if !leading && loaded != 0 {
                cluster.coordinating.store(0, Ordering::Release);
                // Off the reactor: a write in flight holds the coordinators' locks until raft
                // answers it (NOT_LEADER now), and raft needs the reactor to answer: blocking a
                // worker on them here stopped a node whole (seen with two workers).
                let b = Arc::clone(&broker);
                let unloaded = tokio::task::spawn_blocking(move || {
                    b.offsets.unload(&b.groups);
                    b.txns.unload();
                    b.shares.unload();
                })
                .await;
                if let Err(e) = unloaded {
                    tracing::error!(error = %e, "coordinator unload task failed");
                }
                tracing::info!(
                    term = status.term,
                    "group, transaction and share coordinators unloaded"
                );
            }
        }
    })
}
