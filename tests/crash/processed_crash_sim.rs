//! Crash tests of the processed-id store on the simulated file system: random mixes of
//! `record` (new ids, redeliveries, ids handled again after they were forgotten), `maintain`
//! (tombstones, position rewrites, retention), clock steps and clean reopens, cut by a power
//! failure at a random point (every file operation from the Nth on fails), then the disk
//! crashes and the store reopens. It must then hold exactly what a model holds after the calls
//! that returned, or after those and the one that was cut: every id whose `record` returned is
//! handled (unless forgotten by the rules) with its effect, every position is the last one
//! recorded, and no id is handled that was not recorded. A second test cuts the power at every
//! single file operation of a record-with-tombstones and of a maintain with retention.
//!
//! Environment: `ONCELOG_CRASH_POINTS=<n>` crash points (default 300),
//! `ONCELOG_CRASH_SEED=<n>` to replay one seed.

use crate::common_sim;

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use common_sim::{sweep_seeds, Ctx};
use oncelog::io::sim::{OpKind, SplitMix64};
use oncelog::io::SimFs;
use oncelog::processed::{Position, ProcessedConfig, ProcessedStore, Recorded};
use oncelog::{Clock, Environment, LogConfig};

const DIR: &str = "/data/processed-0";
const DEFAULT_CRASH_POINTS: u64 = 300;
const SOURCES: [&str; 3] = ["orders-0", "orders-1", "payments-0"];

#[derive(Debug)]
struct HandClock(AtomicI64);

impl Clock for HandClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// What the store must answer: the live ids oldest first (id, handled at, effect) and the
/// positions.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Model {
    live: Vec<(Vec<u8>, i64, Vec<u8>)>,
    positions: BTreeMap<String, i64>,
}

impl Model {
    fn expire(&mut self, now: i64, cfg: &ProcessedConfig) {
        if let Some(age) = cfg.forget_after_ms {
            self.live.retain(|(_, at, _)| *at > now - age);
        }
    }

    /// Applies a record call; returns whether it is new.
    fn record(
        &mut self,
        now: i64,
        cfg: &ProcessedConfig,
        id: &[u8],
        source: &str,
        pos: i64,
        effect: &[u8],
    ) -> bool {
        self.expire(now, cfg);
        if self.live.iter().any(|(i, _, _)| i == id) {
            return false;
        }
        if let Some(max) = cfg.max_ids {
            while self.live.len() + 1 > max {
                self.live.remove(0);
            }
        }
        self.live.push((id.to_vec(), now, effect.to_vec()));
        self.positions.insert(source.to_string(), pos);
        true
    }

    /// What a store must show at `now` (ids past their age are not answered).
    fn visible(&self, now: i64, cfg: &ProcessedConfig) -> Model {
        let mut m = self.clone();
        m.expire(now, cfg);
        m
    }
}

fn observed(ctx: &Ctx, store: &ProcessedStore) -> Model {
    let live = store
        .handled_ids()
        .into_iter()
        .map(|h| {
            let effect = store
                .effect(&h.id)
                .unwrap_or_else(|e| ctx.fail(format!("effect of {:?}: {e}", h.id)))
                .unwrap_or_else(|| ctx.fail(format!("{:?} handled without an effect", h.id)));
            (h.id.to_vec(), h.handled_at_ms, effect.to_vec())
        })
        .collect();
    Model {
        live,
        positions: store.positions().into_iter().collect(),
    }
}

fn open(
    fs: &SimFs,
    clock: &Arc<HandClock>,
    cfg: &ProcessedConfig,
) -> Result<ProcessedStore, oncelog::processed::ProcessedError> {
    let env = Environment::default()
        .with_fs(fs.as_dyn())
        .with_clock(clock.clone());
    ProcessedStore::open_in(env, Path::new(DIR), cfg.clone())
}

/// The store's state against the models it may be in.
fn check(ctx: &Ctx, store: &ProcessedStore, now: i64, cfg: &ProcessedConfig, allowed: &[&Model]) {
    let got = observed(ctx, store);
    if !allowed.iter().any(|m| m.visible(now, cfg) == got) {
        ctx.fail(format!(
            "the store holds {got:?}\nallowed: {:?}",
            allowed
                .iter()
                .map(|m| m.visible(now, cfg))
                .collect::<Vec<_>>()
        ));
    }
}

fn random_config(rng: &mut SplitMix64) -> ProcessedConfig {
    ProcessedConfig::default()
        .with_forget_after_ms(rng.chance(2, 3).then(|| 1_000 + rng.below(4_000) as i64))
        .with_max_ids(rng.chance(1, 2).then(|| 2 + rng.below(20) as usize))
        .with_durable(true)
        .with_log(
            LogConfig::builder()
                .segment_bytes(1024 + 512 * rng.below(6) as usize)
                .segment_index_bytes(96 + 12 * rng.below(20) as usize)
                .index_interval_bytes(rng.below(1024) as usize)
                .prefault_bytes(0)
                .file_delete_delay_ms(0)
                .build()
                .unwrap(),
        )
}

enum Outcome {
    Ok,
    /// A call failed under the power cut; `pending` is the model with it applied, if it
    /// could have written something that changes the state.
    Cut(Option<Model>),
}

#[allow(clippy::too_many_arguments)]
fn step(
    rng: &mut SplitMix64,
    ctx: &mut Ctx,
    fs: &SimFs,
    clock: &Arc<HandClock>,
    cfg: &ProcessedConfig,
    store: &mut ProcessedStore,
    model: &mut Model,
    next_pos: &mut [i64; 3],
) -> Outcome {
    let cut = |ctx: &Ctx, what: String| {
        if fs.counters().injected_failures == 0 {
            ctx.fail(what);
        }
    };
    let now = clock.now_ms();
    let roll = rng.below(100);
    if roll < 65 {
        let id = format!("msg-{}", rng.below(40)).into_bytes();
        let s = rng.below(3) as usize;
        next_pos[s] += 1;
        let pos = next_pos[s];
        let effect: Vec<u8> = (0..rng.below(120)).map(|i| i as u8 ^ s as u8).collect();
        let mut after = model.clone();
        let new = after.record(now, cfg, &id, SOURCES[s], pos, &effect);
        ctx.note(format!(
            "record {} {}@{pos} ({} bytes) new={new}",
            String::from_utf8_lossy(&id),
            SOURCES[s],
            effect.len()
        ));
        let position = Position {
            source: SOURCES[s],
            offset: pos,
        };
        match store.record(&id, position, &effect) {
            Ok(r) => {
                if matches!(r, Recorded::New { .. }) != new {
                    ctx.fail(format!("record answered {r:?}, the model says new={new}"));
                }
                *model = after;
                Outcome::Ok
            }
            Err(e) => {
                cut(ctx, format!("record: {e}"));
                Outcome::Cut(new.then_some(after))
            }
        }
    } else if roll < 78 {
        let ms = rng.below(cfg.forget_after_ms.unwrap_or(3_000) as u64) as i64;
        ctx.note(format!("clock +{ms} ms"));
        clock.0.fetch_add(ms, Ordering::Relaxed);
        Outcome::Ok
    } else if roll < 93 {
        ctx.note("maintain");
        match store.maintain() {
            Ok(r) => {
                ctx.note(format!("{r:?}"));
                check(ctx, store, now, cfg, &[model]);
                Outcome::Ok
            }
            Err(e) => {
                cut(ctx, format!("maintain: {e}"));
                Outcome::Cut(None)
            }
        }
    } else {
        ctx.note("close and reopen");
        if let Err(e) = store.close() {
            cut(ctx, format!("close: {e}"));
            return Outcome::Cut(None);
        }
        match open(fs, clock, cfg) {
            Ok(s) => {
                *store = s;
                check(ctx, store, clock.now_ms(), cfg, &[model]);
                Outcome::Ok
            }
            Err(e) => {
                cut(ctx, format!("reopen: {e}"));
                Outcome::Cut(None)
            }
        }
    }
}

fn crash_cycles(seed: u64, test: &'static str) -> u64 {
    let mut rng = SplitMix64::new(seed);
    let mut ctx = Ctx::in_file(seed, "processed_crash_sim", test);
    let fs = SimFs::new();
    let clock = Arc::new(HandClock(AtomicI64::new(1_700_000_000_000)));
    let cfg = random_config(&mut rng);
    ctx.note(format!(
        "forget_after_ms {:?}, max_ids {:?}, segment_bytes {}",
        cfg.forget_after_ms, cfg.max_ids, cfg.log.segment_bytes
    ));
    let mut model = Model::default();
    let mut next_pos = [0i64; 3];
    let mut store =
        open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("first open: {e}")));
    let cycles = 1 + rng.below(3);
    for cycle in 0..cycles {
        let cut_at = rng.chance(2, 3).then(|| 1 + rng.below(150));
        if let Some(n) = cut_at {
            fs.fail_from(OpKind::Any, n, libc::EIO);
        }
        ctx.note(format!("cycle {cycle}: power cut after {cut_at:?} ops"));
        let mut pending = None;
        for _ in 0..1 + rng.below(80) {
            let out = step(
                &mut rng,
                &mut ctx,
                &fs,
                &clock,
                &cfg,
                &mut store,
                &mut model,
                &mut next_pos,
            );
            if let Outcome::Cut(p) = out {
                pending = p;
                break;
            }
        }
        store.abandon();
        fs.clear_faults();
        let report = fs.crash(rng.next_u64());
        ctx.note(format!("crash: {report:?}"));
        store = open(&fs, &clock, &cfg)
            .unwrap_or_else(|e| ctx.fail(format!("open after the crash: {e}")));
        let now = clock.now_ms();
        let mut allowed = vec![&model];
        if let Some(p) = &pending {
            allowed.push(p);
        }
        check(&ctx, &store, now, &cfg, &allowed);
        // The state the store shows is the one it goes on from.
        if let Some(p) = pending {
            if p.visible(now, &cfg) == observed(&ctx, &store) {
                model = p;
            }
        }
    }
    store.abandon();
    cycles
}

#[test]
fn a_crash_at_any_point_keeps_every_recorded_id_with_its_effect_and_position() {
    let test = "a_crash_at_any_point_keeps_every_recorded_id_with_its_effect_and_position";
    let points = sweep_seeds(
        "ONCELOG_CRASH_SEED",
        "ONCELOG_CRASH_POINTS",
        DEFAULT_CRASH_POINTS,
        16 << 40,
        "crash points",
        |seed| crash_cycles(seed, test),
    );
    assert!(points > 0);
}

/// A fixed history: ids that roll segments, a record whose batch carries tombstones (count
/// limit), then a maintain that forgets by age, rewrites positions and deletes segments. The
/// power is cut at file operation `n` of the last two calls; returns whether `n` was reached.
fn cut_at_op(n: u64, crash_seed: u64) -> bool {
    let test = "every_file_operation_of_a_record_and_of_a_maintain_is_a_safe_crash_point";
    let mut ctx = Ctx::in_file(crash_seed, "processed_crash_sim", test);
    ctx.note(format!("power cut at op {n}"));
    let fs = SimFs::new();
    let clock = Arc::new(HandClock(AtomicI64::new(1_700_000_000_000)));
    let cfg = ProcessedConfig::default()
        .with_forget_after_ms(Some(10_000))
        .with_max_ids(Some(20))
        .with_durable(true)
        .with_log(
            LogConfig::builder()
                .segment_bytes(1024)
                .prefault_bytes(0)
                .file_delete_delay_ms(0)
                .build()
                .unwrap(),
        );
    let mut model = Model::default();
    let store = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("open: {e}")));
    for i in 0..25i64 {
        let id = format!("message-{i:03}").into_bytes();
        let effect = format!("applied {i}").into_bytes();
        let now = clock.now_ms();
        model.record(now, &cfg, &id, "orders-0", i + 1, &effect);
        store
            .record(
                &id,
                Position {
                    source: "orders-0",
                    offset: i + 1,
                },
                &effect,
            )
            .unwrap_or_else(|e| ctx.fail(format!("setup record {i}: {e}")));
        clock.0.fetch_add(100, Ordering::Relaxed);
    }
    fs.fail_from(OpKind::Any, n, libc::EIO);
    let now = clock.now_ms();
    let mut after = model.clone();
    after.record(now, &cfg, b"last", "orders-1", 9, b"the last effect");
    let pos = Position {
        source: "orders-1",
        offset: 9,
    };
    let mut pending = Some(after.clone());
    let mut reached = true;
    if store.record(b"last", pos, b"the last effect").is_ok() {
        model = after;
        pending = None;
        clock.0.fetch_add(20_000, Ordering::Relaxed);
        match store.maintain() {
            Ok(r) => {
                reached = fs.counters().injected_failures > 0;
                if !reached && r.segments_deleted == 0 {
                    ctx.fail(format!("the maintain deleted no segment: {r:?}"));
                }
            }
            Err(e) if fs.counters().injected_failures > 0 => ctx.note(format!("maintain: {e}")),
            Err(e) => ctx.fail(format!("maintain: {e}")),
        }
    } else if fs.counters().injected_failures == 0 {
        ctx.fail("record failed without an injected fault");
    }
    store.abandon();
    fs.clear_faults();
    fs.crash(crash_seed);
    let store = open(&fs, &clock, &cfg).unwrap_or_else(|e| ctx.fail(format!("reopen: {e}")));
    let mut allowed = vec![&model];
    if let Some(p) = &pending {
        allowed.push(p);
    }
    check(&ctx, &store, clock.now_ms(), &cfg, &allowed);
    if store.position("orders-0") != Some(25) {
        ctx.fail(format!("orders-0 at {:?}", store.position("orders-0")));
    }
    store.abandon();
    reached
}

#[test]
fn every_file_operation_of_a_record_and_of_a_maintain_is_a_safe_crash_point() {
    let seeds = common_sim::env_u64("ONCELOG_CRASH_SEEDS_PER_OP").unwrap_or(3);
    let mut n = 1;
    loop {
        let mut reached = false;
        for seed in 0..seeds {
            reached |= cut_at_op(n, seed);
        }
        if !reached {
            break;
        }
        n += 1;
        assert!(n < 10_000, "the calls never complete");
    }
    eprintln!("{n} file operations, {seeds} crash images each");
    assert!(n > 5, "only {n} operations: the scenario wrote nothing");
}
