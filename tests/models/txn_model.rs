//! Property test of transactions (docs/design.md, "How the guarantees are tested"): random
//! interleavings of transactional, idempotent and plain producers, COMMIT and ABORT markers
//! (some from a fenced coordinator), non-transactional batches inside open transactions,
//! flushes, truncations, clean reopens and reopens after a crash of the process (which may
//! lose what was not flushed, never what was), checked after every step against a plain model: the open transactions, the first unstable and last stable
//! offsets, every `.txnindex` entry, and the records a read_committed and a read_uncommitted
//! consumer receive.
//!
//! `ONCELOG_TXN_MODEL_CASES=<n>` runs more cases (default 48).

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{env_with, TestClock, T0};
use oncelog::format::BatchBuilder;
use oncelog::producer::ProducerError;
use oncelog::segment::txn_index::{self, AbortedTxn};
use oncelog::{AppendError, AppendOutcome, IsolationLevel, Log, LogConfig, TxnMarker};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// A transactional batch of producer `10 + p`.
    Txn {
        p: i64,
        records: usize,
    },
    /// A non-transactional batch of producer `10 + p` (refused inside its open transaction).
    NonTxn {
        p: i64,
        records: usize,
    },
    /// An idempotent producer's batch.
    Idempotent {
        p: i64,
        records: usize,
    },
    Plain {
        records: usize,
    },
    /// A marker for producer `10 + p`; `fenced` asks for a coordinator epoch below its last.
    Marker {
        p: i64,
        abort: bool,
        bump: bool,
        fenced: bool,
    },
    Flush,
    /// Truncates to the offset `back` below the end (the batch holding it goes whole).
    Truncate {
        back: u64,
    },
    CloseReopen,
    CrashReopen {
        flush_first: bool,
    },
    Read {
        max_bytes: usize,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0i64..3, 1usize..6).prop_map(|(p, records)| Op::Txn { p, records }),
        1 => (0i64..3, 1usize..3).prop_map(|(p, records)| Op::NonTxn { p, records }),
        3 => (0i64..2, 1usize..6).prop_map(|(p, records)| Op::Idempotent { p, records }),
        2 => (1usize..6).prop_map(|records| Op::Plain { records }),
        6 => (0i64..3, any::<bool>(), any::<bool>(), prop::bool::weighted(0.15))
            .prop_map(|(p, abort, bump, fenced)| Op::Marker { p, abort, bump, fenced }),
        3 => Just(Op::Flush),
        1 => (0u64..40).prop_map(|back| Op::Truncate { back }),
        1 => Just(Op::CloseReopen),
        1 => any::<bool>().prop_map(|flush_first| Op::CrashReopen { flush_first }),
        2 => (100usize..4000).prop_map(|max_bytes| Op::Read { max_bytes }),
    ]
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(4 * 1024)
        .segment_index_bytes(4096)
        .index_interval_bytes(200)
        .build()
        .unwrap()
}

/// One batch of the model.
#[derive(Debug, Clone)]
struct Batch {
    base: i64,
    last: i64,
    producer: Option<i64>,
    transactional: bool,
    /// For a marker: (abort, coordinator epoch).
    marker: Option<(bool, i32)>,
    /// The sequence of its first record (its records' values are made of it).
    seq: i32,
}

/// What the log must hold: its batches, from which everything else is derived by replaying
/// them with Kafka's rules (independently of the engine's code).
#[derive(Debug, Default)]
struct Model {
    batches: Vec<Batch>,
    /// The next sequence of each producer, as the log's producer state knows it.
    seq: BTreeMap<i64, i32>,
    /// Every batch below this offset is durable: a crash may lose only what is after it.
    durable_end: i64,
    /// Where the log's last replay of producer state started (its snapshot, or the log
    /// start): like Kafka's, it knows the completed transactions the high watermark has not
    /// passed only from there on.
    replayed_from: i64,
}

/// What a replay of the model's batches gives.
#[derive(Debug, Default)]
struct Derived {
    /// Open transactions: producer → first offset.
    ongoing: BTreeMap<i64, i64>,
    /// (producer, first offset, marker offset, abort, index LSO).
    completed: Vec<(i64, i64, i64, bool, i64)>,
    /// The coordinator epoch of each producer's last marker.
    coordinator: BTreeMap<i64, i32>,
}

impl Model {
    fn end(&self) -> i64 {
        self.batches.last().map_or(0, |b| b.last + 1)
    }

    fn derive(&self) -> Derived {
        let mut d = Derived::default();
        for b in &self.batches {
            let Some(pid) = b.producer else { continue };
            match b.marker {
                Some((abort, ce)) => {
                    if let Some(first) = d.ongoing.remove(&pid) {
                        let lso = d.ongoing.values().min().map_or(b.base + 1, |f| *f);
                        d.completed.push((pid, first, b.base, abort, lso));
                    }
                    d.coordinator.insert(pid, ce);
                }
                None if b.transactional => {
                    d.ongoing.entry(pid).or_insert(b.base);
                }
                None => {}
            }
        }
        d
    }

    fn first_unstable(&self, hw: i64, log_start: i64) -> Option<i64> {
        let d = self.derive();
        let ongoing = d.ongoing.values().copied();
        let unreplicated = d
            .completed
            .iter()
            .filter(|c| c.2 >= hw && c.2 >= self.replayed_from)
            .map(|c| c.1);
        ongoing.chain(unreplicated).min().map(|f| f.max(log_start))
    }

    fn last_stable(&self, hw: i64, log_start: i64) -> i64 {
        match self.first_unstable(hw, log_start) {
            Some(f) if f < hw => f,
            _ => hw,
        }
    }

    /// The offsets a consumer receives from the log start below `bound`, without the records
    /// of aborted transactions under read_committed.
    fn consumed(&self, bound: i64, committed: bool) -> Vec<(i64, String)> {
        let d = self.derive();
        let aborted = |pid: i64, o: i64| {
            d.completed
                .iter()
                .any(|c| c.0 == pid && c.3 && c.1 <= o && o <= c.2)
        };
        let mut out = Vec::new();
        for b in self.batches.iter().filter(|b| b.base < bound) {
            if b.marker.is_some() {
                continue;
            }
            for o in b.base..=b.last {
                let skip =
                    committed && b.transactional && b.producer.is_some_and(|pid| aborted(pid, o));
                if !skip {
                    out.push((o, value(b.producer, b.seq + (o - b.base) as i32)));
                }
            }
        }
        out
    }

    fn aborted_entries(&self) -> Vec<AbortedTxn> {
        self.derive()
            .completed
            .iter()
            .filter(|c| c.3)
            .map(
                |&(producer_id, first_offset, last_offset, _, last_stable_offset)| AbortedTxn {
                    producer_id,
                    first_offset,
                    last_offset,
                    last_stable_offset,
                },
            )
            .collect()
    }

    /// Forgets the batches at or after `end`, and the sequences they took (every producer
    /// here writes epoch 0 from sequence 0).
    fn truncate(&mut self, end: i64) {
        self.batches.retain(|b| b.last < end);
        self.durable_end = self.durable_end.min(end);
        self.seq.clear();
        for b in self.batches.iter().filter(|b| b.marker.is_none()) {
            if let Some(pid) = b.producer {
                *self.seq.entry(pid).or_insert(0) += (b.last - b.base + 1) as i32;
            }
        }
    }
}

/// The value of the record of producer `pid` at sequence `seq` (a plain batch counts from 0).
fn value(pid: Option<i64>, seq: i32) -> String {
    format!("{pid:?}/{seq}")
}

fn client(pid: Option<i64>, seq: i32, records: usize, transactional: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new().transactional(transactional);
    if let Some(pid) = pid {
        b = b.producer(pid, 0, seq);
    }
    for i in 0..records {
        let value = value(pid, seq + i as i32);
        b.append(T0, Some(b"k"), Some(value.as_bytes()), &[]);
    }
    b.build().unwrap()
}

fn open(dir: &Path) -> Log {
    Log::open_in(env_with(TestClock::new(T0)), dir, config()).unwrap()
}

fn consumed(log: &Log, isolation: IsolationLevel, max_bytes: usize) -> Vec<(i64, String)> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    loop {
        let f = log.fetch_isolated(next, max_bytes, isolation).unwrap();
        if f.bytes.is_empty() {
            return out;
        }
        out.extend(f.records().map(|r| {
            let r = r.unwrap();
            let v = String::from_utf8(r.value.unwrap().to_vec()).unwrap();
            (r.offset, v)
        }));
        next = f.next_offset;
    }
}

fn check(log: &Log, dir: &Path, model: &Model, max_bytes: usize) {
    assert_eq!(log.log_end_offset(), model.end());
    let d = model.derive();
    for pid in 10..13 {
        let open = log.producer(pid).and_then(|e| e.current_txn_first_offset());
        assert_eq!(
            open,
            d.ongoing.get(&pid).copied(),
            "pid {pid}'s open transaction"
        );
    }
    let (hw, start) = (log.high_watermark(), log.log_start_offset());
    assert_eq!(log.first_unstable_offset(), model.first_unstable(hw, start));
    let lso = log.last_stable_offset();
    assert_eq!(lso, model.last_stable(hw, start), "hw {hw}");
    assert_eq!(
        consumed(log, IsolationLevel::ReadCommitted, max_bytes),
        model.consumed(lso, true)
    );
    assert_eq!(
        consumed(log, IsolationLevel::ReadUncommitted, max_bytes),
        model.consumed(hw, false)
    );
    // Every aborted transaction in the index of the segment that holds its marker.
    let bases = log.maintenance().segment_base_offsets();
    let mut stored = Vec::new();
    for (i, base) in bases.iter().enumerate() {
        let bytes = std::fs::read(dir.join(format!("{base:020}.txnindex"))).unwrap_or_default();
        let next = bases.get(i + 1).copied().unwrap_or(i64::MAX);
        for e in txn_index::decode(&bytes) {
            let e = e.unwrap();
            assert!(
                e.last_offset >= *base && e.last_offset < next,
                "{e:?} in {base}"
            );
            stored.push(e);
        }
    }
    assert_eq!(stored, model.aborted_entries());
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = open(dir.path());
    let mut model = Model::default();
    let mut max_bytes = 1000;
    // Whether the clean checkpoint of the last clean close may still be on disk: nothing
    // changed since (opening writes nothing until the first change; an open that removes
    // leftovers writes the unclean one), so a crash may need no recovery. Once the log changed,
    // a crash must be recovered as one.
    let mut maybe_clean = false;
    for op in ops {
        let end = model.end();
        let before = (model.end(), log.log_start_offset());
        match op {
            Op::Txn { p, records } | Op::NonTxn { p, records } => {
                let transactional = matches!(op, Op::Txn { .. });
                let pid = 10 + p;
                let seq = *model.seq.get(&pid).unwrap_or(&0);
                let open_txn = model.derive().ongoing.get(&pid).copied();
                let result = log.append(&client(Some(pid), seq, records, transactional));
                match (transactional, open_txn, result) {
                    (false, Some(first), Err(AppendError::Producer(e))) => assert_eq!(
                        e,
                        ProducerError::InvalidTxnState {
                            producer_id: pid,
                            txn_first_offset: first
                        }
                    ),
                    (_, _, Ok(AppendOutcome::Appended(info))) => {
                        assert!(transactional || open_txn.is_none());
                        assert_eq!(info.first_offset, end);
                        model.seq.insert(pid, seq + records as i32);
                        model.batches.push(Batch {
                            base: end,
                            last: info.last_offset,
                            producer: Some(pid),
                            transactional,
                            marker: None,
                            seq,
                        });
                    }
                    (_, _, other) => panic!("{op:?}: {other:?}"),
                }
            }
            Op::Idempotent { p, records } => append_plain(&log, &mut model, Some(1 + p), records),
            Op::Plain { records } => append_plain(&log, &mut model, None, records),
            Op::Marker {
                p,
                abort,
                bump,
                fenced,
            } => {
                let pid = 10 + p;
                let current = model.derive().coordinator.get(&pid).copied();
                let ce = match (current, fenced, bump) {
                    (Some(c), true, _) if c > 0 => c - 1,
                    (Some(c), _, true) => c + 1,
                    (Some(c), _, false) => c,
                    (None, _, _) => 0,
                };
                let marker = if abort {
                    TxnMarker::abort(pid, 0, ce)
                } else {
                    TxnMarker::commit(pid, 0, ce)
                };
                let known = log.producer(pid).is_some();
                match log.append_marker(&marker) {
                    Ok(info) => {
                        assert!(!known || current.is_none_or(|c| ce >= c));
                        assert_eq!(info.first_offset, end);
                        model.batches.push(Batch {
                            base: end,
                            last: end,
                            producer: Some(pid),
                            transactional: true,
                            marker: Some((abort, ce)),
                            seq: 0,
                        });
                    }
                    Err(AppendError::Producer(ProducerError::CoordinatorFenced {
                        current: c,
                        got,
                        ..
                    })) => {
                        assert_eq!((Some(c), got), (current, ce));
                        assert!(ce < c);
                    }
                    Err(e) => panic!("{op:?}: {e}"),
                }
            }
            Op::Flush => {
                log.flush().unwrap();
                model.durable_end = end;
            }
            Op::Truncate { back } => {
                let target = end.saturating_sub(back as i64).max(log.log_start_offset());
                let report = log.replica().truncate_to(target).unwrap();
                // The batch holding the target goes whole.
                let expected = model
                    .batches
                    .iter()
                    .find(|b| b.last >= target)
                    .map_or(target, |b| b.base);
                assert_eq!(report.new_log_end, expected);
                if expected < end {
                    model.replayed_from = report
                        .producers
                        .snapshot_offset
                        .unwrap_or(log.log_start_offset());
                }
                model.truncate(expected);
            }
            Op::CloseReopen => {
                log.close().unwrap();
                model.durable_end = end;
                log = open(dir.path());
                assert!(log.recovery_report().clean_shutdown);
                maybe_clean = true;
                model.replayed_from = replayed_from(&log);
            }
            Op::CrashReopen { flush_first } => {
                if flush_first {
                    log.flush().unwrap();
                    model.durable_end = end;
                }
                log.abandon();
                log = open(dir.path());
                let clean = log.recovery_report().clean_shutdown;
                assert!(
                    maybe_clean || !clean,
                    "a crash after a change opened as clean"
                );
                maybe_clean = clean;
                // Recovery may cut what was not durable (after a truncation, the dead bytes of
                // the cut segment and the new active segment's batches are sorted out that way),
                // at a batch boundary, and nothing durable.
                let recovered = log.log_end_offset();
                assert!(
                    recovered >= model.durable_end,
                    "{recovered} < {}",
                    model.durable_end
                );
                assert!(
                    recovered == end || model.batches.iter().any(|b| b.base == recovered),
                    "{recovered} is no batch boundary"
                );
                model.truncate(recovered);
                model.durable_end = recovered;
                model.replayed_from = replayed_from(&log);
            }
            Op::Read { max_bytes: m } => max_bytes = m,
        }
        if before != (model.end(), log.log_start_offset()) {
            maybe_clean = false;
        }
        check(&log, dir.path(), &model, max_bytes);
    }
    log.flush().unwrap();
    check(&log, dir.path(), &model, max_bytes);
    log.close().unwrap();
    let log = open(dir.path());
    check(&log, dir.path(), &model, max_bytes);
}

fn replayed_from(log: &Log) -> i64 {
    log.producer_load_report()
        .snapshot_offset
        .unwrap_or(log.log_start_offset())
}

/// A non-transactional batch, of an idempotent producer or of none.
fn append_plain(log: &Log, model: &mut Model, pid: Option<i64>, records: usize) {
    let end = model.end();
    let seq = pid.map_or(0, |pid| *model.seq.get(&pid).unwrap_or(&0));
    let info = match log.append(&client(pid, seq, records, false)).unwrap() {
        AppendOutcome::Appended(info) => info,
        other => panic!("{other:?}"),
    };
    assert_eq!(info.first_offset, end);
    if let Some(pid) = pid {
        model.seq.insert(pid, seq + records as i32);
    }
    model.batches.push(Batch {
        base: end,
        last: info.last_offset,
        producer: pid,
        transactional: false,
        marker: None,
        seq,
    });
}

fn cases() -> u32 {
    std::env::var("ONCELOG_TXN_MODEL_CASES")
        .ok()
        .map(|v| v.parse().expect("ONCELOG_TXN_MODEL_CASES is a number"))
        .unwrap_or(48)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: cases(), ..ProptestConfig::default() })]

    #[test]
    fn transactions_match_a_model_of_kafkas_rules(ops in proptest::collection::vec(op(), 1..60)) {
        run(ops);
    }
}

#[test]
fn a_fixed_interleaving_of_three_transactional_producers_matches_the_model() {
    let mut ops = Vec::new();
    for i in 0..120i64 {
        ops.push(Op::Txn {
            p: i % 3,
            records: 1 + (i % 4) as usize,
        });
        if i % 4 == 3 {
            ops.push(Op::Marker {
                p: (i / 4) % 3,
                abort: i % 3 == 0,
                bump: i % 5 == 0,
                fenced: i % 11 == 0,
            });
        }
        if i % 7 == 0 {
            ops.push(Op::Idempotent { p: 0, records: 2 });
        }
        if i % 13 == 5 {
            ops.push(Op::Flush);
        }
        if i % 29 == 17 {
            ops.push(Op::CrashReopen {
                flush_first: i % 2 == 0,
            });
        }
        if i % 37 == 20 {
            ops.push(Op::Truncate { back: 6 });
        }
        if i % 41 == 30 {
            ops.push(Op::CloseReopen);
        }
    }
    run(ops);
}
