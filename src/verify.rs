//! A deep, read-only check of a partition directory (`oncelog verify`): every batch of every
//! segment (frame, CRC, codec, offsets strictly increasing within and across segments), every
//! index entry against the log, every producer snapshot and the checkpoint. It opens files
//! read-only and never changes a byte.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::format::{self, BatchFrame};
use crate::io::{self, FileSystem, IoResultExt, MapMode, OpenMode};
use crate::log::checkpoint;
use crate::producer::snapshot;
use crate::segment::{names, offset_index, scan, time_index, ScanStop};

/// One thing wrong with a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Problem {
    pub file: PathBuf,
    /// Byte position in the file, where it applies.
    pub position: Option<usize>,
    pub reason: String,
}

/// What [`verify_dir`] looked at and found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct VerifyReport {
    pub segments: usize,
    pub batches: u64,
    pub bytes: u64,
    pub index_entries: u64,
    pub time_index_entries: u64,
    pub snapshots: usize,
    pub problems: Vec<Problem>,
    /// Preallocated space after the last batch of a segment (zeros; not a problem).
    pub preallocated_bytes: u64,
}

impl VerifyReport {
    pub fn is_clean(&self) -> bool {
        self.problems.is_empty()
    }
}

/// Checks every file of the partition directory `dir`.
pub fn verify_dir(fs: &dyn FileSystem, dir: &Path) -> Result<VerifyReport, io::IoError> {
    let mut report = VerifyReport::default();
    let mut names_in_dir = fs.list(dir).ctx("list", dir)?;
    names_in_dir.sort();
    let mut segments: BTreeMap<i64, ()> = BTreeMap::new();
    let mut snapshots = Vec::new();
    for name in &names_in_dir {
        let path = dir.join(name);
        match names::parse(name) {
            Some(p) if p.suffix.is_none() && p.ext == names::LOG_EXT => {
                segments.insert(p.offset, ());
            }
            Some(p) if p.suffix.is_none() && p.ext == names::SNAPSHOT_EXT => snapshots.push(path),
            Some(p) if p.suffix.is_some() => report.problems.push(Problem {
                file: path,
                position: None,
                reason: format!(
                    "leftover .{} file of an interrupted operation (removed by recovery)",
                    p.suffix.unwrap_or_default()
                ),
            }),
            Some(p)
                if matches!(p.ext, names::INDEX_EXT | names::TIME_INDEX_EXT)
                    && !names_in_dir.contains(&names::file_name(p.offset, names::LOG_EXT)) =>
            {
                report.problems.push(Problem {
                    file: path,
                    position: None,
                    reason: "index without a .log (removed by recovery)".into(),
                })
            }
            _ if name.ends_with(".tmp") => report.problems.push(Problem {
                file: path,
                position: None,
                reason: "temporary file of an unfinished write (removed by recovery)".into(),
            }),
            _ => {}
        }
    }
    let bases: Vec<i64> = segments.keys().copied().collect();
    let mut previous_last: Option<i64> = None;
    for (i, &base) in bases.iter().enumerate() {
        let last_in_dir = i + 1 == bases.len();
        previous_last = verify_segment(fs, dir, base, previous_last, last_in_dir, &mut report)?
            .or(previous_last);
        report.segments += 1;
    }
    for path in snapshots {
        report.snapshots += 1;
        let bytes = io::read_file(fs, &path)?;
        if let Err(e) = snapshot::decode(&bytes) {
            report.problems.push(Problem {
                file: path,
                position: None,
                reason: e.to_string(),
            });
        }
    }
    if let Err(bad) = checkpoint::read(fs, dir)? {
        report.problems.push(Problem {
            file: bad.path,
            position: None,
            reason: bad.reason,
        });
    }
    Ok(report)
}

/// Checks one segment and its indexes; returns the last offset of its valid batches.
fn verify_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    base: i64,
    previous_last: Option<i64>,
    last_in_dir: bool,
    report: &mut VerifyReport,
) -> Result<Option<i64>, io::IoError> {
    let log_path = names::file_path(dir, base, names::LOG_EXT);
    let file = fs.open(&log_path, OpenMode::Read).ctx("open", &log_path)?;
    let len = file.len().ctx("stat", &log_path)? as usize;
    let map = file.map(len, MapMode::ReadOnly).ctx("mmap", &log_path)?;
    let data = map.published_slice();
    let mut starts: BTreeMap<usize, i64> = BTreeMap::new();
    let bounds = crate::segment::OffsetBounds {
        segment_base: base,
        next_segment_base: None,
    };
    let result = scan(data, bounds, previous_last, &mut |b| {
        starts.insert(b.position, b.last_offset);
    });
    report.batches += result.batches as u64;
    report.bytes += result.valid_len as u64;
    match &result.stop {
        ScanStop::End => report.preallocated_bytes += (len - result.valid_len) as u64,
        ScanStop::Torn {
            position,
            needed,
            available,
        } => report.problems.push(Problem {
            file: log_path.clone(),
            position: Some(*position),
            reason: format!(
                "torn batch: {needed} bytes declared, {available} present{}",
                if last_in_dir {
                    " (a torn tail: recovery cuts it)"
                } else {
                    ""
                }
            ),
        }),
        ScanStop::Invalid { position, problem } => report.problems.push(Problem {
            file: log_path.clone(),
            position: Some(*position),
            reason: problem.to_string(),
        }),
    }
    // Every record of every valid batch decodes (scan checked frames and CRCs only).
    let mut pos = 0;
    while pos < result.valid_len {
        let Ok(BatchFrame::Complete { size }) = format::frame(&data[pos..]) else {
            break;
        };
        if let Ok(batch) = format::RecordBatch::parse(&data[pos..]) {
            match batch.records_buf() {
                Ok(buf) => {
                    if let Some(Err(e)) = batch.iter_records(&buf).find(|r| r.is_err()) {
                        report.problems.push(Problem {
                            file: log_path.clone(),
                            position: Some(pos),
                            reason: format!("records: {e}"),
                        });
                    }
                }
                Err(e) => report.problems.push(Problem {
                    file: log_path.clone(),
                    position: Some(pos),
                    reason: format!("records: {e}"),
                }),
            }
        }
        pos += size;
    }
    verify_indexes(
        fs,
        dir,
        base,
        data.get(..result.valid_len).unwrap_or(&[]),
        &starts,
        result.last_offset,
        report,
    )?;
    Ok(result.last_offset)
}

fn verify_indexes(
    fs: &dyn FileSystem,
    dir: &Path,
    base: i64,
    data: &[u8],
    starts: &BTreeMap<usize, i64>,
    last_offset: Option<i64>,
    report: &mut VerifyReport,
) -> Result<(), io::IoError> {
    let index_path = names::file_path(dir, base, names::INDEX_EXT);
    if fs.exists(&index_path).ctx("stat", &index_path)? {
        let bytes = io::read_file(fs, &index_path)?;
        let bytes = untrimmed_tail(&index_path, bytes, offset_index::ENTRY_SIZE, report);
        report.index_entries += (bytes.len() / offset_index::ENTRY_SIZE) as u64;
        if let Err(e) = offset_index::check(&bytes, base, data.len().max(1)) {
            report.problems.push(Problem {
                file: index_path.clone(),
                position: None,
                reason: e.to_string(),
            });
        } else {
            for (i, e) in offset_index::decode(&bytes, base).enumerate() {
                if starts.get(&(e.position as usize)) != Some(&e.offset) {
                    report.problems.push(Problem {
                        file: index_path.clone(),
                        position: Some(i * offset_index::ENTRY_SIZE),
                        reason: format!(
                            "entry ({}, {}) does not point at the start of the batch ending at that offset",
                            e.offset, e.position
                        ),
                    });
                    break;
                }
            }
        }
    } else {
        report.problems.push(Problem {
            file: index_path,
            position: None,
            reason: "missing (recovery rebuilds it)".into(),
        });
    }
    let time_path = names::file_path(dir, base, names::TIME_INDEX_EXT);
    if fs.exists(&time_path).ctx("stat", &time_path)? {
        let bytes = io::read_file(fs, &time_path)?;
        let bytes = untrimmed_tail(&time_path, bytes, time_index::ENTRY_SIZE, report);
        report.time_index_entries += (bytes.len() / time_index::ENTRY_SIZE) as u64;
        if let Err(e) = time_index::check(&bytes, base, last_offset.unwrap_or(base)) {
            report.problems.push(Problem {
                file: time_path,
                position: None,
                reason: e.to_string(),
            });
        }
    }
    Ok(())
}

/// Cuts the all-zero entries at the end of an index (a preallocated file that was never
/// trimmed: the log was not closed cleanly) and reports them once. A real entry is never all
/// zeros: the first batch of a segment is never indexed, so every position is above 0.
fn untrimmed_tail(
    path: &Path,
    mut bytes: Vec<u8>,
    entry: usize,
    report: &mut VerifyReport,
) -> Vec<u8> {
    let whole = bytes.len() - bytes.len() % entry;
    let mut end = whole;
    while end >= entry && bytes[end - entry..end].iter().all(|&b| b == 0) {
        end -= entry;
    }
    if end < whole {
        report.problems.push(Problem {
            file: path.to_path_buf(),
            position: Some(end),
            reason: format!(
                "{} preallocated zero entries after the last entry: not trimmed by a clean close \
                 (recovery rebuilds this index)",
                (whole - end) / entry
            ),
        });
        bytes.truncate(end);
    }
    bytes
}
