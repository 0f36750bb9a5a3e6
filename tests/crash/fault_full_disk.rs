//! Full disks and failing fsyncs on the simulated file system (docs/design.md: contract 5, "Memory
//! maps without hazards", "Recovery on open"): an out-of-space roll or a failed
//! fsync comes back as a typed error (never a panic), nothing acknowledged is lost, the log stays
//! usable (read-only after a failed fsync) and resumes, or reopens, once the cause is gone; a crash
//! after a failed roll never moves the log end back.

use crate::common_sim;

use std::collections::BTreeMap;

use common_sim::faults::{
    append_ok, check_live, errno, flush_ok, next_batch, reopen_and_check, replayable, try_append,
    Next, Scenario,
};
use common_sim::{client_batch, dir, open, retry_window, Ctx};
use oncelog::io::sim::OpKind;

use oncelog::{AppendError, FlushError, OpenError};

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
    let Scenario {
        ctx,
        mut rng,
        fs,
        clock,
        cfg,
        log,
        mut model,
    } = Scenario::empty(seed, "full_disk_at_roll");
    let log = log.expect("log");
    // Room for about two more segments: one of the next rolls cannot get its space.
    let segment_room = (cfg.segment_bytes + 2 * cfg.segment_index_bytes + 512) as u64;
    fs.set_capacity(Some(
        fs.used_bytes() + 2 * segment_room + rng.below(segment_room),
    ));
    let mut appended = 0;
    let (pending, err) = loop {
        let b = next_batch(&model, &mut rng);
        let segments = log.maintenance().segment_count();
        match try_append(&ctx, &log, &mut model, &b) {
            Ok(_) => {}
            Err(e) => {
                if log.maintenance().segment_count() != segments {
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
            Err(OpenError::Io(e)) if e.is_out_of_space() => {}
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
    /// The checkpoint's (or the leader epochs') temp file failed its fsync after the data was
    /// durable.
    CheckpointOnly,
}

fn failed_fsync(seed: u64, nth: u64, crash: bool) -> Fsync {
    let Scenario {
        ctx,
        mut rng,
        fs,
        clock,
        cfg,
        log,
        mut model,
    } = Scenario::empty(seed, "failed_fsync");
    let log = log.expect("log");
    for _ in 0..12 {
        append_ok(&ctx, &log, &mut model, &mut rng);
    }
    flush_ok(&ctx, &log, &mut model);
    // Unflushed appends across a roll: the next flush has everything to do.
    let segments = log.maintenance().segment_count();
    while log.maintenance().segment_count() < segments + 1 {
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
        // The checkpoint is written after the data and indexes are durable, the leader epochs
        // the appends brought just before it; either temp file failing to sync loses nothing
        // (each is rewritten whole next time, and the recovery point on disk did not move), so
        // the log goes on.
        Err(FlushError::Io(e))
            if e.path.ends_with("oncelog.checkpoint.tmp")
                || e.path.ends_with("leader-epoch-checkpoint.tmp") =>
        {
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
/// again, unsynced; smaller batches still fit the old segment; then the power is cut. Returns
/// whether recovery met the failed roll's leftover.
fn crash_after_failed_roll(crash_seed: u64) -> bool {
    const SCENARIO_SEED: u64 = 5;
    let k = Scenario::batches_before_second_roll(SCENARIO_SEED);
    let mut s = Scenario::new(SCENARIO_SEED, k, k);
    s.ctx = Ctx::new(crash_seed, "crash_after_failed_roll");
    s.flush();
    let segments = s.log().maintenance().segment_count();
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
        let producer = s.model.continue_producer(9);
        let tiny = Next {
            client: client_batch(1, 0, 1_700_000_000_000, Some(producer), 0),
            producer: Some(producer),
            records: 1,
        };
        try_append(&s.ctx, &log, &mut s.model, &tiny)
            .unwrap_or_else(|e| s.ctx.fail(format!("tiny append: {e}")));
    }
    if log.maintenance().segment_count() != segments {
        s.ctx
            .fail("a tiny batch rolled; pick another scenario seed");
    }
    // No flush: it would finish the failed roll's snapshot and so sync the directory. The
    // crash keeps any of the unsynced pages, the tiny batches' among them.
    log.abandon();
    s.fs.crash(crash_seed);
    let log = reopen_and_check(&s.ctx, &s.fs, &s.clock, &s.cfg, &mut s.model);
    let deleted = log
        .recovery_report()
        .segments_deleted
        .iter()
        .any(|(p, _)| *p == leftover);
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
