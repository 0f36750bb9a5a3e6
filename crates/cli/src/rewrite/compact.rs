//! `oncelog compact DIR [--dry-run] [--now MS] [--json]`: key compaction now
//! (`Maintenance::compact`, `Maintenance::compact_dry_run`): what it keeps and removes.

use std::path::PathBuf;

use clap::Args;
use oncelog::{CleanupPolicy, Clock, CompactionConfig, CompactionReport, SystemClock};
use oncelog::{Log, LogConfig};
use serde::Serialize;

use super::{close, failed, non_negative, open, Op};
use crate::output::Out;
use crate::{CliError, Status};

#[derive(Debug, Args)]
pub struct CompactArgs {
    /// Report what a round would keep and remove, writing nothing.
    #[arg(long)]
    dry_run: bool,
    /// The wall clock tombstone and marker horizons are measured from, in ms since the Unix
    /// epoch. Default: the system clock.
    #[arg(long, value_name = "MS", value_parser = non_negative())]
    now: Option<i64>,
    /// delete.retention.ms: how long a tombstone stays once its batch's horizon is stamped.
    /// Default: one day.
    #[arg(long, value_name = "MS", value_parser = non_negative())]
    delete_retention_ms: Option<i64>,
    /// min.compaction.lag.ms: segments younger than this are not cleaned. Default 0.
    #[arg(long, value_name = "MS", value_parser = non_negative())]
    min_compaction_lag_ms: Option<i64>,
    /// The key map's memory bound in bytes (log.cleaner.dedupe.buffer.size). Default 128 MiB.
    #[arg(long, value_name = "BYTES", value_parser = non_negative())]
    key_map_bytes: Option<i64>,
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// The partition directory.
    dir: PathBuf,
}

#[derive(Serialize)]
struct CompactJson {
    dir: String,
    operation: &'static str,
    dry_run: bool,
    now_ms: i64,
    dirty_ratio: f64,
    first_dirty_offset: i64,
    first_uncleanable_offset: i64,
    cleaned_to: i64,
    passes: u32,
    segments_replaced: usize,
    segments_written: usize,
    bytes_before: u64,
    bytes_after: u64,
    records_read: u64,
    records_kept: u64,
    records_removed: u64,
    tombstones_kept: u64,
    tombstones_removed: u64,
    markers_kept: u64,
    markers_removed: u64,
    aborted_records_removed: u64,
    batches_copied: u64,
    batches_rebuilt: u64,
    batches_emptied: u64,
    batches_removed: u64,
    map_keys: u64,
    map_bytes: u64,
    log_start_offset: i64,
    log_end_offset: i64,
    segments: usize,
}

pub fn run(args: &CompactArgs) -> Result<Status, CliError> {
    let op = Op::Compact;
    let mut out = Out::stdout();
    let d = CompactionConfig::default();
    let config = LogConfig::builder()
        .cleanup_policy(CleanupPolicy::Compact)
        .compaction(
            d.with_delete_retention_ms(args.delete_retention_ms.unwrap_or(d.delete_retention_ms))
                .with_min_compaction_lag_ms(
                    args.min_compaction_lag_ms
                        .unwrap_or(d.min_compaction_lag_ms),
                )
                .with_key_map_bytes(args.key_map_bytes.map_or(d.key_map_bytes, |b| b as usize)),
        )
        .build()?;
    let Some(log) = open(&args.dir, config, op, &mut out, args.json)? else {
        return Ok(Status::Failed);
    };
    let now = args.now.unwrap_or_else(|| SystemClock.now_ms());
    let cleanable = log.maintenance().cleanable(now);
    let result = if args.dry_run {
        log.maintenance().compact_dry_run(now)
    } else {
        log.maintenance().compact(now)
    };
    let r = match result {
        Ok(r) => r,
        Err(e) => return failed(log, &args.dir, op, e, &mut out, args.json),
    };
    let report = json(args, now, &cleanable, &r, &log);
    close(log, &args.dir)?;
    if args.json {
        out.json(&report)?;
    } else {
        print(&mut out, &report)?;
    }
    out.flush()?;
    Ok(Status::Ok)
}

fn json(
    args: &CompactArgs,
    now: i64,
    c: &oncelog::Cleanable,
    r: &CompactionReport,
    log: &Log,
) -> CompactJson {
    CompactJson {
        dir: args.dir.display().to_string(),
        operation: "compact",
        dry_run: r.dry_run,
        now_ms: now,
        dirty_ratio: c.dirty_ratio,
        first_dirty_offset: c.first_dirty_offset,
        first_uncleanable_offset: c.first_uncleanable_offset,
        cleaned_to: r.cleaned_to,
        passes: r.passes,
        segments_replaced: r.segments_replaced,
        segments_written: r.segments_written,
        bytes_before: r.bytes_before,
        bytes_after: r.bytes_after,
        records_read: r.records_read,
        records_kept: r.records_kept,
        records_removed: r.records_removed,
        tombstones_kept: r.tombstones_kept,
        tombstones_removed: r.tombstones_removed,
        markers_kept: r.markers_kept,
        markers_removed: r.markers_removed,
        aborted_records_removed: r.aborted_records_removed,
        batches_copied: r.batches_copied,
        batches_rebuilt: r.batches_rebuilt,
        batches_emptied: r.batches_emptied,
        batches_removed: r.batches_removed,
        map_keys: r.map_keys,
        map_bytes: r.map_bytes,
        log_start_offset: log.log_start_offset(),
        log_end_offset: log.log_end_offset(),
        segments: log.maintenance().segment_count(),
    }
}

fn print(out: &mut Out, r: &CompactJson) -> Result<(), CliError> {
    let verb = if r.dry_run { "would keep" } else { "kept" };
    out.line(&format!(
        "{}compact {}: dirty {}..{} (ratio {:.2}), {} pass(es), cleaned to {}",
        if r.dry_run { "DRY RUN " } else { "" },
        r.dir,
        r.first_dirty_offset,
        r.first_uncleanable_offset,
        r.dirty_ratio,
        r.passes,
        r.cleaned_to
    ))?;
    out.line(&format!(
        "records: {} read, {verb} {}, removed {} (aborted {})",
        r.records_read, r.records_kept, r.records_removed, r.aborted_records_removed
    ))?;
    out.line(&format!(
        "tombstones: {verb} {}, removed {}; markers: {verb} {}, removed {}",
        r.tombstones_kept, r.tombstones_removed, r.markers_kept, r.markers_removed
    ))?;
    out.line(&format!(
        "batches: {} copied, {} rebuilt, {} kept empty for producer sequences, {} removed",
        r.batches_copied, r.batches_rebuilt, r.batches_emptied, r.batches_removed
    ))?;
    out.line(&format!(
        "bytes: {} -> {} in {} segment(s) rewritten as {}; key map {} keys, {} bytes",
        r.bytes_before,
        r.bytes_after,
        r.segments_replaced,
        r.segments_written,
        r.map_keys,
        r.map_bytes
    ))?;
    out.line(&format!(
        "log: offsets {}..{}, {} segment(s)",
        r.log_start_offset, r.log_end_offset, r.segments
    ))?;
    Ok(())
}
