//! `oncelog`: inspect, verify and recover partition directories, truncate them and apply
//! retention, benchmark appends, append client batches and transaction markers from a shell,
//! read records as a consumer would, and demonstrate exactly-once appends across a crash. Built on the public library API only (docs/design.md,
//! "Layers").
//!
//! Exit codes, the same for every command: 0 success; 1 the command ran and found damage, or
//! refused something (a damaged file, a refused batch, a failed step); 2 it could not run (bad
//! arguments, a path that is not a partition directory, an I/O error of the machine, a log
//! another process holds); 3 `recover` recovered the log and removed data from it (or, with
//! `--dry-run`, would). Damage in any file of a partition directory is 1 (or, repaired, 0 or
//! 3), never 2.

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
mod tier;
mod verify;

use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Debug, Parser)]
#[command(
    name = "oncelog",
    version,
    about = "Kafka-format partition log with exactly-once appends",
    after_help = "Exit codes: 0 success; 1 damage found or something refused (nothing changed \
                  unless the command says so); 2 could not run (bad arguments, not a partition \
                  directory, an I/O error, a log held by another process); 3 recover removed \
                  data (recovered; the totals are printed), or with --dry-run would."
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
    /// per line with --json. Files and directories it does not dump are named with why
    /// (SKIPPED). Exits 1 if anything was damaged, 2 if PATH cannot be read or is a directory
    /// that holds no log.
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
    /// per record and a final `end` object with --json. Refuses a log that needs recovery
    /// (exit 1, nothing changed), and a directory that holds no partition (exit 2, nothing
    /// created).
    Read(read::ReadArgs),
    /// Deep read-only check of a partition directory
    ///
    /// Checks every batch (frame, CRC, records, offsets), index entry, snapshot and the
    /// checkpoint, without opening the log. Exits 1 listing each problem; 2 when DIR holds no
    /// log (no .log file, no oncelog.checkpoint), rather than calling it clean.
    Verify(verify::VerifyArgs),
    /// Open a log with a recovery mode and report what recovery did
    ///
    /// Reports what was validated, cut, rebuilt and removed and how producer state was
    /// loaded, then closes cleanly. --dry-run prints the same report and the totals without
    /// changing a file; --backup DIR copies the partition directory before anything changes.
    /// Exits 0 when nothing was removed, 3 when data was removed (the batches, records and
    /// bytes removed and the new log end are printed), 1 (changing nothing) when the mode
    /// refuses the damage found or a metadata file is damaged, 2 when it could not run (not a
    /// partition directory, the log held by another process, an I/O error).
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
    /// Tiered storage: where each segment of a partition is, local or remote
    ///
    /// `status DIR --store ROOT --prefix PREFIX` lists each segment of DIR against the
    /// manifest under PREFIX in the object store kept in the directory ROOT. See
    /// docs/design.md, "Tiered storage".
    Tier(tier::TierArgs),
}

/// What a command reports back to `main`.
pub enum Status {
    /// Everything was as it should be.
    Ok,
    /// Damage found, a batch refused, or a step failed (already reported on stdout/stderr):
    /// exit 1.
    Failed,
    /// Recovery removed data from the log, or would (`recover --dry-run`), and said what:
    /// exit 3.
    DataRemoved,
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
        Command::Tier(args) => tier::run(&args),
    };
    match result {
        Ok(Status::Ok) => ExitCode::SUCCESS,
        Ok(Status::Failed) => ExitCode::from(1),
        Ok(Status::DataRemoved) => ExitCode::from(3),
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

/// `path` must hold a partition ([`oncelog::partition_evidence`]: a `.log` file, an
/// `oncelog.checkpoint`, or a Kafka `<topic>-<n>` name); otherwise "not a partition directory",
/// exit 2, before anything could be created in it.
pub fn require_partition(path: &std::path::Path) -> Result<oncelog::PartitionEvidence, CliError> {
    match oncelog::partition_evidence(&oncelog::io::RealFs, path) {
        Ok(Ok(evidence)) => Ok(evidence),
        Ok(Err(reason)) => Err(CliError(format!(
            "not a partition directory: {}: {reason}",
            path.display()
        ))),
        Err(e) => Err(CliError(format!("{}: {e}", path.display()))),
    }
}

/// `path` must hold a log to look at (a `.log` file or an `oncelog.checkpoint`): `verify` and
/// `dump` of a directory without one would report nothing and call it sound.
pub fn require_log(path: &std::path::Path) -> Result<(), CliError> {
    match require_partition(path)? {
        oncelog::PartitionEvidence::KafkaName => Err(CliError(format!(
            "no log in {}: it holds no .log file and no oncelog.checkpoint",
            path.display()
        ))),
        _ => Ok(()),
    }
}

/// Whether an error opening a log is damage in its directory (exit 1: the command ran and
/// found it) rather than a failure to run (exit 2).
pub fn is_damage(e: &oncelog::OpenError) -> bool {
    use oncelog::OpenError;
    matches!(e, OpenError::Refused { .. } | OpenError::BadMetadataFile(_))
}

/// An error opening a log that is not damage: exit 2, said as the library says it.
pub fn open_failure(dir: &std::path::Path, e: &oncelog::OpenError) -> CliError {
    match e {
        oncelog::OpenError::NotAPartition { .. } => CliError(e.to_string()),
        _ => CliError(format!("cannot open the log in {}: {e}", dir.display())),
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
