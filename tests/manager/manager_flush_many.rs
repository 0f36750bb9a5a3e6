//! `LogManager::flush_many` (docs/design.md, "Many partitions"): many partitions made durable
//! by one call, their syncs issued together from the log dir's sync threads, one answer per
//! partition in the order asked; an unknown partition or a failed sync is that entry's error,
//! and the others are made durable all the same. The flush job goes through the same path.

use std::path::Path;

use oncelog::format::BatchBuilder;
use oncelog::io::sim::OpKind;
use oncelog::io::SimFs;
use oncelog::{
    AppendOutcome, Environment, FlushPolicy, Job, JobIntervals, LogConfig, LogManager,
    ManagerConfig, ManagerError, PartitionConfig, TopicPartition,
};

fn config() -> ManagerConfig {
    ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(16 << 10)
                .segment_index_bytes(4096)
                .prefault_bytes(0)
                .flush_policy(FlushPolicy::Manual)
                .build()
                .unwrap(),
        )
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(2)
        .with_sync_threads(4)
}

fn batch(i: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.append(1_700_000_000_000 + i, None, Some(b"value"), &[]);
    b.build().unwrap()
}

/// Threads of this process named as the sync pool names its threads.
fn sync_threads() -> usize {
    std::fs::read_dir("/proc/self/task")
        .unwrap()
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .filter(|name| name.trim() == "oncelog-sync")
        .count()
}

#[test]
fn flush_many_makes_every_partition_durable_and_answers_each_in_order() {
    let tmp = tempfile::tempdir().unwrap();
    let m = LogManager::open(&[tmp.path()], config()).unwrap();
    let requests: Vec<_> = (0..40)
        .map(|p| (TopicPartition::new("t", p), PartitionConfig::default()))
        .collect();
    let logs = m.create_many(&requests).unwrap();
    let mut targets = Vec::new();
    for (p, log) in logs.iter().enumerate() {
        for i in 0..=(p as i64 % 3) {
            let AppendOutcome::Appended(info) = log.append(&batch(i)).unwrap() else {
                panic!("appended")
            };
            if i == p as i64 % 3 {
                targets.push((TopicPartition::new("t", p as i32), info.last_offset + 1));
            }
        }
        assert_eq!(log.recovery_point(), 0, "t-{p} is not durable yet");
    }
    // An unknown partition in the middle, and one partition asked twice.
    targets.insert(17, (TopicPartition::new("missing", 0), 1));
    targets.push((TopicPartition::new("t", 3), i64::MAX));
    let answers = m.flush_many(&targets);
    assert_eq!(answers.len(), targets.len());
    for ((tp, _), answer) in targets.iter().zip(&answers) {
        match (tp.topic.as_str(), answer) {
            ("t", Ok(())) => {}
            ("missing", Err(ManagerError::UnknownPartition { partition })) => {
                assert_eq!(partition, tp)
            }
            other => panic!("{other:?}"),
        }
    }
    for (p, log) in logs.iter().enumerate() {
        assert_eq!(log.recovery_point(), log.log_end_offset(), "t-{p}");
    }
    let threads = sync_threads();
    assert!(
        (1..=4).contains(&threads),
        "the syncs were issued from at most sync_threads threads of the pool: {threads}"
    );
    m.close().unwrap();
}

#[test]
fn a_failed_sync_is_that_partitions_error_and_the_flush_job_reports_it() {
    let fs = SimFs::new();
    let env = Environment::default().with_fs(fs.as_dyn());
    let m = LogManager::open_in(
        env,
        &[Path::new("/data")],
        config().with_flush_messages(Some(1)),
    )
    .unwrap();
    let logs: Vec<_> = (0..6)
        .map(|p| m.create("t", p, PartitionConfig::default()).unwrap())
        .collect();
    for log in &logs {
        log.append(&batch(0)).unwrap();
    }
    // The disk refuses every sync from here: a mapped segment's and a file's.
    fs.fail_from(OpKind::Msync, 1, libc::EIO);
    fs.fail_from(OpKind::SyncData, 1, libc::EIO);
    let targets: Vec<_> = (0..6).map(|p| (TopicPartition::new("t", p), 1)).collect();
    for ((tp, _), answer) in targets.iter().zip(m.flush_many(&targets)) {
        match answer {
            Err(ManagerError::Flush { partition, error }) => {
                assert_eq!(&partition, tp);
                assert!(error.to_string().contains("Input/output error"), "{error}");
            }
            other => panic!("{tp}: {other:?}"),
        }
    }
    // Nothing that failed its sync counts as durable.
    assert!(logs.iter().all(|l| l.recovery_point() == 0));
    // The flush job goes the same way; and a log whose sync failed stays read-only, even once
    // the disk answers again (its page cache can no longer be trusted to reach the disk).
    fs.clear_faults();
    let report = m.run_job(Job::Flush).unwrap();
    assert_eq!(report.acted, 0, "{report:?}");
    assert_eq!(report.failures.len(), 6, "{report:?}");
    assert!(
        report.failures.iter().all(|f| f.contains("read-only")),
        "{report:?}"
    );
    assert!(logs.iter().all(|l| l.recovery_point() == 0));
    drop(logs);
    assert_eq!(m.close().unwrap_err().kind(), "close");
}

#[test]
fn zero_sync_threads_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let err = LogManager::open(&[tmp.path()], config().with_sync_threads(0)).unwrap_err();
    assert_eq!(err.kind(), "zero_sync_threads", "{err}");
    assert!(err.to_string().contains("sync_threads"), "{err}");
    assert_eq!(std::fs::read_dir(tmp.path()).unwrap().count(), 0);
}
