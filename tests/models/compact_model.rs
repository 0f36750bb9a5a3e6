//! Property test of compaction: random keyed appends and tombstones from
//! idempotent producers and plain clients, retries, flushes, compactions at a moving wall
//! clock (with a key map small enough to need several passes at times), clean reopens and
//! crashes of the simulated file system, against a plain model of every record written.
//!
//! After every step: every record the log holds is the one written at its offset; for every
//! key the log's last record is the model's latest value, or the key is absent only when its
//! latest record is a tombstone (whose horizon passed); nothing at or above the cleaner
//! offset is missing; offsets strictly increase; and every retry in a producer's dedup window
//! is a `Duplicate` with its original offsets, after compactions and restarts alike.
//!
//! `PROPTEST_CASES` sets the number of cases (default 64).

use crate::common_sim;

use std::collections::BTreeMap;

use common_sim::{open, StepClock};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::SimFs;
use oncelog::{AppendOutcome, CleanupPolicy, CompactionConfig, Log, LogConfig};
use proptest::prelude::*;

const T0: i64 = 1_700_000_000_000;
const DAY: i64 = 24 * 60 * 60 * 1000;
const PRODUCERS: usize = 3;
const WINDOW: usize = 5;

#[derive(Debug, Clone)]
enum Op {
    /// A batch of `keys.len()` records; `None` values are tombstones.
    Send {
        producer: Option<usize>,
        records: Vec<(u8, bool)>,
    },
    Retry {
        producer: usize,
        back: usize,
    },
    Flush,
    /// Compaction after moving the wall clock `half_days` half-days on.
    Compact {
        half_days: u8,
    },
    Reopen,
    Crash {
        seed: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        10 => (
            prop_oneof![Just(None), (0..PRODUCERS).prop_map(Some)],
            proptest::collection::vec((0u8..12, proptest::bool::weighted(0.15)), 1..5)
        )
            .prop_map(|(producer, records)| Op::Send { producer, records }),
        2 => ((0..PRODUCERS), (0..WINDOW)).prop_map(|(producer, back)| Op::Retry { producer, back }),
        1 => Just(Op::Flush),
        3 => (0u8..4).prop_map(|half_days| Op::Compact { half_days }),
        1 => Just(Op::Reopen),
        1 => any::<u64>().prop_map(|seed| Op::Crash { seed }),
    ]
}

fn config(small_map: bool) -> LogConfig {
    LogConfig::builder()
        .segment_bytes(1024)
        .segment_index_bytes(240)
        .index_interval_bytes(128)
        .prefault_bytes(0)
        .cleanup_policy(CleanupPolicy::Compact)
        .file_delete_delay_ms(0)
        .compaction(
            CompactionConfig::default().with_key_map_bytes(if small_map { 1024 } else { 1 << 20 }),
        )
        .build()
        .unwrap()
}

/// A record written: its offset, key and value.
type Rec = (i64, Vec<u8>, Option<Vec<u8>>);

#[derive(Debug, Clone)]
struct Sent {
    first: i64,
    last: i64,
    client: Vec<u8>,
}

#[derive(Debug, Default)]
struct Model {
    records: Vec<Rec>,
    end: i64,
    durable: i64,
    sent: [Vec<Sent>; PRODUCERS],
    next_seq: [i32; PRODUCERS],
    /// Records at or above it were never cleaned.
    cleaned_to: i64,
}

impl Model {
    fn cut(&mut self, end: i64) {
        self.records.retain(|r| r.0 < end);
        self.end = end;
        for (p, sent) in self.sent.iter_mut().enumerate() {
            sent.retain(|s| s.last < end);
            self.next_seq[p] = sent
                .last()
                .map_or(0, |s| seq_of(&s.client) + records_of(&s.client));
        }
        self.cleaned_to = self.cleaned_to.min(end);
    }
}

fn seq_of(client: &[u8]) -> i32 {
    i32::from_be_bytes(client[53..57].try_into().unwrap())
}
fn records_of(client: &[u8]) -> i32 {
    i32::from_be_bytes(client[57..61].try_into().unwrap())
}

fn value_of(key: u8, n: usize) -> Vec<u8> {
    format!("value of {key} #{n}").into_bytes()
}

fn read_all(log: &Log) -> Result<Vec<Rec>, TestCaseError> {
    let mut out: Vec<Rec> = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log
            .read(next, 1 << 20)
            .map_err(|e| TestCaseError::fail(e.to_string()))?;
        prop_assert!(!bytes.is_empty(), "empty read at {}", next);
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.map_err(|e| TestCaseError::fail(e.to_string()))?;
            prop_assert!(b.is_crc_valid());
            prop_assert!(
                b.base_offset() >= next,
                "offsets go back at {}",
                b.base_offset()
            );
            let buf = b.records_buf().unwrap();
            for r in b.iter_records(&buf) {
                let r = r.unwrap();
                prop_assert!(out.last().is_none_or(|l| l.0 < r.offset));
                out.push((
                    r.offset,
                    r.key.unwrap().to_vec(),
                    r.value.map(<[u8]>::to_vec),
                ));
            }
            next = b.last_offset() + 1;
        }
    }
    Ok(out)
}

fn check(log: &Log, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(log.log_end_offset(), model.end);
    let seen = read_all(log)?;
    let written: BTreeMap<i64, &Rec> = model.records.iter().map(|r| (r.0, r)).collect();
    for r in &seen {
        prop_assert!(
            written.get(&r.0) == Some(&r),
            "record at {} is not what was written",
            r.0
        );
    }
    let seen_at: BTreeMap<i64, &Rec> = seen.iter().map(|r| (r.0, r)).collect();
    for r in model.records.iter().filter(|r| r.0 >= model.cleaned_to) {
        prop_assert!(
            seen_at.contains_key(&r.0),
            "record at {} above the cleaner offset {} is gone",
            r.0,
            model.cleaned_to
        );
    }
    let mut latest: BTreeMap<&[u8], &Rec> = BTreeMap::new();
    for r in &model.records {
        latest.insert(&r.1, r);
    }
    let mut last_seen: BTreeMap<&[u8], &Rec> = BTreeMap::new();
    for r in &seen {
        last_seen.insert(&r.1, r);
    }
    for (key, want) in &latest {
        match last_seen.get(key) {
            Some(got) => prop_assert!(
                got.0 == want.0,
                "key {:?}: the log's last is at {}, the latest at {}",
                key,
                got.0,
                want.0
            ),
            None => prop_assert!(
                want.2.is_none(),
                "key {:?} lost its latest value at {}",
                key,
                want.0
            ),
        }
    }
    Ok(())
}

fn expect_window(log: &Log, model: &Model) -> Result<(), TestCaseError> {
    for sent in &model.sent {
        for s in sent.iter().rev().take(WINDOW) {
            match log.append(&s.client) {
                Ok(AppendOutcome::Duplicate(d)) => {
                    prop_assert_eq!((d.first_offset, d.last_offset), (s.first, s.last))
                }
                other => prop_assert!(
                    false,
                    "retry of {}..={} answered {:?}",
                    s.first,
                    s.last,
                    other
                ),
            }
        }
    }
    Ok(())
}

/// Runs the ops; returns how many records the log holds at the end.
fn run(ops: Vec<Op>, small_map: bool) -> Result<usize, TestCaseError> {
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = config(small_map);
    let mut log = open(&fs, &clock, &cfg).unwrap();
    let mut model = Model::default();
    let mut now = T0;
    let mut written = 0usize;
    for op in ops {
        match op {
            Op::Send { producer, records } => {
                let mut b = BatchBuilder::new();
                if let Some(p) = producer {
                    b = b.producer(p as i64 + 1, 0, model.next_seq[p]);
                }
                let mut recs = Vec::new();
                for (key, tombstone) in &records {
                    written += 1;
                    let k = format!("key{key}").into_bytes();
                    let v = (!tombstone).then(|| value_of(*key, written));
                    b.append(T0, Some(&k), v.as_deref(), &[]);
                    recs.push((k, v));
                }
                let client = b.build().unwrap();
                match log.append(&client).unwrap() {
                    AppendOutcome::Appended(a) => {
                        prop_assert_eq!(a.first_offset, model.end);
                        for (i, (k, v)) in recs.into_iter().enumerate() {
                            model.records.push((a.first_offset + i as i64, k, v));
                        }
                        model.end = a.last_offset + 1;
                        if let Some(p) = producer {
                            model.next_seq[p] += records.len() as i32;
                            model.sent[p].push(Sent {
                                first: a.first_offset,
                                last: a.last_offset,
                                client,
                            });
                        }
                    }
                    other => prop_assert!(false, "append: {:?}", other),
                }
            }
            Op::Retry { producer, back } => {
                let sent = &model.sent[producer];
                if let Some(s) = sent.iter().rev().take(WINDOW).nth(back) {
                    match log.append(&s.client).unwrap() {
                        AppendOutcome::Duplicate(d) => {
                            prop_assert_eq!((d.first_offset, d.last_offset), (s.first, s.last))
                        }
                        other => prop_assert!(false, "retry answered {:?}", other),
                    }
                }
            }
            Op::Flush => {
                log.flush().unwrap();
                model.durable = model.end;
            }
            Op::Compact { half_days } => {
                now += i64::from(half_days) * DAY / 2;
                let r = log.maintenance().compact(now).unwrap();
                model.durable = model.end;
                if r.passes > 0 {
                    model.cleaned_to = model.cleaned_to.max(r.cleaned_to);
                }
                expect_window(&log, &model)?;
            }
            Op::Reopen => {
                log.close().unwrap();
                drop(log);
                log = open(&fs, &clock, &cfg).unwrap();
                model.durable = model.end;
                expect_window(&log, &model)?;
            }
            Op::Crash { seed } => {
                log.abandon();
                fs.crash(seed);
                log = open(&fs, &clock, &cfg).unwrap();
                let end = log.log_end_offset();
                prop_assert!(
                    end >= model.durable,
                    "end {} below the durable {}",
                    end,
                    model.durable
                );
                model.cut(end);
                model.durable = end;
                expect_window(&log, &model)?;
            }
        }
        check(&log, &model)?;
    }
    // A last compaction far in the future: every tombstone's horizon has passed.
    for later in [3 * DAY, 6 * DAY] {
        let r = log.maintenance().compact(now + later).unwrap();
        if r.passes > 0 {
            model.cleaned_to = model.cleaned_to.max(r.cleaned_to);
        }
    }
    check(&log, &model)?;
    expect_window(&log, &model)?;
    let held = read_all(&log)?.len();
    log.abandon();
    Ok(held)
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(64),
        ..ProptestConfig::default()
    })]

    #[test]
    fn compaction_keeps_the_model(ops in proptest::collection::vec(op(), 1..150), small_map in any::<bool>()) {
        run(ops, small_map)?;
    }
}

#[test]
fn the_model_is_not_vacuous() {
    // Many versions of few keys, a tombstone, compactions before and after its horizon: the
    // log must shrink, and the tombstoned key must go.
    let mut ops = Vec::new();
    for i in 0..120u8 {
        ops.push(Op::Send {
            producer: Some(usize::from(i % 3)),
            records: vec![(i % 4, i == 50)],
        });
    }
    ops.push(Op::Compact { half_days: 0 });
    ops.push(Op::Crash { seed: 3 });
    ops.push(Op::Compact { half_days: 3 });
    for small_map in [false, true] {
        let held = run(ops.clone(), small_map).unwrap();
        // 4 keys, one tombstoned long ago; the rest is the active segment's.
        assert!(held < 40, "{held} of 120 records left");
    }
}
