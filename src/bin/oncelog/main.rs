//! `oncelog`: inspect partition directories, benchmark appends, and append client batches from
//! a shell. Built on the public library API only (DESIGN.md §3).
//!
//! Exit codes: 0 success; 1 something was damaged, refused or failed; 2 bad usage.

mod append;
mod bench;
mod dump;
mod output;

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
