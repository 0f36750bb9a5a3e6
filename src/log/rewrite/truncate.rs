//! Truncation from the end (kafka-format rules in docs/format.md "Truncation"): what a follower
//! does when its log diverged from a new leader's.
//!
//! `truncate_to(t)` keeps the batches that end below `t`. A batch that holds `t` goes whole,
//! so the new log end is the start of that batch (never a hole in the offsets); the call says
//! where the log ends now. The segment holding the new end is cut without being shrunk (a
//! reader may hold its bytes) and the log goes on in a new active segment at the new end.
//!
//! Crash safety, step by step: (1) a checkpoint with the recovery point, high watermark and log
//! start lowered to the new end, vouching only for the segments before the one cut; (2) the new
//! active segment at the new end, made durable, which makes everything at or after it in the
//! older files damage past the recovery point, cut by any recovery; (3) the later segments
//! renamed `.deleted`; (4) snapshots above the new end removed, producer state rebuilt;
//! (5) the leader-epoch cache cut. A crash before (2) leaves the log as it was (with a lower
//! recovery point); from (2) on, recovery ends it at the new end.

use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::Exclusive;
use crate::format::{BatchIter, RecordBatch};
use crate::io::{IoError, OpenMode};
use crate::log::checkpoint::{self, Checkpoint, SegmentRecord};
use crate::log::producers::{ProducerLoadReport, ProducerState, ReplaySegment, ReplayWants};
use crate::log::txn::Unstable;
use crate::log::{epochs, prefault, AppendState, Log, RewriteError};
use crate::producer::snapshot_files;
use crate::producer::CompletedTxn;
use crate::segment::{self, CorruptSegment, Segment, SegmentView};

/// Where a truncation cuts the log, and the offsets it leaves.
struct CutPlan {
    /// The segment cut, by its index in the log's segments.
    at: usize,
    /// The bytes of it kept.
    cut: usize,
    new_end: i64,
    log_start: i64,
    high_watermark: i64,
}

/// What a truncation did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct TruncateReport {
    /// The log end offset before.
    pub old_log_end: i64,
    /// The log end offset after: at or below the offset asked for, since the batch holding
    /// that offset goes whole.
    pub new_log_end: i64,
    /// The log start offset after (lowered to the new end if it was above it).
    pub log_start_offset: i64,
    /// Base offsets of the segments removed whole.
    pub segments_removed: Vec<i64>,
    /// Bytes of batches removed.
    pub bytes_removed: u64,
    /// Producer snapshots removed (above the new end).
    pub snapshots_removed: Vec<i64>,
    /// How the producer state was rebuilt.
    pub producers: ProducerLoadReport,
}

impl Log {
    /// The work of [`ReplicaLog::truncate_to`].
    pub(crate) fn truncate_to(&self, offset: i64) -> Result<TruncateReport, RewriteError> {
        let now = self.env.clock.now_ms();
        let mut ex = self.exclusive()?;
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
        if offset == end {
            return Ok(TruncateReport {
                old_log_end: end,
                new_log_end: end,
                log_start_offset: start,
                ..TruncateReport::default()
            });
        }
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let at = segments
            .iter()
            .rposition(|s| s.base_offset() <= offset)
            .unwrap_or(0);
        // This call's own view goes before the cut: held, it would count as a reader and
        // leave the removed batches in the file as a dead tail.
        let (cut, new_end) = cut_point(&segments[at], &*segments[at].view()?, offset)?;
        let result = self.truncate_at(&mut ex, &segments, at, cut, new_end, now);
        if result.is_err() {
            // The files may be between the old state and the new one (recovery settles that),
            // but this process's view of them is not: nothing more may be written.
            let cause = Arc::new(IoError::new(
                "truncate",
                &self.dir,
                std::io::Error::other("a truncation failed part way"),
            ));
            ex.st.failure = Some(cause);
        }
        let report = result?;
        self.remove_due_deletions(now, false)?;
        self.trim_dead_tails(&ex.st)?;
        Ok(report)
    }

    fn truncate_at(
        &self,
        ex: &mut Exclusive<'_>,
        segments: &[Arc<Segment>],
        at: usize,
        cut: usize,
        new_end: i64,
        now: i64,
    ) -> Result<TruncateReport, RewriteError> {
        let fs = self.env.fs.as_ref();
        let s = &segments[at];
        let old_end = self.log_end_offset();
        let high_watermark = self.high_watermark.load(Ordering::Acquire).min(new_end);
        let log_start = self.log_start_offset().min(new_end);
        // (1) The commit point: a checkpoint whose record ends at the new end, the cut segment
        // recorded with the bytes after the cut as a dead tail. Once it is durable, recovery
        // holds the kept segments to it and removes what lies above, so a crash leaves the log
        // as it was before (the checkpoint not yet durable) or as it is after, never between,
        // and removed batches never come back. Everything it vouches for is made durable first.
        self.sync_below(&ex.st, s, cut)?;
        let plan = CutPlan {
            at,
            cut,
            new_end,
            log_start,
            high_watermark,
        };
        self.commit_truncation(ex, segments, &plan)?;
        // (2) The new active segment at the new end (the cut segment's own file, if it loses
        // everything, goes first: the new one takes its name).
        let mut report = TruncateReport {
            old_log_end: old_end,
            new_log_end: new_end,
            log_start_offset: log_start,
            bytes_removed: (s.size() - cut) as u64,
            ..TruncateReport::default()
        };
        if cut == 0 {
            self.retire_segment_files(s.base_offset(), now, None)?;
            report.segments_removed.push(s.base_offset());
        }
        let cfg = self.segment_config();
        let active = segment::create(&self.dir, new_end, &cfg, now).map_err(segment_io)?;
        fs.sync_dir(&self.dir)
            .map_err(|e| IoError::new("fsync directory", &self.dir, e))?;
        // (3) The later segments.
        for later in &segments[at + 1..] {
            report.bytes_removed += later.size() as u64;
            self.retire_segment_files(later.base_offset(), now, None)?;
            report.segments_removed.push(later.base_offset());
        }
        fs.sync_dir(&self.dir)
            .map_err(|e| IoError::new("fsync directory", &self.dir, e))?;
        // The old active segment's writer goes before its file is mapped again.
        let old_writer = ex.st.active.replace(active);
        drop(old_writer);
        ex.st.prefault = prefault::Prefault::default();
        // (4) Producer state, from the segments as they will be: the cut one ends at the cut.
        report.snapshots_removed = snapshot_files::delete_above(fs, &self.dir, new_end)?;
        let (completed, load) = self.producers_after_cut(ex, segments, &plan, now)?;
        report.producers = load;
        // (5) Leader epochs: those that start at or after the new end go (Kafka's
        // `truncateFromEnd`), as recovery would cut them after a crash at any step.
        let mut epochs_now = ex.st.epochs.clone();
        if epochs_now.truncate_from_end(new_end) {
            epochs::write(fs, &self.dir, epochs_now.entries())?;
            ex.st.epochs = epochs_now;
            ex.st.epochs_unwritten = false;
        }
        self.publish_cut(ex, segments, &plan, &completed)?;
        // Everything kept was made durable before the commit point.
        ex.st.unflushed_sealed.clear();
        ex.st.unflushed_messages = 0;
        ex.st.dir_dirty = false;
        self.reset_flush_position(new_end, 0);
        Ok(report)
    }

    /// Writes the truncation's commit point: a checkpoint with the offsets lowered to the new
    /// end, recording the log it leaves.
    fn commit_truncation(
        &self,
        ex: &mut Exclusive<'_>,
        segments: &[Arc<Segment>],
        plan: &CutPlan,
    ) -> Result<(), RewriteError> {
        let (new_end, log_start, high_watermark) = (plan.new_end, plan.log_start, plan.high_watermark);
        let record = self.truncation_record(segments, plan)?;
        let recovery_point = new_end;
        let dense_from = ex.st.dense_from.min(new_end);
        self.store_checkpoint(
            &mut ex.st,
            &Checkpoint {
                clean_shutdown: false,
                recovery_point,
                log_start_offset: log_start,
                high_watermark: high_watermark.max(log_start),
                dense_from: Some(dense_from),
                segments: Some(record),
                start_over_at: None,
            },
        )?;
        ex.st.dense_from = dense_from;
        Ok(())
    }

    /// The checkpoint's record of the log a truncation leaves: the segments before the cut one,
    /// and the cut one up to the cut, with the bytes after it as a dead tail.
    fn truncation_record(
        &self,
        segments: &[Arc<Segment>],
        plan: &CutPlan,
    ) -> Result<Vec<SegmentRecord>, RewriteError> {
        let (at, cut, new_end) = (plan.at, plan.cut, plan.new_end);
        let s = &segments[at];
        let mut record = Vec::with_capacity(at + 1);
        for k in &segments[..at] {
            record.push(SegmentRecord {
                base_offset: k.base_offset(),
                next_offset: k.next_offset(),
                size: k.size() as u64,
                file_len: k.file_len(),
                digest: k.seal_digest(),
            });
        }
        if cut > 0 {
            let file_len = self
                .env
                .fs
                .stat(s.log_path())
                .map_err(|e| IoError::new("stat", s.log_path(), e))?
                .len;
            record.push(SegmentRecord {
                base_offset: s.base_offset(),
                next_offset: new_end,
                size: cut as u64,
                file_len,
                digest: s.seal_digest_at(cut, new_end)?,
            });
        }
        Ok(record)
    }

    /// Rebuilds the producer state for the log a truncation leaves and installs it; returns
    /// the transactions completed above the lowered high watermark, and how it was loaded.
    fn producers_after_cut(
        &self,
        ex: &mut Exclusive<'_>,
        segments: &[Arc<Segment>],
        plan: &CutPlan,
        now: i64,
    ) -> Result<(Vec<CompletedTxn>, ProducerLoadReport), RewriteError> {
        let fs = self.env.fs.as_ref();
        let (at, cut, new_end) = (plan.at, plan.cut, plan.new_end);
        let kept_before = &segments[..at];
        let cut_extent = (cut > 0).then_some((segments[at].as_ref(), cut, new_end));
        // The transactions completed by markers the lowered high watermark has not passed still
        // hold the first unstable offset back (the cut segment's `.txnindex` is cut with it).
        let recovery_point = new_end;
        let wants = ReplayWants {
            txn_index_from: None,
            completed_from: recovery_point.min(plan.high_watermark),
        };
        let mut rebuilt =
            self.rebuild_producers(kept_before, cut_extent, plan.log_start, new_end, wants, now)?;
        let completed = std::mem::take(&mut rebuilt.completed);
        let (mut producers, load) = rebuilt.apply(fs, &self.dir)?;
        ex.st
            .producers
            .hand_over_pending(fs, new_end, &mut producers);
        ex.st.producers = producers;
        Ok((completed, load))
    }

    /// Publishes the truncated log to readers: segments and offsets move together.
    fn publish_cut(
        &self,
        ex: &mut Exclusive<'_>,
        segments: &[Arc<Segment>],
        plan: &CutPlan,
        completed: &[CompletedTxn],
    ) -> Result<(), RewriteError> {
        let (at, cut, new_end, log_start) = (plan.at, plan.cut, plan.new_end, plan.log_start);
        let s = &segments[at];
        let recovery_point = new_end;
        let high_watermark = plan.high_watermark;
        // The new state, for readers: segments and offsets move together. The cut segment's
        // indexes shrink under the write lock: readers look entries up only under the read
        // lock, in segments they find in the map, and the old segment leaves it here.
        let cut_segment;
        {
            let mut map = self.segments.write();
            cut_segment = if cut > 0 {
                Some(
                    segment::reopen_cut(&self.env.fs, &self.dir, s, cut, new_end)
                        .map_err(segment_error)?,
                )
            } else {
                None
            };
            for old in &segments[at..] {
                map.remove(&old.base_offset());
            }
            if let Some(c) = &cut_segment {
                map.insert(c.base_offset(), Arc::clone(c));
            }
            if let Some(w) = &ex.st.active {
                map.insert(new_end, Arc::clone(w.segment()));
            }
            self.log_end_offset.store(new_end, Ordering::Release);
            self.log_start_offset.store(log_start, Ordering::Release);
            self.recovery_point.store(recovery_point, Ordering::Release);
            self.high_watermark
                .store(high_watermark.max(log_start), Ordering::Release);
            let first_ongoing = ex.st.producers.table().first_ongoing_offset();
            self.txn.reset(Unstable::new(first_ongoing, completed));
            ex.st.first_ongoing = first_ongoing;
        }
        Ok(())
    }

    /// The producer state of the log made of `segments`, ending at `log_end`: the newest
    /// snapshot at or below it and the batches after (their CRC and offsets checked).
    /// Makes durable what a truncation's commit point vouches for: the sealed segments before
    /// `cut_segment`, its first `cut` bytes, and the directory entries of new segments.
    fn sync_below(
        &self,
        st: &AppendState,
        cut_segment: &Segment,
        cut: usize,
    ) -> Result<(), RewriteError> {
        let base = cut_segment.base_offset();
        for u in st.unflushed_sealed.iter().filter(|u| u.base_offset() < base) {
            u.flush_all()?;
        }
        let active = st.active.as_ref().map(|w| w.base_offset());
        let flushed_from = if Some(base) == active {
            // The active segment is durable up to where the last sync ended.
            let fst = self.flush.lock();
            if fst.segment_base == base {
                fst.position.min(cut)
            } else {
                0
            }
        } else if st.unflushed_sealed.iter().any(|u| u.base_offset() == base) {
            0
        } else {
            cut
        };
        // Always synced when cut: the checkpoint records the file's length too, and that
        // length may not be durable yet (a preallocated active segment's, or one recovery
        // trimmed on an open after a crash), even when its bytes up to the cut all are: so the
        // file is synced whole, not only the range not yet flushed.
        if cut > 0 {
            cut_segment.flush_log(flushed_from.min(cut), cut)?;
            let path = cut_segment.log_path();
            self.env
                .fs
                .open(path, OpenMode::ReadWrite)
                .and_then(|f| f.sync_data())
                .map_err(|e| IoError::new("fdatasync", path, e))?;
        }
        if st.dir_dirty {
            self.env
                .fs
                .sync_dir(&self.dir)
                .map_err(|e| IoError::new("fsync directory", &self.dir, e))?;
        }
        Ok(())
    }

    /// `cut`, if any, is the segment after `segments` with the size and next offset it keeps.
    pub(super) fn rebuild_producers(
        &self,
        segments: &[Arc<Segment>],
        cut: Option<(&Segment, usize, i64)>,
        log_start: i64,
        log_end: i64,
        wants: ReplayWants,
        now: i64,
    ) -> Result<crate::log::producers::LoadPlan, RewriteError> {
        let fs = self.env.fs.as_ref();
        let snapshots = snapshot_files::list(fs, &self.dir)?;
        let extents = segments
            .iter()
            .map(|s| (s.as_ref(), s.size(), s.next_offset()))
            .chain(cut);
        let mut replay: Vec<ReplaySegment<'_>> = extents
            .map(|(s, log_size, next_offset)| ReplaySegment {
                base: s.base_offset(),
                path: s.log_path(),
                log_size,
                next_offset,
                next_segment_base: None,
                // Batches this process validated are not checked again (a segment trusted on
                // open without being read is).
                validated: s.is_validated(),
                batches: None,
            })
            .collect();
        for i in 1..replay.len() {
            replay[i - 1].next_segment_base = Some(replay[i].base);
        }
        ProducerState::plan(
            fs,
            &self.config(),
            &snapshots,
            &replay,
            log_start,
            log_end,
            wants,
            now,
        )
        .map_err(|e| match e {
            crate::log::producers::LoadError::Io(e) => RewriteError::Io(e),
            crate::log::producers::LoadError::Damaged {
                path,
                position,
                problem,
            } => RewriteError::Corrupt(CorruptSegment {
                path,
                position,
                problem,
            }),
        })
    }

    /// The work of [`ReplicaLog::truncate_fully_and_start_at`].
    pub(crate) fn truncate_fully_and_start_at(&self, offset: i64) -> Result<TruncateReport, RewriteError> {
        if offset < 0 {
            return Err(RewriteError::BelowLogStart {
                offset,
                log_start_offset: 0,
            });
        }
        let now = self.env.clock.now_ms();
        let mut ex = self.exclusive()?;
        let result = self.start_over_at(&mut ex, offset, now);
        if result.is_err() {
            ex.st.failure = Some(Arc::new(IoError::new(
                "truncate",
                &self.dir,
                std::io::Error::other("a full truncation failed part way"),
            )));
        }
        let report = result?;
        self.remove_due_deletions(now, false)?;
        Ok(report)
    }

    fn start_over_at(
        &self,
        ex: &mut Exclusive<'_>,
        offset: i64,
        now: i64,
    ) -> Result<TruncateReport, RewriteError> {
        let fs = self.env.fs.as_ref();
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let mut report = TruncateReport {
            old_log_end: self.log_end_offset(),
            new_log_end: offset,
            log_start_offset: offset,
            ..TruncateReport::default()
        };
        // The new log may hold offsets that recycled files hold too: the pool is emptied (and
        // the removal durable) before anything changes, so that no later roll reuses a file
        // whose old batches could line up as a continuation of the new log (docs/design.md,
        // "Segment space").
        self.empty_pool()?;
        // The commit point: once this is durable, recovery empties the log whatever files a
        // crash leaves (a segment file cannot tell the old log from the new one by its name).
        let empty = Checkpoint {
            clean_shutdown: false,
            recovery_point: offset,
            log_start_offset: offset,
            high_watermark: offset,
            dense_from: Some(offset),
            segments: Some(Vec::new()),
            start_over_at: Some(offset),
        };
        checkpoint::write(fs, &self.dir, &empty)?;
        if let Some(same) = segments.iter().find(|s| s.base_offset() == offset) {
            report.bytes_removed += same.size() as u64;
            self.retire_segment_files(offset, now, None)?;
            report.segments_removed.push(offset);
        }
        let cfg = self.segment_config();
        let active = segment::create(&self.dir, offset, &cfg, now).map_err(segment_io)?;
        fs.sync_dir(&self.dir)
            .map_err(|e| IoError::new("fsync directory", &self.dir, e))?;
        for s in segments.iter().filter(|s| s.base_offset() != offset) {
            report.bytes_removed += s.size() as u64;
            self.retire_segment_files(s.base_offset(), now, None)?;
            report.segments_removed.push(s.base_offset());
        }
        fs.sync_dir(&self.dir)
            .map_err(|e| IoError::new("fsync directory", &self.dir, e))?;
        drop(ex.st.active.replace(active));
        ex.st.prefault = prefault::Prefault::default();
        report.snapshots_removed = snapshot_files::delete_above(fs, &self.dir, i64::MIN)?;
        let fresh = ex.st.producers.emptied(fs, &self.config())?;
        ex.st.producers = fresh;
        if !ex.st.epochs.entries().is_empty() {
            epochs::write(fs, &self.dir, &[])?;
        }
        ex.st.epochs = epochs::LeaderEpochCache::default();
        ex.st.epochs_unwritten = false;
        // Done: the files are those of the empty log, which the checkpoint now describes.
        self.store_checkpoint(
            &mut ex.st,
            &Checkpoint {
                start_over_at: None,
                ..empty
            },
        )?;
        self.publish_start_over(ex, offset);
        Ok(report)
    }

    /// Publishes the empty log at `offset` to readers, and resets what the append path
    /// tracks of the old one.
    fn publish_start_over(&self, ex: &mut Exclusive<'_>, offset: i64) {
        {
            let mut map = self.segments.write();
            map.clear();
            if let Some(w) = &ex.st.active {
                map.insert(offset, Arc::clone(w.segment()));
            }
            self.log_end_offset.store(offset, Ordering::Release);
            self.log_start_offset.store(offset, Ordering::Release);
            self.recovery_point.store(offset, Ordering::Release);
            self.high_watermark.store(offset, Ordering::Release);
            self.txn.reset(Unstable::default());
            ex.st.first_ongoing = None;
        }
        ex.st.unflushed_sealed.clear();
        ex.st.dense_from = offset;
        ex.st.unflushed_messages = 0;
        ex.st.dir_dirty = false;
        self.reset_flush_position(offset, 0);
    }
}

/// Where a truncation to `offset` cuts segment `s`: the position and base offset of the first
/// batch ending at or after `offset` (the batch holding `offset` goes whole), or, when `offset`
/// is past the segment's batches (in a gap), the segment's end and `offset` itself. The walk
/// starts at the index entry before the one for `offset`, a few batches back at most.
pub(super) fn cut_point(
    s: &Segment,
    view: &SegmentView,
    offset: i64,
) -> Result<(usize, i64), CorruptSegment> {
    let data = view.data();
    let entries: Vec<_> = view
        .offset_index()
        .entries()
        .take_while(|e| e.offset < offset)
        .collect();
    let start = entries
        .iter()
        .rev()
        .map(|e| e.position as usize)
        .find(|&p| {
            RecordBatch::parse(data.get(p..).unwrap_or(&[])).is_ok_and(|b| b.last_offset() < offset)
        })
        .unwrap_or(0);
    for item in BatchIter::new(&data[start..]) {
        let (at, b) = item.map_err(|e| CorruptSegment {
            path: s.log_path().to_path_buf(),
            position: start + e.position,
            problem: e.error.into(),
        })?;
        if b.last_offset() >= offset {
            return Ok((start + at, b.base_offset().min(offset)));
        }
    }
    Ok((data.len(), offset))
}

fn segment_io(e: segment::OpenSegmentError) -> IoError {
    match e {
        segment::OpenSegmentError::Io(e) => e,
        other => IoError::new(
            "create segment",
            std::path::Path::new(""),
            std::io::Error::other(other.to_string()),
        ),
    }
}

fn segment_error(e: segment::OpenSegmentError) -> RewriteError {
    match e {
        segment::OpenSegmentError::Io(e) => RewriteError::Io(e),
        segment::OpenSegmentError::Corrupt(c) => RewriteError::Corrupt(c),
        other => RewriteError::Io(segment_io(other)),
    }
}
