//! `oncelog truncate DIR --to OFFSET | --start-at OFFSET`: the log cut back from the end, as a
//! follower whose log diverged from its new leader's is (`ReplicaLog::truncate_to`), or started over
//! empty (`ReplicaLog::truncate_fully_and_start_at`).

use std::path::{Path, PathBuf};

use clap::{ArgGroup, Args};
use oncelog::{Log, LogConfig};
use oncelog::{ProducerLoadReport, TruncateReport};
use serde::Serialize;

use super::{
    close, epochs, failed, non_negative, offsets, open, print_log, print_snapshots_removed, Epoch,
    Op,
};
use crate::output::Out;
use crate::{plural, CliError, Status};

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("point").required(true).args(["to", "start_at"])))]
pub struct TruncateArgs {
    /// Remove every batch that ends at or after OFFSET (Kafka's truncateTo). A batch holding
    /// OFFSET goes whole, so the log can end below OFFSET: the new end is printed.
    #[arg(long, value_name = "OFFSET", value_parser = non_negative())]
    to: Option<i64>,
    /// Remove every segment and start the log over, empty, at OFFSET (Kafka's
    /// truncateFullyAndStartAt, for a replica with nothing in common with its leader).
    #[arg(long, value_name = "OFFSET", value_parser = non_negative())]
    start_at: Option<i64>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// The partition directory.
    dir: PathBuf,
}

#[derive(Serialize)]
struct FileReason {
    file: String,
    reason: String,
}

#[derive(Serialize)]
struct ProducerState {
    /// The snapshot the state was rebuilt from; `null` when it was replayed from the log start.
    snapshot_offset: Option<i64>,
    batches_replayed: u64,
    producers: usize,
    quarantined: Vec<FileReason>,
}

#[derive(Serialize)]
struct TruncateJson {
    #[serde(skip)]
    op: Op,
    dir: String,
    operation: &'static str,
    offset: i64,
    old_log_end: i64,
    new_log_end: i64,
    old_log_start: i64,
    log_start_offset: i64,
    /// Base offsets of the segments removed whole.
    segments_removed: Vec<i64>,
    bytes_removed: u64,
    snapshots_removed: Vec<i64>,
    /// How the producer state was rebuilt; `null` when nothing was truncated, and after
    /// `--start-at`, which clears it.
    producer_state: Option<ProducerState>,
    leader_epochs: Vec<Epoch>,
    segments: usize,
}

pub fn run(args: &TruncateArgs) -> Result<Status, CliError> {
    let (op, offset) = match (args.to, args.start_at) {
        (_, Some(offset)) => (Op::StartAt(offset), offset),
        (Some(offset), None) => (Op::TruncateTo(offset), offset),
        (None, None) => return Err(CliError("--to or --start-at is needed".into())),
    };
    let mut out = Out::stdout();
    let Some(log) = open(&args.dir, LogConfig::default(), op, &mut out, args.json)? else {
        return Ok(Status::Failed);
    };
    let old_log_start = log.log_start_offset();
    let result = if matches!(op, Op::StartAt(_)) {
        log.replica().truncate_fully_and_start_at(offset)
    } else {
        log.replica().truncate_to(offset)
    };
    let r = match result {
        Ok(r) => r,
        Err(e) => return failed(log, &args.dir, op, e, &mut out, args.json),
    };
    let report = TruncateJson::new(&args.dir, op, offset, old_log_start, &r, &log);
    close(log, &args.dir)?;
    if args.json {
        out.json(&report)?;
    } else {
        print_truncate(&mut out, &report)?;
    }
    out.flush()?;
    Ok(Status::Ok)
}

impl TruncateJson {
    fn new(
        dir: &Path,
        op: Op,
        offset: i64,
        old_log_start: i64,
        r: &TruncateReport,
        log: &Log,
    ) -> TruncateJson {
        let p: &ProducerLoadReport = &r.producers;
        let truncated = r.new_log_end != r.old_log_end;
        TruncateJson {
            op,
            dir: dir.display().to_string(),
            operation: op.name(),
            offset,
            old_log_end: r.old_log_end,
            new_log_end: r.new_log_end,
            old_log_start,
            log_start_offset: r.log_start_offset,
            segments_removed: r.segments_removed.clone(),
            bytes_removed: r.bytes_removed,
            snapshots_removed: r.snapshots_removed.clone(),
            producer_state: (truncated && matches!(op, Op::TruncateTo(_))).then(|| ProducerState {
                snapshot_offset: p.snapshot_offset,
                batches_replayed: p.batches_replayed,
                producers: p.producers,
                quarantined: p
                    .quarantined
                    .iter()
                    .map(|(f, reason)| FileReason {
                        file: f.display().to_string(),
                        reason: reason.clone(),
                    })
                    .collect(),
            }),
            leader_epochs: epochs(log.replica().leader_epochs()),
            segments: log.maintenance().segment_count(),
        }
    }
}

fn print_truncate(out: &mut Out, r: &TruncateJson) -> Result<(), CliError> {
    if matches!(r.op, Op::StartAt(_)) {
        out.line(&format!(
            "truncated {} fully: the log ended at {} and starts over, empty, at {}",
            r.dir, r.old_log_end, r.new_log_end
        ))?;
    } else if r.new_log_end == r.old_log_end {
        out.line(&format!(
            "nothing to truncate: the log in {} already ends at {}",
            r.dir, r.old_log_end
        ))?;
    } else {
        out.line(&format!(
            "truncated {} to offset {}: the log ended at {} and now ends at {}",
            r.dir, r.offset, r.old_log_end, r.new_log_end
        ))?;
        if r.new_log_end < r.offset {
            out.line(&format!(
                "the batch holding offset {} starts at {} and went whole",
                r.offset, r.new_log_end
            ))?;
        }
    }
    if r.new_log_end != r.old_log_end || !r.segments_removed.is_empty() {
        let whole = if r.segments_removed.is_empty() {
            "no segment removed whole".to_string()
        } else {
            format!(
                "{} removed whole (base {})",
                plural(r.segments_removed.len() as u64, "segment", "segments"),
                offsets(&r.segments_removed)
            )
        };
        out.line(&format!(
            "removed {} bytes of batches; {whole}",
            r.bytes_removed
        ))?;
    }
    print_snapshots_removed(out, &r.snapshots_removed)?;
    if r.log_start_offset != r.old_log_start {
        out.line(&format!(
            "the log start moved from {} to {}",
            r.old_log_start, r.log_start_offset
        ))?;
    }
    match &r.producer_state {
        Some(p) => {
            let source = match p.snapshot_offset {
                Some(offset) => format!("snapshot at offset {offset}"),
                None => "no snapshot, replayed from the log start".to_string(),
            };
            out.line(&format!(
                "producer state rebuilt: {source}; {} replayed; {}",
                plural(p.batches_replayed, "batch header", "batch headers"),
                plural(p.producers as u64, "producer", "producers")
            ))?;
            for q in &p.quarantined {
                out.line(&format!(
                    "QUARANTINED snapshot {}: {} (renamed aside)",
                    q.file, q.reason
                ))?;
            }
        }
        None if matches!(r.op, Op::StartAt(_)) => out.line("producer state cleared")?,
        None => {}
    }
    print_log(
        out,
        &r.leader_epochs,
        r.log_start_offset,
        r.new_log_end,
        r.segments,
    )
}
