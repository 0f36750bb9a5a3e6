//! What validating compressed client batches costs: `validate_client_batch` alone (pure, no
//! I/O) and `Log::append`, for an uncompressed batch and the same records under each codec.
//!
//! Each batch holds 100 records of 100-byte values that compress about as JSON events do
//! (a fixed template around pseudo-random digits), so the codecs do real work. Throughput is
//! counted in bytes of *uncompressed records*, the same numerator for every codec, so the
//! figures compare the cost of reaching the same records through each codec.

use std::time::{Duration, Instant};

use criterion::{black_box, criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use oncelog::format::validate::validate_client_batch;
use oncelog::format::{BatchBuilder, Compression, HEADER_SIZE};
use oncelog::{Log, LogConfig};

const RECORDS: usize = 100;
const VALUE_SIZE: usize = 100;
/// Appends per `Log::append` iteration: enough to amortise the timer.
const APPENDS_PER_ITER: usize = 100;
const SEGMENT_BYTES: usize = 8 << 20;
const CODECS: [Compression; 5] = [
    Compression::None,
    Compression::Gzip,
    Compression::Snappy,
    Compression::Lz4,
    Compression::Zstd,
];

/// A JSON-like event padded to `VALUE_SIZE` bytes; `seed` varies its digits.
fn value(seed: u64) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut digits = || {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        x % 1_000_000
    };
    let mut v = format!(
        r#"{{"user":{},"session":{},"event":"click","amount":{}.{:02}}}"#,
        digits(),
        digits(),
        digits(),
        digits() % 100
    )
    .into_bytes();
    v.resize(VALUE_SIZE, b' ');
    v
}

fn batch(codec: Compression) -> Vec<u8> {
    let mut b = BatchBuilder::new().compression(codec);
    for i in 0..RECORDS {
        b.append(
            1_700_000_000_000 + i as i64,
            None,
            Some(&value(i as u64)),
            &[],
        );
    }
    b.build().expect("build batch")
}

/// Bytes of the records as they are stored uncompressed: the common numerator.
fn records_bytes() -> u64 {
    (batch(Compression::None).len() - HEADER_SIZE) as u64
}

fn validate(c: &mut Criterion) {
    let mut group = c.benchmark_group("validate");
    group.throughput(Throughput::Bytes(records_bytes()));
    for codec in CODECS {
        let bytes = batch(codec);
        group.bench_function(codec.name(), |b| {
            b.iter(|| {
                validate_client_batch(black_box(&bytes), 1 << 20, 64 << 20).expect("valid batch")
            })
        });
    }
    group.finish();
}

/// Appends `iters × APPENDS_PER_ITER` copies of `bytes` to a fresh log; only appends are timed.
fn run_appends(iters: u64, bytes: &[u8]) -> Duration {
    let dir = tempfile::tempdir().expect("tempdir");
    let config = LogConfig::builder()
        .segment_bytes(SEGMENT_BYTES)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config).expect("open");
    let start = Instant::now();
    for _ in 0..iters * APPENDS_PER_ITER as u64 {
        log.append(bytes).expect("append");
    }
    let elapsed = start.elapsed();
    log.close().expect("close");
    elapsed
}

fn append(c: &mut Criterion) {
    let mut group = c.benchmark_group("append_compressed");
    group.throughput(Throughput::Bytes(records_bytes() * APPENDS_PER_ITER as u64));
    group.sampling_mode(SamplingMode::Flat);
    group.sample_size(10);
    for codec in CODECS {
        let bytes = batch(codec);
        group.bench_function(codec.name(), |b| {
            b.iter_custom(|iters| run_appends(iters, &bytes))
        });
    }
    group.finish();
}

criterion_group!(benches, validate, append);
criterion_main!(benches);
