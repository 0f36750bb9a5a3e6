//! `oncelog verify DIR`: the library's deep, read-only check of a partition directory
//! ([`oncelog::verify::verify_dir`]) as a report and an exit status an operator or a script can
//! act on. Like `dump`, it never opens the log (which would recover it) and changes nothing.

use std::path::PathBuf;

use clap::Args;
use oncelog::io::RealFs;
use oncelog::verify::{self, Problem, VerifyReport};
use serde::Serialize;

use crate::output::Out;
use crate::{plural, CliError, Status};

#[derive(Debug, Args)]
pub struct VerifyArgs {
    /// Print the report as one JSON object.
    #[arg(long)]
    json: bool,
    /// A partition directory, or a whole log dir (every partition, and the log dir's own
    /// `meta.properties` and offset checkpoints).
    dir: PathBuf,
}

#[derive(Serialize)]
pub(crate) struct Report<'a> {
    dir: String,
    clean: bool,
    segments: usize,
    batches: u64,
    bytes: u64,
    index_entries: u64,
    time_index_entries: u64,
    /// Aborted-transaction entries of `.txnindex` files, checked against the log.
    txn_index_entries: u64,
    snapshots: usize,
    preallocated_bytes: u64,
    /// Bytes from a damaged batch to the next valid one, which could not be checked.
    unchecked_bytes: u64,
    problems: Vec<ProblemLine<'a>>,
}

#[derive(Serialize)]
struct ProblemLine<'a> {
    file: String,
    /// Byte position in the file, `null` when the problem is the file as a whole.
    position: Option<usize>,
    kind: &'static str,
    reason: &'a str,
}

impl<'a> ProblemLine<'a> {
    fn new(p: &'a Problem) -> ProblemLine<'a> {
        ProblemLine {
            file: p.file.display().to_string(),
            position: p.position,
            kind: p.kind,
            reason: &p.reason,
        }
    }

    fn text(&self) -> String {
        match self.position {
            Some(position) => format!("PROBLEM {}: byte {position}: {}", self.file, self.reason),
            None => format!("PROBLEM {}: {}", self.file, self.reason),
        }
    }
}

pub fn run(args: &VerifyArgs) -> Result<Status, CliError> {
    crate::require_dir(&args.dir)?;
    if crate::log_dir::is_log_dir(&args.dir) {
        return crate::log_dir::verify(&args.dir, args.json);
    }
    // A directory without a log would verify as "clean": exit 2 says it was not a log.
    crate::require_log(&args.dir)?;
    let report = verify::verify_dir(&RealFs, &args.dir)?;
    let mut out = Out::stdout();
    if args.json {
        out.json(&to_json(&args.dir, &report))?;
    } else {
        print_text(&mut out, &args.dir, &report)?;
    }
    out.flush()?;
    Ok(if report.is_clean() {
        Status::Ok
    } else {
        Status::Failed
    })
}

/// A problem as one line of text.
pub(crate) fn problem_text(p: &Problem) -> String {
    ProblemLine::new(p).text()
}

pub(crate) fn to_json<'a>(dir: &std::path::Path, r: &'a VerifyReport) -> Report<'a> {
    Report {
        dir: dir.display().to_string(),
        clean: r.is_clean(),
        segments: r.segments,
        batches: r.batches,
        bytes: r.bytes,
        index_entries: r.index_entries,
        time_index_entries: r.time_index_entries,
        txn_index_entries: r.txn_index_entries,
        snapshots: r.snapshots,
        preallocated_bytes: r.preallocated_bytes,
        unchecked_bytes: r.unchecked_bytes,
        problems: r.problems.iter().map(ProblemLine::new).collect(),
    }
}

fn print_text(out: &mut Out, dir: &std::path::Path, r: &VerifyReport) -> Result<(), CliError> {
    out.line(&format!(
        "{}: {}, {}, {} bytes of batches, {}, {}, {}, {}, {} bytes of preallocated space",
        dir.display(),
        plural(r.segments as u64, "segment", "segments"),
        plural(r.batches, "batch", "batches"),
        r.bytes,
        plural(r.index_entries, "index entry", "index entries"),
        plural(
            r.time_index_entries,
            "time-index entry",
            "time-index entries"
        ),
        plural(r.txn_index_entries, "txn-index entry", "txn-index entries"),
        plural(r.snapshots as u64, "snapshot", "snapshots"),
        r.preallocated_bytes,
    ))?;
    for p in &r.problems {
        out.line(&ProblemLine::new(p).text())?;
    }
    if r.is_clean() {
        out.line("clean")?;
    } else {
        out.line(&plural(r.problems.len() as u64, "problem", "problems"))?;
    }
    Ok(())
}
