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
//! The same around `tier::reconcile` of a log cut inside its uploaded range and written again:
//! after each crash the manifest names no missing object; a reconcile then (the tiering job's
//! next run) leaves every remote segment that reaches above the local log start holding the
//! log's bytes of its offsets, and the uploads after it put the new bytes up.
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

const RECONCILE_TEST: &str =
    "a_crash_at_any_file_operation_of_reconciliation_leaves_the_remote_segments_the_logs_bytes";

/// The seed's log with its uploads, cut inside the uploaded range and written again with other
/// batches, flushed.
fn truncated(seed: u64, ctx: &mut Ctx) -> Built {
    let mut b = build(seed, ctx, true);
    let m = tier::read_manifest(&b.store, P)
        .unwrap_or_else(|e| ctx.fail(format!("manifest: {e}")))
        .unwrap_or_else(|| ctx.fail("no manifest"));
    let (first, end) = (m.segments[0].base_offset, m.remote_end().unwrap_or(0));
    let cut = first + 1 + b.rng.below((end - first - 1).max(1) as u64) as i64;
    let cut = cut.min(end - 1).max(first);
    b.log
        .replica()
        .truncate_to(cut)
        .unwrap_or_else(|e| ctx.fail(format!("truncate to {cut}: {e}")));
    for i in 0..(10 + b.rng.below(30)) {
        let batch = crate::common_sim::client_batch(
            1 + b.rng.below(6) as usize,
            b.rng.below(400) as usize,
            crate::tier_upload_crash::T0 + 10_000 + i as i64,
            None,
            0xee,
        );
        b.log
            .append(&batch)
            .unwrap_or_else(|e| ctx.fail(format!("append after the cut: {e}")));
    }
    b.log
        .flush()
        .unwrap_or_else(|e| ctx.fail(format!("flush after the cut: {e}")));
    ctx.note(format!("cut at {cut}, remote [{first}, {end})"));
    b
}

/// After a reconcile that ran to the end: every remote segment is whole, and every one that
/// reaches above the local log start holds the log's bytes of its offsets.
fn check_reconciled(ctx: &Ctx, b: &Left, log: &Log) {
    let seen = content(ctx, log);
    let m = tier::read_manifest(&b.store, P)
        .unwrap_or_else(|e| ctx.fail(format!("the manifest after the crash: {e}")));
    for s in m.iter().flat_map(|m| &m.segments) {
        for o in SegmentObject::ALL {
            let key = o.key(P, s.base_offset, s.end_offset, s.upload_id);
            let bytes = tier_object(ctx, &b.store, &key);
            if ObjectDigest::of(&bytes) != s.object(o) {
                ctx.fail(format!("{key}: not the object the manifest names"));
            }
            if o == SegmentObject::Log && s.end_offset > log.log_start_offset() {
                let want: Vec<u8> = seen
                    .iter()
                    .filter(|w| {
                        let r = RecordBatch::parse(w).unwrap();
                        r.base_offset() >= s.base_offset && r.last_offset() < s.end_offset
                    })
                    .flatten()
                    .copied()
                    .collect();
                if bytes != want {
                    ctx.fail(format!(
                        "{key}: [{}, {}) is not the log's bytes after the cut",
                        s.base_offset, s.end_offset
                    ));
                }
            }
        }
    }
}

fn crash_every_reconcile_op(seed: u64) -> u64 {
    let mut ctx = Ctx::in_file(seed, "tier_delete_crash", RECONCILE_TEST);
    let b = truncated(seed, &mut ctx);
    let ops_before = b.fs.counters().ops;
    match tier::reconcile(&b.log, &b.store, P) {
        Ok(r) if !r.dropped.is_empty() => {}
        other => ctx.fail(format!(
            "reconcile without faults dropped nothing: {other:?}"
        )),
    }
    let ops = b.fs.counters().ops - ops_before;
    b.log.abandon();
    for n in 1..=ops + 1 {
        let mut ctx = Ctx::in_file(seed, "tier_delete_crash", RECONCILE_TEST);
        let b = truncated(seed, &mut ctx);
        ctx.note(format!("power cut at file operation {n} of {ops}"));
        b.fs.fail_from(OpKind::Any, n, libc::EIO);
        let result = tier::reconcile(&b.log, &b.store, P);
        ctx.note(format!("reconcile: {result:?}"));
        if n > ops && result.is_err() {
            ctx.fail(format!("failed with no fault in it: {result:?}"));
        }
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
        // The manifest never names a missing object, whatever step the crash cut.
        let m = tier::read_manifest(&b.store, P)
            .unwrap_or_else(|e| ctx.fail(format!("the manifest after the crash: {e}")));
        for s in m.iter().flat_map(|m| &m.segments) {
            for o in SegmentObject::ALL {
                let key = o.key(P, s.base_offset, s.end_offset, s.upload_id);
                if ObjectDigest::of(&tier_object(&ctx, &b.store, &key)) != s.object(o) {
                    ctx.fail(format!("{key}: not the object the manifest names"));
                }
            }
        }
        // What the crash left is finished by the next run, never made worse.
        tier::reconcile(&log, &b.store, P)
            .unwrap_or_else(|e| ctx.fail(format!("reconcile after the crash: {e}")));
        check_reconciled(&ctx, &b, &log);
        // And the next uploads put the new bytes up.
        for (base, end) in tier::uploadable_segments(&log) {
            let remote_end = tier::read_manifest(&b.store, P)
                .ok()
                .flatten()
                .and_then(|m| m.remote_end());
            if remote_end.is_some_and(|r| end <= r) {
                continue;
            }
            tier::upload_segment(&log, &b.store, P, base)
                .unwrap_or_else(|e| ctx.fail(format!("upload of {base} after the crash: {e}")));
        }
        check_reconciled(&ctx, &b, &log);
        log.close()
            .unwrap_or_else(|e| ctx.fail(format!("close after the reopen: {e}")));
    }
    ops + 1
}

#[test]
fn a_crash_at_any_file_operation_of_reconciliation_leaves_the_remote_segments_the_logs_bytes() {
    let points = sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_TIER_DELETE_CRASH_POINTS",
        DEFAULT_POINTS,
        0,
        "tier reconcile crash points",
        crash_every_reconcile_op,
    );
    assert!(points > 0);
}
