//! Helpers of the fault-injection tests on the simulated file system: batches kept to be sent
//! again, appends and flushes that check the model, a seeded [`Scenario`], and the I/O error
//! inside each typed error.

use std::panic::{catch_unwind, resume_unwind, AssertUnwindSafe};
use std::sync::Arc;

use oncelog::io::sim::SplitMix64;
use oncelog::io::{IoError, SimFs};
use oncelog::{AppendError, AppendInfo, AppendOutcome, FlushError, Log, LogConfig, OpenError};

use super::{client_batch, describe_dir, open, retry_window, Ctx, Model, ProducerSeq, StepClock};

/// `Ctx` prints append_crash_sim's replay command; this prints the one of the running test binary.
pub fn replayable<T>(seed: u64, test: &str, f: impl FnOnce() -> T) -> T {
    match catch_unwind(AssertUnwindSafe(f)) {
        Ok(v) => v,
        Err(panic) => {
            let binary = env!("CARGO_CRATE_NAME");
            eprintln!(
                "{binary}: seed {seed} failed; replay with \
                 ONCELOG_FAULT_SEED={seed} cargo test --test {binary} {test} -- --nocapture"
            );
            resume_unwind(panic)
        }
    }
}

/// Small segments and indexes, so a few dozen batches roll several times.
pub fn small_config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(16 * 1024)
        .segment_index_bytes(1024)
        .index_interval_bytes(1024)
        .build()
        .unwrap()
}

/// A client batch not yet appended, kept to be sent again.
#[derive(Debug, Clone)]
pub struct Next {
    pub client: Vec<u8>,
    pub producer: Option<ProducerSeq>,
    pub records: i32,
}

/// A random batch continuing the model's producers (three of them, plus non-idempotent ones).
pub fn next_batch(model: &Model, rng: &mut SplitMix64) -> Next {
    let records = 1 + rng.below(8) as usize;
    let value_len = 40 + rng.below(300) as usize;
    let producer = rng
        .chance(3, 4)
        .then(|| model.continue_producer(1 + rng.below(3) as i64));
    let fill = rng.below(256) as u8;
    Next {
        client: client_batch(records, value_len, 1_700_000_000_000, producer, fill),
        producer,
        records: records as i32,
    }
}

/// Appends `b`; on success records it in the model (reading it back), on failure checks that
/// nothing moved.
pub fn try_append(
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

pub fn append_ok(ctx: &Ctx, log: &Log, model: &mut Model, rng: &mut SplitMix64) -> AppendInfo {
    let b = next_batch(model, rng);
    try_append(ctx, log, model, &b).unwrap_or_else(|e| ctx.fail(format!("append: {e}")))
}

pub fn flush_ok(ctx: &Ctx, log: &Log, model: &mut Model) {
    if let Err(e) = log.flush() {
        ctx.fail(format!("flush: {e}"));
    }
    model.durable_end = model.end();
}

/// Checks a live log holds every batch the model has, readable and whole.
pub fn check_live(ctx: &Ctx, log: &Log, model: &mut Model) {
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

/// Opens the log after a crash or a failure and checks it against the model (docs/design.md, "The
/// contract"): every durable batch exactly once at its offsets, dense, retries still duplicates.
pub fn reopen_and_check(
    ctx: &Ctx,
    fs: &SimFs,
    clock: &Arc<StepClock>,
    cfg: &LogConfig,
    model: &mut Model,
) -> Log {
    let log = open(fs, clock, cfg).unwrap_or_else(|e| {
        ctx.fail(format!(
            "open after the fault was gone: {e}\n{}",
            describe_dir(fs)
        ))
    });
    model.check_recovered(ctx, &log);
    retry_window(ctx, &log, model);
    log
}

pub fn errno(e: &IoError) -> Option<i32> {
    e.source.raw_os_error()
}

/// A log on a fresh simulated disk, built deterministically from a seed.
pub struct Scenario {
    pub ctx: Ctx,
    pub rng: SplitMix64,
    pub fs: SimFs,
    pub clock: Arc<StepClock>,
    pub cfg: LogConfig,
    pub log: Option<Log>,
    pub model: Model,
}

impl Scenario {
    /// An empty log with [`small_config`]; `test` names the failures of the test using it.
    pub fn empty(seed: u64, test: &'static str) -> Scenario {
        let ctx = Ctx::new(seed, test);
        let fs = SimFs::new();
        let clock = StepClock::new();
        let cfg = small_config();
        let log = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
        Scenario {
            ctx,
            rng: SplitMix64::new(seed),
            fs,
            clock,
            cfg,
            log: Some(log),
            model: Model::default(),
        }
    }

    /// `batches` appended; after each third of the first `flush_below` a flush.
    pub fn new(seed: u64, batches: usize, flush_below: usize) -> Scenario {
        let mut s = Scenario::empty(seed, "scenario");
        for i in 0..batches {
            s.append();
            if i % 3 == 2 && i < flush_below {
                s.flush();
            }
        }
        s
    }

    pub fn log(&self) -> &Log {
        self.log.as_ref().expect("log")
    }

    pub fn append(&mut self) -> AppendInfo {
        let log = self.log.as_ref().expect("log");
        append_ok(&self.ctx, log, &mut self.model, &mut self.rng)
    }

    pub fn flush(&mut self) {
        let log = self.log.as_ref().expect("log");
        flush_ok(&self.ctx, log, &mut self.model);
    }

    /// Batches before the one that makes the second roll (for the same seed).
    pub fn batches_before_second_roll(seed: u64) -> usize {
        let mut s = Scenario::new(seed, 0, 0);
        for n in 0..1000 {
            s.append();
            if n % 3 == 2 {
                s.flush();
            }
            if s.log().maintenance().segment_count() == 3 {
                s.log.take().expect("log").abandon();
                return n;
            }
        }
        s.ctx.fail("the log never rolled twice")
    }

    /// After the fault is gone: a log that stayed writable takes `retry` (or a new batch) at the
    /// next offset and closes cleanly; any log reopens with every acknowledged batch. With
    /// `crash` the power is cut first instead.
    pub fn resume(mut self, writable: bool, retry: Option<Next>, crash: bool) {
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
pub fn append_io(e: &AppendError) -> Option<&IoError> {
    match e {
        AppendError::Io(e) => Some(e),
        AppendError::ReadOnly { cause } => Some(cause),
        _ => None,
    }
}

pub fn flush_io(e: &FlushError) -> Option<&IoError> {
    match e {
        FlushError::Io(e) => Some(e),
        FlushError::ReadOnly { cause } => Some(cause),
        _ => None,
    }
}

pub fn open_io(e: &OpenError) -> Option<&IoError> {
    match e {
        OpenError::Io(e) => Some(e),
        _ => None,
    }
}
