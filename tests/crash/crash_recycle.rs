//! Recycled segment files (`LogConfig::recycled_segments`, docs/design.md "Segment space") on
//! the simulated file system: a seeded log appends, runs retention so that deleted segments'
//! files enter the pool, and rolls into them; a power cut at a seeded file operation of that
//! work (every one after it fails too), a crash that keeps a seeded choice of what was not
//! synced, and a reopen. A recycled file holds old batches after what was written into it, so
//! after every reopen: every durable batch is there byte for byte, every batch a read returns is
//! the one appended at its offset (never an old one from a recycled file), offsets dense from
//! the log start, and the log appends again.
//!
//! The hostile case: a pool file whose old batches have exactly the offsets and positions that
//! would continue the log after a full truncation back to lower offsets; the full truncation
//! empties the pool first, so they never come back.
//!
//! Environment:
//! * `ONCELOG_RECYCLE_CRASH_POINTS=<n>`: crash points in total (default 800: 100 seeds of 8
//!   seeded points each, a sample like the larger runs'; 2,000 was the default until the CI
//!   run had to be kept under 20 minutes).
//! * `ONCELOG_CRASH_SEED=<n>`: replay one seed only (every failure prints its seed).

use crate::common_sim;

use std::collections::BTreeMap;

use common_sim::{client_batch, describe_dir, open, sweep_seeds, Ctx, StepClock};
use oncelog::format::BatchIter;
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::{FileSystem, SimFs};
use oncelog::{AppendOutcome, FlushPolicy, Log, LogConfig, Preallocation};

const DEFAULT_POINTS: u64 = 800;
const POINTS_PER_SEED: u64 = 8;
const FILE: &str = "crash_recycle";

fn config(rng: &mut SplitMix64) -> LogConfig {
    let segment_bytes = (4 + rng.below(9) as usize) * 1024;
    LogConfig::builder()
        .segment_bytes(segment_bytes)
        .segment_index_bytes(240 + 12 * rng.below(20) as usize)
        .index_interval_bytes(rng.below(2048) as usize)
        .allocation_step_bytes(4096)
        .preallocation(match rng.below(3) {
            0 => Preallocation::Auto,
            1 => Preallocation::Reserved,
            _ => Preallocation::Zeroed,
        })
        .flush_policy(if rng.chance(1, 2) {
            FlushPolicy::Always
        } else {
            FlushPolicy::Manual
        })
        .recycled_segments(1 + rng.below(3) as usize)
        .retention_bytes(Some(segment_bytes as u64 * (1 + rng.below(3))))
        .retention_ms(None)
        .file_delete_delay_ms(0)
        // No background thread: the file operations are the same on every replay.
        .prefault_bytes(0)
        .build()
        .unwrap()
}

/// What one run of the workload did.
#[derive(Debug, Default)]
struct Outcome {
    /// Every batch appended, by first offset: its last offset and bytes as read back.
    stored: BTreeMap<i64, (i64, Vec<u8>)>,
    /// Every batch below this is durable (a completed flush or durable append covered it).
    durable_end: i64,
    /// The first call that failed (the power cut), if one did.
    failed: Option<String>,
}

/// `steps` steps of the workload: appends of seeded sizes, flushes, retention. Stops at the
/// first call that fails, so what was appended is a prefix of the fault-free run's.
fn drive(log: &Log, cfg: &LogConfig, rng: &mut SplitMix64, steps: u64, out: &mut Outcome, gen: u8) {
    for i in 0..steps {
        if out.failed.is_some() {
            return;
        }
        let records = 1 + rng.below(4) as usize;
        let value = 20 + rng.below(700) as usize;
        let client = client_batch(
            records,
            value,
            1_700_000_000_000 + i as i64,
            None,
            gen ^ i as u8,
        );
        match log.append(&client) {
            Ok(AppendOutcome::Appended(a)) => {
                let bytes = log.read(a.first_offset, 1).ok().and_then(|b| {
                    BatchIter::new(&b)
                        .next()
                        .and_then(|r| r.ok())
                        .map(|(_, b)| b.as_bytes().to_vec())
                });
                match bytes {
                    Some(bytes) => {
                        out.stored.insert(a.first_offset, (a.last_offset, bytes));
                    }
                    None => {
                        out.failed = Some(format!("read back of {}", a.first_offset));
                        return;
                    }
                }
                if cfg.flush_policy == FlushPolicy::Always {
                    out.durable_end = a.last_offset + 1;
                }
            }
            other => {
                out.failed = Some(format!("append: {other:?}"));
                return;
            }
        }
        if rng.chance(1, 4) {
            match log.flush() {
                Ok(()) => out.durable_end = log.log_end_offset(),
                Err(e) => {
                    out.failed = Some(format!("flush: {e}"));
                    return;
                }
            }
        }
        if rng.chance(1, 3) {
            if let Err(e) = log.maintenance().enforce_retention(1_700_000_000_000) {
                out.failed = Some(format!("retention: {e}"));
                return;
            }
        }
    }
}

struct Built {
    fs: SimFs,
    clock: std::sync::Arc<StepClock>,
    cfg: LogConfig,
    log: Log,
    out: Outcome,
    rng: SplitMix64,
}

/// The warm-up (no faults): enough appends and retention for files to enter the pool.
fn build(seed: u64, ctx: &mut Ctx) -> Built {
    let mut rng = SplitMix64::new(seed);
    let cfg = config(&mut rng);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("first open: {e}")));
    let mut out = Outcome::default();
    let steps = 25 + rng.below(20);
    drive(&log, &cfg, &mut rng, steps, &mut out, 1);
    if let Some(f) = &out.failed {
        ctx.fail(format!("warm-up without faults: {f}"));
    }
    ctx.note(format!("{cfg:?}\nwarm-up to {}", log.log_end_offset()));
    Built {
        fs,
        clock,
        cfg,
        log,
        out,
        rng,
    }
}

/// The reopened log holds exactly a prefix of what was appended from its log start, every
/// durable batch included, no old batch of a recycled file anywhere.
fn check_reopened(ctx: &Ctx, log: &Log, reference: &Outcome, run: &Outcome) {
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    // The append that failed may have written its batch before its sync failed: it may be
    // there or not (the fault-free run's batch at that offset).
    let appended_end = run.stored.last_key_value().map_or(0, |(_, (l, _))| l + 1);
    let appended_end = match &run.failed {
        Some(f) if f.starts_with("append") => reference
            .stored
            .get(&appended_end)
            .map_or(appended_end, |(l, _)| l + 1),
        _ => appended_end,
    };
    if end < run.durable_end {
        ctx.fail(format!(
            "log end {end} below the durable end {}",
            run.durable_end
        ));
    }
    if end > appended_end {
        ctx.fail(format!(
            "log end {end} past everything appended ({appended_end})"
        ));
    }
    if start > end {
        ctx.fail(format!("log start {start} past the end {end}"));
    }
    let mut next = start;
    let mut first = true;
    while next < end {
        let bytes = match log.read(next, 64 * 1024) {
            Ok(b) if !b.is_empty() => b,
            Ok(_) => ctx.fail(format!("empty read at {next} below the end {end}")),
            Err(e) => ctx.fail(format!("read at {next}: {e}")),
        };
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
            let dense = if first {
                b.base_offset() <= next && next <= b.last_offset()
            } else {
                b.base_offset() == next
            };
            if !dense {
                ctx.fail(format!(
                    "batch at {} where {next} was next (an old batch?)",
                    b.base_offset()
                ));
            }
            match reference.stored.get(&b.base_offset()) {
                Some((last, want)) if *last == b.last_offset() && want.as_slice() == b.as_bytes() => {}
                other => ctx.fail(format!(
                    "the batch at {}..={} is not the one appended there (an old batch of a recycled file): {} bytes, first difference at {:?}, appended {:?}",
                    b.base_offset(),
                    b.last_offset(),
                    b.as_bytes().len(),
                    other.map(|(_, w)| w.iter().zip(b.as_bytes()).position(|(x, y)| x != y)),
                    other.map(|(l, w)| (*l, w.len())),
                )),
            }
            first = false;
            next = b.last_offset() + 1;
        }
    }
    if next != end {
        ctx.fail(format!(
            "batches end at {next}, the log end offset is {end}"
        ));
    }
}

/// One seed: a fault-free reference of the faulted part, then power cuts at seeded points of
/// it. Returns the crash points run.
fn crash_points(seed: u64, test: &'static str, recycled: &mut u64) -> u64 {
    let mut ctx = Ctx::in_file(seed, FILE, test);
    let mut b = build(seed, &mut ctx);
    let steps = 20 + b.rng.below(20);
    let ops_before = b.fs.counters().ops;
    let rolls_before = b.log.metrics().recycled_rolls;
    let mut reference = std::mem::take(&mut b.out);
    let mut rng = b.rng.clone();
    drive(&b.log, &b.cfg, &mut rng, steps, &mut reference, 2);
    if let Some(f) = &reference.failed {
        ctx.fail(format!("workload without faults: {f}"));
    }
    let ops = b.fs.counters().ops - ops_before;
    *recycled += b.log.metrics().recycled_rolls - rolls_before;
    // A clean close and open: the active segment (often a recycled file) was trimmed, the
    // pool removed, and the open's tail walk and first append find nothing old either.
    b.log
        .close()
        .unwrap_or_else(|e| ctx.fail(format!("close: {e}")));
    drop(b.log);
    let log = open(&b.fs, &b.clock, &b.cfg)
        .unwrap_or_else(|e| ctx.fail(format!("clean open: {e}\n{}", describe_dir(&b.fs))));
    if !log.recovery_report().clean_shutdown {
        ctx.fail("the open after a clean close was not clean");
    }
    check_reopened(&ctx, &log, &reference, &reference);
    let end = log.log_end_offset();
    match log.append(&client_batch(2, 50, 1_700_000_000_000, None, 0xEE)) {
        Ok(AppendOutcome::Appended(a)) if a.first_offset == end => {}
        other => ctx.fail(format!("append after the clean open: {other:?}")),
    }
    log.abandon();
    let mut pick = SplitMix64::new(seed ^ 0x5EED);
    for _ in 0..POINTS_PER_SEED {
        let n = 1 + pick.below(ops + 1);
        let mut ctx = Ctx::in_file(seed, FILE, test);
        let mut b = build(seed, &mut ctx);
        ctx.note(format!("power cut at file operation {n} of {ops}"));
        b.fs.fail_from(OpKind::Any, n, libc::EIO);
        let mut run = std::mem::take(&mut b.out);
        // The same draws as the reference run.
        let _ = b.rng.below(20);
        let mut rng = b.rng.clone();
        drive(&b.log, &b.cfg, &mut rng, steps, &mut run, 2);
        ctx.note(format!(
            "stopped by {:?}, durable end {}",
            run.failed, run.durable_end
        ));
        b.log.abandon();
        b.fs.clear_faults();
        let report = b.fs.crash(pick.next_u64());
        ctx.note(format!("crash: {report:?}"));
        let log = open(&b.fs, &b.clock, &b.cfg).unwrap_or_else(|e| {
            ctx.fail(format!(
                "open after the crash: {e}\n{}",
                describe_dir(&b.fs)
            ))
        });
        ctx.note(format!("reopened: {:?}", log.recovery_report()));
        check_reopened(&ctx, &log, &reference, &run);
        // The open removed the pool: its invariant is the closed log's.
        let leftovers: Vec<String> =
            b.fs.list(&common_sim::dir())
                .unwrap_or_default()
                .into_iter()
                .filter(|n| n.ends_with(".recycle"))
                .collect();
        if !leftovers.is_empty() {
            ctx.fail(format!("pool files after an open: {leftovers:?}"));
        }
        // And it appends again.
        let end = log.log_end_offset();
        match log.append(&client_batch(2, 50, 1_700_000_000_000, None, 0xEE)) {
            Ok(AppendOutcome::Appended(a)) if a.first_offset == end => {}
            other => ctx.fail(format!("append after the reopen: {other:?}")),
        }
        log.abandon();
    }
    POINTS_PER_SEED
}

#[test]
fn a_crash_while_rolling_into_recycled_files_never_brings_an_old_batch_back() {
    let test = "a_crash_while_rolling_into_recycled_files_never_brings_an_old_batch_back";
    let mut recycled = 0;
    let mut seeds = 0;
    let points = sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_RECYCLE_CRASH_POINTS",
        DEFAULT_POINTS,
        0,
        "recycle crash points",
        |seed| {
            seeds += 1;
            crash_points(seed, test, &mut recycled)
        },
    );
    assert!(points > 0);
    // The workload does roll into recycled files (about every seed does, several times).
    assert!(
        recycled >= seeds,
        "{recycled} rolls into recycled files over {seeds} seeds"
    );
}

/// Uniform batches, so that a segment's batches sit at the same positions in every segment.
fn uniform(gen: u8) -> Vec<u8> {
    client_batch(1, 400, 1_700_000_000_000, None, gen)
}

#[test]
fn a_full_truncation_empties_the_pool_so_old_batches_never_continue_the_new_log() {
    let mut ctx = Ctx::in_file(
        0,
        FILE,
        "a_full_truncation_empties_the_pool_so_old_batches_never_continue_the_new_log",
    );
    let fs = SimFs::new();
    let clock = StepClock::new();
    let per_segment = 20;
    let size = {
        let probe = uniform(0);
        probe.len()
    };
    let cfg = LogConfig::builder()
        // Exactly `per_segment` batches a segment.
        .segment_bytes(size * per_segment)
        .recycled_segments(2)
        .retention_bytes(Some((size * per_segment) as u64))
        .retention_ms(None)
        .file_delete_delay_ms(0)
        .flush_policy(FlushPolicy::Always)
        .prefault_bytes(0)
        .build()
        .unwrap();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
    let n = per_segment as i64;
    // Segments [0, n), [n, 2n), [2n, 3n), and the active one at 3n.
    for _ in 0..3 * n {
        log.append(&uniform(1))
            .unwrap_or_else(|e| ctx.fail(format!("append: {e}")));
    }
    // Retention removes [0, n) and [n, 2n), and the pool keeps both files; the one a roll
    // takes first is the second: its batches are offsets n..2n at the positions a segment at
    // base n puts them.
    log.maintenance()
        .enforce_retention(1_700_000_000_000)
        .unwrap_or_else(|e| ctx.fail(format!("retention: {e}")));
    let pooled: Vec<String> = fs
        .list(&common_sim::dir())
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.ends_with(".log.recycle"))
        .collect();
    ctx.note(format!(
        "pool {pooled:?}, log start {}",
        log.log_start_offset()
    ));
    if pooled
        != [
            format!("{:020}.log.recycle", 0),
            format!("{n:020}.log.recycle"),
        ]
    {
        ctx.fail(format!(
            "expected the segment at {n} in the pool, found {pooled:?}"
        ));
    }
    // Back to offset 0: the new log's segment at n would put offsets n.. exactly where the
    // pool file's old batches are.
    log.replica()
        .truncate_fully_and_start_at(0)
        .unwrap_or_else(|e| ctx.fail(format!("truncate fully: {e}")));
    let recycled_before = log.metrics().recycled_rolls;
    // Fills [0, n) and rolls at n, then writes a few batches past the first page of the new
    // segment, all durable.
    let written = n + 14;
    let mut appended = Vec::new();
    for _ in 0..written {
        match log.append(&uniform(2)) {
            Ok(AppendOutcome::Appended(a)) => appended.push(
                log.read(a.first_offset, 1)
                    .unwrap_or_else(|e| ctx.fail(format!("read back: {e}"))),
            ),
            other => ctx.fail(format!("append: {other:?}")),
        }
    }
    let reused = log.metrics().recycled_rolls != recycled_before;
    log.abandon();
    fs.crash(7);
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("reopen: {e}")));
    ctx.note(format!("reopened: {:?}", log.recovery_report()));
    if log.log_end_offset() != written {
        ctx.fail(format!(
            "the log ends at {} after {written} durable batches: old batches came back",
            log.log_end_offset()
        ));
    }
    let mut next = 0;
    while next < written {
        let bytes = log
            .read(next, 1)
            .unwrap_or_else(|e| ctx.fail(format!("read {next}: {e}")));
        let (_, b) = BatchIter::new(&bytes)
            .next()
            .and_then(|r| r.ok())
            .unwrap_or_else(|| ctx.fail(format!("no batch at {next}")));
        // Every batch is the new log's, byte for byte.
        if b.base_offset() != next || b.as_bytes() != &appended[next as usize][..] {
            ctx.fail(format!("the batch at {next} is not the new log's"));
        }
        next = b.last_offset() + 1;
    }
    if reused {
        ctx.fail("a roll after the full truncation reused a file from before it");
    }
    log.abandon();
}

fn pool_files(fs: &SimFs) -> Vec<String> {
    let mut names: Vec<String> = fs
        .list(&common_sim::dir())
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.ends_with(".log.recycle"))
        .collect();
    names.sort();
    names
}

#[test]
fn only_retention_fills_the_pool_within_its_size_and_close_empties_it() {
    let ctx = Ctx::in_file(
        0,
        FILE,
        "only_retention_fills_the_pool_within_its_size_and_close_empties_it",
    );
    let fs = SimFs::new();
    let clock = StepClock::new();
    let size = uniform(0).len();
    let cfg = LogConfig::builder()
        .segment_bytes(size * 10)
        .recycled_segments(2)
        .retention_bytes(Some((size * 10) as u64))
        .retention_ms(None)
        .file_delete_delay_ms(1_000)
        .flush_policy(FlushPolicy::Always)
        .prefault_bytes(0)
        .build()
        .unwrap();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
    let append = |log: &Log, n: usize| {
        for _ in 0..n {
            log.append(&uniform(3))
                .unwrap_or_else(|e| ctx.fail(format!("append: {e}")));
        }
    };
    append(&log, 60);
    // A truncation's files are never recyclable, whatever the delay.
    log.replica()
        .truncate_to(45)
        .unwrap_or_else(|e| ctx.fail(format!("truncate: {e}")));
    log.maintenance()
        .remove_deleted_files(i64::MAX / 2)
        .unwrap_or_else(|e| ctx.fail(format!("remove: {e}")));
    if !pool_files(&fs).is_empty() {
        ctx.fail(format!(
            "a truncation's file entered the pool: {:?}",
            pool_files(&fs)
        ));
    }
    // Retention removes four segments; they wait out their delay as `.deleted`, then two
    // enter the pool and the rest are removed.
    let report = log
        .maintenance()
        .enforce_retention(1_700_000_000_000)
        .unwrap_or_else(|e| ctx.fail(format!("retention: {e}")));
    if report.deleted.len() < 3 {
        ctx.fail(format!("retention removed {:?}", report.deleted));
    }
    if !pool_files(&fs).is_empty() {
        ctx.fail("files entered the pool before their delay was over");
    }
    log.maintenance()
        .remove_deleted_files(i64::MAX / 2)
        .unwrap_or_else(|e| ctx.fail(format!("remove: {e}")));
    let pooled = pool_files(&fs);
    if pooled.len() != 2 {
        ctx.fail(format!("the pool holds {pooled:?}, expected 2 files"));
    }
    let deleted = fs
        .list(&common_sim::dir())
        .unwrap_or_default()
        .into_iter()
        .filter(|f| f.ends_with(".deleted"))
        .count();
    if deleted != 0 {
        ctx.fail(format!("{deleted} .deleted files left after their delay"));
    }
    // Rolls take them, and count it.
    let before = log.metrics().recycled_rolls;
    append(&log, 25);
    let used = log.metrics().recycled_rolls - before;
    if used != 2 || !pool_files(&fs).is_empty() {
        ctx.fail(format!(
            "{used} rolls reused a file, pool now {:?}",
            pool_files(&fs)
        ));
    }
    // Retention fills it again; a clean close removes it, and the open after is clean.
    log.maintenance()
        .enforce_retention(1_700_000_000_000)
        .unwrap_or_else(|e| ctx.fail(format!("retention: {e}")));
    log.maintenance()
        .remove_deleted_files(i64::MAX / 2)
        .unwrap_or_else(|e| ctx.fail(format!("remove: {e}")));
    if pool_files(&fs).is_empty() {
        ctx.fail("retention left nothing in the pool");
    }
    let end = log.log_end_offset();
    log.close()
        .unwrap_or_else(|e| ctx.fail(format!("close: {e}")));
    drop(log);
    if !pool_files(&fs).is_empty() {
        ctx.fail(format!("close left {:?}", pool_files(&fs)));
    }
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("reopen: {e}")));
    if !log.recovery_report().clean_shutdown || log.log_end_offset() != end {
        ctx.fail(format!("reopen: {:?}", log.recovery_report()));
    }
    log.abandon();
}

#[test]
fn recycling_is_refused_where_recovery_may_not_cut() {
    let fs = SimFs::new();
    let clock = StepClock::new();
    let builder = LogConfig::builder()
        .recycled_segments(1)
        .recovery_mode(oncelog::RecoveryMode::AbsoluteConsistency);
    assert_eq!(
        builder.build().map_err(|e| e.field),
        Err("recycled_segments")
    );
    // Set directly, the same values reach `open`, which refuses them too.
    let mut cfg = LogConfig::default();
    cfg.recycled_segments = 1;
    cfg.recovery_mode = oncelog::RecoveryMode::AbsoluteConsistency;
    match open(&fs, &clock, &cfg) {
        Err(oncelog::OpenError::Config(e)) if e.field == "recycled_segments" => {}
        other => panic!("expected a config error for recycled_segments, got {other:?}"),
    }
    // Nothing was created.
    assert!(fs.list(&common_sim::dir()).map_or(true, |n| n.is_empty()));
}

/// On the real file system, where a recycled file is the same inode a reader's map shows: a
/// `Bytes` read from a segment before retention removed it keeps its bytes, because a file
/// whose maps a reader still holds is removed, never recycled.
#[test]
fn bytes_a_reader_holds_keep_their_content_when_their_segment_is_recycled_or_not() {
    let dir = tempfile::tempdir().expect("tempdir");
    let size = uniform(0).len();
    let cfg = LogConfig::builder()
        .segment_bytes(size * 10)
        .recycled_segments(4)
        .retention_bytes(Some((size * 10) as u64))
        .retention_ms(None)
        .file_delete_delay_ms(0)
        .flush_policy(FlushPolicy::Always)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg).expect("open");
    for i in 0..40u8 {
        log.append(&client_batch(1, 400, 1_700_000_000_000, None, i))
            .expect("append");
    }
    // A reader holds the whole first segment, and a batch of the second.
    let held = log.read(0, size * 10).expect("read");
    let copy = held.to_vec();
    let held_second = log.read(12, 1).expect("read");
    let copy_second = held_second.to_vec();
    drop(held_second);
    assert!(copy.len() >= size * 9, "read {} bytes", copy.len());
    log.maintenance()
        .enforce_retention(1_700_000_000_000)
        .expect("retention");
    let pooled = |dir: &std::path::Path| -> Vec<String> {
        let mut v: Vec<String> = std::fs::read_dir(dir)
            .expect("list")
            .filter_map(|e| e.ok())
            .map(|e| e.file_name().to_string_lossy().into_owned())
            .filter(|n| n.ends_with(".log.recycle"))
            .collect();
        v.sort();
        v
    };
    let pool = pooled(dir.path());
    // Rolls write the recycled files; the reader's bytes stay what they were.
    for i in 0..30u8 {
        log.append(&client_batch(1, 400, 1_700_000_000_000, None, 0x80 | i))
            .expect("append");
    }
    assert!(log.metrics().recycled_rolls >= 2);
    assert_eq!(&held[..], &copy[..], "a reader's bytes changed under it");
    // Segments 0, 10 and 20 went; the reader's (0) was not recycled, the others were.
    assert_eq!(
        pool,
        vec![
            format!("{:020}.log.recycle", 10),
            format!("{:020}.log.recycle", 20)
        ]
    );
    assert_eq!(copy_second.len(), size);
    drop(held);
    log.close().expect("close");
}
