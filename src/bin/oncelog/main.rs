//! `oncelog`: inspect, verify and recover partition directories, benchmark appends, append
//! client batches from a shell, and demonstrate exactly-once appends across a crash. Built on
//! the public library API only (DESIGN.md §3).
//!
//! Exit codes: 0 success; 1 something was damaged, refused or failed; 2 bad usage.

mod append;
mod bench;
mod demo;
mod dump;
mod output;
mod recover;
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
    /// Print every batch, index entry and producer-snapshot entry of a partition directory or
    /// of one .log, .index, .timeindex or .snapshot file. Never modifies what it reads.
    /// Exits 1 if anything was damaged.
    Dump(dump::DumpArgs),
    /// Measure append throughput (then sequential read-back) on a temporary directory.
    Bench(bench::BenchArgs),
    /// Append the concatenated client batches of FILE (`-` = stdin) to the log in DIR, one
    /// JSON line per batch. Exits 1 unless every batch was appended or a duplicate.
    Append(append::AppendArgs),
    /// Deep read-only check of a partition directory: every batch (frame, CRC, records,
    /// offsets), index entry, snapshot and the checkpoint. Exits 1 listing each problem.
    Verify(verify::VerifyArgs),
    /// Open the log with a recovery mode, report what was validated, cut, rebuilt and removed
    /// and how producer state was loaded, and close cleanly. Exits 1 (changing nothing) when
    /// the mode refuses the damage found.
    Recover(recover::RecoverArgs),
    /// The lost-acknowledgement scenario end to end, with a real SIGKILL, step by step. Exits
    /// 1 if any step does not behave as the contract says.
    Demo(demo::DemoArgs),
    #[command(hide = true)]
    DemoChild(demo::DemoChildArgs),
}

/// What a command reports back to `main`.
pub enum Status {
    /// Everything was as it should be.
    Ok,
    /// Damage found, a batch refused, or a step failed (already reported on stdout/stderr).
    Failed,
}

/// A failure that stops a command before it could do its job (I/O, bad arguments).
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
        Command::Verify(args) => verify::run(&args),
        Command::Recover(args) => recover::run(&args),
        Command::Demo(args) => demo::run(&args),
        Command::DemoChild(args) => demo::run_child(&args),
    };
    match result {
        Ok(Status::Ok) => ExitCode::SUCCESS,
        Ok(Status::Failed) => ExitCode::from(1),
        Err(CliError(message)) => {
            eprintln!("oncelog: {message}");
            ExitCode::from(1)
        }
    }
}

/// `-` means standard input.
pub fn is_stdin(path: &std::path::Path) -> bool {
    path == std::path::Path::new("-")
}
