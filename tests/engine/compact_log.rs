//! Key compaction rule by rule (docs/kafka-format.md §9.3): the latest value per key,
//! tombstones and their delete horizon, aborted transactional data and markers, the batches
//! kept for producers' sequences, dedup after compaction and after a restart, byte-for-byte
//! copies, recompressed batches, the dirty ratio, and the refusals (keyless records, a log that
//! does not compact, a corrupt compressed payload) that change nothing.

use crate::common;

use std::collections::BTreeMap;
use std::path::Path;

use common::{env_with, TestClock, T0};
use oncelog::format::{BatchBuilder, BatchIter, Compression, RecordBatch};
use oncelog::segment::txn_index;
use oncelog::{
    AppendError, AppendOutcome, CleanupPolicy, CompactionConfig, IsolationLevel, Log, LogConfig,
    RewriteError, TxnMarker,
};

type Rec = (i64, Option<Vec<u8>>, Option<Vec<u8>>);

const DAY: i64 = 24 * 60 * 60 * 1000;

fn config() -> LogConfig {
    LogConfig::builder()
        .segment_bytes(2048)
        .segment_index_bytes(4096)
        .index_interval_bytes(256)
        .cleanup_policy(CleanupPolicy::Compact)
        .file_delete_delay_ms(0)
        .build()
        .unwrap()
}

fn open_with(dir: &Path, cfg: LogConfig) -> Log {
    Log::open_in(env_with(TestClock::new(T0)), dir, cfg).unwrap()
}

/// One keyed record per batch; `value` None is a tombstone.
fn keyed(key: &str, value: Option<&str>, producer: Option<(i64, i32)>) -> Vec<u8> {
    let mut b = BatchBuilder::new();
    if let Some((pid, seq)) = producer {
        b = b.producer(pid, 0, seq);
    }
    b.append(T0, Some(key.as_bytes()), value.map(str::as_bytes), &[]);
    b.build().unwrap()
}

fn append(log: &Log, batch: &[u8]) -> (i64, i64) {
    match log.append(batch).unwrap() {
        AppendOutcome::Appended(a) => (a.first_offset, a.last_offset),
        other => panic!("{other:?}"),
    }
}

/// Every record readable from the log start, and every batch's (base, last, count).
fn contents(log: &Log) -> (Vec<Rec>, Vec<(i64, i64, i32)>) {
    let mut recs = Vec::new();
    let mut batches = Vec::new();
    let mut next = log.log_start_offset();
    while next < log.log_end_offset() {
        let bytes = log.read(next, 1 << 20).unwrap();
        assert!(!bytes.is_empty(), "empty read at {next}");
        for item in BatchIter::new(&bytes) {
            let (_, b) = item.unwrap();
            assert!(b.is_crc_valid(), "CRC of the batch at {}", b.base_offset());
            assert!(
                b.base_offset() >= next,
                "offsets go back at {}",
                b.base_offset()
            );
            batches.push((b.base_offset(), b.last_offset(), b.records_count()));
            let buf = b.records_buf().unwrap();
            for r in b.iter_records(&buf) {
                let r = r.unwrap();
                if !b.is_control() {
                    recs.push((
                        r.offset,
                        r.key.map(<[u8]>::to_vec),
                        r.value.map(<[u8]>::to_vec),
                    ));
                }
            }
            next = b.last_offset() + 1;
        }
    }
    (recs, batches)
}

/// Panics at the first difference, without printing whole logs.
#[track_caller]
fn same(seen: &[Rec], want: &[Rec]) {
    for (i, (a, b)) in seen.iter().zip(want).enumerate() {
        assert!(a == b, "record {i}: seen {a:?}, expected {b:?}");
    }
    assert_eq!(seen.len(), want.len(), "record counts");
}

/// What compaction up to `uncleanable` keeps of `written`: below it, the latest of each key
/// (below it) with a value, or a tombstone when `tombstones` is set; at and above it, all.
fn expected(written: &[Rec], uncleanable: i64, tombstones: bool) -> Vec<Rec> {
    let mut latest: BTreeMap<Vec<u8>, i64> = BTreeMap::new();
    for (o, k, _) in written.iter().filter(|r| r.0 < uncleanable) {
        latest.insert(k.clone().unwrap(), *o);
    }
    written
        .iter()
        .filter(|(o, k, v)| {
            *o >= uncleanable
                || (latest.get(k.as_ref().unwrap()) == Some(o) && (v.is_some() || tombstones))
        })
        .cloned()
        .collect()
}

#[test]
fn the_latest_value_of_each_key_stays_at_its_offset() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    let mut written = Vec::new();
    for i in 0..300 {
        let key = format!("k{}", i % 17);
        let value = format!("value {i}");
        let (o, _) = append(&log, &keyed(&key, Some(&value), None));
        written.push((o, Some(key.into_bytes()), Some(value.into_bytes())));
    }
    let before_segments = log.maintenance().segment_count();
    assert_eq!(
        log.maintenance().cleanable(T0).first_uncleanable_offset,
        0,
        "nothing durable yet"
    );
    log.flush().unwrap();
    let cleanable = log.maintenance().cleanable(T0);
    assert_eq!(cleanable.first_dirty_offset, 0);
    assert!(cleanable.due, "{cleanable:?}");
    assert!(cleanable.dirty_ratio > 0.99);
    let u = cleanable.first_uncleanable_offset;
    assert_eq!(u, *log.maintenance().segment_base_offsets().last().unwrap());

    let dry = log.maintenance().compact_dry_run(T0).unwrap();
    assert!(dry.dry_run);
    same(&contents(&log).0, &written);
    let report = log.maintenance().compact(T0).unwrap();
    assert_eq!(report.records_removed, dry.records_removed);
    assert_eq!(report.bytes_after, dry.bytes_after);
    assert_eq!(report.cleaned_to, u);
    assert!(report.records_removed > 200, "{report:?}");
    let (recs, batches) = contents(&log);
    same(&recs, &expected(&written, u, true));
    assert!(log.maintenance().segment_count() <= before_segments);
    assert!(report.bytes_after < report.bytes_before / 3, "{report:?}");
    // The batch ending the round is kept, empty, so the offsets end where they did.
    assert!(batches.iter().any(|b| b.1 == u - 1));
    assert_eq!(log.maintenance().cleanable(T0).first_dirty_offset, u);
    assert!(!log.maintenance().cleanable(T0).due);

    // The same after a restart; and a second compaction with nothing dirty changes nothing.
    log.close().unwrap();
    drop(log);
    let log = open_with(tmp.path(), config());
    same(&contents(&log).0, &expected(&written, u, true));
    let again = log.maintenance().compact(T0).unwrap();
    assert_eq!(again.passes, 0);
    same(&contents(&log).0, &expected(&written, u, true));
}

#[test]
fn a_small_key_map_cleans_in_several_passes_to_the_same_result() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .compaction(CompactionConfig::default().with_key_map_bytes(1024))
        .build()
        .unwrap();
    let log = open_with(tmp.path(), cfg);
    let mut written = Vec::new();
    for i in 0..400 {
        let key = format!("key-{:03}", (i * 7) % 61);
        let value = format!("v{i}");
        let (o, _) = append(&log, &keyed(&key, Some(&value), None));
        written.push((o, Some(key.into_bytes()), Some(value.into_bytes())));
    }
    log.flush().unwrap();
    let u = log.maintenance().cleanable(T0).first_uncleanable_offset;
    let report = log.maintenance().compact(T0).unwrap();
    assert!(report.passes > 1, "{report:?}");
    assert!(report.map_bytes <= 1024);
    same(&contents(&log).0, &expected(&written, u, true));
}

#[test]
fn tombstones_stay_until_their_horizon_then_go() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    let mut written: Vec<Rec> = Vec::new();
    fn put(written: &mut Vec<Rec>, log: &Log, key: &str, value: Option<&str>) {
        let (o, _) = append(log, &keyed(key, value, None));
        written.push((
            o,
            Some(key.as_bytes().to_vec()),
            value.map(|v| v.as_bytes().to_vec()),
        ));
    }
    put(&mut written, &log, "gone", Some("soon"));
    put(&mut written, &log, "gone", None);
    for i in 0..60 {
        put(
            &mut written,
            &log,
            &format!("x{}", i % 5),
            Some("filler filler filler filler"),
        );
    }
    log.flush().unwrap();
    let u = log.maintenance().cleanable(T0).first_uncleanable_offset;
    let r = log.maintenance().compact(T0).unwrap();
    assert_eq!(r.tombstones_kept, 1, "{r:?}");
    let (recs, _) = contents(&log);
    same(&recs, &expected(&written, u, true));
    // The tombstone's batch carries the horizon: now + delete.retention.ms.
    let tomb = read_batch(&log, written[1].0);
    assert!(tomb.0, "delete horizon set");
    assert_eq!(tomb.1, T0 + DAY);

    // New dirty data, cleaned before the horizon: the tombstone stays.
    for i in 0..60 {
        put(
            &mut written,
            &log,
            &format!("y{}", i % 5),
            Some("more filler filler filler"),
        );
    }
    log.flush().unwrap();
    let u2 = log.maintenance().cleanable(T0).first_uncleanable_offset;
    log.maintenance().compact(T0 + DAY - 1).unwrap();
    assert!(contents(&log).0.iter().any(|r| r.0 == written[1].0));
    for i in 0..60 {
        put(
            &mut written,
            &log,
            &format!("z{}", i % 5),
            Some("more filler filler filler"),
        );
    }
    log.flush().unwrap();
    let u3 = log.maintenance().cleanable(T0).first_uncleanable_offset;
    assert!(u3 > u2);
    let r = log.maintenance().compact(T0 + DAY).unwrap();
    assert_eq!(r.tombstones_removed, 1, "{r:?}");
    same(&contents(&log).0, &expected(&written, u3, false));
}

/// (has delete horizon, baseTimestamp) of the batch holding `offset`.
fn read_batch(log: &Log, offset: i64) -> (bool, i64) {
    let bytes = log.read(offset, 1 << 20).unwrap();
    for item in BatchIter::new(&bytes) {
        let (_, b) = item.unwrap();
        if b.base_offset() <= offset && offset <= b.last_offset() {
            return (b.has_delete_horizon(), b.base_timestamp());
        }
    }
    panic!("no batch holds {offset}");
}

#[test]
fn dedup_answers_duplicate_after_compaction_and_after_a_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    let mut sent = Vec::new();
    for seq in 0..80 {
        let batch = keyed(
            &format!("k{}", seq % 3),
            Some("idempotent value"),
            Some((42, seq)),
        );
        let offsets = append(&log, &batch);
        sent.push((batch, offsets));
    }
    // Another producer whose last batch is superseded by a later key: its batch is kept empty.
    let lonely = keyed("k0", Some("lonely"), Some((43, 0)));
    let lonely_at = append(&log, &lonely);
    for i in 0..40 {
        append(
            &log,
            &keyed(&format!("k{}", i % 3), Some("tail filler"), None),
        );
    }
    let report = log.maintenance().compact(T0).unwrap();
    assert!(report.batches_emptied >= 1, "{report:?}");
    let check = |log: &Log| {
        for (batch, offsets) in sent.iter().rev().take(5) {
            match log.append(batch).unwrap() {
                AppendOutcome::Duplicate(d) => {
                    assert_eq!((d.first_offset, d.last_offset), *offsets)
                }
                other => panic!("retry answered {other:?}"),
            }
        }
        match log.append(&lonely).unwrap() {
            AppendOutcome::Duplicate(d) => assert_eq!((d.first_offset, d.last_offset), lonely_at),
            other => panic!("retry answered {other:?}"),
        }
    };
    check(&log);
    // The producers' last batches survive in the log, as Kafka's broker would need them.
    let (_, batches) = contents(&log);
    assert!(batches.iter().any(|b| b.1 == sent[79].1 .1));
    assert!(batches.iter().any(|b| b.1 == lonely_at.1));
    // After an unclean restart too (the snapshot the round made durable).
    drop(log);
    let log = open_with(tmp.path(), config());
    check(&log);
    let next = keyed("k1", Some("next"), Some((42, 80)));
    assert!(matches!(
        log.append(&next).unwrap(),
        AppendOutcome::Appended(_)
    ));
}

fn txn_batch(pid: i64, seq: i32, key: &str) -> Vec<u8> {
    let mut b = BatchBuilder::new()
        .producer(pid, 0, seq)
        .transactional(true);
    b.append(T0, Some(key.as_bytes()), Some(b"txn value"), &[]);
    b.build().unwrap()
}

#[test]
fn aborted_data_goes_its_marker_stays_while_data_was_seen_then_gets_a_horizon() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    append(&log, &keyed("a", Some("before"), None));
    let aborted: Vec<(i64, i64)> = (0..3)
        .map(|s| append(&log, &txn_batch(9, s, &format!("t{s}"))))
        .collect();
    let abort = log.append_marker(&TxnMarker::abort(9, 0, 0)).unwrap();
    let committed = append(&log, &txn_batch(10, 0, "c"));
    let commit = log.append_marker(&TxnMarker::commit(10, 0, 0)).unwrap();
    for i in 0..50 {
        append(
            &log,
            &keyed(&format!("f{}", i % 4), Some("filler filler filler"), None),
        );
    }
    let committed_view = |log: &Log| -> Vec<i64> {
        let mut out = Vec::new();
        let mut next = log.log_start_offset();
        loop {
            let f = log
                .fetch_isolated(next, 1 << 20, IsolationLevel::ReadCommitted)
                .unwrap();
            if f.bytes.is_empty() {
                return out;
            }
            out.extend(f.records().map(|r| r.unwrap().offset));
            next = f.next_offset;
        }
    };
    let r = log.maintenance().compact(T0).unwrap();
    assert_eq!(r.aborted_records_removed, 3, "{r:?}");
    let (recs, batches) = contents(&log);
    assert!(recs.iter().all(|r| !aborted.iter().any(|a| a.0 == r.0)));
    assert!(
        recs.iter().any(|r| r.0 == committed.0),
        "committed data stays"
    );
    // The ABORT marker stays (this pass saw its data) and its .txnindex entry is carried.
    assert!(batches
        .iter()
        .any(|b| b.0 == abort.first_offset && b.2 == 1));
    let entries: Vec<_> = log
        .maintenance()
        .segment_base_offsets()
        .iter()
        .flat_map(|b| {
            let p = tmp.path().join(format!("{b:020}.txnindex"));
            std::fs::read(p)
                .map(|bytes| {
                    txn_index::decode(&bytes)
                        .map(|e| e.unwrap())
                        .collect::<Vec<_>>()
                })
                .unwrap_or_default()
        })
        .collect();
    assert_eq!(entries.len(), 1);
    assert_eq!(entries[0].producer_id, 9);
    assert_eq!(
        (entries[0].first_offset, entries[0].last_offset),
        (aborted[0].0, abort.first_offset)
    );
    // The producer's last (aborted) batch is kept as an empty header for its sequence.
    assert!(batches.iter().any(|b| b.1 == aborted[2].1 && b.2 == 0));
    let view = committed_view(&log);
    assert!(view.contains(&committed.0));

    // The next pass sees the empty batch kept for the producer's sequence, which is data of
    // the aborted transaction, so the ABORT marker stays; the COMMIT marker (its data is the
    // latest of its key, seen again) stays too; a read_committed consumer sees the same.
    for i in 0..50 {
        append(
            &log,
            &keyed(&format!("g{}", i % 4), Some("filler filler filler"), None),
        );
    }
    log.maintenance().compact(T0).unwrap();
    let (_, batches) = contents(&log);
    assert!(batches.iter().any(|b| b.0 == commit.first_offset));
    assert!(batches
        .iter()
        .any(|b| b.0 == abort.first_offset && b.2 == 1));
    let view2 = committed_view(&log);
    assert!(view
        .iter()
        .filter(|o| **o < commit.first_offset)
        .all(|o| view2.contains(o)));
}

#[test]
fn a_commit_marker_without_data_gets_a_horizon_and_goes_after_it() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    append(&log, &txn_batch(10, 0, "c"));
    let commit = log.append_marker(&TxnMarker::commit(10, 0, 0)).unwrap();
    // The transaction's one record is superseded by a later value of its key.
    append(&log, &keyed("c", Some("newer"), None));
    for i in 0..50 {
        append(
            &log,
            &keyed(&format!("f{}", i % 4), Some("filler filler filler"), None),
        );
    }
    log.maintenance().compact(T0).unwrap();
    // First pass: it saw the data batch (now gone), so the marker stays without a horizon.
    assert!(!read_batch(&log, commit.first_offset).0);
    for i in 0..50 {
        append(
            &log,
            &keyed(&format!("g{}", i % 4), Some("filler filler filler"), None),
        );
    }
    log.maintenance().compact(T0).unwrap();
    // Second pass: the producer's last batch (the data batch, kept as an empty header for its
    // sequence) is data of the transaction, so the marker stays. Once the producer expires,
    // the header goes; the next pass stamps the marker's horizon, a pass after it drops it.
    assert!(contents(&log).1.iter().any(|b| b.0 == commit.first_offset));
    assert_eq!(log.maintenance().expire_producers(T0 + 10 * DAY), 1);
    for round in 0..3 {
        for i in 0..50 {
            append(
                &log,
                &keyed(&format!("h{round}{}", i % 4), Some("filler filler"), None),
            );
        }
        log.maintenance().compact(T0 + 2 * DAY * round).unwrap();
    }
    let (_, batches) = contents(&log);
    assert!(
        !batches.iter().any(|b| b.0 == commit.first_offset),
        "the marker went after its horizon: {batches:?}"
    );
}

#[test]
fn unchanged_batches_are_copied_byte_for_byte_and_compressed_ones_keep_their_codec() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    let mut b = BatchBuilder::new().compression(Compression::Gzip);
    b.append(T0, Some(b"x"), Some(b"old x"), &[]);
    b.append(T0 + 1, Some(b"y"), Some(b"only y"), &[]);
    b.append(T0 + 2, Some(b"x"), Some(b"new x"), &[]);
    let (first, _) = append(&log, &b.build().unwrap());
    let unique = keyed("unique", Some("stays as it is"), None);
    let (u_at, _) = append(&log, &unique);
    let stored_unique = log.read(u_at, 1 << 20).unwrap();
    let stored_unique = RecordBatch::parse(&stored_unique)
        .unwrap()
        .as_bytes()
        .to_vec();
    for i in 0..50 {
        append(
            &log,
            &keyed(&format!("f{}", i % 4), Some("filler filler filler"), None),
        );
    }
    let r = log.maintenance().compact(T0).unwrap();
    assert!(r.batches_copied >= 1 && r.batches_rebuilt >= 1, "{r:?}");
    let bytes = log.read(first, 1 << 20).unwrap();
    let batch = RecordBatch::parse(&bytes).unwrap();
    assert_eq!(batch.compression(), Some(Compression::Gzip));
    assert_eq!(batch.base_offset(), first);
    assert_eq!(batch.last_offset(), first + 2, "lastOffsetDelta kept");
    assert_eq!(batch.records_count(), 2);
    let buf = batch.records_buf().unwrap();
    let offsets: Vec<i64> = batch
        .iter_records(&buf)
        .map(|r| r.unwrap().offset)
        .collect();
    assert_eq!(offsets, vec![first + 1, first + 2]);
    let again = log.read(u_at, 1 << 20).unwrap();
    assert_eq!(
        RecordBatch::parse(&again).unwrap().as_bytes(),
        &stored_unique[..]
    );
}

#[test]
fn bytes_held_across_a_compaction_keep_their_contents() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    for i in 0..100 {
        append(
            &log,
            &keyed(&format!("k{}", i % 3), Some("some value to keep"), None),
        );
    }
    let held = log.read(0, 1 << 20).unwrap();
    let copy = held.to_vec();
    log.maintenance().compact(T0).unwrap();
    assert_eq!(&held[..], &copy[..]);
    // A reader that read before the rewrite and goes on after it sees offsets increase.
    let last_held = BatchIter::new(&held)
        .map(|i| i.unwrap().1.last_offset())
        .last()
        .unwrap();
    let after = log.read(last_held + 1, 1 << 20).unwrap();
    let first_after = RecordBatch::parse(&after).unwrap();
    assert!(first_after.base_offset() > last_held);
}

#[test]
fn a_compacted_log_refuses_keyless_records_and_a_deleting_log_refuses_compaction() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    let mut b = BatchBuilder::new();
    b.append(T0, Some(b"k"), Some(b"v"), &[]);
    b.append(T0, None, Some(b"no key"), &[]);
    let err = log.append(&b.build().unwrap()).unwrap_err();
    assert!(
        matches!(err, AppendError::KeylessRecord { index: 1 }),
        "{err}"
    );
    assert_eq!(err.kind(), "keyless_record");
    assert_eq!(log.log_end_offset(), 0);
    drop(log);

    let tmp = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .cleanup_policy(CleanupPolicy::Delete)
        .build()
        .unwrap();
    let log = open_with(tmp.path(), cfg);
    append(&log, &keyed("k", Some("v"), None));
    let err = log.maintenance().compact(T0).unwrap_err();
    assert!(
        matches!(err, RewriteError::NotCompacted { policy: "delete" }),
        "{err}"
    );
    assert!(!log.maintenance().cleanable(T0).due);

    let ratio = CompactionConfig::default().with_min_cleanable_dirty_ratio(1.5);
    let refused = config()
        .into_builder()
        .compaction(ratio)
        .build()
        .unwrap_err();
    assert_eq!(refused.field, "min_cleanable_dirty_ratio");
    // Set directly, the same value reaches `open`, which refuses it too.
    let mut bad = config();
    bad.compaction = ratio;
    let e = Log::open_in(env_with(TestClock::new(T0)), tmp.path().join("x"), bad).unwrap_err();
    assert!(e.to_string().contains("min_cleanable_dirty_ratio"), "{e}");
}

#[test]
fn the_compaction_lag_and_the_last_stable_offset_bound_the_dirty_range() {
    let tmp = tempfile::tempdir().unwrap();
    let cfg = config()
        .into_builder()
        .compaction(CompactionConfig::default().with_min_compaction_lag_ms(1000))
        .build()
        .unwrap();
    let log = open_with(tmp.path(), cfg);
    for i in 0..100 {
        append(
            &log,
            &keyed(&format!("k{}", i % 3), Some("lagging value"), None),
        );
    }
    log.flush().unwrap();
    // Every record's timestamp is T0: too young at T0, old enough a second later.
    assert_eq!(log.maintenance().cleanable(T0).first_uncleanable_offset, 0);
    assert_eq!(log.maintenance().compact(T0).unwrap().records_removed, 0);
    let later = log.maintenance().cleanable(T0 + 1001);
    assert!(later.first_uncleanable_offset > 0);

    // An open transaction holds the dirty range below its first offset.
    let open_at = append(&log, &txn_batch(5, 0, "open"));
    for i in 0..60 {
        append(
            &log,
            &keyed(&format!("k{}", i % 3), Some("after the open txn"), None),
        );
    }
    log.flush().unwrap();
    let c = log.maintenance().cleanable(T0 + 1001);
    assert!(c.first_uncleanable_offset <= open_at.0, "{c:?}");
}

#[test]
fn a_corrupt_compressed_payload_stops_the_round_and_changes_nothing() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    let mut b = BatchBuilder::new().compression(Compression::Gzip);
    for i in 0..20 {
        b.append(
            T0,
            Some(format!("k{}", i % 2).as_bytes()),
            Some(&[b'z'; 40]),
            &[],
        );
    }
    append(&log, &b.build().unwrap());
    for i in 0..50 {
        append(
            &log,
            &keyed(&format!("f{}", i % 4), Some("filler filler filler"), None),
        );
    }
    log.close().unwrap();
    drop(log);
    // Damage the gzip stream and give the batch a matching CRC: only decompression sees it.
    let seg = tmp.path().join(format!("{:020}.log", 0));
    let mut bytes = std::fs::read(&seg).unwrap();
    let size = RecordBatch::parse(&bytes).unwrap().size();
    for byte in &mut bytes[75..size - 10] {
        *byte ^= 0x5a;
    }
    oncelog::format::batch::rewrite_crc(&mut bytes[..size]);
    std::fs::write(&seg, &bytes).unwrap();
    let before = common::dir_contents(tmp.path());
    let log = open_with(tmp.path(), config());
    let err = log.maintenance().compact(T0).unwrap_err();
    match &err {
        RewriteError::CompactionCorrupt { path, position, .. } => {
            assert_eq!(path, &seg);
            assert_eq!(*position, 0);
        }
        other => panic!("{other}"),
    }
    assert_eq!(err.kind(), "compaction_corrupt");
    let names: Vec<String> = std::fs::read_dir(tmp.path())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        names
            .iter()
            .all(|n| !n.contains("cleaned") && !n.contains("swap")),
        "{names:?}"
    );
    // The sealed segments are untouched (the active one is preallocated by the open).
    let active = format!(
        "{:020}.log",
        log.maintenance().segment_base_offsets().last().unwrap()
    );
    let sealed = |m: &BTreeMap<String, (usize, u32)>| -> Vec<(String, (usize, u32))> {
        m.iter()
            .filter(|(n, _)| n.ends_with(".log") && **n != active)
            .map(|(n, v)| (n.clone(), *v))
            .collect()
    };
    assert_eq!(sealed(&before), sealed(&common::dir_contents(tmp.path())));
}

#[test]
fn without_snapshots_the_retained_batches_rebuild_every_producers_last_sequence() {
    // What a Kafka broker opening the compacted directory does: rebuild producer state from
    // the batches. The batch holding each producer's last sequence survived the round.
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    let mut last = None;
    for seq in 0..60 {
        let pid = 40 + i64::from(seq % 3);
        let batch = keyed(
            &format!("k{}", seq % 2),
            Some("value value"),
            Some((pid, seq / 3)),
        );
        last = Some((batch.clone(), append(&log, &batch)));
    }
    for i in 0..40 {
        append(
            &log,
            &keyed(&format!("k{}", i % 2), Some("superseding"), None),
        );
    }
    let seqs: Vec<_> = (40..43)
        .map(|p| log.producer(p).unwrap().last_seq())
        .collect();
    log.maintenance().compact(T0).unwrap();
    log.close().unwrap();
    drop(log);
    for e in std::fs::read_dir(tmp.path()).unwrap() {
        let p = e.unwrap().path();
        if p.extension().is_some_and(|x| x == "snapshot") {
            std::fs::remove_file(p).unwrap();
        }
    }
    std::fs::remove_file(tmp.path().join("oncelog.checkpoint")).unwrap();
    let log = open_with(tmp.path(), config());
    let rebuilt: Vec<_> = (40..43)
        .map(|p| log.producer(p).unwrap().last_seq())
        .collect();
    assert_eq!(rebuilt, seqs);
    let (batch, offsets) = last.unwrap();
    match log.append(&batch).unwrap() {
        AppendOutcome::Duplicate(d) => assert_eq!((d.first_offset, d.last_offset), offsets),
        other => panic!("{other:?}"),
    }
}

#[test]
fn an_invalid_cleaner_offset_is_reset_to_the_log_start() {
    let tmp = tempfile::tempdir().unwrap();
    let log = open_with(tmp.path(), config());
    for i in 0..80 {
        append(
            &log,
            &keyed(&format!("k{}", i % 3), Some("value value value"), None),
        );
    }
    log.flush().unwrap();
    for bad in ["0\n1\n999999\n", "0\n1\n-5\n", "garbage", "0\n2\n1\n"] {
        std::fs::write(tmp.path().join(oncelog::CLEANER_OFFSET_FILE), bad).unwrap();
        assert_eq!(
            log.maintenance().cleanable(T0).first_dirty_offset,
            0,
            "{bad:?}"
        );
    }
    let r = log.maintenance().compact(T0).unwrap();
    let text = std::fs::read_to_string(tmp.path().join(oncelog::CLEANER_OFFSET_FILE)).unwrap();
    assert_eq!(text, format!("0\n1\n{}\n", r.cleaned_to));
    assert_eq!(
        log.maintenance().cleanable(T0).first_dirty_offset,
        r.cleaned_to
    );
}
