//! The partition's log start across tiers (docs/design.md, "Tiered storage": DeleteRecords
//! across tiers; a log truncated below what is uploaded; orphans): DeleteRecords below the
//! local log start drops remote segments and records the start in the manifest first; a crash
//! between the manifest and the local step never lowers the start; a log cut below the remote
//! end has its remote segments dropped before the new bytes go up; objects no manifest names go
//! after their grace.

use crate::common::T0;
use crate::common_tier::{MemStore, Racing};
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::tier::{self, keys, LocalRetention, Manifest, RemoteStore, SegmentObject, TierError};
use oncelog::{Log, LogConfig};

const P: &str = "tier/orders-0";

/// Four records of 200 bytes of `fill`, no producer (a truncated log takes them again).
fn batch(fill: u8, ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    for i in 0..4 {
        b.append(ts + i, Some(b"k"), Some(&[fill; 200][..]), &[]);
    }
    b.build().unwrap()
}

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(8 * 1024)
        .file_delete_delay_ms(0)
        .build()
        .unwrap()
}

fn append_all(log: &Log, fill: u8, n: i64) {
    for i in 0..n {
        log.append(&batch(fill, T0 + i * 10)).unwrap();
    }
    log.flush().unwrap();
}

fn upload_all(log: &Log, store: &dyn RemoteStore) {
    for (base, _) in tier::uploadable_segments(log) {
        tier::upload_segment(log, store, P, base).unwrap();
    }
}

/// A log of 40 batches (160 offsets), every sealed segment uploaded, the local copies of all
/// but the active one gone.
fn tiered_log(dir: &std::path::Path, store: &MemStore) -> Log {
    let log = Log::open(dir, config()).unwrap();
    append_all(&log, b'x', 40);
    upload_all(&log, store);
    let all = LocalRetention::new(None, Some(0));
    tier::enforce_local_retention(&log, store, P, all, T0).unwrap();
    log
}

fn manifest(store: &MemStore) -> Manifest {
    tier::read_manifest(store, P).unwrap().unwrap()
}

fn segment_keys(m: &Manifest, i: usize) -> Vec<String> {
    let s = &m.segments[i];
    SegmentObject::ALL
        .map(|o| o.key(P, s.base_offset, s.end_offset, s.upload_id))
        .to_vec()
}

/// Every batch's bytes read from `from` to the log end through `tier::read`.
fn read_through(log: &Log, store: &MemStore, from: i64) -> Vec<Vec<u8>> {
    let (mut next, mut out) = (from, Vec::new());
    while next < log.log_end_offset() {
        let bytes = tier::read(log, store, P, next, 1 << 20).unwrap();
        assert!(!bytes.is_empty(), "empty read at {next}");
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            next = b.last_offset() + 1;
            out.push(b.as_bytes().to_vec());
        }
    }
    out
}

#[test]
fn delete_records_below_the_local_start_raises_the_partitions_start_in_the_manifest() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = tiered_log(dir.path(), &store);
    let before = manifest(&store);
    let local = log.log_start_offset();
    assert!(before.segments.len() >= 3 && local == before.remote_end().unwrap());
    assert_eq!(tier::log_start_offset(&log, &store, P).unwrap(), 0);
    // Into the middle of the second remote segment: the first goes whole.
    let second = &before.segments[1];
    let x = second.base_offset + 2;
    let done = tier::delete_records(&log, &store, P, x).unwrap();
    assert_eq!(done.log_start_offset, x);
    assert_eq!(
        done.removed,
        vec![(before.segments[0].base_offset, second.base_offset)]
    );
    assert_eq!(
        (done.generation, done.orphans_left),
        (Some(before.generation + 1), 0)
    );
    let after = manifest(&store);
    assert_eq!(after.log_start_offset, x);
    assert_eq!(after.segments, before.segments[1..]);
    for key in segment_keys(&before, 0) {
        assert!(store.object(&key).is_none(), "{key} left");
    }
    assert_eq!(
        log.log_start_offset(),
        local,
        "the local start does not move"
    );
    assert_eq!(tier::log_start_offset(&log, &store, P).unwrap(), x);
    // Below it nothing reads, neither in the dropped segment nor in the kept one.
    for offset in [0, second.base_offset, x - 1] {
        match tier::read(&log, &store, P, offset, 1 << 20) {
            Err(TierError::BelowLogStart {
                offset: o,
                log_start_offset,
            }) => assert_eq!((o, log_start_offset), (offset, x)),
            other => panic!("read at {offset}: {other:?}"),
        }
        assert!(matches!(
            tier::fetch_committed(&log, &store, P, offset, 1 << 20),
            Err(TierError::BelowLogStart { .. })
        ));
    }
    // From it, everything up to the end, the batch holding it first.
    let read = read_through(&log, &store, x);
    assert!(!read.is_empty());
    let first = oncelog::format::RecordBatch::parse(&read[0]).unwrap();
    assert!(first.base_offset() <= x && x <= first.last_offset());
    // By time, nothing below the start is an answer.
    let found = tier::offset_for_timestamp(&log, &store, P, 0)
        .unwrap()
        .unwrap();
    assert_eq!(found.offset, x);
    // Lower or the same again changes nothing; a restart reports the same start.
    let again = tier::delete_records(&log, &store, P, 1).unwrap();
    assert_eq!((again.log_start_offset, again.generation), (x, None));
    log.close().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(tier::log_start_offset(&log, &store, P).unwrap(), x);
    assert_eq!(read_through(&log, &store, x), read);
    log.close().unwrap();
}

#[test]
fn delete_records_at_or_above_the_local_start_moves_both_starts() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = Log::open(dir.path(), config()).unwrap();
    append_all(&log, b'x', 40);
    upload_all(&log, &store);
    let before = manifest(&store);
    // Local copies kept: the local start is 0; DeleteRecords into the third segment.
    let third = &before.segments[2];
    let x = third.base_offset + 1;
    let done = tier::delete_records(&log, &store, P, x).unwrap();
    assert_eq!(done.log_start_offset, x);
    assert_eq!(done.removed.len(), 2);
    assert_eq!(log.log_start_offset(), x, "the local start moves too");
    let after = manifest(&store);
    assert_eq!(
        (after.log_start_offset, &after.segments[..]),
        (x, &before.segments[2..])
    );
    assert!(matches!(
        log.read(x - 1, 100),
        Err(oncelog::ReadError::OffsetOutOfRange { .. })
    ));
    // Past the remote end, up to the high watermark: no remote segment is left.
    let end = log.log_end_offset();
    let done = tier::delete_records(&log, &store, P, end).unwrap();
    assert_eq!(done.log_start_offset, end);
    let after = manifest(&store);
    assert!(after.segments.is_empty());
    assert_eq!(after.log_start_offset, end);
    assert_eq!(tier::log_start_offset(&log, &store, P).unwrap(), end);
    // Above the high watermark, or below 0: refused, nothing changed.
    for bad in [end + 1, -1] {
        match tier::delete_records(&log, &store, P, bad) {
            Err(TierError::DeleteRecordsOutOfRange {
                offset,
                high_watermark,
            }) => assert_eq!((offset, high_watermark), (bad, end)),
            other => panic!("delete records to {bad}: {other:?}"),
        }
    }
    assert_eq!(manifest(&store).generation, after.generation);
    log.close().unwrap();
}

#[test]
fn delete_records_with_nothing_uploaded_writes_the_first_manifest_which_uploads_then_keep() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = Log::open(dir.path(), config()).unwrap();
    append_all(&log, b'x', 40);
    let segments = tier::uploadable_segments(&log);
    let x = segments[1].0 + 3;
    let done = tier::delete_records(&log, &store, P, x).unwrap();
    assert_eq!((done.log_start_offset, done.generation), (x, Some(1)));
    assert_eq!(manifest(&store).log_start_offset, x);
    // The first upload is the segment holding the start, and keeps it.
    upload_all(&log, &store);
    let m = manifest(&store);
    assert_eq!(m.segments[0].base_offset, segments[1].0);
    assert_eq!(m.log_start_offset, x);
    assert_eq!(tier::log_start_offset(&log, &store, P).unwrap(), x);
    log.close().unwrap();
}

#[test]
fn a_delete_records_that_loses_the_manifest_race_reads_it_again_and_wins() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = tiered_log(dir.path(), &store);
    let before = manifest(&store);
    // Another writer (a remote retention elsewhere) creates the generation first, unchanged.
    let racing = Racing::new(&store, |s: &MemStore| {
        let m = tier::read_manifest(s, P).unwrap().unwrap();
        let next = Manifest {
            generation: m.generation + 1,
            ..m
        };
        s.insert(&keys::manifest_key(P, next.generation), &next.encode());
    });
    let x = before.segments[1].base_offset;
    let done = tier::delete_records(&log, &racing, P, x).unwrap();
    assert_eq!(done.generation, Some(before.generation + 2));
    assert_eq!(manifest(&store).log_start_offset, x);
    log.close().unwrap();
}

#[test]
fn a_manifest_start_above_the_local_start_is_reported_then_the_log_follows_it() {
    // What a crash between DeleteRecords' manifest and its local step leaves: the manifest
    // records the new start, the log does not.
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = Log::open(dir.path(), config()).unwrap();
    append_all(&log, b'x', 40);
    upload_all(&log, &store);
    let m = manifest(&store);
    let x = m.segments[1].base_offset + 1;
    let next = Manifest {
        generation: m.generation + 1,
        log_start_offset: x,
        segments: m.segments[1..].to_vec(),
        ..m.clone()
    };
    store.insert(&keys::manifest_key(P, next.generation), &next.encode());
    assert_eq!(log.log_start_offset(), 0);
    assert_eq!(
        tier::log_start_offset(&log, &store, P).unwrap(),
        x,
        "never lower than the start a DeleteRecords answered"
    );
    assert_eq!(tier::settle_log_start(&log, &store, P).unwrap(), x);
    assert_eq!(log.log_start_offset(), x);
    // reconcile does it too, and a DeleteRecords at or below the start finishes it.
    let m2 = manifest(&store);
    let y = x + 2;
    let next = Manifest {
        generation: m2.generation + 1,
        log_start_offset: y,
        ..m2
    };
    store.insert(&keys::manifest_key(P, next.generation), &next.encode());
    let r = tier::reconcile(&log, &store, P).unwrap();
    assert_eq!(r.local_start_raised, Some((x, y)));
    assert!(r.dropped.is_empty());
    assert_eq!(log.log_start_offset(), y);
    log.close().unwrap();
}

#[test]
fn a_log_truncated_below_the_remote_end_drops_those_segments_then_uploads_the_new_bytes() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = Log::open(dir.path(), config()).unwrap();
    append_all(&log, b'x', 40);
    upload_all(&log, &store);
    let before = manifest(&store);
    assert!(before.segments.len() >= 3);
    // Checked once, the segments are vouched for while they keep their identity.
    let mut verified = tier::Verified::default();
    let r = tier::reconcile_with(&log, &store, P, &mut verified).unwrap();
    assert_eq!(r, tier::Reconciled::default());
    assert_eq!(verified.len(), before.segments.len());
    // Cut inside the second remote segment, then write other records of the same sizes: the
    // offsets and sizes come out the same, the bytes do not.
    let cut = before.segments[1].base_offset + 4;
    log.replica().truncate_to(cut).unwrap();
    let again = (before.remote_end().unwrap() - cut) / 4 + 10;
    for i in 0..again {
        log.append(&batch(b'y', T0 + 5_000 + i * 10)).unwrap();
    }
    log.flush().unwrap();
    // An upload without reconciling refuses the segment the manifest names otherwise.
    let base = before.segments[1].base_offset;
    assert!(matches!(
        tier::upload_segment(&log, &store, P, base),
        Err(TierError::RemoteDiverged { segment, .. }) if segment == base
    ));
    // A warm cache does not hide the rewrite: the segment's identity changed with its bytes.
    let r = tier::reconcile_with(&log, &store, P, &mut verified).unwrap();
    assert_eq!(verified.len(), 1);
    let dropped: Vec<(i64, i64)> = before.segments[1..]
        .iter()
        .map(|s| (s.base_offset, s.end_offset))
        .collect();
    assert_eq!(r.dropped, dropped);
    assert_eq!(
        (r.generation, r.orphans_left),
        (Some(before.generation + 1), 0)
    );
    let after = manifest(&store);
    assert_eq!(after.segments, before.segments[..1]);
    for i in 1..before.segments.len() {
        for key in segment_keys(&before, i) {
            assert!(store.object(&key).is_none(), "{key} left");
        }
    }
    // Nothing more to drop; the uploads start again where the kept segment ends.
    assert_eq!(
        tier::reconcile(&log, &store, P).unwrap(),
        tier::Reconciled::default()
    );
    upload_all(&log, &store);
    let m = manifest(&store);
    assert!(m.segments.len() >= 2);
    // Every remote segment is the log's bytes now, read back remotely byte for byte.
    let local: Vec<Vec<u8>> = {
        let (mut next, mut out) = (0, Vec::new());
        while next < log.log_end_offset() {
            let bytes = log.read(next, 1 << 20).unwrap();
            for item in BatchIter::new(&bytes) {
                let (_, b) = item.unwrap();
                next = b.last_offset() + 1;
                out.push(b.as_bytes().to_vec());
            }
        }
        out
    };
    let all = LocalRetention::new(None, Some(0));
    tier::enforce_local_retention(&log, &store, P, all, T0).unwrap();
    assert_eq!(log.log_start_offset(), m.remote_end().unwrap());
    assert_eq!(read_through(&log, &store, 0), local);
    let rewritten = |b: &Vec<u8>| b.windows(200).any(|w| w.iter().all(|&c| c == b'y'));
    assert!(
        local.iter().any(rewritten),
        "the records written after the cut"
    );
    log.close().unwrap();
}

#[test]
fn orphans_go_after_a_newer_generation_or_their_grace_and_named_objects_never() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = Log::open(dir.path(), config()).unwrap();
    append_all(&log, b'x', 40);
    let segments = tier::uploadable_segments(&log);
    for &(base, _) in &segments[..2] {
        tier::upload_segment(&log, &store, P, base).unwrap();
    }
    // An upload that crashed after its puts, and a stray object under the folder.
    let lost = keys::SegmentObject::Log.key(P, segments[2].0, segments[2].1, keys::UploadId(7));
    let stray = format!("{P}/segments/not-an-upload");
    store.insert(&lost, b"batches");
    store.insert(&stray, b"?");
    let mut seen = tier::OrphanSightings::default();
    let grace = 60_000;
    let first = tier::remove_orphans(&store, P, &mut seen, T0, grace).unwrap();
    assert_eq!((first.deleted, first.waiting), (0, 2), "first seen: kept");
    let r = tier::remove_orphans(&store, P, &mut seen, T0 + 1, grace).unwrap();
    assert_eq!(
        (r.deleted, r.waiting),
        (0, 2),
        "same generation, within the grace"
    );
    // A newer generation that does not name them: the upload that put them lost.
    tier::upload_segment(&log, &store, P, segments[2].0).unwrap();
    let r = tier::remove_orphans(&store, P, &mut seen, T0 + 2, grace).unwrap();
    assert_eq!((r.deleted, r.waiting), (2, 0));
    assert!(store.object(&lost).is_none() && store.object(&stray).is_none());
    // Past the grace with no new generation.
    store.insert(&lost, b"batches");
    tier::remove_orphans(&store, P, &mut seen, T0 + 10, grace).unwrap();
    let r = tier::remove_orphans(&store, P, &mut seen, T0 + 10 + grace, grace).unwrap();
    assert_eq!(r.deleted, 1);
    assert!(seen.is_empty());
    // Every object the current manifest names is still there, and whole.
    let m = manifest(&store);
    for i in 0..m.segments.len() {
        for (key, o) in segment_keys(&m, i).iter().zip(SegmentObject::ALL) {
            let bytes = store.object(key).unwrap_or_else(|| panic!("{key} deleted"));
            assert_eq!(tier::ObjectDigest::of(&bytes), m.segments[i].object(o));
        }
    }
    // Old generations are pruned: the newest and two below it stay.
    let gens: Vec<String> = store
        .keys()
        .into_iter()
        .filter(|k| k.starts_with(&keys::manifest_folder(P)))
        .collect();
    assert_eq!(gens.len(), 3, "{gens:?}");
    log.close().unwrap();
}

#[test]
fn orphans_of_a_partition_with_no_manifest_stay() {
    let store = MemStore::new();
    let key =
        format!("{P}/segments/00000000000000000000-0000000000000007/00000000000000000000.log");
    store.insert(&key, b"x");
    let mut seen = tier::OrphanSightings::default();
    for now in [T0, T0 + 1_000_000_000] {
        let r = tier::remove_orphans(&store, P, &mut seen, now, 1).unwrap();
        assert_eq!(r, tier::OrphansRemoved::default());
    }
    assert!(store.object(&key).is_some());
    assert!(matches!(
        tier::remove_orphans(&store, "bad//prefix", &mut seen, T0, 1),
        Err(TierError::BadPartitionPrefix { .. })
    ));
}

#[test]
fn a_failing_store_during_delete_records_changes_nothing_or_leaves_only_orphans() {
    use crate::common_tier::Strike;
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = tiered_log(dir.path(), &store);
    let before = manifest(&store);
    let x = before.segments[1].base_offset;
    // The manifest put fails before writing: nothing changed, the step named.
    store.fail("put_if_absent", 1, Strike::Before);
    match tier::delete_records(&log, &store, P, x) {
        Err(TierError::Remote { step, .. }) => {
            assert_eq!(
                step,
                format!(
                    "put_if_absent manifest generation {}",
                    before.generation + 1
                )
            )
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(manifest(&store), before);
    assert_eq!(tier::log_start_offset(&log, &store, P).unwrap(), 0);
    // It writes, then reports failure: read back, it happened.
    store.fail("put_if_absent", 1, Strike::After);
    // And the first object delete fails (after the pruning of old generations): an orphan,
    // named by no manifest.
    let next = before.generation + 1;
    let pruned = store
        .keys()
        .iter()
        .filter_map(|k| keys::parse_manifest_key(P, k))
        .filter(|g| g + 2 < next)
        .count() as u64;
    store.fail("delete", pruned + 1, Strike::Before);
    let done = tier::delete_records(&log, &store, P, x).unwrap();
    assert_eq!((done.log_start_offset, done.orphans_left), (x, 1));
    assert_eq!(manifest(&store).log_start_offset, x);
    let left: Vec<String> = segment_keys(&before, 0)
        .into_iter()
        .filter(|k| store.object(k).is_some())
        .collect();
    assert_eq!(left.len(), 1);
    // The orphan goes once a newer generation shows nothing names it.
    let mut seen = tier::OrphanSightings::default();
    tier::remove_orphans(&store, P, &mut seen, T0, i64::MAX).unwrap();
    tier::delete_records(&log, &store, P, x + 1).unwrap();
    let r = tier::remove_orphans(&store, P, &mut seen, T0, i64::MAX).unwrap();
    assert_eq!(r.deleted, 1);
    assert!(store.object(&left[0]).is_none());
    log.close().unwrap();
}
