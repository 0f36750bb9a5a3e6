//! Recovery benchmarks: reopening after an unclean shutdown validates every batch
//! after the recovery point (bytes validated per second), and restart time with a producer
//! snapshot versus a full replay of the log.

use std::time::Duration;

use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use oncelog::format::BatchBuilder;
use oncelog::{Log, LogConfig};

const TAIL_BYTES: usize = 64 << 20;

fn batches(producers: i64, total_bytes: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut size = 0;
    let mut seq = vec![0i32; producers as usize];
    let mut i = 0usize;
    while size < total_bytes {
        let pid = (i as i64) % producers;
        let mut b = BatchBuilder::new().producer(pid, 0, seq[pid as usize]);
        for r in 0..100 {
            b.append(1_700_000_000_000 + r, None, Some(&[b'r'; 100][..]), &[]);
        }
        seq[pid as usize] += 100;
        let bytes = b.build().unwrap();
        size += bytes.len();
        out.push(bytes);
        i += 1;
    }
    out
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(128 << 20)
        .build()
        .unwrap()
}

/// A directory whose last close was unclean, with `TAIL_BYTES` appended after the recovery
/// point.
fn unclean_dir(batches: &[Vec<u8>]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    for b in batches {
        log.append(b).unwrap();
    }
    log.abandon();
    dir
}

/// Marks a directory unclean again after a measured open (which rewrote its checkpoint).
fn make_unclean(dir: &std::path::Path) {
    std::fs::write(
        dir.join(oncelog::log::CHECKPOINT_FILE_NAME),
        "0\nclean_shutdown 0\nrecovery_point 0\nlog_start_offset 0\n",
    )
    .unwrap();
}

fn unclean_tail(c: &mut Criterion) {
    let data = batches(8, TAIL_BYTES);
    let dir = unclean_dir(&data);
    let mut g = c.benchmark_group("recovery");
    g.sample_size(10).measurement_time(Duration::from_secs(8));
    g.throughput(Throughput::Bytes(data.iter().map(|b| b.len() as u64).sum()));
    g.bench_function("unclean_tail_64MiB", |b| {
        b.iter_batched(
            || make_unclean(dir.path()),
            |_| {
                let log = Log::open(dir.path(), config()).unwrap();
                assert!(log.recovery_report().bytes_validated as usize >= TAIL_BYTES);
                log.abandon();
            },
            BatchSize::PerIteration,
        )
    });
    g.finish();
}

fn restart(c: &mut Criterion) {
    let data = batches(1000, 32 << 20);
    let with_snapshot = tempfile::tempdir().unwrap();
    {
        let log = Log::open(with_snapshot.path(), config()).unwrap();
        for b in &data {
            log.append(b).unwrap();
        }
        log.close().unwrap();
    }
    let mut g = c.benchmark_group("restart_32MiB_1000_producers");
    g.sample_size(10).measurement_time(Duration::from_secs(6));
    // Both measure `Log::open` plus a close that rewrites the snapshot; only the load differs.
    g.bench_function("clean_with_snapshot", |b| {
        b.iter(|| {
            let log = Log::open(with_snapshot.path(), config()).unwrap();
            assert_eq!(log.producer_load_report().batches_replayed, 0);
            log.close().unwrap();
        })
    });
    g.bench_function("clean_full_replay", |b| {
        b.iter(|| {
            for e in std::fs::read_dir(with_snapshot.path()).unwrap() {
                let p = e.unwrap().path();
                if p.extension().is_some_and(|x| x == "snapshot") {
                    std::fs::remove_file(p).unwrap();
                }
            }
            let log = Log::open(with_snapshot.path(), config()).unwrap();
            assert_eq!(
                log.producer_load_report().batches_replayed as usize,
                data.len()
            );
            log.close().unwrap();
        })
    });
    g.finish();
}

criterion_group!(benches, unclean_tail, restart);
criterion_main!(benches);
