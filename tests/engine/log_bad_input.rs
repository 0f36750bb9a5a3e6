//! Bad input of every kind is refused with its typed error and writes nothing; bad
//! configuration, bad offsets and a closed log get their errors; damaged directories are
//! refused, cut or tolerated as the recovery mode says (docs/design.md: contracts 3 and 5,
//! "Recovery on open").

use crate::common;

use common::{batch, dir_contents, read_all, small_config, T0};
use oncelog::format::batch::rewrite_crc;
use oncelog::format::{BatchBuilder, BatchError, RecordError};
use oncelog::{
    AppendError, AppendInfo, AppendOutcome, FlushError, FlushPolicy, Log, LogConfig, OpenError,
    ReadError, RecoveryMode,
};
use oncelog::{BatchProblem, ConfigError, Damage};

fn with_crc(mut b: Vec<u8>) -> Vec<u8> {
    rewrite_crc(&mut b);
    b
}

/// Appends `bad` and checks that it was refused as `expect` says and that nothing changed.
fn refused(log: &Log, bad: &[u8], what: &str, expect: impl Fn(&AppendError) -> bool) {
    let (end, size, segments) = (
        log.log_end_offset(),
        log.size_bytes(),
        log.maintenance().segment_count(),
    );
    let before = read_all(log, usize::MAX);
    match log.append(bad) {
        Err(e) if expect(&e) => {}
        other => panic!("{what}: unexpected {other:?}"),
    }
    assert_eq!(log.log_end_offset(), end, "{what}: log end moved");
    assert_eq!(log.size_bytes(), size, "{what}: bytes written");
    assert_eq!(
        log.maintenance().segment_count(),
        segments,
        "{what}: rolled"
    );
    assert!(log.read(end, usize::MAX).unwrap().is_empty(), "{what}");
    assert_eq!(read_all(log, usize::MAX), before, "{what}: data changed");
}

fn batch_error(e: &AppendError) -> Option<&BatchError> {
    match e {
        AppendError::Batch(b) => Some(b),
        _ => None,
    }
}

#[test]
fn malformed_client_batches_are_refused_with_their_error_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    let config = small_config()
        .into_builder()
        .segment_bytes(8 * 1024)
        .max_message_bytes(4 * 1024)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    for i in 0..5 {
        log.append(&batch(3, T0 + i, 100)).unwrap();
    }
    let good = batch(2, T0, 10);
    // Record layout of `good`: byte 61 length, 62 attributes, 63 timestampDelta, 64 offsetDelta,
    // 65 keyLength (single-byte varints: everything is small).
    let record_size = batch(1, T0, 10).len() - 61;

    let mut truncated = good.clone();
    truncated.truncate(good.len() - 5);
    refused(&log, &truncated, "truncated", |e| {
        matches!(batch_error(e), Some(BatchError::Truncated { .. }))
    });
    refused(&log, &good[..40], "truncated header", |e| {
        matches!(batch_error(e), Some(BatchError::Truncated { .. }))
    });
    refused(&log, &[], "empty input", |e| {
        matches!(batch_error(e), Some(BatchError::Truncated { .. }))
    });

    let mut bad_crc = good.clone();
    *bad_crc.last_mut().unwrap() ^= 0x40;
    refused(&log, &bad_crc, "wrong CRC", |e| {
        matches!(batch_error(e), Some(BatchError::CrcMismatch { .. }))
    });
    let mut bad_crc_field = good.clone();
    bad_crc_field[18] ^= 1;
    refused(&log, &bad_crc_field, "wrong stored CRC", |e| {
        matches!(batch_error(e), Some(BatchError::CrcMismatch { .. }))
    });

    for magic in [0u8, 1] {
        let mut old = good.clone();
        old[16] = magic;
        refused(
            &log,
            &old,
            "old magic",
            |e| matches!(batch_error(e), Some(BatchError::UnsupportedMagic { magic: m }) if *m == magic as i8),
        );
    }

    let big = batch(1, T0, 5000);
    refused(
        &log,
        &big,
        "beyond max_message_bytes",
        |e| matches!(batch_error(e), Some(BatchError::TooLarge { size, max: 4096 }) if *size == big.len()),
    );

    let mut negative_key = good.clone();
    negative_key[65] = 3; // zigzag(-2): only -1 (null) is a legal negative length
    let negative_key = with_crc(negative_key);
    refused(&log, &negative_key, "negative key length", |e| {
        matches!(
            batch_error(e),
            Some(BatchError::InvalidRecord {
                index: 0,
                reason: RecordError::NegativeLength { .. },
                ..
            })
        )
    });

    let mut count = good.clone();
    count[57..61].copy_from_slice(&3i32.to_be_bytes());
    refused(&log, &with_crc(count), "count mismatch", |e| {
        matches!(
            batch_error(e),
            Some(BatchError::CountMismatch {
                last_offset_delta: 1,
                records_count: 3
            })
        )
    });

    let mut zero_count = good.clone();
    zero_count[57..61].copy_from_slice(&0i32.to_be_bytes());
    zero_count[23..27].copy_from_slice(&(-1i32).to_be_bytes());
    refused(&log, &with_crc(zero_count), "no records", |e| {
        matches!(batch_error(e), Some(BatchError::EmptyBatch))
    });

    let mut gap = good.clone();
    let second = 61 + record_size;
    assert_eq!(
        gap[second + 3],
        2,
        "second record's offsetDelta is zigzag(1)"
    );
    gap[second + 3] = 4; // zigzag(2): offsets 0, 2
    refused(&log, &with_crc(gap), "non-dense offset deltas", |e| {
        matches!(
            batch_error(e),
            Some(BatchError::InvalidRecord {
                index: 1,
                reason: RecordError::OffsetDelta {
                    expected: 1,
                    got: 2
                },
                ..
            })
        )
    });

    let mut based = good.clone();
    based[0..8].copy_from_slice(&5i64.to_be_bytes()); // not covered by the CRC
    refused(&log, &based, "baseOffset from a client", |e| {
        matches!(
            batch_error(e),
            Some(BatchError::NonZeroBaseOffset { base_offset: 5 })
        )
    });

    let mut control = BatchBuilder::new().control(true).transactional(true);
    control.append(T0, Some(&[0, 0, 0, 1]), Some(&[0, 0, 0, 0, 0, 0]), &[]);
    refused(&log, &control.build().unwrap(), "control batch", |e| {
        matches!(batch_error(e), Some(BatchError::ControlBatchFromClient))
    });

    let mut trailing = good.clone();
    trailing.extend_from_slice(&good);
    refused(
        &log,
        &trailing,
        "two batches",
        |e| matches!(batch_error(e), Some(BatchError::TrailingBytes { extra, .. }) if *extra == good.len()),
    );
    let mut trailing = good.clone();
    trailing.push(0);
    refused(&log, &trailing, "trailing byte", |e| {
        matches!(
            batch_error(e),
            Some(BatchError::TrailingBytes { extra: 1, .. })
        )
    });

    // A batch under max_message_bytes but over segment_bytes can never fit a segment.
    let log_big = {
        let d = tempfile::tempdir().unwrap();
        let l = Log::open(
            d.path(),
            small_config()
                .into_builder()
                .segment_bytes(1024)
                .build()
                .unwrap(),
        )
        .unwrap();
        (d, l)
    };
    let huge = batch(1, T0, 2000);
    refused(
        &log_big.1,
        &huge,
        "larger than a segment",
        |e| matches!(e, AppendError::RecordListTooLarge { size, segment_bytes: 1024 } if *size == huge.len()),
    );
    let mut huge_replicated = huge.clone();
    huge_replicated[0..8].copy_from_slice(&0i64.to_be_bytes());
    assert!(matches!(
        log_big.1.replica().append(&huge_replicated),
        Err(AppendError::RecordListTooLarge { .. })
    ));
    assert_eq!(log_big.1.size_bytes(), 0);

    // The log is still usable and the next offsets follow on.
    match log.append(&good).unwrap() {
        AppendOutcome::Appended(info) => assert_eq!(info.first_offset, 15),
        other => panic!("{other:?}"),
    }
    assert_eq!(log.log_end_offset(), 17);
}

#[test]
fn invalid_config_values_are_refused_naming_the_field_before_touching_the_disk() {
    // Each case sets one field of a default configuration directly, as a caller may (the
    // fields are public), so that `Log::open` gets the value `build()` would refuse.
    type Set = fn(&mut LogConfig);
    let cases: Vec<(Set, &str)> = vec![
        (|c| c.segment_bytes = 13, "segment_bytes"),
        (|c| c.segment_bytes = 1 << 31, "segment_bytes"),
        (|c| c.segment_index_bytes = 16, "segment_index_bytes"),
        (|c| c.segment_ms = 0, "segment_ms"),
        (|c| c.segment_jitter_ms = -5, "segment_jitter_ms"),
        (|c| c.max_message_bytes = 10, "max_message_bytes"),
        (
            |c| c.flush_policy = FlushPolicy::EveryMessages(0),
            "flush_policy",
        ),
    ];
    let tmp = tempfile::tempdir().unwrap();
    for (set, field) in cases {
        let mut config = LogConfig::default();
        set(&mut config);
        assert_eq!(
            config.clone().into_builder().build().map_err(|e| e.field),
            Err(field),
            "the builder refuses what open refuses"
        );
        let dir = tmp.path().join(field);
        match Log::open(&dir, config) {
            Err(OpenError::Config(ConfigError { field: f, .. })) => assert_eq!(f, field),
            other => panic!("{field}: {other:?}"),
        }
        assert!(
            !dir.exists(),
            "{field}: a refused open created the directory"
        );
    }
}

#[test]
fn replicated_batches_below_the_log_end_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    log.append(&batch(5, T0, 10)).unwrap();
    let size = log.size_bytes();
    for base in [0, 3, 4] {
        match log
            .replica()
            .append(&common::replicated_batch(base, 2, T0, 10))
        {
            Err(AppendError::UnexpectedAppendOffset {
                log_end_offset: 5,
                got,
            }) => assert_eq!(got, base),
            other => panic!("{other:?}"),
        }
    }
    // A good batch followed by a bad one: all are checked before any is written.
    let mut two = common::replicated_batch(5, 2, T0, 10);
    two.extend(common::replicated_batch(6, 2, T0, 10));
    assert!(matches!(
        log.replica().append(&two),
        Err(AppendError::UnexpectedAppendOffset {
            log_end_offset: 7,
            got: 6
        })
    ));
    let mut corrupt = common::replicated_batch(5, 2, T0, 10);
    *corrupt.last_mut().unwrap() ^= 1;
    assert!(matches!(
        log.replica().append(&corrupt),
        Err(AppendError::Batch(BatchError::CrcMismatch { .. }))
    ));
    assert_eq!(log.log_end_offset(), 5);
    assert_eq!(log.size_bytes(), size);
    // At the end, and past it (a gap is allowed for a follower), it is taken.
    let info = log
        .replica()
        .append(&common::replicated_batch(9, 2, T0, 10))
        .unwrap()
        .unwrap();
    assert_eq!((info.first_offset, info.last_offset), (9, 10));
    assert_eq!(log.log_end_offset(), 11);
}

#[test]
fn reads_outside_the_log_are_out_of_range() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    assert!(log.read(0, 100).unwrap().is_empty());
    log.append(&batch(4, T0, 10)).unwrap();
    for offset in [-1, 5, 6, i64::MAX, i64::MIN] {
        match log.read(offset, 100) {
            Err(ReadError::OffsetOutOfRange {
                offset: o,
                log_start_offset: 0,
                log_end_offset: 4,
            }) => assert_eq!(o, offset),
            other => panic!("{offset}: {other:?}"),
        }
    }
    assert!(log.read(4, 100).unwrap().is_empty());
    assert!(!log.read(3, 100).unwrap().is_empty());
}

#[test]
fn every_operation_after_close_says_closed() {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    log.append(&batch(2, T0, 10)).unwrap();
    log.close().unwrap();
    assert!(matches!(
        log.append(&batch(2, T0, 10)),
        Err(AppendError::Closed)
    ));
    assert!(matches!(
        log.replica()
            .append(&common::replicated_batch(2, 1, T0, 10)),
        Err(AppendError::Closed)
    ));
    assert!(matches!(log.read(0, 100), Err(ReadError::Closed)));
    assert!(matches!(log.flush(), Err(FlushError::Closed)));
    log.close().unwrap();
    assert_eq!(log.log_end_offset(), 2);
}

/// A log of several segments where the segment holding `recovery point - 1` continues past it,
/// abandoned after more unflushed appends. Returns (dir, recovery point, that segment's base).
fn abandoned_log_with_durable_prefix() -> (tempfile::TempDir, i64, i64) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    for i in 0..150 {
        log.append(&batch(4, T0 + i, 250)).unwrap();
    }
    log.flush().unwrap();
    let durable = log.log_end_offset();
    let segments = log.maintenance().segment_count();
    log.append(&batch(4, T0, 250)).unwrap();
    assert_eq!(
        log.maintenance().segment_count(),
        segments,
        "the flushed segment goes on"
    );
    for i in 0..100 {
        log.append(&batch(4, T0 + i, 250)).unwrap();
    }
    assert!(log.maintenance().segment_count() > segments + 1);
    let base = *log
        .maintenance()
        .segment_base_offsets()
        .iter()
        .rev()
        .find(|&&b| b < durable)
        .unwrap();
    log.abandon();
    (dir, durable, base)
}

/// Ten unflushed batches, abandoned (no close): returns where the last one went, for the test to
/// damage.
fn abandoned_log_of_ten_batches(dir: &std::path::Path) -> AppendInfo {
    let log = Log::open(dir, small_config()).unwrap();
    let mut last = None;
    for i in 0..10 {
        if let AppendOutcome::Appended(info) = log.append(&batch(3, T0 + i, 200)).unwrap() {
            last = Some(info);
        }
    }
    let last = last.unwrap();
    log.abandon();
    last
}

fn log_path(dir: &std::path::Path, base: i64) -> std::path::PathBuf {
    dir.join(format!("{base:020}.log"))
}

#[test]
fn a_flipped_byte_in_durable_data_is_refused_naming_file_and_position_and_changes_nothing() {
    let (dir, _durable, base) = abandoned_log_with_durable_prefix();
    let path = log_path(dir.path(), base);
    let mut data = std::fs::read(&path).unwrap();
    let first = oncelog::format::RecordBatch::parse(&data).unwrap().size();
    data[first + 100] ^= 0x10; // in the records of the second batch of the segment
    std::fs::write(&path, &data).unwrap();
    let before = dir_contents(dir.path());
    for mode in [
        RecoveryMode::TolerateTailCorruption,
        RecoveryMode::AbsoluteConsistency,
    ] {
        let config = small_config()
            .into_builder()
            .recovery_mode(mode)
            .build()
            .unwrap();
        match Log::open(dir.path(), config) {
            Err(OpenError::Refused {
                path: p,
                position,
                damage: Damage::Invalid(BatchProblem::Batch(BatchError::CrcMismatch { .. })),
                mode: m,
            }) => {
                assert_eq!(p, path);
                assert_eq!(position, Some(first));
                assert_eq!(m, mode);
            }
            other => panic!("{mode:?}: {other:?}"),
        }
        assert!(
            dir_contents(dir.path()) == before,
            "a refused open changed files"
        );
    }

    // Kafka's behaviour, on request: cut at the bad batch, drop everything after, report it.
    let config = small_config()
        .into_builder()
        .recovery_mode(RecoveryMode::TolerateAnyCorruption)
        .build()
        .unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    let report = log.recovery_report().clone();
    assert_eq!(report.truncations.len(), 1, "{report:?}");
    assert_eq!(report.truncations[0].path, path);
    assert_eq!(report.truncations[0].position, first);
    assert!(!report.segments_deleted.is_empty());
    let first_batch = oncelog::format::RecordBatch::parse(&data).unwrap();
    assert_eq!(log.log_end_offset(), first_batch.last_offset() + 1);
    assert_eq!(log.maintenance().segment_base_offsets().last(), Some(&base));
    read_all(&log, usize::MAX);
    log.append(&batch(1, T0, 10)).unwrap();
    assert_eq!(log.log_end_offset(), first_batch.last_offset() + 2);
}

#[test]
fn a_torn_tail_is_cut_and_reported_under_the_default_mode() {
    let dir = tempfile::tempdir().unwrap();
    let last = abandoned_log_of_ten_batches(dir.path());
    let path = log_path(dir.path(), last.segment_base_offset);
    let cut_at = last.position as u64 + 30;
    std::fs::OpenOptions::new()
        .write(true)
        .open(&path)
        .unwrap()
        .set_len(cut_at)
        .unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    let report = log.recovery_report().clone();
    assert!(!report.clean_shutdown);
    assert_eq!(report.truncations.len(), 1, "{report:?}");
    let t = &report.truncations[0];
    assert_eq!(t.path, path);
    assert_eq!(t.position, last.position as usize);
    assert_eq!(t.file_len, cut_at as usize);
    assert!(matches!(t.damage, Damage::Torn { .. }), "{t:?}");
    assert_eq!(log.log_end_offset(), last.first_offset);
    assert_eq!(read_all(&log, usize::MAX).len(), 9);
}

#[test]
fn a_zeroed_tail_is_not_reported_as_damage() {
    let dir = tempfile::tempdir().unwrap();
    let last = abandoned_log_of_ten_batches(dir.path());
    // The last batch never reached the disk: its pages read back as zeros, like the
    // preallocated space after it.
    let path = log_path(dir.path(), last.segment_base_offset);
    let mut data = std::fs::read(&path).unwrap();
    let size = data.len();
    data[last.position as usize..].fill(0);
    std::fs::write(&path, &data).unwrap();
    let log = Log::open(dir.path(), small_config()).unwrap();
    let report = log.recovery_report().clone();
    assert!(!report.clean_shutdown);
    assert!(report.truncations.is_empty(), "{report:?}");
    assert_eq!(log.log_end_offset(), last.first_offset);
    assert_eq!(read_all(&log, usize::MAX).len(), 9);
    assert!(size > last.position as usize);
}
