//! Opening a log directory (docs/design.md "Recovery on open"): leftover files, the checkpoint
//! and the segments it vouches for, validation of everything it does not vouch for, index
//! rebuilds, the cut of damage the recovery mode allows, and the producer state.
//!
//! Recovery first *plans*: it reads and validates without changing anything, producer state
//! included, so a recovery mode that refuses leaves the directory as it found it, the
//! checkpoint's clean flag too. Only then does it apply the plan, in an order that leaves a
//! directory the next open can recover whatever step a crash stops it at.

mod inventory;
mod plan;
mod preview;
mod removed;
mod report;

use std::path::Path;
use std::sync::Arc;

use super::checkpoint::{self, Checkpoint};
use super::config::{LogConfig, RecoveryMode};
use super::epochs::{self, LeaderEpochCache};
use super::error::{Damage, OpenError};
use super::producers::{LoadError, ProducerLoadReport, ProducerState, ReplaySegment, ReplayWants};
use crate::io::{FileSystem, IoError, IoResultExt, MapMode, OpenMode};
use crate::producer::CompletedTxn;
use crate::segment::{
    self, names, AbortedTxn, IndexSource, OffsetBounds, OpenSegmentError, OpenSpec, Opened,
    Segment, TxnSource,
};
use crate::segment::{SegmentConfig, SegmentWriter};

use inventory::Inventory;
pub use plan::LogDirOffsets;
pub(crate) use plan::tail_damage;
use plan::{Doomed, KeptSegment, KeptTxn, Plan, PlanError, Planner, Trust};
pub use preview::RecoveryPreview;
pub(crate) use preview::preview;
pub use removed::{RemovedData, RemovedTotals};
pub use report::{RecoveryReport, Truncation};

/// The loaded log, ready for appends.
pub(crate) struct Loaded {
    pub sealed: Vec<Arc<Segment>>,
    pub active: SegmentWriter,
    pub log_start_offset: i64,
    pub recovery_point: i64,
    pub report: RecoveryReport,
    pub producers: ProducerState,
    pub producer_report: ProducerLoadReport,
    pub high_watermark: i64,
    pub dense_from: i64,
    pub epochs: LeaderEpochCache,
    /// `epochs` holds entries the file does not, all after its last (see `EpochPlan::added`).
    pub epochs_unwritten: bool,
    /// The clean checkpoint the log was opened with is still on disk: opening changed nothing
    /// it vouches for, so nothing was written (the log writes the unclean one before its first
    /// change).
    pub clean_on_disk: bool,
    /// The directory held none of the log's files: nothing was written or synced, and the log
    /// writes its first checkpoint (syncing the directory) before its first change.
    pub fresh: bool,
    /// The transactions completed by markers the high watermark may not have passed yet.
    pub completed: Vec<CompletedTxn>,
}

pub(crate) fn segment_config(config: &LogConfig, fs: &Arc<dyn FileSystem>) -> SegmentConfig {
    SegmentConfig {
        fs: Arc::clone(fs),
        segment_bytes: config.segment_bytes,
        index_bytes: config.segment_index_bytes,
        index_interval_bytes: config.index_interval_bytes,
        allocation_step: config.allocation_step_bytes,
        preallocation: if config.zeroes_ahead() {
            segment::Preallocation::Zeroed
        } else {
            segment::Preallocation::Reserved
        },
        write_through: config.writes_through_file(),
        // A managed log's: set by the log over what recovery made (`Log::segment_config`).
        write_descriptors: None,
    }
}

/// Opens the log in `dir`. `log_dir` holds what the log dir's Kafka checkpoints say of it when
/// the log manager opens it: they vouch for the segments when the partition has no checkpoint
/// of its own (a Kafka partition), or when its own is older than them (Kafka ran on it since).
pub(crate) fn open(
    fs_arc: &Arc<dyn FileSystem>,
    dir: &Path,
    config: &LogConfig,
    now_ms: i64,
    log_dir: Option<&LogDirOffsets>,
    exclusion: super::Exclusion,
) -> Result<Loaded, OpenError> {
    let fs = fs_arc.as_ref();
    let Planned {
        inv,
        cp,
        plan,
        mut report,
        producers,
        epochs,
    } = plan_open(fs, dir, config, now_ms, log_dir, exclusion, Effect::Apply)?;
    // Measured before anything is changed: what the cuts and deletions take away.
    report.removed = removed::measure(fs, &report, &plan)?;
    let mut loaded = apply(
        fs_arc,
        dir,
        config,
        now_ms,
        &inv,
        cp.as_ref(),
        plan,
        report,
        producers,
    )?;
    if let Some(changed) = epochs.changed {
        epochs::write(fs, dir, changed.entries())?;
    }
    loaded.epochs_unwritten = epochs.added;
    loaded.epochs = epochs.cache;
    Ok(loaded)
}

/// Whether planning may finish what an interrupted operation committed to (a full
/// truncation), or must leave every file as it is ([`preview`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Effect {
    Apply,
    Preview,
}

/// Everything recovery decided by reading only: the input of [`apply`], or of a preview.
struct Planned {
    inv: Inventory,
    cp: Option<Checkpoint>,
    plan: Plan,
    report: RecoveryReport,
    producers: super::producers::LoadPlan,
    epochs: EpochPlan,
}

/// The read-only part of [`open`]: inventory, checkpoint, segment plan, producer state and
/// leader epochs. Under [`Effect::Preview`] nothing is written, not even the completion of
/// an interrupted full truncation (planned as if it had been completed).
fn plan_open(
    fs: &dyn FileSystem,
    dir: &Path,
    config: &LogConfig,
    now_ms: i64,
    log_dir: Option<&LogDirOffsets>,
    exclusion: super::Exclusion,
    effect: Effect,
) -> Result<Planned, OpenError> {
    let mut inv = Inventory::take(fs, dir)?;
    if exclusion == super::Exclusion::LogDir && inv.lock_file {
        // Before anything is written: a standalone log may still hold the directory.
        super::check_unlocked(fs, dir)?;
    }
    let own = read_own_checkpoint(fs, dir, config, log_dir, effect, &mut inv)?;
    let (report, plan, producers) = plan_segments(fs, dir, config, now_ms, log_dir, &inv, &own)?;
    let epochs = plan_epochs(fs, dir, &plan)?;
    Ok(Planned {
        inv,
        cp: own.cp,
        plan,
        report,
        producers,
        epochs,
    })
}

/// What the log's own checkpoint says, as far as it is believed.
struct OwnCheckpoint {
    /// The checkpoint, unless missing, damaged (and tolerated) or superseded.
    cp: Option<Checkpoint>,
    /// Kafka's offsets were newer than it.
    superseded: bool,
    /// Why its bytes were not believed.
    damaged: Option<String>,
    /// What completing an interrupted full truncation removed (or would remove).
    started_over: Vec<(std::path::PathBuf, String)>,
}

/// Reads the log's own checkpoint and completes a full truncation it records as begun
/// (under [`Effect::Preview`], only as if: `inv` is changed instead of the directory).
fn read_own_checkpoint(
    fs: &dyn FileSystem,
    dir: &Path,
    config: &LogConfig,
    log_dir: Option<&LogDirOffsets>,
    effect: Effect,
    inv: &mut Inventory,
) -> Result<OwnCheckpoint, OpenError> {
    // A checkpoint whose bytes were damaged vouches for nothing, and its numbers are no
    // instructions: the log is validated as if it had none (except under absolute
    // consistency, which refuses any damage).
    let mut checkpoint_damaged = None;
    let own = match checkpoint::read(fs, dir)? {
        Ok(c) => c,
        Err(bad) if bad.damaged && config.recovery_mode != RecoveryMode::AbsoluteConsistency => {
            checkpoint_damaged = Some(bad.to_string());
            None
        }
        Err(bad) => return Err(bad.into()),
    };
    // Kafka's offsets newer than a clean checkpoint of our own: Kafka wrote the log since.
    let superseded = matches!((&own, log_dir), (Some(c), Some(l)) if l.supersede(c));
    let mut cp = own.filter(|_| !superseded);
    let mut started_over = Vec::new();
    if let Some(c) = cp.as_ref().filter(|c| c.start_over_at.is_some()) {
        if effect == Effect::Preview {
            cp = Some(preview::start_over(inv, c, &mut started_over));
        } else {
            let c = finish_start_over(fs, dir, inv, c, &mut started_over)?;
            cp = Some(c);
            *inv = Inventory::take(fs, dir)?;
        }
    }
    Ok(OwnCheckpoint {
        cp,
        superseded,
        damaged: checkpoint_damaged,
        started_over,
    })
}

/// The segment plan and the producer state's, validating everything again when replay finds
/// damage the plan believed.
fn plan_segments(
    fs: &dyn FileSystem,
    dir: &Path,
    config: &LogConfig,
    now_ms: i64,
    log_dir: Option<&LogDirOffsets>,
    inv: &Inventory,
    own: &OwnCheckpoint,
) -> Result<(RecoveryReport, Plan, super::producers::LoadPlan), OpenError> {
    let cp = &own.cp;
    let mode = config.recovery_mode;
    let mut deep = config.deep_recovery;
    let refused = |path, position, damage| OpenError::Refused {
        path,
        position,
        damage,
        mode,
    };
    // Damage that replaying producer state finds in bytes the checkpoint vouched for means
    // those bytes cannot be believed: under a mode that may cut, everything is validated
    // again, which finds the damage where it can be cut.
    loop {
        let mut report = RecoveryReport {
            clean_shutdown: match &cp {
                Some(c) => c.clean_shutdown,
                None => log_dir.is_some_and(|l| l.clean_shutdown),
            },
            checkpoint_found: cp.is_some(),
            segments_recorded: cp.as_ref().is_some_and(|c| c.segments.is_some()),
            recovery_point: match &cp {
                Some(c) => c.recovery_point,
                None => log_dir.and_then(|l| l.recovery_point).unwrap_or(0),
            },
            deep,
            checkpoint_superseded: own.superseded,
            checkpoint_damaged: own.damaged.clone(),
            segments_deleted: own.started_over.clone(),
            ..RecoveryReport::default()
        };
        let planner = Planner {
            fs,
            dir,
            mode,
            checkpoint: cp.as_ref(),
            log_dir: log_dir.copied(),
            deep,
        };
        let plan = match planner.plan(inv, &mut report) {
            Ok(p) => p,
            Err(PlanError::Io(e)) => return Err(e.into()),
            Err(PlanError::Refused {
                path,
                position,
                damage,
            }) => return Err(refused(path, position, damage)),
        };
        match plan_producers(fs, config, inv, &plan, cp.is_some(), now_ms) {
            Ok(p) => return Ok((report, plan, p)),
            Err(LoadError::Io(e)) => return Err(e.into()),
            Err(LoadError::Damaged {
                path,
                position,
                problem,
            }) => {
                if mode == RecoveryMode::TolerateAnyCorruption && !deep {
                    deep = true;
                    continue;
                }
                return Err(refused(path, Some(position), Damage::Invalid(problem)));
            }
        }
    }
}

/// Completes a full truncation a crash interrupted after its commit point (the checkpoint's
/// `start_over_at`): every segment file, snapshot and epoch entry is from before it and goes,
/// then the checkpoint of the empty log it left is written. Not damage: nothing the log holds
/// is lost, so no mode refuses it. Returns that checkpoint; `deleted` gets the segments.
fn finish_start_over(
    fs: &dyn FileSystem,
    dir: &Path,
    inv: &Inventory,
    c: &Checkpoint,
    deleted: &mut Vec<(std::path::PathBuf, String)>,
) -> Result<Checkpoint, OpenError> {
    let at = c.start_over_at.unwrap_or(c.log_start_offset);
    let reason = format!("removed by a full truncation to {at}");
    let segment_files = inv
        .logs
        .values()
        .map(|f| &f.path)
        .chain(inv.swaps.iter().map(|s| &s.file.path));
    for path in segment_files {
        fs.remove_file(path).ctx("remove", path)?;
        deleted.push((path.clone(), reason.clone()));
    }
    let others = inv
        .indexes
        .iter()
        .chain(&inv.index_swaps)
        .chain(&inv.snapshots)
        .map(|(_, p)| p);
    for path in others {
        fs.remove_file(path).ctx("remove", path)?;
    }
    let epochs = epochs::path(dir);
    if fs.exists(&epochs).ctx("stat", &epochs)? {
        fs.remove_file(&epochs).ctx("remove", &epochs)?;
    }
    fs.sync_dir(dir).ctx("fsync directory", dir)?;
    let empty = Checkpoint {
        start_over_at: None,
        ..c.clone()
    };
    checkpoint::write(fs, dir, &empty)?;
    Ok(empty)
}

/// The leader-epoch cache recovery opens with, and the file to write if it changed.
struct EpochPlan {
    cache: LeaderEpochCache,
    /// The file to write now: the cache differs from it other than by entries added after its
    /// last (a cut, a start moved up, a damaged order).
    changed: Option<LeaderEpochCache>,
    /// The cache only adds entries after the file's last, rebuilt from batches at or above the
    /// recovery point: they reach the file before the log's next checkpoint, as the appends'
    /// epochs do (a crash before that rebuilds them again), so the open writes nothing for them.
    added: bool,
}

/// Kafka's rebuild of the leader-epoch cache on load: the checkpoint's entries, then every
/// validated batch whose leader epoch is above the latest (without a checkpoint file, every
/// batch of the log: a frame walk over the segments that were not read), then cut to the
/// recovered log's start and end. Reads only; a malformed file is refused.
fn plan_epochs(fs: &dyn FileSystem, dir: &Path, plan: &Plan) -> Result<EpochPlan, OpenError> {
    let stored = epochs::read(fs, dir)??;
    let mut cache = LeaderEpochCache::from_entries(stored.clone().unwrap_or_default());
    let note = |cache: &mut LeaderEpochCache, epoch: i32, base: i64| {
        if epoch >= 0 && cache.latest_epoch().is_none_or(|l| epoch > l) {
            cache.assign(epoch, base);
        }
    };
    for (i, s) in plan.segments.iter().enumerate() {
        match &s.rebuild {
            Some(batches) => batches
                .iter()
                .for_each(|b| note(&mut cache, b.partition_leader_epoch, b.base_offset)),
            None if stored.is_none() && s.log_size > 0 => {
                let file = fs.open(&s.source, OpenMode::Read).ctx("open", &s.source)?;
                let map = file
                    .map(s.log_size, MapMode::ReadOnly)
                    .ctx("mmap", &s.source)?;
                let bounds = OffsetBounds {
                    segment_base: s.base,
                    next_segment_base: plan.segments.get(i + 1).map(|n| n.base),
                    dense_from: None,
                };
                segment::walk_frames(map.published_slice(), bounds, None, &mut |b| {
                    note(&mut cache, b.partition_leader_epoch, b.base_offset)
                });
            }
            None => {}
        }
    }
    // Kafka's loader: epochs that start at or after the log end wrote nothing that is left.
    // The start first, so an epoch moved up to a log start at the log end goes too.
    cache.truncate_from_start(plan.log_start_offset);
    cache.truncate_from_end(plan.log_end());
    let (changed, added) = match &stored {
        Some(entries) if entries.as_slice() == cache.entries() => (false, false),
        Some(entries) if cache.entries().starts_with(entries) => (false, true),
        Some(_) => (true, false),
        None => (false, !cache.entries().is_empty()),
    };
    Ok(EpochPlan {
        changed: changed.then(|| cache.clone()),
        added,
        cache,
    })
}

fn plan_producers(
    fs: &dyn FileSystem,
    config: &LogConfig,
    inv: &Inventory,
    plan: &Plan,
    checkpoint_found: bool,
    now_ms: i64,
) -> Result<super::producers::LoadPlan, LoadError> {
    let segments: Vec<ReplaySegment<'_>> = plan
        .segments
        .iter()
        .enumerate()
        .map(|(i, s)| ReplaySegment {
            base: s.base,
            path: &s.source,
            log_size: s.log_size,
            next_offset: s.next_offset,
            next_segment_base: plan.segments.get(i + 1).map(|n| n.base),
            validated: s.trust == Trust::Validated,
            batches: s.rebuild.as_deref(),
        })
        .collect();
    // A `.txnindex` rebuilt from its segment's markers needs the transactions open at the
    // segment's start: replay starts from a snapshot at or below the first such segment
    // (Kafka's recoverSegment rebuilds producer state up to the segment's base).
    let wants = ReplayWants {
        txn_index_from: plan
            .segments
            .iter()
            .filter(|s| s.rebuilds_txn_entries())
            .map(|s| s.base)
            .min(),
        // The markers the high watermark has not passed (a directory without the checkpoint
        // has no high watermark of its own: none are looked for).
        completed_from: if checkpoint_found {
            plan.high_watermark.min(plan.recovery_point)
        } else {
            plan.log_end()
        },
    };
    ProducerState::plan(
        fs,
        config,
        &inv.snapshots,
        &segments,
        plan.log_start_offset,
        plan.log_end(),
        wants,
        now_ms,
    )
}

/// Carries out the plan. Order matters for a crash at any step:
/// 1. complete interrupted swaps, remove leftovers and files that were never part of the log;
/// 2. write a checkpoint that vouches only for what the remaining steps leave untouched (and
///    clears the clean flag, so a crash from here on is recovered as unclean);
/// 3. delete segments dropped after a cut, set bad snapshots aside;
/// 4. open the segments: cut, rebuild indexes, flush what was rewritten;
/// 5. write the checkpoint that vouches for every sealed segment, all durable by then.
///
/// After a clean close whose files are as the checkpoint says, none of that is needed: nothing
/// is written, and the clean checkpoint stays until the log's first change replaces it.
#[allow(clippy::too_many_arguments)]
fn apply(
    fs_arc: &Arc<dyn FileSystem>,
    dir: &Path,
    config: &LogConfig,
    now_ms: i64,
    inv: &Inventory,
    old: Option<&Checkpoint>,
    plan: Plan,
    mut report: RecoveryReport,
    mut producers: super::producers::LoadPlan,
) -> Result<Loaded, OpenError> {
    let fs = fs_arc.as_ref();
    // The leader-epoch file is no part of what the checkpoint vouches for: it is rewritten
    // (atomically) whatever the checkpoint says, and read again by every open.
    let untouched = old.is_some_and(|c| c.clean_shutdown)
        && untouched(inv, &plan, &report)
        && producers.changes_nothing();
    // A directory with no file of the log in it (a partition just created, or one whose files
    // a crash never made durable) opens with no write to sync: until the first change it needs
    // no recovery (a crash leaves it empty, with or without empty segment files), and the log
    // writes its checkpoint durably (the directory synced with it) before that change
    // (`Log::mark_unclean`), as after a clean open. This is what makes creating a partition
    // cost no fsync (docs/design.md, "Many partitions").
    // So does a log that a crash took before its first checkpoint: a fresh log's appends to
    // its one segment write none (`Log::mark_unclean_for_append`). Its one segment is read
    // from its start, cut at the first damage, and left without a checkpoint as it was found;
    // writing one here would cost two syncs a partition for nothing a later crash could use.
    let fresh = old.is_none()
        && (is_fresh(fs, dir, inv, &plan)? || one_segment_born_unflushed(fs, dir, inv, &plan)?);
    // 1. Swaps first (§8.2 step 4): they decide which segment files exist.
    let after_cut = complete_swaps(fs, dir, inv, &plan, &mut report)?;

    // 2. The intent checkpoint.
    let intent = plan.intent_checkpoint();
    if old != Some(&intent) && !untouched && !fresh {
        checkpoint::write(fs, dir, &intent)?;
    }

    // 3. What goes because of a cut, and snapshots.
    for d in after_cut {
        remove_segment_files(fs, dir, d, &mut report)?;
    }
    remove_orphan_indexes(fs, inv, &plan, &mut report)?;
    let aborted = std::mem::take(&mut producers.aborted);
    let completed = std::mem::take(&mut producers.completed);
    let (producers, producer_report) = producers.apply(fs, dir)?;

    // 4. The segments.
    let cfg = segment_config(config, fs_arc);
    let (sealed, active, rewrote_txn) =
        open_segments(dir, &cfg, &plan, &aborted, now_ms, &mut report)?;

    // 5. The result checkpoint, with what it records of each segment's bytes as opened (a
    //    `.txnindex` may have been rebuilt).
    let mut result = plan.result_checkpoint();
    if let Some(record) = result.segments.as_mut() {
        for (r, seg) in record.iter_mut().zip(&sealed) {
            r.digest = seg.seal_digest();
        }
    }
    if !untouched && !fresh {
        if result != intent {
            checkpoint::write(fs, dir, &result)?;
        }
        // The removals, creations and renames above are made durable here, unless there were
        // none: a crash whose recovery only cut the active segment's tail (synced by the cut)
        // changed no name, and its directory needs no sync (docs/design.md, "Many partitions").
        if rewrote_txn || inv.names_changed(fs, dir)? {
            fs.sync_dir(dir).ctx("fsync directory", dir)?;
        }
    }
    let log_end = active.segment().next_offset();
    Ok(Loaded {
        sealed,
        active,
        log_start_offset: plan.log_start_offset,
        recovery_point: result.recovery_point.min(log_end),
        report,
        producers,
        producer_report,
        high_watermark: plan.high_watermark,
        dense_from: plan.dense_from,
        epochs: LeaderEpochCache::default(),
        epochs_unwritten: false,
        clean_on_disk: untouched,
        completed,
        fresh,
    })
}

/// Completes the interrupted swaps, removes leftovers and the segments no checkpoint ever
/// recorded; returns the segments that go because of a cut, which wait for the intent
/// checkpoint.
fn complete_swaps<'p>(
    fs: &dyn FileSystem,
    dir: &Path,
    inv: &Inventory,
    plan: &'p Plan,
    report: &mut RecoveryReport,
) -> Result<Vec<&'p Doomed>, OpenError> {
    let swaps = &plan.swaps;
    for path in &swaps.superseded {
        fs.remove_file(path).ctx("remove", path)?;
        report.leftovers.push(path.clone());
    }
    for (from, to) in &swaps.renames {
        fs.rename(from, to).ctx("rename", from)?;
        report.leftovers.push(from.clone());
    }
    for path in inv.garbage.iter().chain(&swaps.discarded) {
        fs.remove_file(path).ctx("remove", path)?;
        report.leftovers.push(path.clone());
    }
    let (never_recorded, after_cut): (Vec<&Doomed>, Vec<&Doomed>) =
        plan.doomed.iter().partition(|d| d.unrecorded);
    for d in never_recorded {
        remove_segment_files(fs, dir, d, report)?;
    }
    if !swaps.superseded.is_empty() || !swaps.renames.is_empty() {
        fs.sync_dir(dir).ctx("fsync directory", dir)?;
    }
    Ok(after_cut)
}

/// Opens the kept segments: the sealed ones, and the active one (a new one at the log start
/// when none is kept). The flag says whether a `.txnindex` was rewritten in place (a rename
/// over its old name, which only a directory sync makes durable).
fn open_segments(
    dir: &Path,
    cfg: &SegmentConfig,
    plan: &Plan,
    aborted: &[AbortedTxn],
    now_ms: i64,
    report: &mut RecoveryReport,
) -> Result<(Vec<Arc<Segment>>, SegmentWriter, bool), OpenError> {
    let mut sealed = Vec::new();
    let mut active = None;
    let mut rewrote_txn = false;
    let last = plan.segments.len().saturating_sub(1);
    for (i, s) in plan.segments.iter().enumerate() {
        let next_base = plan.segments.get(i + 1).map_or(i64::MAX, |n| n.base);
        let rebuilt = markers_in(aborted, s.base, next_base);
        rewrote_txn |= s.txn == KeptTxn::Rebuild && !rebuilt.is_empty();
        let opened = open_segment(dir, cfg, s, i == last, rebuilt, now_ms, report)?;
        match opened {
            Opened::Sealed(seg) => {
                if let Some(h) = s.header_digest {
                    seg.set_header_digest(s.log_size, h);
                }
                sealed.push(seg)
            }
            Opened::Active(w) => active = Some(w),
        }
    }
    let active = match active {
        Some(w) => w,
        None => segment::create(dir, plan.log_start_offset, cfg, now_ms).map_err(segment_error)?,
    };
    Ok((sealed, active, rewrote_txn))
}

/// Whether the log's directory holds none of its files (no checkpoint, segment, index,
/// snapshot or leftover) and the plan starts it at offset 0: a log being born.
fn is_fresh(fs: &dyn FileSystem, dir: &Path, inv: &Inventory, plan: &Plan) -> Result<bool, IoError> {
    let nothing = inv.logs.is_empty()
        && inv.swaps.is_empty()
        && inv.index_swaps.is_empty()
        && inv.garbage.is_empty()
        && inv.indexes.is_empty()
        && inv.snapshots.is_empty()
        && plan.segments.is_empty()
        && plan.log_start_offset == 0;
    if !nothing {
        return Ok(false);
    }
    // A damaged checkpoint is not believed (`old` is none) but is still there: it is replaced.
    let cp = dir.join(checkpoint::FILE_NAME);
    Ok(!fs.exists(&cp).ctx("stat", &cp)?)
}

/// Whether the log's directory holds one segment at offset 0 with its indexes and nothing
/// else (no checkpoint, snapshot, swap or leftover): a fresh log that took appends and no
/// checkpoint before a crash, recovered as it is found.
fn one_segment_born_unflushed(
    fs: &dyn FileSystem,
    dir: &Path,
    inv: &Inventory,
    plan: &Plan,
) -> Result<bool, IoError> {
    let alone = inv.logs.len() == 1
        && inv.swaps.is_empty()
        && inv.index_swaps.is_empty()
        && inv.garbage.is_empty()
        && inv.snapshots.is_empty()
        && plan.doomed.is_empty()
        && plan.segments.len() == 1
        && plan.segments.iter().all(|s| s.base == 0)
        && plan.log_start_offset == 0;
    if !alone {
        return Ok(false);
    }
    let cp = dir.join(checkpoint::FILE_NAME);
    Ok(!fs.exists(&cp).ctx("stat", &cp)?)
}

/// Whether applying the plan leaves every file as it is: no leftover, swap, removal, cut or
/// index rebuild (the active segment's preallocation aside, which the checkpoint's record
/// tolerates).
fn untouched(inv: &Inventory, plan: &Plan, report: &RecoveryReport) -> bool {
    let live = |base: &i64| plan.segments.iter().any(|s| s.base == *base);
    inv.garbage.is_empty()
        && plan.swaps.superseded.is_empty()
        && plan.swaps.renames.is_empty()
        && plan.swaps.discarded.is_empty()
        && plan.doomed.is_empty()
        && report.truncations.is_empty()
        && inv.indexes.iter().all(|(base, _)| live(base))
        && plan
            .segments
            .iter()
            .all(|s| {
                s.rebuild.is_none()
                    && !s.log_changes()
                    && s.trust != Trust::Validated
                    && !s.rebuilds_txn_entries()
            })
}

/// The aborted transactions (in marker order) whose markers lie in `[from, to)`.
fn markers_in(aborted: &[AbortedTxn], from: i64, to: i64) -> &[AbortedTxn] {
    let start = aborted.partition_point(|e| e.last_offset < from);
    let end = aborted.partition_point(|e| e.last_offset < to);
    &aborted[start..end]
}

#[allow(clippy::too_many_arguments)]
fn open_segment(
    dir: &Path,
    cfg: &SegmentConfig,
    s: &KeptSegment,
    active: bool,
    rebuilt_txn: &[AbortedTxn],
    now_ms: i64,
    report: &mut RecoveryReport,
) -> Result<Opened, OpenError> {
    let indexes = match &s.rebuild {
        Some(batches) => IndexSource::Rebuild(batches),
        None => IndexSource::Stored,
    };
    if s.trust == Trust::Validated {
        report.indexes_rebuilt.push((
            names::file_path(dir, s.base, names::INDEX_EXT),
            "rebuilt by recovery".to_string(),
        ));
    }
    let txn = match &s.txn {
        KeptTxn::Stored(entries) => TxnSource::Stored(entries),
        KeptTxn::Rebuild => TxnSource::Rebuilt(rebuilt_txn),
    };
    let spec = OpenSpec {
        base_offset: s.base,
        log_size: s.log_size,
        active,
        indexes,
        tail: s.tail,
        txn,
    };
    let opened = segment::open(dir, cfg, spec, now_ms).map_err(segment_error)?;
    if s.trust == Trust::Validated {
        match &opened {
            Opened::Sealed(seg) => seg.mark_validated(),
            Opened::Active(w) => w.segment().mark_validated(),
        }
    }
    if let Opened::Sealed(seg) = &opened {
        // Recovery trimmed this segment or rebuilt its indexes in the page cache. The recovery
        // point will soon cover it and it is never flushed again, so it must be durable now, or
        // a second crash could bring back its old length or lose its index while it is trusted.
        if s.rebuild.is_some() || s.log_changes() {
            seg.flush_all()?;
        }
        seg.unpin();
    }
    Ok(opened)
}

/// Errors opening a segment that the plan already read: only I/O can fail here.
fn segment_error(e: OpenSegmentError) -> OpenError {
    match e {
        OpenSegmentError::Io(e) => OpenError::Io(e),
        other => OpenError::Io(IoError::new(
            "open segment",
            Path::new(""),
            std::io::Error::other(other.to_string()),
        )),
    }
}

/// Index files without a `.log` are leftovers of a deleted segment (§8.2 step 5).
fn remove_orphan_indexes(
    fs: &dyn FileSystem,
    inv: &Inventory,
    plan: &Plan,
    report: &mut RecoveryReport,
) -> Result<(), OpenError> {
    for (base, path) in &inv.indexes {
        let live = plan.segments.iter().any(|s| s.base == *base);
        if !live && !plan.swaps.superseded.contains(path) && fs.exists(path).ctx("stat", path)? {
            fs.remove_file(path).ctx("remove", path)?;
            report.leftovers.push(path.clone());
        }
    }
    Ok(())
}

fn remove_segment_files(
    fs: &dyn FileSystem,
    dir: &Path,
    doomed: &Doomed,
    report: &mut RecoveryReport,
) -> Result<(), OpenError> {
    for ext in [
        names::LOG_EXT,
        names::INDEX_EXT,
        names::TIME_INDEX_EXT,
        names::TXN_INDEX_EXT,
    ] {
        let path = names::file_path(dir, doomed.base, ext);
        if fs.exists(&path).ctx("stat", &path)? {
            fs.remove_file(&path).ctx("remove", &path)?;
        }
    }
    report
        .segments_deleted
        .push((doomed.path.clone(), doomed.reason.clone()));
    Ok(())
}
