//! `oncelog recover DIR [--mode ...]`: opens the log with a recovery mode, as a broker would on
//! start, reports everything recovery validated, cut, rebuilt and removed and how the producer
//! state was loaded, and closes cleanly.
//!
//! When the mode refuses (damage it may not cut), `Log::open` changes nothing on disk; the
//! refusal is printed with the file, byte position and damage, and the exit status is 1, so an
//! operator can look (`verify`, `dump`) before choosing a more tolerant mode.

use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use oncelog::{
    Log, LogConfig, MetadataFile, OpenError, ProducerLoadReport, RecoveryMode, RecoveryPreview,
    RecoveryReport, RemovedData, Truncation,
};
use serde::Serialize;

use crate::output::Out;
use crate::{plural, CliError, Status};

#[derive(Debug, Args)]
pub struct RecoverArgs {
    /// What recovery may cut: `tolerate-tail` (a damaged tail after the recovery point),
    /// `tolerate-any` (everything from the first bad batch anywhere), `absolute` (nothing:
    /// any damage is refused).
    #[arg(long, value_enum, default_value_t = Mode::TolerateTail)]
    mode: Mode,
    /// Validate every batch of every segment, even those a clean checkpoint vouches for
    /// (by default they are held to the checkpoint's record without being read).
    #[arg(long)]
    deep: bool,
    /// Print the report as one JSON object (one per partition, then a summary, for a log dir).
    #[arg(long)]
    json: bool,
    /// For a log dir: threads opening partitions in parallel (default: the machine's).
    #[arg(long)]
    threads: Option<usize>,
    /// Print what recovery would cut, delete, rebuild and remove, with the totals (batches,
    /// records and bytes removed, the new log end), and change nothing. Exits as the recovery
    /// would: 0, 1 (refused) or 3 (would remove data). A partition directory only.
    #[arg(long, conflicts_with = "backup")]
    dry_run: bool,
    /// Copy every file of the partition directory into BACKUP (created; it must be absent or
    /// empty, and outside the partition directory) before recovery changes anything; copying
    /// the files back restores the directory as it was. A partition directory only.
    #[arg(long, value_name = "BACKUP")]
    backup: Option<PathBuf>,
    /// A partition directory, or a whole log dir (every partition, as a log manager opens it).
    dir: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum Mode {
    TolerateTail,
    TolerateAny,
    Absolute,
}

impl From<Mode> for RecoveryMode {
    fn from(m: Mode) -> RecoveryMode {
        match m {
            Mode::TolerateTail => RecoveryMode::TolerateTailCorruption,
            Mode::TolerateAny => RecoveryMode::TolerateAnyCorruption,
            Mode::Absolute => RecoveryMode::AbsoluteConsistency,
        }
    }
}

#[derive(Serialize)]
pub(crate) struct Report {
    dir: String,
    mode: &'static str,
    clean_shutdown: bool,
    checkpoint_found: bool,
    /// The checkpoint failed its checksum: it was set aside, everything was validated, and a
    /// new one written.
    checkpoint_damaged: Option<String>,
    segments_recorded: bool,
    deep: bool,
    recovery_point: i64,
    segments_validated: usize,
    bytes_validated: u64,
    truncations: Vec<Cut>,
    segments_deleted: Vec<FileReason>,
    indexes_rebuilt: Vec<FileReason>,
    leftovers: Vec<String>,
    producer_state: ProducerState,
    log_start_offset: i64,
    log_end_offset: i64,
    segments: usize,
    /// The data the cuts and deletions removed, file by file.
    removed: Vec<Removed>,
    removed_totals: Totals,
    /// Whether data was removed (or offsets that were durable found gone): exit 3.
    data_removed: bool,
    /// A `--dry-run`: what recovery would do; nothing was changed.
    dry_run: bool,
    /// `--dry-run`: the `leader-epoch-checkpoint` entries recovery would write (`null`: kept).
    #[serde(skip_serializing_if = "Option::is_none")]
    epochs_rewritten: Option<Vec<(i32, i64)>>,
    /// `--dry-run`: whether recovery would write any file.
    #[serde(skip_serializing_if = "Option::is_none")]
    writes: Option<bool>,
}

#[derive(Serialize)]
struct Removed {
    file: String,
    /// Where the removed bytes start (0: the whole file).
    position: usize,
    batches: u64,
    records: u64,
    bytes: u64,
    /// First and last offsets the removed batches' headers name.
    offsets: Option<(i64, i64)>,
}

impl Removed {
    fn new(r: &RemovedData) -> Removed {
        Removed {
            file: r.path.display().to_string(),
            position: r.position,
            batches: r.batches,
            records: r.records,
            bytes: r.bytes,
            offsets: r.offsets,
        }
    }
}

#[derive(Serialize)]
struct Totals {
    batches: u64,
    records: u64,
    bytes: u64,
}

#[derive(Serialize)]
struct Cut {
    file: String,
    /// Bytes kept: the file now ends here.
    position: usize,
    /// Bytes removed, preallocated zeros included.
    bytes_cut: usize,
    file_len: usize,
    damage: String,
}

impl Cut {
    fn new(t: &Truncation) -> Cut {
        Cut {
            file: t.path.display().to_string(),
            position: t.position,
            bytes_cut: t.file_len.saturating_sub(t.position),
            file_len: t.file_len,
            damage: t.damage.to_string(),
        }
    }
}

#[derive(Serialize)]
struct FileReason {
    file: String,
    reason: String,
}

#[derive(Serialize)]
struct ProducerState {
    /// The snapshot loaded; `null` when the producer state was replayed from the log start.
    snapshot_offset: Option<i64>,
    batches_replayed: u64,
    producers: usize,
    quarantined: Vec<FileReason>,
    removed_above_end: Vec<i64>,
}

#[derive(Serialize)]
struct Refusal {
    refused: bool,
    mode: &'static str,
    file: String,
    /// Byte position in the file, or the line of a bad checkpoint; `null` for a whole file.
    position: Option<usize>,
    line: Option<usize>,
    damage: String,
    damage_kind: &'static str,
    message: String,
}

pub fn run(args: &RecoverArgs) -> Result<Status, CliError> {
    // A typo must not become a new empty log: the log is opened with `open_existing`, which
    // refuses a directory that holds no partition (exit 2) and creates nothing.
    crate::require_dir(&args.dir)?;
    let mode = RecoveryMode::from(args.mode);
    if crate::log_dir::is_log_dir(&args.dir) {
        if args.dry_run || args.backup.is_some() {
            return Err(CliError(format!(
                "{}: a log dir; --dry-run and --backup take one partition directory",
                args.dir.display()
            )));
        }
        return crate::log_dir::recover(&args.dir, mode, args.deep, args.threads, args.json);
    }
    crate::require_partition(&args.dir)?;
    let config = LogConfig::builder()
        .recovery_mode(mode)
        .deep_recovery(args.deep)
        .build()?;
    let mut out = Out::stdout();
    if args.dry_run {
        return match Log::preview_recovery(&args.dir, config) {
            Ok(preview) => {
                let report = Report::preview(&args.dir, mode, &preview);
                print_report(&mut out, args.json, &report)?;
                out.flush()?;
                Ok(status(&report))
            }
            Err(e) => refused_or_failed(&mut out, args, mode, &e),
        };
    }
    if let Some(backup) = &args.backup {
        let (files, bytes) = backup_dir(&args.dir, backup)?;
        if !args.json {
            out.line(&format!(
                "backed up {} ({bytes} bytes) of {} to {}",
                plural(files, "file", "files"),
                args.dir.display(),
                backup.display()
            ))?;
        }
    }
    let log = match Log::open_existing(&args.dir, config) {
        Ok(log) => log,
        Err(e) => return refused_or_failed(&mut out, args, mode, &e),
    };
    let report = Report::new(&args.dir, mode, &log);
    log.close()
        .map_err(|e| CliError(format!("closing the log in {}: {e}", args.dir.display())))?;
    print_report(&mut out, args.json, &report)?;
    out.flush()?;
    Ok(status(&report))
}

/// 3 when data was removed, else 0.
fn status(r: &Report) -> Status {
    match r.data_removed {
        true => Status::DataRemoved,
        false => Status::Ok,
    }
}

fn print_report(out: &mut Out, json: bool, report: &Report) -> Result<(), CliError> {
    if json {
        out.json(report)?;
    } else {
        print_text(out, report)?;
    }
    Ok(())
}

/// Damage the open refused: printed, exit 1, nothing changed. Anything else could not run:
/// exit 2.
fn refused_or_failed(
    out: &mut Out,
    args: &RecoverArgs,
    mode: RecoveryMode,
    e: &OpenError,
) -> Result<Status, CliError> {
    if !crate::is_damage(e) {
        return Err(crate::open_failure(&args.dir, e));
    }
    print_refusal(out, args.json, mode, e)?;
    out.flush()?;
    Ok(Status::Failed)
}

/// Copies every regular file of `dir` into `to` (created; absent or empty, and not inside
/// `dir`), each synced, then `to` itself: a backup that survives a crash of the recovery it
/// precedes. The lock file is not part of the log and is left out. Returns the files and
/// bytes copied.
fn backup_dir(dir: &Path, to: &Path) -> Result<(u64, u64), CliError> {
    let fail = |what: &str, path: &Path, e: std::io::Error| {
        CliError(format!(
            "backup: {what} {}: {}; nothing was changed",
            path.display(),
            crate::io_reason(&e)
        ))
    };
    let dir_abs = std::fs::canonicalize(dir).map_err(|e| fail("resolve", dir, e))?;
    if to.exists() {
        let mut entries = std::fs::read_dir(to).map_err(|e| fail("read", to, e))?;
        if entries.next().is_some() {
            return Err(CliError(format!(
                "backup: {} is not empty; nothing was changed",
                to.display()
            )));
        }
    }
    // Where `to` will be, resolved through its deepest existing ancestor, judged before
    // anything is created.
    let mut existing = to;
    let mut rest = Vec::new();
    while !existing.exists() {
        match (existing.parent(), existing.file_name()) {
            (Some(parent), Some(name)) => {
                rest.push(name);
                existing = if parent.as_os_str().is_empty() {
                    Path::new(".")
                } else {
                    parent
                };
            }
            _ => break,
        }
    }
    let mut to_abs = std::fs::canonicalize(existing).map_err(|e| fail("resolve", existing, e))?;
    to_abs.extend(rest.iter().rev());
    if to_abs.starts_with(&dir_abs) {
        return Err(CliError(format!(
            "backup: {} is inside the partition directory; nothing was changed",
            to.display()
        )));
    }
    std::fs::create_dir_all(to).map_err(|e| fail("create", to, e))?;
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .map_err(|e| fail("read", dir, e))?
        .collect::<Result<_, _>>()
        .map_err(|e| fail("read", dir, e))?;
    names.sort_by_key(|e| e.file_name());
    let (mut files, mut bytes) = (0u64, 0u64);
    for entry in names {
        let kind = entry
            .file_type()
            .map_err(|e| fail("stat", &entry.path(), e))?;
        if !kind.is_file() || entry.file_name() == LOCK_FILE {
            continue;
        }
        let target = to.join(entry.file_name());
        bytes +=
            std::fs::copy(entry.path(), &target).map_err(|e| fail("copy", &entry.path(), e))?;
        std::fs::File::open(&target)
            .and_then(|f| f.sync_all())
            .map_err(|e| fail("sync", &target, e))?;
        files += 1;
    }
    std::fs::File::open(to)
        .and_then(|f| f.sync_all())
        .map_err(|e| fail("sync", to, e))?;
    Ok((files, bytes))
}

/// A standalone log's lock file: held by whoever has the log open, no part of its data.
const LOCK_FILE: &str = "oncelog.lock";

fn print_refusal(
    out: &mut Out,
    json: bool,
    mode: RecoveryMode,
    e: &OpenError,
) -> Result<(), CliError> {
    let refusal = match e {
        OpenError::Refused {
            path,
            position,
            damage,
            mode,
        } => Refusal {
            refused: true,
            mode: mode.name(),
            file: path.display().to_string(),
            position: *position,
            line: None,
            damage: damage.to_string(),
            damage_kind: damage.kind(),
            message: e.to_string(),
        },
        // The checkpoint or the leader-epoch-checkpoint.
        OpenError::BadMetadataFile(bad) => Refusal {
            refused: true,
            mode: mode.name(),
            file: bad.path.display().to_string(),
            position: None,
            line: bad.line,
            damage: bad.reason.clone(),
            damage_kind: bad.kind(),
            message: e.to_string(),
        },
        _ => return Ok(()),
    };
    if json {
        out.json(&refusal)?;
    } else {
        let at = match (refusal.position, refusal.line) {
            (Some(p), _) => format!(": byte {p}"),
            (None, Some(l)) => format!(": line {l}"),
            (None, None) => String::new(),
        };
        out.line(&format!(
            "REFUSED by mode {}: {}{at}: {}",
            refusal.mode, refusal.file, refusal.damage
        ))?;
        // Only the checkpoint is ever damaged (its checksum): a whole file is refused in
        // every mode.
        let advice = match e {
            OpenError::BadMetadataFile(b) if b.damaged => {
                "nothing was changed; a tolerant --mode validates the whole log instead of the \
                 damaged checkpoint"
            }
            OpenError::BadMetadataFile(b) if b.file == MetadataFile::Checkpoint => {
                "nothing was changed; remove the checkpoint to validate the whole log"
            }
            OpenError::BadMetadataFile(_) => {
                "nothing was changed; remove the leader-epoch-checkpoint to rebuild it from the \
                 batches"
            }
            _ => "nothing was changed; a more tolerant --mode would cut the damaged bytes",
        };
        out.line(advice)?;
    }
    Ok(())
}

impl Report {
    pub(crate) fn new(dir: &Path, mode: RecoveryMode, log: &Log) -> Report {
        Report::from_parts(
            dir,
            mode,
            log.recovery_report(),
            log.producer_load_report(),
            (log.log_start_offset(), log.log_end_offset()),
            log.maintenance().segment_count(),
        )
    }

    /// What a `--dry-run` found: the report the recovery would give.
    fn preview(dir: &Path, mode: RecoveryMode, p: &RecoveryPreview) -> Report {
        let mut r = Report::from_parts(
            dir,
            mode,
            &p.report,
            &p.producers,
            (p.log_start_offset, p.log_end_offset),
            p.segments,
        );
        r.dry_run = true;
        r.epochs_rewritten = p
            .epochs_rewritten
            .as_ref()
            .map(|v| v.iter().map(|e| (e.epoch, e.start_offset)).collect());
        r.writes = Some(p.writes);
        r
    }

    fn from_parts(
        dir: &Path,
        mode: RecoveryMode,
        r: &RecoveryReport,
        p: &ProducerLoadReport,
        (log_start_offset, log_end_offset): (i64, i64),
        segments: usize,
    ) -> Report {
        let reasons = |v: &[(PathBuf, String)]| {
            v.iter()
                .map(|(f, reason)| FileReason {
                    file: f.display().to_string(),
                    reason: reason.clone(),
                })
                .collect()
        };
        let names = |v: &[PathBuf]| v.iter().map(|f| f.display().to_string()).collect();
        let totals = r.removed_totals();
        Report {
            dir: dir.display().to_string(),
            mode: mode.name(),
            clean_shutdown: r.clean_shutdown,
            checkpoint_found: r.checkpoint_found,
            checkpoint_damaged: r.checkpoint_damaged.clone(),
            segments_recorded: r.segments_recorded,
            deep: r.deep,
            recovery_point: r.recovery_point,
            segments_validated: r.segments_validated,
            bytes_validated: r.bytes_validated,
            truncations: r.truncations.iter().map(Cut::new).collect(),
            segments_deleted: reasons(&r.segments_deleted),
            indexes_rebuilt: reasons(&r.indexes_rebuilt),
            leftovers: names(&r.leftovers),
            producer_state: ProducerState {
                snapshot_offset: p.snapshot_offset,
                batches_replayed: p.batches_replayed,
                producers: p.producers,
                quarantined: reasons(&p.quarantined),
                removed_above_end: p.removed_above_end.clone(),
            },
            log_start_offset,
            log_end_offset,
            segments,
            removed: r.removed.iter().map(Removed::new).collect(),
            removed_totals: Totals {
                batches: totals.batches,
                records: totals.records,
                bytes: totals.bytes,
            },
            data_removed: r.removes_data(),
            dry_run: false,
            epochs_rewritten: None,
            writes: None,
        }
    }

    /// Whether this partition's recovery removed data (exit 3).
    pub(crate) fn data_removed(&self) -> bool {
        self.data_removed
    }
}

fn print_text(out: &mut Out, r: &Report) -> Result<(), CliError> {
    if r.dry_run {
        out.line(&format!(
            "DRY RUN: recovery of {} with mode {} would do this; nothing was changed",
            r.dir, r.mode
        ))?;
    } else {
        out.line(&format!("recovered {} with mode {}", r.dir, r.mode))?;
    }
    let shutdown = match (r.checkpoint_found, r.clean_shutdown, r.segments_recorded) {
        (true, true, true) => "clean: segments held to the checkpoint's record, not read",
        (true, true, false) => {
            "clean (old checkpoint without a segment record): everything was validated"
        }
        (true, false, true) => {
            "unclean: segments the checkpoint vouches for held to its record, the rest validated"
        }
        (true, false, false) => {
            "unclean (old checkpoint without a segment record): everything was validated"
        }
        (false, _, _) => "unknown (no checkpoint): everything was validated",
    };
    out.line(&format!("last shutdown: {shutdown}"))?;
    if r.deep {
        out.line("deep: every segment was validated")?;
    }
    out.line(&format!(
        "recovery point {}; validated {}, {} bytes of batches",
        r.recovery_point,
        plural(r.segments_validated as u64, "segment", "segments"),
        r.bytes_validated
    ))?;
    for line in detail_lines(r) {
        out.line(&line)?;
    }
    let p = &r.producer_state;
    let source = match p.snapshot_offset {
        Some(offset) => format!("snapshot at offset {offset}"),
        None => "no snapshot, replayed from the log start".to_string(),
    };
    out.line(&format!(
        "producer state: {source}; {} replayed; {}",
        plural(p.batches_replayed, "batch header", "batch headers"),
        plural(p.producers as u64, "producer", "producers")
    ))?;
    for q in &p.quarantined {
        out.line(&format!(
            "QUARANTINED snapshot {}: {} (renamed aside)",
            q.file, q.reason
        ))?;
    }
    for offset in &p.removed_above_end {
        out.line(&format!(
            "REMOVED snapshot at offset {offset}: above the log end"
        ))?;
    }
    if let Some(epochs) = &r.epochs_rewritten {
        let entries: Vec<String> = epochs
            .iter()
            .map(|(epoch, start)| format!("{epoch} from {start}"))
            .collect();
        out.line(&format!(
            "REWRITE leader-epoch-checkpoint: {}",
            if entries.is_empty() {
                "no entries".to_string()
            } else {
                entries.join(", ")
            }
        ))?;
    }
    for line in totals_lines(r) {
        out.line(&line)?;
    }
    if r.dry_run {
        out.line(&format!(
            "log would be: offsets {}..{}, {}; {}",
            r.log_start_offset,
            r.log_end_offset,
            plural(r.segments as u64, "segment", "segments"),
            match r.writes {
                Some(false) => "recovery would write no file",
                _ => "nothing was changed (--dry-run)",
            }
        ))?;
    } else {
        out.line(&format!(
            "log: offsets {}..{}, {}; closed cleanly",
            r.log_start_offset,
            r.log_end_offset,
            plural(r.segments as u64, "segment", "segments")
        ))?;
    }
    Ok(())
}

/// What the cuts and deletions removed, file by file, and the totals with the new log end.
pub(crate) fn totals_lines(r: &Report) -> Vec<String> {
    let verb = if r.dry_run { "WOULD REMOVE" } else { "REMOVED" };
    let mut lines = Vec::new();
    for d in &r.removed {
        let offsets = d
            .offsets
            .map(|(lo, hi)| format!(", offsets {lo}..={hi}"))
            .unwrap_or_default();
        lines.push(format!(
            "{verb} from {} at byte {}: {}, {}, {} bytes{offsets}",
            d.file,
            d.position,
            plural(d.batches, "batch", "batches"),
            plural(d.records, "record", "records"),
            d.bytes
        ));
    }
    let t = &r.removed_totals;
    let end = if r.dry_run {
        format!("the log would end at offset {}", r.log_end_offset)
    } else {
        format!("the log now ends at offset {}", r.log_end_offset)
    };
    if r.data_removed {
        lines.push(format!(
            "DATA REMOVED: {}, {}, {} bytes; {end}",
            plural(t.batches, "batch", "batches"),
            plural(t.records, "record", "records"),
            t.bytes
        ));
    } else {
        lines.push(format!("data removed: none; {end}"));
    }
    lines
}

/// What recovery cut, deleted, rebuilt and finished: one line each.
pub(crate) fn detail_lines(r: &Report) -> Vec<String> {
    let mut lines = Vec::new();
    if let Some(reason) = &r.checkpoint_damaged {
        lines.push(format!(
            "DAMAGED checkpoint, not used (everything was validated; a new one was written; \
             the log now starts at its first segment): {reason}"
        ));
    }
    for c in &r.truncations {
        lines.push(format!(
            "CUT {} at byte {}: {} bytes removed (file was {} bytes): {}",
            c.file, c.position, c.bytes_cut, c.file_len, c.damage
        ));
    }
    for f in &r.segments_deleted {
        lines.push(format!("DELETED {}: {}", f.file, f.reason));
    }
    for f in &r.indexes_rebuilt {
        lines.push(format!("REBUILT {}: {}", f.file, f.reason));
    }
    for f in &r.leftovers {
        lines.push(format!(
            "LEFTOVER {f} of an interrupted operation, finished"
        ));
    }
    lines
}
