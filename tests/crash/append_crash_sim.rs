//! Crash tests on the simulated file system (docs/design.md, "How the guarantees are tested", issue
//! 4 items 4 and 6): random workloads of idempotent appends, flushes, rolls and clean reopens, cut
//! by a power failure at a random point (between calls, or in the middle of one, by failing every
//! file operation from the Nth on), then reopened and checked against a model of the contract
//! (docs/design.md, "The contract").
//!
//! Environment:
//! * `ONCELOG_CRASH_POINTS=<n>`: crash points per workload test (default 2,000; CI long runs
//!   100,000).
//! * `ONCELOG_CRASH_SEED=<n>`: replay one seed only (every failure prints its seed).

use crate::common_sim;

use std::sync::Arc;

use common_sim::{
    client_batch, config, expect_duplicate, open, retry_window, sweep_seeds, Ctx, Model, StepClock,
    DEDUP_WINDOW,
};
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::{AppendOutcome, Log, LogConfig};

const DEFAULT_CRASH_POINTS: u64 = 2_000;

/// Runs `one_seed` over seeds from `first_seed` until `ONCELOG_CRASH_POINTS` crash points were
/// checked, or just `ONCELOG_CRASH_SEED`. Returns the crash points covered.
fn for_each_seed(first_seed: u64, one_seed: impl FnMut(u64) -> u64) -> u64 {
    sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_CRASH_POINTS",
        DEFAULT_CRASH_POINTS,
        first_seed,
        "crash points",
        one_seed,
    )
}

/// What a workload step may include.
#[derive(Debug, Clone, Copy)]
struct Workload {
    /// Retry earlier batches of idempotent producers and expect `Duplicate` answers.
    retries: bool,
}

/// The result of one step when the power may already be cut.
enum Step {
    Ok,
    /// An operation failed because the simulated power cut has started: stop and crash.
    PowerCut,
}

/// One seed: up to three crash cycles of a random workload on one simulated disk.
fn crash_cycles(seed: u64, test: &'static str, workload: Workload) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut ctx = Ctx::new(seed, test);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = config(&mut rng);
    ctx.note(format!("{cfg:?}"));
    let mut model = Model::default();
    let mut log = match open(&fs, &clock, &cfg) {
        Ok(l) => l,
        Err(e) => ctx.fail(format!("first open: {e}")),
    };
    let cycles = 1 + rng.below(3);
    for cycle in 0..cycles {
        // Half the crashes cut the power in the middle of some later file operation.
        let cut_at = rng.chance(1, 2).then(|| 1 + rng.below(120));
        if let Some(n) = cut_at {
            fs.fail_from(OpKind::Any, n, libc::EIO);
        }
        ctx.note(format!("cycle {cycle}: power cut after {cut_at:?} ops"));
        let steps = 1 + rng.below(50);
        for _ in 0..steps {
            match step(
                &mut rng, &mut ctx, &fs, &clock, &cfg, &mut log, &mut model, workload,
            ) {
                Step::Ok => {}
                Step::PowerCut => break,
            }
        }
        log.abandon();
        fs.clear_faults();
        let report = fs.crash(rng.next_u64());
        ctx.note(format!("crash: {report:?}"));
        log = reopen_after_crash(&mut ctx, &fs, &clock, &cfg, &mut model);
        if workload.retries {
            // Every batch still in its producer's window was durable (it is in the recovered
            // log), so each must come back as a duplicate with its original offsets.
            retry_window(&ctx, &log, &model);
        }
    }
    log.abandon();
    cycles
}

fn reopen_after_crash(
    ctx: &mut Ctx,
    fs: &SimFs,
    clock: &Arc<StepClock>,
    cfg: &LogConfig,
    model: &mut Model,
) -> Log {
    let log = match open(fs, clock, cfg) {
        Ok(l) => l,
        Err(e) => ctx.fail(format!(
            "open after crash: {e}\n{}",
            common_sim::describe_dir(fs)
        )),
    };
    ctx.note(format!("reopened: {:?}", log.recovery_report()));
    model.check_recovered(ctx, &log);
    log
}

#[allow(clippy::too_many_arguments)]
fn step(
    rng: &mut SplitMix64,
    ctx: &mut Ctx,
    fs: &SimFs,
    clock: &Arc<StepClock>,
    cfg: &LogConfig,
    log: &mut Log,
    model: &mut Model,
    workload: Workload,
) -> Step {
    let roll = rng.below(100);
    if roll < 70 {
        append_random(rng, ctx, log, model, fs)
    } else if roll < 85 {
        ctx.note("flush");
        match log.flush() {
            Ok(()) => {
                model.durable_end = model.end();
                Step::Ok
            }
            Err(e) => power_cut_or_fail(ctx, fs, format!("flush: {e}")),
        }
    } else if roll < 93 && workload.retries {
        let producers: Vec<i64> = model.next_sequences().keys().copied().collect();
        if let Some(&pid) = producers.get(rng.below(producers.len() as u64) as usize) {
            let window = model.window(pid, DEDUP_WINDOW);
            let b = window[rng.below(window.len() as u64) as usize];
            ctx.note(format!("retry {}..={}", b.first, b.last));
            let (client, first, last) = (b.client.clone(), b.first, b.last);
            expect_duplicate(ctx, log, &client, first, last);
        }
        Step::Ok
    } else if roll < 97 {
        ctx.note("close and reopen");
        match log.close() {
            Ok(()) => model.durable_end = model.end(),
            Err(e) => return power_cut_or_fail(ctx, fs, format!("close: {e}")),
        }
        match open(fs, clock, cfg) {
            Ok(l) => {
                if !l.recovery_report().clean_shutdown {
                    ctx.fail(format!("clean close not seen: {:?}", l.recovery_report()));
                }
                *log = l;
                // The power may be going down: a read that maps a segment can fail too.
                match model.try_check_recovered(ctx, log) {
                    Ok(()) => Step::Ok,
                    Err(e) => power_cut_or_fail(ctx, fs, format!("read after reopen: {e}")),
                }
            }
            Err(e) => power_cut_or_fail(ctx, fs, format!("reopen: {e}")),
        }
    } else {
        // A burst of small appends: many batches between flushes, rolls within a flush.
        for _ in 0..20 {
            if let Step::PowerCut = append_random(rng, ctx, log, model, fs) {
                return Step::PowerCut;
            }
        }
        Step::Ok
    }
}

fn power_cut_or_fail(ctx: &Ctx, fs: &SimFs, what: String) -> Step {
    if fs.counters().injected_failures > 0 {
        Step::PowerCut
    } else {
        ctx.fail(what)
    }
}

fn append_random(
    rng: &mut SplitMix64,
    ctx: &mut Ctx,
    log: &Log,
    model: &mut Model,
    fs: &SimFs,
) -> Step {
    let records = 1 + rng.below(12) as usize;
    let value_len = rng.below(400) as usize;
    let producer = rng
        .chance(2, 3)
        .then(|| model.continue_producer(1 + rng.below(4) as i64));
    let fill = rng.below(256) as u8;
    let client = client_batch(records, value_len, 1_700_000_000_000, producer, fill);
    match log.append(&client) {
        Ok(AppendOutcome::Appended(info)) => {
            ctx.note(format!(
                "append {}..={}",
                info.first_offset, info.last_offset
            ));
            model.appended(
                ctx,
                log,
                info.first_offset,
                info.last_offset,
                client,
                producer,
                records as i32,
            );
            Step::Ok
        }
        Ok(other) => ctx.fail(format!("a new batch answered {other:?}")),
        // A roll met the power cut (or the read-only state a failed fsync left).
        Err(e) => power_cut_or_fail(ctx, fs, format!("append: {e}")),
    }
}

#[test]
fn crash_points_keep_every_flushed_batch_exactly_once() {
    let points = for_each_seed(0, |seed| {
        crash_cycles(
            seed,
            "crash_points_keep_every_flushed_batch_exactly_once",
            Workload { retries: false },
        )
    });
    assert!(points > 0);
}

/// Needs producer dedup wired into `Log::append` (AppendOutcome::Duplicate after clean and
/// unclean restarts).
#[test]
fn crash_points_dedup_retries_of_durable_batches_return_original_offsets() {
    let points = for_each_seed(1 << 32, |seed| {
        crash_cycles(
            seed,
            "crash_points_dedup_retries_of_durable_batches_return_original_offsets",
            Workload { retries: true },
        )
    });
    assert!(points > 0);
}

/// A fresh log writes no checkpoint for its appends to its one segment (docs/design.md, "Many
/// partitions"): its first flush syncs its directory instead. Every flushed append survives a
/// power cut taken before any checkpoint was written (each crash image drawn by a seed keeps
/// or drops what was not synced), comes back at its offsets, and its retry is a duplicate; an
/// append not flushed is kept whole or not at all. The open after the crash writes no
/// checkpoint either; the first roll writes it.
#[test]
fn a_fresh_logs_flushed_appends_survive_a_crash_before_its_first_checkpoint() {
    let checkpoint = std::path::Path::new(common_sim::DIR).join("oncelog.checkpoint");
    for seed in 0..32u64 {
        let ctx = Ctx::new(seed, "fresh_log_without_checkpoint");
        let fs = SimFs::new();
        let clock = StepClock::new();
        let config = LogConfig::builder()
            .segment_bytes(64 << 10)
            .prefault_bytes(0)
            .build()
            .unwrap();
        let log = open(&fs, &clock, &config).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
        let mut acked = Vec::new();
        // At most five batches in all: every one stays in the producer's window (Kafka's five).
        for i in 0..(1 + seed % 4) as i32 {
            let p = common_sim::ProducerSeq {
                producer_id: 7,
                epoch: 0,
                base_sequence: i * 3,
            };
            let client = client_batch(3, 50, 1_700_000_000_000, Some(p), i as u8);
            let AppendOutcome::Appended(info) = log.append(&client).unwrap() else {
                ctx.fail("not appended")
            };
            log.flush().unwrap();
            acked.push((client, info.first_offset, info.last_offset));
        }
        if seed % 2 == 0 {
            // One more, never flushed.
            let p = common_sim::ProducerSeq {
                producer_id: 7,
                epoch: 0,
                base_sequence: acked.len() as i32 * 3,
            };
            log.append(&client_batch(3, 50, 1_700_000_000_000, Some(p), 99))
                .unwrap();
        }
        if fs.as_dyn().exists(&checkpoint).unwrap() {
            ctx.fail("a fresh log's appends wrote a checkpoint");
        }
        // The process dies: no close, no clean checkpoint.
        log.abandon();
        fs.crash(seed);
        let log = open(&fs, &clock, &config)
            .unwrap_or_else(|e| ctx.fail(format!("open after the crash: {e}")));
        let end = log.log_end_offset();
        let flushed = acked.last().map_or(0, |a| a.2 + 1);
        if end != flushed && end != flushed + 3 {
            ctx.fail(format!(
                "log end {end}: {flushed} were flushed, 3 more appended"
            ));
        }
        for (client, first, last) in &acked {
            expect_duplicate(&ctx, &log, client, *first, *last);
        }
        // Recovered as found: still no checkpoint.
        if fs.as_dyn().exists(&checkpoint).unwrap() {
            ctx.fail("the open after the crash wrote a checkpoint");
        }
        // Appends until the first roll: the checkpoint is written before the second segment.
        let mut seq = (end / 3) as i32 * 3;
        while log.maintenance().segment_count() < 2 {
            let p = common_sim::ProducerSeq {
                producer_id: 7,
                epoch: 0,
                base_sequence: seq,
            };
            log.append(&client_batch(3, 2000, 1_700_000_000_000, Some(p), 1))
                .unwrap_or_else(|e| ctx.fail(format!("append: {e}")));
            seq += 3;
        }
        if !fs.as_dyn().exists(&checkpoint).unwrap() {
            ctx.fail("the first roll wrote no checkpoint");
        }
        log.close().unwrap();
    }
}
