//! How appends write into the active segment (`LogConfig::append_writes`, docs/design.md
//! "Append writes"): through the memory map or through the file (`pwrite`). Either way a reader
//! sees each batch, with the offsets and epoch the log stamped, the moment its append returns,
//! and a reopen finds it where it was; a write through the file that fails is a typed error
//! naming the file, and changes nothing.

use crate::common_sim;

use common_sim::{open, StepClock};
use oncelog::format::{BatchBuilder, BatchIter, TimestampType};
use oncelog::io::sim::OpKind;
use oncelog::io::SimFs;
use oncelog::{AppendError, AppendOutcome, AppendWrites, FlushPolicy, Log, LogConfig};

fn batch(records: usize, ts: i64, value_len: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    let value = vec![b'v'; value_len];
    for i in 0..records {
        b.append(ts + i as i64, Some(b"key"), Some(&value), &[]);
    }
    b.build().expect("build")
}

fn config(writes: AppendWrites, flush_policy: FlushPolicy) -> LogConfig {
    LogConfig::builder()
        .segment_bytes(48 * 1024)
        .segment_index_bytes(4096)
        .allocation_step_bytes(8192)
        .append_writes(writes)
        .flush_policy(flush_policy)
        .build()
        .unwrap()
}

/// Reads every batch from `from` to the log end, checking each CRC; returns (base, last,
/// maxTimestamp) of each.
fn read_all(log: &Log, from: i64) -> Vec<(i64, i64, i64)> {
    let mut out = Vec::new();
    let mut next = from;
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        assert!(!bytes.is_empty(), "nothing read at {next}");
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            assert!(b.is_crc_valid(), "CRC of the batch at {}", b.base_offset());
            if b.last_offset() < next {
                continue;
            }
            out.push((b.base_offset(), b.last_offset(), b.max_timestamp()));
            next = b.last_offset() + 1;
        }
    }
    out
}

#[test]
fn every_way_of_writing_shows_each_batch_at_once_and_after_reopen() {
    for writes in [AppendWrites::Map, AppendWrites::File, AppendWrites::Auto] {
        for policy in [FlushPolicy::Manual, FlushPolicy::Always] {
            let dir = tempfile::tempdir().unwrap();
            let mut cfg = config(writes, policy);
            // LogAppendTime rewrites the CRC of every batch as it is written.
            cfg.message_timestamp_type = if policy == FlushPolicy::Always {
                TimestampType::LogAppendTime
            } else {
                TimestampType::CreateTime
            };
            let log = Log::open(dir.path(), cfg.clone()).unwrap();
            let mut expected = Vec::new();
            for i in 0..150usize {
                // Sizes from a few bytes past a page to several pages, over several rolls.
                let b = batch(1 + i % 7, 1_700_000_000_000 + i as i64, 300 + 97 * (i % 40));
                let info = match log.append(&b).unwrap() {
                    AppendOutcome::Appended(info) => info,
                    other => panic!("{writes:?}/{policy:?}: {other:?}"),
                };
                // Visible at once, stamped: the read goes through the segment's map.
                let read = read_all(&log, info.first_offset);
                assert_eq!(read.len(), 1, "{writes:?}/{policy:?} batch {i}");
                assert_eq!(
                    (read[0].0, read[0].1),
                    (info.first_offset, info.last_offset)
                );
                expected.push(read[0]);
                if i % 3 == 0 {
                    // A hint that a sync follows (the replicated store's persist): it starts
                    // the write-back of what is unflushed, and changes nothing a reader or a
                    // reopen sees.
                    log.start_write_back();
                }
                if policy == FlushPolicy::Manual && i % 10 == 0 {
                    log.flush_to(info.last_offset + 1).unwrap();
                }
            }
            assert!(
                log.maintenance().segment_count() > 3,
                "rolled: {}",
                log.maintenance().segment_count()
            );
            assert_eq!(read_all(&log, 0), expected, "{writes:?}/{policy:?}");
            let end = log.log_end_offset();
            log.close().unwrap();
            let log = Log::open(dir.path(), cfg.clone()).unwrap();
            assert_eq!(log.log_end_offset(), end);
            assert_eq!(
                read_all(&log, 0),
                expected,
                "{writes:?}/{policy:?} reopened"
            );
            // Unflushed appends after the clean open, then an unclean reopen: recovery reads
            // what was written through either path, validated batch by batch.
            for i in 0..20 {
                log.append(&batch(3, 1_700_000_100_000 + i, 500)).unwrap();
            }
            let end = log.log_end_offset();
            log.abandon();
            let log = Log::open(dir.path(), cfg).unwrap();
            assert!(!log.recovery_report().clean_shutdown);
            assert_eq!(log.log_end_offset(), end, "{writes:?}/{policy:?}");
            assert_eq!(read_all(&log, 0).len(), expected.len() + 20);
        }
    }
}

#[test]
fn a_failed_write_through_the_file_is_a_typed_error_and_changes_nothing() {
    let fs = SimFs::new();
    let clock = StepClock::new();
    let cfg = config(AppendWrites::File, FlushPolicy::Manual);
    let log = open(&fs, &clock, &cfg).unwrap();
    for i in 0..5 {
        log.append(&batch(2, 1_700_000_000_000 + i, 200)).unwrap();
    }
    let end = log.log_end_offset();
    let size = log.size_bytes();
    let retried = batch(4, 1_700_000_000_100, 900);
    fs.fail_next(OpKind::Write, 1, libc::EIO);
    match log.append(&retried) {
        Err(AppendError::Io(e)) => {
            assert_eq!(e.op, "pwrite", "{e}");
            assert!(
                e.path.ends_with("00000000000000000000.log"),
                "names the segment file: {e}"
            );
        }
        other => panic!("expected the pwrite error, got {other:?}"),
    }
    assert_eq!(
        log.log_end_offset(),
        end,
        "the refused append took no offsets"
    );
    assert_eq!(log.size_bytes(), size, "nor any bytes");
    // The log stays writable: the same batch goes in at the same offsets.
    match log.append(&retried).unwrap() {
        AppendOutcome::Appended(info) => assert_eq!(info.first_offset, end),
        other => panic!("{other:?}"),
    }
    log.flush().unwrap();
    let all = read_all(&log, 0);
    assert_eq!(all.len(), 6);
    log.abandon();
    fs.crash(7);
    let log = open(&fs, &clock, &cfg).unwrap();
    assert_eq!(
        read_all(&log, 0),
        all,
        "what was flushed survives a power cut"
    );
}

#[test]
fn writes_through_the_file_into_recycled_segment_files_read_back_as_written() {
    // Retention's files reused as new segments' files, their old pages out of the way of the
    // new batches: every batch reads back as written, before and after an unclean reopen.
    let dir = tempfile::tempdir().unwrap();
    let cfg = (config(AppendWrites::File, FlushPolicy::Always))
        .into_builder()
        .recycled_segments(2)
        .retention_bytes(Some(0))
        .retention_ms(None)
        .file_delete_delay_ms(0)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg.clone()).unwrap();
    let mut kept = Vec::new();
    for round in 0..6 {
        for i in 0..60usize {
            let ts = 1_700_000_000_000 + (round * 100 + i) as i64;
            log.append(&batch(1 + i % 5, ts, 200 + 131 * (i % 9)))
                .unwrap();
        }
        if round < 5 {
            // Everything but the active segment goes, into the pool.
            log.maintenance()
                .enforce_retention(1_700_000_000_000)
                .unwrap();
        }
        kept = read_all(&log, log.log_start_offset());
    }
    assert!(
        log.metrics().recycled_rolls >= 2,
        "rolled into recycled files: {:?}",
        log.metrics().recycled_rolls
    );
    let (start, end) = (log.log_start_offset(), log.log_end_offset());
    log.abandon();
    let log = Log::open(dir.path(), cfg).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (start, end));
    assert_eq!(read_all(&log, start), kept);
}
