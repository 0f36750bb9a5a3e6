//! ENOSPC while a roll, a flush or a close writes a producer snapshot or the checkpoint, on
//! the simulated file system (docs/design.md: "Memory maps without hazards", "Recovery on open"):
//! every failed write, fsync and rename comes back as a typed out-of-space error
//! naming the file, never a panic, and the log resumes (or reopens with every acknowledged batch)
//! once space returns.

use crate::common_sim;

use common_sim::faults::{
    append_io, check_live, flush_io, next_batch, replayable, try_append, Scenario,
};
use common_sim::Ctx;
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::IoError;
use oncelog::{AppendError, FlushError};

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
    let segments = s.log().maintenance().segment_count();
    let before = s.fs.counters().injected_failures;
    s.fs.fail_next(kind, nth, libc::ENOSPC);
    // (file that failed, out of space, the log stays writable)
    let failure = match phase {
        Phase::Roll => {
            let b = roll.as_ref().expect("batch");
            match try_append(&s.ctx, s.log.as_ref().expect("log"), &mut s.model, b) {
                Ok(_) => {
                    if s.log().maintenance().segment_count() == segments {
                        s.ctx.fail("the batch meant to roll did not");
                    }
                    None
                }
                Err(e) => {
                    let io = append_io(&e)
                        .unwrap_or_else(|| s.ctx.fail(format!("ENOSPC answered {e:?}")));
                    let writable = matches!(e, AppendError::Io(_));
                    if writable && s.log().maintenance().segment_count() != segments {
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
