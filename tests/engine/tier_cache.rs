//! The read cache in front of a remote store (`tier::CachedStore`, docs/design.md, "Tiered
//! storage"): reads through it return the store's bytes whatever its budget, a consumer that
//! reads a range again does not go back to the store, and bytes found damaged are fetched
//! again rather than served from the cache.

use crate::common::T0;
use crate::common_tier::MemStore;
use oncelog::format::{BatchBuilder, BatchIter};
use oncelog::tier::{self, CachedStore, LocalRetention, RemoteStore, SegmentObject, TierError};
use oncelog::{Log, LogConfig};

const P: &str = "tier/orders-0";

/// A log of about 3 MiB in 1 MiB segments (several cache blocks each), all of its sealed
/// segments uploaded to `store` and deleted locally.
fn remote_log(dir: &std::path::Path, store: &dyn RemoteStore) -> Log {
    let config = LogConfig::builder()
        .segment_bytes(1 << 20)
        .index_interval_bytes(4096)
        .file_delete_delay_ms(0)
        .build()
        .unwrap();
    let log = Log::open(dir, config).unwrap();
    for i in 0..1500 {
        let mut b = BatchBuilder::new();
        for r in 0..(1 + i % 3) {
            let value = vec![(i + r) as u8; 500 + (i as usize * 37) % 700];
            b.append(T0 + i, Some(b"k"), Some(&value[..]), &[]);
        }
        log.append(&b.build().unwrap()).unwrap();
    }
    log.flush().unwrap();
    for (base, _) in tier::uploadable_segments(&log) {
        tier::upload_segment(&log, store, P, base).unwrap();
    }
    let all = LocalRetention::new(None, Some(0));
    tier::enforce_local_retention(&log, store, P, all, T0).unwrap();
    assert!(log.log_start_offset() > 1000, "{}", log.log_start_offset());
    log
}

/// What a consumer reading `[0, end)` with fetches of `max` bytes gets, fetch by fetch.
fn consume(log: &Log, store: &dyn RemoteStore, end: i64, max: usize) -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut next = 0;
    while next < end {
        let bytes = tier::read(log, store, P, next, max).unwrap();
        let (_, last) = BatchIter::new(&bytes).last().unwrap().unwrap();
        next = last.last_offset() + 1;
        out.push(bytes.to_vec());
    }
    out
}

#[test]
fn reads_through_the_cache_return_the_stores_bytes_whatever_its_budget() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = remote_log(dir.path(), &store);
    let start = log.log_start_offset();
    // No cache, a budget that holds 16 blocks (it evicts all the time) and one that holds all.
    for budget in [2 << 20, 4 << 20, 64 << 20] {
        let cached = CachedStore::new(&store, budget);
        for offset in (0..start).step_by(7) {
            for max in [1, 3000, 300 << 10, 2 << 20] {
                let want = tier::read(&log, &store, P, offset, max).unwrap();
                let got = tier::read(&log, &cached, P, offset, max).unwrap();
                assert!(got == want, "budget {budget}, offset {offset}, max {max}");
            }
        }
        assert!(cached.stats().bytes <= budget);
    }
    log.close().unwrap();
}

#[test]
fn a_consumer_reading_again_is_served_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = remote_log(dir.path(), &store);
    let start = log.log_start_offset();
    let cached = CachedStore::new(&store, 64 << 20);
    let plain = consume(&log, &store, start, 64 << 10);
    let ranges = store.calls("get_range");
    let first = consume(&log, &cached, start, 64 << 10);
    assert_eq!(first, plain);
    let fetched = store.calls("get_range") - ranges;
    // A 64 KiB fetch at a time, but the store asked for whole blocks: a few per segment.
    assert!(
        fetched < plain.len() as u64 / 2,
        "{fetched} ranges for {} fetches",
        plain.len()
    );
    let (gets, ranges) = (store.calls("get"), store.calls("get_range"));
    let again = consume(&log, &cached, start, 64 << 10);
    assert_eq!(again, plain);
    // The second time: no range, no index and no manifest fetched (listing the manifests is
    // what the store is still asked).
    assert_eq!(store.calls("get_range"), ranges);
    assert_eq!(store.calls("get"), gets);
    let stats = cached.stats();
    assert!(stats.hits > 0 && stats.evicted == 0, "{stats:?}");
    log.close().unwrap();
}

#[test]
fn damaged_bytes_are_not_served_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = remote_log(dir.path(), &store);
    let s = tier::read_manifest(&store, P).unwrap().unwrap().segments[0].clone();
    let key = |o: SegmentObject| o.key(P, s.base_offset, s.end_offset, s.upload_id);
    let want = tier::read(&log, &store, P, 0, 1 << 20).unwrap();
    // A bit flipped in transit (or in the store) of the .log and of the index.
    for which in [SegmentObject::Log, SegmentObject::OffsetIndex] {
        let cached = CachedStore::new(&store, 64 << 20);
        let good = store.object(&key(which)).unwrap();
        let mut bad = good.clone();
        bad[40] ^= 0x10;
        store.insert(&key(which), &bad);
        let Err(e) = tier::read(&log, &cached, P, 0, 1 << 20) else {
            panic!("{which:?}: a damaged object read");
        };
        assert!(matches!(e, TierError::RemoteCorrupt { .. }), "{e}");
        // Mended in the store: the next read fetches it again and is right.
        store.insert(&key(which), &good);
        let got = tier::read(&log, &cached, P, 0, 1 << 20).unwrap();
        assert!(got == want, "{which:?}: other bytes after the mend");
    }
    log.close().unwrap();
}

#[test]
fn segments_removed_by_remote_retention_are_not_read_from_the_cache() {
    let dir = tempfile::tempdir().unwrap();
    let store = MemStore::new();
    let log = remote_log(dir.path(), &store);
    let cached = CachedStore::new(&store, 64 << 20);
    tier::read(&log, &cached, P, 0, 1 << 20).unwrap();
    log.close().unwrap();
    // Total retention of one byte: every remote segment goes, through the cache.
    let config = LogConfig::builder()
        .segment_bytes(1 << 20)
        .retention_bytes(Some(1))
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    let r = tier::enforce_remote_retention(&log, &cached, P, T0).unwrap();
    assert!(!r.removed.is_empty());
    // The partition's log start moved up with the remote segments (in the manifest): below
    // it, nothing is read, from the cache or the store.
    let e = tier::read(&log, &cached, P, 0, 1 << 20).unwrap_err();
    assert_eq!(e.kind(), "below_log_start", "{e}");
    log.close().unwrap();
}
