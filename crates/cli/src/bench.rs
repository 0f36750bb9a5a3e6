//! `oncelog bench`: append throughput, then a sequential read-back, on a temporary directory.
//!
//! Every batch is built before the clock starts (with `BatchBuilder`), so the timed loop is
//! `Log::append` and nothing else. Three figures are kept apart: the append calls, the final
//! flush, and their sum, the durable throughput (the headline: a batch is only safe once
//! flushed). The read-back checks every batch's CRC-32C, so it reads every byte a consumer
//! would. MB are 10^6 bytes of whole batches (headers included), the bytes that go to disk,
//! in the progress bar and the summary alike.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Instant;

use clap::Args;
use indicatif::{ProgressBar, ProgressStyle};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{AppendOutcome, FlushPolicy, Log, LogConfig, LogConfigBuilder};
use serde::Serialize;

use crate::{plural, CliError, Status};

#[derive(Debug, Args)]
pub struct BenchArgs {
    /// Bytes of each record value.
    #[arg(long, default_value_t = 100)]
    pub(crate) message_size: usize,
    /// Records per batch.
    #[arg(long, default_value_t = 100)]
    pub(crate) batch_size: usize,
    /// Records in total (rounded up to whole batches).
    #[arg(long, default_value_t = 1_000_000)]
    pub(crate) messages: usize,
    /// When appends are made durable: `manual` (one flush at the end), `always` (every
    /// append), or `every:N` (every N records).
    #[arg(long, default_value = "manual", value_parser = parse_flush)]
    pub(crate) flush: FlushPolicy,
    /// Directory for the log (must be empty or absent; kept afterwards, and the report says
    /// where: `log kept in DIR`, JSON `kept_in`). Default: a temporary directory, removed
    /// afterwards.
    #[arg(long)]
    pub(crate) dir: Option<PathBuf>,
    /// Segment size in bytes (Kafka's `segment.bytes`). Default: Kafka's 1 GiB, or 4 MiB with
    /// --partitions (each active segment is allocated whole).
    #[arg(long)]
    segment_bytes: Option<usize>,
    /// Size of each index file (Kafka's `segment.index.bytes`). Default: Kafka's 10 MiB, or
    /// 64 KiB with --partitions.
    #[arg(long)]
    segment_index_bytes: Option<usize>,
    /// Spread the batches round robin over N partitions of one log dir (opened by a log
    /// manager) instead of one log.
    #[arg(long, value_parser = clap::value_parser!(u32).range(1..))]
    partitions: Option<u32>,
    /// With --partitions: threads appending, each to its own share of the partitions (with
    /// fewer partitions than threads, the threads share them: several appenders per log).
    #[arg(long, default_value_t = 2, value_parser = clap::value_parser!(u32).range(1..))]
    threads: u32,
    /// Idempotent producers the batches are spread over, round robin, each with its own
    /// sequence; 0 = no producer id (non-idempotent).
    #[arg(long, default_value_t = 0, allow_negative_numbers = true, value_parser = parse_producers)]
    pub(crate) producers: u32,
    /// Print the summary as one JSON object.
    #[arg(long)]
    pub(crate) json: bool,
}

impl BenchArgs {
    pub(crate) fn segment_bytes_or(&self, default: usize) -> usize {
        self.segment_bytes.unwrap_or(default)
    }
    pub(crate) fn segment_index_bytes_or(&self, default: usize) -> usize {
        self.segment_index_bytes.unwrap_or(default)
    }
    pub(crate) fn threads(&self) -> usize {
        self.threads as usize
    }
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

fn parse_producers(s: &str) -> Result<u32, String> {
    match s.parse::<i64>() {
        Ok(n) if n < 0 => Err(format!(
            "{n}: a count of producers, 0 (no producer id) or more"
        )),
        Ok(n) => u32::try_from(n).map_err(|_| format!("{n}: at most {} producers", u32::MAX)),
        Err(_) => Err(format!("`{s}`: expected a count of producers")),
    }
}

pub(crate) fn flush_name(p: FlushPolicy) -> String {
    match p {
        FlushPolicy::Manual => "manual".into(),
        FlushPolicy::Always => "always".into(),
        FlushPolicy::EveryMessages(n) => format!("every:{n}"),
        other => format!("{other:?}"),
    }
}

/// The figures of a run, of one log or of many partitions (`bench --partitions`): one shape,
/// so the two print and check alike.
#[derive(Debug, Serialize)]
pub(crate) struct Summary {
    /// Where the log was kept (`--dir`); absent when it was a temporary directory, removed.
    #[serde(skip_serializing_if = "Option::is_none")]
    kept_in: Option<String>,
    /// What only one of the two layouts reports.
    #[serde(flatten)]
    layout: Layout,
    messages: u64,
    batches: u64,
    /// Bytes of whole batches appended (headers included): what goes to disk.
    bytes: u64,
    message_size: usize,
    batch_size: usize,
    flush: String,
    segment_bytes: usize,
    /// The append calls (with the flushes the policy asks for).
    append_seconds: f64,
    append_mb_per_s: f64,
    /// The closing `flush`: everything the policy left unflushed.
    flush_seconds: f64,
    /// Appends plus the closing flush: until every batch is durable. The headline.
    durable_seconds: f64,
    durable_mb_per_s: f64,
    durable_records_per_s: f64,
    read_bytes: u64,
    read_seconds: f64,
    /// The read-back checks every batch's CRC-32C over the bytes `Log::read` returned, so every
    /// payload byte is touched, as a consumer would.
    read_mb_per_s: f64,
    read_crc_failures: u64,
    /// Fresh batches answered as duplicates (a dedup bug: the run fails).
    duplicates: u64,
}

/// What one layout of a run reports that the other has not.
#[derive(Debug, Serialize)]
#[serde(untagged)]
pub(crate) enum Layout {
    /// One log in the directory.
    OneLog { producers: u32, segments: usize },
    /// Partitions of one log dir, appended from threads.
    Partitions {
        partitions: usize,
        threads: usize,
        producers_per_partition: u32,
        segment_index_bytes: usize,
        /// Opening the empty log dir and creating the partitions.
        create_seconds: f64,
        /// Opening the log dir again after the manager was dropped without closing (a crash
        /// as far as the disk is concerned), every partition recovered.
        open_after_crash_seconds: f64,
    },
}

/// What a run measured, before the rates are derived from it.
pub(crate) struct Measured {
    pub messages: u64,
    pub batches: u64,
    pub bytes: u64,
    pub segment_bytes: usize,
    pub duplicates: u64,
    pub append_seconds: f64,
    pub flush_seconds: f64,
    pub read: ReadBack,
}

impl Summary {
    pub(crate) fn new(args: &BenchArgs, layout: Layout, m: Measured) -> Summary {
        let mb = m.bytes as f64 / 1e6;
        let durable_seconds = m.append_seconds + m.flush_seconds;
        Summary {
            kept_in: args.dir.as_ref().map(|d| d.display().to_string()),
            layout,
            messages: m.messages,
            batches: m.batches,
            bytes: m.bytes,
            message_size: args.message_size,
            batch_size: args.batch_size,
            flush: flush_name(args.flush),
            segment_bytes: m.segment_bytes,
            append_seconds: m.append_seconds,
            append_mb_per_s: mb / m.append_seconds,
            flush_seconds: m.flush_seconds,
            durable_seconds,
            durable_mb_per_s: mb / durable_seconds,
            durable_records_per_s: m.messages as f64 / durable_seconds,
            read_bytes: m.read.bytes,
            read_seconds: m.read.seconds,
            read_mb_per_s: m.read.bytes as f64 / 1e6 / m.read.seconds,
            read_crc_failures: m.read.crc_failures,
            duplicates: m.duplicates,
        }
    }

    /// Prints the summary (`--json`: one object), then checks the run: every fresh batch
    /// appended as new, and read back whole with valid CRCs.
    pub(crate) fn report(&self, json: bool) -> Result<Status, CliError> {
        if json {
            println!("{}", serde_json::to_string(self)?);
        } else {
            self.print_text();
        }
        if self.duplicates > 0 {
            // Every benchmark batch is new: a duplicate answer would be a dedup bug.
            eprintln!(
                "oncelog: {} fresh batches were answered as duplicates",
                self.duplicates
            );
            return Ok(Status::Failed);
        }
        if self.read_crc_failures > 0 {
            eprintln!(
                "oncelog: {} batches read back failed their CRC-32C",
                self.read_crc_failures
            );
            return Ok(Status::Failed);
        }
        if self.read_bytes != self.bytes {
            eprintln!(
                "oncelog: read back {} bytes, appended {}",
                self.read_bytes, self.bytes
            );
            return Ok(Status::Failed);
        }
        Ok(Status::Ok)
    }

    fn print_text(&self) {
        if let Some(dir) = &self.kept_in {
            println!("log kept in {dir} (--dir: not removed)");
        }
        let where_from = match &self.layout {
            Layout::OneLog { producers, .. } => format!("({}, ", producers_text(*producers)),
            Layout::Partitions {
                partitions,
                threads,
                ..
            } => format!(
                "across {} from {} (",
                plural(*partitions as u64, "partition", "partitions"),
                plural(*threads as u64, "thread", "threads"),
            ),
        };
        println!(
            "appended {} messages of {} B in {} of {} {where_from}flush {}): {:.1} MB",
            self.messages,
            self.message_size,
            plural(self.batches, "batch", "batches"),
            plural(self.batch_size as u64, "record", "records"),
            self.flush,
            self.bytes as f64 / 1e6,
        );
        println!(
            "durable: {:.1} MB/s, {:.0} records/s (appends {:.3} s + final flush {:.3} s = {:.3} s)",
            self.durable_mb_per_s,
            self.durable_records_per_s,
            self.append_seconds,
            self.flush_seconds,
            self.durable_seconds
        );
        let segments = match &self.layout {
            Layout::OneLog { segments, .. } => {
                format!(" ({})", plural(*segments as u64, "segment", "segments"))
            }
            Layout::Partitions { .. } => String::new(),
        };
        println!(
            "append:  {:.1} MB/s, the append calls alone, before the final flush{segments}",
            self.append_mb_per_s,
        );
        println!(
            "read:    {:.1} MB/s ({:.1} MB in {:.3} s, every batch's CRC-32C checked)",
            self.read_mb_per_s,
            self.read_bytes as f64 / 1e6,
            self.read_seconds
        );
        if let Layout::Partitions {
            partitions,
            segment_index_bytes,
            create_seconds,
            open_after_crash_seconds,
            ..
        } = &self.layout
        {
            println!(
                "create:  {} in {:.3} s (segments of {} B, indexes of {} B)",
                plural(*partitions as u64, "partition", "partitions"),
                create_seconds,
                self.segment_bytes,
                segment_index_bytes
            );
            println!("reopen:  after a crash in {open_after_crash_seconds:.3} s");
        }
        println!("MB = 10^6 bytes of whole batches, headers included");
    }
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

/// Appends to `out` one batch of `records` distinct values of `value.len()` bytes, numbered from
/// `first_record`, with the header settings of `builder`.
pub(crate) fn build_batch(
    builder: &mut BatchBuilder,
    first_record: u64,
    records: usize,
    value: &mut [u8],
    now: i64,
    out: &mut Vec<u8>,
) -> Result<(), CliError> {
    builder.clear();
    for r in 0..records {
        // Distinct values, so nothing downstream can take a shortcut on repeated bytes.
        let tag = first_record + r as u64;
        for (j, byte) in value.iter_mut().enumerate() {
            *byte = (tag.wrapping_mul(31).wrapping_add(j as u64) % 251) as u8;
        }
        builder.append(now, None, Some(value), &[]);
    }
    builder.build_into(out)?;
    Ok(())
}

/// The benchmark's log configuration; a value out of range is refused naming the option that
/// set it.
pub(crate) fn build_config(builder: LogConfigBuilder) -> Result<LogConfig, CliError> {
    builder
        .build()
        .map_err(|e| CliError(format!("bench: --{}: {e}", e.field.replace('_', "-"))))
}

/// Refuses options that cannot describe a benchmark, before anything is built or created.
pub(crate) fn check_args(args: &BenchArgs, config: &LogConfig) -> Result<(), CliError> {
    let bad = |msg: String| Err(CliError(format!("bench: {msg}")));
    if args.messages == 0 {
        return bad("--messages must be at least 1".into());
    }
    if args.batch_size == 0 {
        return bad("--batch-size must be at least 1 record".into());
    }
    let records = args.batch_size.min(args.messages);
    // Before building anything that large: the values alone must fit in one batch.
    if records.saturating_mul(args.message_size) > config.max_message_bytes {
        return bad(format!(
            "a batch of {records} records of {} B is larger than the log accepts \
             (max.message.bytes {}): lower --batch-size or --message-size",
            args.message_size, config.max_message_bytes
        ));
    }
    // The largest batch, built for real: its exact size decides what the log accepts.
    let mut sample = Vec::new();
    let mut value = vec![0u8; args.message_size];
    build_batch(
        &mut BatchBuilder::new(),
        0,
        records,
        &mut value,
        0,
        &mut sample,
    )?;
    if sample.len() > config.max_message_bytes {
        return bad(format!(
            "a batch of {records} records of {} B is {} bytes, above max.message.bytes {}: \
             lower --batch-size or --message-size",
            args.message_size,
            sample.len(),
            config.max_message_bytes
        ));
    }
    if sample.len() > config.segment_bytes {
        return bad(format!(
            "--segment-bytes {} cannot hold one batch of {} bytes",
            config.segment_bytes,
            sample.len()
        ));
    }
    Ok(())
}

fn build_workload(args: &BenchArgs) -> Result<Workload, CliError> {
    let batch_size = args.batch_size;
    let batch_count = args.messages.div_ceil(batch_size);
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as i64)
        .unwrap_or(0);
    let mut sequences = vec![0i32; args.producers as usize];
    let mut value = vec![0u8; args.message_size];
    let per_batch = 61 + batch_size.saturating_mul(args.message_size + 8);
    let mut data = Vec::new();
    data.try_reserve(batch_count.saturating_mul(per_batch))
        .map_err(|_| {
            CliError(format!(
                "bench: the workload ({batch_count} batches of about {per_batch} bytes) does not \
                 fit in memory, where it is built before the clock starts"
            ))
        })?;
    let mut ends = Vec::with_capacity(batch_count);
    let mut records = 0u64;
    for i in 0..batch_count {
        let n = batch_size.min(args.messages - i * batch_size);
        let mut builder = BatchBuilder::new();
        if !sequences.is_empty() {
            let p = i % sequences.len();
            builder = builder.producer(1000 + p as i64, 0, sequences[p]);
            sequences[p] = sequences[p].wrapping_add(n as i32) & i32::MAX;
        }
        build_batch(
            &mut builder,
            (i * batch_size) as u64,
            n,
            &mut value,
            now,
            &mut data,
        )?;
        ends.push(data.len());
        records += n as u64;
    }
    Ok(Workload {
        data,
        ends,
        records,
    })
}

pub(crate) fn progress(len: u64, message: &'static str) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::new(len);
    // Decimal units, as in the summary: MB = 10^6 bytes.
    if let Ok(style) = ProgressStyle::with_template(
        "{msg:8} [{bar:40}] {decimal_bytes}/{decimal_total_bytes} {decimal_bytes_per_sec}",
    ) {
        bar.set_style(style.progress_chars("=> "));
    }
    bar.set_message(message);
    bar
}

pub fn run(args: &BenchArgs) -> Result<Status, CliError> {
    let defaults = LogConfig::default();
    let config = build_config(
        LogConfig::builder()
            .segment_bytes(args.segment_bytes_or(defaults.segment_bytes))
            .segment_index_bytes(args.segment_index_bytes_or(defaults.segment_index_bytes))
            .flush_policy(args.flush),
    )?;
    check_args(args, &config)?;
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
    if let Some(n) = args.partitions {
        return crate::bench_partitions::run(args, n as usize, &dir);
    }
    let workload = build_workload(args)?;
    let log = Log::open(&dir, config.clone())?;

    let bar = progress(workload.data.len() as u64, "append");
    let mut duplicates = 0u64;
    let mut pending = 0u64;
    let start = Instant::now();
    for batch in workload.batches() {
        match log.append(batch) {
            Ok(AppendOutcome::Appended(_)) => {}
            Ok(AppendOutcome::Duplicate(_)) => duplicates += 1,
            Ok(other) => {
                bar.abandon();
                return Err(CliError(format!("append: unexpected outcome {other:?}")));
            }
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
    let append_seconds = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    let flush_start = Instant::now();
    log.flush()?;
    let flush_seconds = flush_start.elapsed().as_secs_f64();

    let read = read_back(&[&log])?;
    let segments = log.maintenance().segment_count();
    log.close()?;

    let measured = Measured {
        messages: workload.records,
        batches: workload.ends.len() as u64,
        bytes: workload.data.len() as u64,
        segment_bytes: config.segment_bytes,
        duplicates,
        append_seconds,
        flush_seconds,
        read,
    };
    let layout = Layout::OneLog {
        producers: args.producers,
        segments,
    };
    Summary::new(args, layout, measured).report(args.json)
}

/// What the read-back saw.
pub(crate) struct ReadBack {
    bytes: u64,
    seconds: f64,
    crc_failures: u64,
}

/// Reads every log from its start in 1 MiB fetches and checks the CRC-32C of every batch over
/// the bytes returned, so every payload byte is read, as a consumer checking CRCs does (a walk
/// over batch headers alone would measure only the zero-copy hand-out).
pub(crate) fn read_back(logs: &[&Log]) -> Result<ReadBack, CliError> {
    let bar = progress(logs.iter().map(|l| l.size_bytes()).sum(), "read");
    let mut bytes_read = 0u64;
    let mut crc_failures = 0u64;
    let start = Instant::now();
    for log in logs {
        let end = log.log_end_offset();
        let mut offset = log.log_start_offset();
        while offset < end {
            let fetch = log.fetch(offset, 1 << 20)?;
            if fetch.bytes.is_empty() {
                break;
            }
            for item in BatchIter::new(&fetch.bytes) {
                let (_, batch) =
                    item.map_err(|e| CliError(format!("read at offset {offset}: {e}")))?;
                crc_failures += u64::from(!batch.is_crc_valid());
            }
            offset = fetch.next_offset;
            bytes_read += fetch.bytes.len() as u64;
            bar.inc(fetch.bytes.len() as u64);
        }
    }
    let seconds = start.elapsed().as_secs_f64();
    bar.finish_and_clear();
    Ok(ReadBack {
        bytes: bytes_read,
        seconds,
        crc_failures,
    })
}

fn producers_text(n: u32) -> String {
    match n {
        0 => "no producer id".into(),
        1 => "1 idempotent producer".into(),
        n => format!("{n} idempotent producers"),
    }
}
