//! `oncelog`: inspect, verify and recover partition directories, truncate them and apply
//! retention, benchmark appends, append client batches and transaction markers from a shell,
//! read records as a consumer would, and demonstrate exactly-once appends across a crash. Built on the public library API only (docs/design.md,
//! "Layers").
//!
//! Exit codes, the same for every command: 0 success; 1 the command ran and found damage, or
//! refused something (a damaged file, a refused batch, a failed step); 2 it could not run (bad
//! arguments, a missing path, an I/O error).

mod append;
mod bench;
mod bench_partitions;
mod demo;
mod demo_consumer;
mod dump;
mod log_dir;
mod output;
mod processed;
mod read;
mod recover;
mod rewrite;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "oncelog",
    version,
    about = "Kafka-format partition log with exactly-once appends"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Print every batch, index, snapshot and leader-epoch entry of a directory or file
    ///
    /// PATH is a partition directory or one .log, .index, .timeindex, .txnindex, .snapshot or
    /// leader-epoch-checkpoint file. Never modifies what it reads. One line per batch or
    /// entry (a control batch with its marker type and coordinator epoch), or one JSON object
    /// per line with --json. Exits 1 if anything was damaged, 2 if PATH cannot be read.
    Dump(dump::DumpArgs),
    /// Measure durable append throughput, then a CRC-checked read-back
    ///
    /// Builds every batch first, then times the appends, the final flush, and their sum (the
    /// durable throughput, the headline), then reads the whole log back in 1 MiB fetches,
    /// checking every batch's CRC-32C. MB are 10^6 bytes. Runs on a temporary directory unless
    /// --dir is given. Exits 2 for options that cannot describe a run (--batch-size 0, ...).
    Bench(bench::BenchArgs),
    /// Append client batches or a transaction marker, one JSON line each
    ///
    /// FILE (`-` = stdin) holds concatenated client batches; each goes through the log in DIR
    /// (created if missing, recovered if needed) and its outcome is printed as one JSON line.
    /// With --marker commit|abort --producer ID --epoch E instead of FILE, writes the COMMIT or
    /// ABORT marker the transaction coordinator would. Exits 1 unless every batch was appended
    /// or a duplicate (or the marker was written).
    Append(append::AppendArgs),
    /// Print the records of a partition as an application receives them
    ///
    /// From --from (default: the log start) up to the high watermark, or under --isolation
    /// read_committed up to the last stable offset without the records of aborted
    /// transactions; control batches are never shown. One line per record, or one JSON object
    /// per record and a final `end` object with --json. Refuses a log that needs recovery.
    Read(read::ReadArgs),
    /// Deep read-only check of a partition directory
    ///
    /// Checks every batch (frame, CRC, records, offsets), index entry, snapshot and the
    /// checkpoint, without opening the log. Exits 1 listing each problem.
    Verify(verify::VerifyArgs),
    /// Open a log with a recovery mode and report what recovery did
    ///
    /// Reports what was validated, cut, rebuilt and removed and how producer state was
    /// loaded, then closes cleanly. Exits 1 (changing nothing) when the mode refuses the
    /// damage found.
    Recover(recover::RecoverArgs),
    /// Cut the log back to end at an offset, or start it over empty at one
    ///
    /// --to OFFSET removes every batch ending at or after OFFSET (a batch holding it goes
    /// whole, so the log can end below OFFSET) and rebuilds the producer state from the newest
    /// snapshot at or below the new end; --start-at OFFSET removes everything and starts over
    /// at OFFSET. The files of removed segments are deleted before it exits, not left as
    /// .deleted (a closed log leaves those to its next open). Refuses a log that needs
    /// recovery, or that another process has open. Exits 1 (changing nothing) when the offset
    /// is refused (above the log end, below the log start).
    Truncate(rewrite::TruncateArgs),
    /// Raise the log start (Kafka's DeleteRecords) and delete the segments below it
    ///
    /// Records below OFFSET are no longer readable; the segments wholly below it are deleted
    /// before it exits, not left as .deleted; the producer state is kept (a retry of a removed
    /// batch is still a duplicate). Refuses a log that needs recovery, or that another process
    /// has open. Exits 1 (changing nothing) when OFFSET is above the high watermark (for a log
    /// used alone, the durable end).
    DeleteRecords(rewrite::DeleteRecordsArgs),
    /// Apply retention now: delete the oldest segments over a size or age limit
    ///
    /// Kafka's rules in its order: segments wholly below the log start, then the oldest while
    /// the log is over --bytes, then those whose newest timestamp is older than --ms before
    /// --now. Whole segments only, never above the high watermark; when every segment goes the
    /// log rolls first. A limit not given is the library's default (no size limit, 7 days), and
    /// the report says so. The files of deleted segments are gone before it exits, not left as
    /// .deleted. Refuses a log that needs recovery, or that another process has open.
    Retention(rewrite::RetentionArgs),
    /// Compact the log by key now (Kafka's log cleaner, cleanup.policy=compact)
    ///
    /// Keeps the latest record of each key below the first uncleanable offset (the last
    /// stable offset, the active segment), tombstones until their delete horizon, the batches
    /// that hold producers' last sequences; removes aborted transactional data and markers
    /// past their horizon. Offsets never move. Reports what it kept and removed (records,
    /// tombstones, markers, bytes); --dry-run reports what it would, changing nothing. Refuses
    /// a log that needs recovery, or that another process has open. Exits 1 (changing nothing)
    /// when a batch cannot be read.
    Compact(rewrite::CompactArgs),
    /// Show exactly-once appends surviving a lost ack and a SIGKILL, step by step
    ///
    /// The lost-acknowledgement scenario end to end, with a real SIGKILL of a child process.
    /// Exits 1 if any step does not behave as the contract says.
    Demo(demo::DemoArgs),
    #[command(hide = true)]
    DemoChild(demo::DemoChildArgs),
    #[command(hide = true)]
    DemoConsumerChild(demo_consumer::DemoConsumerChildArgs),
    /// Run a processed-id store for a consumer in another language, or print one
    ///
    /// `serve DIR` answers JSON requests on stdin (record an id with its effect and position,
    /// ask whether one was handled); `dump DIR` prints its ids, effects and positions. See
    /// docs/exactly-once.md.
    Processed(processed::ProcessedArgs),
}

/// What a command reports back to `main`.
pub enum Status {
    /// Everything was as it should be.
    Ok,
    /// Damage found, a batch refused, or a step failed (already reported on stdout/stderr):
    /// exit 1.
    Failed,
}

/// A failure that stops a command before it could do its job (I/O, bad arguments): exit 2.
#[derive(Debug)]
pub struct CliError(pub String);

impl<E: std::fmt::Display> From<E> for CliError {
    fn from(e: E) -> Self {
        CliError(e.to_string())
    }
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Dump(args) => dump::run(&args),
        Command::Bench(args) => bench::run(&args),
        Command::Append(args) => append::run(&args),
        Command::Read(args) => read::run(&args),
        Command::Verify(args) => verify::run(&args),
        Command::Recover(args) => recover::run(&args),
        Command::Truncate(args) => rewrite::run_truncate(&args),
        Command::DeleteRecords(args) => rewrite::run_delete_records(&args),
        Command::Retention(args) => rewrite::run_retention(&args),
        Command::Compact(args) => rewrite::run_compact(&args),
        Command::Demo(args) => demo::run(&args),
        Command::DemoChild(args) => demo::run_child(&args),
        Command::DemoConsumerChild(args) => demo_consumer::run_child(&args),
        Command::Processed(args) => processed::run(&args),
    };
    match result {
        Ok(Status::Ok) => ExitCode::SUCCESS,
        Ok(Status::Failed) => ExitCode::from(1),
        Err(CliError(message)) => {
            eprintln!("oncelog: {message}");
            ExitCode::from(2)
        }
    }
}

/// `-` means standard input.
pub fn is_stdin(path: &std::path::Path) -> bool {
    path == std::path::Path::new("-")
}

/// `path` must be a directory: a missing one is said so in the words of the OS.
pub fn require_dir(path: &std::path::Path) -> Result<(), CliError> {
    match std::fs::metadata(path) {
        Ok(m) if m.is_dir() => Ok(()),
        Ok(_) => Err(CliError(format!(
            "{}: not a directory (a partition directory is needed)",
            path.display()
        ))),
        Err(e) => Err(CliError(format!("{}: {}", path.display(), io_reason(&e)))),
    }
}

/// The OS's reason, without Rust's `(os error N)` suffix: "no such file or directory".
pub fn io_reason(e: &std::io::Error) -> String {
    match e.kind() {
        std::io::ErrorKind::NotFound => "no such file or directory".into(),
        std::io::ErrorKind::PermissionDenied => "permission denied".into(),
        _ => e.to_string(),
    }
}

/// "1 segment", "2 segments".
pub fn plural(n: impl Into<u64>, one: &str, many: &str) -> String {
    let n = n.into();
    format!("{n} {}", if n == 1 { one } else { many })
}
