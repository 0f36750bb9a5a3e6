//! Crashes at every file operation of a compaction round: a seeded,
//! durable, compacted log on the simulated file system (keyed records with tombstones,
//! idempotent producers, an aborted and a committed transaction, several segments); then one
//! `compact` whose Nth file operation fails and every one after it, as a power cut in the
//! middle of the call would; then a crash that keeps a seeded choice of what was not synced,
//! and a reopen.
//!
//! After each reopen the log must be the one before the round or the one after it, batch for
//! batch and byte for byte: never a record the round keeps missing, never an offset twice,
//! offsets strictly increasing. In either state every retry in each producer's dedup window
//! is a `Duplicate` with its original offsets, and a compaction of the reopened log (no
//! faults) gives the state after.
//!
//! Every crash point of a seed's round is swept. The full sweep is the rounds of the seeds
//! from 1 until 5,000 crash points; by default `cargo test` sweeps a sample of those seeds, at
//! least 1,000 points, that still includes every kind of file operation the full sweep's
//! rounds perform and both kinds of segment deletion (at once and delayed), each at every one
//! of its operations in some round (`common_sim::sweep_every_op_sampled`, which checks it).
//!
//! Environment:
//! * `ONCELOG_COMPACT_CRASH_POINTS=<n>`: the sweep of `n` crash points (5,000: the full one).
//! * `ONCELOG_CRASH_SEED=<n>`: replay one seed only (every failure prints its seed).

use crate::common_sim;

use std::sync::Arc;

use common_sim::{op_kinds_since, open, sweep_every_op_sampled, Ctx, Kinds, StepClock};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::{AppendOutcome, CleanupPolicy, Log, LogConfig, TxnMarker};

/// The full sweep's crash points, and the least the default sample sweeps.
const FULL_POINTS: u64 = 5_000;
const DEFAULT_POINTS: u64 = 1_000;
const T0: i64 = 1_700_000_000_000;

/// Every batch readable from the log start: `(base, last, bytes)`.
type State = Vec<(i64, i64, Vec<u8>)>;

fn state(ctx: &Ctx, log: &Log) -> State {
    let mut out: State = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = match log.read(next, 1 << 20) {
            Ok(b) if !b.is_empty() => b,
            Ok(_) => ctx.fail(format!("empty read at {next}")),
            Err(e) => ctx.fail(format!("read at {next}: {e}")),
        };
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap_or_else(|e| ctx.fail(format!("read at {next}: {e}")));
            if !b.is_crc_valid() {
                ctx.fail(format!("bad CRC at {}", b.base_offset()));
            }
            if out.last().is_some_and(|l| b.base_offset() <= l.1) {
                ctx.fail(format!("offset {} twice or going back", b.base_offset()));
            }
            out.push((b.base_offset(), b.last_offset(), b.as_bytes().to_vec()));
            next = b.last_offset() + 1;
        }
    }
    out
}

/// A retry of an idempotent batch and the offsets it got.
type Sent = (i64, Vec<u8>, (i64, i64));

struct Built {
    fs: SimFs,
    clock: Arc<StepClock>,
    cfg: LogConfig,
    log: Log,
    sent: Vec<Sent>,
    rng: SplitMix64,
}

fn build(seed: u64, ctx: &mut Ctx) -> Built {
    let mut rng = SplitMix64::new(seed);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = LogConfig::builder()
        .segment_bytes((2 + rng.below(4) as usize) * 1024)
        .segment_index_bytes(96 + 12 * rng.below(20) as usize)
        .index_interval_bytes(rng.below(512) as usize)
        .prefault_bytes(0)
        .cleanup_policy(CleanupPolicy::Compact)
        .file_delete_delay_ms(if rng.chance(1, 2) { 0 } else { 60_000 })
        .build()
        .unwrap();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
    let mut sent = Vec::new();
    let mut seqs = [0i32; 4];
    let batches = 20 + rng.below(40);
    let keys = 2 + rng.below(8);
    let txn_at = rng.below(batches);
    for i in 0..batches {
        if i == txn_at {
            // An aborted transaction and a committed one, from two transactional producers.
            for (pid, abort) in [(100i64, true), (101, false)] {
                let mut b = BatchBuilder::new().producer(pid, 0, 0).transactional(true);
                b.append(T0, Some(b"txn-key"), Some(b"txn value"), &[]);
                log.append(&b.build().unwrap())
                    .unwrap_or_else(|e| ctx.fail(format!("txn append: {e}")));
                let m = if abort {
                    TxnMarker::abort(pid, 0, 0)
                } else {
                    TxnMarker::commit(pid, 0, 0)
                };
                log.append_marker(&m)
                    .unwrap_or_else(|e| ctx.fail(format!("marker: {e}")));
            }
        }
        let records = 1 + rng.below(4) as usize;
        let producer = rng.chance(2, 3).then(|| rng.below(3) as usize);
        let mut b = BatchBuilder::new();
        if let Some(p) = producer {
            b = b.producer(1 + p as i64, 0, seqs[p]);
            seqs[p] += records as i32;
        }
        for r in 0..records {
            let key = format!("key{}", rng.below(keys));
            let value =
                (!rng.chance(1, 8)).then(|| vec![b'v' ^ (i as u8); rng.below(200) as usize]);
            b.append(
                T0 + (i * 4 + r as u64) as i64,
                Some(key.as_bytes()),
                value.as_deref(),
                &[],
            );
        }
        let client = b.build().unwrap();
        match log.append(&client) {
            Ok(AppendOutcome::Appended(a)) => {
                if let Some(p) = producer {
                    sent.push((1 + p as i64, client, (a.first_offset, a.last_offset)));
                }
            }
            other => ctx.fail(format!("append {i}: {other:?}")),
        }
        if rng.chance(1, 8) {
            log.flush()
                .unwrap_or_else(|e| ctx.fail(format!("flush: {e}")));
        }
    }
    log.flush()
        .unwrap_or_else(|e| ctx.fail(format!("flush: {e}")));
    ctx.note(format!("{cfg:?}\n{batches} batches, {keys} keys"));
    Built {
        fs,
        clock,
        cfg,
        log,
        sent,
        rng,
    }
}

/// The round's wall clock: after the records, so tombstones get a horizon and stay.
const NOW: i64 = T0 + 1_000_000;

fn expect_dedup(ctx: &Ctx, log: &Log, sent: &[Sent]) {
    for pid in 1..=3 {
        let mine: Vec<&Sent> = sent.iter().filter(|s| s.0 == pid).collect();
        for (_, client, offsets) in mine.iter().rev().take(5) {
            match log.append(client) {
                Ok(AppendOutcome::Duplicate(d)) if (d.first_offset, d.last_offset) == *offsets => {}
                other => ctx.fail(format!(
                    "retry of producer {pid}'s batch at {offsets:?} answered {other:?}"
                )),
            }
        }
    }
}

/// One seed: a round without faults gives the state after, the number of file operations and
/// the kinds of work; then, with `crash`, a crash at each of those operations.
fn crash_every_op(seed: u64, crash: bool) -> (u64, Kinds) {
    let mut ctx = Ctx::in_file(seed, "crash_compact", "every_file_operation_of_a_round");
    let b = build(seed, &mut ctx);
    let before = state(&ctx, &b.log);
    let ops_before = b.fs.counters().ops;
    let kinds_before = b.fs.counters().by_kind;
    let report = b
        .log
        .maintenance()
        .compact(NOW)
        .unwrap_or_else(|e| ctx.fail(format!("compact without faults: {e}")));
    let ops = b.fs.counters().ops - ops_before;
    let mut kinds = op_kinds_since(&b.fs, &kinds_before);
    kinds.insert(if b.cfg.file_delete_delay_ms == 0 {
        "segments deleted at once".to_string()
    } else {
        "segments deleted after a delay".to_string()
    });
    let after = state(&ctx, &b.log);
    ctx.note(format!("{report:?}"));
    if report.passes != 1 {
        ctx.fail(format!("expected one pass: {report:?}"));
    }
    expect_dedup(&ctx, &b.log, &b.sent);
    b.log.abandon();
    drop(b.fs);
    if !crash {
        return (ops + 1, kinds);
    }
    for n in 1..=ops + 1 {
        let mut ctx = Ctx::in_file(seed, "crash_compact", "every_file_operation_of_a_round");
        let mut b = build(seed, &mut ctx);
        ctx.note(format!("power cut at file operation {n} of {ops}"));
        b.fs.fail_from(OpKind::Any, n, libc::EIO);
        let result = b.log.maintenance().compact(NOW);
        ctx.note(format!("compact: {result:?}"));
        if n > ops && result.is_err() {
            ctx.fail(format!("the round failed with no fault in it: {result:?}"));
        }
        b.log.abandon();
        b.fs.clear_faults();
        let crash = b.fs.crash(b.rng.next_u64());
        ctx.note(format!("crash: {crash:?}"));
        let log = open(&b.fs, &b.clock, &b.cfg).unwrap_or_else(|e| {
            ctx.fail(format!(
                "open after the crash: {e}\n{}",
                common_sim::describe_dir(&b.fs)
            ))
        });
        ctx.note(format!("reopened: {:?}", log.producer_load_report()));
        let seen = state(&ctx, &log);
        if seen != before && seen != after {
            ctx.fail(format!(
                "neither the log before nor after the round: {} batches before, {} after, {} seen\n{}",
                before.len(),
                after.len(),
                seen.len(),
                common_sim::describe_dir(&b.fs)
            ));
        }
        ctx.note(common_sim::describe_dir(&b.fs));
        expect_dedup(&ctx, &log, &b.sent);
        // Finishing the job gives the state after (a round that was rolled back runs again).
        if seen == before {
            log.maintenance()
                .compact(NOW)
                .unwrap_or_else(|e| ctx.fail(format!("compact after the crash: {e}")));
            let again = state(&ctx, &log);
            let expected: Vec<_> = after.iter().map(|b| (b.0, b.1)).collect();
            let got: Vec<_> = again.iter().map(|b| (b.0, b.1)).collect();
            if got != expected {
                ctx.fail("compacting the rolled-back log did not give the state after");
            }
        }
        log.abandon();
    }
    (ops + 1, kinds)
}

#[test]
fn every_file_operation_of_a_round() {
    sweep_every_op_sampled(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_COMPACT_CRASH_POINTS",
        FULL_POINTS,
        DEFAULT_POINTS,
        1,
        "compaction crash points",
        crash_every_op,
    );
}
