//! What one replica hands another that starts where its log is (the replication crate's
//! snapshot images): `ReplicaLog::producer_snapshot_at`, `ReplicaLog::truncate_fully_and_start_with` and
//! `Maintenance::enforce_retention_below`. A follower started at any batch boundary of its leader's
//! log, with the leader's producer state there, answers every retry as the leader does.

use crate::common;

use common::T0;
use oncelog::format::BatchBuilder;
use oncelog::{AppendOutcome, HighWatermarkPolicy, Log, LogConfig, RewriteError};

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(2 * 1024)
        .segment_index_bytes(4096)
        .index_interval_bytes(1024)
        .build()
        .unwrap()
}

/// Batch `i` of producer `pid`: 5 records, sequence `i * 5`.
fn batch(pid: i64, i: i32) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(pid, 0, i * 5);
    for r in 0..5 {
        b.append(T0 + (i * 5 + r) as i64, None, Some(&[b'v'; 60][..]), &[]);
    }
    b.build().unwrap()
}

/// Batch `k` of the leader's log: producers 1 and 2 take turns; it holds `[5k, 5k + 4]`.
fn leader_batch(k: i32) -> Vec<u8> {
    batch(1 + (k % 2) as i64, k / 2)
}

fn leader(dir: &std::path::Path, n: i32) -> Log {
    let log = Log::open(dir, config()).unwrap();
    for k in 0..n {
        assert!(matches!(
            log.append(&leader_batch(k)).unwrap(),
            AppendOutcome::Appended(_)
        ));
    }
    log.flush().unwrap();
    log
}

/// What appending `batch` answers, as a comparable string.
fn answer(log: &Log, batch: &[u8]) -> String {
    match log.append(batch) {
        Ok(AppendOutcome::Duplicate(d)) => {
            format!("duplicate {}..={}", d.first_offset, d.last_offset)
        }
        Ok(AppendOutcome::Appended(a)) => panic!("a retry was appended at {}", a.first_offset),
        Err(e) => e.to_string(),
        Ok(other) => panic!("unexpected outcome: {other:?}"),
    }
}

fn duplicate_at(outcome: AppendOutcome) -> (i64, i64) {
    match outcome {
        AppendOutcome::Duplicate(d) => (d.first_offset, d.last_offset),
        other => panic!("expected a duplicate, got {other:?}"),
    }
}

#[test]
fn a_follower_started_at_any_batch_boundary_answers_retries_as_its_leader() {
    let dir = tempfile::tempdir().unwrap();
    let n = 24;
    let lead = leader(&dir.path().join("leader"), n);
    assert!(
        lead.maintenance().segment_count() > 3,
        "the log spans segments"
    );
    let raw: Vec<Vec<u8>> = common::read_all(&lead, usize::MAX);
    for k in 0..=n {
        let x = 5 * i64::from(k);
        let snapshot = lead.replica().producer_snapshot_at(x).unwrap();
        let fdir = dir.path().join(format!("follower-{k}"));
        let follower = Log::open(&fdir, config()).unwrap();
        let report = follower
            .replica()
            .truncate_fully_and_start_with(x, &snapshot)
            .unwrap();
        assert_eq!(report.log_start_offset, x);
        assert_eq!(follower.log_end_offset(), x);
        // A retry of any batch below the start is answered as a log of the batches below it
        // answers: the original's offsets inside the dedup window, a sequence error before.
        let reference = leader(&dir.path().join(format!("reference-{k}")), k);
        for j in 0..k {
            let retry = leader_batch(j);
            assert_eq!(
                answer(&follower, &retry),
                answer(&reference, &retry),
                "k = {k}, retry of {j}"
            );
        }
        if k > 0 {
            assert_eq!(
                duplicate_at(follower.append(&leader_batch(k - 1)).unwrap()),
                (x - 5, x - 1)
            );
        }
        // The leader's batches from the start on are appended unchanged, and then the
        // follower's producer state is the leader's: the last batch is a duplicate on both.
        for b in &raw[k as usize..] {
            follower.replica().append(b).unwrap();
        }
        for j in 0..n {
            let retry = leader_batch(j);
            assert_eq!(
                answer(&follower, &retry),
                answer(&lead, &retry),
                "k = {k}, retry of {j} at the end"
            );
        }
        // The state survives a reopen.
        follower.close().unwrap();
        drop(follower);
        let follower = Log::open(&fdir, config()).unwrap();
        assert_eq!(follower.log_start_offset(), x);
        for j in 0..n {
            let retry = leader_batch(j);
            assert_eq!(
                answer(&follower, &retry),
                answer(&lead, &retry),
                "k = {k}, retry of {j} after a reopen"
            );
        }
    }
}

#[test]
fn a_producer_snapshot_is_only_of_a_batch_boundary_inside_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let lead = leader(dir.path(), 6);
    match lead.replica().producer_snapshot_at(7) {
        Err(RewriteError::NotABatchBoundary {
            offset: 7,
            batch_start: 5,
        }) => {}
        other => panic!("{other:?}"),
    }
    match lead.replica().producer_snapshot_at(31) {
        Err(RewriteError::AboveLogEnd {
            offset: 31,
            log_end_offset: 30,
        }) => {}
        other => panic!("{other:?}"),
    }
    lead.delete_records(10).unwrap();
    match lead.replica().producer_snapshot_at(5) {
        Err(RewriteError::BelowLogStart {
            offset: 5,
            log_start_offset: 10,
        }) => {}
        other => panic!("{other:?}"),
    }
    // At the log start after DeleteRecords: the producers of the deleted batches are known.
    let snap = lead.replica().producer_snapshot_at(10).unwrap();
    let follower = Log::open(dir.path().join("f"), config()).unwrap();
    follower
        .replica()
        .truncate_fully_and_start_with(10, &snap)
        .unwrap();
    assert_eq!(
        duplicate_at(follower.append(&leader_batch(1)).unwrap()),
        (5, 9)
    );
}

#[test]
fn a_bad_producer_snapshot_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let lead = leader(&dir.path().join("leader"), 4);
    let follower = leader(&dir.path().join("follower"), 2);
    let before = common::read_all(&follower, usize::MAX);
    for bad in [
        Vec::new(),
        vec![0u8; 7],
        b"not a snapshot at all, not even close".to_vec(),
    ] {
        match follower.replica().truncate_fully_and_start_with(20, &bad) {
            Err(e @ RewriteError::BadProducerSnapshot(_)) => {
                assert_eq!(e.kind(), "bad_producer_snapshot")
            }
            other => panic!("{other:?}"),
        }
    }
    // A snapshot of another offset than the start asked for.
    let of_10 = lead.replica().producer_snapshot_at(10).unwrap();
    match follower.replica().truncate_fully_and_start_with(20, &of_10) {
        Err(RewriteError::BadProducerSnapshot(m)) => assert!(m.contains("offset 10"), "{m}"),
        other => panic!("{other:?}"),
    }
    assert_eq!(common::read_all(&follower, usize::MAX), before);
    assert_eq!(follower.log_end_offset(), 10);
}

#[test]
fn retention_below_a_bound_keeps_every_segment_that_reaches_it() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .retention_bytes(Some(0))
        .high_watermark(HighWatermarkPolicy::SetByCaller)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg).unwrap();
    for k in 0..24 {
        log.append(&leader_batch(k)).unwrap();
    }
    log.flush().unwrap();
    log.replica()
        .set_high_watermark(log.log_end_offset())
        .unwrap();
    let bases = log.maintenance().segment_base_offsets();
    assert!(bases.len() > 3);
    let bound = bases[2] - 1;
    let report = log
        .maintenance()
        .enforce_retention_below(T0, bound)
        .unwrap();
    // The segments wholly below the bound go; the one holding it stays.
    assert_eq!(log.log_start_offset(), bases[1]);
    assert_eq!(report.deleted.len(), 1);
    let report = log
        .maintenance()
        .enforce_retention_below(T0, bases[2])
        .unwrap();
    assert_eq!(log.log_start_offset(), bases[2]);
    assert_eq!(report.deleted.len(), 1);
}
