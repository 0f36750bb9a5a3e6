//! A partition whose local disk was lost, restored from the object store (docs/design.md,
//! "Tiered storage"): it continues at the remote end with every producer's window intact (a
//! retry of a batch that now exists only remotely is still a duplicate), its history reads back
//! from the store, and what cannot be restored is refused with a typed error.

use crate::common::T0;
use crate::common_tier::MemStore;
use oncelog::format::BatchBuilder;
use oncelog::tier::{self, SegmentObject, TierError};
use oncelog::{AppendOutcome, Log, LogConfig};

const P: &str = "tier/orders-0";

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(8 * 1024)
        .index_interval_bytes(512)
        .build()
        .unwrap()
}

fn batch(pid: i64, seq: i32, ts: i64) -> Vec<u8> {
    let mut b = BatchBuilder::new().producer(pid, 0, seq);
    for i in 0..4 {
        b.append(ts + i, Some(b"k"), Some(&[b'x'; 200][..]), &[]);
    }
    b.build().unwrap()
}

/// A log of two producers' batches, rolled, flushed and wholly uploaded; returns the batches
/// each append sent with the offsets it got, and what reads from 0 returned.
fn uploaded_log(dir: &std::path::Path, store: &MemStore) -> (Vec<(Vec<u8>, i64)>, Vec<u8>) {
    let log = Log::open(dir, config()).unwrap();
    log.replica().set_leader_epoch(4).unwrap();
    let mut sent = Vec::new();
    for i in 0..30 {
        let pid = 7 + (i % 2);
        let b = batch(pid, 4 * (i / 2) as i32, T0 + i);
        let AppendOutcome::Appended(info) = log.append(&b).unwrap() else {
            panic!()
        };
        sent.push((b, info.first_offset));
    }
    log.roll().unwrap();
    log.flush().unwrap();
    for (base, _) in tier::uploadable_segments(&log) {
        tier::upload_segment(&log, store, P, base).unwrap();
    }
    let manifest = tier::read_manifest(store, P).unwrap().unwrap();
    assert_eq!(manifest.remote_end(), Some(log.log_end_offset()));
    let history = log.read(0, 1 << 20).unwrap().to_vec();
    log.close().unwrap();
    (sent, history)
}

#[test]
fn a_partition_whose_disk_was_lost_continues_with_every_producers_window() {
    let store = MemStore::new();
    let lost = tempfile::tempdir().unwrap();
    let (sent, history) = uploaded_log(lost.path(), &store);
    drop(lost);
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    let restored = tier::restore(&log, &store, P).unwrap();
    let end = restored.log_end_offset;
    assert_eq!(restored.remote_start, 0);
    assert_eq!(restored.producers, 2);
    assert_eq!(restored.leader_epoch, Some(4));
    assert_eq!((log.log_start_offset(), log.log_end_offset()), (end, end));
    assert_eq!(log.replica().leader_epoch(), 4);
    // Each producer's last five batches exist only remotely, and a retry of any is a duplicate
    // with its original offsets.
    for (b, first) in &sent[sent.len() - 10..] {
        match log.append(b).unwrap() {
            AppendOutcome::Duplicate(d) => assert_eq!(d.first_offset, *first),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(log.log_end_offset(), end);
    // The producers go on where they were.
    let AppendOutcome::Appended(info) = log.append(&batch(7, 60, T0 + 100)).unwrap() else {
        panic!()
    };
    assert_eq!(info.first_offset, end);
    // The history reads back from the store.
    assert_eq!(tier::read(&log, &store, P, 0, 1 << 20).unwrap(), history);
    // And the restore survives a reopen.
    log.close().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    assert_eq!(log.log_start_offset(), end);
    assert!(log.append(&sent[sent.len() - 1].0).unwrap().is_duplicate());
    log.close().unwrap();
}

#[test]
fn only_an_empty_log_with_remote_segments_is_restored() {
    let store = MemStore::new();
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config()).unwrap();
    // Nothing remote.
    let e = tier::restore(&log, &store, P).unwrap_err();
    assert!(
        matches!(&e, TierError::NothingRemote { partition } if partition == P),
        "{e}"
    );
    log.close().unwrap();
    // A log that holds data is never replaced.
    let (_, _) = uploaded_log(dir.path(), &store);
    let log = Log::open(dir.path(), config()).unwrap();
    let end = log.log_end_offset();
    let e = tier::restore(&log, &store, P).unwrap_err();
    assert!(
        matches!(e, TierError::RestoreNotEmpty { log_end_offset, .. } if log_end_offset == end),
        "{e}"
    );
    assert_eq!(e.kind(), "restore_not_empty");
    assert_eq!(log.log_end_offset(), end);
    log.close().unwrap();
}

#[test]
fn a_damaged_producer_snapshot_or_epoch_object_is_never_restored() {
    for which in [SegmentObject::ProducerSnapshot, SegmentObject::LeaderEpochs] {
        let store = MemStore::new();
        let lost = tempfile::tempdir().unwrap();
        uploaded_log(lost.path(), &store);
        let last = tier::read_manifest(&store, P)
            .unwrap()
            .unwrap()
            .segments
            .pop()
            .unwrap();
        let key = which.key(P, last.base_offset, last.end_offset, last.upload_id);
        let mut bytes = store.object(&key).unwrap();
        let middle = bytes.len() / 2;
        bytes[middle] ^= 0x10;
        store.insert(&key, &bytes);
        let dir = tempfile::tempdir().unwrap();
        let log = Log::open(dir.path(), config()).unwrap();
        let e = tier::restore(&log, &store, P).unwrap_err();
        assert!(
            matches!(&e, TierError::RemoteCorrupt { key: k, .. } if *k == key),
            "{e}"
        );
        assert_eq!((log.log_start_offset(), log.log_end_offset()), (0, 0));
        log.close().unwrap();
    }
}
