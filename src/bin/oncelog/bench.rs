//! `oncelog bench`: append throughput, then a sequential read-back, on a temporary directory.
//!
//! Every batch is built before the clock starts (with `BatchBuilder`), so the timed loop is
//! `Log::append` and nothing else. MB are 10^6 bytes of whole batches (headers included), the
//! bytes that go to disk.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{AppendOutcome, FlushPolicy, Log, LogConfig};
use serde::Serialize;

use crate::{CliError, Status};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Bytes of each record value.
    #[arg(long, default_value_t = 100)]
    message_size: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 100)]
    batch_size: usize,
    /// Records in total (rounded up to whole batches).
    #[arg(long, default_value_t = 1_000_000)]
    messages: usize,
    /// When appends are made durable: `manual` (one flush at the end), `always` (every
    /// append), or `every:N` (every N records).
    #[arg(long, default_value = "manual", value_parser = parse_flush)]
    flush: FlushPolicy,
    /// Directory for the log (must be empty or absent; kept afterwards). Default: a temporary
    /// directory, removed afterwards.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// Segment size in bytes (Kafka's `segment.bytes`).
    #[arg(long, default_value_t = LogConfig::default().segment_bytes)]
    segment_bytes: usize,
    /// Idempotent producers the batches are spread over, round robin, each with its own
    /// sequence; 0 = no producer id (non-idempotent).
    #[arg(long, default_value_t = 0)]
    producers: u32,
    /// Print the summary as one JSON object.
    #[arg(long)]
    json: bool,
}

fn parse_flush(s: &str) -> Result<FlushPolicy, String> {
    match s {
        "manual" => Ok(FlushPolicy::Manual),
        "always" => Ok(FlushPolicy::Always),
        _ => match s.strip_prefix("every:").map(str::parse::<u64>) {
            Some(Ok(n)) if n > 0 => Ok(FlushPolicy::EveryMessages(n)),
            _ => Err(format!(
                "`{s}`: expected manual, always or every:N with N ≥ 1"
            )),
        },
    }
}

fn flush_name(p: FlushPolicy) -> String {
    match p {
        FlushPolicy::Manual => "manual".into(),
        FlushPolicy::Always => "always".into(),
        FlushPolicy::EveryMessages(n) => format!("every:{n}"),
    }
}

#[derive(Debug, Serialize)]
struct Summary {
    messages: u64,
    batches: u64,
    bytes: u64,
    message_size: usize,
    batch_size: usize,
    producers: u32,
    flush: String,
    segment_bytes: usize,
    segments: usize,
    duplicates: u64,
    /// Time of the appends (with the flushes the policy asks for).
    seconds: f64,
    mb_per_s: f64,
    records_per_s: f64,
    /// The closing `flush` (everything left unflushed by the policy).
    final_flush_seconds: f64,
    read_bytes: u64,
    read_seconds: f64,
    read_mb_per_s: f64,
}

/// The batches to append, built up front: one buffer and where each batch ends.
struct Workload {
    data: Vec<u8>,
    ends: Vec<usize>,
    records: u64,
}

impl Workload {
    fn batches(&self) -> impl Iterator<Item = &[u8]> + '_ {
        let starts = std::iter::once(0).chain(self.ends.iter().copied());
        starts.zip(self.ends.iter()).map(|(s, &e)| &self.data[s..e])
    }
}

fn build_workload(args: &BenchArgs) -> Result<Workload, CliError> {
    let batch_size = args.batch_size.max(1);
    let batch_count = args.messages.div_ceil(batch_size);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut sequences = vec![0i32; args.producers as usize];
    let mut value = vec![0u8; args.message_size];
    let mut data = Vec::with_capacity(batch_count * (61 + batch_size * (args.message_size + 8)));
    let mut ends = Vec::with_capacity(batch_count);
    let mut records = 0u64;
    for i in 0..batch_count {
        let n = batch_size.min(args.messages - i * batch_size);
        let mut b = BatchBuilder::new();
        if !sequences.is_empty() {
            let p = i % sequences.len();
            b = b.producer(1000 + p as i64, 0, sequences[p]);
            sequences[p] = sequences[p].wrapping_add(n as i32) & i32::MAX;
        }
        for r in 0..n {
            // Distinct values, so nothing downstream can take a shortcut on repeated bytes.
            let tag = (i * batch_size + r) as u64;
            for (j, byte) in value.iter_mut().enumerate() {
                *byte = (tag.wrapping_mul(31).wrapping_add(j as u64) % 251) as u8;
            }
            b.append(now, None, Some(&value), &[]);
        }
        b.build_into(&mut data)?;
        ends.push(data.len());
        records += n as u64;
    }
    Ok(Workload {
        data,
        ends,
        records,
    })
}

fn progress(len: u64, message: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    if let Ok(style) =
        ProgressStyle::with_template("{msg:8} [{bar:40}] {bytes}/{total_bytes} {bytes_per_sec}")
    {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message);
    bar
}

pub fn run(args: &BenchArgs) -> Result<Status, CliError> {
    let (_temp, dir) = match &args.dir {
        Some(dir) => {
            if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
                return Err(CliError(format!(
                    "{}: not empty; the benchmark needs an empty directory",
                    dir.display()
                )));
            }
            (None, dir.clone())
        }
        None => {
            let t = tempfile::Builder::new().prefix("oncelog-bench").tempdir()?;
            let path = t.path().to_path_buf();
            (Some(t), path)
        }
    };
    let workload = build_workload(args)?;
    let config = LogConfig {
        segment_bytes: args.segment_bytes,
        flush_policy: args.flush,
        ..LogConfig::default()
    };
    let log = Log::open(&dir, config)?;

    let bar = progress(workload.data.len() as u64, "append");
    let mut duplicates = 0u64;
    let mut pending = 0u64;
    let start = Instant::now();
    for batch in workload.batches() {
        match log.append(batch) {
            Ok(AppendOutcome::Appended(_)) => {}
            Ok(AppendOutcome::Duplicate(_)) => duplicates += 1,
            Err(e) => {
                bar.abandon();
                return Err(CliError(format!("append failed ({}): {e}", e.kind())));
            }
        }
        pending += batch.len() as u64;
        if pending >= 1 << 20 {
            bar.inc(pending);
            pending = 0;
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let flush_start = Instant::now();
    log.flush()?;
    let final_flush_seconds = flush_start.elapsed().as_secs_f64();

    let (read_bytes, read_time) = read_back(&log)?;
    let segments = log.segment_count();
    log.close()?;

    let bytes = workload.data.len() as u64;
    let summary = Summary {
        messages: workload.records,
        batches: workload.ends.len() as u64,
        bytes,
        message_size: args.message_size,
        batch_size: args.batch_size,
        producers: args.producers,
        flush: flush_name(args.flush),
        segment_bytes: args.segment_bytes,
        segments,
        duplicates,
        seconds,
        mb_per_s: bytes as f64 / 1e6 / seconds,
        records_per_s: workload.records as f64 / seconds,
        final_flush_seconds,
        read_bytes,
        read_seconds: read_time.as_secs_f64(),
        read_mb_per_s: read_bytes as f64 / 1e6 / read_time.as_secs_f64(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&summary)?);
    } else {
        print_text(&summary);
    }
    if duplicates > 0 {
        // Every benchmark batch is new: a duplicate answer would be a dedup bug.
        eprintln!("oncelog: {duplicates} fresh batches were answered as duplicates");
        return Ok(Status::Failed);
    }
    if read_bytes != bytes {
        eprintln!("oncelog: read back {read_bytes} bytes, appended {bytes}");
        return Ok(Status::Failed);
    }
    Ok(Status::Ok)
}

/// Reads the whole log from its start in 1 MiB fetches, as a consumer would.
fn read_back(log: &Log) -> Result<(u64, Duration), CliError> {
    let end = log.log_end_offset();
    let bar = progress(log.size_bytes(), "read");
    let mut offset = log.log_start_offset();
    let mut total = 0u64;
    let start = Instant::now();
    while offset < end {
        let bytes = log.read(offset, 1 << 20)?;
        if bytes.is_empty() {
            break;
        }
        let mut last = None;
        for item in BatchIter::new(&bytes) {
            let (_, batch) = item.map_err(|e| CliError(format!("read at offset {offset}: {e}")))?;
            last = Some(batch.last_offset());
        }
        let Some(last) = last else { break };
        offset = last + 1;
        total += bytes.len() as u64;
        bar.inc(bytes.len() as u64);
    }
    let elapsed = start.elapsed();
    bar.finish_and_clear();
    Ok((total, elapsed))
}

fn print_text(s: &Summary) {
    println!(
        "appended {} messages of {} B in {} batches of {} ({} producers, flush {}): \
         {:.1} MB in {:.3} s",
        s.messages,
        s.message_size,
        s.batches,
        s.batch_size,
        s.producers,
        s.flush,
        s.bytes as f64 / 1e6,
        s.seconds
    );
    println!(
        "append: {:.1} MB/s, {:.0} records/s ({} segments, final flush {:.3} s)",
        s.mb_per_s, s.records_per_s, s.segments, s.final_flush_seconds
    );
    println!(
        "read:   {:.1} MB/s ({:.1} MB in {:.3} s)",
        s.read_mb_per_s,
        s.read_bytes as f64 / 1e6,
        s.read_seconds
    );
}
