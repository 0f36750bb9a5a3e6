//! Who may write a log dir's partitions once the manager's logs hold no lock of their own
//! (10,000 partitions must open under `ulimit -n` 1024): the manager's `.lock` keeps other
//! managers out, a standalone `Log::open` of a partition of a held log dir is refused, a
//! manager is refused while a standalone log is open in its log dir, and a partition that a
//! standalone log opened before the log dir had a `.lock` stays offline. And the limit itself:
//! 1,100 partitions (`ONCELOG_FD_PARTITIONS` for more) created, appended to and reopened in a
//! child process whose descriptor limit is 1,024: with a descriptor per partition they could
//! not be.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::tree_digest;
use oncelog::format::BatchBuilder;
use oncelog::{
    AppendOutcome, FlushPolicy, JobIntervals, Log, LogConfig, LogManager, ManagerConfig,
    ManagerError, OpenError, PartitionConfig,
};

fn log_config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(16 << 10)
        .segment_index_bytes(4096)
        .prefault_bytes(0)
        .build()
        .unwrap()
}

fn config() -> ManagerConfig {
    ManagerConfig::default()
        .with_log(log_config())
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
        assert!(matches!(
            log.append(&batch(i)).unwrap(),
            AppendOutcome::Appended(_)
        ));
    }
}

/// A log dir with partitions `a-0` and `a-1`, 20 records each, closed cleanly.
fn populated() -> (tempfile::TempDir, PathBuf) {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let m = LogManager::open(&[&dir], config()).unwrap();
    for p in 0..2 {
        append(&m.create("a", p, PartitionConfig::default()).unwrap(), 20);
    }
    m.close().unwrap();
    (tmp, dir)
}

/// Every descriptor of the process: only for the child of
/// `more_partitions_than_descriptors_open_and_take_appends_under_a_limit_of_1024`, which runs
/// alone.
fn open_fds() -> usize {
    std::fs::read_dir("/proc/self/fd").unwrap().count()
}

#[test]
fn a_managed_partition_holds_no_descriptor_and_creates_no_lock_file() {
    // Under `FlushPolicy::Always` too, where appends are written through the file: the
    // descriptor that takes is held only while the partition appends, and released by the
    // flush job once it is idle (manager_write_descriptors.rs).
    for flush_policy in [FlushPolicy::Manual, FlushPolicy::Always] {
        let (_tmp, dir) = populated();
        let mut config = config();
        config.log.flush_policy = flush_policy;
        // Descriptors on the log dir's files only: the tests beside this one open their own.
        let before = common::descriptors_under(&dir);
        let m = LogManager::open(&[&dir], config).unwrap();
        assert_eq!(m.open_report().opened(), 2);
        // The log dir's `.lock` and nothing per partition.
        assert_eq!(
            common::descriptors_under(&dir),
            before + 1,
            "descriptors held by an open manager ({flush_policy:?})"
        );
        for p in 0..2 {
            let path = dir.join(format!("a-{p}"));
            assert!(!path.join(oncelog::log::LOCK_FILE_NAME).exists());
        }
        append(&m.get("a", 0).unwrap(), 5);
        let writing = usize::from(flush_policy == FlushPolicy::Always);
        assert_eq!(
            common::descriptors_under(&dir),
            before + 1 + writing,
            "after appends ({flush_policy:?})"
        );
        m.run_job(oncelog::Job::Flush).unwrap();
        m.run_job(oncelog::Job::Flush).unwrap();
        assert_eq!(
            common::descriptors_under(&dir),
            before + 1,
            "idle again ({flush_policy:?})"
        );
        m.close().unwrap();
        assert_eq!(common::descriptors_under(&dir), before);
    }
}

#[test]
fn a_standalone_open_of_a_partition_of_a_held_log_dir_is_refused_and_changes_nothing() {
    let (_tmp, dir) = populated();
    let m = LogManager::open(&[&dir], config()).unwrap();
    let part = dir.join("a-0");
    let before = tree_digest(&part);
    match Log::open(&part, log_config()) {
        Err(e @ OpenError::LogDirLocked { .. }) => {
            assert_eq!(e.kind(), "log_dir_locked");
            let OpenError::LogDirLocked {
                dir: d,
                log_dir,
                holder,
            } = &e
            else {
                unreachable!()
            };
            assert_eq!((d, log_dir), (&part, &dir));
            assert!(
                holder.contains(&format!("process {}", std::process::id())),
                "{e}"
            );
            assert!(e.to_string().contains("log manager"), "{e}");
        }
        other => panic!("{other:?}"),
    }
    // A refusal changes nothing but the standalone log's own lock file.
    let mut after = tree_digest(&part);
    after.remove(oncelog::log::LOCK_FILE_NAME);
    assert_eq!(after, before);
    // The manager's partition is untouched and goes on.
    append(&m.get("a", 0).unwrap(), 5);
    assert_eq!(m.get("a", 0).unwrap().log_end_offset(), 25);
    m.close().unwrap();
    // Released: the standalone open works now, and then holds the log dir against managers.
    let log = Log::open(&part, log_config()).unwrap();
    assert_eq!(log.log_end_offset(), 25);
    match LogManager::open(&[&dir], config()) {
        Err(ManagerError::Locked { dir: d, .. }) => assert_eq!(d, dir),
        other => panic!("a manager opened a log dir with a standalone log in it: {other:?}"),
    }
    // Two standalone logs of one log dir do not exclude each other.
    let other = Log::open(dir.join("a-1"), log_config()).unwrap();
    assert_eq!(other.log_end_offset(), 20);
    drop(other);
    log.close().unwrap();
    let m = LogManager::open(&[&dir], config()).unwrap();
    assert_eq!(m.open_report().opened(), 2);
    m.close().unwrap();
}

#[test]
fn a_partition_a_standalone_log_opened_before_the_log_dir_had_a_lock_stays_offline() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    // A directory of partitions written without a manager: no `.lock` to share.
    let log = Log::open(dir.join("a-0"), log_config()).unwrap();
    append(&log, 7);
    Log::open(dir.join("a-1"), log_config())
        .unwrap()
        .close()
        .unwrap();
    let m = LogManager::open(&[&dir], config()).unwrap();
    let r = m.open_report();
    assert_eq!(r.opened(), 1, "the free partition opens");
    let failures: Vec<_> = r.failures().collect();
    assert_eq!(failures.len(), 1);
    assert_eq!(failures[0].0.to_string(), "a-0");
    assert!(
        failures[0].1.to_string().contains("in use by another log"),
        "{}",
        failures[0].1
    );
    // The standalone log goes on, its partition untouched by the manager.
    append(&log, 3);
    assert_eq!(log.log_end_offset(), 10);
    m.close().unwrap();
    log.close().unwrap();
    let m = LogManager::open(&[&dir], config()).unwrap();
    assert_eq!(m.open_report().opened(), 2);
    assert_eq!(m.get("a", 0).unwrap().log_end_offset(), 10);
    m.close().unwrap();
}

const FD_CHILD: &str = "ONCELOG_FD_LIMIT_CHILD_DIR";

fn fd_partitions() -> i32 {
    std::env::var("ONCELOG_FD_PARTITIONS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1100)
}

/// The child of the descriptor-limit test: lowers its own limit to 1,024, then creates,
/// appends to, closes and reopens the partitions.
#[test]
fn fd_limit_child() {
    let Ok(dir) = std::env::var(FD_CHILD) else {
        return;
    };
    let limit = libc::rlimit {
        rlim_cur: 1024,
        rlim_max: 1024,
    };
    // SAFETY: setrlimit reads the struct it is given; no memory is shared.
    assert_eq!(unsafe { libc::setrlimit(libc::RLIMIT_NOFILE, &limit) }, 0);
    let dir = Path::new(&dir);
    let n = fd_partitions();
    let m = LogManager::open(&[dir], config()).unwrap();
    for p in 0..n {
        let log = m.create("many", p, PartitionConfig::default()).unwrap();
        if p % 100 == 0 {
            append(&log, 3);
        }
    }
    println!("CREATED {} fds {}", m.list().len(), open_fds());
    // Under flush always every partition appended writes through the file on a descriptor of
    // its own, within half the limit by default: more partitions than the limit appending at
    // once still take their appends (those past the bound copy into the map).
    let mut always = config();
    always.log.flush_policy = FlushPolicy::Always;
    let m2 = LogManager::open(&[dir.with_extension("always")], always).unwrap();
    for p in 0..n {
        append(
            &m2.create("many", p, PartitionConfig::default()).unwrap(),
            1,
        );
    }
    println!("ALWAYS {} writing {}", m2.list().len(), open_fds());
    m2.run_job(oncelog::Job::Flush).unwrap();
    m2.run_job(oncelog::Job::Flush).unwrap();
    println!("ALWAYS {} idle fds {}", m2.list().len(), open_fds());
    m2.close().unwrap();
    m.close().unwrap();
    let m = LogManager::open(&[dir], config()).unwrap();
    let r = m.open_report();
    assert_eq!((r.opened(), r.clean()), (n as usize, n as usize));
    assert_eq!(r.segments_validated(), 0);
    for p in (0..n).step_by(7) {
        append(&m.get("many", p).unwrap(), 2);
    }
    println!("REOPENED {} fds {}", m.list().len(), open_fds());
    m.close().unwrap();
    let m = LogManager::open(&[dir], config()).unwrap();
    assert_eq!(m.get("many", 700).unwrap().log_end_offset(), 5);
    assert_eq!(m.get("many", 7).unwrap().log_end_offset(), 2);
    m.close().unwrap();
    println!("DONE");
}

#[test]
fn more_partitions_than_descriptors_open_and_take_appends_under_a_limit_of_1024() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("logs");
    let out = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "manager_locks::fd_limit_child",
            "--nocapture",
            "--test-threads",
            "1",
        ])
        .env(FD_CHILD, &dir)
        .output()
        .unwrap();
    let said = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && said.contains("DONE"),
        "the child failed: {said}\n{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let writing = said
        .lines()
        .find_map(|l| l.strip_prefix("ALWAYS ")?.split_once(" writing "))
        .map(|(_, fds)| fds.trim().parse::<usize>().unwrap());
    assert!(
        writing.is_some_and(|fds| (500..1000).contains(&fds)),
        "under flush always, up to half the limit writes through the file: {said}"
    );
    for line in said.lines().filter(|l| l.contains(" fds ")) {
        let fds: usize = line.rsplit(' ').next().unwrap().trim().parse().unwrap();
        assert!(
            fds < 100,
            "an open manager of {} partitions holds {fds} descriptors: {line}",
            fd_partitions()
        );
    }
}
