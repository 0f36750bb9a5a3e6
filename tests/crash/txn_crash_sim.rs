//! Crash tests of transactions on the simulated file system: interleaved transactional,
//! idempotent and plain producers, COMMIT and ABORT markers, flushes, rolls and clean reopens,
//! cut by a power failure at a random point (between calls, or inside one: every file
//! operation from the Nth on fails), then reopened and checked: every durable batch, markers
//! included, is there exactly once at its offset (a durable marker is never lost), and from what
//! survived, the open transactions, the first unstable and last stable offsets, every
//! `.txnindex` entry and what a read_committed consumer receives are what Kafka's rules give.
//!
//! Environment, as for `crash_sim`: `ONCELOG_CRASH_POINTS=<n>` crash points per test
//! (default 1,000), `ONCELOG_CRASH_SEED=<n>` to replay one seed.

use crate::common_sim;

use std::collections::BTreeMap;
use std::sync::Arc;

use common_sim::{
    client_batch, config, dir, open, sweep_seeds, Ctx, Model, ProducerSeq, StepClock,
};
use oncelog::format::{decode_txn_marker, BatchBuilder, RecordBatch};
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::segment::txn_index::{self, AbortedTxn};
use oncelog::{AppendOutcome, IsolationLevel, Log, LogConfig, TxnMarker};

const DEFAULT_CRASH_POINTS: u64 = 1_000;

/// Transactional producers are 20, 21 and 22; idempotent ones 1 and 2.
const TXN_PRODUCERS: [i64; 3] = [20, 21, 22];

enum Step {
    Ok,
    PowerCut,
}

/// What the recovered batches say, by Kafka's rules, replayed here from their bytes.
#[derive(Debug, Default)]
struct Expected {
    ongoing: BTreeMap<i64, i64>,
    /// (producer, first, marker, abort, index LSO).
    completed: Vec<(i64, i64, i64, bool, i64)>,
}

fn expected(model: &Model) -> Expected {
    let mut e = Expected::default();
    for s in &model.batches {
        let b = RecordBatch::parse(&s.bytes).expect("a stored batch");
        if b.producer_id() < 0 {
            continue;
        }
        match decode_txn_marker(&b).expect("a valid marker") {
            Some(m) => {
                if let Some(first) = e.ongoing.remove(&b.producer_id()) {
                    let lso = e.ongoing.values().min().map_or(s.first + 1, |f| *f);
                    e.completed
                        .push((b.producer_id(), first, s.first, m.is_abort(), lso));
                }
            }
            None if b.is_transactional() => {
                e.ongoing.entry(b.producer_id()).or_insert(s.first);
            }
            None => {}
        }
    }
    e
}

/// The transactional state of the reopened log against what its batches say.
fn check_transactions(ctx: &Ctx, fs: &SimFs, log: &Log, model: &Model) {
    let e = expected(model);
    for pid in TXN_PRODUCERS {
        let open = log.producer(pid).and_then(|p| p.current_txn_first_offset());
        if open != e.ongoing.get(&pid).copied() {
            ctx.fail(format!(
                "producer {pid}: open transaction {open:?}, its batches say {:?}",
                e.ongoing.get(&pid)
            ));
        }
    }
    let hw = log.high_watermark();
    // Like Kafka's, the reopened log knows the completed transactions the high watermark has
    // not passed from where its replay started on.
    let replayed_from = log
        .producer_load_report()
        .snapshot_offset
        .unwrap_or(log.log_start_offset());
    let fuo = e
        .ongoing
        .values()
        .copied()
        .chain(
            e.completed
                .iter()
                .filter(|c| c.2 >= hw && c.2 >= replayed_from)
                .map(|c| c.1),
        )
        .min();
    let lso = match fuo {
        Some(f) if f < hw => f,
        _ => hw,
    };
    if log.first_unstable_offset() != fuo || log.last_stable_offset() != lso {
        ctx.fail(format!(
            "first unstable {:?} / last stable {} with high watermark {hw}; expected {fuo:?} / \
             {lso}",
            log.first_unstable_offset(),
            log.last_stable_offset()
        ));
    }
    let mut stored = Vec::new();
    let bases = log.maintenance().segment_base_offsets();
    for (i, base) in bases.iter().enumerate() {
        let path = dir().join(format!("{base:020}.txnindex"));
        let bytes = fs.read_live(&path).unwrap_or_default();
        let next = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        for entry in txn_index::decode(&bytes) {
            match entry {
                Ok(a) if a.last_offset >= *base && a.last_offset < next => stored.push(a),
                other => ctx.fail(format!("{}: entry {other:?}", path.display())),
            }
        }
    }
    let want: Vec<AbortedTxn> = e
        .completed
        .iter()
        .filter(|c| c.3)
        .map(
            |&(producer_id, first_offset, last_offset, _, last_stable_offset)| AbortedTxn {
                producer_id,
                first_offset,
                last_offset,
                last_stable_offset,
            },
        )
        .collect();
    if stored != want {
        ctx.fail(format!(
            ".txnindex entries {stored:?}, the batches say {want:?}\n{}",
            common_sim::describe_dir(fs)
        ));
    }
    // A read_committed consumer gets no record of an aborted or open transaction.
    let mut next = log.log_start_offset();
    loop {
        let f = match log.fetch_isolated(next, 8 * 1024, IsolationLevel::ReadCommitted) {
            Ok(f) => f,
            Err(err) => ctx.fail(format!("read_committed fetch at {next}: {err}")),
        };
        if f.bytes.is_empty() {
            break;
        }
        for r in f.records() {
            let r = r.unwrap_or_else(|err| ctx.fail(format!("record: {err}")));
            let s = model
                .batches
                .iter()
                .find(|s| s.first <= r.offset && r.offset <= s.last)
                .unwrap_or_else(|| ctx.fail(format!("record {} in no batch", r.offset)));
            let b = RecordBatch::parse(&s.bytes).expect("stored");
            let aborted = e
                .completed
                .iter()
                .any(|c| c.3 && c.0 == b.producer_id() && c.1 <= r.offset && r.offset <= c.2);
            if r.offset >= lso || (b.is_transactional() && aborted) {
                ctx.fail(format!(
                    "read_committed returned record {} (lso {lso})",
                    r.offset
                ));
            }
        }
        next = f.next_offset;
    }
}

/// Sequences of the producers that have batches in the model.
fn next_seq(model: &Model, pid: i64) -> i32 {
    model
        .batches
        .iter()
        .rfind(|s| s.producer.is_some_and(|p| p.producer_id == pid))
        .map_or(0, |s| s.producer.map_or(0, |p| p.base_sequence) + s.records)
}

fn txn_batch(pid: i64, seq: i32, records: usize, fill: u8) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .producer(pid, 0, seq)
        .transactional(true);
    let value = vec![fill; 60];
    for i in 0..records {
        b.append(1_700_000_000_000 + i as i64, Some(b"t"), Some(&value), &[]);
    }
    b.build().expect("build")
}

fn power_cut_or_fail(ctx: &Ctx, fs: &SimFs, what: String) -> Step {
    if fs.counters().injected_failures > 0 {
        Step::PowerCut
    } else {
        ctx.fail(what)
    }
}

fn step(
    rng: &mut SplitMix64,
    ctx: &mut Ctx,
    fs: &SimFs,
    clock: &Arc<StepClock>,
    cfg: &LogConfig,
    log: &mut Log,
    model: &mut Model,
) -> Step {
    let roll = rng.below(100);
    if roll < 45 {
        // A transactional batch; its producer's transaction opens or goes on.
        let pid = TXN_PRODUCERS[rng.below(3) as usize];
        let records = 1 + rng.below(8) as usize;
        let seq = next_seq(model, pid);
        let client = txn_batch(pid, seq, records, rng.below(256) as u8);
        match log.append(&client) {
            Ok(AppendOutcome::Appended(info)) => {
                ctx.note(format!(
                    "txn {pid} {}..={}",
                    info.first_offset, info.last_offset
                ));
                let producer = Some(ProducerSeq {
                    producer_id: pid,
                    epoch: 0,
                    base_sequence: seq,
                });
                let (first, last) = (info.first_offset, info.last_offset);
                model.appended(ctx, log, first, last, client, producer, records as i32);
                Step::Ok
            }
            Ok(other) => ctx.fail(format!("a new batch answered {other:?}")),
            Err(e) => power_cut_or_fail(ctx, fs, format!("txn append: {e}")),
        }
    } else if roll < 70 {
        let pid = TXN_PRODUCERS[rng.below(3) as usize];
        let abort = rng.chance(1, 2);
        let marker = if abort {
            TxnMarker::abort(pid, 0, 0)
        } else {
            TxnMarker::commit(pid, 0, 0)
        };
        match log.append_marker(&marker) {
            Ok(info) => {
                ctx.note(format!(
                    "{} {pid} at {}",
                    if abort { "abort" } else { "commit" },
                    info.first_offset
                ));
                let at = info.first_offset;
                model.appended(ctx, log, at, at, Vec::new(), None, 1);
                Step::Ok
            }
            Err(e) => power_cut_or_fail(ctx, fs, format!("marker: {e}")),
        }
    } else if roll < 82 {
        let pid = 1 + rng.below(2) as i64;
        let producer = rng.chance(1, 2).then(|| ProducerSeq {
            producer_id: pid,
            epoch: 0,
            base_sequence: next_seq(model, pid),
        });
        let records = 1 + rng.below(6) as usize;
        let client = client_batch(
            records,
            rng.below(200) as usize,
            1_700_000_000_000,
            producer,
            7,
        );
        match log.append(&client) {
            Ok(AppendOutcome::Appended(info)) => {
                let (first, last) = (info.first_offset, info.last_offset);
                model.appended(ctx, log, first, last, client, producer, records as i32);
                Step::Ok
            }
            Ok(other) => ctx.fail(format!("a new batch answered {other:?}")),
            Err(e) => power_cut_or_fail(ctx, fs, format!("append: {e}")),
        }
    } else if roll < 95 {
        ctx.note("flush");
        match log.flush() {
            Ok(()) => {
                model.durable_end = model.end();
                Step::Ok
            }
            Err(e) => power_cut_or_fail(ctx, fs, format!("flush: {e}")),
        }
    } else {
        ctx.note("close and reopen");
        if let Err(e) = log.close() {
            return power_cut_or_fail(ctx, fs, format!("close: {e}"));
        }
        model.durable_end = model.end();
        match open(fs, clock, cfg) {
            Ok(l) => {
                *log = l;
                // Sealed segments are mapped when first read: a disk that died after the
                // open fails the reads too.
                if let Err(e) = model.try_check_recovered(ctx, log) {
                    return power_cut_or_fail(ctx, fs, format!("read after reopen: {e}"));
                }
                check_transactions(ctx, fs, log, model);
                Step::Ok
            }
            Err(e) => power_cut_or_fail(ctx, fs, format!("reopen: {e}")),
        }
    }
}

/// One seed: up to three crash cycles on one simulated disk.
fn crash_cycles(seed: u64, test: &'static str) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut ctx = Ctx::new(seed, test);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = config(&mut rng);
    ctx.note(format!("{cfg:?}"));
    let mut model = Model::default();
    let mut log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("first open: {e}")));
    let cycles = 1 + rng.below(3);
    for cycle in 0..cycles {
        let cut_at = rng.chance(1, 2).then(|| 1 + rng.below(120));
        if let Some(n) = cut_at {
            fs.fail_from(OpKind::Any, n, libc::EIO);
        }
        ctx.note(format!("cycle {cycle}: power cut after {cut_at:?} ops"));
        for _ in 0..1 + rng.below(60) {
            if let Step::PowerCut =
                step(&mut rng, &mut ctx, &fs, &clock, &cfg, &mut log, &mut model)
            {
                break;
            }
        }
        log.abandon();
        fs.clear_faults();
        let report = fs.crash(rng.next_u64());
        ctx.note(format!("crash: {report:?}"));
        log = open(&fs, &clock, &cfg).unwrap_or_else(|e| {
            ctx.fail(format!(
                "open after crash: {e}\n{}",
                common_sim::describe_dir(&fs)
            ))
        });
        ctx.note(format!("reopened: {:?}", log.recovery_report()));
        model.check_recovered(&ctx, &log);
        check_transactions(&ctx, &fs, &log, &model);
    }
    log.abandon();
    cycles
}

#[test]
fn crash_points_keep_durable_markers_and_rebuild_the_lso_and_txnindex() {
    let test = "crash_points_keep_durable_markers_and_rebuild_the_lso_and_txnindex";
    let points = sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_CRASH_POINTS",
        DEFAULT_CRASH_POINTS,
        7 << 40,
        "crash points",
        |seed| crash_cycles(seed, test),
    );
    assert!(points > 0);
}

/// The ops around two markers, each followed by a flush, on a log with two transactions open:
/// the power is cut at file operation `n` of them, then the disk crashes with `seed`.
fn around_markers(n: u64, seed: u64) {
    let test = "every_crash_point_around_markers_keeps_a_durable_marker_and_the_index_right";
    let mut ctx = Ctx::new(seed, test);
    ctx.note(format!("power cut at op {n}"));
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = LogConfig::builder().segment_bytes(2048).build().unwrap();
    let mut model = Model::default();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
    // Two transactions open, rolling a segment or two; everything durable.
    for (i, pid) in [20, 21, 20, 21, 20].into_iter().enumerate() {
        let seq = next_seq(&model, pid);
        let client = txn_batch(pid, seq, 4, i as u8);
        let info = match log.append(&client) {
            Ok(AppendOutcome::Appended(info)) => info,
            other => ctx.fail(format!("setup append: {other:?}")),
        };
        let producer = Some(ProducerSeq {
            producer_id: pid,
            epoch: 0,
            base_sequence: seq,
        });
        model.appended(
            &ctx,
            &log,
            info.first_offset,
            info.last_offset,
            client,
            producer,
            4,
        );
    }
    log.flush()
        .unwrap_or_else(|e| ctx.fail(format!("setup flush: {e}")));
    model.durable_end = model.end();
    fs.fail_from(OpKind::Any, n, libc::EIO);
    let mut cut = false;
    for marker in [TxnMarker::abort(20, 0, 0), TxnMarker::commit(21, 0, 0)] {
        match log.append_marker(&marker) {
            Ok(info) => {
                let at = info.first_offset;
                model.appended(&ctx, &log, at, at, Vec::new(), None, 1);
            }
            Err(_) => {
                cut = true;
                break;
            }
        }
        match log.flush() {
            // Durable: no crash may take it now.
            Ok(()) => model.durable_end = model.end(),
            Err(_) => {
                cut = true;
                break;
            }
        }
    }
    if !cut {
        if let Err(e) = log.close() {
            ctx.note(format!("close: {e}"));
        } else {
            model.durable_end = model.end();
        }
    }
    log.abandon();
    fs.clear_faults();
    let report = fs.crash(seed);
    ctx.note(format!("crash: {report:?}"));
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| {
        ctx.fail(format!(
            "open after crash: {e}\n{}",
            common_sim::describe_dir(&fs)
        ))
    });
    model.check_recovered(&ctx, &log);
    check_transactions(&ctx, &fs, &log, &model);
    // The recovered log goes on: whatever the crash left, both transactions can end.
    for marker in [TxnMarker::abort(20, 0, 0), TxnMarker::commit(21, 0, 0)] {
        if let Err(e) = log.append_marker(&marker) {
            ctx.fail(format!("marker after recovery: {e}"));
        }
    }
    log.flush()
        .unwrap_or_else(|e| ctx.fail(format!("flush after recovery: {e}")));
    if log.first_unstable_offset().is_some() {
        ctx.fail(format!(
            "still unstable at {:?}",
            log.first_unstable_offset()
        ));
    }
    log.abandon();
}

#[test]
fn every_crash_point_around_markers_keeps_a_durable_marker_and_the_index_right() {
    // Every op of the marker appends, their flushes and the close, under several crash seeds.
    let seeds = common_sim::env_u64("ONCELOG_CRASH_SEEDS_PER_POINT").unwrap_or(4);
    let mut points = 0;
    for n in 1..=60 {
        for s in 0..seeds {
            around_markers(n, (n << 16) + s);
            points += 1;
        }
    }
    eprintln!("{points} crash points around markers");
}

#[test]
fn an_abort_whose_index_entry_cannot_be_written_is_refused_and_changes_nothing() {
    let ctx = Ctx::new(
        0,
        "an_abort_whose_index_entry_cannot_be_written_is_refused_and_changes_nothing",
    );
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = LogConfig::builder()
        .segment_bytes(64 * 1024)
        .build()
        .unwrap();
    let log = open(&fs, &clock, &cfg).unwrap();
    log.append(&txn_batch(20, 0, 3, 1)).unwrap();
    // The marker itself goes through the map; the index entry is the one write.
    fs.fail_next(OpKind::Write, 1, libc::ENOSPC);
    match log.append_marker(&TxnMarker::abort(20, 0, 0)) {
        Err(oncelog::AppendError::Io(e)) => assert_eq!(e.kind(), "out_of_space"),
        other => ctx.fail(format!("{other:?}")),
    }
    assert_eq!(log.log_end_offset(), 3);
    assert_eq!(
        log.producer(20).unwrap().current_txn_first_offset(),
        Some(0)
    );
    let index = dir().join("00000000000000000000.txnindex");
    assert_eq!(fs.read_live(&index).unwrap_or_default().len(), 0);
    // The disk has room again: the same marker goes in, with its one entry.
    log.append_marker(&TxnMarker::abort(20, 0, 0)).unwrap();
    let entries: Vec<_> = txn_index::decode(&fs.read_live(&index).unwrap()).collect();
    assert_eq!(entries.len(), 1);
    log.flush().unwrap();
    assert_eq!(log.first_unstable_offset(), None);
    let f = log
        .fetch_isolated(0, 1 << 20, IsolationLevel::ReadCommitted)
        .unwrap();
    assert_eq!(f.records().count(), 0, "the aborted records are skipped");
}
