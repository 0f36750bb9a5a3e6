//! Crashes at every file operation of a DeleteRecords across tiers (docs/design.md, "Tiered
//! storage": DeleteRecords across tiers), with the object store kept on the same simulated
//! file system as the log. The seeded log of `tier_upload_crash`, some segments uploaded and
//! (by the seed) their local copies gone; then `tier::delete_records` to a seeded offset whose
//! Nth file operation fails and every one after it, a crash that keeps a seeded choice of what
//! was not synced, a reopen and `tier::settle_log_start` (what a tiered partition runs when it
//! opens).
//!
//! After each crash: the partition's log start is never below the one before, nor below the
//! offset of a DeleteRecords that answered `Ok`; a second reopen reports the same start; the
//! local log start is not below the manifest's; the current manifest names no missing or
//! different object; and every batch from the one holding the start to the log end reads back
//! through `tier::read` as it was written.
//!
//! Environment: `ONCELOG_TIER_DELETE_CRASH_POINTS=<n>` (default 300), `ONCELOG_CRASH_SEED=<n>`.

use crate::common_sim::{describe_dir, open, sweep_seeds, Ctx};
use crate::tier_upload_crash::{build, content, retain, tier_object, Built, P};

use std::sync::Arc;

use crate::common_sim::StepClock;
use crate::common_tier::FsStore;
use oncelog::format::{BatchIter, RecordBatch};
use oncelog::io::sim::OpKind;
use oncelog::io::SimFs;
use oncelog::tier::{self, ObjectDigest, SegmentObject};
use oncelog::Log;
use oncelog::LogConfig;

const DEFAULT_POINTS: u64 = 300;
const TEST: &str =
    "a_crash_at_any_file_operation_of_delete_records_never_lowers_the_start_nor_loses_a_byte_above_it";

/// The log of the seed, with its uploads (local copies gone when the seed says so), and the
/// offset to delete to.
fn setup(seed: u64, ctx: &mut Ctx) -> (Built, i64) {
    let mut b = build(seed, ctx, true);
    if b.rng.below(2) == 0 {
        retain(&b).unwrap_or_else(|e| ctx.fail(format!("local retention: {e}")));
    }
    let end = b.log.log_end_offset();
    let offset = 1 + b.rng.below(end as u64 - 1) as i64;
    ctx.note(format!(
        "delete records to {offset}; local start {}, end {end}",
        b.log.log_start_offset()
    ));
    (b, offset)
}

/// What is left of a [`Built`] once its log is abandoned.
struct Left {
    fs: SimFs,
    clock: Arc<StepClock>,
    cfg: LogConfig,
    store: FsStore,
}

fn start(ctx: &Ctx, store: &FsStore, log: &Log) -> i64 {
    tier::log_start_offset(log, store, P)
        .unwrap_or_else(|e| ctx.fail(format!("the partition's log start: {e}")))
}

/// Reopens after a crash and settles the start as a tiered partition's open does.
fn reopen(ctx: &Ctx, b: &Left) -> Log {
    let log = open(&b.fs, &b.clock, &b.cfg).unwrap_or_else(|e| {
        ctx.fail(format!(
            "open after the crash: {e}\n{}",
            describe_dir(&b.fs)
        ))
    });
    tier::settle_log_start(&log, &b.store, P)
        .unwrap_or_else(|e| ctx.fail(format!("settle after the crash: {e}")));
    log
}

fn check(ctx: &Ctx, b: &Left, log: &Log, written: &[Vec<u8>], at_least: i64) -> i64 {
    let start = start(ctx, &b.store, log);
    if start < at_least {
        ctx.fail(format!("the partition's start {start} is below {at_least}"));
    }
    let manifest = tier::read_manifest(&b.store, P)
        .unwrap_or_else(|e| ctx.fail(format!("the manifest after the crash: {e}")));
    if let Some(m) = &manifest {
        if log.log_start_offset() < m.log_start_offset {
            ctx.fail(format!(
                "the local start {} stayed below the manifest's {} after settling",
                log.log_start_offset(),
                m.log_start_offset
            ));
        }
        for s in &m.segments {
            for o in SegmentObject::ALL {
                let key = o.key(P, s.base_offset, s.end_offset, s.upload_id);
                if ObjectDigest::of(&tier_object(ctx, &b.store, &key)) != s.object(o) {
                    ctx.fail(format!("{key}: not the object the manifest names"));
                }
            }
        }
    }
    let (mut next, mut seen) = (start, Vec::new());
    while next < log.log_end_offset() {
        let bytes = tier::read(log, &b.store, P, next, 1 << 20).unwrap_or_else(|e| {
            ctx.fail(format!(
                "read at {next} (partition start {start}, local {}): {e}",
                log.log_start_offset()
            ))
        });
        for item in BatchIter::new(&bytes) {
            let (_, batch) = item.unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
            next = batch.last_offset() + 1;
            seen.push(batch.as_bytes().to_vec());
        }
    }
    let want: Vec<Vec<u8>> = written
        .iter()
        .filter(|w| RecordBatch::parse(w).unwrap().last_offset() >= start)
        .cloned()
        .collect();
    if seen != want {
        ctx.fail(format!(
            "from the start {start}: {} batches read back, {} written above it\n{}",
            seen.len(),
            want.len(),
            describe_dir(&b.fs)
        ));
    }
    start
}

fn crash_every_op(seed: u64) -> u64 {
    let mut ctx = Ctx::in_file(seed, "tier_delete_crash", TEST);
    let (b, offset) = setup(seed, &mut ctx);
    let written = {
        let mut c0 = Ctx::in_file(seed, "tier_delete_crash", TEST);
        let b0 = build(seed, &mut c0, true);
        let w = content(&c0, &b0.log);
        b0.log.abandon();
        w
    };
    let ops_before = b.fs.counters().ops;
    match tier::delete_records(&b.log, &b.store, P, offset) {
        Ok(d) if d.log_start_offset == offset => {}
        other => ctx.fail(format!("delete records without faults: {other:?}")),
    }
    let ops = b.fs.counters().ops - ops_before;
    b.log.abandon();
    for n in 1..=ops + 1 {
        let mut ctx = Ctx::in_file(seed, "tier_delete_crash", TEST);
        let (b, offset) = setup(seed, &mut ctx);
        let before = start(&ctx, &b.store, &b.log);
        ctx.note(format!("power cut at file operation {n} of {ops}"));
        b.fs.fail_from(OpKind::Any, n, libc::EIO);
        let result = tier::delete_records(&b.log, &b.store, P, offset);
        ctx.note(format!("delete records: {result:?}"));
        if n > ops && result.is_err() {
            ctx.fail(format!("failed with no fault in it: {result:?}"));
        }
        let acked = if result.is_ok() { offset } else { before };
        let Built {
            log,
            fs,
            clock,
            cfg,
            store,
            mut rng,
            ..
        } = b;
        log.abandon();
        let b = Left {
            fs,
            clock,
            cfg,
            store,
        };
        b.fs.clear_faults();
        let report = b.fs.crash(rng.next_u64());
        ctx.note(format!("crash: {report:?}\n{}", describe_dir(&b.fs)));
        let log = reopen(&ctx, &b);
        let first = check(&ctx, &b, &log, &written, acked);
        log.close()
            .unwrap_or_else(|e| ctx.fail(format!("close after the reopen: {e}")));
        let report = b.fs.crash(rng.next_u64());
        ctx.note(format!("second crash: {report:?}"));
        let log = reopen(&ctx, &b);
        let second = start(&ctx, &b.store, &log);
        if second != first {
            ctx.fail(format!("a second restart reports {second} after {first}"));
        }
        log.close()
            .unwrap_or_else(|e| ctx.fail(format!("close after the second reopen: {e}")));
    }
    ops + 1
}

#[test]
fn a_crash_at_any_file_operation_of_delete_records_never_lowers_the_start_nor_loses_a_byte_above_it(
) {
    let points = sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_TIER_DELETE_CRASH_POINTS",
        DEFAULT_POINTS,
        0,
        "tier delete records crash points",
        crash_every_op,
    );
    assert!(points > 0);
}
