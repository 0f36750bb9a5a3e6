//! Tiered storage after the upload (docs/design.md, "Tiered storage"): local retention deletes
//! only the local copies the store's manifest names, and reads below the local log start come
//! back from the store with the bytes the log returned before, each failure typed.

use crate::common::T0;
use crate::common_tier::MemStore;
use crate::tier_common::{filled_log, producer_batch};
use oncelog::tier::{self, LocalRetention, Manifest, RemoteStore, SegmentObject, TierError};
use oncelog::{Log, LogConfig, RetentionReason, TxnMarker};

const P: &str = "tier/orders-0";

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(8 * 1024)
        .index_interval_bytes(512)
        .file_delete_delay_ms(0)
        .build()
        .unwrap()
}

fn upload(log: &Log, store: &dyn RemoteStore, n: usize) {
    for (base, _) in tier::uploadable_segments(log).into_iter().take(n) {
        tier::upload_segment(log, store, P, base).unwrap();
    }
}

const ALL_OF_IT: LocalRetention = LocalRetention::new(None, Some(0));

/// What reads at every offset of `[from, to)` return, with a few read sizes.
fn reads(read: impl Fn(i64, usize) -> Vec<u8>, from: i64, to: i64) -> Vec<(i64, usize, Vec<u8>)> {
    let mut out = Vec::new();
    for offset in from..to {
        for max in [1, 900, 3000, 1 << 20] {
            out.push((offset, max, read(offset, max)));
        }
    }
    out
}

#[test]
fn local_retention_deletes_only_the_segments_the_manifest_names() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), false);
    let store = MemStore::new();
    let segments = tier::uploadable_segments(&log);
    // No manifest: nothing goes, however small the limit.
    let r = tier::enforce_local_retention(&log, &store, P, ALL_OF_IT, T0).unwrap();
    assert!(r.deleted.is_empty());
    upload(&log, &store, 2);
    let r = tier::enforce_local_retention(&log, &store, P, ALL_OF_IT, T0).unwrap();
    let gone: Vec<(i64, i64)> = r
        .deleted
        .iter()
        .map(|d| (d.base_offset, d.next_offset))
        .collect();
    assert_eq!(gone, segments[..2]);
    assert!(r
        .deleted
        .iter()
        .all(|d| d.reason == RetentionReason::LocalSize));
    assert_eq!(log.log_start_offset(), segments[1].1);
    assert_eq!(log.maintenance().segment_base_offsets()[0], segments[2].0);
    for &(base, _) in &segments[..2] {
        assert!(!dir.path().join(format!("{base:020}.log")).exists());
    }
    // The rest uploaded: everything sealed goes, the active segment stays.
    upload(&log, &store, segments.len());
    let r = tier::enforce_local_retention(&log, &store, P, ALL_OF_IT, T0).unwrap();
    assert_eq!(r.deleted.len(), segments.len() - 2);
    assert_eq!(log.log_start_offset(), segments.last().unwrap().1);
    assert_eq!(log.maintenance().segment_count(), 1);
    // Dedup outlives the local data: producer 7's last batch is still a duplicate.
    let last_seq = 4 * 39;
    let retry = producer_batch(7, last_seq, false, T0 + 390);
    assert!(log.append(&retry).unwrap().is_duplicate());
    log.close().unwrap();
}

#[test]
fn local_retention_by_time_and_by_size_keeps_what_the_limits_allow() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), false);
    let store = MemStore::new();
    upload(&log, &store, usize::MAX);
    let segments = tier::uploadable_segments(&log);
    // Within the limits: nothing goes.
    let loose = LocalRetention::new(Some(1_000_000), Some(1 << 30));
    let r = tier::enforce_local_retention(&log, &store, P, loose, T0 + 400).unwrap();
    assert!(r.deleted.is_empty());
    // By time: the segments whose newest record is older than 150 ms at T0 + 400.
    let by_time = LocalRetention::new(Some(150), None);
    let r = tier::enforce_local_retention(&log, &store, P, by_time, T0 + 400).unwrap();
    assert!(!r.deleted.is_empty() && r.deleted.len() < segments.len());
    assert!(r
        .deleted
        .iter()
        .all(|d| d.reason == RetentionReason::LocalTime));
    // By size: the local log down to at most what the limit allows, oldest first.
    let size_now = log.size_bytes();
    let by_size = LocalRetention::new(None, Some(size_now / 2));
    let r = tier::enforce_local_retention(&log, &store, P, by_size, T0 + 400).unwrap();
    assert!(!r.deleted.is_empty());
    assert!(r
        .deleted
        .iter()
        .all(|d| d.reason == RetentionReason::LocalSize));
    assert!(
        log.size_bytes() <= size_now / 2 + 8 * 1024,
        "{}",
        log.size_bytes()
    );
    log.close().unwrap();
}

#[test]
fn a_manifest_that_does_not_match_the_local_segment_confirms_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), false);
    let store = MemStore::new();
    upload(&log, &store, 1);
    let mut m = tier::read_manifest(&store, P).unwrap().unwrap();
    // A manifest (another writer's, or this one after local truncation) that says the first
    // segment ends elsewhere, or holds another number of bytes.
    for edit in [
        |m: &mut Manifest| m.segments[0].end_offset -= 1,
        |m: &mut Manifest| m.segments[0].objects[0].size += 1,
    ] {
        let mut edited = m.clone();
        edit(&mut edited);
        edited.generation += 1;
        store.insert(
            &format!("{P}/manifest/{:020}", edited.generation),
            &edited.encode(),
        );
        let r = tier::enforce_local_retention(&log, &store, P, ALL_OF_IT, T0).unwrap();
        assert!(r.deleted.is_empty(), "{r:?}");
        assert_eq!(log.log_start_offset(), 0);
        m.generation = edited.generation;
    }
    log.close().unwrap();
}

#[test]
fn a_compacting_log_keeps_its_local_segments() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), false);
    let store = MemStore::new();
    upload(&log, &store, 2);
    log.close().unwrap();
    let cfg = LogConfig::builder()
        .segment_bytes(8 * 1024)
        .cleanup_policy(oncelog::CleanupPolicy::CompactDelete)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg).unwrap();
    let e = tier::enforce_local_retention(&log, &store, P, ALL_OF_IT, T0).unwrap_err();
    assert_eq!(e.kind(), "not_uploadable", "{e}");
    assert_eq!(log.log_start_offset(), 0);
    log.close().unwrap();
}

#[test]
fn reads_below_the_local_log_start_return_the_bytes_the_log_returned() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), false);
    let store = MemStore::new();
    upload(&log, &store, usize::MAX);
    let end = log.log_end_offset();
    let before = reads(|o, m| log.read(o, m).unwrap().to_vec(), 0, end);
    let r = tier::enforce_local_retention(&log, &store, P, ALL_OF_IT, T0).unwrap();
    assert!(r.deleted.len() >= 4);
    let start = log.log_start_offset();
    assert!(start > 0);
    // Below the start the log refuses; through tier::read every offset reads as before.
    assert!(log.read(0, 100).is_err());
    let after = reads(
        |o, m| tier::read(&log, &store, P, o, m).unwrap().to_vec(),
        0,
        end,
    );
    assert_eq!(after.len(), before.len());
    for (a, b) in after.iter().zip(&before) {
        assert!(a == b, "offset {} max {}: other bytes", b.0, b.1);
    }
    log.close().unwrap();
}

#[test]
fn a_damaged_remote_object_is_a_typed_error_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), false);
    let store = MemStore::new();
    upload(&log, &store, 2);
    tier::enforce_local_retention(&log, &store, P, ALL_OF_IT, T0).unwrap();
    let s = tier::read_manifest(&store, P).unwrap().unwrap().segments[1].clone();
    let key = |o: SegmentObject| o.key(P, s.base_offset, s.end_offset, s.upload_id);
    let offset = s.base_offset + 1;
    // A flipped byte in the middle of the .log: the batch's CRC fails.
    let good = store.object(&key(SegmentObject::Log)).unwrap();
    let mut bad = good.clone();
    bad[100] ^= 0x40;
    store.insert(&key(SegmentObject::Log), &bad);
    match tier::read(&log, &store, P, offset, 1 << 20).unwrap_err() {
        TierError::RemoteCorrupt {
            key: k,
            position: Some(0),
            ..
        } => {
            assert_eq!(k, key(SegmentObject::Log))
        }
        other => panic!("{other}"),
    }
    store.insert(&key(SegmentObject::Log), &good);
    // An index that is not the one uploaded.
    let mut index = store.object(&key(SegmentObject::OffsetIndex)).unwrap();
    index[7] ^= 1;
    store.insert(&key(SegmentObject::OffsetIndex), &index);
    let e = tier::read(&log, &store, P, offset, 1 << 20).unwrap_err();
    assert!(
        matches!(&e, TierError::RemoteCorrupt { key: k, position: None, .. } if *k == key(SegmentObject::OffsetIndex)),
        "{e}"
    );
    assert_eq!(e.kind(), "remote_corrupt");
    // A .log cut short.
    index[7] ^= 1;
    store.insert(&key(SegmentObject::OffsetIndex), &index);
    store.insert(&key(SegmentObject::Log), &good[..good.len() - 10]);
    let e = tier::read(&log, &store, P, s.end_offset - 1, 1 << 20).unwrap_err();
    assert_eq!(e.kind(), "remote", "{e}");
    // A store that cannot be read.
    store.insert(&key(SegmentObject::Log), &good);
    store.fail("get", 2, crate::common_tier::Strike::Before);
    let e = tier::read(&log, &store, P, offset, 1 << 20).unwrap_err();
    assert!(
        matches!(&e, TierError::Remote { step, .. } if step.starts_with("get .index")),
        "{e}"
    );
    log.close().unwrap();
}

#[test]
fn an_offset_in_no_remote_segment_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), false);
    let store = MemStore::new();
    log.delete_records(30).unwrap();
    let e = tier::read(&log, &store, P, 10, 1 << 20).unwrap_err();
    assert!(
        matches!(
            e,
            TierError::NotRemote {
                offset: 10,
                log_start_offset: 30,
                remote: None
            }
        ),
        "{e}"
    );
    assert_eq!(e.kind(), "not_remote");
    // At and above the start, the log's own read, and its errors.
    assert!(!tier::read(&log, &store, P, 30, 100).unwrap().is_empty());
    let e = tier::read(&log, &store, P, log.log_end_offset() + 5, 100).unwrap_err();
    assert_eq!(e.kind(), "local_read", "{e}");
    log.close().unwrap();
}

#[test]
fn read_committed_below_the_local_start_answers_as_the_local_fetch_did() {
    use oncelog::IsolationLevel;
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    // Two transactional producers and a plain one interleaved; producer 5's transactions are
    // aborted, 6's committed, each spanning several batches (and so segments).
    let mut seq = [0i32; 3];
    for round in 0..12 {
        for _ in 0..3 {
            for (k, (pid, txn)) in [(5, true), (6, true), (1, false)].into_iter().enumerate() {
                log.append(&producer_batch(pid, seq[k], txn, T0 + round))
                    .unwrap();
                seq[k] += 4;
            }
        }
        log.append_marker(&TxnMarker::abort(5, 0, 0)).unwrap();
        log.append_marker(&TxnMarker::commit(6, 0, 0)).unwrap();
    }
    log.flush().unwrap();
    let store = MemStore::new();
    upload(&log, &store, usize::MAX);
    let end = log.log_end_offset();
    let fetch = |o: i64, m: usize| {
        let f = log
            .fetch_isolated(o, m, IsolationLevel::ReadCommitted)
            .unwrap();
        (f.bytes.to_vec(), f.next_offset, f.aborted_transactions)
    };
    let mut before = Vec::new();
    for o in 0..end {
        for m in [1, 2000, 1 << 20] {
            before.push((o, m, fetch(o, m)));
        }
    }
    let r = tier::enforce_local_retention(&log, &store, P, ALL_OF_IT, T0).unwrap();
    assert!(r.deleted.len() >= 4, "{r:?}");
    let start = log.log_start_offset();
    let mut aborted_seen = 0;
    for (o, m, want) in before {
        let f = tier::fetch_committed(&log, &store, P, o, m).unwrap();
        let at = format!("offset {o} (local start {start}) max {m}");
        assert!(f.bytes.as_ref() == want.0.as_slice(), "{at}: other bytes");
        assert_eq!(f.next_offset, want.1, "{at}");
        assert_eq!(f.aborted_transactions, want.2, "{at}");
        aborted_seen += f.aborted_transactions.map_or(0, |a| a.len());
    }
    assert!(aborted_seen > 0);
    log.close().unwrap();
}

#[test]
fn a_lookup_by_time_below_the_local_start_answers_as_the_log_did() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    // Timestamps mostly rising, some late (CreateTime out of order), as producers send them.
    for i in 0..48i64 {
        let ts = T0 + i * 10 - if i % 7 == 3 { 25 } else { 0 };
        log.append(&producer_batch(7, 4 * i as i32, false, ts))
            .unwrap();
    }
    log.flush().unwrap();
    let store = MemStore::new();
    upload(&log, &store, usize::MAX);
    let targets: Vec<i64> = (T0 - 30..T0 + 520).step_by(3).collect();
    let before: Vec<_> = targets
        .iter()
        .map(|&ts| log.offset_for_timestamp(ts).unwrap())
        .collect();
    let r = tier::enforce_local_retention(&log, &store, P, ALL_OF_IT, T0).unwrap();
    assert!(r.deleted.len() >= 4, "{r:?}");
    let mut remote_answers = 0;
    for (&ts, want) in targets.iter().zip(&before) {
        let got = tier::offset_for_timestamp(&log, &store, P, ts).unwrap();
        assert_eq!(got, *want, "timestamp {ts}");
        remote_answers += usize::from(got.is_some_and(|g| g.offset < log.log_start_offset()));
    }
    assert!(remote_answers > 20, "{remote_answers}");
    assert!(before.last().unwrap().is_none());
    // A time index that is not the one uploaded is refused, naming it.
    let s = tier::read_manifest(&store, P).unwrap().unwrap().segments[0].clone();
    let key = SegmentObject::TimeIndex.key(P, s.base_offset, s.end_offset, s.upload_id);
    let mut bytes = store.object(&key).unwrap();
    bytes[3] ^= 1;
    store.insert(&key, &bytes);
    let e = tier::offset_for_timestamp(&log, &store, P, T0).unwrap_err();
    assert!(
        matches!(&e, TierError::RemoteCorrupt { key: k, .. } if *k == key),
        "{e}"
    );
    log.close().unwrap();
}
