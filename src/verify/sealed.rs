//! The checks of one sealed segment's bytes, as [`super::verify_dir`] makes them of a
//! segment's files, for bytes already in hand: what tiered storage runs on the bytes it is
//! about to upload, so the bytes checked are the bytes that leave (docs/design.md, "Tiered
//! storage": never upload damage).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::{check_offset_index, check_time_index, records_decode, scan_resyncing, VerifyReport};
use crate::format::RecordBatch;
use crate::segment::{digest, names, OffsetBounds};

/// One sealed segment's bytes: its batches and its two indexes, with what names them.
#[derive(Debug, Clone, Copy)]
pub struct SealedSegmentBytes<'a> {
    /// The segment's partition directory (problems name its files there).
    pub dir: &'a Path,
    /// Its base offset.
    pub base_offset: i64,
    /// The base offset of the segment after it: every offset of this one is below it.
    pub end_offset: i64,
    /// The `.log` bytes: its batches, and nothing after them.
    pub log: &'a [u8],
    /// The `.index` file's bytes.
    pub offset_index: &'a [u8],
    /// The `.timeindex` file's bytes.
    pub time_index: &'a [u8],
    /// The header digest recorded when the segment was sealed (the bytes no batch CRC
    /// covers), if the log knows it.
    pub header_digest: Option<u32>,
}

/// Checks a sealed segment's bytes: every batch framed, its CRC and records checked, offsets
/// strictly increasing inside `[base_offset, end_offset)`, no byte after the last batch, the
/// header digest as recorded, every offset-index entry at the start of the batch ending at its
/// offset, and the time index well formed and ending with the segment's largest timestamp.
/// Everything found is in the report's problems, with the file and byte position.
pub fn check_sealed_segment(s: &SealedSegmentBytes<'_>) -> VerifyReport {
    let mut report = VerifyReport {
        segments: 1,
        ..VerifyReport::default()
    };
    let path = |ext| -> PathBuf { names::file_path(s.dir, s.base_offset, ext) };
    let log_path = path(names::LOG_EXT);
    let bounds = OffsetBounds {
        segment_base: s.base_offset,
        next_segment_base: Some(s.end_offset),
        dense_from: None,
    };
    let scanned = scan_resyncing(s.log, &log_path, bounds, None, &mut report);
    // A sealed segment was trimmed to its batches: what follows them is not preallocation.
    if report.preallocated_bytes > 0 {
        let at = s.log.len() - report.preallocated_bytes as usize;
        report.problem(
            &log_path,
            Some(at),
            "bytes_after_batches",
            format!(
                "{} bytes after the last batch of a sealed segment",
                report.preallocated_bytes
            ),
        );
    }
    records_decode(s.log, &scanned.starts, &log_path, &mut report);
    if let Some(recorded) = s.header_digest.filter(|_| scanned.clean) {
        let found = digest::header_digest_at(s.log, scanned.starts.keys().copied());
        if found != recorded {
            report.problem(
                &log_path,
                None,
                "digest_mismatch",
                format!(
                    "batch headers (offsets, lengths, leader epochs: what no batch CRC covers) \
                     differ from those recorded when the segment was sealed (digest \
                     {found:08x}, recorded {recorded:08x})"
                ),
            );
        }
    }
    let final_timestamp = scanned
        .clean
        .then(|| largest_timestamp(s.log, &scanned.starts));
    check_offset_index(
        &path(names::INDEX_EXT),
        s.offset_index,
        s.base_offset,
        s.log.len(),
        &scanned.starts,
        &scanned.checked,
        &mut report,
    );
    check_time_index(
        &path(names::TIME_INDEX_EXT),
        s.time_index,
        s.base_offset,
        scanned.found_last,
        final_timestamp,
        &mut report,
    );
    report
}

/// The largest batch timestamp of the batches at `starts`, `None` when none is set.
fn largest_timestamp(log: &[u8], starts: &BTreeMap<usize, i64>) -> Option<i64> {
    starts
        .keys()
        .filter_map(|&pos| RecordBatch::parse(&log[pos..]).ok())
        .map(|b| b.max_timestamp())
        .max()
        .filter(|&ts| ts >= 0)
}
