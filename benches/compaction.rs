//! Cleaning throughput of key compaction: `Maintenance::compact` over a dirty log of
//! `ONCELOG_COMPACT_BENCH_MB` MiB (default 64) of 10-record batches (100-byte values) whose
//! keys are drawn from `ONCELOG_COMPACT_BENCH_KEYS` keys (default 250,000: every key has about
//! two versions in 64 MiB), in 64 MiB segments. Each sample builds a fresh log (not timed) and
//! times one compaction of all of it but the active segment; throughput is in bytes of dirty
//! log. The key map's estimated peak memory and the bytes kept are printed once.
//!
//! The first compaction (the one whose key map is printed) is also timed alone, and a thread
//! samples the process's anonymous resident memory (`RssAnon` in /proc/self/status: the heap,
//! not the mapped segments) every 5 ms during it; its peak above the level before the round is
//! printed as the measured memory of the round (key map and buffers).
//!
//! `ONCELOG_COMPACT_BENCH_MB=1024 ONCELOG_COMPACT_BENCH_KEYS=1000000` is the 1 GiB,
//! 1M-key run (docs/benchmarks.md). `ONCELOG_COMPACT_BENCH_ONCE=1` stops after that first
//! compaction and skips the criterion group (which needs 10 samples, each with a fresh log).

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion, SamplingMode, Throughput};
use oncelog::format::BatchBuilder;
use oncelog::{CleanupPolicy, Log, LogConfig};

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// `RssAnon` of this process in bytes (0 where /proc is missing).
fn rss_anon() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find_map(|l| l.strip_prefix("RssAnon:"))
                .and_then(|v| v.trim().trim_end_matches("kB").trim().parse::<u64>().ok())
        })
        .map_or(0, |kb| kb * 1024)
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(64 << 20)
        .cleanup_policy(CleanupPolicy::Compact)
        .file_delete_delay_ms(0)
        .build()
        .unwrap()
}

/// A closed log of `mb` MiB over `keys` keys; returns its directory and size.
fn build(mb: u64, keys: u64) -> (tempfile::TempDir, u64) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    let mut x: u64 = 0x9E37_79B9_7F4A_7C15;
    let value = [b'v'; 100];
    let mut b = BatchBuilder::new();
    while log.size_bytes() < mb << 20 {
        b.clear();
        for _ in 0..10 {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            let key = format!("key-{:08}", x % keys);
            b.append(1_700_000_000_000, Some(key.as_bytes()), Some(&value), &[]);
        }
        log.append(&b.build().unwrap()).unwrap();
    }
    // One more segment so that everything before it is sealed and cleanable.
    let size = log.size_bytes();
    log.close().unwrap();
    (dir, size)
}

fn compaction(c: &mut Criterion) {
    let mb = env("ONCELOG_COMPACT_BENCH_MB", 64);
    let keys = env("ONCELOG_COMPACT_BENCH_KEYS", 250_000);
    // The dirty bytes: everything below the active segment.
    let (probe, _) = build(mb, keys);
    let log = Log::open(probe.path(), config()).unwrap();
    let dirty = log.maintenance().cleanable(i64::MAX / 2).dirty_bytes;
    let base = rss_anon();
    let stop = Arc::new(AtomicBool::new(false));
    let sampler = {
        let stop = Arc::clone(&stop);
        std::thread::spawn(move || {
            let mut peak = 0;
            while !stop.load(Ordering::Relaxed) {
                peak = peak.max(rss_anon());
                std::thread::sleep(Duration::from_millis(5));
            }
            peak
        })
    };
    let start = Instant::now();
    let r = log.maintenance().compact(1_700_000_000_000).unwrap();
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let peak = sampler.join().unwrap();
    eprintln!(
        "compaction of {dirty} dirty bytes, {keys} keys: key map {} keys, {} bytes (estimated \
         peak); kept {} of {} bytes in {} segments",
        r.map_keys, r.map_bytes, r.bytes_after, r.bytes_before, r.segments_written
    );
    eprintln!(
        "first compaction: {secs:.2} s, {:.1} MiB/s of dirty log; RssAnon peak {} bytes above \
         the {base} before it",
        dirty as f64 / (1 << 20) as f64 / secs,
        peak.saturating_sub(base)
    );
    drop(log);
    drop(probe);
    if env("ONCELOG_COMPACT_BENCH_ONCE", 0) != 0 {
        return;
    }
    let mut g = c.benchmark_group("compact");
    g.sampling_mode(SamplingMode::Flat);
    g.sample_size(10);
    g.measurement_time(Duration::from_secs(20));
    g.throughput(Throughput::Bytes(dirty));
    g.bench_function(format!("{mb}MiB_{keys}keys"), |bench| {
        bench.iter_custom(|iters| {
            let mut total = Duration::ZERO;
            for _ in 0..iters {
                let (dir, _) = build(mb, keys);
                let log = Log::open(dir.path(), config()).unwrap();
                let start = Instant::now();
                log.maintenance().compact(1_700_000_000_000).unwrap();
                total += start.elapsed();
                drop(log);
            }
            total
        })
    });
    g.finish();
}

criterion_group!(benches, compaction);
criterion_main!(benches);
