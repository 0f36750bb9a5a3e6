//! `oncelog append DIR FILE`: what a broker would do with a stream of produce requests, from a
//! shell. FILE holds concatenated v2 batches as clients send them (baseOffset 0); each one goes
//! through `Log::append`, and its outcome is printed as one JSON line.
//!
//! `oncelog append DIR --marker commit|abort --producer ID --epoch E [--coordinator-epoch C]
//! [--transaction-version V]`: what the transaction coordinator's WriteTxnMarkers asks of the
//! partition, through `Log::append_marker`, with the same one-line answer.

use std::io::Read;
use std::path::{Path, PathBuf};

use clap::{Args, ValueEnum};
use oncelog::format::{self, BatchFrame};
use oncelog::{AppendOutcome, Log, LogConfig, TxnMarker, TxnResult};
use serde::Serialize;

use crate::output::Out;
use crate::{is_stdin, CliError, Status};

#[derive(Debug, Args)]
pub struct AppendArgs {
    /// The partition directory (created if missing; recovered if the last close was unclean).
    dir: PathBuf,
    /// A file of concatenated client batches, or `-` for standard input.
    #[arg(required_unless_present = "marker", conflicts_with = "marker")]
    file: Option<PathBuf>,
    /// Write a transaction marker instead: `commit` or `abort`.
    #[arg(long, value_enum, requires_all = ["producer", "epoch"])]
    marker: Option<MarkerKind>,
    /// The producer whose transaction the marker ends.
    #[arg(long, requires = "marker", allow_negative_numbers = true)]
    producer: Option<i64>,
    /// The producer epoch the marker carries.
    #[arg(long, requires = "marker", allow_negative_numbers = true)]
    epoch: Option<i16>,
    /// The transaction coordinator's epoch.
    #[arg(
        long,
        requires = "marker",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    coordinator_epoch: i32,
    /// The coordinator's transaction version (2: KIP-890, the marker must bump the epoch).
    #[arg(
        long,
        requires = "marker",
        default_value_t = 0,
        allow_negative_numbers = true
    )]
    transaction_version: i8,
}

#[derive(Debug, Clone, Copy, ValueEnum)]
enum MarkerKind {
    Commit,
    Abort,
}

#[derive(Serialize)]
#[serde(tag = "outcome", rename_all = "snake_case")]
enum Line {
    Appended {
        first_offset: i64,
        last_offset: i64,
    },
    Duplicate {
        first_offset: i64,
        last_offset: i64,
    },
    Error {
        error: &'static str,
        message: String,
    },
}

fn open(dir: &Path) -> Result<Log, CliError> {
    Log::open(dir, LogConfig::default())
        .map_err(|e| CliError(format!("cannot open the log in {}: {e}", dir.display())))
}

fn close(log: Log, dir: &Path) -> Result<(), CliError> {
    log.close()
        .map_err(|e| CliError(format!("closing the log in {}: {e}", dir.display())))
}

pub fn run(args: &AppendArgs) -> Result<Status, CliError> {
    if let Some(kind) = args.marker {
        return append_marker(args, kind);
    }
    let Some(file) = &args.file else {
        return Err(CliError("FILE or --marker is needed".into()));
    };
    let input = read_input(file)?;
    let log = open(&args.dir)?;
    let mut out = Out::stdout();
    let mut all_accepted = true;
    let mut pos = 0;
    while pos < input.len() {
        let size = match format::frame(&input[pos..]) {
            Ok(BatchFrame::Complete { size }) => size,
            Ok(BatchFrame::Incomplete { needed, available }) => {
                all_accepted = false;
                out.json(&Line::Error {
                    error: "truncated_input",
                    message: format!(
                        "input byte {pos}: the batch needs {needed} bytes, only {available} \
                         remain; stopped"
                    ),
                })?;
                break;
            }
            Err(e) => {
                // Without a trustworthy length there is no next batch to go on with.
                all_accepted = false;
                out.json(&Line::Error {
                    error: "corrupt_batch",
                    message: format!("input byte {pos}: {e}; stopped"),
                })?;
                break;
            }
        };
        let line = match log.append(&input[pos..pos + size]) {
            Ok(AppendOutcome::Appended(info)) => Line::Appended {
                first_offset: info.first_offset,
                last_offset: info.last_offset,
            },
            Ok(AppendOutcome::Duplicate(info)) => Line::Duplicate {
                first_offset: info.first_offset,
                last_offset: info.last_offset,
            },
            Ok(other) => {
                return Err(CliError(format!(
                    "input byte {pos}: an append outcome this tool does not know: {other:?}"
                )))
            }
            Err(e) => {
                all_accepted = false;
                Line::Error {
                    error: e.kind(),
                    message: format!("input byte {pos}: {e}"),
                }
            }
        };
        out.json(&line)?;
        pos += size;
    }
    out.flush()?;
    close(log, &args.dir)?;
    Ok(if all_accepted {
        Status::Ok
    } else {
        Status::Failed
    })
}

fn append_marker(args: &AppendArgs, kind: MarkerKind) -> Result<Status, CliError> {
    let (Some(producer_id), Some(producer_epoch)) = (args.producer, args.epoch) else {
        return Err(CliError("--marker needs --producer and --epoch".into()));
    };
    let marker = TxnMarker {
        producer_id,
        producer_epoch,
        coordinator_epoch: args.coordinator_epoch,
        result: match kind {
            MarkerKind::Commit => TxnResult::Commit,
            MarkerKind::Abort => TxnResult::Abort,
        },
        transaction_version: args.transaction_version,
    };
    let log = open(&args.dir)?;
    let (line, status) = match log.append_marker(&marker) {
        Ok(info) => (
            Line::Appended {
                first_offset: info.first_offset,
                last_offset: info.last_offset,
            },
            Status::Ok,
        ),
        Err(e) => (
            Line::Error {
                error: e.kind(),
                message: e.to_string(),
            },
            Status::Failed,
        ),
    };
    let mut out = Out::stdout();
    out.json(&line)?;
    out.flush()?;
    close(log, &args.dir)?;
    Ok(status)
}

fn read_input(path: &std::path::Path) -> Result<Vec<u8>, CliError> {
    if is_stdin(path) {
        let mut buf = Vec::new();
        std::io::stdin()
            .lock()
            .read_to_end(&mut buf)
            .map_err(|e| CliError(format!("reading standard input: {e}")))?;
        Ok(buf)
    } else {
        std::fs::read(path)
            .map_err(|e| CliError(format!("{}: {}", path.display(), crate::io_reason(&e))))
    }
}
