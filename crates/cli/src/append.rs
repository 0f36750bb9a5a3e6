//! `oncelog append DIR FILE`: what a broker would do with a stream of produce requests, from a
//! shell. FILE holds concatenated v2 batches as clients send them (baseOffset 0); each one goes
//! through `Log::append`, and its outcome is printed as one JSON line.

use std::io::Read;
use std::path::PathBuf;

use clap::Args;
use oncelog::format::{self, BatchFrame};
use oncelog::{AppendOutcome, Log, LogConfig};
use serde::Serialize;

use crate::output::Out;
use crate::{is_stdin, CliError, Status};

#[derive(Debug, Args)]
pub struct AppendArgs {
    /// The partition directory (created if missing; recovered if the last close was unclean).
    dir: PathBuf,
    /// A file of concatenated client batches, or `-` for standard input.
    file: PathBuf,
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

pub fn run(args: &AppendArgs) -> Result<Status, CliError> {
    let input = read_input(&args.file)?;
    let log = Log::open(&args.dir, LogConfig::default()).map_err(|e| {
        CliError(format!(
            "cannot open the log in {}: {e}",
            args.dir.display()
        ))
    })?;
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
    log.close()
        .map_err(|e| CliError(format!("closing the log in {}: {e}", args.dir.display())))?;
    Ok(if all_accepted {
        Status::Ok
    } else {
        Status::Failed
    })
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
