//! Flush, durability and close (docs/design.md "Flush, durability and group commit"): what
//! makes appends durable, moves the recovery point, and writes the checkpoint that vouches for
//! the durable segments.

use std::sync::atomic::{AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Instant;

use super::checkpoint::{Checkpoint, SegmentRecord};
use super::{AppendState, FlushError, FlushState, Log};
use crate::io::{IoError, IoResultExt};
use crate::producer::snapshot_files;
use crate::segment::Segment;

/// What one [`Log::sync_once`] did.
pub(super) struct Synced {
    /// Where the next flush of the active segment starts: its base offset and position.
    pub(super) base: i64,
    pub(super) position: usize,
    /// Whether sealed segments became durable.
    pub(super) sealed_flushed: bool,
    /// Whether it synced a file (false when there was nothing to sync).
    pub(super) synced: bool,
}

/// Where the unflushed bytes of the active `segment` start, given where the last sync of the
/// active segment ended (`base`, `position`): there if that sync was of this segment, else at
/// its start (it rolled since).
fn unflushed_from(segment: &Segment, base: i64, position: usize) -> usize {
    if base == segment.base_offset() {
        position
    } else {
        0
    }
}

/// Records where a sync left the flush (where the next one starts); answers whether it made
/// a sealed segment durable and whether it synced a file (both false if it failed).
fn note_synced(fst: &mut FlushState, result: &Result<Synced, FlushError>) -> (bool, bool) {
    match result {
        Ok(done) => {
            fst.segment_base = done.base;
            fst.position = done.position;
            (done.sealed_flushed, done.synced)
        }
        Err(_) => (false, false),
    }
}

/// The active segment's writer, for a flush: an error if the log failed or is closed.
fn active_writer(st: &AppendState) -> Result<&crate::segment::SegmentWriter, FlushError> {
    if let Some(cause) = &st.failure {
        return Err(FlushError::ReadOnly {
            cause: Arc::clone(cause),
        });
    }
    st.active.as_ref().ok_or(FlushError::Closed)
}

impl Log {
    /// Makes every append so far durable: msync + fdatasync of what was written since the last
    /// flush (and of sealed segments with their indexes), then moves the recovery point.
    pub fn flush(&self) -> Result<(), FlushError> {
        self.flush_to(i64::MAX)
    }

    /// [`Log::flush`], answering whether it synced a file of the log (the log's bytes written
    /// since the last flush, or a sealed segment): a sync that began after this call did, whose
    /// device cache flush also made durable what another file had written back to the same
    /// device before the call ([`crate::io::File::write_back_for_flush`]). False when there was
    /// nothing to sync.
    pub fn flush_synced(&self) -> Result<bool, FlushError> {
        self.flush_to_inner(i64::MAX, false)
    }

    /// Starts writing the active segment's bytes appended since the last flush back to the
    /// device, and returns without waiting: a hint for a caller that makes another file
    /// durable by the device flush of this log's next sync (the other file's
    /// [`File::write_back_for_flush`](crate::io::File::write_back_for_flush), then
    /// [`Log::flush_synced`]). Started before the other file's write-back is waited for, the
    /// two files' writes reach the device together, and the sync finds this log's under way:
    /// one wait for both, not one after the other (docs/design.md, "One device flush a
    /// round"). Makes nothing durable; doing nothing would be as correct.
    pub fn start_write_back(&self) {
        let (base, position) = {
            let fst = self.flush.lock();
            (fst.segment_base, fst.position)
        };
        let (segment, size) = {
            let st = self.append.lock();
            let Some(w) = st.active.as_ref() else {
                return;
            };
            (Arc::clone(w.segment()), w.size())
        };
        segment.start_write_back(unflushed_from(&segment, base, position), size);
    }

    /// The first half of a flush whose device cache flush is another file's: writes the
    /// active segment's bytes appended since the last flush back to the device and waits for
    /// them, without a cache flush, for a caller that makes many files durable with one
    /// device flush (a partition set's persist in oncelog-raft: each partition's log written
    /// back, then one data sync; docs/design.md, "Partition sets"). Answers
    /// [`WrittenBack`] when the log's bytes are written back and await that flush: the caller
    /// syncs a file of the same file system, then calls [`WrittenBack::flushed`]; until then
    /// the log's other flushes wait, and nothing counts as durable. Answers `None` when the
    /// log is durable already without it: nothing was unflushed, or it synced itself, as
    /// [`Log::flush`] does, because a write-back promises nothing here (a segment rolled,
    /// bytes in blocks whose metadata a sync must commit, a file system that does not
    /// overwrite data in place, a map not written through its file).
    pub fn write_back_for_flush(&self) -> Result<Option<WrittenBack<'_>>, FlushError> {
        self.begin_exclusive_flush();
        let (from_base, from_position) = {
            let fst = self.flush.lock();
            (fst.segment_base, fst.position)
        };
        let planned = (|| -> Result<Option<(i64, usize, i64)>, FlushError> {
            let (active, size, log_end, space) = {
                let mut st = self.append.lock();
                let w = active_writer(&st)?;
                if !st.unflushed_sealed.is_empty() || st.dir_dirty || st.producers.has_pending()
                {
                    return Ok(None);
                }
                let found = (
                    Arc::clone(w.segment()),
                    w.size(),
                    self.log_end_offset.load(Ordering::Acquire),
                    Arc::clone(w.space()),
                );
                st.unflushed_messages = 0;
                found
            };
            let from = unflushed_from(&active, from_base, from_position);
            if size <= from || !space.promises(size) {
                return Ok(None);
            }
            match active.write_back_for_flush(from, size) {
                Ok(true) => Ok(Some((active.base_offset(), size, log_end))),
                Ok(false) => Ok(None),
                Err(e) => {
                    // As a failed sync: the pages may be gone.
                    let cause = Arc::new(e);
                    self.append.lock().failure = Some(Arc::clone(&cause));
                    Err(FlushError::ReadOnly { cause })
                }
            }
        })();
        match planned {
            Ok(Some((base, position, log_end))) => Ok(Some(WrittenBack {
                log: self,
                base,
                position,
                log_end,
                done: false,
            })),
            Ok(None) => {
                // A flush of its own, the turn still held.
                let syncing = Instant::now();
                let result = self.sync_once(from_base, from_position);
                self.metrics.synced(syncing.elapsed(), result.is_ok());
                let (sealed, _) = note_synced(&mut self.flush.lock(), &result);
                self.end_exclusive_flush();
                result?;
                if sealed {
                    self.write_checkpoint(false)?;
                }
                Ok(None)
            }
            Err(e) => {
                self.end_exclusive_flush();
                Err(e)
            }
        }
    }

    /// Makes every append below `offset` durable, and returns once it is (at once if it
    /// already is): the wait an `acks=all` answer needs, for a caller that appends under
    /// [`FlushPolicy::Manual`](super::FlushPolicy) and decides itself when to wait, e.g. after
    /// the batches of one produce request, `flush_to(info.last_offset + 1)`.
    ///
    /// Callers waiting here share syncs (group commit): one thread syncs everything appended so
    /// far while the others wait; when it is done, those it covered return and the first that
    /// still needs a sync leads the next, which covers whatever was appended meanwhile. So a
    /// thread never syncs alone while another sync is under way, and a sync never waits for
    /// anything but the disk. `FlushPolicy::Always` is this, called by every append.
    pub fn flush_to(&self, offset: i64) -> Result<(), FlushError> {
        let entered = Instant::now();
        let result = self.flush_to_inner(offset, offset != i64::MAX).map(|_| ());
        if offset != i64::MAX {
            self.metrics.durable_wait(entered.elapsed());
        }
        result
    }

    /// [`Log::flush_to`] for the leader of a write group, which let the appends under way join
    /// its group before it wrote them: its sync starts at once. (The group records each
    /// appender's wait.)
    pub(super) fn flush_group(&self, offset: i64) -> Result<(), FlushError> {
        self.flush_to_inner(offset, false).map(|_| ())
    }

    /// `delay`: whether a new leader first lets the appends under way finish writing. Answers
    /// whether this call's own sync synced a file (false when another's covered `offset`).
    fn flush_to_inner(&self, offset: i64, delay: bool) -> Result<bool, FlushError> {
        // One thread syncs (without holding the lock) while the others wait, each parked on its
        // own wake-up. When the sync is done the leader wakes those it covered directly, and
        // hands the lead to the first one it did not (it appended while the sync ran): that
        // thread syncs at once, covering everything appended in the meantime, and the others
        // pile onto it. Nobody contends for the lock on the way out, so a covered thread is
        // back appending while the next sync is still being set up.
        let mut fst = self.flush.lock();
        loop {
            if offset != i64::MAX && self.recovery_point() >= offset {
                return Ok(false);
            }
            if !fst.in_progress {
                fst.in_progress = true;
                break;
            }
            let wake = Arc::new(Wake::new());
            fst.waiters.push(Waiter {
                offset,
                wake: Arc::clone(&wake),
            });
            drop(fst);
            let lead = wake.wait();
            if !lead && offset != i64::MAX && self.recovery_point() >= offset {
                // Covered: back to appending without contending for the lock the leader
                // holds while it wakes the others and hands the turn on.
                return Ok(false);
            }
            fst = self.flush.lock();
            if lead {
                // Handed over: `in_progress` stayed set for us.
                break;
            }
        }
        let (from_base, from_position) = (fst.segment_base, fst.position);
        drop(fst);
        if delay {
            self.await_appends_in_flight();
        }
        let syncing = Instant::now();
        let result = self.sync_once(from_base, from_position);
        self.metrics.synced(syncing.elapsed(), result.is_ok());
        let mut fst = self.flush.lock();
        let (sealed_flushed, synced) = note_synced(&mut fst, &result);
        self.hand_over(&mut fst, result.is_ok());
        drop(fst);
        result?;
        if sealed_flushed {
            // A sealed segment became durable: record that recovery can start after it. Data
            // is durable whatever happens here, so a failure is reported but does not make the
            // log read-only.
            self.write_checkpoint(false)?;
        }
        Ok(synced)
    }

    /// What an appender about to lead a sync (or a write group) does first: lets the appends
    /// already under way finish writing (or join the group), for at most a small fraction of an
    /// fsync, so one fdatasync covers them too (Postgres's `commit_delay`, but only while
    /// someone is actually appending).
    pub(super) fn await_appends_in_flight(&self) {
        let deadline = std::time::Instant::now() + std::time::Duration::from_micros(100);
        while self.appends_in_flight.load(Ordering::Acquire) > 0
            && std::time::Instant::now() < deadline
        {
            std::thread::yield_now();
        }
    }

    /// At the end of a sync: wakes the waiters it covered, and hands the next sync to the first
    /// waiter it did not cover; with none, or when a rewrite waits for its turn, or when the
    /// sync failed (each waiter then finds out for itself), the turn is free again.
    fn hand_over(&self, fst: &mut FlushState, synced: bool) {
        let covered = self.recovery_point();
        fst.waiters.retain(|w| {
            let done = w.offset != i64::MAX && w.offset <= covered;
            if done {
                w.wake.set(Wake::RECHECK);
            }
            !done
        });
        if synced && fst.exclusive_waiting == 0 && !fst.waiters.is_empty() {
            let next = fst.waiters.remove(0);
            next.wake.set(Wake::LEAD);
            return;
        }
        fst.in_progress = false;
        for w in fst.waiters.drain(..) {
            w.wake.set(Wake::RECHECK);
        }
        self.flushed.notify_all();
    }

    /// Takes the flush turn for a rewrite: waits for the sync in flight, and keeps the next one
    /// from starting until [`Log::end_exclusive_flush`].
    pub(super) fn begin_exclusive_flush(&self) {
        let mut fst = self.flush.lock();
        fst.exclusive_waiting += 1;
        while fst.in_progress {
            self.flushed.wait(&mut fst);
        }
        fst.exclusive_waiting -= 1;
        fst.in_progress = true;
    }

    /// Gives the flush turn back after a rewrite.
    pub(super) fn end_exclusive_flush(&self) {
        let mut fst = self.flush.lock();
        fst.in_progress = false;
        for w in fst.waiters.drain(..) {
            w.wake.set(Wake::RECHECK);
        }
        drop(fst);
        self.flushed.notify_all();
    }

    /// One sync by the flush leader: takes what is unflushed under the append lock, makes it
    /// durable, and moves the recovery point.
    pub(super) fn sync_once(
        &self,
        from_base: i64,
        from_position: usize,
    ) -> Result<Synced, FlushError> {
        let (sealed, active, end_position, log_end, dir_dirty, pending, space) = {
            let mut st = self.append.lock();
            let w = active_writer(&st)?;
            let (segment, size) = (Arc::clone(w.segment()), w.size());
            // Where the written blocks will end once this sync is done, taken before it.
            let space = (Arc::clone(w.space()), w.space().sync_boundary(size));
            let log_end = self.log_end_offset.load(Ordering::Acquire);
            st.unflushed_messages = 0;
            let pending = st.producers.take_pending();
            let sealed = std::mem::take(&mut st.unflushed_sealed);
            (
                sealed,
                segment,
                size,
                log_end,
                std::mem::take(&mut st.dir_dirty),
                pending,
                space,
            )
        };
        let from = unflushed_from(&active, from_base, from_position);
        let result = (|| -> Result<bool, IoError> {
            for s in &sealed {
                // What the checkpoint will record of it, before the map may go.
                s.compute_header_digest()?;
                s.flush_all()?;
                // Durable: from now on it is mapped only while read.
                s.unpin();
            }
            if dir_dirty {
                self.env
                    .fs
                    .sync_dir(&self.dir)
                    .ctx("fsync directory", &self.dir)?;
            }
            let synced = active.flush_log(from, end_position)?;
            if synced {
                space.0.synced(space.1);
            }
            if !pending.is_empty() {
                for snapshot in pending {
                    snapshot.finish(self.env.fs.as_ref())?;
                }
                self.remove_stray_snapshots()?;
            }
            Ok(synced || !sealed.is_empty())
        })();
        let synced = match result {
            Ok(synced) => synced,
            Err(e) => {
                // After a failed fsync the kernel may have dropped the dirty pages: writing on
                // could lose acknowledged data silently, so the log becomes read-only.
                let cause = Arc::new(e);
                self.append.lock().failure = Some(Arc::clone(&cause));
                return Err(FlushError::ReadOnly { cause });
            }
        };
        self.recovery_point.fetch_max(log_end, Ordering::AcqRel);
        // The high watermark follows the recovery point by default: readers waiting on it wake.
        self.notify_waiters();
        Ok(Synced {
            base: active.base_offset(),
            position: end_position,
            sealed_flushed: !sealed.is_empty(),
            synced,
        })
    }

    /// Keeps one snapshot per segment base offset plus the newest (docs/format.md, "Producer
    /// snapshot").
    pub(super) fn remove_stray_snapshots(&self) -> Result<(), IoError> {
        let bases = self.segment_base_offsets();
        snapshot_files::remove_strays(self.env.fs.as_ref(), &self.dir, &bases).map(|_| ())
    }

    /// Records the recovery point and the segments that are wholly durable: every sealed
    /// segment already flushed (trimmed, with its indexes), in order, up to the first that is
    /// not; at a clean close (`clean`), every segment, the active one sealed by then.
    ///
    /// The append lock is held through the write, as every other checkpoint writer (the
    /// rewrites, the first change after a clean open) holds it: the writers share the file's
    /// temp name, and a checkpoint computed before a rewrite must not land after the rewrite's
    /// own (it could vouch for a segment the rewrite removed). It is taken only when a flush
    /// made a sealed segment durable (once a roll) and at close.
    pub(super) fn write_checkpoint(&self, clean: bool) -> Result<(), IoError> {
        let mut st = self.append.lock();
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let c = Checkpoint {
            clean_shutdown: clean,
            ..self.checkpoint_of(&st, &segments, self.recovery_point(), self.log_start_offset())
        };
        let written = self.store_checkpoint(&mut st, &c);
        drop(st);
        written
    }

    /// Records durably that the log is dense only from `offset` on (before batches after a gap
    /// are written).
    pub(super) fn record_dense_from(
        &self,
        st: &mut AppendState,
        offset: i64,
    ) -> Result<(), IoError> {
        let segments: Vec<Arc<Segment>> = self.segments.read().values().cloned().collect();
        let mut c = self.checkpoint_of(
            st,
            &segments,
            self.recovery_point(),
            self.log_start_offset(),
        );
        c.dense_from = Some(offset.max(st.dense_from));
        self.store_checkpoint(st, &c)?;
        st.dense_from = offset.max(st.dense_from);
        Ok(())
    }

    /// The (unclean) checkpoint of the log made of `segments`, with this recovery point and log
    /// start: it vouches for the durable sealed segments from the first on, up to the first
    /// that is not (and for none wholly below the log start).
    pub(super) fn checkpoint_of(
        &self,
        st: &AppendState,
        segments: &[Arc<Segment>],
        recovery_point: i64,
        log_start: i64,
    ) -> Checkpoint {
        let active = st.active.as_ref().map(|w| w.base_offset());
        let mut record = Vec::with_capacity(segments.len());
        for s in segments {
            let durable = Some(s.base_offset()) != active
                && !st
                    .unflushed_sealed
                    .iter()
                    .any(|u| u.base_offset() == s.base_offset())
                && s.next_offset() <= recovery_point;
            if !durable {
                break;
            }
            record.push(SegmentRecord {
                base_offset: s.base_offset(),
                next_offset: s.next_offset(),
                size: s.size() as u64,
                file_len: s.file_len(),
                digest: s.seal_digest(),
            });
        }
        Checkpoint {
            clean_shutdown: false,
            recovery_point,
            log_start_offset: log_start,
            high_watermark: self.high_watermark().max(log_start),
            dense_from: Some(st.dense_from),
            segments: Some(record),
            start_over_at: None,
        }
    }

    /// Flushes, trims the active segment to its logical size, and records a clean shutdown.
    /// Bytes already returned by `read` stay valid. Later calls return `Closed`.
    pub fn close(&self) -> Result<(), FlushError> {
        if self.closed.load(Ordering::Acquire) {
            return Ok(());
        }
        // A log opened clean and never changed has nothing to make durable.
        if !self.append.lock().clean_on_disk {
            self.flush()?;
        }
        let mut st = self.append.lock();
        let Some(writer) = st.active.take() else {
            return Ok(());
        };
        self.closed.store(true, Ordering::Release);
        self.end_signal.wake_all();
        // Nothing changed since a clean open: the clean checkpoint on disk still holds once the
        // active segment is trimmed back (recovery reads preallocated zeros after a clean
        // record's end as what they are, should the trim not reach the disk).
        let untouched = st.clean_on_disk;
        let segment = writer.seal()?;
        if !untouched {
            segment.compute_header_digest()?;
            segment.flush_all()?;
        }
        // Dead tails whose readers are gone go now, before the clean checkpoint records the
        // files' lengths; one a reader still holds is recorded, and the next open trims it.
        self.trim_dead_tails(&st)?;
        let log_end = self.log_end_offset();
        if st
            .producers
            .write_snapshot(self.env.fs.as_ref(), &self.dir, log_end)?
        {
            self.metrics.snapshot_written();
        }
        // Epochs an open rebuilt from the batches (a missing file) reach the file even when
        // nothing else changed; otherwise the checkpoint below writes them first.
        if untouched {
            self.write_unwritten_epochs(&mut st)?;
        }
        drop(st);
        // The pool of recycled files goes with the open log (the next open would remove it).
        self.remove_pool()?;
        if !untouched {
            self.remove_stray_snapshots()?;
            self.write_checkpoint(true)?;
        }
        // Another `Log` may open the directory from now on.
        self.lock.lock().take();
        Ok(())
    }
}

/// A thread waiting in [`Log::flush_to`] for a sync that covers its offset.
pub(super) struct Waiter {
    offset: i64,
    wake: Arc<Wake>,
}

/// One waiter's wake-up: parked until the leader sets it, woken directly (no lock to take on
/// the way out). Also the wake-up of an appender waiting in the write group (`group.rs`).
pub(super) struct Wake {
    state: AtomicU8,
    thread: std::thread::Thread,
}

impl Wake {
    const WAITING: u8 = 0;
    /// Look again: covered, or the turn is free.
    const RECHECK: u8 = 1;
    /// Lead the next sync (in the write group: the next group): the turn was handed over.
    pub(super) const LEAD: u8 = 2;

    pub(super) fn new() -> Wake {
        Wake {
            state: AtomicU8::new(Wake::WAITING),
            thread: std::thread::current(),
        }
    }

    pub(super) fn set(&self, state: u8) {
        self.state.store(state, Ordering::Release);
        self.thread.unpark();
    }

    /// Parks until set; whether the lead was handed over.
    fn wait(&self) -> bool {
        self.wait_state() == Wake::LEAD
    }

    /// Parks until set; the state it was set to.
    pub(super) fn wait_state(&self) -> u8 {
        loop {
            match self.state.load(Ordering::Acquire) {
                Wake::WAITING => std::thread::park(),
                state => return state,
            }
        }
    }
}

/// A log whose bytes [`Log::write_back_for_flush`] wrote back, awaiting the device flush that
/// makes them durable; it holds the log's flush turn until [`WrittenBack::flushed`] or until
/// dropped (then nothing counts as flushed, and the next flush syncs the bytes again).
#[must_use = "the log's flushes wait until it is flushed or dropped"]
pub struct WrittenBack<'a> {
    log: &'a Log,
    base: i64,
    position: usize,
    log_end: i64,
    done: bool,
}

impl WrittenBack<'_> {
    /// The device flush that followed the write-back (a data sync of a file of the same file
    /// system, begun after [`Log::write_back_for_flush`] returned) completed: the bytes are
    /// durable, and the log's recovery point moves past them.
    pub fn flushed(mut self) {
        let log = self.log;
        {
            let mut fst = log.flush.lock();
            fst.segment_base = self.base;
            fst.position = self.position;
        }
        log.recovery_point.fetch_max(self.log_end, Ordering::AcqRel);
        log.notify_waiters();
        self.done = true;
        log.end_exclusive_flush();
    }
}

impl Drop for WrittenBack<'_> {
    fn drop(&mut self) {
        if !self.done {
            self.log.end_exclusive_flush();
        }
    }
}
