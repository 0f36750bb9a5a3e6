//! A recovery planned and not carried out ([`crate::Log::preview_recovery`]): the plan an open
//! would apply, told as the report the open would give, with nothing written, renamed or
//! removed. The planner reads only (it was built so that a refusing mode changes nothing), so
//! the preview is the plan itself, not a second reading of the directory.

use std::path::{Path, PathBuf};

use super::inventory::Inventory;
use super::plan::Trust;
use super::{plan_open, removed, untouched, Effect, Planned};
use crate::io::FileSystem;
use crate::log::checkpoint::Checkpoint;
use crate::log::config::LogConfig;
use crate::log::epochs::EpochEntry;
use crate::log::error::OpenError;
use crate::log::producers::ProducerLoadReport;
use crate::log::recovery::RecoveryReport;
use crate::segment::names;

/// What opening the log would do, decided without changing a file.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub struct RecoveryPreview {
    /// The report the open would give: cuts (`truncations`), segments it would delete,
    /// indexes it would rebuild, leftovers it would remove or rename into place, and the data
    /// all of that removes (`removed`, [`RecoveryReport::removed_totals`]).
    pub report: RecoveryReport,
    /// How the producer state would be loaded; `quarantined` names the snapshots that would be
    /// set aside by their present names, `removed_above_end` those that would be removed.
    pub producers: ProducerLoadReport,
    /// The log start offset after recovery.
    pub log_start_offset: i64,
    /// The log end offset after recovery.
    pub log_end_offset: i64,
    /// The recovery point after recovery.
    pub recovery_point: i64,
    /// Segments of the log after recovery (an empty log gets one).
    pub segments: usize,
    /// The `leader-epoch-checkpoint` entries recovery would write; `None` if it is kept as is.
    pub epochs_rewritten: Option<Vec<EpochEntry>>,
    /// Whether the open would write any file (the checkpoint at least): `false` only for a
    /// clean close whose files are as its checkpoint records them.
    pub writes: bool,
}

/// Plans the recovery of `dir` as [`super::open`] would and reports it, changing nothing (not
/// even the lock file: a directory a live log holds is refused, one without a lock file is
/// not locked).
pub(crate) fn preview(
    fs: &dyn FileSystem,
    dir: &Path,
    config: &LogConfig,
    now_ms: i64,
) -> Result<RecoveryPreview, OpenError> {
    let Planned {
        inv,
        cp,
        plan,
        mut report,
        producers,
        epochs,
    } = plan_open(
        fs,
        dir,
        config,
        now_ms,
        None,
        super::super::Exclusion::LogDir,
        Effect::Preview,
    )?;
    report.removed = removed::measure(fs, &report, &plan)?;
    let writes = !(cp.as_ref().is_some_and(|c| c.clean_shutdown)
        && untouched(&inv, &plan, &report)
        && producers.changes_nothing())
        || epochs.changed.is_some();
    // What `apply` adds to the report as it goes, in its order.
    let swaps = &plan.swaps;
    report.leftovers.extend(swaps.superseded.iter().cloned());
    report
        .leftovers
        .extend(swaps.renames.iter().map(|(from, _)| from.clone()));
    report
        .leftovers
        .extend(inv.garbage.iter().chain(&swaps.discarded).cloned());
    report.segments_deleted.extend(
        plan.doomed
            .iter()
            .map(|d| (d.path.clone(), d.reason.clone())),
    );
    for (base, path) in &inv.indexes {
        let live = plan.segments.iter().any(|s| s.base == *base);
        // A deleted segment's indexes go with it, before orphans are looked for.
        let doomed = plan.doomed.iter().any(|d| d.base == *base);
        if !live && !doomed && !swaps.superseded.contains(path) {
            report.leftovers.push(path.clone());
        }
    }
    for s in plan.segments.iter().filter(|s| s.trust == Trust::Validated) {
        report.indexes_rebuilt.push((
            names::file_path(dir, s.base, names::INDEX_EXT),
            "rebuilt by recovery".to_string(),
        ));
    }
    Ok(RecoveryPreview {
        producers: producers.preview_report(),
        log_start_offset: plan.log_start_offset,
        log_end_offset: plan.log_end(),
        recovery_point: plan.result_checkpoint().recovery_point.min(plan.log_end()),
        segments: plan.segments.len().max(1),
        epochs_rewritten: epochs.changed.map(|c| c.entries().to_vec()),
        writes,
        report,
    })
}

/// The inventory and checkpoint a full truncation a crash interrupted after its commit point
/// leaves once it is completed ([`super::finish_start_over`]), planned without removing
/// anything: its segment files listed as deleted, and no segment, index or snapshot left.
pub(super) fn start_over(
    inv: &mut Inventory,
    c: &Checkpoint,
    deleted: &mut Vec<(PathBuf, String)>,
) -> Checkpoint {
    let at = c.start_over_at.unwrap_or(c.log_start_offset);
    let reason = format!("removed by a full truncation to {at}");
    let segment_files = inv
        .logs
        .values()
        .map(|f| &f.path)
        .chain(inv.swaps.iter().map(|s| &s.file.path));
    for path in segment_files {
        deleted.push((path.clone(), reason.clone()));
    }
    inv.logs.clear();
    inv.swaps.clear();
    inv.index_swaps.clear();
    inv.indexes.clear();
    inv.snapshots.clear();
    Checkpoint {
        start_over_at: None,
        ..c.clone()
    }
}
