//! Retention and DeleteRecords (`Maintenance::enforce_retention`, `Log::delete_records`): cutting the
//! log from the front by Kafka's three rules, the high watermark that bounds them, the
//! `.deleted` protocol, reads below the log start, and the producer state that outlives the
//! data it came from.

use crate::common;

use std::path::Path;

use common::{copy_dir, read_all, T0};
use oncelog::format::{BatchBuilder, RecordBatch};
use oncelog::{
    AppendOutcome, HighWatermarkPolicy, Log, LogConfig, ReadError, RetentionReason, RewriteError,
};

/// Segments of about 4 KiB: batch `k` (of 5 records, 200-byte values) lands in segment
/// `k / 3` or so, which is enough to retain by whole segments.
fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(4096)
        .segment_index_bytes(4096)
        .retention_ms(None)
        .file_delete_delay_ms(0)
        .build()
        .unwrap()
}

/// Batch `seq / 5` of producer `pid`, its records timestamped `ts..ts+5`.
fn batch(pid: i64, seq: i32, ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(pid, 0, seq);
    for r in 0..5 {
        b.append(ts + r, None, Some(&[b'r'; 200][..]), &[]);
    }
    b.build().unwrap()
}

struct Sent {
    client: Vec<u8>,
    first: i64,
    last: i64,
}

/// `n` batches of producer 1, the i-th timestamped `T0 + 1000 * i`, then flushed.
fn fill(log: &Log, pid: i64, from_seq: i32, n: i32) -> Vec<Sent> {
    let mut sent = Vec::new();
    for i in 0..n {
        let seq = from_seq + i * 5;
        let client = batch(pid, seq, T0 + 1000 * (seq / 5) as i64);
        let AppendOutcome::Appended(a) = log.append(&client).unwrap() else {
            panic!("batch {i} not appended");
        };
        sent.push(Sent {
            client,
            first: a.first_offset,
            last: a.last_offset,
        });
    }
    log.flush().unwrap();
    sent
}

fn segment_files(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".log") || n.contains(".deleted"))
        .collect();
    names.sort();
    names
}

fn first_offset(log: &Log) -> i64 {
    let bytes = log.read(log.log_start_offset(), 1).unwrap();
    RecordBatch::parse(&bytes).unwrap().base_offset()
}

#[test]
fn size_retention_removes_the_oldest_segments_until_the_log_fits() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    fill(&log, 1, 0, 30);
    let bases = log.maintenance().segment_base_offsets();
    assert!(bases.len() >= 5, "{bases:?}");
    let sizes: Vec<u64> = bases
        .iter()
        .map(|b| {
            std::fs::metadata(dir.path().join(format!("{b:020}.log")))
                .unwrap()
                .len()
        })
        .collect();
    let total: u64 = log.size_bytes();
    // Kafka's rule: a segment goes while the excess is at least its size, so a log one byte
    // over the limit after the first two segments keeps the third.
    let limit = total - sizes[0] - sizes[1] - 1;
    let log = reopen(log, dir.path(), |c| c.retention_bytes = Some(limit));
    let report = log.maintenance().enforce_retention(T0).unwrap();
    let deleted: Vec<(i64, RetentionReason)> = report
        .deleted
        .iter()
        .map(|d| (d.base_offset, d.reason))
        .collect();
    assert_eq!(
        deleted,
        vec![
            (bases[0], RetentionReason::Size),
            (bases[1], RetentionReason::Size)
        ]
    );
    assert_eq!(report.deleted[0].bytes, sizes[0]);
    assert_eq!(report.deleted[0].next_offset, bases[1]);
    assert_eq!(log.log_start_offset(), bases[2]);
    assert_eq!(report.log_start_offset, bases[2]);
    assert_eq!(log.size_bytes(), limit + 1);
    assert_eq!(
        log.maintenance().segment_base_offsets(),
        bases[2..].to_vec()
    );
    // One byte less of room, and the third goes too.
    let log = reopen(log, dir.path(), |c| {
        c.retention_bytes = Some(limit + 1 - sizes[2])
    });
    let report = log.maintenance().enforce_retention(T0).unwrap();
    assert_eq!(report.deleted.len(), 1);
    assert_eq!(log.log_start_offset(), bases[3]);
    // The delay is 0: the files are gone once the call returns.
    assert!(!segment_files(dir.path())
        .iter()
        .any(|n| n.contains("deleted")));
}

fn reopen(log: Log, dir: &Path, edit: impl FnOnce(&mut LogConfig)) -> Log {
    let mut cfg = log.config().as_ref().clone();
    log.close().unwrap();
    edit(&mut cfg);
    Log::open(dir, cfg).unwrap()
}

#[test]
fn time_retention_stops_at_the_first_segment_it_spares() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        config()
            .into_builder()
            .retention_ms(Some(10_000))
            .build()
            .unwrap(),
    )
    .unwrap();
    fill(&log, 1, 0, 30);
    let bases = log.maintenance().segment_base_offsets();
    // Batch k has timestamps T0 + 1000 k .. +4; segment i's newest is that of its last batch.
    let newest_of_second = {
        let bytes = log.read(bases[2] - 1, 1).unwrap();
        RecordBatch::parse(&bytes).unwrap().max_timestamp()
    };
    // Now is just past the retention of the second segment's newest record.
    let now = newest_of_second + 10_001;
    let report = log.maintenance().enforce_retention(now).unwrap();
    let reasons: Vec<RetentionReason> = report.deleted.iter().map(|d| d.reason).collect();
    assert_eq!(reasons, vec![RetentionReason::Time, RetentionReason::Time]);
    assert_eq!(log.log_start_offset(), bases[2]);
    // A second pass at the same time removes nothing more.
    assert!(log
        .maintenance()
        .enforce_retention(now)
        .unwrap()
        .deleted
        .is_empty());
}

#[test]
fn retention_never_removes_what_reaches_above_the_high_watermark() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        config()
            .into_builder()
            .high_watermark(HighWatermarkPolicy::SetByCaller)
            .retention_bytes(Some(0))
            .build()
            .unwrap(),
    )
    .unwrap();
    fill(&log, 1, 0, 30);
    let bases = log.maintenance().segment_base_offsets();
    // Committed up to the middle of the third segment.
    log.replica().set_high_watermark(bases[2] + 1).unwrap();
    let report = log.maintenance().enforce_retention(T0).unwrap();
    assert_eq!(report.deleted.len(), 2, "{report:?}");
    assert_eq!(log.log_start_offset(), bases[2]);
    assert!(!report.rolled);
}

#[test]
fn when_every_segment_qualifies_the_log_rolls_first_and_appends_continue() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        config()
            .into_builder()
            .retention_bytes(Some(0))
            .build()
            .unwrap(),
    )
    .unwrap();
    let sent = fill(&log, 1, 0, 20);
    let end = log.log_end_offset();
    let report = log.maintenance().enforce_retention(T0).unwrap();
    assert!(report.rolled);
    assert_eq!(log.log_start_offset(), end);
    assert_eq!(log.log_end_offset(), end);
    assert_eq!(log.maintenance().segment_base_offsets(), vec![end]);
    // A retry of a removed batch is still a duplicate; the next one continues the sequence.
    match log.append(&sent[19].client).unwrap() {
        AppendOutcome::Duplicate(d) => assert_eq!(d.first_offset, sent[19].first),
        other => panic!("{other:?}"),
    }
    let AppendOutcome::Appended(a) = log.append(&batch(1, 100, T0)).unwrap() else {
        panic!("next batch refused");
    };
    assert_eq!(a.first_offset, end);
}

#[test]
fn delete_records_raises_the_log_start_durably_and_retention_removes_what_is_below() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    fill(&log, 1, 0, 30);
    let bases = log.maintenance().segment_base_offsets();
    let target = bases[2] + 2;
    assert_eq!(log.delete_records(target).unwrap(), target);
    assert_eq!(log.log_start_offset(), target);
    // Reads below the start are out of range, naming it.
    match log.read(bases[1], 1 << 20) {
        Err(ReadError::OffsetOutOfRange {
            log_start_offset, ..
        }) => assert_eq!(log_start_offset, target),
        other => panic!("{other:?}"),
    }
    // A read at the start returns the batch holding it.
    assert!(first_offset(&log) <= target);
    // Lowering it is a no-op.
    assert_eq!(log.delete_records(bases[1]).unwrap(), target);
    let report = log.maintenance().enforce_retention(T0).unwrap();
    let deleted: Vec<(i64, RetentionReason)> = report
        .deleted
        .iter()
        .map(|d| (d.base_offset, d.reason))
        .collect();
    assert_eq!(
        deleted,
        vec![
            (bases[0], RetentionReason::LogStart),
            (bases[1], RetentionReason::LogStart)
        ]
    );
    assert_eq!(log.log_start_offset(), target);
    assert_eq!(log.maintenance().segment_base_offsets()[0], bases[2]);
    // Durable at once: a crash right after keeps the new start.
    log.delete_records(target + 1).unwrap();
    log.abandon();
    let log = Log::open(dir.path(), config()).unwrap();
    assert!(!log.recovery_report().clean_shutdown);
    assert_eq!(log.log_start_offset(), target + 1);
}

#[test]
fn delete_records_above_the_high_watermark_is_refused_and_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        config()
            .into_builder()
            .high_watermark(HighWatermarkPolicy::SetByCaller)
            .build()
            .unwrap(),
    )
    .unwrap();
    fill(&log, 1, 0, 10);
    log.replica().set_high_watermark(20).unwrap();
    let before = common::dir_contents(dir.path());
    match log.delete_records(21) {
        Err(e @ RewriteError::AboveHighWatermark { .. }) => {
            assert_eq!(e.kind(), "above_high_watermark");
            assert!(e.to_string().contains("21"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(common::dir_contents(dir.path()), before);
    // The default policy: the high watermark is the durable end.
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    fill(&log, 1, 0, 4);
    log.append(&batch(1, 20, T0)).unwrap();
    assert_eq!(log.high_watermark(), 20);
    assert!(matches!(
        log.delete_records(25),
        Err(RewriteError::AboveHighWatermark {
            high_watermark: 20,
            ..
        })
    ));
}

#[test]
fn a_producer_whose_batches_were_all_removed_is_still_deduplicated_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        config()
            .into_builder()
            .retention_bytes(Some(0))
            .build()
            .unwrap(),
    )
    .unwrap();
    // Producer 7 writes the first segments; producer 8 everything after.
    let gone = fill(&log, 7, 0, 6);
    let stays = fill(&log, 8, 0, 12);
    let report = log.maintenance().enforce_retention(T0).unwrap();
    assert!(
        report.rolled,
        "every segment qualifies at 0 bytes: {report:?}"
    );
    assert!(log.log_start_offset() > gone[5].last);
    let retry = |log: &Log, s: &Sent| match log.append(&s.client).unwrap() {
        AppendOutcome::Duplicate(d) => {
            assert_eq!((d.first_offset, d.last_offset), (s.first, s.last))
        }
        other => panic!("retry of {}..={} answered {other:?}", s.first, s.last),
    };
    // Its last five batches are the window Kafka keeps, and each is still a duplicate with its
    // original offsets, before and after a clean restart and after a crash.
    for s in &gone[1..] {
        retry(&log, s);
    }
    let log = reopen(log, dir.path(), |_| {});
    for s in &gone[1..] {
        retry(&log, s);
    }
    // A crash after a change: a log reopened cleanly and left as it was would still be clean
    // on disk (opening writes nothing until the first change).
    let AppendOutcome::Appended(_) = log.append(&batch(9, 0, T0)).unwrap() else {
        panic!("producer 9's first batch was refused");
    };
    log.abandon(); // a crash
    let log = Log::open(dir.path(), config()).unwrap();
    assert!(!log.recovery_report().clean_shutdown);
    for s in gone[1..].iter().chain(&stays[7..]) {
        retry(&log, s);
    }
    // Its next batch is accepted in sequence.
    let AppendOutcome::Appended(_) = log.append(&batch(7, 30, T0)).unwrap() else {
        panic!("the next batch of producer 7 was refused");
    };
    // Snapshots below the log start go only once a newer one holds the state: some snapshot
    // at or after the log start exists.
    let start = log.log_start_offset();
    let snapshots: Vec<i64> = std::fs::read_dir(dir.path())
        .unwrap()
        .filter_map(|e| {
            let name = e.unwrap().file_name().to_string_lossy().into_owned();
            name.strip_suffix(".snapshot").and_then(|o| o.parse().ok())
        })
        .collect();
    assert!(
        snapshots.iter().any(|&o| o >= start),
        "{snapshots:?} start {start}"
    );
    assert!(
        snapshots.iter().all(|&o| o >= start),
        "{snapshots:?} start {start}"
    );
}

#[test]
fn deleted_files_stay_until_the_delay_has_passed() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        config()
            .into_builder()
            .retention_bytes(Some(0))
            .file_delete_delay_ms(60_000)
            .build()
            .unwrap(),
    )
    .unwrap();
    fill(&log, 1, 0, 12);
    let report = log.maintenance().enforce_retention(T0).unwrap();
    let base = report.deleted[0].base_offset;
    let renamed = format!("{base:020}.log.deleted");
    assert!(segment_files(dir.path()).contains(&renamed));
    // Not yet due.
    log.maintenance().enforce_retention(T0 + 59_999).unwrap();
    assert!(segment_files(dir.path()).contains(&renamed));
    log.maintenance().enforce_retention(T0 + 60_000).unwrap();
    assert!(!segment_files(dir.path())
        .iter()
        .any(|n| n.contains("deleted")));
    // Left by a crash, they are removed by the next open.
    fill(&log, 1, 60, 12);
    log.maintenance().enforce_retention(T0 + 70_000).unwrap();
    assert!(segment_files(dir.path())
        .iter()
        .any(|n| n.contains("deleted")));
    drop(log);
    let log = Log::open(dir.path(), config()).unwrap();
    assert!(!segment_files(dir.path())
        .iter()
        .any(|n| n.contains("deleted")));
    assert!(!log.recovery_report().leftovers.is_empty());
}

#[test]
fn bytes_held_across_retention_and_close_keep_their_content() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(
        dir.path(),
        config()
            .into_builder()
            .retention_bytes(Some(0))
            .build()
            .unwrap(),
    )
    .unwrap();
    fill(&log, 1, 0, 12);
    let held = log.read(0, 1 << 20).unwrap();
    let copy = held.to_vec();
    log.maintenance().enforce_retention(T0).unwrap();
    assert!(!dir.path().join(format!("{:020}.log", 0)).exists());
    assert_eq!(&held[..], &copy[..]);
    log.close().unwrap();
    assert_eq!(&held[..], &copy[..]);
}

fn fixture(set: &str, partition: &str) -> tempfile::TempDir {
    let src = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/fixtures/kafka-logdirs")
        .join(set)
        .join(partition);
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&src, dir.path());
    // The fixtures are read-only; the copies must be writable.
    for e in std::fs::read_dir(dir.path()).unwrap() {
        let p = e.unwrap().path();
        let mut perm = std::fs::metadata(&p).unwrap().permissions();
        #[allow(clippy::permissions_set_readonly_false)]
        perm.set_readonly(false);
        std::fs::set_permissions(&p, perm).unwrap();
    }
    dir
}

#[test]
fn retention_on_the_two_segment_kafka_fixture_keeps_offsets_epochs_and_producers() {
    // userchic-mymicroservices postCreated-0: segments 11 (offsets 11..15) and 16 (16), log
    // start 11 (retention removed 0..10), epochs 60@11 64@12 66@13 68@16.
    let dir = fixture("userchic-mymicroservices", "postCreated-0");
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (11, 17));
    assert_eq!(log.maintenance().segment_base_offsets(), vec![11, 16]);
    // A Kafka directory's batches were validated, not synced: the high watermark (the durable
    // end) moves once they are.
    log.flush().unwrap();
    let producers_before = log.producer_count();
    let all = read_all(&log, usize::MAX);
    assert_eq!(all.len(), 6);
    assert_eq!(log.delete_records(13).unwrap(), 13);
    let epochs: Vec<(i32, i64)> = log
        .replica()
        .leader_epochs()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(epochs, vec![(66, 13), (68, 16)]);
    // Kafka's default time rule (7 days) at a far later time: both segments are too old, so
    // the log rolls at 17 first and both go.
    let report = log.maintenance().enforce_retention(T0 * 2).unwrap();
    let deleted: Vec<(i64, RetentionReason)> = report
        .deleted
        .iter()
        .map(|d| (d.base_offset, d.reason))
        .collect();
    assert_eq!(
        deleted,
        vec![(11, RetentionReason::Time), (16, RetentionReason::Time)]
    );
    assert!(report.rolled);
    assert_eq!(log.log_start_offset(), 17);
    assert_eq!(log.log_end_offset(), 17);
    assert_eq!(log.producer_count(), producers_before);
    // The epoch cache starts at the new log start with the epoch that wrote it.
    let epochs: Vec<(i32, i64)> = log
        .replica()
        .leader_epochs()
        .iter()
        .map(|e| (e.epoch, e.start_offset))
        .collect();
    assert_eq!(epochs, vec![(68, 17)]);
    log.close().unwrap();
    assert_eq!(
        std::fs::read_to_string(dir.path().join("leader-epoch-checkpoint")).unwrap(),
        "0\n1\n68 17\n"
    );
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.log_start_offset(), 17);
    assert_eq!(log.producer_count(), producers_before);
}

#[test]
fn delete_records_on_posts_0_hides_what_is_below_and_keeps_the_rest() {
    let dir = fixture("makaksik13-yanwit", "posts-0");
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    log.flush().unwrap();
    let all = read_all(&log, usize::MAX);
    let batches: Vec<(i64, i64)> = all
        .iter()
        .map(|b| {
            let b = RecordBatch::parse(b).unwrap();
            (b.base_offset(), b.last_offset())
        })
        .collect();
    let (mid_first, mid_last) = batches[batches.len() / 2];
    log.delete_records(mid_last).unwrap();
    let after = read_all(&log, usize::MAX);
    assert_eq!(after[0], all[batches.len() / 2]);
    assert_eq!(after.len(), all.len() - batches.len() / 2);
    assert!(mid_first <= mid_last);
    log.maintenance().enforce_retention(0).unwrap();
    assert_eq!(read_all(&log, usize::MAX), after);
}
