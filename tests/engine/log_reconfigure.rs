//! `Log::reconfigure`: the settings Kafka changes on a live topic take effect on the open log
//! (the next append, roll or retention run); the others are refused, changing nothing.

use crate::common;

use std::sync::Arc;
use std::thread;

use common::{batch, T0};
use oncelog::format::{BatchBuilder, TimestampType};
use oncelog::{AppendError, CleanupPolicy, FlushPolicy, Log, LogConfig, RecoveryMode};

fn open(config: LogConfig) -> (tempfile::TempDir, Log) {
    let dir = tempfile::tempdir().unwrap();
    let log = Log::open(dir.path(), config).unwrap();
    (dir, log)
}

#[test]
fn a_lowered_max_message_bytes_refuses_the_next_append_and_a_raised_one_takes_it() {
    let (_dir, log) = open(LogConfig::default());
    log.append(&batch(1, T0, 2000)).unwrap();
    let lowered = log
        .config()
        .as_ref()
        .clone()
        .into_builder()
        .max_message_bytes(1000)
        .build()
        .unwrap();
    log.reconfigure(lowered).unwrap();
    assert_eq!(log.config().max_message_bytes, 1000);
    let e = log.append(&batch(1, T0, 2000)).unwrap_err();
    assert!(matches!(e, AppendError::Batch(_)), "{e:?}");
    assert_eq!(log.log_end_offset(), 1, "nothing written");
    log.reconfigure(LogConfig::default()).unwrap();
    log.append(&batch(1, T0, 2000)).unwrap();
    assert_eq!(log.log_end_offset(), 2);
}

#[test]
fn segment_settings_apply_from_the_next_roll() {
    let (_dir, log) = open(LogConfig::default());
    for _ in 0..4 {
        log.append(&batch(10, T0, 100)).unwrap();
    }
    assert_eq!(log.maintenance().segment_count(), 1);
    let small = LogConfig::builder().segment_bytes(4096).build().unwrap();
    log.reconfigure(small).unwrap();
    for _ in 0..8 {
        log.append(&batch(10, T0, 100)).unwrap();
    }
    assert!(
        log.maintenance().segment_count() > 2,
        "the smaller segment size rolls: {:?}",
        log.maintenance().segment_base_offsets()
    );
}

#[test]
fn retention_set_live_deletes_at_the_next_run() {
    let (_dir, log) = open(LogConfig::default());
    for _ in 0..3 {
        log.append(&batch(5, T0, 100)).unwrap();
        log.roll().unwrap();
    }
    log.flush().unwrap();
    let now = T0 + 10_000;
    assert!(log
        .maintenance()
        .enforce_retention(now)
        .unwrap()
        .deleted
        .is_empty());
    let retained = LogConfig::builder()
        .retention_ms(Some(1000))
        .build()
        .unwrap();
    log.reconfigure(retained).unwrap();
    let report = log.maintenance().enforce_retention(now).unwrap();
    assert_eq!(report.deleted.len(), 3, "{report:?}");
    assert_eq!(log.log_start_offset(), 15);
}

#[test]
fn a_switch_to_compaction_refuses_keyless_appends_at_once() {
    let (_dir, log) = open(LogConfig::default());
    let mut keyless = BatchBuilder::new();
    keyless.append(T0, None, Some(b"v"), &[]);
    let keyless = keyless.build().unwrap();
    log.append(&keyless).unwrap();
    let compacted = LogConfig::builder()
        .cleanup_policy(CleanupPolicy::Compact)
        .build()
        .unwrap();
    log.reconfigure(compacted).unwrap();
    let e = log.append(&keyless).unwrap_err();
    assert_eq!(e.kind(), "keyless_record", "{e:?}");
    log.append(&batch(1, T0, 10)).unwrap();
    let stamped = LogConfig::builder()
        .cleanup_policy(CleanupPolicy::Compact)
        .message_timestamp_type(TimestampType::LogAppendTime)
        .build()
        .unwrap();
    log.reconfigure(stamped).unwrap();
    assert_eq!(
        log.config().message_timestamp_type,
        TimestampType::LogAppendTime
    );
}

/// Every setting that shapes an open log's files, memory or recovery is refused by name, and
/// the refusal changes nothing; so is a configuration that fails validation.
#[test]
fn fixed_and_invalid_settings_are_refused_and_change_nothing() {
    let (_dir, log) = open(LogConfig::default());
    let before = log.config();
    let cases: Vec<(&str, LogConfig)> = vec![
        (
            "flush_policy",
            LogConfig::builder()
                .flush_policy(FlushPolicy::Always)
                .build()
                .unwrap(),
        ),
        (
            "recovery_mode",
            LogConfig::builder()
                .recovery_mode(RecoveryMode::AbsoluteConsistency)
                .build()
                .unwrap(),
        ),
        (
            "prefault_bytes",
            LogConfig::builder().prefault_bytes(0).build().unwrap(),
        ),
        (
            "recycled_segments",
            LogConfig::builder().recycled_segments(3).build().unwrap(),
        ),
        (
            "max_mapped_segments",
            LogConfig::builder().max_mapped_segments(7).build().unwrap(),
        ),
    ];
    for (field, config) in cases {
        let e = log.reconfigure(config).unwrap_err();
        assert_eq!(e.field, field, "{e}");
        assert!(
            e.to_string()
                .contains("cannot change while the log is open"),
            "{e}"
        );
        assert_eq!(log.config(), before, "{field}: nothing changed");
    }
    let mut invalid = LogConfig::default();
    invalid.segment_bytes = 1;
    let e = log.reconfigure(invalid).unwrap_err();
    assert_eq!(e.field, "segment_bytes");
    assert_eq!(log.config(), before);
}

/// Appends racing reconfigurations: each append is judged by one configuration, whole.
#[test]
fn appends_racing_reconfigurations_see_one_configuration_each() {
    let (_dir, log) = open(LogConfig::default());
    let log = Arc::new(log);
    let appenders: Vec<_> = (0..2)
        .map(|_| {
            let log = Arc::clone(&log);
            thread::spawn(move || {
                let (mut ok, mut refused) = (0, 0);
                for _ in 0..500 {
                    match log.append(&batch(1, T0, 1500)) {
                        Ok(_) => ok += 1,
                        Err(AppendError::Batch(_)) => refused += 1,
                        Err(e) => panic!("{e:?}"),
                    }
                }
                (ok, refused)
            })
        })
        .collect();
    for i in 0..200 {
        let limit = if i % 2 == 0 { 1000 } else { 1 << 20 };
        let config = LogConfig::builder()
            .max_message_bytes(limit)
            .build()
            .unwrap();
        log.reconfigure(config).unwrap();
    }
    let (ok, refused) = appenders
        .into_iter()
        .map(|a| a.join().unwrap())
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d));
    assert_eq!(ok + refused, 1000);
    assert_eq!(
        log.log_end_offset(),
        ok as i64,
        "every accepted append written once"
    );
}
