//! The cursor of `Log::reader`: record by record or fetch by fetch across fetches, under both
//! isolation levels, bounded by the high watermark, and waiting for it to move (appends,
//! flushes, `set_high_watermark`, markers) without polling.

use crate::common;

use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::{batch, T0};
use oncelog::format::BatchBuilder;
use oncelog::{
    FlushPolicy, HighWatermarkPolicy, IsolationLevel, Log, LogConfig, ReadError, TxnMarker,
    WaitOutcome,
};

/// Long enough never to be what ends a wait that must end otherwise.
const FOREVER: Duration = Duration::from_secs(60);

fn open_with(config: LogConfig) -> (tempfile::TempDir, Arc<Log>) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    (dir, Arc::new(log))
}

fn open() -> (tempfile::TempDir, Arc<Log>) {
    open_with(LogConfig::default())
}

/// A batch of `n` records whose values are their numbers from `first` on.
fn numbered(first: usize, n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for i in first..first + n {
        b.append(T0 + i as i64, None, Some(i.to_string().as_bytes()), &[]);
    }
    b.build().unwrap()
}

fn value(record: &oncelog::format::ConsumerRecord) -> String {
    String::from_utf8(record.value.as_ref().unwrap().to_vec()).unwrap()
}

#[test]
fn it_reads_every_record_across_fetches_of_one_batch_each() {
    let (_dir, log) = open();
    for b in 0..10 {
        log.append(&numbered(b * 3, 3)).unwrap();
    }
    log.flush().unwrap();
    // A limit below one batch: every fetch returns exactly one.
    let mut reader = log.reader(0).max_bytes(1);
    let mut seen = Vec::new();
    while let Some(record) = reader.next_record().unwrap() {
        assert_eq!(record.offset, seen.len() as i64);
        seen.push(value(&record));
        assert_eq!(reader.position(), record.offset + 1);
    }
    let expected: Vec<String> = (0..30).map(|i| i.to_string()).collect();
    assert_eq!(seen, expected);
    assert_eq!(reader.position(), 30);
    assert!(reader.next_record().unwrap().is_none(), "nothing more");
}

#[test]
fn it_starts_inside_a_batch_at_the_offset_asked_for() {
    let (_dir, log) = open();
    log.append(&numbered(0, 5)).unwrap();
    log.flush().unwrap();
    let mut reader = log.reader(3);
    assert_eq!(reader.next_record().unwrap().unwrap().offset, 3);
    assert_eq!(reader.next_record().unwrap().unwrap().offset, 4);
    assert!(reader.next_record().unwrap().is_none());
}

#[test]
fn next_fetch_hands_out_whole_batches_and_moves_past_them() {
    let (_dir, log) = open();
    log.append(&numbered(0, 2)).unwrap();
    log.append(&numbered(2, 2)).unwrap();
    log.flush().unwrap();
    let mut reader = log.reader(1).max_bytes(1);
    let first = reader.next_fetch().unwrap().unwrap();
    assert_eq!((first.offset, first.next_offset), (1, 2));
    assert_eq!(
        first.records().count(),
        1,
        "the record below the position is skipped"
    );
    assert_eq!(reader.position(), 2);
    let second = reader.next_fetch().unwrap().unwrap();
    assert_eq!(second.next_offset, 4);
    assert!(reader.next_fetch().unwrap().is_none());
    assert_eq!(reader.position(), 4);
}

/// The high watermark rule: by default a record is readable once durable. The reader yields
/// nothing before the flush, and a reader waiting is woken by the flush itself.
#[test]
fn unflushed_records_wait_for_the_flush_that_commits_them() {
    let (_dir, log) = open_with(
        LogConfig::builder()
            .flush_policy(FlushPolicy::Manual)
            .build()
            .unwrap(),
    );
    log.append(&numbered(0, 2)).unwrap();
    let mut reader = log.reader(0);
    assert!(
        reader.next_record().unwrap().is_none(),
        "not flushed, not committed"
    );
    assert!(matches!(
        reader.wait(Duration::from_millis(20)),
        WaitOutcome::TimedOut { .. }
    ));
    let flusher = {
        let log = Arc::clone(&log);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            log.flush().unwrap();
        })
    };
    let record = reader.next_record_timeout(FOREVER).unwrap().unwrap();
    assert_eq!(record.offset, 0);
    flusher.join().unwrap();
}

#[test]
fn under_a_caller_set_high_watermark_the_setter_wakes_the_reader() {
    let (_dir, log) = open_with(
        LogConfig::builder()
            .high_watermark(HighWatermarkPolicy::SetByCaller)
            .build()
            .unwrap(),
    );
    log.append(&batch(3, T0, 10)).unwrap();
    log.flush().unwrap();
    let mut reader = log.reader(0);
    assert!(
        reader.next_record().unwrap().is_none(),
        "durable but not committed"
    );
    let setter = {
        let log = Arc::clone(&log);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            log.replica().set_high_watermark(2).unwrap();
        })
    };
    assert_eq!(
        reader.next_record_timeout(FOREVER).unwrap().unwrap().offset,
        0
    );
    assert_eq!(reader.next_record().unwrap().unwrap().offset, 1);
    assert!(
        reader.next_record().unwrap().is_none(),
        "offset 2 is above the watermark"
    );
    setter.join().unwrap();
}

#[test]
fn read_committed_skips_aborted_records_and_markers_and_waits_for_the_commit() {
    let (_dir, log) = open();
    let txn = |pid: i64, seq: i32, first: usize| {
        let mut b = BatchBuilder::new()
            .producer(pid, 0, seq)
            .transactional(true);
        b.append(T0, None, Some(format!("t{first}").as_bytes()), &[]);
        b.build().unwrap()
    };
    log.append(&txn(1, 0, 0)).unwrap(); // 0: aborted below
    log.append_marker(&TxnMarker::abort(1, 0, 0)).unwrap(); // 1
    log.append(&numbered(2, 1)).unwrap(); // 2
    log.append(&txn(2, 0, 3)).unwrap(); // 3: open until committed
    log.flush().unwrap();
    let mut reader = log.reader(0).isolation(IsolationLevel::ReadCommitted);
    let record = reader.next_record().unwrap().unwrap();
    assert_eq!((record.offset, value(&record)), (2, "2".to_string()));
    assert!(
        reader.next_record().unwrap().is_none(),
        "the open transaction holds the LSO"
    );
    assert_eq!(reader.position(), 3);
    let committer = {
        let log = Arc::clone(&log);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            log.append_marker(&TxnMarker::commit(2, 0, 0)).unwrap();
            log.flush().unwrap();
        })
    };
    let record = reader.next_record_timeout(FOREVER).unwrap().unwrap();
    assert_eq!((record.offset, value(&record)), (3, "t3".to_string()));
    committer.join().unwrap();
    assert!(reader.next_record().unwrap().is_none());
    assert_eq!(reader.position(), 5, "past the commit marker");
}

#[test]
fn a_position_removed_by_delete_records_is_out_of_range_until_seek() {
    let (_dir, log) = open();
    log.append(&numbered(0, 4)).unwrap();
    log.flush().unwrap();
    let mut reader = log.reader(0);
    assert_eq!(reader.next_record().unwrap().unwrap().offset, 0);
    log.delete_records(2).unwrap();
    // The records fetched before the deletion are handed out; the next fetch is refused.
    let mut reader = log.reader(1);
    let e = reader.next_record().unwrap_err();
    assert!(
        matches!(
            e,
            ReadError::OffsetOutOfRange {
                log_start_offset: 2,
                ..
            }
        ),
        "{e:?}"
    );
    reader.seek(log.log_start_offset());
    assert_eq!(reader.next_record().unwrap().unwrap().offset, 2);
}

#[test]
fn a_close_ends_a_wait() {
    let (_dir, log) = open();
    let reader = log.reader(0);
    let closer = {
        let log = Arc::clone(&log);
        thread::spawn(move || {
            thread::sleep(Duration::from_millis(50));
            log.close().unwrap();
        })
    };
    assert_eq!(reader.wait(FOREVER), WaitOutcome::Closed);
    closer.join().unwrap();
}
