//! `Log::metrics`: every counter and histogram a broker exports moves when, and only when, its
//! event happens.

use crate::common;

use common::{batch, replicated_batch, small_config, T0};
use oncelog::format::BatchBuilder;
use oncelog::{FlushPolicy, Log, LogConfig};

fn producer_batch(producer_id: i64, epoch: i16, sequence: i32, records: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(producer_id, epoch, sequence);
    for i in 0..records {
        b.append(T0 + i as i64, None, Some(b"value"), &[]);
    }
    b.build().expect("build")
}

#[test]
fn a_fresh_log_reports_nothing_but_its_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let m = log.metrics();
    assert_eq!(
        (m.batches_appended, m.records_appended, m.bytes_appended),
        (0, 0, 0)
    );
    assert_eq!((m.duplicates, m.refusals.total(), m.rolls), (0, 0, 0));
    assert_eq!((m.flushes, m.flush_latency.count()), (0, 0));
    assert_eq!(m.recovery.bytes_validated, 0);
}

#[test]
fn appends_duplicates_and_refusals_are_counted_by_kind() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let first = producer_batch(7, 0, 0, 3);
    log.append(&first).unwrap();
    log.append(&producer_batch(7, 0, 3, 2)).unwrap();
    log.append(&first).unwrap(); // a retry: duplicate
    let gap = log.append(&producer_batch(7, 0, 9, 1)).unwrap_err();
    assert_eq!(gap.kind(), "out_of_order_sequence");
    log.append(&producer_batch(7, 1, 0, 1)).unwrap(); // a new epoch
    let stale = log.append(&producer_batch(7, 0, 6, 1)).unwrap_err();
    assert_eq!(stale.kind(), "invalid_producer_epoch");
    let mut damaged = batch(2, T0, 10);
    let last = damaged.len() - 1;
    damaged[last] ^= 1;
    assert_eq!(log.append(&damaged).unwrap_err().kind(), "corrupt_batch");

    let m = log.metrics();
    assert_eq!(m.batches_appended, 3);
    assert_eq!(m.records_appended, 6);
    assert_eq!(m.bytes_appended, log.size_bytes());
    assert_eq!(m.duplicates, 1);
    assert_eq!(m.refusals.out_of_order_sequence, 1);
    assert_eq!(m.refusals.invalid_producer_epoch, 1);
    assert_eq!(m.refusals.corrupt_batch, 1);
    assert_eq!(m.refusals.total(), 3);
    assert_eq!(
        m.refusals
            .iter()
            .filter(|&(_, n)| n > 0)
            .map(|(kind, _)| kind)
            .collect::<Vec<_>>(),
        [
            "corrupt_batch",
            "invalid_producer_epoch",
            "out_of_order_sequence"
        ]
    );
}

#[test]
fn replicated_batches_count_as_appended_and_apart() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.replica()
        .append(&replicated_batch(0, 4, T0, 10))
        .unwrap();
    let behind = log
        .replica()
        .append(&replicated_batch(2, 1, T0, 10))
        .unwrap_err();
    assert_eq!(behind.kind(), "unexpected_append_offset");
    let m = log.metrics();
    assert_eq!((m.batches_appended, m.replicated_batches_appended), (1, 1));
    assert_eq!(m.records_appended, 4);
    assert_eq!(m.refusals.unexpected_append_offset, 1);
}

#[test]
fn rolls_flushes_and_snapshots_are_counted() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    for i in 0..100 {
        log.append(&batch(10, T0 + i, 100)).unwrap();
    }
    log.flush().unwrap();
    log.flush().unwrap();
    let m = log.metrics();
    assert_eq!(m.rolls as usize, log.maintenance().segment_count() - 1);
    assert!(m.rolls >= 1);
    assert_eq!(m.snapshot_writes, m.rolls, "one snapshot at each roll");
    assert_eq!(m.flushes, 2);
    assert_eq!(m.flush_latency.count(), 2);
    assert!(m.flush_latency.max() >= m.flush_latency.quantile(0.5));
    assert_eq!(m.durable_append_wait.count(), 0, "no append waited");
    log.close().unwrap();
    assert_eq!(log.metrics().snapshot_writes, m.snapshot_writes + 1);
}

#[test]
fn durable_appends_record_how_long_they_waited() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig::builder()
        .flush_policy(FlushPolicy::Always)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    for i in 0..5 {
        log.append(&batch(1, T0 + i, 10)).unwrap();
    }
    let m = log.metrics();
    assert_eq!(m.durable_append_wait.count(), 5);
    assert!(m.flushes >= 1 && m.flushes <= 5, "{}", m.flushes);
}

#[test]
fn recovery_metrics_come_from_the_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    for i in 0..30 {
        log.append(&batch(10, T0 + i, 100)).unwrap();
    }
    log.abandon();
    let log = Log::open(dir.path(), small_config()).unwrap();
    let r = log.metrics().recovery;
    assert!(!r.clean_shutdown);
    assert_eq!(r.bytes_validated, log.recovery_report().bytes_validated);
    assert!(r.bytes_validated > 0);
    assert_eq!(
        r.segments_validated,
        log.recovery_report().segments_validated
    );
    assert_eq!(
        r.batches_replayed,
        log.producer_load_report().batches_replayed
    );
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    let r = log.metrics().recovery;
    assert!(r.clean_shutdown);
    assert_eq!(r.bytes_validated, 0, "a clean close is not revalidated");
}
