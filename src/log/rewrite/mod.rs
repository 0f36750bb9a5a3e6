//! Rewriting the log (docs/design.md "Rewriting the log"): the leader-epoch cache and the high
//! watermark the replication layer moves, truncation from the end, retention and DeleteRecords
//! from the start, and the deferred removal of the files they drop.
//!
//! Every rewrite takes the log exclusively: the flush lock with no sync in flight (a sync
//! moves the recovery point from what it took before the rewrite), then the append lock. It
//! makes the new state durable in an order a crash at any step recovers as the state before or
//! after, and swaps the segments under their write lock, so a reader sees one state or the
//! other; files are renamed and removed, never shrunk, under a reader's bytes.

mod compact;
mod handoff;
mod retention;
mod truncate;

use std::path::PathBuf;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use parking_lot::MutexGuard;

use super::checkpoint;
use super::epochs::{self, EpochEndOffset, EpochEntry};
use super::{AppendState, HighWatermarkPolicy, Log, RewriteError};
use crate::io::{IoError, IoResultExt};
use crate::segment::{names, Segment};

pub use compact::{Cleanable, CompactionReport, CLEANER_OFFSET_FILE};
pub use retention::{DeletedSegment, RetentionReason, RetentionReport};
pub use truncate::TruncateReport;

/// A file renamed `.deleted`, removed once `due_ms` has passed.
#[derive(Debug)]
pub(crate) struct Deletion {
    pub path: PathBuf,
    pub due_ms: i64,
    /// A `.log` that retention removed, with its segment: every offset it holds is below
    /// the log start, so it may be kept for reuse ([`super::LogConfig::recycled_segments`])
    /// instead of removed, once no reader holds bytes of a map of it (a recycled file is
    /// written again, and a `Bytes` read before must keep its bytes).
    pub recyclable: Option<Arc<Segment>>,
}

/// Exclusive access to the log for a rewrite: no sync in flight, no append.
pub(super) struct Exclusive<'a> {
    log: &'a Log,
    pub st: MutexGuard<'a, AppendState>,
}

impl Drop for Exclusive<'_> {
    fn drop(&mut self) {
        self.log.end_exclusive_flush();
    }
}

impl Log {
    /// Waits for any sync in flight, keeps the next one from starting, and takes the append
    /// lock.
    pub(super) fn exclusive(&self) -> Result<Exclusive<'_>, RewriteError> {
        self.begin_exclusive_flush();
        let mut ex = Exclusive {
            log: self,
            st: self.append.lock(),
        };
        if let Some(cause) = &ex.st.failure {
            return Err(RewriteError::ReadOnly {
                cause: Arc::clone(cause),
            });
        }
        if ex.st.active.is_none() {
            return Err(RewriteError::Closed);
        }
        self.mark_unclean(&mut ex.st)?;
        Ok(ex)
    }

    /// Seals the active segment and starts a new one at the log end, as an append does when
    /// the segment is full or old (Kafka's `roll`). Compaction and retention work on sealed
    /// segments only, so this makes the newest records eligible without filler appends. An
    /// empty active segment is kept: returns whether a segment was sealed. The sealed segment
    /// is made durable by the next flush, as one sealed by an append is.
    pub fn roll(&self) -> Result<bool, RewriteError> {
        let mut ex = self.exclusive()?;
        let Some(active) = ex.st.active.as_ref() else {
            return Err(RewriteError::Closed);
        };
        if active.size() == 0 {
            return Ok(false);
        }
        let end = self.log_end_offset();
        let now = self.env.clock.now_ms();
        self.roll_at(&mut ex.st, end, 0, now)
            .map_err(retention::append_error)?;
        Ok(true)
    }

    /// Makes the flusher start its next sync of the active segment at `position` of the
    /// segment at `base` (a rewrite replaced the active segment).
    pub(super) fn reset_flush_position(&self, base: i64, position: usize) {
        let mut fst = self.flush.lock();
        fst.segment_base = base;
        fst.position = position;
    }

    /// The high watermark: the offset below which records are committed. Reads by consumers
    /// ([`Log::fetch`]), retention and DeleteRecords are bounded by it. Under
    /// [`HighWatermarkPolicy::DurableEnd`] (the default) it is the recovery point; under
    /// [`HighWatermarkPolicy::SetByCaller`], what [`ReplicaLog::set_high_watermark`](crate::ReplicaLog::set_high_watermark) last set, never
    /// above the log end.
    pub fn high_watermark(&self) -> i64 {
        match self.config().high_watermark {
            HighWatermarkPolicy::DurableEnd => self.recovery_point(),
            HighWatermarkPolicy::SetByCaller => self
                .high_watermark
                .load(Ordering::Acquire)
                .min(self.log_end_offset()),
        }
    }

    /// The work of [`ReplicaLog::set_high_watermark`](crate::ReplicaLog::set_high_watermark).
    pub(crate) fn set_high_watermark(&self, offset: i64) -> Result<i64, RewriteError> {
        if self.config().high_watermark != HighWatermarkPolicy::SetByCaller {
            return Err(RewriteError::HighWatermarkNotSettable);
        }
        // The append lock keeps the log's ends still while the value is bounded by them.
        let _st = self.append.lock();
        let hw = offset.clamp(self.log_start_offset(), self.log_end_offset());
        self.high_watermark.store(hw, Ordering::Release);
        drop(_st);
        self.notify_waiters();
        Ok(hw)
    }

    /// The work of [`ReplicaLog::leader_epoch`](crate::ReplicaLog::leader_epoch).
    pub(crate) fn leader_epoch(&self) -> i32 {
        self.append.lock().leader_epoch
    }

    /// The work of [`ReplicaLog::set_leader_epoch`](crate::ReplicaLog::set_leader_epoch).
    pub(crate) fn set_leader_epoch(&self, epoch: i32) -> Result<(), RewriteError> {
        let mut st = self.append.lock();
        if epoch < 0 || epoch < st.leader_epoch {
            return Err(RewriteError::StaleLeaderEpoch {
                current: st.leader_epoch,
                got: epoch,
            });
        }
        let end = self.log_end_offset();
        self.note_epoch(&mut st, epoch, end)?;
        st.leader_epoch = epoch;
        Ok(())
    }

    /// The work of [`ReplicaLog::end_offset_for_epoch`](crate::ReplicaLog::end_offset_for_epoch).
    pub(crate) fn end_offset_for_epoch(&self, epoch: i32) -> EpochEndOffset {
        let st = self.append.lock();
        st.epochs.end_offset_for(epoch, self.log_end_offset())
    }

    /// The work of [`ReplicaLog::leader_epochs`](crate::ReplicaLog::leader_epochs).
    pub(crate) fn leader_epochs(&self) -> Vec<EpochEntry> {
        self.append.lock().epochs.entries().to_vec()
    }

    /// Records that `epoch` wrote from `start_offset` on: the work of
    /// [`ReplicaLog::set_leader_epoch`](crate::ReplicaLog::set_leader_epoch), which writes the
    /// checkpoint file at once when the cache changes (rarely: once per epoch), since no batch
    /// may carry the epoch yet. On a failure nothing changes.
    pub(super) fn note_epoch(
        &self,
        st: &mut AppendState,
        epoch: i32,
        start_offset: i64,
    ) -> Result<(), IoError> {
        let mut next = st.epochs.clone();
        if next.assign(epoch, start_offset) {
            epochs::write(self.env.fs.as_ref(), &self.dir, next.entries())?;
            st.epochs = next;
            st.epochs_unwritten = false;
        }
        Ok(())
    }

    /// Records that the batch about to be written at `start_offset` carries `epoch`, on the
    /// append path. A new entry is kept in memory and written to `leader-epoch-checkpoint`
    /// before the next checkpoint ([`Log::store_checkpoint`]), not now (Kafka does the same
    /// since KAFKA-15046): it starts at or above the recovery point on disk, and recovery
    /// rebuilds every entry at or above that point from the batches it validates, which carry
    /// their epochs. So a partition's first append costs no write of the file and its syncs.
    pub(super) fn note_batch_epoch(&self, st: &mut AppendState, epoch: i32, start_offset: i64) {
        if st.epochs.assign(epoch, start_offset) {
            st.epochs_unwritten = true;
        }
    }

    /// Writes `leader-epoch-checkpoint` if the cache holds entries the file does not.
    pub(super) fn write_unwritten_epochs(&self, st: &mut AppendState) -> Result<(), IoError> {
        if st.epochs_unwritten {
            epochs::write(self.env.fs.as_ref(), &self.dir, st.epochs.entries())?;
            st.epochs_unwritten = false;
        }
        Ok(())
    }

    /// Writes `c` as the log's checkpoint, after the leader epochs its recovery point may
    /// cover: every checkpoint the running log writes goes through here, so the file never
    /// lacks an entry below the recovery point a checkpoint on disk records.
    pub(super) fn store_checkpoint(
        &self,
        st: &mut AppendState,
        c: &checkpoint::Checkpoint,
    ) -> Result<(), IoError> {
        self.write_unwritten_epochs(st)?;
        checkpoint::write(self.env.fs.as_ref(), &self.dir, c)
    }

    /// Renames a removed segment's files to `.deleted` (Kafka's protocol: the rename is the
    /// removal; the files go after `file_delete_delay_ms`). Readers holding bytes of them keep
    /// their maps. Returns the bytes of its `.log`. `recyclable`: retention removes it, so
    /// every offset it holds is below the new log start, and its `.log` may be kept for reuse
    /// once its delay is over (never a truncation's or a compaction's: their files hold
    /// offsets a later segment of the log may hold again).
    pub(super) fn retire_segment_files(
        &self,
        base: i64,
        now_ms: i64,
        recyclable: Option<&Arc<Segment>>,
    ) -> Result<u64, IoError> {
        let fs = self.env.fs.as_ref();
        // Readers may look the segment up until the rewrite publishes the new state: they must
        // not map it by a name its files are about to leave. A segment that does not map (a
        // damaged or missing file) fails those readers as it would have before.
        let listed = self.segments.read().get(&base).cloned();
        if let Some(segment) = listed {
            let _ = segment.hold_mapped();
        }
        let mut bytes = 0;
        for ext in [
            names::LOG_EXT,
            names::INDEX_EXT,
            names::TIME_INDEX_EXT,
            names::TXN_INDEX_EXT,
        ] {
            let path = names::file_path(&self.dir, base, ext);
            if !fs.exists(&path).ctx("stat", &path)? {
                continue;
            }
            let recyclable = recyclable.filter(|_| ext == names::LOG_EXT);
            if ext == names::LOG_EXT {
                bytes = fs.stat(&path).ctx("stat", &path)?.len;
            }
            self.retire(&path, now_ms, recyclable)?;
        }
        Ok(bytes)
    }

    /// Renames a file to `.deleted` and queues its removal after `file_delete_delay_ms` (the
    /// next open removes it if the process ends first).
    pub(super) fn retire_file(&self, path: &std::path::Path, now_ms: i64) -> Result<(), IoError> {
        self.retire(path, now_ms, None)
    }

    fn retire(
        &self,
        path: &std::path::Path,
        now_ms: i64,
        recyclable: Option<&Arc<Segment>>,
    ) -> Result<(), IoError> {
        let mut name = path.file_name().unwrap_or_default().to_os_string();
        name.push(".");
        name.push(names::DELETED_SUFFIX);
        let to = path.with_file_name(name);
        self.env.fs.rename(path, &to).ctx("rename", path)?;
        self.deletions.lock().push(Deletion {
            path: to,
            due_ms: now_ms + self.config().file_delete_delay_ms,
            recyclable: recyclable
                .filter(|_| self.config().recycled_segments > 0)
                .cloned(),
        });
        Ok(())
    }

    /// Removes the `.deleted` files whose delay is over (all of them with `everything`). A
    /// recyclable `.log` goes into the pool instead while it has room.
    pub(super) fn remove_due_deletions(
        &self,
        now_ms: i64,
        everything: bool,
    ) -> Result<(), IoError> {
        let fs = self.env.fs.as_ref();
        let mut deletions = self.deletions.lock();
        let mut failed = None;
        deletions.retain(|d| {
            if failed.is_some() || (!everything && d.due_ms > now_ms) {
                return true;
            }
            let room = self.pool.lock().len() < self.config().recycled_segments;
            if let Some(segment) = d.recyclable.as_ref().filter(|_| !everything && room) {
                // Its own maps go; a reader that still holds bytes of one keeps the file from
                // being written again, so it is removed instead (its inode lives on for the
                // reader). No new map can appear: the segment is out of the log, and its
                // file is no longer under the name it maps.
                segment.unpin();
                segment.unmap();
                if !segment.readers_hold_bytes() {
                    // A file that cannot be made a pool file is removed as any other.
                    if let Ok(pooled) = self.enter_pool(&d.path) {
                        self.pool.lock().push(pooled);
                        return false;
                    }
                }
            }
            match fs.remove_file(&d.path) {
                Ok(()) => false,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => false,
                Err(e) => {
                    failed = Some(IoError::new("remove", &d.path, e));
                    true
                }
            }
        });
        match failed {
            Some(e) => Err(e),
            None => Ok(()),
        }
    }
}

impl Log {
    /// Trims the dead tails truncations left in segments of the log once no reader holds
    /// their bytes (docs/design.md, "Truncation"): a closed log's files then hold exactly its
    /// batches, as Kafka's tools and an open without `oncelog.checkpoint` read them. `_st` is
    /// the append lock, held so that no rewrite changes the segments meanwhile. The next
    /// checkpoint records the trimmed lengths.
    pub(in crate::log) fn trim_dead_tails(&self, _st: &AppendState) -> Result<(), IoError> {
        let dead: Vec<Arc<Segment>> = self
            .segments
            .read()
            .values()
            .filter(|s| s.has_dead_tail())
            .cloned()
            .collect();
        for s in dead {
            s.trim_dead_tail()?;
        }
        Ok(())
    }

    /// [`Log::trim_dead_tails`], taking the append lock (after a rewrite that let it go).
    pub(in crate::log) fn trim_dead_tails_locking(&self) -> Result<(), IoError> {
        let st = self.append.lock();
        if st.active.is_none() || st.failure.is_some() {
            // Closed (close trimmed what it could) or failed part way: the next open trims.
            return Ok(());
        }
        self.trim_dead_tails(&st)
    }

    /// Makes a retired `.log` a pool file: its first page zeroed and synced, so that if a crash
    /// follows its rename into place as a new active segment, recovery reads an empty
    /// segment; then renamed `<base>.log.recycle`. Its other bytes stay: they are old batches
    /// whose offsets are all below the log start (docs/design.md, "Segment space"). The
    /// rename need not be durable: a crash leaves it `.deleted` or `.recycle`, and every open
    /// removes both.
    fn enter_pool(&self, deleted: &std::path::Path) -> Result<PathBuf, IoError> {
        let fs = self.env.fs.as_ref();
        let file = fs
            .open(deleted, crate::io::OpenMode::ReadWrite)
            .ctx("open", deleted)?;
        let len = file.len().ctx("stat", deleted)?;
        let head = len.min(RECYCLE_ZEROED_HEAD as u64) as usize;
        file.write_all_at(&vec![0u8; head], 0).ctx("write", deleted)?;
        file.sync_data().ctx("fdatasync", deleted)?;
        drop(file);
        let name = deleted.file_name().unwrap_or_default().to_string_lossy();
        let stem = name
            .strip_suffix(names::DELETED_SUFFIX)
            .unwrap_or(&name)
            .to_string();
        let to = deleted.with_file_name(format!("{stem}{}", names::RECYCLE_SUFFIX));
        fs.rename(deleted, &to).ctx("rename", deleted)?;
        Ok(to)
    }

    /// Empties the pool of recycled files, and makes no retired file recyclable any more,
    /// before anything that may lower the log's offsets (a full truncation): a pool file's
    /// batches are safe only while every offset in them is below the log start
    /// (docs/design.md, "Segment space"). The removal is made durable before it returns.
    pub(super) fn empty_pool(&self) -> Result<(), IoError> {
        let fs = self.env.fs.as_ref();
        // The deletions' lock first, as `remove_due_deletions` takes them: none enters the
        // pool while it is emptied.
        let mut deletions = self.deletions.lock();
        for d in deletions.iter_mut() {
            d.recyclable = None;
        }
        let pooled = std::mem::take(&mut *self.pool.lock());
        for path in &pooled {
            match fs.remove_file(path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(IoError::new("remove", path, e))
                }
                _ => {}
            }
        }
        if !pooled.is_empty() {
            fs.sync_dir(&self.dir).ctx("fsync directory", &self.dir)?;
        }
        Ok(())
    }

    /// Removes the pool's files (closing: the next open would remove them anyway).
    pub(in crate::log) fn remove_pool(&self) -> Result<(), IoError> {
        let fs = self.env.fs.as_ref();
        for path in std::mem::take(&mut *self.pool.lock()) {
            match fs.remove_file(&path) {
                Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                    return Err(IoError::new("remove", &path, e))
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Takes a file from the pool for a new active segment, if there is one.
    pub(super) fn take_pooled(&self) -> Option<PathBuf> {
        self.pool.lock().pop()
    }
}

/// How much of a file entering the pool is zeroed: more than a batch header, so that the
/// start of a recycled segment whose first batch a crash lost reads as an empty segment.
const RECYCLE_ZEROED_HEAD: usize = 4096;
