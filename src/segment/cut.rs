//! Cutting a segment back for a truncation (docs/design.md "Truncation"), at a cost that grows
//! with what is removed, not with the segment: the indexes lose their entries at or after the
//! new end (both are sorted by offset), the time index gets its final entry from the few batches
//! after the last kept offset-index entry, and the `.log` is cut too unless a reader still holds
//! bytes after the cut: a mapped file is never shrunk under a reader. The segment is then
//! mapped only up to the cut; the bytes after it are dead ([`Segment::file_len`]).

use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;

use super::time_index::{self, TimestampOffset};
use super::txn_index::{self, AbortedTxn};
use super::{offset_index, OpenSegmentError, Segment, SegmentFiles, TailInfo};
use crate::format::BatchIter;
use crate::io::{FileSystem, IoResultExt, MapMode, OpenMode};

/// Reopens `old` as a sealed segment holding its first `cut` bytes, whose batches all end below
/// `end`. `old`'s writer, if it was the active segment, must be gone. The index files are
/// shrunk in place and synced, so the caller holds the segments' write lock: readers look index
/// entries up only under the read lock, in segments found in the map, which `old` leaves under
/// the same lock. The `.log` is not touched.
pub fn reopen_cut(
    fs: &Arc<dyn FileSystem>,
    dir: &Path,
    old: &Segment,
    cut: usize,
    end: i64,
) -> Result<Arc<Segment>, OpenSegmentError> {
    let base = old.base_offset();
    let files = SegmentFiles::open(fs, dir, base, OpenMode::ReadWrite)?;
    let old_segment = old;
    let old = old.view()?;
    let kept_index: Vec<offset_index::OffsetPosition> = old
        .offset_index()
        .entries()
        .take_while(|e| e.offset < end && (e.position as usize) < cut)
        .collect();
    let kept_time: Vec<TimestampOffset> = old
        .time_index()
        .entries()
        .take_while(|t| t.offset < end)
        .collect();
    // The batches after the last kept offset-index entry (at most an index interval of them)
    // give the segment's last offset and its running maximum timestamp; before that point the
    // kept time-index entries hold it.
    let start = kept_index.last().map_or(0, |e| e.position as usize);
    let (last_offset, newest) = walk_after(
        &files,
        cut,
        start,
        kept_index.last().map(|e| e.offset),
        kept_time.last().copied(),
    )?;
    shrink_indexes(&files, base, kept_index.len(), &kept_time, newest)?;
    let kept_txn = cut_txn_index(fs, old_segment, end)?;
    // The `.log` shrinks only where no reader can be: to the cut when no one holds bytes of
    // the old maps (taken under the segments' write lock, so no reader can start), else to
    // the end of the old batches (readers hold only those; the preallocation after them was
    // never handed out). What stays after the cut is dead: the new segment keeps the old
    // maps' holds and is trimmed once they are gone (`Segment::trim_dead_tail`: at the next
    // rewrite, deletion job or close), or by the next open. A crash before the length is
    // synced leaves it anywhere between, which recovery accepts.
    // This cut's own view of the old segment is no reader.
    drop(old);
    let holds = old_segment.take_holds();
    let keep = if holds.is_empty() {
        cut as u64
    } else {
        old_segment.size() as u64
    };
    if files.log.len().ctx("stat", &files.log_path)? > keep {
        files.log.set_len(keep).ctx("truncate", &files.log_path)?;
        // Durable before a checkpoint records the new length.
        files.log.sync_data().ctx("fdatasync", &files.log_path)?;
    }
    let file_len = files.log.len().ctx("stat", &files.log_path)?;
    let tail = TailInfo {
        last_offset,
        first_batch_timestamp: -1,
        max_timestamp: newest.map(|n| n.timestamp),
    };
    let segment = files.into_sealed(base, cut, tail, kept_txn);
    if old_segment.is_validated() {
        segment.mark_validated();
    }
    // The header digest the truncation's checkpoint recorded of the kept bytes.
    if let Some((size, d)) = *old_segment.header_digest.lock() {
        if size == cut {
            segment.set_header_digest(cut, d);
        }
    }
    segment
        .dead_bytes
        .store(file_len.saturating_sub(cut as u64), Ordering::Release);
    segment.inherit_holds(holds);
    Ok(segment)
}

/// Walks the batches from `start` to the cut: the segment's last offset and the entry of its
/// largest timestamp (`last_offset` and `newest` are what the kept index entries say).
fn walk_after(
    files: &SegmentFiles,
    cut: usize,
    start: usize,
    mut last_offset: Option<i64>,
    mut newest: Option<TimestampOffset>,
) -> Result<(Option<i64>, Option<TimestampOffset>), OpenSegmentError> {
    let map = files
        .log
        .map(cut, MapMode::ReadOnly)
        .ctx("mmap", &files.log_path)?;
    let data = map.published_slice();
    for item in BatchIter::new(data.get(start..).unwrap_or(&[])) {
        let (_, b) = item.map_err(|e| super::CorruptSegment::at(&files.log_path, start, e))?;
        last_offset = Some(b.last_offset());
        if newest.is_none_or(|n| b.max_timestamp() > n.timestamp) {
            newest = Some(TimestampOffset {
                timestamp: b.max_timestamp(),
                offset: b.last_offset(),
            });
        }
    }
    Ok((last_offset, newest))
}

/// Shrinks the offset and time indexes in place to their kept entries, adds the time index's
/// final entry (`newest`), and syncs both.
fn shrink_indexes(
    files: &SegmentFiles,
    base: i64,
    kept_index: usize,
    kept_time: &[TimestampOffset],
    newest: Option<TimestampOffset>,
) -> Result<(), OpenSegmentError> {
    files
        .index
        .set_len((kept_index * offset_index::ENTRY_SIZE) as u64)
        .ctx("truncate", &files.index_path)?;
    let time_len = kept_time.len() * time_index::ENTRY_SIZE;
    files
        .time
        .set_len(time_len as u64)
        .ctx("truncate", &files.time_path)?;
    // The final time-index entry of a sealed segment (§4.3: forced at roll and close).
    if let Some(n) = newest.filter(|n| kept_time.last().is_none_or(|l| n.timestamp > l.timestamp)) {
        files
            .time
            .write_all_at(&time_index::encode(base, n), time_len as u64)
            .ctx("write", &files.time_path)?;
    }
    files
        .index
        .sync_data()
        .ctx("fdatasync", &files.index_path)?;
    files.time.sync_data().ctx("fdatasync", &files.time_path)?;
    Ok(())
}

/// Cuts `old`'s `.txnindex` before the aborted transactions whose markers go
/// (docs/kafka-format.md §7.3 truncateTo): at the first entry at or after `end`, in place like
/// the other indexes. Returns the kept entries.
fn cut_txn_index(
    fs: &Arc<dyn FileSystem>,
    old: &Segment,
    end: i64,
) -> Result<Vec<AbortedTxn>, OpenSegmentError> {
    let all_txn = old.txn_index().entries();
    let kept_txn: Vec<AbortedTxn> = all_txn
        .iter()
        .copied()
        .take_while(|e| e.last_offset < end)
        .collect();
    if kept_txn.len() < all_txn.len() {
        let path = old.txn_index_path();
        let txn = fs.open(path, OpenMode::ReadWrite).ctx("open", path)?;
        txn.set_len((kept_txn.len() * txn_index::ENTRY_SIZE) as u64)
            .ctx("truncate", path)?;
        txn.sync_data().ctx("fdatasync", path)?;
    }
    Ok(kept_txn)
}
