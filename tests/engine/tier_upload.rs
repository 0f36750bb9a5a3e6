//! Tiered storage, the upload of sealed segments (docs/design.md, "Tiered storage"): every
//! file read back byte for byte, what may not be uploaded and why, damage never uploaded, and a
//! store that fails at every call the upload makes (before or after doing its work), or loses
//! the manifest's generation to another writer.

use crate::common::{batch, T0};
use crate::common_tier::{MemStore, Racing, Strike};
use crate::tier_common::{filled_log, producer_batch};
use oncelog::files::{decode_leader_epochs, decode_snapshot};
use oncelog::tier::{self, NotUploadable, RemoteStore, SegmentObject, TierError, Uploaded};
use oncelog::{CleanupPolicy, FlushPolicy, Log, LogConfig};

const P: &str = "tier/orders-0";

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(8 * 1024)
        .index_interval_bytes(512)
        .build()
        .unwrap()
}

fn upload_all(log: &Log, store: &dyn RemoteStore) -> Vec<Uploaded> {
    tier::uploadable_segments(log)
        .into_iter()
        .map(|(base, _)| tier::upload_segment(log, store, P, base).unwrap())
        .collect()
}

#[test]
fn uploaded_segments_read_back_byte_for_byte_with_every_file() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), true);
    let segments = tier::uploadable_segments(&log);
    assert!(segments.len() >= 4, "{segments:?}");
    let store = MemStore::new();
    upload_all(&log, &store);
    let manifest = tier::read_manifest(&store, P).unwrap().unwrap();
    assert_eq!(manifest.generation, segments.len() as u64);
    let listed: Vec<(i64, i64)> = manifest
        .segments
        .iter()
        .map(|s| (s.base_offset, s.end_offset))
        .collect();
    assert_eq!(listed, segments);
    let mut txn_objects = 0;
    for s in &manifest.segments {
        let key = |o: SegmentObject| o.key(P, s.base_offset, s.end_offset, s.upload_id);
        for o in SegmentObject::ALL {
            let bytes = store.object(&key(o)).unwrap();
            assert_eq!(s.object(o).size, bytes.len() as u64, "{}", key(o));
            assert_eq!(s.object(o).crc32c, crc32c::crc32c(&bytes), "{}", key(o));
        }
        // The .log and both indexes are the local files, byte for byte.
        for (o, ext) in [
            (SegmentObject::Log, "log"),
            (SegmentObject::OffsetIndex, "index"),
            (SegmentObject::TimeIndex, "timeindex"),
        ] {
            let local = std::fs::read(dir.path().join(format!("{:020}.{ext}", s.base_offset)));
            assert_eq!(store.object(&key(o)), Some(local.unwrap()), "{}", key(o));
        }
        // The .txnindex: the local file when the segment has one, else empty.
        let txn = store.object(&key(SegmentObject::TxnIndex)).unwrap();
        match std::fs::read(dir.path().join(format!("{:020}.txnindex", s.base_offset))) {
            Ok(local) => {
                assert_eq!(txn, local);
                txn_objects += usize::from(!txn.is_empty());
            }
            Err(_) => assert!(txn.is_empty()),
        }
        // The producer state at the segment's end, and the epochs that start before it.
        let snapshot = store.object(&key(SegmentObject::ProducerSnapshot)).unwrap();
        let snapshot = decode_snapshot(&snapshot).unwrap();
        snapshot.check_at(s.end_offset).unwrap();
        let epochs = store.object(&key(SegmentObject::LeaderEpochs)).unwrap();
        let epochs = decode_leader_epochs(std::path::Path::new("remote"), &epochs).unwrap();
        let want: Vec<_> = log
            .replica()
            .leader_epochs()
            .into_iter()
            .filter(|e| e.start_offset < s.end_offset)
            .collect();
        assert_eq!(epochs, want);
    }
    assert_eq!(txn_objects, 1, "the aborted transaction's segment");
    // The remote segments hold the log's batches from its start, in order.
    let mut remote = Vec::new();
    for s in &manifest.segments {
        remote.extend(
            store
                .object(&SegmentObject::Log.key(P, s.base_offset, s.end_offset, s.upload_id))
                .unwrap(),
        );
    }
    let end = segments.last().unwrap().1;
    let mut local = Vec::new();
    let mut next = 0;
    while next < end {
        let bytes = log.read(next, 1 << 20).unwrap();
        for item in oncelog::format::BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            if b.base_offset() >= end {
                break;
            }
            local.extend_from_slice(b.as_bytes());
            next = b.last_offset() + 1;
        }
    }
    assert_eq!(remote, local);
    // Nothing but the manifests kept and the objects of the segments is in the store.
    assert_eq!(store.keys().len(), 6 * segments.len() + 3);
    log.close().unwrap();
}

#[test]
fn a_segment_already_remote_is_not_uploaded_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), true);
    let store = MemStore::new();
    let (base, _) = tier::uploadable_segments(&log)[0];
    tier::upload_segment(&log, &store, P, base).unwrap();
    let keys = store.keys();
    assert_eq!(
        tier::upload_segment(&log, &store, P, base).unwrap(),
        Uploaded::AlreadyRemote { generation: 1 }
    );
    assert_eq!(store.keys(), keys);
}

#[test]
fn an_upload_that_would_leave_a_hole_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), true);
    let store = MemStore::new();
    let segments = tier::uploadable_segments(&log);
    tier::upload_segment(&log, &store, P, segments[0].0).unwrap();
    let e = tier::upload_segment(&log, &store, P, segments[2].0).unwrap_err();
    assert!(
        matches!(e, TierError::NotContiguous { segment, remote_end }
            if segment == segments[2].0 && remote_end == segments[0].1),
        "{e}"
    );
    assert_eq!(e.kind(), "not_contiguous");
}

#[test]
fn what_is_not_sealed_durable_committed_and_stable_is_not_uploadable() {
    let dir = tempfile::tempdir().unwrap();
    let cfg = LogConfig::builder()
        .segment_bytes(8 * 1024)
        .flush_policy(FlushPolicy::Manual)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg).unwrap();
    for i in 0..60 {
        log.append(&batch(4, T0 + i, 200)).unwrap();
    }
    let store = MemStore::new();
    let not = |base: i64| match tier::upload_segment(&log, &store, P, base) {
        Err(TierError::NotUploadable { segment, reason }) if segment == base => reason,
        other => panic!("{other:?}"),
    };
    // Nothing flushed: no segment is durable.
    assert!(tier::uploadable_segments(&log).is_empty());
    assert!(matches!(
        not(0),
        NotUploadable::NotDurable { recovery_point: 0 }
    ));
    let bases = log.maintenance().segment_base_offsets();
    assert_eq!(not(*bases.last().unwrap()), NotUploadable::Active);
    assert_eq!(not(bases[0] + 1), NotUploadable::NoSuchSegment);
    log.flush().unwrap();
    assert_eq!(tier::uploadable_segments(&log).len(), bases.len() - 1);
    // An open transaction holds back the segments from its first offset on.
    log.append(&producer_batch(9, 0, true, T0)).unwrap();
    let open_at = log.log_end_offset() - 4;
    for i in 0..40 {
        log.append(&batch(4, T0 + i, 200)).unwrap();
    }
    log.flush().unwrap();
    let held = log
        .maintenance()
        .segment_base_offsets()
        .into_iter()
        .find(|&b| b > open_at)
        .unwrap();
    let segments = tier::uploadable_segments(&log);
    assert!(
        segments.iter().all(|&(_, end)| end <= open_at + 1),
        "{segments:?}"
    );
    assert!(matches!(not(held), NotUploadable::Unstable { .. }));
    assert!(store.keys().is_empty());
    log.close().unwrap();
    // A log that compacts is never uploaded.
    let cfg = LogConfig::builder()
        .segment_bytes(8 * 1024)
        .cleanup_policy(CleanupPolicy::Compact)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), cfg).unwrap();
    assert!(tier::uploadable_segments(&log).is_empty());
    let e = tier::upload_segment(&log, &store, P, 0).unwrap_err();
    assert!(
        matches!(
            e,
            TierError::NotUploadable {
                reason: NotUploadable::Compacted,
                ..
            }
        ),
        "{e}"
    );
    log.close().unwrap();
}

#[test]
fn a_partition_prefix_that_keys_cannot_hold_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), true);
    let store = MemStore::new();
    for bad in ["", "a//b", "/a", "a b", "../a"] {
        let e = tier::upload_segment(&log, &store, bad, 0).unwrap_err();
        assert_eq!(e.kind(), "bad_partition_prefix", "{bad:?}: {e}");
    }
    assert!(store.keys().is_empty());
}

/// Overwrites bytes of a file of the segment at `base`.
fn damage(dir: &std::path::Path, base: i64, ext: &str, at: u64, bytes: &[u8]) {
    use std::os::unix::fs::FileExt;
    let f = std::fs::OpenOptions::new()
        .write(true)
        .open(dir.join(format!("{base:020}.{ext}")))
        .unwrap();
    let at = if at == u64::MAX {
        f.metadata().unwrap().len() - 12
    } else {
        at
    };
    f.write_all_at(bytes, at).unwrap();
}

fn damaged(e: TierError, file_ext: &str, kind: &str) {
    match &e {
        TierError::Damaged { problems, .. } => assert!(
            problems
                .iter()
                .any(|p| p.kind == kind && p.file.extension().is_some_and(|x| x == file_ext)),
            "{e}"
        ),
        other => panic!("not Damaged: {other}"),
    }
    assert_eq!(e.kind(), "damaged_segment");
}

#[test]
fn a_segment_with_a_bad_batch_or_index_is_never_uploaded() {
    for (ext, at, bytes, kind) in [
        // A record's byte inside the second batch: its CRC fails.
        ("log", 1500, &[0xff_u8, 0xfe][..], "invalid_batch"),
        // The first index entry points one byte off a batch start (KAFKA-15401).
        ("index", 4, &[0, 0, 0, 1][..], "bad_index"),
        // The time index's last entry says another timestamp (an earlier one than the entry
        // before it: `u64::MAX` below stands for "the last entry").
        (
            "timeindex",
            u64::MAX,
            &[0, 0, 0, 0, 0, 0, 0, 1][..],
            "bad_index",
        ),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let log = filled_log(dir.path(), config(), true);
        let (base, _) = tier::uploadable_segments(&log)[1];
        damage(dir.path(), base, ext, at, bytes);
        let store = MemStore::new();
        let e = tier::upload_segment(&log, &store, P, base).unwrap_err();
        let text = e.to_string();
        assert!(text.contains(&format!("{base:020}.{ext}")), "{text}");
        damaged(e, ext, kind);
        assert!(store.keys().is_empty(), "{ext}: {:?}", store.keys());
        log.abandon();
    }
}

#[test]
fn a_put_that_fails_at_any_object_leaves_nothing_and_a_retry_uploads() {
    for nth in 1..=6 {
        for strike in [Strike::Before, Strike::After] {
            let dir = tempfile::tempdir().unwrap();
            let log = filled_log(dir.path(), config(), true);
            let store = MemStore::new();
            let (base, _) = tier::uploadable_segments(&log)[0];
            store.fail("put", nth, strike);
            let e = tier::upload_segment(&log, &store, P, base).unwrap_err();
            let step = SegmentObject::ALL[nth as usize - 1].name();
            match &e {
                TierError::Remote { step: s, error } => {
                    assert_eq!(s, &format!("put {step} of segment {base}"));
                    assert_eq!(error.op, "put");
                }
                other => panic!("{other}"),
            }
            assert_eq!(e.kind(), "remote");
            assert!(
                store.keys().is_empty(),
                "{nth} {strike:?}: {:?}",
                store.keys()
            );
            assert!(tier::read_manifest(&store, P).unwrap().is_none());
            assert!(matches!(
                tier::upload_segment(&log, &store, P, base).unwrap(),
                Uploaded::Uploaded { generation: 1, .. }
            ));
            log.abandon();
        }
    }
}

#[test]
fn a_manifest_put_that_succeeds_but_reports_failure_is_confirmed_by_reading_it_back() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), true);
    let store = MemStore::new();
    let (base, _) = tier::uploadable_segments(&log)[0];
    store.fail("put_if_absent", 1, Strike::After);
    let done = tier::upload_segment(&log, &store, P, base).unwrap();
    let Uploaded::Uploaded {
        segment,
        generation,
    } = done
    else {
        panic!("{done:?}")
    };
    assert_eq!(generation, 1);
    let manifest = tier::read_manifest(&store, P).unwrap().unwrap();
    assert_eq!(manifest.segments, vec![segment]);
}

#[test]
fn a_manifest_put_whose_outcome_cannot_be_known_keeps_the_objects_and_confirms_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), true);
    let store = MemStore::new();
    let segments = tier::uploadable_segments(&log);
    tier::upload_segment(&log, &store, P, segments[0].0).unwrap();
    // The put fails without writing, and reading the generation back fails too (the get of
    // the current manifest at the start is the first).
    store.fail("put_if_absent", 1, Strike::Before);
    store.fail("get", 2, Strike::Before);
    let e = tier::upload_segment(&log, &store, P, segments[1].0).unwrap_err();
    assert!(
        matches!(&e, TierError::Remote { step, .. } if step == "put_if_absent manifest generation 2"),
        "{e}"
    );
    // A manifest could name the objects: they stay (orphans, named by none), and the current
    // manifest still confirms only the first segment.
    assert_eq!(store.keys().len(), 6 * 2 + 1);
    let manifest = tier::read_manifest(&store, P).unwrap().unwrap();
    assert_eq!(manifest.generation, 1);
    assert_eq!(manifest.segments.len(), 1);
    // The retry uploads under a new id.
    let Uploaded::Uploaded {
        segment,
        generation: 2,
    } = tier::upload_segment(&log, &store, P, segments[1].0).unwrap()
    else {
        panic!()
    };
    assert!(store
        .keys()
        .iter()
        .any(|k| k.contains(&segment.upload_id.to_string())));
    assert_eq!(store.keys().len(), 6 * 3 + 2);
}

#[test]
fn two_writers_racing_for_a_manifest_generation_cannot_both_win() {
    let (dir_a, dir_b) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let (a, b) = (
        filled_log(dir_a.path(), config(), true),
        filled_log(dir_b.path(), config(), true),
    );
    let store = MemStore::new();
    let (base, _) = tier::uploadable_segments(&a)[0];
    // A second writer uploads the same segment just before the first one's conditional put.
    let racing = Racing::new(&store, |inner| {
        let won = tier::upload_segment(&b, inner, P, base).unwrap();
        assert!(matches!(won, Uploaded::Uploaded { generation: 1, .. }));
    });
    let e = tier::upload_segment(&a, &racing, P, base).unwrap_err();
    assert!(
        matches!(&e, TierError::ManifestConflict { generation: 1, segment, orphans_left: 0, .. }
            if *segment == base),
        "{e}"
    );
    assert_eq!(e.kind(), "manifest_conflict");
    // The winner's manifest stands, and only its objects are in the store.
    let manifest = tier::read_manifest(&store, P).unwrap().unwrap();
    assert_eq!(manifest.generation, 1);
    let id = manifest.segments[0].upload_id.to_string();
    let keys = store.keys();
    assert_eq!(keys.len(), 7);
    assert!(keys
        .iter()
        .filter(|k| k.contains("/segments/"))
        .all(|k| k.contains(&id)));
    // The loser, tried again, finds its segment remote.
    assert_eq!(
        tier::upload_segment(&a, &store, P, base).unwrap(),
        Uploaded::AlreadyRemote { generation: 1 }
    );
}

#[test]
fn a_bad_current_manifest_is_refused_never_skipped() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), true);
    let store = MemStore::new();
    let segments = tier::uploadable_segments(&log);
    tier::upload_segment(&log, &store, P, segments[0].0).unwrap();
    let good = store.object(&format!("{P}/manifest/{:020}", 1)).unwrap();
    // Generation 2, cut short: the highest generation is the current one, and it is refused.
    let key = format!("{P}/manifest/{:020}", 2);
    store.insert(&key, &good[..good.len() - 3]);
    for e in [
        tier::read_manifest(&store, P).unwrap_err(),
        tier::upload_segment(&log, &store, P, segments[1].0).unwrap_err(),
    ] {
        assert!(
            matches!(&e, TierError::BadManifest { key: k, .. } if *k == key),
            "{e}"
        );
        assert_eq!(e.kind(), "bad_manifest");
    }
    // Generation 1's bytes stored as generation 2: its generation line says otherwise.
    store.insert(&key, &good);
    let e = tier::read_manifest(&store, P).unwrap_err();
    assert!(
        matches!(&e, TierError::BadManifest { line: Some(3), .. }),
        "{e}"
    );
    // Something in the manifest folder that is not a generation.
    store.delete(&key).unwrap();
    store.insert(&format!("{P}/manifest/latest"), b"2");
    let e = tier::read_manifest(&store, P).unwrap_err();
    assert!(e.to_string().contains("manifest/latest"), "{e}");
    // The manifest of another partition prefix.
    store.delete(&format!("{P}/manifest/latest")).unwrap();
    store.insert(&format!("tier/orders-1/manifest/{:020}", 1), &good);
    let e = tier::read_manifest(&store, "tier/orders-1").unwrap_err();
    assert!(
        matches!(&e, TierError::BadManifest { line: Some(2), .. }),
        "{e}"
    );
}

#[test]
fn a_store_that_cannot_list_or_get_fails_the_upload_with_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), true);
    let store = MemStore::new();
    let segments = tier::uploadable_segments(&log);
    store.fail("list", 1, Strike::Before);
    let e = tier::upload_segment(&log, &store, P, segments[0].0).unwrap_err();
    assert!(
        matches!(&e, TierError::Remote { step, .. } if step == "list manifests"),
        "{e}"
    );
    tier::upload_segment(&log, &store, P, segments[0].0).unwrap();
    store.fail("get", 1, Strike::Before);
    let e = tier::upload_segment(&log, &store, P, segments[1].0).unwrap_err();
    assert!(
        matches!(&e, TierError::Remote { step, .. } if step == "get manifest generation 1"),
        "{e}"
    );
    assert!(e.to_string().contains("unavailable"), "{e}");
    assert_eq!(store.keys().len(), 7);
}

#[test]
fn old_manifest_generations_are_pruned() {
    let dir = tempfile::tempdir().unwrap();
    let log = filled_log(dir.path(), config(), true);
    let store = MemStore::new();
    upload_all(&log, &store);
    let n = tier::uploadable_segments(&log).len() as u64;
    let manifests: Vec<String> = store
        .keys()
        .into_iter()
        .filter(|k| k.contains("/manifest/"))
        .collect();
    let want: Vec<String> = (n - 2..=n)
        .map(|g| format!("{P}/manifest/{g:020}"))
        .collect();
    assert_eq!(manifests, want);
}
