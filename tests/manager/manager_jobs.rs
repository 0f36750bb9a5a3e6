//! The manager's background jobs: each one run by hand on a clock the test moves (what it
//! does and when), and all of them on their threads, stopped cleanly by `close`.

use crate::common;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{env_with, TestClock};
use oncelog::format::BatchBuilder;
use oncelog::manager::offsets;
use oncelog::{
    AppendOutcome, CleanRequest, Cleaned, Cleaner, CleanupPolicy, Job, JobIntervals, Log,
    LogConfig, LogManager, ManagerConfig, PartitionConfig, TopicPartition,
};

const T0: i64 = 1_700_000_000_000;
const DAY: i64 = 24 * 60 * 60 * 1000;

fn config() -> ManagerConfig {
    ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(8 << 10)
                .segment_index_bytes(4096)
                .prefault_bytes(0)
                .build()
                .unwrap(),
        )
        .with_jobs(JobIntervals::none())
        .with_recovery_threads(2)
}

fn open(clock: &Arc<TestClock>, cfg: ManagerConfig) -> (tempfile::TempDir, PathBuf, LogManager) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let m = LogManager::open_in(env_with(clock.clone()), &[&dir], cfg).unwrap();
    (tmp, dir, m)
}

/// `n` batches of one 100-byte record keyed `k0`..`k4` (a compacted log refuses keyless
/// records), timestamped from `T0`; idempotent for `producer`.
fn append(log: &Log, n: i64, producer: Option<i64>) {
    for i in 0..n {
        let seq = (log.log_end_offset()) as i32;
        let mut b = match producer {
            Some(pid) => BatchBuilder::new().producer(pid, 0, seq),
            None => BatchBuilder::new(),
        };
        let key = format!("k{}", i % 5);
        b.append(T0 + i, Some(key.as_bytes()), Some(&[b'v'; 100]), &[]);
        assert!(matches!(
            log.append(&b.build().unwrap()).unwrap(),
            AppendOutcome::Appended(_)
        ));
    }
}

#[test]
fn the_flush_job_flushes_by_message_count_and_by_age_without_the_appender_waiting() {
    let clock = TestClock::new(T0);
    let (_tmp, _dir, m) = open(&clock, config());
    let by_count = m
        .create(
            "c",
            0,
            PartitionConfig::default().with_flush_messages(Some(10)),
        )
        .unwrap();
    let by_age = m
        .create(
            "t",
            0,
            PartitionConfig::default().with_flush_ms(Some(1_000)),
        )
        .unwrap();
    let never = m.create("n", 0, PartitionConfig::default()).unwrap();
    append(&by_count, 9, None);
    append(&by_age, 3, None);
    append(&never, 3, None);
    assert_eq!(m.run_job(Job::Flush).unwrap().acted, 0);
    assert_eq!((by_count.recovery_point(), by_age.recovery_point()), (0, 0));
    append(&by_count, 1, None);
    clock.set(T0 + 999);
    let r = m.run_job(Job::Flush).unwrap();
    assert_eq!(
        (r.visited, r.acted),
        (2, 1),
        "the partition with neither setting is not visited"
    );
    assert_eq!(
        (by_count.recovery_point(), by_age.recovery_point()),
        (10, 0)
    );
    clock.set(T0 + 1_000);
    assert_eq!(m.run_job(Job::Flush).unwrap().acted, 1);
    assert_eq!(by_age.recovery_point(), 3);
    assert_eq!(
        never.recovery_point(),
        0,
        "Kafka's default: the page cache decides"
    );
    let stats = m.job_stats();
    assert_eq!((stats[&Job::Flush].runs, stats[&Job::Flush].acted), (3, 2));
    m.close().unwrap();
}

#[test]
fn the_checkpoint_jobs_write_recovery_points_log_starts_and_high_watermarks() {
    let clock = TestClock::new(T0);
    let (_tmp, dir, m) = open(&clock, config());
    let log = m.create("a", 0, PartitionConfig::default()).unwrap();
    append(&log, 200, None);
    log.flush().unwrap();
    log.delete_records(150).unwrap();
    let read = |name| {
        offsets::decode(&std::fs::read_to_string(dir.join(name)).unwrap_or_default()).unwrap()
    };
    let tp = TopicPartition::new("a", 0);
    assert_eq!(m.run_job(Job::Checkpoints).unwrap().acted, 2);
    assert_eq!(read(offsets::RECOVERY_POINTS)[&tp], 200);
    assert_eq!(read(offsets::LOG_START_OFFSETS)[&tp], 150);
    assert!(
        read(offsets::HIGH_WATERMARKS).is_empty(),
        "not written by this job"
    );
    assert_eq!(m.run_job(Job::HighWatermarks).unwrap().acted, 2);
    assert_eq!(read(offsets::HIGH_WATERMARKS)[&tp], 200);
    m.close().unwrap();
}

#[test]
fn retention_then_deletion_remove_old_segments_and_their_files_after_the_delay() {
    let clock = TestClock::new(T0);
    let (_tmp, dir, m) = open(&clock, config());
    let log = m.create("old", 0, PartitionConfig::default()).unwrap();
    let kept = m
        .create(
            "kept",
            0,
            PartitionConfig::default().with_retention_ms(None),
        )
        .unwrap();
    append(&log, 300, None);
    append(&kept, 300, None);
    log.flush().unwrap();
    kept.flush().unwrap();
    let segments = log.maintenance().segment_count();
    assert!(segments > 3, "{segments}");
    clock.set(T0 + 8 * DAY);
    let r = m.run_job(Job::Retention).unwrap();
    assert_eq!(r.acted, segments, "every segment is past 7 days");
    assert_eq!(log.log_start_offset(), 300);
    assert_eq!(kept.log_start_offset(), 0, "retention.ms=-1");
    let deleted = || {
        std::fs::read_dir(dir.join("old-0"))
            .unwrap()
            .filter(|e| {
                e.as_ref()
                    .unwrap()
                    .file_name()
                    .to_string_lossy()
                    .ends_with(".deleted")
            })
            .count()
    };
    assert!(deleted() > 0);
    m.run_job(Job::Deletion).unwrap();
    assert!(deleted() > 0, "file.delete.delay.ms is not over");
    clock.set(T0 + 8 * DAY + 60_000);
    m.run_job(Job::Deletion).unwrap();
    assert_eq!(deleted(), 0);
    m.close().unwrap();
}

#[test]
fn producer_expiry_and_snapshots_by_replay_budget() {
    let clock = TestClock::new(T0);
    let cfg = config().with_replay_budget_bytes(4 << 10);
    let (_tmp, dir, m) = open(&clock, cfg);
    let log = m
        .create(
            "p",
            0,
            PartitionConfig::default().with_segment_bytes(1 << 20),
        )
        .unwrap();
    append(&log, 20, Some(7));
    assert_eq!(
        m.run_job(Job::Snapshots).unwrap().acted,
        0,
        "under the budget"
    );
    append(&log, 30, Some(7));
    assert_eq!(m.run_job(Job::Snapshots).unwrap().acted, 1);
    assert!(dir.join("p-0/00000000000000000050.snapshot").exists());
    assert_eq!(
        log.recovery_point(),
        50,
        "the snapshot is made durable with the log"
    );
    assert_eq!(m.run_job(Job::ProducerExpiry).unwrap().acted, 0);
    clock.set(T0 + DAY);
    assert_eq!(m.run_job(Job::ProducerExpiry).unwrap().acted, 1);
    assert!(log.producer(7).is_none());
    m.close().unwrap();
}

/// Threads of this process whose name says they run a manager job.
fn job_threads() -> Vec<String> {
    let mut names = Vec::new();
    for task in std::fs::read_dir("/proc/self/task").unwrap() {
        let comm = task.unwrap().path().join("comm");
        let name = std::fs::read_to_string(comm)
            .unwrap_or_default()
            .trim()
            .to_string();
        // The prefault thread serves every log of the process and outlives managers; sync
        // threads serve flushes (any manager's of the tests running beside this one), not jobs.
        let not_a_job = name.starts_with("oncelog-prefau") || name.starts_with("oncelog-sync");
        if name.starts_with("oncelog-") && !not_a_job {
            names.push(name);
        }
    }
    names
}

#[test]
fn every_job_runs_on_its_thread_and_close_stops_them_all() {
    let every = Some(Duration::from_millis(5));
    let cfg = config()
        .with_jobs(common::every_job(every))
        .with_flush_messages(Some(1));
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let m = LogManager::open(&[&dir], cfg).unwrap();
    let log = m.create("live", 0, PartitionConfig::default()).unwrap();
    append(&log, 50, Some(3));
    // Wait (without asserting on time) until every job thread has named itself (a thread sets
    // its name once it runs) and every job has run with the partition there.
    let deadline = Instant::now() + Duration::from_secs(60);
    while job_threads().len() < Job::ALL.len() {
        assert!(
            Instant::now() < deadline,
            "job threads: {:?}",
            job_threads()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(job_threads().len(), Job::ALL.len(), "{:?}", job_threads());
    while m.job_stats().len() < Job::ALL.len() || log.recovery_point() < 50 {
        assert!(
            Instant::now() < deadline,
            "jobs did not run: {:?}",
            m.job_stats()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    assert!(
        m.job_stats().values().all(|s| s.failures == 0),
        "{:?}",
        m.job_stats()
    );
    drop(log);
    m.close().unwrap();
    assert_eq!(
        job_threads(),
        Vec::<String>::new(),
        "close joined every job thread"
    );
    assert!(dir.join(".kafka_cleanshutdown").exists());
}

fn cleaner_offsets(dir: &Path) -> offsets::Offsets {
    let text = std::fs::read_to_string(dir.join(offsets::CLEANER_OFFSETS)).unwrap();
    offsets::decode(&text).unwrap()
}

/// A cleaner that records what it was asked and answers what the test set.
#[derive(Default)]
struct FakeCleaner {
    asked: Mutex<Vec<(String, CleanupPolicy, i64)>>,
    /// What to answer for each partition (topic name): `None` answers an error.
    answers: Mutex<BTreeMap<String, Option<i64>>>,
}

impl Cleaner for FakeCleaner {
    fn clean(&self, log: &Log, request: &CleanRequest<'_>) -> Result<Cleaned, String> {
        let topic = request.partition.topic.clone();
        self.asked
            .lock()
            .unwrap()
            .push((topic.clone(), request.policy, request.from));
        assert!(request.throttle.pay(100), "the manager is not closing");
        let answer = self.answers.lock().unwrap().get(&topic).copied();
        match answer {
            Some(Some(to)) => Ok(Cleaned::new(to, 100)),
            Some(None) => Err(format!("cannot clean {topic}")),
            None => Ok(Cleaned::new(log.log_end_offset(), 0)),
        }
    }
}

#[test]
fn the_default_cleaner_compacts_partitions_that_are_due_and_records_how_far() {
    let clock = TestClock::new(T0);
    let (_tmp, dir, m) = open(&clock, config());
    let compact = m
        .create(
            "compact",
            0,
            PartitionConfig::default().with_cleanup_policy(CleanupPolicy::Compact),
        )
        .unwrap();
    let deleted = m.create("delete", 0, PartitionConfig::default()).unwrap();
    // 400 records over 5 keys in 8 KiB segments: every sealed segment is dirty.
    for log in [&compact, &deleted] {
        append(log, 400, None);
        log.flush().unwrap();
    }
    let sealed_end = compact.log_end_offset();
    let before = compact.size_bytes();
    let r = m.run_job(Job::Cleaning).unwrap();
    assert_eq!((r.visited, r.acted), (1, 1), "{r:?}");
    assert!(r.failures.is_empty(), "{r:?}");
    assert!(compact.size_bytes() < before / 2, "compacted");
    assert_eq!(deleted.log_end_offset(), 400);
    // Offsets stay; every key keeps at least its latest value.
    assert_eq!(compact.log_end_offset(), sealed_end);
    m.run_job(Job::HighWatermarks).unwrap();
    let entries: Vec<(TopicPartition, i64)> = cleaner_offsets(&dir).into_iter().collect();
    assert_eq!(entries.len(), 1, "{entries:?}");
    assert_eq!(entries[0].0, TopicPartition::new("compact", 0));
    assert!(
        entries[0].1 > 0 && entries[0].1 <= sealed_end,
        "{entries:?}"
    );
    // A second run finds nothing due and acts on nothing.
    let r = m.run_job(Job::Cleaning).unwrap();
    assert_eq!((r.visited, r.acted), (1, 0), "{r:?}");
    m.close().unwrap();
}

#[test]
fn the_cleaning_job_runs_the_given_cleaner_on_compacted_partitions_and_moves_their_checkpoint() {
    let clock = TestClock::new(T0);
    let (_tmp, dir, m) = open(&clock, config());
    let policy = |p| PartitionConfig::default().with_cleanup_policy(p);
    let compact = m
        .create("compact", 0, policy(CleanupPolicy::Compact))
        .unwrap();
    let both = m
        .create("both", 0, policy(CleanupPolicy::CompactDelete))
        .unwrap();
    let deleted = m
        .create("delete", 0, policy(CleanupPolicy::Delete))
        .unwrap();
    for log in [&compact, &both, &deleted] {
        append(log, 20, None);
    }

    let cleaner = Arc::new(FakeCleaner::default());
    m.set_cleaner(cleaner.clone());
    cleaner.answers.lock().unwrap().extend([
        ("compact".to_string(), Some(12)),
        ("both".to_string(), None),
    ]);
    let r = m.run_job(Job::Cleaning).unwrap();
    assert_eq!((r.visited, r.acted), (2, 1), "{r:?}");
    assert_eq!(r.failures, vec!["both-0: cannot clean both".to_string()]);
    // Only the compacted partitions, from their log start (no checkpoint entry yet).
    assert_eq!(
        *cleaner.asked.lock().unwrap(),
        vec![
            ("both".to_string(), CleanupPolicy::CompactDelete, 0),
            ("compact".to_string(), CleanupPolicy::Compact, 0),
        ]
    );
    // The entry moved for the partition cleaned, and is what the checkpoint job writes.
    m.run_job(Job::HighWatermarks).unwrap();
    let written = cleaner_offsets(&dir);
    let entries: Vec<(TopicPartition, i64)> = written.into_iter().collect();
    assert_eq!(entries, vec![(TopicPartition::new("compact", 0), 12)]);

    // The next run starts where the last one stopped; an answer outside the log is refused
    // and moves nothing.
    cleaner.asked.lock().unwrap().clear();
    cleaner.answers.lock().unwrap().extend([
        ("compact".to_string(), Some(21)),
        ("both".to_string(), Some(-1)),
    ]);
    let r = m.run_job(Job::Cleaning).unwrap();
    assert_eq!(r.acted, 0, "{r:?}");
    assert_eq!(r.failures.len(), 2, "{r:?}");
    assert!(
        r.failures[1].contains("compact-0") && r.failures[1].contains("outside 12..=20"),
        "{r:?}"
    );
    assert_eq!(cleaner.asked.lock().unwrap()[1].2, 12);
    m.close().unwrap();
    let written = cleaner_offsets(&dir);
    assert_eq!(written.get(&TopicPartition::new("compact", 0)), Some(&12));

    // Reopened, the entry read back is where cleaning starts.
    let m = LogManager::open_in(env_with(clock.clone()), &[&dir], config()).unwrap();
    let cleaner = Arc::new(FakeCleaner::default());
    m.set_cleaner(cleaner.clone());
    m.run_job(Job::Cleaning).unwrap();
    let asked = cleaner.asked.lock().unwrap().clone();
    assert_eq!(
        asked[1],
        ("compact".to_string(), CleanupPolicy::Compact, 12)
    );
    m.close().unwrap();
}

#[test]
fn the_cleaner_offset_is_the_logs_own_file_and_a_log_dir_entry_still_counts_without_one() {
    let clock = TestClock::new(T0);
    let (_tmp, dir, m) = open(&clock, config());
    let policy = PartitionConfig::default().with_cleanup_policy(CleanupPolicy::Compact);
    let compact = m.create("compact", 0, policy).unwrap();
    append(&compact, 20, None);
    let tp = TopicPartition::new("compact", 0);
    let own = dir.join("compact-0").join(oncelog::CLEANER_OFFSET_FILE);
    let cleaner = Arc::new(FakeCleaner::default());
    m.set_cleaner(cleaner.clone());
    cleaner
        .answers
        .lock()
        .unwrap()
        .insert("compact".into(), Some(12));
    m.run_job(Job::Cleaning).unwrap();
    // The answer is in the log's own file at once; the log dir's file is written from it.
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "0\n1\n12\n");
    m.run_job(Job::HighWatermarks).unwrap();
    assert_eq!(cleaner_offsets(&dir).get(&tp), Some(&12));
    m.close().unwrap();

    // A directory an older manager (or Kafka) wrote: only the log dir's entry. Cleaning starts
    // there, the entry is written back as it was, and the next answer goes to the log's file.
    std::fs::remove_file(&own).unwrap();
    let m = LogManager::open_in(env_with(clock.clone()), &[&dir], config()).unwrap();
    let cleaner = Arc::new(FakeCleaner::default());
    m.set_cleaner(cleaner.clone());
    m.run_job(Job::HighWatermarks).unwrap();
    assert_eq!(cleaner_offsets(&dir).get(&tp), Some(&12));
    cleaner
        .answers
        .lock()
        .unwrap()
        .insert("compact".into(), Some(15));
    m.run_job(Job::Cleaning).unwrap();
    assert_eq!(cleaner.asked.lock().unwrap()[0].2, 12);
    assert_eq!(std::fs::read_to_string(&own).unwrap(), "0\n1\n15\n");
    m.close().unwrap();
    assert_eq!(cleaner_offsets(&dir).get(&tp), Some(&15));

    // The log's file wins over a log dir entry that says otherwise.
    std::fs::write(dir.join(offsets::CLEANER_OFFSETS), "0\n1\ncompact 0 3\n").unwrap();
    let m = LogManager::open_in(env_with(clock.clone()), &[&dir], config()).unwrap();
    let cleaner = Arc::new(FakeCleaner::default());
    m.set_cleaner(cleaner.clone());
    m.run_job(Job::Cleaning).unwrap();
    assert_eq!(cleaner.asked.lock().unwrap()[0].2, 15);
    m.close().unwrap();
}

#[test]
fn a_cleaner_rate_of_zero_is_refused() {
    let tmp = tempfile::tempdir().unwrap();
    let err = LogManager::open(
        &[tmp.path().join("logs")],
        config().with_cleaner_bytes_per_second(Some(0)),
    )
    .unwrap_err();
    assert_eq!(err.kind(), "zero_cleaner_rate", "{err}");
    assert!(
        !tmp.path().join("logs").exists(),
        "a refused open changes nothing"
    );
}
