//! What a recovery takes away: the batches, records and bytes after each cut and in each
//! segment file it deletes, measured from the plan before anything is changed, so that an
//! operator's tool can say it (and preview it) instead of a log that silently shrank.
//!
//! The bytes removed are damaged by definition, so they are counted by their frames alone
//! (length and magic, [`crate::format::BatchIter`]), without the checksum: a batch whose CRC
//! fails but whose frame holds is still one batch, and its header's record count is what it
//! claimed to hold. Bytes that cannot be framed are counted as bytes. The zeros of preallocated
//! space after the last frame are no data and are not counted.

use std::path::{Path, PathBuf};

use super::plan::Plan;
use super::report::RecoveryReport;
use crate::format::batch::{OFF_LAST_OFFSET_DELTA, OFF_RECORDS_COUNT};
use crate::format::{frame, BatchFrame, BatchIter, HEADER_SIZE};
use crate::io::{FileKind, FileSystem, IoError, IoResultExt, MapMode, OpenMode};
use crate::log::error::Damage;

/// The data recovery removes from one segment file: after a cut at `position`, or the whole
/// file (`position` 0) when the segment is deleted.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemovedData {
    /// The `.log` (or `.log.swap`) file.
    pub path: PathBuf,
    /// Where the removed bytes start.
    pub position: usize,
    /// Batches whose frames could be read in the removed bytes (CRC not checked: they are the
    /// damaged part of the log).
    pub batches: u64,
    /// Records those batches' headers claim.
    pub records: u64,
    /// Bytes of data removed: the framed batches, and any bytes that could not be framed up
    /// to the last one that is not zero (preallocated zeros after them are not data).
    pub bytes: u64,
    /// The first and last offsets the framed batches' headers name, if any were framed.
    pub offsets: Option<(i64, i64)>,
}

/// The sum of what a recovery removes ([`RecoveryReport::removed_totals`]).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RemovedTotals {
    /// Batches removed.
    pub batches: u64,
    /// Records removed.
    pub records: u64,
    /// Bytes of data removed.
    pub bytes: u64,
}

/// What the plan's cuts and deletions remove, file by file, read before anything is changed.
/// Not counted: segments below the log start (an interrupted retention: no offset of the log
/// is lost), damaged `.log.swap` files given up for the segment they would replace (which is
/// kept), and files that are not regular files (never opened).
pub(super) fn measure(
    fs: &dyn FileSystem,
    report: &RecoveryReport,
    plan: &Plan,
) -> Result<Vec<RemovedData>, IoError> {
    let mut removed: Vec<RemovedData> = Vec::new();
    for t in &report.truncations {
        if plan.swaps.discarded.contains(&t.path) || removed.iter().any(|r| r.path == t.path) {
            continue;
        }
        if let Some(r) = measure_file(fs, &t.path, t.position)? {
            removed.push(r);
        }
    }
    for d in &plan.doomed {
        if d.base < plan.log_start_offset || removed.iter().any(|r| r.path == d.path) {
            continue;
        }
        if let Some(r) = measure_file(fs, &d.path, 0)? {
            removed.push(r);
        }
    }
    removed.retain(|r| r.bytes > 0);
    Ok(removed)
}

/// What lies in `path` from `position` on; `None` for a file that is missing or not a regular
/// file.
fn measure_file(
    fs: &dyn FileSystem,
    path: &Path,
    position: usize,
) -> Result<Option<RemovedData>, IoError> {
    let meta = match fs.stat(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(IoError::new("stat", path, e)),
    };
    if meta.kind != FileKind::File {
        return Ok(None);
    }
    let len = meta.len.min(super::plan::MAX_SEGMENT_BYTES) as usize;
    if len <= position {
        return Ok(Some(RemovedData {
            path: path.to_path_buf(),
            position,
            ..RemovedData::default()
        }));
    }
    let file = fs.open(path, OpenMode::Read).ctx("open", path)?;
    let map = file.map(len, MapMode::ReadOnly).ctx("mmap", path)?;
    let mut r = count(&map.published_slice()[position..]);
    r.path = path.to_path_buf();
    r.position = position;
    Ok(Some(r))
}

/// Counts the frames of `bytes` (the removed part of a file); pure.
pub(super) fn count(bytes: &[u8]) -> RemovedData {
    let mut r = RemovedData::default();
    let mut framed_end = 0;
    for item in BatchIter::new(bytes) {
        let Ok((position, b)) = item else { break };
        r.batches += 1;
        r.records += u64::try_from(b.records_count()).unwrap_or(0);
        framed_end = position + b.size();
        let (first, last) = (b.base_offset(), b.last_offset());
        r.offsets = Some(match r.offsets {
            None => (first, last),
            Some((lo, hi)) => (lo.min(first), hi.max(last)),
        });
    }
    let rest = &bytes[framed_end..];
    if let Ok(BatchFrame::Incomplete { .. }) = frame(rest) {
        // A torn batch whose header is whole: one batch, holding what its header claims.
        if rest.len() >= HEADER_SIZE {
            let be_i32 = |at: usize| i32::from_be_bytes([rest[at], rest[at + 1], rest[at + 2], rest[at + 3]]);
            let first = i64::from_be_bytes(rest[..8].try_into().unwrap_or([0; 8]));
            let last = first.saturating_add(i64::from(be_i32(OFF_LAST_OFFSET_DELTA)));
            r.batches += 1;
            r.records += u64::try_from(be_i32(OFF_RECORDS_COUNT)).unwrap_or(0);
            r.offsets = Some(match r.offsets {
                None => (first, last),
                Some((lo, hi)) => (lo.min(first), hi.max(last)),
            });
        }
    }
    let unframed = rest.iter().rposition(|&b| b != 0).map_or(0, |i| i + 1);
    r.bytes = (framed_end + unframed) as u64;
    r
}

impl RecoveryReport {
    /// The batches, records and bytes recovery removed (or, in a preview, would remove).
    pub fn removed_totals(&self) -> RemovedTotals {
        self.removed
            .iter()
            .fold(RemovedTotals::default(), |t, r| RemovedTotals {
                batches: t.batches + r.batches,
                records: t.records + r.records,
                bytes: t.bytes + r.bytes,
            })
    }

    /// Whether recovery removed data from the log, or found offsets that were durable gone
    /// (a recorded segment missing, the log ending below its recovery point): what an
    /// operator must be told apart from a recovery that only tidied up.
    pub fn removes_data(&self) -> bool {
        self.removed_totals().bytes > 0
            || self.truncations.iter().any(|t| {
                matches!(
                    t.damage,
                    Damage::SegmentMissing { .. } | Damage::DurableEndMissing { .. }
                )
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::format::BatchBuilder;

    fn batch(base: i64, records: usize) -> Vec<u8> {
        let mut b = BatchBuilder::new();
        for i in 0..records {
            b.append(i as i64, Some(b"k"), Some(b"value"), &[]);
        }
        let mut bytes = b.build().unwrap();
        crate::format::batch::set_base_offset(&mut bytes, base);
        bytes
    }

    #[test]
    fn counts_framed_batches_even_with_a_bad_crc_and_not_the_zeros_after() {
        let mut bytes = [batch(10, 3), batch(13, 2)].concat();
        bytes[70] ^= 0xff; // inside the first batch: its CRC fails, its frame holds
        let data_len = bytes.len();
        bytes.extend_from_slice(&[0; 500]);
        let r = count(&bytes);
        assert_eq!((r.batches, r.records, r.bytes), (2, 5, data_len as u64));
        assert_eq!(r.offsets, Some((10, 14)));
    }

    #[test]
    fn counts_bytes_that_cannot_be_framed_up_to_the_last_nonzero_one() {
        let mut bytes = batch(0, 1);
        let framed = bytes.len();
        bytes.extend_from_slice(&[0xab; 30]);
        bytes.extend_from_slice(&[0; 100]);
        let r = count(&bytes);
        assert_eq!((r.batches, r.records), (1, 1));
        assert_eq!(r.bytes, framed as u64 + 30);
        assert_eq!(count(&[0; 64]), RemovedData::default());
    }

    #[test]
    fn counts_a_torn_batch_with_a_whole_header_as_the_batch_it_claims() {
        let whole = batch(5, 4);
        let torn = &whole[..whole.len() - 10];
        let r = count(torn);
        assert_eq!((r.batches, r.records, r.bytes), (1, 4, torn.len() as u64));
        assert_eq!(r.offsets, Some((5, 8)));
    }
}
