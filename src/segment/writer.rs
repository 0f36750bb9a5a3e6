//! The active segment's writer: puts batches into the `.log` (copied into the map, or written
//! through the file) and keeps the indexes.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use super::offset_index::{IndexError, OffsetIndexWriter};
use super::space::SegmentSpace;
use super::time_index::TimeIndexWriter;
use super::{Segment, SegmentConfig};
use crate::io::{IoError, IoResultExt, MapWriter, OpenMode};

/// A batch written through the file is assembled here (copied and patched) first; a buffer that
/// grew past this for a large batch is given back afterwards, so an idle partition does not
/// hold a batch's worth of memory.
const SCRATCH_KEPT: usize = 256 << 10;

/// Why [`SegmentWriter::append`] wrote nothing.
#[derive(Debug, thiserror::Error)]
pub enum WriteError {
    /// The batch would break an index rule (a bug in the caller: it checked the offsets).
    #[error(transparent)]
    Index(#[from] IndexError),
    /// Writing through the file failed: nothing was published.
    #[error("pwrite: {0}")]
    Io(#[from] std::io::Error),
}

/// How many descriptors the active segments' writers of a [`crate::LogManager`] may hold to
/// write through their files ([`crate::ManagerConfig::write_descriptors`]). A managed
/// partition's writer takes one at its first append after being idle and gives it back when
/// the manager finds it idle ([`SegmentWriter::release_if_idle`]); at the bound, it copies
/// into the map instead. So idle partitions hold no descriptor, however many there are, and
/// the busy ones no more than the bound.
#[derive(Debug)]
pub struct WriteDescriptors {
    limit: usize,
    held: AtomicUsize,
}

impl WriteDescriptors {
    pub fn new(limit: usize) -> Arc<WriteDescriptors> {
        Arc::new(WriteDescriptors {
            limit,
            held: AtomicUsize::new(0),
        })
    }

    /// Descriptors held now.
    pub fn held(&self) -> usize {
        self.held.load(Ordering::Acquire)
    }

    /// One more, unless all are held.
    fn take(self: &Arc<Self>) -> Option<DescriptorPermit> {
        self.held
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| {
                (n < self.limit).then_some(n + 1)
            })
            .ok()
            .map(|_| DescriptorPermit(Arc::clone(self)))
    }
}

/// One descriptor of a [`WriteDescriptors`], given back when dropped.
#[derive(Debug)]
struct DescriptorPermit(Arc<WriteDescriptors>);

impl Drop for DescriptorPermit {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Appends to one segment. There is exactly one per active segment, owned by the log's append
/// state; readers share the [`Segment`].
#[derive(Debug)]
pub struct SegmentWriter {
    segment: Arc<Segment>,
    /// How far the files are allocated; the writer is granted no more.
    space: Arc<SegmentSpace>,
    log: MapWriter,
    index: OffsetIndexWriter,
    time: TimeIndexWriter,
    index_interval_bytes: usize,
    /// Bytes appended since the last offset-index entry (Kafka's `bytesSinceLastIndexEntry`).
    bytes_since_index_entry: usize,
    /// Largest timestamp so far and the last offset of the batch that carried it.
    max_timestamp: Option<(i64, i64)>,
    /// maxTimestamp of the first batch (time-based roll, docs/design.md, "Append" step 3),
    /// -1 if unknown.
    first_batch_timestamp: i64,
    /// Wall clock when the segment was created or opened (time-based roll fallback).
    created_ms: i64,
    /// Last offset of the last batch, if any.
    last_offset: Option<i64>,
    /// Batches go through the file (`pwrite`) instead of being copied into the map.
    write_through: bool,
    /// A managed partition's: the bound its descriptor counts against. `None` (a standalone
    /// log): the map holds the descriptor it was made with for as long as the writer lives.
    descriptors: Option<Arc<WriteDescriptors>>,
    /// The descriptor this writer writes through, while it holds one of `descriptors`.
    permit: Option<DescriptorPermit>,
    /// Appended since the last [`Self::release_if_idle`].
    busy: bool,
    /// Where a batch written through the file is patched.
    scratch: Vec<u8>,
}

impl SegmentWriter {
    pub(super) fn new(
        segment: Arc<Segment>,
        space: Arc<SegmentSpace>,
        log: MapWriter,
        index: OffsetIndexWriter,
        time: TimeIndexWriter,
        cfg: &SegmentConfig,
        created_ms: i64,
    ) -> SegmentWriter {
        let bytes_since_index_entry = log.published() - index.last_position() as usize;
        let max_timestamp = time.last().map(|t| (t.timestamp, t.offset));
        let mut writer = SegmentWriter {
            segment,
            space,
            log,
            index,
            time,
            index_interval_bytes: cfg.index_interval_bytes,
            bytes_since_index_entry,
            max_timestamp,
            first_batch_timestamp: -1,
            created_ms,
            last_offset: None,
            write_through: cfg.write_through,
            descriptors: None,
            permit: None,
            busy: false,
            scratch: Vec::new(),
        };
        writer.grant_ready();
        writer.set_descriptors(cfg.write_descriptors.clone());
        writer
    }

    /// Counts this writer's descriptor against `descriptors` (a managed partition's): the
    /// descriptor its map was made with is closed now, and one is opened when it appends.
    pub fn set_descriptors(&mut self, descriptors: Option<Arc<WriteDescriptors>>) {
        if self.write_through && descriptors.is_some() {
            self.log.release_writes();
            self.permit = None;
            self.descriptors = descriptors;
        }
    }

    /// Before a write through the file: a managed writer without a descriptor opens one, if
    /// the bound allows; without one (at the bound, or the open failed) the batch is copied
    /// into the map, which is as correct and only makes the next sync dearer.
    fn hold_descriptor(&mut self) {
        self.busy = true;
        if self.permit.is_some() {
            return;
        }
        let Some(permit) = self.descriptors.as_ref().and_then(WriteDescriptors::take) else {
            return;
        };
        let s = &self.segment;
        if let Ok(file) = s.fs.open(&s.log_path, OpenMode::ReadWrite) {
            if self.log.attach_writes(file.into_descriptor()) {
                self.permit = Some(permit);
            }
        }
    }

    /// Closes a managed writer's descriptor if it wrote nothing since the last call: the
    /// manager calls it on every partition once per flush-job interval. Whether it closed one.
    pub fn release_if_idle(&mut self) -> bool {
        if std::mem::take(&mut self.busy) || self.permit.is_none() {
            return false;
        }
        self.log.release_writes();
        self.permit = None;
        true
    }

    /// Lets the writers use what the space has allocated.
    fn grant_ready(&mut self) {
        self.log.grant(self.space.ready());
        let (index, time) = self.space.index_ready();
        self.index.grant(index);
        self.time.grant(time);
    }

    /// The segment's allocated space (the background thread grows it).
    pub fn space(&self) -> &Arc<SegmentSpace> {
        &self.space
    }

    /// Makes sure `size` more bytes can be appended: the files are grown (by the background
    /// thread, or here if it has not got that far) before the writer is granted the bytes. A
    /// full disk fails here, with nothing written. The caller has checked that they fit the
    /// segment ([`Self::fits`]).
    pub fn make_room(&mut self, size: usize) -> Result<(), IoError> {
        let end = self.log.published() + size;
        if end > self.log.limit() {
            self.space.ensure(end)?;
            self.grant_ready();
        }
        Ok(())
    }

    /// Where growth ahead of the writer should reach now, if it is due.
    pub fn growth_wanted(&self) -> Option<usize> {
        self.space.wanted_ahead(self.log.published())
    }

    /// The `.log` map (to fault pages in ahead of the writer).
    pub fn log_mapping(&self) -> &Arc<crate::io::Mapping> {
        self.log.mapping()
    }
    pub fn segment(&self) -> &Arc<Segment> {
        &self.segment
    }
    pub fn base_offset(&self) -> i64 {
        self.segment.base_offset()
    }
    /// Published bytes of the log.
    pub fn size(&self) -> usize {
        self.log.published()
    }
    pub fn capacity(&self) -> usize {
        self.log.capacity()
    }
    /// maxTimestamp of the first batch, -1 if unknown. A clean open reads no batch, so for a
    /// segment reopened with batches the first one's header is read here, when a roll
    /// decision first needs it (from the map: the page it is on, not more).
    pub fn first_batch_timestamp(&self) -> i64 {
        if self.first_batch_timestamp < 0 && self.last_offset.is_some() {
            return crate::format::RecordBatch::parse(self.log.mapping().published_slice())
                .map_or(-1, |b| b.max_timestamp());
        }
        self.first_batch_timestamp
    }
    pub fn created_ms(&self) -> i64 {
        self.created_ms
    }
    pub fn last_offset(&self) -> Option<i64> {
        self.last_offset
    }
    /// Whether an index has no room for the entry the next append may need (roll rule 3,
    /// docs/design.md, "Append" step 3).
    pub fn indexes_full(&self) -> bool {
        self.index.is_full() || self.time.is_full()
    }

    /// Forgets the index progress taken from the stored files, before the indexes are rebuilt
    /// by replaying every batch from position 0: the byte counter must restart at 0 too, or the
    /// first batch would be indexed and every later entry shifted (Kafka never indexes the
    /// first batch of a segment, docs/format.md, "Offset index").
    pub(super) fn restart_index_rebuild(&mut self) {
        self.bytes_since_index_entry = 0;
        self.max_timestamp = None;
    }

    /// Restores what a reopened segment knew of its data (from recovery or a scan of the tail).
    pub(crate) fn restore(&mut self, last_offset: Option<i64>, first_batch_timestamp: i64) {
        self.last_offset = last_offset;
        self.first_batch_timestamp = first_batch_timestamp;
    }

    /// Puts one batch at the end of the segment, lets `patch` rewrite it (offsets, leader
    /// epoch, timestamps) before anyone can see it, adds index entries, and publishes it.
    /// Returns the batch's position. The caller has made room for it ([`Self::make_room`]).
    /// On an error nothing is published (a write through the file may have left bytes above
    /// the published end, which the next append overwrites and recovery never reads as data).
    pub fn append(
        &mut self,
        batch: &[u8],
        last_offset: i64,
        max_timestamp: i64,
        patch: impl FnOnce(&mut [u8]),
    ) -> Result<u32, WriteError> {
        let position = self.log.published();
        let end = position + batch.len();
        if self.write_through {
            self.hold_descriptor();
            self.scratch.clear();
            self.scratch.extend_from_slice(batch);
            patch(&mut self.scratch);
            let written = self.log.write_through(position, &self.scratch);
            if self.scratch.capacity() > SCRATCH_KEPT {
                self.scratch = Vec::new();
            }
            written?;
        } else {
            let dst = self.log.unpublished_mut(position, end);
            dst.copy_from_slice(batch);
            patch(dst);
        }
        self.index_batch(position, batch.len(), last_offset, max_timestamp)?;
        self.log.publish(end);
        self.segment.set_size(end);
        self.segment.set_next_offset(last_offset + 1);
        self.segment.note_timestamp(max_timestamp);
        Ok(position as u32)
    }

    /// Kafka's append-path index rule (docs/format.md, "Offset index"): after more than
    /// `index.interval.bytes` since the last entry, index this batch (its last offset at its start
    /// position) and the time so far. Also used to rebuild indexes during recovery, which gives the
    /// same entries.
    pub(crate) fn index_batch(
        &mut self,
        position: usize,
        size: usize,
        last_offset: i64,
        max_timestamp: i64,
    ) -> Result<(), IndexError> {
        if self.max_timestamp.is_none_or(|(ts, _)| max_timestamp > ts) {
            self.max_timestamp = Some((max_timestamp, last_offset));
        }
        if self.last_offset.is_none() {
            self.first_batch_timestamp = max_timestamp;
        }
        if self.bytes_since_index_entry > self.index_interval_bytes {
            self.index.append(last_offset, position as u32)?;
            if let Some((ts, offset)) = self.max_timestamp {
                self.time.maybe_append(ts, offset, false)?;
            }
            self.bytes_since_index_entry = 0;
        }
        self.bytes_since_index_entry += size;
        self.last_offset = Some(last_offset);
        Ok(())
    }

    /// Whether `size` more bytes fit in the mapped capacity.
    pub fn fits(&self, size: usize) -> bool {
        self.log.published() + size <= self.log.capacity()
    }

    /// Prefaults the pages of the next `bytes` after the published end (what is allocated of
    /// them).
    pub fn prefault(&mut self, bytes: usize) {
        let start = self.log.published();
        let end = (start + bytes).min(self.log.limit());
        self.log.prefault(start, end);
    }

    /// Makes the segment inactive: appends the final time-index entry and trims all three
    /// files to their logical sizes (at roll and close, docs/design.md, "Append" step 3).
    /// Readers keep their bytes: nothing below the published ends is cut.
    pub fn seal(mut self) -> Result<Arc<Segment>, IoError> {
        self.space.close();
        if let (Some((ts, offset)), Some(_)) = (self.max_timestamp, self.last_offset) {
            // The slot was reserved by the one-early full rule, and the entry's timestamp and
            // offset are the running maxima, so this cannot fail; if it somehow does, the index
            // is rebuilt from the log on the next unclean open, so it is not worth failing a roll.
            let _ = self.time.maybe_append(ts, offset, true);
        }
        let s = &self.segment;
        for (path, len) in [
            (s.log_path.clone(), self.log.published()),
            (s.index_path(), self.index.size_bytes()),
            (s.time_index_path(), self.time.size_bytes()),
        ] {
            s.fs.open(&path, OpenMode::ReadWrite)
                .ctx("open", &path)?
                .set_len(len as u64)
                .ctx("trim", &path)?;
        }
        Ok(Arc::clone(&self.segment))
    }
}

impl Drop for SegmentWriter {
    /// A writer dropped without [`SegmentWriter::seal`] (a truncation replaces it, a close
    /// fails): its files must not grow behind whoever handles them next.
    fn drop(&mut self) {
        self.space.close();
        // The map closes the descriptor when its writer goes (before the permit is given back:
        // the fields drop after this).
    }
}
