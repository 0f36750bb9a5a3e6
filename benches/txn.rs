//! The cost of transactions (docs/benchmarks.md, "Transactions"):
//!
//! - `txn_append`: 100-byte messages, 10 per batch, from 8 producers, appended as idempotent
//!   batches, as transactional batches (each producer's transaction spans 10 batches), and the
//!   same with their COMMIT or ABORT markers (every third one an abort, so `.txnindex` entries
//!   are written too); in bytes of batches per second, markers not counted;
//! - `txn_read`: the same transactional log (about 30 MB, a third of it aborted) consumed from
//!   its start in 1 MiB fetches, every record iterated, under read_uncommitted and under
//!   read_committed (which collects the aborted transactions of each fetch and skips their
//!   records).
//!
//! Batches are built outside the timed part; each append sample writes to its own fresh log.

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use oncelog::format::BatchBuilder;
use oncelog::{IsolationLevel, Log, LogConfig, TxnMarker};

const PRODUCERS: usize = 8;
const BATCH_RECORDS: usize = 10;
/// Batches of a producer per transaction.
const TXN_BATCHES: usize = 10;
/// Batches per criterion iteration of the append benchmarks.
const BATCHES_PER_ITER: usize = 80;

/// What follows a batch in the workload.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Then {
    Nothing,
    Commit(i64),
    Abort(i64),
}

/// `batches` client batches of 8 producers taking turns, and what follows each.
fn workload(batches: usize, transactional: bool, markers: bool) -> (Vec<u8>, Vec<(usize, Then)>) {
    let value = [b'x'; 100];
    // Records stamped with the wall clock, as the markers are: older records would make every
    // marker roll a segment (Kafka's time-based roll).
    let now = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut seq = [0i32; PRODUCERS];
    let mut sent = [0usize; PRODUCERS];
    let mut ended = [0usize; PRODUCERS];
    let (mut data, mut ends) = (Vec::new(), Vec::new());
    for i in 0..batches {
        let p = i % PRODUCERS;
        let pid = 5000 + p as i64;
        let mut b = BatchBuilder::new()
            .producer(pid, 0, seq[p])
            .transactional(transactional);
        for r in 0..BATCH_RECORDS {
            b.append(now + r as i64, None, Some(&value), &[]);
        }
        b.build_into(&mut data).expect("build");
        seq[p] += BATCH_RECORDS as i32;
        sent[p] += 1;
        let then = if markers && sent[p] % TXN_BATCHES == 0 {
            ended[p] += 1;
            if ended[p] % 3 == 0 {
                Then::Abort(pid)
            } else {
                Then::Commit(pid)
            }
        } else {
            Then::Nothing
        };
        ends.push((data.len(), then));
    }
    (data, ends)
}

fn config() -> LogConfig {
    LogConfig::builder().segment_bytes(8 << 20).build().unwrap()
}

fn append_all(log: &Log, data: &[u8], ends: &[(usize, Then)]) {
    let mut from = 0;
    for &(end, then) in ends {
        log.append(&data[from..end]).expect("append");
        match then {
            Then::Nothing => {}
            Then::Commit(pid) => {
                log.append_marker(&TxnMarker::commit(pid, 0, 0))
                    .expect("commit");
            }
            Then::Abort(pid) => {
                log.append_marker(&TxnMarker::abort(pid, 0, 0))
                    .expect("abort");
            }
        }
        from = end;
    }
}

/// Appends `iters` iterations' worth of the workload to a fresh log; only appends are timed.
fn run(iters: u64, transactional: bool, markers: bool) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), config()).expect("open");
    let (data, ends) = workload(iters as usize * BATCHES_PER_ITER, transactional, markers);
    let start = Instant::now();
    append_all(&log, &data, &ends);
    let elapsed = start.elapsed();
    log.close().expect("close");
    elapsed
}

fn txn_append(c: &mut Criterion) {
    let (data, _) = workload(BATCHES_PER_ITER, false, false);
    let mut group = c.benchmark_group("txn_append");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("idempotent", |b| b.iter_custom(|i| run(i, false, false)));
    group.bench_function("transactional", |b| b.iter_custom(|i| run(i, true, false)));
    group.bench_function("transactional_with_markers", |b| {
        b.iter_custom(|i| run(i, true, true))
    });
    group.finish();
}

/// Consumes the whole log from its start under `isolation`; returns the records seen.
fn consume(log: &Log, isolation: IsolationLevel) -> u64 {
    let mut next = log.log_start_offset();
    let mut records = 0;
    loop {
        let f = log.fetch_isolated(next, 1 << 20, isolation).expect("fetch");
        if f.bytes.is_empty() {
            return records;
        }
        for r in f.records() {
            black_box(r.expect("record"));
            records += 1;
        }
        next = f.next_offset;
    }
}

fn txn_read(c: &mut Criterion) {
    let dir = tempfile::tempdir().expect("tempdir");
    let log = Log::open(dir.path(), config()).expect("open");
    let (data, ends) = workload(24_000, true, true);
    append_all(&log, &data, &ends);
    log.flush().expect("flush");
    let committed = consume(&log, IsolationLevel::ReadCommitted);
    let uncommitted = consume(&log, IsolationLevel::ReadUncommitted);
    assert!(committed < uncommitted && committed > 0);
    let mut group = c.benchmark_group("txn_read");
    group.throughput(Throughput::Bytes(log.size_bytes()));
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(5));
    group.bench_function("read_uncommitted", |b| {
        b.iter(|| consume(&log, IsolationLevel::ReadUncommitted))
    });
    group.bench_function("read_committed", |b| {
        b.iter(|| consume(&log, IsolationLevel::ReadCommitted))
    });
    group.finish();
    log.close().expect("close");
}

criterion_group!(benches, txn_append, txn_read);
criterion_main!(benches);
