//! Append throughput of `Log::append`: 100-byte messages, 100 per batch, segments small
//! enough that rolls happen inside every sample. Non-idempotent batches against idempotent
//! producers (the dedup path), in bytes of whole batches per second.
//!
//! Batches are built outside the timed part, a chunk at a time, so memory stays bounded while
//! each sample appends to its own fresh log.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use oncelog::format::BatchBuilder;
use oncelog::{Log, LogConfig};

const MESSAGE_SIZE: usize = 100;
const BATCH_SIZE: usize = 100;
/// Batches appended per criterion iteration.
const BATCHES_PER_ITER: usize = 10;
/// Iterations built at once (about 11 MB of batches).
const CHUNK_ITERS: u64 = 100;
const SEGMENT_BYTES: usize = 8 << 20;

/// Builds batches for a fixed set of producers, continuing their sequences from chunk to chunk.
struct Producers {
    sequences: Vec<i32>,
    next: usize,
    value: Vec<u8>,
}

impl Producers {
    fn new(count: usize) -> Producers {
        Producers {
            sequences: vec![0; count],
            next: 0,
            value: vec![b'x'; MESSAGE_SIZE],
        }
    }

    fn build(&mut self, batches: usize, data: &mut Vec<u8>, ends: &mut Vec<usize>) {
        data.clear();
        ends.clear();
        for _ in 0..batches {
            let mut b = BatchBuilder::new();
            if !self.sequences.is_empty() {
                let p = self.next % self.sequences.len();
                b = b.producer(1000 + p as i64, 0, self.sequences[p]);
                self.sequences[p] = (self.sequences[p] + BATCH_SIZE as i32) & i32::MAX;
            }
            self.next += 1;
            for r in 0..BATCH_SIZE {
                self.value[0] = r as u8;
                b.append(1_700_000_000_000, None, Some(&self.value), &[]);
            }
            b.build_into(data).expect("build batch");
            ends.push(data.len());
        }
    }
}

fn batch_bytes() -> u64 {
    let mut data = Vec::new();
    Producers::new(0).build(BATCHES_PER_ITER, &mut data, &mut Vec::new());
    data.len() as u64
}

/// Appends `iters` iterations' worth of batches to a fresh log; only the appends are timed.
fn run(iters: u64, producers: usize) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig::builder()
        .segment_bytes(SEGMENT_BYTES)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config).expect("open");
    let mut gen = Producers::new(producers);
    let (mut data, mut ends) = (Vec::new(), Vec::new());
    let mut elapsed = Duration::ZERO;
    let mut left = iters;
    while left > 0 {
        let n = left.min(CHUNK_ITERS);
        gen.build(n as usize * BATCHES_PER_ITER, &mut data, &mut ends);
        let start = Instant::now();
        let mut from = 0;
        for &end in &ends {
            log.append(&data[from..end]).expect("append");
            from = end;
        }
        elapsed += start.elapsed();
        left -= n;
    }
    log.close().expect("close");
    elapsed
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append");
    group.throughput(Throughput::Bytes(batch_bytes()));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    group.measurement_time(Duration::from_secs(3));
    group.bench_function("non_idempotent", |b| b.iter_custom(|iters| run(iters, 0)));
    group.bench_function("idempotent_10_producers", |b| {
        b.iter_custom(|iters| run(iters, 10))
    });
    group.finish();
}

criterion_group!(benches, append);
criterion_main!(benches);
