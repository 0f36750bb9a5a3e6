//! The log manager at scale: how long a log
//! dir of many partitions takes to open after a clean close and after a crash with small
//! unflushed tails, what an idle partition costs in resident memory and file descriptors, and
//! the aggregate append throughput over 1, 100 and 1,000 partitions from 2 threads against a
//! single log's.
//!
//! Not criterion: every figure is a whole-process event (an open of thousands of partitions, a
//! workload spread over them) measured in rounds that interleave the cases, as the peers
//! harness does, so that the noise of a shared machine falls on every case alike; each printed
//! figure is the median of the rounds. Run with
//!
//! ```sh
//! cargo bench --bench manager                       # defaults: 4000 partitions, 5 rounds
//! ONCELOG_BENCH_PARTITIONS=10000 ONCELOG_BENCH_ROUNDS=3 cargo bench --bench manager
//! ONCELOG_BENCH_ONLY=open ONCELOG_BENCH_PARTITIONS=10000 cargo bench --bench manager
//! ONCELOG_BENCH_PROFILE_DIR=/tmp/d ONCELOG_BENCH_PARTITIONS=10000 \
//!     strace -f -c target/release/deps/manager-<hash> --bench   # one open, to profile
//! ```
//!
//! An idle partition of a manager holds no file descriptor (the manager's `.lock` stands for
//! its partitions' locks, and the active segment's files are closed once mapped), so the
//! partitions open under the default `ulimit -n` of 1024.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use oncelog::format::BatchBuilder;
use oncelog::{
    AppendOutcome, JobIntervals, Log, LogConfig, LogManager, ManagerConfig, PartitionConfig,
};

fn env(name: &str, default: usize) -> usize {
    std::env::var(name)
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default)
}

/// The open benchmark's partitions: small, as an idle partition of a large broker is.
fn idle_config() -> ManagerConfig {
    ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(64 << 10)
                .segment_index_bytes(4096)
                .prefault_bytes(0)
                .build()
                .unwrap(),
        )
        .with_jobs(JobIntervals::none())
        // ONCELOG_BENCH_RECOVERY_THREADS: the opening threads (default: the manager's).
        .with_recovery_threads(env(
            "ONCELOG_BENCH_RECOVERY_THREADS",
            ManagerConfig::default().recovery_threads,
        ))
}

fn record_batch(records: usize, value: usize, now: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    let v = vec![0x5a; value];
    for i in 0..records {
        b.append(now + i as i64, None, Some(&v), &[]);
    }
    b.build().expect("batch")
}

fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64)
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(f64::total_cmp);
    v[v.len() / 2]
}

/// This process's resident set (kB) and open descriptors.
fn rss_kb_and_fds() -> (u64, usize) {
    let status = std::fs::read_to_string("/proc/self/status").unwrap_or_default();
    let rss = status
        .lines()
        .find_map(|l| l.strip_prefix("VmRSS:"))
        .and_then(|v| v.split_whitespace().next())
        .and_then(|v| v.parse().ok())
        .unwrap_or(0);
    let fds = std::fs::read_dir("/proc/self/fd").map_or(0, |d| d.count());
    (rss, fds)
}

fn soft_fd_limit() -> String {
    std::fs::read_to_string("/proc/self/limits")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("Max open files"))
        .and_then(|l| l.split_whitespace().nth(3).map(str::to_string))
        .unwrap_or_else(|| "?".into())
}

/// A log dir of `n` partitions, one small batch each, closed cleanly.
fn populate(dir: &Path, n: usize) {
    let m = LogManager::open(&[dir], idle_config()).expect("open");
    let batch = record_batch(10, 100, now_ms());
    for p in 0..n {
        let log = m
            .create("idle", p as i32, PartitionConfig::default())
            .unwrap_or_else(|e| {
                panic!(
                    "creating partition {p}: {e} (ulimit -n {})",
                    soft_fd_limit()
                )
            });
        log.append(&batch).expect("append");
    }
    m.close().expect("close");
}

/// Appends a small unflushed tail to every partition and drops the manager: a crash.
fn crash_with_tails(dir: &Path) {
    let m = LogManager::open(&[dir], idle_config()).expect("open");
    let tail = record_batch(3, 100, now_ms());
    for p in m.list() {
        let log = m
            .get(&p.partition.topic, p.partition.partition)
            .expect("get");
        log.append(&tail).expect("append");
    }
    drop(m);
}

struct OpenFigures {
    clean_s: f64,
    crash_s: f64,
    rss_kb_per_partition: f64,
    fds_per_partition: f64,
    validated_bytes: u64,
}

fn open_round(dir: &Path, n: usize) -> OpenFigures {
    let (rss0, fds0) = rss_kb_and_fds();
    let started = Instant::now();
    let m = LogManager::open(&[dir], idle_config()).expect("open");
    let clean_s = started.elapsed().as_secs_f64();
    let r = m.open_report();
    assert_eq!(
        (r.opened(), r.clean()),
        (n, n),
        "every partition opens clean"
    );
    assert_eq!(r.segments_validated(), 0);
    let (rss1, fds1) = rss_kb_and_fds();
    m.close().expect("close");
    crash_with_tails(dir);
    let started = Instant::now();
    let m = LogManager::open(&[dir], idle_config()).expect("open after a crash");
    let crash_s = started.elapsed().as_secs_f64();
    let r = m.open_report();
    assert_eq!(r.opened(), n);
    let validated_bytes = r.bytes_validated();
    m.close().expect("close");
    OpenFigures {
        clean_s,
        crash_s,
        rss_kb_per_partition: rss1.saturating_sub(rss0) as f64 / n as f64,
        fds_per_partition: fds1.saturating_sub(fds0) as f64 / n as f64,
        validated_bytes,
    }
}

/// The workload of `oncelog bench`: `messages` records of 100 B in batches of 100.
fn workload(messages: usize) -> Vec<Vec<u8>> {
    let now = now_ms();
    (0..messages / 100)
        .map(|_| record_batch(100, 100, now))
        .collect()
}

fn throughput_config(segment_bytes: usize, prefault_bytes: usize) -> LogConfig {
    LogConfig::builder()
        .segment_bytes(segment_bytes)
        .segment_index_bytes(64 << 10)
        .prefault_bytes(prefault_bytes)
        .build()
        .unwrap()
}

/// Appends the batches round robin over `partitions` partitions of a fresh log dir from
/// `threads` threads (partition p by thread p mod threads), then flushes every partition:
/// seconds until durable, and for the appends alone.
fn spread(
    dir: &Path,
    batches: &[Vec<u8>],
    partitions: usize,
    threads: usize,
    log: LogConfig,
) -> (f64, f64) {
    let config = ManagerConfig::default()
        .with_log(log)
        .with_jobs(JobIntervals::none());
    let m = LogManager::open(&[dir], config).expect("open");
    let logs: Vec<Arc<Log>> = (0..partitions)
        .map(|p| {
            m.create("load", p as i32, PartitionConfig::default())
                .expect("create")
        })
        .collect();
    let started = Instant::now();
    std::thread::scope(|s| {
        for t in 0..threads {
            let logs = &logs;
            s.spawn(move || {
                for (i, b) in batches.iter().enumerate() {
                    if (i % partitions) % threads == t {
                        let r = logs[i % partitions].append(b).expect("append");
                        assert!(matches!(r, AppendOutcome::Appended(_)));
                    }
                }
            });
        }
    });
    let appended = started.elapsed().as_secs_f64();
    std::thread::scope(|s| {
        for t in 0..threads {
            let logs = &logs;
            s.spawn(move || {
                for log in logs.iter().skip(t).step_by(threads) {
                    log.flush().expect("flush");
                }
            });
        }
    });
    let durable = started.elapsed().as_secs_f64();
    drop(logs);
    m.close().expect("close");
    (durable, appended)
}

/// The same batches into one standalone log (what `oncelog bench` measures).
fn single(dir: &Path, batches: &[Vec<u8>], config: LogConfig) -> (f64, f64) {
    let log = Log::open(dir, config).expect("open");
    let started = Instant::now();
    for b in batches {
        log.append(b).expect("append");
    }
    let appended = started.elapsed().as_secs_f64();
    log.flush().expect("flush");
    let durable = started.elapsed().as_secs_f64();
    log.close().expect("close");
    (durable, appended)
}

fn fresh(root: &Path, name: &str) -> PathBuf {
    let d = root.join(name);
    let _ = std::fs::remove_dir_all(&d);
    d
}

fn main() {
    // `cargo bench` passes `--bench`; nothing else is read from the command line.
    let n = env("ONCELOG_BENCH_PARTITIONS", 4000);
    let rounds = env("ONCELOG_BENCH_ROUNDS", 5).max(1);
    let messages = env("ONCELOG_BENCH_MESSAGES", 1_000_000);
    // ONCELOG_BENCH_ONLY=open: the open figures alone (no throughput cases).
    let only_open = std::env::var("ONCELOG_BENCH_ONLY").is_ok_and(|v| v == "open");
    // ONCELOG_BENCH_PROFILE_DIR=<dir>: one open and close of the log dir there (populated
    // first if it is not there yet), nothing else: what to run under `perf` or `strace`.
    if let Ok(dir) = std::env::var("ONCELOG_BENCH_PROFILE_DIR") {
        let dir = PathBuf::from(dir);
        if !dir.exists() {
            populate(&dir, n);
        }
        let started = Instant::now();
        let m = LogManager::open(&[&dir], idle_config()).expect("open");
        let opened = started.elapsed().as_secs_f64();
        let r = m.open_report();
        let (_, fds) = rss_kb_and_fds();
        println!(
            "clean open of {} partitions ({} clean): {opened:.3} s, {fds} descriptors open",
            r.opened(),
            r.clean()
        );
        m.close().expect("close");
        return;
    }
    let root = tempfile::Builder::new()
        .prefix("oncelog-manager-bench")
        .tempdir()
        .expect("tmp");
    println!(
        "log manager benchmark: {n} idle partitions, {rounds} rounds, ulimit -n {}",
        soft_fd_limit()
    );

    let idle = root.path().join("idle");
    let started = Instant::now();
    populate(&idle, n);
    println!(
        "populated {n} partitions in {:.1} s",
        started.elapsed().as_secs_f64()
    );
    let batches = workload(messages);
    let bytes: usize = batches.iter().map(Vec::len).sum();
    let mb = bytes as f64 / 1e6;
    // (name, partitions, segment bytes, prefault bytes); 0 partitions: one standalone log.
    const PF: usize = 8 << 20;
    let cases: [(&str, usize, usize, usize); 8] = [
        ("single log, 1 GiB segments (oncelog bench)", 0, 1 << 30, PF),
        ("single log, 4 MiB segments", 0, 4 << 20, PF),
        ("manager, 1 partition", 1, 4 << 20, PF),
        ("manager, 100 partitions", 100, 4 << 20, PF),
        ("manager, 1000 partitions", 1000, 4 << 20, PF),
        ("manager, 1 partition, prefault off", 1, 4 << 20, 0),
        ("manager, 100 partitions, prefault off", 100, 4 << 20, 0),
        ("manager, 1000 partitions, prefault off", 1000, 4 << 20, 0),
    ];
    let mut opens = Vec::new();
    let mut figures: Vec<Vec<(f64, f64)>> = vec![Vec::new(); cases.len()];
    for round in 0..rounds {
        opens.push(open_round(&idle, n));
        if only_open {
            eprintln!("round {} of {rounds} done", round + 1);
            continue;
        }
        for (i, (_, partitions, seg, prefault)) in cases.iter().enumerate() {
            let dir = fresh(root.path(), &format!("load-{i}"));
            let config = throughput_config(*seg, *prefault);
            let f = match partitions {
                0 => single(&dir, &batches, config),
                p => spread(&dir, &batches, *p, 2, config),
            };
            figures[i].push(f);
            let _ = std::fs::remove_dir_all(&dir);
        }
        eprintln!("round {} of {rounds} done", round + 1);
    }
    let pick = |f: fn(&OpenFigures) -> f64| median(opens.iter().map(f).collect());
    println!();
    println!("| {n} idle partitions, 1 small segment each | median of {rounds} |");
    println!("|---|---:|");
    println!(
        "| open after a clean close | {:.3} s ({:.1} µs per partition) |",
        pick(|o| o.clean_s),
        pick(|o| o.clean_s) * 1e6 / n as f64
    );
    println!(
        "| open after a crash, 3 unflushed records each | {:.3} s ({:.1} µs per partition, {} bytes validated) |",
        pick(|o| o.crash_s),
        pick(|o| o.crash_s) * 1e6 / n as f64,
        opens[0].validated_bytes
    );
    println!(
        "| resident memory per open idle partition | {:.1} KiB |",
        pick(|o| o.rss_kb_per_partition)
    );
    println!(
        "| file descriptors per open idle partition | {:.2} |",
        pick(|o| o.fds_per_partition)
    );
    if only_open {
        return;
    }
    println!();
    println!("| appends of {messages} records of 100 B in batches of 100 ({mb:.1} MB), 2 threads | durable MB/s | append MB/s | vs single log, 4 MiB segments |");
    println!("|---|---:|---:|---:|");
    let base = median(figures[1].iter().map(|f| f.0).collect());
    for (i, (name, ..)) in cases.iter().enumerate() {
        let durable = median(figures[i].iter().map(|f| f.0).collect());
        let append = median(figures[i].iter().map(|f| f.1).collect());
        println!(
            "| {name} | {:.0} | {:.0} | {:.2}x |",
            mb / durable,
            mb / append,
            base / durable
        );
    }
}
