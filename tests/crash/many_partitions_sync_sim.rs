//! Many partitions of one log dir appending from several threads at once (issue 28, item 4),
//! acknowledged one of two ways, by seed: under `FlushPolicy::Always` each append waits for its
//! own partition's sync, or under `Manual` each thread appends to all its partitions and then
//! waits for `LogManager::flush_many` over them (a broker's acks=all over many partitions: the
//! syncs issued together from the log dir's sync threads), each append acknowledged only when
//! its partition's answer is `Ok`. Either way their syncs overlap; in half the seeds each
//! partition has two appenders, so its syncs are also shared (group commit: one leads, the
//! other is covered or takes the next turn). Under `Always` the appends are written through
//! the file on descriptors the partitions take within a seeded bound (none to plenty) and the
//! flush job, run in a loop beside the appenders, releases from idle partitions, so appends
//! move between the file and the map while syncs are under way.
//! The power is cut at a seeded point (every file operation from the Nth on fails, so appends
//! and syncs under way fail), the crash image is taken, reopened and checked:
//!
//! - every acknowledged append is there, at the offset its answer gave, with its value; the
//!   partition's offsets are dense from 0, and every record it holds is one appended to it,
//!   once (one record per batch, its value naming partition, thread and sequence);
//! - no partition's recovery point passes its durable data: the recovery point its checkpoint
//!   recorded is at most its recovered log end, and recovery found no damage below it
//!   (`RecoveryReport::deep` stays false: it turns true when bytes the checkpoint vouched for
//!   are damaged).
//!
//! `ONCELOG_SYNC_CRASH_POINTS=<n>` sets the crash points (default 40; 10x for a long run);
//! `ONCELOG_SYNC_CRASH_SEED=<n>` replays one seed: its partitions, threads, appends and cut
//! point (the threads' interleaving is the OS scheduler's, so the failing op may differ).

use crate::common_sim;

use std::path::Path;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common_sim::{sweep_seeds, Ctx, StepClock};
use oncelog::format::BatchBuilder;
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::{
    AppendOutcome, Environment, FlushPolicy, Job, JobIntervals, Log, LogConfig, LogManager,
    ManagerConfig, PartitionConfig, TopicPartition,
};

const DIR: &str = "/data/a";

fn open(
    fs: &SimFs,
    clock: &Arc<StepClock>,
    flush: FlushPolicy,
    descriptors: usize,
) -> Result<LogManager, oncelog::ManagerError> {
    let env = Environment::default()
        .with_fs(fs.as_dyn())
        .with_clock(clock.clone());
    // Segments of a few batches: rolls, so flushes write checkpoints whose recovery points
    // the crash then tests (with 2 KiB ones no checkpoint recorded a recovery point above 0).
    let config = ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(512)
                .segment_index_bytes(512)
                .prefault_bytes(0)
                .flush_policy(flush)
                .build()
                .unwrap(),
        )
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(2)
        .with_sync_threads(3)
        .with_write_descriptors(descriptors);
    LogManager::open_in(env, &[Path::new(DIR)], config)
}

/// The value of the `k`th record thread `thread` appends to `partition`.
fn value(partition: usize, thread: usize, k: u64) -> String {
    format!("p{partition}/t{thread}/{k}")
}

fn record(value: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.append(1_700_000_000_000, None, Some(value.as_bytes()), &[]);
    b.build().unwrap()
}

/// The appends of one thread to one partition that were acknowledged: offset and value.
type Acked = (usize, Vec<(i64, String)>);

/// Whether a failed call failed because the power cut has started.
fn cut(fs: &SimFs) -> bool {
    fs.counters().injected_failures > 0
}

/// Thread `thread` appends `rounds` records to each of `mine`, a record per append, until the
/// power cut makes a call fail. Without `manager`, each append waits for its sync
/// (`FlushPolicy::Always`); with it, each round's appends are acknowledged by one
/// `flush_many` over the round's partitions, each partition's by its own answer.
/// Returns the appends acknowledged, or what went wrong other than the cut.
fn append_until_cut(
    fs: &SimFs,
    logs: &[Arc<Log>],
    manager: Option<&LogManager>,
    thread: usize,
    mine: &[usize],
    rounds: u64,
) -> Result<Vec<Acked>, String> {
    let mut acked: Vec<Acked> = mine.iter().map(|&p| (p, Vec::new())).collect();
    for k in 0..rounds {
        let mut pending = Vec::new();
        for (i, (p, done)) in acked.iter_mut().enumerate() {
            let v = value(*p, thread, k);
            match logs[*p].append(&record(&v)) {
                Ok(AppendOutcome::Appended(info)) if manager.is_some() => {
                    pending.push((i, info.first_offset, v))
                }
                Ok(AppendOutcome::Appended(info)) => done.push((info.first_offset, v)),
                Ok(other) => return Err(format!("{v}: answered {other:?}")),
                Err(_) if cut(fs) => return Ok(acked),
                Err(e) => return Err(format!("{v}: failed before the cut: {e}")),
            }
        }
        let Some(m) = manager else { continue };
        let targets: Vec<(TopicPartition, i64)> = pending
            .iter()
            .map(|(i, offset, _)| (TopicPartition::new("t", acked[*i].0 as i32), offset + 1))
            .collect();
        let mut failed = false;
        for ((i, offset, v), answer) in pending.into_iter().zip(m.flush_many(&targets)) {
            match answer {
                Ok(()) => acked[i].1.push((offset, v)),
                Err(_) if cut(fs) => failed = true,
                Err(e) => return Err(format!("{v}: flush_many failed before the cut: {e}")),
            }
        }
        if failed {
            return Ok(acked);
        }
    }
    Ok(acked)
}

fn one_seed(seed: u64) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut ctx = Ctx::new(seed, "many_partitions_syncing_together")
        .replayed_by("ONCELOG_SYNC_CRASH_SEED", "many_partitions_sync_sim");
    let fs = SimFs::new();
    let clock = StepClock::new();
    let pooled = rng.chance(1, 2);
    let flush = match pooled {
        true => FlushPolicy::Manual,
        false => FlushPolicy::Always,
    };
    // Under `Always` appends are written through the file, each partition's descriptor taken
    // at its append, within this bound, and released by the flush job when it finds the
    // partition idle (run by a thread of its own below): none, one, a few, or as many as
    // there are partitions.
    let descriptors = [0, 1, 3, 64][rng.below(4) as usize];
    let m = open(&fs, &clock, flush, descriptors)
        .unwrap_or_else(|e| ctx.fail(format!("first open: {e}")));
    let partitions = 8 + rng.below(25) as usize;
    let threads = 2 + rng.below(4) as usize;
    let rounds = 1 + rng.below(12);
    // Partition p is appended by thread p mod T, and with `shared` also by the next one.
    let shared = rng.chance(1, 2);
    let logs: Vec<Arc<Log>> = (0..partitions)
        .map(|p| m.create("t", p as i32, PartitionConfig::default()))
        .collect::<Result<_, _>>()
        .unwrap_or_else(|e| ctx.fail(format!("create: {e}")));
    // Some seeds cut the power past the end of the appends: a crash after they all returned.
    let cut_at = 1 + rng.below(partitions as u64 * rounds * 12);
    ctx.note(format!(
        "{partitions} partitions, {threads} threads (shared: {shared}, flush_many: {pooled}), \
         {rounds} rounds, {descriptors} write descriptors, power cut after {cut_at} ops"
    ));
    fs.fail_from(OpKind::Any, cut_at, libc::EIO);
    let appending = AtomicBool::new(true);
    let answers: Vec<Result<Vec<Acked>, String>> = std::thread::scope(|s| {
        // The flush job's release of idle partitions' descriptors, while they append.
        let (m, appending) = (&m, &appending);
        s.spawn(move || {
            while appending.load(Ordering::Acquire) {
                let _ = m.run_job(Job::Flush);
                std::thread::yield_now();
            }
        });
        let workers: Vec<_> = (0..threads)
            .map(|t| {
                let (fs, logs, manager) = (&fs, &logs, pooled.then_some(m));
                let mine: Vec<usize> = (0..partitions)
                    .filter(|p| p % threads == t || (shared && (p + 1) % threads == t))
                    .collect();
                s.spawn(move || append_until_cut(fs, logs, manager, t, &mine, rounds))
            })
            .collect();
        let answers = workers
            .into_iter()
            .map(|w| w.join().expect("an appender panicked"))
            .collect();
        appending.store(false, Ordering::Release);
        answers
    });
    let mut acked: Vec<Vec<(i64, String)>> = vec![Vec::new(); partitions];
    for answer in answers {
        for (p, done) in answer.unwrap_or_else(|e| ctx.fail(e)) {
            acked[p].extend(done);
        }
    }
    // The power goes: the logs and the manager dropped without close are a crash as far as the
    // disk is concerned.
    drop(logs);
    drop(m);
    fs.clear_faults();
    let report = fs.crash(rng.next_u64());
    ctx.note(format!("crash: {report:?}"));
    let m = open(&fs, &clock, flush, descriptors)
        .unwrap_or_else(|e| ctx.fail(format!("open after the crash: {e}")));
    if let Some((tp, f)) = m.open_report().failures().next() {
        ctx.fail(format!("{tp} did not open: {f}"));
    }
    for (p, acknowledged) in acked.into_iter().enumerate() {
        let log = m
            .get("t", p as i32)
            .unwrap_or_else(|e| ctx.fail(format!("p{p} is gone: {e}")));
        let end = log.log_end_offset();
        let held = common_sim::record_values(&log);
        let mut seen = std::collections::BTreeSet::new();
        for (expected, (offset, v)) in (0..).zip(&held) {
            if *offset != expected || !v.starts_with(&format!("p{p}/")) || !seen.insert(v) {
                ctx.fail(format!("p{p}: {v:?} at {offset}, where {expected} was due"));
            }
        }
        for (offset, v) in acknowledged {
            let found = held.get(offset as usize).map(|(_, v)| v);
            if offset >= end || found != Some(&v) {
                ctx.fail(format!(
                    "p{p}: {v:?} was acknowledged at {offset}; the log ends at {end} and holds \
                     {found:?} there"
                ));
            }
        }
        let recovery = log.recovery_report();
        if recovery.recovery_point > end {
            ctx.fail(format!(
                "p{p}: the checkpoint's recovery point {} passes the durable end {end}",
                recovery.recovery_point
            ));
        }
        if recovery.deep {
            ctx.fail(format!(
                "p{p}: bytes below the recovery point {} were damaged: {recovery:?}",
                recovery.recovery_point
            ));
        }
    }
    m.close()
        .unwrap_or_else(|e| ctx.fail(format!("close after the crash: {e}")));
    1
}

#[test]
fn many_partitions_syncing_together_keep_every_acknowledged_append() {
    sweep_seeds(
        "ONCELOG_SYNC_CRASH_SEED",
        "ONCELOG_SYNC_CRASH_POINTS",
        40,
        0x5C4E_0000,
        "many-partition sync crash points",
        one_seed,
    );
}
