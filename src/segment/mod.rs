//! One segment: the memory-mapped `N.log`, its sparse `N.index` and `N.timeindex`, and its
//! `N.txnindex` of aborted transactions when it has one (docs/format.md; docs/design.md,
//! "Memory maps without hazards").
//!
//! A [`Segment`] is the read side, shared by readers and the log; a [`SegmentWriter`] is the
//! one writer of the active segment. The active segment's files grow ahead of the writer by
//! real allocations ([`SegmentSpace`]) and are trimmed to their logical size when the segment is
//! sealed. A sealed segment is mapped only while it is read ([`SegmentView`]); no segment keeps
//! a file descriptor.

mod cut;
pub mod digest;
#[cfg(any(test, feature = "internals"))]
pub mod fuzz;
pub mod names;
pub mod mapped_index;
pub mod offset_index;
pub mod scan;
mod search;
pub mod space;
pub mod time_index;
pub mod txn_index;
mod view;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Weak};

use bytes::Bytes;
use parking_lot::RwLock;

use crate::format::{self, BatchErrorAt, BatchIter};
use crate::io::{File, FileSystem, IoError, IoResultExt, MapMode, Mapping, OpenMode};

pub use cut::reopen_cut;
pub use digest::SealDigest;
pub use offset_index::{IndexError, IndexProblem, OffsetIndex, OffsetPosition};
pub use scan::{scan, walk_frames, BatchInfo, BatchProblem, OffsetBounds, ScanResult, ScanStop};
pub use space::{Preallocation, SegmentSpace};
pub use time_index::{TimeIndex, TimestampOffset};
pub use txn_index::{AbortedTxn, TxnIndex};
pub use view::SegmentView;
pub use writer::{SegmentWriter, WriteDescriptors, WriteError};

/// The sizes a segment is created with, and the file system it lives on.
#[derive(Debug, Clone)]
pub struct SegmentConfig {
    /// Where its files are opened whenever a map, an allocation, a trim or a sync needs them.
    pub fs: Arc<dyn FileSystem>,
    /// The most the `.log` grows to (Kafka's `segment.bytes`): its map's length.
    pub segment_bytes: usize,
    /// The most each index grows to (Kafka's `segment.index.bytes`), rounded down to whole
    /// entries.
    pub index_bytes: usize,
    /// Bytes between offset-index entries (Kafka's `index.interval.bytes`).
    pub index_interval_bytes: usize,
    /// The `.log` grows by this much at a time, ahead of the writer.
    pub allocation_step: usize,
    /// How each step is allocated.
    pub preallocation: Preallocation,
    /// Whether the active segment's writer writes batches through the file (`pwrite`) rather
    /// than copying them into the map.
    pub write_through: bool,
    /// A managed partition's bound on the descriptors written through
    /// ([`writer::WriteDescriptors`]); `None` for a standalone log.
    pub write_descriptors: Option<Arc<WriteDescriptors>>,
}

/// The read side of a segment.
#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    fs: Arc<dyn FileSystem>,
    /// Its maps; `None` while a sealed segment is not mapped.
    view: RwLock<Option<Arc<SegmentView>>>,
    /// Views unmapped while readers may still hold them or bytes of their `.log` map (a
    /// truncation must not shrink the file under them).
    retired: parking_lot::Mutex<Vec<(Weak<SegmentView>, Weak<Mapping>)>>,
    /// The aborted transactions whose markers it holds (in memory; the file is open only
    /// while entries are appended to it).
    txn_index: TxnIndex,
    /// Never unmapped while set: the active segment (its writer writes the map), and a sealed
    /// one until it is durable (the flush syncs it through that map).
    pinned: AtomicBool,
    /// Set when a read mapped it, until the log has looked at how many it keeps mapped.
    newly_mapped: AtomicBool,
    /// When it was last read, on [`view_clock`]'s scale: the log unmaps the least recent.
    last_read: AtomicU64,
    /// Published bytes of the log.
    size: AtomicUsize,
    /// Last offset + 1 of the published batches (the base offset while empty).
    next_offset: AtomicI64,
    /// Largest batch maxTimestamp published, -1 while empty, [`UNKNOWN_TIMESTAMP`] for a
    /// sealed segment opened from disk until its time index is first asked.
    max_timestamp: AtomicI64,
    /// Bytes of the `.log` file after its batches that a truncation left because a reader
    /// still held them (a mapped file is never shrunk under a reader); 0 once trimmed.
    dead_bytes: AtomicU64,
    /// Every batch in it was validated by this process (appended through the log, or read
    /// through by recovery): a replay of it need not check their CRCs again.
    validated: AtomicBool,
    /// The header digest of its batches ([`digest`]) and the size it covers, once known: what
    /// the checkpoint records of it.
    header_digest: parking_lot::Mutex<Option<(usize, u32)>>,
}

/// A sealed segment's largest timestamp before its time index was read.
const UNKNOWN_TIMESTAMP: i64 = i64::MIN;

/// A coarse clock for the order in which segments were read: it ticks each time a segment is
/// mapped, so a read costs a load and a store, and the log can tell which mapped segment was
/// read longest ago.
fn view_clock() -> &'static AtomicU64 {
    static CLOCK: AtomicU64 = AtomicU64::new(0);
    &CLOCK
}

/// A read that met bytes that are not a batch, or a batch whose offsets contradict the
/// segment (only possible in a segment trusted on open without being read, whose bytes were
/// damaged since it was written).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} at byte {position}: {problem}", path.display())]
#[non_exhaustive]
pub struct CorruptSegment {
    /// The segment's `.log`.
    pub path: PathBuf,
    /// Byte position of the bad batch in it.
    pub position: usize,
    /// What is wrong there.
    pub problem: BatchProblem,
}

impl CorruptSegment {
    /// A stable snake_case name for the kind of error.
    pub fn kind(&self) -> &'static str {
        "corrupt_segment"
    }

    fn at(path: &Path, start: usize, e: BatchErrorAt) -> CorruptSegment {
        CorruptSegment {
            path: path.to_path_buf(),
            position: start + e.position,
            problem: e.error.into(),
        }
    }
}

impl Segment {
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// Published bytes of the log.
    pub fn size(&self) -> usize {
        self.size.load(Ordering::Acquire)
    }
    pub fn is_empty(&self) -> bool {
        self.size() == 0
    }
    /// Last offset + 1 (the base offset while empty).
    pub fn next_offset(&self) -> i64 {
        self.next_offset.load(Ordering::Acquire)
    }
    /// Largest batch maxTimestamp, or -1 while empty. For a sealed segment opened from disk it
    /// is found the first time it is asked, by mapping the segment (the last entry of its time
    /// index, checked; [`SegmentView`]). `i64::MAX` if it cannot be mapped: such a segment is
    /// never old enough for retention by time, and a search by time maps it and reports why.
    pub fn max_timestamp(&self) -> i64 {
        let ts = self.max_timestamp.load(Ordering::Acquire);
        if ts != UNKNOWN_TIMESTAMP {
            return ts;
        }
        match self.view() {
            Ok(view) => {
                let ts = view.max_timestamp();
                // A writer never exists for such a segment, so nothing else stores it.
                self.max_timestamp.store(ts, Ordering::Release);
                ts
            }
            Err(_) => i64::MAX,
        }
    }
    /// Whether every batch in the segment was validated by this process.
    pub(crate) fn is_validated(&self) -> bool {
        self.validated.load(Ordering::Acquire)
    }
    /// Records that every batch in the segment was validated by this process (a new segment,
    /// which only validated appends fill, or one recovery read through).
    pub(crate) fn mark_validated(&self) {
        self.validated.store(true, Ordering::Release);
    }
    /// Whether some reader (a `Bytes` of a read, a prefault job, a lookup holding a view)
    /// holds a share of a map of the segment, the current one or one unmapped since. Under
    /// the segments' write lock no new one can appear.
    pub(crate) fn readers_hold_bytes(&self) -> bool {
        let mut retired = self.retired.lock();
        retired.retain(|(v, m)| v.strong_count() > 0 || m.strong_count() > 0);
        if !retired.is_empty() {
            return true;
        }
        drop(retired);
        self.view
            .read()
            .as_ref()
            .is_some_and(|v| Arc::strong_count(v) > 1 || Arc::strong_count(&v.log) > 1)
    }
    /// Every map of the segment a reader may still hold bytes of, as weak references, its
    /// current view taken out of it: what a truncation hands to the segment that replaces
    /// this one, so the dead tail after the cut is trimmed once all of them are gone. Called
    /// under the segments' write lock with the segment leaving the log, so no reader can map
    /// it again.
    pub(crate) fn take_holds(&self) -> Vec<(Weak<SegmentView>, Weak<Mapping>)> {
        let mut holds = std::mem::take(&mut *self.retired.lock());
        if let Some(v) = self.view.write().take() {
            holds.push((Arc::downgrade(&v), Arc::downgrade(&v.log)));
        }
        holds.retain(|(v, m)| v.strong_count() > 0 || m.strong_count() > 0);
        holds
    }
    /// Records maps of the segment this one replaced, which may hold the bytes after its end.
    pub(crate) fn inherit_holds(&self, holds: Vec<(Weak<SegmentView>, Weak<Mapping>)>) {
        self.retired.lock().extend(holds);
    }
    /// Whether the `.log` file holds dead bytes after the batches (a truncation's, left while
    /// a reader held them).
    pub fn has_dead_tail(&self) -> bool {
        self.dead_bytes.load(Ordering::Acquire) > 0
    }
    /// Cuts the dead tail off the `.log` once no reader holds bytes of a map that covered it
    /// (the maps handed over by the truncation, and any unmapped since; the current view maps
    /// the batches only, which stay). Returns whether it did. The new length is synced before
    /// [`Segment::file_len`] says so, so a checkpoint never records a length the disk may not
    /// have; a crash before leaves a length between the batches' end and the recorded one,
    /// which recovery accepts. The caller holds the log's append lock, so no rewrite of the
    /// segment runs meanwhile.
    pub(crate) fn trim_dead_tail(&self) -> Result<bool, IoError> {
        if !self.has_dead_tail() {
            return Ok(false);
        }
        {
            let mut retired = self.retired.lock();
            retired.retain(|(v, m)| v.strong_count() > 0 || m.strong_count() > 0);
            if !retired.is_empty() {
                return Ok(false);
            }
        }
        let path = &self.log_path;
        let file = self.fs.open(path, OpenMode::ReadWrite).ctx("open", path)?;
        file.set_len(self.size() as u64).ctx("truncate", path)?;
        file.sync_data().ctx("fdatasync", path)?;
        self.dead_bytes.store(0, Ordering::Release);
        Ok(true)
    }
    pub fn txn_index(&self) -> &TxnIndex {
        &self.txn_index
    }
    pub fn txn_index_path(&self) -> &Path {
        self.txn_index.path()
    }
    /// The length of the `.log` file: its batches, and the dead bytes a truncation left after
    /// them while readers held them.
    pub fn file_len(&self) -> u64 {
        self.size() as u64 + self.dead_bytes.load(Ordering::Acquire)
    }
    pub fn log_path(&self) -> &Path {
        &self.log_path
    }
    pub fn index_path(&self) -> PathBuf {
        self.log_path.with_extension(names::INDEX_EXT)
    }
    pub fn time_index_path(&self) -> PathBuf {
        self.log_path.with_extension(names::TIME_INDEX_EXT)
    }
    /// Its maps, mapping a sealed segment first if it is not (its files are opened for as long
    /// as that takes). The view stays valid, and its bytes readable, whatever happens to the
    /// segment afterwards.
    pub fn view(&self) -> Result<Arc<SegmentView>, IoError> {
        self.last_read
            .store(view_clock().load(Ordering::Relaxed), Ordering::Relaxed);
        if let Some(v) = &*self.view.read() {
            return Ok(Arc::clone(v));
        }
        let mut slot = self.view.write();
        if let Some(v) = &*slot {
            return Ok(Arc::clone(v));
        }
        let v = Arc::new(view::map_sealed(
            self.fs.as_ref(),
            &self.log_path,
            self.base_offset,
            self.size(),
            self.next_offset(),
        )?);
        *slot = Some(Arc::clone(&v));
        let now = view_clock().fetch_add(1, Ordering::Relaxed) + 1;
        self.last_read.store(now, Ordering::Relaxed);
        self.newly_mapped.store(true, Ordering::Release);
        Ok(v)
    }

    /// Whether it is mapped now.
    pub fn is_mapped(&self) -> bool {
        self.view.read().is_some()
    }
    /// Whether it may be unmapped (a sealed segment that is durable).
    pub fn is_unpinned(&self) -> bool {
        !self.pinned.load(Ordering::Acquire)
    }
    /// When it was last read (larger is more recent).
    pub fn last_read(&self) -> u64 {
        self.last_read.load(Ordering::Relaxed)
    }
    /// Whether a read mapped it since the last call.
    pub fn take_newly_mapped(&self) -> bool {
        self.newly_mapped.swap(false, Ordering::AcqRel)
    }
    /// Drops its maps unless it is pinned; readers holding bytes keep theirs. Returns whether
    /// it was mapped.
    pub fn unmap(&self) -> bool {
        if self.pinned.load(Ordering::Acquire) {
            return false;
        }
        match self.view.write().take() {
            Some(v) => {
                let mut retired = self.retired.lock();
                retired.retain(|(v, m)| v.strong_count() > 0 || m.strong_count() > 0);
                let (view, log) = (Arc::downgrade(&v), Arc::downgrade(&v.log));
                drop(v);
                if view.strong_count() > 0 || log.strong_count() > 0 {
                    retired.push((view, log));
                }
                true
            }
            None => false,
        }
    }
    /// Maps it now, if it is not, and keeps it mapped until [`Segment::unpin`]: a rewrite
    /// calls this before it renames the segment's files, because a reader that finds the
    /// segment in the log's map until the rewrite publishes its new state maps it by name, and
    /// must find these bytes there, not a missing file (or the file a later rename puts under
    /// the same name, as compaction's `.swap` does).
    pub(crate) fn hold_mapped(&self) -> Result<(), IoError> {
        self.view()?;
        self.pinned.store(true, Ordering::Release);
        Ok(())
    }
    /// A sealed segment became durable, or left the log: its maps may go.
    pub(crate) fn unpin(&self) {
        self.pinned.store(false, Ordering::Release);
    }

    /// A segment opened from disk, not mapped.
    fn lazy(
        fs: &Arc<dyn FileSystem>,
        log_path: PathBuf,
        base: i64,
        size: usize,
        txn: Vec<AbortedTxn>,
    ) -> Segment {
        let txn_index = TxnIndex::new(log_path.with_extension(names::TXN_INDEX_EXT), txn);
        Segment {
            base_offset: base,
            log_path,
            fs: Arc::clone(fs),
            view: RwLock::new(None),
            retired: parking_lot::Mutex::new(Vec::new()),
            txn_index,
            pinned: AtomicBool::new(false),
            newly_mapped: AtomicBool::new(false),
            last_read: AtomicU64::new(0),
            size: AtomicUsize::new(size),
            next_offset: AtomicI64::new(base),
            max_timestamp: AtomicI64::new(UNKNOWN_TIMESTAMP),
            dead_bytes: AtomicU64::new(0),
            validated: AtomicBool::new(false),
            header_digest: parking_lot::Mutex::new(None),
        }
    }

    /// What the checkpoint records of the segment's bytes: the header digest of its batches,
    /// when known for its current size, with the length and CRC of the `.txnindex` holding the
    /// entries it has in memory (what it wrote). `None` when the header digest is not known
    /// (a segment recorded by an older checkpoint and not validated since).
    pub(crate) fn seal_digest(&self) -> Option<SealDigest> {
        let (size, headers) = (*self.header_digest.lock())?;
        (size == self.size()).then(|| {
            let (txn_len, txn_crc) = self.txn_index.digest();
            SealDigest {
                headers,
                txn_len,
                txn_crc,
            }
        })
    }

    /// Sets the header digest of its first `size` bytes (recovery found or checked it).
    pub(crate) fn set_header_digest(&self, size: usize, digest: u32) {
        *self.header_digest.lock() = Some((size, digest));
    }

    /// Computes the header digest of its batches from its map, unless it is known for its
    /// size: when a sealed segment becomes durable, before a checkpoint records it (off the
    /// append path; a walk over its headers, 21 bytes a batch, in pages a flush has just
    /// synced). Bytes that do not frame (damaged since they were written) get none.
    pub(crate) fn compute_header_digest(&self) -> Result<(), IoError> {
        let size = self.size();
        if matches!(*self.header_digest.lock(), Some((s, _)) if s == size) {
            return Ok(());
        }
        let view = self.view()?;
        let data = view.data();
        if let Some(d) = digest::header_digest(&data[..size.min(data.len())]) {
            self.set_header_digest(size, d);
        }
        Ok(())
    }

    /// What the checkpoint records of the segment once it is cut to its first `size` bytes,
    /// holding offsets below `next_offset` (a truncation's commit point, written before the
    /// cut). `None` if those bytes do not frame.
    pub(crate) fn seal_digest_at(
        &self,
        size: usize,
        next_offset: i64,
    ) -> Result<Option<SealDigest>, IoError> {
        let view = self.view()?;
        let data = view.data();
        let Some(headers) = digest::header_digest(&data[..size.min(data.len())]) else {
            return Ok(None);
        };
        // Known from now on for when the segment's size is `size`.
        self.set_header_digest(size, headers);
        let kept: Vec<AbortedTxn> = self
            .txn_index
            .entries()
            .into_iter()
            .filter(|e| e.last_offset < next_offset)
            .collect();
        Ok(Some(SealDigest::new(headers, &kept)))
    }

    pub(crate) fn set_size(&self, size: usize) {
        self.size.store(size, Ordering::Release);
    }
    pub(crate) fn set_next_offset(&self, next: i64) {
        self.next_offset.store(next, Ordering::Release);
    }
    pub(crate) fn note_timestamp(&self, ts: i64) {
        self.max_timestamp.fetch_max(ts, Ordering::AcqRel);
    }

    /// Whole batches, zero-copy, starting with the first batch whose last offset is ≥ `target`
    /// and adding batches while they fit in `max_bytes` (the first is returned whole even if it
    /// is larger, like Kafka's fetch), with the offset after the last of them. `None` if no
    /// batch of this segment reaches `target`.
    ///
    /// Only batches that start below `below` are returned: the writer publishes a batch's
    /// bytes a moment before it moves the log end, and a reader must never see a batch the log
    /// end does not yet count (its next read, at that batch's end, would be out of range).
    ///
    /// Every batch handed out has offsets that fit the segment (see [`OffsetBounds`]): the
    /// offsets are not covered by the CRC, so a reader of damaged bytes gets an error rather
    /// than a batch claiming offsets it does not hold.
    pub fn read(
        &self,
        target: i64,
        max_bytes: usize,
        below: i64,
    ) -> Result<Option<SegmentRead>, SegmentReadError> {
        let view = self.view()?;
        let data = view.data();
        let start = self.index_start(&view, target);
        if start >= data.len() {
            return Ok(None);
        }
        // Every batch ends below the segment's next offset (recovery took it from the
        // checkpoint's record or from validated batches, not from these headers).
        let bounds = OffsetBounds {
            segment_base: self.base_offset,
            next_segment_base: Some(self.next_offset()),
            dense_from: None,
        };
        let mut first: Option<usize> = None;
        let mut end = start;
        let mut next_offset = target;
        let mut previous_last = None;
        // The segment holds the target: a walk that passes it without finding its batch met a
        // header that lies (below the recovery point nothing else can explain it).
        let held = self.next_offset().min(below);
        let skipped = |at| {
            self.corrupt(
                at,
                BatchProblem::OffsetsSkipped {
                    offset: target,
                    next_offset: held,
                },
            )
        };
        for item in BatchIter::new(&data[start..]) {
            let (at, batch) = item.map_err(|e| CorruptSegment::at(&self.log_path, start, e))?;
            let at = start + at;
            if batch.base_offset() >= below {
                if first.is_none() && target >= self.base_offset && target < held {
                    return Err(skipped(at).into());
                }
                break;
            }
            bounds
                .check(batch.base_offset(), batch.last_offset(), previous_last)
                .map_err(|problem| self.corrupt(at, problem))?;
            previous_last = Some(batch.last_offset());
            match first {
                None if batch.last_offset() < target => continue,
                None => first = Some(at),
                Some(f) if at + batch.size() - f > max_bytes => break,
                Some(_) => {}
            }
            end = at + batch.size();
            next_offset = batch.last_offset() + 1;
        }
        if first.is_none() && target >= self.base_offset && target < held {
            return Err(skipped(data.len()).into());
        }
        Ok(first.and_then(|f| {
            view.log.bytes(f, end).map(|bytes| SegmentRead {
                bytes,
                next_offset,
                position: f,
            })
        }))
    }

    /// Where a scan for `target` starts: the index entry's position if the batch there is the
    /// one the entry names, else the start of the segment. A damaged index entry then costs a
    /// longer scan, never a wrong answer or an error blamed on the log.
    fn index_start(&self, view: &SegmentView, target: i64) -> usize {
        let entry = view.offset_index.lookup(target);
        let at = entry.position as usize;
        let names_its_batch = at == 0
            || format::RecordBatch::parse(view.data().get(at..).unwrap_or(&[]))
                .is_ok_and(|b| b.last_offset() == entry.offset);
        if names_its_batch {
            at
        } else {
            0
        }
    }

    fn corrupt(&self, position: usize, problem: BatchProblem) -> CorruptSegment {
        CorruptSegment {
            path: self.log_path.clone(),
            position,
            problem,
        }
    }

    /// The position of the first batch whose maxTimestamp is ≥ `timestamp`, searching from the
    /// time and offset indexes (docs/format.md, "Time index" lookup).
    pub fn find_timestamp(
        &self,
        view: &SegmentView,
        timestamp: i64,
    ) -> Result<Option<usize>, CorruptSegment> {
        let from = view.time_index.lookup(timestamp).offset;
        let start = self.index_start(view, from);
        let data = view.data();
        for item in BatchIter::new(data.get(start..).unwrap_or(&[])) {
            let (at, batch) = item.map_err(|e| CorruptSegment::at(&self.log_path, start, e))?;
            if batch.max_timestamp() >= timestamp {
                return Ok(Some(start + at));
            }
        }
        Ok(None)
    }

    /// Makes `[from, to)` of the log durable (the active segment's appends since the last
    /// flush): one ranged sync (msync `MS_SYNC`), which writes the range, the file's length and
    /// its extents if they changed, and waits for no other write-back of the file, such as the
    /// zeros written ahead of the writer (docs/performance.md, "Durable appends"). Answers
    /// whether there was anything to sync.
    pub fn flush_log(&self, from: usize, to: usize) -> Result<bool, IoError> {
        let view = self.view()?;
        let to = to.min(view.log.published());
        if to > from {
            view.log
                .sync(from, to - from)
                .ctx("msync", &self.log_path)?;
        }
        Ok(to > from)
    }

    /// Writes `[from, to)` of the log back and waits, for a device flush by another file's
    /// sync to make durable ([`crate::Log::write_back_for_flush`]); answers whether the file
    /// system promises that (false: nothing is promised, the caller syncs the log itself).
    /// The caller knows the range lies in blocks written and synced before.
    pub fn write_back_for_flush(&self, from: usize, to: usize) -> Result<bool, IoError> {
        let view = self.view()?;
        let to = to.min(view.log.published());
        if to <= from {
            return Ok(false);
        }
        view.log
            .write_back_for_flush(from, to - from)
            .ctx("sync_file_range", &self.log_path)
    }

    /// Starts writing `[from, to)` of the log back without waiting (a hint for the
    /// [`Segment::flush_log`] that follows: see [`crate::Log::start_write_back`]).
    pub fn start_write_back(&self, from: usize, to: usize) {
        if let Ok(view) = self.view() {
            let to = to.min(view.log.published());
            if to > from {
                view.log.start_write_back(from, to - from);
            }
        }
    }

    /// Makes the whole segment durable: log and both indexes (for a sealed segment, before the
    /// recovery point moves past it), and the length it was trimmed to.
    pub fn flush_all(&self) -> Result<(), IoError> {
        let view = self.view.read().clone();
        let index_path = self.index_path();
        let time_path = self.time_index_path();
        if let Some(v) = &view {
            // What was written through the maps reaches the files first.
            let size = v.log.published();
            if size > 0 {
                v.log.flush(0, size).ctx("msync", &self.log_path)?;
            }
            let idx = v.offset_index.mapping();
            idx.flush(0, idx.published()).ctx("msync", &index_path)?;
            let time = v.time_index.mapping();
            time.flush(0, time.published()).ctx("msync", &time_path)?;
        }
        for path in [&self.log_path, &index_path, &time_path] {
            self.fs
                .open(path, OpenMode::ReadWrite)
                .ctx("open", path)?
                .sync_data()
                .ctx("fdatasync", path)?;
        }
        self.txn_index.sync()
    }
}

/// What [`Segment::read`] returns.
#[derive(Debug, Clone)]
pub struct SegmentRead {
    /// Whole batches, zero-copy.
    pub bytes: Bytes,
    /// The offset after the last of them.
    pub next_offset: i64,
    /// Where the first of them starts in the segment's `.log`.
    pub position: usize,
}

/// How a segment's indexes are obtained when it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexSource<'a> {
    /// Use the stored files (recovery checked them).
    Stored,
    /// Rebuild from these batches (recovery listed them).
    Rebuild(&'a [BatchInfo]),
}

/// What [`open`] made of a segment.
#[derive(Debug)]
pub enum Opened {
    Sealed(Arc<Segment>),
    Active(SegmentWriter),
}

/// Creates an empty active segment at `base_offset`, replacing leftover files of that name.
/// All or nothing: on failure the files it made are removed again.
pub fn create(
    dir: &Path,
    base_offset: i64,
    cfg: &SegmentConfig,
    now_ms: i64,
) -> Result<SegmentWriter, OpenSegmentError> {
    create_with_room(dir, base_offset, cfg, now_ms, 0)
}

/// [`create`], with `room` bytes of the `.log` allocated before it returns (a roll: the batch
/// that rolled must fit, or the roll fails with nothing changed). The rest of the file grows
/// ahead of the writer later, off the append path.
pub fn create_with_room(
    dir: &Path,
    base_offset: i64,
    cfg: &SegmentConfig,
    now_ms: i64,
    room: usize,
) -> Result<SegmentWriter, OpenSegmentError> {
    let fs = cfg.fs.as_ref();
    let files = SegmentFiles::open(&cfg.fs, dir, base_offset, OpenMode::CreateTruncate)?;
    // A leftover `.txnindex` of that name would be read as this segment's when it is opened
    // again (the others are truncated by their open).
    let txn_path = names::file_path(dir, base_offset, names::TXN_INDEX_EXT);
    match fs.remove_file(&txn_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(IoError::new("remove", &txn_path, e).into())
        }
        _ => {}
    }
    let paths = [
        files.log_path.clone(),
        files.index_path.clone(),
        files.time_path.clone(),
    ];
    let made = (move || {
        files.index.set_len(0).ctx("truncate", &files.index_path)?;
        files.time.set_len(0).ctx("truncate", &files.time_path)?;
        let mut writer = files.into_writer(base_offset, cfg, 0, false, &[], Vec::new(), now_ms)?;
        writer.segment().mark_validated();
        writer.make_room(room)?;
        Ok(writer)
    })();
    if made.is_err() {
        // A half-made segment (a full disk after the `.log` was preallocated) would hold its
        // space on the full disk, and after a clean close the next open would trust its zeros
        // as batches and be refused. Best effort: this is already a failure path.
        for path in &paths {
            let _ = fs.remove_file(path);
        }
    }
    made
}

/// [`create_with_room`] over a recycled file: `recycled` (a `.log.recycle` of the pool,
/// docs/design.md "Segment space") is renamed to the new segment's `.log` and kept as it is,
/// its length counted as space already allocated and written (no zeros, no fallocate over
/// it; trimmed to `segment_bytes` if longer); the indexes are made fresh. Its old bytes are
/// never read: the segment starts empty and reads end at what was appended, and recovery
/// cuts what follows the last valid batch (the old batches' offsets are below the new base,
/// so none of them continues the segment). On a failure after the rename the new segment's
/// files are removed, so the caller may create a fresh one instead.
pub fn create_recycled(
    dir: &Path,
    base_offset: i64,
    cfg: &SegmentConfig,
    now_ms: i64,
    room: usize,
    recycled: &Path,
) -> Result<SegmentWriter, OpenSegmentError> {
    let fs = cfg.fs.as_ref();
    let log_path = names::file_path(dir, base_offset, names::LOG_EXT);
    let index_path = names::file_path(dir, base_offset, names::INDEX_EXT);
    let time_path = names::file_path(dir, base_offset, names::TIME_INDEX_EXT);
    let txn_path = names::file_path(dir, base_offset, names::TXN_INDEX_EXT);
    match fs.remove_file(&txn_path) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(IoError::new("remove", &txn_path, e).into())
        }
        _ => {}
    }
    fs.rename(recycled, &log_path).ctx("rename", recycled)?;
    let made = (|| {
        let log = fs.open(&log_path, OpenMode::ReadWrite).ctx("open", &log_path)?;
        if log.len().ctx("stat", &log_path)? > cfg.segment_bytes as u64 {
            log.set_len(cfg.segment_bytes as u64).ctx("trim", &log_path)?;
        }
        let index = fs
            .open(&index_path, OpenMode::CreateTruncate)
            .ctx("open", &index_path)?;
        let time = fs
            .open(&time_path, OpenMode::CreateTruncate)
            .ctx("open", &time_path)?;
        let files = SegmentFiles {
            fs: Arc::clone(&cfg.fs),
            log_path: log_path.clone(),
            index_path: index_path.clone(),
            time_path: time_path.clone(),
            log,
            index,
            time,
            background: fs.allows_background_io(),
        };
        let mut writer = files.into_writer(base_offset, cfg, 0, false, &[], Vec::new(), now_ms)?;
        writer.segment().mark_validated();
        writer.space().mark_recycled();
        writer.make_room(room)?;
        Ok(writer)
    })();
    if made.is_err() {
        for path in [&log_path, &index_path, &time_path] {
            let _ = fs.remove_file(path);
        }
    }
    made
}

/// Which segment [`open`] opens, and what recovery found out about it.
#[derive(Debug, Clone, Copy)]
pub struct OpenSpec<'a> {
    pub base_offset: i64,
    /// Bytes of valid batches from the start of the `.log`; anything after is cut.
    pub log_size: usize,
    /// Open as the active segment (mapped writable, preallocated again) or sealed (trimmed).
    pub active: bool,
    pub indexes: IndexSource<'a>,
    pub tail: TailInfo,
    /// Its aborted transactions, and whether its `.txnindex` must be written from them.
    pub txn: TxnSource<'a>,
}

/// Where a reopened segment's aborted transactions come from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TxnSource<'a> {
    /// What its `.txnindex` holds (recovery read and checked it; empty without a file).
    Stored(&'a [AbortedTxn]),
    /// Rebuilt from the log by recovery: the file is rewritten to hold exactly these (and
    /// removed when there are none).
    Rebuilt(&'a [AbortedTxn]),
}

/// Opens an existing segment as recovery planned it: cuts what follows its valid bytes,
/// rebuilds its indexes if told to, and maps it if it is the active one (a sealed one is
/// mapped when it is read).
pub fn open(
    dir: &Path,
    cfg: &SegmentConfig,
    spec: OpenSpec<'_>,
    now_ms: i64,
) -> Result<Opened, OpenSegmentError> {
    let OpenSpec {
        base_offset,
        log_size,
        active,
        indexes,
        tail,
        txn,
    } = spec;
    let txn = match txn {
        TxnSource::Stored(entries) => entries,
        TxnSource::Rebuilt(entries) => {
            let path = names::file_path(dir, base_offset, names::TXN_INDEX_EXT);
            txn_index::rewrite(cfg.fs.as_ref(), &path, entries)?;
            entries
        }
    };
    let files = SegmentFiles::open(&cfg.fs, dir, base_offset, OpenMode::Create)?;
    let log_len = files.log.len().ctx("stat", &files.log_path)? as usize;
    if log_len > log_size {
        // Bytes past the valid end (a torn tail, or preallocated zeros after a crash) are cut.
        // A sealed segment's cut is synced now: the recovery point is about to cover it. The
        // active segment's is made durable by its first sync (a ranged msync or fdatasync
        // writes the file's length with the range), which comes before any of its new batches
        // is acknowledged or the recovery point moves; until then a crash may bring back only
        // what this crash left after the valid end, never acknowledged, which the next
        // recovery validates and cuts again as it did this time (docs/design.md, "Opening
        // after a crash").
        files
            .log
            .set_len(log_size as u64)
            .ctx("truncate", &files.log_path)?;
        if !active {
            files.log.sync_data().ctx("fdatasync", &files.log_path)?;
        }
    }
    let (rebuild, batches): (bool, &[BatchInfo]) = match indexes {
        IndexSource::Rebuild(batches) => (true, batches),
        IndexSource::Stored => (false, &[]),
    };
    if !active && !rebuild {
        let segment = files.into_sealed(base_offset, log_size, tail, txn.to_vec());
        return Ok(Opened::Sealed(segment));
    }
    let mut writer = files.into_writer(
        base_offset,
        cfg,
        log_size,
        !rebuild,
        batches,
        txn.to_vec(),
        now_ms,
    )?;
    writer.restore(tail.last_offset, tail.first_batch_timestamp);
    if let Some(last) = tail.last_offset {
        writer.segment().set_next_offset(last + 1);
    }
    if let Some(ts) = tail.max_timestamp {
        writer.segment().note_timestamp(ts);
    }
    if active {
        Ok(Opened::Active(writer))
    } else {
        Ok(Opened::Sealed(writer.seal()?))
    }
}

/// Why a read of a segment failed.
#[derive(Debug, thiserror::Error)]
pub enum SegmentReadError {
    /// A sealed segment could not be mapped.
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Corrupt(#[from] CorruptSegment),
}

/// Why a segment could not be opened.
#[derive(Debug, thiserror::Error)]
pub enum OpenSegmentError {
    #[error(transparent)]
    Io(#[from] IoError),
    #[error(transparent)]
    Corrupt(#[from] CorruptSegment),
    #[error("{}: {error}", path.display())]
    Index { path: PathBuf, error: IndexError },
}

/// What a reopened segment needs to know of its data, as recovery found it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TailInfo {
    /// The last offset of its batches, `None` when empty.
    pub last_offset: Option<i64>,
    /// maxTimestamp of the first batch (the time-based roll, §3.2), -1 if unknown.
    pub first_batch_timestamp: i64,
    /// The largest batch maxTimestamp, if known; otherwise the time index's last entry says.
    pub max_timestamp: Option<i64>,
}

impl TailInfo {
    /// The tail of a segment whose batches were all listed (validated or walked).
    pub fn from_batches(batches: &[BatchInfo]) -> TailInfo {
        TailInfo {
            last_offset: batches.last().map(|b| b.last_offset),
            first_batch_timestamp: batches.first().map_or(-1, |b| b.max_timestamp),
            max_timestamp: batches.iter().map(|b| b.max_timestamp).max(),
        }
    }
}

/// The three files of a segment, open while it is made, opened or cut.
struct SegmentFiles {
    fs: Arc<dyn FileSystem>,
    log_path: PathBuf,
    index_path: PathBuf,
    time_path: PathBuf,
    log: Box<dyn File>,
    index: Box<dyn File>,
    time: Box<dyn File>,
    /// Their file system lets a background thread grow them.
    background: bool,
}

impl SegmentFiles {
    fn open(
        fs: &Arc<dyn FileSystem>,
        dir: &Path,
        base: i64,
        mode: OpenMode,
    ) -> Result<SegmentFiles, IoError> {
        let log_path = names::file_path(dir, base, names::LOG_EXT);
        let index_path = names::file_path(dir, base, names::INDEX_EXT);
        let time_path = names::file_path(dir, base, names::TIME_INDEX_EXT);
        let log = fs.open(&log_path, mode).ctx("open", &log_path)?;
        let index = fs.open(&index_path, mode).ctx("open", &index_path)?;
        let time = fs.open(&time_path, mode).ctx("open", &time_path)?;
        Ok(SegmentFiles {
            fs: Arc::clone(fs),
            log_path,
            index_path,
            time_path,
            log,
            index,
            time,
            background: fs.allows_background_io(),
        })
    }

    /// A sealed segment of `log_size` bytes, not mapped; its files are closed.
    fn into_sealed(
        self,
        base: i64,
        log_size: usize,
        tail: TailInfo,
        txn: Vec<AbortedTxn>,
    ) -> Arc<Segment> {
        let segment = Segment::lazy(&self.fs, self.log_path, base, log_size, txn);
        segment
            .next_offset
            .store(tail.last_offset.map_or(base, |l| l + 1), Ordering::Release);
        // Without it, the last entry of its time index (forced at seal) says, when asked.
        if let Some(ts) = tail.max_timestamp {
            segment.max_timestamp.store(ts, Ordering::Release);
        }
        Arc::new(segment)
    }

    /// Maps the three files writable, each map as long as the file can grow (the files grow
    /// into them, [`SegmentSpace`]), and makes a writer. With `keep_indexes` the stored index
    /// entries are kept, otherwise the indexes restart empty and are filled from `batches`.
    /// `txn` are the aborted transactions its `.txnindex` holds.
    #[allow(clippy::too_many_arguments)]
    fn into_writer(
        self,
        base: i64,
        cfg: &SegmentConfig,
        log_size: usize,
        keep_indexes: bool,
        batches: &[BatchInfo],
        txn: Vec<AbortedTxn>,
        now_ms: i64,
    ) -> Result<SegmentWriter, OpenSegmentError> {
        let capacity = cfg.segment_bytes.max(log_size);
        let log_len = self.log.len().ctx("stat", &self.log_path)? as usize;
        let background = self.background;
        let log = Arc::new(self.map_active_log(cfg, capacity, log_size)?);
        let (index, index_writer, index_len) = Self::map_index(
            self.index.as_ref(),
            &self.index_path,
            cfg.index_bytes,
            offset_index::ENTRY_SIZE,
            keep_indexes,
        )?;
        let (time, time_writer, time_len) = Self::map_index(
            self.time.as_ref(),
            &self.time_path,
            cfg.index_bytes,
            time_index::ENTRY_SIZE,
            keep_indexes,
        )?;
        let space_cfg = space::SpaceConfig {
            capacity,
            step: cfg.allocation_step,
            preallocation: cfg.preallocation,
            index_capacity: index.len(),
            time_capacity: time.len(),
            index_interval_bytes: cfg.index_interval_bytes,
            background,
        };
        let log_writer = log.writer().ok_or_else(|| no_writer(&self.log_path))?;
        let segment = Segment::lazy(&self.fs, self.log_path, base, log_size, txn);
        segment.max_timestamp.store(-1, Ordering::Release);
        *segment.view.write() = Some(Arc::new(SegmentView {
            log,
            offset_index: OffsetIndex::new(base, index),
            time_index: TimeIndex::new(base, time),
        }));
        segment.pinned.store(true, Ordering::Release);
        let segment = Arc::new(segment);
        let space = space::SegmentSpace::new(
            Arc::clone(&segment),
            space_cfg,
            log_len,
            index_len,
            time_len,
            !keep_indexes,
            log_size,
        )?;
        let mut writer = SegmentWriter::new(
            Arc::clone(&segment),
            Arc::new(space),
            log_writer,
            offset_index::OffsetIndexWriter::new(base, index_writer),
            time_index::TimeIndexWriter::new(base, time_writer),
            cfg,
            now_ms,
        );
        if !keep_indexes {
            writer.restart_index_rebuild();
        }
        Self::index_batches(&mut writer, &segment, batches)?;
        Ok(writer)
    }

    /// Maps the active segment's `.log` writable up to `capacity`, its first `log_size` bytes
    /// published.
    fn map_active_log(
        &self,
        cfg: &SegmentConfig,
        capacity: usize,
        log_size: usize,
    ) -> Result<Mapping, OpenSegmentError> {
        let mode = if cfg.write_through {
            MapMode::WriteThrough {
                published: log_size,
            }
        } else {
            MapMode::ReadWrite {
                published: log_size,
            }
        };
        Ok(self.log.map(capacity, mode).ctx("mmap", &self.log_path)?)
    }

    /// Indexes the batches already in the segment (none when its stored indexes are kept).
    fn index_batches(
        writer: &mut SegmentWriter,
        segment: &Segment,
        batches: &[BatchInfo],
    ) -> Result<(), OpenSegmentError> {
        for b in batches {
            writer
                .index_batch(b.position, b.size, b.last_offset, b.max_timestamp)
                .map_err(|error| OpenSegmentError::Index {
                    path: segment.index_path(),
                    error,
                })?;
        }
        Ok(())
    }

    /// Maps an active segment's index writable, as long as it can grow; returns the map, its
    /// writer, and the file's length (what is allocated of it).
    fn map_index(
        file: &dyn File,
        path: &Path,
        index_bytes: usize,
        entry_size: usize,
        keep: bool,
    ) -> Result<(Arc<Mapping>, crate::io::MapWriter, usize), IoError> {
        let len = file.len().ctx("stat", path)? as usize;
        let stored = if keep { len } else { 0 };
        // A rebuilt index is written over the old file from the start rather than truncated and
        // allocated again: that would drop and re-fault its page cache on every unclean open.
        // Entries past the published count are never read, and the file is trimmed at seal.
        let published = stored - stored % entry_size;
        let capacity = (index_bytes - index_bytes % entry_size).max(published);
        if len > capacity {
            // A rebuilt index larger than its capacity (a damaged file, possibly huge and
            // sparse) would keep its stale length until the segment is sealed.
            file.set_len(capacity as u64).ctx("truncate", path)?;
        }
        let map = Arc::new(
            file.map(capacity, MapMode::ReadWrite { published })
                .ctx("mmap", path)?,
        );
        let writer = map.writer().ok_or_else(|| no_writer(path))?;
        Ok((map, writer, len.min(capacity)))
    }
}

fn no_writer(path: &Path) -> IoError {
    IoError::new(
        "map for writing",
        path,
        std::io::Error::other("mapping is not writable"),
    )
}
