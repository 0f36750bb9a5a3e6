//! Segment roll (docs/design.md, "Append" step 3) on size, time, a full index and
//! relative-offset overflow; file sizes at roll and close (docs/format.md, "Preallocation and
//! trimming"); Kafka's 4096-byte index rule (docs/format.md, "Offset index"); LogAppendTime and
//! leader-epoch stamping (docs/design.md, "Append"); `offset_for_timestamp` (docs/format.md, "Time
//! index").

use crate::common;

use std::path::Path;

use common::{
    batch, batch_layout, env_with, expected_index, log_files, parse, read_all, replicated_batch,
    small_config, TestClock, T0,
};
use oncelog::format::{BatchBuilder, BatchIter, TimestampType};
use oncelog::segment::{offset_index, time_index};
use oncelog::{AppendInfo, AppendOutcome, Log, LogConfig};

fn appended(outcome: AppendOutcome) -> AppendInfo {
    match outcome {
        AppendOutcome::Appended(info) => info,
        other => panic!("{other:?}"),
    }
}

fn file_len(dir: &Path, base: i64, ext: &str) -> u64 {
    std::fs::metadata(dir.join(format!("{base:020}.{ext}")))
        .unwrap()
        .len()
}

/// Checks a closed segment's three files: the log holds exactly whole batches starting at its
/// base, the offset index is Kafka's rule over those batches, the time index is monotonic and
/// ends with the segment's maximum. Returns the log bytes.
fn check_sealed_files(dir: &Path, base: i64, interval: usize) -> Vec<u8> {
    let data = std::fs::read(dir.join(format!("{base:020}.log"))).unwrap();
    let layout = batch_layout(&data);
    let logical: usize = layout.iter().map(|b| b.1).sum();
    assert_eq!(
        data.len(),
        logical,
        "segment {base}: trimmed to its batches"
    );
    assert_eq!(parse(&data).base_offset(), base, "base = first offset");
    let index = std::fs::read(dir.join(format!("{base:020}.index"))).unwrap();
    assert_eq!(index.len() % 8, 0);
    let entries: Vec<(i64, u32)> = offset_index::decode(&index, base)
        .map(|e| (e.offset, e.position))
        .collect();
    assert_eq!(entries, expected_index(&layout, interval), "segment {base}");
    let time = std::fs::read(dir.join(format!("{base:020}.timeindex"))).unwrap();
    assert_eq!(time.len() % 12, 0);
    let times: Vec<_> = time_index::decode(&time, base).collect();
    assert!(times
        .windows(2)
        .all(|w| w[0].timestamp < w[1].timestamp && w[0].offset <= w[1].offset));
    let (max_ts, max_off) =
        BatchIter::new(&data)
            .map(|i| i.unwrap().1)
            .fold((i64::MIN, 0), |m, b| {
                if b.max_timestamp() > m.0 {
                    (b.max_timestamp(), b.last_offset())
                } else {
                    m
                }
            });
    let last = times.last().expect("final time-index entry");
    assert_eq!(
        (last.timestamp, last.offset),
        (max_ts, max_off),
        "segment {base}"
    );
    data
}

#[test]
fn roll_on_size_keeps_segments_within_segment_bytes_and_trims_them() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config();
    let log = Log::open(dir.path(), config.clone()).unwrap();
    let mut sizes = Vec::new();
    let mut rolls = 0;
    for i in 0..300 {
        // Sizes vary so that segments end at different fill levels.
        let b = batch(1 + i % 7, T0 + i as i64, 100 + (i * 37) % 900);
        sizes.push(b.len());
        let before = log.maintenance().segment_count();
        let info = appended(log.append(&b).unwrap());
        if log.maintenance().segment_count() != before {
            rolls += 1;
            assert_eq!(info.segment_base_offset, info.first_offset);
            assert_eq!(info.position, 0);
            // The sealed segment is trimmed at once, the active one preallocated.
            let bases = log.maintenance().segment_base_offsets();
            let sealed = bases[bases.len() - 2];
            let sealed_len = file_len(dir.path(), sealed, "log") as usize;
            assert!(sealed_len + b.len() > config.segment_bytes, "rolled early");
            assert_eq!(
                batch_layout(&std::fs::read(dir.path().join(format!("{sealed:020}.log"))).unwrap())
                    .iter()
                    .map(|b| b.1)
                    .sum::<usize>(),
                sealed_len
            );
            assert_eq!(file_len(dir.path(), sealed, "index") % 8, 0);
            assert_eq!(file_len(dir.path(), sealed, "timeindex") % 12, 0);
        }
        let active = *log.maintenance().segment_base_offsets().last().unwrap();
        assert_eq!(
            file_len(dir.path(), active, "log") as usize,
            config.segment_bytes,
            "active segment preallocated"
        );
        assert_eq!(
            file_len(dir.path(), active, "index"),
            config.segment_index_bytes as u64
        );
        assert!(info.position as usize + b.len() <= config.segment_bytes);
    }
    assert!(rolls >= 5, "{rolls} rolls");
    let bases = log.maintenance().segment_base_offsets();
    let end = log.log_end_offset();
    log.close().unwrap();

    let names = log_files(dir.path());
    assert_eq!(names.len(), bases.len());
    for (name, base) in names.iter().zip(&bases) {
        assert_eq!(name.len(), 20 + 4, "{name}");
        assert_eq!(name, &format!("{base:020}.log"));
        let data = check_sealed_files(dir.path(), *base, 4096);
        assert!(data.len() <= config.segment_bytes);
    }
    // Segments are contiguous: each base follows the previous segment's last offset.
    let mut next = 0;
    for base in &bases {
        assert_eq!(*base, next);
        let data = std::fs::read(dir.path().join(format!("{base:020}.log"))).unwrap();
        next = batch_layout(&data).last().unwrap().2 + 1;
    }
    assert_eq!(next, end);
}

#[test]
fn roll_on_time_uses_the_batch_timestamp_against_the_first_batch() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0);
    let config = small_config()
        .into_builder()
        .segment_ms(1000)
        .build()
        .unwrap();
    let log = Log::open_in(env_with(clock.clone()), dir.path(), config.clone()).unwrap();
    let base_of = |outcome| appended(outcome).segment_base_offset;
    assert_eq!(base_of(log.append(&batch(2, T0, 10)).unwrap()), 0);
    // The wall clock is irrelevant while the segment's first timestamp is known.
    clock.set(T0 + 1_000_000);
    assert_eq!(base_of(log.append(&batch(1, T0 + 600, 10)).unwrap()), 0);
    // T - first = 1000 is not more than segment_ms: no roll (the first batch's max is T0+1).
    assert_eq!(base_of(log.append(&batch(1, T0 + 1001, 10)).unwrap()), 0);
    // An older timestamp never rolls.
    assert_eq!(base_of(log.append(&batch(1, T0 - 5000, 10)).unwrap()), 0);
    // 1001 past the first batch's max timestamp: roll.
    assert_eq!(base_of(log.append(&batch(1, T0 + 1002, 10)).unwrap()), 5);
    assert_eq!(log.maintenance().segment_base_offsets(), vec![0, 5]);
    // The new segment measures from its own first batch.
    assert_eq!(base_of(log.append(&batch(1, T0 + 2002, 10)).unwrap()), 5);
    assert_eq!(base_of(log.append(&batch(1, T0 + 2003, 10)).unwrap()), 7);
    log.close().unwrap();

    // After a reopen the active segment's first batch is known again from the file.
    let log = Log::open_in(env_with(clock.clone()), dir.path(), config).unwrap();
    assert_eq!(base_of(log.append(&batch(1, T0 + 3003, 10)).unwrap()), 7);
    assert_eq!(base_of(log.append(&batch(1, T0 + 3004, 10)).unwrap()), 9);
    assert_eq!(log.maintenance().segment_base_offsets(), vec![0, 5, 7, 9]);
}

#[test]
fn roll_on_a_full_index() {
    let dir = tempfile::tempdir().unwrap();
    // 3 offset-index entries, 2 time-index entries (full one slot early: after 1 entry).
    let config = LogConfig::builder()
        .segment_bytes(1 << 20)
        .segment_index_bytes(24)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    for i in 0..10 {
        // Over 4096 bytes each: every batch after a segment's first gets an index entry.
        log.append(&batch(1, T0 + i, 5000)).unwrap();
    }
    // batch 1 of a segment fills the time index; the next append rolls.
    assert_eq!(
        log.maintenance().segment_base_offsets(),
        vec![0, 2, 4, 6, 8]
    );
    log.close().unwrap();
    for base in [0, 2, 4, 6, 8] {
        let data = check_sealed_files(dir.path(), base, 4096);
        assert_eq!(batch_layout(&data).len(), 2);
        assert_eq!(file_len(dir.path(), base, "index"), 8);
        assert!(data.len() < 1 << 20);
    }
}

#[test]
fn roll_when_the_relative_offset_would_overflow_int32() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    let max = i32::MAX as i64;
    log.replica()
        .append(&replicated_batch(0, 1, T0, 10))
        .unwrap();
    // Last offset - base = i32::MAX still fits.
    let info = log
        .replica()
        .append(&replicated_batch(max - 1, 2, T0, 10))
        .unwrap()
        .unwrap();
    assert_eq!(info.segment_base_offset, 0);
    // One past does not: a new segment at the batch's first offset.
    let info = log
        .replica()
        .append(&replicated_batch(max + 1, 2, T0, 10))
        .unwrap()
        .unwrap();
    assert_eq!(info.segment_base_offset, max + 1);
    assert_eq!(log.maintenance().segment_base_offsets(), vec![0, max + 1]);
    // A client batch straddling base + i32::MAX in a fresh log starts its own segment too.
    let info = appended(log.append(&batch(3, T0, 10)).unwrap());
    assert_eq!(info.first_offset, max + 3);
    assert_eq!(log.log_end_offset(), max + 6);
    // Reads skip the gap.
    let bytes = log.read(5, 1).unwrap();
    assert_eq!(parse(&bytes).base_offset(), max - 1);
    assert_eq!(read_all(&log, usize::MAX).len(), 4);
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), max + 6);
    assert_eq!(log.maintenance().segment_base_offsets(), vec![0, max + 1]);
    let wide = replicated_batch(2 * max + 1, 2, T0, 10); // last - (max + 1) = max + 1
    let info = log.replica().append(&wide).unwrap().unwrap();
    // The new segment starts at the lowest base that indexes the batch in int32: the log end
    // (max + 6), not the batch's first offset as Kafka picks. Segments stay contiguous across a
    // replicated gap, so recovery can tell a gap from a lost tail.
    assert_eq!(info.segment_base_offset, max + 6);
    assert_eq!(info.first_offset, 2 * max + 1);
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert_eq!(log.log_end_offset(), 2 * max + 3);
}

#[test]
fn log_append_time_stamps_max_timestamp_and_the_attribute_with_a_valid_crc() {
    let dir = tempfile::tempdir().unwrap();
    let clock = TestClock::new(T0 + 777);
    let config = small_config()
        .into_builder()
        .message_timestamp_type(TimestampType::LogAppendTime)
        .build()
        .unwrap();
    let log = Log::open_in(env_with(clock.clone()), dir.path(), config).unwrap();
    log.replica().set_leader_epoch(42).unwrap();
    let sent = batch(3, T0, 10);
    let info = appended(log.append(&sent).unwrap());
    assert_eq!(info.append_time_ms, T0 + 777);
    clock.set(T0 + 999);
    log.append(&batch(1, T0, 10)).unwrap();
    let back = read_all(&log, usize::MAX);
    let b = parse(&back[0]);
    assert!(b.is_crc_valid());
    assert_eq!(b.timestamp_type(), TimestampType::LogAppendTime);
    assert_eq!(b.attributes() & 0x08, 0x08);
    assert_eq!(b.max_timestamp(), T0 + 777);
    assert_eq!(b.partition_leader_epoch(), 42);
    assert_eq!(b.base_timestamp(), T0, "record timestamps are kept");
    assert_eq!(parse(&back[1]).max_timestamp(), T0 + 999);
    let found = log.offset_for_timestamp(T0 + 800).unwrap().unwrap();
    assert_eq!((found.offset, found.timestamp), (3, T0 + 999));
    // Everything outside attributes, maxTimestamp and CRC is as sent.
    assert_eq!(back[0][23..35], sent[23..35]);
    assert_eq!(back[0][43..], sent[43..]);
}

#[test]
fn create_time_keeps_client_timestamps_fixes_a_wrong_max_and_stamps_the_epoch() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    log.replica().set_leader_epoch(9).unwrap();
    let sent = batch(2, T0, 10);
    log.append(&sent).unwrap();
    let mut lying = BatchBuilder::new().max_timestamp(T0 - 50);
    lying.append(T0 + 5, None, Some(b"x"), &[]);
    log.append(&lying.build().unwrap()).unwrap();
    // Replicated batches keep their own epoch.
    log.replica()
        .append(&replicated_batch(3, 1, T0, 10))
        .unwrap();
    let back = read_all(&log, usize::MAX);
    assert!(common::same_except_offset_and_epoch(&back[0], &sent));
    let (a, b, c) = (parse(&back[0]), parse(&back[1]), parse(&back[2]));
    assert_eq!(a.partition_leader_epoch(), 9);
    assert_eq!(a.timestamp_type(), TimestampType::CreateTime);
    assert_eq!(a.max_timestamp(), T0 + 1);
    assert_eq!(
        b.max_timestamp(),
        T0 + 5,
        "maxTimestamp = largest record timestamp"
    );
    assert!(b.is_crc_valid());
    assert_eq!(b.partition_leader_epoch(), 9);
    assert_eq!(c.partition_leader_epoch(), 7);
}

#[test]
fn offset_for_timestamp_finds_the_first_record_reaching_the_target() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    // Timestamps that go back and forth, over several segments and index entries.
    let mut stamps = Vec::new();
    for i in 0..200i64 {
        let ts = T0 + (i * 7919) % 1000 + i * 3;
        let info = appended(log.append(&batch(2, ts, 700)).unwrap());
        stamps.push((ts, info.first_offset)); // records (ts, first) and (ts + 1, first + 1)
    }
    assert!(log.maintenance().segment_count() > 2);
    let check = |log: &Log| {
        let mut targets: Vec<i64> = stamps
            .iter()
            .flat_map(|s| [s.0 - 1, s.0, s.0 + 1])
            .collect();
        targets.extend([i64::MIN, 0, T0 - 1]);
        for t in targets {
            // Kafka: the first batch whose max timestamp reaches t, then its first record that
            // does.
            let want = stamps.iter().find(|s| s.0 + 1 >= t).map(|&(ts, first)| {
                if ts >= t {
                    (ts, first)
                } else {
                    (ts + 1, first + 1)
                }
            });
            let got = log
                .offset_for_timestamp(t)
                .unwrap()
                .map(|f| (f.timestamp, f.offset));
            assert_eq!(got, want, "timestamp {t}");
        }
    };
    check(&log);
    log.close().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    check(&log);
}

#[test]
fn indexes_rebuilt_by_recovery_follow_the_same_rule_as_the_append_path() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    for i in 0..120 {
        log.append(&batch(2, T0 + i, 900)).unwrap();
    }
    log.abandon();
    // No flush: every segment is validated and its indexes rebuilt from position 0.
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert!(!log.recovery_report().indexes_rebuilt.is_empty());
    let bases = log.maintenance().segment_base_offsets();
    assert!(bases.len() > 1);
    log.close().unwrap();
    for base in bases {
        check_sealed_files(dir.path(), base, 4096);
    }
}

/// `Log::roll` seals the active segment at the log end, as an append's roll does; an empty
/// active segment is kept; the rolled layout survives a reopen.
#[test]
fn roll_seals_the_active_segment_at_the_log_end() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert!(
        !log.roll().unwrap(),
        "an empty active segment is not rolled"
    );
    log.append(&batch(3, T0, 10)).unwrap();
    assert!(log.roll().unwrap());
    assert_eq!(log.maintenance().segment_base_offsets(), vec![0, 3]);
    assert!(!log.roll().unwrap(), "the new active segment is empty");
    log.append(&batch(2, T0, 10)).unwrap();
    assert_eq!(log.maintenance().segment_base_offsets(), vec![0, 3]);
    let before = read_all(&log, 1 << 20);
    log.close().unwrap();
    let log = Log::open(dir.path(), LogConfig::default()).unwrap();
    assert_eq!(log.maintenance().segment_base_offsets(), vec![0, 3]);
    assert_eq!(read_all(&log, 1 << 20), before);
    log.close().unwrap();
    let e = log.roll().unwrap_err();
    assert_eq!(e.kind(), "closed");
}

/// What `roll` is for: compaction cleans sealed segments only, so without it the newest
/// duplicates of a key stay until enough appends fill the segment.
#[test]
fn roll_lets_compaction_reach_the_newest_records() {
    let dir = tempfile::tempdir().unwrap();
    let config = LogConfig::builder()
        .cleanup_policy(oncelog::CleanupPolicy::Compact)
        .compaction(oncelog::CompactionConfig::default().with_min_cleanable_dirty_ratio(0.0))
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    for v in [b"one".as_slice(), b"two", b"three"] {
        let mut b = BatchBuilder::new();
        b.append(T0, Some(b"key"), Some(v), &[]);
        log.append(&b.build().unwrap()).unwrap();
    }
    log.flush().unwrap();
    let nothing = log.maintenance().compact(T0).unwrap();
    assert_eq!(
        nothing.records_removed, 0,
        "only the active segment: nothing to clean"
    );
    log.roll().unwrap();
    log.flush().unwrap();
    let report = log.maintenance().compact(T0).unwrap();
    assert_eq!(report.records_removed, 2, "{report:?}");
    let values: Vec<Vec<u8>> = log
        .fetch(0, 1 << 20)
        .unwrap()
        .records()
        .map(|r| r.unwrap().value.unwrap().to_vec())
        .collect();
    assert_eq!(values, vec![b"three".to_vec()]);
}
