//! Reads of a prefilled log (about 64 MB in 8 MiB segments, 100-byte messages, 100 per batch):
//! a sequential scan in 1 MiB fetches, as a consumer catching up does, and fetches at random
//! offsets, as many consumers at different positions do. Reads are zero-copy: the time is the
//! segment and index lookup plus walking batch headers to find the next offset.

use std::time::Duration;

use criterion::{black_box, criterion_group, criterion_main, Criterion, Throughput};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{Log, LogConfig};

const BATCHES: usize = 6_000;
const FETCH_BYTES: usize = 1 << 20;

fn prefilled() -> (tempfile::TempDir, Log) {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig::builder().segment_bytes(8 << 20).build().unwrap();
    let log = Log::open(dir.path(), config).expect("open");
    let value = [b'x'; 100];
    let mut batch = Vec::new();
    for _ in 0..BATCHES {
        let mut b = BatchBuilder::new();
        for _ in 0..100 {
            b.append(1_700_000_000_000, None, Some(&value), &[]);
        }
        batch.clear();
        b.build_into(&mut batch).expect("build");
        log.append(&batch).expect("append");
    }
    log.flush().expect("flush");
    (dir, log)
}

/// The offset after the last whole batch of a fetch.
fn next_offset(bytes: &[u8]) -> Option<i64> {
    BatchIter::new(bytes)
        .filter_map(Result::ok)
        .last()
        .map(|(_, b)| b.last_offset() + 1)
}

fn read(c: &mut Criterion) {
    let (_dir, log) = prefilled();
    let end = log.log_end_offset();
    let mut group = c.benchmark_group("read");
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));

    group.throughput(Throughput::Bytes(log.size_bytes()));
    group.bench_function("sequential_1MiB_fetches", |b| {
        b.iter(|| {
            let mut offset = 0;
            while offset < end {
                let bytes = log.read(offset, FETCH_BYTES).expect("read");
                offset = next_offset(&bytes).expect("a whole batch");
                black_box(bytes);
            }
        })
    });

    group.throughput(Throughput::Elements(1));
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    group.bench_function("random_offset_64KiB_fetch", |b| {
        b.iter(|| {
            // xorshift: a cheap, repeatable spread of offsets over the whole log.
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let offset = (x % end as u64) as i64;
            black_box(log.read(offset, 64 << 10).expect("read"))
        })
    });
    group.finish();
    log.close().expect("close");
}

criterion_group!(benches, read);
criterion_main!(benches);
