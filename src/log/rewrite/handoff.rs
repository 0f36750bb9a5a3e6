//! What one replica hands another that starts its log where this one's is: the producer state
//! as of an offset, and a start-over that takes it (docs/design.md "Replication on an existing
//! engine"). A replication layer whose lagging follower can no longer be caught up from the
//! leader's log (the entries it needs were purged) sends it the leader's retained batches and
//! the producer state at their first offset; the follower starts over there with that state
//! and appends the batches, so its dedup answers are the leader's.

use std::sync::Arc;

use super::truncate::cut_point;
use crate::io::IoError;
use crate::log::producers::ReplayWants;
use crate::log::{Log, RewriteError, TruncateReport};
use crate::producer::{snapshot, snapshot_files};
use crate::segment::Segment;

impl Log {
    /// The work of [`ReplicaLog::producer_snapshot_at`].
    pub(crate) fn producer_snapshot_at(&self, offset: i64) -> Result<Vec<u8>, RewriteError> {
        let now = self.env.clock.now_ms();
        // Exclusive: no append or rewrite moves the segments while they are replayed.
        let _ex = self.exclusive()?;
        let (start, end) = (self.log_start_offset(), self.log_end_offset());
        if offset > end {
            return Err(RewriteError::AboveLogEnd {
                offset,
                log_end_offset: end,
            });
        }
        if offset < start {
            return Err(RewriteError::BelowLogStart {
                offset,
                log_start_offset: start,
            });
        }
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let at = segments
            .iter()
            .rposition(|s| s.base_offset() <= offset)
            .unwrap_or(0);
        let (kept, cut_extent) = match segments.get(at) {
            None => (&segments[..0], None),
            Some(s) => {
                let view = s.view()?;
                let (cut, boundary) = cut_point(s, &view, offset)?;
                if boundary != offset {
                    return Err(RewriteError::NotABatchBoundary {
                        offset,
                        batch_start: boundary,
                    });
                }
                (&segments[..at], (cut > 0).then_some((s.as_ref(), cut, offset)))
            }
        };
        let wants = ReplayWants {
            txn_index_from: None,
            completed_from: offset,
        };
        let state = self
            .rebuild_producers(kept, cut_extent, start, offset, wants, now)?
            .into_state();
        Ok(snapshot::encode(
            state.table().iter(),
            self.config().snapshot_version,
            offset,
        ))
    }

    /// The work of [`ReplicaLog::truncate_fully_and_start_with`].
    pub(crate) fn truncate_fully_and_start_with(
        &self,
        offset: i64,
        producer_snapshot: &[u8],
    ) -> Result<TruncateReport, RewriteError> {
        let decoded = snapshot::decode(producer_snapshot)
            .map_err(|e| RewriteError::BadProducerSnapshot(e.to_string()))?;
        if decoded.offset.is_some_and(|o| o != offset) {
            return Err(RewriteError::BadProducerSnapshot(format!(
                "the snapshot is of offset {}, not {offset}",
                decoded.offset.unwrap_or_default()
            )));
        }
        let mut report = self.truncate_fully_and_start_at(offset)?;
        let now = self.env.clock.now_ms();
        let mut ex = self.exclusive()?;
        let fs = self.env.fs.as_ref();
        snapshot_files::write(fs, &self.dir, offset, producer_snapshot)?;
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let wants = ReplayWants {
            txn_index_from: None,
            completed_from: offset,
        };
        let (producers, load) = self
            .rebuild_producers(&segments, None, offset, self.log_end_offset(), wants, now)?
            .apply(fs, &self.dir)
            .map_err(|e: IoError| RewriteError::Io(e))?;
        ex.st.producers = producers;
        report.producers = load;
        Ok(report)
    }
}
