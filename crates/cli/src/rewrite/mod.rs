//! `oncelog truncate`, `oncelog delete-records` and `oncelog retention`: the library's rewrites
//! of a log run once from a shell, as an operator cuts a partition back by hand. Each opens the
//! log, does the one rewrite, closes cleanly and says what it removed.
//!
//! Two choices differ from a broker's open, both so that what is printed is all that happened:
//! - Recovery mode `absolute`: a rewrite must not also cut damage nobody has looked at, so a
//!   log that needs recovery is refused (exit 1, nothing changed); `oncelog recover` settles it
//!   first and says what it cut.
//! - `file_delete_delay_ms` 0: the files of a removed segment are renamed `.deleted` and
//!   deleted before the rewrite returns. `Log::close` leaves pending `.deleted` files to the
//!   next open (which removes them as leftovers), a one-shot process has no later moment, and
//!   it has no readers of its own for the delay to protect.
//!
//! A rewrite the library refuses (an offset outside what the log allows) changes nothing: it is
//! printed with its kind and the exit status is 1. A directory that holds no partition is
//! refused before anything is created in it (exit 2): `Log::open_existing`, not `Log::open`.

use std::path::Path;

use clap::builder::RangedI64ValueParser;
use oncelog::{EpochEntry, RewriteError};
use oncelog::{Log, LogConfig, OpenError, RecoveryMode};
use serde::Serialize;

use crate::output::Out;
use crate::{plural, CliError, Status};

mod compact;
mod retention;
mod truncate;

pub use compact::{run as run_compact, CompactArgs};
pub use retention::{run_delete_records, run_retention, DeleteRecordsArgs, RetentionArgs};
pub use truncate::{run as run_truncate, TruncateArgs};

/// An offset or a wall clock in ms: never negative.
fn non_negative() -> RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(0..)
}

/// A retention limit: a size or an age, or Kafka's -1 for none.
fn limit_value() -> RangedI64ValueParser<i64> {
    clap::value_parser!(i64).range(-1..)
}

/// The rewrite asked for, as the library names it (JSON `operation`) and as it was typed.
#[derive(Debug, Clone, Copy)]
enum Op {
    TruncateTo(i64),
    StartAt(i64),
    DeleteRecords(i64),
    Retention,
    Compact,
}

impl Op {
    fn name(self) -> &'static str {
        match self {
            Op::TruncateTo(_) => "truncate_to",
            Op::StartAt(_) => "truncate_fully_and_start_at",
            Op::DeleteRecords(_) => "delete_records",
            Op::Retention => "retention",
            Op::Compact => "compact",
        }
    }

    fn offset(self) -> Option<i64> {
        match self {
            Op::TruncateTo(o) | Op::StartAt(o) | Op::DeleteRecords(o) => Some(o),
            Op::Retention | Op::Compact => None,
        }
    }

    fn command(self) -> String {
        match self {
            Op::TruncateTo(o) => format!("truncate --to {o}"),
            Op::StartAt(o) => format!("truncate --start-at {o}"),
            Op::DeleteRecords(o) => format!("delete-records --before {o}"),
            Op::Retention => "retention".to_string(),
            Op::Compact => "compact".to_string(),
        }
    }
}

/// A rewrite, or the open before it, that was refused or stopped by damage.
#[derive(Serialize)]
struct Stopped {
    /// True when nothing was changed; false when damage stopped the rewrite, possibly part way
    /// (the next open's recovery settles it).
    refused: bool,
    operation: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    /// The library's stable name for what stopped it (`above_log_end`, `refused`, ...).
    error: &'static str,
    message: String,
    /// The log's bounds; `null` when it could not be opened.
    log_start_offset: Option<i64>,
    log_end_offset: Option<i64>,
    high_watermark: Option<i64>,
}

#[derive(Serialize)]
struct Epoch {
    epoch: i32,
    start_offset: i64,
}

/// Opens the log for one rewrite, or prints why it cannot be and returns `None` (exit 1).
fn open(
    dir: &Path,
    config: LogConfig,
    op: Op,
    out: &mut Out,
    json: bool,
) -> Result<Option<Log>, CliError> {
    // A typo must not become an empty log: `open_existing` refuses a directory that holds no
    // partition (exit 2) and creates nothing.
    crate::require_dir(dir)?;
    let config = config
        .into_builder()
        .recovery_mode(RecoveryMode::AbsoluteConsistency)
        .file_delete_delay_ms(0)
        .build()?;
    let e = match Log::open_existing(dir, config) {
        Ok(log) => return Ok(Some(log)),
        Err(OpenError::Locked { holder, .. }) => {
            return Err(CliError(format!(
                "{}: the log is open in another process ({holder}); nothing was changed",
                dir.display()
            )))
        }
        Err(e @ (OpenError::Refused { .. } | OpenError::BadMetadataFile(_))) => e,
        Err(e) => return Err(crate::open_failure(dir, &e)),
    };
    let stopped = Stopped {
        refused: true,
        operation: op.name(),
        offset: op.offset(),
        error: e.kind(),
        message: e.to_string(),
        log_start_offset: None,
        log_end_offset: None,
        high_watermark: None,
    };
    let hint = match e {
        OpenError::Refused { .. } => format!(
            "nothing was changed; the log needs recovery first: `oncelog recover {}` cuts the \
             damage and says what it cut",
            dir.display()
        ),
        _ => "nothing was changed".to_string(),
    };
    print_stopped(out, json, op, &stopped, &hint)?;
    out.flush()?;
    Ok(None)
}

/// A rewrite the library refused, or stopped by damage: printed, exit 1. Any other failure
/// (I/O) is exit 2.
fn failed(
    log: Log,
    dir: &Path,
    op: Op,
    e: RewriteError,
    out: &mut Out,
    json: bool,
) -> Result<Status, CliError> {
    let mut stopped = Stopped {
        refused: true,
        operation: op.name(),
        offset: op.offset(),
        error: e.kind(),
        message: e.to_string(),
        log_start_offset: Some(log.log_start_offset()),
        log_end_offset: Some(log.log_end_offset()),
        high_watermark: Some(log.high_watermark()),
    };
    // An I/O error over bytes that are damaged (`InvalidData`) is damage found, not a failure
    // of the machine.
    let damage_found = match &e {
        RewriteError::Io(io) => io.source.kind() == std::io::ErrorKind::InvalidData,
        RewriteError::ReadOnly { cause } => cause.source.kind() == std::io::ErrorKind::InvalidData,
        _ => false,
    };
    let hint = match e {
        RewriteError::BelowLogStart { .. }
        | RewriteError::AboveLogEnd { .. }
        | RewriteError::AboveHighWatermark { .. }
        | RewriteError::CompactionCorrupt { .. }
        | RewriteError::KeyMapTooSmall { .. } => {
            close(log, dir)?;
            "nothing was changed".to_string()
        }
        _ if damage_found => {
            // Damage in bytes a clean open did not read (the last segment's tail), found before
            // the first change: the log went read-only, and the next open's recovery settles it.
            stopped.refused = false;
            drop(log);
            format!(
                "the log is damaged: `oncelog verify {}` lists it, `oncelog recover` cuts it",
                dir.display()
            )
        }
        RewriteError::Corrupt(_) => {
            // The rewrite may have stopped part way; then the log is read-only and its close
            // a best effort that leaves the rest to the next open's recovery.
            stopped.refused = false;
            drop(log);
            format!(
                "a batch the log trusted is damaged: `oncelog verify {}` lists it, `oncelog \
                 recover` cuts it",
                dir.display()
            )
        }
        e => {
            return Err(CliError(format!(
                "{} in {}: {e} ({})",
                op.command(),
                dir.display(),
                e.kind()
            )))
        }
    };
    print_stopped(out, json, op, &stopped, &hint)?;
    out.flush()?;
    Ok(Status::Failed)
}

fn print_stopped(
    out: &mut Out,
    json: bool,
    op: Op,
    stopped: &Stopped,
    hint: &str,
) -> Result<(), CliError> {
    if json {
        out.json(stopped)?;
    } else {
        out.line(&format!(
            "{} {}: {} ({})",
            if stopped.refused { "REFUSED" } else { "FAILED" },
            op.command(),
            stopped.message,
            stopped.error
        ))?;
        out.line(hint)?;
    }
    Ok(())
}

fn close(log: Log, dir: &Path) -> Result<(), CliError> {
    log.close()
        .map_err(|e| CliError(format!("closing the log in {}: {e}", dir.display())))
}

fn epochs(entries: Vec<EpochEntry>) -> Vec<Epoch> {
    entries
        .into_iter()
        .map(|e| Epoch {
            epoch: e.epoch,
            start_offset: e.start_offset,
        })
        .collect()
}

fn print_snapshots_removed(out: &mut Out, removed: &[i64]) -> Result<(), CliError> {
    if !removed.is_empty() {
        out.line(&format!(
            "removed {} ({})",
            plural(removed.len() as u64, "snapshot", "snapshots"),
            offsets(removed)
        ))?;
    }
    Ok(())
}

fn print_log(
    out: &mut Out,
    epochs: &[Epoch],
    start: i64,
    end: i64,
    segments: usize,
) -> Result<(), CliError> {
    let epochs: Vec<String> = epochs
        .iter()
        .map(|e| format!("{} from {}", e.epoch, e.start_offset))
        .collect();
    out.line(&format!(
        "leader epochs: {}",
        if epochs.is_empty() {
            "none".to_string()
        } else {
            epochs.join(", ")
        }
    ))?;
    out.line(&format!(
        "log: offsets {start}..{end}, {}; closed cleanly",
        plural(segments as u64, "segment", "segments")
    ))?;
    Ok(())
}

/// "offset 17", "offsets 40, 60".
fn offsets(list: &[i64]) -> String {
    let joined: Vec<String> = list.iter().map(i64::to_string).collect();
    let word = if list.len() == 1 { "offset" } else { "offsets" };
    format!("{word} {}", joined.join(", "))
}
