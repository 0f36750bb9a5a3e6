//! Transactions at the log layer, rule by rule (docs/design.md, "Transactions";
//! docs/kafka-format.md §7): transactional batches open transactions, markers end them, the first
//! unstable and last stable offsets follow, aborted transactions get their `.txnindex` entries,
//! read_committed fetches skip them, and all of it survives restarts, truncation and retention.

use crate::common;

use std::path::Path;

use common::{env_with, TestClock, T0};
use oncelog::format::{
    end_txn_marker, AbortedTransaction, BatchBuilder, BatchError, BatchIter, ControlRecordError,
    ControlType, RecordBatch,
};
use oncelog::producer::{ProducerError, ProducerLimitPolicy, ProducerStateConfig, SnapshotVersion};
use oncelog::segment::txn_index::{self, AbortedTxn};
use oncelog::{
    AppendError, AppendOutcome, FlushPolicy, HighWatermarkPolicy, IsolationLevel, Log, LogConfig,
    TxnMarker,
};

/// A client batch of `n` records of producer `pid` (epoch 0) from sequence `seq`.
fn produce(pid: i64, seq: i32, n: usize, transactional: bool) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .producer(pid, 0, seq)
        .transactional(transactional);
    for i in 0..n {
        let value = format!("p{pid} s{}", seq + i as i32);
        b.append(T0 + i as i64, Some(b"k"), Some(value.as_bytes()), &[]);
    }
    b.build().unwrap()
}

/// A plain batch (no producer) of `n` records.
fn plain(n: usize) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for _ in 0..n {
        b.append(T0, None, Some(b"plain"), &[]);
    }
    b.build().unwrap()
}

/// The transactions of `producers`, each with its own sequence.
struct Producers {
    next_seq: std::collections::HashMap<i64, i32>,
}

impl Producers {
    fn new() -> Producers {
        Producers {
            next_seq: Default::default(),
        }
    }
    /// Appends `n` records of `pid` (transactional or not); returns the first offset.
    fn send(&mut self, log: &Log, pid: i64, n: usize, transactional: bool) -> i64 {
        let seq = self.next_seq.entry(pid).or_insert(0);
        let batch = produce(pid, *seq, n, transactional);
        *seq += n as i32;
        match log.append(&batch).unwrap() {
            AppendOutcome::Appended(info) => info.first_offset,
            other => panic!("{other:?}"),
        }
    }
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(16 * 1024)
        .segment_index_bytes(4096)
        .index_interval_bytes(256)
        .build()
        .unwrap()
}

/// The log in `dir` with `cfg`, on a clock at the records' time (a wall clock years after
/// `T0` would roll a segment at every marker: Kafka's time-based roll).
fn open_with(dir: &Path, cfg: LogConfig) -> Log {
    Log::open_in(env_with(TestClock::new(T0)), dir, cfg).unwrap()
}

fn open(dir: &Path) -> Log {
    open_with(dir, config())
}

/// The offsets a read_committed (or read_uncommitted) consumer receives from the log start.
fn consumed(log: &Log, isolation: IsolationLevel) -> Vec<i64> {
    let mut out = Vec::new();
    let mut next = log.log_start_offset();
    loop {
        let f = log.fetch_isolated(next, 1024, isolation).unwrap();
        if f.bytes.is_empty() {
            return out;
        }
        out.extend(f.records().map(|r| r.unwrap().offset));
        next = f.next_offset;
    }
}

fn txn_entries(dir: &Path, base: i64) -> Vec<AbortedTxn> {
    let path = dir.join(format!("{base:020}.txnindex"));
    let bytes = std::fs::read(path).unwrap_or_default();
    txn_index::decode(&bytes).collect::<Result<_, _>>().unwrap()
}

#[test]
fn an_open_transaction_holds_the_last_stable_offset_until_its_marker() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut p = Producers::new();
    p.send(&log, 1, 2, false);
    let first = p.send(&log, 7, 3, true);
    p.send(&log, 2, 2, false);
    p.send(&log, 7, 1, true);
    log.flush().unwrap();
    assert_eq!(log.high_watermark(), 8);
    assert_eq!(log.first_unstable_offset(), Some(first));
    assert_eq!(log.last_stable_offset(), 2);
    let marker = log.append_marker(&TxnMarker::commit(7, 0, 0)).unwrap();
    assert_eq!((marker.first_offset, marker.last_offset), (8, 8));
    // Committed, but the marker is not below the high watermark yet: still unstable (Kafka's
    // unreplicated transactions).
    assert_eq!(log.first_unstable_offset(), Some(first));
    assert_eq!(log.last_stable_offset(), 2);
    log.flush().unwrap();
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(log.last_stable_offset(), 9);
    assert_eq!(
        consumed(&log, IsolationLevel::ReadCommitted),
        (0..8).collect::<Vec<_>>()
    );
}

#[test]
fn read_committed_skips_aborted_transactions_and_stops_at_the_lso() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut p = Producers::new();
    p.send(&log, 5, 2, true); // 0..2, aborted
    p.send(&log, 6, 2, true); // 2..4, committed
    p.send(&log, 1, 1, false); // 4
    log.append_marker(&TxnMarker::abort(5, 0, 0)).unwrap(); // 5
    log.append_marker(&TxnMarker::commit(6, 0, 0)).unwrap(); // 6
    p.send(&log, 5, 2, true); // 7..9, open
    p.send(&log, 1, 1, false); // 9
    log.flush().unwrap();
    assert_eq!(log.last_stable_offset(), 7);
    assert_eq!(consumed(&log, IsolationLevel::ReadCommitted), [2, 3, 4]);
    assert_eq!(
        consumed(&log, IsolationLevel::ReadUncommitted),
        [0, 1, 2, 3, 4, 7, 8, 9]
    );
    let f = log
        .fetch_isolated(0, 1 << 20, IsolationLevel::ReadCommitted)
        .unwrap();
    assert_eq!(
        f.aborted_transactions,
        Some(vec![AbortedTransaction {
            producer_id: 5,
            first_offset: 0
        }])
    );
    assert_eq!(f.next_offset, 7, "nothing at or after the LSO");
    // Read_uncommitted answers with the LSO too, and no aborted list.
    let f = log.fetch(0, 1 << 20).unwrap();
    assert_eq!((f.last_stable_offset, f.aborted_transactions), (7, None));
    // At the LSO a read_committed fetch is empty, with an empty list.
    let f = log
        .fetch_isolated(7, 1 << 20, IsolationLevel::ReadCommitted)
        .unwrap();
    assert!(f.bytes.is_empty());
    assert_eq!(f.aborted_transactions, Some(vec![]));
}

#[test]
fn an_abort_appends_a_txnindex_entry_with_kafkas_last_stable_offset() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut p = Producers::new();
    p.send(&log, 4, 1, true); // 0: producer 4 opens
    p.send(&log, 5, 1, true); // 1: producer 5 opens
    assert!(
        !dir.path().join("00000000000000000000.txnindex").exists(),
        "created lazily"
    );
    log.append_marker(&TxnMarker::commit(4, 0, 0)).unwrap(); // 2
    assert!(
        !dir.path().join("00000000000000000000.txnindex").exists(),
        "a commit writes no entry"
    );
    p.send(&log, 4, 1, true); // 3: producer 4's next transaction
    log.append_marker(&TxnMarker::abort(5, 0, 0)).unwrap(); // 4: 4's is open from 3
    log.append_marker(&TxnMarker::abort(4, 0, 0)).unwrap(); // 5: none open
    assert_eq!(
        txn_entries(dir.path(), 0),
        [
            AbortedTxn {
                producer_id: 5,
                first_offset: 1,
                last_offset: 4,
                last_stable_offset: 3
            },
            AbortedTxn {
                producer_id: 4,
                first_offset: 3,
                last_offset: 5,
                last_stable_offset: 6
            }
        ]
    );
    // A marker for a producer with no open transaction is written and adds nothing.
    log.append_marker(&TxnMarker::abort(4, 0, 0)).unwrap();
    assert_eq!(txn_entries(dir.path(), 0).len(), 2);
    assert_eq!(log.log_end_offset(), 7);
}

#[test]
fn the_marker_batch_is_the_one_kafkas_coordinator_writes() {
    let clock = TestClock::new(T0);
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open_in(env_with(clock), dir.path(), config()).unwrap();
    log.replica().set_leader_epoch(3).unwrap();
    log.append(&produce(123_456_789, 0, 5, true)).unwrap();
    log.append_marker(&TxnMarker::commit(123_456_789, 0, 7))
        .unwrap();
    let bytes = log.read(5, 1 << 20).unwrap();
    let expected = end_txn_marker(5, 3, 123_456_789, 0, T0, ControlType::Commit, 7);
    assert_eq!(&bytes[..], &expected[..]);
    assert_eq!(bytes.len(), 78);
    let b = RecordBatch::parse(&bytes).unwrap();
    assert_eq!(b.attributes(), 0x30);
    assert_eq!(b.base_sequence(), -1);
}

#[test]
fn under_log_append_time_the_marker_carries_the_append_time() {
    let clock = TestClock::new(T0 + 500);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .message_timestamp_type(oncelog::format::TimestampType::LogAppendTime)
        .build()
        .unwrap();
    let log = Log::open_in(env_with(clock), dir.path(), cfg).unwrap();
    log.append(&produce(9, 0, 1, true)).unwrap();
    log.append_marker(&TxnMarker::abort(9, 0, 0)).unwrap();
    let bytes = log.read(1, 1 << 20).unwrap();
    let b = RecordBatch::parse(&bytes).unwrap();
    assert!(b.is_crc_valid());
    assert_eq!(b.max_timestamp(), T0 + 500);
    assert_eq!(
        b.timestamp_type(),
        oncelog::format::TimestampType::LogAppendTime
    );
    assert_eq!(log.producer(9).unwrap().last_timestamp(), T0 + 500);
}

#[test]
fn stale_coordinator_and_producer_epochs_are_refused_and_change_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.append(&produce(7, 0, 1, true)).unwrap();
    log.append_marker(&TxnMarker::commit(7, 0, 5)).unwrap();
    log.append(&produce(7, 1, 1, true)).unwrap();
    let before = (log.log_end_offset(), log.producer(7), log.size_bytes());
    let fenced = log.append_marker(&TxnMarker::abort(7, 0, 4)).unwrap_err();
    assert!(
        matches!(
            fenced,
            AppendError::Producer(ProducerError::CoordinatorFenced {
                producer_id: 7,
                current: 5,
                got: 4
            })
        ),
        "{fenced}"
    );
    assert_eq!(fenced.kind(), "coordinator_fenced");
    // An epoch bump by a new producer instance fences the old epoch's marker.
    let bumped = {
        let mut b = BatchBuilder::new().producer(7, 2, 0).transactional(true);
        b.append(T0, None, Some(b"v"), &[]);
        b.build().unwrap()
    };
    let before_bump = (log.log_end_offset(), log.size_bytes());
    assert_eq!(before_bump.0, before.0);
    log.append(&bumped).unwrap();
    let stale = log.append_marker(&TxnMarker::commit(7, 1, 5)).unwrap_err();
    assert!(
        matches!(
            stale,
            AppendError::Producer(ProducerError::InvalidProducerEpoch {
                current: 2,
                got: 1,
                ..
            })
        ),
        "{stale}"
    );
    assert_eq!(log.log_end_offset(), before.0 + 1);
    // Under transaction version 2 the data's own epoch is stale too.
    let tv2 = log
        .append_marker(&TxnMarker::commit(7, 2, 5).with_transaction_version(2))
        .unwrap_err();
    assert_eq!(tv2.kind(), "invalid_producer_epoch");
    log.append_marker(&TxnMarker::commit(7, 3, 5).with_transaction_version(2))
        .unwrap();
    assert_eq!(log.producer(7).unwrap().epoch(), 3);
    assert_eq!(log.metrics().refusals.coordinator_fenced, 1);
    assert_eq!(log.metrics().refusals.invalid_producer_epoch, 2);
}

#[test]
fn a_marker_naming_no_producer_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    for (marker, field) in [
        (TxnMarker::commit(-1, 0, 0), "producer_id"),
        (TxnMarker::abort(3, -1, 0), "producer_epoch"),
        (
            TxnMarker::abort(3, 0, 0).with_transaction_version(-2),
            "transaction_version",
        ),
    ] {
        match log.append_marker(&marker) {
            Err(e @ AppendError::InvalidMarker { field: f, .. }) => {
                assert_eq!(f, field);
                assert_eq!(e.kind(), "invalid_marker");
            }
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(log.log_end_offset(), 0);
}

#[test]
fn a_non_transactional_batch_inside_an_open_transaction_is_invalid_txn_state() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.append(&produce(7, 0, 2, true)).unwrap();
    let e = log.append(&produce(7, 2, 1, false)).unwrap_err();
    assert!(
        matches!(
            e,
            AppendError::Producer(ProducerError::InvalidTxnState {
                producer_id: 7,
                txn_first_offset: 0
            })
        ),
        "{e}"
    );
    assert_eq!(log.log_end_offset(), 2);
    // After the marker the same batch goes in, and opens nothing.
    log.append_marker(&TxnMarker::commit(7, 0, 0)).unwrap();
    log.append(&produce(7, 2, 1, false)).unwrap();
    log.flush().unwrap();
    assert_eq!(log.first_unstable_offset(), None);
}

#[test]
fn a_client_cannot_append_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let marker = end_txn_marker(0, 0, 7, 0, T0, ControlType::Abort, 0);
    let e = log.append(&marker).unwrap_err();
    assert!(matches!(
        e,
        AppendError::Batch(BatchError::ControlBatchFromClient)
    ));
    assert_eq!(log.log_end_offset(), 0);
}

/// The marker batch at `offset` with its control record's key type byte set to `control_type`
/// and its value cut to `value_len` bytes, CRC made valid again.
fn bent_marker(offset: i64, control_type: u8, value_len: usize) -> Vec<u8> {
    let key: [u8; 4] = [0, 0, 0, control_type];
    let value = [0u8, 0, 0, 0, 0, 0];
    let mut b = BatchBuilder::new()
        .base_offset(offset)
        .producer(7, 0, -1)
        .transactional(true)
        .control(true);
    b.append(T0, Some(&key), Some(&value[..value_len]), &[]);
    b.build().unwrap()
}

#[test]
fn a_replicated_marker_with_a_wrong_control_record_is_refused_with_nothing_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut data = BatchBuilder::new()
        .base_offset(0)
        .producer(7, 0, 0)
        .transactional(true);
    data.append(T0, None, Some(b"v"), &[]);
    let data = data.build().unwrap();
    for (bad, reason) in [
        (
            bent_marker(1, 7, 6),
            ControlRecordError::NotEndTxnMarker { control_type: 7 },
        ),
        (
            bent_marker(1, 2, 6),
            ControlRecordError::NotEndTxnMarker { control_type: 2 },
        ),
        (
            bent_marker(1, 0, 4),
            ControlRecordError::ValueTooShort { len: 4 },
        ),
    ] {
        let mut both = data.clone();
        both.extend_from_slice(&bad);
        let e = log.replica().append(&both).unwrap_err();
        match &e {
            AppendError::Batch(BatchError::InvalidMarker {
                producer_id: 7,
                reason: r,
            }) => assert_eq!(r, &reason),
            other => panic!("{other}"),
        }
        assert_eq!(e.kind(), "invalid_record");
        assert_eq!(
            log.log_end_offset(),
            0,
            "the data batch before it was not written"
        );
    }
    // The good marker is taken, completes the transaction and indexes the abort.
    let mut both = data.clone();
    both.extend_from_slice(&bent_marker(1, 0, 6));
    log.replica().append(&both).unwrap();
    assert_eq!(
        txn_entries(dir.path(), 0),
        [AbortedTxn {
            producer_id: 7,
            first_offset: 0,
            last_offset: 1,
            last_stable_offset: 2
        }]
    );
    assert_eq!(log.producer(7).unwrap().current_txn_first_offset(), None);
}

#[test]
fn replicated_markers_keep_the_leaders_coordinator_epochs_unchecked() {
    // A follower copies what its leader wrote: a lower coordinator epoch is taken (REPLICATION
    // only logs it), and a replicated batch of another transaction opens it.
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut batches = end_txn_marker(0, 0, 7, 0, T0, ControlType::Commit, 9);
    batches.extend(end_txn_marker(1, 0, 7, 0, T0, ControlType::Commit, 3));
    let mut open_txn = BatchBuilder::new()
        .base_offset(2)
        .producer(8, 0, 0)
        .transactional(true);
    open_txn.append(T0, None, Some(b"v"), &[]);
    batches.extend(open_txn.build().unwrap());
    log.replica().append(&batches).unwrap();
    assert_eq!(log.producer(7).unwrap().coordinator_epoch(), 3);
    log.flush().unwrap();
    assert_eq!(log.first_unstable_offset(), Some(2));
}

#[test]
fn truncation_cuts_the_txnindex_and_reopens_the_transaction() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut p = Producers::new();
    p.send(&log, 5, 2, true); // 0..2
    log.append_marker(&TxnMarker::abort(5, 0, 0)).unwrap(); // 2
    p.send(&log, 6, 2, true); // 3..5
    log.append_marker(&TxnMarker::abort(6, 0, 0)).unwrap(); // 5
    log.flush().unwrap();
    assert_eq!(txn_entries(dir.path(), 0).len(), 2);
    assert_eq!(log.first_unstable_offset(), None);
    let report = log.replica().truncate_to(5).unwrap();
    assert_eq!(report.new_log_end, 5);
    assert_eq!(
        txn_entries(dir.path(), 0).len(),
        1,
        "the second marker went"
    );
    // Producer 6's transaction is open again, and holds the LSO (once it is below the HW).
    assert_eq!(log.producer(6).unwrap().current_txn_first_offset(), Some(3));
    assert_eq!(log.first_unstable_offset(), Some(3));
    assert_eq!(log.last_stable_offset(), 3);
    assert_eq!(
        consumed(&log, IsolationLevel::ReadCommitted),
        Vec::<i64>::new()
    );
    // A new marker completes it again; the index gains the entry again.
    log.append_marker(&TxnMarker::commit(6, 0, 0)).unwrap();
    log.flush().unwrap();
    assert_eq!(log.last_stable_offset(), 6);
    assert_eq!(consumed(&log, IsolationLevel::ReadCommitted), [3, 4]);
    assert_eq!(txn_entries(dir.path(), 0).len(), 1);
    log.close().unwrap();
    let log = open(dir.path());
    assert_eq!(consumed(&log, IsolationLevel::ReadCommitted), [3, 4]);
}

#[test]
fn a_truncation_below_a_marker_in_a_later_segment_removes_its_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut p = Producers::new();
    p.send(&log, 5, 1, true);
    while log.maintenance().segment_count() < 2 {
        p.send(&log, 1, 20, false);
    }
    let active = *log.maintenance().segment_base_offsets().last().unwrap();
    let marker = log.append_marker(&TxnMarker::abort(5, 0, 0)).unwrap();
    assert_eq!(marker.segment_base_offset, active);
    assert_eq!(txn_entries(dir.path(), active)[0].first_offset, 0);
    log.replica().truncate_to(marker.first_offset).unwrap();
    log.flush().unwrap();
    assert!(txn_entries(dir.path(), active).is_empty());
    assert_eq!(log.first_unstable_offset(), Some(0));
}

#[test]
fn retention_raises_the_first_unstable_offset_to_the_log_start() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut p = Producers::new();
    p.send(&log, 5, 1, true); // 0, stays open
    for _ in 0..5 {
        p.send(&log, 1, 5, false);
    }
    log.flush().unwrap();
    assert_eq!(log.last_stable_offset(), 0);
    log.delete_records(4).unwrap();
    assert_eq!(log.first_unstable_offset(), Some(4));
    assert_eq!(log.last_stable_offset(), 4);
    log.append_marker(&TxnMarker::commit(5, 0, 0)).unwrap();
    log.flush().unwrap();
    assert_eq!(log.first_unstable_offset(), None);
}

#[test]
fn a_snapshot_with_an_open_transaction_reloads_it_in_every_version() {
    for version in [
        SnapshotVersion::V1,
        SnapshotVersion::V2,
        SnapshotVersion::V3,
    ] {
        let dir = tempfile::tempdir().unwrap();
        let cfg = config()
            .into_builder()
            .snapshot_version(version)
            .build()
            .unwrap();
        let log = open_with(dir.path(), cfg.clone());
        let mut p = Producers::new();
        p.send(&log, 1, 2, false);
        p.send(&log, 5, 2, true); // 2..4 open
        log.append_marker(&TxnMarker::commit(5, 0, 4)).unwrap(); // 4
        p.send(&log, 5, 1, true); // 5 open again
        log.close().unwrap();
        let log = open_with(dir.path(), cfg.clone());
        assert_eq!(
            log.producer_load_report().snapshot_offset,
            Some(6),
            "{version:?}"
        );
        assert_eq!(log.producer_load_report().batches_replayed, 0);
        let e = log.producer(5).unwrap();
        assert_eq!(
            (e.current_txn_first_offset(), e.coordinator_epoch()),
            (Some(5), 4),
            "{version:?}"
        );
        assert_eq!(log.first_unstable_offset(), Some(5), "{version:?}");
        assert_eq!(log.last_stable_offset(), 5);
        // The LSO moves on with the marker after the restart.
        log.append_marker(&TxnMarker::commit(5, 0, 4)).unwrap();
        log.flush().unwrap();
        assert_eq!(log.last_stable_offset(), 7, "{version:?}");
    }
}

#[test]
fn an_unclean_reopen_rebuilds_the_txnindex_of_the_active_segment() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut p = Producers::new();
    p.send(&log, 4, 1, true);
    p.send(&log, 5, 1, true);
    log.append_marker(&TxnMarker::abort(5, 0, 0)).unwrap();
    p.send(&log, 1, 1, false);
    log.flush().unwrap();
    let entries = txn_entries(dir.path(), 0);
    assert_eq!(entries.len(), 1);
    log.abandon();
    // The crash took the index (its fsync comes with the segment's seal, which never came).
    std::fs::remove_file(dir.path().join("00000000000000000000.txnindex")).unwrap();
    let log = open(dir.path());
    assert!(!log.recovery_report().clean_shutdown);
    assert_eq!(txn_entries(dir.path(), 0), entries);
    assert_eq!(log.first_unstable_offset(), Some(0));
    let f = log
        .fetch_isolated(0, 1 << 20, IsolationLevel::ReadCommitted)
        .unwrap();
    assert_eq!(f.aborted_transactions, Some(vec![]), "LSO 0: nothing read");
    log.append_marker(&TxnMarker::commit(4, 0, 0)).unwrap();
    log.flush().unwrap();
    assert_eq!(consumed(&log, IsolationLevel::ReadCommitted), [0, 3]);
}

#[test]
fn a_damaged_txnindex_of_a_recorded_segment_is_rebuilt_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    let mut p = Producers::new();
    p.send(&log, 5, 1, true);
    p.send(&log, 6, 1, true);
    log.append_marker(&TxnMarker::abort(5, 0, 0)).unwrap();
    log.append_marker(&TxnMarker::abort(6, 0, 0)).unwrap();
    log.close().unwrap();
    let path = dir.path().join("00000000000000000000.txnindex");
    let good = std::fs::read(&path).unwrap();
    let damages: [fn(&mut Vec<u8>); 4] = [
        |b| b[1] = 1,                        // version 1
        |b| b.truncate(b.len() - 3),         // a partial entry
        |b| b[18 + 7] = 0xff,                // a marker past the segment's end
        |b| b.extend_from_slice(&b.clone()), // entries not increasing
    ];
    for damage in damages {
        let mut bad = good.clone();
        damage(&mut bad);
        std::fs::write(&path, &bad).unwrap();
        let log = open(dir.path());
        assert!(log.recovery_report().clean_shutdown);
        let rebuilt = log
            .recovery_report()
            .indexes_rebuilt
            .iter()
            .any(|(_, reason)| reason.starts_with("txn index"));
        assert!(rebuilt, "{:?}", log.recovery_report().indexes_rebuilt);
        assert_eq!(std::fs::read(&path).unwrap(), good);
        log.close().unwrap();
    }
}

#[test]
fn a_producer_with_an_open_transaction_is_never_expired_or_evicted() {
    let clock = TestClock::new(T0);
    let dir = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .producer_state(
            ProducerStateConfig::default()
                .with_max_producers(Some(2))
                .with_limit_policy(ProducerLimitPolicy::EvictLongestIdle)
                .with_expiration_ms(1_000),
        )
        .build()
        .unwrap();
    let log = Log::open_in(env_with(clock.clone()), dir.path(), cfg).unwrap();
    let mut p = Producers::new();
    p.send(&log, 1, 1, true);
    clock.set(T0 + 10);
    p.send(&log, 2, 1, false);
    clock.set(T0 + 20);
    p.send(&log, 3, 1, false);
    assert!(
        log.producer(1).is_some(),
        "the idle one with a transaction stays"
    );
    assert!(log.producer(2).is_none());
    assert_eq!(log.maintenance().expire_producers(T0 + 1_000_000), 1);
    assert!(log.producer(1).is_some());
    log.append_marker(&TxnMarker::commit(1, 0, 0)).unwrap();
    assert_eq!(log.maintenance().expire_producers(T0 + 1_000_000), 1);
    assert!(log.producer(1).is_none());
}

#[test]
fn under_a_caller_set_high_watermark_the_lso_follows_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .high_watermark(HighWatermarkPolicy::SetByCaller)
        .build()
        .unwrap();
    let log = open_with(dir.path(), cfg.clone());
    let mut p = Producers::new();
    p.send(&log, 1, 3, false); // 0..3
    p.send(&log, 5, 2, true); // 3..5
    log.append_marker(&TxnMarker::commit(5, 0, 0)).unwrap(); // 5
    assert_eq!(log.last_stable_offset(), 0, "nothing replicated");
    log.replica().set_high_watermark(4).unwrap();
    assert_eq!(log.last_stable_offset(), 3);
    log.replica().set_high_watermark(5).unwrap();
    assert_eq!(
        log.last_stable_offset(),
        3,
        "the marker at 5 is not below the HW"
    );
    log.replica().set_high_watermark(6).unwrap();
    assert_eq!(log.last_stable_offset(), 6);
    assert_eq!(
        consumed(&log, IsolationLevel::ReadCommitted),
        [0, 1, 2, 3, 4]
    );
    // A truncation below the marker brings the transaction back.
    log.replica().truncate_to(5).unwrap();
    assert_eq!(log.high_watermark(), 5);
    assert_eq!(log.first_unstable_offset(), Some(3));
    log.close().unwrap();
    // A reopen whose replay meets the unreplicated marker (from the snapshot at 5, after a
    // crash) knows its transaction still holds the LSO back...
    let log = open_with(dir.path(), cfg.clone());
    log.append_marker(&TxnMarker::commit(5, 0, 0)).unwrap();
    log.flush().unwrap();
    log.abandon();
    let log = open_with(dir.path(), cfg.clone());
    assert_eq!(log.producer_load_report().snapshot_offset, Some(5));
    assert_eq!(log.high_watermark(), 5);
    assert_eq!(log.first_unstable_offset(), Some(3));
    assert_eq!(log.last_stable_offset(), 3);
    log.close().unwrap();
    // ...and, as Kafka's, one that starts from a snapshot taken after the marker does not.
    let log = open_with(dir.path(), cfg);
    assert_eq!(log.producer_load_report().snapshot_offset, Some(6));
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(log.last_stable_offset(), 5);
    log.replica().set_high_watermark(6).unwrap();
    assert_eq!(log.last_stable_offset(), 6);
}

#[test]
fn markers_roll_segments_and_are_durable_under_the_always_flush_policy() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .flush_policy(FlushPolicy::Always)
        .build()
        .unwrap();
    let log = open_with(dir.path(), cfg);
    let mut p = Producers::new();
    let mut markers = 0;
    while log.maintenance().segment_count() < 4 {
        p.send(&log, 9, 10, true);
        let m = log.append_marker(&TxnMarker::abort(9, 0, 0)).unwrap();
        assert_eq!(log.recovery_point(), m.last_offset + 1, "durable at once");
        markers += 1;
    }
    let total: usize = log
        .maintenance()
        .segment_base_offsets()
        .iter()
        .map(|b| txn_entries(dir.path(), *b).len())
        .sum();
    assert_eq!(total, markers);
    // Each entry is in the segment that holds its marker.
    for base in log.maintenance().segment_base_offsets() {
        for e in txn_entries(dir.path(), base) {
            let bytes = log.read(e.last_offset, 1).unwrap();
            let (_, b) = BatchIter::new(&bytes).next().unwrap().unwrap();
            assert!(b.is_control() && b.base_offset() == e.last_offset);
            assert!(e.last_offset >= base);
        }
    }
    assert_eq!(
        consumed(&log, IsolationLevel::ReadCommitted),
        Vec::<i64>::new()
    );
    assert!(!consumed(&log, IsolationLevel::ReadUncommitted).is_empty());
}

#[test]
fn a_plain_log_has_no_unstable_offset_and_no_txnindex() {
    let dir = tempfile::tempdir().unwrap();
    let log = open(dir.path());
    log.append(&plain(3)).unwrap();
    log.flush().unwrap();
    assert_eq!(log.first_unstable_offset(), None);
    assert_eq!(log.last_stable_offset(), log.high_watermark());
    let names: Vec<String> = std::fs::read_dir(dir.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().to_string())
        .collect();
    assert!(!names.iter().any(|n| n.ends_with(".txnindex")), "{names:?}");
}

#[test]
fn a_stored_control_batch_that_is_no_marker_is_damage_named_by_file_and_position() {
    // A directory without oncelog's checkpoint (as Kafka leaves one): a transactional batch,
    // then a control batch of its producer, CRC-valid, whose record says type 7.
    let dir = tempfile::tempdir().unwrap();
    let mut data = BatchBuilder::new()
        .base_offset(0)
        .producer(7, 0, 0)
        .transactional(true);
    data.append(T0, None, Some(b"v"), &[]);
    let mut bytes = data.build().unwrap();
    let at = bytes.len();
    bytes.extend(bent_marker(1, 7, 6));
    let path = dir.path().join("00000000000000000000.log");
    std::fs::write(&path, &bytes).unwrap();
    let strict = config()
        .into_builder()
        .recovery_mode(oncelog::RecoveryMode::AbsoluteConsistency)
        .build()
        .unwrap();
    match Log::open_in(env_with(TestClock::new(T0)), dir.path(), strict) {
        Err(oncelog::OpenError::Refused {
            path: p,
            position,
            damage,
            ..
        }) => {
            assert_eq!((p, position), (path.clone(), Some(at)));
            assert!(
                matches!(
                    &damage,
                    oncelog::Damage::Invalid(oncelog::BatchProblem::Batch(
                        BatchError::InvalidMarker { producer_id: 7, .. }
                    ))
                ),
                "{damage}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        std::fs::read(&path).unwrap(),
        bytes,
        "a refused open changes nothing"
    );
    // The default mode cuts it as the torn tail of the last segment it is, and says so.
    let log = open(dir.path());
    let cut = &log.recovery_report().truncations;
    assert_eq!(cut.len(), 1);
    assert_eq!(
        (cut[0].position, cut[0].damage.kind()),
        (at, "invalid_batch")
    );
    assert_eq!(log.log_end_offset(), 1);
    assert_eq!(log.first_unstable_offset(), Some(0));
}
