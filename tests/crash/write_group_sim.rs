//! The write group under power cuts (issue 29, item 5): several threads append to one log under
//! `FlushPolicy::Always`, so their batches are written by whichever of them leads a group and
//! answered after the group's one sync. Each thread is an idempotent producer; after every
//! append it is acknowledged for, it may send the same batch again (a retry after a lost
//! answer), which the group must answer Duplicate with the first answer's offsets. The power is
//! cut at a seeded file operation, so a leader fails mid-write or mid-sync with its followers
//! queued, then the crash image is reopened and checked:
//!
//! - every acknowledged batch is there, at its offsets, once: no follower was answered for
//!   bytes its leader had not made durable;
//! - offsets are dense from 0 and every record is one a thread appended, once;
//! - recovery found no damage below the recovery point the checkpoint recorded;
//! - each producer's next sequence resumes after its last acknowledged batch: a retry of it
//!   after the reopen is a duplicate with the same offsets.
//!
//! `ONCELOG_GROUP_CRASH_POINTS=<n>` sets the crash points (default 300; 10x for a long run);
//! `ONCELOG_GROUP_CRASH_SEED=<n>` replays one seed (the threads' interleaving is the OS
//! scheduler's, so the failing operation may differ).

use crate::common_sim;

use std::sync::Arc;

use common_sim::{config, open, sweep_seeds, Ctx, StepClock};
use oncelog::format::BatchBuilder;
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::{AppendOutcome, FlushPolicy, Log};

/// Producer ids: thread t is producer `PRODUCER + t`.
const PRODUCER: i64 = 7_000;

/// Thread `t`'s `k`th batch: `records` records, the first at sequence `seq`.
fn batch(t: usize, k: u64, seq: i32, records: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(PRODUCER + t as i64, 0, seq);
    for r in 0..records {
        let v = format!("t{t}/{k}/{r}");
        b.append(1_700_000_000_000, None, Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

/// One thread's acknowledged batches: (first offset, batch number, records).
type Acked = Vec<(i64, u64, usize)>;

fn cut(fs: &SimFs) -> bool {
    fs.counters().injected_failures > 0
}

/// Appends thread `t`'s batches until the power cut makes one fail; after an acknowledged
/// append, by the seed, sends it again and expects Duplicate with the same offsets.
fn append_until_cut(
    fs: &SimFs,
    log: &Log,
    t: usize,
    batches: u64,
    retry_one_in: u64,
    seed: u64,
) -> Result<Acked, String> {
    let mut rng = SplitMix64::new(seed ^ (t as u64 + 1).wrapping_mul(0x9E37_79B9));
    let mut acked = Vec::new();
    let mut seq = 0i32;
    for k in 0..batches {
        let records = 1 + rng.below(4) as usize;
        let b = batch(t, k, seq, records);
        let first = match log.append(&b) {
            Ok(AppendOutcome::Appended(info)) => info.first_offset,
            Ok(other) => return Err(format!("t{t}/{k}: answered {other:?}")),
            Err(_) if cut(fs) => return Ok(acked),
            Err(e) => return Err(format!("t{t}/{k}: failed before the cut: {e}")),
        };
        acked.push((first, k, records));
        seq += records as i32;
        if rng.below(retry_one_in) == 0 {
            match log.append(&b) {
                Ok(AppendOutcome::Duplicate(d)) if d.first_offset == first => {}
                Ok(other) => return Err(format!("t{t}/{k}: the retry was answered {other:?}")),
                Err(_) if cut(fs) => return Ok(acked),
                Err(e) => return Err(format!("t{t}/{k}: the retry failed before the cut: {e}")),
            }
        }
    }
    Ok(acked)
}

fn one_seed(seed: u64) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut ctx = Ctx::new(seed, "write_group_keeps_every_acknowledged_batch")
        .replayed_by("ONCELOG_GROUP_CRASH_SEED", "write_group_sim");
    let fs = SimFs::new();
    let clock = StepClock::new();
    // Small segments and seeded write modes (the map, or through the file), so groups span
    // rolls and both writers.
    let config = config(&mut rng)
        .into_builder()
        .flush_policy(FlushPolicy::Always)
        .prefault_bytes(0)
        .build()
        .unwrap();
    let log =
        Arc::new(open(&fs, &clock, &config).unwrap_or_else(|e| ctx.fail(format!("open: {e}"))));
    let threads = 2 + rng.below(7) as usize;
    let batches = 1 + rng.below(30);
    let retry_one_in = 1 + rng.below(4);
    // Some seeds cut the power after every append returned.
    let cut_at = 1 + rng.below(threads as u64 * batches * 10);
    ctx.note(format!(
        "{threads} threads, {batches} batches each, a retry one in {retry_one_in}, power cut \
         after {cut_at} ops, config {config:?}"
    ));
    fs.fail_from(OpKind::Any, cut_at, libc::EIO);
    let answers: Vec<Result<Acked, String>> = std::thread::scope(|s| {
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (fs, log) = (&fs, &log);
                s.spawn(move || append_until_cut(fs, log, t, batches, retry_one_in, seed))
            })
            .collect();
        workers
            .into_iter()
            .map(|w| w.join().expect("an appender panicked"))
            .collect()
    });
    let acked: Vec<Acked> = answers
        .into_iter()
        .map(|a| a.unwrap_or_else(|e| ctx.fail(e)))
        .collect();
    // The power goes: the log dropped without close is a crash as far as the disk is concerned.
    drop(log);
    fs.clear_faults();
    let report = fs.crash(rng.next_u64());
    ctx.note(format!("crash: {report:?}"));
    let log = open(&fs, &clock, &config)
        .unwrap_or_else(|e| ctx.fail(format!("open after the crash: {e}")));
    let end = log.log_end_offset();
    let held = common_sim::record_values(&log);
    let mut seen = std::collections::BTreeSet::new();
    for (expected, (offset, v)) in (0..).zip(&held) {
        if *offset != expected || !v.starts_with('t') || !seen.insert(v.clone()) {
            ctx.fail(format!("{v:?} at {offset}, where {expected} was due"));
        }
    }
    for (t, mine) in acked.iter().enumerate() {
        for &(first, k, records) in mine {
            for r in 0..records {
                let offset = first + r as i64;
                let want = format!("t{t}/{k}/{r}");
                let found = held.get(offset as usize).map(|(_, v)| v);
                if offset >= end || found != Some(&want) {
                    ctx.fail(format!(
                        "{want:?} was acknowledged at {offset}; the log ends at {end} and holds \
                         {found:?} there"
                    ));
                }
            }
        }
        // The producer's window survived: its last acknowledged batch is still a duplicate.
        if let Some(&(first, k, records)) = mine.last() {
            let seq: usize = mine.iter().map(|&(_, _, n)| n).sum::<usize>() - records;
            match log.append(&batch(t, k, seq as i32, records)) {
                Ok(AppendOutcome::Duplicate(d)) if d.first_offset == first => {}
                other => ctx.fail(format!(
                    "t{t}: its last acknowledged batch {k} (at {first}) sent again after the \
                     crash was answered {other:?}"
                )),
            }
        }
    }
    let recovery = log.recovery_report();
    if recovery.recovery_point > end {
        ctx.fail(format!(
            "the checkpoint's recovery point {} passes the durable end {end}",
            recovery.recovery_point
        ));
    }
    if recovery.deep {
        ctx.fail(format!(
            "bytes below the recovery point {} were damaged: {recovery:?}",
            recovery.recovery_point
        ));
    }
    log.close()
        .unwrap_or_else(|e| ctx.fail(format!("close after the crash: {e}")));
    1
}

#[test]
fn write_group_keeps_every_acknowledged_batch() {
    sweep_seeds(
        "ONCELOG_GROUP_CRASH_SEED",
        "ONCELOG_GROUP_CRASH_POINTS",
        300,
        0x6E0_0000,
        "write group crash points",
        one_seed,
    );
}
