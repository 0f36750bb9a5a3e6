//! Full disks and failing I/O on the simulated file system (DESIGN.md §2.5, §5, §7; issue 4
//! item 6): every injected error comes back as a typed error (never a panic), nothing
//! acknowledged is lost, the log stays usable (read-only after a failed fsync) and resumes, or
//! reopens, once the cause is gone. Open itself is cut at every one of its file operations and
//! must be recoverable again, and an open that is refused must leave the disk untouched.
//!
//! Environment:
//! * `ONCELOG_FAULT_POINTS=<n>`: faults injected by the random sweep (default 300).
//! * `ONCELOG_FAULT_SEED=<n>`: replay one seed of the random sweep (a failure prints its seed).

mod common_sim;

use std::collections::BTreeMap;
use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::path::PathBuf;
use std::sync::Arc;

use common_sim::{client_batch, dir, open, Ctx, Model, ProducerSeq, StepClock};
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::{FileSystem, IoError, OpenMode, SimFs};
use oncelog::log::Damage;
use oncelog::segment::OpenSegmentError;
use oncelog::{
    AppendError, AppendInfo, AppendOutcome, FlushError, Log, LogConfig, OpenError, RecoveryMode,
};

/// Kafka's (and oncelog's default) producer dedup window.
const DEDUP_WINDOW: usize = 5;
const DEFAULT_FAULT_POINTS: u64 = 300;

fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

/// `common_sim::Ctx` prints crash_sim's replay command; this prints the one of this file.
fn replayable<T>(seed: u64, test: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(panic) => {
            eprintln!(
                "fault_injection: seed {seed} failed; replay with \
                 ONCELOG_FAULT_SEED={seed} cargo test --test fault_injection {test} -- --nocapture"
            );
            resume_unwind(panic)
        }
    }
}

/// Small segments and indexes, so a few dozen batches roll several times.
fn small_config() -> LogConfig {
    LogConfig {
        segment_bytes: 16 * 1024,
        segment_index_bytes: 1024,
        index_interval_bytes: 1024,
        ..LogConfig::default()
    }
}

/// A client batch not yet appended, kept to be sent again.
#[derive(Debug, Clone)]
struct Next {
    client: Vec<u8>,
    producer: Option<ProducerSeq>,
    records: i32,
}

/// A random batch continuing the model's producers (three of them, plus non-idempotent ones).
fn next_batch(model: &Model, rng: &mut SplitMix64) -> Next {
    let records = 1 + rng.below(8) as usize;
    let value_len = 40 + rng.below(300) as usize;
    let producer = rng.chance(3, 4).then(|| {
        let producer_id = 1 + rng.below(3) as i64;
        let base_sequence = model
            .next_sequences()
            .get(&producer_id)
            .copied()
            .unwrap_or(0);
        ProducerSeq {
            producer_id,
            epoch: 0,
            base_sequence,
        }
    });
    let fill = rng.below(256) as u8;
    Next {
        client: client_batch(records, value_len, 1_700_000_000_000, producer, fill),
        producer,
        records: records as i32,
    }
}

/// Appends `b`; on success records it in the model (reading it back), on failure checks that
/// nothing moved.
fn try_append(
    ctx: &Ctx,
    log: &Log,
    model: &mut Model,
    b: &Next,
) -> Result<AppendInfo, AppendError> {
    let end = log.log_end_offset();
    match log.append(&b.client) {
        Ok(AppendOutcome::Appended(info)) => {
            model.appended(
                ctx,
                log,
                info.first_offset,
                info.last_offset,
                b.client.clone(),
                b.producer,
                b.records,
            );
            Ok(info)
        }
        Ok(other) => ctx.fail(format!("a new batch answered {other:?}")),
        Err(e) => {
            if log.log_end_offset() != end {
                ctx.fail(format!(
                    "a failed append ({e}) moved the log end from {end} to {}",
                    log.log_end_offset()
                ));
            }
            Err(e)
        }
    }
}

fn append_ok(ctx: &Ctx, log: &Log, model: &mut Model, rng: &mut SplitMix64) -> AppendInfo {
    let b = next_batch(model, rng);
    try_append(ctx, log, model, &b).unwrap_or_else(|e| ctx.fail(format!("append: {e}")))
}

fn flush_ok(ctx: &Ctx, log: &Log, model: &mut Model) {
    if let Err(e) = log.flush() {
        ctx.fail(format!("flush: {e}"));
    }
    model.durable_end = model.end();
}

/// Checks a live log holds every batch the model has, readable and whole.
fn check_live(ctx: &Ctx, log: &Log, model: &mut Model) {
    if log.log_end_offset() != model.end() {
        ctx.fail(format!(
            "the log ends at {}, but batches up to {} were appended",
            log.log_end_offset(),
            model.end()
        ));
    }
    // `check_recovered` counts what it found as durable; a live log's tail is not.
    let durable = model.durable_end;
    model.check_recovered(ctx, log);
    model.durable_end = durable;
}

/// Every batch still in its producer's window must come back as a duplicate with its offsets.
fn retry_window(ctx: &Ctx, log: &Log, model: &Model) {
    for pid in model.next_sequences().keys() {
        for b in model.window(*pid, DEDUP_WINDOW) {
            let end = log.log_end_offset();
            match log.append(&b.client) {
                Ok(AppendOutcome::Duplicate(d))
                    if d.first_offset == b.first && d.last_offset == b.last => {}
                other => ctx.fail(format!(
                    "retry of the batch at {}..={} answered {other:?}, expected Duplicate",
                    b.first, b.last
                )),
            }
            if log.log_end_offset() != end {
                ctx.fail("a duplicate was written");
            }
        }
    }
}

/// Opens the log after a crash or a failure and checks it against the model (DESIGN.md §2):
/// every durable batch exactly once at its offsets, dense, retries still duplicates.
fn reopen_and_check(
    ctx: &Ctx,
    fs: &SimFs,
    clock: &Arc<StepClock>,
    cfg: &LogConfig,
    model: &mut Model,
) -> Log {
    let log = open(fs, clock, cfg).unwrap_or_else(|e| {
        ctx.fail(format!(
            "open after the fault was gone: {e}\n{}",
            common_sim::describe_dir(fs)
        ))
    });
    model.check_recovered(ctx, &log);
    retry_window(ctx, &log, model);
    log
}

fn errno(e: &IoError) -> Option<i32> {
    e.source.raw_os_error()
}

#[test]
fn full_disk_at_roll_returns_error_and_appends_resume_after_space_returns() {
    const TEST: &str = "full_disk_at_roll_returns_error_and_appends_resume_after_space_returns";
    let mut failed_on = BTreeMap::<String, u32>::new();
    for seed in 0..12 {
        replayable(seed, TEST, || {
            let what = full_disk_at_roll(seed);
            *failed_on.entry(what).or_default() += 1;
        });
    }
    // The slack varies where the roll runs out: the snapshot temp file or a segment file.
    assert!(
        failed_on.len() >= 2,
        "the disk always filled at {failed_on:?}"
    );
}

/// One full-disk run; returns the kind of file whose growth failed.
fn full_disk_at_roll(seed: u64) -> String {
    let ctx = Ctx::new(seed, "full_disk_at_roll");
    let mut rng = SplitMix64::new(seed);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = small_config();
    let mut model = Model::default();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
    // Room for about two more segments: one of the next rolls cannot get its space.
    let segment_room = (cfg.segment_bytes + 2 * cfg.segment_index_bytes + 512) as u64;
    fs.set_capacity(Some(
        fs.used_bytes() + 2 * segment_room + rng.below(segment_room),
    ));
    let mut appended = 0;
    let (pending, err) = loop {
        let b = next_batch(&model, &mut rng);
        let segments = log.segment_count();
        match try_append(&ctx, &log, &mut model, &b) {
            Ok(_) => {}
            Err(e) => {
                if log.segment_count() != segments {
                    ctx.fail(format!("a failed roll ({e}) changed the segments"));
                }
                break (b, e);
            }
        }
        appended += 1;
        if appended % 4 == 0 {
            flush_ok(&ctx, &log, &mut model);
        }
        if appended > 1000 {
            ctx.fail("the disk never filled");
        }
    };
    let AppendError::Io(io) = &err else {
        ctx.fail(format!(
            "a full disk answered {err:?}, expected AppendError::Io"
        ));
    };
    if !io.is_out_of_space() || err.kind() != "io" {
        ctx.fail(format!("not an out-of-space error: {err}"));
    }
    // The roll failed: what ran out is a file of the next segment, or its snapshot.
    let name = io
        .path
        .file_name()
        .map(|n| n.to_string_lossy().into_owned());
    let prefix = format!("{:020}.", model.end());
    let Some(name) = name.filter(|n| n.starts_with(&prefix)) else {
        ctx.fail(format!(
            "the error names {}, not a file at {prefix}",
            io.path.display()
        ));
    };
    let what = name[prefix.len()..].to_string();

    // Still full: the same append fails again, with nothing written; reads and flushes work.
    match try_append(&ctx, &log, &mut model, &pending) {
        Err(AppendError::Io(e)) if e.is_out_of_space() => {}
        other => ctx.fail(format!(
            "a second append on the full disk answered {other:?}"
        )),
    }
    check_live(&ctx, &log, &mut model);
    flush_ok(&ctx, &log, &mut model);

    if seed % 2 == 1 {
        // Closing on the full disk: close may fail (its snapshot needs space) but only with a
        // typed error; a reopen that cannot preallocate its segment is refused, typed.
        match log.close() {
            Ok(()) => {}
            Err(FlushError::Io(e)) if e.is_out_of_space() => {}
            Err(e) => ctx.fail(format!("close on a full disk: {e:?}")),
        }
        drop(log);
        match open(&fs, &clock, &cfg) {
            Ok(l) => l.abandon(),
            Err(OpenError::Io(e) | OpenError::Segment(OpenSegmentError::Io(e)))
                if e.is_out_of_space() => {}
            Err(e) => ctx.fail(format!("open on a full disk: {e:?}")),
        }
        fs.set_capacity(None);
        let log = reopen_and_check(&ctx, &fs, &clock, &cfg, &mut model);
        if log.log_end_offset() != model.end() {
            ctx.fail("the reopened log lost appended batches (no crash happened)");
        }
        try_append(&ctx, &log, &mut model, &pending)
            .unwrap_or_else(|e| ctx.fail(format!("append after space returned: {e}")));
        flush_ok(&ctx, &log, &mut model);
        log.abandon();
    } else {
        // Space returns: the very same append succeeds at the next offset.
        fs.set_capacity(None);
        let expected = model.end();
        let info = try_append(&ctx, &log, &mut model, &pending)
            .unwrap_or_else(|e| ctx.fail(format!("append after space returned: {e}")));
        if info.first_offset != expected {
            ctx.fail(format!("resumed at {}, not {expected}", info.first_offset));
        }
        for _ in 0..30 {
            append_ok(&ctx, &log, &mut model, &mut rng);
        }
        flush_ok(&ctx, &log, &mut model);
        retry_window(&ctx, &log, &model);
        if let Err(e) = log.close() {
            ctx.fail(format!("close: {e}"));
        }
        drop(log);
        let log = reopen_and_check(&ctx, &fs, &clock, &cfg, &mut model);
        if !log.recovery_report().clean_shutdown {
            ctx.fail("the clean close was not seen");
        }
        for _ in 0..10 {
            append_ok(&ctx, &log, &mut model, &mut rng);
        }
        flush_ok(&ctx, &log, &mut model);
        log.abandon();
    }
    // And after a power cut: everything flushed is there.
    fs.crash(rng.next_u64());
    let log = reopen_and_check(&ctx, &fs, &clock, &cfg, &mut model);
    log.abandon();
    what
}

#[test]
fn failed_fsync_makes_the_log_read_only() {
    const TEST: &str = "failed_fsync_makes_the_log_read_only";
    let (mut read_only, mut checkpoint_only) = (0, 0);
    // The nth fsync of a flush that seals a rolled segment and finishes its snapshot.
    for nth in 1.. {
        let mut fired = false;
        for crash in [false, true] {
            let seed = nth * 2 + crash as u64;
            replayable(seed, TEST, || match failed_fsync(seed, nth, crash) {
                Fsync::NotReached => {}
                Fsync::ReadOnly => {
                    fired = true;
                    read_only += 1;
                }
                Fsync::CheckpointOnly => {
                    fired = true;
                    checkpoint_only += 1;
                }
            });
        }
        if !fired {
            break;
        }
    }
    assert!(
        read_only >= 8,
        "only {read_only} fsync failures made the log read-only"
    );
    eprintln!("{read_only} read-only, {checkpoint_only} checkpoint fsync failures");
}

enum Fsync {
    /// The flush had fewer fsyncs than `nth`.
    NotReached,
    ReadOnly,
    /// The checkpoint's temp file failed its fsync after the data was durable.
    CheckpointOnly,
}

fn failed_fsync(seed: u64, nth: u64, crash: bool) -> Fsync {
    let ctx = Ctx::new(seed, "failed_fsync");
    let mut rng = SplitMix64::new(seed);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = small_config();
    let mut model = Model::default();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
    for _ in 0..12 {
        append_ok(&ctx, &log, &mut model, &mut rng);
    }
    flush_ok(&ctx, &log, &mut model);
    // Unflushed appends across a roll: the next flush has everything to do.
    let segments = log.segment_count();
    while log.segment_count() < segments + 1 {
        append_ok(&ctx, &log, &mut model, &mut rng);
    }
    append_ok(&ctx, &log, &mut model, &mut rng);

    let before = fs.counters().injected_failures;
    fs.fail_next(OpKind::SyncData, nth, libc::EIO);
    let result = log.flush();
    fs.clear_faults();
    if fs.counters().injected_failures == before {
        if let Err(e) = result {
            ctx.fail(format!("flush without a fault: {e}"));
        }
        log.abandon();
        return Fsync::NotReached;
    }
    let outcome = match result {
        Ok(()) => ctx.fail(format!("fsync {nth} failed, but the flush succeeded")),
        Err(FlushError::ReadOnly { cause }) => {
            if errno(&cause) != Some(libc::EIO) {
                ctx.fail(format!("the cause lost its errno: {cause}"));
            }
            let b = next_batch(&model, &mut rng);
            match try_append(&ctx, &log, &mut model, &b) {
                Err(e @ AppendError::ReadOnly { .. }) if e.kind() == "read_only" => {}
                other => ctx.fail(format!("append after a failed fsync answered {other:?}")),
            }
            match log.flush() {
                Err(FlushError::ReadOnly { .. }) => {}
                other => ctx.fail(format!("flush after a failed fsync answered {other:?}")),
            }
            Fsync::ReadOnly
        }
        // The checkpoint is written after the data and indexes are durable; its temp file
        // failing to sync loses nothing (it is rewritten whole next time), so the log goes on.
        Err(FlushError::Io(e)) if e.path.ends_with("oncelog.checkpoint.tmp") => {
            model.durable_end = model.end();
            append_ok(&ctx, &log, &mut model, &mut rng);
            Fsync::CheckpointOnly
        }
        Err(e) => ctx.fail(format!("a failed fsync answered {e:?}")),
    };
    // Reads still work, and see every batch (flushed or not).
    check_live(&ctx, &log, &mut model);
    if crash {
        log.abandon();
        fs.crash(rng.next_u64());
    } else {
        // Dropping it tries to close, which must fail quietly (the log is read-only).
        drop(log);
    }
    let log = reopen_and_check(&ctx, &fs, &clock, &cfg, &mut model);
    append_ok(&ctx, &log, &mut model, &mut rng);
    flush_ok(&ctx, &log, &mut model);
    log.abandon();
    outcome
}

/// Every file of the log directory: its live and durable bytes.
fn disk_image(fs: &SimFs) -> BTreeMap<String, (Vec<u8>, Option<Vec<u8>>)> {
    let mut names = fs.list(&dir()).expect("list");
    names.sort();
    names
        .into_iter()
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
    let ctx = Ctx::new(seed, "failed_open_changes_nothing");
    let mut rng = SplitMix64::new(seed);
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = small_config();
    let mut model = Model::default();
    let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
    let mut placed = Vec::new();
    while log.segment_count() < 4 {
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
    let victims: Vec<&AppendInfo> = if seed % 2 == 0 {
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
    let strict = LogConfig {
        recovery_mode: RecoveryMode::AbsoluteConsistency,
        ..cfg.clone()
    };
    match open(&fs, &clock, &strict) {
        Err(OpenError::Corrupt {
            path: p,
            position,
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
    if seed % 2 == 0 {
        // The default mode refuses damage below the recorded recovery point (durable data) and
        // cuts damage at or after it (a tail that was never promised), saying so.
        let checkpoint = oncelog::io::read_file(&fs, &dir().join("oncelog.checkpoint"))
            .expect("checkpoint written by the flushes");
        let recovery_point =
            oncelog::log::checkpoint::decode(&String::from_utf8_lossy(&checkpoint))
                .expect("valid checkpoint")
                .recovery_point;
        let opened = open(&fs, &clock, &cfg);
        if victim.first_offset < recovery_point {
            match opened {
                Err(OpenError::Corrupt { path: p, position, mode: RecoveryMode::TolerateTailCorruption, .. })
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

/// A log on a fresh simulated disk, built deterministically from a seed.
struct Scenario {
    ctx: Ctx,
    rng: SplitMix64,
    fs: SimFs,
    clock: Arc<StepClock>,
    cfg: LogConfig,
    log: Option<Log>,
    model: Model,
}

impl Scenario {
    /// `batches` appended; after each third of the first `flush_below` a flush.
    fn new(seed: u64, batches: usize, flush_below: usize) -> Scenario {
        let ctx = Ctx::new(seed, "scenario");
        let fs = SimFs::new();
        let clock = StepClock::new();
        let cfg = small_config();
        let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
        let mut s = Scenario {
            ctx,
            rng: SplitMix64::new(seed),
            fs,
            clock,
            cfg,
            log: Some(log),
            model: Model::default(),
        };
        for i in 0..batches {
            s.append();
            if i % 3 == 2 && i < flush_below {
                s.flush();
            }
        }
        s
    }

    fn log(&self) -> &Log {
        self.log.as_ref().expect("log")
    }

    fn append(&mut self) -> AppendInfo {
        let log = self.log.as_ref().expect("log");
        append_ok(&self.ctx, log, &mut self.model, &mut self.rng)
    }

    fn flush(&mut self) {
        let log = self.log.as_ref().expect("log");
        flush_ok(&self.ctx, log, &mut self.model);
    }

    /// Batches before the one that makes the second roll (for the same seed).
    fn batches_before_second_roll(seed: u64) -> usize {
        let mut s = Scenario::new(seed, 0, 0);
        for n in 0..1000 {
            s.append();
            if n % 3 == 2 {
                s.flush();
            }
            if s.log().segment_count() == 3 {
                s.log.take().expect("log").abandon();
                return n;
            }
        }
        s.ctx.fail("the log never rolled twice")
    }

    /// After the fault is gone: a log that stayed writable takes `retry` (or a new batch) at the
    /// next offset and closes cleanly; any log reopens with every acknowledged batch. With
    /// `crash` the power is cut first instead.
    fn resume(mut self, writable: bool, retry: Option<Next>, crash: bool) {
        self.fs.clear_faults();
        self.fs.set_capacity(None);
        let log = self.log.take().expect("log");
        if crash {
            log.abandon();
            self.fs.crash(self.rng.next_u64());
        } else if writable {
            let b = retry.unwrap_or_else(|| next_batch(&self.model, &mut self.rng));
            let expected = self.model.end();
            match try_append(&self.ctx, &log, &mut self.model, &b) {
                Ok(info) if info.first_offset == expected => {}
                other => self.ctx.fail(format!(
                    "append after the fault was gone answered {other:?}, expected offset {expected}"
                )),
            }
            flush_ok(&self.ctx, &log, &mut self.model);
            if let Err(e) = log.close() {
                self.ctx
                    .fail(format!("close after the fault was gone: {e}"));
            }
        } else {
            drop(log);
        }
        let log = reopen_and_check(&self.ctx, &self.fs, &self.clock, &self.cfg, &mut self.model);
        append_ok(&self.ctx, &log, &mut self.model, &mut self.rng);
        flush_ok(&self.ctx, &log, &mut self.model);
        log.abandon();
    }
}

/// The I/O error inside an append error, if it is one.
fn append_io(e: &AppendError) -> Option<&IoError> {
    match e {
        AppendError::Io(e) => Some(e),
        AppendError::ReadOnly { cause } => Some(cause),
        _ => None,
    }
}

fn flush_io(e: &FlushError) -> Option<&IoError> {
    match e {
        FlushError::Io(e) => Some(e),
        FlushError::ReadOnly { cause } => Some(cause),
        FlushError::Closed => None,
    }
}

fn open_io(e: &OpenError) -> Option<&IoError> {
    match e {
        OpenError::Io(e) | OpenError::Segment(OpenSegmentError::Io(e)) => Some(e),
        _ => None,
    }
}

/// `00000000000000000254.snapshot.tmp` → `snapshot.tmp`, `oncelog.checkpoint.tmp` →
/// `checkpoint.tmp`.
fn file_kind(e: &IoError) -> String {
    let name = e
        .path
        .file_name()
        .map_or(String::new(), |n| n.to_string_lossy().into_owned());
    match name.split_once('.') {
        Some((_, rest)) => rest.to_string(),
        None => name,
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// The append that rolls: the snapshot at the new base goes to its temp file.
    Roll,
    /// The flush after the roll: sealed segment, snapshot finished, checkpoint.
    Flush,
    /// Close: last snapshot and the clean checkpoint.
    Close,
}

#[test]
fn enospc_on_snapshot_or_checkpoint_write_is_an_error_not_a_panic() {
    const TEST: &str = "enospc_on_snapshot_or_checkpoint_write_is_an_error_not_a_panic";
    let mut hit = std::collections::BTreeSet::new();
    for phase in [Phase::Roll, Phase::Flush, Phase::Close] {
        for kind in [OpKind::Write, OpKind::SyncData, OpKind::Rename] {
            for nth in 1.. {
                let mut fired = false;
                for crash in [false, true] {
                    let seed = nth * 2 + crash as u64;
                    replayable(seed, TEST, || {
                        if let Some(file) = enospc_at(seed, phase, kind, nth, crash) {
                            fired = true;
                            hit.insert(format!("{phase:?} {kind:?} {file}"));
                        }
                    });
                }
                if !fired {
                    break;
                }
            }
        }
    }
    eprintln!("ENOSPC failed: {hit:?}");
    for want in [
        "Roll Write snapshot.tmp",
        "Flush SyncData snapshot.tmp",
        "Flush Rename snapshot.tmp",
        "Flush Write checkpoint.tmp",
        "Flush SyncData checkpoint.tmp",
        "Flush Rename checkpoint.tmp",
        "Close Write snapshot.tmp",
        "Close SyncData snapshot.tmp",
        "Close Rename snapshot.tmp",
        "Close Write checkpoint.tmp",
        "Close SyncData checkpoint.tmp",
        "Close Rename checkpoint.tmp",
    ] {
        assert!(hit.contains(want), "never failed: {want}; failed: {hit:#?}");
    }
}

/// Fails the `nth` operation of `kind` in `phase` with ENOSPC; returns the kind of file that
/// failed, or `None` if the phase has fewer such operations.
fn enospc_at(seed: u64, phase: Phase, kind: OpKind, nth: u64, crash: bool) -> Option<String> {
    const SCENARIO_SEED: u64 = 3;
    let k = Scenario::batches_before_second_roll(SCENARIO_SEED);
    let mut roll = None;
    let mut s = match phase {
        Phase::Roll => {
            let mut s = Scenario::new(SCENARIO_SEED, k, k);
            roll = Some(next_batch(&s.model, &mut s.rng));
            s
        }
        Phase::Flush => Scenario::new(SCENARIO_SEED, k + 2, k),
        Phase::Close => {
            let mut s = Scenario::new(SCENARIO_SEED, k + 2, k);
            s.flush();
            s.append();
            s
        }
    };
    s.ctx = Ctx::new(seed, "enospc_at");
    s.rng = SplitMix64::new(seed);
    let segments = s.log().segment_count();
    let before = s.fs.counters().injected_failures;
    s.fs.fail_next(kind, nth, libc::ENOSPC);
    // (file that failed, out of space, the log stays writable)
    let failure = match phase {
        Phase::Roll => {
            let b = roll.as_ref().expect("batch");
            match try_append(&s.ctx, s.log.as_ref().expect("log"), &mut s.model, b) {
                Ok(_) => {
                    if s.log().segment_count() == segments {
                        s.ctx.fail("the batch meant to roll did not");
                    }
                    None
                }
                Err(e) => {
                    let io = append_io(&e)
                        .unwrap_or_else(|| s.ctx.fail(format!("ENOSPC answered {e:?}")));
                    let writable = matches!(e, AppendError::Io(_));
                    if writable && s.log().segment_count() != segments {
                        s.ctx
                            .fail(format!("a failed roll ({e}) changed the segments"));
                    }
                    Some((file_kind(io), io.is_out_of_space(), writable))
                }
            }
        }
        Phase::Flush | Phase::Close => {
            let r = match phase {
                Phase::Flush => s.log().flush(),
                _ => s.log().close(),
            };
            match r {
                Ok(()) => None,
                Err(e) => {
                    let io = flush_io(&e)
                        .unwrap_or_else(|| s.ctx.fail(format!("ENOSPC answered {e:?}")));
                    // A failed checkpoint write after a flush leaves the log writable; any
                    // failed fsync or a failed close does not.
                    let writable = phase == Phase::Flush && matches!(e, FlushError::Io(_));
                    Some((file_kind(io), io.is_out_of_space(), writable))
                }
            }
        }
    };
    let fired = s.fs.counters().injected_failures > before;
    s.fs.clear_faults();
    match (fired, failure) {
        (false, None) => {
            s.log.take().expect("log").abandon();
            None
        }
        (false, Some((file, ..))) => s.ctx.fail(format!("{file} failed without a fault")),
        (true, None) => s.ctx.fail(format!(
            "ENOSPC on {kind:?} {nth} was swallowed: the {phase:?} succeeded"
        )),
        (true, Some((file, out_of_space, writable))) => {
            if !out_of_space {
                s.ctx.fail(format!("{file}: the error lost its ENOSPC"));
            }
            if phase != Phase::Close {
                check_live(&s.ctx, s.log.as_ref().expect("log"), &mut s.model);
            }
            s.resume(writable, roll, crash);
            Some(file)
        }
    }
}

/// A directory a power cut left unclean: flushed batches, then unflushed ones across two rolls
/// (sealed segments past the recovery point to validate and re-index, a torn tail to cut).
fn unclean_directory(seed: u64) -> Scenario {
    let mut s = Scenario::new(seed, 30, 30);
    let segments = s.log().segment_count();
    while s.log().segment_count() < segments + 2 {
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
    let one = |seed: u64| replayable(seed, TEST, || fault_cycles(seed));
    if let Some(seed) = env_u64("ONCELOG_FAULT_SEED") {
        one(seed);
        return;
    }
    let target = env_u64("ONCELOG_FAULT_POINTS").unwrap_or(DEFAULT_FAULT_POINTS);
    let (mut points, mut seed) = (0, 0);
    while points < target {
        points += one(seed);
        seed += 1;
    }
    eprintln!("{points} injected faults, seeds 0..{seed}");
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
            model.check_recovered(ctx, &l);
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

#[test]
fn a_crash_after_a_failed_roll_never_moves_the_log_end_back() {
    const TEST: &str = "a_crash_after_a_failed_roll_never_moves_the_log_end_back";
    let mut leftovers_back = 0;
    for crash_seed in 0..48 {
        replayable(crash_seed, TEST, || {
            if crash_after_failed_roll(crash_seed) {
                leftovers_back += 1;
            }
        });
    }
    // The crash must sometimes have kept the leftover's creation and lost its removal.
    assert!(
        leftovers_back > 0,
        "no crash brought the leftover segment back"
    );
}

/// A roll fails after creating the new `.log` (its index cannot be allocated) and removes it
/// again, unsynced; smaller batches still fit the old segment; then the power is cut. Returns whether recovery met the failed roll's leftover.
fn crash_after_failed_roll(crash_seed: u64) -> bool {
    const SCENARIO_SEED: u64 = 5;
    let k = Scenario::batches_before_second_roll(SCENARIO_SEED);
    let mut s = Scenario::new(SCENARIO_SEED, k, k);
    s.ctx = Ctx::new(crash_seed, "crash_after_failed_roll");
    s.flush();
    let segments = s.log().segment_count();
    let roll = next_batch(&s.model, &mut s.rng);
    let leftover = dir().join(format!("{:020}.log", s.model.end()));
    s.fs.fail_next(OpKind::Allocate, 2, libc::ENOSPC);
    let log = s.log.take().expect("log");
    match try_append(&s.ctx, &log, &mut s.model, &roll) {
        Err(AppendError::Io(e)) if e.is_out_of_space() => {}
        other => s.ctx.fail(format!("the roll answered {other:?}")),
    }
    s.fs.clear_faults();
    // Tiny batches fit where the big one did not: the old segment takes the offsets the
    // failed segment was named after.
    for _ in 0..3 {
        let producer = ProducerSeq {
            producer_id: 9,
            epoch: 0,
            base_sequence: s.model.next_sequences().get(&9).copied().unwrap_or(0),
        };
        let tiny = Next {
            client: client_batch(1, 0, 1_700_000_000_000, Some(producer), 0),
            producer: Some(producer),
            records: 1,
        };
        try_append(&s.ctx, &log, &mut s.model, &tiny)
            .unwrap_or_else(|e| s.ctx.fail(format!("tiny append: {e}")));
    }
    if log.segment_count() != segments {
        s.ctx
            .fail("a tiny batch rolled; pick another scenario seed");
    }
    // No flush: it would finish the failed roll's snapshot and so sync the directory. The
    // crash keeps any of the unsynced pages, the tiny batches' among them.
    log.abandon();
    s.fs.crash(crash_seed);
    let log = reopen_and_check(&s.ctx, &s.fs, &s.clock, &s.cfg, &mut s.model);
    let deleted = log.recovery_report().segments_deleted.contains(&leftover);
    // Appends continue after the last durable offset, never on top of it.
    let expected = s.model.end();
    let info = append_ok(&s.ctx, &log, &mut s.model, &mut s.rng);
    if info.first_offset != expected {
        s.ctx.fail(format!(
            "append after recovery at {}, expected {expected}",
            info.first_offset
        ));
    }
    log.abandon();
    deleted
}
