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
    Log, LogConfig, OpenError, ProducerLoadReport, RecoveryMode, RecoveryReport, Truncation,
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
    // `Log::open` would create a missing directory: recovering a typo must not do that.
    crate::require_dir(&args.dir)?;
    let mode = RecoveryMode::from(args.mode);
    if crate::log_dir::is_log_dir(&args.dir) {
        return crate::log_dir::recover(&args.dir, mode, args.deep, args.threads, args.json);
    }
    let config = LogConfig {
        recovery_mode: mode,
        deep_recovery: args.deep,
        ..LogConfig::default()
    };
    let mut out = Out::stdout();
    let log = match Log::open(&args.dir, config) {
        Ok(log) => log,
        Err(e @ (OpenError::Refused { .. } | OpenError::BadCheckpoint(_))) => {
            print_refusal(&mut out, args.json, mode, &e)?;
            out.flush()?;
            return Ok(Status::Failed);
        }
        Err(e) => {
            return Err(CliError(format!(
                "cannot open the log in {}: {e}",
                args.dir.display()
            )))
        }
    };
    let report = Report::new(&args.dir, mode, &log);
    log.close()
        .map_err(|e| CliError(format!("closing the log in {}: {e}", args.dir.display())))?;
    if args.json {
        out.json(&report)?;
    } else {
        print_text(&mut out, &report)?;
    }
    out.flush()?;
    Ok(Status::Ok)
}

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
        OpenError::BadCheckpoint(bad) => Refusal {
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
        if matches!(e, OpenError::BadCheckpoint(b) if b.damaged) {
            out.line(
                "nothing was changed; a tolerant --mode validates the whole log instead of the \
                 damaged checkpoint",
            )?;
        } else if matches!(e, OpenError::BadCheckpoint(_)) {
            out.line("nothing was changed; remove the checkpoint to validate the whole log")?;
        } else {
            out.line("nothing was changed; a more tolerant --mode would cut the damaged bytes")?;
        }
    }
    Ok(())
}

impl Report {
    pub(crate) fn new(dir: &Path, mode: RecoveryMode, log: &Log) -> Report {
        let r: &RecoveryReport = log.recovery_report();
        let p: &ProducerLoadReport = log.producer_load_report();
        let reasons = |v: &[(PathBuf, String)]| {
            v.iter()
                .map(|(f, reason)| FileReason {
                    file: f.display().to_string(),
                    reason: reason.clone(),
                })
                .collect()
        };
        let names = |v: &[PathBuf]| v.iter().map(|f| f.display().to_string()).collect();
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
            log_start_offset: log.log_start_offset(),
            log_end_offset: log.log_end_offset(),
            segments: log.segment_count(),
        }
    }
}

fn print_text(out: &mut Out, r: &Report) -> Result<(), CliError> {
    out.line(&format!("recovered {} with mode {}", r.dir, r.mode))?;
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
    out.line(&format!(
        "log: offsets {}..{}, {}; closed cleanly",
        r.log_start_offset,
        r.log_end_offset,
        plural(r.segments as u64, "segment", "segments")
    ))?;
    Ok(())
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
