//! What a log offers the log manager's background jobs (docs/design.md, "Many partitions") besides its own API:
//! removal of `.deleted` files, snapshots by replay budget, and the two ways the manager ends
//! a log other than a clean close.

use std::sync::atomic::Ordering;

use std::sync::Arc;

use super::{AppendState, FlushError, Log};
use crate::io::IoError;
use crate::segment::{Segment, SegmentConfig, SegmentWriter};

impl Log {
    /// How its segments are made now: its configuration's, and a managed log's bound on the
    /// descriptors written through.
    pub(super) fn segment_config(&self) -> SegmentConfig {
        let mut cfg = super::recovery::segment_config(&self.config(), &self.env.fs);
        cfg.write_descriptors = self.write_descriptors.clone();
        cfg
    }

    /// Closes the descriptor the active segment's writer writes through if it appended
    /// nothing since the last call (a managed log's; the manager's flush job calls it).
    /// Whether it closed one.
    pub(crate) fn release_idle_descriptor(&self) -> bool {
        if self.write_descriptors.is_none() {
            return false;
        }
        self.append
            .lock()
            .active
            .as_mut()
            .is_some_and(SegmentWriter::release_if_idle)
    }

    /// The work of [`Maintenance::remove_deleted_files`].
    pub(crate) fn remove_deleted_files(&self, now_ms: i64) -> Result<(), IoError> {
        self.remove_due_deletions(now_ms, false)?;
        self.trim_dead_tails_locking()
    }

    /// The work of [`Maintenance::snapshot_if_behind`].
    pub(crate) fn snapshot_if_behind(&self, replay_bytes: u64) -> Result<bool, FlushError> {
        {
            let mut st = self.append.lock();
            if let Some(cause) = &st.failure {
                return Err(FlushError::ReadOnly {
                    cause: Arc::clone(cause),
                });
            }
            if st.active.is_none() {
                return Err(FlushError::Closed);
            }
            if st.producers.bytes_since_snapshot() <= replay_bytes {
                return Ok(false);
            }
            self.mark_unclean(&mut st)?;
            let end = self.log_end_offset.load(Ordering::Acquire);
            st.producers
                .prepare_snapshot(self.env.fs.as_ref(), &self.dir, end, false)?;
            self.metrics.snapshot_written();
        }
        // The snapshot waits in its temp file for a flush to make it durable.
        self.flush()?;
        Ok(true)
    }

    /// Before the first change to a log whose open rewrote nothing (its clean checkpoint is
    /// still on disk, vouching for every segment as the last close left it): writes the
    /// unclean checkpoint, durably, so that a crash from here on is recovered as one. Until
    /// then a crash needs no recovery, and opening an idle log costs no write at all.
    ///
    /// A clean open reads no batch, so the check a crash's open makes of the last segment's
    /// tail is made here, before the first change: if the tail is damaged the unclean
    /// checkpoint is written all the same (the next open walks the tail and its recovery mode
    /// decides, as it would have at this open), the change is refused, and the log is
    /// read-only until it is reopened.
    pub(super) fn mark_unclean(&self, st: &mut AppendState) -> Result<(), IoError> {
        if st.fresh {
            // A log born in an empty directory (a partition just created) has no checkpoint
            // and its segment files may not be durable entries of the directory yet: both are
            // made durable before the first change. Without a checkpoint of its own a crash
            // would recover it by Kafka's rules, which refuse damage in a segment that is not
            // the last; with one (recovery point 0) recovery cuts what was never flushed.
            let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
            let c = self.checkpoint_of(st, &segments, self.recovery_point(), self.log_start_offset());
            self.store_checkpoint(st, &c)?;
            st.fresh = false;
            return Ok(());
        }
        if !st.clean_on_disk {
            return Ok(());
        }
        let damage = self.tail_damage(st)?;
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let c = self.checkpoint_of(st, &segments, self.recovery_point(), self.log_start_offset());
        self.store_checkpoint(st, &c)?;
        st.clean_on_disk = false;
        if let Some((path, position, damage)) = damage {
            let reason = format!(
                "{damage} at byte {position}, found before the first change after a clean \
                 open: the log is read-only; reopen it to recover"
            );
            // `InvalidData`: what failed is the bytes on disk, not the machine (a tool tells
            // damage found from a failure to run by it).
            let damaged = |reason| std::io::Error::new(std::io::ErrorKind::InvalidData, reason);
            st.failure = Some(Arc::new(IoError::new(
                "check the tail",
                &path,
                damaged(reason.clone()),
            )));
            return Err(IoError::new("check the tail", &path, damaged(reason)));
        }
        Ok(())
    }

    /// Before a client's append: [`Self::mark_unclean`], except that a fresh log keeps
    /// appending to its one segment without a checkpoint. Its first flush syncs the directory
    /// instead (the segment files' entries durable before any record is acknowledged): a
    /// crash then leaves one segment and no checkpoint, which recovery reads from its start
    /// and cuts at the first damage, as it would from a checkpoint with recovery point 0. The
    /// checkpoint is written before anything that would leave more than that: a roll, a
    /// snapshot, any change other than an append (each calls [`Self::mark_unclean`]).
    pub(super) fn mark_unclean_for_append(&self, st: &mut AppendState) -> Result<(), IoError> {
        if !st.fresh {
            return self.mark_unclean(st);
        }
        if !st.fresh_appended {
            st.fresh_appended = true;
            st.dir_dirty = true;
        }
        Ok(())
    }

    /// The active segment's tail against what the clean checkpoint recorded of it (see
    /// [`Self::mark_unclean`]): its path, and where and what is wrong, if anything is.
    fn tail_damage(
        &self,
        st: &AppendState,
    ) -> Result<Option<(std::path::PathBuf, usize, super::Damage)>, IoError> {
        let Some(w) = st.active.as_ref() else {
            return Ok(None);
        };
        let seg = w.segment();
        if seg.size() == 0 {
            return Ok(None);
        }
        let view = seg.view()?;
        let base = seg.base_offset();
        let previous_last = self
            .segments
            .read()
            .range(..base)
            .rev()
            .map(|(_, s)| (s.base_offset(), s.next_offset()))
            .find(|(b, next)| next > b)
            .map(|(_, next)| next - 1);
        let bounds = crate::segment::OffsetBounds {
            segment_base: base,
            next_segment_base: None,
            dense_from: Some(st.dense_from),
        };
        let found = super::recovery::tail_damage(
            view.offset_index().mapping().published_slice(),
            view.data(),
            bounds,
            previous_last,
            seg.next_offset(),
        );
        Ok(found.map(|(position, damage)| (seg.log_path().to_path_buf(), position, damage)))
    }

    /// Whether the log was closed (by [`Log::close`], or by its manager deleting it).
    pub fn is_closed(&self) -> bool {
        self.closed.load(Ordering::Acquire)
    }

    /// The base offset of the first segment (Kafka writes a log start offset into its
    /// checkpoint only when it is above it).
    pub(crate) fn first_segment_base(&self) -> Option<i64> {
        self.segments.read().keys().next().copied()
    }

    /// Ends the log of a partition being deleted: later appends and flushes answer `Closed`
    /// and waiters wake, but nothing is flushed, trimmed or checkpointed (its directory is
    /// about to go). Bytes readers hold stay valid.
    pub(crate) fn close_for_deletion(&self) {
        let mut st = self.append.lock();
        self.closed.store(true, Ordering::Release);
        st.active.take();
        drop(st);
        self.end_signal.wake_all();
        self.lock.lock().take();
    }

    /// Leaves the log as a crash of the process would when it is dropped: no flush, no trim,
    /// no clean checkpoint (a log manager dropped without `close`; public to tests of layers
    /// that hold a log behind a shared handle, as the replication crate's partition does).
    #[cfg(feature = "internals")]
    pub fn abandon_on_drop(&self) {
        self.abandoned.store(true, Ordering::Release);
    }

    #[cfg(not(feature = "internals"))]
    pub(crate) fn abandon_on_drop(&self) {
        self.abandoned.store(true, Ordering::Release);
    }
}
