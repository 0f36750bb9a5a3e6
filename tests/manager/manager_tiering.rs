//! The tiering job (docs/design.md, "Tiered storage", "In the manager"): a manager with an
//! object store uploads its partitions' sealed segments and applies local retention; a failing
//! store is a failure in the job's report, its statistics and the partition's status, retried
//! after a backoff that doubles; the byte rate bounds a run; compacted partitions stay local;
//! a partition's own `remote.storage.enable` and `local.retention.*` win over the manager's.
//! Each run reconciles a truncated log with its manifest, finishes a DeleteRecords a crash cut,
//! and removes orphaned objects after their grace.

use crate::common;
use crate::common_tier::{MemStore, Strike};

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{env_with, TestClock};
use oncelog::format::BatchBuilder;
use oncelog::tier::{self, LocalRetention};
use oncelog::{
    CleanupPolicy, Job, JobIntervals, Log, LogConfig, LogManager, ManagerConfig, PartitionConfig,
    Tiering,
};

const T0: i64 = 1_700_000_000_000;

fn config() -> ManagerConfig {
    ManagerConfig::default()
        .with_log(
            LogConfig::builder()
                .segment_bytes(8 << 10)
                .file_delete_delay_ms(0)
                .prefault_bytes(0)
                .build()
                .unwrap(),
        )
        .with_jobs(JobIntervals::none())
}

fn fill(log: &Log, n: i64) {
    for i in 0..n {
        let mut b = BatchBuilder::new().producer(5, 0, i as i32);
        b.append(T0 + i, Some(b"k"), Some(&[b'v'; 300]), &[]);
        log.append(&b.build().unwrap()).unwrap();
    }
    log.flush().unwrap();
}

fn open(dir: &std::path::Path, clock: &Arc<TestClock>) -> LogManager {
    LogManager::open_in(env_with(clock.clone()), &[dir], config()).unwrap()
}

#[test]
fn the_tiering_job_uploads_every_partition_and_applies_local_retention() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let m = open(tmp.path(), &clock);
    let a = m.create("orders", 0, PartitionConfig::default()).unwrap();
    let b = m.create("orders", 1, PartitionConfig::default()).unwrap();
    fill(&a, 80);
    fill(&b, 40);
    // Without a store the job does nothing.
    let r = m.run_job(Job::Tiering).unwrap();
    assert_eq!((r.visited, r.acted), (0, 0));
    let store = Arc::new(MemStore::new());
    let e = m
        .set_tiering(Tiering::new(store.clone(), "bad//root"))
        .unwrap_err();
    assert_eq!(e.kind(), "bad_partition_prefix");
    m.set_tiering(Tiering::new(store.clone(), "cluster-1"))
        .unwrap();
    let r = m.run_job(Job::Tiering).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    let (ua, ub) = (tier::uploadable_segments(&a), tier::uploadable_segments(&b));
    assert_eq!(r.acted, ua.len() + ub.len());
    for (log, p, up) in [(&a, 0, &ua), (&b, 1, &ub)] {
        let prefix = format!("cluster-1/orders-{p}");
        let manifest = tier::read_manifest(store.as_ref(), &prefix)
            .unwrap()
            .unwrap();
        assert_eq!(manifest.segments.len(), up.len());
        let s = m.tier_status("orders", p).unwrap();
        assert_eq!(s.segments_uploaded, up.len() as u64);
        assert_eq!(s.remote_end, up.last().map(|u| u.1));
        assert_eq!(s.consecutive_failures, 0);
        assert_eq!(log.log_start_offset(), 0);
    }
    // A second run finds nothing new.
    let r = m.run_job(Job::Tiering).unwrap();
    assert_eq!((r.visited, r.acted), (2, 0));
    // Local retention: the local copies go, the store answers below the local start.
    m.set_tiering(
        Tiering::new(store.clone(), "cluster-1")
            .with_local_retention(LocalRetention::new(None, Some(0))),
    )
    .unwrap();
    let before = a.read(0, 1 << 20).unwrap();
    let r = m.run_job(Job::Tiering).unwrap();
    assert_eq!(r.acted, ua.len() + ub.len());
    assert_eq!(a.log_start_offset(), ua.last().unwrap().1);
    let s = m.tier_status("orders", 0).unwrap();
    assert_eq!(s.local_segments_deleted, ua.len() as u64);
    let back = tier::read(&a, store.as_ref(), "cluster-1/orders-0", 0, 1 << 20).unwrap();
    assert_eq!(back, before);
    let stats = m.job_stats()[&Job::Tiering].clone();
    assert_eq!((stats.runs, stats.failures), (4, 0));
    m.close().unwrap();
}

#[test]
fn a_failing_store_is_reported_and_retried_after_a_doubling_backoff() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let m = open(tmp.path(), &clock);
    let log = m.create("t", 0, PartitionConfig::default()).unwrap();
    fill(&log, 60);
    let store = Arc::new(MemStore::new());
    m.set_tiering(
        Tiering::new(store.clone(), "r")
            .with_backoff(Duration::from_secs(2))
            .with_max_backoff(Duration::from_secs(5)),
    )
    .unwrap();
    store.fail("put", 1, Strike::Before);
    let r = m.run_job(Job::Tiering).unwrap();
    assert_eq!(r.failures.len(), 1, "{r:?}");
    assert!(
        r.failures[0].starts_with("t-0: put .log of segment 0"),
        "{:?}",
        r.failures
    );
    let s = m.tier_status("t", 0).unwrap();
    assert_eq!(s.consecutive_failures, 1);
    assert_eq!(s.retry_at_ms, Some(T0 + 2_000));
    assert!(
        s.last_failure.as_deref().unwrap().starts_with("remote: "),
        "{s:?}"
    );
    let stats = m.job_stats()[&Job::Tiering].clone();
    assert_eq!(stats.failures, 1);
    assert!(stats.last_failure.unwrap().contains("injected"));
    // Within the backoff the partition is left alone.
    clock.set(T0 + 1_999);
    let r = m.run_job(Job::Tiering).unwrap();
    assert_eq!((r.visited, r.failures.len()), (0, 0));
    // It fails again: the wait doubles, then stops at its bound.
    store.fail("list", 1, Strike::Before);
    clock.set(T0 + 2_000);
    m.run_job(Job::Tiering).unwrap();
    let s = m.tier_status("t", 0).unwrap();
    assert_eq!(
        (s.consecutive_failures, s.retry_at_ms),
        (2, Some(T0 + 6_000))
    );
    store.fail("list", 1, Strike::Before);
    clock.set(T0 + 6_000);
    m.run_job(Job::Tiering).unwrap();
    let s = m.tier_status("t", 0).unwrap();
    assert_eq!(
        (s.consecutive_failures, s.retry_at_ms),
        (3, Some(T0 + 11_000))
    );
    // Once the store answers, the partition is uploaded and its status clear.
    clock.set(T0 + 11_000);
    let r = m.run_job(Job::Tiering).unwrap();
    assert!(r.failures.is_empty(), "{r:?}");
    let s = m.tier_status("t", 0).unwrap();
    assert_eq!((s.consecutive_failures, s.retry_at_ms), (0, None));
    assert_eq!(
        s.segments_uploaded,
        tier::uploadable_segments(&log).len() as u64
    );
    // The last failure stays for whoever looks.
    assert!(s.last_failure.is_some());
    m.close().unwrap();
}

#[test]
fn compacted_partitions_stay_local() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let m = open(tmp.path(), &clock);
    let log = m
        .create(
            "c",
            0,
            PartitionConfig::default().with_cleanup_policy(CleanupPolicy::Compact),
        )
        .unwrap();
    fill(&log, 60);
    let store = Arc::new(MemStore::new());
    m.set_tiering(Tiering::new(store.clone(), "r")).unwrap();
    let r = m.run_job(Job::Tiering).unwrap();
    assert_eq!((r.visited, r.acted, r.failures.len()), (0, 0, 0));
    assert!(store.keys().is_empty());
    assert!(m.tier_status("c", 0).is_none());
    m.close().unwrap();
}

/// Kafka's per-topic settings: `remote.storage.enable=false` keeps a partition out of the
/// store; a partition's own `local.retention.*` wins over the manager's, in both directions
/// (a limit where the manager has none, none where it has one), and an altered one applies at
/// the next run.
#[test]
fn a_partitions_own_tiering_settings_win_over_the_managers() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let m = open(tmp.path(), &clock);
    let off = m
        .create(
            "t",
            0,
            PartitionConfig::default().with_remote_storage_enable(false),
        )
        .unwrap();
    let trimmed = m
        .create(
            "t",
            1,
            PartitionConfig::default().with_local_retention_bytes(Some(0)),
        )
        .unwrap();
    let kept = m
        .create(
            "t",
            2,
            PartitionConfig::default().with_local_retention_bytes(None),
        )
        .unwrap();
    let plain = m.create("t", 3, PartitionConfig::default()).unwrap();
    for log in [&off, &trimmed, &kept, &plain] {
        fill(log, 60);
    }
    // Where each partition's sealed segments end: its local start once local retention took
    // them all.
    let end = |log: &Log| tier::uploadable_segments(log).last().unwrap().1;
    let (trimmed_end, kept_end, plain_end) = (end(&trimmed), end(&kept), end(&plain));
    let store = Arc::new(MemStore::new());
    // The manager's own default: no limit.
    m.set_tiering(Tiering::new(store.clone(), "r")).unwrap();
    let r = m.run_job(Job::Tiering).unwrap();
    assert!(r.failures.is_empty(), "{:?}", r.failures);
    assert_eq!(r.visited, 3, "remote.storage.enable=false is not visited");
    assert!(store.keys().iter().all(|k| !k.starts_with("r/t-0/")));
    assert!(m.tier_status("t", 0).is_none());
    assert_eq!(off.log_start_offset(), 0);
    assert_eq!(trimmed.log_start_offset(), trimmed_end, "its own limit");
    assert_eq!((kept.log_start_offset(), plain.log_start_offset()), (0, 0));
    // The manager's default becomes 0 bytes: the partition that says "no limit" keeps its
    // copies; the one without a setting of its own follows the manager.
    m.set_tiering(
        Tiering::new(store.clone(), "r").with_local_retention(LocalRetention::new(None, Some(0))),
    )
    .unwrap();
    m.run_job(Job::Tiering).unwrap();
    assert_eq!(kept.log_start_offset(), 0);
    assert_eq!(plain.log_start_offset(), plain_end);
    // Altered: the kept partition's limit goes, the manager's applies from the next run.
    m.alter_config("t", 2, PartitionConfig::default()).unwrap();
    m.run_job(Job::Tiering).unwrap();
    assert_eq!(kept.log_start_offset(), kept_end);
    m.close().unwrap();
}

#[test]
fn the_byte_rate_bounds_a_run() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let m = open(tmp.path(), &clock);
    let log = m.create("t", 0, PartitionConfig::default()).unwrap();
    fill(&log, 100);
    let bytes: u64 = tier::uploadable_segments(&log).len() as u64 * (8 << 10);
    assert!(bytes >= 24 << 10, "{bytes}");
    let store = Arc::new(MemStore::new());
    // A rate that lets the run through in about a second.
    let rate = bytes;
    m.set_tiering(Tiering::new(store.clone(), "r").with_bytes_per_second(Some(rate)))
        .unwrap();
    let started = Instant::now();
    let r = m.run_job(Job::Tiering).unwrap();
    let took = started.elapsed();
    assert!(r.failures.is_empty(), "{r:?}");
    let sent = m.tier_status("t", 0).unwrap().segments_uploaded;
    assert_eq!(sent, tier::uploadable_segments(&log).len() as u64);
    // The .log bytes paid for are at least three quarters of the bound: the run cannot have
    // been faster than that share of a second.
    assert!(
        took >= Duration::from_millis(700),
        "{took:?} for {bytes} bytes at {rate}/s"
    );
    m.close().unwrap();
}

#[test]
fn the_job_applies_the_partitions_retention_to_its_remote_segments() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let m = open(tmp.path(), &clock);
    let log = m
        .create(
            "t",
            0,
            PartitionConfig::default().with_retention_ms(Some(60_000)),
        )
        .unwrap();
    fill(&log, 80);
    let store = Arc::new(MemStore::new());
    m.set_tiering(
        Tiering::new(store.clone(), "r").with_local_retention(LocalRetention::new(None, Some(0))),
    )
    .unwrap();
    // Uploaded and gone locally; the records (T0 + i ms) are not a minute old yet.
    m.run_job(Job::Tiering).unwrap();
    let s = m.tier_status("t", 0).unwrap();
    let uploaded = s.segments_uploaded;
    assert!(
        uploaded >= 3 && s.local_segments_deleted == uploaded,
        "{s:?}"
    );
    assert_eq!(s.remote_segments_removed, 0);
    // A minute later every remote segment has expired.
    clock.set(T0 + 120_000);
    let r = m.run_job(Job::Tiering).unwrap();
    assert!(r.failures.is_empty(), "{r:?}");
    let s = m.tier_status("t", 0).unwrap();
    assert_eq!(s.remote_segments_removed, uploaded);
    let manifest = tier::read_manifest(store.as_ref(), "r/t-0")
        .unwrap()
        .unwrap();
    assert!(manifest.segments.is_empty());
    assert!(store.keys().iter().all(|k| k.contains("/manifest/")));
    m.close().unwrap();
}

/// Batches with no producer (a truncated log takes others at the same offsets), of `fill`.
fn fill_plain(log: &Log, n: i64, fill: u8) {
    for i in 0..n {
        let mut b = BatchBuilder::new();
        b.append(T0 + i, Some(b"k"), Some(&[fill; 300]), &[]);
        log.append(&b.build().unwrap()).unwrap();
    }
    log.flush().unwrap();
}

#[test]
fn the_job_reconciles_a_truncated_log_finishes_a_cut_delete_records_and_removes_orphans() {
    let tmp = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let m = open(tmp.path(), &clock);
    let log = m.create("t", 0, PartitionConfig::default()).unwrap();
    fill_plain(&log, 80, b'a');
    let store = Arc::new(MemStore::new());
    m.set_tiering(Tiering::new(store.clone(), "r").with_orphan_grace(Duration::from_secs(1)))
        .unwrap();
    m.run_job(Job::Tiering).unwrap();
    let before = tier::read_manifest(store.as_ref(), "r/t-0")
        .unwrap()
        .unwrap();
    assert!(before.segments.len() >= 3);
    // An upload that crashed after its puts.
    let orphan = tier::SegmentObject::Log.key("r/t-0", 0, 1, tier::UploadId(7));
    store.insert(&orphan, b"lost");
    // The log is cut inside the second remote segment and written again, other bytes.
    let cut = before.segments[1].base_offset + 1;
    log.replica().truncate_to(cut).unwrap();
    fill_plain(&log, 80 - cut, b'b');
    let r = m.run_job(Job::Tiering).unwrap();
    assert!(r.failures.is_empty(), "{r:?}");
    let s = m.tier_status("t", 0).unwrap();
    assert_eq!(s.remote_segments_dropped, before.segments.len() as u64 - 1);
    assert_eq!((s.orphans_removed, s.orphans_waiting), (0, 1));
    // What is remote now is the log's bytes.
    assert_eq!(
        tier::reconcile(&log, store.as_ref(), "r/t-0").unwrap(),
        tier::Reconciled::default()
    );
    let after = tier::read_manifest(store.as_ref(), "r/t-0")
        .unwrap()
        .unwrap();
    for seg in &after.segments {
        let remote =
            tier::read_remote(store.as_ref(), "r/t-0", seg, seg.base_offset, 1 << 20).unwrap();
        assert_eq!(remote, log.read(seg.base_offset, remote.len()).unwrap());
    }
    // Within its grace the orphan stays; after it, it goes.
    m.run_job(Job::Tiering).unwrap();
    assert!(store.object(&orphan).is_some());
    clock.set(T0 + 2_000);
    m.run_job(Job::Tiering).unwrap();
    let s = m.tier_status("t", 0).unwrap();
    assert_eq!((s.orphans_removed, s.orphans_waiting), (1, 0));
    assert!(store.object(&orphan).is_none());
    // A DeleteRecords whose manifest was written and whose local step a crash cut: the next run
    // raises the local start, and the status reports the partition's start.
    let m2 = tier::read_manifest(store.as_ref(), "r/t-0")
        .unwrap()
        .unwrap();
    let x = m2.segments[1].base_offset;
    let next = tier::Manifest {
        generation: m2.generation + 1,
        log_start_offset: x,
        segments: m2.segments[1..].to_vec(),
        ..m2
    };
    store.insert(
        &tier::keys::manifest_key("r/t-0", next.generation),
        &next.encode(),
    );
    assert_eq!(log.log_start_offset(), 0);
    let r = m.run_job(Job::Tiering).unwrap();
    assert!(r.failures.is_empty(), "{r:?}");
    assert_eq!(log.log_start_offset(), x);
    assert_eq!(m.tier_status("t", 0).unwrap().log_start_offset, Some(x));
    m.close().unwrap();
}
