//! The segment plan: which segments the log is made of after recovery, how far each is valid,
//! which indexes are rebuilt, what is cut and what is removed. Decided by reading only, so a
//! refusal leaves the directory exactly as it was.
//!
//! What is believed, and why:
//! - A segment the checkpoint records (version 1) is held to that record: its file must exist
//!   with exactly the recorded size, and its offsets are the recorded ones, so none of its
//!   bytes is read on open (except the tail of the last recorded segment, whose end nothing
//!   else in the record vouches for, and its indexes, which are checked). Anything that disagrees with the record is damage.
//! - Every other segment is validated batch by batch: frame, CRC, records, and offsets, which
//!   no checksum covers (strictly increasing, inside the segment's int32 range, below the next
//!   segment's base).
//! - Without a checkpoint of its own (a Kafka partition), a partition opened through the log
//!   manager is vouched for by the log dir's Kafka checkpoints: after a clean shutdown
//!   (`.kafka_cleanshutdown`) every segment, otherwise every segment that ends at or below
//!   Kafka's recovery point, is trusted as Kafka trusts it (docs/kafka-format.md §8.2 step 6): its
//!   indexes are checked and kept whatever interval wrote them, and only its tail is walked,
//!   for its end offset.
//! - Damage is judged by whether it loses durable offsets: below the checkpoint's recovery
//!   point (or Kafka's), or, without either (a Kafka directory opened alone), anywhere but in
//!   the last segment.
//!   `TolerateTailCorruption` cuts only what was not durable, `TolerateAnyCorruption` cuts
//!   anything, `AbsoluteConsistency` nothing.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use super::inventory::{FileEntry, Inventory, SwapEntry};
use super::report::{RecoveryReport, Truncation};
use crate::io::{FileKind, FileSystem, IoError, IoResultExt, MapMode, Mapping, OpenMode};
use crate::log::checkpoint::{Checkpoint, SealDigest, SegmentRecord};
use crate::log::config::RecoveryMode;
use crate::log::error::Damage;
use crate::segment::{
    self, digest, names, offset_index, time_index, txn_index, AbortedTxn, BatchInfo,
    OffsetBounds, ScanStop, TailInfo,
};

/// A segment's `.log` can never reach 2 GiB: positions are int32 (docs/kafka-format.md §2.3).
pub(super) const MAX_SEGMENT_BYTES: u64 = i32::MAX as u64;

/// Why the plan refuses to open the log.
#[derive(Debug)]
pub(super) enum PlanError {
    Io(IoError),
    Refused {
        path: PathBuf,
        position: Option<usize>,
        damage: Damage,
    },
}

impl From<IoError> for PlanError {
    fn from(e: IoError) -> Self {
        PlanError::Io(e)
    }
}

/// How a kept segment's bytes came to be believed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Trust {
    /// Held to the checkpoint's record; its batches were not read.
    Recorded,
    /// Vouched for by the log dir's Kafka checkpoints; only its tail was walked.
    Vouched,
    /// Every batch validated.
    Validated,
}

/// A segment of the recovered log.
#[derive(Debug)]
pub(super) struct KeptSegment {
    pub base: i64,
    /// Where its `.log` is now (a `.log.swap` is renamed into place when the plan is applied).
    pub source: PathBuf,
    pub file_len: u64,
    /// Bytes of valid batches; the file is cut here if it is longer.
    pub log_size: usize,
    pub next_offset: i64,
    pub trust: Trust,
    /// The batches to rebuild its indexes from, or `None` to keep the stored ones.
    pub rebuild: Option<Vec<BatchInfo>>,
    pub tail: TailInfo,
    /// Part of an interrupted swap being completed.
    pub swapped: bool,
    /// Its aborted transactions.
    pub txn: KeptTxn,
    /// The header digest of its batches (docs/format.md "Checkpoint"), when known: from the
    /// checkpoint's record, or computed while its batches were validated.
    pub header_digest: Option<u32>,
    /// What the checkpoint recorded of its bytes, for a segment held to the record.
    pub recorded_digest: Option<SealDigest>,
}

/// Where a kept segment's aborted transactions come from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum KeptTxn {
    /// Its `.txnindex` passed the sanity check (empty without a file).
    Stored(Vec<AbortedTxn>),
    /// Rebuilt while the producer state is replayed: the segment's bytes were validated, or
    /// its stored index failed the check.
    Rebuild,
}

impl KeptSegment {
    /// Whether applying the plan changes its `.log` file.
    pub fn log_changes(&self) -> bool {
        self.swapped || (self.log_size as u64) < self.file_len
    }

    /// Whether its `.txnindex` is rebuilt from markers it holds (its batches were listed and
    /// one is a producer's control batch): what decides how far back replay must start.
    pub fn rebuilds_txn_entries(&self) -> bool {
        self.txn == KeptTxn::Rebuild
            && self
                .rebuild
                .as_ref()
                .is_some_and(|batches| batches.iter().any(|b| b.is_marker))
    }
}

/// A segment's files to remove, and why.
#[derive(Debug)]
pub(super) struct Doomed {
    pub base: i64,
    pub path: PathBuf,
    pub reason: String,
    /// Never recorded by any checkpoint, so it may go before the checkpoint is rewritten.
    pub unrecorded: bool,
}

/// What completing the interrupted swaps does (docs/kafka-format.md §8.2 step 4).
#[derive(Debug, Default)]
pub(super) struct SwapPlan {
    /// Old segment files the swapped-in segments replace.
    pub superseded: Vec<PathBuf>,
    /// `.swap` files renamed over their final names.
    pub renames: Vec<(PathBuf, PathBuf)>,
    /// `.swap` files given up (damaged, with the segment they would replace still there).
    pub discarded: Vec<PathBuf>,
}

#[derive(Debug)]
pub(super) struct Plan {
    pub segments: Vec<KeptSegment>,
    pub doomed: Vec<Doomed>,
    pub swaps: SwapPlan,
    pub log_start_offset: i64,
    /// The recovery point after the plan: lowered below any offset that is cut.
    pub recovery_point: i64,
    /// The high watermark after the plan: the checkpoint's, never above the log end nor below
    /// its start (the log start if there was no checkpoint).
    pub high_watermark: i64,
    /// From where the log is dense: the checkpoint's, or the log end for a directory without
    /// one (what this engine appends from now on is dense).
    pub dense_from: i64,
}

impl Plan {
    /// Where the recovered log ends.
    pub fn log_end(&self) -> i64 {
        self.segments
            .last()
            .map_or(self.log_start_offset, |s| s.next_offset)
    }

    /// The checkpoint written before the plan changes anything: clean flag cleared, and a
    /// record of only the segments the plan leaves untouched, so a crash while applying leaves
    /// a checkpoint that holds for whatever state the files are in.
    pub fn intent_checkpoint(&self) -> Checkpoint {
        let mut record = Vec::new();
        for s in self.sealed() {
            if s.trust == Trust::Validated
                || s.log_changes()
                || s.next_offset > self.recovery_point
            {
                break;
            }
            record.push(record_of(s, s.file_len));
        }
        Checkpoint {
            clean_shutdown: false,
            recovery_point: self.recovery_point,
            log_start_offset: self.log_start_offset,
            high_watermark: self.high_watermark,
            dense_from: Some(self.dense_from),
            segments: Some(record),
            start_over_at: None,
        }
    }

    /// The checkpoint once the plan is applied: every sealed segment was flushed by then
    /// (recorded ones were durable already, the others rewritten and flushed), so all of them
    /// are recorded and the recovery point covers them.
    pub fn result_checkpoint(&self) -> Checkpoint {
        let record: Vec<SegmentRecord> = self
            .sealed()
            .map(|s| record_of(s, s.log_size as u64))
            .collect();
        let sealed_end = record.last().map_or(i64::MIN, |r| r.next_offset);
        Checkpoint {
            clean_shutdown: false,
            recovery_point: self.recovery_point.max(sealed_end),
            log_start_offset: self.log_start_offset,
            high_watermark: self.high_watermark,
            dense_from: Some(self.dense_from),
            segments: Some(record),
            start_over_at: None,
        }
    }

    fn sealed(&self) -> impl Iterator<Item = &KeptSegment> {
        let n = self.segments.len().saturating_sub(1);
        self.segments[..n].iter()
    }
}

/// The record of a kept segment; its digest is the checkpoint's (the result checkpoint's are
/// taken from the opened segments, whose `.txnindex` may have been rebuilt).
fn record_of(s: &KeptSegment, file_len: u64) -> SegmentRecord {
    SegmentRecord {
        base_offset: s.base,
        next_offset: s.next_offset,
        size: s.log_size as u64,
        file_len,
        digest: s.recorded_digest,
    }
}

/// What the log dir's Kafka checkpoint files say of a partition (docs/kafka-format.md §8): the
/// log manager reads them and passes on the partition's entries.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct LogDirOffsets {
    /// The log dir had `.kafka_cleanshutdown`: Kafka trusts every segment.
    pub clean_shutdown: bool,
    /// The partition's `recovery-point-offset-checkpoint` entry.
    pub recovery_point: Option<i64>,
    /// Its `log-start-offset-checkpoint` entry (written only when above the first segment).
    pub log_start_offset: Option<i64>,
    /// Its `replication-offset-checkpoint` entry: the high watermark.
    pub high_watermark: Option<i64>,
    /// Its `cleaner-offset-checkpoint` entry: compaction, which leaves gaps between the
    /// segments it rewrites, has cleaned only below it; a partition without one was never
    /// compacted.
    pub cleaner_offset: Option<i64>,
}

impl LogDirOffsets {
    /// Whether these offsets are newer than the partition's own clean checkpoint: someone
    /// (Kafka) appended or deleted records after the log was last closed cleanly, when the
    /// manager wrote the same recovery point and log start into both. Only a clean checkpoint
    /// can be judged so: after a crash the log dir's recovery point may be ahead of the
    /// partition's checkpoint, which is rewritten only when a segment is sealed.
    pub fn supersede(&self, own: &Checkpoint) -> bool {
        own.clean_shutdown
            && (self.recovery_point.is_some_and(|rp| rp > own.recovery_point)
                || self
                    .log_start_offset
                    .is_some_and(|start| start > own.log_start_offset))
    }
}

/// How far ahead of a validating scan a second thread reads a segment in.
const READ_AHEAD_CHUNK: usize = 4 << 20;

/// Runs `scan` over `map` while a second thread faults the map's pages in ahead of it, a
/// chunk at a time (`MADV_POPULATE_READ`): from a cold page cache the scan would otherwise
/// wait for each readahead window in turn, the disk idle while it checks CRCs and the CPU idle
/// while it reads. The reader stops once the scan is done (at most a chunk past where it
/// stopped: a torn tail or the zeros after the batches). Populating is a hint: a file system
/// without it (the simulator) makes this a plain scan.
fn read_ahead<T>(map: &Mapping, scan: impl FnOnce() -> T) -> T {
    use std::sync::atomic::{AtomicBool, Ordering};
    if map.len() <= READ_AHEAD_CHUNK {
        return scan();
    }
    let done = AtomicBool::new(false);
    std::thread::scope(|s| {
        let reader = std::thread::Builder::new()
            .name("oncelog-read-ahead".into())
            .spawn_scoped(s, || {
                let mut at = 0;
                while at < map.len() && !done.load(Ordering::Acquire) {
                    map.populate(at, READ_AHEAD_CHUNK, false);
                    at += READ_AHEAD_CHUNK;
                }
            });
        let result = scan();
        done.store(true, Ordering::Release);
        // A reader that could not be spawned only means a plain scan.
        if let Ok(reader) = reader {
            let _ = reader.join();
        }
        result
    })
}

/// The segment plan's inputs.
pub(super) struct Planner<'a> {
    pub fs: &'a dyn FileSystem,
    pub dir: &'a Path,
    pub mode: RecoveryMode,
    pub checkpoint: Option<&'a Checkpoint>,
    /// The log dir's offsets, used when there is no checkpoint.
    pub log_dir: Option<LogDirOffsets>,
    /// Validate every segment, recorded ones included.
    pub deep: bool,
}

/// A `.log` (or `.log.swap`) the plan considers, by base offset.
struct Candidate {
    file: FileEntry,
    swapped: bool,
}

/// What the plan walks, by base offset, and the offsets it judges each segment by.
struct Layout {
    candidates: BTreeMap<i64, Candidate>,
    /// The record, without what an interrupted swap replaces.
    record: BTreeMap<i64, SegmentRecord>,
    /// Every base a file or the record names, in order.
    bases: BTreeSet<i64>,
    rp: i64,
    log_start: i64,
    /// The checkpoint says the log was closed cleanly.
    clean: bool,
    /// Where the record ends: every offset below it is in a recorded segment.
    record_end: Option<i64>,
    last_file_base: Option<i64>,
}

/// What the walk over the segments has decided so far.
#[derive(Default)]
struct Walk {
    kept: Vec<KeptSegment>,
    doomed: Vec<Doomed>,
    /// Where the log was cut: every segment after it is removed.
    cut_at: Option<i64>,
}

/// What becomes of one segment.
enum Verdict {
    /// Neither a file nor a record of it: nothing to do.
    Absent,
    /// Its file is removed; the log goes on without it.
    Removed(Doomed),
    /// The log ends at `at`; the segment's file, if any, is removed.
    Cut { at: i64, removed: Option<Doomed> },
    /// Part of the log, which ends inside it at `cut_at` if that is set.
    Kept {
        segment: KeptSegment,
        cut_at: Option<i64>,
    },
}

impl Walk {
    fn apply(&mut self, verdict: Verdict) {
        match verdict {
            Verdict::Absent => {}
            Verdict::Removed(doomed) => self.doomed.push(doomed),
            Verdict::Cut { at, removed } => {
                self.doomed.extend(removed);
                self.cut_at = Some(at);
            }
            Verdict::Kept { segment, cut_at } => {
                self.kept.push(segment);
                if cut_at.is_some() {
                    self.cut_at = cut_at;
                }
            }
        }
    }
}

/// The segment file a verdict is reached on, and what comes before and after it.
struct Slot<'a> {
    base: i64,
    candidate: &'a Candidate,
    rec: Option<&'a SegmentRecord>,
    next_file_base: Option<i64>,
    /// The last offset of the kept segments before it.
    previous_last: Option<i64>,
    /// The last segment kept before it.
    previous: Option<&'a KeptSegment>,
}

impl Planner<'_> {
    fn rp(&self) -> i64 {
        match (self.checkpoint, self.vouch()) {
            (Some(c), _) => c.recovery_point,
            (None, Some(v)) => v.recovery_point.unwrap_or(0),
            (None, None) => 0,
        }
    }

    /// The log dir's offsets, when they are what vouches for the log (no checkpoint of its own).
    fn vouch(&self) -> Option<&LogDirOffsets> {
        self.log_dir.as_ref().filter(|_| self.checkpoint.is_none())
    }

    /// Whether the log dir vouches for the segment at `base` whose successor starts at
    /// `next_base`: every segment after a clean shutdown, otherwise those that end at or below
    /// Kafka's recovery point (recovery starts at the segment containing it).
    fn vouches_for(&self, next_base: Option<i64>) -> bool {
        match self.vouch() {
            Some(v) if v.clean_shutdown => true,
            Some(v) => matches!((next_base, v.recovery_point), (Some(n), Some(rp)) if n <= rp),
            None => false,
        }
    }

    /// Whether a recovery point says what was durable: the checkpoint's, or Kafka's.
    fn knows_durable_end(&self) -> bool {
        self.checkpoint.is_some() || self.vouch().is_some_and(|v| v.recovery_point.is_some())
    }

    fn record(&self) -> Option<&[SegmentRecord]> {
        self.checkpoint.and_then(|c| c.segments.as_deref())
    }

    /// Whether damage may be cut: `durable` says whether it loses offsets that were durable.
    fn judge(
        &self,
        durable: bool,
        path: &Path,
        position: Option<usize>,
        damage: &Damage,
    ) -> Result<(), PlanError> {
        let refuse = match self.mode {
            RecoveryMode::AbsoluteConsistency => true,
            RecoveryMode::TolerateTailCorruption => durable,
            RecoveryMode::TolerateAnyCorruption => false,
        };
        if refuse {
            return Err(PlanError::Refused {
                path: path.to_path_buf(),
                position,
                damage: damage.clone(),
            });
        }
        Ok(())
    }

    pub fn plan(&self, inv: &Inventory, report: &mut RecoveryReport) -> Result<Plan, PlanError> {
        let mut swaps = SwapPlan::default();
        let (candidates, swap_range) = self.resolve_swaps(inv, &mut swaps, report)?;
        let layout = self.layout(candidates, swap_range);
        let mut walk = Walk::default();
        for &base in &layout.bases {
            let verdict = self.classify(&layout, &walk, base, inv, report)?;
            walk.apply(verdict);
        }
        self.finish(&layout, walk, swaps, report)
    }

    /// What the plan walks: the segment files once the swaps are completed, the record without
    /// what they replace, and the offsets both are judged by.
    fn layout(
        &self,
        candidates: BTreeMap<i64, Candidate>,
        swap_range: Option<(i64, i64)>,
    ) -> Layout {
        let first_file = candidates.keys().next().copied().unwrap_or(0);
        let log_start = match (self.checkpoint, self.vouch()) {
            (Some(c), _) => c.log_start_offset,
            // Kafka's rule: max(checkpoint, first base offset) (§8.2 step 8).
            (None, Some(v)) => v.log_start_offset.map_or(first_file, |s| s.max(first_file)),
            (None, None) => first_file,
        };
        // The record, without what an interrupted swap replaces.
        let in_swap = |base: i64| swap_range.is_some_and(|(lo, hi)| base >= lo && base < hi);
        let record: BTreeMap<i64, SegmentRecord> = self
            .record()
            .unwrap_or(&[])
            .iter()
            .filter(|r| !in_swap(r.base_offset))
            .map(|r| (r.base_offset, *r))
            .collect();
        // Every offset below this is in a recorded segment: a segment file there that the
        // record does not list is not part of the log. After a clean close the record covers
        // the whole log, so that holds above it too.
        let clean = self.checkpoint.is_some_and(|c| c.clean_shutdown);
        let record_end = record.values().last().map(|r| r.next_offset);
        let bases: BTreeSet<i64> = candidates.keys().chain(record.keys()).copied().collect();
        let last_file_base = candidates.keys().next_back().copied();
        Layout {
            candidates,
            record,
            bases,
            rp: self.rp(),
            log_start,
            clean,
            record_end,
            last_file_base,
        }
    }

    /// What becomes of the segment at `base` (a file, a record naming it, or both), given the
    /// segments the walk kept before it.
    fn classify(
        &self,
        layout: &Layout,
        walk: &Walk,
        base: i64,
        inv: &Inventory,
        report: &mut RecoveryReport,
    ) -> Result<Verdict, PlanError> {
        let file = layout.candidates.get(&base);
        if walk.cut_at.is_some() {
            return Ok(match file {
                Some(c) => Verdict::Removed(Doomed {
                    base,
                    path: c.file.path.clone(),
                    reason: "after a cut".into(),
                    unrecorded: false,
                }),
                None => Verdict::Absent,
            });
        }
        let rec = layout.record.get(&base);
        let Some(candidate) = file else {
            // Only a record can name a base without a file.
            let Some(r) = rec else {
                return Ok(Verdict::Absent);
            };
            return self.segment_missing(base, r, report);
        };
        let at = Slot {
            base,
            candidate,
            rec,
            next_file_base: layout.candidates.range(base + 1..).next().map(|(b, _)| *b),
            previous_last: walk.kept.iter().rev().find_map(|k| k.tail.last_offset),
            previous: walk.kept.last(),
        };
        if rec.is_none() && !candidate.swapped {
            if let Some(verdict) = self.unrecorded(layout, &at, report)? {
                return Ok(verdict);
            }
        }
        if rec.is_none() {
            if let Some(verdict) = self.gap_before(layout, &at, inv, report)? {
                return Ok(verdict);
            }
        }
        if candidate.file.kind != FileKind::File {
            return self.not_a_file(layout, &at, report);
        }
        let bounds = OffsetBounds {
            segment_base: base,
            next_segment_base: at.next_file_base,
            dense_from: self.checkpoint.and_then(|c| c.dense_from),
        };
        match self.believed(layout, &at, bounds, report)? {
            Ok(segment) => Ok(Verdict::Kept {
                segment,
                cut_at: None,
            }),
            Err(tolerated) => self.validated(layout, &at, bounds, tolerated, report),
        }
    }

    /// A segment the record lists whose file is gone: the log is cut at its base.
    fn segment_missing(
        &self,
        base: i64,
        r: &SegmentRecord,
        report: &mut RecoveryReport,
    ) -> Result<Verdict, PlanError> {
        let log_path = names::file_path(self.dir, base, names::LOG_EXT);
        let damage = Damage::SegmentMissing {
            base_offset: r.base_offset,
            next_offset: r.next_offset,
            size: r.size,
        };
        self.judge(true, &log_path, None, &damage)?;
        report.truncations.push(Truncation {
            path: log_path,
            position: 0,
            file_len: 0,
            damage,
        });
        Ok(Verdict::Cut {
            at: r.base_offset,
            removed: None,
        })
    }

    /// A segment file no record lists (and not swapped in): below the log start, inside what
    /// the record covers, or first above a log start whose offsets were lost. `None` when it is
    /// none of these.
    fn unrecorded(
        &self,
        layout: &Layout,
        at: &Slot,
        report: &mut RecoveryReport,
    ) -> Result<Option<Verdict>, PlanError> {
        let (base, f, log_start) = (at.base, &at.candidate.file, layout.log_start);
        // Wholly below the log start: a retention whose deletion a crash interrupted
        // (the log start is made durable before any file goes).
        let has_start = self.checkpoint.is_some() || self.vouch().is_some();
        if has_start && at.next_file_base.is_some_and(|n| n <= log_start) {
            return Ok(Some(Verdict::Removed(Doomed {
                base,
                path: f.path.clone(),
                reason: format!("below the log start offset {log_start}"),
                unrecorded: true,
            })));
        }
        let inside_record = layout.record_end.is_some_and(|end| base < end || layout.clean);
        if inside_record {
            let damage = Damage::UnrecordedSegment {
                record_end: layout.record_end.unwrap_or(base),
            };
            self.judge(true, &f.path, None, &damage)?;
            // Not part of the log: removed, and the log goes on without it.
            report.truncations.push(Truncation {
                path: f.path.clone(),
                position: 0,
                file_len: f.len as usize,
                damage,
            });
            return Ok(Some(Verdict::Removed(Doomed {
                base,
                path: f.path.clone(),
                reason: "not in the checkpoint's record of the log".into(),
                unrecorded: true,
            })));
        }
        if at.previous.is_none() && base > log_start && self.lost_before(base) {
            // The first segment starts above the log start the checkpoint records: the
            // offsets between were lost (say, with segments a truncation was removing).
            let damage = Damage::MissingOffsets {
                next_offset: log_start,
                next_segment_base: base,
            };
            self.judge(log_start < layout.rp, &f.path, Some(0), &damage)?;
            report.truncations.push(Truncation {
                path: f.path.clone(),
                position: 0,
                file_len: f.len as usize,
                damage,
            });
            return Ok(Some(Verdict::Cut {
                at: log_start,
                removed: Some(Doomed {
                    base,
                    path: f.path.clone(),
                    reason: "after a cut".into(),
                    unrecorded: true,
                }),
            }));
        }
        Ok(None)
    }

    /// An unrecorded segment that starts past the previous one's end: if the offsets between
    /// were lost, the log is cut at that end. `None` when nothing was lost.
    fn gap_before(
        &self,
        layout: &Layout,
        at: &Slot,
        inv: &Inventory,
        report: &mut RecoveryReport,
    ) -> Result<Option<Verdict>, PlanError> {
        let Some(prev) = at.previous.filter(|k| at.base > k.next_offset) else {
            return Ok(None);
        };
        if !self.lost_between(prev, at.base, inv) {
            return Ok(None);
        }
        let damage = Damage::MissingOffsets {
            next_offset: prev.next_offset,
            next_segment_base: at.base,
        };
        let durable = match self.knows_durable_end() {
            true => prev.next_offset < layout.rp,
            false => true,
        };
        self.judge(durable, &prev.source, Some(prev.log_size), &damage)?;
        report.truncations.push(Truncation {
            path: prev.source.clone(),
            position: prev.log_size,
            file_len: prev.file_len as usize,
            damage,
        });
        Ok(Some(Verdict::Cut {
            at: prev.next_offset,
            removed: Some(Doomed {
                base: at.base,
                path: at.candidate.file.path.clone(),
                reason: "after a cut".into(),
                unrecorded: false,
            }),
        }))
    }

    /// A segment name that is not a regular file: removed, and the log cut before it.
    fn not_a_file(
        &self,
        layout: &Layout,
        at: &Slot,
        report: &mut RecoveryReport,
    ) -> Result<Verdict, PlanError> {
        let (base, f) = (at.base, &at.candidate.file);
        let damage = Damage::NotAFile {
            kind: f.kind.name(),
        };
        let durable = at.rec.is_some() || self.loses_durable(base, layout.last_file_base);
        self.judge(durable, &f.path, None, &damage)?;
        report.truncations.push(Truncation {
            path: f.path.clone(),
            position: 0,
            file_len: 0,
            damage,
        });
        Ok(Verdict::Cut {
            at: at.previous.map(|k| k.next_offset).unwrap_or(base),
            removed: Some(Doomed {
                base,
                path: f.path.clone(),
                reason: "not a regular file".into(),
                unrecorded: at.rec.is_none(),
            }),
        })
    }

    /// A segment believed without validating every batch: held to its record, or vouched for
    /// by the log dir. `Err` when it must be validated, with the damage to what the record
    /// vouches for that the mode lets validation deal with.
    fn believed(
        &self,
        layout: &Layout,
        at: &Slot,
        bounds: OffsetBounds,
        report: &mut RecoveryReport,
    ) -> Result<Result<KeptSegment, Option<Damage>>, PlanError> {
        let (base, f) = (at.base, &at.candidate.file);
        // A clean close's last segment, preallocated again by an open that crashed before
        // its first append (the first change rewrites the checkpoint unclean before it
        // writes anything): zeros after the recorded end, not damage.
        let reopened = |r: &SegmentRecord| {
            layout.clean
                && f.len > r.file_len
                && layout.record.keys().next_back() == Some(&base)
                && self.zeros_at(&f.path, r.size, f.len)
        };
        match at.rec {
            // Between the batches' end and the recorded length: only dead bytes after a
            // truncation's cut are missing, and a crash may leave any length of them.
            Some(r) if (f.len < r.size || f.len > r.file_len) && !reopened(r) => {
                let damage = Damage::SizeMismatch {
                    expected: r.file_len,
                    found: f.len,
                };
                self.judge(true, &f.path, None, &damage)?;
                Ok(Err(Some(damage)))
            }
            Some(r) if !self.deep => {
                // The last recorded segment's end is vouched for by nothing else in the
                // record (the others' ends are the next one's base): after a crash its
                // tail is walked. A clean close synced the whole log before it wrote the
                // record, the last segment's end included, which is then held to its
                // file's length and its indexes' last entries like every other segment:
                // a clean open reads no batch.
                let last_recorded = layout.record.keys().next_back() == Some(&base);
                let check_tail = last_recorded && !layout.clean;
                Ok(self
                    .trust(r, f, bounds, at.previous_last, check_tail, report)?
                    .map_err(Some))
            }
            None if !self.deep
                && !at.candidate.swapped
                && self.vouches_for(at.next_file_base) =>
            {
                Ok(self
                    .vouched(f, bounds, at.previous_last, report)?
                    .map_err(Some))
            }
            _ => Ok(Err(None)),
        }
    }

    /// A segment whose every batch is validated; `tolerated` is damage already found in what
    /// the record vouches for, reported if validation finds nothing worse.
    fn validated(
        &self,
        layout: &Layout,
        at: &Slot,
        bounds: OffsetBounds,
        tolerated: Option<Damage>,
        report: &mut RecoveryReport,
    ) -> Result<Verdict, PlanError> {
        let (base, f, rec) = (at.base, &at.candidate.file, at.rec);
        let mut v = self.validate(f, bounds, at.previous_last, report)?;
        if let Some(damage) = rec.and_then(|r| digest_disagrees(r, &v)) {
            // Which batch header changed no one can tell: nothing of the segment
            // is believed, from its first byte.
            v = Validated {
                valid_len: 0,
                batches: Vec::new(),
                digests: Vec::new(),
                damage: Some((0, damage)),
            };
        }
        let overlaps = at.previous_last.is_some_and(|l| base <= l);
        if overlaps && v.batches.is_empty() && v.damage.is_none() {
            // A segment starting at or below offsets the previous one holds is
            // the leftover of a roll that failed (its creation reached the disk,
            // its removal did not) while the previous segment took more batches.
            return Ok(Verdict::Removed(Doomed {
                base,
                path: f.path.clone(),
                reason: "leftover of a failed roll".into(),
                unrecorded: rec.is_none(),
            }));
        }
        let next_offset = v.batches.last().map_or(base, |b| b.last_offset + 1);
        let mut damage = v.damage.take();
        if let Some(r) = rec.filter(|r| damage.is_none() && r.next_offset != next_offset) {
            // What validation found contradicts what the checkpoint vouched for.
            damage = Some((
                v.valid_len,
                Damage::EndDisagrees {
                    expected_next: r.next_offset,
                    found_next: next_offset,
                },
            ));
        }
        let mut cut_at = None;
        if let Some((position, d)) = damage {
            let durable = rec.is_some()
                || at.candidate.swapped
                || match self.knows_durable_end() {
                    true => next_offset < layout.rp,
                    false => Some(base) != layout.last_file_base,
                };
            self.judge(durable, &f.path, Some(position), &d)?;
            report.truncations.push(Truncation {
                path: f.path.clone(),
                position,
                file_len: f.len as usize,
                damage: d,
            });
            cut_at = Some(next_offset);
        } else if let Some(d) = tolerated {
            report.truncations.push(Truncation {
                path: f.path.clone(),
                position: v.valid_len,
                file_len: f.len as usize,
                damage: d,
            });
        }
        let segment = self.validated_segment(at, v, next_offset)?;
        Ok(Verdict::Kept { segment, cut_at })
    }

    /// The kept segment of validated batches.
    fn validated_segment(
        &self,
        at: &Slot,
        v: Validated,
        next_offset: i64,
    ) -> Result<KeptSegment, IoError> {
        let (base, f, swapped) = (at.base, &at.candidate.file, at.candidate.swapped);
        let header_digest = Some(v.digests.last().copied().unwrap_or(0));
        Ok(KeptSegment {
            base,
            source: f.path.clone(),
            file_len: f.len,
            log_size: v.valid_len,
            next_offset,
            trust: Trust::Validated,
            tail: TailInfo::from_batches(&v.batches),
            rebuild: Some(v.batches),
            swapped,
            header_digest,
            recorded_digest: None,
            // A swapped-in segment brings its own `.txnindex` (the cleaner's, which
            // a replay could not rebuild: the batches it needs may be compacted
            // away); the others are rebuilt while the producer state is replayed.
            txn: match swapped {
                true => match self.swapped_txn_index(base, v.valid_len, next_offset)? {
                    Ok(entries) => KeptTxn::Stored(entries),
                    Err(_) => KeptTxn::Rebuild,
                },
                false => KeptTxn::Rebuild,
            },
        })
    }

    /// The plan from what the walk kept: the log start, recovery point, high watermark and
    /// dense start it leaves, and a refusal if it ends below the recovery point.
    fn finish(
        &self,
        layout: &Layout,
        walk: Walk,
        swaps: SwapPlan,
        report: &mut RecoveryReport,
    ) -> Result<Plan, PlanError> {
        let Walk {
            kept,
            doomed,
            cut_at,
        } = walk;
        let (rp, log_start) = (layout.rp, layout.log_start);
        let mut rp_after = rp;
        let log_end = kept.last().map_or(log_start, |s| s.next_offset);
        if self.vouch().is_some_and(|v| v.clean_shutdown) && cut_at.is_none() {
            // Kafka's rule: after a clean shutdown the recovery point is the log end.
            rp_after = log_end;
        }
        if let Some(c) = cut_at {
            rp_after = rp_after.min(c);
        } else if log_end < rp {
            let path = kept
                .last()
                .map_or_else(|| self.dir.to_path_buf(), |s| s.source.clone());
            let damage = Damage::DurableEndMissing {
                log_end,
                recovery_point: rp,
            };
            self.judge(true, &path, None, &damage)?;
            report.truncations.push(Truncation {
                path,
                position: kept.last().map_or(0, |s| s.log_size),
                file_len: kept.last().map_or(0, |s| s.file_len as usize),
                damage,
            });
        }
        let first_base = kept.first().map_or(log_start, |s| s.base);
        let log_start_offset = log_start.max(first_base).min(log_end);
        let high_watermark = match (self.checkpoint, self.vouch()) {
            (Some(c), _) => c.high_watermark,
            (None, Some(v)) => v.high_watermark.unwrap_or(log_start_offset),
            (None, None) => log_start_offset,
        }
        .min(log_end)
        .max(log_start_offset);
        let dense_from = self
            .checkpoint
            .and_then(|c| c.dense_from)
            .unwrap_or(log_end)
            .min(log_end);
        Ok(Plan {
            segments: kept,
            doomed,
            swaps,
            log_start_offset,
            recovery_point: rp_after.min(log_end),
            high_watermark,
            dense_from,
        })
    }

    /// Whether the offsets between `prev`'s end and the segment at `base` were lost (rather
    /// than never written, or compacted away). Rolls keep the segments this engine writes
    /// contiguous (the new base is the log end unless a replicated gap is wider than int32),
    /// so with a checkpoint, and no record vouching for the segment, any other gap is a lost
    /// tail whose next segment's file survived. Compaction leaves gaps between the segments it
    /// rewrites, in Kafka directories too; there, a producer snapshot named after an offset in
    /// the gap says a segment started there: one is missing.
    fn lost_between(&self, prev: &KeptSegment, base: i64, inv: &Inventory) -> bool {
        if let Some(dense_from) = self.checkpoint.and_then(|c| c.dense_from) {
            // The gap is what a replicated append left, or offsets were lost.
            return base > dense_from;
        }
        if self.is_offset_overflow_gap(base, prev.next_offset) {
            return false;
        }
        let snapshot_in_gap = || {
            inv.snapshots
                .iter()
                .any(|(o, _)| *o > prev.base && *o >= prev.next_offset && *o < base)
        };
        match (self.checkpoint, self.vouch()) {
            (Some(_), _) => true,
            // Kafka rolls at the log end: only the cleaner leaves gaps, and only below its
            // checkpoint. Any other gap lost the offsets in it.
            (None, Some(v)) => {
                v.cleaner_offset.is_none_or(|c| prev.next_offset >= c) || snapshot_in_gap()
            }
            (None, None) => snapshot_in_gap(),
        }
    }

    /// Whether the offsets from the checkpoint's log start to a first segment at `base` were
    /// lost: with a checkpoint, unless the log is not dense there (a replicated gap).
    fn lost_before(&self, base: i64) -> bool {
        match self.checkpoint {
            Some(c) => c.dense_from.is_none_or(|d| base > d),
            None => false,
        }
    }

    /// Without a checkpoint, only the last segment's tail may be cut in the default mode (the
    /// durable end is unknown; Kafka's own recovery point lives outside the partition).
    fn loses_durable(&self, base: i64, last_file_base: Option<i64>) -> bool {
        match self.knows_durable_end() {
            true => base < self.rp(),
            false => Some(base) != last_file_base,
        }
    }

    /// A recorded segment: checks what is cheap to check (its indexes, and the tail of the last
    /// recorded segment, whose end nothing else vouches for and whose batches a reader and the
    /// next append rely on) and believes the record for the rest. `Err` with the damage found when it must be validated
    /// instead (damage that the mode lets recovery cut).
    fn trust(
        &self,
        r: &SegmentRecord,
        f: &FileEntry,
        bounds: OffsetBounds,
        previous_last: Option<i64>,
        check_tail: bool,
        report: &mut RecoveryReport,
    ) -> Result<Result<KeptSegment, Damage>, PlanError> {
        let base = r.base_offset;
        let size = r.size as usize;
        let last_offset = (r.next_offset > base).then(|| r.next_offset - 1);
        let tail = TailInfo {
            last_offset,
            first_batch_timestamp: -1,
            max_timestamp: None,
        };
        let stored_txn = self.recorded_txn_index(r)?;
        if self.checkpoint.is_some_and(|c| c.clean_shutdown) && !check_tail && stored_txn.is_ok() {
            // A clean close synced every index with its segment: a sealed segment's are read
            // whole when it is first mapped (a damaged one is not used; `SegmentView`), so
            // opening a cleanly closed log reads none of its sealed segments' batches, and of
            // its indexes only their last entries, held to the record here.
            if let Some(max_timestamp) = self.last_entries_agree(base, size, last_offset)? {
                let tail = TailInfo {
                    max_timestamp,
                    ..tail
                };
                let txn = KeptTxn::Stored(stored_txn.unwrap_or_default());
                return Ok(Ok(self.recorded(r, f, None, tail, txn)));
            }
        }
        let index = self.map_index(base, names::INDEX_EXT, offset_index::ENTRY_SIZE, size)?;
        let time = self.map_index(base, names::TIME_INDEX_EXT, time_index::ENTRY_SIZE, size)?;
        let index_problem = Self::recorded_index_problem(r, (&index, &time), &stored_txn);
        // Kafka recovers a segment whose `.txnindex` fails its sanity check; only that index
        // is rebuilt from the replay when the others are what failed.
        let txn = match stored_txn {
            Ok(entries) => KeptTxn::Stored(entries),
            Err(_) => KeptTxn::Rebuild,
        };
        let mut tail = tail;
        let needs_data = index_problem.is_some() || check_tail;
        if !needs_data {
            return Ok(Ok(self.recorded(r, f, None, tail, txn)));
        }
        let map = self.map_log(&f.path, size)?;
        let data = map.published_slice();
        let mut batches = Vec::new();
        let walked = match &index_problem {
            // The indexes are rebuilt from a walk over every frame.
            Some(_) => {
                let result =
                    segment::walk_frames(data, bounds, previous_last, &mut |b| batches.push(*b));
                (result.valid_len, result.stop, result.last_offset)
            }
            // The last recorded segment's tail is walked from the last index entry that names
            // its batch: a few headers.
            None => walk_tail(index.as_ref().ok(), data, bounds, previous_last, &mut batches),
        };
        let full_walk = index_problem.is_some();
        if let Some((position, damage)) = recorded_walk_damage(r, walked, data, &batches, full_walk)
        {
            self.judge(true, &f.path, Some(position), &damage)?;
            // Let the validation find and cut what is wrong.
            return Ok(Err(damage));
        }
        tail.first_batch_timestamp = first_batch_timestamp(data);
        if let Some(reason) = index_problem {
            report
                .indexes_rebuilt
                .push((names::file_path(self.dir, base, names::INDEX_EXT), reason));
            tail = TailInfo::from_batches(&batches);
            return Ok(Ok(self.recorded(r, f, Some(batches), tail, txn)));
        }
        tail.max_timestamp = max_timestamp(&batches, time.ok(), base);
        Ok(Ok(self.recorded(r, f, None, tail, txn)))
    }

    /// A recorded segment's stored `.txnindex` entries, or why they cannot be used: the
    /// sanity check's reasons, or a digest other than the one recorded when it was sealed.
    fn recorded_txn_index(
        &self,
        r: &SegmentRecord,
    ) -> Result<Result<Vec<AbortedTxn>, String>, IoError> {
        let (base, size) = (r.base_offset, r.size as usize);
        Ok(
            match (self.stored_txn_index(base, size, r.next_offset)?, r.digest) {
                // A `.txnindex` missing, added or altered since the segment was sealed: its
                // entries would change what read_committed returns, so it is rebuilt from the log.
                (Ok(entries), Some(d))
                    if digest::txn_digest(&entries) != (d.txn_len, d.txn_crc) =>
                {
                    let (len, crc) = digest::txn_digest(&entries);
                    Err(format!(
                        "txn index: {len} bytes with CRC-32C {crc:08x}, but the checkpoint \
                         recorded {} bytes with {:08x} when the segment was sealed",
                        d.txn_len, d.txn_crc
                    ))
                }
                (stored, _) => stored,
            },
        )
    }

    /// Why a recorded segment's indexes cannot be kept (the first problem found), if they can't.
    fn recorded_index_problem(
        r: &SegmentRecord,
        (index, time): (&Result<Mapping, String>, &Result<Mapping, String>),
        stored_txn: &Result<Vec<AbortedTxn>, String>,
    ) -> Option<String> {
        let (base, size) = (r.base_offset, r.size as usize);
        let last_offset = (r.next_offset > base).then(|| r.next_offset - 1);
        match (index, time) {
            (Ok(index), Ok(time)) => {
                offset_index::check(index.published_slice(), base, size.max(1))
                    .map_err(|e| format!("offset index: {e}"))
                    .and_then(|()| {
                        time_index::check(time.published_slice(), base, last_offset.unwrap_or(base))
                            .map_err(|e| format!("time index: {e}"))
                    })
                    .and_then(|()| stored_txn.as_ref().map(|_| ()).map_err(Clone::clone))
                    .err()
            }
            (Err(reason), _) | (_, Err(reason)) => Some(reason.clone()),
        }
    }

    /// A segment the log dir's Kafka checkpoints vouch for, checked as cheaply as a recorded
    /// one: its indexes (kept whatever `index.interval.bytes` wrote them, if they are sound),
    /// and a walk of its tail from the last index entry, which gives its end offset; its size
    /// is its file's length (Kafka trims a segment at roll and at a clean shutdown). `Err`
    /// with the damage found when it must be validated instead.
    fn vouched(
        &self,
        f: &FileEntry,
        bounds: OffsetBounds,
        previous_last: Option<i64>,
        report: &mut RecoveryReport,
    ) -> Result<Result<KeptSegment, Damage>, PlanError> {
        let base = bounds.segment_base;
        let size = f.len.min(MAX_SEGMENT_BYTES) as usize;
        if f.len > MAX_SEGMENT_BYTES {
            return Ok(Err(Damage::TooLarge {
                len: f.len,
                max: MAX_SEGMENT_BYTES,
            }));
        }
        let index = self.map_index(base, names::INDEX_EXT, offset_index::ENTRY_SIZE, size)?;
        let time = self.map_index(base, names::TIME_INDEX_EXT, time_index::ENTRY_SIZE, size)?;
        let offset_problem = match &index {
            Ok(index) => offset_index::check(index.published_slice(), base, size.max(1))
                .map_err(|e| format!("offset index: {e}"))
                .err(),
            Err(reason) => Some(reason.clone()),
        };
        let map = self.map_log(&f.path, size)?;
        let data = map.published_slice();
        let mut batches = Vec::new();
        let (valid_len, stop, last_offset) = match offset_problem {
            Some(_) => {
                let r = segment::walk_frames(data, bounds, previous_last, &mut |b| batches.push(*b));
                (r.valid_len, r.stop, r.last_offset)
            }
            None => walk_tail(index.as_ref().ok(), data, bounds, previous_last, &mut batches),
        };
        if let Some((position, damage)) = stop_damage(stop) {
            self.judge(true, &f.path, Some(position), &damage)?;
            return Ok(Err(damage));
        }
        let next_offset = last_offset.map_or(base, |l| l + 1);
        let (index_problem, txn) =
            self.vouched_index_problem(offset_problem, &time, base, valid_len, next_offset)?;
        let mut tail = TailInfo {
            last_offset,
            first_batch_timestamp: first_batch_timestamp(data),
            max_timestamp: None,
        };
        let rebuild = match index_problem {
            Some(reason) => {
                if batches.first().is_none_or(|b| b.position != 0) {
                    // Only the tail was walked: the rebuild needs every frame.
                    batches.clear();
                    segment::walk_frames(data, bounds, previous_last, &mut |b| batches.push(*b));
                }
                report
                    .indexes_rebuilt
                    .push((names::file_path(self.dir, base, names::INDEX_EXT), reason));
                tail = TailInfo::from_batches(&batches);
                Some(batches)
            }
            None => {
                tail.max_timestamp = max_timestamp(&batches, time.ok(), base);
                None
            }
        };
        report.segments_vouched += 1;
        Ok(Ok(KeptSegment {
            base,
            source: f.path.clone(),
            file_len: f.len,
            log_size: valid_len,
            next_offset,
            trust: Trust::Vouched,
            rebuild,
            tail,
            swapped: false,
            txn,
            header_digest: None,
            recorded_digest: None,
        }))
    }

    /// Why a vouched-for segment's indexes cannot be kept (the first problem found, the
    /// offset index's given), and where its aborted transactions come from.
    fn vouched_index_problem(
        &self,
        offset_problem: Option<String>,
        time: &Result<Mapping, String>,
        base: i64,
        valid_len: usize,
        next_offset: i64,
    ) -> Result<(Option<String>, KeptTxn), IoError> {
        let time_problem = match time {
            Ok(time) => time_index::check(time.published_slice(), base, next_offset.max(base + 1) - 1)
                .map_err(|e| format!("time index: {e}"))
                .err(),
            Err(reason) => Some(reason.clone()),
        };
        // Kafka recovers a segment whose `.txnindex` fails its sanity check.
        let stored_txn = self.stored_txn_index(base, valid_len, next_offset)?;
        let txn_problem = stored_txn.as_ref().err().cloned();
        let txn = match stored_txn {
            Ok(entries) => KeptTxn::Stored(entries),
            Err(_) => KeptTxn::Rebuild,
        };
        Ok((offset_problem.or(time_problem).or(txn_problem), txn))
    }

    fn recorded(
        &self,
        r: &SegmentRecord,
        f: &FileEntry,
        rebuild: Option<Vec<BatchInfo>>,
        tail: TailInfo,
        txn: KeptTxn,
    ) -> KeptSegment {
        KeptSegment {
            base: r.base_offset,
            source: f.path.clone(),
            file_len: f.len,
            log_size: r.size as usize,
            next_offset: r.next_offset,
            trust: Trust::Recorded,
            rebuild,
            tail,
            swapped: false,
            txn,
            header_digest: r.digest.map(|d| d.headers),
            recorded_digest: r.digest,
        }
    }

    /// A recorded segment's stored `.txnindex` entries (none without a file), or why they
    /// cannot be used: not a regular file, larger than the markers of the segment could need
    /// (at most one per batch: never read), or failing the sanity check.
    /// The `.txnindex` of a segment being swapped in: its `.txnindex.swap`, or, once that was
    /// renamed (a segment's `.txnindex` takes its final name before its `.log`), the file.
    fn swapped_txn_index(
        &self,
        base: i64,
        log_size: usize,
        next_offset: i64,
    ) -> Result<Result<Vec<AbortedTxn>, String>, IoError> {
        let swap = self.dir.join(format!(
            "{}.{}",
            names::file_name(base, names::TXN_INDEX_EXT),
            names::SWAP_SUFFIX
        ));
        if self.fs.exists(&swap).ctx("stat", &swap)? {
            return self.txn_index_at(&swap, base, log_size, next_offset);
        }
        self.stored_txn_index(base, log_size, next_offset)
    }

    fn stored_txn_index(
        &self,
        base: i64,
        log_size: usize,
        next_offset: i64,
    ) -> Result<Result<Vec<AbortedTxn>, String>, IoError> {
        let path = names::file_path(self.dir, base, names::TXN_INDEX_EXT);
        self.txn_index_at(&path, base, log_size, next_offset)
    }

    fn txn_index_at(
        &self,
        path: &Path,
        base: i64,
        log_size: usize,
        next_offset: i64,
    ) -> Result<Result<Vec<AbortedTxn>, String>, IoError> {
        let max = (log_size / crate::format::HEADER_SIZE + 1) * txn_index::ENTRY_SIZE;
        Ok(match crate::io::read_small_file(self.fs, path, max as u64)? {
            crate::io::SmallFile::Missing => Ok(Vec::new()),
            crate::io::SmallFile::NotAFile(kind) => Err(format!("txn index: a {kind}")),
            crate::io::SmallFile::TooLarge(len) => Err(format!(
                "txn index: {len} bytes, more than a {log_size}-byte segment can need"
            )),
            crate::io::SmallFile::Bytes(bytes) => txn_index::check(&bytes, base, next_offset)
                .map_err(|e| format!("txn index: {e}")),
        })
    }

    /// Validates every batch of a segment file.
    fn validate(
        &self,
        f: &FileEntry,
        bounds: OffsetBounds,
        previous_last: Option<i64>,
        report: &mut RecoveryReport,
    ) -> Result<Validated, PlanError> {
        let len = f.len.min(MAX_SEGMENT_BYTES) as usize;
        let map = self.map_log(&f.path, len)?;
        let mut batches = Vec::new();
        let result = read_ahead(&map, || {
            segment::scan(map.published_slice(), bounds, previous_last, &mut |b| {
                batches.push(*b)
            })
        });
        report.segments_validated += 1;
        report.bytes_validated += result.valid_len as u64;
        let damage = match result.stop {
            ScanStop::Torn {
                position,
                needed,
                available,
            } => Some((position, Damage::Torn { needed, available })),
            ScanStop::Invalid { position, problem } => Some((position, Damage::Invalid(problem))),
            ScanStop::End if f.len > MAX_SEGMENT_BYTES => Some((
                result.valid_len,
                Damage::TooLarge {
                    len: f.len,
                    max: MAX_SEGMENT_BYTES,
                },
            )),
            ScanStop::End => None,
        };
        let data = map.published_slice();
        let mut running = 0;
        let digests = batches
            .iter()
            .map(|b| {
                running = digest::chain_header(running, &data[b.position..]);
                running
            })
            .collect();
        Ok(Validated {
            valid_len: result.valid_len,
            batches,
            digests,
            damage,
        })
    }

    /// Whether the file holds zeros where a batch after `at` would start (a header's worth,
    /// or what there is).
    fn zeros_at(&self, path: &Path, at: u64, len: u64) -> bool {
        let Ok(file) = self.fs.open(path, OpenMode::Read) else {
            return false;
        };
        let mut head = vec![0u8; (len - at).min(crate::format::HEADER_SIZE as u64) as usize];
        file.read_at(&mut head, at).is_ok_and(|n| n == head.len()) && head.iter().all(|&b| b == 0)
    }

    fn map_log(&self, path: &Path, len: usize) -> Result<Mapping, IoError> {
        let file = self.fs.open(path, OpenMode::Read).ctx("open", path)?;
        file.map(len, MapMode::ReadOnly).ctx("mmap", path)
    }

    /// Maps a stored index read-only, or says why it cannot be used: missing, not a regular
    /// file, or larger than any index of a segment of `log_size` bytes could be (one entry per
    /// batch at most, a batch being at least 61 bytes), so a huge sparse file is never read.
    fn map_index(
        &self,
        base: i64,
        ext: &str,
        entry_size: usize,
        log_size: usize,
    ) -> Result<Result<Mapping, String>, IoError> {
        let path = names::file_path(self.dir, base, ext);
        let meta = match self.fs.stat(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Ok(Err(format!("{ext}: missing")))
            }
            Err(e) => return Err(IoError::new("stat", &path, e)),
        };
        if meta.kind != FileKind::File {
            return Ok(Err(format!("{ext}: a {}", meta.kind.name())));
        }
        let max = (log_size / crate::format::HEADER_SIZE + 1) * entry_size;
        if meta.len > max as u64 {
            return Ok(Err(format!(
                "{ext}: {} bytes, more than a {log_size}-byte segment can index",
                meta.len
            )));
        }
        let file = self.fs.open(&path, OpenMode::Read).ctx("open", &path)?;
        let len = meta.len as usize - meta.len as usize % entry_size;
        Ok(Ok(file.map(len, MapMode::ReadOnly).ctx("mmap", &path)?))
    }

    /// After a clean close, the last entry of each index of a recorded segment against the
    /// record, read without mapping anything: both within the segment's offsets (a record
    /// whose end was damaged contradicts the time index's last entry, which names the
    /// segment's last offset with its largest timestamp), the offset index's inside its bytes.
    /// `Some` with the largest timestamp (`None` for an empty time index) when they agree;
    /// `None` when the indexes must be checked whole.
    fn last_entries_agree(
        &self,
        base: i64,
        size: usize,
        last_offset: Option<i64>,
    ) -> Result<Option<Option<i64>>, IoError> {
        let Some(index) = self.last_entry::<{ offset_index::ENTRY_SIZE }>(base, names::INDEX_EXT)?
        else {
            return Ok(None);
        };
        let Some(time) = self.last_entry::<{ time_index::ENTRY_SIZE }>(base, names::TIME_INDEX_EXT)?
        else {
            return Ok(None);
        };
        let last = last_offset.unwrap_or(base);
        let index_agrees = index.is_none_or(|e| {
            let e = offset_index::decode(&e, base).next();
            e.is_some_and(|e| e.offset >= base && e.offset <= last && (e.position as usize) < size)
        });
        let time = time.map(|e| time_index::decode(&e, base).next());
        let time_agrees = match &time {
            None => true,
            Some(e) => e.is_some_and(|e| e.offset >= base && e.offset <= last),
        };
        if !(index_agrees && time_agrees) {
            return Ok(None);
        }
        Ok(Some(time.flatten().map(|e| e.timestamp)))
    }

    /// The last whole entry of an index file: `Some(None)` for an empty one, `None` if it is
    /// missing, not a regular file, or not a whole number of entries (the full check says
    /// what is wrong).
    fn last_entry<const N: usize>(
        &self,
        base: i64,
        ext: &str,
    ) -> Result<Option<Option<[u8; N]>>, IoError> {
        let path = names::file_path(self.dir, base, ext);
        let meta = match self.fs.stat(&path) {
            Ok(m) => m,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(None),
            Err(e) => return Err(IoError::new("stat", &path, e)),
        };
        if meta.kind != FileKind::File || meta.len % N as u64 != 0 {
            return Ok(None);
        }
        if meta.len == 0 {
            return Ok(Some(None));
        }
        let file = self.fs.open(&path, OpenMode::Read).ctx("open", &path)?;
        let mut entry = [0u8; N];
        let n = file
            .read_at(&mut entry, meta.len - N as u64)
            .ctx("read", &path)?;
        Ok((n == N).then_some(Some(entry)))
    }

    /// Whether the segment at `next_base` starts past `next_expected` because its first batch
    /// could not have been indexed relative to `next_expected` (a replicated gap wider than
    /// int32): the only case in which a roll leaves offsets out between segments.
    fn is_offset_overflow_gap(&self, next_base: i64, next_expected: i64) -> bool {
        let path = names::file_path(self.dir, next_base, names::LOG_EXT);
        let Ok(file) = self.fs.open(&path, OpenMode::Read) else {
            return false;
        };
        let Ok(len) = file.len() else {
            return false;
        };
        let Ok(map) = file.map(len.min(MAX_SEGMENT_BYTES) as usize, MapMode::ReadOnly) else {
            return false;
        };
        // Only a valid first batch, inside its own segment's range, can explain the gap: the
        // offsets of garbage explain nothing.
        let bounds = OffsetBounds {
            segment_base: next_base,
            next_segment_base: None,
            dense_from: None,
        };
        let data = map.published_slice();
        crate::format::validate_stored_batch(data).is_ok_and(|b| {
            bounds.check(b.base_offset(), b.last_offset(), None).is_ok()
                && offset_index::relative_offset(next_expected, b.last_offset()).is_none()
        })
    }

    /// Validates every `.log.swap` and decides what completing the swaps replaces (§8.2
    /// step 4). Returns the segment files as they will be once the swaps are completed, and
    /// the offset range the swaps cover.
    #[allow(clippy::type_complexity)]
    fn resolve_swaps(
        &self,
        inv: &Inventory,
        plan: &mut SwapPlan,
        report: &mut RecoveryReport,
    ) -> Result<(BTreeMap<i64, Candidate>, Option<(i64, i64)>), PlanError> {
        let mut candidates: BTreeMap<i64, Candidate> = inv
            .logs
            .iter()
            .map(|(b, f)| {
                (
                    *b,
                    Candidate {
                        file: f.clone(),
                        swapped: false,
                    },
                )
            })
            .collect();
        let mut range: Option<(i64, i64)> = None;
        let mut completed = Vec::new();
        for swap in &inv.swaps {
            let f = &swap.file;
            match self.check_swap(swap, &mut range)? {
                None => completed.push(swap),
                Some((position, damage)) => {
                    // A swap is durable data (fsynced before its rename), so damage in it is
                    // refused, except where the mode allows a cut: then, if the segment it
                    // would replace is still there, the swap is given up and the old segment
                    // kept, which loses nothing.
                    self.judge(true, &f.path, position, &damage)?;
                    report.truncations.push(Truncation {
                        path: f.path.clone(),
                        position: position.unwrap_or(0),
                        file_len: f.len as usize,
                        damage,
                    });
                    if inv.logs.contains_key(&swap.base) {
                        plan.discarded.push(f.path.clone());
                        plan.discarded.extend(
                            inv.index_swaps
                                .iter()
                                .filter(|(b, _)| *b == swap.base)
                                .map(|(_, p)| p.clone()),
                        );
                    } else {
                        completed.push(swap);
                        let (lo, hi) = range.unwrap_or((swap.base, swap.base + 1));
                        range = Some((lo.min(swap.base), hi.max(swap.base + 1)));
                    }
                }
            }
        }
        let Some((lo, hi)) = range else {
            return Ok((candidates, None));
        };
        self.complete_swaps(inv, plan, &mut candidates, completed, (lo, hi));
        Ok((candidates, Some((lo, hi))))
    }

    /// Scans a `.log.swap`: the damage found in it, if any (with where, when it is a file);
    /// a whole one widens `range` to its offsets.
    fn check_swap(
        &self,
        swap: &SwapEntry,
        range: &mut Option<(i64, i64)>,
    ) -> Result<Option<(Option<usize>, Damage)>, IoError> {
        let f = &swap.file;
        if f.kind != FileKind::File {
            return Ok(Some((
                None,
                Damage::NotAFile {
                    kind: f.kind.name(),
                },
            )));
        }
        let len = f.len.min(MAX_SEGMENT_BYTES) as usize;
        let map = self.map_log(&f.path, len)?;
        let bounds = OffsetBounds {
            segment_base: swap.base,
            next_segment_base: None,
            dense_from: None,
        };
        let result = segment::scan(map.published_slice(), bounds, None, &mut |_| {});
        let next = result.last_offset.map_or(swap.base, |l| l + 1);
        if result.stop.is_end() {
            *range = Some(range.map_or((swap.base, next), |(lo, hi)| {
                (lo.min(swap.base), hi.max(next))
            }));
        }
        Ok(stop_damage(result.stop).map(|(position, damage)| (Some(position), damage)))
    }

    /// Adds to `plan` what completing the swaps in `[lo, hi)` does, and puts the swapped-in
    /// segments in place of the files they replace among `candidates`.
    fn complete_swaps(
        &self,
        inv: &Inventory,
        plan: &mut SwapPlan,
        candidates: &mut BTreeMap<i64, Candidate>,
        completed: Vec<&SwapEntry>,
        (lo, hi): (i64, i64),
    ) {
        // The swapped-in segments replace every old segment file whose offset is in their
        // range (not snapshots: producer state is kept by its own rules).
        let superseded_bases: Vec<i64> = candidates.range(lo..hi).map(|(b, _)| *b).collect();
        for b in superseded_bases {
            candidates.remove(&b);
        }
        for (b, path) in &inv.indexes {
            if *b >= lo && *b < hi {
                plan.superseded.push(path.clone());
            }
        }
        for (b, f) in &inv.logs {
            if *b >= lo && *b < hi {
                plan.superseded.push(f.path.clone());
            }
        }
        for swap in completed {
            let to = names::file_path(self.dir, swap.base, names::LOG_EXT);
            plan.renames.push((swap.file.path.clone(), to));
            candidates.insert(
                swap.base,
                Candidate {
                    file: swap.file.clone(),
                    swapped: true,
                },
            );
        }
        for (b, path) in &inv.index_swaps {
            if plan.discarded.contains(path) || !(lo..hi).contains(b) {
                continue;
            }
            let name = path
                .file_name()
                .map(|n| n.to_string_lossy().trim_end_matches(".swap").to_string())
                .unwrap_or_default();
            plan.renames.push((path.clone(), self.dir.join(name)));
        }
    }
}

/// What validating a segment found.
struct Validated {
    valid_len: usize,
    batches: Vec<BatchInfo>,
    /// The header digest of the batches up to and including each of `batches`.
    digests: Vec<u32>,
    /// Where the valid batches end early, and why.
    damage: Option<(usize, Damage)>,
}

/// The damage when the validated batches that fill the recorded size have another header
/// digest than the one recorded when the segment was sealed: a header field no CRC covers
/// (a base offset moved into a compaction gap, a leader epoch) changed since. `None` when
/// they agree, or when there is nothing to compare (no digest, or the batches do not end at
/// the recorded size: damage found otherwise).
fn digest_disagrees(r: &SegmentRecord, v: &Validated) -> Option<Damage> {
    let recorded = r.digest?.headers;
    let found = if r.size == 0 {
        0
    } else {
        let i = v
            .batches
            .iter()
            .position(|b| (b.position + b.size) as u64 == r.size)?;
        v.digests[i]
    };
    (found != recorded).then_some(Damage::DigestMismatch {
        expected: recorded,
        found,
    })
}

/// The check a crash's open makes of the last recorded segment's tail, made by a clean open's
/// log before its first change instead (a clean open reads no batch): the walk from the last
/// offset-index entry must end exactly at the record's `size` and `next_offset`. `Some` with
/// where and what is wrong.
pub(crate) fn tail_damage(
    index: &[u8],
    data: &[u8],
    bounds: OffsetBounds,
    previous_last: Option<i64>,
    next_offset: i64,
) -> Option<(usize, Damage)> {
    let hint = last_named_entry(index, data, bounds.segment_base);
    let (start, prev) = hint.map_or((0, previous_last), |(pos, prev)| (pos, prev));
    let result = segment::walk_frames(&data[start..], bounds, prev, &mut |_| {});
    let found_next = result.last_offset.or(prev).map_or(bounds.segment_base, |l| l + 1);
    match result.stop {
        ScanStop::Torn {
            position,
            needed,
            available,
        } => Some((start + position, Damage::Torn { needed, available })),
        ScanStop::Invalid { position, problem } => {
            Some((start + position, Damage::Invalid(problem)))
        }
        ScanStop::End if start + result.valid_len != data.len() => Some((
            start + result.valid_len,
            Damage::SizeMismatch {
                expected: data.len() as u64,
                found: (start + result.valid_len) as u64,
            },
        )),
        ScanStop::End if found_next != next_offset => Some((
            data.len(),
            Damage::EndDisagrees {
                expected_next: next_offset,
                found_next,
            },
        )),
        ScanStop::End => None,
    }
}

/// Walks a segment's tail from the last offset-index entry that names its batch (from the
/// start without one): a few headers. Returns the valid length, where and why the walk
/// stopped, and the last offset.
fn walk_tail(
    index: Option<&Mapping>,
    data: &[u8],
    bounds: OffsetBounds,
    previous_last: Option<i64>,
    batches: &mut Vec<BatchInfo>,
) -> (usize, ScanStop, Option<i64>) {
    let hint = index.and_then(|i| last_named_entry(i.published_slice(), data, bounds.segment_base));
    let (start, prev) = hint.map_or((0, previous_last), |(pos, prev)| (pos, prev));
    let mut result = segment::walk_frames(&data[start..], bounds, prev, &mut |b| batches.push(*b));
    result.valid_len += start;
    if let ScanStop::Torn { position, .. } | ScanStop::Invalid { position, .. } = &mut result.stop
    {
        *position += start;
    }
    (result.valid_len, result.stop, result.last_offset.or(prev))
}

/// The last offset-index entry that names the batch at its position, with that batch's
/// position and the last offset of the batch before it is unknown, so the entry's own offset
/// bounds what follows: returns (position, Some(last offset before the batch)) as the walk's
/// starting point, the batch at the position being walked again.
fn last_named_entry(index: &[u8], data: &[u8], base: i64) -> Option<(usize, Option<i64>)> {
    offset_index::decode(index, base)
        .filter(|e| {
            let at = e.position as usize;
            at > 0
                && crate::format::RecordBatch::parse(data.get(at..).unwrap_or(&[]))
                    .is_ok_and(|b| b.last_offset() == e.offset)
        })
        .last()
        .map(|e| {
            let at = e.position as usize;
            let before = crate::format::RecordBatch::parse(&data[at..])
                .ok()
                .map(|b| b.base_offset() - 1);
            (at, before)
        })
}

/// maxTimestamp of the first batch (the time-based roll, §3.2), -1 if it cannot be read.
/// The damage a scan stopped at, if it stopped before the end of the data.
fn stop_damage(stop: ScanStop) -> Option<(usize, Damage)> {
    match stop {
        ScanStop::Torn {
            position,
            needed,
            available,
        } => Some((position, Damage::Torn { needed, available })),
        ScanStop::Invalid { position, problem } => Some((position, Damage::Invalid(problem))),
        ScanStop::End => None,
    }
}

/// What a walk over a recorded segment (`(valid_len, stop, last_offset)`) found against its
/// record. A walk over every frame (`full_walk`, for an index rebuild) has every header in
/// hand: the record's header digest is checked for free.
fn recorded_walk_damage(
    r: &SegmentRecord,
    (valid_len, stop, walked_last): (usize, ScanStop, Option<i64>),
    data: &[u8],
    batches: &[BatchInfo],
    full_walk: bool,
) -> Option<(usize, Damage)> {
    let found_next = walked_last.map_or(r.base_offset, |l| l + 1);
    let damage = match stop {
        ScanStop::End if valid_len != r.size as usize => Some((
            valid_len,
            Damage::SizeMismatch {
                expected: r.size,
                found: valid_len as u64,
            },
        )),
        ScanStop::End if found_next != r.next_offset => Some((
            valid_len,
            Damage::EndDisagrees {
                expected_next: r.next_offset,
                found_next,
            },
        )),
        stop => stop_damage(stop),
    };
    damage.or_else(|| {
        let recorded = r.digest?.headers;
        full_walk.then_some(())?;
        let found = digest::header_digest_at(data, batches.iter().map(|b| b.position));
        (found != recorded).then_some((
            0,
            Damage::DigestMismatch {
                expected: recorded,
                found,
            },
        ))
    })
}

/// A segment's largest timestamp: its batches' when they were walked, else the last entry of
/// its time index.
fn max_timestamp(batches: &[BatchInfo], time: Option<Mapping>, base: i64) -> Option<i64> {
    batches.iter().map(|b| b.max_timestamp).max().or_else(|| {
        time.and_then(|t| time_index::decode(t.published_slice(), base).last())
            .map(|t| t.timestamp)
    })
}

fn first_batch_timestamp(data: &[u8]) -> i64 {
    crate::format::RecordBatch::parse(data).map_or(-1, |b| b.max_timestamp())
}
