//! Helpers shared by the log integration tests: a controllable clock, small configurations,
//! batch builders, whole-log reads and directory snapshots.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use oncelog::format::{BatchBuilder, BatchIter, RecordBatch};
use oncelog::Clock;
use oncelog::{Environment, Log, LogConfig};

/// A wall clock the test moves by hand.
#[derive(Debug)]
pub struct TestClock(pub AtomicI64);

impl TestClock {
    pub fn new(now_ms: i64) -> Arc<TestClock> {
        Arc::new(TestClock(AtomicI64::new(now_ms)))
    }
    pub fn set(&self, now_ms: i64) {
        self.0.store(now_ms, Ordering::SeqCst);
    }
}

impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

/// The real file system with a test clock.
pub fn env_with(clock: Arc<TestClock>) -> Environment {
    Environment::default().with_clock(clock)
}

pub const T0: i64 = 1_700_000_000_000;

/// Small segments and indexes, so rolls (on size and on a full index) happen within a test.
pub fn small_config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(64 * 1024)
        .segment_index_bytes(4096)
        .build()
        .unwrap()
}

/// A client batch (baseOffset 0) of `n` records with `value_len`-byte values, timestamps
/// `ts, ts+1, ...`.
pub fn batch(n: usize, ts: i64, value_len: usize) -> Vec<u8> {
    let value = vec![b'v'; value_len];
    let mut b = BatchBuilder::new();
    for i in 0..n {
        b.append(ts + i as i64, Some(b"key"), Some(&value), &[]);
    }
    b.build().expect("build")
}

/// A batch that already carries its offsets (as a leader would send it to a follower).
pub fn replicated_batch(base_offset: i64, n: usize, ts: i64, value_len: usize) -> Vec<u8> {
    let value = vec![b'r'; value_len];
    let mut b = BatchBuilder::new()
        .base_offset(base_offset)
        .partition_leader_epoch(7);
    for i in 0..n {
        b.append(ts + i as i64, None, Some(&value), &[]);
    }
    b.build().expect("build")
}

/// Every batch of the log, from its start to its end, as owned bytes, read with `max_bytes`.
pub fn read_all(log: &Log, max_bytes: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    let end = log.log_end_offset();
    while next < end {
        let bytes = log.read(next, max_bytes).expect("read");
        assert!(!bytes.is_empty(), "empty read at {next} below end {end}");
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.expect("whole batch");
            assert!(b.is_crc_valid(), "bad CRC at offset {}", b.base_offset());
            assert!(
                b.last_offset() >= next,
                "read at {next} returned {}",
                b.base_offset()
            );
            next = b.last_offset() + 1;
            out.push(b.as_bytes().to_vec());
        }
    }
    assert_eq!(next, end);
    out
}

pub fn parse(bytes: &[u8]) -> RecordBatch<'_> {
    RecordBatch::parse(bytes).expect("batch")
}

/// Bytes 0..8 (baseOffset) and 12..16 (partitionLeaderEpoch) are the log's to rewrite; the
/// rest of a batch must come back exactly as appended.
pub fn same_except_offset_and_epoch(stored: &[u8], appended: &[u8]) -> bool {
    stored.len() == appended.len()
        && stored[8..12] == appended[8..12]
        && stored[16..] == appended[16..]
}

/// Every file of a directory with its length and CRC-32C (a before/after picture that prints
/// short when it differs). The lock file is left out: every open, even a refused one, holds it.
pub fn dir_contents(dir: &Path) -> BTreeMap<String, (usize, u32)> {
    let mut out = BTreeMap::new();
    for entry in std::fs::read_dir(dir).expect("read_dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_file()
            && entry.file_name() != oncelog::log::LOCK_FILE_NAME
        {
            let bytes = std::fs::read(entry.path()).expect("read");
            out.insert(
                entry.file_name().to_string_lossy().into_owned(),
                (bytes.len(), crc32c::crc32c(&bytes)),
            );
        }
    }
    out
}

/// Copies the files of `from` into `to` (no subdirectories).
pub fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).expect("mkdir");
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_file() {
            let dst = to.join(entry.file_name());
            std::fs::copy(entry.path(), &dst).expect("copy");
            // The fixtures are read-only; the copy must be writable like a broker's files.
            let mut perm = std::fs::metadata(&dst).expect("meta").permissions();
            #[allow(clippy::permissions_set_readonly_false)]
            perm.set_readonly(false);
            std::fs::set_permissions(&dst, perm).expect("chmod");
        }
    }
}

/// `.log` file names of a directory, sorted.
pub fn log_files(dir: &Path) -> Vec<String> {
    let mut v: Vec<String> = std::fs::read_dir(dir)
        .expect("read_dir")
        .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log"))
        .collect();
    v.sort();
    v
}

/// Kafka's 4096-byte rule recomputed from batch (position, size, last offset) triples: the
/// expected `(offset, position)` entries of the offset index (docs/format.md, "Offset index").
pub fn expected_index(batches: &[(usize, usize, i64)], interval: usize) -> Vec<(i64, u32)> {
    let mut out = Vec::new();
    let mut since = 0usize;
    for &(position, size, last_offset) in batches {
        if since > interval {
            out.push((last_offset, position as u32));
            since = 0;
        }
        since += size;
    }
    out
}

/// (position, size, last offset) of every batch of a `.log` file's bytes.
pub fn batch_layout(data: &[u8]) -> Vec<(usize, usize, i64)> {
    BatchIter::new(data)
        .map(|item| {
            let (pos, b) = item.expect("batch");
            (pos, b.size(), b.last_offset())
        })
        .collect()
}

/// Copies a directory tree (a whole log dir), making the copies writable.
pub fn copy_tree(from: &Path, to: &Path) {
    copy_dir(from, to);
    for entry in std::fs::read_dir(from).expect("read_dir") {
        let entry = entry.expect("entry");
        if entry.file_type().expect("type").is_dir() {
            copy_tree(&entry.path(), &to.join(entry.file_name()));
        }
    }
}

/// Every file of a tree by its path relative to `root`: (length, CRC-32C of its bytes).
pub fn tree_digest(root: &Path) -> BTreeMap<String, (usize, u32)> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<String, (usize, u32)>) {
        for entry in std::fs::read_dir(dir).expect("read_dir") {
            let entry = entry.expect("entry");
            let path = entry.path();
            if entry.file_type().expect("type").is_dir() {
                walk(root, &path, out);
            } else {
                let bytes = std::fs::read(&path).expect("read");
                let rel = path.strip_prefix(root).expect("under root");
                out.insert(
                    rel.to_string_lossy().into_owned(),
                    (bytes.len(), crc32c::crc32c(&bytes)),
                );
            }
        }
    }
    let mut out = BTreeMap::new();
    walk(root, root, &mut out);
    out
}

/// The descriptors this process holds on files under `dir` (from `/proc/self/fd`). Counting only
/// those keeps the count exact while other tests of the same binary open files elsewhere.
pub fn descriptors_under(dir: &Path) -> usize {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
        .filter(|target| target.starts_with(&dir))
        .count()
}

/// Every background job of a log manager at the same interval (`None`: off).
pub fn every_job(every: Option<std::time::Duration>) -> oncelog::JobIntervals {
    oncelog::JobIntervals::default()
        .with_flush(every)
        .with_checkpoints(every)
        .with_high_watermarks(every)
        .with_retention(every)
        .with_producer_expiry(every)
        .with_snapshots(every)
        .with_deletion(every)
        .with_cleaning(every)
        .with_tiering(every)
}

/// The batch of `records` records producer `partition + 1` (epoch 0) sends at `seq` into
/// partition `partition`: the same bytes every time, so a retry is exact. Timestamped in 2096,
/// so a retention job (7 days by default) running beside it finds nothing to delete.
pub fn producer_batch_in_2096(partition: i32, seq: i32, records: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(partition as i64 + 1, 0, seq);
    for i in 0..records {
        let value = format!("p{partition} s{}", seq + i);
        b.append(
            4_000_000_000_000 + (seq + i) as i64,
            None,
            Some(value.as_bytes()),
            &[],
        );
    }
    b.build().expect("valid batch")
}
