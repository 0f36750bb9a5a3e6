//! Helpers of the crash tests on the simulated file system: a clock, batches, and the model of
//! what the log must hold (docs/design.md, "The contract").

#![allow(dead_code)]

pub mod faults;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::Clock;
use oncelog::{AppendOutcome, AppendWrites, Environment, Log, LogConfig, OpenError, Preallocation};

pub const DIR: &str = "/data/topic-0";
/// Kafka's (and oncelog's default) producer dedup window.
pub const DEDUP_WINDOW: usize = 5;

pub fn env_u64(name: &str) -> Option<u64> {
    let v = std::env::var(name).ok()?;
    Some(
        v.parse()
            .unwrap_or_else(|_| panic!("{name}={v:?} is not a number")),
    )
}

/// Runs `one_seed` over seeds from `first_seed` until `points_var` (default `default_points`)
/// points were covered, or just the seed in `seed_var`. Returns the points covered; `what`
/// names them in the summary line.
pub fn sweep_seeds(
    seed_var: &str,
    points_var: &str,
    default_points: u64,
    first_seed: u64,
    what: &str,
    mut one_seed: impl FnMut(u64) -> u64,
) -> u64 {
    if let Some(seed) = env_u64(seed_var) {
        return one_seed(seed);
    }
    let target = env_u64(points_var).unwrap_or(default_points);
    let mut points = 0;
    let mut seed = first_seed;
    while points < target {
        points += one_seed(seed);
        seed += 1;
    }
    eprintln!("{points} {what}, seeds {first_seed}..{seed}");
    points
}

/// What kinds of work one seed's round did: the kinds of file operation it performed (as
/// [`op_kinds_since`] names them) and whatever else its test names (the kind of rewrite, a
/// configuration that changes which files are touched).
pub type Kinds = std::collections::BTreeSet<String>;

/// The kinds of file operation `fs` performed since `before` (an earlier `counters().by_kind`).
pub fn op_kinds_since(fs: &SimFs, before: &BTreeMap<OpKind, u64>) -> Kinds {
    fs.counters()
        .by_kind
        .iter()
        .filter(|(kind, n)| before.get(kind).copied().unwrap_or(0) < **n)
        .map(|(kind, _)| format!("{kind:?}"))
        .collect()
}

/// A crash sweep over every file operation of one round per seed, whose full size is too long
/// for every `cargo test`: by default a sample of it that still crashes at every kind of work
/// the full sweep's rounds do.
///
/// `round(seed, crash)` runs one seed's round without faults and returns its crash points (its
/// file operations plus one) and its [`Kinds`]; with `crash` it then also crashes at each of
/// those points and checks the reopened log. `ONCELOG_CRASH_SEED`-style `seed_var` replays one
/// seed; `points_var` runs the sweep of that many points (`full_points`, the full sweep, or
/// more: seeds from `first_seed` until the points are covered, as [`sweep_seeds`] does).
/// Without either: the seeds of the full sweep are found by their fault-free rounds alone
/// (cheap), and every crash point of a seed is swept if the sample has fewer than
/// `default_points` yet or the seed's round does a kind of work no swept seed did. So the
/// sample covers at least `default_points`, and every kind of work of the full sweep, each at
/// every one of its file operations in some round.
#[allow(clippy::too_many_arguments)]
pub fn sweep_every_op_sampled(
    seed_var: &str,
    points_var: &str,
    full_points: u64,
    default_points: u64,
    first_seed: u64,
    what: &str,
    mut round: impl FnMut(u64, bool) -> (u64, Kinds),
) -> u64 {
    if let Some(seed) = env_u64(seed_var) {
        return round(seed, true).0;
    }
    if let Some(target) = env_u64(points_var) {
        return sweep_seeds(seed_var, points_var, target, first_seed, what, |seed| {
            round(seed, true).0
        });
    }
    let mut full = Vec::new();
    let mut full_kinds = Kinds::new();
    let mut points = 0;
    let mut seed = first_seed;
    while points < full_points {
        let (p, kinds) = round(seed, false);
        points += p;
        full_kinds.extend(kinds.iter().cloned());
        full.push((seed, kinds));
        seed += 1;
    }
    let mut covered = Kinds::new();
    let mut swept = 0;
    let mut seeds = 0;
    for (seed, kinds) in &full {
        if swept < default_points || !kinds.is_subset(&covered) {
            swept += round(*seed, true).0;
            seeds += 1;
            covered.extend(kinds.iter().cloned());
        }
    }
    assert_eq!(covered, full_kinds, "the sample misses a kind of work");
    eprintln!(
        "{swept} {what} over {seeds} of the full sweep's {} seeds ({points} points: \
         {points_var}={full_points}), covering every kind of its rounds: {covered:?}",
        full.len()
    );
    swept
}

/// A clock that moves one millisecond per reading: deterministic, and never triggers a time roll.
#[derive(Debug)]
pub struct StepClock(AtomicI64);

impl StepClock {
    pub fn new() -> Arc<StepClock> {
        Arc::new(StepClock(AtomicI64::new(1_700_000_000_000)))
    }
}

impl Clock for StepClock {
    fn now_ms(&self) -> i64 {
        self.0.fetch_add(1, Ordering::Relaxed)
    }
}

/// Where a failure came from and how to replay it.
#[derive(Debug, Clone)]
pub struct Ctx {
    pub seed: u64,
    /// The test file (`--test` target) and the test in it.
    pub file: &'static str,
    pub test: &'static str,
    pub history: Vec<String>,
    /// The variable that replays a failure's seed.
    pub seed_var: &'static str,
}

impl Ctx {
    pub fn new(seed: u64, test: &'static str) -> Ctx {
        Ctx::in_file(seed, "append_crash_sim", test)
    }
    pub fn in_file(seed: u64, file: &'static str, test: &'static str) -> Ctx {
        Ctx {
            seed,
            file,
            test,
            history: Vec::new(),
            seed_var: "ONCELOG_CRASH_SEED",
        }
    }
    /// A context whose failures say to replay with `seed_var` and the tests of module `target`.
    pub fn replayed_by(mut self, seed_var: &'static str, target: &'static str) -> Ctx {
        self.seed_var = seed_var;
        self.file = target;
        self
    }
    pub fn note(&mut self, what: impl Into<String>) {
        self.history.push(what.into());
        if self.history.len() > 60 {
            self.history.remove(0);
        }
    }
    pub fn fail(&self, msg: impl std::fmt::Display) -> ! {
        panic!(
            "seed {seed}: {msg}\nlast steps: {:#?}\nreplay: {var}={seed} cargo test --test {binary} {file}::{test} -- --nocapture",
            self.history,
            binary = env!("CARGO_CRATE_NAME"),
            seed = self.seed,
            file = self.file,
            test = self.test,
            var = self.seed_var,
        )
    }
}

/// A small log on the simulated file system. Its segments grow in steps of 4 to 32 KiB (so
/// growth happens in the middle of segments), reserved or zeroed, both derived from the other
/// values rather than drawn, so every seed's scenario stays what it was.
pub fn config(rng: &mut SplitMix64) -> LogConfig {
    let segment_bytes = (16 + rng.below(49) as usize) * 1024;
    let segment_index_bytes = 96 + 12 * rng.below(40) as usize;
    LogConfig::builder()
        .segment_bytes(segment_bytes)
        .segment_index_bytes(segment_index_bytes)
        .index_interval_bytes(rng.below(2048) as usize)
        .allocation_step_bytes(4096 << (segment_bytes / 1024 % 4))
        .preallocation(match segment_index_bytes / 12 % 3 {
            0 => Preallocation::Auto,
            1 => Preallocation::Reserved,
            _ => Preallocation::Zeroed,
        })
        .append_writes(match rng.below(3) {
            0 => AppendWrites::Auto,
            1 => AppendWrites::Map,
            _ => AppendWrites::File,
        })
        .build()
        .unwrap()
}

pub fn open(fs: &SimFs, clock: &Arc<StepClock>, config: &LogConfig) -> Result<Log, OpenError> {
    let env = Environment::default()
        .with_fs(fs.as_dyn())
        .with_clock(clock.clone());
    Log::open_in(env, Path::new(DIR), config.clone())
}

pub fn dir() -> PathBuf {
    PathBuf::from(DIR)
}

/// The files of the log directory with their lengths, and the checkpoint (failure messages).
pub fn describe_dir(fs: &SimFs) -> String {
    use oncelog::io::FileSystem;
    let mut names = fs.list(&dir()).unwrap_or_default();
    names.sort();
    let mut out = String::new();
    for n in names {
        let live = fs.read_live(&dir().join(&n)).map(|b| b.len());
        out.push_str(&format!("{n}: {live:?}\n"));
    }
    if let Ok(cp) = fs.read_live(&dir().join("oncelog.checkpoint")) {
        out.push_str(&String::from_utf8_lossy(&cp));
    }
    out
}

/// An idempotent producer's identity and the sequence of its first record in a batch.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerSeq {
    pub producer_id: i64,
    pub epoch: i16,
    pub base_sequence: i32,
}

/// A client batch (baseOffset 0) of `records` records with values of `value_len` bytes.
pub fn client_batch(
    records: usize,
    value_len: usize,
    ts: i64,
    producer: Option<ProducerSeq>,
    fill: u8,
) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    if let Some(p) = producer {
        b = b.producer(p.producer_id, p.epoch, p.base_sequence);
    }
    let value = vec![fill; value_len];
    for i in 0..records {
        b.append(ts + i as i64, Some(b"k"), Some(&value), &[]);
    }
    b.build().expect("build batch")
}

/// One batch the log accepted.
#[derive(Debug, Clone)]
pub struct Stored {
    pub first: i64,
    pub last: i64,
    /// The bytes as read back right after the append (offsets assigned).
    pub bytes: Vec<u8>,
    /// The bytes the client sent (for retries).
    pub client: Vec<u8>,
    pub producer: Option<ProducerSeq>,
    pub records: i32,
}

/// What the log must hold: every accepted batch in offset order, and how far they are durable.
#[derive(Debug, Default)]
pub struct Model {
    pub batches: Vec<Stored>,
    /// Every batch below this offset is durable (a completed flush or clean close covered it).
    pub durable_end: i64,
}

impl Model {
    pub fn end(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.last + 1)
    }

    /// The next base sequence of each producer that has batches in the log.
    pub fn next_sequences(&self) -> BTreeMap<i64, i32> {
        let mut next = BTreeMap::new();
        for b in &self.batches {
            if let Some(p) = b.producer {
                next.insert(p.producer_id, p.base_sequence.wrapping_add(b.records));
            }
        }
        next
    }

    /// The next batch of `producer_id` (epoch 0): its sequence continues the model's batches, or
    /// starts at 0 for a producer the log has not seen.
    pub fn continue_producer(&self, producer_id: i64) -> ProducerSeq {
        let base_sequence = self
            .next_sequences()
            .get(&producer_id)
            .copied()
            .unwrap_or(0);
        ProducerSeq {
            producer_id,
            epoch: 0,
            base_sequence,
        }
    }

    /// The last `window` batches of `producer_id` still in the log, oldest first.
    pub fn window(&self, producer_id: i64, window: usize) -> Vec<&Stored> {
        let mut mine: Vec<&Stored> = self
            .batches
            .iter()
            .filter(|b| b.producer.is_some_and(|p| p.producer_id == producer_id))
            .collect();
        let cut = mine.len().saturating_sub(window);
        mine.drain(..cut);
        mine
    }

    /// Records a batch the log just appended at `first..=last`, reading it back.
    #[allow(clippy::too_many_arguments)]
    pub fn appended(
        &mut self,
        ctx: &Ctx,
        log: &Log,
        first: i64,
        last: i64,
        client: Vec<u8>,
        producer: Option<ProducerSeq>,
        records: i32,
    ) {
        if first != self.end() {
            ctx.fail(format!(
                "append got offset {first}, the log should continue at {}",
                self.end()
            ));
        }
        let bytes = match log.read(first, 1) {
            Ok(b) => b,
            Err(e) => ctx.fail(format!("read back of {first}: {e}")),
        };
        let Some(Ok((_, batch))) = BatchIter::new(&bytes).next() else {
            ctx.fail(format!("read back of {first} gave no whole batch"))
        };
        if batch.base_offset() != first || batch.last_offset() != last {
            ctx.fail(format!(
                "read back of {first} gave {}..={}",
                batch.base_offset(),
                batch.last_offset()
            ));
        }
        self.batches.push(Stored {
            first,
            last,
            bytes: batch.as_bytes().to_vec(),
            client,
            producer,
            records,
        });
    }

    /// Checks a reopened log against the model (docs/design.md, contract 1): offsets dense from 0,
    /// every batch whole with a valid CRC and identical to what was appended at that offset, every
    /// durable batch present, and the end a batch boundary of the model (a prefix, no holes). Then
    /// forgets the batches the crash took.
    pub fn check_recovered(&mut self, ctx: &Ctx, log: &Log) {
        if let Err(e) = self.try_check_recovered(ctx, log) {
            ctx.fail(format!("read: {e}"));
        }
    }

    /// [`Model::check_recovered`], except that a read which fails with an I/O error (a sealed
    /// segment is mapped when it is first read, so a dead disk fails reads too) is returned
    /// rather than failed on.
    pub fn try_check_recovered(&mut self, ctx: &Ctx, log: &Log) -> Result<(), oncelog::ReadError> {
        if log.log_start_offset() != 0 {
            ctx.fail(format!("log start moved to {}", log.log_start_offset()));
        }
        let end = log.log_end_offset();
        if end < self.durable_end {
            ctx.fail(format!(
                "log ends at {end} after recovery, but offsets below {} were durable (report: {:?})",
                self.durable_end,
                log.recovery_report()
            ));
        }
        let mut next = 0;
        let mut index = 0;
        while next < end {
            let bytes = match log.read(next, 64 * 1024) {
                Ok(b) if !b.is_empty() => b,
                Ok(_) => ctx.fail(format!("empty read at {next} below the end {end}")),
                Err(e @ oncelog::ReadError::Io(_)) => return Err(e),
                Err(e) => ctx.fail(format!("read at {next}: {e}")),
            };
            for item in BatchIter::new(&bytes) {
                let batch = match item {
                    Ok((_, b)) => b,
                    Err(e) => ctx.fail(format!("read at {next}: {e}")),
                };
                if !batch.is_crc_valid() {
                    ctx.fail(format!("batch at {} has a bad CRC", batch.base_offset()));
                }
                if batch.base_offset() != next {
                    ctx.fail(format!(
                        "offsets not dense: batch at {} where {next} was expected",
                        batch.base_offset()
                    ));
                }
                match self.batches.get(index) {
                    Some(m) if m.bytes == batch.as_bytes() => {}
                    Some(m) => ctx.fail(format!(
                        "batch at {next} differs from the one appended at {}..={}",
                        m.first, m.last
                    )),
                    None => ctx.fail(format!(
                        "batch at {next} was never appended (model ends at {})",
                        self.end()
                    )),
                }
                next = batch.last_offset() + 1;
                index += 1;
            }
        }
        if next != end {
            ctx.fail(format!("batches end at {next}, log end offset is {end}"));
        }
        self.batches.truncate(index);
        // What recovery accepted is on disk: a second crash must not lose it.
        self.durable_end = end;
        Ok(())
    }
}

/// The dedup check (docs/design.md, contract 2): a retry of a batch in its producer's window
/// returns the original offsets and writes nothing.
pub fn expect_duplicate(ctx: &Ctx, log: &Log, client: &[u8], first: i64, last: i64) {
    let end = log.log_end_offset();
    match log.append(client) {
        Ok(AppendOutcome::Duplicate(d)) if d.first_offset == first && d.last_offset == last => {}
        other => ctx.fail(format!(
            "retry of the batch at {first}..={last} answered {other:?}, expected Duplicate with those offsets"
        )),
    }
    if log.log_end_offset() != end {
        ctx.fail("a duplicate was written");
    }
}

/// Every batch still in its producer's window must come back as a duplicate with its offsets.
pub fn retry_window(ctx: &Ctx, log: &Log, model: &Model) {
    for &pid in model.next_sequences().keys() {
        for b in model.window(pid, DEDUP_WINDOW) {
            expect_duplicate(ctx, log, &b.client, b.first, b.last);
        }
    }
}

/// Every record of the log, by offset, with its value as text.
pub fn record_values(log: &Log) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let bytes = log.read(at, 1 << 16).unwrap();
        let mut next = at;
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            let records = b.records_buf().unwrap();
            for r in b.iter_records(&records) {
                let r = r.unwrap();
                let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
                if r.offset >= at {
                    out.push((r.offset, v));
                }
            }
            next = b.last_offset() + 1;
        }
        assert!(next > at, "no progress at {at}");
        at = next;
    }
    out
}
