//! Truncation from the end (`ReplicaLog::truncate_to`, `ReplicaLog::truncate_fully_and_start_at`): what a
//! follower does when its log diverged. Offsets, files, producer state, the epoch cache and the
//! watermarks follow; readers holding bytes keep them; a reopen sees the truncated log.

use crate::common;

use std::sync::Arc;

use common::{read_all, T0};
use oncelog::format::{BatchBuilder, RecordBatch};
use oncelog::{AppendOutcome, FlushPolicy, Log, LogConfig, RewriteError};

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(16 * 1024)
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

/// A log of `n` batches alternating between producers 1 and 2, flushed: batch `k` holds
/// offsets `[5k, 5k + 4]`.
fn log_of(dir: &std::path::Path, n: i32) -> (Log, Vec<Vec<u8>>) {
    let log = Log::open(dir, config()).unwrap();
    let mut sent = Vec::new();
    for k in 0..n {
        let b = batch(1 + (k % 2) as i64, k / 2);
        assert!(matches!(
            log.append(&b).unwrap(),
            AppendOutcome::Appended(_)
        ));
        sent.push(b);
    }
    log.flush().unwrap();
    (log, sent)
}

fn offsets(log: &Log) -> Vec<(i64, i64)> {
    read_all(log, usize::MAX)
        .iter()
        .map(|b| {
            let b = RecordBatch::parse(b).unwrap();
            (b.base_offset(), b.last_offset())
        })
        .collect()
}

#[test]
fn truncation_to_a_batch_boundary_removes_every_later_batch_and_segment() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = log_of(dir.path(), 200);
    let segments_before = log.maintenance().segment_count();
    assert!(segments_before >= 4, "{segments_before}");
    let report = log.replica().truncate_to(300).unwrap();
    assert_eq!((report.old_log_end, report.new_log_end), (1000, 300));
    assert!(!report.segments_removed.is_empty());
    assert_eq!(log.log_end_offset(), 300);
    assert_eq!(log.recovery_point(), 300);
    assert_eq!(log.high_watermark(), 300);
    let o = offsets(&log);
    assert_eq!(o.last(), Some(&(295, 299)));
    assert_eq!(o.len(), 60);
    // Appends continue at the new end, densely.
    let mut b = BatchBuilder::new();
    b.append(T0, None, Some(b"after"), &[]);
    let AppendOutcome::Appended(a) = log.append(&b.build().unwrap()).unwrap() else {
        panic!("not appended");
    };
    assert_eq!(a.first_offset, 300);
}

#[test]
fn an_offset_inside_a_batch_takes_the_whole_batch_and_reports_its_start() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = log_of(dir.path(), 20);
    let report = log.replica().truncate_to(42).unwrap();
    assert_eq!(report.new_log_end, 40, "the batch holding 42 started at 40");
    assert_eq!(log.log_end_offset(), 40);
    assert_eq!(offsets(&log).last(), Some(&(35, 39)));
}

#[test]
fn a_retry_of_a_truncated_batch_is_appended_again_and_a_kept_one_is_a_duplicate() {
    let dir = tempfile::tempdir().unwrap();
    let (log, sent) = log_of(dir.path(), 40);
    log.replica().truncate_to(100).unwrap();
    // Batch 19 (offsets 95..99) stays; batch 20 (100..104) went.
    match log.append(&sent[19]).unwrap() {
        AppendOutcome::Duplicate(d) => assert_eq!((d.first_offset, d.last_offset), (95, 99)),
        other => panic!("{other:?}"),
    }
    match log.append(&sent[20]).unwrap() {
        AppendOutcome::Appended(a) => assert_eq!(a.first_offset, 100),
        other => panic!("a truncated batch answered as a duplicate: {other:?}"),
    }
    // And the producer state survives a reopen as it is now.
    log.close().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    assert!(matches!(
        log.append(&sent[20]).unwrap(),
        AppendOutcome::Duplicate(_)
    ));
    assert!(matches!(
        log.append(&sent[21]).unwrap(),
        AppendOutcome::Appended(_)
    ));
}

#[test]
fn snapshots_above_the_new_end_go_and_the_reopened_log_is_the_truncated_one() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = log_of(dir.path(), 200);
    log.close().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    let report = log.replica().truncate_to(333).unwrap();
    assert_eq!(report.new_log_end, 330);
    assert!(!report.snapshots_removed.is_empty());
    assert!(report.snapshots_removed.iter().all(|&o| o > 330));
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if let Some(o) = name.strip_suffix(".snapshot") {
            assert!(o.parse::<i64>().unwrap() <= 330, "{name} survived");
        }
    }
    let before = offsets(&log);
    log.abandon();
    // A crash right after: recovery sees the truncated log.
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.log_end_offset(), 330);
    assert_eq!(offsets(&log), before);
    log.close().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    assert!(log.recovery_report().clean_shutdown);
    assert_eq!(offsets(&log), before);
}

#[test]
fn bytes_held_across_a_truncation_keep_their_content() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = log_of(dir.path(), 200);
    let held: Vec<_> = (0..200)
        .step_by(7)
        .map(|k| log.read(k * 5, 1 << 20).unwrap())
        .collect();
    let copies: Vec<Vec<u8>> = held.iter().map(|b| b.to_vec()).collect();
    log.replica().truncate_to(503).unwrap();
    for (h, c) in held.iter().zip(&copies) {
        assert_eq!(&h[..], &c[..]);
    }
    // The removed offsets are gone for new reads.
    assert!(log.read(700, 1 << 20).is_err());
    drop(log);
    for (h, c) in held.iter().zip(&copies) {
        assert_eq!(&h[..], &c[..], "after close too");
    }
}

#[test]
fn a_dead_tail_left_under_a_reader_is_recorded_and_trimmed_by_the_next_open() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = log_of(dir.path(), 30);
    let base = *log.maintenance().segment_base_offsets().last().unwrap();
    let held = log.read(log.log_end_offset() - 5, 1 << 20).unwrap();
    let cut = log.log_end_offset() - 20;
    log.replica().truncate_to(cut).unwrap();
    log.close().unwrap();
    drop(held);
    let path = dir.path().join(format!("{base:020}.log"));
    let text = std::fs::read_to_string(dir.path().join("oncelog.checkpoint")).unwrap();
    let line = text
        .lines()
        .find(|l| l.starts_with(&format!("{base} ")))
        .expect("the cut segment is recorded");
    let fields: Vec<u64> = line.split(' ').map(|f| f.parse().unwrap()).collect();
    assert_eq!(fields.len(), 4, "a dead tail is recorded: {line}");
    assert_eq!(std::fs::metadata(&path).unwrap().len(), fields[3]);
    let log = Log::open(dir.path(), config()).unwrap();
    assert!(
        log.recovery_report().truncations.is_empty(),
        "dead bytes are not damage"
    );
    assert_eq!(log.log_end_offset(), cut);
    log.close().unwrap();
    assert_eq!(std::fs::metadata(&path).unwrap().len(), fields[2]);
}

#[test]
fn a_tailing_reader_never_sees_removed_data_after_the_call() {
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(
        Log::open(
            dir.path(),
            config()
                .into_builder()
                .flush_policy(FlushPolicy::Always)
                .build()
                .unwrap(),
        )
        .unwrap(),
    );
    for k in 0..100 {
        log.append(&batch(1, k)).unwrap();
    }
    let reader = {
        let log = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut seen = 0u64;
            for _ in 0..2000 {
                let end = log.log_end_offset();
                let at = end.saturating_sub(7).max(log.log_start_offset());
                match log.read(at, 1 << 16) {
                    Ok(bytes) => {
                        // Whatever a read returns is whole batches below the end it reports.
                        for item in oncelog::format::BatchIter::new(&bytes) {
                            let (_, b) = item.unwrap();
                            assert!(b.is_crc_valid());
                            seen += 1;
                        }
                    }
                    Err(oncelog::ReadError::OffsetOutOfRange { .. }) => {}
                    Err(e) => panic!("{e}"),
                }
            }
            seen
        })
    };
    for round in 0..20 {
        log.replica().truncate_to(200 + round).unwrap();
        let end = log.log_end_offset();
        // Right after the call, nothing at or above the new end can be read.
        assert!(log.read(end + 1, 1 << 16).is_err());
        let tail = log.read(end - 1, 1 << 16).unwrap();
        for item in oncelog::format::BatchIter::new(&tail) {
            assert!(item.unwrap().1.last_offset() < end);
        }
        for _ in 0..10 {
            log.append(&common::batch(5, T0, 60)).unwrap();
        }
    }
    assert!(reader.join().unwrap() > 0);
}

#[test]
fn truncation_refuses_offsets_outside_the_log_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (log, _) = log_of(dir.path(), 20);
    let before = common::dir_contents(dir.path());
    match log.replica().truncate_to(101) {
        Err(e @ RewriteError::AboveLogEnd { .. }) => assert_eq!(e.kind(), "above_log_end"),
        other => panic!("{other:?}"),
    }
    log.delete_records(50).unwrap();
    match log.replica().truncate_to(49) {
        Err(e @ RewriteError::BelowLogStart { .. }) => assert_eq!(e.kind(), "below_log_start"),
        other => panic!("{other:?}"),
    }
    let report = log.replica().truncate_to(100).unwrap();
    assert_eq!(report.new_log_end, 100, "at the end: nothing to do");
    assert!(report.segments_removed.is_empty());
    let _ = before;
    assert_eq!(log.log_end_offset(), 100);
}

#[test]
fn truncate_fully_starts_the_log_over_empty() {
    let dir = tempfile::tempdir().unwrap();
    let (log, sent) = log_of(dir.path(), 200);
    log.replica().set_leader_epoch(4).unwrap();
    let report = log.replica().truncate_fully_and_start_at(5000).unwrap();
    assert_eq!(report.new_log_end, 5000);
    assert_eq!(
        (
            log.log_start_offset(),
            log.log_end_offset(),
            log.recovery_point()
        ),
        (5000, 5000, 5000)
    );
    assert_eq!(log.maintenance().segment_base_offsets(), vec![5000]);
    assert!(log.replica().leader_epochs().is_empty());
    assert_eq!(log.producer_count(), 0);
    // A producer starting over is accepted at any sequence (it is unknown again).
    match log.append(&sent[150]).unwrap() {
        AppendOutcome::Appended(a) => assert_eq!(a.first_offset, 5000),
        other => panic!("{other:?}"),
    }
    log.abandon();
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (5000, 5005));
    // Below the new start: the old offsets are gone for good.
    assert!(log.read(100, 1 << 20).is_err());
}

#[test]
fn truncation_of_real_kafka_data_keeps_its_offsets_and_producer_state() {
    let fixtures = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kafka-logdirs");
    let src = std::path::Path::new(fixtures).join("makaksik13-yanwit/posts-0");
    let dir = tempfile::tempdir().unwrap();
    common::copy_dir(&src, dir.path());
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    let all = offsets(&log);
    let end = log.log_end_offset();
    assert!(all.len() > 4, "{all:?}");
    let (keep_base, keep_last) = all[all.len() / 2];
    // The broker's producers (ids 0..14, 1000..7000), and the last sequence of each among the
    // batches that stay.
    let mut last_kept_seq = std::collections::BTreeMap::new();
    let mut every_producer = std::collections::BTreeSet::new();
    for bytes in read_all(&log, usize::MAX) {
        let b = RecordBatch::parse(&bytes).unwrap();
        if b.producer_id() < 0 {
            continue;
        }
        every_producer.insert(b.producer_id());
        if b.last_offset() <= keep_last {
            let last_seq = b.base_sequence() + b.last_offset_delta();
            last_kept_seq.insert(b.producer_id(), last_seq);
        }
    }
    assert!(
        every_producer.len() > last_kept_seq.len(),
        "{every_producer:?}"
    );
    let report = log.replica().truncate_to(keep_last + 1).unwrap();
    assert_eq!(report.new_log_end, keep_last + 1);
    assert_eq!(offsets(&log), all[..=all.len() / 2].to_vec());
    assert!(report.old_log_end == end && keep_base <= keep_last);
    // The producer state is the one of the batches that stay: a producer whose batches all went
    // is unknown, the others end at their last kept sequence. After a reopen too.
    let check = |log: &Log| {
        for pid in &every_producer {
            let last = log.producer(*pid).map(|p| p.last_seq());
            assert_eq!(last, last_kept_seq.get(pid).copied(), "producer {pid}");
        }
    };
    check(&log);
    log.close().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.log_end_offset(), keep_last + 1);
    assert_eq!(offsets(&log), all[..=all.len() / 2].to_vec());
    check(&log);
}

#[test]
fn readers_looking_up_indexes_during_truncations_never_fault() {
    // An index entry per batch and indexes of several pages: a truncation shrinks the cut
    // segment's index files, and a lookup in the old segment's map beyond the new length would
    // fault (SIGBUS) if it could run while they shrink.
    let dir = tempfile::tempdir().unwrap();
    let log = Arc::new(
        Log::open(
            dir.path(),
            LogConfig::builder()
                .segment_bytes(8 << 20)
                .segment_index_bytes(1 << 20)
                .index_interval_bytes(1)
                .build()
                .unwrap(),
        )
        .unwrap(),
    );
    // Each fill by a new producer: a truncation may leave an earlier one mid-sequence.
    let fill = |log: &Log, pid: i64| {
        for k in 0..1500 {
            log.append(&batch(pid, k)).unwrap();
        }
    };
    fill(&log, 100);
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let readers: Vec<_> = (0..2)
        .map(|r| {
            let (log, stop) = (Arc::clone(&log), Arc::clone(&stop));
            std::thread::spawn(move || {
                let mut rng = 0x9e37_79b9_u64 + r;
                let mut lookups = 0u64;
                while !stop.load(std::sync::atomic::Ordering::Relaxed) {
                    rng ^= rng << 13;
                    rng ^= rng >> 7;
                    rng ^= rng << 17;
                    let end = log.log_end_offset().max(1);
                    let at = (rng % end as u64) as i64;
                    match log.read(at, 1 << 12) {
                        Ok(bytes) => {
                            for item in oncelog::format::BatchIter::new(&bytes) {
                                assert!(item.unwrap().1.is_crc_valid());
                            }
                        }
                        Err(oncelog::ReadError::OffsetOutOfRange { .. }) => {}
                        Err(e) => panic!("read at {at}: {e}"),
                    }
                    log.offset_for_timestamp(T0 + at).unwrap();
                    lookups += 1;
                }
                lookups
            })
        })
        .collect();
    for round in 0..30 {
        // Down to a few batches (the index shrinks to its first page), and back up.
        log.replica().truncate_to(5 * (3 + round % 7)).unwrap();
        fill(&log, 101 + round);
    }
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    for r in readers {
        assert!(r.join().unwrap() > 0);
    }
}
