//! Property test of the rewritable log: random appends from idempotent
//! producers and retries, truncations, DeleteRecords, retention, leader-epoch changes, clean
//! reopens and crashes (of the simulated file system: what was not synced may be lost) against
//! a plain model: the batches, the log start, every producer's batches and the epoch cache. After every step the log must agree with the model: the same batches
//! from the same log start, the same epochs, each retry in a window a duplicate with its
//! original offsets (also for batches retention removed), older retries and retries of
//! truncated batches answered as Kafka would.
//!
//! `PROPTEST_CASES` sets the number of cases (default 96).

use crate::common_sim;

use std::sync::Arc;

use common_sim::{open, StepClock};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::SimFs;
use oncelog::producer::ProducerError;
use oncelog::{AppendError, AppendOutcome, AppendWrites, Log, LogConfig};
use proptest::prelude::*;

const T0: i64 = 1_700_000_000_000;
const PRODUCERS: usize = 3;
const WINDOW: usize = 5;

#[derive(Debug, Clone)]
enum Op {
    Send {
        producer: usize,
        records: usize,
    },
    Plain {
        records: usize,
    },
    Retry {
        producer: usize,
        back: usize,
    },
    Flush,
    /// Truncate to `frac` of the way from the log start to the log end.
    Truncate {
        frac: u8,
    },
    /// DeleteRecords to `frac` of the way from the log start to the high watermark.
    DeleteRecords {
        frac: u8,
    },
    /// Retention at the time of batch `frac` of the way through the log's batches.
    Retention {
        frac: u8,
    },
    LeaderEpoch {
        up: i32,
    },
    Reopen,
    /// A power cut, after a flush or not, keeping a seeded choice of what was not synced.
    Crash {
        flush_first: bool,
        seed: u64,
    },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        8 => (0..PRODUCERS, 1..6usize).prop_map(|(producer, records)| Op::Send { producer, records }),
        1 => (1..4usize).prop_map(|records| Op::Plain { records }),
        4 => (0..PRODUCERS, 0..8usize).prop_map(|(producer, back)| Op::Retry { producer, back }),
        2 => Just(Op::Flush),
        1 => any::<u8>().prop_map(|frac| Op::Truncate { frac }),
        1 => any::<u8>().prop_map(|frac| Op::DeleteRecords { frac }),
        1 => any::<u8>().prop_map(|frac| Op::Retention { frac }),
        1 => (0..3i32).prop_map(|up| Op::LeaderEpoch { up }),
        1 => Just(Op::Reopen),
        1 => (any::<bool>(), any::<u64>()).prop_map(|(flush_first, seed)| Op::Crash { flush_first, seed }),
    ]
}

/// `recycled`: `LogConfig::recycled_segments` (half the cases recycle retention's files);
/// `writes`: how appends write (cases alternate between the map and the file).
fn config(recycled: usize, writes: AppendWrites) -> LogConfig {
    LogConfig::builder()
        .recycled_segments(recycled)
        .append_writes(writes)
        // Smaller segments where files are recycled: more rolls reuse the pool's files
        // before a reopen removes it.
        .segment_bytes(if recycled > 0 { 1024 } else { 2048 })
        .segment_index_bytes(256)
        // Time retention only: a batch's timestamp is its tag, in seconds.
        .retention_ms(Some(0))
        .file_delete_delay_ms(0)
        .build()
        .unwrap()
}

/// One batch the log holds, or held.
#[derive(Debug, Clone)]
struct Batch {
    first: i64,
    last: i64,
    bytes: Vec<u8>,
    client: Vec<u8>,
    producer: Option<usize>,
    ts: i64,
    /// The leader epoch it was stamped with.
    epoch: i32,
    /// Its segment was deleted by retention (it stays in the producer's history).
    gone: bool,
}

#[derive(Debug, Default)]
struct Model {
    /// The batches readable or removed by retention, in offset order (truncation removes).
    batches: Vec<Batch>,
    log_start: i64,
    log_end: i64,
    /// Every batch below it is durable.
    durable: i64,
    epochs: Vec<(i32, i64)>,
    leader_epoch: i32,
}

impl Model {
    fn end(&self) -> i64 {
        self.log_end
    }
    fn readable(&self) -> Vec<&Batch> {
        self.batches
            .iter()
            .filter(|b| b.last >= self.log_start)
            .collect()
    }
    /// A producer's batches still known to the log (retention keeps them known).
    fn history(&self, producer: usize) -> Vec<&Batch> {
        self.batches
            .iter()
            .filter(|b| b.producer == Some(producer))
            .collect()
    }
    fn next_seq(&self, producer: usize) -> i32 {
        self.history(producer)
            .last()
            .map_or(0, |b| seq_of(&b.client) + (b.last - b.first + 1) as i32)
    }
    /// Kafka's `truncateFromEnd` (entries starting at or after `end` go) and
    /// `truncateFromStart`.
    fn epochs_cut_end(&mut self, end: i64) {
        self.epochs.retain(|&(_, s)| s < end);
    }
    fn epochs_cut_start(&mut self, start: i64) {
        let n = self.epochs.iter().take_while(|&&(_, s)| s <= start).count();
        if n > 0 {
            let epoch = self.epochs[n - 1].0;
            self.epochs.drain(..n);
            self.epochs.insert(0, (epoch, start));
        }
    }
    /// Kafka's `assign`: a new epoch, or an earlier start for the latest, replaces every
    /// entry it does not follow.
    fn assign(&mut self, epoch: i32, start: i64) {
        if self
            .epochs
            .last()
            .is_none_or(|&(e, s)| epoch != e || start < s)
        {
            self.epochs.retain(|&(e, s)| e < epoch && s < start);
            self.epochs.push((epoch, start));
        }
    }
}

fn seq_of(client: &[u8]) -> i32 {
    i32::from_be_bytes(client[53..57].try_into().unwrap())
}

fn build(producer: Option<(usize, i32)>, records: usize, ts: i64, tag: u64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    if let Some((p, seq)) = producer {
        b = b.producer(10 + p as i64, 0, seq);
    }
    for i in 0..records {
        let v = format!("{tag}-{i}");
        b.append(ts, None, Some(v.as_bytes()), &[]);
    }
    b.build().unwrap()
}

fn frac_of(lo: i64, hi: i64, frac: u8) -> i64 {
    lo + (hi - lo) * frac as i64 / 255
}

/// The log agrees with the model: batches from the log start, epochs, ends.
fn check(log: &Log, model: &Model) -> Result<(), TestCaseError> {
    prop_assert_eq!(log.log_start_offset(), model.log_start);
    prop_assert_eq!(log.log_end_offset(), model.end());
    let mut got = Vec::new();
    let mut next = model.log_start;
    while next < model.end() {
        let bytes = log.read(next, 1 << 16).unwrap();
        prop_assert!(!bytes.is_empty());
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            got.push(b.as_bytes().to_vec());
            next = b.last_offset() + 1;
        }
    }
    let want: Vec<Vec<u8>> = model.readable().iter().map(|b| b.bytes.clone()).collect();
    prop_assert_eq!(got.len(), want.len());
    prop_assert!(got == want, "batches differ");
    let epochs: Vec<(i32, i64)> = log
        .replica()
        .leader_epochs()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    prop_assert_eq!(epochs, model.epochs.clone());
    Ok(())
}

/// After a reopen: recovery drops the epochs that start at or after the log end, as Kafka's
/// loader does, and the leader epoch is the latest of the cache's and of the newest batch
/// still in the segments.
fn reopened(model: &mut Model) {
    let end = model.end();
    model.epochs_cut_end(end);
    let cached = model.epochs.last().map(|&(e, _)| e);
    let newest = model
        .batches
        .iter()
        .rev()
        .find(|b| !b.gone)
        .map(|b| b.epoch);
    model.leader_epoch = cached.max(newest).unwrap_or(0);
}

fn run(ops: Vec<Op>) -> Result<(), TestCaseError> {
    let fs = SimFs::new();
    let clock: Arc<StepClock> = StepClock::new();
    // Recycled segment files in half the cases: retention fills the pool, rolls reuse its
    // files, full truncations empty it, crashes leave old bytes after the end.
    let writes = if ops.len() % 4 < 2 {
        AppendWrites::File
    } else {
        AppendWrites::Map
    };
    let cfg = config(if ops.len().is_multiple_of(2) { 2 } else { 0 }, writes);
    let mut log = open(&fs, &clock, &cfg).unwrap();
    let mut model = Model::default();
    let mut tag = 0u64;
    for op in ops {
        tag += 1;
        match op {
            Op::Send { producer, records } => {
                let seq = model.next_seq(producer);
                let client = build(Some((producer, seq)), records, T0 + tag as i64 * 1000, tag);
                let AppendOutcome::Appended(a) = log.append(&client).unwrap() else {
                    return Err(TestCaseError::fail("a new batch was a duplicate"));
                };
                prop_assert_eq!(a.first_offset, model.end());
                push(
                    &log,
                    &mut model,
                    a.first_offset,
                    a.last_offset,
                    client,
                    Some(producer),
                    tag,
                );
            }
            Op::Plain { records } => {
                let client = build(None, records, T0 + tag as i64 * 1000, tag);
                let AppendOutcome::Appended(a) = log.append(&client).unwrap() else {
                    unreachable!()
                };
                prop_assert_eq!(a.first_offset, model.end());
                push(
                    &log,
                    &mut model,
                    a.first_offset,
                    a.last_offset,
                    client,
                    None,
                    tag,
                );
            }
            Op::Retry { producer, back } => {
                let history = model.history(producer);
                let Some(b) = history
                    .len()
                    .checked_sub(1 + back)
                    .map(|i| history[i].clone())
                else {
                    continue;
                };
                let end = log.log_end_offset();
                let outcome = log.append(&b.client);
                if back < WINDOW {
                    match outcome {
                        Ok(AppendOutcome::Duplicate(d)) => {
                            prop_assert_eq!((d.first_offset, d.last_offset), (b.first, b.last))
                        }
                        other => {
                            return Err(TestCaseError::fail(format!(
                                "retry {back} back of producer {producer} ({}..={}): {other:?}",
                                b.first, b.last
                            )))
                        }
                    }
                } else {
                    let refused = matches!(
                        outcome,
                        Err(AppendError::Producer(
                            ProducerError::OutOfOrderSequence { .. }
                        ))
                    );
                    prop_assert!(refused, "{:?}", outcome);
                }
                prop_assert_eq!(log.log_end_offset(), end);
            }
            Op::Flush => {
                log.flush().unwrap();
                model.durable = model.end();
            }
            Op::Truncate { frac } => {
                let to = frac_of(model.log_start, model.end(), frac);
                let report = log.replica().truncate_to(to).unwrap();
                // Every batch holding an offset at or above `to` goes, whole: the log ends
                // where the first of them started, and its start follows if it was above.
                if let Some(first) = model.batches.iter().find(|b| b.last >= to).map(|b| b.first) {
                    model.batches.retain(|b| b.last < to);
                    model.log_end = first;
                    model.log_start = model.log_start.min(first);
                }
                let end = model.end();
                prop_assert_eq!(report.new_log_end, end);
                // Truncating to the log end changes nothing, the epochs included; otherwise
                // what is kept was made durable.
                if to < report.old_log_end {
                    model.epochs_cut_end(end);
                    model.durable = end;
                }
            }
            Op::DeleteRecords { frac } => {
                log.flush().unwrap();
                model.durable = model.end();
                let hw = log.high_watermark();
                prop_assert_eq!(hw, model.end());
                let to = frac_of(model.log_start, hw, frac);
                log.delete_records(to).unwrap();
                if to > model.log_start {
                    model.log_start = to;
                    model.epochs_cut_start(to);
                }
            }
            Op::Retention { frac } => {
                log.flush().unwrap();
                model.durable = model.end();
                let readable = model.readable();
                if readable.is_empty() {
                    continue;
                }
                let k = (readable.len() - 1) * frac as usize / 255;
                let now = readable[k].ts + 1;
                let segments_before = log.maintenance().segment_base_offsets();
                let report = log.maintenance().enforce_retention(now).unwrap();
                // Which segments go is the rules' to say (they have their own unit tests): the
                // model follows the log start reported, and checks that every batch removed
                // was older than `now` (retention_ms is 0).
                let start = report.log_start_offset;
                prop_assert!(start >= model.log_start);
                for d in &report.deleted {
                    prop_assert!(segments_before.contains(&d.base_offset));
                    for b in model
                        .batches
                        .iter_mut()
                        .filter(|b| b.first >= d.base_offset && b.first < d.next_offset)
                    {
                        b.gone = true;
                    }
                    for b in model
                        .batches
                        .iter()
                        .filter(|b| b.first >= d.base_offset && b.first < d.next_offset)
                    {
                        prop_assert!(
                            b.ts < now,
                            "batch at {} of {} removed at {}",
                            b.first,
                            b.ts,
                            now
                        );
                    }
                }
                if start > model.log_start {
                    model.log_start = start;
                    model.epochs_cut_start(start);
                }
            }
            Op::LeaderEpoch { up } => {
                let epoch = model.leader_epoch + up;
                log.replica().set_leader_epoch(epoch).unwrap();
                model.assign(epoch, model.end());
                model.leader_epoch = epoch;
            }
            Op::Reopen => {
                log.close().unwrap();
                drop(log);
                log = open(&fs, &clock, &cfg).unwrap();
                model.durable = model.end();
                reopened(&mut model);
            }
            Op::Crash { flush_first, seed } => {
                if flush_first {
                    log.flush().unwrap();
                    model.durable = model.end();
                }
                log.abandon();
                fs.crash(seed);
                log = open(&fs, &clock, &cfg).unwrap();
                // Everything durable is there; of the rest, whole batches in order.
                let end = log.log_end_offset();
                prop_assert!(
                    end >= model.durable,
                    "end {} below the durable {}",
                    end,
                    model.durable
                );
                prop_assert!(end <= model.end());
                let kept = model
                    .batches
                    .iter()
                    .position(|b| b.first >= end)
                    .unwrap_or(model.batches.len());
                prop_assert!(
                    model.batches.get(kept).is_none_or(|b| b.first == end),
                    "{} is not a batch boundary",
                    end
                );
                model.batches.truncate(kept);
                model.log_end = end;
                model.durable = end;
                reopened(&mut model);
            }
        }
        check(&log, &model)?;
    }
    Ok(())
}

fn push(
    log: &Log,
    model: &mut Model,
    first: i64,
    last: i64,
    client: Vec<u8>,
    producer: Option<usize>,
    tag: u64,
) {
    let bytes = log.read(first, 1).unwrap();
    let (_, b) = BatchIter::new(&bytes).next().unwrap().unwrap();
    model.assign(model.leader_epoch, first);
    model.log_end = last + 1;
    model.batches.push(Batch {
        first,
        last,
        bytes: b.as_bytes().to_vec(),
        client,
        producer,
        ts: T0 + tag as i64 * 1000,
        epoch: model.leader_epoch,
        gone: false,
    });
}

proptest! {
    #![proptest_config(ProptestConfig {
        cases: std::env::var("PROPTEST_CASES").ok().and_then(|c| c.parse().ok()).unwrap_or(96),
        ..ProptestConfig::default()
    })]

    #[test]
    fn the_rewritable_log_keeps_the_model(ops in proptest::collection::vec(op(), 1..120)) {
        run(ops)?;
    }
}

#[test]
fn the_model_is_not_vacuous() {
    // A fixed sequence that exercises every rewrite, so a model that never got there cannot
    // pass silently.
    let mut ops = Vec::new();
    for i in 0..40 {
        ops.push(Op::Send {
            producer: i % PRODUCERS,
            records: 1 + i % 4,
        });
        if i % 9 == 0 {
            ops.push(Op::LeaderEpoch { up: 1 });
        }
    }
    ops.extend([
        Op::Retention { frac: 80 },
        Op::Retry {
            producer: 0,
            back: 0,
        },
        Op::DeleteRecords { frac: 128 },
        Op::Truncate { frac: 200 },
        Op::Retry {
            producer: 1,
            back: 4,
        },
        Op::Crash {
            flush_first: false,
            seed: 7,
        },
        Op::Truncate { frac: 0 },
        Op::Retry {
            producer: 2,
            back: 0,
        },
        Op::Reopen,
        Op::Send {
            producer: 0,
            records: 2,
        },
    ]);
    run(ops).unwrap();
}
