//! Exactly-once appends (docs/design.md, contract 2): a retry of any batch still in its producer's
//! window returns the original offsets and writes nothing, before and after restarts.

use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use oncelog::format::BatchBuilder;
use oncelog::producer::{ProducerError, ProducerLimitPolicy, ProducerStateConfig, SnapshotVersion};
use oncelog::{AppendError, AppendOutcome, DuplicateInfo, Log, LogConfig};
use oncelog::{Clock, Environment};

fn batch(pid: i64, epoch: i16, seq: i32, records: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(pid, epoch, seq);
    for i in 0..records {
        b.append(
            1_700_000_000_000 + i as i64,
            Some(b"k"),
            Some(&[7u8; 50][..]),
            &[],
        );
    }
    b.build().expect("valid batch")
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(8 * 1024)
        .segment_index_bytes(1024)
        .build()
        .unwrap()
}

fn appended(outcome: AppendOutcome) -> (i64, i64) {
    match outcome {
        AppendOutcome::Appended(i) => (i.first_offset, i.last_offset),
        other => panic!("expected appended, got {other:?}"),
    }
}

fn duplicate(outcome: Result<AppendOutcome, AppendError>) -> (i64, i64) {
    match outcome {
        Ok(AppendOutcome::Duplicate(DuplicateInfo {
            first_offset,
            last_offset,
            ..
        })) => (first_offset, last_offset),
        other => panic!("expected duplicate, got {other:?}"),
    }
}

/// Appends `n` batches of 3 records for `pid`, returning each batch's bytes and offsets.
fn produce(log: &Log, pid: i64, n: usize) -> Vec<(Vec<u8>, (i64, i64))> {
    (0..n)
        .map(|i| {
            let b = batch(pid, 0, (i * 3) as i32, 3);
            let offsets = appended(log.append(&b).expect("append"));
            (b, offsets)
        })
        .collect()
}

#[test]
fn retry_returns_original_offsets_and_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    log.append(&batch(-1, -1, -1, 2)).unwrap();
    let b = batch(42, 0, 0, 5);
    let original = appended(log.append(&b).unwrap());
    assert_eq!(original, (2, 6));
    let end = log.log_end_offset();
    let size = log.size_bytes();
    assert_eq!(duplicate(log.append(&b)), original);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.size_bytes(), size);
}

#[test]
fn every_batch_of_the_window_is_a_duplicate_after_a_clean_restart() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    let sent = produce(&log, 7, 40);
    log.close().unwrap();
    drop(log);
    let log = Log::open(dir.path(), config()).unwrap();
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(
        log.producer_load_report().batches_replayed,
        0,
        "the close snapshot covers all"
    );
    for (b, offsets) in &sent[35..] {
        assert_eq!(duplicate(log.append(b)), *offsets);
    }
    // Older than the window: out of order, like Kafka.
    match log.append(&sent[34].0) {
        Err(AppendError::Producer(ProducerError::OutOfOrderSequence { expected, got, .. })) => {
            assert_eq!((expected, got), (120, 102));
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn every_batch_of_the_window_is_a_duplicate_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    let sent = produce(&log, 9, 30);
    log.flush().unwrap();
    log.abandon();
    let log = Log::open(dir.path(), config()).unwrap();
    assert!(!log.recovery_report().clean_shutdown);
    for (b, offsets) in &sent[25..] {
        assert_eq!(duplicate(log.append(b)), *offsets);
    }
    // The producer continues where it was.
    let next = batch(9, 0, 90, 3);
    assert_eq!(appended(log.append(&next).unwrap()).0, sent[29].1 .1 + 1);
}

#[test]
fn gaps_stale_epochs_and_epoch_bumps_follow_kafkas_rules() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    log.append(&batch(5, 3, 0, 2)).unwrap();
    match log.append(&batch(5, 3, 5, 1)) {
        Err(AppendError::Producer(ProducerError::OutOfOrderSequence {
            producer_id,
            expected,
            got,
        })) => {
            assert_eq!((producer_id, expected, got), (5, 2, 5));
        }
        other => panic!("{other:?}"),
    }
    match log.append(&batch(5, 2, 2, 1)) {
        Err(e @ AppendError::Producer(ProducerError::InvalidProducerEpoch { .. })) => {
            assert_eq!(e.kind(), "invalid_producer_epoch");
        }
        other => panic!("{other:?}"),
    }
    // A new epoch must start at sequence 0.
    assert!(matches!(
        log.append(&batch(5, 4, 2, 1)),
        Err(AppendError::Producer(ProducerError::OutOfOrderSequence {
            expected: 0,
            got: 2,
            ..
        }))
    ));
    appended(log.append(&batch(5, 4, 0, 1)).unwrap());
    // An unknown producer is accepted at any sequence.
    appended(log.append(&batch(77, 0, 1000, 1)).unwrap());
    assert_eq!(log.log_end_offset(), 4);
}

#[test]
fn a_corrupt_newest_snapshot_is_set_aside_and_state_is_rebuilt_from_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    let sent = produce(&log, 3, 30);
    log.close().unwrap();
    drop(log);
    let mut snaps: Vec<_> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .collect();
    snaps.sort();
    let newest = snaps.last().unwrap().clone();
    let mut bytes = std::fs::read(&newest).unwrap();
    let last = bytes.len() - 1;
    bytes[last] ^= 0xff;
    std::fs::write(&newest, bytes).unwrap();

    let log = Log::open(dir.path(), config()).unwrap();
    let report = log.producer_load_report().clone();
    assert_eq!(report.quarantined.len(), 1, "{report:?}");
    assert!(
        report.quarantined[0].0.exists(),
        "renamed aside, not deleted"
    );
    assert!(report.batches_replayed > 0);
    for (b, offsets) in &sent[25..] {
        assert_eq!(duplicate(log.append(b)), *offsets);
    }
}

#[test]
fn deleting_every_snapshot_by_hand_replays_the_whole_log() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    let sent = produce(&log, 11, 20);
    log.close().unwrap();
    drop(log);
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|e| e == "snapshot") {
            std::fs::remove_file(p).unwrap();
        }
    }
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.producer_load_report().snapshot_offset, None);
    assert_eq!(log.producer_load_report().batches_replayed, 20);
    for (b, offsets) in &sent[15..] {
        assert_eq!(duplicate(log.append(b)), *offsets);
    }
}

#[test]
fn version_1_snapshots_keep_only_the_newest_batch_like_kafka() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .snapshot_version(SnapshotVersion::V1)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg.clone()).unwrap();
    let sent = produce(&log, 4, 10);
    log.close().unwrap();
    drop(log);
    let log = Log::open(dir.path(), cfg).unwrap();
    assert_eq!(duplicate(log.append(&sent[9].0)), sent[9].1);
    assert!(matches!(
        log.append(&sent[8].0),
        Err(AppendError::Producer(
            ProducerError::OutOfOrderSequence { .. }
        ))
    ));
}

#[test]
fn a_wider_window_keeps_more_batches_across_restart() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .producer_state(ProducerStateConfig::default().with_window(1024))
        .segment_bytes(1 << 20)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg.clone()).unwrap();
    let sent = produce(&log, 1, 1100);
    log.close().unwrap();
    drop(log);
    let log = Log::open(dir.path(), cfg).unwrap();
    assert_eq!(
        duplicate(log.append(&sent[1100 - 1024].0)),
        sent[1100 - 1024].1
    );
    assert!(log.append(&sent[1100 - 1025].0).is_err());
}

#[test]
fn interval_snapshots_bound_the_replay_after_a_crash() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .segment_bytes(1 << 20)
        .snapshot_interval_bytes(4096)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg.clone()).unwrap();
    let sent = produce(&log, 8, 100);
    log.flush().unwrap();
    log.abandon();
    let log = Log::open(dir.path(), cfg).unwrap();
    let report = log.producer_load_report();
    assert!(report.snapshot_offset.is_some(), "{report:?}");
    // One interval of ~4 KiB holds a few dozen of these ~150-byte batches at most.
    assert!(report.batches_replayed < 40, "{report:?}");
    for (b, offsets) in &sent[95..] {
        assert_eq!(duplicate(log.append(b)), *offsets);
    }
}

#[test]
fn max_producers_with_reject_refuses_new_producers() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .producer_state(
            ProducerStateConfig::default()
                .with_max_producers(Some(2))
                .with_limit_policy(ProducerLimitPolicy::Reject),
        )
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg).unwrap();
    log.append(&batch(1, 0, 0, 1)).unwrap();
    log.append(&batch(2, 0, 0, 1)).unwrap();
    let err = log.append(&batch(3, 0, 0, 1)).unwrap_err();
    assert_eq!(err.kind(), "too_many_producers");
    let end = log.log_end_offset();
    log.append(&batch(1, 0, 1, 1)).unwrap();
    assert_eq!(log.log_end_offset(), end + 1);
}

#[test]
fn max_producers_with_eviction_forgets_the_longest_idle() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(TestClock(AtomicI64::new(1_000)));
    let env = Environment::default().with_clock(clock.clone());
    let cfg = config()
        .into_builder()
        .producer_state(ProducerStateConfig::default().with_max_producers(Some(2)))
        .build()
        .unwrap();
    let log = Log::open_in(env, dir.path(), cfg).unwrap();
    let first = batch(1, 0, 0, 1);
    log.append(&first).unwrap();
    clock.0.store(2_000, Ordering::SeqCst);
    log.append(&batch(2, 0, 0, 1)).unwrap();
    clock.0.store(3_000, Ordering::SeqCst);
    log.append(&batch(3, 0, 0, 1)).unwrap();
    assert_eq!(log.producer_count(), 2);
    assert!(log.producer(1).is_none(), "producer 1 was idle the longest");
    // Forgotten: its retry is no longer recognised, and is stored as an unknown producer's.
    assert!(matches!(log.append(&first), Ok(AppendOutcome::Appended(_))));
}

#[derive(Debug)]
struct TestClock(AtomicI64);
impl Clock for TestClock {
    fn now_ms(&self) -> i64 {
        self.0.load(Ordering::SeqCst)
    }
}

#[test]
fn producers_expire_by_append_wall_clock_not_record_timestamps() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(TestClock(AtomicI64::new(10_000_000)));
    let env = Environment::default().with_clock(clock.clone());
    let cfg = config()
        .into_builder()
        .producer_state(ProducerStateConfig::default().with_expiration_ms(60_000))
        .build()
        .unwrap();
    let log = Log::open_in(env, dir.path(), cfg).unwrap();
    // Record timestamps are from 2023: skewed far into the past, yet the producer is fresh.
    log.append(&batch(1, 0, 0, 1)).unwrap();
    assert_eq!(log.maintenance().expire_producers(10_000_000 + 59_999), 0);
    assert_eq!(log.maintenance().expire_producers(10_000_000 + 60_000), 1);
    assert!(log.producer(1).is_none());
}

#[test]
fn concurrent_retries_of_one_batch_are_written_once() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(Log::open(dir.path(), config()).unwrap());
    let b = Arc::new(batch(21, 0, 0, 4));
    let handles: Vec<_> = (0..4)
        .map(|_| {
            let (log, b) = (Arc::clone(&log), Arc::clone(&b));
            std::thread::spawn(move || log.append(&b).unwrap())
        })
        .collect();
    let outcomes: Vec<_> = handles.into_iter().map(|h| h.join().unwrap()).collect();
    let written = outcomes
        .iter()
        .filter(|o| matches!(o, AppendOutcome::Appended(_)))
        .count();
    assert_eq!(written, 1, "{outcomes:?}");
    assert_eq!(log.log_end_offset(), 4);
    for o in outcomes {
        let offsets = match o {
            AppendOutcome::Appended(i) => (i.first_offset, i.last_offset),
            AppendOutcome::Duplicate(d) => (d.first_offset, d.last_offset),
            other => panic!("unexpected outcome: {other:?}"),
        };
        assert_eq!(offsets, (0, 3));
    }
}
