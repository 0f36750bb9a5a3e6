//! What rewriting the log costs:
//!
//! - `truncate/removed`: `ReplicaLog::truncate_to` removing 4 KiB to 16 MiB from the end of a 64 MiB
//!   active segment. The cost is meant to grow with the bytes removed (the index entries after
//!   the cut, the few batches after the last kept index entry), not with the segment.
//! - `truncate/log_size`: removing 64 KiB from logs of 16 MiB to 1 GiB (16 MiB segments): flat,
//!   since nothing before the cut segment is read or written.
//! - `retention/1000_segments`: `Maintenance::enforce_retention` deleting 1,000 small segments, with the
//!   files removed at once (`file_delete_delay_ms` 0) and renamed `.deleted` only (the default
//!   delay).
//!
//! Every truncation makes what it keeps durable and writes a checkpoint (docs/design.md
//! "Rewriting the log"), so its time includes a few `fdatasync`s of small files and of the
//! directory: that floor is the same whatever is removed.

use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode};
use oncelog::format::BatchBuilder;
use oncelog::{Log, LogConfig};

/// A 1 KiB batch: 8 records of 100 bytes plus headers.
fn batch() -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for i in 0..8 {
        b.append(1_700_000_000_000 + i, None, Some(&[b'x'; 100][..]), &[]);
    }
    b.build().unwrap()
}

fn fill(log: &Log, bytes: usize) {
    let b = batch();
    for _ in 0..bytes.div_ceil(b.len()) {
        log.append(&b).unwrap();
    }
}

/// The offset that leaves `bytes` of batches after it (whole batches).
fn offset_removing(log: &Log, bytes: usize) -> i64 {
    let per_batch = batch().len();
    let batches = (bytes / per_batch).max(1) as i64;
    log.log_end_offset() - batches * 8
}

fn truncation(c: &mut Criterion) {
    let mut g = c.benchmark_group("truncate");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(20);
    g.measurement_time(Duration::from_secs(8));
    for removed in [4 << 10, 64 << 10, 1 << 20, 16 << 20] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(
            dir.path(),
            LogConfig::builder()
                .segment_bytes(256 << 20)
                .file_delete_delay_ms(0)
                .build()
                .unwrap(),
        )
        .unwrap();
        fill(&log, 64 << 20);
        log.flush().unwrap();
        g.bench_with_input(
            BenchmarkId::new("removed", format!("{} KiB", removed >> 10)),
            &removed,
            |b, &removed| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let to = offset_removing(&log, removed);
                        let started = Instant::now();
                        log.replica().truncate_to(to).unwrap();
                        spent += started.elapsed();
                        // Put the bytes back (untimed), so each truncation removes as much.
                        fill(&log, removed);
                        log.flush().unwrap();
                    }
                    spent
                })
            },
        );
    }
    for size in [16 << 20, 256 << 20, 1 << 30] {
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(
            dir.path(),
            LogConfig::builder()
                .segment_bytes(16 << 20)
                .file_delete_delay_ms(0)
                .build()
                .unwrap(),
        )
        .unwrap();
        fill(&log, size);
        log.flush().unwrap();
        g.bench_with_input(
            BenchmarkId::new("log_size", format!("{} MiB", size >> 20)),
            &size,
            |b, _| {
                b.iter_custom(|iters| {
                    let mut spent = Duration::ZERO;
                    for _ in 0..iters {
                        let to = offset_removing(&log, 64 << 10);
                        let started = Instant::now();
                        log.replica().truncate_to(to).unwrap();
                        spent += started.elapsed();
                        fill(&log, 64 << 10);
                        log.flush().unwrap();
                    }
                    spent
                })
            },
        );
    }
    g.finish();
}

/// A log of 1,000 sealed segments of about 4 KiB, flushed.
fn thousand_segments(dir: &std::path::Path, delay_ms: i64) -> Log {
    let log = Log::open(
        dir,
        LogConfig::builder()
            .segment_bytes(4096)
            .segment_index_bytes(4096)
            .retention_bytes(Some(0))
            .file_delete_delay_ms(delay_ms)
            .build()
            .unwrap(),
    )
    .unwrap();
    while log.maintenance().segment_count() <= 1000 {
        fill(&log, 1024);
    }
    log.flush().unwrap();
    log
}

fn retention(c: &mut Criterion) {
    let mut g = c.benchmark_group("retention");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    for (name, delay) in [("deleted_now", 0), ("renamed_deleted", 60_000)] {
        g.bench_function(BenchmarkId::new("1000_segments", name), |b| {
            b.iter_custom(|iters| {
                let mut spent = Duration::ZERO;
                for _ in 0..iters {
                    let dir = tempfile::tempdir().unwrap();
                    let log = thousand_segments(dir.path(), delay);
                    let started = Instant::now();
                    let report = log
                        .maintenance()
                        .enforce_retention(1_700_000_000_000)
                        .unwrap();
                    spent += started.elapsed();
                    assert!(report.deleted.len() >= 1000, "{}", report.deleted.len());
                }
                spent
            })
        });
    }
    g.finish();
}

criterion_group!(benches, truncation, retention);
criterion_main!(benches);
