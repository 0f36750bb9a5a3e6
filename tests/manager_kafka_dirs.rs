//! Whole log dirs written by real Kafka brokers, opened through the log manager: the
//! partitions, offsets and log starts Kafka's checkpoints give, nothing Kafka vouched for
//! validated or rewritten, and a close that leaves Kafka's files as Kafka wrote them
//! (`shared/fixtures/kafka-broker`, a Kafka 4.4 broker stopped cleanly, and the public log dirs
//! of `shared/fixtures/kafka-logdirs`).

mod common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use common::{copy_tree, tree_digest};
use oncelog::format::BatchIter;
use oncelog::manager::offsets;
use oncelog::{JobIntervals, LogManager, ManagerConfig, TopicPartition};

const SHARED: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/../shared/fixtures");

fn config() -> ManagerConfig {
    ManagerConfig {
        jobs: JobIntervals::none(),
        recovery_threads: 2,
        ..ManagerConfig::default()
    }
}

fn copy_of(set: &str) -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("data");
    copy_tree(&Path::new(SHARED).join(set), &dir);
    // Fixture files beside the partitions that are not Kafka's.
    for extra in ["MANIFEST.json", "README.md"] {
        let _ = std::fs::remove_file(dir.join(extra));
    }
    (tmp, dir)
}

fn offsets_of(dir: &Path, name: &str) -> BTreeMap<TopicPartition, i64> {
    offsets::decode(&std::fs::read_to_string(dir.join(name)).unwrap_or_default()).unwrap()
}

/// Every record offset the log returns, from its start.
fn offsets_read(log: &oncelog::Log) -> Vec<i64> {
    let mut out = Vec::new();
    let mut at = log.log_start_offset();
    while at < log.log_end_offset() {
        let fetched = log.fetch(at, 1 << 20).unwrap();
        for item in BatchIter::new(&fetched.bytes) {
            let (_, b) = item.unwrap();
            out.extend(b.base_offset().max(at)..=b.last_offset());
        }
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
    assert_eq!(rolled.segment_count(), 18);
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
                    &std::fs::read_to_string(Path::new(SHARED).join("kafka-broker").join(name))
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
