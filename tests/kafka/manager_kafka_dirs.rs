//! Whole log dirs written by real Kafka brokers, opened through the log manager: the
//! partitions, offsets and log starts Kafka's checkpoints give, nothing Kafka vouched for
//! validated or rewritten, and a close that leaves Kafka's files as Kafka wrote them
//! (`tests/fixtures/kafka-broker`, a Kafka 4.4 broker stopped cleanly, and the public log dirs
//! of `tests/fixtures/kafka-logdirs`).

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{copy_tree, tree_digest};
use oncelog::format::BatchIter;
use oncelog::manager::offsets;
use oncelog::{JobIntervals, LogManager, ManagerConfig, TopicPartition};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures");

fn config() -> ManagerConfig {
    ManagerConfig::default()
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(2)
}

fn copy_of(set: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    copy_tree(&Path::new(FIXTURES).join(set), &dir);
    // Fixture files beside the partitions that are not Kafka's.
    for extra in ["MANIFEST.json", "README.md"] {
        let _ = std::fs::remove_file(dir.join(extra));
    }
    (tmp, dir)
}

fn offsets_of(dir: &Path, name: &str) -> BTreeMap<TopicPartition, i64> {
    offsets::decode(&std::fs::read_to_string(dir.join(name)).unwrap_or_default()).unwrap()
}

/// Every record offset a consumer reads, from the log start to the high watermark.
fn offsets_read(log: &oncelog::Log) -> Vec<i64> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.high_watermark() {
        let fetched = log.fetch(at, 1 << 20).unwrap();
        for item in BatchIter::new(&fetched.bytes) {
            let (_, b) = item.unwrap();
            out.extend(b.base_offset().max(at)..=b.last_offset());
        }
        assert!(fetched.next_offset > at, "no progress at {at}: {fetched:?}");
        at = fetched.next_offset;
    }
    out
}

#[test]
fn a_kafka_4_4_log_dir_shut_down_cleanly_opens_without_validating_and_closes_unchanged() {
    let (_tmp, dir) = copy_of("kafka-broker");
    let before = tree_digest(&dir);
    let recovery_points = offsets_of(&dir, offsets::RECOVERY_POINTS);
    let m = LogManager::open(&[&dir], config()).unwrap();
    let report = m.open_report();
    assert!(report.log_dirs[0].clean_shutdown);
    assert_eq!(report.failures().count(), 0);
    assert_eq!(report.partitions.len(), 10);
    assert_eq!(
        report.segments_validated(),
        0,
        "Kafka vouched for every segment"
    );
    for p in &report.partitions {
        let o = p.outcome.as_ref().unwrap();
        assert_eq!(o.recovery.segments_vouched, o.segments, "{}", p.partition);
        assert!(
            o.recovery.indexes_rebuilt.is_empty(),
            "{}: {:?}",
            p.partition,
            o.recovery.indexes_rebuilt
        );
        assert!(o.recovery.truncations.is_empty(), "{}", p.partition);
        assert_eq!(
            o.log_end_offset, recovery_points[&p.partition],
            "{}: the log ends where Kafka's recovery point says",
            p.partition
        );
        assert_eq!(
            o.producers.batches_replayed, 0,
            "{}: Kafka's snapshot is at the end",
            p.partition
        );
    }
    let compacted = m.get("compacted", 0).unwrap();
    // Kafka's log start: its first segment's base (no DeleteRecords), though compaction left
    // that segment's first batch at 1135.
    assert_eq!(compacted.log_start_offset(), 0);
    let read = offsets_read(&compacted);
    assert_eq!(read.first(), Some(&1135));
    assert_eq!(read.last(), Some(&2650));
    let rolled = m.get("rolled", 0).unwrap();
    assert_eq!(rolled.maintenance().segment_count(), 18);
    assert_eq!(offsets_read(&rolled), (0..2000).collect::<Vec<_>>());
    drop((compacted, rolled));
    m.close().unwrap();

    // Kafka's files as Kafka wrote them; the offset checkpoints say the same (in oncelog's
    // order); oncelog added its checkpoint and lock beside each partition's segments.
    let after = tree_digest(&dir);
    let rewritten = [
        offsets::RECOVERY_POINTS,
        offsets::LOG_START_OFFSETS,
        offsets::HIGH_WATERMARKS,
        offsets::CLEANER_OFFSETS,
    ];
    for (name, digest) in &before {
        if rewritten.contains(&name.as_str()) {
            assert_eq!(
                offsets_of(&_tmp.path().join("data"), name),
                offsets::decode(
                    &std::fs::read_to_string(Path::new(FIXTURES).join("kafka-broker").join(name))
                        .unwrap()
                )
                .unwrap(),
                "{name}"
            );
            continue;
        }
        assert_eq!(after.get(name), Some(digest), "{name} was changed");
    }
    let added: Vec<&String> = after.keys().filter(|k| !before.contains_key(*k)).collect();
    for name in &added {
        assert!(
            name.ends_with("oncelog.checkpoint")
                || name.ends_with("oncelog.lock")
                || *name == ".lock",
            "unexpected new file {name}"
        );
    }
}

fn own_copy(set: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    copy_tree(&Path::new(FIXTURES).join(set), &dir);
    (tmp, dir)
}

#[test]
fn the_log_start_kafka_raised_by_delete_records_holds_through_the_manager() {
    // tests/fixtures/make-kafka-logdirs.sh: 500 records, DeleteRecords to 333, a clean stop
    // before Kafka's retention removed the segments below.
    let (_tmp, dir) = own_copy("kafka-deleterecords");
    let partition = dir.join("deleted-0");
    {
        // Alone, the partition knows nothing of the log dir's checkpoint: deleted records
        // would be readable again. (Read-only check: the copy is opened, then thrown away.)
        let (_t, alone) = own_copy("kafka-deleterecords");
        let log =
            oncelog::Log::open(alone.join("deleted-0"), oncelog::LogConfig::default()).unwrap();
        assert_eq!(log.log_start_offset(), 0);
        assert!(log.recovery_report().segments_validated > 0);
    }
    let m = LogManager::open(&[&dir], config()).unwrap();
    let p = &m.open_report().partitions[0];
    let o = p.outcome.as_ref().unwrap();
    assert_eq!((o.log_start_offset, o.log_end_offset), (333, 500));
    assert_eq!(o.recovery.segments_validated, 0);
    // The segments wholly below the log start go, as Kafka's next retention check removes them.
    assert_eq!(
        o.recovery.segments_deleted.len(),
        2,
        "{:?}",
        o.recovery.segments_deleted
    );
    let log = m.get("deleted", 0).unwrap();
    assert_eq!(offsets_read(&log), (333..500).collect::<Vec<_>>());
    assert_eq!(
        log.fetch(332, 1 << 20).unwrap_err().kind(),
        "offset_out_of_range"
    );
    drop(log);
    m.close().unwrap();
    assert_eq!(
        offsets_of(&dir, offsets::LOG_START_OFFSETS)[&TopicPartition::new("deleted", 0)],
        333,
        "the log start is still Kafka's after the close"
    );
    assert!(!partition.join("00000000000000000000.log").exists());
}

#[test]
fn after_kafka_was_killed_only_what_its_recovery_point_does_not_cover_is_validated() {
    // The same broker, 300 more records into `deleted` and 400 into `crashed`, then SIGKILL:
    // no clean-shutdown marker; Kafka's recovery points: deleted 500, crashed none.
    let (_tmp, dir) = own_copy("kafka-killed");
    let m = LogManager::open(&[&dir], config()).unwrap();
    let report = m.open_report();
    assert!(!report.log_dirs[0].clean_shutdown);
    assert_eq!(report.failures().count(), 0);
    let by_name: BTreeMap<String, &oncelog::PartitionOpened> = report
        .partitions
        .iter()
        .map(|p| (p.partition.to_string(), p.outcome.as_ref().unwrap()))
        .collect();
    let deleted = by_name["deleted-0"];
    assert_eq!(
        (deleted.log_start_offset, deleted.log_end_offset),
        (333, 800)
    );
    // [280, 420) ends below Kafka's recovery point 500: trusted; [420, 560) holds it, and
    // [560, 700) and [700, 800) come after it: validated, as Kafka's own recovery would.
    assert_eq!(deleted.recovery.segments_vouched, 1);
    assert_eq!(
        deleted.recovery.segments_validated, 3,
        "{:#?}",
        deleted.recovery
    );
    assert!(deleted.recovery.truncations.is_empty());
    let crashed = by_name["crashed-0"];
    assert_eq!((crashed.log_start_offset, crashed.log_end_offset), (0, 400));
    assert_eq!(
        crashed.recovery.segments_vouched, 0,
        "no recovery point: all validated"
    );
    assert_eq!(crashed.recovery.segments_validated, 3);
    let log = m.get("deleted", 0).unwrap();
    // The recovered tail of the active segment is committed once it is flushed again.
    assert_eq!(log.high_watermark(), 700);
    log.flush().unwrap();
    assert_eq!(offsets_read(&log), (333..800).collect::<Vec<_>>());
    drop(log);
    m.close().unwrap();
    // Closed cleanly now: the next open validates nothing.
    let m = LogManager::open(&[&dir], config()).unwrap();
    assert_eq!(m.open_report().segments_validated(), 0);
    assert_eq!(m.open_report().clean(), 2);
    m.close().unwrap();
}

#[test]
fn every_public_kafka_log_dir_opens_with_the_partitions_offsets_and_log_starts_kafka_gives() {
    let text = std::fs::read_to_string(Path::new(FIXTURES).join("kafka-logdirs/MANIFEST.json"))
        .expect("fixtures: MANIFEST.json (tests/fixtures)");
    let manifest: serde_json::Value = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for set in manifest["sets"].as_array().unwrap() {
        let name = set["dir"].as_str().unwrap();
        // Per partition: (first segment base, log end) from the manifest's decoded batches.
        let mut expected: BTreeMap<String, (i64, i64)> = BTreeMap::new();
        for f in set["files"].as_array().unwrap() {
            let path = f["path"].as_str().unwrap();
            let (Some((part, file)), Some(last)) =
                (path.rsplit_once('/'), f["last_offset"].as_i64())
            else {
                continue;
            };
            let Some(base) = file
                .strip_suffix(".log")
                .and_then(|b| b.parse::<i64>().ok())
            else {
                continue;
            };
            let e = expected.entry(part.to_string()).or_insert((base, last + 1));
            *e = (e.0.min(base), e.1.max(last + 1));
        }
        let (_tmp, dir) = copy_of(&format!("kafka-logdirs/{name}"));
        let clean = dir.join(".kafka_cleanshutdown").exists();
        let starts = offsets_of(&dir, offsets::LOG_START_OFFSETS);
        let m = LogManager::open(&[&dir], config()).unwrap();
        let report = m.open_report();
        assert_eq!(
            report.failures().count(),
            0,
            "{name}: {:?}",
            report.failures().collect::<Vec<_>>()
        );
        let opened: Vec<String> = report
            .partitions
            .iter()
            .map(|p| p.partition.to_string())
            .collect();
        assert_eq!(
            opened,
            expected.keys().cloned().collect::<Vec<_>>(),
            "{name}"
        );
        for p in &report.partitions {
            let o = p.outcome.as_ref().unwrap();
            let (first_base, end) = expected[&p.partition.to_string()];
            let start = starts
                .get(&p.partition)
                .map_or(first_base, |s| (*s).max(first_base));
            assert_eq!(
                (o.log_start_offset, o.log_end_offset),
                (start, end),
                "{name}/{}",
                p.partition
            );
            if clean {
                assert_eq!(
                    o.recovery.segments_validated, 0,
                    "{name}/{}: clean",
                    p.partition
                );
            }
            checked += 1;
        }
        m.close().unwrap();
        let again = LogManager::open(&[&dir], config()).unwrap();
        assert_eq!(
            again.open_report().segments_validated(),
            0,
            "{name}: reopened after a clean close"
        );
        again.close().unwrap();
    }
    assert!(checked >= 10, "{checked} partitions");
}
