//! The active segment's space on a real file system (docs/design.md, "Segment space"): it
//! grows in steps ahead of the writer instead of being allocated to `segment_bytes` at once, so
//! an idle partition holds little disk; the background thread's growth and the appender's own
//! meet without gaps or overlaps; a sealed segment is trimmed to its batches.

use std::os::unix::fs::MetadataExt;
use std::path::Path;

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::{AppendOutcome, FlushPolicy, Log, LogConfig, Preallocation};

fn batch(records: usize, value: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for i in 0..records {
        b.append(
            1_700_000_000_000 + i as i64,
            None,
            Some(&vec![7u8; value][..]),
            &[],
        );
    }
    b.build().unwrap()
}

fn active_log(dir: &Path, log: &Log) -> std::fs::Metadata {
    let base = *log.maintenance().segment_base_offsets().last().unwrap();
    std::fs::metadata(dir.join(format!("{base:020}.log"))).unwrap()
}

/// Every record is read back, each batch whole and with its CRC.
fn read_all(log: &Log) -> i64 {
    let mut next = 0;
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            assert!(b.is_crc_valid());
            assert_eq!(b.base_offset(), next);
            next = b.last_offset() + 1;
        }
    }
    next
}

#[test]
fn an_idle_partition_holds_one_step_of_disk_not_a_whole_segment() {
    let dir = tempfile::tempdir().unwrap();
    for preallocation in [Preallocation::Reserved, Preallocation::Zeroed] {
        let path = dir.path().join(format!("{preallocation:?}"));
        let config = LogConfig::builder()
            .preallocation(preallocation)
            .build()
            .unwrap();
        let log = Log::open(&path, config.clone()).unwrap();
        // Opened and not written: nothing allocated.
        assert_eq!(active_log(&path, &log).blocks(), 0, "{preallocation:?}");
        log.append(&batch(10, 100)).unwrap();
        log.flush().unwrap();
        let meta = active_log(&path, &log);
        let held = meta.blocks() * 512;
        // The default step is 32 MiB; the segment is 1 GiB.
        assert!(
            held <= config.allocation_step_bytes as u64 + (1 << 20),
            "{preallocation:?}: {held} bytes held"
        );
        assert!(meta.len() <= config.allocation_step_bytes as u64);
        log.close().unwrap();
        // A clean close trims the segment to its batches.
        let log = Log::open(&path, config).unwrap();
        assert_eq!(active_log(&path, &log).len(), log.size_bytes());
        log.close().unwrap();
    }
}

#[test]
fn space_grows_in_steps_as_the_writer_needs_it_and_every_batch_reads_back() {
    for (preallocation, flush_policy) in [
        (Preallocation::Zeroed, FlushPolicy::Always),
        (Preallocation::Zeroed, FlushPolicy::Manual),
        (Preallocation::Reserved, FlushPolicy::Always),
        (Preallocation::Reserved, FlushPolicy::Manual),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let config = LogConfig::builder()
            .segment_bytes(256 << 10)
            .allocation_step_bytes(16 << 10)
            .segment_index_bytes(64 << 10)
            .index_interval_bytes(512)
            .preallocation(preallocation)
            .flush_policy(flush_policy)
            .build()
            .unwrap();
        let log = Log::open(dir.path(), config.clone()).unwrap();
        let mut records = 0;
        for i in 0..600 {
            let b = batch(1 + i % 5, 100 + (i * 37) % 900);
            let AppendOutcome::Appended(info) = log.append(&b).unwrap() else {
                panic!("not a duplicate")
            };
            records += 1 + i % 5;
            // The file is never shorter than its batches, and never far ahead of them.
            let len = active_log(dir.path(), &log).len();
            let written = info.position as u64 + b.len() as u64;
            assert!(len >= written, "{preallocation:?}: {len} < {written}");
            assert!(
                len <= written + 2 * config.allocation_step_bytes as u64,
                "{preallocation:?}: {len} bytes for {written}"
            );
        }
        assert!(log.maintenance().segment_count() > 2, "rolled");
        assert_eq!(read_all(&log), records as i64);
        log.close().unwrap();
        let log = Log::open(dir.path(), config).unwrap();
        assert!(log.recovery_report().clean_shutdown);
        assert_eq!(read_all(&log), records as i64);
        log.close().unwrap();
    }
}

#[test]
fn an_abandoned_log_reopens_with_its_zeros_cut_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig::builder()
        .segment_bytes(1 << 20)
        .allocation_step_bytes(64 << 10)
        .preallocation(Preallocation::Zeroed)
        .flush_policy(FlushPolicy::Always)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config.clone()).unwrap();
    for _ in 0..50 {
        log.append(&batch(3, 500)).unwrap();
    }
    let size = log.size_bytes();
    log.abandon();
    let log = Log::open(dir.path(), config).unwrap();
    assert_eq!(log.log_end_offset(), 150);
    assert_eq!(log.size_bytes(), size);
    assert_eq!(
        active_log(dir.path(), &log).len(),
        size,
        "zeros cut on open"
    );
    log.append(&batch(3, 500)).unwrap();
    assert_eq!(read_all(&log), 153);
    log.close().unwrap();
}
