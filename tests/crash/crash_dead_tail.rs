//! Crashes at every file operation of the trim of a dead tail: a seeded log
//! on the simulated file system, truncated while a reader held bytes after the cut (so the cut
//! segment keeps them as a dead tail), the reader gone, then the call that trims it (close, or
//! the deletion job) whose Nth file operation fails and every one after it, as a power cut
//! would; then a crash that keeps a seeded choice of what was not synced, and a reopen.
//!
//! After each reopen the log must be the truncated one (the same batches at the same offsets,
//! never a removed batch back), and once it is closed again no segment file holds a byte
//! outside the log.
//!
//! Environment:
//! * `ONCELOG_DEAD_TAIL_CRASH_POINTS=<n>`: crash points (default 1,500).
//! * `ONCELOG_CRASH_SEED=<n>`: replay one seed only (every failure prints its seed).

use crate::common_sim;

use std::sync::Arc;

use common_sim::{client_batch, describe_dir, dir, open, sweep_seeds, Ctx, StepClock};
use oncelog::format::BatchIter;
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::{FileSystem, SimFs};
use oncelog::{AppendOutcome, Log, LogConfig};

const DEFAULT_POINTS: u64 = 1_500;
const T0: i64 = 1_700_000_000_000;
const TEST: &str = "a_crash_at_any_file_operation_of_a_dead_tail_trim_leaves_the_truncated_log";

struct Built {
    fs: SimFs,
    clock: Arc<StepClock>,
    cfg: LogConfig,
    log: Log,
    /// The trim comes from close (else from the deletion job).
    by_close: bool,
    rng: SplitMix64,
}

/// The batches readable from the log start, and the log end.
fn content(ctx: &Ctx, log: &Log) -> (Vec<Vec<u8>>, i64) {
    let end = log.log_end_offset();
    let mut next = log.log_start_offset();
    let mut out = Vec::new();
    while next < end {
        let bytes = log
            .read(next, 1 << 20)
            .unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
        if bytes.is_empty() {
            ctx.fail(format!("empty read at {next} below the end {end}"));
        }
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
            next = b.last_offset() + 1;
            out.push(b.as_bytes().to_vec());
        }
    }
    (out, end)
}

/// The log truncated under a reader, the reader gone: the cut segment has a dead tail.
fn build(seed: u64, ctx: &mut Ctx) -> Built {
    let mut rng = SplitMix64::new(seed);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = LogConfig::builder()
        .segment_bytes((4 + rng.below(12) as usize) * 1024)
        .segment_index_bytes(96 + 12 * rng.below(20) as usize)
        .index_interval_bytes(rng.below(1024) as usize)
        // No background thread: the file operations are the same on every replay.
        .prefault_bytes(0)
        .file_delete_delay_ms(0)
        .build()
        .unwrap();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("first open: {e}")));
    let batches = 10 + rng.below(40);
    for i in 0..batches {
        let client = client_batch(
            1 + rng.below(8) as usize,
            rng.below(300) as usize,
            T0 + i as i64,
            None,
            i as u8,
        );
        match log.append(&client) {
            Ok(AppendOutcome::Appended(_)) => {}
            other => ctx.fail(format!("append {i}: {other:?}")),
        }
    }
    log.flush()
        .unwrap_or_else(|e| ctx.fail(format!("flush: {e}")));
    // Half the logs are truncated after a crash and a reopen: recovery may leave the active
    // segment's trimmed length not durable, and the truncation must not vouch for it unsynced.
    let reopened = rng.chance(1, 2);
    let log = if reopened {
        let flushed = log.log_end_offset();
        log.abandon();
        let report = fs.crash(rng.next_u64());
        match open(&fs, &clock, &cfg) {
            Ok(l) if l.log_end_offset() == flushed => l,
            Ok(l) => ctx.fail(format!(
                "reopen after {report:?}: end {}, flushed to {flushed}",
                l.log_end_offset()
            )),
            Err(e) => ctx.fail(format!("reopen after {report:?}: {e}")),
        }
    } else {
        log
    };
    let end = log.log_end_offset();
    let to = rng.below(end as u64) as i64;
    // A reader of the batch holding the cut point: the cut segment cannot shrink under it.
    let held = log
        .read(to, 1 << 20)
        .unwrap_or_else(|e| ctx.fail(format!("read at {to}: {e}")));
    log.replica()
        .truncate_to(to)
        .unwrap_or_else(|e| ctx.fail(format!("truncate_to({to}): {e}")));
    drop(held);
    let by_close = rng.chance(1, 2);
    ctx.note(format!(
        "{cfg:?}\n{batches} batches, end {end}, reopened after a crash: {reopened}, truncated to \
         {to}, trim by close: {by_close}\n{}",
        describe_dir(&fs)
    ));
    Built {
        fs,
        clock,
        cfg,
        log,
        by_close,
        rng,
    }
}

fn trim(b: &Built) -> Result<(), String> {
    if b.by_close {
        b.log.close().map_err(|e| e.to_string())
    } else {
        b.log
            .maintenance()
            .remove_deleted_files(T0)
            .map_err(|e| e.to_string())
    }
}

/// Every `.log` holds whole batches up to its end, none reaching the next segment's base.
fn assert_files_hold_only_the_log(ctx: &Ctx, fs: &SimFs) {
    let mut logs: Vec<(i64, String)> = fs
        .list(&dir())
        .unwrap_or_default()
        .into_iter()
        .filter_map(|n| Some((n.strip_suffix(".log")?.parse::<i64>().ok()?, n.clone())))
        .collect();
    logs.sort();
    for (i, (_, name)) in logs.iter().enumerate() {
        let bytes = fs
            .read_live(&dir().join(name))
            .unwrap_or_else(|e| ctx.fail(format!("{name}: {e}")));
        let mut end = 0;
        for item in BatchIter::new(&bytes) {
            let Ok((at, b)) = item else {
                ctx.fail(format!(
                    "{name}: bytes after its batches from {end}\n{}",
                    describe_dir(fs)
                ));
            };
            if logs
                .get(i + 1)
                .is_some_and(|(next, _)| b.last_offset() >= *next)
            {
                ctx.fail(format!(
                    "{name}: offset {} at byte {at} is past the next segment's base\n{}",
                    b.last_offset(),
                    describe_dir(fs)
                ));
            }
            end = at + b.as_bytes().len();
        }
        if end != bytes.len() {
            ctx.fail(format!(
                "{name}: {} bytes, its batches end at {end}\n{}",
                bytes.len(),
                describe_dir(fs)
            ));
        }
    }
}

fn crash_every_op(seed: u64) -> u64 {
    let mut ctx = Ctx::in_file(seed, "crash_dead_tail", TEST);
    let b = build(seed, &mut ctx);
    let truncated = content(&ctx, &b.log);
    let ops_before = b.fs.counters().ops;
    if let Err(e) = trim(&b) {
        ctx.fail(format!("the trim without faults: {e}"));
    }
    let ops = b.fs.counters().ops - ops_before;
    if b.by_close {
        assert_files_hold_only_the_log(&ctx, &b.fs);
    }
    b.log.abandon();
    for n in 1..=ops + 1 {
        let mut ctx = Ctx::in_file(seed, "crash_dead_tail", TEST);
        let mut b = build(seed, &mut ctx);
        ctx.note(format!("power cut at file operation {n} of {ops}"));
        b.fs.fail_from(OpKind::Any, n, libc::EIO);
        let result = trim(&b);
        ctx.note(format!("trim: {result:?}"));
        if n > ops && result.is_err() {
            ctx.fail(format!("the trim failed with no fault in it: {result:?}"));
        }
        b.log.abandon();
        b.fs.clear_faults();
        let report = b.fs.crash(b.rng.next_u64());
        ctx.note(format!("crash: {report:?}\n{}", describe_dir(&b.fs)));
        let log = open(&b.fs, &b.clock, &b.cfg).unwrap_or_else(|e| {
            ctx.fail(format!(
                "open after the crash: {e}\n{}",
                describe_dir(&b.fs)
            ))
        });
        let seen = content(&ctx, &log);
        if seen != truncated {
            ctx.fail(format!(
                "not the truncated log: end {} (want {}), {} batches (want {})\n{}",
                seen.1,
                truncated.1,
                seen.0.len(),
                truncated.0.len(),
                describe_dir(&b.fs)
            ));
        }
        log.close()
            .unwrap_or_else(|e| ctx.fail(format!("close after the reopen: {e}")));
        assert_files_hold_only_the_log(&ctx, &b.fs);
    }
    ops + 1
}

#[test]
fn a_crash_at_any_file_operation_of_a_dead_tail_trim_leaves_the_truncated_log() {
    let points = sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_DEAD_TAIL_CRASH_POINTS",
        DEFAULT_POINTS,
        0,
        "dead-tail trim crash points",
        crash_every_op,
    );
    assert!(points > 0);
}
