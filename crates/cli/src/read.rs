//! `oncelog read DIR [--from OFFSET] [--isolation read_committed|read_uncommitted] [--json]`:
//! the records of a partition as an application receives them, fetched as a consumer fetches
//! them: from an offset up to the high watermark (read_uncommitted) or the last stable offset
//! (read_committed, without the records of aborted transactions), control batches never shown.
//!
//! The log is opened with recovery mode `absolute` (a log that needs recovery is refused, exit
//! 1, and nothing is changed: `oncelog recover` first), never created (a directory that holds
//! no partition is refused, exit 2) and flushed before it is read: the high
//! watermark of a log used alone is its durable end, and what it holds is all durable then.

use std::path::PathBuf;

use clap::{Args, ValueEnum};
use oncelog::format::ConsumerRecord;
use oncelog::{IsolationLevel, Log, LogConfig, RecoveryMode};
use serde::Serialize;

use crate::output::Out;
use crate::{plural, CliError, Status};

#[derive(Debug, Args)]
pub struct ReadArgs {
    /// The first offset to read (default: the log start).
    #[arg(long, value_parser = clap::value_parser!(i64).range(0..))]
    from: Option<i64>,
    /// `read_uncommitted`: every record below the high watermark; `read_committed`: below the
    /// last stable offset, without the records of aborted transactions.
    #[arg(long, value_enum, default_value_t = Isolation::ReadUncommitted)]
    isolation: Isolation,
    /// Stop after this many records.
    #[arg(long)]
    max_records: Option<u64>,
    /// Print one JSON object per record (keys, values and header values in hex), then one
    /// `end` object.
    #[arg(long)]
    json: bool,
    /// The partition directory.
    dir: PathBuf,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
#[value(rename_all = "snake_case")]
enum Isolation {
    ReadUncommitted,
    ReadCommitted,
}

impl From<Isolation> for IsolationLevel {
    fn from(i: Isolation) -> IsolationLevel {
        match i {
            Isolation::ReadUncommitted => IsolationLevel::ReadUncommitted,
            Isolation::ReadCommitted => IsolationLevel::ReadCommitted,
        }
    }
}

#[derive(Serialize)]
struct RecordLine {
    #[serde(rename = "type")]
    kind: &'static str,
    offset: i64,
    timestamp: i64,
    timestamp_type: &'static str,
    /// Hex, `null` for a null key.
    key: Option<String>,
    /// Hex, `null` for a null value.
    value: Option<String>,
    /// `[name, value in hex or null]` each.
    headers: Vec<(String, Option<String>)>,
}

impl RecordLine {
    fn new(r: &ConsumerRecord) -> RecordLine {
        RecordLine {
            kind: "record",
            offset: r.offset,
            timestamp: r.timestamp,
            timestamp_type: r.timestamp_type.name(),
            key: r.key.as_deref().map(hex),
            value: r.value.as_deref().map(hex),
            headers: r
                .headers()
                .map(|h| {
                    (
                        String::from_utf8_lossy(h.key).into_owned(),
                        h.value.map(hex),
                    )
                })
                .collect(),
        }
    }

    fn text(r: &ConsumerRecord) -> String {
        let mut s = format!(
            "offset {} timestamp {} key {} value {}",
            r.offset,
            r.timestamp,
            shown(r.key.as_deref()),
            shown(r.value.as_deref())
        );
        if r.header_count() > 0 {
            let headers: Vec<String> = r
                .headers()
                .map(|h| format!("{}={}", String::from_utf8_lossy(h.key), shown(h.value)))
                .collect();
            s.push_str(&format!(" headers [{}]", headers.join(", ")));
        }
        s
    }
}

#[derive(Serialize)]
struct EndLine {
    #[serde(rename = "type")]
    kind: &'static str,
    isolation: &'static str,
    records: u64,
    /// Where a next read would start.
    next_offset: i64,
    high_watermark: i64,
    last_stable_offset: i64,
    log_start_offset: i64,
    log_end_offset: i64,
}

pub fn run(args: &ReadArgs) -> Result<Status, CliError> {
    crate::require_dir(&args.dir)?;
    let config = LogConfig::builder()
        .recovery_mode(RecoveryMode::AbsoluteConsistency)
        .build()?;
    let log = match Log::open_existing(&args.dir, config) {
        Ok(log) => log,
        Err(e) if crate::is_damage(&e) => {
            // Damage is found, not a failure to run: exit 1, as `verify` would.
            eprintln!(
                "oncelog: REFUSED: {e} ({}); nothing was changed: `oncelog recover {}` first",
                e.kind(),
                args.dir.display()
            );
            return Ok(Status::Failed);
        }
        Err(e) => return Err(crate::open_failure(&args.dir, &e)),
    };
    log.flush()
        .map_err(|e| CliError(format!("flushing the log in {}: {e}", args.dir.display())))?;
    let isolation = IsolationLevel::from(args.isolation);
    let mut out = Out::stdout();
    let mut next = args.from.unwrap_or_else(|| log.log_start_offset());
    let mut records = 0u64;
    let mut status = Status::Ok;
    let limit = args.max_records.unwrap_or(u64::MAX);
    let (high_watermark, last_stable_offset) = 'fetching: loop {
        let fetched = match log.fetch_isolated(next, 1 << 20, isolation) {
            Ok(f) => f,
            Err(e) => {
                status = Status::Failed;
                eprintln!("oncelog: read at offset {next}: {e} ({})", e.kind());
                break (log.high_watermark(), log.last_stable_offset());
            }
        };
        let bounds = (fetched.high_watermark, fetched.last_stable_offset);
        if fetched.bytes.is_empty() {
            break bounds;
        }
        for record in fetched.records() {
            if records == limit {
                break 'fetching bounds;
            }
            match record {
                Ok(r) => {
                    if args.json {
                        out.json(&RecordLine::new(&r))?;
                    } else {
                        out.line(&RecordLine::text(&r))?;
                    }
                    records += 1;
                    next = r.offset + 1;
                }
                Err(e) => {
                    status = Status::Failed;
                    eprintln!("oncelog: {e} ({})", e.kind());
                    break 'fetching bounds;
                }
            }
        }
        next = next.max(fetched.next_offset);
    };
    let end = EndLine {
        kind: "end",
        isolation: isolation.name(),
        records,
        next_offset: next,
        high_watermark,
        last_stable_offset,
        log_start_offset: log.log_start_offset(),
        log_end_offset: log.log_end_offset(),
    };
    if args.json {
        out.json(&end)?;
    } else {
        out.line(&format!(
            "{} ({}), next offset {}; high watermark {}, last stable offset {}",
            plural(records, "record", "records"),
            end.isolation,
            end.next_offset,
            end.high_watermark,
            end.last_stable_offset
        ))?;
    }
    out.flush()?;
    log.close()
        .map_err(|e| CliError(format!("closing the log in {}: {e}", args.dir.display())))?;
    Ok(status)
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Text as a quoted string when it is UTF-8, else `0x` and hex; `null` when absent.
fn shown(bytes: Option<&[u8]>) -> String {
    match bytes {
        None => "null".into(),
        Some(b) => match std::str::from_utf8(b) {
            Ok(s) => format!("{s:?}"),
            Err(_) => format!("0x{}", hex(b)),
        },
    }
}
