//! Opening a log directory: leftover files, the checkpoint, validation of everything after the
//! recovery point after an unclean shutdown, index rebuilds, and the cut of a damaged tail
//! (DESIGN.md §7, kafka-format.md §8.2-8.3).
//!
//! Recovery first *plans*: it reads and validates without changing anything, so a recovery
//! mode that refuses leaves the directory as it found it. Only then does it apply the plan.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use super::checkpoint::{self, Checkpoint};
use super::config::{LogConfig, RecoveryMode};
use super::error::{Damage, OpenError};
use crate::format::BatchIter;
use crate::io::{FileSystem, IoResultExt, MapMode, OpenMode};
use crate::segment::ScanStop;
use crate::segment::{
    self, names, BatchInfo, IndexSource, OpenSpec, Opened, Segment, SegmentConfig, SegmentWriter,
};

/// What opening the log found and did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RecoveryReport {
    /// Whether a checkpoint written by a clean close was found.
    pub clean_shutdown: bool,
    /// Whether the directory had an `oncelog.checkpoint` (a Kafka directory has none).
    pub checkpoint_found: bool,
    /// A checkpoint that could not be read (then ignored), and why.
    pub bad_checkpoint: Option<String>,
    /// The recovery point used: everything below it was trusted without validation.
    pub recovery_point: i64,
    /// Segments whose batches were validated one by one.
    pub segments_validated: usize,
    /// Bytes of batches validated.
    pub bytes_validated: u64,
    /// Where damaged bytes were cut off.
    pub truncations: Vec<Truncation>,
    /// Whole segments dropped because they followed a cut.
    pub segments_deleted: Vec<PathBuf>,
    /// Index files rebuilt from the log, and why.
    pub indexes_rebuilt: Vec<(PathBuf, String)>,
    /// Temporary files left by an interrupted operation and removed (or renamed into place).
    pub leftovers: Vec<PathBuf>,
}

/// One cut of a damaged tail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Truncation {
    pub path: PathBuf,
    /// Bytes kept: the cut is here.
    pub position: usize,
    /// Length of the file before the cut (including preallocated space).
    pub file_len: usize,
    pub damage: Damage,
}

/// The loaded log, ready for appends.
pub(crate) struct Loaded {
    pub sealed: Vec<Arc<Segment>>,
    pub active: SegmentWriter,
    pub log_start_offset: i64,
    pub recovery_point: i64,
    pub report: RecoveryReport,
}

pub(crate) fn segment_config(config: &LogConfig) -> SegmentConfig {
    SegmentConfig {
        segment_bytes: config.segment_bytes,
        index_bytes: config.segment_index_bytes,
        index_interval_bytes: config.index_interval_bytes,
    }
}

struct SegmentPlan {
    base: i64,
    log_size: usize,
    /// `None`: trusted, stored indexes; `Some`: validated batches to rebuild from.
    rebuild: Option<Vec<BatchInfo>>,
}

pub(crate) fn open(
    fs: &dyn FileSystem,
    dir: &Path,
    config: &LogConfig,
    now_ms: i64,
) -> Result<Loaded, OpenError> {
    let mut report = RecoveryReport::default();
    fs.create_dir_all(dir).ctx("create directory", dir)?;
    let garbage = finish_interrupted_operations(fs, dir, &mut report)?;

    let cp = match checkpoint::read(fs, dir)? {
        Ok(cp) => cp,
        Err(bad) => {
            report.bad_checkpoint = Some(bad.to_string());
            None
        }
    };
    report.checkpoint_found = cp.is_some();
    let clean = cp.is_some_and(|c| c.clean_shutdown);
    report.clean_shutdown = clean;
    let recovery_point = cp.map_or(0, |c| c.recovery_point);
    report.recovery_point = recovery_point;

    let bases = list_segments(fs, dir)?;
    let (plans, doomed) = plan(
        fs,
        dir,
        &bases,
        clean,
        recovery_point,
        config.recovery_mode,
        &mut report,
    )?;

    // From here on the directory changes. A checkpoint that says "clean" is rewritten first,
    // so a crash while applying, or while the log is in use, is recovered as unclean (Kafka
    // deletes its clean-shutdown marker at once for the same reason). One that already says
    // "unclean" stays as it is: rewriting it would cost three fsyncs and change nothing. A
    // directory without one (new, or Kafka's) gets one, recording its log start.
    for path in garbage {
        fs.remove_file(&path).ctx("remove", &path)?;
        report.leftovers.push(path);
    }
    let mut log_start_offset =
        cp.map_or(bases.first().copied().unwrap_or(0), |c| c.log_start_offset);
    if clean || cp.is_none() {
        checkpoint::write(
            fs,
            dir,
            &Checkpoint {
                clean_shutdown: false,
                recovery_point,
                log_start_offset,
            },
        )?;
    }
    for base in doomed {
        remove_segment_files(fs, dir, base, &mut report.segments_deleted)?;
    }
    remove_orphan_indexes(fs, dir, &plans, &mut report)?;

    let cfg = segment_config(config);
    let mut sealed = Vec::new();
    let mut active = None;
    let last = plans.len().saturating_sub(1);
    for (i, p) in plans.iter().enumerate() {
        let indexes = match &p.rebuild {
            Some(batches) => IndexSource::Rebuild(batches),
            None => IndexSource::Stored,
        };
        let spec = OpenSpec {
            base_offset: p.base,
            log_size: p.log_size,
            active: i == last,
            indexes,
        };
        let (opened, notes) = segment::open(fs, dir, &cfg, spec, now_ms)?;
        let rewritten = p.rebuild.is_some() || !notes.rebuilt.is_empty();
        report.indexes_rebuilt.extend(notes.rebuilt);
        match opened {
            Opened::Sealed(s) => {
                // Recovery trimmed this segment and rebuilt its indexes in the page cache. The
                // recovery point will soon cover it and it is never flushed again, so it must
                // be durable now, or a second crash could bring back its old length or lose its
                // index while it counts as trusted.
                if rewritten {
                    s.flush_all()?;
                }
                sealed.push(s)
            }
            Opened::Active(w) => active = Some(w),
        }
    }
    let log_end = active.as_ref().map(|w| w.segment().next_offset());
    let active = match active {
        // The checkpoint's log start is beyond all data (Kafka: every segment is deleted and the
        // log restarts empty at the log start).
        Some(w) if log_end.is_some_and(|end| end < log_start_offset) => {
            drop(w);
            for s in sealed
                .drain(..)
                .map(|s| s.base_offset())
                .chain(plans.last().map(|p| p.base))
            {
                remove_segment_files(fs, dir, s, &mut report.segments_deleted)?;
            }
            segment::create(fs, dir, log_start_offset, &cfg, now_ms)?
        }
        Some(w) => w,
        None => segment::create(fs, dir, log_start_offset, &cfg, now_ms)?,
    };
    let first_base = sealed
        .first()
        .map_or(active.base_offset(), |s| s.base_offset());
    log_start_offset = log_start_offset.max(first_base);
    let log_end_offset = active.segment().next_offset();
    fs.sync_dir(dir).ctx("fsync directory", dir)?;
    Ok(Loaded {
        sealed,
        active,
        log_start_offset,
        recovery_point: recovery_point.min(log_end_offset),
        report,
    })
}

/// Decides, without changing anything, what each segment is opened as and what is cut.
/// Returns the segments to open and the base offsets of those to delete.
fn plan(
    fs: &dyn FileSystem,
    dir: &Path,
    bases: &[i64],
    clean: bool,
    recovery_point: i64,
    mode: RecoveryMode,
    report: &mut RecoveryReport,
) -> Result<(Vec<SegmentPlan>, Vec<i64>), OpenError> {
    let mut plans = Vec::new();
    let mut doomed = Vec::new();
    let mut previous_last: Option<i64> = None;
    let mut cut = false;
    for (i, &base) in bases.iter().enumerate() {
        if cut {
            doomed.push(base);
            continue;
        }
        let path = names::file_path(dir, base, names::LOG_EXT);
        let file = fs.open(&path, OpenMode::Read).ctx("open", &path)?;
        let file_len = file.len().ctx("stat", &path)? as usize;
        let below_recovery_point = bases.get(i + 1).is_some_and(|&next| next <= recovery_point);
        if clean || below_recovery_point {
            let log_size = if clean {
                file_len
            } else {
                let map = file.map(file_len, MapMode::ReadOnly).ctx("mmap", &path)?;
                let index_path = names::file_path(dir, base, names::INDEX_EXT);
                let index = crate::io::read_file(fs, &index_path).unwrap_or_default();
                segment::trusted_log_size(map.published_slice(), &index, base)
            };
            plans.push(SegmentPlan {
                base,
                log_size,
                rebuild: None,
            });
            previous_last = None;
            continue;
        }
        let overlaps = previous_last.is_some_and(|last| base <= last);
        let map = file.map(file_len, MapMode::ReadOnly).ctx("mmap", &path)?;
        let mut batches = Vec::new();
        let result = segment::scan(map.published_slice(), base, previous_last, &mut |b| {
            batches.push(*b)
        });
        report.segments_validated += 1;
        report.bytes_validated += result.valid_len as u64;
        let next_expected = result.last_offset.or(previous_last).map_or(base, |l| l + 1);
        let damage = match result.stop {
            ScanStop::Torn {
                position,
                needed,
                available,
            } => Some((position, Damage::Torn { needed, available })),
            ScanStop::Invalid { position, problem } => Some((position, Damage::Invalid(problem))),
            // The data ends cleanly but short of the next segment: the tail of this segment was
            // lost while the next segment's file survived (its directory entry can reach the
            // disk before this file's data). Keeping the next segment would leave a hole in
            // the offsets, so the log is cut here like after a torn tail.
            ScanStop::End => bases
                .get(i + 1)
                .filter(|&&next| next > next_expected)
                .filter(|&&next| !is_offset_overflow_gap(fs, dir, next, next_expected))
                .map(|&next_segment_base| {
                    (
                        result.valid_len,
                        Damage::MissingOffsets {
                            next_offset: next_expected,
                            next_segment_base,
                        },
                    )
                }),
        };
        if let Some((position, damage)) = damage {
            let durable = next_expected < recovery_point;
            let refuse = match mode {
                RecoveryMode::AbsoluteConsistency => true,
                RecoveryMode::TolerateTailCorruption => durable,
                RecoveryMode::TolerateAnyCorruption => false,
            };
            if refuse {
                return Err(OpenError::Corrupt {
                    path,
                    position,
                    damage,
                    mode,
                });
            }
            if !(overlaps && result.batches == 0) {
                report.truncations.push(Truncation {
                    path,
                    position,
                    file_len,
                    damage,
                });
                cut = true;
            }
        }
        if overlaps && result.batches == 0 {
            // A segment starting at or below offsets the previous one holds is the leftover of
            // a roll that failed (its creation reached the disk, its removal did not) while the
            // previous segment took more batches. It holds no batch of the log; opened as the
            // active segment it would move the log end back onto offsets already used.
            doomed.push(base);
            continue;
        }
        previous_last = result.last_offset.or(previous_last);
        plans.push(SegmentPlan {
            base,
            log_size: result.valid_len,
            rebuild: Some(batches),
        });
    }
    Ok((plans, doomed))
}

/// Whether the segment at `next_base` starts past `next_expected` because its first batch could
/// not have been indexed relative to `next_expected` (a replicated gap wider than int32): the
/// only case in which a roll leaves offsets out between segments (`Log::roll` picks the lowest
/// base that fits). Anything else is a lost tail.
fn is_offset_overflow_gap(
    fs: &dyn FileSystem,
    dir: &Path,
    next_base: i64,
    next_expected: i64,
) -> bool {
    let path = names::file_path(dir, next_base, names::LOG_EXT);
    let Ok(file) = fs.open(&path, OpenMode::Read) else {
        return false;
    };
    let mut header = [0u8; crate::format::HEADER_SIZE];
    if !file
        .read_at(&mut header, 0)
        .is_ok_and(|n| n == header.len())
    {
        return false;
    }
    let last = crate::format::batch::be_i64(&header, 0)
        .saturating_add(crate::format::batch::be_i32(&header, 23) as i64);
    crate::segment::offset_index::relative_offset(next_expected, last).is_none()
}

/// Base offsets of the `.log` files, sorted.
fn list_segments(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<i64>, OpenError> {
    let names = fs.list(dir).ctx("list", dir)?;
    let bases: BTreeSet<i64> = names
        .iter()
        .filter_map(|n| names::parse(n))
        .filter(|p| p.ext == names::LOG_EXT && p.suffix.is_none())
        .map(|p| p.offset)
        .collect();
    Ok(bases.into_iter().collect())
}

/// Index files without a `.log` are leftovers of a deleted segment (§8.2 step 5).
fn remove_orphan_indexes(
    fs: &dyn FileSystem,
    dir: &Path,
    plans: &[SegmentPlan],
    report: &mut RecoveryReport,
) -> Result<(), OpenError> {
    let live: BTreeSet<i64> = plans.iter().map(|p| p.base).collect();
    for name in fs.list(dir).ctx("list", dir)? {
        let Some(p) = names::parse(&name) else {
            continue;
        };
        let is_index = matches!(
            p.ext,
            names::INDEX_EXT | names::TIME_INDEX_EXT | names::TXN_INDEX_EXT
        );
        if is_index && p.suffix.is_none() && !live.contains(&p.offset) {
            let path = dir.join(&name);
            fs.remove_file(&path).ctx("remove", &path)?;
            report.leftovers.push(path);
        }
    }
    Ok(())
}

fn remove_segment_files(
    fs: &dyn FileSystem,
    dir: &Path,
    base: i64,
    removed: &mut Vec<PathBuf>,
) -> Result<(), OpenError> {
    for ext in [
        names::LOG_EXT,
        names::INDEX_EXT,
        names::TIME_INDEX_EXT,
        names::TXN_INDEX_EXT,
    ] {
        let path = names::file_path(dir, base, ext);
        if fs.exists(&path).ctx("stat", &path)? {
            fs.remove_file(&path).ctx("remove", &path)?;
            if ext == names::LOG_EXT {
                removed.push(path);
            }
        }
    }
    Ok(())
}

/// Kafka's startup handling of temporary files (kafka-format.md §8.2 steps 3-4), plus
/// oncelog's own `.tmp` files (a metadata file whose rename never happened).
///
/// Interrupted swaps are completed at once, since they decide which segments exist. Files that
/// are plain garbage (`.tmp`, `.deleted`, `.cleaned`, abandoned `.swap`) are returned instead, to
/// be removed only once recovery has decided to go ahead: a refused open changes nothing.
fn finish_interrupted_operations(
    fs: &dyn FileSystem,
    dir: &Path,
    report: &mut RecoveryReport,
) -> Result<Vec<PathBuf>, OpenError> {
    let names = fs.list(dir).ctx("list", dir)?;
    let mut garbage = Vec::new();
    let mut remove = |name: &str, _: &mut RecoveryReport| -> Result<(), OpenError> {
        garbage.push(dir.join(name));
        Ok(())
    };
    let min_cleaned = names
        .iter()
        .filter_map(|n| names::parse(n))
        .filter(|p| p.suffix == Some(names::CLEANED_SUFFIX))
        .map(|p| p.offset)
        .min();
    let mut swaps = Vec::new();
    for name in &names {
        if name.ends_with(".tmp") {
            remove(name, report)?;
            continue;
        }
        let Some(p) = names::parse(name) else {
            continue;
        };
        match p.suffix {
            Some(names::DELETED_SUFFIX) | Some(names::CLEANED_SUFFIX) => remove(name, report)?,
            Some(names::SWAP_SUFFIX) if min_cleaned.is_some_and(|m| p.offset >= m) => {
                remove(name, report)?
            }
            Some(names::SWAP_SUFFIX) => swaps.push((p.offset, p.ext.to_string(), name.clone())),
            _ => {}
        }
    }
    if swaps.is_empty() {
        return Ok(garbage);
    }
    // The swapped-in segments replace every old file whose offset falls in their range.
    let mut lo = i64::MAX;
    let mut hi = i64::MIN;
    for (base, ext, name) in &swaps {
        if ext == names::LOG_EXT {
            let data = crate::io::read_file(fs, &dir.join(name))?;
            let next = BatchIter::new(&data)
                .filter_map(Result::ok)
                .last()
                .map_or(*base, |(_, b)| b.last_offset() + 1);
            lo = lo.min(*base);
            hi = hi.max(next);
        }
    }
    for name in &names {
        let Some(p) = names::parse(name) else {
            continue;
        };
        if p.suffix.is_none() && p.ext != names::SNAPSHOT_EXT && p.offset >= lo && p.offset < hi {
            // Superseded by the swapped-in segments: removed now, before segments are listed.
            let path = dir.join(name);
            fs.remove_file(&path).ctx("remove", &path)?;
            report.leftovers.push(path);
        }
    }
    for (_, _, name) in &swaps {
        let from = dir.join(name);
        let to = dir.join(name.trim_end_matches(".swap"));
        fs.rename(&from, &to).ctx("rename", &from)?;
        report.leftovers.push(from);
    }
    fs.sync_dir(dir).ctx("fsync directory", dir)?;
    Ok(garbage)
}
