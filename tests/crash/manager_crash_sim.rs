//! Crashes of a log manager on the simulated file system: random workloads of appends,
//! flushes, DeleteRecords, checkpoint writes, partition creation (one at a time and in batches)
//! and deletion, and clean reopens, cut by a power failure at a seeded point (between calls, or
//! in the middle of one by failing every file operation from the Nth on), then reopened and
//! checked:
//!
//! - the manager opens, and so does every partition (no torn checkpoint file, no half-deleted
//!   partition that cannot be opened);
//! - a partition whose deletion returned never comes back, one whose creation returned is there
//!   (every partition of a batch whose creation returned);
//! - every flushed record is there at its offset, the log start is never below a DeleteRecords
//!   that returned, and every offset the log holds has the record appended at it.
//!
//! `ONCELOG_MANAGER_CRASH_POINTS=<n>` sets the crash points (default 300);
//! `ONCELOG_MANAGER_CRASH_SEED=<n>` replays one seed.

use crate::common_sim;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;

use common_sim::{sweep_seeds, Ctx, StepClock};
use oncelog::format::BatchBuilder;
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::{
    Environment, Job, JobIntervals, LogConfig, LogManager, ManagerConfig, PartitionConfig,
    TopicPartition,
};

const DIRS: [&str; 2] = ["/data/a", "/data/b"];

fn config() -> ManagerConfig {
    ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(4 << 10)
                .segment_index_bytes(512)
                .prefault_bytes(0)
                .file_delete_delay_ms(0)
                .build()
                .unwrap(),
        )
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(2)
}

fn open(fs: &SimFs, clock: &Arc<StepClock>) -> Result<LogManager, oncelog::ManagerError> {
    let env = Environment::default()
        .with_fs(fs.as_dyn())
        .with_clock(clock.clone());
    let dirs: Vec<&Path> = DIRS.iter().map(Path::new).collect();
    LogManager::open_in(env, &dirs, config())
}

/// What one partition must hold.
#[derive(Debug, Default, Clone)]
struct Part {
    /// The value appended at each offset.
    values: Vec<String>,
    durable_end: i64,
    /// The log start a DeleteRecords that returned set.
    durable_start: i64,
    /// The log start in the log dir's checkpoint as last written (a job or a close that
    /// returned): all a partition without a checkpoint of its own (a Kafka one) has to go on.
    checkpointed_start: i64,
}

/// The partitions that must exist, and those that may (an interrupted creation or deletion).
#[derive(Debug, Default)]
struct Model {
    parts: BTreeMap<TopicPartition, Part>,
    maybe: BTreeMap<TopicPartition, Part>,
    created: u32,
}

fn record(tp: &TopicPartition, offset: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.append(
        1_700_000_000_000,
        None,
        Some(format!("{tp}@{offset}").as_bytes()),
        &[],
    );
    b.build().unwrap()
}

/// Removes every partition's own checkpoint, leaving the log dir's Kafka checkpoints alone to
/// vouch for the segments, as for a partition that Kafka wrote.
fn forget_own_checkpoints(fs: &SimFs) {
    use oncelog::io::FileSystem;
    for dir in DIRS {
        for name in fs.list(Path::new(dir)).unwrap_or_default() {
            let cp = Path::new(dir).join(name).join("oncelog.checkpoint");
            if fs.exists(&cp).unwrap() {
                fs.remove_file(&cp).unwrap();
                fs.sync_dir(cp.parent().unwrap()).unwrap();
            }
        }
    }
}

fn check(ctx: &Ctx, m: &LogManager, model: &mut Model, kafka_only: bool) {
    let report = m.open_report();
    if let Some((tp, f)) = report.failures().next() {
        ctx.fail(format!("{tp} did not open: {f}"));
    }
    let listed: Vec<TopicPartition> = m.list().into_iter().map(|p| p.partition).collect();
    for tp in model.parts.keys() {
        if !listed.contains(tp) {
            ctx.fail(format!(
                "{tp} is gone, though its creation returned and it was not deleted"
            ));
        }
    }
    let maybe = std::mem::take(&mut model.maybe);
    for tp in &listed {
        let part = match (model.parts.get_mut(tp), maybe.get(tp)) {
            (Some(p), _) => p,
            (None, Some(p)) => model.parts.entry(tp.clone()).or_insert(p.clone()),
            (None, None) => ctx.fail(format!("{tp} is back, though its deletion returned")),
        };
        let log = m.get(&tp.topic, tp.partition).unwrap();
        let (start, end) = (log.log_start_offset(), log.log_end_offset());
        if end < part.durable_end {
            ctx.fail(format!(
                "{tp}: ends at {end}, but {} was flushed",
                part.durable_end
            ));
        }
        let floor = if kafka_only {
            part.checkpointed_start
        } else {
            part.durable_start
        };
        if start < floor {
            ctx.fail(format!(
                "{tp}: starts at {start}, below {floor} (DeleteRecords {}, checkpointed {})",
                part.durable_start, part.checkpointed_start
            ));
        }
        for (expected, (offset, value)) in (start..).zip(common_sim::record_values(&log)) {
            if offset != expected {
                ctx.fail(format!("{tp}: offset {offset} where {expected} was due"));
            }
            let want = part.values.get(offset as usize);
            if want != Some(&value) {
                ctx.fail(format!("{tp}: at {offset} {value:?}, appended {want:?}"));
            }
        }
        part.values.truncate(end as usize);
        part.durable_end = end;
        part.durable_start = start;
        // The log dir's checkpoint changes only when written (a job, a close).
    }
}

/// Every partition's log start now: what a checkpoint write about to happen records.
fn log_starts(m: &LogManager, model: &Model) -> Vec<(TopicPartition, i64)> {
    model
        .parts
        .keys()
        .filter_map(|tp| {
            m.get(&tp.topic, tp.partition)
                .ok()
                .map(|l| (tp.clone(), l.log_start_offset()))
        })
        .collect()
}

/// The checkpoint write that recorded `starts` returned.
fn checkpointed(model: &mut Model, starts: Vec<(TopicPartition, i64)>) {
    for (tp, start) in starts {
        if let Some(p) = model.parts.get_mut(&tp) {
            p.checkpointed_start = p.checkpointed_start.max(start);
        }
    }
}

/// Whether a failed call failed because the power cut has started.
fn cut(fs: &SimFs) -> bool {
    fs.counters().injected_failures > 0
}

/// What the workload does next.
enum Next {
    Go,
    /// The power cut has started: stop and crash.
    Cut,
    /// Close the manager cleanly and open it again.
    Reopen,
}

fn step(
    rng: &mut SplitMix64,
    ctx: &mut Ctx,
    fs: &SimFs,
    m: &LogManager,
    model: &mut Model,
) -> Next {
    let tps: Vec<TopicPartition> = model.parts.keys().cloned().collect();
    let pick = |rng: &mut SplitMix64| {
        tps.get(rng.below(tps.len().max(1) as u64) as usize)
            .cloned()
    };
    let roll = rng.below(100);
    let failed = |ctx: &Ctx, what: String| -> Next {
        if cut(fs) {
            return Next::Cut;
        }
        ctx.fail(what)
    };
    if roll < 55 {
        let Some(tp) = pick(rng) else { return Next::Go };
        let log = m.get(&tp.topic, tp.partition).unwrap();
        let part = model.parts.get_mut(&tp).unwrap();
        for _ in 0..1 + rng.below(8) {
            let offset = part.values.len();
            match log.append(&record(&tp, offset)) {
                Ok(_) => part.values.push(format!("{tp}@{offset}")),
                Err(e) => return failed(ctx, format!("append {tp}: {e}")),
            }
        }
        if rng.chance(1, 2) {
            ctx.note(format!("flush {tp}"));
            match log.flush() {
                Ok(()) => part.durable_end = part.values.len() as i64,
                Err(e) => return failed(ctx, format!("flush {tp}: {e}")),
            }
        }
    } else if roll < 65 {
        let job = [
            Job::Checkpoints,
            Job::HighWatermarks,
            Job::Deletion,
            Job::Retention,
        ][rng.below(4) as usize];
        ctx.note(format!("{job:?}"));
        // What the job will write, if it returns.
        let starts = log_starts(m, model);
        let r = m.run_job(job).unwrap();
        if !r.failures.is_empty() && !cut(fs) {
            ctx.fail(format!("{job:?}: {:?}", r.failures));
        }
        if job == Job::Checkpoints && r.failures.is_empty() && !cut(fs) {
            checkpointed(model, starts);
        }
    } else if roll < 72 {
        let Some(tp) = pick(rng) else { return Next::Go };
        let log = m.get(&tp.topic, tp.partition).unwrap();
        let part = model.parts.get_mut(&tp).unwrap();
        let to = (part.durable_start + rng.below(20) as i64).min(log.high_watermark());
        ctx.note(format!("delete records {tp} below {to}"));
        match log.delete_records(to) {
            Ok(start) => part.durable_start = part.durable_start.max(start),
            Err(e) => return failed(ctx, format!("delete_records {tp}: {e}")),
        }
    } else if roll < 80 {
        let Some(tp) = pick(rng) else { return Next::Go };
        ctx.note(format!("delete {tp}"));
        let part = model.parts.remove(&tp).unwrap();
        if let Err(e) = m.delete(&tp.topic, tp.partition) {
            model.maybe.insert(tp.clone(), part);
            return failed(ctx, format!("delete {tp}: {e}"));
        }
    } else if roll < 86 {
        // A batch, as a broker creates a topic's partitions: all returned or none.
        let mut batch = Vec::new();
        for _ in 0..2 + rng.below(5) {
            model.created += 1;
            let tp = TopicPartition::new(
                format!("t{}", model.created % 5),
                (model.created / 5) as i32,
            );
            if !model.parts.contains_key(&tp) && !model.maybe.contains_key(&tp) {
                batch.push((tp, PartitionConfig::default()));
            }
        }
        if batch.is_empty() {
            return Next::Go;
        }
        ctx.note(format!("create a batch of {}", batch.len()));
        match m.create_many(&batch) {
            Ok(logs) => {
                assert_eq!(logs.len(), batch.len());
                for (tp, _) in batch {
                    model.parts.insert(tp, Part::default());
                }
            }
            Err(e) => {
                for (tp, _) in batch {
                    model.maybe.insert(tp, Part::default());
                }
                return failed(ctx, format!("create a batch: {e}"));
            }
        }
    } else if roll < 92 {
        model.created += 1;
        let tp = TopicPartition::new(
            format!("t{}", model.created % 5),
            (model.created / 5) as i32,
        );
        if model.parts.contains_key(&tp) || model.maybe.contains_key(&tp) {
            return Next::Go;
        }
        ctx.note(format!("create {tp}"));
        match m.create(&tp.topic, tp.partition, PartitionConfig::default()) {
            Ok(_) => {
                model.parts.insert(tp, Part::default());
            }
            Err(e) if e.kind() == "partition_exists" => {}
            Err(e) => {
                model.maybe.insert(tp.clone(), Part::default());
                return failed(ctx, format!("create {tp}: {e}"));
            }
        }
    } else {
        return Next::Reopen;
    }
    Next::Go
}

fn one_seed(seed: u64) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut ctx = Ctx::new(seed, "crashes_around")
        .replayed_by("ONCELOG_MANAGER_CRASH_SEED", "manager_crash_sim");
    let fs = SimFs::new();
    let clock = StepClock::new();
    let mut model = Model::default();
    let mut m = Some(open(&fs, &clock).unwrap_or_else(|e| ctx.fail(format!("first open: {e}"))));
    for p in 0..3 {
        let tp = TopicPartition::new("seed", p);
        m.as_ref()
            .unwrap()
            .create(&tp.topic, p, PartitionConfig::default())
            .unwrap();
        model.parts.insert(tp, Part::default());
    }
    let cycles = 1 + rng.below(3);
    for cycle in 0..cycles {
        let cut_at = rng.chance(2, 3).then(|| 1 + rng.below(400));
        if let Some(n) = cut_at {
            fs.fail_from(OpKind::Any, n, libc::EIO);
        }
        ctx.note(format!("cycle {cycle}: power cut after {cut_at:?} ops"));
        for _ in 0..1 + rng.below(40) {
            let Some(live) = m.as_ref() else { break };
            match step(&mut rng, &mut ctx, &fs, live, &mut model) {
                Next::Go if !cut(&fs) => continue,
                Next::Go | Next::Cut => break,
                Next::Reopen => {}
            }
            ctx.note("close and reopen");
            let starts = m
                .as_ref()
                .map_or_else(Vec::new, |live| log_starts(live, &model));
            match m.take().map(LogManager::close) {
                Some(Ok(())) => {
                    checkpointed(&mut model, starts);
                    for p in model.parts.values_mut() {
                        p.durable_end = p.values.len() as i64;
                    }
                }
                Some(Err(e)) if !cut(&fs) => ctx.fail(format!("close: {e}")),
                _ => break,
            }
            match open(&fs, &clock) {
                Ok(x) if !cut(&fs) => {
                    check(&ctx, &x, &mut model, false);
                    m = Some(x);
                }
                Ok(_) => break,
                Err(_) if cut(&fs) => break,
                Err(e) => ctx.fail(format!("reopen: {e}")),
            }
        }
        // The power goes: a manager dropped without close is a crash as far as the disk is
        // concerned.
        drop(m.take());
        fs.clear_faults();
        let report = fs.crash(rng.next_u64());
        ctx.note(format!("crash: {report:?}"));
        let kafka_only = rng.chance(1, 3);
        if kafka_only {
            ctx.note("own checkpoints removed");
            forget_own_checkpoints(&fs);
        }
        let opened = match open(&fs, &clock) {
            Ok(m) => m,
            Err(e) => ctx.fail(format!("open after the crash: {e}")),
        };
        check(&ctx, &opened, &mut model, kafka_only);
        m = Some(opened);
    }
    if let Some(Err(e)) = m.map(LogManager::close) {
        ctx.fail(format!("final close: {e}"));
    }
    cycles
}

#[test]
fn crashes_around_checkpoint_writes_deletions_and_creations_lose_nothing_and_resurrect_nothing() {
    sweep_seeds(
        "ONCELOG_MANAGER_CRASH_SEED",
        "ONCELOG_MANAGER_CRASH_POINTS",
        300,
        0x3A11_0000,
        "manager crash points",
        one_seed,
    );
}
