//! Tiered storage's costs (docs/benchmarks.md, "Tiered storage"): upload throughput, and a
//! read below the local log start against the same read from the local log.
//!
//! ```text
//! cargo run --release -p oncelog-tier --example tier_bench -- [--mb 256] [--segment-mb 32]
//!     [--fetch-kb 1024] [--random 2000] [--cache-mb 256] [--dir D] [--store local|s3|URL]
//!     [--store-option KEY=VALUE]...
//! ```
//!
//! One partition of `--mb` MiB of idempotent batches (100 records of 160 bytes) in segments of
//! `--segment-mb`, flushed, then side by side in one run:
//!
//! - **upload**: every sealed segment, oldest first, through `tier::upload_segment` (verify,
//!   six puts, the manifest's conditional put) into the store;
//! - **sequential reads**: a consumer reading every uploaded offset from 0 with fetches of
//!   `--fetch-kb`: from the local log (before its copies are deleted), then below the local
//!   log start (after local retention deleted every uploaded segment) from the store, from the
//!   store through a `CachedStore` (cold), and through it again (warm);
//! - **random reads**: `--random` fetches of 64 KiB at offsets drawn from the uploaded range,
//!   each way.
//!
//! The store (`--store`): `local`, `object_store`'s local file system
//! (`ObjectStoreRemote::local`, every put synced) in a directory beside the log; `s3`, the
//! S3-compatible server the tests run (s3s over s3s-fs, in this process, on loopback: HTTP,
//! SigV4, the bucket's objects as files in a directory beside the log); or a URL
//! (`s3://bucket/path` with `--store-option endpoint=...` and the rest, credentials from the
//! environment), as `oncelog-broker --tier-url` takes it. The last line is JSON.

use std::path::PathBuf;
use std::time::{Duration, Instant};

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::tier::{self, CachedStore, LocalRetention, RemoteStore};
use oncelog::{Log, LogConfig};
use oncelog_tier::ObjectStoreRemote;

#[path = "../tests/support/mod.rs"]
mod support;

const PARTITION: &str = "bench/orders-0";
const RECORDS: usize = 100;
const VALUE: usize = 160;

struct Args {
    mb: u64,
    segment_mb: u64,
    fetch_kb: usize,
    random: usize,
    cache_mb: u64,
    dir: Option<PathBuf>,
    store: String,
    store_options: Vec<(String, String)>,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        mb: 256,
        segment_mb: 32,
        fetch_kb: 1024,
        random: 2000,
        cache_mb: 256,
        dir: None,
        store: "local".into(),
        store_options: Vec::new(),
    };
    let mut it = std::env::args().skip(1);
    while let Some(flag) = it.next() {
        let mut value = || it.next().ok_or(format!("{flag} needs a value"));
        let number = |v: String| v.parse::<u64>().map_err(|e| format!("{flag} {v}: {e}"));
        match flag.as_str() {
            "--mb" => a.mb = number(value()?)?,
            "--segment-mb" => a.segment_mb = number(value()?)?,
            "--fetch-kb" => a.fetch_kb = number(value()?)? as usize,
            "--random" => a.random = number(value()?)? as usize,
            "--cache-mb" => a.cache_mb = number(value()?)?,
            "--dir" => a.dir = Some(PathBuf::from(value()?)),
            "--store" => a.store = value()?,
            "--store-option" => {
                let v = value()?;
                let (k, v) = v
                    .split_once('=')
                    .ok_or(format!("--store-option {v}: KEY=VALUE"))?;
                a.store_options.push((k.to_string(), v.to_string()));
            }
            other => return Err(format!("unknown flag {other}")),
        }
    }
    if a.mb == 0 || a.segment_mb == 0 || a.fetch_kb == 0 {
        return Err("--mb, --segment-mb and --fetch-kb must be positive".into());
    }
    Ok(a)
}

/// Latencies of one way of reading, and its bytes.
#[derive(Default)]
struct Reads {
    bytes: u64,
    took: Duration,
    each: Vec<Duration>,
}

impl Reads {
    fn record(&mut self, bytes: usize, took: Duration) {
        self.bytes += bytes as u64;
        self.took += took;
        self.each.push(took);
    }

    fn mb_s(&self) -> f64 {
        self.bytes as f64 / 1048576.0 / self.took.as_secs_f64()
    }

    fn quantile_us(&mut self, q: f64) -> f64 {
        self.each.sort();
        let i = ((self.each.len() as f64 - 1.0) * q).round() as usize;
        self.each.get(i).map_or(0.0, |d| d.as_secs_f64() * 1e6)
    }
}

/// The next offset after the batches of a fetch.
fn next_after(bytes: &[u8]) -> i64 {
    match BatchIter::new(bytes).last() {
        Some(Ok((_, b))) => b.last_offset() + 1,
        _ => panic!("a fetch returned no whole batch"),
    }
}

/// A consumer reading `[0, end)` with fetches of `max` bytes through `read`.
fn consume(end: i64, max: usize, read: impl Fn(i64, usize) -> Vec<u8>) -> Reads {
    let mut r = Reads::default();
    let mut next = 0;
    while next < end {
        let t = Instant::now();
        let bytes = read(next, max);
        r.record(bytes.len(), t.elapsed());
        next = next_after(&bytes);
    }
    r
}

/// `n` fetches of 64 KiB at offsets of `[0, end)` drawn by a fixed generator.
fn random(end: i64, n: usize, read: impl Fn(i64, usize) -> Vec<u8>) -> Reads {
    let mut r = Reads::default();
    let mut x: u64 = 0x9e37_79b9_7f4a_7c15;
    for _ in 0..n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        let offset = (x % end as u64) as i64;
        let t = Instant::now();
        let bytes = read(offset, 64 << 10);
        r.record(bytes.len(), t.elapsed());
    }
    r
}

/// Reads through `tier::read` (below the local log start: from `store`).
fn remote<'a>(log: &'a Log, store: &'a dyn RemoteStore) -> impl Fn(i64, usize) -> Vec<u8> + 'a {
    move |o, m| {
        tier::read(log, store, PARTITION, o, m)
            .expect("remote read")
            .to_vec()
    }
}

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let a = args()?;
    let root = match &a.dir {
        Some(d) => tempfile::tempdir_in(d)?,
        None => tempfile::tempdir()?,
    };
    let (data, store_dir) = (root.path().join("log"), root.path().join("store"));
    let config = LogConfig::builder()
        .segment_bytes((a.segment_mb << 20) as usize)
        .file_delete_delay_ms(0)
        .build()?;
    let log = Log::open(&data, config)?;
    let value = [b'v'; VALUE];
    let (mut seq, mut written) = (0i32, 0u64);
    let t0 = 1_700_000_000_000;
    while written < a.mb << 20 {
        let mut b = BatchBuilder::new().producer(1, 0, seq);
        for i in 0..RECORDS {
            b.append(t0 + i64::from(seq) + i as i64, None, Some(&value[..]), &[]);
        }
        let batch = b.build()?;
        written += batch.len() as u64;
        log.append(&batch)?;
        seq += RECORDS as i32;
    }
    log.flush()?;
    // The test server lives as long as the run.
    let mut server = None;
    let store = match a.store.as_str() {
        "local" => ObjectStoreRemote::local(&store_dir)?,
        "s3" => server
            .insert(support::S3Server::start())
            .store("bench", &[]),
        url => ObjectStoreRemote::from_url(url, &a.store_options)?,
    };
    println!("store: {}", a.store);

    // Upload every sealed segment.
    let segments = tier::uploadable_segments(&log);
    let end = segments.last().map_or(0, |s| s.1);
    let local_bytes: u64 = {
        let t = Instant::now();
        let before = log.size_bytes();
        for &(base, _) in &segments {
            tier::upload_segment(&log, &store, PARTITION, base)?;
        }
        let took = t.elapsed();
        let m = tier::read_manifest(&store, PARTITION)?.ok_or("no manifest")?;
        let uploaded: u64 = m.segments.iter().map(|s| s.bytes()).sum();
        println!(
            "upload: {} segments, {:.1} MiB (log {:.1} MiB) in {:.2} s: {:.0} MiB/s",
            m.segments.len(),
            uploaded as f64 / 1048576.0,
            before as f64 / 1048576.0,
            took.as_secs_f64(),
            uploaded as f64 / 1048576.0 / took.as_secs_f64()
        );
        uploaded * 1_000_000 / took.as_micros().max(1) as u64
    };

    let fetch = a.fetch_kb << 10;
    let local = |o: i64, m: usize| log.read(o, m).expect("local read").to_vec();
    let mut seq_local = consume(end, fetch, local);
    let mut rnd_local = random(end, a.random, local);

    let all = LocalRetention::new(None, Some(0));
    let deleted = tier::enforce_local_retention(&log, &store, PARTITION, all, t0)?;
    assert_eq!(
        log.log_start_offset(),
        end,
        "every uploaded segment deleted locally"
    );
    println!("local retention deleted {} segments", deleted.deleted.len());

    let remote_read = |s| remote(&log, s);
    let mut seq_remote = consume(end, fetch, remote_read(&store));
    let cached = CachedStore::new(&store, a.cache_mb << 20);
    let mut seq_cold = consume(end, fetch, remote_read(&cached));
    let mut seq_warm = consume(end, fetch, remote_read(&cached));
    let mut rnd_remote = random(end, a.random, remote_read(&store));
    let mut rnd_cached = random(end, a.random, remote_read(&cached));
    let stats = cached.stats();

    println!(
        "{:<32} {:>10} {:>10} {:>10} {:>8}",
        "read", "MiB/s", "p50 µs", "p99 µs", "fetches"
    );
    let mut rows = Vec::new();
    for (name, r) in [
        ("sequential, local log", &mut seq_local),
        ("sequential, remote", &mut seq_remote),
        ("sequential, remote cached (cold)", &mut seq_cold),
        ("sequential, remote cached (warm)", &mut seq_warm),
        ("random 64 KiB, local log", &mut rnd_local),
        ("random 64 KiB, remote", &mut rnd_remote),
        ("random 64 KiB, remote cached", &mut rnd_cached),
    ] {
        let (p50, p99) = (r.quantile_us(0.5), r.quantile_us(0.99));
        println!(
            "{name:<32} {:>10.0} {p50:>10.0} {p99:>10.0} {:>8}",
            r.mb_s(),
            r.each.len()
        );
        rows.push((r.mb_s(), p50, p99));
    }
    println!(
        "cache: {} hits, {} misses, {:.1} MiB held",
        stats.hits,
        stats.misses,
        stats.bytes as f64 / 1048576.0
    );
    let ratio = |a: f64, b: f64| if b > 0.0 { a / b } else { 0.0 };
    println!(
        "{{\"upload_mb_s\":{:.1},\"local_read_mb_s\":{:.1},\"remote_read_mb_s\":{:.1},\
         \"remote_cached_cold_mb_s\":{:.1},\"remote_cached_warm_mb_s\":{:.1},\
         \"remote_vs_local_read\":{:.3},\"remote_cached_vs_local_read\":{:.3},\
         \"random_local_p50_us\":{:.0},\"random_remote_p50_us\":{:.0},\
         \"random_remote_cached_p50_us\":{:.0},\"random_remote_vs_local_p50\":{:.1}}}",
        local_bytes as f64 / 1048576.0,
        rows[0].0,
        rows[1].0,
        rows[2].0,
        rows[3].0,
        ratio(rows[1].0, rows[0].0),
        ratio(rows[3].0, rows[0].0),
        rows[4].1,
        rows[5].1,
        rows[6].1,
        ratio(rows[5].1, rows[4].1),
    );
    log.close()?;
    Ok(())
}
