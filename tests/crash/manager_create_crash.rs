//! Power cuts inside a batched partition creation ([`LogManager::create_many`]), at every file
//! operation it makes, each followed by crashes of several seeds: after each,
//!
//! - a batch whose creation returned is there whole: every partition opens, empty, with the
//!   settings it was created with, and takes appends;
//! - of a batch whose creation did not return, each partition is there whole or not at all
//!   (never a directory that does not open, never one without its settings);
//! - the partitions made before the batch are untouched.
//!
//! And the cost the batch is for: no data sync, one sync per log dir that receives partitions.

use crate::common_sim;

use std::path::Path;
use std::sync::Arc;

use common_sim::StepClock;
use oncelog::format::BatchBuilder;
use oncelog::io::sim::OpKind;
use oncelog::io::SimFs;
use oncelog::{
    Environment, JobIntervals, LogConfig, LogManager, ManagerConfig, PartitionConfig,
    TopicPartition,
};

const DIRS: [&str; 2] = ["/data/a", "/data/b"];
/// The `max.message.bytes` the partitions created with settings of their own get.
const OWN_MAX_MESSAGE_BYTES: usize = 40_000;

fn open(fs: &SimFs, clock: &Arc<StepClock>) -> LogManager {
    let env = Environment::default()
        .with_fs(fs.as_dyn())
        .with_clock(clock.clone());
    let dirs: Vec<&Path> = DIRS.iter().map(Path::new).collect();
    let config = ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(4 << 10)
                .segment_index_bytes(512)
                .prefault_bytes(0)
                .build()
                .unwrap(),
        )
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(2);
    LogManager::open_in(env, &dirs, config).unwrap()
}

/// Six partitions over two topics; the odd ones with settings of their own.
fn batch() -> Vec<(TopicPartition, PartitionConfig)> {
    (0..6)
        .map(|i| {
            let config = match i % 2 {
                1 => PartitionConfig::default().with_max_message_bytes(OWN_MAX_MESSAGE_BYTES),
                _ => PartitionConfig::default(),
            };
            (TopicPartition::new(format!("new{}", i % 2), i / 2), config)
        })
        .collect()
}

fn record() -> Vec<u8> {
    let mut b = BatchBuilder::new();
    b.append(1_700_000_000_000, None, Some(b"v"), &[]);
    b.build().unwrap()
}

/// Checks one partition of the batch that the reopened manager lists: whole, empty, with its
/// settings, and writable.
fn check_made(m: &LogManager, tp: &TopicPartition, config: &PartitionConfig, at: &str) {
    let log = m
        .get(&tp.topic, tp.partition)
        .unwrap_or_else(|e| panic!("{at}: {tp} is listed but does not open: {e}"));
    assert_eq!(log.log_end_offset(), 0, "{at}: {tp} is not empty");
    let resolved = m.partition_config(&tp.topic, tp.partition).unwrap();
    let want = config
        .max_message_bytes
        .unwrap_or(m.config().log.max_message_bytes);
    assert_eq!(
        resolved.log.max_message_bytes, want,
        "{at}: {tp} came back without its settings"
    );
    log.append(&record())
        .unwrap_or_else(|e| panic!("{at}: {tp} takes no append: {e}"));
}

#[test]
fn a_power_cut_at_any_operation_of_a_batched_create_keeps_each_partition_whole_or_none() {
    let batch = batch();
    let mut cut_at = 1u64;
    loop {
        for seed in 0..4u64 {
            let at = format!("cut at operation {cut_at}, crash seed {seed}");
            let fs = SimFs::new();
            let clock = StepClock::new();
            let m = open(&fs, &clock);
            let before = TopicPartition::new("old", 0);
            m.create(&before.topic, 0, PartitionConfig::default())
                .unwrap();
            m.get("old", 0).unwrap().append(&record()).unwrap();
            m.get("old", 0).unwrap().flush().unwrap();

            fs.fail_from(OpKind::Any, cut_at, libc::EIO);
            // The logs go before the crash (a crash finds no live map).
            let returned = m.create_many(&batch).map(|logs| logs.len());
            let injected = fs.counters().injected_failures > 0;
            if let Err(e) = &returned {
                assert!(
                    injected,
                    "{at}: the batch failed with no fault injected: {e}"
                );
            }
            drop(m);
            fs.clear_faults();
            fs.crash(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ cut_at);

            let m = open(&fs, &clock);
            if let Some((tp, f)) = m.open_report().failures().next() {
                panic!("{at}: {tp} did not open: {f}");
            }
            assert_eq!(
                m.get("old", 0).unwrap().log_end_offset(),
                1,
                "{at}: old lost"
            );
            let listed: Vec<TopicPartition> = m.list().into_iter().map(|p| p.partition).collect();
            for (tp, config) in &batch {
                match (listed.contains(tp), returned.is_ok()) {
                    (true, _) => check_made(&m, tp, config, &at),
                    (false, true) => panic!("{at}: {tp} is gone, though its batch returned"),
                    (false, false) => {}
                }
            }
            m.close().unwrap();
            if !injected {
                // The cut came after the batch's last operation: every one was covered.
                assert_eq!(returned.ok(), Some(batch.len()));
                eprintln!("{} cut points, 4 crashes each", cut_at - 1);
                return;
            }
        }
        cut_at += 1;
    }
}

#[test]
fn a_batch_of_creates_syncs_each_log_dir_once_and_no_file() {
    let fs = SimFs::new();
    let clock = StepClock::new();
    let m = open(&fs, &clock);
    let requests: Vec<(TopicPartition, PartitionConfig)> = (0..100)
        .map(|p| (TopicPartition::new("many", p), PartitionConfig::default()))
        .collect();
    let before = fs.counters();
    let logs = m.create_many(&requests).unwrap();
    let after = fs.counters();
    assert_eq!(logs.len(), 100);
    assert_eq!(after.data_syncs - before.data_syncs, 0, "a file was synced");
    assert_eq!(after.dir_syncs - before.dir_syncs, DIRS.len() as u64);
    // Kafka's placement: spread evenly over the log dirs.
    let per_dir = |d: &str| m.list().iter().filter(|p| p.dir.starts_with(d)).count();
    assert_eq!((per_dir(DIRS[0]), per_dir(DIRS[1])), (50, 50));
    // A fresh log's appends write no checkpoint; its first flush syncs its directory (so the
    // new segment files' entries are durable before any record is acknowledged), and only
    // the first.
    let before = fs.counters();
    logs[0].append(&record()).unwrap();
    let appended = fs.counters();
    assert_eq!(
        appended.dir_syncs, before.dir_syncs,
        "the append synced a directory"
    );
    assert_eq!(
        appended.data_syncs, before.data_syncs,
        "the append synced a file"
    );
    logs[0].flush().unwrap();
    let flushed = fs.counters();
    assert_eq!(flushed.dir_syncs, appended.dir_syncs + 1, "the first flush");
    logs[0].append(&record()).unwrap();
    logs[0].flush().unwrap();
    assert_eq!(
        fs.counters().dir_syncs,
        flushed.dir_syncs,
        "the second flush"
    );
    m.close().unwrap();
}

#[test]
fn a_batch_with_a_partition_that_exists_or_comes_twice_creates_nothing() {
    let fs = SimFs::new();
    let clock = StepClock::new();
    let m = open(&fs, &clock);
    m.create("t", 1, PartitionConfig::default()).unwrap();
    let tp = |p| (TopicPartition::new("t", p), PartitionConfig::default());
    let exists = m.create_many(&[tp(0), tp(1)]).unwrap_err();
    assert_eq!(exists.kind(), "partition_exists");
    let twice = m.create_many(&[tp(2), tp(2)]).unwrap_err();
    assert_eq!(twice.kind(), "partition_exists");
    let collides = m
        .create_many(&[
            tp(3),
            (TopicPartition::new("a.b", 0), PartitionConfig::default()),
            (TopicPartition::new("a_b", 0), PartitionConfig::default()),
        ])
        .unwrap_err();
    assert_eq!(collides.kind(), "topic_collision");
    let listed: Vec<TopicPartition> = m.list().into_iter().map(|p| p.partition).collect();
    assert_eq!(listed, vec![TopicPartition::new("t", 1)]);
    m.close().unwrap();
}

#[test]
fn a_flushed_append_to_a_partition_of_a_batch_survives_a_crash() {
    for seed in 0..32u64 {
        let fs = SimFs::new();
        let clock = StepClock::new();
        let m = open(&fs, &clock);
        let logs = m.create_many(&batch()).unwrap();
        // The segment files the fresh logs made are no entries of a synced directory yet: the
        // first change must make them so, or the crash takes the acknowledged record with them.
        logs[0].append(&record()).unwrap();
        logs[0].flush().unwrap();
        drop(logs);
        drop(m);
        fs.crash(seed);
        let m = open(&fs, &clock);
        let (tp, _) = &batch()[0];
        let end = m.get(&tp.topic, tp.partition).unwrap().log_end_offset();
        assert_eq!(end, 1, "seed {seed}: the flushed record is gone");
        m.close().unwrap();
    }
}
