//! Property test: random sequences of appends, replicated appends, reads, flushes, clean and
//! unclean reopens against a `Vec` of batches (docs/design.md, "How the guarantees are tested").
//! Small segments and indexes make rolls on size, time and a full index happen along the way.

use crate::common;

use common::{read_all, T0};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{AppendOutcome, Log, LogConfig};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    /// A client batch of `records` records with `value_len`-byte values from time `ts`.
    Append {
        records: usize,
        value_len: usize,
        ts: i64,
    },
    /// A batch carrying its own offsets, `gap` past the log end.
    Replicate {
        gap: i64,
        records: usize,
        ts: i64,
    },
    Read {
        at: u64,
        max_bytes: usize,
    },
    Flush,
    CloseReopen,
    AbandonReopen {
        flush_first: bool,
    },
}

fn op() -> impl Strategy<Value = Op> {
    let ts = -7_200_000i64..7_200_000;
    prop_oneof![
        6 => (1usize..20, 0usize..3000, ts.clone())
            .prop_map(|(records, value_len, ts)| Op::Append { records, value_len, ts }),
        // Roll-inducing: a fifth of a segment or more in one batch.
        1 => (1usize..4, 12_000usize..20_000, ts.clone())
            .prop_map(|(records, value_len, ts)| Op::Append { records, value_len, ts }),
        2 => (0i64..3, 1usize..10, ts)
            .prop_map(|(gap, records, ts)| Op::Replicate { gap, records, ts }),
        4 => (any::<u64>(), 0usize..40_000).prop_map(|(at, max_bytes)| Op::Read { at, max_bytes }),
        1 => Just(Op::Flush),
        1 => Just(Op::CloseReopen),
        1 => any::<bool>().prop_map(|flush_first| Op::AbandonReopen { flush_first }),
    ]
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(64 * 1024)
        .segment_index_bytes(96)
        .segment_ms(3_600_000)
        .build()
        .unwrap()
}

/// One stored batch of the model: its offsets and the exact bytes the log must return.
struct Stored {
    base: i64,
    last: i64,
    bytes: Vec<u8>,
}

fn build(records: usize, value_len: usize, ts: i64, seed: u64) -> BatchBuilder {
    let mut b = BatchBuilder::new();
    for i in 0..records {
        let value: Vec<u8> = (0..value_len)
            .map(|j| (seed as usize + i * 31 + j) as u8)
            .collect();
        let key = format!("k{seed}-{i}");
        b.append(T0 + ts + i as i64, Some(key.as_bytes()), Some(&value), &[]);
    }
    b
}

fn check_read(log: &Log, model: &[Stored], at: u64, max_bytes: usize) {
    let end = log.log_end_offset();
    let offset = (at % (end as u64 + 2)) as i64;
    if offset > end {
        assert!(log.read(offset, max_bytes).is_err());
        return;
    }
    let bytes = log.read(offset, max_bytes).unwrap();
    let Some(first) = model.iter().position(|s| s.last >= offset) else {
        assert!(bytes.is_empty(), "read at the end gives nothing");
        return;
    };
    let got: Vec<&[u8]> = BatchIter::new(&bytes)
        .map(|i| i.expect("whole batches").1.as_bytes())
        .collect();
    assert!(!got.is_empty(), "at least one batch below the end");
    assert!(bytes.len() <= max_bytes.max(model[first].bytes.len()));
    for (k, g) in got.iter().enumerate() {
        let want = &model[first + k];
        assert_eq!(
            *g,
            &want.bytes[..],
            "batch {} of a read at {offset}",
            want.base
        );
    }
}

fn check_all(log: &Log, model: &[Stored]) {
    let end = model.last().map_or(0, |s| s.last + 1);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.log_start_offset(), 0);
    let all = read_all(log, 1 << 20);
    assert_eq!(all.len(), model.len());
    for (g, w) in all.iter().zip(model) {
        assert_eq!(g, &w.bytes, "batch {}", w.base);
    }
}

fn run(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    let mut log = Log::open(dir.path(), config()).unwrap();
    // Client batches carry epoch 3 from here on; reopens find it in the epoch cache.
    log.replica().set_leader_epoch(3).unwrap();
    let mut model: Vec<Stored> = Vec::new();
    // Whether the log was opened from a clean close and has not changed since: its clean
    // checkpoint is still on disk, and a crash then needs no recovery.
    let mut untouched = false;
    for (seed, op) in ops.into_iter().enumerate() {
        if matches!(op, Op::Append { .. } | Op::Replicate { .. }) {
            untouched = false;
        }
        let end = model.last().map_or(0, |s| s.last + 1);
        match op {
            Op::Append {
                records,
                value_len,
                ts,
            } => {
                let sent = build(records, value_len, ts, seed as u64).build().unwrap();
                match log.append(&sent).unwrap() {
                    AppendOutcome::Appended(info) => {
                        assert_eq!(info.first_offset, end);
                        assert_eq!(info.last_offset, end + records as i64 - 1);
                    }
                    other => panic!("{other:?}"),
                }
                // The log rewrites baseOffset and partitionLeaderEpoch, nothing else.
                let mut bytes = sent;
                bytes[0..8].copy_from_slice(&end.to_be_bytes());
                bytes[12..16].copy_from_slice(&3i32.to_be_bytes());
                model.push(Stored {
                    base: end,
                    last: info_last(end, records),
                    bytes,
                });
            }
            Op::Replicate { gap, records, ts } => {
                let base = end + gap;
                let sent = build(records, 100, ts, seed as u64)
                    .base_offset(base)
                    .partition_leader_epoch(2)
                    .build()
                    .unwrap();
                let info = log.replica().append(&sent).unwrap().unwrap();
                assert_eq!(info.first_offset, base);
                model.push(Stored {
                    base,
                    last: info_last(base, records),
                    bytes: sent,
                });
            }
            Op::Read { at, max_bytes } => check_read(&log, &model, at, max_bytes),
            Op::Flush => {
                log.flush().unwrap();
                assert_eq!(log.recovery_point(), end);
            }
            Op::CloseReopen => {
                log.close().unwrap();
                log = Log::open(dir.path(), config()).unwrap();
                // A leader sets its epoch again after opening (an epoch that wrote nothing yet
                // is not in the cache of a reopened log, as in Kafka).
                log.replica().set_leader_epoch(3).unwrap();
                assert!(log.recovery_report().clean_shutdown);
                untouched = true;
                check_all(&log, &model);
            }
            Op::AbandonReopen { flush_first } => {
                if flush_first {
                    log.flush().unwrap();
                }
                log.abandon();
                log = Log::open(dir.path(), config()).unwrap();
                log.replica().set_leader_epoch(3).unwrap();
                let report = log.recovery_report().clone();
                // A crash before the first change after a clean open needs no recovery: that
                // open changed no file (nothing is preallocated before the first append), so
                // this one finds the clean checkpoint and changes nothing either.
                assert_eq!(report.clean_shutdown, untouched, "{report:?}");
                // The page cache keeps every write on the real file system: nothing is torn.
                assert!(report.truncations.is_empty(), "{report:?}");
                check_all(&log, &model);
            }
        }
        assert_eq!(log.log_end_offset(), model.last().map_or(0, |s| s.last + 1));
    }
    check_all(&log, &model);
    log.close().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    check_all(&log, &model);
}

fn info_last(base: i64, records: usize) -> i64 {
    base + records as i64 - 1
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn log_matches_a_vec_of_batches(ops in proptest::collection::vec(op(), 1..40)) {
        run(ops);
    }
}

#[test]
fn a_long_fixed_sequence_rolls_on_every_rule_and_matches_the_model() {
    // A deterministic run long enough to roll many times (size, full index, time).
    let mut ops = Vec::new();
    for i in 0..150i64 {
        ops.push(Op::Append {
            records: 1 + (i % 19) as usize,
            value_len: ((i * 997) % 2900) as usize,
            ts: (i * 60_000) % 7_000_000,
        });
        if i % 10 == 0 {
            ops.push(Op::Replicate {
                gap: i % 3,
                records: 2,
                ts: i,
            });
        }
        if i % 25 == 7 {
            ops.push(Op::AbandonReopen {
                flush_first: i % 2 == 0,
            });
        }
        if i % 40 == 13 {
            ops.push(Op::CloseReopen);
        }
        ops.push(Op::Read {
            at: (i as u64) * 7_777,
            max_bytes: (i as usize * 331) % 9000,
        });
    }
    run(ops);
}
