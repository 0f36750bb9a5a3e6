//! Retention and DeleteRecords in a cluster (docs/design.md, "Retention and DeleteRecords in a
//! cluster"). A partition's log start as clients see it is the greater of its replica's own
//! and the one DeleteRecords decided (a `delete_records` metadata record every node applies,
//! so a replica that was down or lagging learns it from the metadata log). Bytes go later, on
//! each node's own schedule: a periodic job raises each replica's physical log start toward
//! the decided one and enforces `retention.ms` / `retention.bytes`, both only below raft's
//! purge point (`Replica::raise_log_start`, `Replica::enforce_retention`), so nothing raft may
//! still send to a lagging replica, or needs on a restart, is deleted.

use std::sync::Arc;
use std::time::Duration;

use oncelog::Clock;
use oncelog_raft::{GroupId, Replica};
use tokio::task::JoinHandle;

use super::{Cluster, MetadataRecord, TopicImage, Wait, WriteRefused};

/// Runs [`Cluster::enforce_retention`] every `every` until the cluster closes.
pub(super) fn keep_enforcing(cluster: Arc<Cluster>, every: Duration) -> JoinHandle<()> {
    tokio::spawn(async move {
        let mut tick = tokio::time::interval(every);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tick.tick().await;
            let c = Arc::clone(&cluster);
            // File work (a checkpoint's fsync, segments renamed): off the reactor.
            if let Err(e) = tokio::task::spawn_blocking(move || c.enforce_retention()).await {
                tracing::error!(error = %e, "the retention job failed");
            }
        }
    })
}

impl Cluster {
    /// The log start of partition `index` of `topic` as clients see it on this node's
    /// `replica`: its own, or the one DeleteRecords decided if that is higher (the replica
    /// deletes the bytes below it once raft no longer needs them).
    pub fn log_start(&self, topic: &str, index: i32, replica: &Replica) -> i64 {
        let decided = self
            .image
            .read()
            .topic(topic)
            .map_or(0, |t| t.log_start(index));
        replica.log().log_start_offset().max(decided)
    }

    /// One round of the retention job over every replica this node holds of the image's
    /// topics (never the metadata and offsets groups: their whole log is replayed): the log
    /// start raised toward what DeleteRecords decided, then the retention rules, each as far
    /// as raft's purge point allows.
    pub fn enforce_retention(&self) {
        // Not before this node followed its whole image once after it started: until then a
        // replica opened from disk may still have its file's older settings (a change made
        // while the node was down, reapplied by the replay).
        if !self.reconciled.load(std::sync::atomic::Ordering::Acquire) {
            return;
        }
        let now = oncelog::SystemClock.now_ms();
        let held: Vec<(GroupId, Arc<Replica>, i64)> = {
            let image = self.image.read();
            self.host
                .replicas()
                .into_iter()
                .filter_map(|(group, replica)| {
                    let decided = image.topic(&group.topic)?.log_start(group.partition);
                    Some((group, replica, decided))
                })
                .collect()
        };
        for (group, replica, decided) in held {
            if decided > replica.log().log_start_offset() {
                match replica.raise_log_start(decided) {
                    Ok(start) => {
                        tracing::debug!(partition = %group, decided, start, "log start raised")
                    }
                    Err(e) => {
                        tracing::warn!(partition = %group, error = %e, "cannot raise the log start")
                    }
                }
            }
            match replica.enforce_retention(now) {
                Ok(report) if !report.deleted.is_empty() => tracing::info!(
                    partition = %group,
                    segments = report.deleted.len(),
                    log_start = report.log_start_offset,
                    "retention deleted segments"
                ),
                Ok(_) => {}
                // A replica removed meanwhile (its topic deleted) is closed: nothing to do.
                Err(e) => tracing::debug!(partition = %group, error = %e, "retention not applied"),
            }
        }
    }

    /// DeleteRecords on the controller: appends a `delete_records` record raising the log
    /// starts of `topic`'s partitions to `offsets` (`(partition, offset)`, each checked by the
    /// partition's leader against its high watermark) and answers the topic as this node's
    /// image holds it once applied.
    pub async fn delete_records(
        &self,
        topic: &str,
        offsets: Vec<(i32, i64)>,
        timeout: Duration,
    ) -> Result<TopicImage, WriteRefused> {
        let _one = self.writing.lock().await;
        let found = self.topic_on_controller(topic).await?;
        let record = MetadataRecord::DeleteRecords {
            name: found.name.clone(),
            id: found.id,
            offsets,
        };
        let wait = Wait {
            within: timeout,
            applied: true,
        };
        self.write(&record, wait).await?;
        self.image
            .read()
            .topic_by_id(found.id)
            .cloned()
            .ok_or(WriteRefused::Unknown)
    }

    /// Waits (at most `within`) until this node's image holds the log starts `offsets`
    /// (`(partition, offset)`) of `topic`, or a later incarnation of it: a leader that had
    /// the controller write a DeleteRecords answers only once its own reads honour it.
    pub async fn wait_log_starts(&self, topic: &str, offsets: &[(i32, i64)], within: Duration) {
        let reached = || {
            self.image
                .read()
                .topic(topic)
                .is_none_or(|t| offsets.iter().all(|(p, offset)| t.log_start(*p) >= *offset))
        };
        let mut applied = self.applied.subscribe();
        let _ = tokio::time::timeout(within, applied.wait_for(|_| reached())).await;
    }
}
