//! `Log::fetch` and its records: what a consumer gets back without hand-parsing batches, and
//! the offsets it goes on from.

use crate::common;

use common::{batch, small_config, T0};
use oncelog::format::{BatchBuilder, Compression};
use oncelog::{Log, LogConfig, ReadError};

/// A log of `batches` batches of 10 records each, with values naming their offset.
fn log_with(dir: &std::path::Path, batches: usize, config: LogConfig) -> Log {
    let log = Log::open(dir, config).expect("open");
    for b in 0..batches {
        let mut builder = BatchBuilder::new();
        for r in 0..10 {
            let offset = b * 10 + r;
            builder.append(
                T0 + offset as i64,
                Some(b"key"),
                Some(format!("value {offset}").as_bytes()),
                &[],
            );
        }
        log.append(&builder.build().expect("build"))
            .expect("append");
    }
    // A log used alone commits what it made durable: the high watermark is the durable end.
    log.flush().expect("flush");
    log
}

#[test]
fn fetch_serves_only_what_is_below_the_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_with(dir.path(), 2, LogConfig::default());
    log.append(&batch(5, T0, 10)).unwrap();
    assert_eq!((log.high_watermark(), log.log_end_offset()), (20, 25));
    let f = log.fetch(0, 1 << 20).unwrap();
    assert_eq!((f.next_offset, f.high_watermark), (20, 20));
    assert!(log.fetch(20, 1 << 20).unwrap().bytes.is_empty());
    log.flush().unwrap();
    assert_eq!(log.fetch(20, 1 << 20).unwrap().next_offset, 25);
}

#[test]
fn fetch_reports_the_next_offset_and_the_watermarks() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_with(dir.path(), 5, LogConfig::default());
    let f = log.fetch(0, 1 << 20).unwrap();
    assert_eq!(f.offset, 0);
    assert_eq!(f.next_offset, 50);
    assert_eq!(f.high_watermark, 50);
    assert_eq!(log.high_watermark(), log.log_end_offset());
    assert_eq!(f.log_start_offset, 0);
    assert_eq!(f.bytes, log.read(0, 1 << 20).unwrap());
}

#[test]
fn records_start_at_the_fetched_offset_inside_its_batch() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_with(dir.path(), 3, LogConfig::default());
    let f = log.fetch(13, 1 << 20).unwrap();
    let records: Vec<_> = f.records().collect::<Result<_, _>>().unwrap();
    assert_eq!(records.first().map(|r| r.offset), Some(13));
    assert_eq!(records.len(), 17);
    for r in &records {
        assert_eq!(r.key.as_deref(), Some(&b"key"[..]));
        let value = format!("value {}", r.offset);
        assert_eq!(r.value.as_deref(), Some(value.as_bytes()));
        assert_eq!(r.timestamp, T0 + r.offset);
    }
}

#[test]
fn following_next_offset_reads_every_record_once_across_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    for i in 0..150 {
        log.append(&batch(10, T0 + i, 100)).unwrap();
    }
    log.flush().unwrap();
    assert!(
        log.maintenance().segment_count() > 2,
        "rolled: {}",
        log.maintenance().segment_count()
    );
    let mut offset = 0;
    let mut seen = Vec::new();
    loop {
        let f = log.fetch(offset, 4096).unwrap();
        if f.bytes.is_empty() {
            assert_eq!(f.next_offset, offset, "an empty fetch stays where it is");
            break;
        }
        assert!(f.next_offset > offset);
        for r in f.records() {
            seen.push(r.unwrap().offset);
        }
        offset = f.next_offset;
    }
    assert_eq!(seen, (0..1500).collect::<Vec<_>>());
    assert_eq!(offset, log.high_watermark());
}

#[test]
fn compressed_batches_come_back_as_records() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let mut b = BatchBuilder::new().compression(Compression::Zstd);
    for i in 0..20 {
        b.append(T0 + i, None, Some(format!("z{i}").as_bytes()), &[]);
    }
    log.append(&b.build().unwrap()).unwrap();
    log.flush().unwrap();
    let values: Vec<_> = log
        .fetch(15, 1 << 20)
        .unwrap()
        .records()
        .map(|r| r.unwrap().value.unwrap())
        .collect();
    assert_eq!(values, ["z15", "z16", "z17", "z18", "z19"]);
}

#[test]
fn fetch_at_the_end_is_empty_and_past_it_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let log = log_with(dir.path(), 1, LogConfig::default());
    let f = log.fetch(10, 1 << 20).unwrap();
    assert!(f.bytes.is_empty());
    assert_eq!((f.next_offset, f.high_watermark), (10, 10));
    assert_eq!(f.records().count(), 0);
    let e = log.fetch(11, 1 << 20).unwrap_err();
    assert!(
        matches!(
            e,
            ReadError::OffsetOutOfRange {
                offset: 11,
                log_start_offset: 0,
                log_end_offset: 10
            }
        ),
        "{e}"
    );
    assert_eq!(e.kind(), "offset_out_of_range");
    log.close().unwrap();
    assert_eq!(log.fetch(0, 1 << 20).unwrap_err().kind(), "closed");
}
