//! Property test: random producers, retries, epoch bumps, gaps and reopens against a model.
//! Whatever the sequence, no record is stored twice and none is missing.

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::producer::ProducerError;
use oncelog::{AppendError, AppendOutcome, Log, LogConfig};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Send { producer: usize, records: usize },
    Retry { producer: usize, back: usize },
    BumpEpoch { producer: usize },
    StaleEpoch { producer: usize },
    Gap { producer: usize },
    Plain,
    Flush,
    Reopen,
    CrashReopen,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (0..3usize, 1..5usize).prop_map(|(producer, records)| Op::Send { producer, records }),
        4 => (0..3usize, 0..7usize).prop_map(|(producer, back)| Op::Retry { producer, back }),
        1 => (0..3usize).prop_map(|producer| Op::BumpEpoch { producer }),
        1 => (0..3usize).prop_map(|producer| Op::StaleEpoch { producer }),
        1 => (0..3usize).prop_map(|producer| Op::Gap { producer }),
        1 => Just(Op::Plain),
        1 => Just(Op::Flush),
        1 => Just(Op::Reopen),
        1 => Just(Op::CrashReopen),
    ]
}

#[derive(Default, Clone)]
struct Producer {
    epoch: i16,
    next_seq: i32,
    /// Batches of the current epoch: bytes and original offsets.
    sent: Vec<(Vec<u8>, i64, i64)>,
}

fn build(pid: i64, epoch: i16, seq: i32, records: usize, tag: u64) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(pid, epoch, seq);
    for i in 0..records {
        let v = format!("{tag}-{i}");
        b.append(1_700_000_000_000, None, Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(4096)
        .segment_index_bytes(512)
        .snapshot_interval_bytes(2048)
        .build()
        .unwrap()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    #[test]
    fn no_record_twice_and_none_missing(ops in proptest::collection::vec(op(), 1..80)) {
        let dir = tempfile::tempdir().unwrap();
        let mut log = Log::open(dir.path(), config()).unwrap();
        let mut producers = vec![Producer::default(); 3];
        let mut stored: Vec<(i64, String)> = Vec::new(); // (offset, value) in order
        let mut tag = 0u64;
        for op in ops {
            tag += 1;
            match op {
                Op::Send { producer, records } => {
                    let p = &mut producers[producer];
                    let b = build(producer as i64, p.epoch, p.next_seq, records, tag);
                    let AppendOutcome::Appended(info) = log.append(&b).unwrap() else {
                        panic!("fresh batch not appended")
                    };
                    prop_assert_eq!(info.first_offset, stored.len() as i64);
                    for i in 0..records {
                        stored.push((info.first_offset + i as i64, format!("{tag}-{i}")));
                    }
                    p.next_seq += records as i32;
                    p.sent.push((b, info.first_offset, info.last_offset));
                }
                Op::Retry { producer, back } => {
                    let p = &producers[producer];
                    if back >= p.sent.len() {
                        continue;
                    }
                    let (b, first, last) = &p.sent[p.sent.len() - 1 - back];
                    let outcome = log.append(b);
                    if back < 5 {
                        match outcome {
                            Ok(AppendOutcome::Duplicate(d)) => prop_assert_eq!((d.first_offset, d.last_offset), (*first, *last)),
                            other => prop_assert!(false, "retry {} back gave {:?}", back, other),
                        }
                    } else {
                        let refused = matches!(outcome, Err(AppendError::Producer(ProducerError::OutOfOrderSequence { .. })));
                        prop_assert!(refused, "{:?}", outcome);
                    }
                }
                Op::BumpEpoch { producer } => {
                    let p = &mut producers[producer];
                    p.epoch += 1;
                    p.next_seq = 0;
                    p.sent.clear();
                }
                Op::StaleEpoch { producer } => {
                    let p = &producers[producer];
                    // Stale only once the log has seen a batch of the newer epoch.
                    if p.epoch == 0 || p.sent.is_empty() {
                        continue;
                    }
                    let b = build(producer as i64, p.epoch - 1, p.next_seq, 1, tag);
                    let refused = matches!(log.append(&b), Err(AppendError::Producer(ProducerError::InvalidProducerEpoch { .. })));
                    prop_assert!(refused);
                }
                Op::Gap { producer } => {
                    let p = &producers[producer];
                    if p.sent.is_empty() {
                        continue;
                    }
                    let b = build(producer as i64, p.epoch, p.next_seq + 1, 1, tag);
                    let refused = matches!(log.append(&b), Err(AppendError::Producer(ProducerError::OutOfOrderSequence { .. })));
                    prop_assert!(refused);
                }
                Op::Plain => {
                    let mut b = BatchBuilder::new();
                    b.append(1_700_000_000_000, None, Some(format!("{tag}-0").as_bytes()), &[]);
                    let AppendOutcome::Appended(info) = log.append(&b.build().unwrap()).unwrap() else { panic!() };
                    stored.push((info.first_offset, format!("{tag}-0")));
                }
                Op::Flush => log.flush().unwrap(),
                Op::Reopen => {
                    log.close().unwrap();
                    drop(log);
                    log = Log::open(dir.path(), config()).unwrap();
                }
                Op::CrashReopen => {
                    log.flush().unwrap();
                    log.abandon();
                    log = Log::open(dir.path(), config()).unwrap();
                }
            }
        }
        // The log holds exactly the model's records, in order, once each.
        let mut got = Vec::new();
        let mut next = 0;
        while next < log.log_end_offset() {
            let bytes = log.read(next, 1 << 16).unwrap();
            for item in BatchIter::new(&bytes) {
                let (_, b) = item.unwrap();
                let buf = b.records_buf().unwrap();
                for r in b.iter_records(&buf) {
                    let r = r.unwrap();
                    got.push((r.offset, String::from_utf8(r.value.unwrap().to_vec()).unwrap()));
                }
                next = b.last_offset() + 1;
            }
        }
        prop_assert_eq!(got, stored);
    }
}
