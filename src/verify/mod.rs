//! A deep, read-only check of a partition directory (`oncelog verify`): every batch of every
//! segment (frame, CRC, records, offsets strictly increasing within and across segments and
//! below the next segment's base), every index entry against the log, every `.txnindex`
//! against the aborted transactions a replay of the log finds, the segments against the
//! checkpoint's record of them, every producer snapshot against its name, and interrupted
//! swaps. It opens files read-only, never opens anything that is not a regular file, maps
//! rather than reads whatever can be large, and never changes a byte.
//!
//! Unlike recovery it does not stop at the first damaged batch of a segment: it resynchronises
//! on the next valid batch and says how many bytes it could not check.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::format::{self, RecordBatch};
use crate::io::{self, FileKind, FileSystem, IoResultExt, MapMode, Mapping, OpenMode};
use crate::log::checkpoint::{self, Checkpoint, SegmentRecord};
use crate::producer::{snapshot, snapshot_files, SnapshotError};
use crate::segment::{
    self, digest, names, offset_index, scan, time_index, OffsetBounds, ScanStop, SealDigest,
};

mod metadata;
mod sealed;
mod txn;

pub use sealed::{check_sealed_segment, SealedSegmentBytes};

/// One thing wrong with a file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct Problem {
    /// The file at fault.
    pub file: PathBuf,
    /// Byte position in the file (for a checkpoint, the line), where it applies.
    pub position: Option<usize>,
    /// A stable snake_case name for the kind of problem.
    pub kind: &'static str,
    /// What is wrong, for a person.
    pub reason: String,
}

/// What [`verify_dir`] looked at and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct VerifyReport {
    /// Segments (`.log` files) checked.
    pub segments: usize,
    /// Batches checked.
    pub batches: u64,
    /// Bytes of those batches.
    pub bytes: u64,
    /// Offset-index entries checked against their segments.
    pub index_entries: u64,
    /// Time-index entries checked against their segments.
    pub time_index_entries: u64,
    /// Aborted-transaction entries (`.txnindex`) checked against the log.
    pub txn_index_entries: u64,
    /// Producer snapshots checked.
    pub snapshots: usize,
    /// Everything found wrong, in the order found.
    pub problems: Vec<Problem>,
    /// Preallocated space after the last batch of a segment (zeros; not a problem).
    pub preallocated_bytes: u64,
    /// Bytes of segments that could not be checked: from a damaged batch to the next valid one.
    pub unchecked_bytes: u64,
    /// Bytes after the batches of segments a truncation cut while readers held them (the
    /// checkpoint says so): not a problem; the next open trims them.
    pub dead_bytes: u64,
}

impl VerifyReport {
    /// Whether nothing was found wrong.
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }

    fn problem(
        &mut self,
        file: &Path,
        position: Option<usize>,
        kind: &'static str,
        reason: impl Into<String>,
    ) {
        self.problems.push(Problem {
            file: file.to_path_buf(),
            position,
            kind,
            reason: reason.into(),
        });
    }
}

/// A `.log` found in the directory.
struct SegmentFile {
    path: PathBuf,
    kind: FileKind,
    len: u64,
}

/// Checks every file of the partition directory `dir`.
pub fn verify_dir(fs: &dyn FileSystem, dir: &Path) -> Result<VerifyReport, io::IoError> {
    let mut report = VerifyReport::default();
    let Listing {
        segments,
        mut snapshots,
        swaps,
    } = list_dir(fs, dir, &mut report)?;
    let cp = match checkpoint::read(fs, dir)? {
        Ok(cp) => cp,
        // A damaged checkpoint vouches for nothing: every segment is checked as in a directory
        // without one.
        Err(bad) => {
            report.problem(&bad.path, bad.line, bad.kind(), bad.reason);
            None
        }
    };
    let record: BTreeMap<i64, SegmentRecord> = cp
        .as_ref()
        .and_then(|c| c.segments.as_ref())
        .map(|r| r.iter().map(|s| (s.base_offset, *s)).collect())
        .unwrap_or_default();
    let checkpoint_path = checkpoint::path(dir);
    for r in record.values() {
        if !segments.contains_key(&r.base_offset) {
            report.problem(
                &names::file_path(dir, r.base_offset, names::LOG_EXT),
                None,
                "segment_missing",
                format!(
                    "missing: the checkpoint vouches for offsets {}..{} in {} bytes",
                    r.base_offset, r.next_offset, r.size
                ),
            );
        }
    }

    for (base, path) in &swaps {
        verify_swap(fs, *base, path, &mut report)?;
    }

    snapshots.sort();
    let walk = SegmentsWalk {
        fs,
        dir,
        cp: cp.as_ref(),
        record: &record,
        segments: &segments,
    };
    let log_end = walk.verify_all(&snapshots, &mut report)?;
    if let (Some(c), Some(end)) = (&cp, log_end) {
        if end < c.recovery_point {
            report.problem(
                &checkpoint_path,
                None,
                "durable_end_missing",
                format!(
                    "the log ends at offset {end}, but the checkpoint says offsets up to {} were \
                     durable",
                    c.recovery_point
                ),
            );
        }
    }

    verify_snapshots(fs, snapshots, &mut report)?;
    metadata::verify(fs, dir, &mut report)?;
    Ok(report)
}

/// The files of a partition directory that are checked one by one.
struct Listing {
    segments: BTreeMap<i64, SegmentFile>,
    snapshots: Vec<(i64, PathBuf)>,
    swaps: Vec<(i64, PathBuf)>,
}

/// Lists the directory: its segments, snapshots and swaps, and reports the leftovers and
/// orphan indexes recovery removes.
fn list_dir(
    fs: &dyn FileSystem,
    dir: &Path,
    report: &mut VerifyReport,
) -> Result<Listing, io::IoError> {
    let mut names_in_dir = fs.list(dir).ctx("list", dir)?;
    names_in_dir.sort();
    let mut segments: BTreeMap<i64, SegmentFile> = BTreeMap::new();
    let mut snapshots = Vec::new();
    let mut swaps = Vec::new();
    for name in &names_in_dir {
        let path = dir.join(name);
        if name.ends_with(".tmp") {
            report.problem(
                &path,
                None,
                "leftover",
                "temporary file of an unfinished write (removed by recovery)",
            );
            continue;
        }
        if let Some(offset) = snapshot_files::parse_file_name(name) {
            snapshots.push((offset, path));
            continue;
        }
        match names::parse(name) {
            Some(p) if p.suffix.is_none() && p.ext == names::LOG_EXT => {
                let meta = fs.stat(&path).ctx("stat", &path)?;
                segments.insert(
                    p.offset,
                    SegmentFile {
                        path,
                        kind: meta.kind,
                        len: meta.len,
                    },
                );
            }
            Some(p) if p.suffix == Some(names::SWAP_SUFFIX) && p.ext == names::LOG_EXT => {
                swaps.push((p.offset, path))
            }
            Some(p) if p.suffix == Some(names::SWAP_SUFFIX) => {}
            Some(p) if p.suffix.is_some() => report.problem(
                &path,
                None,
                "leftover",
                format!(
                    "leftover .{} file of an interrupted operation (removed by recovery)",
                    p.suffix.unwrap_or_default()
                ),
            ),
            Some(p)
                if matches!(
                    p.ext,
                    names::INDEX_EXT | names::TIME_INDEX_EXT | names::TXN_INDEX_EXT
                ) && !names_in_dir.contains(&names::file_name(p.offset, names::LOG_EXT)) =>
            {
                report.problem(
                    &path,
                    None,
                    "orphan_index",
                    "index without a .log (removed by recovery)",
                )
            }
            _ => {}
        }
    }
    Ok(Listing {
        segments,
        snapshots,
        swaps,
    })
}

/// The segments of a directory, checked in order against the checkpoint's record.
struct SegmentsWalk<'a> {
    fs: &'a dyn FileSystem,
    dir: &'a Path,
    cp: Option<&'a Checkpoint>,
    record: &'a BTreeMap<i64, SegmentRecord>,
    segments: &'a BTreeMap<i64, SegmentFile>,
}

impl SegmentsWalk<'_> {
    /// Checks every segment; returns where the log ends (`None` without a segment).
    fn verify_all(
        &self,
        snapshots: &[(i64, PathBuf)],
        report: &mut VerifyReport,
    ) -> Result<Option<i64>, io::IoError> {
        let bases: Vec<i64> = self.segments.keys().copied().collect();
        let mut txn = txn::TxnCheck::new(self.fs, snapshots, bases.first().copied())?;
        let mut previous_last: Option<i64> = None;
        let mut log_end = None;
        for (i, &base) in bases.iter().enumerate() {
            let next_base = bases.get(i + 1).copied();
            let Some(last) = self.verify_one(base, next_base, previous_last, &mut txn, report)?
            else {
                continue;
            };
            log_end = Some(last.map_or(base, |l| l + 1));
            previous_last = last;
        }
        Ok(log_end)
    }

    /// Checks the segment at `base` against its record; returns the last offset of the log
    /// after it, `None` if it is not a regular file (not opened).
    fn verify_one(
        &self,
        base: i64,
        next_base: Option<i64>,
        previous_last: Option<i64>,
        txn: &mut txn::TxnCheck,
        report: &mut VerifyReport,
    ) -> Result<Option<Option<i64>>, io::IoError> {
        let (record, cp) = (self.record, self.cp);
        let record_end = record.values().last().map(|r| r.next_offset);
        let clean = cp.is_some_and(|c| c.clean_shutdown);
        let f = &self.segments[&base];
        report.segments += 1;
        let rec = record.get(&base);
        if rec.is_none() && record_end.is_some_and(|end| base < end || clean) {
            report.problem(
                &f.path,
                None,
                "unrecorded_segment",
                format!(
                    "not in the checkpoint's record of the log, which covers offsets up to {}",
                    record_end.unwrap_or(base)
                ),
            );
        }
        if f.kind != FileKind::File {
            report.problem(
                &f.path,
                None,
                "not_a_file",
                format!("a {}, not a regular file (not opened)", f.kind.name()),
            );
            return Ok(None);
        }
        let f = &without_dead_tail(f, rec, report);
        let bounds = OffsetBounds {
            segment_base: base,
            next_segment_base: next_base,
            dense_from: cp.and_then(|c| c.dense_from),
        };
        // A segment rolled, or closed by a clean close, holds its final time-index entry.
        let sealed = bounds.next_segment_base.is_some() || clean;
        let recorded = rec.and_then(|r| r.digest.map(|d| (r.size, d)));
        let last = verify_segment(
            self.fs,
            self.dir,
            f,
            bounds,
            previous_last,
            sealed,
            recorded,
            txn,
            report,
        )?;
        let next = last.or(previous_last).map_or(base, |l| l + 1);
        if let Some(r) = rec.filter(|r| r.size == f.len && r.next_offset != next) {
            // (`f.len` is the length without a dead tail here.)
            report.problem(
                &f.path,
                None,
                "end_disagrees",
                format!(
                    "batches end at offset {next}, but the checkpoint vouches for {}",
                    r.next_offset
                ),
            );
        }
        Ok(Some(last.or(previous_last)))
    }
}

/// A segment file held to its record's length: a length other than the recorded one is
/// reported, and what follows the recorded batches is left out of the check.
fn without_dead_tail(
    f: &SegmentFile,
    rec: Option<&SegmentRecord>,
    report: &mut VerifyReport,
) -> SegmentFile {
    // A dead tail may be partly trimmed (a crash before the checkpoint recorded the trim):
    // any length from the batches' end to the recorded one is what a trim leaves.
    let trimmed_part_way = |r: &&SegmentRecord| r.size <= f.len && f.len < r.file_len;
    if let Some(r) = rec.filter(|r| r.file_len != f.len && !trimmed_part_way(r)) {
        report.problem(
            &f.path,
            None,
            "size_mismatch",
            format!(
                "{} bytes, but the checkpoint vouches for {}",
                f.len, r.file_len
            ),
        );
    }
    // Bytes a truncation left after the segment's batches while a reader held them: dead,
    // trimmed by the next open. Only the batches are checked.
    let dead = rec.map_or(0, |r| r.file_len.min(f.len).saturating_sub(r.size));
    report.dead_bytes += dead;
    SegmentFile {
        path: f.path.clone(),
        kind: f.kind,
        len: f.len - dead.min(f.len),
    }
}

/// Checks every producer snapshot against its name.
fn verify_snapshots(
    fs: &dyn FileSystem,
    snapshots: Vec<(i64, PathBuf)>,
    report: &mut VerifyReport,
) -> Result<(), io::IoError> {
    for (offset, path) in snapshots {
        report.snapshots += 1;
        let checked = match io::read_small_file(fs, &path, snapshot_files::MAX_FILE_BYTES)? {
            io::SmallFile::Missing => continue,
            io::SmallFile::NotAFile(kind) => Err(SnapshotError::NotAFile { kind }),
            io::SmallFile::TooLarge(len) => Err(SnapshotError::TooLarge {
                len,
                max: snapshot_files::MAX_FILE_BYTES,
            }),
            io::SmallFile::Bytes(bytes) => {
                snapshot::decode(&bytes).and_then(|s| s.check_at(offset))
            }
        };
        if let Err(e) = checked {
            report.problem(&path, None, "bad_snapshot", e.to_string());
        }
    }
    Ok(())
}

/// An interrupted swap is reported either way: recovery completes it if it is valid, and
/// refuses (or, when allowed, gives it up) if it is not.
fn verify_swap(
    fs: &dyn FileSystem,
    base: i64,
    path: &Path,
    report: &mut VerifyReport,
) -> Result<(), io::IoError> {
    let meta = fs.stat(path).ctx("stat", path)?;
    if meta.kind != FileKind::File {
        report.problem(
            path,
            None,
            "not_a_file",
            format!("a {}, not a regular file (not opened)", meta.kind.name()),
        );
        return Ok(());
    }
    let map = map_read_only(fs, path, meta.len.min(i32::MAX as u64) as usize)?;
    let bounds = OffsetBounds {
        segment_base: base,
        next_segment_base: None,
        dense_from: None,
    };
    let result = scan(map.published_slice(), bounds, None, &mut |_| {});
    match result.stop.position() {
        None => report.problem(
            path,
            None,
            "interrupted_swap",
            format!(
                "interrupted swap of offsets {base}..{}: recovery completes it over the \
                 segments it replaces",
                result.last_offset.map_or(base, |l| l + 1)
            ),
        ),
        Some(position) => report.problem(
            path,
            Some(position),
            "damaged_swap",
            format!(
                "interrupted swap with damaged bytes: {}; recovery refuses it (or gives it up \
                 under tolerate-any if the segment it replaces is still there)",
                stop_reason(&result.stop)
            ),
        ),
    }
    Ok(())
}

fn stop_reason(stop: &ScanStop) -> String {
    match stop {
        ScanStop::End => "end".into(),
        ScanStop::Torn {
            needed, available, ..
        } => format!("torn batch: {needed} bytes declared, {available} present"),
        ScanStop::Invalid { problem, .. } => problem.to_string(),
    }
}

fn map_read_only(fs: &dyn FileSystem, path: &Path, len: usize) -> Result<Mapping, io::IoError> {
    let file = fs.open(path, OpenMode::Read).ctx("open", path)?;
    file.map(len, MapMode::ReadOnly).ctx("mmap", path)
}

/// Checks one segment and its indexes (`sealed`: it was rolled or cleanly closed, so its time
/// index holds its final entry), and, when the checkpoint recorded them (`recorded`: the
/// recorded size and digest), its batch headers and `.txnindex` against what was recorded when
/// it was sealed; returns the last offset of its valid batches.
#[allow(clippy::too_many_arguments)]
fn verify_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    f: &SegmentFile,
    bounds: OffsetBounds,
    previous_last: Option<i64>,
    sealed: bool,
    recorded: Option<(u64, SealDigest)>,
    txn: &mut txn::TxnCheck,
    report: &mut VerifyReport,
) -> Result<Option<i64>, io::IoError> {
    let base = bounds.segment_base;
    let max = i32::MAX as u64;
    if f.len > max {
        report.problem(
            &f.path,
            Some(max as usize),
            "too_large",
            format!(
                "{} bytes, larger than any segment ({max}); checked up to there",
                f.len
            ),
        );
    }
    let map = map_read_only(fs, &f.path, f.len.min(max) as usize)?;
    let data = map.published_slice();
    let Scanned {
        starts,
        checked,
        found_last,
        clean,
    } = scan_resyncing(data, &f.path, bounds, previous_last, report);
    records_decode(data, &starts, &f.path, report);
    if let Some((size, d)) = recorded {
        verify_digest(
            fs, dir, base, data, &starts, clean, size, d, &f.path, report,
        )?;
    }
    let next_offset = found_last.map_or(base, |l| l + 1);
    txn.segment(fs, dir, base, data, &starts, next_offset, clean, report)?;
    // The largest timestamp, which a sealed segment's last time-index entry names; judged only
    // when every byte was checked.
    let final_timestamp = (sealed && clean).then(|| {
        starts
            .keys()
            .filter_map(|&pos| RecordBatch::parse(&data[pos..]).ok())
            .map(|b| b.max_timestamp())
            .max()
            .filter(|&ts| ts >= 0)
    });
    verify_indexes(
        fs,
        dir,
        base,
        data.len(),
        &starts,
        &checked,
        found_last,
        final_timestamp,
        report,
    )?;
    Ok(found_last)
}

/// What scanning a segment's bytes found.
struct Scanned {
    /// Batch starts of the checked regions, with their last offsets.
    starts: BTreeMap<usize, i64>,
    /// The checked regions.
    checked: Vec<(usize, usize)>,
    /// The last offset of its valid batches.
    found_last: Option<i64>,
    /// Every byte was checked: the replay of transactions is exact only then.
    clean: bool,
}

/// Scans a segment's bytes, reporting damage and going on after it from the next valid batch.
fn scan_resyncing(
    data: &[u8],
    path: &Path,
    bounds: OffsetBounds,
    previous_last: Option<i64>,
    report: &mut VerifyReport,
) -> Scanned {
    // Batch starts of the checked regions, with their last offsets; and the checked regions.
    let mut starts: BTreeMap<usize, i64> = BTreeMap::new();
    let mut checked: Vec<(usize, usize)> = Vec::new();
    let mut last = previous_last;
    let mut found_last = None;
    let mut pos = 0;
    // Whether every byte was checked: the replay of transactions is exact only then.
    let mut clean = true;
    loop {
        let result = scan(&data[pos..], bounds, last, &mut |b| {
            starts.insert(pos + b.position, b.last_offset);
        });
        report.batches += result.batches as u64;
        report.bytes += result.valid_len as u64;
        checked.push((pos, pos + result.valid_len));
        if let Some(l) = result.last_offset {
            last = Some(l);
            found_last = Some(l);
        }
        let stop_at = match &result.stop {
            ScanStop::End => {
                report.preallocated_bytes += (data.len() - pos - result.valid_len) as u64;
                break;
            }
            stop => pos + stop.position().unwrap_or(result.valid_len),
        };
        clean = false;
        let kind = match result.stop {
            ScanStop::Torn { .. } => "torn_batch",
            ScanStop::Invalid { ref problem, .. } => problem.kind(),
            ScanStop::End => "end",
        };
        report.problem(path, Some(stop_at), kind, stop_reason(&result.stop));
        // Go on from the next position where a whole, valid batch with offsets that fit
        // starts: damage in one batch does not hide the state of the rest.
        // The damaged bytes leave a gap behind them: the next valid batch is taken wherever its
        // offsets land, and the density rule applies again after it.
        let resync_bounds = OffsetBounds {
            dense_from: None,
            ..bounds
        };
        match resync(data, stop_at + 1, resync_bounds, last) {
            Some(next) => {
                // Offsets go on from the batch found there.
                last = RecordBatch::parse(&data[next..])
                    .ok()
                    .map(|b| b.base_offset() - 1)
                    .or(last);
                report.unchecked_bytes += (next - stop_at) as u64;
                report.problem(
                    path,
                    Some(stop_at),
                    "unchecked",
                    format!(
                        "{} bytes could not be checked; valid batches resume at byte {next}",
                        next - stop_at
                    ),
                );
                pos = next;
            }
            None => {
                report.unchecked_bytes += (data.len() - stop_at) as u64;
                break;
            }
        }
    }
    Scanned {
        starts,
        checked,
        found_last,
        clean,
    }
}

/// The segment's batch headers and `.txnindex` against the digest the checkpoint recorded when
/// it was sealed. The headers are compared only when every byte was checked and the batches
/// fill the recorded size (otherwise the damage is reported already).
#[allow(clippy::too_many_arguments)]
fn verify_digest(
    fs: &dyn FileSystem,
    dir: &Path,
    base: i64,
    data: &[u8],
    starts: &BTreeMap<usize, i64>,
    clean: bool,
    size: u64,
    d: SealDigest,
    path: &Path,
    report: &mut VerifyReport,
) -> Result<(), io::IoError> {
    if clean && data.len() as u64 == size {
        let found = digest::header_digest_at(data, starts.keys().copied());
        if found != d.headers {
            report.problem(
                path,
                None,
                "digest_mismatch",
                format!(
                    "batch headers (offsets, lengths, leader epochs: what no batch CRC covers) \
                     differ from those recorded when the segment was sealed (digest {found:08x}, \
                     recorded {:08x}); recovery refuses the segment, tolerate-any cuts it",
                    d.headers
                ),
            );
        }
    }
    let txn_path = names::file_path(dir, base, names::TXN_INDEX_EXT);
    let max = (data.len() / format::HEADER_SIZE + 1) * segment::txn_index::ENTRY_SIZE;
    let found = match io::read_small_file(fs, &txn_path, max as u64)? {
        io::SmallFile::Missing => Some((0, 0)),
        io::SmallFile::Bytes(bytes) => Some(digest::txn_file_digest(&bytes)),
        // Reported by the `.txnindex` check.
        io::SmallFile::NotAFile(_) | io::SmallFile::TooLarge(_) => None,
    };
    if let Some((len, crc)) = found.filter(|&f| f != (d.txn_len, d.txn_crc)) {
        report.problem(
            &txn_path,
            None,
            "txn_index_digest_mismatch",
            format!(
                "{len} bytes with CRC-32C {crc:08x}, but the checkpoint recorded {} bytes with \
                 {:08x} when the segment was sealed (recovery rebuilds it from the log)",
                d.txn_len, d.txn_crc
            ),
        );
    }
    Ok(())
}

/// The next position at or after `from` where a valid batch starts (CRC checked) whose offsets
/// follow `previous_last` and fit `bounds`. Cheap tests first, so garbage costs a few byte
/// compares per position.
fn resync(
    data: &[u8],
    from: usize,
    bounds: OffsetBounds,
    previous_last: Option<i64>,
) -> Option<usize> {
    let header = format::HEADER_SIZE;
    (from..data.len().saturating_sub(header - 1)).find(|&at| {
        let rest = &data[at..];
        if rest[16] != 2 {
            return false;
        }
        let Ok(batch) = RecordBatch::parse(rest) else {
            return false;
        };
        bounds
            .check(batch.base_offset(), batch.last_offset(), previous_last)
            .is_ok()
            && batch.size() <= rest.len()
            && format::validate_stored_batch(rest).is_ok()
    })
}

/// Every record of every valid batch decodes (the scan checked frames and CRCs only).
fn records_decode(
    data: &[u8],
    starts: &BTreeMap<usize, i64>,
    path: &Path,
    report: &mut VerifyReport,
) {
    for &pos in starts.keys() {
        let Ok(batch) = RecordBatch::parse(&data[pos..]) else {
            continue;
        };
        let problem = match batch.records_buf() {
            Ok(buf) => batch
                .iter_records(&buf)
                .find_map(|r| r.err())
                .map(|e| e.to_string()),
            Err(e) => Some(e.to_string()),
        };
        if let Some(e) = problem {
            report.problem(path, Some(pos), "invalid_records", format!("records: {e}"));
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn verify_indexes(
    fs: &dyn FileSystem,
    dir: &Path,
    base: i64,
    log_len: usize,
    starts: &BTreeMap<usize, i64>,
    checked: &[(usize, usize)],
    last_offset: Option<i64>,
    final_timestamp: Option<Option<i64>>,
    report: &mut VerifyReport,
) -> Result<(), io::IoError> {
    let index_path = names::file_path(dir, base, names::INDEX_EXT);
    if let Some(map) = map_index(fs, &index_path, offset_index::ENTRY_SIZE, log_len, report)? {
        let bytes = map.published_slice();
        check_offset_index(&index_path, bytes, base, log_len, starts, checked, report);
    }
    let time_path = names::file_path(dir, base, names::TIME_INDEX_EXT);
    if let Some(map) = map_index(fs, &time_path, time_index::ENTRY_SIZE, log_len, report)? {
        let bytes = map.published_slice();
        check_time_index(
            &time_path,
            bytes,
            base,
            last_offset,
            final_timestamp,
            report,
        );
    }
    Ok(())
}

/// Checks the whole entries of an offset index (`bytes`) against its segment: well formed
/// (offsets increasing, positions inside the `log_len`-byte log), and every entry that points
/// into the `checked` regions naming the start of the batch ending at its offset (`starts`).
fn check_offset_index(
    path: &Path,
    bytes: &[u8],
    base: i64,
    log_len: usize,
    starts: &BTreeMap<usize, i64>,
    checked: &[(usize, usize)],
    report: &mut VerifyReport,
) {
    let in_checked = |p: usize| checked.iter().any(|&(a, b)| p >= a && p < b);
    let bytes = untrimmed_tail(path, bytes, offset_index::ENTRY_SIZE, report);
    report.index_entries += (bytes.len() / offset_index::ENTRY_SIZE) as u64;
    if let Err(e) = offset_index::check(bytes, base, log_len.max(1)) {
        report.problem(path, None, "bad_index", e.to_string());
    } else if let Some((i, e)) = offset_index::decode(bytes, base)
        .enumerate()
        // Entries pointing into bytes that could not be checked are not judged.
        .filter(|(_, e)| in_checked(e.position as usize))
        .find(|(_, e)| starts.get(&(e.position as usize)) != Some(&e.offset))
    {
        report.problem(
            path,
            Some(i * offset_index::ENTRY_SIZE),
            "bad_index",
            format!(
                "entry ({}, {}) does not point at the start of the batch ending at that \
                 offset (recovery rebuilds this index)",
                e.offset, e.position
            ),
        );
    }
}

/// Checks the whole entries of a time index (`bytes`): well formed for a segment whose last
/// offset is `last_offset`, and, for a sealed segment whose every byte was checked
/// (`final_timestamp`: its largest batch timestamp), ending with that timestamp.
fn check_time_index(
    path: &Path,
    bytes: &[u8],
    base: i64,
    last_offset: Option<i64>,
    final_timestamp: Option<Option<i64>>,
    report: &mut VerifyReport,
) {
    let bytes = untrimmed_tail(path, bytes, time_index::ENTRY_SIZE, report);
    report.time_index_entries += (bytes.len() / time_index::ENTRY_SIZE) as u64;
    let last_entry = time_index::decode(bytes, base).last().map(|e| e.timestamp);
    if let Err(e) = time_index::check(bytes, base, last_offset.unwrap_or(base)) {
        report.problem(path, None, "bad_index", e.to_string());
    } else if let Some(Some(max)) = final_timestamp.filter(|&m| m != last_entry) {
        // Sealing appends the segment's largest timestamp (Kafka's final `maybeAppend` at
        // roll and close): a last entry that names another lost entries or was altered, and
        // time-based retention and lookups would misjudge the segment.
        report.problem(
            path,
            Some(bytes.len().saturating_sub(time_index::ENTRY_SIZE)),
            "bad_index",
            format!(
                "the last entry's timestamp is {}, but the segment's largest is {max} \
                 (`recover --deep` rebuilds this index)",
                last_entry.map_or("absent".to_string(), |t| t.to_string())
            ),
        );
    }
}

/// Maps an index for checking, or reports why it cannot be: missing (the offset index only;
/// Kafka creates a missing time index empty), not a regular file, or larger than an index of
/// a `log_len`-byte segment can be (never read: it may be huge and sparse).
fn map_index(
    fs: &dyn FileSystem,
    path: &Path,
    entry_size: usize,
    log_len: usize,
    report: &mut VerifyReport,
) -> Result<Option<Mapping>, io::IoError> {
    let meta = match fs.stat(path) {
        Ok(m) => m,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            if entry_size == offset_index::ENTRY_SIZE {
                report.problem(
                    path,
                    None,
                    "index_missing",
                    "missing (recovery rebuilds it)",
                );
            }
            return Ok(None);
        }
        Err(e) => return Err(io::IoError::new("stat", path, e)),
    };
    if meta.kind != FileKind::File {
        report.problem(
            path,
            None,
            "not_a_file",
            format!("a {}, not a regular file (not opened)", meta.kind.name()),
        );
        return Ok(None);
    }
    // Room for one entry per batch, and for the preallocated size an active segment's index
    // has until it is trimmed (Kafka's default 10 MiB).
    let max = ((log_len / format::HEADER_SIZE + 1) * entry_size).max(10 << 20) as u64;
    if meta.len > max {
        report.problem(
            path,
            None,
            "too_large",
            format!(
                "{} bytes, more than an index of a {log_len}-byte segment can be (not read; \
                 recovery rebuilds it)",
                meta.len
            ),
        );
        return Ok(None);
    }
    let partial = meta.len as usize % entry_size;
    if partial != 0 {
        // Kafka's sanity check refuses such a file; the entries before the cut are checked.
        report.problem(
            path,
            Some(meta.len as usize - partial),
            "bad_index",
            format!(
                "{} bytes: not a whole number of {entry_size}-byte entries, the last cut short \
                 (`recover --deep` rebuilds this index)",
                meta.len
            ),
        );
    }
    let len = meta.len as usize - partial;
    map_read_only(fs, path, len).map(Some)
}

/// The entries before the all-zero ones at the end of an index (a preallocated file that was
/// never trimmed: the log was not closed cleanly), reported once. A real entry is never all
/// zeros: the first batch of a segment is never indexed, so every position is above 0.
fn untrimmed_tail<'a>(
    path: &Path,
    bytes: &'a [u8],
    entry: usize,
    report: &mut VerifyReport,
) -> &'a [u8] {
    let whole = bytes.len() - bytes.len() % entry;
    let mut end = whole;
    while end >= entry && bytes[end - entry..end].iter().all(|&b| b == 0) {
        end -= entry;
    }
    if end < whole {
        report.problem(
            path,
            Some(end),
            "untrimmed_index",
            format!(
                "{} preallocated zero entries after the last entry: not trimmed by a clean close \
                 (recovery rebuilds this index)",
                (whole - end) / entry
            ),
        );
    }
    &bytes[..end]
}
