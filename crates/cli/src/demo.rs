//! `oncelog demo`: the lost acknowledgement, end to end, told step by step (docs/design.md, "The
//! contract").
//!
//! An idempotent producer appends; its acknowledgement is lost and it retries; a process that
//! appended and flushed is killed with SIGKILL; after the reopen the producer retries every
//! batch of its dedup window; a gap and a stale epoch are refused; a final read shows every
//! record exactly once. Every answer is checked against what the contract promises, and the
//! demo exits 1 at the first one that differs.
//!
//! The crash is real: the binary runs itself as a child (`oncelog demo-child`, hidden), which
//! opens the log, appends, flushes, prints the offsets it was given, and waits to be killed.

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use clap::Args;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::producer::ProducerError;
use oncelog::{AppendError, AppendOutcome, Log, LogConfig};

use crate::output::Out;
use crate::{CliError, Status};

#[derive(Debug, Args)]
pub struct DemoArgs {
    /// Directory for the log (must be empty or absent; kept afterwards). Default: a temporary
    /// directory, removed afterwards.
    #[arg(long)]
    dir: Option<PathBuf>,
    /// The consumer's half instead: a consumer killed between its side effect and its offset
    /// commit, its processed-id store applying the redelivered message once.
    #[arg(long)]
    consumer: bool,
}

/// The child process of step 3 (not for direct use).
#[derive(Debug, Args)]
pub struct DemoChildArgs {
    dir: PathBuf,
    /// Sequence of the first batch to append.
    first_seq: i32,
    /// Batches to append before flushing.
    batches: i32,
}

const PRODUCER: i64 = 42;
const RECORDS_PER_BATCH: i32 = 3;
/// Batches appended in step 1 and by the child in step 3: together more than the window, so
/// step 4 retries the newest `window` of them, not everything.
const FIRST_BATCHES: i32 = 4;
const CHILD_BATCHES: i32 = 3;
const TS: i64 = 1_700_000_000_000;

/// Small files: the demo's directory should not preallocate Kafka's 1 GiB segment.
fn config() -> Result<LogConfig, CliError> {
    Ok(LogConfig::builder()
        .segment_bytes(1 << 20)
        .segment_index_bytes(64 << 10)
        .build()?)
}

/// The batch the producer sends at `seq` under `epoch`: the same bytes every time, as a
/// client's retry is. Record values are unique across the demo, so the final read can tell a
/// record stored twice.
fn batch(epoch: i16, seq: i32) -> Result<Vec<u8>, CliError> {
    let mut b = BatchBuilder::new().producer(PRODUCER, epoch, seq);
    for i in 0..RECORDS_PER_BATCH {
        let value = format!("producer {PRODUCER} epoch {epoch} record {}", seq + i);
        b.append(TS + i64::from(seq + i), None, Some(value.as_bytes()), &[]);
    }
    Ok(b.build()?)
}

/// A batch the log has acknowledged: its first sequence and the offsets it got.
#[derive(Debug, Clone, Copy)]
struct Acked {
    seq: i32,
    first: i64,
    last: i64,
}

/// Prints the story; each line is flushed, so it interleaves with anything on stderr.
struct Narrator {
    out: Out,
}

impl Narrator {
    fn say(&mut self, text: impl AsRef<str>) -> Result<(), CliError> {
        self.out.line(text.as_ref())?;
        self.out.flush()?;
        Ok(())
    }
}

/// A step that did not behave as the contract says.
fn unexpected(what: impl std::fmt::Display) -> CliError {
    CliError(format!("UNEXPECTED: {what}"))
}

fn seqs(seq: i32) -> String {
    format!("seq {seq}..{}", seq + RECORDS_PER_BATCH - 1)
}

pub fn run(args: &DemoArgs) -> Result<Status, CliError> {
    let (_temp, dir) = match &args.dir {
        Some(dir) => {
            if dir.exists() && std::fs::read_dir(dir)?.next().is_some() {
                return Err(CliError(format!(
                    "{}: not empty; the demo needs an empty directory",
                    dir.display()
                )));
            }
            (None, dir.clone())
        }
        None => {
            let t = tempfile::Builder::new().prefix("oncelog-demo").tempdir()?;
            let path = t.path().to_path_buf();
            (Some(t), path)
        }
    };
    if args.consumer {
        return crate::demo_consumer::run(&dir);
    }
    let mut n = Narrator { out: Out::stdout() };
    n.say(format!(
        "oncelog demo: a lost acknowledgement, a retry, a crash, and retries after it, in {}",
        dir.display()
    ))?;
    let mut acked = step1_appends(&mut n, &dir)?;
    step2_lost_ack(&mut n, &dir, &acked)?;
    acked.extend(step3_killed_child(&mut n, &dir, &acked)?);
    let log = step4_reopen_and_retry(&mut n, &dir, &acked)?;
    let epoch1_records = step5_refusals(&mut n, &log, &acked)?;
    step6_read_back(
        &mut n,
        &log,
        acked.len() as i64 * i64::from(RECORDS_PER_BATCH) + epoch1_records,
    )?;
    log.close()?;
    n.say("demo passed: every step behaved as the contract says")?;
    Ok(Status::Ok)
}

fn step1_appends(n: &mut Narrator, dir: &Path) -> Result<Vec<Acked>, CliError> {
    n.say(format!(
        "step 1: idempotent producer {PRODUCER} (epoch 0) appends {FIRST_BATCHES} batches of \
         {RECORDS_PER_BATCH} records"
    ))?;
    let log = Log::open(dir, config()?)?;
    let mut acked = Vec::new();
    for i in 0..FIRST_BATCHES {
        let seq = i * RECORDS_PER_BATCH;
        match log.append(&batch(0, seq)?) {
            Ok(AppendOutcome::Appended(info)) => {
                n.say(format!(
                    "  {} -> appended at offsets {}..{}",
                    seqs(seq),
                    info.first_offset,
                    info.last_offset
                ))?;
                acked.push(Acked {
                    seq,
                    first: info.first_offset,
                    last: info.last_offset,
                });
            }
            other => return Err(unexpected(format!("{}: {other:?}", seqs(seq)))),
        }
    }
    log.close()?;
    Ok(acked)
}

fn step2_lost_ack(n: &mut Narrator, dir: &Path, acked: &[Acked]) -> Result<(), CliError> {
    let last = acked
        .last()
        .ok_or_else(|| unexpected("nothing was appended"))?;
    n.say(format!(
        "step 2: the acknowledgement of {} is lost; the producer sends the same batch again",
        seqs(last.seq)
    ))?;
    let log = Log::open(dir, config()?)?;
    let end_before = log.log_end_offset();
    match log.append(&batch(0, last.seq)?) {
        Ok(AppendOutcome::Duplicate(d))
            if (d.first_offset, d.last_offset) == (last.first, last.last) =>
        {
            n.say(format!(
                "  retry {} -> duplicate, the original offsets {}..{}",
                seqs(last.seq),
                d.first_offset,
                d.last_offset
            ))?
        }
        other => {
            return Err(unexpected(format!(
                "retry of {} should be a duplicate at {}..{}, got {other:?}",
                seqs(last.seq),
                last.first,
                last.last
            )))
        }
    }
    let end_after = log.log_end_offset();
    if end_after != end_before {
        return Err(unexpected(format!(
            "the log end moved from {end_before} to {end_after}: the retry was written"
        )));
    }
    n.say(format!(
        "  nothing was written: the log end is still {end_after}"
    ))?;
    log.close()?;
    Ok(())
}

fn step3_killed_child(
    n: &mut Narrator,
    dir: &Path,
    acked: &[Acked],
) -> Result<Vec<Acked>, CliError> {
    let first_seq = acked.last().map_or(0, |a| a.seq + RECORDS_PER_BATCH);
    n.say(format!(
        "step 3: a new broker process appends {CHILD_BATCHES} more batches, flushes, and is \
         killed with SIGKILL"
    ))?;
    let mut child = Command::new(std::env::current_exe()?)
        .arg("demo-child")
        .arg(dir)
        .arg(first_seq.to_string())
        .arg(CHILD_BATCHES.to_string())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()?;
    let pid = child.id();
    let result = read_child_acks(&mut child);
    // Kill before looking at what was read, so a failed read never leaves the child waiting.
    child.kill()?;
    let status = child.wait()?;
    let child_acked = result?;
    for a in &child_acked {
        n.say(format!(
            "  [pid {pid}] {} -> appended at offsets {}..{}, flushed",
            seqs(a.seq),
            a.first,
            a.last
        ))?;
    }
    if child_acked.len() != CHILD_BATCHES as usize {
        return Err(unexpected(format!(
            "the child acknowledged {} batches, expected {CHILD_BATCHES}",
            child_acked.len()
        )));
    }
    match killed_by(&status) {
        Some(signal) => n.say(format!(
            "  [pid {pid}] killed by signal {signal} (SIGKILL) with the log still open: no close, \
             no final snapshot"
        ))?,
        None => {
            return Err(unexpected(format!(
                "the child was not killed by a signal: {status}"
            )))
        }
    }
    Ok(child_acked)
}

/// Reads the child's `ACK seq first last` lines up to `FLUSHED`.
fn read_child_acks(child: &mut std::process::Child) -> Result<Vec<Acked>, CliError> {
    let stdout = child
        .stdout
        .take()
        .ok_or_else(|| CliError("the child has no stdout".into()))?;
    let mut acked = Vec::new();
    for line in BufReader::new(stdout).lines() {
        let line = line?;
        if line == "FLUSHED" {
            return Ok(acked);
        }
        let parts: Vec<&str> = line.split(' ').collect();
        let parsed = match parts.as_slice() {
            ["ACK", seq, first, last] => seq
                .parse()
                .ok()
                .zip(first.parse().ok())
                .zip(last.parse().ok())
                .map(|((seq, first), last)| Acked { seq, first, last }),
            _ => None,
        };
        acked.push(parsed.ok_or_else(|| unexpected(format!("child said: {line}")))?);
    }
    Err(unexpected("the child exited before it had flushed"))
}

#[cfg(unix)]
fn killed_by(status: &std::process::ExitStatus) -> Option<i32> {
    use std::os::unix::process::ExitStatusExt;
    status.signal().filter(|&s| s == 9)
}

#[cfg(not(unix))]
fn killed_by(_status: &std::process::ExitStatus) -> Option<i32> {
    None
}

fn step4_reopen_and_retry(n: &mut Narrator, dir: &Path, acked: &[Acked]) -> Result<Log, CliError> {
    n.say("step 4: the broker restarts and opens the log")?;
    let log = Log::open(dir, config()?)?;
    let r = log.recovery_report();
    if r.clean_shutdown {
        return Err(unexpected("the log reports a clean shutdown after SIGKILL"));
    }
    n.say(format!(
        "  recovery: unclean shutdown; validated {} bytes of batches in {} after recovery \
         point {}; {} cut",
        r.bytes_validated,
        crate::plural(r.segments_validated as u64, "segment", "segments"),
        r.recovery_point,
        if r.truncations.is_empty() {
            "nothing".to_string()
        } else {
            crate::plural(r.truncations.len() as u64, "tail", "tails")
        }
    ))?;
    let p = log.producer_load_report();
    n.say(format!(
        "  producer state: {}, {} replayed after it",
        p.snapshot_offset
            .map_or("no snapshot".to_string(), |o| format!(
                "snapshot at offset {o}"
            )),
        crate::plural(p.batches_replayed, "batch header", "batch headers")
    ))?;
    let expected_end = acked.last().map_or(0, |a| a.last + 1);
    if log.log_end_offset() != expected_end {
        return Err(unexpected(format!(
            "log end {} after the crash, but the flushed batches end at {expected_end}",
            log.log_end_offset()
        )));
    }
    n.say(format!(
        "  log end {expected_end}: every flushed batch survived the crash"
    ))?;
    let window = log.config().producer_state.window;
    let retried = &acked[acked.len().saturating_sub(window)..];
    n.say(format!(
        "  the producer cannot tell which acknowledgements the crash swallowed, and retries \
         every batch of its window (the last {window}):"
    ))?;
    for a in retried {
        match log.append(&batch(0, a.seq)?) {
            Ok(AppendOutcome::Duplicate(d))
                if (d.first_offset, d.last_offset) == (a.first, a.last) =>
            {
                n.say(format!(
                    "  retry {} -> duplicate, the original offsets {}..{}",
                    seqs(a.seq),
                    d.first_offset,
                    d.last_offset
                ))?
            }
            other => {
                return Err(unexpected(format!(
                    "retry of {} after the crash should be a duplicate at {}..{}, got {other:?}",
                    seqs(a.seq),
                    a.first,
                    a.last
                )))
            }
        }
    }
    if log.log_end_offset() != expected_end {
        return Err(unexpected("a retry after the crash was written"));
    }
    n.say(format!(
        "  nothing was written: the log end is still {expected_end}"
    ))?;
    Ok(log)
}

/// Returns the records appended under the new epoch.
fn step5_refusals(n: &mut Narrator, log: &Log, acked: &[Acked]) -> Result<i64, CliError> {
    n.say("step 5: batches that break the producer's rules are refused with typed errors")?;
    let next = acked.last().map_or(0, |a| a.seq + RECORDS_PER_BATCH);
    let skipped = next + RECORDS_PER_BATCH;
    match log.append(&batch(0, skipped)?) {
        Err(e @ AppendError::Producer(ProducerError::OutOfOrderSequence { expected, got, .. }))
            if (expected, got) == (next, skipped) =>
        {
            n.say(format!(
                "  gap: {} while {} is expected -> {}: expected {expected}, got {got}",
                seqs(skipped),
                seqs(next),
                e.kind()
            ))?
        }
        other => {
            return Err(unexpected(format!(
                "{} after a gap should be out_of_order_sequence (expected {next}), got {other:?}",
                seqs(skipped)
            )))
        }
    }
    match log.append(&batch(1, 0)?) {
        Ok(AppendOutcome::Appended(info)) => n.say(format!(
            "  the producer bumps its epoch: epoch 1 {} -> appended at offsets {}..{}",
            seqs(0),
            info.first_offset,
            info.last_offset
        ))?,
        other => {
            return Err(unexpected(format!(
                "epoch 1 seq 0 should be appended, got {other:?}"
            )))
        }
    }
    match log.append(&batch(0, next)?) {
        Err(
            e @ AppendError::Producer(ProducerError::InvalidProducerEpoch { current, got, .. }),
        ) if (current, got) == (1, 0) => n.say(format!(
            "  stale epoch: epoch 0 {} from a zombie producer -> {}: current {current}, got {got}",
            seqs(next),
            e.kind()
        ))?,
        other => {
            return Err(unexpected(format!(
                "an epoch-0 batch after epoch 1 should be invalid_producer_epoch, got {other:?}"
            )))
        }
    }
    Ok(i64::from(RECORDS_PER_BATCH))
}

fn step6_read_back(n: &mut Narrator, log: &Log, expected_records: i64) -> Result<(), CliError> {
    n.say("step 6: a consumer reads the whole log")?;
    log.flush()?;
    let end = log.log_end_offset();
    let mut offset = log.log_start_offset();
    let (mut batches, mut records) = (0u64, 0i64);
    let mut values = BTreeSet::new();
    while offset < end {
        let bytes = log.read(offset, 1 << 20)?;
        let mut next = offset;
        for item in BatchIter::new(&bytes) {
            let (pos, b) = item.map_err(|e| unexpected(format!("read: {e}")))?;
            let buf = b.records_buf()?;
            for record in b.iter_records(&buf) {
                let record = record.map_err(|e| unexpected(format!("batch at byte {pos}: {e}")))?;
                let value = record.value.unwrap_or_default().to_vec();
                if !values.insert(value) {
                    return Err(unexpected(format!(
                        "the record at offset {} is stored twice",
                        record.offset
                    )));
                }
                records += 1;
            }
            batches += 1;
            next = b.last_offset() + 1;
        }
        if next == offset {
            return Err(unexpected(format!("no batch readable at offset {offset}")));
        }
        offset = next;
    }
    if records != expected_records || records != end - log.log_start_offset() {
        return Err(unexpected(format!(
            "read {records} records, the producer was acknowledged {expected_records}, the log \
             holds offsets up to {end}"
        )));
    }
    n.say(format!(
        "  {batches} batches, {records} records at offsets 0..{}: every acknowledged record \
         exactly once, none twice, none missing",
        end - 1
    ))?;
    Ok(())
}

/// The child of step 3: append, flush, acknowledge, then wait to be killed. If the parent goes
/// away instead (its end of stdin closes), exit without closing the log, as a crash would.
pub fn run_child(args: &DemoChildArgs) -> Result<Status, CliError> {
    let log = Log::open(&args.dir, config()?)?;
    let mut acked = Vec::new();
    for i in 0..args.batches {
        let seq = args.first_seq + i * RECORDS_PER_BATCH;
        match log.append(&batch(0, seq)?)? {
            AppendOutcome::Appended(info) => acked.push((seq, info.first_offset, info.last_offset)),
            other => return Err(unexpected(format!("child: {}: {other:?}", seqs(seq)))),
        }
    }
    // Acknowledge only what a flush made durable: that is what the parent checks after the kill.
    log.flush()?;
    let mut out = Out::stdout();
    for (seq, first, last) in acked {
        out.line(&format!("ACK {seq} {first} {last}"))?;
    }
    out.line("FLUSHED")?;
    out.flush()?;
    let mut sink = Vec::new();
    let _ = std::io::stdin().read_to_end(&mut sink);
    // `exit` runs no destructors: the log is left unclosed, as a crash would leave it.
    std::process::exit(2);
}
