//! Sealed segments are mapped only while they are read and hold no file descriptor
//! (docs/design.md, "Sealed segments"): a log of many segments costs one descriptor (its
//! directory lock) however many it has; opening it after a clean close maps none of its sealed
//! segments and reads none of their batches (only the last entry of each index); reads map what they need and the log keeps at most
//! `max_mapped_segments` mapped, while the bytes a reader was handed stay valid.

use std::path::Path;

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::io::SimFs;
use oncelog::{Environment, Log, LogConfig};

fn batch(i: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for r in 0..4 {
        let value = format!("batch {i} record {r} {}", "x".repeat(200));
        b.append(
            1_700_000_000_000 + i as i64,
            None,
            Some(value.as_bytes()),
            &[],
        );
    }
    b.build().unwrap()
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(8 * 1024)
        .segment_index_bytes(1024)
        .max_mapped_segments(2)
        .build()
        .unwrap()
}

/// A log of many segments, closed cleanly.
fn fill(dir: &Path, env: Environment, batches: usize) {
    let log = Log::open_in(env, dir, config()).unwrap();
    for i in 0..batches {
        log.append(&batch(i)).unwrap();
    }
    assert!(
        log.maintenance().segment_count() >= 10,
        "{} segments",
        log.maintenance().segment_count()
    );
    log.close().unwrap();
}

/// Descriptors on the log's files: the tests beside this one open files of their own.
fn open_descriptors(dir: &Path) -> usize {
    crate::common::descriptors_under(dir)
}

/// Maps of files in `dir`, from `/proc/self/maps`.
fn maps_of(dir: &Path) -> usize {
    let maps = std::fs::read_to_string("/proc/self/maps").unwrap();
    let dir = dir.to_str().unwrap();
    maps.lines().filter(|l| l.contains(dir)).count()
}

fn read_from(log: &Log, offset: i64) -> Vec<(i64, Vec<u8>)> {
    let bytes = log.read(offset, 1).unwrap();
    BatchIter::new(&bytes)
        .map(|item| {
            let (_, b) = item.unwrap();
            (b.base_offset(), b.as_bytes().to_vec())
        })
        .collect()
}

#[test]
fn a_log_of_many_segments_holds_one_descriptor_and_maps_only_what_is_read() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), Environment::default(), 200);
    let before = open_descriptors(dir.path());
    let log = Log::open(dir.path(), config()).unwrap();
    // The lock file; nothing else: no segment keeps its files open.
    assert_eq!(open_descriptors(dir.path()), before + 1);
    // The active segment's three maps, no sealed one's.
    assert_eq!(maps_of(dir.path()), 3);
    let bases = log.maintenance().segment_base_offsets();
    // Reading every sealed segment maps each in turn; at most two stay mapped.
    let mut held = Vec::new();
    for &base in &bases[..bases.len() - 1] {
        let got = read_from(&log, base);
        assert_eq!(got[0].0, base);
        held.push(log.read(base, 1).unwrap());
        assert!(maps_of(dir.path()) <= 3 + 3 * 2 + held.len());
    }
    assert_eq!(open_descriptors(dir.path()), before + 1);
    // Every batch a reader was handed is still intact, its segment unmapped or not.
    for (bytes, &base) in held.iter().zip(&bases) {
        let (_, b) = BatchIter::new(bytes).next().unwrap().unwrap();
        assert_eq!(b.base_offset(), base);
        assert!(b.is_crc_valid());
    }
    drop(held);
    assert!(maps_of(dir.path()) <= 3 + 3 * 2);
    // Unmapped segments are mapped again when read again, with the same bytes.
    let first = read_from(&log, bases[0]);
    for &base in &bases[1..bases.len() - 1] {
        read_from(&log, base);
    }
    assert_eq!(read_from(&log, bases[0]), first);
    log.close().unwrap();
}

#[test]
fn opening_a_cleanly_closed_log_maps_no_sealed_segment_and_reads_no_batch() {
    let fs = SimFs::new();
    let env = || Environment::default().with_fs(fs.as_dyn());
    let dir = Path::new("/data/p-0");
    fill(dir, env(), 200);
    let before = fs.counters();
    let log = Log::open_in(env(), dir, config()).unwrap();
    let after = fs.counters();
    let delta =
        |of: &std::collections::BTreeMap<String, u64>,
         was: &std::collections::BTreeMap<String, u64>,
         kind: &str| of.get(kind).unwrap_or(&0) - was.get(kind).unwrap_or(&0);
    // The last segment is mapped once, to become the active one (its tail is not walked:
    // the clean checkpoint vouches for where it ends, and the log checks the tail before its
    // first change); no sealed segment is mapped.
    assert_eq!(
        delta(&after.maps, &before.maps, "log"),
        1,
        "{:?}",
        after.maps
    );
    assert_eq!(delta(&after.maps, &before.maps, "index"), 1);
    assert_eq!(delta(&after.maps, &before.maps, "timeindex"), 1);
    // No batch is read; of each segment's indexes, the last segment's too, one read of their
    // last entries, which are held to the checkpoint's record.
    let segments = log.maintenance().segment_count() as u64;
    assert!(segments >= 11);
    assert_eq!(delta(&after.reads, &before.reads, "log"), 0);
    assert_eq!(delta(&after.reads, &before.reads, "index"), segments);
    assert_eq!(delta(&after.reads, &before.reads, "timeindex"), segments);
    // Nothing is synced.
    assert_eq!(
        (after.data_syncs, after.dir_syncs),
        (before.data_syncs, before.dir_syncs)
    );
    // Every sealed segment still reads (each mapped in turn, its indexes checked then).
    let all: usize = log
        .maintenance()
        .segment_base_offsets()
        .iter()
        .map(|&b| read_from(&log, b).len())
        .sum();
    assert_eq!(all, log.maintenance().segment_count());
    log.close().unwrap();
}
