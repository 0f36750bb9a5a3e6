//! The log manager (docs/design.md, "Many partitions"): locks, meta.properties, the offset checkpoint files, the
//! clean-shutdown marker, partitions created, listed, deleted and configured, a damaged one
//! left offline while the others open, and a close that writes everything while a drop
//! writes nothing.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Arc;

use common::{env_with, tree_digest, TestClock};
use oncelog::format::BatchBuilder;
use oncelog::manager::offsets;
use oncelog::{
    AppendOutcome, CleanupPolicy, JobIntervals, Log, LogConfig, LogManager, ManagerConfig,
    ManagerError, PartitionConfig, TopicPartition,
};
use oncelog::{BadMetadataFile, MetadataFile};

fn config() -> ManagerConfig {
    ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(16 << 10)
                .segment_index_bytes(4096)
                .prefault_bytes(0)
                .build()
                .unwrap(),
        )
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(2)
}

fn batch(i: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.append(
        1_700_000_000_000 + i,
        None,
        Some(format!("record {i}").as_bytes()),
        &[],
    );
    b.build().unwrap()
}

fn append(log: &Log, n: i64) {
    for i in 0..n {
        match log.append(&batch(i)).unwrap() {
            AppendOutcome::Appended(_) => {}
            other => panic!("{other:?}"),
        }
    }
}

/// A log dir with partitions `a-0`, `a-1` and `b-0`, 300 records each, closed cleanly.
fn populated() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let m = LogManager::open(&[&dir], config()).unwrap();
    for (t, p) in [("a", 0), ("a", 1), ("b", 0)] {
        let log = m.create(t, p, PartitionConfig::default()).unwrap();
        append(&log, 300);
    }
    m.close().unwrap();
    (tmp, dir)
}

#[test]
fn a_second_manager_in_this_process_is_refused_naming_the_dir_and_the_holder() {
    let (_tmp, dir) = populated();
    let first = LogManager::open(&[&dir], config()).unwrap();
    match LogManager::open(&[&dir], config()) {
        Err(ManagerError::Locked { dir: d, holder }) => {
            assert_eq!(d, dir);
            assert_eq!(
                holder,
                format!("process {}: this process has it open", std::process::id())
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        first.get("a", 0).unwrap().log_end_offset(),
        300,
        "the refusal changed nothing"
    );
    first.close().unwrap();
    LogManager::open(&[&dir], config())
        .unwrap()
        .close()
        .unwrap();
}

const LOCK_CHILD: &str = "ONCELOG_MANAGER_LOCK_CHILD";

/// The child of the two-process test: opens the log dir and says how that went.
#[test]
fn lock_child_process() {
    let Ok(dir) = std::env::var(LOCK_CHILD) else {
        return;
    };
    match LogManager::open(&[Path::new(&dir)], config()) {
        Ok(m) => println!("OPENED {}", m.list().len()),
        Err(e) => println!("REFUSED {}: {e}", e.kind()),
    }
}

#[test]
fn another_process_is_refused_naming_the_dir_and_this_process() {
    let (_tmp, dir) = populated();
    let m = LogManager::open(&[&dir], config()).unwrap();
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "manager::lock_child_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(LOCK_CHILD, &dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    let line = said
        .lines()
        .find_map(|l| {
            l.find("OPENED")
                .or_else(|| l.find("REFUSED"))
                .map(|at| &l[at..])
        })
        .unwrap_or_else(|| panic!("the child said nothing: {said}"));
    assert!(line.starts_with("REFUSED locked: "), "{line}");
    assert!(line.contains(&dir.display().to_string()), "{line}");
    assert!(
        line.contains(&format!("process {}", std::process::id())),
        "{line}"
    );
    m.close().unwrap();
    // Released: the child opens it now.
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "manager::lock_child_process",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(LOCK_CHILD, &dir)
        .output()
        .unwrap();
    assert!(String::from_utf8_lossy(&out.stdout).contains("OPENED 3"));
}

/// What a refused open must leave exactly as it was: every file but the lock.
fn digest_without_lock(dir: &Path) -> std::collections::BTreeMap<String, (usize, u32)> {
    let mut d = tree_digest(dir);
    d.remove(".lock");
    d
}

#[test]
fn a_malformed_offset_checkpoint_is_refused_naming_file_and_line_and_nothing_changes() {
    for name in [
        offsets::RECOVERY_POINTS,
        offsets::LOG_START_OFFSETS,
        offsets::HIGH_WATERMARKS,
        offsets::CLEANER_OFFSETS,
    ] {
        for (text, line) in [
            ("0\n1\na 0\n", Some(3)),
            ("7\n0\n", Some(1)),
            ("0\n3\na 0 5\n", None),
            ("0\n1\na 0 -4\n", Some(3)),
            ("0\n1\na/b 0 4\n", Some(3)),
        ] {
            let (_tmp, dir) = populated();
            std::fs::write(dir.join(name), text).unwrap();
            let before = digest_without_lock(&dir);
            match LogManager::open(&[&dir], config()) {
                Err(ManagerError::BadMetadataFile(
                    e @ BadMetadataFile {
                        file: MetadataFile::OffsetCheckpoint,
                        ..
                    },
                )) => {
                    assert_eq!(e.path, dir.join(name));
                    assert_eq!(e.line, line, "{name} {text:?}: {e}");
                    assert_eq!(
                        ManagerError::BadMetadataFile(e).kind(),
                        "bad_offset_checkpoint"
                    );
                }
                other => panic!("{name} {text:?}: {other:?}"),
            }
            assert_eq!(
                digest_without_lock(&dir),
                before,
                "{name} {text:?}: a refusal changed files"
            );
            assert!(dir.join(".kafka_cleanshutdown").exists());
        }
    }
}

#[test]
fn bad_meta_properties_and_dirs_that_do_not_belong_together_are_refused() {
    let (_tmp, dir) = populated();
    let meta = std::fs::read_to_string(dir.join("meta.properties")).unwrap();
    assert!(
        meta.contains("version=1\n") && meta.contains("directory.id="),
        "{meta}"
    );
    std::fs::write(
        dir.join("meta.properties"),
        "version=1\nnode.id=x\ncluster.id=c\n",
    )
    .unwrap();
    match LogManager::open(&[&dir], config()) {
        Err(ManagerError::BadMetadataFile(
            e @ BadMetadataFile {
                file: MetadataFile::MetaProperties,
                ..
            },
        )) => {
            assert_eq!((e.line, e.kind()), (Some(2), "bad_meta_properties"), "{e}")
        }
        other => panic!("{other:?}"),
    }
    std::fs::write(dir.join("meta.properties"), &meta).unwrap();

    // The configuration's node id, another cluster, the same directory id twice.
    let wrong_node = config().with_node_id(Some(9));
    let e = LogManager::open(&[&dir], wrong_node).unwrap_err();
    assert_eq!(e.kind(), "bad_meta_properties", "{e}");
    assert!(e.to_string().contains("node id 0 is not 9"), "{e}");
    let other = dir.parent().unwrap().join("other");
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(
        other.join("meta.properties"),
        "version=1\nnode.id=0\ncluster.id=another\n",
    )
    .unwrap();
    let e = LogManager::open(&[&dir, &other], config()).unwrap_err();
    assert!(e.to_string().contains("cluster.id another is not"), "{e}");
    std::fs::write(other.join("meta.properties"), &meta).unwrap();
    let e = LogManager::open(&[&dir, &other], config()).unwrap_err();
    assert!(e.to_string().contains("is also the id of"), "{e}");

    // A new dir beside it takes its cluster and node.
    std::fs::remove_file(other.join("meta.properties")).unwrap();
    let m = LogManager::open(&[&dir, &other], config()).unwrap();
    assert!(m.open_report().log_dirs[1].meta_written);
    m.close().unwrap();
    let new = std::fs::read_to_string(other.join("meta.properties")).unwrap();
    let cluster = meta.lines().find(|l| l.starts_with("cluster.id=")).unwrap();
    assert!(
        new.contains(cluster) && new.contains("node.id=0\n"),
        "{new}"
    );
    assert_eq!(
        LogManager::open(&[&dir, &dir.join("../logs")], config())
            .unwrap_err()
            .kind(),
        "duplicate_log_dir"
    );
    assert_eq!(
        LogManager::open(&[] as &[&Path], config())
            .unwrap_err()
            .kind(),
        "no_log_dirs"
    );
}

#[test]
fn a_partition_in_two_log_dirs_is_refused() {
    let (tmp, dir) = populated();
    let second = tmp.path().join("second");
    let m = LogManager::open(&[&second], config()).unwrap();
    m.create("a", 0, PartitionConfig::default()).unwrap();
    m.close().unwrap();
    std::fs::copy(dir.join("meta.properties"), second.join("meta.properties")).unwrap();
    std::fs::write(
        second.join("meta.properties"),
        std::fs::read_to_string(dir.join("meta.properties"))
            .unwrap()
            .lines()
            .filter(|l| !l.starts_with("directory.id"))
            .collect::<Vec<_>>()
            .join("\n"),
    )
    .unwrap();
    match LogManager::open(&[&dir, &second], config()) {
        Err(ManagerError::DuplicatePartition { partition, .. }) => {
            assert_eq!(partition, TopicPartition::new("a", 0))
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn partitions_are_created_listed_got_and_deleted_and_a_deleted_one_never_returns() {
    let tmp = tempfile::tempdir().unwrap();
    let dirs = [tmp.path().join("d0"), tmp.path().join("d1")];
    let clock = TestClock::new(1_700_000_000_000);
    let m = LogManager::open_in(env_with(clock.clone()), &dirs, config()).unwrap();
    for p in 0..4 {
        append(
            &m.create("orders", p, PartitionConfig::default()).unwrap(),
            10,
        );
    }
    // Spread over the dirs: the one with the fewest partitions each time.
    let listed = m.list();
    assert_eq!(listed.len(), 4);
    assert_eq!(
        listed
            .iter()
            .filter(|p| p.dir.starts_with(&dirs[0]))
            .count(),
        2
    );
    assert!(listed.iter().all(|p| p.offline.is_none()));
    let gone = m.get("orders", 2).unwrap();
    let gone_dir = listed[2].dir.clone();
    m.delete("orders", 2).unwrap();
    assert_eq!(m.get("orders", 2).unwrap_err().kind(), "unknown_partition");
    assert_eq!(gone.append(&batch(0)).unwrap_err().kind(), "closed");
    assert!(!gone_dir.exists());
    let parent = gone_dir.parent().unwrap();
    let doomed: Vec<String> = std::fs::read_dir(parent)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with("-delete"))
        .collect();
    assert_eq!(doomed.len(), 1);
    assert!(
        doomed[0].starts_with("orders-2.") && doomed[0].len() == "orders-2.".len() + 32 + 7,
        "{doomed:?}"
    );
    assert!(!offsets::decode(
        &std::fs::read_to_string(parent.join(offsets::RECOVERY_POINTS)).unwrap()
    )
    .unwrap()
    .contains_key(&TopicPartition::new("orders", 2)));
    // Removed once file.delete.delay.ms (60 s by default) is over.
    m.run_job(oncelog::Job::Deletion).unwrap();
    assert!(parent.join(&doomed[0]).exists());
    clock.set(1_700_000_000_000 + 60_001);
    assert_eq!(m.run_job(oncelog::Job::Deletion).unwrap().acted, 1);
    assert!(!parent.join(&doomed[0]).exists());
    m.close().unwrap();

    let m = LogManager::open(&dirs, config()).unwrap();
    let names: Vec<String> = m.list().iter().map(|p| p.partition.to_string()).collect();
    assert_eq!(names, ["orders-0", "orders-1", "orders-3"]);
    assert_eq!(m.get("orders", 3).unwrap().log_end_offset(), 10);
    // The name is free again, and the new partition starts empty.
    assert_eq!(
        m.create("orders", 2, PartitionConfig::default())
            .unwrap()
            .log_end_offset(),
        0
    );
    m.close().unwrap();
}

#[test]
fn refused_names_and_numbers_are_typed_errors_that_create_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let m = LogManager::open(&[&dir], config()).unwrap();
    m.create("a.b", 0, PartitionConfig::default()).unwrap();
    let before = digest_without_lock(&dir);
    let refused = [
        ("", 0, "invalid_topic", "empty"),
        (".", 0, "invalid_topic", "reserved"),
        ("..", 0, "invalid_topic", "reserved"),
        ("bad name", 0, "invalid_topic", "illegal_character"),
        ("x/y", 0, "invalid_topic", "illegal_character"),
        (&*"t".repeat(250), 0, "invalid_topic", "too_long"),
        ("ok", -1, "invalid_partition", ""),
        ("a_b", 0, "topic_collision", ""),
        ("a.b", 0, "partition_exists", ""),
    ];
    for (topic, partition, kind, rule) in refused {
        let e = m
            .create(topic, partition, PartitionConfig::default())
            .unwrap_err();
        assert_eq!(e.kind(), kind, "{topic:?}: {e}");
        if let ManagerError::InvalidTopic { error, .. } = &e {
            assert_eq!(error.kind(), rule, "{topic:?}");
        }
    }
    let bad_config = PartitionConfig::default().with_segment_bytes(3);
    let e = m.create("fine", 0, bad_config).unwrap_err();
    assert_eq!(e.kind(), "invalid_config", "{e}");
    assert_eq!(
        digest_without_lock(&dir),
        before,
        "a refused create left something"
    );
    assert_eq!(m.list().len(), 1);
    m.close().unwrap();
}

#[test]
fn a_partitions_own_settings_survive_reopening_over_the_topics_and_the_defaults() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let mut cfg = config();
    cfg.topics.insert(
        "events".into(),
        PartitionConfig::default().with_retention_ms(Some(1_000)),
    );
    let own = PartitionConfig::default()
        .with_segment_bytes(8 << 10)
        .with_cleanup_policy(CleanupPolicy::Compact)
        .with_flush_messages(Some(7));
    let m = LogManager::open(&[&dir], cfg.clone()).unwrap();
    m.create("events", 0, own).unwrap();
    m.create("events", 1, PartitionConfig::default()).unwrap();
    m.close().unwrap();
    let text = std::fs::read_to_string(dir.join("events-0/oncelog.properties")).unwrap();
    assert!(
        text.contains("segment.bytes=8192\n") && text.contains("cleanup.policy=compact\n"),
        "{text}"
    );
    assert!(
        !dir.join("events-1/oncelog.properties").exists(),
        "defaults are not written"
    );
    let m = LogManager::open(&[&dir], cfg).unwrap();
    let c0 = m.partition_config("events", 0).unwrap();
    assert_eq!(c0.log.segment_bytes, 8 << 10);
    assert_eq!(c0.flush_messages, Some(7));
    assert_eq!(c0.cleanup_policy, CleanupPolicy::Compact);
    assert_eq!(
        c0.log.retention_ms, None,
        "compact-only: no deletion by time"
    );
    let c1 = m.partition_config("events", 1).unwrap();
    assert_eq!(
        (c1.log.segment_bytes, c1.log.retention_ms),
        (16 << 10, Some(1_000))
    );
    m.close().unwrap();

    // A malformed settings file leaves that partition offline, the others open.
    std::fs::write(
        dir.join("events-0/oncelog.properties"),
        "segment.bytes=lots\n",
    )
    .unwrap();
    let m = LogManager::open(&[&dir], config()).unwrap();
    let (tp, failure) = m
        .open_report()
        .failures()
        .next()
        .map(|(t, f)| (t.clone(), f.kind()))
        .unwrap();
    assert_eq!(
        (tp.to_string(), failure),
        ("events-0".to_string(), "bad_partition_config")
    );
    assert!(m.get("events", 1).is_ok());
    m.close().unwrap();
}

#[test]
fn a_damaged_partition_stays_offline_the_others_open_and_its_offsets_are_kept() {
    let (_tmp, dir) = populated();
    // A DeleteRecords on b-0, then damage its checkpoint: it cannot be opened safely.
    let m = LogManager::open(&[&dir], config()).unwrap();
    m.get("b", 0).unwrap().delete_records(120).unwrap();
    m.close().unwrap();
    std::fs::write(dir.join("b-0/oncelog.checkpoint"), "1\nclean_shutdown 7\n").unwrap();
    let m = LogManager::open(&[&dir], config()).unwrap();
    let report = m.open_report();
    let failures: Vec<(String, &str)> = report
        .failures()
        .map(|(tp, f)| (tp.to_string(), f.kind()))
        .collect();
    assert_eq!(failures, [("b-0".to_string(), "bad_checkpoint")]);
    assert_eq!(report.opened(), 2);
    match m.get("b", 0) {
        Err(ManagerError::PartitionOffline { partition, failure }) => {
            assert_eq!(partition.to_string(), "b-0");
            assert!(
                failure.to_string().contains("oncelog.checkpoint"),
                "{failure}"
            );
        }
        other => panic!("{other:?}"),
    }
    let offline: Vec<_> = m
        .list()
        .into_iter()
        .filter(|p| p.offline.is_some())
        .collect();
    assert_eq!(offline.len(), 1);
    m.get("a", 0).unwrap().append(&batch(1)).unwrap();
    m.close().unwrap();
    // Its entries are written back as read, and the dir is not marked clean.
    let starts =
        offsets::decode(&std::fs::read_to_string(dir.join(offsets::LOG_START_OFFSETS)).unwrap())
            .unwrap();
    assert_eq!(starts.get(&TopicPartition::new("b", 0)), Some(&120));
    assert!(!dir.join(".kafka_cleanshutdown").exists());
    // Repaired (the damaged checkpoint removed), it opens with the log start it had.
    std::fs::remove_file(dir.join("b-0/oncelog.checkpoint")).unwrap();
    let m = LogManager::open(&[&dir], config()).unwrap();
    assert_eq!(m.get("b", 0).unwrap().log_start_offset(), 120);
    assert_eq!(m.get("a", 0).unwrap().log_end_offset(), 301);
    m.close().unwrap();
}

#[test]
fn close_writes_every_checkpoint_and_the_marker_and_a_drop_writes_neither() {
    let (_tmp, dir) = populated();
    let marker = std::fs::read_to_string(dir.join(".kafka_cleanshutdown")).unwrap();
    assert_eq!(marker, "{\"version\":0,\"brokerEpoch\":-1}");
    let rp = offsets::decode(&std::fs::read_to_string(dir.join(offsets::RECOVERY_POINTS)).unwrap())
        .unwrap();
    assert_eq!(rp.values().copied().collect::<Vec<_>>(), [300, 300, 300]);
    for name in [
        offsets::LOG_START_OFFSETS,
        offsets::HIGH_WATERMARKS,
        offsets::CLEANER_OFFSETS,
    ] {
        assert!(dir.join(name).exists(), "{name}");
    }
    let m = LogManager::open(&[&dir], config()).unwrap();
    assert!(m.open_report().log_dirs[0].clean_shutdown);
    assert!(
        !dir.join(".kafka_cleanshutdown").exists(),
        "removed at open: a crash now is unclean"
    );
    let log = m.get("a", 0).unwrap();
    append(&log, 5);
    log.flush().unwrap();
    drop(log);
    drop(m);
    assert!(
        !dir.join(".kafka_cleanshutdown").exists(),
        "a drop is a crash"
    );
    let m = LogManager::open(&[&dir], config()).unwrap();
    assert!(!m.open_report().log_dirs[0].clean_shutdown);
    let a0 = m
        .open_report()
        .partitions
        .iter()
        .find(|p| p.partition.to_string() == "a-0")
        .unwrap();
    let o = a0.outcome.as_ref().unwrap();
    assert!(
        !o.recovery.clean_shutdown,
        "its log was abandoned, not closed"
    );
    assert_eq!(o.log_end_offset, 305, "flushed appends survive the drop");
    m.close().unwrap();
}

#[test]
fn partitions_open_on_the_configured_threads_and_each_is_reported() {
    let (_tmp, dir) = populated();
    let seen = std::sync::Mutex::new(Vec::new());
    let cfg = config().with_recovery_threads(3);
    let m = LogManager::open_reporting(oncelog::Environment::default(), &[&dir], cfg, &|p| {
        seen.lock().unwrap().push(p.partition.to_string())
    })
    .unwrap();
    let mut seen = seen.into_inner().unwrap();
    seen.sort();
    assert_eq!(seen, ["a-0", "a-1", "b-0"]);
    assert_eq!(m.open_report().threads, 3);
    assert_eq!(m.open_report().clean(), 3);
    m.close().unwrap();
    let _ = Arc::new(());
}

/// `LogManager::alter_config`: the partition's own file is replaced and its open log takes the
/// settings at once; they are what a reopen finds; a refused change leaves file and log as
/// they were; an unknown partition is refused.
#[test]
fn alter_config_applies_to_the_open_log_and_is_kept_across_a_reopen() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let m = LogManager::open(&[&dir], config()).unwrap();
    let log = m.create("t", 0, PartitionConfig::default()).unwrap();
    append(&log, 3);
    let file = dir.join("t-0").join("oncelog.properties");
    let resolved = m
        .alter_config(
            "t",
            0,
            PartitionConfig::default().with_max_message_bytes(100),
        )
        .unwrap();
    assert_eq!(resolved.log.max_message_bytes, 100);
    assert_eq!(log.config().max_message_bytes, 100, "the open log took it");
    let mut big = BatchBuilder::new();
    big.append(1_700_000_000_000, None, Some(&[b'x'; 200]), &[]);
    assert!(log.append(&big.build().unwrap()).is_err());
    assert_eq!(m.partition_config("t", 0).unwrap(), resolved);
    let written = std::fs::read(&file).unwrap();

    // Refused by the log's validation: nothing changes, not even the file.
    let e = m
        .alter_config("t", 0, PartitionConfig::default().with_segment_bytes(1))
        .unwrap_err();
    assert!(matches!(e, ManagerError::Config(_)), "{e:?}");
    assert_eq!(std::fs::read(&file).unwrap(), written);
    assert_eq!(log.config().max_message_bytes, 100);
    let e = m
        .alter_config("nope", 0, PartitionConfig::default())
        .unwrap_err();
    assert!(matches!(e, ManagerError::UnknownPartition { .. }), "{e:?}");

    m.close().unwrap();
    let m = LogManager::open(&[&dir], config()).unwrap();
    assert_eq!(m.get("t", 0).unwrap().config().max_message_bytes, 100);
    m.close().unwrap();
}
