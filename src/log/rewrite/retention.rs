//! Retention and DeleteRecords: cutting the log from the front (docs/format.md "Retention").
//!
//! Kafka's three rules, applied in its order, each walking from the oldest segment and stopping
//! at the first it spares: the log start offset (a segment wholly below it goes), the size
//! limit, the time limit. Whole segments only; never one that reaches above the high watermark
//! (nor, in oncelog, above the durable end); never an empty last segment; when every segment
//! qualifies the log rolls first, so the log keeps an active segment.
//!
//! Dedup outlives data: the producer state is not touched, and before the log start moves, a
//! snapshot at or after the new log start is made durable (so a restart, which replays from the
//! newest snapshot, never needs the removed batches to know a producer). The new log start is
//! durable (in the checkpoint) before any file is renamed `.deleted`, so a crash never brings
//! removed data back: recovery removes segments wholly below the log start.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Exclusive;
use crate::log::producers::ReplayWants;
use crate::log::{epochs, AppendError, Log, RewriteError};
use crate::producer::snapshot_files;
use crate::segment::Segment;

/// Why retention deleted a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum RetentionReason {
    /// It lies wholly below the log start offset (raised by DeleteRecords).
    LogStart,
    /// The log was larger than `retention_bytes`.
    Size,
    /// Its newest timestamp is older than `retention_ms`.
    Time,
    /// Tiered storage's local retention: the local copies were larger than
    /// `local_retention_bytes`, and the object store holds this segment (its manifest names it).
    LocalSize,
    /// Tiered storage's local retention: its newest timestamp is older than
    /// `local_retention_ms`, and the object store holds this segment.
    LocalTime,
}

impl RetentionReason {
    /// A stable snake_case name.
    pub fn name(self) -> &'static str {
        match self {
            RetentionReason::LogStart => "log_start",
            RetentionReason::Size => "size",
            RetentionReason::Time => "time",
            RetentionReason::LocalSize => "local_size",
            RetentionReason::LocalTime => "local_time",
        }
    }
}

/// A segment retention deleted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeletedSegment {
    /// The segment's base offset.
    pub base_offset: i64,
    /// The offset after its last batch: the log start offset once it is gone.
    pub next_offset: i64,
    /// The size of its `.log`.
    pub bytes: u64,
    /// Which limit it broke.
    pub reason: RetentionReason,
}

/// What [`Maintenance::enforce_retention`](crate::Maintenance::enforce_retention) did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RetentionReport {
    /// The segments deleted, oldest first.
    pub deleted: Vec<DeletedSegment>,
    /// The log start offset after.
    pub log_start_offset: i64,
    /// Whether the log rolled first because every segment qualified.
    pub rolled: bool,
    /// Snapshots removed (below the new log start, a newer one holding their state).
    pub snapshots_removed: Vec<i64>,
}

/// What the retention rules look at in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Retainable {
    pub base_offset: i64,
    /// The next segment's base, or the log end for the last one.
    pub upper_bound: i64,
    pub bytes: u64,
    /// Its newest batch timestamp, -1 if it has none.
    pub largest_timestamp: i64,
}

/// The retention limits and bounds, at one moment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Limits {
    pub log_start_offset: i64,
    /// Nothing at or above it may go: the high watermark, and the durable end.
    pub bound: i64,
    pub retention_bytes: Option<u64>,
    pub retention_ms: Option<i64>,
    pub now_ms: i64,
}

/// Kafka's rules as a pure decision: the reason for each of the leading segments to delete.
pub(crate) fn deletable(segments: &[Retainable], limits: &Limits) -> Vec<RetentionReason> {
    let mut out: Vec<RetentionReason> = Vec::new();
    let last = segments.len().saturating_sub(1);
    let allowed =
        |i: usize, s: &Retainable| s.upper_bound <= limits.bound && !(i == last && s.bytes == 0);
    // 1. Below the log start: the next segment starts at or below it, so the last segment
    //    never goes by this rule (even when DeleteRecords moved the start to the log end).
    for (i, s) in segments.iter().enumerate().skip(out.len()) {
        if !(allowed(i, s) && i != last && s.upper_bound <= limits.log_start_offset) {
            break;
        }
        out.push(RetentionReason::LogStart);
    }
    // 2. Size: the excess shrinks as segments go.
    if let Some(limit) = limits.retention_bytes {
        let total: u64 = segments[out.len()..].iter().map(|s| s.bytes).sum();
        let mut excess = total as i128 - limit as i128;
        for (i, s) in segments.iter().enumerate().skip(out.len()) {
            if !(allowed(i, s) && excess - s.bytes as i128 >= 0) {
                break;
            }
            excess -= s.bytes as i128;
            out.push(RetentionReason::Size);
        }
    }
    // 3. Time.
    if let Some(ms) = limits.retention_ms {
        for (i, s) in segments.iter().enumerate().skip(out.len()) {
            let expired =
                s.largest_timestamp >= 0 && limits.now_ms.saturating_sub(s.largest_timestamp) > ms;
            if !(allowed(i, s) && expired) {
                break;
            }
            out.push(RetentionReason::Time);
        }
    }
    out
}

impl Log {
    /// Raises the log start offset to `offset` (Kafka's DeleteRecords): records below it are
    /// no longer readable ([`crate::ReadError::OffsetOutOfRange`] names the new start) and the
    /// segments wholly below it go at the next [`Maintenance::enforce_retention`](crate::Maintenance::enforce_retention). Never above the high
    /// watermark; an offset at or below the current start changes nothing. Durable before it
    /// returns. Producer state is kept: a producer whose batches are all gone is still known.
    /// Returns the log start offset after.
    pub fn delete_records(&self, offset: i64) -> Result<i64, RewriteError> {
        let high_watermark = self.high_watermark();
        if offset > high_watermark {
            return Err(RewriteError::AboveHighWatermark {
                offset,
                high_watermark,
            });
        }
        if offset <= self.log_start_offset() {
            return Ok(self.log_start_offset());
        }
        // The log start never passes the durable end (the checkpoint keeps that rule), and
        // the high watermark can be ahead of it when the caller sets it.
        if offset > self.recovery_point() {
            self.flush()?;
        }
        let mut ex = self.exclusive()?;
        if offset > self.recovery_point() {
            return Err(RewriteError::AboveHighWatermark {
                offset,
                high_watermark: self.recovery_point(),
            });
        }
        if offset <= self.log_start_offset() {
            return Ok(self.log_start_offset());
        }
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let now = self.env.clock.now_ms();
        self.raise_log_start(&mut ex, &segments, offset, now)?;
        Ok(offset)
    }

    /// The work of [`Maintenance::enforce_retention`](crate::Maintenance::enforce_retention).
    pub(crate) fn enforce_retention(&self, now_ms: i64) -> Result<RetentionReport, RewriteError> {
        self.enforce_retention_below(now_ms, i64::MAX)
    }

    /// The work of [`Maintenance::enforce_retention_below`](crate::Maintenance::enforce_retention_below).
    pub(crate) fn enforce_retention_below(
        &self,
        now_ms: i64,
        bound: i64,
    ) -> Result<RetentionReport, RewriteError> {
        self.enforce_limits(now_ms, |log| log.retention_limits(now_ms, bound), |r| r)
    }

    /// Tiered storage's local retention (docs/design.md, "Tiered storage"): Kafka's size and
    /// time rules with `local_retention_bytes` and `local_retention_ms` for limits, deleting
    /// only segments that end at or below `confirmed_end`, the end of the leading segments an
    /// object store's manifest names. The log start moves up to the first segment kept, as
    /// retention moves it; the object store keeps what went.
    pub(crate) fn enforce_local_retention(
        &self,
        now_ms: i64,
        local_retention_bytes: Option<u64>,
        local_retention_ms: Option<i64>,
        confirmed_end: i64,
    ) -> Result<RetentionReport, RewriteError> {
        // As the size and time rules, only when the cleanup policy contains `delete`.
        let limits = |log: &Log| {
            let deletes = log.config().cleanup_policy.deletes();
            Limits {
                retention_bytes: local_retention_bytes.filter(|_| deletes),
                retention_ms: local_retention_ms.filter(|_| deletes),
                ..log.retention_limits(now_ms, confirmed_end)
            }
        };
        let local = |r| match r {
            RetentionReason::Size => RetentionReason::LocalSize,
            RetentionReason::Time => RetentionReason::LocalTime,
            other => other,
        };
        self.enforce_limits(now_ms, limits, local)
    }

    /// Tiered storage's total retention of the segments only an object store holds (docs/
    /// design.md, "Tiered storage"): Kafka's size and time rules with this log's
    /// `retention_bytes` and `retention_ms`, over `remote_only` (`(base, end, bytes, largest
    /// timestamp)`, oldest first, all below the log start) followed by the log's own segments,
    /// the size counting both. Answers the reasons for the leading remote-only segments to go;
    /// the log's own segments are its retention's. Changes nothing.
    pub(crate) fn remote_retention(
        &self,
        remote_only: &[(i64, i64, u64, i64)],
        now_ms: i64,
    ) -> Vec<RetentionReason> {
        let start = self.log_start_offset();
        let mut summaries: Vec<Retainable> = remote_only
            .iter()
            .map(|&(base_offset, upper_bound, bytes, largest_timestamp)| Retainable {
                base_offset,
                upper_bound,
                bytes,
                largest_timestamp,
            })
            .collect();
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let end = self.log_end_offset();
        summaries.extend(segments.iter().enumerate().map(|(i, s)| Retainable {
            base_offset: s.base_offset(),
            upper_bound: segments.get(i + 1).map_or(end, |n| n.base_offset()),
            bytes: s.size() as u64,
            largest_timestamp: s.max_timestamp(),
        }));
        let limits = Limits {
            // DeleteRecords drops remote segments below the partition's start from the manifest
            // itself (`tier::delete_records`): the log-start rule has none left to remove.
            log_start_offset: remote_only.first().map_or(start, |r| r.0),
            ..self.retention_limits(now_ms, start)
        };
        let mut reasons = deletable(&summaries, &limits);
        reasons.truncate(remote_only.len());
        reasons
    }

    /// Deletes the leading segments [`deletable`] finds under the limits `limits` makes (under
    /// the exclusive turn), each reported with its reason as `reason` maps it.
    fn enforce_limits(
        &self,
        now_ms: i64,
        limits: impl FnOnce(&Log) -> Limits,
        reason: impl Fn(RetentionReason) -> RetentionReason,
    ) -> Result<RetentionReport, RewriteError> {
        let mut ex = self.exclusive()?;
        let mut segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let end = self.log_end_offset();
        let summaries: Vec<Retainable> = segments
            .iter()
            .enumerate()
            .map(|(i, s)| Retainable {
                base_offset: s.base_offset(),
                upper_bound: segments.get(i + 1).map_or(end, |n| n.base_offset()),
                bytes: s.size() as u64,
                largest_timestamp: s.max_timestamp(),
            })
            .collect();
        let limits = limits(self);
        let reasons: Vec<RetentionReason> =
            deletable(&summaries, &limits).into_iter().map(reason).collect();
        let mut report = RetentionReport {
            log_start_offset: self.log_start_offset(),
            ..RetentionReport::default()
        };
        if reasons.is_empty() {
            self.remove_due_deletions(now_ms, false)?;
            self.trim_dead_tails(&ex.st)?;
            return Ok(report);
        }
        if reasons.len() == segments.len() {
            // Every segment goes: the log rolls first, so it keeps one to append to.
            self.roll_at(&mut ex.st, end, 0, now_ms).map_err(append_error)?;
            report.rolled = true;
            segments = self.segments.read().values().cloned().collect();
        }
        let new_start = segments[reasons.len()]
            .base_offset()
            .max(limits.log_start_offset);
        let doomed: Vec<Arc<Segment>> = segments[..reasons.len()].to_vec();
        let kept: Vec<Arc<Segment>> = segments[reasons.len()..].to_vec();
        // Whether or not the log start moves (DeleteRecords may have moved it already), the
        // producer state of what goes is kept first.
        report.snapshots_removed = self.raise_log_start(&mut ex, &kept, new_start, now_ms)?;
        self.retire_expired(&mut ex, &doomed, &reasons, now_ms, &mut report)?;
        report.log_start_offset = self.log_start_offset();
        drop(ex);
        self.remove_due_deletions(now_ms, false)?;
        self.trim_dead_tails_locking()?;
        Ok(report)
    }

    /// What retention may delete: never above `bound`, the high watermark or the recovery
    /// point.
    fn retention_limits(&self, now_ms: i64, bound: i64) -> Limits {
        Limits {
            log_start_offset: self.log_start_offset(),
            bound: self.high_watermark().min(self.recovery_point()).min(bound),
            // Size and time apply only when the cleanup policy contains `delete`.
            retention_bytes: self
                .config()
                .retention_bytes
                .filter(|_| self.config().cleanup_policy.deletes()),
            retention_ms: self
                .config()
                .retention_ms
                .filter(|_| self.config().cleanup_policy.deletes()),
            now_ms,
        }
    }

    /// Retires the `doomed` segments' files (for `reasons`) and takes them out of the log.
    fn retire_expired(
        &self,
        ex: &mut Exclusive<'_>,
        doomed: &[Arc<Segment>],
        reasons: &[RetentionReason],
        now_ms: i64,
        report: &mut RetentionReport,
    ) -> Result<(), RewriteError> {
        let fs = self.env.fs.as_ref();
        for (s, reason) in doomed.iter().zip(reasons) {
            let bytes = self.retire_segment_files(s.base_offset(), now_ms, Some(s))?;
            report.deleted.push(DeletedSegment {
                base_offset: s.base_offset(),
                next_offset: s.next_offset(),
                bytes,
                reason: *reason,
            });
        }
        fs.sync_dir(&self.dir)
            .map_err(|e| crate::io::IoError::new("fsync directory", &self.dir, e))?;
        {
            let mut map = self.segments.write();
            for s in doomed {
                map.remove(&s.base_offset());
            }
        }
        // Out of the log, no reader maps them again: their own maps need not live until the
        // delay is over (readers keep theirs, which keeps a file from being recycled).
        for s in doomed {
            s.unpin();
            s.unmap();
        }
        ex.st
            .unflushed_sealed
            .retain(|u| doomed.iter().all(|d| d.base_offset() != u.base_offset()));
        Ok(())
    }

    /// Moves the log start offset to `new_start` (or keeps it there) durably: the producer
    /// state of the segments before `kept` first, then the checkpoint that records only
    /// `kept`, the leader-epoch cache, and the snapshots it makes unnecessary. Returns the
    /// snapshots removed.
    ///
    /// A snapshot at the first kept segment's base keeps a producer known after its batches
    /// are gone: a roll wrote it there, or, if none did, it is computed now from the segments
    /// about to go. Every truncation point is at or above the log start, so no truncation
    /// removes it, and the kept segments hold every batch after it; a restart and a truncation
    /// replay from it (or from a newer one). A snapshot at the log end is written too when none
    /// is at or after the new start, so a restart does not replay what DeleteRecords hid.
    fn raise_log_start(
        &self,
        ex: &mut Exclusive<'_>,
        kept: &[Arc<Segment>],
        new_start: i64,
        now_ms: i64,
    ) -> Result<Vec<i64>, RewriteError> {
        let fs = self.env.fs.as_ref();
        let first_base = kept.first().map_or(new_start, |s| s.base_offset());
        let all: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let removed: Vec<Arc<Segment>> = all
            .iter()
            .filter(|s| s.base_offset() < first_base)
            .cloned()
            .collect();
        // The snapshots that rolls left for the next flush are made durable now: one of them
        // may be the one at the first kept base.
        for pending in ex.st.producers.take_pending() {
            pending.finish(fs)?;
        }
        // At the base itself: a snapshot elsewhere below the log start is a stray that the
        // next open removes (Kafka keeps one per segment base and the newest).
        let snapshots = snapshot_files::list(fs, &self.dir)?;
        let at_first_base = snapshots.iter().any(|(o, _)| *o == first_base);
        if !removed.is_empty() && !at_first_base {
            let wants = ReplayWants {
                txn_index_from: None,
                completed_from: first_base,
            };
            let plan = self.rebuild_producers(
                &removed,
                None,
                self.log_start_offset(),
                first_base,
                wants,
                now_ms,
            )?;
            plan.into_state().write_snapshot(fs, &self.dir, first_base)?;
        }
        let newest = snapshot_files::list(fs, &self.dir)?.last().map(|(o, _)| *o);
        if newest.is_none_or(|o| o < new_start) {
            let end = self.log_end_offset();
            ex.st.producers.write_snapshot(fs, &self.dir, end)?;
        }
        self.write_log_start_checkpoint(ex, kept, new_start)?;
        self.log_start_offset.store(new_start, Ordering::Release);
        let mut cache = ex.st.epochs.clone();
        if cache.truncate_from_start(new_start) {
            epochs::write(fs, &self.dir, cache.entries())?;
            ex.st.epochs = cache;
            ex.st.epochs_unwritten = false;
        }
        // Snapshots below the first kept segment need batches that are gone: they go the way of
        // the segments, by `.deleted` (Kafka's `removeAndMarkSnapshotForDeletion`); the newest is
        // always kept. The directory is synced with the segments' renames.
        let listed = snapshot_files::list(fs, &self.dir)?;
        let newest = listed.last().map(|(o, _)| *o);
        let mut snapshots_removed = Vec::new();
        for (offset, path) in listed {
            if offset < first_base && Some(offset) != newest {
                self.retire_file(&path, now_ms)?;
                snapshots_removed.push(offset);
            }
        }
        Ok(snapshots_removed)
    }

    fn write_log_start_checkpoint(
        &self,
        ex: &mut Exclusive<'_>,
        kept: &[Arc<Segment>],
        log_start: i64,
    ) -> Result<(), RewriteError> {
        let c = self.checkpoint_of(&ex.st, kept, self.recovery_point(), log_start);
        self.store_checkpoint(&mut ex.st, &c)?;
        Ok(())
    }
}

pub(super) fn append_error(e: AppendError) -> RewriteError {
    match e {
        AppendError::Io(e) => RewriteError::Io(e),
        AppendError::ReadOnly { cause } => RewriteError::ReadOnly { cause },
        other => RewriteError::Io(crate::io::IoError::new(
            "roll",
            std::path::Path::new(""),
            std::io::Error::other(other.to_string()),
        )),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seg(base: i64, upper: i64, bytes: u64, ts: i64) -> Retainable {
        Retainable {
            base_offset: base,
            upper_bound: upper,
            bytes,
            largest_timestamp: ts,
        }
    }

    fn limits(log_start: i64, bound: i64) -> Limits {
        Limits {
            log_start_offset: log_start,
            bound,
            retention_bytes: None,
            retention_ms: None,
            now_ms: 1_000_000,
        }
    }

    use RetentionReason::*;

    #[test]
    fn segments_wholly_below_the_log_start_go() {
        let segs = [
            seg(0, 100, 10, 5),
            seg(100, 200, 10, 5),
            seg(200, 250, 10, 5),
        ];
        assert_eq!(deletable(&segs, &limits(150, 250)), vec![LogStart]);
        assert_eq!(
            deletable(&segs, &limits(200, 250)),
            vec![LogStart, LogStart]
        );
        assert_eq!(deletable(&segs, &limits(99, 250)), vec![]);
        assert_eq!(
            deletable(&segs, &limits(250, 250)),
            vec![LogStart, LogStart],
            "the last segment has no next one to start at or below the log start"
        );
    }

    #[test]
    fn size_keeps_the_newest_bytes_and_stops_at_the_first_it_spares() {
        let segs = [
            seg(0, 100, 40, 5),
            seg(100, 200, 30, 5),
            seg(200, 250, 20, 5),
        ];
        let l = |bytes| Limits {
            retention_bytes: Some(bytes),
            ..limits(0, 250)
        };
        assert_eq!(deletable(&segs, &l(90)), vec![]);
        assert_eq!(
            deletable(&segs, &l(50)),
            vec![Size],
            "excess 40: the first one"
        );
        assert_eq!(deletable(&segs, &l(20)), vec![Size, Size]);
        assert_eq!(deletable(&segs, &l(0)), vec![Size, Size, Size]);
    }

    #[test]
    fn time_deletes_segments_whose_newest_record_is_too_old() {
        let segs = [
            seg(0, 100, 10, 1_000),
            seg(100, 200, 10, 500_000),
            seg(200, 250, 10, 990_000),
        ];
        let l = Limits {
            retention_ms: Some(100_000),
            ..limits(0, 250)
        };
        assert_eq!(deletable(&segs, &l), vec![Time, Time]);
        // A segment with no timestamp is never too old.
        let segs = [seg(0, 100, 10, -1), seg(100, 200, 10, 1)];
        assert_eq!(deletable(&segs, &l), vec![]);
    }

    #[test]
    fn nothing_above_the_bound_and_no_empty_last_segment() {
        let segs = [
            seg(0, 100, 10, 1),
            seg(100, 200, 10, 1),
            seg(200, 200, 0, -1),
        ];
        let l = |bound| Limits {
            retention_ms: Some(1),
            ..limits(0, bound)
        };
        assert_eq!(
            deletable(&segs, &l(150)),
            vec![Time],
            "the second reaches above the bound"
        );
        assert_eq!(deletable(&segs, &l(200)), vec![Time, Time]);
        let all = [seg(0, 100, 10, 1), seg(100, 150, 10, 1)];
        assert_eq!(
            deletable(&all, &l(150)),
            vec![Time, Time],
            "the active one qualifies too"
        );
    }

    #[test]
    fn the_rules_run_in_kafkas_order_on_what_the_previous_left() {
        let segs = [
            seg(0, 100, 40, 900_000),
            seg(100, 200, 30, 1),
            seg(200, 300, 20, 999_999),
        ];
        let l = Limits {
            retention_bytes: Some(45),
            retention_ms: Some(50_000),
            ..limits(100, 300)
        };
        // Log start takes the first; size then sees 50 bytes, 5 over, and spares the second
        // (30 bytes would take it below the limit); time takes the second and spares the third.
        assert_eq!(deletable(&segs, &l), vec![LogStart, Time]);
    }
}
