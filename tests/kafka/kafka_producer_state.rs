//! Producer state rebuilt from real Kafka logs equals what the broker itself snapshotted.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use oncelog::producer::{snapshot, ProducerEntry};
use oncelog::{Log, LogConfig};

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/kafka-logdirs");

/// Every partition directory of the fixtures that holds a producer snapshot.
fn partitions_with_snapshots() -> Vec<PathBuf> {
    let mut out = Vec::new();
    for set in std::fs::read_dir(FIXTURES).expect("fixtures present beside the repository") {
        let set = set.unwrap().path();
        if !set.is_dir() {
            continue;
        }
        for part in std::fs::read_dir(&set).unwrap() {
            let part = part.unwrap().path();
            if part.is_dir() && snapshots(&part).next().is_some() {
                out.push(part);
            }
        }
    }
    out.sort();
    out
}

fn snapshots(dir: &Path) -> impl Iterator<Item = PathBuf> {
    let mut v: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "snapshot"))
        .collect();
    v.sort();
    v.into_iter()
}

fn copy_dir(from: &Path, to: &Path) {
    for e in std::fs::read_dir(from).unwrap() {
        let p = e.unwrap().path();
        std::fs::copy(&p, to.join(p.file_name().unwrap())).unwrap();
    }
}

#[derive(Debug, PartialEq, Eq)]
struct Fields {
    epoch: i16,
    last_sequence: i32,
    last_offset: i64,
    offset_delta: i32,
    timestamp: i64,
    coordinator_epoch: i32,
    current_txn_first_offset: Option<i64>,
}

impl Fields {
    /// What a Kafka snapshot keeps of a producer: its entry and its newest batch.
    fn of(e: &ProducerEntry) -> Fields {
        let b = e
            .newest_batch()
            .expect("Kafka's entries here all have a batch");
        Fields {
            epoch: e.epoch(),
            last_sequence: e.last_seq(),
            last_offset: b.last_offset,
            offset_delta: b.offset_delta,
            timestamp: e.last_timestamp(),
            coordinator_epoch: e.coordinator_epoch(),
            current_txn_first_offset: e.current_txn_first_offset(),
        }
    }
}

#[test]
fn state_replayed_from_real_kafka_logs_equals_the_brokers_newest_snapshot() {
    let partitions = partitions_with_snapshots();
    assert!(partitions.len() >= 6, "fixtures: {partitions:?}");
    for part in partitions {
        let newest = snapshots(&part).last().unwrap();
        let expected: BTreeMap<i64, Fields> = snapshot::decode(&std::fs::read(&newest).unwrap())
            .unwrap()
            .entries
            .iter()
            .map(|e| (e.producer_id(), Fields::of(e)))
            .collect();

        // Replay from the log alone: copy the partition without its snapshots.
        let dir = tempfile::tempdir().unwrap();
        copy_dir(&part, dir.path());
        for s in snapshots(dir.path()) {
            std::fs::remove_file(s).unwrap();
        }
        let log = Log::open(dir.path(), LogConfig::default()).unwrap();
        assert_eq!(log.producer_load_report().snapshot_offset, None);
        let newest_offset: i64 = newest
            .file_stem()
            .unwrap()
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert_eq!(log.log_end_offset(), newest_offset, "{}", part.display());
        assert_eq!(log.producer_count(), expected.len(), "{}", part.display());
        for (pid, want) in &expected {
            let e = log
                .producer(*pid)
                .unwrap_or_else(|| panic!("{}: pid {pid}", part.display()));
            assert_eq!(&Fields::of(&e), want, "{} pid {pid}", part.display());
        }
    }
}

#[test]
fn a_real_kafka_snapshot_is_loaded_instead_of_replaying() {
    let part = Path::new(FIXTURES).join("makaksik13-yanwit/posts-0");
    let dir = tempfile::tempdir().unwrap();
    copy_dir(&part, dir.path());
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.producer_load_report().snapshot_offset, Some(80));
    assert_eq!(log.producer_load_report().batches_replayed, 0);
    assert_eq!(log.producer_count(), 27);
}
