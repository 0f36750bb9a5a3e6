//! Crashes at every file operation of a rewrite: a seeded log on the simulated
//! file system, with several idempotent producers, leader epochs and rolled segments, all of it
//! durable; then one rewrite (a truncation, a full truncation, DeleteRecords with retention, or
//! retention by size and time) whose Nth file operation fails and every one after it, as a
//! power cut in the middle of the call would; then a crash that keeps a seeded choice of what
//! was not synced, and a reopen. Every file operation of the rewrite is a crash point.
//!
//! After each reopen the log must be the one before the rewrite or the one after it: the same
//! batches at the same offsets, the same log start, the same leader epochs, never a hole and
//! never a removed batch back. Producer state must match the state shown: before, every retry
//! in a window is a duplicate; after a truncation, a retry of a kept batch is a duplicate and a
//! retry of a removed one is appended again; after retention, every retry is still a duplicate
//! (dedup outlives data).
//!
//! Every crash point of a seed's rewrite is swept. The full sweep of each test is the rewrites
//! of its seeds until 3,000 crash points; by default `cargo test` sweeps a sample of those
//! seeds, at least 800 points, that still includes every kind of rewrite of the test and every
//! kind of file operation the full sweep's rewrites perform, each at every one of its
//! operations in some round (`common_sim::sweep_every_op_sampled`, which checks it).
//!
//! Environment:
//! * `ONCELOG_REWRITE_CRASH_POINTS=<n>`: the sweep of `n` crash points per test (3,000: the
//!   full one).
//! * `ONCELOG_CRASH_SEED=<n>`: replay one seed only (every failure prints its seed).

use crate::common_sim;

use std::sync::Arc;

use common_sim::{
    client_batch, op_kinds_since, open, sweep_every_op_sampled, Ctx, Kinds, Model, ProducerSeq,
    StepClock, Stored, DEDUP_WINDOW,
};
use oncelog::format::BatchIter;
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::{AppendOutcome, EpochEntry, Log, LogConfig};

/// The full sweep's crash points per test, and the least the default sample sweeps.
const FULL_POINTS: u64 = 3_000;
const DEFAULT_POINTS: u64 = 800;
const T0: i64 = 1_700_000_000_000;

/// One rewrite and its arguments.
#[derive(Debug, Clone, Copy)]
enum Rewrite {
    Truncate(i64),
    TruncateFully(i64),
    /// DeleteRecords to the offset, then retention (which removes the segments below it).
    DeleteRecords(i64),
    /// Retention by the config's size and time limits at this wall-clock time.
    Retention(i64),
}

/// The observable state of a log: what a reader and a producer see.
#[derive(Debug, Clone, PartialEq, Eq)]
struct State {
    log_start: i64,
    log_end: i64,
    /// `(first, last, bytes)` of every batch readable from the log start.
    batches: Vec<(i64, i64, Vec<u8>)>,
    epochs: Vec<(i32, i64)>,
}

impl State {
    fn of(ctx: &Ctx, log: &Log) -> State {
        let (log_start, log_end) = (log.log_start_offset(), log.log_end_offset());
        let mut batches = Vec::new();
        let mut next = log_start;
        while next < log_end {
            let bytes = match log.read(next, 64 * 1024) {
                Ok(b) if !b.is_empty() => b,
                Ok(_) => ctx.fail(format!("empty read at {next} below the end {log_end}")),
                Err(e) => ctx.fail(format!("read at {next}: {e}")),
            };
            for item in BatchIter::new(&bytes) {
                let b = match item {
                    Ok((_, b)) => b,
                    Err(e) => ctx.fail(format!("read at {next}: {e}")),
                };
                if !b.is_crc_valid() {
                    ctx.fail(format!("bad CRC at {}", b.base_offset()));
                }
                // Dense: the first batch holds the log start, every later one follows.
                let dense = if batches.is_empty() {
                    b.base_offset() <= next && next <= b.last_offset()
                } else {
                    b.base_offset() == next
                };
                if !dense {
                    ctx.fail(format!(
                        "hole: batch at {} where {next} was next",
                        b.base_offset()
                    ));
                }
                batches.push((b.base_offset(), b.last_offset(), b.as_bytes().to_vec()));
                next = b.last_offset() + 1;
            }
        }
        if next != log_end {
            ctx.fail(format!(
                "batches end at {next}, the log end offset is {log_end}"
            ));
        }
        // An epoch that starts at the log end holds no batch; a reopen drops it, as Kafka's log
        // loader does (`truncateFromEnd(logEndOffset)`), so it does not tell states apart.
        let epochs = epochs(log)
            .into_iter()
            .filter(|&(_, start)| start < log_end)
            .collect();
        State {
            log_start,
            log_end,
            batches,
            epochs,
        }
    }
}

fn epochs(log: &Log) -> Vec<(i32, i64)> {
    log.replica()
        .leader_epochs()
        .iter()
        .map(
            |&EpochEntry {
                 epoch,
                 start_offset,
             }| (epoch, start_offset),
        )
        .collect()
}

/// A durable log built from the seed (the same seed builds the same log, byte for byte), and
/// the rewrite the seed picks for it.
struct Built {
    fs: SimFs,
    clock: Arc<StepClock>,
    cfg: LogConfig,
    log: Log,
    model: Model,
    rewrite: Rewrite,
    rng: SplitMix64,
}

fn build(seed: u64, ctx: &mut Ctx, kinds: &[u64]) -> Built {
    let mut rng = SplitMix64::new(seed);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = LogConfig::builder()
        .segment_bytes((4 + rng.below(12) as usize) * 1024)
        .segment_index_bytes(96 + 12 * rng.below(20) as usize)
        .index_interval_bytes(rng.below(1024) as usize)
        // No background thread: the file operations are the same on every replay.
        .prefault_bytes(0)
        .retention_bytes(rng.chance(1, 2).then(|| 2048 + rng.below(16 * 1024)))
        .retention_ms(Some(1 + rng.below(400) as i64))
        .file_delete_delay_ms(if rng.chance(1, 2) { 0 } else { 60_000 })
        .build()
        .unwrap();
    let log = match open(&fs, &clock, &cfg) {
        Ok(l) => l,
        Err(e) => ctx.fail(format!("first open: {e}")),
    };
    let mut model = Model::default();
    let mut epoch = 0;
    let batches = 10 + rng.below(50);
    for i in 0..batches {
        if rng.chance(1, 12) {
            epoch += 1 + rng.below(3) as i32;
            log.replica()
                .set_leader_epoch(epoch)
                .unwrap_or_else(|e| ctx.fail(format!("set_leader_epoch: {e}")));
        }
        let records = 1 + rng.below(8) as usize;
        let producer = rng
            .chance(3, 4)
            .then(|| model.continue_producer(1 + rng.below(3) as i64));
        // Timestamps grow with the offsets: time retention removes a prefix.
        let ts = T0 + i as i64 * 10;
        let client = client_batch(records, rng.below(300) as usize, ts, producer, i as u8);
        match log.append(&client) {
            Ok(AppendOutcome::Appended(a)) => model.appended(
                ctx,
                &log,
                a.first_offset,
                a.last_offset,
                client,
                producer,
                records as i32,
            ),
            other => ctx.fail(format!("append {i}: {other:?}")),
        }
        if rng.chance(1, 10) {
            log.flush()
                .unwrap_or_else(|e| ctx.fail(format!("flush: {e}")));
        }
    }
    log.flush()
        .unwrap_or_else(|e| ctx.fail(format!("flush: {e}")));
    model.durable_end = model.end();
    let end = model.end();
    let rewrite = match kinds[rng.below(kinds.len() as u64) as usize] {
        0 => Rewrite::Truncate(rng.below(end as u64 + 1) as i64),
        1 => Rewrite::TruncateFully(rng.below(2 * end as u64 + 1) as i64),
        2 => Rewrite::DeleteRecords(rng.below(end as u64 + 1) as i64),
        _ => Rewrite::Retention(T0 + rng.below(batches * 10 + 500) as i64),
    };
    ctx.note(format!(
        "{cfg:?}\n{} batches, end {end}, {rewrite:?}",
        model.batches.len()
    ));
    Built {
        fs,
        clock,
        cfg,
        log,
        model,
        rewrite,
        rng,
    }
}

/// Runs the rewrite; `Err` when it failed (the power cut).
fn run(log: &Log, rewrite: Rewrite) -> Result<(), String> {
    match rewrite {
        Rewrite::Truncate(o) => log.replica().truncate_to(o).map(|_| ()),
        Rewrite::TruncateFully(o) => log.replica().truncate_fully_and_start_at(o).map(|_| ()),
        Rewrite::DeleteRecords(o) => log
            .delete_records(o)
            .and_then(|_| log.maintenance().enforce_retention(T0).map(|_| ())),
        Rewrite::Retention(now) => log.maintenance().enforce_retention(now).map(|_| ()),
    }
    .map_err(|e| e.to_string())
}

/// One seed: a reference run without faults gives the state after, the number of file
/// operations and the kinds of work (the rewrite's and its file operations'); then, with
/// `crash`, a crash at each of those operations.
fn crash_every_op(seed: u64, test: &'static str, kinds: &[u64], crash: bool) -> (u64, Kinds) {
    let mut ctx = Ctx::in_file(seed, "crash_rewrite", test);
    let Built {
        fs,
        log,
        model,
        rewrite,
        ..
    } = build(seed, &mut ctx, kinds);
    let before = State::of(&ctx, &log);
    let ops_before = fs.counters().ops;
    let kinds_before = fs.counters().by_kind;
    // DeleteRecords and the retention after it are two calls, each durable on its own: a
    // crash between them leaves the log start raised and the segments below it still there.
    let mut between = None;
    if let Rewrite::DeleteRecords(o) = rewrite {
        if let Err(e) = log.delete_records(o) {
            ctx.fail(format!("delete_records({o}) without faults: {e}"));
        }
        between = Some(State::of(&ctx, &log));
        if let Err(e) = log.maintenance().enforce_retention(T0) {
            ctx.fail(format!(
                "retention after delete_records({o}) without faults: {e}"
            ));
        }
    } else if let Err(e) = run(&log, rewrite) {
        ctx.fail(format!("{rewrite:?} without faults: {e}"));
    }
    let ops = fs.counters().ops - ops_before;
    let mut work = op_kinds_since(&fs, &kinds_before);
    work.insert(
        match rewrite {
            Rewrite::Truncate(_) => "Truncate",
            Rewrite::TruncateFully(_) => "TruncateFully",
            Rewrite::DeleteRecords(_) => "DeleteRecords",
            Rewrite::Retention(_) => "Retention",
        }
        .to_string(),
    );
    let after = State::of(&ctx, &log);
    check_after_is_the_rewrite(&ctx, &model, &after, rewrite);
    log.abandon();
    drop(fs);
    if !crash {
        return (ops + 1, work);
    }
    for n in 1..=ops + 1 {
        let mut ctx = Ctx::in_file(seed, "crash_rewrite", test);
        let mut b = build(seed, &mut ctx, kinds);
        ctx.note(format!("power cut at file operation {n} of {ops}"));
        b.fs.fail_from(OpKind::Any, n, libc::EIO);
        let result = run(&b.log, b.rewrite);
        ctx.note(format!("{:?}: {result:?}", b.rewrite));
        if n > ops && result.is_err() {
            ctx.fail(format!(
                "the rewrite failed with no fault in it: {result:?}"
            ));
        }
        b.log.abandon();
        b.fs.clear_faults();
        let report = b.fs.crash(b.rng.next_u64());
        ctx.note(format!("crash: {report:?}"));
        let log = match open(&b.fs, &b.clock, &b.cfg) {
            Ok(l) => l,
            Err(e) => ctx.fail(format!(
                "open after the crash: {e}\n{}",
                common_sim::describe_dir(&b.fs)
            )),
        };
        ctx.note(format!("reopened: {:?}", log.recovery_report()));
        let seen = State::of(&ctx, &log);
        if seen == before {
            expect_producers_before(&ctx, &log, &b.model);
        } else if seen == after || between.as_ref() == Some(&seen) {
            expect_producers_after(&ctx, &log, &b.model, &after, rewrite);
        } else {
            ctx.fail(format!(
                "neither the log before nor after {rewrite:?}:\n before: {}\n after:  {}\n seen:   {}\n{}",
                summary(&before),
                summary(&after),
                summary(&seen),
                common_sim::describe_dir(&b.fs)
            ));
        }
        log.abandon();
    }
    (ops + 1, work)
}

fn summary(s: &State) -> String {
    format!(
        "offsets {}..{}, {} batches, epochs {:?}",
        s.log_start,
        s.log_end,
        s.batches.len(),
        s.epochs
    )
}

/// The reference run did what the rewrite means, on the model.
fn check_after_is_the_rewrite(ctx: &Ctx, model: &Model, after: &State, rewrite: Rewrite) {
    let kept = |f: &dyn Fn(&Stored) -> bool| -> Vec<(i64, i64)> {
        model
            .batches
            .iter()
            .filter(|b| f(b))
            .map(|b| (b.first, b.last))
            .collect()
    };
    let seen: Vec<(i64, i64)> = after.batches.iter().map(|b| (b.0, b.1)).collect();
    let expected = match rewrite {
        // Every batch holding an offset at or above the point goes.
        Rewrite::Truncate(o) => kept(&|b| b.last < o),
        Rewrite::TruncateFully(_) => Vec::new(),
        // Retention's size and time limits apply after DeleteRecords too.
        Rewrite::DeleteRecords(o) if after.log_start < o => ctx.fail(format!(
            "delete_records({o}) left the log start at {}",
            after.log_start
        )),
        Rewrite::DeleteRecords(_) | Rewrite::Retention(_) => kept(&|b| b.last >= after.log_start),
    };
    if seen != expected {
        ctx.fail(format!("{rewrite:?} left {seen:?}, expected {expected:?}"));
    }
    if let Rewrite::TruncateFully(o) = rewrite {
        if (after.log_start, after.log_end) != (o, o) {
            ctx.fail(format!(
                "truncate_fully_and_start_at({o}) gave {}",
                summary(after)
            ));
        }
    }
}

fn expect_duplicate(ctx: &Ctx, log: &Log, b: &Stored) {
    let end = log.log_end_offset();
    match log.append(&b.client) {
        Ok(AppendOutcome::Duplicate(d)) if (d.first_offset, d.last_offset) == (b.first, b.last) => {
        }
        other => ctx.fail(format!(
            "retry of the batch at {}..={} answered {other:?}, expected a duplicate",
            b.first, b.last
        )),
    }
    if log.log_end_offset() != end {
        ctx.fail("a duplicate was written");
    }
}

fn producers(model: &Model) -> Vec<i64> {
    model.next_sequences().keys().copied().collect()
}

fn expect_producers_before(ctx: &Ctx, log: &Log, model: &Model) {
    for pid in producers(model) {
        for b in model.window(pid, DEDUP_WINDOW) {
            expect_duplicate(ctx, log, b);
        }
    }
}

fn expect_producers_after(ctx: &Ctx, log: &Log, model: &Model, after: &State, rewrite: Rewrite) {
    match rewrite {
        Rewrite::Truncate(_) => {
            let end = after.log_end;
            let kept = Model {
                batches: model
                    .batches
                    .iter()
                    .filter(|b| b.last < end)
                    .cloned()
                    .collect(),
                durable_end: end,
            };
            expect_producers_before(ctx, log, &kept);
            // A retry of each producer's first removed batch is the next in its sequence: it is
            // appended again, at the log end.
            let mut next = end;
            for pid in producers(model) {
                let first_removed = model.batches.iter().find(|b| {
                    b.first >= end
                        && b.producer
                            .is_some_and(|p: ProducerSeq| p.producer_id == pid)
                });
                if let Some(b) = first_removed {
                    match log.append(&b.client) {
                        Ok(AppendOutcome::Appended(a)) if a.first_offset == next => {
                            next = a.last_offset + 1;
                        }
                        other => ctx.fail(format!(
                            "retry of the removed batch at {}..={} answered {other:?}, expected an append at {next}",
                            b.first, b.last
                        )),
                    }
                }
            }
        }
        // Producer state and its snapshots are cleared with the log.
        Rewrite::TruncateFully(_) => {
            if let Some(pid) = producers(model).first() {
                let p = log.producer(*pid);
                if p.is_some() {
                    ctx.fail(format!("producer {pid} survived a full truncation"));
                }
            }
        }
        // Dedup outlives the data.
        Rewrite::DeleteRecords(_) | Rewrite::Retention(_) => {
            expect_producers_before(ctx, log, model);
        }
    }
}

#[test]
fn a_crash_at_any_file_operation_of_a_truncation_leaves_the_log_before_or_after() {
    let points = sweep_every_op_sampled(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_REWRITE_CRASH_POINTS",
        FULL_POINTS,
        DEFAULT_POINTS,
        0,
        "truncation crash points",
        |seed, crash| {
            crash_every_op(
                seed,
                "a_crash_at_any_file_operation_of_a_truncation_leaves_the_log_before_or_after",
                &[0, 0, 0, 1],
                crash,
            )
        },
    );
    assert!(points > 0);
}

#[test]
fn a_crash_at_any_file_operation_of_retention_leaves_the_log_before_or_after() {
    let points = sweep_every_op_sampled(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_REWRITE_CRASH_POINTS",
        FULL_POINTS,
        DEFAULT_POINTS,
        1 << 32,
        "retention crash points",
        |seed, crash| {
            crash_every_op(
                seed,
                "a_crash_at_any_file_operation_of_retention_leaves_the_log_before_or_after",
                &[2, 3],
                crash,
            )
        },
    );
    assert!(points > 0);
}
