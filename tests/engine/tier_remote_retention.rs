//! Total retention over the segments only the object store holds (docs/design.md, "Tiered
//! storage"): the partition's `retention_ms` and `retention_bytes` remove expired remote
//! segments, the manifest without them first and their objects after; nothing still local goes;
//! a lost manifest race removes nothing.

use crate::common::T0;
use crate::common_tier::{MemStore, Racing, Strike};
use oncelog::format::BatchBuilder;

use oncelog::tier::{self, Created, LocalRetention, RemoteStore, SegmentObject, TierError};
use oncelog::{CleanupPolicy, Log, LogConfig, RetentionReason};

const P: &str = "tier/orders-0";
const HOUR: i64 = 3_600_000;

fn batch(seq: i32, ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(3, 0, seq);
    for i in 0..4 {
        b.append(ts + i, Some(b"k"), Some(&[b'x'; 200][..]), &[]);
    }
    b.build().unwrap()
}

/// A log whose batches are an hour apart, wholly uploaded.
fn uploaded_log(dir: &std::path::Path, store: &MemStore, cfg: LogConfig) -> Log {
    let log = Log::open(dir, cfg).unwrap();
    for i in 0..40 {
        log.append(&batch(4 * i, T0 + i as i64 * HOUR)).unwrap();
    }
    log.flush().unwrap();
    for (base, _) in tier::uploadable_segments(&log) {
        tier::upload_segment(&log, store, P, base).unwrap();
    }
    log
}

/// The same, its local copies all gone but the active segment's.
fn tiered_log(dir: &std::path::Path, store: &MemStore, cfg: LogConfig) -> Log {
    let log = uploaded_log(dir, store, cfg);
    let all = LocalRetention::new(None, Some(0));
    tier::enforce_local_retention(&log, store, P, all, T0).unwrap();
    log
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(8 * 1024)
        .file_delete_delay_ms(0)
        .build()
        .unwrap()
}

#[test]
fn expired_remote_segments_leave_the_manifest_then_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let cfg = config()
        .into_builder()
        .retention_ms(Some(10 * HOUR))
        .build()
        .unwrap();
    let log = tiered_log(dir.path(), &store, cfg);
    let before = tier::read_manifest(&store, P).unwrap().unwrap();
    assert!(before.segments.len() >= 4);
    // At T0 + 40 h the records of hours 0..30 are older than 10 h: the segments whose newest
    // record is among them go.
    let now = T0 + 40 * HOUR;
    let r = tier::enforce_remote_retention(&log, &store, P, now).unwrap();
    let want: Vec<_> = before
        .segments
        .iter()
        .take_while(|s| now - s.max_timestamp > 10 * HOUR)
        .map(|s| (s.base_offset, s.end_offset, RetentionReason::Time))
        .collect();
    assert!(!want.is_empty() && want.len() < before.segments.len());
    assert_eq!(r.removed, want);
    assert_eq!(
        (r.generation, r.orphans_left),
        (Some(before.generation + 1), 0)
    );
    let after = tier::read_manifest(&store, P).unwrap().unwrap();
    assert_eq!(after.segments, before.segments[want.len()..]);
    for s in &before.segments[..want.len()] {
        for o in SegmentObject::ALL {
            assert!(store
                .object(&o.key(P, s.base_offset, s.end_offset, s.upload_id))
                .is_none());
        }
    }
    // Below the new remote start nothing reads (the partition's start moved up with it, in
    // the manifest); above it the store still answers.
    let kept = after.segments[0].base_offset;
    assert_eq!(after.log_start_offset, kept);
    let e = tier::read(&log, &store, P, 0, 1 << 20).unwrap_err();
    assert!(
        matches!(
            e,
            TierError::BelowLogStart {
                offset: 0,
                log_start_offset
            } if log_start_offset == kept
        ),
        "{e}"
    );
    assert!(!tier::read(&log, &store, P, kept, 1 << 20)
        .unwrap()
        .is_empty());
    // Again at the same time: nothing more.
    let r = tier::enforce_remote_retention(&log, &store, P, now).unwrap();
    assert!(r.removed.is_empty());
    log.close().unwrap();
}

#[test]
fn the_size_limit_counts_the_remote_and_the_local_segments() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let cfg = config()
        .into_builder()
        .retention_bytes(Some(20 * 1024))
        .build()
        .unwrap();
    let log = tiered_log(dir.path(), &store, cfg);
    let before = tier::read_manifest(&store, P).unwrap().unwrap();
    let r = tier::enforce_remote_retention(&log, &store, P, T0).unwrap();
    assert!(!r.removed.is_empty());
    assert!(r.removed.iter().all(|x| x.2 == RetentionReason::Size));
    let after = tier::read_manifest(&store, P).unwrap().unwrap();
    let remote: u64 = after
        .segments
        .iter()
        .map(|s| s.object(SegmentObject::Log).size)
        .sum();
    let total = remote + log.size_bytes();
    // Kafka's rule: segments go, oldest first, while the log would still hold at least the
    // limit without them; so it holds at least the limit, and the next would take it below.
    let limit = 20 * 1024;
    assert!(total >= limit, "{total}");
    assert!(
        total - after.segments[0].object(SegmentObject::Log).size < limit,
        "{total}"
    );
    assert_eq!(after.segments, before.segments[r.removed.len()..]);
    log.close().unwrap();
}

#[test]
fn segments_still_local_and_logs_that_only_compact_keep_their_remote_copies() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let cfg = config()
        .into_builder()
        .retention_ms(Some(HOUR))
        .build()
        .unwrap();
    let log = uploaded_log(dir.path(), &store, cfg.clone());
    // Every segment is still local: the log's own retention decides, not this.
    let r = tier::enforce_remote_retention(&log, &store, P, T0 + 100 * HOUR).unwrap();
    assert!(r.removed.is_empty());
    log.close().unwrap();
    // Only `compact`: no retention by time or size at all.
    let store = MemStore::new();
    let dir = tempfile::tempdir().unwrap();
    let log = tiered_log(dir.path(), &store, cfg);
    log.close().unwrap();
    let compact = config()
        .into_builder()
        .retention_ms(Some(HOUR))
        .cleanup_policy(CleanupPolicy::Compact)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), compact).unwrap();
    let r = tier::enforce_remote_retention(&log, &store, P, T0 + 100 * HOUR).unwrap();
    assert!(r.removed.is_empty());
    log.close().unwrap();
}

#[test]
fn a_lost_manifest_race_or_a_failing_store_removes_no_object() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let cfg = config()
        .into_builder()
        .retention_ms(Some(HOUR))
        .build()
        .unwrap();
    let log = tiered_log(dir.path(), &store, cfg);
    let before = tier::read_manifest(&store, P).unwrap().unwrap();
    let keys = store.keys();
    let now = T0 + 100 * HOUR;
    // Another writer takes the next generation between the read and the conditional put.
    let racing = Racing::new(&store, |inner| {
        let mut theirs = tier::read_manifest(inner, P).unwrap().unwrap();
        theirs.generation += 1;
        assert_eq!(
            inner
                .put_if_absent(
                    &tier::keys::manifest_key(P, theirs.generation),
                    &theirs.encode()
                )
                .unwrap(),
            Created::Created
        );
    });
    let e = tier::enforce_remote_retention(&log, &racing, P, now).unwrap_err();
    assert_eq!(e.kind(), "manifest_conflict", "{e}");
    let raced = format!("{P}/manifest/{:020}", before.generation + 1);
    let mut with_theirs = keys.clone();
    with_theirs.push(raced.clone());
    with_theirs.sort();
    assert_eq!(store.keys(), with_theirs);
    store.delete(&raced).unwrap();
    store.fail("put_if_absent", 1, Strike::Before);
    store.fail("get", 2, Strike::Before);
    let e = tier::enforce_remote_retention(&log, &store, P, now).unwrap_err();
    assert_eq!(e.kind(), "remote", "{e}");
    assert_eq!(store.keys(), keys);
    // A put that happened though it reported failure counts; deletes that fail leave orphans.
    store.fail("put_if_absent", 1, Strike::After);
    // The first deletes are of manifest generations more than two below the new one.
    let new_generation = before.generation + 1;
    let pruned = store
        .keys()
        .iter()
        .filter_map(|k| {
            k.strip_prefix(&format!("{P}/manifest/"))?
                .parse::<u64>()
                .ok()
        })
        .filter(|g| g + 2 < new_generation)
        .count() as u64;
    store.fail("delete", pruned + 1, Strike::Before);
    let r = tier::enforce_remote_retention(&log, &store, P, now).unwrap();
    assert!(!r.removed.is_empty());
    assert_eq!(r.orphans_left, 1);
    log.close().unwrap();
}
