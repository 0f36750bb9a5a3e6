//! One segment: the memory-mapped `N.log` and its sparse `N.index` and `N.timeindex`
//! (docs/format.md; docs/design.md, "Memory maps without hazards").
//!
//! A [`Segment`] is the read side, shared by readers and the log; a [`SegmentWriter`] is the
//! one writer of the active segment. Files are preallocated with a real allocation before they
//! are mapped, and trimmed to their logical size when the segment is sealed.

#[doc(hidden)]
pub mod fuzz;
pub mod names;
pub mod offset_index;
pub mod scan;
mod search;
pub mod time_index;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use bytes::Bytes;

use crate::format::{self, BatchError, BatchErrorAt, BatchFrame, BatchIter};
use crate::io::{File, FileSystem, IoError, IoResultExt, MapMode, Mapping, OpenMode};

pub use offset_index::{IndexError, IndexProblem, OffsetIndex, OffsetPosition};
pub use scan::{scan, BatchInfo, BatchProblem, ScanResult, ScanStop};
pub use time_index::{TimeIndex, TimestampOffset};
pub use writer::SegmentWriter;

/// The sizes a segment is created with.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentConfig {
    /// Preallocated size of the `.log` (Kafka's `segment.bytes`).
    pub segment_bytes: usize,
    /// Preallocated size of each index (Kafka's `segment.index.bytes`), rounded down to whole
    /// entries.
    pub index_bytes: usize,
    /// Bytes between offset-index entries (Kafka's `index.interval.bytes`).
    pub index_interval_bytes: usize,
}

/// The read side of a segment.
#[derive(Debug)]
pub struct Segment {
    base_offset: i64,
    log_path: PathBuf,
    log_file: Box<dyn File>,
    index_file: Box<dyn File>,
    time_file: Box<dyn File>,
    log: Arc<Mapping>,
    offset_index: OffsetIndex,
    time_index: TimeIndex,
    /// Last offset + 1 of the published batches (the base offset while empty).
    next_offset: AtomicI64,
    /// Largest batch maxTimestamp published, -1 while empty.
    max_timestamp: AtomicI64,
}

/// A read that met bytes that are not a batch (only possible in a segment that was trusted on
/// open, such as a damaged segment below the recovery point).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{} at byte {position}: {error}", path.display())]
pub struct CorruptSegment {
    pub path: PathBuf,
    pub position: usize,
    pub error: BatchError,
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
            error: e.error,
        }
    }
}

impl Segment {
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// Published bytes of the log.
    pub fn size(&self) -> usize {
        self.log.published()
    }
    pub fn is_empty(&self) -> bool {
        self.size() == 0
    }
    /// Last offset + 1 (the base offset while empty).
    pub fn next_offset(&self) -> i64 {
        self.next_offset.load(Ordering::Acquire)
    }
    /// Largest batch maxTimestamp, or -1 while empty.
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp.load(Ordering::Acquire)
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
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
    /// The published log bytes.
    pub fn data(&self) -> &[u8] {
        self.log.published_slice()
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
    pub fn read(
        &self,
        target: i64,
        max_bytes: usize,
        below: i64,
    ) -> Result<Option<(Bytes, i64)>, CorruptSegment> {
        let data = self.data();
        let start = self.offset_index.lookup(target).position as usize;
        if start >= data.len() {
            return Ok(None);
        }
        let mut first: Option<usize> = None;
        let mut end = start;
        let mut next_offset = target;
        for item in BatchIter::new(&data[start..]) {
            let (at, batch) = item.map_err(|e| CorruptSegment::at(&self.log_path, start, e))?;
            let at = start + at;
            if batch.base_offset() >= below {
                break;
            }
            match first {
                None if batch.last_offset() < target => continue,
                None => first = Some(at),
                Some(f) if at + batch.size() - f > max_bytes => break,
                Some(_) => {}
            }
            end = at + batch.size();
            next_offset = batch.last_offset() + 1;
        }
        Ok(first
            .and_then(|f| self.log.bytes(f, end))
            .map(|bytes| (bytes, next_offset)))
    }

    /// The position of the first batch whose maxTimestamp is ≥ `timestamp`, searching from the
    /// time and offset indexes (docs/format.md, "Time index" lookup).
    pub fn find_timestamp(&self, timestamp: i64) -> Result<Option<usize>, CorruptSegment> {
        let from = self.time_index.lookup(timestamp).offset;
        let start = self.offset_index.lookup(from).position as usize;
        let data = self.data();
        for item in BatchIter::new(data.get(start..).unwrap_or(&[])) {
            let (at, batch) = item.map_err(|e| CorruptSegment::at(&self.log_path, start, e))?;
            if batch.max_timestamp() >= timestamp {
                return Ok(Some(start + at));
            }
        }
        Ok(None)
    }

    /// Makes `[from, to)` of the log durable: msync of the range, then fdatasync.
    pub fn flush_log(&self, from: usize, to: usize) -> Result<(), IoError> {
        let to = to.min(self.log.len());
        if to > from {
            self.log
                .flush(from, to - from)
                .ctx("msync", &self.log_path)?;
        }
        self.log_file.sync_data().ctx("fdatasync", &self.log_path)
    }

    /// Makes the whole segment durable: log and both indexes (for a sealed segment, before the
    /// recovery point moves past it).
    pub fn flush_all(&self) -> Result<(), IoError> {
        self.flush_log(0, self.size())?;
        let idx = self.offset_index.mapping();
        idx.flush(0, idx.published())
            .ctx("msync", &self.index_path())?;
        self.index_file
            .sync_data()
            .ctx("fdatasync", &self.index_path())?;
        let time = self.time_index.mapping();
        time.flush(0, time.published())
            .ctx("msync", &self.time_index_path())?;
        self.time_file
            .sync_data()
            .ctx("fdatasync", &self.time_index_path())
    }
}

/// How a segment's indexes are obtained when it is opened.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum IndexSource<'a> {
    /// Use the stored files if they pass their checks; rebuild them from the log otherwise.
    Stored,
    /// Rebuild from these batches (recovery already validated them).
    Rebuild(&'a [BatchInfo]),
}

/// What [`open`] made of a segment.
#[derive(Debug)]
pub enum Opened {
    Sealed(Arc<Segment>),
    Active(SegmentWriter),
}

/// What opening a segment did beyond reading it.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct OpenNotes {
    /// Index files that were rebuilt from the log, and why.
    pub rebuilt: Vec<(PathBuf, String)>,
}

/// Creates an empty active segment at `base_offset`, replacing leftover files of that name.
/// All or nothing: on failure the files it made are removed again.
pub fn create(
    fs: &dyn FileSystem,
    dir: &Path,
    base_offset: i64,
    cfg: &SegmentConfig,
    now_ms: i64,
) -> Result<SegmentWriter, OpenSegmentError> {
    let files = SegmentFiles::open(fs, dir, base_offset, OpenMode::CreateTruncate)?;
    let paths = [
        files.log_path.clone(),
        files.index_path.clone(),
        files.time_path.clone(),
    ];
    let made = (move || {
        files.index.set_len(0).ctx("truncate", &files.index_path)?;
        files.time.set_len(0).ctx("truncate", &files.time_path)?;
        files.into_writer(base_offset, cfg, 0, false, &[], now_ms)
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

/// Which segment [`open`] opens, and how.
#[derive(Debug, Clone, Copy)]
pub struct OpenSpec<'a> {
    pub base_offset: i64,
    /// Bytes of valid batches from the start of the `.log`; anything after is cut.
    pub log_size: usize,
    /// Open as the active segment (mapped writable, preallocated again) or sealed (trimmed).
    pub active: bool,
    pub indexes: IndexSource<'a>,
}

/// Opens an existing segment as `spec` says.
pub fn open(
    fs: &dyn FileSystem,
    dir: &Path,
    cfg: &SegmentConfig,
    spec: OpenSpec<'_>,
    now_ms: i64,
) -> Result<(Opened, OpenNotes), OpenSegmentError> {
    let OpenSpec {
        base_offset,
        log_size,
        active,
        indexes,
    } = spec;
    let files = SegmentFiles::open(fs, dir, base_offset, OpenMode::Create)?;
    let mut notes = OpenNotes::default();
    let log_len = files.log.len().ctx("stat", &files.log_path)? as usize;
    if log_len > log_size {
        // Bytes past the valid end (a torn tail, or preallocated zeros after a crash) are cut
        // durably before anything new is written, so stale bytes can never resurface behind
        // new batches after another crash.
        files
            .log
            .set_len(log_size as u64)
            .ctx("truncate", &files.log_path)?;
        files.log.sync_data().ctx("fdatasync", &files.log_path)?;
    }
    let log_map = Arc::new(
        files
            .log
            .map(log_size, MapMode::ReadOnly)
            .ctx("mmap", &files.log_path)?,
    );
    let batches = match indexes {
        IndexSource::Rebuild(batches) => batches.to_vec(),
        IndexSource::Stored => {
            match files.check_stored_indexes(base_offset, log_map.published_slice()) {
                Ok(()) => Vec::new(),
                Err(reason) => {
                    notes.rebuilt.push((files.index_path.clone(), reason));
                    walk(log_map.published_slice(), &files.log_path)?
                }
            }
        }
    };
    let rebuild = matches!(indexes, IndexSource::Rebuild(_)) || !notes.rebuilt.is_empty();
    if let IndexSource::Rebuild(_) = indexes {
        notes
            .rebuilt
            .push((files.index_path.clone(), "rebuilt by recovery".to_string()));
    }
    // Stored index files are only a shortcut to the tail once they passed their checks; when
    // they are rebuilt, their entries may point anywhere (a crash keeps any mix of their pages),
    // and the batch list already says what the tail is.
    let tail = if rebuild {
        tail_from_batches(&batches)
    } else {
        tail_info(log_map.published_slice(), &files, base_offset)?
    };
    drop(log_map);
    if !active && !rebuild {
        let segment = files.into_sealed(base_offset, log_size, tail)?;
        return Ok((Opened::Sealed(segment), notes));
    }
    let mut writer = files.into_writer(base_offset, cfg, log_size, !rebuild, &batches, now_ms)?;
    writer.restore(tail.last_offset, tail.first_batch_timestamp);
    if let Some(last) = tail.last_offset {
        writer.segment().set_next_offset(last + 1);
    }
    if let Some(ts) = tail.max_timestamp {
        writer.segment().note_timestamp(ts);
    }
    if active {
        Ok((Opened::Active(writer), notes))
    } else {
        Ok((Opened::Sealed(writer.seal()?), notes))
    }
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

/// The logical size of a segment trusted without validation (wholly below the recovery point).
/// Its batches are durable, but if it was rolled away from after the checkpoint was written,
/// its trim and its index may not be: the file can still be preallocated, ending in zeros. The
/// walk over batch frames (no CRC) starts at the last index entry that verifiably points at a
/// batch ending at its offset, so a trimmed segment costs a few header reads; it stops at the
/// end of the file or at a zero tail. Damage is left for the open to report.
pub fn trusted_log_size(data: &[u8], index: &[u8], base_offset: i64) -> usize {
    let hint = offset_index::decode(index, base_offset)
        .filter(|e| {
            let at = e.position as usize;
            at > 0
                && format::RecordBatch::parse(data.get(at..).unwrap_or(&[]))
                    .is_ok_and(|b| b.last_offset() == e.offset)
        })
        .last()
        .map_or(0, |e| e.position as usize);
    for start in [hint, 0] {
        let mut pos = start;
        while let Ok(BatchFrame::Complete { size }) = format::frame(&data[pos..]) {
            pos += size;
        }
        let rest = &data[pos..];
        if rest.is_empty()
            || rest[..rest.len().min(scan::ZERO_CHECK_WINDOW)]
                .iter()
                .all(|&b| b == 0)
        {
            return pos;
        }
        if start == 0 {
            break;
        }
    }
    data.len()
}

/// Batch positions of trusted log bytes, by their frames only (no CRC): enough to rebuild
/// indexes of data that was validated before.
fn walk(data: &[u8], path: &Path) -> Result<Vec<BatchInfo>, CorruptSegment> {
    let mut out = Vec::new();
    for item in BatchIter::new(data) {
        let (position, b) = item.map_err(|e| CorruptSegment::at(path, 0, e))?;
        out.push(BatchInfo {
            position,
            size: b.size(),
            base_offset: b.base_offset(),
            last_offset: b.last_offset(),
            max_timestamp: b.max_timestamp(),
        });
    }
    Ok(out)
}

/// What a reopened segment needs to know of its data.
#[derive(Debug, Clone, Copy)]
struct TailInfo {
    last_offset: Option<i64>,
    first_batch_timestamp: i64,
    max_timestamp: Option<i64>,
}

/// The tail of a segment whose batches were all listed (validated or walked).
fn tail_from_batches(batches: &[BatchInfo]) -> TailInfo {
    TailInfo {
        last_offset: batches.last().map(|b| b.last_offset),
        first_batch_timestamp: batches.first().map_or(-1, |b| b.max_timestamp),
        max_timestamp: batches.iter().map(|b| b.max_timestamp).max(),
    }
}

/// Reads the first batch's timestamp and walks from the last offset-index entry to the end for
/// the last offset: a short walk, not a scan of the whole segment.
fn tail_info(
    data: &[u8],
    files: &SegmentFiles,
    base_offset: i64,
) -> Result<TailInfo, CorruptSegment> {
    let first_batch_timestamp = match format::frame(data) {
        Ok(BatchFrame::Complete { .. }) => format::RecordBatch::parse(data)
            .map(|b| b.max_timestamp())
            .unwrap_or(-1),
        _ => -1,
    };
    let index = files.read_index_bytes();
    let start = offset_index::decode(&index, base_offset)
        .last()
        .map(|e| e.position as usize)
        .filter(|&p| p < data.len())
        .unwrap_or(0);
    let mut last_offset = None;
    let mut max_timestamp = files.read_time_index_last(base_offset).map(|t| t.timestamp);
    for item in BatchIter::new(&data[start..]) {
        let (_, b) = item.map_err(|e| CorruptSegment::at(&files.log_path, start, e))?;
        last_offset = Some(b.last_offset());
        max_timestamp =
            Some(max_timestamp.map_or(b.max_timestamp(), |m: i64| m.max(b.max_timestamp())));
    }
    Ok(TailInfo {
        last_offset,
        first_batch_timestamp,
        max_timestamp,
    })
}

/// The three open files of a segment.
struct SegmentFiles {
    log_path: PathBuf,
    index_path: PathBuf,
    time_path: PathBuf,
    log: Box<dyn File>,
    index: Box<dyn File>,
    time: Box<dyn File>,
}

impl SegmentFiles {
    fn open(
        fs: &dyn FileSystem,
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
            log_path,
            index_path,
            time_path,
            log,
            index,
            time,
        })
    }

    fn read_all(file: &dyn File) -> Vec<u8> {
        let len = file.len().unwrap_or(0) as usize;
        let mut buf = vec![0u8; len];
        let n = file.read_at(&mut buf, 0).unwrap_or(0);
        buf.truncate(n);
        buf
    }

    fn read_index_bytes(&self) -> Vec<u8> {
        Self::read_all(self.index.as_ref())
    }

    fn read_time_index_last(&self, base: i64) -> Option<TimestampOffset> {
        time_index::decode(&Self::read_all(self.time.as_ref()), base).last()
    }

    /// Checks stored index files against the log; `Err` says why they must be rebuilt.
    fn check_stored_indexes(&self, base: i64, data: &[u8]) -> Result<(), String> {
        let index = self.read_index_bytes();
        offset_index::check(&index, base, data.len()).map_err(|e| format!("offset index: {e}"))?;
        let time = Self::read_all(self.time.as_ref());
        // The last offset of the segment bounds the time index; without an entry in the
        // offset index the whole int32 range is allowed here and the walk checks the rest.
        let last = i64::MAX;
        time_index::check(&time, base, last).map_err(|e| format!("time index: {e}"))
    }

    /// Maps a sealed segment's index read-only, whole entries only (a trailing partial entry
    /// is never read).
    fn map_sealed_index(
        file: &dyn File,
        path: &Path,
        entry_size: usize,
    ) -> Result<Arc<Mapping>, IoError> {
        let len = file.len().ctx("stat", path)? as usize;
        let len = len - len % entry_size;
        Ok(Arc::new(
            file.map(len, MapMode::ReadOnly).ctx("mmap", path)?,
        ))
    }

    fn into_sealed(
        self,
        base: i64,
        log_size: usize,
        tail: TailInfo,
    ) -> Result<Arc<Segment>, IoError> {
        let log = Arc::new(
            self.log
                .map(log_size, MapMode::ReadOnly)
                .ctx("mmap", &self.log_path)?,
        );
        let index = Self::map_sealed_index(
            self.index.as_ref(),
            &self.index_path,
            offset_index::ENTRY_SIZE,
        )?;
        let time =
            Self::map_sealed_index(self.time.as_ref(), &self.time_path, time_index::ENTRY_SIZE)?;
        let segment = Segment {
            base_offset: base,
            log_path: self.log_path,
            log_file: self.log,
            index_file: self.index,
            time_file: self.time,
            log,
            offset_index: OffsetIndex::new(base, index),
            time_index: TimeIndex::new(base, time),
            next_offset: AtomicI64::new(tail.last_offset.map_or(base, |l| l + 1)),
            max_timestamp: AtomicI64::new(tail.max_timestamp.unwrap_or(-1)),
        };
        Ok(Arc::new(segment))
    }

    /// Maps the three files writable (preallocated to their full sizes) and makes a writer. With
    /// `keep_indexes` the stored index entries are kept, otherwise the indexes restart empty and
    /// are filled from `batches`.
    fn into_writer(
        self,
        base: i64,
        cfg: &SegmentConfig,
        log_size: usize,
        keep_indexes: bool,
        batches: &[BatchInfo],
        now_ms: i64,
    ) -> Result<SegmentWriter, OpenSegmentError> {
        let capacity = cfg.segment_bytes.max(log_size);
        self.log
            .allocate(capacity as u64)
            .ctx("fallocate", &self.log_path)?;
        let log = Arc::new(
            self.log
                .map(
                    capacity,
                    MapMode::ReadWrite {
                        published: log_size,
                    },
                )
                .ctx("mmap", &self.log_path)?,
        );
        let (index, index_writer) = Self::map_index(
            self.index.as_ref(),
            &self.index_path,
            cfg.index_bytes,
            offset_index::ENTRY_SIZE,
            keep_indexes,
        )?;
        let (time, time_writer) = Self::map_index(
            self.time.as_ref(),
            &self.time_path,
            cfg.index_bytes,
            time_index::ENTRY_SIZE,
            keep_indexes,
        )?;
        let log_writer = log.writer().ok_or_else(|| no_writer(&self.log_path))?;
        let segment = Arc::new(Segment {
            base_offset: base,
            log_path: self.log_path,
            log_file: self.log,
            index_file: self.index,
            time_file: self.time,
            log,
            offset_index: OffsetIndex::new(base, index),
            time_index: TimeIndex::new(base, time),
            next_offset: AtomicI64::new(base),
            max_timestamp: AtomicI64::new(-1),
        });
        let mut writer = SegmentWriter::new(
            Arc::clone(&segment),
            log_writer,
            offset_index::OffsetIndexWriter::new(base, index_writer),
            time_index::TimeIndexWriter::new(base, time_writer),
            cfg.index_interval_bytes,
            now_ms,
        );
        if !keep_indexes {
            writer.restart_index_rebuild();
        }
        for b in batches {
            writer
                .index_batch(b.position, b.size, b.last_offset, b.max_timestamp)
                .map_err(|error| OpenSegmentError::Index {
                    path: segment.index_path(),
                    error,
                })?;
        }
        Ok(writer)
    }

    fn map_index(
        file: &dyn File,
        path: &Path,
        index_bytes: usize,
        entry_size: usize,
        keep: bool,
    ) -> Result<(Arc<Mapping>, crate::io::MapWriter), IoError> {
        let stored = if keep {
            file.len().ctx("stat", path)? as usize
        } else {
            0
        };
        // A rebuilt index is written over the old file from the start rather than truncated and
        // allocated again: that would drop and re-fault its page cache on every unclean open.
        // Entries past the published count are never read, and the file is trimmed at seal.
        let published = stored - stored % entry_size;
        let capacity = (index_bytes - index_bytes % entry_size).max(published);
        file.allocate(capacity as u64).ctx("fallocate", path)?;
        let map = Arc::new(
            file.map(capacity, MapMode::ReadWrite { published })
                .ctx("mmap", path)?,
        );
        let writer = map.writer().ok_or_else(|| no_writer(path))?;
        Ok((map, writer))
    }
}

fn no_writer(path: &Path) -> IoError {
    IoError::new(
        "map for writing",
        path,
        std::io::Error::other("mapping is not writable"),
    )
}
