//! Recovery under faults on the simulated file system (docs/design.md: contract 5, "Recovery on
//! open"): open is cut at every one of its file operations and must be recoverable
//! again, an open that is refused must leave the disk untouched, and a random workload into random
//! faults gets every injected error back typed, with the contract intact after the fault is gone.
//!
//! Environment:
//! * `ONCELOG_FAULT_POINTS=<n>`: faults injected by the random sweep (default 300).
//! * `ONCELOG_FAULT_SEED=<n>`: replay one seed of the random sweep (a failure prints its seed).

use crate::common_sim;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;

use common_sim::faults::{
    append_io, append_ok, errno, flush_io, flush_ok, next_batch, open_io, reopen_and_check,
    replayable, try_append, Scenario,
};
use common_sim::{dir, open, sweep_seeds, Ctx, Model, StepClock, DEDUP_WINDOW};
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::{FileSystem, IoError, OpenMode, SimFs};
use oncelog::Damage;
use oncelog::{
    AppendError, AppendInfo, AppendOutcome, FlushError, Log, LogConfig, OpenError, RecoveryMode,
};

const DEFAULT_FAULT_POINTS: u64 = 300;

/// Every file of the log directory: its live and durable bytes.
fn disk_image(fs: &SimFs) -> BTreeMap<String, (Vec<u8>, Option<Vec<u8>>)> {
    let mut names = fs.list(&dir()).expect("list");
    names.sort();
    names
        .into_iter()
        .filter(|n| n != oncelog::log::LOCK_FILE_NAME)
        .map(|n| {
            let p = dir().join(&n);
            let live = fs.read_live(&p).expect("read live");
            (n, (live, fs.read_durable(&p)))
        })
        .collect()
}

#[test]
fn a_failed_open_changes_nothing_on_disk() {
    const TEST: &str = "a_failed_open_changes_nothing_on_disk";
    for seed in 0..6 {
        replayable(seed, TEST, || failed_open_changes_nothing(seed));
    }
}

fn failed_open_changes_nothing(seed: u64) {
    let Scenario {
        ctx,
        mut rng,
        fs,
        clock,
        cfg,
        log,
        mut model,
    } = Scenario::empty(seed, "failed_open_changes_nothing");
    let log = log.expect("log");
    let mut placed = Vec::new();
    while log.maintenance().segment_count() < 4 {
        let info = append_ok(&ctx, &log, &mut model, &mut rng);
        placed.push(info);
        if rng.chance(1, 3) {
            flush_ok(&ctx, &log, &mut model);
        }
    }
    flush_ok(&ctx, &log, &mut model);
    log.abandon();
    // Even seeds: damage in the last segment, which an unclean open validates. Odd seeds: no
    // checkpoint (as in a Kafka directory), so every segment is validated; damage anywhere.
    let victims: Vec<&AppendInfo> = if seed.is_multiple_of(2) {
        let last = placed.last().map_or(0, |i| i.segment_base_offset);
        placed
            .iter()
            .filter(|i| i.segment_base_offset == last)
            .collect()
    } else {
        fs.remove_file(&dir().join("oncelog.checkpoint"))
            .expect("remove checkpoint");
        fs.sync_dir(&dir()).expect("sync dir");
        placed.iter().collect()
    };
    let victim = victims[rng.below(victims.len() as u64) as usize];
    // A flipped byte in the records: the CRC no longer matches. Durable, on the platter.
    let size = model
        .batches
        .iter()
        .find(|b| b.first == victim.first_offset)
        .map_or(0, |b| b.bytes.len());
    let at = victim.position as u64 + 61 + rng.below(size as u64 - 61);
    let path = dir().join(format!("{:020}.log", victim.segment_base_offset));
    {
        let f = fs.open(&path, OpenMode::ReadWrite).expect("open segment");
        let mut byte = [0u8];
        f.read_at(&mut byte, at).expect("read");
        f.write_all_at(&[byte[0] ^ 0x5A], at).expect("write");
        f.sync_data().expect("sync");
    }
    let before = disk_image(&fs);
    let ops = fs.counters().ops;
    let strict = cfg
        .clone()
        .into_builder()
        .recovery_mode(RecoveryMode::AbsoluteConsistency)
        .build()
        .unwrap();
    match open(&fs, &clock, &strict) {
        Err(OpenError::Refused {
            path: p,
            position: Some(position),
            damage: Damage::Invalid(_),
            mode: RecoveryMode::AbsoluteConsistency,
        }) if p == path && position == victim.position as usize => {}
        Err(e) => ctx.fail(format!(
            "expected Corrupt at {} byte {}, got {e:?}",
            path.display(),
            victim.position
        )),
        Ok(_) => ctx.fail("a damaged durable segment was accepted"),
    }
    if fs.counters().ops == ops {
        ctx.fail("the refused open did not even look");
    }
    let after = disk_image(&fs);
    if before != after {
        let changed: Vec<&String> = before
            .keys()
            .chain(after.keys())
            .filter(|n| before.get(*n) != after.get(*n))
            .collect();
        ctx.fail(format!("the refused open changed {changed:?}"));
    }
    if seed.is_multiple_of(2) {
        // The default mode refuses damage below the recorded recovery point (durable data) and
        // cuts damage at or after it (a tail that was never promised), saying so.
        let recovery_point = oncelog::log::checkpoint::read(&fs, &dir())
            .expect("checkpoint readable")
            .expect("valid checkpoint")
            .expect("checkpoint written by the flushes")
            .recovery_point;
        let opened = open(&fs, &clock, &cfg);
        if victim.first_offset < recovery_point {
            match opened {
                Err(OpenError::Refused { path: p, position: Some(position), mode: RecoveryMode::TolerateTailCorruption, .. })
                    if p == path && position == victim.position as usize => {}
                other => ctx.fail(format!(
                    "damage at offset {} below the recovery point {recovery_point}: expected a refusal, got {:?}",
                    victim.first_offset,
                    other.map(|l| l.log_end_offset())
                )),
            }
            if disk_image(&fs) != before {
                ctx.fail("the refused default-mode open changed files");
            }
            return;
        }
        let log = opened.unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
        let cut: Vec<(PathBuf, usize)> = log
            .recovery_report()
            .truncations
            .iter()
            .map(|t| (t.path.clone(), t.position))
            .collect();
        if cut != [(path, victim.position as usize)] {
            ctx.fail(format!("the tail was cut at {cut:?}"));
        }
        if log.log_end_offset() != victim.first_offset {
            ctx.fail(format!("the log ends at {}", log.log_end_offset()));
        }
        log.abandon();
    }
}

/// A directory a power cut left unclean: flushed batches, then unflushed ones across two rolls
/// (sealed segments past the recovery point to validate and re-index, a torn tail to cut).
fn unclean_directory(seed: u64) -> Scenario {
    let mut s = Scenario::new(seed, 30, 30);
    let segments = s.log().maintenance().segment_count();
    while s.log().maintenance().segment_count() < segments + 2 {
        s.append();
    }
    s.append();
    s.append();
    s.log.take().expect("log").abandon();
    s.fs.crash(seed);
    s
}

#[test]
fn crash_during_recovery_is_recovered_again() {
    const TEST: &str = "crash_during_recovery_is_recovered_again";
    // Crash seeds whose recovery has a tail to cut and segments to re-index.
    let seeds: Vec<u64> = (0..64)
        .filter(|&seed| {
            let s = unclean_directory(seed);
            let log = open(&s.fs, &s.clock, &s.cfg).expect("open");
            let r = log.recovery_report().clone();
            log.abandon();
            !r.truncations.is_empty() && r.indexes_rebuilt.len() >= 2
        })
        .take(3)
        .collect();
    assert!(seeds.len() >= 2, "no crash left a torn tail: {seeds:?}");
    let mut points = 0;
    for seed in seeds {
        replayable(seed, TEST, || points += recovery_cut_everywhere(seed));
    }
    eprintln!("{points} cuts of Log::open");
}

/// Counts the file operations of one open of `unclean_directory(seed)`, then for each of them
/// fails it (once, or from then on: a power cut), crashes, and opens again. Returns the cuts.
fn recovery_cut_everywhere(seed: u64) -> u64 {
    let s = unclean_directory(seed);
    let before = s.fs.counters().ops;
    let log = open(&s.fs, &s.clock, &s.cfg).unwrap_or_else(|e| s.ctx.fail(format!("open: {e}")));
    let ops = s.fs.counters().ops - before;
    log.abandon();
    let mut points = 0;
    for nth in 1..=ops {
        for power_cut in [false, true] {
            let mut s = unclean_directory(seed);
            s.ctx.note(format!(
                "open cut at op {nth} of {ops}, power cut {power_cut}"
            ));
            if power_cut {
                s.fs.fail_from(OpKind::Any, nth, libc::EIO);
            } else {
                s.fs.fail_next(OpKind::Any, nth, libc::EIO);
            }
            match open(&s.fs, &s.clock, &s.cfg) {
                Ok(log) => {
                    // Only a fault the open could work around (a failed read of an index it
                    // then rebuilds) may let it succeed; what it opened must be right.
                    s.fs.clear_faults();
                    s.model.check_recovered(&s.ctx, &log);
                    log.abandon();
                }
                Err(e) => match open_io(&e) {
                    Some(io) if errno(io) == Some(libc::EIO) => {}
                    _ => s.ctx.fail(format!("open cut at op {nth} answered {e:?}")),
                },
            }
            s.fs.clear_faults();
            s.fs.crash(seed ^ (nth << 8) ^ power_cut as u64);
            let log = reopen_and_check(&s.ctx, &s.fs, &s.clock, &s.cfg, &mut s.model);
            log.abandon();
            points += 1;
        }
    }
    points
}

/// Every kind of operation the simulator can fail.
const FAULT_KINDS: [OpKind; 16] = [
    OpKind::Any,
    OpKind::CreateDir,
    OpKind::List,
    OpKind::Exists,
    OpKind::Open,
    OpKind::Rename,
    OpKind::Remove,
    OpKind::SyncDir,
    OpKind::Len,
    OpKind::SetLen,
    OpKind::Allocate,
    OpKind::Read,
    OpKind::Write,
    OpKind::SyncData,
    OpKind::Map,
    OpKind::Msync,
];

/// One injected fault of the random sweep.
#[derive(Debug, Clone, Copy)]
struct Fault {
    kind: OpKind,
    errno: i32,
}

impl Fault {
    /// The injected errno must come back inside a typed I/O error (not as corruption, not as a
    /// string), and an out-of-space errno must be recognised as such.
    fn check(&self, ctx: &Ctx, fs: &SimFs, fired_before: u64, what: &str, io: Option<&IoError>) {
        if fs.counters().injected_failures == fired_before {
            ctx.fail(format!("{what} failed before the fault {self:?} fired"));
        }
        let Some(io) = io else {
            ctx.fail(format!("{what}: the fault {self:?} came back untyped"));
        };
        if errno(io) != Some(self.errno) {
            ctx.fail(format!("{what}: {io} does not carry errno {}", self.errno));
        }
        if io.is_out_of_space() != (self.errno == libc::ENOSPC) {
            ctx.fail(format!("{what}: {io}: is_out_of_space is wrong"));
        }
    }
}

/// What a log is good for after a step.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Health {
    Writable,
    /// A failed fsync (or a failed seal at roll): appends refused until reopened.
    ReadOnly,
    /// `close` failed, or a reopen failed: there is no usable log.
    Closed,
}

#[test]
fn every_io_error_in_a_random_workload_is_typed() {
    const TEST: &str = "every_io_error_in_a_random_workload_is_typed";
    sweep_seeds(
        "ONCELOG_FAULT_SEED",
        "ONCELOG_FAULT_POINTS",
        DEFAULT_FAULT_POINTS,
        0,
        "injected faults",
        |seed| replayable(seed, TEST, || fault_cycles(seed)),
    );
}

/// Up to three cycles on one simulated disk: inject a random fault, run a random workload
/// into it, remove the fault, check that a writable log resumes, then close or crash, reopen
/// and check the contract. Returns the faults that fired.
fn fault_cycles(seed: u64) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut ctx = Ctx::new(seed, "every_io_error_in_a_random_workload_is_typed");
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = common_sim::config(&mut rng);
    ctx.note(format!("{cfg:?}"));
    let mut model = Model::default();
    let mut log = Some(open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}"))));
    let mut fired = 0;
    for cycle in 0..1 + rng.below(3) {
        let fault = Fault {
            kind: FAULT_KINDS[rng.below(FAULT_KINDS.len() as u64) as usize],
            errno: if rng.chance(1, 2) {
                libc::EIO
            } else {
                libc::ENOSPC
            },
        };
        let nth = 1 + rng.below(30);
        let sticky = rng.chance(1, 3);
        ctx.note(format!(
            "cycle {cycle}: {fault:?} at op {nth}, sticky {sticky}"
        ));
        let fired_before = fs.counters().injected_failures;
        if sticky {
            fs.fail_from(fault.kind, nth, fault.errno);
        } else {
            fs.fail_next(fault.kind, nth, fault.errno);
        }
        let mut health = Health::Writable;
        for _ in 0..1 + rng.below(40) {
            let Some(l) = log.as_ref() else { break };
            health = fault_step(
                &mut rng,
                &mut ctx,
                &fs,
                &clock,
                &cfg,
                l,
                &mut model,
                fault,
                fired_before,
            );
            match health {
                Health::Writable => {}
                Health::ReadOnly => break,
                Health::Closed => {
                    // Closed by a failed close (or replaced by a reopen that failed).
                    log = None;
                    break;
                }
            }
            if let Some(reopened) = reopen_step(
                &mut rng,
                &mut ctx,
                &fs,
                &clock,
                &cfg,
                &mut log,
                &mut model,
                fault,
                fired_before,
            ) {
                health = reopened;
                if health == Health::Closed {
                    break;
                }
            }
        }
        fs.clear_faults();
        if fs.counters().injected_failures > fired_before {
            fired += 1;
        }
        let crash = rng.chance(1, 2);
        ctx.note(format!("fault removed; log {health:?}; crash {crash}"));
        let Some(l) = log.take() else {
            if crash {
                fs.crash(rng.next_u64());
            }
            log = Some(reopen_and_check(&ctx, &fs, &clock, &cfg, &mut model));
            continue;
        };
        match health {
            Health::Writable => {
                // The cause is gone: appends and flushes work again, without a reopen.
                for _ in 0..1 + rng.below(5) {
                    append_ok(&ctx, &l, &mut model, &mut rng);
                }
                flush_ok(&ctx, &l, &mut model);
                if !crash {
                    if let Err(e) = l.close() {
                        ctx.fail(format!("close after the fault was gone: {e}"));
                    }
                }
            }
            Health::ReadOnly => {
                let b = next_batch(&model, &mut rng);
                match try_append(&ctx, &l, &mut model, &b) {
                    Err(AppendError::ReadOnly { .. }) => {}
                    other => ctx.fail(format!("a read-only log took an append: {other:?}")),
                }
            }
            Health::Closed => unreachable!("a closed log is dropped"),
        }
        if crash {
            l.abandon();
            fs.crash(rng.next_u64());
        } else {
            drop(l);
        }
        log = Some(reopen_and_check(&ctx, &fs, &clock, &cfg, &mut model));
    }
    if let Some(l) = log {
        l.abandon();
    }
    fired
}

/// One random operation while the fault may fire: an append, a flush, or a retry.
#[allow(clippy::too_many_arguments)]
fn fault_step(
    rng: &mut SplitMix64,
    ctx: &mut Ctx,
    fs: &SimFs,
    _clock: &Arc<StepClock>,
    _cfg: &LogConfig,
    log: &Log,
    model: &mut Model,
    fault: Fault,
    fired_before: u64,
) -> Health {
    let roll = rng.below(100);
    if roll < 70 {
        let b = next_batch(model, rng);
        match try_append(ctx, log, model, &b) {
            Ok(info) => {
                ctx.note(format!(
                    "append {}..={}",
                    info.first_offset, info.last_offset
                ));
                Health::Writable
            }
            Err(e) => {
                ctx.note(format!("append: {e}"));
                fault.check(ctx, fs, fired_before, "append", append_io(&e));
                match e {
                    AppendError::ReadOnly { .. } => Health::ReadOnly,
                    _ => Health::Writable,
                }
            }
        }
    } else if roll < 88 {
        match log.flush() {
            Ok(()) => {
                ctx.note("flush");
                model.durable_end = model.end();
                Health::Writable
            }
            Err(e) => {
                ctx.note(format!("flush: {e}"));
                fault.check(ctx, fs, fired_before, "flush", flush_io(&e));
                match e {
                    FlushError::ReadOnly { .. } => Health::ReadOnly,
                    _ => Health::Writable,
                }
            }
        }
    } else {
        // A retry never touches the disk (FlushPolicy::Manual), fault or not.
        let pids: Vec<i64> = model.next_sequences().keys().copied().collect();
        if let Some(&pid) = pids.get(rng.below(pids.len() as u64) as usize) {
            let window = model.window(pid, DEDUP_WINDOW);
            let b = window[rng.below(window.len() as u64) as usize];
            match log.append(&b.client) {
                Ok(AppendOutcome::Duplicate(d))
                    if d.first_offset == b.first && d.last_offset == b.last => {}
                other => ctx.fail(format!(
                    "retry of {}..={} answered {other:?}, expected Duplicate",
                    b.first, b.last
                )),
            }
        }
        Health::Writable
    }
}

/// Now and then, a clean close and reopen while the fault may fire. `None` when not taken.
#[allow(clippy::too_many_arguments)]
fn reopen_step(
    rng: &mut SplitMix64,
    ctx: &mut Ctx,
    fs: &SimFs,
    clock: &Arc<StepClock>,
    cfg: &LogConfig,
    log: &mut Option<Log>,
    model: &mut Model,
    fault: Fault,
    fired_before: u64,
) -> Option<Health> {
    if !rng.chance(1, 12) {
        return None;
    }
    let l = log.take()?;
    match l.close() {
        Ok(()) => {
            ctx.note("close");
            model.durable_end = model.end();
        }
        Err(e) => {
            ctx.note(format!("close: {e}"));
            fault.check(ctx, fs, fired_before, "close", flush_io(&e));
            return Some(Health::Closed);
        }
    }
    drop(l);
    match open(fs, clock, cfg) {
        Ok(l) => {
            ctx.note("reopen");
            // A sealed segment is mapped when it is first read, so the fault can fail a read
            // too: typed, and the log goes on (the close made everything durable already).
            if let Err(e) = model.try_check_recovered(ctx, &l) {
                let oncelog::ReadError::Io(io) = &e else {
                    ctx.fail(format!("read after reopen: {e}"));
                };
                ctx.note(format!("read: {e}"));
                fault.check(ctx, fs, fired_before, "read", Some(io));
            }
            *log = Some(l);
            Some(Health::Writable)
        }
        Err(e) => {
            ctx.note(format!("reopen: {e}"));
            fault.check(ctx, fs, fired_before, "open", open_io(&e));
            Some(Health::Closed)
        }
    }
}
