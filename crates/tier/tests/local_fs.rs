//! `ObjectStoreRemote` over object_store's local file system: each call of the
//! `RemoteStore` contract, and a real log's sealed segments uploaded through it and read back
//! byte for byte, from the store and from the files it wrote.

use std::path::Path;
use std::sync::{Arc, Barrier};

use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::tier::{
    self, Created, RemoteErrorKind, RemoteStore, SegmentObject, TierError, Uploaded,
};
use oncelog::{Log, LogConfig, TxnMarker};
use oncelog_tier::{ObjectStoreRemote, SetupError};

const T0: i64 = 1_700_000_000_000;
const P: &str = "tier/orders-0";

fn store(root: &Path) -> ObjectStoreRemote {
    ObjectStoreRemote::local(root).unwrap()
}

#[test]
fn every_call_keeps_the_remote_store_contract() {
    let root = tempfile::tempdir().unwrap();
    let s = store(root.path());
    s.put("a/b/one", b"first").unwrap();
    s.put("a/b/one", b"hello world").unwrap();
    assert_eq!(s.get("a/b/one").unwrap(), b"hello world");
    assert_eq!(
        std::fs::read(root.path().join("a/b/one")).unwrap(),
        b"hello world"
    );
    assert_eq!(s.get_range("a/b/one", 6..11).unwrap(), b"world");
    let e = s.get_range("a/b/one", 6..40).unwrap_err();
    assert_eq!((e.op, e.kind), ("get_range", RemoteErrorKind::Other), "{e}");
    let e = s.get("a/b/two").unwrap_err();
    assert_eq!(
        (e.op, e.kind, e.key.as_str()),
        ("get", RemoteErrorKind::NotFound, "a/b/two")
    );
    assert_eq!(s.put_if_absent("a/m/1", b"x").unwrap(), Created::Created);
    assert_eq!(
        s.put_if_absent("a/m/1", b"y").unwrap(),
        Created::AlreadyExists
    );
    assert_eq!(s.get("a/m/1").unwrap(), b"x");
    let mut listed: Vec<(String, u64)> = s
        .list("a")
        .unwrap()
        .into_iter()
        .map(|o| (o.key, o.size))
        .collect();
    listed.sort();
    assert_eq!(listed, vec![("a/b/one".into(), 11), ("a/m/1".into(), 1)]);
    assert_eq!(s.list("a/m").unwrap().len(), 1);
    assert!(s.list("nothing/here").unwrap().is_empty());
    s.delete("a/b/one").unwrap();
    s.delete("a/b/one").unwrap();
    assert_eq!(
        s.get("a/b/one").unwrap_err().kind,
        RemoteErrorKind::NotFound
    );
    // A key object_store cannot hold is refused, naming it.
    let e = s.put("a//b", b"x").unwrap_err();
    assert_eq!(
        (e.op, e.kind, e.key.as_str()),
        ("put", RemoteErrorKind::Other, "a//b")
    );
}

#[test]
fn a_put_larger_than_a_part_goes_in_parts_and_reads_back_whole() {
    let root = tempfile::tempdir().unwrap();
    let s = store(root.path());
    let big: Vec<u8> = (0..(20 << 20) + 17)
        .map(|i: u32| (i * 7 % 251) as u8)
        .collect();
    s.put("big/object", &big).unwrap();
    assert_eq!(s.get("big/object").unwrap(), big);
    assert_eq!(
        s.get_range("big/object", 9 << 20..(9 << 20) + 5).unwrap(),
        &big[9 << 20..(9 << 20) + 5]
    );
    assert_eq!(s.list("big").unwrap()[0].size, big.len() as u64);
}

#[test]
fn of_many_threads_creating_one_key_exactly_one_wins() {
    let root = tempfile::tempdir().unwrap();
    let s = Arc::new(store(root.path()));
    let start = Arc::new(Barrier::new(8));
    let threads: Vec<_> = (0..8u8)
        .map(|i| {
            let (s, start) = (Arc::clone(&s), Arc::clone(&start));
            std::thread::spawn(move || {
                start.wait();
                (
                    i,
                    s.put_if_absent("p/manifest/00000000000000000001", &[i])
                        .unwrap(),
                )
            })
        })
        .collect();
    let results: Vec<(u8, Created)> = threads.into_iter().map(|t| t.join().unwrap()).collect();
    let winners: Vec<u8> = results
        .iter()
        .filter(|(_, c)| *c == Created::Created)
        .map(|(i, _)| *i)
        .collect();
    assert_eq!(winners.len(), 1, "{results:?}");
    assert_eq!(
        s.get("p/manifest/00000000000000000001").unwrap(),
        vec![winners[0]]
    );
}

#[test]
fn a_root_that_is_not_a_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("file");
    std::fs::write(&file, b"x").unwrap();
    match ObjectStoreRemote::local(&file) {
        Err(e @ SetupError::Root { .. }) => assert!(e.to_string().contains("file"), "{e}"),
        other => panic!("{other:?}"),
    }
}

fn producer_batch(pid: i64, seq: i32, transactional: bool, ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .producer(pid, 0, seq)
        .transactional(transactional);
    for i in 0..4 {
        b.append(ts + i, Some(b"k"), Some(&[b'x'; 300][..]), &[]);
    }
    b.build().unwrap()
}

#[test]
fn a_real_logs_sealed_segments_upload_and_read_back_byte_for_byte() {
    let (data, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cfg = LogConfig::builder()
        .segment_bytes(16 * 1024)
        .index_interval_bytes(1024)
        .build()
        .unwrap();
    let log = Log::open(data.path(), cfg).unwrap();
    log.replica().set_leader_epoch(1).unwrap();
    let mut seq = 0;
    for i in 0..120 {
        log.append(&producer_batch(11, seq, false, T0 + i)).unwrap();
        seq += 4;
        if i == 50 {
            log.append(&producer_batch(12, 0, true, T0 + i)).unwrap();
            log.append_marker(&TxnMarker::abort(12, 0, 0)).unwrap();
            log.replica().set_leader_epoch(2).unwrap();
        }
    }
    log.flush().unwrap();
    let s = store(remote.path());
    let segments = tier::uploadable_segments(&log);
    assert!(segments.len() >= 5, "{segments:?}");
    for &(base, _) in &segments {
        match tier::upload_segment(&log, &s, P, base).unwrap() {
            Uploaded::Uploaded { .. } => {}
            other => panic!("{other:?}"),
        }
    }
    let manifest = tier::read_manifest(&s, P).unwrap().unwrap();
    assert_eq!(manifest.generation, segments.len() as u64);
    for r in &manifest.segments {
        for (o, ext) in [
            (SegmentObject::Log, "log"),
            (SegmentObject::OffsetIndex, "index"),
            (SegmentObject::TimeIndex, "timeindex"),
        ] {
            let key = o.key(P, r.base_offset, r.end_offset, r.upload_id);
            let local =
                std::fs::read(data.path().join(format!("{:020}.{ext}", r.base_offset))).unwrap();
            // Through the store, and as the file object_store wrote under the root.
            assert_eq!(s.get(&key).unwrap(), local, "{key}");
            assert_eq!(
                std::fs::read(remote.path().join(&key)).unwrap(),
                local,
                "{key}"
            );
            assert_eq!(r.object(o).crc32c, crc32c_of(&local));
        }
        for o in SegmentObject::ALL {
            let key = o.key(P, r.base_offset, r.end_offset, r.upload_id);
            let bytes = s.get(&key).unwrap();
            assert_eq!(bytes.len() as u64, r.object(o).size, "{key}");
            assert_eq!(crc32c_of(&bytes), r.object(o).crc32c, "{key}");
        }
        // A range of the remote .log: the batch an offset index entry points at.
        let log_key = SegmentObject::Log.key(P, r.base_offset, r.end_offset, r.upload_id);
        let whole = s.get(&log_key).unwrap();
        let (at, first) = BatchIter::new(&whole).nth(1).unwrap().unwrap();
        let size = first.as_bytes().len() as u64;
        assert_eq!(
            s.get_range(&log_key, at as u64..at as u64 + size).unwrap(),
            first.as_bytes()
        );
        // Read through the log, the same batches.
        let fetched = log
            .read(first.base_offset(), first.as_bytes().len())
            .unwrap();
        assert_eq!(&fetched[..first.as_bytes().len()], first.as_bytes());
    }
    let txn_objects = manifest
        .segments
        .iter()
        .filter(|r| r.object(SegmentObject::TxnIndex).size > 0)
        .count();
    assert_eq!(txn_objects, 1);
    // Uploading again does nothing.
    assert_eq!(
        tier::upload_segment(&log, &s, P, segments[0].0).unwrap(),
        Uploaded::AlreadyRemote {
            generation: segments.len() as u64
        }
    );
    log.close().unwrap();
}

#[test]
fn a_manifest_generation_another_writer_left_undecodable_is_refused_not_overwritten() {
    let (data, remote) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let cfg = LogConfig::builder()
        .segment_bytes(8 * 1024)
        .build()
        .unwrap();
    let log = Log::open(data.path(), cfg).unwrap();
    for i in 0..60 {
        log.append(&producer_batch(1, i * 4, false, T0 + i as i64))
            .unwrap();
    }
    log.flush().unwrap();
    let s = store(remote.path());
    // Another writer's generation 1 is already there (its bytes do not matter to the put).
    s.put_if_absent(&format!("{P}/manifest/{:020}", 1), b"another writer")
        .unwrap();
    let (base, _) = tier::uploadable_segments(&log)[0];
    let e = tier::upload_segment(&log, &s, P, base).unwrap_err();
    // The current manifest is that writer's, and it does not decode: refused, never skipped.
    assert!(matches!(e, TierError::BadManifest { .. }), "{e}");
    assert!(s.list(&format!("{P}/segments")).unwrap().is_empty());
    assert_eq!(
        s.get(&format!("{P}/manifest/{:020}", 1)).unwrap(),
        b"another writer"
    );
    log.close().unwrap();
}

fn crc32c_of(bytes: &[u8]) -> u32 {
    // CRC-32C (Castagnoli), bitwise: the test's own, independent of the library's.
    let mut crc = !0u32;
    for &b in bytes {
        crc ^= b as u32;
        for _ in 0..8 {
            crc = if crc & 1 != 0 {
                (crc >> 1) ^ 0x82F6_3B78
            } else {
                crc >> 1
            };
        }
    }
    !crc
}

#[test]
fn a_store_dropped_on_an_async_task_shuts_its_runtime_down_without_a_panic() {
    // A broker shutting down drops its store on a task of its own runtime, where dropping a
    // Tokio runtime the ordinary way panics ("Cannot drop a runtime in a context where
    // blocking is not allowed").
    let root = tempfile::tempdir().unwrap();
    let s = store(root.path());
    s.put("k", b"v").unwrap();
    let outer = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    outer.block_on(async move { drop(s) });
}
