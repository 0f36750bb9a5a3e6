//! `oncelog delete-records DIR --before OFFSET` and `oncelog retention DIR`: the log cut from
//! the front, whole segments at a time (`Log::delete_records`, `Maintenance::enforce_retention`). The
//! producer state is kept: dedup outlives the data.

use std::path::{Path, PathBuf};

use clap::Args;
use oncelog::files;
use oncelog::{Clock, DeletedSegment, RetentionReason, RetentionReport, SystemClock};
use oncelog::{Log, LogConfig};
use serde::Serialize;

use super::{
    close, epochs, failed, limit_value, non_negative, open, print_log, print_snapshots_removed,
    Epoch, Op,
};
use crate::output::Out;
use crate::{plural, CliError, Status};

#[derive(Debug, Args)]
pub struct DeleteRecordsArgs {
    /// The new log start offset: records below it are no longer readable. At most the high
    /// watermark (for a log used alone, the durable end).
    #[arg(long, value_name = "OFFSET", value_parser = non_negative())]
    before: i64,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// The partition directory.
    dir: PathBuf,
}

#[derive(Debug, Args)]
pub struct RetentionArgs {
    /// retention.bytes for this run: delete the oldest segments while the log is larger.
    /// -1: no size limit. Without it, the library default (no size limit).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = limit_value())]
    bytes: Option<i64>,
    /// retention.ms for this run: delete segments whose newest timestamp is older than N ms
    /// before --now. -1: no time limit. Without it, the library default (7 days).
    #[arg(long, value_name = "N", allow_negative_numbers = true, value_parser = limit_value())]
    ms: Option<i64>,
    /// The wall clock the time limit is measured from, in ms since the Unix epoch. Default:
    /// the system clock.
    #[arg(long, value_name = "MS", value_parser = non_negative())]
    now: Option<i64>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// The partition directory.
    dir: PathBuf,
}

#[derive(Serialize)]
struct Deleted {
    base_offset: i64,
    next_offset: i64,
    bytes: u64,
    /// `log_start`, `size` or `time`.
    reason: &'static str,
    #[serde(skip)]
    why: &'static str,
}

#[derive(Serialize)]
struct Limits {
    /// `null`: no limit.
    retention_bytes: Option<u64>,
    retention_ms: Option<i64>,
    /// The limits not given on the command line, taken from the library's defaults.
    defaults: Vec<&'static str>,
}

/// What `delete-records` and `retention` did: both cut the log from the front.
#[derive(Serialize)]
struct FrontJson {
    dir: String,
    operation: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    offset: Option<i64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    now_ms: Option<i64>,
    #[serde(flatten)]
    limits: Option<Limits>,
    old_log_start: i64,
    log_start_offset: i64,
    log_end_offset: i64,
    deleted: Vec<Deleted>,
    bytes_removed: u64,
    rolled: bool,
    snapshots_removed: Vec<i64>,
    /// Producers still known: the state is kept when their batches go.
    producers: usize,
    leader_epochs: Vec<Epoch>,
    /// The segments left, and where the first of them starts (it can hold offsets below the
    /// log start, no longer readable).
    segments: usize,
    first_segment_base: Option<i64>,
}

pub fn run_delete_records(args: &DeleteRecordsArgs) -> Result<Status, CliError> {
    let op = Op::DeleteRecords(args.before);
    let mut out = Out::stdout();
    // Only the log-start rule: the segments wholly below the new start go now, as a broker's
    // next retention check would remove them.
    let config = LogConfig::builder()
        .retention_bytes(None)
        .retention_ms(None)
        .build()?;
    let Some(log) = open(&args.dir, config, op, &mut out, args.json)? else {
        return Ok(Status::Failed);
    };
    let old_log_start = log.log_start_offset();
    // `delete_records` reports only the new start: the snapshots it removes are read off the
    // directory, which this process holds the lock of.
    let snapshots_before = snapshot_offsets(&args.dir)?;
    let now = SystemClock.now_ms();
    let result = log
        .delete_records(args.before)
        .and_then(|_| log.maintenance().enforce_retention(now));
    let r = match result {
        Ok(r) => r,
        Err(e) => return failed(log, &args.dir, op, e, &mut out, args.json),
    };
    let after = snapshot_offsets(&args.dir)?;
    let mut report = FrontJson::new(&args.dir, op, old_log_start, &r, &log);
    report.snapshots_removed = snapshots_before
        .into_iter()
        .filter(|o| !after.contains(o))
        .collect();
    close(log, &args.dir)?;
    if args.json {
        out.json(&report)?;
    } else {
        print_front(&mut out, &report)?;
    }
    out.flush()?;
    Ok(Status::Ok)
}

pub fn run_retention(args: &RetentionArgs) -> Result<Status, CliError> {
    let op = Op::Retention;
    let mut out = Out::stdout();
    let defaults = LogConfig::default();
    // Kafka's -1 is "no limit".
    let limit = |n: i64| (n >= 0).then_some(n);
    let config = LogConfig::builder()
        .retention_bytes(
            args.bytes
                .map_or(defaults.retention_bytes, |n| limit(n).map(|n| n as u64)),
        )
        .retention_ms(args.ms.map_or(defaults.retention_ms, limit))
        .build()?;
    let limits = Limits {
        retention_bytes: config.retention_bytes,
        retention_ms: config.retention_ms,
        defaults: [
            (args.bytes.is_none(), "retention_bytes"),
            (args.ms.is_none(), "retention_ms"),
        ]
        .into_iter()
        .filter_map(|(default, name)| default.then_some(name))
        .collect(),
    };
    let Some(log) = open(&args.dir, config, op, &mut out, args.json)? else {
        return Ok(Status::Failed);
    };
    let old_log_start = log.log_start_offset();
    let now = args.now.unwrap_or_else(|| SystemClock.now_ms());
    let r = match log.maintenance().enforce_retention(now) {
        Ok(r) => r,
        Err(e) => return failed(log, &args.dir, op, e, &mut out, args.json),
    };
    let mut report = FrontJson::new(&args.dir, op, old_log_start, &r, &log);
    report.now_ms = Some(now);
    report.limits = Some(limits);
    close(log, &args.dir)?;
    if args.json {
        out.json(&report)?;
    } else {
        print_front(&mut out, &report)?;
    }
    out.flush()?;
    Ok(Status::Ok)
}

/// The offsets of the producer snapshots in `dir`.
fn snapshot_offsets(dir: &Path) -> Result<Vec<i64>, CliError> {
    let entries =
        std::fs::read_dir(dir).map_err(|e| CliError(format!("{}: {e}", dir.display())))?;
    let mut offsets = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| CliError(format!("{}: {e}", dir.display())))?;
        let name = entry.file_name();
        if let Some(parsed) = name.to_str().and_then(files::parse_file_name) {
            if parsed.ext == files::SNAPSHOT_EXT && parsed.suffix.is_none() {
                offsets.push(parsed.offset);
            }
        }
    }
    offsets.sort_unstable();
    Ok(offsets)
}

impl FrontJson {
    fn new(dir: &Path, op: Op, old_log_start: i64, r: &RetentionReport, log: &Log) -> FrontJson {
        let deleted: Vec<Deleted> = r.deleted.iter().map(Deleted::new).collect();
        FrontJson {
            dir: dir.display().to_string(),
            operation: op.name(),
            offset: op.offset(),
            now_ms: None,
            limits: None,
            old_log_start,
            log_start_offset: r.log_start_offset,
            log_end_offset: log.log_end_offset(),
            bytes_removed: deleted.iter().map(|d| d.bytes).sum(),
            deleted,
            rolled: r.rolled,
            snapshots_removed: r.snapshots_removed.clone(),
            producers: log.producer_count(),
            leader_epochs: epochs(log.replica().leader_epochs()),
            segments: log.maintenance().segment_count(),
            first_segment_base: log.maintenance().segment_base_offsets().first().copied(),
        }
    }
}

impl Deleted {
    fn new(d: &DeletedSegment) -> Deleted {
        Deleted {
            base_offset: d.base_offset,
            next_offset: d.next_offset,
            bytes: d.bytes,
            reason: d.reason.name(),
            why: match d.reason {
                RetentionReason::LogStart => "wholly below the log start",
                RetentionReason::Size => "over retention.bytes",
                RetentionReason::Time => "older than retention.ms",
                _ => "another retention rule",
            },
        }
    }
}

fn print_front(out: &mut Out, r: &FrontJson) -> Result<(), CliError> {
    match (r.offset, &r.limits) {
        (Some(offset), _) => out.line(&format!(
            "delete-records in {} before offset {offset}",
            r.dir
        ))?,
        (None, Some(l)) => {
            let limit = |name: &'static str, value: Option<String>| {
                let default = if l.defaults.contains(&name) {
                    " (library default)"
                } else {
                    ""
                };
                format!(
                    "{} {}{default}",
                    name.replace('_', "."),
                    value.unwrap_or_else(|| "none".into())
                )
            };
            out.line(&format!(
                "retention of {} at {} ms: {}, {}",
                r.dir,
                r.now_ms.unwrap_or_default(),
                limit("retention_bytes", l.retention_bytes.map(|n| n.to_string())),
                limit("retention_ms", l.retention_ms.map(|n| n.to_string())),
            ))?;
        }
        (None, None) => {}
    }
    if r.rolled {
        out.line(&format!(
            "every segment qualified: the log rolled first and goes on in a new empty segment \
             at {}",
            r.log_end_offset
        ))?;
    }
    for d in &r.deleted {
        out.line(&format!(
            "DELETED segment {} (offsets {}..{}, {} bytes): {}",
            d.base_offset, d.base_offset, d.next_offset, d.bytes, d.why
        ))?;
    }
    if r.deleted.is_empty() {
        out.line("no segment deleted")?;
    } else {
        out.line(&format!(
            "deleted {}, {} bytes",
            plural(r.deleted.len() as u64, "segment", "segments"),
            r.bytes_removed
        ))?;
    }
    if r.log_start_offset == r.old_log_start {
        out.line(&format!("the log start stays at {}", r.log_start_offset))?;
    } else {
        out.line(&format!(
            "the log start moved from {} to {}",
            r.old_log_start, r.log_start_offset
        ))?;
    }
    if let Some(base) = r.first_segment_base.filter(|&b| b < r.log_start_offset) {
        out.line(&format!(
            "the segment from offset {base} is kept: its offsets below {} are no longer readable",
            r.log_start_offset
        ))?;
    }
    print_snapshots_removed(out, &r.snapshots_removed)?;
    out.line(&format!(
        "producer state kept: {} (a retry of a removed batch is still a duplicate)",
        plural(r.producers as u64, "producer", "producers")
    ))?;
    print_log(
        out,
        &r.leader_epochs,
        r.log_start_offset,
        r.log_end_offset,
        r.segments,
    )
}
