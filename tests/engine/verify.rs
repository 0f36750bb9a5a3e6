//! `verify`: a read-only deep check that finds each kind of damage and names file and byte.

use std::path::Path;

use oncelog::format::BatchBuilder;
use oncelog::io::RealFs;
use oncelog::verify::verify_dir;
use oncelog::{Log, LogConfig};

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(16 * 1024)
        .segment_index_bytes(4096)
        .index_interval_bytes(512)
        .build()
        .unwrap()
}

fn fill(dir: &Path, batches: usize) -> Log {
    let log = Log::open(dir, config()).unwrap();
    for i in 0..batches {
        let mut b = BatchBuilder::new().producer(1, 0, (i * 5) as i32);
        for r in 0..5 {
            b.append(
                1_700_000_000_000 + (i * 5 + r) as i64,
                None,
                Some(&[b'x'; 40][..]),
                &[],
            );
        }
        log.append(&b.build().unwrap()).unwrap();
    }
    log
}

fn hashes(dir: &Path) -> Vec<(String, Vec<u8>)> {
    let mut v: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let p = e.unwrap().path();
            (
                p.file_name().unwrap().to_string_lossy().into_owned(),
                std::fs::read(&p).unwrap(),
            )
        })
        .collect();
    v.sort();
    v
}

#[test]
fn a_cleanly_closed_log_verifies_clean_and_is_not_modified() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 100).close().unwrap();
    let before = hashes(dir.path());
    let report = verify_dir(&RealFs, dir.path()).unwrap();
    assert!(report.is_clean(), "{:?}", report.problems);
    assert_eq!(report.batches, 100);
    assert!(report.segments >= 2 && report.index_entries > 0 && report.snapshots > 0);
    assert_eq!(hashes(dir.path()), before);
}

#[test]
fn a_flipped_byte_is_reported_with_its_file_and_batch_position() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 100).close().unwrap();
    let first = dir.path().join("00000000000000000000.log");
    let mut bytes = std::fs::read(&first).unwrap();
    let size = 12 + u32::from_be_bytes(bytes[8..12].try_into().unwrap()) as usize;
    bytes[size + 70] ^= 0x40; // inside the second batch's records
    std::fs::write(&first, bytes).unwrap();
    let report = verify_dir(&RealFs, dir.path()).unwrap();
    let p = &report.problems[0];
    assert_eq!(p.file, first);
    assert_eq!(p.position, Some(size));
    assert!(p.reason.contains("CRC"), "{}", p.reason);
}

#[test]
fn after_a_crash_untrimmed_indexes_are_reported_once_each() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 10).abandon();
    let report = verify_dir(&RealFs, dir.path()).unwrap();
    assert!(report.preallocated_bytes > 0);
    assert_eq!(report.problems.len(), 2, "{:?}", report.problems);
    assert!(report
        .problems
        .iter()
        .all(|p| p.reason.contains("preallocated zero entries")));
}

#[test]
fn a_torn_tail_and_a_corrupt_snapshot_are_both_reported() {
    let dir = tempfile::tempdir().unwrap();
    fill(dir.path(), 30).close().unwrap();
    let mut logs: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    let last = logs.last().unwrap();
    let len = std::fs::metadata(last).unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(last)
        .unwrap()
        .set_len(len - 7)
        .unwrap();
    let snap = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .unwrap();
    std::fs::write(&snap, b"\x00\x02garbage").unwrap();
    let report = verify_dir(&RealFs, dir.path()).unwrap();
    assert!(
        report
            .problems
            .iter()
            .any(|p| &p.file == last && p.reason.contains("torn")),
        "{:?}",
        report.problems
    );
    assert!(
        report.problems.iter().any(|p| p.file == snap),
        "{:?}",
        report.problems
    );
}
