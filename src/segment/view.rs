//! A segment's maps: what reading it needs. The active segment's are its writer's and live as
//! long as it does; a sealed segment is mapped when it is first read and unmapped again when
//! the log keeps too many mapped (docs/design.md, "Sealed segments"). No file descriptor is
//! kept either way: a map outlives the descriptor it was made from, so a segment's files are
//! opened only for as long as an allocation, a trim, a sync or a mapping takes.

use std::path::Path;
use std::sync::Arc;

use super::names;
use super::offset_index::{self, OffsetIndex};
use super::time_index::{self, TimeIndex};
use crate::format::BatchIter;
use crate::io::{File, FileSystem, IoError, IoResultExt, MapMode, Mapping, OpenMode};

/// The maps of one segment: its `.log` (published bytes only are readable) and its indexes.
#[derive(Debug)]
pub struct SegmentView {
    pub(super) log: Arc<Mapping>,
    pub(super) offset_index: OffsetIndex,
    pub(super) time_index: TimeIndex,
}

impl SegmentView {
    /// The published log bytes.
    pub fn data(&self) -> &[u8] {
        self.log.published_slice()
    }
    pub fn log(&self) -> &Arc<Mapping> {
        &self.log
    }
    pub fn offset_index(&self) -> &OffsetIndex {
        &self.offset_index
    }
    pub fn time_index(&self) -> &TimeIndex {
        &self.time_index
    }
}

/// Maps a sealed segment read-only: the first `size` bytes of its `.log` and the whole entries
/// of its indexes, whose offsets end before `next_offset`. Its files are closed again before
/// this returns.
///
/// The indexes are checked here, the first time they are needed, rather than when the log is
/// opened (after a clean close recovery reads none of a sealed segment's bytes): one that
/// fails its check is not used (an empty one stands in, so lookups start at the segment's first
/// batch and scan), which costs longer scans and never a wrong answer. `oncelog verify` names
/// it; the next unclean open rebuilds it.
pub(super) fn map_sealed(
    fs: &dyn FileSystem,
    log_path: &Path,
    base: i64,
    size: usize,
    next_offset: i64,
) -> Result<SegmentView, IoError> {
    let log = fs.open(log_path, OpenMode::Read).ctx("open", log_path)?;
    let log = Arc::new(log.map(size, MapMode::ReadOnly).ctx("mmap", log_path)?);
    let index_path = log_path.with_extension(names::INDEX_EXT);
    let mut index = map_index(fs, &index_path, offset_index::ENTRY_SIZE)?;
    if offset_index::check(index.published_slice(), base, size.max(1)).is_err() {
        index = Arc::new(Mapping::empty());
    }
    let time_path = log_path.with_extension(names::TIME_INDEX_EXT);
    let mut time = map_index(fs, &time_path, time_index::ENTRY_SIZE)?;
    let last_offset = (next_offset - 1).max(base);
    if time_index::check(time.published_slice(), base, last_offset).is_err() {
        time = Arc::new(Mapping::empty());
    }
    Ok(SegmentView {
        log,
        offset_index: OffsetIndex::new(base, index),
        time_index: TimeIndex::new(base, time),
    })
}

impl SegmentView {
    /// The largest batch timestamp of a sealed segment: its time index's last entry (written
    /// at seal), or, without a usable time index, the largest of its batches' headers.
    pub(super) fn max_timestamp(&self) -> i64 {
        if let Some(last) = self.time_index.last() {
            return last.timestamp;
        }
        BatchIter::new(self.data())
            .map_while(Result::ok)
            .map(|(_, b)| b.max_timestamp())
            .max()
            .unwrap_or(-1)
    }
}

/// Maps a sealed segment's index read-only, whole entries only (a trailing partial entry is
/// never read).
pub(super) fn map_index(
    fs: &dyn FileSystem,
    path: &Path,
    entry_size: usize,
) -> Result<Arc<Mapping>, IoError> {
    let file = fs.open(path, OpenMode::Read).ctx("open", path)?;
    map_index_file(file.as_ref(), path, entry_size)
}

pub(super) fn map_index_file(
    file: &dyn File,
    path: &Path,
    entry_size: usize,
) -> Result<Arc<Mapping>, IoError> {
    let len = file.len().ctx("stat", path)? as usize;
    let len = len - len % entry_size;
    Ok(Arc::new(file.map(len, MapMode::ReadOnly).ctx("mmap", path)?))
}
