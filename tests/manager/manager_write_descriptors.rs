//! A managed partition under `FlushPolicy::Always` writes its appends through the file, as a
//! standalone log does (docs/design.md, "Append writes"), on a descriptor it holds only while
//! it appends: taken at its first append, given back when the flush job finds it idle, and
//! never more of them than `ManagerConfig::write_descriptors` (past the bound, appends are
//! copied into the map). Whichever way a batch went, it is the same batch, durable, and read
//! back after a reopen.

use std::path::Path;
use std::sync::Arc;

use oncelog::{
    AppendOutcome, FlushPolicy, Job, JobIntervals, Log, LogConfig, LogManager, ManagerConfig,
    PartitionConfig, TopicPartition,
};

fn config(flush_policy: FlushPolicy, write_descriptors: usize) -> ManagerConfig {
    ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(64 << 10)
                .segment_index_bytes(4096)
                .prefault_bytes(0)
                .flush_policy(flush_policy)
                .build()
                .unwrap(),
        )
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(2)
        .with_write_descriptors(write_descriptors)
}

fn create(m: &LogManager, partitions: i32) -> Vec<Arc<Log>> {
    let requests: Vec<_> = (0..partitions)
        .map(|p| (TopicPartition::new("w", p), PartitionConfig::default()))
        .collect();
    m.create_many(&requests).unwrap()
}

/// Appends one batch of `n` records to `log`, and checks it is durable when answered.
fn append(log: &Log, n: usize) {
    let b = crate::common::batch(n, 1_700_000_000_000, 200);
    let AppendOutcome::Appended(info) = log.append(&b).unwrap() else {
        panic!("appended")
    };
    assert!(
        log.recovery_point() > info.last_offset,
        "durable when answered"
    );
}

/// Every partition's batches, as read back.
fn contents(m: &LogManager, partitions: i32) -> Vec<Vec<Vec<u8>>> {
    (0..partitions)
        .map(|p| crate::common::read_all(&m.get("w", p).unwrap(), 1 << 20))
        .collect()
}

/// Descriptors on the log dir's files besides its `.lock`.
fn held(dir: &Path) -> usize {
    crate::common::descriptors_under(dir) - 1
}

#[test]
fn a_partition_holds_its_write_descriptor_only_while_it_appends() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let m = LogManager::open(&[&dir], config(FlushPolicy::Always, 100)).unwrap();
    let logs = create(&m, 6);
    assert_eq!(held(&dir), 0, "created partitions hold none");
    for log in &logs[..3] {
        append(log, 3);
    }
    assert_eq!(held(&dir), 3, "one for each partition that appended");
    // The flush job releases a descriptor only after a whole interval without an append.
    m.run_job(Job::Flush).unwrap();
    assert_eq!(held(&dir), 3, "each appended since the last run");
    append(&logs[0], 2);
    m.run_job(Job::Flush).unwrap();
    assert_eq!(
        held(&dir),
        1,
        "only the partition that appended keeps its own"
    );
    m.run_job(Job::Flush).unwrap();
    assert_eq!(held(&dir), 0, "idle partitions hold none");
    // Taken again by the next append, and the batches are whole whichever way they went.
    append(&logs[1], 4);
    assert_eq!(held(&dir), 1);
    let before = contents(&m, 6);
    assert_eq!(
        before.iter().map(Vec::len).collect::<Vec<_>>(),
        [2, 2, 1, 0, 0, 0]
    );
    drop(logs);
    m.close().unwrap();
    assert_eq!(
        crate::common::descriptors_under(&dir),
        0,
        "closed: none at all"
    );
    let m = LogManager::open(&[&dir], config(FlushPolicy::Always, 100)).unwrap();
    assert_eq!(
        held(&dir),
        0,
        "an opened partition holds none until it appends"
    );
    assert_eq!(contents(&m, 6), before);
    m.close().unwrap();
}

#[test]
fn past_the_bound_appends_are_copied_into_the_map_and_nothing_differs() {
    // 0: every append copied into the map; 2: two partitions at a time write through the file;
    // 100: all of them.
    let mut seen = Vec::new();
    for bound in [0, 2, 100] {
        let tmp = tempfile::tempdir().unwrap();
        let dir = tmp.path().join("logs");
        let m = LogManager::open(&[&dir], config(FlushPolicy::Always, bound)).unwrap();
        let logs = create(&m, 8);
        for round in 0..4 {
            for (p, log) in logs.iter().enumerate() {
                append(log, 1 + (p + round) % 3);
                assert!(held(&dir) <= bound.min(8), "bound {bound}: {}", held(&dir));
            }
            if round == 1 {
                // Released from all, then taken by others: the bound is shared.
                m.run_job(Job::Flush).unwrap();
                m.run_job(Job::Flush).unwrap();
                assert_eq!(held(&dir), 0, "bound {bound}");
            }
        }
        assert_eq!(held(&dir), bound.min(8), "bound {bound}");
        let written = contents(&m, 8);
        drop(logs);
        // A crash as far as the disk is concerned: what was acknowledged is durable.
        drop(m);
        let m = LogManager::open(&[&dir], config(FlushPolicy::Always, bound)).unwrap();
        assert_eq!(contents(&m, 8), written, "bound {bound}");
        for p in 0..8 {
            let records: i64 = (0..4).map(|round| 1 + (p as i64 + round) % 3).sum();
            assert_eq!(
                m.get("w", p).unwrap().log_end_offset(),
                records,
                "bound {bound}"
            );
        }
        m.close().unwrap();
        seen.push(
            written
                .iter()
                .map(|p| p.iter().map(Vec::len).sum::<usize>())
                .collect::<Vec<_>>(),
        );
    }
    assert!(
        seen.windows(2).all(|w| w[0] == w[1]),
        "the same bytes whatever the bound: {seen:?}"
    );
}

#[test]
fn partitions_not_synced_by_every_append_never_hold_a_write_descriptor() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let m = LogManager::open(&[&dir], config(FlushPolicy::Manual, 100)).unwrap();
    let logs = create(&m, 4);
    for log in &logs {
        let b = crate::common::batch(2, 1_700_000_000_000, 100);
        log.append(&b).unwrap();
    }
    assert_eq!(held(&dir), 0);
    drop(logs);
    m.close().unwrap();
}
